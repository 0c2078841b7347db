/**
 * The gateway process: builds the pipeline's dependencies from a Config, opens the
 * listeners, and handles reload and shutdown.
 */
import pino, { type Logger } from 'pino'
import { Credentials, describeConfig, type Config, type JsonObject, type JsonValue } from '../config'
import { acceptedCredentials, createAuthenticator, type Authenticator } from './authenticate'
import { ContainerCallers, loadPeerCredentials } from './callers'
import { listen, type Listening } from './listeners'
import { Inflight, type GatewayDeps } from './pipeline'
import { BodyBudget } from './budget'
import { Turns } from './turns'
import { RateLimits } from './rates'
import { createUpstream, engineJson, type Upstream } from './upstream'
import { PolicyStore } from '../policy/store'
import { AuditTrail } from '../audit'
import { Metrics } from '../metrics'
import { startMetricsServer, type MetricsServer } from '../metrics/server'
import { Provenance, QuotaStore, Tenancy } from './tenancy'
import { policyAdmin } from './admin'
import { HostPaths } from './host-paths'
import { ClusterRates, ClusterReservations, joinCluster, workerAuditFile, workerNumber } from './cluster'
import type { SharedReservations } from './tenancy'

export interface Gateway {
  readonly listeners: readonly Listening[]
  readonly log: Logger
  readonly inflight: Inflight
  /** The engine connection (its pool, the connections of held streams). */
  readonly upstream: Upstream
  readonly policy: PolicyStore
  readonly metrics: Metrics
  readonly audit: AuditTrail
  /** Whether bind sources are walked here (config hostPaths; host-paths.ts). */
  readonly hostPaths: HostPaths
  /** The metrics listener, when `metrics.listen` is set. */
  readonly metricsServer: MetricsServer | null
  /** Apply what can change without a restart (log level, TLS certificates, keys, the policy); the rest is reported. */
  reload (next: Config): Promise<void>
  /** Stop accepting, close long streams and hijacked sessions, drain the rest. */
  close (): Promise<void>
}

