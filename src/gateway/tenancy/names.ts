/**
 * Per-tenant names (tenancy.yaml `names: private`). A tenant names its containers,
 * networks and volumes as on an engine of its own; on the engine they are stored as
 * `<tenant>.<name>`, and every answer shows the tenant its plain names again.
 *
 * The form is reversible and cannot collide: a tenant's name never contains a dot
 * (TENANT_NAME; other tenants are refused while names are private), so an engine name
 * splits at its first dot into exactly one tenant and one name, and whatever a tenant
 * calls an object (`b.db` included) is stored under its own prefix (`a.b.db`). Only the
 * tenant's own prefix is ever taken off: names without it (predefined networks, names
 * the engine generated, objects made before names were private) are shown as they are.
 *
 * Admins and other unscoped roles are never qualified: they see the engine's names.
 */
import { parseImageRef } from './images'
import { PREDEFINED_NETWORKS } from './lookup'
import { refuse } from './refusal'

export type NamedKind = 'container' | 'network' | 'volume'

/** Tenants whose names can be qualified: no dot, and a first character every name grammar accepts. */
export const TENANT_NAME = /^[a-zA-Z0-9][a-zA-Z0-9_-]*$/

/**
 * The engine's grammar for container and local volume names (moby daemon/names
 * RestrictedNamePattern). The qualified name always starts with the tenant's letter or
 * digit, so the plain name is checked here, as a private engine would check it.
 */
export const RESTRICTED_NAME = /^[a-zA-Z0-9][a-zA-Z0-9_.-]+$/

/** Network names the engine gives meaning to: never qualified. */
const UNQUALIFIED_NETWORKS = new Set([...PREDEFINED_NETWORKS, 'default'])

/** A copy of `o` with `key` set to `value`, or `o` itself when nothing changes. */
function withField<T> (o: T, key: string, value: unknown): T {
  return (o as any)[key] === value ? o : { ...o, [key]: value }
}

/** `xs` mapped, or `xs` itself when no element changes. */
function mapList (xs: unknown, f: (x: any) => unknown): unknown {
  if (!Array.isArray(xs)) return xs
  const out = xs.map(f)
  return out.every((x, i) => x === xs[i]) ? xs : out
}

// Per-tenant image names (docs/tenancy.md "Per-tenant names").
/**
 * The registry host of tenants' image names on the engine: `.invalid` is reserved (RFC
 * 2606), so no registry answers for it and no pull can put an image there.
 */
export const TENANT_IMAGE_HOST = 'portcullis.invalid'
/** One repository path component (distribution/reference): a tenant must be one to hold image names. */
const IMAGE_COMPONENT = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/

export class Names {
  private readonly prefix: string
  /** `portcullis.invalid/<tenant>/`: the engine form of the tenant's image names; null when the tenant cannot hold one. */
  private readonly imagePrefix: string | null

  /** `tenant` null: names are the engine's (names: engine, or an unscoped role). */
  constructor (readonly tenant: string | null) {
    this.prefix = tenant === null ? '' : `${tenant}.`
    this.imagePrefix = tenant !== null && IMAGE_COMPONENT.test(tenant) ? `${TENANT_IMAGE_HOST}/${tenant}/` : null
  }

  get private (): boolean { return this.tenant !== null }

  /** The engine's name for the tenant's plain name. */
  qualify (kind: NamedKind, plain: string): string {
    if (this.tenant === null || plain === '') return plain
    if (kind === 'network' && UNQUALIFIED_NETWORKS.has(plain)) return plain
    if (kind === 'container') {
      // `/name`, and a link name `parent/alias` (the parent is a container name; the alias is not).
      const lead = plain.startsWith('/') ? '/' : ''
      const rest = plain.slice(lead.length)
      if (rest === '') return plain
      return `${lead}${this.prefix}${rest}`
    }
    return this.prefix + plain
  }

  /** The tenant's plain name for an engine name: its own prefix taken off, any other name as it is. */
  plain (kind: NamedKind, name: string): string {
    if (this.tenant === null) return name
    if (kind === 'container') {
      const lead = name.startsWith('/') ? '/' : ''
      return lead + this.strip(name.slice(lead.length))
    }
    return this.strip(name)
  }

  private strip (name: string): string {
    return name.startsWith(this.prefix) && name.length > this.prefix.length ? name.slice(this.prefix.length) : name
  }

