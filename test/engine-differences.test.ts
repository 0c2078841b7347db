/**
 * Differences that docker-py's and dockerode's own suites found between the gateway and
 * the engine (issue 20 item 2), each answered as the engine answers, on the plain engine.
 *
 * Links in an endpoint config of a user-defined network: the engine stores the name as
 * written and resolves it at run time through that network's DNS, among the containers
 * attached to it, so a link may name a container that does not exist yet (compose and
 * docker-py create the linking container first). Measured directly below, then through
 * the gateway as a tenant: accepted, stored as written, and resolved once a container of
 * that name joins; a link naming another tenant's container is still refused.
 */
import { randomBytes } from 'node:crypto'
import jwt from 'jsonwebtoken'
import t from 'tap'
import { engine, startTestGateway, type TestGateway, request, type RawReply } from './helpers/gateway'

const SECRET = randomBytes(32).toString('hex')
const RUN = randomBytes(3).toString('hex')
const TA = `diffs-a-${RUN}`
const TB = `diffs-b-${RUN}`
const IMAGE = engine().image
const TOKEN = jwt.sign({ sub: 'alice', tenant: TA, roles: ['tenant'], exp: Math.floor(Date.now() / 1000) + 3600 }, SECRET, { algorithm: 'HS256' })

let gw: TestGateway
const asA = async (method: string, path: string, body?: object): Promise<RawReply> => await request(gw.socket, method, path, body, { token: TOKEN })
const direct = async (method: string, path: string, body?: object): Promise<RawReply> => await request(engine().socket, method, path, body)
const made: Array<[string, string]> = []

t.before(async () => { gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`) })
t.teardown(async () => {
  for (const [kind, id] of made.reverse()) await direct('DELETE', kind === 'containers' ? `/containers/${id}?force=1&v=1` : `/networks/${id}`)
  await gw?.close()
})

function linked (net: string, links: string[]): object {
  return { Image: IMAGE, Cmd: ['sleep', '600'], HostConfig: { NetworkMode: net }, NetworkingConfig: { EndpointsConfig: { [net]: { Links: links } } } }
}

t.test('a link in an endpoint config may name a container that does not exist yet', async (t) => {
  // The engine directly: accepted and stored as written.
  const dnet = await direct('POST', '/networks/create', { Name: `diffs-${RUN}-direct` })
  t.equal(dnet.status, 201)
  made.push(['networks', dnet.json.Id])
  const d = await direct('POST', `/containers/create?name=diffs-${RUN}-d`, linked(`diffs-${RUN}-direct`, [`diffs-${RUN}-later:db`]))
  t.equal(d.status, 201, 'the engine accepts a link to a container that does not exist')
  made.push(['containers', d.json.Id])

  // Through the gateway, as tenant A, on its own network.
  const net = `diffs-${RUN}-net`
  const n = await asA('POST', '/v1.41/networks/create', { Name: net })
  t.equal(n.status, 201)
  made.push(['networks', n.json.Id])
  const c = await asA('POST', `/v1.41/containers/create?name=diffs-${RUN}-web`, linked(net, [`diffs-${RUN}-later:db`]))
  t.equal(c.status, 201, `the gateway accepts it too: ${JSON.stringify(c.json)}`)
  if (c.status !== 201) return
  made.push(['containers', c.json.Id])
  const stored = (await direct('GET', `/containers/${c.json.Id as string}/json`)).json
  t.same(stored.NetworkSettings.Networks[net].Links, [`diffs-${RUN}-later:db`], 'stored as written, as the engine stores it')

  // The name resolves once A's container of that name joins A's network.
  const later = await asA('POST', `/v1.41/containers/create?name=diffs-${RUN}-later`, { Image: IMAGE, Cmd: ['sleep', '600'], HostConfig: { NetworkMode: net } })
  t.equal(later.status, 201)
  made.push(['containers', later.json.Id])
  t.equal((await asA('POST', `/v1.41/containers/${later.json.Id as string}/start`)).status, 204)
  t.equal((await asA('POST', `/v1.41/containers/${c.json.Id as string}/start`)).status, 204)
  const ex = await asA('POST', `/v1.41/containers/${c.json.Id as string}/exec`, { Cmd: ['nslookup', 'db'], AttachStdout: true, AttachStderr: true })
  t.equal(ex.status, 201)
  const out = await asA('POST', `/v1.41/exec/${ex.json.Id as string}/start`, { Detach: false, Tty: true })
  const laterIp = (await direct('GET', `/containers/${later.json.Id as string}/json`)).json.NetworkSettings.Networks[net].IPAddress as string
  t.match(out.text, laterIp, 'the alias resolves to A\'s container that took the name')
})

t.test('a link naming another tenant\'s container stays refused', async (t) => {
  const b = await direct('POST', `/containers/create?name=diffs-${RUN}-b`, { Image: IMAGE, Cmd: ['true'], Labels: { 'io.portcullis.tenant': TB } })
  t.equal(b.status, 201)
  made.push(['containers', b.json.Id])
  const net = `diffs-${RUN}-net2`
  const n = await asA('POST', '/v1.41/networks/create', { Name: net })
  made.push(['networks', n.json.Id])
  const c = await asA('POST', `/v1.41/containers/create?name=diffs-${RUN}-web2`, linked(net, [`diffs-${RUN}-b:db`]))
  t.not(c.status, 201, 'B\'s container is not A\'s to link to')
  t.match(c.json?.message, /No such container/, 'answered as a container the tenant cannot see')
  if (c.status === 201) made.push(['containers', c.json.Id])
})
