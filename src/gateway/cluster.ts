/**
 * Several gateway processes (config `workers`), with node:cluster: the primary binds the
 * listeners (unix sockets, TCP, TLS: Node's cluster hands each accepted connection to a
 * worker, round robin) and runs no pipeline itself. Each worker is a whole gateway
 * (gateway/index.ts) with three differences:
 *
 * - its audit trail is its own chain, `<audit.file>.w<N>` (N from 1; a restarted worker
 *   continues its predecessor's file): one writer per file (audit/trail.ts);
 *   `portcullis audit verify` and `audit report` take the set (audit/verify.ts groups it).
 * - quota reservations and rate-limit buckets are the primary's: a worker asks over IPC
 *   (ClusterReservations, ClusterRates), so that a quota or a rate holds exactly across
 *   workers. With `policy.database` the quota reservations are the database's instead.
 * - the metrics port is the primary's: it sums every worker's series (prom-client's
 *   AggregatorRegistry).
 *
 * Signals go to the primary: SIGHUP is passed to every worker (each reloads), SIGTERM and
 * SIGINT drain every worker, then the primary exits. A worker that dies is logged and
 * started again; the reservations and slots it held are let go.
 */
import cluster, { type Worker } from 'node:cluster'
import { randomUUID } from 'node:crypto'
import type { Logger } from 'pino'
import { AggregatorRegistry, type Registry } from 'prom-client'
import { operations, type Operation } from '../api/catalog/operations'
import type { RateClass } from '../api/catalog/classes'
import type { Config } from '../config'
import type { Identity } from './authenticate'
import { RateLimits, RateRefusal, type RateAdmission, type RateLimitKind } from './rates'
import { QuotaStoreError, type Lease, type SharedReservations } from './tenancy'
import type { Reservation } from './tenancy/lookup'
import { createUpstream, engineJson } from './upstream'
import { clearStaleSocket } from './listeners'
import { startMetricsServer, type MetricsServer } from '../metrics/server'

/** The worker's number (1..N) in the environment of the process the primary forks. */
export const WORKER_ENV = 'PORTCULLIS_WORKER'
/** The umask the primary was started with: it binds with 0177 (unix sockets owner-only until chmod-ed), the workers restore this. */
const UMASK_ENV = 'PORTCULLIS_UMASK'

export function workerNumber (): number | null {
  if (!cluster.isWorker) return null
  const n = Number(process.env[WORKER_ENV])
  return Number.isInteger(n) && n > 0 ? n : null
}

/** Worker N's audit file. */
export function workerAuditFile (file: string, n: number): string {
  return `${file}.w${n}`
}

type Message =
  | { pcx: 'quota-admit', id: string, tenant: string }
  | { pcx: 'quota-commit', id: string, tenant: string, reservation: Reservation }
  | { pcx: 'quota-abort', id: string, tenant: string }
  | { pcx: 'quota-release', id: string, linger: number }
  | { pcx: 'rate-admit', id: string, who: Identity, op: number }
  | { pcx: 'rate-release', id: string }
  | { pcx: 'readiness', engine: boolean, policy: boolean }

type Answer =
  | { pcx: 'quota-held', id: string, held: Reservation }
  | { pcx: 'rate-admitted', id: string }
  | { pcx: 'rate-refused', id: string, message: string, rule: string, rateClass: RateClass, limit: RateLimitKind, retryAfter: number }

const isOurs = (m: unknown): m is { pcx: string, id: string } => typeof m === 'object' && m !== null && typeof (m as { pcx?: unknown }).pcx === 'string'

/** A worker's requests to the primary, answered by id. */
class Asking {
  private readonly waiting = new Map<string, (a: Answer) => void>()
  constructor () {
    process.on('message', (m: unknown) => {
      if (!isOurs(m)) return
      const w = this.waiting.get(m.id)
      if (w === undefined) return
      this.waiting.delete(m.id)
      w(m as Answer)
    })
  }

