/**
 * Each identity's share of the gateway's attention. The gateway is one thread: without
 * a limit, a tenant with 32 connections kept busy has 32 requests in its event loop at
 * any moment, and another tenant's `_ping` waits behind all of them.
 *
 * So at most SLOTS requests of one identity (a tenant, else a subject) are worked on at
 * a time; the others wait their turn in order, and a turn is handed on at the next turn
 * of the event loop, after whatever I/O of other identities is ready. A request holds
 * its slot while the gateway works on it and while the engine's answer is due any
 * moment: it gives it up when its answer is out, when it becomes a long stream or
 * session, or once the engine has taken ENGINE_GRACE_MS over it (a `stop` waiting for
 * its container costs the gateway nothing meanwhile). One large JSON body (over
 * LARGE_BODY bytes) per identity is decoded and judged at a time: that is the work that
 * holds the event loop longest.
 */
import { GatewayError } from './errors'

export const SLOTS = 8
/** Requests of one identity waiting for a slot; beyond, 429. */
export const MAX_WAITING = 1024
export const ENGINE_GRACE_MS = 50
export const LARGE_BODY = 64 * 1024

interface Lane { running: number, readonly waiting: Array<() => void>, readonly size: number }

/** FIFO lanes of `size` slots per key, handed on with setImmediate. */
class Lanes {
  private readonly lanes = new Map<string, Lane>()

  constructor (private readonly size: number) {}

  /** Resolves with the function that gives the slot back (once). */
  async take (key: string, tenant: string | null): Promise<() => void> {
    let lane = this.lanes.get(key)
    if (lane === undefined) {
      lane = { running: 0, waiting: [], size: this.size }
      this.lanes.set(key, lane)
    }
    if (lane.running < lane.size && lane.waiting.length === 0) {
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

  /** A slot comes free: the next in line gets it on the next turn of the loop, else it is free. */
  private handOn (key: string, lane: Lane): void {
    const next = lane.waiting.shift()
    if (next !== undefined) {
      setImmediate(next)
      return
    }
    if (--lane.running === 0) this.lanes.delete(key)
  }

  get keys (): number { return this.lanes.size }
}

/** One request's turn: its slot, and the large-body lane while it holds that. */
export class Turn {
  private released = false
  private timer: NodeJS.Timeout | undefined

  constructor (private readonly giveBack: () => void) {}

  /** The request is with the engine now: the slot goes after ENGINE_GRACE_MS unless given back before. */
  engineWait (): void {
    if (this.released || this.timer !== undefined) return
    this.timer = setTimeout(() => { this.release() }, ENGINE_GRACE_MS)
    this.timer.unref()
  }

  release (): void {
    if (this.released) return
    this.released = true
    if (this.timer !== undefined) clearTimeout(this.timer)
    this.giveBack()
  }
}

export class Turns {
  private readonly slots = new Lanes(SLOTS)
  private readonly large = new Lanes(1)

  /** Wait for a slot of `identity`; throws IDENTITY_BUSY when too many wait already. */
  async take (identity: string, tenant: string | null): Promise<Turn> {
    return new Turn(await this.slots.take(identity, tenant))
  }

  /** Wait for `identity`'s large-body lane; call the result when the body has been judged. */
  async largeBody (identity: string, tenant: string | null): Promise<() => void> {
    return await this.large.take(identity, tenant)
  }

  /** Identities with requests in progress or waiting (for tests). */
  get busy (): number { return this.slots.keys }
}
