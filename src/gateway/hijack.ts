/**
 * Hijacked connections: attach, exec start, attach over WebSocket, and BuildKit's h2c
 * `/session` and `/grpc` tunnels. The operation is authorized in the normal lifecycle;
 * then the connection changes hands and bytes are only relayed, both ways, with
 * half-close preserved: `echo x | docker exec -i c cat` ends when the client's FIN
 * reaches the engine and the engine's output and FIN come back.
 *
 * Upstream the gateway always asks for an upgrade. The client gets what it asked for:
 * the engine's `101` relayed verbatim when it sent `Upgrade`, or `200` followed by the
 * raw stream when it did not (older clients; the engine does the same).
 * When the engine declines (no such container, exec not running...) its ordinary
 * response is relayed instead.
 */
import { STATUS_CODES, type ClientRequest, type IncomingMessage, type ServerResponse } from 'node:http'
import type { Duplex } from 'node:stream'
import type { Socket } from 'node:net'
import type { RequestContext } from './context'
import type { AnswerEvents } from './exchange'
import { counter, declaredLength, finishOnce } from './streams'
import { streamed } from './young'
import { directReads, type DirectReads } from './reads'
import { GatewayError, renderError } from '../api/errors'
import { endToEnd, serializeHead, type HeaderMap } from './headers'
import { upstreamError, upstreamRequestHeaders, type Upstream } from './upstream'

/** The client side of a hijack: either a socket handed over by Node's `upgrade` event, or an ordinary request/response pair. */
export type HijackClient =
  | { form: 'upgrade', req: IncomingMessage, socket: Duplex, rest: Buffer }
  | { form: 'raw', req: IncomingMessage, res: ServerResponse }

function upgradeHeaders (req: IncomingMessage, ctx: RequestContext, upstream: Upstream): HeaderMap {
  const headers = upstreamRequestHeaders(req, ctx, upstream)
  const protocol = req.headers.upgrade ?? 'tcp'
  headers.upgrade = protocol
  headers.connection = 'Upgrade'
  // h2c upgrades carry their settings in a connection-specific header (RFC 7540 §3.2.1).
  const settings = req.headers['http2-settings']
  if (typeof settings === 'string') {
    headers['http2-settings'] = settings
    headers.connection = 'Upgrade, HTTP2-Settings'
  }
  headers['content-length'] = String(ctx.body?.length ?? 0)
  return headers
}

/** Write an error as a complete HTTP response on a socket the server has handed over. */
export function writeSocketError (socket: Duplex, err: GatewayError): void {
  const { status, body, headers } = renderError(err)
  if (socket.destroyed || !socket.writable) return
  socket.end(serializeHead(`HTTP/1.1 ${status} ${statusText(status)}`, { ...headers, connection: 'close' }) + body)
}

function statusText (status: number): string {
  return STATUS_CODES[status] ?? 'Unknown'
}

/**
 * Relay bytes both ways until both directions have ended. Each direction's end is
 * passed on as a half-close (`end()`), never as a full close; a reset or error on
 * either side tears both down.
 */
function splice (ctx: RequestContext, client: Duplex, engine: Socket, onDone: () => void): void {
  let finished = false
  const finish = (): void => {
    if (finished) return
    finished = true
    client.destroy()
    engine.destroy()
    onDone()
  }
  // Counted as the chunks go by: no stream stage between the two sockets.
  pass(client, engine, (n) => { ctx.bytesIn += n; streamed(n) })
  const reads = directReads(engine)
  if (reads !== undefined) passDirect(reads, engine, client, (n) => { ctx.bytesOut += n })
  else pass(engine, client, (n) => { ctx.bytesOut += n; streamed(n) })
  client.on('error', finish)
  engine.on('error', finish)
  // The session is over once each side has been sent everything meant for it, not
  // when one side closes: the engine closing right after its last bytes must not
  // discard output still queued here for a slower client. A side that closes
  // without having ended its own stream was reset: tear everything down.
  const delivered = (s: Duplex): boolean => s.writableFinished || s.destroyed
  const check = (): void => { if (delivered(client) && delivered(engine)) finish() }
  for (const side of [client, engine]) {
    side.on('finish', check)
    side.on('close', () => { if (side.readableEnded) check(); else finish() })
  }
}

/**
 * One direction of a session: each chunk counted and written on as it comes, with
 * backpressure, and the source's end passed on as a half-close: what `pipe` does, in
 * one listener instead of pipe's and a byte counter's.
 */
