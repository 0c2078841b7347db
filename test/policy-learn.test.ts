/**
 * Learn mode (README, "Learn mode"): a real client session recorded through a gateway
 * whose only policy allows everything (audit level `facts`), `portcullis policy learn`
 * on its trail, and the same session replayed through a new gateway with the learned
 * file as its whole policy:
 *
 *   - a tenant (lena, roles learner + tenant: the tenant rewrites apply) and an admin
 *     (otto, roles learner + admin, no tenant: tenancy leaves admins unscoped; the
 *     policy files here name neither role, so only `learner` or the learned lines allow) each run a docker-compose 1.29 project's up, ps,
 *     logs, exec and down; lena also creates and removes a container with CAP_SYS_ADMIN;
 *   - the learned file allows the replay, every command of it exiting 0;
 *   - and denies what the session never did: a privileged create, a capability not
 *     seen, a host bind, a volume delete (down ran without -v), each by its rule;
 *   - `policy learn --check` with the shipped policy names what it would deny: lena's
 *     capability (rule capabilities), and nothing of otto's (the shipped admin role
 *     allows everything).
 */
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import pino from 'pino'
import t from 'tap'
import { parseConfig } from '../src/config'
import { startGateway, type Gateway } from '../src/gateway'
import { CLI28, engine, POLICIES, run, type RunResult, tokensFor, uniqueName } from './helpers/gateway'

const COMPOSE = '/usr/bin/docker-compose'
const CLI = path.resolve(__dirname, '../src/cli.js')
const IMAGE = engine().image
const SECRET = randomBytes(32).toString('hex')
const TENANT = `team-l-${randomBytes(3).toString('hex')}`
const P = uniqueName('pcl')

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pcl-'))
t.teardown(() => fs.rmSync(tmp, { recursive: true, force: true }))

type Who = 'lena' | 'otto'
const { config: CONFIG } = tokensFor<Who>({
  lena: { sub: 'lena', tenant: TENANT, roles: ['learner', 'tenant'] },
  otto: { sub: 'otto', roles: ['learner', 'admin'] },
}, SECRET, tmp)

/** A policy directory: the shipped model, rewrites and tenancy, and `csv` as its only policy file. */
function policyDir (name: string, csv: string): string {
  const dir = path.join(tmp, name)
  fs.mkdirSync(dir)
  for (const f of ['model.conf', 'rewrites.yaml', 'tenancy.yaml']) fs.copyFileSync(path.join(POLICIES, f), path.join(dir, f))
  fs.writeFileSync(path.join(dir, 'policy.csv'), csv)
  fs.writeFileSync(path.join(dir, 'policy.yaml'), 'model: model.conf\npolicies:\n  - { file: policy.csv, mode: enforce }\nrewrites: rewrites.yaml\ntenancy: tenancy.yaml\n')
  return dir
}

interface Running { gateway: Gateway, socket: string, audit: string }
async function gateway (name: string, policy: string): Promise<Running> {
  const socket = path.join(tmp, `${name}.sock`)
  const audit = path.join(tmp, `${name}.jsonl`)
  const text = `listen:\n  - { unix: ${socket} }\nupstream: unix://${engine().socket}\npolicy: { dir: ${policy} }\n` +
    `auth: { jwt: { secret: ${SECRET} } }\naudit: { file: ${audit}, level: facts }\nlog: { level: silent }\nshutdown: { graceSeconds: 2 }\n`
  const config = parseConfig(text, path.join(tmp, `${name}.yaml`))
  return { gateway: await startGateway(config, pino({ level: 'silent' })), socket, audit }
}

const composeFile = (who: Who): string => `version: "2.4"
services:
  web:
    image: ${IMAGE}
    command: sh -c 'echo hello from ${who}; sleep 600'
    stop_grace_period: 1s
    volumes: [data:/data]
  worker:
    image: ${IMAGE}
    command: sleep 600
    stop_grace_period: 1s
volumes:
  data: {}
`
for (const who of ['lena', 'otto'] as const) {
  fs.mkdirSync(path.join(tmp, `compose-${who}`))
  fs.writeFileSync(path.join(tmp, `compose-${who}`, 'docker-compose.yml'), composeFile(who))
}
const project = (who: Who): string => `${P}-${who}`

