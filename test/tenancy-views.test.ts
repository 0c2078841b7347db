/**
 * Two tenants at once through one gateway, with real clients on the real engine:
 * tenant A with the docker CLI 28, tenant B with docker-py (python3-docker 5.0.3, a
 * script in test/fixtures/tenancy_b.py) and docker-compose 1.29 (two services, a named
 * volume and a network), both sending their bearer token from config.json HttpHeaders.
 * Then every view a tenant has of the engine (ps -a, volume ls, network ls, events,
 * system df -v, info) shows it its own objects only, in both directions, while an admin
 * sees both; names another tenant holds are refused with a clear 409 (nothing created);
 * a prune removes only the pruning tenant's objects; and quotas (a policy directory of
 * the test's own) refuse creates and `docker update` naming the rule. All of it on the
 * run's plain engine (not a swarm manager, as most users run Docker); `docker service
 * scale` against the quotas runs on the swarm-mode engine.
 *
 * Other test files share the engine and act as tenant team-a: the tenants here have
 * names of their own per run (team-a-<hex>, team-b-<hex>), so that what a tenant sees
 * can be compared exactly with what the engine holds under its owner label.
 */
import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import jwt from 'jsonwebtoken'
import t, { type Test } from 'tap'
import { CLI28, engine, POLICIES, policiesOnSharedBridge, run, servicesWithoutNoNewPrivileges, startTestGateway, swarmEngine, uniqueName, type RunResult, type TestGateway } from './helpers/gateway'

const SYSTEM_PYTHON = '/usr/bin/python3'
const COMPOSE = '/usr/bin/docker-compose'
const B_SCRIPT = path.resolve(__dirname, '../../test/fixtures/tenancy_b.py')
const TENANT_LABEL = 'io.portcullis.tenant'
const IMAGE = engine().image

const SECRET = randomBytes(32).toString('hex')
const RUN = randomBytes(3).toString('hex')
const TA = `team-a-${RUN}`
const TB = `team-b-${RUN}`
const TQ = `team-a-q${RUN}`
/** Every object of this file is named P-…; A's P-a-…, B's P-b-…, compose's P-bc_…, the quota tenant's P-q-…. */
const P = uniqueName('pcv')
const A = `${P}-a`
const B = `${P}-b`
const PROJECT = `${P}-bc`
const Q = `${P}-q`

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pcv-'))
t.teardown(() => fs.rmSync(tmp, { recursive: true, force: true }))

type Who = 'a' | 'b' | 'admin' | 'q'
const CLAIMS: Record<Who, object> = {
  a: { sub: 'alice', tenant: TA, roles: ['tenant'] },
  b: { sub: 'bob', tenant: TB, roles: ['tenant'] },
  admin: { sub: 'root-op', roles: ['admin'] },
  q: { sub: 'quinn', tenant: TQ, roles: ['tenant'] },
}
const CONFIG: Record<Who, string> = Object.fromEntries(Object.entries(CLAIMS).map(([who, claims]) => {
  const dir = path.join(tmp, `cfg-${who}`)
  fs.mkdirSync(dir)
  const token = jwt.sign({ ...claims, exp: Math.floor(Date.now() / 1000) + 3 * 3600 }, SECRET, { algorithm: 'HS256' })
  fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify({ HttpHeaders: { Authorization: `Bearer ${token}` } }))
  return [who, dir]
})) as Record<Who, string>

let gw: TestGateway
const as = async (who: Who, args: readonly string[], host = gw.dockerHost): Promise<RunResult> =>
  await run(CLI28, args, { host, env: { DOCKER_CONFIG: CONFIG[who] }, timeoutMs: 180_000 })
const direct = async (args: readonly string[]): Promise<RunResult> => await run(CLI28, args, { host: engine().dockerHost, timeoutMs: 120_000 })
const lines = (r: RunResult): string[] => r.stdout.toString().split('\n').filter((l) => l !== '')
const sorted = (xs: Iterable<string>): string[] => [...xs].sort()
const out = (r: RunResult): Record<string, unknown> => r.code === 0 ? {} : { stderr: r.stderr.trim() }

/** tenant B's docker-py script. */
async function python (action: string, args: object): Promise<any> {
  const r = await run(SYSTEM_PYTHON, [B_SCRIPT, action, JSON.stringify(args)], { host: gw.dockerHost, env: { DOCKER_CONFIG: CONFIG.b }, timeoutMs: 300_000 })
  if (r.code !== 0) throw new Error(`tenancy_b.py ${action} failed (${r.code}): ${r.stderr}`)
  return JSON.parse(r.stdout.toString())
}

const COMPOSE_FILE = `services:
  web:
    image: ${IMAGE}
    command: sleep 600
    stop_grace_period: 1s
    volumes: [data:/data]
    networks: [back]
  worker:
    image: ${IMAGE}
    command: sleep 600
    stop_grace_period: 1s
    volumes: [data:/srv]
    networks: [back]
volumes:
  data: {}
networks:
  back: {}
`
const composeDir = path.join(tmp, 'compose')
fs.mkdirSync(composeDir)
fs.writeFileSync(path.join(composeDir, 'docker-compose.yml'), COMPOSE_FILE)
async function compose (host: string, who: Who | null, ...args: string[]): Promise<RunResult> {
  return await run(COMPOSE, ['--ansi', 'never', '-p', PROJECT, ...args], { host, cwd: composeDir, env: who ? { DOCKER_CONFIG: CONFIG[who] } : {}, timeoutMs: 300_000 })
}

