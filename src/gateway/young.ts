/**
 * Streamed bytes and V8's young generation. Every chunk a socket reads is a buffer of its
 * own outside the JavaScript heap, freed only when the young generation is next collected;
 * and a stream allocates little else, so at hundreds of MB/s the dead chunks pile up
 * between collections (npm run bench: a 200 MB `cp` took the gateway from 109 MB to 152 MB
 * resident). So every YOUNG_GC_BYTES relayed the young generation is collected (a scavenge:
 * a fraction of a millisecond, its objects mostly dead), which keeps the memory a stream
 * holds flat with its size: 200 MB cp out, cp in, exec and logs each within 7 MB of the
 * idle gateway (16 MiB: 19 MB; none: 15-27 MB), and no more gateway CPU per GB (less:
 * the large collections that the piled-up buffers caused are gone). Small requests never come near it: their young-generation
 * size (`--max-semi-space-size`, cli.ts) is left as it is.
 *
 * The collector is V8's own `gc` function, taken from a fresh context once the flag that
 * exposes it is set: nothing is added to the gateway's global object. Where it cannot be
 * had, streams go on as before.
 */
import v8 from 'node:v8'
import vm from 'node:vm'

export const YOUNG_GC_BYTES = 4 * 1024 * 1024

type Collect = (options: { type: 'minor' }) => void

let collect: Collect | null | undefined
let since = 0

function collector (): Collect | null {
  try {
    v8.setFlagsFromString('--expose-gc')
    const gc = vm.runInNewContext('gc') as unknown
    return typeof gc === 'function' ? gc as Collect : null
  } catch {
    return null
  }
}

/** `n` more bytes streamed through the gateway (either way). */
export function streamed (n: number): void {
  since += n
  if (since < YOUNG_GC_BYTES) return
  since = 0
  collect ??= collector()
  collect?.({ type: 'minor' })
}
