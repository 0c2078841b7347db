/**
 * Issue 21 (creates): what a tenant's create, start and remove cost in engine requests,
 * and that what the gateway now keeps for them cannot reach another tenant's object.
 * - A create's answer keeps the new container's owner (the owner label the gateway
 *   stamped): its start and remove ask the engine nothing to check it. Counted on a relay
 *   in front of the engine: create 3 (image, the quota's services, the create), start 2
 *   (the stored binds judged again, the start), remove 1 (before: 4 or 5, 3 and 1). Its
 *   memory and CPU limits for the quota are kept from the create too: the next create
 *   does not inspect it.
 * - That kept owner is another tenant's "no such container", by full id and by id
 *   prefix, for an inspect, a start, a remove and a create that links to it; names and prefixes are still resolved afresh over all containers:
 *   a name a tenant released and another took just before a create is the other's.
 * - The limits kept from a create's answer are the ones the engine counts: a /dev/shm
 *   size past the default counts, one left out is the daemon's default (learned from the
 *   engine); a memory quota refuses the create past it, and admits it once one is removed.
 * - The image VOLUMEs a create's anonymous volumes come from are kept by image id (a
 *   config's digest), never by the name: a tag moved to another image between two creates
 *   gives the second create the new image's volumes.
 */
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import jwt from 'jsonwebtoken'
import t from 'tap'
import { engine, policiesWith, request, startTestGateway, type RawReply, type TestGateway } from './helpers/gateway'

const SECRET = randomBytes(32).toString('hex')
const RUN = randomBytes(3).toString('hex')
const TA = `ccache-a-${RUN}`
const TB = `ccache-b-${RUN}`
/** A memory quota of 200 MiB. */
const TC = `ccache-c-${RUN}`
const policyDir = policiesWith((text) => text.replace(/^ {2}tenants: \{\}$/m, `  tenants:\n    ${TC}: { containers: 20, memory: 200MiB }`))
const IMAGE = engine().image
const token = (tenant: string): string => jwt.sign({ sub: `dev-${tenant}`, tenant, roles: ['tenant'], exp: Math.floor(Date.now() / 1000) + 3600 }, SECRET, { algorithm: 'HS256' })
const TOKEN = { a: token(TA), b: token(TB), c: token(TC) }
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pccc-'))

/** A relay in front of the engine's socket that counts the HTTP request lines sent to it. */
const seen: string[] = []
const REQUEST_LINE = /(?:^|\r\n)(GET|HEAD|POST|PUT|DELETE) (\S+) HTTP\/1\.[01]\r\n/g
const relaySocket = path.join(tmp, 'relay.sock')
const relay = net.createServer((client) => {
  const up = net.connect(engine().socket)
  client.on('data', (chunk: Buffer) => { for (const m of chunk.toString('latin1').matchAll(REQUEST_LINE)) seen.push(`${m[1]} ${m[2].split('?')[0]}`) })
  client.pipe(up)
  up.pipe(client)
  const done = (): void => { client.destroy(); up.destroy() }
  client.on('error', done)
  up.on('error', done)
  client.on('close', done)
  up.on('close', done)
})

let gw: TestGateway
const as = async (who: 'a' | 'b' | 'c', method: string, target: string, body?: object): Promise<RawReply> => await request(gw.socket, method, target, body, { token: TOKEN[who] })
const direct = async (method: string, target: string, body?: object): Promise<RawReply> => await request(engine().socket, method, target, body)
const made: string[] = []
const images: string[] = []
// The shipped quota (a memory quota): every create names a memory limit.
const spec = (extra: object = {}, hc: object = {}): object => ({ Image: IMAGE, Cmd: ['true'], ...extra, HostConfig: { Memory: 64 * 1024 * 1024, NetworkMode: 'none', ...hc } })
async function create (who: 'a' | 'b' | 'c', body: object, name?: string): Promise<RawReply> {
  const r = await as(who, 'POST', `/v1.41/containers/create${name ? `?name=${name}` : ''}`, body)
  if (r.status === 201) made.push(r.json.Id)
  return r
}

