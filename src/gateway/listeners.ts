/**
 * Listeners: one fastify instance per configured address (unix socket, TCP, TLS).
 * Fastify is the adapter: a single catch-all route hands the raw request to the
 * pipeline, which owns the response (`reply.hijack()`); Node's `upgrade` event feeds
 * the same pipeline for hijacked connections.
 */
import cluster from 'node:cluster'
import fs from 'node:fs'
import http from 'node:http'
import https from 'node:https'
import net from 'node:net'
import Fastify, { type FastifyInstance } from 'fastify'
import type { ListenerConfig } from '../config'
import { newContext } from './context'
import { GatewayError, renderError } from '../api/errors'
import { handleRequest, handleUpgrade, type GatewayDeps } from './pipeline'

export interface Listening {
  readonly config: ListenerConfig
  readonly app: FastifyInstance
  readonly server: http.Server | https.Server
  /** `unix:/path` or `host:port` with the port actually bound. */
  readonly address: string
  /**
   * Cut every connection still open, hijacked ones included: Node's closeAllConnections
   * knows only the HTTP connections, and an upgraded socket whose session did not end
   * would keep the server (and shutdown) waiting for ever.
   */
  destroyConnections (): void
}

function createServer (cfg: ListenerConfig, handler: http.RequestListener): http.Server | https.Server {
  const server = cfg.kind === 'tcp' && cfg.tls
    ? https.createServer({
      // As for plain HTTP servers: a client's half-close (the docker CLI closes its
      // write side after stdin) must not end an attach or exec session's output.
      allowHalfOpen: true,
      cert: cfg.tls.material.cert,
      key: cfg.tls.material.key,
      ...(cfg.tls.material.ca ? { ca: cfg.tls.material.ca, requestCert: true, rejectUnauthorized: true } : {}),
    }, handler)
    : http.createServer(handler)
  // Builds, `docker load` and `cp` uploads may take far longer than Node's default
  // 5-minute request timeout; long streams are ended by the client or by shutdown.
  server.requestTimeout = 0
  server.timeout = 0
  server.headersTimeout = 60_000
  // `httpAllowHalfOpen` stays false: a client's FIN on an ordinary request means it is
  // gone (Go's server cancels the request the same way), which is what ends `logs -f`
  // or `events` upstream. Hijacked sockets leave Node's HTTP handling and keep
  // half-close (see hijack.ts).
  return server
}

/** A unix socket left behind by a crashed gateway is removed; a live one is an error (with workers: by the primary, once; cluster.ts). */
export async function clearStaleSocket (path: string): Promise<void> {
  if (!fs.existsSync(path)) return
  if (!fs.statSync(path).isSocket()) throw new Error(`${path} exists and is not a socket`)
  const live = await new Promise<boolean>((resolve) => {
    const s = net.connect(path)
    s.once('connect', () => { s.destroy(); resolve(true) })
    s.once('error', () => resolve(false))
  })
  if (live) throw new Error(`${path} is in use by a running process`)
  fs.unlinkSync(path)
}

function remoteOf (socket: net.Socket | undefined, cfg: ListenerConfig): string {
  if (cfg.kind === 'unix') return 'unix'
  return socket?.remoteAddress ? `${socket.remoteAddress}:${socket.remotePort}` : 'unknown'
}

