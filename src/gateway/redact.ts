/**
 * Read-only roles do not read secrets: environment values in the answers that carry
 * them are redacted for the roles tenancy.yaml's `redact.env` names (by default
 * readonly and auditor, every value). `KEY=value` becomes `KEY=[REDACTED]`, the
 * marker the audit trail writes (src/audit/redact.ts, whose entry rule and sensitive
 * names this reuses): the names stay, so that an operator still sees what is set.
 *
 * Applied by the pipeline after the tenancy stage, whatever it decided: unscoped roles
 * (auditor) are answered without a tenancy filter, and a tenant's narrowed answer is
 * redacted after it is narrowed. forward.ts filters 2xx JSON answers only; errors and
 * HEAD answers carry no environment.
 *
 * Every field named `Env` (any letter case) anywhere in these answers is redacted, so
 * that nested and repeated copies are covered without a path per API version: a
 * container's Config.Env, an image's Config.Env and ContainerConfig.Env (build time),
 * a service's Spec and PreviousSpec TaskTemplate.ContainerSpec.Env, a task's
 * Spec.ContainerSpec.Env, a plugin's Settings.Env (`K=V`) and Config.Env (objects with
 * Name and Value).
 *
 * An image also records how it was built, values included: the classic builder keeps
 * `#(nop)  ENV K=V`, `ARG K=default` and a RUN's build arguments (`|1 TOKEN=x /bin/sh -c
 * ...`) in its history's CreatedBy and in ContainerConfig.Cmd, BuildKit `ENV K=V` and
 * `RUN |1 TOKEN=x ...` in CreatedBy. In image answers (ImageInspect, ImageHistory and
 * Podman's, whose inspect carries History[].created_by) those values are redacted as
 * well. A build argument's value written with spaces in a CreatedBy string cannot be
 * told from the command that follows it (the array form in ContainerConfig.Cmd can):
 * its first word is redacted.
 *
 * Secret and config references (ContainerSpec.Secrets[].SecretName,
 * SecretID, File) are kept, as the audit trail keeps them: they name a secret without
 * holding it, and the engine never returns a secret's data.
 */
import type { Operation } from '../api/catalog/operations'
import { REDACTED, redactEnvEntry, sensitiveEnvName } from '../audit/redact'
import { globPattern, type EnvRedaction, type TenancySettings } from '../policy/tenancy'
import type { Identity } from './authenticate'
import type { ResponseFilter } from './exchange'
import { withoutJoinTokens } from './tenancy/responses'

/**
 * The operations whose JSON answers can carry environment values. Lists are included
 * although the engine's lists (ContainerList, also with ?size=1 and ?all=1, API 1.24 to
 * 1.56) hold no environment today: should a version add one, it is redacted, not leaked.
 */
export const ENV_ANSWERS: ReadonlySet<string> = new Set([
  'ContainerInspect', 'ContainerList',
  'ImageInspect', 'ImageHistory',
  'ExecInspect',
  'ServiceInspect', 'ServiceList',
  'TaskInspect', 'TaskList',
  'PluginInspect', 'PluginList',
  // Podman's own API (catalog/libpod.ts): its inspects carry Config.Env too.
  'ContainerInspectLibpod', 'ContainerListLibpod',
  'ImageInspectLibpod', 'ImageHistoryLibpod',
  'ExecInspectLibpod',
])

/** Answers that describe how an image was built (its build instructions carry values). */
const IMAGE_ANSWERS: ReadonlySet<string> = new Set(['ImageInspect', 'ImageHistory', 'ImageInspectLibpod', 'ImageHistoryLibpod'])

type NameTest = (name: string) => boolean

const ALL: NameTest = () => true

/** Compiled once per loaded tenancy settings (they are frozen and replaced on reload). */
const compiled = new WeakMap<readonly EnvRedaction[], ReadonlyArray<{ readonly roles: ReadonlySet<string>, readonly test: NameTest }>>()

