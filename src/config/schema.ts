/**
 * The configuration file, declared once: the TypeBox schema below gives the types of
 * the file's sections (Static<>), their defaults (filled in by ajv's useDefaults), the
 * validation (ajv, strict, all errors) and, through the annotations of problems.ts,
 * the words of each problem. What a schema cannot say (files that must exist and
 * parse, one of unix or tcp, listener conflicts, JWT keys that fit their algorithms)
 * is checked after it, in resolve.ts.
 *
 * Conventions:
 *  - Unknown keys are errors at every level (`additionalProperties: false`).
 *  - A top-level section written with no value (`auth:`) counts as an empty mapping,
 *    so all its keys take their defaults. Anywhere else null is a type error, except
 *    where a union allows it (`audit.file: null` turns the audit file off).
 *  - Relative paths resolve against the directory holding the config file (or the
 *    working directory for the built-in defaults); that happens in resolve.ts.
 *
 * To add a key: declare it here (with its default, if it has one); its type reaches
 * Config through Static<>, and only a rule the schema cannot express goes to resolve.ts.
 */
import { userInfo } from 'node:os'
import { Type, type Static, type TSchema } from '@sinclair/typebox'
import { HMAC_ALGORITHMS, JWT_ALGORITHMS } from './jwt-keys'
import type { Says } from './problems'

export { HMAC_ALGORITHMS, JWT_ALGORITHMS }

type Options = Says & { default?: unknown, [keyword: string]: unknown }

/** Unknown keys are errors; `expected` etc. as in problems.ts. */
const closed = (o: Options = {}): Options => ({ additionalProperties: false, ...o })
/** A non-empty string. */
const Text = (o: Options = {}) => Type.String({ minLength: 1, ...o })
/** One of a few strings; any other value is "expected one of ..., got ...". */
const OneOf = <T extends string>(values: readonly T[], o: Options = {}) => Type.Unsafe<T>({ enum: [...values], ...o })
/** A whole number a double holds exactly. */
const Whole = (o: Options = {}) => Type.Integer({ maximum: Number.MAX_SAFE_INTEGER, ...o })
/** Control characters, which would forge lines in logs and metrics. */
const PRINTABLE = '^[^\\u0000-\\u001f\\u007f]*$'

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const
/** metadata < facts (adds the policy's facts, for `policy learn`) < request (adds the body as well). */
export const AUDIT_LEVELS = ['metadata', 'facts', 'request'] as const
export const AUDIT_FAILURE_POLICIES = ['closed', 'open'] as const
/** Docker Engine API versions are `1.NN`; the gateway understands this window. */
export const API_MINOR_MIN = 24
export const API_MINOR_MAX = 56
export const DEFAULT_UPSTREAM = 'unix:///var/run/docker.sock'
export const MAX_GID = 4294967294
/** At most this many tenants get their own metrics label value (each multiplies the series). */
export const MAX_METRICS_TENANTS = 100
/** Smallest rotation size: a file must hold its chain.head, a record and its chain.end. */
const AUDIT_MIN_ROTATE_BYTES = 4096

/**
 * X.509 subject attribute names a client certificate mapping may use, as Node names
 * them (OpenSSL short names).
 */
export const X509_SUBJECT_ATTRIBUTES = [
  'CN', 'O', 'OU', 'C', 'ST', 'L', 'street', 'postalCode', 'DC', 'UID', 'emailAddress', 'serialNumber',
  'title', 'GN', 'SN', 'initials', 'pseudonym', 'name', 'description', 'dnQualifier', 'generationQualifier',
  'businessCategory', 'organizationIdentifier',
]

/** Messages that resolve.ts repeats for values it reads further than the schema can. */
export const EXPECTED_MODE = 'an octal mode between "0000" and "0777" (e.g. "0660")'
export const EXPECTED_VERSION = 'a version of the form 1.NN (e.g. "1.24")'

function osUserName (): string {
  try {
    return userInfo().username
  } catch {
    // A uid without a passwd entry (some containers).
    return `uid:${process.getuid?.() ?? 'unknown'}`
  }
}

