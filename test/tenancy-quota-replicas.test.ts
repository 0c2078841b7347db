/**
 * Quotas hold across replicas: two gateways in front of the same real engine share
 * their quota reservations through the policy database (a real PostgreSQL, Debian's
 * package). Many concurrent creates of one tenant, split over both replicas, leave the
 * engine with exactly the quota; the same burst through two replicas without a shared
 * store goes over it (the control that shows the burst races). A create the engine
 * refuses frees its reservation; a dead replica's reservation expires; a replica
 * renews what it holds; with the database away, quota-limited creates are refused
 * (503, fail closed) and counted, others go on.
 */
import { randomBytes } from 'node:crypto'
import pino from 'pino'
import jwt from 'jsonwebtoken'
import t from 'tap'
import { QuotaStore, QUOTA_TABLE } from '../src/gateway/tenancy/quota-store'
import { engine, startTestGateway, type TestGateway, policiesWith, request, type RawReply } from './helpers/gateway'
import { startPostgres, type TestPostgres } from './helpers/postgres'

const SECRET = randomBytes(32).toString('hex')
const RUN = randomBytes(3).toString('hex')
/** Quota of 3 containers (and 64 GiB of memory limits): the burst. */
const RACE = `rep-race-${RUN}`
/** Quota of 1 container: release on failure, expiry. */
const ONE = `rep-one-${RUN}`
/** No quota at all. */
const FREE = `rep-free-${RUN}`
const QUOTA = 3
const IMAGE = engine().image
const token = (tenant: string): string => jwt.sign({ sub: `dev-${tenant}`, tenant, roles: ['tenant'], exp: Math.floor(Date.now() / 1000) + 3600 }, SECRET, { algorithm: 'HS256' })
// No default quota (FREE has none); RACE's memory quota makes every check read limits too.
const policyDir = policiesWith((text) => text
  .replace(/^ {2}default: .*$/m, '  default: {}')
  .replace(/^ {2}tenants: \{\}$/m, `  tenants:\n    ${RACE}: { containers: ${QUOTA}, memory: 64GiB }\n    ${ONE}: { containers: 1 }`))

const sleep = async (ms: number): Promise<void> => await new Promise((resolve) => setTimeout(resolve, ms))

/** The tenant's containers as the engine has them. */
async function onEngine (tenant: string): Promise<string[]> {
  const filters = encodeURIComponent(JSON.stringify({ label: [`io.portcullis.tenant=${tenant}`] }))
  return ((await request(engine().socket, 'GET', `/containers/json?all=1&filters=${filters}`)).json as any[]).map((c) => String(c.Id))
}
async function removeAll (tenant: string): Promise<void> {
  for (const id of await onEngine(tenant)) await request(engine().socket, 'DELETE', `/containers/${id}?force=1`)
}
async function create (gw: TestGateway, tenant: string, hostConfig: object = {}): Promise<RawReply> {
  return await request(gw.socket, 'POST', '/v1.41/containers/create', { Image: IMAGE, Cmd: ['true'], HostConfig: hostConfig }, { token: token(tenant) })
}
/** `n` creates at once, alternating between the replicas. */
async function burst (replicas: readonly TestGateway[], tenant: string, n: number): Promise<RawReply[]> {
  return await Promise.all(Array.from({ length: n }, async (_, i) => await create(replicas[i % replicas.length], tenant)))
}
async function until (check: () => Promise<boolean>, limitMs: number): Promise<boolean> {
  for (const end = Date.now() + limitMs; Date.now() < end; await sleep(50)) if (await check()) return true
  return await check()
}

let pg: TestPostgres
const shared: TestGateway[] = []
const apart: TestGateway[] = []
const rows = async (tenant: string): Promise<number> => Number((await pg.query(`SELECT count(*)::int AS n FROM ${QUOTA_TABLE} WHERE tenant = $1`, [tenant]))[0].n)

t.before(async () => {
  pg = await startPostgres()
  // The replicas read the password as a deployment does: PGPASSWORD, not the URL.
  process.env.PGPASSWORD = pg.password
  const auth = `auth: { jwt: { secret: ${SECRET} } }\n`
  const withStore = `${auth}policy: { dir: ${policyDir}, database: { url: "${pg.url}", channel: pcq_${RUN} } }\n`
  // Started one after the other: each seeds or finds the policy table, and creates or finds the reservations table.
  for (let i = 0; i < 2; i++) shared.push(await startTestGateway(withStore))
  for (let i = 0; i < 2; i++) apart.push(await startTestGateway(auth, undefined, policyDir))
})
t.teardown(async () => {
  for (const tenant of [RACE, ONE, FREE]) await removeAll(tenant)
  await Promise.allSettled([...shared, ...apart].map(async (g) => await g.close()))
  await pg?.stop()
})

