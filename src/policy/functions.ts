/**
 * Functions policy conditions may call. Lists in policy files are written as one
 * comma-separated string ('CHOWN,KILL'), since a condition is a single CSV field.
 */

function list (csv: unknown): readonly string[] {
  const text = String(csv ?? '')
  let l = lists.get(text)
  if (l === undefined) {
    l = Object.freeze(text.split(',').map((s) => s.trim()).filter(Boolean))
    remember(lists, text, l)
  }
  return l
}

/**
 * A condition's list arguments are mostly constants of the policy (a few are built per
 * tenant, as '/srv/portcullis/' + r.dom): split once per distinct text, not once per
 * decision (issue 21: a fifth of a create's decision). Bounded, in case a policy builds
 * them from request data.
 */
const lists = new Map<string, readonly string[]>()
const sets = new Map<string, ReadonlySet<string>>()
const CACHED_LISTS = 10_000
function remember<V> (m: Map<string, V>, k: string, v: V): void {
  if (m.size >= CACHED_LISTS) m.clear()
  m.set(k, v)
}
const ulimitCaps = new Map<string, ReadonlyMap<string, number | null>>()
const countCaps = new Map<string, ReadonlyArray<readonly [string, number | null]>>()
function listSet (csv: unknown): ReadonlySet<string> {
  const text = String(csv ?? '')
  let s = sets.get(text)
  if (s === undefined) {
    s = new Set(list(text))
    remember(sets, text, s)
  }
  return s
}

function values (v: unknown): string[] {
  return Array.isArray(v) ? v.map(String) : []
}

/** True if `p` is `prefix` or below it (`/srv/a` is below `/srv`, `/srv-b` is not). */
function under (p: string, prefix: string): boolean {
  const base = prefix.length > 1 && prefix.endsWith('/') ? prefix.slice(0, -1) : prefix
  return p === base || p.startsWith(base === '/' ? '/' : base + '/')
}

/** A ulimit value against a cap: a negative value is RLIM_INFINITY, above every cap. */
function overCap (v: number, cap: number): boolean {
  return v < 0 || v > cap
}

/**
 * Ulimits outside `spec`, a list of allowed names, each either bare (any value) or
 * `name=cap` (soft and hard at most cap, never unlimited): `nofile=1048576,core`.
 */
function ulimitsOutside (ulimits: unknown, spec: unknown): boolean {
  const text = String(spec ?? '')
  let caps = ulimitCaps.get(text)
  if (caps === undefined) {
    caps = new Map(list(text).map((e) => {
      const [name, cap] = e.split('=')
      return [name.toLowerCase(), cap === undefined ? null : Number(cap)] as const
    }))
    remember(ulimitCaps, text, caps)
  }
  const allowed = caps
  return (Array.isArray(ulimits) ? ulimits : []).some((u: unknown) => {
    const { name, soft, hard } = (u ?? {}) as { name?: unknown, soft?: unknown, hard?: unknown }
    const key = String(name ?? '').toLowerCase()
    if (!allowed.has(key)) return true
    const cap = allowed.get(key)
    return cap !== null && cap !== undefined && (overCap(Number(soft), cap) || overCap(Number(hard), cap))
  })
}

/**
 * The namespace modes that give a container a namespace of its own, per namespace, in
 * the forms dockerd and Podman both read that way ('' is the engine's default, which the
 * rewrites and the operator's engine configuration make private).
 */
const PRIVATE_NAMESPACES: Readonly<Record<string, ReadonlySet<string>>> = {
  network: new Set(['', 'default', 'bridge', 'none', 'private']),
  pid: new Set(['', 'private']),
  ipc: new Set(['', 'private', 'shareable', 'none']),
  uts: new Set(['', 'private']),
  userns: new Set(['']),
  cgroupns: new Set(['', 'private']),
}
/** Words that are modes rather than network names to dockerd or Podman (specgen.ParseNetworkFlag). */
const NETWORK_MODE_WORDS = new Set(['host', 'container', 'ns', 'slirp4netns', 'pasta', 'pod', 'path', 'nomap', 'auto', 'keep-id'])
/** A network's name or id as both engines accept one: no `:` (a mode's separator), no `,` (Podman's list of networks). */
const NETWORK_NAME = /^[a-zA-Z0-9][a-zA-Z0-9_.-]*$/

function privateNamespace (which: string, mode: string): boolean {
  if (PRIVATE_NAMESPACES[which]?.has(mode) === true) return true
  return which === 'network' && NETWORK_NAME.test(mode) && !NETWORK_MODE_WORDS.has(mode)
}

