/**
 * Tenancy settings, declared in the policy directory (tenancy.yaml, named by
 * policy.yaml's `tenancy:` key) so that operators review them with the rules:
 *
 *   unscopedRoles: [admin]            # roles that see and act on every object
 *   imageNamespace: "{tenant}"        # tags and pushes: [registry/]<namespace>/...
 *   registries:
 *     allowed: [docker.io, "127.0.0.1:5000"]   # pull/push/login only from these (and, per tenant,
 *                                      # registries the gateway holds its credentials for);
 *                                      # a loopback registry by its exact port: "127.0.0.1:*" is every port on the host
 *     tenantCredentials: strip        # strip | allow: a tenant's own X-Registry-Auth
 *   info:
 *     hide: [Name, ID, DockerRootDir]  # SystemInfo fields tenants do not see
 *   quotas:
 *     default: { containers: 50, memory: 32GiB, cpus: 16, volumes: 50 }
 *     tenants: { team-a: { containers: 100 } }
 *   builds: { buildkit: false, memory: 2GiB }   # BuildKit sessions; each classic build step's memory limit (default and maximum)
 *   builds: { runAsRoot: users }      # never | users | always: who may run RUN steps as root (users: as `users` lets containers)
 *   services: { withoutNoNewPrivileges: false }  # tenants' services on engines whose API cannot set no-new-privileges
 *   networks: { tenantDefault: true, defaultName: "{tenant}-default" }    # a tenant's default network: its own
 *   redact:
 *     env:                            # environment values in answers, per role
 *       - { roles: [readonly, auditor], keys: all }   # all | sensitive | [name patterns]
 *   views:                            # what unscoped roles see of the containers
 *     - { roles: [traefik], containers: traefik.enable=true }   # a label (key=value or key)
 *   users:
 *     default: "65534:65534"          # uid:gid a tenant's processes run as when it names none
 *     tenants: { team-a: "10001:10001" }
 *     root: [team-ops]                # tenants that may run as root
 *     rootWhenRemapped: true          # root for everyone on an engine with --userns-remap
 *     ownFreshVolumes: true           # a fresh named volume's root is given to the container's uid:gid
 *   names: engine                     # engine | private: tenants' container, network and volume names
 *   images: { shared: [busybox, "alpine:*", "docker.io/library/*"] }   # engine images tenants may use (absent: every unowned named one)
 *
 * Everything is checked when the policy loads; problems are reported with the rest.
 */
import fs from 'node:fs'
import { parse as parseYaml } from 'yaml'

export interface Quota {
  readonly containers?: number
  /** Bytes: the sum of the containers' (and service replicas') memory limits. */
  readonly memory?: number
  /** Nano-CPUs: the sum of the CPU limits. */
  readonly nanoCpus?: number
  readonly volumes?: number
}

/** A numeric user and group, neither of them 0. */
export interface UserGroup { readonly uid: number, readonly gid: number }

/**
 * Who a tenant's containers, execs and service tasks run as (src/gateway/tenancy/users.ts):
 * the tenant's uid:gid when the request names no user, and never root (uid or gid 0,
 * supplementary group 0) unless the tenant is in `root`, or the engine remaps user
 * namespaces (dockerd --userns-remap: root in the container is an unprivileged uid on
 * the host) and `rootWhenRemapped` is true.
 */
export interface UserSettings {
  readonly default: UserGroup
  readonly tenants: Readonly<Record<string, UserGroup>>
  readonly root: readonly string[]
  readonly rootWhenRemapped: boolean
  /**
   * A container's fresh named volume (new, or the tenant's own that no container uses, its
   * root still root's) gets its root owned by the container's uid:gid once created
   * (src/gateway/tenancy/volume-owner.ts).
   */
  readonly ownFreshVolumes: boolean
}

