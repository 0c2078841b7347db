/**
 * Issue 18, class 6 (first half): a local volume of `type=tmpfs` holds host memory for
 * as long as it exists, with no container and outside every memory limit. Directly on
 * the engine, a tenant-sized (1 MiB, within tmpfs-size) tmpfs volume is created and
 * outlives its containers; through the gateway the same volume, and a volume
 * mount declaring one, are refused (rule no-tmpfs-volumes) and nothing is created. A
 * tmpfs *mount* (--tmpfs, --mount type=tmpfs) stays allowed: it lives with its
 * container and is counted in its memory quota.
 */
import { randomBytes } from 'node:crypto'
import jwt from 'jsonwebtoken'
import t from 'tap'
import { engine, request, startTestGateway, type RawReply, type TestGateway } from './helpers/gateway'

const SECRET = randomBytes(32).toString('hex')
const RUN = randomBytes(3).toString('hex')
const TV = `tmpv-${RUN}`
const IMAGE = engine().image
const TOKEN = jwt.sign({ sub: 'tom', tenant: TV, roles: ['tenant'], exp: Math.floor(Date.now() / 1000) + 3600 }, SECRET, { algorithm: 'HS256' })
const OPTS = { type: 'tmpfs', device: 'tmpfs', o: 'size=1m' }

let gw: TestGateway
const as = async (method: string, target: string, body?: object): Promise<RawReply> => await request(gw.socket, method, target, body, { token: TOKEN })
const direct = async (method: string, target: string, body?: object): Promise<RawReply> => await request(engine().socket, method, target, body)
const volumes: string[] = []
const containers: string[] = []
const fresh = (what: string): string => `tmpv-${RUN}-${what}-${randomBytes(2).toString('hex')}`

t.before(async () => {
  gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`)
})
t.teardown(async () => {
  for (const c of containers) await direct('DELETE', `/containers/${c}?force=1`)
  for (const v of volumes) await direct('DELETE', `/volumes/${v}?force=1`)
  await gw?.close()
})

t.test('directly on the engine: a tmpfs volume is made and outlives its containers', async (t) => {
  const name = fresh('direct')
  const v = await direct('POST', '/volumes/create', { Name: name, Driver: 'local', DriverOpts: OPTS })
  t.equal(v.status, 201, v.text)
  volumes.push(name)
  const c = await direct('POST', `/containers/create?name=${fresh('c')}`, { Image: IMAGE, Cmd: ['true'], HostConfig: { Binds: [`${name}:/v`] } })
  await direct('POST', `/containers/${c.json.Id as string}/start`)
  await direct('POST', `/containers/${c.json.Id as string}/wait`)
  await direct('DELETE', `/containers/${c.json.Id as string}`)
  const after = await direct('GET', `/volumes/${name}`)
  t.same([after.status, after.json?.Options], [200, OPTS], 'still there with no container: a tmpfs each mount fills, held outside every container\'s memory limit')
})

t.test('through the gateway: tmpfs volumes refused, nothing created', async (t) => {
  const name = fresh('vol')
  const v = await as('POST', '/v1.41/volumes/create', { Name: name, Driver: 'local', DriverOpts: OPTS })
  if (v.status === 201) volumes.push(name)
  t.equal(v.status, 403, v.text)
  t.match(v.json?.message, /rule no-tmpfs-volumes\b/)
  t.equal((await direct('GET', `/volumes/${name}`)).status, 404, 'no volume was created')
  const noDriver = await as('POST', '/v1.41/volumes/create', { Name: name, DriverOpts: OPTS })
  if (noDriver.status === 201) volumes.push(name)
  t.equal(noDriver.status, 403, 'no driver named is the local driver')
  const cname = fresh('mount')
  const vname = fresh('mv')
  const c = await as('POST', `/v1.41/containers/create?name=${cname}`, { Image: IMAGE, HostConfig: { Mounts: [{ Type: 'volume', Source: vname, Target: '/v', VolumeOptions: { DriverConfig: { Name: 'local', Options: OPTS } } }] } })
  if (c.status === 201) { containers.push(c.json.Id); volumes.push(vname) }
  t.equal(c.status, 403, c.text)
  t.match(c.json?.message, /rule no-tmpfs-volumes\b/)
  t.equal((await direct('GET', `/volumes/${vname}`)).status, 404, 'no volume was created')
  const ok = await as('POST', `/v1.41/containers/create?name=${fresh('tmpfs')}`, { Image: IMAGE, HostConfig: { Tmpfs: { '/t': 'size=1m' } } })
  t.equal(ok.status, 201, `a tmpfs mount stays allowed: ${ok.text}`)
  if (ok.status === 201) containers.push(ok.json.Id)
})
