/**
 * Podman as the engine behind the gateway (docs/podman.md). A private Podman service
 * (test/engine/podman.ts) is started for this file alone; the gateway in front of it has
 * three unix listeners with fixed identities: an admin, tenant A and tenant B (tenant
 * names of their own per run). Real clients, as tenant A and as admin: the docker CLI 28
 * (run, run -d, ps, logs, exec, exec -i, cp, volume and network lifecycle, rm), docker-py
 * (create, start, logs, remove), docker-compose 1.29 (up -d and down of two services
 * with a volume and a network), and Podman's own remote client (podman --remote: run,
 * exec -i, logs, volumes, networks, through /v4.3.1/libpod/...). What they did is checked
 * on Podman's own API, never through the gateway: owner labels where a tenant created,
 * nothing left after removal.
 *
 * Then what differs under Podman: tenant B's view and every libpod operation with a path
 * parameter on A's objects (answered exactly as Podman answers for a missing object, or
 * refused), event streams narrowed (Podman's volume events carry no id), volume prune
 * (Podman ORs prune filters), and the libpod routes: a path the catalog does not know, a
 * version outside the window, a tenant's privileged SpecGenerator — refused, and never
 * forwarded (checked by a relay that records what reaches Podman).
 */
import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import http from 'node:http'
import os from 'node:os'
import path from 'node:path'
import pino from 'pino'
import t from 'tap'
import { parseConfig } from '../src/config'
import { startGateway, type Gateway } from '../src/gateway'
import { operations, type Operation } from '../src/api/catalog/operations'
import { resolveTarget } from '../src/api/catalog/route'
import { api } from './engine/engine'
import { podmanAvailable, startPodman, stopPodman, type PodmanInfo } from './engine/podman'
import { CLI28, POLICIES, run, type RunResult } from './helpers/gateway'

const started = Date.now()
const RUN = randomBytes(3).toString('hex')
const TA = `pod-a${RUN}`
const TB = `pod-b${RUN}`
const TENANT_LABEL = 'io.portcullis.tenant'
const P = `pcp${RUN}`
const PYTHON = '/usr/bin/python3'
const COMPOSE = '/usr/bin/docker-compose'
const PODMAN = '/usr/bin/podman'
const WINDOW = { minVersion: '1.24', maxVersion: '1.56' }

// Run on its own (node dist/test/podman.test.js) the file would get tap's 30 s default.
t.setTimeout(600_000)

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pcpt-'))
type Who = 'admin' | 'a' | 'b'

let pm: PodmanInfo
let gw: Gateway
let socks: Record<Who, string>

// ---------------------------------------------------------------------------------
// Routing needs no engine.

t.test('libpod paths: their own version window, only versioned, never mixed with Engine API routes', async (t) => {
  const ok: Array<[string, string, string, string | null]> = [
    ['GET', '/v4.3.1/libpod/containers/json', 'ContainerListLibpod', '4.3.1'],
    ['GET', '/v4.0.0/libpod/containers/web/json', 'ContainerInspectLibpod', '4.0.0'],
    ['POST', '/v5.2.3/libpod/containers/create', 'ContainerCreateLibpod', '5.2.3'],
    ['GET', '/v4.3.1/libpod/images/localhost:5000/team/app:1/json', 'ImageInspectLibpod', '4.3.1'],
    ['DELETE', '/v4.3.1/libpod/images/remove', 'ImageDeleteAllLibpod', '4.3.1'],
    ['DELETE', '/v4.3.1/libpod/images/team/app', 'ImageDeleteLibpod', '4.3.1'],
    ['POST', '/v4.3.1/libpod/exec/abc/start', 'ExecStartLibpod', '4.3.1'],
    ['GET', '/libpod/_ping', 'SystemPingLibpod', null],
    ['GET', '/volumes/libpod', 'VolumeInspect', null],
    ['GET', '/v1.41/containers/libpod/json', 'ContainerInspect', '1.41'],
  ]
  for (const [method, url, id, version] of ok) {
    const target = resolveTarget(method, url, WINDOW)
    t.equal(target.operation.id, id, `${method} ${url} is ${id}`)
    t.equal(target.apiVersion, version, `${method} ${url}: version ${version}`)
  }
  const refused: Array<[string, string, string]> = [
    ['GET', '/libpod/containers/json', 'OPERATION_UNKNOWN'],
    ['GET', '/v4.3.1/libpod/manifests/x/json', 'OPERATION_UNKNOWN'],
    ['POST', '/v4.3.1/libpod/images/scp/x', 'OPERATION_UNKNOWN'],
    ['GET', '/v3.4.0/libpod/info', 'API_VERSION_UNSUPPORTED'],
    ['GET', '/v6.0.0/libpod/info', 'API_VERSION_UNSUPPORTED'],
    ['GET', '/v1.41/libpod/containers/json', 'PATH_AMBIGUOUS'],
    ['GET', '/v4/libpod/info', 'PATH_AMBIGUOUS'],
    ['GET', '/v04.3.1/libpod/info', 'PATH_AMBIGUOUS'],
    ['GET', '/V4.3.1/libpod/info', 'PATH_AMBIGUOUS'],
    ['GET', '/v4.3.1/containers/json', 'PATH_AMBIGUOUS'],
    ['GET', '/v4.3.1/libpod/Containers/json', 'PATH_AMBIGUOUS'],
    ['GET', '/v4.3.1/libpod/containers/a%2Fb/json', 'PATH_AMBIGUOUS'],
  ]
  for (const [method, url, code] of refused) t.throws(() => resolveTarget(method, url, WINDOW), { code }, `${method} ${url} -> ${code}`)
  const libpod = operations.filter((o) => o.libpod)
  t.ok(libpod.length > 90, `${libpod.length} libpod operations`)
  t.ok(libpod.every((o) => o.id.endsWith('Libpod') && o.path.startsWith('/libpod/') && o.unlisted), 'ids end in Libpod, paths start with /libpod/, none is in an Engine API spec')
})

