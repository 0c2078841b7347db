// src/gateway/hijack.ts on its own, against the run's real engine: a bare node:http
// server hands attach and exec requests to hijack() in both of its forms (an upgrade
// relayed as 101, the engine's raw 200 stream) and records the answer events it sends
// back, and when: a session's `established` before the client hears of it, `finished`
// before the last byte of an answer the engine gave instead of a session.
import http from 'node:http'
import net from 'node:net'
import type { AddressInfo } from 'node:net'
import type { Duplex } from 'node:stream'
import t, { type Test } from 'tap'
import { resolveTarget } from '../src/api/catalog/route'
import { toGatewayError } from '../src/api/errors'
import { newContext, type RequestContext } from '../src/gateway/context'
import type { AnswerEvent, AnswerEvents } from '../src/gateway/exchange'
import { hijack, writeSocketError } from '../src/gateway/hijack'
import { createUpstream } from '../src/gateway/upstream'
import { parseConfig } from '../src/config'
import { engine, request, sha256, uniqueName } from './helpers/gateway'

const eng = engine()
const API = { minVersion: '1.24', maxVersion: '1.56' }
const up = createUpstream(parseConfig(`upstream: unix://${eng.socket}\n`, '/tmp/portcullis-hijack-test.yaml').upstream)
t.teardown(() => up.close())

interface Setup {
  body?: object
  onEvent?: (event: AnswerEvent) => void
  /** Receives the closer hijack() registers (as the pipeline's Inflight does, for shutdown). */
  tracked?: (close: () => void) => void
}
interface Done { ctx: RequestContext, events: Array<{ event: AnswerEvent, clientHeard: boolean }>, error?: unknown }

/** What the client has received so far, for the events to look at. */
let clientHeard = false

