/**
 * Engine behaviours the schema alone does not describe: what the engine makes of a
 * decoded body before it acts on it, applied to the canonical value so that the policy
 * evaluates, and the engine receives, the body in the form the engine itself reads it.
 *
 * ContainerCreate: the engine decodes the body into runconfig.ContainerConfigWrapper
 * (schema.ts), which has host configuration in two places: `HostConfig`, and the
 * deprecated (pre-API 1.18) host fields at the top level, next to a deprecated top-level
 * `Cpuset`. Its getHostConfig (moby 20.10, runconfig/config_unix.go) resolves them:
 *   - no `HostConfig` (absent or null): if any top-level host field is present, even
 *     null, the top-level fields ARE the host configuration; otherwise there is none;
 *   - a `HostConfig` object: every top-level host field is ignored, except `Memory`,
 *     `MemorySwap`, `CpuShares`, `CpusetCpus` and `VolumeDriver`, each copied in when
 *     HostConfig's own is the zero value (absent, null, 0, "") and the top-level one is not;
 *   - then, if there is a host configuration, a non-empty top-level `Cpuset` fills an
 *     empty `CpusetCpus`. `Cpuset` itself is never kept.
 * resolveContainerConfigWrapper rewrites the body into that result: top-level host fields
 * moved into a new HostConfig, or dropped (the merged ones copied in first), and `Cpuset`
 * dropped. The canonical body has host configuration only in HostConfig, where the policy,
 * the rewrites and the quotas read it, and means the same to the engine as what was sent.
 *
 * Later engines (moby#48007, 2024) no longer read top-level host fields at all. Forwarding
 * the canonical form keeps what the policy checked and what any engine applies the same;
 * through the gateway, such an engine gives a legacy body without HostConfig the host
 * configuration it spells out (checked by the policy) rather than none.
 *
 * Refused (400, as the engine refuses them): a HostConfig that is neither an object nor
 * null, and a top-level field the resolution reads (`Cpuset`; Memory, MemorySwap,
 * CpuShares, CpusetCpus, VolumeDriver beside a HostConfig object) with a value the
 * engine cannot decode into its Go type. Other top-level host fields beside a HostConfig
 * object are dropped unread: the engine ignores them (though it refuses a body where one
 * has the wrong JSON type; the gateway does not know every field's type, and dropping
 * such a field forwards a body the engine accepts, still exactly the body evaluated).
 */
import { GatewayError } from '../errors'
import type { JsonObject, JsonValue } from './json'
import { JsonNumber } from './number'
import { bodySchemas, LEGACY_CPUSET } from './schema'

/** Canonical names of HostConfig's fields: at the top level of a ContainerCreate body, the deprecated host configuration. */
function hostConfigFields (): ReadonlySet<string> {
  const create = bodySchemas.get('ContainerCreate')
  const hc = create?.t === 'struct' ? create.fields.get('hostconfig')?.node : undefined
  if (hc?.t !== 'struct') throw new Error('engine schema: ContainerCreate.HostConfig is not a struct')
  return new Set(hc.exact.keys())
}

const TOP_LEVEL_HOST_CONFIG = hostConfigFields()

/** The top-level fields getHostConfig copies into a HostConfig object, and their Go types. */
const MERGED: ReadonlyArray<readonly [string, 'int64' | 'string']> = [
  ['Memory', 'int64'],
  ['MemorySwap', 'int64'],
  ['CpuShares', 'int64'],
  ['CpusetCpus', 'string'],
  ['VolumeDriver', 'string'],
]

const INT64_MIN = -(2n ** 63n)
const INT64_MAX = 2n ** 63n - 1n

function isObject (v: JsonValue | undefined): v is JsonObject {
  return typeof v === 'object' && v !== null && !Array.isArray(v) && !(v instanceof JsonNumber)
}

/**
 * Whether a value the engine decodes into a Go `int64` or `string` field is that field's
 * zero value. `undefined` for a value the engine cannot decode into it (it refuses the body).
 * JSON null leaves a Go scalar untouched: zero.
 */
function isZero (v: JsonValue | undefined, type: 'int64' | 'string'): boolean | undefined {
  if (v === undefined || v === null) return true
  if (type === 'string') return typeof v === 'string' ? v === '' : undefined
  // Go's strconv.ParseInt: an integer literal ("-0" too) within int64; 1.0 and 1e3 are refused.
  if (!(v instanceof JsonNumber) || !v.isInteger) return undefined
  const n = v.toBigInt()
  return n < INT64_MIN || n > INT64_MAX ? undefined : n === 0n
}

/** A top-level field the resolution must read, with a value the engine cannot decode (it refuses the body). */
function undecodable (field: string, type: 'int64' | 'string'): GatewayError {
  const into = field === LEGACY_CPUSET ? 'CpusetCpus' : field
  return new GatewayError('BODY_INVALID', `invalid request body: ${field} at the top level (deprecated: the engine copies it into an empty HostConfig.${into}) must be ${type === 'int64' ? 'a 64-bit integer' : 'a string'} or null; send HostConfig.${into} instead`)
}

/** Rewrite a decoded ContainerCreate body into the host configuration the engine resolves from it (see the module comment). */
export function resolveContainerConfigWrapper (body: JsonObject): void {
  let legacy: string[] | undefined
  for (const k of Object.keys(body)) if (TOP_LEVEL_HOST_CONFIG.has(k)) (legacy ??= []).push(k)
  const cpuset = body[LEGACY_CPUSET]
  const inner = body.HostConfig
  if (inner !== undefined && inner !== null && !isObject(inner)) {
    const got = Array.isArray(inner) ? 'an array' : typeof inner === 'string' ? 'a string' : typeof inner === 'boolean' ? 'a boolean' : 'a number'
    throw new GatewayError('BODY_INVALID', `invalid request body: HostConfig must be a JSON object or null, not ${got}`)
  }
  if (legacy === undefined && cpuset === undefined) return

  let hc: JsonObject | undefined
  if (isObject(inner)) {
    hc = inner
    for (const [field, type] of MERGED) {
      const top = body[field]
      if (top === undefined) continue
      const topZero = isZero(top, type)
      if (topZero === undefined) throw undecodable(field, type)
      // A HostConfig value the engine cannot decode is left for the engine to refuse.
      if (!topZero && isZero(hc[field], type) === true) hc[field] = top
    }
    for (const k of legacy ?? []) delete body[k]
  } else if (legacy !== undefined) {
    // The embedded host config: exactly the top-level fields, in the order sent.
    hc = Object.create(null) as JsonObject
    for (const k of legacy) {
      hc[k] = body[k]
      delete body[k]
    }
    body.HostConfig = hc
  }

  if (cpuset !== undefined) {
    const zero = isZero(cpuset, 'string')
    if (zero === undefined) throw undecodable(LEGACY_CPUSET, 'string')
    if (hc !== undefined && !zero && isZero(hc.CpusetCpus, 'string') === true) hc.CpusetCpus = cpuset
    delete body[LEGACY_CPUSET]
  }
}

/** What the engine makes of a decoded body, for the operations where that differs from the body as sent. */
export function resolveEngineQuirks (operationId: string, value: JsonValue): void {
  if (operationId === 'ContainerCreate' && isObject(value)) resolveContainerConfigWrapper(value)
}