// ---------------------------------------------------------------------------------
// The engine, the gateway, and helpers

if (process.getuid?.() !== 0 || !podmanAvailable()) {
  t.comment('Podman tests skipped: they need root and the podman package')
} else {
  t.before(async () => {
    pm = await startPodman()
    const g = await gateway(`unix://${pm.socket}`, 'gw')
    gw = g.gateway
    socks = g.socks
  })
  t.teardown(async () => {
    await gw?.close()
    if (pm) await stopPodman(pm)
    fs.rmSync(tmp, { recursive: true, force: true })
    t.comment(`test/podman.test.ts: ${((Date.now() - started) / 1000).toFixed(1)} s`)
  })
  scenarios()
}

async function gateway (upstream: string, name: string): Promise<{ gateway: Gateway, socks: Record<Who, string> }> {
  const dir = path.join(tmp, name)
  fs.mkdirSync(dir)
  const s: Record<Who, string> = { admin: `${dir}/admin.sock`, a: `${dir}/a.sock`, b: `${dir}/b.sock` }
  const text = `listen:
  - { unix: ${s.admin}, identity: { subject: root-op, roles: [admin] } }
  - { unix: ${s.a}, identity: { subject: alice, tenant: ${TA}, roles: [tenant] } }
  - { unix: ${s.b}, identity: { subject: bob, tenant: ${TB}, roles: [tenant] } }
upstream: ${upstream}
policy: { dir: ${POLICIES} }
audit: { file: ${dir}/audit.jsonl }
log: { level: ${process.env.PORTCULLIS_TEST_LOG ?? 'silent'} }
shutdown: { graceSeconds: 2 }
`
  const config = parseConfig(text, path.join(dir, 'portcullis.yaml'))
  return { gateway: await startGateway(config, pino({ level: config.log.level })), socks: s }
}

const host = (who: Who): string => `unix://${socks[who]}`
const out = (r: RunResult): string => r.stdout.toString()
const why = (r: RunResult): string => `exit ${String(r.code)}${r.stderr.trim() ? `: ${r.stderr.trim().slice(0, 400)}` : ''}`
const lines = (r: RunResult): string[] => out(r).split('\n').filter((l) => l !== '')

async function docker (who: Who, args: readonly string[], stdin?: string, cwd?: string): Promise<RunResult> {
  return await run(CLI28, args, { host: host(who), stdin, cwd, timeoutMs: 120_000 })
}

async function remote (who: Who, args: readonly string[], stdin?: string): Promise<RunResult> {
  // Podman reads registry credentials from DOCKER_CONFIG's config.json: an empty one.
  const home = path.join(tmp, 'home')
  if (!fs.existsSync(home)) {
    fs.mkdirSync(home, { recursive: true })
    fs.writeFileSync(path.join(home, 'config.json'), '{}\n')
  }
  return await run(PODMAN, ['--remote', '--url', host(who), ...args], { host: host(who), stdin, env: { HOME: home, DOCKER_CONFIG: home }, timeoutMs: 120_000 })
}

/** Podman's own answer (its API, not through the gateway). */
async function podman (method: string, p: string, body?: unknown): Promise<{ status: number, body: any, text: string }> {
  const r = await api(pm.socket, method, p.startsWith('/libpod') ? `/v${pm.libpodVersion}${p}` : p, 60_000, body)
  let parsed: any = null
  try { parsed = JSON.parse(r.body) } catch { parsed = null }
  return { status: r.status, body: parsed, text: r.body }
}

/** One request through a gateway listener; the answer is read for at most `ms` (streams are cut). */
async function ask (sock: string, method: string, p: string, body?: unknown, ms = 5000): Promise<{ status: number, text: string }> {
  const json = body === undefined ? undefined : JSON.stringify(body)
  return await new Promise((resolve, reject) => {
    const req = http.request({ socketPath: sock, method, path: p, agent: false, headers: json === undefined ? {} : { 'content-type': 'application/json', 'content-length': Buffer.byteLength(json) } }, (res) => {
      let text = ''
      const timer = setTimeout(() => { res.destroy(); resolve({ status: res.statusCode ?? 0, text }) }, ms)
      res.setEncoding('utf8')
      res.on('data', (c: string) => { text += c })
      res.on('end', () => { clearTimeout(timer); resolve({ status: res.statusCode ?? 0, text }) })
      res.on('error', () => { clearTimeout(timer); resolve({ status: res.statusCode ?? 0, text }) })
    })
    req.on('upgrade', (res, socket) => { socket.destroy(); resolve({ status: res.statusCode ?? 0, text: '(upgraded)' }) })
    req.on('error', reject)
    req.end(json)
  })
}

const libpodList = async (kind: 'containers' | 'volumes' | 'networks' | 'images'): Promise<any[]> =>
  (await podman('GET', `/libpod/${kind}/json${kind === 'containers' ? '?all=true' : ''}`)).body ?? []
