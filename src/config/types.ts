/**
 * Public types of the Portcullis configuration module: the file's sections as
 * schema.ts declares them (Static<>), and the resolved forms of those that
 * resolve.ts turns into something else (listeners, upstream, TLS material,
 * host:port addresses, the policy database's place).
 *
 * Every path in a loaded Config is absolute. Every object in a Config returned
 * by this module is frozen (Buffers excepted: Node cannot freeze typed arrays).
 */
import type { Static } from '@sinclair/typebox'
import type { HostPort } from './addresses'
import type { Credentials } from './credentials'
import type * as S from './schema'

export type LogLevel = (typeof S.LOG_LEVELS)[number]
export type AuditLevel = (typeof S.AUDIT_LEVELS)[number]
export type AuditFailurePolicy = (typeof S.AUDIT_FAILURE_POLICIES)[number]

type AuditFile = Static<typeof S.Audit>
export interface AuditTransportConfig { target: string, options?: { [key: string]: unknown } }
/** `audit` as written, with `file` absolute (absent when `file: null`) and nulls left out. */
export type AuditConfig = Omit<AuditFile, 'file' | 'stdout' | 'transport' | 'rotate'> & {
  file?: string
  stdout?: boolean
  transport?: AuditTransportConfig
  rotate?: Static<typeof S.AuditRotate>
}

export type PolicyDatabaseConfig = Static<typeof S.PolicyDatabase> & {
  /** `host:port/database` (or the socket directory): what logs and errors name. */
  where: string
}
export interface PolicyConfig { dir: string, database?: PolicyDatabaseConfig, /** Run the fixtures against a reloaded policy before it is used (default true). */ reloadTests?: boolean }

/** TLS file locations; absolute paths after loading. */
export type TlsFiles = Static<typeof S.Tls>
/** The contents of the files named by TlsFiles, read at load time. */
export interface TlsMaterial { cert: Buffer, key: Buffer, ca?: Buffer }
export type LoadedTls = TlsFiles & { material: TlsMaterial }

export type FixedIdentity = Static<typeof S.FixedIdentity>
export type ContainerIdentityConfig = Static<typeof S.ContainerIdentity>

export type RatesConfig = Static<typeof S.Rates>
export type RoleRatesConfig = Static<typeof S.RoleRates>

interface ListenerCommon {
  name: string
  identity?: FixedIdentity
  anonymous?: boolean
  /** The calling container is the identity (gateway/callers.ts). */
  containerIdentity?: ContainerIdentityConfig
  /** A listening socket passed by systemd (socket activation): served as is, never bound or chmod-ed here. */
  activated?: { fd: number, name: string }
}
export interface UnixListenerConfig extends ListenerCommon {
  kind: 'unix'
  /** Absolute socket path, shorter than 108 bytes. */
  path: string
  /** Permission bits for the socket file, 0..0o777. */
  mode?: number
  /** Group name, when known (given by name, or a numeric gid found in /etc/group). */
  group?: string
  /** Numeric group id the socket should be chowned to. */
  gid?: number
}
export interface TcpListenerConfig extends ListenerCommon, HostPort {
  kind: 'tcp'
  /** When present, the listener speaks TLS; with `ca`, client certificates are required. */
  tls?: LoadedTls
}
export type ListenerConfig = UnixListenerConfig | TcpListenerConfig

export interface UnixUpstreamConfig {
  kind: 'unix'
  path: string
  /** Canonical form: `unix:///abs/path`. */
  url: string
}
export interface TcpUpstreamConfig extends HostPort {
  kind: 'tcp'
  /** Canonical form: `tcp://host:port` (IPv6 in brackets), whatever scheme was written. */
  url: string
  /** When present, connect with TLS presenting this client certificate. */
  tls?: LoadedTls
}
export type UpstreamConfig = UnixUpstreamConfig | TcpUpstreamConfig

/** Where the upstream came from: `portcullis serve --upstream`, the file, DOCKER_HOST, or the built-in default. */
export type UpstreamSource = '--upstream' | 'config' | 'DOCKER_HOST' | 'default'

export type JwtClaimsConfig = Static<typeof S.JwtClaims>
/** `auth.jwt` as written, with publicKeyFile and jwksFile absolute. */
export type JwtConfig = Static<typeof S.Jwt>
/**
 * Which X.509 subject attributes of a verified client certificate make the identity:
 * subject and tenant take the first one the certificate has, roles collects all.
 */
export interface MtlsMappingConfig { subject: string[], tenant: string[], roles: string[] }
export interface AuthConfig { jwt?: JwtConfig, mtls?: MtlsMappingConfig }

export interface Config {
  /** Absolute path of the config file, null for built-in defaults. */
  source: string | null
  /** Where `upstream` came from (see UpstreamOverrides in resolve.ts). */
  upstreamFrom?: UpstreamSource
  listen: ListenerConfig[]
  upstream: UpstreamConfig
  /** Whether the engine's filesystem is the gateway's (schema.ts HOST_PATH_MODES; `auto` is decided at start and on reconnect). */
  hostPaths: typeof S.HOST_PATH_MODES[number]
  api: { minVersion: string, maxVersion: string }
  limits: { jsonBodyBytes: number, bufferedBytes: number }
  /** Request rates and open sessions/streams per role (schema.ts Rates; src/gateway/rates.ts). */
  rates: RatesConfig
  auth: AuthConfig
  policy: PolicyConfig
  audit: AuditConfig
  /** `tenants`: the tenants that get their own `tenant` label value; every other tenant is counted as `other`. */
  metrics: { listen?: HostPort, tenants?: string[] }
  /** Registry credentials the gateway holds for tenants (never shown to them). */
  registries: { credentials: { file: string, loaded: Credentials } | null }
  /** The record of the images tenants made through the gateway: an absolute path, or null (in memory). */
  provenance: { file: string | null }
  log: Static<typeof S.Log>
  shutdown: Static<typeof S.Shutdown>
  /** Gateway processes sharing the listeners (`auto` resolved to the number of cores); 1 is a single process. */
  workers: number
}

/** A JSON-safe value (what describeConfig returns). */
export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue }
export type JsonObject = { [key: string]: JsonValue }
