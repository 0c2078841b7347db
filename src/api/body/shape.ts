/**
 * The shape of a JSON body, counted as its bytes arrive and before anything is
 * decoded: nesting depth and number of values, against the decoder's own limits
 * (MAX_DEPTH, MAX_VALUES in decode.ts). A body of `[[[[...` or of a million tiny
 * values is refused at the chunk that crosses a limit, while it is still being read:
 * the rest is never buffered, turned into text or parsed.
 *
 * The count needs no parse and no stack. Outside strings, the values of a body are
 * its objects and arrays (`{`, `[`), its strings that are not keys, and its runs of
 * other characters (numbers, `true`, `false`, `null`); an object key is the string
 * before a `:`. So values = `{` + `[` + strings - `:` + runs. For valid JSON this is
 * exactly the count the decoder makes (the root, every member value and every array
 * element); for anything else the decoder refuses the body anyway. Multi-byte UTF-8
 * sequences are bytes >= 0x80: never structural, and only valid inside strings.
 */
import { GatewayError } from '../errors'
import { MAX_DEPTH, MAX_VALUES } from './decode'

const QUOTE = 0x22
const BACKSLASH = 0x5c

export class JsonShape {
  private inString = false
  private escaped = false
  private inRun = false
  private depth = 0
  private values = 0

  /** The values counted so far (exact for valid JSON once it is complete). */
  get count (): number { return this.values }

  /** Count one more chunk of the body; throws BODY_INVALID past a limit. */
  push (chunk: Buffer): void {
    let { inString, escaped, inRun, depth, values } = this
    for (let i = 0; i < chunk.length; i++) {
      const c = chunk[i]
      if (inString) {
        if (escaped) {
          escaped = false
        } else if (c === BACKSLASH) {
          escaped = true
        } else if (c === QUOTE) {
          inString = false
        } else {
          // A long string is skipped in native scans: to its closing quote when no
          // backslash comes before it (the common case), else byte by byte.
          const q = chunk.indexOf(QUOTE, i)
          if (q - i > 32 || q < 0) {
            const end = q < 0 ? chunk.length : q
            const b = chunk.subarray(i, end).indexOf(BACKSLASH)
            if (b < 0) { i = end - 1; continue }
            i += b - 1
          }
        }
        continue
      }
      switch (c) {
        case QUOTE:
          inString = true
          inRun = false
          // One over while it may still be a key (a `:` takes it back): the decoder is exact.
          if (++values > MAX_VALUES + 1) throw refuse(`more than ${MAX_VALUES} values`)
          break
        case 0x7b: case 0x5b: // { [
          inRun = false
          if (++values > MAX_VALUES) throw refuse(`more than ${MAX_VALUES} values`)
          if (++depth > MAX_DEPTH) throw refuse(`nested deeper than ${MAX_DEPTH} levels`)
          break
        case 0x7d: case 0x5d: depth--; inRun = false; break // } ]
        case 0x3a: values--; inRun = false; break // : (the string before it was a key)
        case 0x2c: case 0x20: case 0x0a: case 0x0d: case 0x09: inRun = false; break // , and whitespace
        default:
          if (!inRun) {
            inRun = true
            if (++values > MAX_VALUES) throw refuse(`more than ${MAX_VALUES} values`)
          }
      }
    }
    this.inString = inString
    this.escaped = escaped
    this.inRun = inRun
    this.depth = depth
    this.values = values
  }
}

function refuse (what: string): GatewayError {
  return new GatewayError('BODY_INVALID', `invalid request body: ${what}`)
}
