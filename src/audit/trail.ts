/**
 * The audit trail: a hash-chained JSON-lines file written synchronously through a
 * pino destination (SonicBoom, `sync: true`), optionally mirrored to stdout (also
 * synchronous) and to a pino transport (asynchronous, not part of the durable record).
 *
 * `append` returns only when the record's bytes are in the file (and, with
 * `fsync: true`, on disk); it throws AuditWriteError when they cannot be written, and
 * the caller fails the request (`onFailure: closed`, the default). With
 * `onFailure: open` the record is dropped, counted, and the count is written into the
 * chain.head of the file that is started once writing works again.
 *
 * `commit` is the gateway's way (group commit): the record is built at once, and every
 * record committed in one turn of the event loop is chained and written with one write
 * (and one seal) in a `setImmediate`, in the order committed; each promise settles once
 * the write that holds its record has returned (true), or failed (rejects with
 * AuditWriteError, or false with `onFailure: open`). A group holds at most GROUP_MAX
 * records, so a stop between a group's write and its seal leaves at most that many
 * records unsealed, which the next start seals (with a warning), as it did one record.
 *
 * Files: the first record of every file is a `chain.head` naming the file it
 * continues (its name when closed) and linking to that file's last hash through
 * `prev`; rotation writes a `chain.end` naming the new name, renames the file to
 * `<file>.<UTC timestamp>` and starts a new file. The seal `<file>.seal` is rewritten
 * after every record (see chain.ts) and travels with its file when it is renamed.
 *
 * Start-up continues the existing file when its first line is a chain.head, its last
 * line is a sound record and the seal agrees; anything else (a cut-off last line, a
 * record that does not verify, a file shorter than its seal says) is logged loudly,
 * the file is renamed aside as evidence, and a new file starts with a head whose
 * `problem` says what was found. The same happens, without a restart, after a write
 * failure and when the live file is removed, replaced or changed by another process
 * (checked before every append and every group: same inode, same size as last written;
 * healthy() shares one such check among the calls of one event-loop turn).
 *
 * One writer per file: two processes appending to the same file break the chain.
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import pino, { type Logger } from 'pino'
import type { AuditConfig, AuditFailurePolicy, AuditLevel } from '../config/types'
import { chainLine, parseLine, readSealFile, sealPath, sealSlot, splitLines, type ParsedLine, type Seal } from './chain'
import { buildRecord, recordJson, type AuditInput, type AuditRecord, type ChainInfo, type ChainRecord } from './record'

/** The defaults of the audit keys a config may leave out (as in src/config AUDIT_DEFAULTS). */
const DEFAULT_FSYNC = false
const DEFAULT_ON_FAILURE: AuditFailurePolicy = 'closed'
const DEFAULT_REDACT_ENV = true

export class AuditWriteError extends Error {
  /** errno code (`ENOSPC`, `EACCES`, `ENOTDIR`, `EPIPE`...) or an AUDIT_* code. */
  readonly code: string
  readonly sink: 'file' | 'stdout'
  constructor (message: string, code: string, sink: 'file' | 'stdout', cause?: unknown) {
    super(message, cause === undefined ? undefined : { cause })
    this.name = 'AuditWriteError'
    this.code = code
    this.sink = sink
  }
}

export interface AuditTrailOptions {
  /** The stdout sink's file descriptor (default 1). */
  readonly stdoutFd?: number
  /** Clock for chain records and rotation, in ms since the epoch (default Date.now). */
  readonly now?: () => number
  /** Least time between two re-open attempts by healthy() after a failure (default 1000 ms). */
  readonly retryMs?: number
}

export interface AuditTrailStatus {
  readonly healthy: boolean
  readonly file: string | null
  /** seq and hash of the last record written. */
  readonly seq: number | null
  readonly hash: string | null
  /** Records that could not be written (onFailure: open) since start. */
  readonly dropped: number
  /** Write failures since start. */
  readonly failures: number
  readonly lastError: string | null
}

type Destination = ReturnType<typeof pino.destination>
type Transport = ReturnType<typeof pino.transport>

