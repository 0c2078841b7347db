/**
 * Quota reservations shared by every gateway replica, in PostgreSQL (the policy
 * database, `policy.database`). Without it each process counts only the reservations
 * it holds itself (lookup.ts OwnerCache), and two replicas behind a balancer can both
 * admit the tenant's last free slot.
 *
 * An admission runs in one transaction holding a per-tenant advisory lock
 * (pg_advisory_xact_lock): it reads every replica's unexpired reservations of the
 * tenant, then `judge` counts the engine's usage (under the lock, so that no other
 * replica can admit in between) and refuses or admits; the admitted reservation is
 * inserted and committed, which releases the lock. A reservation is deleted when its
 * request has been answered; one that is not (its replica died) expires after `ttl`.
 * A replica renews the reservations it holds every third of that, so a slow create
 * keeps its own.
 *
 * Rows are read in this order, reservations first, engine second: a reservation
 * released in between was released after the engine answered, so its object is in
 * the engine's list (counted twice for a moment, never not at all).
 *
 * Errors and logs name the database by host, port and name only, never the
 * connection string.
 */
import { createHash, randomUUID } from 'node:crypto'
import os from 'node:os'
import { Pool, type PoolClient } from 'pg'
import type { Logger } from 'pino'
import type { Reservation } from './lookup'

export const QUOTA_TABLE = 'portcullis_quota_reservations'

export interface QuotaStoreSettings {
  /** Connection string; may hold a password: never logged. */
  readonly url: string
  /** host:port/database, for messages. */
  readonly where: string
  /** How long a reservation lives unless its replica renews it (default 120 s). */
  readonly ttlSeconds?: number
  /** How long an admission waits for another replica's admission of the same tenant (default 5 s). */
  readonly lockTimeoutMs?: number
}

/** What went wrong with the store, worded without the connection string. */
export class QuotaStoreError extends Error {}

export type QuotaStoreStage = 'admit' | 'release' | 'renew'

/** An admitted reservation: `release` ends it (at once, or after `lingerSeconds`); later calls do nothing. */
export interface Lease {
  readonly id: string
  release (lingerSeconds?: number): void
}

/**
 * What a quota check needs of reservations shared by several processes: this store (the
 * policy database, across replicas) or the cluster primary's (gateway/cluster.ts, across
 * the workers of one gateway). `admit` runs `judge` under the tenant's lock.
 */
export interface SharedReservations {
  admit (tenant: string, operation: string, judge: (held: Reservation) => Promise<Reservation>): Promise<Lease>
}

const DEFAULT_TTL_SECONDS = 120
/** A namespace for the advisory lock keys, so that they do not meet another application's. */
const LOCK_NAMESPACE = 'portcullis quota reservations\0'

/** The tenant's advisory lock key: 64 bits of a hash of its name, as pg's signed bigint. */
export function lockKey (tenant: string): string {
  const h = createHash('sha256').update(LOCK_NAMESPACE + tenant).digest()
  return h.readBigInt64BE(0).toString()
}

function reason (err: unknown): string {
  const e = err as { code?: string, message?: string }
  return e?.message || e?.code || String(err)
}

/** Thrown by `judge` (a refusal, an engine failure): passed on as it is. */
class Judged { constructor (readonly thrown: unknown) {} }

export class QuotaStore implements SharedReservations {
  /** Who holds a reservation, for people reading the table. */
  readonly replica = `${os.hostname()}/${process.pid}/${randomUUID().slice(0, 8)}`
  readonly ttlSeconds: number
  private readonly lockTimeoutMs: number
  /** Reservations this replica holds: renewed until released. */
  private readonly held = new Set<string>()
  /** Released reservations whose delete failed: retried by the renewal, else they expire. */
  private readonly unreleased = new Set<string>()
  /** Per tenant, the admission running here: one connection per tenant and replica waits for the lock. */
  private readonly turns = new Map<string, Promise<void>>()
  private readonly pending = new Set<Promise<void>>()
  private readonly timer: NodeJS.Timeout
  private lastLoudLog = 0
  /** Called on every failure of the store (counted in metrics). */
  onFailure: (stage: QuotaStoreStage) => void = () => {}

