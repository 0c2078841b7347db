/**
 * Schema problems in the words of `portcullis config check`: ajv validates the file
 * against the TypeBox declaration (schema.ts), and each ajv error becomes one line
 * naming the key path as written in the YAML, what was expected and what was found:
 *
 *   listen[1].tls.cert: expected a string, got number 5
 *
 * The schema may say it better than the generic words, with annotations next to the
 * keywords they explain (registered with ajv, so strict mode knows them):
 *  - `expected`: what any error at this node expects ("a non-empty list of listeners");
 *  - `messages`: per keyword, a template with `{got}` and `{count}` ("at most 100 tenants, got {count}");
 *  - `hint`: said after "required" when this property is missing;
 *  - `listHint`: said when a list was given where a scalar was expected.
 */
import Ajv, { type ErrorObject } from 'ajv'
import type { TSchema } from '@sinclair/typebox'

type Key = string | number

/** A key path such as `listen[2].tls.ca`. */
export class At {
  constructor (readonly keys: readonly Key[] = []) {}
  k (key: string): At { return new At([...this.keys, key]) }
  i (index: number): At { return new At([...this.keys, index]) }
  /** Whether `other` is this path or below it. */
  holds (other: At): boolean { return this.keys.every((k, i) => other.keys[i] === k) }
  toString (): string {
    let out = ''
    for (const key of this.keys) {
      if (typeof key === 'number') out += `[${key}]`
      else if (out === '' && /^--[a-z-]+$/.test(key)) out += key
      else if (/^[A-Za-z_][A-Za-z0-9_-]*$/.test(key)) out += out === '' ? key : `.${key}`
      else out += `[${JSON.stringify(key)}]`
    }
    return out === '' ? '(root)' : out
  }
}

export function isMapping (v: unknown): v is { [key: string]: unknown } {
  return typeof v === 'object' && v !== null && !Array.isArray(v) && !ArrayBuffer.isView(v)
}

/** Short description of a value for "got ..." in messages. */
export function shown (v: unknown): string {
  if (v === null || v === undefined) return 'nothing (null)'
  if (Array.isArray(v)) return 'a list'
  if (isMapping(v)) return 'a mapping'
  if (typeof v === 'string') return JSON.stringify(v.length > 80 ? `${v.slice(0, 77)}...` : v)
  if (typeof v === 'number' || typeof v === 'boolean') return `${typeof v} ${String(v)}`
  return typeof v
}

/** The annotations problem messages read (see the module comment). */
export interface Says {
  expected?: string
  messages?: { [keyword: string]: string }
  hint?: string
  listHint?: string
}
type Node = TSchema & Says

/** A schema problem: where, and the message without the path. */
export interface SchemaProblem { at: At, message: string }

const ajv = new Ajv({ allErrors: true, strict: true, useDefaults: true, verbose: true })
ajv.addVocabulary(['expected', 'messages', 'hint', 'listHint'])

/**
 * Compiles a schema into a function that fills in its defaults (in place) and returns
 * its problems, one per value at fault, in the order of the declaration.
 */
export function compile (schema: TSchema): (data: unknown) => SchemaProblem[] {
  const validate = ajv.compile(schema)
  return (data) => {
    if (validate(data)) return []
    return relevant(validate.errors ?? []).map((e) => problem(e, data))
  }
}

/** What a schema expects, in words; `ofType`: the type it wants, not the values it allows. */
function expected (s: Node, ofType = false): string {
  if (s.expected !== undefined) return s.expected
  if (Array.isArray(s.anyOf)) return (s.anyOf as Node[]).filter((b) => b.type !== 'null').map((b) => expected(b)).join(' or ')
  if (Array.isArray(s.enum) && !ofType) return `one of ${s.enum.join(', ')}`
  switch (s.type) {
    case 'string': return 'a string'
    case 'boolean': return 'true or false'
    case 'integer': return 'a whole number'
    case 'number': return 'a number'
    case 'object': return 'a mapping'
    case 'array': return `a list of ${s.items?.type === 'string' ? 'strings' : 'mappings'}`
    default: return JSON.stringify(s.type)
  }
}