export interface TenancySettings {
  readonly unscopedRoles: readonly string[]
  /** `{tenant}` is replaced by the caller's tenant. */
  readonly imageNamespace: string
  readonly registries: { readonly allowed: readonly string[], readonly tenantCredentials: 'strip' | 'allow' }
  readonly infoHide: readonly string[]
  readonly quotas: { readonly default: Quota, readonly tenants: Readonly<Record<string, Quota>> }
  /**
   * BuildKit builds by tenants: their Dockerfile travels over the session, where the
   * gateway cannot read it (the classic builder's context is inspected), so they are
   * refused unless the operator allows them.
   */
  readonly builds: {
    readonly buildkit: boolean
    /**
     * The memory limit (bytes) of each step container of a tenant's classic build: set
     * when the build names none, and the most a build may ask for (`memory`).
     */
    readonly memory: number
    /**
     * Who may run a classic build's steps (RUN) as root, or as a user named in the image's
     * own /etc/passwd: `users` (default) the tenants that may run containers as root
     * (`users.root`, `users.rootWhenRemapped` on a remapping engine), `never` no tenant,
     * `always` every tenant (the steps are not judged).
     */
    readonly runAsRoot: 'never' | 'users' | 'always'
  }
  /**
   * A tenant's container that asks for the default network (`NetworkMode` empty,
   * `default` or `bridge`) is attached to the tenant's own bridge network instead, which
   * the gateway creates on demand, owner-labelled, named `defaultName` with `{tenant}`
   * replaced (docs/tenancy.md, "The network between tenants").
   */
  readonly networks: { readonly tenantDefault: boolean, readonly defaultName: string }
  /** What answers withhold from some roles (src/gateway/redact.ts applies it). */
  readonly redact: { readonly env: readonly EnvRedaction[] }
  /**
   * Tenants' swarm services. `withoutNoNewPrivileges`: allow them where the request's
   * API (the engine's, or an older one the client names) has no
   * `ContainerSpec.Privileges.NoNewPrivileges` (before 1.44): their tasks then run
   * without no-new-privileges, which a tenant's containers always get. Absent: false.
   */
  readonly services?: { readonly withoutNoNewPrivileges: boolean }
  readonly users: UserSettings
  /** What some unscoped roles see of the containers (absent: everything). */
  readonly views?: readonly ContainerView[]
  /**
   * Container, network and volume names of tenants: `engine` (the engine's one namespace,
   * shared by all) or `private` (each tenant names as on an engine of its own; stored on
   * the engine as `<tenant>.<name>`: src/gateway/tenancy/names.ts). Absent: `engine`.
   */
  readonly names?: 'engine' | 'private'
  /**
   * The engine images (without owner labels) tenants may use by name, id or digest: an
   * image is shared when one of its names matches one of `shared`, and tenants see only
   * those of its names. Absent (`shared: null`): every unowned image that has a name.
   */
  readonly images?: { readonly shared: readonly SharedImagePattern[] | null }
}

/** An entry of `images.shared`, compiled: it matches a normalized reference (`docker.io/library/busybox:latest`). */
export interface SharedImagePattern { readonly pattern: string, readonly re: RegExp }

/**
 * The containers an unscoped role sees: those carrying `label` (`key=value`, or `key`
 * for any value), as the engine's `label` filter reads it; the others answer as missing.
 */
export interface ContainerView {
  readonly roles: readonly string[]
  readonly label: string
}

/**
 * Roles whose answers carry environment values redacted (`NAME=[REDACTED]`): every
 * variable's (`all`), those whose name the audit trail counts as sensitive
 * (`sensitive`: src/audit/redact.ts SENSITIVE_NAME), or those whose name matches one of
 * `patterns` (case-insensitive, `*` matches any run of characters).
 */
export interface EnvRedaction {
  readonly roles: readonly string[]
  readonly keys: 'all' | 'sensitive' | { readonly patterns: readonly string[] }
}

/** Read-only roles do not read secrets: base.csv's readonly, and auditor (readonly across every tenant). */
export const DEFAULT_ENV_REDACTION: readonly EnvRedaction[] = Object.freeze([
  Object.freeze({ roles: Object.freeze(['readonly', 'auditor']), keys: 'all' as const }),
])

export const DEFAULT_INFO_HIDE = Object.freeze([
  'ID', 'Name', 'DockerRootDir', 'HttpProxy', 'HttpsProxy', 'NoProxy', 'Labels', 'SystemStatus', 'Plugins', 'Runtimes',
  'ContainerdCommit', 'RuncCommit', 'InitCommit', 'Warnings', 'KernelVersion', 'OperatingSystem', 'OSVersion', 'IndexServerAddress',
])

