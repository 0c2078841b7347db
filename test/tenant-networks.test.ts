/**
 * Issue 18, class 7: tenants' containers on the engine's shared bridge reached each
 * other's services. A tenant's container that asks for the default network is attached
 * to the tenant's own network (tenancy.yaml `networks`), created by the gateway on demand.
 *
 * First on the shared test engine (run with --iptables=false): where a default create
 * lands, as the engine stored it. Then on an engine of this test's own with its firewall
 * on (dockerd's iptables chains, in the engine's own network namespace): real traffic
 * between containers, with two containers on the plain `bridge` as the oracle that the
 * traffic check can succeed.
 */
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import jwt from 'jsonwebtoken'
import t, { type Test } from 'tap'
import { engine, POLICIES, request, startTestGateway, type RawReply } from './helpers/gateway'

/** The shipped policies (tenants' own default networks on: tenancy.yaml networks.tenantDefault). */
const ownNetworks = (): string => POLICIES
import { startEngine, stopEngine, type EngineInfo } from './engine/engine'

const SECRET = randomBytes(32).toString('hex')
const RUN = randomBytes(3).toString('hex')
const A = `neta-${RUN}`
const B = `netb-${RUN}`
const sign = (tenant: string): string => jwt.sign({ sub: 'nina', tenant, roles: ['tenant'], exp: Math.floor(Date.now() / 1000) + 3600 }, SECRET, { algorithm: 'HS256' })
const TOKEN = { [A]: sign(A), [B]: sign(B) }
const fresh = (what: string): string => `net-${RUN}-${what}-${randomBytes(3).toString('hex')}`

/** Create (as a tenant through the gateway, or directly as the admin) and start a container; its id. */
async function started (t: Test, via: (m: string, p: string, b?: object) => Promise<RawReply>, body: object, direct: (m: string, p: string, b?: object) => Promise<RawReply>): Promise<string> {
  const r = await via('POST', `/v1.41/containers/create?name=${fresh('c')}`, body)
  t.equal(r.status, 201, `created (${r.text.trim()})`)
  const s = await direct('POST', `/containers/${r.json.Id as string}/start`)
  t.equal(s.status, 204, `started (${s.text.trim()})`)
  return r.json.Id
}

