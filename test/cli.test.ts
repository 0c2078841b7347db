// The `portcullis` command as a user runs it: `node dist/src/cli.js ...` in a child
// process, against the real engine. Help and exit codes, `config check`, `serve` with
// a config file or PORTCULLIS_CONFIG or built-in defaults, the per-request log line,
// and the signals: SIGTERM (close streams, drain, exit 0) and SIGHUP (reload).
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process'
import fs from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { Agent, request as undiciRequest } from 'undici'
import { CLI28, engine, POLICIES, run, uniqueName } from './helpers/gateway'

const CLI = path.join(__dirname, '..', 'src', 'cli.js')
const GRACE_SECONDS = 3

interface Teardown { teardown: (fn: () => unknown) => void }
type LogLine = Record<string, unknown> & { msg?: string }

function tempDir (t: Teardown, prefix: string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  return dir
}

async function sleep (ms: number): Promise<void> {
  await new Promise((resolve) => setTimeout(resolve, ms))
}

/** As a user runs it: without tap's NODE_OPTIONS (its process-info hook slows every start). */
const USER_ENV = { NODE_OPTIONS: '' }

/** Run the CLI to completion. */
async function portcullis (args: string[], opts: { cwd?: string, env?: NodeJS.ProcessEnv } = {}): Promise<{ code: number | null, stdout: string, stderr: string }> {
  const r = await run(process.execPath, [CLI, ...args], { host: opts.env?.DOCKER_HOST ?? '', cwd: opts.cwd, env: { ...USER_ENV, ...opts.env }, timeoutMs: 30_000 })
  return { code: r.code, stdout: r.stdout.toString(), stderr: r.stderr }
}

/** A child process kept running; its output collected; killed at teardown if still alive. */
class Proc {
  stdout = ''
  stderr = ''
  readonly exit: Promise<{ code: number | null, signal: NodeJS.Signals | null, at: number }>

  constructor (t: Teardown, readonly child: ChildProcessWithoutNullStreams) {
    child.stdout.setEncoding('utf8').on('data', (s: string) => { this.stdout += s })
    child.stderr.setEncoding('utf8').on('data', (s: string) => { this.stderr += s })
    child.stdin.on('error', () => {})
    this.exit = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal, at: Date.now() })))
    t.teardown(() => { if (this.running) child.kill('SIGKILL') })
  }

  get running (): boolean { return this.child.exitCode === null && this.child.signalCode === null }

  /** Poll `check` until it returns something truthy; fail after `ms`. */
  async until<T> (what: string, check: () => T | undefined | null | false, ms = 20_000): Promise<T> {
    const deadline = Date.now() + ms
    for (;;) {
      const v = check()
      if (v) return v
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}\nstdout: ${this.stdout.slice(-2000)}\nstderr: ${this.stderr.slice(-2000)}`)
      await sleep(50)
    }
  }
}

/** `portcullis serve ...`, whose stdout is pino JSON lines. */
class Serve extends Proc {
  lines (): LogLine[] {
    return this.stdout.split('\n').filter((l) => l !== '').map((l) => JSON.parse(l) as LogLine)
  }

  requests (): LogLine[] { return this.lines().filter((l) => l.msg === 'request' || l.msg === 'request failed') }

  async logged (msg: string, ms?: number): Promise<LogLine> {
    return await this.until(`log line "${msg}"`, () => this.lines().find((l) => l.msg === msg), ms)
  }

  async started (): Promise<string[]> {
    const line = await this.until('start-up', () => this.lines().find((l) => l.msg === 'portcullis started' || l.msg === 'cannot start') ?? (!this.running && { msg: 'exited' }))
    if (line.msg !== 'portcullis started') throw new Error(`serve did not start:\n${this.stdout}${this.stderr}`)
    return line.listening as string[]
  }

  /** SIGTERM, then the exit status and how long it took. */
  async terminate (): Promise<{ code: number | null, signal: NodeJS.Signals | null, ms: number, at: number }> {
    const sent = Date.now()
    this.child.kill('SIGTERM')
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 30_000)
    const { code, signal, at } = await this.exit
    clearTimeout(timer)
    return { code, signal, ms: at - sent, at }
  }
}

/** SIGTERM: exit code 0, and the unix socket removed. */
async function stopsCleanly (t: tap.Test, gw: Serve, sock: string): Promise<void> {
  const exit = await gw.terminate()
  t.same([exit.code, exit.signal], [0, null], `SIGTERM: exit 0 (${exit.ms} ms)`)
  t.notOk(fs.existsSync(sock), 'the socket is removed on exit')
}

function serve (t: Teardown, args: string[], opts: { env?: NodeJS.ProcessEnv, cwd?: string } = {}): Serve {
  const env: NodeJS.ProcessEnv = { ...process.env, ...USER_ENV, ...opts.env }
  if (opts.env?.PORTCULLIS_CONFIG === undefined) delete env.PORTCULLIS_CONFIG
  // The gateway reads DOCKER_HOST when nothing else names the engine: only where a test says so.
  if (opts.env?.DOCKER_HOST === undefined) delete env.DOCKER_HOST
  return new Serve(t, spawn(process.execPath, [CLI, 'serve', ...args], { cwd: opts.cwd, env, stdio: 'pipe' }))
}

/** A docker CLI left running (logs -f, events, exec -i) against `host`. */
function dockerBackground (t: Teardown, host: string, args: string[]): Proc {
  const config = tempDir(t, 'pcc-dcfg-')
  return new Proc(t, spawn(CLI28, args, { env: { ...process.env, DOCKER_HOST: host, DOCKER_CONFIG: config }, stdio: 'pipe' }))
}

/** A config for `serve`: a unix socket in `dir`, a TCP port, the test engine. */
function configText (dir: string, extra = '', socketName = 'gw.sock'): string {
  return `listen:\n  - { unix: ${path.join(dir, socketName)}, identity: { subject: tester, roles: [admin] } }\n  - { name: tcp, tcp: 127.0.0.1:0, identity: { subject: tester, roles: [admin] } }\nupstream: unix://${engine().socket}\n` +
    `policy: { dir: ${POLICIES} }\naudit: { file: ${path.join(dir, 'audit.jsonl')} }\nshutdown: { graceSeconds: ${GRACE_SECONDS} }\n${extra}`
}

