/**
 * Ownership lookups on the engine. Every reference a tenant gives (full id, id prefix
 * or name) is resolved among the tenant's own objects only, the way the engine
 * resolves it (full id, then exact name, then unique id prefix), and the request is
 * then sent with the full id: the engine acts on exactly the object that was checked,
 * even if a name changes hands in between.
 *
 * Only full ids are cached (an id is never reused; owner labels are fixed at create,
 * and the gateway restamps them on every update); a container a tenant creates through
 * the gateway is cached from the create's answer, with the owner label the gateway
 * stamped on it (operations.ts containerCreate). Entries are dropped when the
 * engine's event stream reports the object destroyed or updated; while that stream
 * is down nothing is cached. Names and prefixes are always resolved afresh.
 */
import { Provenance } from './provenance'
import type { Logger } from 'pino'
import type { Dispatcher } from 'undici'
import { jsonLines } from '../body'
import { GatewayError } from '../../api/errors'
import { upstreamError } from '../upstream'
import { engineJson, type Upstream } from '../upstream'
import { serializeFilters, withLabel } from './filters'
import type { ObjectKind } from './objects'
import { engineKindOf, PODMAN_DEFAULT_NETWORK, type EngineKind } from './podman'

export const TENANT_LABEL = 'io.portcullis.tenant'
export const SUBJECT_LABEL = 'io.portcullis.subject'
/**
 * Anonymous volumes: the gateway makes each as an owned volume, marked with this label
 * (its value: a token of the create that made it); a `--rm` container carries the same
 * token under AUTOREMOVE_LABEL, and its `destroy` event removes them (anonymous.ts).
 */
export const ANONYMOUS_LABEL = 'io.portcullis.anonymous-volume'
export const AUTOREMOVE_LABEL = 'io.portcullis.autoremove-volumes'

export type { ObjectKind } from './objects'

/** What a reference names, from one tenant's point of view. */
export type Resolution =
  | { readonly state: 'own', readonly id: string, readonly name?: string }
  /** Visible but not the tenant's: shared images, the predefined networks. */
  | { readonly state: 'shared', readonly id: string, readonly name?: string, /** An image's RepoTags and RepoDigests. */ readonly names?: readonly string[] }
  /**
   * Not the tenant's to see. `absent`: the engine has no object the reference could name
   * at all (no id, exact name or id prefix matches, over all objects), so the engine's own
   * answer would be the same "no such object": a miss, not a probe of another's object.
   */
  | { readonly state: 'missing', readonly absent?: true }

type Labels = Record<string, string> | null | undefined
/** A reference's engine name under per-tenant names, and whose it is. */
interface Qualified { readonly name: string, readonly tenant: string }
const ABSENT: Resolution = { state: 'missing', absent: true }
const FULL_ID = /^[0-9a-f]{64}$/
const SWARM_ID = /^[0-9a-z]{25}$/
/** Networks every engine has; tenants may attach to bridge and none, and nobody owns them. */
export const PREDEFINED_NETWORKS = new Set(['bridge', 'host', 'none'])

/** A predefined network's name; under Podman also its default network's own name (podman.ts). */
export function isPredefinedNetwork (name: unknown, engine: EngineKind): boolean {
  return typeof name === 'string' && (PREDEFINED_NETWORKS.has(name) || (engine === 'podman' && name === PODMAN_DEFAULT_NETWORK))
}

/**
 * An image of the shared catalog has a name: a tag or a digest it was pulled, imported or
 * tagged by. One without owner labels and without any name is another build's
 * intermediate step (the classic builder labels only the last one) or a dangling image:
 * it holds whatever that build copied in, so it is nobody's to see but an admin's.
 */
export function catalogued (image: { RepoTags?: unknown, RepoDigests?: unknown } | null | undefined): boolean {
  const named = (v: unknown, none: string): boolean => Array.isArray(v) && v.some((x) => typeof x === 'string' && x !== '' && x !== none)
  return named(image?.RepoTags, '<none>:<none>') || named(image?.RepoDigests, '<none>@<none>')
}

export function ownerOf (labels: Labels): string | null {
  const v = labels?.[TENANT_LABEL]
  return typeof v === 'string' ? v : null
}

export interface Limits { readonly memory: number, readonly nanoCpus: number }
/** Quota usage admitted for a request in flight. */
export interface Reservation { readonly containers: number, readonly memory: number, readonly nanoCpus: number, readonly volumes?: number }