t.test('on the shared engine: a tenant\'s default create lands on its own network, not another\'s', async (t) => {
  const gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, undefined, ownNetworks())
  const direct = async (m: string, p: string, b?: object): Promise<RawReply> => await request(engine().socket, m, p, b)
  const ids: string[] = []
  t.teardown(async () => {
    for (const id of ids) await direct('DELETE', `/containers/${id}?force=1`)
    for (const n of [`${A}-default`, `${B}-default`]) await direct('DELETE', `/networks/${n}`)
    await gw.close()
  })
  const as = (tenant: string) => async (m: string, p: string, b?: object): Promise<RawReply> => await request(gw.socket, m, p, b, { token: TOKEN[tenant] })
  const netsOf = async (id: string): Promise<string[]> => Object.keys((await direct('GET', `/containers/${id}/json`)).json.NetworkSettings.Networks ?? {})

  // Every spelling of "the default network": none, "default", "bridge" (with an endpoint for it).
  const bodies = [
    {},
    { HostConfig: { NetworkMode: 'default' } },
    { HostConfig: { NetworkMode: 'bridge' }, NetworkingConfig: { EndpointsConfig: { bridge: { Aliases: ['web'] } } } },
  ]
  for (const extra of bodies) {
    const r = await as(A)('POST', `/v1.41/containers/create?name=${fresh('a')}`, { Image: engine().image, Cmd: ['sleep', '600'], ...extra })
    t.equal(r.status, 201, `created (${r.text.trim()})`)
    ids.push(r.json.Id)
    const doc = (await direct('GET', `/containers/${r.json.Id as string}/json`)).json
    t.equal(doc.HostConfig.NetworkMode, `${A}-default`, `${JSON.stringify(extra)}: the engine stored the tenant's network as the mode`)
  }
  const rb = await as(B)('POST', `/v1.41/containers/create?name=${fresh('b')}`, { Image: engine().image, Cmd: ['sleep', '600'] })
  t.equal(rb.status, 201)
  ids.push(rb.json.Id)
  await direct('POST', `/containers/${ids[0]}/start`)
  await direct('POST', `/containers/${rb.json.Id as string}/start`)
  t.same(await netsOf(ids[0]), [`${A}-default`], 'A\'s running container is on A\'s network only')
  t.same(await netsOf(rb.json.Id), [`${B}-default`], 'B\'s on B\'s only')
  const na = (await direct('GET', `/networks/${A}-default`)).json
  t.equal(na.Driver, 'bridge')
  t.equal(na.Labels['io.portcullis.tenant'], A, 'owned by A')
  t.notOk(Object.keys(na.Containers ?? {}).includes(rb.json.Id), 'B\'s container is not on A\'s network')
  t.same(Object.keys((await direct('GET', '/networks/bridge')).json.Containers ?? {}).filter((id) => ids.includes(id)), [], 'no tenant container on the shared bridge')
  const endpoint = (await direct('GET', `/containers/${ids[2]}/json`)).json.NetworkSettings.Networks[`${A}-default`]
  t.ok(endpoint?.Aliases?.includes('web'), 'the endpoint settings for "bridge" moved to the tenant\'s network')

  // A legacy link (docker run --link) on the tenant's network: the engine reads it from the
  // endpoint there, and the alias resolves to the linked container, as with --network <own>.
  const web = await as(A)('POST', `/v1.41/containers/create?name=${fresh('web')}`, { Image: engine().image, Cmd: ['httpd', '-f', '-p', '8080', '-h', '/etc'] })
  t.equal(web.status, 201)
  ids.push(web.json.Id)
  await direct('POST', `/containers/${web.json.Id as string}/start`)
  const webName = String((await direct('GET', `/containers/${web.json.Id as string}/json`)).json.Name).slice(1)
  const client = await as(A)('POST', `/v1.41/containers/create?name=${fresh('cl')}`, { Image: engine().image, Cmd: ['sh', '-c', 'printf \'GET /hostname HTTP/1.0\\r\\n\\r\\n\' | nc -w 3 db 8080 | grep -q "200 OK"'], HostConfig: { Links: [`${webName}:db`] } })
  t.equal(client.status, 201, `a create with --link ${webName}:db (${client.text.trim()})`)
  ids.push(client.json.Id)
  const stored = (await direct('GET', `/containers/${client.json.Id as string}/json`)).json
  t.same(stored.NetworkSettings.Networks[`${A}-default`]?.Links, [`${webName}:db`], 'the link is the endpoint\'s on A\'s network')
  await direct('POST', `/containers/${client.json.Id as string}/start`)
  const waited = await direct('POST', `/containers/${client.json.Id as string}/wait`)
  t.equal(waited.json?.StatusCode, 0, 'the link name resolves: the linked container answers on A\'s network')
  // The oracle: the engine itself, for `docker run --network <user-defined> --link c:db`,
  // stores the link on the endpoint by name and none in HostConfig.Links (moby registers
  // legacy links only on the default bridge): the tenant's create is stored the same way.
  const oracle = await direct('POST', `/containers/create?name=${fresh('or')}`, { Image: engine().image, Cmd: ['true'], HostConfig: { NetworkMode: `${A}-default`, Links: [`${webName}:db`] }, NetworkingConfig: { EndpointsConfig: { [`${A}-default`]: { Links: [`${webName}:db`] } } } })
  t.equal(oracle.status, 201)
  ids.push(oracle.json.Id)
  const engineStored = (await direct('GET', `/containers/${oracle.json.Id as string}/json`)).json
  t.same([stored.HostConfig.Links, stored.NetworkSettings.Networks[`${A}-default`]?.Links], [engineStored.HostConfig.Links, engineStored.NetworkSettings.Networks[`${A}-default`]?.Links], 'stored as the engine stores a link on a user-defined network')
  // A link to another tenant's container answers as missing, as the engine answers a name it has not.
  const cross = await as(B)('POST', `/v1.41/containers/create?name=${fresh('x')}`, { Image: engine().image, Cmd: ['true'], HostConfig: { Links: [`${webName}:db`] } })
  const absent = `${webName}-none`
  const missingDirect = await direct('POST', '/containers/create', { Image: engine().image, Cmd: ['true'], HostConfig: { Links: [`${absent}:db`] } })
  t.same([cross.status, cross.json?.message], [missingDirect.status, String(missingDirect.json?.message).replaceAll(absent, webName)], `B's link to A's container answers as the engine answers a missing one: ${cross.text.trim()}`)
  if (cross.status === 201) ids.push(cross.json.Id)

  // The tenant sees it as its own; the other tenant does not see it, nor can it take the name.
  const listA = (await as(A)('GET', '/v1.41/networks')).json.map((n: any) => n.Name)
  t.ok(listA.includes(`${A}-default`), 'A lists its default network')
  t.notOk(listA.includes(`${B}-default`), 'A does not list B\'s')
  t.equal((await as(A)('GET', `/v1.41/networks/${A}-default`)).status, 200, 'A inspects its own')
  t.equal((await as(B)('GET', `/v1.41/networks/${A}-default`)).status, 404, 'B gets A\'s as missing')
  const squat = await as(B)('POST', '/v1.41/networks/create', { Name: `zz${RUN}-default` })
  t.equal(squat.status, 403, 'a tenant cannot create a name shaped like another tenant\'s default network')
  t.match(squat.text, /rule tenant-names\b/)
  // Two creates racing for a fresh tenant's network: one network, both created.
  const C = `netc-${RUN}`
  const tc = sign(C)
  const race = await Promise.all([0, 1, 2].map(async () => await request(gw.socket, 'POST', `/v1.41/containers/create?name=${fresh('c')}`, { Image: engine().image, Cmd: ['true'] }, { token: tc })))
  for (const r of race) { t.equal(r.status, 201, `a racing create (${r.text.trim()})`); if (r.status === 201) ids.push(r.json.Id) }
  const named = (await direct('GET', `/networks?filters=${encodeURIComponent(JSON.stringify({ name: { [`${C}-default`]: true } }))}`)).json.filter((n: any) => n.Name === `${C}-default`)
  t.equal(named.length, 1, 'one network for the racing creates')
  t.teardown(async () => { for (const id of ids) await direct('DELETE', `/containers/${id}?force=1`); await direct('DELETE', `/networks/${C}-default`) })
})

