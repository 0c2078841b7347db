/**
 * The policy's Casbin lines in PostgreSQL, shared by every gateway replica.
 *
 * Storage is casbin-pg-adapter's (table `casbin`: `ptype text`, `rule jsonb`, unique
 * rule; created by its own migrations, table `casbin_migrations`), propagation is
 * casbin-pg-watcher's (PostgreSQL LISTEN/NOTIFY on one channel). This module only
 * adds what a gateway needs around them:
 *
 *  - one pg pool for both the adapter and the transactions that change the lines: a
 *    change reads, validates and writes under a table lock, so two replicas changing
 *    the policy at once cannot combine into lines nobody validated;
 *  - seeding an empty table from the policy directory's enforce file;
 *  - health: a failing database is counted, logged and reported (not ready), the last
 *    good policy stays in force, and when the database answers again the watcher is
 *    re-established and the lines reloaded (notifications sent meanwhile are lost).
 *
 * Errors and logs name the database by host, port and name only (`where`), never the
 * connection string: it may hold the password.
 */
import { EventEmitter } from 'node:events'
import { Helper, newModel, newEnforcer, type Model } from 'casbin'
import PostgresAdapter from 'casbin-pg-adapter'
import { newWatcher, type PgWatcher } from 'casbin-pg-watcher'
import { Pool, type PoolClient } from 'pg'
import type { Logger } from 'pino'
import { addLines, sortLines, type PolicyLine } from './engine'

export interface DatabaseSettings {
  /** Connection string (`postgres://user[:password]@host:port/db`); the password may come from PGPASSWORD instead. */
  readonly url: string
  /** host:port/database, for messages: never the password. */
  readonly where: string
  /** LISTEN/NOTIFY channel of the watcher. */
  readonly channel: string
  /** How often the database is checked while the gateway runs. */
  readonly healthIntervalMs?: number
}

/** A database failure, worded without the connection string. */
export class DatabaseError extends Error {}

/** Message of a pg/network error, safe to log: pg's own messages never include the password. */
function reason (err: unknown): string {
  const e = err as { code?: string, message?: string }
  return e?.message || e?.code || String(err)
}

/** The lines as the adapter reads them back: it stores fields, and re-parses `ptype, f1, f2...` with Casbin's CSV reader. */
export function asStored (modelText: string, lines: readonly PolicyLine[]): PolicyLine[] {
  const model = newModel(modelText)
  for (const l of lines) Helper.loadPolicyLine(`${l[0]}, ${l.slice(1).join(', ')}`, model)
  return linesOf(model)
}

function linesOf (model: Model): PolicyLine[] {
  const out: PolicyLine[] = []
  for (const sec of ['p', 'g']) {
    for (const [ptype, ast] of model.model.get(sec) ?? new Map()) for (const rule of ast.policy) out.push([ptype, ...rule])
  }
  return out
}

/** What a transaction can do: read the lines, add or remove some, or replace them all (seeding). */
export interface PolicyTransaction {
  read (): Promise<PolicyLine[]>
  add (lines: readonly PolicyLine[]): Promise<void>
  remove (lines: readonly PolicyLine[]): Promise<void>
  replace (lines: readonly PolicyLine[]): Promise<void>
}

export class PolicyDatabase extends EventEmitter {
  private watcher: PgWatcher | null = null
  private healthTimer: NodeJS.Timeout | null = null
  private closed = false
  private onChange: () => void = () => {}
  private lastLoudLog = 0
  /** False while the database does not answer (or the watcher is lost); /readyz reports it. */
  healthy = true
  lastError: string | null = null

  private constructor (private readonly settings: DatabaseSettings, private readonly modelText: string, private readonly pool: Pool, private readonly log: Logger) {
    super()
  }

  get where (): string { return this.settings.where }

