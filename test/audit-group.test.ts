/**
 * Group commit of the audit trail (AuditTrail.commit): the records of one turn of the
 * event loop are chained and written with one write (and one seal), in the order they
 * were committed, and no answer is sent before the write that holds its record.
 * The writes are counted by wrapping `fs.writeSync` (in this process, and in a gateway
 * process through test/helpers/count-audit-writes), not by asking the trail.
 */
import t, { type Test } from 'tap'
import fs from 'node:fs'
import http from 'node:http'
import os from 'node:os'
import path from 'node:path'
import pino from 'pino'
import { AuditTrail, verify, type AuditInput } from '../src/audit'
import { readSealFile } from '../src/audit/chain'
import { GROUP_MAX } from '../src/audit/trail'
import { spawn } from 'node:child_process'
import { countAuditWrites } from './helpers/count-audit-writes'
import { engine, POLICIES, waitUntil } from './helpers/gateway'

const CLI = path.join(__dirname, '..', 'src', 'cli.js')

function tmp (t: Test): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pcx-audit-group-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  return dir
}
const quiet = (): pino.Logger => pino({ level: 'silent' })
interface Captured { logger: pino.Logger, lines: Array<Record<string, unknown>> }
function capture (): Captured {
  const lines: Array<Record<string, unknown>> = []
  const logger = pino({ level: 'info' }, { write (s: string) { lines.push(JSON.parse(s) as Record<string, unknown>) } })
  return { logger, lines }
}
const records = (file: string): Array<Record<string, any>> => fs.readFileSync(file, 'utf8').split('\n').slice(0, -1).map((l) => JSON.parse(l) as Record<string, any>)

function request (i: number): AuditInput {
  return {
    event: 'request',
    time: Date.now(),
    req: `req-${i}`,
    listener: 'unix:/run/portcullis/docker.sock',
    client: '127.0.0.1:50000',
    method: 'GET',
    identity: { subject: 'alice', tenant: 'team-a', roles: ['tenant'], method: 'jwt' },
    target: { operation: 'ContainerList', kind: 'container', apiVersion: '1.41' },
    decision: { decision: 'allow', rule: { policy: 'base.csv', rule: 'tenant-read' }, wouldDeny: [], policyVersion: 'abc123' },
    status: 200,
    bytesIn: 0,
    bytesOut: 100 + i,
    durationMs: 1.5,
    upstreamMs: 1.2,
  }
}

/** Count, from now until `stop()`, the writes that reach `file` and the lines each carried. */
function countWrites (t: Test, file: string): { writes: number[], stop: () => void } {
  const writes: number[] = []
  const stop = countAuditWrites(file, (lines) => { writes.push(lines) })
  t.teardown(stop)
  return { writes, stop }
}

t.test('records committed in one turn: one write and one chain, in the order committed', async (t) => {
  const dir = tmp(t)
  const file = path.join(dir, 'audit.jsonl')
  const trail = AuditTrail.open({ file, level: 'metadata' }, quiet())
  const count = countWrites(t, file)
  const settled: number[] = []
  const all = Array.from({ length: 100 }, (_, i) => trail.commit(request(i)).then((ok) => { settled.push(i); return ok }))
  t.equal(records(file).length, 1, 'nothing is written while the turn goes on (the head only)')
  t.same(settled, [], 'and no commit has settled')
  t.same(await Promise.all(all), Array(100).fill(true), 'every commit resolves true')
  t.same(count.writes, [100], 'one write held all 100 records')
  const rs = records(file)
  t.same(rs.slice(1).map((r) => r.req), Array.from({ length: 100 }, (_, i) => `req-${i}`), 'in the order committed')
  t.same(rs.map((r) => r.seq), Array.from({ length: 101 }, (_, i) => i), 'seq follows the lines')
  t.match(readSealFile(file), { seq: 100, size: fs.statSync(file).size }, 'sealed at the last record')

  // More than a group in one turn, and a synchronous append after them: groups of
  // GROUP_MAX, the append in the last, after the records committed before it.
  const more = Array.from({ length: GROUP_MAX + 10 }, (_, i) => trail.commit(request(100 + i)))
  t.ok(trail.record(request(9999)), 'a synchronous append in the same turn')
  t.same(count.writes.slice(1), [GROUP_MAX, 11], `groups of at most ${GROUP_MAX}`)
  t.same(await Promise.all(more), Array(GROUP_MAX + 10).fill(true))
  const after = records(file)
  t.equal(after.at(-1)?.req, 'req-9999', 'the append went last')
  t.same(after.slice(101, -1).map((r) => r.req), Array.from({ length: GROUP_MAX + 10 }, (_, i) => `req-${100 + i}`))
  count.stop()
  await trail.close()
  t.ok(verify([file]).ok, 'the trail verifies')
})

