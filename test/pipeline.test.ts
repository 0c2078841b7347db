// src/gateway/pipeline.ts on its own, against the run's real engine: its dependencies
// are the real ones (shipped policy, audit trail, tenancy, budget, turns, upstream) put
// together here, and its two entry points are called from bare node:http servers (no
// fastify listener), one per fixed identity. What is checked is the order of the stages
// as a client and the engine see it: what is refused where, what reaches the engine,
// which audit record says what, and that a record is on disk before its answer is whole.
import fs from 'node:fs'
import http from 'node:http'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import type { AddressInfo } from 'node:net'
import pino from 'pino'
import t from 'tap'
import { parseConfig, type ListenerConfig } from '../src/config'
import { Credentials } from '../src/config/credentials'
import { PolicyStore } from '../src/policy/store'
import { AuditTrail } from '../src/audit'
import { Metrics } from '../src/metrics'
import { createAuthenticator } from '../src/gateway/authenticate'
import { BodyBudget } from '../src/gateway/budget'
import { Turns } from '../src/gateway/turns'
import { RateLimits } from '../src/gateway/rates'
import { Tenancy } from '../src/gateway/tenancy'
import { createUpstream } from '../src/gateway/upstream'
import { policyAdmin } from '../src/gateway/admin'
import { HostPaths } from '../src/gateway/host-paths'
import { newContext } from '../src/gateway/context'
import { handleRequest, handleUpgrade, Inflight, NO_BODY_MAX, type GatewayDeps } from '../src/gateway/pipeline'
import { engine, POLICIES, request, uniqueName } from './helpers/gateway'

const eng = engine()
const log = pino({ level: 'silent' })
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pcx-pipeline-'))
const auditFile = path.join(dir, 'audit.jsonl')
const config = parseConfig(`listen:
  - { tcp: 127.0.0.1:0, name: root, identity: { subject: root, roles: [admin] } }
  - { tcp: 127.0.0.1:0, name: alice, identity: { subject: alice, tenant: team-a, roles: [tenant] } }
  - { tcp: 127.0.0.1:0, name: nobody }
upstream: unix://${eng.socket}
policy: { dir: ${POLICIES} }
audit: { file: ${auditFile} }
`, path.join(dir, 'portcullis.yaml'))

interface Rec { event: string, operation: string | null, status: number | null, decision: string | null, rule: { policy: string, rule: string } | null, identity: { subject: string } | null, error: { code: string } | null, session?: unknown }
const records = (): Rec[] => fs.existsSync(auditFile) ? fs.readFileSync(auditFile, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l) as Rec).filter((r) => r.event === 'request' || r.event.startsWith('session.')) : []
const last = (): Rec => records().at(-1)!

const ports: Record<string, number> = {}
let inflight: Inflight

t.before(async () => {
  const policy = await PolicyStore.open(config.policy.dir, log)
  const audit = AuditTrail.open(config.audit, log)
  const upstream = createUpstream(config.upstream)
  const tenancy = new Tenancy(upstream, new Credentials(), log)
  const hostPaths = new HostPaths(config.hostPaths, config.upstream.kind === 'unix', upstream, log)
  await hostPaths.detect()
  inflight = new Inflight()
  const authenticator = createAuthenticator(config.auth)
  const metrics = new Metrics({ tenants: [], listeners: config.listen.map((l) => l.name), version: 'test' })
  const deps: GatewayDeps = {
    api: config.api,
    limits: config.limits,
    budget: new BodyBudget(config.limits.bufferedBytes, config.limits.jsonBodyBytes),
    turns: new Turns(),
    rates: new RateLimits(config.rates, (tenant, cls, limit) => { metrics.rateLimitRefused(tenant, cls, limit) }),
    upstream,
    log,
    inflight,
    authenticate: (req, l) => authenticator.authenticate(req, l),
    policy: () => policy.current,
    metrics,
    audit,
    tenancy,
    admin: policyAdmin(policy),
    hostPaths: () => hostPaths.mode,
  }
  const servers = config.listen.map((l: ListenerConfig) => {
    const server = http.createServer((req, res) => { void handleRequest(deps, l, newContext(l.name, 'test', req.method ?? '', req.url ?? ''), req, res) })
    server.on('upgrade', (req, socket, head) => { void handleUpgrade(deps, l, newContext(l.name, 'test', req.method ?? '', req.url ?? ''), req, socket, head) })
    return { l, server }
  })
  for (const { l, server } of servers) {
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    ports[l.name] = (server.address() as AddressInfo).port
  }
  t.teardown(async () => {
    for (const { server } of servers) { server.closeAllConnections(); server.close() }
    tenancy.close()
    await upstream.close()
    await audit.close()
    await policy.close()
    fs.rmSync(dir, { recursive: true, force: true })
  })
})

