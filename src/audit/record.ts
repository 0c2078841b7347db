/**
 * Audit records, schema version 1 (docs/audit.md).
 *
 * `buildRecord` turns an AuditInput — a small typed view of what the gateway knows
 * about a request or a hijacked session — into an AuditRecord. It is pure (no shared
 * state, no I/O) when the input gives its time and, for container/service/exec
 * creation, the policy's facts; otherwise it reads the clock, and derives the facts
 * again (which resolves host paths on this host's filesystem). The trail
 * (trail.ts) adds `seq`, `prev` and `hash` when it writes the record.
 *
 * Records are built field by field from the input, never by copying an object the
 * gateway holds: request headers (`Authorization`, `X-Registry-Auth`,
 * `X-Registry-Config`) have no field here and cannot leak into a record. Bodies are
 * redacted (redact.ts) before they are recorded, at level `request` only.
 */
import { decodeBody, encodeBody } from '../api/body/decode'
import { redactor } from './redact'

export const RECORD_VERSION = 1

/** What a record carries beyond its metadata: `facts` the policy's facts, `request` those and the body. */
export type AuditLevel = 'metadata' | 'facts' | 'request'
export type AuditEventKind = 'request' | 'session.start' | 'session.end'
export type ChainEventKind = 'chain.head' | 'chain.end'
export type AuthMethod = 'jwt' | 'mtls' | 'listener' | 'anonymous' | 'container'
export type DecisionKind = 'allow' | 'deny' | 'would_deny'

// ---------------------------------------------------------------------------
// Input: what the caller knows. Structurally compatible with the gateway's own
// types (Identity, Decision, AppliedRewrite, Facts), without depending on them.

/** The policy's facts the security summary shows (a subset of the policy's Facts). */
export interface AuditFacts {
  readonly privileged?: boolean
  readonly user?: string
  readonly hostPaths?: readonly string[]
  readonly hostVolume?: boolean
  readonly capAdd?: readonly string[]
  readonly capDrop?: readonly string[]
  readonly devices?: readonly string[]
  readonly deviceRequests?: readonly string[]
  readonly deviceCgroupRules?: readonly string[]
  readonly namespaces?: { readonly network: string, readonly pid: string, readonly ipc: string, readonly uts: string, readonly userns: string, readonly cgroupns: string }
  readonly securityOpt?: readonly string[]
  readonly sysctls?: readonly string[]
  readonly runtime?: string
  readonly cgroupParent?: string
  readonly volumesFrom?: readonly string[]
  readonly memory?: number
  readonly pidsLimit?: number
}

export interface AuditIdentityInput {
  readonly subject: string
  readonly tenant: string | null
  readonly roles: readonly string[]
  /** How the identity was established (Identity.method). */
  readonly method: AuthMethod
  /** The calling container's full id (method `container`). */
  readonly container?: string
  readonly certFingerprint?: string
  readonly tokenId?: string
}

export interface AuditTargetInput {
  /** Operation id as the Engine API spec names it (`ContainerCreate`). */
  readonly operation: string
  /** Resource kind from the catalog (`container`, `image`...). */
  readonly kind: string
  /** Name of the path parameter that names the resource (`id` or `name`), if any. */
  readonly param?: string
  /** That parameter's value. */
  readonly resource?: string
  /** `1.41` for `/v1.41/...`, null for unversioned paths. */
  readonly apiVersion: string | null
  /** The query string; used only to name created resources (`?name=web`, `?fromImage=busybox`). */
  readonly query?: URLSearchParams | Readonly<Record<string, string>>
}

export interface AuditRuleRefInput { readonly policy: string, readonly rule: string }

export interface AuditDecisionInput {
  readonly decision: DecisionKind
  readonly rule: AuditRuleRefInput | null
  readonly wouldDeny: readonly AuditRuleRefInput[]
  readonly policyVersion: string
}

export interface AuditRewriteInput {
  readonly id: string
  readonly patch: ReadonlyArray<{ readonly op: string, readonly path: string, readonly value: unknown }>
}