function writeConfig (dir: string, text = configText(dir)): string {
  const file = path.join(dir, 'portcullis.yaml')
  fs.writeFileSync(file, text)
  return file
}

interface Answer { status: number, json: () => unknown, text: string }

/** One HTTP request through undici to a unix socket or `host:port`. */
async function call (to: string, urlPath: string, method: 'GET' | 'POST' = 'GET'): Promise<Answer> {
  const dispatcher = new Agent(to.startsWith('/') ? { connect: { socketPath: to } } : {})
  try {
    const res = await undiciRequest(`http://${to.startsWith('/') ? 'localhost' : to}${urlPath}`, { method, dispatcher })
    const text = await res.body.text()
    return { status: res.statusCode, text, json: () => JSON.parse(text) }
  } finally {
    await dispatcher.close()
  }
}

async function serverVersion (host: string): Promise<{ code: number | null, version: string, stderr: string }> {
  const r = await run(CLI28, ['version', '--format', '{{.Server.Version}}'], { host, timeoutMs: 30_000 })
  return { code: r.code, version: r.stdout.toString().trim(), stderr: r.stderr }
}

async function portFree (port: number): Promise<boolean> {
  const srv = net.createServer()
  const free = await new Promise<boolean>((resolve) => {
    srv.once('error', () => resolve(false))
    srv.listen(port, '127.0.0.1', () => resolve(true))
  })
  if (free) await new Promise((resolve) => srv.close(resolve))
  return free
}

// ---------------------------------------------------------------------------

