/**
 * Request target -> operation. The first thing that looks at a request's path.
 *
 * Anything two parsers could read two ways is refused here, before any other stage
 * sees it: the engine's router (gorilla/mux on Go's decoded `URL.Path`) must arrive
 * at the same operation and the same resource name as the gateway did.
 */
import { GatewayError } from '../errors'
import { libpodPath, unversionedLibpodRefused } from './libpod'
import { operations, type Operation } from './operations'

export interface ApiWindow { readonly minVersion: string, readonly maxVersion: string }

export interface Target {
  readonly operation: Operation
  /** `1.41` for `/v1.41/...` (`4.3.1` for Podman's `/v4.3.1/libpod/...`); null for unversioned paths (the engine's default version). */
  readonly apiVersion: string | null
  /** Decoded path parameters, e.g. `{ id: 'web' }` or `{ name: 'localhost:5000/app:1' }`. */
  readonly params: Readonly<Record<string, string>>
  /** The value of the operation's resource parameter, if it has one. */
  readonly resource?: string
  /** Path and query exactly as received: what the gateway forwards. */
  readonly rawUrl: string
  readonly query: URLSearchParams
}

type Segment = { literal: string } | { param: string, multi: boolean }
interface Compiled { op: Operation, segments: Segment[], literals: number, /** Index of the multi-segment parameter, -1 if none. */ multiAt: number }

const compiled: Compiled[] = operations.map((op) => {
  const segments: Segment[] = op.path.split('/').slice(1).map((s) => {
    const m = /^\{(\w+)(\*?)\}$/.exec(s)
    return m ? { param: m[1], multi: m[2] === '*' } : { literal: s }
  })
  return { op, segments, literals: segments.filter((s) => 'literal' in s).length, multiAt: segments.findIndex((s) => 'param' in s && s.multi) }
})
type Routes = Map<string, Compiled[]>
/** The routes of each method: the Engine API's, and Podman's own (libpod.ts), never mixed. */
const byMethod: Routes = new Map()
const libpodByMethod: Routes = new Map()
for (const c of compiled) {
  const table = c.op.libpod ? libpodByMethod : byMethod
  table.set(c.op.method, [...(table.get(c.op.method) ?? []), c])
}

/**
 * The routes of a method that can match a path whose first segment is a given literal
 * (case-sensitive): those whose first segment is that literal or a parameter, in the
 * table's order. Routing a request looks at these few instead of all of the method's.
 * Only the known literals have a list (a client's path cannot grow it); any other
 * first segment gets the parameter-first routes.
 */
interface Indexed { readonly byFirst: ReadonlyMap<string, Compiled[]>, readonly paramFirst: Compiled[] }
function indexRoutes (routes: Routes): Map<string, Indexed> {
  const out = new Map<string, Indexed>()
  for (const [method, list] of routes) {
    const firstOf = (c: Compiled): string | null => { const s = c.segments[0]; return s !== undefined && 'literal' in s ? s.literal : null }
    const paramFirst = list.filter((c) => firstOf(c) === null)
    const byFirst = new Map<string, Compiled[]>()
    for (const c of list) {
      const first = firstOf(c)
      if (first !== null && !byFirst.has(first)) byFirst.set(first, list.filter((o) => firstOf(o) === first || firstOf(o) === null))
    }
    out.set(method, { byFirst, paramFirst })
  }
  return out
}
const indexed = new Map<Routes, Map<string, Indexed>>([[byMethod, indexRoutes(byMethod)], [libpodByMethod, indexRoutes(libpodByMethod)]])

/** The routes of `method` that can match `segs` exactly (not letter case folded). */
function candidates (routes: Routes, method: string, segs: string[]): Compiled[] {
  const ix = indexed.get(routes)?.get(method)
  if (ix === undefined) return routes.get(method) ?? []
  return ix.byFirst.get(segs[0]) ?? ix.paramFirst
}

const VERSION = /^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$/

export function compareVersions (a: string, b: string): number {
  const [am, an] = versionParts(a)
  const [bm, bn] = versionParts(b)
  return am - bm || an - bn
}

/**
 * A version's major and minor, as compareVersions compares them: each text parsed once
 * (the window's bounds, operations' minimums, the versions clients send), at most
 * VERSIONS_KEPT kept, since a client may send any; others are parsed on each use.
 */
const VERSIONS_KEPT = 256
const parsedVersions = new Map<string, readonly [number, number]>()
function versionParts (v: string): readonly [number, number] {
  let parts = parsedVersions.get(v)
  if (parts === undefined) {
    const [m, n] = v.split('.').map(Number)
    parts = [m, n]
    if (parsedVersions.size < VERSIONS_KEPT) parsedVersions.set(v, parts)
  }
  return parts
}

/**
 * Split and decode the path strictly. Refused: empty or `.`/`..` segments (also when
 * percent-encoded), `//`, a trailing `/`, encoded `/` or `\` or NUL, malformed escapes,
 * backslashes, control and non-ASCII bytes. Go would clean or re-split some of these
 * where we would not, or the other way round.
 */
