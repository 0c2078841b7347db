/**
 * Body schemas of Podman's own API (src/api/catalog/libpod.ts), in the tree format
 * of engine-schema.json, written by hand from Podman 4.3's Go types: Podman decodes its
 * bodies with Go's encoding/json exactly like dockerd (field names matched ignoring
 * case, last duplicate wins), so they are decoded and canonicalized the same way.
 *
 * A SpecGenerator has well over a hundred fields, in several embedded structs that
 * flatten into one JSON object. The tree lists the fields the policy's facts read
 * (libpod-facts.ts) and the tenancy stage checks (src/gateway/tenancy/libpod.ts), with
 * Podman's spelling; anything else is kept verbatim, and refused for tenants.
 *
 * A string instead of a tree: the same body as that Docker operation.
 */
type Tree = { t: 'any' } | { t: 'struct', f: Record<string, Tree> } | { t: 'map', v: Tree } | { t: 'array', i: Tree }

const A: Tree = { t: 'any' }
const struct = (f: Record<string, Tree>): Tree => ({ t: 'struct', f })
const map = (v: Tree = A): Tree => ({ t: 'map', v })
const list = (i: Tree = A): Tree => ({ t: 'array', i })
const fields = (names: string): Record<string, Tree> => Object.fromEntries(names.split(/\s+/).filter(Boolean).map((n) => [n, A]))

/** specgen.Namespace */
const NAMESPACE = struct(fields('nsmode value'))
/** An OCI runtime-spec mount. */
const MOUNT = struct({ ...fields('destination type source uidMappings gidMappings'), options: list() })
const NAMED_VOLUME = struct({ ...fields('Name Dest IsAnonymous SubPath'), Options: list() })
const OVERLAY_VOLUME = struct({ ...fields('destination source'), options: list() })
const DEVICE = struct(fields('path type major minor fileMode uid gid'))
const DEVICE_CGROUP = struct(fields('allow type major minor access'))
const RESOURCES = struct({
  devices: list(DEVICE_CGROUP),
  memory: struct(fields('limit reservation swap kernel kernelTCP swappiness disableOOMKiller useHierarchy checkBeforeUpdate')),
  cpu: struct(fields('shares quota period realtimeRuntime realtimePeriod cpus mems idle')),
  pids: struct(fields('limit')),
  ...fields('blockIO hugepageLimits network rdma'),
  unified: map(),
})
const LOG_CONFIG = struct({ ...fields('driver path size'), options: map() })
const PER_NETWORK = struct({ ...fields('static_mac interface_name'), static_ips: list(), aliases: list() })
const PORT_MAPPING = struct(fields('host_ip container_port host_port range protocol'))

const SPEC_GENERATOR = struct({
  // ContainerBasicConfig
  ...fields('name pod stop_signal stop_timeout timeout conmon_pid_file raw_image_name restart_policy restart_tries oci_runtime systemd sdnotifyMode namespace hostname hostusers remove preserve_fds timezone personality init_container_type is_infra passwd_entry group_entry manage_password env_host httpproxy envmerge unsetenvall terminal stdin'),
  entrypoint: list(),
  command: list(),
  env: map(),
  unsetenv: list(),
  labels: map(),
  annotations: map(),
  log_configuration: LOG_CONFIG,
  pidns: NAMESPACE,
  utsns: NAMESPACE,
  sysctl: map(),
  containerCreateCommand: list(),
  dependencyContainers: list(),
  secret_env: map(),
  hostadd: list(),
  // ContainerStorageConfig
  ...fields('image rootfs rootfs_overlay rootfs_propagation image_volume_mode init init_path shm_size work_dir create_working_dir volatile devices_from'),
  volumes_from: list(),
  mounts: list(MOUNT),
  volumes: list(NAMED_VOLUME),
  overlay_volumes: list(OVERLAY_VOLUME),
  image_volumes: list(),
  devices: list(DEVICE),
  device_cgroup_rule: list(DEVICE_CGROUP),
  host_device_list: list(),
  ipcns: NAMESPACE,
  storage_opts: map(),
  secrets: list(),
  chroot_directories: list(),
  // ContainerSecurityConfig
  ...fields('privileged user apparmor_profile seccomp_policy seccomp_profile_path no_new_privileges umask read_only_filesystem read_write_tmpfs label_nested'),
  // storage.IDMappingOptions (no JSON tags: Go's field names)
  idmappings: struct({ ...fields('HostUIDMapping HostGIDMapping AutoUserNs AutoUserNsOpts'), UIDMap: list(), GIDMap: list() }),
  groups: list(),
  cap_add: list(),
  cap_drop: list(),
  selinux_opts: list(),
  userns: NAMESPACE,
  procfs_opts: list(),
  mask: list(),
  unmask: list(),
  // ContainerCgroupConfig
  ...fields('cgroups_mode cgroup_parent'),
  cgroupns: NAMESPACE,
  // ContainerNetworkConfig
  ...fields('publish_image_ports use_image_resolve_conf use_image_hosts'),
  netns: NAMESPACE,
  portmappings: list(PORT_MAPPING),
  expose: map(),
  Networks: map(PER_NETWORK),
  cni_networks: list(),
  network_options: map(),
  dns_server: list(),
  dns_search: list(),
  dns_option: list(),
  // ContainerResourceConfig
  ...fields('oom_score_adj weightDevice throttleReadBpsDevice throttleWriteBpsDevice throttleReadIOPSDevice throttleWriteIOPSDevice'),
  resource_limits: RESOURCES,
  r_limits: list(),
  cgroup_conf: map(),
  // ContainerHealthCheckConfig
  ...fields('healthconfig health_check_on_failure_action startupHealthConfig'),
})

export const LIBPOD_BODIES: Readonly<Record<string, Tree | string>> = {
  ContainerCreateLibpod: SPEC_GENERATOR,
  // handlers.ExecCreateConfig embeds Docker's exec configuration; the start body is Docker's plus h and w.
  ContainerExecLibpod: 'ContainerExec',
  ExecStartLibpod: 'ExecStart',
  // entities.VolumeCreateOptions: Label and Labels are two fields, both applied.
  VolumeCreateLibpod: struct({ ...fields('Name Driver IgnoreIfExists UID GID'), Label: map(), Labels: map(), Options: map() }),
  // types.Network
  NetworkCreateLibpod: struct({
    ...fields('name id driver network_interface created ipv6_enabled internal dns_enabled'),
    subnets: list(),
    routes: list(),
    network_dns_servers: list(),
    labels: map(),
    options: map(),
    ipam_options: map(),
  }),
  // entities.NetworkConnectOptions: the container and types.PerNetworkOptions, embedded.
  NetworkConnectLibpod: struct({ ...fields('container static_mac interface_name'), static_ips: list(), aliases: list() }),
  NetworkDisconnectLibpod: 'NetworkDisconnect',
}
