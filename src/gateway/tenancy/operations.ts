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
import { registryAllowed } from '../../policy/tenancy'
import { GatewayError } from '../errors'
import { inOrder, list, missing, num, refuse, str, type Call } from './call'
import { parseFilters, serializeFilters, withLabel } from './filters'
import { familiar, inNamespace, looksLikeImageId, parseImageRef } from './images'
import { isPredefinedNetwork, ownerOf, PREDEFINED_NETWORKS, SUBJECT_LABEL, TENANT_LABEL, type ObjectKind, type Resolution } from './lookup'
import { checkQuota, checkVolumeQuota, cpuOf, nodeCount, serviceUsage } from './quota'
import { filterDataUsage, filterEvents, filterInfo } from './responses'
import { libpodHandlers } from './libpod'

export type Handler = (call: Call) => Promise<void>


// ---------------------------------------------------------------------------------
// Building blocks

export type Resolvable = Exclude<ObjectKind, 'image'>

async function resolve (call: Call, kind: Resolvable, ref: string): Promise<Resolution> {
  switch (kind) {
    case 'container': return call.r.container(ref, call.tenant)
    case 'volume': return call.r.volume(ref, call.tenant)
    case 'network': return call.r.network(ref, call.tenant)
    case 'exec': return call.r.exec(ref, call.tenant)
    case 'service': return call.r.service(ref, call.tenant)
    case 'task': return call.r.task(ref, call.tenant)
    case 'secret': return call.r.secret(ref, call.tenant)
    case 'config': return call.r.config(ref, call.tenant)
  }
}

/** The object a reference names must be the tenant's own; answers as missing otherwise. Returns its full id. */
async function own (call: Call, kind: Resolvable, ref: string, where: 'path' | 'body' | 'link' | 'endpoint' = 'path'): Promise<string> {
  const res = await resolve(call, kind, ref)
  if (res.state !== 'own') throw missing(kind, ref, call.op.id, where)
  return res.id
}

/** The path parameter names one of the tenant's objects: checked, then sent as its full id. */
function owned (kind: Resolvable, param = 'id'): Handler {
  return async (call) => {
    const id = await own(call, kind, call.params[param])
    if (kind !== 'volume') call.setParam(param, id)
  }
}

function denied (rule: string, why: string): Handler {
  return async (call) => { throw refuse(rule, `${call.op.id} is not available to tenants: ${why}`) }
}

/** Operations that touch no tenant's objects. */
const open: Handler = async () => {}

/** Lists and prunes: the engine applies the owner-label filter (ANDed with the client's). */
function labelFiltered (then?: (call: Call) => void): Handler {
  return async (call) => {
    call.setQuery('filters', serializeFilters(withLabel(parseFilters(call.query), `${TENANT_LABEL}=${call.tenant}`)))
    then?.(call)
  }
}

