/**
 * Quotas are admitted atomically: concurrent creates cannot all see the same usage. A
 * tenant with a quota of 3 containers (and 1 GiB of memory) sends 12 creates at once
 * through the gateway to the real engine: exactly as many as the quota holds are
 * created, the rest refused naming the rule, and the engine holds no more than the
 * quota. A refused request's reservation is let go: after removing its containers the
 * tenant can create again.
 */
import { randomBytes } from 'node:crypto'
import jwt from 'jsonwebtoken'
import t from 'tap'
import { engine, startTestGateway, type TestGateway, policiesWithQuota, request, type RawReply } from './helpers/gateway'

const SECRET = randomBytes(32).toString('hex')
const TENANT = `race-${randomBytes(3).toString('hex')}`
const TOKEN = jwt.sign({ sub: 'rita', tenant: TENANT, roles: ['tenant'], exp: Math.floor(Date.now() / 1000) + 3600 }, SECRET, { algorithm: 'HS256' })
const IMAGE = engine().image
const policyDir = policiesWithQuota(TENANT, '{ containers: 3, memory: 1GiB, volumes: 2 }')

let gw: TestGateway
const mine = async (): Promise<string[]> => {
  const filters = encodeURIComponent(JSON.stringify({ label: [`io.portcullis.tenant=${TENANT}`] }))
  return ((await request(engine().socket, 'GET', `/containers/json?all=1&filters=${filters}`)).json as any[]).map((c) => String(c.Id))
}
const create = async (memory: number): Promise<RawReply> =>
  await request(gw.socket, 'POST', '/v1.41/containers/create', { Image: IMAGE, Cmd: ['true'], HostConfig: { Memory: memory } }, { token: TOKEN })

t.before(async () => { gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, undefined, policyDir) })
const myVolumes = async (): Promise<string[]> => {
  const filters = encodeURIComponent(JSON.stringify({ label: [`io.portcullis.tenant=${TENANT}`] }))
  return (((await request(engine().socket, 'GET', `/volumes?filters=${filters}`)).json as any).Volumes as any[] ?? []).map((v) => String(v.Name))
}
t.teardown(async () => {
  for (const id of await mine()) await request(engine().socket, 'DELETE', `/containers/${id}?force=1`)
  for (const name of await myVolumes()) await request(engine().socket, 'DELETE', `/volumes/${name}?force=1`)
  await gw?.close()
})

t.test('12 concurrent creates against a quota of 3 containers', async (t) => {
  // Warm the kept usage first, so that every check below starts from the same count.
  t.same(await mine(), [], 'the tenant starts with nothing')
  const answers = await Promise.all(Array.from({ length: 12 }, async () => await create(64 << 20)))
  const created = answers.filter((a) => a.status === 201)
  const refused = answers.filter((a) => a.status === 403)
  t.equal(created.length, 3, `exactly the quota was created (${answers.map((a) => a.status).join(' ')})`)
  t.equal(refused.length, 9, 'the rest refused')
  t.ok(refused.every((a) => /rule quota-containers/.test(a.json?.message)), 'naming the rule')
  t.equal((await mine()).length, 3, 'the engine holds 3 containers of the tenant')
})

t.test('concurrent creates against the memory quota, and reservations let go', async (t) => {
  for (const id of await mine()) await request(engine().socket, 'DELETE', `/containers/${id}?force=1`)
  // 1 GiB of memory: two of 400 MiB fit, a third does not.
  const answers = await Promise.all(Array.from({ length: 6 }, async () => await create(400 << 20)))
  t.equal(answers.filter((a) => a.status === 201).length, 2, `two fit in 1 GiB (${answers.map((a) => a.status).join(' ')})`)
  // A create admitted a moment ago may count both by its reservation and by its id: the
  // refusal then names whichever quota it passes first; either way it names a quota.
  t.ok(answers.filter((a) => a.status === 403).every((a) => /rule quota-(memory|containers)/.test(a.json?.message)), 'the rest refused by the quota', { messages: answers.map((a) => a.json?.message) })
  t.equal((await mine()).length, 2)
  for (const id of await mine()) await request(engine().socket, 'DELETE', `/containers/${id}?force=1`)
  // Nothing refused above is still held: the whole quota is free again.
  const again = await Promise.all([create(400 << 20), create(400 << 20)])
  t.same(again.map((a) => a.status), [201, 201], 'after removal, the quota is whole again')
})

t.test('10 concurrent volume creates against a quota of 2 volumes', async (t) => {
  t.same(await myVolumes(), [], 'the tenant starts with no volume')
  const answers = await Promise.all(Array.from({ length: 10 }, async (_, i) =>
    await request(gw.socket, 'POST', '/v1.41/volumes/create', { Name: `${TENANT}-v${i}` }, { token: TOKEN })))
  t.equal(answers.filter((a) => a.status === 201).length, 2, `exactly the quota was created (${answers.map((a) => a.status).join(' ')})`)
  t.ok(answers.filter((a) => a.status !== 201).every((a) => a.status === 403 && /rule quota-volumes/.test(a.json?.message)), 'the rest refused naming the rule')
  t.equal((await myVolumes()).length, 2, 'the engine holds 2 volumes of the tenant')
  for (const name of await myVolumes()) await request(engine().socket, 'DELETE', `/volumes/${name}`)
  const again = await request(gw.socket, 'POST', '/v1.41/volumes/create', { Name: `${TENANT}-again` }, { token: TOKEN })
  t.equal(again.status, 201, 'refused creates hold nothing: after removal the quota is free')
})
