/**
 * Turns a configuration document into a Config: the schema (schema.ts) first, then
 * what a schema cannot say, in small explicit checks that also resolve the values
 * (relative paths, files to read and parse, host:port, socket modes and groups,
 * the upstream's precedence, JWT keys and algorithms, conflicts between listeners).
 *
 * Every problem is collected, none stops the others. A check after the schema reads
 * only values the schema accepted (`ctx.usable` / `ctx.ok`), so one mistake is
 * reported once, and a valid part next to an invalid one is still checked.
 */
import { readFileSync, realpathSync } from 'node:fs'
import { createPublicKey, type KeyObject } from 'node:crypto'
import { availableParallelism, homedir } from 'node:os'
import { basename, dirname, join, resolve } from 'node:path'
import type { Static } from '@sinclair/typebox'
import { UNIX_PATH_MAX, addressKey, formatHostPort, parseHostPort, type HostPort } from './addresses'
import { loadCredentials } from './credentials'
import { checkCaBundle, errorCode, parseCertificate, parsePrivateKey, readFileOrProblem } from './files'
import {
  DEFAULT_PUBLIC_KEY_ALGORITHMS,
  DEFAULT_SECRET_ALGORITHMS,
  HMAC_ALGORITHMS,
  JWT_ALGORITHMS,
  fittingAlgorithms,
  jwksKeyAlgorithms,
  keyFitProblem,
  parseJwks,
  type JwksKey,
} from './jwt-keys'
import { At, compile, shown, type SchemaProblem } from './problems'
import * as S from './schema'
import { BODY_MEMORY_FACTOR, BUFFERED_BYTES_DEFAULT } from './schema'
import { passedSockets, type PassedSocket } from './activation'
import type { AuditConfig, Config, ContainerIdentityConfig, FixedIdentity, JwtConfig, ListenerConfig, LoadedTls, MtlsMappingConfig, UpstreamConfig, UpstreamSource } from './types'

export interface ValidateOptions {
  /** Directory relative paths are resolved against. */
  baseDir: string
  /** The scalar text as written in the file at a key path, when known (used to read `0660` and `1.40` as written). */
  sourceOf?: (keys: ReadonlyArray<string | number>) => string | undefined
  /** Group database used to resolve `group:` names; default /etc/group. */
  groupFile?: string
  /** Where the engine is when not (only) in the file: see UpstreamOverrides. */
  upstream?: UpstreamOverrides
}

/**
 * The engine given outside the config file, in this order of precedence:
 * `--upstream URL` (replaces the file's `upstream`), the file's `upstream`, then
 * DOCKER_HOST (with DOCKER_TLS_VERIFY and DOCKER_CERT_PATH, as the docker CLI reads
 * them), then unix:///var/run/docker.sock. The file wins over DOCKER_HOST because
 * DOCKER_HOST is ambient: a shell that uses docker through the gateway has it set to
 * the gateway. Relative unix paths resolve against `cwd`.
 */
export interface UpstreamOverrides {
  flag?: string
  env?: { [key: string]: string | undefined }
  cwd?: string
  /** `config check`: systemd entries are checked for their shape, not against sockets this process was passed. */
  checkOnly?: boolean
}

const checkFile = compile(S.ConfigFile)

/** Where a problem is listed: unknown top-level keys first, then by section in the schema's order. */
const SECTION_ORDER = ['listen', 'upstream', ...Object.keys(S.ConfigFile.properties)]
function rank (at: At): number {
  const key = at.keys[0] === '--upstream' || at.keys[0] === 'DOCKER_HOST' ? 'upstream' : String(at.keys[0])
  return SECTION_ORDER.indexOf(key)
}

class Ctx {
  private readonly found: SchemaProblem[]
  private readonly bad: At[]
  private groups: Map<string, number> | string | undefined
  constructor (readonly opts: ValidateOptions, schemaProblems: SchemaProblem[]) {
    this.found = [...schemaProblems]
    this.bad = schemaProblems.filter((p) => p.message !== 'unknown key').map((p) => p.at)
  }

  /** Records a problem; returns undefined, for `return ctx.problem(...)` where a value was expected. */
  problem (at: At, message: string): undefined {
    this.found.push({ at, message })
    return undefined
  }

  /** Every problem, those of the schema and those found after it, section by section. */
  problems (): string[] {
    return this.found.map((p, i) => ({ p, i, r: rank(p.at) })).sort((a, b) => a.r - b.r || a.i - b.i).map(({ p }) => `${p.at}: ${p.message}`)
  }

  /** The value at `at` has the type the schema wants (what is below it may not). */
  usable (at: At): boolean { return !this.bad.some((b) => b.toString() === at.toString()) }
  /** Everything at and below `at` is as the schema wants. */
  ok (at: At): boolean { return !this.bad.some((b) => at.holds(b)) }
  /** `o[key]` when it is there and the schema accepted it. */
  given<T, K extends keyof T & string> (at: At, o: T, key: K): T[K] | undefined {
    return o[key] !== undefined && this.usable(at.k(key)) ? o[key] : undefined
  }

  path (text: string): string { return resolve(this.opts.baseDir, text) }
  sourceOf (at: At): string | undefined { return this.opts.sourceOf?.(at.keys) }