interface Reply { status: number, headers: http.IncomingHttpHeaders, text: string, json: any, recordsAtEnd: number }
/** A request to the listener `as`; `recordsAtEnd` is how many records were on disk when the client had the whole answer. */
async function call (as: string, method: string, target: string, body?: object | Buffer, headers: Record<string, string> = {}): Promise<Reply> {
  const data = body === undefined ? undefined : Buffer.isBuffer(body) ? body : Buffer.from(JSON.stringify(body))
  return await new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: ports[as], method, path: target, agent: false, headers: { ...(data ? { 'content-type': 'application/json', 'content-length': String(data.length) } : {}), ...headers } }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => {
        const recordsAtEnd = records().length
        const text = Buffer.concat(chunks).toString()
        let json: any
        try { json = JSON.parse(text) } catch { json = undefined }
        resolve({ status: res.statusCode ?? 0, headers: res.headers, text, json, recordsAtEnd })
      })
    })
    req.on('error', reject)
    req.end(data)
  })
}

t.test('routing comes first: an unknown path is refused before anyone is asked who they are', async (t) => {
  const r = await call('nobody', 'GET', '/v1.41/no/such/thing')
  t.equal(r.status, 404)
  t.match(r.json, { message: /page not found|not an Engine API|unknown/i })
  t.match(last(), { operation: null, identity: null, status: 404 }, 'recorded, without an identity')
})

t.test('then authentication: no credentials on this listener is 401, recorded before the answer', async (t) => {
  const before = records().length
  const r = await call('nobody', 'GET', '/v1.41/version')
  t.equal(r.status, 401)
  t.equal(r.recordsAtEnd, before + 1, 'the record was on disk when the client had the answer')
  t.match(last(), { operation: 'SystemVersion', identity: null, status: 401, error: { code: 'UNAUTHENTICATED' } })
})

t.test('an allowed request is forwarded; its record is on disk before the answer is whole', async (t) => {
  const before = records().length
  const r = await call('root', 'GET', '/v1.41/version')
  const direct = await request(eng.socket, 'GET', '/v1.41/version')
  t.equal(r.status, 200)
  t.equal(r.text, direct.text, 'the engine\'s answer')
  t.equal(r.recordsAtEnd, before + 1)
  t.match(last(), { operation: 'SystemVersion', decision: 'allow', status: 200, identity: { subject: 'root' } })
})

t.test('a policy denial names its rule and never reaches the engine', async (t) => {
  const name = uniqueName('pcx-pipeline-priv')
  const r = await call('alice', 'POST', `/v1.41/containers/create?name=${name}`, { Image: eng.image, HostConfig: { Privileged: true } })
  t.equal(r.status, 403)
  t.match(r.json.message, /rule/)
  t.equal((await request(eng.socket, 'GET', `/containers/${name}/json`)).status, 404, 'nothing was created')
  t.match(last(), { operation: 'ContainerCreate', decision: 'deny', status: 403, rule: { rule: String } })
})

t.test('a tenancy refusal is recorded as a denial by the tenancy rule', async (t) => {
  const name = uniqueName('pcx-pipeline-admins')
  t.equal((await request(eng.socket, 'POST', `/containers/create?name=${name}`, { Image: eng.image, Cmd: ['true'] })).status, 201)
  t.teardown(() => request(eng.socket, 'DELETE', `/containers/${name}?force=1`))
  const r = await call('alice', 'GET', `/v1.41/containers/${name}/json`)
  t.equal(r.status, 404, 'another owner\'s container does not exist for the tenant')
  t.match(r.json, { message: `No such container: ${name}` })
  t.match(last(), { operation: 'ContainerInspect', decision: 'deny', status: 404, rule: { policy: 'tenancy', rule: 'tenant-ownership' } })
})

t.test('a tenant\'s allowed create is scoped (owner labels) and forwarded', async (t) => {
  const name = uniqueName('pcx-pipeline-mine')
  const r = await call('alice', 'POST', `/v1.41/containers/create?name=${name}`, { Image: eng.image, Cmd: ['true'] })
  t.teardown(() => request(eng.socket, 'DELETE', `/containers/${name}?force=1`))
  t.equal(r.status, 201)
  const stored = await request(eng.socket, 'GET', `/containers/${name}/json`)
  t.equal(stored.json.Config.Labels['io.portcullis.tenant'], 'team-a')
  t.match(last(), { operation: 'ContainerCreate', decision: 'allow', status: 201 })
})

