/**
 * A list the engine answered, narrowed to a tenant in one pass over the engine's own
 * bytes: each element's owner label is read where it lies, the elements of other owners
 * are cut out, and the owner labels of the kept ones are cut out of their labels object.
 * Nothing is decoded whole or encoded again, so every kept byte is the engine's (numbers,
 * escapes, field order, fields the gateway does not know). A list of 200 containers costs
 * a tenth of decoding, filtering and re-encoding it (docs/tenancy.md, rule 5).
 *
 * Only the shape the engine writes is taken this way: a JSON array of objects (or such an
 * array under one key of the top-level object, as VolumeList's `Volumes`). Anything else
 * (a `null` list, an element that is not an object, bytes that are not JSON as far as the
 * scan reads them) answers `undefined`, and the caller decodes the answer whole instead,
 * which refuses what is not JSON.
 */

/** How a list answer is narrowed (tenancy/operations.ts keepOwn). */
export interface ListNarrowing {
  /** The list is the value of this key of the top-level object; without it, the top level. */
  readonly at?: string
  /** The path of keys from an element to its labels object (`['Labels']`, `['Spec', 'Labels']`). */
  readonly labels: readonly string[]
  /** The label that names the owner. */
  readonly ownerKey: string
  /** Whether an element stays, by its owner label's value (`null`: none, or not a string). */
  readonly keep: (owner: string | null) => boolean
  /** Labels taken out of each kept element, and what a labels object left empty becomes. */
  readonly hide?: { readonly keys: readonly string[], readonly empty: Record<string, never> | null }
}

const QUOTE = 0x22
const BACKSLASH = 0x5c
const COLON = 0x3a
const COMMA = 0x2c
const OPEN_OBJECT = 0x7b
const CLOSE_OBJECT = 0x7d
const OPEN_ARRAY = 0x5b
const CLOSE_ARRAY = 0x5d

const OPEN_LIST = Buffer.from('[')
const CLOSE_LIST = Buffer.from(']')
const OPEN_LABELS = Buffer.from('{')
const CLOSE_LABELS = Buffer.from('}')
const SEPARATOR = Buffer.from(',')
const NULL = Buffer.from('null')
const EMPTY_OBJECT = Buffer.from('{}')

/** Thrown inside the scan for anything but the expected shape; narrowList answers `undefined`. */
class Unexpected extends Error {}
const UNEXPECTED = new Unexpected('not the expected shape')

function ws (buf: Buffer, i: number): number {
  for (;;) {
    const b = buf[i]
    if (b !== 0x20 && b !== 0x0a && b !== 0x0d && b !== 0x09) return i
    i++
  }
}

/** The end (exclusive) of the string whose opening quote is at `i`. */
function stringEnd (buf: Buffer, i: number): number {
  // Byte by byte: the strings of an engine's answer are short, shorter than a call to indexOf costs.
  const n = buf.length
  for (let k = i + 1; k < n; k++) {
    const c = buf[k]
    if (c === QUOTE) return k + 1
    if (c === BACKSLASH) k++
  }
  throw UNEXPECTED
}

/** The end (exclusive) of the value that starts at `i`. */
function valueEnd (buf: Buffer, i: number): number {
  const b = buf[i]
  if (b === QUOTE) return stringEnd(buf, i)
  if (b === OPEN_OBJECT || b === OPEN_ARRAY) {
    // The kinds of the brackets open, as bits (1: object), up to 31 deep; deeper is not taken.
    let open = b === OPEN_OBJECT ? 1 : 0
    let depth = 1
    const n = buf.length
    for (let k = i + 1; k < n; k++) {
      const c = buf[k]
      if (c === QUOTE) {
        for (k++; k < n; k++) {
          const d = buf[k]
          if (d === QUOTE) break
          if (d === BACKSLASH) k++
        }
      } else if (c === OPEN_OBJECT || c === OPEN_ARRAY) {
        if (depth === 31) throw UNEXPECTED
        open = (open << 1) | (c === OPEN_OBJECT ? 1 : 0)
        depth++
      } else if (c === CLOSE_OBJECT || c === CLOSE_ARRAY) {
        if ((open & 1) !== (c === CLOSE_OBJECT ? 1 : 0)) throw UNEXPECTED
        open >>>= 1
        if (--depth === 0) return k + 1
      }
    }
    throw UNEXPECTED
  }
  // A number, true, false or null.
  let k = i
  while (k < buf.length && isScalarByte(buf[k])) k++
  if (k === i) throw UNEXPECTED
  return k
}

/** A byte of a number or of `true`, `false`, `null`. */
function isScalarByte (b: number): boolean {
  return (b >= 0x30 && b <= 0x39) || (b >= 0x61 && b <= 0x7a) || (b >= 0x41 && b <= 0x5a) || b === 0x2d || b === 0x2b || b === 0x2e
}

interface Member { readonly start: number, readonly keyStart: number, readonly keyEnd: number, readonly valueStart: number, readonly end: number }

/** The members of the object whose `{` is at `i`, and the end of the object. */
function members (buf: Buffer, i: number): { list: Member[], end: number } {
  if (buf[i] !== OPEN_OBJECT) throw UNEXPECTED
  const list: Member[] = []
  let k = ws(buf, i + 1)
  if (buf[k] === CLOSE_OBJECT) return { list, end: k + 1 }
  for (;;) {
    if (buf[k] !== QUOTE) throw UNEXPECTED
    const keyEnd = stringEnd(buf, k)
    let v = ws(buf, keyEnd)
    if (buf[v] !== COLON) throw UNEXPECTED
    v = ws(buf, v + 1)
    const end = valueEnd(buf, v)
    list.push({ start: k, keyStart: k, keyEnd, valueStart: v, end })
    k = ws(buf, end)
    if (buf[k] === CLOSE_OBJECT) return { list, end: k + 1 }
    if (buf[k] !== COMMA) throw UNEXPECTED
    k = ws(buf, k + 1)
  }
}