  /** name -> gid from the group database, or a problem message if it cannot be read. */
  groupTable (): Map<string, number> | string {
    if (this.groups === undefined) {
      const file = this.opts.groupFile ?? '/etc/group'
      try {
        const table = new Map<string, number>()
        for (const line of readFileSync(file, 'utf8').split('\n')) {
          const [name, , gid] = line.split(':')
          if (name && gid && /^[0-9]+$/.test(gid) && !table.has(name)) table.set(name, Number(gid))
        }
        this.groups = table
      } catch (err) {
        this.groups = `cannot read ${file} (${errorCode(err)})`
      }
    }
    return this.groups
  }
}

function hostPort (ctx: Ctx, at: At, text: string): HostPort | undefined {
  const parsed = parseHostPort(text)
  if (typeof parsed !== 'string') return parsed
  ctx.problem(at, parsed)
}

/** Resolves a unix socket path and checks it fits in sun_path. */
function socketPath (ctx: Ctx, at: At, text: string): string | undefined {
  if (text.includes('\0')) return ctx.problem(at, 'socket path must not contain NUL bytes')
  const path = ctx.path(text)
  const bytes = Buffer.byteLength(path)
  if (bytes < UNIX_PATH_MAX) return path
  ctx.problem(at, `socket path must be shorter than ${UNIX_PATH_MAX} bytes, got ${bytes}: ${path}`)
}

/** Resolves a path and reads the file it names. */
function fileContents (ctx: Ctx, at: At, text: string): { path: string, data: Buffer } | undefined {
  const path = ctx.path(text)
  const data = readFileOrProblem(path)
  if (typeof data !== 'string') return { path, data }
  ctx.problem(at, data)
}

// ---------------------------------------------------------------------------
// TLS: each file readable and parsed, the key the certificate's.

function tls (ctx: Ctx, at: At, t: S.TlsFile): LoadedTls | undefined {
  if (!ctx.usable(at)) return
  const read = (key: 'cert' | 'key' | 'ca') => {
    const v = ctx.given(at, t, key)
    return v === undefined ? undefined : fileContents(ctx, at.k(key), v)
  }
  const cert = read('cert')
  const key = read('key')
  const ca = read('ca')
  let ok = ctx.ok(at) && cert !== undefined && key !== undefined && (t.ca === undefined || ca !== undefined)
  const x509 = cert && parseCertificate(cert.data)
  if (typeof x509 === 'string') {
    ctx.problem(at.k('cert'), `${x509}: ${cert?.path}`)
    ok = false
  }
  const privateKey = key && parsePrivateKey(key.data)
  if (typeof privateKey === 'string') {
    ctx.problem(at.k('key'), `${privateKey}: ${key?.path}`)
    ok = false
  }
  if (x509 && typeof x509 !== 'string' && privateKey && typeof privateKey !== 'string' && !x509.checkPrivateKey(privateKey)) {
    ctx.problem(at.k('key'), `does not match the certificate ${cert?.path}`)
    ok = false
  }
  const caProblem = ca && checkCaBundle(ca.data)
  if (caProblem) {
    ctx.problem(at.k('ca'), `${caProblem}: ${ca.path}`)
    ok = false
  }
  if (!ok || !cert || !key) return
  return {
    cert: cert.path,
    key: key.path,
    ...(ca ? { ca: ca.path } : {}),
    material: { cert: cert.data, key: key.data, ...(ca ? { ca: ca.data } : {}) },
  }
}

// ---------------------------------------------------------------------------
// Listeners

/**
 * Socket permission bits: a string of octal digits ("0660", "660", "0o660"), or a
 * number. A YAML integer written with a leading zero (`mode: 0660`) is read as octal,
 * as chmod and YAML 1.1 would (YAML 1.2 makes it decimal 660); other numbers are
 * taken at face value (`0o660` or 432).
 */
function fileMode (ctx: Ctx, at: At, v: string | number): number | undefined {
  const src = ctx.sourceOf(at)
  const digits = typeof v === 'string' ? /^(?:0o)?([0-7]{1,4})$/i.exec(v)?.[1] : undefined
  const mode = typeof v === 'number' ? (src !== undefined && /^0[0-7]+$/.test(src) ? parseInt(src, 8) : v) : digits !== undefined ? parseInt(digits, 8) : undefined
  if (mode !== undefined && mode >= 0 && mode <= 0o777) return mode
  ctx.problem(at, `expected ${S.EXPECTED_MODE}, got ${shown(v)}`)
}

/** A group name (looked up in /etc/group) or a numeric gid. */
function group (ctx: Ctx, at: At, v: string | number): { group?: string, gid: number } | undefined {
  const table = ctx.groupTable()
  const numeric = typeof v === 'number' ? v : /^[0-9]+$/.test(v) ? Number(v) : undefined
  if (numeric !== undefined) {
    if (!Number.isSafeInteger(numeric) || numeric > S.MAX_GID) return ctx.problem(at, `expected a group name or a gid between 0 and ${S.MAX_GID}, got ${shown(v)}`)
    const name = typeof table === 'string' ? undefined : [...table].find(([, gid]) => gid === numeric)?.[0]
    return name === undefined ? { gid: numeric } : { group: name, gid: numeric }
  }
  if (typeof table === 'string') return ctx.problem(at, `${table}; cannot resolve group "${v}" (use a numeric gid)`)
  const gid = table.get(String(v))
  if (gid !== undefined) return { group: String(v), gid }
  ctx.problem(at, `unknown group "${v}" (not found in ${ctx.opts.groupFile ?? '/etc/group'}; use a numeric gid)`)
}

