/**
 * Root is a policy decision (tenancy.yaml `users`, src/gateway/tenancy/users.ts): a
 * tenant's container, exec or service task that names no user runs as the tenant's
 * uid:gid, not as the image's user (root here); root (uid 0, gid 0, supplementary group
 * 0) and names are refused unless the tenant is granted root. Each attempt goes through
 * the gateway to the real engines (the plain one; the swarm manager for services); a
 * refusal names its rule and leaves nothing on the engine; what runs is checked on the
 * engine's stored document and on the process itself (/proc/<pid>/status: dockerd
 * shares the host's PID namespace). Last, a private engine with --userns-remap: there
 * root in a container is an unprivileged host uid, and users.rootWhenRemapped decides.
 */
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import jwt from 'jsonwebtoken'
import t, { type Test } from 'tap'
import { CLI28, engine, policiesWith, request, run, servicesWithoutNoNewPrivileges, startTestGateway, swarmEngine, type RawReply, type TestGateway } from './helpers/gateway'
import { compileTenancy, DEFAULT_TENANCY, rootGranted, userOf } from '../src/policy/tenancy'
import { remapsUsers } from '../src/gateway/tenancy/lookup'
import { REMAP_BASE, startEngine, stopEngine } from './engine/engine'

const SECRET = randomBytes(32).toString('hex')
const RUN = randomBytes(3).toString('hex')
/** A tenant with a uid:gid of its own. */
const TENANT = `users-${RUN}`
/** A tenant on the default uid:gid (65534:65534). */
const PLAIN = `usersd-${RUN}`
/** A tenant granted root in this test's tenancy.yaml. */
const ROOT = `usersr-${RUN}`
/** A tenant granted root only after a reload. */
const LATER = `usersl-${RUN}`
const UID = 10001
const GID = 10002
const sign = (tenant: string): string => jwt.sign({ sub: 'uma', tenant, roles: ['tenant'], exp: Math.floor(Date.now() / 1000) + 3600 }, SECRET, { algorithm: 'HS256' })
const TOKEN = sign(TENANT)
// (and tenants' services on the API 1.41 swarm engine allowed without no-new-privileges)
const policyDir = policiesWith((text) => servicesWithoutNoNewPrivileges(text.replace(/^users:\n {2}default: "65534:65534"\n {2}tenants: \{\}\n {2}root: \[\]\n/m,
  `users:\n  default: "65534:65534"\n  tenants: { ${TENANT}: "${UID}:${GID}" }\n  root: [${ROOT}]\n`)))
const IMAGE = engine().image

let gw: TestGateway
let sgw: TestGateway
const as = async (method: string, target: string, body?: object, token = TOKEN): Promise<RawReply> => await request(gw.socket, method, target, body, { token })
const admin = async (method: string, target: string, body?: object): Promise<RawReply> => await request(gw.socket, method, target, body)
const asSwarm = async (method: string, target: string, body?: object, token = TOKEN): Promise<RawReply> => await request(sgw.socket, method, target, body, { token })
const direct = async (method: string, target: string, body?: object): Promise<RawReply> => await request(engine().socket, method, target, body)
const swarmDirect = async (method: string, target: string, body?: object): Promise<RawReply> => await request(swarmEngine().socket, method, target, body)

const containers: string[] = []
const services: string[] = []
const fresh = (what: string): string => `users-${RUN}-${what}-${randomBytes(3).toString('hex')}`
const ruleOf = (rule: string): RegExp => new RegExp(`rule ${rule}\\b`)
let attempts = 0

t.before(async () => {
  gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, undefined, policyDir)
  sgw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, `unix://${swarmEngine().socket}`, policyDir)
})

t.teardown(async () => {
  for (const id of containers) await direct('DELETE', `/containers/${id}?force=1`)
  for (const id of services) await swarmDirect('DELETE', `/services/${id}`)
  await gw?.close()
  await sgw?.close()
  t.comment(`${attempts} attempts against the engines`)
})