/** Whether the key of `m` is `key`, an ASCII string (decoded as JSON: an escaped spelling is the same key). */
function keyIs (buf: Buffer, m: Member, key: string): boolean {
  const from = m.keyStart + 1
  const len = m.keyEnd - 1 - from
  if (len < key.length) return false
  if (len === key.length) {
    for (let j = 0; j < len; j++) if (buf[from + j] !== key.charCodeAt(j)) return false
    return true
  }
  // Longer: only an escaped spelling of it could be the same key.
  for (let j = from; j < m.keyEnd - 1; j++) {
    if (buf[j] === BACKSLASH) return JSON.parse(buf.toString('utf8', m.keyStart, m.keyEnd)) === key
  }
  return false
}

function keyIn (buf: Buffer, m: Member, keys: readonly string[]): boolean {
  return keys.some((k) => keyIs(buf, m, k))
}

/**
 * The member named `key`. A repeated key (which the engine never writes) is not taken
 * here: decoders keep the last, but the bytes passed on would still hold the others.
 */
function member (buf: Buffer, list: Member[], key: string): Member | undefined {
  let found: Member | undefined
  for (const m of list) {
    if (!keyIs(buf, m, key)) continue
    if (found !== undefined) throw UNEXPECTED
    found = m
  }
  return found
}

/**
 * The engine's answer narrowed, `raw` itself when nothing changes, or `undefined` when
 * the answer is not the expected shape.
 */
export function narrowList (raw: Buffer, n: ListNarrowing): Buffer | undefined {
  try {
    return narrow(raw, n)
  } catch (err) {
    if (err instanceof Unexpected || err instanceof SyntaxError) return undefined
    throw err
  }
}

function narrow (raw: Buffer, n: ListNarrowing): Buffer {
  let arrayStart = ws(raw, 0)
  let top: { end: number } | undefined
  if (n.at !== undefined) {
    const doc = members(raw, arrayStart)
    const m = member(raw, doc.list, n.at)
    if (m === undefined) throw UNEXPECTED
    arrayStart = m.valueStart
    top = doc
  }
  if (raw[arrayStart] !== OPEN_ARRAY) throw UNEXPECTED
  const pieces: Buffer[] = [raw.subarray(0, arrayStart), OPEN_LIST]
  let changed = false
  let kept = 0
  let k = ws(raw, arrayStart + 1)
  let arrayEnd: number
  if (raw[k] === CLOSE_ARRAY) arrayEnd = k + 1
  else {
    for (;;) {
      const element = members(raw, k)
      const piece = narrowElement(raw, k, element, n)
      if (piece === undefined || piece.changed) changed = true
      if (piece !== undefined) {
        if (kept > 0) pieces.push(SEPARATOR)
        pieces.push(...piece.bytes)
        kept++
      }
      k = ws(raw, element.end)
      if (raw[k] === CLOSE_ARRAY) { arrayEnd = k + 1; break }
      if (raw[k] !== COMMA) throw UNEXPECTED
      k = ws(raw, k + 1)
    }
  }
  // What follows the list must be the end of the document (or of the top-level object).
  const rest = top === undefined ? ws(raw, arrayEnd) : top.end
  if (top === undefined ? rest !== raw.length : ws(raw, rest) !== raw.length) throw UNEXPECTED
  if (!changed) return raw
  pieces.push(CLOSE_LIST, raw.subarray(arrayEnd))
  return Buffer.concat(pieces)
}

/** The element's bytes as the tenant sees them (`changed`: not the engine's whole), or `undefined` when it is not the tenant's. */
function narrowElement (raw: Buffer, start: number, element: { list: Member[], end: number }, n: ListNarrowing): { bytes: Buffer[], changed: boolean } | undefined {
  const whole = { bytes: [raw.subarray(start, element.end)], changed: false }
  // The labels object: the path of keys followed from the element.
  let at: Member | undefined
  let here = element
  for (const [j, key] of n.labels.entries()) {
    at = member(raw, here.list, key)
    if (at === undefined) return n.keep(null) ? whole : undefined
    if (j < n.labels.length - 1) {
      if (raw[at.valueStart] !== OPEN_OBJECT) return n.keep(null) ? whole : undefined
      here = members(raw, at.valueStart)
    }
  }
  const labelsAt = at as Member
  if (raw[labelsAt.valueStart] !== OPEN_OBJECT) return n.keep(null) ? whole : undefined
  const labels = members(raw, labelsAt.valueStart)
  const ownerMember = member(raw, labels.list, n.ownerKey)
  const owner = ownerMember !== undefined && raw[ownerMember.valueStart] === QUOTE ? JSON.parse(raw.toString('utf8', ownerMember.valueStart, ownerMember.end)) as string : null
  if (!n.keep(owner)) return undefined
  if (n.hide === undefined) return whole
  const hidden = n.hide.keys
  const kept = labels.list.filter((m) => !keyIn(raw, m, hidden))
  if (kept.length === labels.list.length) return whole
  const bytes = [raw.subarray(start, labelsAt.valueStart)]
  if (kept.length === 0) bytes.push(n.hide.empty === null ? NULL : EMPTY_OBJECT)
  else {
    bytes.push(OPEN_LABELS)
    kept.forEach((m, j) => { if (j > 0) bytes.push(SEPARATOR); bytes.push(raw.subarray(m.start, m.end)) })
    bytes.push(CLOSE_LABELS)
  }
  bytes.push(raw.subarray(labels.end, element.end))
  return { bytes, changed: true }
}
