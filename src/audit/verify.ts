/**
 * Verifying audit files: `portcullis audit verify FILE...`.
 *
 * The files may be given in any order: they are put in chain order by the seq of
 * their first record (every file starts with a chain.head whose seq follows the last
 * record of the file before), then walked line by line. Every line must be a sound
 * record whose hash matches its bytes, whose seq is one more than the line before and
 * whose `prev` is the hash of the line before; each file's head must link to the end
 * of the file before it; a file with a seal must end exactly at the sealed record.
 *
 * The first break is reported with its file and line and what it looks like:
 * modified (hash mismatch, or rewritten with a recomputed hash), deleted (seq jumps),
 * inserted (a second record claiming a place the chain continues past), reordered
 * (a later seq comes before an earlier one), truncated (a cut-off last line; a file
 * ending before its seal, or before where the next file's head says it ended).
 */
import fs from 'node:fs'
import path from 'node:path'
import { parseLine, readSealFile, sealPath, splitLines, type ParsedLine, type Seal } from './chain'

export interface VerifyProblem {
  readonly file: string
  /** 1-based line; for a cut-off end, the line after the last complete one. */
  readonly line: number
  readonly reason: string
}

export interface VerifyResult {
  readonly ok: boolean
  /** Sound records checked (all of them when ok). */
  readonly records: number
  readonly problem?: VerifyProblem
  /** The files in chain order (as far as they could be ordered). */
  readonly files: string[]
  /** Facts worth reading that are not breaks: where the chain starts, incidents recorded in heads. */
  readonly notes: string[]
}

export interface VerifyOptions {
  /**
   * The files are a capture (stdout, a collector's copy), not the gateway's own files:
   * the first may start mid-chain and the last needs no seal. Records cut off at
   * either end are then not detected.
   */
  readonly partial?: boolean
}

interface Line { readonly n: number, readonly parsed: ParsedLine | { problem: string } }
interface Loaded {
  readonly file: string
  readonly lines: Line[]
  readonly partial: Buffer | null
  readonly seal: Seal | 'corrupt' | null
  readonly size: number
  /** Where the file belongs in the chain: the seq its first line has (or would have). */
  readonly key: number
}

const sound = (l: Line | undefined): ParsedLine | null => (l !== undefined && 'record' in l.parsed ? l.parsed : null)

class Broken extends Error {
  constructor (readonly problem: VerifyProblem) { super(problem.reason) }
}

function fail (file: string, line: number, reason: string): never {
  throw new Broken({ file, line, reason })
}

function load (file: string): Loaded {
  let data: Buffer
  try {
    data = fs.readFileSync(file)
  } catch (err) {
    fail(file, 0, `cannot read the file (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`)
  }
  const { lines: raw, partial } = splitLines(data)
  const lines = raw.map((b, i) => ({ n: i + 1, parsed: parseLine(b) }))
  let seal: Seal | 'corrupt' | null
  try {
    seal = readSealFile(file)
  } catch (err) {
    fail(sealPath(file), 0, `cannot read the seal (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`)
  }
  if (lines.length === 0) {
    if (partial !== null) fail(file, 1, `truncated mid-line: the only line is incomplete (${partial.length} bytes without a newline)`)
    if (seal !== null && seal !== 'corrupt') fail(file, 1, `truncated: the file is empty, but its seal says record ${seal.seq} was written`)
    fail(file, 1, 'deleted: the file is empty (no chain.head, no records)')
  }
  let key: number | null = null
  for (let i = 0; i < Math.min(lines.length, 16) && key === null; i++) {
    const p = sound(lines[i])
    if (p !== null) key = p.record.seq - i
  }
  if (key === null) {
    const p = lines[0].parsed
    fail(file, 1, `modified: ${'problem' in p ? p.problem : 'no sound record'} (none of the first lines is a sound record, so the file cannot be placed in the chain)`)
  }
  return { file, lines, partial, seal, size: data.length, key }
}

