/**
 * Issue 20, "Done when" item 2: two tenants run the same compose project, with the same
 * project name, side by side, and each sees exactly what it would see alone.
 *
 * Under `names: private` two tenants bring up one realistic project (a service built
 * from a Dockerfile and tagged by `image:`, a second service that depends on it, a named
 * volume, a custom network, a published port) with docker-compose 1.29 through the
 * gateway, at once. The oracle is the same project brought up alone, directly, on a
 * fresh private engine of this test's own. Compared after normalizing what differs
 * between any two runs (ids, timestamps, host ports, addresses, host paths): compose's
 * `build`, `up -d`, `ps`, `images`, `config --services`, `logs`, an `exec` that reads
 * the volume and reaches the other service by name, `down -v`; and what the docker CLI
 * 28 shows in `ps -a`, `network ls`, `volume ls` and `image ls` (the shared image set,
 * tenancy.yaml `images.shared`, holding the base image only, as the private engine has).
 */
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { startEngine, stopEngine, type EngineInfo } from './engine/engine'
import { CLI28, engine, policiesWith, run, type RunResult, startTestGateway, type TestGateway, tokensFor } from './helpers/gateway'

const COMPOSE = '/usr/bin/docker-compose'
const TENANT_LABEL = 'io.portcullis.tenant'
const IMAGE = engine().image
const SECRET = randomBytes(32).toString('hex')
const RUN = randomBytes(3).toString('hex')
const TA = `cmpa-${RUN}`
const TB = `cmpb-${RUN}`
const PROJECT = 'shop'

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pcc-'))
t.teardown(() => fs.rmSync(tmp, { recursive: true, force: true }))
const { config: CONFIG } = tokensFor({ a: { sub: 'ann', tenant: TA, roles: ['tenant'] }, b: { sub: 'bo', tenant: TB, roles: ['tenant'] } }, SECRET, tmp)

const dir = path.join(tmp, 'project')
fs.mkdirSync(path.join(dir, 'db'), { recursive: true })
// No RUN step: what a tenant's build runs is judged elsewhere (tenancy-build-user); this is about names.
fs.writeFileSync(path.join(dir, 'db', 'Dockerfile'), `FROM ${IMAGE}
COPY motd /motd
CMD ["sh", "-c", "cp /motd /data/motd && echo db ready && exec httpd -f -v -p 8080 -h /data"]
`)
fs.writeFileSync(path.join(dir, 'db', 'motd'), 'hello from the volume\n')
fs.writeFileSync(path.join(dir, 'docker-compose.yml'), `version: "2.4"
services:
  db:
    build: ./db
    image: shopdb:1
    stop_grace_period: 1s
    volumes: [data:/data]
    networks: [back]
  web:
    image: ${IMAGE}
    command: sh -c 'echo web up; exec sleep 600'
    stop_grace_period: 1s
    depends_on: [db]
    volumes: [data:/srv:ro]
    networks: [back]
    ports: ["8080"]
volumes:
  data: {}
networks:
  back: {}
`)

type Side = 'a' | 'b' | 'alone'
let gw: TestGateway
let alone: EngineInfo
const host = (who: Side): string => who === 'alone' ? alone.dockerHost : gw.dockerHost
const env = (who: Side): NodeJS.ProcessEnv => who === 'alone' ? {} : { DOCKER_CONFIG: CONFIG[who] }
const compose = async (who: Side, ...args: string[]): Promise<RunResult> =>
  await run(COMPOSE, ['--ansi', 'never', '-p', PROJECT, ...args], { host: host(who), cwd: dir, env: env(who), timeoutMs: 300_000 })
const docker = async (who: Side, args: readonly string[]): Promise<RunResult> =>
  await run(CLI28, args, { host: host(who), env: env(who), timeoutMs: 120_000 })
const out = (r: RunResult): Record<string, unknown> => r.code === 0 ? {} : { stderr: r.stderr.trim() }

