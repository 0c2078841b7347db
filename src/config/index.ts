/**
 * Portcullis configuration: loading, validation and defaults.
 *
 * The YAML key names are a public contract, declared once in schema.ts (types,
 * defaults, validation, the words of its problems); resolve.ts checks what a schema
 * cannot and resolves paths, files and addresses. Every Config handed out is deeply
 * frozen (TLS key material Buffers excepted: Node cannot freeze typed arrays).
 */
import { readFileSync } from 'node:fs'
import { dirname, resolve } from 'node:path'
import { isScalar, parseDocument, type Document } from 'yaml'
import { formatHostPort } from './addresses'
import { errorCode } from './files'
import { validate, type UpstreamOverrides } from './resolve'
import { AUDIT_DEFAULTS, DEFAULT_LISTENERS, RATE_PER_DEFAULT } from './schema'
import { configDocument, readSettings, writePolicyDir, type SocketProxySettings } from './socket-proxy'
import type { Config, JsonObject, JsonValue, ListenerConfig, RoleRatesConfig, TlsFiles, UpstreamConfig } from './types'

export type {
  AuditConfig,
  AuditFailurePolicy,
  AuditLevel,
  AuditTransportConfig,
  AuthConfig,
  Config,
  ContainerIdentityConfig,
  FixedIdentity,
  JsonObject,
  JsonValue,
  JwtClaimsConfig,
  JwtConfig,
  ListenerConfig,
  LogLevel,
  MtlsMappingConfig,
  PolicyConfig,
  PolicyDatabaseConfig,
  RatesConfig,
  RoleRatesConfig,
  TcpListenerConfig,
  TcpUpstreamConfig,
  TlsFiles,
  TlsMaterial,
  UnixListenerConfig,
  UnixUpstreamConfig,
  UpstreamConfig,
  UpstreamSource,
} from './types'
export type { UpstreamOverrides } from './resolve'
export { configWarnings } from './warnings'

/**
 * What `serve` is told on its command line, over the config file (or the defaults): the
 * engine (UpstreamOverrides) and `--listen` addresses, which replace the listeners.
 */
export interface CommandLine extends UpstreamOverrides {
  /** `unix:PATH` (owner-only, the default socket's identity) or `tcp:HOST:PORT` (bearer tokens only). */
  readonly listen?: readonly string[]
}

/**
 * `--listen` addresses as listener entries, shaped like the built-in defaults: a unix
 * socket is owner-only (0600) and whoever can connect acts as the user running the
 * gateway, role admin; a TCP port takes bearer tokens only. Relative paths resolve
 * against `cwd` (the command line's directory, not the config file's).
 */
function listenersFrom (flags: readonly string[], cwd: string): { listen: unknown[], problems: string[] } {
  const listen: unknown[] = []
  const problems: string[] = []
  for (const flag of flags) {
    const m = /^(unix|tcp):(?:\/\/)?(.+)$/.exec(flag)
    if (!m) { problems.push(`--listen ${JSON.stringify(flag)}: expected unix:PATH or tcp:HOST:PORT`); continue }
    listen.push(m[1] === 'unix' ? { ...DEFAULT_LISTENERS[0], unix: resolve(cwd, m[2]) } : { tcp: m[2] })
  }
  return { listen, problems }
}

/** The file's settings with the command line's listeners in place of its own. */
function withCommandLine (value: { [key: string]: unknown }, overrides: CommandLine | undefined, source: string | null): { [key: string]: unknown } {
  if (overrides?.listen === undefined || overrides.listen.length === 0) return value
  const { listen, problems } = listenersFrom(overrides.listen, overrides.cwd ?? process.cwd())
  if (problems.length > 0) throw new ConfigError(problems, source)
  return { ...value, listen }
}
export { formatHostPort, parseHostPort, type HostPort } from './addresses'
export { Credentials, loadCredentials, type RegistryAuth } from './credentials'
export {
  API_MINOR_MAX,
  API_MINOR_MIN,
  AUDIT_DEFAULTS,
  AUDIT_FAILURE_POLICIES,
  AUDIT_LEVELS,
  HMAC_ALGORITHMS,
  JWT_ALGORITHMS,
  LOG_LEVELS,
  RATE_KEYS,
  RATE_PER_DEFAULT,
  X509_SUBJECT_ATTRIBUTES,
  defaultMtlsMapping,
} from './schema'