export const DEFAULT_TENANCY: TenancySettings = Object.freeze({
  unscopedRoles: Object.freeze(['admin']),
  imageNamespace: '{tenant}',
  registries: Object.freeze({ allowed: Object.freeze(['docker.io']), tenantCredentials: 'strip' as const }),
  infoHide: DEFAULT_INFO_HIDE,
  quotas: Object.freeze({ default: Object.freeze({}), tenants: Object.freeze({}) }),
  builds: Object.freeze({ buildkit: false, memory: 2 * 1024 ** 3, runAsRoot: 'users' as const }),
  services: Object.freeze({ withoutNoNewPrivileges: false }),
  networks: Object.freeze({ tenantDefault: true, defaultName: '{tenant}-default' }),
  redact: Object.freeze({ env: DEFAULT_ENV_REDACTION }),
  // nobody:nogroup; root for nobody, not even on a remapping engine, unless the file says so
  users: Object.freeze({ default: Object.freeze({ uid: 65534, gid: 65534 }), tenants: Object.freeze({}), root: Object.freeze([]), rootWhenRemapped: false, ownFreshVolumes: true }),
})

const KEYS = ['unscopedRoles', 'imageNamespace', 'registries', 'info', 'quotas', 'builds', 'redact', 'users', 'views', 'names', 'services', 'networks', 'images']
/** Linux ids are 32 bits; (uid_t)-1 (4294967295) means "no change" to the kernel and is not an id. */
const MAX_ID = 4294967294
const QUOTA_KEYS = ['containers', 'memory', 'cpus', 'volumes']
const UNITS: Record<string, number> = { '': 1, b: 1, k: 1024, kb: 1024, kib: 1024, m: 1024 ** 2, mb: 1024 ** 2, mib: 1024 ** 2, g: 1024 ** 3, gb: 1024 ** 3, gib: 1024 ** 3, t: 1024 ** 4, tb: 1024 ** 4, tib: 1024 ** 4 }

function stringList (v: unknown, at: string, problems: string[]): string[] | null {
  if (Array.isArray(v) && v.every((x) => typeof x === 'string' && x !== '')) return v
  problems.push(`${at}: expected a list of non-empty strings`)
  return null
}

function mapping (v: unknown, at: string, keys: readonly string[], problems: string[]): Record<string, unknown> | null {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) { problems.push(`${at}: expected a mapping`); return null }
  for (const k of Object.keys(v)) if (!keys.includes(k)) problems.push(`${at}.${k}: unknown key`)
  return v as Record<string, unknown>
}

/** `32GiB`, `512m`, `1073741824` → bytes. */
export function parseBytes (v: unknown): number | null {
  if (typeof v === 'number') return Number.isSafeInteger(v) && v >= 0 ? v : null
  if (typeof v !== 'string') return null
  const m = /^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$/.exec(v)
  const unit = m ? UNITS[m[2].toLowerCase()] : undefined
  if (!m || unit === undefined) return null
  const n = Math.round(Number(m[1]) * unit)
  return Number.isSafeInteger(n) ? n : null
}

function quota (v: unknown, at: string, problems: string[]): Quota {
  const m = mapping(v, at, QUOTA_KEYS, problems)
  if (!m) return {}
  const out: { -readonly [K in keyof Quota]: Quota[K] } = {}
  for (const k of ['containers', 'volumes'] as const) {
    if (m[k] === undefined || m[k] === null) continue
    if (Number.isSafeInteger(m[k]) && (m[k] as number) >= 0) out[k] = m[k] as number
    else problems.push(`${at}.${k}: expected a whole number >= 0`)
  }
  if (m.memory !== undefined && m.memory !== null) {
    const b = parseBytes(m.memory)
    if (b === null) problems.push(`${at}.memory: expected bytes (e.g. 32GiB, 512MiB or a number), got ${JSON.stringify(m.memory)}`)
    else out.memory = b
  }
  if (m.cpus !== undefined && m.cpus !== null) {
    if (typeof m.cpus === 'number' && m.cpus >= 0 && Number.isFinite(m.cpus)) out.nanoCpus = Math.round(m.cpus * 1e9)
    else problems.push(`${at}.cpus: expected a number of CPUs >= 0 (e.g. 4 or 0.5)`)
  }
  return Object.freeze(out)
}

