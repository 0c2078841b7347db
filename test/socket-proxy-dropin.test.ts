/**
 * The docker-socket-proxy drop-in, differentially: for several sets of that project's
 * variables, every catalog operation (Docker's with and without a /v1.41 prefix,
 * Podman's under /v4.3.1/libpod) goes through HAProxy running that project's own
 * haproxy.cfg (test/fixtures/docker-socket-proxy, as its entrypoint runs it: the bind
 * address substituted, the variables in HAProxy's environment) and through Portcullis
 * started from the same variables, both in front of the real test engine. What is
 * compared is whether the proxy refused the request itself: HAProxy's 403 "Request
 * forbidden by administrative rules", Portcullis' 403 "denied by policy". Whatever the
 * engine then answers (404 for the made-up ids, 400 for missing bodies) is forwarded
 * either way.
 *
 * Intended differences (also in the README, "Migrating from docker-socket-proxy"):
 *
 * | request | docker-socket-proxy | Portcullis | why |
 * | --- | --- | --- | --- |
 * | an operation newer than the version in its path (`GET /v1.41/images/x/attestations`, API 1.55) | forwarded when its section is on | refused (400) whatever the variables | the gateway reads each request as that API version; checked here |
 * | a path with a version outside the gateway's API window (`/v1.12/...`, `/v9.0/...`) | forwarded | refused (400) | the same; not sent here |
 * | a path that is no operation (`/containers/json/x`, `/containersfoo`) | forwarded when a section matches the prefix | refused (404 with the engine's message shape) | not sent here: the catalog has only operations |
 * | exec start / attach with a body (`docker exec -it`) | the engine's `101` reaches the client as `200` (docker CLI 28: "unable to upgrade") | `101`, the session works | FIELD-NOTES; not an allow/deny difference |
 *
 * No catalog operation is decided differently: the table DIFFERENCES below is empty,
 * and the test fails on any difference it does not list.
 *
 * Requests that would change the shared engine are made harmless: prunes carry a
 * label filter that matches nothing, volume creation a name this file removes.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import http from 'node:http'
import os from 'node:os'
import path from 'node:path'
import pino from 'pino'
import t, { type Test } from 'tap'
import { operations, type Operation } from '../src/api/catalog/operations'
import { compareVersions } from '../src/api/catalog/route'
import { socketProxyConfig } from '../src/config'
import { examplePath } from '../src/config/socket-proxy'
import { startGateway } from '../src/gateway'
import { freePort } from '../bench/peer'
import { toolMissing } from './engine/engine'
import { engine } from './helpers/gateway'
import { docker } from './helpers/image'

const FIXTURE = path.resolve(__dirname, '../../test/fixtures/docker-socket-proxy/haproxy.cfg')

/** Variable sets: that project's defaults, a Traefik, a CI runner, the container actions alone, everything. */
const SETS: ReadonlyArray<{ name: string, env: Record<string, string> }> = [
  { name: 'defaults (EVENTS, PING, VERSION)', env: {} },
  { name: 'traefik', env: { CONTAINERS: '1', NETWORKS: '1', PING: '1' } },
  { name: 'ci runner', env: { CONTAINERS: '1', IMAGES: '1', EXEC: '1', POST: '1', BUILD: '1', VOLUMES: '1', NETWORKS: '1', INFO: '1', AUTH: '1', DISTRIBUTION: '1', SESSION: '1', GRPC: '1', COMMIT: '1' } },
  { name: 'container actions only', env: { POST: '1', ALLOW_START: '1', ALLOW_STOP: '1', ALLOW_RESTARTS: '1', PING: '0', VERSION: '0', EVENTS: '0' } },
  { name: 'everything', env: { POST: '1', AUTH: '1', BUILD: '1', COMMIT: '1', CONFIGS: '1', CONTAINERS: '1', DISTRIBUTION: '1', EVENTS: '1', EXEC: '1', GRPC: '1', IMAGES: '1', INFO: '1', NETWORKS: '1', NODES: '1', PING: '1', PLUGINS: '1', SECRETS: '1', SERVICES: '1', SESSION: '1', SWARM: '1', SYSTEM: '1', TASKS: '1', VERSION: '1', VOLUMES: '1' } },
]

/** `set name|METHOD path` -> why Portcullis decides otherwise. Empty: none is intended. */
const DIFFERENCES: Readonly<Record<string, string>> = {}

const VOLUME = `pcx-dropin-${process.pid}`
const NOTHING = encodeURIComponent(JSON.stringify({ label: ['io.portcullis.dropin-test=none'] }))

