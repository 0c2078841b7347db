/**
 * Read-only roles do not read secrets (issue 13, item 5): the environment values in the
 * answers that carry them (container, image, service and task inspects and lists) are
 * redacted for the roles tenancy.yaml's `redact.env` names, readonly and auditor by
 * default, whatever tenancy decided for them (auditor is unscoped). Keys are kept.
 * Admins and the tenant's own `tenant` role read them intact. Against the real engines:
 * the plain one for containers and images, the swarm one for services and tasks; raw
 * HTTP, the docker CLIs (28 and 20.10) and docker-py.
 */
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { CLI20, CLI28, engine, policiesWith, type RawReply, request, run, servicesWithoutNoNewPrivileges, startTestGateway, swarmEngine, type TestGateway, tokensFor } from './helpers/gateway'
import { compileTenancy, DEFAULT_TENANCY } from '../src/policy/tenancy'
import { ENV_ANSWERS, withEnvRedaction } from '../src/gateway/redact'
import { resolveTarget } from '../src/api/catalog/route'

const SECRET = randomBytes(32).toString('hex')
const RUN = randomBytes(3).toString('hex')
const TA = `redact-${RUN}`
const IMAGE = engine().image
const SYSTEM_PYTHON = '/usr/bin/python3'
// Values that must never reach a redacted reader, nor the audit trail.
const DB_PASSWORD = `pw-${RUN}-hunter2`
const PLAIN = `plain-${RUN}-value`
const IMG_TOKEN = `imgtok-${RUN}-xyz`
const SVC_KEY = `svckey-${RUN}-abc`
const SVC_KEY2 = `svckey2-${RUN}-def`
const BUILD_TOKEN = `buildtok-${RUN}-ghi`
const BUILD_ENV = `buildenv-${RUN}-jkl`
const SECRETS = [DB_PASSWORD, PLAIN, IMG_TOKEN, SVC_KEY, SVC_KEY2, BUILD_TOKEN, BUILD_ENV]

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pcr-'))
t.teardown(() => fs.rmSync(tmp, { recursive: true, force: true }))

type Who = 'admin' | 'tenant' | 'ro' | 'auditor'
const CLAIMS: Record<Who, object> = {
  admin: { sub: 'root-op', roles: ['admin'] },
  tenant: { sub: 'alice', tenant: TA, roles: ['tenant'] },
  ro: { sub: 'rita', tenant: TA, roles: ['readonly'] },
  auditor: { sub: 'audrey', roles: ['auditor'] },
}
const { token: TOKEN, config: CONFIG } = tokensFor(CLAIMS, SECRET, tmp)

const REDACTED_ONES: Who[] = ['ro', 'auditor']
const INTACT_ONES: Who[] = ['admin', 'tenant']

const leaks = (text: string): string[] => SECRETS.filter((s) => text.includes(s))
const envOf = (list: unknown): Record<string, string> => Object.fromEntries((list as string[] ?? []).map((e) => [e.slice(0, e.indexOf('=')), e.slice(e.indexOf('=') + 1)]))

let gw: TestGateway
const as = async (g: TestGateway, who: Who, method: string, target: string, body?: object): Promise<RawReply> => await request(g.socket, method, target, body, { token: TOKEN[who] })
const cli = async (g: TestGateway, who: Who, args: readonly string[], bin = CLI28) => await run(bin, args, { host: g.dockerHost, env: { DOCKER_CONFIG: CONFIG[who] } })
const direct = async (method: string, target: string, body?: object): Promise<RawReply> => await request(engine().socket, method, target, body)
const box = `redact-${RUN}-box`
const repo = `${TA}/redact`
let boxId = ''

