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
   * volumes with `o=bind`), normalized and, where they exist on this host, with
   * symlinks resolved as the kernel will follow them.
   */
  hostPaths: string[]
  /** A local-driver volume (created, or declared in a mount) whose options mount something from the host: a bind, a block device, an overlay of host directories. */
  hostVolume: boolean
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

/**
 * Normalize a host path the way the kernel will walk it. Symlinks are resolved where
 * the path (or its longest existing ancestor) exists on this host: a tenant may place
 * a link to `/` inside its own directory. This sees the engine's host only when the
 * gateway runs on it (the usual deployment, next to the socket); a link swapped
 * between this check and the engine's mount is not caught (see README).
 */
export function normalizeHostPath (p: string): string {
  const n = path.posix.normalize(p)
  const clean = n.length > 1 && n.endsWith('/') ? n.slice(0, -1) : n
  const rest: string[] = []
  let base = clean
  for (;;) {
    try {
      const real = fs.realpathSync.native(base)
      return rest.length ? path.posix.join(real, ...rest.reverse()) : real
    } catch {
      if (base === '/') return clean
      rest.push(path.posix.basename(base))
      base = path.posix.dirname(base)
    }
  }
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
 */
export function localVolume (driver: string, opts: Json): { hostAccess: boolean, bindPath: string | null } {
  if (driver !== '' && driver !== 'local') return { hostAccess: false, bindPath: null }
  const type = str(opts.type)
  const o = str(opts.o).split(',').map((s) => s.trim())
  const device = str(opts.device)
  const bind = o.includes('bind') || o.includes('rbind') || type === 'none'
  const hostAccess = Object.keys(opts).length > 0 && !(type === 'tmpfs' && !bind && !device.startsWith('/'))
  return { hostAccess, bindPath: bind && device.startsWith('/') ? normalizeHostPath(device) : null }
}