t.test('rotation falls between the records of a group, as between appends', async (t) => {
  const dir = tmp(t)
  const file = path.join(dir, 'audit.jsonl')
  const trail = AuditTrail.open({ file, level: 'metadata', rotate: { maxBytes: 8192 } }, quiet())
  t.same(await Promise.all(Array.from({ length: 60 }, (_, i) => trail.commit(request(i)))), Array(60).fill(true))
  await trail.close()
  const files = fs.readdirSync(dir).filter((f) => !f.endsWith('.seal')).map((f) => path.join(dir, f))
  t.ok(files.length >= 3, `rotated into ${files.length} files`)
  for (const f of files) t.ok(fs.statSync(f).size <= 8192 + 600, `${path.basename(f)}: ${fs.statSync(f).size} bytes, over maxBytes by at most its chain.end`)
  t.ok(verify(files).ok, 'the chain holds across the files')
  const reqs = files.flatMap((f) => records(f)).filter((r) => r.event === 'request').sort((a, b) => a.seq - b.seq).map((r) => r.req)
  t.same(reqs, Array.from({ length: 60 }, (_, i) => `req-${i}`), 'every record, in order')
})

t.test('a stop between a group\'s write and its seal: the next start seals the group and continues', async (t) => {
  const dir = tmp(t)
  const file = path.join(dir, 'audit.jsonl')
  const trail = AuditTrail.open({ file, level: 'metadata' }, quiet())
  await Promise.all(Array.from({ length: 3 }, (_, i) => trail.commit(request(i))))
  const sealBefore = fs.readFileSync(`${file}.seal`)
  await Promise.all(Array.from({ length: 20 }, (_, i) => trail.commit(request(3 + i))))
  await trail.close()
  // As if the gateway had died after the group's write, before its seal.
  fs.writeFileSync(`${file}.seal`, sealBefore)
  t.match(verify([file]).problem, { reason: /^appended: the records from seq 4 on are not covered by the seal/ }, 'verify reports the unsealed records')
  const log = capture()
  const again = AuditTrail.open({ file, level: 'metadata' }, log.logger)
  t.ok(log.lines.some((l) => l.level === 40 && /the last 20 records \(seq 4 to 23\) were written but not sealed/.test(String(l.msg))), 'warned')
  t.match(again.status(), { seq: 23 })
  await again.commit(request(99))
  await again.close()
  t.ok(verify([file]).ok, 'sealed and continued in the same file')
  t.equal(records(file).filter((r) => r.event === 'chain.head').length, 1)

  // Unsealed records that do not chain from the sealed one are not a group: the file is set aside.
  const lines = fs.readFileSync(file, 'utf8').split('\n').slice(0, -1)
  const sealed = fs.readFileSync(`${file}.seal`)
  const trail2 = AuditTrail.open({ file, level: 'metadata' }, quiet())
  await Promise.all(Array.from({ length: 5 }, (_, i) => trail2.commit(request(200 + i))))
  await trail2.close()
  const grown = fs.readFileSync(file, 'utf8').split('\n').slice(0, -1)
  // Drop the first record after the sealed one: the rest no longer chain from the seal.
  fs.writeFileSync(file, [...lines, ...grown.slice(lines.length + 1)].map((l) => `${l}\n`).join(''))
  fs.writeFileSync(`${file}.seal`, sealed)
  const log2 = capture()
  const third = AuditTrail.open({ file, level: 'metadata' }, log2.logger)
  await third.close()
  t.ok(log2.lines.some((l) => l.level === 50 && /cannot be continued/.test(String(l.msg))), 'logged loudly and set aside')
})