t.test('a body-less operation\'s body: small options read and judged, a larger body refused unread', async (t) => {
  const small = await call('root', 'GET', '/v1.41/version', { t: 5 })
  t.equal(small.status, 200, 'dockerode repeats options in a body: read, and the request goes on')
  const big = await call('root', 'GET', '/v1.41/version', Buffer.alloc(NO_BODY_MAX + 1, 0x20))
  t.equal(big.status, 413)
  t.equal(big.headers.connection, 'close', 'the unread body leaves the connection unusable')
  t.match(big.json.message, /SystemVersion takes no request body/)
})

t.test('a form-encoded body is refused: Go would merge it into the parameters the engine reads', async (t) => {
  const r = await call('root', 'POST', '/v1.41/containers/prune', Buffer.from('filters=x'), { 'content-type': 'application/x-www-form-urlencoded' })
  t.equal(r.status, 400)
  t.match(r.json.message, /form-encoded/)
})

t.test('the upgrade entry: an operation that does not hijack is refused on the socket', async (t) => {
  const s = net.connect(ports.root, '127.0.0.1')
  const chunks: Buffer[] = []
  s.on('data', (c: Buffer) => chunks.push(c))
  s.write('GET /v1.41/version HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n')
  await new Promise((resolve) => s.once('close', resolve))
  const text = Buffer.concat(chunks).toString()
  t.match(text, /^HTTP\/1\.1 400 /)
  t.match(text, /SystemVersion does not upgrade the connection/)
  t.match(last(), { operation: 'SystemVersion', status: 400, error: { code: 'UPGRADE_UNSUPPORTED' } })
})

t.test('the upgrade entry: a session gets a record when it starts and one when it ends', async (t) => {
  const name = uniqueName('pcx-pipeline-attach')
  const r = await call('alice', 'POST', `/v1.41/containers/create?name=${name}`, { Image: eng.image, Cmd: ['sh', '-c', 'sleep 0.3; echo bye'], AttachStdout: true })
  t.equal(r.status, 201)
  t.teardown(() => request(eng.socket, 'DELETE', `/containers/${name}?force=1`))
  const before = records().length
  const s = net.connect(ports.alice, '127.0.0.1')
  const chunks: Buffer[] = []
  s.on('data', (c: Buffer) => chunks.push(c))
  s.write(`POST /v1.41/containers/${name}/attach?stream=1&stdout=1 HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade\r\nUpgrade: tcp\r\nContent-Length: 0\r\n\r\n`)
  await new Promise((resolve) => s.once('data', resolve))
  t.match(records().slice(before), [{ event: 'session.start', operation: 'ContainerAttach', decision: 'allow' }], 'session.start before the 101 reached the client')
  t.equal((await call('alice', 'POST', `/v1.41/containers/${name}/start`)).status, 204)
  await new Promise((resolve) => s.once('close', resolve))
  t.match(Buffer.concat(chunks).toString(), /^HTTP\/1\.1 101 [^]*bye\n$/)
  for (let i = 0; i < 50 && !records().some((x, k) => k >= before && x.event === 'session.end'); i++) await new Promise((resolve) => setTimeout(resolve, 50))
  t.match(records().slice(before).filter((x) => x.operation === 'ContainerAttach').map((x) => x.event), ['session.start', 'session.end'])
})

t.test('Inflight: shutdown closes long streams at once and waits (within its grace) for the rest', async (t) => {
  const f = new Inflight()
  let closed = 0
  const untrack = f.track(() => { closed++ })
  const done = f.begin()
  t.equal(f.activeRequests, 1)
  t.equal(f.activeStreams, 1)
  let drained = false
  const draining = f.drain(10_000).then(() => { drained = true })
  t.equal(closed, 1, 'the stream\'s closer ran at once')
  t.ok(f.closing)
  await new Promise((resolve) => setImmediate(resolve))
  t.equal(drained, false, 'a request in progress is waited for')
  untrack()
  done()
  await draining
  t.equal(f.activeRequests, 0)
  t.equal(f.activeStreams, 0)
  const g = new Inflight()
  g.begin()
  await g.drain(50)
  t.equal(g.activeRequests, 1, 'the grace period ends the wait, not the request')
})

t.test('a gateway shutting down refuses new requests with 503, recorded', async (t) => {
  inflight.closing = true
  t.teardown(() => { inflight.closing = false })
  const r = await call('root', 'GET', '/v1.41/version')
  t.equal(r.status, 503)
  t.match(last(), { operation: null, status: 503, error: { code: 'SHUTTING_DOWN' } })
})
