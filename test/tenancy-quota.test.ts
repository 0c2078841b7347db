// Quota usage is kept, not recounted: a tenant's containers are listed once, then
// followed through the engine's create and destroy events, and a container's limits
// are read once. Checked with a relay between the gateway and the real engine that
// counts what the gateway asks: after the first create, creates list nothing, while
// the count stays right when containers come and go by other ways (another replica,
// the engine directly), and a refusal is only made on a fresh listing.
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import http from 'node:http'
import os from 'node:os'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import jwt from 'jsonwebtoken'
import t from 'tap'
import { Pool } from 'undici'
import { engine, startTestGateway, uniqueName } from './helpers/gateway'

const SECRET = randomBytes(32).toString('hex')
const TENANT = `tq-${randomBytes(3).toString('hex')}`
const POLICIES = path.resolve(__dirname, '..', '..', 'policies')
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pcq-'))
t.teardown(() => fs.rmSync(tmp, { recursive: true, force: true }))

const token = jwt.sign({ sub: 'quinn', tenant: TENANT, roles: ['tenant'], exp: Math.floor(Date.now() / 1000) + 3600 }, SECRET, { algorithm: 'HS256' })

/** Every request the gateway sends to the engine, as `METHOD /path` (query left off), and with its decoded query. */
const full: string[] = []
const asked: string[] = []
const relaySocket = path.join(tmp, 'relay.sock')
const relay = http.createServer((req, res) => {
  asked.push(`${req.method ?? ''} ${(req.url ?? '').split('?')[0].replace(/^\/v[0-9.]+/, '')}`)
  full.push(`${req.method ?? ''} ${decodeURIComponent(req.url ?? '')}`)
  const up = http.request({ socketPath: engine().socket, method: req.method, path: req.url, headers: req.headers }, (r) => {
    res.writeHead(r.statusCode ?? 502, r.headers)
    // The engine answers /events with its head at once; so must the relay.
    res.flushHeaders()
    r.pipe(res)
  })
  up.on('error', () => res.destroy())
  // The gateway's event subscription never ends by itself: it ends with its client.
  res.on('close', () => up.destroy())
  req.pipe(up)
})

const direct = new Pool('http://localhost', { socketPath: engine().socket })
let via: Pool
const made: string[] = []

async function call (p: Pool, method: 'GET' | 'POST' | 'DELETE', url: string, body?: unknown, auth = true): Promise<{ status: number, json: any }> {
  const r = await p.request({
    method,
    path: url,
    headers: { ...(auth ? { authorization: `Bearer ${token}` } : {}), ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  const text = await r.body.text()
  return { status: r.statusCode, json: text ? JSON.parse(text) : null }
}

/** Listings of all the tenant's containers (a name lookup lists by name: not counted). */
const lists = (): number => full.filter((a) => a.startsWith('GET /containers/json?') && a.includes(`io.portcullis.tenant=${TENANT}`) && !a.includes('"name"')).length
const create = async (name: string): Promise<{ status: number, json: any }> => {
  const r = await call(via, 'POST', `/v1.41/containers/create?name=${name}`, { Image: engine().image, Cmd: ['true'] })
  if (r.status === 201) made.push(r.json.Id)
  return r
}

t.before(async () => {
  await new Promise<void>((resolve) => relay.listen(relaySocket, resolve))
})

t.teardown(async () => {
  for (const id of made) await call(direct, 'DELETE', `/v1.41/containers/${id}?force=1`, undefined, false).catch(() => undefined)
  await direct.close()
  relay.closeAllConnections()
  await new Promise((resolve) => relay.close(resolve))
})

t.test('quota usage is kept from one listing and the engine\'s events', async (t) => {
  const policyDir = path.join(tmp, 'policies')
  fs.cpSync(POLICIES, policyDir, { recursive: true })
  const tenancy = path.join(policyDir, 'tenancy.yaml')
  const text = fs.readFileSync(tenancy, 'utf8')
  t.match(text, /^ {2}tenants: \{\}$/m, 'the shipped tenancy.yaml has no per-tenant quotas')
  fs.writeFileSync(tenancy, text.replace(/^ {2}tenants: \{\}$/m, `  tenants:\n    ${TENANT}: { containers: 4 }`))
  const gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, `unix://${relaySocket}`, policyDir)
  t.teardown(() => gw.close())
  via = new Pool('http://localhost', { socketPath: gw.socket })
  t.teardown(() => via.close())
  // The gateway follows the engine's events from start-up; give it the moment to connect.
  for (let i = 0; i < 50 && !asked.includes('GET /events'); i++) await sleep(100)
  t.ok(asked.includes('GET /events'), 'the gateway follows the engine\'s events')

  const before = lists()
  t.equal((await create(uniqueName('tq-1'))).status, 201, 'first create')
  t.equal(lists() - before, 1, 'the first create lists the tenant\'s containers once')
  t.equal((await create(uniqueName('tq-2'))).status, 201, 'second create')
  t.equal((await create(uniqueName('tq-3'))).status, 201, 'third create')
  t.equal(lists() - before, 1, 'later creates list nothing: the count is kept')
  // The default memory quota applies (and the shipped rewrites give every container a
  // memory limit): each container's limits are read once, then kept.
  const inspects = asked.filter((a) => /^GET \/containers\/[0-9a-f]{64}\/json$/.test(a))
  t.equal(new Set(inspects).size, inspects.length, `no container is inspected twice for its limits (${inspects.length} inspects)`)
  t.ok(inspects.length <= 2, 'at most the two containers made before the third create')

  // A container of the tenant made elsewhere (another replica, or the engine directly
  // with the tenant's label): the kept count follows the engine's create event.
  const elsewhere = await call(direct, 'POST', `/v1.41/containers/create?name=${uniqueName('tq-else')}`, { Image: engine().image, Cmd: ['true'], Labels: { 'io.portcullis.tenant': TENANT } }, false)
  t.equal(elsewhere.status, 201, 'a container of the tenant created on the engine directly')
  made.push(elsewhere.json.Id)
  await sleep(300)
  const listsBefore = lists()
  const fifth = await create(uniqueName('tq-5'))
  t.equal(fifth.status, 403, 'the fifth container is refused: the event was counted')
  t.match(fifth.json?.message, /quota exceeded for tenant .*: containers 5 > 4 \(4 in use\)/, 'naming the quota and the usage')
  t.equal(lists() - listsBefore, 1, 'the refusal was made on a fresh listing')

  // Removed by another way: the destroy event frees the slot without a listing.
  t.equal((await call(direct, 'DELETE', `/v1.41/containers/${elsewhere.json.Id}?force=1`, undefined, false)).status, 204, 'removed on the engine directly')
  await sleep(300)
  const listsAfter = lists()
  t.equal((await create(uniqueName('tq-4'))).status, 201, 'the freed slot is used')
  t.equal(lists() - listsAfter, 0, 'without listing again')

  // Removed through the gateway and reused at once, before its destroy event may have
  // arrived: never refused for a container that is gone (the refusal path re-lists).
  const victim = made[made.length - 1]
  t.equal((await call(via, 'DELETE', `/v1.41/containers/${victim}`)).status, 204, 'a container removed through the gateway')
  t.equal((await create(uniqueName('tq-6'))).status, 201, 'and its slot taken at once')
})