/** A live `docker events` as `who` (from now on), stopped by stop(): the JSON events it printed. */
function watchEvents (who: Who): { stop (): Promise<any[]> } {
  const child = spawn(CLI28, ['events', '--format', '{{json .}}'], { env: { ...process.env, DOCKER_HOST: gw.dockerHost, DOCKER_CONFIG: CONFIG[who] }, stdio: ['ignore', 'pipe', 'pipe'] })
  let text = ''
  let err = ''
  child.stdout.on('data', (b: Buffer) => { text += b.toString() })
  child.stderr.on('data', (b: Buffer) => { err += b.toString() })
  const closed = new Promise<void>((resolve) => child.on('close', () => resolve()))
  return {
    async stop () {
      child.kill('SIGTERM')
      await closed
      if (err.trim() !== '') t.comment(`docker events as ${who}: ${err.trim()}`)
      return text.split('\n').filter((l) => l !== '').map((l) => JSON.parse(l))
    },
  }
}

/** What the engine holds under a tenant's owner label (asked directly, not through the gateway). */
interface Truth { tenant: string, containers: Map<string, string>, volumes: Set<string>, networks: Map<string, string>, images: Set<string> }
async function truth (tenant: string): Promise<Truth> {
  const label = `label=${TENANT_LABEL}=${tenant}`
  const pairs = (r: RunResult): Map<string, string> => new Map(lines(r).map((l) => { const [id, name] = l.split(' '); return [name, id] }))
  return {
    tenant,
    containers: pairs(await direct(['ps', '-a', '--no-trunc', '--filter', label, '--format', '{{.ID}} {{.Names}}'])),
    volumes: new Set(lines(await direct(['volume', 'ls', '--filter', label, '--format', '{{.Name}}']))),
    networks: pairs(await direct(['network', 'ls', '--no-trunc', '--filter', label, '--format', '{{.ID}} {{.Name}}'])),
    images: new Set(lines(await direct(['images', '-q', '--no-trunc', '--filter', label]))),
  }
}

/** Every name and id (full and short) of a tenant's objects: none may appear in another tenant's views. */
function marks (x: Truth): string[] {
  const ids = [...x.containers.values(), ...x.networks.values(), ...[...x.images].map((i) => i.replace(/^sha256:/, ''))]
  return [...x.containers.keys(), ...x.volumes, ...x.networks.keys(), ...ids, ...ids.map((i) => i.slice(0, 12))]
}
function leaks (text: string, of: Truth): string[] { return marks(of).filter((m) => text.includes(m)) }

const PREDEFINED = ['bridge', 'host', 'none']

let since = 0
let until = 0
const live: Partial<Record<Who, any[]>> = {}
let ta: Truth
let tb: Truth

t.before(async () => {
  // Tenants on the engine's bridge: these views include the bridge's Containers, narrowed per tenant.
  gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, undefined, policiesOnSharedBridge())
})

t.teardown(async () => {
  // Everything of this file's tenants, on the engine directly (they are unique to this run).
  await compose(engine().dockerHost, null, 'down', '-v', '-t', '1').catch(() => undefined)
  for (const tenant of [TA, TB, TQ]) {
    const label = `label=${TENANT_LABEL}=${tenant}`
    for (const s of lines(await direct(['service', 'ls', '-q', '--filter', label]))) await direct(['service', 'rm', s])
    const cs = lines(await direct(['ps', '-aq', '--filter', label]))
    if (cs.length) await direct(['rm', '-f', '-v', ...cs])
    const vs = lines(await direct(['volume', 'ls', '-q', '--filter', label]))
    if (vs.length) await direct(['volume', 'rm', '-f', ...vs])
    const ns = lines(await direct(['network', 'ls', '-q', '--filter', label]))
    if (ns.length) await direct(['network', 'rm', ...ns])
    const is = lines(await direct(['images', '-q', '--filter', label]))
    if (is.length) await direct(['rmi', '-f', ...new Set(is)])
  }
  const admins = lines(await direct(['ps', '-aq', '--filter', `name=${P}-admin`]))
  if (admins.length) await direct(['rm', '-f', ...admins])
  await gw?.close()
})

t.test('A (docker CLI 28) and B (docker-py, docker-compose 1.29) at the same time', async (t) => {
  since = Math.floor(Date.now() / 1000) - 1
  const watchers = (['a', 'b', 'admin'] as const).map((who) => [who, watchEvents(who)] as const)
  // The streams are live once the CLI has connected; give them a moment.
  await new Promise((resolve) => setTimeout(resolve, 1500))

  const tenantA = async (): Promise<void> => {
    const steps: string[][] = [
      ['network', 'create', `${A}-net`],
      ['network', 'create', `${A}-net-unused`],
      ['volume', 'create', `${A}-vol`],
      ['volume', 'create', `${A}-vol-unused`],
      ['run', '-d', '--name', `${A}-run`, '--network', `${A}-net`, '-v', `${A}-vol:/data`, IMAGE, 'sleep', '600'],
      ['create', '--name', `${A}-stopped`, IMAGE, 'true'],
      ['run', '--name', `${A}-exited`, IMAGE, 'true'],
    ]
    for (const args of steps) {
      const r = await as('a', args)
      t.equal(r.code, 0, `A: docker ${args.join(' ')}`, out(r))
    }
  }
  const tenantB = async (): Promise<void> => {
    const [made, up] = await Promise.all([
      python('setup', { prefix: B, image: IMAGE, tag: `${TB}/built:1` }),
      compose(gw.dockerHost, 'b', 'up', '-d'),
    ])
    t.ok(made.run && made.stopped && made.image, 'B: docker-py made its network, volumes, containers and image')
    t.equal(up.code, 0, 'B: docker-compose up -d', out(up))
  }
  await Promise.all([tenantA(), tenantB()])

  const ps = await compose(gw.dockerHost, 'b', 'ps')
  t.match(ps.stdout.toString(), new RegExp(`${PROJECT}_web_1\\s+sleep 600\\s+Up`), 'B: docker-compose ps shows web up')
  t.match(ps.stdout.toString(), new RegExp(`${PROJECT}_worker_1\\s+sleep 600\\s+Up`), 'B: docker-compose ps shows worker up')

  await new Promise((resolve) => setTimeout(resolve, 1500))
  until = Math.ceil(Date.now() / 1000) + 1
  for (const [who, w] of watchers) live[who] = await w.stop()

  ta = await truth(TA)
  tb = await truth(TB)
  t.same(sorted(ta.containers.keys()), sorted([`${A}-run`, `${A}-stopped`, `${A}-exited`]), 'the engine holds A\'s containers under A\'s label')
  t.same(sorted(tb.containers.keys()), sorted([`${B}-run`, `${B}-stopped`, `${PROJECT}_web_1`, `${PROJECT}_worker_1`]), 'and B\'s under B\'s (docker-py\'s and compose\'s)')
  t.same(sorted(tb.volumes), sorted([`${B}-vol`, `${B}-vol-unused`, `${PROJECT}_data`]), 'B\'s volumes, compose\'s included')
  t.ok(tb.networks.has(`${PROJECT}_back`) && tb.networks.has(`${B}-net`), 'B\'s networks, compose\'s included')
  t.equal(tb.images.size, 1, 'B\'s built image carries B\'s label')
})

