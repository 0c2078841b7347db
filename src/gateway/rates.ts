/**
 * Rate limits: how fast one identity, or one tenant, may make requests of each operation
 * class (read, write, transfer: api/catalog/classes.ts), and how many hijacked sessions
 * and long streams it may hold open at once (config `rates`). turns.ts shares out the
 * gateway's attention among the requests in progress and budget.ts its memory for bodies;
 * neither bounds how much work a tenant asks of the engine over time, nor how many
 * connections it keeps open there. A tenant's loop of creates, pulls or `logs -f` would
 * otherwise take the engine from everyone else.
 *
 * Checked after authentication, in the identity's turn (pipeline.ts limitRate says why),
 * before the body is read: a refusal costs the gateway a head and no engine round trip. Each limit is a token bucket (`rate` tokens a
 * second, at most `burst` held; a request takes one) or a count of what is open (taken
 * at admission, given back when the request ends, whatever way it ends: finish()).
 * A refusal is `429` with `Retry-After`: the whole seconds until the bucket has a token
 * (1 for a full count: a slot comes free when a stream ends, which cannot be foretold).
 *
 * Whose buckets: each role's `per` names `tenant` (one set of buckets per tenant, all
 * its subjects together; an identity without a tenant is its own), `subject` (one per
 * subject), or both (a request must find a token in each, and takes from both only when
 * both have one). Buckets are kept apart per role, so that a role's own numbers apply to
 * what it does. A bucket that has filled up again is the same as no bucket: those are
 * dropped as they are met, so the map holds only the identities that were busy lately.
 */
import { holdClass, rateClass, type HoldClass, type RateClass } from '../api/catalog/classes'
import type { Operation } from '../api/catalog/operations'
import { GatewayError } from '../api/errors'
import { RATE_PER_DEFAULT, type RatesConfig, type RoleRatesConfig } from '../config'
import type { Identity } from './authenticate'

export type RateLimitKind = 'rate' | 'sessions' | 'streams'

/** A request refused by a rate limit, with the rule that refused it (`rates.<role>.<limit>`) for the audit record and metrics. */
export class RateRefusal extends GatewayError {
  constructor (message: string, readonly rule: string, readonly rateClass: RateClass, readonly limit: RateLimitKind, retryAfter: number) {
    super('RATE_LIMITED', message, { retryAfter })
  }
}

interface Bucket { tokens: number, at: number }

/**
 * What the pipeline asks of the rate limits: this process's own (RateLimits), or, with
 * several workers, the cluster primary's, which holds every worker's buckets and counts
 * (gateway/cluster.ts) and answers over IPC.
 */
export interface RateAdmission {
  admit (who: Identity, op: Operation): (() => void) | Promise<() => void>
}

/** How often buckets that have filled up again are swept out. */
const SWEEP_MS = 10_000
const LIMIT_OF: Record<HoldClass, 'sessions' | 'streams'> = { session: 'sessions', stream: 'streams' }
const WORDS: Record<RateClass, string> = { read: 'reads', write: 'writes', transfer: 'transfers (builds, pulls, pushes, loads, archives)' }

/** The limits that apply to one identity: the first listed role it holds, else `others`. */
interface Applied { readonly name: string, readonly rates: RoleRatesConfig }

export class RateLimits implements RateAdmission {
  private readonly buckets = new Map<string, Bucket>()
  private readonly open = new Map<string, number>()
  private swept = performance.now()

  constructor (private readonly config: RatesConfig, private readonly observe?: (tenant: string | null, rateClass: RateClass, limit: RateLimitKind) => void) {}

  /** Whether any limit applies to `who` (a worker asks the primary only then). */
  limits (who: Identity): boolean {
    return this.applied(who) !== null
  }

  private applied (who: Identity): Applied | null {
    for (const [name, rates] of Object.entries(this.config.roles)) if (who.roles.includes(name)) return { name, rates }
    return this.config.others === null ? null : { name: 'others', rates: this.config.others }
  }

