/**
 * Reading the bodies the gateway inspects. Only operations that declare a JSON body
 * are buffered, and only up to the configured cap; everything else is streamed.
 * The declared length is never trusted on its own: a body that claims
 * `Content-Length: 0`, or arrives chunked, is still read to its end and checked.
 */
import type { IncomingMessage } from 'node:http'
import type { Duplex } from 'node:stream'
import { GatewayError } from '../api/errors'

function tooLarge (limit: number): GatewayError {
  return new GatewayError('BODY_TOO_LARGE', `request body exceeds the gateway's limit of ${limit} bytes`)
}

/** True if the request carries a body by HTTP framing (RFC 9112 §6.3). */
export function hasBody (req: IncomingMessage): boolean {
  return req.headers['transfer-encoding'] !== undefined || Number(req.headers['content-length'] ?? 0) > 0
}

/** Read an ordinary request's whole body, refusing more than `limit` bytes. */
export async function readCapped (req: IncomingMessage, limit: number): Promise<Buffer> {
  const declared = Number(req.headers['content-length'] ?? 0)
  if (declared > limit) throw tooLarge(limit)
  const chunks: Buffer[] = []
  let size = 0
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length
    if (size > limit) throw tooLarge(limit)
    chunks.push(chunk)
  }
  return Buffer.concat(chunks, size)
}

/**
 * Read the body of a request that arrived through the server's `upgrade` event:
 * Node does not parse those bodies, so the first `Content-Length` bytes after the
 * head are taken from `head` and then the socket. Returns the body and whatever
 * the client sent beyond it (already stream data).
 */
export async function readUpgradeBody (req: IncomingMessage, socket: Duplex, head: Buffer, limit: number): Promise<{ body: Buffer, rest: Buffer }> {
  if (req.headers['transfer-encoding'] !== undefined) {
    throw new GatewayError('BODY_INVALID', 'a chunked body cannot precede a connection upgrade')
  }
  const length = Number(req.headers['content-length'] ?? 0)
  if (!Number.isSafeInteger(length) || length < 0) throw new GatewayError('BODY_INVALID', 'invalid Content-Length')
  if (length > limit) throw tooLarge(limit)
  if (head.length >= length) return { body: head.subarray(0, length), rest: head.subarray(length) }
  return await new Promise((resolve, reject) => {
    const chunks = [head]
    let have = head.length
    const done = (err?: Error): void => {
      socket.off('data', onData); socket.off('end', onEnd); socket.off('error', done)
      if (err) return reject(err)
      socket.pause()
      const all = Buffer.concat(chunks, have)
      resolve({ body: all.subarray(0, length), rest: all.subarray(length) })
    }
    const onData = (chunk: Buffer): void => {
      chunks.push(chunk)
      have += chunk.length
      if (have >= length) done()
    }
    const onEnd = (): void => done(new GatewayError('BODY_INVALID', 'request body ended before Content-Length bytes'))
    socket.on('data', onData)
    socket.once('end', onEnd)
    socket.once('error', done)
    socket.resume()
  })
}

/**
 * The records of a stream of JSON texts (the engine's events), as they complete: each
 * record's exact bytes (without its `\n`), its text, and its parsed value (undefined
 * when it is not JSON). Blank lines are skipped.
 *
 * Every framing the engine negotiates for `/events` is read: `application/json` (what
 * dockerd answered before API 1.52: one JSON text per line, whatever the Accept header),
 * `application/x-ndjson` and `application/jsonl` (the same lines), and
 * `application/json-seq` (RFC 7464: some engines start each record with an ASCII record
 * separator, 0x1E, which is not JSON whitespace; it stays in `bytes`). Lines are split
 * on the byte 0x0A, which never occurs inside a UTF-8 sequence, so a multi-byte
 * character split between two chunks is decoded whole and `bytes` are the engine's.
 */
export async function * jsonLines (source: AsyncIterable<Buffer | string>): AsyncGenerator<{ bytes: Buffer, line: string, value: unknown }> {
  let rest: Buffer = EMPTY
  for await (const chunk of source) {
    const data = typeof chunk === 'string' ? Buffer.from(chunk, 'utf8') : chunk
    let buf = rest.length ? Buffer.concat([rest, data]) : data
    let nl
    while ((nl = buf.indexOf(0x0a)) >= 0) {
      const bytes = buf.subarray(0, nl)
      buf = buf.subarray(nl + 1)
      const record = jsonRecord(bytes)
      if (record) yield record
    }
    // A copy: the remainder must not pin (or alias) the whole chunk it came from.
    rest = Buffer.from(buf)
  }
}

const EMPTY = Buffer.alloc(0)
/** RFC 7464's record separator. */
const RS = '\x1e'

function jsonRecord (bytes: Buffer): { bytes: Buffer, line: string, value: unknown } | null {
  const line = bytes.toString('utf8')
  const text = line.startsWith(RS) ? line.slice(1) : line
  if (text.trim() === '') return null
  let value: unknown
  try { value = JSON.parse(text) } catch { value = undefined }
  return { bytes: Buffer.from(bytes), line, value }
}
