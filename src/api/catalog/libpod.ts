/**
 * Podman's own API (`/v4.3.1/libpod/containers/json`), next to the Docker-compatible one
 * a Podman service also serves. Operation ids are Podman's swagger operation ids
 * (`ContainerCreateLibpod`, `ImageListLibpod`, ...), so the familiar Docker-style
 * prefixes still select them in policy globs (`Container*`) and the `Libpod` suffix
 * selects all of them (`*Libpod`).
 *
 * The rows are the routes Podman 4.3 registers, checked against a running service
 * (test/podman.test.ts); the routes left out (manifests, image scp, artifacts and
 * anything newer) are unknown paths: refused with 404 and never forwarded. Which of
 * these a tenant may use, and how each is scoped, is src/gateway/tenancy/libpod.ts;
 * docs/podman.md lists both.
 *
 * Versions: Podman serves its API under `/v{version}/libpod/...` only (except
 * `/libpod/_ping`), and its version numbers are its own (4.x.y, 5.x.y), unrelated to
 * the Docker API window. The gateway accepts `v` + three numbers within
 * LIBPOD_WINDOW (Podman 5 itself refuses clients older than 4.0.0); anything else
 * in front of `/libpod` is refused, never passed to Podman's lenient router (which
 * takes `/v4/`, `/v1.41/` and `/v9.9.9/` alike).
 */
import { GatewayError } from '../errors'
import type { Operation, Row } from './types'

/** The libpod API versions the gateway understands: 4.0.0 up to (not including) 6.0.0. */
export const LIBPOD_WINDOW = { minVersion: '4.0.0', belowVersion: '6.0.0' } as const

const S = { streams: true } as const
const J = { body: 'json' } as const
/** A body the gateway does not inspect: the operation is for admins only (tenancy/libpod.ts). */
const B = { body: 'stream' } as const