async function compose (gw: Running, who: Who, ...args: string[]): Promise<RunResult> {
  return await run(COMPOSE, ['--ansi', 'never', '-p', project(who), ...args], { host: `unix://${gw.socket}`, cwd: path.join(tmp, `compose-${who}`), env: { DOCKER_CONFIG: CONFIG[who] }, timeoutMs: 300_000 })
}
async function docker (gw: Running, who: Who, args: readonly string[]): Promise<RunResult> {
  return await run(CLI28, args, { host: `unix://${gw.socket}`, env: { DOCKER_CONFIG: CONFIG[who] }, timeoutMs: 120_000 })
}
const direct = async (args: readonly string[]): Promise<RunResult> => await run(CLI28, args, { host: engine().dockerHost })
const lines = (r: RunResult): string[] => r.stdout.toString().split('\n').filter((l) => l !== '')
const out = (r: RunResult): Record<string, unknown> => ({ code: r.code, stderr: r.stderr.trim().slice(-400) })

/** The session: each step's name and exit code. */
async function session (gw: Running, who: Who): Promise<Array<[string, number | null, string]>> {
  const steps: Array<[string, () => Promise<RunResult>]> = [
    ['up', async () => await compose(gw, who, 'up', '-d')],
    ['ps', async () => await compose(gw, who, 'ps')],
    ['logs', async () => await compose(gw, who, 'logs', 'web')],
    ['exec', async () => await compose(gw, who, 'exec', '-T', 'web', 'echo', 'inside')],
    ['down', async () => await compose(gw, who, 'down', '-t', '1')],
  ]
  if (who === 'lena') {
    steps.push(['create with SYS_ADMIN', async () => await docker(gw, who, ['create', '--cap-add', 'SYS_ADMIN', '--name', `${P}-cap`, IMAGE, 'true'])])
    steps.push(['rm', async () => await docker(gw, who, ['rm', `${P}-cap`])])
  }
  const results: Array<[string, number | null, string]> = []
  for (const [name, step] of steps) {
    const r = await step()
    results.push([name, r.code, r.code === 0 ? '' : r.stderr.trim().slice(-300)])
  }
  return results
}

async function cleanup (): Promise<void> {
  for (const who of ['lena', 'otto'] as const) {
    const cs = lines(await direct(['ps', '-aq', '--filter', `label=com.docker.compose.project=${project(who)}`]))
    if (cs.length) await direct(['rm', '-f', ...cs])
    await direct(['network', 'rm', `${project(who)}_default`])
    await direct(['volume', 'rm', '-f', `${project(who)}_data`])
  }
  const rest = lines(await direct(['ps', '-aq', '--filter', `name=${P}`]))
  if (rest.length) await direct(['rm', '-f', ...rest])
}
t.teardown(cleanup)

const ALLOW_ALL = '# learn mode: the learner role may do anything; its traffic is recorded at audit level facts\np, learner, *, *, *, allow, learn-everything, true\n'
let trail = ''
let learned = ''

t.test('the session, recorded through an allow-all gateway', async (t) => {
  const gw = await gateway('record', policyDir('record', ALLOW_ALL))
  try {
    for (const who of ['lena', 'otto'] as const) {
      const steps = await session(gw, who)
      t.same(steps.filter(([, code]) => code !== 0), [], `${who}'s session runs`)
    }
  } finally {
    await gw.gateway.close()
  }
  trail = gw.audit
  const records = fs.readFileSync(trail, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l))
  const creates = records.filter((r) => r.operation === 'ContainerCreate')
  t.ok(creates.length >= 5, `ContainerCreate recorded (${creates.length})`)
  t.ok(creates.every((r) => r.facts !== undefined), 'every create carries its facts at level facts')
  t.ok(creates.some((r) => r.facts.capAdd?.includes('SYS_ADMIN')), 'the capability is among them')
  t.ok(creates.some((r) => r.identity.subject === 'lena' && r.facts.memory === 1073741824), 'as the tenant rewrites left them (memory 1 GiB)')
  t.notOk(records.some((r) => r.body !== undefined), 'no body at level facts')
  const verify = await run(process.execPath, [CLI, 'audit', 'verify', trail], { host: '' })
  t.equal(verify.code, 0, `the trail verifies: ${verify.stdout.toString().trim()}`)
})