t.before(async () => {
  await new Promise<void>((resolve) => relay.listen(relaySocket, resolve))
  gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, `unix://${relaySocket}`, policyDir)
})
t.teardown(async () => {
  for (const id of made) await direct('DELETE', `/containers/${id}?force=1&v=1`)
  for (const i of images) await direct('DELETE', `/images/${encodeURIComponent(i)}?force=1`)
  for (const tenant of [TA, TB, TC]) {
    const filters = encodeURIComponent(JSON.stringify({ label: [`io.portcullis.tenant=${tenant}`] }))
    for (const v of (await direct('GET', `/volumes?filters=${filters}`)).json?.Volumes ?? []) await direct('DELETE', `/volumes/${v.Name as string}`)
  }
  await gw?.close()
  relay.close()
  fs.rmSync(tmp, { recursive: true, force: true })
})

t.test('a create, its start and its remove: 3, 2 and 1 engine requests', async (t) => {
  // The first creates list the tenant's containers for its quota (then kept by the
  // events) and ask once whether the engine remaps users; one stays, as in a burst of creates.
  t.equal((await create('a', spec())).status, 201)
  const warm = await create('a', spec())
  t.equal(warm.status, 201)
  t.equal((await as('a', 'POST', `/v1.41/containers/${warm.json?.Id as string}/start`)).status, 204)
  t.equal((await as('a', 'DELETE', `/v1.41/containers/${warm.json?.Id as string}?force=1`)).status, 204)
  await new Promise((resolve) => setTimeout(resolve, 300))
  const count = async (f: () => Promise<RawReply>, status: number, what: string): Promise<string[]> => {
    const from = seen.length
    const r = await f()
    t.equal(r.status, status, `${what}: ${r.text}`)
    return seen.slice(from)
  }
  let id = ''
  const created = await count(async () => { const r = await create('a', spec()); id = r.json?.Id; return r }, 201, 'create')
  t.equal(created.length, 3, `create: the image, the quota's services, the create (${created.join(', ')})`)
  t.notOk(created.some((l) => l.startsWith('GET /images/sha256')), 'the image is not inspected a second time by its id')
  const started = await count(async () => await as('a', 'POST', `/v1.41/containers/${id}/start`), 204, 'start')
  t.equal(started.length, 2, `start: the stored binds, the start (${started.join(', ')})`)
  const removed = await count(async () => await as('a', 'DELETE', `/v1.41/containers/${id}?force=1`), 204, 'remove')
  t.same(removed, [`DELETE /v1.41/containers/${id}`], 'remove: the remove alone')
})

t.test('the owner a create keeps is another tenant\'s "no such container"', async (t) => {
  const a = await create('a', spec({ Cmd: ['sleep', '60'] }))
  t.equal(a.status, 201, a.text)
  const id: string = a.json.Id
  for (const ref of [id, id.slice(0, 12)]) {
    t.equal((await as('b', 'GET', `/v1.41/containers/${ref}/json`)).status, 404, `B's inspect of A's container by ${ref.length} digits`)
    t.equal((await as('b', 'POST', `/v1.41/containers/${ref}/start`)).status, 404, `B's start by ${ref.length} digits`)
    t.equal((await as('b', 'DELETE', `/v1.41/containers/${ref}?force=1`)).status, 404, `B's remove by ${ref.length} digits`)
    // A link to no container is the engine's 400 "No such container" (as for a name nobody holds).
    const link = await create('b', spec({}, { Links: [`${ref}:peer`], NetworkMode: 'default' }))
    t.equal(link.status, 400, `B's create with a link to A's container by ${ref.length} digits: ${link.text}`)
    t.match(link.json?.message, /No such container/)
  }
  const stored = (await direct('GET', `/containers/${id}/json`)).json
  t.equal(stored.State.Running, false, 'A\'s container was never started')
  t.equal(stored.Config.Labels['io.portcullis.tenant'], TA, 'and is still A\'s')
  t.equal((await as('a', 'GET', `/v1.41/containers/${id.slice(0, 12)}/json`)).status, 200, 'A reaches it by prefix')
})

