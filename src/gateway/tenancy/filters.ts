/**
 * The engine's `filters` query parameter: JSON mapping a filter name to its values,
 * either as a list (`{"label":["a=b"]}`) or as the older set form
 * (`{"label":{"a=b":true}}`). The gateway parses it, adds its own terms, and sends
 * its own canonical serialization, so the engine filters by exactly what was checked.
 */
import { GatewayError } from '../../api/errors'

export type Filters = Map<string, Set<string>>

export function parseFilters (query: URLSearchParams, name = 'filters'): Filters {
  const all = query.getAll(name)
  if (all.length > 1) throw new GatewayError('PATH_AMBIGUOUS', `the query gives ${name} more than once`)
  const out: Filters = new Map()
  if (all.length === 0 || all[0] === '') return out
  let doc: unknown
  try {
    doc = JSON.parse(all[0])
  } catch {
    throw new GatewayError('BODY_INVALID', `invalid ${name} parameter: not JSON`)
  }
  if (doc === null || typeof doc !== 'object' || Array.isArray(doc)) throw new GatewayError('BODY_INVALID', `invalid ${name} parameter: expected a JSON object`)
  for (const [key, v] of Object.entries(doc)) {
    const values = new Set<string>()
    if (Array.isArray(v) && v.every((x) => typeof x === 'string')) for (const x of v) values.add(x)
    else if (v !== null && typeof v === 'object' && !Array.isArray(v) && Object.values(v).every((x) => typeof x === 'boolean')) {
      for (const [x, on] of Object.entries(v)) if (on) values.add(x)
    } else throw new GatewayError('BODY_INVALID', `invalid ${name} parameter: ${JSON.stringify(key)} must list strings`)
    out.set(key, values)
  }
  return out
}

export function serializeFilters (filters: Filters): string {
  const doc: Record<string, Record<string, boolean>> = {}
  for (const [key, values] of filters) {
    doc[key] = {}
    for (const v of values) doc[key][v] = true
  }
  return JSON.stringify(doc)
}

/** Add a `label=key=value` term: label terms are ANDed by the engine, so the result is never wider. */
export function withLabel (filters: Filters, label: string): Filters {
  const out: Filters = new Map(filters)
  out.set('label', new Set([...(filters.get('label') ?? []), label]))
  return out
}
