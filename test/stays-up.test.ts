/**
 * The gateway stays up for everyone: what one client sends cannot make the gateway
 * hold memory or spend time for others.
 *
 *   - A body on an operation that takes none is refused before it is read (declared,
 *     chunked, before an upgrade); the small JSON real clients send there (dockerode
 *     repeats its options, docker-py sends `{}` with a push) still goes through.
 *   - A JSON body of `[[[[...` or of a million tiny values is refused while it is being
 *     sent, long before its end, and the gateway goes on answering.
 *   - A long session (exec) lets go of the body it was started with once it runs; its
 *     last audit record still has the command and exit code.
 *   - The memory for bodies being read is bounded (limits.bufferedBytes): past a
 *     tenant's share `429`, past the whole `503`, both with Retry-After and counted;
 *     other tenants go on meanwhile, and everything is let go afterwards.
 *   - One tenant's requests beyond its share of the gateway (8 at a time while another
 *     tenant is there) wait their turn, while the other's go through; long streams do
 *     not count.
 *
 * Refusals "before reading" are shown by answers that arrive while the client has sent
 * only the start of its body and waits: a gateway that read the body first never answers.
 */
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import net from 'node:net'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import v8 from 'node:v8'
import vm from 'node:vm'
import Docker from 'dockerode'
import jwt from 'jsonwebtoken'
import t from 'tap'
import { engine, request, run, startTestGateway, uniqueName, waitUntil, type TestGateway } from './helpers/gateway'

const SECRET = randomBytes(32).toString('hex')
const IMAGE = engine().image
const PREFIX = uniqueName('pcup')
const SYSTEM_PYTHON = '/usr/bin/python3'
const TENANTS = ['a', 'b', 'c', 'd'].map((x) => `${PREFIX}-${x}`)
const token = (tenant: string): string => jwt.sign({ sub: `${tenant}-user`, tenant, roles: ['tenant'], exp: Math.floor(Date.now() / 1000) + 3600 }, SECRET, { algorithm: 'HS256' })

v8.setFlagsFromString('--expose-gc')
const gc = vm.runInNewContext('gc') as () => void

let gw: TestGateway
let sleeper: string

interface Answer { status: number, headers: Record<string, string>, text: string, json: any }

/**
 * A request on a raw connection: `head` (request line and headers, without the blank
 * line) and the first bytes of the body; the rest is the caller's (send / end). The
 * answer resolves at its end, or for a 101 at its head; it rejects after 20 s.
 */
function rawRequest (socketPath: string, head: string, first: Buffer = Buffer.alloc(0)): { answer: Promise<Answer>, send: (b: Buffer | string) => void, end: () => void, socket: net.Socket } {
  const socket = net.connect(socketPath)
  socket.on('error', () => {})
  const answer = new Promise<Answer>((resolve, reject) => {
    let data = Buffer.alloc(0)
    let parsed: { status: number, headers: Record<string, string>, bodyAt: number } | undefined
    const timer = setTimeout(() => { socket.destroy(); reject(new Error(`no answer within 20 s to ${head.split('\r\n')[0]}`)) }, 20_000)
    const done = (): void => {
      if (!parsed) return
      clearTimeout(timer)
      const text = data.subarray(parsed.bodyAt).toString()
      let json: any
      try { json = JSON.parse(text) } catch { json = undefined }
      resolve({ status: parsed.status, headers: parsed.headers, text, json })
    }
    socket.on('data', (chunk: Buffer) => {
      data = Buffer.concat([data, chunk])
      if (!parsed) {
        const end = data.indexOf('\r\n\r\n')
        if (end < 0) return
        const lines = data.subarray(0, end).toString('latin1').split('\r\n')
        const headers: Record<string, string> = {}
        for (const l of lines.slice(1)) { const i = l.indexOf(':'); headers[l.slice(0, i).toLowerCase()] = l.slice(i + 1).trim() }
        parsed = { status: Number(lines[0].split(' ')[1]), headers, bodyAt: end + 4 }
        if (parsed.status === 101) return done()
      }
      const length = Number(parsed.headers['content-length'] ?? NaN)
      if (data.length - parsed.bodyAt >= length) done()
    })
    socket.on('close', done)
  })
  socket.write(`${head}\r\n\r\n`)
  if (first.length) socket.write(first)
  return { answer, send: (b) => { socket.write(b) }, end: () => { socket.end() }, socket }
}

