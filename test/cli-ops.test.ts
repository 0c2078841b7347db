// The commands say what they did (issue 19, item 4), as a user runs them: `node
// dist/src/cli.js ...` in a child process, against the real engine.
//   - `--help` and `-h` on every command print that command's usage and exit 0 (never
//     taken as a file name); an unknown option is an error naming it, with the usage;
//   - `config check` warns (exit 0, `warning:` lines) about a short or placeholder JWT
//     secret, an engine that does not exist or does not answer, an audit directory that
//     cannot be written, and a TCP listener without authentication;
//   - `serve --listen` replaces the listeners (what `npm start -- --listen ...` passes on);
//   - SIGHUP names every changed setting that needs a restart, with the value kept.
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process'
import fs from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { CLI28, engine, POLICIES, run } from './helpers/gateway'

const CLI = path.join(__dirname, '..', 'src', 'cli.js')
/** As a user runs it: without tap's NODE_OPTIONS. */
const USER_ENV = { NODE_OPTIONS: '' }
type LogLine = Record<string, unknown> & { msg?: string }

function tempDir (t: { teardown: (fn: () => void) => void }, prefix: string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  return dir
}

async function portcullis (args: string[], opts: { cwd?: string } = {}): Promise<{ code: number | null, stdout: string, stderr: string }> {
  const r = await run(process.execPath, [CLI, ...args], { host: '', cwd: opts.cwd, env: USER_ENV, timeoutMs: 30_000 })
  return { code: r.code, stdout: r.stdout.toString(), stderr: r.stderr }
}

/** A config with a unix socket in `dir` and the test engine; `extra` appended. */
function configText (dir: string, extra = ''): string {
  return `listen:\n  - { unix: ${path.join(dir, 'gw.sock')}, identity: { subject: tester, roles: [admin] } }\nupstream: unix://${engine().socket}\n` +
    `policy: { dir: ${POLICIES} }\naudit: { file: ${path.join(dir, 'audit.jsonl')} }\nshutdown: { graceSeconds: 3 }\n${extra}`
}

const COMMANDS: Array<[string[], string]> = [
  [['serve'], 'usage: portcullis serve '],
  [['config', 'check'], 'usage: portcullis config check FILE'],
  [['policy', 'check'], 'usage: portcullis policy check '],
  [['policy', 'test'], 'usage: portcullis policy test '],
  [['token'], 'usage: portcullis token '],
  [['audit', 'verify'], 'usage: portcullis audit verify '],
  [['audit', 'report'], 'usage: portcullis audit report '],
  [['help'], 'usage: portcullis help '],
]

t.test('--help and -h on every command: its usage, exit 0, nothing taken as a file', async (t) => {
  const cwd = tempDir(t, 'pco-')
  for (const [command, usage] of COMMANDS) {
    for (const flag of ['--help', '-h']) {
      const r = await portcullis([...command, flag], { cwd })
      const shown = `${command.join(' ')} ${flag}`
      t.equal(r.code, 0, `${shown}: exit 0 (${r.stderr.trim()})`)
      t.ok(r.stdout.startsWith(usage), `${shown}: prints its usage`)
      t.equal(r.stderr, '', `${shown}: nothing on stderr`)
    }
  }
  t.same(fs.readdirSync(cwd), [], 'no file was read or written as "--help"')
  const topic = await portcullis(['help', 'audit', 'report'])
  t.equal(topic.code, 0)
  t.ok(topic.stdout.startsWith('usage: portcullis audit report '), 'help COMMAND prints that command\'s usage')
})

t.test('an unknown option is an error that names it, with the usage', async (t) => {
  for (const [command, usage] of COMMANDS) {
    const r = await portcullis([...command, '--frobnicate', 'x'])
    const shown = command.join(' ')
    t.equal(r.code, 2, `${shown} --frobnicate: exit 2`)
    t.match(r.stderr, `portcullis ${shown}: Unknown option '--frobnicate'`, `${shown}: names the option`)
    t.match(r.stderr, usage, `${shown}: and shows the usage`)
    t.notMatch(r.stderr, /\n\s+at /, `${shown}: without a stack trace`)
  }
})

