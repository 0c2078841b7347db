/**
 * The running policy, swapped atomically on reload. A new policy is compiled and
 * validated completely before it replaces the old one; an invalid one is reported
 * and the old policy stays in force. Reloads come from SIGHUP (via the gateway), from
 * changes in the directory (fs.watch, debounced), and with a policy database from
 * other replicas' changes (the watcher) and from the database coming back.
 *
 * With a database (src/policy/database.ts) the enforce set's lines live there; the
 * model, rewrites, tenancy and audit-mode files stay in the directory. Changes made
 * through this replica (`change`) are validated against the database's current lines
 * under its lock before anything is written.
 */
import fs from 'node:fs'
import path from 'node:path'
import type { Logger } from 'pino'
import { loadPolicy, PolicyError, readEnforceFileLines, readModelText, sortLines, type Policy, type PolicyLine } from './engine'
import { asStored, DatabaseError, PolicyDatabase, type DatabaseSettings } from './database'
import { runFixturesOn } from './tool'

export interface StoreOptions {
  /** Run the directory's fixtures (tests/*.yaml) against a new policy before it replaces the running one (default true). */
  readonly reloadTests?: boolean
}

/** How many added or removed lines a reload's log line lists (the counts are always given). */
const DIFF_LISTED = 200

/** The lines of `next` not in `prev` and those of `prev` not in `next`, as written in a policy file. */
export function lineDiff (prev: readonly PolicyLine[], next: readonly PolicyLine[]): { added: string[], removed: string[] } {
  const key = (l: PolicyLine): string => JSON.stringify(l)
  const had = new Set(prev.map(key))
  const has = new Set(next.map(key))
  return {
    added: next.filter((l) => !had.has(key(l))).map((l) => l.join(', ')),
    removed: prev.filter((l) => !has.has(key(l))).map((l) => l.join(', ')),
  }
}

export interface ReloadResult { readonly ok: boolean, readonly version: string, readonly problems?: readonly string[] }

/** A change refused before anything was written: the problems say why. */
export class PolicyChangeError extends Error {
  constructor (readonly problems: readonly string[]) {
    super(problems.join('; '))
  }
}

export interface ChangeResult { readonly version: string, readonly changed: number, readonly notified: boolean }

const DATABASE_SOURCE = 'database'

export class PolicyStore {
  private policy: Policy
  private watcher: fs.FSWatcher | null = null
  private timer: NodeJS.Timeout | null = null
  private pending: Promise<ReloadResult> | null = null
  private tail: Promise<void> = Promise.resolve()
  /** Called after every reload attempt (metrics hook). */
  onReload: (r: ReloadResult) => void = () => {}

  private constructor (readonly dir: string, policy: Policy, private readonly log: Logger, readonly database: PolicyDatabase | null, private readonly options: StoreOptions = {}) {
    this.policy = policy
    this.warn(policy)
  }

  /** What is legal but probably a mistake (a layer that denies everything): said once per version. */
  private warn (policy: Policy): void {
    for (const w of policy.warnings) this.log.warn({ policyVersion: policy.version }, w)
  }

  /**
   * Load at start-up: a missing or invalid policy is an error (the gateway does not
   * start), so is an unreachable database. An empty database table is seeded from the
   * directory's enforce file first.
   */
  static async open (dir: string, log: Logger, database?: DatabaseSettings, options: StoreOptions = {}): Promise<PolicyStore> {
    if (!database) return new PolicyStore(dir, await loadPolicy(dir), log, null, options)
    const modelText = readModelText(dir)
    const seed = await readEnforceFileLines(dir)
    const stored = asStored(modelText, seed.lines)
    // The seed must compile as it will be read back before it is written.
    await loadPolicy(dir, { name: DATABASE_SOURCE, lines: sortLines(stored) })
    const db = await PolicyDatabase.open(database, modelText, log)
    try {
      if (await db.seedIfEmpty(stored)) log.warn({ db: db.where, lines: stored.length, file: seed.file }, 'policy database was empty: seeded it from the policy directory')
      // Listen before reading: a change made elsewhere in between is not lost.
      let store: PolicyStore | null = null
      let early = false
      await db.watch(() => { if (store) void store.reload(); else early = true })
      const policy = await loadPolicy(dir, { name: DATABASE_SOURCE, lines: await db.read() })
      store = new PolicyStore(dir, policy, log, db, options)
      if (early) void store.reload()
      return store
    } catch (err) {
      await db.close()
      throw err
    }
  }

  get current (): Policy { return this.policy }

  /** Whether the policy source answers (always, for files). */
  get sourceHealthy (): boolean { return this.database?.healthy ?? true }

  private async compile (): Promise<Policy> {
    const next = this.database
      ? await loadPolicy(this.dir, { name: DATABASE_SOURCE, lines: await this.database.read() })
      : await loadPolicy(this.dir)
    await this.gate(next)
    return next
  }

  /**
   * A policy that compiles can still be weaker than the running one (a deny line
   * removed, a condition turned around): the directory's fixtures must pass against it
   * before it is used. Throws a PolicyError naming every failed fixture.
   */
  private async gate (next: Policy): Promise<void> {
    if (this.options.reloadTests === false || next.version === this.policy.version) return
    const run = await runFixturesOn(next, path.join(this.dir, 'tests'))
    if (run.failed) throw new PolicyError(this.dir, run.failures.map((f) => `fixture ${f}`))
  }

