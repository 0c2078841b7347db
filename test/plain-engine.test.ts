/**
 * Where most users run Docker: an engine that is not a swarm manager. It answers 503
 * ("This node is not a swarm manager") to /services, /tasks, /secrets, /configs, /nodes
 * and /swarm; that means "there are none", never "the lookup failed".
 *
 * Regression: every tenant ContainerCreate on a plain engine answered
 * `502 ownership lookup failed: the engine answered 503 to GET /services` (the quota's
 * service listing threw before its "no swarm, no services" branch). Here a tenant runs
 * containers with both CLIs, under a quota, and every swarm command answers through the
 * gateway exactly as the engine answers it directly.
 */
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import jwt from 'jsonwebtoken'
import t from 'tap'
import { CLI20, CLI28, engine, POLICIES, run, startTestGateway, uniqueName, type RunResult, type TestGateway } from './helpers/gateway'

const SECRET = randomBytes(32).toString('hex')
const TENANT = `plain-${randomBytes(3).toString('hex')}`
const TENANT_LABEL = 'io.portcullis.tenant'
const P = uniqueName('pcp')
const IMAGE = engine().image

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pcp-'))
const config = path.join(tmp, 'cfg')
fs.mkdirSync(config)
const token = jwt.sign({ sub: 'pat', tenant: TENANT, roles: ['tenant'], exp: Math.floor(Date.now() / 1000) + 3600 }, SECRET, { algorithm: 'HS256' })
fs.writeFileSync(path.join(config, 'config.json'), JSON.stringify({ HttpHeaders: { Authorization: `Bearer ${token}` } }))

// A quota, so that every create counts the tenant's containers and services.
const policyDir = path.join(tmp, 'policies')
fs.cpSync(POLICIES, policyDir, { recursive: true })
const tenancyFile = path.join(policyDir, 'tenancy.yaml')
fs.writeFileSync(tenancyFile, fs.readFileSync(tenancyFile, 'utf8').replace(/^ {2}tenants: \{\}$/m, `  tenants:\n    ${TENANT}: { containers: 2, memory: 1GiB }`))

let gw: TestGateway
const as = async (args: readonly string[], cli = CLI28): Promise<RunResult> =>
  await run(cli, args, { host: gw.dockerHost, env: { DOCKER_CONFIG: config }, timeoutMs: 60_000 })
const direct = async (args: readonly string[], cli = CLI28): Promise<RunResult> => await run(cli, args, { host: engine().dockerHost, timeoutMs: 60_000 })
const lines = (r: RunResult): string[] => r.stdout.toString().split('\n').filter((l) => l !== '')
const out = (r: RunResult): Record<string, unknown> => r.code === 0 ? {} : { stderr: r.stderr.trim() }

t.before(async () => {
  gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, undefined, policyDir)
})
t.teardown(async () => {
  const cs = lines(await direct(['ps', '-aq', '--filter', `label=${TENANT_LABEL}=${TENANT}`]))
  if (cs.length) await direct(['rm', '-f', ...cs])
  await gw?.close()
  fs.rmSync(tmp, { recursive: true, force: true })
})

t.test('the engine is not a swarm manager', async (t) => {
  const r = await direct(['info', '--format', '{{.Swarm.LocalNodeState}}'])
  t.equal(r.stdout.toString(), 'inactive\n')
})

t.test('swarm commands answer through the gateway as the engine answers them', async (t) => {
  // As the tenant and as an admin (the gateway's listener identity), against the engine
  // directly. The quota (containers and memory) counts services too: the tenant's creates
  // and updates list them, which on this engine must mean "none".
  const data = path.join(tmp, 'secret-data')
  fs.writeFileSync(data, 'not a swarm\n')
  const cases: Array<{ args: string[], tenantDenied?: string }> = [
    { args: ['service', 'ls'] }, { args: ['service', 'inspect', 'anything'] }, { args: ['service', 'ps', 'anything'] },
    { args: ['service', 'rm', 'anything'] }, { args: ['service', 'scale', '--detach', 'anything=2'] },
    { args: ['service', 'create', '--detach', '--no-resolve-image', '--limit-memory', '32m', '--name', `${P}-svc`, IMAGE, 'sleep', '60'] },
    { args: ['secret', 'ls'] }, { args: ['secret', 'inspect', 'anything'] }, { args: ['secret', 'create', `${P}-secret`, data] },
    { args: ['config', 'ls'] }, { args: ['config', 'inspect', 'anything'] }, { args: ['config', 'rm', 'anything'] },
    { args: ['node', 'ls'] }, { args: ['node', 'inspect', 'self'] },
    { args: ['swarm', 'unlock-key'] },
  ]
  for (const { args, tenantDenied } of cases) {
    const [engineSays, tenantGets, adminGets] = await Promise.all([
      direct(args),
      as(args),
      run(CLI28, args, { host: gw.dockerHost, timeoutMs: 60_000 }),
    ])
    t.not(engineSays.code, 0, `directly: docker ${args.join(' ')} fails`)
    t.match(engineSays.stderr, /not a swarm manager/)
    t.same({ code: adminGets.code, stderr: adminGets.stderr }, { code: engineSays.code, stderr: engineSays.stderr }, `admin: docker ${args.join(' ')} fails as directly`)
    if (tenantDenied !== undefined) {
      t.not(tenantGets.code, 0)
      t.match(tenantGets.stderr, tenantDenied, `tenant: docker ${args.join(' ')} is the policy's to refuse first`)
    } else {
      t.same({ code: tenantGets.code, stderr: tenantGets.stderr }, { code: engineSays.code, stderr: engineSays.stderr }, `tenant: docker ${args.join(' ')} fails as directly`)
    }
  }
})

t.test('a tenant runs containers with both CLIs, within its quota', async (t) => {
  for (const cli of [CLI28, CLI20]) {
    const r = await as(['run', '--rm', '--memory', '64m', IMAGE, 'echo', 'hello from a plain engine'], cli)
    t.equal(r.code, 0, `${cli} run --rm`, out(r))
    t.equal(r.stdout.toString(), 'hello from a plain engine\n')
  }
  const box = `${P}-box`
  const started = await as(['run', '-d', '--name', box, '--memory', '512m', IMAGE, 'sleep', '600'])
  t.equal(started.code, 0, 'run -d', out(started))
  const stored = JSON.parse((await direct(['inspect', '--format', '{{json .Config.Labels}}', box])).stdout.toString())
  t.equal(stored[TENANT_LABEL], TENANT, 'the engine stored the owner label')
  t.same(lines(await as(['ps', '--format', '{{.Names}}'])), [box], 'ps shows the tenant its container')

  // The quota counts containers (services: none on a plain engine) and refuses past it.
  const second = await as(['create', '--name', `${P}-2`, '--memory', '256m', IMAGE])
  t.equal(second.code, 0, 'a second container, within the quota', out(second))
  const third = await as(['create', '--name', `${P}-3`, '--memory', '128m', IMAGE])
  t.not(third.code, 0, 'a third is refused')
  t.match(third.stderr, /quota exceeded for tenant \S+: containers 3 > 2 \(2 in use\) \(rule quota-containers\)/)
  const big = await as(['update', '--memory', '900m', box])
  t.not(big.code, 0, 'an update past the memory quota is refused')
  t.match(big.stderr, /memory limits .* > 1 GiB/)
  t.equal((await direct(['ps', '-aq', '--filter', `label=${TENANT_LABEL}=${TENANT}`])).stdout.toString().trim().split('\n').length, 2, 'the engine holds two containers of the tenant')
})