t.before(async () => {
  gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`)
  const r = await as(gw, 'tenant', 'POST', `/v1.41/containers/create?name=${box}`, { Image: IMAGE, Cmd: ['sleep', '600'], Env: [`DB_PASSWORD=${DB_PASSWORD}`, `PLAIN=${PLAIN}`, 'EMPTY='] })
  if (r.status !== 201) throw new Error(`create: ${r.status} ${r.text}`)
  boxId = r.json.Id
  // An image that carries a build-time secret (Config.Env) and its container's (ContainerConfig.Env).
  const c = await as(gw, 'tenant', 'POST', `/v1.41/commit?container=${box}&repo=${repo}&tag=1&changes=${encodeURIComponent(`ENV IMG_TOKEN=${IMG_TOKEN}`)}`)
  if (c.status !== 201) throw new Error(`commit: ${c.status} ${c.text}`)
})
t.teardown(async () => {
  await direct('DELETE', `/containers/${boxId}?force=1`)
  await direct('DELETE', `/images/${repo}:1?force=1`)
  await gw?.close()
})

t.test('the engine itself answers with the values (what the gateway withholds)', async (t) => {
  const r = await direct('GET', `/containers/${boxId}/json`)
  t.equal(envOf(r.json.Config.Env).DB_PASSWORD, DB_PASSWORD)
  const i = await direct('GET', `/images/${repo}:1/json`)
  t.equal(envOf(i.json.Config.Env).IMG_TOKEN, IMG_TOKEN)
})

t.test('container inspect over HTTP: readonly and auditor get keys without values; admin and tenant get values', async (t) => {
  for (const who of REDACTED_ONES) {
    for (const target of [`/v1.41/containers/${box}/json`, `/containers/${boxId}/json?size=1`, `/v1.24/containers/${box}/json`]) {
      const r = await as(gw, who, 'GET', target)
      t.equal(r.status, 200, `${who} ${target}: ${r.text.slice(0, 200)}`)
      t.same(leaks(r.text), [], `${who} ${target}: no value leaks`)
      const env = envOf(r.json?.Config?.Env)
      t.same(Object.keys(env).sort(), ['DB_PASSWORD', 'EMPTY', 'PLAIN'], `${who}: every key kept`)
      t.ok(Object.values(env).every((v) => v === '[REDACTED]'), `${who}: every value redacted (all keys): ${JSON.stringify(env)}`)
      t.equal(r.json.Id, boxId, 'the rest of the answer is the engine\'s')
      t.equal(r.json.Name, `/${box}`)
    }
  }
  for (const who of INTACT_ONES) {
    const r = await as(gw, who, 'GET', `/v1.41/containers/${box}/json`)
    t.equal(r.status, 200, `${who}: ${r.text.slice(0, 200)}`)
    t.same(envOf(r.json.Config.Env), { ...envOf(r.json.Config.Env), DB_PASSWORD, PLAIN, EMPTY: '' }, `${who} reads the values`)
  }
})

t.test('image inspect: Config.Env and ContainerConfig.Env redacted for readonly and auditor', async (t) => {
  for (const who of REDACTED_ONES) {
    const r = await as(gw, who, 'GET', `/v1.41/images/${repo}:1/json`)
    t.equal(r.status, 200, `${who}: ${r.text.slice(0, 200)}`)
    t.same(leaks(r.text), [], `${who}: no value leaks`)
    t.equal(envOf(r.json.Config.Env).IMG_TOKEN, '[REDACTED]')
    t.equal(envOf(r.json.Config.Env).DB_PASSWORD, '[REDACTED]', 'the committed container\'s env, in the image config')
  }
  for (const who of INTACT_ONES) {
    const r = await as(gw, who, 'GET', `/v1.41/images/${repo}:1/json`)
    t.equal(envOf(r.json.Config.Env).IMG_TOKEN, IMG_TOKEN, `${who} reads the image's values`)
  }
})