// ---------------------------------------------------------------------------
// Listeners and upstream

/** Parsed by parseHostPort in resolve.ts: a string here. */
const HostPort = Type.String({ expected: 'host:port', listHint: ' (quote IPv6 addresses in YAML: "[::1]:2375")' })

const TLS_HINT = 'TLS needs both cert and key'
/** TLS file locations; the files are read and checked in resolve.ts. */
export const Tls = Type.Object({
  cert: Text({ hint: TLS_HINT }),
  key: Text({ hint: TLS_HINT }),
  ca: Type.Optional(Text()),
}, closed())

export type TlsFile = Static<typeof Tls>

/** An identity pinned to a listener: every request through it acts as this identity. */
export const FixedIdentity = Type.Object({
  subject: Text(),
  tenant: Type.Optional(Text()),
  roles: Type.Array(Text(), { default: [] }),
}, closed())

const GROUP = 'a group name or a gid between 0 and 4294967294'

/** The label prefix whose `role` / `roles` labels give a calling container its roles. */
export const CONTAINER_LABEL_PREFIX_DEFAULT = 'io.portcullis.'
const LABEL_PREFIX = 'a label prefix: letters, digits, dots, dashes and underscores, ending with a dot or a dash (e.g. io.portcullis.)'

/**
 * `containerIdentity` on a listener: the calling container is the identity
 * (src/gateway/callers.ts). On TCP, the peer's address names it (through the engine's
 * list of containers, kept by its events); on a unix socket, the peer's process (its
 * pid, from SO_PEERCRED, then its cgroup). Its roles are the labels
 * `<labelPrefix>role` and `<labelPrefix>roles`. Callers that are no single container
 * the engine knows get `default` (absent: the listener's `anonymous`, else 401).
 */
export const ContainerIdentity = Type.Object({
  labelPrefix: Type.String({
    default: CONTAINER_LABEL_PREFIX_DEFAULT,
    pattern: '^[A-Za-z0-9][A-Za-z0-9._-]*[.-]$',
    maxLength: 200,
    expected: LABEL_PREFIX,
    messages: { pattern: `expected ${LABEL_PREFIX}, got {got}` },
  }),
  default: Type.Optional(FixedIdentity),
}, closed())

/** A listener as written; exactly one of unix and tcp (checked in resolve.ts). */
export const Listener = Type.Object({
  unix: Type.Optional(Text()),
  tcp: Type.Optional(HostPort),
  /** A socket passed by systemd socket activation, by its name (LISTEN_FDNAMES; activation.ts). */
  systemd: Type.Optional(Text()),
  name: Type.Optional(Text({ pattern: PRINTABLE, messages: { pattern: 'must not contain control characters' } })),
  /** "0660", "660", "0o660", or a number; a YAML 0660 is read as written (resolve.ts). */
  mode: Type.Optional(Type.Union([Type.String(), Type.Integer()], { expected: EXPECTED_MODE })),
  group: Type.Optional(Type.Union([Text(), Type.Integer({ minimum: 0, maximum: MAX_GID, expected: GROUP })], { expected: GROUP })),
  tls: Type.Optional(Tls),
  identity: Type.Optional(FixedIdentity),
  anonymous: Type.Optional(Type.Boolean()),
  /** The calling container is the identity (ContainerIdentity). */
  containerIdentity: Type.Optional(ContainerIdentity),
}, closed())

/**
 * The listeners used when the configuration names none. The unix socket is created
 * owner-only (0600), as the engine protects its own socket, and whoever can connect
 * to it acts as the user running the gateway, with role admin. The TCP port requires
 * a bearer token: without auth.jwt it refuses every request (401).
 */
export const DEFAULT_LISTENERS: Array<Static<typeof Listener>> = [
  { unix: './portcullis.sock', mode: '0600', identity: { subject: osUserName(), roles: ['admin'] } },
  { tcp: '127.0.0.1:2375' },
]

