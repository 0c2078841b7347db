/**
 * Per-tenant quotas (tenancy.yaml `quotas`): number of containers, sum of memory and
 * CPU limits, number of volumes. Usage is counted on the engine at the moment of the
 * request: the tenant's own containers (those a swarm service runs are counted through
 * their service instead) plus each own service's replicas times its limits.
 *
 * A container's memory is its limit plus its memory-backed mounts: each tmpfs's size,
 * and /dev/shm past the engine's default 64 MiB (which every container has, like its
 * root filesystem). The kernel charges tmpfs pages to the container that writes them,
 * but pages swapped out or kept by a mount another process holds open are not bounded
 * by that limit alone; the quota counts what the tenant asked for.
 */
import { optionTokens, tmpfsMount, tmpfsMountTokens } from '../../policy/fields'
import { quotaFor, type Quota } from '../../policy/tenancy'
import { TenancyRefusal } from './refusal'
import { num, refuse, type Call } from './call'
import { SWARM_SERVICE_LABEL, type Limits, type Reservation } from './lookup'
import { QuotaStoreError, type SharedReservations } from './quota-store'

export interface Usage { containers: number, memory: number, nanoCpus: number }
const NO_LIMITS: Limits = { memory: 0, nanoCpus: 0 }

/** CPU limit in nano-CPUs from NanoCpus or CpuQuota/CpuPeriod (0: unlimited). */
export function cpuOf (hc: any): number {
  if (num(hc?.NanoCpus)) return num(hc.NanoCpus)
  if (num(hc?.CpuQuota) && num(hc?.CpuPeriod)) return Math.round(num(hc.CpuQuota) * 1e9 / num(hc.CpuPeriod))
  return 0
}

/** The engine's default /dev/shm size: not counted. */
export const SHM_BASELINE = 64 * 1024 * 1024

/** The sizes of the tmpfs mounts in a list of Mounts (a container's or a service's). */
export function tmpfsMounts (mounts: unknown): number {
  return (Array.isArray(mounts) ? mounts : []).filter((m: any) => m?.Type === 'tmpfs').reduce((n: number, m: any) => n + tmpfsMount(tmpfsMountTokens(m)).size, 0)
}

/**
 * The memory-backed mounts of a HostConfig (as sent, or as the engine reports it): the
 * sizes of HostConfig.Tmpfs and tmpfs Mounts, and ShmSize past the engine's default. A
 * tmpfs without a fixed size is refused to tenants (policy rule tmpfs-size): none is counted.
 */
export function memoryBacked (hc: any): number {
  const tmpfs = Object.values(hc?.Tmpfs ?? {}).reduce((n: number, o) => n + tmpfsMount(optionTokens(typeof o === 'string' ? o : '')).size, 0)
  return tmpfs + tmpfsMounts(hc?.Mounts) + Math.max(0, num(hc?.ShmSize) - SHM_BASELINE)
}

/** A create's or an inspect's memory: the limit and the memory-backed mounts; 0 without a limit. */
export function memoryOf (hc: any): number {
  return num(hc?.Memory) > 0 ? num(hc.Memory) + memoryBacked(hc) : 0
}

/**
 * How many tasks (containers) a service can run at once, by mode: replicated, its
 * replicas (1 when unset); global and global jobs, one per node; replicated jobs,
 * MaxConcurrent (1 when unset) but no more than TotalCompletions (which defaults to it).
 */
export function serviceReplicas (spec: any, nodes: number): number {
  const mode = spec?.Mode
  if (isSet(mode?.Global) || isSet(mode?.GlobalJob)) return nodes
  const job = mode?.ReplicatedJob
  if (isSet(job)) {
    const max = num(job.MaxConcurrent) || 1
    return job.TotalCompletions === undefined || job.TotalCompletions === null ? max : Math.min(max, num(job.TotalCompletions))
  }
  const r = mode?.Replicated?.Replicas
  return r === undefined || r === null ? 1 : num(r)
}

function isSet (v: unknown): boolean { return v !== undefined && v !== null }

export function serviceUsage (spec: any, nodes: number): Usage {
  const replicas = serviceReplicas(spec, nodes)
  const limits = spec?.TaskTemplate?.Resources?.Limits ?? {}
  const memory = num(limits.MemoryBytes) > 0 ? num(limits.MemoryBytes) + tmpfsMounts(spec?.TaskTemplate?.ContainerSpec?.Mounts) : 0
  return { containers: replicas, memory: replicas * memory, nanoCpus: replicas * num(limits.NanoCPUs) }
}