export class OwnerCache {
  private readonly owners = new Map<string, string | null>()
  private readonly parents = new Map<string, string>()
  private readonly limitsOf = new Map<string, Limits>()
  live = false
  /** Which engine answers, read again from every answer of the event stream (kept across clear()). */
  engine: EngineKind | undefined
  /**
   * Whether the engine remaps user namespaces (GET /info), asked once; forgotten by
   * clear(), as the event stream reconnects when the engine restarts, maybe with other flags.
   */
  userns: Promise<boolean> | undefined

  get (id: string): string | null | undefined { return this.live ? this.owners.get(id) : undefined }
  set (id: string, owner: string | null): void { if (this.live && this.owners.size < 100_000) this.owners.set(id, owner) }
  /** An exec's or task's container/service, immutable for its life. */
  parent (id: string): string | undefined { return this.live ? this.parents.get(id) : undefined }
  setParent (id: string, parent: string): void { if (this.live && this.parents.size < 100_000) this.parents.set(id, parent) }
  /** A container's memory and CPU limits, for quotas; changed only by an update, which evicts it. */
  limits (id: string): Limits | undefined { return this.live ? this.limitsOf.get(id) : undefined }
  setLimits (id: string, limits: Limits): void { if (this.live && this.limitsOf.size < 100_000) this.limitsOf.set(id, limits) }
  evict (id: string): void { this.owners.delete(id); this.parents.delete(id); this.limitsOf.delete(id); this.shmUnknownIds.delete(id) }

  // An image's VOLUME declarations by its id, for a create's anonymous volumes (anonymous.ts):
  // an image id is the digest of its config, which holds them, so they never change and
  // need no event (nor a live stream) to stay true. Read from the inspect that resolved the
  // create's image, so that the create does not inspect the same image twice.
  private readonly imageVolumesOf = new Map<string, readonly string[]>()
  imageVolumes (id: string): readonly string[] | undefined { return this.imageVolumesOf.get(id) }
  setImageVolumes (id: string, volumes: readonly string[]): void {
    if (!/^sha256:[0-9a-f]{64}$/.test(id)) return
    if (this.imageVolumesOf.size >= 10_000) this.imageVolumesOf.clear()
    this.imageVolumesOf.set(id, volumes)
  }

  /**
   * The daemon's default /dev/shm size (default-shm-size), which it gives a container
   * created without one: learned from the first inspect of such a container the gateway
   * created (shmUnknown), for the limits kept from a create's answer (operations.ts);
   * forgotten with everything else, and on any daemon event (a reload).
   */
  shmDefault: number | undefined
  private readonly shmUnknownIds = new Set<string>()
  shmUnknown (id: string): void { if (this.live && this.shmUnknownIds.size < 1000) this.shmUnknownIds.add(id) }
  /** A container's stored ShmSize, read from an inspect: the default when it was created without one. */
  learnShm (id: string, shmSize: unknown): void {
    if (!this.shmUnknownIds.delete(id)) return
    if (this.live && typeof shmSize === 'number' && shmSize > 0) this.shmDefault = shmSize
  }

  clear (): void {
    this.shmDefault = undefined
    this.shmUnknownIds.clear()
    this.owners.clear(); this.parents.clear(); this.limitsOf.clear()
    this.tenantContainers.clear()
    this.userns = undefined
    this.generation++
  }

  // Each tenant's containers, for quotas: one list, then kept by the create and
  // destroy events. Full id -> whether it counts (a swarm task counts through its service).
  private readonly tenantContainers = new Map<string, Map<string, boolean>>()
  /** Lists in flight: what the events said while the engine was answering them. */
  private readonly listings = new Set<{ tenant: string, added: Map<string, boolean>, removed: Set<string> }>()
  /** Bumped by clear(): a list started before it is not kept. */
  private generation = 0

  /** The tenant's containers if they are known, else undefined (list them with `listContainers`). */
  containersOf (tenant: string): ReadonlyMap<string, boolean> | undefined { return this.live ? this.tenantContainers.get(tenant) : undefined }

  /** List the tenant's containers with `list` and keep the result, corrected by the events that came meanwhile. */
  async listContainers (tenant: string, list: () => Promise<Array<{ id: string, counts: boolean }>>): Promise<ReadonlyMap<string, boolean>> {
    const pending = { tenant, added: new Map<string, boolean>(), removed: new Set<string>() }
    const generation = this.generation
    this.listings.add(pending)
    try {
      const ids = new Map((await list()).map((c) => [c.id, c.counts]))
      for (const [id, counts] of pending.added) ids.set(id, counts)
      for (const id of pending.removed) ids.delete(id)
      if (this.live && generation === this.generation) this.tenantContainers.set(tenant, ids)
      return ids
    } finally {
      this.listings.delete(pending)
    }
  }

