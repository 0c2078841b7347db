/**
 * Turns the plain value parsed from a YAML config file into a Config,
 * collecting every problem instead of stopping at the first one.
 *
 * Conventions:
 *  - Every message starts with the key path it is about, e.g. `listen[2].tls.ca: ...`.
 *  - Unknown keys are errors at every level.
 *  - A top-level section (api, limits, auth, policy, audit, metrics, log,
 *    shutdown) written with no value (`auth:`) counts as an empty mapping, so
 *    all its keys take their defaults. Anywhere else null is a type error,
 *    except `audit.file: null`, which turns the audit file off.
 *  - Relative paths resolve against the directory holding the config file
 *    (or the working directory for the built-in defaults).
 */
import { loadCredentials } from '../gateway/tenancy/credentials';
import { BODY_MEMORY_FACTOR } from '../gateway/budget';
import { readFileSync, realpathSync } from 'node:fs';
import { createPublicKey, type KeyObject } from 'node:crypto';
import { homedir, userInfo } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { UNIX_PATH_MAX, addressKey, formatHostPort, parseHostPort, type HostPort } from './addresses';
import {
  checkCaBundle,
  errorCode,
  parseCertificate,
  parsePrivateKey,
  readFileOrProblem,
} from './files';
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
} from './jwt-keys';
import type {
  AuditConfig,
  AuditFailurePolicy,
  AuditLevel,
  AuditTransportConfig,
  Config,
  AuthConfig,
  FixedIdentity,
  JwtClaimsConfig,
  JwtConfig,
  ListenerConfig,
  LogLevel,
  MtlsMappingConfig,
  TlsFiles,
  TlsMaterial,
  UpstreamConfig,
  UpstreamSource,
} from './types';

/** Docker Engine API versions are `1.NN`; the gateway understands this window. */
export const API_MINOR_MIN = 24;
export const API_MINOR_MAX = 56;

export const DEFAULTS = {
  upstream: 'unix:///var/run/docker.sock',
  apiMinVersion: '1.24',
  apiMaxVersion: '1.56',
  jsonBodyBytes: 1024 * 1024,
  bufferedBytes: 256 * 1024 * 1024,
  policyDir: './policies',
  auditFile: './audit.jsonl',
  auditLevel: 'metadata' as AuditLevel,
  logLevel: 'info' as LogLevel,
  graceSeconds: 10,
} as const;

export const LOG_LEVELS: readonly LogLevel[] = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];
export const AUDIT_LEVELS: readonly AuditLevel[] = ['metadata', 'request'];
export { HMAC_ALGORITHMS, JWT_ALGORITHMS };

/**
 * The listeners used when the configuration names none. The unix socket is created
 * owner-only (0600), as the engine protects its own socket, and whoever can connect
 * to it acts as the user running the gateway, with role admin. The TCP port requires
 * a bearer token: without auth.jwt it refuses every request (401).
 */
export function defaultListeners(): Mapping[] {
  return [
    { unix: './portcullis.sock', mode: '0600', identity: { subject: osUserName(), roles: ['admin'] } },
    { tcp: '127.0.0.1:2375' },
  ];
}

function osUserName(): string {
  try {
    return userInfo().username;
  } catch {
    // A uid without a passwd entry (some containers).
    return `uid:${process.getuid?.() ?? 'unknown'}`;
  }
}

/**
 * X.509 subject attribute names a client certificate mapping may use, as Node names
 * them (OpenSSL short names).
 */
export const X509_SUBJECT_ATTRIBUTES: readonly string[] = [
  'CN', 'O', 'OU', 'C', 'ST', 'L', 'street', 'postalCode', 'DC', 'UID', 'emailAddress', 'serialNumber',
  'title', 'GN', 'SN', 'initials', 'pseudonym', 'name', 'description', 'dnQualifier', 'generationQualifier',
  'businessCategory', 'organizationIdentifier',
];

/** auth.mtls when not given, and for the keys it leaves out: subject from CN, tenant from O, no roles. */
export function defaultMtlsMapping(): MtlsMappingConfig {
  return { subject: ['CN'], tenant: ['O'], roles: [] };
}

const ROOT_KEYS = ['listen', 'upstream', 'api', 'limits', 'auth', 'policy', 'audit', 'metrics', 'log', 'shutdown', 'registries'];
const LISTENER_KEYS = ['unix', 'tcp', 'name', 'mode', 'group', 'tls', 'identity', 'anonymous'];
const TLS_KEYS = ['cert', 'key', 'ca'];
const IDENTITY_KEYS = ['subject', 'tenant', 'roles'];
const UPSTREAM_KEYS = ['url', 'tls'];
const JWT_KEY_SOURCES = ['secret', 'publicKeyFile', 'jwksFile'] as const;
const JWT_KEYS = [...JWT_KEY_SOURCES, 'issuer', 'audience', 'algorithms', 'clockToleranceSeconds', 'requireExp', 'claims'];
const CLAIMS_KEYS = ['subject', 'tenant', 'roles'];
const MTLS_KEYS = ['subject', 'tenant', 'roles'];

const MAX_GID = 4294967294;

type Mapping = { [key: string]: unknown };
type Key = string | number;

/** A key path such as `listen[2].tls.ca`. */
export class At {
  constructor(readonly keys: readonly Key[] = []) {}
  k(key: string): At {
    return new At([...this.keys, key]);
  }
  i(index: number): At {
    return new At([...this.keys, index]);
  }
  toString(): string {
    let out = '';
    for (const key of this.keys) {
      if (typeof key === 'number') out += `[${key}]`;
      else if (out === '' && /^--[a-z-]+$/.test(key)) out += key;
      else if (/^[A-Za-z_][A-Za-z0-9_-]*$/.test(key)) out += out === '' ? key : `.${key}`;
      else out += `[${JSON.stringify(key)}]`;
    }
    return out === '' ? '(root)' : out;
  }
}

export interface ValidateOptions {
  /** Directory relative paths are resolved against. */
  baseDir: string;
  /** The scalar text as written in the file at a key path, when known (used to read `0660` and `1.40` as written). */
  sourceOf?: (keys: readonly Key[]) => string | undefined;
  /** Group database used to resolve `group:` names; default /etc/group. */
  groupFile?: string;
  /** Where the engine is when not (only) in the file: see UpstreamOverrides. */
  upstream?: UpstreamOverrides;
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
  flag?: string;
  env?: { [key: string]: string | undefined };
  cwd?: string;
}

class Ctx {
  readonly problems: string[] = [];
  private groups: Map<string, number> | string | undefined;
  constructor(readonly opts: ValidateOptions) {}

  problem(at: At, message: string): void {
    this.problems.push(`${at}: ${message}`);
  }

  path(text: string): string {
    return resolve(this.opts.baseDir, text);
  }

  sourceOf(at: At): string | undefined {
    return this.opts.sourceOf?.(at.keys);
  }

