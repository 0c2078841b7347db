/**
 * Inspectors: the security-relevant facts of a request, derived in code from the
 * decoded (canonical) body and the query, so that policy conditions compare plain
 * values instead of parsing engine syntax with regexes. Bind strings are split,
 * host paths normalized, capability and security-option spellings unified,
 * namespace modes read from wherever each operation keeps them.
 *
 * `buildInput` is the one place that knows the shape of the policy input.
 */
import { numberOf } from '../api/body/number'
import { capability, cleanHostPath, FactsSchema, followsLinksIn, goAtoi, localVolume, logSize, optionTokens, readMountTable, resolveHostPath, securityOption, tmpfsMount, tmpfsMountTokens, REMOUNTING_OPS, type Facts, type HostPathMode, type PolicyInput } from './fields'
import { libpodFacts } from './libpod-facts'

export { capability, cleanHostPath, localVolume, resolveHostPath, securityOption, type Facts, type HostPathMode, type Namespaces, type PolicyInput, type Ulimit } from './fields'

type Json = Record<string, unknown>

function obj (v: unknown): Json {
  return v !== null && typeof v === 'object' && !Array.isArray(v) ? v as Json : {}
}
function arr (v: unknown): unknown[] {
  return Array.isArray(v) ? v : []
}
function str (v: unknown): string {
  return typeof v === 'string' ? v : ''
}
/** A number field's value (numbers arrive as exact-number wrappers from the body decoder); 0 for anything Go would not read as one. */
function num (v: unknown): number {
  const n = numberOf(v)
  return Number.isFinite(n) ? n : 0
}
function strings (v: unknown): string[] {
  return arr(v).filter((x): x is string => typeof x === 'string')
}

/**
 * `src:dst[:opts]`: the source is a host path when absolute, a volume name otherwise
 * (resolved with the others in buildInput). Podman also reads a source starting with `.`
 * as a host path, relative to its service's working directory (specgen.GenVolumeMounts):
 * given as written, it lies under no allowed prefix.
 */
function bindSource (bind: string): string | null {
  // Only a container path (no `:`): an anonymous volume there, to Docker (ParseMountRaw) and Podman alike.
  if (!bind.includes(':')) return null
  const src = bind.split(':')[0]
  return src.startsWith('/') || src.startsWith('.') ? src : null
}

/** The options of a bind's mode (`ro,Z`, Podman's `O,upperdir=/x,workdir=/y`), by name. */
function bindOptions (bind: string): string[] {
  const parts = bind.split(':')
  return parts.length < 3 ? [] : parts.slice(2).join(':').split(',').map((o) => o.split('=')[0])
}

/**
 * A Mounts string field as Podman's Docker-compatible API passes it on: joined with the
 * others into one `type=...,source=...,target=...` string that it then reads as CSV
 * (pkg/api/handlers/compat/containers_create.go, specgenutil.Mounts). A value with a
 * comma, quote or line break would be read as more options: given whole as an option.
 */
