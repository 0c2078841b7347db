/**
 * Issue 18, class 9: services are not containers on older engines. A tenant's containers
 * run with no-new-privileges; a service's tasks get it only from
 * ContainerSpec.Privileges.NoNewPrivileges, which the engine reads from API 1.44 on. On
 * the run's swarm engine (dockerd 20.10, API 1.41) the field does not exist: the engine
 * drops it and the task runs without no-new-privileges (shown directly on the engine),
 * so a tenant's ServiceCreate and ServiceUpdate are refused (rule
 * service-no-new-privileges) and nothing is created or changed, unless tenancy.yaml
 * services.withoutNoNewPrivileges allows them.
 */
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import jwt from 'jsonwebtoken'
import t from 'tap'
import { compileTenancy } from '../src/policy/tenancy'
import { policiesWith, request, servicesWithoutNoNewPrivileges, startTestGateway, swarmEngine, type RawReply, type TestGateway } from './helpers/gateway'

const SECRET = randomBytes(32).toString('hex')
const RUN = randomBytes(3).toString('hex')
const TENANT = `nnp-${RUN}`
const IMAGE = swarmEngine().image
const TOKEN = jwt.sign({ sub: 'nina', tenant: TENANT, roles: ['tenant'], exp: Math.floor(Date.now() / 1000) + 3600 }, SECRET, { algorithm: 'HS256' })

let strict: TestGateway
let lenient: TestGateway
const as = async (gw: TestGateway, method: string, target: string, body?: object): Promise<RawReply> => await request(gw.socket, method, target, body, { token: TOKEN })
const direct = async (method: string, target: string, body?: object): Promise<RawReply> => await request(swarmEngine().socket, method, target, body)
const services: string[] = []
const spec = (name: string, containerSpec: object = {}): object => ({
  Name: `nnp-${RUN}-${name}`,
  Mode: { Replicated: { Replicas: 0 } },
  TaskTemplate: { ContainerSpec: { Image: IMAGE, Command: ['sleep', '600'], ...containerSpec } },
})

t.before(async () => {
  strict = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, `unix://${swarmEngine().socket}`)
  lenient = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, `unix://${swarmEngine().socket}`, policiesWith(servicesWithoutNoNewPrivileges))
})
t.teardown(async () => {
  for (const id of services) await direct('DELETE', `/services/${id}`)
  await strict?.close()
  await lenient?.close()
})

t.test('the hole: API 1.41 has no field for it, the engine drops it', async (t) => {
  t.equal((await direct('GET', '/version')).json.ApiVersion, '1.41', 'the swarm test engine speaks API 1.41')
  const r = await direct('POST', '/services/create', spec('direct', { Privileges: { NoNewPrivileges: true } }))
  t.equal(r.status, 201, r.text)
  services.push(r.json.ID)
  const stored = (await direct('GET', `/services/${r.json.ID as string}`)).json.Spec
  t.not(stored.TaskTemplate.ContainerSpec.Privileges?.NoNewPrivileges, true, 'not stored: the tasks would run without it')
})

t.test('refused to tenants by default, nothing created; allowed with the switch', async (t) => {
  for (const [why, target, body] of [
    ['a plain service', '/v1.41/services/create', spec('plain')],
    ['one asking for no-new-privileges', '/v1.41/services/create', spec('asks', { Privileges: { NoNewPrivileges: true } })],
    ['without an API version in the path', '/services/create', spec('unversioned')],
  ] as Array<[string, string, object]>) {
    const r = await as(strict, 'POST', target, body)
    t.equal(r.status, 403, `${why}: refused (${r.text.trim()})`)
    t.match(r.json?.message, /rule service-no-new-privileges\b/)
    t.equal((await direct('GET', `/services/${(body as { Name: string }).Name}`)).status, 404, `${why}: nothing created`)
  }
  const ok = await as(lenient, 'POST', '/v1.41/services/create', spec('allowed'))
  t.equal(ok.status, 201, `allowed by services.withoutNoNewPrivileges (${ok.text.trim()})`)
  services.push(ok.json.ID)

  // An update of the tenant's own service: refused too, the service unchanged.
  const s = (await direct('GET', `/services/${ok.json.ID as string}`)).json
  const changed = { ...s.Spec, TaskTemplate: { ...s.Spec.TaskTemplate, ContainerSpec: { ...s.Spec.TaskTemplate.ContainerSpec, Command: ['sleep', '700'] } } }
  const up = await as(strict, 'POST', `/v1.41/services/${ok.json.ID as string}/update?version=${s.Version.Index as number}`, changed)
  t.equal(up.status, 403, `update refused (${up.text.trim()})`)
  t.match(up.json?.message, /rule service-no-new-privileges\b/)
  t.same((await direct('GET', `/services/${ok.json.ID as string}`)).json.Spec.TaskTemplate.ContainerSpec.Command, ['sleep', '600'], 'unchanged')
  const up2 = await as(lenient, 'POST', `/v1.41/services/${ok.json.ID as string}/update?version=${s.Version.Index as number}`, changed)
  t.equal(up2.status, 200, `update allowed with the switch (${up2.text.trim()})`)
})

t.test('tenancy.yaml: the switch is a boolean, false when absent', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pcn-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  const file = path.join(dir, 'tenancy.yaml')
  fs.writeFileSync(file, 'services: { withoutNoNewPrivileges: maybe, other: 1 }\n')
  const bad: string[] = []
  compileTenancy(file, 'tenancy.yaml', bad)
  t.same(bad.sort(), ['tenancy.yaml: services.other: unknown key', 'tenancy.yaml: services.withoutNoNewPrivileges: expected true or false'])
  fs.writeFileSync(file, 'unscopedRoles: [admin]\n')
  const none: string[] = []
  t.equal(compileTenancy(file, 'tenancy.yaml', none).services?.withoutNoNewPrivileges, false)
  t.same(none, [])
})