  // Quota reservations: what checks that passed have admitted and the engine has not
  // yet answered. Every check counts them, so concurrent creates cannot all see the
  // same usage; each is released when its request is answered (pipeline `finish`).
  private readonly reservations = new Map<string, Set<Reservation>>()

  /** Hold `r` for the tenant until release(). */
  reserve (tenant: string, r: Reservation): void {
    let held = this.reservations.get(tenant)
    if (!held) { held = new Set(); this.reservations.set(tenant, held) }
    held.add(r)
  }

  release (tenant: string, r: Reservation): void {
    const held = this.reservations.get(tenant)
    held?.delete(r)
    if (held?.size === 0) this.reservations.delete(tenant)
  }

  /** The tenant's reservations now (a copy). */
  reserved (tenant: string): Reservation[] { return [...(this.reservations.get(tenant) ?? [])] }

  /** A container create or destroy event (labels from the event's attributes). */
  containerEvent (action: 'create' | 'destroy', id: string, labels: Record<string, unknown>): void {
    if (action === 'destroy') {
      for (const p of this.listings) { p.added.delete(id); p.removed.add(id) }
      for (const set of this.tenantContainers.values()) set.delete(id)
      return
    }
    const tenant = labels[TENANT_LABEL]
    if (typeof tenant !== 'string') return
    const counts = labels[SWARM_SERVICE_LABEL] === undefined
    for (const p of this.listings) if (p.tenant === tenant) p.added.set(id, counts)
    this.tenantContainers.get(tenant)?.set(id, counts)
  }
}

/** The label the engine puts on a swarm task's container. */
export const SWARM_SERVICE_LABEL = 'com.docker.swarm.service.id'

const EVICTING = new Set(['destroy', 'delete', 'remove', 'update', 'untag', 'prune'])

/** Reconnection delays: doubled after every failed attempt, from the first up to the cap. */
export interface Backoff { readonly firstMs: number, readonly maxMs: number, readonly remindMs: number }
const BACKOFF: Backoff = { firstMs: 1000, maxMs: 30_000, remindMs: 10 * 60_000 }

/**
 * Follow the engine's event stream and evict what it reports gone or changed.
 * The cache is live only while the stream is connected.
 *
 * Without an engine (not started yet, restarting, a wrong upstream) this says so once,
 * naming the engine and the cause, and retries with exponential backoff; it logs
 * again when the stream is back, and meanwhile only every `remindMs`. Requests are
 * not affected: they reach (or fail to reach) the engine on their own, with a 502
 * that names it. `onConnected` is called each time the stream connects (the engine may
 * have been restarted or replaced: gateway/host-paths.ts asks it again).
 */
export function watchEvents (upstream: Upstream, cache: OwnerCache, log: Logger, backoff: Backoff = BACKOFF, onConnected?: () => void): () => void {
  let stopped = false
  let abort: AbortController | null = null
  let timer: NodeJS.Timeout | null = null
  let wake: (() => void) | null = null
  /** Consecutive attempts that did not connect. */
  let failures = 0
  /** Since when the stream is down, once that has been logged. */
  let downSince: number | null = null
  let lastWarning = 0
  const loop = async (): Promise<void> => {
    // eslint-disable-next-line no-unmodified-loop-condition -- stop() sets it, between awaits
    while (!stopped) {
      abort = new AbortController()
      let cause: string
      let connected = false
      try {
        const res = await upstream.pool.request({ method: 'GET', path: '/events', headers: upstream.host ? { host: upstream.host } : {}, signal: abort.signal })
        if (res.statusCode !== 200) {
          res.body.resume()
          throw new Error(`the engine at ${upstream.url} answered ${res.statusCode} to GET /events`)
        }
        cache.clear()
        cache.engine = engineKindOf(res.headers)
        cache.live = true
        connected = true
        if (downSince !== null) log.info({ upstream: upstream.url, downSeconds: Math.round((Date.now() - downSince) / 1000), attempts: failures }, 'engine event stream connected again; ownership cache on')
        downSince = null
        failures = 0
        onConnected?.()
        for await (const { value } of jsonLines(res.body)) {
          const ev = value as { Type?: unknown, Action?: unknown, Actor?: { ID?: unknown, Attributes?: unknown } } | null | undefined
          // A line the gateway cannot read: drop everything to stay correct.
          if (ev === null || typeof ev !== 'object') { cache.clear(); continue }
          const action = String(ev.Action ?? '').split(':')[0]
          const id = ev.Actor?.ID
          if (typeof id !== 'string' || id === '') continue
          if (EVICTING.has(action)) cache.evict(id)
          if (ev.Type === 'daemon') cache.shmDefault = undefined
          // Podman reports a container's removal as `remove`, where dockerd says `destroy`.
          const containerAction = action === 'remove' ? 'destroy' : action
          if (ev.Type === 'container' && (containerAction === 'create' || containerAction === 'destroy')) {
            const attributes = ev.Actor?.Attributes
            cache.containerEvent(containerAction, id, attributes !== null && typeof attributes === 'object' ? attributes as Record<string, unknown> : {})
            if (containerAction === 'destroy' && attributes !== null && typeof attributes === 'object') removeAutoRemoved(upstream, attributes as Record<string, unknown>, log)
          }
        }
        cause = `the engine at ${upstream.url} closed the event stream`
      } catch (err) {
        // Connection errors in the words of the 502 a request gets (`cannot reach the Docker engine at ...: ENOENT`).
        cause = (err as { code?: string }).code !== undefined ? upstreamError(err, upstream.url).message : (err as Error).message
      } finally {
        cache.live = false
        cache.clear()
      }
      if (stopped) break
      failures++
      const delay = Math.min(backoff.maxMs, backoff.firstMs * 2 ** Math.min(failures - 1, 30))
      const now = Date.now()
      if (downSince === null) {
        downSince = now
        lastWarning = now
        log.warn({ upstream: upstream.url, err: { message: cause } }, `${connected ? 'engine event stream lost' : 'cannot follow the engine\'s events'}: ${cause}; ownership cache off, retrying (backoff up to ${backoff.maxMs / 1000} s)`)
      } else if (now - lastWarning >= backoff.remindMs) {
        lastWarning = now
        log.warn({ upstream: upstream.url, err: { message: cause }, downSeconds: Math.round((now - downSince) / 1000), attempts: failures }, `engine event stream still down: ${cause}`)
      }
      await new Promise<void>((resolve) => { wake = resolve; timer = setTimeout(resolve, delay); timer.unref() })
    }
  }
  void loop()
  return () => {
    stopped = true
    abort?.abort()
    if (timer) clearTimeout(timer)
    wake?.()
  }
}