  /** name -> gid from the group database, or a problem message if it cannot be read. */
  groupTable(): Map<string, number> | string {
    if (this.groups === undefined) {
      const file = this.opts.groupFile ?? '/etc/group';
      try {
        const table = new Map<string, number>();
        for (const line of readFileSync(file, 'utf8').split('\n')) {
          const [name, , gid] = line.split(':');
          if (name && gid && /^[0-9]+$/.test(gid) && !table.has(name)) table.set(name, Number(gid));
        }
        this.groups = table;
      } catch (err) {
        this.groups = `cannot read ${file} (${errorCode(err)})`;
      }
    }
    return this.groups;
  }
}

// ---------------------------------------------------------------------------
// Generic helpers

function isMapping(v: unknown): v is Mapping {
  return typeof v === 'object' && v !== null && !Array.isArray(v) && !Buffer.isBuffer(v);
}

function own(m: Mapping, key: string): unknown {
  return Object.prototype.hasOwnProperty.call(m, key) ? m[key] : undefined;
}

/** Short description of a value for "got ..." in messages. */
function shown(v: unknown): string {
  if (v === null || v === undefined) return 'nothing (null)';
  if (Array.isArray(v)) return 'a list';
  if (isMapping(v)) return 'a mapping';
  if (typeof v === 'string') return JSON.stringify(v.length > 80 ? `${v.slice(0, 77)}...` : v);
  if (typeof v === 'number' || typeof v === 'boolean') return `${typeof v} ${String(v)}`;
  return typeof v;
}

/** Checks that v is a mapping whose keys are all allowed; unknown keys are reported, known ones still returned. */
function mapping(ctx: Ctx, at: At, v: unknown, allowed: readonly string[]): Mapping | undefined {
  if (!isMapping(v)) {
    ctx.problem(at, `expected a mapping, got ${shown(v)}`);
    return undefined;
  }
  for (const key of Object.keys(v)) {
    if (!allowed.includes(key)) ctx.problem(at.k(key), 'unknown key');
  }
  return v;
}

/** A top-level section: absent or null means "all defaults". */
function section(ctx: Ctx, root: Mapping, key: string, allowed: readonly string[]): Mapping {
  const v = own(root, key);
  if (v === undefined || v === null) return {};
  return mapping(ctx, new At([key]), v, allowed) ?? {};
}

function str(ctx: Ctx, at: At, v: unknown): string | undefined {
  if (typeof v === 'string' && v.length > 0) return v;
  ctx.problem(at, typeof v === 'string' ? 'must not be empty' : `expected a string, got ${shown(v)}`);
  return undefined;
}

function optStr(ctx: Ctx, m: Mapping, at: At, key: string): string | undefined {
  const v = own(m, key);
  return v === undefined ? undefined : str(ctx, at.k(key), v);
}

function optBool(ctx: Ctx, m: Mapping, at: At, key: string): boolean | undefined {
  const v = own(m, key);
  if (v === undefined || typeof v === 'boolean') return v;
  ctx.problem(at.k(key), `expected true or false, got ${shown(v)}`);
  return undefined;
}

interface NumberRule {
  integer?: boolean;
  min: number;
  max?: number;
}

function num(ctx: Ctx, at: At, v: unknown, rule: NumberRule): number | undefined {
  if (typeof v !== 'number' || !Number.isFinite(v)) {
    ctx.problem(at, `expected a ${rule.integer ? 'whole number' : 'number'}, got ${shown(v)}`);
    return undefined;
  }
  if (rule.integer && !Number.isSafeInteger(v)) {
    ctx.problem(at, `expected a whole number, got ${v}`);
    return undefined;
  }
  if (v < rule.min || (rule.max !== undefined && v > rule.max)) {
    ctx.problem(at, rule.max === undefined ? `must be at least ${rule.min}, got ${v}` : `must be between ${rule.min} and ${rule.max}, got ${v}`);
    return undefined;
  }
  return v;
}

function oneOf<T extends string>(ctx: Ctx, at: At, v: unknown, allowed: readonly T[]): T | undefined {
  if (typeof v === 'string' && (allowed as readonly string[]).includes(v)) return v as T;
  ctx.problem(at, `expected one of ${allowed.join(', ')}, got ${shown(v)}`);
  return undefined;
}

function stringList(ctx: Ctx, at: At, v: unknown, opts: { nonEmpty: boolean }): string[] | undefined {
  if (!Array.isArray(v)) {
    ctx.problem(at, `expected a list of strings, got ${shown(v)}`);
    return undefined;
  }
  if (opts.nonEmpty && v.length === 0) {
    ctx.problem(at, 'must not be an empty list');
    return undefined;
  }
  const out: string[] = [];
  let ok = true;
  v.forEach((item: unknown, i) => {
    const s = str(ctx, at.i(i), item);
    if (s === undefined) ok = false;
    else out.push(s);
  });
  return ok ? out : undefined;
}

function hostPort(ctx: Ctx, at: At, v: unknown): HostPort | undefined {
  if (typeof v !== 'string') {
    const hint = Array.isArray(v) ? ' (quote IPv6 addresses in YAML: "[::1]:2375")' : '';
    ctx.problem(at, `expected host:port, got ${shown(v)}${hint}`);
    return undefined;
  }
  const parsed = parseHostPort(v);
  if (typeof parsed === 'string') {
    ctx.problem(at, parsed);
    return undefined;
  }
  return parsed;
}

/** Resolves a unix socket path and checks it fits in sun_path. */
function socketPath(ctx: Ctx, at: At, v: unknown): string | undefined {
  const text = str(ctx, at, v);
  if (text === undefined) return undefined;
  if (text.includes('\0')) {
    ctx.problem(at, 'socket path must not contain NUL bytes');
    return undefined;
  }
  const path = ctx.path(text);
  const bytes = Buffer.byteLength(path);
  if (bytes >= UNIX_PATH_MAX) {
    ctx.problem(at, `socket path must be shorter than ${UNIX_PATH_MAX} bytes, got ${bytes}: ${path}`);
    return undefined;
  }
  return path;
}

/** Resolves a path and reads the file it names. */
function fileContents(ctx: Ctx, at: At, v: unknown): { path: string; data: Buffer } | undefined {
  const text = str(ctx, at, v);
  if (text === undefined) return undefined;
  const path = ctx.path(text);
  const data = readFileOrProblem(path);
  if (typeof data === 'string') {
    ctx.problem(at, data);
    return undefined;
  }
  return { path, data };
}

// ---------------------------------------------------------------------------
// TLS

type LoadedTls = TlsFiles & { material: TlsMaterial };

