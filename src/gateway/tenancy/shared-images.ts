/**
 * The shared image set (tenancy.yaml `images.shared`): which unowned engine images tenants
 * may use. An unowned image is shared when it has a name (lookup.ts `catalogued`) and, with
 * a configured set, one of its names is in the set; a tenant sees only those of its names,
 * and a reference by any other name is answered as missing. Absent: every unowned named
 * image, with all its names.
 */
import { sharedImageName, type TenancySettings } from '../../policy/tenancy'
import { looksLikeImageId, parseImageRef } from './images'
import { catalogued } from './lookup'

/** A name (a RepoTag, a RepoDigest, a tenant's reference) as the set matches it: `docker.io/library/busybox:latest`. */
function normalized (name: string): string | null {
  const p = parseImageRef(name)
  if (p === null) return null
  return `${p.registry}/${p.path}${p.digest !== undefined ? '@' + p.digest : ':' + (p.tag ?? 'latest')}`
}

function configured (settings: TenancySettings): boolean {
  return settings.images?.shared !== null && settings.images?.shared !== undefined
}

function sharedName (settings: TenancySettings, name: unknown): boolean {
  if (typeof name !== 'string') return false
  const n = normalized(name)
  return n !== null && sharedImageName(settings, n)
}

/**
 * An unowned image as a tenant sees it in a list, inspect or df: with only its shared
 * names; null when it is not shared (no name, or none in the set).
 */
export function sharedView<T> (settings: TenancySettings, image: T): T | null {
  if (!catalogued(image as any)) return null
  if (!configured(settings)) return image
  const i = image as any
  const keep = (xs: unknown): unknown => Array.isArray(xs) ? xs.filter((x) => sharedName(settings, x)) : xs
  const tags = keep(i.RepoTags)
  const digests = keep(i.RepoDigests)
  const count = (xs: unknown): number => Array.isArray(xs) ? xs.length : 0
  if (count(tags) === 0 && count(digests) === 0) return null
  if (count(tags) === count(i.RepoTags) && count(digests) === count(i.RepoDigests)) return image
  return { ...i, RepoTags: tags, RepoDigests: digests }
}

/**
 * Whether a tenant's reference reaches an unowned image with these names: by a name, that
 * name must be in the set; by an id or id prefix, one of the image's names must be.
 */
export function sharedReference (settings: TenancySettings, ref: string, names: readonly string[]): boolean {
  if (!configured(settings)) return true
  if (looksLikeImageId(ref) || /^sha256:/.test(ref) || parseImageRef(ref) === null) return names.some((n) => sharedName(settings, n))
  return sharedName(settings, ref)
}
