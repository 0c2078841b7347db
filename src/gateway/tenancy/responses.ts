/**
 * Answers narrowed to one tenant: SystemInfo's counts and host details,
 * SystemDataUsage's objects, and the event stream.
 */
import { GatewayError } from '../../api/errors'
import { isJsonNumber } from '../../api/body/number'
import { list, type Call } from './call'
import { isPredefinedNetwork, ownerOf, TENANT_LABEL } from './lookup'
import type { EngineKind } from './podman'
import { sharedView } from './shared-images'

/**
 * The zero value of a field's type, so that clients still find the field. (A number may
 * be a JsonNumber: answers holding integers too long for a double are decoded exactly.)
 */
function zero (v: unknown): unknown {
  if (Array.isArray(v)) return []
  if (v === null) return null
  if (isJsonNumber(v)) return 0
  switch (typeof v) {
    case 'string': return ''
    case 'number': return 0
    case 'boolean': return false
    case 'object': return {}
    default: return null
  }
}

function hide (doc: any, path: string): void {
  const keys = path.split('.')
  let node = doc
  for (const k of keys.slice(0, -1)) {
    node = node?.[k]
    if (node === null || typeof node !== 'object') return
  }
  const last = keys[keys.length - 1]
  if (Object.hasOwn(node, last)) node[last] = zero(node[last])
}

export async function filterInfo (call: Call, info: any): Promise<unknown> {
  const containers = await call.r.ownList('container', call.tenant)
  const state = (s: string): number => containers.filter((c) => c.State === s).length
  const images = await visibleImages(call)
  const out = { ...info, Swarm: info?.Swarm ? { ...info.Swarm } : info?.Swarm }
  out.Containers = containers.length
  out.ContainersRunning = state('running')
  out.ContainersPaused = state('paused')
  out.ContainersStopped = containers.length - out.ContainersRunning - out.ContainersPaused
  out.Images = images.length
  for (const p of call.settings.infoHide) hide(out, p)
  return out
}

async function visibleImages (call: Call): Promise<any[]> {
  const r = await call.r.get('/images/json')
  return list(r.body).filter((i) => ownerOf(i?.Labels) === call.tenant || (ownerOf(i?.Labels) === null && sharedView(call.settings, i) !== null))
}

/**
 * Podman's `/system/df` gives every container, image and volume empty `Labels` (measured,
 * 4.3): an unowned look that would show a tenant other tenants' images and none of its
 * own containers or volumes. Their labels are taken from the engine's own lists.
 */
async function podmanDataUsage (call: Call, df: any): Promise<any> {
  // The lists' image ids carry `sha256:`, df's do not.
  const id = (v: unknown): string => String(v).replace(/^sha256:/, '')
  const labelled = async (path: string, key: (o: any) => unknown, at: (b: any) => unknown): Promise<Map<string, unknown>> => {
    const r = await call.r.get(path)
    if (r.status !== 200) throw new GatewayError('UPSTREAM_FAILED', `listing ${path.split('?')[0]} for /system/df failed (${r.status})`)
    return new Map(list(at(r.body)).map((o: any) => [id(key(o)), o?.Labels ?? null]))
  }
  const [containers, images, volumes] = await Promise.all([
    labelled('/containers/json?all=1', (c) => c?.Id, (b) => b),
    labelled('/images/json?all=1', (i) => i?.Id, (b) => b),
    labelled('/volumes', (v) => v?.Name, (b) => b?.Volumes),
  ])
  // An object missing from the list (removed meanwhile) is nobody's: shown to no tenant.
  const gone = { [TENANT_LABEL]: '' }
  const relabel = (xs: unknown, labels: Map<string, unknown>, key: (o: any) => unknown): unknown =>
    Array.isArray(xs) ? xs.map((o: any) => ({ ...o, Labels: labels.has(id(key(o))) ? labels.get(id(key(o))) : gone })) : xs
  return {
    ...df,
    Containers: relabel(df?.Containers, containers, (c) => c?.Id),
    Images: relabel(df?.Images, images, (i) => i?.Id),
    Volumes: relabel(df?.Volumes, volumes, (v) => v?.Name),
  }
}

