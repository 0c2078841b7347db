/**
 * The shipped policy under attack, on the real engine. One gateway (`auth.jwt` with a
 * secret; its listeners also carry a fixed admin identity, which a bearer token overrides)
 * and one tenant, mallory of team-a, whose token every request carries.
 *
 * 1. Ways out: requests written byte for byte (node `net`, so bodies, framing and headers
 *    are exactly as listed) that try to reach the host, the engine or other tenants. Each
 *    one must be answered 4xx (403 `{"message"}` naming the rule where a rule decides, 400
 *    where the request is refused before policy), and the engine must show no change:
 *    a snapshot taken directly on the engine before and after is the same, and whatever
 *    the request tried to create does not exist. Other test files share the engine and run
 *    in parallel, so the snapshot holds what this file can be responsible for: everything
 *    named with this run's prefix or labelled as mallory's (the gateway labels every
 *    container, volume and network a tenant creates).
 * 2. Ordinary work the same tenant must be able to do, each with its effect checked on the
 *    engine, and what the engine stored for a tenant's container.
 * 3. Requests that are let through but neutralised (the gateway or the engine ignores the
 *    dangerous part), with what the engine stored.
 * 4. Prunes, which a tenant may run: they remove the tenant's own objects, never anyone else's.
 *
 * Objects the tenant did not create (FOREIGN is the admin's: made directly on the engine,
 * it carries no owner label) are out of its reach: the gateway answers for them exactly as
 * the engine answers for a missing object.
 */
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import http from 'node:http'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { gzipSync } from 'node:zlib'
import jwt from 'jsonwebtoken'
import t, { type Test } from 'tap'
import { CLI20, CLI28, dechunk, engine, policiesWith, run, servicesWithoutNoNewPrivileges, startTestGateway, swarmEngine, uniqueName, type RunResult, type TestGateway } from './helpers/gateway'

const SECRET = randomBytes(32).toString('hex')
const PREFIX = uniqueName('pcat')
const IMAGE = engine().image
const COMPOSE = '/usr/bin/docker-compose'
const OWNER = { 'io.portcullis.tenant': 'team-a', 'io.portcullis.subject': 'mallory' }

function sign (claims: object, secret = SECRET): string {
  return jwt.sign({ exp: Math.floor(Date.now() / 1000) + 3600, ...claims }, secret, { algorithm: 'HS256' })
}
const MALLORY = sign({ sub: 'mallory', tenant: 'team-a', roles: ['tenant'] })
const b64 = (v: object): string => Buffer.from(JSON.stringify(v)).toString('base64url')
const UNSIGNED_ADMIN = `${b64({ alg: 'none', typ: 'JWT' })}.${b64({ sub: 'mallory', roles: ['admin'], exp: 4102444800 })}.`

// Host paths. The tenant's prefix in the shipped policy is /srv/portcullis/<tenant>.
const TENANT_DIR = '/srv/portcullis/team-a'
const HOST_DIR = `${TENANT_DIR}/${PREFIX}`
/** The uid and gid team-a's processes run as: tenancy.yaml users.default. */
const TENANT_UID = 65534
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pcat-'))
/** A host directory outside the tenant's prefix, holding a secret. */
const OUTSIDE = path.join(tmp, 'outside')
const SECRET_TEXT = `host secret ${randomBytes(6).toString('hex')}`

/** The tenant's own running container (created through the gateway) and the admin's (created on the engine, no owner label). */
const BOX = `${PREFIX}-box`
const FOREIGN = `${PREFIX}-foreign`

let gw: TestGateway
/** The same gateway configuration in front of the run's swarm-mode engine, for services, secrets and configs. */
let sgw: TestGateway

// ---------------------------------------------------------------------------------------
// Talking to the engine directly, and to the gateway as the docker CLI.

/** A JSON document from the engine. */
type Doc = Record<string, any>

async function direct (method: string, urlPath: string, body?: unknown, socketPath = engine().socket): Promise<{ status: number, json: Doc }> {
  return await new Promise((resolve, reject) => {
    const req = http.request({ socketPath, method, path: urlPath, headers: body === undefined ? {} : { 'content-type': 'application/json' } }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString()
        let json: Doc = {}
        try { json = JSON.parse(text) as Doc } catch { json = { text } }
        resolve({ status: res.statusCode ?? 0, json })
      })
    })
    req.on('error', reject)
    req.end(body === undefined ? undefined : JSON.stringify(body))
  })
}

type Kind = 'container' | 'volume' | 'network' | 'image'
/** A service, secret or config by its exact name, directly on the swarm-mode engine; undefined when there is none. */
const swarmObject = async (kind: 'services' | 'secrets' | 'configs', name: string): Promise<Doc | undefined> =>
  ((await direct('GET', `/${kind}?filters=${encodeURIComponent(JSON.stringify({ name: [name] }))}`, undefined, swarmEngine().socket)).json as Doc[]).find((x) => x.Spec?.Name === name)
const OBJECT_PATH: Record<Kind, string> = { container: '/containers', volume: '/volumes', network: '/networks', image: '/images' }
const inspect = async (kind: Kind, name: string): Promise<Doc> => (await direct('GET', `${OBJECT_PATH[kind]}/${name}${kind === 'container' || kind === 'image' ? '/json' : ''}`)).json
const exists = async (kind: Kind, name: string): Promise<boolean> =>
  (await direct('GET', `${OBJECT_PATH[kind]}/${name}${kind === 'container' || kind === 'image' ? '/json' : ''}`)).status === 200
const remove = async (kind: Kind, name: string): Promise<void> => {
  await direct('DELETE', `${OBJECT_PATH[kind]}/${encodeURIComponent(name)}${kind === 'network' ? '' : '?force=1&v=1'}`)
}

function dockerConfig (token: string): string {
  const dir = fs.mkdtempSync(path.join(tmp, 'cfg-'))
  fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify({ HttpHeaders: { Authorization: `Bearer ${token}` } }))
  return dir
}
const TENANT_CONFIG = dockerConfig(MALLORY)

interface CliOpts { stdin?: string | Buffer, cli?: string, env?: NodeJS.ProcessEnv, cwd?: string, host?: string }

/** The docker CLI (28 unless told) as mallory through the gateway (in front of the plain engine unless told). */
async function tenant (args: readonly string[], opts: CliOpts = {}): Promise<RunResult> {
  return await run(opts.cli ?? CLI28, args, { host: opts.host ?? gw.dockerHost, stdin: opts.stdin, cwd: opts.cwd, env: { DOCKER_CONFIG: TENANT_CONFIG, ...opts.env }, timeoutMs: 120_000 })
}

/** The same, asserting that it exits 0; returns stdout. */
async function docker (t: Test, args: readonly string[], opts: CliOpts = {}): Promise<string> {
  const r = await tenant(args, opts)
  t.equal(r.code, 0, `docker ${args.join(' ')}`, r.code === 0 ? {} : { stderr: r.stderr })
  return r.stdout.toString()
}

// ---------------------------------------------------------------------------------------
// Requests written byte for byte.

interface Req {
  method?: string
  /** The request target, exactly as sent. */
  target: string
  body?: string | Buffer
  /** Header values replacing the defaults (Host, Connection: close, the tenant's Authorization, JSON Content-Type, framing); null leaves one out. */
  set?: Record<string, string | null>
  /** Header lines added after the defaults (repeats allowed). */
  add?: Array<[string, string]>
  /** `length` (default); `chunked` in two chunks; `zero-length`: `Content-Length: 0` and the body sent anyway; `length-and-chunked`: both headers. */
  framing?: 'length' | 'chunked' | 'zero-length' | 'length-and-chunked'
}

function chunked (body: Buffer): Buffer {
  const half = Math.ceil(body.length / 2)
  const parts = [body.subarray(0, half), body.subarray(half)].filter((p) => p.length)
  return Buffer.concat([...parts.flatMap((p) => [Buffer.from(`${p.length.toString(16)}\r\n`), p, Buffer.from('\r\n')]), Buffer.from('0\r\n\r\n')])
}

function wire (r: Req): Buffer {
  const body = Buffer.from(r.body ?? '')
  const framing = r.framing ?? 'length'
  const isChunked = framing === 'chunked' || framing === 'length-and-chunked'
  const defaults: Array<[string, string | undefined]> = [
    ['Host', 'docker'],
    ['Connection', 'close'],
    ['Authorization', `Bearer ${MALLORY}`],
    ['Content-Type', r.body === undefined ? undefined : 'application/json'],
    ['Content-Length', framing === 'chunked' ? undefined : framing === 'zero-length' ? '0' : String(body.length)],
    ['Transfer-Encoding', isChunked ? 'chunked' : undefined],
  ]
  const lines: string[] = []
  for (const [name, value] of defaults) {
    const v = r.set !== undefined && name in r.set ? r.set[name] : value
    if (v !== undefined && v !== null) lines.push(`${name}: ${v}`)
  }
  for (const [name, value] of r.add ?? []) lines.push(`${name}: ${value}`)
  const head = Buffer.from(`${r.method ?? 'POST'} ${r.target} HTTP/1.1\r\n${lines.join('\r\n')}\r\n\r\n`, 'latin1')
  return Buffer.concat([head, isChunked ? chunked(body) : body])
}