function tls(ctx: Ctx, at: At, v: unknown): LoadedTls | undefined {
  const m = mapping(ctx, at, v, TLS_KEYS);
  if (m === undefined) return undefined;
  for (const key of ['cert', 'key']) {
    if (own(m, key) === undefined) ctx.problem(at.k(key), 'required: TLS needs both cert and key');
  }
  const cert = own(m, 'cert') === undefined ? undefined : fileContents(ctx, at.k('cert'), own(m, 'cert'));
  const key = own(m, 'key') === undefined ? undefined : fileContents(ctx, at.k('key'), own(m, 'key'));
  const ca = own(m, 'ca') === undefined ? undefined : fileContents(ctx, at.k('ca'), own(m, 'ca'));

  let ok = cert !== undefined && key !== undefined && (own(m, 'ca') === undefined || ca !== undefined);
  const x509 = cert && parseCertificate(cert.data);
  if (typeof x509 === 'string') {
    ctx.problem(at.k('cert'), `${x509}: ${cert?.path}`);
    ok = false;
  }
  const privateKey = key && parsePrivateKey(key.data);
  if (typeof privateKey === 'string') {
    ctx.problem(at.k('key'), `${privateKey}: ${key?.path}`);
    ok = false;
  }
  if (x509 && typeof x509 !== 'string' && privateKey && typeof privateKey !== 'string' && !x509.checkPrivateKey(privateKey)) {
    ctx.problem(at.k('key'), `does not match the certificate ${cert?.path}`);
    ok = false;
  }
  if (ca) {
    const caProblem = checkCaBundle(ca.data);
    if (caProblem !== null) {
      ctx.problem(at.k('ca'), `${caProblem}: ${ca.path}`);
      ok = false;
    }
  }
  if (!ok || !cert || !key) return undefined;
  const material: TlsMaterial = { cert: cert.data, key: key.data };
  const out: LoadedTls = { cert: cert.path, key: key.path, material };
  if (ca) {
    out.ca = ca.path;
    material.ca = ca.data;
  }
  return out;
}

// ---------------------------------------------------------------------------
// Listeners

function identity(ctx: Ctx, at: At, v: unknown): FixedIdentity | undefined {
  const m = mapping(ctx, at, v, IDENTITY_KEYS);
  if (m === undefined) return undefined;
  let ok = true;
  if (own(m, 'subject') === undefined) {
    ctx.problem(at.k('subject'), 'required');
    ok = false;
  }
  const subject = own(m, 'subject') === undefined ? undefined : str(ctx, at.k('subject'), own(m, 'subject'));
  const tenant = optStr(ctx, m, at, 'tenant');
  const rolesV = own(m, 'roles');
  const roles = rolesV === undefined ? [] : stringList(ctx, at.k('roles'), rolesV, { nonEmpty: false });
  if ((own(m, 'tenant') !== undefined && tenant === undefined) || roles === undefined || subject === undefined) ok = false;
  if (!ok || subject === undefined || roles === undefined) return undefined;
  const out: FixedIdentity = { subject, roles };
  if (tenant !== undefined) out.tenant = tenant;
  return out;
}

/**
 * Socket permission bits. Accepted: a string of octal digits ("0660", "660",
 * "0o660"), or a number. A plain YAML integer written with a leading zero
 * (`mode: 0660`) is read as octal, as chmod and YAML 1.1 would; YAML 1.2
 * would otherwise make it decimal 660. Other numbers are taken at face value
 * (`0o660` or 432).
 */
function fileMode(ctx: Ctx, at: At, v: unknown): number | undefined {
  let mode: number | undefined;
  if (typeof v === 'string') {
    const m = /^(?:0o)?([0-7]{1,4})$/i.exec(v);
    if (m?.[1] !== undefined) mode = parseInt(m[1], 8);
  } else if (typeof v === 'number' && Number.isInteger(v)) {
    const src = ctx.sourceOf(at);
    mode = src !== undefined && /^0[0-7]+$/.test(src) ? parseInt(src, 8) : v;
  }
  if (mode === undefined || mode < 0 || mode > 0o777) {
    ctx.problem(at, `expected an octal mode between "0000" and "0777" (e.g. "0660"), got ${shown(v)}`);
    return undefined;
  }
  return mode;
}

/** A group name (looked up in /etc/group) or a numeric gid. */
function group(ctx: Ctx, at: At, v: unknown): { group?: string; gid: number } | undefined {
  const numeric = typeof v === 'number' ? v : typeof v === 'string' && /^[0-9]+$/.test(v) ? Number(v) : undefined;
  if (numeric !== undefined) {
    if (!Number.isSafeInteger(numeric) || numeric < 0 || numeric > MAX_GID) {
      ctx.problem(at, `expected a group name or a gid between 0 and ${MAX_GID}, got ${shown(v)}`);
      return undefined;
    }
    const table = ctx.groupTable();
    if (typeof table !== 'string') {
      for (const [name, gid] of table) if (gid === numeric) return { group: name, gid };
    }
    return { gid: numeric };
  }
  const name = str(ctx, at, v);
  if (name === undefined) return undefined;
  const table = ctx.groupTable();
  if (typeof table === 'string') {
    ctx.problem(at, `${table}; cannot resolve group "${name}" (use a numeric gid)`);
    return undefined;
  }
  const gid = table.get(name);
  if (gid === undefined) {
    ctx.problem(at, `unknown group "${name}" (not found in ${ctx.opts.groupFile ?? '/etc/group'}; use a numeric gid)`);
    return undefined;
  }
  return { group: name, gid };
}

function listener(ctx: Ctx, at: At, v: unknown): ListenerConfig | undefined {
  const m = mapping(ctx, at, v, LISTENER_KEYS);
  if (m === undefined) return undefined;
  const hasUnix = own(m, 'unix') !== undefined;
  const hasTcp = own(m, 'tcp') !== undefined;
  if (hasUnix && hasTcp) ctx.problem(at, 'give exactly one of unix or tcp, not both');
  if (!hasUnix && !hasTcp) ctx.problem(at, 'missing unix: <socket path> or tcp: <host:port>');

  let ok = hasUnix !== hasTcp;
  const name = optStr(ctx, m, at, 'name');
  if (own(m, 'name') !== undefined && name === undefined) ok = false;
  if (name !== undefined && /[\u0000-\u001f\u007f]/.test(name)) {
    ctx.problem(at.k('name'), 'must not contain control characters');
    ok = false;
  }
  const idV = own(m, 'identity');
  const id = idV === undefined ? undefined : identity(ctx, at.k('identity'), idV);
  if (idV !== undefined && id === undefined) ok = false;
  const anonymous = optBool(ctx, m, at, 'anonymous');
  if (own(m, 'anonymous') !== undefined && anonymous === undefined) ok = false;
  if (idV !== undefined && anonymous === true) {
    ctx.problem(at.k('anonymous'), 'cannot be true on a listener that has a fixed identity');
    ok = false;
  }

  if (hasUnix) {
    const path = socketPath(ctx, at.k('unix'), own(m, 'unix'));
    const modeV = own(m, 'mode');
    const mode = modeV === undefined ? undefined : fileMode(ctx, at.k('mode'), modeV);
    const groupV = own(m, 'group');
    const grp = groupV === undefined ? undefined : group(ctx, at.k('group'), groupV);
    if (own(m, 'tls') !== undefined) {
      ctx.problem(at.k('tls'), 'only allowed on tcp listeners');
      ok = false;
    }
    if (!ok || path === undefined || (modeV !== undefined && mode === undefined) || (groupV !== undefined && grp === undefined)) {
      return undefined;
    }
    const out: ListenerConfig = { kind: 'unix', name: name ?? `unix:${path}`, path };
    if (mode !== undefined) out.mode = mode;
    if (grp?.group !== undefined) out.group = grp.group;
    if (grp !== undefined) out.gid = grp.gid;
    if (id !== undefined) out.identity = id;
    if (anonymous !== undefined) out.anonymous = anonymous;
    return out;
  }

  const addr = hasTcp ? hostPort(ctx, at.k('tcp'), own(m, 'tcp')) : undefined;
  for (const key of ['mode', 'group']) {
    if (own(m, key) !== undefined) {
      ctx.problem(at.k(key), 'only allowed on unix listeners');
      ok = false;
    }
  }
  const tlsV = own(m, 'tls');
  const t = tlsV === undefined ? undefined : tls(ctx, at.k('tls'), tlsV);
  if (!ok || addr === undefined || (tlsV !== undefined && t === undefined)) return undefined;
  const out: ListenerConfig = { kind: 'tcp', name: name ?? `tcp:${formatHostPort(addr)}`, host: addr.host, port: addr.port };
  if (t !== undefined) out.tls = t;
  if (id !== undefined) out.identity = id;
  if (anonymous !== undefined) out.anonymous = anonymous;
  return out;
}

