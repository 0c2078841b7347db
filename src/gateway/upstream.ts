/**
 * The engine connection. Ordinary requests go through one undici Pool (keep-alive,
 * backpressure, abort by signal). Hijacked requests (attach, exec start, BuildKit's
 * h2c tunnels) use node:http, whose client hands over the socket on `101` and still
 * delivers an ordinary response (the engine's 404/409 JSON) when the engine declines:
 * undici's upgrade() discards that body.
 */
import http, { type IncomingMessage } from 'node:http'
import net from 'node:net'
import https from 'node:https'
import { Client, Pool } from 'undici'
import type { UpstreamConfig } from '../config'
import { GatewayError } from '../api/errors'
import type { RequestContext } from './context'
import { hasBody } from './body'
import { endToEndRaw, type HeaderMap } from './headers'
import { connectDirect } from './reads'

export interface Upstream {
  readonly url: string
  /**
   * The Host header for a TCP upstream (`host:port`). The client's Host names the
   * gateway (`api.moby.localhost` from the CLI on a unix socket), not the engine, and
   * both TLS clients would verify the engine's certificate against it.
   */
  readonly host?: string
  readonly pool: Pool
  /**
   * A connection of its own for one long answer (logs -f, events, a copy), closed with it.
   * undici's Pool keeps every Client it ever opened (its size is the peak concurrency),
   * so 3,000 held streams would leave 3,000 Clients, scanned on every later request,
   * after they had all closed.
   */
  own (): Client
  /** Close a connection of `own()`. */
  release (client: Client): void
  /** Connections of `own()` not yet released (what held streams cost the engine side). */
  readonly owned: number
  /** Start a request on a fresh, unpooled connection; the caller handles 'upgrade' and 'response'. */
  hijackRequest (options: { method: string, path: string, headers: http.OutgoingHttpHeaders }): http.ClientRequest
  close (): Promise<void>
}

export function createUpstream (cfg: UpstreamConfig): Upstream {
  // No timeouts on the engine side: `logs -f`, `events` and `wait` are legitimately idle
  // for hours. A client's disconnect is what ends them (see forward.ts).
  // pipelining 1 = one request at a time per connection, kept alive between requests
  // (0 would close every connection after one request).
  const common = { headersTimeout: 0, bodyTimeout: 0, keepAliveTimeout: 30_000, pipelining: 1 }
  let pool: Pool
  let open: () => Client
  let hijackRequest: Upstream['hijackRequest']
  if (cfg.kind === 'unix') {
    pool = new Pool('http://localhost', { ...common, socketPath: cfg.path })
    open = () => new Client('http://localhost', { ...common, socketPath: cfg.path })
    hijackRequest = (o) => http.request({ ...o, setHost: false, createConnection: () => connectDirect({ path: cfg.path }) })
  } else if (cfg.tls) {
    const { cert, key, ca } = cfg.tls.material
    // SNI carries host names only (RFC 6066 §3); for an IP address the certificate's IP SAN is checked.
    const servername = net.isIP(cfg.host) ? undefined : cfg.host
    pool = new Pool(`https://${hostPort(cfg.host, cfg.port)}`, { ...common, connect: { cert, key, ca, servername } })
    open = () => new Client(`https://${hostPort(cfg.host, cfg.port)}`, { ...common, connect: { cert, key, ca, servername } })
    hijackRequest = (o) => https.request({ ...o, host: cfg.host, port: cfg.port, cert, key, ca, servername: servername ?? '', agent: false, setHost: false })
  } else {
    pool = new Pool(`http://${hostPort(cfg.host, cfg.port)}`, common)
    open = () => new Client(`http://${hostPort(cfg.host, cfg.port)}`, common)
    hijackRequest = (o) => http.request({ ...o, host: cfg.host, port: cfg.port, setHost: false, createConnection: () => connectDirect({ host: cfg.host, port: cfg.port }) })
  }
  const owned = new Set<Client>()
  return {
    url: cfg.url,
    ...(cfg.kind === 'tcp' ? { host: hostPort(cfg.host, cfg.port) } : {}),
    pool,
    own: () => {
      const client = open()
      owned.add(client)
      return client
    },
    release: (client) => {
      owned.delete(client)
      client.destroy().catch(() => {})
    },
    get owned () { return owned.size },
    hijackRequest,
    close: async () => {
      await Promise.all([pool.destroy(), ...[...owned].map(async (c) => await c.destroy())])
      owned.clear()
    },
  }
}

