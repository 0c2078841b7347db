/**
 * Prometheus metrics, in a private prom-client Registry (never the global one, so
 * several gateways in one process, as in the tests, do not share series).
 *
 * Every label value is bounded: operation ids come from the catalog, listener names
 * from the configuration, tenants only when listed in `metrics.tenants`, rule ids from
 * the policy files, and everything else from small fixed sets. Ids, paths, subjects,
 * image names and the like never become labels. docs/metrics.md lists every series.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client'
import { operations } from '../api/catalog/operations'
import { RATE_CLASSES, type RateClass } from '../api/catalog/classes'

export const PREFIX = 'portcullis_'

/** Histogram buckets in seconds: 0.5 ms to 60 s. */
export const DURATION_BUCKETS: readonly number[] = Object.freeze([
  0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
])

/** Label value for "not one of the configured values". */
export const OTHER = 'other'
/** Label value for "there is none" (no tenant, no operation, no decision, no status). */
export const NONE = 'none'

export const DECISIONS: readonly string[] = Object.freeze(['allow', 'deny', 'would_deny'])
export const UPSTREAM_ERROR_KINDS = Object.freeze(['unreachable', 'failed', 'timeout'] as const)
export const QUOTA_STORE_STAGES = Object.freeze(['admit', 'release', 'renew'] as const)
export type UpstreamErrorKind = (typeof UPSTREAM_ERROR_KINDS)[number]
export const READINESS_CHECKS = Object.freeze(['engine', 'policy'] as const)
/** Who was full when a request body was refused for memory: the gateway as a whole, or the identity's share. */
export const BUDGET_SCOPES = Object.freeze(['gateway', 'identity'] as const)
export type BudgetScope = (typeof BUDGET_SCOPES)[number]
/** Which rate limit refused a request (the classes are api/catalog/classes.ts's RATE_CLASSES). */
export const RATE_LIMITS = Object.freeze(['rate', 'sessions', 'streams'] as const)
export type RateLimitKind = (typeof RATE_LIMITS)[number]

const OPERATION_IDS: ReadonlySet<string> = new Set(operations.map((o) => o.id))

export interface MetricsOptions {
  /** Tenants that get their own label value (config `metrics.tenants`); all others are `other`. */
  readonly tenants: readonly string[]
  /** The configured listener names; any other name is `other`. */
  readonly listeners: readonly string[]
  /** The gateway's version (build_info). */
  readonly version: string
}

/** One finished request, as the pipeline saw it. */
export interface ObservedRequest {
  /** Operation id from the catalog; null (or an id the catalog does not know) when refused before routing. */
  readonly operation: string | null
  readonly listener: string
  /** The identity's tenant; null when there is none (anonymous, no tenant claim, refused before authentication). */
  readonly tenant: string | null
  /** `allow`, `deny` or `would_deny`; null when the policy was not consulted. */
  readonly decision: string | null
  /** HTTP status sent to the client (101 for a relayed upgrade); 0 when none was sent. */
  readonly status: number
  /** Whole request, as the gateway saw it. */
  readonly durationMs: number
  /** Until the engine answered, when the request was forwarded. */
  readonly upstreamMs?: number
  readonly bytesIn: number
  readonly bytesOut: number
  /** The rule that decided; for a denial, null means no rule matched (default deny). */
  readonly rule?: string | null
  /** Audit-mode rules that would have denied. */
  readonly wouldDeny?: readonly string[]
}

/** `1xx`..`5xx`, or `none` when no valid status was sent. */
export function statusClass (status: number): string {
  return Number.isInteger(status) && status >= 100 && status <= 599 ? `${Math.floor(status / 100)}xx` : NONE
}

function amount (n: number | undefined): number {
  return n !== undefined && Number.isFinite(n) && n > 0 ? n : 0
}

/** Call `f` once, however many times the returned function is called. */
function once (f: () => void): () => void {
  let done = false
  return () => {
    if (done) return
    done = true
    f()
  }
}

export const CALLER_RESULTS: readonly string[] = ['container', 'unknown']
export type CallerResult = 'container' | 'unknown'
export const CALLER_LOOKUPS: readonly string[] = ['cached', 'listed', 'waited', 'peer']
export type CallerLookupKind = 'cached' | 'listed' | 'waited' | 'peer'