function listeners(ctx: Ctx, root: Mapping): ListenerConfig[] {
  const at = new At(['listen']);
  let v = own(root, 'listen');
  if (v === undefined) v = defaultListeners();
  if (!Array.isArray(v) || v.length === 0) {
    ctx.problem(at, `expected a non-empty list of listeners, got ${Array.isArray(v) ? 'an empty list' : shown(v)}`);
    return [];
  }
  const out: ListenerConfig[] = [];
  const names = new Map<string, number>();
  const addresses = new Map<string, number>();
  v.forEach((entry: unknown, i) => {
    const l = listener(ctx, at.i(i), entry);
    if (l === undefined) return;
    // Several unnamed listeners may ask for port 0; their default names must still differ.
    if (l.kind === 'tcp' && l.port === 0 && own(entry as Mapping, 'name') === undefined) l.name = `${l.name}#${i}`;
    out.push(l);
    const first = names.get(l.name);
    if (first !== undefined) ctx.problem(at.i(i).k('name'), `duplicate listener name "${l.name}" (also used by listen[${first}])`);
    else names.set(l.name, i);
    // Port 0 asks the kernel for a free port, so two of them never clash.
    if (l.kind === 'tcp' && l.port === 0) return;
    const addr = l.kind === 'unix' ? `unix:${l.path}` : `tcp:${addressKey(l)}`;
    const firstAddr = addresses.get(addr);
    if (firstAddr !== undefined) {
      ctx.problem(at.i(i).k(l.kind), `duplicate address ${l.kind === 'unix' ? l.path : formatHostPort(l)} (also used by listen[${firstAddr}])`);
    } else addresses.set(addr, i);
  });
  return out;
}

// ---------------------------------------------------------------------------
// Upstream

/**
 * The Docker daemon to forward to. Accepted URL schemes:
 *  - `unix:///abs/path` (a relative path after `unix://` resolves like any other path);
 *  - `tcp://host:port`, plain TCP, or TLS when a `tls` block is given (long form);
 *  - `http://host:port`, the same as tcp:// without TLS; a `tls` block is an error;
 *  - `https://host:port`, the same as tcp:// but a `tls` block with a client
 *    cert and key is required (Docker's TLS mode authenticates clients).
 * The port is always required. `url` in the result is canonical: `unix://<abs path>`
 * or `tcp://host:port`, whichever scheme was written.
 */
function upstream(ctx: Ctx, root: Mapping): { config: UpstreamConfig; from: UpstreamSource } | undefined {
  const { at, value: v, from } = upstreamGiven(ctx, root);
  const config = upstreamConfig(ctx, at, v);
  return config === undefined ? undefined : { config, from };
}

/** A unix URL with a relative path, given on the command line or in the environment, is relative to the working directory. */
function fromCwd(url: string, cwd: string): string {
  const m = /^unix:\/\/(.*)$/is.exec(url);
  return m !== null && m[1] !== undefined && m[1] !== '' && !m[1].startsWith('/') ? `unix://${resolve(cwd, m[1])}` : url;
}

/** Which upstream applies (see UpstreamOverrides), and the key path its problems are reported at. */
function upstreamGiven(ctx: Ctx, root: Mapping): { at: At; value: unknown; from: UpstreamSource } {
  const o = ctx.opts.upstream ?? {};
  const cwd = o.cwd ?? process.cwd();
  if (o.flag !== undefined) return { at: new At(['--upstream']), value: fromCwd(o.flag, cwd), from: '--upstream' };
  const given = own(root, 'upstream');
  if (given !== undefined) return { at: new At(['upstream']), value: given, from: 'config' };
  const host = o.env?.['DOCKER_HOST'];
  if (host !== undefined && host !== '') {
    let url = fromCwd(host, cwd);
    // The docker CLI's defaults: tcp://host means port 2375, or 2376 with TLS.
    const tls = (o.env?.['DOCKER_TLS_VERIFY'] ?? '') !== '';
    if (/^tcp:\/\/(\[[^\]]*\]|[^:/[\]]+)\/?$/i.test(url)) url = `${url.replace(/\/$/, '')}:${tls ? 2376 : 2375}`;
    if (!tls) return { at: new At(['DOCKER_HOST']), value: url, from: 'DOCKER_HOST' };
    const certs = o.env?.['DOCKER_CERT_PATH'] || join(homedir(), '.docker');
    return { at: new At(['DOCKER_HOST']), value: { url, tls: { cert: join(certs, 'cert.pem'), key: join(certs, 'key.pem'), ca: join(certs, 'ca.pem') } }, from: 'DOCKER_HOST' };
  }
  return { at: new At(['upstream']), value: DEFAULTS.upstream, from: 'default' };
}

function upstreamConfig(ctx: Ctx, at: At, v: unknown): UpstreamConfig | undefined {
  let urlAt = at;
  let url: string | undefined;
  let tlsV: unknown;
  if (typeof v === 'string') {
    url = v;
  } else if (isMapping(v)) {
    const m = mapping(ctx, at, v, UPSTREAM_KEYS) ?? {};
    urlAt = at.k('url');
    if (own(m, 'url') === undefined) ctx.problem(urlAt, 'required');
    else url = str(ctx, urlAt, own(m, 'url'));
    tlsV = own(m, 'tls');
  } else {
    ctx.problem(at, `expected a URL (unix:///path or tcp://host:port) or a mapping with url and tls, got ${shown(v)}`);
    return undefined;
  }
  const t = tlsV === undefined ? undefined : tls(ctx, at.k('tls'), tlsV);
  if (url === undefined) return undefined;

  const m = /^([A-Za-z][A-Za-z0-9+.-]*):\/\/(.*)$/s.exec(url);
  if (m === null || m[1] === undefined || m[2] === undefined) {
    ctx.problem(urlAt, `expected unix:///path or tcp://host:port, got ${shown(url)}`);
    return undefined;
  }
  const scheme = m[1].toLowerCase();
  const rest = m[2];
  if (scheme === 'unix') {
    if (tlsV !== undefined) ctx.problem(at.k('tls'), 'only allowed with a tcp upstream');
    const path = socketPath(ctx, urlAt, rest);
    if (path === undefined || tlsV !== undefined) return undefined;
    return { kind: 'unix', path, url: `unix://${path}` };
  }
  if (scheme !== 'tcp' && scheme !== 'http' && scheme !== 'https') {
    ctx.problem(urlAt, `unsupported scheme "${scheme}://" in ${shown(url)}, expected unix:// or tcp:// (http:// and https:// are also accepted)`);
    return undefined;
  }
  let ok = true;
  if (scheme === 'https' && tlsV === undefined) {
    ctx.problem(at, 'https:// requires tls: { cert, key } (use the long form: { url, tls })');
    ok = false;
  }
  if (scheme === 'http' && tlsV !== undefined) {
    ctx.problem(at.k('tls'), 'not allowed with http:// (use tcp:// or https://)');
    ok = false;
  }
  const addr = hostPort(ctx, urlAt, rest.endsWith('/') ? rest.slice(0, -1) : rest);
  if (!ok || addr === undefined || (tlsV !== undefined && t === undefined)) return undefined;
  const out: UpstreamConfig = { kind: 'tcp', host: addr.host, port: addr.port, url: `tcp://${formatHostPort(addr)}` };
  if (t !== undefined) out.tls = t;
  return out;
}