  /**
   * Admit a request of `op` by `who`, or throw a RateRefusal. Returns the function that
   * gives back the session or stream slot it took (once; a no-op when it took none).
   */
  admit (who: Identity, op: Operation): () => void {
    const applied = this.applied(who)
    if (applied === null) return NOTHING
    const { name, rates } = applied
    const cls = rateClass(op)
    // Deduplicated: with per [tenant, subject], an identity without a tenant has one bucket, not two.
    const keys = [...new Set((rates.per ?? RATE_PER_DEFAULT).map((per) => keyOf(name, per, who)))]
    const hold = holdClass(op)
    const cap = hold === null ? undefined : rates[LIMIT_OF[hold]] ?? undefined
    // Counts first (nothing is taken from a bucket for a request refused anyway).
    if (hold !== null && cap !== undefined) {
      for (const key of keys) {
        if ((this.open.get(`${key}\0${hold}`) ?? 0) >= cap) {
          const limit = LIMIT_OF[hold]
          this.observe?.(who.tenant, cls, limit)
          throw new RateRefusal(`${op.id} refused: ${whose(who, key)} has ${cap} ${hold === 'session' ? 'hijacked sessions (attach, exec)' : 'long streams (logs -f, events, stats, pulls)'} open, as many as it may (rule rates.${name}.${limit}: ${cap}); retry when one has ended`, `rates.${name}.${limit}`, cls, limit, 1)
        }
      }
    }
    const bucket = rates[cls]
    if (bucket) {
      const now = performance.now()
      this.sweep(now)
      const states = keys.map((key) => this.refill(`${key}\0${cls}`, bucket, now))
      const short = states.find((s) => s.tokens < 1)
      if (short !== undefined) {
        const wait = (1 - short.tokens) / bucket.rate
        this.observe?.(who.tenant, cls, 'rate')
        throw new RateRefusal(`${op.id} refused: ${whose(who, keys[states.indexOf(short)])} is over its rate limit for ${WORDS[cls]} (rule rates.${name}.${cls}: ${bucket.rate}/s, burst ${bucket.burst}); retry in ${Math.max(1, Math.ceil(wait))} s`, `rates.${name}.${cls}`, cls, 'rate', wait)
      }
      for (const s of states) s.tokens -= 1
    }
    if (hold === null || cap === undefined) return NOTHING
    const counted = keys.map((key) => `${key}\0${hold}`)
    for (const k of counted) this.open.set(k, (this.open.get(k) ?? 0) + 1)
    let given = false
    return () => {
      if (given) return
      given = true
      for (const k of counted) {
        const left = (this.open.get(k) ?? 1) - 1
        if (left > 0) this.open.set(k, left)
        else this.open.delete(k)
      }
    }
  }

  /** `key`'s bucket with the tokens earned since it was last seen (created full). */
  private refill (key: string, b: { rate: number, burst: number }, now: number): Bucket {
    let s = this.buckets.get(key)
    if (s === undefined) {
      s = { tokens: b.burst, at: now }
      this.buckets.set(key, s)
    } else {
      s.tokens = Math.min(b.burst, s.tokens + ((now - s.at) / 1000) * b.rate)
      s.at = now
    }
    return s
  }

  /** Drop the buckets that have had time to fill up again (a full bucket is the same as none). */
  private sweep (now: number): void {
    if (now - this.swept < SWEEP_MS) return
    this.swept = now
    // A bucket's burst over its rate is at most a million seconds; any bucket unseen for
    // longer than its own refill time is full. The role's numbers are not at hand here:
    // the largest refill time among all configured buckets bounds them all.
    const refill = this.longestRefillMs()
    for (const [key, s] of this.buckets) if (now - s.at >= refill) this.buckets.delete(key)
  }

  private refillMs?: number
  private longestRefillMs (): number {
    if (this.refillMs !== undefined) return this.refillMs
    let ms = 0
    for (const r of [...Object.values(this.config.roles), this.config.others]) {
      if (r === null) continue
      for (const cls of ['read', 'write', 'transfer'] as const) {
        const b = r[cls]
        if (b) ms = Math.max(ms, (b.burst / b.rate) * 1000)
      }
    }
    this.refillMs = ms
    return ms
  }
}

const NOTHING = (): void => {}

/** A bucket's key: the role, and the tenant or subject whose it is (an identity without a tenant counts as its subject). */
function keyOf (role: string, per: 'tenant' | 'subject', who: Identity): string {
  return per === 'tenant' && who.tenant !== null ? `${role}\0tenant\0${who.tenant}` : `${role}\0subject\0${who.subject}`
}

/** Who is over the limit, in a refusal's words: the tenant, or the subject (and its tenant). */
function whose (who: Identity, key: string): string {
  if (key.includes('\0tenant\0')) return `tenant ${who.tenant ?? ''}`
  return who.tenant !== null ? `subject ${who.subject} of tenant ${who.tenant}` : `subject ${who.subject}`
}
