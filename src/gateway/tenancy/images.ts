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
