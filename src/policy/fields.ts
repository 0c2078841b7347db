/**
 * The shape of the policy's facts, and the normalizers that give each host-facing
 * value one spelling (host paths, capabilities, security options, local volume
 * options). facts.ts derives the facts of Engine API bodies, libpod-facts.ts those
 * of Podman's; both fill this shape with these normalizers.
 */
import fs from 'node:fs'
import path from 'node:path'
import { Type, type Static } from '@sinclair/typebox'

type Json = Record<string, unknown>

function str (v: unknown): string {
  return typeof v === 'string' ? v : ''
}

/**
 * The policy's facts: one entry per fact, the one declaration of its name, type, meaning
 * and the request fields it comes from. The `Facts` type, the compile-time check of
 * every condition (conditions.ts), `portcullis policy facts` and docs/facts.md are all
 * derived from it. To add a fact: add an entry here (`bool`, `num`, `str`, `strings`,
 * `numbers`, or an object), then fill it in emptyFacts() (facts.ts) and where it is read.
 */
const bool = (description: string, source: string) => Type.Boolean({ description, source })
const num = (description: string, source: string) => Type.Number({ description, source })
const text = (description: string, source: string) => Type.String({ description, source })
const strings = (description: string, source: string) => Type.Array(Type.String(), { description, source })
const numbers = (description: string, source: string) => Type.Array(Type.Number(), { description, source })

export const NamespacesSchema = Type.Object({
  network: Type.String({ description: 'network namespace mode' }),
  pid: Type.String({ description: 'PID namespace mode' }),
  ipc: Type.String({ description: 'IPC namespace mode' }),
  uts: Type.String({ description: 'UTS namespace mode' }),
  userns: Type.String({ description: 'user namespace mode' }),
  cgroupns: Type.String({ description: 'cgroup namespace mode' }),
}, { $id: 'namespaces' })

export const UlimitSchema = Type.Object({
  name: Type.String({ description: 'lower-case name (`nofile`)' }),
  soft: Type.Number({ description: 'soft limit; -1 unlimited' }),
  hard: Type.Number({ description: 'hard limit; -1 unlimited' }),
}, { $id: 'ulimit' })

/**
 * How much engine work one create asks for, per list (rule `request-size`): one request
 * publishing a large port range stalled Podman for every tenant for over a minute.
 */
export const ListCountsSchema = Type.Object({
  ports: Type.Number({ description: 'published and exposed ports, ranges expanded' }),
  mounts: Type.Number({ description: 'mounts of every kind' }),
  env: Type.Number({ description: 'environment entries' }),
  devices: Type.Number({ description: 'devices, device cgroup rules and requests' }),
  hosts: Type.Number({ description: 'extra /etc/hosts entries' }),
  dns: Type.Number({ description: 'DNS servers, searches and options' }),
  ulimits: Type.Number({ description: 'ulimits' }),
  labels: Type.Number({ description: 'labels and annotations' }),
}, { $id: 'listCounts' })