function enc (s: string): string { return encodeURIComponent(s) }

/**
 * The daemon removed a `--rm` container on its own, with the volumes it holds without a
 * name; the gateway's anonymous volumes have names, so they are removed here: those marked
 * with the container's token and owned by its tenant (every replica tries; a volume still
 * in use elsewhere stays, as the engine leaves it).
 */
function removeAutoRemoved (upstream: Upstream, labels: Record<string, unknown>, log: Logger): void {
  const token = labels[AUTOREMOVE_LABEL]
  const tenant = labels[TENANT_LABEL]
  if (typeof token !== 'string' || token === '' || typeof tenant !== 'string' || tenant === '') return
  const filters = enc(JSON.stringify({ label: { [`${ANONYMOUS_LABEL}=${token}`]: true, [`${TENANT_LABEL}=${tenant}`]: true } }))
  void (async () => {
    const r = await engineJson(upstream, 'GET', `/volumes?filters=${filters}`)
    for (const v of (r.body as { Volumes?: Array<{ Name?: unknown }> } | null)?.Volumes ?? []) {
      if (typeof v.Name !== 'string') continue
      const d = await engineJson(upstream, 'DELETE', `/volumes/${enc(v.Name)}`)
      if (d.status >= 300 && d.status !== 404) log.warn({ tenant, volume: v.Name, status: d.status }, 'anonymous volume of a --rm container not removed')
    }
  })().catch((err: Error) => log.warn({ tenant, err: { message: err.message } }, 'anonymous volumes of a --rm container not removed'))
}

/**
 * Whether a volume could have this name. None has a `/` (the engine refuses them), and
 * the engine's router cannot look one up: `/volumes/%2Fetc` is redirected (301) to a
 * cleaned path, which is no answer about a volume.
 */
export function volumeName (name: string): boolean {
  return name !== '' && !name.includes('/')
}

/**
 * Whether a SystemInfo answer says the engine remaps user namespaces: dockerd lists
 * `name=userns` among its SecurityOptions (each option is `name=X[,key=value...]`, as
 * daemon/info.go writes them) when started with --userns-remap.
 */
export function remapsUsers (info: unknown): boolean {
  const options = (info as { SecurityOptions?: unknown } | null)?.SecurityOptions
  return Array.isArray(options) && options.some((o) => typeof o === 'string' && o.split(',').includes('name=userns'))
}

export class Resolver {
  constructor (private readonly upstream: Upstream, readonly cache: OwnerCache, readonly provenance: Provenance = new Provenance(null)) {}