interface Reply {
  status: number
  body: Buffer
  json: Doc | undefined
  /** Status of every response seen on the connection. */
  statuses: number[]
}

function parseReply (data: Buffer): Reply {
  const statuses = [...data.toString('latin1').matchAll(/HTTP\/1\.[01] (\d{3}) /g)].map((m) => Number(m[1]))
  const end = data.indexOf('\r\n\r\n')
  if (end < 0) return { status: 0, body: data, json: undefined, statuses }
  const [statusLine, ...lines] = data.subarray(0, end).toString('latin1').split('\r\n')
  const headers = Object.fromEntries(lines.map((l) => [l.slice(0, l.indexOf(':')).trim().toLowerCase(), l.slice(l.indexOf(':') + 1).trim()]))
  let body = data.subarray(end + 4)
  if (/chunked/i.test(headers['transfer-encoding'] ?? '')) body = dechunk(body)
  else if (headers['content-length'] !== undefined) body = body.subarray(0, Number(headers['content-length']))
  let json: Doc | undefined
  try { json = JSON.parse(body.toString()) as Doc } catch { json = undefined }
  return { status: Number(statusLine.split(' ')[1]), body, json, statuses }
}

/** Send the bytes to the gateway's unix socket and read until it closes the connection. */
async function exchange (bytes: Buffer, socket = gw.socket): Promise<Reply> {
  return await new Promise((resolve) => {
    const s = net.connect(socket)
    const chunks: Buffer[] = []
    s.on('data', (c: Buffer) => chunks.push(c))
    // EPIPE/ECONNRESET when the gateway refuses a body it did not read: the answer is already in.
    s.on('error', () => {})
    s.on('close', () => resolve(parseReply(Buffer.concat(chunks))))
    s.setTimeout(60_000, () => s.destroy())
    s.write(bytes)
  })
}
const send = async (r: Req): Promise<Reply> => await exchange(wire(r))

// ---------------------------------------------------------------------------------------
// What this file can be responsible for on the shared engine.

const ours = (name: string, labels: Record<string, string> | null | undefined): boolean =>
  // Only mallory acts as mallory: other test files on the shared engine use other subjects.
  name.includes(PREFIX) || labels?.['io.portcullis.subject'] === 'mallory'

async function snapshot (): Promise<Doc> {
  const [containers, volumes, networks, images, info] = await Promise.all(
    ['/containers/json?all=1', '/volumes', '/networks', '/images/json?all=1', '/info'].map(async (p) => (await direct('GET', p)).json))
  const fixtures = await Promise.all([BOX, FOREIGN].map(async (name) => {
    const c = await inspect('container', name)
    return { name: c.Name, state: c.State?.Status, restarts: c.RestartCount, execs: c.ExecIDs, hostConfig: c.HostConfig }
  }))
  const snap: Doc = {
    containers: (containers as Doc[]).filter((c) => ours(c.Names.join(' '), c.Labels)).map((c) => `${c.Names[0]} ${c.Image} ${c.State}`).sort(),
    volumes: ((volumes.Volumes ?? []) as Doc[]).filter((v) => ours(v.Name, v.Labels)).map((v) => `${v.Name} ${v.Driver} ${JSON.stringify(v.Options)}`).sort(),
    networks: (networks as Doc[]).filter((n) => ours(n.Name, n.Labels)).map((n) => `${n.Name} ${n.Driver}`).sort(),
    images: (images as Doc[]).flatMap((i) => (i.RepoTags ?? []) as string[]).filter((tag) => tag.includes(PREFIX)).sort(),
    fixtures,
  }
  snap.swarm = info.Swarm?.LocalNodeState
  // Swarm objects live on the run's swarm-mode engine (the swarm workflows use it).
  for (const kind of ['services', 'secrets', 'configs']) {
    snap[kind] = ((await direct('GET', `/${kind}`, undefined, swarmEngine().socket)).json as Doc[]).filter((x) => ours(x.Spec?.Name ?? '', x.Spec?.Labels)).map((x) => x.Spec?.Name as string).sort()
  }
  return snap
}

/** Remove everything this file may have left on the engine. */
async function sweep (): Promise<void> {
  const [containers, volumes, networks, images] = await Promise.all(
    ['/containers/json?all=1', '/volumes', '/networks', '/images/json'].map(async (p) => (await direct('GET', p)).json))
  await Promise.all((containers as Doc[]).filter((c) => ours(c.Names.join(' '), c.Labels)).map(async (c) => await remove('container', c.Id)))
  await Promise.all(((volumes.Volumes ?? []) as Doc[]).filter((v) => ours(v.Name, v.Labels)).map(async (v) => await remove('volume', v.Name)))
  await Promise.all((networks as Doc[]).filter((n) => ours(n.Name, n.Labels)).map(async (n) => await remove('network', n.Id)))
  for (const tag of (images as Doc[]).flatMap((i) => (i.RepoTags ?? []) as string[]).filter((x) => x.includes(PREFIX))) await remove('image', tag)
  // Services first: a secret or config in use by one cannot be removed.
  for (const kind of ['services', 'secrets', 'configs']) {
    const list = await direct('GET', `/${kind}`, undefined, swarmEngine().socket)
    if (list.status !== 200) continue
    await Promise.all((list.json as Doc[]).filter((x) => ours(x.Spec?.Name ?? '', x.Spec?.Labels)).map(async (x) => await direct('DELETE', `/${kind}/${String(x.ID)}`, undefined, swarmEngine().socket)))
  }
  const swarmBoxes = (await direct('GET', '/containers/json?all=1', undefined, swarmEngine().socket)).json as Doc[]
  await Promise.all(swarmBoxes.filter((c) => ours(c.Names.join(' '), c.Labels)).map(async (c) => await direct('DELETE', `/containers/${String(c.Id)}?force=1`, undefined, swarmEngine().socket)))
}

// ---------------------------------------------------------------------------------------
// Set-up: the gateway, the tenant's container, someone else's container, the host paths.

const madeDirs: string[] = []
t.before(async () => {
  gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`)
  // Tenants' services on the API 1.41 swarm engine: allowed without no-new-privileges (tenancy.yaml services).
  sgw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, `unix://${swarmEngine().socket}`, policiesWith(servicesWithoutNoNewPrivileges))
  for (const dir of ['/srv', '/srv/portcullis', TENANT_DIR, HOST_DIR]) {
    if (!fs.existsSync(dir)) { fs.mkdirSync(dir); madeDirs.push(dir) }
  }
  // The tenant's processes run as its uid:gid (tenancy.yaml users: 65534:65534 as shipped),
  // not root: its host directory is its own, as an operator would set it up.
  fs.chownSync(HOST_DIR, TENANT_UID, TENANT_UID)
  fs.mkdirSync(OUTSIDE)
  fs.mkdirSync(path.join(tmp, 'outside-2'))
  fs.writeFileSync(path.join(OUTSIDE, 'secret'), SECRET_TEXT)
  const box = await tenant(['run', '-d', '--name', BOX, IMAGE, 'sleep', '3600'])
  if (box.code !== 0) throw new Error(`cannot start ${BOX} through the gateway: ${box.stderr}`)
  const foreign = await run(CLI28, ['run', '-d', '--name', FOREIGN, IMAGE, 'sleep', '3600'], { host: engine().dockerHost })
  if (foreign.code !== 0) throw new Error(`cannot start ${FOREIGN}: ${foreign.stderr}`)
  // What a tenant can do in its own directory: plant a symlink (planted from the host here:
  // the shipped policy binds /srv/portcullis only where it is mounted nosymfollow, issue 18).
  fs.symlinkSync(OUTSIDE, path.join(HOST_DIR, 'link'))
  fs.lchownSync(path.join(HOST_DIR, 'link'), TENANT_UID, TENANT_UID)
})
t.teardown(async () => {
  await sweep()
  await gw?.close()
  await sgw?.close()
  fs.rmSync(HOST_DIR, { recursive: true, force: true })
  for (const dir of madeDirs.reverse()) { try { fs.rmdirSync(dir) } catch { /* in use by someone else */ } }
  fs.rmSync(tmp, { recursive: true, force: true })
})

// ---------------------------------------------------------------------------------------
// 1. Ways out.

interface Attack {
  name: string
  req: Req
  /** The status the gateway (or, where `engine` is set, the engine behind it) must answer. */
  status: number
  /** For 403: the rule id the message must name; null for "no rule allows it". */
  rule?: string | null
  /** For 403 from the tenancy stage (after the policy allowed it): the tenancy rule the message must name. */
  tenancyRule?: string
  message?: RegExp
  /** The engine, not the gateway, refuses it (the policy has nothing to say; the engine's own checks hold). */
  engine?: boolean
  /** Objects the request tries to create: none may exist afterwards. */
  creates?: Array<[Kind, string]>
}
type Probe = Pick<Attack, 'req' | 'creates'>

let seq = 0
const fresh = (): string => `${PREFIX}-${++seq}`