t.test('docker ps -a, volume ls, network ls: own objects only', async (t) => {
  for (const [who, mine, theirs] of [['a', ta, tb], ['b', tb, ta]] as const) {
    const ps = await as(who, ['ps', '-a', '--no-trunc', '--format', '{{.ID}} {{.Names}}'])
    t.equal(ps.code, 0, `${who}: docker ps -a`, out(ps))
    t.same(sorted(lines(ps)), sorted([...mine.containers].map(([n, id]) => `${id} ${n}`)), `${who}: docker ps -a lists exactly its own containers`)
    const vols = await as(who, ['volume', 'ls', '--format', '{{.Name}}'])
    t.same(sorted(lines(vols)), sorted(mine.volumes), `${who}: docker volume ls lists exactly its own volumes`)
    const nets = await as(who, ['network', 'ls', '--format', '{{.Name}}'])
    t.same(sorted(lines(nets)), sorted([...mine.networks.keys(), ...PREDEFINED]), `${who}: docker network ls lists its own networks and bridge, host, none (not ingress, docker_gwbridge or anyone else's)`)
    t.same(leaks(ps.stdout.toString() + vols.stdout.toString() + nets.stdout.toString(), theirs), [], `${who}: nothing of the other tenant`)
    const images = await as(who, ['images', '-q', '--no-trunc'])
    t.same(leaks(images.stdout.toString(), theirs), [], `${who}: docker images does not list the other tenant's built image`)
    // Looking the other's objects up by name answers as if they did not exist.
    const other = who === 'a' ? B : A
    const inspect = await as(who, ['inspect', `${other}-run`])
    t.not(inspect.code, 0, `${who}: docker inspect of the other tenant's container fails`)
    t.match(inspect.stderr, /No such object/, `${who}: as for a missing object`)
    const missing: Array<[string[], RegExp]> = [
      [['logs', `${other}-run`], /No such container/],
      [['volume', 'inspect', `${other}-vol`], /no such volume/],
      [['network', 'inspect', `${other}-net`], /network .* not found/],
      ...(who === 'a' ? [[['image', 'inspect', `${TB}/built:1`], /No such image/] as [string[], RegExp]] : []),
    ]
    for (const [args, want] of missing) {
      const r = await as(who, args)
      t.not(r.code, 0, `${who}: docker ${args.join(' ')} fails`)
      t.match(r.stderr, want, `${who}: ${r.stderr.trim().split('\n').pop()}`)
    }
    // Filters are ANDed with the owner label: asking for the other tenant's label finds nothing.
    const theirLabel = `label=${TENANT_LABEL}=${who === 'a' ? TB : TA}`
    for (const args of [['ps', '-aq', '--filter', theirLabel], ['volume', 'ls', '-q', '--filter', theirLabel], ['network', 'ls', '-q', '--filter', theirLabel]]) {
      const r = await as(who, args)
      t.same([r.code, lines(r)], [0, []], `${who}: docker ${args.join(' ')} lists nothing`)
    }
    const stats = await as(who, ['stats', '--no-stream', '--format', '{{.Name}}'])
    t.same(sorted(lines(stats)), sorted([...mine.containers.keys()].filter((n) => n.endsWith('-run') || n.includes('_'))), `${who}: docker stats --no-stream shows its running containers only`)
  }

  // The predefined bridge network lists only the asking tenant's containers.
  for (const who of ['a', 'b'] as const) {
    const r = await as(who, ['run', '-d', '--name', `${who === 'a' ? A : B}-onbridge`, IMAGE, 'sleep', '600'])
    t.equal(r.code, 0, `${who}: a container on the default bridge`, out(r))
  }
  const onBridge = async (who: Who): Promise<string[]> =>
    sorted(Object.values(JSON.parse((await as(who, ['network', 'inspect', 'bridge', '--format', '{{json .Containers}}'])).stdout.toString() || '{}') as Record<string, { Name: string }>).map((c) => c.Name))
  t.same(await onBridge('a'), [`${A}-onbridge`], 'a: docker network inspect bridge shows its own container only')
  t.same(await onBridge('b'), [`${B}-onbridge`], 'b: docker network inspect bridge shows its own container only')
  const adminBridge = await onBridge('admin')
  t.ok(adminBridge.includes(`${A}-onbridge`) && adminBridge.includes(`${B}-onbridge`), 'admin: both')
  await direct(['rm', '-f', `${A}-onbridge`, `${B}-onbridge`])

  const py = await python('views', {})
  t.same(py.containers, sorted(tb.containers.keys()), 'B (docker-py): containers.list(all) is its own')
  t.same(py.volumes, sorted(tb.volumes), 'B (docker-py): volumes are its own')
  t.same(py.networks, sorted([...tb.networks.keys(), ...PREDEFINED]), 'B (docker-py): networks are its own and the predefined ones')
  t.same(py.df.containers, sorted(tb.containers.keys()), 'B (docker-py): df() lists its own containers')
  t.same(py.df.volumes, sorted(tb.volumes), 'B (docker-py): df() lists its own volumes')
  t.notOk(py.df.images.some((i: string) => ta.images.has(i)), 'B (docker-py): df() has no image of A')

  const ps = await as('admin', ['ps', '-a', '--format', '{{.Names}}'])
  const all = new Set(lines(ps))
  t.ok([...ta.containers.keys(), ...tb.containers.keys()].every((n) => all.has(n)), 'admin: docker ps -a lists both tenants\' containers')
  const vols = new Set(lines(await as('admin', ['volume', 'ls', '--format', '{{.Name}}'])))
  t.ok([...ta.volumes, ...tb.volumes].every((n) => vols.has(n)), 'admin: docker volume ls lists both tenants\' volumes')
  const nets = new Set(lines(await as('admin', ['network', 'ls', '--format', '{{.Name}}'])))
  t.ok([...ta.networks.keys(), ...tb.networks.keys(), 'bridge'].every((n) => nets.has(n)), 'admin: docker network ls lists both tenants\' networks (and the predefined ones)')
})