  /** Which engine answers: read from the event stream's answer, else asked once with a ping. */
  async engine (): Promise<EngineKind> {
    if (this.cache.engine) return this.cache.engine
    let res
    try {
      res = await this.upstream.pool.request({ method: 'GET', path: '/_ping', headers: this.upstream.host ? { host: this.upstream.host } : {}, signal: AbortSignal.timeout(30_000) })
    } catch (err) {
      throw upstreamError(err, this.upstream.url)
    }
    await res.body.dump()
    this.cache.engine = engineKindOf(res.headers)
    return this.cache.engine
  }

  /**
   * Whether the engine runs containers in a remapped user namespace (dockerd
   * --userns-remap): its SystemInfo's SecurityOptions then hold `name=userns`. Asked once
   * and kept (until the event stream reconnects); a failed question is asked again next time.
   */
  async usernsRemapped (): Promise<boolean> {
    if (this.cache.userns === undefined) {
      const asked = this.get('/info').then((r) => r.status === 200 && remapsUsers(r.body))
      this.cache.userns = asked
      asked.catch(() => { if (this.cache.userns === asked) this.cache.userns = undefined })
    }
    return await this.cache.userns
  }

  async get (path: string): Promise<{ status: number, body: any }> {
    const r = await this.probe(path)
    if (r.status >= 500) throw new GatewayError('UPSTREAM_FAILED', `ownership lookup failed: the engine answered ${r.status} to GET ${path.split('?')[0]}`)
    return r
  }

  /**
   * A GET whose 5xx answer means something (the engine answers 503 to /services and
   * /nodes when it is not a swarm manager): the status is returned, not thrown.
   */
  async probe (path: string): Promise<{ status: number, body: any }> {
    return await engineJson(this.upstream, 'GET', path) as { status: number, body: any }
  }

  /**
   * A GET of a swarm object or list. An engine that is not a swarm manager has none:
   * dockerd answers 503 ("This node is not a swarm manager..."), Podman 404 to the whole
   * swarm API. Podman's 404 is answered as a 404; dockerd's 503 as an empty list where a
   * list is asked (`inactive: 'none'`: quotas, task lists), else relayed as the engine's
   * own 503 so that a tenant sees what the engine would tell it. Any other 5xx throws.
   */
  async swarmGet (path: string, inactive: 'none' | 'relay'): Promise<{ status: number, body: any }> {
    const r = await this.probe(path)
    if (r.status === 404) return { status: 404, body: null }
    if (r.status === 503) {
      if (inactive === 'none') return { status: 404, body: null }
      const message = typeof r.body?.message === 'string' ? r.body.message : 'This node is not a swarm manager.'
      throw new GatewayError('SWARM_INACTIVE', message)
    }
    if (r.status >= 500) throw new GatewayError('UPSTREAM_FAILED', `ownership lookup failed: the engine answered ${r.status} to GET ${path.split('?')[0]}`)
    return r
  }

  /** The tenant's objects of a kind, listed with the owner-label filter (swarm objects: none on a plain engine). */
  async ownList (kind: 'container' | 'network' | 'volume' | 'service' | 'secret' | 'config' | 'image', tenant: string, inactive: 'none' | 'relay' = 'none'): Promise<any[]> {
    const filters = enc(serializeFilters(withLabel(new Map(), `${TENANT_LABEL}=${tenant}`)))
    const path = {
      container: `/containers/json?all=1&filters=${filters}`,
      network: `/networks?filters=${filters}`,
      volume: `/volumes?filters=${filters}`,
      service: `/services?filters=${filters}`,
      secret: `/secrets?filters=${filters}`,
      config: `/configs?filters=${filters}`,
      image: `/images/json?all=1&filters=${filters}`,
    }[kind]
    const swarm = kind === 'service' || kind === 'secret' || kind === 'config'
    const r = swarm ? await this.swarmGet(path, inactive) : await this.get(path)
    // Swarm objects on an engine that is not a swarm manager: there are none.
    if (swarm && r.status === 404) return []
    if (r.status !== 200) throw new GatewayError('UPSTREAM_FAILED', `listing ${kind}s for an ownership check failed (${r.status})`)
    const list = kind === 'volume' ? r.body?.Volumes : r.body
    // Defence in depth: keep only what carries the label, whatever the engine did with the filter.
    return (Array.isArray(list) ? list : []).filter((o) => ownerOf(o.Labels ?? o.Spec?.Labels) === tenant)
  }

