/**
 * References are resolved as the engine resolves them: full id, then exact name, then
 * unique id prefix, over ALL objects (not only the caller's); the owner of what the
 * engine will pick decides; and the body is forwarded naming the full id that was
 * checked. On the real (plain) engine, as tenant A, with tenant B's objects made
 * directly on the engine (as an administrator or another gateway replica would):
 *
 * - B's container *named* like a prefix of A's own container id: the engine picks B's
 *   (exact name before prefix), so `--volumes-from <prefix>` and links are refused;
 *   before, the gateway resolved the prefix among A's containers only and forwarded the
 *   string, and the engine mounted B's volumes.
 * - B's network named like a prefix of A's network id: `--network <prefix>` refused.
 * - A's own references by prefix or name go through, and the engine stores the full id
 *   the gateway checked (links keep their alias).
 * - Tenants cannot take names shaped like ids.
 */
import { randomBytes } from 'node:crypto'
import jwt from 'jsonwebtoken'
import t from 'tap'
import { engine, policiesOnSharedBridge, startTestGateway, type TestGateway, request, type RawReply } from './helpers/gateway'

const SECRET = randomBytes(32).toString('hex')
const RUN = randomBytes(3).toString('hex')
const TA = `refs-a-${RUN}`
const TB = `refs-b-${RUN}`
const TENANT_LABEL = 'io.portcullis.tenant'
const IMAGE = engine().image
const TOKEN = jwt.sign({ sub: 'alice', tenant: TA, roles: ['tenant'], exp: Math.floor(Date.now() / 1000) + 3600 }, SECRET, { algorithm: 'HS256' })

let gw: TestGateway
const asA = async (method: string, path: string, body?: object): Promise<RawReply> => await request(gw.socket, method, path, body, { token: TOKEN })
const direct = async (method: string, path: string, body?: object): Promise<RawReply> => await request(engine().socket, method, path, body)

const made: Array<[string, string]> = []
async function directContainer (name: string, tenant: string, extra: object = {}): Promise<string> {
  const r = await direct('POST', `/containers/create?name=${name}`, { Image: IMAGE, Cmd: ['sleep', '600'], Labels: { [TENANT_LABEL]: tenant }, ...extra })
  if (r.status !== 201) throw new Error(`create ${name}: ${r.status} ${JSON.stringify(r.json)}`)
  made.push(['containers', r.json.Id])
  return r.json.Id as string
}
async function directNetwork (name: string, tenant: string): Promise<string> {
  const r = await direct('POST', '/networks/create', { Name: name, Labels: { [TENANT_LABEL]: tenant } })
  if (r.status !== 201) throw new Error(`network ${name}: ${r.status} ${JSON.stringify(r.json)}`)
  made.push(['networks', r.json.Id])
  return r.json.Id as string
}
/** A container create as A through the gateway; the stored container's HostConfig when it was created. */
async function createAsA (hostConfig: object, networking?: object): Promise<{ status: number, message?: string, hc?: any }> {
  const name = `refs-${RUN}-${randomBytes(3).toString('hex')}`
  const r = await asA('POST', `/v1.41/containers/create?name=${name}`, { Image: IMAGE, Cmd: ['true'], HostConfig: hostConfig, ...(networking ? { NetworkingConfig: networking } : {}) })
  if (r.status !== 201) return { status: r.status, message: r.json?.message }
  made.push(['containers', r.json.Id])
  return { status: r.status, hc: (await direct('GET', `/containers/${r.json.Id as string}/json`)).json.HostConfig }
}

// Legacy links (HostConfig.Links) are the default bridge's: tenants stay on it here.
t.before(async () => { gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, undefined, policiesOnSharedBridge()) })
t.teardown(async () => {
  for (const [kind, id] of made.reverse()) await direct('DELETE', kind === 'containers' ? `/containers/${id}?force=1&v=1` : `/networks/${id}`)
  await gw?.close()
})