function hostPort (host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`
}

/**
 * A small JSON request of the gateway's own to the engine (ownership lookups, counts):
 * status and parsed body. Throws the upstream error kinds when the engine cannot be reached.
 */
export async function engineJson (upstream: Upstream, method: 'GET' | 'POST' | 'DELETE', path: string, body?: unknown, timeoutMs = 30_000): Promise<{ status: number, body: unknown }> {
  let res
  try {
    res = await upstream.pool.request({
      method,
      path,
      headers: { ...(upstream.host ? { host: upstream.host } : {}), ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      signal: AbortSignal.timeout(timeoutMs),
    })
  } catch (err) {
    throw upstreamError(err, upstream.url)
  }
  const text = await res.body.text()
  let parsed: unknown = null
  try { parsed = text ? JSON.parse(text) : null } catch { parsed = text }
  return { status: res.statusCode, body: parsed }
}

/**
 * What the engine knows of an exec: its command, and once it has finished its exit
 * code (null while it runs). Null when the engine does not answer within two seconds.
 * The exec id is the one the request was routed with, percent-encoded again.
 */
export async function execInfo (upstream: Upstream, execId: string): Promise<{ command: string[], exitCode: number | null } | null> {
  try {
    const res = await engineJson(upstream, 'GET', `/exec/${encodeURIComponent(execId)}/json`, undefined, 2000)
    if (res.status !== 200) return null
    const info = res.body as { Running?: unknown, ExitCode?: unknown, ProcessConfig?: { entrypoint?: unknown, arguments?: unknown } }
    const pc = info.ProcessConfig ?? {}
    const command = [pc.entrypoint, ...(Array.isArray(pc.arguments) ? pc.arguments : [])].filter((x): x is string => typeof x === 'string')
    return { command, exitCode: info.Running === false && typeof info.ExitCode === 'number' ? info.ExitCode : null }
  } catch {
    return null
  }
}

/** What each connection error means, for someone who has just started the gateway. */
const UNREACHABLE: Record<string, string> = {
  ENOENT: 'no socket there: is the engine running? The gateway forwards to --upstream, else the config file\'s upstream, else DOCKER_HOST',
  ECONNREFUSED: 'connection refused: is the engine running and listening there?',
  EACCES: 'permission denied: the gateway\'s user may not open the engine\'s socket',
  EHOSTUNREACH: 'host unreachable',
  ENETUNREACH: 'network unreachable',
  ENOTFOUND: 'unknown host',
  UND_ERR_CONNECT_TIMEOUT: 'connection timed out',
}

/** Map a failure to reach or hear from the engine onto the error catalogue. */
export function upstreamError (err: unknown, upstreamUrl: string): GatewayError {
  const e = err as { code?: string, message?: string }
  const code = e.code ?? ''
  const why = UNREACHABLE[code]
  if (why !== undefined) {
    return new GatewayError('UPSTREAM_UNREACHABLE', `cannot reach the Docker engine at ${upstreamUrl}: ${code} (${why})`, { cause: err })
  }
  if (code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT') {
    return new GatewayError('UPSTREAM_TIMEOUT', `the Docker engine at ${upstreamUrl} did not answer in time`, { cause: err })
  }
  return new GatewayError('UPSTREAM_FAILED', `the Docker engine at ${upstreamUrl} failed the request: ${code || 'connection error'}`, { cause: err })
}

/** Request headers the gateway consumes and never passes on. */
export const GATEWAY_CONSUMED = ['authorization', 'content-length'] as const

export function upstreamRequestHeaders (req: IncomingMessage, ctx: RequestContext, upstream: Upstream): HeaderMap {
  const headers = endToEndRaw(req.rawHeaders, GATEWAY_CONSUMED)
  if (upstream.host) headers.host = upstream.host
  for (const [k, v] of Object.entries(ctx.upstreamHeaders ?? {})) headers[k] = v
  if (ctx.body) headers['content-length'] = String(ctx.body.length)
  // A filtered body has a length of its own: sent chunked.
  else if (req.headers['content-length'] !== undefined && hasBody(req) && !ctx.bodyFilter) headers['content-length'] = req.headers['content-length']
  return headers
}