  /** A full id's owner label, cached; undefined when the engine does not know the id. */
  private async ownerById (kind: ObjectKind, id: string, path: string, labels: (body: any) => Labels): Promise<string | null | undefined> {
    const hit = this.cache.get(id)
    if (hit !== undefined) return hit
    const r = kind === 'service' || kind === 'secret' || kind === 'config' ? await this.swarmGet(path, 'relay') : await this.get(path)
    if (r.status === 404) return undefined
    if (r.status !== 200) throw new GatewayError('UPSTREAM_FAILED', `looking up ${kind} ${id} failed (${r.status})`)
    // The engine's inspect also resolves names and prefixes: an object merely *named* like
    // an id is not the id's object (and must never be cached under it).
    if (String(r.body?.Id ?? r.body?.ID ?? '') !== id) return undefined
    const owner = ownerOf(labels(r.body))
    this.cache.set(id, owner)
    return owner
  }

  /**
   * The object the engine picks for a reference, among ALL its objects of a kind (never
   * only the caller's): full id, then exact name, then unique id prefix, as dockerd's
   * GetContainer, FindNetwork and swarm's getService/getSecret/getConfig do. A tenant's
   * name or prefix that means another object to the engine must not mean the tenant's
   * own object to the gateway. An ambiguous choice (the engine refuses it) is null.
   */
  private pick<T extends { id: string, names: string[], owner?: string | null }> (ref: string, all: T[], qualified?: Qualified): T | null {
    if (ref === '') return null
    const byId = all.find((o) => o.id === ref)
    if (byId) return byId
    const named = all.filter((o) => o.names.includes(qualified?.name ?? ref))
    if (named.length === 1) return named[0]
    if (named.length > 1) return null
    if (qualified !== undefined && qualified.name !== ref) {
      // Per-tenant names (names.ts): a name without the tenant's prefix (one the engine
      // generated, `eager_turing`, or one made before names were private) names the
      // tenant's own object only. Another's does not exist for the tenant, as on an
      // engine of its own: the reference goes on to be read as an id prefix.
      const generated = all.filter((o) => o.names.includes(ref) && o.owner === qualified.tenant)
      if (generated.length === 1) return generated[0]
      if (generated.length > 1) return null
    }
    const prefixed = all.filter((o) => o.id.startsWith(ref))
    return prefixed.length === 1 ? prefixed[0] : null
  }

  /** Whether no object of `all` could be what the engine picks for `ref` (none matches by id, name or id prefix). */
  private noneMatches (ref: string, all: Array<{ id: string, names: string[] }>, qualified?: Qualified): boolean {
    return ref !== '' && !all.some((o) => o.id === ref || o.names.includes(ref) || (qualified !== undefined && o.names.includes(qualified.name)) || o.id.startsWith(ref))
  }

  /** The engine's pick among all objects, then its owner decides: the tenant's own, or missing (absent when nothing matched). */
  private decide (pick: { id: string, names: string[], owner: string | null } | null, tenant: string, absent: boolean): Resolution {
    if (!pick || pick.owner !== tenant) return absent ? ABSENT : { state: 'missing' }
    return { state: 'own', id: pick.id, ...(pick.names[0] ? { name: pick.names[0] } : {}) }
  }