export interface AuditInput {
  readonly event: AuditEventKind
  /** When the event happened (request end, session established / closed); default: now. */
  readonly time?: Date | number
  /** Request id. */
  readonly req: string
  /** Listener name (`unix:/run/portcullis/docker.sock`). */
  readonly listener: string
  /** Remote address of the client. */
  readonly client: string
  /** HTTP method. */
  readonly method?: string | null
  /** Null or absent: not authenticated. */
  readonly identity?: AuditIdentityInput | null
  /** Null or absent: the request was refused before an operation was known. */
  readonly target?: AuditTargetInput | null
  readonly decision?: AuditDecisionInput | null
  readonly rewrites?: readonly AuditRewriteInput[] | null
  /**
   * The policy's facts for the request (Evaluation.input), so that the record shows
   * exactly what was judged; the caller works them out when the policy did not.
   */
  readonly facts?: AuditFacts | null
  /**
   * Levels `facts` and `request`: every fact the policy judged that is not its zero value
   * (false, '', 0, empty list, namespaces all ''), by the policy's own names. Derived
   * names, paths, numbers and option names only: none of the body's values that the
   * redaction hides (environment values, secret data, credentials) becomes a fact.
   * Null or absent: the policy did not judge the request (refused before it).
   */
  readonly policyFacts?: Readonly<Record<string, unknown>> | null
  /**
   * The request body: the decoded value (as evaluated, after rewrites), or the canonical
   * bytes forwarded (a Buffer, decoded here exactly like the engine would).
   */
  readonly body?: unknown
  /** The exec command, when not derivable from the body (ExecStart: the exec's Cmd). */
  readonly command?: readonly string[] | null
  readonly status?: number | null
  /** Bytes from the client (request body; session: client -> engine). */
  readonly bytesIn?: number
  /** Bytes to the client (response; session: engine -> client). */
  readonly bytesOut?: number
  /** Total duration in milliseconds (request: start to end; session.end: the session). */
  readonly durationMs?: number | null
  readonly upstreamMs?: number | null
  readonly error?: { readonly code: string, readonly message: string } | null
  /** Why the request ended early (`client-closed`, `shutdown`, `upstream-error`, `not-recorded`). */
  readonly aborted?: string | null
  /** For hijacked connections: `upgrade` (101 relayed) or `raw` (200 + raw stream). */
  readonly hijack?: 'upgrade' | 'raw' | null
  /** session.end: the exec's exit code when known. */
  readonly exitCode?: number | null
}

// ---------------------------------------------------------------------------
// Output: the record (before it is chained).

export interface AuditIdentity {
  subject: string
  tenant: string | null
  roles: string[]
  auth: AuthMethod
  container?: string
  certFingerprint?: string
  tokenId?: string
}

export interface AuditResource { kind: string, id?: string, name?: string }
export interface AuditRuleRef { policy: string, rule: string }
export interface AuditPatchOp { op: string, path: string, value: unknown }
export interface AuditRewrite { id: string, patch: AuditPatchOp[] }

/** The security-relevant facts of a container (or service) create, and of an exec create. */
export interface AuditSecurity {
  image?: string | null
  privileged: boolean
  user: string
  hostPaths?: string[]
  /** A local volume mounting host storage (bind, block device, overlay of host directories). */
  hostVolume?: boolean
  capAdd?: string[]
  capDrop?: string[]
  /** Number of host devices mapped in. */
  devices?: number
  deviceRequests?: string[]
  deviceCgroupRules?: number
  namespaces?: { network: string, pid: string, ipc: string, uts: string, userns: string, cgroupns: string }
  securityOpt?: string[]
  sysctls?: string[]
  runtime?: string
  cgroupParent?: string
  volumesFrom?: string[]
  memory?: number
  pidsLimit?: number
}

export interface AuditSession {
  mode: 'upgrade' | 'raw' | null
  /** session.end only: the exec's exit code, null when unknown. */
  exitCode?: number | null
}

