// src/gateway/upstream.ts on its own, against the run's real engine: the connection
// (pooled and hijacked), the gateway's own JSON requests, what an exec is, how a failure
// to reach the engine is worded, and the headers a request carries upstream.
import http from 'node:http'
import net from 'node:net'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { parseConfig } from '../src/config'
import { GatewayError } from '../src/api/errors'
import { createUpstream, engineJson, execInfo, upstreamError, upstreamRequestHeaders, type Upstream } from '../src/gateway/upstream'
import { newContext } from '../src/gateway/context'
import { engine, request, uniqueName } from './helpers/gateway'

const eng = engine()
const upstreamAt = (url: string): Upstream => createUpstream(parseConfig(`upstream: ${url}\n`, '/tmp/portcullis-upstream-test.yaml').upstream)

t.test('a unix upstream: pooled requests and the gateway\'s own JSON requests reach the engine', async (t) => {
  const up = upstreamAt(`unix://${eng.socket}`)
  t.teardown(() => up.close())
  t.equal(up.url, `unix://${eng.socket}`)
  t.equal(up.host, undefined, 'no Host of its own on a unix socket: the client\'s is passed on')
  const ping = await up.pool.request({ method: 'GET', path: '/_ping' })
  t.equal(ping.statusCode, 200)
  t.equal(await ping.body.text(), 'OK')
  const direct = await request(eng.socket, 'GET', '/version')
  const version = await engineJson(up, 'GET', '/version')
  t.equal(version.status, 200)
  t.same(version.body, direct.json, 'the same document the engine gives any client')
  const missing = await engineJson(up, 'GET', '/containers/pcx-upstream-nothing-here/json')
  t.equal(missing.status, 404, 'an engine error is an answer, not a throw')
  t.match(missing.body, { message: /No such container/ })
})

t.test('a TCP upstream sends the engine\'s host:port as Host', async (t) => {
  // A plain TCP relay in front of the engine's socket, so that the upstream is TCP.
  const relay = net.createServer((c) => { const e = net.connect(eng.socket); c.pipe(e).pipe(c); c.on('error', () => e.destroy()); e.on('error', () => c.destroy()) })
  await new Promise<void>((resolve) => relay.listen(0, '127.0.0.1', resolve))
  t.teardown(() => relay.close())
  const port = (relay.address() as AddressInfo).port
  const up = upstreamAt(`tcp://127.0.0.1:${port}`)
  t.teardown(() => up.close())
  t.equal(up.host, `127.0.0.1:${port}`)
  const info = await engineJson(up, 'GET', '/_ping')
  t.equal(info.status, 200)
  t.equal(info.body, 'OK')
})