interface Live {
  readonly fd: number
  readonly sealFd: number
  readonly dest: Destination
  readonly ino: number
  readonly dev: number
  /** Bytes in the file after the last record written. */
  size: number
  /** When the file was started (its head's time), for age rotation. */
  openedAt: number
  /** Records after the head. */
  records: number
  /** The destination's last error, set by its 'error' listener. */
  err: NodeJS.ErrnoException | null
}

interface Pending {
  readonly json: string
  readonly resolve: (written: boolean) => void
  readonly reject: (err: AuditWriteError) => void
}

interface Found {
  head: ParsedLine | null
  /** The last sound record found at the end of the file. */
  last: ParsedLine | null
  problem: string | null
  warning: string | null
}

const O_APPEND_CREATE = fs.constants.O_WRONLY | fs.constants.O_APPEND | fs.constants.O_CREAT
const O_SEAL = fs.constants.O_RDWR | fs.constants.O_CREAT
const FILE_MODE = 0o600
const TAIL_CHUNK = 64 * 1024
/**
 * Most records chained and written with one write (and sealed with one seal): more
 * committed in one turn are written as several groups. It also bounds how many
 * records a start-up seals after a stop between a write and its seal.
 */
export const GROUP_MAX = 256
const HEAD_READ_MAX = 1024 * 1024

function errno (err: unknown): string {
  const code = (err as NodeJS.ErrnoException)?.code
  return typeof code === 'string' ? code : 'AUDIT_WRITE_FAILED'
}

function describe (err: unknown): string {
  return err instanceof Error ? err.message : String(err)
}

function toWriteError (err: unknown, sink: 'file' | 'stdout' = 'file'): AuditWriteError {
  if (err instanceof AuditWriteError) return err
  return new AuditWriteError(`audit trail: ${describe(err)}`, errno(err), sink, err)
}

/** Complete lines at the end of a file (at most `want`, fewer if the file has fewer), and any cut-off line after them. */
function readTail (fd: number, size: number, want: number): { lines: Buffer[], partial: Buffer | null } {
  let pos = size
  let buf = Buffer.alloc(0)
  let newlines = 0
  while (pos > 0 && newlines <= want) {
    const n = Math.min(TAIL_CHUNK, pos)
    const chunk = Buffer.alloc(n)
    fs.readSync(fd, chunk, 0, n, pos - n)
    pos -= n
    for (const b of chunk) if (b === 0x0a) newlines++
    buf = Buffer.concat([chunk, buf])
  }
  // Unless we reached the start of the file, the first piece is the end of an earlier line.
  if (pos > 0) buf = buf.subarray(buf.indexOf(0x0a) + 1)
  const { lines, partial } = splitLines(buf)
  return { lines: lines.slice(-want), partial }
}

/**
 * Whether the records after the sealed one are what a stop between a group's write and
 * its seal leaves: at most GROUP_MAX whole records, chained from the sealed record,
 * which ends exactly where the seal says the file ended.
 */
function unsealedGroup (lines: Buffer[], size: number, seal: Seal, last: ParsedLine): boolean {
  const n = last.record.seq - seal.seq
  if (n < 1 || n > GROUP_MAX || lines.length < n + 1) return false
  let end = size
  let next: ParsedLine = last
  for (let i = lines.length - 1; i >= lines.length - n; i--) {
    const p = i === lines.length - 1 ? last : parseLine(lines[i])
    if (!('record' in p) || p.record.seq !== seal.seq + (i - (lines.length - n - 1)) || (p !== last && next.record.prev !== p.hash)) return false
    next = p
    end -= lines[i].length + 1
  }
  const sealed = parseLine(lines[lines.length - n - 1])
  return 'record' in sealed && sealed.hash === seal.hash && next.record.prev === seal.hash && end === seal.size
}

function readFirstLine (fd: number, size: number): Buffer | null {
  const n = Math.min(size, HEAD_READ_MAX)
  const buf = Buffer.alloc(n)
  fs.readSync(fd, buf, 0, n, 0)
  const nl = buf.indexOf(0x0a)
  return nl < 0 ? null : buf.subarray(0, nl)
}

/** A record's size in the file: its JSON and what chaining adds (seq, prev, hash). */
function estimateBytes (json: string): number {
  return Buffer.byteLength(json) + 180
}

function timestamp (ms: number): string {
  // 2026-11-22T10-15-30.123Z: sortable, no colons (portable file names).
  return new Date(ms).toISOString().replace(/:/g, '-')
}