/**
 * Whether an event is about one of the tenant's objects: containers and images by the
 * owner label the engine puts in the event (a build's short-lived intermediate
 * containers carry it too), volumes and networks by what the engine holds.
 */
function eventOwnedBy (ev: any, x: Truth): boolean {
  const attrs = ev.Actor?.Attributes ?? {}
  const ids = new Set([...x.containers.values()])
  switch (ev.Type) {
    case 'container': case 'image': return attrs[TENANT_LABEL] === x.tenant
    case 'volume': return x.volumes.has(ev.Actor.ID)
    case 'network': return [...x.networks.values()].includes(ev.Actor.ID) || (PREDEFINED.includes(attrs.name) && ids.has(attrs.container))
    default: return false
  }
}

t.test('docker events: only the tenant\'s own containers, volumes and networks', async (t) => {
  for (const [who, mine, theirs] of [['a', ta, tb], ['b', tb, ta]] as const) {
    const evs = live[who] ?? []
    t.ok(evs.length > 0, `${who}: the live stream saw ${evs.length} events`)
    t.same(evs.filter((e) => !eventOwnedBy(e, mine)).map((e) => `${e.Type} ${e.Action} ${e.Actor?.Attributes?.name ?? e.Actor?.ID}`), [], `${who}: every live event is about its own objects`)
    t.same(leaks(JSON.stringify(evs), theirs), [], `${who}: no name or id of the other tenant in its live stream`)
    const created = (type: string, key: (e: any) => string): Set<string> => new Set(evs.filter((e) => e.Type === type && e.Action === 'create').map(key))
    const containers = created('container', (e) => e.Actor.Attributes.name)
    t.ok([...mine.containers.keys()].every((n) => containers.has(n)), `${who}: a create event for each of its containers`)
    t.same(sorted(created('volume', (e) => e.Actor.ID)), sorted(mine.volumes), `${who}: a create event for each of its volumes`)
    t.same(sorted(created('network', (e) => e.Actor.Attributes.name)), sorted(mine.networks.keys()), `${who}: a create event for each of its networks`)
    t.ok(evs.some((e) => e.Type === 'network' && e.Action === 'connect'), `${who}: its containers' network connects`)
    t.ok(evs.some((e) => e.Type === 'volume' && e.Action === 'mount'), `${who}: its volumes' mounts`)
  }
  t.ok(live.b!.some((e) => e.Type === 'image' && tb.images.has(e.Actor.ID)), 'b: the event of the image it built')

  const admin = live.admin ?? []
  const names = new Set(admin.filter((e) => e.Type === 'container' && e.Action === 'create').map((e) => e.Actor.Attributes.name))
  t.ok([...ta.containers.keys(), ...tb.containers.keys()].every((n) => names.has(n)), 'admin: the live stream has both tenants\' container creates')

  // The same window replayed: docker events --since X --until Y.
  const replay = async (who: Who): Promise<any[]> => {
    const r = await as(who, ['events', '--since', String(since), '--until', String(until), '--format', '{{json .}}'])
    t.equal(r.code, 0, `${who}: docker events --since ${since} --until ${until}`, out(r))
    return lines(r).map((l) => JSON.parse(l))
  }
  const everything = await replay('admin')
  // The engine replays from a ring of its last 256 events: under other test files' load the start may be gone.
  const complete = everything.length < 250
  if (!complete) t.comment(`the engine's event ring overflowed (${everything.length} events): only the absence of the other tenant's events is checked in the replay`)
  for (const [who, mine, theirs] of [['a', ta, tb], ['b', tb, ta]] as const) {
    const evs = await replay(who)
    t.same(evs.filter((e) => !eventOwnedBy(e, mine)).map((e) => `${e.Type} ${e.Action} ${e.Actor?.Attributes?.name ?? e.Actor?.ID}`), [], `${who}: every replayed event is about its own objects`)
    t.same(leaks(JSON.stringify(evs), theirs), [], `${who}: no name or id of the other tenant in the replay`)
    if (complete) {
      const key = (e: any): string => `${e.Type} ${e.Action} ${e.Actor.ID} ${e.time}`
      const expected = everything.filter((e) => eventOwnedBy(e, mine)).map(key)
      t.same(evs.map(key), expected, `${who}: the replay is exactly the admin's replay narrowed to its own objects (${expected.length} events)`)
    }
  }
})

