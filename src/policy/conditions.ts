/**
 * The compile-time type check of a policy condition. The expression evaluator yields
 * `undefined` for a name that does not exist and compares anything with anything, so
 * a misspelt fact (`r.obj.privilegd`), a list compared as a number or a count of a
 * string would make a deny rule quietly never match. Every condition is walked once,
 * when the policy is compiled, against the declared vocabulary (FactsSchema and
 * RequestSchema in fields.ts, functionSignatures in functions.ts); any mismatch is a
 * problem that keeps the policy from being used.
 */
import type { TSchema } from '@sinclair/typebox'
import { FactsSchema, RequestSchema } from './fields'
import { functionSignatures } from './functions'

/** The types a condition's values can have. */
export type Ty =
  | { readonly k: 'boolean' | 'number' | 'string' | 'any' }
  | { readonly k: 'list', readonly of: Ty }
  | { readonly k: 'object', readonly name: string, readonly fields: Readonly<Record<string, Ty>> }
  | { readonly k: 'map', readonly of: Ty }

const ANY: Ty = { k: 'any' }
const BOOLEAN: Ty = { k: 'boolean' }
const NUMBER: Ty = { k: 'number' }
const STRING: Ty = { k: 'string' }

/** A TypeBox schema as a condition type. */
export function typeOfSchema (s: TSchema, name = 'object'): Ty {
  switch (s.type) {
    case 'boolean': return BOOLEAN
    case 'number': case 'integer': return NUMBER
    case 'string': return STRING
    case 'array': return { k: 'list', of: typeOfSchema(s.items as TSchema, name) }
    case 'object':
      if (s.patternProperties) return { k: 'map', of: typeOfSchema(Object.values(s.patternProperties as Record<string, TSchema>)[0]) }
      return { k: 'object', name, fields: Object.fromEntries(Object.entries(s.properties as Record<string, TSchema>).map(([k, v]) => [k, typeOfSchema(v, k)])) }
    default: return ANY
  }
}

/** `r.obj` as the conditions see it: the facts and the request fields. */
const OBJ: Ty = { k: 'object', name: 'r.obj', fields: { ...(typeOfSchema(FactsSchema) as { fields: Record<string, Ty> }).fields, ...(typeOfSchema(RequestSchema) as { fields: Record<string, Ty> }).fields } }

/** The request's other members (`r_sub` is how `r.sub` reads once escaped for the evaluator). */
const REQUEST: Readonly<Record<string, Ty>> = {
  r_obj: OBJ,
  r_sub: { k: 'list', of: STRING },
  r_dom: STRING,
  r_op: STRING,
  r_kind: STRING,
}

export function show (t: Ty): string {
  switch (t.k) {
    case 'list': return t.of.k === 'object' ? `list<${t.of.name === 'ulimits' ? 'ulimit' : t.of.name}>` : `list<${show(t.of)}>`
    case 'object': return t.name
    case 'map': return `map<${show(t.of)}>`
    default: return t.k
  }
}

/** A signature's spelling of a type: `list<string>`, `namespaces`, `list`, `any`... */
function accepts (want: string, got: Ty): boolean {
  if (got.k === 'any' || want === 'any') return true
  if (want === 'list') return got.k === 'list'
  if (want === 'list<ulimit>') return got.k === 'list' && (got.of.k === 'any' || (got.of.k === 'object' && 'name' in got.of.fields))
  if (want === 'namespaces') return got.k === 'object' && 'pid' in got.fields
  if (want === 'counts') return got.k === 'object' && 'ports' in got.fields
  if (want.startsWith('list<')) return got.k === 'list' && (got.of.k === 'any' || show(got.of) === want.slice(5, -1))
  return show(got) === want
}

/** Optimal string alignment distance (Damerau-Levenshtein with adjacent transpositions). */
export function distance (a: string, b: string): number {
  const d: number[][] = Array.from({ length: a.length + 1 }, (_, i) => Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)))
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1
      d[i][j] = Math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d[i][j] = Math.min(d[i][j], d[i - 2][j - 2] + 1)
    }
  }
  return d[a.length][b.length]
}