/** What differs between any two runs of the same project, whoever runs it. */
function normal (text: string): string {
  return text
    .replace(/\b(sha256:)?[0-9a-f]{64}\b/g, '<id>')
    .replace(/\b[0-9a-f]{12}\b/g, '<id>')
    .replace(/\b\d{1,3}(\.\d{1,3}){3}(\/\d+)?\b/g, '<ip>')
    .replace(/<ip>:\d+->/g, '<ip>:<port>->')
    .replace(/\[::\]:\d+->/g, '[::]:<port>->')
    .replace(/:::\d+->/g, ':::<port>->')
    .replace(/<ip>\]:\d+:/g, '<ip>]:<port>:')
    .replace(/\b\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d+)?( ?[+-]\d{4})?( [A-Z]{2,5})?Z?\b/g, '<time>')
    .replace(/\b(Up|Created|Exited \(\d+\)) (Less than a second|About a minute|About an hour|an? \w+|\d+ \w+)( ago)?/g, '$1 <since>')
    .replace(/\b(\d+|About an?|Less than an?) (seconds?|minutes?|hours?) ago\b/g, '<since> ago')
}
const normalLines = (r: RunResult, stream: 'stdout' | 'stderr'): string[] =>
  normal(stream === 'stdout' ? r.stdout.toString() : r.stderr).split('\n').filter((l) => l.trim() !== '')

/** `--format '{{json .}}'` lines, normalized and with labels as a sorted list, sorted by `key`. */
function jsonRows (r: RunResult, drop: readonly string[] = []): unknown[] {
  return r.stdout.toString().split('\n').filter((l) => l !== '').map((l) => {
    const row = JSON.parse(l) as Record<string, unknown>
    for (const k of drop) delete row[k]
    if (typeof row.Labels === 'string') row.Labels = row.Labels === '' ? [] : row.Labels.split(',').sort()
    return JSON.parse(normal(JSON.stringify(row)))
  }).sort((x: any, y: any) => JSON.stringify(x).localeCompare(JSON.stringify(y)))
}

t.before(async () => {
  alone = await startEngine(fs.mkdtempSync('/tmp/pcx-'))
  // The shared image set holds the base image only: a private engine has nothing else (tenancy.yaml images.shared).
  const policies = policiesWith((text) => text.replace(/^names: engine$/m, `names: private\nimages: { shared: ["${IMAGE.replace(/:latest$/, '')}"] }`))
  gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, undefined, policies)
})

t.teardown(async () => {
  for (const who of ['a', 'b'] as const) await compose(who, 'down', '-v', '-t', '1').catch(() => undefined)
  const direct = async (args: string[]): Promise<RunResult> => await run(CLI28, args, { host: engine().dockerHost })
  for (const tenant of [TA, TB]) {
    const label = `label=${TENANT_LABEL}=${tenant}`
    const ids = (r: RunResult): string[] => r.stdout.toString().split('\n').filter((l) => l !== '')
    const cs = ids(await direct(['ps', '-aq', '--filter', label]))
    if (cs.length) await direct(['rm', '-f', '-v', ...cs])
    const vs = ids(await direct(['volume', 'ls', '-q', '--filter', label]))
    if (vs.length) await direct(['volume', 'rm', '-f', ...vs])
    const ns = ids(await direct(['network', 'ls', '-q', '--filter', label]))
    if (ns.length) await direct(['network', 'rm', ...ns])
    const is = ids(await direct(['image', 'ls', '-q', '--filter', label]))
    if (is.length) await direct(['image', 'rm', '-f', ...new Set(is)])
  }
  await gw?.close()
  if (alone) await stopEngine(alone)
})

