/**
 * A readable summary of audit files: `portcullis audit report FILE...`.
 *
 * Counts follow the record convention in docs/audit.md: every request has one
 * `request` record, except a hijack that was established (attach, exec start,
 * BuildKit), which has a `session.start` and, when it closes, a `session.end`.
 */
import fs from 'node:fs'
import { splitLines } from './chain'
import { verify } from './verify'

export interface ReportOptions {
  /** Only records at or after this time: a Date, an RFC 3339 time, or a duration back from now (`90m`, `24h`, `7d`). */
  readonly since?: Date | string
  /** Only records of this tenant. */
  readonly tenant?: string
  /** "Now" for durations (default: the current time). */
  readonly now?: number
}

interface Rec {
  time?: string
  event?: string
  identity?: { subject?: string, tenant?: string | null } | null
  operation?: string | null
  decision?: string | null
  rule?: { policy?: string, rule?: string } | null
  wouldDeny?: Array<{ policy?: string, rule?: string }>
  error?: { code?: string } | null
  bytesIn?: number
  bytesOut?: number
  durationMs?: number | null
}

const DURATION = /^([0-9]+(?:\.[0-9]+)?)(s|m|h|d|w)$/
const UNIT_MS: Record<string, number> = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 }
const RFC3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:\d{2})$/i

/** `--since`: an RFC 3339 time, or a duration back from `now` (`30s`, `90m`, `24h`, `7d`, `2w`). Throws on anything else. */
export function parseSince (value: string, now: number = Date.now()): Date {
  const d = DURATION.exec(value.trim())
  if (d !== null) return new Date(now - Number(d[1]) * UNIT_MS[d[2]])
  if (RFC3339.test(value.trim())) {
    const t = Date.parse(value.trim())
    if (!Number.isNaN(t)) return new Date(t)
  }
  throw new Error(`--since: expected an RFC 3339 time (2026-11-22T00:00:00Z) or a duration (24h, 7d), got ${JSON.stringify(value)}`)
}

function table (headers: string[], rows: Array<Array<string | number>>, numeric: boolean[]): string {
  const cells = [headers, ...rows.map((r) => r.map(String))]
  const widths = headers.map((_, i) => Math.max(...cells.map((r) => r[i].length)))
  return cells.map((r) => '  ' + r.map((c, i) => (numeric[i] ? c.padStart(widths[i]) : c.padEnd(widths[i]))).join('  ').trimEnd()).join('\n')
}

function bytes (n: number): string {
  if (n < 1024) return `${n} B`
  const units = ['KiB', 'MiB', 'GiB', 'TiB']
  let v = n / 1024
  let u = 0
  while (v >= 1024 && u < units.length - 1) { v /= 1024; u++ }
  return `${v.toFixed(1)} ${units[u]}`
}

function duration (ms: number): string {
  if (ms < 1000) return `${Math.round(ms)} ms`
  const s = Math.round(ms / 1000)
  if (s < 60) return `${s}s`
  const m = Math.floor(s / 60)
  if (m < 60) return `${m}m${String(s % 60).padStart(2, '0')}s`
  return `${Math.floor(m / 60)}h${String(m % 60).padStart(2, '0')}m`
}

/** The tenancy rule that denies a reference to another tenant's object (it answers as a missing one). */
const OWNERSHIP_RULE = 'tenant-ownership'
/**
 * A reference to an object the engine does not have at all: allowed by the policy and
 * answered with the engine's own "no such object" (404, or 400 inside a body). Not a
 * denial, and not a failure of the gateway or the engine.
 */
const isMiss = (r: Rec): boolean => r.decision !== 'deny' && (r.error?.code === 'NOT_FOUND' || r.error?.code === 'REFERENCE_MISSING')

const tenantOf = (r: Rec): string => (r.identity ? (r.identity.tenant ?? '(none)') : '(unauthenticated)')
const subjectOf = (r: Rec): string => r.identity?.subject ?? '(unauthenticated)'
const ruleName = (r: { policy?: string, rule?: string } | null | undefined): string => (r ? `${r.rule ?? '?'} (${r.policy ?? '?'})` : '(no rule allows it)')

