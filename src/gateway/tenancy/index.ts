/**
 * The tenancy stage: after the policy has allowed a request, scope it to the
 * caller's tenant (see operations.ts). Unscoped roles (admin) pass untouched; any
 * other identity needs a tenant. The result says what to forward instead of what
 * was received (full ids in the path, the owner-label filter in the query, owner
 * labels in the body, the gateway's registry credentials) and how to filter the answer.
 */
import { Provenance } from './provenance'
import type { Logger } from 'pino'
import type { Identity } from '../authenticate'
import type { Target } from '../../api/catalog/route'
import type { TenancySettings } from '../../policy/tenancy'
import type { PatchOp } from '../../policy/rewrite'
import { engineJson, type Upstream } from '../upstream'
import { parseFilters, serializeFilters, withLabel } from './filters'
import { Call, missing, type BodyFilter, type LocalAnswer, type ResponseFilter } from './call'
import type { Credentials } from '../../config'
import { OwnerCache, Resolver, watchEvents } from './lookup'
import { handlers, OPEN } from './operations'
import type { SharedReservations } from './quota-store'
import { podmanMissing } from './podman'
import { refuse, TenancyRefusal } from './refusal'
import { TENANT_NAME } from './names'

export { QuotaStore, QuotaStoreError, type SharedReservations, type Lease } from './quota-store'
export { TenancyRefusal } from './refusal'
export { Provenance } from './provenance'
export type { BodyFilter, LocalAnswer, ResponseFilter } from './call'

/**
 * The tenancy stage's decision: the identity is not scoped (admins), the request is
 * scoped (and how), or it is refused by a tenancy rule.
 */
export type TenancyDecision =
  | { readonly decision: 'unscoped' }
  | ({ readonly decision: 'scoped' } & Scoped)
  | { readonly decision: 'refused', readonly rule: string, readonly error: TenancyRefusal }

export interface Scoped {
  /** The request target to send, when it differs from the one received. */
  readonly url?: string
  /** The decoded body to send, when the stage changed it, and the JSON Patch recording how. */
  readonly body?: unknown
  readonly patch: readonly PatchOp[]
  readonly setHeaders: Readonly<Record<string, string>>
  readonly respond?: ResponseFilter
  /** How a streamed body is rewritten on its way to the engine. */
  readonly bodyFilter?: BodyFilter
  /** The gateway's own answer: the request is not forwarded. */
  readonly answer?: LocalAnswer
  /** Called once the request has been answered or has failed (quota reservations end). */
  readonly settled?: (status: number) => void
  /** The full id of a container whose binds the engine mounts for this request: their sources are judged again first. */
  readonly remounts?: string
  /** An engine error's message in the tenant's names (per-tenant names: names.ts). */
  readonly errorText?: (message: string) => string
}

export class Tenancy {
  readonly cache = new OwnerCache()
  private readonly resolver: Resolver
  private readonly stopWatching: () => void

  /**
   * `quotaStore`: the replicas' shared quota reservations (with policy.database), else per process.
   * `onEngineConnected`: called whenever the engine's event stream connects.
   */
  constructor (private readonly upstream: Upstream, private credentials: Credentials, log: Logger, private readonly quotaStore: SharedReservations | null = null, onEngineConnected?: () => void, provenance = new Provenance(null)) {
    this.resolver = new Resolver(upstream, this.cache, provenance)
    this.stopWatching = watchEvents(upstream, this.cache, log, undefined, onEngineConnected)
  }

  setCredentials (c: Credentials): void { this.credentials = c }

  /** Null when the identity is unscoped (sees every object). */
  static tenantOf (identity: Identity, settings: TenancySettings): string | null {
    return identity.roles.some((r) => settings.unscopedRoles.includes(r)) ? null : identity.tenant ?? ''
  }

