/**
 * An ordinary exchange with the engine through the dispatcher's own handler interface
 * (undici's `dispatch`), for what forward() sends with a body it holds (or none): an
 * answer of declared length up to `smallMax` is collected whole, and the promise settles
 * with it once it is complete; any other answer settles with its head and a Readable
 * that the dispatcher feeds, with its backpressure (paused while the Readable is full).
 *
 * undici's `request()` makes a stream and an async resource for every answer, which
 * the small ones (`_ping`, `version`, inspects) are read whole out of again: on this
 * 2-core machine that was a fifth of the gateway's CPU per `_ping` at 32 concurrent.
 * The headers are undici's own parsing of them, as `request()` gives them.
 *
 * `whole2xx`: a successful answer of any length (a list the gateway narrows to a tenant,
 * sent chunked by the engine) is collected whole too, up to `max` bytes (beyond, the
 * exchange is aborted with `tooLarge()`): the gateway reads it whole anyway, and a stream
 * and its async iteration per list cost more than the chunks themselves.
 */
import type { EventEmitter } from 'node:events'
import type { IncomingHttpHeaders } from 'node:http'
import { Readable } from 'node:stream'
import { errors, type Dispatcher } from 'undici'
import { declaredLength } from './streams'

export interface DispatchedAnswer {
  readonly statusCode: number
  readonly headers: IncomingHttpHeaders
  /** The whole body, when the answer declared a length of at most `smallMax`. */
  readonly whole?: Buffer
  /** Otherwise the body as it comes. */
  readonly body?: Readable
}

/** What aborts the exchange: forward's Abort (`aborted`, and an `abort` event). */
type AbortSource = EventEmitter & { readonly aborted: boolean }

export async function dispatchAnswer (
  dispatcher: Dispatcher,
  opts: { method: string, path: string, headers: Record<string, string | string[]>, body?: Buffer },
  signal: AbortSource,
  smallMax: number,
  whole2xx?: { readonly max: number, readonly tooLarge: () => Error }
): Promise<DispatchedAnswer> {
  return await new Promise<DispatchedAnswer>((resolve, reject) => {
    let controller: Dispatcher.DispatchController | null = null
    let settled = false
    let ended = false
    let status = 0
    let head: IncomingHttpHeaders = {}
    let chunks: Buffer[] | null = null
    let size = 0
    let limit = Infinity
    let stream: Readable | null = null
    const aborted = (): Error => new errors.RequestAbortedError()
    const onAbort = (): void => { controller?.abort(aborted()) }
    signal.once('abort', onAbort)
    const fail = (err: Error): void => {
      signal.off('abort', onAbort)
      if (!settled) {
        settled = true
        reject(err)
      } else {
        stream?.destroy(err)
      }
    }
    const handler: Dispatcher.DispatchHandler = {
      onRequestStart (c) {
        controller = c
        if (signal.aborted) c.abort(aborted())
      },
      onResponseStart (c, statusCode, headers) {
        // Informational answers (100 Continue) are not the answer.
        if (statusCode < 200) return
        const length = declaredLength(headers)
        const collect = whole2xx !== undefined && statusCode < 300
        if (collect) limit = whole2xx.max
        if ((length !== undefined && length <= smallMax) || collect) {
          // Settled with the whole body at its end (onResponseEnd).
          chunks = []
          status = statusCode
          head = headers
          return
        }
        stream = new Readable({
          // As undici's own answer streams.
          highWaterMark: 64 * 1024,
          read () { c.resume() },
          destroy (err, cb) {
            // The consumer gave up before the end (client gone, a failed pipe): the engine's answer is abandoned too.
            if (!ended) c.abort(err ?? aborted())
            cb(err)
          },
        })
        settled = true
        resolve({ statusCode, headers, body: stream })
      },
      onResponseData (c, chunk) {
        if (chunks !== null) {
          size += chunk.length
          if (size > limit) c.abort(whole2xx!.tooLarge())
          else chunks.push(chunk)
        } else if (stream !== null && !stream.push(chunk)) c.pause()
      },
      onResponseEnd () {
        ended = true
        signal.off('abort', onAbort)
        if (chunks !== null) {
          settled = true
          resolve({ statusCode: status, headers: head, whole: chunks.length === 1 ? chunks[0] : Buffer.concat(chunks) })
        } else {
          stream?.push(null)
        }
      },
      onResponseError (_c, err) {
        fail(err)
      },
    }
    try {
      dispatcher.dispatch({ method: opts.method as Dispatcher.HttpMethod, path: opts.path, headers: opts.headers, body: opts.body }, handler)
    } catch (err) {
      fail(err as Error)
    }
  })
}
