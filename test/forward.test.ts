// src/gateway/forward.ts on its own, against the run's real engine: a bare node:http
// server hands each request to forward() (no listener, no policy, no pipeline) and
// records the answer events forward() sends back (exchange.ts AnswerEvents), so that
// when each comes, and what the client has seen by then, is what is checked.
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import t, { type Test } from 'tap'
import { resolveTarget } from '../src/api/catalog/route'
import { newContext, type RequestContext } from '../src/gateway/context'
import type { AnswerEvent, AnswerEvents } from '../src/gateway/exchange'
import { answerLocally, forward, narrowJson } from '../src/gateway/forward'
import { encodeBody } from '../src/api/body/decode'
import { createUpstream, type Upstream } from '../src/gateway/upstream'
import { parseConfig } from '../src/config'
import { engine, request, uniqueName } from './helpers/gateway'

const eng = engine()
const API = { minVersion: '1.24', maxVersion: '1.56' }

interface Seen { event: AnswerEvent, headersSent: boolean, ended: boolean }
/** What a test does to the request before forward() runs, and to the events as they come. */
interface Setup {
  prepare?: (ctx: RequestContext) => void
  /** Called for each event; may throw (as the pipeline does when the audit record cannot be written). */
  onEvent?: (event: AnswerEvent, ctx: RequestContext) => void
  local?: boolean
}
interface Done { ctx: RequestContext, events: Seen[], error?: unknown }

/** A bare server that forwards every request to `up`; `next` says how the next request is set up. */
async function harness (t: Test, up: Upstream): Promise<{ port: number, next: (s: Setup) => Promise<Done> }> {
  let setup: Setup = {}
  let settle: (d: Done) => void = () => {}
  const server = http.createServer((req, res) => {
    const s = setup
    const ctx = newContext('test', 'tcp', req.method ?? '', req.url ?? '')
    ctx.target = resolveTarget(req.method ?? '', req.url ?? '', API)
    s.prepare?.(ctx)
    const events: Seen[] = []
    const on = ((event: AnswerEvent) => {
      events.push({ event, headersSent: res.headersSent, ended: res.writableEnded })
      s.onEvent?.(event, ctx)
      if (event === 'answering') return Promise.resolve()
    }) as AnswerEvents
    const run = s.local ? Promise.resolve(answerLocally(ctx, { status: 200, body: { local: true } }, res, on)) : forward(ctx, req, res, up, on)
    run.then(() => settle({ ctx, events }), (error: unknown) => { res.destroy(); settle({ ctx, events, error }) })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { server.closeAllConnections(); server.close() })
  const port = (server.address() as AddressInfo).port
  return {
    port,
    next: async (s) => {
      setup = s
      return await new Promise<Done>((resolve) => { settle = resolve })
    },
  }
}

interface Reply { status?: number, headers?: http.IncomingHttpHeaders, body: Buffer, error?: string }
function send (port: number, method: string, path: string, body?: string, opts: { abortAfterHead?: boolean } = {}): Promise<Reply> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = []
    const req = http.request({ host: '127.0.0.1', port, method, path, agent: false, headers: body === undefined ? {} : { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
      if (opts.abortAfterHead) { req.destroy(); resolve({ status: res.statusCode, headers: res.headers, body: Buffer.alloc(0) }); return }
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }))
      res.on('error', (e) => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks), error: e.message }))
      res.on('aborted', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks), error: 'aborted' }))
    })
    req.on('error', (e) => resolve({ body: Buffer.concat(chunks), error: e.message }))
    req.end(body)
  })
}

const up = createUpstream(parseConfig(`upstream: unix://${eng.socket}\n`, '/tmp/portcullis-forward-test.yaml').upstream)
t.teardown(() => up.close())

t.test('a small answer: read whole, `answering` then `finished` before anything is sent, the engine\'s bytes', async (t) => {
  const h = await harness(t, up)
  const [done, reply] = await Promise.all([h.next({}), send(h.port, 'GET', '/v1.41/version')])
  const direct = await request(eng.socket, 'GET', '/v1.41/version')
  t.equal(reply.status, 200)
  t.equal(reply.body.toString(), direct.text, 'the engine\'s own bytes')
  t.same(done.events.map((e) => e.event), ['answering', 'finished'])
  t.equal(done.events[1].headersSent, false, 'finished comes before the head is sent')
  t.equal(done.ctx.status, 200)
  t.equal(done.ctx.bytesOut, reply.body.length)
  t.ok(done.ctx.upstreamMs !== undefined && done.ctx.upstreamMs > 0)
})

