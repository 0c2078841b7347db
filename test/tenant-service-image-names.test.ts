/**
 * Per-tenant image names (tenancy.yaml `names: private`) for services, on the run's
 * swarm-mode engine: two tenants each build their own `myapp` (docker CLI 28) and create
 * a service of image `myapp`. The engine stores each service with the tenant's engine
 * name, each task runs that tenant's own build (its output says which), and the tenant
 * reads the service and its tasks back with the plain name it gave.
 */
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import jwt from 'jsonwebtoken'
import t from 'tap'
import { CLI28, policiesWith, request, run, servicesWithoutNoNewPrivileges, startTestGateway, swarmEngine, tokensFor, type RawReply, type TestGateway } from './helpers/gateway'

const SECRET = randomBytes(32).toString('hex')
const RUN = randomBytes(3).toString('hex')
const IMAGE = swarmEngine().image
const HOST = 'portcullis.invalid'
type Who = 'a' | 'b'
const TENANT: Record<Who, string> = { a: `svcimg-a-${RUN}`, b: `svcimg-b-${RUN}` }
const CLAIMS: Record<Who, object> = { a: { sub: 'ann', tenant: TENANT.a, roles: ['tenant'] }, b: { sub: 'bo', tenant: TENANT.b, roles: ['tenant'] } }
const TOKEN: Record<Who, string> = {
  a: jwt.sign({ ...CLAIMS.a, exp: Math.floor(Date.now() / 1000) + 3600 }, SECRET, { algorithm: 'HS256' }),
  b: jwt.sign({ ...CLAIMS.b, exp: Math.floor(Date.now() / 1000) + 3600 }, SECRET, { algorithm: 'HS256' }),
}
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pcsi-'))
const { config: CONFIG } = tokensFor(CLAIMS, SECRET, tmp)

let gw: TestGateway
const services: string[] = []
const as = async (who: Who, method: string, target: string, body?: object): Promise<RawReply> => await request(gw.socket, method, target, body, { token: TOKEN[who] })
const direct = async (method: string, target: string): Promise<RawReply> => await request(swarmEngine().socket, method, target)
const cli = async (who: Who, args: readonly string[]): Promise<{ code: number, out: string, err: string }> => {
  const r = await run(CLI28, args, { host: gw.dockerHost, env: { DOCKER_CONFIG: CONFIG[who] }, timeoutMs: 180_000 })
  return { code: r.code ?? -1, out: r.stdout.toString(), err: r.stderr.toString() }
}
const sleep = async (ms: number): Promise<void> => await new Promise((resolve) => setTimeout(resolve, ms))

t.before(async () => {
  const policies = policiesWith((text) => servicesWithoutNoNewPrivileges(text.replace(/^names: engine$/m, 'names: private')))
  gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, `unix://${swarmEngine().socket}`, policies)
})

t.teardown(async () => {
  for (const id of services) await direct('DELETE', `/services/${id}`)
  // The tasks' containers go a moment after their service; then the images can.
  await sleep(3000)
  for (const who of ['a', 'b'] as const) {
    const filters = encodeURIComponent(JSON.stringify({ label: [`io.portcullis.tenant=${TENANT[who]}`] }))
    for (const c of (await direct('GET', `/containers/json?all=1&filters=${filters}`)).json ?? []) await direct('DELETE', `/containers/${c.Id as string}?force=1`)
    for (const i of (await direct('GET', `/images/json?filters=${filters}`)).json ?? []) await direct('DELETE', `/images/${i.Id as string}?force=1`)
  }
  await gw?.close()
  fs.rmSync(tmp, { recursive: true, force: true })
})

/** The running task of service `id` (the engine's view), waiting for it. */
async function runningTask (id: string): Promise<any> {
  const filters = encodeURIComponent(JSON.stringify({ service: [id] }))
  const deadline = Date.now() + 60_000
  let tasks: any[] = []
  while (Date.now() < deadline) {
    tasks = (await direct('GET', `/tasks?filters=${filters}`)).json ?? []
    const running = tasks.find((task) => task.Status?.State === 'running')
    if (running !== undefined) return running
    await sleep(300)
  }
  return { notRunning: tasks.map((task) => task.Status) }
}

