/**
 * What differs for tenancy when the engine behind the gateway is Podman's service
 * (`podman system service`) instead of dockerd; measured on Podman 4.3, see
 * docs/podman.md.
 *
 * - Podman is recognised by the `Libpod-Api-Version` header it puts on every answer.
 * - Its default network is `podman`; its Docker-compatible API also answers to `bridge`
 *   for it (and lists it so). `host` and `none` are modes, not network objects.
 * - It words and shapes "no such object" differently: `{"cause", "message", "response"}`,
 *   its own messages, and for some operations another status. Another tenant's object
 *   must answer exactly as a missing one does, so the gateway answers as Podman would.
 */
import type { IncomingHttpHeaders } from 'node:http'
import type { EngineAnswer } from '../../api/errors'
import type { ObjectKind } from './objects'
import { parseImageRef } from './images'

export type EngineKind = 'docker' | 'podman'

export function engineKindOf (headers: IncomingHttpHeaders): EngineKind {
  return headers['libpod-api-version'] !== undefined ? 'podman' : 'docker'
}

/** The default network's own name under Podman. */
export const PODMAN_DEFAULT_NETWORK = 'podman'

/** Where a missing reference was found, as call.ts's missing() records it. */
export interface MissingRef {
  readonly kind: ObjectKind
  readonly ref: string
  readonly opId: string
  readonly where: 'path' | 'body' | 'link' | 'endpoint'
}

function answer (status: number, cause: string, message: string): EngineAnswer {
  return { status, body: JSON.stringify({ cause, message, response: status }) + '\n' }
}

/** `nope` -> `docker.io/library/nope`: the fully qualified name Podman's messages print (no tag is added). */
function qualified (ref: string): string {
  const p = parseImageRef(ref)
  if (!p) return ref
  return `${p.registry}/${p.path}${p.tag !== undefined ? ':' + p.tag : ''}${p.digest !== undefined ? '@' + p.digest : ''}`
}

/** Podman's answer for a pod it does not have (tenants have none: tenancy/libpod.ts). */
export function podmanNoPod (ref: string): EngineAnswer {
  return answer(404, 'no such pod', `no pod with name or ID ${ref} found: no such pod`)
}

/** Podman's answer for a reference to an object it does not have. */
export function podmanMissing (m: MissingRef): EngineAnswer {
  return m.opId.endsWith('Libpod') ? libpodMissing(m) : compatMissing(m)
}

/** Through the Docker-compatible API. */
function compatMissing (m: MissingRef): EngineAnswer {
  const op = m.opId
  const { ref } = m
  const container = `no container with name or ID "${ref}" found: no such container`
  switch (m.kind) {
    case 'container':
      if (m.where === 'link') return answer(400, 'link is not supported', 'bad parameter: link is not supported')
      if (m.where === 'body') return answer(500, 'no such container', `container create: ${container}`)
      if (op === 'ContainerWait') return answer(404, 'no such container', 'no such container')
      if (op === 'PutContainerArchive') return answer(404, 'no such container', `the container doesn't exists: ${container}`)
      if (op === 'ContainerChanges') return answer(500, 'layer not known', `${ref} not found: layer not known`)
      // Podman answers these with an empty 404.
      if (op === 'ContainerTop' || op === 'ContainerStats' || op === 'ContainerArchiveInfo') return { status: 404, body: '' }
      return answer(404, 'no such container', container)
    case 'volume':
      if (op === 'VolumeDelete') return answer(404, 'no such volume', `no volume with name "${ref}" found: no such volume`)
      if (m.where !== 'path') return answer(500, 'no such volume', `container create: volume with name ${ref} not found: no such volume`)
      return answer(404, 'no such volume', `volume with name ${ref} not found: no such volume`)
    case 'network':
      if (op === 'NetworkDelete') return answer(404, 'network not found', 'network not found')
      if (m.where !== 'path') return answer(500, 'network not found', `container create: unable to find network with name or ID ${ref}: network not found`)
      return answer(404, 'network not found', `unable to find network with name or ID ${ref}: network not found`)
    case 'exec':
      return answer(404, 'no such exec session', `no exec session with ID ${ref} found: no such exec session`)
    case 'image': {
      // A 64-digit hex string that is no image's id is refused while it is normalized as a name.
      if (/^[0-9a-f]{64}$/.test(ref)) {
        const cause = `normalizing name "${ref}" (orig: "${ref}") for compat API: invalid repository name (${ref}), cannot specify 64-byte hexadecimal strings`
        return answer(500, cause, `normalizing image: ${cause}`)
      }
      const name = qualified(ref)
      if (op === 'ImageInspect') return answer(404, `failed to find image ${ref}: ${name}: No such image`, `failed to find image ${ref}: ${name}: No such image`)
      if (op === 'ImageHistory' || op === 'ImagePush') return answer(404, 'image not known', `failed to find image ${name}: ${name}: image not known`)
      if (op === 'ImageGetAll') return answer(500, 'image not known', `${name}: image not known`)
      if (op === 'ContainerCreate') return answer(404, 'image not known', `no such image: ${name}: image not known`)
      return answer(404, 'image not known', `failed to find image ${ref}: ${name}: image not known`)
    }
    default:
      return answer(404, `no such ${m.kind}`, `no such ${m.kind}: ${ref}`)
  }
}

