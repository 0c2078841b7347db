// Scale-out: two gateway replicas (separate processes, `portcullis serve`) in front of
// the shared test engine, their policy lines in a real PostgreSQL (Debian's package,
// a private cluster). A change made through one replica's admin API is enforced by
// the other within a second; an invalid change is refused and changes nothing; a
// non-admin cannot use the admin API; the admin calls are audited; a database outage
// leaves the last good policy in force and the replicas not ready.
import { spawn, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import http from 'node:http'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { engine, POLICIES } from './helpers/gateway'
import { startPostgres, type TestPostgres } from './helpers/postgres'

const CLI = path.resolve(__dirname, '../src/cli.js')

interface Reply { status: number, body: any, text: string }

function call (socket: string, method: string, urlPath: string, body?: unknown): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body))
    const req = http.request({ socketPath: socket, method, path: urlPath, headers: payload ? { 'content-type': 'application/json', 'content-length': String(payload.length) } : {} }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString()
        let json: unknown = null
        try { json = JSON.parse(text) } catch { /* not JSON */ }
        resolve({ status: res.statusCode ?? 0, body: json, text })
      })
    })
    req.setTimeout(10_000, () => req.destroy(new Error(`${method} ${urlPath} timed out`)))
    req.on('error', reject)
    req.end(payload)
  })
}

function httpGet (address: string, urlPath: string): Promise<Reply> {
  return new Promise((resolve, reject) => {
    http.get(`http://${address}${urlPath}`, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString()
        let json: unknown = null
        try { json = JSON.parse(text) } catch { /* metrics text */ }
        resolve({ status: res.statusCode ?? 0, body: json, text })
      })
    }).on('error', reject)
  })
}

interface Replica {
  readonly name: string
  readonly dir: string
  readonly admin: string
  readonly tenant: string
  readonly readonly: string
  readonly metrics: string
  readonly audit: string
  readonly output: () => string
  stop (): Promise<void>
}

function writeConfig (dir: string, url: string): string {
  const file = path.join(dir, 'portcullis.yaml')
  fs.writeFileSync(file, [
    'listen:',
    `  - { unix: ${dir}/admin.sock, identity: { subject: ops, roles: [admin] } }`,
    `  - { unix: ${dir}/tenant.sock, identity: { subject: dev, tenant: team-a, roles: [tenant] } }`,
    `  - { unix: ${dir}/readonly.sock, identity: { subject: viewer, tenant: team-a, roles: [readonly] } }`,
    `upstream: unix://${engine().socket}`,
    // The propagation time is measured without the reload gate (the shipped fixtures run
    // before each replica applies a change: test/policy-reload covers that path, and its
    // cost is the fixtures' run, not the database's).
    `policy: { dir: ${POLICIES}, database: { url: "${url}", channel: pcx_scale_test }, reloadTests: false }`,
    `audit: { file: ${dir}/audit.jsonl }`,
    'metrics: { listen: 127.0.0.1:0 }',
    'log: { level: info }',
    'shutdown: { graceSeconds: 1 }',
    '',
  ].join('\n'))
  return file
}

function serve (config: string, env: NodeJS.ProcessEnv): { child: ChildProcess, output: () => string, exited: Promise<number | null> } {
  const child = spawn(process.execPath, [CLI, 'serve', '--config', config], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] })
  let out = ''
  child.stdout!.on('data', (b: Buffer) => { out += b.toString() })
  child.stderr!.on('data', (b: Buffer) => { out += b.toString() })
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)))
  return { child, output: () => out, exited }
}

async function startReplica (name: string, pg: TestPostgres): Promise<Replica> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `pcs-${name}-`))
  const { child, output, exited } = serve(writeConfig(dir, pg.url), { PGPASSWORD: pg.password })
  let gone: number | null | undefined
  void exited.then((c) => { gone = c })
  const deadline = Date.now() + 30_000
  let metrics = ''
  while (!metrics) {
    if (gone !== undefined || Date.now() > deadline) {
      child.kill('SIGKILL')
      await exited
      fs.rmSync(dir, { recursive: true, force: true })
      throw new Error(`${name} ${gone !== undefined ? `exited (${gone})` : 'did not start'} at start-up:\n${output()}`)
    }
    metrics = /"address":"(127\.0\.0\.1:\d+)","msg":"metrics listening"/.exec(output())?.[1] ?? ''
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  return {
    name,
    dir,
    admin: path.join(dir, 'admin.sock'),
    tenant: path.join(dir, 'tenant.sock'),
    readonly: path.join(dir, 'readonly.sock'),
    metrics,
    audit: path.join(dir, 'audit.jsonl'),
    output,
    async stop () {
      if (gone === undefined) {
        child.kill('SIGTERM')
        const timer = setTimeout(() => child.kill('SIGKILL'), 5000)
        await exited
        clearTimeout(timer)
      }
      fs.rmSync(dir, { recursive: true, force: true })
    },
  }
}