  /** An engine message naming the tenant's objects (`Conflict. The container name "/a.db" is already in use`), in plain names. */
  text (message: string): string {
    if (this.tenant === null) return message
    const at = new RegExp(`(^|[^a-zA-Z0-9_.-])${this.tenant.replace(/[-]/g, '\\-')}\\.(?=[a-zA-Z0-9])`, 'g')
    return this.imageText(message).replace(at, '$1')
  }

  /** A `/child:/parent/alias` link as the engine shows it in HostConfig.Links. */
  private link (l: unknown): unknown {
    if (typeof l !== 'string') return l
    const at = l.indexOf(':')
    if (at < 0) return this.plain('container', l)
    const out = `${this.plain('container', l.slice(0, at))}:${this.plain('container', l.slice(at + 1))}`
    return out === l ? l : out
  }

  /** A network mode or endpoint key: a network's name unless it is a mode (`container:`, `default`...). */
  private networkMode (m: unknown): unknown {
    if (typeof m !== 'string' || m.startsWith('container:') || UNQUALIFIED_NETWORKS.has(m)) return m
    return this.plain('network', m)
  }

  /** A `Binds` entry `source:target[:mode]` whose source is a volume name. */
  private bind (b: unknown): unknown {
    if (typeof b !== 'string') return b
    const at = b.indexOf(':')
    if (at <= 0) return b
    const src = b.slice(0, at)
    if (src.includes('/')) return b
    const plain = this.plain('volume', src)
    return plain === src ? b : plain + b.slice(at)
  }

  private networksMap (networks: unknown, own?: string): unknown {
    if (networks === null || typeof networks !== 'object' || Array.isArray(networks)) return networks
    const entries = Object.entries(networks)
    const out = entries.map(([k, v]) => [this.networkMode(k) as string, this.endpoint(v, own)] as const)
    return out.every(([k, v], i) => k === entries[i][0] && v === entries[i][1]) ? networks : Object.fromEntries(out)
  }

  /**
   * An endpoint of a container: its `Links` (`<engine name>:alias`) in plain names, and
   * without the alias the gateway added for the container's own plain name (plainNameAliases
   * in operations.ts: the network's DNS answers it as a private engine answers the name,
   * which an engine lists in no Aliases).
   */
  private endpoint (ep: any, own?: string): any {
    if (ep === null || typeof ep !== 'object') return ep
    let out = withField(ep, 'Links', mapList(ep.Links, (l) => this.link(l)))
    if (own !== undefined && Array.isArray(out.Aliases) && out.Aliases.includes(own)) out = { ...out, Aliases: out.Aliases.filter((a: unknown) => a !== own) }
    return out
  }

