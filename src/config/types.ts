import type { Credentials } from '../gateway/tenancy/credentials';
/**
 * Public types of the Portcullis configuration module.
 *
 * Every path in a loaded Config is absolute. Every object in a Config returned
 * by this module is frozen (Buffers excepted: Node cannot freeze typed arrays).
 */

export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
export type AuditLevel = 'metadata' | 'request';
export type AuditFailurePolicy = 'closed' | 'open';

/**
 * `audit`: the compliance audit trail (src/audit, docs/audit.md). Keys left out of the
 * file stay absent here; src/audit applies AUDIT_DEFAULTS (fsync false, onFailure
 * closed, redactEnv true, no rotation).
 */
export interface AuditConfig {
  /** Absolute path of the hash-chained JSON-lines file; absent when `file: null`. */
  file?: string;
  /** Also write every record, synchronously, to standard output. */
  stdout?: boolean;
  level: AuditLevel;
  /** An extra, asynchronous pino transport (syslog, collectors): not part of the durable record. */
  transport?: AuditTransportConfig;
  /** Rotate the file when it would exceed maxBytes, or when it is older than maxAgeSeconds. */
  rotate?: { maxBytes?: number; maxAgeSeconds?: number };
  /** fsync the file after every record. */
  fsync?: boolean;
  /** `closed` (default): a record that cannot be written fails the request. `open`: it is dropped and counted. */
  onFailure?: AuditFailurePolicy;
  /** Replace environment variable values in recorded bodies by "[REDACTED]"; default true. */
  redactEnv?: boolean;
}

export interface AuditTransportConfig {
  /** A module name or absolute path, as pino.transport() takes it. */
  target: string;
  options?: { [key: string]: unknown };
}

/**
 * `policy.database`: the enforce set's Casbin lines in PostgreSQL (casbin-pg-adapter's
 * table `casbin`), changes propagated to every replica by LISTEN/NOTIFY on `channel`
 * (casbin-pg-watcher).
 */
export interface PolicyDatabaseConfig {
  /** Connection string; may hold a password (PGPASSWORD is the other way): never logged. */
  url: string;
  /** `host:port/database` (or the socket directory): what logs and errors name. */
  where: string;
  channel: string;
}

export interface PolicyConfig {
  dir: string;
  database?: PolicyDatabaseConfig;
}

/** TLS file locations; absolute paths after loading. */
export interface TlsFiles {
  cert: string;
  key: string;
  ca?: string;
}

/** The contents of the files named by TlsFiles, read at load time. */
export interface TlsMaterial {
  cert: Buffer;
  key: Buffer;
  ca?: Buffer;
}

/** An identity pinned to a listener: every request through it acts as this identity. */
export interface FixedIdentity {
  subject: string;
  tenant?: string;
  roles: string[];
}

export interface UnixListenerConfig {
  kind: 'unix';
  name: string;
  /** Absolute socket path, shorter than 108 bytes. */
  path: string;
  /** Permission bits for the socket file, 0..0o777. */
  mode?: number;
  /** Group name, when known (given by name, or a numeric gid found in /etc/group). */
  group?: string;
  /** Numeric group id the socket should be chowned to. */
  gid?: number;
  identity?: FixedIdentity;
  anonymous?: boolean;
}

export interface TcpListenerConfig {
  kind: 'tcp';
  name: string;
  /** Host or IP address; IPv6 addresses are stored without brackets. */
  host: string;
  port: number;
  /** When present, the listener speaks TLS; with `ca`, client certificates are required. */
  tls?: TlsFiles & { material: TlsMaterial };
  identity?: FixedIdentity;
  anonymous?: boolean;
}

export type ListenerConfig = UnixListenerConfig | TcpListenerConfig;

export interface UnixUpstreamConfig {
  kind: 'unix';
  /** Absolute socket path. */
  path: string;
  /** Canonical form: `unix:///abs/path`. */
  url: string;
}

export interface TcpUpstreamConfig {
  kind: 'tcp';
  /** Host or IP address; IPv6 addresses are stored without brackets. */
  host: string;
  port: number;
  /** Canonical form: `tcp://host:port` (IPv6 in brackets), whatever scheme was written. */
  url: string;
  /** When present, connect with TLS presenting this client certificate. */
  tls?: TlsFiles & { material: TlsMaterial };
}

export type UpstreamConfig = UnixUpstreamConfig | TcpUpstreamConfig;

/** Where the upstream came from: `portcullis serve --upstream`, the file, DOCKER_HOST, or the built-in default. */
export type UpstreamSource = '--upstream' | 'config' | 'DOCKER_HOST' | 'default';

export interface JwtClaimsConfig {
  subject?: string;
  tenant?: string;
  roles?: string;
}

export interface JwtConfig {
  /** Shared HMAC secret (HS* algorithms only). Exactly one of secret / publicKeyFile / jwksFile. */
  secret?: string;
  /** Absolute path of a PEM public key (RS/PS/ES algorithms only). */
  publicKeyFile?: string;
  /** Absolute path of a JSON Web Key Set file (RS/PS/ES algorithms only). */
  jwksFile?: string;
  issuer?: string;
  audience?: string | string[];
  algorithms?: string[];
  clockToleranceSeconds?: number;
  /** Refuse tokens without an `exp` claim; default true. */
  requireExp?: boolean;
  claims?: JwtClaimsConfig;
}

/**
 * Which X.509 subject attributes of a verified client certificate make the identity.
 * Each lists attribute names (CN, O, OU, ...): subject and tenant take the first one
 * the certificate has, roles collects the values of all of them.
 */
export interface MtlsMappingConfig {
  subject: string[];
  tenant: string[];
  roles: string[];
}

export interface AuthConfig {
  jwt?: JwtConfig;
  /** Absent: subject from CN, tenant from O, no roles. */
  mtls?: MtlsMappingConfig;
}

export interface Config {
  /** Absolute path of the config file, null for built-in defaults. */
  source: string | null;
  /** Where `upstream` came from (see UpstreamOverrides in validate.ts). */
  upstreamFrom?: UpstreamSource;
  listen: ListenerConfig[];
  upstream: UpstreamConfig;
  api: { minVersion: string; maxVersion: string };
  /**
   * `jsonBodyBytes`: the largest JSON body read and inspected. `bufferedBytes`: the memory
   * for request bodies held at once, all requests together (a body counts four times its
   * size; one identity may hold a quarter of it); default 256 MiB.
   */
  limits: { jsonBodyBytes: number; bufferedBytes: number };
  auth: AuthConfig;
  policy: PolicyConfig;
  audit: AuditConfig;
  /** `tenants`: the tenants that get their own `tenant` label value; every other tenant is counted as `other`. */
  metrics: { listen?: { host: string; port: number }; tenants?: string[] };
  /** Registry credentials the gateway holds for tenants (never shown to them). */
  registries: { credentials: { file: string; loaded: Credentials } | null };
  log: { level: LogLevel };
  shutdown: { graceSeconds: number };
}

/** A JSON-safe value (what describeConfig returns). */
export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue };
export type JsonObject = { [key: string]: JsonValue };
