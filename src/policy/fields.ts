/**
 * The shape of the policy's facts, and the normalizers that give each host-facing
 * value one spelling (host paths, capabilities, security options, local volume
 * options). facts.ts derives the facts of Engine API bodies, libpod-facts.ts those
 * of Podman's; both fill this shape with these normalizers.
 */
import fs from 'node:fs'
import path from 'node:path'

type Json = Record<string, unknown>

function str (v: unknown): string {
  return typeof v === 'string' ? v : ''
}

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
  /**
   * Absolute host paths a container or volume would bind (Binds, bind Mounts, local
   * volumes with `o=bind`). Where the gateway shares the engine's filesystem, each is
   * where the runtime's walk will end, every symlink followed (resolveHostPath); where
   * it does not, or the walk cannot be made, it is the path as written, cleaned lexically.
   */
  hostPaths: string[]
  /**
   * The host paths among them whose symlinks the gateway could not follow (the engine's
   * filesystem is not the gateway's, or the walk failed), cleaned lexically: a link
   * anywhere in one could lead anywhere. Judged by rule `host-binds-unresolved`.
   */
  unresolvedHostPaths: string[]
  /**
   * The host paths (as in hostPaths) that do not lie on a mount with the `nosymfollow`
   * option (Linux 5.10+: the kernel follows no symlink under it), or whose mount the
   * gateway cannot see (remote mode, a failed walk): a link a tenant plants there between
   * the gateway's walk and the runtime's mount would be followed. Judged by rule
   * `host-binds-symfollow` (issue 18, class 8).
   */
  linkFollowingHostPaths: string[]
  /** A local-driver volume (created, or declared in a mount) whose options mount something from the host: a bind, a block device, an overlay of host directories. */
  hostVolume: boolean
  /**
   * A local-driver volume of `type=tmpfs` (VolumeCreate's DriverOpts, a volume mount's
   * DriverConfig options): host memory held as long as the volume exists, with or
   * without a container, that no memory limit counts. Judged by rule `no-tmpfs-volumes`.
   */
  tmpfsVolume: boolean
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
  /**
   * Keys of the OCI annotations handed to the runtime (HostConfig.Annotations, API 1.43+;
   * Podman's `annotations`): crun reads `run.oci.*` ones as settings of the container.
   */
  annotations: string[]
  /** HostConfig.RestartPolicy.Name (Podman's restart_policy): `''` or `no` when the engine never restarts the container on its own. */
  restartPolicy: string
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
  /**
   * Memory-backed mounts (HostConfig.Tmpfs, tmpfs Mounts, local volumes of type tmpfs):
   * the bytes each may fill, 0 when nothing bounds it but the host's RAM (no size, a
   * size of 0, a percentage of the host's memory, or a size the kernel would not read).
   */
  tmpfsSizes: number[]
  /** Their mount options as given, by name (`size`, `mode`, `exec`, `suid`, `nr_inodes`...). */
  tmpfsOptions: string[]
  /**
   * Options of bind and volume mounts as the engine reads them, by name (`ro`, `rprivate`,
   * `nocopy`; on Podman also `O`, `upperdir`, `workdir`, `U`, `idmap`...): HostConfig.Binds'
   * modes, Mounts' propagation, a SpecGenerator's mounts (other than tmpfs) and named
   * volumes. A Mounts field that Podman's Docker-compatible API would split into more
   * options (it joins them into one `--mount` string, docs/podman.md) is given whole.
   * Judged by rule `mount-options` (an allow-list).
   */
  mountOptions: string[]
  /** The sizes of a create's lists (ListCounts), judged by rule `request-size`; all 0 for other operations. */
  counts: ListCounts
  /** HostConfig.ShmSize in bytes (0: the engine's default). */
  shmSize: number
  /** Ulimits with lower-case names (the engine upper-cases them into RLIMIT_*); -1: unlimited. */
  ulimits: Ulimit[]
  oomKillDisable: boolean
  oomScoreAdj: number
  /** Relative CPU and block-IO weights (0: the engine's default). */
  cpuShares: number
  blkioWeight: number
  /** Host devices named by block-IO weights and throttles (BlkioWeightDevice, BlkioDevice*). */
  blkioDevices: string[]
  cpuRealtimePeriod: number
  cpuRealtimeRuntime: number
  /** HostConfig.MemorySwap: memory plus swap in bytes, -1 unlimited swap, 0 the engine's default. */
  memorySwap: number
  /** Logging: the driver (`''`: the daemon's default), option names, and the disk it may fill. */
  logDriver: string
  logOptions: string[]
  /** Bytes per log file; 0 when nothing bounds it (json-file without max-size, or unreadable). */
  logMaxSize: number
  /** Number of log files kept (json-file 1, local 5 by default); -1 when unreadable. */
  logMaxFile: number
  /** Volume drivers named (VolumeCreate Driver, HostConfig.VolumeDriver, mounts' DriverConfig), when given. */
  volumeDrivers: string[]
  /** A service's task runtime: `container` (or `''`), `plugin`, `attachment`. */
  serviceRuntime: string
  /** A secret's external driver (a plugin the swarm manager calls), `''` when none. */
  secretDriver: string
}

export interface Ulimit { name: string, soft: number, hard: number }

/**
 * How much engine work one create asks for, per list (rule `request-size`): one request
 * publishing a large port range stalled Podman for every tenant for over a minute.
 */
export interface ListCounts {
  /** Published and exposed ports, ranges expanded (ExposedPorts, PortBindings with host ranges; portmappings' range, expose). */
  ports: number
  /** Mounts of every kind (Binds, Mounts, Tmpfs, Volumes; mounts, volumes, overlay and image volumes). */
  mounts: number
  /** Environment entries (Env; env, unsetenv). */
  env: number
  /** Devices, device cgroup rules and requests. */
  devices: number
  /** Extra /etc/hosts entries (ExtraHosts; hostadd). */
  hosts: number
  /** DNS servers, searches and options. */
  dns: number
  ulimits: number
  /** Labels and annotations. */
  labels: number
}

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
export function followsLinks (p: string, mountinfo = '/proc/self/mountinfo'): boolean {
  let text: string
  try {
    text = fs.readFileSync(mountinfo, 'utf8')
  } catch {
    return true
  }
  let best = ''
  let options: string[] = []
  for (const line of text.split('\n')) {
    const fields = line.split(' ')
    if (fields.length < 6) continue
    // mountinfo escapes space, tab, newline and backslash as octal (\040 ...).
    const point = fields[4].replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)))
    const under = point === '/' || p === point || p.startsWith(`${point}/`)
    if (under && point.length >= best.length) {
      best = point
      options = fields[5].split(',')
    }
  }
  return best === '' || !options.includes('nosymfollow')
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
    let stat: fs.Stats
    try {
      stat = fs.lstatSync(next)
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') return null
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