type ListenerFile = Static<typeof S.Listener>

/**
 * A listener whose callers are containers gives the others its `default` identity: a
 * fixed identity beside it would say the same twice, and one with a client CA would
 * never see a container (every request brings a certificate).
 */
function containerIdentityFits (ctx: Ctx, at: At, m: ListenerFile): boolean {
  if (m.containerIdentity === undefined) return true
  let ok = true
  if (m.identity !== undefined) {
    ctx.problem(at.k('identity'), 'cannot be given with containerIdentity; give the identity of callers that are no container as containerIdentity.default')
    ok = false
  }
  if (m.containerIdentity.default !== undefined && m.anonymous === true) {
    ctx.problem(at.k('anonymous'), 'cannot be true with containerIdentity.default (callers that are no container get that identity)')
    ok = false
  }
  if (m.tls?.ca !== undefined) {
    ctx.problem(at.k('containerIdentity'), 'cannot be used on a listener that requires client certificates (tls.ca)')
    ok = false
  }
  return ok
}

function listener (ctx: Ctx, at: At, m: ListenerFile, passed: PassedSocket[]): ListenerConfig | undefined {
  if (!ctx.usable(at)) return
  if (m.systemd !== undefined) return activatedListener(ctx, at, m, passed)
  const hasUnix = m.unix !== undefined
  const hasTcp = m.tcp !== undefined
  if (hasUnix && hasTcp) ctx.problem(at, 'give exactly one of unix or tcp, not both')
  if (!hasUnix && !hasTcp) ctx.problem(at, 'missing unix: <socket path>, tcp: <host:port> or systemd: <socket name>')
  let ok = hasUnix !== hasTcp && ['name', 'identity', 'anonymous', 'containerIdentity'].every((k) => ctx.ok(at.k(k)))
  if (m.identity !== undefined && m.anonymous === true) {
    ctx.problem(at.k('anonymous'), 'cannot be true on a listener that has a fixed identity')
    ok = false
  }
  if (!containerIdentityFits(ctx, at, m)) ok = false
  const common = {
    ...(m.identity ? { identity: m.identity } : {}),
    ...(m.anonymous !== undefined ? { anonymous: m.anonymous } : {}),
    ...(m.containerIdentity ? { containerIdentity: m.containerIdentity } : {}),
  }

  if (m.unix !== undefined) {
    const unix = ctx.given(at, m, 'unix')
    const path = unix === undefined ? undefined : socketPath(ctx, at.k('unix'), unix)
    const modeV = ctx.given(at, m, 'mode')
    const mode = modeV === undefined ? undefined : fileMode(ctx, at.k('mode'), modeV)
    const groupV = ctx.given(at, m, 'group')
    const grp = groupV === undefined ? undefined : group(ctx, at.k('group'), groupV)
    if (m.tls !== undefined) {
      ctx.problem(at.k('tls'), 'only allowed on tcp listeners')
      ok = false
    }
    if (!ok || path === undefined || (m.mode !== undefined && mode === undefined) || (m.group !== undefined && grp === undefined)) return
    return { kind: 'unix', name: m.name ?? `unix:${path}`, path, ...(mode !== undefined ? { mode } : {}), ...grp, ...common }
  }

  const tcp = ctx.given(at, m, 'tcp')
  const addr = tcp === undefined ? undefined : hostPort(ctx, at.k('tcp'), tcp)
  for (const key of ['mode', 'group'] as const) {
    if (m[key] !== undefined) {
      ctx.problem(at.k(key), 'only allowed on unix listeners')
      ok = false
    }
  }
  const t = m.tls === undefined ? undefined : tls(ctx, at.k('tls'), m.tls)
  if (!ok || addr === undefined || (m.tls !== undefined && t === undefined)) return
  return { kind: 'tcp', name: m.name ?? `tcp:${formatHostPort(addr)}`, ...addr, ...(t ? { tls: t } : {}), ...common }
}

// --- socket activation (activation.ts) ---------------------------------------------

