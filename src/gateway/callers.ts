/**
 * The calling container as the identity (listener `containerIdentity`).
 *
 *  - On a TCP listener, the peer's address names the container: the engine's list of
 *    containers (their addresses on every network), kept by the engine's events. An
 *    address the list does not hold is looked up afresh, awaited, before the request
 *    is judged; still unknown but in one of the engine's networks (and no address of
 *    the host's own), the lookup waits for the next container start (a
 *    container's first command can connect before the engine lists its address: the
 *    engine records it, and says `start`, after the process runs), then asks once more.
 *  - On a unix socket, the peer's process names it: SO_PEERCRED gives the pid of the
 *    process that connected (read as the connection is accepted), /proc/<pid>/cgroup
 *    the container it runs in.
 *
 * An address or a process that is no container, or more than one, is unknown: the
 * listener's default identity. A container's roles are its labels `<prefix>role` and
 * `<prefix>roles`, and only where an admin set them: a tenant's container (it carries
 * the owner label) and labels the image brings (anyone can build or pull an image
 * with any label) give no role; tenancy refuses them on a tenant's create as well.
 */
import { readFile } from 'node:fs/promises'
import { BlockList, isIP, type Socket } from 'node:net'
import { networkInterfaces } from 'node:os'
import type { Logger } from 'pino'
import type { ContainerIdentityConfig, ListenerConfig } from '../config'
import { GatewayError, isGatewayError } from '../api/errors'
import { jsonLines } from './body'
import { engineJson, type Upstream } from './upstream'
import { TENANT_LABEL } from './tenancy/lookup'
import type { Caller, CallerContainer, LookupKind } from './authenticate'

/** How a caller was found: `container` names it; the others fall back to the default. */
export type CallerLookup = (
  | { readonly found: 'container', readonly container: CallerContainer }
  | { readonly found: 'none' | 'ambiguous', readonly why: string }
) & { readonly via: LookupKind }

/** How long an unknown address waits for a container start before it is the default identity. */
export const START_WAIT_MS = 2000

// SO_PEERCRED (Linux, <asm-generic/socket.h>) at SOL_SOCKET. The kernel copies as much of
// struct ucred { pid, uid, gid } as the caller asks for: an int's worth is the pid.
const SOL_SOCKET = 1
const SO_PEERCRED = 17

/** Actions after which an address or a name may belong to another container. */
const CONTAINER_ACTIONS = new Set(['start', 'die', 'destroy', 'rename', 'create', 'restart'])
const NETWORK_ACTIONS = new Set(['connect', 'disconnect', 'create', 'destroy', 'remove'])

/**
 * The container id in a /proc/<pid>/cgroup file: every line's path names the same one,
 * as cgroup v1 (`/docker/<id>`, one line per hierarchy) and v2 (`0::/system.slice/docker-<id>.scope`,
 * or `0::/docker/<id>` with the cgroupfs driver) write it. Null when no line names one,
 * or two lines name different ones (a container in a container).
 */
export function containerIdInCgroup (text: string): string | null {
  let id: string | null = null
  for (const line of text.split('\n')) {
    const path = line.split(':').slice(2).join(':')
    if (path === '' || path === '/') continue
    const ids = [...path.matchAll(/(?:^|\/)(?:docker-)?([0-9a-f]{64})(?:\.scope)?(?=\/|$)/g)].map((m) => m[1]!)
    for (const found of ids) {
      if (id !== null && id !== found) return null
      id = found
    }
  }
  return id
}

/** What one list of the engine says: each address's containers, and the networks' subnets. */
interface Known {
  readonly containers: Map<string, CallerContainer[]>
  readonly subnets: BlockList
}

/** Whether `ip` is an address of one of this machine's interfaces (in the gateway's network namespace). */
function localAddress (ip: string): boolean {
  return Object.values(networkInterfaces()).some((list) => list?.some((i) => i.address === ip) === true)
}