export const FactsSchema = Type.Object({
  privileged: bool('A privileged container or exec.', 'HostConfig.Privileged (container), Privileged (exec); Podman: privileged'),
  hostPaths: strings('Absolute host paths a container or volume would bind. Where the gateway shares the engine\'s filesystem, each is where the runtime\'s walk will end, every symlink followed; where it does not, or the walk cannot be made, the path as written, cleaned lexically.', 'HostConfig.Binds, bind HostConfig.Mounts, local volumes with o=bind (VolumeCreate DriverOpts, volume Mounts), service Mounts; Podman: mounts, volumes, rootfs, log path and other host files'),
  unresolvedHostPaths: strings('The host paths among hostPaths whose symlinks the gateway could not follow, cleaned lexically: a link anywhere in one could lead anywhere.', 'as hostPaths'),
  linkFollowingHostPaths: strings('The host paths (as in hostPaths) that do not lie on a mount with the `nosymfollow` option (Linux 5.10+: the kernel follows no symlink under it), or whose mount the gateway cannot see (remote mode, a failed walk): a link a tenant plants there between the gateway\'s walk and the runtime\'s mount would be followed.', 'as hostPaths, and /proc/self/mountinfo'),
  tmpfsVolume: bool('A local-driver volume of `type=tmpfs`: host memory held as long as the volume exists, with or without a container, that no memory limit counts.', 'VolumeCreate DriverOpts, a volume mount\'s VolumeOptions.DriverConfig.Options; Podman: VolumeCreateLibpod Options'),
  hostVolume: bool('A local-driver volume whose options mount something from the host: a bind, a block device, an overlay of host directories.', 'VolumeCreate Driver/DriverOpts, volume Mounts\' VolumeOptions.DriverConfig'),
  capAdd: strings('Capabilities added, upper case without the CAP_ prefix (`ALL` stays `ALL`).', 'HostConfig.CapAdd, service ContainerSpec.CapabilityAdd; Podman: cap_add'),
  capDrop: strings('Capabilities dropped, spelt as capAdd.', 'HostConfig.CapDrop, service ContainerSpec.CapabilityDrop; Podman: cap_drop'),
  devices: strings('Host devices.', 'HostConfig.Devices[].PathOnHost; Podman: devices'),
  deviceRequests: strings('GPU and other device requests, by driver (`nvidia`, or `*` when unnamed).', 'HostConfig.DeviceRequests[].Driver'),
  deviceCgroupRules: strings('Device cgroup rules.', 'HostConfig.DeviceCgroupRules'),
  namespaces: Type.Object(NamespacesSchema.properties, { description: 'Namespace modes: `\'\'` (private default), `host`, `container:<ref>`, `shareable`, `private`...', source: 'HostConfig.NetworkMode, PidMode, IpcMode, UTSMode, UsernsMode, CgroupnsMode; a service\'s host network; Podman: netns, pidns, ipcns, utsns, userns, cgroupns' }),
  securityOpt: strings('Security options as `key=value` (`seccomp=unconfined`, `label=disable`, `no-new-privileges=true`); `systempaths=custom` for explicit MaskedPaths/ReadonlyPaths.', 'HostConfig.SecurityOpt, MaskedPaths, ReadonlyPaths; service ContainerSpec.Privileges; Podman: seccomp, apparmor, selinux options'),
  sysctls: strings('Sysctl names.', 'HostConfig.Sysctls, service ContainerSpec.Sysctls; Podman: sysctl'),
  runtime: text('The OCI runtime.', 'HostConfig.Runtime; Podman: oci_runtime'),
  annotations: strings('Keys of the OCI annotations handed to the runtime: crun reads `run.oci.*` ones as settings of the container.', 'HostConfig.Annotations (API 1.43+); Podman: annotations'),
  restartPolicy: text('The restart policy: `\'\'` or `no` when the engine never restarts the container on its own.', 'HostConfig.RestartPolicy.Name; Podman: restart_policy'),
  cgroupParent: text('The cgroup parent.', 'HostConfig.CgroupParent; ImageBuild cgroupparent; Podman: cgroup_parent'),
  volumesFrom: strings('Containers whose volumes are mounted.', 'HostConfig.VolumesFrom; Podman: volumes_from'),
  links: strings('Legacy links.', 'HostConfig.Links'),
  user: text('The user a container or exec runs as (`\'\'`: the image\'s default).', 'User (container, exec), service ContainerSpec.User; Podman: user'),
  memory: num('Memory limit in bytes (0: none given).', 'HostConfig.Memory, service Resources.Limits.MemoryBytes, ImageBuild memory'),
  nanoCpus: num('CPU limit in nano-CPUs (0: none given).', 'HostConfig.NanoCpus or CpuQuota/CpuPeriod, service Resources.Limits.NanoCPUs'),
  pidsLimit: num('PID limit (0: none given, negative: unlimited).', 'HostConfig.PidsLimit, service Resources.Limits.Pids'),
  buildNetwork: text('A build\'s network mode.', 'ImageBuild networkmode'),
  buildExtraHosts: strings('A build\'s extra hosts.', 'ImageBuild extrahosts'),
  networkDriver: text('A created network\'s driver (`bridge` when none is named).', 'NetworkCreate Driver'),
  pluginPrivileges: strings('Privilege names granted to a plugin.', 'PluginPull, PluginUpgrade body [].Name'),
  tmpfsSizes: numbers('Memory-backed mounts: the bytes each may fill, 0 when nothing bounds it but the host\'s RAM.', 'HostConfig.Tmpfs, tmpfs Mounts, local volumes of type tmpfs'),
  tmpfsOptions: strings('Memory-backed mounts\' options as given, by name (`size`, `mode`, `exec`, `suid`, `nr_inodes`...).', 'as tmpfsSizes'),
  mountOptions: strings('Options of bind and volume mounts as the engine reads them, by name (`ro`, `rprivate`, `nocopy`; on Podman also `O`, `upperdir`, `workdir`, `U`, `idmap`...). A Mounts field that Podman\'s Docker-compatible API would split into more options is given whole.', 'HostConfig.Binds modes, Mounts[].BindOptions.Propagation; Podman: mounts[].options (other than tmpfs), volumes[].Options'),
  counts: Type.Object(ListCountsSchema.properties, { description: 'The sizes of a create\'s lists; all 0 for other operations.', source: 'ExposedPorts, PortBindings (ranges expanded), Binds, Mounts, Tmpfs, Volumes, Env, Devices, DeviceCgroupRules, DeviceRequests, ExtraHosts, Dns*, Ulimits, Labels, Annotations; Podman: portmappings, expose, mounts, volumes, env, devices, hostadd, dns_*, r_limits, labels' }),
  shmSize: num('/dev/shm size in bytes (0: the engine\'s default).', 'HostConfig.ShmSize; Podman: shm_size'),
  ulimits: Type.Array(Type.Object(UlimitSchema.properties), { description: 'Ulimits with lower-case names (the engine upper-cases them into RLIMIT_*); -1: unlimited.', source: 'HostConfig.Ulimits, service ContainerSpec.Ulimits; Podman: r_limits' }),
  oomKillDisable: bool('The OOM killer disabled for the container.', 'HostConfig.OomKillDisable'),
  oomScoreAdj: num('OOM score adjustment.', 'HostConfig.OomScoreAdj, service ContainerSpec.OomScoreAdj'),
  cpuShares: num('Relative CPU weight (0: the engine\'s default).', 'HostConfig.CpuShares'),
  blkioWeight: num('Relative block-IO weight (0: the engine\'s default).', 'HostConfig.BlkioWeight'),
  blkioDevices: strings('Host devices named by block-IO weights and throttles.', 'HostConfig.BlkioWeightDevice, BlkioDeviceReadBps, BlkioDeviceWriteBps, BlkioDeviceReadIOps, BlkioDeviceWriteIOps'),
  cpuRealtimePeriod: num('Real-time CPU period.', 'HostConfig.CpuRealtimePeriod'),
  cpuRealtimeRuntime: num('Real-time CPU runtime.', 'HostConfig.CpuRealtimeRuntime'),
  memorySwap: num('Memory plus swap in bytes, -1 unlimited swap, 0 the engine\'s default.', 'HostConfig.MemorySwap'),
  logDriver: text('The logging driver (`\'\'`: the daemon\'s default).', 'HostConfig.LogConfig.Type, service TaskTemplate.LogDriver.Name'),
  logOptions: strings('The logging driver\'s option names.', 'HostConfig.LogConfig.Config, service TaskTemplate.LogDriver.Options'),
  logMaxSize: num('Bytes per log file; 0 when nothing bounds it (json-file without max-size, or unreadable).', 'the log options\' max-size'),
  logMaxFile: num('Number of log files kept (json-file 1, local 5 by default); -1 when unreadable.', 'the log options\' max-file'),
  volumeDrivers: strings('Volume drivers named, when given.', 'VolumeCreate Driver, HostConfig.VolumeDriver, Mounts\' VolumeOptions.DriverConfig.Name'),
  serviceRuntime: text('A service\'s task runtime: `container` (or `\'\'`), `plugin`, `attachment`.', 'ServiceCreate/ServiceUpdate TaskTemplate.Runtime, PluginSpec, NetworkAttachmentSpec'),
  secretDriver: text('A secret\'s external driver (a plugin the swarm manager calls), `\'\'` when none.', 'SecretCreate/SecretUpdate Driver.Name'),
})