function compile (rules: readonly EnvRedaction[]): ReadonlyArray<{ readonly roles: ReadonlySet<string>, readonly test: NameTest }> {
  let out = compiled.get(rules)
  if (out === undefined) {
    out = rules.map((r) => {
      let test: NameTest
      if (r.keys === 'all') test = ALL
      else if (r.keys === 'sensitive') test = sensitiveEnvName
      else {
        const patterns = r.keys.patterns.map(globPattern)
        test = (name) => patterns.some((p) => p.test(name))
      }
      return { roles: new Set(r.roles), test }
    })
    compiled.set(rules, out)
  }
  return out
}

/** Which variable names are redacted for `identity` (null: none, its answers are intact). Any listed role of the identity's counts. */
export function envRedactionFor (identity: Identity, settings: TenancySettings): NameTest | null {
  const tests = compile(settings.redact.env).filter((r) => identity.roles.some((role) => r.roles.has(role))).map((r) => r.test)
  if (tests.length === 0) return null
  if (tests.includes(ALL)) return ALL
  return (name) => tests.some((t) => t(name))
}

/**
 * A copy of `doc` with environment values redacted, sharing every part that did not
 * change; `doc` itself when nothing did (forward.ts then sends the engine's own bytes,
 * and a list whose elements are all unchanged counts as kept whole).
 */
export function redactEnv (doc: unknown, redact: NameTest, image = false): unknown {
  return walk(doc, redact, image, 0)
}

function walk (v: unknown, redact: NameTest, image: boolean, depth: number): unknown {
  if (v === null || typeof v !== 'object' || depth > 200) return v
  if (Array.isArray(v)) {
    let out: unknown[] | null = null
    for (let i = 0; i < v.length; i++) {
      const x = walk(v[i], redact, image, depth + 1)
      if (x !== v[i]) (out ??= v.slice())[i] = x
    }
    return out ?? v
  }
  // Exact numbers (forward.ts decodes long ones as JsonNumber) are kept as they are.
  const proto = Object.getPrototypeOf(v)
  if (proto !== Object.prototype && proto !== null) return v
  const o = v as Record<string, unknown>
  let out: Record<string, unknown> | null = null
  for (const key of Object.keys(o)) {
    const value = o[key]
    const lower = key.toLowerCase()
    let next: unknown
    if (lower === 'env' && Array.isArray(value)) next = envList(value, redact)
    else if (image && lower === 'cmd' && Array.isArray(value)) next = buildCmd(value, redact)
    else if (image && (lower === 'createdby' || lower === 'created_by') && typeof value === 'string') next = instruction(value, redact)
    else next = walk(value, redact, image, depth + 1)
    if (next !== value) (out ??= { ...o })[key] = next
  }
  return out ?? v
}

/** `["K=V"]`, or a plugin's `[{Name, Value, ...}]`: each value redacted when its name is. */
function envList (list: unknown[], redact: NameTest): unknown[] {
  let out: unknown[] | null = null
  for (let i = 0; i < list.length; i++) {
    const e = list[i]
    let next = e
    if (typeof e === 'string') next = redactEnvEntry(e, redact)
    else if (e !== null && typeof e === 'object' && !Array.isArray(e)) {
      const entry = e as Record<string, unknown>
      const nameKey = Object.keys(entry).find((k) => k.toLowerCase() === 'name')
      const valueKey = Object.keys(entry).find((k) => k.toLowerCase() === 'value')
      const name = nameKey === undefined ? undefined : entry[nameKey]
      if (valueKey !== undefined && typeof entry[valueKey] === 'string' && entry[valueKey] !== '' && (typeof name !== 'string' || redact(name))) next = { ...entry, [valueKey]: REDACTED }
    }
    if (next !== e) (out ??= list.slice())[i] = next
  }
  return out ?? list
}

