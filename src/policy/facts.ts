/**
 * Inspectors: the security-relevant facts of a request, derived in code from the
 * decoded (canonical) body and the query, so that policy conditions compare plain
 * values instead of parsing engine syntax with regexes. Bind strings are split,
 * host paths normalized, capability and security-option spellings unified,
 * namespace modes read from wherever each operation keeps them.
 *
 * `buildInput` is the one place that knows the shape of the policy input.
 */
import path from 'node:path'

export interface Namespaces {
  network: string
  pid: string
  ipc: string
  uts: string
  userns: string
  cgroupns: string
}

export interface Facts {
  /** HostConfig.Privileged (container), Privileged (exec). */
  privileged: boolean
  /** Normalized absolute host paths a container or volume would bind: Binds, bind Mounts, local-driver volumes with `o=bind`. */
  hostPaths: string[]
  /** Capabilities added, upper case without the CAP_ prefix (`ALL` stays `ALL`). */
  capAdd: string[]
  capDrop: string[]
  /** Host devices (`Devices[].PathOnHost`). */
  devices: string[]
  /** GPU and other device requests, by driver (`nvidia`, or `*` when unnamed). */
  deviceRequests: string[]
  deviceCgroupRules: string[]
  /** Namespace modes: `''` (private default), `host`, `container:<ref>`, `shareable`, `private`... */
  namespaces: Namespaces
  /** Security options as `key=value` (`seccomp=unconfined`, `label=disable`, `no-new-privileges=true`). */
  securityOpt: string[]
  /** Sysctl names. */
  sysctls: string[]
  runtime: string
  cgroupParent: string
  volumesFrom: string[]
  links: string[]
  /** Exec user (`''` = the container's default user). */
  user: string
  /** Memory limit in bytes, CPU limit in nano-CPUs, PID limit (0 = none given). */
  memory: number
  nanoCpus: number
  pidsLimit: number
  /** Build: network mode and extra hosts (query parameters of ImageBuild). */
  buildNetwork: string
  buildExtraHosts: string[]
  /** Network create: driver. */
  networkDriver: string
  /** Plugin install/upgrade: privilege names granted. */
  pluginPrivileges: string[]
}

export interface PolicyInput extends Facts {
  readonly op: string
  readonly kind: string
  readonly resource: string
  readonly query: Readonly<Record<string, string>>
  readonly body: unknown
}

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
/** Numbers may arrive as exact-number wrappers from the body decoder; Number() unwraps them. */
function num (v: unknown): number {
  const n = v === null || v === undefined || typeof v === 'boolean' ? 0 : Number(v)
  return Number.isFinite(n) ? n : 0
}
function strings (v: unknown): string[] {
  return arr(v).filter((x): x is string => typeof x === 'string')
}

/** Normalize a host path the way the kernel will walk it (no symlinks: the gateway cannot see the engine's host). */
export function normalizeHostPath (p: string): string {
  const n = path.posix.normalize(p)
  return n.length > 1 && n.endsWith('/') ? n.slice(0, -1) : n
}

/** `src:dst[:opts]`: the source is a host path when absolute, a volume name otherwise. */
function bindSource (bind: string): string | null {
  const src = bind.split(':')[0]
  return src.startsWith('/') ? normalizeHostPath(src) : null
}

function capability (c: string): string {
  const u = c.trim().toUpperCase()
  return u.startsWith('CAP_') ? u.slice(4) : u
}

/** `seccomp:unconfined` (pre-1.12 syntax) and `seccomp=unconfined` are the same option to the engine. */
function securityOption (o: string): string {
  const i = o.search(/[=:]/)
  if (i < 0) return o === 'no-new-privileges' ? 'no-new-privileges=true' : o
  return `${o.slice(0, i)}=${o.slice(i + 1)}`
}

/** A local-driver volume whose options make it a bind of a host directory. */
function localBindDevice (driver: string, opts: Json): string | null {
  if (driver !== '' && driver !== 'local') return null
  const o = str(opts.o).split(',').map((s) => s.trim())
  const device = str(opts.device)
  if (!device.startsWith('/')) return null
  return o.includes('bind') || o.includes('rbind') || str(opts.type) === 'none' ? normalizeHostPath(device) : null
}

function mountHostPaths (mounts: unknown): string[] {
  const out: string[] = []
  for (const m of arr(mounts).map(obj)) {
    const type = str(m.Type)
    if (type === 'bind' && str(m.Source).startsWith('/')) out.push(normalizeHostPath(str(m.Source)))
    if (type === 'volume') {
      const driver = obj(obj(m.VolumeOptions).DriverConfig)
      const dev = localBindDevice(str(driver.Name), obj(driver.Options))
      if (dev) out.push(dev)
    }
  }
  return out
}