/** The rest of `r.obj`: the request itself, beside the facts derived from it. */
export const RequestSchema = Type.Object({
  op: text('The operation id (`ContainerCreate`).', 'the route'),
  kind: text('The resource kind (`container`).', 'the route'),
  resource: text('The resource named in the path, as given.', 'the path'),
  query: Type.Record(Type.String(), Type.String(), { description: 'Query parameters, the first value of each.', source: 'the query string' }),
  body: Type.Unknown({ description: 'The decoded body after rewrites, unchecked below this name: prefer a fact.', source: 'the body' }),
})

export type Namespaces = Static<typeof NamespacesSchema>
export type Ulimit = Static<typeof UlimitSchema>
export type Facts = Static<typeof FactsSchema>
export type ListCounts = Static<typeof ListCountsSchema>

export interface PolicyInput extends Facts {
  readonly op: string
  readonly kind: string
  readonly resource: string
  readonly query: Readonly<Record<string, string>>
  readonly body: unknown
}

/**
 * Whether the gateway sees the engine's filesystem: `shared` when it does (the gateway
 * next to the engine's socket), `remote` when it does not (another machine, or a
 * container with only the socket mounted). Decided by the gateway (gateway/host-paths.ts).
 */
export type HostPathMode = 'shared' | 'remote'