t.test('an answer of no declared length to an ordinary request: passed on as it comes, byte for byte, `finished` before its end', async (t) => {
  const h = await harness(t, up)
  const name = uniqueName('pcx-forward-chunked')
  // Labels large enough that the engine's inspect answer is chunked (Go's server declares
  // a length only for answers that fit its first buffer).
  const labels = Object.fromEntries(Array.from({ length: 40 }, (_, i) => [`pcx.label.${i}`, 'x'.repeat(500)]))
  t.equal((await request(eng.socket, 'POST', `/containers/create?name=${name}`, { Image: eng.image, Cmd: ['true'], Labels: labels })).status, 201)
  t.teardown(async () => { await request(eng.socket, 'DELETE', `/containers/${name}?force=1`) })
  const path = `/v1.41/containers/${name}/json`
  const [done, reply] = await Promise.all([h.next({}), send(h.port, 'GET', path)])
  const direct = await request(eng.socket, 'GET', path)
  t.equal(reply.status, 200)
  t.equal(reply.headers?.['content-length'], undefined, 'the engine declared no length')
  t.ok(reply.body.length > 20_000, `a large answer (${reply.body.length} bytes)`)
  t.equal(reply.body.toString(), direct.text, 'the engine\'s own bytes')
  t.same(done.events.map((e) => e.event), ['answering', 'finished'])
  t.equal(done.events[1].ended, false, 'finished comes before the answer ends')
  t.equal(done.ctx.bytesOut, reply.body.length)
})

t.test('`finished` throwing: the client gets nothing of the answer', async (t) => {
  const h = await harness(t, up)
  const boom = new Error('audit down')
  const [done, reply] = await Promise.all([
    h.next({ onEvent: (e) => { if (e === 'finished') throw boom } }),
    send(h.port, 'GET', '/v1.41/version'),
  ])
  t.equal(done.error, boom, 'forward() rejects with the event\'s error')
  t.equal(reply.status, undefined, 'no head reached the client')
  t.equal(reply.body.length, 0)
})

t.test('a head-only answer is finished before its head: HEAD /_ping', async (t) => {
  const h = await harness(t, up)
  const [done, reply] = await Promise.all([h.next({}), send(h.port, 'HEAD', '/_ping')])
  t.equal(reply.status, 200)
  t.same(done.events.map((e) => [e.event, e.headersSent]), [['answering', false], ['finished', false]])
})

t.test('a stream: `streaming` once the head is in, `finished` before its last byte, every byte passed on', async (t) => {
  const h = await harness(t, up)
  const since = Math.floor(Date.now() / 1000) - 1
  const name = uniqueName('pcx-forward-events')
  t.equal((await request(eng.socket, 'POST', `/containers/create?name=${name}`, { Image: eng.image, Cmd: ['true'] })).status, 201)
  t.equal((await request(eng.socket, 'DELETE', `/containers/${name}`)).status, 204)
  const until = Math.floor(Date.now() / 1000) + 1
  const path = `/v1.41/events?since=${since}&until=${until}&filters=${encodeURIComponent(JSON.stringify({ container: [name] }))}`
  const [done, reply] = await Promise.all([h.next({}), send(h.port, 'GET', path)])
  const direct = await request(eng.socket, 'GET', path)
  t.equal(reply.status, 200)
  t.equal(reply.body.toString(), direct.text, 'the same events, byte for byte')
  t.match(reply.body.toString(), /"Action":"create"[^\n]*\n.*"Action":"destroy"/s)
  t.same(done.events.map((e) => e.event), ['streaming', 'finished'])
  t.equal(done.events[1].ended, false, 'finished comes before the answer ends')
  t.equal(done.ctx.bytesOut, reply.body.length)
})

t.test('a stream whose `finished` throws is cut: the client never sees its end', async (t) => {
  const h = await harness(t, up)
  const now = Math.floor(Date.now() / 1000)
  const path = `/v1.41/events?since=${now - 3600}&until=${now + 1}`
  const [done, reply] = await Promise.all([
    h.next({ onEvent: (e) => { if (e === 'finished') throw new Error('audit down') } }),
    send(h.port, 'GET', path),
  ])
  t.equal(reply.status, 200, 'the head went out when the stream began')
  t.ok(reply.error, `the answer did not complete (${reply.error})`)
  t.equal(done.ctx.aborted, 'not-recorded', 'recorded as cut for want of its record, not as the client leaving')
})

t.test('a client that leaves ends the upstream request: ctx.aborted says so', async (t) => {
  const h = await harness(t, up)
  const [done, reply] = await Promise.all([h.next({}), send(h.port, 'GET', '/v1.41/events', undefined, { abortAfterHead: true })])
  t.equal(reply.status, 200)
  t.equal(done.ctx.aborted, 'client-closed')
  t.same(done.events.map((e) => e.event), ['streaming'], 'never finished')
})

