/**
 * One scoped request as the tenancy stage sees it: what it may change before the
 * request is forwarded (path parameters, query, decoded body, registry headers) and
 * how the answer is to be filtered. Handlers in operations.ts fill it in.
 */
import type { Operation } from '../../api/catalog/operations'
import type { TenancySettings } from '../../policy/tenancy'
import { isJsonNumber, numberOf } from '../../api/body/number'
import { setAt, type PatchOp } from '../../policy/rewrite'
import { knownFields, type BodyNode } from '../../api/body/schema'
import type { Credentials } from '../../config'
import type { ObjectKind, Resolution, Resolver } from './lookup'
import type { SharedReservations } from './quota-store'
import { familiar, parseImageRef } from './images'
import type { BodyFilter, LocalAnswer, ResponseFilter } from '../exchange'
import { TenancyRefusal } from './refusal'
import { Names } from './names'

export type { BodyFilter, LocalAnswer, ResponseFilter } from '../exchange'

/** Readers of decoded bodies and engine answers, for the handlers. */
export const str = (v: unknown): string => (typeof v === 'string' ? v : isJsonNumber(v) ? String(v) : '')
export const list = (v: unknown): any[] => (Array.isArray(v) ? v : [])
/** A positive finite number, else 0 (Go's zero value: not set). */
export const num = (v: unknown): number => { const n = numberOf(v); return Number.isFinite(n) && n > 0 ? n : 0 }

/** A tenancy handler: checks and scopes one operation's call (operations.ts, libpod.ts). */
export type Handler = (call: Call) => Promise<void>

/** The kinds a reference can name, resolved over all objects (lookup.ts); images have rules of their own. */
export type Resolvable = Exclude<ObjectKind, 'image'>

/** A reference the engine resolves to an object: the tenant's own, or shared. */
export type Found = Exclude<Resolution, { state: 'missing' }>

/** Where an object's labels are in a list or inspect answer, and what the engine shows for none. */
export interface LabelsAt { readonly path: readonly string[], readonly empty: Record<string, never> | null }

export class Call {
  readonly params: Record<string, string>
  query: URLSearchParams
  queryChanged = false
  body: any
  bodyChanged = false
  paramsChanged = false
  readonly patch: PatchOp[] = []
  readonly setHeaders: Record<string, string> = {}
  /** Called once the request has been answered (or failed), with the status sent. */
  readonly settled: Array<(status: number) => void> = []
  respond?: ResponseFilter
  bodyFilter?: BodyFilter
  answer?: LocalAnswer
  /** The full id of a container whose bind sources the engine walks again for this request (policy/fields.ts REMOUNTING_OPS). */
  remounts?: string
  /** The tenant's names and the engine's (names.ts): qualified only under `names: private`. */
  readonly names: Names
  /** The API version the request names in its path (`/v1.41/...`), if any: the engine reads the body as that version. */
  apiVersion?: string

  constructor (
    readonly op: Operation,
    params: Readonly<Record<string, string>>,
    query: URLSearchParams,
    body: unknown,
    readonly tenant: string,
    readonly subject: string,
    readonly settings: TenancySettings,
    readonly r: Resolver,
    readonly credentials: Credentials,
    /** The raw X-Registry-Auth the client sent, if any. */
    readonly clientRegistryAuth: string | undefined,
    /** Where every replica's quota reservations are kept, when there is a shared store. */
    readonly quotaStore: SharedReservations | null = null
  ) {
    this.params = { ...params }
    this.query = new URLSearchParams(query)
    this.body = body
    this.names = new Names(settings.names === 'private' ? tenant : null)
  }

  /**
   * The answer, once the filter set so far has run, through `view` as well (names.ts: the
   * tenant's plain names). `view` returns its argument itself when it changes nothing.
   */
  viewAnswer (view: (body: any) => unknown): void {
    const before = this.respond
    if (before !== undefined && before.kind !== 'json') return
    this.respond = { kind: 'json', transform: async (b) => view(before === undefined ? b : await before.transform(b)) }
  }

  /** The tenant's image namespace (`team-a`). */
  get namespace (): string { return this.settings.imageNamespace.replaceAll('{tenant}', this.tenant) }

  setParam (name: string, value: string): void {
    if (this.params[name] !== value) { this.params[name] = value; this.paramsChanged = true }
  }

  setQuery (name: string, value: string): void {
    this.query.set(name, value)
    this.queryChanged = true
  }