export async function startGateway (config: Config, log: Logger = pino({ level: config.log.level })): Promise<Gateway> {
  // Reads the key material; replaced on reload (new keys, claims, mappings).
  let authenticator: Authenticator = createAuthenticator(config.auth)
  // Unix listeners whose callers are containers read their peers' pids with a native addon.
  if (config.listen.some((l) => l.kind === 'unix' && l.containerIdentity !== undefined)) await loadPeerCredentials()
  // A missing or invalid policy stops the start-up (PolicyError lists the problems).
  // With policy.database, an unreachable database stops it too (fail closed).
  const policy = await PolicyStore.open(config.policy.dir, log, config.policy.database, { reloadTests: config.policy.reloadTests })
  const metrics = new Metrics({ tenants: config.metrics.tenants ?? [], listeners: config.listen.map((l) => l.name), version: packageVersion() })
  metrics.setPolicyVersion(policy.current.version)
  policy.onReload = (r) => { metrics.policyReloaded(r.ok, r.version) }
  if (policy.database) {
    metrics.policyDatabaseUp(policy.database.where)
    policy.database.on('failure', () => { metrics.policyDatabaseFailed() })
    policy.database.on('up', () => { metrics.policyDatabaseUp() })
  }
  // The policy database also keeps every replica's quota reservations, so that quotas
  // hold across replicas (tenancy/quota-store.ts); it is opened like the policy, fail closed.
  let quotaStore: QuotaStore | null = null
  // A worker of several (config workers; cluster.ts): its own audit chain, the primary's
  // reservations and buckets, the primary's metrics port.
  const worker = workerNumber()
  if (config.policy.database) {
    try {
      quotaStore = await QuotaStore.open(config.policy.database, log)
    } catch (err) {
      await policy.close()
      throw err
    }
    metrics.quotaStoreOpened()
    quotaStore.onFailure = (stage) => { metrics.quotaStoreFailed(stage) }
  }
  // With audit.onFailure: closed, a trail that cannot be opened stops the start-up.
  const audit = AuditTrail.open(worker !== null && config.audit.file !== undefined ? { ...config.audit, file: workerAuditFile(config.audit.file, worker) } : config.audit, log)
  const reservations: SharedReservations | null = quotaStore ?? (worker !== null ? new ClusterReservations() : null)
  const upstream: Upstream = createUpstream(config.upstream)
  const inflight = new Inflight()
  // Whether bind sources can be walked here as the engine's runtime will walk them.
  const hostPaths = new HostPaths(config.hostPaths, config.upstream.kind === 'unix', upstream, log)
  await hostPaths.detect()
  const tenancy = new Tenancy(upstream, config.registries.credentials?.loaded ?? new Credentials(), log, reservations, () => { void hostPaths.detect() }, new Provenance(config.provenance.file))
  const budget = new BodyBudget(config.limits.bufferedBytes, config.limits.jsonBodyBytes, {
    held: (bytes) => { metrics.bodyMemory(bytes) },
    refused: (scope, tenant) => { metrics.bodyRefused(scope, tenant) },
  })
  // Listeners whose callers are containers: the engine's containers, followed by its events.
  const callers = config.listen.some((l) => l.containerIdentity !== undefined) ? new ContainerCallers(upstream, log) : undefined
  const stopCallers = callers?.start() ?? (() => {})
  const deps: GatewayDeps = { api: config.api, limits: config.limits, budget, turns: new Turns(), rates: worker !== null ? new ClusterRates(config.rates, (tenant, cls, limit) => { metrics.rateLimitRefused(tenant, cls, limit) }) : new RateLimits(config.rates, (tenant, cls, limit) => { metrics.rateLimitRefused(tenant, cls, limit) }), upstream, log, inflight, authenticate: (req, l, caller) => authenticator.authenticate(req, l, caller), ...(callers ? { callers } : {}), policy: () => policy.current, hostPaths: () => hostPaths.mode, metrics, audit, tenancy, admin: policyAdmin(policy) }
  const listeners: Listening[] = []
  try {
    for (const l of config.listen) listeners.push(await listen(l, deps))
  } catch (err) {
    await Promise.allSettled(listeners.map((l) => l.app.close()))
    stopCallers()
    tenancy.close()
    await upstream.close()
    await audit.close()
    await quotaStore?.close()
    await policy.close()
    throw err
  }
  policy.watch()
  if (worker !== null) joinCluster(metrics.promRegistry, (r) => { metrics.setReadiness(r) })
  const metricsServer = config.metrics.listen && worker === null
    ? await startMetricsServer(config.metrics.listen, metrics, async () => ({
      engine: await engineReachable(upstream),
      // With a policy database: not ready while it does not answer (the last good policy
      // stays in force, but changes made through other replicas do not arrive).
      policy: policy.sourceHealthy,
      ...(policy.database && !policy.database.healthy ? { detail: { policyDatabase: policy.database.lastError ?? `${policy.database.where} unreachable` } } : {}),
    }), log)
    : null
  log.info({ config: describeConfig(config), listening: listeners.map((l) => l.address), policyVersion: policy.current.version, hostPaths: hostPaths.describe(), ...(worker !== null ? { worker, pid: process.pid } : {}) }, 'portcullis started')
  for (const l of config.listen) {
    if (acceptedCredentials(config.auth, l).length === 0) log.warn({ listener: l.name }, 'this listener accepts no credentials and refuses every request (401): configure auth.jwt, or give it a client CA, an identity or anonymous: true')
  }

  let current = config
  return {
    listeners,
    log,
    inflight,
    upstream,
    policy,
    metrics,
    audit,
    hostPaths,
    metricsServer,
    async reload (next: Config): Promise<void> {
      await policy.reload()
      try {
        authenticator = createAuthenticator(next.auth)
      } catch (err) {
        log.error({ err: { message: (err as Error).message } }, 'reload: cannot load the authentication keys; keeping the running configuration')
        return
      }
      log.level = next.log.level
      tenancy.setCredentials(next.registries.credentials?.loaded ?? new Credentials())
      for (const l of listeners) {
        const now = next.listen.find((n) => n.name === l.config.name)
        if (now?.kind === 'tcp' && now.tls && 'setSecureContext' in l.server) {
          l.server.setSecureContext({ cert: now.tls.material.cert, key: now.tls.material.key, ...(now.tls.material.ca ? { ca: now.tls.material.ca } : {}) })
        }
      }
      // Each changed setting that this reload did not apply is named, with the value kept.
      const unapplied = needsRestart(describeConfig(current), describeConfig(next))
      for (const c of unapplied) log.warn({ setting: c.setting, kept: c.kept ?? null, wanted: c.wanted ?? null }, `${c.setting} changed: needs a restart, kept ${shown(c.kept)}`)
      const restartNeeded = [...new Set(unapplied.map((c) => c.setting.split(/[.[]/)[0]))]
      if (restartNeeded.length) log.warn({ keys: restartNeeded }, 'configuration changes that need a restart were not applied')
      current = { ...current, log: next.log, auth: next.auth, registries: next.registries }
      log.info({ applied: ['log', 'auth', 'registries', 'listener TLS certificates', 'policy'], ...(unapplied.length ? { needsRestart: unapplied.map((c) => c.setting) } : {}) }, 'configuration reloaded')
    },
    async close (): Promise<void> {
      log.info({ activeRequests: inflight.activeRequests, activeStreams: inflight.activeStreams }, 'shutting down')
      // Stop accepting (fastify answers 503 on kept-alive connections meanwhile), close
      // long streams and hijacked sessions at once, give the rest the grace period,
      // then cut whatever is still open.
      const closing = Promise.allSettled(listeners.map((l) => l.app.close()))
      await inflight.drain(config.shutdown.graceSeconds * 1000)
      for (const l of listeners) {
        l.server.closeAllConnections()
        l.destroyConnections()
      }
      await closing
      stopCallers()
      tenancy.close()
      await upstream.close()
      await metricsServer?.close()
      await audit.close()
      await quotaStore?.close()
      await policy.close()
      log.info('stopped')
    },
  }
}

/**
 * What a reload applies (see reload above): the log level, authentication, registry
 * credentials (and each TLS listener's certificates, re-read from the same files). Every
 * other setting is read once, at start: the listeners, the engine, metrics, audit, the
 * policy's place, limits, rates, the API window, shutdown.
 */
const RELOADABLE = new Set(['source', 'log', 'auth', 'registries'])

interface Unapplied { readonly setting: string, readonly kept: JsonValue | undefined, readonly wanted: JsonValue | undefined }

/** The settings (dotted paths into describeConfig) that differ and that a reload does not apply. */
function needsRestart (before: JsonObject, after: JsonObject): Unapplied[] {
  const out: Unapplied[] = []
  const walk = (a: JsonValue | undefined, b: JsonValue | undefined, at: string): void => {
    if (JSON.stringify(a) === JSON.stringify(b)) return
    if (isMapping(a) && isMapping(b)) {
      for (const k of new Set([...Object.keys(a), ...Object.keys(b)])) walk(a[k], b[k], `${at}.${k}`)
      return
    }
    out.push({ setting: at, kept: a, wanted: b })
  }
  for (const k of new Set([...Object.keys(before), ...Object.keys(after)])) {
    if (!RELOADABLE.has(k)) walk(before[k], after[k], k)
  }
  return out
}

const isMapping = (v: JsonValue | undefined): v is JsonObject => typeof v === 'object' && v !== null && !Array.isArray(v)

/** A kept value as the log message shows it: listeners by name, other values as written. */
function shown (v: JsonValue | undefined): string {
  if (v === undefined) return '(not set)'
  if (typeof v === 'string') return v
  if (Array.isArray(v) && v.every((x) => isMapping(x) && typeof x.name === 'string')) return v.map((x) => (x as JsonObject).name).join(', ')
  return JSON.stringify(v)
}

function packageVersion (): string {
  // dist/src/gateway/index.js -> package.json three levels up
  return (require('../../../package.json') as { version: string }).version
}

/** Readiness: the engine answers `/_ping` within two seconds. */
async function engineReachable (upstream: Upstream): Promise<boolean> {
  try {
    return (await engineJson(upstream, 'GET', '/_ping', undefined, 2000)).status === 200
  } catch {
    return false
  }
}
