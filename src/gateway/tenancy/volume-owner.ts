/**
 * Fresh named volumes writable by a tenant's non-root user (tenancy.yaml
 * `users.ownFreshVolumes`, issue 20 item 3). A local volume's root is root's (0755), so
 * a tenant's process, which runs as the tenant's uid:gid, cannot write into a new volume;
 * most database images need to. Once the engine has created the container (and copied the
 * image's content at the mount point into the volume, with that directory's owner and
 * mode), the gateway gives the volume's root to the container's uid:gid through the
 * engine's own archive API: `PUT /containers/{id}/archive` at the mount point's parent with
 * one directory entry named after the mount point. The engine's extraction lchowns an
 * existing directory for such an entry (a `./` entry at the mount point itself is skipped
 * by moby's unpacker), and runs with the container's volumes mounted, so the volume's root
 * changes, not the root filesystem's directory under it.
 *
 * Only a volume that is the tenant's and fresh: one this create makes, or the tenant's own
 * that no container uses, whose root is still root's (an owner someone already gave it
 * stays). Never a volume mounted read-only, never an admin's or another tenant's, never
 * for a container whose user is root or not a numeric uid:gid.
 */
import { GatewayError } from '../../api/errors'
import { list, str, type Call } from './call'
import { volumeName } from './lookup'
import { BLOCK, endOfArchive, writeHeader } from './tar'

interface VolumeMount { readonly name: string, readonly dest: string }

/**
 * The named volumes a create mounts read-write, with their mount points, as the engine reads
 * Binds and Mounts. `hc` is the HostConfig as forwarded: engine (qualified) names under
 * `names: private`, the ones `newVolumes` holds and the engine's filters match.
 */
function namedMounts (hc: any): VolumeMount[] {
  const out: VolumeMount[] = []
  for (const b of list(hc?.Binds)) {
    const parts = str(b).split(':')
    if (parts.length < 2 || !volumeName(parts[0])) continue
    if ((parts[2] ?? '').split(',').includes('ro')) continue
    out.push({ name: parts[0], dest: parts[1] })
  }
  for (const m of list(hc?.Mounts)) {
    if (str(m?.Type) !== 'volume' || !volumeName(str(m?.Source)) || m?.ReadOnly === true) continue
    out.push({ name: str(m.Source), dest: str(m.Target) })
  }
  return out
}

/** A clean absolute container path, or null for the root or a path that is not absolute. */
function cleanDest (dest: string): string | null {
  if (!dest.startsWith('/')) return null
  const parts: string[] = []
  for (const p of dest.split('/')) {
    if (p === '' || p === '.') continue
    if (p === '..') parts.pop()
    else parts.push(p)
  }
  return parts.length === 0 ? null : `/${parts.join('/')}`
}

/**
 * Decided before the create is forwarded (which volumes are fresh: whether a container
 * uses one can only be asked before this one does); returns what to do once the engine
 * has answered with the container's id, or null when there is nothing to do.
 */
export async function freshVolumeOwner (call: Call, hc: any, newVolumes: readonly string[]): Promise<((id: string) => Promise<void>) | null> {
  if (!call.settings.users.ownFreshVolumes) return null
  const user = /^([0-9]+):([0-9]+)$/.exec(str(call.body?.User))
  if (!user || Number(user[1]) === 0 || Number(user[2]) === 0) return null
  const uid = Number(user[1])
  const gid = Number(user[2])
  const fresh: VolumeMount[] = []
  for (const m of namedMounts(hc)) {
    const dest = cleanDest(m.dest)
    if (dest === null) continue
    if (!newVolumes.includes(m.name)) {
      const res = await call.r.volume(m.name, call.tenant)
      if (res.state !== 'own') continue
      // The engine's `volume` filter matches a mount's name or its destination: a match either way counts as in use.
      const used = await call.r.raw('GET', `/containers/json?all=1&filters=${encodeURIComponent(JSON.stringify({ volume: [m.name] }))}`)
      const users = await used.body.json().catch(() => null)
      if (used.statusCode !== 200 || !Array.isArray(users) || users.length > 0) continue
    }
    fresh.push({ name: m.name, dest })
  }
  if (fresh.length === 0) return null
  return async (id) => {
    for (const m of fresh) await ownRoot(call, id, m, uid, gid)
  }
}

/** The mount point's first archive header: the volume root's owner, mode and type as the engine sees them. */
async function rootHeader (call: Call, id: string, dest: string): Promise<Buffer | null> {
  const res = await call.r.raw('GET', `/containers/${id}/archive?path=${encodeURIComponent(dest)}`)
  if (res.statusCode !== 200) { await res.body.dump(); return null }
  const chunks: Buffer[] = []
  let size = 0
  for await (const chunk of res.body) {
    chunks.push(chunk as Buffer)
    size += (chunk as Buffer).length
    if (size >= BLOCK) break
  }
  // Only the first header is read; the rest of a volume's content is not wanted.
  res.body.destroy()
  return size >= BLOCK ? Buffer.concat(chunks).subarray(0, BLOCK) : null
}

const octalAt = (h: Buffer, at: number, len: number): number => parseInt(h.toString('latin1', at, at + len).replace(/[\0 ]+$/, '').trim() || 'x', 8)

async function ownRoot (call: Call, id: string, m: VolumeMount, uid: number, gid: number): Promise<void> {
  const base = m.dest.slice(m.dest.lastIndexOf('/') + 1)
  const parent = m.dest.slice(0, m.dest.lastIndexOf('/')) || '/'
  const h = await rootHeader(call, id, m.dest)
  // A directory named as the mount point (not a link, not a PAX record), still root's.
  if (h === null || h.toString('latin1', 156, 157) !== '5' || h.toString('utf8', 0, 100).replace(/\0+$/, '') !== `${base}/`) return
  if (octalAt(h, 108, 8) !== 0) return
  const mode = octalAt(h, 100, 8)
  const tar = Buffer.concat([writeHeader({ name: `${base}/`, kind: 'dir', size: 0, mode: Number.isFinite(mode) ? mode : 0o755, mtime: Math.floor(Date.now() / 1000), linkname: '', uid, gid }), endOfArchive()])
  const put = await call.r.raw('PUT', `/containers/${id}/archive?path=${encodeURIComponent(parent)}&noOverwriteDirNonDir=true`, tar, { 'content-type': 'application/x-tar' })
  const text = await put.body.text()
  if (put.statusCode !== 200) {
    // The client gets no container it cannot use as asked: removed, and the reason named.
    await (await call.r.raw('DELETE', `/containers/${id}?force=1`)).body.dump()
    throw new GatewayError('CONFLICT', `ContainerCreate for tenant ${call.tenant}: cannot give volume ${call.names.plain('volume', m.name)}'s root to ${uid}:${gid} (users.ownFreshVolumes): ${text.slice(0, 200)}`)
  }
}
