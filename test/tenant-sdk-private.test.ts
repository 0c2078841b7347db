/**
 * Issue 20: a tenant under `names: private` cannot tell the gateway from an engine of its
 * own. One client session per SDK (docker-py: test/fixtures/docker_py_private.py, Debian's
 * python3-docker 5.0.3; dockerode: `dockerodeSession` below) with plain names (build `-t
 * myapp`, tag, import untagged and tagged, save, load, run with a named volume on a
 * user-defined network, commit, network and volume lifecycles with prune, container
 * inspect/list/logs/remove, image list/inspect/history/remove) runs
 *  (a) directly on a fresh private engine this test starts, and
 *  (b) through the gateway as two tenants at once, on the shared test engine, with the
 *      same names;
 * each tenant's transcript, normalized, must equal the private engine's, and neither
 * tenant's lists, taken while both have all their objects, show the other's.
 *
 * Policy: the shipped one with `names: private` and, in tenancy.yaml `users.root`, the
 * four tenants of this test: a tenant allowed root runs a container without a user as the
 * image's user, as an engine does (otherwise the rule `tenant-user` gives it the tenant's
 * uid:gid, which `Config.User` of its containers and commits shows).
 *
 * What legitimately differs is normalized (`normalize`): ids, times, uptimes, sizes, the
 * engines' address ranges and data roots, the order of the engine's maps. Besides those,
 * deliberate and documented differences, each named by its rule (keep this list short;
 * `documented` and `removed`):
 *  - rewrite `tenant-safe-defaults` (policies/rewrites.yaml): the HostConfig limits it
 *    sets when the client names none;
 *  - tenancy.yaml `networks.tenantDefault`: the tenant's own default network (made by its
 *    first build) in its network list;
 *  - docs/tenancy.md "Per-tenant names": host paths (`Mountpoint`) keep the engine's
 *    volume name; a saved archive's manifest carries the engine's image names (not
 *    covered yet);
 *  - rule 1, owner labels: an image list's `ParentId` of a built image is the owner
 *    labels' LABEL step; an image remove's `Deleted` list is compared by its first entry
 *    (layers are shared by every tenant's images on one engine).
 *
 * Differences of issue 20 item 2 checked inside the sessions: an endpoint's `Links` naming
 * a container that does not exist yet (create app), a load of a non-archive (the engine's
 * streamed error, word for word), an untagged import (the tenant's own: inspected,
 * listed and removed by id). On the old code the two tenants' concurrent prunes meet the
 * engine's 409, and build output, history, inspect, commit and endpoint links differ.
 */
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Readable } from 'node:stream'
import Docker from 'dockerode'
import t, { type Test } from 'tap'
import { startEngine, stopEngine, type EngineInfo } from './engine/engine'
import { engine, policiesWith, run, startTestGateway, tarOf, tokensFor, type TestGateway } from './helpers/gateway'

const SYSTEM_PYTHON = '/usr/bin/python3'
const DOCKER_PY_SESSION = path.resolve(__dirname, '../../test/fixtures/docker_py_private.py')
const TENANT_LABEL = 'io.portcullis.tenant'

const SECRET = randomBytes(32).toString('hex')
const RUN = randomBytes(3).toString('hex')
const TENANTS = { pa: `sdkpa-${RUN}`, pb: `sdkpb-${RUN}`, na: `sdkna-${RUN}`, nb: `sdknb-${RUN}` } as const
type Who = keyof typeof TENANTS

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pcs-'))
t.teardown(() => fs.rmSync(tmp, { recursive: true, force: true }))
const claims = Object.fromEntries(Object.entries(TENANTS).map(([who, tenant]) => [who, { sub: `${who}-user`, tenant, roles: ['tenant'] }])) as Record<Who, object>
const { token: TOKEN, config: CONFIG } = tokensFor(claims, SECRET, tmp)

let gw: TestGateway
let priv: EngineInfo

