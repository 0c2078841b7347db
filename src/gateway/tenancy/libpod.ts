/**
 * What Podman's own API (src/api/catalog/libpod.ts) means for a tenant. A core
 * set is scoped exactly like its Docker-compatible counterpart: containers, exec,
 * images, volumes, networks, ping, version and events. Everything else (pods, secrets,
 * Kubernetes YAML, systemd units, checkpoints, mounts, image builds, loads, pushes,
 * system info, df and prune...) is refused for tenants, naming the rule; admins
 * (unscopedRoles) never reach this table. docs/podman.md lists both.
 *
 * The building blocks are operations.ts's, handed in by it (a function rather than an
 * import, so that the two modules do not load each other).
 */
import { GatewayError } from '../../api/errors'
import { bodySchemas, type BodyNode } from '../../api/body/schema'
import { TenancyRefusal } from './refusal'
import { list, missing, num, refuse, remounting, str, type Call, type Found, type Handler, type LabelsAt, type Resolvable } from './call'
import { checkQuota, checkVolumeQuota } from './quota'
import { inNamespace, looksLikeImageId, parseImageRef } from './images'
import { catalogued, isPredefinedNetwork, ownerOf, SUBJECT_LABEL, TENANT_LABEL, type Resolution } from './lookup'
import { podmanNoPod } from './podman'
import { filterEvents } from './responses'
import { scopeUser } from './users'

export interface Blocks {
  own (call: Call, kind: Resolvable, ref: string, where?: 'path' | 'body' | 'link' | 'endpoint'): Promise<string>
  owned (kind: Resolvable, param?: string): Handler
  denied (rule: string, why: string): Handler
  open: Handler
  labelFiltered (then?: (call: Call) => void): Handler
  keepOwn (labels: (o: any) => unknown, opts?: { hide?: LabelsAt }): (call: Call) => void
  hidden (call: Call, places: readonly LabelsAt[]): void
  hideAll<T> (doc: T, places: readonly LabelsAt[]): T
  stamp (call: Call, pointer: readonly string[]): void
  nameFree (call: Call, kind: 'container' | 'network', name: string): Promise<void>
  nameTaken (kind: string, name: string, tenant: string): GatewayError
  ownOrSharedNetwork (call: Call, ref: string, where?: 'path' | 'body'): Promise<Found>
  networkRef (call: Call, res: Found, ref: string): string
  mustBeInNamespace (call: Call, ref: string, what: string): void
  registryAuth (call: Call, registry: string, what: string): void
  volumePrune: Handler
}

/** The libpod API version of the gateway's own lookups: the oldest it accepts, which Podman 4 and 5 both serve. */
const LOOKUP = '/v4.0.0/libpod'

/**
 * Where Podman's own answers keep labels, and what it shows for none: a tenant sees its
 * objects without the owner labels, as through the Docker-compatible API (labels.ts).
 * A network without labels has no `labels` key at all: an absent value is left out.
 */
const CONTAINER_LIST: LabelsAt = { path: ['Labels'], empty: null }
const CONTAINER_INSPECT: LabelsAt = { path: ['Config', 'Labels'], empty: null }
const VOLUME: LabelsAt = { path: ['Labels'], empty: {} }
const NETWORK: LabelsAt = { path: ['labels'], empty: undefined as unknown as null }
const IMAGE_LIST: LabelsAt = { path: ['Labels'], empty: null }
const IMAGE_INSPECT: readonly LabelsAt[] = [{ path: ['Labels'], empty: null }, { path: ['Config', 'Labels'], empty: null }]

/**
 * The SpecGenerator fields a tenant may use (with Podman's spelling, as the body is
 * canonicalized against libpod-schema.ts). Each is either harmless or judged by the
 * policy's facts (libpod-facts.ts) and the reference checks below. Any other field
 * with a value is refused: a SpecGenerator has many ways to reach the host (rootfs,
 * conmon_pid_file, log paths, devices_from, cgroup_conf, pods, secrets, cni_networks,
 * annotations read by runtimes...), and Podman adds fields with every release.
 */
