/** Byte counting on the streams between client and engine (forward.ts, hijack.ts). */
import type { ServerResponse } from 'node:http'
import { Transform, type Readable, type TransformCallback } from 'node:stream'

/**
 * A pass-through stream that adds the bytes it carries to a counter, and runs
 * `beforeEnd` once all bytes have arrived but before the answer is complete (waiting
 * for it when it returns a promise: the audit record's write). For a body of known
 * `length` the chunk that completes it is held back until `beforeEnd` has run (the
 * client would otherwise hold a complete answer); for a chunked or close-delimited
 * body the end itself is what completes the answer.
 */
export function counter (add: (n: number) => void, beforeEnd?: () => void | Promise<void>, length?: number): Transform {
  let seen = 0
  let held: Buffer | null = null
  return new Transform({
    transform (chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback) {
      add(chunk.length)
      seen += chunk.length
      if (beforeEnd && length !== undefined && seen >= length) {
        held = chunk
        cb()
      } else {
        cb(null, chunk)
      }
    },
    flush (cb: TransformCallback) {
      let pending
      try {
        pending = beforeEnd?.()
      } catch (err) {
        cb(err as Error)
        return
      }
      if (pending === undefined) cb(null, held ?? undefined)
      else pending.then(() => { cb(null, held ?? undefined) }, (err: unknown) => { cb(err as Error) })
    },
  })
}

/**
 * An engine's answer body relayed to the client as `pipeline(body, counter(...), res)`
 * would, without a stream stage per chunk: each chunk counted and written with
 * backpressure; `beforeEnd` run once every byte has arrived and before the answer is
 * complete (for a body of known `length`, the chunk that completes it is held until
 * then); resolved once the client's response has finished. Rejected, with the body
 * destroyed, when the body fails, `beforeEnd` fails, or the response closes first; the
 * caller then cuts the answer.
 */
export async function relayBody (body: Readable, res: ServerResponse, add: (n: number) => void, beforeEnd: () => Promise<void>, length?: number): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    let seen = 0
    let held: Buffer | undefined
    let settled = false
    const off = (): void => {
      body.off('data', onData)
      body.off('end', onEnd)
      body.off('error', fail)
      res.off('drain', onDrain)
      res.off('close', onClose)
      res.off('error', fail)
      res.off('finish', onFinish)
    }
    const fail = (err: unknown): void => {
      if (settled) return
      settled = true
      off()
      body.destroy()
      reject(err)
    }
    const onData = (chunk: Buffer): void => {
      add(chunk.length)
      seen += chunk.length
      if (length !== undefined && seen >= length) {
        held = held === undefined ? chunk : Buffer.concat([held, chunk])
        return
      }
      if (!res.write(chunk)) body.pause()
    }
    const onDrain = (): void => { body.resume() }
    const onEnd = (): void => {
      beforeEnd().then(() => {
        if (settled) return
        if (held !== undefined) res.end(held)
        else res.end()
      }, fail)
    }
    const onFinish = (): void => {
      if (settled) return
      settled = true
      off()
      resolve()
    }
    const onClose = (): void => { fail(Object.assign(new Error('the client closed the answer before its end'), { code: 'ERR_STREAM_PREMATURE_CLOSE' })) }
    body.on('data', onData)
    body.once('end', onEnd)
    body.once('error', fail)
    res.on('drain', onDrain)
    res.once('close', onClose)
    res.once('error', fail)
    res.once('finish', onFinish)
  })
}

/**
 * The `finished` event of an answer, sent once however many ways its end is seen (a
 * head-only answer is finished before its head, and its declared length is never
 * reached); a second call waits for the first. When it fails (the audit record could
 * not be written) the answer is cut: `cut` records why before the error goes on.
 */
export function finishOnce (on: (event: 'finished') => void | Promise<void>, cut: () => void): () => Promise<void> {
  let sent: Promise<void> | null = null
  const send = async (): Promise<void> => {
    try {
      await on('finished')
    } catch (err) {
      cut()
      throw err
    }
  }
  return async () => { await (sent ??= send()) }
}

/** The body length an answer declares, if it declares one. */
export function declaredLength (headers: Record<string, string | string[] | undefined>): number | undefined {
  const v = headers['content-length']
  const n = typeof v === 'string' ? Number(v) : NaN
  return Number.isSafeInteger(n) && n >= 0 ? n : undefined
}