/** `"10001:10001"` → its uid and gid: both numbers, neither 0 (root is granted with `root:`, not by an id). */
function userGroup (v: unknown, at: string, problems: string[]): UserGroup | null {
  const m = typeof v === 'string' ? /^(\d+):(\d+)$/.exec(v) : null
  const uid = m ? Number(m[1]) : NaN
  const gid = m ? Number(m[2]) : NaN
  if (!m || uid > MAX_ID || gid > MAX_ID) {
    problems.push(`${at}: expected a numeric "uid:gid" such as "10001:10001", got ${JSON.stringify(v)} (names are resolved in the container's own /etc/passwd, which the tenant writes)`)
    return null
  }
  if (uid === 0 || gid === 0) {
    problems.push(`${at}: ${JSON.stringify(v)} is root (uid or gid 0); list the tenant under users.root instead`)
    return null
  }
  return Object.freeze({ uid, gid })
}

function users (v: unknown, name: string, problems: string[]): UserSettings {
  const fallback = DEFAULT_TENANCY.users
  const m = mapping(v, `${name}: users`, ['default', 'tenants', 'root', 'rootWhenRemapped', 'ownFreshVolumes'], problems)
  if (!m) return fallback
  const dflt = m.default === undefined ? fallback.default : userGroup(m.default, `${name}: users.default`, problems) ?? fallback.default
  const tenants: Record<string, UserGroup> = {}
  if (m.tenants !== undefined && m.tenants !== null) {
    const t = mapping(m.tenants, `${name}: users.tenants`, Object.keys(m.tenants ?? {}), problems)
    for (const [tenant, ug] of Object.entries(t ?? {})) {
      const parsed = userGroup(ug, `${name}: users.tenants.${tenant}`, problems)
      if (parsed) tenants[tenant] = parsed
    }
  }
  const root = m.root === undefined || m.root === null ? [] : stringList(m.root, `${name}: users.root`, problems) ?? []
  let rootWhenRemapped = fallback.rootWhenRemapped
  if (m.rootWhenRemapped !== undefined) {
    if (typeof m.rootWhenRemapped === 'boolean') rootWhenRemapped = m.rootWhenRemapped
    else problems.push(`${name}: users.rootWhenRemapped: expected true or false`)
  }
  let ownFreshVolumes = fallback.ownFreshVolumes
  if (m.ownFreshVolumes !== undefined) {
    if (typeof m.ownFreshVolumes === 'boolean') ownFreshVolumes = m.ownFreshVolumes
    else problems.push(`${name}: users.ownFreshVolumes: expected true or false`)
  }
  return Object.freeze({ default: dflt, tenants: Object.freeze(tenants), root: Object.freeze([...root]), rootWhenRemapped, ownFreshVolumes })
}

