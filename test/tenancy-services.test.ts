/**
 * Services are containers too: on the run's swarm-mode engine, as a tenant with a quota
 * of 2 containers, the engine's stored spec checked.
 * - a service without limits gets the containers' safe defaults (Pids, memory), and
 *   its task containers the owner labels;
 * - a negative Pids limit (none at all) is refused, as a container's is;
 * - quotas count the tasks each mode can run at once: replicated (replicas), global and
 *   global jobs (one per node), replicated jobs (MaxConcurrent, at most TotalCompletions).
 */
import { randomBytes } from 'node:crypto'
import jwt from 'jsonwebtoken'
import t from 'tap'
import { startTestGateway, swarmEngine, type TestGateway, policiesWithQuota, request, servicesWithoutNoNewPrivileges, type RawReply } from './helpers/gateway'

const SECRET = randomBytes(32).toString('hex')
const RUN = randomBytes(3).toString('hex')
const TENANT = `svc-${RUN}`
const IMAGE = swarmEngine().image
const TOKEN = jwt.sign({ sub: 'sam', tenant: TENANT, roles: ['tenant'], exp: Math.floor(Date.now() / 1000) + 3600 }, SECRET, { algorithm: 'HS256' })
// (and tenants' services on the API 1.41 swarm engine allowed without no-new-privileges)
const policyDir = policiesWithQuota(TENANT, '{ containers: 2, memory: 4GiB }', servicesWithoutNoNewPrivileges)

let gw: TestGateway
const asT = async (method: string, target: string, body?: object): Promise<RawReply> => await request(gw.socket, method, target, body, { token: TOKEN })
const direct = async (method: string, target: string): Promise<RawReply> => await request(swarmEngine().socket, method, target)
const services: string[] = []
const spec = (name: string, extra: object = {}, containerSpec: object = {}): object => ({
  Name: `svc-${RUN}-${name}`,
  TaskTemplate: { ContainerSpec: { Image: IMAGE, Command: ['sleep', '600'], StopGracePeriod: 1e9, ...containerSpec } },
  ...extra,
})

t.before(async () => { gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, `unix://${swarmEngine().socket}`, policyDir) })
t.teardown(async () => {
  for (const id of services) await direct('DELETE', `/services/${id}`)
  await gw?.close()
})

t.test('a service without limits gets the containers\' defaults', async (t) => {
  const r = await asT('POST', '/v1.41/services/create', spec('defaults', { Mode: { Replicated: { Replicas: 0 } } }))
  t.equal(r.status, 201, r.text)
  services.push(r.json.ID)
  const stored = (await direct('GET', `/services/${r.json.ID as string}`)).json.Spec
  t.same(stored.TaskTemplate.Resources?.Limits, { MemoryBytes: 1024 ** 3, Pids: 1024 }, 'the engine stored the default memory and process limits')
  t.equal(stored.TaskTemplate.ContainerSpec.Labels?.['io.portcullis.tenant'], TENANT, 'and the owner labels for its tasks\' containers')
  const neg = await asT('POST', '/v1.41/services/create', spec('nopids', { TaskTemplate: { ContainerSpec: { Image: IMAGE }, Resources: { Limits: { Pids: -1 } } } }))
  t.equal(neg.status, 403)
  t.match(neg.json?.message, /rule pids-limit/)
})

t.test('quotas count what each mode runs at once', async (t) => {
  const refused: Array<[string, object]> = [
    ['3 replicas', { Mode: { Replicated: { Replicas: 3 } } }],
    ['a replicated job of 3 at once', { Mode: { ReplicatedJob: { MaxConcurrent: 3, TotalCompletions: 10 } } }],
  ]
  for (const [why, extra] of refused) {
    const r = await asT('POST', '/v1.41/services/create', spec(`q${randomBytes(2).toString('hex')}`, extra))
    t.equal(r.status, 403, why)
    t.match(r.json?.message, /containers 3 > 2 .*rule quota-containers/)
  }
  const fits: Array<[string, object]> = [
    ['a replicated job of 5 completions, 1 at a time (the default)', { Mode: { ReplicatedJob: { TotalCompletions: 5 } } }],
    ['a global job on this one-node swarm', { Mode: { GlobalJob: {} } }],
  ]
  for (const [why, extra] of fits) {
    const r = await asT('POST', '/v1.41/services/create', spec(`f${randomBytes(2).toString('hex')}`, extra, { Command: ['true'] }))
    t.equal(r.status, 201, `${why}: ${r.text}`)
    if (r.status === 201) services.push(r.json.ID)
  }
  // Both jobs now count (1 + 1 of 2): a replicated service of one more is past the quota.
  const more = await asT('POST', '/v1.41/services/create', spec('more', { Mode: { Replicated: { Replicas: 1 } } }))
  t.equal(more.status, 403, 'the jobs count against the quota')
  t.match(more.json?.message, /containers 3 > 2 \(2 in use\)/)
})