function jsonType (v: unknown): string {
  if (v === null) return 'null'
  if (Array.isArray(v)) return 'array'
  if (typeof v === 'number') return Number.isInteger(v) ? 'integer' : 'number'
  return typeof v
}

function fits (s: Node, v: unknown): boolean {
  const t = jsonType(v)
  return s.type === t || (s.type === 'number' && t === 'integer')
}

/**
 * ajv reports every branch of a union that failed; the one whose type the value has
 * is the one the author meant, so only its errors are kept (none fits: the union's own
 * error). One problem per value: a type error hides the others at the same place.
 */
function relevant (errors: ErrorObject[]): ErrorObject[] {
  let out = errors
  for (const e of errors.filter((x) => x.keyword === 'anyOf')) {
    const branches = e.schema as Node[]
    const k = branches.findIndex((b) => fits(b, e.data))
    const prefix = `${e.schemaPath}/`
    out = out.filter((x) => x === e ? k < 0 : !x.schemaPath.startsWith(prefix) || x.schemaPath.startsWith(`${prefix}${k}/`))
  }
  const seen = new Set<string>()
  const typed = new Set(out.filter((x) => x.keyword === 'type').map((x) => x.instancePath))
  return out.filter((x) => {
    if (x.keyword === 'required' || x.keyword === 'additionalProperties') return true
    if (typed.has(x.instancePath) && x.keyword !== 'type') return false
    if (seen.has(x.instancePath)) return false
    seen.add(x.instancePath)
    return true
  })
}

/** The key path of a JSON pointer into `data`: indices where the value is a list. */
function pathOf (pointer: string, data: unknown): At {
  const keys: Key[] = []
  let v = data
  for (const raw of pointer.split('/').slice(1)) {
    const key = raw.replace(/~1/g, '/').replace(/~0/g, '~')
    const k = Array.isArray(v) ? Number(key) : key
    keys.push(k)
    v = (v as { [key: string]: unknown } | undefined)?.[k]
  }
  return new At(keys)
}

function problem (e: ErrorObject, root: unknown): SchemaProblem {
  const at = pathOf(e.instancePath, root)
  const s = e.parentSchema as Node
  const v: unknown = e.data
  if (e.keyword === 'additionalProperties') return { at: at.k(String(e.params.additionalProperty)), message: 'unknown key' }
  if (e.keyword === 'required') {
    const missing = String(e.params.missingProperty)
    const hint = (s.properties as { [key: string]: Node } | undefined)?.[missing]?.hint
    return { at: at.k(missing), message: hint === undefined ? 'required' : `required: ${hint}` }
  }
  const template = s.messages?.[e.keyword]
  if (template !== undefined) {
    return { at, message: template.replace('{got}', shown(v)).replace('{count}', Array.isArray(v) ? String(v.length) : '') }
  }
  const got = `got ${shown(v)}${Array.isArray(v) && s.listHint ? s.listHint : ''}`
  if (s.expected !== undefined || e.keyword === 'anyOf' || e.keyword === 'enum') return { at, message: `expected ${expected(s)}, ${got}` }
  // A number that is not whole is shown as it is: "expected a whole number, got 1.5".
  if (e.keyword === 'type') return { at, message: `expected ${expected(s, true)}, ${s.type === 'integer' && typeof v === 'number' ? `got ${v}` : got}` }
  switch (e.keyword) {
    case 'minLength': return { at, message: 'must not be empty' }
    case 'minItems': return { at, message: 'must not be an empty list' }
    case 'minimum':
    case 'maximum': {
      // The largest whole number a double holds exactly bounds every integer; said only when it is passed.
      const max = s.maximum === Number.MAX_SAFE_INTEGER && e.keyword === 'minimum' ? undefined : s.maximum
      return { at, message: `${max === undefined ? `must be at least ${s.minimum}` : s.minimum === undefined ? `must be at most ${max}` : `must be between ${s.minimum} and ${max}`}, got ${v}` }
    }
    default: return { at, message: `${e.message ?? 'is not valid'}, ${got}` }
  }
}