const TENANT_SPEC_FIELDS = new Set([
  'name', 'image', 'raw_image_name', 'command', 'entrypoint', 'env', 'envmerge', 'unsetenv', 'unsetenvall', 'terminal', 'stdin',
  'labels', 'stop_signal', 'stop_timeout', 'timeout', 'restart_policy', 'restart_tries', 'hostname', 'hostadd', 'remove',
  'containerCreateCommand', 'timezone', 'httpproxy', 'passwd_entry', 'group_entry', 'manage_password', 'sdnotifyMode', 'systemd', 'log_configuration',
  'annotations', 'idmappings', 'cgroups_mode', 'volatile',
  'work_dir', 'create_working_dir', 'image_volume_mode', 'init', 'shm_size', 'mounts', 'volumes', 'volumes_from', 'devices', 'device_cgroup_rule',
  'user', 'groups', 'cap_add', 'cap_drop', 'privileged', 'no_new_privileges', 'read_only_filesystem', 'read_write_tmpfs', 'umask',
  'selinux_opts', 'apparmor_profile', 'seccomp_policy', 'mask', 'unmask', 'oci_runtime', 'cgroup_parent', 'sysctl',
  'netns', 'pidns', 'ipcns', 'utsns', 'userns', 'cgroupns', 'Networks', 'portmappings', 'publish_image_ports', 'expose',
  'dns_server', 'dns_search', 'dns_option', 'use_image_hosts', 'use_image_resolve_conf',
  'resource_limits', 'r_limits', 'oom_score_adj', 'healthconfig', 'health_check_on_failure_action',
])
/**
 * Annotations a tenant may set: what podman-remote sends. Others can trigger OCI hooks
 * the host has installed (hooks.d matches annotations) or runtime features.
 */
const TENANT_ANNOTATIONS = new Set(['io.kubernetes.cri-o.TTY', 'io.podman.annotations.autoremove', 'io.podman.annotations.init'])
/** Of a log configuration, the driver and the size (no file of the host's choosing). */
const TENANT_LOG_FIELDS = new Set(['driver', 'size'])
const TENANT_RESOURCE_FIELDS = new Set(['memory', 'cpu', 'pids', 'devices'])
/** (`created` is sent by podman-remote and set by the server.) */
const TENANT_NETWORK_FIELDS = new Set(['name', 'created', 'driver', 'labels', 'internal', 'dns_enabled', 'ipv6_enabled', 'subnets', 'options'])
/** A bridge's options a tenant may set (not `mode`, `parent` or anything naming the host's interfaces). */
const TENANT_NETWORK_OPTIONS = new Set(['mtu', 'isolate', 'metric'])

/**
 * The part of a body's schema a tenant may use: the bodies a tenant's libpod create and
 * network create send on are re-encoded from these fields alone (call.knownFieldsOnly).
 * Another top-level field reaches this point only with its zero value (onlyFields
 * refuses the rest), which Podman reads as "not set"; inside, the schema lists every
 * field of Podman's structs (libpod-schema.ts), so what is dropped there Podman ignores.
 */
function tenantNode (op: string, allowed: ReadonlySet<string>): BodyNode {
  const node = bodySchemas.get(op)
  if (node?.t !== 'struct') throw new Error(`body schema: ${op} is not a struct`)
  const missingFields = [...allowed].filter((k) => !node.exact.has(k))
  if (missingFields.length) throw new Error(`body schema: ${op} lacks the tenant fields ${missingFields.join(', ')}`)
  const keep = <T>(m: ReadonlyMap<string, T>, key: (k: string, v: T) => string): Map<string, T> => new Map([...m].filter(([k, v]) => allowed.has(key(k, v))))
  return Object.freeze({ t: 'struct', fields: keep(node.fields, (_k, f: any) => f.name), exact: keep(node.exact, (k) => k) })
}
const TENANT_SPEC_NODE = tenantNode('ContainerCreateLibpod', TENANT_SPEC_FIELDS)
const TENANT_NETWORK_NODE = tenantNode('NetworkCreateLibpod', TENANT_NETWORK_FIELDS)

/** Go's zero values, all the way down: what Podman's clients send for "not set". */
function isZero (v: unknown): boolean {
  if (v === undefined || v === null || v === '' || v === false) return true
  if (Array.isArray(v)) return v.length === 0
  if (typeof v === 'object') return Object.values(v as object).every(isZero)
  return num(v) === 0 && /^-?0+(\.0*)?$/.test(String(v))
}

function onlyFields (call: Call, what: string, value: unknown, allowed: ReadonlySet<string>, rule: string): void {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return
  const extra = Object.entries(value).filter(([k, v]) => !allowed.has(k) && !isZero(v)).map(([k]) => k)
  if (extra.length) {
    throw refuse(rule, `${call.op.id}: ${what} ${extra.map((k) => JSON.stringify(k)).join(', ')} ${extra.length > 1 ? 'are' : 'is'} not available to tenants (docs/podman.md lists those that are)`)
  }
}