/**
 * One combination of a finished request's labels: the label objects of its series,
 * made once, and its counts not yet handed to prom-client (which hashes the labels on
 * every inc: at scrape time, once per combination, instead of three times per request).
 */
interface RequestCell {
  readonly requests: { readonly operation: string, readonly tenant: string, readonly decision: string, readonly code: string }
  readonly duration: { readonly operation: string, readonly listener: string }
  readonly operation: { readonly operation: string }
  count: number
  bytesIn: number
  bytesOut: number
  pending: boolean
}

export class Metrics {
  /** Content-Type of the text `metrics()` returns. */
  readonly contentType: string

  private readonly registry = new Registry()
  private readonly tenants: ReadonlySet<string>
  private readonly listeners: ReadonlySet<string>
  private policyVersion: string | null = null

  private readonly requests: Counter<'operation' | 'tenant' | 'decision' | 'code'>
  private readonly requestDuration: Histogram<'operation' | 'listener'>
  private readonly upstreamDuration: Histogram<'operation'>
  private readonly requestBytes: Counter<'operation'>
  private readonly responseBytes: Counter<'operation'>
  private readonly activeStreams: Gauge
  private readonly activeSessions: Gauge<'listener'>
  private readonly denials: Counter<'rule'>
  private readonly wouldDenies: Counter<'rule'>
  private readonly policyReloads: Counter<'result'>
  private readonly policyInfo: Gauge<'version'>
  private readonly lastReloadOk: Gauge
  private readonly databaseFailures: Counter
  private readonly databaseUp: Gauge<'database'>
  private database = ''
  private readonly quotaStoreFailures: Counter<'stage'>
  private readonly auditRecords: Counter
  private readonly auditFailures: Counter
  private readonly upstreamErrors: Counter<'kind'>
  private readonly ready: Gauge<'check'>
  private readonly bodyBytesHeld: Gauge
  private readonly bodyRefusals: Counter<'scope' | 'tenant'>
  private readonly rateLimited: Counter<'tenant' | 'class' | 'limit'>
  private readonly callerLookups: Counter<'listener' | 'result' | 'lookup'>
  /** Every label combination seen (bounded as the labels are), and those with counts to hand over. */
  private readonly cells = new Map<string, RequestCell>()
  private pending: RequestCell[] = []
  private auditPending = 0