export class AuditTrail {
  readonly file: string | null
  readonly level: AuditLevel
  readonly onFailure: AuditFailurePolicy
  readonly redactEnv: boolean
  private readonly fsync: boolean
  private readonly maxBytes: number | undefined
  private readonly maxAgeMs: number | undefined
  private readonly now: () => number
  private readonly retryMs: number
  private readonly stdoutFd: number | null

  /** seq and hash of the last record written (-1 / null: none yet). */
  private seq = -1
  private hash: string | null = null
  private live: Live | null = null
  private stdoutDest: Destination | null = null
  private stdoutErr: NodeJS.ErrnoException | null = null
  private stdoutFailedAt = 0
  private transportLog: Logger | null = null
  private transportStream: Transport | null = null
  /** The failure the trail has not recovered from; the next file's head records it. */
  private broken: AuditWriteError | null = null
  private incident: string | null = null
  private lastRetry = 0
  private dropped = 0
  private droppedSinceHead = 0
  private failures = 0
  private closed = false
  /** Records committed this turn, written together by the scheduled flush (commit). */
  private pending: Pending[] = []
  private flushScheduled = false
  /**
   * Whether the live file was found to be ours (checkLive) during this turn of the
   * event loop: healthy() and the turn's group share that check (cleared by the flush).
   */
  private checkedThisTurn = false

  private constructor (cfg: AuditConfig, private readonly log: Logger, opts: AuditTrailOptions) {
    this.file = cfg.file ?? null
    this.level = cfg.level
    this.onFailure = cfg.onFailure ?? DEFAULT_ON_FAILURE
    this.redactEnv = cfg.redactEnv ?? DEFAULT_REDACT_ENV
    this.fsync = cfg.fsync ?? DEFAULT_FSYNC
    this.maxBytes = cfg.rotate?.maxBytes
    this.maxAgeMs = cfg.rotate?.maxAgeSeconds === undefined ? undefined : cfg.rotate.maxAgeSeconds * 1000
    this.now = opts.now ?? Date.now
    this.retryMs = opts.retryMs ?? 1000
    this.stdoutFd = cfg.stdout === true ? (opts.stdoutFd ?? 1) : null
  }

  /**
   * Open the trail: continue (or start) the file's chain, set up stdout and the
   * transport. Throws AuditWriteError when the file cannot be written and onFailure
   * is `closed` (the gateway should not start); with `open` the trail starts
   * unhealthy and retries on the next append.
   */
  static open (cfg: AuditConfig, log: Logger, opts: AuditTrailOptions = {}): AuditTrail {
    const trail = new AuditTrail(cfg, log, opts)
    if (cfg.transport !== undefined) trail.openTransport(cfg.transport)
    try {
      if (trail.file !== null) trail.openLive(null)
      else if (trail.stdoutFd !== null) trail.writeChained(trail.chainRecord('chain.head', { reason: 'new', prevFile: null, prevSeq: null, writer: trail.writer() }))
    } catch (err) {
      const e = toWriteError(err)
      trail.noteFailure(e)
      if (trail.onFailure === 'closed') {
        trail.closeLive()
        trail.closeTransport()
        throw e
      }
    }
    return trail
  }

  /** Build the record for `input` at this trail's level and redaction, and append it. */
  record (input: AuditInput): boolean {
    return this.append(buildRecord(input, this.level, { redactEnv: this.redactEnv }))
  }

  /**
   * Build the record for `input` now (what it says is what the request is at this
   * moment) and write it with the others committed in this turn of the event loop.
   * Resolves true once its group is written, false when it was dropped (onFailure:
   * open); rejects with AuditWriteError when it could not be written (closed). The
   * caller completes the answer only after it settles.
   */
  async commit (input: AuditInput): Promise<boolean> {
    const json = recordJson(buildRecord(input, this.level, { redactEnv: this.redactEnv }))
    return await new Promise<boolean>((resolve, reject) => {
      this.pending.push({ json, resolve, reject })
      this.scheduleFlush()
    })
  }