/**
 * The Docker daemon to forward to: `unix:///abs/path`, `tcp://host:port` (TLS with a
 * `tls` block), `http://` (no TLS) or `https://` (tls required); see resolve.ts.
 */
export const Upstream = Type.Union([
  Type.String(),
  Type.Object({ url: Text(), tls: Type.Optional(Tls) }, closed()),
], { expected: 'a URL (unix:///path or tcp://host:port) or a mapping with url and tls' })

export type UpstreamFile = Static<typeof Upstream>

// ---------------------------------------------------------------------------
// Sections

/** `1.NN`; unquoted YAML floats are read as written (`1.40`, not 1.4) in resolve.ts. */
const ApiVersion = (d: string) => Type.Union([Type.String(), Type.Number()], { default: d, expected: EXPECTED_VERSION })
export const Api = Type.Object({
  minVersion: ApiVersion(`1.${API_MINOR_MIN}`),
  maxVersion: ApiVersion(`1.${API_MINOR_MAX}`),
}, closed({ default: {} }))

/**
 * A request body held in memory costs about this many times its size (the bytes, the
 * decoded value, the canonical encoding): what limits.bufferedBytes charges for it.
 */
export const BODY_MEMORY_FACTOR = 4
/** limits.bufferedBytes when not given (or one largest body, when that is more). */
export const BUFFERED_BYTES_DEFAULT = 256 * 1024 * 1024

export const Limits = Type.Object({
  jsonBodyBytes: Whole({ minimum: 1, default: 1024 * 1024 }),
  /** The memory for request bodies held at once, all requests together (src/gateway/budget.ts). */
  bufferedBytes: Type.Optional(Whole({ minimum: 1 })),
}, closed({ default: {} }))

/**
 * `rates`: per role, how fast an identity may make requests of each operation class
 * (src/api/catalog/classes.ts: read, write, transfer), as a token bucket (`rate`
 * requests per second, up to `burst` at once), and how many hijacked sessions and long
 * streams it may hold open at once; src/gateway/rates.ts enforces them. `per` says
 * whose buckets they are: each tenant's (all its subjects together; an identity
 * without a tenant counts alone), each subject's, or both (a request takes from each).
 * A class or cap left out (or null) is not limited; a role written `{}` is unlimited.
 * The first role in `roles` an identity holds decides; identities with none of them
 * get `others`.
 */
export const RATE_KEYS = ['tenant', 'subject'] as const
/** Whose buckets a role's limits are when `per` is left out: each tenant's. */
export const RATE_PER_DEFAULT: ReadonlyArray<(typeof RATE_KEYS)[number]> = Object.freeze(['tenant'])
const RATE_HINT = 'a token bucket is { rate: requests per second, burst: requests at once }'
export const RateBucket = Type.Object({
  rate: Type.Number({ exclusiveMinimum: 0, maximum: 1e6, hint: RATE_HINT, messages: { exclusiveMinimum: 'must be more than 0 requests per second (leave the class out for no limit), got {got}' } }),
  burst: Whole({ minimum: 1, hint: RATE_HINT }),
}, closed({ expected: 'a mapping { rate, burst } or null (no limit)' }))
const Bucket = () => Type.Optional(Type.Union([RateBucket, Type.Null()], { expected: 'a mapping { rate, burst } or null (no limit)' }))
const Cap = () => Type.Optional(Type.Union([Whole({ minimum: 0 }), Type.Null()], { expected: 'a whole number (0: none at all) or null (no limit)' }))
export const RoleRates = Type.Object({
  /** Default RATE_PER_DEFAULT (applied where the limits are read: a default inside a union is not filled in). */
  per: Type.Optional(Type.Array(OneOf(RATE_KEYS), {
    minItems: 1,
    uniqueItems: true,
    expected: 'a list of tenant, subject',
    messages: { minItems: 'must name tenant, subject or both', uniqueItems: 'names a key more than once' },
  })),
  read: Bucket(),
  write: Bucket(),
  transfer: Bucket(),
  /** Hijacked sessions (attach, exec start, BuildKit) open at once. */
  sessions: Cap(),
  /** Long streams (logs -f, events, stats, pulls, wait) open at once. */
  streams: Cap(),
}, closed({ expected: 'a mapping of limits (per, read, write, transfer, sessions, streams)' }))
// eslint-disable-next-line @typescript-eslint/no-redeclare
export type RoleRates = Static<typeof RoleRates>