/** The line, after index `from`, that has `seq`. */
function findSeq (lines: Line[], from: number, seq: number): Line | undefined {
  for (let j = from; j < lines.length; j++) if (sound(lines[j])?.record.seq === seq) return lines[j]
  return undefined
}

/**
 * Why `cur` (at index i) does not follow `prev` (at index i - 1, same file), named
 * from what the lines around them show.
 */
function classify (f: Loaded, i: number, prev: ParsedLine, cur: ParsedLine): never {
  const p = f.lines[i - 1].n
  const c = f.lines[i].n
  const expected = prev.record.seq + 1
  const next = sound(f.lines[i + 1])
  const seq = cur.record.seq

  if (seq === prev.record.seq && cur.record.prev === prev.record.prev) {
    // Two records claim the same place; the chain goes on from the genuine one.
    const sealed = f.seal !== null && f.seal !== 'corrupt' && f.seal.seq === seq ? f.seal.hash : null
    const curGenuine = next !== null ? next.record.prev === cur.hash : sealed === cur.hash
    if (curGenuine) fail(f.file, p, `inserted: line ${p} (seq ${seq}) is not part of the chain: line ${c} takes the same place and the chain continues from line ${c}`)
    fail(f.file, c, `inserted: line ${c} repeats seq ${seq}, whose place line ${p} already holds`)
  }
  if (cur.record.prev === prev.hash) {
    fail(f.file, c, `modified: line ${c} has seq ${seq} where ${expected} was expected (it links to line ${p}, so its seq was changed and its hash recomputed)`)
  }
  if (seq === expected) {
    if (next !== null && next.record.prev === cur.hash && next.record.seq === seq + 1) {
      fail(f.file, p, `modified: line ${p} was rewritten with a recomputed hash (line ${c} links to a different record)`)
    }
    fail(f.file, c, `modified: line ${c} does not link to line ${p} (its prev is not line ${p}'s hash)`)
  }
  if (seq > expected) {
    const later = findSeq(f.lines, i + 1, expected)
    if (later !== undefined) fail(f.file, c, `reordered: line ${c} has seq ${seq}, but seq ${expected} comes later (line ${later.n})`)
    const n = seq - expected
    fail(f.file, c, `deleted: seq jumps from ${prev.record.seq} (line ${p}) to ${seq}: ${n} record${n === 1 ? '' : 's'} missing before line ${c}`)
  }
  fail(f.file, c, `reordered: line ${c} has seq ${seq} after seq ${prev.record.seq} (line ${p})${seq < prev.record.seq ? '' : ' (a duplicated or replayed record)'}`)
}

/** The link between the end of file `a` and the head of file `b`. */
function checkLink (a: Loaded, aLast: ParsedLine, b: Loaded, head: ParsedLine): void {
  const chain = (head.record.chain ?? {}) as { prevSeq?: unknown, prevFile?: unknown }
  const hs = typeof chain.prevSeq === 'number' ? chain.prevSeq : null
  const named = typeof chain.prevFile === 'string' ? chain.prevFile : null
  const ends = aLast.record.seq
  if (head.record.seq === ends + 1 && head.record.prev === aLast.hash) return
  const aLines = a.lines.length
  if (hs !== null && hs > ends) {
    if (named === null || named === path.basename(a.file)) {
      fail(a.file, aLines + 1, `truncated: the file ends with record ${ends} (line ${aLines}), but ${path.basename(b.file)}'s chain.head says it ended with record ${hs}: ${hs - ends} record(s) cut off the end`)
    }
    fail(b.file, 1, `deleted: records ${ends + 1}..${hs} are missing between ${path.basename(a.file)} and ${path.basename(b.file)} (its chain.head continues from ${named}, which was not given or was removed)`)
  }
  if (head.record.seq <= ends) fail(b.file, 1, `reordered: ${path.basename(b.file)} starts at seq ${head.record.seq}, but ${path.basename(a.file)} already reached seq ${ends}`)
  if (head.record.seq > ends + 1) fail(b.file, 1, `deleted: seq jumps from ${ends} (end of ${path.basename(a.file)}) to ${head.record.seq}: a file or the end of ${path.basename(a.file)} is missing`)
  fail(b.file, 1, `modified: the chain.head does not link to the last record of ${path.basename(a.file)} (line ${aLines})`)
}

