/**
 * What each operation means for a tenant: one handler per operation id of the
 * catalog (test/tenancy-unit.test.ts checks that none is missing). A handler
 * resolves the objects the request names among the tenant's own (answering for
 * another tenant's object exactly as the engine answers for a missing one), refuses
 * references into other tenants' objects, stamps owner labels on what is created,
 * checks quotas, narrows lists, prunes and events to the tenant, and places the
 * gateway's registry credentials.
 *
 * Admins (tenancy.yaml `unscopedRoles`) never reach this table.
 */
import { registryAllowed, type TenancySettings } from '../../policy/tenancy'
import { GatewayError } from '../../api/errors'
import { TenancyRefusal } from './refusal'
import { scopeArchive } from './archive'
import { inOrder, list, missing, num, refuse, remounting, str, type Call, type Found, type Handler, type LabelsAt, type Resolvable, type ResponseFilter } from './call'
import { numberOf } from '../../api/body/number'
import { bodySchemas, type BodyNode } from '../../api/body/schema'
import { buildInput, swarmMountType } from '../../policy/facts'
import { parseFilters, serializeFilters, withLabel } from './filters'
import { inspectBuild } from './build'
import { judgeChanges, judgeTriggers, labelInstruction, stampedChanges, type BaseImage } from './dockerfile'
import { familiar, inNamespace, looksLikeImageId, parseImageRef, pathPattern, referenceMatches } from './images'
import { hideOwner, OWNER_KEYS, ownerTermsAsSeen } from './labels'
import { isPredefinedNetwork, ownerOf, PREDEFINED_NETWORKS, SUBJECT_LABEL, TENANT_LABEL, volumeName, type Resolution } from './lookup'
import { matchesName, RESTRICTED_NAME, TENANT_IMAGE_HOST, type NamedKind } from './names'
import { checkQuota, checkVolumeQuota, cpuOf, memoryOf, nodeCount, serviceUsage } from './quota'
import { filterDataUsage, filterEvents, filterInfo, withoutJoinTokens } from './responses'
import { libpodHandlers } from './libpod'
import { registryAuthHeader, registryConfigHeader } from './registry-auth'
import { buildStepsJudged, scopeUser, stepUser } from './users'
import { anonymousOf, anonymousVolumes, createAnonymous, removeAnonymous } from './anonymous'
import { freshVolumeOwner } from './volume-owner'
import { sharedReference, sharedView } from './shared-images'

export type { Found, Handler, LabelsAt, Resolvable } from './call'

// ---------------------------------------------------------------------------------
// Building blocks

async function resolve (call: Call, kind: Resolvable, ref: string): Promise<Resolution> {
  switch (kind) {
    case 'container': return call.names.private ? call.r.container(ref, call.tenant, call.names.qualify('container', ref)) : call.r.container(ref, call.tenant)
    case 'volume': return ownVolume(call, ref)
    case 'network': return call.names.private ? call.r.network(ref, call.tenant, call.names.qualify('network', ref)) : call.r.network(ref, call.tenant)
    case 'exec': return call.r.exec(ref, call.tenant)
    case 'service': return call.r.service(ref, call.tenant)
    case 'task': return call.r.task(ref, call.tenant)
    case 'secret': return call.r.secret(ref, call.tenant)
    case 'config': return call.r.config(ref, call.tenant)
  }
}

/**
 * A volume the tenant names. Under per-tenant names (names.ts) its plain name means the
 * qualified one; a name the engine generated (an anonymous volume's 64 hex digits), or
 * one made before names were private, names the tenant's own volume of that name only.
 * The resolution's id is the engine's name.
 */
async function ownVolume (call: Call, ref: string): Promise<Resolution> {
  const qualified = call.names.qualify('volume', ref)
  if (qualified === ref) return call.r.volume(ref, call.tenant)
  const res = await call.r.volume(qualified, call.tenant)
  if (res.state !== 'missing' || res.absent !== true) return res
  const unprefixed = await call.r.volume(ref, call.tenant)
  return unprefixed.state === 'own' ? unprefixed : unprefixed.state === 'missing' && unprefixed.absent === true ? unprefixed : { state: 'missing' }
}

/** The object a reference names must be the tenant's own; answers as missing otherwise. Returns its full id. */
async function own (call: Call, kind: Resolvable, ref: string, where: 'path' | 'body' | 'link' | 'endpoint' = 'path'): Promise<string> {
  const res = await resolve(call, kind, ref)
  if (res.state !== 'own') throw missing(kind, ref, call.op.id, where, res.state === 'missing' && res.absent === true)
  return res.id
}

/** The path parameter names one of the tenant's objects: checked, then sent as its full id. */
function owned (kind: Resolvable, param = 'id'): Handler {
  return async (call) => {
    const id = await own(call, kind, call.params[param])
    // A volume's id is its name: the engine's (qualified) one under per-tenant names.
    if (kind !== 'volume' || call.names.private) call.setParam(param, id)
  }
}

function denied (rule: string, why: string): Handler {
  return async (call) => { throw refuse(rule, `${call.op.id} is not available to tenants: ${why}`) }
}

/** Operations that touch no tenant's objects. */
const open: Handler = async () => {}
/** The handler that changes nothing (tenancy/index.ts makes no Call for it). */
export const OPEN: Handler = open

/**
 * Lists and prunes: the engine applies the owner-label filter (ANDed with the client's,
 * whose own owner-label terms are read as the tenant sees its objects: labels.ts).
 */
function labelFiltered (then?: (call: Call) => void): Handler {
  return async (call) => {
    call.setQuery('filters', serializeFilters(withLabel(ownerTermsAsSeen(parseFilters(call.query), call.tenant), `${TENANT_LABEL}=${call.tenant}`)))
    then?.(call)
  }
}

/** Lists the engine does not owner-filter: only the client's owner-label terms are read as the tenant sees its objects. */
function ownerTermsOnly (call: Call): void {
  const filters = parseFilters(call.query)
  const seen = serializeFilters(ownerTermsAsSeen(filters, call.tenant))
  if (seen !== serializeFilters(filters)) call.setQuery('filters', seen)
}

const CONTAINER_LABELS: LabelsAt = { path: ['Labels'], empty: {} }
const NETWORK_LABELS: LabelsAt = { path: ['Labels'], empty: {} }
const VOLUME_LABELS: LabelsAt = { path: ['Labels'], empty: null }
const IMAGE_LABELS: LabelsAt = { path: ['Labels'], empty: null }

function hideAll<T> (doc: T, places: readonly LabelsAt[]): T {
  return places.reduce((d, at) => hideOwner(d, at.path, at.empty), doc)
}

/**
 * And the answer is checked again, whatever the engine did with the filter; `hide`:
 * the owner labels are taken out of what the tenant sees (labels.ts).
 */
function keepOwn (labels: (o: any) => unknown, opts: { wrap?: 'Volumes', hide?: LabelsAt, at?: readonly string[] } = {}): (call: Call) => void {
  return (call) => {
    call.respond = {
      kind: 'json',
      // The same, in one pass over the engine's bytes (json-list.ts), when `at` says where `labels` reads.
      ...(opts.at !== undefined
        ? {
            list: {
              ...(opts.wrap !== undefined ? { at: opts.wrap } : {}),
              labels: opts.at,
              ownerKey: TENANT_LABEL,
              keep: (owner: string | null) => owner === call.tenant,
              ...(opts.hide !== undefined ? { hide: { keys: OWNER_KEYS, empty: opts.hide.empty } } : {}),
            },
          }
        : {}),
      transform: (body) => {
        const keep = (o: any): boolean => ownerOf(labels(o) as Record<string, string>) === call.tenant
        const view = (items: any[]): any[] => {
          const own = items.filter(keep)
          return opts.hide ? own.map((o) => hideAll(o, [opts.hide!])) : own
        }
        // Nothing dropped and nothing hidden: the engine's own answer, byte for byte.
        const whole = (all: any[], seen: any[]): boolean => opts.hide === undefined && seen.length === all.length
        if (opts.wrap) {
          const all = list(body?.[opts.wrap])
          const seen = view(all)
          return whole(all, seen) && Array.isArray(body?.[opts.wrap]) ? body : { ...body, [opts.wrap]: seen }
        }
        const all = list(body)
        const seen = view(all)
        return whole(all, seen) && Array.isArray(body) ? body : seen
      },
    }
  }
}

/**
 * A list under per-tenant names (names.ts): each element in the tenant's plain names, and
 * the client's `name` filter applied by the gateway to those names (the engine sees only
 * the qualified ones; the list is the tenant's own already, so this only narrows it).
 */
function plainList (kind: NamedKind, inner: Handler, wrap?: 'Volumes'): Handler {
  return async (call) => {
    if (!call.names.private) return await inner(call)
    const filters = parseFilters(call.query)
    const before = serializeFilters(filters)
    const patterns = filters.get('name') ?? new Set<string>()
    filters.delete('name')
    if (kind === 'container') {
      // `network=` and `volume=` match a network's or mount's name (or id, or a mount's
      // destination): the qualified name is added beside the value given. `before=` and
      // `since=` name a container, resolved as every reference is (the tenant's own, or missing).
      for (const [key, of] of [['network', 'network'], ['volume', 'volume']] as const) {
        const values = filters.get(key)
        if (values) filters.set(key, new Set([...values, ...[...values].filter((v) => !v.includes('/')).map((v) => call.names.qualify(of, v))]))
      }
      for (const key of ['before', 'since']) {
        const values = filters.get(key)
        if (values) filters.set(key, new Set(await Promise.all([...values].map(async (v) => await own(call, 'container', v)))))
      }
    }
    if (serializeFilters(filters) !== before) call.setQuery('filters', serializeFilters(filters))
    await inner(call)
    const view = (o: any): any => kind === 'container' ? call.names.container(o) : kind === 'network' ? call.names.network(o) : call.names.volume(o)
    // The engine matches a container's own name (not its link names), with and without the slash.
    const names = (o: any): string[] => kind === 'container'
      ? list(o?.Names).map(str).filter((n) => n.lastIndexOf('/') === 0).flatMap((n) => [n, n.slice(1)])
      : [str(o?.Name)]
    call.viewAnswer((b) => {
      const all = list(wrap ? b?.[wrap] : b)
      const seen = all.map(view).filter((o) => matchesName(patterns, names(o)))
      if (seen.length === all.length && seen.every((o, i) => o === all[i])) return b
      return wrap ? { ...b, [wrap]: seen } : seen
    })
  }
}

/** A prune's answer lists the names it deleted: in the tenant's plain names (names.ts). */
function prunedNames (kind: 'volume' | 'network', field: string, inner: Handler): Handler {
  return async (call) => {
    await inner(call)
    if (!call.names.private) return
    call.viewAnswer((b) => {
      const deleted = b?.[field]
      if (!Array.isArray(deleted)) return b
      const plain = deleted.map((n) => typeof n === 'string' ? call.names.plain(kind, n) : n)
      return plain.every((n, i) => n === deleted[i]) ? b : { ...b, [field]: plain }
    })
  }
}

/** An object's own answer (inspect, create) without the owner labels at those places. */
function hidden (call: Call, places: readonly LabelsAt[]): void {
  call.respond = { kind: 'json', transform: (b) => hideAll(b, places) }
}

/**
 * The labels that give a calling container its roles (gateway/callers.ts, the listener
 * option `containerIdentity`, default prefix io.portcullis.) are an admin's to set: a
 * tenant's create carrying one is refused, whatever the listeners' prefixes (a tenant's
 * container never gets a role from its labels anyway: it carries the owner label). A
 * commit's config is an image's labels, which give no role either (gateway/callers.ts):
 * refused all the same, as the rule says.
 */
function noRoleLabels (call: Call, pointer: readonly string[]): void {
  const labels = bodyAt(call, ...pointer)
  if (labels === null || typeof labels !== 'object') return
  const set = Object.keys(labels).filter((k) => /^io\.portcullis\.roles?$/i.test(k))
  if (set.length > 0) throw refuse('role-labels', `labels that give a container roles are set by an admin only (${set.map((k) => JSON.stringify(k)).join(', ')})`)
}

/** Stamp the owner labels at `pointer` (a labels map) in the body: the caller cannot set or override them. */
function stamp (call: Call, pointer: readonly string[]): void {
  call.setBody([...pointer, TENANT_LABEL], call.tenant)
  call.setBody([...pointer, SUBJECT_LABEL], call.subject)
}

function bodyAt (call: Call, ...path: string[]): any {
  let node = call.body
  for (const k of path) node = node?.[k]
  return node
}