export async function filterDataUsage (call: Call, df: any): Promise<unknown> {
  if (await call.r.engine() === 'podman') df = await podmanDataUsage(call, df)
  // API 1.52 moved the lists into per-type summaries (ImageUsage.Items...): both shapes are narrowed.
  const containers = list(df?.Containers ?? df?.ContainerUsage?.Items).filter((c) => ownerOf(c?.Labels) === call.tenant)
  // An image's Containers counts every container using it, other tenants' too: only the tenant's own are counted.
  const using = new Map<string, number>()
  for (const c of containers) using.set(String(c?.ImageID), (using.get(String(c?.ImageID)) ?? 0) + 1)
  const images = list(df?.Images ?? df?.ImageUsage?.Items).map((i) => ownerOf(i?.Labels) === call.tenant ? i : ownerOf(i?.Labels) === null ? sharedView(call.settings, i) : null).filter((i) => i !== null)
    .map((i) => (typeof i?.Containers === 'number' || isJsonNumber(i?.Containers)) && Number(i.Containers) >= 0 ? { ...i, Containers: using.get(String(i.Id)) ?? 0 } : i)
  const volumes = list(df?.Volumes ?? df?.VolumeUsage?.Items).filter((v) => ownerOf(v?.Labels) === call.tenant)
  const size = (xs: any[], f: (x: any) => unknown): number => xs.reduce((sum, x) => sum + (Number(f(x)) || 0), 0)
  // Only what the engine sent is answered, rebuilt from what the tenant may see: a field
  // of a newer engine the gateway does not know is left out rather than passed on whole.
  const out: Record<string, unknown> = {}
  if ('LayersSize' in (df ?? {})) out.LayersSize = size(images, (i) => i?.Size)
  if ('Images' in (df ?? {})) out.Images = images
  if ('Containers' in (df ?? {})) out.Containers = containers
  if ('Volumes' in (df ?? {})) out.Volumes = volumes
  if ('BuildCache' in (df ?? {})) out.BuildCache = []
  const summary = (key: string, items: any[], active: (x: any) => boolean, reclaimable: number, total: number): void => {
    const s = df?.[key]
    if (s === undefined || s === null || typeof s !== 'object') return
    out[key] = { ActiveCount: items.filter(active).length, TotalCount: items.length, Reclaimable: reclaimable, TotalSize: total, ...(Array.isArray(s.Items) ? { Items: items } : {}) }
  }
  const unusedImages = images.filter((i) => !(Number(i?.Containers) > 0))
  summary('ImageUsage', images, (i) => Number(i?.Containers) > 0, size(unusedImages, (i) => i?.Size), size(images, (i) => i?.Size))
  const stopped = containers.filter((c) => c?.State !== 'running')
  summary('ContainerUsage', containers, (c) => c?.State === 'running', size(stopped, (c) => c?.SizeRw), size(containers, (c) => c?.SizeRw))
  const unusedVolumes = volumes.filter((v) => !(Number(v?.UsageData?.RefCount) > 0))
  summary('VolumeUsage', volumes, (v) => Number(v?.UsageData?.RefCount) > 0, size(unusedVolumes, (v) => v?.UsageData?.Size), size(volumes, (v) => v?.UsageData?.Size))
  summary('BuildCacheUsage', [], () => false, 0, 0)
  return out
}

/**
 * Which events a tenant sees: those of its own containers (their labels are in the
 * event), images it built, volumes, networks, services, secrets and configs it owns,
 * and the predefined networks' connects of its own containers. Objects are looked up
 * as their events come (remembered per stream, so that their destroy is still seen).
 */
export function filterEvents (call: Call): (event: any) => Promise<boolean> {
  const seen = new Map<string, boolean>()
  const remember = (id: string, mine: boolean): boolean => {
    if (seen.size > 50_000) seen.clear()
    seen.set(id, mine)
    return mine
  }
  const ownBy = async (kind: 'volume' | 'network' | 'service' | 'secret' | 'config', id: string): Promise<boolean> => {
    const known = seen.get(`${kind}:${id}`)
    if (known !== undefined) return known
    let mine = false
    try {
      const res = kind === 'volume' ? await call.r.volume(id, call.tenant) : kind === 'network' ? await call.r.network(id, call.tenant) : await call.r[kind](id, call.tenant)
      mine = res.state === 'own'
    } catch { mine = false }
    return remember(`${kind}:${id}`, mine)
  }
  // Asked once, and only when a predefined network's event needs it.
  let engine: Promise<EngineKind> | undefined
  const engineKind = async (): Promise<EngineKind> => await (engine ??= call.r.engine().catch(() => 'docker' as const))
  return async (ev: any): Promise<boolean> => {
    const attrs = ev?.Actor?.Attributes ?? {}
    const id = String(ev?.Actor?.ID ?? ev?.id ?? '')
    switch (ev?.Type) {
      case 'container': return attrs[TENANT_LABEL] === call.tenant
      case 'image': return attrs[TENANT_LABEL] === call.tenant
      // Podman's volume events carry no id: the volume's name is an attribute.
      case 'volume': return ownBy('volume', id || String(attrs.name ?? ''))
      case 'network': {
        if (await ownBy('network', id)) return true
        if (!isPredefinedNetwork(attrs.name, await engineKind()) || !attrs.container) return false
        const known = seen.get(`container:${attrs.container}`)
        if (known !== undefined) return known
        return remember(`container:${attrs.container}`, (await call.r.container(attrs.container, call.tenant).catch(() => ({ state: 'missing' }))).state === 'own')
      }
      case 'service': case 'secret': case 'config': return ownBy(ev.Type, id)
      default: return false
    }
  }
}

/**
 * The swarm's description without its join tokens: they are credentials (a manager token
 * joins a node as a manager of the swarm). Tenants get it so, and so do the roles whose
 * answers are redacted (gateway/redact.ts).
 */
export function withoutJoinTokens (doc: unknown): unknown {
  return doc !== null && typeof doc === 'object' && !Array.isArray(doc) && 'JoinTokens' in doc ? { ...doc, JoinTokens: { Worker: '', Manager: '' } } : doc
}
