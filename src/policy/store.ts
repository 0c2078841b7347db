/**
 * The running policy, swapped atomically on reload. A new policy directory is
 * compiled and validated completely before it replaces the old one; an invalid one
 * is reported and the old policy stays in force. Reloads come from SIGHUP (via the
 * gateway) and from changes in the directory (fs.watch, debounced).
 */
import fs from 'node:fs'
import type { Logger } from 'pino'
import { loadPolicy, PolicyError, type Policy } from './engine'

export interface ReloadResult { readonly ok: boolean, readonly version: string, readonly problems?: readonly string[] }

export class PolicyStore {
  private policy: Policy
  private watcher: fs.FSWatcher | null = null
  private timer: NodeJS.Timeout | null = null
  private reloading: Promise<ReloadResult> | null = null
  /** Called after every reload attempt (metrics hook). */
  onReload: (r: ReloadResult) => void = () => {}

  private constructor (readonly dir: string, policy: Policy, private readonly log: Logger) {
    this.policy = policy
  }

  /** Load at start-up: a missing or invalid policy is an error (the gateway does not start). */
  static async open (dir: string, log: Logger): Promise<PolicyStore> {
    return new PolicyStore(dir, await loadPolicy(dir), log)
  }

  get current (): Policy { return this.policy }

  async reload (): Promise<ReloadResult> {
    // Reloads do not overlap: a change during a reload is picked up by the next one.
    this.reloading ??= (async () => {
      try {
        const next = await loadPolicy(this.dir)
        const changed = next.version !== this.policy.version
        this.policy = next
        if (changed) this.log.info({ policyVersion: next.version }, 'policy reloaded')
        return { ok: true, version: next.version }
      } catch (err) {
        const problems = err instanceof PolicyError ? [...err.problems] : [(err as Error).message]
        this.log.error({ policyVersion: this.policy.version, problems }, 'policy reload failed; keeping the running policy')
        return { ok: false, version: this.policy.version, problems }
      } finally {
        this.reloading = null
      }
    })()
    const result = await this.reloading
    this.onReload(result)
    return result
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

  close (): void {
    this.watcher?.close()
    this.watcher = null
    if (this.timer) clearTimeout(this.timer)
  }
}