t.before(async () => {
  const policies = policiesWith((text) => text
    .replace(/^names: engine$/m, 'names: private')
    .replace(/^ {2}root: \[\]$/m, `  root: [${Object.values(TENANTS).join(', ')}]`))
  const [engineStarted, gateway] = await Promise.all([
    startEngine(fs.mkdtempSync('/tmp/pcx-')),
    startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, undefined, policies),
  ])
  priv = engineStarted
  gw = gateway
})

t.teardown(async () => {
  // Whatever a failed session left of the tenants' objects on the shared engine.
  const admin = new Docker({ socketPath: engine().socket })
  const ignore = (): void => undefined
  for (const tenant of Object.values(TENANTS)) {
    const filters = { label: [`${TENANT_LABEL}=${tenant}`] }
    for (const c of await admin.listContainers({ all: true, filters }).catch(() => [])) await admin.getContainer(c.Id).remove({ force: true }).catch(ignore)
    for (const n of await admin.listNetworks({ filters }).catch(() => [])) await admin.getNetwork(n.Id).remove().catch(ignore)
    for (const v of (await admin.listVolumes({ filters }).catch(() => ({ Volumes: [] }))).Volumes ?? []) await admin.getVolume(v.Name).remove().catch(ignore)
    for (const i of await admin.listImages({ all: true, filters }).catch(() => [])) await admin.getImage(i.Id).remove({ force: true }).catch(ignore)
  }
  await gw?.close()
  if (priv) await stopEngine(priv)
})

interface Session { steps: Array<[string, unknown]>, seen: Record<string, string[]> }

// ---------------------------------------------------------------------------------
// Normalization: what differs between any two engines, whoever the client is.

const HEX64 = /(sha256:)?([0-9a-f]{64})/g
const TIME = /\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})\b/g
const IPV4 = /\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}(\/\d{1,2})?\b/g
const MAC = /\b[0-9a-f]{2}(:[0-9a-f]{2}){5}\b/g
/** An engine's data and exec roots (the test engines live in /tmp/pcx-*). */
const ROOT = /\/tmp\/pcx-[A-Za-z0-9]+/g
const SIZE_KEYS = new Set(['Size', 'VirtualSize', 'SharedSize', 'SizeRw', 'SizeRootFs', 'SpaceReclaimed'])
const TIME_KEYS = new Set(['Created', 'CreatedAt', 'Pid'])
/** Lists in an order of the engine's maps. */
const UNORDERED = new Set(['NetworksDeleted', 'VolumesDeleted', 'Volumes'])

/** Keys sorted (the engine's maps are unordered), sizes, times and uptimes replaced. */
function canonical (v: unknown): unknown {
  if (Array.isArray(v)) return v.map(canonical)
  if (v === null || typeof v !== 'object') return v
  const out: Record<string, unknown> = {}
  for (const k of Object.keys(v).sort()) {
    const x = (v as Record<string, unknown>)[k]
    out[k] = SIZE_KEYS.has(k) && typeof x === 'number'
      ? '<size>'
      : TIME_KEYS.has(k) && typeof x === 'number'
        ? '<number>'
        : k === 'Status' && typeof x === 'string' && /^(Up|Exited)/.test(x)
          ? x.replace(/ (Less than a second|About a minute|\d+ \w+)( ago)?/, ' <uptime>$2')
          : UNORDERED.has(k) && Array.isArray(x) ? [...x].sort((p: any, q: any) => String(p?.Name ?? p).localeCompare(String(q?.Name ?? q))).map(canonical) : canonical(x)
  }
  return out
}

/** The tenant-safe-defaults rewrite's fields of a container's HostConfig. */
const SAFE_DEFAULTS = ['Memory', 'MemorySwap', 'PidsLimit', 'SecurityOpt', 'CgroupnsMode', 'ShmSize', 'LogConfig']

/**
 * A tenant's transcript with the deliberate, documented differences taken out (the list
 * in this file's header), each by its rule, and nothing else.
 */