function bump<K> (m: Map<K, number>, k: K, n = 1): void {
  m.set(k, (m.get(k) ?? 0) + n)
}

function topList (m: Map<string, number>, max = 3): string {
  const sorted = [...m].sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))
  const shown = sorted.slice(0, max).map(([k, n]) => (n > 1 ? `${k} x${n}` : k))
  return shown.join(', ') + (sorted.length > max ? `, +${sorted.length - max} more` : '')
}

/** The report text for `files` (see the module comment). */
export function report (files: readonly string[], opts: ReportOptions = {}): string {
  const since = opts.since === undefined ? undefined : opts.since instanceof Date ? opts.since : parseSince(opts.since, opts.now)
  const all: Rec[] = []
  let unreadable = 0
  for (const file of files) {
    if (file.endsWith('.seal')) continue
    const { lines } = splitLines(fs.readFileSync(file))
    for (const line of lines) {
      try {
        all.push(JSON.parse(line.toString('utf8')) as Rec)
      } catch {
        unreadable++
      }
    }
  }
  const events = all.filter((r) => r.event === 'request' || r.event === 'session.start' || r.event === 'session.end')
  const selected = events.filter((r) => {
    if (since !== undefined && !(typeof r.time === 'string' && Date.parse(r.time) >= since.getTime())) return false
    if (opts.tenant !== undefined && tenantOf(r) !== opts.tenant) return false
    return true
  })
  const times = selected.map((r) => r.time ?? '').filter((t) => t !== '').sort()

  // Requests by tenant and operation.
  interface Row { requests: number, denied: number, wouldDeny: number, failed: number }
  // References to other tenants' objects (denied) and to no object at all (misses), by tenant.
  const crossTenant = new Map<string, { denied: number, misses: number }>()
  const byOp = new Map<string, Row>()
  // Denials, would-deny by rule; sessions by subject.
  const denials = new Map<string, { n: number, who: Map<string, number> }>()
  const wouldDeny = new Map<string, { n: number, who: Map<string, number> }>()
  interface Session { tenant: string, started: number, ended: number, bytesIn: number, bytesOut: number, ms: number, longest: number }
  const sessions = new Map<string, Session>()

  for (const r of selected) {
    const who = `${subjectOf(r)}${r.identity?.tenant ? `@${r.identity.tenant}` : ''}`
    if (r.event === 'request' || r.event === 'session.start') {
      const key = `${tenantOf(r)}\u0000${r.operation ?? '(no operation)'}`
      const row = byOp.get(key) ?? { requests: 0, denied: 0, wouldDeny: 0, failed: 0 }
      row.requests++
      if (r.decision === 'deny') row.denied++
      else if (r.error && !isMiss(r)) row.failed++
      const probe = r.decision === 'deny' && r.rule?.policy === 'tenancy' && r.rule.rule === OWNERSHIP_RULE
      if (r.identity?.tenant && (probe || isMiss(r))) {
        const c = crossTenant.get(tenantOf(r)) ?? { denied: 0, misses: 0 }
        if (probe) c.denied++
        else c.misses++
        crossTenant.set(tenantOf(r), c)
      }
      if ((r.wouldDeny ?? []).length > 0) row.wouldDeny++
      byOp.set(key, row)
      if (r.decision === 'deny') {
        const k = ruleName(r.rule)
        const d = denials.get(k) ?? { n: 0, who: new Map() }
        d.n++
        bump(d.who, who)
        denials.set(k, d)
      }
      for (const w of r.wouldDeny ?? []) {
        const k = ruleName(w)
        const d = wouldDeny.get(k) ?? { n: 0, who: new Map() }
        d.n++
        bump(d.who, who)
        wouldDeny.set(k, d)
      }
    }
    if (r.event === 'session.start' || r.event === 'session.end') {
      const k = subjectOf(r)
      const s = sessions.get(k) ?? { tenant: tenantOf(r), started: 0, ended: 0, bytesIn: 0, bytesOut: 0, ms: 0, longest: 0 }
      if (r.event === 'session.start') s.started++
      else {
        s.ended++
        s.bytesIn += r.bytesIn ?? 0
        s.bytesOut += r.bytesOut ?? 0
        s.ms += r.durationMs ?? 0
        s.longest = Math.max(s.longest, r.durationMs ?? 0)
      }
      sessions.set(k, s)
    }
  }

  const out: string[] = []
  const filters = [since ? `since ${since.toISOString()}` : '', opts.tenant !== undefined ? `tenant ${opts.tenant}` : ''].filter(Boolean).join(', ')
  out.push(`Audit report: ${files.filter((f) => !f.endsWith('.seal')).length} file(s), ${selected.length} of ${events.length} request/session records${filters ? ` (${filters})` : ''}`)
  if (times.length > 0) out.push(`Period: ${times[0]} .. ${times[times.length - 1]}`)
  const v = verify(files)
  out.push(v.ok ? `Chain: intact (${v.records} records)` : `Chain: BROKEN at ${v.problem!.file}:${v.problem!.line}: ${v.problem!.reason} (run portcullis audit verify)`)
  if (unreadable > 0) out.push(`Unreadable lines skipped: ${unreadable}`)

  out.push('', 'Requests by tenant and operation')
  if (byOp.size === 0) out.push('  (none)')
  else {
    const rows = [...byOp].sort((a, b) => a[0].localeCompare(b[0])).map(([k, r]) => {
      const [tenant, op] = k.split('\u0000')
      return [tenant, op, r.requests, r.denied, r.wouldDeny, r.failed]
    })
    out.push(table(['tenant', 'operation', 'requests', 'denied', 'would_deny', 'failed'], rows, [false, false, true, true, true, true]))
  }

  const ruleTable = (title: string, m: Map<string, { n: number, who: Map<string, number> }>): void => {
    out.push('', title)
    if (m.size === 0) { out.push('  (none)'); return }
    const rows = [...m].sort((a, b) => b[1].n - a[1].n || a[0].localeCompare(b[0])).map(([k, d]) => [k, d.n, topList(d.who)])
    out.push(table(['rule (policy)', 'count', 'by'], rows, [false, true, false]))
  }
  ruleTable('Denials by rule', denials)

  // A probe of another tenant's object and a miss get the same answer; only the trail tells them apart.
  out.push('', `Cross-tenant denials (rule ${OWNERSHIP_RULE}: another tenant's object named) and misses (no such object on the engine)`)
  const ct = [...crossTenant.values()].reduce((a, c) => ({ denied: a.denied + c.denied, misses: a.misses + c.misses }), { denied: 0, misses: 0 })
  out.push(`  cross-tenant denials: ${ct.denied}`, `  misses: ${ct.misses}`)
  if (crossTenant.size > 0) {
    const rows = [...crossTenant].sort((a, b) => a[0].localeCompare(b[0])).map(([tenant, c]) => [tenant, c.denied, c.misses])
    out.push(table(['tenant', 'cross-tenant denials', 'misses'], rows, [false, true, true]))
  }
  ruleTable('Would deny by rule (audit-mode policies)', wouldDeny)

  out.push('', 'Hijacked sessions by subject (attach, exec, BuildKit)')
  if (sessions.size === 0) out.push('  (none)')
  else {
    const rows = [...sessions].sort((a, b) => a[0].localeCompare(b[0])).map(([subject, s]) => [
      subject, s.tenant, s.ended, s.started - s.ended > 0 ? s.started - s.ended : 0, bytes(s.bytesIn), bytes(s.bytesOut), duration(s.ms), duration(s.longest),
    ])
    out.push(table(['subject', 'tenant', 'sessions', 'not ended', 'bytes in', 'bytes out', 'total time', 'longest'], rows, [false, false, true, true, true, true, true, true]))
  }
  return out.join('\n') + '\n'
}
