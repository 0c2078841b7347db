/**
 * Anonymous volumes. A container create makes the engine create a volume without a name
 * for every `Config.Volumes` entry and image `VOLUME` that nothing else is mounted on, for
 * every `Binds` entry that is only a container path, and for every volume mount without a
 * `Source`. The engine puts no label on them: they would have no owner, fall outside the
 * volume quota, and only an admin could remove them. For a tenant the gateway creates each
 * one itself first, as an owned volume (the owner labels VolumeCreate stamps, and
 * ANONYMOUS_LABEL with a token of this create), and the body mounts it by name.
 *
 * What a client relies on is kept: the engine removes only volumes mounted without a name
 * (`rm -v`, `--rm`), so the gateway removes these itself: after the engine's answer to a
 * ContainerDelete with `v` (operations.ts), and on the `destroy` event of a container
 * created with AutoRemove, which carries the token in AUTOREMOVE_LABEL (lookup.ts). A
 * create that fails removes them again.
 */
import { randomBytes } from 'node:crypto'
import { posix } from 'node:path'
import { GatewayError } from '../../api/errors'
import { list, str, type Call } from './call'
import { ANONYMOUS_LABEL, AUTOREMOVE_LABEL, SUBJECT_LABEL, TENANT_LABEL } from './lookup'

/** A volume the gateway makes in place of an anonymous one. */
export interface AnonymousVolume {
  readonly name: string
  readonly driver: string
  readonly driverOpts: Record<string, string>
  readonly labels: Record<string, string>
}

/** Go's filepath.Clean, as the engine cleans a destination before comparing it. */
function clean (p: string): string {
  const n = posix.normalize(p)
  return n.length > 1 && n.endsWith('/') ? n.slice(0, -1) : n
}

/** The destination of a `Binds` entry, read as the engine's linux parser splits it (volume/mounts ParseMountRaw). */
function bindDestination (bind: string): string {
  const parts = bind.split(':')
  return parts.length === 1 ? parts[0] : parts[1]
}

function stringMap (v: unknown): Record<string, string> {
  const out: Record<string, string> = {}
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return out
  for (const [k, x] of Object.entries(v)) if (typeof x === 'string') out[k] = x
  return out
}

/**
 * The anonymous volumes this create would make, each given a name of the gateway's;
 * the body is rewritten to mount them by that name. `imageId`: the image the gateway
 * resolved (its `VOLUME`s are read from its config on the engine). Docker only.
 */