/** The request for an operation, made harmless for the shared engine. */
function requestFor (op: Operation, version: string | null): { method: string, target: string, body?: string } {
  let target = examplePath(op, version)
  if (target.endsWith('/prune')) target += `?filters=${NOTHING}`
  if (op.id === 'VolumeCreate') return { method: op.method, target, body: JSON.stringify({ Name: VOLUME }) }
  return { method: op.method, target }
}

type Verdict = 'refused' | 'forwarded'

/** Whether the proxy refused the request itself; anything slower than 4 s was forwarded (a refusal is immediate). */
async function verdict (port: number, req: { method: string, target: string, body?: string }, refusal: RegExp): Promise<{ verdict: Verdict, status: number, text: string }> {
  return await new Promise((resolve) => {
    const r = http.request({ host: '127.0.0.1', port, method: req.method, path: req.target, headers: req.body !== undefined ? { 'content-type': 'application/json' } : {} }, (res) => {
      let text = ''
      const done = (): void => { resolve({ verdict: res.statusCode === 403 && refusal.test(text) ? 'refused' : 'forwarded', status: res.statusCode ?? 0, text: text.slice(0, 300) }) }
      if (res.statusCode !== 403) { res.destroy(); done(); return }
      res.on('data', (b: Buffer) => { text += b.toString() })
      res.on('end', done)
      res.on('error', done)
    })
    r.setTimeout(4000, () => { r.destroy(); resolve({ verdict: 'forwarded', status: 0, text: 'no answer within 4 s' }) })
    r.on('error', (err) => { resolve({ verdict: 'forwarded', status: 0, text: err.message }) })
    r.end(req.body)
  })
}