/** ContainerCreate of a fresh name with this HostConfig (and other top-level fields). */
function create (hostConfig: object, fields: object = {}): Probe {
  const name = fresh()
  return { req: { target: `/v1.41/containers/create?name=${name}`, body: JSON.stringify({ Image: IMAGE, Cmd: ['true'], ...fields, HostConfig: hostConfig }) }, creates: [['container', name]] }
}
/** ContainerCreate with a body written by hand: `rest` follows `"Image":...,`. */
function createJson (rest: string, req: Partial<Req> = {}): Probe {
  const name = fresh()
  return { req: { target: `/v1.41/containers/create?name=${name}`, body: `{"Image":${JSON.stringify(IMAGE)},${rest}}`, ...req }, creates: [['container', name]] }
}
function volume (driver: string, opts: Record<string, string>): Probe {
  const name = fresh()
  return { req: { target: '/v1.41/volumes/create', body: JSON.stringify({ Name: name, Driver: driver, DriverOpts: opts }) }, creates: [['volume', name]] }
}
function network (driver: string, options: object = {}): Probe {
  const name = fresh()
  return { req: { target: '/v1.41/networks/create', body: JSON.stringify({ Name: name, Driver: driver, Options: options }) }, creates: [['network', name]] }
}
const exec = (body: object, container = BOX): Probe => ({ req: { target: `/v1.41/containers/${container}/exec`, body: JSON.stringify({ Cmd: ['id'], AttachStdout: true, ...body }) } })
const post = (target: string, body?: unknown): Probe =>
  ({ req: { target, ...(body === undefined ? {} : { body: typeof body === 'string' ? body : JSON.stringify(body) }) } })
const build = (query: string): Probe => {
  const tag = fresh()
  return { req: { target: `/v1.41/build?t=${tag}&${query}`, set: { 'Content-Type': 'application/x-tar' } }, creates: [['image', tag]] }
}

const forbid = (name: string, p: Probe, rule: string | null, more: Partial<Attack> = {}): Attack => ({ name, ...p, status: 403, rule, ...more })
const refuse = (name: string, p: Probe, status: number, message: RegExp, more: Partial<Attack> = {}): Attack => ({ name, ...p, status, message, ...more })
/** Allowed by the policy, refused by the tenancy stage naming its rule. */
const tenancy = (name: string, p: Probe, rule: string): Attack => ({ name, ...p, status: 403, tenancyRule: rule })
/** Exactly what the engine answers for a container that does not exist. */
const noSuchContainer = (name: string): RegExp => new RegExp(`^No such container: ${name}$`)
const PRIV = JSON.stringify({ Image: IMAGE, HostConfig: { Privileged: true } })
/** A privileged create sent to a target or with headers that must be refused before policy. */
const privileged = (target: string, req: Partial<Req> = {}): Probe => ({ req: { target, body: PRIV, ...req } })

const SECCOMP_ALLOW_ALL = `seccomp=${JSON.stringify({ defaultAction: 'SCMP_ACT_ALLOW' })}`
const BIG = JSON.stringify({ Image: IMAGE, Labels: { pad: 'x'.repeat(1_100_000) }, HostConfig: { Privileged: true } })