export function compileTenancy (file: string, name: string, problems: string[]): TenancySettings {
  let doc: unknown
  try {
    doc = parseYaml(fs.readFileSync(file, 'utf8'))
  } catch (err) {
    problems.push(`${name}: ${(err as Error).message.split('\n')[0]}`)
    return DEFAULT_TENANCY
  }
  if (doc === null || doc === undefined) return DEFAULT_TENANCY
  const m = mapping(doc, name, KEYS, problems)
  if (!m) return DEFAULT_TENANCY
  const unscopedRoles = m.unscopedRoles === undefined ? DEFAULT_TENANCY.unscopedRoles : stringList(m.unscopedRoles, `${name}: unscopedRoles`, problems) ?? []
  let imageNamespace = DEFAULT_TENANCY.imageNamespace
  if (m.imageNamespace !== undefined) {
    if (typeof m.imageNamespace === 'string' && /^[a-z0-9{}._-]+(\/[a-z0-9{}._-]+)*$/.test(m.imageNamespace) && m.imageNamespace.includes('{tenant}')) imageNamespace = m.imageNamespace
    else problems.push(`${name}: imageNamespace: expected a repository path containing {tenant}, e.g. "{tenant}" or "teams/{tenant}"`)
  }
  let registries = DEFAULT_TENANCY.registries
  if (m.registries !== undefined) {
    const r = mapping(m.registries, `${name}: registries`, ['allowed', 'tenantCredentials'], problems)
    if (r) {
      const allowed = r.allowed === undefined ? registries.allowed : stringList(r.allowed, `${name}: registries.allowed`, problems) ?? []
      const tc = r.tenantCredentials ?? 'strip'
      if (tc !== 'strip' && tc !== 'allow') problems.push(`${name}: registries.tenantCredentials: expected strip or allow`)
      registries = Object.freeze({ allowed: Object.freeze([...allowed]), tenantCredentials: tc === 'allow' ? 'allow' : 'strip' })
    }
  }
  let infoHide = DEFAULT_TENANCY.infoHide
  if (m.info !== undefined) {
    const i = mapping(m.info, `${name}: info`, ['hide'], problems)
    if (i && i.hide !== undefined) infoHide = Object.freeze(stringList(i.hide, `${name}: info.hide`, problems) ?? [])
  }
  let quotas = DEFAULT_TENANCY.quotas
  if (m.quotas !== undefined) {
    const q = mapping(m.quotas, `${name}: quotas`, ['default', 'tenants'], problems)
    if (q) {
      const tenants: Record<string, Quota> = {}
      if (q.tenants !== undefined) {
        const t = mapping(q.tenants, `${name}: quotas.tenants`, Object.keys(q.tenants ?? {}), problems)
        for (const [tenant, v] of Object.entries(t ?? {})) tenants[tenant] = quota(v, `${name}: quotas.tenants.${tenant}`, problems)
      }
      quotas = Object.freeze({ default: q.default === undefined ? {} : quota(q.default, `${name}: quotas.default`, problems), tenants: Object.freeze(tenants) })
    }
  }
  let builds = DEFAULT_TENANCY.builds
  if (m.builds !== undefined) {
    const b = mapping(m.builds, `${name}: builds`, ['buildkit', 'memory', 'runAsRoot'], problems)
    let { buildkit, memory, runAsRoot } = builds
    if (b && b.buildkit !== undefined) {
      if (typeof b.buildkit === 'boolean') buildkit = b.buildkit
      else problems.push(`${name}: builds.buildkit: expected true or false`)
    }
    if (b && b.memory !== undefined) {
      const bytes = parseBytes(b.memory)
      // The engine's smallest memory limit is 6 MiB.
      if (bytes !== null && bytes >= 6 * 1024 ** 2) memory = bytes
      else problems.push(`${name}: builds.memory: expected bytes of at least 6MiB (e.g. 2GiB), got ${JSON.stringify(b.memory)}`)
    }
    if (b && b.runAsRoot !== undefined) {
      if (b.runAsRoot === 'never' || b.runAsRoot === 'users' || b.runAsRoot === 'always') runAsRoot = b.runAsRoot
      else problems.push(`${name}: builds.runAsRoot: expected never, users or always, got ${JSON.stringify(b.runAsRoot)}`)
    }
    builds = Object.freeze({ buildkit, memory, runAsRoot })
  }
  let services = DEFAULT_TENANCY.services
  if (m.services !== undefined) {
    const sv = mapping(m.services, `${name}: services`, ['withoutNoNewPrivileges'], problems)
    if (sv && sv.withoutNoNewPrivileges !== undefined) {
      if (typeof sv.withoutNoNewPrivileges === 'boolean') services = Object.freeze({ withoutNoNewPrivileges: sv.withoutNoNewPrivileges })
      else problems.push(`${name}: services.withoutNoNewPrivileges: expected true or false`)
    }
  }
  let networks = DEFAULT_TENANCY.networks
  if (m.networks !== undefined) {
    const n = mapping(m.networks, `${name}: networks`, ['tenantDefault', 'defaultName'], problems)
    let { tenantDefault, defaultName } = networks
    if (n && n.tenantDefault !== undefined) {
      if (typeof n.tenantDefault === 'boolean') tenantDefault = n.tenantDefault
      else problems.push(`${name}: networks.tenantDefault: expected true or false`)
    }
    if (n && n.defaultName !== undefined) {
      // A network name the engine accepts ([a-zA-Z0-9][a-zA-Z0-9_.-]), with the tenant in it.
      if (typeof n.defaultName === 'string' && /^[a-zA-Z0-9{][a-zA-Z0-9{}_.-]*$/.test(n.defaultName) && n.defaultName.includes('{tenant}')) defaultName = n.defaultName
      else problems.push(`${name}: networks.defaultName: expected a network name containing {tenant}, e.g. "{tenant}-default"`)
    }
    networks = Object.freeze({ tenantDefault, defaultName })
  }
  let redact = DEFAULT_TENANCY.redact
  if (m.redact !== undefined) {
    const r = mapping(m.redact, `${name}: redact`, ['env'], problems)
    if (r && r.env !== undefined) redact = Object.freeze({ env: envRedactions(r.env, `${name}: redact.env`, problems) })
  }
  const userSettings = m.users === undefined ? DEFAULT_TENANCY.users : users(m.users, name, problems)
  const viewList = m.views === undefined ? [] : views(m.views, `${name}: views`, unscopedRoles, problems)
  let names: 'engine' | 'private' = 'engine'
  if (m.names !== undefined) {
    if (m.names === 'engine' || m.names === 'private') names = m.names
    else problems.push(`${name}: names: expected private (each tenant names containers, networks and volumes as on its own engine) or engine (one namespace for all), got ${JSON.stringify(m.names)}`)
  }
  let images: TenancySettings['images'] = Object.freeze({ shared: null })
  if (m.images !== undefined) {
    const i = mapping(m.images, `${name}: images`, ['shared'], problems)
    if (i && i.shared !== undefined && i.shared !== null) {
      const entries = Array.isArray(i.shared) ? i.shared : null
      if (entries === null) problems.push(`${name}: images.shared: expected a list of image references such as busybox, "alpine:*" or "docker.io/library/*"`)
      const out: SharedImagePattern[] = []
      for (const [k, e] of (entries ?? []).entries()) {
        const compiled = typeof e === 'string' ? sharedImagePattern(e) : 'expected a string'
        if (typeof compiled === 'string') problems.push(`${name}: images.shared[${k}]: ${JSON.stringify(e)}: ${compiled}`)
        else out.push(compiled)
      }
      images = Object.freeze({ shared: Object.freeze(out) })
    }
  }
  return Object.freeze({ unscopedRoles: Object.freeze([...unscopedRoles]), imageNamespace, registries, infoHide, quotas, builds, services, networks, redact, users: userSettings, views: viewList, names, images })
}

// images.shared: references as an operator writes them for `docker pull`, with `*`.
const PATTERN_COMPONENT = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/
const PATTERN_TAG = /^[\w][\w.-]{0,127}$/
const PATTERN_DIGEST = /^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[0-9a-fA-F]+$/
const PATTERN_HOST = /^[a-zA-Z0-9.-]+(:\d+)?$/

/**
 * One `images.shared` entry: `busybox` (every tag and digest of docker.io/library/busybox),
 * `busybox:1.36`, `alpine:*`, `docker.io/library/*`, `registry.example:5000/base/*`,
 * `busybox@sha256:...`; `*` alone is every name. Normalized as the engine reads a reference
 * (no registry host: Docker Hub; one component: `library/`). `*` matches any run of
 * characters, across `/` in a repository path but never into its tag. Returns the matcher,
 * or what is wrong with the entry.
 */
export function sharedImagePattern (pattern: string): SharedImagePattern | string {
  if (pattern === '*') return Object.freeze({ pattern, re: /^/ })
  const glob = (s: string, star: string): string => s.split('*').map((x) => x.replace(/[.+?^${}()|[\]\\/]/g, '\\$&')).join(star)
  // Checked with every `*` standing for one letter: the entry must read as a reference.
  const plain = (s: string): string => s.replace(/\*/g, 'a')
  let rest = pattern
  let suffix = '(?:[:@].*)?'
  const at = rest.indexOf('@')
  if (at >= 0) {
    const digest = rest.slice(at + 1)
    if (!PATTERN_DIGEST.test(plain(digest).replace(/:a+$/, ':0'))) return 'not a digest (algorithm:hex) after @'
    suffix = '@' + glob(digest, '.*')
    rest = rest.slice(0, at)
  }
  const colon = rest.lastIndexOf(':')
  if (colon > rest.lastIndexOf('/')) {
    const tag = rest.slice(colon + 1)
    if (at >= 0) return 'give a tag or a digest, not both'
    if (!PATTERN_TAG.test(plain(tag))) return 'not a tag after :'
    suffix = ':' + glob(tag, '.*')
    rest = rest.slice(0, colon)
  }
  const parts = rest.split('/')
  let host = 'docker.io'
  if (parts.length > 1 && (parts[0].includes('.') || parts[0].includes(':') || parts[0] === 'localhost')) {
    host = parts.shift()!
    if (!PATTERN_HOST.test(plain(host))) return `not a registry host: ${host}`
    if (host === 'index.docker.io') host = 'docker.io'
  }
  if (parts.length === 0 || !parts.every((p) => PATTERN_COMPONENT.test(plain(p)))) return 'not an image reference (lowercase repository path components, e.g. busybox or team/app)'
  if (host === 'docker.io' && parts.length === 1 && parts[0] !== '*') parts.unshift('library')
  const re = new RegExp(`^${glob(host, '[^/]*')}/${glob(parts.join('/'), '[^:@]*')}${suffix}$`)
  return Object.freeze({ pattern, re })
}

/**
 * Whether `normalized` (a reference as `docker.io/library/busybox:latest`, `host/path@digest`)
 * is in the shared image set; true for every name when tenancy.yaml sets none.
 */
export function sharedImageName (settings: TenancySettings, normalized: string): boolean {
  const shared = settings.images?.shared
  return shared === null || shared === undefined || shared.some((p) => p.re.test(normalized))
}

/** `views`: a list of `{ roles, containers: LABEL }`, for unscoped roles only (a tenant's view is its tenant). */
function views (v: unknown, at: string, unscoped: readonly string[], problems: string[]): readonly ContainerView[] {
  if (!Array.isArray(v)) { problems.push(`${at}: expected a list of { roles: [...], containers: LABEL }`); return [] }
  const out: ContainerView[] = []
  v.forEach((entry, i) => {
    const e = mapping(entry, `${at}[${i}]`, ['roles', 'containers'], problems)
    if (!e) return
    const roles = stringList(e.roles, `${at}[${i}].roles`, problems)
    for (const r of roles ?? []) if (!unscoped.includes(r)) problems.push(`${at}[${i}].roles: ${r} is not in unscopedRoles (a tenant sees its own objects; views narrow unscoped roles)`)
    if (typeof e.containers !== 'string' || !/^[^=\s]+(=.*)?$/.test(e.containers)) { problems.push(`${at}[${i}].containers: expected a label, key=value or key`); return }
    if (roles) out.push(Object.freeze({ roles: Object.freeze([...roles]), label: e.containers }))
  })
  return Object.freeze(out)
}

/** `redact.env`: a list of `{ roles, keys }`; an empty list redacts nothing for anyone. */
function envRedactions (v: unknown, at: string, problems: string[]): readonly EnvRedaction[] {
  if (!Array.isArray(v)) { problems.push(`${at}: expected a list of { roles: [...], keys: all | sensitive | [patterns] }`); return DEFAULT_ENV_REDACTION }
  const out: EnvRedaction[] = []
  v.forEach((entry, i) => {
    const e = mapping(entry, `${at}[${i}]`, ['roles', 'keys'], problems)
    if (!e) return
    const roles = stringList(e.roles, `${at}[${i}].roles`, problems)
    let keys: EnvRedaction['keys'] | null = null
    if (e.keys === undefined || e.keys === 'all') keys = 'all'
    else if (e.keys === 'sensitive') keys = 'sensitive'
    else if (Array.isArray(e.keys)) {
      const patterns = stringList(e.keys, `${at}[${i}].keys`, problems)
      if (patterns) keys = Object.freeze({ patterns: Object.freeze([...patterns]) })
    } else problems.push(`${at}[${i}].keys: expected all, sensitive or a list of variable name patterns (e.g. ["*_PASSWORD", "API_KEY"])`)
    if (roles && keys !== null) out.push(Object.freeze({ roles: Object.freeze([...roles]), keys }))
  })
  return Object.freeze(out)
}

/** A pattern of tenancy.yaml (a registry host, a variable name; `*` matches any run of characters) as a case-insensitive expression. */
export function globPattern (pattern: string): RegExp {
  return new RegExp(`^${pattern.split('*').map((s) => s.replace(/[.+?^${}()|[\]\\]/g, '\\$&')).join('.*')}$`, 'i')
}

/** The tenant's quota: its own entry's limits over the default's. */
export function quotaFor (settings: TenancySettings, tenant: string): Quota {
  return { ...settings.quotas.default, ...(Object.hasOwn(settings.quotas.tenants, tenant) ? settings.quotas.tenants[tenant] : {}) }
}

/** The uid:gid the tenant's processes run as when it names no user. */
export function userOf (settings: TenancySettings, tenant: string): UserGroup {
  return Object.hasOwn(settings.users.tenants, tenant) ? settings.users.tenants[tenant] : settings.users.default
}

/** Whether tenancy.yaml grants the tenant root whatever the engine (users.root). */
export function rootGranted (settings: TenancySettings, tenant: string): boolean {
  return settings.users.root.includes(tenant)
}

/** Whether `host` (a registry host as in an image reference, e.g. `127.0.0.1:5000`) is allowed. `*` matches any run of characters. */
export function registryAllowed (settings: TenancySettings, host: string): boolean {
  return settings.registries.allowed.some((p) => globPattern(p).test(host))
}
