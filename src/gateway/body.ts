/**
 * Reading the bodies the gateway inspects. Only operations that declare a JSON body
 * are buffered, and only up to the configured cap; everything else is streamed.
 * The declared length is never trusted on its own: a body that claims
 * `Content-Length: 0`, or arrives chunked, is still read to its end and checked.
 *
 * While a JSON body is read, each chunk is counted against the decoder's limits of
 * depth and number of values (api/body/shape.ts) and charged to the body budget
 * (budget.ts): a body that crosses either is refused at that chunk, with the rest
 * left unread.
 */
import type { IncomingMessage } from 'node:http'
import type { Duplex } from 'node:stream'
import { JsonShape } from '../api/body/shape'
import { GatewayError } from '../api/errors'

/** How one body is read: its cap, what to say above it, and what to charge its bytes to. */
export interface BodyLimits {
  readonly limit: number
  /** The refusal for a body over `limit` (default: over the gateway's limit). */
  readonly tooLarge?: (limit: number) => GatewayError
  /** Charged each chunk's size as it arrives (a declared length at once); throws to refuse. */
  readonly take?: (bytes: number) => void
  /** Awaited once the declared length has been checked and charged, before the first byte is read. */
  readonly ready?: (declared: number) => Promise<void>
}

function tooLarge (limit: number): GatewayError {
  return new GatewayError('BODY_TOO_LARGE', `request body exceeds the gateway's limit of ${limit} bytes`)
}

/** True if the request carries a body by HTTP framing (RFC 9112 §6.3). */
export function hasBody (req: IncomingMessage): boolean {
  return req.headers['transfer-encoding'] !== undefined || Number(req.headers['content-length'] ?? 0) > 0
}