const NO_FIREWALL = fs.existsSync('/usr/sbin/iptables') ? false : 'no /usr/sbin/iptables here: dockerd cannot write its isolation chains'
t.test('on an engine with its firewall on: tenants\' default containers cannot reach each other', { skip: NO_FIREWALL }, async (t) => {
  // Its own dockerd, in its own network and mount namespaces (engine.ts), with iptables on.
  const fw: EngineInfo = await startEngine(fs.mkdtempSync('/tmp/pcx-'), { iptables: true })
  t.teardown(async () => { await stopEngine(fw) })
  const gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, `unix://${fw.socket}`, ownNetworks())
  t.teardown(async () => { await gw.close() })
  const direct = async (m: string, p: string, b?: object): Promise<RawReply> => await request(fw.socket, m, p, b)
  const as = (tenant: string) => async (m: string, p: string, b?: object): Promise<RawReply> => await request(gw.socket, m, p, b, { token: TOKEN[tenant] })
  const rules = (await direct('GET', '/info')).json
  t.ok(rules.BridgeNfIptables !== undefined, 'the engine reports its firewall settings')

  // A web server: busybox httpd serving /etc (the engine's /etc/hostname) on 8080.
  const server = { Image: fw.image, Cmd: ['httpd', '-f', '-v', '-p', '8080', '-h', '/etc'] }
  const ipOf = async (id: string): Promise<string> => {
    const nets = (await direct('GET', `/containers/${id}/json`)).json.NetworkSettings.Networks
    return String((Object.values(nets)[0] as any).IPAddress)
  }
  /** Whether a fresh container (created by `via`, so on its network) fetches the page from `ip` (an HTTP request by busybox nc, 3 s timeout: busybox-static's wget crashes here). */
  const reaches = async (via: (m: string, p: string, b?: object) => Promise<RawReply>, ip: string): Promise<boolean> => {
    const r = await via('POST', `/v1.41/containers/create?name=${fresh('w')}`, { Image: fw.image, Cmd: ['sh', '-c', `printf 'GET /hostname HTTP/1.0\\r\\n\\r\\n' | nc -w 3 ${ip} 8080 | grep -q '200 OK'`] })
    await direct('POST', `/containers/${r.json.Id as string}/start`)
    const w = await direct('POST', `/containers/${r.json.Id as string}/wait`)
    const logs = await direct('GET', `/containers/${r.json.Id as string}/logs?stdout=1&stderr=1`)
    t.comment(`fetch ${ip}: ${w.text.trim()} ${JSON.stringify(logs.text.slice(0, 200))}`)
    return w.json?.StatusCode === 0
  }

  const webA = await started(t, as(A), server, direct)
  const ipA = await ipOf(webA)
  await new Promise((resolve) => setTimeout(resolve, 500))
  t.ok(await reaches(as(A), ipA), `A's second container reaches A's web server (${ipA}) on A's network`)
  t.notOk(await reaches(as(B), ipA), 'B\'s default container cannot reach A\'s web server')
  // The oracle: on the shared bridge the same check succeeds.
  const webBridge = await started(t, direct, server, direct)
  await new Promise((resolve) => setTimeout(resolve, 500))
  t.ok(await reaches(direct, await ipOf(webBridge)), 'two containers on the plain bridge reach each other')
  t.notOk(await reaches(direct, ipA), 'and a container on the bridge cannot reach A\'s network')
})