// ---------------------------------------------------------------------------
// Other sections

/** `1.NN`; unquoted YAML floats are read as written (`1.40`, not 1.4). */
function apiVersion(ctx: Ctx, at: At, v: unknown): { text: string; minor: number } | undefined {
  let text: string | undefined;
  if (typeof v === 'string') text = v;
  else if (typeof v === 'number') text = ctx.sourceOf(at) ?? String(v);
  const m = text === undefined ? null : /^1\.([0-9]{2})$/.exec(text);
  if (text === undefined || m === null || m[1] === undefined) {
    ctx.problem(at, `expected a version of the form 1.NN (e.g. "1.24"), got ${shown(v)}`);
    return undefined;
  }
  const minor = Number(m[1]);
  if (minor < API_MINOR_MIN || minor > API_MINOR_MAX) {
    ctx.problem(at, `must be between 1.${API_MINOR_MIN} and 1.${API_MINOR_MAX}, got ${text}`);
    return undefined;
  }
  return { text, minor };
}

function api(ctx: Ctx, root: Mapping): Config['api'] {
  const at = new At(['api']);
  const m = section(ctx, root, 'api', ['minVersion', 'maxVersion']);
  const min = own(m, 'minVersion') === undefined ? { text: DEFAULTS.apiMinVersion, minor: API_MINOR_MIN } : apiVersion(ctx, at.k('minVersion'), own(m, 'minVersion'));
  const max = own(m, 'maxVersion') === undefined ? { text: DEFAULTS.apiMaxVersion, minor: API_MINOR_MAX } : apiVersion(ctx, at.k('maxVersion'), own(m, 'maxVersion'));
  if (min && max && min.minor > max.minor) {
    ctx.problem(at, `minVersion ${min.text} is greater than maxVersion ${max.text}`);
  }
  return { minVersion: min?.text ?? DEFAULTS.apiMinVersion, maxVersion: max?.text ?? DEFAULTS.apiMaxVersion };
}

function algorithmFamilyProblem(alg: string, source: (typeof JWT_KEY_SOURCES)[number], key: KeyObject | undefined): string | null {
  const hmac = HMAC_ALGORITHMS.includes(alg);
  if (source === 'secret') {
    return hmac ? null : `"${alg}" cannot be used with secret (a shared secret needs HS256, HS384 or HS512)`;
  }
  if (hmac) return `"${alg}" cannot be used with ${source} (HMAC with a public key lets anyone forge tokens)`;
  return key === undefined ? null : keyFitProblem(alg, key, source);
}

function jwt(ctx: Ctx, at: At, v: unknown): JwtConfig | undefined {
  const m = mapping(ctx, at, v, JWT_KEYS);
  if (m === undefined) return undefined;
  const out: JwtConfig = {};
  const sources = JWT_KEY_SOURCES.filter((k) => own(m, k) !== undefined);
  if (sources.length === 0) ctx.problem(at, 'exactly one of secret, publicKeyFile or jwksFile is required');
  if (sources.length > 1) ctx.problem(at, `exactly one of secret, publicKeyFile or jwksFile is allowed, got ${sources.join(' and ')}`);

  const secret = optStr(ctx, m, at, 'secret');
  if (secret !== undefined) out.secret = secret;
  let publicKey: KeyObject | undefined;
  if (own(m, 'publicKeyFile') !== undefined) {
    const f = fileContents(ctx, at.k('publicKeyFile'), own(m, 'publicKeyFile'));
    if (f !== undefined) {
      out.publicKeyFile = f.path;
      try {
        publicKey = createPublicKey(f.data);
        if (publicKey.asymmetricKeyType === undefined) throw new Error('not an asymmetric key');
      } catch (err) {
        publicKey = undefined;
        ctx.problem(at.k('publicKeyFile'), `not a valid public key (${errorCode(err)}): ${f.path}`);
      }
    }
  }
  let jwks: JwksKey[] | undefined;
  if (own(m, 'jwksFile') !== undefined) {
    const f = fileContents(ctx, at.k('jwksFile'), own(m, 'jwksFile'));
    if (f !== undefined) {
      out.jwksFile = f.path;
      const parsed = parseJwks(f.data);
      if (typeof parsed === 'string') ctx.problem(at.k('jwksFile'), `${parsed}: ${f.path}`);
      else jwks = parsed;
    }
  }
  const issuer = optStr(ctx, m, at, 'issuer');
  if (issuer !== undefined) out.issuer = issuer;

  const audV = own(m, 'audience');
  if (typeof audV === 'string' || audV === undefined) {
    const aud = optStr(ctx, m, at, 'audience');
    if (aud !== undefined) out.audience = aud;
  } else {
    const aud = stringList(ctx, at.k('audience'), audV, { nonEmpty: true });
    if (aud !== undefined) out.audience = aud;
  }

  const algV = own(m, 'algorithms');
  let algsOk = algV === undefined;
  if (algV !== undefined) {
    const algs = stringList(ctx, at.k('algorithms'), algV, { nonEmpty: true });
    if (algs !== undefined) {
      let ok = true;
      algs.forEach((alg, i) => {
        const aat = at.k('algorithms').i(i);
        if (alg.toLowerCase() === 'none') {
          ctx.problem(aat, '"none" is never allowed');
          ok = false;
        } else if (!JWT_ALGORITHMS.includes(alg)) {
          ctx.problem(aat, `unsupported algorithm "${alg}", expected one of ${JWT_ALGORITHMS.join(', ')}`);
          ok = false;
        } else if (sources.length === 1 && sources[0] !== undefined) {
          const problem = algorithmFamilyProblem(alg, sources[0], publicKey);
          if (problem !== null) {
            ctx.problem(aat, problem);
            ok = false;
          }
        }
      });
      if (ok) out.algorithms = algs;
      algsOk = ok;
    }
  }
  // The keys must be usable with the algorithms in force (given, or the defaults).
  if (algsOk && sources.length === 1) {
    const algs = out.algorithms ?? (out.secret !== undefined ? DEFAULT_SECRET_ALGORITHMS : DEFAULT_PUBLIC_KEY_ALGORITHMS);
    const given = out.algorithms !== undefined ? 'auth.jwt.algorithms' : 'the default algorithms';
    if (publicKey !== undefined && out.algorithms === undefined && fittingAlgorithms(algs, publicKey).length === 0) {
      ctx.problem(at.k('publicKeyFile'), `${given} (${algs.join(', ')}) do not fit the ${publicKey.asymmetricKeyType ?? 'unknown'} key; set auth.jwt.algorithms`);
    }
    if (jwks !== undefined && !jwks.some((k) => jwksKeyAlgorithms(k, algs).length > 0)) {
      ctx.problem(at.k('jwksFile'), `no key in the set can verify ${given} (${algs.join(', ')})${out.algorithms === undefined ? '; set auth.jwt.algorithms' : ''}`);
    }
  }

  const tolV = own(m, 'clockToleranceSeconds');
  if (tolV !== undefined) {
    const tol = num(ctx, at.k('clockToleranceSeconds'), tolV, { min: 0, max: 3600 });
    if (tol !== undefined) out.clockToleranceSeconds = tol;
  }
  const requireExp = optBool(ctx, m, at, 'requireExp');
  if (requireExp !== undefined) out.requireExp = requireExp;

  const claimsV = own(m, 'claims');
  if (claimsV !== undefined) {
    const cm = mapping(ctx, at.k('claims'), claimsV, CLAIMS_KEYS);
    if (cm !== undefined) {
      const claims: JwtClaimsConfig = {};
      for (const key of ['subject', 'tenant', 'roles'] as const) {
        const s = optStr(ctx, cm, at.k('claims'), key);
        if (s !== undefined) claims[key] = s;
      }
      out.claims = claims;
    }
  }
  return out;
}