function emptyFacts (): Facts {
  return {
    privileged: false,
    hostPaths: [],
    capAdd: [],
    capDrop: [],
    devices: [],
    deviceRequests: [],
    deviceCgroupRules: [],
    namespaces: { network: '', pid: '', ipc: '', uts: '', userns: '', cgroupns: '' },
    securityOpt: [],
    sysctls: [],
    runtime: '',
    cgroupParent: '',
    volumesFrom: [],
    links: [],
    user: '',
    memory: 0,
    nanoCpus: 0,
    pidsLimit: 0,
    buildNetwork: '',
    buildExtraHosts: [],
    networkDriver: '',
    pluginPrivileges: [],
  }
}

/** HostConfig, or the Resources part of it that ContainerUpdate carries at the top level. */
function hostConfigFacts (f: Facts, hc: Json): void {
  f.privileged = hc.Privileged === true
  f.hostPaths.push(...strings(hc.Binds).map(bindSource).filter((p): p is string => p !== null), ...mountHostPaths(hc.Mounts))
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
  f.sysctls = Object.keys(obj(hc.Sysctls))
  f.runtime = str(hc.Runtime)
  f.cgroupParent = str(hc.CgroupParent)
  f.volumesFrom = strings(hc.VolumesFrom)
  f.links = strings(hc.Links)
  f.memory = num(hc.Memory)
  f.nanoCpus = num(hc.NanoCpus) || (num(hc.CpuPeriod) > 0 ? Math.round(num(hc.CpuQuota) / num(hc.CpuPeriod) * 1e9) : 0)
  f.pidsLimit = num(hc.PidsLimit)
}

/** A swarm service's container spec, expressed in the same facts as a container. */
function serviceFacts (f: Facts, spec: Json): void {
  const task = obj(spec.TaskTemplate)
  const cs = obj(task.ContainerSpec)
  const priv = obj(cs.Privileges)
  f.hostPaths.push(...mountHostPaths(cs.Mounts))
  f.capAdd = strings(cs.CapabilityAdd).map(capability)
  f.capDrop = strings(cs.CapabilityDrop).map(capability)
  f.sysctls = Object.keys(obj(cs.Sysctls))
  f.user = str(cs.User)
  if (str(obj(priv.Seccomp).Mode) === 'unconfined') f.securityOpt.push('seccomp=unconfined')
  if (str(obj(priv.AppArmor).Mode) === 'disabled') f.securityOpt.push('apparmor=unconfined')
  if (obj(priv.SELinuxContext).Disable === true) f.securityOpt.push('label=disable')
  if (priv.NoNewPrivileges === true) f.securityOpt.push('no-new-privileges=true')
  const networks = arr(task.Networks).map((n) => str(obj(n).Target))
  if (networks.includes('host')) f.namespaces.network = 'host'
  const limits = obj(obj(task.Resources).Limits)
  f.memory = num(limits.MemoryBytes)
  f.nanoCpus = num(limits.NanoCPUs)
  f.pidsLimit = num(limits.Pids)
}

/** Build query parameters that matter: `networkmode`, `extrahosts`. */
function buildFacts (f: Facts, query: Readonly<Record<string, string>>): void {
  f.buildNetwork = query.networkmode ?? ''
  f.buildExtraHosts = (query.extrahosts ?? '').split(',').map((s) => s.trim()).filter(Boolean)
  f.memory = num(query.memory)
  f.cgroupParent = query.cgroupparent ?? ''
}

/**
 * The policy input. Query parameters are given as the engine reads them: Go's
 * `r.Form.Get` takes the first value of a repeated parameter, and so does this.
 */
export function buildInput (op: string, kind: string, resource: string, query: URLSearchParams, body: unknown): PolicyInput {
  const q: Record<string, string> = {}
  for (const [k, v] of query) if (!(k in q)) q[k] = v
  const f = emptyFacts()
  const b = obj(body)
  switch (op) {
    case 'ContainerCreate':
      hostConfigFacts(f, obj(b.HostConfig))
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
    case 'VolumeCreate': {
      const dev = localBindDevice(str(b.Driver), obj(b.DriverOpts))
      if (dev) f.hostPaths.push(dev)
      break
    }
    case 'NetworkCreate':
      f.networkDriver = str(b.Driver) || 'bridge'
      break
    case 'PluginPull':
    case 'PluginUpgrade':
      f.pluginPrivileges = arr(body).map((p) => str(obj(p).Name))
      break
    case 'ImageBuild':
      buildFacts(f, q)
      break
  }
  f.hostPaths = [...new Set(f.hostPaths)]
  return { op, kind, resource, query: q, body, ...f }
}