const attacks: Attack[] = [
  // Privileged, however spelled
  forbid('HostConfig.Privileged', create({ Privileged: true }), 'no-privileged'),
  forbid('lower-case key "privileged"', createJson('"HostConfig":{"privileged":true}'), 'no-privileged'),
  forbid('upper-case key "PRIVILEGED"', createJson('"HostConfig":{"PRIVILEGED":true}'), 'no-privileged'),
  forbid('key spelled with a \\u escape ("Privil\\u0065ged")', createJson('"HostConfig":{"Privil\\u0065ged":true}'), 'no-privileged'),
  forbid('nested "hostconfig" in lower case', createJson('"hostconfig":{"Privileged":true}'), 'no-privileged'),
  refuse('duplicate key, false then true', createJson('"HostConfig":{"Privileged":false,"Privileged":true}'), 400, /duplicate/),
  refuse('case-variant duplicate "Privileged" + "privileged"', createJson('"HostConfig":{"Privileged":false,"privileged":true}'), 400, /duplicate field HostConfig\.Privileged/),
  refuse('two HostConfig objects (Go merges them)', createJson('"HostConfig":{"Privileged":true},"hostConfig":{"Memory":1}'), 400, /duplicate field HostConfig/),
  refuse('unicode-folding key "Privileſed" (U+017F folds to s in Go)', createJson('"HostConfig":{"Privileſed":true}'), 400, /non-ASCII field name/),
  forbid('privileged body sent chunked', createJson('"HostConfig":{"Privileged":true}', { framing: 'chunked' }), 'no-privileged'),
  refuse('privileged body after "Content-Length: 0"', createJson('"HostConfig":{"Privileged":true}', { framing: 'zero-length' }), 400, /./),
  refuse('Content-Length and Transfer-Encoding together', createJson('"HostConfig":{"Privileged":true}', { framing: 'length-and-chunked' }), 400, /./),

  // HostConfig fields at the top level: the engine's deprecated wrapper (runconfig.ContainerConfigWrapper)
  // reads them as the host config when HostConfig is absent or null, and copies Memory, MemorySwap,
  // CpuShares, CpusetCpus and VolumeDriver into an empty HostConfig field when it is present (the
  // others it then ignores: see "let through, but neutralised").
  forbid('HostConfig fields at the top level, no HostConfig key', createJson('"Privileged":true,"Binds":["/etc:/x"],"CapAdd":["ALL"]'), 'no-privileged'),
  forbid('HostConfig fields at the top level beside "HostConfig":null', createJson('"HostConfig":null,"Privileged":true'), 'no-privileged'),
  forbid('HostConfig field at the top level in lower case ("privileged")', createJson('"privileged":true'), 'no-privileged'),
  forbid('HostConfig field at the top level: Binds of /etc', createJson('"Binds":["/etc:/x"]'), 'host-binds'),
  forbid('HostConfig field at the top level: Runtime', createJson('"Runtime":"sysbox-runc"'), 'runtime'),
  forbid('HostConfig field at the top level: PidMode host', createJson('"pidmode":"host"'), 'no-host-namespaces'),
  refuse('HostConfig field at the top level and its case variant', createJson('"Privileged":false,"privileged":true'), 400, /duplicate field Privileged \("Privileged" and "privileged"\)/),
  refuse('a HostConfig that is a string beside top-level fields', createJson('"HostConfig":"x","Privileged":true'), 400, /HostConfig must be a JSON object or null, not a string/),
  tenancy('top-level Memory over the quota beside an empty HostConfig (the engine copies it in)', createJson('"HostConfig":{},"Memory":137438953472'), 'quota-memory'),
  tenancy('top-level Memory over the quota, no HostConfig key', createJson('"Memory":137438953472'), 'quota-memory'),
  refuse('top-level Memory beside HostConfig that the engine cannot decode', createJson('"HostConfig":{},"Memory":"128g"'), 400, /Memory at the top level .* must be a 64-bit integer or null; send HostConfig\.Memory instead/),

  // Host paths: Binds, Mounts, volumes
  ...['/:/host', '/etc:/x:ro', '/var/run/docker.sock:/var/run/docker.sock', `${TENANT_DIR}/../../../etc:/x`, `${TENANT_DIR}/x/../../team-b:/x`,
    '/srv/portcullis/team-b/data:/x', `${TENANT_DIR}-evil:/x`, '/srv/portcullis:/x', '/etc/:/x', '//etc:/x']
    .map((bind) => forbid(`Binds ${bind}`, create({ Binds: [bind] }), 'host-binds')),
  forbid('Mounts type bind of the docker socket', create({ Mounts: [{ Type: 'bind', Source: '/var/run/docker.sock', Target: '/s' }] }), 'host-binds'),
  forbid('Mounts with lower-case keys', createJson('"HostConfig":{"Mounts":[{"type":"bind","source":"/etc","target":"/x"}]}'), 'host-binds'),
  // Engines are case-sensitive on mount types (dockerd: "mount type unknown"; Podman the same): a type the gateway does not know is refused before.
  refuse('Mounts type "BIND" (a mount type outside bind, volume, tmpfs)', create({ Mounts: [{ Type: 'BIND', Source: '/etc', Target: '/x' }] }), 403, /host-binds/, { rule: 'host-binds' }),
  forbid('Mounts volume: local driver o=bind of /etc', create({ Mounts: [{ Type: 'volume', Target: '/x', VolumeOptions: { DriverConfig: { Name: 'local', Options: { type: 'none', o: 'bind', device: '/etc' } } } }] }), 'host-binds'),
  forbid('VolumeCreate: local driver o=bind of /root', volume('local', { type: 'none', o: 'bind', device: '/root' }), 'host-binds'),
  forbid('VolumeCreate: rbind of another tenant\'s directory', volume('', { type: 'none', o: 'ro,rbind', device: '/srv/portcullis/team-b' }), 'host-binds'),
  // A symlink planted from an allowed container (in set-up) in the tenant's own directory, pointing outside it:
  // the gateway resolves it as the kernel will.
  forbid('bind of a symlink the tenant planted in its own directory', create({ Binds: [`${HOST_DIR}/link:/x:ro`] }, { Cmd: ['cat', '/x/secret'] }), 'host-binds'),
  forbid('bind below a symlink the tenant planted in its own directory', create({ Binds: [`${HOST_DIR}/link/secret:/x:ro`] }), 'host-binds'),
  forbid('Mounts bind of a symlink the tenant planted in its own directory', create({ Mounts: [{ Type: 'bind', Source: `${HOST_DIR}/link`, Target: '/x' }] }), 'host-binds'),
  forbid('VolumeCreate: local driver overlay with lowerdir outside the prefix',
    volume('local', { type: 'overlay', device: 'overlay', o: `lowerdir=${OUTSIDE}:${path.join(tmp, 'outside-2')}` }), 'host-volumes'),
  forbid('VolumeCreate: local driver mounting a host block device', volume('local', { type: 'ext4', device: '/dev/pcat-no-such-disk' }), 'host-volumes'),
  forbid('Mounts volume: local driver overlay with lowerdir outside the prefix',
    create({ Mounts: [{ Type: 'volume', Target: '/x', VolumeOptions: { DriverConfig: { Name: 'local', Options: { type: 'overlay', device: 'overlay', o: `lowerdir=${OUTSIDE}:${path.join(tmp, 'outside-2')}` } } } }] }), 'host-volumes'),

  // Capabilities, devices
  ...['SYS_ADMIN', 'ALL', 'cap_sys_ptrace', 'CAP_NET_ADMIN'].map((cap) => forbid(`CapAdd ${cap}`, create({ CapAdd: [cap] }), 'capabilities')),
  forbid('Devices /dev/mem', create({ Devices: [{ PathOnHost: '/dev/mem', PathInContainer: '/dev/mem', CgroupPermissions: 'rwm' }] }), 'no-devices'),
  forbid('DeviceRequests (all GPUs)', create({ DeviceRequests: [{ Driver: 'nvidia', Count: -1, Capabilities: [['gpu']] }] }), 'no-device-requests'),
  forbid('DeviceCgroupRules', create({ DeviceCgroupRules: ['c 1:1 rwm'] }), 'no-device-cgroup-rules'),
  forbid('ContainerUpdate adding /dev/mem to a running container', post(`/v1.41/containers/${BOX}/update`, { Devices: [{ PathOnHost: '/dev/mem', PathInContainer: '/dev/mem', CgroupPermissions: 'rwm' }] }), 'no-devices'),

  // Namespaces
  ...([['NetworkMode', 'host'], ['NetworkMode', `container:${BOX}`], ['PidMode', 'host'], ['PidMode', `container:${BOX}`], ['IpcMode', 'host'],
    ['UTSMode', 'host'], ['UsernsMode', 'host'], ['CgroupnsMode', 'host']] as const)
    .map(([field, mode]) => forbid(`${field} ${mode}`, create({ [field]: mode }), 'no-host-namespaces')),
  refuse('NetworkConnect to the host network', post('/v1.41/networks/host/connect', { Container: BOX }), 400, /host network/, { engine: true }),

  // Confinement
  ...['seccomp=unconfined', 'seccomp:unconfined', 'apparmor=unconfined', 'label=disable', 'systempaths=unconfined']
    .map((opt) => forbid(`SecurityOpt ${opt}`, create({ SecurityOpt: [opt] }), 'security-options')),
  forbid('MaskedPaths [] and ReadonlyPaths [] (what the CLI sends for systempaths=unconfined)', create({ MaskedPaths: [], ReadonlyPaths: [] }), 'security-options'),
  forbid('MaskedPaths with a custom list', create({ MaskedPaths: ['/proc/nothing'] }), 'security-options'),
  forbid('SecurityOpt seccomp=<inline allow-all profile>', create({ SecurityOpt: [SECCOMP_ALLOW_ALL] }), 'security-options'),
  forbid('SecurityOpt no-new-privileges, then no-new-privileges=false', create({ SecurityOpt: ['no-new-privileges', 'no-new-privileges=false'] }), 'security-options'),
  forbid('SecurityOpt "disable" (the engine reads it as label=disable)', create({ SecurityOpt: ['disable'] }), 'security-options'),
  forbid('SecurityOpt apparmor=<another profile>', create({ SecurityOpt: ['apparmor=pcat-no-such-profile'] }), 'security-options'),
  forbid('Sysctls', create({ Sysctls: { 'kernel.shm_rmid_forced': '1' } }), 'no-sysctls'),
  forbid('Runtime', create({ Runtime: 'sysbox-runc' }), 'runtime'),
  forbid('CgroupParent', create({ CgroupParent: '/system.slice' }), 'no-cgroup-parent'),
  forbid('VolumesFrom another container', create({ VolumesFrom: [FOREIGN] }), 'no-volumes-from'),
  forbid('PidsLimit -1 (unlimited)', create({ PidsLimit: -1 }), 'pids-limit'),

  // Exec
  // root is tenancy.yaml's (users): uid or gid 0 by rule tenant-user, names (which the container's
  // /etc/passwd resolves, "+0" included) by numeric-user
  ...['0', '0:0'].map((user) => tenancy(`exec as User "${user}"`, exec({ User: user }), 'tenant-user')),
  ...['root', 'root:root'].map((user) => tenancy(`exec as User "${user}"`, exec({ User: user }), 'numeric-user')),
  tenancy('exec as User "00" (parsed as uid 0)', exec({ User: '00' }), 'tenant-user'),
  tenancy('exec as User "+0" (parsed as uid 0)', exec({ User: '+0' }), 'numeric-user'),
  tenancy('exec as User "1000:0" (group root)', exec({ User: '1000:0' }), 'tenant-user'),
  tenancy('exec as User "65534:root" (group root)', exec({ User: '65534:root' }), 'numeric-user'),
  forbid('privileged exec', exec({ Privileged: true, User: '1000' }), 'no-privileged-exec'),
  forbid('privileged exec, lower-case key', { req: { target: `/v1.41/containers/${BOX}/exec`, body: '{"Cmd":["id"],"privileged":true,"User":"1000"}' } }, 'no-privileged-exec'),
  refuse('exec with "User" and "user"', { req: { target: `/v1.41/containers/${BOX}/exec`, body: '{"Cmd":["id"],"User":"1000","user":"0"}' } }, 400, /duplicate field User/),
  refuse('exec start with "Detach" and "detach"', post('/v1.41/exec/0123456789abcdef/start', '{"Detach":true,"detach":false}'), 400, /duplicate field Detach/),
  refuse('exec start upgraded, with a chunked body', { req: { target: '/v1.41/exec/0123456789abcdef/start', body: '{"Detach":false}', set: { Connection: 'Upgrade' }, add: [['Upgrade', 'tcp']], framing: 'chunked' } },
    400, /chunked body cannot precede a connection upgrade/),

  // Builds, networks
  forbid('build networkmode=host', build('networkmode=host'), 'build-network'),
  forbid('build networkmode=container:<id>', build(`networkmode=container:${BOX}`), 'build-network'),
  forbid('build extrahosts', build('extrahosts=metadata:169.254.169.254'), 'build-extra-hosts'),
  forbid('build cgroupparent', build('cgroupparent=/system.slice'), 'no-cgroup-parent'),
  refuse('build networkmode=default;networkmode=host', build('networkmode=default;networkmode=host'), 400, /query string contains `;`/),
  forbid('NetworkCreate macvlan', network('macvlan', { parent: 'eth0' }), 'network-driver'),
  forbid('NetworkCreate ipvlan', network('ipvlan', { parent: 'eth0' }), 'network-driver'),
  forbid('NetworkCreate with the host driver', network('host'), 'network-driver'),

  // Whole areas a tenant has no business in
  forbid('plugin pull', post('/v1.41/plugins/pull?remote=vieux/sshfs&name=sshfs', [{ Name: 'host', Value: ['/'] }]), null),
  forbid('plugin create', post(`/v1.41/plugins/create?name=${fresh()}`), null),
  forbid('plugin set', post('/v1.41/plugins/sshfs/set', ['DEBUG=1']), null),
  forbid('swarm init', post('/v1.41/swarm/init', { ListenAddr: '0.0.0.0:2377' }), null),
  forbid('swarm join', post('/v1.41/swarm/join', { RemoteAddrs: ['10.0.0.1:2377'], JoinToken: 'SWMTKN-1-x' }), null),
  forbid('service create with a bind of /', post('/v1.41/services/create', { Name: fresh(), TaskTemplate: { ContainerSpec: { Image: IMAGE, Mounts: [{ Type: 'bind', Source: '/', Target: '/host' }] } } }), 'host-binds'),
  // Services are the tenant's own business (see the workflows), within its quota.
  // A service without limits gets the containers' defaults (rewrites.yaml); past the quota it is refused.
  tenancy('service create past the tenant\'s memory quota', post('/v1.41/services/create', { Name: fresh(), TaskTemplate: { ContainerSpec: { Image: IMAGE }, Resources: { Limits: { MemoryBytes: 1024 ** 4 } } } }), 'quota-memory'),
  forbid('image push', post(`/v1.41/images/${IMAGE.split(':')[0]}/push?tag=latest`), null),
  refuse('image push with X-Registry-Auth twice', { req: { target: `/v1.41/images/${IMAGE.split(':')[0]}/push`, add: [['X-Registry-Auth', 'e30='], ['X-Registry-Auth', 'e30=']] } }, 400, /x-registry-auth is repeated/),

  // Other tenants' things: the admin's FOREIGN answers as missing, and nothing happens to it (the snapshot holds its state and execs).
  refuse('exec into a container the tenant did not create', exec({ User: '65534' }, FOREIGN), 404, noSuchContainer(FOREIGN)),
  refuse('copy files out of a container the tenant did not create', { req: { method: 'GET', target: `/v1.41/containers/${FOREIGN}/archive?path=/etc` } }, 404, noSuchContainer(FOREIGN)),
  refuse('kill a container the tenant did not create', post(`/v1.41/containers/${FOREIGN}/kill`), 404, new RegExp(`^Cannot kill container: ${FOREIGN}: No such container: ${FOREIGN}$`)),

  // Paths the engine could read differently
  ...['/v1.41/containers//create', '/v1.41/Containers/create', '/v1.41/containers/create/', '/v1.41/containers/%2e%2e/containers/create',
    '/v1.41/containers%2Fcreate', '/V1.41/containers/create', '/v1.41/containers\\create', 'http://docker/v1.41/containers/create', '/v1.12/containers/create',
    '/v1.41/containers/create?name=a%zz'].map((target) => refuse(`path ${target}`, privileged(target), 400, /./)),
  refuse('Upgrade on a request that does not upgrade', privileged('/v1.41/containers/create', { set: { Connection: 'Upgrade' }, add: [['Upgrade', 'tcp']] }), 400, /does not upgrade/),

  // Headers and bodies
  refuse('Authorization twice (the tenant\'s token and a forged one)', privileged('/v1.41/containers/create', { add: [['Authorization', `Bearer ${UNSIGNED_ADMIN}`]] }), 400, /authorization is repeated/),
  refuse('Content-Type twice', privileged('/v1.41/containers/create', { add: [['Content-Type', 'text/plain']] }), 400, /content-type is repeated/),
  refuse('form-encoded body', privileged('/v1.41/containers/create', { set: { 'Content-Type': 'application/x-www-form-urlencoded' }, body: 'HostConfig.Privileged=true' }), 400, /form-encoded/),
  refuse('multipart body', privileged('/v1.41/build', { set: { 'Content-Type': 'multipart/form-data; boundary=x' }, body: '--x\r\nContent-Disposition: form-data; name="networkmode"\r\n\r\nhost\r\n--x--\r\n' }), 400, /form-encoded/),
  refuse('gzip-encoded body', privileged('/v1.41/containers/create', { add: [['Content-Encoding', 'gzip']], body: gzipSync(PRIV) }), 400, /not valid (UTF-8|JSON)/),
  refuse('body over the 1 MiB limit', privileged('/v1.41/containers/create', { body: BIG }), 413, /exceeds the gateway's limit/),
  refuse('body over the 1 MiB limit, chunked', privileged('/v1.41/containers/create', { body: BIG, framing: 'chunked' }), 413, /exceeds the gateway's limit/),
  refuse('invalid JSON', createJson('"HostConfig":{"Privileged":true,}'), 400, /not valid JSON/),
  refuse('trailing garbage after the object', privileged('/v1.41/containers/create', { body: `${PRIV}{"HostConfig":{"Privileged":true}}` }), 400, /unexpected data after the JSON value/),
  refuse('UTF-8 byte order mark', privileged('/v1.41/containers/create', { body: `\ufeff${PRIV}` }), 400, /byte order mark/),
  refuse('a body that is an array', privileged('/v1.41/containers/create', { body: `[${PRIV}]` }), 400, /must be a JSON object/),

  // Identity
  refuse('unsigned token (alg none) claiming admin', privileged('/v1.41/containers/create', { set: { Authorization: `Bearer ${UNSIGNED_ADMIN}` } }), 401, /invalid bearer token/),
  refuse('token signed with another secret, claiming admin', privileged('/v1.41/containers/create', { set: { Authorization: `Bearer ${sign({ sub: 'mallory', roles: ['admin'] }, 'guessed-secret')}` } }), 401, /bad signature/),
  refuse('expired tenant token', privileged('/v1.41/containers/create', { set: { Authorization: `Bearer ${sign({ sub: 'mallory', tenant: 'team-a', roles: ['tenant'], exp: 1_000_000_000 })}` } }), 401, /expired/),
  refuse('Basic credentials', privileged('/v1.41/containers/create', { set: { Authorization: 'Basic YWRtaW46YWRtaW4=' } }), 401, /"Basic" is not accepted/),
]

t.test(`${attacks.length} ways out, as tenant mallory`, async (t) => {
  t.ok(attacks.length >= 60, `${attacks.length} attacks`)
  t.equal(new Set(attacks.map((a) => a.name)).size, attacks.length, 'every attack has its own name')

  t.test('a bearer token takes precedence over the listener\'s admin identity', async (t) => {
    const r = await send(create({ Privileged: true }).req)
    t.match(r.json?.message, /for subject mallory in tenant team-a: /, 'the decision was made for the token\'s subject, not the listener\'s admin')
  })

  for (const a of attacks) {
    t.test(a.name, async (t) => {
      const before = await snapshot()
      const reply = await send(a.req)
      const text = reply.body.toString()
      const message = typeof reply.json?.message === 'string' ? reply.json.message as string : /^[\x20-\x7e\s]*$/.test(text) ? text.trim().slice(0, 300) : `${reply.body.length} bytes`
      t.equal(reply.status, a.status, `answered ${a.status}${a.engine ? ' (by the engine)' : ''}: ${message}`)
      if (a.status === 403) {
        t.same(Object.keys(reply.json ?? {}), ['message'], 'the body is {"message"}')
        if (a.tenancyRule) {
          t.match(message, new RegExp(`\\(rule ${a.tenancyRule}\\)$`), `the message names the tenancy rule ${a.tenancyRule}`)
        } else {
          const by = a.rule ? `policy rule ${a.rule} \\(base\\.csv\\) for subject mallory in tenant team-a: (matched |the rule has no condition: )` : 'policy: no rule allows it for subject mallory in tenant team-a: no allow rule in base\\.csv applies '
          t.match(message, new RegExp(`denied by ${by}`), `the message names ${a.rule ?? 'the default deny'} and why`)
        }
      } else if (a.message) {
        t.match(message, a.message, 'the message says why')
      }
      t.ok(reply.statuses.length > 0 && reply.statuses.every((s) => s >= 400 && s < 500), `every response on the connection is 4xx (${reply.statuses.join(', ')})`)
      t.same(await snapshot(), before, 'the engine shows no change')
      for (const [kind, name] of a.creates ?? []) t.notOk(await exists(kind, name), `no ${kind} ${name}`)
      for (const [kind, name] of a.creates ?? []) await remove(kind, name)
    })
  }
})

// ---------------------------------------------------------------------------------------
// 2. Ordinary work.

const WORK = `${PREFIX}-work`
/** Image tags and commits of a tenant live in its namespace (tenancy.yaml imageNamespace). */
const IMG = `team-a/${PREFIX}-img`
const BK = `team-a/${PREFIX}-bk`

/** Start (through the gateway) a gateway whose upstream records each request body on its way to the engine. */
async function recordingGateway (t: Test): Promise<{ gw: TestGateway, bodies: Map<string, Buffer> }> {
  const socket = path.join(tmp, 'recorder.sock')
  const bodies = new Map<string, Buffer>()
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      const body = Buffer.concat(chunks)
      bodies.set(`${req.method ?? ''} ${req.url ?? ''}`, body)
      const up = http.request({ socketPath: engine().socket, method: req.method, path: req.url, headers: req.headers }, (r) => {
        res.writeHead(r.statusCode ?? 502, r.headers)
        r.pipe(res)
      })
      up.on('error', () => res.destroy())
      // The gateway's own event subscription (GET /events) never ends by itself: it ends with its client.
      res.on('close', () => up.destroy())
      up.end(body)
    })
  })
  await new Promise<void>((resolve) => server.listen(socket, resolve))
  const recorded = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, `unix://${socket}`)
  t.teardown(async () => {
    await recorded.close()
    server.closeAllConnections()
    await new Promise((resolve) => server.close(resolve))
  })
  return { gw: recorded, bodies }
}

