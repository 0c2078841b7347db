/**
 * The operational log is buffered (pino.destination({ sync: false }), src/cli.ts): one
 * write per 4 KiB or 250 ms, not per line. At shutdown nothing of it may be lost: every
 * request's line and the last words ("stopped") reach stdout when SIGTERM comes right
 * after the answers, before any timed flush.
 */
import t from 'tap'
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import http from 'node:http'
import os from 'node:os'
import path from 'node:path'
import { engine, POLICIES, waitUntil } from './helpers/gateway'

const CLI = path.join(__dirname, '..', 'src', 'cli.js')

function ping (socketPath: string): Promise<number> {
  return new Promise((resolve) => {
    const req = http.request({ socketPath, method: 'GET', path: '/_ping', agent: false }, (res) => { res.resume(); res.on('end', () => resolve(res.statusCode ?? 0)) })
    req.on('error', () => resolve(0))
    req.end()
  })
}

t.test('SIGTERM right after the answers: every request line and the last words are on stdout', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pcx-log-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  const socket = path.join(dir, 'gw.sock')
  const config = path.join(dir, 'portcullis.yaml')
  fs.writeFileSync(config, [
    'listen:',
    `  - { unix: ${socket}, identity: { subject: tester, roles: [admin] } }`,
    `upstream: unix://${engine().socket}`,
    `policy: { dir: ${POLICIES} }`,
    `audit: { file: ${path.join(dir, 'audit.jsonl')} }`,
    'log: { level: info }',
    '',
  ].join('\n'))
  const gw = spawn(process.execPath, [CLI, 'serve', '--config', config], { stdio: ['ignore', 'pipe', 'pipe'] })
  let out = ''
  gw.stdout.on('data', (d: Buffer) => { out += d.toString() })
  gw.stderr.on('data', (d: Buffer) => { out += d.toString() })
  const exited = new Promise<string>((resolve) => gw.once('exit', (code, signal) => resolve(`${code} ${signal}`)))
  t.teardown(() => { if (gw.exitCode === null && gw.signalCode === null) gw.kill('SIGKILL') })
  await waitUntil(() => out.includes('portcullis started'), 60_000)

  const N = 300
  const statuses = await Promise.all(Array.from({ length: N }, async () => await ping(socket)))
  t.ok(statuses.every((s) => s === 200), `${N} pings answered`)
  gw.kill('SIGTERM')
  t.equal(await exited, '0 null', 'exits 0')
  const lines = out.split('\n').filter(Boolean).map((l) => JSON.parse(l) as { msg?: string, op?: string })
  t.equal(lines.filter((l) => l.msg === 'request' && l.op === 'SystemPing').length, N, 'one line per request, none lost')
  t.equal(lines.at(-1)?.msg, 'stopped', 'the last line is the last word')
})