  private constructor (private readonly settings: QuotaStoreSettings, private readonly pool: Pool, private readonly log: Logger) {
    this.ttlSeconds = settings.ttlSeconds ?? DEFAULT_TTL_SECONDS
    this.lockTimeoutMs = settings.lockTimeoutMs ?? 5000
    this.timer = setInterval(() => { void this.renew() }, Math.max(250, this.ttlSeconds * 1000 / 3))
    this.timer.unref()
  }

  get where (): string { return this.settings.where }

  /** Connect and create the table if needed; an unreachable database is an error (the gateway does not start). */
  static async open (settings: QuotaStoreSettings, log: Logger): Promise<QuotaStore> {
    const pool = new Pool({ connectionString: settings.url, max: 8, connectionTimeoutMillis: 5000, idleTimeoutMillis: 10_000, query_timeout: 15_000, application_name: 'portcullis-quotas' })
    pool.on('error', (err) => log.warn({ db: settings.where, err: { message: reason(err) } }, 'quota store: idle connection failed'))
    try {
      const c = await pool.connect()
      try {
        // Replicas starting together: CREATE ... IF NOT EXISTS is not safe against a
        // concurrent create of the same table, so they take turns.
        await c.query('BEGIN')
        await c.query('SELECT pg_advisory_xact_lock($1::bigint)', [lockKey('\0create table')])
        await c.query(`CREATE TABLE IF NOT EXISTS ${QUOTA_TABLE} (
          id text PRIMARY KEY,
          tenant text NOT NULL,
          containers bigint NOT NULL,
          memory bigint NOT NULL,
          nano_cpus bigint NOT NULL,
          operation text NOT NULL,
          replica text NOT NULL,
          created_at timestamptz NOT NULL DEFAULT now(),
          expires_at timestamptz NOT NULL
        )`)
        // Volumes are reserved too (a table made before they were has no such column).
        await c.query(`ALTER TABLE ${QUOTA_TABLE} ADD COLUMN IF NOT EXISTS volumes bigint NOT NULL DEFAULT 0`)
        await c.query(`CREATE INDEX IF NOT EXISTS ${QUOTA_TABLE}_tenant ON ${QUOTA_TABLE} (tenant, expires_at)`)
        await c.query('COMMIT')
      } catch (err) {
        await c.query('ROLLBACK').catch(() => {})
        throw err
      } finally {
        c.release()
      }
    } catch (err) {
      await pool.end().catch(() => {})
      throw new QuotaStoreError(`cannot open the quota store (policy database at ${settings.where}): ${reason(err)}`)
    }
    return new QuotaStore(settings, pool, log)
  }

  /**
   * Admit a reservation for `tenant` if `judge` does: `judge` gets every replica's
   * unexpired reservations of the tenant, counts the engine's usage on top and
   * throws to refuse, or returns what to reserve. A failure of the database is a
   * QuotaStoreError; what `judge` throws is passed on unchanged.
   */
  async admit (tenant: string, operation: string, judge: (held: Reservation) => Promise<Reservation>): Promise<Lease> {
    const done = await this.turn(tenant)
    try {
      return await this.admitNow(tenant, operation, judge)
    } finally {
      done()
    }
  }

