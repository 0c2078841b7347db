/**
 * The audit trail tells a probe from a miss (issue 19, item 5).
 *
 * A tenant's reference that the engine resolves to nothing at all (full id, exact name,
 * unique id prefix, over all objects) is the engine's own "no such object": allowed by
 * the policy, recorded with the 404 the client got, never as a denial. A reference that
 * names another tenant's object stays a denial by `tenant-ownership`. The client cannot
 * tell them apart: both answers are byte for byte the engine's own answer for a missing
 * object of that name. `audit report` counts only the second as a cross-tenant denial,
 * so a docker-compose 1.29 `up`/`down` (which asks whether its network and volume exist
 * before it creates them) shows none.
 */
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { report } from '../src/audit'
import { engine, request, run, startTestGateway, type TestGateway, tokensFor, uniqueName } from './helpers/gateway'

const COMPOSE = '/usr/bin/docker-compose'
const IMAGE = engine().image
const SECRET = randomBytes(32).toString('hex')
const RUN = randomBytes(3).toString('hex')
const TA = `team-m-${RUN}`
const TB = `team-n-${RUN}`
const P = uniqueName('pcm')

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pcm-'))
t.teardown(() => fs.rmSync(tmp, { recursive: true, force: true }))
const { token: TOKEN, config: CONFIG } = tokensFor({
  a: { sub: 'mira', tenant: TA, roles: ['tenant'] },
  b: { sub: 'nils', tenant: TB, roles: ['tenant'] },
}, SECRET, tmp)

let gw: TestGateway
const eng = engine()
t.before(async () => { gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`) })

const PROJECT = `${P}-c`
const composeDir = path.join(tmp, 'compose')
fs.mkdirSync(composeDir)
fs.writeFileSync(path.join(composeDir, 'docker-compose.yml'), `version: "2.4"
services:
  web:
    image: ${IMAGE}
    command: sleep 600
    stop_grace_period: 1s
    volumes: [data:/data]
    networks: [backend]
volumes:
  data: {}
networks:
  backend: {}
`)
const compose = async (...args: string[]): Promise<{ code: number | null, stderr: string }> =>
  await run(COMPOSE, ['--ansi', 'never', '-p', PROJECT, ...args], { host: gw.dockerHost, cwd: composeDir, env: { DOCKER_CONFIG: CONFIG.a }, timeoutMs: 300_000 })

t.teardown(async () => {
  await compose('down', '-v', '-t', '1').catch(() => undefined)
  for (const name of [`${P}-b`, `${P}-bnet`, `${P}-bvol`]) {
    await request(eng.socket, 'DELETE', `/containers/${name}?force=1`)
    await request(eng.socket, 'DELETE', `/networks/${name}`)
    await request(eng.socket, 'DELETE', `/volumes/${name}`)
  }
  await gw?.close()
})

interface Rec { operation?: string, decision?: string, status?: number, rule?: { policy: string, rule: string }, resource?: { id?: string, name?: string }, identity?: { tenant?: string } }
const records = (): Rec[] => fs.readFileSync(path.join(gw.dir, 'audit.jsonl'), 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l) as Rec)
const lastFor = (ref: string): Rec | undefined => records().reverse().find((r) => r.resource?.id === ref || r.resource?.name === ref)

/** What tenant A is told when it inspects `ref`. */
async function probe (kind: 'containers' | 'networks' | 'volumes', ref: string): Promise<{ status: number, text: string }> {
  const r = await request(gw.socket, 'GET', `/v1.41/${kind}/${ref}${kind === 'containers' ? '/json' : ''}`, undefined, { token: TOKEN.a })
  return { status: r.status, text: r.text }
}

t.test('a miss is the engine\'s 404, audited as allowed; another tenant\'s object is a denial; the answers are the same bytes', async (t) => {
  // Tenant B's objects, named; tenant A names them, and names that nothing has.
  const b = { containers: `${P}-b`, networks: `${P}-bnet`, volumes: `${P}-bvol` } as const
  t.equal((await request(gw.socket, 'POST', `/v1.41/containers/create?name=${b.containers}`, { Image: IMAGE, Cmd: ['true'] }, { token: TOKEN.b })).status, 201)
  t.equal((await request(gw.socket, 'POST', '/v1.41/networks/create', { Name: b.networks }, { token: TOKEN.b })).status, 201)
  t.equal((await request(gw.socket, 'POST', '/v1.41/volumes/create', { Name: b.volumes }, { token: TOKEN.b })).status, 201)
  const absentFullId = randomBytes(32).toString('hex')
  for (const kind of ['containers', 'networks', 'volumes'] as const) {
    const missingName = `${P}-none-${kind}`
    const refs = kind === 'containers' ? [missingName, absentFullId] : [missingName]
    for (const ref of refs) {
      const miss = await probe(kind, ref)
      const direct = await request(eng.socket, 'GET', `/v1.41/${kind}/${ref}${kind === 'containers' ? '/json' : ''}`)
      t.equal(miss.status, direct.status, `${kind} ${ref === absentFullId ? '(full id)' : ref}: the engine's status`)
      t.equal(miss.text, direct.text, `${kind}: the engine's own words, byte for byte`)
      t.match(lastFor(ref), { decision: 'allow', status: 404, rule: { policy: 'base.csv' } }, `${kind}: a miss is recorded as allowed by the policy, answered 404`)
      t.notMatch(lastFor(ref), { rule: { rule: 'tenant-ownership' } }, `${kind}: not a denial by tenant-ownership`)
    }
    // Another tenant's object: the same answer as for a missing object of its name...
    const foreign = await probe(kind, b[kind])
    t.match(lastFor(b[kind]), { decision: 'deny', status: 404, rule: { policy: 'tenancy', rule: 'tenant-ownership' } }, `${kind}: another tenant's object is a denial by tenant-ownership`)
    // ...which the engine gives once the object is gone.
    await request(eng.socket, 'DELETE', `/${kind}/${b[kind]}${kind === 'containers' ? '?force=1' : ''}`)
    const gone = await request(eng.socket, 'GET', `/v1.41/${kind}/${b[kind]}${kind === 'containers' ? '/json' : ''}`)
    t.equal(foreign.status, gone.status, `${kind}: a probe gets the engine's status for a missing object`)
    t.equal(foreign.text, gone.text, `${kind}: and its words, byte for byte (no oracle for existence)`)
  }
})