function pass (from: Duplex, to: Duplex, add: (n: number) => void): void {
  from.on('data', (chunk: Buffer) => {
    add(chunk.length)
    if (!to.write(chunk)) from.pause()
  })
  to.on('drain', () => from.resume())
  from.on('end', () => to.end())
  // A socket paused while the session's record was written flows now (as pipe does).
  from.resume()
}

/**
 * The engine's side of a session as `pass` relays it, each read written on from the
 * buffer it was read into (reads.ts): a copy only when a write is already waiting (the
 * client reads slower than the engine writes), where Node would queue the chunk itself.
 */
function passDirect (reads: DirectReads, from: Socket, to: Duplex, add: (n: number) => void): void {
  let holds = false
  reads.take({
    bytes: (chunk) => {
      add(chunk.length)
      if (to.writableLength > 0) {
        holds = false
        streamed(chunk.length)
        return to.write(Buffer.from(chunk))
      }
      const more = to.write(chunk)
      holds = to.writableLength > 0
      return more
    },
    holds: () => holds,
  })
  to.on('drain', () => reads.more())
  from.on('end', () => to.end())
}

/**
 * Take a raw-form session's socket away from Node's HTTP server, as Node's own upgrade
 * handling does: what the client sends after its request (stdin: Podman's remote
 * client sends it once it has the 200) would otherwise be parsed as a next request and
 * refused, and its half-close taken for a disconnect. Adding a 'data' listener makes
 * the server's parser hand back a socket it reads natively; then the server's own
 * data and end listeners come off. (Should Node name them differently one day, the
 * session still works for clients that send nothing after the request.)
 */
function takeOver (socket: Socket, onData: (chunk: Buffer) => void, onEnd: () => void): void {
  socket.on('data', onData)
  for (const l of socket.listeners('data')) if (l !== onData && l.name === 'bound socketOnData') socket.removeListener('data', l as (chunk: Buffer) => void)
  for (const l of socket.listeners('end')) if (l.name === 'bound socketOnEnd') socket.removeListener('end', l as () => void)
  socket.on('end', onEnd)
  socket.resume()
}