t.test('docker system df -v: own containers and volumes, no image of the other tenant', async (t) => {
  for (const [who, mine, theirs] of [['a', ta, tb], ['b', tb, ta]] as const) {
    const df = await as(who, ['system', 'df', '-v'])
    t.equal(df.code, 0, `${who}: docker system df -v`, out(df))
    const text = df.stdout.toString()
    // Each section: its title, a blank line, a header line, the rows, a blank line.
    const section = (title: string): string[] => {
      const rest = (text.split(`${title}:`)[1] ?? '').replace(/^\n+/, '')
      return rest.split('\n\n')[0].split('\n').slice(1).filter((l) => l.trim() !== '')
    }
    t.same(sorted(section('Containers space usage').map((l) => l.trim().split(/\s+/).pop()!)), sorted(mine.containers.keys()), `${who}: df -v lists exactly its containers`)
    t.same(sorted(section('Local Volumes space usage').map((l) => l.trim().split(/\s+/)[0])), sorted(mine.volumes), `${who}: df -v lists exactly its volumes`)
    // The shared test image: used by how many containers? The tenant's own only.
    const imageRow = section('Images space usage').find((l) => l.startsWith(IMAGE.split(':')[0] + ' '))
    t.equal(Number(imageRow?.trim().split(/\s+/).pop()), mine.containers.size, `${who}: the test image is used by its ${mine.containers.size} containers (not counting the other tenant's)`)
    t.match(text, /Build cache usage: 0B\n\nCACHE ID[^\n]*\n*$/, `${who}: no build cache (it has no owner)`)
    t.same(leaks(text, theirs), [], `${who}: nothing of the other tenant`)
    const pyDf = who === 'b' ? (await python('views', {})).df : null
    if (pyDf) {
      const imageId = (await direct(['image', 'inspect', '--format', '{{.Id}}', IMAGE])).stdout.toString().trim()
      t.equal(Object.fromEntries(pyDf.imageContainers)[imageId], mine.containers.size, 'b (docker-py): df() counts only its own containers on the shared image')
    }
    const summary = await as(who, ['system', 'df', '--format', '{{json .}}'])
    const rows = Object.fromEntries(lines(summary).map((l) => { const r = JSON.parse(l); return [r.Type, r] }))
    t.equal(Number(rows.Containers?.TotalCount), mine.containers.size, `${who}: df counts its containers`)
    t.equal(Number(rows['Local Volumes']?.TotalCount), mine.volumes.size, `${who}: df counts its volumes`)
  }
  const admin = (await as('admin', ['system', 'df', '-v'])).stdout.toString()
  t.ok([...ta.containers.keys(), ...tb.containers.keys(), ...ta.volumes, ...tb.volumes].every((n) => admin.includes(n)), 'admin: df -v lists both tenants\' containers and volumes')
})

t.test('docker info: the tenant\'s own counts, host details hidden', async (t) => {
  const running = async (x: Truth): Promise<number> => lines(await direct(['ps', '-q', '--filter', `label=${TENANT_LABEL}=${x.tenant}`])).length
  for (const [who, mine] of [['a', ta], ['b', tb]] as const) {
    // Images: what the tenant's image list shows (shared and own); other files may pull or build meanwhile, so retried.
    let info: any = {}
    let listed = -1
    for (let i = 0; i < 3; i++) {
      const r = await as(who, ['info', '--format', '{{json .}}'])
      t.equal(r.code, 0, `${who}: docker info`, out(r))
      info = JSON.parse(r.stdout.toString())
      listed = new Set(lines(await as(who, ['images', '-q', '--no-trunc']))).size
      if (info.Images === listed) break
    }
    const up = await running(mine)
    t.same({ Containers: info.Containers, ContainersRunning: info.ContainersRunning, ContainersPaused: info.ContainersPaused, ContainersStopped: info.ContainersStopped },
      { Containers: mine.containers.size, ContainersRunning: up, ContainersPaused: 0, ContainersStopped: mine.containers.size - up }, `${who}: Containers/Running/Paused/Stopped are its own (${mine.containers.size}/${up}/0/${mine.containers.size - up})`)
    t.equal(info.Images, listed, `${who}: Images counts the images it can see (${listed})`)
    t.same({ Name: info.Name, ID: info.ID, DockerRootDir: info.DockerRootDir }, { Name: '', ID: '', DockerRootDir: '' }, `${who}: Name, ID and DockerRootDir hidden`)
    t.equal(info.Swarm?.NodeID, '', `${who}: the swarm node id hidden`)
    t.ok(info.ServerVersion, `${who}: the server version still shown`)
    const text = await as(who, ['info'])
    t.equal(text.code, 0, `${who}: plain docker info still prints`, out(text))
    t.match(text.stdout.toString(), new RegExp(`Containers: ${mine.containers.size}\\n\\s+Running: ${up}\\n\\s+Paused: 0\\n\\s+Stopped: ${mine.containers.size - up}`), `${who}: docker info prints its own counts`)
  }
  t.equal(ta.containers.size, 3, 'A: 3 containers (1 running)')
  t.equal(tb.containers.size, 4, 'B: 4 containers (3 running)')
  const py = await python('views', {})
  t.same({ c: py.info.Containers, r: py.info.ContainersRunning, s: py.info.ContainersStopped, name: py.info.Name, id: py.info.ID, root: py.info.DockerRootDir },
    { c: 4, r: 3, s: 1, name: '', id: '', root: '' }, 'B (docker-py): info() counts its own and hides the host')

  const admin = JSON.parse((await as('admin', ['info', '--format', '{{json .}}'])).stdout.toString())
  t.ok(admin.Name !== '' && admin.ID !== '' && admin.DockerRootDir !== '', 'admin: Name, ID and DockerRootDir shown')
  t.ok(admin.Containers >= ta.containers.size + tb.containers.size, `admin: Containers counts every container (${admin.Containers})`)
  const bImages = new Set(lines(await as('b', ['images', '-q', '--no-trunc'])))
  t.ok([...tb.images].every((i) => bImages.has(i)), 'B: docker images lists its built image (A\'s does not, above)')
  t.ok(admin.Images >= bImages.size, 'admin: Images counts every image')
})