/** The ids a process runs with, as the kernel has them. */
function processIds (pid: number): { uid: string, gid: string, groups: string } {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8')
  const field = (name: string): string => (new RegExp(`^${name}:\\s*(.*)$`, 'm').exec(status)?.[1] ?? '').trim()
  return { uid: field('Uid').split(/\s+/)[0], gid: field('Gid').split(/\s+/)[0], groups: field('Groups') }
}

/** Create (as `token`) and start a sleeping container; its stored User and the ids its process runs with. */
async function running (t: Test, body: object, token = TOKEN, via = as): Promise<{ id: string, user: string, ids: ReturnType<typeof processIds> }> {
  attempts++
  const r = await via('POST', `/v1.41/containers/create?name=${fresh('c')}`, { Image: IMAGE, Cmd: ['sleep', '600'], ...body }, token)
  t.equal(r.status, 201, `created (${r.text.trim()})`)
  containers.push(r.json.Id)
  const started = await direct('POST', `/containers/${r.json.Id as string}/start`)
  t.equal(started.status, 204, `started (${started.text.trim()})`)
  const inspect = (await direct('GET', `/containers/${r.json.Id as string}/json`)).json
  return { id: r.json.Id, user: inspect.Config.User, ids: processIds(inspect.State.Pid) }
}

/** A create the gateway refuses by `rule`; no container of that name on the engine. */
async function refusedCreate (t: Test, body: object, rule: string, token = TOKEN): Promise<void> {
  attempts++
  const name = fresh('r')
  const r = await as('POST', `/v1.41/containers/create?name=${name}`, { Image: IMAGE, Cmd: ['true'], ...body }, token)
  if (r.status === 201) containers.push(r.json.Id)
  t.equal(r.status, 403, `${JSON.stringify(body)} refused (${r.text.trim()})`)
  t.match(r.json?.message, ruleOf(rule), `by rule ${rule}`)
  t.equal((await direct('GET', `/containers/${name}/json`)).status, 404, 'no container was created')
}

t.test('tenancy.yaml users: parsed, checked, with clear errors', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pcu-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  const file = path.join(dir, 'tenancy.yaml')
  t.same(DEFAULT_TENANCY.users, { default: { uid: 65534, gid: 65534 }, tenants: {}, root: [], rootWhenRemapped: false, ownFreshVolumes: true }, 'without users: nobody:nogroup, root for nobody, fresh volumes given to the user')
  fs.writeFileSync(file, 'users: { default: "2000:2000", tenants: { a: "3000:3001" }, root: [ops], rootWhenRemapped: true }\n')
  const fine: string[] = []
  const s = compileTenancy(file, 'tenancy.yaml', fine)
  t.same(fine, [])
  t.same([userOf(s, 'a'), userOf(s, 'b'), rootGranted(s, 'ops'), rootGranted(s, 'a'), s.users.rootWhenRemapped], [{ uid: 3000, gid: 3001 }, { uid: 2000, gid: 2000 }, true, false, true])
  fs.writeFileSync(file, 'users: { default: nobody, tenants: { a: "0:1000", b: "1000:0", c: 1000, d: "1000:1000:1", e: "4294967295:1" }, root: ops, rootWhenRemapped: maybe, extra: 1 }\n')
  const bad: string[] = []
  compileTenancy(file, 'tenancy.yaml', bad)
  t.same(bad.sort(), [
    'tenancy.yaml: users.default: expected a numeric "uid:gid" such as "10001:10001", got "nobody" (names are resolved in the container\'s own /etc/passwd, which the tenant writes)',
    'tenancy.yaml: users.tenants.a: "0:1000" is root (uid or gid 0); list the tenant under users.root instead',
    'tenancy.yaml: users.tenants.b: "1000:0" is root (uid or gid 0); list the tenant under users.root instead',
    'tenancy.yaml: users.tenants.c: expected a numeric "uid:gid" such as "10001:10001", got 1000 (names are resolved in the container\'s own /etc/passwd, which the tenant writes)',
    'tenancy.yaml: users.tenants.d: expected a numeric "uid:gid" such as "10001:10001", got "1000:1000:1" (names are resolved in the container\'s own /etc/passwd, which the tenant writes)',
    'tenancy.yaml: users.tenants.e: expected a numeric "uid:gid" such as "10001:10001", got "4294967295:1" (names are resolved in the container\'s own /etc/passwd, which the tenant writes)',
    'tenancy.yaml: users.root: expected a list of non-empty strings',
    'tenancy.yaml: users.rootWhenRemapped: expected true or false',
    'tenancy.yaml: users.extra: unknown key',
  ].sort())
})

