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

const IN_STRING = 1
const OPENS_OBJECT = 2
const OPENS_ARRAY = 3
const CLOSES_OBJECT = 4
const CLOSES_ARRAY = 5
/** What a byte means inside an object or array being skipped (0: nothing). */
const STRUCTURAL = new Uint8Array(256)
STRUCTURAL[QUOTE] = IN_STRING
STRUCTURAL[OPEN_OBJECT] = OPENS_OBJECT
STRUCTURAL[OPEN_ARRAY] = OPENS_ARRAY
STRUCTURAL[CLOSE_OBJECT] = CLOSES_OBJECT
STRUCTURAL[CLOSE_ARRAY] = CLOSES_ARRAY

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
      // One look-up for the bytes that mean nothing here (most of them).
      const c = STRUCTURAL[buf[k]]
      if (c === 0) continue
      if (c === IN_STRING) {
        for (k++; k < n; k++) {
          const d = buf[k]
          if (d === QUOTE) break
          if (d === BACKSLASH) k++
        }
      } else if (c <= OPENS_ARRAY) {
        if (depth === 31) throw UNEXPECTED
        open = (open << 1) | (c === OPENS_OBJECT ? 1 : 0)
        depth++
      } else {
        if ((open & 1) !== (c === CLOSES_OBJECT ? 1 : 0)) throw UNEXPECTED
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

/**
 * Where a scan found a member: the key's span (quotes included) and the value's. Scans
 * fill one of these instead of listing every member: a list of 200 containers has some
 * 3,000 members, of which the narrowing reads two per element.
 */
class Found {
  keyStart = -1
  keyEnd = -1
  valueStart = -1
  valueEnd = -1
}

/**
 * Scan the object whose `{` is at `i` to its end, checking its shape; `into` gets the
 * member named `key` (left at -1 when there is none). A repeated key (which the engine
 * never writes) is not taken here: decoders keep the last, but the bytes passed on would
 * still hold the others. `spans`, when given, gets each member's start and end.
 */
function scanObject (buf: Buffer, i: number, key: string, into: Found, spans?: number[]): number {
  if (buf[i] !== OPEN_OBJECT) throw UNEXPECTED
  into.keyStart = -1
  let k = ws(buf, i + 1)
  if (buf[k] === CLOSE_OBJECT) return k + 1
  for (;;) {
    if (buf[k] !== QUOTE) throw UNEXPECTED
    const keyEnd = stringEnd(buf, k)
    let v = ws(buf, keyEnd)
    if (buf[v] !== COLON) throw UNEXPECTED
    v = ws(buf, v + 1)
    const end = valueEnd(buf, v)
    if (keyIs(buf, k, keyEnd, key)) {
      if (into.keyStart !== -1) throw UNEXPECTED
      into.keyStart = k
      into.keyEnd = keyEnd
      into.valueStart = v
      into.valueEnd = end
    }
    spans?.push(k, keyEnd, end)
    k = ws(buf, end)
    if (buf[k] === CLOSE_OBJECT) return k + 1
    if (buf[k] !== COMMA) throw UNEXPECTED
    k = ws(buf, k + 1)
  }
}

/** Whether the key spanning `keyStart`..`keyEnd` (quotes included) is `key`, an ASCII string (decoded as JSON: an escaped spelling is the same key). */
function keyIs (buf: Buffer, keyStart: number, keyEnd: number, key: string): boolean {
  const from = keyStart + 1
  const len = keyEnd - 1 - from
  if (len < key.length) return false
  if (len === key.length) {
    for (let j = 0; j < len; j++) if (buf[from + j] !== key.charCodeAt(j)) return false
    return true
  }
  // Longer: only an escaped spelling of it could be the same key.
  for (let j = from; j < keyEnd - 1; j++) {
    if (buf[j] === BACKSLASH) return JSON.parse(buf.toString('utf8', keyStart, keyEnd)) === key
  }
  return false
}

function keyIn (buf: Buffer, keyStart: number, keyEnd: number, keys: readonly string[]): boolean {
  for (const k of keys) if (keyIs(buf, keyStart, keyEnd, k)) return true
  return false
}

/** The string value spanning `start`..`end` (quotes included), decoded as JSON. */
function stringValue (buf: Buffer, start: number, end: number): string {
  // Without escapes or control characters the bytes between the quotes are the string.
  for (let j = start + 1; j < end - 1; j++) {
    const b = buf[j]
    if (b === BACKSLASH || b < 0x20) return JSON.parse(buf.toString('utf8', start, end)) as string
  }
  return buf.toString('utf8', start + 1, end - 1)
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

/**
 * The narrowed answer is written into one buffer as the scan goes (it is never longer
 * than the engine's: what is cut out is longer than what stands in for it, except a
 * volume's labels that become `null`, which only ever replace a labels object holding
 * an owner label, longer than `null`).
 */
class Out {
  readonly buf: Buffer
  at = 0
  constructor (size: number) { this.buf = Buffer.allocUnsafe(size) }
  bytes (from: Buffer, start: number, end: number): void { this.at += from.copy(this.buf, this.at, start, end) }
  byte (b: number): void { this.buf[this.at++] = b }
  text (b: Buffer): void { this.at += b.copy(this.buf, this.at) }
}

// One scan runs at a time (synchronously): its scratch is shared.
const element = new Found()
const labelsAt = new Found()
const owner = new Found()
const labelSpans: number[] = []

function narrow (raw: Buffer, n: ListNarrowing): Buffer {
  let arrayStart = ws(raw, 0)
  let topEnd = -1
  if (n.at !== undefined) {
    const at = new Found()
    topEnd = scanObject(raw, arrayStart, n.at, at)
    if (at.keyStart === -1) throw UNEXPECTED
    arrayStart = at.valueStart
  }
  if (raw[arrayStart] !== OPEN_ARRAY) throw UNEXPECTED
  // A labels object emptied into `null` may be longer than what it replaces only in a tiny answer.
  const out = new Out(raw.length + NULL.length)
  out.bytes(raw, 0, arrayStart)
  out.byte(OPEN_ARRAY)
  let changed = false
  let kept = 0
  let k = ws(raw, arrayStart + 1)
  let arrayEnd: number
  if (raw[k] === CLOSE_ARRAY) arrayEnd = k + 1
  else {
    for (;;) {
      const end = narrowElement(raw, k, n, out, kept > 0)
      if (verdict !== WHOLE) changed = true
      if (verdict !== DROPPED) kept++
      k = ws(raw, end)
      if (raw[k] === CLOSE_ARRAY) { arrayEnd = k + 1; break }
      if (raw[k] !== COMMA) throw UNEXPECTED
      k = ws(raw, k + 1)
    }
  }
  // What follows the list must be the end of the document (or of the top-level object).
  if (topEnd === -1 ? ws(raw, arrayEnd) !== raw.length : ws(raw, topEnd) !== raw.length) throw UNEXPECTED
  if (!changed) return raw
  out.byte(CLOSE_ARRAY)
  out.bytes(raw, arrayEnd, raw.length)
  return out.buf.subarray(0, out.at)
}

const WHOLE = 0
const CHANGED = 1
const DROPPED = 2
/** What narrowElement did with the element it last read. */
let verdict = WHOLE

/**
 * Read the element whose `{` is at `start` and write it as the tenant sees it to `out`
 * (after a separator when `more`), or nothing when it is not the tenant's (`verdict`
 * says which); answers the element's end.
 */
function narrowElement (raw: Buffer, start: number, n: ListNarrowing, out: Out, more: boolean): number {
  const end = scanObject(raw, start, n.labels[0], element)
  // The labels object: the path of keys followed from the element.
  let at = element
  for (let j = 1; j < n.labels.length && at.keyStart !== -1; j++) {
    if (raw[at.valueStart] !== OPEN_OBJECT) return whole(raw, start, end, n.keep(null), out, more)
    scanObject(raw, at.valueStart, n.labels[j], labelsAt)
    at = labelsAt
  }
  if (at.keyStart === -1 || raw[at.valueStart] !== OPEN_OBJECT) return whole(raw, start, end, n.keep(null), out, more)
  const valueStart = at.valueStart
  const spans = labelSpans
  spans.length = 0
  const labelsEnd = scanObject(raw, valueStart, n.ownerKey, owner, n.hide === undefined ? undefined : spans)
  const ownerValue = owner.keyStart !== -1 && raw[owner.valueStart] === QUOTE ? stringValue(raw, owner.valueStart, owner.valueEnd) : null
  if (!n.keep(ownerValue)) return whole(raw, start, end, false, out, more)
  if (n.hide === undefined) return whole(raw, start, end, true, out, more)
  const hidden = n.hide.keys
  let keptLabels = 0
  for (let m = 0; m < spans.length; m += 3) {
    if (keyIn(raw, spans[m], spans[m + 1], hidden)) spans[m] = -1
    else keptLabels++
  }
  if (keptLabels === spans.length / 3) return whole(raw, start, end, true, out, more)
  if (more) out.byte(COMMA)
  out.bytes(raw, start, valueStart)
  if (keptLabels === 0) out.text(n.hide.empty === null ? NULL : EMPTY_OBJECT)
  else {
    out.byte(OPEN_OBJECT)
    let first = true
    for (let m = 0; m < spans.length; m += 3) {
      if (spans[m] === -1) continue
      if (!first) out.byte(COMMA)
      first = false
      out.bytes(raw, spans[m], spans[m + 2])
    }
    out.byte(CLOSE_OBJECT)
  }
  out.bytes(raw, labelsEnd, end)
  verdict = CHANGED
  return end
}

/** The element as the engine wrote it, when `keep`. */
function whole (raw: Buffer, start: number, end: number, keep: boolean, out: Out, more: boolean): number {
  if (!keep) {
    verdict = DROPPED
    return end
  }
  if (more) out.byte(COMMA)
  out.bytes(raw, start, end)
  verdict = WHOLE
  return end
}