function documented (s: Session, tenant: string): Session {
  const steps = s.steps.map(([step, answer]): [string, unknown] => {
    let a: any = structuredClone(answer)
    // rewrite tenant-safe-defaults (policies/rewrites.yaml): limits set where the client named none.
    if (step === 'inspect app') a.HostConfig = { ...a.HostConfig, ...Object.fromEntries(SAFE_DEFAULTS.map((k) => [k, '<tenant-safe-defaults>'])) }
    // tenancy.yaml networks.tenantDefault (docs/tenancy.md "The network between tenants"):
    // the tenant's own default network, made by its first build, is listed beside bridge.
    if (step === 'network ls') a = a.filter((n: any) => n.Name !== `${tenant}-default`)
    if (step === 'network ls at the end') a = a.filter((n: string) => n !== `${tenant}-default`)
    // Rule 1, owner labels, on a tenant's build (docs/tenancy.md): the builder's LABEL steps
    // for them leave two more intermediate images, the image's ParentId in a list.
    if (step === 'image ls') a = a.map((i: any) => ({ ...i, ParentId: '<parent>' }))
    let text = JSON.stringify(a)
    // docs/tenancy.md "Per-tenant names": host paths keep the engine's name of a volume.
    text = text.replaceAll(`/volumes/${tenant}.`, '/volumes/')
    // docs/tenancy.md "Per-tenant names", not covered yet: a saved archive's manifest
    // carries the engine's names of the tenant's images.
    if (step === 'save loaded:1') text = text.replaceAll(`portcullis.invalid/${tenant}/`, '')
    return [step, text === undefined ? undefined : JSON.parse(text)]
  })
  return { ...s, steps }
}

/** The private engine's transcript with the same fields replaced. */
function documentedDirect (s: Session): Session {
  return {
    ...s,
    steps: s.steps.map(([step, answer]): [string, unknown] => {
      if (step === 'image ls') return [step, (answer as any[]).map((i) => ({ ...i, ParentId: '<parent>' }))]
      if (step !== 'inspect app') return [step, answer]
      const a: any = answer
      return [step, { ...a, HostConfig: { ...a.HostConfig, ...Object.fromEntries(SAFE_DEFAULTS.map((k) => [k, '<tenant-safe-defaults>'])) } }]
    }),
  }
}

/**
 * The transcript as text with every id replaced by the order of its first appearance
 * (`<id3>`, its 12-digit short form `<id3:12>`), so the same session on two engines reads
 * the same.
 */
function normalize (s: Session): Array<[string, string]> {
  const ids = new Map<string, number>()
  const tokenOf = (hex: string): string => {
    if (!ids.has(hex)) ids.set(hex, ids.size + 1)
    return `<id${ids.get(hex)!}>`
  }
  // Short ids of objects never shown in full (a build's intermediate containers and images).
  const shorts = new Map<string, number>()
  return s.steps.map(([step, answer]) => {
    let text = JSON.stringify(canonical(answer), null, 1)
    text = text.replace(HEX64, (_m, _p, hex: string) => tokenOf(hex))
    // Short ids: the first 12 digits of a full id seen so far (or to come).
    text = text.replace(/\b[0-9a-f]{12}\b/g, (m) => {
      for (const [hex, n] of ids) if (hex.startsWith(m)) return `<id${n}:12>`
      if (!shorts.has(m)) shorts.set(m, shorts.size + 1)
      return `<short${shorts.get(m)!}>`
    })
    text = text.replace(TIME, '<time>').replace(IPV4, '<ip>').replace(MAC, '<mac>').replace(ROOT, '<root>')
    return [step, text]
  })
}

/**
 * An image remove's answer: what it untagged and the image it deleted first. Layers are
 * content-addressed and shared by every tenant's images on one engine, so which of them a
 * remove deletes depends on the other tenants' images (and a tenant's build has the owner
 * labels' intermediate images besides: rule 1).
 */