t.test('a built image\'s history and ContainerConfig: ENV values and build arguments redacted', async (t) => {
  const dir = path.join(tmp, 'build')
  fs.mkdirSync(dir)
  fs.writeFileSync(path.join(dir, 'Dockerfile'), `FROM ${IMAGE}\nUSER 65534:65534\nARG BUILD_TOKEN\nENV BUILD_ENV=${BUILD_ENV} OTHER="two words"\nRUN echo built\n`)
  const built = `${TA}/built:1`
  t.teardown(async () => { await direct('DELETE', `/images/${built}?force=1`) })
  const b = await run(CLI28, ['build', '-q', '-t', built, '--build-arg', `BUILD_TOKEN=${BUILD_TOKEN}`, dir], { host: gw.dockerHost, env: { DOCKER_CONFIG: CONFIG.tenant, DOCKER_BUILDKIT: '0' } })
  t.equal(b.code, 0, `the tenant builds with the classic builder: ${b.stderr}`)
  const engineHistory = (await direct('GET', `/images/${built}/history`)).text
  t.match(engineHistory, BUILD_TOKEN, 'the engine records the build argument\'s value in the history')
  for (const who of REDACTED_ONES) {
    const h = await as(gw, who, 'GET', `/v1.41/images/${built}/history`)
    t.equal(h.status, 200, `${who} history: ${h.text.slice(0, 200)}`)
    t.same(leaks(h.text), [], `${who} image history: no value leaks`)
    const createdBy = (h.json as any[]).map((x) => x.CreatedBy as string)
    t.ok(createdBy.includes('|1 BUILD_TOKEN=[REDACTED] /bin/sh -c echo built'), `${who}: the build argument's name kept: ${JSON.stringify(createdBy)}`)
    t.ok(createdBy.includes('/bin/sh -c #(nop)  ENV BUILD_ENV=[REDACTED] OTHER=[REDACTED]'), `${who}: ENV names kept`)
    const i = await as(gw, who, 'GET', `/v1.41/images/${built}/json`)
    t.same(leaks(i.text), [], `${who} image inspect: no value leaks`)
    for (const bin of [CLI28, CLI20]) {
      const c = await cli(gw, who, ['history', '--no-trunc', built], bin)
      t.equal(c.code, 0, `${who} ${bin} docker history: ${c.stderr}`)
      t.same(leaks(c.stdout.toString()), [], `${who} ${bin} docker history: no value leaks`)
      t.match(c.stdout.toString(), /BUILD_TOKEN=\[REDACTED\]/)
    }
  }
  const own = await cli(gw, 'tenant', ['history', '--no-trunc', built])
  t.match(own.stdout.toString(), BUILD_TOKEN, 'the tenant\'s own history shows the value')
  // Built on the engine directly, the last instruction a RUN with a build argument: its
  // ContainerConfig.Cmd is the array form (a tenant's build ends with the owner labels).
  const plain = `redact-${RUN}-plain:1`
  t.teardown(async () => { await direct('DELETE', `/images/${plain}?force=1`) })
  const p = await run(CLI28, ['build', '-q', '-t', plain, '--build-arg', `BUILD_TOKEN=${BUILD_TOKEN}`, dir], { host: engine().dockerHost, env: { DOCKER_BUILDKIT: '0' } })
  t.equal(p.code, 0, p.stderr)
  t.same((await direct('GET', `/images/${plain}/json`)).json.ContainerConfig.Cmd.slice(0, 2), ['|1', `BUILD_TOKEN=${BUILD_TOKEN}`], 'the engine records the value in ContainerConfig.Cmd')
  const i = await as(gw, 'auditor', 'GET', `/v1.41/images/${plain}/json`)
  t.same(leaks(i.text), [], 'auditor image inspect: no value leaks')
  t.same(i.json.ContainerConfig.Cmd, ['|1', 'BUILD_TOKEN=[REDACTED]', '/bin/sh', '-c', 'echo built'])
  t.same(i.json.Config.Env.slice(-2), ['BUILD_ENV=[REDACTED]', 'OTHER=[REDACTED]'])
})

t.test('the docker CLIs and docker-py: inspect redacted, ls works', async (t) => {
  for (const who of REDACTED_ONES) {
    for (const bin of [CLI28, CLI20]) {
      const r = await cli(gw, who, ['inspect', box], bin)
      t.equal(r.code, 0, `${who} ${bin} docker inspect: ${r.stderr}`)
      t.same(leaks(r.stdout.toString()), [], `${who} ${bin}: no value leaks`)
      const doc = JSON.parse(r.stdout.toString())[0]
      t.equal(envOf(doc.Config.Env).DB_PASSWORD, '[REDACTED]', `${who} ${bin}: the key is shown, its value is not`)
      const f = await cli(gw, who, ['container', 'inspect', '--format', '{{json .Config.Env}}', box], bin)
      t.equal(f.code, 0, f.stderr)
      t.match(f.stdout.toString(), /"DB_PASSWORD=\[REDACTED\]"/)
      const img = await cli(gw, who, ['image', 'inspect', `${repo}:1`], bin)
      t.equal(img.code, 0, img.stderr)
      t.same(leaks(img.stdout.toString()), [], `${who} ${bin} image inspect: no value leaks`)
    }
    const ls = await cli(gw, who, ['container', 'ls', '-a', '--no-trunc', '--size', '--format', '{{json .}}'])
    t.equal(ls.code, 0, `${who} docker container ls: ${ls.stderr}`)
    t.match(ls.stdout.toString(), box, `${who} sees the container listed`)
    t.same(leaks(ls.stdout.toString()), [])
    const py = await run(SYSTEM_PYTHON, ['-c', `import docker, json; print(json.dumps(docker.from_env().containers.get(${JSON.stringify(box)}).attrs['Config']['Env']))`], { host: gw.dockerHost, env: { DOCKER_CONFIG: CONFIG[who] } })
    t.equal(py.code, 0, py.stderr)
    t.equal(envOf(JSON.parse(py.stdout.toString())).DB_PASSWORD, '[REDACTED]', `${who} docker-py`)
  }
  const own = await cli(gw, 'tenant', ['inspect', '--format', '{{json .Config.Env}}', box])
  t.match(own.stdout.toString(), DB_PASSWORD, 'the tenant\'s own docker inspect shows the value')
  const admin = await cli(gw, 'admin', ['inspect', '--format', '{{json .Config.Env}}', box])
  t.match(admin.stdout.toString(), DB_PASSWORD, 'the admin\'s docker inspect shows the value')
})