  /**
   * Connect, create the adapter's table if needed (its migrations, under their own
   * lock) and start listening. An unreachable database is an error: the gateway does
   * not start without its policy.
   */
  static async open (settings: DatabaseSettings, modelText: string, log: Logger): Promise<PolicyDatabase> {
    const pool = new Pool({ connectionString: settings.url, max: 4, connectionTimeoutMillis: 5000, idleTimeoutMillis: 10_000, query_timeout: 10_000, application_name: 'portcullis' })
    // An idle client's error (the server went away) must not crash the process.
    pool.on('error', (err) => log.warn({ db: settings.where, err: { message: reason(err) } }, 'policy database: idle connection failed'))
    const db = new PolicyDatabase(settings, modelText, pool, log)
    // The adapter's migrations (node-pg-migrate 5) take a session-level try-lock and,
    // on a client they did not open, never release it: they run on a connection of
    // their own that is closed afterwards, which releases the lock. Of replicas starting
    // together one migrates; the others are told "Another migration is already running"
    // (or lose the race to create its table) and try again.
    for (let attempt = 1; ; attempt++) {
      try {
        const adapter = await PostgresAdapter.newAdapter({ dbClient: pooled(pool, true), migrate: true })
        await adapter.close()
        return db
      } catch (err) {
        if (/Another migration is already running|already exists|duplicate key/.test(reason(err)) && attempt < 50) {
          await new Promise((resolve) => setTimeout(resolve, 100 + Math.floor(Math.random() * 100)))
          continue
        }
        await pool.end().catch(() => {})
        throw new DatabaseError(`cannot open the policy database at ${settings.where}: ${reason(err)}`)
      }
    }
  }

  /** casbin-pg-adapter over one of our connections (a pool, or a client inside a transaction). */
  private async adapter (over: Pool | PoolClient): Promise<PostgresAdapter> {
    const dbClient = over instanceof Pool ? pooled(over, false) : async (exec: (c: PoolClient) => Promise<unknown>) => await exec(over)
    return await PostgresAdapter.newAdapter({ dbClient, migrate: false })
  }

  /** Read every line through the adapter, in canonical order. */
  async read (): Promise<PolicyLine[]> {
    try {
      return await this.readWith(await this.adapter(this.pool))
    } catch (err) {
      // A row Casbin cannot parse (written by hand) is a policy problem, not an outage.
      if (!isDatabaseFailure(err)) throw new Error(`policy database at ${this.where}: ${reason(err)}`)
      throw this.failed(err, 'reading the policy lines')
    }
  }

  private async readWith (adapter: PostgresAdapter): Promise<PolicyLine[]> {
    const model = newModel(this.modelText)
    await adapter.loadPolicy(model)
    return sortLines(linesOf(model))
  }

  /**
   * Run `fn` in one transaction holding the table's lock (readers go on, other
   * writers wait), committed when it returns, rolled back when it throws.
   */
  async transaction<T> (fn: (tx: PolicyTransaction) => Promise<T>): Promise<T> {
    let client: PoolClient
    try {
      client = await this.pool.connect()
    } catch (err) {
      throw this.failed(err, 'connecting')
    }
    let done = false
    try {
      await client.query('BEGIN')
      await client.query('LOCK TABLE casbin IN SHARE ROW EXCLUSIVE MODE')
      const adapter = await this.adapter(client)
      const tx: PolicyTransaction = {
        read: async () => await this.readWith(adapter),
        add: async (lines) => { for (const l of lines) await adapter.addPolicy(l[0], l[0], l.slice(1)) },
        remove: async (lines) => { for (const l of lines) await adapter.removePolicy(l[0], l[0], l.slice(1)) },
        replace: async (lines) => {
          const e = await newEnforcer(newModel(this.modelText))
          await addLines(e, lines)
          adapter.enabledFiltered(false)
          await adapter.savePolicy(e.getModel())
        },
      }
      const result = await fn(tx)
      await client.query('COMMIT')
      done = true
      return result
    } catch (err) {
      if (!done) await client.query('ROLLBACK').catch(() => {})
      if (err instanceof DatabaseError || !isDatabaseFailure(err)) throw err
      throw this.failed(err, 'changing the policy lines')
    } finally {
      client.release()
    }
  }

  /**
   * Fill an empty table with `lines` (the directory's enforce file), in one
   * transaction: of several replicas starting at once, the first seeds, the rest find it filled.
   */
  async seedIfEmpty (lines: readonly PolicyLine[]): Promise<boolean> {
    return await this.transaction(async (tx) => {
      if ((await tx.read()).length) return false
      await tx.replace(lines)
      return true
    })
  }