/** GET with its whole answer; `onAnswer` runs as soon as the answer has fully arrived. */
function get (socketPath: string, target: string, onAnswer: () => void): Promise<{ status: number, complete: boolean }> {
  return new Promise((resolve) => {
    const req = http.request({ socketPath, method: 'GET', path: target, agent: false }, (res) => {
      res.resume()
      res.on('end', () => { onAnswer(); resolve({ status: res.statusCode ?? 0, complete: res.complete }) })
      res.on('error', () => resolve({ status: res.statusCode ?? 0, complete: false }))
    })
    req.on('error', () => resolve({ status: 0, complete: false }))
    req.end()
  })
}

t.test('through a gateway: concurrent requests, fewer writes than records, no answer before its record (kill -9)', async (t) => {
  const dir = tmp(t)
  const file = path.join(dir, 'audit.jsonl')
  const writesLog = path.join(dir, 'writes.log')
  const socket = path.join(dir, 'gw.sock')
  const config = path.join(dir, 'portcullis.yaml')
  fs.writeFileSync(config, [
    'listen:',
    `  - { unix: ${socket}, identity: { subject: tester, roles: [admin] } }`,
    `upstream: unix://${engine().socket}`,
    `policy: { dir: ${POLICIES} }`,
    `audit: { file: ${file} }`,
    'log: { level: info }',
    '',
  ].join('\n'))
  const hook = path.join(__dirname, 'helpers', 'count-audit-writes.js')
  const gw = spawn(process.execPath, ['--require', hook, CLI, 'serve', '--config', config], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, PCX_AUDIT_FILE: file, PCX_AUDIT_WRITES: writesLog } })
  let logText = ''
  gw.stdout.on('data', (d: Buffer) => { logText += d.toString() })
  gw.stderr.on('data', (d: Buffer) => { logText += d.toString() })
  let killed = false
  t.teardown(async () => {
    if (gw.exitCode !== null || gw.signalCode !== null) return
    gw.kill('SIGTERM')
    await new Promise((resolve) => gw.once('exit', resolve))
  })
  await waitUntil(() => logText.includes('portcullis started'), 60_000)

  // 1. N at once: N records in one chain that verifies, in fewer writes.
  const N = 64
  const before = records(file).length
  const answers = await Promise.all(Array.from({ length: N }, (_, i) => get(socket, `/v1.41/containers/pcx-group-a${i}/json`, () => {})))
  t.ok(answers.every((a) => a.status === 404 && a.complete), 'every request answered (the engine\'s 404)')
  const rs = records(file).slice(before).filter((r) => r.operation === 'ContainerInspect')
  t.same(rs.map((r) => r.resource.id).sort(), Array.from({ length: N }, (_, i) => `pcx-group-a${i}`).sort(), `${N} records`)
  const v = verify([file])
  t.ok(v.ok, `the chain verifies${v.ok ? '' : `: ${JSON.stringify(v.problem)}`}`)
  const writes = fs.readFileSync(writesLog, 'utf8').split('\n').slice(0, -1).map(Number)
  const total = writes.reduce((a, b) => a + b, 0)
  t.equal(total, records(file).length, 'the counted writes carried every line of the file')
  t.ok(writes.length < total, `fewer writes than records: ${writes.length} writes for ${total} lines (largest ${Math.max(...writes)})`)

  // 2. Killed right after answers arrive: every answered request's record is in the file.
  const answered: string[] = []
  const names = Array.from({ length: 4 * N }, (_, i) => `pcx-group-b${i}`)
  const done = Promise.all(names.map((name) => get(socket, `/v1.41/containers/${name}/json`, () => {
    // Every complete answer counts, also one read after the kill: the gateway sent it whole.
    answered.push(name)
    if (killed) return
    // N/2 answers are in (of 4N asked): kill -9 at once, in the same callback.
    if (answered.length >= N / 2) { killed = true; gw.kill('SIGKILL') }
  })))
  await done
  const got = answered.slice()
  t.ok(killed && got.length >= N / 2, `killed after ${got.length} answers`)
  const inFile = new Set(records(file).map((r) => r.resource?.id))
  const missing = got.filter((name) => !inFile.has(name))
  t.same(missing, [], 'every answered request has its record in the file')
  // A kill between a write and its seal leaves at most one group unsealed: the next start seals it.
  const log = capture()
  const again = AuditTrail.open({ file, level: 'metadata' }, log.logger)
  await again.close()
  t.notOk(log.lines.some((l) => l.level === 50), `the trail continues after kill -9 ${JSON.stringify(log.lines.map((l) => l.msg))}`)
  t.ok(verify([file]).ok, 'and verifies')
})