const post = (target: string, headers: Record<string, string | number>): string =>
  [`POST ${target} HTTP/1.1`, 'Host: docker', ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`)].join('\r\n')

async function running (id: string): Promise<boolean> {
  return (await request(engine().socket, 'GET', `/containers/${id}/json`)).json?.State?.Running === true
}

async function exists (name: string): Promise<boolean> {
  return (await request(engine().socket, 'GET', `/containers/${name}/json`)).status === 200
}

/** The gateway's metrics text, one series' value (0 when absent). */
async function metric (series: string): Promise<number> {
  const text = await gw.gateway.metrics.metrics()
  const line = text.split('\n').find((l) => l.startsWith(series + ' '))
  return line === undefined ? 0 : Number(line.slice(series.length + 1))
}

/** A ContainerCreate body of exactly `size` bytes (an Env entry pads it). */
function createBody (size: number): Buffer {
  const base = JSON.stringify({ Image: IMAGE, Cmd: ['true'], Env: ['PAD='] })
  return Buffer.from(base.replace('"PAD="', `"PAD=${'x'.repeat(size - base.length)}"`))
}

t.before(async () => {
  gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\nlimits: { bufferedBytes: 12582912 }\nmetrics: { tenants: [${TENANTS.join(', ')}] }\n`)
  const r = await request(engine().socket, 'POST', `/containers/create?name=${PREFIX}-sleeper`, { Image: IMAGE, Cmd: ['sleep', '3600'], OpenStdin: true })
  sleeper = r.json.Id
  await request(engine().socket, 'POST', `/containers/${sleeper}/start`)
})

t.teardown(async () => {
  const all = (await request(engine().socket, 'GET', '/containers/json?all=1')).json as Array<{ Id: string, Names: string[] }>
  for (const c of all) if (c.Names.some((n) => n.startsWith(`/${PREFIX}`))) await request(engine().socket, 'DELETE', `/containers/${c.Id}?force=1`)
  await gw?.close()
})

t.test('a body on an operation that takes none is refused before it is read', async (t) => {
  t.ok(await running(sleeper), 'the container runs')
  // Declared: 1 MiB announced, 1 KiB sent, then the client waits.
  const declared = rawRequest(gw.socket, post(`/v1.41/containers/${sleeper}/kill?signal=SIGKILL`, { 'Content-Type': 'application/json', 'Content-Length': 1 << 20 }), Buffer.from('{"pad":"' + 'x'.repeat(1000)))
  const a = await declared.answer
  declared.socket.destroy()
  t.equal(a.status, 413, 'a declared body over the small cap: 413, with the body unsent')
  t.match(a.json?.message, /^ContainerKill takes no request body/, a.json?.message)
  t.equal(a.headers.connection, 'close', 'and the connection closes (the body was not read)')
  t.ok(await running(sleeper), 'the kill never reached the engine')

  // Chunked: a first chunk over the cap, and no end.
  const chunk = Buffer.from('{"pad":"' + 'x'.repeat(20_000))
  const chunked = rawRequest(gw.socket, post(`/v1.41/containers/${sleeper}/kill?signal=SIGKILL`, { 'Content-Type': 'application/json', 'Transfer-Encoding': 'chunked' }), Buffer.concat([Buffer.from(chunk.length.toString(16) + '\r\n'), chunk, Buffer.from('\r\n')]))
  const c = await chunked.answer
  chunked.socket.destroy()
  t.equal(c.status, 413, 'a chunked body over the cap: 413 before its end')
  t.ok(await running(sleeper), 'still running')

  // Before an upgrade (attach), the same.
  const upgrade = rawRequest(gw.socket, post(`/v1.41/containers/${sleeper}/attach?stream=1&stdout=1`, { Connection: 'Upgrade', Upgrade: 'tcp', 'Content-Type': 'application/json', 'Content-Length': 1 << 20 }), Buffer.from('{"pad":"'))
  const u = await upgrade.answer
  upgrade.socket.destroy()
  t.equal(u.status, 413, 'an attach announcing a large body: 413 before it is sent')
  t.match(u.json?.message, /^ContainerAttach takes no request body/)

  // What real clients send there goes through. dockerode repeats its options as a JSON body.
  const viaGateway = new Docker({ socketPath: gw.socket })
  await viaGateway.getContainer(sleeper).kill({ signal: 'SIGKILL' })
  for (let i = 0; i < 50 && await running(sleeper); i++) await sleep(100)
  t.notOk(await running(sleeper), 'dockerode kill({signal}) (body {"signal":"SIGKILL"}) killed the container')
  t.equal((await request(engine().socket, 'GET', `/containers/${sleeper}/json`)).json.State.ExitCode, 137, 'by SIGKILL')
  await viaGateway.getContainer(sleeper).start()
  t.ok(await running(sleeper), 'dockerode start() through the gateway')

  // docker-py 5.0.3 sends `{}` with a push: the engine's own answer comes back, as directly.
  const push = async (host: string): Promise<string> => {
    const r = await run(SYSTEM_PYTHON, ['-c', [
      'import docker, json, os',
      "c = docker.APIClient(base_url=os.environ['DOCKER_HOST'], version='1.41')",
      'try:',
      "  print(json.dumps(list(c.push('127.0.0.1:9/nope/none', tag='x', stream=True, decode=True))))",
      'except docker.errors.APIError as e:',
      "  print('APIError', e.status_code, e.explanation)",
    ].join('\n')], { host })
    return r.stdout.toString().trim() + r.stderr
  }
  const direct = await push(engine().dockerHost)
  t.match(direct, /does not exist locally|No such image|An image does not exist/, `the engine's answer: ${direct}`)
  t.equal(await push(gw.dockerHost), direct, 'docker-py push (body {}) through the gateway: the same answer')
})

