/**
 * The images each tenant made through the gateway: built (every stage's image the
 * builder reported), committed or imported, as the engine's own answer named them. A
 * tenant's build takes its cache only from these (operations.ts ownCache): an image's
 * labels are something a request can write (issue 30: `changes` that the gateway read
 * otherwise than the engine made another tenant's image look like one's own, and its
 * next build reused a planted layer), this record is the gateway's alone.
 *
 * Kept as JSON lines in `provenance.file` (owner-only); null keeps it in memory, lost at a
 * restart, which costs cache hits, never isolation. Every worker of one gateway appends
 * to the one file and reads what the others appended before it names a build's cache
 * (one short line per append: whole on a local file system). Replicas on several hosts
 * each keep their own.
 */
import fs from 'node:fs'

/** At most this many images per tenant are kept in memory (the oldest dropped first). */
const PER_TENANT = 10_000

export class Provenance {
  private readonly ids = new Map<string, Set<string>>()
  /** How far the file has been read. */
  private offset = 0

  constructor (private readonly file: string | null) {}

  /** `id` (the engine's `sha256:` id) was made by `tenant` through `op`. */
  record (tenant: string, id: string, op: string): void {
    if (!/^sha256:[0-9a-f]{64}$/.test(id)) return
    this.add(tenant, id)
    if (this.file === null) return
    try {
      fs.appendFileSync(this.file, JSON.stringify({ tenant, id, op, at: new Date().toISOString() }) + '\n', { mode: 0o600 })
    } catch {
      // Kept in memory: this process still knows; a restart forgets (a cache miss, never a foreign hit).
    }
  }

  /** The images `tenant` made through the gateway, this process's and every other writer's of the file. */
  of (tenant: string): ReadonlySet<string> {
    this.catchUp()
    return this.ids.get(tenant) ?? new Set()
  }

  private add (tenant: string, id: string): void {
    let set = this.ids.get(tenant)
    if (set === undefined) this.ids.set(tenant, set = new Set())
    set.delete(id)
    set.add(id)
    if (set.size > PER_TENANT) set.delete(set.values().next().value!)
  }

  /** Reads what was appended to the file since the last time, whole lines only. */
  private catchUp (): void {
    if (this.file === null) return
    let fd: number
    try { fd = fs.openSync(this.file, 'r') } catch { return }
    try {
      const size = fs.fstatSync(fd).size
      if (size < this.offset) this.offset = 0 // replaced by a shorter file: read it again
      if (size === this.offset) return
      const buf = Buffer.alloc(size - this.offset)
      const n = fs.readSync(fd, buf, 0, buf.length, this.offset)
      const end = buf.subarray(0, n).lastIndexOf(0x0a)
      if (end < 0) return
      for (const line of buf.subarray(0, end).toString('utf8').split('\n')) {
        try {
          const r = JSON.parse(line)
          if (typeof r?.tenant === 'string' && typeof r?.id === 'string' && /^sha256:[0-9a-f]{64}$/.test(r.id)) this.add(r.tenant, r.id)
        } catch {}
      }
      this.offset += end + 1
    } finally {
      fs.closeSync(fd)
    }
  }
}