  send (m: Message): void {
    if (!process.connected || process.send === undefined) throw new Error('the cluster primary is gone')
    process.send(m)
  }

  async ask (m: Message & { id: string }): Promise<Answer> {
    return await new Promise<Answer>((resolve, reject) => {
      this.waiting.set(m.id, resolve)
      try { this.send(m) } catch (err) { this.waiting.delete(m.id); reject(err) }
    })
  }
}

let asking: Asking | null = null
const ask = (): Asking => (asking ??= new Asking())

/** Quota reservations kept by the primary: the tenant's lock is held from `quota-held` to commit or abort. */
export class ClusterReservations implements SharedReservations {
  async admit (tenant: string, operation: string, judge: (held: Reservation) => Promise<Reservation>): Promise<Lease> {
    const id = randomUUID()
    let answer: Answer
    try {
      answer = await ask().ask({ pcx: 'quota-admit', id, tenant })
    } catch (err) {
      throw new QuotaStoreError(`quota reservations (cluster primary) unavailable: ${(err as Error).message}`)
    }
    if (answer.pcx !== 'quota-held') throw new QuotaStoreError('quota reservations (cluster primary): unexpected answer')
    let adding: Reservation
    try {
      adding = await judge(answer.held)
    } catch (err) {
      try { ask().send({ pcx: 'quota-abort', id, tenant }) } catch {}
      throw err
    }
    ask().send({ pcx: 'quota-commit', id, tenant, reservation: adding })
    let released = false
    return {
      id,
      release: (linger = 0) => {
        if (released) return
        released = true
        try { ask().send({ pcx: 'quota-release', id, linger }) } catch {}
      },
    }
  }
}

const OP_INDEX = new Map<Operation, number>(operations.map((op, i) => [op, i]))

/** Rate limits kept by the primary; identities no limit applies to are not asked about. */
export class ClusterRates implements RateAdmission {
  private readonly local: RateLimits
  constructor (config: Config['rates'], private readonly observe?: (tenant: string | null, rateClass: RateClass, limit: RateLimitKind) => void) {
    this.local = new RateLimits(config)
  }

  admit (who: Identity, op: Operation): (() => void) | Promise<() => void> {
    if (!this.local.limits(who)) return NOTHING
    const id = randomUUID()
    return ask().ask({ pcx: 'rate-admit', id, who: { subject: who.subject, tenant: who.tenant, roles: [...who.roles], method: who.method }, op: OP_INDEX.get(op) ?? -1 }).then((a) => {
      if (a.pcx === 'rate-refused') {
        this.observe?.(who.tenant, a.rateClass, a.limit)
        throw new RateRefusal(a.message, a.rule, a.rateClass, a.limit, a.retryAfter)
      }
      let given = false
      return () => {
        if (given) return
        given = true
        try { ask().send({ pcx: 'rate-release', id }) } catch {}
      }
    })
  }
}

const NOTHING = (): void => {}

/** In a worker: the metrics the primary sums, and the readiness it passes on. */
export function joinCluster (registry: Registry, setReadiness: (r: { engine: boolean, policy: boolean }) => void): void {
  AggregatorRegistry.setRegistries([registry])
  // Constructed for its side effect: in a worker it answers the primary's requests for metrics.
  void new AggregatorRegistry()
  process.on('message', (m: unknown) => {
    if (isOurs(m) && m.pcx === 'readiness') setReadiness(m as unknown as { engine: boolean, policy: boolean })
  })
}

interface Held { readonly worker: number, readonly tenant: string, readonly reservation: Reservation }

/** The primary's side: tenant locks and reservations, buckets and counts, per worker. */
class Ledger {
  private readonly reservations = new Map<string, Held>()
  /** Per tenant: the admission holding the lock (by id and worker), and the ones waiting. */
  private readonly locks = new Map<string, { holder: { id: string, worker: number }, queue: Array<{ id: string, worker: Worker }> }>()
  private readonly slots = new Map<string, { worker: number, give: () => void }>()
  private readonly rates: RateLimits

