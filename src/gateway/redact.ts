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
 * Name and Value). Secret and config references (ContainerSpec.Secrets[].SecretName,
 * SecretID, File) are kept, as the audit trail keeps them: they name a secret without
 * holding it, and the engine never returns a secret's data.
 */
import type { Operation } from '../api/catalog/operations'
import { REDACTED, redactEnvEntry, sensitiveEnvName } from '../audit/redact'
import { globPattern, type EnvRedaction, type TenancySettings } from '../policy/tenancy'
import type { Identity } from './authenticate'
import type { ResponseFilter } from './exchange'

/**
 * The operations whose JSON answers can carry environment values. Lists are included
 * although the engine's lists (ContainerList, also with ?size=1 and ?all=1, API 1.24 to
 * 1.56) hold no environment today: should a version add one, it is redacted, not leaked.
 */
export const ENV_ANSWERS: ReadonlySet<string> = new Set([
  'ContainerInspect', 'ContainerList',
  'ImageInspect',
  'ExecInspect',
  'ServiceInspect', 'ServiceList',
  'TaskInspect', 'TaskList',
  'PluginInspect', 'PluginList',
  // Podman's own API (catalog/libpod.ts): its inspects carry Config.Env too.
  'ContainerInspectLibpod', 'ContainerListLibpod',
  'ImageInspectLibpod',
  'ExecInspectLibpod',
])

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
export function redactEnv (doc: unknown, redact: NameTest): unknown {
  return walk(doc, redact, 0)
}

function walk (v: unknown, redact: NameTest, depth: number): unknown {
  if (v === null || typeof v !== 'object' || depth > 200) return v
  if (Array.isArray(v)) {
    let out: unknown[] | null = null
    for (let i = 0; i < v.length; i++) {
      const x = walk(v[i], redact, depth + 1)
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
    const next = key.toLowerCase() === 'env' && Array.isArray(value) ? envList(value, redact) : walk(value, redact, depth + 1)
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

/**
 * The answer filter for `identity`'s request of `op`: `current` (tenancy's narrowing, if
 * any) first, then redaction. Unchanged when nothing is to be redacted.
 */
export function withEnvRedaction (identity: Identity, op: Operation, settings: TenancySettings, current: ResponseFilter | undefined): ResponseFilter | undefined {
  if (!ENV_ANSWERS.has(op.id) || op.streams) return current
  const redact = envRedactionFor(identity, settings)
  if (redact === null) return current
  if (current === undefined) return { kind: 'json', transform: (doc) => redactEnv(doc, redact) }
  // Events are the only line-filtered answers, and they carry no environment.
  if (current.kind !== 'json') return current
  return { kind: 'json', transform: async (doc) => redactEnv(await current.transform(doc), redact) }
}