/** A `systemd: NAME` entry: the passed socket of that name, with the entry's name, identity and TLS. */
function activatedListener (ctx: Ctx, at: At, m: ListenerFile, passed: PassedSocket[]): ListenerConfig | undefined {
  const name = m.systemd ?? ''
  let ok = ['name', 'identity', 'anonymous', 'containerIdentity'].every((k) => ctx.ok(at.k(k)))
  if (!containerIdentityFits(ctx, at, m)) ok = false
  for (const key of ['unix', 'tcp', 'mode', 'group'] as const) {
    if (m[key] !== undefined) {
      ctx.problem(at.k(key), key === 'mode' || key === 'group'
        ? 'not allowed with systemd: the socket unit sets the owner and mode (SocketUser=, SocketGroup=, SocketMode=)'
        : 'give exactly one of unix, tcp or systemd')
      ok = false
    }
  }
  if (m.identity !== undefined && m.anonymous === true) {
    ctx.problem(at.k('anonymous'), 'cannot be true on a listener that has a fixed identity')
    ok = false
  }
  // `config check` (no environment given) checks the entry, not what systemd will pass.
  const matching = ctx.opts.upstream?.env === undefined || ctx.opts.upstream.checkOnly === true
    ? [{ fd: -1, name, kind: m.tls === undefined ? 'unix' : 'tcp', path: '' } as const]
    : passed.filter((p) => p.name === name)
  if (matching.length !== 1) {
    ctx.problem(at.k('systemd'), matching.length === 0
      ? `no socket named "${name}" was passed (LISTEN_FDNAMES: ${passed.length ? passed.map((p) => p.name).join(':') : 'none'}); start the gateway through its .socket unit, or name the socket with FileDescriptorName=`
      : `${matching.length} passed sockets are named "${name}"; give each its own FileDescriptorName=`)
    return
  }
  const p = matching[0]!
  if (m.tls !== undefined && p.kind !== 'tcp') {
    ctx.problem(at.k('tls'), `only allowed on tcp listeners; the socket named "${name}" is a unix socket`)
    ok = false
  }
  const t = m.tls === undefined ? undefined : tls(ctx, at.k('tls'), m.tls)
  if (!ok || (m.tls !== undefined && t === undefined)) return
  return passedListener(p, m.name ?? `systemd:${name}`, {
    ...(m.identity ? { identity: m.identity } : {}),
    ...(m.anonymous !== undefined ? { anonymous: m.anonymous } : {}),
    ...(m.containerIdentity ? { containerIdentity: m.containerIdentity } : {}),
    ...(t ? { tls: t } : {}),
  })
}

function passedListener (p: PassedSocket, name: string, extra: { identity?: FixedIdentity, anonymous?: boolean, containerIdentity?: ContainerIdentityConfig, tls?: LoadedTls }): ListenerConfig {
  const activated = { fd: p.fd, name: p.name }
  const { tls: t, ...common } = extra
  return p.kind === 'unix'
    ? { kind: 'unix', name, path: p.path, activated, ...common }
    // The address is known once listening (Listening.address); 0 keeps it out of the conflict checks.
    : { kind: 'tcp', name, host: '', port: 0, activated, ...common, ...(t ? { tls: t } : {}) }
}

/**
 * With no `listen` in the configuration and sockets passed, the gateway serves on
 * exactly those, each as the built-in default listener of its kind would: a unix
 * socket acts as the user running the gateway with role admin (the socket unit's
 * SocketMode=/SocketGroup= decide who may connect), a TCP socket needs a bearer token.
 */
function defaultActivatedListeners (passed: PassedSocket[]): ListenerConfig[] {
  const unixDefault = S.DEFAULT_LISTENERS.find((l) => l.unix !== undefined)
  return passed.map((p) => passedListener(p, `systemd:${p.name}`, p.kind === 'unix' && unixDefault?.identity ? { identity: unixDefault.identity } : {}))
}

function listeners (ctx: Ctx, list: ListenerFile[], listenGiven: boolean): ListenerConfig[] {
  const at = new At(['listen'])
  if (!ctx.usable(at)) return []
  const activation = passedSockets(ctx.opts.upstream?.checkOnly === true ? {} : ctx.opts.upstream?.env ?? {})
  if (activation.problem !== undefined) ctx.problem(at, `socket activation: ${activation.problem}`)
  const passed = activation.sockets
  if (!listenGiven && passed.length > 0) return defaultActivatedListeners(passed)
  for (const p of passed) {
    if (!list.some((entry) => entry.systemd === p.name)) ctx.problem(at, `the socket "${p.name}" (fd ${p.fd}) passed by systemd is used by no listener; add one with systemd: ${p.name}`)
  }
  const out: ListenerConfig[] = []
  const names = new Map<string, number>()
  const addresses = new Map<string, number>()
  list.forEach((entry, i) => {
    const l = listener(ctx, at.i(i), entry, passed)
    if (l === undefined) return
    // Several unnamed listeners may ask for port 0; their default names must still differ.
    if (l.kind === 'tcp' && l.port === 0 && entry.name === undefined) l.name = `${l.name}#${i}`
    out.push(l)
    const first = names.get(l.name)
    if (first !== undefined) ctx.problem(at.i(i).k('name'), `duplicate listener name "${l.name}" (also used by listen[${first}])`)
    else names.set(l.name, i)
    // Port 0 asks the kernel for a free port, so two of them never clash.
    if ((l.kind === 'tcp' && l.port === 0) || l.activated) return
    const addr = l.kind === 'unix' ? `unix:${l.path}` : `tcp:${addressKey(l)}`
    const firstAddr = addresses.get(addr)
    if (firstAddr !== undefined) {
      ctx.problem(at.i(i).k(l.kind), `duplicate address ${l.kind === 'unix' ? l.path : formatHostPort(l)} (also used by listen[${firstAddr}])`)
    } else addresses.set(addr, i)
  })
  return out
}

// ---------------------------------------------------------------------------
// Upstream

