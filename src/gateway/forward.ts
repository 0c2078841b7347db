/**
 * Forwarding an ordinary (non-hijacked) request: the request target exactly as
 * received and checked, end-to-end headers, the body either as the buffered bytes
 * the gateway inspected (fresh Content-Length) or streamed with backpressure; the
 * response streamed back the same way. A client's disconnect aborts the upstream
 * request, whether or not the engine has answered yet.
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import { EventEmitter } from 'node:events'
import { Readable } from 'node:stream'
import { hasBody, JsonLineSplitter } from './body'
import type { RequestContext } from './context'
import { counter, declaredLength, finishOnce, relay } from './streams'
import { GatewayError } from '../api/errors'
import { endToEnd, type HeaderMap } from './headers'
import { upstreamError, upstreamRequestHeaders, type Upstream } from './upstream'
import type { AnswerEvents, BodyFilter, LocalAnswer, ResponseFilter } from './exchange'
import { decodeJson, encodeBody } from '../api/body/decode'
import { narrowList } from './json-list'
import { dispatchAnswer, type DispatchedAnswer } from './dispatch'

type Dispatcher = Upstream['pool'] | ReturnType<Upstream['own']>

export async function forward (ctx: RequestContext, req: IncomingMessage, res: ServerResponse, upstream: Upstream, on: AnswerEvents): Promise<void> {
  const target = ctx.target
  if (!target) throw new Error('forward before routing')
  if (!target.operation.streams) return await exchange(ctx, req, res, upstream, upstream.pool, on)
  // A stream (logs -f, events, a copy) may be held for hours: on a connection of its own,
  // gone with it, never a pooled Client that outlives it (upstream.ts).
  const own = upstream.own()
  try {
    await exchange(ctx, req, res, upstream, own, on)
  } finally {
    upstream.release(own)
  }
}

async function exchange (ctx: RequestContext, req: IncomingMessage, res: ServerResponse, upstream: Upstream, dispatcher: Dispatcher, on: AnswerEvents): Promise<void> {
  const target = ctx.target!
  const abort = new Abort()
  const onClientGone = (): void => {
    if (!res.writableFinished) {
      ctx.aborted ??= 'client-closed'
      abort.abort()
    }
  }
  res.once('close', onClientGone)
  const finish = finishOnce(on, () => { ctx.aborted ??= 'not-recorded' })

  let body: Buffer | Readable | undefined
  let refused: { error?: unknown } | undefined
  if (ctx.body) {
    body = ctx.body
    ctx.bytesIn = ctx.body.length
  } else if (hasBody(req)) {
    body = req.pipe(counter((n) => { ctx.bytesIn += n }))
    if (ctx.bodyFilter) {
      refused = {}
      body = Readable.from(filtered(ctx.bodyFilter, body, refused), { objectMode: false })
    }
  }

  const sent = performance.now()
  let answer: UpstreamAnswer
  try {
    const opts = { method: req.method as 'GET', path: ctx.upstreamUrl ?? target.rawUrl, headers: upstreamRequestHeaders(req, ctx, upstream) }
    // What the small-answer path below reads whole (no stream, no answer filter, a body
    // the gateway holds) goes through the dispatcher's handler interface (dispatch.ts).
    // A JSON answer narrowed to a tenant (lists) is read whole there too, when successful.
    const narrowed = ctx.respond?.kind === 'json'
    answer = !target.operation.streams && (!ctx.respond || narrowed) && req.method !== 'HEAD' && !(body instanceof Readable)
      ? await dispatchAnswer(dispatcher, { ...opts, body }, abort, SMALL_ANSWER, narrowed ? { max: FILTERED_ANSWER_MAX, tooLarge: () => tooLargeToFilter(ctx) } : undefined)
      : await dispatcher.request({ ...opts, body, signal: abort })
  } catch (err) {
    // A body filter's refusal is the answer, whatever the engine made of the cut upload.
    if (refused?.error !== undefined) throw refused.error
    if (err instanceof GatewayError) throw err
    if (abort.aborted) return
    throw upstreamError(err, upstream.url)
  }
  ctx.upstreamMs = performance.now() - sent
  ctx.status = answer.statusCode
  // The engine has what it was sent: a stream (logs -f, events, a pull) goes on without it;
  // any other answer is the gateway's work again, in the identity's turn.
  if (target.operation.streams) on('streaming')
  else await on('answering')

  if (ctx.respond && answer.statusCode >= 200 && answer.statusCode < 300 && req.method !== 'HEAD') {
    try {
      await respondFiltered(ctx, ctx.respond, answer, res, abort, finish)
    } finally {
      ctx.upstreamMs = performance.now() - sent
      res.off('close', onClientGone)
    }
    return
  }

  const length = declaredLength(answer.headers)
  // A small answer of declared length (ping, version, inspect, most lists) is read
  // whole, recorded, then sent in one write: no stream plumbing per request.
  if (!target.operation.streams && length !== undefined && length <= SMALL_ANSWER && req.method !== 'HEAD') {
    let whole: Buffer
    try {
      whole = await readWhole(ctx, answer, length)
    } catch (err) {
      if (abort.aborted) return
      // Nothing has been sent yet: the client gets an error instead of a cut answer.
      throw err instanceof GatewayError ? err : upstreamError(err, upstream.url)
    } finally {
      ctx.upstreamMs = performance.now() - sent
      res.off('close', onClientGone)
    }
    // An engine error naming the tenant's objects, in the tenant's names (tenancy/names.ts).
    if (ctx.errorText !== undefined && answer.statusCode >= 400) whole = errorInTenantNames(whole, ctx.errorText)
    ctx.bytesOut = whole.length
    await finish()
    // The engine's own Date header is passed on; Node must not add a second one.
    res.sendDate = false
    res.writeHead(answer.statusCode, whole.length === length ? endToEnd(answer.headers) : { ...endToEnd(answer.headers), 'content-length': String(whole.length) })
    res.end(whole)
    return
  }
  // Not small: read as it comes (an answer read whole came by the path above).
  const stream = answer.body!
  // An answer without a body is complete with its head: record it before the head.
  if (req.method === 'HEAD' || answer.statusCode === 204 || answer.statusCode === 304 || length === 0) {
    try {
      await finish()
    } catch (err) {
      stream.destroy()
      throw err
    }
  }
  // The engine's own Date header is passed on; Node must not add a second one.
  res.sendDate = false
  res.writeHead(answer.statusCode, endToEnd(answer.headers))
  // Streams (logs -f, events, pull progress) must reach the client as they come,
  // not when Node's buffers fill up.
  if (target.operation.streams) res.flushHeaders()
  try {
    // A chunked or close-delimited answer (no length) is complete only with its end:
    // recorded once the engine's end is in, before the end is passed on; one of declared
    // length before its completing chunk; cut if it cannot be.
    await relay(stream, res, { count: (n) => { ctx.bytesOut += n }, beforeEnd: finish, length })
  } catch (err) {
    if (!abort.aborted) {
      ctx.aborted ??= 'upstream-error'
      res.destroy()
    }
  } finally {
    ctx.upstreamMs = performance.now() - sent
    res.off('close', onClientGone)
  }
}

/**
 * A client's disconnect, as undici's `signal` (an EventEmitter that emits `abort`,
 * which undici takes as it takes an AbortSignal): an AbortController and its EventTarget
 * cost more per request than the rest of forward's bookkeeping together.
 */