t.test('user-namespace remapping is read from GET /info', async (t) => {
  attempts++
  const info = (await direct('GET', '/info')).json
  t.ok(Array.isArray(info.SecurityOptions), 'the engine lists its SecurityOptions')
  t.equal(remapsUsers(info), false, `this engine does not remap (${JSON.stringify(info.SecurityOptions)})`)
  // dockerd --userns-remap adds "name=userns" (daemon/info.go) to the same list.
  t.equal(remapsUsers({ ...info, SecurityOptions: [...info.SecurityOptions, 'name=userns'] }), true, 'name=userns: remapped')
  t.equal(remapsUsers({ ...info, SecurityOptions: ['name=seccomp,profile=default', 'name=rootless'] }), false, 'rootless is not remapping')
  t.equal(remapsUsers({ ...info, SecurityOptions: ['name=usernsx'] }), false, 'only that exact option')
  t.equal(remapsUsers(null), false)
})

t.test('a container without a user runs as the tenant\'s uid:gid, not as the image\'s root', async (t) => {
  for (const body of [{}, { User: '' }]) {
    const c = await running(t, body)
    t.equal(c.user, `${UID}:${GID}`, `${JSON.stringify(body)}: the engine stored User ${UID}:${GID}`)
    t.same(c.ids, { uid: String(UID), gid: String(GID), groups: String(GID) }, 'and the process runs as it, in no group but its own')
  }
  const other = await running(t, {}, sign(PLAIN))
  t.equal(other.user, '65534:65534', 'a tenant without an entry: users.default')
  t.same(other.ids, { uid: '65534', gid: '65534', groups: '65534' })
})

t.test('docker run without -u (CLI 28): id prints the tenant\'s uid:gid', async (t) => {
  attempts++
  const cfg = fs.mkdtempSync(path.join(os.tmpdir(), 'pcu-'))
  t.teardown(() => fs.rmSync(cfg, { recursive: true, force: true }))
  fs.writeFileSync(path.join(cfg, 'config.json'), JSON.stringify({ HttpHeaders: { Authorization: `Bearer ${TOKEN}` } }))
  const r = await run(CLI28, ['run', '--rm', IMAGE, 'id'], { host: gw.dockerHost, env: { DOCKER_CONFIG: cfg } })
  t.equal(r.stdout.toString(), `uid=${UID} gid=${GID} groups=${GID}\n`, r.stderr)
  attempts++
  const w = await run(CLI28, ['run', '--rm', '--tmpfs', '/work:size=1m', IMAGE, 'sh', '-c', 'echo hi > /tmp/x && echo ok > /work/y && cat /tmp/x /work/y'], { host: gw.dockerHost, env: { DOCKER_CONFIG: cfg } })
  t.equal(w.stdout.toString(), 'hi\nok\n', `/tmp and a tmpfs are writable as that user (${w.stderr})`)
  attempts++
  const root = await run(CLI28, ['run', '--rm', '-u', 'root', IMAGE, 'id'], { host: gw.dockerHost, env: { DOCKER_CONFIG: cfg } })
  t.not(root.code, 0)
  t.match(root.stderr, /rule numeric-user/, 'docker run -u root is refused')
})