const created = async (t: Test, req: Req, socket?: string): Promise<string> => {
  const r = await exchange(wire(req), socket)
  t.equal(r.status, 201, `created: ${r.body.toString().trim()}`)
  return String(r.json?.Id)
}

const workflows: Array<[string, (t: Test) => Promise<void>]> = [
  ['docker run --rm prints the output', async (t) => {
    t.equal(await docker(t, ['run', '--rm', IMAGE, 'echo', 'hello']), 'hello\n')
  }],
  ['run with a named volume: the data outlives the container', async (t) => {
    const vol = `${PREFIX}-data`
    await docker(t, ['run', '--rm', '-v', `${vol}:/data`, IMAGE, 'sh', '-c', 'echo kept > /data/f'])
    t.equal(await docker(t, ['run', '--rm', '-v', `${vol}:/data`, IMAGE, 'cat', '/data/f']), 'kept\n')
    await docker(t, ['volume', 'rm', vol])
  }],
  ['run with a tmpfs', async (t) => {
    const out = await docker(t, ['run', '--rm', '--tmpfs', '/scratch:size=1m', IMAGE, 'sh', '-c', 'grep " /scratch " /proc/mounts; echo x > /scratch/f; cat /scratch/f'])
    t.match(out, /^tmpfs \/scratch tmpfs .*size=1024k/m, 'a 1 MiB tmpfs')
    t.match(out, /^x$/m, 'writable')
  }],
  ['run with memory, cpu and pids limits', async (t) => {
    const name = `${PREFIX}-limits`
    await docker(t, ['run', '-d', '--name', name, '--memory', '64m', '--cpus', '0.5', '--pids-limit', '50', IMAGE, 'sleep', '60'])
    const hc = (await inspect('container', name)).HostConfig as Doc
    t.same([hc.Memory, hc.NanoCpus, hc.PidsLimit], [64 << 20, 5e8, 50], 'the engine stored the limits')
    await docker(t, ['rm', '-f', name])
  }],
  ['run with an allowed capability (NET_BIND_SERVICE) and nothing else', async (t) => {
    // The container's capability set is its bounding set: a non-root process (tenancy.yaml
    // users) holds none of them effective, the engine sets no ambient capabilities.
    const out = await docker(t, ['run', '--rm', '--cap-drop', 'ALL', '--cap-add', 'NET_BIND_SERVICE', IMAGE, 'grep', '^Cap', '/proc/self/status'])
    t.match(out, /^CapBnd:\s+0000000000000400$/m, 'only CAP_NET_BIND_SERVICE')
    t.match(out, /^CapEff:\s+0000000000000000$/m, 'none effective for the tenant\'s uid')
  }],
  ['bind a host directory under /srv/portcullis/team-a: refused where that is not mounted nosymfollow', async (t) => {
    // Issue 18, class 8: a bind works only from a nosymfollow mount (test/tenant-binds-nosymfollow).
    const dir = path.join(HOST_DIR, 'work')
    fs.mkdirSync(dir)
    fs.chownSync(dir, TENANT_UID, TENANT_UID)
    const r = await tenant(['run', '--rm', '-v', `${dir}:/data`, IMAGE, 'true'])
    t.not(r.code, 0)
    t.match(r.stderr, /rule host-binds-symfollow/)
  }],
  ['exec as a non-root user', async (t) => {
    t.match(await docker(t, ['exec', '-u', '1000:1000', WORK, 'id']), /^uid=1000 gid=1000/)
  }],
  ['exec with no User, or User "", runs as 65534 (its container\'s user: tenancy.yaml users.default)', async (t) => {
    for (const [what, user] of [['no User', {}], ['User ""', { User: '' }]] as const) {
      const id = await created(t, { target: `/v1.41/containers/${WORK}/exec`, body: JSON.stringify({ Cmd: ['id', '-u'], AttachStdout: true, ...user }) })
      t.equal((await direct('GET', `/exec/${id}/json`)).json.ProcessConfig?.user, '65534:65534', `${what}: the engine stored User 65534:65534`)
      const out = await send({ target: `/v1.41/exec/${id}/start`, body: '{"Detach":false,"Tty":true}' })
      t.equal(out.body.toString().trim(), '65534', `${what}: id -u printed 65534`)
    }
  }],
  ['docker exec (the CLI, which sends "User":"") without -u runs as 65534', async (t) => {
    for (const [version, cli] of [['28', CLI28], ['20.10', CLI20]]) {
      t.equal(await docker(t, ['exec', WORK, 'id', '-u'], { cli }), '65534\n', `docker ${version}: id -u printed 65534`)
    }
  }],
  ['logs, stdout and stderr apart', async (t) => {
    const name = `${PREFIX}-logs`
    await docker(t, ['run', '--name', name, IMAGE, 'sh', '-c', 'echo to-stdout; echo to-stderr >&2'])
    const r = await tenant(['logs', name])
    t.same([r.code, r.stdout.toString(), r.stderr], [0, 'to-stdout\n', 'to-stderr\n'])
    await docker(t, ['rm', name])
  }],
  ['logs --follow ends when the container does', async (t) => {
    const name = `${PREFIX}-follow`
    await docker(t, ['run', '-d', '--name', name, IMAGE, 'sh', '-c', 'for i in 1 2 3; do echo $i; sleep 0.3; done'])
    t.equal(await docker(t, ['logs', '-f', name]), '1\n2\n3\n')
    await docker(t, ['rm', name])
  }],
  ['attach: run -i, and start -a -i', async (t) => {
    t.equal(await docker(t, ['run', '-i', '--rm', IMAGE, 'cat'], { stdin: 'through run -i\n' }), 'through run -i\n')
    const name = `${PREFIX}-attach`
    await docker(t, ['create', '-i', '--name', name, IMAGE, 'cat'])
    t.equal(await docker(t, ['start', '-a', '-i', name], { stdin: 'through start -a -i\n' }), 'through start -a -i\n')
    await docker(t, ['rm', name])
  }],
  ['cp out of a container', async (t) => {
    await docker(t, ['exec', '-u', '1000', WORK, 'sh', '-c', 'echo made inside > /tmp/made'])
    const out = fs.mkdtempSync(path.join(tmp, 'cp-out-'))
    await docker(t, ['cp', `${WORK}:/tmp/made`, out])
    t.equal(fs.readFileSync(path.join(out, 'made'), 'utf8'), 'made inside\n')
  }],
  ['cp into a container (PutContainerArchive)', async (t) => {
    const file = path.join(tmp, 'cp-in')
    fs.writeFileSync(file, 'copied in\n')
    await docker(t, ['cp', file, `${WORK}:/tmp/cp-in`])
    t.equal(await docker(t, ['exec', '-u', '1000', WORK, 'cat', '/tmp/cp-in']), 'copied in\n', 'the container has the file')
  }],
  ['diff', async (t) => {
    await docker(t, ['exec', '-u', '1000', WORK, 'touch', '/tmp/changed'])
    t.match(await docker(t, ['diff', WORK]), /^A \/tmp\/changed$/m)
  }],
  ['build with the classic builder (docker 28)', async (t) => {
    const ctx = fs.mkdtempSync(path.join(tmp, 'ctx-'))
    fs.writeFileSync(path.join(ctx, 'marker'), 'built by mallory\n')
    fs.writeFileSync(path.join(ctx, 'Dockerfile'), `FROM ${IMAGE}\nCOPY marker /marker\nUSER 65534:65534\nRUN cp /marker /tmp/copied\nCMD ["cat", "/tmp/copied"]\n`)
    await docker(t, ['build', '-t', `${IMG}:1`, ctx])
    t.equal(await docker(t, ['run', '--rm', `${IMG}:1`]), 'built by mallory\n')
  }],
  ['build with BuildKit (docker 20.10, session over h2c): refused, its Dockerfile cannot be checked; the classic builder is', async (t) => {
    const ctx = fs.mkdtempSync(path.join(tmp, 'ctx-'))
    fs.writeFileSync(path.join(ctx, 'Dockerfile'), `FROM ${IMAGE}\nUSER 65534:65534\nRUN echo built with buildkit > /tmp/out\nCMD ["cat", "/tmp/out"]\n`)
    const bk = await tenant(['build', '--network', 'none', '-t', `${BK}:0`, ctx], { cli: CLI20, env: { DOCKER_BUILDKIT: '1' } })
    t.not(bk.code, 0, 'DOCKER_BUILDKIT=1 docker build fails')
    t.match(bk.stderr, /rule build-buildkit/, 'naming the rule')
    t.notOk(await exists('image', `${BK}:0`), 'nothing was built')
    await docker(t, ['build', '--network', 'none', '-t', `${BK}:1`, ctx], { cli: CLI20, env: { DOCKER_BUILDKIT: '0' } })
    t.equal(await docker(t, ['run', '--rm', `${BK}:1`]), 'built with buildkit\n')
  }],
  ['image tag', async (t) => {
    await docker(t, ['tag', `${IMG}:1`, `${IMG}:2`])
    t.same(((await inspect('image', `${IMG}:1`)).RepoTags as string[]).sort(), [`${IMG}:1`, `${IMG}:2`])
  }],
  ['image inspect', async (t) => {
    t.equal((await docker(t, ['image', 'inspect', '--format', '{{.Id}}', `${IMG}:2`])).trim(), (await inspect('image', `${IMG}:1`)).Id)
  }],
  ['image history', async (t) => {
    t.match(await docker(t, ['history', '--no-trunc', `${IMG}:1`]), /cp \/marker \/tmp\/copied/)
  }],
  ['image save, rm and load (in the tenant\'s namespace, loaded as the tenant\'s); an archive tagged outside it is refused', async (t) => {
    const tar = await tenant(['save', `${IMG}:2`])
    t.equal(tar.code, 0, 'docker save')
    t.ok(tar.stdout.includes(`${IMG}:2`), 'the archive names the tag')
    const id = (await inspect('image', `${IMG}:2`)).Id
    await docker(t, ['rmi', `${IMG}:2`])
    t.notOk(await exists('image', `${IMG}:2`), 'removed')
    t.match(await docker(t, ['load'], { stdin: tar.stdout }), `Loaded image: ${IMG}:2`)
    const loaded = await inspect('image', `${IMG}:2`)
    t.equal(loaded.Id, id, 'the same image again')
    t.match(loaded.Config?.Labels, OWNER, 'the tenant\'s own')
    // The shared image's own archive (saved on the engine) names a tag of the shared catalog.
    const shared = await run(CLI28, ['save', IMAGE], { host: engine().dockerHost })
    t.equal(shared.code, 0, 'the shared image saved on the engine directly')
    const before = await inspect('image', IMAGE)
    const raw = await send({ target: '/v1.41/images/load?quiet=1', body: shared.stdout, set: { 'Content-Type': 'application/x-tar' } })
    t.equal(raw.status, 403, 'POST /images/load of it is answered 403')
    t.match(raw.json?.message, `archive tag "${IMAGE}" is outside tenant team-a's namespace`, raw.json?.message)
    const after = await inspect('image', IMAGE)
    t.same([after.Id, after.RepoTags], [before.Id, before.RepoTags], 'the shared image and its tag are unchanged')
  }],
  ['builder prune: the build cache has no owner; the gateway answers, nothing is deleted', async (t) => {
    t.match(await docker(t, ['builder', 'prune', '-af']), /Total reclaimed space:\s+0B/)
    const raw = await send({ target: '/v1.41/build/prune?all=1' })
    t.same([raw.status, raw.json], [200, { CachesDeleted: null, SpaceReclaimed: 0 }], 'in the engine\'s shape')
  }],
  ['rm of the tenant\'s own images', async (t) => {
    await docker(t, ['rmi', `${IMG}:1`, `${IMG}:2`, `${BK}:1`])
    for (const tag of [`${IMG}:1`, `${IMG}:2`, `${BK}:1`]) t.notOk(await exists('image', tag), `${tag} is gone`)
  }],
  ['volume create, inspect, ls, rm', async (t) => {
    const vol = `${PREFIX}-vol`
    await docker(t, ['volume', 'create', '--label', 'purpose=test', vol])
    t.same((await inspect('volume', vol)).Labels, { purpose: 'test', ...OWNER }, 'the engine stored the owner labels')
    t.match(await docker(t, ['volume', 'inspect', '--format', '{{.Name}}', vol]), vol)
    t.equal(await docker(t, ['volume', 'ls', '-q', '--filter', `name=${vol}`]), `${vol}\n`)
    await docker(t, ['volume', 'rm', vol])
    t.notOk(await exists('volume', vol), 'removed')
  }],
  ['network create, connect, disconnect, rm', async (t) => {
    const name = `${PREFIX}-net`
    await docker(t, ['network', 'create', name])
    t.same((await inspect('network', name)).Labels, OWNER, 'the engine stored the owner labels')
    await docker(t, ['network', 'connect', name, WORK])
    t.ok((await inspect('container', WORK)).NetworkSettings.Networks[name], 'connected')
    t.match(await docker(t, ['network', 'ls', '--filter', `name=${name}`]), name)
    await docker(t, ['network', 'disconnect', name, WORK])
    t.notOk((await inspect('container', WORK)).NetworkSettings.Networks[name], 'disconnected')
    await docker(t, ['network', 'rm', name])
    t.notOk(await exists('network', name), 'removed')
  }],
  ['secret and config create, ls, inspect, rm (swarm-mode engine)', async (t) => {
    for (const kind of ['secret', 'config'] as const) {
      const name = `${PREFIX}-${kind}`
      const id = (await docker(t, [kind, 'create', '--label', 'purpose=test', name, '-'], { stdin: `${kind} data\n`, host: sgw.dockerHost })).trim()
      t.match(id, /^[0-9a-z]{25}$/, `docker ${kind} create prints the id`)
      t.same((await swarmObject(`${kind}s`, name))?.Spec?.Labels, { purpose: 'test', ...OWNER }, `the engine stored the ${kind} with the owner labels`)
      t.equal(await docker(t, [kind, 'ls', '--filter', `name=${name}`, '--format', '{{.Name}}'], { host: sgw.dockerHost }), `${name}\n`)
      t.equal((await docker(t, [kind, 'inspect', '--format', '{{.ID}}', name], { host: sgw.dockerHost })).trim(), id)
      await docker(t, [kind, 'rm', name], { host: sgw.dockerHost })
      t.equal(await swarmObject(`${kind}s`, name), undefined, 'removed')
    }
  }],
  ['service create with a memory limit, ls, rm (swarm-mode engine)', async (t) => {
    const name = `${PREFIX}-svc`
    const id = (await docker(t, ['service', 'create', '--detach', '--no-resolve-image', '--limit-memory', '32m', '--name', name, IMAGE, 'sleep', '1000'], { host: sgw.dockerHost })).trim()
    t.match(id, /^[0-9a-z]{25}$/, 'docker service create prints the id')
    const spec = (await swarmObject('services', name))?.Spec
    t.same([spec?.Labels, spec?.TaskTemplate?.ContainerSpec?.Labels], [OWNER, OWNER], 'the engine stored the owner labels on the service and its containers')
    t.equal(spec?.TaskTemplate?.Resources?.Limits?.MemoryBytes, 32 << 20, 'and the memory limit')
    t.equal(await docker(t, ['service', 'ls', '--filter', `name=${name}`, '--format', '{{.ID}} {{.Name}}'], { host: sgw.dockerHost }), `${id.slice(0, 12)} ${name}\n`)
    await docker(t, ['service', 'rm', name], { host: sgw.dockerHost })
    t.equal(await swarmObject('services', name), undefined, 'removed')
  }],
  ['events --since/--until', async (t) => {
    const since = Math.floor(Date.now() / 1000) - 1
    const name = `${PREFIX}-events`
    await docker(t, ['run', '--rm', '--name', name, IMAGE, 'true'])
    const until = Math.ceil(Date.now() / 1000) + 1
    const out = await docker(t, ['events', '--since', String(since), '--until', String(until), '--filter', `container=${name}`, '--format', '{{.Action}}'])
    t.same(out.trim().split('\n').filter((a) => ['create', 'start', 'die', 'destroy'].includes(a)), ['create', 'start', 'die', 'destroy'])
  }],
  ['stats --no-stream', async (t) => {
    t.match(await docker(t, ['stats', '--no-stream', '--format', '{{.Name}} {{.PIDs}}', WORK]), new RegExp(`^${WORK} 1$`, 'm'))
  }],
  ['top', async (t) => {
    t.match(await docker(t, ['top', WORK]), /sleep 3600/)
  }],
  ['rename', async (t) => {
    const [from, to] = [`${PREFIX}-old`, `${PREFIX}-new`]
    await docker(t, ['create', '--name', from, IMAGE, 'true'])
    await docker(t, ['rename', from, to])
    t.same([await exists('container', from), await exists('container', to)], [false, true])
    await docker(t, ['rm', to])
  }],
  ['restart', async (t) => {
    const before = (await inspect('container', WORK)).State.StartedAt as string
    await docker(t, ['restart', '-t', '1', WORK])
    const after = (await inspect('container', WORK)).State
    t.ok(after.Running && after.StartedAt !== before, 'running again, started anew')
  }],
  ['pause and unpause', async (t) => {
    await docker(t, ['pause', WORK])
    t.equal((await inspect('container', WORK)).State.Status, 'paused')
    await docker(t, ['unpause', WORK])
    t.equal((await inspect('container', WORK)).State.Status, 'running')
  }],
  ['wait returns the exit code', async (t) => {
    const name = `${PREFIX}-wait`
    await docker(t, ['run', '-d', '--name', name, IMAGE, 'sh', '-c', 'sleep 0.3; exit 3'])
    t.equal(await docker(t, ['wait', name]), '3\n')
    await docker(t, ['rm', name])
  }],
  ['export', async (t) => {
    const r = await tenant(['export', WORK])
    t.equal(r.code, 0, 'docker export')
    t.ok(r.stdout.length > 1 << 20 && r.stdout.includes('bin/busybox'), `a tar of the filesystem (${r.stdout.length} bytes)`)
  }],
  ['commit', async (t) => {
    await docker(t, ['commit', '-c', 'CMD ["cat", "/tmp/made"]', WORK, `team-a/${PREFIX}-committed:1`])
    t.equal(await docker(t, ['run', '--rm', `team-a/${PREFIX}-committed:1`]), 'made inside\n', 'the committed image has the container\'s changes')
    await docker(t, ['rmi', `team-a/${PREFIX}-committed:1`])
  }],
  ['docker-compose 1.29 up -d, ps, down', async (t) => {
    const dir = fs.mkdtempSync(path.join(tmp, 'compose-'))
    fs.writeFileSync(path.join(dir, 'docker-compose.yml'), `services:\n  web:\n    image: ${IMAGE}\n    command: sleep 1000\n    stop_grace_period: 1s\n    volumes: [data:/data]\n    networks: [net]\nvolumes:\n  data: {}\nnetworks:\n  net: {}\n`)
    const project = `${PREFIX}-compose`
    const compose = async (...args: string[]): Promise<string> => {
      const r = await run(COMPOSE, ['--ansi', 'never', '-p', project, ...args], { host: gw.dockerHost, cwd: dir, env: { DOCKER_CONFIG: TENANT_CONFIG }, timeoutMs: 180_000 })
      t.equal(r.code, 0, `docker-compose ${args.join(' ')}`, r.code === 0 ? {} : { stderr: r.stderr })
      return r.stdout.toString()
    }
    await compose('up', '-d')
    t.match(await compose('ps'), new RegExp(`${project}_web_1\\s+sleep 1000\\s+Up`))
    const [c] = (await direct('GET', `/containers/json?filters=${encodeURIComponent(JSON.stringify({ label: [`com.docker.compose.project=${project}`] }))}`)).json as Doc[]
    t.match(c?.Labels, OWNER, 'the service container carries the owner labels')
    await compose('down', '-v')
    t.same([await exists('container', `${project}_web_1`), await exists('network', `${project}_net`), await exists('volume', `${project}_data`)], [false, false, false], 'all gone')
  }],
  ['ps, images, version, info, system df', async (t) => {
    t.match(await docker(t, ['ps', '--filter', `name=${WORK}`, '--format', '{{.Names}}']), WORK)
    t.match(await docker(t, ['images', '--format', '{{.Repository}}:{{.Tag}}']), IMAGE)
    t.equal((await docker(t, ['version', '--format', '{{.Server.Version}}'])).trim(), (await direct('GET', '/version')).json.Version)
    t.match(await docker(t, ['info', '--format', '{{.ServerVersion}}']), /\d+\.\d+/)
    t.match(await docker(t, ['system', 'df']), /^Images/m)
  }],
  ['a local volume that is a plain tmpfs: refused (host memory outside the quota; issue 18)', async (t) => {
    const vol = `${PREFIX}-tmpfs`
    const r = await tenant(['volume', 'create', '--driver', 'local', '--opt', 'type=tmpfs', '--opt', 'device=tmpfs', '--opt', 'o=size=1m', vol])
    t.not(r.code, 0)
    t.match(r.stderr, /rule no-tmpfs-volumes/)
    t.equal((await direct('GET', `/volumes/${vol}`)).status, 404, 'no volume was created')
  }],
  ['what the engine stored for a tenant container created with the API', async (t) => {
    const name = `${PREFIX}-stored`
    await created(t, { target: `/v1.41/containers/create?name=${name}`, body: JSON.stringify({ Image: IMAGE, Cmd: ['true'] }) })
    const c = await inspect('container', name)
    t.match(c.Config.Labels, OWNER, 'owner labels')
    t.ok((c.HostConfig.SecurityOpt as string[]).includes('no-new-privileges'), 'no-new-privileges')
    t.same([c.HostConfig.Memory, c.HostConfig.PidsLimit, c.HostConfig.Privileged], [1073741824, 1024, false], 'Memory 1 GiB and PidsLimit 1024 by default, not privileged')
    await remove('container', name)
  }],
  ['what the engine stored for a tenant container created with the docker CLI', async (t) => {
    for (const [version, cli] of [['28', CLI28], ['20.10', CLI20]]) {
      const name = `${PREFIX}-cli-${version}`
      await docker(t, ['create', '--name', name, IMAGE, 'true'], { cli })
      const hc = (await inspect('container', name)).HostConfig as Doc
      t.ok((hc.SecurityOpt as string[]).includes('no-new-privileges'), `docker ${version}: no-new-privileges`)
      // The CLI sends "Memory":0 and "PidsLimit":0 when no limit is asked: Go zero values, which the default rewrite fills.
      t.same([hc.Memory, hc.PidsLimit], [1073741824, 1024], `docker ${version}: Memory 1 GiB and PidsLimit 1024 by default`)
      await remove('container', name)
    }
  }],
  ['lower-case keys reach the engine as the canonical body', async (t) => {
    const rec = await recordingGateway(t)
    const name = `${PREFIX}-canonical`
    const target = `/v1.41/containers/create?name=${name}`
    await created(t, { target, body: `{"image":${JSON.stringify(IMAGE)},"cmd":["echo","lower"],"hostconfig":{"memory":33554432}}` }, rec.gw.socket)
    const forwarded = rec.bodies.get(`POST ${target}`) ?? Buffer.alloc(0)
    const body = JSON.parse(forwarded.toString()) as Doc
    t.same(body, { Image: IMAGE, Cmd: ['echo', 'lower'], User: `${TENANT_UID}:${TENANT_UID}`, HostConfig: { NetworkMode: 'team-a-default', Memory: 33554432, SecurityOpt: ['no-new-privileges'], PidsLimit: 1024, CgroupnsMode: 'private', ShmSize: 67108864, LogConfig: { Type: 'json-file', Config: { 'max-size': '10m', 'max-file': '3' } } }, Labels: OWNER }, 'the engine received the canonical, rewritten body')
    t.equal(forwarded.toString(), JSON.stringify(body), 'as compact JSON, nothing else')
    const c = await inspect('container', name)
    t.same([c.Config.Image, c.Config.Cmd, c.HostConfig.Memory], [IMAGE, ['echo', 'lower'], 33554432], 'and stored that Image, Cmd and Memory')
    await remove('container', name)
  }],
]