  constructor (config: Config) {
    this.rates = new RateLimits(config.rates)
  }

  handle (worker: Worker, m: Message): void {
    switch (m.pcx) {
      case 'quota-admit': {
        const lock = this.locks.get(m.tenant)
        if (lock === undefined) {
          this.locks.set(m.tenant, { holder: { id: m.id, worker: worker.id }, queue: [] })
          this.grant(worker, m.id, m.tenant)
        } else {
          lock.queue.push({ id: m.id, worker })
        }
        return
      }
      case 'quota-commit':
        this.reservations.set(m.id, { worker: worker.id, tenant: m.tenant, reservation: m.reservation })
        this.unlock(m.tenant, m.id)
        return
      case 'quota-abort':
        this.unlock(m.tenant, m.id)
        return
      case 'quota-release':
        if (m.linger > 0) setTimeout(() => this.reservations.delete(m.id), m.linger * 1000).unref()
        else this.reservations.delete(m.id)
        return
      case 'rate-admit': {
        const op = operations[m.op]
        if (op === undefined) return
        try {
          const give = this.rates.admit(m.who, op)
          this.slots.set(m.id, { worker: worker.id, give })
          worker.send({ pcx: 'rate-admitted', id: m.id } satisfies Answer)
        } catch (err) {
          if (!(err instanceof RateRefusal)) throw err
          worker.send({ pcx: 'rate-refused', id: m.id, message: err.message, rule: err.rule, rateClass: err.rateClass, limit: err.limit, retryAfter: err.retryAfter ?? 1 } satisfies Answer)
        }
        return
      }
      case 'rate-release': {
        const s = this.slots.get(m.id)
        if (s) { this.slots.delete(m.id); s.give() }
      }
    }
  }

  private grant (worker: Worker, id: string, tenant: string): void {
    const held = { containers: 0, memory: 0, nanoCpus: 0, volumes: 0 }
    for (const r of this.reservations.values()) {
      if (r.tenant !== tenant) continue
      held.containers += r.reservation.containers
      held.memory += r.reservation.memory
      held.nanoCpus += r.reservation.nanoCpus
      held.volumes += r.reservation.volumes ?? 0
    }
    if (worker.isConnected()) worker.send({ pcx: 'quota-held', id, held } satisfies Answer)
    else this.unlock(tenant, id)
  }

  private unlock (tenant: string, id: string): void {
    const lock = this.locks.get(tenant)
    if (lock === undefined || lock.holder.id !== id) return
    const next = lock.queue.shift()
    if (next === undefined) { this.locks.delete(tenant); return }
    lock.holder = { id: next.id, worker: next.worker.id }
    this.grant(next.worker, next.id, tenant)
  }

  /** A worker is gone: what it held is let go, its place in every queue given up. */
  forget (worker: number): void {
    for (const [id, r] of this.reservations) if (r.worker === worker) this.reservations.delete(id)
    for (const [id, s] of this.slots) if (s.worker === worker) { this.slots.delete(id); s.give() }
    for (const [tenant, lock] of this.locks) {
      lock.queue = lock.queue.filter((q) => q.worker.id !== worker)
      if (lock.holder.worker === worker) this.unlock(tenant, lock.holder.id)
    }
  }
}

/**
 * Run the primary: fork `config.workers` workers, restart those that die, pass SIGHUP
 * on, drain on SIGTERM/SIGINT. Resolves with the exit code.
 */