/** And the answer is checked again, whatever the engine did with the filter. */
function keepOwn (labels: (o: any) => unknown, wrap?: 'Volumes'): (call: Call) => void {
  return (call) => {
    call.respond = {
      kind: 'json',
      transform: (body) => {
        const keep = (o: any): boolean => ownerOf(labels(o) as Record<string, string>) === call.tenant
        if (wrap) return { ...body, [wrap]: list(body?.[wrap]).filter(keep) }
        return list(body).filter(keep)
      },
    }
  }
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
  const holder = await call.r.nameHolder(kind, name.replace(/^\//, ''))
  if (holder === undefined || holder === call.tenant) return
  throw nameTaken(kind, name.replace(/^\//, ''), call.tenant)
}

function nameTaken (kind: string, name: string, tenant: string): GatewayError {
  return Object.assign(new GatewayError('CONFLICT', `the ${kind} name "${name}" is already in use on this engine by another tenant or the administrator: ${kind} names are shared by all tenants of one engine, choose another (for example prefixed with your tenant: ${tenant}-${name})`), { tenancyRule: 'tenant-names' })
}

// ---------------------------------------------------------------------------------
// Containers

const CONTAINER_REF_MODES = ['NetworkMode', 'PidMode', 'IpcMode', 'UTSMode', 'UsernsMode', 'CgroupnsMode'] as const

/** Every object a container's configuration names: volumes-from, links, container: modes, networks, named volumes, the image. */
async function containerReferences (call: Call, hc: any, networking: any, image: unknown): Promise<{ newVolumes: string[] }> {
  for (const v of list(hc?.VolumesFrom)) await own(call, 'container', str(v).split(':')[0], 'body')
  for (const l of list(hc?.Links)) await own(call, 'container', str(l).split(':')[0], 'link')
  for (const mode of CONTAINER_REF_MODES) {
    const v = str(hc?.[mode])
    if (v.startsWith('container:')) await own(call, 'container', v.slice('container:'.length), 'body')
  }
  const netMode = str(hc?.NetworkMode)
  if (netMode && !netMode.startsWith('container:') && !['default', 'bridge', 'host', 'none'].includes(netMode)) await ownOrSharedNetwork(call, netMode, 'body')
  for (const [net, ep] of Object.entries(networking?.EndpointsConfig ?? {})) {
    if (!['default', 'bridge', 'host', 'none'].includes(net)) await ownOrSharedNetwork(call, net, 'body')
    for (const l of list((ep as any)?.Links)) await own(call, 'container', str(l).split(':')[0], 'body')
  }
  // Named volumes: the tenant's own, or new ones the gateway creates with owner labels.
  const named = new Set<string>()
  for (const b of list(hc?.Binds)) {
    const src = str(b).split(':')[0]
    if (src && !src.startsWith('/')) named.add(src)
  }
  for (const m of list(hc?.Mounts)) {
    if (str((m as any)?.Type) === 'volume' && str((m as any)?.Source)) named.add(str((m as any).Source))
  }
  const newVolumes: string[] = []
  for (const name of named) {
    const res = await call.r.volume(name, call.tenant)
    if (res.state === 'own') continue
    if (await call.r.volumeExists(name)) throw nameTaken('volume', name, call.tenant)
    newVolumes.push(name)
  }
  if (typeof image === 'string' && image) await visibleImage(call, image)
  return { newVolumes }
}

export type Found = Exclude<Resolution, { state: 'missing' }>

async function ownOrSharedNetwork (call: Call, ref: string, where: 'path' | 'body' = 'path'): Promise<Found> {
  const res = await call.r.network(ref, call.tenant)
  if (res.state === 'missing') throw missing('network', ref, call.op.id, where)
  return res
}

const containerCreate: Handler = async (call) => {
  const name = call.query.get('name') ?? ''
  const hc = bodyAt(call, 'HostConfig')
  // Reads only, each its own engine round trip: run together.
  const [, { newVolumes }] = await inOrder([
    nameFree(call, 'container', name),
    containerReferences(call, hc, bodyAt(call, 'NetworkingConfig'), bodyAt(call, 'Image')),
    checkQuota(call, { containers: 1, memory: num(hc?.Memory), nanoCpus: cpuOf(hc) }),
  ] as const)
  await checkVolumeQuota(call, newVolumes.length)
  stamp(call, ['Labels'])
  // Named volumes the engine would create implicitly (without labels) are created first, owned.
  for (const v of newVolumes) {
    const r = await call.r.create('/volumes/create', { Name: v, Labels: { [TENANT_LABEL]: call.tenant, [SUBJECT_LABEL]: call.subject } })
    if (r.status >= 300) throw new GatewayError('CONFLICT', `cannot create volume ${v} for the container: ${str((r.body as any)?.message)}`)
  }
}

const containerUpdate: Handler = async (call) => {
  const id = await own(call, 'container', call.params.id)
  call.setParam('id', id)
  const b = call.body ?? {}
  const changesMemory = num(b.Memory) > 0
  const changesCpu = cpuOf(b) > 0
  if (!changesMemory && !changesCpu) return
  const current = (await call.r.get(`/containers/${id}/json`)).body?.HostConfig ?? {}
  await checkQuota(call, { containers: 0, memory: changesMemory ? num(b.Memory) : num(current.Memory), nanoCpus: changesCpu ? cpuOf(b) : cpuOf(current) }, { container: id })
}

const containerRename: Handler = async (call) => {
  call.setParam('id', await own(call, 'container', call.params.id))
  await nameFree(call, 'container', call.query.get('name') ?? '')
}

// ---------------------------------------------------------------------------------
// Images: a shared catalog; tags and pushes in the tenant's namespace

async function visibleImage (call: Call, ref: string): Promise<Found> {
  const res = await call.r.image(ref, call.tenant)
  if (res.state === 'missing' || res.state === 'foreign') throw missing('image', ref, call.op.id)
  return res
}

function mustBeInNamespace (call: Call, ref: string, what: string): void {
  const parsed = parseImageRef(ref)
  if (!parsed || !inNamespace(parsed, call.namespace)) {
    throw refuse('image-namespace', `${what} ${JSON.stringify(ref)} is outside tenant ${call.tenant}'s namespace: use ${call.namespace}/NAME[:TAG] (or REGISTRY/${call.namespace}/NAME[:TAG])`)
  }
}

/** Registry credentials: the gateway's for this tenant and registry; the tenant's own only where policy allows. */
function registryAuth (call: Call, registry: string, what: string): void {
  if (!registryAllowed(call.settings, registry)) throw refuse('registry-not-allowed', `${what} from or to registry ${registry} is not allowed for tenant ${call.tenant}`)
  const held = call.credentials.get(call.tenant, registry)
  if (held || call.settings.registries.tenantCredentials === 'strip' || call.clientRegistryAuth === undefined) {
    call.setHeaders['x-registry-auth'] = call.credentials.header(held, registry)
  }
}

const imagePull: Handler = async (call) => {
  const from = call.query.get('fromImage') ?? ''
  const src = call.query.get('fromSrc')
  if (src !== null) {
    if (src !== '-') throw refuse('image-import-url', 'importing an image from a URL makes the engine fetch it: not available to tenants')
    mustBeInNamespace(call, `${call.query.get('repo') ?? ''}${call.query.get('tag') ? ':' + call.query.get('tag') : ''}`, 'imported image')
    return
  }
  const parsed = parseImageRef(from)
  if (!parsed) throw new GatewayError('BODY_INVALID', `invalid reference format: ${JSON.stringify(from)}`)
  registryAuth(call, parsed.registry, 'pulling')
}

const imagePush: Handler = async (call) => {
  const name = call.params.name
  const ref = call.query.get('tag') ? `${name}:${call.query.get('tag')}` : name
  mustBeInNamespace(call, ref, 'pushed image')
  await visibleImage(call, ref)
  registryAuth(call, parseImageRef(ref)!.registry, 'pushing')
}

const imageTag: Handler = async (call) => {
  await visibleImage(call, call.params.name)
  const repo = call.query.get('repo') ?? ''
  mustBeInNamespace(call, repo + (call.query.get('tag') ? ':' + call.query.get('tag') : ''), 'tag')
}

const imageDelete: Handler = async (call) => {
  const ref = call.params.name
  const res = await visibleImage(call, ref)
  const parsed = looksLikeImageId(ref) ? null : parseImageRef(ref)
  const ownTag = parsed !== null && inNamespace(parsed, call.namespace)
  if (!ownTag && res.state !== 'own') {
    throw refuse('image-shared', `image ${familiar(ref)} belongs to the shared catalog; tenant ${call.tenant} may remove only images it built or committed, and tags in its namespace ${call.namespace}/`)
  }
}

const imageBuild: Handler = async (call) => {
  for (const t of call.query.getAll('t')) mustBeInNamespace(call, t, 'build tag')
  const remote = call.query.get('remote')
  if (remote && (/^[a-z][a-z0-9+.-]*:\/\//i.test(remote) || remote.startsWith('git@'))) {
    throw refuse('build-remote', 'building from a remote URL makes the engine fetch it: not available to tenants (send the context)')
  }
  for (const ref of parseJsonList(call, 'cachefrom')) await visibleImage(call, ref)
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
  }
  call.setQuery('labels', JSON.stringify({ ...labels, [TENANT_LABEL]: call.tenant, [SUBJECT_LABEL]: call.subject }))
  call.patch.push({ op: 'add', path: '/query/labels', value: { [TENANT_LABEL]: call.tenant, [SUBJECT_LABEL]: call.subject } })
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
  if (repo) mustBeInNamespace(call, repo + (call.query.get('tag') ? ':' + call.query.get('tag') : ''), 'committed image')
  for (const c of call.query.getAll('changes')) {
    if (/io\.portcullis\./i.test(c)) throw refuse('owner-labels', 'commit changes must not set io.portcullis.* labels')
  }
  stamp(call, ['Labels'])
}

const imageList: Handler = async (call) => {
  call.respond = { kind: 'json', transform: (body) => list(body).filter((i: any) => [null, call.tenant].includes(ownerOf(i?.Labels))) }
}

const imageGetAll: Handler = async (call) => {
  for (const n of call.query.getAll('names')) await visibleImage(call, n)
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
    call.respond = { kind: 'json', transform: (b) => ({ ...b, Containers: Object.fromEntries(Object.entries(b?.Containers ?? {}).filter(([id]) => mine.has(id))) }) }
  }
}

const networkConnect: Handler = async (call) => {
  const res = await ownOrSharedNetwork(call, call.params.id)
  call.setParam('id', networkRef(call, res, call.params.id))
  const c = str(bodyAt(call, 'Container'))
  // The engine answers a missing container to connect or disconnect with its 404.
  const forced = call.op.id === 'NetworkDisconnect' && bodyAt(call, 'Force') === true
  const id = await own(call, 'container', c, forced ? 'endpoint' : 'path')
  if (id !== c) call.setBody(['Container'], id)
  for (const l of list(bodyAt(call, 'EndpointConfig', 'Links'))) await own(call, 'container', str(l).split(':')[0], 'body')
}

const networkCreate: Handler = async (call) => {
  const name = str(bodyAt(call, 'Name'))
  if (PREDEFINED_NETWORKS.has(name)) throw refuse('tenant-names', `${name} is a predefined network`)
  await nameFree(call, 'network', name)
  stamp(call, ['Labels'])
}

const networkList: Handler = async (call) => {
  const engine = await call.r.engine()
  call.respond = { kind: 'json', transform: (body) => list(body).filter((n: any) => ownerOf(n?.Labels) === call.tenant || (ownerOf(n?.Labels) === null && isPredefinedNetwork(n?.Name, engine) && n?.Scope === 'local')) }
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
  const name = str(bodyAt(call, 'Name'))
  if (name) {
    const res = await call.r.volume(name, call.tenant)
    // The engine answers a create of an existing volume with that volume: not another tenant's.
    if (res.state !== 'own' && await call.r.volumeExists(name)) throw nameTaken('volume', name, call.tenant)
    if (res.state === 'own') return stamp(call, ['Labels'])
  }
  await checkVolumeQuota(call, 1)
  stamp(call, ['Labels'])
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
  for (const n of [...list(bodyAt(call, 'TaskTemplate', 'Networks')), ...list(bodyAt(call, 'Networks'))]) {
    const target = str((n as any)?.Target)
    if (target) await own(call, 'network', target, 'body')
  }
  for (const m of list(cs?.Mounts)) {
    if (str((m as any)?.Type) === 'volume' && str((m as any)?.Source)) {
      const src = str((m as any).Source)
      if ((await call.r.volume(src, call.tenant)).state !== 'own') throw missing('volume', src, call.op.id, 'body')
    }
  }
  // The image: another tenant's private image is refused as missing; one not on the
  // engine yet is pulled by the swarm (from a registry, with the request's credentials).
  const image = str(cs?.Image)
  if (image && (await call.r.image(image, call.tenant)).state === 'foreign') throw missing('image', image, call.op.id, 'body')
  // The swarm pulls the image with the request's X-Registry-Auth: the gateway's credentials.
  const parsed = image ? parseImageRef(image) : null
  if (parsed) registryAuth(call, parsed.registry, 'pulling the service image')
}

const serviceCreate: Handler = async (call) => {
  await nameFree(call, 'service', str(bodyAt(call, 'Name')))
  await serviceReferences(call)
  await checkQuota(call, serviceUsage(call.body, await nodeCount(call)))
  stamp(call, ['Labels'])
  stamp(call, ['TaskTemplate', 'ContainerSpec', 'Labels'])
}

const serviceUpdate: Handler = async (call) => {
  const id = await own(call, 'service', call.params.id)
  call.setParam('id', id)
  await serviceReferences(call)
  await checkQuota(call, serviceUsage(call.body, await nodeCount(call)), { service: id })
  stamp(call, ['Labels'])
  stamp(call, ['TaskTemplate', 'ContainerSpec', 'Labels'])
}

const taskList: Handler = async (call) => {
  const mine = new Set((await call.r.ownList('service', call.tenant)).map((s) => String(s.ID)))
  call.respond = { kind: 'json', transform: (body) => list(body).filter((t: any) => mine.has(t?.ServiceID)) }
}

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
  call.respond = { kind: 'json', transform: (b) => ({ ...b, JoinTokens: { Worker: '', Manager: '' } }) }
}

// ---------------------------------------------------------------------------------
// System

const systemAuth: Handler = async (call) => {
  const server = str(bodyAt(call, 'serveraddress')) || 'docker.io'
  const registry = server.replace(/^https?:\/\//, '').replace(/\/.*$/, '').replace(/^(index\.)?docker\.io$|^registry-1\.docker\.io$/, 'docker.io')
  if (!registryAllowed(call.settings, registry)) throw refuse('registry-not-allowed', `login to registry ${registry} is not allowed for tenant ${call.tenant}`)
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
const systemDf: Handler = async (call) => { call.respond = { kind: 'json', transform: (b) => filterDataUsage(call, b) } }
const systemEvents: Handler = async (call) => { call.respond = { kind: 'lines', keep: filterEvents(call) } }

const distributionInspect: Handler = async (call) => {
  const parsed = parseImageRef(call.params.name)
  if (!parsed) throw new GatewayError('BODY_INVALID', `invalid reference format: ${JSON.stringify(call.params.name)}`)
  registryAuth(call, parsed.registry, 'inspecting')
}

// ---------------------------------------------------------------------------------

const NOT_TENANT = 'engine-wide'

export const handlers: Readonly<Record<string, Handler>> = {
  // Containers
  ContainerList: labelFiltered(keepOwn((c) => c?.Labels)),
  ContainerCreate: containerCreate,
  ContainerInspect: owned('container'),
  ContainerTop: owned('container'),
  ContainerLogs: owned('container'),
  ContainerChanges: owned('container'),
  ContainerExport: owned('container'),
  ContainerStats: owned('container'),
  ContainerResize: owned('container'),
  ContainerStart: owned('container'),
  ContainerStop: owned('container'),
  ContainerRestart: owned('container'),
  ContainerKill: owned('container'),
  ContainerUpdate: containerUpdate,
  ContainerRename: containerRename,
  ContainerPause: owned('container'),
  ContainerUnpause: owned('container'),
  ContainerAttach: owned('container'),
  ContainerAttachWebsocket: owned('container'),
  ContainerWait: owned('container'),
  ContainerDelete: owned('container'),
  ContainerArchiveInfo: owned('container'),
  ContainerArchive: owned('container'),
  PutContainerArchive: owned('container'),
  ContainerPrune: labelFiltered(),
  ContainerExec: owned('container'),
  // Exec
  ExecStart: owned('exec'),
  ExecResize: owned('exec'),
  ExecInspect: owned('exec'),
  // Images
  ImageList: imageList,
  ImageBuild: imageBuild,
  BuildPrune: denied('no-build-prune', 'the build cache is shared and carries no owner'),
  ImageCreate: imagePull,
  ImageInspect: async (call) => { await visibleImage(call, call.params.name) },
  ImageAttestations: async (call) => { await visibleImage(call, call.params.name) },
  ImageHistory: async (call) => { await visibleImage(call, call.params.name) },
  ImagePush: imagePush,
  ImageTag: imageTag,
  ImageDelete: imageDelete,
  ImageSearch: open,
  ImagePrune: labelFiltered(),
  ImageCommit: imageCommit,
  ImageGet: async (call) => { await visibleImage(call, call.params.name) },
  ImageGetAll: imageGetAll,
  ImageLoad: denied('no-image-load', 'a loaded archive can replace any tag of the shared catalog'),
  // System
  SystemAuth: systemAuth,
  SystemInfo: systemInfo,
  SystemVersion: open,
  SystemPing: open,
  SystemPingHead: open,
  SystemEvents: systemEvents,
  SystemDataUsage: systemDf,
  // Volumes
  VolumeList: labelFiltered(keepOwn((v) => v?.Labels, 'Volumes')),
  VolumeCreate: volumeCreate,
  VolumeInspect: owned('volume', 'name'),
  VolumeUpdate: owned('volume', 'name'),
  VolumeDelete: owned('volume', 'name'),
  VolumePrune: volumePrune,
  // Networks
  NetworkList: networkList,
  NetworkInspect: networkInspect,
  NetworkDelete: owned('network'),
  NetworkCreate: networkCreate,
  NetworkConnect: networkConnect,
  NetworkDisconnect: networkConnect,
  NetworkPrune: labelFiltered(),
  // Plugins
  // Plugins are engine-wide: a tenant has none (so that `docker inspect NAME` still
  // answers "no such object" after trying every kind), and may not manage any.
  PluginList: async (call) => { call.respond = { kind: 'json', transform: () => [] } },
  GetPluginPrivileges: denied('no-plugins', NOT_TENANT),
  PluginPull: denied('no-plugins', NOT_TENANT),
  PluginInspect: async (call) => { throw Object.assign(new GatewayError('NOT_FOUND', `plugin ${JSON.stringify(call.params.name)} not found`), { tenancyRule: 'no-plugins' }) },
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
  SwarmLeave: denied('swarm-read-only', 'the swarm is read-only for tenants'),
  SwarmUpdate: denied('swarm-read-only', 'the swarm is read-only for tenants'),
  SwarmUnlockkey: denied('swarm-read-only', 'the unlock key is the administrator\'s'),
  SwarmUnlock: denied('swarm-read-only', 'the swarm is read-only for tenants'),
  ServiceList: labelFiltered(keepOwn((s) => s?.Spec?.Labels)),
  ServiceCreate: serviceCreate,
  ServiceInspect: owned('service'),
  ServiceDelete: owned('service'),
  ServiceUpdate: serviceUpdate,
  ServiceLogs: owned('service'),
  TaskList: taskList,
  TaskInspect: owned('task'),
  TaskLogs: owned('task'),
  SecretList: labelFiltered(keepOwn((s) => s?.Spec?.Labels)),
  SecretCreate: swarmCreate('secret'),
  SecretInspect: owned('secret'),
  SecretDelete: owned('secret'),
  SecretUpdate: swarmUpdate('secret'),
  ConfigList: labelFiltered(keepOwn((s) => s?.Spec?.Labels)),
  ConfigCreate: swarmCreate('config'),
  ConfigInspect: owned('config'),
  ConfigDelete: owned('config'),
  ConfigUpdate: swarmUpdate('config'),
  // Distribution and BuildKit
  DistributionInspect: distributionInspect,
  Session: open,
  Grpc: denied('no-buildkit-grpc', 'BuildKit\'s direct gRPC control (buildx) names images and outputs the gateway cannot inspect; use docker build'),
  // Podman's own API (libpod.ts), scoped with the same building blocks
  ...libpodHandlers({ own, owned, denied, open, labelFiltered, keepOwn, stamp, nameFree, nameTaken, ownOrSharedNetwork, networkRef, mustBeInNamespace, registryAuth, volumePrune }),
}