/** A unix URL with a relative path, given on the command line or in the environment, is relative to the working directory. */
function fromCwd (url: string, cwd: string): string {
  const m = /^unix:\/\/(.*)$/is.exec(url)
  return m !== null && m[1] !== undefined && m[1] !== '' && !m[1].startsWith('/') ? `unix://${resolve(cwd, m[1])}` : url
}

/** Which upstream applies (see UpstreamOverrides), and the key path its problems are reported at. */
function upstreamGiven (ctx: Ctx, given: S.UpstreamFile | undefined): { at: At, value: S.UpstreamFile, from: UpstreamSource } {
  const o = ctx.opts.upstream ?? {}
  const cwd = o.cwd ?? process.cwd()
  if (o.flag !== undefined) return { at: new At(['--upstream']), value: fromCwd(o.flag, cwd), from: '--upstream' }
  if (given !== undefined) return { at: new At(['upstream']), value: given, from: 'config' }
  const host = o.env?.['DOCKER_HOST']
  if (host !== undefined && host !== '') {
    let url = fromCwd(host, cwd)
    // The docker CLI's defaults: tcp://host means port 2375, or 2376 with TLS.
    const verify = (o.env?.['DOCKER_TLS_VERIFY'] ?? '') !== ''
    if (/^tcp:\/\/(\[[^\]]*\]|[^:/[\]]+)\/?$/i.test(url)) url = `${url.replace(/\/$/, '')}:${verify ? 2376 : 2375}`
    if (!verify) return { at: new At(['DOCKER_HOST']), value: url, from: 'DOCKER_HOST' }
    const certs = o.env?.['DOCKER_CERT_PATH'] || join(homedir(), '.docker')
    return { at: new At(['DOCKER_HOST']), value: { url, tls: { cert: join(certs, 'cert.pem'), key: join(certs, 'key.pem'), ca: join(certs, 'ca.pem') } }, from: 'DOCKER_HOST' }
  }
  return { at: new At(['upstream']), value: S.DEFAULT_UPSTREAM, from: 'default' }
}

/**
 * Accepted URL schemes: `unix:///abs/path` (a relative path after `unix://` resolves
 * like any other path); `tcp://host:port`, TLS when a `tls` block is given; `http://`,
 * the same without TLS (a `tls` block is an error); `https://`, which requires a `tls`
 * block (Docker's TLS mode authenticates clients). The port is always required; `url`
 * in the result is canonical: `unix://<abs path>` or `tcp://host:port`.
 */
function upstream (ctx: Ctx, at: At, v: S.UpstreamFile): UpstreamConfig | undefined {
  if (!ctx.usable(at)) return
  const urlAt = typeof v === 'string' ? at : at.k('url')
  const url = typeof v === 'string' ? v : ctx.given(at, v, 'url')
  const tlsV = typeof v === 'string' ? undefined : v.tls
  const t = tlsV === undefined ? undefined : tls(ctx, at.k('tls'), tlsV)
  if (url === undefined) return

  const m = /^([A-Za-z][A-Za-z0-9+.-]*):\/\/(.*)$/s.exec(url)
  if (m === null || m[1] === undefined || m[2] === undefined) return ctx.problem(urlAt, `expected unix:///path or tcp://host:port, got ${shown(url)}`)
  const scheme = m[1].toLowerCase()
  const rest = m[2]
  if (scheme === 'unix') {
    if (tlsV !== undefined) ctx.problem(at.k('tls'), 'only allowed with a tcp upstream')
    const path = rest === '' ? ctx.problem(urlAt, 'must not be empty') : socketPath(ctx, urlAt, rest)
    return path === undefined || tlsV !== undefined ? undefined : { kind: 'unix', path, url: `unix://${path}` }
  }
  if (scheme !== 'tcp' && scheme !== 'http' && scheme !== 'https') {
    return ctx.problem(urlAt, `unsupported scheme "${scheme}://" in ${shown(url)}, expected unix:// or tcp:// (http:// and https:// are also accepted)`)
  }
  let ok = true
  if (scheme === 'https' && tlsV === undefined) {
    ctx.problem(at, 'https:// requires tls: { cert, key } (use the long form: { url, tls })')
    ok = false
  }
  if (scheme === 'http' && tlsV !== undefined) {
    ctx.problem(at.k('tls'), 'not allowed with http:// (use tcp:// or https://)')
    ok = false
  }
  const addr = hostPort(ctx, urlAt, rest.endsWith('/') ? rest.slice(0, -1) : rest)
  if (!ok || addr === undefined || (tlsV !== undefined && t === undefined)) return
  return { kind: 'tcp', ...addr, url: `tcp://${formatHostPort(addr)}`, ...(t ? { tls: t } : {}) }
}

/** A unix path with its directory's symlinks resolved, so that two spellings of one socket compare equal. */
function realSocketPath (path: string): string {
  try {
    return join(realpathSync(dirname(path)), basename(path))
  } catch {
    return path
  }
}

const LOOPBACK = /^(127\.[0-9.]+|::1|localhost)$/i