t.test('what is sent is the checked body (ctx.body), whatever the client sent', async (t) => {
  const h = await harness(t, up)
  const name = uniqueName('pcx-forward-body')
  const checked = Buffer.from(JSON.stringify({ Image: eng.image, Cmd: ['true'], Labels: { 'pcx.forwarded': 'checked' } }))
  const [done, reply] = await Promise.all([
    h.next({ prepare: (ctx) => { ctx.body = checked } }),
    send(h.port, 'POST', `/v1.41/containers/create?name=${name}`, JSON.stringify({ Image: eng.image, Labels: { 'pcx.forwarded': 'client' } })),
  ])
  t.teardown(() => request(eng.socket, 'DELETE', `/containers/${name}?force=1`))
  t.equal(reply.status, 201)
  t.equal(done.ctx.bytesIn, checked.length)
  const stored = await request(eng.socket, 'GET', `/containers/${name}/json`)
  t.equal(stored.json.Config.Labels['pcx.forwarded'], 'checked')
})

t.test('a narrowed answer: the JSON filter\'s document, finished before it is sent', async (t) => {
  const h = await harness(t, up)
  const [done, reply] = await Promise.all([
    h.next({ prepare: (ctx) => { ctx.respond = { kind: 'json', transform: (list: unknown[]) => ({ count: list.length, big: 12345678901234567890n.toString() }) } } }),
    send(h.port, 'GET', '/v1.41/containers/json?all=1'),
  ])
  t.equal(reply.status, 200)
  t.match(JSON.parse(reply.body.toString()), { count: Number })
  t.equal(reply.headers?.['content-length'], String(reply.body.length), 'a fresh length for the narrowed document')
  t.same(done.events.map((e) => [e.event, e.headersSent]), [['answering', false], ['finished', false]])
  // An error answer is not the filter's: passed on as the engine gave it.
  const [, missing] = await Promise.all([
    h.next({ prepare: (ctx) => { ctx.respond = { kind: 'json', transform: () => 'never' } } }),
    send(h.port, 'GET', '/v1.41/containers/pcx-forward-nothing/json'),
  ])
  t.equal(missing.status, 404)
  t.match(missing.body.toString(), /No such container/)
})

t.test('an engine that cannot be reached: forward() rejects, nothing was sent', async (t) => {
  const gone = createUpstream(parseConfig('upstream: unix:///tmp/pcx-no-engine-here.sock\n', '/tmp/portcullis-forward-test.yaml').upstream)
  t.teardown(() => gone.close())
  const h = await harness(t, gone)
  const [done, reply] = await Promise.all([h.next({}), send(h.port, 'GET', '/v1.41/version')])
  t.match(done.error, { code: 'UPSTREAM_UNREACHABLE' })
  t.same(done.events, [], 'no event: there was no answer')
  t.equal(reply.status, undefined)
})

t.test('answerLocally: the gateway\'s own answer, finished before it is sent', async (t) => {
  const h = await harness(t, up)
  const [done, reply] = await Promise.all([h.next({ local: true }), send(h.port, 'GET', '/v1.41/version')])
  t.equal(reply.status, 200)
  t.same(JSON.parse(reply.body.toString()), { local: true })
  t.same(done.events.map((e) => [e.event, e.headersSent]), [['finished', false]])
  t.equal(done.ctx.bytesOut, reply.body.length)
})

t.test('narrowJson: a changed answer is written as encodeBody writes it, by either path', async (t) => {
  const strip = { kind: 'json' as const, transform: async (d: any) => ({ ...d, Config: { ...d.Config, Labels: {} } }) }
  const doc = { Id: 'c'.repeat(64), Name: '/web', Args: ['<&>', 'é\u00e9', '\\ud800 is text', 'a"b\\c\n\t'], Memory: 536870912, Cpu: 0.25, Tiny: 1e-7, Neg: -3, Null: null, Yes: true, Empty: {}, List: [], Line: 'x\u2028y\u2029z', Config: { Labels: { 'io.portcullis.tenant': 'a' }, Env: null } }
  const raw = Buffer.from(JSON.stringify(doc) + '\n')
  const out = await narrowJson(raw, strip, 'ContainerInspect')
  const expected = encodeBody(await strip.transform(JSON.parse(raw.toString()))).toString('utf8').replace(/\u2028/g, '\\u2028').replace(/\u2029/g, '\\u2029') + '\n'
  t.equal(out.toString('utf8'), expected, 'the same text as encodeBody, U+2028 and U+2029 escaped, a newline at the end')
  t.notMatch(out.toString('utf8'), /[\u2028\u2029]/, 'no raw line separators')
  // A lone surrogate is refused, as encodeBody refuses it, not written.
  const lone = Buffer.from('{"Name":"\\ud800","Config":{"Labels":{"x":"y"}}}\n')
  await t.rejects(narrowJson(lone, strip, 'ContainerInspect'), /lone UTF-16 surrogate/, 'a lone surrogate is refused')
  // Numbers beyond a double keep their digits (the exact decoder's path).
  const big = Buffer.from('{"Size":18446744073709551615,"Config":{"Labels":{"x":"y"}}}\n')
  t.equal((await narrowJson(big, strip, 'ContainerInspect')).toString(), '{"Size":18446744073709551615,"Config":{"Labels":{}}}\n', 'uint64 kept exact')
})