/**
 * The shipped limits of a tenant, and of identities with no listed role. Bursts leave a
 * person, a compose project or a CI job room: `docker rm -f $(docker ps -aq)` sends one
 * DELETE per container at once, `docker compose pull` one pull per service, `compose up`
 * (attached) one attach per service and `compose logs -f` one stream each, and the CLI
 * sends a `_ping` before every command. Sustained, a loop is held well below what one
 * engine serves all its tenants: dockerd answers thousands of small reads a second but
 * a few dozen creates, and a handful of pulls or builds saturate its disk and network.
 */
export const DEFAULT_TENANT_RATES: RoleRates = Object.freeze({
  per: ['tenant' as const],
  read: Object.freeze({ rate: 100, burst: 400 }),
  write: Object.freeze({ rate: 20, burst: 200 }),
  transfer: Object.freeze({ rate: 2, burst: 50 }),
  sessions: 64,
  streams: 128,
})

export const Rates = Type.Object({
  roles: Type.Record(Type.String({ minLength: 1 }), RoleRates, {
    default: { admin: {}, tenant: DEFAULT_TENANT_RATES },
    expected: 'a mapping of role names to their limits',
  }),
  others: Type.Union([RoleRates, Type.Null()], { default: DEFAULT_TENANT_RATES, expected: 'a mapping of limits or null (no limit)' }),
}, closed({ default: {} }))

export const JwtClaims = Type.Object({
  subject: Type.Optional(Text()),
  tenant: Type.Optional(Text()),
  roles: Type.Optional(Text()),
}, closed())

/** Exactly one of secret / publicKeyFile / jwksFile, fitting the algorithms (resolve.ts). */
export const Jwt = Type.Object({
  /** Shared HMAC secret (HS* algorithms only). */
  secret: Type.Optional(Text()),
  /** A PEM public key (RS/PS/ES algorithms only). */
  publicKeyFile: Type.Optional(Text()),
  /** A JSON Web Key Set file (RS/PS/ES algorithms only). */
  jwksFile: Type.Optional(Text()),
  issuer: Type.Optional(Text()),
  audience: Type.Optional(Type.Union([Text(), Type.Array(Text(), { minItems: 1 })])),
  algorithms: Type.Optional(Type.Array(Text(), { minItems: 1 })),
  clockToleranceSeconds: Type.Optional(Type.Number({ minimum: 0, maximum: 3600 })),
  /** Refuse tokens without an `exp` claim; default true (applied by the authenticator). */
  requireExp: Type.Optional(Type.Boolean()),
  claims: Type.Optional(JwtClaims),
}, closed())

const X509Attribute = Type.Unsafe<string>({
  type: 'string',
  enum: X509_SUBJECT_ATTRIBUTES,
  messages: { enum: `unknown X.509 subject attribute {got}, expected one of ${X509_SUBJECT_ATTRIBUTES.join(', ')}` },
})
const Attributes = (d: string[], o: Options = {}) => Type.Union([
  X509Attribute,
  Type.Array(X509Attribute, { uniqueItems: true, messages: { uniqueItems: 'names an attribute more than once' }, ...o }),
], { default: d, expected: 'an X.509 subject attribute name or a list of them' })

/**
 * `auth.mtls`: which subject attributes of a verified client certificate give the
 * identity. Each key takes an attribute name or a list of them; subject and tenant
 * use the first one present, roles the values of all. Keys left out keep their
 * defaults (subject CN, tenant O, roles none); tenant and roles may be `[]`.
 */
export const Mtls = Type.Object({
  subject: Attributes(['CN'], { minItems: 1 }),
  tenant: Attributes(['O']),
  roles: Attributes([]),
}, closed())