  /**
   * Write one record. When this returns, the line is in the file (and on stdout).
   * Throws AuditWriteError when it cannot be written and onFailure is `closed`.
   * Records committed before it and not yet written go first, in the same write.
   */
  /** Returns false when the record was dropped (onFailure: open); throws when it must not be (closed). */
  append (record: AuditRecord): boolean {
    let outcome: { written: boolean } | { error: AuditWriteError } = { written: false }
    this.pending.push({ json: recordJson(record), resolve: (written) => { outcome = { written } }, reject: (error) => { outcome = { error } } })
    this.flush(true)
    if ('error' in outcome) throw outcome.error
    return outcome.written
  }

  private scheduleFlush (): void {
    if (this.flushScheduled) return
    this.flushScheduled = true
    setImmediate(() => {
      this.flushScheduled = false
      this.flush(false)
      this.checkedThisTurn = false
    })
  }

  /**
   * Write what is pending, in groups of at most GROUP_MAX records. `check`: whether the
   * live file is checked again even if it was checked this turn (append: every call).
   */
  private flush (check: boolean): void {
    while (this.pending.length > 0) {
      const group = this.pending.splice(0, GROUP_MAX)
      if (this.closed) {
        this.settle(group, new AuditWriteError('audit trail: closed', 'AUDIT_CLOSED', 'file'), false)
        continue
      }
      try {
        this.writeGroup(group.map((p) => p.json), check || !this.checkedThisTurn)
        this.recovered()
      } catch (err) {
        const e = toWriteError(err)
        this.noteFailure(e)
        this.settle(group, e, true)
        continue
      }
      for (const p of group) p.resolve(true)
    }
  }

  /** A group that was not written: rejected (onFailure: closed) or dropped and counted (open). */
  private settle (group: Pending[], e: AuditWriteError, sinceHead: boolean): void {
    if (this.onFailure === 'closed') {
      for (const p of group) p.reject(e)
      return
    }
    this.dropped += group.length
    if (sinceHead) this.droppedSinceHead += group.length
    for (const p of group) p.resolve(false)
  }

  /** Check the live file (`check`), rotate where due, chain and write the records. */
  private writeGroup (jsons: string[], check: boolean): void {
    if (this.file === null) {
      this.writeChained(jsons)
      return
    }
    if (this.live === null) this.openLive(this.incident ?? 'the audit file was not open')
    else if (check) this.checkLive()
    // A rotation falls between two records of a group, as it would between two appends.
    let start = 0
    while (start < jsons.length) {
      let estimate = estimateBytes(jsons[start])
      this.maybeRotate(estimate)
      let end = start + 1
      while (end < jsons.length) {
        const next = estimateBytes(jsons[end])
        if (this.maxBytes !== undefined && this.live!.size + estimate + next > this.maxBytes) break
        estimate += next
        end++
      }
      this.writeChained(start === 0 && end === jsons.length ? jsons : jsons.slice(start, end))
      start = end
    }
  }

  /**
   * Whether an append is expected to succeed now. After a failure of the file sink it
   * re-opens the file (at most every retryMs), which starts a new file whose head
   * records the failure; after a stdout failure it says false for retryMs, then lets
   * the next append try again.
   */
  healthy (): boolean {
    if (this.closed) return false
    if (this.stdoutErr !== null && this.now() - this.stdoutFailedAt < this.retryMs) return false
    if (this.file === null) return this.stdoutErr === null || this.now() - this.stdoutFailedAt >= this.retryMs
    if (this.live !== null && this.broken === null) {
      // The same cheap check an append makes (one stat): a file removed, replaced or
      // changed under the trail is found before the engine acts, not after. Once per
      // turn of the event loop: the requests checked in one turn are as close together
      // as the stat and the write of one request are, and the turn's group (written in
      // this turn's setImmediate) rides on the same check.
      if (this.checkedThisTurn) return true
      try {
        this.checkLive()
        this.checkedThisTurn = true
        this.scheduleFlush()
        return true
      } catch (err) {
        this.noteFailure(toWriteError(err))
        return false
      }
    }
    const now = this.now()
    if (now - this.lastRetry < this.retryMs) return false
    this.lastRetry = now
    try {
      if (this.live === null) this.openLive(this.incident ?? 'the audit file was not open')
      this.recovered()
      return true
    } catch (err) {
      this.noteFailure(toWriteError(err))
      return false
    }
  }

