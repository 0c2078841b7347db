/** Byte counting on the streams between client and engine (forward.ts, hijack.ts). */
import { Transform, type Readable, type TransformCallback, type Writable } from 'node:stream'
import { streamed } from './young'

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
      streamed(chunk.length)
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

export interface RelayOptions {
  /** Sees the bytes passed on. */
  count: (n: number) => void
  /** Runs once the source has ended, before the end (and, for a body of `length`, its last chunk) is passed on. */
  beforeEnd: () => Promise<void>
  /** The body length the answer declares (as `counter`). */
  length?: number
  /** Each chunk becomes what this resolves to (nothing: dropped), in order, one at a time. */
  map?: (chunk: Buffer) => Promise<Buffer | undefined>
}

/**
 * An answer's body relayed from the engine to the client, as pipeline(source,
 * counter(...), dest) does (backpressure, the audit record before the end, a failure
 * or a close on either side ends both), with a few listeners instead of a Transform,
 * two pipes and an end-of-stream watcher per stream: a `logs -f` or `events` may be
 * held for days, by thousands of clients, and that plumbing costs several kilobytes
 * each. Resolves once `dest` has finished; rejects (the source destroyed) on an error
 * or a premature close of either side.
 */
export async function relay (source: Readable, dest: Writable, o: RelayOptions): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    let seen = 0
    let held: Buffer | undefined
    let settled = false
    let draining = false
    let mapping = false
    const settle = (err?: Error | null): void => {
      if (settled) return
      settled = true
      for (const [emitter, event, listener] of listeners) emitter.off(event, listener)
      if (err) {
        source.destroy()
        reject(err)
      } else {
        resolve()
      }
    }
    const pass = (chunk: Buffer): void => {
      o.count(chunk.length)
      streamed(chunk.length)
      seen += chunk.length
      // The chunk that completes a body of declared length waits for beforeEnd (as counter's).
      if (o.length !== undefined && seen >= o.length) held = chunk
      else if (!dest.write(chunk)) { draining = true; source.pause() }
    }
    const map = o.map
    const onData = map === undefined
      ? pass
      : (chunk: Buffer): void => {
          // One chunk at a time, in order: the source waits while a chunk is mapped.
          mapping = true
          source.pause()
          map(chunk).then((out) => {
            mapping = false
            if (settled) return
            if (out !== undefined && out.length > 0) pass(out)
            if (!draining) source.resume()
          }, settle)
        }
    const onDrain = (): void => {
      draining = false
      if (!mapping) source.resume()
    }
    const onEnd = (): void => {
      o.beforeEnd().then(() => { if (!settled) dest.end(held) }, settle)
    }
    const onFinish = (): void => { settle() }
    const onSourceClose = (): void => { if (!source.readableEnded) settle(prematureClose()) }
    const onDestClose = (): void => { if (!dest.writableFinished) settle(prematureClose()) }
    // All taken off when settled (each of end, close and finish comes once anyway).
    const listeners: Array<[Readable | Writable, string, (arg: any) => void]> = [
      [source, 'data', onData], [source, 'end', onEnd], [source, 'close', onSourceClose],
      [dest, 'drain', onDrain], [dest, 'finish', onFinish], [dest, 'close', onDestClose],
    ]
    if (source.destroyed || dest.destroyed || dest.writableEnded) {
      source.on('error', noop)
      settle(prematureClose())
      return
    }
    // The error listeners stay: an error after the end (an abort's) is no crash.
    source.on('error', settle)
    dest.on('error', settle)
    for (const [emitter, event, listener] of listeners) emitter.on(event, listener)
  })
}

function noop (): void {}

function prematureClose (): Error {
  return Object.assign(new Error('Premature close'), { code: 'ERR_STREAM_PREMATURE_CLOSE' })
}