/** An IPv4 peer of a dual-stack socket (`::ffff:172.17.0.2`) as the engine writes it. */
function plainAddress (address: string): string {
  return address.startsWith('::ffff:') && address.includes('.') ? address.slice(7) : address
}

function labelsOf (v: unknown): Record<string, string> {
  const out: Record<string, string> = {}
  if (v === null || typeof v !== 'object') return out
  for (const [k, x] of Object.entries(v)) if (typeof x === 'string') out[k] = x
  return out
}

/** The roles a container's labels name under `prefix`: `role` (one) and `roles` (separated by commas or spaces). */
export function roleLabels (labels: Readonly<Record<string, string>>, prefix: string): string[] {
  const roles: string[] = []
  const one = labels[`${prefix}role`]
  if (one !== undefined && one.trim() !== '') roles.push(one.trim())
  const many = labels[`${prefix}roles`]
  if (many !== undefined) roles.push(...many.split(/[\s,]+/).filter((r) => r !== ''))
  return [...new Set(roles)]
}

export class ContainerCallers {
  /** Address -> the containers that have it; valid for `generation` while the event stream is live. */
  private addresses: Known | null = null
  private addressesAt = -1
  /** Container id -> what inspect said; evicted by that container's events. */
  private readonly byId = new Map<string, CallerContainer | null>()
  /** Image id -> its labels (an image id names fixed content). */
  private readonly imageLabels = new Map<string, Record<string, string>>()
  private live = false
  private generation = 0
  private listing: { at: number, since: number, done: Promise<Known> } | null = null
  private readonly starts = new Set<() => void>()
  private stopped = false
  private abort: AbortController | null = null
  /** Ends the wait before the event stream is asked again (stop). */
  private wake: (() => void) | null = null

  constructor (private readonly upstream: Upstream, private readonly log: Logger) {}

  /** Follow the engine's container and network events; returns the function that stops it. */
  start (): () => void {
    void this.follow()
    return () => {
      this.stopped = true
      this.abort?.abort()
      this.wake?.()
      for (const wake of [...this.starts]) wake()
    }
  }

  private changed (): void {
    this.generation++
    this.addresses = null
  }

  private async follow (): Promise<void> {
    let delay = 500
    while (!this.stopped) {
      this.abort = new AbortController()
      try {
        const filters = encodeURIComponent(JSON.stringify({ type: ['container', 'network'] }))
        const res = await this.upstream.pool.request({ method: 'GET', path: `/events?filters=${filters}`, headers: this.upstream.host ? { host: this.upstream.host } : {}, signal: this.abort.signal })
        if (res.statusCode !== 200) { res.body.resume(); throw new Error(`the engine answered ${res.statusCode} to GET /events`) }
        this.changed()
        this.byId.clear()
        this.live = true
        delay = 500
        for await (const { value } of jsonLines(res.body)) {
          const ev = value as { Type?: unknown, Action?: unknown, Actor?: { ID?: unknown, Attributes?: Record<string, unknown> } } | null
          const action = String(ev?.Action ?? '').split(':')[0]!
          if (ev?.Type === 'container' && CONTAINER_ACTIONS.has(action)) {
            this.changed()
            if (typeof ev.Actor?.ID === 'string') this.byId.delete(ev.Actor.ID)
            if (action === 'start' || action === 'restart') for (const wake of [...this.starts]) wake()
          } else if (ev?.Type === 'network' && NETWORK_ACTIONS.has(action)) {
            this.changed()
            if (action === 'connect') for (const wake of [...this.starts]) wake()
          } else if (ev === null || typeof ev !== 'object') {
            this.changed()
            this.byId.clear()
          }
        }
      } catch (err) {
        if (!this.stopped) this.log.warn({ upstream: this.upstream.url, err: { message: (err as Error).message } }, 'calling containers: cannot follow the engine\'s events; every caller is looked up afresh meanwhile')
      } finally {
        this.live = false
        this.changed()
        this.byId.clear()
      }
      if (this.stopped) break
      await new Promise<void>((resolve) => { const t = setTimeout(resolve, delay); t.unref(); this.wake = () => { clearTimeout(t); resolve() } })
      this.wake = null
      delay = Math.min(delay * 2, 30_000)
    }
  }