t.test('container list (all versions, ?size, ?all) carries no environment values', async (t) => {
  for (const target of ['/v1.41/containers/json?all=1&size=1', '/v1.24/containers/json?all=1', '/containers/json?all=1']) {
    for (const who of ['ro', 'auditor', 'admin'] as Who[]) {
      const r = await as(gw, who, 'GET', target)
      t.equal(r.status, 200, `${who} ${target}`)
      t.same(leaks(r.text), [], `${who} ${target}`)
    }
  }
})

t.test('the audit trail of these requests holds no value', async (t) => {
  const text = fs.readFileSync(path.join(gw.dir, 'audit.jsonl'), 'utf8')
  t.match(text, /"ContainerInspect"/, 'the inspects are recorded')
  t.same(leaks(text), [], 'no secret value in any audit record (the create and commit included)')
})

t.test('key patterns: only matching keys are redacted; sensitive: the audit trail\'s names', async (t) => {
  const dir = policiesWith((text) => text.replace(/^ {4}- \{ roles: \[readonly, auditor\], keys: all \}$/m, '    - { roles: [readonly], keys: ["*_password", "IMG_*"] }\n    - { roles: [auditor], keys: sensitive }'))
  const pgw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, undefined, dir)
  t.teardown(async () => await pgw.close())
  for (const who of REDACTED_ONES) {
    const r = await as(pgw, who, 'GET', `/v1.41/containers/${box}/json`)
    t.equal(r.status, 200, r.text)
    const env = envOf(r.json.Config.Env)
    t.equal(env.DB_PASSWORD, '[REDACTED]', `${who}: DB_PASSWORD redacted`)
    t.equal(env.PLAIN, PLAIN, `${who}: PLAIN kept`)
    t.equal(env.EMPTY, '', `${who}: EMPTY kept`)
    const i = await as(pgw, who, 'GET', `/v1.41/images/${repo}:1/json`)
    t.equal(envOf(i.json.Config.Env).IMG_TOKEN, '[REDACTED]', `${who}: IMG_TOKEN redacted (${who === 'ro' ? 'IMG_*' : 'a token'})`)
  }
  const d = await cli(pgw, 'ro', ['inspect', '--format', '{{json .Config.Env}}', box])
  t.match(d.stdout.toString(), /"DB_PASSWORD=\[REDACTED\]"/)
  t.match(d.stdout.toString(), PLAIN)
})

t.test('redact.env is checked when the policy loads', async (t) => {
  const file = path.join(tmp, 'tenancy-bad.yaml')
  fs.writeFileSync(file, 'redact:\n  env:\n    - { roles: readonly, keys: some }\n    - { roles: [x], keys: [""], extra: 1 }\n  other: 1\n')
  const problems: string[] = []
  compileTenancy(file, 'tenancy.yaml', problems)
  t.match(problems.join('\n'), /redact\.other: unknown key/)
  t.match(problems.join('\n'), /redact\.env\[0\]\.roles: expected a list/)
  t.match(problems.join('\n'), /redact\.env\[0\]\.keys: expected all, sensitive or a list/)
  t.match(problems.join('\n'), /redact\.env\[1\]\.extra: unknown key/)
  t.match(problems.join('\n'), /redact\.env\[1\]\.keys: expected a list of non-empty strings/)
  fs.writeFileSync(file, 'redact:\n  env: []\n')
  const none: string[] = []
  t.same(compileTenancy(file, 'tenancy.yaml', none).redact.env, [], 'env: [] redacts nothing')
  t.same(none, [])
  t.same(DEFAULT_TENANCY.redact.env, [{ roles: ['readonly', 'auditor'], keys: 'all' }], 'without a redact section: readonly and auditor, every key')
})

