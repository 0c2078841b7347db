// casbin-pg-watcher ships no types: the part of its surface Portcullis uses.
declare module 'casbin-pg-watcher' {
  import type { EventEmitter } from 'node:events'
  /** A casbin Watcher over PostgreSQL LISTEN/NOTIFY (pg-listen underneath). */
  export interface PgWatcher extends EventEmitter {
    /** Ignores notifications it sent itself. */
    readonly id: string
    readonly channel: string
    /** pg-listen's subscriber: `events` emits `connected`, `reconnect` and `error`. */
    readonly subscriber: { readonly events: EventEmitter }
    setUpdateCallback (cb: () => void): void
    update (): Promise<boolean>
    close (): Promise<void>
  }
  export function newWatcher (options: { connectionString: string, channel?: string }): Promise<PgWatcher>
}
