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
  if (typeof v === 'string') return v.replace(/\{subject\}/g, who.subject).replace(/\{tenant\}/g, who.tenant ?? '')
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
  return typeof v === 'object' && Object.values(v).every(isZero)
}

/** Apply one step to `root` copy-on-write along the path; returns the new root and the patch, or null if nothing changed. */
function applyStep (root: unknown, step: Step, value: unknown, fresh?: Set<unknown>): { root: unknown, patch: PatchOp } | null {
  // `fresh`: the copies this rule's earlier steps made, which no one else holds and
  // which are changed in place rather than copied again (a whole create body per step).
  const own = (o: Obj): Obj => { fresh?.add(o); return o }
  const base: Obj = fresh?.has(root) ? root as Obj : own(isObj(root) ? { ...root } : {})
  let parent = base
  for (const t of step.tokens.slice(0, -1)) {
    const child = parent[t]
    const copy: Obj = fresh?.has(child) ? child as Obj : own(Array.isArray(child) ? ([...child] as unknown as Obj) : isObj(child) ? { ...child } : {})
    parent[t] = copy
    parent = copy
  }
  const key = step.tokens[step.tokens.length - 1]
  const current = parent[key]
  // Go cannot tell an absent field from its zero value: `"Memory": 0` and `"User": ""`
  // (what the docker CLI sends when nothing was asked) mean "not set" to the engine.
  const present = !isZero(current)
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

/** Set `value` at the path `tokens`, copy-on-write (as a rewrite's `set`): the new root and its patch, or null if nothing changed. */
export function setAt (root: unknown, tokens: readonly string[], value: unknown): { root: unknown, patch: PatchOp } | null {
  const pointer = '/' + tokens.map((k) => k.replace(/~/g, '~0').replace(/\//g, '~1')).join('/')
  return applyStep(root, { action: 'set', pointer, tokens: [...tokens], value }, value)
}

export function applyRewrites (rules: readonly RewriteRule[], op: string, principals: readonly string[], who: { subject: string, tenant: string | null }, body: unknown): { body: unknown, applied: AppliedRewrite[] } {
  const has = (r: string): boolean => r === '*' || principals.includes(r)
  const applied: AppliedRewrite[] = []
  let current = body
  for (const rule of rules) {
    if (!rule.operations.has(op) || !rule.roles.some(has) || rule.except.some(has)) continue
    const patch: PatchOp[] = []
    const fresh = new Set<unknown>()
    for (const step of rule.steps) {
      const r = applyStep(current, step, fill(step.value, who), fresh)
      if (r) { current = r.root; patch.push(r.patch) }
    }
    if (patch.length) applied.push({ id: rule.id, patch })
  }
  return { body: current, applied }
}
