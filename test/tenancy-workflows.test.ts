/**
 * What common tools run, end to end, as a tenant through the gateway on the plain engine:
 *
 *   - docker-compose 1.29 brings a two-service project (a network and a named volume,
 *     both with labels of the project's own) up twice: no "label ... has changed"
 *     warning, because the tenant's views show its objects with the labels its client
 *     gave them (the owner labels stay on the engine); label filters naming an owner
 *     label read the same way (nothing carries one) and never reach another tenant;
 *   - `docker system prune -f` exits 0 and removes the tenant's stopped containers,
 *     unused networks and dangling images only: another tenant's and the admin's stay,
 *     and the build cache (which has no owner) is left alone;
 *   - `docker load`: an archive tagged in the tenant's namespace loads, and what it
 *     loads is the tenant's (owner labels in the config) and invisible to other
 *     tenants; archives with a tag outside the namespace (another tenant's, the shared
 *     catalog's, in manifest.json or in the legacy `repositories`) are refused and the
 *     engine is unchanged.
 *
 * Tenants have names of their own per run (team-w-<hex>, team-x-<hex>); every object is
 * named after P or carries their owner labels, and is removed on the engine afterwards.
 */
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import http from 'node:http'
import os from 'node:os'
import path from 'node:path'
import { gzipSync } from 'node:zlib'
import t from 'tap'
import { CLI20, CLI28, engine, run, type RunResult, startTestGateway, type TestGateway, tokensFor, uniqueName } from './helpers/gateway'

const COMPOSE = '/usr/bin/docker-compose'
const TENANT_LABEL = 'io.portcullis.tenant'
const SUBJECT_LABEL = 'io.portcullis.subject'
const IMAGE = engine().image

const SECRET = randomBytes(32).toString('hex')
const RUN = randomBytes(3).toString('hex')
const TA = `team-w-${RUN}`
const TB = `team-x-${RUN}`
const P = uniqueName('pcw')

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pcw-'))
t.teardown(() => fs.rmSync(tmp, { recursive: true, force: true }))

type Who = 'a' | 'b' | 'admin'
const CLAIMS: Record<Who, object> = {
  a: { sub: 'walt', tenant: TA, roles: ['tenant'] },
  b: { sub: 'xena', tenant: TB, roles: ['tenant'] },
  admin: { sub: 'root-op', roles: ['admin'] },
}
const { token: TOKEN, config: CONFIG } = tokensFor(CLAIMS, SECRET, tmp)