export async function listen (cfg: ListenerConfig, deps: GatewayDeps): Promise<Listening> {
  let server: http.Server | https.Server | undefined
  const app = Fastify({
    serverFactory: (handler) => { server = createServer(cfg, handler); return server },
    logger: false,
    routerOptions: { caseSensitive: true, ignoreTrailingSlash: false, ignoreDuplicateSlashes: false, maxParamLength: 65_535 },
    return503OnClosing: true,
    forceCloseConnections: 'idle',
    // Fastify's own early refusals (malformed URL...) in the engine's error shape.
    frameworkErrors: (err, _req, reply) => {
      const { status, body, headers } = renderError(new GatewayError('PATH_INVALID', `invalid request: ${err.message}`))
      reply.hijack()
      reply.raw.writeHead(status, headers)
      reply.raw.end(body)
    },
  })
  // Bodies are the pipeline's business: nothing is parsed or consumed here.
  app.removeAllContentTypeParsers()
  app.addContentTypeParser('*', (_req, _payload, done) => { done(null, undefined) })
  app.route({
    method: ['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS'],
    url: '*',
    handler: async (request, reply) => {
      reply.hijack()
      const ctx = newContext(cfg.name, remoteOf(request.raw.socket, cfg), request.raw.method ?? '', request.raw.url ?? '')
      await handleRequest(deps, cfg, ctx, request.raw, reply.raw)
    },
  })
  app.setNotFoundHandler((request, reply) => {
    reply.hijack()
    const ctx = newContext(cfg.name, remoteOf(request.raw.socket, cfg), request.raw.method ?? '', request.raw.url ?? '')
    void handleRequest(deps, cfg, ctx, request.raw, reply.raw)
  })
  if (cfg.activated) {
    app.addHook('preClose', (done) => {
      if (server?.listening === true) server.close()
      done()
    })
  }
  await app.ready()
  if (!server) throw new Error('fastify did not create the server')
  const srv = server
  const sockets = new Set<net.Socket>()
  srv.on('connection', (socket: net.Socket) => {
    // The peer's process, read while it surely is the one that connected (callers.ts).
    if (cfg.kind === 'unix' && cfg.containerIdentity !== undefined) deps.callers?.connected(socket)
    sockets.add(socket)
    socket.once('close', () => { sockets.delete(socket) })
  })
  const destroyConnections = (): void => { for (const s of sockets) s.destroy() }
  srv.on('upgrade', (req: http.IncomingMessage, socket: net.Socket, head: Buffer) => {
    const ctx = newContext(cfg.name, remoteOf(socket, cfg), req.method ?? '', req.url ?? '')
    void handleUpgrade(deps, cfg, ctx, req, socket, head)
  })
  if (cfg.activated) {
    // A socket passed by systemd is already bound, owned and chmod-ed by its unit:
    // listening on the fd is all there is to do (Node's listen accepts `{ fd }`).
    // Listened to here, not through app.listen (fastify's address log line cannot
    // read a unix socket opened from an fd); closing it is then ours too.
    const fd = cfg.activated.fd
    await new Promise<void>((resolve, reject) => {
      srv.once('error', reject)
      srv.listen({ fd }, () => { srv.removeListener('error', reject); resolve() })
    })
    const addr = srv.address()
    const address = typeof addr === 'string' || addr === null
      ? `unix:${addr ?? (cfg.kind === 'unix' && cfg.path !== '' ? cfg.path : cfg.activated.name)}`
      : `${addr.address.includes(':') ? `[${addr.address}]` : addr.address}:${addr.port}`
    return { config: cfg, app, server: srv, address, destroyConnections }
  }
  if (cfg.kind === 'unix') {
    // In a worker the primary binds (cluster.ts) and cleared a stale socket before: another
    // worker's live socket is not stale.
    if (!cluster.isWorker) await clearStaleSocket(cfg.path)
    // Created owner-only, then opened up to the configured mode and group: no moment
    // where the umask's permissions let someone else connect.
    const umask = process.umask(0o177)
    try {
      await app.listen({ path: cfg.path })
    } finally {
      process.umask(umask)
    }
    if (cfg.gid !== undefined) fs.chownSync(cfg.path, process.getuid?.() ?? 0, cfg.gid)
    fs.chmodSync(cfg.path, cfg.mode ?? 0o666 & ~umask)
    return { config: cfg, app, server: srv, address: `unix:${cfg.path}`, destroyConnections }
  }
  await app.listen({ host: cfg.host, port: cfg.port })
  const addr = srv.address() as net.AddressInfo
  return { config: cfg, app, server: srv, address: `${addr.address.includes(':') ? `[${addr.address}]` : addr.address}:${addr.port}`, destroyConnections }
}
