/**
 * JSON request bodies, decoded the way the engine will read them and re-encoded so that
 * what the gateway forwards is exactly what policy evaluated.
 *
 * The engine (Go encoding/json) decodes a body into structs: a key matches a struct field
 * ignoring case (with Unicode simple folding: `ſ` matches `s`, the Kelvin sign `K`
 * matches `k`), the last of two keys for one field wins (and for a nested struct the two
 * objects are MERGED), unknown keys are ignored, and map keys (`Labels`, `Sysctls`,
 * `DriverOpts`...) are exact. A naive reader would let `{"HostConfig":{"Privileged":false,
 * "privileged":true}}` through and the engine would run the container privileged.
 *
 * decodeBody(operationId, raw) therefore, guided by engine-schema.json (which objects are
 * structs, with which fields, and which are maps):
 *   - refuses what is not strict RFC 8259 JSON: syntax errors, data after the value
 *     (whitespace is fine: Go clients end bodies with "\n"), a UTF-8 byte order mark,
 *     invalid UTF-8 (Go would silently turn it into U+FFFD), raw control characters in
 *     strings, and `\uXXXX` escapes that leave a lone surrogate (Go: U+FFFD). What is
 *     accepted therefore reads the same in JavaScript and in Go;
 *   - refuses a top-level value the operation cannot take: struct bodies must be an
 *     object; array bodies (PluginSet, PluginPull, PluginUpgrade) an array or `null` (Go
 *     clients send `null` for a nil slice). Whitespace-only bodies are refused;
 *   - in a struct: refuses a non-ASCII key (engine field names are ASCII; this sidesteps
 *     `ſ`/`K` folding entirely), refuses two keys equal ignoring ASCII case, whether or not
 *     the schema knows the field (the engine may know fields the spec does not), and
 *     renames a known field to its canonical spelling (`privileged` -> `Privileged`).
 *     Unknown keys are kept verbatim (the engine ignores them, or knows them by a name
 *     the spec does not document; either way they are forwarded as evaluated);
 *   - in a map, and in any object the schema knows nothing about: keys are kept verbatim
 *     and only exact duplicates are refused (`a` and `A` are two labels);
 *   - exact duplicate keys are refused everywhere;
 *   - nesting deeper than MAX_DEPTH levels, or more than MAX_VALUES values in one body,
 *     is refused (before the policy spends time on them);
 *   - what the engine does with the decoded value before it acts on it is applied to the
 *     value (quirks.ts): a ContainerCreate body's deprecated top-level host configuration
 *     (the schema gives that operation the engine's wrapper type) is resolved into
 *     `HostConfig` as the engine resolves it.
 *
 * Operations with no schema entry (none of the catalog's JSON operations today; see
 * hasBodySchema) are decoded generically: every object is treated as a map, so only exact
 * duplicates are refused and nothing is renamed. Policy for such an operation cannot rely
 * on field spelling.
 *
 * The decoded value (`JsonValue`, or `undefined` for an empty body):
 *   - objects have a null prototype (so `__proto__`, `constructor` are ordinary keys):
 *     use `obj.Field`, `obj[key]`, `key in obj`, `Object.hasOwn`, `Object.keys`;
 *   - numbers are JsonNumber (exact text; see number.ts for comparing them);
 *   - strings, booleans, null and arrays are plain.
 * `bytes` is encodeBody(value): compact JSON, numbers exact. Key order follows the object
 * (JavaScript puts integer-like keys first, which for the engine's maps is no change;
 * struct fields are never integer-like).
 *
 * Errors are GatewayError('BODY_INVALID') naming the place, e.g.
 *   invalid request body: duplicate field HostConfig.Privileged ("Privileged" and "privileged")
 *   request body is not valid JSON: unexpected data after the JSON value at byte 17
 */
import { isUtf8 } from 'node:buffer'
import { GatewayError } from '../errors'
import { JsonNumber } from './number'
import type { JsonObject, JsonValue } from './json'
import { resolveEngineQuirks } from './quirks'
import { ANY_NODE, bodySchemas, type BodyNode } from './schema'

export { JsonNumber, isJsonNumber } from './number'
export type { JsonObject, JsonValue } from './json'

