/**
 * Podman's own API (src/api/catalog/libpod.ts) in the policy's facts: a
 * SpecGenerator (`POST /libpod/containers/create`) and the other libpod bodies say
 * the same things as a Docker ContainerCreate in other words, and the same rules
 * (no-privileged, host-binds, capabilities, no-host-namespaces...) judge them.
 *
 * Where a SpecGenerator field has no Docker counterpart but reaches the host, it is
 * expressed in the nearest fact, so that the shipped rules refuse it: host files
 * Podman reads or writes (rootfs, the log file, conmon's pid file, a seccomp profile,
 * init binary, devices_from, chroot directories) are host paths; a namespace joined
 * by path is the host's; a pod's namespaces are another container's; mounts other
 * than bind and tmpfs are host volumes. Tenants are further limited to the fields
 * the gateway knows (src/gateway/tenancy/libpod.ts).
 */
import { numberOf } from '../api/body/number'
import { capability, localVolume, REMOUNTING_OPS, securityOption, tmpfsMount, type Facts } from './fields'

type Json = Record<string, unknown>
const obj = (v: unknown): Json => (v !== null && typeof v === 'object' && !Array.isArray(v) ? v as Json : {})
const arr = (v: unknown): unknown[] => (Array.isArray(v) ? v : [])
const str = (v: unknown): string => (typeof v === 'string' ? v : '')
const strings = (v: unknown): string[] => arr(v).filter((x): x is string => typeof x === 'string')
const num = (v: unknown): number => {
  const n = numberOf(v)
  return Number.isFinite(n) ? n : 0
}

/** A host path a field names (`/src:O` overlay suffixes and `host:container:perms` device forms cut); resolved with the others in buildInput. */
function hostPath (p: string): string | null {
  const path = p.split(':')[0]
  return path.startsWith('/') ? path : null
}

/**
 * A namespace `{nsmode, value}` as the Docker mode string the facts use: `host`,
 * `container:<ref>`, `ns:<path>` (a namespace file, any process's), the private modes
 * as themselves (`private`, `bridge`, `none`, `shareable`; `default` is ''), and any
 * other mode as `<mode>:<value>`, never read as a network's name (`slirp4netns:...`,
 * `pasta:`, `auto:`, `keep-id:`...): the policy's allow-list (sharedNamespace) refuses
 * what it does not know.
 */
function namespaceMode (ns: unknown): string {
  const { nsmode, value } = obj(ns)
  const mode = str(nsmode)
  const v = str(value)
  switch (mode) {
    case 'host': return 'host'
    case 'path': return `ns:${v}`
    case 'container': return `container:${v}`
    // The pod's infra container's namespaces.
    case 'pod': return 'container:pod'
    case '':
    case 'default':
      return v === '' ? '' : `${mode}:${v}`
    case 'private':
    case 'bridge':
    case 'none':
    case 'shareable':
      if (v === '') return mode
  }
  return `${mode}:${v}`
}

/** `health_check_on_failure_action`: none 0, invalid 1, kill 2, restart 3, stop 4 (libpod/define/healthchecks.go). */
const HEALTH_RESTART = 3

/** Options of a tmpfs that Podman reads itself (copy the image's content up; propagation), not the kernel. */
const PODMAN_TMPFS_OPTIONS = new Set(['tmpcopyup', 'notmpcopyup', 'private', 'rprivate', 'slave', 'rslave', 'shared', 'rshared', 'unbindable', 'runbindable'])

/** OCI mount types that only create something new in the container. */
const PRIVATE_MOUNT_TYPES = new Set(['tmpfs', 'ramfs', 'devpts', 'mqueue'])