t.test(`${workflows.length} ordinary workflows, as tenant mallory`, async (t) => {
  t.ok(workflows.length >= 25, `${workflows.length} workflows`)
  t.before(async () => {
    const r = await tenant(['run', '-d', '--name', WORK, IMAGE, 'sleep', '3600'])
    if (r.code !== 0) throw new Error(`cannot start ${WORK}: ${r.stderr}`)
  })
  for (const [name, fn] of workflows) t.test(name, fn)
})

// ---------------------------------------------------------------------------------------
// 3. Let through, but neutralised: what the engine stored.

const neutralised: Array<[string, Probe, (c: Doc) => unknown, unknown]> = [
  ['HostConfig.Capabilities (an API 1.40 field the engine no longer reads)',
    create({ Capabilities: ['CAP_SYS_ADMIN'] }), (c) => [c.HostConfig.Capabilities, c.HostConfig.CapAdd], [null, null]],
  ['owner labels set by the tenant are overwritten',
    create({}, { Labels: { 'io.portcullis.tenant': 'team-b', 'io.portcullis.subject': 'root' } }), (c) => c.Config.Labels, OWNER],
  ['HostConfig fields at the top level beside an empty HostConfig (the engine ignores them)',
    createJson('"HostConfig":{},"Privileged":true,"Binds":["/etc:/x"],"CapAdd":["ALL"],"Runtime":"sysbox-runc"'),
    (c) => [c.HostConfig.Privileged, c.HostConfig.Binds, c.HostConfig.CapAdd, c.HostConfig.Runtime], [false, null, null, 'runc']],
  ['HostConfig fields at the top level beside a harmless HostConfig (the engine ignores them)',
    createJson('"HostConfig":{"Memory":33554432},"PidsLimit":-1,"SecurityOpt":["seccomp=unconfined"]'),
    (c) => [c.HostConfig.Memory, c.HostConfig.PidsLimit, c.HostConfig.SecurityOpt], [33554432, 1024, ['no-new-privileges']]],
]