t.test('one compose project: two tenants side by side see what it shows alone', async (t) => {
  const sides = ['alone', 'a', 'b'] as const
  const each = async (f: (who: Side) => Promise<RunResult>): Promise<Record<Side, RunResult>> => {
    const [x, y, z] = await Promise.all(sides.map(f))
    return { alone: x, a: y, b: z }
  }
  /** The two tenants' view of `what` equals the private engine's. */
  const same = (what: string, got: Record<Side, unknown>): void => {
    for (const who of ['a', 'b'] as const) t.same(got[who], got.alone, `${who}: ${what} as alone`)
  }

  const services = await each(async (who) => await compose(who, 'config', '--services'))
  same('config --services', { alone: services.alone.stdout.toString(), a: services.a.stdout.toString(), b: services.b.stdout.toString() })

  const build = await each(async (who) => await compose(who, 'build'))
  for (const who of sides) t.equal(build[who].code, 0, `${who}: build`, out(build[who]))
  // Known difference (docs/tenancy.md "Not covered yet"): the progress shows the gateway's
  // FROM by id and its two owner-label steps.
  for (const who of ['a', 'b'] as const) t.same(normalLines(build[who], 'stdout'), normalLines(build.alone, 'stdout'), `${who}: build output as alone`)
  for (const who of ['a', 'b'] as const) t.match(build[who].stdout.toString(), /^Successfully tagged shopdb:1$/m, `${who}: build tags shopdb:1, in its own name`)
  same('build messages', { alone: normalLines(build.alone, 'stderr'), a: normalLines(build.a, 'stderr'), b: normalLines(build.b, 'stderr') })

  const up = await each(async (who) => await compose(who, 'up', '-d'))
  for (const who of sides) t.equal(up[who].code, 0, `${who}: up -d`, out(up[who]))
  same('up -d output', { alone: normalLines(up.alone, 'stderr'), a: normalLines(up.a, 'stderr'), b: normalLines(up.b, 'stderr') })

  const ps = await each(async (who) => await compose(who, 'ps'))
  same('ps', { alone: normalLines(ps.alone, 'stdout'), a: normalLines(ps.a, 'stdout'), b: normalLines(ps.b, 'stdout') })
  const images = await each(async (who) => await compose(who, 'images'))
  same('images', { alone: normalLines(images.alone, 'stdout'), a: normalLines(images.a, 'stdout'), b: normalLines(images.b, 'stdout') })

  const probe = 'cat /srv/motd; wget -qO- http://db:8080/motd; nslookup shop_db_1 | grep -c ^Address; id -u >/dev/null'
  const exec = await each(async (who) => await compose(who, 'exec', '-T', 'web', 'sh', '-c', probe))
  for (const who of sides) t.equal(exec[who].code, 0, `${who}: exec web`, out(exec[who]))
  same('exec web: the volume, db by its service name, db by its container name', { alone: normalLines(exec.alone, 'stdout'), a: normalLines(exec.a, 'stdout'), b: normalLines(exec.b, 'stdout') })
  t.match(exec.a.stdout.toString(), /^hello from the volume\nhello from the volume\n/, 'a: the file, from the volume and over the network from db')

  const logs = await each(async (who) => await compose(who, 'logs', '--no-color'))
  const logLines = (r: RunResult): string[] => normalLines(r, 'stdout').filter((l) => !/httpd|GET \/motd/.test(l)).sort()
  same('logs', { alone: logLines(logs.alone), a: logLines(logs.a), b: logLines(logs.b) })

  const cli = async (what: string, args: string[], drop: string[] = []): Promise<void> => {
    const r = await each(async (who) => await docker(who, [...args, '--format', '{{json .}}']))
    for (const who of sides) t.equal(r[who].code, 0, `${who}: docker ${args.join(' ')}`, out(r[who]))
    same(what, { alone: jsonRows(r.alone, drop), a: jsonRows(r.a, drop), b: jsonRows(r.b, drop) })
  }
  await cli('docker ps -a', ['ps', '-a', '--no-trunc'])
  await cli('docker network ls', ['network', 'ls', '--no-trunc'])
  // (A volume's Mountpoint is a host path under the engine's data root.)
  await cli('docker volume ls', ['volume', 'ls'], ['Mountpoint'])
  await cli('docker image ls', ['image', 'ls', '--no-trunc'])
  await cli('docker image ls of the project\'s images', ['image', 'ls', '--no-trunc', 'shopdb'])
  await cli('docker image ls of the base image', ['image', 'ls', '--no-trunc', IMAGE])

  const down = await each(async (who) => await compose(who, 'down', '-v', '-t', '1'))
  for (const who of sides) t.equal(down[who].code, 0, `${who}: down -v`, out(down[who]))
  // Containers stop and are removed in parallel: their lines come in the order they finish.
  const downLines = (r: RunResult): string[] => normalLines(r, 'stderr').sort()
  same('down -v output', { alone: downLines(down.alone), a: downLines(down.a), b: downLines(down.b) })
  await cli('docker ps -a after down', ['ps', '-a'])
  await cli('docker network ls after down', ['network', 'ls'])
  await cli('docker volume ls after down', ['volume', 'ls'])
})