t.test('Podman\'s own inspect (/libpod/containers/{id}/json) is filtered like Docker\'s', async (t) => {
  // The plain engine has no libpod API (test/podman.test.ts runs Podman); the filter
  // is chosen by operation id, as routed, and applied to Podman's answer shape.
  const target = resolveTarget('GET', '/v4.3.1/libpod/containers/x/json', { minVersion: '1.24', maxVersion: '1.56' })
  t.equal(target.operation.id, 'ContainerInspectLibpod')
  t.ok(ENV_ANSWERS.has('ContainerInspectLibpod') && ENV_ANSWERS.has('ImageInspectLibpod'))
  const identity = { subject: 'rita', tenant: TA, roles: ['readonly'], method: 'jwt' } as const
  const filter = withEnvRedaction(identity as any, target.operation, DEFAULT_TENANCY, undefined)
  t.equal(filter?.kind, 'json')
  const doc = { Id: 'x', Config: { Env: [`DB_PASSWORD=${DB_PASSWORD}`, 'container=podman'], Cmd: ['sleep'] } }
  const out = await (filter as any).transform(doc)
  t.same(out.Config.Env, ['DB_PASSWORD=[REDACTED]', 'container=[REDACTED]'])
  t.same(doc.Config.Env[0], `DB_PASSWORD=${DB_PASSWORD}`, 'the engine\'s document is not changed in place')
  t.equal(withEnvRedaction({ ...identity, roles: ['tenant'] } as any, target.operation, DEFAULT_TENANCY, undefined), undefined, 'no filter for the tenant role')
})