  private async admitNow (tenant: string, operation: string, judge: (held: Reservation) => Promise<Reservation>): Promise<Lease> {
    let client: PoolClient
    try {
      client = await this.pool.connect()
    } catch (err) {
      throw this.failed(err, 'admit', 'connecting')
    }
    let broken = false
    try {
      await client.query('BEGIN')
      await client.query(`SET LOCAL lock_timeout = ${Math.max(1, Math.round(this.lockTimeoutMs))}`)
      // A replica stuck between reading and inserting does not hold the tenant for long.
      await client.query("SET LOCAL idle_in_transaction_session_timeout = '30s'")
      await client.query('SELECT pg_advisory_xact_lock($1::bigint)', [lockKey(tenant)])
      await client.query(`DELETE FROM ${QUOTA_TABLE} WHERE tenant = $1 AND expires_at <= now()`, [tenant])
      const sums = (await client.query(`SELECT coalesce(sum(containers), 0)::text AS containers, coalesce(sum(memory), 0)::text AS memory, coalesce(sum(nano_cpus), 0)::text AS nano_cpus, coalesce(sum(volumes), 0)::text AS volumes FROM ${QUOTA_TABLE} WHERE tenant = $1`, [tenant])).rows[0]
      const held: Reservation = { containers: Number(sums.containers), memory: Number(sums.memory), nanoCpus: Number(sums.nano_cpus), volumes: Number(sums.volumes) }
      let adding: Reservation
      try {
        adding = await judge(held)
      } catch (err) {
        throw new Judged(err)
      }
      const id = randomUUID()
      await client.query(`INSERT INTO ${QUOTA_TABLE} (id, tenant, containers, memory, nano_cpus, volumes, operation, replica, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now() + make_interval(secs => $9))`,
        [id, tenant, Math.round(adding.containers), Math.round(adding.memory), Math.round(adding.nanoCpus), Math.round(adding.volumes ?? 0), operation, this.replica, this.ttlSeconds])
      await client.query('COMMIT')
      this.held.add(id)
      return { id, release: (lingerSeconds = 0) => this.release(id, lingerSeconds) }
    } catch (err) {
      await client.query('ROLLBACK').catch(() => { broken = true })
      if (err instanceof Judged) throw err.thrown
      broken = true
      throw this.failed(err, 'admit', 'admitting')
    } finally {
      // A connection that failed mid-transaction is not handed out again.
      client.release(broken)
    }
  }

  /** Wait for this replica's earlier admissions of `tenant`; call the result when done. */
  private async turn (tenant: string): Promise<() => void> {
    const before = this.turns.get(tenant) ?? Promise.resolve()
    let done!: () => void
    const mine = new Promise<void>((resolve) => { done = resolve })
    const chained = before.then(async () => await mine)
    this.turns.set(tenant, chained)
    await before
    return () => {
      done()
      if (this.turns.get(tenant) === chained) this.turns.delete(tenant)
    }
  }

  /** Delete the reservation (or let it expire `lingerSeconds` from now); a failure leaves it to the renewal's retry or its expiry. */
  private release (id: string, lingerSeconds: number): void {
    if (!this.held.delete(id)) return
    const work = (async () => {
      try {
        if (lingerSeconds > 0) await this.pool.query(`UPDATE ${QUOTA_TABLE} SET expires_at = least(expires_at, now() + make_interval(secs => $2)) WHERE id = $1`, [id, lingerSeconds])
        else await this.pool.query(`DELETE FROM ${QUOTA_TABLE} WHERE id = $1`, [id])
      } catch (err) {
        this.unreleased.add(id)
        this.failed(err, 'release', 'releasing a reservation')
      }
    })()
    this.pending.add(work)
    void work.finally(() => this.pending.delete(work))
  }

  /** Keep this replica's reservations alive, and retry the releases that failed. */
  private async renew (): Promise<void> {
    try {
      if (this.held.size) await this.pool.query(`UPDATE ${QUOTA_TABLE} SET expires_at = now() + make_interval(secs => $2) WHERE id = ANY($1::text[])`, [[...this.held], this.ttlSeconds])
      if (this.unreleased.size) {
        const ids = [...this.unreleased]
        await this.pool.query(`DELETE FROM ${QUOTA_TABLE} WHERE id = ANY($1::text[])`, [ids])
        for (const id of ids) this.unreleased.delete(id)
      }
    } catch (err) {
      this.failed(err, 'renew', 'renewing reservations')
    }
  }

  /** Count and log a failure (loudly at most every 10 s); the error to throw. */
  private failed (err: unknown, stage: QuotaStoreStage, doing: string): QuotaStoreError {
    const message = `quota store (policy database at ${this.where}) failed (${doing}): ${reason(err)}`
    this.onFailure(stage)
    const now = Date.now()
    if (now - this.lastLoudLog > 10_000) {
      this.lastLoudLog = now
      this.log.error({ db: this.where, stage }, message)
    }
    return new QuotaStoreError(message)
  }

  /** Stop renewing, wait for the releases under way, close the connections. */
  async close (): Promise<void> {
    clearInterval(this.timer)
    // Requests have drained; anything still held is let go rather than left to expire.
    for (const id of [...this.held]) this.release(id, 0)
    await Promise.allSettled([...this.pending])
    await this.pool.end().catch(() => {})
  }
}
