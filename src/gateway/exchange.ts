/**
 * What a request's exchange with the engine may carry besides the bytes: the tenancy
 * stage sets these (tenancy/), the context holds them (context.ts), forward.ts applies them.
 */

import type { ListNarrowing } from './json-list'

/** How the engine's answer is filtered for a tenant. */
export type ResponseFilter =
  /**
   * A JSON answer (2xx only), read whole, transformed and re-serialized with every number
   * as the engine wrote it (forward.ts narrowJson), or sent as the engine's own bytes
   * when the transform changed nothing. `list`: the same narrowing done on the engine's
   * bytes in one pass (json-list.ts), used when the answer has the engine's shape; a filter
   * composed with another (tenancy's viewAnswer, redact.ts) is a new one without it.
   */
  | { readonly kind: 'json', transform (body: any): Promise<unknown> | unknown, readonly list?: ListNarrowing }
  /**
   * A stream of JSON lines (events): each kept or dropped, in order. `view`: what a kept
   * line shows instead (it returns the line itself when it changes nothing, and the line
   * then goes out as the engine's exact bytes; else re-encoded with every number exact).
   */
  | { readonly kind: 'lines', keep (event: any): Promise<boolean>, view? (event: any): unknown }
  /**
   * An answer passed on as the engine gave it, once `then` has done what the engine's
   * success calls for (a `rm -v` removes the container's anonymous volumes the gateway
   * made): the client hears of the success after it.
   */
  | { readonly kind: 'after', then (): Promise<void> }

/**
 * A streamed request body rewritten on its way to the engine (an image archive): the
 * client's bytes in, the bytes to forward out. A GatewayError thrown while it runs
 * refuses the request; the engine's upload is cut short, so it acts on nothing.
 */
export type BodyFilter = (source: AsyncIterable<Buffer>) => AsyncIterable<Buffer>

/** An answer the gateway gives itself, in the engine's shape; nothing is forwarded. */
export interface LocalAnswer { readonly status: number, readonly body: unknown }

/**
 * What forward, hijack and the gateway's own answers tell the pipeline about an answer,
 * at the moment it happens: the one callback they are called with (pipeline.ts
 * answerEvents), in place of anything stored on the request.
 * - `answering`: the engine's head arrived, for an answer the gateway reads before it
 *   sends it: resolves when the identity has its turn to work on it again.
 * - `streaming`: the engine's head arrived, for a streamed answer (logs -f, events, a
 *   pull): the request is a long stream from now on.
 * - `established`: a hijacked session is established, before the client hears of it,
 *   which it does only once this resolves (its first audit record is written). Rejects
 *   to end the session before it starts (its audit record could not be written).
 * - `finished`: the answer is complete but for its last byte, which goes out only once
 *   this resolves (its audit record is written, with the others of its turn of the
 *   event loop). Rejects to cut the answer short (the record could not be written).
 */
export type AnswerEvent = 'answering' | 'streaming' | 'established' | 'finished'
export interface AnswerEvents {
  (event: 'answering' | 'established' | 'finished'): Promise<void>
  (event: 'streaming'): void
}