export async function hijack (ctx: RequestContext, client: HijackClient, upstream: Upstream, track: (close: () => void) => () => void, on: AnswerEvents): Promise<void> {
  const target = ctx.target
  if (!target) throw new Error('hijack before routing')
  return await new Promise<void>((resolve, reject) => {
    // (Made here and held only by `pending` below: no closure of this session captures it.)
    const upReq = upstream.hijackRequest({ method: client.req.method ?? 'POST', path: ctx.upstreamUrl ?? target.rawUrl, headers: upgradeHeaders(client.req, ctx, upstream) })
    const sent = performance.now()
    let settled = false
    // The request until the engine has answered: a session held for days keeps its two
    // sockets, not the finished ClientRequest and its response (closures here hold it).
    let pending: ClientRequest | null = upReq
    const untrack = track(() => { ctx.aborted ??= 'shutdown'; pending?.destroy(); clientDuplex().destroy() })
    const settle = (err?: unknown): void => {
      if (settled) return
      settled = true
      untrack()
      if (err) reject(err)
      else resolve()
    }
    const clientDuplex = (): Duplex => client.form === 'upgrade' ? client.socket : client.req.socket
    // The client leaving before the engine answers ends the upstream request.
    const onEarlyClose = (): void => { ctx.aborted ??= 'client-closed'; pending?.destroy(); settle() }
    clientDuplex().once('close', onEarlyClose)

    upReq.on('error', (err) => {
      clientDuplex().off('close', onEarlyClose)
      settle(ctx.status === undefined && !ctx.aborted ? upstreamError(err, upstream.url) : undefined)
    })

    upReq.on('upgrade', (res: IncomingMessage, engine: Socket, engineHead: Buffer) => {
      clientDuplex().off('close', onEarlyClose)
      pending = null
      ctx.upstreamMs = performance.now() - sent
      ctx.status = res.statusCode
      ctx.hijack = client.form
      // Until the session's first record is written, the engine's bytes wait in its
      // socket, and a reset is noted rather than thrown.
      engine.pause()
      let reset: Error | null = null
      const onReset = (err: Error): void => { reset = err }
      engine.on('error', onReset)
      let established: Promise<void>
      try {
        // (Promise.resolve: a caller's `on` may answer synchronously.)
        established = Promise.resolve(on('established'))
      } catch (err) {
        established = Promise.reject(err)
      }
      established.then(() => {
        engine.off('error', onReset)
        // Either side gone while the record was written: the session ends here.
        if (reset !== null || engine.destroyed || clientDuplex().destroyed) {
          engine.destroy()
          clientDuplex().destroy()
          settle()
          return
        }
        relay(res, engine, engineHead)
      }, (err: unknown) => {
        // Nothing has reached the client yet: end the session before it starts.
        engine.off('error', onReset)
        engine.destroy()
        settle(err)
      })
    })

    const relay = (res: IncomingMessage, engine: Socket, engineHead: Buffer): void => {
      engine.setNoDelay(true)
      if (client.form === 'upgrade') {
        const head: HeaderMap = {}
        for (let i = 0; i < res.rawHeaders.length; i += 2) head[res.rawHeaders[i]] = res.rawHeaders[i + 1]
        client.socket.write(serializeHead(`HTTP/1.1 ${res.statusCode} ${res.statusMessage}`, head))
        if (engineHead.length) { client.socket.write(engineHead); ctx.bytesOut += engineHead.length }
        if (client.rest.length) { engine.write(client.rest); ctx.bytesIn += client.rest.length }
        ;(client.socket as Socket).setNoDelay?.(true)
        splice(ctx, client.socket, engine, () => settle())
      } else {
        ctx.status = 200
        const { req, res: out } = client
        // Whatever the client streams as its request body is stdin, and so is whatever it
        // sends after the request; the request's end is not a half-close (the engine would
        // not see one either), the socket's FIN is.
        const stdin = (chunk: Buffer): void => { ctx.bytesIn += chunk.length; engine.write(chunk) }
        takeOver(req.socket, stdin, () => engine.end())
        // The engine's 200 form: no length and no chunking, the stream runs until close.
        out.useChunkedEncodingByDefault = false
        out.shouldKeepAlive = false
        out.writeHead(200, { 'content-type': res.headers['content-type'] ?? 'application/vnd.docker.raw-stream' })
        out.flushHeaders()
        if (engineHead.length) { out.write(engineHead); ctx.bytesOut += engineHead.length }
        req.on('data', stdin)
        // The pipe ends the response once the engine's output has all passed through.
        // (An engine socket of reads.ts has counted its copies for the collector already.)
        const direct = directReads(engine) !== undefined
        engine.on('data', (chunk: Buffer) => { ctx.bytesOut += chunk.length; if (!direct) streamed(chunk.length) })
        engine.pipe(out)
        const finish = (): void => { engine.destroy(); settle() }
        out.once('finish', finish)
        out.once('close', finish)
        const reset = (): void => { out.destroy(); finish() }
        engine.on('error', reset)
        engine.on('close', () => { if (!engine.readableEnded) reset() })
      }
    }

    upReq.on('response', (res: IncomingMessage) => {
      // The engine declined to hijack: relay its ordinary answer and close.
      clientDuplex().off('close', onEarlyClose)
      ctx.upstreamMs = performance.now() - sent
      ctx.status = res.statusCode
      const headers = endToEnd(res.headersDistinct)
      const length = declaredLength(res.headers)
      const finish = finishOnce(on, () => { ctx.aborted ??= 'not-recorded' })
      res.once('error', () => settle())
      if (length === 0 || res.statusCode === 204 || res.statusCode === 304) {
        // Head-only: recorded before anything is relayed.
        res.pause()
        finish().then(() => { relayAnswer(res, finish, headers, length) }, (err: unknown) => { settle(err); res.destroy() })
        return
      }
      relayAnswer(res, finish, headers, length)
    })

    const relayAnswer = (res: IncomingMessage, finish: () => Promise<void>, headers: HeaderMap, length: number | undefined): void => {
      const body = res.pipe(counter((n) => { ctx.bytesOut += n }, finish, length))
      // A `finished` that throws (the audit record could not be written) cuts the answer short.
      body.once('error', () => { (client.form === 'upgrade' ? client.socket : client.res).destroy(); settle() })
      if (client.form === 'upgrade') {
        headers.connection = 'close'
        client.socket.write(serializeHead(`HTTP/1.1 ${res.statusCode} ${res.statusMessage}`, headers))
        body.pipe(client.socket)
        body.once('end', () => settle())
        client.socket.once('close', () => { res.destroy(); settle() })
      } else {
        client.res.sendDate = false
        client.res.writeHead(res.statusCode ?? 502, headers)
        body.pipe(client.res)
        client.res.once('close', () => { res.destroy(); settle() })
      }
    }

    if (ctx.body?.length) upReq.write(ctx.body)
    upReq.end()
  })
}