const NAME = '[A-Za-z_][A-Za-z0-9_.-]*'
/** `K=V K2=two words` (ENV, ARG): each value runs to the next `NAME=`. */
const PAIRS = new RegExp(`(^|\\s)(${NAME})=(.*?)(?=\\s+${NAME}=|$)`, 'gs')
/** Where a build instruction starts in a CreatedBy string or a Cmd element. */
const DIRECTIVE = /^((?:.*?#\(nop\)\s*)?)(ENV|ARG)(\s+)(.*)$/s
const BUILD_ARGS = /^((?:RUN\s+)?)\|([0-9]+)\s+(.*)$/s

const pairs = (text: string, redact: NameTest): string =>
  text.replace(PAIRS, (whole, lead: string, name: string, value: string) => value !== '' && redact(name) ? `${lead}${name}=${REDACTED}` : whole)

/**
 * One build instruction as an image records it: `ENV K=V ...` and `ARG K=V` (after
 * `/bin/sh -c #(nop)` in the classic builder's history), `ENV K V` (the legacy form), and
 * a RUN's `|N K=V ... command` build arguments, with the values redacted.
 */
function instruction (text: string, redact: NameTest): string {
  const d = DIRECTIVE.exec(text)
  if (d !== null) {
    const [, before, word, space, rest] = d
    if (/^\S+=/.test(rest)) return `${before}${word}${space}${pairs(rest, redact)}`
    // `ENV K value` (legacy form): one name, the rest of the line its value.
    const legacy = new RegExp(`^(${NAME})(\\s+)(.+)$`, 's').exec(rest)
    if (word === 'ENV' && legacy !== null && redact(legacy[1])) return `${before}${word}${space}${legacy[1]}${legacy[2]}${REDACTED}`
    return text
  }
  const b = BUILD_ARGS.exec(text)
  if (b !== null) {
    const [, run, count, rest] = b
    const words = rest.split(' ')
    for (let i = 0; i < Number(count) && i < words.length; i++) words[i] = redactEnvEntry(words[i], redact)
    return `${run}|${count} ${words.join(' ')}`
  }
  return text
}

/** ContainerConfig.Cmd of a built image: `["|N", "K=V", ..., cmd...]` or `["/bin/sh", "-c", "#(nop) ", "ENV K=V"]`. */
function buildCmd (cmd: unknown[], redact: NameTest): unknown[] {
  if (!cmd.every((x) => typeof x === 'string')) return cmd
  const words = cmd as string[]
  let out: string[] | null = null
  const n = /^\|([0-9]+)$/.exec(words[0] ?? '')
  if (n !== null) {
    for (let i = 1; i <= Number(n[1]) && i < words.length; i++) {
      const x = redactEnvEntry(words[i], redact)
      if (x !== words[i]) (out ??= words.slice())[i] = x
    }
  }
  words.forEach((w, i) => {
    if (i > 0 && /#\(nop\)/.test(words[i - 1]) && /^(ENV|ARG)\s/.test(w)) {
      const x = instruction(w, redact)
      if (x !== w) (out ??= words.slice())[i] = x
    }
  })
  return out ?? cmd
}

/**
 * The answer filter for `identity`'s request of `op`: `current` (tenancy's narrowing, if
 * any) first, then redaction. Unchanged when nothing is to be redacted.
 */
export function withEnvRedaction (identity: Identity, op: Operation, settings: TenancySettings, current: ResponseFilter | undefined): ResponseFilter | undefined {
  if (op.streams || (op.id !== 'SwarmInspect' && !ENV_ANSWERS.has(op.id))) return current
  const redact = envRedactionFor(identity, settings)
  if (redact === null) return current
  // The swarm's join tokens are credentials: the same roles get the swarm without them.
  if (op.id === 'SwarmInspect') return then(current, withoutJoinTokens)
  const image = IMAGE_ANSWERS.has(op.id)
  return then(current, (doc) => redactEnv(doc, redact, image))
}

/**
 * `current`'s JSON transform, then `next`. Events are the only line-filtered answers,
 * and they carry neither environment nor join tokens: kept as they are.
 */
function then (current: ResponseFilter | undefined, next: (doc: unknown) => unknown): ResponseFilter | undefined {
  if (current === undefined) return { kind: 'json', transform: next }
  if (current.kind !== 'json') return current
  return { kind: 'json', transform: async (doc) => next(await current.transform(doc)) }
}