/** What the tenant uses now, leaving out one container or service being replaced. */
export async function usage (call: Call, except?: { container?: string, service?: string }, fresh = false, limitsNeeded = true): Promise<Usage> {
  const total: Usage = { containers: 0, memory: 0, nanoCpus: 0 }
  // The tenant's containers are listed once and then kept by the engine's create and
  // destroy events; a container's limits are read once and kept until the engine
  // reports it updated or gone. A create costs no engine request for its quota.
  const cache = call.r.cache
  const known = (fresh ? undefined : cache.containersOf(call.tenant)) ?? await cache.listContainers(call.tenant, async () =>
    (await call.r.ownList('container', call.tenant)).map((c) => ({ id: String(c.Id), counts: c.Labels?.[SWARM_SERVICE_LABEL] === undefined })))
  const containers = [...known].filter(([id, counts]) => counts && id !== except?.container).map(([id]) => id)
  const limits = await Promise.all(containers.map(async (id): Promise<Limits | null> => {
    if (!limitsNeeded) return NO_LIMITS
    const cached = cache.limits(id)
    if (cached !== undefined) return cached
    const hc = (await call.r.get(`/containers/${id}/json`)).body?.HostConfig
    // Gone since it was listed (its destroy event is on its way): not counted.
    if (!hc) return null
    cache.learnShm(id, hc.ShmSize)
    const l = { memory: memoryOf(hc), nanoCpus: cpuOf(hc) }
    cache.setLimits(id, l)
    return l
  }))
  for (const l of limits) {
    if (l === null) continue
    total.containers++
    total.memory += l.memory
    total.nanoCpus += l.nanoCpus
  }
  const services = (await call.r.ownList('service', call.tenant)).filter((s) => s.ID !== except?.service)
  // Nodes are counted only for global services, which run one task on each.
  const nodes = services.some((s) => isSet(s.Spec?.Mode?.Global) || isSet(s.Spec?.Mode?.GlobalJob)) ? await nodeCount(call) : 1
  for (const s of services) add(total, serviceUsage(s.Spec, nodes))
  return total
}

export async function nodeCount (call: Call): Promise<number> {
  const r = await call.r.probe('/nodes')
  return r.status === 200 && Array.isArray(r.body) ? Math.max(1, r.body.length) : 1
}

function add (a: Usage, b: Readonly<Usage>): void { a.containers += b.containers; a.memory += b.memory; a.nanoCpus += b.nanoCpus }

function gib (n: number): string { return `${(n / 1024 ** 3).toFixed(2).replace(/\.?0+$/, '')} GiB` }
function cpus (n: number): string { return `${(n / 1e9).toFixed(3).replace(/\.?0+$/, '')}` }

/**
 * Refuse with a 403 naming the quota when `adding` on top of the current usage passes a
 * limit; otherwise admit it: `adding` is reserved for the tenant until the request is
 * answered (or the returned function ends it), so that concurrent requests count each other.
 *
 * With a shared store (call.quotaStore: the policy database) the reservations of every
 * replica count, and the check and the reservation happen under the tenant's lock in
 * that store (quota-store.ts). Without one, within this process: the check and the
 * reservation happen with no await in between. Reservations held when the listing
 * started are counted too, even if released meanwhile (their object may be missing
 * from the list): at worst a request is counted twice for a moment, never not at all.
 */
export async function checkQuota (call: Call, adding: Usage, except?: { container?: string, service?: string }): Promise<() => void> {
  const q: Quota = quotaFor(call.settings, call.tenant)
  if (q.containers === undefined && q.memory === undefined && q.nanoCpus === undefined) return () => {}
  // Without a memory or CPU quota, containers are only counted: none is inspected.
  const limitsNeeded = q.memory !== undefined || q.nanoCpus !== undefined
  if (call.quotaStore) return await checkShared(call, call.quotaStore, q, adding, except, limitsNeeded)
  const cache = call.r.cache
  let before = new Set(cache.reserved(call.tenant))
  let listed = await usage(call, except, false, limitsNeeded)
  const withHeld = (u: Usage): Usage => {
    const total = { ...u }
    for (const r of new Set([...before, ...cache.reserved(call.tenant)])) add(total, r)
    return total
  }
  // Kept usage may still hold a container whose destroy event is on its way: a
  // refusal is only ever made on a fresh listing.
  if (exceeds(q, withHeld(listed), adding)) {
    before = new Set(cache.reserved(call.tenant))
    listed = await usage(call, except, true, limitsNeeded)
  }
  judge(call, q, withHeld(listed), adding)
  // Admitted: held until the request is answered. An update or a scale holds its whole
  // new usage, on top of the old one that other checks still list: counted twice for
  // the moment, never not at all.
  const held: Reservation = { ...adding }
  cache.reserve(call.tenant, held)
  const release = (): void => cache.release(call.tenant, held)
  call.settled.push(release)
  // Also for the caller to end it sooner, once what it admitted counts by itself.
  return release
}

/**
 * How long a container update's reservation outlives its answer in the shared store:
 * the other replicas keep the container's old limits until the engine's `update` event
 * reaches them (their own event streams), and until then the reservation counts the new ones.
 */
const UPDATE_LINGER_SECONDS = 5

/**
 * The check across replicas. The engine's usage is read while the tenant's lock is
 * held, and afresh (this replica's kept list may not have another replica's create
 * yet: its event may still be on its way, while that replica has already let its
 * reservation go). The engine lists a created container from its create's answer on.
 */
