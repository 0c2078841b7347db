/**
 * Header handling in one place: duplicate detection and hop-by-hop stripping
 * (RFC 9110 §7.6.1: `Connection` and every header it names, plus the fixed list below).
 */
import { GatewayError } from '../api/errors'

export type HeaderMap = Record<string, string | string[]>

/** Hop-by-hop and gateway-consumed headers that never travel to the other side. */
const HOP_BY_HOP = new Set([
  'connection', 'keep-alive', 'proxy-connection', 'proxy-authenticate', 'proxy-authorization',
  'te', 'trailer', 'transfer-encoding', 'upgrade', 'expect', 'http2-settings',
])

/**
 * Headers read as a single value, by the gateway or by the engine (Go's `Header.Get`
 * takes the first of several). Node joins repeats of some with ", " and drops others:
 * either way the gateway and the engine could read different values, so a request
 * repeating one of these is refused. Other headers may repeat (BuildKit's session
 * sends `X-Docker-Expose-Session-Grpc-Method` once per method) and are forwarded as
 * the same list of lines.
 */
const SINGLE_VALUED = new Set([
  'authorization', 'x-registry-auth', 'x-registry-config', 'content-type', 'content-length',
  'transfer-encoding', 'host', 'upgrade', 'connection', 'http2-settings', 'expect',
])

export function assertNoDuplicateHeaders (rawHeaders: readonly string[]): void {
  const seen = new Set<string>()
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = rawHeaders[i].toLowerCase()
    if (!SINGLE_VALUED.has(name)) continue
    if (seen.has(name)) throw new GatewayError('HEADER_AMBIGUOUS', `header ${name} is repeated`)
    seen.add(name)
  }
}

function connectionTokens (value: string | string[] | undefined): ReadonlySet<string> | null {
  if (value === undefined) return null
  const list = Array.isArray(value) ? value.join(',') : value
  const known = KNOWN_CONNECTION.get(list)
  if (known !== undefined) return known
  return new Set(list.split(',').map((t) => t.trim().toLowerCase()).filter(Boolean))
}

/**
 * The Connection values every client and the engine send (`keep-alive`, `close`,
 * `Upgrade`), split once: the header arrives on almost every request and answer, and
 * splitting it cost more than the rest of the header copy. Any other value is split as it comes.
 */
const KNOWN_CONNECTION: ReadonlyMap<string, ReadonlySet<string>> = new Map(
  ['keep-alive', 'Keep-Alive', 'close', 'Close', 'upgrade', 'Upgrade'].map((v) => [v, new Set([v.toLowerCase()])])
)

/** Copy of `headers` without hop-by-hop fields and without the names in `drop`. */
export function endToEnd (headers: Record<string, string | string[] | undefined>, drop: readonly string[] = []): HeaderMap {
  const named = connectionTokens(headers.connection)
  const out: HeaderMap = {}
  for (const k in headers) {
    const v = headers[k]
    if (v === undefined || !Object.hasOwn(headers, k)) continue
    const name = k.toLowerCase()
    if (HOP_BY_HOP.has(name) || named?.has(name) === true || drop.includes(name)) continue
    out[name] = Array.isArray(v) && v.length === 1 ? v[0] : v
  }
  return out
}

/**
 * endToEnd of a request's headers as Node received them (`rawHeaders`: name, value,
 * name, value...), what `endToEnd(req.headersDistinct, drop)` gives, without building
 * `headersDistinct` first: a repeated header is the list of its lines, in order.
 */
export function endToEndRaw (raw: readonly string[], drop: readonly string[] = []): HeaderMap {
  let connection: string[] | undefined
  for (let i = 0; i < raw.length; i += 2) {
    if (raw[i].length === 10 && raw[i].toLowerCase() === 'connection') (connection ??= []).push(raw[i + 1])
  }
  const named = connectionTokens(connection)
  const out: HeaderMap = {}
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i].toLowerCase()
    if (HOP_BY_HOP.has(name) || named?.has(name) === true || drop.includes(name)) continue
    const v = raw[i + 1]
    if (!Object.hasOwn(out, name)) out[name] = v
    else {
      const prev = out[name]
      out[name] = Array.isArray(prev) ? [...prev, v] : [prev, v]
    }
  }
  return out
}

/** Headers as `name: value` lines for a response written straight to a socket. */
export function serializeHead (statusLine: string, headers: HeaderMap): string {
  let head = statusLine + '\r\n'
  for (const [k, v] of Object.entries(headers)) {
    for (const one of Array.isArray(v) ? v : [v]) head += `${k}: ${one}\r\n`
  }
  return head + '\r\n'
}