t.test('a name another tenant holds: 409 with a clear message, nothing created', async (t) => {
  const mine = ['ps', '-a', '--filter', `name=${P}`, '--format', '{{.Names}}']
  const before = await direct(mine)
  // B (docker-py) takes A's names; A (the CLI) takes B's.
  const r = await python('conflict', { image: IMAGE, container: `${A}-run`, volume: `${A}-vol`, network: `${A}-net` })
  for (const kind of ['container', 'volume', 'network'] as const) {
    t.equal(r[kind].status, 409, `B (docker-py): ${kind} create with A's name answers 409`)
    t.match(r[kind].message, new RegExp(`the ${kind} name "${A}-(run|vol|net)" is already in use on this engine by another tenant or the administrator: ${kind} names are shared by all tenants of one engine, choose another \\(for example prefixed with your tenant: ${TB}-`), `B: ${r[kind].message}`)
  }
  const cli = await as('a', ['run', '-d', '--name', `${B}-run`, IMAGE, 'sleep', '60'])
  t.not(cli.code, 0, 'A (CLI): docker run --name <B\'s container> fails')
  t.match(cli.stderr, new RegExp(`Error response from daemon: the container name "${B}-run" is already in use on this engine by another tenant`), `A: ${cli.stderr.trim()}`)
  const vol = await as('a', ['volume', 'create', `${PROJECT}_data`])
  t.match(vol.stderr, new RegExp(`the volume name "${PROJECT}_data" is already in use`), 'A: docker volume create <compose\'s volume> refused')
  const bind = await as('a', ['run', '--rm', '-v', `${B}-vol-unused:/x`, IMAGE, 'true'])
  t.match(bind.stderr, new RegExp(`the volume name "${B}-vol-unused" is already in use`), 'A: docker run -v <B\'s volume>:/x refused (not mounted)')
  const after = await direct(mine)
  t.same(sorted(lines(after)), sorted(lines(before)), 'no container was created (this file\'s containers on the engine are unchanged)')
  t.same(sorted((await truth(TA)).containers.keys()), sorted(ta.containers.keys()), 'A has no new container')
  t.same(sorted((await truth(TB)).containers.keys()), sorted(tb.containers.keys()), 'B has no new container')
  const labels = JSON.parse((await direct(['inspect', '--format', '{{json .Config.Labels}}', `${A}-run`])).stdout.toString())
  t.equal(labels[TENANT_LABEL], TA, 'the name still belongs to A\'s container')
  const volLabels = JSON.parse((await direct(['volume', 'inspect', '--format', '{{json .Labels}}', `${B}-vol-unused`])).stdout.toString())
  t.equal(volLabels[TENANT_LABEL], TB, 'B\'s volume is still B\'s')
})