t.test('a reference inside a body (NetworkMode): a miss is allowed, another tenant\'s network a denial, in the same words', async (t) => {
  const foreign = `${P}-b3`
  t.equal((await request(gw.socket, 'POST', '/v1.41/networks/create', { Name: foreign }, { token: TOKEN.b })).status, 201)
  t.teardown(async () => { await request(eng.socket, 'DELETE', `/networks/${foreign}`) })
  const lastCreate = (): Rec | undefined => records().reverse().find((r) => r.operation === 'ContainerCreate' && r.identity?.tenant === TA)
  const absent = `${P}-nope`
  const miss = await request(gw.socket, 'POST', '/v1.41/containers/create', { Image: IMAGE, HostConfig: { NetworkMode: absent } }, { token: TOKEN.a })
  t.match(lastCreate(), { decision: 'allow', status: miss.status, rule: { policy: 'base.csv' } }, 'a miss: allowed by the policy, with the answer\'s status')
  const probe = await request(gw.socket, 'POST', '/v1.41/containers/create', { Image: IMAGE, HostConfig: { NetworkMode: foreign } }, { token: TOKEN.a })
  t.match(lastCreate(), { decision: 'deny', status: probe.status, rule: { policy: 'tenancy', rule: 'tenant-ownership' } }, 'a probe: a denial by tenant-ownership')
  t.equal(probe.status, miss.status, 'the same status')
  t.equal(probe.text.replaceAll(foreign, 'NAME'), miss.text.replaceAll(absent, 'NAME'), 'the same words, but for the name given')
})

t.test('audit report: a compose up/down counts no cross-tenant denial; a real probe is counted', async (t) => {
  // Only what follows counts (the test before probed on purpose).
  const since = new Date()
  const up = await compose('up', '-d')
  t.equal(up.code, 0, up.stderr)
  const down = await compose('down', '-v', '-t', '1')
  t.equal(down.code, 0, down.stderr)
  const file = path.join(gw.dir, 'audit.jsonl')
  const afterCompose = report([file], { tenant: TA, since })
  t.comment(afterCompose)
  t.match(afterCompose, /^ {2}cross-tenant denials: 0$/m, 'compose\'s "does it exist yet?" checks are no cross-tenant denials')
  t.match(afterCompose, /^ {2}misses: [1-9][0-9]*$/m, 'they are counted as misses')
  t.notMatch(afterCompose, /tenant-ownership \(tenancy\)\s+\d/, 'and not under denials by rule')

  // A real probe: tenant A names tenant B's container.
  const name = `${P}-b2`
  t.equal((await request(gw.socket, 'POST', `/v1.41/containers/create?name=${name}`, { Image: IMAGE, Cmd: ['true'] }, { token: TOKEN.b })).status, 201)
  t.teardown(async () => { await request(eng.socket, 'DELETE', `/containers/${name}?force=1`) })
  t.equal((await request(gw.socket, 'GET', `/v1.41/containers/${name}/json`, undefined, { token: TOKEN.a })).status, 404)
  const afterProbe = report([file], { tenant: TA, since })
  t.match(afterProbe, /^ {2}cross-tenant denials: 1$/m, 'the probe of another tenant\'s container is counted')
  t.match(afterProbe, /tenant-ownership \(tenancy\)\s+1\s+mira@/, 'and listed under denials by rule')
})