export const Auth = Type.Object({
  jwt: Type.Optional(Jwt),
  /** Absent: subject from CN, tenant from O, no roles. */
  mtls: Type.Optional(Mtls),
}, closed({ default: {} }))

/**
 * `policy.database`: the enforce set's Casbin lines in PostgreSQL (casbin-pg-adapter's
 * table `casbin`), changes propagated to every replica by LISTEN/NOTIFY on `channel`.
 * The url may hold a password (PGPASSWORD is the other way): it is never logged.
 */
export const PolicyDatabase = Type.Object({
  url: Text({ hint: 'a PostgreSQL connection string, e.g. postgres://portcullis@db.example:5432/portcullis' }),
  channel: Text({
    default: 'portcullis_policy',
    pattern: '^[a-z_][a-z0-9_]{0,62}$',
    messages: { pattern: 'must be a lower-case PostgreSQL identifier (letters, digits, _), got {got}' },
  }),
}, closed())

export const Policy = Type.Object({
  dir: Text({ default: './policies' }),
  database: Type.Optional(PolicyDatabase),
  /**
   * Run the fixtures of `dir`/tests against a reloaded policy (files or database) before
   * it replaces the running one; a failing fixture keeps the running policy.
   */
  reloadTests: Type.Boolean({ default: true }),
}, closed({ default: {} }))

/** `audit.transport`: an extra, asynchronous pino transport (syslog, collectors), not part of the durable record. */
export const AuditTransport = Type.Object({
  /** A module name or a path (./x.js resolves like every other path), as pino.transport() takes it. */
  target: Text({ hint: 'a pino transport module name (e.g. pino-syslog) or a path to one' }),
  options: Type.Optional(Type.Union([
    Type.Unsafe<{ [key: string]: unknown }>({ type: 'object' }),
    Type.Null(),
  ], { expected: 'a mapping (passed to the transport as its options)' })),
}, closed())

export const AuditRotate = Type.Object({
  maxBytes: Type.Optional(Whole({ minimum: AUDIT_MIN_ROTATE_BYTES })),
  maxAgeSeconds: Type.Optional(Whole({ minimum: 1 })),
}, closed())

/**
 * `audit`: the compliance audit trail (src/audit, docs/audit.md). fsync, onFailure,
 * redactEnv and rotate left out stay absent in Config: src/audit applies AUDIT_DEFAULTS.
 */
export const Audit = Type.Object({
  /** The hash-chained JSON-lines file; null turns it off. */
  file: Type.Union([Text(), Type.Null()], { default: './audit.jsonl' }),
  /** Also write every record, synchronously, to standard output. */
  stdout: Type.Boolean({ default: false }),
  level: OneOf(AUDIT_LEVELS, { default: 'metadata' }),
  transport: Type.Optional(Type.Union([AuditTransport, Type.Null()])),
  /** Rotate the file when it would exceed maxBytes, or when it is older than maxAgeSeconds. */
  rotate: Type.Optional(Type.Union([AuditRotate, Type.Null()])),
  /** fsync the file after every record. */
  fsync: Type.Optional(Type.Boolean()),
  /** `closed`: a record that cannot be written fails the request. `open`: it is dropped and counted. */
  onFailure: Type.Optional(OneOf(AUDIT_FAILURE_POLICIES)),
  /** Replace environment variable values in recorded bodies by "[REDACTED]". */
  redactEnv: Type.Optional(Type.Boolean()),
}, closed({ default: {} }))

/** Defaults src/audit applies to the audit keys a config leaves out (describeConfig shows them). No rotation unless configured. */
export const AUDIT_DEFAULTS = Object.freeze({
  fsync: false,
  onFailure: 'closed' as const,
  redactEnv: true,
  rotate: Object.freeze({ maxBytes: undefined as number | undefined, maxAgeSeconds: undefined as number | undefined }),
})