  /** Listen for other replicas' changes (casbin-pg-watcher); `onChange` reloads. Also starts the health checks. */
  async watch (onChange: () => void): Promise<void> {
    this.onChange = onChange
    try {
      await this.connectWatcher()
    } catch (err) {
      throw new DatabaseError(`cannot listen on the policy database at ${this.where}: ${reason(err)}`)
    }
    this.healthTimer = setInterval(() => { void this.check() }, this.settings.healthIntervalMs ?? 2000)
    this.healthTimer.unref()
  }

  private async connectWatcher (): Promise<void> {
    const watcher = await newWatcher({ connectionString: this.settings.url, channel: this.settings.channel })
    let first = true
    watcher.setUpdateCallback(() => this.onChange())
    // pg-listen reconnects by itself for a few seconds; notifications sent while it
    // was away are lost, so a re-established listener reloads.
    watcher.subscriber.events.on('connected', () => {
      if (first) { first = false; return }
      this.log.warn({ db: this.where }, 'policy database: watcher reconnected; reloading the policy')
      this.onChange()
    })
    // pg-listen gave up: the health check builds a new watcher once the database answers.
    watcher.on('error', (err: unknown) => {
      if (this.watcher !== watcher) return
      this.failed(err, 'listening for policy changes')
      this.watcher = null
      watcher.close().catch(() => {})
    })
    this.watcher = watcher
  }

  /** The periodic check: is the database there, is the watcher listening. */
  private async check (): Promise<void> {
    if (this.closed) return
    try {
      await this.pool.query('SELECT 1')
      if (!this.watcher) await this.connectWatcher()
    } catch (err) {
      this.failed(err, 'health check')
      return
    }
    if (!this.healthy) {
      this.healthy = true
      this.lastError = null
      this.log.warn({ db: this.where }, 'policy database reachable again; reloading the policy')
      this.emit('up')
      this.onChange()
    }
  }

  /**
   * Tell the other replicas (their watchers) that the lines changed. casbin-pg-watcher
   * 0.1.1 swallows a failed NOTIFY (its `closed` flag starts out true), so this only
   * fails when we know the listener is gone; a notification lost otherwise is caught up
   * when the other replicas' listeners reconnect or their health check sees the
   * database return (both reload).
   */
  async notify (): Promise<void> {
    if (!this.watcher) throw new DatabaseError(`cannot notify the other replicas: not listening on the policy database at ${this.where}`)
    try {
      await this.watcher.update()
    } catch (err) {
      throw this.failed(err, 'notifying the other replicas')
    }
  }

  /** Record a failure: not healthy, counted (event `failure`), logged loudly (at most every 10 s). */
  private failed (err: unknown, doing: string): DatabaseError {
    const message = `policy database at ${this.where} failed (${doing}): ${reason(err)}`
    const wasHealthy = this.healthy
    this.healthy = false
    this.lastError = message
    this.emit('failure')
    const now = Date.now()
    if (wasHealthy || now - this.lastLoudLog > 10_000) {
      this.lastLoudLog = now
      this.log.error({ db: this.where }, `${message}; keeping the running policy`)
    }
    return new DatabaseError(message)
  }

  async close (): Promise<void> {
    this.closed = true
    if (this.healthTimer) clearInterval(this.healthTimer)
    const w = this.watcher
    this.watcher = null
    await w?.close().catch(() => {})
    await this.pool.end().catch(() => {})
  }
}

/** The adapter's `dbClient` over a pool: a connection per call, closed afterwards when `discard`. */
function pooled (pool: Pool, discard: boolean): (exec: (c: PoolClient) => Promise<unknown>) => Promise<unknown> {
  return async (exec) => {
    const c = await pool.connect()
    try { return await exec(c) } finally { c.release(discard) }
  }
}

/** Connection and server errors (as opposed to errors thrown by the transaction's own code). */
function isDatabaseFailure (err: unknown): boolean {
  const e = err as { code?: unknown, severity?: unknown }
  return typeof e?.severity === 'string' || (typeof e?.code === 'string' && /^E[A-Z]+$/.test(e.code)) || /Connection terminated|timeout/i.test((err as Error)?.message ?? '')
}