t.test('with the shared store: 24 concurrent creates over two replicas leave exactly the quota', async (t) => {
  t.same(await onEngine(RACE), [], 'the tenant starts with nothing')
  const started = Date.now()
  const answers = await burst(shared, RACE, 24)
  const took = Date.now() - started
  const statuses = answers.map((a) => a.status)
  t.equal(statuses.filter((s) => s === 201).length, QUOTA, `exactly ${QUOTA} created (${statuses.join(' ')}; ${took} ms)`)
  const refused = answers.filter((a) => a.status === 403)
  t.equal(refused.length, 24 - QUOTA, 'the rest refused')
  t.ok(refused.every((a) => /quota exceeded for tenant rep-race-\w+: containers \d+ > 3 .*\(rule quota-containers\)/.test(a.json?.message)), 'naming the rule', { messages: refused.map((a) => a.json?.message) })
  t.equal((await onEngine(RACE)).length, QUOTA, `the engine holds ${QUOTA} containers of the tenant`)
  t.ok(await until(async () => (await rows(RACE)) === 0, 5000), 'every reservation was let go once its create was answered')

  // Both replicas admit again as soon as a slot is free.
  const [first] = await onEngine(RACE)
  await request(engine().socket, 'DELETE', `/containers/${first}?force=1`)
  const again = await burst([shared[1], shared[0]], RACE, 4)
  t.equal(again.filter((a) => a.status === 201).length, 1, `one freed slot, one create (${again.map((a) => a.status).join(' ')})`)
  t.equal((await onEngine(RACE)).length, QUOTA, 'still the quota on the engine')
})

t.test('control: without a shared store the same burst goes over the quota', async (t) => {
  // The race is real, not a property of the test: each replica counts only its own reservations.
  const counts: number[] = []
  for (let attempt = 0; attempt < 3 && !counts.some((n) => n > QUOTA); attempt++) {
    await removeAll(RACE)
    const answers = await burst(apart, RACE, 24)
    counts.push((await onEngine(RACE)).length)
    t.comment(`attempt ${attempt + 1}: ${answers.map((a) => a.status).join(' ')}; the engine holds ${counts[counts.length - 1]}`)
  }
  t.ok(counts.some((n) => n > QUOTA), `the engine ended with ${counts.join(', ')} containers of the tenant (quota ${QUOTA})`)
  await removeAll(RACE)
})

t.test('a create the engine refuses frees its reservation', async (t) => {
  await removeAll(ONE)
  // The engine refuses a memory limit under 6 MB (after the gateway has admitted it).
  const answers = await Promise.all(Array.from({ length: 6 }, async (_, i) => await create(shared[i % 2], ONE, { Memory: 1 << 20 })))
  const byEngine = answers.filter((a) => a.status === 400)
  t.ok(byEngine.length >= 1, `refused by the engine (${answers.map((a) => a.status).join(' ')})`)
  t.ok(byEngine.every((a) => /Minimum memory limit allowed is 6MB/.test(a.json?.message)), 'in its words')
  t.ok(answers.every((a) => a.status === 400 || (a.status === 403 && /rule quota-containers/.test(a.json?.message))), 'each refused by the engine, or by the quota while another held the one slot')
  t.same(await onEngine(ONE), [], 'the engine created nothing')
  t.ok(await until(async () => (await rows(ONE)) === 0, 5000), 'no reservation left in the store')
  const ok = await create(shared[1], ONE)
  t.equal(ok.status, 201, `the one slot is free: ${ok.text.trim()}`)
  t.equal((await onEngine(ONE)).length, 1, 'the engine holds it')
  t.equal((await create(shared[0], ONE)).status, 403, 'and the other replica counts it')
  await removeAll(ONE)
})

t.test('a dead replica\'s reservation counts until it expires', async (t) => {
  await removeAll(ONE)
  const id = `dead-${RUN}`
  await pg.query(`INSERT INTO ${QUOTA_TABLE} (id, tenant, containers, memory, nano_cpus, operation, replica, expires_at) VALUES ($1, $2, 1, 0, 0, 'ContainerCreate', 'a replica that died', now() + interval '3 seconds')`, [id, ONE])
  const held = await create(shared[0], ONE)
  t.equal(held.status, 403, 'the slot is held by the dead replica\'s reservation')
  t.match(held.json?.message, /quota exceeded for tenant rep-one-\w+: containers 2 > 1 \(1 in use\) \(rule quota-containers\)/)
  t.equal((await create(shared[1], ONE)).status, 403, 'on both replicas')
  const start = Date.now()
  let answer: RawReply | undefined
  while (Date.now() - start < 15_000) {
    answer = await create(shared[1], ONE)
    if (answer.status !== 403) break
    await sleep(250)
  }
  t.equal(answer?.status, 201, `admitted once the reservation expired (${Date.now() - start} ms later)`)
  t.equal((await onEngine(ONE)).length, 1, 'one container on the engine')
  t.same(await pg.query(`SELECT id FROM ${QUOTA_TABLE} WHERE id = $1`, [id]), [], 'the expired row was cleaned up')
  await removeAll(ONE)
})