t.test('JSON bodies are refused by their shape while they arrive, and the gateway keeps answering', async (t) => {
  const deepName = `${PREFIX}-deep`
  const manyName = `${PREFIX}-many`
  // 1,000,000 bytes announced; 100,000 sent of each, and no more.
  const deep = rawRequest(gw.socket, post(`/v1.41/containers/create?name=${deepName}`, { 'Content-Type': 'application/json', 'Content-Length': 1_000_000 }),
    Buffer.from(`{"Image":"${IMAGE}","Labels":{"a":${'['.repeat(100_000)}`))
  const many = rawRequest(gw.socket, post(`/v1.41/containers/create?name=${manyName}`, { 'Content-Type': 'application/json', 'Content-Length': 1_000_000 }),
    Buffer.from(`{"Image":"${IMAGE}","Labels":{"a":[${'1,'.repeat(60_000)}`))
  const pings = Array.from({ length: 20 }, async () => await request(gw.socket, 'GET', '/_ping', undefined, { token: token(TENANTS[1]) }))
  const [d, m] = await Promise.all([deep.answer, many.answer])
  deep.socket.destroy()
  many.socket.destroy()
  t.equal(d.status, 400, 'deep nesting: 400 with nine tenths of the body unsent')
  t.match(d.json?.message, 'nested deeper than 512 levels')
  t.equal(m.status, 400, 'too many values: 400 with most of the body unsent')
  t.match(m.json?.message, 'more than 50000 values')
  t.same((await Promise.all(pings)).map((p) => p.status), Array(20).fill(200), "another tenant's pings are answered meanwhile")
  t.notOk(await exists(deepName), 'the engine has no container from the deep body')
  t.notOk(await exists(manyName), 'nor from the long one')

  // The count is the decoder's: a body of exactly 50,000 values is created, one more is not.
  // root + Image + Cmd + 49,997 arguments = 50,000.
  const body = (n: number): object => ({ Image: IMAGE, Cmd: Array(n).fill('1') })
  const ok = await request(gw.socket, 'POST', `/v1.41/containers/create?name=${PREFIX}-50k`, body(49_997))
  t.equal(ok.status, 201, '50,000 values: created')
  t.equal((await request(engine().socket, 'GET', `/containers/${PREFIX}-50k/json`)).json?.Config?.Cmd?.length, 49_997, 'with every argument')
  const over = await request(gw.socket, 'POST', `/v1.41/containers/create?name=${PREFIX}-50k1`, body(49_998))
  t.equal(over.status, 400, '50,001 values: refused')
  t.match(over.json?.message, 'more than 50000 values')
  t.notOk(await exists(`${PREFIX}-50k1`))
})

