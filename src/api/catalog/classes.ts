/**
 * What an operation costs, in the words rate limits are configured in (rates.roles in
 * the configuration; src/gateway/rates.ts): a class for its request rate, and whether
 * it holds a connection open for long (a hijacked session, or a long stream).
 *
 *  - `transfer`: moves images, build contexts or archives through the engine: builds,
 *    pulls, pushes, loads, imports, saves, plugin pulls and pushes, and every operation
 *    whose request body streams (build contexts, `docker cp` into a container). Each
 *    one can keep the engine's disk and network busy for minutes.
 *  - `read`: every other GET and HEAD: the engine reads its own state.
 *  - `write`: everything else (create, start, stop, remove, exec, attach...).
 *
 *  - `session`: the connection is hijacked (attach, exec start, BuildKit's h2c tunnels).
 *  - `stream`: the answer is a long stream (logs -f, events, stats, pull progress, wait).
 */
import type { Operation } from './types'

export const RATE_CLASSES = Object.freeze(['read', 'write', 'transfer'] as const)
export type RateClass = (typeof RATE_CLASSES)[number]

export const HOLD_CLASSES = Object.freeze(['session', 'stream'] as const)
export type HoldClass = (typeof HOLD_CLASSES)[number]

/** Kinds whose long answers carry images or plugins (pull, push, save, plugin pull/push/upgrade) or a build. */
const MOVES_IMAGES = new Set<Operation['kind']>(['image', 'plugin', 'build'])

export function rateClass (op: Operation): RateClass {
  if (op.body === 'stream' || (op.streams && MOVES_IMAGES.has(op.kind) && op.hijack === undefined)) return 'transfer'
  return op.method === 'GET' || op.method === 'HEAD' ? 'read' : 'write'
}

/** What a request of `op` holds open while it runs, if anything. */
export function holdClass (op: Operation): HoldClass | null {
  if (op.hijack !== undefined) return 'session'
  return op.streams ? 'stream' : null
}