  /** Wait for the next container start (or network connect), at most `ms`. */
  private async nextStart (ms: number): Promise<void> {
    await new Promise<void>((resolve) => {
      const done = (): void => { clearTimeout(timer); this.starts.delete(done); resolve() }
      const timer = setTimeout(done, ms)
      this.starts.add(done)
    })
  }

  /** The addresses as the last list and the events since say, while the event stream is live. */
  private known (): Known | null {
    return this.live && this.addresses !== null && this.addressesAt === this.generation ? this.addresses : null
  }

  /**
   * Every container's addresses, from one list. `after`: only a list the engine began
   * answering after that moment (a Date.now()) will do, not what is known; else what is
   * known, or a list in flight since the last event. Lookups share lists in flight.
   */
  private async list (after?: number): Promise<Known> {
    const known = after === undefined ? this.known() : null
    if (known !== null) return known
    if (this.listing !== null && this.listing.at === this.generation && (after === undefined || this.listing.since > after)) return await this.listing.done
    const at = this.generation
    const since = Date.now()
    const done = (async () => {
      const [{ status, body }, networks] = await Promise.all([
        engineJson(this.upstream, 'GET', '/containers/json?all=1'),
        engineJson(this.upstream, 'GET', '/networks'),
      ])
      if (status !== 200 || !Array.isArray(body)) throw new Error(`the engine answered ${status} to GET /containers/json`)
      if (networks.status !== 200 || !Array.isArray(networks.body)) throw new Error(`the engine answered ${networks.status} to GET /networks`)
      const subnets = new BlockList()
      for (const n of networks.body as Array<Record<string, any>>) {
        for (const c of Array.isArray(n?.['IPAM']?.Config) ? n['IPAM'].Config : []) {
          const m = typeof c?.Subnet === 'string' ? /^(.+)\/(\d+)$/.exec(c.Subnet) : null
          if (m === null) continue
          const family = isIP(m[1]!)
          if (family !== 0) subnets.addSubnet(m[1]!, Number(m[2]), family === 6 ? 'ipv6' : 'ipv4')
        }
      }
      const map = new Map<string, CallerContainer[]>()
      for (const c of body as Array<Record<string, any>>) {
        if (typeof c?.['Id'] !== 'string') continue
        const name = Array.isArray(c['Names']) && typeof c['Names'][0] === 'string' ? c['Names'][0].replace(/^\//, '') : c['Id']
        const container: CallerContainer = { id: c['Id'], name, labels: labelsOf(c['Labels']), image: typeof c['ImageID'] === 'string' ? c['ImageID'] : '' }
        const networks = c['NetworkSettings']?.Networks
        const addrs = new Set<string>()
        if (networks !== null && typeof networks === 'object') {
          for (const n of Object.values(networks) as Array<Record<string, unknown>>) {
            for (const a of [n?.['IPAddress'], n?.['GlobalIPv6Address']]) if (typeof a === 'string' && a !== '') addrs.add(a)
          }
        }
        for (const a of addrs) map.set(a, [...(map.get(a) ?? []), container])
      }
      const known: Known = { containers: map, subnets }
      if (this.live && at === this.generation) { this.addresses = known; this.addressesAt = at }
      return known
    })()
    this.listing = { at, since, done }
    try { return await done } finally { if (this.listing?.done === done) this.listing = null }
  }

  private readonly peers = new WeakMap<Socket, { pid: number | null, lookup: Promise<CallerLookup> }>()

  /**
   * A connection accepted on a unix listener with `containerIdentity`: its peer's pid
   * and cgroup are read now, while the process that connected is surely the one that
   * holds that pid.
   */
  connected (socket: Socket): void {
    const pid = peerPid(socket)
    const lookup = pid === null ? Promise.resolve<CallerLookup>({ found: 'none', why: 'the peer\'s process is not visible (SO_PEERCRED)', via: 'peer' }) : this.byPid(pid)
    lookup.catch(() => {})
    this.peers.set(socket, { pid, lookup })
  }

  /** Who is calling through `socket` on `listener`: the container and its roles, or why none. */
  async identify (socket: Socket, listener: ListenerConfig): Promise<Caller> {
    const cfg = listener.containerIdentity
    if (cfg === undefined) return { kind: 'unknown', why: 'the listener does not identify containers', via: 'cached' }
    let found: CallerLookup
    try {
      if (listener.kind === 'unix') {
        const peer = this.peers.get(socket)
        if (peer === undefined) return { kind: 'unknown', why: 'the connection\'s peer was not read', via: 'peer' }
        try {
          found = await peer.lookup
        } catch {
          // The engine did not answer at connection time: asked again, for the same process.
          peer.lookup = peer.pid === null ? peer.lookup : this.byPid(peer.pid)
          found = await peer.lookup
        }
      } else {
        found = await this.byAddress(socket.remoteAddress ?? '')
      }
      if (found.found !== 'container') return { kind: 'unknown', why: found.why, via: found.via }
      const tenant = found.container.labels[TENANT_LABEL]
      // A tenant's container is no identity of its own here (its name, which the policy may name, is the tenant's choice).
      if (tenant !== undefined) return { kind: 'unknown', why: `container ${found.container.name} is tenant ${tenant}'s`, via: found.via }
      return { kind: 'container', container: found.container, via: found.via, ...await this.roles(found.container, cfg) }
    } catch (err) {
      if (isGatewayError(err)) throw err
      throw new GatewayError('UNAUTHENTICATED', `cannot tell which container is calling: ${(err as Error).message}`)
    }
  }

  /** The container whose address `address` is. */
  async byAddress (address: string): Promise<CallerLookup> {
    const ip = plainAddress(address)
    const arrived = Date.now()
    const answer = (found: CallerContainer[] | undefined, via: LookupKind): CallerLookup | null =>
      found === undefined
        ? null
        : found.length === 1
          ? { found: 'container', container: found[0]!, via }
          : { found: 'ambiguous', why: `${found.length} containers have the address ${ip}`, via }
    const known = this.known()
    const cached = known === null ? null : answer(known.containers.get(ip), 'cached')
    if (cached !== null) return cached
    const fresh = await this.list(arrived - 1)
    const listed = answer(fresh.containers.get(ip), 'listed')
    if (listed !== null) return listed
    // An address of this machine's own, or outside every network's subnet, is never a container's.
    if (localAddress(ip)) return { found: 'none', why: `${ip} is an address of the gateway's own host`, via: 'listed' }
    if (!fresh.subnets.check(ip, isIP(ip) === 6 ? 'ipv6' : 'ipv4')) return { found: 'none', why: `${ip} is in no network of the engine`, via: 'listed' }
    // Not listed (yet): a container whose first command is this request may not be, until it has started.
    const waiting = Date.now()
    await this.nextStart(START_WAIT_MS)
    return answer((await this.list(waiting)).containers.get(ip), 'waited') ?? { found: 'none', why: `no container has the address ${ip}`, via: 'waited' }
  }

  /** The container the process `pid` runs in (its cgroup names it). */
  async byPid (pid: number): Promise<CallerLookup> {
    let cgroup: string
    try {
      cgroup = await readFile(`/proc/${pid}/cgroup`, 'utf8')
    } catch {
      return { found: 'none', why: `the calling process (pid ${pid}) is gone or not visible`, via: 'peer' }
    }
    const id = containerIdInCgroup(cgroup)
    if (id === null) return { found: 'none', why: `the calling process (pid ${pid}) runs in no container`, via: 'peer' }
    const container = await this.inspect(id)
    return container === null ? { found: 'none', why: `container ${id.slice(0, 12)} of the calling process is not running`, via: 'peer' } : { found: 'container', container, via: 'peer' }
  }

  private async inspect (id: string): Promise<CallerContainer | null> {
    if (this.live && this.byId.has(id)) return this.byId.get(id)!
    const at = this.generation
    const { status, body } = await engineJson(this.upstream, 'GET', `/containers/${id}/json`)
    if (status === 404) return null
    if (status !== 200) throw new Error(`the engine answered ${status} to GET /containers/${id.slice(0, 12)}/json`)
    const c = body as Record<string, any>
    const container: CallerContainer | null = c?.['State']?.Running === true && c['Id'] === id
      ? { id, name: String(c['Name'] ?? id).replace(/^\//, ''), labels: labelsOf(c['Config']?.Labels), image: typeof c['Image'] === 'string' ? c['Image'] : '' }
      : null
    if (this.live && at === this.generation && this.byId.size < 10_000) this.byId.set(id, container)
    return container
  }

  /**
   * The roles `container`'s labels give it, and why they give none: role labels in its
   * image's labels under the prefix make the container's own ignored.
   */
  async roles (container: CallerContainer, cfg: ContainerIdentityConfig): Promise<{ roles: string[], ignored?: string }> {
    const roles = roleLabels(container.labels, cfg.labelPrefix)
    if (roles.length === 0) return { roles }
    const image = await this.imageLabelsOf(container.image)
    if (Object.hasOwn(image, `${cfg.labelPrefix}role`) || Object.hasOwn(image, `${cfg.labelPrefix}roles`)) {
      return { roles: [], ignored: 'its image carries role labels (only a container\'s own labels, set by an admin, give roles)' }
    }
    return { roles }
  }

  private async imageLabelsOf (image: string): Promise<Record<string, string>> {
    const hit = this.imageLabels.get(image)
    if (hit !== undefined) return hit
    if (!/^sha256:[0-9a-f]{64}$/.test(image)) throw new Error('the container names no image id: its roles cannot be checked')
    const { status, body } = await engineJson(this.upstream, 'GET', `/images/${image}/json`)
    // The image is gone (removed while the container runs): nothing says its labels were not the container's.
    if (status === 404) throw new Error(`the container's image ${image.slice(7, 19)} is gone: its roles cannot be checked`)
    if (status !== 200) throw new Error(`the engine answered ${status} to GET /images/${image.slice(7, 19)}/json`)
    const labels = labelsOf((body as Record<string, any>)?.['Config']?.Labels)
    if (this.imageLabels.size >= 10_000) this.imageLabels.clear()
    this.imageLabels.set(image, labels)
    return labels
  }
}

type GetSockOpt = (socket: Socket, level: number, option: number) => number
let getsockopt: GetSockOpt | null = null

/**
 * Load the native addon that reads SO_PEERCRED (sockopt: prebuilt for Linux x64 and
 * arm64), for unix listeners with `containerIdentity`, at start-up: where it cannot
 * load, the gateway says so and does not start; other set-ups never load it.
 */
export async function loadPeerCredentials (): Promise<void> {
  if (getsockopt !== null) return
  try {
    getsockopt = (await import('sockopt')).getsockopt
  } catch (err) {
    throw new Error(`containerIdentity on a unix listener reads the caller's process with the sockopt package, which did not load here: ${(err as Error).message}`)
  }
}

/** The pid of the process that connected to a unix socket (SO_PEERCRED); null when it cannot be read. */
export function peerPid (socket: Socket): number | null {
  if (getsockopt === null) return null
  try {
    const pid = getsockopt(socket, SOL_SOCKET, SO_PEERCRED)
    // 0: the peer is in a pid namespace this process does not see.
    return typeof pid === 'number' && pid > 0 ? pid : null
  } catch {
    return null
  }
}