export interface AuditRecord {
  v: 1
  /** RFC 3339, UTC, milliseconds. */
  time: string
  event: AuditEventKind
  req: string
  listener: string
  client: string
  method: string | null
  identity: AuditIdentity | null
  operation: string | null
  resource: AuditResource | null
  apiVersion: string | null
  decision: DecisionKind | null
  rule: AuditRuleRef | null
  wouldDeny: AuditRuleRef[]
  policyVersion: string | null
  rewrites: AuditRewrite[]
  status: number | null
  bytesIn: number
  bytesOut: number
  durationMs: number | null
  upstreamMs: number | null
  error: { code: string, message: string } | null
  aborted?: string
  session?: AuditSession
  command?: string[]
  security?: AuditSecurity
  /** Levels `facts` and `request`: the policy's facts that are not their zero value (AuditInput.policyFacts). */
  facts?: Record<string, unknown>
  /** Level `request` only: the decoded request body, redacted. */
  body?: unknown
}

/** What a chain.head / chain.end record says about the files around it. */
export interface ChainInfo {
  /** head: `new` (no previous chain known), `rotate`, `recover` (see problem); end: `size` or `age`. */
  reason: string
  /** head: the file this chain continues from (its name when it was closed); null for a new chain. */
  prevFile?: string | null
  /** head: the seq of that file's last record. */
  prevSeq?: number | null
  /** head, reason `recover`: what was wrong (logged loudly too). */
  problem?: string
  /** head: records dropped while the trail was failing (onFailure: open). */
  dropped?: number
  /** end: the name the file is being renamed to. */
  renamedTo?: string
  /** head: who writes this file. */
  writer?: { host: string, pid: number }
}

export interface ChainRecord {
  v: 1
  time: string
  event: ChainEventKind
  chain: ChainInfo
}

/** A record as stored: its place in the chain added. */
export type StoredRecord = (AuditRecord | ChainRecord) & { seq: number, prev: string | null, hash: string }

// ---------------------------------------------------------------------------

const round3 = (n: number): number => Math.round(n * 1000) / 1000

function isoTime (t: Date | number | undefined): string {
  const d = t === undefined ? new Date() : typeof t === 'number' ? new Date(t) : t
  return Number.isNaN(d.getTime()) ? new Date().toISOString() : d.toISOString()
}

function ruleRef (r: AuditRuleRefInput): AuditRuleRef {
  return { policy: String(r.policy), rule: String(r.rule) }
}

function identityOf (i: AuditIdentityInput | null | undefined): AuditIdentity | null {
  if (i === null || i === undefined) return null
  const out: AuditIdentity = { subject: i.subject, tenant: i.tenant ?? null, roles: [...i.roles], auth: i.method }
  if (i.container !== undefined) out.container = i.container
  if (i.certFingerprint !== undefined) out.certFingerprint = i.certFingerprint
  if (i.tokenId !== undefined) out.tokenId = i.tokenId
  return out
}

type Json = Record<string, unknown>
const obj = (v: unknown): Json => (v !== null && typeof v === 'object' && !Array.isArray(v) ? v as Json : {})
const str = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined)

function queryGet (q: AuditTargetInput['query'], key: string): string | undefined {
  if (q === undefined) return undefined
  if (q instanceof URLSearchParams) return q.get(key) ?? undefined
  return Object.prototype.hasOwnProperty.call(q, key) ? q[key] : undefined
}

function withTag (repo: string | undefined, tag: string | undefined): string | undefined {
  if (repo === undefined || repo === '') return undefined
  return tag ? `${repo}:${tag}` : repo
}

const SECURITY_OPERATIONS = new Set(['ContainerCreate', 'ServiceCreate', 'ServiceUpdate'])
const EXEC_CREATE = 'ContainerExec'
/** Creations whose record names the object from the body's `Name` (createdName). */
const NAMED_BY_BODY = new Set(['VolumeCreate', 'NetworkCreate', 'SecretCreate', 'ConfigCreate', 'ServiceCreate'])

