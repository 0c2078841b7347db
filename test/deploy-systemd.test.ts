/**
 * deploy/systemd: the units pass `systemd-analyze verify`, and socket activation
 * serves the docker CLI. `systemd-socket-activate` (Debian's systemd) plays the
 * socket unit: it binds a unix socket, passes it as fd 3 with LISTEN_FDS, LISTEN_PID
 * and LISTEN_FDNAMES, and execs the gateway on the first connection, exactly as
 * systemd does for portcullis.socket -> portcullis.service.
 */
import { spawn, spawnSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { CLI28, POLICIES, engine, run } from './helpers/gateway'
import { assertTool, haveTools } from './helpers/tools'

const REPO = path.resolve(__dirname, '../..')
const CLI = path.join(REPO, 'dist/src/cli.js')
const UNITS = path.join(REPO, 'deploy/systemd')

t.test('the units pass systemd-analyze verify, which does catch a broken unit', async (t) => {
  if (!haveTools(t, 'systemd-analyze')) return
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pcs-units-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  for (const f of ['portcullis.socket', 'portcullis.service']) fs.copyFileSync(path.join(UNITS, f), path.join(dir, f))
  const ok = spawnSync('systemd-analyze', ['verify', '--man=no', path.join(dir, 'portcullis.socket'), path.join(dir, 'portcullis.service')], { encoding: 'utf8' })
  t.equal(ok.status, 0, ok.stderr)
  t.equal(ok.stderr.trim(), '', 'no warning either')
  const service = fs.readFileSync(path.join(UNITS, 'portcullis.service'), 'utf8')
  for (const line of ['NoNewPrivileges=true', 'ProtectSystem=strict', 'PrivateTmp=true', 'User=portcullis', 'ReadWritePaths=/var/lib/portcullis', 'CapabilityBoundingSet=']) {
    t.match(service, new RegExp(`^${line.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`, 'm'), line)
  }
  // The same check refuses a unit with a bad value: the pass above means something.
  fs.writeFileSync(path.join(dir, 'portcullis.service'), service.replace('ProtectSystem=strict', 'ProtectSystem=sometimes'))
  const bad = spawnSync('systemd-analyze', ['verify', '--man=no', path.join(dir, 'portcullis.socket'), path.join(dir, 'portcullis.service')], { encoding: 'utf8' })
  t.match(bad.stderr, /protect system value/i)
  // The example configuration is valid (config check reads the systemd entry's shape).
  const check = spawnSync(process.execPath, [CLI, 'config', 'check', path.join(UNITS, 'portcullis.yaml')], { encoding: 'utf8' })
  t.equal(check.status, 0, check.stdout + check.stderr)
})

interface Activated { socket: string, dir: string, output (): string, exited: Promise<number | null>, stop (): Promise<void> }

/** systemd-socket-activate binding `socket` (named portcullis) and exec-ing `portcullis serve` with this config on the first connection. */
function activate (configYaml: string): Activated {
  assertTool('systemd-socket-activate')
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pcs-'))
  const socket = path.join(dir, 'portcullis.sock')
  const config = path.join(dir, 'portcullis.yaml')
  fs.writeFileSync(config, `upstream: unix://${engine().socket}\npolicy: { dir: ${POLICIES} }\naudit: { file: ${dir}/audit.jsonl }\nshutdown: { graceSeconds: 1 }\n${configYaml}`)
  let out = ''
  const child = spawn('systemd-socket-activate', ['-l', socket, '--fdname=portcullis', process.execPath, CLI, 'serve', '--config', config], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] })
  child.stdout.on('data', (b: Buffer) => { out += b.toString() })
  child.stderr.on('data', (b: Buffer) => { out += b.toString() })
  const exited = new Promise<number | null>((resolve) => child.on('close', resolve))
  return {
    socket,
    dir,
    output: () => out,
    exited,
    async stop () {
      if (child.exitCode === null) child.kill('SIGTERM')
      await exited
      fs.rmSync(dir, { recursive: true, force: true })
    },
  }
}

async function bound (socket: string): Promise<void> {
  for (let i = 0; i < 200 && !fs.existsSync(socket); i++) await new Promise((resolve) => setTimeout(resolve, 50))
}

t.test('with no listen in the config, it serves on exactly the passed socket (the unix default: the service user, admin)', async (t) => {
  const a = activate('')
  t.teardown(() => a.stop())
  await bound(a.socket)
  const r = await run(CLI28, ['ps', '-a', '--format', '{{.ID}}'], { host: `unix://${a.socket}`, timeoutMs: 60_000 })
  t.equal(r.code, 0, r.stderr + a.output())
  // The start-up line may reach the pipe after the first answer (the log is written asynchronously).
  for (let i = 0; i < 200 && !a.output().includes('"listening"'); i++) await new Promise((resolve) => setTimeout(resolve, 50))
  t.match(a.output(), /"listening":\["unix:[^"]*portcullis\.sock"\]/, 'the passed socket, and nothing else (no ./portcullis.sock, no 127.0.0.1:2375)')
  t.notOk(fs.existsSync(path.join(a.dir, 'portcullis.sock.lock')))
  const audit = fs.readFileSync(path.join(a.dir, 'audit.jsonl'), 'utf8')
  t.match(audit, /"operation":"ContainerList"/)
  t.match(audit, /"listener":"systemd:portcullis"/)
  // SIGTERM: the gateway drains and exits 0; the socket stays the unit's (not unlinked by the gateway).
  await a.stop()
  t.equal(await a.exited, 0)
})

t.test('a listen entry `systemd: NAME` takes the passed socket of that name, with its own identity', async (t) => {
  const a = activate('listen:\n  - { systemd: portcullis, name: activated, identity: { subject: ops, tenant: acme, roles: [readonly] } }\n')
  t.teardown(() => a.stop())
  await bound(a.socket)
  const ps = await run(CLI28, ['ps', '-a', '--format', '{{.ID}}'], { host: `unix://${a.socket}`, timeoutMs: 60_000 })
  t.equal(ps.code, 0, ps.stderr + a.output())
  const rm = await run(CLI28, ['rm', 'no-such-container-pcs'], { host: `unix://${a.socket}`, timeoutMs: 60_000 })
  t.not(rm.code, 0)
  t.match(rm.stderr, /denied by policy/, 'the entry\'s identity (readonly) decides, not the admin default')
  t.match(fs.readFileSync(path.join(a.dir, 'audit.jsonl'), 'utf8'), /"listener":"activated"/)
})

t.test('a passed socket no listener names, or a listener naming no passed socket, stops the start (exit 2)', async (t) => {
  const a = activate('listen:\n  - { systemd: other }\n')
  t.teardown(() => a.stop())
  await bound(a.socket)
  // The first connection makes systemd-socket-activate exec the gateway, which refuses to start.
  await run(CLI28, ['version'], { host: `unix://${a.socket}`, timeoutMs: 30_000 })
  t.equal(await a.exited, 2)
  t.match(a.output(), /listen\[0\]\.systemd: no socket named "other" was passed \(LISTEN_FDNAMES: portcullis\)/)
  t.match(a.output(), /the socket "portcullis" \(fd 3\) passed by systemd is used by no listener/)
})
