/**
 * Identity inside the container: a user or group given by name is resolved by the
 * runtime from the container's own /etc/passwd and /etc/group, which a tenant controls
 * (any image it builds). Here the tenant's container maps `someone` to uid 0 and `wheel`
 * to gid 0: directly, `docker exec -u someone` is root; through the gateway a tenant
 * names users and groups by number only (rule numeric-user), and no group 0 (GroupAdd, a
 * service's Groups) is accepted (rule tenant-user: tenancy.yaml users, test/tenant-users). On the real (plain) engine, the engine's state checked.
 */
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import jwt from 'jsonwebtoken'
import t from 'tap'
import { CLI28, engine, run, startTestGateway, type TestGateway, request, type RawReply } from './helpers/gateway'

const SECRET = randomBytes(32).toString('hex')
const RUN = randomBytes(3).toString('hex')
const TA = `ident-${RUN}`
const IMAGE = engine().image
const TOKEN = jwt.sign({ sub: 'alice', tenant: TA, roles: ['tenant'], exp: Math.floor(Date.now() / 1000) + 3600 }, SECRET, { algorithm: 'HS256' })

let gw: TestGateway
const asA = async (method: string, path: string, body?: object): Promise<RawReply> => await request(gw.socket, method, path, body, { token: TOKEN })
const direct = async (method: string, path: string, body?: object): Promise<RawReply> => await request(engine().socket, method, path, body)
const made: string[] = []
const box = `ident-${RUN}-box`

t.before(async () => {
  gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`)
  const r = await asA('POST', `/v1.41/containers/create?name=${box}`, { Image: IMAGE, Cmd: ['sleep', '600'] })
  if (r.status !== 201) throw new Error(`create: ${r.status} ${r.text}`)
  made.push(r.json.Id)
  await direct('POST', `/containers/${box}/start`)
  // What a tenant's own image can hold: names that are root.
  const plant = await run(CLI28, ['exec', '-u', '0', box, 'sh', '-c', 'echo someone:x:0:0::/:/bin/sh >> /etc/passwd && echo wheel:x:0: >> /etc/group'], { host: engine().dockerHost })
  if (plant.code !== 0) throw new Error(`plant: ${plant.stderr}`)
})
t.teardown(async () => {
  for (const id of made) await direct('DELETE', `/containers/${id}?force=1`)
  await gw?.close()
})

t.test('the hole: directly, a user name the container maps to uid 0 is root', async (t) => {
  const r = await run(CLI28, ['exec', '-u', 'someone', box, 'id', '-u'], { host: engine().dockerHost })
  t.equal(r.stdout.toString(), '0\n')
})

t.test('exec: users and groups by number only', async (t) => {
  for (const user of ['someone', '65534:wheel', 'nobody', '1000:1000:1']) {
    const r = await asA('POST', `/v1.41/containers/${box}/exec`, { Cmd: ['id'], User: user })
    t.equal(r.status, 403, `exec User ${JSON.stringify(user)}`)
    t.match(r.json?.message, /rule numeric-user/)
  }
  const cli = await run(CLI28, ['exec', '-u', 'someone', box, 'id', '-u'], { host: gw.dockerHost, env: { DOCKER_CONFIG: await config() } })
  t.not(cli.code, 0, 'docker exec -u someone fails through the gateway')
  const ok = await run(CLI28, ['exec', '-u', '1000:1000', box, 'id'], { host: gw.dockerHost, env: { DOCKER_CONFIG: await config() } })
  t.match(ok.stdout.toString(), /^uid=1000 gid=1000/, 'a numeric user runs as that user')
})

t.test('GroupAdd and a service\'s User and Groups', async (t) => {
  for (const [groups, rule] of [[['wheel'], 'numeric-user'], [['0'], 'tenant-user'], [['1000', 'root'], 'numeric-user']] as const) {
    const r = await asA('POST', `/v1.41/containers/create?name=ident-${RUN}-${randomBytes(2).toString('hex')}`, { Image: IMAGE, HostConfig: { GroupAdd: groups } })
    t.equal(r.status, 403, `GroupAdd ${JSON.stringify(groups)}`)
    t.match(r.json?.message, new RegExp(`rule ${rule}`))
  }
  // Even a number is looked up as a group name first (test/tenant-groups.test.ts).
  const numeric = await asA('POST', `/v1.41/containers/create?name=ident-${RUN}-groups`, { Image: IMAGE, HostConfig: { GroupAdd: ['1000'] } })
  t.equal(numeric.status, 403, numeric.text)
  t.match(numeric.json?.message, /rule tenant-groups/)
  const none = await asA('POST', `/v1.41/containers/create?name=ident-${RUN}-nogroups`, { Image: IMAGE, HostConfig: { GroupAdd: [] } })
  t.equal(none.status, 201, none.text)
  made.push(none.json.Id)
  for (const [spec, rule] of [[{ User: 'someone' }, 'numeric-user'], [{ User: '1000', Groups: ['wheel'] }, 'numeric-user'], [{ Groups: ['0'] }, 'tenant-user']] as const) {
    const r = await asA('POST', '/v1.41/services/create', { Name: `ident-${RUN}-svc`, TaskTemplate: { ContainerSpec: { Image: IMAGE, ...spec } } })
    t.equal(r.status, 403, `service ${JSON.stringify(spec)}`)
    t.match(r.json?.message, new RegExp(`rule ${rule}`))
  }
})

let configDir: string | undefined
/** A docker config directory sending the tenant's token. */
async function config (): Promise<string> {
  if (configDir) return configDir
  configDir = fs.mkdtempSync(path.join(os.tmpdir(), 'pci-'))
  fs.writeFileSync(path.join(configDir, 'config.json'), JSON.stringify({ HttpHeaders: { Authorization: `Bearer ${TOKEN}` } }))
  t.teardown(() => fs.rmSync(configDir!, { recursive: true, force: true }))
  return configDir
}