  constructor (opts: MetricsOptions) {
    this.tenants = new Set(opts.tenants.filter((t) => t !== OTHER && t !== NONE))
    this.listeners = new Set(opts.listeners.filter((l) => l !== OTHER))
    const registers = [this.registry]
    this.contentType = this.registry.contentType

    this.requests = new Counter({
      name: `${PREFIX}requests_total`,
      help: 'Requests handled, by operation, tenant, policy decision and status class.',
      labelNames: ['operation', 'tenant', 'decision', 'code'],
      registers,
      collect: () => { this.handOver() },
    })
    this.requestDuration = new Histogram({
      name: `${PREFIX}request_duration_seconds`,
      help: 'Time from accepting a request to its end, as the gateway saw it.',
      labelNames: ['operation', 'listener'],
      buckets: [...DURATION_BUCKETS],
      registers,
    })
    this.upstreamDuration = new Histogram({
      name: `${PREFIX}upstream_duration_seconds`,
      help: 'Time from forwarding a request to the engine until the engine answered (response headers).',
      labelNames: ['operation'],
      buckets: [...DURATION_BUCKETS],
      registers,
    })
    this.requestBytes = new Counter({
      name: `${PREFIX}request_bytes_total`,
      help: 'Request body bytes received from clients (for hijacked sessions, the bytes sent by the client).',
      labelNames: ['operation'],
      registers,
      collect: () => { this.handOver() },
    })
    this.responseBytes = new Counter({
      name: `${PREFIX}response_bytes_total`,
      help: 'Response body bytes sent to clients (for hijacked sessions, the bytes sent to the client).',
      labelNames: ['operation'],
      registers,
      collect: () => { this.handOver() },
    })
    this.activeStreams = new Gauge({
      name: `${PREFIX}active_streams`,
      help: 'Long-running streamed responses open now (logs -f, events, pulls, exports...).',
      registers,
    })
    this.activeSessions = new Gauge({
      name: `${PREFIX}active_hijacked_sessions`,
      help: 'Hijacked connections (attach, exec, BuildKit sessions) open now.',
      labelNames: ['listener'],
      registers,
    })
    this.denials = new Counter({
      name: `${PREFIX}denials_total`,
      help: 'Requests denied by the policy, by rule id (none: no rule matched, default deny).',
      labelNames: ['rule'],
      registers,
    })
    this.wouldDenies = new Counter({
      name: `${PREFIX}would_deny_total`,
      help: 'Requests an audit-mode rule would have denied, by rule id.',
      labelNames: ['rule'],
      registers,
    })
    this.policyReloads = new Counter({
      name: `${PREFIX}policy_reloads_total`,
      help: 'Policy reload attempts, by result (ok, error).',
      labelNames: ['result'],
      registers,
    })
    this.policyInfo = new Gauge({
      name: `${PREFIX}policy_info`,
      help: 'The policy version in force (always 1).',
      labelNames: ['version'],
      registers,
    })
    this.lastReloadOk = new Gauge({
      name: `${PREFIX}policy_last_reload_successful`,
      help: 'Whether the last policy reload attempt succeeded (1) or failed and the previous policy stayed in force (0); 1 before any reload.',
      registers,
    })
    this.lastReloadOk.set(1)
    this.databaseFailures = new Counter({
      name: `${PREFIX}policy_database_failures_total`,
      help: 'Failed reads, writes, notifications and health checks of the policy database (policy.database).',
      registers,
    })
    this.databaseUp = new Gauge({
      name: `${PREFIX}policy_database_up`,
      help: 'Whether the policy database (host:port/name) answered its last check (1) or not (0); absent without policy.database.',
      labelNames: ['database'],
      registers,
    })
    this.quotaStoreFailures = new Counter({
      name: `${PREFIX}quota_store_failures_total`,
      help: 'Failures of the shared quota store (policy.database), by stage: admit (a quota-limited request refused with 503), release, renew (reservations then expire on their own).',
      labelNames: ['stage'],
      registers,
    })
    this.auditRecords = new Counter({ name: `${PREFIX}audit_records_total`, help: 'Audit records written.', registers, collect: () => { this.handOver() } })
    this.auditFailures = new Counter({ name: `${PREFIX}audit_failures_total`, help: 'Audit records that could not be written.', registers })
    this.upstreamErrors = new Counter({
      name: `${PREFIX}upstream_errors_total`,
      help: 'Failures talking to the engine, by kind (unreachable, failed, timeout).',
      labelNames: ['kind'],
      registers,
    })
    this.ready = new Gauge({
      name: `${PREFIX}ready`,
      help: 'Readiness checks as of the last scrape or /readyz (1 passing, 0 failing), by check (engine, policy).',
      labelNames: ['check'],
      registers,
    })
    this.bodyBytesHeld = new Gauge({
      name: `${PREFIX}request_body_memory_bytes`,
      help: 'Memory charged now for request bodies being read, checked or forwarded (limits.bufferedBytes bounds it).',
      registers,
    })
    this.bodyRefusals = new Counter({
      name: `${PREFIX}request_body_refusals_total`,
      help: 'Requests refused because the memory for request bodies was full, by scope (gateway: 503, identity: its share, 429) and tenant.',
      labelNames: ['scope', 'tenant'],
      registers,
    })
    this.rateLimited = new Counter({
      name: `${PREFIX}rate_limited_total`,
      help: 'Requests refused (429) by a rate limit (rates), by tenant, operation class (read, write, transfer) and limit (rate; sessions or streams: too many open at once).',
      labelNames: ['tenant', 'class', 'limit'],
      registers,
    })
    this.callerLookups = new Counter({
      name: `${PREFIX}container_callers_total`,
      help: 'Requests on listeners with containerIdentity, by listener, result (container: a container named the identity; unknown: the listener\'s default) and how the caller was found (cached, listed: the engine asked, waited: asked again after a container start, peer: a unix socket\'s process).',
      labelNames: ['listener', 'result', 'lookup'],
      registers,
    })
    const build = new Gauge({
      name: `${PREFIX}build_info`,
      help: 'The gateway version and the Node.js version running it (always 1).',
      labelNames: ['version', 'node'],
      registers,
    })
    build.set({ version: opts.version, node: process.version }, 1)
    collectDefaultMetrics({ register: this.registry, prefix: PREFIX })

    // Series of the small fixed sets exist from the start, at 0, so that rate() and
    // increase() see their first increment.
    for (const result of ['ok', 'error']) this.policyReloads.inc({ result }, 0)
    for (const kind of UPSTREAM_ERROR_KINDS) this.upstreamErrors.inc({ kind }, 0)
    for (const listener of this.listeners) this.activeSessions.set({ listener }, 0)
    this.auditRecords.inc(0)
    this.auditFailures.inc(0)
    this.bodyBytesHeld.set(0)
  }