  /**
   * Scope `target` for `identity`. A refusal by a tenancy rule is the decision returned;
   * anything else that goes wrong (the engine cannot be asked) is thrown.
   */
  async scope (identity: Identity, target: Target, body: unknown, settings: TenancySettings, clientRegistryAuth: string | undefined): Promise<TenancyDecision> {
    const tenant = Tenancy.tenantOf(identity, settings)
    if (tenant === null) return await this.scopeView(identity, target, settings)
    const op = target.operation
    const handler = handlers[op.id]
    if (!handler) return refused(refuse('tenant-scoping', `${op.id} has no tenant scoping; refused for subject ${identity.subject}`))
    if (tenant === '' && !['SystemPing', 'SystemPingHead', 'SystemVersion', 'SystemPingLibpod', 'SystemPingHeadLibpod', 'SystemVersionLibpod'].includes(op.id)) {
      return refused(refuse('tenant-required', `${op.id} refused: subject ${identity.subject} has no tenant, and only admins act outside one`))
    }
    if (settings.names === 'private' && tenant !== '') {
      // The qualified form `<tenant>.<name>` is reversible only for a tenant without a dot (names.ts).
      if (!TENANT_NAME.test(tenant)) return refused(refuse('tenant-names', `${op.id} refused: tenant ${JSON.stringify(tenant)} cannot have private names (tenancy.yaml names: private needs tenants of letters, digits, _ and -, beginning with a letter or digit)`))
      // Podman's own API names objects in fields of its own, which are not qualified.
      if (op.id.endsWith('Libpod') && !['SystemPingLibpod', 'SystemPingHeadLibpod', 'SystemVersionLibpod'].includes(op.id)) {
        return refused(refuse('tenant-names', `${op.id} refused: Podman's own API is not available to tenants while names are private (tenancy.yaml names: private); use the Docker-compatible API`))
      }
    }
    // `_ping`, `version`...: nothing to change, nothing to narrow (under private names, an
    // engine error's message is still put in the tenant's names: a Call is made then).
    if (handler === OPEN && settings.names !== 'private') return UNCHANGED
    const call = new Call(op, target.params, target.query, body, tenant, identity.subject, settings, this.resolver, this.credentials, clientRegistryAuth, this.quotaStore)
    if (target.apiVersion) call.apiVersion = target.apiVersion
    try {
      await handler(call)
    } catch (err) {
      // Refused after a check had already reserved quota: let it go now.
      for (const f of call.settled) f(0)
      if (err instanceof TenancyRefusal) return refused(await this.asEngineAnswers(err))
      throw err
    }
    const scoped: TenancyDecision = {
      decision: 'scoped',
      ...(call.paramsChanged || call.queryChanged ? { url: buildUrl(target, call.params, call.queryChanged ? call.query : null) } : {}),
      ...(call.bodyChanged ? { body: call.body } : {}),
      patch: call.patch,
      setHeaders: call.setHeaders,
      ...(call.respond ? { respond: call.respond } : {}),
      ...(call.bodyFilter ? { bodyFilter: call.bodyFilter } : {}),
      ...(call.answer ? { answer: call.answer } : {}),
      ...(call.remounts !== undefined ? { remounts: call.remounts } : {}),
      ...(call.names.private ? { errorText: (m: string) => call.names.text(m) } : {}),
      ...(call.settled.length > 0 ? { settled: (status: number) => { for (const f of call.settled) f(status) } } : {}),
    }
    // The answer's filters and the settle hook keep `call` for as long as the request
    // runs (a tenant's events stream: for days); the decoded body is the pipeline's now.
    call.body = undefined
    return scoped
  }

  /**
   * An unscoped role with a view (tenancy.yaml `views`) sees only the containers that
   * carry its label: lists and events are filtered by the engine with the label added,
   * and a container named in the path is looked up first and forwarded by its full id
   * (ids never change hands, names do), or answers as missing. Other container
   * operations without a container in the path are refused.
   */
  private async scopeView (identity: Identity, target: Target, settings: TenancySettings): Promise<TenancyDecision> {
    const label = settings.views?.find((v) => v.roles.some((r) => identity.roles.includes(r)))?.label
    if (label === undefined) return { decision: 'unscoped' }
    const op = target.operation
    if (op.id === 'ContainerList' || op.id === 'SystemEvents') {
      const filters = serializeFilters(withLabel(parseFilters(target.query), label))
      const query = new URLSearchParams(target.query)
      query.set('filters', filters)
      return { decision: 'scoped', url: buildUrl(target, target.params, query), patch: [{ op: 'replace', path: '/query/filters', value: filters }], setHeaders: {} }
    }
    if (op.kind !== 'container') return { decision: 'unscoped' }
    const ref = target.params.id
    if (ref === undefined) return refused(refuse('container-view', `${op.id} refused: subject ${identity.subject} sees only containers labelled ${label}`))
    const found = await engineJson(this.upstream, 'GET', `/containers/${encodeURIComponent(ref)}/json`)
    const c = found.body as { Id?: unknown, Config?: { Labels?: Record<string, string> | null } } | null
    const labels = c?.Config?.Labels ?? {}
    const eq = label.indexOf('=')
    const seen = found.status === 200 && typeof c?.Id === 'string' &&
      (eq < 0 ? Object.prototype.hasOwnProperty.call(labels, label) : labels[label.slice(0, eq)] === label.slice(eq + 1))
    if (!seen) return refused(missing('container', ref, op.id))
    return { decision: 'scoped', url: buildUrl(target, { ...target.params, id: c!.Id as string }, null), patch: [], setHeaders: {} }
  }

  /** Another tenant's object answers as a missing one, in the words of the engine behind the gateway. */
  private async asEngineAnswers (err: TenancyRefusal): Promise<TenancyRefusal> {
    const m = err.missing
    // (An engine that cannot be asked which it is keeps the answer it had.)
    if (!m || await this.resolver.engine().catch(() => 'docker') !== 'podman') return err
    return new TenancyRefusal(err.code, err.message, err.rule, { answer: podmanMissing(m), missing: m, absent: err.absent })
  }

  close (): void { this.stopWatching() }
}

/** A tenant's request that touches no tenant's objects: forwarded as it came. */
const UNCHANGED: TenancyDecision = Object.freeze({ decision: 'scoped', patch: Object.freeze([]), setHeaders: Object.freeze({}) })

function refused (error: TenancyRefusal): TenancyDecision {
  return { decision: 'refused', rule: error.rule, error }
}

/** The request target with new path parameters and/or query, in the version the client asked for. */
function buildUrl (target: Target, params: Record<string, string>, query: URLSearchParams | null): string {
  const path = target.operation.path.replace(/\{(\w+)(\*?)\}/g, (_m, name: string, multi: string) =>
    multi ? params[name].split('/').map(encodeURIComponent).join('/') : encodeURIComponent(params[name]))
  const version = target.apiVersion ? `/v${target.apiVersion}` : ''
  const q = target.rawUrl.indexOf('?')
  const search = query ? query.toString() : q < 0 ? '' : target.rawUrl.slice(q + 1)
  return `${version}${path}${search ? '?' + search : ''}`
}
