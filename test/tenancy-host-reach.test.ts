/**
 * Engine features that reach beyond the container, as tenant A on the real (plain)
 * engine, the engine's state checked:
 * - ContainerTop's ps_args go to `ps` on the host: only the common listing forms;
 * - network driver options naming host bridges, interfaces or addresses, IPAM pools and
 *   drivers, the ingress network, and another tenant's ConfigFrom network are refused;
 * - a tenant's container gets a private cgroup namespace unless it asks otherwise;
 * - in an update, PidsLimit 0 means unlimited (as -1 does): refused.
 */
import http from 'node:http'
import { randomBytes } from 'node:crypto'
import jwt from 'jsonwebtoken'
import t from 'tap'
import { engine, startTestGateway, type TestGateway } from './helpers/gateway'

const SECRET = randomBytes(32).toString('hex')
const RUN = randomBytes(3).toString('hex')
const TA = `reach-a-${RUN}`
const IMAGE = engine().image
const TOKEN = jwt.sign({ sub: 'alice', tenant: TA, roles: ['tenant'], exp: Math.floor(Date.now() / 1000) + 3600 }, SECRET, { algorithm: 'HS256' })

interface Reply { status: number, text: string, json: any }
async function request (socketPath: string, method: string, path: string, body?: object, token?: string): Promise<Reply> {
  const data = body === undefined ? undefined : Buffer.from(JSON.stringify(body))
  const headers: Record<string, string | number> = {}
  if (data) { headers['content-type'] = 'application/json'; headers['content-length'] = data.length }
  if (token) headers.authorization = `Bearer ${token}`
  return await new Promise((resolve, reject) => {
    const req = http.request({ socketPath, method, path, headers }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString()
        let json: any
        try { json = JSON.parse(text) } catch { json = undefined }
        resolve({ status: res.statusCode ?? 0, text, json })
      })
    })
    req.on('error', reject)
    req.end(data)
  })
}
let gw: TestGateway
const asA = async (method: string, path: string, body?: object): Promise<Reply> => await request(gw.socket, method, path, body, TOKEN)
const direct = async (method: string, path: string, body?: object): Promise<Reply> => await request(engine().socket, method, path, body)

let box = ''
const networks: string[] = []
t.before(async () => {
  gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`)
  const r = await asA('POST', `/v1.41/containers/create?name=reach-${RUN}-box`, { Image: IMAGE, Cmd: ['sleep', '600'], HostConfig: {} })
  if (r.status !== 201) throw new Error(`create: ${r.status} ${r.text}`)
  box = r.json.Id
  await direct('POST', `/containers/${box}/start`)
})
t.teardown(async () => {
  await direct('DELETE', `/containers/${box}?force=1`)
  for (const n of networks) await direct('DELETE', `/networks/${n}`)
  await gw?.close()
})

t.test('ContainerTop: the common ps forms only', async (t) => {
  for (const args of [undefined, '-ef', 'aux']) {
    const q = args === undefined ? '' : `?ps_args=${encodeURIComponent(args)}`
    const [g, d] = await Promise.all([asA('GET', `/v1.41/containers/${box}/top${q}`), direct('GET', `/containers/${box}/top${q}`)])
    t.equal(g.status, 200, `ps_args ${String(args)}`)
    t.same(g.json?.Titles, d.json?.Titles, 'the same columns as directly')
  }
  for (const args of ['-o pid:9=PID,args -e', 'e', '-ef&ps_args=-o pid,args', '--pid 1']) {
    const r = await asA('GET', `/v1.41/containers/${box}/top?ps_args=${args.includes('&') ? args.replace(/ /g, '%20') : encodeURIComponent(args)}`)
    t.equal(r.status, 403, `ps_args ${args}`)
    t.match(r.json?.message, /rule top-ps-args/)
  }
})

t.test('NetworkCreate: no host bridges, interfaces, addresses or pools', async (t) => {
  const refused: Array<[string, object, RegExp]> = [
    ['re-addressing docker0', { Options: { 'com.docker.network.bridge.name': 'docker0' } }, /rule network-options/],
    ['a host binding address', { Options: { 'com.docker.network.bridge.host_binding_ipv4': '0.0.0.0' } }, /rule network-options/],
    ['a parent interface', { Options: { parent: 'eth0' } }, /rule network-options/],
    ['an explicit subnet', { IPAM: { Config: [{ Subnet: '10.0.0.0/8' }] } }, /rule network-ipam/],
    ['an IPAM driver', { IPAM: { Driver: 'null' } }, /rule network-ipam/],
    ['IPAM options', { IPAM: { Options: { x: 'y' } } }, /rule network-ipam/],
    ['the ingress network', { Ingress: true }, /rule network-options/],
  ]
  for (const [why, extra, rule] of refused) {
    const name = `reach-${RUN}-${randomBytes(3).toString('hex')}`
    const r = await asA('POST', '/v1.41/networks/create', { Name: name, ...extra })
    t.equal(r.status, 403, why)
    t.match(r.json?.message, rule)
    t.equal((await direct('GET', `/networks/${name}`)).status, 404, `${why}: no network was created`)
  }
  const bridge = (await direct('GET', '/networks/bridge')).json
  t.equal(bridge.Options?.['com.docker.network.bridge.name'], 'docker0', 'the default bridge is untouched')

  // ConfigFrom: another tenant's configuration-only network is missing for A.
  const other = `reach-${RUN}-other-cfg`
  const o = await direct('POST', '/networks/create', { Name: other, ConfigOnly: true, Labels: { 'io.portcullis.tenant': 'someone-else' } })
  t.equal(o.status, 201)
  networks.push(o.json.Id)
  const from = await asA('POST', '/v1.41/networks/create', { Name: `reach-${RUN}-from`, ConfigFrom: { Network: other } })
  t.equal(from.status, 400, 'ConfigFrom another tenant\'s network answers as a missing one')
  t.equal(from.json?.message, `network ${other} not found`)

  const ok = await asA('POST', '/v1.41/networks/create', { Name: `reach-${RUN}-ok`, Options: { 'com.docker.network.driver.mtu': '1400' } })
  t.equal(ok.status, 201, 'an allowed option')
  networks.push(ok.json.Id)
  t.equal((await direct('GET', `/networks/${ok.json.Id as string}`)).json.Options?.['com.docker.network.driver.mtu'], '1400')
})

t.test('a private cgroup namespace by default, and PidsLimit 0 in an update refused', async (t) => {
  const hc = (await direct('GET', `/containers/${box}/json`)).json.HostConfig
  t.equal(hc.CgroupnsMode, 'private', 'the engine stored a private cgroup namespace')
  t.equal(hc.PidsLimit, 1024)
  for (const limit of [0, -1]) {
    const r = await asA('POST', `/v1.41/containers/${box}/update`, { PidsLimit: limit })
    t.equal(r.status, 403, `PidsLimit ${limit}`)
    t.match(r.json?.message, /rule pids-limit-update/)
  }
  t.equal((await direct('GET', `/containers/${box}/json`)).json.HostConfig.PidsLimit, 1024, 'the limit is unchanged')
  const raise = await asA('POST', `/v1.41/containers/${box}/update`, { PidsLimit: 2048 })
  t.equal(raise.status, 200, raise.text)
  t.equal((await direct('GET', `/containers/${box}/json`)).json.HostConfig.PidsLimit, 2048)
})
