/**
 * A one-file tar archive generated on the fly, for the upload benchmark
 * (`PUT /containers/{id}/archive`): a hand-built ustar header (POSIX.1-1988), the
 * file's bytes from one reused random buffer, padding to the 512-byte block and the
 * two zero blocks that end an archive. Nothing is held in memory beyond one chunk.
 */
import { randomBytes } from 'node:crypto'

const BLOCK = 512

/** The 512-byte ustar header of a regular file owned by root. `size` must stay below 8 GiB (11 octal digits). */
export function ustarHeader (name: string, size: number, mtimeSeconds: number): Buffer {
  if (Buffer.byteLength(name) > 100) throw new Error(`tar name too long: ${name}`)
  if (size >= 8 ** 11) throw new Error('ustar size field holds at most 8 GiB - 1')
  const h = Buffer.alloc(BLOCK, 0)
  const text = (offset: number, length: number, value: string): void => { h.write(value, offset, length, 'ascii') }
  // Numeric fields are zero-padded octal terminated by NUL.
  const octal = (offset: number, length: number, value: number): void => text(offset, length, value.toString(8).padStart(length - 1, '0') + '\0')
  text(0, 100, name)
  octal(100, 8, 0o644) // mode
  octal(108, 8, 0) // uid
  octal(116, 8, 0) // gid
  octal(124, 12, size)
  octal(136, 12, Math.floor(mtimeSeconds))
  h.fill(0x20, 148, 156) // the checksum is computed with its own field as spaces
  text(156, 1, '0') // regular file
  text(257, 6, 'ustar\0')
  text(263, 2, '00')
  text(265, 32, 'root')
  text(297, 32, 'root')
  let sum = 0
  for (const byte of h) sum += byte
  text(148, 8, sum.toString(8).padStart(6, '0') + '\0 ')
  return h
}

/** Total length of the archive `tarStream(name, size)` produces. */
export function tarLength (size: number): number {
  return BLOCK + size + ((BLOCK - (size % BLOCK)) % BLOCK) + 2 * BLOCK
}

/** The archive as an async iterable of chunks of at most `chunkSize` bytes. */
export async function * tarStream (name: string, size: number, chunkSize = 1 << 20): AsyncGenerator<Buffer> {
  yield ustarHeader(name, size, Date.now() / 1000)
  // The same random chunk is sent again and again: the content is immaterial, and a
  // fresh buffer per chunk would measure the generator, not the gateway.
  const chunk = randomBytes(chunkSize)
  for (let left = size; left > 0; left -= chunkSize) {
    yield left >= chunkSize ? chunk : chunk.subarray(0, left)
  }
  yield Buffer.alloc(((BLOCK - (size % BLOCK)) % BLOCK) + 2 * BLOCK, 0)
}
