/**
 * The hash chain's line format and the seal, shared by the writer (trail.ts) and the
 * verifier (verify.ts).
 *
 * A stored line is the record's JSON with `seq` right after `v`, `prev` and then
 * `hash` as its last two members, and a newline:
 *
 *   {"v":1,"seq":42,"time":"...",...,"prev":"<64 hex>","hash":"<64 hex>"}\n
 *
 *   C    = the line without its `,"hash":"…"` member: {"v":1,"seq":42,...,"prev":"…"}
 *   hash = sha256(C), lower-case hex
 *   prev = the previous record's hash (null for the first record of a new chain)
 *
 * C contains `prev`, so each hash covers the whole history before it. The verifier
 * recomputes the hash from the line's own bytes (strip the fixed-size 75-byte
 * suffix, append `}`), so it does not depend on how a JSON library orders keys or
 * prints numbers; any tool can do the same.
 *
 * The seal (`<file>.seal`) records the newest record of the live file: its seq, hash
 * and the file size after it, so that cutting records off the end of the file (which
 * the chain alone cannot show) is detected. It is two fixed 256-byte slots, written
 * in turn (slot seq % 2) with one pwrite each; each slot carries a checksum, so a
 * torn write can only spoil the slot being written, and the other still holds the
 * record before.
 */
import crypto, { createHash } from 'node:crypto'
import fs from 'node:fs'

export const HASH_HEX = /^[0-9a-f]{64}$/
/** `,"hash":"` + 64 hex + `"}` */
export const HASH_SUFFIX_BYTES = 75
const SUFFIX = /^,"hash":"([0-9a-f]{64})"\}$/
const PREFIX = '{"v":1,'

export function sha256hex (data: string | Buffer): string {
  return oneShot !== undefined ? oneShot('sha256', data, 'hex') : createHash('sha256').update(data).digest('hex')
}

/** Node's one-shot hash (20.12 and later): the same digest without a Hash object per record. */
const oneShot = typeof crypto.hash === 'function' ? crypto.hash : undefined

export interface ChainedLine {
  /** The line, newline included. */
  readonly line: string
  readonly hash: string
}

/**
 * Chain a record: `json` is the record's JSON starting with `{"v":1,` (recordJson),
 * without seq, prev or hash.
 */
export function chainLine (json: string, seq: number, prev: string | null): ChainedLine {
  if (!json.startsWith(PREFIX) || !json.endsWith('}')) throw new TypeError('an audit record must be a JSON object starting with "v":1')
  const c = `{"v":1,"seq":${seq},${json.slice(PREFIX.length, -1)},"prev":${prev === null ? 'null' : `"${prev}"`}}`
  const hash = sha256hex(c)
  return { line: `${c.slice(0, -1)},"hash":"${hash}"}\n`, hash }
}

export interface ParsedLine {
  readonly record: Record<string, unknown> & { v: 1, seq: number, prev: string | null, hash: string, event: string, time: string }
  readonly hash: string
}

/** Parse one line (without its newline) and check its hash. Returns the reason when it is not a sound record. */
export function parseLine (line: Buffer): ParsedLine | { problem: string } {
  if (line.length === 0) return { problem: 'empty line' }
  if (line.length < HASH_SUFFIX_BYTES + PREFIX.length) return { problem: 'not an audit record (too short)' }
  const suffix = line.toString('latin1', line.length - HASH_SUFFIX_BYTES)
  const m = SUFFIX.exec(suffix)
  if (m === null) return { problem: 'not an audit record (no "hash" at the end of the line)' }
  const hash = m[1]
  const actual = createHash('sha256').update(line.subarray(0, line.length - HASH_SUFFIX_BYTES)).update('}').digest('hex')
  let record: unknown
  try {
    record = JSON.parse(line.toString('utf8'))
  } catch {
    return { problem: 'not valid JSON' }
  }
  if (actual !== hash) return { problem: 'hash mismatch: the record was changed after it was written' }
  const r = record as Record<string, unknown>
  if (r === null || typeof r !== 'object' || Array.isArray(r)) return { problem: 'not a JSON object' }
  if (r.v !== 1) return { problem: `unknown record version ${JSON.stringify(r.v)}` }
  if (!line.subarray(0, PREFIX.length).equals(Buffer.from(PREFIX))) return { problem: 'record does not start with "v":1' }
  if (typeof r.seq !== 'number' || !Number.isSafeInteger(r.seq) || r.seq < 0) return { problem: 'no valid seq' }
  if (r.prev !== null && (typeof r.prev !== 'string' || !HASH_HEX.test(r.prev))) return { problem: 'no valid prev' }
  if (typeof r.event !== 'string') return { problem: 'no event' }
  if (typeof r.time !== 'string') return { problem: 'no time' }
  return { record: r as ParsedLine['record'], hash }
}