t.test('help, version and unknown commands', async (t) => {
  const helpArgs = [['--help'], ['help'], []]
  const [helps, v, bad, cfg, opt] = await Promise.all([
    Promise.all(helpArgs.map(async (args) => await portcullis(args))),
    portcullis(['--version']),
    portcullis(['frobnicate']),
    portcullis(['config', 'lint']),
    portcullis(['serve', '--no-such-option']),
  ])
  helps.forEach((r, i) => {
    const shown = helpArgs[i].join(' ') || '(no arguments)'
    t.equal(r.code, 0, `portcullis ${shown} exits 0`)
    t.match(r.stdout, /^\s+serve \[--config FILE\]/m, `${shown}: lists serve`)
    t.match(r.stdout, /^\s+config check FILE/m, `${shown}: lists config check`)
  })
  t.equal(v.code, 0, '--version exits 0')
  t.equal(v.stdout.trim(), (JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', 'package.json'), 'utf8')) as { version: string }).version, '--version prints the package version')

  t.not(bad.code, 0, 'an unknown command exits non-zero')
  t.match(bad.stderr, 'unknown command "frobnicate"', 'and says so on stderr')
  t.equal(bad.stdout, '', 'nothing on stdout')

  t.not(cfg.code, 0, 'config with an unknown subcommand exits non-zero')
  t.match(cfg.stderr, 'usage: portcullis config check FILE', 'and prints its usage')

  t.not(opt.code, 0, 'serve with an unknown option exits non-zero')
  t.match(opt.stderr, '--no-such-option', 'and names the option')
  t.notMatch(opt.stderr, /\n\s+at /, 'without a stack trace')
})

t.test('config check', async (t) => {
  const dir = tempDir(t, 'pcc-')
  const good = writeConfig(dir)
  const badFile = path.join(dir, 'bad.yaml')
  fs.writeFileSync(badFile, [
    'listen:',
    '  - tcp: 127.0.0.1:99999',
    '  - unix: ./a.sock',
    '    tls: { cert: c.pem, key: k.pem }',
    'upstream: ftp://example.com:21',
    'log: { level: loud }',
    'shutdown: { graceSeconds: -1 }',
    'bogus: true',
    '',
  ].join('\n'))
  const expected = [
    'bogus: unknown key',
    'listen[0].tcp: invalid port "99999" in "127.0.0.1:99999", expected 0-65535',
    'listen[1].tls: only allowed on tcp listeners',
    'upstream: unsupported scheme "ftp://" in "ftp://example.com:21", expected unix:// or tcp:// (http:// and https:// are also accepted)',
    'log.level: expected one of fatal, error, warn, info, debug, trace, silent, got "loud"',
    'shutdown.graceSeconds: must be between 0 and 3600, got -1',
  ]
  const [ok, bad, missing, usage, refused] = await Promise.all([
    portcullis(['config', 'check', good]),
    portcullis(['config', 'check', badFile]),
    portcullis(['config', 'check', path.join(dir, 'nope.yaml')]),
    portcullis(['config', 'check']),
    // serve refuses the same file and starts nothing.
    portcullis(['serve', '--config', badFile], { cwd: dir }),
  ])

  t.equal(ok.code, 0, 'a valid file: exit 0')
  t.equal(ok.stdout, `${good}: OK\n`, 'a valid file: OK')

  t.equal(bad.code, 1, 'an invalid file: exit 1')
  const [head, ...listed] = bad.stdout.trimEnd().split('\n')
  t.equal(head, `${badFile}: ${expected.length} problems`, 'the count comes first')
  t.same(listed.map((l) => l.replace(/^ {2}- /, '')).sort(), [...expected].sort(), 'then every problem, one a line')

  t.equal(missing.code, 1, 'a missing file: exit 1')
  t.match(missing.stdout, /cannot read config file \(ENOENT\)/, 'a missing file: says it cannot be read')

  t.not(usage.code, 0, 'no file: exit non-zero')
  t.match(usage.stderr, 'usage: portcullis config check FILE', 'no file: usage')

  t.not(refused.code, 0, 'serve with an invalid file exits non-zero')
  for (const problem of expected) t.match(refused.stderr, `  - ${problem}\n`, `serve lists: ${problem}`)
  t.notOk(fs.existsSync(path.join(dir, 'a.sock')), 'no socket was created')
})

for (const how of ['--config FILE', 'PORTCULLIS_CONFIG=FILE']) {
  t.test(`serve with ${how}: serves, one JSON log line per request`, async (t) => {
    const dir = tempDir(t, 'pcc-')
    const file = writeConfig(dir)
    const sock = path.join(dir, 'gw.sock')
    const gw = how === '--config FILE' ? serve(t, ['--config', file]) : serve(t, [], { env: { PORTCULLIS_CONFIG: file } })
    const listening = await gw.started()
    t.ok(fs.statSync(sock).isSocket(), 'the socket exists')
    t.equal(listening[0], `unix:${sock}`, 'start-up line: the unix listener')
    t.match(listening[1], /^127\.0\.0\.1:[1-9][0-9]*$/, 'start-up line: the TCP port actually bound')

    const answers = [await call(sock, '/v1.41/version'), await call(sock, '/version'), await call(listening[1], '/v1.41/version')]
    for (const a of answers) t.equal(a.status, 200, 'GET version answers 200')
    const lines = await gw.until('three request lines', () => { const r = gw.requests(); return r.length >= answers.length && r })
    t.equal(lines.length, answers.length, 'exactly one log line per request')
    t.equal(new Set(lines.map((l) => l.req)).size, lines.length, 'each with its own request id')
    lines.forEach((l, i) => {
      t.match(l, { msg: 'request', op: 'SystemVersion', method: 'GET', status: 200, bytesIn: 0, bytesOut: Buffer.byteLength(answers[i].text), ms: Number }, `request line ${i + 1}: req, op, status, bytesIn, bytesOut, ms`)
      t.type(l.req, 'string')
      t.ok((l.ms as number) > 0, 'ms is positive')
    })
    t.equal(lines[2].listener, 'tcp', 'the TCP request is logged with its listener')

    const want = await serverVersion(engine().dockerHost)
    const got = await serverVersion(`unix://${sock}`)
    t.equal(got.code, 0, `docker version exits 0 (${got.stderr.trim()})`)
    t.equal(got.version, want.version, 'docker version shows the engine\'s version')
    // A request's line is written as it ends, which may be just after the client has its answer.
    const logged = await gw.until('docker version logged', () => gw.requests().slice(answers.length).find((l) => l.op === 'SystemVersion')).catch(() => undefined)
    t.match(logged, { status: 200 }, 'docker version is logged too')
    t.doesNotThrow(() => gw.lines(), 'every stdout line is JSON')

    await stopsCleanly(t, gw, sock)
  })
}

t.test('SIGTERM closes long streams and exec sessions, lets a short request finish, exits 0', async (t) => {
  const dir = tempDir(t, 'pcc-')
  const sock = path.join(dir, 'gw.sock')
  const gw = serve(t, ['--config', writeConfig(dir)])
  await gw.started()
  const host = `unix://${sock}`
  const { image, dockerHost } = engine()

  const ticker = uniqueName('pcc-tick')
  const sleeper = uniqueName('pcc-stop')
  const volume = uniqueName('pcc-vol')
  const volumes: string[] = []
  t.teardown(async () => {
    await run(CLI28, ['rm', '-f', ticker, sleeper], { host: dockerHost })
    if (volumes.length) await run(CLI28, ['volume', 'rm', '-f', ...volumes], { host: dockerHost })
  })
  // PID 1 without a handler ignores SIGTERM, so `stop -t 2` takes the full 2 seconds.
  for (const [name, cmd] of [[ticker, ['sh', '-c', 'while true; do echo tick; sleep 0.2; done']], [sleeper, ['sleep', '600']]] as const) {
    const r = await run(CLI28, ['run', '-d', '--name', name, image, ...cmd], { host: dockerHost })
    t.equal(r.code, 0, `container ${name} started (${r.stderr.trim()})`)
  }

  const logs = dockerBackground(t, host, ['logs', '-f', ticker])
  await logs.until('docker logs -f output', () => logs.stdout.includes('tick\ntick\n'))
  const exec = dockerBackground(t, host, ['exec', '-i', ticker, 'cat'])
  exec.child.stdin.write('ping\n')
  await exec.until('the exec session echoing stdin', () => exec.stdout.includes('ping\n'))
  const events = dockerBackground(t, host, ['events', '--format', '{{.Type}} {{.Action}} {{.Actor.ID}}'])
  // docker events prints nothing until something happens: make something happen until it shows.
  for (let i = 0; !events.stdout.includes(volume); i++) {
    if (i === 10) throw new Error(`docker events shows nothing: ${events.stderr}`)
    volumes.push(`${volume}-${i}`)
    await run(CLI28, ['volume', 'create', `${volume}-${i}`], { host: dockerHost })
    await events.until('docker events output', () => events.stdout.includes(volume), 1000).catch(() => undefined)
  }
  const dispatcher = new Agent({ connect: { socketPath: sock } })
  t.teardown(() => dispatcher.destroy())
  const httpEvents = await undiciRequest('http://localhost/v1.41/events', { dispatcher })
  t.equal(httpEvents.statusCode, 200, 'GET /events: headers arrive at once')
  const httpEventsEnd = new Promise<string>((resolve) => {
    httpEvents.body.on('error', (err: Error) => resolve(`error: ${err.message}`))
    httpEvents.body.on('end', () => resolve('end'))
    httpEvents.body.resume()
  })

  // A short request in flight when the signal comes: ~2 s of `stop -t 2`.
  const stopSent = Date.now()
  const stopping = undiciRequest(`http://localhost/v1.41/containers/${sleeper}/stop?t=2`, { method: 'POST', dispatcher })
    .then(async (r) => { await r.body.text(); return { status: r.statusCode, at: Date.now() } })
  await sleep(500)

  const exit = await gw.terminate()
  t.same([exit.code, exit.signal], [0, null], 'the gateway exits with code 0')
  t.ok(exit.ms < (GRACE_SECONDS + 2) * 1000, `within the grace period and a little (${exit.ms} ms)`)

  const stopped = await stopping
  t.equal(stopped.status, 204, 'the in-flight stop completed: 204')
  t.ok(stopped.at - stopSent >= 1800, `it ran its ~2 s course (${stopped.at - stopSent} ms), it was not cut`)
  t.ok(stopped.at <= exit.at, 'the gateway exited only after answering it')
  const inspect = await run(CLI28, ['inspect', '--format', '{{.State.Running}}', sleeper], { host: dockerHost })
  t.equal(inspect.stdout.toString().trim(), 'false', 'the engine did stop the container')

  for (const [what, p] of [['docker logs -f', logs], ['docker exec -i (stdin still open)', exec], ['docker events', events]] as const) {
    const timer = setTimeout(() => p.child.kill('SIGKILL'), 5000)
    const end = await p.exit
    clearTimeout(timer)
    t.not(end.signal, 'SIGKILL', `${what} was ended by the gateway (exit ${end.code})`)
  }
  t.match(await httpEventsEnd, /^(end|error: .*)$/, 'GET /events: the response ended')

  // The gateway's own clock: streams end as shutdown starts, the stop when the engine answers.
  const lines = gw.lines()
  const down = lines.find((l) => l.msg === 'shutting down')
  t.match(down, { activeStreams: 4, activeRequests: 5 }, 'logged: shutting down, with 4 streams (logs, exec, 2 x events) and 5 requests (and the stop)')
  const stopLine = lines.find((l) => l.op === 'ContainerStop')
  t.match(stopLine, { status: 204, aborted: undefined }, 'ContainerStop logged, complete')
  const aborted = lines.filter((l) => l.aborted === 'shutdown')
  t.same(aborted.map((l) => l.op).sort(), ['ContainerLogs', 'ExecStart', 'SystemEvents', 'SystemEvents'], 'each stream logged as aborted by shutdown')
  for (const l of aborted) {
    const after = (l.time as number) - (down?.time as number)
    t.ok(after < 1000 && (l.time as number) <= (stopLine?.time as number), `${String(l.op)} ended ${after} ms into shutdown, before the stop's answer`)
  }
  t.ok(lines.some((l) => l.msg === 'stopped'), 'logged: stopped')
})

t.test('SIGHUP reloads the config file; an invalid one is reported and the running one kept', async (t) => {
  const dir = tempDir(t, 'pcc-')
  const file = writeConfig(dir)
  const sock = path.join(dir, 'gw.sock')
  const gw = serve(t, ['--config', file])
  await gw.started()
  const serving = async (when: string): Promise<void> => {
    const r = await serverVersion(`unix://${sock}`)
    t.equal(r.code, 0, `${when}: still serving (${r.stderr.trim()})`)
  }
  const hup = async (text: string, expect: string): Promise<LogLine> => {
    const seen = gw.lines().length
    fs.writeFileSync(file, text)
    gw.child.kill('SIGHUP')
    return await gw.until(`"${expect}" after SIGHUP`, () => gw.lines().slice(seen).find((l) => l.msg === expect))
  }

  const reloaded = await hup(configText(dir, 'log: { level: debug }\n'), 'configuration reloaded')
  t.equal(reloaded.level, 30, 'logged: configuration reloaded')
  t.notOk(gw.lines().some((l) => l.msg?.includes('need a restart')), 'a log level change needs no restart')
  await serving('after reloading with log level debug')

  const invalid = await hup('listen: []\nlog: { level: loud }\nbogus: 1\n', 'SIGHUP: new configuration is invalid; keeping the running one')
  t.same(invalid.problems, [
    'bogus: unknown key',
    'listen: expected a non-empty list of listeners, got an empty list',
    'log.level: expected one of fatal, error, warn, info, debug, trace, silent, got "loud"',
  ], 'the problems are listed')
  await serving('after an invalid config')
  t.ok(fs.statSync(sock).isSocket(), 'the socket is still there')
  t.ok(gw.running, 'the process is still running')

  const moved = await hup(configText(dir, '', 'other.sock'), 'configuration reloaded')
  t.ok(moved, 'a listener change: reloaded')
  const warn = gw.lines().find((l) => l.msg === 'configuration changes that need a restart were not applied')
  t.same(warn?.keys, ['listen'], 'and reported as needing a restart')
  t.notOk(fs.existsSync(path.join(dir, 'other.sock')), 'the new socket is not opened')
  await serving('after a listener change')

  await stopsCleanly(t, gw, sock)
})

t.test('serve without a config file: built-in defaults', async (t) => {
  const busy = await portFree(2375) ? false : '127.0.0.1:2375 is in use on this machine; the built-in defaults cannot be exercised'
  await t.test('./portcullis.sock and 127.0.0.1:2375, upstream unix:///var/run/docker.sock', { skip: busy }, async (t) => {
    const cwd = tempDir(t, 'pcc-cwd-')
    // The defaults read the policy from ./policies, as `npm start` in a checkout does.
    fs.cpSync(POLICIES, path.join(cwd, 'policies'), { recursive: true })
    const gw = serve(t, [], { cwd })
    const sock = path.join(cwd, 'portcullis.sock')
    const listening = await gw.started()
    t.same(listening, [`unix:${sock}`, '127.0.0.1:2375'], 'listens on ./portcullis.sock and 127.0.0.1:2375')
    t.ok(fs.statSync(sock).isSocket(), './portcullis.sock created in the working directory')
    t.equal((fs.statSync(sock).mode & 0o777).toString(8), '600', './portcullis.sock is owner-only (0600)')
    t.notOk(await portFree(2375), 'port 2375 is taken by the gateway')
    const warning = await gw.until('the no-credentials warning', () => gw.lines().find((l) => l.msg?.startsWith('this listener accepts no credentials')))
    t.match(warning, { level: 40, listener: 'tcp:127.0.0.1:2375' }, 'a warning: the TCP listener accepts no credentials')

    // No auth.jwt: the TCP port requires a token it cannot verify, and refuses before forwarding.
    const tcp = await call('127.0.0.1:2375', '/v1.41/version')
    t.equal(tcp.status, 401, '127.0.0.1:2375: 401 without a bearer token')
    t.match(tcp.json(), { message: /^authentication required: / }, '127.0.0.1:2375: the message says authentication is required')

    const engineThere = fs.existsSync('/var/run/docker.sock') && '/var/run/docker.sock exists here; not asserting the 502 for a missing engine'
    await t.test('502 without an engine', { skip: engineThere }, async (t) => {
      const r = await call(sock, '/v1.41/version')
      t.equal(r.status, 502, `${sock}: 502 without an engine at /var/run/docker.sock`)
      t.match(r.json(), { message: /unix:\/\/\/var\/run\/docker\.sock/ }, `${sock}: the message names the default upstream`)
      const line = await gw.until('the request line', () => gw.requests().find((l) => l.listener === `unix:${sock}`))
      t.match(line, { auth: 'listener', subject: os.userInfo().username, status: 502 }, 'the socket acts as the OS user running the gateway')
    })
    gw.child.kill('SIGHUP')
    await gw.logged('SIGHUP: no config file to reload; reloading the policy')
    t.ok(gw.running, 'SIGHUP without a config file: the policy is reloaded, still running')

    await stopsCleanly(t, gw, sock)
  })
})

t.test('serve refuses to start on a socket another process is serving', async (t) => {
  const dir = tempDir(t, 'pcc-')
  const sock = path.join(dir, 'gw.sock')
  const other = net.createServer((s) => { s.on('error', () => {}); s.end() })
  await new Promise<void>((resolve) => other.listen(sock, resolve))
  t.teardown(() => new Promise((resolve) => other.close(resolve)))
  const gw = serve(t, ['--config', writeConfig(dir)])
  const { code } = await gw.exit
  t.equal(code, 1, 'exit 1')
  t.match(gw.lines().find((l) => l.msg === 'cannot start'), { level: 60, err: { message: `${sock} is in use by a running process` } }, 'a fatal log line says why')
  t.notOk(gw.lines().some((l) => l.msg === 'portcullis started'), 'never started')
})

t.test('the engine: --upstream, else the config file\'s upstream, else DOCKER_HOST', async (t) => {
  const dir = tempDir(t, 'pcc-')
  const nowhere = `unix://${path.join(dir, 'nowhere', 'docker.sock')}`
  const withUpstream = (url: string): string => writeConfig(dir, configText(dir).replace(/^upstream: .*$/m, `upstream: ${url}`))
  const sock = path.join(dir, 'gw.sock')
  const cases: Array<[string, () => string, string[], NodeJS.ProcessEnv, string]> = [
    ['DOCKER_HOST when the file has no upstream', () => writeConfig(dir, configText(dir).replace(/^upstream: .*\n/m, '')), [], { DOCKER_HOST: engine().dockerHost }, 'DOCKER_HOST'],
    ['--upstream over the file and DOCKER_HOST', () => withUpstream(nowhere), ['--upstream', engine().dockerHost], { DOCKER_HOST: nowhere }, '--upstream'],
    ['the file over DOCKER_HOST', () => withUpstream(engine().dockerHost), [], { DOCKER_HOST: nowhere }, 'config'],
  ]
  for (const [what, file, args, env, from] of cases) {
    const gw = serve(t, ['--config', file(), ...args], { env })
    await gw.started()
    const started = gw.lines().find((l) => l.msg === 'portcullis started') as { config: { upstream: unknown } }
    t.same(started.config.upstream, { kind: 'unix', url: engine().dockerHost, from }, `${what}: the start-up line names the engine and where it came from`)
    t.equal((await call(sock, '/v1.41/_ping')).status, 200, `${what}: the engine answers through the gateway`)
    await stopsCleanly(t, gw, sock)
  }
})

t.test('an upstream that is the gateway\'s own listener is refused', async (t) => {
  const cwd = tempDir(t, 'pcc-cwd-')
  fs.cpSync(POLICIES, path.join(cwd, 'policies'), { recursive: true })
  // A shell that uses docker through the gateway has DOCKER_HOST pointing at it.
  const own = `unix://${path.join(cwd, 'portcullis.sock')}`
  const loop = serve(t, [], { cwd, env: { DOCKER_HOST: own } })
  const exit = await loop.exit
  t.equal(exit.code, 2, 'exit 2')
  t.match(loop.stderr, `  - DOCKER_HOST: ${own} is this gateway's own listener (listen[0]): it would forward every request to itself; give the engine's address with --upstream (e.g. --upstream unix:///var/run/docker.sock) or unset DOCKER_HOST\n`, 'the error says why and what to do')
  t.notOk(fs.existsSync(path.join(cwd, 'portcullis.sock')), 'nothing was opened')

  const dir = tempDir(t, 'pcc-')
  const flag = serve(t, ['--config', writeConfig(dir), '--upstream', 'unix://gw.sock'], { cwd: dir })
  t.equal((await flag.exit).code, 2, '--upstream naming its own socket (relative to the working directory): exit 2')
  t.match(flag.stderr, `  - --upstream: unix://${path.join(dir, 'gw.sock')} is this gateway's own listener (listen[0])`, 'and says so')

  const tcp = serve(t, [], { cwd, env: { DOCKER_HOST: 'tcp://localhost' } })
  t.equal((await tcp.exit).code, 2, 'DOCKER_HOST=tcp://localhost (port 2375, the default TCP listener): exit 2')
  t.match(tcp.stderr, '  - DOCKER_HOST: tcp://localhost:2375 is this gateway\'s own listener (listen[1])', 'and says so')
})

t.test('npm start -- --upstream URL reaches serve', async (t) => {
  const dir = tempDir(t, 'pcc-')
  const sock = path.join(dir, 'gw.sock')
  const file = writeConfig(dir, configText(dir).replace(/^upstream: .*$/m, `upstream: unix://${path.join(dir, 'nowhere.sock')}`))
  // --ignore-scripts skips prestart (the build: already done); the start script itself runs.
  const env: NodeJS.ProcessEnv = { ...process.env, ...USER_ENV }
  delete env.DOCKER_HOST
  const child = spawn('npm', ['--silent', '--ignore-scripts', 'start', '--', '--config', file, '--upstream', engine().dockerHost], { cwd: path.join(__dirname, '..', '..'), env, stdio: 'pipe', detached: true })
  const gw = new Serve(t, child)
  t.teardown(() => { try { process.kill(-child.pid!, 'SIGKILL') } catch {} })
  await gw.started()
  const started = gw.lines().find((l) => l.msg === 'portcullis started') as { config: { upstream: unknown } }
  t.same(started.config.upstream, { kind: 'unix', url: engine().dockerHost, from: '--upstream' }, 'the flag reached portcullis serve')
  t.equal((await call(sock, '/v1.41/_ping')).status, 200, 'and the engine answers through it')
  // npm and the gateway both get the signal; npm may be gone before the gateway has closed.
  process.kill(-child.pid!, 'SIGTERM')
  await gw.exit
  await gw.until('the gateway to remove its socket', () => !fs.existsSync(sock), 10_000).catch(() => undefined)
  t.notOk(fs.existsSync(sock), 'stopped by SIGTERM')
})

t.test('without an engine: one warning, backoff, a clear 502, and a line when it is back', async (t) => {
  const dir = tempDir(t, 'pcc-')
  const missing = path.join(dir, 'engine', 'docker.sock')
  const sock = path.join(dir, 'gw.sock')
  const gw = serve(t, ['--config', writeConfig(dir), '--upstream', `unix://${missing}`])
  await gw.started()
  const warning = await gw.logged('cannot follow the engine\'s events: ' +
    `cannot reach the Docker engine at unix://${missing}: ENOENT (no socket there: is the engine running? The gateway forwards to --upstream, else the config file's upstream, else DOCKER_HOST); ` +
    'ownership cache off, retrying (backoff up to 30 s)')
  t.match(warning, { level: 40, upstream: `unix://${missing}` }, 'one warning naming the engine and the cause')
  const answer = await call(sock, '/v1.41/version')
  t.equal(answer.status, 502, 'a request gets 502')
  t.match(answer.json(), { message: `cannot reach the Docker engine at unix://${missing}: ENOENT (no socket there` }, 'naming the engine and why')
  // Attempts at 0, 1, 3, 7 s... ; a line a second was the old behaviour.
  await sleep(5500)
  const about = gw.lines().filter((l) => /event/.test(l.msg ?? ''))
  t.equal(about.length, 1, `over ${5.5 + 0.5} s, one line about the event stream`, { lines: about })

  fs.mkdirSync(path.dirname(missing))
  fs.symlinkSync(engine().socket, missing)
  const back = await gw.logged('engine event stream connected again; ownership cache on', 20_000)
  t.match(back, { level: 30, upstream: `unix://${missing}`, attempts: Number }, 'info when it is back')
  t.equal((await call(sock, '/v1.41/_ping')).status, 200, 'requests reach the engine')
  await stopsCleanly(t, gw, sock)
})

t.test('policy check lists every denying rule with why; a layer that allows nothing is warned about', async (t) => {
  const dir = tempDir(t, 'pcc-pol-')
  fs.cpSync(POLICIES, dir, { recursive: true })
  const body = path.join(dir, 'create.json')
  fs.writeFileSync(body, JSON.stringify({ Image: 'busybox', Env: ['API_KEY=pcc-secret-value'], HostConfig: { Privileged: true, Binds: ['/etc:/x'], CapAdd: ['SYS_ADMIN'] } }))
  const check = ['policy', 'check', '--dir', dir, '--subject', 'bob', '--tenant', 'team-a', '--roles', 'tenant', 'POST', '/v1.41/containers/create', '--body', body]
  const r = await portcullis(check)
  t.equal(r.code, 1, 'a denial: exit 1')
  t.match(r.stdout, /^decision: {2}deny\nrule: {6}no-privileged\n/m, 'the decision and the rule the gateway names')
  t.match(r.stdout, '\nwhy:\n' +
    '  denied by no-privileged (base.csv): matched privileged true (HostConfig.Privileged, --privileged); allowed: privileged false or unset\n' +
    '  denied by host-binds (base.csv): matched hostPaths /etc (HostConfig.Binds/Mounts, -v/--mount); allowed: hostPaths under /srv/portcullis/team-a\n' +
    '  denied by host-binds-symfollow (base.csv): matched linkFollowingHostPaths /etc (HostConfig.Binds/Mounts, -v/--mount); allowed: linkFollowingHostPaths: none\n' +
    '  denied by capabilities (base.csv): matched capAdd SYS_ADMIN (HostConfig.CapAdd, --cap-add); allowed: capAdd only AUDIT_WRITE, ', 'every denying rule, with the field, the value and what is allowed')
  t.match(r.stdout, '\n  allowed by tenant-containers (base.csv)\n', 'and the rule that would allow it')
  t.match(r.stdout, /\nfacts: {5}privileged=true, hostPaths=\[\/etc\], linkFollowingHostPaths=\[\/etc\], capAdd=\[SYS_ADMIN\]/, 'and the facts')
  t.notMatch(r.stdout, /pcc-secret-value/, 'never an environment value')
  t.equal(r.stderr, '', 'no warning for the shipped policy')

  fs.writeFileSync(path.join(dir, 'extra.csv'), 'p, tenant, *, ContainerCreate, *, deny, no-big-memory, "r.obj.memory > 268435456"\n')
  fs.writeFileSync(path.join(dir, 'policy.yaml'), 'model: model.conf\npolicies:\n  - { file: base.csv, mode: enforce }\n  - { file: extra.csv, mode: enforce }\nrewrites: rewrites.yaml\ntenancy: tenancy.yaml\n')
  const ps = await portcullis(['policy', 'check', '--dir', dir, '--subject', 'bob', '--tenant', 'team-a', '--roles', 'tenant', 'GET', '/v1.41/containers/json'])
  t.equal(ps.code, 1, 'with a deny-only layer, docker ps is denied')
  t.match(ps.stderr, /^warning: extra\.csv has no allow rule, so it denies every request: each enforce-mode file is a layer that must itself allow a request\./, 'policy check warns, naming the file')
  t.match(ps.stdout, '  allowed by tenant-containers (base.csv)\n  denied: no allow rule in extra.csv applies to ContainerList for roles tenant (each enforce-mode file is a layer that must itself allow a request; base.csv allowed it)\n', 'and says which layer denied and why')
  const fixtures = await portcullis(['policy', 'test', dir])
  t.match(fixtures.stderr, /^warning: extra\.csv has no allow rule/, 'policy test warns too')
})

t.test('token: a bearer token signed with the config\'s secret', async (t) => {
  const dir = tempDir(t, 'pcc-')
  const secret = 'pcc-token-test-secret-0123456789abcdef'
  const file = path.join(dir, 'p.yaml')
  fs.writeFileSync(file, `auth: { jwt: { secret: "${secret}", issuer: https://idp.example, audience: [portcullis, other], claims: { subject: email, tenant: org, roles: groups } } }\n`)
  const r = await portcullis(['token', '--config', file, '--subject', 'alice@example.com', '--tenant', 'acme', '--roles', 'tenant,ci', '--ttl', '2h'])
  t.equal(r.code, 0, 'exit 0')
  const { default: jwt } = await import('jsonwebtoken')
  const claims = jwt.verify(r.stdout.trim(), secret, { algorithms: ['HS256'], issuer: 'https://idp.example', audience: 'portcullis' }) as Record<string, unknown>
  t.match(claims, { email: 'alice@example.com', org: 'acme', groups: ['tenant', 'ci'] }, 'the configured claim names')
  t.equal((claims.exp as number) - (claims.iat as number), 7200, '--ttl 2h')

  fs.writeFileSync(path.join(dir, 'none.yaml'), 'log: { level: info }\n')
  const none = await portcullis(['token', '--config', path.join(dir, 'none.yaml'), '--subject', 'a'])
  t.equal(none.code, 1, 'without auth.jwt.secret: exit 1')
  t.match(none.stderr, 'has no auth.jwt.secret; add auth: { jwt: { secret: ... } } to sign tokens', 'and says what is missing')
  const ttl = await portcullis(['token', '--config', file, '--subject', 'a', '--ttl', 'soon'])
  t.equal(ttl.code, 2, 'a bad --ttl: exit 2')
})