const labelsOf = (o: any): Record<string, string> => o?.Labels ?? o?.labels ?? {}
const ownerIn = (o: any): string | undefined => labelsOf(o)[TENANT_LABEL]
const namesOf = (c: any): string[] => (c.Names ?? []).map((n: string) => n.replace(/^\//, ''))

// ---------------------------------------------------------------------------------

function scenarios (): void {
  for (const who of ['a', 'admin'] as const) {
    const label = who === 'a' ? 'tenant A' : 'admin'
    const owner = who === 'a' ? TA : undefined

    t.test(`docker CLI 28 as ${label}`, async (t) => {
      const n = `${P}-${who}-cli`
      const hi = await docker(who, ['run', '--rm', pm.image, 'echo', 'hi'])
      t.equal(out(hi), 'hi\n', `docker run --rm prints the output (${why(hi)})`)
      const id = out(await docker(who, ['run', '-d', '--name', n, pm.image, 'sh', '-c', 'echo started; exec sleep 600'])).trim()
      t.match(id, /^[0-9a-f]{64}$/, 'docker run -d prints the full id')
      const ps = await docker(who, ['ps', '--format', '{{.Names}}'])
      t.ok(lines(ps).includes(n), `docker ps lists ${n}`)
      if (who === 'a') {
        const mine = (await libpodList('containers')).filter((c) => ownerIn(c) === TA && c.State === 'running').flatMap(namesOf).sort()
        t.same([...lines(ps)].sort(), mine, 'tenant A\'s docker ps is exactly its own running containers on Podman')
      }
      let logs = ''
      for (let i = 0; i < 50 && !logs.includes('started'); i++) logs = out(await docker(who, ['logs', n]))
      t.equal(logs, 'started\n', 'docker logs')
      const ex = await docker(who, ['exec', n, 'echo', 'ok'])
      t.equal(out(ex), 'ok\n', `docker exec (${why(ex)})`)
      const cat = await docker(who, ['exec', '-i', n, 'cat'], 'x\n')
      t.equal(out(cat), 'x\n', `docker exec -i: stdin in, output back, half-close ends it (${why(cat)})`)
      const local = path.join(tmp, `${who}-cp.txt`)
      fs.writeFileSync(local, 'copied in\n')
      const cpIn = await docker(who, ['cp', local, `${n}:/tmp/in.txt`])
      t.equal(cpIn.code, 0, `docker cp into the container (${why(cpIn)})`)
      t.equal(out(await docker(who, ['exec', n, 'cat', '/tmp/in.txt'])), 'copied in\n', 'the copied file is there')
      const back = path.join(tmp, `${who}-passwd`)
      const cpOut = await docker(who, ['cp', `${n}:/etc/passwd`, back])
      t.equal(cpOut.code, 0, `docker cp out of the container (${why(cpOut)})`)
      t.match(fs.readFileSync(back, 'utf8'), /^root:x:0:0/, 'the copied-out file')
      const truth = (await libpodList('containers')).find((c) => c.Id === id)
      t.equal(ownerIn(truth), owner, who === 'a' ? 'Podman holds the container with A\'s owner label' : 'an admin\'s container carries no owner label')

      // Volumes and networks
      const v = `${P}-${who}-vol`
      const net = `${P}-${who}-net`
      t.equal(out(await docker(who, ['volume', 'create', v])).trim(), v, 'docker volume create')
      t.ok(lines(await docker(who, ['volume', 'ls', '-q'])).includes(v), 'docker volume ls lists it')
      t.equal(out(await docker(who, ['volume', 'inspect', '-f', '{{.Name}}', v])).trim(), v, 'docker volume inspect')
      t.equal(ownerIn((await libpodList('volumes')).find((x) => x.Name === v)), owner, 'the volume\'s owner label on Podman')
      const netId = out(await docker(who, ['network', 'create', net])).trim()
      t.match(netId, /^[0-9a-f]{64}$/, 'docker network create')
      t.ok(lines(await docker(who, ['network', 'ls', '--format', '{{.Name}}'])).includes(net), 'docker network ls lists it')
      t.equal(ownerIn((await libpodList('networks')).find((x) => x.name === net)), owner, 'the network\'s owner label on Podman')
      const n2 = `${n}-2`
      const r2 = await docker(who, ['run', '-d', '--name', n2, '--network', net, '-v', `${v}:/data`, '-v', `${P}-${who}-implicit:/more`, pm.image, 'sleep', '600'])
      t.equal(r2.code, 0, `docker run -d on the network with a named and an implicit volume (${why(r2)})`)
      t.equal(ownerIn((await libpodList('volumes')).find((x) => x.Name === `${P}-${who}-implicit`)), owner, 'the volume run -v created implicitly has the owner label')
      t.ok(out(await docker(who, ['network', 'inspect', '-f', '{{.Name}}', net])).includes(net), 'docker network inspect')
      t.equal(out(await docker(who, ['network', 'inspect', '-f', '{{.Name}}', 'bridge'])).trim(), 'bridge', 'the predefined bridge network, under its name')
      t.equal((await docker(who, ['rm', '-f', n2])).code, 0, 'docker rm -f')
      t.equal((await docker(who, ['network', 'rm', net])).code, 0, 'docker network rm')
      t.equal((await docker(who, ['volume', 'rm', v, `${P}-${who}-implicit`])).code, 0, 'docker volume rm')
      t.equal((await docker(who, ['rm', '-f', n])).code, 0, 'docker rm -f')
      const left = [...(await libpodList('containers')).flatMap(namesOf), ...(await libpodList('volumes')).map((x) => x.Name), ...(await libpodList('networks')).map((x) => x.name)]
      t.same(left.filter((x) => x.startsWith(`${P}-${who}-`)), [], 'nothing of it is left on Podman')
    })

    t.test(`docker-py as ${label}`, async (t) => {
      const n = `${P}-${who}-py`
      const script = `
import json, docker
c = docker.from_env(timeout=120)
x = c.containers.create(${JSON.stringify(pm.image)}, ['sh', '-c', 'echo out; echo err >&2'], name=${JSON.stringify(n)}, labels={'made-by': 'docker-py'})
x.start()
status = x.wait()['StatusCode']
logs = x.logs().decode()
x.reload()
labels = x.labels
listed = [y.name for y in c.containers.list(all=True)]
x.remove()
print(json.dumps({'status': status, 'logs': logs, 'labels': labels, 'listed': listed}))
`
      const r = await run(PYTHON, ['-c', script], { host: host(who), timeoutMs: 120_000 })
      t.equal(r.code, 0, why(r))
      const res = JSON.parse(out(r) || '{}')
      t.equal(res.status, 0, 'wait: exit 0')
      t.same([...(res.logs ?? '').split('\n')].sort(), ['', 'err', 'out'], 'logs: stdout and stderr')
      t.equal(res.labels?.['made-by'], 'docker-py', 'the client\'s label')
      // A tenant sees its objects without the owner labels (src/gateway/tenancy/labels.ts); Podman holds them (checked above).
      t.equal(res.labels?.[TENANT_LABEL], undefined, 'no owner label in the client\'s view')
      t.ok(res.listed?.includes(n), 'containers.list(all=True) lists it')
      if (who === 'a') {
        const mine = new Set((await libpodList('containers')).filter((c) => ownerIn(c) === TA).flatMap(namesOf))
        t.ok((res.listed as string[]).every((x) => mine.has(x) || x === n), 'only A\'s containers are listed')
      }
      t.notOk((await libpodList('containers')).some((c) => namesOf(c).includes(n)), 'removed on Podman')
    })

    t.test(`docker-compose 1.29 as ${label}`, async (t) => {
      const project = `${P}${who}c`
      const dir = path.join(tmp, `compose-${who}`)
      fs.mkdirSync(dir)
      fs.writeFileSync(path.join(dir, 'docker-compose.yml'), `services:
  web:
    image: ${pm.image}
    command: sleep 600
    stop_grace_period: 1s
    volumes: [data:/data]
    networks: [back]
  worker:
    image: ${pm.image}
    command: sleep 600
    stop_grace_period: 1s
    volumes: [data:/srv]
    networks: [back]
volumes:
  data: {}
networks:
  back: {}
`)
      const compose = async (...args: string[]): Promise<RunResult> => await run(COMPOSE, ['--ansi', 'never', '-p', project, ...args], { host: host(who), cwd: dir, timeoutMs: 300_000 })
      const up = await compose('up', '-d')
      t.equal(up.code, 0, `up -d (${why(up)})`)
      const containers = (await libpodList('containers')).filter((c) => labelsOf(c)['com.docker.compose.project'] === project)
      t.equal(containers.length, 2, 'two service containers on Podman')
      t.ok(containers.every((c) => c.State === 'running'), 'both running')
      t.ok(containers.every((c) => ownerIn(c) === owner), who === 'a' ? 'both with A\'s owner label' : 'neither with an owner label')
      t.equal(ownerIn((await libpodList('volumes')).find((x) => x.Name === `${project}_data`)), owner, 'the project\'s volume')
      t.equal(ownerIn((await libpodList('networks')).find((x) => x.name === `${project}_back`)), owner, 'the project\'s network')
      const ps = await compose('ps', '-q')
      t.equal(lines(ps).length, 2, 'compose ps')
      const down = await compose('down', '-v')
      t.equal(down.code, 0, `down -v (${why(down)})`)
      const left = [...(await libpodList('containers')).flatMap(namesOf), ...(await libpodList('volumes')).map((x) => x.Name), ...(await libpodList('networks')).map((x) => x.name)]
      t.same(left.filter((x) => x.startsWith(project)), [], 'nothing of the project is left on Podman')
    })

    t.test(`podman --remote (Podman's own API) as ${label}`, async (t) => {
      const n = `${P}-${who}-rm`
      const hi = await remote(who, ['run', '--rm', pm.image, 'echo', 'hello'])
      t.equal(out(hi), 'hello\n', `podman run --rm (${why(hi)})`)
      const id = out(await remote(who, ['run', '-d', '--name', n, pm.image, 'sh', '-c', 'echo started; exec sleep 600'])).trim()
      t.match(id, /^[0-9a-f]{64}$/, 'podman run -d')
      t.ok(lines(await remote(who, ['ps', '--format', '{{.Names}}'])).includes(n), 'podman ps')
      const cat = await remote(who, ['exec', '-i', n, 'cat'], 'piped\n')
      t.equal(out(cat), 'piped\n', `podman exec -i: stdin sent after the request reaches the engine (${why(cat)})`)
      const code = await remote(who, ['exec', n, 'sh', '-c', 'exit 3'])
      t.equal(code.code, 3, 'the exec\'s exit code')
      t.equal(out(await remote(who, ['logs', n])), 'started\n', 'podman logs')
      t.equal(ownerIn((await libpodList('containers')).find((c) => c.Id === id)), owner, 'owner label on Podman')
      const v = `${P}-${who}-rvol`
      t.equal(out(await remote(who, ['volume', 'create', v])).trim(), v, 'podman volume create')
      t.equal(ownerIn((await libpodList('volumes')).find((x) => x.Name === v)), owner, 'the volume\'s owner label')
      const net = `${P}-${who}-rnet`
      t.equal(out(await remote(who, ['network', 'create', net])).trim(), net, 'podman network create')
      t.equal(ownerIn((await libpodList('networks')).find((x) => x.name === net)), owner, 'the network\'s owner label')
      const inNet = await remote(who, ['run', '--rm', '--network', net, '-v', `${v}:/d`, pm.image, 'ls', '-d', '/d'])
      t.equal(out(inNet), '/d\n', `podman run on the network with the volume (${why(inNet)})`)
      t.ok(lines(await remote(who, ['volume', 'ls', '--format', '{{.Name}}'])).includes(v), 'podman volume ls')
      const nets = lines(await remote(who, ['network', 'ls', '--format', '{{.Name}}']))
      t.ok(nets.includes(net) && nets.includes('podman'), 'podman network ls: its network and the default one')
      t.equal((await remote(who, ['rm', '-f', '-t', '0', n])).code, 0, 'podman rm -f')
      t.equal((await remote(who, ['network', 'rm', net])).code, 0, 'podman network rm')
      t.equal((await remote(who, ['volume', 'rm', v])).code, 0, 'podman volume rm')
      const left = [...(await libpodList('containers')).flatMap(namesOf), ...(await libpodList('volumes')).map((x) => x.Name), ...(await libpodList('networks')).map((x) => x.name)]
      t.same(left.filter((x) => x.startsWith(`${P}-${who}-r`)), [], 'nothing of it is left on Podman')
    })
  }

  t.test('two tenants and an admin: views, references, events and prunes under Podman', async (t) => {
    // A's objects, B's, and an admin's without owner labels.
    const a = `${P}-xa`
    const b = `${P}-xb`
    const adm = `${P}-xadmin`
    for (const [who, n] of [['a', a], ['b', b], ['admin', adm]] as const) {
      const r = await docker(who, ['run', '-d', '--name', n, '-v', `${n}-vol:/d`, pm.image, 'sleep', '600'])
      t.equal(r.code, 0, `${who} runs ${n} (${why(r)})`)
      t.equal((await docker(who, ['network', 'create', `${n}-net`])).code, 0, `${who} creates ${n}-net`)
    }
    const aId = out(await docker('a', ['inspect', '-f', '{{.Id}}', a])).trim()

    await t.test('each tenant sees only its own, the admin everything', async (t) => {
      const names = async (who: Who, args: string[]): Promise<string[]> => lines(await docker(who, args)).filter((x) => x.startsWith(`${P}-x`)).sort()
      t.same(await names('a', ['ps', '-a', '--format', '{{.Names}}']), [a], 'A: ps -a')
      t.same(await names('b', ['ps', '-a', '--format', '{{.Names}}']), [b], 'B: ps -a')
      t.same(await names('admin', ['ps', '-a', '--format', '{{.Names}}']), [a, adm, b], 'admin: ps -a')
      t.same(await names('a', ['volume', 'ls', '-q']), [`${a}-vol`], 'A: volume ls')
      t.same(await names('b', ['network', 'ls', '--format', '{{.Name}}']), [`${b}-net`], 'B: network ls')
      const libpod = async (who: Who, kind: string): Promise<string[]> => {
        const r = await ask(socks[who], 'GET', `/v${pm.libpodVersion}/libpod/${kind}/json${kind === 'containers' ? '?all=true' : ''}`)
        return (JSON.parse(r.text) as any[]).map((o) => o.Names?.[0] ?? o.Name ?? o.name).filter((x: string) => x.startsWith(`${P}-x`)).sort()
      }
      t.same(await libpod('a', 'containers'), [a], 'A: libpod containers/json, only its own')
      t.same(await libpod('a', 'volumes'), [`${a}-vol`], 'A: libpod volumes/json')
      t.same(await libpod('a', 'networks'), [`${a}-net`], 'A: libpod networks/json')
      t.same(await libpod('b', 'containers'), [b], 'B: libpod containers/json')
      t.same(await libpod('admin', 'containers'), [a, adm, b], 'admin: libpod containers/json, everything')
      const viewA = JSON.parse((await ask(socks.a, 'GET', `/v${pm.libpodVersion}/libpod/containers/${a}/json`)).text)
      const viewAdmin = JSON.parse((await ask(socks.admin, 'GET', `/v${pm.libpodVersion}/libpod/containers/${a}/json`)).text)
      t.equal(viewA?.Config?.Labels?.[TENANT_LABEL], undefined, 'A\'s libpod inspect of its container shows no owner label')
      t.equal(viewAdmin?.Config?.Labels?.[TENANT_LABEL], TA, 'the admin\'s shows it')
    })

    await t.test('another tenant\'s object answers exactly as Podman answers for a missing one', async (t) => {
      const nope = `${P}-nope`
      const pairs: Array<[string[], string]> = [
        [['inspect', '--type', 'container', a], 'inspect'],
        [['logs', a], 'logs'],
        [['exec', a, 'true'], 'exec'],
        [['stop', a], 'stop'],
        [['rm', '-f', a], 'rm -f'],
        [['volume', 'inspect', `${a}-vol`], 'volume inspect'],
        [['volume', 'rm', `${a}-vol`], 'volume rm'],
        [['network', 'inspect', `${a}-net`], 'network inspect'],
        [['network', 'rm', `${a}-net`], 'network rm'],
        [['inspect', aId], 'inspect by full id'],
      ]
      for (const [args, what] of pairs) {
        const theirs = await docker('b', args)
        const none = await docker('admin', args.map((x) => x.replace(a, nope).replace(aId, 'f'.repeat(64))))
        // (docker rm -f succeeds for a missing container: the CLI ignores the engine's 404.)
        t.equal(theirs.code, none.code, `B: docker ${what} of A's object exits as for a missing one (${theirs.code})`)
        t.equal(theirs.stderr.replaceAll(aId, 'ID').replaceAll(a, 'NAME'), none.stderr.replaceAll('f'.repeat(64), 'ID').replaceAll(nope, 'NAME'), `B: docker ${what}: the message Podman gives for a missing one`)
      }
      t.equal(out(await docker('a', ['inspect', '-f', '{{.State.Running}}', a])).trim(), 'true', 'A\'s container still runs')
      t.ok(lines(await docker('a', ['volume', 'ls', '-q'])).includes(`${a}-vol`), 'A\'s volume is still there')
    })

    await t.test('B on A\'s objects through every libpod operation with a path parameter', async (t) => {
      // An exec of A's (created, never started), A's committed image.
      const exec = await ask(socks.a, 'POST', `/v${pm.libpodVersion}/libpod/containers/${a}/exec`, { Cmd: ['true'] })
      t.equal(exec.status, 201, `A creates an exec (${exec.text.trim()})`)
      const execId = String(JSON.parse(exec.text).Id)
      const image = `${TA}/committed:1`
      t.equal((await docker('a', ['commit', a, image])).code, 0, 'A commits an image of its own')
      const imageId = out(await docker('a', ['image', 'inspect', '-f', '{{.Id}}', image])).trim().replace(/^sha256:/, '')
      const ref: Record<string, string> = { container: a, exec: execId, image, volume: `${a}-vol`, network: `${a}-net`, pod: `${a}-pod`, secret: `${a}-secret`, system: a }
      const random: Record<string, string> = { container: `${P}-rnd`, exec: 'e'.repeat(64), image: `${TA}/rnd:1`, volume: `${P}-rnd`, network: `${P}-rnd`, pod: `${P}-rnd`, secret: `${P}-rnd`, system: `${P}-rnd` }
      // Podman's route takes a one-segment name here: the image by id.
      const SINGLE: Record<string, [string, string]> = { ImageChangesLibpod: [imageId.slice(0, 12), 'abcdef012345'] }
      const QUERY: Record<string, string> = {
        ContainerLogsLibpod: '?stdout=true',
        ContainerArchiveLibpod: '?path=/',
        PutContainerArchiveLibpod: '?path=/',
        ContainerRenameLibpod: `?name=${P}-renamed`,
        ContainerResizeLibpod: '?h=10&w=10',
        ExecResizeLibpod: '?h=10&w=10',
        ImageTagLibpod: `?repo=${TB}/x&tag=1`,
        ContainerStatsLibpod: '?stream=false',
      }
      const BODY: Record<string, unknown> = {
        ContainerExecLibpod: { Cmd: ['true'] },
        ExecStartLibpod: { Detach: true },
        NetworkConnectLibpod: { container: b },
        NetworkDisconnectLibpod: { Container: b },
      }
      const kindOf = (op: Operation): string => op.id.startsWith('Exec') ? 'exec' : op.kind === 'build' ? 'image' : op.kind
      const url = (op: Operation, name: string): string => `/v${pm.libpodVersion}${op.path.replace(/\{\w+\*?\}/, name.split('/').map(encodeURIComponent).join('/'))}${QUERY[op.id] ?? ''}`
      const strip = (text: string, name: string): string => text.replaceAll(JSON.stringify(name).slice(1, -1), 'REF').replaceAll(name, 'REF')
      let refused = 0
      let missing = 0
      const ops = operations.filter((o) => o.libpod && o.param)
      for (const op of ops) {
        const kind = kindOf(op)
        const [mine, rnd] = SINGLE[op.id] ?? [ref[kind], random[kind]]
        const theirs = await ask(socks.b, op.method, url(op, mine), BODY[op.id], 3000)
        if (theirs.status === 403) { refused++; t.pass(`${op.id}: refused for B`); continue }
        const none = await ask(socks.b, op.method, url(op, rnd), BODY[op.id], 3000)
        t.equal(theirs.status, none.status, `${op.id}: the status B gets for A's ${kind} is the one for a missing ${kind} (${theirs.status})`)
        t.equal(strip(theirs.text, mine), strip(none.text, rnd), `${op.id}: and the body`)
        // What Podman itself answers for the missing one (Podman decides nothing for A's object).
        const direct = await podman(op.method, url(op, rnd).replace(`/v${pm.libpodVersion}`, ''), BODY[op.id])
        t.equal(`${none.status} ${strip(none.text, rnd)}`, `${direct.status} ${strip(direct.text, rnd)}`, `${op.id}: as Podman answers for a missing ${kind}`)
        missing++
      }
      t.comment(`${ops.length} libpod operations with a path parameter: ${missing} answered as missing, ${refused} refused`)
      t.equal(out(await docker('a', ['inspect', '-f', '{{.State.Running}} {{.Name}}', a])).trim(), `true /${a}`, 'A\'s container still runs under its name')
      t.equal((await podman('GET', `/libpod/exec/${execId}/json`)).status, 200, 'A\'s exec is still there')
      t.equal((await podman('GET', `/libpod/volumes/${a}-vol/exists`)).status, 204, 'A\'s volume is still there')
      t.equal((await podman('GET', `/libpod/networks/${a}-net/exists`)).status, 204, 'A\'s network is still there')
      t.equal((await podman('GET', `/libpod/images/${image}/exists`)).status, 204, 'A\'s image is still there')
      t.equal((await ask(socks.a, 'GET', `/v${pm.libpodVersion}/libpod/containers/${a}/json`)).status, 200, 'A inspects its container through libpod')
      t.equal((await ask(socks.a, 'GET', `/v${pm.libpodVersion}/libpod/images/${image}/json`)).status, 200, 'A inspects its image through libpod')
    })

    await t.test('events: a tenant follows its own containers and volumes (Podman\'s volume events carry no id)', async (t) => {
      const watch = (who: Who): { stop: () => Promise<any[]> } => {
        const child = spawn(CLI28, ['events', '--format', '{{json .}}'], { env: { ...process.env, DOCKER_HOST: host(who) }, stdio: ['ignore', 'pipe', 'ignore'] })
        let text = ''
        child.stdout.on('data', (d: Buffer) => { text += d.toString() })
        const closed = new Promise<void>((resolve) => child.on('close', () => resolve()))
        return { async stop () { child.kill('SIGTERM'); await closed; return text.split('\n').filter(Boolean).map((l) => JSON.parse(l)) } }
      }
      const wa = watch('a')
      const wb = watch('b')
      await new Promise((resolve) => setTimeout(resolve, 1000))
      const n = `${P}-ev`
      await docker('a', ['run', '--rm', '--name', n, pm.image, 'true'])
      await docker('a', ['volume', 'create', `${n}-vol`])
      // Podman writes events to a file its event streams poll: a volume removed before its
      // create event is read is no longer there to be recognised as A's (docs/podman.md).
      await new Promise((resolve) => setTimeout(resolve, 2000))
      await docker('a', ['volume', 'rm', `${n}-vol`])
      await docker('admin', ['volume', 'create', `${n}-admin`])
      await docker('admin', ['volume', 'rm', `${n}-admin`])
      await new Promise((resolve) => setTimeout(resolve, 1500))
      const [ea, eb] = await Promise.all([wa.stop(), wb.stop()])
      const seen = (evs: any[]): string[] => evs.map((e) => `${e.Type} ${e.Action} ${e.Actor?.Attributes?.name ?? ''}`)
      t.comment(`A saw: ${seen(ea).join('; ')}`)
      t.ok(seen(ea).includes(`container create ${n}`), 'A sees its container created')
      t.ok(seen(ea).includes(`container remove ${n}`), 'A sees its container removed (Podman says remove)')
      t.ok(seen(ea).includes(`volume create ${n}-vol`) && seen(ea).includes(`volume remove ${n}-vol`), 'A sees its volume created and removed')
      t.notOk(seen(ea).some((e) => e.includes(`${n}-admin`)), 'A sees nothing of the admin\'s volume')
      t.same(seen(eb).filter((e) => e.includes(n)), [], 'B sees none of it')
    })

    await t.test('volume prune: Podman ORs prune filters, so a tenant\'s prune takes none', async (t) => {
      const spare = `${P}-spare`
      await docker('a', ['volume', 'create', `${spare}-a`])
      await docker('admin', ['volume', 'create', '--label', 'keep=1', `${spare}-admin`])
      const filtered = await docker('a', ['volume', 'prune', '-f', '--filter', 'label=keep=1'])
      t.not(filtered.code, 0, 'A\'s prune with a filter is refused')
      t.match(filtered.stderr, /podman-volume-prune/, 'naming the rule')
      const plain = await docker('a', ['volume', 'prune', '-f'])
      t.equal(plain.code, 0, `A's prune without filters (${why(plain)})`)
      const vols = (await libpodList('volumes')).map((v) => v.Name)
      t.notOk(vols.includes(`${spare}-a`), 'removed A\'s unused volume')
      t.ok(vols.includes(`${spare}-admin`), 'kept the admin\'s')
      t.ok(vols.includes(`${b}-vol`) && vols.includes(`${a}-vol`), 'kept the volumes in use')
      await docker('admin', ['volume', 'rm', `${spare}-admin`])
    })

    await t.test('libpod as a tenant: the same body rules, the core set scoped, the rest refused', async (t) => {
      const v = `/v${pm.libpodVersion}/libpod`
      const priv = await ask(socks.a, 'POST', `${v}/containers/create`, { image: pm.image, name: `${P}-priv`, privileged: true })
      t.equal(priv.status, 403, 'a privileged SpecGenerator is refused')
      t.match(priv.text, /no-privileged/, 'by no-privileged')
      const bind = await ask(socks.a, 'POST', `${v}/containers/create`, { image: pm.image, mounts: [{ destination: '/h', type: 'bind', source: '/etc' }] })
      t.match(`${bind.status} ${bind.text}`, /^403 .*host-binds/, 'a bind of a host path: host-binds')
      const pod = await ask(socks.a, 'POST', `${v}/containers/create`, { image: pm.image, pod: 'any' })
      t.match(`${pod.status} ${pod.text}`, /^403 .*libpod-spec-fields/, 'a field outside the tenant\'s set (pod): libpod-spec-fields')
      const cni = await ask(socks.a, 'POST', `${v}/containers/create`, { image: pm.image, cni_networks: [`${b}-net`] })
      t.match(`${cni.status} ${cni.text}`, /^403 .*libpod-spec-fields/, 'another tenant\'s network through cni_networks: libpod-spec-fields')
      const theirNet = await ask(socks.a, 'POST', `${v}/containers/create`, { image: pm.image, Networks: { [`${b}-net`]: {} } })
      t.equal(theirNet.status, 500, 'another tenant\'s network in Networks: as Podman answers for a missing network')
      t.notOk((await libpodList('containers')).some((c) => ownerIn(c) === TA && !namesOf(c).includes(a)), 'none of these created anything')
      const made = await ask(socks.a, 'POST', `${v}/containers/create`, { image: pm.image, name: `${P}-made`, command: ['true'] })
      t.equal(made.status, 201, `a plain SpecGenerator is created (${made.text.trim()})`)
      const c = (await libpodList('containers')).find((x) => namesOf(x).includes(`${P}-made`))
      t.equal(ownerIn(c), TA, 'with A\'s owner label')
      const hc = (await podman('GET', `/libpod/containers/${P}-made/json`)).body?.HostConfig
      t.same([hc?.Memory, hc?.PidsLimit, hc?.SecurityOpt?.includes('no-new-privileges')], [1073741824, 1024, true], 'and the tenant\'s safe defaults: 1 GiB, 1024 PIDs, no-new-privileges')
      t.equal((await podman('GET', `/libpod/containers/${P}-made/json`)).body?.Config?.User, '65534:65534', 'and no user: the tenant\'s uid:gid (tenancy.yaml users)')
      for (const [spec, rule] of [[{ user: '0' }, 'tenant-user'], [{ user: 'root' }, 'numeric-user'], [{ user: '1000:1000', groups: ['0'] }, 'tenant-user']] as const) {
        const r = await ask(socks.a, 'POST', `${v}/containers/create`, { image: pm.image, command: ['true'], ...spec })
        t.match(`${r.status} ${r.text}`, new RegExp(`^403 .*rule ${rule}`), `SpecGenerator ${JSON.stringify(spec)}: refused by ${rule}`)
      }
      const rootExec = await ask(socks.a, 'POST', `${v}/containers/${a}/exec`, { Cmd: ['id'], User: '0' })
      t.match(`${rootExec.status} ${rootExec.text}`, /^403 .*rule tenant-user/, 'a libpod exec as 0: refused by tenant-user')
      t.equal((await ask(socks.a, 'DELETE', `${v}/containers/${P}-made`)).status, 200, 'A removes it through libpod')
      t.equal((await ask(socks.a, 'GET', `${v}/pods/json`)).text.trim(), '[]', 'A sees no pods')
      t.equal((await ask(socks.a, 'GET', `${v}/info`)).status, 403, 'libpod info: refused')
      t.equal((await ask(socks.a, 'POST', `${v}/pods/create`, {})).status, 403, 'pod create: refused')
      t.equal((await ask(socks.a, 'GET', `${v}/containers/stats?stream=false`)).status, 403, 'stats of every container: refused')
      const pull = await ask(socks.a, 'POST', `${v}/images/pull?reference=busybox`)
      t.match(`${pull.status} ${pull.text}`, /^403 .*libpod-short-names/, 'a pull of a short name: refused (Podman\'s search registries are not the allow-list)')
      const admin = await ask(socks.admin, 'POST', `${v}/containers/create`, { image: pm.image, name: `${P}-adminpriv`, privileged: true, command: ['true'] })
      t.equal(admin.status, 201, 'an admin creates a privileged container')
      await ask(socks.admin, 'DELETE', `${v}/containers/${P}-adminpriv`)
      t.equal((await ask(socks.admin, 'GET', `${v}/info`)).status, 200, 'an admin reads libpod info')
    })

    for (const n of [a, b, adm]) {
      await docker('admin', ['rm', '-f', n])
      await docker('admin', ['volume', 'rm', `${n}-vol`])
      await docker('admin', ['network', 'rm', `${n}-net`])
    }
    await docker('admin', ['rmi', `${TA}/committed:1`])
  })

  t.test('refused libpod requests never reach Podman', async (t) => {
    // A relay between a second gateway and Podman records every request that reaches Podman.
    const seen: string[] = []
    const relaySock = path.join(tmp, 'relay.sock')
    const relay = http.createServer((req, res) => {
      seen.push(`${req.method} ${req.url}`)
      const up = http.request({ socketPath: pm.socket, method: req.method, path: req.url, headers: req.headers }, (r) => { res.writeHead(r.statusCode ?? 502, r.headers); r.pipe(res) })
      up.on('error', () => res.destroy())
      req.pipe(up)
    })
    await new Promise<void>((resolve) => relay.listen(relaySock, resolve))
    const g = await gateway(`unix://${relaySock}`, 'relayed')
    t.teardown(async () => { await g.gateway.close(); relay.closeAllConnections(); await new Promise((resolve) => relay.close(resolve)) })
    const v = `/v${pm.libpodVersion}/libpod`
    const cases: Array<[Who, string, string, unknown, number]> = [
      ['admin', 'GET', `${v}/manifests/${P}/json`, undefined, 404],
      ['admin', 'POST', `${v}/images/scp/${P}`, undefined, 404],
      ['admin', 'GET', `/libpod/containers/${P}/json`, undefined, 404],
      ['admin', 'GET', `/v3.4.0/libpod/containers/${P}/json`, undefined, 400],
      ['admin', 'GET', `/v1.41/libpod/containers/${P}/json`, undefined, 400],
      ['admin', 'GET', `/v4/libpod/containers/${P}/json`, undefined, 400],
      ['a', 'POST', `${v}/containers/create?marker=${P}`, { image: pm.image, privileged: true }, 403],
      ['a', 'POST', `${v}/containers/create?marker=${P}`, { image: pm.image, conmon_pid_file: '/etc/passwd' }, 403],
      ['a', 'POST', `${v}/containers/create?marker=${P}`, { image: pm.image, netns: { nsmode: 'host' } }, 403],
      ['a', 'POST', `${v}/pods/create?marker=${P}`, {}, 403],
      ['a', 'POST', `${v}/system/prune?marker=${P}`, undefined, 403],
    ]
    for (const [who, method, p, body, status] of cases) {
      const r = await ask(g.socks[who], method, p, body)
      t.equal(r.status, status, `${who}: ${method} ${p} -> ${status} (${r.text.trim().slice(0, 160)})`)
    }
    t.same(seen.filter((s) => s.includes(P)), [], 'none of them reached Podman')
    t.ok(seen.some((s) => s.startsWith('GET /events')), '(the relay does carry the gateway\'s own requests)')
  })
}
