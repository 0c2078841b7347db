/**
 * The report: one table per group with a column per side and its ratio to direct, the
 * issue's targets with the measured value and MET/MISSED (informative only), and the
 * JSON written to dist/bench-results.json.
 */
import type { SideName } from './measure'

export type Column = SideName | 'admin'

/** One measured quantity on each side; null where the side cannot do it (the note says why). */
export interface Row {
  name: string
  unit: string
  /** Which direction is better, so ratios can be read: for rates above 1 is faster, for times above 1 is slower. */
  better: 'higher' | 'lower'
  /** Who the Portcullis columns act as, and how they reach it. */
  identity?: string
  values: Partial<Record<Column, number | null>>
  digits?: number
}

export interface Group {
  title: string
  /** Lines printed under the title. */
  about: string[]
  columns: Column[]
  rows: Row[]
  notes: string[]
}

export interface Target {
  /** The words. */
  target: string
  measured: string
  /** null: not measured in this run. */
  met: boolean | null
}

export function fmt (n: number | null | undefined, digits = 1): string {
  if (n === null || n === undefined || !Number.isFinite(n)) return '-'
  return n.toFixed(digits)
}

export function table (header: string[], rows: string[][], align: Array<'l' | 'r'>): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)))
  const line = (cells: string[]): string => cells.map((c, i) => align[i] === 'l' ? c.padEnd(widths[i]) : c.padStart(widths[i])).join('  ').trimEnd()
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n')
}

export function ratio (row: Row, col: Column): number | null {
  const d = row.values.direct
  const v = row.values[col]
  if (d === null || d === undefined || v === null || v === undefined || d === 0) return null
  return v / d
}

const HEAD: Record<Column, string> = { direct: 'direct', haproxy: 'haproxy', portcullis: 'portcullis', admin: 'portcullis admin' }

export function renderGroup (g: Group): string {
  const out: string[] = [g.title, ...g.about.map((l) => `  ${l}`)]
  const header = ['workload', 'unit']
  const align: Array<'l' | 'r'> = ['l', 'l']
  for (const c of g.columns) {
    header.push(HEAD[c])
    align.push('r')
    if (c !== 'direct') { header.push('x direct'); align.push('r') }
  }
  const rows = g.rows.map((r) => {
    const cells = [r.name, r.unit]
    for (const c of g.columns) {
      const v = r.values[c]
      cells.push(v === null ? 'broken' : fmt(v, r.digits ?? 2))
      if (c !== 'direct') cells.push(fmt(ratio(r, c), 2))
    }
    return cells
  })
  out.push(table(header, rows, align))
  for (const n of g.notes) out.push(`  note: ${n}`)
  out.push('')
  return out.join('\n')
}

export function renderTargets (targets: Target[]): string {
  const rows = targets.map((t) => [t.met === null ? 'n/a' : t.met ? 'MET' : 'MISSED', t.target, t.measured])
  return ['Targets of the issue (informative: a missed target never fails the run; ratios from this run)', table(['', 'target', 'measured'], rows, ['l', 'l', 'l']), ''].join('\n')
}