  /**
   * A container as a list, inspect or df shows it, in plain names: Name, Names (link names
   * too), HostConfig's NetworkMode, Links, Binds and volume Mounts, Mounts' volume names,
   * and the keys of NetworkSettings.Networks.
   */
  container<T> (c: T): T {
    if (this.tenant === null || c === null || typeof c !== 'object') return c
    let out: any = c
    if (typeof out.Name === 'string') out = withField(out, 'Name', this.plain('container', out.Name))
    out = withField(out, 'Names', mapList(out.Names, (n) => typeof n === 'string' ? this.plain('container', n) : n))
    const hc = out.HostConfig
    if (hc !== null && typeof hc === 'object') {
      let h = withField(hc, 'NetworkMode', this.networkMode(hc.NetworkMode))
      h = withField(h, 'Links', mapList(h.Links, (l) => this.link(l)))
      h = withField(h, 'Binds', mapList(h.Binds, (b) => this.bind(b)))
      h = withField(h, 'Mounts', mapList(h.Mounts, (m) => m?.Type === 'volume' && typeof m.Source === 'string' ? withField(m, 'Source', this.plain('volume', m.Source)) : m))
      out = withField(out, 'HostConfig', h)
    }
    out = withField(out, 'Mounts', mapList(out.Mounts, (m) => m?.Type === 'volume' && typeof m.Name === 'string' ? withField(m, 'Name', this.plain('volume', m.Name)) : m))
    const ns = out.NetworkSettings
    const own = typeof out.Name === 'string' ? out.Name.replace(/^\//, '') : undefined
    if (ns !== null && typeof ns === 'object') out = withField(out, 'NetworkSettings', withField(ns, 'Networks', this.networksMap(ns.Networks, own)))
    return this.containerImage(out)
  }

  /** A network as its list and inspect show it: Name, and its containers' names. */
  network<T> (n: T): T {
    if (this.tenant === null || n === null || typeof n !== 'object') return n
    let out: any = n
    if (typeof out.Name === 'string') out = withField(out, 'Name', this.networkMode(out.Name))
    const cs = out.Containers
    if (cs !== null && typeof cs === 'object' && !Array.isArray(cs)) {
      const entries = Object.entries(cs)
      const mapped = entries.map(([id, e]: [string, any]) => [id, e !== null && typeof e === 'object' && typeof e.Name === 'string' ? withField(e, 'Name', this.plain('container', e.Name)) : e] as const)
      if (mapped.some(([, e], i) => e !== entries[i][1])) out = { ...out, Containers: Object.fromEntries(mapped) }
    }
    return out
  }

  /** A volume as its list, inspect, create and df show it. */
  volume<T> (v: T): T {
    if (this.tenant === null || v === null || typeof v !== 'object' || typeof (v as any).Name !== 'string') return v
    return withField(v, 'Name', this.plain('volume', (v as any).Name))
  }

  /**
   * An event in plain names: a container's `name` (and a rename's `oldName`), a network's
   * `name`, a volume's ID (a volume's id is its name). Ids, images and labels are left as
   * they are (compose's project labels are labels, not names).
   */
  event<T> (ev: T): T {
    if (this.tenant === null || ev === null || typeof ev !== 'object') return ev
    const e: any = ev
    const actor = e.Actor
    if (actor === null || typeof actor !== 'object') return ev
    let a = actor
    const attrs = a.Attributes
    if (attrs !== null && typeof attrs === 'object') {
      let at = attrs
      if (e.Type === 'container') {
        if (typeof at.name === 'string') at = withField(at, 'name', this.plain('container', at.name))
        if (typeof at.oldName === 'string') at = withField(at, 'oldName', this.plain('container', at.oldName))
      } else if (e.Type === 'network' && typeof at.name === 'string') {
        at = withField(at, 'name', this.networkMode(at.name))
      }
      a = withField(a, 'Attributes', at)
    }
    if (e.Type === 'volume' && typeof a.ID === 'string') a = withField(a, 'ID', this.plain('volume', a.ID))
    a = this.imageEvent(e, a)
    let out = withField(ev, 'Actor', a) as any
    // The legacy top-level fields: a container event's `from` (its image), an image event's `id`.
    if (this.imagePrefix !== null && typeof out.from === 'string') out = withField(out, 'from', this.plainImage(out.from))
    if (this.imagePrefix !== null && e.Type === 'image' && typeof out.id === 'string') out = withField(out, 'id', this.plainImage(out.id))
    return out
  }

  // Per-tenant image names. A tenant's image name is a Docker Hub reference (`myapp`,
  // `library/myapp`, `docker.io/team/app:v2`); on the engine it is stored as
  // `portcullis.invalid/<tenant>/<repository>` (`portcullis.invalid/team-a/myapp:v2`).
  // References naming another registry (`registry:5000/team-a/app`) are registries'
  // names, as the engine's; ids are ids.

  /** Whether image names are qualified for this caller at all. */
  get privateImages (): boolean { return this.tenant !== null }

  /**
   * The engine's name for a tenant's image reference, or null when the reference is not a
   * Docker Hub name (an id, a registry's name, not a reference). Throws when the tenant
   * cannot hold image names (its name is no repository component).
   */
  qualifyImage (ref: string): string | null {
    if (this.tenant === null) return ref
    if (/^sha256:/.test(ref) || /^[0-9a-f]{64}$/.test(ref)) return null
    const parsed = parseImageRef(ref)
    if (parsed === null || parsed.registry !== 'docker.io') return null
    if (this.imagePrefix === null) throw refuse('tenant-names', `tenant ${JSON.stringify(this.tenant)} is no repository name component (lowercase letters and digits, separated by . _ __ or dashes): it cannot hold private image names`)
    const path = parsed.path.startsWith('library/') && !parsed.path.slice(8).includes('/') ? parsed.path.slice(8) : parsed.path
    return `${this.imagePrefix}${path}${parsed.tag !== undefined ? ':' + parsed.tag : ''}${parsed.digest !== undefined ? '@' + parsed.digest : ''}`
  }

  /** The tenant's name for an engine image name (a RepoTag, RepoDigest, event or Config.Image): its own prefix taken off. */
  plainImage (name: string): string {
    if (this.imagePrefix === null || !name.startsWith(this.imagePrefix) || name.length === this.imagePrefix.length) return name
    return name.slice(this.imagePrefix.length)
  }

  /** An image as its list, inspect or df shows it: RepoTags and RepoDigests in the tenant's names. */
  image<T> (i: T): T {
    if (this.imagePrefix === null || i === null || typeof i !== 'object') return i
    let out: any = i
    out = withField(out, 'RepoTags', mapList(out.RepoTags, (t) => typeof t === 'string' ? this.plainImage(t) : t))
    out = withField(out, 'RepoDigests', mapList(out.RepoDigests, (t) => typeof t === 'string' ? this.plainImage(t) : t))
    // A committed image's configs name the container's image (an engine name).
    for (const key of ['Config', 'ContainerConfig']) {
      const cfg = out[key]
      if (cfg !== null && typeof cfg === 'object' && typeof cfg.Image === 'string') out = withField(out, key, withField(cfg, 'Image', this.plainImage(cfg.Image)))
    }
    return out
  }

  /** An image history entry: its `Tags` in the tenant's names. */
  historyEntry<T> (h: T): T {
    if (this.imagePrefix === null || h === null || typeof h !== 'object') return h
    return withField(h, 'Tags', mapList((h as any).Tags, (t) => typeof t === 'string' ? this.plainImage(t) : t))
  }

  /** A container's image as its list (`Image`) and inspect (`Config.Image`) show it. */
  private containerImage (c: any): any {
    if (this.imagePrefix === null) return c
    let out = c
    if (typeof out.Image === 'string') out = withField(out, 'Image', this.plainImage(out.Image))
    const cfg = out.Config
    if (cfg !== null && typeof cfg === 'object' && typeof cfg.Image === 'string') out = withField(out, 'Config', withField(cfg, 'Image', this.plainImage(cfg.Image)))
    return out
  }

  /** An engine message naming the tenant's images (`No such image: portcullis.invalid/team-a/myapp:latest`), in its names. */
  private imageText (message: string): string {
    return this.imagePrefix === null ? message : message.split(this.imagePrefix).join('')
  }

  /** An image event (`Actor.ID` and `name` are the name acted on) or a container event's `image`, in the tenant's names. */
  private imageEvent (e: any, a: any): any {
    if (this.imagePrefix === null) return a
    let out = a
    const attrs = out.Attributes
    if (attrs !== null && typeof attrs === 'object') {
      let at = attrs
      // A commit event names the new image's reference in `imageRef`.
      for (const key of ['image', 'imageRef']) if (typeof at[key] === 'string') at = withField(at, key, this.plainImage(at[key]))
      if (e.Type === 'image' && typeof at.name === 'string') at = withField(at, 'name', this.plainImage(at.name))
      out = withField(out, 'Attributes', at)
    }
    if (e.Type === 'image' && typeof out.ID === 'string') out = withField(out, 'ID', this.plainImage(out.ID))
    return out
  }

  /**
   * A line of a build's, load's or commit's progress stream (`{"stream":"Successfully
   * tagged portcullis.invalid/team-a/myapp:latest\n"}`, `Loaded image: ...`) in the
   * tenant's image names.
   */
  progress<T> (line: T): T {
    if (this.imagePrefix === null || line === null || typeof line !== 'object') return line
    let out: any = line
    for (const key of ['stream', 'status', 'error']) {
      if (typeof out[key] === 'string') out = withField(out, key, this.imageText(out[key]))
    }
    const detail = out.errorDetail
    if (detail !== null && typeof detail === 'object' && typeof detail.message === 'string') out = withField(out, 'errorDetail', withField(detail, 'message', this.imageText(detail.message)))
    return out
  }

  /** A container's stats (`name: "/a.db"`). */
  stats<T> (s: T): T {
    if (this.tenant === null || s === null || typeof s !== 'object' || typeof (s as any).name !== 'string') return s
    return withField(s, 'name', this.plain('container', (s as any).name))
  }
}

/**
 * Whether a plain name passes a list's `name` filter as the engine applies it (moby
 * filters.Args.Match): some value, read as a regular expression, matches it; an
 * expression that does not compile matches nothing. The engine cannot apply it to
 * qualified names, so the gateway applies it to the plain ones.
 */
export function matchesName (patterns: ReadonlySet<string>, names: readonly string[]): boolean {
  if (patterns.size === 0) return true
  for (const p of patterns) {
    let re: RegExp
    try { re = new RegExp(p) } catch { continue }
    if (names.some((n) => re.test(n))) return true
  }
  return false
}