/** Whether the upstream is this listener: the same socket, or the same port on the same (or a wildcard) address. */
function sameAddress (l: ListenerConfig, up: UpstreamConfig): boolean {
  if (l.kind === 'unix' || up.kind === 'unix') return l.kind === 'unix' && up.kind === 'unix' && (l.path === up.path || realSocketPath(l.path) === realSocketPath(up.path))
  if (l.port === 0 || l.port !== up.port) return false
  const host = (h: string): string => (h.toLowerCase() === 'localhost' ? '127.0.0.1' : h.toLowerCase())
  return host(l.host) === host(up.host) || ((l.host === '0.0.0.0' || l.host === '::') && LOOPBACK.test(up.host))
}

// ---------------------------------------------------------------------------
// api, auth

/** `1.NN`; a YAML float is read as written (`1.40`, not 1.4). */
function apiVersion (ctx: Ctx, at: At, v: string | number): { text: string, minor: number } | undefined {
  if (!ctx.usable(at)) return
  const text = typeof v === 'string' ? v : ctx.sourceOf(at) ?? String(v)
  const m = /^1\.([0-9]{2})$/.exec(text)
  if (m?.[1] === undefined) return ctx.problem(at, `expected ${S.EXPECTED_VERSION}, got ${shown(v)}`)
  const minor = Number(m[1])
  if (minor >= S.API_MINOR_MIN && minor <= S.API_MINOR_MAX) return { text, minor }
  ctx.problem(at, `must be between 1.${S.API_MINOR_MIN} and 1.${S.API_MINOR_MAX}, got ${text}`)
}

function api (ctx: Ctx, a: Static<typeof S.Api>): Config['api'] {
  const at = new At(['api'])
  if (!ctx.usable(at)) return { minVersion: '', maxVersion: '' }
  const min = apiVersion(ctx, at.k('minVersion'), a.minVersion)
  const max = apiVersion(ctx, at.k('maxVersion'), a.maxVersion)
  if (min && max && min.minor > max.minor) ctx.problem(at, `minVersion ${min.text} is greater than maxVersion ${max.text}`)
  return { minVersion: min?.text ?? '', maxVersion: max?.text ?? '' }
}

const JWT_KEY_SOURCES = ['secret', 'publicKeyFile', 'jwksFile'] as const
type KeySource = (typeof JWT_KEY_SOURCES)[number]

function algorithmFamilyProblem (alg: string, source: KeySource, key: KeyObject | undefined): string | null {
  const hmac = HMAC_ALGORITHMS.includes(alg)
  if (source === 'secret') return hmac ? null : `"${alg}" cannot be used with secret (a shared secret needs HS256, HS384 or HS512)`
  if (hmac) return `"${alg}" cannot be used with ${source} (HMAC with a public key lets anyone forge tokens)`
  return key === undefined ? null : keyFitProblem(alg, key, source)
}

/** Exactly one key source; keys that parse; algorithms that are allowed and fit the key. */
function jwt (ctx: Ctx, at: At, j: JwtConfig): JwtConfig | undefined {
  if (!ctx.usable(at)) return
  const out: JwtConfig = { ...j }
  const sources = JWT_KEY_SOURCES.filter((k) => j[k] !== undefined)
  if (sources.length === 0) ctx.problem(at, 'exactly one of secret, publicKeyFile or jwksFile is required')
  if (sources.length > 1) ctx.problem(at, `exactly one of secret, publicKeyFile or jwksFile is allowed, got ${sources.join(' and ')}`)
  const source = sources.length === 1 ? sources[0] : undefined
  const read = (key: 'publicKeyFile' | 'jwksFile') => {
    const v = ctx.given(at, j, key)
    const f = v === undefined ? undefined : fileContents(ctx, at.k(key), v)
    if (f !== undefined) out[key] = f.path
    return f
  }

  let publicKey: KeyObject | undefined
  const pem = read('publicKeyFile')
  if (pem !== undefined) {
    try {
      publicKey = createPublicKey(pem.data)
      if (publicKey.asymmetricKeyType === undefined) throw new Error('not an asymmetric key')
    } catch (err) {
      publicKey = undefined
      ctx.problem(at.k('publicKeyFile'), `not a valid public key (${errorCode(err)}): ${pem.path}`)
    }
  }
  let jwks: JwksKey[] | undefined
  const set = read('jwksFile')
  if (set !== undefined) {
    const parsed = parseJwks(set.data)
    if (typeof parsed === 'string') ctx.problem(at.k('jwksFile'), `${parsed}: ${set.path}`)
    else jwks = parsed
  }

  let algsOk = ctx.ok(at.k('algorithms'))
  if (j.algorithms !== undefined && algsOk) {
    j.algorithms.forEach((alg, i) => {
      const problem = alg.toLowerCase() === 'none'
        ? '"none" is never allowed'
        : !JWT_ALGORITHMS.includes(alg)
            ? `unsupported algorithm "${alg}", expected one of ${JWT_ALGORITHMS.join(', ')}`
            : source === undefined ? null : algorithmFamilyProblem(alg, source, publicKey)
      if (problem !== null) ctx.problem(at.k('algorithms').i(i), problem)
      if (problem !== null) algsOk = false
    })
  }
  // The keys must be usable with the algorithms in force (given, or the defaults).
  if (algsOk && source !== undefined) {
    const algs = j.algorithms ?? (source === 'secret' ? DEFAULT_SECRET_ALGORITHMS : DEFAULT_PUBLIC_KEY_ALGORITHMS)
    const given = j.algorithms !== undefined ? 'auth.jwt.algorithms' : 'the default algorithms'
    if (publicKey !== undefined && j.algorithms === undefined && fittingAlgorithms(algs, publicKey).length === 0) {
      ctx.problem(at.k('publicKeyFile'), `${given} (${algs.join(', ')}) do not fit the ${publicKey.asymmetricKeyType ?? 'unknown'} key; set auth.jwt.algorithms`)
    }
    if (jwks !== undefined && !jwks.some((k) => jwksKeyAlgorithms(k, algs).length > 0)) {
      ctx.problem(at.k('jwksFile'), `no key in the set can verify ${given} (${algs.join(', ')})${j.algorithms === undefined ? '; set auth.jwt.algorithms' : ''}`)
    }
  }
  return out
}