t.test('config check: warnings for a valid file, exit 0', async (t) => {
  const dir = tempDir(t, 'pco-')
  // A unix socket that accepts and never answers: the engine "does not answer".
  const mute = path.join(dir, 'mute.sock')
  const held: net.Socket[] = []
  const server = net.createServer((s) => { held.push(s) })
  await new Promise<void>((resolve) => server.listen(mute, resolve))
  t.teardown(() => { for (const s of held) s.destroy(); server.close() })
  // A TCP port nothing listens on.
  const closed = net.createServer()
  const port = await new Promise<number>((resolve) => closed.listen(0, '127.0.0.1', () => resolve((closed.address() as net.AddressInfo).port)))
  await new Promise((resolve) => closed.close(resolve))

  const cases: Array<{ name: string, text: string, expect: RegExp[] }> = [
    {
      name: 'sound',
      text: configText(dir, `auth: { jwt: { secret: ${'9f'.repeat(32)} } }\n`).replace('listen:\n', 'listen:\n  - { tcp: 127.0.0.1:0 }\n'),
      expect: [],
    },
    {
      name: 'weak',
      text: configText(dir, `auth: { jwt: { secret: changeme } }\nprovenance: { file: ${path.join(dir, 'no-such-dir', 'provenance.jsonl')} }\n`)
        .replace(`upstream: unix://${engine().socket}`, `upstream: unix://${path.join(dir, 'no-engine.sock')}`)
        .replace(`audit: { file: ${path.join(dir, 'audit.jsonl')} }`, `audit: { file: ${path.join(dir, 'no-such-dir', 'audit.jsonl')} }`)
        .replace('listen:\n', 'listen:\n  - { tcp: 127.0.0.1:0, anonymous: true }\n  - { tcp: 127.0.0.1:0, identity: { subject: ops, roles: [admin] } }\n'),
      expect: [
        /^warning: auth\.jwt\.secret is 8 bytes long: .*at least 32 random bytes/m,
        /^warning: auth\.jwt\.secret looks like a placeholder \(it contains "changeme"\)/m,
        new RegExp(`^warning: upstream unix://${path.join(dir, 'no-engine.sock')}: .* does not exist \\(ENOENT\\)`, 'm'),
        new RegExp(`^warning: audit\\.file ${path.join(dir, 'no-such-dir', 'audit.jsonl')}: its directory .* does not exist`, 'm'),
        new RegExp(`^warning: provenance\\.file ${path.join(dir, 'no-such-dir', 'provenance.jsonl')}: its directory .* does not exist`, 'm'),
        /^warning: listen\[0\] \(tcp 127\.0\.0\.1:0\): has no authentication: anyone who can reach the port acts as anonymous/m,
        /^warning: listen\[1\] \(tcp 127\.0\.0\.1:0\): has no authentication: anyone who can reach the port acts as ops \(roles admin\)/m,
      ],
    },
    {
      name: 'mute engine, audit path under a file',
      text: configText(dir, 'auth: { jwt: { secret: my-jwt-secret-for-the-gateway-000000 } }\n')
        .replace(`upstream: unix://${engine().socket}`, `upstream: unix://${mute}`)
        .replace(`audit: { file: ${path.join(dir, 'audit.jsonl')} }`, `audit: { file: ${path.join(dir, 'plain-file', 'audit.jsonl')} }`),
      expect: [
        /^warning: auth\.jwt\.secret looks like a placeholder \(it contains "secret"\)/m,
        new RegExp(`^warning: upstream unix://${mute}: GET /_ping got no answer within 2 s`, 'm'),
        /^warning: audit\.file .*plain-file\/audit\.jsonl: .*plain-file is not a directory/m,
      ],
    },
    {
      name: 'tcp engine that does not answer',
      text: configText(dir).replace(`upstream: unix://${engine().socket}`, `upstream: tcp://127.0.0.1:${port}`),
      expect: [new RegExp(`^warning: upstream tcp://127\\.0\\.0\\.1:${port}: GET /_ping failed: ECONNREFUSED`, 'm')],
    },
  ]
  fs.writeFileSync(path.join(dir, 'plain-file'), '')
  for (const c of cases) {
    const file = path.join(dir, `${c.name.replace(/\W+/g, '-')}.yaml`)
    fs.writeFileSync(file, c.text)
    const r = await portcullis(['config', 'check', file])
    t.equal(r.code, 0, `${c.name}: exit 0 (warnings do not fail)`)
    t.equal(r.stdout, `${file}: OK\n`, `${c.name}: OK`)
    const warnings = r.stderr.split('\n').filter((l) => l !== '')
    t.ok(warnings.every((l) => l.startsWith('warning: ')), `${c.name}: each line is a warning`)
    t.equal(warnings.length, c.expect.length, `${c.name}: ${c.expect.length} warning(s)\n${r.stderr}`)
    for (const e of c.expect) t.match(r.stderr, e, `${c.name}: ${e.source.slice(0, 60)}`)
  }
})

/** `portcullis serve ...`, its JSON log lines collected. */
class Serve {
  stdout = ''
  stderr = ''
  readonly child: ChildProcessWithoutNullStreams
  constructor (t: { teardown: (fn: () => void) => void }, args: string[], cwd: string) {
    const env: NodeJS.ProcessEnv = { ...process.env, ...USER_ENV }
    delete env.PORTCULLIS_CONFIG
    delete env.DOCKER_HOST
    this.child = spawn(process.execPath, [CLI, 'serve', ...args], { cwd, env, stdio: 'pipe' })
    this.child.stdout.setEncoding('utf8').on('data', (s: string) => { this.stdout += s })
    this.child.stderr.setEncoding('utf8').on('data', (s: string) => { this.stderr += s })
    t.teardown(() => { if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill('SIGKILL') })
  }