t.test('policy learn writes the policy, a comment on each line', async (t) => {
  const file = path.join(tmp, 'learned.csv')
  const r = await run(process.execPath, [CLI, 'policy', 'learn', '--out', file, trail], { host: '' })
  t.equal(r.code, 0, 'learn exits 0', out(r))
  learned = fs.readFileSync(file, 'utf8')
  t.match(learned, new RegExp(`^p, user:lena, ${TENANT}, .*ContainerCreate.*, container, allow, learned-lena-container, true$`, 'm'), 'lena\'s container operations, in her tenant')
  t.match(learned, /^p, user:otto, \*, .*VolumeCreate.*, volume, allow, learned-otto-volume, true$/m, 'otto\'s volume operations, in no tenant')
  t.notMatch(learned, /VolumeDelete/, 'no volume delete was seen')
  t.match(learned, /^p, user:lena, [^,]+, \*, \*, deny, learned-lena-cap-add, "anyNotIn\(r\.obj\.capAdd, 'SYS_ADMIN'\)"$/m, 'lena may add SYS_ADMIN, nothing else')
  t.match(learned, /^p, user:otto, \*, \*, \*, deny, learned-otto-cap-add, count\(r\.obj\.capAdd\) > 0$/m, 'otto no capability')
  t.match(learned, /^p, user:lena, [^,]+, \*, \*, deny, learned-lena-privileged, r\.obj\.privileged$/m, 'privileged never seen')
  t.match(learned, /^p, user:lena, [^,]+, \*, \*, deny, learned-lena-memory, r\.obj\.memory < 0 \|\| r\.obj\.memory > 1073741824$/m, 'memory held to what the rewrites gave')
  t.match(learned, /^# .*ContainerCreate x\d+.*\(e\.g\. req /m, 'the comment names the requests and how often')
})

t.test('the learned policy allows the replay and nothing outside it', async (t) => {
  await cleanup()
  const gw = await gateway('replay', policyDir('replay', learned))
  try {
    for (const who of ['lena', 'otto'] as const) {
      const steps = await session(gw, who)
      t.same(steps.filter(([, code]) => code !== 0), [], `${who}'s session replays`)
    }
    const refused = async (who: Who, args: string[], rule: RegExp, what: string): Promise<void> => {
      const r = await docker(gw, who, args)
      t.not(r.code, 0, `${who}: ${what} is refused`)
      t.match(r.stderr, rule, `${who}: by ${rule.source}`)
    }
    await refused('lena', ['create', '--privileged', IMAGE, 'true'], /learned-lena-privileged/, 'a privileged create')
    await refused('otto', ['create', '--privileged', IMAGE, 'true'], /learned-otto-privileged/, 'a privileged create')
    await refused('lena', ['create', '--cap-add', 'NET_ADMIN', IMAGE, 'true'], /learned-lena-cap-add/, 'a capability never seen')
    await refused('otto', ['create', '-v', '/etc:/host-etc', IMAGE, 'true'], /learned-otto-host-paths/, 'a host bind')
    await refused('lena', ['volume', 'rm', `${project('lena')}_data`], /no rule allows|not allowed|denied/i, 'a volume delete never seen')
    await refused('otto', ['volume', 'rm', `${project('otto')}_data`], /no rule allows|not allowed|denied/i, 'a volume delete never seen')
    const vols = lines(await direct(['volume', 'ls', '-q', '--filter', `name=${P}`]))
    t.ok(vols.includes(`${project('lena')}_data`) && vols.includes(`${project('otto')}_data`), 'and the volumes are still there')
  } finally {
    await gw.gateway.close()
  }
})

t.test('policy learn --check: what the shipped policy would deny of the traffic', async (t) => {
  const r = await run(process.execPath, [CLI, 'policy', 'learn', '--check', '--dir', POLICIES, trail], { host: '' })
  const text = r.stdout.toString()
  t.equal(r.code, 1, 'exits 1: something would be denied', out(r))
  t.match(text, /^deny ContainerCreate x1 by lena \(tenant [^)]+\): base\.csv: capabilities/m, 'lena\'s SYS_ADMIN create, by rule capabilities')
  t.notMatch(text, /by lena.*(ContainerList|ContainerStart|ContainerLogs|ContainerExec)/, 'the rest of lena\'s session the shipped tenant role allows')
  t.notMatch(text, /by otto/, 'nothing of otto\'s: the shipped admin role allows it all')
  t.match(text, /request\(s\) would be denied/, 'and a total')
  const lena = await run(process.execPath, [CLI, 'policy', 'learn', '--check', '--dir', POLICIES, '--subject', 'lena', trail], { host: '' })
  t.equal(lena.stdout.toString().split('\n').filter((l) => l.startsWith('deny ')).length, 1, 'for lena alone: one line', out(lena))
})
