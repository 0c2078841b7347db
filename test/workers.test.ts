/**
 * `workers: 2`: two gateway processes behind one set of listeners (gateway/cluster.ts), on
 * the real engine. Requests reach both workers (each writes its own audit chain), `audit
 * verify` accepts the set and finds a change in one file, a container quota and a rate
 * limit hold exactly across workers (the primary holds reservations and buckets), the
 * metrics port sums the workers' counters, and SIGHUP reaches every worker.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { randomBytes } from 'node:crypto'
import t from 'tap'
import { engine, policiesWithQuota, request, waitUntil } from './helpers/gateway'

const CLI = path.join(__dirname, '..', 'src', 'cli.js')
const TENANT = `wk-${randomBytes(3).toString('hex')}`
const IMAGE = engine().image
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pcw-'))
const admin = path.join(dir, 'admin.sock')
const tenant = path.join(dir, 'tenant.sock')
const limited = path.join(dir, 'limited.sock')
const audit = path.join(dir, 'audit.jsonl')
const policyDir = policiesWithQuota(TENANT, '{ containers: 3 }')
const READS = 10

async function freePort (): Promise<number> {
  const s = net.createServer()
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve))
  const port = (s.address() as net.AddressInfo).port
  await new Promise<void>((resolve) => s.close(() => resolve()))
  return port
}

let gw: ChildProcess
let metricsPort = 0
let logText = ''

const mine = async (): Promise<string[]> => {
  const filters = encodeURIComponent(JSON.stringify({ label: [`io.portcullis.tenant=${TENANT}`] }))
  return ((await request(engine().socket, 'GET', `/containers/json?all=1&filters=${filters}`)).json as any[]).map((c) => String(c.Id))
}

t.before(async () => {
  metricsPort = await freePort()
  const config = path.join(dir, 'portcullis.yaml')
  fs.writeFileSync(config, `workers: 2
listen:
  - { unix: ${admin}, identity: { subject: tester, roles: [admin] } }
  - { unix: ${tenant}, identity: { subject: wanda, tenant: ${TENANT}, roles: [tenant] } }
  - { unix: ${limited}, identity: { subject: lim, roles: [limited] } }
upstream: unix://${engine().socket}
policy: { dir: ${policyDir} }
audit: { file: ${audit} }
metrics: { listen: 127.0.0.1:${metricsPort} }
rates:
  roles:
    admin: {}
    tenant: {}
    limited: { read: { rate: 0.001, burst: ${READS} } }
  others: null
log: { level: info }
shutdown: { graceSeconds: 2 }
`)
  gw = spawn(process.execPath, [CLI, 'serve', '--config', config], { stdio: ['ignore', 'pipe', 'pipe'] })
  gw.stdout!.on('data', (d: Buffer) => { logText += d.toString() })
  gw.stderr!.on('data', (d: Buffer) => { logText += d.toString() })
  await waitUntil(() => logText.includes('every worker started'), 30_000)
})

t.teardown(async () => {
  for (const id of await mine()) await request(engine().socket, 'DELETE', `/containers/${id}?force=1`)
  if (gw.exitCode === null) {
    gw.kill('SIGTERM')
    await new Promise((resolve) => gw.once('exit', resolve))
  }
  fs.rmSync(dir, { recursive: true, force: true })
})

const lines = (file: string): any[] => fs.readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l))

t.test('requests are served by both workers, each with its own audit chain', async (t) => {
  const pings = await Promise.all(Array.from({ length: 40 }, async () => await request(admin, 'GET', '/v1.41/_ping')))
  t.ok(pings.every((p) => p.status === 200), 'every ping answered')
  for (const n of [1, 2]) {
    const file = `${audit}.w${n}`
    t.ok(fs.existsSync(file), `worker ${n} has its chain ${path.basename(file)}`)
    t.ok(lines(file).some((r) => r.operation === 'SystemPing' || r.op === 'SystemPing' || JSON.stringify(r).includes('SystemPing')), `worker ${n} served pings`)
  }
  t.notOk(fs.existsSync(audit), 'no unsuffixed file: nobody writes it')
})

t.test('a container quota is exact across workers', async (t) => {
  const answers = await Promise.all(Array.from({ length: 12 }, async () =>
    await request(tenant, 'POST', '/v1.41/containers/create', { Image: IMAGE, Cmd: ['true'] })))
  t.equal(answers.filter((a) => a.status === 201).length, 3, `exactly 3 created (${answers.map((a) => a.status).join(' ')})`)
  t.ok(answers.filter((a) => a.status !== 201).every((a) => a.status === 403 && /quota-containers/.test(a.json?.message)), 'the rest refused by the quota')
  t.equal((await mine()).length, 3, 'the engine holds 3')
})

t.test('a rate limit is exact across workers', async (t) => {
  const answers = await Promise.all(Array.from({ length: 30 }, async () => await request(limited, 'GET', '/v1.41/_ping')))
  // Admitted by the rate limit, then judged by the policy (which knows no role `limited`: 403).
  t.equal(answers.filter((a) => a.status !== 429).length, READS, `a burst of ${READS} across both workers (${answers.map((a) => a.status).join(' ')})`)
  t.equal(answers.filter((a) => a.status === 429).length, 30 - READS)
})

t.test('/metrics sums the workers\' counters', async (t) => {
  const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text()
  const refused = text.split('\n').filter((l) => l.startsWith('portcullis_rate_limited_total{'))
  const sum = refused.filter((l) => !l.startsWith('#')).reduce((a, l) => a + Number(l.split(' ').pop()), 0)
  t.equal(sum, 30 - READS, `every refusal counted once, whichever worker made it: ${refused.join('; ')}`)
  const pings = text.split('\n').filter((l) => l.startsWith('portcullis_requests_total{') && l.includes('SystemPing')).reduce((a, l) => a + Number(l.split(' ').pop()), 0)
  t.ok(pings >= 40 + READS, `pings of both workers summed (${pings})`)
})

t.test('SIGHUP reaches every worker', async (t) => {
  const before = (logText.match(/configuration reloaded/g) ?? []).length
  gw.kill('SIGHUP')
  await waitUntil(() => (logText.match(/configuration reloaded/g) ?? []).length >= before + 2, 15_000)
  const workers = new Set([...logText.matchAll(/"worker":(\d+)[^\n]*configuration reloaded/g)].map((m) => m[1]))
  t.same([...workers].sort(), ['1', '2'], 'both workers reloaded')
})

t.test('audit verify accepts the set and finds a change in one file', async (t) => {
  gw.kill('SIGTERM')
  const code = await new Promise((resolve) => gw.once('exit', resolve))
  t.equal(code, 0, 'SIGTERM drains every worker and the primary exits 0')
  const files = fs.readdirSync(dir).filter((f) => f.startsWith('audit.jsonl.w') && !f.endsWith('.seal')).map((f) => path.join(dir, f))
  t.equal(files.length, 2)
  const ok = spawnSync(process.execPath, [CLI, 'audit', 'verify', ...files], { encoding: 'utf8' })
  t.equal(ok.status, 0, `the set verifies: ${ok.stdout}${ok.stderr}`)
  const report = spawnSync(process.execPath, [CLI, 'audit', 'report', ...files], { encoding: 'utf8' })
  t.equal(report.status, 0, `the set is reported: ${report.stderr}`)
  const file = `${audit}.w2`
  const text = fs.readFileSync(file, 'utf8')
  fs.writeFileSync(file, text.replace('SystemPing', 'SystemPong'))
  const bad = spawnSync(process.execPath, [CLI, 'audit', 'verify', ...files], { encoding: 'utf8' })
  t.equal(bad.status, 1, 'a change in one worker\'s file is found')
  t.match(bad.stdout + bad.stderr, /audit\.jsonl\.w2/, 'naming that file')
})