  status (): AuditTrailStatus {
    return {
      healthy: !this.closed && this.broken === null && this.stdoutErr === null && (this.file === null || this.live !== null),
      file: this.file,
      seq: this.seq >= 0 ? this.seq : null,
      hash: this.hash,
      dropped: this.dropped,
      failures: this.failures,
      lastError: this.broken?.message ?? (this.stdoutErr ? `stdout: ${this.stdoutErr.message}` : null),
    }
  }

  /** Close the file (the chain continues from it at the next start) and flush the transport. */
  async close (): Promise<void> {
    if (this.closed) return
    // Records committed and not yet written go out first.
    this.flush(true)
    this.closed = true
    this.closeLive()
    await this.closeTransport()
  }

  // -------------------------------------------------------------------------
  // Writing

  private writer (): { host: string, pid: number } {
    return { host: os.hostname(), pid: process.pid }
  }

  private chainRecord (event: ChainRecord['event'], chain: ChainInfo): string {
    const r: ChainRecord = { v: 1, time: new Date(this.now()).toISOString(), event, chain }
    return recordJson(r)
  }

  /** Chain records' JSON and write them to every sink, one write per sink (and one seal). */
  private writeChained (jsons: string | string[]): void {
    const list = typeof jsons === 'string' ? [jsons] : jsons
    let seq = this.seq
    let hash = this.hash
    let text = ''
    /** Size and hash after the record before the last (the seal's other slot), when there are two or more. */
    let before: { seq: number, hash: string, bytes: number } | null = null
    for (let i = 0; i < list.length; i++) {
      if (i > 0 && i === list.length - 1) before = { seq, hash: hash!, bytes: Buffer.byteLength(text) }
      const c = chainLine(list[i], ++seq, hash)
      text += c.line
      hash = c.hash
    }
    const live = this.live
    if (live !== null) {
      this.writeFile(live, text)
      const start = live.size
      live.size += Buffer.byteLength(text)
      this.seq = seq
      this.hash = hash
      live.records += list.length
      // The record before the last is sealed first, in the other slot: a torn write of
      // the last one's slot then leaves the seal one record behind, as with one record.
      if (before !== null) this.writeSeal(live, { seq: before.seq, size: start + before.bytes, hash: before.hash })
      this.writeSeal(live, { seq, size: live.size, hash: hash! })
    }
    if (this.stdoutFd !== null) {
      this.writeStdout(text)
      if (live === null) { this.seq = seq; this.hash = hash }
    }
    if (this.transportLog !== null) for (const line of text.split('\n').slice(0, -1)) this.writeTransport(`${line}\n`)
  }

  private destination (fd: number): Destination {
    return pino.destination({ dest: fd, sync: true, fsync: this.fsync, minLength: 0 })
  }

  private writeFile (live: Live, line: string): void {
    live.err = null
    try {
      live.dest.write(line)
    } catch (err) {
      live.err = err as NodeJS.ErrnoException
    }
    if (live.err === null) return
    const err = live.err
    // Take back a partly written line, so that the file still ends on a whole record.
    try { fs.ftruncateSync(live.fd, live.size) } catch { /* the next open finds and reports it */ }
    this.closeLive()
    throw new AuditWriteError(`audit trail: cannot write ${this.file}: ${err.message}`, errno(err), 'file', err)
  }

  private writeSeal (live: Live, seal: Seal = { seq: this.seq, size: live.size, hash: this.hash! }): void {
    const { offset, bytes } = sealSlot(seal)
    try {
      fs.writeSync(live.sealFd, bytes, 0, bytes.length, offset)
    } catch (err) {
      this.closeLive()
      this.incident = `the seal could not be written (${describe(err)})`
      throw new AuditWriteError(`audit trail: cannot write the seal ${sealPath(this.file!)}: ${describe(err)}`, errno(err), 'file', err)
    }
  }

  private writeStdout (line: string): void {
    if (this.stdoutDest === null) {
      const dest = pino.destination({ dest: this.stdoutFd!, sync: true, minLength: 0 })
      dest.on('error', (err: NodeJS.ErrnoException) => { this.stdoutErr = err })
      this.stdoutDest = dest
    }
    this.stdoutErr = null
    try {
      this.stdoutDest.write(line)
    } catch (err) {
      this.stdoutErr = err as NodeJS.ErrnoException
    }
    if (this.stdoutErr === null) return
    const err: NodeJS.ErrnoException = this.stdoutErr
    this.stdoutFailedAt = this.now()
    // The destination keeps the failed bytes for its next write; start afresh instead.
    this.stdoutDest = null
    throw new AuditWriteError(`audit trail: cannot write to stdout: ${err.message}`, errno(err), 'stdout', err)
  }