function removed (s: Session): Session {
  return {
    ...s,
    steps: s.steps.map(([step, answer]): [string, unknown] => {
      if (!step.startsWith('rmi ') || !Array.isArray(answer)) return [step, answer]
      const firstDeleted = answer.find((e: any) => e?.Deleted !== undefined)
      return [step, [...answer.filter((e: any) => e?.Deleted === undefined), ...(firstDeleted ? [firstDeleted] : [])]]
    }),
  }
}

/** `a` and `b` step by step: every step's normalized answer equal. */
function sameTranscript (t: Test, what: string, got: Session, want: Session): void {
  const g = normalize(removed(got))
  const w = normalize(removed(want))
  if (process.env.SDK_PRIVATE_DUMP) {
    const file = (side: string): string => path.join(process.env.SDK_PRIVATE_DUMP!, `${what.replace(/\W+/g, '-')}-${side}.txt`)
    fs.writeFileSync(file('got'), g.map(([s, x]) => `## ${s}\n${x}\n`).join(''))
    fs.writeFileSync(file('want'), w.map(([s, x]) => `## ${s}\n${x}\n`).join(''))
  }
  t.same(g.map(([s]) => s), w.map(([s]) => s), `${what}: the same steps`)
  for (const [i, [step, text]] of w.entries()) {
    t.equal(g[i]?.[1], text, `${what}: ${step}`)
  }
}

/** Neither tenant's lists showed an object of the other's. */
function apart (t: Test, what: string, a: Session, b: Session, tenants: [string, string]): void {
  for (const [x, y, yTenant] of [[a, b, tenants[1]], [b, a, tenants[0]]] as const) {
    const theirs = new Set(y.seen.made)
    for (const kind of ['containers', 'networks', 'images'] as const) {
      t.same(x.seen[kind]!.filter((id) => theirs.has(id)), [], `${what}: no ${kind} of the other tenant's listed`)
    }
    t.same(x.seen.volumes!.filter((m) => m.includes(yTenant)), [], `${what}: no volume of the other tenant's listed`)
  }
}

// ---------------------------------------------------------------------------------
// docker-py

async function dockerPy (host: string, opts: { config?: string, barrier?: [string, string] } = {}): Promise<Session> {
  const args = [DOCKER_PY_SESSION, engine().image, ...(opts.barrier ?? [])]
  const r = await run(SYSTEM_PYTHON, args, { host, timeoutMs: 120_000, ...(opts.config ? { env: { DOCKER_CONFIG: opts.config } } : {}) })
  if (r.code !== 0) throw new Error(`docker-py on ${host} exited ${r.code}: ${r.stderr}`)
  return JSON.parse(r.stdout.toString())
}

/** Each of `whos` waits at its peak until all have reached theirs. */
function barrier (whos: readonly string[]): { dir: string, release: () => Promise<void> } {
  const dir = fs.mkdtempSync(path.join(tmp, 'barrier-'))
  return {
    dir,
    async release () {
      for (const end = Date.now() + 100_000; Date.now() < end;) {
        if (whos.every((w) => fs.existsSync(path.join(dir, `${w}.ready`)))) break
        await new Promise((resolve) => setTimeout(resolve, 100))
      }
      fs.writeFileSync(path.join(dir, 'go'), '')
    },
  }
}

t.test('docker-py: two tenants side by side answer as a private engine', async (t) => {
  const b = barrier(['pa', 'pb'])
  const tcp = `tcp://${gw.tcp}`
  const [direct, pa, pb] = await Promise.all([
    dockerPy(priv.dockerHost),
    dockerPy(tcp, { config: CONFIG.pa, barrier: [b.dir, 'pa'] }),
    dockerPy(tcp, { config: CONFIG.pb, barrier: [b.dir, 'pb'] }),
    b.release(),
  ])
  sameTranscript(t, 'docker-py tenant a', documented(pa, TENANTS.pa), documentedDirect(direct))
  sameTranscript(t, 'docker-py tenant b', documented(pb, TENANTS.pb), documentedDirect(direct))
  apart(t, 'docker-py', pa, pb, [TENANTS.pa, TENANTS.pb])
})