/** A file's end against its seal. */
function checkSeal (f: Loaded, last: ParsedLine, lastLine: number, isLast: boolean, partial: boolean, notes: string[]): void {
  const seal = f.seal
  if (seal === 'corrupt') fail(sealPath(f.file), 1, 'modified: the seal is unreadable (no slot has a valid checksum)')
  if (seal === null) {
    if (!isLast) return
    if (last.record.event === 'chain.end') { notes.push(`${f.file}: ends with chain.end (renamed to ${String((last.record.chain as { renamedTo?: unknown })?.renamedTo)}); the file after it was not given`); return }
    if (partial) { notes.push(`${f.file}: no seal; records cut off its end would not be detected`); return }
    fail(f.file, lastLine + 1, `unverifiable end: no seal ${path.basename(sealPath(f.file))}, so records cut off the end cannot be ruled out (the seal was removed; for a copy or capture without one, use --partial)`)
  }
  const ends = last.record.seq
  if (seal.seq > ends) {
    const n = seal.seq - ends
    fail(f.file, lastLine + 1, `truncated: the file ends with record ${ends} (line ${lastLine}), but its seal says record ${seal.seq} was written: ${n} record${n === 1 ? '' : 's'} cut off the end`)
  }
  if (seal.seq === ends) {
    if (seal.hash !== last.hash) fail(f.file, lastLine, 'modified: the last record is not the one sealed (the end of the file was rewritten)')
    if (seal.size !== f.size) fail(f.file, lastLine, `modified: the file is ${f.size} bytes, its seal says ${seal.size}`)
    return
  }
  const sealed = findSeq(f.lines, 0, seal.seq)
  const after = findSeq(f.lines, 0, seal.seq + 1)
  if (sealed !== undefined && sound(sealed)!.hash !== seal.hash) fail(f.file, sealed.n, 'modified: this record is not the one sealed')
  fail(f.file, after?.n ?? lastLine, `appended: the records from seq ${seal.seq + 1} on are not covered by the seal (added by another process, or the gateway stopped between writing and sealing)`)
}

function headNotes (f: Loaded, head: ParsedLine, notes: string[]): void {
  const chain = (head.record.chain ?? {}) as { reason?: unknown, problem?: unknown, dropped?: unknown }
  if (chain.reason === 'recover') {
    notes.push(`${f.file}:1: the gateway started this file after a problem: ${String(chain.problem)}${typeof chain.dropped === 'number' ? `; ${chain.dropped} record(s) were dropped (onFailure: open)` : ''}`)
  }
}

/** Verify audit files given in any order (see the module comment). */
/**
 * A worker's chain (config `workers`, gateway/cluster.ts): `<file>.w<N>`, rotated
 * `<file>.w<N>.<UTC timestamp>`. Each worker writes a chain of its own.
 */
const WORKER_CHAIN = /\.w([1-9][0-9]*)(?:\.[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}-[0-9]{2}-[0-9]{2}(?:\.[0-9]+)?Z)?$/

/**
 * Verify audit files: one chain, or the chains of several workers given together (grouped
 * by their `.w<N>` names; files without one are a chain of their own). Every chain must
 * verify; the first break found is reported.
 */
export function verify (files: readonly string[], opts: VerifyOptions = {}): VerifyResult {
  const chains = new Map<string, string[]>()
  for (const f of files) {
    const base = path.basename(f)
    const m = WORKER_CHAIN.exec(base)
    const key = m === null ? '' : path.join(path.dirname(f), `${base.slice(0, m.index)}.w${m[1]}`)
    chains.set(key, [...(chains.get(key) ?? []), f])
  }
  if (chains.size <= 1) return verifyChain(files, opts)
  let records = 0
  const ordered: string[] = []
  const notes: string[] = []
  for (const [key, group] of [...chains].sort(([a], [b]) => a.localeCompare(b))) {
    const r = verifyChain(group, opts)
    records += r.records
    ordered.push(...r.files)
    notes.push(...r.notes.map((n) => `${key === '' ? 'chain' : path.basename(key)}: ${n}`))
    if (!r.ok) return { ok: false, records, ...(r.problem ? { problem: r.problem } : {}), files: ordered, notes }
  }
  notes.push(`${chains.size} chains (one per worker) verified`)
  return { ok: true, records, files: ordered, notes }
}