t.test('B\'s container named like a prefix of A\'s container id: the engine picks B\'s, the gateway refuses', async (t) => {
  const aId = await directContainer(`refs-${RUN}-a-own`, TA)
  const prefix = aId.slice(0, 8)
  const bId = await directContainer(prefix, TB)
  // What the engine itself picks for the prefix: B's container (exact name before prefix).
  t.equal((await direct('GET', `/containers/${prefix}/json`)).json.Id, bId, 'the engine resolves the string to B\'s container')
  const link = await createAsA({ Links: [`${prefix}:db`] })
  t.equal(link.status, 400, 'a link refused as a missing reference')
  t.equal(link.message, `could not get container for ${prefix}: No such container: ${prefix}`)
  // The shipped tenant role refuses these by policy anyway; refused, whatever the reason.
  const vf = await createAsA({ VolumesFrom: [prefix] })
  t.ok(vf.status >= 400 && vf.status < 500, `VolumesFrom refused (${vf.status})`)
  const mode = await createAsA({ PidMode: `container:${prefix}` })
  t.ok(mode.status >= 400 && mode.status < 500, `container: mode refused (${mode.status})`)
  const inspect = await asA('GET', `/v1.41/containers/${prefix}/json`)
  t.equal(inspect.status, 404, 'inspect by that string is B\'s container: missing for A')
  // A's own container by a prefix that no other object's name or id shares: allowed, forwarded as the full id.
  const own = aId.slice(0, 16)
  const ok = await createAsA({ Links: [own] })
  t.equal(ok.status, 201, 'A\'s own container by prefix is accepted', { message: ok.message })
  t.same(ok.hc?.Links?.length, 1)
  t.match(ok.hc?.Links?.[0], new RegExp(`^/refs-${RUN}-a-own:/refs-${RUN}-\\w+/${own}$`), 'the link resolved to A\'s container, with the alias the client gave')
})

t.test('B\'s network named like a prefix of A\'s network id: refused; A\'s own by prefix forwarded as the full id', async (t) => {
  const aNet = await directNetwork(`refs-${RUN}-a-net`, TA)
  const prefix = aNet.slice(0, 10)
  const bNet = await directNetwork(prefix, TB)
  t.equal((await direct('GET', `/networks/${prefix}`)).json.Id, bNet, 'the engine resolves the string to B\'s network')
  const viaMode = await createAsA({ NetworkMode: prefix })
  t.equal(viaMode.status, 400, 'NetworkMode refused')
  const viaEndpoint = await createAsA({}, { EndpointsConfig: { [prefix]: {} } })
  t.equal(viaEndpoint.status, 400, 'an EndpointsConfig key refused')
  const connect = await asA('POST', `/v1.41/networks/${prefix}/connect`, { Container: 'anything' })
  t.equal(connect.status, 404, 'network connect: B\'s network is missing for A')

  const own = aNet.slice(0, 20)
  const ok = await createAsA({ NetworkMode: own }, { EndpointsConfig: { [own]: {} } })
  t.equal(ok.status, 201, 'A\'s own network by prefix is accepted')
  t.equal(ok.hc?.NetworkMode, aNet, 'the engine stored the full id the gateway checked')
  const byName = await createAsA({ NetworkMode: `refs-${RUN}-a-net` })
  t.equal(byName.status, 201)
  t.equal(byName.hc?.NetworkMode, `refs-${RUN}-a-net`, 'an exact, non-hex name is kept as the client gave it')
})

t.test('tenants cannot take names shaped like ids', async (t) => {
  const hex = randomBytes(8).toString('hex')
  const c = await asA('POST', `/v1.41/containers/create?name=${hex}`, { Image: IMAGE })
  t.equal(c.status, 403)
  t.match(c.json.message, /looks like an object id.*\(rule tenant-names\)/)
  const n = await asA('POST', '/v1.41/networks/create', { Name: hex.slice(0, 12) })
  t.equal(n.status, 403)
  t.equal((await direct('GET', `/containers/${hex}/json`)).status, 404, 'no container was created')
  t.equal((await direct('GET', `/networks/${hex.slice(0, 12)}`)).status, 404, 'no network was created')
  const fine = await asA('POST', `/v1.41/containers/create?name=refs-${RUN}-cafe`, { Image: IMAGE })
  t.equal(fine.status, 201, 'an ordinary name is fine')
  made.push(['containers', fine.json.Id])
})