/** Read an ordinary request's whole JSON body, refusing more than `limit` bytes, or a shape the decoder would refuse, as it arrives. */
export async function readCapped (req: IncomingMessage, limits: BodyLimits | number): Promise<Buffer> {
  const { limit, tooLarge: over = tooLarge, take, ready } = typeof limits === 'number' ? { limit: limits } : limits
  const declared = Number(req.headers['content-length'] ?? 0)
  if (declared > limit) throw over(limit)
  // A declared length is charged before the first byte is read; a chunked body as it comes.
  const chunked = req.headers['transfer-encoding'] !== undefined
  if (!chunked && declared > 0) take?.(declared)
  await ready?.(chunked ? 0 : declared)
  const shape = new JsonShape()
  const chunks: Buffer[] = []
  let size = 0
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length
    if (size > limit) throw over(limit)
    if (chunked) take?.(chunk.length)
    shape.push(chunk)
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
export async function readUpgradeBody (req: IncomingMessage, socket: Duplex, head: Buffer, limits: BodyLimits | number): Promise<{ body: Buffer, rest: Buffer }> {
  const { limit, tooLarge: over = tooLarge, take } = typeof limits === 'number' ? { limit: limits } : limits
  if (req.headers['transfer-encoding'] !== undefined) {
    // BuildKit clients (docker-py's and dockerode's suites, the 20.10 CLI over some
    // transports) open `POST /session` with an empty chunked body, which the engine
    // reads and upgrades. Only that empty body is taken (its last chunk, no trailers):
    // the engine is sent the gateway's reading of it, no body at all (Content-Length 0).
    if (String(req.headers['transfer-encoding']).trim().toLowerCase() !== 'chunked') {
      throw new GatewayError('BODY_INVALID', 'a chunked body cannot precede a connection upgrade')
    }
    return { body: EMPTY, rest: await emptyChunkedBody(socket, head) }
  }
  const length = Number(req.headers['content-length'] ?? 0)
  if (!Number.isSafeInteger(length) || length < 0) throw new GatewayError('BODY_INVALID', 'invalid Content-Length')
  if (length > limit) throw over(limit)
  if (length > 0) take?.(length)
  const shape = new JsonShape()
  if (head.length >= length) {
    // Copies: the body and the stream data must not pin (or alias) the head they came in.
    const body = Buffer.from(head.subarray(0, length))
    shape.push(body)
    return { body, rest: Buffer.from(head.subarray(length)) }
  }
  shape.push(head)
  return await new Promise((resolve, reject) => {
    const chunks = [head]
    let have = head.length
    const done = (err?: Error): void => {
      socket.off('data', onData); socket.off('end', onEnd); socket.off('error', done)
      if (err) return reject(err)
      socket.pause()
      const all = Buffer.concat(chunks, have)
      resolve({ body: all.subarray(0, length), rest: Buffer.from(all.subarray(length)) })
    }
    const onData = (chunk: Buffer): void => {
      try {
        shape.push(chunk.subarray(0, Math.max(0, length - have)))
      } catch (err) {
        return done(err as Error)
      }
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
  const lines = new JsonLineSplitter()
  for await (const chunk of source) {
    // Copies: a record kept by the consumer must not pin (or alias) the chunk it came from.
    for (const r of lines.records(typeof chunk === 'string' ? Buffer.from(chunk, 'utf8') : chunk)) yield { ...r, bytes: Buffer.from(r.bytes) }
  }
}

/**
 * jsonLines' reading, one chunk at a time (events narrowed for a tenant: a Transform,
 * not a chain of async generators per held stream). `records` returns the records the
 * chunk completes, their `bytes` views of this chunk (or of its join with the kept
 * remainder); the incomplete last line is kept as a copy of its own, not a slice of a
 * pooled or received buffer that a stream idle for hours would pin.
 */
export class JsonLineSplitter {
  private rest: Buffer = EMPTY

  records (data: Buffer): Array<{ bytes: Buffer, line: string, value: unknown }> {
    let buf = this.rest.length ? Buffer.concat([this.rest, data]) : data
    const out: Array<{ bytes: Buffer, line: string, value: unknown }> = []
    let nl
    while ((nl = buf.indexOf(0x0a)) >= 0) {
      const record = jsonRecord(buf.subarray(0, nl))
      buf = buf.subarray(nl + 1)
      if (record) out.push(record)
    }
    this.rest = buf.length ? ownCopy(buf) : EMPTY
    return out
  }
}

/** A copy in memory of its own (Buffer.from may slice a shared 8 KiB pool that the copy then keeps alive). */
export function ownCopy (buf: Buffer): Buffer {
  const copy = Buffer.allocUnsafeSlow(buf.length)
  buf.copy(copy)
  return copy
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
  return { bytes, line, value }
}

/** The last chunk of an empty chunked body, `0[;ext]\r\n\r\n`: what follows it is returned (already stream data). */
const EMPTY_CHUNKED = /^0+(?:;[^\r\n]*)?\r\n\r\n/
async function emptyChunkedBody (socket: Duplex, head: Buffer): Promise<Buffer> {
  const refused = (): GatewayError => new GatewayError('BODY_INVALID', 'a chunked body cannot precede a connection upgrade, unless it is empty')
  const settle = (data: Buffer): Buffer | null | undefined => {
    const m = EMPTY_CHUNKED.exec(data.toString('latin1'))
    if (m) return Buffer.from(data.subarray(m[0].length))
    // Undecided while the data could still become an empty last chunk (a short line).
    return data.length < 256 && !data.includes('\r\n\r\n') ? null : undefined
  }
  const now = settle(head)
  if (now !== null) { if (now === undefined) throw refused(); return now }
  return await new Promise((resolve, reject) => {
    let have = head
    const done = (err?: Error, rest?: Buffer): void => {
      socket.off('data', onData); socket.off('end', onEnd); socket.off('error', done)
      socket.pause()
      if (err) reject(err); else resolve(rest ?? EMPTY)
    }
    const onData = (chunk: Buffer): void => {
      have = Buffer.concat([have, chunk])
      const r = settle(have)
      if (r === undefined) done(refused())
      else if (r !== null) done(undefined, r)
    }
    const onEnd = (): void => done(new GatewayError('BODY_INVALID', 'request body ended before its last chunk'))
    socket.on('data', onData)
    socket.once('end', onEnd)
    socket.once('error', done)
    socket.resume()
  })
}