function decodeSegments (rawPath: string): string[] {
  if (!rawPath.startsWith('/')) throw new GatewayError('PATH_INVALID', 'request target must be an absolute path')
  if (/[^\x21-\x7e]|\\/.test(rawPath)) throw new GatewayError('PATH_AMBIGUOUS', 'path contains a backslash, space, control or non-ASCII character')
  const raw = rawPath.slice(1).split('/')
  return raw.map((seg) => {
    if (seg === '') throw new GatewayError('PATH_AMBIGUOUS', 'path contains an empty segment (`//` or a trailing `/`)')
    // Without an escape the segment is its own decoding, and holds no `/`, `\` or NUL (tested above).
    if (!seg.includes('%')) {
      if (seg === '.' || seg === '..') throw new GatewayError('PATH_AMBIGUOUS', 'path contains a `.` or `..` segment')
      return seg
    }
    let decoded: string
    try {
      decoded = decodeURIComponent(seg)
    } catch {
      throw new GatewayError('PATH_AMBIGUOUS', 'path contains a malformed percent-encoding')
    }
    if (decoded === '.' || decoded === '..') throw new GatewayError('PATH_AMBIGUOUS', 'path contains a `.` or `..` segment')
    if (/[/\\\0]/.test(decoded)) throw new GatewayError('PATH_AMBIGUOUS', 'path contains an encoded `/`, `\\` or NUL')
    return decoded
  })
}

function match (c: Compiled, segs: string[], fold: boolean): Record<string, string> | null {
  const n = c.segments.length
  const multiAt = c.multiAt
  if (multiAt < 0 ? segs.length !== n : segs.length < n) return null
  // With a multi-segment parameter, the segments after it are matched from the end,
  // like the engine's greedy `{name:.*}` regexp.
  const at = (i: number): string => multiAt >= 0 && i > multiAt ? segs[segs.length - (n - i)] : segs[i]
  // Literals first: most routes fail here, before anything is allocated.
  for (let i = 0; i < n; i++) {
    const s = c.segments[i]
    if ('literal' in s && (fold ? s.literal.toLowerCase() !== at(i).toLowerCase() : s.literal !== at(i))) return null
  }
  const params: Record<string, string> = {}
  for (let i = 0; i < n; i++) {
    const s = c.segments[i]
    if (!('param' in s)) continue
    params[s.param] = i === multiAt ? segs.slice(i, segs.length - (n - multiAt - 1)).join('/') : at(i)
  }
  return params
}

function best (routes: Routes, method: string, segs: string[], fold: boolean): { c: Compiled, params: Record<string, string> } | null {
  let found: { c: Compiled, params: Record<string, string> } | null = null
  for (const c of fold ? routes.get(method) ?? [] : candidates(routes, method, segs)) {
    const params = match(c, segs, fold)
    // Literal routes win over parameterised ones (`/images/json` is ImageList, not an image named "json").
    if (params && (!found || c.literals > found.c.literals)) found = { c, params }
  }
  return found
}

export function resolveTarget (method: string, rawUrl: string, window: ApiWindow): Target {
  const q = rawUrl.indexOf('?')
  const rawPath = q < 0 ? rawUrl : rawUrl.slice(0, q)
  const rawQuery = q < 0 ? '' : rawUrl.slice(q + 1)
  if (rawQuery.includes('#')) throw new GatewayError('PATH_INVALID', 'request target must not contain a fragment')
  // Go's url.ParseQuery drops a pair containing `;` or a malformed escape, where
  // URLSearchParams keeps it: `?networkmode=host;x` would mean two different things.
  if (rawQuery.includes(';')) throw new GatewayError('PATH_AMBIGUOUS', 'query string contains `;`')
  if (/%(?![0-9A-Fa-f]{2})/.test(rawQuery)) throw new GatewayError('PATH_AMBIGUOUS', 'query string contains a malformed percent-encoding')
  let segs = decodeSegments(rawPath)

  let apiVersion: string | null = null
  let routes = byMethod
  const libpod = libpodPath(segs)
  if (libpod) {
    apiVersion = libpod.version
    segs = libpod.segs
    routes = libpodByMethod
  } else if (/^v/i.test(segs[0]) && /^v[0-9.]*$/i.test(segs[0])) {
    const m = VERSION.exec(segs[0])
    if (!m) throw new GatewayError('PATH_AMBIGUOUS', `malformed API version in path: ${JSON.stringify(segs[0])}`)
    apiVersion = `${m[1]}.${m[2]}`
    if (compareVersions(apiVersion, window.minVersion) < 0) {
      throw new GatewayError('API_VERSION_UNSUPPORTED', `client version ${apiVersion} is too old. Minimum supported API version is ${window.minVersion}, please upgrade your client to a newer version`)
    }
    if (compareVersions(apiVersion, window.maxVersion) > 0) {
      throw new GatewayError('API_VERSION_UNSUPPORTED', `client version ${apiVersion} is too new. Maximum supported API version is ${window.maxVersion}`)
    }
    segs = segs.slice(1)
    if (segs.length === 0) throw new GatewayError('OPERATION_UNKNOWN', 'page not found')
  }

  const found = best(routes, method, segs, false)
  if (!found) {
    // The engine's router is case-sensitive; a path that only matches when case is
    // folded is refused as ambiguous rather than guessed at.
    if (best(routes, method, segs, true)) throw new GatewayError('PATH_AMBIGUOUS', 'path differs from an Engine API route only in letter case')
    throw new GatewayError('OPERATION_UNKNOWN', `page not found: no ${libpod ? 'Podman API' : 'Engine API'} operation for ${method} ${'/' + segs.join('/')}`)
  }
  const op = found.c.op
  if (libpod && unversionedLibpodRefused(op, apiVersion)) throw new GatewayError('OPERATION_UNKNOWN', `page not found: Podman serves ${op.id} only under a version (/v4.x.y${op.path})`)
  if (op.minVersion && apiVersion && compareVersions(apiVersion, op.minVersion) < 0) {
    throw new GatewayError('OPERATION_TOO_NEW', `${op.id} requires API version ${op.minVersion} or newer, the request asked for ${apiVersion}`)
  }
  return Object.freeze({
    operation: op,
    apiVersion,
    params: Object.freeze(found.params),
    ...(op.param ? { resource: found.params[op.param] } : {}),
    rawUrl,
    query: new URLSearchParams(rawQuery),
  })
}