async function checkShared (call: Call, store: SharedReservations, q: Quota, adding: Usage, except: { container?: string, service?: string } | undefined, limitsNeeded: boolean): Promise<() => void> {
  let lease
  try {
    lease = await store.admit(call.tenant, call.op.id, async (held) => {
      const now = await usage(call, except, true, limitsNeeded)
      add(now, held)
      judge(call, q, now, adding)
      return adding
    })
  } catch (err) {
    if (!(err instanceof QuotaStoreError)) throw err
    // Fail closed: without the other replicas' reservations the check cannot hold.
    throw storeUnavailable(call, err)
  }
  const { release } = lease
  const updates = except?.container !== undefined
  const end = (status?: number): void => release(updates && status !== undefined && status >= 200 && status < 300 ? UPDATE_LINGER_SECONDS : 0)
  call.settled.push(end)
  return () => end()
}

function exceeds (q: Quota, u: Usage, adding: Usage): boolean {
  return (q.containers !== undefined && adding.containers > 0 && u.containers + adding.containers > q.containers) ||
    (q.memory !== undefined && adding.memory > 0 && u.memory + adding.memory > q.memory) ||
    (q.nanoCpus !== undefined && adding.nanoCpus > 0 && u.nanoCpus + adding.nanoCpus > q.nanoCpus)
}

/** Throw the 403 naming the quota that `adding` on top of `now` (usage and reservations) passes. */
function judge (call: Call, q: Quota, now: Usage, adding: Usage): void {
  const after = { containers: now.containers + adding.containers, memory: now.memory + adding.memory, nanoCpus: now.nanoCpus + adding.nanoCpus }
  if (q.containers !== undefined && adding.containers > 0 && after.containers > q.containers) {
    throw refuse('quota-containers', `quota exceeded for tenant ${call.tenant}: containers ${after.containers} > ${q.containers} (${now.containers} in use)`)
  }
  if (q.memory !== undefined && adding.memory > 0 && after.memory > q.memory) {
    throw refuse('quota-memory', `quota exceeded for tenant ${call.tenant}: memory limits ${gib(after.memory)} > ${gib(q.memory)} (${gib(now.memory)} in use)`)
  }
  if (q.memory !== undefined && adding.containers > 0 && adding.memory === 0) {
    throw refuse('quota-memory', `tenant ${call.tenant} has a memory quota: set a memory limit (--memory)`)
  }
  if (q.nanoCpus !== undefined && adding.nanoCpus > 0 && after.nanoCpus > q.nanoCpus) {
    throw refuse('quota-cpus', `quota exceeded for tenant ${call.tenant}: CPU limits ${cpus(after.nanoCpus)} > ${cpus(q.nanoCpus)} CPUs (${cpus(now.nanoCpus)} in use)`)
  }
  if (q.nanoCpus !== undefined && adding.containers > 0 && adding.nanoCpus === 0) {
    throw refuse('quota-cpus', `tenant ${call.tenant} has a CPU quota: set a CPU limit (--cpus)`)
  }
}

export async function checkVolumeQuota (call: Call, adding: number): Promise<void> {
  const q = quotaFor(call.settings, call.tenant)
  const limit = q.volumes
  if (limit === undefined || adding <= 0) return
  const reservation: Reservation = { containers: 0, memory: 0, nanoCpus: 0, volumes: adding }
  const judgeVolumes = (listed: number, held: number): void => {
    const now = listed + held
    if (now + adding > limit) throw refuse('quota-volumes', `quota exceeded for tenant ${call.tenant}: volumes ${now + adding} > ${limit} (${now} in use)`)
  }
  const volumesOf = (rs: Iterable<Reservation>): number => { let n = 0; for (const r of rs) n += r.volumes ?? 0; return n }
  if (call.quotaStore) {
    let lease
    try {
      lease = await call.quotaStore.admit(call.tenant, call.op.id, async (held) => {
        judgeVolumes((await call.r.ownList('volume', call.tenant)).length, held.volumes ?? 0)
        return reservation
      })
    } catch (err) {
      if (!(err instanceof QuotaStoreError)) throw err
      throw storeUnavailable(call, err)
    }
    call.settled.push(() => lease.release(0))
    return
  }
  // Held until the request is answered, like a container's: concurrent creates count each
  // other (what was held before the listing too: it may have been created and released since).
  const cache = call.r.cache
  const before = cache.reserved(call.tenant)
  const listed = (await call.r.ownList('volume', call.tenant)).length
  judgeVolumes(listed, volumesOf(new Set([...before, ...cache.reserved(call.tenant)])))
  cache.reserve(call.tenant, reservation)
  call.settled.push(() => cache.release(call.tenant, reservation))
}

/** Fail closed: without the other replicas' reservations a quota check cannot hold. */
function storeUnavailable (call: Call, err: QuotaStoreError): TenancyRefusal {
  return new TenancyRefusal('QUOTA_STORE_UNAVAILABLE', `${call.op.id} refused for tenant ${call.tenant}: its quota cannot be checked, ${err.message} (rule quota-store)`, 'quota-store', { cause: err })
}