const TENANT_NAME = 'a tenant name must be at most 128 characters without control characters, got {got}'
export const Metrics = Type.Object({
  listen: Type.Optional(HostPort),
  /**
   * Tenants that get their own `tenant` label value; all other tenants are counted as
   * `other`, requests without a tenant as `none` (reserved: resolve.ts). Bounded so the
   * number of series stays bounded.
   */
  tenants: Type.Optional(Type.Array(
    Type.String({ minLength: 1, maxLength: 128, pattern: PRINTABLE, messages: { maxLength: TENANT_NAME, pattern: TENANT_NAME } }),
    { maxItems: MAX_METRICS_TENANTS, messages: { maxItems: `at most ${MAX_METRICS_TENANTS} tenants, got {count}` } }
  )),
}, closed({ default: {} }))

export const Registries = Type.Object({
  /** Registry credentials the gateway holds for tenants (credentials.ts). */
  credentials: Type.Optional(Text()),
}, closed({ default: {} }))

/**
 * `provenance`: the images each tenant built, committed or imported through the gateway
 * (src/gateway/tenancy/provenance.ts), a tenant's only build cache sources. `file: null`
 * keeps the record in memory: lost at a restart, which costs cache hits, never isolation.
 */
export const Provenance = Type.Object({
  file: Type.Union([Text(), Type.Null()], { default: './provenance.jsonl' }),
}, closed({ default: {} }))

export const Log = Type.Object({
  level: OneOf(LOG_LEVELS, { default: 'info' }),
}, closed({ default: {} }))

export const Shutdown = Type.Object({
  graceSeconds: Type.Number({ minimum: 0, maximum: 3600, default: 10 }),
}, closed({ default: {} }))

/**
 * Whether the gateway sees the engine's filesystem, so that it can follow the symlinks
 * in bind sources as the engine's runtime will: `shared` (it does), `remote` (it does
 * not: another machine, or a container with only the socket mounted), `auto` (shared
 * when the upstream is a unix socket and the engine's DockerRootDir is a directory here).
 */
export const HOST_PATH_MODES = ['auto', 'shared', 'remote'] as const

/**
 * Gateway processes sharing the listeners (node:cluster; src/gateway/cluster.ts): a
 * number, or `auto` for one per core. 1 is a single process, as without the key.
 */
export const MAX_WORKERS = 256
export const Workers = Type.Union([Type.Integer({ minimum: 1, maximum: MAX_WORKERS }), Type.Literal('auto')], { default: 1, expected: `a number of processes from 1 to ${MAX_WORKERS}, or auto (one per core)` })

/** The whole file. */
export const ConfigFile = Type.Object({
  listen: Type.Array(Listener, {
    minItems: 1,
    default: DEFAULT_LISTENERS,
    expected: 'a non-empty list of listeners',
    messages: { minItems: 'expected a non-empty list of listeners, got an empty list' },
  }),
  upstream: Type.Optional(Upstream),
  hostPaths: OneOf(HOST_PATH_MODES, { default: 'auto' }),
  api: Api,
  limits: Limits,
  rates: Rates,
  auth: Auth,
  policy: Policy,
  audit: Audit,
  metrics: Metrics,
  registries: Registries,
  provenance: Provenance,
  log: Log,
  shutdown: Shutdown,
  workers: Workers,
}, closed())

// The TypeBox idiom: a schema and its static type share one name.
// eslint-disable-next-line @typescript-eslint/no-redeclare
export type ConfigFile = Static<typeof ConfigFile>

/** The sections that count as an empty mapping when written with no value. */
export const SECTIONS = Object.entries(ConfigFile.properties as { [key: string]: TSchema })
  .filter(([, s]) => s.type === 'object')
  .map(([key]) => key)

/** auth.mtls when not given, and for the keys it leaves out: subject from CN, tenant from O, no roles. */
export function defaultMtlsMapping (): { subject: string[], tenant: string[], roles: string[] } {
  const d = (s: TSchema): string[] => [...(s.default as string[])]
  return { subject: d(Mtls.properties.subject), tenant: d(Mtls.properties.tenant), roles: d(Mtls.properties.roles) }
}