t.test('the store itself: admissions of a tenant take turns across replicas, wait for each other at most lock_timeout; held reservations are renewed', async (t) => {
  const log = pino({ level: 'silent' })
  const settings = { url: pg.url, where: `127.0.0.1:${pg.port}/portcullis`, ttlSeconds: 1 }
  const a = await QuotaStore.open(settings, log)
  const b = await QuotaStore.open(settings, log)
  t.teardown(async () => { await a.close(); await b.close() })
  const tenant = `rep-store-${RUN}`
  const one = { containers: 1, memory: 0, nanoCpus: 0, volumes: 0 }
  const order: string[] = []
  // a's judge takes its time; b's starts only after a committed, and sees a's reservation.
  let seenByB: unknown
  const [leaseA, leaseB] = await Promise.all([
    a.admit(tenant, 'ContainerCreate', async () => { order.push('a in'); await sleep(400); order.push('a out'); return one }),
    sleep(50).then(async () => await b.admit(tenant, 'ContainerCreate', async (held) => { order.push('b in'); seenByB = held; return one })),
  ])
  t.same(order, ['a in', 'a out', 'b in'], 'the second replica waited for the first one\'s admission')
  t.same(seenByB, one, 'and counted its reservation')
  // Held for three times the TTL: renewed by its replica, still counted.
  await sleep(3000)
  let held: unknown
  await t.rejects(b.admit(tenant, 'ContainerCreate', async (h) => { held = h; throw new Error('refused') }), /refused/, 'what judge throws is passed on')
  t.same(held, { containers: 2, memory: 0, nanoCpus: 0, volumes: 0 }, 'both reservations outlived their TTL: renewed')
  leaseA.release()
  leaseB.release()
  leaseB.release()
  t.ok(await until(async () => (await rows(tenant)) === 0, 3000), 'released: the rows are gone')

  // An admission that holds the tenant too long: the other replica gives up (lock_timeout), as a failure of the store.
  const impatient = await QuotaStore.open({ ...settings, lockTimeoutMs: 300 }, log)
  t.teardown(async () => { await impatient.close() })
  const slow = a.admit(tenant, 'ContainerCreate', async () => { await sleep(1500); return one })
  await sleep(100)
  await t.rejects(impatient.admit(tenant, 'ContainerCreate', async () => one), { name: 'Error', message: /quota store \(policy database at 127\.0\.0\.1:\d+\/portcullis\) failed \(admitting\): canceling statement due to lock timeout/ }, 'waited 300 ms for the lock, then failed')
  ;(await slow).release()
  t.ok(await until(async () => (await rows(tenant)) === 0, 3000), 'nothing left held')
})

t.test('the database away: quota-limited creates refused (fail closed) and counted, others go on', async (t) => {
  await removeAll(RACE)
  await pg.pause()
  t.teardown(async () => { await pg.resume().catch(() => {}) })
  const refused = await create(shared[0], RACE)
  t.equal(refused.status, 503, `refused: ${refused.text.trim()}`)
  t.match(refused.json?.message, new RegExp(`^ContainerCreate refused for tenant ${RACE}: its quota cannot be checked, quota store \\(policy database at 127\\.0\\.0\\.1:${pg.port}/portcullis\\) failed \\(.*\\): .* \\(rule quota-store\\)$`))
  t.notOk(refused.text.includes(pg.password), 'no password in the answer')
  t.same(await onEngine(RACE), [], 'nothing was created')
  const metrics = await shared[0].gateway.metrics.metrics()
  t.ok(/^portcullis_quota_store_failures_total\{stage="admit"\} [1-9]/m.test(metrics), 'counted as a failure of the store')
  t.ok(/^portcullis_denials_total\{rule="quota-store"\} [1-9]/m.test(metrics), 'and as a denial by rule quota-store')
  const free = await create(shared[1], FREE)
  t.equal(free.status, 201, 'a tenant without a quota still creates')
  t.equal((await onEngine(FREE)).length, 1)

  await pg.resume()
  let back: RawReply | undefined
  for (const end = Date.now() + 15_000; Date.now() < end; await sleep(200)) {
    back = await create(shared[0], RACE)
    if (back.status !== 503) break
  }
  t.equal(back?.status, 201, 'admitted again once the database is back')
  t.equal((await onEngine(RACE)).length, 1)
})