t.test('a name released and taken by another tenant just before a create is the other\'s', async (t) => {
  const name = `ccache-${RUN}-n`
  const first = await create('a', spec(), name)
  t.equal(first.status, 201, first.text)
  t.equal((await as('a', 'DELETE', `/v1.41/containers/${first.json.Id as string}`)).status, 204)
  const taken = await create('b', spec({ Cmd: ['sleep', '60'] }), name)
  t.equal(taken.status, 201, taken.text)
  const link = await create('a', spec({}, { Links: [`${name}:peer`], NetworkMode: 'default' }))
  t.equal(link.status, 400, `A's create with a link to the name B holds now: ${link.text}`)
  t.match(link.json?.message, /No such container/)
  t.equal((await as('a', 'GET', `/v1.41/containers/${name}/json`)).status, 404, 'A\'s inspect by that name')
  t.equal((await as('a', 'POST', `/v1.41/containers/${name}/start`)).status, 404, 'A\'s start by that name')
  t.equal((await as('a', 'POST', `/v1.41/containers/${first.json.Id as string}/start`)).status, 404, 'A\'s start of its removed container by its old id')
  t.equal((await direct('GET', `/containers/${taken.json.Id as string}/json`)).json.State.Running, false, 'B\'s container was never started')
})

t.test('an image\'s VOLUMEs are kept by its id: a tag moved between two creates', async (t) => {
  const repo = `portcullis-test/ccache-${RUN}`
  const base = await direct('POST', '/containers/create', { Image: IMAGE, Cmd: ['true'] })
  t.equal(base.status, 201, base.text)
  made.push(base.json.Id)
  const ids: string[] = []
  for (const dir of ['/va', '/vb']) {
    const c = await direct('POST', `/commit?container=${base.json.Id as string}&repo=${repo}&tag=${dir.slice(1)}&changes=${encodeURIComponent(`VOLUME ${dir}`)}`, {})
    t.equal(c.status, 201, c.text)
    ids.push(c.json.Id)
    images.push(`${repo}:${dir.slice(1)}`)
  }
  images.push(`${repo}:moving`)
  const mountsOf = async (id: string): Promise<string[]> => ((await direct('GET', `/containers/${id}/json`)).json.Mounts ?? []).map((m: any) => `${m.Type as string}:${m.Destination as string}`)
  for (const [i, dir] of [[0, '/va'], [1, '/vb']] as const) {
    t.equal((await direct('POST', `/images/${ids[i]}/tag?repo=${repo}&tag=moving`)).status, 201)
    const c = await create('a', { Image: `${repo}:moving`, Cmd: ['true'], HostConfig: { Memory: 64 * 1024 * 1024, NetworkMode: 'none' } })
    t.equal(c.status, 201, c.text)
    t.same(await mountsOf(c.json.Id), [`volume:${dir}`], `the create from the tag on image ${i + 1} mounts its VOLUME ${dir} only`)
    const vol = ((await direct('GET', `/containers/${c.json.Id as string}/json`)).json.Mounts ?? [])[0]?.Name
    t.equal((await direct('GET', `/volumes/${vol as string}`)).json?.Labels?.['io.portcullis.tenant'], TA, 'an owned volume')
  }
})

t.test('the limits kept from a create\'s answer count as the engine stored them', async (t) => {
  const MiB = 1024 * 1024
  const c = async (memory: number, shm?: number): Promise<RawReply> => await create('c', spec({}, { Memory: memory * MiB, ...(shm !== undefined ? { ShmSize: shm * MiB } : {}) }))
  // 64 (the default /dev/shm is not counted), then 64 + (128 - 64): 192 of 200 MiB.
  const first = await c(64)
  t.equal(first.status, 201, first.text)
  const second = await c(64, 128)
  t.equal(second.status, 201, second.text)
  const stored = (await direct('GET', `/containers/${second.json.Id as string}/json`)).json.HostConfig
  t.equal(stored.ShmSize, 128 * MiB, 'the engine stored the /dev/shm size')
  const over = await c(16)
  t.equal(over.status, 403, `16 MiB more is past the quota: ${over.text}`)
  t.match(over.json?.message, /memory limits .* > 0\.2 GiB .*rule quota-memory/)
  // Again, with the daemon's default /dev/shm learned from the first container.
  t.equal((await c(16)).status, 403, 'still past it')
  t.equal((await as('c', 'DELETE', `/v1.41/containers/${second.json.Id as string}`)).status, 204)
  const fits = await c(16)
  t.equal(fits.status, 201, `once the 128 MiB one is gone, 16 MiB fit: ${fits.text}`)
  const three = await c(64)
  t.equal(three.status, 201, `and 64 MiB more (144 of 200): ${three.text}`)
  t.equal((await c(64)).status, 403, 'but not 64 MiB more again (208 of 200)')
})