t.test('two tenants\' services of image myapp each run the tenant\'s own build', async (t) => {
  for (const who of ['a', 'b'] as const) {
    const dir = path.join(tmp, who)
    fs.mkdirSync(dir)
    fs.writeFileSync(path.join(dir, 'Dockerfile'), `FROM ${IMAGE}\nENV WHO=${who}\n`)
    const built = await cli(who, ['build', '-q', '-t', 'myapp', dir])
    t.equal(built.code, 0, `${who}: docker build -t myapp`, { err: built.err })
  }
  const ids: Partial<Record<Who, string>> = {}
  for (const who of ['a', 'b'] as const) {
    const created = await as(who, 'POST', '/v1.41/services/create', {
      Name: `svcimg-${RUN}-${who}`,
      TaskTemplate: { ContainerSpec: { Image: 'myapp', Command: ['sh', '-c', 'echo "who=$WHO"; exec sleep 600'], StopGracePeriod: 1e9 } },
      Mode: { Replicated: { Replicas: 1 } },
    })
    t.equal(created.status, 201, `${who}: service create with image myapp`, { body: created.text })
    if (created.status !== 201) continue
    ids[who] = created.json.ID
    services.push(created.json.ID)
  }
  for (const who of ['a', 'b'] as const) {
    const id = ids[who]
    if (id === undefined) continue
    const stored = (await direct('GET', `/services/${id}`)).json
    t.equal(stored?.Spec?.TaskTemplate?.ContainerSpec?.Image, `${HOST}/${TENANT[who]}/myapp`, `${who}: the engine stores the tenant's engine name`)
    const task = await runningTask(id)
    t.ok(task.Status?.ContainerStatus?.ContainerID, `${who}: the task runs`, { task: task.notRunning })
    const cid = task.Status?.ContainerStatus?.ContainerID
    if (cid === undefined) continue
    const container = (await direct('GET', `/containers/${cid as string}/json`)).json
    t.ok((container?.Config?.Env ?? []).includes(`WHO=${who}`), `${who}: the task's container is the tenant's own build`)
    let logs = ''
    for (const deadline = Date.now() + 20_000; !logs.includes('who=') && Date.now() < deadline; await sleep(300)) {
      logs = (await direct('GET', `/containers/${cid as string}/logs?stdout=1`)).text
    }
    t.match(logs, `who=${who}`, `${who}: its output says so`)

    // Read back as the tenant: the plain name it gave, in the service and its tasks.
    const seen = await as(who, 'GET', `/v1.41/services/${id}`)
    t.equal(seen.json?.Spec?.TaskTemplate?.ContainerSpec?.Image, 'myapp', `${who}: service inspect shows myapp`)
    const listed = (await as(who, 'GET', '/v1.41/services')).json ?? []
    t.same(listed.map((s: any) => s?.Spec?.TaskTemplate?.ContainerSpec?.Image), ['myapp'], `${who}: service list shows its one service, as myapp`)
    const tasks = (await as(who, 'GET', `/v1.41/tasks?filters=${encodeURIComponent(JSON.stringify({ service: [id] }))}`)).json ?? []
    t.ok(tasks.length > 0 && tasks.every((task: any) => task?.Spec?.ContainerSpec?.Image === 'myapp'), `${who}: its tasks show myapp`, { images: tasks.map((task: any) => task?.Spec?.ContainerSpec?.Image) })
    const one = await as(who, 'GET', `/v1.41/tasks/${task.ID as string}`)
    t.equal(one.json?.Spec?.ContainerSpec?.Image, 'myapp', `${who}: task inspect shows myapp`)
    const ls = await cli(who, ['service', 'ls', '--format', '{{.Image}}'])
    t.ok(['myapp', 'myapp:latest'].includes(ls.out.trim()), `${who}: docker service ls shows myapp`, { out: ls.out, err: ls.err })
  }

  // An update sent back as the tenant read it keeps the tenant's image (the CLI's way).
  const id = ids.a
  if (id !== undefined) {
    const seen = (await as('a', 'GET', `/v1.41/services/${id}`)).json
    const updated = await as('a', 'POST', `/v1.41/services/${id}/update?version=${seen.Version.Index as number}`, { ...seen.Spec, Labels: { step: 'updated' } })
    t.equal(updated.status, 200, 'a: service update with the spec as read', { body: updated.text })
    const stored = (await direct('GET', `/services/${id}`)).json
    t.equal(stored?.Spec?.TaskTemplate?.ContainerSpec?.Image, `${HOST}/${TENANT.a}/myapp`, 'a: the engine still runs the tenant\'s own image')
    t.equal(stored?.PreviousSpec?.TaskTemplate?.ContainerSpec?.Image, `${HOST}/${TENANT.a}/myapp`, 'and its previous spec too')
    const again = (await as('a', 'GET', `/v1.41/services/${id}`)).json
    t.equal(again?.PreviousSpec?.TaskTemplate?.ContainerSpec?.Image, 'myapp', 'a: the previous spec reads myapp as well')
  }
})

t.test('another tenant\'s engine name is not an image for a service', async (t) => {
  const r = await as('b', 'POST', '/v1.41/services/create', {
    Name: `svcimg-${RUN}-steal`,
    TaskTemplate: { ContainerSpec: { Image: `${HOST}/${TENANT.a}/myapp`, Command: ['true'] } },
    Mode: { Replicated: { Replicas: 0 } },
  })
  if (r.status === 201) services.push(r.json.ID)
  t.not(r.status, 201, 'b cannot run a\'s image by its engine name', { body: r.text })
})