  /** `qualified`: the engine's name for `ref` under per-tenant names (names.ts); the name itself otherwise. */
  async container (ref: string, tenant: string, qualified?: string): Promise<Resolution> {
    const name = ref.startsWith('/') ? ref.slice(1) : ref
    const q = qualified === undefined ? undefined : { name: qualified.replace(/^\//, ''), tenant }
    if (FULL_ID.test(name)) {
      // A full id is the engine's first choice whenever it exists.
      const owner = await this.ownerById('container', name, `/containers/${name}/json`, (b) => b?.Config?.Labels)
      if (owner !== undefined) return owner === tenant ? { state: 'own', id: name } : { state: 'missing' }
    }
    if (name === '') return { state: 'missing' }
    const r = await this.get('/containers/json?all=1')
    if (r.status !== 200 || !Array.isArray(r.body)) throw new GatewayError('UPSTREAM_FAILED', `listing containers for an ownership check failed (${r.status})`)
    // Names include the links' `/parent/alias` names, which the engine's name registry resolves too.
    const all = (r.body as any[]).map((c) => ({ id: String(c.Id), names: (c.Names ?? []).map((n: string) => String(n).replace(/^\//, '')), owner: ownerOf(c.Labels) }))
    return this.decide(this.pick(name, all, q), tenant, this.noneMatches(name, all, q))
  }

  /**
   * A container by exact name only, the way the engine's names table answers (link names
   * such as `parent/alias` included; never an id or a prefix): the tenant's own, or missing.
   */
  async containerByName (name: string, tenant: string): Promise<Resolution> {
    const want = '/' + name.replace(/^\//, '')
    const found = (await this.ownList('container', tenant)).filter((c) => (c.Names ?? []).includes(want))
    return found.length === 1 ? { state: 'own', id: String(found[0].Id), name: want.slice(1) } : { state: 'missing' }
  }

  async network (ref: string, tenant: string, qualified?: string): Promise<Resolution> {
    const q = qualified === undefined ? undefined : { name: qualified, tenant }
    if (FULL_ID.test(ref)) {
      const owner = await this.ownerById('network', ref, `/networks/${ref}`, (b) => b?.Labels)
      if (owner === tenant) return { state: 'own', id: ref }
    }
    const r = await this.get('/networks')
    if (r.status !== 200 || !Array.isArray(r.body)) throw new GatewayError('UPSTREAM_FAILED', `listing networks for an ownership check failed (${r.status})`)
    const all = (r.body as any[]).map((n) => ({ id: String(n.Id), names: [String(n.Name)], owner: ownerOf(n.Labels), scope: n.Scope }))
    const pick = this.pick(ref, all, q)
    // The predefined networks are nobody's: visible (and attachable, as policy allows) to all.
    const engine = await this.engine()
    if (pick && pick.owner === null && isPredefinedNetwork(pick.names[0], engine) && pick.scope === 'local') {
      return { state: 'shared', id: pick.id, name: pick.names[0] }
    }
    // Podman lists its default network as `bridge`; by its own name it is `podman` (podman.ts).
    if (!pick && engine === 'podman' && ref === PODMAN_DEFAULT_NETWORK) {
      const d = await this.get(`/networks/${enc(ref)}`)
      if (d.status === 200 && ownerOf(d.body?.Labels) === null) return { state: 'shared', id: String(d.body.Id), name: ref }
      if (d.status === 200) return { state: 'missing' }
    }
    return this.decide(pick, tenant, this.noneMatches(ref, all, q))
  }

  async volume (name: string, tenant: string): Promise<Resolution> {
    // A name the engine could not have given a volume names none.
    if (!volumeName(name)) return ABSENT
    const r = await this.get(`/volumes/${enc(name)}`)
    if (r.status === 404) return ABSENT
    if (r.status !== 200) throw new GatewayError('UPSTREAM_FAILED', `looking up volume ${name} failed (${r.status})`)
    return ownerOf(r.body?.Labels) === tenant ? { state: 'own', id: name, name } : { state: 'missing' }
  }

  /** Whether a volume of that name exists at all (any owner). */
  async volumeExists (name: string): Promise<boolean> {
    return volumeName(name) && (await this.get(`/volumes/${enc(name)}`)).status === 200
  }

  async exec (id: string, tenant: string): Promise<Resolution> {
    let container = this.cache.parent(id)
    if (container === undefined) {
      const r = await this.get(`/exec/${enc(id)}/json`)
      if (r.status === 404) return ABSENT
      if (r.status !== 200) return { state: 'missing' }
      container = String(r.body?.ContainerID ?? '')
      if (r.body?.ID === id) this.cache.setParent(id, container)
    }
    const c = FULL_ID.test(container) ? await this.container(container, tenant) : { state: 'missing' as const }
    return c.state === 'own' ? { state: 'own', id } : { state: 'missing' }
  }

  private async swarmObject (kind: 'service' | 'secret' | 'config', ref: string, tenant: string): Promise<Resolution> {
    if (SWARM_ID.test(ref)) {
      const owner = await this.ownerById(kind, ref, `/${kind}s/${ref}`, (b) => b?.Spec?.Labels)
      if (owner !== undefined) return owner === tenant ? { state: 'own', id: ref } : { state: 'missing' }
    }
    // Not a swarm manager: the engine's own 503, whatever the reference.
    const r = await this.swarmGet(`/${kind}s`, 'relay')
    const all = (Array.isArray(r.body) ? r.body as any[] : []).map((o) => ({ id: String(o.ID), names: [String(o.Spec?.Name ?? '')], owner: ownerOf(o.Spec?.Labels), listed: o.Spec?.Labels !== null && o.Spec?.Labels !== undefined }))
    const pick = this.pick(ref, all)
    // Podman lists secrets without their labels (`"Labels": null`, measured 4.3); its inspect has them.
    if (pick && !pick.listed) return this.decide({ ...pick, owner: (await this.ownerById(kind, pick.id, `/${kind}s/${pick.id}`, (b) => b?.Spec?.Labels)) ?? null }, tenant, false)
    return this.decide(pick, tenant, this.noneMatches(ref, all))
  }

  async service (ref: string, tenant: string): Promise<Resolution> { return this.swarmObject('service', ref, tenant) }
  async secret (ref: string, tenant: string): Promise<Resolution> { return this.swarmObject('secret', ref, tenant) }
  async config (ref: string, tenant: string): Promise<Resolution> { return this.swarmObject('config', ref, tenant) }

  async task (ref: string, tenant: string): Promise<Resolution> {
    let service = SWARM_ID.test(ref) ? this.cache.parent(ref) : undefined
    let id = ref
    if (service === undefined) {
      const r = await this.swarmGet(`/tasks/${enc(ref)}`, 'relay')
      if (r.status === 404) return ABSENT
      if (r.status !== 200) return { state: 'missing' }
      id = String(r.body?.ID)
      service = String(r.body?.ServiceID ?? '')
      this.cache.setParent(id, service)
    }
    const s = service ? await this.service(service, tenant) : { state: 'missing' as const }
    return s.state === 'own' && s.id === service ? { state: 'own', id } : { state: 'missing' }
  }

  /**
   * Images are a shared catalog: visible unless another tenant's owner label marks
   * them (an image built or committed by that tenant).
   */
  async image (ref: string, tenant: string): Promise<Resolution | { readonly state: 'foreign' }> {
    const path = `/images/${ref.split('/').map(enc).join('/')}/json`
    const r = await this.probe(path)
    // Podman 4 refuses a 64-digit hex string that is no image's id with a 500 while normalizing it as a name.
    if (r.status >= 500 && !/cannot specify 64-byte hexadecimal strings/.test(String(r.body?.message))) {
      throw new GatewayError('UPSTREAM_FAILED', `ownership lookup failed: the engine answered ${r.status} to GET ${path}`)
    }
    // The engine's own inspect resolved the reference (id, name, digest, id prefix) to nothing.
    if (r.status === 404) return ABSENT
    if (r.status !== 200) return { state: 'missing' }
    const config = r.body?.Config
    this.cache.setImageVolumes(String(r.body?.Id), Object.keys(config?.Volumes !== null && typeof config?.Volumes === 'object' ? config.Volumes : {}))
    const owner = ownerOf(r.body?.Config?.Labels)
    if (owner === tenant) return { state: 'own', id: String(r.body?.Id) }
    if (owner === null && catalogued(r.body)) return { state: 'shared', id: String(r.body?.Id), names: [r.body?.RepoTags, r.body?.RepoDigests].flatMap((xs) => Array.isArray(xs) ? xs : []).filter((n): n is string => typeof n === 'string') }
    return { state: 'foreign' }
  }

  /**
   * A request of the gateway's own whose answer the caller reads (and must consume or
   * destroy): a volume's root owner (volume-owner.ts).
   */
  async raw (method: 'GET' | 'PUT' | 'DELETE', path: string, body?: Buffer, headers: Record<string, string> = {}): Promise<Dispatcher.ResponseData> {
    try {
      return await this.upstream.pool.request({ method, path, headers: { ...(this.upstream.host ? { host: this.upstream.host } : {}), ...headers }, ...(body ? { body } : {}), signal: AbortSignal.timeout(30_000) })
    } catch (err) {
      throw upstreamError(err, this.upstream.url)
    }
  }

  /** A create of the gateway's own (volumes a container create would make implicitly). */
  async create (path: string, body: unknown): Promise<{ status: number, body: unknown }> {
    return engineJson(this.upstream, 'POST', path, body)
  }

  /** A removal of the gateway's own (anonymous volumes it made: anonymous.ts). */
  async remove (path: string): Promise<{ status: number, body: unknown }> {
    return engineJson(this.upstream, 'DELETE', path)
  }

  /** Which tenant (or nobody: null; or no such object: undefined) holds a name. */
  async nameHolder (kind: 'container' | 'network' | 'service' | 'secret' | 'config', name: string): Promise<string | null | undefined> {
    const filters = enc(JSON.stringify({ name: { [kind === 'container' ? `^/?${escapeRegExp(name)}$` : name]: true } }))
    const path = { container: `/containers/json?all=1&filters=${filters}`, network: `/networks?filters=${filters}`, service: `/services?filters=${filters}`, secret: `/secrets?filters=${filters}`, config: `/configs?filters=${filters}` }[kind]
    // A swarm name on an engine that is not a swarm manager: nobody holds it (the engine refuses the create itself).
    const r = kind === 'container' || kind === 'network' ? await this.get(path) : await this.swarmGet(path, 'none')
    if (r.status !== 200 || !Array.isArray(r.body)) return undefined
    const exact = (r.body as any[]).find((o) => kind === 'container' ? (o.Names ?? []).includes('/' + name) : (o.Name ?? o.Spec?.Name) === name)
    if (!exact) return undefined
    return ownerOf(exact.Labels ?? exact.Spec?.Labels)
  }
}

function escapeRegExp (s: string): string { return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&') }