t.test('a numeric user is kept; a lone uid gets the tenant\'s gid', async (t) => {
  const both = await running(t, { User: '1000:1000' })
  t.equal(both.user, '1000:1000')
  t.same(both.ids, { uid: '1000', gid: '1000', groups: '1000' })
  // Directly, the runtime would give a uid without a passwd entry gid 0 (runc GetExecUser).
  const lone = await running(t, { User: '1000' })
  t.equal(lone.user, `1000:${GID}`, 'the stored user has the tenant\'s gid')
  t.same(lone.ids, { uid: '1000', gid: String(GID), groups: String(GID) })
  const directly = await running(t, { User: '1000' }, TOKEN, async (m, p, b) => await direct(m, p, b))
  t.equal(directly.ids.gid, '0', 'which, sent directly, runs in the root group')
  // Any supplementary group is refused (test/tenant-groups.test.ts shows why).
  await refusedCreate(t, { User: '1000:1000', HostConfig: { GroupAdd: ['1001'] } }, 'tenant-groups')
})

t.test('root, the root group and names are refused, and nothing is created', async (t) => {
  for (const user of ['0', '00', '0:0', '1000:0', '0:1000', '000:000']) await refusedCreate(t, { User: user }, 'tenant-user')
  for (const user of ['root', 'root:root', '+0', 'app', '1000:wheel', 'nobody', '1000:1000:1', ':0', '0:']) await refusedCreate(t, { User: user }, 'numeric-user')
  for (const groups of [['0'], ['1000', '00']]) await refusedCreate(t, { HostConfig: { GroupAdd: groups } }, 'tenant-user')
  for (const groups of [['root'], ['wheel']]) await refusedCreate(t, { HostConfig: { GroupAdd: groups } }, 'numeric-user')
  await refusedCreate(t, { User: '0' }, 'tenant-user', sign(PLAIN))
})

t.test('exec: no user runs as the container\'s user (the tenant\'s), root is refused', async (t) => {
  const own = await running(t, {})
  const as1000 = await running(t, { User: '1000:1000' })
  // A container of the tenant's that runs as root: made by an administrator, on the engine.
  attempts++
  const made = await direct('POST', `/containers/create?name=${fresh('adm')}`, { Image: IMAGE, Cmd: ['sleep', '600'], Labels: { 'io.portcullis.tenant': TENANT, 'io.portcullis.subject': 'admin' } })
  t.equal(made.status, 201)
  containers.push(made.json.Id)
  await direct('POST', `/containers/${made.json.Id as string}/start`)
  const execAs = async (container: string, body: object): Promise<{ status: number, user?: string, out?: string, text: string }> => {
    attempts++
    const r = await as('POST', `/v1.41/containers/${container}/exec`, { Cmd: ['id'], AttachStdout: true, ...body })
    if (r.status !== 201) return { status: r.status, text: r.text }
    const user = (await direct('GET', `/exec/${r.json.Id as string}/json`)).json.ProcessConfig?.user
    const out = await as('POST', `/v1.41/exec/${r.json.Id as string}/start`, { Detach: false, Tty: true })
    return { status: r.status, user, out: out.text.trim(), text: r.text }
  }
  for (const body of [{}, { User: '' }]) {
    const e = await execAs(own.id, body)
    t.same([e.status, e.user, e.out], [201, `${UID}:${GID}`, `uid=${UID} gid=${GID} groups=${GID}`], `${JSON.stringify(body)} in a default container`)
  }
  const inherited = await execAs(as1000.id, {})
  t.same([inherited.status, inherited.user, inherited.out], [201, '1000:1000', 'uid=1000 gid=1000 groups=1000'], 'the container\'s own numeric user is kept')
  const rootBox = await execAs(made.json.Id, {})
  t.same([rootBox.status, rootBox.user, rootBox.out], [201, `${UID}:${GID}`, `uid=${UID} gid=${GID} groups=${GID}`], 'in a container running as root: the tenant\'s user, not root')
  const lone = await execAs(own.id, { User: '1000' })
  t.same([lone.status, lone.user], [201, `1000:${GID}`], 'a lone uid gets the tenant\'s gid')
  // docker exec -u 1000:1000 (issue 30: a numeric non-root user is ordinary tenant work).
  const pair = await execAs(own.id, { User: '1000:1000' })
  t.same([pair.status, pair.user, pair.out], [201, '1000:1000', 'uid=1000 gid=1000 groups=1000'], 'a numeric non-root uid:gid runs as given')
  const before = (await direct('GET', `/containers/${own.id}/json`)).json.ExecIDs?.length ?? 0
  for (const [user, rule] of [['root', 'numeric-user'], ['0', 'tenant-user'], ['0:0', 'tenant-user'], ['1000:0', 'tenant-user'], ['00', 'tenant-user'], ['root:root', 'numeric-user'], ['app', 'numeric-user']]) {
    const e = await execAs(own.id, { User: user })
    t.equal(e.status, 403, `exec User ${user} refused`)
    t.match(e.text, ruleOf(rule))
  }
  t.equal((await direct('GET', `/containers/${own.id}/json`)).json.ExecIDs?.length ?? 0, before, 'no exec instance was created')
  const priv = await execAs(own.id, { Privileged: true })
  t.equal(priv.status, 403, 'a privileged exec stays refused (the policy: no-privileged-exec)')
  t.match(priv.text, ruleOf('no-privileged-exec'))
})