/**
 * The SpecGenerator values a tenant may give only as podman-remote sends them by
 * default: no user-namespace mappings of its own (the host's identity, as with
 * Docker), cgroups on (a container without cgroups escapes its limits and quota),
 * and the annotations above.
 */
function defaultsOnly (call: Call, spec: any): void {
  const ids = spec.idmappings
  if (!isZero(ids) && !(isZero(ids?.UIDMap) && isZero(ids?.GIDMap) && isZero(ids?.AutoUserNs) && isZero(ids?.AutoUserNsOpts))) {
    throw refuse('libpod-spec-fields', `${call.op.id}: idmappings other than the default are not available to tenants`)
  }
  if (!['', 'enabled'].includes(str(spec.cgroups_mode))) throw refuse('libpod-spec-fields', `${call.op.id}: cgroups_mode ${JSON.stringify(spec.cgroups_mode)} is not available to tenants`)
  const notes = Object.keys(spec.annotations ?? {}).filter((k) => !TENANT_ANNOTATIONS.has(k))
  if (notes.length) throw refuse('libpod-spec-fields', `${call.op.id}: annotations ${notes.map((k) => JSON.stringify(k)).join(', ')} are not available to tenants (annotations can set off the host's OCI hooks)`)
}

/** An image as Podman's own API resolves it (short names against local images, no docker.io default). */
async function libpodImage (call: Call, ref: string): Promise<Found> {
  if (ref === '') throw missing('image', ref, call.op.id)
  const r = await call.r.get(`${LOOKUP}/images/${ref.split('/').map(encodeURIComponent).join('/')}/json`)
  if (r.status !== 200) throw missing('image', ref, call.op.id)
  const owner = ownerOf(r.body?.Labels ?? r.body?.Config?.Labels)
  if (owner !== null && owner !== call.tenant) throw missing('image', ref, call.op.id)
  return { state: owner === null ? 'shared' : 'own', id: String(r.body?.Id) }
}

const visible: Handler = async (call) => { await libpodImage(call, call.params.name) }