  /** The label value for an operation id: the id if the catalog knows it, else `none`. */
  operationLabel (id: string | null | undefined): string {
    return typeof id === 'string' && OPERATION_IDS.has(id) ? id : NONE
  }

  /** The label value for a tenant: listed in `metrics.tenants`, `other` if not, `none` if there is no tenant. */
  tenantLabel (tenant: string | null | undefined): string {
    if (tenant === null || tenant === undefined || tenant === '') return NONE
    return this.tenants.has(tenant) ? tenant : OTHER
  }

  /** The label value for a listener: its configured name, or `other`. */
  listenerLabel (name: string): string {
    return this.listeners.has(name) ? name : OTHER
  }

  observeRequest (r: ObservedRequest): void {
    const operation = this.operationLabel(r.operation)
    const decision = r.decision !== null && DECISIONS.includes(r.decision) ? r.decision : NONE
    const tenant = this.tenantLabel(r.tenant)
    const code = statusClass(r.status)
    const listener = this.listenerLabel(r.listener)
    const key = `${operation}\0${tenant}\0${decision}\0${code}\0${listener}`
    let cell = this.cells.get(key)
    if (cell === undefined) {
      cell = { requests: { operation, tenant, decision, code }, duration: { operation, listener }, operation: { operation }, count: 0, bytesIn: 0, bytesOut: 0, pending: false }
      this.cells.set(key, cell)
    }
    cell.count++
    cell.bytesIn += amount(r.bytesIn)
    cell.bytesOut += amount(r.bytesOut)
    if (!cell.pending) { cell.pending = true; this.pending.push(cell) }
    this.requestDuration.observe(cell.duration, amount(r.durationMs) / 1000)
    if (r.upstreamMs !== undefined && Number.isFinite(r.upstreamMs)) this.upstreamDuration.observe(cell.operation, amount(r.upstreamMs) / 1000)
    if (decision === 'deny') this.denials.inc({ rule: r.rule || NONE })
    if (r.wouldDeny !== undefined && r.wouldDeny.length > 0) for (const rule of new Set(r.wouldDeny)) if (rule) this.wouldDenies.inc({ rule })
  }

  /** The counts gathered since the last scrape, handed to their series (before any of them is read). */
  private handOver (): void {
    const cells = this.pending
    this.pending = []
    for (const cell of cells) {
      this.requests.inc(cell.requests, cell.count)
      this.requestBytes.inc(cell.operation, cell.bytesIn)
      this.responseBytes.inc(cell.operation, cell.bytesOut)
      cell.count = cell.bytesIn = cell.bytesOut = 0
      cell.pending = false
    }
    if (this.auditPending > 0) { this.auditRecords.inc(this.auditPending); this.auditPending = 0 }
  }

  /** A long stream began; call the returned function (once; later calls do nothing) when it ends. */
  streamOpened (): () => void {
    this.activeStreams.inc()
    return once(() => this.activeStreams.dec())
  }

  /** A hijacked session began on `listener`; call the returned function when it ends. */
  sessionOpened (listener: string): () => void {
    const labels = { listener: this.listenerLabel(listener) }
    this.activeSessions.inc(labels)
    return once(() => this.activeSessions.dec(labels))
  }

