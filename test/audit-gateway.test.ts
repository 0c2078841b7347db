/**
 * The audit trail as written by a running gateway in front of the real engine:
 * one record per request (and per hijacked session) with the documented fields,
 * denials recorded before the client hears of them, exec sessions, level `request`
 * bodies with their secrets redacted, `audit verify` / `audit report` on the trail
 * the gateway wrote, and failing closed (or open) when the trail cannot be written.
 */
import t, { type Test } from 'tap'
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import http from 'node:http'
import os from 'node:os'
import path from 'node:path'
import jwt from 'jsonwebtoken'
import pino from 'pino'
import { parseConfig } from '../src/config'
import { startGateway } from '../src/gateway'
import type { AuditRecord } from '../src/audit/record'
import { CLI28, engine, POLICIES, run, startTestGateway, uniqueName, type TestGateway } from './helpers/gateway'

const CLI = path.join(__dirname, '..', 'src', 'cli.js')
const SECRET = 'audit-gateway-test-secret'
const TENANT = { sub: 'trudy', tenant: 'team-a', roles: ['tenant'] }

// ---------------------------------------------------------------------------
// helpers

/** A line of the trail as read back: an audit record (src/audit/record.ts) with its chain fields. */
type Rec = Omit<AuditRecord, 'v' | 'event' | 'security' | 'body'> & {
  v: number
  seq: number
  event: string
  security?: Record<string, unknown>
  body?: any
  prev: string | null
  hash: string
}

function records (file: string): Rec[] {
  if (!fs.existsSync(file)) return []
  return fs.readFileSync(file, 'utf8').split('\n').filter((l) => l !== '').map((l) => JSON.parse(l) as Rec)
}

const events = (file: string): Rec[] => records(file).filter((r) => r.event === 'request' || r.event.startsWith('session.'))

/** Wait until `pred` holds over the file's records (session.end lands just after the client is done). */
async function until (file: string, pred: (rs: Rec[]) => boolean, ms = 5000): Promise<Rec[]> {
  const end = Date.now() + ms
  for (;;) {
    const rs = events(file)
    if (pred(rs) || Date.now() > end) return rs
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

function tokenFor (claims: object = TENANT): string {
  return jwt.sign(claims, SECRET, { expiresIn: 600 })
}

/** A DOCKER_CONFIG whose config.json sends the bearer token on every request. */
function tenantEnv (t: Test, token: string): NodeJS.ProcessEnv {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pca-cfg-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify({ HttpHeaders: { Authorization: `Bearer ${token}` } }))
  return { DOCKER_CONFIG: dir }
}

interface Raw { status: number, body: string, atResponse: Rec[], error?: string }

/**
 * One request on the gateway's unix socket; `atResponse` is the trail read in the
 * 'response' event, before the body is consumed. Never rejects: a connection cut
 * short resolves with what arrived and `error` (status 0 when no answer came).
 */
async function raw (socketPath: string, file: string, method: string, urlPath: string, opts: { headers?: Record<string, string>, body?: unknown } = {}): Promise<Raw> {
  const data = opts.body === undefined ? undefined : Buffer.from(JSON.stringify(opts.body))
  return await new Promise((resolve) => {
    let status = 0
    let body = ''
    let atResponse: Rec[] = []
    let done = false
    const settle = (error?: string): void => {
      if (done) return
      done = true
      resolve({ status, body, atResponse, ...(error !== undefined ? { error } : {}) })
    }
    const req = http.request({
      socketPath,
      method,
      path: urlPath,
      agent: false,
      headers: { ...(data ? { 'content-type': 'application/json', 'content-length': String(data.length) } : {}), ...opts.headers },
    }, (res) => {
      atResponse = events(file)
      status = res.statusCode ?? 0
      res.setEncoding('utf8')
      res.on('data', (c: string) => { body += c })
      res.on('end', () => settle())
      res.on('error', (err) => settle(err.message))
      res.on('close', () => settle(res.complete ? undefined : 'response cut short'))
    })
    req.on('error', (err) => settle(err.message))
    req.end(data)
  })
}

/** A gateway like startTestGateway's, with an `audit:` section of our own (and a JWT secret). */
async function auditGateway (t: Test, audit: string, extra = ''): Promise<TestGateway & { file: string }> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pca-'))
  const socket = path.join(dir, 'gw.sock')
  const file = path.join(dir, 'trail', 'audit.jsonl')
  const text = `listen:\n  - { unix: ${socket}, identity: { subject: tester, roles: [admin] } }\nupstream: unix://${engine().socket}\npolicy: { dir: ${POLICIES} }\nauth: { jwt: { secret: ${SECRET} } }\naudit: { file: ${file}, ${audit} }\nlog: { level: ${process.env.PORTCULLIS_TEST_LOG ?? 'silent'} }\nshutdown: { graceSeconds: 2 }\n${extra}`
  const config = parseConfig(text, path.join(dir, 'portcullis.yaml'))
  const gateway = await startGateway(config, pino({ level: config.log.level }))
  const gw = {
    gateway,
    config,
    socket,
    dockerHost: `unix://${socket}`,
    tcp: '',
    dir,
    file,
    async close () {
      await gateway.close()
      fs.rmSync(dir, { recursive: true, force: true })
    },
  }
  t.teardown(() => gw.close())
  return gw
}

