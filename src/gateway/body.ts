/**
 * Reading the bodies the gateway inspects. Only operations that declare a JSON body
 * are buffered, and only up to the configured cap; everything else is streamed.
 * The declared length is never trusted on its own: a body that claims
 * `Content-Length: 0`, or arrives chunked, is still read to its end and checked.
 */
import type { IncomingMessage } from 'node:http'
import type { Duplex } from 'node:stream'
import { GatewayError } from './errors'

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
 * The lines of a JSON-lines stream (the engine's events), as they complete: each
 * line's text and its parsed value (undefined when it is not JSON). Blank lines are skipped.
 */
export async function * jsonLines (source: AsyncIterable<Buffer | string>): AsyncGenerator<{ line: string, value: unknown }> {
  let rest = ''
  for await (const chunk of source) {
    rest += typeof chunk === 'string' ? chunk : chunk.toString('utf8')
    let nl
    while ((nl = rest.indexOf('\n')) >= 0) {
      const line = rest.slice(0, nl)
      rest = rest.slice(nl + 1)
      if (line.trim() === '') continue
      let value: unknown
      try { value = JSON.parse(line) } catch { value = undefined }
      yield { line, value }
    }
  }
}