export function libpodHandlers (b: Blocks): Record<string, Handler> {
  const adminOnly = (why: string): Handler => b.denied('libpod-admin-only', why)
  const ownedHidden = (kind: Resolvable, places: readonly LabelsAt[]): Handler => async (call) => {
    await b.owned(kind, 'name')(call)
    b.hidden(call, places)
  }
  const imageInspect: Handler = async (call) => {
    await visible(call)
    b.hidden(call, IMAGE_INSPECT)
  }

  /** Named volumes: the tenant's own, or new ones created first with owner labels (Podman would create them without). */
  async function namedVolumes (call: Call, spec: any): Promise<string[]> {
    const fresh: string[] = []
    for (const v of list(spec?.volumes)) {
      const name = str(v?.Name)
      if (!name) continue
      const res = await call.r.volume(name, call.tenant)
      if (res.state === 'own') continue
      if (await call.r.volumeExists(name)) throw b.nameTaken('volume', name, call.tenant)
      if (!fresh.includes(name)) fresh.push(name)
    }
    return fresh
  }

  const containerCreate: Handler = async (call) => {
    const spec = call.body ?? {}
    onlyFields(call, 'SpecGenerator fields', spec, TENANT_SPEC_FIELDS, 'libpod-spec-fields')
    onlyFields(call, 'log_configuration fields', spec.log_configuration, TENANT_LOG_FIELDS, 'libpod-spec-fields')
    onlyFields(call, 'resource_limits fields', spec.resource_limits, TENANT_RESOURCE_FIELDS, 'libpod-spec-fields')
    defaultsOnly(call, spec)
    call.knownFieldsOnly(TENANT_SPEC_NODE)
    // Podman's default cgroup namespace is containers.conf's, the host's on cgroup v1
    // (measured, 4.3): a tenant's container gets its own, as Docker-compatible creates do
    // on dockerd (rewrites.yaml). Other modes are judged by the policy (no-host-namespaces).
    if (['', 'default'].includes(str(spec.cgroupns?.nsmode)) && str(spec.cgroupns?.value) === '') call.setBody(['cgroupns'], { nsmode: 'private' })
    // Who it runs as, as for a Docker-compatible create (users.ts): SpecGenerator `user`, `groups`.
    await scopeUser(call, ['user'], ['groups'], 'user')
    await b.nameFree(call, 'container', str(spec.name))
    for (const v of list(spec.volumes_from)) await b.own(call, 'container', str(v).split(':')[0], 'body')
    for (const field of ['netns', 'pidns', 'ipcns', 'utsns', 'userns', 'cgroupns']) {
      const ns = spec[field]
      if (str(ns?.nsmode) === 'container') await b.own(call, 'container', str(ns?.value), 'body')
    }
    for (const net of Object.keys(spec.Networks ?? {})) await b.ownOrSharedNetwork(call, net, 'body')
    await libpodImage(call, str(spec.image))
    const fresh = await namedVolumes(call, spec)
    const cpu = spec.resource_limits?.cpu
    await checkQuota(call, {
      containers: 1,
      memory: num(spec.resource_limits?.memory?.limit),
      nanoCpus: num(cpu?.quota) && num(cpu?.period) ? Math.round(num(cpu.quota) * 1e9 / num(cpu.period)) : 0,
    })
    await checkVolumeQuota(call, fresh.length)
    b.stamp(call, ['labels'])
    // The created container counts from its answer on (as a Docker-compatible create does).
    call.respond = {
      kind: 'json',
      transform: (body) => {
        const id = str(body?.Id)
        if (/^[0-9a-f]{64}$/.test(id)) call.r.cache.containerEvent('create', id, { [TENANT_LABEL]: call.tenant })
        return body
      },
    }
    for (const v of fresh) {
      const r = await call.r.create('/volumes/create', { Name: v, Labels: { [TENANT_LABEL]: call.tenant, [SUBJECT_LABEL]: call.subject } })
      if (r.status >= 300) throw new GatewayError('CONFLICT', `cannot create volume ${v} for the container: ${str((r.body as any)?.message)}`)
    }
  }

  const containerRename: Handler = async (call) => {
    call.setParam('name', await b.own(call, 'container', call.params.name))
    await b.nameFree(call, 'container', call.query.get('name') ?? '')
  }

  /** Without containers named, Podman streams every container's stats: a tenant names its own. */
  const statsAll: Handler = async (call) => {
    const refs = call.query.getAll('containers')
    if (refs.length === 0) throw refuse('libpod-stats-all', 'ContainersStatsAllLibpod without `containers` reports every container on the engine: tenants name their own')
    const ids: string[] = []
    for (const r of refs) ids.push(await b.own(call, 'container', r))
    call.query.delete('containers')
    for (const id of ids) call.query.append('containers', id)
    call.queryChanged = true
  }

  const imageList: Handler = async (call) => {
    call.respond = { kind: 'json', transform: (body) => list(body).filter((i: any) => ownerOf(i?.Labels) === call.tenant || (ownerOf(i?.Labels) === null && catalogued(i))).map((i) => b.hideAll(i, [IMAGE_LIST])) }
  }

  /**
   * Podman resolves a short name (`busybox`) against its search registries, which need
   * not be Docker Hub: a tenant names the registry, which the allow-list then judges.
   * Except when nothing is to be pulled: `podman run` asks for a pull with policy
   * `missing` before every run, and a short name that names a local image the tenant
   * sees is sent as that image's id, which Podman finds without a registry.
   */
  const imagePull: Handler = async (call) => {
    const refs = call.query.getAll('reference')
    if (refs.length !== 1) throw new GatewayError('BODY_INVALID', 'ImagePullLibpod takes exactly one reference')
    const ref = refs[0]
    const host = ref.split('/')[0]
    const parsed = parseImageRef(ref)
    if (!parsed || ref.split('/').length < 2 || !(host.includes('.') || host.includes(':') || host === 'localhost')) {
      const shortName = refuse('libpod-short-names', `pull ${JSON.stringify(ref)}: Podman resolves short names through its own search registries; tenants pull fully qualified references (docker.io/library/busybox:latest)`)
      if (!['missing', 'never'].includes(call.query.get('policy') ?? '')) throw shortName
      const local = await libpodImage(call, ref).catch(() => { throw shortName })
      call.setQuery('reference', local.id)
      return
    }
    if (call.query.get('tlsVerify') === 'false') throw refuse('registry-tls', 'pulls with TLS verification off are not available to tenants')
    if (call.query.has('credentials')) throw refuse('registry-credentials', 'the gateway places registry credentials; the credentials parameter is not available to tenants')
    b.registryAuth(call, parsed.registry, 'pulling')
  }

  /**
   * Podman searches a term without a registry in every registry of its registries.conf
   * (and `listTags` lists one repository's tags): the engine connects where the tenant
   * says. A tenant names the registry, which the allow-list judges (no TLS off).
   */
  const imageSearch: Handler = async (call) => {
    const terms = call.query.getAll('term')
    if (terms.length !== 1) throw new GatewayError('BODY_INVALID', 'ImageSearchLibpod takes exactly one term')
    const host = terms[0].split('/')[0]
    if (terms[0].split('/').length < 2 || !(host.includes('.') || host.includes(':') || host === 'localhost')) {
      throw refuse('libpod-short-names', `search ${JSON.stringify(terms[0])}: Podman searches every registry of its own configuration for a term without one; tenants name the registry (quay.io/busybox)`)
    }
    if (call.query.get('tlsVerify') === 'false') throw refuse('registry-tls', 'searches with TLS verification off are not available to tenants')
    b.registryAuth(call, host, 'searching')
  }

  const imageTag: Handler = async (call) => {
    await libpodImage(call, call.params.name)
    const repo = call.query.get('repo') ?? ''
    b.mustBeInNamespace(call, repo + (call.query.get('tag') ? ':' + call.query.get('tag') : ''), 'tag')
  }

  const imageDelete: Handler = async (call) => {
    const ref = call.params.name
    const res = await libpodImage(call, ref)
    const parsed = looksLikeImageId(ref) ? null : parseImageRef(ref)
    if (!(parsed !== null && inNamespace(parsed, call.namespace)) && res.state !== 'own') {
      throw refuse('image-shared', `image ${ref} belongs to the shared catalog; tenant ${call.tenant} may remove only images it built or committed, and tags in its namespace ${call.namespace}/`)
    }
  }

  const volumeCreate: Handler = async (call) => {
    // Podman applies both Label and Labels: the owner labels go into both.
    const stampBoth = (): void => { b.stamp(call, ['Label']); b.stamp(call, ['Labels']) }
    b.hidden(call, [VOLUME])
    const name = str(call.body?.Name)
    if (name) {
      const res: Resolution = await call.r.volume(name, call.tenant)
      if (res.state !== 'own' && await call.r.volumeExists(name)) throw b.nameTaken('volume', name, call.tenant)
      if (res.state === 'own') return stampBoth()
    }
    await checkVolumeQuota(call, 1)
    stampBoth()
  }

  const networkList: Handler = async (call) => {
    call.respond = {
      kind: 'json',
      transform: (body) => list(body)
        .filter((n: any) => ownerOf(n?.labels) === call.tenant || (ownerOf(n?.labels) === null && isPredefinedNetwork(n?.name, 'podman')))
        .map((n) => b.hideAll(n, [NETWORK])),
    }
  }

  const networkShared: Handler = async (call) => {
    const res = await b.ownOrSharedNetwork(call, call.params.name)
    call.setParam('name', b.networkRef(call, res, call.params.name))
    if (res.state === 'own') b.hidden(call, [NETWORK])
  }

  const networkCreate: Handler = async (call) => {
    onlyFields(call, 'network fields', call.body, TENANT_NETWORK_FIELDS, 'libpod-network-fields')
    onlyFields(call, 'network options', call.body?.options, TENANT_NETWORK_OPTIONS, 'libpod-network-fields')
    // Explicit subnets add routes on the host and can take another network's prefix (a
    // tenant's bridge capturing another tenant's traffic): Podman picks them, as the
    // Docker-compatible create leaves them to the engine (network-ipam).
    if (list(call.body?.subnets).length > 0) throw refuse('network-ipam', `${call.op.id}: explicit subnets are not available to tenants: the engine picks the addresses`)
    call.knownFieldsOnly(TENANT_NETWORK_NODE)
    const name = str(call.body?.name)
    if (isPredefinedNetwork(name, 'podman')) throw refuse('tenant-names', `${name} is a predefined network`)
    await b.nameFree(call, 'network', name)
    b.stamp(call, ['labels'])
    b.hidden(call, [NETWORK])
  }

  const networkConnect: Handler = async (call) => {
    const res = await b.ownOrSharedNetwork(call, call.params.name)
    call.setParam('name', b.networkRef(call, res, call.params.name))
    // Connect names the container `container`; disconnect takes Docker's body, `Container` and `Force`.
    const field = call.op.id === 'NetworkConnectLibpod' ? 'container' : 'Container'
    const c = str(call.body?.[field])
    const id = await b.own(call, 'container', c, call.op.id === 'NetworkDisconnectLibpod' && call.body?.Force === true ? 'endpoint' : 'path')
    if (id !== c) call.setBody([field], id)
  }

  const PODS = 'pods group containers in namespaces and an infra container the gateway does not scope yet'
  // A tenant has no pods (so that `podman inspect NAME` still answers "no such object"
  // after trying every kind), and may not make any.
  const noPods: Handler = async (call) => { call.respond = { kind: 'json', transform: () => [] } }
  const noSuchPod: Handler = async (call) => {
    throw new TenancyRefusal('NOT_FOUND', `no pod with name or ID ${call.params.name} found: no such pod`, 'libpod-pods', { answer: podmanNoPod(call.params.name) })
  }
  const systemEvents: Handler = async (call) => { call.respond = { kind: 'lines', keep: filterEvents(call) } }

  return {
    // Containers
    ContainerListLibpod: b.labelFiltered(b.keepOwn((c) => c?.Labels, { hide: CONTAINER_LIST })),
    ContainerCreateLibpod: containerCreate,
    ContainerInspectLibpod: ownedHidden('container', [CONTAINER_INSPECT]),
    ContainerExistsLibpod: b.owned('container', 'name'),
    ContainerDeleteLibpod: b.owned('container', 'name'),
    ContainerStartLibpod: remounting(b.owned('container', 'name'), 'name'),
    ContainerStopLibpod: b.owned('container', 'name'),
    ContainerRestartLibpod: remounting(b.owned('container', 'name'), 'name'),
    ContainerKillLibpod: b.owned('container', 'name'),
    ContainerPauseLibpod: b.owned('container', 'name'),
    ContainerUnpauseLibpod: b.owned('container', 'name'),
    ContainerInitLibpod: remounting(b.owned('container', 'name'), 'name'),
    ContainerWaitLibpod: b.owned('container', 'name'),
    ContainerLogsLibpod: b.owned('container', 'name'),
    ContainerTopLibpod: b.owned('container', 'name'),
    ContainerStatsLibpod: b.owned('container', 'name'),
    ContainersStatsAllLibpod: statsAll,
    ContainerChangesLibpod: b.owned('container', 'name'),
    ContainerExportLibpod: b.owned('container', 'name'),
    ContainerRenameLibpod: containerRename,
    ContainerResizeLibpod: b.owned('container', 'name'),
    ContainerAttachLibpod: b.owned('container', 'name'),
    ContainerArchiveLibpod: remounting(b.owned('container', 'name'), 'name'),
    PutContainerArchiveLibpod: remounting(b.owned('container', 'name'), 'name'),
    ContainerHealthcheckLibpod: b.owned('container', 'name'),
    ContainerPruneLibpod: b.labelFiltered(),
    ContainerUpdateLibpod: adminOnly('its resource body bypasses the quota and device checks'),
    ContainerMountLibpod: adminOnly('it mounts the container\'s storage on the host'),
    ContainerUnmountLibpod: adminOnly('it unmounts container storage on the host'),
    ContainerShowMountedLibpod: adminOnly('it lists host mount points of every container'),
    ContainerCheckpointLibpod: adminOnly('checkpoints are written to and read from the host'),
    ContainerRestoreLibpod: adminOnly('a restore recreates containers from host files or images the gateway does not inspect'),
    ContainerExecLibpod: async (call) => {
      await b.owned('container', 'name')(call)
      await scopeUser(call, ['User'], null, 'exec User', async () => str((await call.r.get(`${LOOKUP}/containers/${call.params.name}/json`)).body?.Config?.User))
    },
    // Exec
    ExecStartLibpod: b.owned('exec'),
    ExecResizeLibpod: b.owned('exec'),
    ExecInspectLibpod: b.owned('exec'),
    // Images
    ImageListLibpod: imageList,
    ImageInspectLibpod: imageInspect,
    ImageExistsLibpod: visible,
    ImageHistoryLibpod: visible,
    ImageTreeLibpod: visible,
    ImageChangesLibpod: visible,
    ImagePullLibpod: imagePull,
    ImageTagLibpod: imageTag,
    ImageUntagLibpod: adminOnly('untagging every tag at once reaches the shared catalog'),
    ImageDeleteLibpod: imageDelete,
    ImageDeleteAllLibpod: adminOnly('it removes any images it is given, or all'),
    ImagePushLibpod: adminOnly('pushes go through the Docker-compatible API, where the namespace and registry rules apply'),
    ImageGetLibpod: visible,
    ImageExportLibpod: adminOnly('it exports several images at once'),
    ImageLoadLibpod: adminOnly('a loaded archive can replace any tag of the shared catalog'),
    ImageImportLibpod: adminOnly('an import can fetch a URL and name any tag'),
    ImageSearchLibpod: imageSearch,
    ImagePruneLibpod: b.labelFiltered(),
    ImageCommitLibpod: adminOnly('commits go through the Docker-compatible API, where the namespace and owner rules apply'),
    ImageBuildLibpod: adminOnly('builds go through the Docker-compatible API, where the build rules apply'),
    // Volumes
    VolumeListLibpod: b.labelFiltered(b.keepOwn((v) => v?.Labels, { hide: VOLUME })),
    VolumeCreateLibpod: volumeCreate,
    VolumeInspectLibpod: ownedHidden('volume', [VOLUME]),
    VolumeExistsLibpod: b.owned('volume', 'name'),
    VolumeDeleteLibpod: b.owned('volume', 'name'),
    VolumePruneLibpod: b.volumePrune,
    // Networks
    NetworkListLibpod: networkList,
    NetworkCreateLibpod: networkCreate,
    NetworkInspectLibpod: networkShared,
    NetworkExistsLibpod: networkShared,
    NetworkDeleteLibpod: b.owned('network', 'name'),
    NetworkConnectLibpod: networkConnect,
    NetworkDisconnectLibpod: networkConnect,
    NetworkPruneLibpod: b.labelFiltered(),
    // Pods
    PodListLibpod: noPods,
    PodCreateLibpod: b.denied('libpod-pods', PODS),
    PodInspectLibpod: noSuchPod,
    PodExistsLibpod: noSuchPod,
    PodDeleteLibpod: b.denied('libpod-pods', PODS),
    PodStartLibpod: b.denied('libpod-pods', PODS),
    PodStopLibpod: b.denied('libpod-pods', PODS),
    PodRestartLibpod: b.denied('libpod-pods', PODS),
    PodKillLibpod: b.denied('libpod-pods', PODS),
    PodPauseLibpod: b.denied('libpod-pods', PODS),
    PodUnpauseLibpod: b.denied('libpod-pods', PODS),
    PodTopLibpod: b.denied('libpod-pods', PODS),
    PodStatsAllLibpod: b.denied('libpod-pods', PODS),
    PodPruneLibpod: b.denied('libpod-pods', PODS),
    // Secrets, Kubernetes YAML, systemd units
    SecretListLibpod: adminOnly('Podman secrets carry no owner the gateway keeps'),
    SecretCreateLibpod: adminOnly('Podman secrets carry no owner the gateway keeps'),
    SecretInspectLibpod: adminOnly('Podman secrets carry no owner the gateway keeps'),
    SecretDeleteLibpod: adminOnly('Podman secrets carry no owner the gateway keeps'),
    GenerateSystemdLibpod: adminOnly('it describes containers and pods engine-wide'),
    GenerateKubeLibpod: adminOnly('it describes containers and pods engine-wide'),
    KubeGenerateLibpod: adminOnly('it describes containers and pods engine-wide'),
    PlayKubeLibpod: adminOnly('Kubernetes YAML creates pods, volumes and containers the gateway does not inspect'),
    PlayKubeDownLibpod: adminOnly('it removes whatever the YAML names'),
    KubePlayLibpod: adminOnly('Kubernetes YAML creates pods, volumes and containers the gateway does not inspect'),
    KubePlayDownLibpod: adminOnly('it removes whatever the YAML names'),
    // System
    SystemPingLibpod: b.open,
    SystemPingHeadLibpod: b.open,
    SystemVersionLibpod: b.open,
    SystemInfoLibpod: adminOnly('it details the host, its storage and every object count'),
    SystemEventsLibpod: systemEvents,
    SystemDataUsageLibpod: adminOnly('it lists every object on the engine'),
    SystemPruneLibpod: adminOnly('it prunes every kind of object engine-wide'),
  }
}
