/**
 * `portcullis policy learn`: least privilege from recorded traffic (README, "Learn mode").
 *
 * From audit records (levels `facts` or `request`, which carry the facts the policy
 * judged) it writes the Casbin lines that would have allowed exactly that traffic:
 *
 *   - allow lines: the operation ids seen, one line per resource kind, no condition;
 *   - deny lines: one per fact of the policy's vocabulary, holding it to what was seen
 *     (never seen: its zero value only; a list: the values seen; host paths: the paths
 *     seen and what lies below them; a number: the range seen, zero included).
 *
 * A fact's zero value is always allowed, since every operation without a body has it:
 * where zero means "unbounded" (memory, pidsLimit, logMaxSize), keep the rewrites or base
 * rules that set a bound. `--check` judges the same records with a policy: what it would
 * have denied. Both read plain records; the CLI reads and verifies the files.
 */
import { operations } from '../api/catalog/operations'
import type { Policy, Principal } from './engine'
import { zeroFacts, type PolicyInput } from './facts'

/** What learn reads of an audit record (docs/audit.md). */
export interface LearnRecord {
  readonly req?: string
  readonly event?: string
  readonly identity?: { readonly subject: string, readonly tenant: string | null, readonly roles: readonly string[] } | null
  readonly operation?: string | null
  readonly decision?: string | null
  readonly status?: number | null
  readonly facts?: Readonly<Record<string, unknown>>
  readonly body?: unknown
}

/** Which records, and whose lines: one of them, or none for one block per subject. */
export interface LearnSelection {
  readonly subject?: string
  readonly tenant?: string
  readonly role?: string
}

const KIND_OF = new Map<string, string>()
for (const o of operations) if (!KIND_OF.has(o.id)) KIND_OF.set(o.id, o.kind)

/** The records that are requests (a hijack's session.end repeats its session.start) of the selection. */
export function selectRecords (records: readonly LearnRecord[], sel: LearnSelection): LearnRecord[] {
  return records.filter((r) => {
    if (r.event !== 'request' && r.event !== 'session.start') return false
    if (!r.operation || !r.identity) return false
    if (sel.subject !== undefined && r.identity.subject !== sel.subject) return false
    if (sel.tenant !== undefined && r.identity.tenant !== sel.tenant) return false
    if (sel.role !== undefined && !r.identity.roles.includes(sel.role)) return false
    return true
  })
}

interface Block { sub: string, dom: string, slug: string, records: LearnRecord[] }

function slugOf (s: string): string {
  return s.toLowerCase().replace(/[^a-z0-9]+/g, '-').replace(/^-+|-+$/g, '') || 'x'
}

/** Kebab case of an operation id or fact name (`ContainerCreate` -> `container-create`). */
function kebab (s: string): string {
  return s.replace(/([a-z0-9])([A-Z])/g, '$1-$2').toLowerCase()
}

function blocks (records: LearnRecord[], sel: LearnSelection): Block[] {
  const single = (sub: string, label: string): Block[] => {
    const tenants = new Set(records.map((r) => r.identity!.tenant ?? ''))
    const dom = sel.tenant ?? (tenants.size === 1 && !tenants.has('') ? [...tenants][0] : '*')
    return [{ sub, dom, slug: slugOf(label), records }]
  }
  if (sel.subject !== undefined) return single(`user:${sel.subject}`, sel.subject)
  if (sel.role !== undefined) return single(sel.role, sel.role)
  if (sel.tenant !== undefined) return single('*', sel.tenant)
  const bySubject = new Map<string, LearnRecord[]>()
  for (const r of records) bySubject.set(r.identity!.subject, [...(bySubject.get(r.identity!.subject) ?? []), r])
  return [...bySubject].sort(([a], [b]) => a.localeCompare(b)).flatMap(([s, rs]) => blocks(rs, { subject: s }))
}