// ---------------------------------------------------------------------------------
// dockerode: the same session

/** Everything a stream gives until it ends. */
async function drain (stream: NodeJS.ReadableStream): Promise<Buffer> {
  const chunks: Buffer[] = []
  for await (const c of stream) chunks.push(Buffer.from(c as Buffer))
  return Buffer.concat(chunks)
}

/** A JSON-lines progress stream's records. */
const records = (b: Buffer): unknown[] => b.toString().split(/\r?\n/).filter((l) => l.trim() !== '').map((l) => JSON.parse(l))

/** The error as dockerode shows it: the status and the engine's message. */
const failure = (err: any): object => ({ status: err?.statusCode, message: err?.json?.message ?? err?.reason ?? String(err) })

/** A multiplexed logs body's streams (stdout and stderr are copied concurrently: their order is not compared). */
function demux (body: Buffer): Record<string, string> {
  const out: Record<string, string> = { stdout: '', stderr: '' }
  for (let at = 0; at + 8 <= body.length;) {
    const size = body.readUInt32BE(at + 4)
    out[body[at] === 2 ? 'stderr' : 'stdout'] += body.subarray(at + 8, at + 8 + size).toString()
    at += 8 + size
  }
  return out
}

/** The JSON documents of an image archive (tar), and how many entries it has. */
function archiveMembers (data: Buffer): Record<string, unknown> {
  const out: Record<string, unknown> = {}
  let files = 0
  for (let at = 0; at + 512 <= data.length;) {
    const h = data.subarray(at, at + 512)
    if (h.every((x) => x === 0)) break
    const name = h.subarray(0, 100).toString().replace(/\0.*$/s, '')
    const size = parseInt(h.subarray(124, 136).toString().replace(/\0.*$/s, '').trim() || '0', 8)
    files++
    if (name === 'manifest.json' || name === 'repositories') out[name] = JSON.parse(data.subarray(at + 512, at + 512 + size).toString())
    at += 512 + Math.ceil(size / 512) * 512
  }
  return { ...out, files }
}

