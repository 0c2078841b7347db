/**
 * Engine behaviours the schema alone does not describe.
 *
 * ContainerCreate: the engine's decoder (runconfig.ContainerConfigWrapper) embeds a
 * second, deprecated HostConfig at the top level of the body. When the body has no
 * `HostConfig` key, top-level `Privileged`, `Binds`, `CapAdd`... ARE the container's
 * host config; when it has one, some top-level resource fields are still merged in.
 * A policy reading only `HostConfig` would miss them, so such bodies are refused.
 */
import { GatewayError } from '../../gateway/errors'
import { bodySchemas, type StructNode } from './schema'

function hostConfigFields (): ReadonlySet<string> {
  const create = bodySchemas.get('ContainerCreate') as StructNode | undefined
  const hc = create?.fields.get('hostconfig')?.node as StructNode | undefined
  if (!hc || hc.t !== 'struct') throw new Error('engine schema: ContainerCreate.HostConfig is not a struct')
  const config = new Set([...create!.fields.keys()])
  // Fields of HostConfig that are not also fields of the container config itself.
  return new Set([...hc.fields.keys(), 'cpuset'].filter((k) => !config.has(k)))
}

const TOP_LEVEL_HOST_CONFIG = hostConfigFields()

/** Refuse what the engine would read differently from the canonical body. */
export function assertEngineReadsAsDecoded (operationId: string, value: unknown): void {
  if (operationId !== 'ContainerCreate' || value === null || typeof value !== 'object' || Array.isArray(value)) return
  const stray = Object.keys(value).filter((k) => TOP_LEVEL_HOST_CONFIG.has(k.toLowerCase()))
  if (stray.length) {
    throw new GatewayError('BODY_INVALID', `host configuration fields at the top level of the body (${stray.join(', ')}) are a deprecated form the gateway does not accept; put them in HostConfig`)
  }
}