export const conditionFunctions = {
  /** The matcher's subject test: `*`, or one of the request's principals. */
  member: (principals: unknown, sub: unknown): boolean => sub === '*' || values(principals).includes(String(sub)),
  /** Some path lies outside every allowed prefix. */
  anyOutside: (paths: unknown, prefixes: unknown): boolean => {
    const allowed = list(prefixes)
    return values(paths).some((p) => !allowed.some((a) => under(p, a)))
  },
  /** Some value is in the list. */
  anyIn: (v: unknown, csv: unknown): boolean => {
    const set = listSet(csv)
    return values(v).some((x) => set.has(x))
  },
  /** Some value is not in the list. */
  anyNotIn: (v: unknown, csv: unknown): boolean => {
    const set = listSet(csv)
    return values(v).some((x) => !set.has(x))
  },
  /** Some value starts with the prefix. */
  anyStartsWith: (v: unknown, prefix: unknown): boolean => values(v).some((x) => x.startsWith(String(prefix))),
  /** Some value starts with none of the comma-separated prefixes. */
  anyNotPrefixed: (v: unknown, prefixes: unknown): boolean => values(v).some((x) => !list(prefixes).some((p) => x.startsWith(p))),
  startsWith: (s: unknown, prefix: unknown): boolean => String(s ?? '').startsWith(String(prefix)),
  count: (v: unknown): number => Array.isArray(v) ? v.length : 0,
  /** Some number lies outside [min, max]. */
  anyNotBetween: (v: unknown, min: unknown, max: unknown): boolean => values(v).map(Number).some((x) => !(x >= Number(min) && x <= Number(max))),
  ulimitsOutside,
  /**
   * Some count is above its cap, given as `name=cap` pairs: `ports=1024,mounts=128`. A
   * count the list does not name is not capped; a name that is no count is an error in
   * the policy, and denies.
   */
  countsOver: (counts: unknown, spec: unknown): boolean => {
    const c = counts !== null && typeof counts === 'object' ? counts as Record<string, unknown> : {}
    const text = String(spec ?? '')
    let caps = countCaps.get(text)
    if (caps === undefined) {
      // null: a malformed cap, which denies.
      caps = list(text).map((e) => {
        const [name, cap] = e.split('=')
        return [name, cap === undefined || !/^\d+$/.test(cap) ? null : Number(cap)] as const
      })
      remember(countCaps, text, caps)
    }
    return caps.some(([name, cap]) => !(name in c) || cap === null || Number(c[name]) > cap)
  },
  /**
   * A user spec whose user or group is root: `root`, `0`, `00`, `+0`, `1000:0`,
   * `x:root` (the engine reads numbers with strconv.Atoi, which takes signs and
   * leading zeros). The empty user is the image's default and is not root by this test.
   */
  isRoot: (user: unknown): boolean => String(user ?? '').split(':').slice(0, 2).some((part) => part === 'root' || (/^[+-]?\d+$/.test(part) && Number(part) === 0)),
  /**
   * Some namespace mode is not a private one for its namespace: an allow-list per
   * namespace, since engines read more forms than `host` and `container:<id>` (Podman
   * takes `ns:<path>` for every namespace, a path under /proc being any process's, the
   * host's included; `slirp4netns:...`, `pasta`, `auto`, `keep-id`... docs/podman.md).
   * A network mode may also name a network (the tenancy stage resolves it).
   */
  sharedNamespace: (ns: unknown, which: unknown): boolean => {
    const modes = ns !== null && typeof ns === 'object' ? ns as Record<string, unknown> : {}
    const keys = which === undefined || which === '*' ? Object.keys(modes) : list(which)
    return keys.some((k) => !privateNamespace(k, String(modes[k] ?? '')))
  },
} as const

/**
 * The type of each function's arguments and result, for the compile-time check of
 * conditions (conditions.ts): `list<string>`, `list<number>`, `list<ulimit>`, `list`
 * (any list), `namespaces`, `string`, `number`, `boolean`, `any`; a trailing `?` marks
 * an optional argument. Every function above must have one (a test checks both ways).
 */
export const functionSignatures: { readonly [K in keyof typeof conditionFunctions]: { readonly args: readonly string[], readonly returns: string } } = {
  member: { args: ['list<string>', 'string'], returns: 'boolean' },
  anyOutside: { args: ['list<string>', 'string'], returns: 'boolean' },
  anyIn: { args: ['list<string>', 'string'], returns: 'boolean' },
  anyNotIn: { args: ['list<string>', 'string'], returns: 'boolean' },
  anyStartsWith: { args: ['list<string>', 'string'], returns: 'boolean' },
  anyNotPrefixed: { args: ['list<string>', 'string'], returns: 'boolean' },
  startsWith: { args: ['string', 'string'], returns: 'boolean' },
  count: { args: ['list'], returns: 'number' },
  anyNotBetween: { args: ['list<number>', 'number', 'number'], returns: 'boolean' },
  ulimitsOutside: { args: ['list<ulimit>', 'string'], returns: 'boolean' },
  isRoot: { args: ['string'], returns: 'boolean' },
  sharedNamespace: { args: ['namespaces', 'string?'], returns: 'boolean' },
  countsOver: { args: ['counts', 'string'], returns: 'boolean' },
}