  lines (): LogLine[] { return this.stdout.split('\n').filter((l) => l !== '').map((l) => JSON.parse(l) as LogLine) }

  async until<T> (what: string, check: () => T | undefined | null | false, ms = 20_000): Promise<T> {
    const deadline = Date.now() + ms
    for (;;) {
      const v = check()
      if (v) return v
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}\nstdout: ${this.stdout.slice(-2000)}\nstderr: ${this.stderr.slice(-2000)}`)
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
  }

  async started (): Promise<string[]> {
    const line = await this.until('start-up', () => this.lines().find((l) => l.msg === 'portcullis started' || l.msg === 'cannot start'))
    if (line.msg !== 'portcullis started') throw new Error(`serve did not start:\n${this.stdout}${this.stderr}`)
    return line.listening as string[]
  }

  async stop (): Promise<number | null> {
    this.child.kill('SIGTERM')
    return await new Promise((resolve) => this.child.on('exit', (code) => resolve(code)))
  }
}

t.test('serve --listen replaces the listeners (npm start -- --listen ...)', async (t) => {
  const dir = tempDir(t, 'pco-')
  const file = path.join(dir, 'portcullis.yaml')
  fs.writeFileSync(file, configText(dir))
  const gw = new Serve(t, ['--config', file, '--listen', 'unix:./p.sock', '--listen', 'tcp:127.0.0.1:0'], dir)
  const listening = await gw.started()
  const sock = path.join(dir, 'p.sock')
  t.equal(listening.length, 2, 'two listeners')
  t.equal(listening[0], `unix:${sock}`, 'unix:./p.sock, relative to the working directory')
  t.match(listening[1], /^127\.0\.0\.1:\d+$/, 'and the TCP port')
  t.notOk(fs.existsSync(path.join(dir, 'gw.sock')), 'the config file\'s socket is not opened')
  t.equal((fs.statSync(sock).mode & 0o777).toString(8), '600', 'the socket is owner-only, as the default one')
  const version = await run(CLI28, ['version', '--format', '{{.Server.Version}}'], { host: `unix://${sock}`, timeoutMs: 30_000 })
  t.equal(version.code, 0, `docker version through it, as the admin the default socket has (${version.stderr.trim()})`)
  const bad = await portcullis(['serve', '--config', file, '--listen', 'http://x'])
  t.equal(bad.code, 2, 'an address that is neither unix: nor tcp: is refused')
  t.match(bad.stderr, '--listen "http://x": expected unix:PATH or tcp:HOST:PORT')
  t.equal(await gw.stop(), 0)
})

t.test('SIGHUP names each changed setting that needs a restart, with the value kept', async (t) => {
  const dir = tempDir(t, 'pco-')
  const file = path.join(dir, 'portcullis.yaml')
  fs.writeFileSync(file, configText(dir))
  const gw = new Serve(t, ['--config', file], dir)
  await gw.started()
  const seen = gw.lines().length
  const free = net.createServer()
  const port = await new Promise<number>((resolve) => free.listen(0, '127.0.0.1', () => resolve((free.address() as net.AddressInfo).port)))
  await new Promise((resolve) => free.close(resolve))
  fs.writeFileSync(file, configText(dir, `metrics: { listen: 127.0.0.1:${port} }\nlog: { level: debug }\n`).replace('graceSeconds: 3', 'graceSeconds: 7'))
  gw.child.kill('SIGHUP')
  const reloaded = await gw.until('configuration reloaded', () => gw.lines().slice(seen).find((l) => l.msg === 'configuration reloaded'))
  const after = gw.lines().slice(seen)
  const named = (msg: string): LogLine | undefined => after.find((l) => l.msg === msg)
  t.match(named('metrics.listen changed: needs a restart, kept (not set)'), { level: 40, setting: 'metrics.listen', wanted: `127.0.0.1:${port}` }, 'metrics.listen: named, nothing started')
  t.match(named('shutdown.graceSeconds changed: needs a restart, kept 3'), { level: 40, setting: 'shutdown.graceSeconds', kept: 3, wanted: 7 }, 'shutdown.graceSeconds: named with the value kept')
  t.notOk(after.some((l) => typeof l.setting === 'string' && l.setting.startsWith('log')), 'the log level is applied, not named')
  t.same(reloaded.needsRestart, ['metrics.listen', 'shutdown.graceSeconds'], 'the reload line lists them too')
  t.ok(await new Promise((resolve) => { const c = net.connect(port, '127.0.0.1'); c.on('connect', () => { c.destroy(); resolve(false) }); c.on('error', () => resolve(true)) }), 'no metrics listener was started')
  t.equal(await gw.stop(), 0)
})