/** Through Podman's own API, whose handlers word some answers differently, and never qualify short image names. */
function libpodMissing (m: MissingRef): EngineAnswer {
  const { opId: op, ref } = m
  const container = `no container with name or ID "${ref}" found: no such container`
  switch (m.kind) {
    case 'container':
      // A container named in a create body (volumes_from, a namespace to join): the message also names the field.
      if (m.where === 'body') return answer(500, 'no such container', container)
      if (op === 'ContainerExistsLibpod') return answer(404, 'no such container', 'no such container')
      if (op === 'ContainerHealthcheckLibpod') return answer(404, 'no such container', `unable to look up ${ref} to perform a health check: ${container}`)
      if (op === 'PutContainerArchiveLibpod') return answer(404, 'no such container', `the container doesn't exists: ${container}`)
      if (op === 'ContainerChangesLibpod') return answer(500, 'layer not known', `${ref} not found: layer not known`)
      return answer(404, 'no such container', container)
    case 'volume':
      if (op === 'VolumeExistsLibpod') return answer(404, 'no such volume', 'no such volume')
      if (op === 'VolumeDeleteLibpod') return answer(404, 'no such volume', `no volume with name "${ref}" found: no such volume`)
      return answer(404, 'no such volume', `volume with name ${ref} not found: no such volume`)
    case 'network':
      if (m.where !== 'path') return answer(500, 'network not found', `unable to find network with name or ID ${ref}: network not found`)
      if (op === 'NetworkInspectLibpod' || op === 'NetworkExistsLibpod') return answer(404, 'network not found', 'network not found')
      return answer(404, 'network not found', `unable to find network with name or ID ${ref}: network not found`)
    case 'exec':
      return answer(404, 'no such exec session', `no exec session with ID ${ref} found: no such exec session`)
    case 'image':
      if (op === 'ImageExistsLibpod') return answer(404, `failed to find image ${ref}`, `failed to find image ${ref}`)
      if (op === 'ImageChangesLibpod') return answer(500, 'layer not known', `${ref} not found: layer not known`)
      if (op === 'ImageDeleteLibpod' || op === 'ImageGetLibpod') return answer(404, 'image not known', `${ref}: image not known`)
      if (op === 'ImagePushLibpod') return answer(400, 'image not known', `pushing image "${ref}": ${ref}: image not known`)
      if (op === 'ContainerCreateLibpod') return answer(500, 'image not known', `${ref}: image not known`)
      return answer(404, 'image not known', `failed to find image ${ref}: ${ref}: image not known`)
    default:
      return answer(404, `no such ${m.kind}`, `no such ${m.kind}: ${ref}`)
  }
}