/** Thrown when a configuration is invalid; `problems` lists every problem found, each prefixed by its key path. */
export class ConfigError extends Error {
  readonly problems: string[]
  constructor (problems: string[], source: string | null = null) {
    const where = source === null ? 'built-in defaults' : source
    const n = problems.length
    super(`invalid configuration (${where}), ${n} problem${n === 1 ? '' : 's'}:\n${problems.map((p) => `  - ${p}`).join('\n')}`)
    this.name = 'ConfigError'
    this.problems = [...problems]
  }
}

/** Freezes an object graph in place. Buffers (typed arrays) cannot be frozen and are left as they are. */
function deepFreeze<T> (value: T): T {
  if (typeof value !== 'object' || value === null || ArrayBuffer.isView(value) || Object.isFrozen(value)) return value
  Object.freeze(value)
  for (const key of Object.keys(value)) {
    deepFreeze((value as { [key: string]: unknown })[key])
  }
  return value
}

/**
 * The built-in configuration used when no config file is given: unix socket
 * ./portcullis.sock (mode 0600, fixed identity: the OS user running the gateway,
 * role admin) and tcp 127.0.0.1:2375 (bearer token required; without auth.jwt it
 * refuses every request), upstream unix:///var/run/docker.sock,
 * policies in ./policies, audit to ./audit.jsonl at level metadata, no metrics
 * listener, log level info, API 1.24-1.56, 1 MiB JSON bodies, 10 s grace.
 * Relative paths resolve against `cwd` (default: process.cwd()). `upstream`: the
 * engine given by `--upstream` or DOCKER_HOST instead of the default.
 * Throws ConfigError if the default socket path would be too long for a unix socket,
 * or if the given upstream is invalid or is the gateway's own listener.
 */
export function defaultConfig (cwd: string = process.cwd(), upstream?: CommandLine): Config {
  const { config, problems } = validate(withCommandLine({}, upstream, null), null, { baseDir: resolve(cwd), ...(upstream !== undefined ? { upstream } : {}) })
  if (problems.length > 0) throw new ConfigError(problems, null)
  return deepFreeze(config)
}

// --- docker-socket-proxy drop-in (socket-proxy.ts) ----------------------------------

export { dropInRequested, SWITCHES as SOCKET_PROXY_SWITCHES, type SocketProxySettings } from './socket-proxy'

/**
 * The configuration docker-socket-proxy's variables in `env` describe, with the policy
 * derived from them written to a new directory (`policyDir`; `lines` are its allow
 * lines). `listen` replaces port 2375 (tests), `metricsListen` the metrics and
 * /healthz listener (default 127.0.0.1:9102; '' for none). Throws ConfigError listing
 * every variable with a value that project would not read as written.
 */
export function socketProxyConfig (env: { readonly [key: string]: string | undefined }, opts: { cwd?: string, upstream?: UpstreamOverrides, listen?: string, metricsListen?: string, policyBase?: string } = {}): { config: Config, settings: SocketProxySettings, policyDir: string, lines: string[] } {
  const read = readSettings(env)
  if (read.problems.length > 0) throw new ConfigError(read.problems.map((p) => `docker-socket-proxy variables: ${p}`), null)
  const settings = opts.listen === undefined ? read.settings : { ...read.settings, listen: opts.listen }
  const { dir, lines } = writePolicyDir(settings, opts.policyBase)
  const doc = configDocument(settings, dir, opts.metricsListen ?? '127.0.0.1:9102')
  const { config, problems } = validate(doc, null, { baseDir: resolve(opts.cwd ?? process.cwd()), ...(opts.upstream !== undefined ? { upstream: opts.upstream } : {}) })
  if (problems.length > 0) throw new ConfigError(problems, null)
  return { config: deepFreeze(config), settings, policyDir: dir, lines }
}

/**
 * Reads, parses and validates a YAML config file. Throws ConfigError listing every
 * problem. `upstream`: `--upstream` (replaces the file's) and DOCKER_HOST (used when
 * the file has none); `listen`: `--listen` addresses that replace the file's listeners.
 */
export function loadConfig (file: string, upstream?: CommandLine): Config {
  const path = resolve(file)
  let text: string
  try {
    text = readFileSync(path, 'utf8')
  } catch (err) {
    throw new ConfigError([`${path}: cannot read config file (${errorCode(err)})`], path)
  }
  return parseConfig(text, path, upstream)
}

/** First line of a yaml library error, without the code excerpt prettyErrors appends. */
function yamlMessage (kind: string, message: string): string {
  const first = (message.split('\n')[0] ?? message).replace(/:\s*$/, '')
  return `${kind}: ${first}`
}