/** Poll until `check` holds; the milliseconds it took, or -1 after `limitMs`. */
async function until (check: () => Promise<boolean>, limitMs: number, everyMs = 10): Promise<number> {
  const start = Date.now()
  while (Date.now() - start <= limitMs) {
    if (await check()) return Date.now() - start
    await new Promise((resolve) => setTimeout(resolve, everyMs))
  }
  return -1
}

function metricValue (text: string, series: string): number {
  const line = text.split('\n').find((l) => l.startsWith(series + ' '))
  return line ? Number(line.slice(series.length + 1)) : NaN
}

const LIST = '/v1.41/containers/json'
const DENY_LIST = ['p', 'tenant', '*', 'ContainerList', 'container', 'deny', 'scale-out-no-list', 'true']

t.test('two replicas share one policy in PostgreSQL', async (t) => {
  const pg = await startPostgres()
  const replicas: Replica[] = []
  t.teardown(async () => {
    await Promise.allSettled(replicas.map((r) => r.stop()))
    await pg.stop()
  })

  // Started together: one seeds the empty table from policies/base.csv, the other finds it filled.
  const started = await Promise.allSettled([startReplica('r1', pg), startReplica('r2', pg)])
  for (const s of started) if (s.status === 'fulfilled') replicas.push(s.value)
  for (const s of started) if (s.status === 'rejected') throw s.reason
  const [r1, r2] = replicas
  const seeded = (await pg.query('SELECT count(*)::int AS n FROM casbin'))[0].n as number
  const fileLines = fs.readFileSync(path.join(POLICIES, 'base.csv'), 'utf8').split('\n').filter((l) => /^[pg],/.test(l)).length
  t.equal(seeded, fileLines, `the table was seeded once with base.csv's ${fileLines} lines`)
  t.equal(replicas.map((r) => r.output()).join('').split('seeded it from the policy directory').length - 1, 1, 'exactly one replica seeded')

  const list1 = await call(r1.admin, 'GET', '/_portcullis/policy')
  const list2 = await call(r2.admin, 'GET', '/_portcullis/policy')
  t.equal(list1.status, 200, 'the admin lists the policy')
  t.equal(list1.body.source, 'database')
  t.equal(list1.body.lines.length, fileLines)
  t.equal(list1.body.version, list2.body.version, 'both replicas run the same policy version')
  const before = list1.body.version as string

  t.test('a request allowed on both replicas', async (t) => {
    for (const r of replicas) t.equal((await call(r.tenant, 'GET', LIST)).status, 200, `${r.name}: tenant lists containers`)
  })

  t.test('a change through replica 1 is enforced by replica 2 within a second', async (t) => {
    const add = await call(r1.admin, 'POST', '/_portcullis/policy', { lines: [DENY_LIST] })
    const answered = Date.now()
    t.equal(add.status, 200, `added: ${add.text.trim()}`)
    t.equal(add.body.added, 1)
    t.equal(add.body.notified, true, 'the other replicas were notified')
    t.not(add.body.version, before, 'a new policy version')
    const own = await call(r1.tenant, 'GET', LIST)
    t.equal(own.status, 403, 'replica 1 enforces it at once')
    t.match(own.body.message, /ContainerList denied by policy rule scale-out-no-list \(database\) for subject dev in tenant team-a/)
    const took = await until(async () => (await call(r2.tenant, 'GET', LIST)).status === 403, 3000)
    t.ok(took >= 0 && Date.now() - answered < 1000, `replica 2 enforces the change ${took} ms after replica 1 answered (limit 1000 ms)`)
    const denied = await call(r2.tenant, 'GET', LIST)
    t.match(denied.body.message, /denied by policy rule scale-out-no-list/, 'replica 2 names the rule')
    t.equal((await call(r2.admin, 'GET', '/_portcullis/policy')).body.version, add.body.version, 'replica 2 runs the new version')
    const m2 = (await httpGet(r2.metrics, '/metrics')).text
    t.ok(metricValue(m2, 'portcullis_policy_reloads_total{result="ok"}') >= 1, 'replica 2 counted the reload')
    t.equal(metricValue(m2, `portcullis_policy_info{version="${add.body.version}"}`), 1, 'replica 2 reports the new version')
    t.ok(metricValue(m2, 'portcullis_denials_total{rule="scale-out-no-list"}') >= 1, 'replica 2 counted the denials by the new rule')

    // Revert through replica 1: allowed again on both.
    const remove = await call(r1.admin, 'DELETE', '/_portcullis/policy', { lines: [DENY_LIST] })
    const removed = Date.now()
    t.equal(remove.status, 200, `removed: ${remove.text.trim()}`)
    t.equal(remove.body.version, before, 'back to the first version (the version is a hash of model and lines)')
    const back = await until(async () => (await call(r2.tenant, 'GET', LIST)).status === 200, 3000)
    t.ok(back >= 0 && Date.now() - removed < 1000, `replica 2 allows it again ${back} ms after the revert (limit 1000 ms)`)
    t.equal((await call(r1.tenant, 'GET', LIST)).status, 200, 'replica 1 allows it again')
  })

  t.test('an invalid change is refused and neither replica changes', async (t) => {
    const rows = (await pg.query('SELECT count(*)::int AS n FROM casbin'))[0].n
    const bad = await call(r1.admin, 'POST', '/_portcullis/policy', {
      lines: [
        ['p', 'tenant', '*', 'ContainerList', 'container', 'deny', 'fine-line', 'true'],
        ['p', 'tenant', '*', 'NoSuchOperation', 'container', 'deny', 'bad-line', 'true'],
      ],
    })
    t.equal(bad.status, 400)
    t.match(bad.body.message, /PortcullisPolicyAdd refused, nothing was written: .*operation "NoSuchOperation" matches no Engine API operation/)
    const cond = await call(r1.admin, 'POST', '/_portcullis/policy', { lines: [['p', 'tenant', '*', 'ContainerList', 'container', 'deny', 'bad-cond', 'nosuchfn(r.obj.user)']] })
    t.equal(cond.status, 400)
    t.match(cond.body.message, /condition "nosuchfn\(r\.obj\.user\)" does not evaluate: unknown name nosuchfn/)
    const brackets = await call(r1.admin, 'POST', '/_portcullis/policy', { lines: [['p', 'tenant', '*', 'ContainerList', 'container', 'deny', 'bad-brackets', 'count(r.obj.devices']] })
    t.equal(brackets.status, 400)
    t.match(brackets.body.message, /line 1: Unmatched brackets/)
    const spaced = await call(r1.admin, 'POST', '/_portcullis/policy', { lines: [['p', 'tenant', '*', 'ContainerList', 'container', 'deny', 'spaced', "anyIn(r.obj.capAdd, 'A, B')"]] })
    t.equal(spaced.status, 400, 'a line the adapter would store differently')
    t.match(spaced.body.message, /would be stored as .*anyIn\(r\.obj\.capAdd,'A,B'\)/)
    const dup = await call(r1.admin, 'POST', '/_portcullis/policy', { lines: [['p', 'admin', '*', '*', '*', 'allow', 'admin', 'true']] })
    t.equal(dup.status, 400)
    t.match(dup.body.message, /already in the policy/)
    const missing = await call(r1.admin, 'DELETE', '/_portcullis/policy', { lines: [DENY_LIST] })
    t.equal(missing.status, 400)
    t.match(missing.body.message, /not in the policy/)
    const shape = await call(r1.admin, 'POST', '/_portcullis/policy', { lines: 'p, tenant' })
    t.equal(shape.status, 400)
    t.match(shape.body.message, /expected \{"lines"/)
    t.equal((await pg.query('SELECT count(*)::int AS n FROM casbin'))[0].n, rows, 'nothing was written')
    await new Promise((resolve) => setTimeout(resolve, 300))
    for (const r of replicas) {
      t.equal((await call(r.admin, 'GET', '/_portcullis/policy')).body.version, before, `${r.name} still runs the same version`)
      t.equal((await call(r.tenant, 'GET', LIST)).status, 200, `${r.name} still allows the tenant's list`)
    }
  })

  t.test('a non-admin cannot use the admin API', async (t) => {
    const post = await call(r2.tenant, 'POST', '/_portcullis/policy', { lines: [DENY_LIST] })
    t.equal(post.status, 403)
    t.match(post.body.message, /PortcullisPolicyAdd denied by policy rule policy-admin-only \(database\) for subject dev in tenant team-a/)
    const get = await call(r2.readonly, 'GET', '/_portcullis/policy')
    t.equal(get.status, 403, 'readonly may list other things, not the policy')
    t.match(get.body.message, /PortcullisPolicyList denied by policy rule policy-admin-only/)
    t.equal((await call(r2.admin, 'GET', '/_portcullis/policy')).body.version, before, 'nothing changed')
  })

  t.test('the admin calls are in the audit trail', async (t) => {
    await new Promise((resolve) => setTimeout(resolve, 100))
    const records = (file: string): any[] => fs.readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l))
    const a1 = records(r1.audit)
    const find = (recs: any[], op: string, status: number): any => recs.find((r) => r.operation === op && r.status === status)
    t.match(find(a1, 'PortcullisPolicyAdd', 200), { decision: 'allow', rule: { rule: 'admin' }, identity: { subject: 'ops' } }, 'the change, allowed by rule admin')
    t.match(find(a1, 'PortcullisPolicyRemove', 200), { decision: 'allow' }, 'the revert')
    t.match(find(a1, 'PortcullisPolicyAdd', 400), { decision: 'allow' }, 'the refused invalid change')
    t.match(find(records(r2.audit), 'PortcullisPolicyAdd', 403), { decision: 'deny', rule: { rule: 'policy-admin-only' }, identity: { subject: 'dev' } }, 'the non-admin attempt on replica 2')
    t.ok(find(records(r2.audit), 'ContainerList', 403)?.policyVersion, 'replica 2 recorded the denial under the changed version')
  })

  t.test('database outage: last good policy kept, not ready, counted; back when it returns', async (t) => {
    await pg.pause()
    const down = await until(async () => (await httpGet(r2.metrics, '/readyz')).status === 503, 10_000, 200)
    t.ok(down >= 0, `replica 2 not ready ${down} ms after the database stopped`)
    const ready = await httpGet(r2.metrics, '/readyz')
    t.equal(ready.body.policy, false)
    t.match(ready.body.detail.policyDatabase, `127.0.0.1:${pg.port}/portcullis`, 'readyz names the database by host, port and name')
    t.equal((await call(r2.tenant, 'GET', LIST)).status, 200, 'replica 2 keeps enforcing the last good policy')
    const refused = await call(r1.admin, 'POST', '/_portcullis/policy', { lines: [DENY_LIST] })
    t.equal(refused.status, 503, 'a change cannot be made without the database')
    t.match(refused.body.message, /PortcullisPolicyAdd failed, the policy was not changed: policy database at 127\.0\.0\.1:\d+\/portcullis failed/)
    t.equal((await call(r1.tenant, 'GET', LIST)).status, 200, 'replica 1 did not swap')
    const m = (await httpGet(r2.metrics, '/metrics')).text
    t.ok(metricValue(m, 'portcullis_policy_database_failures_total') >= 1, 'failures counted')
    t.equal(metricValue(m, `portcullis_policy_database_up{database="127.0.0.1:${pg.port}/portcullis"}`), 0, 'database down')

    await pg.resume()
    const up = await until(async () => (await httpGet(r2.metrics, '/readyz')).status === 200, 15_000, 200)
    t.ok(up >= 0, `replica 2 ready again ${up} ms after the database returned`)
    await until(async () => (await httpGet(r1.metrics, '/readyz')).status === 200, 15_000, 200)
    // The watchers were rebuilt: a change propagates again.
    const add = await call(r1.admin, 'POST', '/_portcullis/policy', { lines: [DENY_LIST] })
    const answered = Date.now()
    t.equal(add.status, 200, 'changes work again')
    const took = await until(async () => (await call(r2.tenant, 'GET', LIST)).status === 403, 3000)
    t.ok(took >= 0 && Date.now() - answered < 1000, `replica 2 enforces it ${took} ms later`)
    t.equal((await call(r1.admin, 'DELETE', '/_portcullis/policy', { lines: [DENY_LIST] })).status, 200, 'reverted')
  })

  t.test('the database password never reaches the logs', async (t) => {
    for (const r of replicas) t.notOk(r.output().includes(pg.password), `${r.name}'s output holds no password`)
  })
})

t.test('a replica whose database does not answer does not start', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pcs-closed-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  // A loopback port nothing listens on: the reserved port 9 (discard) is never served here.
  const { output, exited } = serve(writeConfig(dir, 'postgres://portcullis:s3cret-in-url@127.0.0.1:9/portcullis'), {})
  const code = await exited
  t.equal(code, 1, 'exit status 1')
  t.match(output(), /cannot open the policy database at 127\.0\.0\.1:9\/portcullis: .*ECONNREFUSED/, 'names the database by host, port and name')
  t.notOk(output().includes('s3cret-in-url'), 'never the password from the URL')
  t.notOk(fs.existsSync(path.join(dir, 'admin.sock')), 'no listener was opened')
})