  /** Only the fields the body's schema knows go on (schema.ts knownFields); each one dropped is recorded as a JSON Patch `remove`. */
  knownFieldsOnly (node: BodyNode, keep?: ReadonlySet<string>): void {
    const r = knownFields(this.body, node, keep)
    if (r.dropped.length === 0) return
    this.body = r.value
    this.bodyChanged = true
    for (const path of r.dropped) this.patch.push({ op: 'remove', path, value: undefined })
  }

  /** Set a value in the decoded body (copy-on-write, as a rewrite's `set`), recorded as a JSON Patch operation. */
  setBody (pointer: readonly string[], value: unknown): void {
    const r = setAt(this.body, pointer, value)
    if (!r) return
    this.body = r.root
    this.bodyChanged = true
    this.patch.push(r.patch)
  }
}

export { refuse } from './refusal'

/**
 * The engine's own answer for a missing object (as dockerd 20.10 words it): another
 * tenant's object answers exactly like this. A reference in the path, or one the
 * engine looks up as the object the request acts on (commit's container, network
 * connect's container), is a 404; one inside a body that the engine checks as part of
 * a configuration (links, a service's secrets and configs) is the engine's 400.
 * `absent`: the reference names nothing on the engine at all (a miss: audited as the
 * policy decided, not as a denial); the words are the same either way.
 */
export function missing (kind: ObjectKind, ref: string, opId: string, where: 'path' | 'body' | 'link' | 'endpoint' = 'path', absent = false): TenancyRefusal {
  let message: string
  switch (kind) {
    case 'container':
      if (where === 'endpoint') {
        // A forced disconnect of a container the engine does not know removes the endpoint of that name.
        message = `endpoint ${ref} not found`
      } else if (where === 'link') {
        // opts.ParseLink drops the leading slash of `/name:alias`.
        const name = ref.replace(/^\//, '')
        message = `could not get container for ${name}: No such container: ${name}`
      } else {
        message = opId === 'ContainerKill' ? `Cannot kill container: ${ref}: No such container: ${ref}` : `No such container: ${ref}`
      }
      break
    case 'volume': message = `get ${ref}: no such volume`; break
    case 'network': message = `network ${ref} not found`; break
    case 'exec': message = `No such exec instance: ${ref}`; break
    case 'secret': case 'config':
      // A service's reference is checked by the swarm manager.
      message = where === 'path' ? `${kind} ${ref} not found` : `rpc error: code = InvalidArgument desc = ${kind} not found: ${ref}`
      break
    case 'image':
      if (['ImageGet', 'ImageGetAll'].includes(opId)) message = exportMissing(ref)
      else if (['ImageInspect', 'ImageAttestations'].includes(opId)) message = `no such image: ${ref}: No such image: ${familiar(ref)}`
      else message = `No such image: ${familiar(ref)}`
      break
    default: message = `${kind} ${ref} not found`
  }
  // `missing` lets the tenancy stage answer in another engine's words (podman.ts).
  return new TenancyRefusal(where === 'path' || where === 'endpoint' ? 'NOT_FOUND' : 'REFERENCE_MISSING', message, 'tenant-ownership', { missing: { kind, ref, opId, where }, absent })
}

/**
 * The image exporter (save) searches a bare name, and looks a tagged or digested
 * reference up in the reference store. (A missing full id is a 500 from the engine,
 * naming its data root: answered as a plain missing image instead.)
 */
function exportMissing (ref: string): string {
  if (/^(sha256:)?[0-9a-f]{64}$/.test(ref)) return `No such image: ${familiar(ref)}`
  const parsed = parseImageRef(ref)
  return parsed && (parsed.tag !== undefined || parsed.digest !== undefined) ? 'reference does not exist' : `No such image: ${ref}`
}

/** Independent checks run at once; the first failure in the order given is the one reported, as if they ran one by one. */
export async function inOrder<T extends readonly unknown[]> (work: { readonly [K in keyof T]: Promise<T[K]> }): Promise<T> {
  const settled = await Promise.allSettled(work)
  for (const s of settled) if (s.status === 'rejected') throw s.reason
  return settled.map((s) => (s as PromiseFulfilledResult<unknown>).value) as unknown as T
}

/**
 * A request that makes the engine mount a container's binds (start, restart, a copy):
 * it walks their sources then, not at create, so the pipeline judges them again
 * (pipeline.ts recheckBinds).
 */
export function remounting (inner: Handler, param = 'id'): Handler {
  return async (call) => {
    await inner(call)
    call.remounts = call.params[param]
  }
}