  /**
   * After a reload attempt (PolicyStore.onReload): counts the attempt and makes
   * `version` (the policy in force, the old one after a failed reload) the only
   * policy_info series.
   */
  policyReloaded (ok: boolean, version: string): void {
    this.policyReloads.inc({ result: ok ? 'ok' : 'error' })
    this.lastReloadOk.set(ok ? 1 : 0)
    this.setPolicyVersion(version)
  }

  /** Sets policy_info to `version` without counting a reload: call once at start-up. */
  setPolicyVersion (version: string): void {
    if (version === this.policyVersion) return
    if (this.policyVersion !== null) this.policyInfo.remove({ version: this.policyVersion })
    this.policyVersion = version
    this.policyInfo.set({ version }, 1)
  }

  /** A policy database operation failed: counted, and the database is down until a check succeeds. */
  policyDatabaseFailed (): void {
    this.databaseFailures.inc()
    this.databaseUp.set({ database: this.database }, 0)
  }

  /** The policy database `where` (host:port/name) answers; call once at start-up with its name. */
  policyDatabaseUp (where?: string): void {
    if (where !== undefined) this.database = where
    this.databaseFailures.inc(0)
    this.databaseUp.set({ database: this.database }, 1)
  }

  /** Series at 0 for every stage, with a quota store (call once at start-up). */
  quotaStoreOpened (): void {
    for (const stage of QUOTA_STORE_STAGES) this.quotaStoreFailures.inc({ stage }, 0)
  }

  /** The shared quota store failed at `stage` (admit, release, renew). */
  quotaStoreFailed (stage: string): void {
    this.quotaStoreFailures.inc({ stage: (QUOTA_STORE_STAGES as readonly string[]).includes(stage) ? stage : 'admit' })
  }

  auditWritten (): void { this.auditPending++ }
  auditFailed (): void { this.auditFailures.inc() }

  upstreamError (kind: UpstreamErrorKind): void {
    this.upstreamErrors.inc({ kind: (UPSTREAM_ERROR_KINDS as readonly string[]).includes(kind) ? kind : 'failed' })
  }

  /** The memory charged for request bodies now (src/gateway/budget.ts). */
  bodyMemory (bytes: number): void { this.bodyBytesHeld.set(amount(bytes)) }

  /** A request body refused because the gateway (`gateway`) or the identity's share (`identity`) was full. */
  bodyRefused (scope: BudgetScope, tenant: string | null): void {
    this.bodyRefusals.inc({ scope: BUDGET_SCOPES.includes(scope) ? scope : 'gateway', tenant: this.tenantLabel(tenant) })
  }

  /** A request refused by a rate limit: its tenant, its operation's class, and which limit (rate, sessions, streams). */
  rateLimitRefused (tenant: string | null, rateClass: RateClass, limit: RateLimitKind): void {
    this.rateLimited.inc({
      tenant: this.tenantLabel(tenant),
      class: RATE_CLASSES.includes(rateClass) ? rateClass : 'write',
      limit: RATE_LIMITS.includes(limit) ? limit : 'rate',
    })
  }

  /** A caller looked up on a listener with containerIdentity (gateway/callers.ts). */
  callerLookup (listener: string, result: CallerResult, lookup: CallerLookupKind): void {
    this.callerLookups.inc({
      listener: this.listenerLabel(listener),
      result: CALLER_RESULTS.includes(result) ? result : 'unknown',
      lookup: CALLER_LOOKUPS.includes(lookup) ? lookup : 'listed',
    })
  }

  /** Records the outcome of a readiness check (portcullis_ready). */
  setReadiness (r: { readonly engine: boolean, readonly policy: boolean }): void {
    for (const check of READINESS_CHECKS) this.ready.set({ check }, r[check] ? 1 : 0)
  }

  /** Every series in the Prometheus text format (`contentType`). */
  /** The registry itself, for the cluster primary to sum the workers' series (gateway/cluster.ts). */
  get promRegistry (): Registry {
    return this.registry
  }

  metrics (): Promise<string> {
    return this.registry.metrics()
  }
}