t.test('a long session lets go of the body it was started with', async (t) => {
  const PAD = 700_000
  const SESSIONS = 16
  const open = async (pad: number): Promise<ReturnType<typeof rawRequest>> => {
    const exec = await request(gw.socket, 'POST', `/v1.41/containers/${sleeper}/exec`, { Cmd: ['cat'], AttachStdin: true, AttachStdout: true })
    t.equal(exec.status, 201, 'exec created')
    const body = Buffer.from(JSON.stringify({ Detach: false, Tty: false, Pad: 'x'.repeat(pad) }))
    const s = rawRequest(gw.socket, post(`/v1.41/exec/${exec.json.Id}/start`, { Connection: 'Upgrade', Upgrade: 'tcp', 'Content-Type': 'application/json', 'Content-Length': body.length }), body)
    t.equal((await s.answer).status, 101, 'session established')
    return s
  }
  // Warm up (code paths compiled, pools opened) with one session, closed again.
  const warm = await open(10)
  warm.end()
  await waitUntil(() => gw.gateway.inflight.activeStreams === 0, 10_000)
  const heap = (): number => { gc(); gc(); const m = process.memoryUsage(); return m.heapUsed + m.external }
  const before = heap()
  const held = []
  for (let i = 0; i < SESSIONS; i++) held.push(await open(PAD))
  const after = heap()
  const perSession = (after - before) / SESSIONS
  t.ok(perSession < PAD / 8, `a session holds ${Math.round(perSession / 1024)} KiB after its start, not its ${Math.round(PAD / 1024)} KiB body`)
  t.equal(await metric('portcullis_request_body_memory_bytes'), 0, 'and nothing in the body budget')

  // The end of a session is still recorded with its command and exit code.
  for (const s of held) s.end()
  await waitUntil(() => gw.gateway.inflight.activeStreams === 0, 20_000)
  await sleep(500)
  const records = fs.readFileSync(path.join(gw.dir, 'audit.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l))
  const ends = records.filter((r) => r.event === 'session.end' && r.operation === 'ExecStart').slice(-SESSIONS)
  t.equal(ends.length, SESSIONS, 'every session has its end record')
  t.ok(ends.every((r) => JSON.stringify(r.command) === '["cat"]' && r.session.exitCode === 0), 'with the command and the exit code', { ends: ends.map((r) => ({ command: r.command, session: r.session })) })
})

t.test('the memory for bodies being read is bounded: 429 past a tenant\'s share, 503 past the whole', async (t) => {
  // bufferedBytes 12 MiB; a body counts four times its size: 4 MB per 1 MB body. A
  // tenant's share is a quarter (3 MiB), at least one body of the largest size (4 MiB).
  const L = 1_000_000
  const [A, B, C, D] = TENANTS
  const stalled = (tenant: string, name: string): ReturnType<typeof rawRequest> & { body: Buffer } => {
    const body = createBody(L)
    const r = rawRequest(gw.socket, post(`/v1.41/containers/create?name=${name}`, { Authorization: `Bearer ${token(tenant)}`, 'Content-Type': 'application/json', 'Content-Length': L }), body.subarray(0, 100))
    return { ...r, body }
  }
  const held = async (bytes: number): Promise<void> => {
    for (let i = 0; i < 100 && await metric('portcullis_request_body_memory_bytes') !== bytes; i++) await sleep(100)
    t.equal(await metric('portcullis_request_body_memory_bytes'), bytes, `${bytes / (4 * L)} bodies held`)
  }
  const a1 = stalled(A, `${PREFIX}-a1`)
  await held(4 * L)
  const a2 = stalled(A, `${PREFIX}-a2`)
  const r429 = await a2.answer
  a2.socket.destroy()
  t.equal(r429.status, 429, "the tenant's second body does not fit its share: 429 before it is sent")
  t.equal(r429.headers['retry-after'], '1', 'Retry-After')
  t.match(r429.json?.message, `tenant ${A}`)
  const b = stalled(B, `${PREFIX}-b`)
  const c = stalled(C, `${PREFIX}-c`)
  await held(12 * L)
  // Other tenants' requests without bodies are not held up.
  t.equal((await request(gw.socket, 'GET', '/_ping', undefined, { token: token(D) })).status, 200, 'a ping goes through meanwhile')
  const d = stalled(D, `${PREFIX}-d`)
  const r503 = await d.answer
  d.socket.destroy()
  t.equal(r503.status, 503, 'the fourth tenant finds the gateway full: 503')
  t.equal(r503.headers['retry-after'], '1', 'Retry-After')
  t.match(r503.json?.message, 'limits.bufferedBytes')
  t.equal(await metric(`portcullis_request_body_refusals_total{scope="identity",tenant="${A}"}`), 1, 'the 429 is counted for its tenant')
  t.equal(await metric(`portcullis_request_body_refusals_total{scope="gateway",tenant="${D}"}`), 1, 'the 503 too')

  // The held bodies complete and are created; the refused ones never reach the engine.
  for (const r of [a1, b, c]) r.send(r.body.subarray(100))
  const done = await Promise.all([a1, b, c].map(async (r) => await r.answer))
  for (const r of [a1, b, c]) r.socket.destroy()
  t.same(done.map((r) => r.status), [201, 201, 201], 'the held bodies are checked and created')
  t.ok(await exists(`${PREFIX}-a1`) && await exists(`${PREFIX}-b`) && await exists(`${PREFIX}-c`), 'the engine has them')
  t.notOk(await exists(`${PREFIX}-a2`) || await exists(`${PREFIX}-d`), 'and not the refused ones')
  t.equal(await metric('portcullis_request_body_memory_bytes'), 0, 'all let go')
  const again = await request(gw.socket, 'POST', `/v1.41/containers/create?name=${PREFIX}-d`, createBody(L), { token: token(D) })
  t.equal(again.status, 201, 'and the refused tenant gets through now')
})

t.test("a tenant's requests beyond its share wait their turn; another tenant's do not; streams do not count", async (t) => {
  const [A, B] = TENANTS
  const volume = (name: string): Buffer => Buffer.from(JSON.stringify({ Name: name, Labels: { pad: 'x'.repeat(500) } }))
  const slowly = (tenant: string, body: Buffer): ReturnType<typeof rawRequest> =>
    rawRequest(gw.socket, post('/v1.41/volumes/create', { Authorization: `Bearer ${token(tenant)}`, 'Content-Type': 'application/json', 'Content-Length': body.length }), body.subarray(0, 10))
  // B is in the gateway too (its body arrives slowly), so A gets its share, not the whole.
  const bBody = volume(`${PREFIX}-volb`)
  const bSlow = slowly(B, bBody)
  await sleep(100)
  // Eight requests of A in progress: their bodies arrive slowly.
  const bodies = Array.from({ length: 8 }, (_x, i) => volume(`${PREFIX}-vol${i}`))
  const slow = bodies.map((body) => slowly(A, body))
  await sleep(300)
  let answered = false
  const ninth = request(gw.socket, 'GET', '/_ping', undefined, { token: token(A) }).then((r) => { answered = true; return r })
  const other = await request(gw.socket, 'GET', '/_ping', undefined, { token: token(B) })
  t.equal(other.status, 200, "another tenant's ping is answered")
  await sleep(300)
  t.notOk(answered, "A's ninth request waits for a turn while its eight are in progress")
  // The first slow body completes: its turn goes to the waiting ping.
  slow[0].send(bodies[0].subarray(10))
  t.equal((await ninth).status, 200, 'then the waiting ping gets its turn')
  t.equal((await slow[0].answer).status, 201, 'and the first slow request completes (a volume is created)')
  for (const [i, r] of slow.entries()) if (i > 0) r.send(bodies[i].subarray(10))
  bSlow.send(bBody.subarray(10))
  t.same((await Promise.all([...slow.slice(1), bSlow].map(async (r) => (await r.answer).status))), Array(8).fill(201), 'the others complete')
  for (const r of [...slow, bSlow]) r.socket.destroy()
  for (const name of [...bodies.map((_b, i) => `${PREFIX}-vol${i}`), `${PREFIX}-volb`]) await request(engine().socket, 'DELETE', `/volumes/${name}`)

  // Long streams do not hold a turn: A follows the logs of its container six times and still pings.
  const made = await request(gw.socket, 'POST', `/v1.41/containers/create?name=${PREFIX}-ticker`, { Image: IMAGE, Cmd: ['sh', '-c', 'while true; do echo tick; sleep 1; done'] }, { token: token(A) })
  t.equal(made.status, 201)
  t.equal((await request(gw.socket, 'POST', `/v1.41/containers/${PREFIX}-ticker/start`, undefined, { token: token(A) })).status, 204)
  const follows = Array.from({ length: 6 }, () => {
    const r = rawRequest(gw.socket, [`GET /v1.41/containers/${PREFIX}-ticker/logs?follow=1&stdout=1 HTTP/1.1`, 'Host: docker', `Authorization: Bearer ${token(A)}`].join('\r\n'))
    let data = ''
    r.socket.on('data', (b: Buffer) => { data += b.toString('latin1') })
    return { r, seen: () => data }
  })
  await waitUntil(() => follows.every((f) => f.seen().includes('tick')), 10_000)
  t.ok(follows.every((f) => f.seen().startsWith('HTTP/1.1 200')), 'six logs -f streams are open')
  t.equal((await request(gw.socket, 'GET', '/_ping', undefined, { token: token(A) })).status, 200, "and the tenant's ping is answered beside them")
  for (const f of follows) f.r.socket.destroy()
})