/** The known names closest to `name` (at most three), for "did you mean". */
export function closest (name: string, known: Iterable<string>): string[] {
  const limit = Math.max(2, Math.floor(name.length / 3))
  return [...known].map((k) => ({ k, d: distance(name.toLowerCase(), k.toLowerCase()) }))
    .filter((x) => x.d <= limit).sort((a, b) => a.d - b.d || (a.k < b.k ? -1 : 1)).slice(0, 3).map((x) => x.k)
}

function suggest (name: string, known: Iterable<string>): string {
  const c = closest(name, known)
  return c.length ? `; did you mean ${c.join(' or ')}?` : ''
}

interface Node { type: string, [k: string]: unknown }

/** How a condition spells a name (`r_obj.a.b` is `r.obj.a.b` in the policy). */
function spelling (n: Node): string {
  if (n.type === 'Identifier') return String(n.name).replace(/^r_/, 'r.')
  if (n.type === 'MemberExpression' && !n.computed) return `${spelling(n.object as Node)}.${String((n.property as Node).name)}`
  if (n.type === 'Literal') return String(n.raw)
  if (n.type === 'CallExpression') return `${spelling(n.callee as Node)}(...)`
  return '(expression)'
}

const EQUALITY = new Set(['==', '!=', '===', '!=='])
const ORDER = new Set(['<', '>', '<=', '>='])
const ARITHMETIC = new Set(['-', '*', '/', '%'])

/**
 * The problems of one condition (parsed by @casbin/expression-eval, after Casbin's
 * `r.obj` → `r_obj` escaping): unknown names with the closest known ones, and every
 * value used as what its type is not. An empty list means it type-checks.
 */