export async function anonymousVolumes (call: Call, imageId: string | undefined): Promise<{ volumes: AnonymousVolume[], token: string }> {
  const token = randomBytes(16).toString('hex')
  const hc = call.body?.HostConfig
  const volumes: AnonymousVolume[] = []
  const make = (driver: string, driverOpts: Record<string, string>, labels: Record<string, string>): string => {
    const name = randomBytes(32).toString('hex')
    volumes.push({ name, driver: driver === '' ? 'local' : driver, driverOpts, labels: { ...labels, [TENANT_LABEL]: call.tenant, [SUBJECT_LABEL]: call.subject, [ANONYMOUS_LABEL]: token } })
    return name
  }
  // What is mounted already: the engine skips a Config.Volumes entry on any of these (container.HasMountFor).
  const mounted = new Set<string>()
  for (const [i, b] of list(hc?.Binds).entries()) {
    const bind = str(b)
    if (bind !== '' && !bind.includes(':')) {
      // Only a container path: an anonymous volume there.
      call.setBody(['HostConfig', 'Binds', String(i)], `${make(str(hc?.VolumeDriver), {}, {})}:${bind}`)
    }
    mounted.add(clean(bindDestination(bind)))
  }
  for (const [i, m] of list(hc?.Mounts).entries()) {
    mounted.add(clean(str(m?.Target)))
    if (str(m?.Type) !== 'volume' || str(m?.Source) !== '') continue
    const opts = m?.VolumeOptions
    call.setBody(['HostConfig', 'Mounts', String(i), 'Source'], make(str(opts?.DriverConfig?.Name), stringMap(opts?.DriverConfig?.Options), stringMap(opts?.Labels)))
  }
  // Tmpfs keys as written: the engine compares them uncleaned (HasMountFor), so a
  // `/data/` tmpfs does not stop an anonymous volume at `/data`.
  for (const t of Object.keys(stringMap(hc?.Tmpfs))) mounted.add(t)
  // Volumes-from (already pinned to the full ids that were checked) bring their mounts.
  for (const v of list(hc?.VolumesFrom)) {
    const r = await call.r.get(`/containers/${encodeURIComponent(str(v).split(':')[0])}/json`)
    for (const m of list(r.body?.Mounts)) mounted.add(clean(str(m?.Destination)))
  }
  const specs = Object.keys(call.body?.Volumes ?? {})
  if (imageId !== undefined) {
    // Known by the image's id from the inspect that resolved it (lookup.ts): the same config.
    const known = call.r.cache.imageVolumes(imageId)
    if (known !== undefined) {
      specs.push(...known)
    } else {
      const r = await call.r.get(`/images/${encodeURIComponent(imageId)}/json`)
      if (r.status !== 200) throw new GatewayError('UPSTREAM_FAILED', `cannot read the VOLUME declarations of image ${imageId} for ${call.op.id}: the engine answered ${r.status}`)
      specs.push(...Object.keys(r.body?.Config?.Volumes ?? {}))
    }
  }
  for (const spec of specs) {
    const dest = clean(spec)
    if (mounted.has(dest)) continue
    mounted.add(dest)
    call.setBody(['HostConfig', 'Mounts'], [...list(call.body?.HostConfig?.Mounts), { Type: 'volume', Source: make(str(hc?.VolumeDriver), {}, {}), Target: dest }])
  }
  if (volumes.length > 0 && hc?.AutoRemove === true) call.setBody(['Labels', AUTOREMOVE_LABEL], token)
  return { volumes, token }
}

/** Create them on the engine, owned; each one made is removed again if the container create does not succeed. */
export async function createAnonymous (call: Call, volumes: readonly AnonymousVolume[]): Promise<void> {
  if (volumes.length === 0) return
  const made: string[] = []
  call.settled.push((status) => {
    if (status >= 200 && status < 300) return
    for (const name of made) void call.r.remove(`/volumes/${encodeURIComponent(name)}`).catch(() => {})
  })
  for (const v of volumes) {
    const r = await call.r.create('/volumes/create', { Name: v.name, Driver: v.driver, DriverOpts: v.driverOpts, Labels: v.labels })
    if (r.status >= 300) throw new GatewayError('CONFLICT', `cannot create an anonymous volume for the container: ${str((r.body as any)?.message)}`)
    made.push(v.name)
  }
}

/**
 * The gateway's anonymous volumes a container mounts, owned by the tenant: what the
 * engine would have removed with it on `rm -v`.
 */
export async function anonymousOf (call: Call, containerId: string): Promise<string[]> {
  const c = await call.r.get(`/containers/${encodeURIComponent(containerId)}/json`)
  const out: string[] = []
  for (const m of list(c.body?.Mounts)) {
    const name = str(m?.Name)
    if (str(m?.Type) !== 'volume' || name === '') continue
    const v = await call.r.get(`/volumes/${encodeURIComponent(name)}`)
    const labels = v.body?.Labels ?? {}
    if (v.status === 200 && typeof labels[ANONYMOUS_LABEL] === 'string' && labels[TENANT_LABEL] === call.tenant) out.push(name)
  }
  return out
}

/** Remove them after the engine removed the container (one still in use elsewhere stays, as the engine leaves it). */
export async function removeAnonymous (call: Call, names: readonly string[]): Promise<void> {
  for (const name of names) await call.r.remove(`/volumes/${encodeURIComponent(name)}`)
}