/** One API request through the gateway as `who`: status and body text. */
async function api (who: Who, method: string, target: string, body?: unknown): Promise<{ status: number, text: string }> {
  return await new Promise((resolve, reject) => {
    const req = http.request({ socketPath: gw.socket, method, path: target, headers: { authorization: `Bearer ${TOKEN[who]}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) } }, (res) => {
      let text = ''
      res.on('data', (c: Buffer) => { text += c.toString() })
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text }))
    })
    req.on('error', reject)
    req.end(body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body))
  })
}

let gw: TestGateway
const as = async (who: Who, args: readonly string[], opts: { stdin?: Buffer, cli?: string } = {}): Promise<RunResult> =>
  await run(opts.cli ?? CLI28, args, { host: gw.dockerHost, env: { DOCKER_CONFIG: CONFIG[who] }, timeoutMs: 180_000, ...(opts.stdin ? { stdin: opts.stdin } : {}) })
const direct = async (args: readonly string[], opts: { stdin?: Buffer, cli?: string, env?: NodeJS.ProcessEnv } = {}): Promise<RunResult> =>
  await run(opts.cli ?? CLI28, args, { host: engine().dockerHost, timeoutMs: 180_000, ...(opts.stdin ? { stdin: opts.stdin } : {}), ...(opts.env ? { env: opts.env } : {}) })
const lines = (r: RunResult): string[] => r.stdout.toString().split('\n').filter((l) => l !== '')
const out = (r: RunResult): Record<string, unknown> => r.code === 0 ? {} : { stderr: r.stderr.trim() }
const inspectDirect = async (kind: string, ref: string): Promise<any> => {
  const r = await direct([kind, 'inspect', ref])
  return r.code === 0 ? JSON.parse(r.stdout.toString())[0] : null
}
const inspectAs = async (who: Who, kind: string, ref: string): Promise<any> => {
  const r = await as(who, [kind, 'inspect', ref])
  return r.code === 0 ? JSON.parse(r.stdout.toString())[0] : null
}
const owner = (labels: Record<string, string> | null | undefined): string | undefined => labels?.[TENANT_LABEL]
const hasOwnerLabel = (labels: Record<string, string> | null | undefined): boolean =>
  labels !== null && labels !== undefined && Object.keys(labels).some((k) => k.startsWith('io.portcullis.'))

t.before(async () => {
  gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`)
})

t.teardown(async () => {
  await compose('a', 'down', '-v', '-t', '1').catch(() => undefined)
  for (const tenant of [TA, TB]) {
    const label = `label=${TENANT_LABEL}=${tenant}`
    const cs = lines(await direct(['ps', '-aq', '--filter', label]))
    if (cs.length) await direct(['rm', '-f', '-v', ...cs])
    const vs = lines(await direct(['volume', 'ls', '-q', '--filter', label]))
    if (vs.length) await direct(['volume', 'rm', '-f', ...vs])
    const ns = lines(await direct(['network', 'ls', '-q', '--filter', label]))
    if (ns.length) await direct(['network', 'rm', ...ns])
    const is = lines(await direct(['images', '-aq', '--filter', label]))
    if (is.length) await direct(['rmi', '-f', ...new Set(is)])
  }
  const admins = lines(await direct(['ps', '-aq', '--filter', `name=${P}`]))
  if (admins.length) await direct(['rm', '-f', ...admins])
  const nets = lines(await direct(['network', 'ls', '-q', '--filter', `name=${P}`]))
  if (nets.length) await direct(['network', 'rm', ...nets])
  await gw?.close()
})

// ---------------------------------------------------------------------------------------
// docker-compose 1.29

const PROJECT = `${P}-c`
const COMPOSE_FILE = `version: "2.4"
services:
  web:
    image: ${IMAGE}
    command: sleep 600
    stop_grace_period: 1s
    labels: { role: front }
    volumes: [data:/data]
    networks: [backend]
  worker:
    image: ${IMAGE}
    command: sleep 600
    stop_grace_period: 1s
    volumes: [data:/srv]
    networks: [backend]
volumes:
  data:
    labels: { keep: "yes" }
networks:
  backend:
    labels: { tier: back }
`
const composeDir = path.join(tmp, 'compose')
fs.mkdirSync(composeDir)
fs.writeFileSync(path.join(composeDir, 'docker-compose.yml'), COMPOSE_FILE)
async function compose (who: Who, ...args: string[]): Promise<RunResult> {
  return await run(COMPOSE, ['--ansi', 'never', '-p', PROJECT, ...args], { host: gw.dockerHost, cwd: composeDir, env: { DOCKER_CONFIG: CONFIG[who] }, timeoutMs: 300_000 })
}

t.test('docker-compose 1.29 up -d twice as a tenant: no "has changed" warnings', async (t) => {
  const network = `${PROJECT}_backend`
  const volume = `${PROJECT}_data`
  const first = await compose('a', 'up', '-d')
  t.equal(first.code, 0, 'the first up', out(first))
  t.notMatch(first.stderr, /has changed/, 'the first up warns of nothing')
  const second = await compose('a', 'up', '-d')
  t.equal(second.code, 0, 'the second up', out(second))
  t.notMatch(second.stderr, /has changed|may need to be recreated/, `the second up warns of nothing: ${second.stderr.trim()}`)
  t.match(second.stderr, /is up-to-date/, 'and leaves the containers as they are')

  // The engine keeps the owner labels...
  const engineNet = await inspectDirect('network', network)
  const engineVol = await inspectDirect('volume', volume)
  t.same([owner(engineNet?.Labels), owner(engineVol?.Labels)], [TA, TA], 'the engine\'s network and volume carry the owner label')
  const web = lines(await direct(['ps', '-aq', '--no-trunc', '--filter', `label=com.docker.compose.project=${PROJECT}`, '--filter', 'label=com.docker.compose.service=web']))
  t.equal(web.length, 1, 'one web container')
  t.equal(owner((await inspectDirect('container', web[0]))?.Config?.Labels), TA, 'and so does the container')

  // ...and the tenant sees its objects with the labels compose gave them.
  const net = await inspectAs('a', 'network', network)
  const vol = await inspectAs('a', 'volume', volume)
  t.same(net?.Labels, { 'com.docker.compose.network': 'backend', 'com.docker.compose.project': PROJECT, 'com.docker.compose.version': '1.29.2', tier: 'back' }, 'network inspect: compose\'s labels only')
  t.same(vol?.Labels, { 'com.docker.compose.project': PROJECT, 'com.docker.compose.version': '1.29.2', 'com.docker.compose.volume': 'data', keep: 'yes' }, 'volume inspect: compose\'s labels only')
  const container = await inspectAs('a', 'container', web[0])
  t.notOk(hasOwnerLabel(container?.Config?.Labels), 'container inspect: no owner label')
  t.equal(container?.Config?.Labels?.role, 'front', 'container inspect: the service\'s own label')
  const listed = {
    containers: JSON.parse((await as('a', ['ps', '-a', '--no-trunc', '--filter', `label=com.docker.compose.project=${PROJECT}`, '--format', '{{json .Labels}}'])).stdout.toString().split('\n')[0] || '""'),
    networks: lines(await as('a', ['network', 'ls', '--filter', `name=${network}`, '--format', '{{.Labels}}'])),
    volumes: lines(await as('a', ['volume', 'ls', '--filter', `name=${volume}`, '--format', '{{.Labels}}'])),
  }
  t.notMatch(JSON.stringify(listed), /io\.portcullis\./, `ps, network ls and volume ls show no owner label: ${JSON.stringify(listed)}`)
  t.match(JSON.stringify(listed), /com\.docker\.compose\.project/, 'but compose\'s labels')
  const df = await as('a', ['system', 'df', '-v', '--format', '{{json .}}'])
  t.equal(df.code, 0, 'system df -v', out(df))
  t.notMatch(df.stdout.toString(), /io\.portcullis\./, 'system df -v shows no owner label')
  // An admin still sees them.
  t.equal(owner((await inspectAs('admin', 'network', network))?.Labels), TA, 'the admin sees the owner label')

  // Label filters read as the tenant sees its objects: nothing carries an owner label.
  const filters: Array<[Who, string[], string[]]> = [
    ['a', ['ps', '-aq', '--filter', `label=com.docker.compose.project=${PROJECT}`], ['two containers']],
    ['a', ['ps', '-aq', '--filter', `label=${TENANT_LABEL}=${TA}`], []],
    ['a', ['ps', '-aq', '--filter', `label=${TENANT_LABEL}`], []],
    ['a', ['network', 'ls', '-q', '--filter', `label=${TENANT_LABEL}=${TA}`], []],
    ['a', ['volume', 'ls', '-q', '--filter', `label=${SUBJECT_LABEL}`], []],
    ['b', ['ps', '-aq', '--filter', `label=${TENANT_LABEL}=${TA}`], []],
    ['b', ['ps', '-aq', '--filter', `label=com.docker.compose.project=${PROJECT}`], []],
    ['b', ['network', 'ls', '-q', '--filter', `label=com.docker.compose.project=${PROJECT}`], []],
    ['b', ['volume', 'ls', '-q', '--filter', `label=${TENANT_LABEL}=${TA}`], []],
  ]
  for (const [who, args, want] of filters) {
    const r = await as(who, args)
    t.equal(r.code, 0, `${who}: docker ${args.join(' ')}`, out(r))
    if (want.length) t.equal(lines(r).length, 2, `${who}: docker ${args.join(' ')} lists ${want[0]}`)
    else t.same(lines(r), [], `${who}: docker ${args.join(' ')} lists nothing`)
  }

  // An inspect is re-encoded without the owner labels: the engine's numbers keep every digit.
  const exact = `${P}-a-exact`
  const created = await api('a', 'POST', `/v1.41/containers/create?name=${exact}`, `{"Image":${JSON.stringify(IMAGE)},"Cmd":["true"],"Labels":{"mine":"yes"},"StopTimeout":9007199254740993}`)
  // (A stop timeout: a tenant's swap is bounded by the memory-swap rule.)
  t.equal(created.status, 201, 'a container with a stop timeout of 2^53+1 seconds', { text: created.text })
  const raw = await api('a', 'GET', `/v1.41/containers/${exact}/json`)
  t.match(raw.text, '"StopTimeout":9007199254740993', 'container inspect shows 9007199254740993 as the engine wrote it')
  t.match(raw.text, '"Labels":{"mine":"yes"}', 'and the tenant\'s own label only')
  await direct(['rm', '-f', exact])

  const down = await compose('a', 'down', '-v', '-t', '1')
  t.equal(down.code, 0, 'down -v', out(down))
  t.notOk(await inspectDirect('network', network), 'the network is gone')
  t.notOk(await inspectDirect('volume', volume), 'the volume is gone')
})

// ---------------------------------------------------------------------------------------
// docker system prune

t.test('docker system prune -f as a tenant: its own objects only, exit 0', async (t) => {
  // Stopped containers, unused networks and a dangling image (committed twice to one tag)
  // for each tenant through the gateway, and the admin's directly on the engine.
  const made: Record<'a' | 'b', { container: string, network: string, dangling: string }> = {} as any
  for (const who of ['a', 'b'] as const) {
    const tenant = who === 'a' ? TA : TB
    const container = `${P}-${who}-stopped`
    const network = `${P}-${who}-net`
    let r = await as(who, ['create', '--name', container, IMAGE, 'true'])
    t.equal(r.code, 0, `${who}: a stopped container`, out(r))
    r = await as(who, ['network', 'create', network])
    t.equal(r.code, 0, `${who}: an unused network`, out(r))
    r = await as(who, ['commit', container, `${tenant}/dangling:1`])
    t.equal(r.code, 0, `${who}: commit`, out(r))
    const dangling = r.stdout.toString().trim()
    r = await as(who, ['commit', '--change', 'ENV X=1', container, `${tenant}/dangling:1`])
    t.equal(r.code, 0, `${who}: commit again onto the same tag: the first image is dangling`, out(r))
    made[who] = { container, network, dangling }
  }
  const adminContainer = `${P}-admin-stopped`
  const adminNetwork = `${P}-admin-net`
  t.equal((await direct(['create', '--name', adminContainer, IMAGE, 'true'])).code, 0, 'the admin\'s stopped container')
  t.equal((await direct(['network', 'create', adminNetwork])).code, 0, 'the admin\'s unused network')
  // A build cache entry of the admin's (BuildKit, on the engine directly).
  const ctx = fs.mkdtempSync(path.join(tmp, 'ctx-'))
  fs.writeFileSync(path.join(ctx, 'Dockerfile'), `FROM ${IMAGE}\nRUN echo ${P} > /cached\n`)
  const build = await direct(['build', '-q', ctx], { cli: CLI20, env: { DOCKER_BUILDKIT: '1' } })
  t.equal(build.code, 0, 'a BuildKit build on the engine directly', out(build))
  t.teardown(async () => { await direct(['rmi', '-f', build.stdout.toString().trim()]) })
  // `system df` can fail while other files remove images at the same moment (seen on CI: an
  // empty answer read as "no cache"), so an answer counts only when the command succeeded.
  const cache = async (): Promise<string[]> => {
    let last: RunResult | undefined
    for (let attempt = 0; attempt < 10; attempt++) {
      last = await direct(['system', 'df', '-v', '--format', '{{json .BuildCache}}'])
      if (last.code === 0 && last.stdout.toString().trim() !== '') return (JSON.parse(last.stdout.toString()) as any[] ?? []).map((c) => String(c.ID)).sort()
      await new Promise((resolve) => setTimeout(resolve, 500))
    }
    throw new Error(`docker system df -v failed ten times: ${last?.stderr.trim() ?? ''}`)
  }
  const cacheBefore = await cache()
  t.ok(cacheBefore.length > 0, `the engine has build cache entries (${cacheBefore.length})`)

  const prune = await as('a', ['system', 'prune', '-f'])
  t.equal(prune.code, 0, `docker system prune -f exits 0: ${prune.stdout.toString().trim()}`, out(prune))
  t.notMatch(prune.stderr, /denied/, 'nothing is refused')
  t.notOk(await inspectDirect('container', made.a.container), 'A\'s stopped container is gone')
  t.notOk(await inspectDirect('network', made.a.network), 'A\'s unused network is gone')
  t.notOk(await inspectDirect('image', made.a.dangling), 'A\'s dangling image is gone')
  t.ok(await inspectDirect('image', `${TA}/dangling:1`), 'A\'s tagged image stays (not dangling)')
  t.ok(await inspectDirect('container', made.b.container), 'B\'s stopped container stays')
  t.ok(await inspectDirect('network', made.b.network), 'B\'s unused network stays')
  t.ok(await inspectDirect('image', made.b.dangling), 'B\'s dangling image stays')
  t.ok(await inspectDirect('container', adminContainer), 'the admin\'s stopped container stays')
  t.ok(await inspectDirect('network', adminNetwork), 'the admin\'s unused network stays')
  t.ok(await inspectDirect('image', IMAGE), 'the shared image stays')
  // Other files may add entries meanwhile (their own builds); none of these may go.
  const kept = async (): Promise<string[]> => { const now = new Set(await cache()); return cacheBefore.filter((id) => !now.has(id)) }
  t.same(await kept(), [], 'the build cache is untouched (every entry is still there)')

  const builder = await as('a', ['builder', 'prune', '-af'])
  t.equal(builder.code, 0, 'docker builder prune -af exits 0', out(builder))
  t.match(builder.stdout.toString(), /Total reclaimed space:\s+0B/, 'and reclaims nothing')
  t.same(await kept(), [], 'the build cache is still untouched')

  // Owner-label terms in a prune's filters read as the tenant sees its objects.
  const again = `${P}-a-stopped2`
  t.equal((await as('a', ['create', '--name', again, IMAGE, 'true'])).code, 0, 'A: another stopped container')
  let r = await as('a', ['container', 'prune', '-f', '--filter', `label=${TENANT_LABEL}=${TA}`])
  t.equal(r.code, 0, 'A: container prune --filter label=<owner label>', out(r))
  t.ok(await inspectDirect('container', again), 'matches nothing (no container of A\'s carries an owner label in its view)')
  r = await as('b', ['container', 'prune', '-f', '--filter', `label!=${TENANT_LABEL}=${TB}`])
  t.equal(r.code, 0, 'B: container prune --filter label!=<its owner label>', out(r))
  t.ok(await inspectDirect('container', again), 'never reaches A\'s container')
  t.notOk(await inspectDirect('container', made.b.container), 'but removes B\'s (the term excludes nothing)')
  r = await as('a', ['container', 'prune', '-f', '--filter', `label!=${TENANT_LABEL}=${TA}`])
  t.equal(r.code, 0, 'A: container prune --filter label!=<its owner label>', out(r))
  t.notOk(await inspectDirect('container', again), 'removes A\'s container')
  t.ok(await inspectDirect('container', adminContainer), 'and not the admin\'s')

  await direct(['rm', '-f', adminContainer])
  await direct(['network', 'rm', adminNetwork])
})

// ---------------------------------------------------------------------------------------
// docker load

interface TarEntry { name: string, type?: '0' | '2' | '5', linkname?: string, data?: Buffer }

/** A ustar archive of these entries (names up to 100 bytes). */
function tar (entries: readonly TarEntry[]): Buffer {
  const blocks: Buffer[] = []
  for (const e of entries) {
    const data = e.data ?? Buffer.alloc(0)
    const h = Buffer.alloc(512)
    h.write(e.name, 0, 100)
    h.write(e.type === '5' ? '0000755\0' : '0000644\0', 100)
    h.write('0000000\0', 108)
    h.write('0000000\0', 116)
    h.write(data.length.toString(8).padStart(11, '0') + '\0', 124)
    h.write(Math.floor(Date.now() / 1000).toString(8).padStart(11, '0') + '\0', 136)
    h.write('        ', 148)
    h.write(e.type ?? '0', 156)
    if (e.linkname) h.write(e.linkname, 157, 100)
    h.write('ustar\0', 257)
    h.write('00', 263)
    let sum = 0
    for (const b of h) sum += b
    h.write(sum.toString(8).padStart(6, '0') + '\0 ', 148)
    blocks.push(h, data, Buffer.alloc((512 - (data.length % 512)) % 512))
  }
  blocks.push(Buffer.alloc(1024))
  return Buffer.concat(blocks)
}

/** The entries of an archive docker save wrote (ustar; PAX path records honoured). */
function untar (archive: Buffer): TarEntry[] {
  const out: TarEntry[] = []
  let at = 0
  let paxPath: string | undefined
  while (at + 512 <= archive.length) {
    const h = archive.subarray(at, at + 512)
    if (h.every((b) => b === 0)) break
    const cstr = (b: Buffer): string => b.subarray(0, b.indexOf(0) < 0 ? b.length : b.indexOf(0)).toString()
    const size = parseInt(cstr(h.subarray(124, 136)).trim() || '0', 8)
    const type = String.fromCharCode(h[156])
    const prefix = cstr(h.subarray(345, 500))
    const data = archive.subarray(at + 512, at + 512 + size)
    at += 512 + Math.ceil(size / 512) * 512
    if (type === 'x') {
      const m = /\d+ path=([^\n]*)\n/.exec(data.toString())
      paxPath = m?.[1]
      continue
    }
    const name = paxPath ?? (prefix ? `${prefix}/${cstr(h.subarray(0, 100))}` : cstr(h.subarray(0, 100)))
    paxPath = undefined
    out.push({ name, type: (type === '\0' ? '0' : type) as TarEntry['type'], linkname: cstr(h.subarray(157, 257)), data: Buffer.from(data) })
  }
  return out
}

/** An archive with manifest.json edited, and the legacy repositories file kept (undefined), left out (null) or replaced. */
function retagged (archive: Buffer, edit: (manifest: any[]) => any[], repositories?: object | null): Buffer {
  const entries = untar(archive).map((e) => e.name === 'manifest.json' ? { ...e, data: Buffer.from(JSON.stringify(edit(JSON.parse(e.data!.toString())))) } : e)
    .filter((e) => repositories === undefined || e.name !== 'repositories')
  if (repositories) entries.push({ name: 'repositories', data: Buffer.from(JSON.stringify(repositories)) })
  return tar(entries)
}

/** Every image on the engine: id and tags, to compare before and after. */
async function engineImages (): Promise<string[]> {
  return lines(await direct(['images', '-a', '--no-trunc', '--format', '{{.ID}} {{.Repository}}:{{.Tag}}'])).sort()
}

t.test('docker load as a tenant', async (t) => {
  const app = `${TA}/app:1`
  const box = `${P}-a-box`
  let r = await as('a', ['create', '--name', box, IMAGE, 'true'])
  t.equal(r.code, 0, 'A creates a container', out(r))
  r = await as('a', ['commit', box, app])
  t.equal(r.code, 0, 'A commits it into its namespace', out(r))
  const id = r.stdout.toString().trim()
  const save = await as('a', ['save', app])
  t.equal(save.code, 0, 'A saves its image through the gateway', out(save))
  const archive = save.stdout
  const busybox = await direct(['save', IMAGE])
  t.equal(busybox.code, 0, 'the shared image saved on the engine directly')
  const shared = await inspectDirect('image', IMAGE)

  t.test('A: its own archive, in its namespace', async (t) => {
    t.equal((await as('a', ['rmi', app])).code, 0, 'A removes its image')
    t.notOk(await inspectDirect('image', app), 'gone')
    const load = await as('a', ['load'], { stdin: archive })
    t.equal(load.code, 0, 'docker load', out(load))
    t.match(load.stdout.toString(), `Loaded image: ${app}`, load.stdout.toString().trim())
    const image = await inspectDirect('image', app)
    t.equal(image?.Id, id, 'the same image id as before (its config already carried A\'s owner labels)')
    t.same([owner(image?.Config?.Labels), image?.Config?.Labels?.[SUBJECT_LABEL]], [TA, 'walt'], 'owned by A')
    t.notOk(hasOwnerLabel((await inspectAs('a', 'image', app))?.Config?.Labels), 'A\'s view shows no owner label')
    r = await as('a', ['run', '--rm', app, 'true'])
    t.equal(r.code, 0, 'A runs it', out(r))
    const b = await as('b', ['image', 'inspect', app])
    t.not(b.code, 0, 'B: image inspect fails')
    t.match(b.stderr, /No such image/, 'as for a missing image')
    t.notMatch((await as('b', ['images', '--no-trunc'])).stdout.toString(), id.replace(/^sha256:/, '').slice(0, 12), 'B does not list it')
    const gz = await as('a', ['load'], { stdin: gzipSync(archive) })
    t.equal(gz.code, 0, 'a gzip-compressed archive loads too', out(gz))
    const old = await as('a', ['load', '-q'], { stdin: archive, cli: CLI20 })
    t.equal(old.code, 0, 'and with docker 20.10', out(old))
  })

  t.test('A: the shared image, retagged into A\'s namespace: a new image of A\'s', async (t) => {
    const bb = `${TA}/bb:1`
    const load = await as('a', ['load'], { stdin: retagged(busybox.stdout, (m) => m.map((i) => ({ ...i, RepoTags: [bb] })), null) })
    t.equal(load.code, 0, 'docker load', out(load))
    const image = await inspectDirect('image', bb)
    t.not(image?.Id, shared.Id, 'under a new id (its config got A\'s owner labels)')
    t.same(image?.RootFS, shared.RootFS, 'with the same layers')
    t.same([owner(image?.Config?.Labels), image?.Config?.Labels?.[SUBJECT_LABEL]], [TA, 'walt'], 'owned by A')
    const now = await inspectDirect('image', IMAGE)
    t.same([now.Id, now.RepoTags, now.Config?.Labels ?? null], [shared.Id, shared.RepoTags, shared.Config?.Labels ?? null], 'the shared image is unchanged')
    t.not((await as('b', ['image', 'inspect', bb])).code, 0, 'B cannot see A\'s image')
    t.not((await as('b', ['run', '--rm', image.Id, 'true'])).code, 0, 'nor run it by id')
  })

  t.test('A: an archive without tags loads an untagged image of A\'s', async (t) => {
    const load = await as('a', ['load'], { stdin: retagged(busybox.stdout, (m) => m.map((i) => ({ ...i, RepoTags: null })), null) })
    t.equal(load.code, 0, 'docker load', out(load))
    const loaded = /Loaded image ID: (sha256:[0-9a-f]{64})/.exec(load.stdout.toString())?.[1]
    t.ok(loaded, `loaded ${loaded}`)
    t.equal(owner((await inspectDirect('image', loaded!))?.Config?.Labels), TA, 'owned by A')
    t.not((await as('b', ['image', 'inspect', loaded!])).code, 0, 'invisible to B')
  })

  t.test('refused archives leave the engine unchanged', async (t) => {
    const before = await engineImages()
    const refusals: Array<[Who, string, Buffer, RegExp]> = [
      ['b', 'B loads A\'s archive (A\'s tag)', archive, /outside tenant team-x-\w+'s namespace/],
      ['a', 'A loads the shared image\'s archive', busybox.stdout, /outside tenant team-w-\w+'s namespace/],
      ['a', 'A\'s image tagged onto the shared image\'s tag', retagged(archive, (m) => m.map((i) => ({ ...i, RepoTags: [IMAGE] }))), /outside tenant team-w-\w+'s namespace/],
      ['a', 'a tag of A\'s and one of B\'s', retagged(archive, (m) => m.map((i) => ({ ...i, RepoTags: [`${TA}/app:2`, `${TB}/app:1`] }))), /outside tenant team-w-\w+'s namespace/],
      ['a', 'manifest.json in A\'s namespace, repositories not', retagged(archive, (m) => m, { 'portcullis-test/busybox': { latest: id.replace(/^sha256:/, '') } }), /outside tenant team-w-\w+'s namespace/],
      ['a', 'manifest.json with the tag spelled in lower case', retagged(archive, (m) => m.map((i) => ({ ...i, RepoTags: undefined, repotags: [IMAGE] }))), /outside tenant team-w-\w+'s namespace/],
      ['a', 'a second manifest.json naming the shared tag, later in the archive', Buffer.concat([untarRaw(archive), tar([{ name: './manifest.json', data: Buffer.from(JSON.stringify([{ Config: 'x.json', RepoTags: [IMAGE], Layers: [] }])) }])]), /outside tenant team-w-\w+'s namespace/],
      ['a', 'no manifest.json (only a symbolic link of that name)', tar([...untar(archive).filter((e) => e.name !== 'manifest.json'), { name: 'manifest.json', type: '2', linkname: 'repositories' }]), /no manifest\.json/],
      ['a', 'an entry outside the archive', tar([{ name: '../escape', data: Buffer.from('x') }, ...untar(archive)]), /lies outside the archive/],
    ]
    for (const [who, what, body, want] of refusals) {
      const r = await as(who, ['load'], { stdin: body })
      t.not(r.code, 0, `${what}: refused`)
      t.match(r.stderr, want, `${what}: ${r.stderr.trim()}`)
    }
    t.same(await engineImages(), before, 'the engine\'s images and tags are as before')
  })
})

/** An archive without its end-of-archive blocks (to append entries). */
function untarRaw (archive: Buffer): Buffer {
  const entries = untar(archive)
  return tar(entries).subarray(0, -1024)
}
