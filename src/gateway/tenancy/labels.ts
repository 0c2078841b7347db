/**
 * The owner labels are the gateway's bookkeeping, not part of what a tenant made: a
 * tenant's lists, inspects and df show its objects with the labels its client gave
 * them. Clients compare them: docker-compose reads a network's and a volume's labels
 * back on every `up` and warns `label "io.portcullis.tenant" has changed` for any it
 * did not set. Ownership is always decided on the engine's own answers (lookup.ts),
 * never on these views; unscoped roles (admin, auditor) see the labels.
 *
 * Label filters follow the view: for a tenant no object carries an owner label, so a
 * `label` term naming one matches nothing and a `label!` term naming one excludes
 * nothing. Either way the owner-label term the gateway adds stays, so a filter never
 * reaches past the tenant's own objects.
 */
import type { Filters } from './filters'
import { SUBJECT_LABEL, TENANT_LABEL } from './lookup'

export const OWNER_KEYS: readonly string[] = [TENANT_LABEL, SUBJECT_LABEL]

/**
 * Labels without the owner labels. The same object when it has none (a list whose
 * elements all come back unchanged goes out as the engine's own bytes); `empty` when
 * nothing else is left: what the engine answers for an object created without labels
 * (`{}` for containers and networks, `null` for volumes and images).
 */
export function withoutOwner (labels: unknown, empty: Record<string, never> | null): unknown {
  if (labels === null || typeof labels !== 'object' || Array.isArray(labels)) return labels
  if (!OWNER_KEYS.some((k) => Object.hasOwn(labels, k))) return labels
  const out: Record<string, unknown> = { ...labels }
  for (const k of OWNER_KEYS) delete out[k]
  return Object.keys(out).length === 0 ? empty : out
}

/**
 * `doc` with the owner labels removed from the labels object at `path`; the objects
 * along the path are copied only when something changes, and `doc` itself is never
 * modified.
 */
export function hideOwner<T> (doc: T, path: readonly string[], empty: Record<string, never> | null): T {
  if (path.length === 0) return withoutOwner(doc, empty) as T
  if (doc === null || typeof doc !== 'object' || Array.isArray(doc)) return doc
  const [key, ...rest] = path
  if (!Object.hasOwn(doc, key)) return doc
  const before = (doc as Record<string, unknown>)[key]
  const after = hideOwner(before, rest, empty)
  return after === before ? doc : { ...doc, [key]: after }
}

/** Whether a `label` filter term (`key` or `key=value`) names an owner label. */
function namesOwner (term: string): boolean {
  const i = term.indexOf('=')
  return OWNER_KEYS.includes(i < 0 ? term : term.slice(0, i))
}

/**
 * A tenant's filters with its owner-label terms read as the tenant sees its objects:
 * `label!` terms naming an owner label are dropped (they exclude nothing), and `label`
 * terms naming one are replaced by a pair of terms no object can meet
 * (`io.portcullis.tenant=<tenant>` and `io.portcullis.tenant=`: one label, two values),
 * so the engine answers with its own empty list, or prunes nothing.
 */
export function ownerTermsAsSeen (filters: Filters, tenant: string): Filters {
  const out: Filters = new Map(filters)
  const negated = filters.get('label!')
  if (negated && [...negated].some(namesOwner)) {
    const kept = [...negated].filter((t) => !namesOwner(t))
    // An empty `label!` still counts for the engine's prunes (and then matches every object): leave it out.
    if (kept.length) out.set('label!', new Set(kept))
    else out.delete('label!')
  }
  const terms = filters.get('label')
  if (terms && [...terms].some(namesOwner)) {
    out.set('label', new Set([...[...terms].filter((t) => !namesOwner(t)), `${TENANT_LABEL}=${tenant}`, `${TENANT_LABEL}=`]))
  }
  return out
}