class Abort extends EventEmitter {
  aborted = false
  abort (): void {
    if (this.aborted) return
    this.aborted = true
    this.emit('abort')
  }
}

/** An engine error document `{"message": ...}` with its message rewritten; anything else as it came. */
function errorInTenantNames (raw: Buffer, rewrite: (message: string) => string): Buffer {
  let doc: any
  try { doc = JSON.parse(raw.toString('utf8')) } catch { return raw }
  if (doc === null || typeof doc !== 'object' || typeof doc.message !== 'string') return raw
  const message = rewrite(doc.message)
  return message === doc.message ? raw : Buffer.from(JSON.stringify({ ...doc, message }) + '\n')
}

/** A body through its filter; the filter's error is kept, so that it (not undici's view of it) answers the client. */
async function * filtered (filter: BodyFilter, source: AsyncIterable<Buffer>, refused: { error?: unknown }): AsyncGenerator<Buffer> {
  try {
    yield * filter(source)
  } catch (err) {
    // Only the filter's own refusals: a client that went away is not refused.
    if (err instanceof GatewayError) refused.error = err
    throw err
  }
}

/** The gateway's own answer in the engine's shape (JSON), recorded before it is sent. */
export async function answerLocally (ctx: RequestContext, answer: LocalAnswer, res: ServerResponse, on: AnswerEvents): Promise<void> {
  const body = Buffer.from(JSON.stringify(answer.body) + '\n')
  ctx.status = answer.status
  ctx.bytesOut = body.length
  await on('finished')
  res.writeHead(answer.status, { 'content-type': 'application/json', 'content-length': String(body.length) })
  res.end(body)
}