/** A name another tenant already holds: a clear 409, never the other object's id. */
async function nameFree (call: Call, kind: 'container' | 'network' | 'service' | 'secret' | 'config', name: string): Promise<void> {
  if (!name) return
  // A name shaped like an id can be read as another object's id or id prefix, by the
  // engine or by a client: tenants may not take one (a second line behind resolving
  // every reference as the engine does and forwarding the full id).
  const bare = name.replace(/^\//, '')
  if (/^[0-9a-f]{12,64}$/.test(bare) || ((kind === 'service' || kind === 'secret' || kind === 'config') && /^[0-9a-z]{25}$/.test(bare))) {
    throw refuse('tenant-names', `the ${kind} name "${bare}" looks like an object id: choose a name that is not ${kind === 'container' || kind === 'network' ? '12 or more hexadecimal digits' : 'shaped like an id'}`)
  }
  const engineName = kind === 'container' || kind === 'network' ? call.names.qualify(kind, bare) : bare
  const holder = await call.r.nameHolder(kind, engineName)
  if (holder === undefined || holder === call.tenant) return
  throw nameTaken(kind, name.replace(/^\//, ''), call.tenant)
}

/**
 * A plain name a tenant gives a container or volume under per-tenant names: checked with
 * the engine's grammar (the qualified name always begins well) and answered in the
 * engine's words; then the engine's name for it.
 */
function engineName (call: Call, kind: 'container' | 'volume', plain: string): string {
  if (!call.names.private || plain === '') return plain
  const bare = kind === 'container' ? plain.replace(/^\//, '') : plain
  if (!RESTRICTED_NAME.test(bare)) {
    throw new GatewayError('BODY_INVALID', kind === 'container'
      ? `Invalid container name (${bare}), only [a-zA-Z0-9][a-zA-Z0-9_.-] are allowed`
      : `create ${bare}: "${bare}" includes invalid characters for a local volume name, only "[a-zA-Z0-9][a-zA-Z0-9_.-]" are allowed. If you intended to pass a host directory, use absolute path`)
  }
  return call.names.qualify(kind, plain)
}

function nameTaken (kind: string, name: string, tenant: string): TenancyRefusal {
  return new TenancyRefusal('CONFLICT', `the ${kind} name "${name}" is already in use on this engine by another tenant or the administrator: ${kind} names are shared by all tenants of one engine, choose another (for example prefixed with your tenant: ${tenant}-${name})`, 'tenant-names')
}

// ---------------------------------------------------------------------------------
// Containers

const CONTAINER_REF_MODES = ['NetworkMode', 'PidMode', 'IpcMode', 'UTSMode', 'UsernsMode', 'CgroupnsMode'] as const

/**
 * Every object a container's configuration names: volumes-from, links, container: modes,
 * networks, named volumes, the image. Each is resolved as the engine will resolve it (over
 * all objects) and checked; then the body names it by the full id that was checked, so
 * that a name or prefix that changes hands (or is renamed away) before the engine reads
 * it cannot make the engine pick another object.
 */
async function containerReferences (call: Call, hc: any, networking: any, image: unknown): Promise<{ newVolumes: string[], imageId?: string }> {
  for (const [i, v] of list(hc?.VolumesFrom).entries()) {
    const [ref, ...mode] = str(v).split(':')
    const id = await own(call, 'container', ref, 'body')
    call.setBody(['HostConfig', 'VolumesFrom', String(i)], [id, ...mode].join(':'))
  }
  for (const [i, l] of list(hc?.Links).entries()) call.setBody(['HostConfig', 'Links', String(i)], await ownLink(call, str(l), 'link'))
  for (const mode of CONTAINER_REF_MODES) {
    const v = str(hc?.[mode])
    if (v.startsWith('container:')) call.setBody(['HostConfig', mode], `container:${await own(call, 'container', v.slice('container:'.length), 'body')}`)
  }
  const netMode = str(hc?.NetworkMode)
  let netModeId: string | undefined
  if (netMode && !netMode.startsWith('container:') && !['default', 'bridge', 'host', 'none'].includes(netMode)) {
    netModeId = pinnedNetwork(call.names.qualify('network', netMode), await ownOrSharedNetwork(call, netMode, 'body'))
    call.setBody(['HostConfig', 'NetworkMode'], netModeId)
  }
  const endpoints = networking?.EndpointsConfig
  if (endpoints !== null && typeof endpoints === 'object') {
    const pinned: Record<string, unknown> = {}
    let changed = false
    for (const [net, ep] of Object.entries(endpoints)) {
      let key = net
      if (!['default', 'bridge', 'host', 'none'].includes(net)) key = net === netMode && netModeId !== undefined ? netModeId : pinnedNetwork(call.names.qualify('network', net), await ownOrSharedNetwork(call, net, 'body'))
      let value = ep
      const links = list((ep as any)?.Links)
      const userDefined = !['default', 'bridge', 'host', 'none'].includes(net)
      if (links.length > 0) value = { ...(ep as object), Links: await Promise.all(links.map(async (l) => await endpointLink(call, str(l), userDefined))) }
      if (key !== net || value !== ep) changed = true
      pinned[key] = value
    }
    if (changed) call.setBody(['NetworkingConfig', 'EndpointsConfig'], pinned)
  }
  // Named volumes: the tenant's own, or new ones the gateway creates with owner labels.
  // Under per-tenant names each is sent by its engine name (the tenant's own, or the new
  // qualified one).
  const named = new Set<string>()
  for (const b of list(hc?.Binds)) {
    const src = str(b).split(':')[0]
    if (volumeName(src)) named.add(src)
  }
  for (const m of list(hc?.Mounts)) {
    // A source that cannot be a volume's name is left to the engine, which refuses it.
    if (str((m as any)?.Type) === 'volume' && volumeName(str((m as any)?.Source))) named.add(str((m as any).Source))
  }
  const newVolumes: string[] = []
  const stored = new Map<string, string>()
  for (const name of named) {
    const res = await ownVolume(call, name)
    if (res.state === 'own') { stored.set(name, res.id); continue }
    const engine = engineName(call, 'volume', name)
    if (await call.r.volumeExists(engine)) throw nameTaken('volume', name, call.tenant)
    stored.set(name, engine)
    newVolumes.push(engine)
  }
  if (call.names.private) {
    for (const [i, b] of list(hc?.Binds).entries()) {
      const at = str(b).indexOf(':')
      const src = at < 0 ? str(b) : str(b).slice(0, at)
      const to = stored.get(src)
      if (to !== undefined && to !== src) call.setBody(['HostConfig', 'Binds', String(i)], to + (at < 0 ? '' : str(b).slice(at)))
    }
    for (const [i, m] of list(hc?.Mounts).entries()) {
      const to = str((m as any)?.Type) === 'volume' ? stored.get(str((m as any)?.Source)) : undefined
      if (to !== undefined && to !== str((m as any).Source)) call.setBody(['HostConfig', 'Mounts', String(i), 'Source'], to)
    }
  }
  const seen = typeof image === 'string' && image ? await visibleImage(call, image) : undefined
  // The tenant's own image name: the engine is given its engine name (names.ts).
  if (seen !== undefined && seen.sent !== image) call.setBody(['Image'], seen.sent)
  const imageId = seen?.id
  return { newVolumes, ...(imageId !== undefined ? { imageId } : {}) }
}

/** A link `name[:alias]` to one of the tenant's containers, naming it by full id (the alias kept: `name` when none was given). */
async function ownLink (call: Call, link: string, where: 'link' | 'body'): Promise<string> {
  const at = link.indexOf(':')
  const ref = at < 0 ? link : link.slice(0, at)
  const alias = at < 0 ? ref.replace(/^\//, '') : link.slice(at + 1)
  return `${await own(call, 'container', ref, where)}:${alias}`
}

/**
 * A link in an endpoint's config. On a user-defined network the engine stores the name as
 * written and resolves it at run time through the network's own DNS, among the containers
 * attached to that network (the tenant's own network, checked above): a name that no
 * container has yet is accepted as it is, as the engine accepts it (compose and docker-py
 * create the linking container first). A name that is another tenant's container stays
 * refused, and the tenant's own is pinned by id as elsewhere.
 */
async function endpointLink (call: Call, link: string, userDefined: boolean): Promise<string> {
  try {
    return await ownLink(call, link, 'body')
  } catch (err) {
    if (userDefined && err instanceof TenancyRefusal && err.absent) {
      if (!call.names.private) return link
      // The name the container will have on the engine; the alias stays the tenant's.
      const at = link.indexOf(':')
      const ref = at < 0 ? link : link.slice(0, at)
      return `${call.names.qualify('container', ref)}:${at < 0 ? ref.replace(/^\//, '') : link.slice(at + 1)}`
    }
    throw err
  }
}

/**
 * The network reference to forward: the exact name the engine resolved is kept (it is what
 * inspect shows), unless it could also be read as an id prefix (all hex), or the reference
 * was an id or a prefix; then the full id that was checked.
 */
function pinnedNetwork (ref: string, found: Found): string {
  return found.name === ref && !/^[0-9a-f]+$/.test(ref) ? ref : found.id
}

async function ownOrSharedNetwork (call: Call, ref: string, where: 'path' | 'body' = 'path'): Promise<Found> {
  const res = await resolve(call, 'network', ref)
  if (res.state === 'missing') throw missing('network', ref, call.op.id, where, res.absent === true)
  return res
}

const containerCreate: Handler = async (call) => {
  const name = call.query.get('name') ?? ''
  const stored = engineName(call, 'container', name)
  if (stored !== name) {
    call.setQuery('name', stored)
    call.patch.push({ op: 'replace', path: '/query/name', value: stored })
  }
  // Who it runs as: the tenant's uid:gid unless it names another; never root unless granted (users.ts).
  await scopeUser(call, ['User'], ['HostConfig', 'GroupAdd'], 'User')
  const hc = bodyAt(call, 'HostConfig')
  // Reads only, each its own engine round trip: run together.
  const [, { newVolumes, imageId }, admitted] = await inOrder([
    nameFree(call, 'container', name),
    containerReferences(call, hc, bodyAt(call, 'NetworkingConfig'), bodyAt(call, 'Image')),
    checkQuota(call, { containers: 1, memory: memoryOf(hc), nanoCpus: cpuOf(hc) }),
  ] as const)
  // The volumes the engine would make without a name are made by the gateway, owned and
  // counted (anonymous.ts). Podman's compat create is not rewritten (docs/tenancy.md).
  const anonymous = await call.r.engine() === 'docker' ? (await anonymousVolumes(call, imageId)).volumes : []
  await checkVolumeQuota(call, newVolumes.length + anonymous.length)
  await tenantDefaultNetwork(call, str(hc?.NetworkMode))
  if (call.names.private && name !== '') plainNameAliases(call, name.replace(/^\//, ''))
  await podmanSystemdMode(call, hc)
  // What Podman reads of a Docker-compatible create is its CreateContainerConfig: Docker's
  // structs (which the schema lists) and three fields of its own, harmless; it ignores the
  // rest, so the rest is not sent (docs/podman.md, "forward only what was judged").
  if (await call.r.engine() === 'podman') call.knownFieldsOnly(COMPAT_CREATE, PODMAN_COMPAT_FIELDS)
  noRoleLabels(call, ['Labels'])
  stamp(call, ['Labels'])
  // Fresh named volumes get their root owned by the container's user (volume-owner.ts).
  // The HostConfig as it will be forwarded: under per-tenant names its volume names are
  // the engine's (qualified) ones, as newVolumes are; `hc` still holds the client's.
  const ownVolumes = await freshVolumeOwner(call, bodyAt(call, 'HostConfig'), newVolumes)
  // [CRE] Its limits for the quota as sent, which dockerd stores as given, but for a
  // /dev/shm size left out: that is the daemon's default-shm-size (lookup.ts shmDefault).
  const sentHc = bodyAt(call, 'HostConfig')
  const counted = { Memory: sentHc?.Memory, Tmpfs: sentHc?.Tmpfs, Mounts: sentHc?.Mounts }
  const sentLimits = await call.r.engine() === 'docker'
    ? {
        memory: (shm: number) => memoryOf({ ...counted, ShmSize: shm }),
        nanoCpus: cpuOf(sentHc),
        shm: num(sentHc?.ShmSize) > 0 ? num(sentHc.ShmSize) : num(sentHc?.Memory) > 0 ? undefined : 0,
      }
    : undefined
  // The created container counts from its answer on, whether or not the engine's create
  // event has reached the gateway yet (the reservation ends once the answer is out).
  call.respond = {
    kind: 'json',
    transform: async (b) => {
      const id = str(b?.Id)
      if (/^[0-9a-f]{64}$/.test(id)) {
        // [CRE] Its owner is known from this answer: the owner label the gateway stamped on
        // it, which no update changes (ids are never reused; its destroy event evicts it).
        // The start and remove that follow need no inspect to check it, nor the next
        // create's quota to read its limits.
        call.r.cache.set(id, call.tenant)
        if (sentLimits !== undefined) {
          const shm = sentLimits.shm ?? call.r.cache.shmDefault
          if (shm !== undefined) call.r.cache.setLimits(id, { memory: sentLimits.memory(shm), nanoCpus: sentLimits.nanoCpus })
          else call.r.cache.shmUnknown(id)
        }
        call.r.cache.containerEvent('create', id, { [TENANT_LABEL]: call.tenant })
        // Counted by its id from now on: its reservation would count it twice.
        if (call.r.cache.containersOf(call.tenant)?.has(id) === true) admitted()
        if (ownVolumes) await ownVolumes(id)
      }
      return b
    },
  }
  // Named volumes the engine would create implicitly (without labels) are created first, owned.
  for (const v of newVolumes) {
    const r = await call.r.create('/volumes/create', { Name: v, Labels: { [TENANT_LABEL]: call.tenant, [SUBJECT_LABEL]: call.subject } })
    if (r.status >= 300) throw new GatewayError('CONFLICT', `cannot create volume ${v} for the container: ${str((r.body as any)?.message)}`)
  }
  await createAnonymous(call, anonymous)
}

const USER_DEFINED = (net: string): boolean => net !== '' && !net.startsWith('container:') && !['default', 'bridge', 'host', 'none'].includes(net)

/**
 * On a user-defined network the engine's DNS answers a container's name, which under
 * per-tenant names is the qualified one: the plain name is added as an alias on each such
 * network of a create (the networks are the tenant's own: the alias reaches nobody else).
 */
function plainNameAliases (call: Call, plain: string): void {
  const mode = str(bodyAt(call, 'HostConfig', 'NetworkMode'))
  const endpoints = bodyAt(call, 'NetworkingConfig', 'EndpointsConfig')
  const out: Record<string, any> = endpoints !== null && typeof endpoints === 'object' && !Array.isArray(endpoints) ? { ...endpoints } : {}
  if (USER_DEFINED(mode) && !Object.hasOwn(out, mode)) out[mode] = {}
  let changed = false
  for (const [net, ep] of Object.entries(out)) {
    const aliases = list(ep?.Aliases).map(str)
    if (!USER_DEFINED(net) || aliases.includes(plain)) continue
    out[net] = { ...(ep ?? {}), Aliases: [...aliases, plain] }
    changed = true
  }
  if (changed) call.setBody(['NetworkingConfig', 'EndpointsConfig'], out)
}

// ---------------------------------------------------------------------------------
// A tenant's default network (issue 18 class 7)

/** The network modes that mean the engine's shared default network (docker0 on dockerd, `podman` on Podman). */
const DEFAULT_NETWORK_MODES = new Set(['', 'default', 'bridge'])

/** The name of the tenant's own default network (tenancy.yaml networks.defaultName). */
function defaultNetworkName (settings: TenancySettings, tenant: string): string {
  return settings.networks.defaultName.replaceAll('{tenant}', tenant)
}

/** Whether `name` has the shape of some tenant's default network name (then only that tenant's own may be created). */
function defaultNetworkShaped (settings: TenancySettings, name: string): boolean {
  const [head, ...rest] = settings.networks.defaultName.split('{tenant}').map((p) => p.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'))
  return new RegExp(`^${head}${rest.map((p) => `.+${p}`).join('')}$`).test(name)
}

/**
 * A container asking for the default network gets the tenant's own instead: on the
 * engine's shared bridge every tenant's containers reach each other's ports. The engine
 * isolates one bridge network from another with its firewall (DOCKER-ISOLATION-STAGE-1/2),
 * which is the operator's to keep on (docs/tenancy.md). Explicit `bridge` is redirected
 * too: a tenant left on the shared bridge could reach any other tenant that asked for it.
 * The endpoint settings the client gave for the default network go to the tenant's.
 */
async function tenantDefaultNetwork (call: Call, mode: string): Promise<void> {
  if (!call.settings.networks.tenantDefault) return
  const endpoints = bodyAt(call, 'NetworkingConfig', 'EndpointsConfig')
  const keys = endpoints !== null && typeof endpoints === 'object' ? Object.keys(endpoints) : []
  const defaults: string[] = []
  for (const k of keys) if (await isEngineBridge(call, k)) defaults.push(k)
  const modeIsBridge = await isEngineBridge(call, mode)
  if (!modeIsBridge && defaults.length === 0) return
  const name = await ensureDefaultNetwork(call)
  if (modeIsBridge) call.setBody(['HostConfig', 'NetworkMode'], name)
  // Legacy links are the default bridge's; on a user-defined network the engine reads them
  // from the endpoint, where the docker CLI puts them itself for `--network <net> --link`
  // (cli/command/container/opts.go parseNetworkOpts): the link names resolve there by DNS.
  const links = bodyAt(call, 'HostConfig', 'Links')
  const linked = modeIsBridge && Array.isArray(links) && links.length > 0 && keys.every((k) => defaults.includes(k))
  if (defaults.length === 0 && !linked) return
  // One endpoint for the default network, as the engine reads it (API 1.41 takes one network at create).
  const moved: Record<string, unknown> = {}
  for (const k of keys) if (!defaults.includes(k)) moved[k] = endpoints[k]
  const given = defaults.length ? endpoints[defaults.find((k) => k === mode) ?? defaults[0]] : undefined
  if (linked) {
    const endpoint = given !== null && typeof given === 'object' ? given as Record<string, unknown> : {}
    const own = Array.isArray(endpoint.Links) ? endpoint.Links as unknown[] : []
    // The network's DNS knows containers by name, not by the full id the create's links were pinned to.
    const named = await Promise.all(links.map(async (l: unknown) => await linkByName(call, str(l))))
    moved[name] = { ...endpoint, Links: [...own, ...named.filter((l) => !own.includes(l))] }
  } else {
    moved[name] = given
  }
  call.setBody(['NetworkingConfig', 'EndpointsConfig'], moved)
}

/** A link `container:alias` whose container is a full id, with the container's name instead (the other forms as they are). */
async function linkByName (call: Call, link: string): Promise<string> {
  const at = link.indexOf(':')
  const ref = at < 0 ? link : link.slice(0, at)
  if (!/^[0-9a-f]{64}$/.test(ref)) return link
  const name = str((await call.r.get(`/containers/${ref}/json`)).body?.Name).replace(/^\//, '')
  if (name === '') return link
  return at < 0 ? `${name}:${name}` : `${name}${link.slice(at)}`
}

/**
 * Whether a network reference is the engine's default bridge: one of its spellings, or
 * its id or a unique id prefix, resolved as the engine resolves it (a create's references
 * are pinned to full ids before this is asked).
 */
async function isEngineBridge (call: Call, ref: string): Promise<boolean> {
  if (DEFAULT_NETWORK_MODES.has(ref)) return true
  if (ref.startsWith('container:') || ['host', 'none'].includes(ref)) return false
  const res = await call.r.network(ref, call.tenant)
  return res.state === 'shared' && res.name === 'bridge'
}

/**
 * The tenant's default network, created (a bridge, owner-labelled) when it does not exist
 * yet. Two creates racing both ask the engine with CheckDuplicate; the loser's 409 is
 * answered by looking the name up again. A name held by anyone else is refused: tenants
 * cannot create names shaped like a tenant's default network (networkCreate).
 */
async function ensureDefaultNetwork (call: Call): Promise<string> {
  // dockerd's CheckDuplicate is no lock (two racing creates both succeed, measured on
  // 20.10): one creation in flight per engine and name in this process.
  const name = defaultNetworkName(call.settings, call.tenant)
  let inFlight = ENSURING.get(call.r)
  if (!inFlight) { inFlight = new Map(); ENSURING.set(call.r, inFlight) }
  const running = inFlight.get(name)
  if (running) return await running
  const work = createDefaultNetwork(call, name).finally(() => inFlight.delete(name))
  inFlight.set(name, work)
  return await work
}

const ENSURING = new WeakMap<object, Map<string, Promise<string>>>()

/** Marks the networks the gateway made as tenants' default networks (kept from the tenant's prune). */
const DEFAULT_NETWORK_LABEL = 'io.portcullis.default-network'

async function createDefaultNetwork (call: Call, name: string): Promise<string> {
  for (let attempt = 0; attempt < 2; attempt++) {
    const res = await call.r.network(name, call.tenant)
    if (res.state === 'own' && res.name === name) return name
    if (res.state !== 'missing' || res.absent !== true) {
      throw refuse('tenant-default-network', `the tenant's default network "${name}" is held by another tenant or the administrator: ask the administrator to remove it`)
    }
    const engine = await call.r.engine()
    const r = await call.r.create('/networks/create', {
      Name: name,
      Driver: 'bridge',
      CheckDuplicate: true,
      // Podman isolates a network from its other networks only when asked (netavark/CNI `isolate`).
      ...(engine === 'podman' ? { Options: { isolate: 'true' } } : {}),
      Labels: { [TENANT_LABEL]: call.tenant, [SUBJECT_LABEL]: call.subject, [DEFAULT_NETWORK_LABEL]: 'true' },
    })
    if (r.status < 300) return name
    if (r.status !== 409) {
      const message = str((r.body as any)?.message)
      // dockerd's defaults hold about 30 bridge networks: the operator's to widen, not the tenant's to fix.
      const hint = /address pool/i.test(message) ? '; the engine has no address pool left for another bridge network: give dockerd more, smaller pools (daemon.json "default-address-pools", e.g. base 10.64.0.0/12, size 24) or turn off tenancy.yaml networks.tenantDefault' : ''
      throw new GatewayError('UPSTREAM_FAILED', `cannot create the tenant's default network ${name} for tenant ${call.tenant}'s ${call.op.id}: ${message}${hint}`)
    }
  }
  throw new GatewayError('UPSTREAM_FAILED', `cannot create the tenant's default network ${name}: it was created and removed while the gateway looked`)
}

const COMPAT_CREATE = bodySchemas.get('ContainerCreate') as BodyNode
/** Podman's own fields in a Docker-compatible create (pkg/api/handlers/types.go CreateContainerConfig). */
const PODMAN_COMPAT_FIELDS: ReadonlySet<string> = new Set(['EnvMerge', 'UnsetEnv', 'UnsetEnvAll'])

/** Commands that put Podman in systemd mode (pkg/specgen/generate/container_create.go). */
const SYSTEMD_COMMANDS = new Set(['/sbin/init', '/usr/sbin/init', '/usr/local/sbin/init'])

/**
 * Podman's Docker-compatible create asks for systemd mode `true` on every container
 * (compat/containers_create.go), which turns it on when the command is an init or
 * systemd; then Podman mounts the host's /sys/fs/cgroup/systemd read-write into the
 * container on cgroup v1. The command is worked out as Podman does (specgenutil's
 * entrypoint, which reads a one-element entrypoint that is a JSON array as that array;
 * specgen/generate makeCommand, the image's when the body gives none) and refused.
 */
async function podmanSystemdMode (call: Call, hc: any): Promise<void> {
  if (hc?.Init === true || await call.r.engine() !== 'podman') return
  // A string is a one-element list to Docker's strslice.
  const strs = (v: unknown): string[] => typeof v === 'string' ? [v] : list(v).map(str)
  let entrypoint: string[] | null = strs(bodyAt(call, 'Entrypoint'))
  if (entrypoint.length === 0) entrypoint = null
  else if (entrypoint.length === 1) {
    try {
      const parsed: unknown = JSON.parse(entrypoint[0])
      if (Array.isArray(parsed) && parsed.every((x) => typeof x === 'string')) entrypoint = parsed
    } catch {}
  }
  let cmd = strs(bodyAt(call, 'Cmd'))
  if (entrypoint === null || cmd.length === 0) {
    const image = str(bodyAt(call, 'Image'))
    const r = await call.r.get(`/images/${image.split('/').map(encodeURIComponent).join('/')}/json`)
    const config = r.body?.Config ?? {}
    if (entrypoint === null) {
      entrypoint = strs(config.Entrypoint)
      if (cmd.length === 0) cmd = strs(config.Cmd)
    }
  }
  let command = [...(entrypoint.length === 1 && entrypoint[0] === '' ? [] : entrypoint), ...cmd]
  if (command.length > 2 && command[0] === '/bin/sh' && command[1] === '-c') command = command.slice(2)
  const first = command[0] ?? ''
  if (SYSTEMD_COMMANDS.has(first) || first.split('/').pop() === 'systemd') {
    throw refuse('podman-systemd', `the command ${JSON.stringify(first)} puts Podman in systemd mode, which mounts the host's cgroup hierarchy into the container: not available to tenants (run it with --init, or another command)`)
  }
}

const containerUpdate: Handler = async (call) => {
  const id = await own(call, 'container', call.params.id)
  call.setParam('id', id)
  const b = call.body ?? {}
  // In an update, PidsLimit is a pointer: absent leaves the limit, 0 (like -1) removes it.
  if (b.PidsLimit !== undefined && b.PidsLimit !== null && !(numberOf(b.PidsLimit) > 0)) {
    throw refuse('pids-limit-update', `PidsLimit ${JSON.stringify(b.PidsLimit)} in an update removes the container's process limit: not available to tenants`)
  }
  // A restart policy makes the engine mount the bind sources again on its own, unjudged
  // (base.csv no-restart-with-binds refuses both together at create).
  const restart = str(bodyAt(call, 'RestartPolicy', 'Name'))
  if (restart !== '' && restart !== 'no') {
    // The stored HostConfig read as the policy reads a body's (its hostPaths fact), as written.
    const hc = (await call.r.get(`/containers/${id}/json`)).body?.HostConfig ?? {}
    if (buildInput('ContainerUpdate', 'container', id, new URLSearchParams(), hc, 'remote').hostPaths.length > 0) {
      throw refuse('no-restart-with-binds', `restart policy ${JSON.stringify(restart)} on a container with bind mounts: the engine would mount their sources again on its own, where the gateway cannot judge them`)
    }
  }
  const changesMemory = num(b.Memory) > 0
  const changesCpu = cpuOf(b) > 0
  if (!changesMemory && !changesCpu) return
  const current = (await call.r.get(`/containers/${id}/json`)).body?.HostConfig ?? {}
  // The memory-backed mounts stay as they are (an update cannot change them).
  await checkQuota(call, { containers: 0, memory: memoryOf({ ...current, Memory: changesMemory ? b.Memory : current.Memory }), nanoCpus: changesCpu ? cpuOf(b) : cpuOf(current) }, { container: id })
}

/**
 * Go's httputils.BoolValue, with which the engine reads `link`, `force` and `v`: anything
 * but "", "0", "no", "false" and "none" (space-trimmed, lower-cased) is true.
 */
export function goBool (value: string | null): boolean {
  const s = (value ?? '').replace(GO_SPACE_EDGES, '').toLowerCase()
  return !['', '0', 'no', 'false', 'none'].includes(s)
}
/** Leading or trailing runs of what Go's unicode.IsSpace calls space. */
const GO_SPACE_EDGES = /^[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+|[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+$/g

/**
 * `docker rm --link /parent/alias` sends `DELETE /containers/parent/alias?link=1`. The
 * engine (daemon.rmLink) finds the linked child by its link name, splits that name at
 * its last `/`, looks the parent up by name in its names table (never by id or prefix:
 * `<parent id>/alias` is a 404 there) and removes the alias from the parent. The parent
 * is what changes, so it must be the tenant's own, found by exact name as the engine
 * finds it. The request then goes out with the path as received (a link name holds the
 * parent's name; there is no id form to send instead), and with `link=1` spelled so
 * that the engine cannot read it as anything but a link removal. Only the owner (or an
 * admin) can rename the parent between the check and the engine's lookup.
 *
 * Without `link`, the same path names the child by its link name (one of the child's
 * names, listed in its Names): resolved among the tenant's containers as usual.
 */
const containerDelete: Handler = async (call) => {
  const ref = call.params.id
  const slash = ref.lastIndexOf('/')
  if (slash < 0 || !goBool(call.query.get('link'))) {
    await owned('container')(call)
    // `rm -v`: the engine removes only the volumes mounted without a name; the ones the
    // gateway made in their place go once the engine has removed the container.
    if (goBool(call.query.get('v'))) {
      const names = await anonymousOf(call, call.params.id)
      if (names.length > 0) call.respond = { kind: 'after', then: async () => { await removeAnonymous(call, names) } }
    }
    return
  }
  const parentName = call.names.qualify('container', ref.slice(0, slash))
  const parent = await call.r.containerByName(parentName, call.tenant)
  if (parent.state !== 'own') throw missing('container', ref, call.op.id)
  call.setQuery('link', '1')
  // Under per-tenant names the engine looks the parent up by its qualified name.
  call.setParam('id', `${parentName.replace(/^\//, '')}${ref.slice(slash)}`)
}

/** A start from a checkpoint (experimental engines) reads `checkpoint-dir`, a host directory: not for tenants. */
const containerStart: Handler = async (call) => {
  if ((call.query.get('checkpoint') ?? '') !== '' || (call.query.get('checkpoint-dir') ?? '') !== '') {
    throw refuse('no-checkpoints', 'starting from a checkpoint reads a host directory: not available to tenants')
  }
  await remounting(owned('container'))(call)
}

const containerRename: Handler = async (call) => {
  call.setParam('id', await own(call, 'container', call.params.id))
  const name = call.query.get('name') ?? ''
  const stored = engineName(call, 'container', name)
  await nameFree(call, 'container', name)
  if (stored !== name) {
    call.setQuery('name', stored)
    call.patch.push({ op: 'replace', path: '/query/name', value: stored })
  }
}

// ---------------------------------------------------------------------------------
// Images: a shared catalog; tags and pushes in the tenant's namespace

/**
 * An image a build names: the tenant's own or the shared catalog's; another tenant's is
 * missing. The builder runs the triggers stored in an image it starts FROM, so the image
 * must be on the engine, where the gateway reads them (build.ts judges them): one the
 * engine does not have (the builder would pull it, triggers unseen) is refused, after the
 * registry allow-list; the tenant pulls it first, through the gateway.
 */
async function buildImage (call: Call, ref: string): Promise<BaseImage> {
  const { res } = await tenantImage(call, ref)
  if (res.state === 'foreign' || (res.state === 'missing' && looksLikeImageId(ref))) throw missing('image', ref, call.op.id, 'path', res.state === 'missing' && res.absent === true)
  if (res.state === 'missing') {
    const parsed = parseImageRef(ref)
    if (!parsed) throw new GatewayError('BODY_INVALID', `invalid reference format in the Dockerfile: ${JSON.stringify(ref)}`)
    if (!tenantRegistry(call, parsed.registry)) throw refuse('registry-not-allowed', `the build pulls ${familiar(ref)} from registry ${parsed.registry}, which is not allowed for tenant ${call.tenant}`)
    throw refuse('build-image-absent', `the build starts from ${familiar(ref)}, which the engine does not have: the gateway judges the triggers an image carries before a build runs them; pull it first (docker pull ${familiar(ref)})`)
  }
  // By full id: what was just resolved, whatever a name points at meanwhile.
  const r = await call.r.get(`/images/${encodeURIComponent(res.id)}/json`)
  if (r.status !== 200) throw missing('image', ref, call.op.id)
  const config = r.body?.Config ?? {}
  return { id: res.id, user: str(config.User), onBuild: list(config.OnBuild).map(str), env: list(config.Env).map(str) }
}

async function visibleImage (call: Call, ref: string): Promise<Found & { readonly sent: string }> {
  const { res, sent } = await tenantImage(call, ref)
  if (res.state === 'missing' || res.state === 'foreign') throw missing('image', ref, call.op.id, 'path', res.state === 'missing' && res.absent === true)
  return { ...res, sent }
}

// Per-tenant image names (names.ts; docs/tenancy.md "Per-tenant names"): a tenant's
// reference means its own image of that name first (`myapp` is the engine's
// `portcullis.invalid/<tenant>/myapp`), then what the engine resolves the reference to
// (the shared catalog's name, a digest, an id or id prefix over all images), with
// ownership checked as before. `sent` is the reference the engine is to be given.

async function tenantImage (call: Call, ref: string): Promise<{ res: Awaited<ReturnType<Call['r']['image']>>, sent: string }> {
  if (call.names.privateImages) {
    const qualified = call.names.qualifyImage(ref)
    if (qualified !== null) {
      const res = await call.r.image(qualified, call.tenant)
      // Only the tenant's own image counts under its prefix (an admin may tag anything anywhere).
      if (res.state === 'own') return { res, sent: qualified }
    }
  }
  return { res: inSharedSet(call, ref, await call.r.image(ref, call.tenant)), sent: ref }
}

/** An unowned image reached by a name or id outside the shared image set (tenancy.yaml images.shared) is not the tenant's to see. */
function inSharedSet<R extends Resolution | { readonly state: 'foreign' }> (call: Call, ref: string, res: R): R | { readonly state: 'foreign' } {
  if (res.state !== 'shared' || sharedReference(call.settings, ref, res.names ?? [])) return res
  return { state: 'foreign' }
}

/** A path's image, checked, then named to the engine as the tenant's own name resolved it. */
async function pathImage (call: Call, param = 'name'): Promise<Found & { readonly sent: string }> {
  const res = await visibleImage(call, call.params[param])
  call.setParam(param, res.sent)
  return res
}

/**
 * A name a tenant gives an image (build, tag, commit, import, load): under per-tenant
 * names a Docker Hub name is stored under the tenant's prefix and returned in that form;
 * a registry's name (`registry:5000/team-a/app`) is stored as it is, in the tenant's
 * namespace, so that it pushes where it says.
 */
function newImageName (call: Call, ref: string, what: string): string {
  if (call.names.privateImages) {
    const qualified = call.names.qualifyImage(ref)
    if (qualified !== null) return qualified
  }
  mustBeInNamespace(call, ref, what)
  return ref
}

function mustBeInNamespace (call: Call, ref: string, what: string): void {
  const parsed = parseImageRef(ref)
  // The tenants' image host holds each tenant's names under its own name only.
  if (call.names.privateImages && parsed?.registry === TENANT_IMAGE_HOST && !parsed.path.startsWith(`${call.tenant}/`)) {
    throw refuse('image-namespace', `${what} ${JSON.stringify(ref)} names registry ${TENANT_IMAGE_HOST}, which holds tenants' private image names: name it without a registry`)
  }
  if (!parsed || !inNamespace(parsed, call.namespace)) {
    throw refuse('image-namespace', `${what} ${JSON.stringify(ref)} is outside tenant ${call.tenant}'s namespace: use ${call.namespace}/NAME[:TAG] (or REGISTRY/${call.namespace}/NAME[:TAG])`)
  }
}

/**
 * Whether the tenant may use a registry: one of tenancy.yaml's registries.allowed, or one
 * the gateway holds this tenant's credentials for (config registries.credentials names
 * each registry by its exact host[:port]: the operator listed it for the tenant). The
 * daemon connects from the host, so a loopback registry is a port on the host: reachable
 * this way only at the exact address the operator wrote, never at one the tenant picks.
 */
function tenantRegistry (call: Call, registry: string): boolean {
  return registryAllowed(call.settings, registry) || call.credentials.get(call.tenant, registry) !== undefined
}

function registryNotAllowed (call: Call, registry: string, what: string): Error {
  return refuse('registry-not-allowed', `${what} registry ${registry} is not allowed for tenant ${call.tenant}: tenancy.yaml registries.allowed does not list it and the gateway holds no credentials of the tenant for it (config registries.credentials)`)
}

/** Registry credentials: the gateway's for this tenant and registry; the tenant's own only where policy allows. */
function registryAuth (call: Call, registry: string, what: string): void {
  if (!tenantRegistry(call, registry)) throw registryNotAllowed(call, registry, `${what} from or to`)
  const held = call.credentials.get(call.tenant, registry)
  if (held || call.settings.registries.tenantCredentials === 'strip' || call.clientRegistryAuth === undefined) {
    call.setHeaders['x-registry-auth'] = registryAuthHeader(held, registry)
  }
}

/**
 * POST /images/create is what the engine's own branch order says it is
 * (postImagesCreate): a pull whenever `fromImage` is non-empty, whatever else the query
 * holds (`fromSrc`, `repo`, `changes` are then ignored); otherwise an import. Go's
 * Form.Get reads the first of repeated parameters, as URLSearchParams.get does.
 */
const imagePull: Handler = async (call) => {
  const from = call.query.get('fromImage') ?? ''
  if (from !== '') {
    // The engine pulls `fromImage` at `tag` (a tag or a digest) when one is given.
    const tag = call.query.get('tag') ?? ''
    const ref = tag === '' ? from : `${from}${tag.includes(':') ? '@' : ':'}${tag}`
    const parsed = parseImageRef(ref) ?? parseImageRef(from)
    if (!parsed) throw new GatewayError('BODY_INVALID', `invalid reference format: ${JSON.stringify(from)}`)
    // What lands in the engine's catalog is only ever the tenant's to use when it is in the shared set.
    if (!sharedReference(call.settings, ref, [])) throw refuse('image-shared', `image ${familiar(ref)} is not in the shared image set (tenancy.yaml images.shared): tenant ${call.tenant} may pull only the images tenants may use`)
    registryAuth(call, parsed.registry, 'pulling')
    return
  }
  const src = call.query.get('fromSrc') ?? ''
  if (src !== '-') throw refuse('image-import-url', 'importing an image from a URL makes the engine fetch it: not available to tenants (send the archive in the body: fromSrc=-)')
  // Without `repo` the engine ignores `tag` and stores the image untagged (moby
  // ImportImage): no name to judge; the owner labels below make it the tenant's.
  const repo = call.query.get('repo') ?? ''
  if (repo !== '') namedImage(call, 'imported image')
  // The imported image is the tenant's: owner labels set last by a change of the gateway's own;
  // its id is the last progress line's status.
  await stampChanges(call)
  call.respond = observed((line) => { record(call, line?.status) })
}

/**
 * `changes` (commit, import) are Dockerfile instructions the engine applies on top of the
 * image's configuration: judged as the engine reads them (dockerfile.ts judgeChanges: no
 * label key may come to name an owner label, triggers judged as stored), forwarded as the
 * gateway's own re-serialization, one logical line each, and then the gateway's own LABEL
 * changes, which nothing before them can join.
 */
async function stampChanges (call: Call): Promise<void> {
  const changes = await judgeChanges(call.query.getAll('changes'), async (ref) => await buildImage(call, ref))
  // One LABEL per label: Podman reads only the first key=value of a LABEL change, and
  // would store the rest as part of the first value (docs/podman.md).
  const stamps = [labelInstruction(TENANT_LABEL, call.tenant), labelInstruction(SUBJECT_LABEL, call.subject)]
  if (stamps.includes(null)) throw refuse('owner-labels', `the owner labels of subject ${call.subject} in tenant ${call.tenant} cannot be written as a Dockerfile LABEL`)
  const all = stampedChanges(changes, stamps as string[])
  call.query.delete('changes')
  for (const c of all) call.query.append('changes', c)
  // The record names the stamps only: the tenant's own changes (re-serialized, the same
  // instructions) may hold values the audit trail does not keep (ENV secrets).
  for (const stamp of stamps as string[]) call.patch.push({ op: 'add', path: '/query/changes/-', value: stamp })
  call.queryChanged = true
}

const imagePush: Handler = async (call) => {
  const name = call.params.name
  const ref = call.query.get('tag') ? `${name}:${call.query.get('tag')}` : name
  // A private name is pushed by a registry's name (docker tag myapp REGISTRY/NS/myapp).
  if (call.names.privateImages && call.names.qualifyImage(ref) !== null) throw refuse('image-namespace', `pushed image ${JSON.stringify(ref)} names Docker Hub, where tenants' private image names are not pushed: tag it with a registry's name in namespace ${call.namespace}/ and push that`)
  mustBeInNamespace(call, ref, 'pushed image')
  await visibleImage(call, ref)
  registryAuth(call, parseImageRef(ref)!.registry, 'pushing')
}

const imageTag: Handler = async (call) => {
  await pathImage(call)
  const repo = call.query.get('repo') ?? ''
  const tag = call.query.get('tag') ?? ''
  const stored = newImageName(call, repo + (tag ? ':' + tag : ''), 'tag')
  if (stored !== repo + (tag ? ':' + tag : '')) {
    // The qualified name carries the tag: the engine reads `repo` with its tag when `tag` is empty.
    call.setQuery('repo', stored)
    call.query.delete('tag')
    call.patch.push({ op: 'replace', path: '/query/repo', value: stored })
  }
}

const imageDelete: Handler = async (call) => {
  const ref = call.params.name
  const res = await visibleImage(call, ref)
  if (call.names.privateImages) call.viewAnswer((b) => untaggedPlain(call, b, false))
  // The tenant's own name: its engine name is untagged, as on a private engine.
  if (res.sent !== ref) { call.setParam('name', res.sent); return }
  const parsed = looksLikeImageId(ref) ? null : parseImageRef(ref)
  const ownTag = parsed !== null && inNamespace(parsed, call.namespace)
  if (!ownTag && res.state !== 'own') {
    throw refuse('image-shared', `image ${familiar(ref)} belongs to the shared catalog; tenant ${call.tenant} may remove only images it built or committed, and tags in its namespace ${call.namespace}/`)
  }
}

const imageBuild: Handler = async (call) => {
  const tags = call.query.getAll('t')
  const pins: Pin[] = []
  const stored = tags.map((t) => newImageName(call, t, 'build tag'))
  if (stored.some((t, i) => t !== tags[i])) {
    call.query.delete('t')
    for (const t of stored) call.query.append('t', t)
    call.queryChanged = true
    call.patch.push({ op: 'replace', path: '/query/t', value: stored })
  }
  // Any remote but the BuildKit session makes the daemon fetch: git URLs (git://, git@,
  // github.com/..., URLs ending in .git), http(s) URLs, and whatever later engines add
  // (remotecontext.Detect). Only the context in the body is the tenant's.
  const remote = call.query.get('remote') ?? ''
  if (remote !== '' && remote !== 'client-session') {
    throw refuse('build-remote', 'building from a remote context makes the engine fetch it: not available to tenants (send the context in the body)')
  }
  if ((remote === 'client-session' || call.query.get('version') === '2') && !call.settings.builds.buildkit) {
    throw refuse('build-buildkit', 'a BuildKit build carries its Dockerfile over the session, where the gateway cannot check it: not available to tenants unless tenancy.yaml allows it (builds.buildkit); build with the classic builder (DOCKER_BUILDKIT=0)')
  }
  // The classic builder reads the Dockerfile from the context in the body: read as it
  // streams, and judged before the engine has the whole context (build.ts). A BuildKit
  // build (remote=client-session) fetches its Dockerfile over the session instead.
  if (remote === '') {
    let buildArgs: Record<string, string | null> = {}
    const raw = call.query.get('buildargs')
    if (raw) {
      try { buildArgs = JSON.parse(raw) } catch { throw new GatewayError('BODY_INVALID', 'invalid buildargs parameter: not a JSON object') }
      if (buildArgs === null || typeof buildArgs !== 'object' || Array.isArray(buildArgs)) throw new GatewayError('BODY_INVALID', 'invalid buildargs parameter: not a JSON object')
    }
    // Who the steps may run as: judged as a create's user would be (users.ts stepUser).
    const judged = await buildStepsJudged(call)
    call.bodyFilter = inspectBuild({
      dockerfile: call.query.get('dockerfile') ?? '',
      buildArgs,
      target: call.query.get('target') ?? '',
      checkImage: async (ref) => await buildImage(call, ref),
      pinned: (sent, original) => { pins.push({ sent, original }) },
      ...(judged ? { stepUser: (user: string, where: string) => stepUser(call, user, where) } : {}),
    })
  }
  // The builder would pull each base image again, triggers unseen (build.ts).
  if (boolValue(call.query.get('pull'))) throw refuse('build-pull', 'a build that pulls its base images runs triggers the gateway has not seen: pull them first through the gateway (docker pull), then build without --pull')
  await ownCache(call)
  registryConfig(call)
  buildLimits(call)
  // RUN steps are containers too: on the tenant's own network, not the shared bridge
  // (the classic builder creates them with `networkmode` as their NetworkMode).
  const netMode = call.query.get('networkmode') ?? ''
  if (call.settings.networks.tenantDefault && DEFAULT_NETWORK_MODES.has(netMode) && remote === '') call.setQuery('networkmode', await ensureDefaultNetwork(call))
  // BuildKit exporters (API 1.40+) can name images too: those names obey the namespace.
  const outputs = call.query.get('outputs')
  if (outputs) {
    let parsed: unknown
    try { parsed = JSON.parse(outputs) } catch { throw new GatewayError('BODY_INVALID', 'invalid outputs parameter: not JSON') }
    for (const o of list(parsed)) {
      const attrs = (o as any)?.Attrs ?? (o as any)?.attrs ?? {}
      for (const [k, v] of Object.entries(attrs)) {
        if (k.toLowerCase() === 'name') for (const n of str(v).split(',')) if (n.trim()) mustBeInNamespace(call, n.trim(), 'build output')
      }
    }
  }
  let labels: Record<string, string> = {}
  const raw = call.query.get('labels')
  if (raw) {
    try { labels = JSON.parse(raw) } catch { throw new GatewayError('BODY_INVALID', 'invalid labels parameter: not a JSON object') }
    if (labels === null || typeof labels !== 'object' || Array.isArray(labels)) throw new GatewayError('BODY_INVALID', 'invalid labels parameter: not a JSON object')
    const roleKeys = Object.keys(labels).filter((k) => /^io\.portcullis\.roles?$/i.test(k))
    if (roleKeys.length > 0) throw refuse('role-labels', `labels that give a container roles are set by an admin only (${roleKeys.map((k) => JSON.stringify(k)).join(', ')})`)
  }
  const all = { ...labels, [TENANT_LABEL]: call.tenant, [SUBJECT_LABEL]: call.subject }
  // Per-tenant image names: "Successfully tagged myapp:latest", as on a private engine.
  // Every stage's image the builder reports (aux ID) is the tenant's: its cache sources from now on.
  const made = (line: any): void => { record(call, line?.aux?.ID) }
  call.respond = call.names.privateImages ? buildProgress(call, Object.keys(all), pins, made) : observed(made)
  call.setQuery('labels', JSON.stringify(all))
  call.patch.push({ op: 'add', path: '/query/labels', value: { [TENANT_LABEL]: call.tenant, [SUBJECT_LABEL]: call.subject } })
}

interface Pin { readonly sent: string, readonly original: string }

const OWNER_LABEL_KEYS: ReadonlySet<string> = new Set(OWNER_KEYS)
const STEP = /^Step (\d+)\/(\d+) : (.*)$/s
const ARROW = /^ ---> [0-9a-f]{12}\n$/

/**
 * A tenant's build output as its own engine would print it (names: private). The classic
 * builder runs the build's `labels` as one LABEL step per label, in key order, after the
 * Dockerfile's steps (moby builder/dockerfile buildLabelOptions): the owner labels' two
 * steps are left out and the others renumbered, and when they come last the image id
 * they end with takes the place of the last shown step's. The images the gateway pinned by
 * id (`FROM sha256:...`, COPY --from: build.ts) are shown as the Dockerfile named them.
 * State is kept in `keep`, which runs once per line, in order; `view` only returns it.
 */
function buildProgress (call: Call, labelKeys: readonly string[], pins: Pin[], seen: (line: unknown) => void): ResponseFilter {
  const keys = [...new Set(labelKeys)].sort()
  let total = 0
  let owner = new Set<number>()
  let lastShown = 0
  let lastOwner = 0
  let step = 0
  let hiddenBefore = 0
  let current: unknown
  // Filled while the context streams to the engine, before the builder prints anything.
  const pending = pins
  const restore = (text: string): string => {
    const at = pending.findIndex((p) => text.includes(p.sent))
    if (at < 0) return text
    const [p] = pending.splice(at, 1)
    return text.replace(p.sent, p.original)
  }
  return {
    kind: 'lines',
    keep: async (line: any) => {
      seen(line)
      current = line
      const stream = typeof line?.stream === 'string' ? line.stream : null
      if (stream === null) return true
      const m = STEP.exec(stream)
      if (m !== null) {
        step = Number(m[1])
        if (total === 0) {
          total = Number(m[2])
          // The label steps are the last ones, in key order.
          owner = new Set(keys.map((k, i) => OWNER_LABEL_KEYS.has(k) ? total - keys.length + 1 + i : 0).filter((n) => n > 0))
          for (let n = total; n > 0; n--) if (!owner.has(n)) { lastShown = n; break }
          lastOwner = Math.max(0, ...owner)
        }
        if (owner.has(step)) { hiddenBefore++; return false }
        current = call.names.progress({ ...line, stream: `Step ${step - hiddenBefore}/${total - owner.size} : ${restore(m[3])}` })
        return true
      }
      if (step === 0 || stream.startsWith('Successfully ')) { current = call.names.progress(line); return true }
      if (owner.has(step)) return step === lastOwner && lastOwner > lastShown && ARROW.test(stream)
      if (step === lastShown && lastOwner > lastShown && ARROW.test(stream)) return false
      current = call.names.progress(line)
      return true
    },
    view: () => current,
  }
}

/**
 * An image's history as its own engine would show it: without the owner labels' LABEL
 * steps of a tenant's build (see buildProgress); the newest entry shown takes the image's
 * id and tags when they were on a step left out. Tags in the tenant's names.
 */
function historyView (call: Call, body: unknown): unknown {
  if (!Array.isArray(body)) return body
  const ownerStep = /^\/bin\/sh -c #\(nop\) {2}LABEL (io\.portcullis\.tenant|io\.portcullis\.subject)=/
  const out: any[] = []
  let carried: { Id: unknown, Tags: unknown } | null = null
  for (const h of body) {
    if (typeof h?.CreatedBy === 'string' && ownerStep.test(h.CreatedBy) && h.CreatedBy.endsWith(`=${h.CreatedBy.includes('tenant=') ? call.tenant : call.subject}`)) {
      if (out.length === 0) carried ??= { Id: h.Id, Tags: h.Tags }
      continue
    }
    out.push(call.names.historyEntry(carried !== null ? { ...h, Id: carried.Id, Tags: carried.Tags } : h))
    carried = null
  }
  return out
}

/** An image remove's (a list) or prune's (`ImagesDeleted`) `Untagged` names in the tenant's names. */
function untaggedPlain (call: Call, body: any, prune: boolean): unknown {
  const plain = (xs: unknown): unknown => {
    if (!Array.isArray(xs)) return xs
    const out = xs.map((x) => x !== null && typeof x === 'object' && typeof x.Untagged === 'string' && call.names.plainImage(x.Untagged) !== x.Untagged ? { ...x, Untagged: call.names.plainImage(x.Untagged) } : x)
    return out.every((x, i) => x === xs[i]) ? xs : out
  }
  if (!prune) return plain(body)
  if (body === null || typeof body !== 'object') return body
  const deleted = plain(body.ImagesDeleted)
  return deleted === body.ImagesDeleted ? body : { ...body, ImagesDeleted: deleted }
}

/** A commit's or import's `repo` and `tag`: the name checked, and the engine's name sent (one `repo` carrying the tag). */
function namedImage (call: Call, what: string): void {
  const repo = call.query.get('repo') ?? ''
  const tag = call.query.get('tag') ?? ''
  const given = repo + (tag ? ':' + tag : '')
  const stored = newImageName(call, given, what)
  if (stored === given) return
  call.setQuery('repo', stored)
  call.query.delete('tag')
  call.patch.push({ op: 'replace', path: '/query/repo', value: stored })
}

/** A boolean query parameter as the engine reads it (httputils.BoolValue). */
function boolValue (v: string | null): boolean {
  return !['', '0', 'no', 'false', 'none'].includes((v ?? '').trim().toLowerCase())
}

/**
 * The step containers of a classic build are the builder's (no ContainerCreate passes
 * the gateway); they get what the build's query gives them (moby dockerfile
 * hostConfigFromOptions), which the policy judges as the facts a create's HostConfig
 * gives (policy/facts.ts buildFacts). On top: a memory limit (tenancy.yaml
 * builds.memory) when the build names none, and no more than that. (no-new-privileges
 * cannot be given: dockerd 20.10's classic builder refuses any `securityopt`.)
 */
function buildLimits (call: Call): void {
  const asked = call.query.get('memory') ?? ''
  // As the engine reads it: Int64ValueOrZero.
  const memory = /^[+-]?\d{1,19}$/.test(asked) ? Number(asked) : 0
  const max = call.settings.builds.memory
  if (memory > max) throw refuse('build-memory', `a build step's memory limit of ${memory} bytes is above the ${max} bytes tenancy.yaml allows tenants' builds (builds.memory)`)
  if (memory <= 0) {
    call.setQuery('memory', String(max))
    call.patch.push({ op: 'add', path: '/query/memory', value: String(max) })
  }
}

/** Names the engine never resolves to an image: a `cachefrom` that lets no cache hit through. */
const NO_CACHE = 'portcullis.invalid/no-cache:none'

/**
 * The classic builder's layer cache is one for every caller of the engine; with
 * `cachefrom` it accepts a local hit only inside the history of a listed image (moby
 * image/cache ImageCache.GetCache), and images it cannot find are skipped. So every
 * tenant build names the images the gateway recorded as made by this tenant (built,
 * committed, imported through it: provenance.ts) that still carry its owner label (by
 * id), the shared catalog images the client listed, and a name that is no image: a
 * tenant with no images gets no cache hit at all, never another tenant's layers, and an
 * image that only carries the tenant's label (a label is not an identity) is no source
 * either. Another tenant's image in the client's list answers as missing.
 */
async function ownCache (call: Call): Promise<void> {
  const listed: string[] = []
  for (const ref of parseJsonList(call, 'cachefrom')) listed.push((await visibleImage(call, ref)).id)
  const made = call.r.provenance.of(call.tenant)
  const own = (await call.r.ownList('image', call.tenant)).map((i) => str(i.Id)).filter((id) => made.has(id))
  const cacheFrom = [...new Set([...listed, ...own]), NO_CACHE]
  call.setQuery('cachefrom', JSON.stringify(cacheFrom))
  call.patch.push({ op: 'add', path: '/query/cachefrom', value: cacheFrom })
}

/** An image id the engine's answer names, made by the caller's tenant (provenance.ts ignores anything else). */
function record (call: Call, id: unknown): void {
  if (typeof id === 'string') call.r.provenance.record(call.tenant, id, call.op.id)
}

/** A stream of JSON lines passed on as the engine wrote it, each line seen first. */
function observed (see: (line: any) => void): ResponseFilter {
  return { kind: 'lines', keep: async (line) => { see(line); return true } }
}

/**
 * `X-Registry-Config` (a build's credentials, one per registry): the gateway's for this
 * tenant, every registry it holds them for (each one allowed to the tenant: tenantRegistry),
 * as for pulls; the tenant's own only where policy allows and the gateway holds none.
 */
function registryConfig (call: Call): void {
  const held = call.credentials.registries(call.tenant)
  if (held.length === 0 && call.settings.registries.tenantCredentials === 'allow') return
  call.setHeaders['x-registry-config'] = registryConfigHeader(Object.fromEntries(held.map((r) => [r, call.credentials.get(call.tenant, r)!])))
}

function parseJsonList (call: Call, name: string): string[] {
  const all = call.query.getAll(name)
  if (all.length > 1) throw new GatewayError('PATH_AMBIGUOUS', `the query gives ${name} more than once`)
  if (!all[0]) return []
  let v: unknown
  try { v = JSON.parse(all[0]) } catch { throw new GatewayError('BODY_INVALID', `invalid ${name} parameter: not JSON`) }
  if (!Array.isArray(v) || !v.every((x) => typeof x === 'string')) throw new GatewayError('BODY_INVALID', `invalid ${name} parameter: expected a JSON list of strings`)
  return v
}

const imageCommit: Handler = async (call) => {
  // The engine answers a missing container to commit with its 404.
  const id = await own(call, 'container', call.query.get('container') ?? '')
  call.setQuery('container', id)
  const repo = call.query.get('repo')
  if (repo) namedImage(call, 'committed image')
  const container = await call.r.get(`/containers/${encodeURIComponent(id)}/json`)
  // No config in the body (`null`: the docker CLI, docker-py): the engine commits the
  // container's own config; a config given is merged with it, and only some fields are
  // (moby daemon/commit.go merge: Hostname, Image, Attach* and more are not). The owner
  // labels need a config, so the gateway sends the container's, as the engine would use it.
  const config = container.body?.Config
  // The body decodes into a wrapper that embeds *Config: a body that sets none of its
  // fields (`null`, empty, or only other keys: dockerode sends its query options) leaves
  // the pointer nil, as no config at all. Go matches keys ignoring case.
  const given = call.body
  if (config !== null && typeof config === 'object') {
    const fields = new Set(Object.keys(config).map((k) => k.toLowerCase()))
    const none = given === null || given === undefined || (typeof given === 'object' && !Array.isArray(given) && !Object.keys(given).some((k) => fields.has(k.toLowerCase())))
    if (none) for (const [k, v] of Object.entries(config)) call.setBody([k], v)
  }
  noRoleLabels(call, ['Labels'])
  stamp(call, ['Labels'])
  // The committed image's triggers: the changes', the body's (a container config), and the container's own.
  const triggers = [...list(bodyAt(call, 'OnBuild')), ...list(container.body?.Config?.OnBuild)].map(str)
  await judgeTriggers(triggers, async (ref) => await buildImage(call, ref))
  await stampChanges(call)
  call.respond = { kind: 'json', transform: (b: any) => { record(call, b?.Id); return b } }
}

const imageList: Handler = async (call) => {
  // No owner filter for the engine: the shared catalog is listed too.
  ownerTermsOnly(call)
  const patterns = privateReferenceFilter(call)
  call.respond = {
    kind: 'json',
    transform: (body) => {
      const all = list(body).map((i: any) => ({ own: ownerOf(i?.Labels) === call.tenant, i: ownerOf(i?.Labels) === call.tenant ? i : ownerOf(i?.Labels) === null ? sharedView(call.settings, i) : null }))
        .filter((x) => x.i !== null).map((x) => ({ own: x.own, i: call.names.image(hideAll(x.i, [IMAGE_LABELS])) }))
      const seen = call.names.privateImages ? unshadowed(all) : all.map((x) => x.i)
      return patterns === null ? seen : seen.map((i) => byReference(i, patterns)).filter((i) => i !== null)
    },
  }
}

/**
 * Under private image names the engine cannot apply a list's `reference` filter (it
 * would match `portcullis.invalid/<tenant>/shopdb`, never `shopdb`): it is taken out of
 * the query and applied by the gateway to the names the tenant sees, as the engine applies
 * it (moby daemon/images Images). A malformed pattern stays in the query, for the
 * engine's own error.
 */
function privateReferenceFilter (call: Call): RegExp[] | null {
  if (!call.names.privateImages) return null
  const filters = parseFilters(call.query)
  const values = filters.get('reference')
  if (values === undefined) return null
  const patterns = [...values].map(pathPattern)
  if (patterns.some((p) => p === null)) return null
  filters.delete('reference')
  call.setQuery('filters', serializeFilters(filters))
  return patterns as RegExp[]
}

/**
 * A tenant's own image name wins over a shared one (tenantImage): a shared image's tags
 * that the tenant's own images hold are not listed (an image left without a name is not
 * listed at all), as a private engine lists each name once.
 */
function unshadowed (images: ReadonlyArray<{ own: boolean, i: any }>): any[] {
  const own = new Set(images.filter((x) => x.own).flatMap((x) => list(x.i?.RepoTags).map(str)))
  return images.flatMap(({ own: mine, i }) => {
    if (mine || !list(i?.RepoTags).some((t) => own.has(str(t)))) return [i]
    const tags = list(i?.RepoTags).filter((t) => !own.has(str(t)))
    return tags.length === 0 && list(i?.RepoDigests).length === 0 ? [] : [{ ...i, RepoTags: tags }]
  })
}

/** An image with only its names that some pattern matches; null when none does (untagged ones included). */
function byReference (image: any, patterns: readonly RegExp[]): any {
  const keep = (xs: unknown): string[] => list(xs).map(str).filter((n) => !n.startsWith('<none>') && patterns.some((p) => referenceMatches(p, n)))
  const tags = keep(image?.RepoTags)
  const digests = keep(image?.RepoDigests)
  if (tags.length === 0 && digests.length === 0) return null
  return { ...image, RepoTags: tags, RepoDigests: digests }
}

/** A committed image's ContainerConfig is its container's (with the container's owner labels). */
const IMAGE_INSPECT_LABELS: readonly LabelsAt[] = [{ path: ['Config', 'Labels'], empty: null }, { path: ['ContainerConfig', 'Labels'], empty: null }]

const imageInspect: Handler = async (call) => {
  const res = await pathImage(call)
  hidden(call, IMAGE_INSPECT_LABELS)
  if (call.names.privateImages) {
    // Before the owner labels are hidden: they tell the steps to leave out.
    const hide = call.respond
    if (hide?.kind === 'json') call.respond = { kind: 'json', transform: async (b) => await hide.transform(await withoutOwnerSteps(call, b)) }
    call.viewAnswer((b) => call.names.image(b))
  }
  // A shared image shows only its names in the shared set.
  if (res.state === 'shared') call.viewAnswer((b) => sharedView(call.settings, b) ?? b)
}

/** A build step's ContainerConfig.Cmd that is one of the owner labels' LABEL steps of `call`'s tenant (buildProgress). */
function ownerLabelStep (call: Call, cmd: unknown): boolean {
  const c = list(cmd).map(str)
  return c.length === 4 && c[2] === '#(nop) ' && (c[3] === `LABEL ${TENANT_LABEL}=${call.tenant}` || c[3] === `LABEL ${SUBJECT_LABEL}=${call.subject}`)
}

/**
 * A tenant's built image as its own engine would show it: `Parent`, `Container` and
 * `ContainerConfig` are those of the last step of its Dockerfile, not of the owner labels'
 * LABEL steps after it (buildProgress). Only for the tenant's own image; its parents are
 * the intermediate images of the same build.
 */
async function withoutOwnerSteps (call: Call, img: any): Promise<any> {
  if (img === null || typeof img !== 'object' || img.Config?.Labels?.[TENANT_LABEL] !== call.tenant) return img
  let cur = img
  for (let hops = 0; hops < 2 && ownerLabelStep(call, cur.ContainerConfig?.Cmd) && typeof cur.Parent === 'string' && cur.Parent !== ''; hops++) {
    const parent = await call.r.get(`/images/${encodeURIComponent(cur.Parent)}/json`)
    if (parent.status !== 200 || parent.body === null || typeof parent.body !== 'object') return img
    cur = parent.body
  }
  if (cur === img) return img
  // Config.Image is the image each step started from: the last Dockerfile step's.
  const config = img.Config !== null && typeof img.Config === 'object' && cur.Config !== null && typeof cur.Config === 'object' ? { ...img.Config, Image: cur.Config.Image } : img.Config
  return { ...img, Config: config, Parent: cur.Parent, Container: cur.Container, ContainerConfig: cur.ContainerConfig }
}

/**
 * docker load: the archive is rewritten on its way to the engine (archive.ts): its tags
 * must lie in the tenant's namespace, and every image it loads gets the owner labels.
 */
const imageLoad: Handler = async (call) => {
  const labels = { [TENANT_LABEL]: call.tenant, [SUBJECT_LABEL]: call.subject }
  call.bodyFilter = scopeArchive({
    checkTag: (ref) => { newImageName(call, ref, 'archive tag') },
    ...(call.names.privateImages ? { engineTag: (ref: string) => newImageName(call, ref, 'archive tag') } : {}),
    labels,
    checkTriggers: async (triggers) => { await judgeTriggers(triggers, async (ref) => await buildImage(call, ref)) },
  })
  // Per-tenant image names: "Loaded image: myapp:latest".
  if (call.names.privateImages) call.respond = { kind: 'lines', keep: async () => true, view: (l: any) => call.names.progress(l) }
  call.patch.push({ op: 'add', path: '/body/config/Labels', value: labels })
}

/**
 * The build cache carries no owner: a tenant's prune deletes nothing and is answered by
 * the gateway in the engine's shape, so that `docker system prune` and `docker builder
 * prune` succeed for the tenant's own objects. (The administrator prunes the cache.)
 */
const buildPrune: Handler = async (call) => {
  call.answer = { status: 200, body: { CachesDeleted: null, SpaceReclaimed: 0 } }
}

const imageGetAll: Handler = async (call) => {
  const names = call.query.getAll('names')
  const sent: string[] = []
  for (const n of names) sent.push((await visibleImage(call, n)).sent)
  if (sent.some((n, i) => n !== names[i])) {
    call.query.delete('names')
    for (const n of sent) call.query.append('names', n)
    call.queryChanged = true
  }
}

// ---------------------------------------------------------------------------------
// Networks and volumes

/**
 * The id to send for a network: its full id, except for a predefined network named by
 * its name (names no tenant can hold: engines refuse to create them). Podman gives its
 * default network the name `bridge` only when it is asked for by that name.
 */
function networkRef (call: Call, res: Found, ref: string): string {
  return res.state === 'shared' && ref === res.name ? ref : res.id
}

const networkInspect: Handler = async (call) => {
  const res = await ownOrSharedNetwork(call, call.params.id)
  call.setParam('id', networkRef(call, res, call.params.id))
  if (res.state === 'shared') {
    // A predefined network lists everyone's containers: only the tenant's own are shown.
    const mine = new Set((await call.r.ownList('container', call.tenant)).map((c) => String(c.Id)))
    call.respond = {
      kind: 'json',
      transform: (b) => {
        const all = Object.entries(b?.Containers ?? {})
        const kept = all.filter(([id]) => mine.has(id))
        // Every field the gateway does not know (a v1.52 network's Status...) stays as it is;
        // with nothing to hide, the engine's own answer goes out.
        return kept.length === all.length ? b : { ...b, Containers: Object.fromEntries(kept) }
      },
    }
  } else {
    hidden(call, [NETWORK_LABELS])
  }
  call.viewAnswer((b) => call.names.network(b))
}

const networkConnect: Handler = async (call) => {
  const res = await ownOrSharedNetwork(call, call.params.id)
  call.setParam('id', networkRef(call, res, call.params.id))
  const c = str(bodyAt(call, 'Container'))
  // The engine answers a missing container to connect or disconnect with its 404: another
  // tenant's container is missing before anything else is said about the request.
  const forced = call.op.id === 'NetworkDisconnect' && bodyAt(call, 'Force') === true
  const id = await own(call, 'container', c, forced ? 'endpoint' : 'path')
  // The engine's bridge is shared by every tenant: with tenants on their own default network, not theirs to join.
  if (call.op.id === 'NetworkConnect' && res.state === 'shared' && res.name === 'bridge' && call.settings.networks.tenantDefault && await call.r.engine() !== 'podman') {
    throw refuse('tenant-default-network', `the engine's bridge network is shared by all tenants: tenant ${call.tenant}'s containers use ${defaultNetworkName(call.settings, call.tenant)} instead (tenancy.yaml networks.tenantDefault)`)
  }
  if (id !== c) call.setBody(['Container'], id)
  const userDefined = res.state === 'own'
  if (call.names.private && userDefined && call.op.id === 'NetworkConnect') {
    // The container's plain name, for the network's DNS (as at create: plainNameAliases).
    const name = str((await call.r.get(`/containers/${id}/json`)).body?.Name)
    const plain = call.names.plain('container', name).replace(/^\//, '')
    const aliases = list(bodyAt(call, 'EndpointConfig', 'Aliases')).map(str)
    if (plain !== '' && !aliases.includes(plain)) call.setBody(['EndpointConfig', 'Aliases'], [...aliases, plain])
  }
  const links = list(bodyAt(call, 'EndpointConfig', 'Links'))
  const pinned = await Promise.all(links.map(async (l) => await endpointLink(call, str(l), userDefined)))
  // Under per-tenant names the links must name the engine's containers.
  if (call.names.private && pinned.some((l, i) => l !== links[i])) call.setBody(['EndpointConfig', 'Links'], pinned)
}

/**
 * Driver options a tenant may set on a network: none names a host interface, a bridge, a
 * host address or a parent device (com.docker.network.bridge.name re-addresses any bridge,
 * docker0 included; host_binding_ipv4, parent, macvlan/ipvlan modes reach the host's own
 * networks).
 */
const TENANT_NETWORK_OPTIONS = new Set([
  'com.docker.network.bridge.enable_icc',
  'com.docker.network.driver.mtu',
  'com.docker.network.container_iface_prefix',
])

const networkCreate: Handler = async (call) => {
  const name = str(bodyAt(call, 'Name'))
  if (PREDEFINED_NETWORKS.has(name)) throw refuse('tenant-names', `${name} is a predefined network`)
  // Another tenant's default network name, taken first, would keep that tenant off its own network.
  if (defaultNetworkShaped(call.settings, name) && name !== defaultNetworkName(call.settings, call.tenant)) {
    throw refuse('tenant-names', `the network name "${name}" has the shape of a tenant's default network (${call.settings.networks.defaultName}): choose another`)
  }
  const options = Object.keys(bodyAt(call, 'Options') ?? {}).filter((k) => !TENANT_NETWORK_OPTIONS.has(k))
  if (options.length > 0) throw refuse('network-options', `network driver options ${options.join(', ')} are not available to tenants (allowed: ${[...TENANT_NETWORK_OPTIONS].join(', ')})`)
  // Explicit address pools add routes on the host, which can cover the host's own
  // networks and services: the engine's default pools only.
  const ipam = bodyAt(call, 'IPAM')
  if (!['', 'default'].includes(str(ipam?.Driver)) || Object.keys(ipam?.Options ?? {}).length > 0 || list(ipam?.Config).length > 0) {
    throw refuse('network-ipam', 'IPAM drivers, options and explicit subnets, ranges and gateways are not available to tenants: the engine picks the addresses')
  }
  if (bodyAt(call, 'Ingress') === true) throw refuse('network-options', 'the swarm ingress network is the administrator\'s')
  // A configuration-only network lends its options and addresses to another: the tenant's
  // own, named by its exact name (the engine looks ConfigFrom up by name).
  const from = str(bodyAt(call, 'ConfigFrom', 'Network'))
  if (from !== '') {
    const fromName = call.names.qualify('network', from)
    const found = await call.r.network(fromName, call.tenant)
    if (found.state !== 'own' || found.name !== fromName) throw missing('network', from, call.op.id, 'body', found.state === 'missing' && found.absent === true)
    if (fromName !== from) call.setBody(['ConfigFrom', 'Network'], fromName)
  }
  await nameFree(call, 'network', name)
  const stored = call.names.qualify('network', name)
  if (stored !== name) call.setBody(['Name'], stored)
  stamp(call, ['Labels'])
}

/**
 * ContainerTop's `ps_args` are handed to `ps` on the host, whose output the engine then
 * filters by a column it finds by name: a chosen output format can relabel columns. Only
 * the common listing forms, which keep the PID column as ps prints it.
 */
const SAFE_PS_ARGS = new Set(['-ef', 'ef', '-e -f', '-f', '-e', '-A', 'aux', '-aux', 'ax', 'auxww', '-efww'])

const containerTop: Handler = async (call) => {
  const args = call.query.get('ps_args')
  if (call.query.getAll('ps_args').length > 1 || (args !== null && args !== '' && !SAFE_PS_ARGS.has(args))) {
    throw refuse('top-ps-args', `ps_args ${JSON.stringify(args)} is not available to tenants (allowed: ${[...SAFE_PS_ARGS].join(', ')})`)
  }
  await owned('container')(call)
}

const networkList: Handler = async (call) => {
  // No owner filter for the engine (the predefined networks carry no owner label).
  ownerTermsOnly(call)
  const engine = await call.r.engine()
  call.respond = {
    kind: 'json',
    transform: (body) => list(body)
      .filter((n: any) => ownerOf(n?.Labels) === call.tenant || (ownerOf(n?.Labels) === null && isPredefinedNetwork(n?.Name, engine) && n?.Scope === 'local'))
      // Under private names the tenant's default network stands in for the engine's
      // `bridge`, which the list shows: a private engine lists no network of that name.
      .filter((n: any) => !(call.names.private && n?.Labels?.[DEFAULT_NETWORK_LABEL] === 'true' && ownerOf(n?.Labels) === call.tenant))
      .map((n) => hideAll(n, [NETWORK_LABELS])),
  }
}

/**
 * Podman (4.3) prunes a volume when ANY of the prune's filter terms matches it, where
 * dockerd requires all: the owner label ANDed with a client's `label=x` or `until=`
 * would prune other tenants' volumes. Under Podman a tenant's volume prune takes no
 * filters of its own.
 */
const volumePrune: Handler = async (call) => {
  if (parseFilters(call.query).size > 0 && await call.r.engine() === 'podman') {
    throw refuse('podman-volume-prune', 'Podman prunes every volume that matches any one filter term: a tenant\'s volume prune takes no filters on this engine')
  }
  await labelFiltered()(call)
}

const volumeCreate: Handler = async (call) => {
  // The engine answers with the volume: without the owner labels, in the tenant's names.
  hidden(call, [VOLUME_LABELS])
  call.viewAnswer((b) => call.names.volume(b))
  const plain = str(bodyAt(call, 'Name'))
  const name = engineName(call, 'volume', plain)
  if (name !== plain) call.setBody(['Name'], name)
  if (name) {
    const res = await call.r.volume(name, call.tenant)
    // The engine answers a create of an existing volume with that volume: not another tenant's.
    if (res.state !== 'own' && await call.r.volumeExists(name)) throw nameTaken('volume', plain, call.tenant)
    if (res.state === 'own') return stamp(call, ['Labels'])
  }
  await checkVolumeQuota(call, 1)
  stamp(call, ['Labels'])
}

const volumeInspect: Handler = async (call) => {
  const id = await own(call, 'volume', call.params.name)
  if (call.names.private) call.setParam('name', id)
  hidden(call, [VOLUME_LABELS])
  call.viewAnswer((b) => call.names.volume(b))
}

const containerInspect: Handler = async (call) => {
  call.setParam('id', await own(call, 'container', call.params.id))
  // A container's limits are int64s: kept exact.
  hidden(call, [{ path: ['Config', 'Labels'], empty: {} }])
  call.viewAnswer((b) => call.names.container(b))
}

// ---------------------------------------------------------------------------------
// Swarm: services, tasks, secrets, configs; nodes and the swarm read-only

async function serviceReferences (call: Call): Promise<void> {
  const cs = bodyAt(call, 'TaskTemplate', 'ContainerSpec')
  for (const [kind, field] of [['secret', 'Secrets'], ['config', 'Configs']] as const) {
    const refs = list(cs?.[field])
    for (let i = 0; i < refs.length; i++) {
      const s = refs[i] as any
      const ref = str(s?.[`${kind === 'secret' ? 'Secret' : 'Config'}ID`]) || str(s?.[`${kind === 'secret' ? 'Secret' : 'Config'}Name`])
      const id = await own(call, kind, ref, 'body')
      if (str(s?.[`${kind === 'secret' ? 'Secret' : 'Config'}ID`]) !== id) call.setBody(['TaskTemplate', 'ContainerSpec', field, String(i), `${kind === 'secret' ? 'Secret' : 'Config'}ID`], id)
    }
  }
  for (const at of [['TaskTemplate', 'Networks'], ['Networks']]) {
    for (const [i, n] of list(bodyAt(call, ...at)).entries()) {
      const target = str((n as any)?.Target)
      if (!target) continue
      const id = await own(call, 'network', target, 'body')
      // Under per-tenant names the engine must read the network that was checked.
      if (call.names.private && id !== target) call.setBody([...at, String(i), 'Target'], id)
    }
  }
  for (const [i, m] of list(cs?.Mounts).entries()) {
    if (swarmMountType((m as any)?.Type) === 'volume' && str((m as any)?.Source)) {
      const src = str((m as any).Source)
      const res = await ownVolume(call, src)
      if (res.state !== 'own') throw missing('volume', src, call.op.id, 'body', res.state === 'missing' && res.absent === true)
      if (res.id !== src) call.setBody(['TaskTemplate', 'ContainerSpec', 'Mounts', String(i), 'Source'], res.id)
    }
  }
  // The image: another tenant's private image is refused as missing; one not on the
  // engine yet is pulled by the swarm (from a registry, with the request's credentials).
  const image = str(cs?.Image)
  if (!image) return
  const { res, sent } = await tenantImage(call, image)
  if (res.state === 'foreign') throw missing('image', image, call.op.id, 'body')
  if (sent !== image) {
    // Per-tenant names: the tenant's own image, under its engine name. The swarm's try to
    // pull it fails (`.invalid` has no registry) and the task runs the local image, as
    // it does for any image built on the node; no credentials go with that try.
    call.setBody(['TaskTemplate', 'ContainerSpec', 'Image'], sent)
    call.setHeaders['x-registry-auth'] = registryAuthHeader(undefined, TENANT_IMAGE_HOST)
    return
  }
  // The swarm pulls the image with the request's X-Registry-Auth: the gateway's credentials.
  const parsed = parseImageRef(image)
  if (parsed) registryAuth(call, parsed.registry, 'pulling the service image')
}

/** A service's or a task's image in the tenant's plain name (names: private); `at`: where the ContainerSpec is. */
function plainServiceImage (call: Call, at: readonly string[]): void {
  if (!call.names.privateImages) return
  const one = (doc: any): any => {
    let out = doc
    for (const top of at[0] === 'Spec' ? ['Spec', 'PreviousSpec'] : [at[0]]) {
      const cs = [top, ...at.slice(1)].reduce((o: any, k) => o?.[k], out)
      if (typeof cs?.Image !== 'string') continue
      const plain = call.names.plainImage(cs.Image)
      if (plain === cs.Image) continue
      out = structuredClone(out)
      ;[top, ...at.slice(1)].reduce((o: any, k) => o[k], out).Image = plain
    }
    return out
  }
  call.viewAnswer((b) => Array.isArray(b) ? b.map(one) : one(b))
}

/**
 * A service's tasks are containers: their user and groups obey the same rules, and their
 * process limit too (rewrites.yaml gives them the containers' defaults). A task template
 * without a container spec runs no container: nothing to set there.
 */
async function serviceIdentity (call: Call): Promise<void> {
  const cs = bodyAt(call, 'TaskTemplate', 'ContainerSpec')
  if (cs !== null && typeof cs === 'object' && !Array.isArray(cs)) {
    await scopeUser(call, ['TaskTemplate', 'ContainerSpec', 'User'], ['TaskTemplate', 'ContainerSpec', 'Groups'], 'ContainerSpec.User')
  }
  const pids = bodyAt(call, 'TaskTemplate', 'Resources', 'Limits', 'Pids')
  if (pids !== undefined && pids !== null && numberOf(pids) < 0) throw refuse('pids-limit', 'a negative Pids limit removes the tasks\' process limit: not available to tenants')
}

/**
 * An exec without a user runs as its container's (Config.User): kept when that is one the
 * tenant could name (a container created through the gateway has one), else the tenant's.
 */
const containerExec: Handler = async (call) => {
  await owned('container')(call)
  await scopeUser(call, ['User'], null, 'exec User', async () => str((await call.r.get(`/containers/${call.params.id}/json`)).body?.Config?.User))
}

/** The first API version whose ContainerSpec.Privileges has NoNewPrivileges (moby #46386, with Seccomp and AppArmor). */
const SERVICE_NNP_API = '1.44'

function apiAtLeast (v: string, min: string): boolean {
  const [a, b] = v.split('.').map(Number)
  const [c, d] = min.split('.').map(Number)
  return a > c || (a === c && b >= d)
}

/**
 * A tenant's containers always get no-new-privileges (rewrites.yaml); a service's tasks
 * get it only from `ContainerSpec.Privileges.NoNewPrivileges`, which the engine reads from
 * API 1.44 on (older request versions have it dropped: adjustForAPIVersion). There it is
 * required (set when absent); below, the service is refused unless tenancy.yaml
 * `services.withoutNoNewPrivileges` allows it.
 */
async function serviceNoNewPrivileges (call: Call): Promise<void> {
  // An engine that is no swarm manager answers the create itself (503): that answer, as directly.
  if ((await call.r.probe('/swarm')).status !== 200) return
  const engineApi = str((await call.r.get('/version')).body?.ApiVersion)
  const api = call.apiVersion !== undefined && /^\d+\.\d+$/.test(call.apiVersion) && /^\d+\.\d+$/.test(engineApi) && !apiAtLeast(call.apiVersion, engineApi) ? call.apiVersion : engineApi
  const at = ['TaskTemplate', 'ContainerSpec', 'Privileges', 'NoNewPrivileges']
  if (/^\d+\.\d+$/.test(api) && apiAtLeast(api, SERVICE_NNP_API)) {
    const given = bodyAt(call, ...at)
    if (given !== undefined && given !== null && given !== true) {
      throw refuse('service-no-new-privileges', `${call.op.id}: ContainerSpec.Privileges.NoNewPrivileges ${JSON.stringify(given)} lets the service's tasks gain privileges: tenants' tasks run with no-new-privileges, as their containers do`)
    }
    call.setBody(at, true)
    return
  }
  if (call.settings.services?.withoutNoNewPrivileges === true) return
  throw refuse('service-no-new-privileges', `${call.op.id} refused for tenant ${call.tenant}: API ${api || 'unknown'} has no ContainerSpec.Privileges.NoNewPrivileges (it needs ${SERVICE_NNP_API}), so the service's tasks would run without no-new-privileges; tenancy.yaml services.withoutNoNewPrivileges allows it anyway`)
}

const serviceCreate: Handler = async (call) => {
  await serviceIdentity(call)
  await nameFree(call, 'service', str(bodyAt(call, 'Name')))
  await serviceReferences(call)
  await checkQuota(call, serviceUsage(call.body, await nodeCount(call)))
  noRoleLabels(call, ['TaskTemplate', 'ContainerSpec', 'Labels'])
  await serviceNoNewPrivileges(call)
  stamp(call, ['Labels'])
  stamp(call, ['TaskTemplate', 'ContainerSpec', 'Labels'])
}

const serviceUpdate: Handler = async (call) => {
  await serviceIdentity(call)
  const id = await own(call, 'service', call.params.id)
  call.setParam('id', id)
  await serviceReferences(call)
  await checkQuota(call, serviceUsage(call.body, await nodeCount(call)), { service: id })
  noRoleLabels(call, ['TaskTemplate', 'ContainerSpec', 'Labels'])
  await serviceNoNewPrivileges(call)
  stamp(call, ['Labels'])
  stamp(call, ['TaskTemplate', 'ContainerSpec', 'Labels'])
}

const taskList: Handler = async (call) => {
  const mine = new Set((await call.r.ownList('service', call.tenant)).map((s) => String(s.ID)))
  call.respond = { kind: 'json', transform: (body) => list(body).filter((t: any) => mine.has(t?.ServiceID)) }
  plainServiceImage(call, TASK_SPEC_IMAGE)
}

const SERVICE_SPEC_IMAGE = ['Spec', 'TaskTemplate', 'ContainerSpec'] as const
const TASK_SPEC_IMAGE = ['Spec', 'ContainerSpec'] as const

function swarmCreate (kind: 'secret' | 'config'): Handler {
  return async (call) => {
    await nameFree(call, kind, str(bodyAt(call, 'Name')))
    stamp(call, ['Labels'])
  }
}

function swarmUpdate (kind: 'secret' | 'config'): Handler {
  return async (call) => {
    call.setParam('id', await own(call, kind, call.params.id))
    stamp(call, ['Labels'])
  }
}

const swarmInspect: Handler = async (call) => {
  call.respond = { kind: 'json', transform: withoutJoinTokens }
}

/**
 * A tenant's swarm leave, unlock or unlock-key request: refused on a swarm
 * manager (`swarm-read-only`). An engine that is not a manager answers each of them with
 * an error and changes nothing, and docker-py's `leave_swarm(force=True)` counts on that
 * answer: the tenant gets it, read from the engine without sending it the change, so a
 * swarm initialised a moment later never receives a tenant's leave. Unlock and the
 * unlock key answer what `GET /swarm` answers there (moby `lockedManagerAction` and
 * `UnlockSwarm` return the same `errNoManager`); Podman's
 * `404` to the whole swarm API likewise. Leave, on an engine in no swarm at all, answers
 * moby's `errNoSwarm` (daemon/cluster/errors.go), which no read-only request returns.
 */
function swarmChange (leave: boolean): Handler {
  return async (call) => {
    const swarm = await call.r.probe('/swarm')
    const notManager = swarm.status === 503 && /^This node is not a swarm manager\./.test(String(swarm.body?.message))
    if (swarm.status === 404) {
      call.answer = { status: swarm.status, body: swarm.body }
      return
    }
    if (leave && notManager) {
      const info = await call.r.probe('/info')
      if (info.status === 200 && info.body?.Swarm?.LocalNodeState === 'inactive') {
        call.answer = { status: 503, body: { message: 'This node is not part of a swarm' } }
        return
      }
    } else if (notManager) {
      call.answer = { status: swarm.status, body: swarm.body }
      return
    }
    throw refuse('swarm-read-only', 'the swarm is read-only for tenants')
  }
}

// ---------------------------------------------------------------------------------
// System

const systemAuth: Handler = async (call) => {
  const server = str(bodyAt(call, 'serveraddress')) || 'docker.io'
  const registry = server.replace(/^https?:\/\//, '').replace(/\/.*$/, '').replace(/^(index\.)?docker\.io$|^registry-1\.docker\.io$/, 'docker.io')
  if (!tenantRegistry(call, registry)) throw registryNotAllowed(call, registry, 'login to')
  const held = call.credentials.get(call.tenant, registry)
  if (held) {
    for (const k of ['username', 'password', 'identitytoken'] as const) {
      if (held[k] !== undefined) call.setBody([k], held[k])
    }
    // A registry with an OAuth token server answers the engine's login with a refresh token,
    // which the engine returns as IdentityToken: a credential of the gateway's, not the tenant's.
    call.respond = { kind: 'json', transform: (b) => (b !== null && typeof b === 'object' && 'IdentityToken' in b ? { ...b, IdentityToken: '' } : b) }
  } else if (call.settings.registries.tenantCredentials === 'strip') {
    throw refuse('registry-credentials', `the gateway holds no credentials of tenant ${call.tenant} for ${registry}, and tenants' own credentials are not used`)
  }
}

const systemInfo: Handler = async (call) => { call.respond = { kind: 'json', transform: (b) => filterInfo(call, b) } }
const systemDf: Handler = async (call) => {
  call.respond = {
    kind: 'json',
    transform: async (b) => {
      const df: any = await filterDataUsage(call, b)
      return {
        ...df,
        Containers: list(df.Containers).map((c) => call.names.container(hideAll(c, [CONTAINER_LABELS]))),
        Images: list(df.Images).map((i) => call.names.image(hideAll(i, [IMAGE_LABELS]))),
        Volumes: list(df.Volumes).map((v) => call.names.volume(hideAll(v, [VOLUME_LABELS]))),
      }
    },
  }
}
const systemEvents: Handler = async (call) => {
  eventNameFilters(call)
  call.respond = { kind: 'lines', keep: filterEvents(call), ...(call.names.private ? { view: (ev: any) => call.names.event(ev) } : {}) }
}

/**
 * An events filter naming a container, network or volume matches the actor's id or its
 * name (moby events Filter): under per-tenant names the qualified name is added beside
 * each value the tenant gave (which still matches ids and id prefixes).
 */
function eventNameFilters (call: Call): void {
  if (!call.names.private) return
  const filters = parseFilters(call.query)
  let changed = false
  for (const kind of ['container', 'network', 'volume'] as const) {
    const values = filters.get(kind)
    if (!values) continue
    const out = new Set(values)
    for (const v of values) out.add(call.names.qualify(kind, v))
    if (out.size !== values.size) { filters.set(kind, out); changed = true }
  }
  // Per-tenant image names: `image=myapp` matches the tenant's own image's events by its engine name.
  const images = filters.get('image')
  if (images && call.names.privateImages) {
    const out = new Set(images)
    for (const v of images) {
      const q = call.names.qualifyImage(v)
      if (q !== null) out.add(q)
    }
    if (out.size !== images.size) { filters.set('image', out); changed = true }
  }
  if (changed) call.setQuery('filters', serializeFilters(filters))
}

/** A container's stats (`name`), one document or a stream of them, in the tenant's names. */
const containerStats: Handler = async (call) => {
  await owned('container')(call)
  if (call.names.private) call.respond = { kind: 'lines', keep: async () => true, view: (s: any) => call.names.stats(s) }
}

const distributionInspect: Handler = async (call) => {
  const parsed = parseImageRef(call.params.name)
  if (!parsed) throw new GatewayError('BODY_INVALID', `invalid reference format: ${JSON.stringify(call.params.name)}`)
  registryAuth(call, parsed.registry, 'inspecting')
}

// ---------------------------------------------------------------------------------

/**
 * Podman's Docker-compatible secret list takes no `label` filter (`500 invalid filter
 * "label"`) and lists secrets without their labels (measured, 4.3): the gateway asks for
 * the list as the tenant did and keeps the tenant's own, each looked up by its id.
 */
const dockerSecretList = labelFiltered(keepOwn((s) => s?.Spec?.Labels, { at: ['Spec', 'Labels'] }))
const secretList: Handler = async (call) => {
  if (await call.r.engine() !== 'podman') return await dockerSecretList(call)
  call.respond = {
    kind: 'json',
    transform: async (body) => {
      const own: unknown[] = []
      for (const s of list(body)) if ((await call.r.secret(str(s?.ID), call.tenant)).state === 'own') own.push(s)
      return own
    },
  }
}

const NOT_TENANT = 'engine-wide'

export const handlers: Readonly<Record<string, Handler>> = {
  // Containers
  ContainerList: plainList('container', labelFiltered(keepOwn((c) => c?.Labels, { hide: CONTAINER_LABELS, at: ['Labels'] }))),
  ContainerCreate: containerCreate,
  ContainerInspect: containerInspect,
  ContainerTop: containerTop,
  ContainerLogs: owned('container'),
  ContainerChanges: owned('container'),
  ContainerExport: owned('container'),
  ContainerStats: containerStats,
  ContainerResize: owned('container'),
  ContainerStart: containerStart,
  ContainerStop: owned('container'),
  ContainerRestart: remounting(owned('container')),
  ContainerKill: owned('container'),
  ContainerUpdate: containerUpdate,
  ContainerRename: containerRename,
  ContainerPause: owned('container'),
  ContainerUnpause: owned('container'),
  ContainerAttach: owned('container'),
  ContainerAttachWebsocket: owned('container'),
  ContainerWait: owned('container'),
  ContainerDelete: containerDelete,
  ContainerArchiveInfo: remounting(owned('container')),
  ContainerArchive: remounting(owned('container')),
  PutContainerArchive: remounting(owned('container')),
  ContainerPrune: labelFiltered(),
  ContainerExec: containerExec,
  // CRIU checkpoints (experimental engines): create and list take a host directory
  // (`CheckpointDir`, `?dir=`) where the engine writes or reads the container's memory.
  CheckpointList: denied('no-checkpoints', 'checkpoints name directories on the engine\'s host'),
  CheckpointCreate: denied('no-checkpoints', 'checkpoints name directories on the engine\'s host'),
  CheckpointDelete: denied('no-checkpoints', 'checkpoints name directories on the engine\'s host'),
  // Exec
  ExecStart: owned('exec'),
  ExecResize: owned('exec'),
  ExecInspect: owned('exec'),
  // Images
  ImageList: imageList,
  ImageBuild: imageBuild,
  BuildPrune: buildPrune,
  // A build is named by the random id its client chose (`?buildid=` of the build, `?id=` here):
  // only that client knows it.
  BuildCancel: open,
  ImageCreate: imagePull,
  ImageInspect: imageInspect,
  ImageAttestations: async (call) => { await pathImage(call) },
  ImageHistory: async (call) => {
    await pathImage(call)
    if (call.names.privateImages) call.viewAnswer((b) => historyView(call, b))
  },
  ImagePush: imagePush,
  ImageTag: imageTag,
  ImageDelete: imageDelete,
  ImageSearch: open,
  ImagePrune: labelFiltered((call) => { if (call.names.privateImages) call.viewAnswer((b) => untaggedPlain(call, b, true)) }),
  ImageCommit: imageCommit,
  ImageGet: async (call) => { await pathImage(call) },
  ImageGetAll: imageGetAll,
  ImageLoad: imageLoad,
  // System
  SystemAuth: systemAuth,
  SystemInfo: systemInfo,
  SystemVersion: open,
  SystemPing: open,
  SystemPingHead: open,
  SystemEvents: systemEvents,
  SystemDataUsage: systemDf,
  // Volumes
  VolumeList: plainList('volume', labelFiltered(keepOwn((v) => v?.Labels, { wrap: 'Volumes', hide: VOLUME_LABELS, at: ['Labels'] })), 'Volumes'),
  VolumeCreate: volumeCreate,
  VolumeInspect: volumeInspect,
  VolumeUpdate: owned('volume', 'name'),
  VolumeDelete: owned('volume', 'name'),
  VolumePrune: prunedNames('volume', 'VolumesDeleted', volumePrune),
  // Networks
  NetworkList: plainList('network', networkList),
  NetworkInspect: networkInspect,
  NetworkDelete: owned('network'),
  NetworkCreate: networkCreate,
  NetworkConnect: networkConnect,
  NetworkDisconnect: networkConnect,
  // The tenant's default network is its `bridge`, which a prune never removes.
  NetworkPrune: prunedNames('network', 'NetworksDeleted', labelFiltered((call) => {
    const f = parseFilters(call.query)
    f.set('label!', new Set([...(f.get('label!') ?? []), DEFAULT_NETWORK_LABEL]))
    call.setQuery('filters', serializeFilters(f))
  })),
  // Plugins
  // Plugins are engine-wide: a tenant has none (so that `docker inspect NAME` still
  // answers "no such object" after trying every kind), and may not manage any.
  PluginList: async (call) => { call.respond = { kind: 'json', transform: () => [] } },
  GetPluginPrivileges: denied('no-plugins', NOT_TENANT),
  PluginPull: denied('no-plugins', NOT_TENANT),
  PluginInspect: async (call) => { throw new TenancyRefusal('NOT_FOUND', `plugin ${JSON.stringify(call.params.name)} not found`, 'no-plugins') },
  PluginDelete: denied('no-plugins', NOT_TENANT),
  PluginEnable: denied('no-plugins', NOT_TENANT),
  PluginDisable: denied('no-plugins', NOT_TENANT),
  // The gateway's policy admin API is for admins only (the policy denies it first).
  PortcullisPolicyList: denied('policy-admin-only', 'the policy admin API is for admins'),
  PortcullisPolicyAdd: denied('policy-admin-only', 'the policy admin API is for admins'),
  PortcullisPolicyRemove: denied('policy-admin-only', 'the policy admin API is for admins'),
  PluginUpgrade: denied('no-plugins', NOT_TENANT),
  PluginCreate: denied('no-plugins', NOT_TENANT),
  PluginPush: denied('no-plugins', NOT_TENANT),
  PluginSet: denied('no-plugins', NOT_TENANT),
  // Swarm
  NodeList: open,
  NodeInspect: open,
  NodeDelete: denied('swarm-read-only', 'nodes are read-only for tenants'),
  NodeUpdate: denied('swarm-read-only', 'nodes are read-only for tenants'),
  SwarmInspect: swarmInspect,
  SwarmInit: denied('swarm-read-only', 'the swarm is read-only for tenants'),
  SwarmJoin: denied('swarm-read-only', 'the swarm is read-only for tenants'),
  SwarmLeave: swarmChange(true),
  SwarmUpdate: denied('swarm-read-only', 'the swarm is read-only for tenants'),
  SwarmUnlockkey: swarmChange(false),
  SwarmUnlock: swarmChange(false),
  ServiceList: async (call) => {
    await labelFiltered(keepOwn((s) => s?.Spec?.Labels, { at: ['Spec', 'Labels'] }))(call)
    plainServiceImage(call, SERVICE_SPEC_IMAGE)
  },
  ServiceCreate: serviceCreate,
  ServiceInspect: async (call) => {
    await owned('service')(call)
    plainServiceImage(call, SERVICE_SPEC_IMAGE)
  },
  ServiceDelete: owned('service'),
  ServiceUpdate: serviceUpdate,
  ServiceLogs: owned('service'),
  TaskList: taskList,
  TaskInspect: async (call) => {
    await owned('task')(call)
    plainServiceImage(call, TASK_SPEC_IMAGE)
  },
  TaskLogs: owned('task'),
  SecretList: secretList,
  SecretCreate: swarmCreate('secret'),
  SecretInspect: owned('secret'),
  SecretDelete: owned('secret'),
  SecretUpdate: swarmUpdate('secret'),
  ConfigList: labelFiltered(keepOwn((s) => s?.Spec?.Labels, { at: ['Spec', 'Labels'] })),
  ConfigCreate: swarmCreate('config'),
  ConfigInspect: owned('config'),
  ConfigDelete: owned('config'),
  ConfigUpdate: swarmUpdate('config'),
  // Distribution and BuildKit
  DistributionInspect: distributionInspect,
  // The session only serves the build it belongs to; the build itself is judged above.
  Session: async (call) => {
    if (!call.settings.builds.buildkit) throw refuse('build-buildkit', 'BuildKit sessions are not available to tenants unless tenancy.yaml allows them (builds.buildkit)')
  },
  Grpc: denied('no-buildkit-grpc', 'BuildKit\'s direct gRPC control (buildx) names images and outputs the gateway cannot inspect; use docker build'),
  // Podman's own API (libpod.ts), scoped with the same building blocks
  ...libpodHandlers({ own, owned, denied, open, labelFiltered, keepOwn, hidden, hideAll, stamp, nameFree, nameTaken, ownOrSharedNetwork, networkRef, mustBeInNamespace, registryAuth, volumePrune }),
}
