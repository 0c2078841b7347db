/**
 * Each identity's share of the gateway's attention. The gateway is one thread: without
 * a limit, a tenant with 32 connections kept busy has 32 requests in its event loop at
 * any moment, and another tenant's `_ping` waits behind all of them.
 *
 * So at most SLOTS requests of one identity (a tenant, else a subject) are worked on at
 * a time while another identity is in the gateway (SLOTS_ALONE while it is alone:
 * sharing costs nothing when there is no one to share with); the others wait their
 * turn in order, and a turn is handed on at the next turn of the event loop, after
 * whatever I/O of other identities is ready. A request holds its turn while the gateway
 * works on it (reading and judging its body included) and while the engine's answer is
 * due any moment, until that answer is out. Once the engine has taken ENGINE_GRACE_MS
 * over it the turn lapses (a `stop` waiting for its container costs the gateway
 * nothing), and its answer waits for a new one. A long stream or session gives its turn
 * up when it starts. Holding the turn through a quick engine round trip is what bounds
 * a tenant's requests in the event loop as a whole, answers included: with one tenant
 * flooding `_ping` at concurrency 32 (bench section 7), another's p99 went from 5x to
 * under 2x its latency alone; one tenant alone keeps its rate.
 *
 * One large JSON body (over LARGE_BODY bytes) per identity is read, decoded and judged
 * at a time, and the next only after a rest three times as long as that took: reading
 * and decoding a megabyte of JSON is the work that holds the event loop longest (some
 * milliseconds), and a tenant sending nothing else but such bodies gets a quarter of
 * the gateway, however many it sends at once. Docker clients' bodies are a few KiB.
 */
import { GatewayError } from '../api/errors'

export const SLOTS = 8
/** What an identity alone in the gateway may use. */
export const SLOTS_ALONE = 64
/** How long after another identity's last request an identity still counts as not alone. */
const ALONE_MS = 100
/** Requests of one identity waiting for a slot; beyond, 429. */
export const MAX_WAITING = 1024
export const LARGE_BODY = 64 * 1024
/** How long a request keeps its turn while the engine works on it. */
export const ENGINE_GRACE_MS = 50
/** A large-body lane rests this many times as long as its body took: one tenant's large bodies take at most a quarter of the gateway. */
const REST_FACTOR = 3
/** The longest rest (a body that waited on a slow client or the engine did not use the gateway all that time). */
const MAX_REST_MS = 200

interface Lane { running: number, readonly waiting: Array<() => void> }

/**
 * FIFO lanes of `size` slots per key, handed on with setImmediate. A key alone in the
 * gateway (no other key in progress, nor within the last ALONE_MS) may use `borrow`
 * slots: sharing costs nothing while there is no one to share with.
 */
class Lanes {
  private readonly lanes = new Map<string, Lane>()
  /** Keys whose last request ended lately, and when. */
  private readonly left = new Map<string, number>()

  constructor (private readonly size: number, private readonly borrow: number = size) {}

  /** The slots `key` may use now. */
  private limit (key: string): number {
    if (this.borrow === this.size) return this.size
    for (const k of this.lanes.keys()) if (k !== key) return this.size
    const now = performance.now()
    for (const [k, at] of this.left) {
      if (now - at > ALONE_MS) this.left.delete(k)
      else if (k !== key) return this.size
    }
    return this.borrow
  }

  /** Resolves with the function that gives the slot back (once). */
  async take (key: string, tenant: string | null): Promise<() => void> {
    let lane = this.lanes.get(key)
    if (lane === undefined) {
      lane = { running: 0, waiting: [] }
      this.lanes.set(key, lane)
    }
    if (lane.running < this.limit(key) && lane.waiting.length === 0) {
      lane.running++
    } else {
      if (lane.waiting.length >= MAX_WAITING) {
        throw new GatewayError('IDENTITY_BUSY', `${tenant !== null ? `tenant ${tenant}` : 'this identity'} has more requests waiting than the gateway queues for one tenant (${MAX_WAITING}); retry later`)
      }
      const l = lane
      await new Promise<void>((resolve) => { l.waiting.push(resolve) })
    }
    const held = lane
    let given = false
    return () => {
      if (given) return
      given = true
      this.handOn(key, held)
    }
  }

  /** A slot comes free: the next in line gets it on the next turn of the loop (if the key is within its limit), else it is free. */
  private handOn (key: string, lane: Lane): void {
    if (lane.waiting.length > 0 && lane.running <= this.limit(key)) {
      setImmediate(lane.waiting.shift() as () => void)
      return
    }
    if (--lane.running === 0 && lane.waiting.length === 0) {
      this.lanes.delete(key)
      if (this.borrow !== this.size) this.left.set(key, performance.now())
    }
  }
}

/** One request's turn: given back once (later calls do nothing). */
export class Turn {
  private released = false
  private timer: NodeJS.Timeout | undefined

  constructor (private readonly giveBack: () => void) {}

  /** Still held (not given back, not lapsed while the engine worked). */
  get held (): boolean { return !this.released }

  /** The request is with the engine: the turn lapses after ENGINE_GRACE_MS unless the answer comes first. */
  engineWait (): void {
    if (this.released || this.timer !== undefined) return
    this.timer = setTimeout(() => { this.release() }, ENGINE_GRACE_MS)
    this.timer.unref()
  }

  /** The engine answered: the turn, if still held, stays until the answer is out. */
  answered (): void {
    if (this.timer !== undefined) clearTimeout(this.timer)
  }

  release (): void {
    if (this.released) return
    this.released = true
    if (this.timer !== undefined) clearTimeout(this.timer)
    this.giveBack()
  }
}

export class Turns {
  private readonly slots = new Lanes(SLOTS, SLOTS_ALONE)
  private readonly large = new Lanes(1)

  /** Wait for a slot of `identity`; throws IDENTITY_BUSY when too many wait already. */
  async take (identity: string, tenant: string | null): Promise<Turn> {
    return new Turn(await this.slots.take(identity, tenant))
  }

  /**
   * Wait for `identity`'s large-body lane; call the result when the body has been judged.
   * The lane then rests REST_FACTOR times as long as that took before the identity's
   * next large body.
   */
  async largeBody (identity: string, tenant: string | null): Promise<() => void> {
    const giveBack = await this.large.take(identity, tenant)
    const started = performance.now()
    let done = false
    return () => {
      if (done) return
      done = true
      setTimeout(giveBack, Math.min(MAX_REST_MS, REST_FACTOR * (performance.now() - started))).unref()
    }
  }
}