t.test('an engine that cannot be reached: the error says where and why', async (t) => {
  const refused = upstreamAt('tcp://127.0.0.1:1')
  t.teardown(() => refused.close())
  await t.rejects(engineJson(refused, 'GET', '/_ping'), { code: 'UPSTREAM_UNREACHABLE', status: 502, message: /cannot reach the Docker engine at tcp:\/\/127\.0\.0\.1:1: ECONNREFUSED \(connection refused/ })
  const nosocket = upstreamAt('unix:///tmp/pcx-no-such-engine.sock')
  t.teardown(() => nosocket.close())
  await t.rejects(engineJson(nosocket, 'GET', '/_ping'), { code: 'UPSTREAM_UNREACHABLE', message: /ENOENT \(no socket there: is the engine running\?/ })
  // The kinds the catalogue knows, for failures after the connection was made.
  t.match(upstreamError(Object.assign(new Error('x'), { code: 'UND_ERR_HEADERS_TIMEOUT' }), 'u'), { code: 'UPSTREAM_TIMEOUT', status: 504 })
  t.match(upstreamError(Object.assign(new Error('x'), { code: 'UND_ERR_SOCKET' }), 'u'), { code: 'UPSTREAM_FAILED', status: 502, message: /failed the request: UND_ERR_SOCKET/ })
  const bare = upstreamError(new Error('secret detail'), 'u')
  t.ok(bare instanceof GatewayError)
  t.notMatch(bare.message, /secret detail/, 'an unknown failure\'s own text is not passed to the client')
})

t.test('execInfo: the command before, the exit code after, null for an exec the engine does not know', async (t) => {
  const up = upstreamAt(`unix://${eng.socket}`)
  t.teardown(() => up.close())
  const name = uniqueName('pcx-upstream')
  const created = await request(eng.socket, 'POST', `/containers/create?name=${name}`, { Image: eng.image, Cmd: ['sleep', '60'] })
  t.equal(created.status, 201)
  t.teardown(() => request(eng.socket, 'DELETE', `/containers/${name}?force=1`))
  t.equal((await request(eng.socket, 'POST', `/containers/${name}/start`)).status, 204)
  const exec = await request(eng.socket, 'POST', `/containers/${name}/exec`, { Cmd: ['sh', '-c', 'exit 7'] })
  t.equal(exec.status, 201)
  t.same(await execInfo(up, exec.json.Id), { command: ['sh', '-c', 'exit 7'], exitCode: null }, 'not started: no exit code yet')
  t.equal((await request(eng.socket, 'POST', `/exec/${exec.json.Id}/start`, { Detach: true })).status, 200)
  let info = await execInfo(up, exec.json.Id)
  for (let i = 0; i < 100 && info?.exitCode === null; i++) {
    await new Promise((resolve) => setTimeout(resolve, 100))
    info = await execInfo(up, exec.json.Id)
  }
  t.same(info, { command: ['sh', '-c', 'exit 7'], exitCode: 7 })
  t.equal(await execInfo(up, 'pcx-no-such-exec'), null)
})

t.test('hijackRequest: a fresh connection the engine upgrades for attach', async (t) => {
  const up = upstreamAt(`unix://${eng.socket}`)
  t.teardown(() => up.close())
  const name = uniqueName('pcx-upstream-attach')
  t.equal((await request(eng.socket, 'POST', `/containers/create?name=${name}`, { Image: eng.image, Cmd: ['sh', '-c', 'read line; echo "got $line"'], OpenStdin: true, StdinOnce: true, AttachStdin: true, AttachStdout: true })).status, 201)
  t.teardown(() => request(eng.socket, 'DELETE', `/containers/${name}?force=1`))
  const req = up.hijackRequest({ method: 'POST', path: `/containers/${name}/attach?stream=1&stdin=1&stdout=1`, headers: { connection: 'Upgrade', upgrade: 'tcp', host: 'localhost' } })
  const socket = await new Promise<net.Socket>((resolve, reject) => {
    req.on('upgrade', (res: http.IncomingMessage, s: net.Socket) => { t.equal(res.statusCode, 101); resolve(s) })
    req.on('response', (res) => reject(new Error(`no upgrade: ${res.statusCode}`)))
    req.on('error', reject)
    req.end()
  })
  t.equal((await request(eng.socket, 'POST', `/containers/${name}/start`)).status, 204)
  const out: Buffer[] = []
  socket.on('data', (c: Buffer) => out.push(c))
  socket.write('hello\n')
  await new Promise((resolve) => socket.once('end', resolve))
  // Multiplexed: an 8-byte frame header (stream 1 = stdout), then the bytes.
  const all = Buffer.concat(out)
  t.equal(all[0], 1, 'stdout frame')
  t.equal(all.subarray(8).toString(), 'got hello\n')
  socket.destroy()
})

t.test('upstreamRequestHeaders: end-to-end headers only, the gateway\'s own set, the length of what is sent', async (t) => {
  const up = upstreamAt(`unix://${eng.socket}`)
  const tcp = upstreamAt('tcp://10.1.2.3:2375')
  t.teardown(async () => { await up.close(); await tcp.close() })
  const seen: Array<{ req: http.IncomingMessage }> = []
  const server = http.createServer((req, res) => { seen.push({ req }); req.resume(); req.on('end', () => res.end()) })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => server.close())
  const port = (server.address() as AddressInfo).port
  const send = async (headers: Record<string, string>, body?: string): Promise<http.IncomingMessage> => {
    await new Promise<void>((resolve, reject) => {
      const r = http.request({ host: '127.0.0.1', port, method: 'POST', path: '/containers/create', headers }, (res) => { res.resume(); res.on('end', resolve) })
      r.on('error', reject)
      r.end(body)
    })
    return seen[seen.length - 1].req
  }
  const req = await send({ authorization: 'Bearer secret-token', 'proxy-authorization': 'Basic x', te: 'trailers', 'keep-alive': 'timeout=5', 'x-registry-auth': 'e30=', 'content-type': 'application/json', 'content-length': '2', 'x-custom': 'kept' }, '{}')
  const ctx = newContext('test', 'unix', 'POST', '/containers/create')
  const plain = upstreamRequestHeaders(req, ctx, up)
  t.notOk('authorization' in plain, 'the gateway\'s own credential is consumed')
  t.notOk('proxy-authorization' in plain)
  t.notOk('te' in plain, 'hop-by-hop headers stay on their hop')
  t.notOk('keep-alive' in plain)
  t.equal(plain['x-custom'], 'kept')
  t.equal(plain['x-registry-auth'], 'e30=', 'passed on unless tenancy sets its own')
  t.equal(plain['content-length'], '2', 'a streamed body keeps the client\'s length')
  t.equal(plain.host, '127.0.0.1:' + port, 'a unix upstream gets the client\'s Host')
  t.equal(upstreamRequestHeaders(req, ctx, tcp).host, '10.1.2.3:2375', 'a TCP upstream gets its own')

  ctx.body = Buffer.from('{"Image":"x"}')
  ctx.upstreamHeaders = { 'x-registry-auth': 'gateway-credentials' }
  const rewritten = upstreamRequestHeaders(req, ctx, up)
  t.equal(rewritten['content-length'], String(ctx.body.length), 'an inspected body is sent with its own length')
  t.equal(rewritten['x-registry-auth'], 'gateway-credentials', 'what tenancy sets replaces the client\'s')

  const filteredCtx = newContext('test', 'unix', 'POST', '/images/load')
  filteredCtx.bodyFilter = (s) => s
  t.notOk('content-length' in upstreamRequestHeaders(req, filteredCtx, up), 'a filtered body has a length of its own: sent chunked')
})