t.test('let through, but neutralised', async (t) => {
  for (const [name, probe, view, want] of neutralised) {
    t.test(name, async (t) => {
      const r = await send(probe.req)
      t.equal(r.status, 201, 'created')
      const [[, container]] = probe.creates ?? []
      t.same(view(await inspect('container', container)), want, 'the engine stored the safe values')
      await remove('container', container)
    })
  }
})

// ---------------------------------------------------------------------------------------
// 4. Prunes: a tenant's prune is scoped to its own objects.

t.test('prunes remove the tenant\'s own objects, never the admin\'s', async (t) => {
  // Every candidate carries this label, and every prune filters by it: other files' objects (the
  // tenant's included) are never candidates.
  const label = `pcat-prune=${PREFIX}`
  const filters = encodeURIComponent(JSON.stringify({ label: [label] }))
  const Labels = { [label.split('=')[0]]: PREFIX }
  const kinds: Array<{ kind: Kind, create: (name: string) => [string, object], prune: string, deleted: (body: Doc) => unknown }> = [
    { kind: 'container', create: (name) => [`/v1.41/containers/create?name=${name}`, { Image: IMAGE, Cmd: ['true'], Labels }], prune: 'containers', deleted: (b) => b.ContainersDeleted },
    { kind: 'volume', create: (name) => ['/v1.41/volumes/create', { Name: name, Labels }], prune: 'volumes', deleted: (b) => b.VolumesDeleted },
    { kind: 'network', create: (name) => ['/v1.41/networks/create', { Name: name, Labels }], prune: 'networks', deleted: (b) => b.NetworksDeleted },
  ]
  for (const { kind, create, prune, deleted } of kinds) {
    t.test(`${kind}s`, async (t) => {
      const [mine, admins] = [`${PREFIX}-prune-own-${kind}`, `${PREFIX}-prune-admin-${kind}`]
      t.teardown(async () => { await remove(kind, mine); await remove(kind, admins) })
      // The admin's, made on the engine (no owner label), and the tenant's, made through the gateway: stopped or unused, both.
      const [adminPath, adminBody] = create(admins)
      t.equal((await direct('POST', adminPath, adminBody)).status, 201, `the admin's ${kind} ${admins}`)
      const [path, body] = create(mine)
      const made = await send({ target: path, body: JSON.stringify(body) })
      t.equal(made.status, 201, `the tenant's ${kind} ${mine}: ${made.body.toString().trim()}`)
      // The engine reports a pruned container by its id, a volume or network by its name.
      const id = kind === 'container' ? String(made.json?.Id) : mine

      const reply = await send({ target: `/v1.41/${prune}/prune?filters=${filters}` })
      t.equal(reply.status, 200, `the tenant's ${kind} prune is allowed: ${reply.body.toString().trim()}`)
      t.same(deleted(reply.json ?? {}), [id], `it reports only the tenant's ${kind} deleted`)
      t.notOk(await exists(kind, mine), `the tenant's ${kind} is gone`)
      t.ok(await exists(kind, admins), `the admin's ${kind} is still there`)
    })
  }
})