export function typeProblems (ast: unknown): string[] {
  const problems: string[] = []
  const scalar = (t: Ty, n: Node, use: string): void => {
    if (t.k === 'list' || t.k === 'object' || t.k === 'map') problems.push(`${spelling(n)}: a ${show(t)} ${use}`)
  }
  const visit = (n: Node): Ty => {
    switch (n.type) {
      case 'Literal':
        return n.value === null ? ANY : typeof n.value === 'number' ? NUMBER : typeof n.value === 'boolean' ? BOOLEAN : typeof n.value === 'string' ? STRING : ANY
      case 'Identifier': {
        const name = String(n.name)
        if (name in REQUEST) return REQUEST[name]
        if (name in functionSignatures) { problems.push(`${name}: a function, used as a value`); return ANY }
        problems.push(`${spelling(n)}: unknown name${suggest(name, [...Object.keys(functionSignatures), 'r.obj', 'r.sub', 'r.dom', 'r.op', 'r.kind'])}`)
        return ANY
      }
      case 'MemberExpression': {
        const of = visit(n.object as Node)
        if (of.k === 'any') return ANY
        if (n.computed) {
          visit(n.property as Node)
          if (of.k === 'map') return of.of
          problems.push(`${spelling(n.object as Node)}[...]: a ${show(of)} cannot be indexed`)
          return ANY
        }
        const prop = String((n.property as Node).name)
        if (of.k === 'map') return of.of
        if (of.k !== 'object') { problems.push(`${spelling(n)}: a ${show(of)} has no field ${prop}`); return ANY }
        if (prop in of.fields) return of.fields[prop]
        const what = of === OBJ ? 'no such fact' : `no such field of ${spelling(n.object as Node).replace(/^r\.obj\./, '')}`
        problems.push(`${spelling(n)}: ${what}${suggest(prop, Object.keys(of.fields))}`)
        return ANY
      }
      case 'CallExpression': {
        const callee = n.callee as Node
        const args = (n.arguments as Node[]).map(visit)
        const name = callee.type === 'Identifier' ? String(callee.name) : ''
        if (!(name in functionSignatures)) {
          problems.push(`${name || spelling(callee)}: no such function${suggest(name, Object.keys(functionSignatures))}`)
          return ANY
        }
        const sig = functionSignatures[name as keyof typeof functionSignatures]
        const required = sig.args.filter((a) => !a.endsWith('?')).length
        if (args.length < required || args.length > sig.args.length) problems.push(`${name}: takes ${required === sig.args.length ? required : `${required} to ${sig.args.length}`} argument${sig.args.length > 1 ? 's' : ''}, given ${args.length}`)
        args.forEach((t, i) => {
          const want = sig.args[i]?.replace(/\?$/, '')
          if (want && !accepts(want, t)) problems.push(`${name}: argument ${i + 1} (${spelling((n.arguments as Node[])[i])}) is a ${show(t)}, expected a ${want}`)
        })
        return sig.returns === 'number' ? NUMBER : sig.returns === 'boolean' ? BOOLEAN : ANY
      }
      case 'UnaryExpression': {
        const t = visit(n.argument as Node)
        scalar(t, n.argument as Node, `used with ${String(n.operator)}`)
        if (n.operator === '!') return BOOLEAN
        if (t.k !== 'any' && t.k !== 'number' && t.k !== 'list' && t.k !== 'object' && t.k !== 'map') problems.push(`${spelling(n.argument as Node)}: a ${show(t)} used with ${String(n.operator)}`)
        return NUMBER
      }
      case 'LogicalExpression':
      case 'BinaryExpression': {
        const op = String(n.operator)
        const l = visit(n.left as Node)
        const r = visit(n.right as Node)
        if (op === '&&' || op === '||') {
          scalar(l, n.left as Node, 'used as a boolean')
          scalar(r, n.right as Node, 'used as a boolean')
          return BOOLEAN
        }
        if (op === 'in') {
          scalar(l, n.left as Node, 'on the left of in')
          if (r.k !== 'any' && r.k !== 'list') problems.push(`${spelling(n.right as Node)}: a ${show(r)} on the right of in, expected a list`)
          return BOOLEAN
        }
        scalar(l, n.left as Node, `compared with ${op}`)
        scalar(r, n.right as Node, `compared with ${op}`)
        const lk = l.k
        const rk = r.k
        const known = lk !== 'any' && rk !== 'any' && lk !== 'list' && rk !== 'list' && lk !== 'object' && rk !== 'object' && lk !== 'map' && rk !== 'map'
        if (EQUALITY.has(op) || ORDER.has(op)) {
          if (known && lk !== rk) problems.push(`${spelling(n.left as Node)} ${op} ${spelling(n.right as Node)}: compares a ${lk} with a ${rk}`)
          else if (known && ORDER.has(op) && lk === 'boolean') problems.push(`${spelling(n.left as Node)} ${op} ${spelling(n.right as Node)}: orders booleans`)
          return BOOLEAN
        }
        if (op === '+') {
          if (lk === 'string' || rk === 'string') return STRING
          if (known && (lk !== 'number' || rk !== 'number')) problems.push(`${spelling(n.left as Node)} + ${spelling(n.right as Node)}: adds a ${lk} and a ${rk}`)
          return lk === 'any' || rk === 'any' ? ANY : NUMBER
        }
        if (ARITHMETIC.has(op)) {
          for (const [t, side] of [[l, n.left], [r, n.right]] as const) if (known && t.k !== 'number') problems.push(`${spelling(side as Node)}: a ${show(t)} used with ${op}`)
          return NUMBER
        }
        problems.push(`operator ${op} is not supported in conditions`)
        return ANY
      }
      case 'ConditionalExpression': {
        const test = visit(n.test as Node)
        scalar(test, n.test as Node, 'used as a boolean')
        const a = visit(n.consequent as Node)
        const b = visit(n.alternate as Node)
        return a.k === b.k ? a : ANY
      }
      case 'ArrayExpression':
        (n.elements as Node[]).forEach(visit)
        return { k: 'list', of: ANY }
      default:
        problems.push(`${n.type}: not supported in conditions`)
        return ANY
    }
  }
  const root = ast as Node
  const t = visit(root)
  scalar(t, root, 'used as the condition (a boolean is needed)')
  return [...new Set(problems)]
}