t.test('a tenant granted root (users.root) may run as root, and names users as it likes', async (t) => {
  const token = sign(ROOT)
  const r = await running(t, { User: 'root', HostConfig: { GroupAdd: ['0'] } }, token)
  t.equal(r.user, 'root')
  t.equal(r.ids.uid, '0', 'the process runs as root')
  const unset = await running(t, {}, token)
  t.equal(unset.user, '', 'no user stays the image\'s')
  t.equal(unset.ids.uid, '0')
  attempts++
  const e = await as('POST', `/v1.41/containers/${unset.id}/exec`, { Cmd: ['id'], User: '0:0' }, token)
  t.equal(e.status, 201, `exec as 0:0 (${e.text.trim()})`)
  t.equal((await direct('GET', `/exec/${e.json.Id as string}/json`)).json.ProcessConfig?.user, '0:0')
})

t.test('an admin is not scoped: no user stays the image\'s, root is allowed', async (t) => {
  const r = await running(t, {}, TOKEN, async (m, p, b) => await admin(m, p, b))
  t.equal(r.user, '')
  t.equal(r.ids.uid, '0')
  const root = await running(t, { User: '0:0' }, TOKEN, async (m, p, b) => await admin(m, p, b))
  t.equal(root.ids.uid, '0')
})

t.test('the grant follows the policy: a reload of tenancy.yaml gives root', async (t) => {
  const token = sign(LATER)
  await refusedCreate(t, { User: '0' }, 'tenant-user', token)
  const file = path.join(policyDir, 'tenancy.yaml')
  const before = fs.readFileSync(file, 'utf8')
  fs.writeFileSync(file, before.replace(`root: [${ROOT}]`, `root: [${ROOT}, ${LATER}]`))
  t.teardown(async () => { fs.writeFileSync(file, before); await gw.gateway.reload(gw.config) })
  await gw.gateway.reload(gw.config)
  const r = await running(t, { User: '0' }, token)
  t.equal(r.ids.uid, '0', 'after the reload: root')
})