/**
 * What a record for `operation` at `level` derives from the request body and from the
 * policy's facts: a long stream keeps only that for its last record and lets go of the
 * rest once it is under way. `body` is met by the canonical bytes (buildRecord decodes
 * them again); `facts` by the evaluation's facts.
 */
export function recordNeeds (operation: string | null, level: AuditLevel): { body: boolean, facts: boolean } {
  const op = operation ?? ''
  const facts = SECURITY_OPERATIONS.has(op) || op === EXEC_CREATE || level !== 'metadata'
  return { body: level === 'request' || SECURITY_OPERATIONS.has(op) || op === EXEC_CREATE || NAMED_BY_BODY.has(op), facts }
}

/** The name of a resource being created, where it is not in the path. */
function createdName (t: AuditTargetInput, body: unknown): string | undefined {
  const q = t.query
  switch (t.operation) {
    case 'ContainerCreate': return queryGet(q, 'name') || undefined
    case 'ImageCreate': return withTag(queryGet(q, 'fromImage'), queryGet(q, 'tag'))
    case 'ImageBuild': return queryGet(q, 't') || undefined
    case 'ImageCommit': return withTag(queryGet(q, 'repo'), queryGet(q, 'tag'))
    case 'PluginPull': return queryGet(q, 'name') || queryGet(q, 'remote') || undefined
    case 'PluginCreate': return queryGet(q, 'name') || undefined
    default: return NAMED_BY_BODY.has(t.operation) ? str(obj(body).Name) || undefined : undefined
  }
}

function resourceOf (t: AuditTargetInput, body: unknown): AuditResource {
  // ContainerExec's path parameter is the container the exec is created in.
  const out: AuditResource = { kind: t.operation === 'ContainerExec' ? 'container' : t.kind }
  if (t.resource !== undefined && t.resource !== '') {
    if (t.param === 'name') out.name = t.resource
    else out.id = t.resource
  }
  if (out.name === undefined) {
    const name = createdName(t, body)
    if (name !== undefined) out.name = name
  }
  return out
}

/** A Buffer is the canonical bytes: decode them as the engine would (exact numbers). */
function decodedBody (operation: string | null, body: unknown): unknown {
  if (!(body instanceof Uint8Array)) return body
  if (body.length === 0) return undefined
  try {
    return decodeBody(operation ?? '', Buffer.isBuffer(body) ? body : Buffer.from(body)).value
  } catch {
    return `[undecodable body: ${body.length} bytes]`
  }
}

function securityOf (op: string, f: AuditFacts, body: unknown): AuditSecurity {
  if (op === EXEC_CREATE) return { privileged: f.privileged === true, user: f.user ?? '' }
  const b = obj(body)
  const image = op === 'ContainerCreate' ? str(b.Image) : str(obj(obj(obj(b.TaskTemplate).ContainerSpec)).Image)
  const ns = f.namespaces
  return {
    image: image ?? null,
    privileged: f.privileged === true,
    user: f.user ?? '',
    hostPaths: [...(f.hostPaths ?? [])],
    hostVolume: f.hostVolume === true,
    capAdd: [...(f.capAdd ?? [])],
    capDrop: [...(f.capDrop ?? [])],
    devices: (f.devices ?? []).length,
    deviceRequests: [...(f.deviceRequests ?? [])],
    deviceCgroupRules: (f.deviceCgroupRules ?? []).length,
    namespaces: {
      network: ns?.network ?? '', pid: ns?.pid ?? '', ipc: ns?.ipc ?? '', uts: ns?.uts ?? '', userns: ns?.userns ?? '', cgroupns: ns?.cgroupns ?? '',
    },
    securityOpt: [...(f.securityOpt ?? [])],
    sysctls: [...(f.sysctls ?? [])],
    runtime: f.runtime ?? '',
    cgroupParent: f.cgroupParent ?? '',
    volumesFrom: [...(f.volumesFrom ?? [])],
    memory: Number(f.memory ?? 0),
    pidsLimit: Number(f.pidsLimit ?? 0),
  }
}