/** An X.509 subject attribute name, or a list of them. */
function attributeNames(ctx: Ctx, at: At, v: unknown, opts: { nonEmpty: boolean }): string[] | undefined {
  const names = typeof v === 'string' ? [v] : stringList(ctx, at, v, opts);
  if (names === undefined) return undefined;
  let ok = true;
  names.forEach((name, i) => {
    if (!X509_SUBJECT_ATTRIBUTES.includes(name)) {
      ctx.problem(typeof v === 'string' ? at : at.i(i), `unknown X.509 subject attribute ${shown(name)}, expected one of ${X509_SUBJECT_ATTRIBUTES.join(', ')}`);
      ok = false;
    }
  });
  if (new Set(names).size !== names.length) {
    ctx.problem(at, 'names an attribute more than once');
    ok = false;
  }
  return ok ? names : undefined;
}

/**
 * `auth.mtls`: which subject attributes of a verified client certificate give the
 * identity. Each key takes an attribute name or a list of them; subject and tenant
 * use the first one present, roles the values of all. Keys left out keep their
 * defaults (subject CN, tenant O, roles none); tenant and roles may be `[]`.
 */
function mtls(ctx: Ctx, at: At, v: unknown): MtlsMappingConfig | undefined {
  const m = mapping(ctx, at, v, MTLS_KEYS);
  if (m === undefined) return undefined;
  const out = defaultMtlsMapping();
  let ok = true;
  for (const key of MTLS_KEYS as Array<keyof MtlsMappingConfig>) {
    const kv = own(m, key);
    if (kv === undefined) continue;
    const names = attributeNames(ctx, at.k(key), kv, { nonEmpty: key === 'subject' });
    if (names === undefined) ok = false;
    else out[key] = names;
  }
  return ok ? out : undefined;
}

function auth(ctx: Ctx, root: Mapping): AuthConfig {
  const at = new At(['auth']);
  const m = section(ctx, root, 'auth', ['jwt', 'mtls']);
  const out: AuthConfig = {};
  const jwtV = own(m, 'jwt');
  const j = jwtV === undefined ? undefined : jwt(ctx, at.k('jwt'), jwtV);
  if (j !== undefined) out.jwt = j;
  const mtlsV = own(m, 'mtls');
  const t = mtlsV === undefined ? undefined : mtls(ctx, at.k('mtls'), mtlsV);
  if (t !== undefined) out.mtls = t;
  return out;
}

// ---------------------------------------------------------------------------
// Audit

export const AUDIT_FAILURE_POLICIES: readonly AuditFailurePolicy[] = ['closed', 'open'];

/**
 * Defaults for the audit keys a config leaves out. They are applied by src/audit (and
 * shown by describeConfig), not written into Config, so `audit:` stays as written.
 * No rotation unless configured.
 */
export const AUDIT_DEFAULTS = Object.freeze({
  fsync: false,
  onFailure: 'closed' as AuditFailurePolicy,
  redactEnv: true,
  rotate: Object.freeze({ maxBytes: undefined as number | undefined, maxAgeSeconds: undefined as number | undefined }),
});

const AUDIT_KEYS = ['file', 'stdout', 'level', 'transport', 'rotate', 'fsync', 'onFailure', 'redactEnv'];
/** Smallest rotation size: a file must hold its chain.head, a record and its chain.end. */
const AUDIT_MIN_ROTATE_BYTES = 4096;

/** `audit.transport: { target, options }`, handed to pino.transport(). */
function auditTransport(ctx: Ctx, at: At, v: unknown): AuditTransportConfig | undefined {
  const m = mapping(ctx, at, v, ['target', 'options']);
  if (m === undefined) return undefined;
  const targetV = own(m, 'target');
  if (targetV === undefined) {
    ctx.problem(at.k('target'), 'required: a pino transport module name (e.g. pino-syslog) or a path to one');
    return undefined;
  }
  let target = str(ctx, at.k('target'), targetV);
  // A relative path (./x.js, ../x.js) is resolved like every other path; a bare name is a module.
  if (target !== undefined && /^\.\.?[\\/]/.test(target)) target = ctx.path(target);
  const optionsV = own(m, 'options');
  let options: { [key: string]: unknown } | undefined;
  if (optionsV !== undefined && optionsV !== null) {
    if (isMapping(optionsV)) options = optionsV;
    else ctx.problem(at.k('options'), `expected a mapping (passed to the transport as its options), got ${shown(optionsV)}`);
  }
  if (target === undefined || (optionsV !== undefined && optionsV !== null && options === undefined)) return undefined;
  return options === undefined ? { target } : { target, options };
}

function auditRotate(ctx: Ctx, at: At, v: unknown): AuditConfig['rotate'] {
  const m = mapping(ctx, at, v, ['maxBytes', 'maxAgeSeconds']);
  if (m === undefined) return undefined;
  const out: NonNullable<AuditConfig['rotate']> = {};
  const bytesV = own(m, 'maxBytes');
  if (bytesV !== undefined) {
    const n = num(ctx, at.k('maxBytes'), bytesV, { integer: true, min: AUDIT_MIN_ROTATE_BYTES });
    if (n !== undefined) out.maxBytes = n;
  }
  const ageV = own(m, 'maxAgeSeconds');
  if (ageV !== undefined) {
    const n = num(ctx, at.k('maxAgeSeconds'), ageV, { integer: true, min: 1 });
    if (n !== undefined) out.maxAgeSeconds = n;
  }
  return out;
}