/** Answers up to this declared length are read whole and sent in one write. */
const SMALL_ANSWER = 256 * 1024

type Answer = Awaited<ReturnType<Upstream['pool']['request']>>

/** The engine's answer, from undici's request() or from dispatchAnswer (already whole when small). */
type UpstreamAnswer = Answer | DispatchedAnswer

/** A small answer of declared length, read whole (and checked to be whole). */
async function readWhole (ctx: RequestContext, answer: UpstreamAnswer, length: number): Promise<Buffer> {
  const whole = 'whole' in answer ? answer.whole : undefined
  const body = whole ?? (length === 0 ? EMPTY : Buffer.from(await (answer as Answer).body.arrayBuffer()))
  if (body.length !== length) throw new GatewayError('UPSTREAM_FAILED', `the engine's answer to ${ctx.target?.operation.id} ended after ${body.length} of ${length} bytes`)
  return body
}

const EMPTY = Buffer.alloc(0)

/** Largest JSON answer the gateway reads whole to narrow it to a tenant (lists, info). */
const FILTERED_ANSWER_MAX = 256 * 1024 * 1024

/**
 * The head of a narrowed answer: the engine's own headers, its Content-Type above all
 * (`application/json`, `application/x-ndjson`, `application/jsonl` or
 * `application/json-seq` for events, as the engine negotiated it from the client's
 * Accept), less the framing of a body whose length the narrowing changes.
 */
export function narrowedHeaders (engineHeaders: Record<string, string | string[] | undefined>): HeaderMap {
  const headers = endToEnd(engineHeaders)
  delete headers['content-length']
  delete headers['transfer-encoding']
  return headers
}

/** Whether a list came through its filter with every element, unchanged and in order. */
function keptWhole (before: unknown, after: unknown): boolean {
  return Array.isArray(before) && Array.isArray(after) && before.length === after.length && before.every((x, i) => x === after[i])
}

/**
 * A JSON answer narrowed to a tenant: the bytes to send. When the filter changed nothing
 * (it returned the document itself, or a list with every element in order) the engine's
 * own bytes go out. Otherwise the narrowed document is re-encoded with every number as
 * the engine wrote it (uint64 counters such as a v1.52 network's IPAM statistics exceed
 * a double) and every field the gateway does not know kept; like Go's encoder, U+2028
 * and U+2029 are escaped and a newline ends the answer.
 */
export async function narrowJson (raw: Buffer, filter: Extract<ResponseFilter, { kind: 'json' }>, opId: string): Promise<Buffer> {
  if (filter.list !== undefined) {
    const narrowed = narrowList(raw, filter.list)
    if (narrowed !== undefined) return narrowed
  }
  let doc: unknown
  // JSON.parse is exact for integers of up to 15 digits and for floats (Go and JavaScript
  // print doubles alike); a longer run of digits anywhere takes the exact decoder.
  // (A run of digits is the same in the UTF-8 text as in the bytes: one decoding serves both.)
  const text = raw.toString('utf8')
  const exact = LONG_DIGITS.test(text)
  try {
    doc = exact ? decodeJson(raw) : JSON.parse(text)
  } catch (err) {
    throw new GatewayError('UPSTREAM_FAILED', `the engine's answer to ${opId} is not JSON; not passed to a tenant unfiltered`, { cause: err })
  }
  const narrowed = await filter.transform(doc)
  if (narrowed === doc || keptWhole(doc, narrowed)) return raw
  // Without exact numbers the document holds plain JSON values only, which JSON.stringify
  // writes as encodeBody does (at a third of its cost on a container's inspect answer); a
  // lone surrogate, which encodeBody refuses, takes encodeBody's path and is refused there.
  let out = exact ? undefined : JSON.stringify(narrowed) as string | undefined
  if (out === undefined || ESCAPED_SURROGATE.test(out)) out = encodeBody(narrowed).toString('utf8')
  return Buffer.from(out.replace(/\u2028/g, '\\u2028').replace(/\u2029/g, '\\u2029') + '\n', 'utf8')
}

/** How JSON.stringify writes a lone UTF-16 surrogate (or a text that looks like one: then encodeBody decides). */
const ESCAPED_SURROGATE = /\\ud[89a-f][0-9a-f]{2}/