t.test('services: the task template\'s user is the tenant\'s; root is refused', async (t) => {
  attempts++
  const name = fresh('svc')
  const s = await asSwarm('POST', '/v1.41/services/create', { Name: name, Mode: { Replicated: { Replicas: 1 } }, TaskTemplate: { ContainerSpec: { Image: swarmEngine().image, Command: ['sleep', '600'] } } })
  t.equal(s.status, 201, s.text)
  services.push(s.json.ID)
  const spec = (await swarmDirect('GET', `/services/${s.json.ID as string}`)).json.Spec
  t.equal(spec.TaskTemplate.ContainerSpec.User, `${UID}:${GID}`, 'the stored spec runs its tasks as the tenant')
  // The task's container, once the swarm has started it: its process.
  let pid = 0
  for (let i = 0; i < 300 && pid === 0; i++) {
    const list = (await swarmDirect('GET', `/containers/json?filters=${encodeURIComponent(JSON.stringify({ label: [`com.docker.swarm.service.id=${s.json.ID as string}`] }))}`)).json
    if (Array.isArray(list) && list.length > 0) pid = (await swarmDirect('GET', `/containers/${list[0].Id as string}/json`)).json.State?.Pid ?? 0
    if (pid === 0) await new Promise((resolve) => setTimeout(resolve, 100))
  }
  t.not(pid, 0, 'the task is running')
  if (pid) t.same(processIds(pid), { uid: String(UID), gid: String(GID), groups: String(GID) }, 'and its process runs as the tenant\'s uid:gid')

  for (const [user, rule] of [['0', 'tenant-user'], ['root', 'numeric-user'], ['0:0', 'tenant-user'], ['1000:0', 'tenant-user'], ['app', 'numeric-user']]) {
    attempts++
    const n = fresh('svcr')
    const r = await asSwarm('POST', '/v1.41/services/create', { Name: n, Mode: { Replicated: { Replicas: 0 } }, TaskTemplate: { ContainerSpec: { Image: swarmEngine().image, User: user } } })
    if (r.status === 201) services.push(r.json.ID)
    t.equal(r.status, 403, `service User ${user} refused`)
    t.match(r.json?.message, ruleOf(rule))
    t.equal((await swarmDirect('GET', `/services/${n}`)).status, 404, 'no service was created')
  }
  attempts++
  const groups = await asSwarm('POST', '/v1.41/services/create', { Name: fresh('svcg'), TaskTemplate: { ContainerSpec: { Image: swarmEngine().image, Groups: ['0'] } } })
  t.equal(groups.status, 403)
  t.match(groups.json?.message, ruleOf('tenant-user'))

  // Update: root refused, the spec unchanged; without a user, the tenant's again.
  const current = (await swarmDirect('GET', `/services/${s.json.ID as string}`)).json
  attempts++
  const up = await asSwarm('POST', `/v1.41/services/${s.json.ID as string}/update?version=${current.Version.Index as number}`, { ...current.Spec, Mode: { Replicated: { Replicas: 0 } }, TaskTemplate: { ...current.Spec.TaskTemplate, ContainerSpec: { ...current.Spec.TaskTemplate.ContainerSpec, User: '0' } } })
  t.equal(up.status, 403, 'update to User 0 refused')
  t.match(up.json?.message, ruleOf('tenant-user'))
  const after = (await swarmDirect('GET', `/services/${s.json.ID as string}`)).json
  t.same([after.Version.Index, after.Spec.TaskTemplate.ContainerSpec.User], [current.Version.Index, `${UID}:${GID}`], 'the service is as it was')
  attempts++
  const { User: _drop, ...noUser } = current.Spec.TaskTemplate.ContainerSpec
  const up2 = await asSwarm('POST', `/v1.41/services/${s.json.ID as string}/update?version=${current.Version.Index as number}`, { ...current.Spec, Mode: { Replicated: { Replicas: 0 } }, TaskTemplate: { ...current.Spec.TaskTemplate, ContainerSpec: noUser } })
  t.equal(up2.status, 200, up2.text)
  t.equal((await swarmDirect('GET', `/services/${s.json.ID as string}`)).json.Spec.TaskTemplate.ContainerSpec.User, `${UID}:${GID}`, 'an update without a user: the tenant\'s')

  attempts++
  const granted = await asSwarm('POST', '/v1.41/services/create', { Name: fresh('svcroot'), Mode: { Replicated: { Replicas: 0 } }, TaskTemplate: { ContainerSpec: { Image: swarmEngine().image, User: 'root' } } }, sign(ROOT))
  t.equal(granted.status, 201, `a tenant granted root: a root service (${granted.text.trim()})`)
  if (granted.status === 201) services.push(granted.json.ID)
})