async function dockerodeSession (d: Docker, base: string, peak?: () => Promise<void>): Promise<Session> {
  const steps: Array<[string, unknown]> = []
  const rec = (step: string, value: unknown): void => { steps.push([step, value]) }
  const attempt = async (step: string, f: () => Promise<unknown>): Promise<void> => {
    try { rec(step, await f()) } catch (err) { rec(step, failure(err)) }
  }
  const repos = new Set(['myapp', 'imp', 'loaded', 'snap', 'team/web'])
  const made = new Set<string>()
  const sessionImages = async (): Promise<unknown[]> => (await d.listImages({ all: true }))
    .filter((i) => made.has(i.Id) || (i.RepoTags ?? []).some((tag) => repos.has(tag.replace(/:[^:/]*$/, ''))))
    .sort((x, y) => JSON.stringify(x.RepoTags ?? []).localeCompare(JSON.stringify(y.RepoTags ?? [])) || x.Created - y.Created)

  const context = tarOf({
    Dockerfile: `FROM ${base}\nCOPY hello.txt /hello.txt\nENV APP=myapp\nLABEL app=myapp\nCMD ["cat", "/hello.txt"]\n`,
    'hello.txt': 'hello from myapp\n',
  })
  rec('build', records(await drain(await d.buildImage(Readable.from([context]), { t: 'myapp', rm: true }))))
  made.add((await d.getImage('myapp').inspect()).Id)
  rec('tag myapp myapp:v2', await d.getImage('myapp').tag({ repo: 'myapp', tag: 'v2' }))
  rec('tag myapp:v2 team/web:1', await d.getImage('myapp:v2').tag({ repo: 'team/web', tag: '1' }))
  rec('inspect myapp', await d.getImage('myapp').inspect())
  rec('history myapp:v2', await d.getImage('myapp:v2').history())
  await attempt('inspect myapp:nope', async () => await d.getImage('myapp:nope').inspect())

  const rootfs = tarOf({ 'etc/imported': 'imported\n' })
  const untagged = records(await drain(await (d.importImage as any)(Readable.from([rootfs]))))
  rec('import untagged', untagged)
  const untaggedId = String((untagged.at(-1) as any)?.status)
  made.add(untaggedId)
  rec('inspect untagged import', await d.getImage(untaggedId).inspect())
  rec('import imp:1', records(await drain(await (d.importImage as any)(Readable.from([rootfs]), { repo: 'imp', tag: '1', changes: ['CMD ["cat", "/etc/imported"]'] } as any))))
  made.add((await d.getImage('imp:1').inspect()).Id)
  rec('inspect imp:1', await d.getImage('imp:1').inspect())

  rec('tag myapp loaded:1', await d.getImage('myapp').tag({ repo: 'loaded', tag: '1' }))
  const saved = await drain(await d.getImage('loaded:1').get())
  rec('save loaded:1', archiveMembers(saved))
  rec('rmi loaded:1', await d.getImage('loaded:1').remove())
  rec('load', records(await drain(await d.loadImage(Readable.from([saved])))))
  made.add((await d.getImage('loaded:1').inspect()).Id)
  rec('inspect loaded:1 RepoTags', (await d.getImage('loaded:1').inspect()).RepoTags)
  await attempt('load a non-archive', async () => records(await drain(await d.loadImage(Readable.from([Buffer.from('this is not an image archive\n')])))))

  rec('network create net', await d.createNetwork({ Name: 'net', Driver: 'bridge', Labels: { role: 'app' } }).then((n) => n.id))
  await attempt('network create net again', async () => await d.createNetwork({ Name: 'net', Driver: 'bridge', CheckDuplicate: true }).then((n) => n.id))
  rec('network create spare', await d.createNetwork({ Name: 'spare' }).then((n) => n.id))
  rec('network create other', await d.createNetwork({ Name: 'other' }).then((n) => n.id))
  // dockerode answers a volume create with its own Volume object: its name is what the engine said.
  rec('volume create data', (await d.createVolume({ Name: 'data', Labels: { role: 'app' } }) as any).name)
  rec('volume create spare', (await d.createVolume({ Name: 'spare' }) as any).name)
  rec('network inspect net', await d.getNetwork('net').inspect())
  rec('volume inspect data', await d.getVolume('data').inspect())

  const app = await d.createContainer({
    name: 'app',
    Image: 'myapp',
    Cmd: ['sh', '-c', 'echo stored > /data/f; cat /hello.txt; echo to-err >&2; sleep 60'],
    Labels: { role: 'app' },
    HostConfig: { Binds: ['data:/data'], NetworkMode: 'net' },
    NetworkingConfig: { EndpointsConfig: { net: { Aliases: ['web'], Links: ['later:db'] } } },
  })
  rec('create app', { Id: app.id })
  await app.start()
  await attempt('create app again', async () => await d.createContainer({ name: 'app', Image: 'myapp', Cmd: ['true'] }).then((c) => c.id))
  rec('connect app other', await d.getNetwork('other').connect({ Container: 'app', EndpointConfig: { Aliases: ['site'] } }))
  rec('network inspect other', await d.getNetwork('other').inspect())
  await new Promise((resolve) => setTimeout(resolve, 500))
  rec('logs app', demux(await d.getContainer('app').logs({ stdout: true, stderr: true })))
  rec('inspect app', await d.getContainer('app').inspect())
  rec('ps', await d.listContainers({ all: true }))
  rec('ps filter name=app', (await d.listContainers({ all: true, filters: { name: ['app'] } })).map((c) => c.Names))
  rec('ps filter volume=data', (await d.listContainers({ all: true, filters: { volume: ['data'] } })).map((c) => c.Names))
  rec('ps filter network=net', (await d.listContainers({ all: true, filters: { network: ['net'] } })).map((c) => c.Names))
  rec('disconnect app other', await d.getNetwork('other').disconnect({ Container: 'app' }))
  rec('commit app snap:1', await d.getContainer('app').commit({ repo: 'snap', tag: '1', comment: 'snapshot' }))
  made.add((await d.getImage('snap:1').inspect()).Id)
  rec('inspect snap:1', await d.getImage('snap:1').inspect())

  rec('network ls', (await d.listNetworks()).sort((x, y) => x.Name.localeCompare(y.Name)))
  rec('volume ls', await d.listVolumes())
  rec('image ls', await sessionImages())
  await peak?.()
  const seen = {
    containers: (await d.listContainers({ all: true })).map((c) => c.Id),
    networks: (await d.listNetworks()).map((n) => n.Id),
    images: (await d.listImages({ all: true })).map((i) => i.Id),
    volumes: ((await d.listVolumes()).Volumes ?? []).map((v) => v.Mountpoint),
    made: [...made].sort(),
  }

  rec('network prune', await d.pruneNetworks())
  rec('volume prune', await d.pruneVolumes())
  await attempt('network rm net while used', async () => await d.getNetwork('net').remove())
  await attempt('volume rm data while used', async () => await d.getVolume('data').remove())
  rec('rm -f app', await d.getContainer('app').remove({ force: true }))
  await attempt('inspect app after rm', async () => await d.getContainer('app').inspect())
  rec('network rm net', await d.getNetwork('net').remove())
  await attempt('network inspect net after rm', async () => await d.getNetwork('net').inspect())
  rec('volume rm data', await d.getVolume('data').remove())
  await attempt('volume inspect data after rm', async () => await d.getVolume('data').inspect())
  for (const ref of ['snap:1', 'loaded:1', 'imp:1', 'team/web:1', 'myapp:v2', 'myapp', untaggedId]) {
    await attempt(`rmi ${ref === untaggedId ? 'the untagged import' : ref}`, async () => await d.getImage(ref).remove())
  }
  await attempt('inspect myapp after rmi', async () => await d.getImage('myapp').inspect())
  rec('ps at the end', await d.listContainers({ all: true }))
  rec('network ls at the end', (await d.listNetworks()).map((n) => n.Name).sort())
  rec('volume ls at the end', await d.listVolumes())
  rec('image ls at the end', await sessionImages())
  return { steps, seen }
}

t.test('dockerode: two tenants side by side answer as a private engine', async (t) => {
  const [host, port] = gw.tcp.split(':')
  const as = (who: Who): Docker => new Docker({ host, port: Number(port), protocol: 'http', headers: { Authorization: `Bearer ${TOKEN[who]}` } } as any)
  const b = barrier(['na', 'nb'])
  const peak = (who: string) => async (): Promise<void> => {
    fs.writeFileSync(path.join(b.dir, `${who}.ready`), '')
    while (!fs.existsSync(path.join(b.dir, 'go'))) await new Promise((resolve) => setTimeout(resolve, 100))
  }
  const [direct, na, nb] = await Promise.all([
    dockerodeSession(new Docker({ socketPath: priv.socket }), priv.image),
    dockerodeSession(as('na'), engine().image, peak('na')),
    dockerodeSession(as('nb'), engine().image, peak('nb')),
    b.release(),
  ])
  sameTranscript(t, 'dockerode tenant a', documented(na, TENANTS.na), documentedDirect(direct))
  sameTranscript(t, 'dockerode tenant b', documented(nb, TENANTS.nb), documentedDirect(direct))
  apart(t, 'dockerode', na, nb, [TENANTS.na, TENANTS.nb])
})
