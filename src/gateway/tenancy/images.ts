/**
 * Image references as the engine reads them (distribution/reference): an optional
 * registry host (a first component with `.` or `:`, or `localhost`), a repository
 * path, then `:tag` and/or `@digest`. Without a host the registry is Docker Hub.
 */

export interface ImageRef {
  /** `docker.io` for Docker Hub references. */
  readonly registry: string
  /** Repository path without the registry (`library/busybox`, `team-a/app`). */
  readonly path: string
  readonly tag?: string
  readonly digest?: string
}

const COMPONENT = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/
const TAG = /^[\w][\w.-]{0,127}$/
const DIGEST = /^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[0-9a-fA-F]{32,}$/

/** Parse a reference; null when the engine would not read it as a repository reference (an image id, say). */
export function parseImageRef (ref: string): ImageRef | null {
  let rest = ref
  let digest: string | undefined
  const at = rest.indexOf('@')
  if (at >= 0) {
    digest = rest.slice(at + 1)
    rest = rest.slice(0, at)
    if (!DIGEST.test(digest)) return null
  }
  let tag: string | undefined
  const colon = rest.lastIndexOf(':')
  if (colon > rest.lastIndexOf('/')) {
    tag = rest.slice(colon + 1)
    rest = rest.slice(0, colon)
    if (!TAG.test(tag)) return null
  }
  const parts = rest.split('/')
  let registry = 'docker.io'
  if (parts.length > 1 && (parts[0].includes('.') || parts[0].includes(':') || parts[0] === 'localhost' || parts[0] !== parts[0].toLowerCase())) {
    registry = parts.shift()!
    if (!/^[a-zA-Z0-9.-]+(:\d+)?$|^\[[0-9a-fA-F:]+\](:\d+)?$/.test(registry)) return null
  }
  if (parts.length === 0 || !parts.every((p) => COMPONENT.test(p))) return null
  if (registry === 'index.docker.io') registry = 'docker.io'
  if (registry === 'docker.io' && parts.length === 1) parts.unshift('library')
  return { registry, path: parts.join('/'), ...(tag !== undefined ? { tag } : {}), ...(digest !== undefined ? { digest } : {}) }
}

/** Whether the reference's repository lies in `namespace` (a path like `team-a`). */
export function inNamespace (ref: ImageRef, namespace: string): boolean {
  return ref.path.startsWith(namespace + '/')
}

/** The familiar form the engine prints in "No such image" messages: `busybox:latest`. */
export function familiar (ref: string): string {
  // A full id without its algorithm is read as an id (reference.ParseAnyReference).
  if (/^[0-9a-f]{64}$/.test(ref)) return `sha256:${ref}`
  const parsed = parseImageRef(ref)
  if (!parsed || ref.startsWith('sha256:')) return ref
  return parsed.tag === undefined && parsed.digest === undefined ? `${ref}:latest` : ref
}

/** A full or abbreviated image id, as the engine accepts one in place of a reference. */
export function looksLikeImageId (ref: string): boolean {
  return /^sha256:[0-9a-f]{1,64}$/.test(ref) || /^[0-9a-f]{12,64}$/.test(ref)
}

/**
 * Go's `path.Match` pattern (what the engine's `reference` filter uses) as an expression
 * over a whole string, or null when the pattern is malformed (Go's ErrBadPattern).
 * `*` and `?` do not match `/`; `[...]` and `[^...]` are classes of characters and
 * ranges; `\` escapes the next character.
 */
export function pathPattern (pattern: string): RegExp | null {
  const esc = (c: string): string => c.replace(/[\\\]^[-]/g, '\\$&').replace(/[.*+?${}()|/]/g, '\\$&')
  let re = ''
  let i = 0
  while (i < pattern.length) {
    const c = pattern[i++]
    if (c === '*') re += '[^/]*'
    else if (c === '?') re += '[^/]'
    else if (c === '\\') {
      if (i >= pattern.length) return null
      re += esc(pattern[i++])
    } else if (c === '[') {
      let cls = ''
      if (pattern[i] === '^') { cls += '^'; i++ }
      let ranges = 0
      for (;;) {
        if (i >= pattern.length) return null
        if (pattern[i] === ']' && ranges > 0) { i++; break }
        let lo = pattern[i++]
        if (lo === '\\') { if (i >= pattern.length) return null; lo = pattern[i++] } else if (lo === '-' || lo === ']') return null
        let hi = lo
        if (pattern[i] === '-') {
          i++
          if (i >= pattern.length) return null
          hi = pattern[i++]
          if (hi === '\\') { if (i >= pattern.length) return null; hi = pattern[i++] } else if (hi === '-' || hi === ']') return null
        }
        // A reversed range matches nothing in Go (and is an error to RegExp).
        if (hi >= lo) cls += lo === hi ? esc(lo) : `${esc(lo)}-${esc(hi)}`
        ranges++
      }
      // Unlike `*` and `?`, a class may match `/` (Go's matchChunk); `[]` matches nothing, `[^]` anything.
      re += `[${cls}]`
    } else re += esc(c)
  }
  try { return new RegExp(`^${re}$`, 's') } catch { return null }
}

/**
 * Whether a familiar image name (`shopdb:1`, `busybox@sha256:...`, as a list's
 * RepoTags and RepoDigests show it) passes the engine's `reference` filter pattern
 * (distribution/reference FamiliarMatch: the pattern against the name without its tag
 * or digest, or against the whole string).
 */
export function referenceMatches (pattern: RegExp, familiarRef: string): boolean {
  const at = familiarRef.indexOf('@')
  let name = at >= 0 ? familiarRef.slice(0, at) : familiarRef
  const colon = name.lastIndexOf(':')
  if (colon > name.lastIndexOf('/')) name = name.slice(0, colon)
  return pattern.test(name) || pattern.test(familiarRef)
}