const rows: Row[] = [
  // Containers
  ['GET', '/libpod/containers/json', 'ContainerListLibpod', 'container'],
  ['POST', '/libpod/containers/create', 'ContainerCreateLibpod', 'container', J],
  ['GET', '/libpod/containers/{name}/json', 'ContainerInspectLibpod', 'container'],
  ['GET', '/libpod/containers/{name}/exists', 'ContainerExistsLibpod', 'container'],
  ['DELETE', '/libpod/containers/{name}', 'ContainerDeleteLibpod', 'container'],
  ['POST', '/libpod/containers/{name}/start', 'ContainerStartLibpod', 'container'],
  ['POST', '/libpod/containers/{name}/stop', 'ContainerStopLibpod', 'container'],
  ['POST', '/libpod/containers/{name}/restart', 'ContainerRestartLibpod', 'container'],
  ['POST', '/libpod/containers/{name}/kill', 'ContainerKillLibpod', 'container'],
  ['POST', '/libpod/containers/{name}/pause', 'ContainerPauseLibpod', 'container'],
  ['POST', '/libpod/containers/{name}/unpause', 'ContainerUnpauseLibpod', 'container'],
  ['POST', '/libpod/containers/{name}/init', 'ContainerInitLibpod', 'container'],
  ['POST', '/libpod/containers/{name}/wait', 'ContainerWaitLibpod', 'container', S],
  ['GET', '/libpod/containers/{name}/logs', 'ContainerLogsLibpod', 'container', S],
  ['GET', '/libpod/containers/{name}/top', 'ContainerTopLibpod', 'container', S],
  ['GET', '/libpod/containers/{name}/stats', 'ContainerStatsLibpod', 'container', S],
  ['GET', '/libpod/containers/stats', 'ContainersStatsAllLibpod', 'container', S],
  ['GET', '/libpod/containers/{name}/changes', 'ContainerChangesLibpod', 'container'],
  ['GET', '/libpod/containers/{name}/export', 'ContainerExportLibpod', 'container', S],
  ['POST', '/libpod/containers/{name}/rename', 'ContainerRenameLibpod', 'container'],
  ['POST', '/libpod/containers/{name}/resize', 'ContainerResizeLibpod', 'container'],
  ['POST', '/libpod/containers/{name}/attach', 'ContainerAttachLibpod', 'container', { streams: true, hijack: 'tcp' }],
  ['GET', '/libpod/containers/{name}/archive', 'ContainerArchiveLibpod', 'container', S],
  ['PUT', '/libpod/containers/{name}/archive', 'PutContainerArchiveLibpod', 'container', B],
  ['GET', '/libpod/containers/{name*}/healthcheck', 'ContainerHealthcheckLibpod', 'container'],
  ['POST', '/libpod/containers/prune', 'ContainerPruneLibpod', 'container'],
  ['POST', '/libpod/containers/{name}/update', 'ContainerUpdateLibpod', 'container', B],
  ['POST', '/libpod/containers/{name}/mount', 'ContainerMountLibpod', 'container'],
  ['POST', '/libpod/containers/{name}/unmount', 'ContainerUnmountLibpod', 'container'],
  ['GET', '/libpod/containers/showmounted', 'ContainerShowMountedLibpod', 'container'],
  ['POST', '/libpod/containers/{name}/checkpoint', 'ContainerCheckpointLibpod', 'container', S],
  ['POST', '/libpod/containers/{name}/restore', 'ContainerRestoreLibpod', 'container', { body: 'stream', streams: true }],
  ['POST', '/libpod/containers/{name}/exec', 'ContainerExecLibpod', 'exec', J],

  // Exec
  // ExecStartLibpod hijacks unless its body says Detach, like ExecStart.
  ['POST', '/libpod/exec/{id}/start', 'ExecStartLibpod', 'exec', { body: 'json', streams: true, hijack: 'tcp' }],
  ['POST', '/libpod/exec/{id}/resize', 'ExecResizeLibpod', 'exec'],
  ['GET', '/libpod/exec/{id}/json', 'ExecInspectLibpod', 'exec'],

  // Images
  ['GET', '/libpod/images/json', 'ImageListLibpod', 'image'],
  ['GET', '/libpod/images/{name*}/json', 'ImageInspectLibpod', 'image'],
  ['GET', '/libpod/images/{name*}/exists', 'ImageExistsLibpod', 'image'],
  ['GET', '/libpod/images/{name*}/history', 'ImageHistoryLibpod', 'image'],
  ['GET', '/libpod/images/{name*}/tree', 'ImageTreeLibpod', 'image'],
  ['GET', '/libpod/images/{name}/changes', 'ImageChangesLibpod', 'image'],
  ['POST', '/libpod/images/pull', 'ImagePullLibpod', 'image', S],
  ['POST', '/libpod/images/{name*}/tag', 'ImageTagLibpod', 'image'],
  ['POST', '/libpod/images/{name*}/untag', 'ImageUntagLibpod', 'image'],
  ['DELETE', '/libpod/images/{name*}', 'ImageDeleteLibpod', 'image'],
  ['DELETE', '/libpod/images/remove', 'ImageDeleteAllLibpod', 'image'],
  ['POST', '/libpod/images/{name*}/push', 'ImagePushLibpod', 'image', S],
  ['GET', '/libpod/images/{name*}/get', 'ImageGetLibpod', 'image', S],
  ['GET', '/libpod/images/export', 'ImageExportLibpod', 'image', S],
  ['POST', '/libpod/images/load', 'ImageLoadLibpod', 'image', { body: 'stream', streams: true }],
  ['POST', '/libpod/images/import', 'ImageImportLibpod', 'image', { body: 'stream', streams: true }],
  ['GET', '/libpod/images/search', 'ImageSearchLibpod', 'image'],
  ['POST', '/libpod/images/prune', 'ImagePruneLibpod', 'image'],
  ['POST', '/libpod/commit', 'ImageCommitLibpod', 'image'],
  ['POST', '/libpod/build', 'ImageBuildLibpod', 'build', { body: 'stream', streams: true }],

  // Volumes
  ['GET', '/libpod/volumes/json', 'VolumeListLibpod', 'volume'],
  ['POST', '/libpod/volumes/create', 'VolumeCreateLibpod', 'volume', J],
  ['GET', '/libpod/volumes/{name}/json', 'VolumeInspectLibpod', 'volume'],
  ['GET', '/libpod/volumes/{name}/exists', 'VolumeExistsLibpod', 'volume'],
  ['DELETE', '/libpod/volumes/{name}', 'VolumeDeleteLibpod', 'volume'],
  ['POST', '/libpod/volumes/prune', 'VolumePruneLibpod', 'volume'],

  // Networks
  ['GET', '/libpod/networks/json', 'NetworkListLibpod', 'network'],
  ['POST', '/libpod/networks/create', 'NetworkCreateLibpod', 'network', J],
  ['GET', '/libpod/networks/{name}/json', 'NetworkInspectLibpod', 'network'],
  ['GET', '/libpod/networks/{name}/exists', 'NetworkExistsLibpod', 'network'],
  ['DELETE', '/libpod/networks/{name}', 'NetworkDeleteLibpod', 'network'],
  ['POST', '/libpod/networks/{name}/connect', 'NetworkConnectLibpod', 'network', J],
  ['POST', '/libpod/networks/{name}/disconnect', 'NetworkDisconnectLibpod', 'network', J],
  ['POST', '/libpod/networks/prune', 'NetworkPruneLibpod', 'network'],

  // Pods
  ['GET', '/libpod/pods/json', 'PodListLibpod', 'pod'],
  ['POST', '/libpod/pods/create', 'PodCreateLibpod', 'pod', B],
  ['GET', '/libpod/pods/{name}/json', 'PodInspectLibpod', 'pod'],
  ['GET', '/libpod/pods/{name}/exists', 'PodExistsLibpod', 'pod'],
  ['DELETE', '/libpod/pods/{name}', 'PodDeleteLibpod', 'pod'],
  ['POST', '/libpod/pods/{name}/start', 'PodStartLibpod', 'pod'],
  ['POST', '/libpod/pods/{name}/stop', 'PodStopLibpod', 'pod'],
  ['POST', '/libpod/pods/{name}/restart', 'PodRestartLibpod', 'pod'],
  ['POST', '/libpod/pods/{name}/kill', 'PodKillLibpod', 'pod'],
  ['POST', '/libpod/pods/{name}/pause', 'PodPauseLibpod', 'pod'],
  ['POST', '/libpod/pods/{name}/unpause', 'PodUnpauseLibpod', 'pod'],
  ['GET', '/libpod/pods/{name}/top', 'PodTopLibpod', 'pod', S],
  ['GET', '/libpod/pods/stats', 'PodStatsAllLibpod', 'pod', S],
  ['POST', '/libpod/pods/prune', 'PodPruneLibpod', 'pod'],

  // Secrets
  ['GET', '/libpod/secrets/json', 'SecretListLibpod', 'secret'],
  ['POST', '/libpod/secrets/create', 'SecretCreateLibpod', 'secret', B],
  ['GET', '/libpod/secrets/{name}/json', 'SecretInspectLibpod', 'secret'],
  ['DELETE', '/libpod/secrets/{name}', 'SecretDeleteLibpod', 'secret'],

  // Kubernetes YAML and systemd units
  ['GET', '/libpod/generate/{name*}/systemd', 'GenerateSystemdLibpod', 'system'],
  ['GET', '/libpod/generate/kube', 'GenerateKubeLibpod', 'system'],
  ['GET', '/libpod/kube/generate', 'KubeGenerateLibpod', 'system'],
  ['POST', '/libpod/play/kube', 'PlayKubeLibpod', 'system', B],
  ['DELETE', '/libpod/play/kube', 'PlayKubeDownLibpod', 'system', B],
  ['POST', '/libpod/kube/play', 'KubePlayLibpod', 'system', B],
  ['DELETE', '/libpod/kube/play', 'KubePlayDownLibpod', 'system', B],

  // System
  ['GET', '/libpod/_ping', 'SystemPingLibpod', 'system'],
  ['HEAD', '/libpod/_ping', 'SystemPingHeadLibpod', 'system'],
  ['GET', '/libpod/version', 'SystemVersionLibpod', 'system'],
  ['GET', '/libpod/info', 'SystemInfoLibpod', 'system'],
  ['GET', '/libpod/events', 'SystemEventsLibpod', 'system', S],
  ['GET', '/libpod/system/df', 'SystemDataUsageLibpod', 'system'],
  ['POST', '/libpod/system/prune', 'SystemPruneLibpod', 'system'],
]