function specGeneratorFacts (f: Facts, b: Json): void {
  f.privileged = b.privileged === true
  for (const m of arr(b.mounts).map(obj)) {
    const type = str(m.type)
    const options = strings(m.options)
    // runc binds whatever a bind option is given to, whatever the type says.
    if (!PRIVATE_MOUNT_TYPES.has(type)) f.mountOptions.push(...options.map((o) => o.split('=')[0]))
    if (type === 'bind' || options.includes('bind') || options.includes('rbind')) {
      const p = hostPath(str(m.source))
      if (p) f.hostPaths.push(p)
      else f.hostVolume = true
    } else if (!PRIVATE_MOUNT_TYPES.has(type)) {
      f.hostVolume = true
    }
  }
  // Named volumes' options (`O` overlays them, with upperdir/workdir on the host; `U` chowns; `idmap`...).
  for (const v of arr(b.volumes).map(obj)) f.mountOptions.push(...strings(v.Options).map((o) => o.split('=')[0]))
  for (const o of arr(b.overlay_volumes).map(obj)) {
    const p = hostPath(str(o.source))
    if (p) f.hostPaths.push(p)
  }
  for (const field of ['rootfs', 'conmon_pid_file', 'seccomp_profile_path', 'init_path', 'devices_from']) {
    const p = hostPath(str(b[field]))
    if (p) f.hostPaths.push(p)
  }
  // Logging in the Docker facts' terms: Podman's drivers are k8s-file (json-file is its
  // alias), journald, none and passthrough (the service's own stdio); conmon keeps one
  // k8s-file, truncated at `size` bytes (0 or less: unbounded).
  const log = obj(b.log_configuration)
  f.logDriver = str(log.driver)
  f.logOptions = Object.keys(obj(log.options))
  f.logMaxSize = num(log.size) > 0 ? num(log.size) : 0
  f.logMaxFile = 1
  const logPath = hostPath(str(obj(b.log_configuration).path))
  if (logPath) f.hostPaths.push(logPath)
  for (const d of strings(b.chroot_directories)) {
    const p = hostPath(d)
    if (p) f.hostPaths.push(p)
  }
  f.capAdd = strings(b.cap_add).map(capability)
  f.capDrop = strings(b.cap_drop).map(capability)
  f.devices = [...arr(b.devices).map((d) => str(obj(d).path)), ...strings(b.host_device_list)]
  const resources = obj(b.resource_limits)
  f.deviceCgroupRules = [...arr(b.device_cgroup_rule), ...arr(resources.devices)].map((r) => JSON.stringify(r))
  f.namespaces = {
    network: namespaceMode(b.netns),
    pid: namespaceMode(b.pidns),
    ipc: namespaceMode(b.ipcns),
    uts: namespaceMode(b.utsns),
    userns: namespaceMode(b.userns),
    cgroupns: namespaceMode(b.cgroupns),
  }
  const security: string[] = []
  for (const o of strings(b.selinux_opts)) security.push(`label=${o}`)
  if (str(b.apparmor_profile)) security.push(`apparmor=${str(b.apparmor_profile)}`)
  if (str(b.seccomp_profile_path)) security.push(`seccomp=${str(b.seccomp_profile_path)}`)
  // `image` takes the profile named by the image's label: any profile at all.
  if (str(b.seccomp_policy) && str(b.seccomp_policy) !== 'default') security.push(`seccomp-policy=${str(b.seccomp_policy)}`)
  if (b.no_new_privileges === true) security.push('no-new-privileges=true')
  // Paths unmasked or masked differently from the runtime's defaults: what Docker's MaskedPaths/ReadonlyPaths are.
  if (strings(b.unmask).length || strings(b.mask).length) security.push('systempaths=custom')
  if (str(b.procfs_opts) || strings(b.procfs_opts).length) security.push('procfs=custom')
  // systemd mode mounts the host's cgroup hierarchy (read-write on cgroup v1).
  if (str(b.systemd) === 'always') security.push('systemd=always')
  if (b.label_nested === true) security.push('label=nested')
  f.securityOpt = security.map(securityOption)
  f.sysctls = Object.keys(obj(b.sysctl))
  f.runtime = str(b.oci_runtime)
  f.annotations = Object.keys(obj(b.annotations))
  // A failing health check with the `restart` action (define.HealthCheckOnFailureActionRestart)
  // makes Podman restart the container, mounting its binds again: a restart policy.
  f.restartPolicy = str(b.restart_policy) || (num(b.health_check_on_failure_action) === HEALTH_RESTART ? 'health-restart' : '')
  f.cgroupParent = str(b.cgroup_parent)
  f.volumesFrom = strings(b.volumes_from)
  f.user = str(b.user)
  f.memory = num(obj(resources.memory).limit)
  const cpu = obj(resources.cpu)
  f.nanoCpus = num(cpu.quota) > 0 && num(cpu.period) > 0 ? Math.round(num(cpu.quota) / num(cpu.period) * 1e9) : 0
  f.pidsLimit = num(obj(resources.pids).limit)
  // Host resources the quotas do not count, in the Docker facts' terms (docs/tenancy.md).
  f.shmSize = num(b.shm_size)
  f.oomScoreAdj = num(b.oom_score_adj)
  for (const r of arr(b.r_limits).map(obj)) {
    const limit = (v: unknown): number => (num(v) < 0 ? -1 : num(v))
    f.ulimits.push({ name: str(r.type).toLowerCase().replace(/^rlimit_/, ''), soft: limit(r.soft), hard: limit(r.hard) })
  }
  const memory = obj(resources.memory)
  f.memorySwap = num(memory.swap)
  f.oomKillDisable = memory.disableOOMKiller === true
  f.cpuShares = num(cpu.shares)
  f.cpuRealtimePeriod = num(cpu.realtimePeriod)
  f.cpuRealtimeRuntime = num(cpu.realtimeRuntime)
  const blockIO = obj(resources.blockIO)
  f.blkioWeight = num(blockIO.weight)
  for (const k of ['weightDevice', 'throttleReadBpsDevice', 'throttleWriteBpsDevice', 'throttleReadIOPSDevice', 'throttleWriteIOPSDevice']) {
    f.blkioDevices.push(...Object.keys(obj(b[k])), ...arr(blockIO[k]).map((d) => JSON.stringify(d)))
  }
  const len = (v: unknown): number => arr(v).length
  const keys = (v: unknown): number => Object.keys(obj(v)).length
  f.counts = {
    // A port mapping's range publishes that many ports (at least one).
    ports: arr(b.portmappings).reduce((n: number, p) => n + Math.max(1, num(obj(p).range)), 0) + keys(b.expose),
    mounts: len(b.mounts) + len(b.volumes) + len(b.overlay_volumes) + len(b.image_volumes),
    env: keys(b.env) + len(b.unsetenv),
    devices: len(b.devices) + len(b.device_cgroup_rule) + len(resources.devices) + len(b.host_device_list),
    hosts: len(b.hostadd),
    dns: len(b.dns_server) + len(b.dns_search) + len(b.dns_option),
    ulimits: len(b.r_limits),
    labels: keys(b.labels) + keys(b.annotations),
  }
  // A tmpfs mount's size and options as the kernel reads them (less the options Podman
  // itself reads and adds: tmpcopyup, propagation); a ramfs has no size at all.
  for (const m of arr(b.mounts).map(obj)) {
    if (str(m.type) === 'tmpfs') {
      const t = tmpfsMount(strings(m.options))
      f.tmpfsSizes.push(t.size)
      f.tmpfsOptions.push(...t.options.filter((o) => !PODMAN_TMPFS_OPTIONS.has(o)))
    }
    if (str(m.type) === 'ramfs') f.tmpfsSizes.push(0)
  }
}

