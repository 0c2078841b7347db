/**
 * Body rewrites declared in the policy (rewrites.yaml): inject labels, set safe
 * defaults, force values. They run before evaluation, so the policy judges the body
 * the engine will receive, and each one applied is recorded as RFC 6902 operations.
 *
 *   - id: no-new-privileges
 *     operations: [ContainerCreate]
 *     roles: [tenant]              # principals it applies to ("*" = everyone)
 *     except: [admin]              # optional
 *     set:     { /Labels/io.portcullis.tenant: "{tenant}" }   # always, replacing
 *     default: { /HostConfig/PidsLimit: 512 }                 # only when absent, null or zero (an object: all its fields)
 *     append:  { /HostConfig/SecurityOpt: no-new-privileges }  # add to a list unless present
 *
 * Paths are JSON Pointers (RFC 6901) into the canonical body; `{subject}` and
 * `{tenant}` in string values are replaced by the caller's identity.
 */
import fs from 'node:fs'
import { parse as parseYaml } from 'yaml'
import { operations } from '../api/catalog/operations'
import { isJsonNumber } from '../api/body/number'

export interface PatchOp { readonly op: 'add' | 'replace' | 'remove', readonly path: string, readonly value: unknown }
export interface AppliedRewrite { readonly id: string, readonly patch: readonly PatchOp[] }

type Action = 'set' | 'default' | 'append'
interface Step { action: Action, pointer: string, tokens: string[], value: unknown }
export interface RewriteRule { id: string, operations: Set<string>, roles: string[], except: string[], steps: Step[] }

const ACTIONS: readonly Action[] = ['set', 'default', 'append']
const KNOWN = new Set(['id', 'operations', 'roles', 'except', ...ACTIONS])
const JSON_BODY_OPS = new Set(operations.filter((o) => o.body === 'json').map((o) => o.id))

function pointerTokens (p: string): string[] | null {
  if (!p.startsWith('/')) return null
  return p.slice(1).split('/').map((t) => t.replace(/~1/g, '/').replace(/~0/g, '~'))
}

function stringList (v: unknown): string[] | null {
  return Array.isArray(v) && v.every((x) => typeof x === 'string') ? v : null
}

export function compileRewrites (file: string, name: string, problems: string[]): RewriteRule[] {
  let doc: unknown
  try {
    doc = parseYaml(fs.readFileSync(file, 'utf8'))
  } catch (err) {
    problems.push(`${name}: ${(err as Error).message.split('\n')[0]}`)
    return []
  }
  if (doc === null || doc === undefined) return []
  if (!Array.isArray(doc)) { problems.push(`${name}: expected a list of rewrites`); return [] }
  const ids = new Set<string>()
  const out: RewriteRule[] = []
  doc.forEach((raw: unknown, i) => {
    const at = `${name}[${i}]`
    const r = (raw ?? {}) as Record<string, unknown>
    for (const k of Object.keys(r)) if (!KNOWN.has(k)) problems.push(`${at}.${k}: unknown key`)
    const id = typeof r.id === 'string' && /^[a-z0-9][a-z0-9-]*$/.test(r.id) ? r.id : null
    if (!id) problems.push(`${at}.id: expected an id of lower-case letters, digits and dashes`)
    else if (ids.has(id)) problems.push(`${at}.id: duplicate rewrite id ${id}`)
    else ids.add(id)
    const ops = stringList(r.operations)
    if (!ops?.length) problems.push(`${at}.operations: expected a list of operation ids`)
    for (const op of ops ?? []) if (!JSON_BODY_OPS.has(op)) problems.push(`${at}.operations: ${op} is not an operation with a JSON body`)
    const roles = r.roles === undefined ? ['*'] : stringList(r.roles)
    if (!roles) problems.push(`${at}.roles: expected a list of roles`)
    const except = r.except === undefined ? [] : stringList(r.except)
    if (!except) problems.push(`${at}.except: expected a list of roles`)
    const steps: Step[] = []
    for (const action of ACTIONS) {
      const m = r[action]
      if (m === undefined) continue
      if (m === null || typeof m !== 'object' || Array.isArray(m)) { problems.push(`${at}.${action}: expected a mapping of JSON pointer to value`); continue }
      for (const [pointer, value] of Object.entries(m)) {
        const tokens = pointerTokens(pointer)
        if (!tokens) problems.push(`${at}.${action}: ${JSON.stringify(pointer)} is not a JSON pointer`)
        else steps.push({ action, pointer, tokens, value })
      }
    }
    if (!steps.length) problems.push(`${at}: nothing to do (give set, default or append)`)
    if (id && ops && roles && except) out.push({ id, operations: new Set(ops), roles, except, steps })
  })
  return out
}

function fill (v: unknown, who: { subject: string, tenant: string | null }): unknown {
  // A value without a placeholder is used as it is (no two regex passes per decision).
  if (typeof v === 'string') return v.includes('{') ? v.replace(/\{subject\}/g, who.subject).replace(/\{tenant\}/g, who.tenant ?? '') : v
  if (Array.isArray(v)) return v.map((x) => fill(x, who))
  return v
}

type Obj = Record<string, unknown>
const isObj = (v: unknown): v is Obj => v !== null && typeof v === 'object' && !Array.isArray(v)

/** Go's zero value: an object is zero when all its fields are (`"LogConfig":{"Type":"","Config":{}}`). */
function isZero (v: unknown): boolean {
  if (v === undefined || v === null || v === '' || v === false || v === 0) return true
  if (isJsonNumber(v)) return Number(v) === 0
  if (Array.isArray(v)) return v.length === 0
  if (typeof v !== 'object') return false
  // Without Object.values' array: a decoded object is a dictionary (issue 21).
  for (const k in v) if (Object.hasOwn(v, k) && !isZero((v as Obj)[k])) return false
  return true
}