/** Catalog rows (operations.ts appends them): matched only under a libpod version; in no Engine API spec file. */
export const libpodRows: readonly Row[] =
  rows.map(([method, path, id, kind, extra]) => [method, path, id, kind, { ...extra, libpod: true, unlisted: true }])

/** Podman answers these without a version in the path too. */
const UNVERSIONED = new Set(['SystemPingLibpod', 'SystemPingHeadLibpod'])

const LIBPOD_VERSION = /^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$/

function compare (a: string, b: string): number {
  const x = a.split('.').map(Number)
  const y = b.split('.').map(Number)
  return x[0] - y[0] || x[1] - y[1] || x[2] - y[2]
}

/**
 * For route.ts: whether the decoded path segments address Podman's own API. Returns
 * null when they do not (`/containers/json`, `/v1.41/...`), else the libpod version
 * (null for `/libpod/_ping`) and the segments after it. Throws for a version the
 * gateway does not take in front of `/libpod`.
 */
export function libpodPath (segs: readonly string[]): { version: string | null, segs: string[] } | null {
  if (segs[0] === 'libpod') return { version: null, segs: [...segs] }
  if (segs[1] !== 'libpod' || !/^v[0-9]/i.test(segs[0])) return null
  const m = LIBPOD_VERSION.exec(segs[0])
  if (!m) throw new GatewayError('PATH_AMBIGUOUS', `Podman API paths take Podman's API version as v<major>.<minor>.<patch> (/v4.3.1/libpod/...), not ${JSON.stringify(segs[0])}`)
  const version = `${m[1]}.${m[2]}.${m[3]}`
  if (compare(version, LIBPOD_WINDOW.minVersion) < 0 || compare(version, LIBPOD_WINDOW.belowVersion) >= 0) {
    throw new GatewayError('API_VERSION_UNSUPPORTED', `Podman API version ${version} is outside the gateway's window: ${LIBPOD_WINDOW.minVersion} up to (not including) ${LIBPOD_WINDOW.belowVersion}`)
  }
  return { version, segs: segs.slice(1) }
}

/** For route.ts: a libpod operation matched without a version, which Podman serves only versioned. */
export function unversionedLibpodRefused (op: Operation, version: string | null): boolean {
  return version === null && !UNVERSIONED.has(op.id)
}
