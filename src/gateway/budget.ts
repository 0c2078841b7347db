/**
 * The memory the gateway holds for request bodies, all requests together
 * (`limits.bufferedBytes`), and each identity's share of it. A body is charged as its
 * bytes arrive (a declared `Content-Length` all at once, before any byte is read) and
 * let go when the request no longer holds it: when it ends, or once a long stream or
 * hijacked session is under way. What does not fit is refused at once, before more of
 * it is read: `503` when the gateway as a whole is full, `429` when the identity has
 * used its share, which is what keeps one tenant's flood from refusing everyone else.
 *
 * The charge is BODY_MEMORY_FACTOR bytes per body byte: a JSON body is held as the
 * bytes read, its decoded value (one to three times its size, measured on create
 * bodies) and the canonical bytes forwarded.
 */
import { GatewayError } from '../api/errors'
import { BODY_MEMORY_FACTOR } from '../config/schema'

export { BODY_MEMORY_FACTOR } from '../config/schema'
/** One identity may hold at most this fraction of the budget (and always one body of the largest size). */
export const IDENTITY_SHARE = 4

export interface BudgetObserver {
  held (bytes: number): void
  refused (scope: 'gateway' | 'identity', tenant: string | null): void
}

export class BodyBudget {
  private used = 0
  private readonly byIdentity = new Map<string, number>()
  /** What one identity may hold at once. */
  readonly perIdentity: number

  /** `total`: limits.bufferedBytes; `largestBody`: limits.jsonBodyBytes (one such body always fits a share). */
  constructor (readonly total: number, largestBody: number, private readonly observe?: BudgetObserver) {
    this.perIdentity = Math.min(total, Math.max(Math.floor(total / IDENTITY_SHARE), largestBody * BODY_MEMORY_FACTOR))
  }

  get held (): number { return this.used }

  /** The charge of `identity` (a tenant, else a subject) for one request's body. */
  open (identity: string, tenant: string | null): BodyHold {
    return new BodyHold(this, identity, tenant)
  }

  /** @internal Charge `bytes` to `identity`, or throw without charging anything. */
  charge (identity: string, tenant: string | null, bytes: number): void {
    const mine = this.byIdentity.get(identity) ?? 0
    if (mine + bytes > this.perIdentity) {
      this.observe?.refused('identity', tenant)
      throw new GatewayError('IDENTITY_BUSY', `${tenant !== null ? `tenant ${tenant}` : 'this identity'} is sending more request bodies at once than the gateway holds for one tenant (${this.perIdentity} bytes); retry later`)
    }
    if (this.used + bytes > this.total) {
      this.observe?.refused('gateway', tenant)
      throw new GatewayError('GATEWAY_BUSY', `the gateway is holding as many request bodies as it may (limits.bufferedBytes: ${this.total}); retry later`)
    }
    this.byIdentity.set(identity, mine + bytes)
    this.used += bytes
    this.observe?.held(this.used)
  }

  /** @internal */
  refund (identity: string, bytes: number): void {
    if (bytes <= 0) return
    const left = (this.byIdentity.get(identity) ?? 0) - bytes
    if (left > 0) this.byIdentity.set(identity, left)
    else this.byIdentity.delete(identity)
    this.used -= bytes
    this.observe?.held(this.used)
  }
}

/** One request's charge: grows with its body, let go once (later calls do nothing). */
export class BodyHold {
  private charged = 0
  private released = false

  constructor (private readonly budget: BodyBudget, private readonly identity: string, private readonly tenant: string | null) {}

  /** Charge `bodyBytes` more bytes of body; throws IDENTITY_BUSY or GATEWAY_BUSY when they do not fit. */
  take (bodyBytes: number): void {
    if (this.released || bodyBytes <= 0) return
    const bytes = bodyBytes * BODY_MEMORY_FACTOR
    this.budget.charge(this.identity, this.tenant, bytes)
    this.charged += bytes
  }

  release (): void {
    if (this.released) return
    this.released = true
    this.budget.refund(this.identity, this.charged)
    this.charged = 0
  }
}