async function harness (t: Test): Promise<{ port: number, next: (s: Setup) => Promise<Done> }> {
  let setup: Setup = {}
  let settle: (d: Done) => void = () => {}
  const begin = (req: http.IncomingMessage): { ctx: RequestContext, on: AnswerEvents, events: Done['events'], s: Setup } => {
    const s = setup
    const ctx = newContext('test', 'tcp', req.method ?? '', req.url ?? '')
    ctx.target = resolveTarget(req.method ?? '', req.url ?? '', API)
    if (s.body) ctx.body = Buffer.from(JSON.stringify(s.body))
    const events: Done['events'] = []
    const on = ((event: AnswerEvent) => {
      events.push({ event, clientHeard })
      s.onEvent?.(event)
      if (event === 'answering') return Promise.resolve()
    }) as AnswerEvents
    return { ctx, on, events, s }
  }
  const track = (s: Setup) => (close: () => void) => { s.tracked?.(close); return () => {} }
  const server = http.createServer((req, res) => {
    const { ctx, on, events, s } = begin(req)
    hijack(ctx, { form: 'raw', req, res }, up, track(s), on).then(() => settle({ ctx, events }), (error: unknown) => {
      if (!res.headersSent) { res.writeHead(500); res.end() } else res.destroy()
      settle({ ctx, events, error })
    })
  })
  server.on('upgrade', (req: http.IncomingMessage, socket: Duplex, head: Buffer) => {
    const { ctx, on, events, s } = begin(req)
    hijack(ctx, { form: 'upgrade', req, socket, rest: head }, up, track(s), on).then(() => settle({ ctx, events }), (error: unknown) => {
      writeSocketError(socket, toGatewayError(error))
      settle({ ctx, events, error })
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { server.closeAllConnections(); server.close() })
  return {
    port: (server.address() as AddressInfo).port,
    next: async (s) => { setup = s; clientHeard = false; return await new Promise<Done>((resolve) => { settle = resolve }) },
  }
}

/** A raw HTTP/1.1 client: writes the request head (and `stdin` once it has a 101 or 200), collects everything. */
async function client (port: number, head: string, stdin?: string, opts: { onOpen?: (s: net.Socket) => void } = {}): Promise<{ text: string, raw: Buffer }> {
  const s = net.connect(port, '127.0.0.1')
  opts.onOpen?.(s)
  const chunks: Buffer[] = []
  s.on('data', (c: Buffer) => {
    clientHeard = true
    chunks.push(c)
    if (stdin !== undefined && /^HTTP\/1\.1 (101|200)/.test(Buffer.concat(chunks).toString('latin1'))) { s.write(stdin); stdin = undefined }
  })
  s.on('error', () => {})
  s.write(head)
  await new Promise((resolve) => s.once('close', resolve))
  const raw = Buffer.concat(chunks)
  return { text: raw.toString('latin1'), raw }
}

/** The stdout/stderr payloads of a multiplexed stream (8-byte frame headers). */
function demux (data: Buffer): string {
  let out = ''
  for (let i = 0; i + 8 <= data.length;) {
    const n = data.readUInt32BE(i + 4)
    out += data.subarray(i + 8, i + 8 + n).toString()
    i += 8 + n
  }
  return out
}

async function container (t: Test, cmd: string[], extra: object = {}): Promise<string> {
  const name = uniqueName('pcx-hijack')
  const created = await request(eng.socket, 'POST', `/containers/create?name=${name}`, { Image: eng.image, Cmd: cmd, ...extra })
  t.equal(created.status, 201)
  t.teardown(() => request(eng.socket, 'DELETE', `/containers/${name}?force=1`))
  return name
}

const upgradeHead = (path: string): string => `POST ${path} HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade\r\nUpgrade: tcp\r\nContent-Length: 0\r\n\r\n`

t.test('an upgraded attach: established before the client hears of it, then the session both ways, counted', async (t) => {
  const h = await harness(t)
  const name = await container(t, ['sh', '-c', 'read l; echo "got $l"'], { OpenStdin: true, StdinOnce: true, AttachStdin: true, AttachStdout: true })
  const starting = h.next({ onEvent: (e) => { if (e === 'established') void request(eng.socket, 'POST', `/containers/${name}/start`) } })
  const [done, reply] = await Promise.all([starting, client(h.port, upgradeHead(`/v1.41/containers/${name}/attach?stream=1&stdin=1&stdout=1`), 'hello\n')])
  t.same(done.events, [{ event: 'established', clientHeard: false }], 'one event, before the 101 reached the client')
  t.match(reply.text, /^HTTP\/1\.1 101 UPGRADED\r\n/)
  const body = reply.raw.subarray(reply.raw.indexOf('\r\n\r\n') + 4)
  t.equal(demux(body), 'got hello\n')
  t.equal(done.ctx.status, 101)
  t.equal(done.ctx.hijack, 'upgrade')
  t.equal(done.ctx.bytesIn, 6, 'stdin counted')
  t.equal(done.ctx.bytesOut, body.length, 'output counted')
  t.equal(done.error, undefined)
})

t.test('`established` throwing: the session ends before it starts, the client never hears a 101', async (t) => {
  const h = await harness(t)
  const name = await container(t, ['sleep', '60'], { AttachStdout: true })
  t.equal((await request(eng.socket, 'POST', `/containers/${name}/start`)).status, 204)
  const [done, reply] = await Promise.all([
    h.next({ onEvent: (e) => { if (e === 'established') throw Object.assign(new Error('audit down')) } }),
    client(h.port, upgradeHead(`/v1.41/containers/${name}/attach?stream=1&stdout=1`)),
  ])
  t.match(done.error, { message: 'audit down' })
  t.notMatch(reply.text, /101/, 'no 101')
  t.match(reply.text, /^HTTP\/1\.1 500 /, 'the error is the client\'s answer')
  t.equal(done.ctx.hijack, 'upgrade', 'the engine had upgraded: its socket was closed unused')
})

t.test('the engine declines (no such container): its answer relayed and finished, then closed', async (t) => {
  const h = await harness(t)
  const [done, reply] = await Promise.all([h.next({}), client(h.port, upgradeHead('/v1.41/containers/pcx-hijack-nothing-here/attach?stream=1&stdout=1'))])
  t.match(reply.text, /^HTTP\/1\.1 404 Not Found\r\n/)
  t.match(reply.text, /connection: close\r\n/i)
  t.match(reply.text, /No such container: pcx-hijack-nothing-here/)
  // (The counter holding back the last byte until `finished` returns: test/streams.)
  t.same(done.events.map((e) => e.event), ['finished'], 'finished, once')
  t.equal(done.ctx.bytesOut, reply.raw.length - reply.raw.indexOf('\r\n\r\n') - 4, 'the body counted')
  t.equal(done.ctx.status, 404)
  t.equal(done.ctx.hijack, undefined)
})

t.test('the raw form: exec start answered 200 with the engine\'s raw stream until it closes', async (t) => {
  const h = await harness(t)
  const name = await container(t, ['sleep', '60'])
  t.equal((await request(eng.socket, 'POST', `/containers/${name}/start`)).status, 204)
  const exec = await request(eng.socket, 'POST', `/containers/${name}/exec`, { Cmd: ['echo', 'raw hello'], AttachStdout: true, AttachStderr: true })
  t.equal(exec.status, 201)
  const [done, reply] = await Promise.all([
    h.next({ body: { Detach: false, Tty: false } }),
    client(h.port, `POST /v1.41/exec/${exec.json.Id}/start HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: 0\r\n\r\n`),
  ])
  t.match(reply.text, /^HTTP\/1\.1 200 OK\r\n/)
  t.match(reply.text, /content-type: application\/vnd\.docker\.(raw|multiplexed)-stream\r\n/i)
  t.notMatch(reply.text.slice(0, reply.text.indexOf('\r\n\r\n')), /transfer-encoding|content-length/i, 'no framing: the stream runs until close')
  t.equal(demux(reply.raw.subarray(reply.raw.indexOf('\r\n\r\n') + 4)), 'raw hello\n')
  t.same(done.events.map((e) => e.event), ['established'])
  t.equal(done.ctx.hijack, 'raw')
  t.equal(done.ctx.status, 200)
})

t.test('shutdown: the closer hijack() registers ends an open session', async (t) => {
  const h = await harness(t)
  const name = await container(t, ['sleep', '60'], { AttachStdout: true })
  t.equal((await request(eng.socket, 'POST', `/containers/${name}/start`)).status, 204)
  let close: (() => void) | undefined
  const [done] = await Promise.all([
    h.next({ tracked: (c) => { close = c }, onEvent: (e) => { if (e === 'established') setTimeout(() => close?.(), 100) } }),
    client(h.port, upgradeHead(`/v1.41/containers/${name}/attach?stream=1&stdout=1`)),
  ])
  t.equal(done.ctx.aborted, 'shutdown')
  t.equal(done.error, undefined, 'a session ended by shutdown is not an error')
  t.equal((await request(eng.socket, 'GET', `/containers/${name}/json`)).json.State.Running, true, 'the container itself runs on')
})

t.test('an upgraded exec of 12 MB of random bytes, read by a client that keeps stopping: byte-exact, in order, counted', async (t) => {
  // The engine's side is read into a reused buffer (reads.ts): a client that reads slower
  // than the engine writes leaves writes pending on that buffer, which must then be left
  // to them (copied, or the reads moved to a fresh buffer), and reading must resume.
  const h = await harness(t)
  const size = 12 * 1000 * 1000
  const name = await container(t, ['sh', '-c', `head -c ${size} /dev/urandom > /tmp/r && sha256sum /tmp/r && sleep 600`])
  t.equal((await request(eng.socket, 'POST', `/containers/${name}/start`)).status, 204)
  let expected = ''
  for (const end = Date.now() + 60_000; expected === '' && Date.now() < end; await new Promise((resolve) => setTimeout(resolve, 200))) {
    expected = /[0-9a-f]{64}/.exec((await request(eng.socket, 'GET', `/containers/${name}/logs?stdout=1`)).text)?.[0] ?? ''
  }
  t.not(expected, '', 'the container hashed its file')
  const exec = await request(eng.socket, 'POST', `/containers/${name}/exec`, { Cmd: ['cat', '/tmp/r'], AttachStdout: true, AttachStderr: true })
  t.equal(exec.status, 201)
  let stops = 0
  const [done, reply] = await Promise.all([
    h.next({ body: { Detach: false, Tty: false } }),
    client(h.port, `POST /v1.41/exec/${exec.json.Id}/start HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade\r\nUpgrade: tcp\r\nContent-Type: application/json\r\nContent-Length: 0\r\n\r\n`, undefined, {
      onOpen: (s) => {
        // Stop reading for a while every few hundred kB: the gateway's writes back up.
        let since = 0
        s.on('data', (c: Buffer) => {
          since += c.length
          if (since < 300_000) return
          since = 0
          stops++
          s.pause()
          setTimeout(() => s.resume(), 20)
        })
      },
    }),
  ])
  t.match(reply.text, /^HTTP\/1\.1 101 UPGRADED\r\n/)
  const body = reply.raw.subarray(reply.raw.indexOf('\r\n\r\n') + 4)
  const frames: Buffer[] = []
  for (let i = 0; i + 8 <= body.length;) {
    const n = body.readUInt32BE(i + 4)
    frames.push(body.subarray(i + 8, i + 8 + n))
    i += 8 + n
  }
  const out = Buffer.concat(frames)
  t.equal(out.length, size, 'every byte')
  t.equal(sha256(out), expected, 'the same bytes, in order')
  t.ok(stops > 10, `the client stopped reading ${stops} times`)
  t.equal(done.ctx.bytesOut, body.length, 'output counted')
  t.equal(done.error, undefined)
})