function mountFieldOptions (m: Json): string[] {
  const fields = [m.Type, m.Source, m.Target, m.Consistency, obj(m.BindOptions).Propagation].map(str)
  return fields.filter((v) => /[,"\r\n]/.test(v))
}

/**
 * A swarm mount's type as the engine reads it (moby daemon/cluster/convert, containerToGRPC):
 * upper-cased with Go's strings.ToUpper (so `Bind`, `VOLUME`, and `bınd` with a dotless i
 * too; JavaScript's toUpperCase maps those letters the same way) and looked up in
 * swarmkit's enum, whose zero value is BIND: a mount without a Type, or with `"Type": null`,
 * is a bind mount. A container's Mounts take the exact lower-case names only.
 */
export function swarmMountType (type: unknown): string {
  const t = typeof type === 'string' ? type.toUpperCase() : ''
  return t === '' ? 'bind' : t.toLowerCase()
}

/** A memory-backed mount: its size bound and option names. */
function tmpfsFacts (f: Facts, tokens: readonly string[]): void {
  const t = tmpfsMount(tokens)
  f.tmpfsSizes.push(t.size)
  f.tmpfsOptions.push(...t.options)
}

/** A volume's driver, when named, and what a local one's options make: a tmpfs is memory-backed. */
function volumeFacts (f: Facts, driver: string, opts: Json): void {
  if (driver !== '') f.volumeDrivers.push(driver)
  const v = localVolume(driver, opts)
  if (v.bindPath) f.hostPaths.push(v.bindPath)
  if (v.hostAccess) f.hostVolume = true
  if ((driver === '' || driver === 'local') && str(opts.type) === 'tmpfs') {
    f.tmpfsVolume = true
    tmpfsFacts(f, optionTokens(str(opts.o)))
  }
}

function mountFacts (f: Facts, mounts: unknown, swarm = false): void {
  for (const m of arr(mounts).map(obj)) {
    const type = swarm ? swarmMountType(m.Type) : str(m.Type)
    // A relative bind source is Podman's service directory's (dockerd refuses it): as
    // written it lies under no allowed prefix. Podman also makes the directory of any
    // absolute source, whatever the type (dockerd refuses a source there).
    if ((type === 'bind' && str(m.Source) !== '') || str(m.Source).startsWith('/')) f.hostPaths.push(str(m.Source))
    // Other types (Podman's `image`, `devpts`...) mount what the tenant does not own; dockerd refuses them.
    if (!['bind', 'volume', 'tmpfs'].includes(type)) f.hostVolume = true
    if (type !== 'tmpfs') {
      const propagation = str(obj(m.BindOptions).Propagation)
      if (propagation !== '') f.mountOptions.push(propagation)
      f.mountOptions.push(...mountFieldOptions(m))
    }
    if (type === 'volume') {
      const driver = obj(obj(m.VolumeOptions).DriverConfig)
      volumeFacts(f, str(driver.Name), obj(driver.Options))
    }
    if (type === 'tmpfs') tmpfsFacts(f, tmpfsMountTokens(m))
  }
}

/** Ulimits `[{Name, Soft, Hard}]`; any negative value is RLIM_INFINITY once the engine casts it. */
function ulimitFacts (f: Facts, ulimits: unknown): void {
  for (const u of arr(ulimits).map(obj)) {
    const limit = (v: unknown): number => (num(v) < 0 ? -1 : num(v))
    f.ulimits.push({ name: str(u.Name).toLowerCase(), soft: limit(u.Soft), hard: limit(u.Hard) })
  }
}

/**
 * A log configuration as the daemon will use it: the driver, option names, and the disk
 * its files may fill. json-file keeps one unbounded file unless max-size is given; local
 * keeps 5 files of 20 MiB unless told otherwise (moby daemon/logger/jsonfilelog, local).
 */
function logFacts (f: Facts, driver: string, options: Json): void {
  f.logDriver = driver
  f.logOptions = Object.keys(options)
  const size = options['max-size']
  const files = options['max-file']
  const local = driver === 'local'
  f.logMaxSize = size === undefined ? (local ? 20 * 1024 * 1024 : 0) : logSize(str(size))
  f.logMaxFile = files === undefined ? (local ? 5 : 1) : goAtoi(str(files)) ?? -1
}

/**
 * linkFollowingHostPaths is worked out on its first read (buildInput): its value, or the
 * function that works it out, is kept in this non-enumerable slot of the facts object,
 * read and written through one accessor shared by every facts object.
 */
const LINK_FOLLOWING = Symbol('linkFollowingHostPaths')
type LinkFollowing = string[] | (() => string[])
interface LinkFollowingSlot { [LINK_FOLLOWING]: LinkFollowing }
const LINK_FOLLOWING_FACT: PropertyDescriptor = {
  enumerable: true,
  configurable: true,
  get (this: LinkFollowingSlot): string[] {
    const v = this[LINK_FOLLOWING]
    if (typeof v !== 'function') return v
    const value = v()
    this[LINK_FOLLOWING] = value
    return value
  },
  set (this: LinkFollowingSlot, v: string[]) { this[LINK_FOLLOWING] = v },
}

/**
 * The facts of a request before any is read, in the vocabulary's order. Built property
 * by property, with linkFollowingHostPaths an accessor from the start (LINK_FOLLOWING_FACT):
 * objects built the same way share their hidden classes and stay in V8's fast mode.
 * Redefining the property as an accessor on a finished literal made every request's
 * input a dictionary (issue 21).
 */
function emptyFacts (): Facts {
  const f = { privileged: false, hostPaths: [] as string[], unresolvedHostPaths: [] as string[] } as Partial<Facts> as Facts
  Object.defineProperty(f, 'linkFollowingHostPaths', LINK_FOLLOWING_FACT)
  Object.defineProperty(f, LINK_FOLLOWING, { value: [], writable: true, enumerable: false, configurable: true })
  f.hostVolume = false
  f.tmpfsVolume = false
  f.capAdd = []
  f.capDrop = []
  f.devices = []
  f.deviceRequests = []
  f.deviceCgroupRules = []
  f.namespaces = { network: '', pid: '', ipc: '', uts: '', userns: '', cgroupns: '' }
  f.securityOpt = []
  f.sysctls = []
  f.runtime = ''
  f.annotations = []
  f.restartPolicy = ''
  f.cgroupParent = ''
  f.volumesFrom = []
  f.links = []
  f.user = ''
  f.memory = 0
  f.nanoCpus = 0
  f.pidsLimit = 0
  f.buildNetwork = ''
  f.buildExtraHosts = []
  f.networkDriver = ''
  f.pluginPrivileges = []
  f.tmpfsSizes = []
  f.tmpfsOptions = []
  f.mountOptions = []
  f.counts = { ports: 0, mounts: 0, env: 0, devices: 0, hosts: 0, dns: 0, ulimits: 0, labels: 0 }
  f.shmSize = 0
  f.ulimits = []
  f.oomKillDisable = false
  f.oomScoreAdj = 0
  f.cpuShares = 0
  f.blkioWeight = 0
  f.blkioDevices = []
  f.cpuRealtimePeriod = 0
  f.cpuRealtimeRuntime = 0
  f.memorySwap = 0
  f.logDriver = ''
  f.logOptions = []
  f.logMaxSize = 0
  f.logMaxFile = 0
  f.volumeDrivers = []
  f.serviceRuntime = ''
  f.secretDriver = ''
  return f
}

// Set property by property, emptyFacts is not checked by the compiler for a fact it
// forgets: a fact of the vocabulary that it leaves out stops the gateway at start.
{
  const made = emptyFacts()
  const missing = Object.keys(FactsSchema.properties).filter((k) => !Object.hasOwn(made, k))
  if (missing.length) throw new Error(`facts.ts emptyFacts() sets no value for ${missing.join(', ')}`)
}

/**
 * The fact vocabulary with each fact's zero value: what the audit trail leaves out of a
 * record's `facts` and `policy learn` reads back for a fact a record does not name.
 */
export function zeroFacts (): Facts {
  return emptyFacts()
}

/** `8000-9000` -> 1001; a single port, or what does not parse, counts 1. */
export function portRangeSize (spec: string): number {
  const m = /^(\d+)-(\d+)$/.exec(spec.trim())
  if (!m) return 1
  const n = Number(m[2]) - Number(m[1]) + 1
  return n > 1 ? n : 1
}

/** The sizes of a Docker-compatible create's lists (ListCounts), ranges expanded. */
function createCounts (f: Facts, b: Json): void {
  const hc = obj(b.HostConfig)
  const len = (v: unknown): number => arr(v).length
  const keys = (v: unknown): number => Object.keys(obj(v)).length
  let ports = 0
  for (const k of Object.keys(obj(b.ExposedPorts))) ports += portRangeSize(k.split('/')[0])
  for (const [k, bindings] of Object.entries(obj(hc.PortBindings))) {
    const inner = portRangeSize(k.split('/')[0])
    for (const pb of arr(bindings).length ? arr(bindings) : [{}]) ports += Math.max(inner, portRangeSize(str(obj(pb).HostPort)))
  }
  f.counts = {
    ports,
    mounts: len(hc.Binds) + len(hc.Mounts) + keys(hc.Tmpfs) + keys(b.Volumes),
    env: len(b.Env),
    devices: len(hc.Devices) + len(hc.DeviceCgroupRules) + len(hc.DeviceRequests),
    hosts: len(hc.ExtraHosts),
    dns: len(hc.Dns) + len(hc.DnsSearch) + len(hc.DnsOptions),
    ulimits: len(hc.Ulimits),
    labels: keys(b.Labels) + keys(hc.Annotations),
  }
}

/** HostConfig, or the Resources part of it that ContainerUpdate carries at the top level. */
function hostConfigFacts (f: Facts, hc: Json): void {
  f.privileged = hc.Privileged === true
  f.hostPaths.push(...strings(hc.Binds).map(bindSource).filter((p): p is string => p !== null))
  f.mountOptions.push(...strings(hc.Binds).flatMap(bindOptions))
  mountFacts(f, hc.Mounts)
  f.capAdd = strings(hc.CapAdd).map(capability)
  f.capDrop = strings(hc.CapDrop).map(capability)
  f.devices = arr(hc.Devices).map((d) => str(obj(d).PathOnHost))
  f.deviceRequests = arr(hc.DeviceRequests).map((d) => str(obj(d).Driver) || '*')
  f.deviceCgroupRules = strings(hc.DeviceCgroupRules)
  f.namespaces = {
    network: str(hc.NetworkMode),
    pid: str(hc.PidMode),
    ipc: str(hc.IpcMode),
    uts: str(hc.UTSMode),
    userns: str(hc.UsernsMode),
    cgroupns: str(hc.CgroupnsMode),
  }
  f.securityOpt = strings(hc.SecurityOpt).map(securityOption)
  // Explicit lists replace the engine's masking of /proc and /sys: what the CLI sends
  // for `--security-opt systempaths=unconfined` is `"MaskedPaths": []`.
  if (Array.isArray(hc.MaskedPaths) || Array.isArray(hc.ReadonlyPaths)) f.securityOpt.push('systempaths=custom')
  f.sysctls = Object.keys(obj(hc.Sysctls))
  f.runtime = str(hc.Runtime)
  f.annotations = Object.keys(obj(hc.Annotations))
  f.restartPolicy = str(obj(hc.RestartPolicy).Name)
  f.cgroupParent = str(hc.CgroupParent)
  f.volumesFrom = strings(hc.VolumesFrom)
  f.links = strings(hc.Links)
  f.memory = num(hc.Memory)
  f.nanoCpus = num(hc.NanoCpus) || (num(hc.CpuPeriod) > 0 ? Math.round(num(hc.CpuQuota) / num(hc.CpuPeriod) * 1e9) : 0)
  f.pidsLimit = num(hc.PidsLimit)
  // Host resources that are not the limits a quota counts.
  for (const [, opts] of Object.entries(obj(hc.Tmpfs))) tmpfsFacts(f, optionTokens(str(opts)))
  if (str(hc.VolumeDriver) !== '') f.volumeDrivers.push(str(hc.VolumeDriver))
  f.shmSize = num(hc.ShmSize)
  ulimitFacts(f, hc.Ulimits)
  f.oomKillDisable = hc.OomKillDisable === true
  f.oomScoreAdj = num(hc.OomScoreAdj)
  f.cpuShares = num(hc.CpuShares)
  f.blkioWeight = num(hc.BlkioWeight)
  for (const k of ['BlkioWeightDevice', 'BlkioDeviceReadBps', 'BlkioDeviceWriteBps', 'BlkioDeviceReadIOps', 'BlkioDeviceWriteIOps']) {
    f.blkioDevices.push(...arr(hc[k]).map((d) => str(obj(d).Path)))
  }
  f.cpuRealtimePeriod = num(hc.CpuRealtimePeriod)
  f.cpuRealtimeRuntime = num(hc.CpuRealtimeRuntime)
  f.memorySwap = num(hc.MemorySwap)
  const log = obj(hc.LogConfig)
  logFacts(f, str(log.Type), obj(log.Config))
}

/** A swarm service's container spec, expressed in the same facts as a container. */
function serviceFacts (f: Facts, spec: Json): void {
  const task = obj(spec.TaskTemplate)
  const cs = obj(task.ContainerSpec)
  const priv = obj(cs.Privileges)
  mountFacts(f, cs.Mounts, true)
  f.capAdd = strings(cs.CapabilityAdd).map(capability)
  f.capDrop = strings(cs.CapabilityDrop).map(capability)
  f.sysctls = Object.keys(obj(cs.Sysctls))
  f.user = str(cs.User)
  // The swarm reads these modes as exact strings (an unknown one fails the task). A
  // custom seccomp profile (API 1.44+) can allow any system call; an SELinux user, role,
  // type or level (spc_t) can lift the confinement as --security-opt label=... would.
  const seccomp = str(obj(priv.Seccomp).Mode)
  if (seccomp === 'unconfined' || seccomp === 'custom') f.securityOpt.push(`seccomp=${seccomp}`)
  if (str(obj(priv.AppArmor).Mode) === 'disabled') f.securityOpt.push('apparmor=unconfined')
  const selinux = obj(priv.SELinuxContext)
  if (selinux.Disable === true) f.securityOpt.push('label=disable')
  for (const k of ['User', 'Role', 'Type', 'Level']) if (str(selinux[k])) f.securityOpt.push(`label=${k.toLowerCase()}:${str(selinux[k])}`)
  if (priv.NoNewPrivileges === true) f.securityOpt.push('no-new-privileges=true')
  const networks = arr(task.Networks).map((n) => str(obj(n).Target))
  if (networks.includes('host')) f.namespaces.network = 'host'
  const limits = obj(obj(task.Resources).Limits)
  f.memory = num(limits.MemoryBytes)
  f.nanoCpus = num(limits.NanoCPUs)
  f.pidsLimit = num(limits.Pids)
  ulimitFacts(f, cs.Ulimits)
  f.oomScoreAdj = num(cs.OomScoreAdj)
  const log = obj(task.LogDriver)
  logFacts(f, str(log.Name), obj(log.Options))
  // A plugin task makes the engine pull and install the plugin PluginSpec names.
  f.serviceRuntime = str(task.Runtime) || (Object.keys(obj(task.PluginSpec)).length ? 'plugin' : Object.keys(obj(task.NetworkAttachmentSpec)).length ? 'attachment' : '')
}

/**
 * Build query parameters that matter: `networkmode`, `extrahosts`, and the host settings
 * of the containers the classic builder runs its steps in (moby dockerfile
 * hostConfigFromOptions): the same facts a ContainerCreate's HostConfig gives, so one rule
 * judges both. Read as the engine reads them (router/build newImageBuildOptions): numbers
 * with Int64ValueOrZero, `extrahosts` and `securityopt` as every repeat, `ulimits` as JSON.
 */
function buildFacts (f: Facts, query: Readonly<Record<string, string>>, all: URLSearchParams): void {
  f.buildNetwork = query.networkmode ?? ''
  f.buildExtraHosts = all.getAll('extrahosts').flatMap((h) => h.split(',')).map((s) => s.trim()).filter(Boolean)
  f.memory = int64(query.memory)
  f.memorySwap = int64(query.memswap)
  f.cpuShares = int64(query.cpushares)
  f.shmSize = int64(query.shmsize)
  const period = int64(query.cpuperiod)
  f.nanoCpus = period > 0 ? Math.round(int64(query.cpuquota) / period * 1e9) : 0
  f.cgroupParent = query.cgroupparent ?? ''
  f.securityOpt = all.getAll('securityopt').map(securityOption)
  let ulimits: unknown = []
  try { ulimits = JSON.parse(query.ulimits ?? '[]') } catch { ulimits = [{ Name: 'unreadable', Soft: -1, Hard: -1 }] }
  // Go's decoder matches the field names ignoring case.
  ulimitFacts(f, arr(ulimits).map((u) => Object.fromEntries(Object.entries(obj(u)).map(([k, v]) => [({ name: 'Name', soft: 'Soft', hard: 'Hard' } as Record<string, string>)[k.toLowerCase()] ?? k, v]))))
}

/** A query parameter as Go's strconv.ParseInt(v, 10, 64) reads it, 0 when it does not (httputils.Int64ValueOrZero). */
function int64 (v: string | undefined): number {
  return v !== undefined && /^[+-]?\d{1,19}$/.test(v) ? Number(v) : 0
}

/**
 * The host paths as the policy judges them: in `shared` mode where the runtime's walk
 * will end on this filesystem (resolveHostPath), in `remote` mode as written (cleaned);
 * those whose links could not be followed are also unresolvedHostPaths.
 *
 * Returns how to work out linkFollowingHostPaths when a walked path needs the mount
 * table for it (null when none does and the fact is already set): see buildInput.
 */
function resolveHostPaths (f: Facts, mode: HostPathMode): (() => string[]) | null {
  const given = [...new Set(f.hostPaths)]
  f.hostPaths = []
  /** In order: a path that follows links whatever the table says (its walk failed), or one whose mount decides. */
  const candidates: Array<{ path: string, byTable: boolean }> = []
  for (const p of given) {
    // A relative path is the engine's working directory's (Podman reads `./x` and a
    // relative Mounts source so), which the gateway does not know: as written, it lies
    // under no allowed prefix.
    if (!p.startsWith('/')) {
      f.hostPaths.push(p)
      f.unresolvedHostPaths.push(p)
      continue
    }
    const real = mode === 'shared' ? resolveHostPath(p) : null
    f.hostPaths.push(real ?? cleanHostPath(p))
    if (real === null) f.unresolvedHostPaths.push(cleanHostPath(p))
    candidates.push({ path: real ?? cleanHostPath(p), byTable: real !== null })
  }
  f.hostPaths = [...new Set(f.hostPaths)]
  f.unresolvedHostPaths = [...new Set(f.unresolvedHostPaths)]
  const linkFollowing = (): string[] => {
    // The mount table is read once for this judgement's paths, when one resolved.
    const table = candidates.some((c) => c.byTable) ? readMountTable() : null
    return [...new Set(candidates.filter((c) => !c.byTable || followsLinksIn(c.path, table)).map((c) => c.path))]
  }
  if (candidates.some((c) => c.byTable)) return linkFollowing
  f.linkFollowingHostPaths = linkFollowing()
  return null
}

/**
 * The policy input. Query parameters are given as the engine reads them: Go's
 * `r.Form.Get` takes the first value of a repeated parameter, and so does this.
 * `hostPaths`: whether host paths can be followed on this filesystem (see HostPathMode).
 */
export function buildInput (op: string, kind: string, resource: string, query: URLSearchParams, body: unknown, hostPaths: HostPathMode = 'shared'): PolicyInput {
  const q: Record<string, string> = {}
  for (const [k, v] of query) if (!(k in q)) q[k] = v
  const f = emptyFacts()
  const b = obj(body)
  switch (op) {
    case 'ContainerCreate':
      hostConfigFacts(f, obj(b.HostConfig))
      createCounts(f, b)
      f.user = str(b.User)
      break
    case 'ContainerUpdate':
      hostConfigFacts(f, b)
      break
    case 'ContainerExec':
      f.privileged = b.Privileged === true
      f.user = str(b.User)
      break
    case 'ServiceCreate':
    case 'ServiceUpdate':
      serviceFacts(f, b)
      break
    case 'VolumeCreate':
      volumeFacts(f, str(b.Driver), obj(b.DriverOpts))
      break
    case 'SecretCreate':
    case 'SecretUpdate':
      f.secretDriver = str(obj(b.Driver).Name)
      break
    case 'NetworkCreate':
      f.networkDriver = str(b.Driver) || 'bridge'
      break
    case 'PluginPull':
    case 'PluginUpgrade':
      f.pluginPrivileges = arr(body).map((p) => str(obj(p).Name))
      break
    case 'ImageBuild':
      buildFacts(f, q, query)
      break
    default:
      // The engine walks a container's bind sources when it mounts them (a start, a
      // copy), not when it is created: the gateway judges them again then, with the
      // container's stored HostConfig as the body (gateway/pipeline.ts recheckBinds).
      if (REMOUNTING_OPS.has(op)) {
        const hc = obj(b.HostConfig)
        f.hostPaths.push(...strings(hc.Binds).map(bindSource).filter((p): p is string => p !== null))
        mountFacts(f, hc.Mounts)
      } else if (op.endsWith('Libpod')) {
        // Podman's own API: its bodies in the same facts (libpod-facts.ts).
        libpodFacts(op, f, b)
      }
  }
  const linkFollowing = resolveHostPaths(f, hostPaths)
  // Added to the facts' own object: spread into a new literal, its 54 keys made V8 build
  // a dictionary for each request (issue 21). Set one by one, as emptyFacts does, the
  // input keeps a shared hidden class.
  const input = f as Facts & { op: string, kind: string, resource: string, query: Record<string, string>, body: unknown }
  input.op = op
  input.kind = kind
  input.resource = resource
  input.query = q
  input.body = body
  // The mount table behind linkFollowingHostPaths is read when the fact is first read
  // (by a rule's condition, a denial's reasons, an audit record), once, and never when
  // no rule that applies to the request asks for it: reading /proc/self/mountinfo
  // costs the kernel microseconds per mount on the host, and most of a create's
  // decision time went there (issue 21). No table is kept beyond the judgement.
  if (linkFollowing !== null) (input as unknown as LinkFollowingSlot)[LINK_FOLLOWING] = linkFollowing
  return input
}