/** A condition as one CSV field: quoted when it holds a comma or a quote. */
function field (s: string): string {
  return /[",]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s
}

/** A value that can stand in a condition's single-quoted comma-separated list. */
const LISTABLE = /^[^,'"\\\n\r]*$/

function counts (items: readonly string[]): string {
  const m = new Map<string, number>()
  for (const i of items) m.set(i, (m.get(i) ?? 0) + 1)
  return [...m].map(([k, n]) => `${k} x${n}`).join(', ')
}

interface FactLine { name: string, cond: string | null, note: string }

/** The deny line that holds one fact to what the records show. */
function factLine (name: string, zero: unknown, seen: Array<{ op: string, value: unknown }>): FactLine[] {
  const used = seen.filter((s) => !isZero(s.value))
  const where = used.length ? ` (${counts(used.map((s) => s.op))})` : ''
  const x = `r.obj.${name}`
  if (typeof zero === 'boolean') {
    return [{ name, cond: used.length ? null : x, note: used.length ? `${name}: seen true${where}, allowed` : `${name}: never seen` }]
  }
  if (typeof zero === 'number') {
    if (!used.length) return [{ name, cond: `${x} != 0`, note: `${name}: never seen` }]
    const nums = used.map((s) => Number(s.value))
    const lo = Math.min(0, ...nums)
    const hi = Math.max(0, ...nums)
    return [{ name, cond: `${x} < ${lo} || ${x} > ${hi}`, note: `${name}: ${lo}..${hi} seen${where}` }]
  }
  if (typeof zero === 'string') return stringLine(name, x, used, where)
  if (Array.isArray(zero)) return listLine(name, x, used, where)
  // an object fact (namespaces, counts): one line per field, by that field's own type
  return Object.entries(zero as Record<string, unknown>).flatMap(([k, z]) =>
    factLine(`${name}.${k}`, z, seen.map((s) => ({ op: s.op, value: (s.value as Record<string, unknown> | undefined)?.[k] ?? z }))))
}

function stringLine (name: string, x: string, used: Array<{ op: string, value: unknown }>, where: string): FactLine[] {
  const values = [...new Set(used.map((s) => String(s.value)))].sort()
  const ok = values.filter((v) => LISTABLE.test(v))
  const lost = values.length - ok.length
  const cond = [`${x} != ''`, ...ok.map((v) => `${x} != '${v}'`)].join(' && ')
  return [{ name, cond, note: `${name}: ${values.length ? `${ok.map((v) => `'${v}'`).join(', ')} seen${where}` : 'never seen'}${lost ? `; ${lost} value(s) with quotes or commas cannot be written here and stay denied: allow them by hand` : ''}` }]
}

function listLine (name: string, x: string, used: Array<{ op: string, value: unknown }>, where: string): FactLine[] {
  const items = used.flatMap((s) => s.value as unknown[])
  if (!items.length) return [{ name, cond: `count(${x}) > 0`, note: `${name}: never seen` }]
  if (name === 'ulimits') {
    const caps = new Map<string, number>()
    for (const u of items as Array<{ name?: string, soft?: number, hard?: number }>) {
      const n = String(u.name ?? '')
      const v = Math.max(Number(u.soft ?? 0), Number(u.hard ?? 0))
      caps.set(n, Math.max(caps.get(n) ?? 0, v))
    }
    const spec = [...caps].filter(([n]) => LISTABLE.test(n)).map(([n, v]) => `${n}=${v}`).sort().join(',')
    return [{ name, cond: `ulimitsOutside(${x}, '${spec}')`, note: `${name}: ${spec} seen${where}` }]
  }
  if (typeof items[0] === 'number') {
    const nums = items.map(Number)
    return [{ name, cond: `anyNotBetween(${x}, ${Math.min(...nums)}, ${Math.max(...nums)})`, note: `${name}: ${Math.min(...nums)}..${Math.max(...nums)} seen${where}` }]
  }
  const values = [...new Set(items.map(String))].sort()
  const ok = values.filter((v) => LISTABLE.test(v))
  const lost = values.length - ok.length
  const paths = name === 'hostPaths' || name === 'unresolvedHostPaths'
  // An empty list would allow nothing: the same as never seen.
  const cond = ok.length === 0 ? `count(${x}) > 0` : paths ? `anyOutside(${x}, '${ok.join(',')}')` : `anyNotIn(${x}, '${ok.join(',')}')`
  return [{ name, cond, note: `${name}: ${ok.join(', ')}${paths ? ' (and below)' : ''} seen${where}${lost ? `; ${lost} value(s) with quotes or commas cannot be written here and stay denied: allow them by hand` : ''}` }]
}

function isZero (v: unknown): boolean {
  if (Array.isArray(v)) return v.length === 0
  if (v !== null && typeof v === 'object') return Object.values(v).every(isZero)
  return v === false || v === '' || v === 0 || v === null || v === undefined
}

export interface LearnResult {
  /** The policy file's text. */
  readonly text: string
  /** Records that carried no facts (written at audit level `metadata`): their body facts are unknown, taken as zero. */
  readonly withoutFacts: number
  readonly records: number
}

/** The policy lines (with their comments) that allow the selected traffic and nothing more. */
export function learn (all: readonly LearnRecord[], sel: LearnSelection = {}): LearnResult {
  const records = selectRecords(all, sel)
  const zero = zeroFacts() as unknown as Record<string, unknown>
  const out: string[] = [
    '# Learned by `portcullis policy learn` from audit records: review before use.',
    '# p, SUBJECT, TENANT, OPERATION, KIND, EFFECT, RULE-ID, CONDITION',
  ]
  let withoutFacts = 0
  for (const b of blocks(records, sel)) {
    out.push('', `# --- ${b.sub}${b.dom === '*' ? '' : ` in tenant ${b.dom}`}: ${b.records.length} request(s) ---`)
    const byKind = new Map<string, LearnRecord[]>()
    for (const r of b.records) {
      const kind = KIND_OF.get(r.operation!)
      if (kind === undefined) throw new Error(`record ${r.req ?? '?'}: unknown operation ${r.operation}`)
      byKind.set(kind, [...(byKind.get(kind) ?? []), r])
    }
    for (const [kind, rs] of [...byKind].sort(([a], [b]) => a.localeCompare(b))) {
      const ops = [...new Set(rs.map((r) => r.operation!))].sort()
      const denied = rs.filter((r) => r.decision === 'deny').length
      const sample = [...new Set(rs.map((r) => r.req).filter(Boolean))].slice(0, 3).join(', ')
      out.push(`# ${counts(rs.map((r) => r.operation!))}${denied ? `; ${denied} denied when recorded` : ''}${sample ? ` (e.g. req ${sample})` : ''}`)
      const op = ops.length === 1 ? ops[0] : `@(${ops.join('|')})`
      out.push(`p, ${b.sub}, ${b.dom}, ${op}, ${kind}, allow, learned-${b.slug}-${kind}, true`)
    }
    out.push('# what the bodies asked for: each fact held to the values seen (zero values always pass)')
    const seen = new Map<string, Array<{ op: string, value: unknown }>>()
    for (const r of b.records) {
      if (r.facts === undefined) withoutFacts++
      for (const name of Object.keys(zero)) {
        const v = r.facts?.[name]
        if (v !== undefined) seen.set(name, [...(seen.get(name) ?? []), { op: r.operation!, value: v }])
      }
    }
    for (const [name, z] of Object.entries(zero)) {
      for (const l of factLine(name, z, seen.get(name) ?? [])) {
        out.push(`# ${l.note}`)
        if (l.cond !== null) out.push(`p, ${b.sub}, ${b.dom}, *, *, deny, learned-${b.slug}-${kebab(l.name).replace(/\./g, '-')}, ${field(l.cond)}`)
      }
    }
  }
  return { text: out.join('\n') + '\n', withoutFacts, records: records.length }
}

export interface CheckedDenial {
  readonly operation: string
  readonly subject: string
  readonly tenant: string | null
  /** `file: rule`, or `file: (no rule allows it)`. */
  readonly rule: string
  readonly reqs: string[]
}

/**
 * What `policy` would deny of the selected records, judged on their recorded facts
 * (the rewrites and tenancy of the policy are not replayed: the facts are those the
 * recording gateway judged). Grouped by operation, identity and rule.
 */
export async function checkTraffic (policy: Policy, all: readonly LearnRecord[], sel: LearnSelection = {}): Promise<{ checked: number, denials: CheckedDenial[] }> {
  const records = selectRecords(all, sel)
  const groups = new Map<string, CheckedDenial>()
  for (const r of records) {
    const op = r.operation!
    const kind = KIND_OF.get(op)
    if (kind === undefined) throw new Error(`record ${r.req ?? '?'}: unknown operation ${op}`)
    const who: Principal = { subject: r.identity!.subject, tenant: r.identity!.tenant, roles: r.identity!.roles }
    const input = { ...zeroFacts(), ...(r.facts ?? {}), op, kind, resource: '', query: {}, body: r.body } as PolicyInput
    const layers = await policy.trace(who, op, kind, input)
    const refusing = layers.find((l) => l.mode === 'enforce' && (l.deniedBy.length > 0 || l.allowedBy === null))
    if (!refusing) continue
    const rule = `${refusing.file}: ${refusing.deniedBy[0]?.rule ?? '(no rule allows it)'}`
    const key = `${op}\0${who.subject}\0${who.tenant ?? ''}\0${rule}`
    const g = groups.get(key) ?? { operation: op, subject: who.subject, tenant: who.tenant, rule, reqs: [] }
    g.reqs.push(r.req ?? '?')
    groups.set(key, g)
  }
  return { checked: records.length, denials: [...groups.values()] }
}