/**
 * Parses and validates YAML text. `source` is the file the text came from;
 * relative paths resolve against its directory. Throws ConfigError listing every problem.
 */
export function parseConfig (text: string, source: string, upstream?: CommandLine): Config {
  const file = resolve(source)
  const doc: Document.Parsed = parseDocument(text, { prettyErrors: true, uniqueKeys: true })
  const problems: string[] = [
    ...doc.errors.map((e) => yamlMessage('yaml syntax error', e.message)),
    ...doc.warnings.map((e) => yamlMessage('yaml', e.message)),
  ]
  if (problems.length > 0) throw new ConfigError(problems, file)
  if (doc.contents === null) throw new ConfigError(['(root): the configuration is empty; expected a mapping such as "listen: ..."'], file)

  let value: unknown
  try {
    value = doc.toJS({ maxAliasCount: 100 })
  } catch (err) {
    throw new ConfigError([yamlMessage('yaml', err instanceof Error ? err.message : String(err))], file)
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    const got = Array.isArray(value) ? 'a list' : value === null ? 'null' : `${typeof value} ${JSON.stringify(value)}`
    throw new ConfigError([`(root): expected a mapping at the top level, got ${got}`], file)
  }

  const result = validate(withCommandLine(value as { [key: string]: unknown }, upstream, file), file, {
    baseDir: dirname(file),
    ...(upstream !== undefined ? { upstream } : {}),
    sourceOf: (keys) => {
      const node = doc.getIn(keys, true)
      return isScalar(node) && typeof node.source === 'string' ? node.source : undefined
    },
  })
  if (result.problems.length > 0) throw new ConfigError(result.problems, file)
  return deepFreeze(result.config)
}

// ---------------------------------------------------------------------------
// describeConfig

function tlsSummary (t: TlsFiles): JsonObject {
  const out: JsonObject = { cert: t.cert, key: t.key }
  if (t.ca !== undefined) out['ca'] = t.ca
  return out
}

function listenerSummary (l: ListenerConfig): JsonObject {
  const out: JsonObject = { kind: l.kind, name: l.name }
  if (l.kind === 'unix') {
    out['path'] = l.path
    if (l.mode !== undefined) out['mode'] = `0${l.mode.toString(8).padStart(3, '0')}`
    if (l.group !== undefined) out['group'] = l.group
    if (l.gid !== undefined) out['gid'] = l.gid
  } else {
    out['address'] = formatHostPort(l)
    if (l.tls !== undefined) {
      out['tls'] = { ...tlsSummary(l.tls), clientCertificates: l.tls.ca !== undefined ? 'required' : 'not requested' }
    }
  }
  if (l.identity !== undefined) {
    const id: JsonObject = { subject: l.identity.subject, roles: [...l.identity.roles] }
    if (l.identity.tenant !== undefined) id['tenant'] = l.identity.tenant
    out['identity'] = id
  }
  if (l.anonymous !== undefined) out['anonymous'] = l.anonymous
  if (l.containerIdentity !== undefined) {
    const ci: JsonObject = { labelPrefix: l.containerIdentity.labelPrefix }
    const d = l.containerIdentity.default
    if (d !== undefined) ci['default'] = { subject: d.subject, roles: [...d.roles], ...(d.tenant !== undefined ? { tenant: d.tenant } : {}) }
    out['containerIdentity'] = ci
  }
  if (l.activated !== undefined) out['systemd'] = { fd: l.activated.fd, name: l.activated.name }
  return out
}

function upstreamSummary (u: UpstreamConfig): JsonObject {
  const out: JsonObject = { kind: u.kind, url: u.url }
  if (u.kind === 'tcp' && u.tls !== undefined) out['tls'] = tlsSummary(u.tls)
  return out
}

/** The audit section with every default filled in; transport options show their keys only (they may hold credentials). */
function auditSummary (a: Config['audit']): JsonObject {
  const out: JsonObject = { level: a.level, stdout: a.stdout === true }
  if (a.file !== undefined) out['file'] = a.file
  if (a.transport !== undefined) {
    out['transport'] = { target: a.transport.target, options: Object.keys(a.transport.options ?? {}).map((k) => `${k}: <set>`) }
  }
  const rotate: JsonObject = {}
  const maxBytes = a.rotate?.maxBytes ?? AUDIT_DEFAULTS.rotate.maxBytes
  const maxAge = a.rotate?.maxAgeSeconds ?? AUDIT_DEFAULTS.rotate.maxAgeSeconds
  if (maxBytes !== undefined) rotate['maxBytes'] = maxBytes
  if (maxAge !== undefined) rotate['maxAgeSeconds'] = maxAge
  out['rotate'] = rotate
  out['fsync'] = a.fsync ?? AUDIT_DEFAULTS.fsync
  out['onFailure'] = a.onFailure ?? AUDIT_DEFAULTS.onFailure
  out['redactEnv'] = a.redactEnv ?? AUDIT_DEFAULTS.redactEnv
  return out
}