function cli (...args: string[]): { status: number | null, stdout: string, stderr: string } {
  const r = spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8' })
  return { status: r.status, stdout: r.stdout, stderr: r.stderr }
}

async function metric (address: string, name: string): Promise<number> {
  const [host, port] = address.split(':')
  const text = await new Promise<string>((resolve, reject) => {
    http.get({ host, port: Number(port), path: '/metrics', agent: false }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (c: string) => { body += c })
      res.on('end', () => resolve(body))
    }).on('error', reject)
  })
  const line = text.split('\n').find((l) => l.startsWith(`${name} `))
  return line === undefined ? NaN : Number(line.slice(name.length + 1))
}

async function volumeExists (name: string): Promise<boolean> {
  const r = await run(CLI28, ['volume', 'inspect', name], { host: engine().dockerHost })
  return r.code === 0
}

// ---------------------------------------------------------------------------

t.test('records of a real workload: run, denial, exec; then verify and report on the trail', async (t) => {
  const gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`)
  t.teardown(() => gw.close())
  const file = path.join(gw.dir, 'audit.jsonl')
  const token = tokenFor()
  const env = tenantEnv(t, token)
  const image = engine().image

  // 1. docker run --rm as the tenant
  const name = uniqueName('pca-run')
  t.teardown(async () => { await run(CLI28, ['rm', '-f', name], { host: engine().dockerHost }) })
  const before = events(file).length
  const r = await run(CLI28, ['run', '--rm', '--name', name, image, 'echo', 'hi'], { host: gw.dockerHost, env })
  t.equal(r.stdout.toString(), 'hi\n', `tenant run works: ${r.stderr}`)
  const recs = (await until(file, (rs) => rs.slice(before).some((x) => x.operation === 'ContainerAttach' && x.event === 'session.end'))).slice(before)
  t.comment(recs.map((x) => `${x.event} ${x.operation} ${x.status}`).join('\n'))
  t.same([...new Set(recs.map((x) => x.operation))].sort(), ['ContainerAttach', 'ContainerCreate', 'ContainerStart', 'ContainerWait', 'SystemPingHead'],
    'docker run --rm: ping, create, attach, start, wait (CLI 28 at API 1.41 removes with HostConfig.AutoRemove: no ContainerDelete request)')
  t.equal(recs.length, 6, 'six records: five requests, the attach as start and end')

  t.test('ContainerCreate: decision, rule, rewrites, security facts, identity', async (t) => {
    const create = recs.filter((x) => x.operation === 'ContainerCreate')
    t.equal(create.length, 1, 'exactly one record for the create')
    const c = create[0]
    t.match(c, {
      v: 1,
      event: 'request',
      method: 'POST',
      identity: { subject: 'trudy', tenant: 'team-a', roles: ['tenant'], auth: 'jwt' },
      operation: 'ContainerCreate',
      resource: { kind: 'container', name },
      decision: 'allow',
      rule: { policy: 'base.csv', rule: 'tenant-containers' },
      wouldDeny: [],
      status: 201,
      error: null,
      security: { image, privileged: false, hostPaths: [], capAdd: [], devices: 0, namespaces: { network: String }, securityOpt: ['no-new-privileges'], memory: 1073741824, pidsLimit: 1024 },
    })
    t.match(c.policyVersion, /^[0-9a-f]{6,}$/, 'policyVersion present')
    t.match(c.time, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/, 'RFC 3339 time, ms, UTC')
    t.match(c.listener, /^unix:/)
    t.ok(c.bytesIn > 0 && c.bytesOut > 0, `bytes each way (${c.bytesIn} in, ${c.bytesOut} out)`)
    t.ok(typeof c.durationMs === 'number' && c.durationMs > 0, 'durationMs')
    t.ok(typeof c.upstreamMs === 'number' && c.upstreamMs > 0 && c.upstreamMs <= c.durationMs!, 'upstreamMs, within durationMs')
    const owner = c.rewrites.find((w) => w.id === 'tenancy')
    t.ok(owner, `owner labels recorded as the tenancy rewrite (${c.rewrites.map((w) => w.id).join(', ')})`)
    const endpoints = owner?.patch.find((p) => p.path === '/NetworkingConfig/EndpointsConfig')
    t.same(owner?.patch.filter((p) => p !== endpoints), [
      { op: 'add', path: '/User', value: '65534:65534' },
      { op: 'replace', path: '/HostConfig/NetworkMode', value: 'team-a-default' },
      { op: 'add', path: '/Labels/io.portcullis.tenant', value: 'team-a' },
      { op: 'add', path: '/Labels/io.portcullis.subject', value: 'trudy' },
    ], 'its JSON patch: the tenant\'s user (tenancy.yaml users), its own default network and the owner labels')
    t.same(Object.keys((endpoints?.value ?? {}) as object), ['team-a-default'], 'the CLI\'s endpoint settings for the default network moved to the tenant\'s')
    t.ok(c.rewrites.some((w) => w.id === 'tenant-safe-defaults'), 'tenant-safe-defaults recorded too')
    t.notOk('body' in c, 'level metadata: no body')
  })

  t.test('ContainerAttach: session.start and session.end with bytes each way; the rest one request record each', async (t) => {
    const attach = recs.filter((x) => x.operation === 'ContainerAttach')
    t.same(attach.map((x) => x.event), ['session.start', 'session.end'], 'a hijacked attach: start and end, no request record')
    const [start, end] = attach
    t.equal(start.req, end.req, 'same request id')
    t.match(start, { decision: 'allow', rule: { rule: 'tenant-containers' }, status: 101, session: { mode: 'upgrade' }, identity: { subject: 'trudy', auth: 'jwt' } })
    t.match(end, { session: { mode: 'upgrade' } })
    t.ok(end.bytesOut >= 'hi\n'.length, `session.end bytesOut ${end.bytesOut}`)
    t.ok(end.bytesIn >= 0, `session.end bytesIn ${end.bytesIn}`)
    t.ok(typeof end.durationMs === 'number' && end.durationMs >= start.durationMs!, 'session.end duration')
    for (const op of ['ContainerStart', 'ContainerWait']) {
      const mine = recs.filter((x) => x.operation === op)
      t.equal(mine.length, 1, `one ${op} record`)
      t.match(mine[0], { event: 'request', decision: 'allow', identity: { subject: 'trudy', tenant: 'team-a' } }, op)
    }
    const reqIds = recs.filter((x) => x.event === 'request').map((x) => x.req)
    t.equal(new Set(reqIds).size, reqIds.length, 'one request record per request id')
    t.ok(recs.every((x) => typeof x.policyVersion === 'string' && x.status !== null), 'policyVersion and status on every record')
  })

  // 2. a denial, recorded before the client hears of it
  t.test('a denied --privileged run: deny, rule no-privileged, in the file before the 403', async (t) => {
    const n0 = events(file).length
    const d = await run(CLI28, ['run', '--rm', '--privileged', image, 'true'], { host: gw.dockerHost, env })
    t.not(d.code, 0)
    t.match(d.stderr, /no-privileged/)
    const after = events(file).slice(n0)
    const deny = after.filter((x) => x.operation === 'ContainerCreate')
    t.equal(deny.length, 1, 'one record for the denied create, there when the CLI returns')
    t.match(deny[0], { decision: 'deny', rule: { policy: 'base.csv', rule: 'no-privileged' }, status: 403, error: { code: 'FORBIDDEN' }, security: { privileged: true }, upstreamMs: null })

    const n1 = events(file).length
    const res = await raw(gw.socket, file, 'POST', '/v1.41/containers/create', {
      headers: { authorization: `Bearer ${token}` },
      body: { Image: image, Cmd: ['true'], HostConfig: { Privileged: true } },
    })
    t.equal(res.status, 403)
    t.match(JSON.parse(res.body), { message: /no-privileged/ })
    const seen = res.atResponse.slice(n1)
    t.equal(seen.length, 1, 'the record is in the file when the response headers arrive, before the body is read')
    t.match(seen[0], { operation: 'ContainerCreate', decision: 'deny', rule: { rule: 'no-privileged' }, status: 403 })
  })

  // 3. exec
  t.test('docker exec: ContainerExec with command, ExecStart session start and end', async (t) => {
    const c = uniqueName('pca-exec')
    t.teardown(async () => { await run(CLI28, ['rm', '-f', c], { host: engine().dockerHost }) })
    const up = await run(CLI28, ['run', '-d', '--name', c, image, 'sleep', '300'], { host: gw.dockerHost, env })
    t.equal(up.code, 0, `tenant container started: ${up.stderr}`)
    const n0 = events(file).length
    const ex = await run(CLI28, ['exec', c, 'sh', '-c', 'exit 3'], { host: gw.dockerHost, env })
    t.equal(ex.code, 3, `exit code passed through: ${ex.stderr}`)
    const rs = (await until(file, (all) => all.slice(n0).some((x) => x.operation === 'ExecStart' && x.event === 'session.end'))).slice(n0)
    t.comment(rs.map((x) => `${x.event} ${x.operation} ${x.status}`).join('\n'))
    const create = rs.filter((x) => x.operation === 'ContainerExec')
    t.equal(create.length, 1, 'one ContainerExec record')
    t.match(create[0], {
      event: 'request',
      decision: 'allow',
      rule: { rule: 'tenant-exec-create' },
      status: 201,
      resource: { kind: 'container', id: c },
      command: ['sh', '-c', 'exit 3'],
      // what the policy evaluated: the CLI's "User":"" (who the exec runs as is the tenancy stage's)
      security: { privileged: false, user: '' },
    })
    t.ok(create[0].rewrites.some((w) => w.id === 'tenancy' && w.patch.some((p) => p.path === '/User' && p.value === '65534:65534')), 'the tenant\'s user recorded in the tenancy rewrite')
    const start = rs.filter((x) => x.operation === 'ExecStart')
    t.same(start.map((x) => x.event), ['session.start', 'session.end'], 'ExecStart: session.start and session.end')
    const [s, e] = start
    t.equal(s.req, e.req)
    t.match(s, { decision: 'allow', rule: { rule: 'tenant-exec' }, resource: { kind: 'exec' }, session: { mode: 'upgrade' } })
    t.ok(e.bytesIn >= 0 && e.bytesOut >= 0, `session.end bytes in ${e.bytesIn} out ${e.bytesOut}`)
    t.ok(typeof e.durationMs === 'number' && e.durationMs > 0, `session.end duration ${e.durationMs} ms`)
    t.ok(e.session !== undefined && 'exitCode' in e.session, 'session.end has the exitCode field')
    t.equal(e.session?.exitCode, 3, 'session.end exitCode is the exec\'s exit code')
    t.same(s.command, ['sh', '-c', 'exit 3'], 'session.start carries the exec\'s command')
    t.same(e.command, ['sh', '-c', 'exit 3'], 'session.end too')
    const inspect = rs.filter((x) => x.operation === 'ExecInspect')
    t.equal(inspect.length, 1, 'the CLI\'s ExecInspect: one request record')

    const n1 = events(file).length
    const rm = await run(CLI28, ['rm', '-f', c], { host: gw.dockerHost, env })
    t.equal(rm.code, 0, `tenant removes its container: ${rm.stderr}`)
    const del = events(file).slice(n1).filter((x) => x.operation === 'ContainerDelete')
    t.equal(del.length, 1, 'one ContainerDelete record')
    t.match(del[0], { event: 'request', method: 'DELETE', resource: { kind: 'container', id: c }, decision: 'allow', rule: { rule: 'tenant-containers' }, status: 204, identity: { subject: 'trudy' } })
  })

  // the admin listener identity
  t.test('a request on the listener identity is recorded as such', async (t) => {
    const n0 = events(file).length
    const res = await raw(gw.socket, file, 'GET', '/v1.41/containers/json')
    t.equal(res.status, 200)
    const rs = events(file).slice(n0)
    t.equal(rs.length, 1)
    t.match(rs[0], { operation: 'ContainerList', identity: { subject: 'tester', tenant: null, roles: ['admin'], auth: 'listener' }, decision: 'allow', rule: { rule: 'admin' }, status: 200 })
  })

  // 5. verify
  t.test('audit verify: intact trail exits 0; each kind of tampering is named at its line', async (t) => {
    await until(file, () => false, 300) // let the last session.end land
    const ok = cli('audit', 'verify', file)
    t.equal(ok.status, 0, `intact: ${ok.stdout}${ok.stderr}`)
    t.match(ok.stdout, /^OK: \d+ records in 1 file\(s\), chain intact/)

    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pca-tamper-'))
    t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
    const lines = fs.readFileSync(file, 'utf8').split('\n').slice(0, -1)
    t.ok(lines.length >= 10, `${lines.length} lines to tamper with`)
    const copy = (label: string, ls: string[] | string): string => {
      const to = path.join(dir, `${label}.jsonl`)
      fs.writeFileSync(to, typeof ls === 'string' ? ls : ls.map((l) => l + '\n').join(''))
      fs.copyFileSync(`${file}.seal`, `${to}.seal`)
      return to
    }
    const mid = 4 // line 5, a request record
    const check = (label: string, to: string, line: number, reason: RegExp): void => {
      const r = cli('audit', 'verify', to)
      t.equal(r.status, 1, `${label}: exit 1`)
      t.match(r.stdout, new RegExp(`^${to.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}:${line}: `, 'm'), `${label}: names ${path.basename(to)}:${line}`)
      t.match(r.stdout, reason, `${label}: ${r.stdout.split('\n')[0]}`)
    }
    const untouched = copy('copy', lines)
    t.equal(cli('audit', 'verify', untouched).status, 0, 'an exact copy verifies')

    const modified = [...lines]
    const rec = JSON.parse(modified[mid]) as Rec
    t.ok(modified[mid].includes(`"status":${rec.status}`))
    modified[mid] = modified[mid].replace(`"status":${rec.status}`, `"status":${rec.status === 200 ? 204 : 200}`)
    check('a field changed', copy('modified', modified), mid + 1, /modified: hash mismatch/)

    const deleted = lines.filter((_, i) => i !== mid)
    check('a line deleted', copy('deleted', deleted), mid + 1, /deleted: seq jumps/)

    const swapped = [...lines]
    ;[swapped[mid], swapped[mid + 1]] = [swapped[mid + 1], swapped[mid]]
    check('two lines swapped', copy('swapped', swapped), mid + 1, /reordered/)

    const cut = lines.slice(0, -2)
    check('the tail cut off', copy('truncated', cut), cut.length + 1, /truncated/)

    const all = lines.map((l) => l + '\n').join('')
    check('the last line cut mid-way', copy('midline', all.slice(0, all.length - 20)), lines.length, /truncated mid-line/)
  })

  // 6. report
  t.test('audit report --tenant team-a: requests by tenant and operation, denials by rule, sessions by subject', async (t) => {
    const r = cli('audit', 'report', file, '--tenant', 'team-a')
    t.equal(r.status, 0, r.stderr)
    t.comment(r.stdout)
    t.match(r.stdout, /\(tenant team-a\)/)
    t.match(r.stdout, /Chain: intact/)
    const section = (title: string): string => {
      const i = r.stdout.indexOf(title)
      const rest = r.stdout.slice(i + title.length)
      const j = rest.search(/\n\n/)
      return j < 0 ? rest : rest.slice(0, j)
    }
    const ops = section('Requests by tenant and operation')
    t.match(ops, /^\s+team-a\s+ContainerCreate\s+4\s+2\s+0\s+0$/m, 'ContainerCreate: 4 requests (run --rm, run -d, two denied)')
    t.match(ops, /^\s+team-a\s+ContainerAttach\s+1\s+0\s+0\s+0$/m, 'the attach counted once')
    t.match(ops, /^\s+team-a\s+ExecStart\s+1\s+0\s+0\s+0$/m, 'the exec start counted once')
    t.notMatch(r.stdout, /tester/, 'the admin listener identity (tester) is not in a team-a report')
    t.ok(ops.trim().split('\n').slice(1).every((l) => /^\s*team-a\s/.test(l)), 'only team-a rows')
    const denials = section('Denials by rule')
    t.match(denials, /^\s+no-privileged \(base\.csv\)\s+2\s+trudy@team-a x2$/m, 'denials by rule')
    const sessions = section('Hijacked sessions by subject')
    t.match(sessions, /^\s+trudy\s+team-a\s+2\s+0\s+/m, 'sessions by subject, none left open')
  })
})

// 4. level request
t.test('level request: decoded bodies, redacted; credentials headers never recorded', async (t) => {
  const gw = await auditGateway(t, 'level: request')
  const file = gw.file
  const token = tokenFor()
  const env = tenantEnv(t, token)
  const image = engine().image

  const name = uniqueName('pca-env')
  t.teardown(async () => { await run(CLI28, ['rm', '-f', name], { host: engine().dockerHost }) })
  const c = await run(CLI28, ['create', '--name', name, '-e', 'SECRET_X=hunter2-env-value', '-e', 'PLAIN=visible-env-value', image, 'true'], { host: gw.dockerHost, env })
  t.equal(c.code, 0, `tenant create with Env: ${c.stderr}`)
  const create = events(file).filter((x) => x.operation === 'ContainerCreate')
  t.equal(create.length, 1)
  const body = create[0]?.body
  t.ok(body !== undefined, 'the decoded body is recorded')
  t.equal(body?.Image, image, 'body fields recorded')
  t.same(body?.Cmd, ['true'])
  // The CLI does not keep the order of -e flags (they pass through a Go map).
  t.same([...(body?.Env ?? [])].sort(), ['PLAIN=[REDACTED]', 'SECRET_X=[REDACTED]'], 'Env values redacted, names kept')
  t.match(body?.Labels, { 'io.portcullis.tenant': 'team-a', 'io.portcullis.subject': 'trudy' }, 'the body as evaluated and forwarded (after rewrites)')
  t.match(body?.HostConfig, { Memory: 1073741824, PidsLimit: 1024 }, 'rewritten defaults in the recorded body')

  // SecretCreate (admin, the listener identity): recorded whether or not the engine is a swarm manager.
  const secretName = uniqueName('pca-secret')
  t.teardown(async () => { await run(CLI28, ['secret', 'rm', secretName], { host: engine().dockerHost }) })
  const secretData = Buffer.from('swordfish-secret-payload').toString('base64')
  const sc = await raw(gw.socket, file, 'POST', '/v1.41/secrets/create', { body: { Name: secretName, Data: secretData, Labels: { team: 'a' } } })
  t.comment(`SecretCreate: engine answered ${sc.status}`)
  const srec = events(file).filter((x) => x.operation === 'SecretCreate')
  t.equal(srec.length, 1, 'SecretCreate recorded')
  t.match(srec[0], { identity: { subject: 'tester', auth: 'listener' }, resource: { kind: 'secret', name: secretName }, status: sc.status })
  t.same(srec[0]?.body, { Name: secretName, Data: '[REDACTED]', Labels: { team: 'a' } }, 'SecretCreate Data redacted, the rest kept')

  // SystemAuth: the password is redacted (the engine's login attempt fails; the record remains).
  const login = await raw(gw.socket, file, 'POST', '/v1.41/auth', { body: { username: 'pca-user', password: 'pw-hunter2-login', serveraddress: '127.0.0.1:1' } })
  t.comment(`SystemAuth: engine answered ${login.status}`)
  const arec = events(file).filter((x) => x.operation === 'SystemAuth')
  t.equal(arec.length, 1, 'SystemAuth recorded')
  t.same(arec[0]?.body, { username: 'pca-user', password: '[REDACTED]', serveraddress: '127.0.0.1:1' }, 'password redacted, username kept')

  // ImageCreate with X-Registry-Auth and a bearer token: neither header reaches the file.
  const registryAuth = Buffer.from(JSON.stringify({ username: 'pca-reg', password: 'regpass-hunter2-xyz', serveraddress: '127.0.0.1:1' })).toString('base64url')
  const pull = await raw(gw.socket, file, 'POST', '/v1.41/images/create?fromImage=127.0.0.1%3A1%2Fpca%2Fnone&tag=x', {
    headers: { authorization: `Bearer ${token}`, 'x-registry-auth': registryAuth },
  })
  t.comment(`ImageCreate: engine answered ${pull.status}`)
  const prec = events(file).filter((x) => x.operation === 'ImageCreate')
  t.equal(prec.length, 1, 'ImageCreate recorded')
  t.match(prec[0], { identity: { subject: 'trudy', auth: 'jwt' }, resource: { kind: 'image', name: '127.0.0.1:1/pca/none:x' } })

  const text = fs.readFileSync(file, 'utf8')
  const sig = token.split('.')[2]
  for (const [what, needle] of [
    ['the bearer token', token], ['the token signature', sig], ['the X-Registry-Auth value', registryAuth], ['the registry password', 'regpass-hunter2-xyz'],
    ['the login password', 'pw-hunter2-login'], ['the secret payload', secretData], ['an Env value', 'hunter2-env-value'], ['another Env value', 'visible-env-value'],
  ] as const) {
    t.notOk(text.includes(needle), `${what} is nowhere in the file`)
  }
  t.notMatch(text, /authorization|x-registry-auth/i, 'no header names either')
  t.equal(cli('audit', 'verify', file).status, 0, 'the trail verifies')
})

/** Creates uniquely named volumes through the gateway with a raw request; removes them on teardown. */
function volumeCreator (t: Test, gw: { socket: string, file: string }): () => Promise<{ name: string, res: Raw }> {
  const created: string[] = []
  t.teardown(async () => { for (const v of created) await run(CLI28, ['volume', 'rm', '-f', v], { host: engine().dockerHost }) })
  return async () => {
    const name = uniqueName('pca-vol')
    created.push(name)
    return { name, res: await raw(gw.socket, gw.file, 'POST', '/v1.41/volumes/create', { body: { Name: name } }) }
  }
}

// 7. fail closed / open
t.test('audit trail unwritable, onFailure closed: 503 and not forwarded', async (t) => {
  const gw = await auditGateway(t, 'onFailure: closed')
  const trailDir = path.dirname(gw.file)
  const create = volumeCreator(t, gw)

  const ok = await create()
  t.equal(ok.res.status, 201, 'a volume create works while the trail is writable')
  t.ok(await volumeExists(ok.name))

  t.test('the trail directory removed: the gateway recreates it, starts a recover file, and goes on', async (t) => {
    fs.rmSync(trailDir, { recursive: true, force: true })
    const next = await create()
    t.equal(next.res.status, 201, `answered: ${next.res.body}`)
    const head = records(gw.file)[0]
    t.match(head, { event: 'chain.head', chain: { reason: 'recover', problem: /removed or moved away/ } } as object, 'the new file starts with a recover head saying what happened')
    t.ok(events(gw.file).some((x) => x.resource?.name === next.name), 'the request is in the new file')
  })

  t.test('the trail directory replaced by a file: requests get 503 and do not reach the engine', async (t) => {
    fs.rmSync(trailDir, { recursive: true, force: true })
    fs.writeFileSync(trailDir, 'not a directory\n')
    t.teardown(() => fs.rmSync(trailDir, { recursive: true, force: true }))

    const first = await create()
    const firstExists = await volumeExists(first.name)
    t.comment(`first request after the breakage: status ${first.res.status}, error ${first.res.error ?? '-'}, body ${JSON.stringify(first.res.body)}, volume on the engine: ${firstExists}`)
    t.equal(first.res.status, 503, 'the first request after the breakage: 503')
    t.notOk(firstExists, 'the first request after the breakage is not forwarded')

    const second = await create()
    t.equal(second.res.status, 503, `then: 503 (${second.res.body.trim()})`)
    t.match(JSON.parse(second.res.body || '{}'), { message: /audit trail/ }, '{"message": ...} about the audit trail')
    t.notOk(await volumeExists(second.name), 'and the volume was not created on the engine')

    const viaCli = uniqueName('pca-vol')
    t.teardown(async () => { await run(CLI28, ['volume', 'rm', '-f', viaCli], { host: engine().dockerHost }) })
    const r = await run(CLI28, ['volume', 'create', viaCli], { host: gw.dockerHost })
    t.not(r.code, 0, 'docker volume create fails')
    t.match(r.stderr, /audit trail/, `the CLI shows why: ${r.stderr.trim()}`)
    t.notOk(await volumeExists(viaCli), 'not created')

    // repair: after the retry interval the trail reopens, with a recover head
    fs.rmSync(trailDir, { force: true })
    await new Promise((resolve) => setTimeout(resolve, 1100))
    const after = await create()
    t.equal(after.res.status, 201, `writable again: ${after.res.body}`)
    t.ok(await volumeExists(after.name))
    const head = records(gw.file)[0]
    t.match(head, { event: 'chain.head', chain: { reason: 'recover' } } as object, 'the new file starts with a recover head')
    t.comment(`recover head: ${JSON.stringify(head)}`)
    const names = events(gw.file).map((x) => x.resource?.name)
    t.ok(names.includes(after.name), 'the request after the repair is recorded')
    t.notOk(names.includes(second.name) || names.includes(viaCli), 'refused requests made while the trail was broken left no record (there was nowhere to write it)')
    t.comment(`the first request after the breakage (${first.name}) is recorded: ${names.includes(first.name)}`)
  })
})

t.test('audit trail unwritable at the end of a stream, onFailure closed: the answer is cut, never completed', async (t) => {
  const gw = await auditGateway(t, 'onFailure: closed')
  const trailDir = path.dirname(gw.file)
  const started = await run(CLI28, ['run', '-d', engine().image, 'sh', '-c', 'echo first; sleep 2; echo last'], { host: engine().dockerHost })
  t.equal(started.code, 0, 'a container that prints, waits, prints and exits')
  const id = started.stdout.toString().trim()
  t.teardown(async () => { await run(CLI28, ['rm', '-f', id], { host: engine().dockerHost }) })
  t.teardown(() => fs.rmSync(trailDir, { recursive: true, force: true }))

  const outcome = await new Promise<{ status: number, complete: boolean, bytes: number, error: string | null }>((resolve) => {
    let bytes = 0
    const req = http.request({ socketPath: gw.socket, method: 'GET', path: `/v1.41/containers/${id}/logs?follow=1&stdout=1` }, (res) => {
      // The head is through (chunked: the answer is complete only with its end): now the trail breaks.
      fs.rmSync(trailDir, { recursive: true, force: true })
      fs.writeFileSync(trailDir, 'not a directory\n')
      res.on('data', (c: Buffer) => { bytes += c.length })
      res.on('end', () => resolve({ status: res.statusCode ?? 0, complete: res.complete, bytes, error: null }))
      res.on('error', (err) => resolve({ status: res.statusCode ?? 0, complete: res.complete, bytes, error: err.message }))
      res.on('close', () => resolve({ status: res.statusCode ?? 0, complete: res.complete, bytes, error: 'closed' }))
    })
    req.on('error', (err) => resolve({ status: 0, complete: false, bytes, error: err.message }))
    req.end()
  })
  t.comment(`outcome: ${JSON.stringify(outcome)}`)
  t.equal(outcome.status, 200, 'the stream started while the trail was writable')
  t.ok(outcome.bytes > 0, 'and its output arrived as it came')
  t.equal(outcome.complete, false, 'but its end never did: the record could not be written, so the answer was cut')
})

t.test('audit trail unwritable, onFailure open: forwarded, and the failures are counted', async (t) => {
  const gw = await auditGateway(t, 'onFailure: open', 'metrics: { listen: 127.0.0.1:0 }\n')
  const address = gw.gateway.metricsServer?.address ?? ''
  t.match(address, /^127\.0\.0\.1:\d+$/)
  const trailDir = path.dirname(gw.file)
  const create = volumeCreator(t, gw)
  t.equal((await create()).res.status, 201)
  const f0 = await metric(address, 'portcullis_audit_failures_total')
  const w0 = await metric(address, 'portcullis_audit_records_total')
  t.equal(f0, 0, 'no failures yet')

  fs.rmSync(trailDir, { recursive: true, force: true })
  fs.writeFileSync(trailDir, 'not a directory\n')
  t.teardown(() => fs.rmSync(trailDir, { recursive: true, force: true }))
  const a = await create()
  const b = await create()
  t.equal(a.res.status, 201, `forwarded: ${a.res.error ?? ''}`)
  t.equal(b.res.status, 201, `forwarded: ${b.res.error ?? ''}`)
  t.ok(await volumeExists(a.name) && await volumeExists(b.name), 'the volumes exist on the engine')
  const f1 = await metric(address, 'portcullis_audit_failures_total')
  const w1 = await metric(address, 'portcullis_audit_records_total')
  t.comment(`portcullis_audit_failures_total ${f0} -> ${f1}, portcullis_audit_records_total ${w0} -> ${w1}, trail status ${JSON.stringify(gw.gateway.audit.status())}`)
  t.ok(f1 >= f0 + 2, `portcullis_audit_failures_total rose: ${f0} -> ${f1}`)
  t.equal(w1, w0, `portcullis_audit_records_total did not count the dropped records: ${w0} -> ${w1}`)
  t.ok(gw.gateway.audit.status().dropped >= 2, 'the trail itself counted them as dropped')

  fs.rmSync(trailDir, { force: true })
  await new Promise((resolve) => setTimeout(resolve, 1100))
  const c = await create()
  t.equal(c.res.status, 201)
  const head = records(gw.file)[0] as unknown as { event: string, chain: { reason: string, dropped?: number } }
  t.match(head, { event: 'chain.head', chain: { reason: 'recover', dropped: 2 } }, 'the next file\'s head counts the dropped records')
  t.comment(`recover head: ${JSON.stringify(head)}`)
})