/**
 * `audit`: file (default ./audit.jsonl; null turns it off), stdout, level, transport,
 * rotate.{maxBytes, maxAgeSeconds}, fsync, onFailure, redactEnv. Keys left out stay
 * absent (see AUDIT_DEFAULTS).
 */
function audit(ctx: Ctx, root: Mapping): Config['audit'] {
  const at = new At(['audit']);
  const m = section(ctx, root, 'audit', AUDIT_KEYS);
  const out: Config['audit'] = { level: DEFAULTS.auditLevel, stdout: false };
  const fileV = own(m, 'file');
  if (fileV === undefined) out.file = ctx.path(DEFAULTS.auditFile);
  else if (fileV !== null) {
    // null turns the audit file off.
    const f = str(ctx, at.k('file'), fileV);
    if (f !== undefined) out.file = ctx.path(f);
  }
  const stdout = optBool(ctx, m, at, 'stdout');
  if (stdout !== undefined) out.stdout = stdout;
  const levelV = own(m, 'level');
  if (levelV !== undefined) out.level = oneOf(ctx, at.k('level'), levelV, AUDIT_LEVELS) ?? DEFAULTS.auditLevel;
  const transportV = own(m, 'transport');
  if (transportV !== undefined && transportV !== null) {
    const tr = auditTransport(ctx, at.k('transport'), transportV);
    if (tr !== undefined) out.transport = tr;
  }
  const rotateV = own(m, 'rotate');
  if (rotateV !== undefined && rotateV !== null) {
    const r = auditRotate(ctx, at.k('rotate'), rotateV);
    if (r !== undefined) out.rotate = r;
  }
  const fsync = optBool(ctx, m, at, 'fsync');
  if (fsync !== undefined) out.fsync = fsync;
  const onFailureV = own(m, 'onFailure');
  if (onFailureV !== undefined) {
    const f = oneOf(ctx, at.k('onFailure'), onFailureV, AUDIT_FAILURE_POLICIES);
    if (f !== undefined) out.onFailure = f;
  }
  const redactEnv = optBool(ctx, m, at, 'redactEnv');
  if (redactEnv !== undefined) out.redactEnv = redactEnv;
  if (fileV === null && out.stdout !== true && out.transport !== undefined) {
    ctx.problem(at.k('transport'), 'is asynchronous and not a durable record on its own; with file: null set stdout: true as well');
  }
  return out;
}

// ---------------------------------------------------------------------------

/** A unix path with its directory's symlinks resolved, so that two spellings of one socket compare equal. */
function realSocketPath(path: string): string {
  try {
    return join(realpathSync(dirname(path)), basename(path));
  } catch {
    return path;
  }
}

const LOOPBACK = /^(127\.[0-9.]+|::1|localhost)$/i;

/** Whether the upstream is this listener: the same socket, or the same port on the same (or a wildcard) address. */
function sameAddress(l: ListenerConfig, up: UpstreamConfig): boolean {
  if (l.kind === 'unix' || up.kind === 'unix') return l.kind === 'unix' && up.kind === 'unix' && (l.path === up.path || realSocketPath(l.path) === realSocketPath(up.path));
  if (l.port === 0 || l.port !== up.port) return false;
  const host = (h: string): string => (h.toLowerCase() === 'localhost' ? '127.0.0.1' : h.toLowerCase());
  return host(l.host) === host(up.host) || ((l.host === '0.0.0.0' || l.host === '::') && LOOPBACK.test(up.host));
}

/** Validates a parsed config document; returns the Config (not yet frozen) and every problem found. */
export function validate(value: Mapping, source: string | null, opts: ValidateOptions): { config: Config; problems: string[] } {
  const ctx = new Ctx(opts);
  for (const key of Object.keys(value)) {
    if (!ROOT_KEYS.includes(key)) ctx.problem(new At([key]), 'unknown key');
  }

  const listen = listeners(ctx, value);
  const upstreamResult = upstream(ctx, value);
  const up = upstreamResult?.config;
  const apiWindow = api(ctx, value);

  const limitsM = section(ctx, value, 'limits', ['jsonBodyBytes', 'bufferedBytes']);
  const bodyV = own(limitsM, 'jsonBodyBytes');
  const jsonBodyBytes =
    bodyV === undefined ? DEFAULTS.jsonBodyBytes : num(ctx, new At(['limits', 'jsonBodyBytes']), bodyV, { integer: true, min: 1 }) ?? DEFAULTS.jsonBodyBytes;
  // The memory held for request bodies at once (src/gateway/budget.ts): a body counts
  // BODY_MEMORY_FACTOR times its size, and one of the largest must fit.
  const bufferedV = own(limitsM, 'bufferedBytes');
  const bufferedMin = jsonBodyBytes * BODY_MEMORY_FACTOR;
  const bufferedBytes =
    bufferedV === undefined ? Math.max(DEFAULTS.bufferedBytes, bufferedMin) : num(ctx, new At(['limits', 'bufferedBytes']), bufferedV, { integer: true, min: bufferedMin }) ?? DEFAULTS.bufferedBytes;

  const authCfg = auth(ctx, value);

  const policyM = section(ctx, value, 'policy', ['dir', 'database']);
  const dir = optStr(ctx, policyM, new At(['policy']), 'dir') ?? DEFAULTS.policyDir;
  const database = own(policyM, 'database') === undefined ? undefined : policyDatabase(ctx, new At(['policy', 'database']), own(policyM, 'database'));

  const auditCfg = audit(ctx, value);

  const metricsM = section(ctx, value, 'metrics', ['listen', 'tenants']);
  const metrics: Config['metrics'] = {};
  if (own(metricsM, 'listen') !== undefined) {
    const addr = hostPort(ctx, new At(['metrics', 'listen']), own(metricsM, 'listen'));
    if (addr !== undefined) metrics.listen = addr;
  }
  if (own(metricsM, 'tenants') !== undefined) {
    const tenants = metricsTenants(ctx, new At(['metrics', 'tenants']), own(metricsM, 'tenants'));
    if (tenants !== undefined) metrics.tenants = tenants;
  }

  // Registry credentials held for tenants: read (and its permissions checked) now.
  const registriesM = section(ctx, value, 'registries', ['credentials']);
  const credentialsFile = optStr(ctx, registriesM, new At(['registries']), 'credentials');
  const registries: Config['registries'] = { credentials: null };
  if (credentialsFile !== undefined) {
    const problems: string[] = [];
    const path = ctx.path(credentialsFile);
    registries.credentials = { file: path, loaded: loadCredentials(path, 'registries.credentials', problems) };
    for (const p of problems) ctx.problems.push(p);
  }

  const logM = section(ctx, value, 'log', ['level']);
  const levelV = own(logM, 'level');
  const logLevel = levelV === undefined ? DEFAULTS.logLevel : oneOf(ctx, new At(['log', 'level']), levelV, LOG_LEVELS) ?? DEFAULTS.logLevel;

  const shutdownM = section(ctx, value, 'shutdown', ['graceSeconds']);
  const graceV = own(shutdownM, 'graceSeconds');
  const graceSeconds =
    graceV === undefined ? DEFAULTS.graceSeconds : num(ctx, new At(['shutdown', 'graceSeconds']), graceV, { min: 0, max: 3600 }) ?? DEFAULTS.graceSeconds;

  // Cross-section checks.
  listen.forEach((l, i) => {
    if (up === undefined || upstreamResult === undefined || !sameAddress(l, up)) return;
    const from = upstreamResult.from;
    if (from === 'config' || from === 'default') {
      ctx.problem(new At(['listen', i, l.kind]), up.kind === 'unix'
        ? `is the upstream socket ${up.path}; the gateway cannot listen on the socket it forwards to`
        : `is the upstream ${up.url}; the gateway cannot listen on the address it forwards to`);
    } else {
      // Typically a shell that talks to docker through the gateway (DOCKER_HOST=unix://$PWD/portcullis.sock) starting another one.
      ctx.problem(new At([from]), `${up.url} is this gateway's own listener (listen[${i}]): it would forward every request to itself; ` +
        `give the engine's address with --upstream (e.g. --upstream ${DEFAULTS.upstream})${from === 'DOCKER_HOST' ? ' or unset DOCKER_HOST' : ''}`);
    }
  });
  listen.forEach((l, i) => {
    const m = metrics.listen;
    if (l.kind === 'tcp' && m !== undefined && m.port !== 0 && addressKey(m) === addressKey(l)) {
      ctx.problem(new At(['metrics', 'listen']), `${formatHostPort(m)} is also used by listen[${i}]`);
    }
  });

  const config: Config = {
    source,
    ...(upstreamResult !== undefined ? { upstreamFrom: upstreamResult.from } : {}),
    listen,
    // Only read when there are no problems, in which case upstream() succeeded.
    upstream: up ?? { kind: 'unix', path: '/var/run/docker.sock', url: 'unix:///var/run/docker.sock' },
    api: apiWindow,
    limits: { jsonBodyBytes, bufferedBytes },
    auth: authCfg,
    policy: { dir: ctx.path(dir), ...(database ? { database } : {}) },
    audit: auditCfg,
    metrics,
    registries,
    log: { level: logLevel },
    shutdown: { graceSeconds },
  };
  return { config, problems: ctx.problems };
}