/**
 * A stream of JSON texts (events) narrowed record by record, in order, each kept with its
 * exact bytes or dropped (and dropped when it is not JSON). A kept record that `view`
 * changes is decoded again exactly (an event's timeNano exceeds a double) and re-encoded,
 * its RFC 7464 record separator kept.
 *
 * Used as relay()'s `map` (streams.ts), one chunk at a time, not as a chain of async
 * generators in a pipeline: a tenant's `events` stream may be held for days, and each
 * generator, its pending requests and the pipeline stage around it cost several
 * kilobytes per held stream. What a chunk's kept records come to is written as one
 * buffer of its own (not a slice of the shared pool, which an idle stream's last write
 * would pin).
 */
export function lineNarrower (keep: (event: any) => Promise<boolean>, view?: (event: any) => unknown): (chunk: Buffer) => Promise<Buffer | undefined> {
  const lines = new JsonLineSplitter()
  return async (chunk) => {
    const parts: Buffer[] = []
    let size = 0
    for (const { bytes, line, value } of lines.records(chunk)) {
      if (value === undefined || !await keep(value)) continue
      if (view === undefined || view(value) === value) {
        parts.push(bytes, NEWLINE)
        size += bytes.length + 1
        continue
      }
      const rs = line.startsWith('\x1e')
      const exact = encodeBody(view(decodeJson(rs ? bytes.subarray(1) : bytes)))
      if (rs) parts.push(RECORD_SEPARATOR)
      parts.push(exact, NEWLINE)
      size += (rs ? 1 : 0) + exact.length + 1
    }
    if (size === 0) return undefined
    const out = Buffer.allocUnsafeSlow(size)
    let at = 0
    for (const p of parts) at += p.copy(out, at)
    return out
  }
}

const RECORD_SEPARATOR = Buffer.from('\x1e')

const NEWLINE = Buffer.from('\n')
const LONG_DIGITS = /[0-9]{16}/

function tooLargeToFilter (ctx: RequestContext, why: 'filter' | 'hold' = 'filter'): GatewayError {
  return new GatewayError('UPSTREAM_FAILED', `the engine's answer to ${ctx.target?.operation.id} is too large to ${why} for a tenant`)
}

/** The engine's whole answer, read up to FILTERED_ANSWER_MAX (`why`: what the gateway holds it for). */
async function wholeAnswer (ctx: RequestContext, answer: Answer, why: 'filter' | 'hold'): Promise<Buffer> {
  const chunks: Buffer[] = []
  let size = 0
  for await (const chunk of answer.body) {
    size += (chunk as Buffer).length
    if (size > FILTERED_ANSWER_MAX) throw tooLargeToFilter(ctx, why)
    chunks.push(chunk as Buffer)
  }
  return Buffer.concat(chunks)
}

/**
 * An answer narrowed to the caller's tenant: JSON read whole and transformed, or a
 * stream of JSON texts (events) passed record by record, each kept or dropped in order.
 */
async function respondFiltered (ctx: RequestContext, filter: ResponseFilter, upstreamAnswer: UpstreamAnswer, res: ServerResponse, abort: Abort, finish: () => Promise<void>): Promise<void> {
  const headers = narrowedHeaders(upstreamAnswer.headers)
  res.sendDate = false
  if (filter.kind === 'json') {
    const whole = 'whole' in upstreamAnswer ? upstreamAnswer.whole : undefined
    const out = await narrowJson(whole ?? await wholeAnswer(ctx, upstreamAnswer as Answer, 'filter'), filter, ctx.target?.operation.id ?? '')
    ctx.bytesOut = out.length
    await finish()
    res.writeHead(upstreamAnswer.statusCode, { ...headers, 'content-length': String(out.length) })
    res.end(out)
    return
  }
  const answer = upstreamAnswer as Answer
  if (filter.kind === 'after') {
    const out = await wholeAnswer(ctx, answer, 'hold')
    await filter.then()
    ctx.bytesOut = out.length
    await finish()
    res.writeHead(answer.statusCode, answer.statusCode === 204 ? headers : { ...headers, 'content-length': String(out.length) })
    res.end(out)
    return
  }
  res.writeHead(answer.statusCode, headers)
  res.flushHeaders()
  try {
    await relay(answer.body, res, { count: (n) => { ctx.bytesOut += n }, beforeEnd: finish, map: lineNarrower(filter.keep, filter.view) })
  } catch {
    if (!abort.aborted) {
      ctx.aborted ??= 'upstream-error'
      res.destroy()
    }
  }
}