/** Fill `f` from a libpod operation's body; operations without security-relevant bodies leave it empty. */
export function libpodFacts (op: string, f: Facts, b: Json): void {
  switch (op) {
    case 'ContainerCreateLibpod':
      specGeneratorFacts(f, b)
      break
    case 'ContainerExecLibpod':
      f.privileged = b.Privileged === true
      f.user = str(b.User)
      break
    case 'VolumeCreateLibpod': {
      // Podman's `image` driver mounts an image, any on the engine: judged as every driver is.
      if (str(b.Driver) !== '') f.volumeDrivers.push(str(b.Driver))
      const v = localVolume(str(b.Driver), obj(b.Options))
      if (v.bindPath) f.hostPaths.push(v.bindPath)
      f.hostVolume = v.hostAccess
      f.tmpfsVolume = (str(b.Driver) === '' || str(b.Driver) === 'local') && str(obj(b.Options).type) === 'tmpfs'
      break
    }
    case 'NetworkCreateLibpod':
      f.networkDriver = str(b.driver) || 'bridge'
      break
  }
}

/** For explain.ts: the SpecGenerator (or other libpod body) field a fact comes from, and the podman flag. */
export function libpodSource (fact: string, op: string): string {
  const exec = op === 'ContainerExecLibpod'
  switch (fact) {
    case 'privileged': return exec ? 'Privileged, podman exec --privileged' : 'privileged, --privileged'
    case 'hostPaths':
    case 'unresolvedHostPaths': return REMOUNTING_OPS.has(op) ? 'the container\'s HostConfig.Binds/Mounts, walked again as the engine mounts them' : op === 'VolumeCreateLibpod' ? 'Options device, -o device=' : 'mounts, overlay_volumes, rootfs, log_configuration.path, conmon_pid_file, seccomp_profile_path, init_path, devices_from, chroot_directories; -v/--mount/--rootfs/--log-opt'
    case 'linkFollowingHostPaths': return REMOUNTING_OPS.has(op) ? 'the container\'s HostConfig.Binds/Mounts, walked again as the engine mounts them' : op === 'VolumeCreateLibpod' ? 'Options device, -o device=' : 'mounts, overlay_volumes, rootfs, log_configuration.path, conmon_pid_file, seccomp_profile_path, init_path, devices_from, chroot_directories; -v/--mount/--rootfs/--log-opt'
    case 'hostVolume': return op === 'VolumeCreateLibpod' ? 'Options, -o' : 'mounts other than bind and tmpfs, --mount'
    case 'tmpfsVolume': return op === 'VolumeCreateLibpod' ? 'Options type=tmpfs, -o type=tmpfs' : 'volume options'
    case 'capAdd': return 'cap_add, --cap-add'
    case 'capDrop': return 'cap_drop, --cap-drop'
    case 'devices': return 'devices, host_device_list; --device'
    case 'deviceCgroupRules': return 'device_cgroup_rule, resource_limits.devices; --device-cgroup-rule'
    case 'namespaces.network': return 'netns, --network'
    case 'namespaces.pid': return 'pidns, --pid'
    case 'namespaces.ipc': return 'ipcns, --ipc'
    case 'namespaces.uts': return 'utsns, --uts'
    case 'namespaces.userns': return 'userns, --userns'
    case 'namespaces.cgroupns': return 'cgroupns, --cgroupns'
    case 'securityOpt': return 'selinux_opts, apparmor_profile, seccomp_policy, no_new_privileges, mask/unmask, procfs_opts, systemd; --security-opt/--systemd'
    case 'sysctls': return 'sysctl, --sysctl'
    case 'runtime': return 'oci_runtime, --runtime'
    case 'annotations': return 'annotations, --annotation'
    case 'restartPolicy': return 'restart_policy, --restart; health_check_on_failure_action restart, --health-on-failure=restart'
    case 'cgroupParent': return 'cgroup_parent, --cgroup-parent'
    case 'volumesFrom': return 'volumes_from, --volumes-from'
    case 'user': return exec ? 'User, podman exec --user' : 'user, --user'
    case 'memory': return 'resource_limits.memory.limit, --memory'
    case 'nanoCpus': return 'resource_limits.cpu.quota/period, --cpus'
    case 'pidsLimit': return 'resource_limits.pids.limit, --pids-limit'
    case 'networkDriver': return 'driver, podman network create --driver'
    case 'counts': return 'portmappings (ranges expanded), expose, mounts, volumes, env, devices, hostadd, dns_*, r_limits, labels, annotations'
    case 'logDriver': return 'log_configuration.driver, --log-driver'
    case 'logOptions': return 'log_configuration.options, --log-opt'
    case 'logMaxSize': return 'log_configuration.size, --log-opt max-size='
    case 'logMaxFile': return 'one k8s-file, truncated at its size'
    case 'shmSize': return 'shm_size, --shm-size'
    case 'oomScoreAdj': return 'oom_score_adj, --oom-score-adj'
    case 'ulimits': return 'r_limits, --ulimit'
    case 'tmpfsSizes': return 'mounts of type tmpfs, --tmpfs/--mount type=tmpfs'
    case 'mountOptions': return 'options of mounts (other than tmpfs) and volumes; -v src:dst:opts/--mount'
    case 'volumeDrivers': return 'Driver, podman volume create --driver'
    case 'memorySwap': return 'resource_limits.memory.swap, --memory-swap'
    case 'oomKillDisable': return 'resource_limits.memory.disableOOMKiller, --oom-kill-disable'
    case 'cpuShares': return 'resource_limits.cpu.shares, --cpu-shares'
    case 'cpuRealtimePeriod': return 'resource_limits.cpu.realtimePeriod, --cpu-rt-period'
    case 'cpuRealtimeRuntime': return 'resource_limits.cpu.realtimeRuntime, --cpu-rt-runtime'
    case 'blkioWeight': return 'resource_limits.blockIO.weight, --blkio-weight'
    case 'blkioDevices': return 'weightDevice, throttle*Device; --blkio-weight-device/--device-*-bps/--device-*-iops'
    default: return ''
  }
}