export interface DecodedBody {
  /** The canonical value: a JsonValue, or `undefined` for an empty (0-byte) body. */
  readonly value: unknown
  /** encodeBody(value): what to forward. Empty for an empty body. Encoded on first use. */
  readonly bytes: Buffer
}

/** Objects and arrays nested deeper than this are refused (Go's own limit is 10000). */
export const MAX_DEPTH = 512
/**
 * Values (scalars, objects, arrays) in one body above this are refused: no Docker client
 * sends a configuration of that size, and each value costs the policy time for every
 * request, which one tenant could otherwise spend for everyone.
 */
export const MAX_VALUES = 50_000

const EMPTY = Buffer.alloc(0)
const NON_ASCII = /[^\x00-\x7f]/
const NUMBER_Y = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y
const HEX4 = /^[0-9a-fA-F]{4}$/
const IDENT = /^[A-Za-z_][A-Za-z0-9_]*$/
const LONE_SURROGATE = /\p{Cs}/u
const NEEDS_ESCAPE = /["\\\x00-\x1f]/
/** Characters a JSON string holds as they are: everything but `"`, `\\` and controls. */
const PLAIN_RUN_Y = /[^"\\\x00-\x1f]*/y

/** True if engine-schema.json describes the operation's body. */
export function hasBodySchema (operationId: string): boolean {
  return bodySchemas.has(operationId)
}

/** Decode a JSON request body for `operationId` (see the module comment). Throws BODY_INVALID. */
export function decodeBody (operationId: string, raw: Buffer): DecodedBody {
  if (raw.length === 0) return { value: undefined, bytes: EMPTY }
  if (raw.length >= 3 && raw[0] === 0xef && raw[1] === 0xbb && raw[2] === 0xbf) {
    throw invalid('request body starts with a UTF-8 byte order mark')
  }
  if (!isUtf8(raw)) throw invalid('request body is not valid UTF-8')
  const root = bodySchemas.get(operationId) ?? ANY_NODE
  const p = new Parser(raw.toString('utf8'))
  p.ws()
  if (p.pos === p.s.length) throw invalid('request body is empty (only whitespace)')
  checkRoot(operationId, root, p)
  const value = p.value(root, 0)
  p.ws()
  if (p.pos < p.s.length) p.fail('unexpected data after the JSON value')
  resolveEngineQuirks(operationId, value)
  // Encoded when first asked for: a body the policy rewrites is encoded once, rewritten.
  // (Rewrites copy what they change; the decoded value itself is never changed.)
  let bytes: Buffer | undefined
  return { value, get bytes () { return (bytes ??= Buffer.from(encode(value, 0, false), 'utf8')) } }
}

/**
 * Decode a JSON document the engine sent (an answer the gateway narrows for a tenant):
 * every object read as a map (keys verbatim, null prototype), every number a JsonNumber
 * holding the engine's exact digits, surrounding whitespace allowed. Throws BODY_INVALID
 * on anything that is not one strict JSON value.
 */
export function decodeJson (raw: Buffer): unknown {
  if (!isUtf8(raw)) throw invalid('document is not valid UTF-8')
  const p = new Parser(raw.toString('utf8'))
  p.ws()
  const value = p.value(ANY_NODE, 0)
  p.ws()
  if (p.pos < p.s.length) p.fail('unexpected data after the JSON value')
  return value
}

/**
 * Serialize a canonical (possibly rewritten) value: compact JSON, no trailing newline.
 * Accepts null, booleans, strings (no lone surrogates), JsonNumber (exact text), finite
 * numbers, bigints (exact integers), arrays, and plain or null-prototype objects; an
 * object property whose value is `undefined` is left out; `undefined` itself encodes as
 * an empty body. Anything else (NaN, functions, class instances, cycles, holes) throws
 * a TypeError: a bug in the code that built the value, not in the request.
 */
export function encodeBody (value: unknown): Buffer {
  if (value === undefined) return EMPTY
  return Buffer.from(encode(value, 0, true), 'utf8')
}

/** A place in a body: field or key names and array indexes. */
export type FieldPath = ReadonlyArray<string | number>

/** `HostConfig.Mounts[0].Type`, `Labels["com.example.x"]`: the notation of the error messages. */
export function formatFieldPath (path: FieldPath): string {
  let out = ''
  for (const seg of path) {
    if (typeof seg === 'number') out += `[${seg}]`
    else if (IDENT.test(seg)) out += out === '' ? seg : `.${seg}`
    else out += `[${quote(seg)}]`
  }
  return out
}

/** The value at `path` in a decoded body (own properties only), or undefined. */
export function fieldAt (value: unknown, path: FieldPath): unknown {
  let cur = value
  for (const seg of path) {
    if (cur === null || typeof cur !== 'object' || cur instanceof JsonNumber) return undefined
    if (Array.isArray(cur)) {
      if (typeof seg !== 'number') return undefined
      cur = cur[seg]
    } else {
      const key = String(seg)
      if (!Object.prototype.hasOwnProperty.call(cur, key)) return undefined
      cur = (cur as Record<string, unknown>)[key]
    }
  }
  return cur
}

function invalid (message: string): GatewayError {
  return new GatewayError('BODY_INVALID', message)
}

/** A key for a message: JSON-quoted, long ones shortened. */
function quote (key: string): string {
  return JSON.stringify(key.length > 64 ? `${key.slice(0, 60)}...` : key)
}

function describeValueStart (s: string, pos: number): string | undefined {
  switch (s.charCodeAt(pos)) {
    case 0x7b: return 'an object'
    case 0x5b: return 'an array'
    case 0x22: return 'a string'
    case 0x74: case 0x66: return 'a boolean'
    case 0x6e: return 'null'
    default: return /[-0-9]/.test(s.charAt(pos)) ? 'a number' : undefined
  }
}

function checkRoot (operationId: string, root: BodyNode, p: Parser): void {
  const got = describeValueStart(p.s, p.pos)
  if (got === undefined) return // a syntax error: the parser reports it
  if ((root.t === 'struct' || root.t === 'map') && got !== 'an object') {
    throw invalid(`${operationId} request body must be a JSON object, not ${got}`)
  }
  if (root.t === 'array' && got !== 'an array' && got !== 'null') {
    throw invalid(`${operationId} request body must be a JSON array, not ${got}`)
  }
}

class Parser {
  pos = 0
  /** Where the parser is, for messages: field/key names and array indexes. */
  private readonly path: Array<string | number> = []

  constructor (readonly s: string) {}

  fail (message: string, at: number = this.pos): never {
    const c = this.s.codePointAt(at)
    const what = at >= this.s.length
      ? 'unexpected end of input'
      : message
    const ch = c === undefined ? '' : c >= 0x20 && c < 0x7f ? ` (${JSON.stringify(String.fromCodePoint(c))})` : ` (U+${c.toString(16).toUpperCase().padStart(4, '0')})`
    throw invalid(`request body is not valid JSON: ${what}${at >= this.s.length ? '' : ch} at byte ${Buffer.byteLength(this.s.slice(0, at))}`)
  }

  private refuse (message: string): never {
    throw invalid(`invalid request body: ${message}`)
  }

  ws (): void {
    const s = this.s
    let i = this.pos
    for (;;) {
      const c = s.charCodeAt(i)
      if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) i++
      else break
    }
    this.pos = i
  }

  private values = 0

  value (node: BodyNode, depth: number): JsonValue {
    if (++this.values > MAX_VALUES) this.refuse(`more than ${MAX_VALUES} values`)
    const s = this.s
    const c = s.charCodeAt(this.pos)
    switch (c) {
      case 0x7b: return this.object(node, depth + 1)
      case 0x5b: return this.array(node, depth + 1)
      case 0x22: return this.string()
      case 0x74: return this.literal('true', true)
      case 0x66: return this.literal('false', false)
      case 0x6e: return this.literal('null', null)
      default: {
        if (c === 0x2d || (c >= 0x30 && c <= 0x39)) return this.number()
        return this.fail('expected a JSON value')
      }
    }
  }

  private literal<T> (word: string, value: T): T {
    if (!this.s.startsWith(word, this.pos)) this.fail('invalid literal')
    this.pos += word.length
    return value
  }

  private number (): JsonNumber {
    NUMBER_Y.lastIndex = this.pos
    const m = NUMBER_Y.exec(this.s)
    if (m === null) this.fail('invalid number')
    this.pos += m[0].length
    return new JsonNumber(m[0])
  }

  private string (): string {
    const s = this.s
    let i = this.pos + 1
    let start = i
    let out = ''
    for (;;) {
      // The run of ordinary characters at once (a long string is one native scan, not a loop).
      PLAIN_RUN_Y.lastIndex = i
      PLAIN_RUN_Y.test(s)
      i = PLAIN_RUN_Y.lastIndex
      const c = s.charCodeAt(i)
      if (c === 0x22) {
        this.pos = i + 1
        return out + s.slice(start, i)
      }
      if (c === 0x5c) {
        out += s.slice(start, i)
        i = this.escape(i)
        out += this.escaped
        start = i
        continue
      }
      if (!(c >= 0x20)) this.fail(Number.isNaN(c) ? 'unterminated string' : 'control character in a string', i)
      i++
    }
  }

  /** The text of the last escape read by escape(). */
  private escaped = ''

  /** Read the escape at s[i] (a backslash) into `escaped`; returns the index after it. */
  private escape (i: number): number {
    const s = this.s
    switch (s.charCodeAt(i + 1)) {
      case 0x22: this.escaped = '"'; return i + 2
      case 0x5c: this.escaped = '\\'; return i + 2
      case 0x2f: this.escaped = '/'; return i + 2
      case 0x62: this.escaped = '\b'; return i + 2
      case 0x66: this.escaped = '\f'; return i + 2
      case 0x6e: this.escaped = '\n'; return i + 2
      case 0x72: this.escaped = '\r'; return i + 2
      case 0x74: this.escaped = '\t'; return i + 2
      case 0x75: {
        const hi = this.hex4(i + 2)
        if (hi >= 0xd800 && hi <= 0xdbff && s.charCodeAt(i + 6) === 0x5c && s.charCodeAt(i + 7) === 0x75) {
          const lo = this.hex4(i + 8)
          if (lo >= 0xdc00 && lo <= 0xdfff) {
            this.escaped = String.fromCharCode(hi, lo)
            return i + 12
          }
        }
        if (hi >= 0xd800 && hi <= 0xdfff) this.fail('\\u escape leaves a lone UTF-16 surrogate', i)
        this.escaped = String.fromCharCode(hi)
        return i + 6
      }
      default: return this.fail('invalid escape in a string', i)
    }
  }

  private hex4 (i: number): number {
    const h = this.s.slice(i, i + 4)
    if (!HEX4.test(h)) this.fail('invalid \\u escape', i)
    return parseInt(h, 16)
  }

  private object (node: BodyNode, depth: number): JsonObject {
    if (depth > MAX_DEPTH) this.refuse(`nested deeper than ${MAX_DEPTH} levels at ${this.where()}`)
    const s = this.s
    this.pos++
    const obj: JsonObject = Object.create(null)
    const struct = node.t === 'struct' ? node : undefined
    const elem = node.t === 'map' ? node.v : ANY_NODE
    /** Struct only, created when needed: lower-cased field -> the spelling seen, for known fields not spelled canonically and for unknown keys. */
    let spellings: Map<string, string> | undefined
    this.ws()
    if (s.charCodeAt(this.pos) === 0x7d) { this.pos++; return obj }
    for (;;) {
      if (s.charCodeAt(this.pos) !== 0x22) this.fail('expected a string key')
      const key = this.string()
      this.ws()
      if (s.charCodeAt(this.pos) !== 0x3a) this.fail("expected ':' after an object key")
      this.pos++
      this.ws()
      let name = key
      let child = elem
      if (struct !== undefined) {
        let field = struct.exact.get(key)
        let lower: string
        if (field !== undefined) {
          lower = field.lower
        } else {
          if (NON_ASCII.test(key)) {
            this.path.push(key)
            this.refuse(`non-ASCII field name ${this.where()}`)
          }
          lower = key.toLowerCase()
          field = struct.fields.get(lower)
        }
        let prev: string | undefined
        if (field !== undefined) {
          name = field.name
          child = field.node
          // A known field is stored under its canonical name: present means seen.
          if (obj[name] !== undefined) prev = spellings?.get(lower) ?? name
          else if (key !== name) (spellings ??= new Map()).set(lower, key)
        } else {
          child = ANY_NODE
          prev = spellings?.get(lower)
          if (prev === undefined) (spellings ??= new Map()).set(lower, key)
        }
        if (prev !== undefined) {
          this.path.push(field !== undefined ? field.name : prev)
          this.refuse(prev === key
            ? `duplicate field ${this.where()}`
            : `duplicate field ${this.where()} (${quote(prev)} and ${quote(key)})`)
        }
      } else if (obj[key] !== undefined) {
        this.path.push(key)
        this.refuse(`duplicate key ${this.where()}`)
      }
      this.path.push(name)
      obj[name] = this.value(child, depth)
      this.path.pop()
      this.ws()
      const c = s.charCodeAt(this.pos)
      if (c === 0x2c) { this.pos++; this.ws(); continue }
      if (c === 0x7d) { this.pos++; return obj }
      this.fail("expected ',' or '}' after an object member")
    }
  }

  private array (node: BodyNode, depth: number): JsonValue[] {
    if (depth > MAX_DEPTH) this.refuse(`nested deeper than ${MAX_DEPTH} levels at ${this.where()}`)
    const s = this.s
    this.pos++
    const out: JsonValue[] = []
    const item = node.t === 'array' ? node.i : ANY_NODE
    this.ws()
    if (s.charCodeAt(this.pos) === 0x5d) { this.pos++; return out }
    for (let n = 0; ; n++) {
      this.path.push(n)
      out.push(this.value(item, depth))
      this.path.pop()
      this.ws()
      const c = s.charCodeAt(this.pos)
      if (c === 0x2c) { this.pos++; this.ws(); continue }
      if (c === 0x5d) { this.pos++; return out }
      this.fail("expected ',' or ']' after an array element")
    }
  }

  private where (): string {
    if (this.path.length === 0) return 'the top level'
    const p = formatFieldPath(this.path)
    if (p.length <= 200) return p
    let i = p.length - 160
    while (i < p.length && p[i] !== '.' && p[i] !== '[') i++
    return `...${p.slice(i)}`
  }
}

/** JSON.stringify for a string with no lone surrogates, skipping the call for the common case. */
function quoteString (s: string): string {
  return NEEDS_ESCAPE.test(s) ? JSON.stringify(s) : `"${s}"`
}

function encode (v: unknown, depth: number, check: boolean): string {
  switch (typeof v) {
    case 'string':
      if (check && LONE_SURROGATE.test(v)) throw new TypeError('cannot encode a string with a lone UTF-16 surrogate')
      return quoteString(v)
    case 'boolean': return v ? 'true' : 'false'
    case 'number':
      if (!Number.isFinite(v)) throw new TypeError(`cannot encode the number ${v}`)
      return JSON.stringify(v)
    case 'bigint': return v.toString()
    case 'object': break
    default: throw new TypeError(`cannot encode a ${typeof v}`)
  }
  if (v === null) return 'null'
  if (v instanceof JsonNumber) return v.text
  if (depth >= MAX_DEPTH) throw new TypeError(`cannot encode a value nested deeper than ${MAX_DEPTH} levels (a cycle?)`)
  if (Array.isArray(v)) {
    let out = '['
    for (let i = 0; i < v.length; i++) {
      const x: unknown = v[i]
      if (x === undefined) throw new TypeError(`cannot encode an undefined array element (index ${i})`)
      out += (i === 0 ? '' : ',') + encode(x, depth + 1, check)
    }
    return out + ']'
  }
  const proto: unknown = Object.getPrototypeOf(v)
  if (proto !== null && proto !== Object.prototype) throw new TypeError('cannot encode an object that is not a plain object')
  const rec = v as Record<string, unknown>
  let out = '{'
  for (const k of Object.keys(rec)) {
    const x = rec[k]
    if (x === undefined) continue
    if (check && LONE_SURROGATE.test(k)) throw new TypeError('cannot encode a key with a lone UTF-16 surrogate')
    out += (out.length === 1 ? '' : ',') + quoteString(k) + ':' + encode(x, depth + 1, check)
  }
  return out + '}'
}