t.test('an engine out of address pools: the tenant\'s create fails loudly, naming the setting, and nothing is made', async (t) => {
  // Two /24s: the engine's bridge takes one, tenant A's network the other.
  const small: EngineInfo = await startEngine(fs.mkdtempSync('/tmp/pcx-'), { addressPools: [{ base: '10.99.0.0/23', size: 24 }] })
  t.teardown(async () => { await stopEngine(small) })
  const gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, `unix://${small.socket}`, ownNetworks())
  t.teardown(async () => { await gw.close() })
  const direct = async (m: string, p: string, b?: object): Promise<RawReply> => await request(small.socket, m, p, b)
  const as = (tenant: string) => async (m: string, p: string, b?: object): Promise<RawReply> => await request(gw.socket, m, p, b, { token: TOKEN[tenant] })
  const a = await as(A)('POST', `/v1.41/containers/create?name=${fresh('a')}`, { Image: small.image, Cmd: ['true'] })
  t.equal(a.status, 201, `A's first container gets A's network (${a.text.trim()})`)
  const b = await as(B)('POST', `/v1.41/containers/create?name=${fresh('b')}`, { Image: small.image, Cmd: ['true'] })
  t.equal(b.status, 502, 'B\'s create fails: no pool is left for B\'s network')
  t.match(b.json?.message, /default network .*tenant .*ContainerCreate.*address pool.*default-address-pools/s, `the message names the cause and the setting (${String(b.json?.message)})`)
  const mine = (await direct('GET', `/containers/json?all=1&filters=${encodeURIComponent(JSON.stringify({ name: [B] }))}`)).json
  t.same(mine, [], 'no container of B was created')
  const nets = (await direct('GET', '/networks')).json.map((n: { Name: string }) => n.Name)
  t.notOk(nets.some((n: string) => n.startsWith(B)), 'and no network of B')
  // A removed default network is made again on the next create (here: A's, after its container is gone).
  await direct('DELETE', `/containers/${a.json.Id as string}?force=1`)
  const rm = await as(A)('DELETE', `/v1.41/networks/${A}-default`)
  t.equal(rm.status, 204, `A may remove its own default network (${rm.text.trim()})`)
  const again = await as(A)('POST', `/v1.41/containers/create?name=${fresh('a2')}`, { Image: small.image, Cmd: ['true'] })
  t.equal(again.status, 201, 'A\'s next create makes it again')
  t.equal((await direct('GET', `/containers/${again.json.Id as string}/json`)).json.HostConfig.NetworkMode, `${A}-default`, 'and uses it')
  // A prune leaves it, as an engine's prune leaves its bridge: only A's other unused networks go.
  await direct('DELETE', `/containers/${again.json.Id as string}?force=1`)
  const spareName = fresh('spare')
  // (made for A by the admin, with an address range of its own: this engine's pools are spent)
  const spare = await direct('POST', '/networks/create', { Name: spareName, IPAM: { Config: [{ Subnet: '10.98.0.0/24' }] }, Labels: { 'io.portcullis.tenant': A, 'io.portcullis.subject': 'nina' } })
  t.equal(spare.status, 201, `an unused network of A's (${spare.text.trim()})`)
  const pruned = await as(A)('POST', '/v1.41/networks/prune')
  t.equal(pruned.status, 200)
  t.same(pruned.json.NetworksDeleted, [spareName], 'A\'s prune removed its unused network...')
  t.equal((await direct('GET', `/networks/${A}-default`)).status, 200, '...but not its default network')
})