/**
 * A plain object with `o`'s own keys (`__proto__` too, as data). Decoded bodies are
 * null-prototype objects, which V8 keeps in dictionary mode: spreading one took 35 µs for
 * a docker CLI HostConfig, a key-by-key copy into `{}` a fifth of that.
 */
function plainCopy (o: Obj): Obj {
  const out: Obj = {}
  for (const k of Object.keys(o)) {
    if (k === '__proto__') Object.defineProperty(out, k, { value: o[k], enumerable: true, writable: true, configurable: true })
    else out[k] = o[k]
  }
  return out
}

/**
 * Apply one step to `root` copy-on-write along the path; returns the new root and the
 * patch, or null if nothing changed. `own` holds the objects this application already
 * copied (from the client's body): they are changed in place, so that a rule's steps
 * under one HostConfig copy it once, not once per step.
 */
function applyStep (root: unknown, step: Step, value: unknown, own: Set<object> = new Set()): { root: unknown, patch: PatchOp } | null {
  // Whether the step changes anything, read before anything is copied: most steps are
  // defaults the body already has, and the copies were a tenth of a decision (issue 21).
  // The value found there is what the copies below hold at the path too (they are
  // shallow): its zero test is made once.
  const at = valueAt(root, step.tokens)
  const present = at !== UNREACHABLE && !isZero(at)
  if (at !== UNREACHABLE && unchanged(step, at, present, value)) return null
  const copyOf = (v: unknown): Obj => {
    if ((isObj(v) || Array.isArray(v)) && own.has(v)) return v as Obj
    const copy: Obj = Array.isArray(v) ? ([...v] as unknown as Obj) : isObj(v) ? plainCopy(v) : {}
    own.add(copy)
    return copy
  }
  const base = copyOf(isObj(root) ? root : undefined)
  let parent = base
  for (let i = 0; i < step.tokens.length - 1; i++) {
    const t = step.tokens[i]
    const copy = copyOf(parent[t])
    parent[t] = copy
    parent = copy
  }
  const key = step.tokens[step.tokens.length - 1]
  const current = parent[key]
  // Go cannot tell an absent field from its zero value: `"Memory": 0` and `"User": ""`
  // (what the docker CLI sends when nothing was asked) mean "not set" to the engine:
  // `present` above (undefined, as `current` now is, when the path was not there to walk).
  switch (step.action) {
    case 'default':
      if (present) return null
      parent[key] = value
      return { root: base, patch: { op: 'add', path: step.pointer, value } }
    case 'set':
      if (present && JSON.stringify(current) === JSON.stringify(value)) return null
      parent[key] = value
      return { root: base, patch: { op: present ? 'replace' : 'add', path: step.pointer, value } }
    case 'append': {
      const list = Array.isArray(current) ? current : []
      const add = (Array.isArray(value) ? value : [value]).filter((x) => !list.some((y) => JSON.stringify(y) === JSON.stringify(x)))
      if (!add.length) return null
      parent[key] = [...list, ...add]
      return { root: base, patch: present ? { op: 'replace', path: step.pointer, value: parent[key] } : { op: 'add', path: step.pointer, value: parent[key] } }
    }
  }
}

/** A path that goes through something other than an object or a list: a step there copies and changes. */
const UNREACHABLE: unique symbol = Symbol('unreachable')

/** The value at `tokens` in `root`, or UNREACHABLE. */
function valueAt (root: unknown, tokens: readonly string[]): unknown {
  let at: unknown = root
  for (const t of tokens) {
    if (!isObj(at) && !Array.isArray(at)) return UNREACHABLE
    at = (at as Obj)[t]
  }
  return at
}

/** What applyStep finds at the step's path (`at`, `present`: not zero) leaves the body as it is (the same tests as its switch). */
function unchanged (step: Step, at: unknown, present: boolean, value: unknown): boolean {
  switch (step.action) {
    case 'default': return present
    case 'set': return present && JSON.stringify(at) === JSON.stringify(value)
    case 'append': {
      const list = Array.isArray(at) ? at : []
      return (Array.isArray(value) ? value : [value]).every((x) => list.some((y) => JSON.stringify(y) === JSON.stringify(x)))
    }
  }
}

/** Set `value` at the path `tokens`, copy-on-write (as a rewrite's `set`): the new root and its patch, or null if nothing changed. */
export function setAt (root: unknown, tokens: readonly string[], value: unknown): { root: unknown, patch: PatchOp } | null {
  const pointer = '/' + tokens.map((k) => k.replace(/~/g, '~0').replace(/\//g, '~1')).join('/')
  return applyStep(root, { action: 'set', pointer, tokens: [...tokens], value }, value)
}

export function applyRewrites (rules: readonly RewriteRule[], op: string, principals: readonly string[], who: { subject: string, tenant: string | null }, body: unknown): { body: unknown, applied: AppliedRewrite[] } {
  const has = (r: string): boolean => r === '*' || principals.includes(r)
  const applied: AppliedRewrite[] = []
  let current = body
  const own = new Set<object>()
  for (const rule of rules) {
    if (!rule.operations.has(op) || !rule.roles.some(has) || rule.except.some(has)) continue
    const patch: PatchOp[] = []
    for (const step of rule.steps) {
      const r = applyStep(current, step, fill(step.value, who), own)
      if (r) { current = r.root; patch.push(r.patch) }
    }
    if (patch.length) applied.push({ id: rule.id, patch })
  }
  return { body: current, applied }
}