export async function runPrimary (config: Config, log: Logger): Promise<number> {
  if (config.listen.some((l) => l.activated !== undefined)) {
    log.fatal('workers > 1 with sockets passed by systemd is not supported: the workers cannot listen on the passed descriptors; set workers: 1')
    return 1
  }
  try {
    for (const l of config.listen) if (l.kind === 'unix') await clearStaleSocket(l.path)
  } catch (err) {
    log.fatal({ err: { message: (err as Error).message } }, 'cannot start')
    return 1
  }
  const umask = process.umask(0o177)
  let metricsServer: MetricsServer | null = null
  const upstream = createUpstream(config.upstream)
  const ledger = new Ledger(config)
  let resolveDone!: (code: number) => void
  const done = new Promise<number>((resolve) => { resolveDone = resolve })
  const numbers = new Map<number, number>()
  let stopping = false
  let started = 0
  const fork = (n: number): Worker => {
    const w = cluster.fork({ [WORKER_ENV]: String(n), [UMASK_ENV]: String(umask) })
    numbers.set(w.id, n)
    w.on('message', (m: unknown) => { if (isOurs(m)) ledger.handle(w, m as Message) })
    return w
  }
  const stop = async (signal: string): Promise<void> => {
    if (stopping) return
    stopping = true
    log.info({ signal }, 'signal received: draining every worker')
    const exits = Object.values(cluster.workers ?? {}).map(async (w) => {
      if (w === undefined || w.isDead()) return
      await new Promise<void>((resolve) => { w.once('exit', () => resolve()); w.process.kill('SIGTERM') })
    })
    await Promise.all(exits)
    await metricsServer?.close()
    await upstream.close()
    process.umask(umask)
    log.info('stopped')
    resolveDone(signal === 'worker failed' ? 1 : 0)
  }
  cluster.on('exit', (w, code, signal) => {
    const n = numbers.get(w.id)
    numbers.delete(w.id)
    ledger.forget(w.id)
    if (stopping || n === undefined) return
    log.error({ worker: n, pid: w.process.pid, code, signal }, `worker ${n} died; starting it again`)
    // A worker that cannot start at all (a bad listener) would be restarted for ever: once is enough before it ever listened.
    if (started < config.workers) { log.fatal({ worker: n }, 'a worker died before every worker had started; stopping'); void stop('worker failed'); return }
    setTimeout(() => { if (!stopping) fork(n) }, 500).unref()
  })
  let listeningWorkers = 0
  const ready = new Promise<void>((resolve) => {
    cluster.on('message', (w, m: unknown) => {
      if (isOurs(m) && m.pcx === 'started') {
        started++
        listeningWorkers++
        if (started === config.workers) resolve()
      }
    })
  })
  for (let n = 1; n <= config.workers; n++) fork(n)
  const aggregator = new AggregatorRegistry()
  let readiness = { engine: false, policy: false }
  metricsServer = config.metrics.listen
    ? await startMetricsServer(config.metrics.listen, {
      contentType: aggregator.contentType,
      setReadiness: (r) => {
        readiness = { engine: r.engine, policy: r.policy }
        for (const w of Object.values(cluster.workers ?? {})) if (w?.isConnected() === true) w.send({ pcx: 'readiness', ...readiness })
      },
      metrics: async () => await aggregator.clusterMetrics(),
    }, async () => {
      let engine = false
      try { engine = (await engineJson(upstream, 'GET', '/_ping', undefined, 2000)).status === 200 } catch {}
      const alive = Object.values(cluster.workers ?? {}).filter((w) => w?.isConnected() === true).length
      return { engine, policy: alive === config.workers && listeningWorkers > 0 }
    }, log)
    : null
  void readiness
  if (await Promise.race([ready.then(() => true), done.then(() => false)]) === false) return await done
  log.info({ workers: config.workers, pid: process.pid }, 'portcullis primary: every worker started')
  process.on('SIGHUP', () => {
    log.info({ workers: config.workers }, 'SIGHUP: passed to every worker')
    for (const w of Object.values(cluster.workers ?? {})) w?.process.kill('SIGHUP')
  })
  process.once('SIGTERM', () => { void stop('SIGTERM') })
  process.once('SIGINT', () => { void stop('SIGINT') })
  return await done
}

/** In a worker: the umask the primary was started with, and tell it this worker listens. */
export function workerStarting (): void {
  const u = Number(process.env[UMASK_ENV])
  if (Number.isInteger(u)) process.umask(u)
}

export function workerStarted (): void {
  process.send?.({ pcx: 'started', id: '' })
}