function commandOf (input: AuditInput, op: string | null, body: unknown): string[] | undefined {
  if (input.command !== undefined && input.command !== null) return input.command.map(String)
  if (op !== EXEC_CREATE) return undefined
  const cmd = obj(body).Cmd
  if (Array.isArray(cmd)) return cmd.map((c) => (typeof c === 'string' ? c : String(c)))
  if (typeof cmd === 'string') return [cmd]
  return []
}

export interface BuildOptions {
  /** Redact environment variable values (audit.redactEnv); default true. */
  readonly redactEnv?: boolean
}

/**
 * The record for one event. Level `metadata`: everything but the body and the facts;
 * `facts`: the policy's facts as well; `request`: those and the redacted, decoded request body.
 */
export function buildRecord (input: AuditInput, level: AuditLevel, options: BuildOptions = {}): AuditRecord {
  const redact = redactor({ redactEnv: options.redactEnv ?? true })
  const t = input.target ?? null
  const op = t?.operation ?? null
  const body = decodedBody(op, input.body)
  const d = input.decision ?? null
  const record: AuditRecord = {
    v: RECORD_VERSION,
    time: isoTime(input.time),
    event: input.event,
    req: input.req,
    listener: input.listener,
    client: input.client,
    method: input.method ?? null,
    identity: identityOf(input.identity),
    operation: op,
    resource: t === null ? null : resourceOf(t, body),
    apiVersion: t?.apiVersion ?? null,
    decision: d?.decision ?? null,
    rule: d?.rule ? ruleRef(d.rule) : null,
    wouldDeny: d ? d.wouldDeny.map(ruleRef) : [],
    policyVersion: d?.policyVersion ?? null,
    rewrites: (input.rewrites ?? []).map((r) => ({
      id: r.id,
      patch: r.patch.map((p) => ({ op: p.op, path: p.path, value: redact.atPointer(op, p.path, p.value) })),
    })),
    status: input.status ?? null,
    bytesIn: input.bytesIn ?? 0,
    bytesOut: input.bytesOut ?? 0,
    durationMs: input.durationMs === undefined || input.durationMs === null ? null : round3(input.durationMs),
    upstreamMs: input.upstreamMs === undefined || input.upstreamMs === null ? null : round3(input.upstreamMs),
    error: input.error ? { code: input.error.code, message: input.error.message } : null,
  }
  if (input.aborted) record.aborted = input.aborted
  if (input.event !== 'request' || input.hijack) {
    record.session = { mode: input.hijack ?? null }
    if (input.event === 'session.end') record.session.exitCode = input.exitCode ?? null
  }
  if (t !== null && op !== null) {
    const command = commandOf(input, op, body)
    if (command !== undefined) record.command = command
    if (SECURITY_OPERATIONS.has(op) || op === EXEC_CREATE) record.security = securityOf(op, input.facts ?? {}, body)
  }
  if (level !== 'metadata' && input.policyFacts) record.facts = { ...input.policyFacts }
  if (level === 'request' && body !== undefined) record.body = redact.body(op, body)
  return record
}

/**
 * The record as one line of JSON, `v` first, without a newline, without seq, prev
 * and hash (the trail adds them): exact numbers in bodies keep their digits
 * (JsonNumber), everything else is JSON.stringify.
 */
export function recordJson (record: AuditRecord | ChainRecord): string {
  const r = record as AuditRecord & Partial<Pick<StoredRecord, 'seq' | 'prev' | 'hash'>>
  // A record as buildRecord makes it (every request's): written as it is, without the
  // copy below (which cost as much as the JSON.stringify itself).
  if (!('body' in r) && !('seq' in r) && !('prev' in r) && !('hash' in r)) return JSON.stringify(r)
  // A stored record handed back gets its place in the chain anew, not twice.
  const { body, seq: _seq, prev: _prev, hash: _hash, ...rest } = r
  const text = JSON.stringify(rest)
  if (body === undefined) return text
  let encoded: string
  try {
    encoded = encodeBody(body).toString('utf8')
  } catch {
    encoded = JSON.stringify(body) ?? 'null'
  }
  return `${text.slice(0, -1)},"body":${encoded}}`
}