function verifyChain (files: readonly string[], opts: VerifyOptions = {}): VerifyResult {
  const notes: string[] = []
  const resolved = [...new Set(files.map((f) => path.resolve(f)))]
  const given = resolved.filter((f) => {
    if (!f.endsWith('.seal')) return true
    // A seal is read with its file (shell globs pick both up).
    if (!resolved.includes(f.slice(0, -'.seal'.length))) notes.push(`${f}: a seal without its file; ignored`)
    return false
  })
  let ordered: Loaded[] = []
  let records = 0
  try {
    if (given.length === 0) fail('', 0, 'no files given')
    const loaded = given.map(load)
    ordered = [...loaded].sort((a, b) => a.key - b.key)
    for (let i = 1; i < ordered.length; i++) {
      if (ordered[i].key === ordered[i - 1].key) {
        fail(ordered[i].file, 1, `inserted: starts at the same seq (${ordered[i].key}) as ${path.basename(ordered[i - 1].file)} (a copy, or a second chain)`)
      }
    }

    let prev: ParsedLine | null = null
    for (let fi = 0; fi < ordered.length; fi++) {
      const f = ordered[fi]
      const isLast = fi === ordered.length - 1
      let last: ParsedLine | null = null
      let lastLine = 0
      for (let i = 0; i < f.lines.length; i++) {
        const line = f.lines[i]
        if ('problem' in line.parsed) {
          fail(f.file, line.n, line.parsed.problem === 'empty line'
            ? 'modified: empty line (a record was blanked, or a line inserted)'
            : `modified: ${line.parsed.problem}`)
        }
        const cur = line.parsed
        const event = cur.record.event
        if (i === 0) {
          if (event !== 'chain.head') {
            if (!(opts.partial === true && fi === 0)) fail(f.file, 1, `deleted: the file does not begin with a chain.head record (its first record${cur.record.seq > 0 ? 's' : ''} were removed?)`)
            notes.push(`${f.file}: starts mid-chain at seq ${cur.record.seq} (partial)`)
          } else {
            headNotes(f, cur, notes)
            if (prev !== null) {
              checkLink(ordered[fi - 1], prev, f, cur)
            } else if (cur.record.prev !== null) {
              const c = (cur.record.chain ?? {}) as { prevFile?: unknown, prevSeq?: unknown }
              notes.push(`the chain starts at seq ${cur.record.seq} in ${f.file}, continuing ${typeof c.prevFile === 'string' ? c.prevFile : 'a file'} (up to seq ${String(c.prevSeq)}), which was not given`)
            }
          }
        } else {
          if (event === 'chain.head') fail(f.file, line.n, 'inserted: a chain.head in the middle of a file')
          if (last!.record.event === 'chain.end') fail(f.file, line.n, `appended: records after the chain.end on line ${lastLine}`)
          if (cur.record.seq !== last!.record.seq + 1 || cur.record.prev !== last!.hash) classify(f, i, last!, cur)
        }
        last = cur
        lastLine = line.n
        records++
      }
      if (f.partial !== null) {
        fail(f.file, f.lines.length + 1, `truncated mid-line: line ${f.lines.length + 1} is incomplete (${f.partial.length} bytes without a newline)`)
      }
      checkSeal(f, last!, lastLine, isLast, opts.partial === true, notes)
      prev = last
    }
  } catch (err) {
    if (err instanceof Broken) return { ok: false, records, problem: err.problem, files: ordered.map((f) => f.file), notes }
    throw err
  }
  return { ok: true, records, files: ordered.map((f) => f.file), notes }
}