  /**
   * Reloads and changes run one at a time, in order, so that a reload that read the
   * lines before a change was committed cannot swap in the older policy after it.
   */
  private serial<T> (fn: () => Promise<T>): Promise<T> {
    const run = this.tail.then(fn, fn)
    this.tail = run.then(() => {}, () => {})
    return run
  }

  async reload (): Promise<ReloadResult> {
    // Requests for a reload that has not started yet share it; one that arrives while a
    // reload is running (a notification after it read the lines) gets its own.
    this.pending ??= this.serial(async () => {
      this.pending = null
      let result: ReloadResult
      try {
        const next = await this.compile()
        result = { ok: true, version: this.swap(next, 'policy reloaded') }
      } catch (err) {
        const problems = err instanceof PolicyError ? [...err.problems] : [(err as Error).message]
        const fixtures = problems.filter((p) => p.startsWith('fixture '))
        this.log.error({ policyVersion: this.policy.version, problems }, fixtures.length
          ? `policy reload failed: ${fixtures.length} fixture${fixtures.length > 1 ? 's' : ''} fail against the new policy; keeping the running policy`
          : 'policy reload failed; keeping the running policy')
        result = { ok: false, version: this.policy.version, problems }
      }
      this.onReload(result)
      return result
    })
    return await this.pending
  }

  private swap (next: Policy, what: string): string {
    const changed = next.version !== this.policy.version
    const { added, removed } = lineDiff(this.policy.lines, next.lines)
    this.policy = next
    if (changed) {
      // What changed, line by line: an edit that drops a deny line is seen in the log.
      this.log.info({
        policyVersion: next.version,
        source: next.source,
        linesAdded: added.length,
        linesRemoved: removed.length,
        added: added.slice(0, DIFF_LISTED),
        removed: removed.slice(0, DIFF_LISTED),
      }, what)
      this.warn(next)
    }
    return next.version
  }

  /**
   * Add or remove enforce-set lines in the database: under the table's lock, the
   * database's current lines with the change applied are compiled completely; only a
   * policy that compiles is written. Then this replica swaps to it and the watcher
   * tells the others. Throws PolicyChangeError (nothing written) or DatabaseError.
   */
  async change (action: 'add' | 'remove', lines: readonly PolicyLine[]): Promise<ChangeResult> {
    const db = this.database
    if (!db) throw new PolicyChangeError([`the policy is read from files in ${this.dir}; changes through the API need policy.database`])
    const modelText = readModelText(this.dir)
    const problems: string[] = []
    lines.forEach((l, i) => {
      let stored: PolicyLine | undefined
      try {
        stored = asStored(modelText, [l])[0]
      } catch (err) {
        problems.push(`line ${i + 1}: ${(err as Error).message}`)
        return
      }
      if (JSON.stringify(stored) !== JSON.stringify(l)) {
        problems.push(`line ${i + 1} would be stored as ${JSON.stringify(stored ?? null)} (the adapter joins fields with ", " and Casbin splits them again): send it in that form`)
      }
    })
    if (problems.length) throw new PolicyChangeError(problems)
    const next = await this.serial(async () => await db.transaction(async (tx) => {
      const current = await tx.read()
      const key = (l: PolicyLine): string => JSON.stringify(l)
      const have = new Set(current.map(key))
      const asked = new Set<string>()
      lines.forEach((l, i) => {
        if (asked.has(key(l))) problems.push(`line ${i + 1} is given twice`)
        asked.add(key(l))
        if (action === 'add' && have.has(key(l))) problems.push(`line ${i + 1} is already in the policy: ${l.join(', ')}`)
        if (action === 'remove' && !have.has(key(l))) problems.push(`line ${i + 1} is not in the policy: ${l.join(', ')}`)
      })
      if (problems.length) throw new PolicyChangeError(problems)
      const after = action === 'add' ? [...current, ...lines] : current.filter((l) => !asked.has(key(l)))
      let policy: Policy
      try {
        policy = await loadPolicy(this.dir, { name: DATABASE_SOURCE, lines: sortLines(after) })
        // The other replicas would refuse it on their reload: refuse it here, before it is written.
        await this.gate(policy)
      } catch (err) {
        if (err instanceof PolicyError) throw new PolicyChangeError(err.problems)
        throw err
      }
      if (action === 'add') await tx.add(lines)
      else await tx.remove(lines)
      return policy
    }).then((policy) => {
      this.swap(policy, 'policy changed through the admin API')
      this.onReload({ ok: true, version: policy.version })
      return policy
    }))
    let notified = true
    try {
      await db.notify()
    } catch (err) {
      notified = false
      this.log.error({ db: db.where, err: { message: (err as Error).message } }, 'policy changed, but the other replicas were not notified: they pick it up when their watcher reconnects or on SIGHUP')
    }
    return { version: next.version, changed: lines.length, notified }
  }

  /** Reload when files in the directory change (editors write in bursts: wait for quiet). */
  watch (debounceMs = 250): void {
    if (this.watcher) return
    this.watcher = fs.watch(this.dir, { persistent: false }, () => {
      if (this.timer) clearTimeout(this.timer)
      this.timer = setTimeout(() => { this.timer = null; void this.reload() }, debounceMs)
    })
    this.watcher.on('error', (err) => this.log.warn({ err: { message: err.message } }, 'policy directory watch failed'))
  }

  async close (): Promise<void> {
    this.watcher?.close()
    this.watcher = null
    if (this.timer) clearTimeout(this.timer)
    await this.database?.close()
  }
}

export { DatabaseError }