/** Each key as a list: `roles: OU` is `roles: [OU]`. */
function mtls (m: Static<typeof S.Mtls>): MtlsMappingConfig {
  const list = (v: string | string[]): string[] => (typeof v === 'string' ? [v] : v)
  return { subject: list(m.subject), tenant: list(m.tenant), roles: list(m.roles) }
}

// ---------------------------------------------------------------------------
// policy, audit, metrics

/** `host:port/database` of a connection string, or why it is not one (never repeating the string: it may hold a password). */
export function databaseWhere (url: string): string | { problem: string } {
  let u: URL
  let noHost = false
  try {
    u = new URL(url)
  } catch {
    // `postgres://user@/db?host=/socket/dir`: libpq and pg take an empty host, WHATWG URL does not.
    try {
      u = new URL(url.replace(/^(postgres(?:ql)?:\/\/[^/?#]*@)(?=[/?])/, '$1localhost'))
      noHost = true
    } catch {
      return { problem: 'is not a URL (expected postgres://user@host:port/database)' }
    }
  }
  if (u.protocol !== 'postgres:' && u.protocol !== 'postgresql:') return { problem: `expected a postgres:// or postgresql:// URL, got scheme ${shown(u.protocol.replace(/:$/, ''))}` }
  const db = decodeURIComponent(u.pathname.replace(/^\//, ''))
  if (!db) return { problem: 'names no database (postgres://user@host:port/DATABASE)' }
  const socket = u.searchParams.get('host')
  const host = socket ?? (u.hostname && !noHost ? decodeURIComponent(u.hostname) : '')
  if (!host) return { problem: 'names no host (postgres://user@HOST:port/database, or ?host=/socket/dir)' }
  return `${host.startsWith('/') ? host : `${host}:${u.port || '5432'}`}/${db}`
}

function policy (ctx: Ctx, p: Static<typeof S.Policy>): Config['policy'] {
  const at = new At(['policy', 'database'])
  const db = ctx.given(new At(['policy']), p, 'database')
  const url = db && ctx.given(at, db, 'url')
  const where = url === undefined ? undefined : databaseWhere(url)
  if (typeof where === 'object') ctx.problem(at.k('url'), where.problem)
  const dir = ctx.given(new At(['policy']), p, 'dir')
  return {
    dir: dir === undefined ? '' : ctx.path(dir),
    ...(db && typeof where === 'string' ? { database: { ...db, where } } : {}),
    // Only the exception is carried: the default (fixtures gate every reload) is the absence.
    ...(p.reloadTests === false ? { reloadTests: false } : {}),
  }
}

/** Paths resolved; `null` (file off, no transport options, no rotation) left out. */
function audit (ctx: Ctx, a: Static<typeof S.Audit>): AuditConfig {
  const at = new At(['audit'])
  const { file, transport, rotate, ...rest } = a
  const out: AuditConfig = { ...rest }
  if (typeof file === 'string') out.file = ctx.path(file)
  if (rotate) out.rotate = rotate
  if (transport && ctx.ok(at.k('transport'))) {
    // A relative path (./x.js, ../x.js) is resolved like every other path; a bare name is a module.
    const target = /^\.\.?[\\/]/.test(transport.target) ? ctx.path(transport.target) : transport.target
    out.transport = { target, ...(transport.options ? { options: transport.options } : {}) }
    if (file === null && a.stdout !== true) ctx.problem(at.k('transport'), 'is asynchronous and not a durable record on its own; with file: null set stdout: true as well')
  }
  return out
}

/** Label values the metrics use for unlisted tenants and for requests without a tenant. */
const RESERVED_TENANT_LABELS = ['other', 'none']

function metrics (ctx: Ctx, m: Static<typeof S.Metrics>): Config['metrics'] {
  const at = new At(['metrics'])
  const address = ctx.given(at, m, 'listen')
  const listen = address === undefined ? undefined : hostPort(ctx, at.k('listen'), address)
  const seen = new Set<string>()
  // Listed names are checked even when there are too many of them.
  if (!Array.isArray(m.tenants)) return { ...(listen ? { listen } : {}) }
  m.tenants.forEach((name, i) => {
    if (!ctx.usable(at.k('tenants').i(i))) return
    if (RESERVED_TENANT_LABELS.includes(name)) {
      ctx.problem(at.k('tenants').i(i), `${shown(name)} is reserved (the label value for ${name === 'other' ? 'unlisted tenants' : 'requests without a tenant'})`)
    } else if (seen.has(name)) ctx.problem(at.k('tenants').i(i), `${shown(name)} is listed more than once`)
    seen.add(name)
  })
  return { ...(listen ? { listen } : {}), tenants: m.tenants }
}

// ---------------------------------------------------------------------------

/**
 * Validates a parsed config document (changed in place: defaults filled in); returns
 * the Config (not yet frozen) and every problem found.
 */
export function validate (doc: { [key: string]: unknown }, source: string | null, opts: ValidateOptions): { config: Config, problems: string[] } {
  // A top-level section written with no value takes all its defaults.
  for (const key of S.SECTIONS) if (Object.hasOwn(doc, key) && doc[key] === null) delete doc[key]
  // Before the schema fills in the default listeners: without a `listen`, passed sockets replace them.
  const listenGiven = Object.hasOwn(doc, 'listen')
  const ctx = new Ctx(opts, checkFile(doc))
  const file = doc as S.ConfigFile

  const listen = listeners(ctx, file.listen, listenGiven)
  const given = upstreamGiven(ctx, file.upstream)
  const up = upstream(ctx, given.at, given.value)
  const apiWindow = api(ctx, file.api)
  const auth = ctx.usable(new At(['auth'])) ? file.auth : {}
  const jwtCfg = auth.jwt && jwt(ctx, new At(['auth', 'jwt']), auth.jwt)
  const mtlsCfg = auth.mtls && ctx.ok(new At(['auth', 'mtls'])) ? mtls(auth.mtls) : undefined
  const policyCfg = ctx.usable(new At(['policy'])) ? policy(ctx, file.policy) : { dir: '' }
  const auditCfg = ctx.usable(new At(['audit'])) ? audit(ctx, file.audit) : { level: 'metadata' as const }
  const metricsCfg = ctx.usable(new At(['metrics'])) ? metrics(ctx, file.metrics) : {}

  // Registry credentials held for tenants: read (and their permissions checked) now.
  const credentials = ctx.usable(new At(['registries'])) ? ctx.given(new At(['registries']), file.registries, 'credentials') : undefined
  const registries: Config['registries'] = { credentials: null }
  if (credentials !== undefined) {
    const path = ctx.path(credentials)
    const at = new At(['registries', 'credentials'])
    const problems: string[] = []
    registries.credentials = { file: path, loaded: loadCredentials(path, String(at), problems) }
    for (const p of problems) ctx.problem(at, p.slice(`${at}: `.length))
  }

  // Conflicts between sections.
  listen.forEach((l, i) => {
    if (up === undefined || !sameAddress(l, up)) return
    if (given.from === 'config' || given.from === 'default') {
      ctx.problem(new At(['listen', i, l.kind]), up.kind === 'unix'
        ? `is the upstream socket ${up.path}; the gateway cannot listen on the socket it forwards to`
        : `is the upstream ${up.url}; the gateway cannot listen on the address it forwards to`)
    } else {
      // Typically a shell that talks to docker through the gateway (DOCKER_HOST=unix://$PWD/portcullis.sock) starting another one.
      ctx.problem(new At([given.from]), `${up.url} is this gateway's own listener (listen[${i}]): it would forward every request to itself; ` +
        `give the engine's address with --upstream (e.g. --upstream ${S.DEFAULT_UPSTREAM})${given.from === 'DOCKER_HOST' ? ' or unset DOCKER_HOST' : ''}`)
    }
  })
  const m = metricsCfg.listen
  listen.forEach((l, i) => {
    if (l.kind === 'tcp' && m !== undefined && m.port !== 0 && addressKey(m) === addressKey(l)) {
      ctx.problem(new At(['metrics', 'listen']), `${formatHostPort(m)} is also used by listen[${i}]`)
    }
  })

  // One body of the largest size must fit in the memory for bodies.
  const bufferedMin = file.limits.jsonBodyBytes * BODY_MEMORY_FACTOR
  const buffered = file.limits.bufferedBytes
  if (buffered !== undefined && buffered < bufferedMin) ctx.problem(new At(['limits', 'bufferedBytes']), `must be at least ${bufferedMin}, got ${buffered}`)

  const config: Config = {
    source,
    upstreamFrom: given.from,
    listen,
    // Only read when there are no problems, in which case upstream() succeeded.
    upstream: up ?? { kind: 'unix', path: '', url: '' },
    hostPaths: file.hostPaths,
    api: apiWindow,
    limits: { jsonBodyBytes: file.limits.jsonBodyBytes, bufferedBytes: buffered ?? Math.max(BUFFERED_BYTES_DEFAULT, bufferedMin) },
    rates: file.rates,
    auth: { ...(jwtCfg ? { jwt: jwtCfg } : {}), ...(mtlsCfg ? { mtls: mtlsCfg } : {}) },
    policy: policyCfg,
    audit: auditCfg,
    metrics: metricsCfg,
    registries,
    provenance: { file: file.provenance.file === null ? null : ctx.path(file.provenance.file) },
    log: file.log,
    shutdown: file.shutdown,
    workers: file.workers === 'auto' ? availableParallelism() : file.workers,
  }
  return { config, problems: ctx.problems() }
}