  private openTransport (t: NonNullable<AuditConfig['transport']>): void {
    try {
      const stream = pino.transport({ target: t.target, options: t.options ?? {} })
      stream.on('error', (err: Error) => this.log.error({ audit: { transport: t.target, error: err.message } }, 'audit transport failed; the file and stdout sinks are not affected'))
      this.transportStream = stream
      this.transportLog = pino({ base: null, timestamp: false }, stream)
    } catch (err) {
      this.log.error({ audit: { transport: t.target, error: describe(err) } }, 'audit transport could not be started; continuing without it')
    }
  }

  private writeTransport (line: string): void {
    try {
      this.transportLog!.info(JSON.parse(line) as object, 'audit')
    } catch (err) {
      this.log.warn({ audit: { error: describe(err) } }, 'audit transport write failed')
    }
  }

  private async closeTransport (): Promise<void> {
    const stream = this.transportStream
    this.transportStream = null
    this.transportLog = null
    if (stream === null) return
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, 5000)
      stream.once('close', () => { clearTimeout(timer); resolve() })
      stream.once('error', () => { clearTimeout(timer); resolve() })
      stream.end()
    })
  }

  private noteFailure (e: AuditWriteError): void {
    this.failures++
    if (e.sink === 'file') {
      if (this.broken === null) {
        this.log.error({ audit: { file: this.file, code: e.code, error: e.message, onFailure: this.onFailure } },
          this.onFailure === 'closed' ? 'AUDIT TRAIL FAILED: requests are refused until records can be written again' : 'AUDIT TRAIL FAILED: records are being dropped (onFailure: open)')
      }
      this.broken = e
      this.incident ??= `writing failed: ${e.message}`
    } else {
      this.log.error({ audit: { sink: 'stdout', code: e.code, error: e.message } }, 'AUDIT TRAIL FAILED: cannot write records to stdout')
    }
  }

  private recovered (): void {
    if (this.broken !== null) {
      this.log.warn({ audit: { file: this.file, seq: this.seq, dropped: this.dropped } }, 'audit trail: writing works again')
      this.broken = null
    }
    this.incident = null
  }

  // -------------------------------------------------------------------------
  // Files

  private closeLive (): void {
    const live = this.live
    this.live = null
    if (live === null) return
    // The destination is left alone: it would close the descriptor again, later.
    try { fs.closeSync(live.fd) } catch { /* already gone */ }
    try { fs.closeSync(live.sealFd) } catch { /* already gone */ }
  }

  /** Before an append: is the live file still the one we write, as we left it? */
  private checkLive (): void {
    const live = this.live!
    let st: fs.Stats | undefined
    try {
      st = fs.statSync(this.file!, { throwIfNoEntry: false })
    } catch {
      st = undefined
    }
    let problem: string | null = null
    if (st === undefined) problem = 'the audit file was removed or moved away while it was being written'
    else if (st.ino !== live.ino || st.dev !== live.dev) problem = 'the audit file was replaced by another file while it was being written'
    else if (st.size !== live.size) problem = `the audit file was changed by another process (${st.size} bytes, ${live.size} written)`
    if (problem === null) return
    this.log.error({ audit: { file: this.file, problem } }, `AUDIT TRAIL TAMPERING OR INTERFERENCE: ${problem}; starting a new file`)
    this.closeLive()
    this.openLive(problem)
  }

  private maybeRotate (estimate: number): void {
    const live = this.live
    if (live === null || live.records === 0) return
    let reason: string | null = null
    if (this.maxBytes !== undefined && live.size + estimate > this.maxBytes) reason = 'size'
    else if (this.maxAgeMs !== undefined && this.now() - live.openedAt >= this.maxAgeMs) reason = 'age'
    if (reason !== null) this.rotate(reason)
  }

  private asideName (file: string): string {
    const base = `${file}.${timestamp(this.now())}`
    let name = base
    for (let i = 1; fs.existsSync(name) || fs.existsSync(sealPath(name)); i++) name = `${base}-${i}`
    return name
  }

  /** Rename the file (and its seal) to `<file>.<timestamp>`; returns the new path. */
  private moveAside (file: string): string {
    const aside = this.asideName(file)
    fs.renameSync(file, aside)
    try {
      fs.renameSync(sealPath(file), sealPath(aside))
    } catch (err) {
      if (errno(err) !== 'ENOENT') throw err
    }
    return aside
  }

  private rotate (reason: string): void {
    const file = this.file!
    const aside = this.asideName(file)
    this.writeChained(this.chainRecord('chain.end', { reason, renamedTo: path.basename(aside) }))
    this.closeLive()
    try {
      fs.renameSync(file, aside)
    } catch (err) {
      this.incident = `rotation failed: cannot rename ${file}: ${describe(err)}`
      throw err
    }
    try {
      fs.renameSync(sealPath(file), sealPath(aside))
    } catch (err) {
      if (errno(err) !== 'ENOENT') this.log.warn({ audit: { file, error: describe(err) } }, 'audit trail: could not move the seal with its file')
    }
    this.startFile(file, { reason: 'rotate', prevFile: path.basename(aside), prevSeq: this.seq })
  }

  /** Create the file and write its head (the state says what it links to). */
  private startFile (file: string, info: ChainInfo): void {
    const fd = fs.openSync(file, O_APPEND_CREATE, FILE_MODE)
    let sealFd: number
    try {
      sealFd = fs.openSync(sealPath(file), O_SEAL | fs.constants.O_TRUNC, FILE_MODE)
    } catch (err) {
      fs.closeSync(fd)
      throw err
    }
    const st = fs.fstatSync(fd)
    const live = this.makeLive(fd, sealFd, st)
    live.openedAt = this.now()
    live.records = -1 // the head does not count
    if (this.droppedSinceHead > 0 && info.reason === 'recover') info.dropped = this.droppedSinceHead
    info.writer = this.writer()
    this.writeChained(this.chainRecord('chain.head', info))
    this.droppedSinceHead = 0
  }

  private makeLive (fd: number, sealFd: number, st: fs.Stats): Live {
    const live: Live = { fd, sealFd, dest: this.destination(fd), ino: st.ino, dev: st.dev, size: st.size, openedAt: 0, records: 0, err: null }
    live.dest.on('error', (err: NodeJS.ErrnoException) => { live.err = err })
    this.live = live
    return live
  }

  /** What is at the start and the end of an existing file, and whether it can be continued. */
  private inspect (file: string, size: number, seal: Seal | 'corrupt' | null): Found {
    const found: Found = { head: null, last: null, problem: null, warning: null }
    const fd = fs.openSync(file, 'r')
    try {
      const first = readFirstLine(fd, size)
      const head = first === null ? null : parseLine(first)
      if (head !== null && 'record' in head && head.record.event === 'chain.head') found.head = head
      else found.problem = `its first line is not a sound chain.head record${head !== null && 'problem' in head ? ` (${head.problem})` : ''}`
      const { lines, partial } = readTail(fd, size, GROUP_MAX + 2)
      for (let i = lines.length - 1; i >= 0 && found.last === null; i--) {
        const p = parseLine(lines[i])
        if ('record' in p) found.last = p
        else if (i === lines.length - 1) found.problem ??= `its last line is not a sound record (${p.problem})`
      }
      if (partial !== null) found.problem = `it ends with an incomplete line (${partial.length} bytes without a newline): a write was cut short, or the file was truncated`
      if (found.last === null) { found.problem ??= 'no sound record at its end'; return found }
      if (found.problem !== null) return found
      const last = found.last
      if (seal === null) {
        found.warning = `no seal ${sealPath(file)}: records cut off its end before now cannot be detected; a new seal is written`
      } else if (seal === 'corrupt') {
        found.problem = `its seal ${sealPath(file)} is unreadable`
      } else if (seal.seq > last.record.seq) {
        found.problem = `it was truncated: it ends with record ${last.record.seq}, its seal says record ${seal.seq} was written`
      } else if (seal.seq === last.record.seq) {
        if (seal.hash !== last.hash || seal.size !== size) found.problem = `its last record (seq ${seal.seq}) is not the one sealed`
      } else if (unsealedGroup(lines, size, seal, last)) {
        const n = last.record.seq - seal.seq
        found.warning = n === 1
          ? `the last record (seq ${last.record.seq}) was written but not sealed (the gateway stopped in between); sealing it now`
          : `the last ${n} records (seq ${seal.seq + 1} to ${last.record.seq}) were written but not sealed (the gateway stopped between a group's write and its seal); sealing them now`
      } else {
        found.problem = `records after seq ${seal.seq} are not sealed (written by another process?)`
      }
      return found
    } finally {
      fs.closeSync(fd)
    }
  }

  /**
   * Open the live file: continue its chain, or start a new file linked to whatever
   * came before. `incident` (after a failure or interference) always starts a new file.
   */
  private openLive (incident: string | null): void {
    const file = this.file!
    fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o750 })
    const st = fs.statSync(file, { throwIfNoEntry: false })
    if (st !== undefined && !st.isFile()) throw new AuditWriteError(`audit trail: ${file} is not a regular file`, 'AUDIT_NOT_A_FILE', 'file')
    const seal = readSealFile(file)
    let prevSeq: number | null = this.seq >= 0 ? this.seq : null
    let info: ChainInfo

    if (st === undefined || st.size === 0) {
      if (incident !== null) {
        info = { reason: 'recover', prevFile: prevSeq === null ? null : path.basename(file), prevSeq, problem: incident }
      } else if (seal !== null && seal !== 'corrupt' && this.hash === null) {
        const problem = `the audit file is ${st === undefined ? 'missing' : 'empty'} but its seal says record ${seal.seq} was written: it was deleted or truncated`
        this.log.error({ audit: { file, problem } }, `AUDIT TRAIL TAMPERING OR LOSS: ${problem}`)
        this.hash = seal.hash
        this.seq = seal.seq
        prevSeq = seal.seq
        info = { reason: 'recover', prevFile: path.basename(file), prevSeq, problem }
      } else {
        info = { reason: 'new', prevFile: null, prevSeq: null }
      }
      this.startFile(file, info)
      return
    }

    const found = this.inspect(file, st.size, seal)
    if (incident === null && found.problem === null && this.hash === null && found.last!.record.event !== 'chain.end') {
      // Continue the chain in the same file.
      if (found.warning !== null) this.log.warn({ audit: { file } }, `audit trail: ${found.warning}`)
      const fd = fs.openSync(file, O_APPEND_CREATE, FILE_MODE)
      let sealFd: number
      try {
        sealFd = fs.openSync(sealPath(file), O_SEAL, FILE_MODE)
      } catch (err) {
        fs.closeSync(fd)
        throw err
      }
      const live = this.makeLive(fd, sealFd, fs.fstatSync(fd))
      const last = found.last!
      const openedAt = Date.parse(found.head!.record.time)
      live.openedAt = Number.isNaN(openedAt) ? this.now() : openedAt
      live.records = last.record.seq - found.head!.record.seq
      this.seq = last.record.seq
      this.hash = last.hash
      if (seal === null || seal === 'corrupt' || seal.seq !== this.seq) this.writeSeal(live)
      return
    }

    let problem = incident ?? found.problem
    if (this.hash === null) {
      // At start-up: link to the furthest point the old file (or its seal) shows.
      const last = found.last
      if (seal !== null && seal !== 'corrupt' && (last === null || seal.seq > last.record.seq)) {
        this.seq = seal.seq
        this.hash = seal.hash
      } else if (last !== null) {
        this.seq = Math.max(this.seq, last.record.seq)
        this.hash = last.hash
      }
      prevSeq = this.seq >= 0 ? this.seq : null
    }
    const aside = this.moveAside(file)
    if (problem === null && found.last?.record.event === 'chain.end') {
      // A rotation that stopped after its chain.end: finish it.
      info = { reason: 'rotate', prevFile: path.basename(aside), prevSeq }
    } else {
      problem ??= 'the file could not be continued'
      this.log.error({ audit: { file, movedTo: aside, problem } }, `AUDIT TRAIL: ${file} cannot be continued (${problem}); it was kept as ${aside} and a new file started`)
      info = { reason: 'recover', prevFile: path.basename(aside), prevSeq, problem }
    }
    this.startFile(file, info)
  }
}
