/**
 * The Engine API operation catalog: one row per operation the gateway knows.
 *
 * Method + path template -> operation id exactly as the Engine API spec names it
 * (`operationId` in spec/engine-api-v1.*.yaml), the kind of resource the
 * operation touches, which path parameter names it, and how its bodies travel.
 * test/catalog.test.ts checks this table against every spec file, both ways.
 *
 * A path parameter written `{name*}` may span several segments, as in the engine's
 * own router (`/images/{name:.*}/json`): image references (`localhost:5000/team/app:1`)
 * and plugin references contain slashes, and so do a container's link names
 * (`parent/alias`, which `docker rm --link` deletes). The engine registers `{name:.*}`
 * (or `{id:.+}`) for every container, exec, image, volume, network, plugin and
 * distribution route (dockerd 20.10 and current alike); swarm objects, nodes and
 * checkpoint names are single segments (`{id}`).
 *
 * Podman's own API (`/v4.3.1/libpod/...`) has rows of its own in libpod.ts, appended here.
 */
import { libpodRows } from './libpod'
import type { Operation, Row } from './types'

export type { Hijack, Operation, RequestBody, ResourceKind } from './types'

const S = { streams: true } as const
const J = { body: 'json' } as const
const B = { body: 'stream' } as const

const rows: Row[] = [
  // Containers
  ['GET', '/containers/json', 'ContainerList', 'container'],
  ['POST', '/containers/create', 'ContainerCreate', 'container', J],
  ['GET', '/containers/{id*}/json', 'ContainerInspect', 'container'],
  ['GET', '/containers/{id*}/top', 'ContainerTop', 'container'],
  ['GET', '/containers/{id*}/logs', 'ContainerLogs', 'container', S],
  ['GET', '/containers/{id*}/changes', 'ContainerChanges', 'container'],
  ['GET', '/containers/{id*}/export', 'ContainerExport', 'container', S],
  ['GET', '/containers/{id*}/stats', 'ContainerStats', 'container', S],
  ['POST', '/containers/{id*}/resize', 'ContainerResize', 'container'],
  ['POST', '/containers/{id*}/start', 'ContainerStart', 'container'],
  ['POST', '/containers/{id*}/stop', 'ContainerStop', 'container'],
  ['POST', '/containers/{id*}/restart', 'ContainerRestart', 'container'],
  ['POST', '/containers/{id*}/kill', 'ContainerKill', 'container'],
  ['POST', '/containers/{id*}/update', 'ContainerUpdate', 'container', J],
  ['POST', '/containers/{id*}/rename', 'ContainerRename', 'container'],
  ['POST', '/containers/{id*}/pause', 'ContainerPause', 'container'],
  ['POST', '/containers/{id*}/unpause', 'ContainerUnpause', 'container'],
  ['POST', '/containers/{id*}/attach', 'ContainerAttach', 'container', { streams: true, hijack: 'tcp' }],
  ['GET', '/containers/{id*}/attach/ws', 'ContainerAttachWebsocket', 'container', { streams: true, hijack: 'websocket' }],
  ['POST', '/containers/{id*}/wait', 'ContainerWait', 'container', S],
  ['DELETE', '/containers/{id*}', 'ContainerDelete', 'container'],
  ['HEAD', '/containers/{id*}/archive', 'ContainerArchiveInfo', 'container'],
  ['GET', '/containers/{id*}/archive', 'ContainerArchive', 'container', S],
  ['PUT', '/containers/{id*}/archive', 'PutContainerArchive', 'container', B],
  ['POST', '/containers/prune', 'ContainerPrune', 'container', { minVersion: '1.25' }],
  ['POST', '/containers/{id*}/exec', 'ContainerExec', 'exec', J],
  // CRIU checkpoints: experimental, absent from the spec files, yet routed by every engine
  // (answered "experimental feature disabled" unless the daemon runs experimental). The
  // engine registers them ahead of the container routes, so `DELETE /containers/c/checkpoints/x`
  // is CheckpointDelete there, never ContainerDelete of a container "c/checkpoints/x".
  ['GET', '/containers/{id*}/checkpoints', 'CheckpointList', 'container', { minVersion: '1.25', unlisted: true }],
  // Its small JSON body (CheckpointID, CheckpointDir, Exit) has no schema in the spec files:
  // as `none`, a body is still read (capped) and decoded, generically (src/api/body/decode.ts).
  ['POST', '/containers/{id*}/checkpoints', 'CheckpointCreate', 'container', { minVersion: '1.25', unlisted: true }],
  ['DELETE', '/containers/{id}/checkpoints/{checkpoint}', 'CheckpointDelete', 'container', { minVersion: '1.25', unlisted: true }],

  // Exec
  // ExecStart hijacks unless its body says Detach: the gateway reads the body to decide.
  ['POST', '/exec/{id*}/start', 'ExecStart', 'exec', { body: 'json', streams: true, hijack: 'tcp' }],
  ['POST', '/exec/{id*}/resize', 'ExecResize', 'exec'],
  ['GET', '/exec/{id*}/json', 'ExecInspect', 'exec'],

  // Images
  ['GET', '/images/json', 'ImageList', 'image'],
  ['POST', '/build', 'ImageBuild', 'build', { body: 'stream', streams: true }],
  ['POST', '/build/prune', 'BuildPrune', 'build', { minVersion: '1.31' }],
  // Cancels the build with `?id=` (the random build id the client chose): the CLI sends it when
  // a build is interrupted. Served by the engine's build router, absent from the spec files.
  ['POST', '/build/cancel', 'BuildCancel', 'build', { unlisted: true }],
  ['POST', '/images/create', 'ImageCreate', 'image', { body: 'stream', streams: true }],
  ['GET', '/images/{name*}/json', 'ImageInspect', 'image'],
  ['GET', '/images/{name*}/attestations', 'ImageAttestations', 'image', { minVersion: '1.55' }],
  ['GET', '/images/{name*}/history', 'ImageHistory', 'image'],
  ['POST', '/images/{name*}/push', 'ImagePush', 'image', S],
  ['POST', '/images/{name*}/tag', 'ImageTag', 'image'],
  ['DELETE', '/images/{name*}', 'ImageDelete', 'image'],
  ['GET', '/images/search', 'ImageSearch', 'image'],
  ['POST', '/images/prune', 'ImagePrune', 'image', { minVersion: '1.25' }],
  ['POST', '/commit', 'ImageCommit', 'image', J],
  ['GET', '/images/{name*}/get', 'ImageGet', 'image', S],
  ['GET', '/images/get', 'ImageGetAll', 'image', S],
  ['POST', '/images/load', 'ImageLoad', 'image', { body: 'stream', streams: true }],

  // System
  ['POST', '/auth', 'SystemAuth', 'system', J],
  ['GET', '/info', 'SystemInfo', 'system'],
  ['GET', '/version', 'SystemVersion', 'system'],
  ['GET', '/_ping', 'SystemPing', 'system'],
  ['HEAD', '/_ping', 'SystemPingHead', 'system'],
  ['GET', '/events', 'SystemEvents', 'system', S],
  ['GET', '/system/df', 'SystemDataUsage', 'system', { minVersion: '1.25' }],

  // Volumes
  ['GET', '/volumes', 'VolumeList', 'volume'],
  ['POST', '/volumes/create', 'VolumeCreate', 'volume', J],
  ['GET', '/volumes/{name*}', 'VolumeInspect', 'volume'],
  ['PUT', '/volumes/{name*}', 'VolumeUpdate', 'volume', { body: 'json', minVersion: '1.42' }],
  ['DELETE', '/volumes/{name*}', 'VolumeDelete', 'volume'],
  ['POST', '/volumes/prune', 'VolumePrune', 'volume', { minVersion: '1.25' }],

  // Networks
  ['GET', '/networks', 'NetworkList', 'network'],
  ['GET', '/networks/{id*}', 'NetworkInspect', 'network'],
  ['DELETE', '/networks/{id*}', 'NetworkDelete', 'network'],
  ['POST', '/networks/create', 'NetworkCreate', 'network', J],
  ['POST', '/networks/{id*}/connect', 'NetworkConnect', 'network', J],
  ['POST', '/networks/{id*}/disconnect', 'NetworkDisconnect', 'network', J],
  ['POST', '/networks/prune', 'NetworkPrune', 'network', { minVersion: '1.25' }],

  // Plugins
  ['GET', '/plugins', 'PluginList', 'plugin'],
  ['GET', '/plugins/privileges', 'GetPluginPrivileges', 'plugin'],
  ['POST', '/plugins/pull', 'PluginPull', 'plugin', { body: 'json', streams: true }],
  ['GET', '/plugins/{name*}/json', 'PluginInspect', 'plugin'],
  ['DELETE', '/plugins/{name*}', 'PluginDelete', 'plugin'],
  ['POST', '/plugins/{name*}/enable', 'PluginEnable', 'plugin'],
  ['POST', '/plugins/{name*}/disable', 'PluginDisable', 'plugin'],
  ['POST', '/plugins/{name*}/upgrade', 'PluginUpgrade', 'plugin', { body: 'json', streams: true, minVersion: '1.26' }],
  ['POST', '/plugins/create', 'PluginCreate', 'plugin', B],
  ['POST', '/plugins/{name*}/push', 'PluginPush', 'plugin', S],
  ['POST', '/plugins/{name*}/set', 'PluginSet', 'plugin', J],

  // Swarm: nodes, the swarm itself, services, tasks, secrets, configs
  ['GET', '/nodes', 'NodeList', 'node'],
  ['GET', '/nodes/{id}', 'NodeInspect', 'node'],
  ['DELETE', '/nodes/{id}', 'NodeDelete', 'node'],
  ['POST', '/nodes/{id}/update', 'NodeUpdate', 'node', J],
  ['GET', '/swarm', 'SwarmInspect', 'swarm'],
  ['POST', '/swarm/init', 'SwarmInit', 'swarm', J],
  ['POST', '/swarm/join', 'SwarmJoin', 'swarm', J],
  ['POST', '/swarm/leave', 'SwarmLeave', 'swarm'],
  ['POST', '/swarm/update', 'SwarmUpdate', 'swarm', J],
  ['GET', '/swarm/unlockkey', 'SwarmUnlockkey', 'swarm', { minVersion: '1.25' }],
  ['POST', '/swarm/unlock', 'SwarmUnlock', 'swarm', { body: 'json', minVersion: '1.25' }],
  ['GET', '/services', 'ServiceList', 'service'],
  ['POST', '/services/create', 'ServiceCreate', 'service', J],
  ['GET', '/services/{id}', 'ServiceInspect', 'service'],
  ['DELETE', '/services/{id}', 'ServiceDelete', 'service'],
  ['POST', '/services/{id}/update', 'ServiceUpdate', 'service', J],
  ['GET', '/services/{id}/logs', 'ServiceLogs', 'service', { streams: true, minVersion: '1.29' }],
  ['GET', '/tasks', 'TaskList', 'task'],
  ['GET', '/tasks/{id}', 'TaskInspect', 'task'],
  ['GET', '/tasks/{id}/logs', 'TaskLogs', 'task', { streams: true, minVersion: '1.29' }],
  ['GET', '/secrets', 'SecretList', 'secret', { minVersion: '1.25' }],
  ['POST', '/secrets/create', 'SecretCreate', 'secret', { body: 'json', minVersion: '1.25' }],
  ['GET', '/secrets/{id}', 'SecretInspect', 'secret', { minVersion: '1.25' }],
  ['DELETE', '/secrets/{id}', 'SecretDelete', 'secret', { minVersion: '1.25' }],
  ['POST', '/secrets/{id}/update', 'SecretUpdate', 'secret', { body: 'json', minVersion: '1.25' }],
  ['GET', '/configs', 'ConfigList', 'config', { minVersion: '1.30' }],
  ['POST', '/configs/create', 'ConfigCreate', 'config', { body: 'json', minVersion: '1.30' }],
  ['GET', '/configs/{id}', 'ConfigInspect', 'config', { minVersion: '1.30' }],
  ['DELETE', '/configs/{id}', 'ConfigDelete', 'config', { minVersion: '1.30' }],
  ['POST', '/configs/{id}/update', 'ConfigUpdate', 'config', { body: 'json', minVersion: '1.30' }],

  // Distribution and BuildKit
  ['GET', '/distribution/{name*}/json', 'DistributionInspect', 'distribution', { minVersion: '1.30' }],
  ['POST', '/session', 'Session', 'session', { streams: true, hijack: 'h2c', minVersion: '1.31' }],
  // BuildKit's gRPC tunnel: served by the engine's build router but absent from the spec files.
  ['POST', '/grpc', 'Grpc', 'session', { streams: true, hijack: 'h2c', minVersion: '1.31', unlisted: true }],

  // The gateway's own policy admin API (src/gateway/admin.ts): authenticated, authorized,
  // audited and counted like every operation, answered by the gateway, never forwarded.
  ['GET', '/_portcullis/policy', 'PortcullisPolicyList', 'policy', { unlisted: true }],
  ['POST', '/_portcullis/policy', 'PortcullisPolicyAdd', 'policy', { body: 'json', unlisted: true }],
  ['DELETE', '/_portcullis/policy', 'PortcullisPolicyRemove', 'policy', { body: 'json', unlisted: true }],
]

export const operations: readonly Operation[] = Object.freeze([...rows, ...libpodRows].map(([method, path, id, kind, extra]) => {
  const param = /\{(\w+)\*?\}/.exec(path)?.[1]
  const op: Operation = { id, method, path, kind, body: 'none', streams: false, ...(param ? { param } : {}), ...extra }
  return Object.freeze(op)
}))