// ---------------------------------------------------------------------------
// Policy database

export const DEFAULT_POLICY_CHANNEL = 'portcullis_policy';

/**
 * `policy.database: { url, channel }`. The url is a PostgreSQL connection string
 * (`postgres://user@host:5432/db`, `postgres://user@/db?host=/run/postgresql` for a
 * socket); the password may be in it or in PGPASSWORD. Messages name host, port and
 * database only.
 */
function policyDatabase(ctx: Ctx, at: At, v: unknown): Config['policy']['database'] {
  const m = mapping(ctx, at, v, ['url', 'channel']);
  if (m === undefined) return undefined;
  const urlV = own(m, 'url');
  if (urlV === undefined) {
    ctx.problem(at.k('url'), 'required: a PostgreSQL connection string, e.g. postgres://portcullis@db.example:5432/portcullis');
    return undefined;
  }
  const url = str(ctx, at.k('url'), urlV);
  const channelV = own(m, 'channel');
  let channel: string = DEFAULT_POLICY_CHANNEL;
  if (channelV !== undefined) {
    const c = str(ctx, at.k('channel'), channelV);
    if (c !== undefined && !/^[a-z_][a-z0-9_]{0,62}$/.test(c)) ctx.problem(at.k('channel'), `must be a lower-case PostgreSQL identifier (letters, digits, _), got ${shown(c)}`);
    else if (c !== undefined) channel = c;
  }
  if (url === undefined) return undefined;
  const where = databaseWhere(url);
  if (typeof where !== 'string') {
    ctx.problem(at.k('url'), where.problem);
    return undefined;
  }
  return { url, where, channel };
}

/** `host:port/database` of a connection string, or why it is not one (never repeating the string: it may hold a password). */
export function databaseWhere(url: string): string | { problem: string } {
  let u: URL;
  let noHost = false;
  try {
    u = new URL(url);
  } catch {
    // `postgres://user@/db?host=/socket/dir`: libpq and pg take an empty host, WHATWG URL does not.
    try {
      u = new URL(url.replace(/^(postgres(?:ql)?:\/\/[^/?#]*@)(?=[/?])/, '$1localhost'));
      noHost = true;
    } catch {
      return { problem: 'is not a URL (expected postgres://user@host:port/database)' };
    }
  }
  if (u.protocol !== 'postgres:' && u.protocol !== 'postgresql:') return { problem: `expected a postgres:// or postgresql:// URL, got scheme ${shown(u.protocol.replace(/:$/, ''))}` };
  const db = decodeURIComponent(u.pathname.replace(/^\//, ''));
  if (!db) return { problem: 'names no database (postgres://user@host:port/DATABASE)' };
  const socket = u.searchParams.get('host');
  const host = socket ?? (u.hostname && !noHost ? decodeURIComponent(u.hostname) : '');
  if (!host) return { problem: 'names no host (postgres://user@HOST:port/database, or ?host=/socket/dir)' };
  return `${host.startsWith('/') ? host : `${host}:${u.port || '5432'}`}/${db}`;
}

// ---------------------------------------------------------------------------
// Metrics

/** At most this many tenants get their own metrics label value (each multiplies the series). */
export const MAX_METRICS_TENANTS = 100;
/** Label values the metrics use for unlisted tenants and for requests without a tenant. */
const RESERVED_TENANT_LABELS = ['other', 'none'];

/**
 * `metrics.tenants`: tenant names that get their own `tenant` label value; all other
 * tenants are counted as `other`, requests without a tenant as `none`. Bounded so the
 * number of series stays bounded.
 */
function metricsTenants(ctx: Ctx, at: At, v: unknown): string[] | undefined {
  const names = stringList(ctx, at, v, { nonEmpty: false });
  if (names === undefined) return undefined;
  let ok = true;
  if (names.length > MAX_METRICS_TENANTS) {
    ctx.problem(at, `at most ${MAX_METRICS_TENANTS} tenants, got ${names.length}`);
    ok = false;
  }
  const seen = new Set<string>();
  names.forEach((name, i) => {
    if (RESERVED_TENANT_LABELS.includes(name)) {
      ctx.problem(at.i(i), `${shown(name)} is reserved (the label value for ${name === 'other' ? 'unlisted tenants' : 'requests without a tenant'})`);
      ok = false;
    } else if (name.length > 128 || /[\u0000-\u001f\u007f]/.test(name)) {
      ctx.problem(at.i(i), `a tenant name must be at most 128 characters without control characters, got ${shown(name)}`);
      ok = false;
    } else if (seen.has(name)) {
      ctx.problem(at.i(i), `${shown(name)} is listed more than once`);
      ok = false;
    }
    seen.add(name);
  });
  return ok ? names : undefined;
}