/** HAProxy with that project's configuration, as its entrypoint writes it (bind address substituted). */
async function startHaproxy (dir: string, env: Record<string, string>): Promise<{ port: number, child: ChildProcess, stop (): Promise<void> }> {
  const port = await freePort()
  const cfg = fs.readFileSync(FIXTURE, 'utf8')
    .replace('${BIND_CONFIG}', `127.0.0.1:${port}`)
    // Files of the haproxy image that Debian's haproxy keeps elsewhere or has not.
    .replace(/\/usr\/local\/etc\/haproxy\/errors\//g, '/etc/haproxy/errors/')
    .replace(/^\s*(pidfile|server-state-file|load-server-state-from-file)\b.*$/gm, '')
  const file = path.join(dir, 'haproxy.cfg')
  fs.writeFileSync(file, cfg)
  // The project's image defaults, then the set's variables, as `docker run -e` would.
  const vars = { ALLOW_RESTARTS: '0', ALLOW_STOP: '0', ALLOW_START: '0', AUTH: '0', BUILD: '0', COMMIT: '0', CONFIGS: '0', CONTAINERS: '0', DISTRIBUTION: '0', EVENTS: '1', EXEC: '0', GRPC: '0', IMAGES: '0', INFO: '0', LOG_LEVEL: 'info', NETWORKS: '0', NODES: '0', PING: '1', PLUGINS: '0', POST: '0', SECRETS: '0', SERVICES: '0', SESSION: '0', SWARM: '0', SYSTEM: '0', TASKS: '0', VERSION: '1', VOLUMES: '0', ...env, SOCKET_PATH: engine().socket }
  const log = fs.openSync(path.join(dir, 'haproxy.log'), 'a')
  const child = spawn('haproxy', ['-db', '-f', file], { env: { PATH: process.env.PATH ?? '', ...vars }, stdio: ['ignore', log, log] })
  fs.closeSync(log)
  const exited = new Promise<void>((resolve) => child.on('close', () => resolve()))
  for (let i = 0; i < 100; i++) {
    const up = await new Promise<boolean>((resolve) => {
      http.get({ host: '127.0.0.1', port, path: '/_ping' }, (res) => { res.resume(); resolve(true) }).on('error', () => resolve(false))
    })
    if (up) break
    if (child.exitCode !== null) throw new Error(`haproxy exited: ${fs.readFileSync(path.join(dir, 'haproxy.log'), 'utf8')}`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  return { port, child, async stop () { child.kill('SIGTERM'); await exited } }
}

async function startDropIn (t: Test, dir: string, env: Record<string, string>): Promise<{ port: number, lines: string[], stop (): Promise<void> }> {
  const { config, lines, policyDir } = socketProxyConfig({ ...env, SOCKET_PATH: engine().socket }, { listen: '127.0.0.1:0', metricsListen: '', policyBase: dir, cwd: dir })
  const gateway = await startGateway(config, pino({ level: 'silent' }))
  const address = gateway.listeners[0]!.address
  t.ok(fs.existsSync(path.join(policyDir, 'socket-proxy.csv')))
  return { port: Number(address.split(':').pop()), lines, async stop () { await gateway.close() } }
}

t.teardown(() => { docker(['volume', 'rm', '-f', VOLUME], { allowFail: true }) })

// Without HAProxy there is nothing to compare with: one failure that says what to install.
const noHaproxy = toolMissing('haproxy')
if (noHaproxy !== undefined) t.fail(`${noHaproxy}; the comparisons with docker-socket-proxy's HAProxy are skipped`)

for (const set of SETS) {
  t.test(`${set.name}: every catalog operation is refused by Portcullis exactly when docker-socket-proxy refuses it`, { skip: noHaproxy === undefined ? false : 'haproxy is not installed' }, async (t) => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pcx-dsp-'))
    const haproxy = await startHaproxy(dir, set.env)
    const portcullis = await startDropIn(t, dir, set.env)
    t.teardown(async () => {
      await haproxy.stop()
      await portcullis.stop()
      fs.rmSync(dir, { recursive: true, force: true })
    })
    const requests: Array<{ op: Operation, req: ReturnType<typeof requestFor>, tooNew: boolean }> = []
    for (const op of operations) {
      for (const version of op.libpod === true ? [null] : [null, '1.41']) {
        requests.push({ op, req: requestFor(op, version), tooNew: version !== null && op.minVersion !== undefined && compareVersions(op.minVersion, version) > 0 })
      }
    }
    const tooNew: string[] = []
    const mismatches: string[] = []
    let refused = 0
    // A few at a time: a forwarded pull or stream holds its request until the 4 s cut.
    for (let i = 0; i < requests.length; i += 16) {
      await Promise.all(requests.slice(i, i + 16).map(async ({ op, req, tooNew: newer }) => {
        const [h, p] = await Promise.all([
          verdict(haproxy.port, req, /Request forbidden by administrative rules/),
          verdict(portcullis.port, req, /denied by policy/),
        ])
        if (h.verdict === 'refused') refused++
        // Intended: an operation newer than the version its path names is refused (400) by
        // the gateway whatever the variables; docker-socket-proxy forwards it when the section is on.
        if (newer) {
          if (p.status !== 400) tooNew.push(`${op.id} ${req.method} ${req.target}: Portcullis ${p.status}, expected 400`)
          return
        }
        const key = `${set.name}|${req.method} ${req.target.split('?')[0]}`
        if (h.verdict !== p.verdict && DIFFERENCES[key] === undefined) {
          mismatches.push(`${op.id} ${req.method} ${req.target}: docker-socket-proxy ${h.verdict} (${h.status}), Portcullis ${p.verdict} (${p.status} ${p.text})`)
        }
      }))
    }
    t.same(mismatches, [], `${requests.length} requests, ${refused} refused by docker-socket-proxy`)
    t.same(tooNew, [], 'operations newer than /v1.41 are refused (400) by Portcullis')
    t.ok((refused > 0 && refused < requests.length) || set.name === 'everything', 'the set refuses some requests and lets others through')
  })
}

t.test('a value docker-socket-proxy would read otherwise than it looks is an error, naming the variable', async (t) => {
  t.throws(() => socketProxyConfig({ CONTAINERS: 'true' }, { metricsListen: '' }), /CONTAINERS="true": expected 0 or 1 \(docker-socket-proxy reads "true" as false/)
  t.throws(() => socketProxyConfig({ LOG_LEVEL: 'verbose' }, { metricsListen: '' }), /LOG_LEVEL="verbose"/)
  t.throws(() => socketProxyConfig({ DISABLE_IPV6: 'maybe' }, { metricsListen: '' }), /DISABLE_IPV6="maybe"/)
  t.throws(() => socketProxyConfig({ SOCKET_PATH: 'docker.sock' }, { metricsListen: '' }), /SOCKET_PATH="docker.sock": expected the absolute path/)
  // Where that project binds: every interface, IPv4 too, or IPv4 only; no authentication.
  const dual = socketProxyConfig({ CONTAINERS: '1' }, { metricsListen: '', policyBase: os.tmpdir() })
  t.match(dual.config.listen, [{ kind: 'tcp', host: '::', port: 2375, identity: { roles: ['socket-proxy'] } }])
  t.equal(dual.config.upstream.url, 'unix:///var/run/docker.sock')
  const v4 = socketProxyConfig({ CONTAINERS: '1', DISABLE_IPV6: 'yes', SOCKET_PATH: '/run/docker.sock', LOG_LEVEL: 'warning' }, { metricsListen: '', policyBase: os.tmpdir() })
  t.match(v4.config.listen, [{ kind: 'tcp', host: '0.0.0.0', port: 2375 }])
  t.equal(v4.config.upstream.url, 'unix:///run/docker.sock')
  t.equal(v4.config.log.level, 'warn')
  for (const d of [dual.policyDir, v4.policyDir]) fs.rmSync(d, { recursive: true, force: true })
})
