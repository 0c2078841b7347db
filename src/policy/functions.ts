/**
 * Functions policy conditions may call. Lists in policy files are written as one
 * comma-separated string ('CHOWN,KILL'), since a condition is a single CSV field.
 */

function list (csv: unknown): string[] {
  return String(csv ?? '').split(',').map((s) => s.trim()).filter(Boolean)
}

function values (v: unknown): string[] {
  return Array.isArray(v) ? v.map(String) : []
}

/** True if `p` is `prefix` or below it (`/srv/a` is below `/srv`, `/srv-b` is not). */
function under (p: string, prefix: string): boolean {
  const base = prefix.length > 1 && prefix.endsWith('/') ? prefix.slice(0, -1) : prefix
  return p === base || p.startsWith(base === '/' ? '/' : base + '/')
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
    const set = new Set(list(csv))
    return values(v).some((x) => set.has(x))
  },
  /** Some value is not in the list. */
  anyNotIn: (v: unknown, csv: unknown): boolean => {
    const set = new Set(list(csv))
    return values(v).some((x) => !set.has(x))
  },
  /** Some value starts with the prefix. */
  anyStartsWith: (v: unknown, prefix: unknown): boolean => values(v).some((x) => x.startsWith(String(prefix))),
  startsWith: (s: unknown, prefix: unknown): boolean => String(s ?? '').startsWith(String(prefix)),
  count: (v: unknown): number => Array.isArray(v) ? v.length : 0,
  /**
   * A user spec whose user or group is root: `root`, `0`, `00`, `+0`, `1000:0`,
   * `x:root` (the engine reads numbers with strconv.Atoi, which takes signs and
   * leading zeros). The empty user is the image's default and is not root by this test.
   */
  isRoot: (user: unknown): boolean => String(user ?? '').split(':').slice(0, 2).some((part) => part === 'root' || (/^[+-]?\d+$/.test(part) && Number(part) === 0)),
  /** Some namespace mode is `host` or joins another container (`container:<id>`). */
  sharedNamespace: (ns: unknown, which: unknown): boolean => {
    const modes = ns !== null && typeof ns === 'object' ? ns as Record<string, unknown> : {}
    const keys = which === undefined || which === '*' ? Object.keys(modes) : list(which)
    return keys.some((k) => {
      const m = String(modes[k] ?? '')
      return m === 'host' || m.startsWith('container:')
    })
  },
} as const