t.test('prune as B removes only B\'s stopped containers, unused volumes and networks', async (t) => {
  // An administrator's stopped container (no owner labels) must survive too.
  const adminStopped = `${P}-admin-stopped`
  t.equal((await direct(['create', '--name', adminStopped, IMAGE, 'true'])).code, 0, 'an admin\'s stopped container on the engine')
  const streams = (['a', 'b'] as const).map((who) => [who, watchEvents(who)] as const)
  await new Promise((resolve) => setTimeout(resolve, 1500))
  const r = await python('prune', {})
  t.same(sorted(r.containers.ContainersDeleted ?? []), [tb.containers.get(`${B}-stopped`)], 'B: container prune deleted exactly B\'s stopped container')
  t.same(sorted(r.volumes.VolumesDeleted ?? []), [`${B}-vol-unused`], 'B: volume prune deleted exactly B\'s unused volume')
  t.same(sorted(r.networks.NetworksDeleted ?? []), [`${B}-net-unused`], 'B: network prune deleted exactly B\'s unused network')
  await new Promise((resolve) => setTimeout(resolve, 1500))
  const seen = Object.fromEntries(await Promise.all(streams.map(async ([who, w]) => [who, (await w.stop()).map((e) => `${e.Type} ${e.Action} ${e.Actor?.Attributes?.name ?? e.Actor?.ID}`)] as const)))
  t.same(seen.a, [], 'a: its live events show nothing of B\'s prune')
  t.ok(seen.b.includes(`container destroy ${B}-stopped`), 'b: its live events show the destroy of its pruned container')
  t.same(seen.b.filter((e: string) => !e.includes(B)), [], 'b: and nothing that is not its own')
  // A volume's or network's destroy event names an object that is gone: the gateway can no
  // longer look its owner up, and shows it only if the stream saw the object before (a
  // network's owner may still be in the ownership cache: then it is shown).
  t.ok(seen.b.includes(`volume destroy ${B}-vol-unused`) && seen.b.includes(`network destroy ${B}-net-unused`), 'b: and of its pruned volume and network',
    { todo: 'destroy events of volumes and networks created before the stream started are dropped: their owner cannot be looked up any more' })
  const nowA = await truth(TA)
  t.same(sorted(nowA.containers.keys()), sorted(ta.containers.keys()), 'A\'s stopped and exited containers survive')
  t.same(sorted(nowA.volumes), sorted(ta.volumes), 'A\'s unused volume survives')
  t.same(sorted(nowA.networks.keys()), sorted(ta.networks.keys()), 'A\'s unused network survives')
  t.equal((await direct(['inspect', adminStopped])).code, 0, 'the admin\'s stopped container survives')
  const nowB = await truth(TB)
  t.same(sorted(nowB.containers.keys()), sorted([`${B}-run`, `${PROJECT}_web_1`, `${PROJECT}_worker_1`]), 'B\'s running containers stay')
  t.same(sorted(nowB.volumes), sorted([`${B}-vol`, `${PROJECT}_data`]), 'B\'s volumes in use stay')
  // A prunes with the CLI: its own stopped containers only.
  const pa = await as('a', ['container', 'prune', '-f'])
  t.equal(pa.code, 0, 'A: docker container prune -f', out(pa))
  t.same(sorted((await truth(TA)).containers.keys()), [`${A}-run`], 'A: only its running container is left')
  t.equal((await direct(['inspect', adminStopped])).code, 0, 'the admin\'s stopped container still survives')
  t.same(sorted((await truth(TB)).containers.keys()), sorted(nowB.containers.keys()), 'B\'s containers are untouched by A\'s prune')
  const down = await compose(gw.dockerHost, 'b', 'down', '-v', '-t', '1')
  t.equal(down.code, 0, 'B: docker-compose down -v', out(down))
  const left = await truth(TB)
  t.same([left.containers.has(`${PROJECT}_web_1`), left.volumes.has(`${PROJECT}_data`), left.networks.has(`${PROJECT}_back`)], [false, false, false], 'compose removed its containers, volume and network')
})

// ---------------------------------------------------------------------------
// Quotas: a policy directory of this test's own, with a quota for tenant TQ.

/** The quota tenant's docker CLI through `gw`: a step that must work, one that must be refused naming the rule. */
function quotaSteps (t: Test, gw: TestGateway): { q: (args: string[]) => Promise<RunResult>, ok: (args: string[]) => Promise<void>, refused: (args: string[], rule: string, message: RegExp) => Promise<void> } {
  const q = async (args: string[]): Promise<RunResult> => await as('q', args, gw.dockerHost)
  return {
    q,
    async ok (args) {
      const r = await q(args)
      t.equal(r.code, 0, `docker ${args.join(' ')}`, out(r))
    },
    async refused (args, rule, message) {
      const r = await q(args)
      t.not(r.code, 0, `docker ${args.join(' ')} fails`)
      t.match(r.stderr, new RegExp(`${message.source} \\(rule ${rule}\\)`), `${rule}: ${r.stderr.trim().split('\n').pop()}`)
    },
  }
}

t.test('quotas on a plain engine: creates and docker update refused naming the rule', async (t) => {
  const policyDir = path.join(tmp, 'policies')
  fs.cpSync(POLICIES, policyDir, { recursive: true })
  const tenancy = path.join(policyDir, 'tenancy.yaml')
  const text = fs.readFileSync(tenancy, 'utf8')
  t.match(text, /^ {2}tenants: \{\}$/m, 'the shipped tenancy.yaml has no per-tenant quotas')
  fs.writeFileSync(tenancy, text.replace(/^ {2}tenants: \{\}$/m, `  tenants:\n    ${TQ}: { containers: 2, memory: 3GiB, cpus: 1, volumes: 1 }`))
  const qgw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, undefined, policyDir)
  t.teardown(() => qgw.close())
  const { ok, refused } = quotaSteps(t, qgw)
  const count = async (): Promise<number> => (await truth(TQ)).containers.size

  await ok(['run', '-d', '--name', `${Q}-1`, '--memory', '1g', '--cpus', '0.5', IMAGE, 'sleep', '600'])
  await refused(['create', '--name', `${Q}-x`, '--memory', '4g', '--cpus', '0.25', IMAGE], 'quota-memory',
    new RegExp(`quota exceeded for tenant ${TQ}: memory limits 5 GiB > 3 GiB \\(1 GiB in use\\)`))
  await refused(['create', '--name', `${Q}-x`, '--memory', '1g', '--cpus', '0.75', IMAGE], 'quota-cpus',
    new RegExp(`quota exceeded for tenant ${TQ}: CPU limits 1.25 > 1 CPUs \\(0.5 in use\\)`))
  await refused(['create', '--name', `${Q}-x`, '--memory', '1g', IMAGE], 'quota-cpus', new RegExp(`tenant ${TQ} has a CPU quota: set a CPU limit \\(--cpus\\)`))
  t.equal(await count(), 1, 'nothing was created by the refused creates')
  await ok(['create', '--name', `${Q}-2`, '--memory', '1g', '--cpus', '0.25', IMAGE, 'sleep', '600'])
  await refused(['create', '--name', `${Q}-x`, '--memory', '256m', '--cpus', '0.1', IMAGE], 'quota-containers',
    new RegExp(`quota exceeded for tenant ${TQ}: containers 3 > 2 \\(2 in use\\)`))
  t.equal(await count(), 2, 'still two containers')

  // docker update: the container's own limits are replaced, the others' counted.
  await ok(['update', '--memory', '1536m', `${Q}-1`])
  await refused(['update', '--memory', '2560m', '--memory-swap', '4g', `${Q}-1`], 'quota-memory',
    new RegExp(`quota exceeded for tenant ${TQ}: memory limits 3.5 GiB > 3 GiB \\(1 GiB in use\\)`))
  await refused(['update', '--cpus', '0.8', `${Q}-1`], 'quota-cpus', new RegExp(`quota exceeded for tenant ${TQ}: CPU limits 1.05 > 1 CPUs \\(0.25 in use\\)`))
  const hc = JSON.parse((await direct(['inspect', '--format', '{{json .HostConfig}}', `${Q}-1`])).stdout.toString())
  t.same([hc.Memory, hc.NanoCpus], [1536 * 1024 ** 2, 0.5e9], 'the engine kept the last allowed limits')

  // Volumes: one.
  await ok(['volume', 'create', `${Q}-vol1`])
  await refused(['volume', 'create', `${Q}-vol2`], 'quota-volumes', new RegExp(`quota exceeded for tenant ${TQ}: volumes 2 > 1 \\(1 in use\\)`))
  await ok(['rm', `${Q}-2`])
  await refused(['create', '--name', `${Q}-x`, '--memory', '256m', '--cpus', '0.1', '-v', `${Q}-vol3:/data`, IMAGE], 'quota-volumes',
    new RegExp(`quota exceeded for tenant ${TQ}: volumes 2 > 1 \\(1 in use\\)`))
  t.same(sorted((await truth(TQ)).volumes), [`${Q}-vol1`], 'the refused creates made no volume')
  await ok(['create', '--name', `${Q}-2`, '--memory', '256m', '--cpus', '0.1', '-v', `${Q}-vol1:/data`, IMAGE])
  await ok(['rm', `${Q}-2`])
  // A plain engine has no services: the tenant's usage is its containers alone.
  await ok(['create', '--name', `${Q}-2`, '--memory', '256m', '--cpus', '0.1', IMAGE])
  t.equal(await count(), 2, 'two containers within the quota')
})