t.test('swarm: service inspect and list (Spec and PreviousSpec), task list and inspect', async (t) => {
  // Tenants' services on the API 1.41 swarm engine: allowed without no-new-privileges (tenancy.yaml services).
  const sgw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, `unix://${swarmEngine().socket}`, policiesWith(servicesWithoutNoNewPrivileges))
  const sdirect = async (method: string, target: string, body?: object): Promise<RawReply> => await request(swarmEngine().socket, method, target, body)
  const name = `redact-${RUN}-svc`
  let serviceId = ''
  let secretId = ''
  t.teardown(async () => {
    if (serviceId) await sdirect('DELETE', `/services/${serviceId}`)
    if (secretId) {
      // The secret is in use until the service's tasks are gone.
      for (let i = 0; i < 50 && (await sdirect('DELETE', `/secrets/${secretId}`)).status === 400; i++) await new Promise((resolve) => setTimeout(resolve, 200))
    }
    await sgw.close()
  })
  const sec = await as(sgw, 'tenant', 'POST', '/v1.41/secrets/create', { Name: `${name}-db`, Data: Buffer.from(DB_PASSWORD).toString('base64') })
  t.equal(sec.status, 201, sec.text)
  secretId = sec.json.ID
  const created = await as(sgw, 'tenant', 'POST', '/v1.41/services/create', {
    Name: name,
    TaskTemplate: {
      ContainerSpec: {
        Image: swarmEngine().image,
        Command: ['sleep', '600'],
        Env: [`SVC_KEY=${SVC_KEY}`, 'MODE=test'],
        Secrets: [{ SecretID: secretId, SecretName: `${name}-db`, File: { Name: 'db', UID: '0', GID: '0', Mode: 292 } }],
      },
    },
    Mode: { Replicated: { Replicas: 1 } },
  })
  t.equal(created.status, 201, created.text)
  serviceId = created.json.ID
  // An update: the first spec becomes PreviousSpec.
  const before = await as(sgw, 'tenant', 'GET', `/v1.41/services/${serviceId}`)
  const spec = before.json.Spec
  spec.TaskTemplate.ContainerSpec.Env = [`SVC_KEY=${SVC_KEY2}`, 'MODE=test']
  const upd = await as(sgw, 'tenant', 'POST', `/v1.41/services/${serviceId}/update?version=${before.json.Version.Index as number}`, spec)
  t.equal(upd.status, 200, upd.text)
  for (let i = 0; i < 100 && ((await sdirect('GET', `/tasks?filters=${encodeURIComponent(JSON.stringify({ service: [serviceId] }))}`)).json ?? []).length === 0; i++) await new Promise((resolve) => setTimeout(resolve, 100))

  const engineView = await sdirect('GET', `/services/${serviceId}`)
  t.equal(envOf(engineView.json.PreviousSpec?.TaskTemplate?.ContainerSpec?.Env).SVC_KEY, SVC_KEY, 'the engine keeps the first spec as PreviousSpec')

  for (const who of REDACTED_ONES) {
    const i = await as(sgw, who, 'GET', `/v1.41/services/${name}`)
    t.equal(i.status, 200, `${who} service inspect: ${i.text.slice(0, 200)}`)
    t.same(leaks(i.text), [], `${who} service inspect: no value leaks`)
    t.same(i.json.Spec.TaskTemplate.ContainerSpec.Env, ['SVC_KEY=[REDACTED]', 'MODE=[REDACTED]'])
    t.same(i.json.PreviousSpec.TaskTemplate.ContainerSpec.Env, ['SVC_KEY=[REDACTED]', 'MODE=[REDACTED]'])
    t.same(i.json.Spec.TaskTemplate.ContainerSpec.Secrets, [{ SecretID: secretId, SecretName: `${name}-db`, File: { Name: 'db', UID: '0', GID: '0', Mode: 292 } }], 'secret references kept')
    const l = await as(sgw, who, 'GET', '/v1.41/services')
    t.equal(l.status, 200)
    t.same(leaks(l.text), [], `${who} service list: no value leaks`)
    const mine = (l.json as any[]).find((s) => s.ID === serviceId)
    t.same(mine?.Spec.TaskTemplate.ContainerSpec.Env, ['SVC_KEY=[REDACTED]', 'MODE=[REDACTED]'], `${who} sees the service listed, redacted`)
    const tl = await as(sgw, who, 'GET', `/v1.41/tasks?filters=${encodeURIComponent(JSON.stringify({ service: [name] }))}`)
    t.equal(tl.status, 200, tl.text.slice(0, 200))
    t.ok((tl.json as any[]).length > 0, `${who} sees the tasks`)
    t.same(leaks(tl.text), [], `${who} task list: no value leaks`)
    for (const task of tl.json as any[]) {
      t.equal(envOf(task.Spec.ContainerSpec.Env).SVC_KEY, '[REDACTED]')
      const ti = await as(sgw, who, 'GET', `/v1.41/tasks/${task.ID as string}`)
      t.equal(ti.status, 200)
      t.same(leaks(ti.text), [], `${who} task inspect: no value leaks`)
    }
    const c = await cli(sgw, who, ['service', 'inspect', name])
    t.equal(c.code, 0, `${who} docker service inspect: ${c.stderr}`)
    t.same(leaks(c.stdout.toString()), [])
    t.match(c.stdout.toString(), /"SVC_KEY=\[REDACTED\]"/)
    const ls = await cli(sgw, who, ['service', 'ls'])
    t.equal(ls.code, 0, `${who} docker service ls: ${ls.stderr}`)
    t.match(ls.stdout.toString(), name)
    const ps = await cli(sgw, who, ['service', 'ps', '--no-trunc', name])
    t.equal(ps.code, 0, `${who} docker service ps: ${ps.stderr}`)
  }
  // The swarm's join tokens are credentials: a manager token joins a node as a manager.
  const tokens = (await sdirect('GET', '/swarm')).json.JoinTokens
  t.match(tokens.Manager, /^SWMTKN-/, 'the engine holds join tokens')
  for (const who of REDACTED_ONES) {
    const sw = await as(sgw, who, 'GET', '/v1.41/swarm')
    t.equal(sw.status, 200, `${who} swarm inspect: ${sw.text.slice(0, 200)}`)
    t.same(sw.json.JoinTokens, { Worker: '', Manager: '' }, `${who} gets no join token`)
    t.notOk(sw.text.includes(tokens.Manager) || sw.text.includes(tokens.Worker), `${who}: neither token anywhere in the answer`)
    t.equal(sw.json.ID, (await sdirect('GET', '/swarm')).json.ID, `${who} still sees the swarm`)
  }
  t.same((await as(sgw, 'admin', 'GET', '/v1.41/swarm')).json.JoinTokens, tokens, 'admin reads them')
  for (const who of INTACT_ONES) {
    const i = await as(sgw, who, 'GET', `/v1.41/services/${name}`)
    t.equal(envOf(i.json.Spec.TaskTemplate.ContainerSpec.Env).SVC_KEY, SVC_KEY2, `${who} reads the service's values`)
    t.equal(envOf(i.json.PreviousSpec.TaskTemplate.ContainerSpec.Env).SVC_KEY, SVC_KEY, `${who} reads the previous spec's values`)
  }
  t.same(leaks(fs.readFileSync(path.join(sgw.dir, 'audit.jsonl'), 'utf8')), [], 'no secret value in the swarm gateway\'s audit trail')
})