/** The rates section with every role's limits; `unlimited` for what is not limited. */
function ratesSummary (r: Config['rates']): JsonObject {
  const role = (x: RoleRatesConfig | null): JsonValue => {
    if (x === null) return 'unlimited'
    const out: JsonObject = { per: [...(x.per ?? RATE_PER_DEFAULT)] }
    for (const k of ['read', 'write', 'transfer'] as const) out[k] = x[k] ? { rate: x[k].rate, burst: x[k].burst } : 'unlimited'
    for (const k of ['sessions', 'streams'] as const) out[k] = x[k] ?? 'unlimited'
    return out
  }
  const roles: JsonObject = {}
  for (const [name, x] of Object.entries(r.roles)) roles[name] = role(x)
  return { roles, others: role(r.others) }
}

/**
 * A JSON-safe summary of a Config for start-up logging: no key material, and
 * the JWT secret replaced by "<redacted>".
 */
export function describeConfig (c: Config): JsonObject {
  const out: JsonObject = {
    source: c.source,
    listen: c.listen.map(listenerSummary),
    upstream: { ...upstreamSummary(c.upstream), ...(c.upstreamFrom !== undefined ? { from: c.upstreamFrom } : {}) },
    hostPaths: c.hostPaths,
    api: { minVersion: c.api.minVersion, maxVersion: c.api.maxVersion },
    limits: { jsonBodyBytes: c.limits.jsonBodyBytes, bufferedBytes: c.limits.bufferedBytes },
    rates: ratesSummary(c.rates),
  }
  const auth: JsonObject = {}
  const j = c.auth.jwt
  if (j !== undefined) {
    const jwt: JsonObject = {}
    if (j.secret !== undefined) jwt['secret'] = '<redacted>'
    if (j.publicKeyFile !== undefined) jwt['publicKeyFile'] = j.publicKeyFile
    if (j.jwksFile !== undefined) jwt['jwksFile'] = j.jwksFile
    if (j.issuer !== undefined) jwt['issuer'] = j.issuer
    if (j.audience !== undefined) jwt['audience'] = typeof j.audience === 'string' ? j.audience : [...j.audience]
    if (j.algorithms !== undefined) jwt['algorithms'] = [...j.algorithms]
    if (j.clockToleranceSeconds !== undefined) jwt['clockToleranceSeconds'] = j.clockToleranceSeconds
    if (j.requireExp !== undefined) jwt['requireExp'] = j.requireExp
    if (j.claims !== undefined) {
      const claims: JsonObject = {}
      for (const [k, v] of Object.entries(j.claims)) if (typeof v === 'string') claims[k] = v
      jwt['claims'] = claims
    }
    auth['jwt'] = jwt
  }
  if (c.auth.mtls !== undefined) {
    auth['mtls'] = { subject: [...c.auth.mtls.subject], tenant: [...c.auth.mtls.tenant], roles: [...c.auth.mtls.roles] }
  }
  out['auth'] = auth
  // The database by where it is, never by its connection string (it may hold the password).
  out['policy'] = { dir: c.policy.dir, ...(c.policy.database ? { database: { where: c.policy.database.where, channel: c.policy.database.channel } } : {}) }
  out['audit'] = auditSummary(c.audit)
  const metrics: JsonObject = {}
  if (c.metrics.listen !== undefined) metrics['listen'] = formatHostPort(c.metrics.listen)
  if (c.metrics.tenants !== undefined) metrics['tenants'] = [...c.metrics.tenants]
  out['metrics'] = metrics
  if (c.registries.credentials) out['registries'] = { credentials: c.registries.credentials.file, tenants: c.registries.credentials.loaded.describe() }
  out['provenance'] = { file: c.provenance.file }
  out['log'] = { level: c.log.level }
  out['shutdown'] = { graceSeconds: c.shutdown.graceSeconds }
  out['workers'] = c.workers
  return out
}