// ---------------------------------------------------------------------------
// Seal

export const SEAL_SLOT_BYTES = 256
export const SEAL_BYTES = 2 * SEAL_SLOT_BYTES

export interface Seal { readonly seq: number, readonly size: number, readonly hash: string }

function sealCheck (seq: number, size: number, hash: string): string {
  return sha256hex(`portcullis-seal:${seq}:${size}:${hash}`).slice(0, 16)
}

export function sealPath (file: string): string {
  return `${file}.seal`
}

/** The slot for the newest record: where to write it (offset) and what. */
export function sealSlot (s: Seal): { offset: number, bytes: Buffer } {
  const text = `{"v":1,"seq":${s.seq},"size":${s.size},"hash":"${s.hash}","check":"${sealCheck(s.seq, s.size, s.hash)}"}`
  const bytes = Buffer.alloc(SEAL_SLOT_BYTES, 0x20)
  bytes.write(text, 0, 'latin1')
  bytes[SEAL_SLOT_BYTES - 1] = 0x0a
  return { offset: (s.seq % 2) * SEAL_SLOT_BYTES, bytes }
}

/** The newest valid slot of a seal file's contents; 'corrupt' when no slot is valid. */
export function readSeal (data: Buffer): Seal | 'corrupt' {
  let best: Seal | null = null
  for (let i = 0; i < 2; i++) {
    const slot = data.subarray(i * SEAL_SLOT_BYTES, (i + 1) * SEAL_SLOT_BYTES)
    if (slot.length < SEAL_SLOT_BYTES) continue
    let v: { v?: unknown, seq?: unknown, size?: unknown, hash?: unknown, check?: unknown }
    try {
      v = JSON.parse(slot.toString('latin1').trim()) as typeof v
    } catch {
      continue
    }
    if (v.v !== 1 || typeof v.seq !== 'number' || !Number.isSafeInteger(v.seq) || v.seq % 2 !== i) continue
    if (typeof v.size !== 'number' || !Number.isSafeInteger(v.size) || typeof v.hash !== 'string' || !HASH_HEX.test(v.hash)) continue
    if (v.check !== sealCheck(v.seq, v.size, v.hash)) continue
    if (best === null || v.seq > best.seq) best = { seq: v.seq, size: v.size, hash: v.hash }
  }
  return best ?? 'corrupt'
}

/** A file's seal: null when there is none, 'corrupt' when no slot is valid. */
export function readSealFile (file: string): Seal | 'corrupt' | null {
  let data: Buffer
  try {
    data = fs.readFileSync(sealPath(file))
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null
    throw err
  }
  if (data.length === 0) return null
  return readSeal(data.length < SEAL_BYTES ? Buffer.concat([data, Buffer.alloc(SEAL_BYTES - data.length)]) : data)
}

// ---------------------------------------------------------------------------
// Reading files

/** Split file contents into lines; `partial` is what follows the last newline (a cut-off line). */
export function splitLines (data: Buffer): { lines: Buffer[], partial: Buffer | null } {
  const lines: Buffer[] = []
  let start = 0
  for (;;) {
    const nl = data.indexOf(0x0a, start)
    if (nl < 0) break
    lines.push(data.subarray(start, nl))
    start = nl + 1
  }
  return { lines, partial: start < data.length ? data.subarray(start) : null }
}