/**
 * Operations that make the engine bind a container's mounts again, walking their
 * sources anew: start, restart (and Podman's init, which has the runtime set up the
 * mounts), and the archive operations, for which dockerd mounts the container's
 * volumes and binds on its own host to read or write through them (daemon/archive.go
 * mountVolumes). The gateway judges the container's stored sources again for them.
 */
export const REMOUNTING_OPS: ReadonlySet<string> = new Set([
  'ContainerStart', 'ContainerRestart', 'ContainerArchiveInfo', 'ContainerArchive', 'PutContainerArchive',
  'ContainerStartLibpod', 'ContainerRestartLibpod', 'ContainerInitLibpod', 'ContainerArchiveLibpod', 'PutContainerArchiveLibpod',
])

/** A host path as written, cleaned lexically (`//`, `.`, `..`, a trailing `/`): what a gateway that cannot see the engine's filesystem can judge. */
export function cleanHostPath (p: string): string {
  const n = path.posix.normalize(p)
  return n.length > 1 && n.endsWith('/') ? n.slice(0, -1) : n
}

/**
 * Whether the kernel would follow a symlink at or below `p` (an absolute path as the walk
 * resolved it): false when the mount it lies on, the last one listed in `mountinfo` on
 * the longest mount point containing it, has the per-mount option `nosymfollow`. True
 * when the table cannot be read: a mount the gateway cannot see is not proven.
 */
export function followsLinks (p: string, mountinfo = SELF_MOUNTINFO): boolean {
  return followsLinksIn(p, readMountTable(mountinfo))
}

/** followsLinks on a table read once for several paths of one judgement (null: unreadable, every path follows links). */
export function followsLinksIn (p: string, table: MountTable | null): boolean {
  if (table === null) return true
  let best = ''
  let options: readonly string[] = []
  for (const m of table) {
    const under = m.point === '/' || p === m.point || p.startsWith(`${m.point}/`)
    if (under && m.point.length >= best.length) {
      best = m.point
      options = m.options
    }
  }
  return best === '' || !options.includes('nosymfollow')
}

export type MountTable = ReadonlyArray<{ point: string, options: readonly string[] }>

const SELF_MOUNTINFO = '/proc/self/mountinfo'

/**
 * The mount table as it is now, or null when it cannot be read. The process's own table
 * is read through one descriptor kept open: a read from offset 0 of a seq_file makes the
 * kernel generate the text anew (mounts and unmounts since are in it; checked with a
 * mount in a private namespace), and it spares the open, fstat and close that were most
 * of a create's policy time after the parse (issue 21). Any error closes the descriptor
 * and reads the file the ordinary way, once.
 */
export function readMountTable (mountinfo = SELF_MOUNTINFO): MountTable | null {
  if (mountinfo === SELF_MOUNTINFO) {
    const bytes = readSelfMountinfo()
    if (bytes !== null) return mountTable(bytes)
  }
  try {
    return mountTable(fs.readFileSync(mountinfo))
  } catch {
    return null
  }
}

let selfFd = -1
let selfBuf = Buffer.allocUnsafe(64 * 1024)
function readSelfMountinfo (): Buffer | null {
  try {
    if (selfFd < 0) selfFd = fs.openSync(SELF_MOUNTINFO, 'r')
    for (;;) {
      const n = fs.readSync(selfFd, selfBuf, 0, selfBuf.length, 0)
      // A full buffer may have cut the table: read it again, whole, into a larger one.
      if (n < selfBuf.length) return selfBuf.subarray(0, n)
      selfBuf = Buffer.allocUnsafe(selfBuf.length * 2)
    }
  } catch {
    if (selfFd >= 0) try { fs.closeSync(selfFd) } catch { /* already gone */ }
    selfFd = -1
    return null
  }
}

/**
 * The mount points and options of a mountinfo text, parsed once per distinct text: the
 * table is read anew for every judgement (mounts change), but splitting a host's
 * hundreds of lines again when nothing changed was most of a create's policy time.
 */