t.test('quotas on a swarm manager: docker service scale and update refused naming the rule', async (t) => {
  // Services exist only on a swarm manager: this part runs on the run's swarm-mode engine,
  // the same quota for the same tenant, one container of 1.5 GiB and 0.5 CPUs already running.
  const policyDir = path.join(tmp, 'policies-swarm')
  fs.cpSync(POLICIES, policyDir, { recursive: true })
  const tenancy = path.join(policyDir, 'tenancy.yaml')
  // (and tenants' services on the API 1.41 swarm engine allowed without no-new-privileges)
  fs.writeFileSync(tenancy, servicesWithoutNoNewPrivileges(fs.readFileSync(tenancy, 'utf8').replace(/^ {2}tenants: \{\}$/m, `  tenants:\n    ${TQ}: { containers: 2, memory: 3GiB, cpus: 1, volumes: 1 }`)))
  const sgw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, `unix://${swarmEngine().socket}`, policyDir)
  const direct = async (args: readonly string[]): Promise<RunResult> => await run(CLI28, args, { host: swarmEngine().dockerHost, timeoutMs: 120_000 })
  t.teardown(async () => {
    await sgw.close()
    for (const sv of lines(await direct(['service', 'ls', '-q', '--filter', `label=${TENANT_LABEL}=${TQ}`]))) await direct(['service', 'rm', sv])
    const cs = lines(await direct(['ps', '-aq', '--filter', `label=${TENANT_LABEL}=${TQ}`]))
    if (cs.length) await direct(['rm', '-f', ...cs])
  })
  const { q, ok, refused } = quotaSteps(t, sgw)
  await ok(['run', '-d', '--name', `${Q}-1`, '--memory', '1536m', '--cpus', '0.5', IMAGE, 'sleep', '600'])

  // Services: replicas count as containers, their limits times replicas as memory and CPUs.
  await ok(['service', 'create', '--detach', '--no-resolve-image', '--name', `${Q}-svc`, '--replicas', '1', '--limit-memory', '512m', '--limit-cpu', '0.25', IMAGE, 'sleep', '600'])
  const scale = await q(['service', 'scale', '--detach', `${Q}-svc=3`])
  t.not(scale.code, 0, 'docker service scale svc=3 fails')
  t.match(scale.stderr, new RegExp(`quota exceeded for tenant ${TQ}: containers 4 > 2 \\(1 in use\\) \\(rule quota-containers\\)`), `quota-containers: ${scale.stderr.trim()}`)
  await refused(['service', 'update', '--detach', '--limit-memory', '2g', `${Q}-svc`], 'quota-memory',
    new RegExp(`quota exceeded for tenant ${TQ}: memory limits 3.5 GiB > 3 GiB \\(1.5 GiB in use\\)`))
  await refused(['service', 'update', '--detach', '--limit-cpu', '0.75', `${Q}-svc`], 'quota-cpus',
    new RegExp(`quota exceeded for tenant ${TQ}: CPU limits 1.25 > 1 CPUs \\(0.5 in use\\)`))
  const spec = JSON.parse((await direct(['service', 'inspect', '--format', '{{json .Spec}}', `${Q}-svc`])).stdout.toString())
  t.equal(spec.Mode?.Replicated?.Replicas, 1, 'the service still has one replica')
  await refused(['create', '--name', `${Q}-x`, '--memory', '256m', '--cpus', '0.1', IMAGE], 'quota-containers',
    new RegExp(`quota exceeded for tenant ${TQ}: containers 3 > 2 \\(2 in use\\)`))
  await ok(['service', 'scale', '--detach', `${Q}-svc=0`])
  await ok(['create', '--name', `${Q}-2`, '--memory', '256m', '--cpus', '0.1', IMAGE])
})
