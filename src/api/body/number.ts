/**
 * A JSON number kept as its exact text. The engine decodes numbers into Go int64,
 * uint64 and float64 fields; a JavaScript double would round 9223372036854775807 and
 * turn `1.0` (which the engine refuses for an integer field) into `1` (which it
 * accepts). Decoded bodies therefore hold every number as a `JsonNumber` whose text
 * is forwarded unchanged.
 *
 * Comparing in policy code:
 *   - `Number(x)`, `+x`, `x > 5`, `x <= 1024`, `x == 5` use `valueOf()`: the nearest
 *     double. Rounding is monotone, so an ordering against a constant is exact except
 *     within one rounding step of that constant above 2^53 (use `toBigInt()` there).
 *   - `x === 5` is always false: `x` is an object. Write `Number(x) === 5`.
 *   - `String(x)` / template literals give the exact text (`"1.0"`, `"-0"`, `"1e3"`).
 *   - `JSON.stringify` writes the (possibly rounded) double: use encodeBody() to
 *     serialize bodies exactly.
 */

const NUMBER = /^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?$/

export class JsonNumber {
  /** The number exactly as it appeared in the body (RFC 8259 grammar). */
  readonly text: string

  constructor (text: string) {
    if (!NUMBER.test(text)) throw new TypeError(`not a JSON number: ${JSON.stringify(text.slice(0, 40))}`)
    this.text = text
  }

  /** A JsonNumber for a value policy code computes: a finite double or a bigint. */
  static from (value: number | bigint): JsonNumber {
    if (typeof value === 'bigint') return new JsonNumber(value.toString())
    if (!Number.isFinite(value)) throw new TypeError(`not a finite number: ${value}`)
    return new JsonNumber(JSON.stringify(value))
  }

  /** The nearest double (what `Number(x)`, `<`, `>` and `==` use). */
  valueOf (): number { return Number(this.text) }

  /** The exact text. */
  toString (): string { return this.text }

  /** For JSON.stringify (logs): the nearest double. Bodies are serialized by encodeBody, exactly. */
  toJSON (): number { return Number(this.text) }

  /** True if the text is an integer literal (no fraction, no exponent): what Go accepts for an int field. */
  get isInteger (): boolean { return !/[.eE]/.test(this.text) }

  /** The exact integer value; throws RangeError if the text is not an integer literal. */
  toBigInt (): bigint {
    if (!this.isInteger) throw new RangeError(`${this.text} is not an integer literal`)
    return BigInt(this.text)
  }
}

export function isJsonNumber (value: unknown): value is JsonNumber {
  return value instanceof JsonNumber
}

/**
 * A body value as a number, for limits and comparisons: a number's or JsonNumber's value,
 * Number() of a string or bigint, and NaN for anything else. Number() itself would throw
 * on the decoder's objects (they have no prototype, so no valueOf or toString), and on an
 * array holding one; Go refuses all of those for a number field anyway.
 */
export function numberOf (v: unknown): number {
  if (typeof v === 'number') return v
  if (v instanceof JsonNumber) return v.valueOf()
  if (typeof v === 'string' || typeof v === 'bigint') return Number(v)
  return NaN
}