let parsedBytes = Buffer.alloc(0)
let parsedTable: MountTable = []
function mountTable (bytes: Buffer): MountTable {
  if (bytes.equals(parsedBytes)) return parsedTable
  const table: Array<{ point: string, options: readonly string[] }> = []
  for (const line of bytes.toString('utf8').split('\n')) {
    const fields = line.split(' ')
    if (fields.length < 6) continue
    // mountinfo escapes space, tab, newline and backslash as octal (\040 ...).
    const point = fields[4].replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)))
    table.push({ point, options: fields[5].split(',') })
  }
  // A copy: the bytes may be the reused read buffer.
  parsedBytes = Buffer.from(bytes)
  parsedTable = table
  return table
}

/** Linux's limit on symlinks followed in one path walk (MAXSYMLINKS); past it the walk fails with ELOOP. */
const MAX_LINKS = 40

/**
 * Where a host path ends when the engine's runtime walks it on this filesystem: each
 * component in turn, symlinks followed wherever they are (the last component too, and
 * relative targets from the link's directory), `..` taken from where the walk has got to
 * (after a symlink, not lexically). A component that does not exist is a directory the
 * engine will create (dockerd makes a missing `-v` source with MkdirAll, which follows
 * the same links): the walk goes on through it, so what follows a `..` out of it is
 * judged where it really is. A dangling link ends at its target.
 *
 * Null when the walk cannot be made (a loop of links, a component the gateway may not
 * read, a file used as a directory): the caller judges such a path as unresolved.
 */
export function resolveHostPath (p: string): string | null {
  const rest = p.split('/').filter((c) => c !== '' && c !== '.').reverse()
  let at = '/'
  let links = 0
  /** The first component that does not exist, while the walk is at or below it. */
  let missing: string | null = null
  while (rest.length > 0) {
    const c = rest.pop()!
    if (c === '..') {
      at = path.posix.dirname(at)
      if (missing !== null && at !== missing && !at.startsWith(`${missing}/`)) missing = null
      continue
    }
    const next = at === '/' ? `/${c}` : `${at}/${c}`
    if (missing !== null) {
      at = next
      continue
    }
    let stat: fs.Stats | undefined
    try {
      // ENOENT as undefined: a thrown error's stack was most of the walk of a missing path.
      stat = fs.lstatSync(next, { throwIfNoEntry: false })
    } catch {
      return null
    }
    if (stat === undefined) {
      // Created by the engine, empty: nothing below it can be a link yet.
      missing = next
      at = next
      continue
    }
    if (stat.isSymbolicLink()) {
      if (++links > MAX_LINKS) return null
      let target: string
      try {
        target = fs.readlinkSync(next)
      } catch {
        return null
      }
      if (target.startsWith('/')) at = '/'
      rest.push(...target.split('/').filter((x) => x !== '' && x !== '.').reverse())
      continue
    }
    // A file or device with more to walk through: the runtime fails (ENOTDIR), nothing to judge.
    if (!stat.isDirectory() && rest.length > 0) return null
    at = next
  }
  return at
}

export function capability (c: string): string {
  const u = c.trim().toUpperCase()
  return u.startsWith('CAP_') ? u.slice(4) : u
}

/**
 * One spelling per option, as the engine parses them: `seccomp:unconfined` (pre-1.12
 * syntax) is `seccomp=unconfined`, bare `no-new-privileges` is `=true`, and bare
 * `disable` is the legacy form of `label=disable`.
 */
export function securityOption (o: string): string {
  const i = o.search(/[=:]/)
  if (i < 0) return o === 'no-new-privileges' ? 'no-new-privileges=true' : o === 'disable' ? 'label=disable' : o
  return `${o.slice(0, i)}=${o.slice(i + 1)}`
}

/**
 * What a local-driver volume's options take from the host. The local driver passes
 * `type`, `o` and `device` to mount(2): only a tmpfs takes nothing; `o=bind` binds a
 * host directory, `type=ext4 device=/dev/...` a host disk, `type=overlay o=lowerdir=...`
 * host directories. Other drivers are plugins the policy allows or not by name.
 * `bindPath` is the device as written: the facts resolve it with the other host paths.
 */