t.test('an engine with --userns-remap: root is an unprivileged host uid, and rootWhenRemapped decides', async (t) => {
  const dir = fs.mkdtempSync('/tmp/pcx-')
  const remap = await startEngine(dir, { usernsRemap: true })
  t.teardown(async () => { await stopEngine(remap) })
  const strict = policiesWith((text) => text.replace(/^ {2}rootWhenRemapped: true$/m, '  rootWhenRemapped: false'))
  const rgw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, `unix://${remap.socket}`, policyDir)
  const sgw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, `unix://${remap.socket}`, strict)
  t.teardown(async () => { await rgw.close(); await sgw.close() })
  attempts++
  t.equal(remapsUsers((await request(remap.socket, 'GET', '/info')).json), true, 'the engine\'s /info says name=userns')

  const viaGateway = (g: TestGateway) => async (m: string, p: string, b?: object, token = TOKEN): Promise<RawReply> => await request(g.socket, m, p, b, { token })
  /** Create and start through `g`; the stored user and the host ids of its process. */
  const runOn = async (g: TestGateway, body: object): Promise<{ status: number, text: string, id?: string, user?: string, ids?: ReturnType<typeof processIds> }> => {
    attempts++
    const r = await viaGateway(g)('POST', `/v1.41/containers/create?name=${fresh('remap')}`, { Image: remap.image, Cmd: ['sleep', '600'], ...body })
    if (r.status !== 201) return { status: r.status, text: r.text }
    await request(remap.socket, 'POST', `/containers/${r.json.Id as string}/start`)
    const doc = (await request(remap.socket, 'GET', `/containers/${r.json.Id as string}/json`)).json
    return { status: r.status, text: r.text, id: r.json.Id, user: doc.Config.User, ids: processIds(doc.State.Pid) }
  }

  const root = await runOn(rgw, { User: '0:0' })
  t.equal(root.status, 201, `rootWhenRemapped: a tenant's User 0:0 is let through (${root.text.trim()})`)
  t.same(root.ids, { uid: String(REMAP_BASE), gid: String(REMAP_BASE), groups: String(REMAP_BASE) }, 'root in the container is host uid and gid 300000')
  const unset = await runOn(rgw, {})
  t.equal(unset.user, '', 'no user is left to the image\'s')
  t.equal(unset.ids?.uid, String(REMAP_BASE), 'which is root in the container, host uid 300000')
  attempts++
  const e = await viaGateway(rgw)('POST', `/v1.41/containers/${unset.id ?? 'none'}/exec`, { Cmd: ['id'], User: 'root' })
  t.equal(e.status, 201, `an exec as root too (${e.text.trim()})`)
  if (e.status === 201) t.equal((await request(remap.socket, 'GET', `/exec/${e.json.Id as string}/json`)).json.ProcessConfig?.user, 'root', 'stored as asked')
  attempts++
  const e2 = await viaGateway(sgw)('POST', `/v1.41/containers/${unset.id ?? 'none'}/exec`, { Cmd: ['id'], User: 'root' })
  t.equal(e2.status, 403, 'rootWhenRemapped false: an exec as root is refused')

  const refused = await runOn(sgw, { User: '0:0' })
  t.equal(refused.status, 403, 'rootWhenRemapped false: refused on the remapping engine too')
  t.match(refused.text, ruleOf('tenant-user'))
  const mapped = await runOn(sgw, {})
  t.equal(mapped.user, '65534:65534', 'and no user is the tenant\'s (users.default)')
  t.equal(mapped.ids?.uid, String(REMAP_BASE + 65534), 'host uid 300000 + 65534')
})