export function localVolume (driver: string, opts: Json): { hostAccess: boolean, bindPath: string | null } {
  if (driver !== '' && driver !== 'local') return { hostAccess: false, bindPath: null }
  const type = str(opts.type)
  const o = str(opts.o).split(',').map((s) => s.trim())
  const device = str(opts.device)
  const bind = o.includes('bind') || o.includes('rbind') || type === 'none'
  const hostAccess = Object.keys(opts).length > 0 && !(type === 'tmpfs' && !bind && !device.startsWith('/'))
  return { hostAccess, bindPath: bind && device.startsWith('/') ? device : null }
}

/**
 * The kernel's memparse() as tmpfs reads `size=` and `nr_blocks=`: an unsigned number
 * in C notation (`0x` hex, a leading `0` octal), then an optional K, M, G, T, P or E.
 * null when the kernel would refuse it; `relative` for a percentage of the host's RAM.
 */
function memparse (s: string): bigint | 'relative' | null {
  const m = /^(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)([kKmMgGtTpPeE]?)(%?)$/.exec(s)
  if (!m) return null
  const n = BigInt(m[1].length > 1 && m[1][0] === '0' && !/^0[xX]/.test(m[1]) ? '0o' + m[1].slice(1) : m[1])
  if (m[3] === '%') return 'relative'
  const shift = BigInt(10 * (' KMGTPE'.indexOf(m[2].toUpperCase()) || 0))
  return n << shift
}

/**
 * The options of a memory-backed mount as the engine passes them (moby's
 * MergeTmpfsOptions keeps the last value of each data option), and the bytes it may
 * fill: the last `size=` (bytes) or `nr_blocks=` (pages) wins, 0 when the kernel reads
 * no fixed bound (none given, 0, a percentage of RAM, or a value it refuses).
 */
export function tmpfsMount (tokens: readonly string[]): { size: number, options: string[] } {
  let size = 0
  for (const t of tokens) {
    const eq = t.indexOf('=')
    const key = eq < 0 ? t : t.slice(0, eq)
    if (key !== 'size' && key !== 'nr_blocks') continue
    const v = memparse(eq < 0 ? '' : t.slice(eq + 1))
    if (v === null || v === 'relative') { size = 0; continue }
    const bytes = key === 'nr_blocks' ? v * 4096n : v
    size = bytes > BigInt(Number.MAX_SAFE_INTEGER) ? 0 : Number(bytes)
  }
  return { size, options: tokens.map((t) => t.split('=')[0]) }
}

/** `size=64m,mode=1777` (HostConfig.Tmpfs values, a local tmpfs volume's `o`) as the engine splits it. */
export function optionTokens (s: string): string[] {
  return s === '' ? [] : s.split(',')
}

/**
 * A tmpfs Mount as the engine turns it into mount options (ConvertTmpfsOptions): `ro`,
 * `mode=` from Mode, `size=` from SizeBytes (0 or less: none), then API 1.46's Options
 * pairs, later ones winning.
 */
export function tmpfsMountTokens (m: Record<string, unknown>): string[] {
  const o = m.TmpfsOptions !== null && typeof m.TmpfsOptions === 'object' ? m.TmpfsOptions as Record<string, unknown> : {}
  const out: string[] = []
  if (m.ReadOnly === true) out.push('ro')
  const mode = Number(o.Mode ?? 0)
  if (Number.isFinite(mode) && mode !== 0) out.push(`mode=${mode.toString(8)}`)
  const size = Number(o.SizeBytes ?? 0)
  if (Number.isFinite(size) && size > 0) out.push(`size=${Math.floor(size)}`)
  for (const pair of Array.isArray(o.Options) ? o.Options : []) {
    if (Array.isArray(pair) && pair.length > 0) out.push(pair.map(String).slice(0, 2).join('='))
  }
  return out
}

const SIZE_UNITS = ' KMGTP'

/**
 * A log file size as the logging drivers read `max-size` (go-units: `10m`, `1.5 GiB`,
 * `100k`); read with binary units, the larger of the two readings go-units has used
 * (FromHumanSize is decimal, RAMInBytes binary). 0 when unreadable.
 */
export function logSize (s: string): number {
  const m = /^(\d+(?:\.\d+)?) ?([kKmMgGtTpP])?[iI]?[bB]?$/.exec(s)
  if (!m) return 0
  const n = Math.floor(Number(m[1]) * 1024 ** SIZE_UNITS.indexOf((m[2] ?? ' ').toUpperCase()))
  return Number.isFinite(n) ? n : 0
}

/** Go's strconv.Atoi, as the logging drivers read `max-file`; null when it fails. */
export function goAtoi (s: string): number | null {
  return /^[+-]?\d{1,18}$/.test(s) ? Number(s) : null
}
