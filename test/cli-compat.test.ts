/**
 * The docker CLI must not notice the gateway. For both CLIs on this machine (28.x,
 * which insists on `101 UPGRADED` for hijacked streams, and Debian's 20.10, which can
 * also build with BuildKit over an h2c `/session`), every step runs the same command
 * directly against the engine and through the gateway and compares what a user sees:
 * stdout, stderr, exit codes, and the bytes of large transfers.
 *
 * Other test files share the engine and run in parallel: everything here has a unique
 * name and a label, listings are filtered to it, and teardown removes only what this
 * file created.
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { randomBytes } from 'node:crypto'
import t, { type Test } from 'tap'
import { CLI20, CLI28, engine, run, sha256, startTestGateway, swarmEngine, uniqueName, type RunResult, type TestGateway } from './helpers/gateway'
import type { EngineInfo } from './engine/engine'

type Side = 'direct' | 'gateway'
const SIDES: readonly Side[] = ['direct', 'gateway']

interface Cli {
  readonly name: string
  readonly bin: string
  /** The builders this CLI can use here, and the environment that selects each. */
  readonly builders: ReadonlyArray<{ readonly name: string, readonly env: NodeJS.ProcessEnv }>
}

const CLIS: readonly Cli[] = [
  // No buildx plugin is installed, so 28.x falls back to the classic builder by itself.
  { name: 'cli28', bin: CLI28, builders: [{ name: 'classic', env: {} }] },
  {
    name: 'cli20',
    bin: CLI20,
    builders: [
      { name: 'classic', env: { DOCKER_BUILDKIT: '0' } },
      // POST /session upgraded to h2c, then /grpc: the hijack path no other step takes.
      { name: 'buildkit', env: { DOCKER_BUILDKIT: '1' } },
    ],
  },
]

interface Opts {
  stdin?: Buffer | string
  env?: NodeJS.ProcessEnv
  timeoutMs?: number
  /** Run the CLI under this command: `via[0] ...via[1..] docker ...args`. */
  via?: readonly string[]
}

/**
 * `node -e READER docker ...args` prints the length and sha256 of the CLI's stdout instead of
 * the bytes, pausing READ_PAUSE_MS after every chunk it reads: a slow consumer, as a pipe
 * into a busy program is.
 */
const COUNTING_READER = [process.execPath, '-e', `
  const { spawn } = require('node:child_process')
  const hash = require('node:crypto').createHash('sha256')
  const pause = Number(process.env.READ_PAUSE_MS)
  let length = 0
  const cli = spawn(process.argv[1], process.argv.slice(2), { stdio: ['ignore', 'pipe', 'inherit'] })
  cli.stdout.on('data', (chunk) => {
    hash.update(chunk)
    length += chunk.length
    if (pause > 0) { cli.stdout.pause(); setTimeout(() => cli.stdout.resume(), pause) }
  })
  cli.on('close', (code) => { process.stdout.write(length + ' ' + hash.digest('hex') + '\\n'); process.exitCode = code })
`]

/** What the steps of one CLI share. */
interface Shared {
  readonly cli: Cli
  readonly image: string
  /** `key=value` put on everything created here. */
  readonly label: string
  /** A long-running container for the exec, cp, stats and network steps. */
  readonly box: string
  readonly tmp: string
  /** Remove something at teardown, directly on the engine (`docker ...args`, errors ignored). */
  cleanup: (...args: string[]) => void
}

/** What every step gets: its test, and the CLI pointed at either side with assertions comparing the two. */
interface Ctx extends Shared {
  readonly t: Test
  docker: (side: Side, args: readonly string[], opts?: Opts) => Promise<RunResult>
  /** Run on one side, assert success, return stdout. */
  ok: (side: Side, args: readonly string[], opts?: Opts) => Promise<string>
  /** Run on both sides at once, assert both succeed; the results by side. */
  both: (args: readonly string[], opts?: Opts) => Promise<Record<Side, RunResult>>
  /** Run on both sides, assert both succeed with identical stdout and stderr; return stdout. */
  same: (args: readonly string[], opts?: Opts) => Promise<string>
  /** Run on both sides, assert both fail with the same exit code and stderr; return stderr. */
  sameFailure: (args: readonly string[]) => Promise<string>
}

const show = (args: readonly string[]): string => `docker ${args.join(' ')}`

/** Per CLI: a temporary directory, a name for the shared container, and teardown of what the steps create. */
function shared (t: Test, cli: Cli, eng: EngineInfo = engine()): Shared {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), `pcc-${cli.name}-`))
  const removals: string[][] = []
  t.teardown(async () => {
    for (const args of removals.reverse()) await run(cli.bin, args, { host: eng.dockerHost })
    fs.rmSync(tmp, { recursive: true, force: true })
  })
  return {
    cli,
    image: eng.image,
    label: `portcullis.test=cli-compat-${cli.name}`,
    box: uniqueName(`pcc-box-${cli.name}`),
    tmp,
    cleanup (...args) { removals.push(args) },
  }
}

function bind (t: Test, s: Shared, gw: TestGateway, eng: EngineInfo = engine()): Ctx {
  const hosts: Record<Side, string> = { direct: eng.dockerHost, gateway: gw.dockerHost }
  const docker = async (side: Side, args: readonly string[], { via = [], ...opts }: Opts = {}): Promise<RunResult> => {
    const [cmd, ...rest] = [...via, s.cli.bin, ...args]
    return await run(cmd, rest, { host: hosts[side], ...opts })
  }
  const succeeded = (side: Side, args: readonly string[], r: RunResult): void => {
    t.equal(r.code, 0, `${side}: ${show(args)} exits 0`, { stderr: r.stderr })
  }
  const bothRaw = async (args: readonly string[], opts?: Opts): Promise<Record<Side, RunResult>> => {
    const [direct, gateway] = await Promise.all(SIDES.map(async (side) => await docker(side, args, opts)))
    return { direct, gateway }
  }
  const both = async (args: readonly string[], opts?: Opts): Promise<Record<Side, RunResult>> => {
    const r = await bothRaw(args, opts)
    for (const side of SIDES) succeeded(side, args, r[side])
    return r
  }
  return {
    ...s,
    t,
    docker,
    both,
    async ok (side, args, opts) {
      const r = await docker(side, args, opts)
      succeeded(side, args, r)
      return r.stdout.toString()
    },
    async same (args, opts) {
      const r = await both(args, opts)
      t.equal(r.gateway.stdout.toString(), r.direct.stdout.toString(), `${show(args)}: same stdout through the gateway`)
      t.equal(r.gateway.stderr, r.direct.stderr, `${show(args)}: same stderr through the gateway`)
      return r.gateway.stdout.toString()
    },
    async sameFailure (args) {
      const r = await bothRaw(args)
      t.not(r.direct.code, 0, `direct: ${show(args)} fails`)
      t.equal(r.gateway.code, r.direct.code, `${show(args)}: same exit code through the gateway`)
      t.equal(r.gateway.stderr, r.direct.stderr, `${show(args)}: same error through the gateway`)
      return r.gateway.stderr
    },
  }
}

/** Poll `probe` until it returns true (or `ms` pass); the engine converges asynchronously. */
async function until (probe: () => Promise<boolean>, ms = 30_000): Promise<boolean> {
  for (const end = Date.now() + ms; Date.now() < end; await new Promise((resolve) => setTimeout(resolve, 200))) {
    if (await probe()) return true
  }
  return false
}

type Step = readonly [name: string, fn: (c: Ctx) => Promise<void>]

/** A build context whose payload is fresh random bytes, so no build is served from cache. */
function buildContext (dir: string): string {
  const payload = randomBytes(1 << 20)
  fs.mkdirSync(dir)
  fs.writeFileSync(path.join(dir, 'payload'), payload)
  fs.writeFileSync(path.join(dir, 'Dockerfile'), [
    `FROM ${engine().image}`,
    'COPY payload /payload',
    'RUN sha256sum /payload > /payload.sha',
    'CMD ["cat", "/payload.sha"]',
    '',
  ].join('\n'))
  return `${sha256(payload)}  /payload\n`
}

function buildSteps (cli: Cli): Step[] {
  return cli.builders.map((builder) => [`build (${builder.name}), run the image`, async (c) => {
    for (const side of SIDES) {
      const tag = uniqueName(`pcc-build-${builder.name}`)
      const expected = buildContext(path.join(c.tmp, tag))
      // The build needs no network, and stays off everyone else's.
      const out = await c.ok(side, ['build', '--network', 'none', '--label', c.label, '-t', tag, path.join(c.tmp, tag)], { env: builder.env })
      c.cleanup('rmi', '-f', tag)
      if (builder.name === 'classic') c.t.match(out, /Successfully built [0-9a-f]{12}/, `${side}: classic builder output`)
      c.t.equal(await c.ok(side, ['run', '--rm', '--label', c.label, tag]), expected, `${side}: the built image runs and saw the context`)
    }
  }])
}

/** Size of the file the 20 MB steps read: random bytes, written once into the shared container. */
const BIG = 20_000_000

/** Start the shared container, with the big file in a volume so that other containers can read it too. */
async function startBox (c: Ctx): Promise<void> {
  await c.ok('direct', ['run', '-d', '--name', c.box, '--label', c.label, '-v', '/data', c.image, 'sleep', '3600'])
  c.cleanup('rm', '-f', '-v', c.box)
  await c.ok('direct', ['exec', c.box, 'sh', '-c', `head -c ${BIG} /dev/urandom > /data/big`])
}

/**
 * 20 MB out of a hijacked stream, exec and attach, compared with the file's sha256 and with
 * the same read directly. A reader slower than the engine leaves output buffered in the
 * gateway when the engine closes the stream, and that tail must still arrive; whether anything
 * is buffered at that moment is a race, so three slow readers run at once.
 */
function bigOutputSteps (): Step[] {
  const commands: ReadonlyArray<readonly [string, (c: Ctx) => string[]]> = [
    ['exec', (c) => ['exec', c.box, 'cat', '/data/big']],
    // Not logged: the engine would also write all of it to its JSON log.
    ['run (attach)', (c) => ['run', '--rm', '--log-driver', 'none', '--volumes-from', c.box, '--label', c.label, c.image, 'cat', '/data/big']],
  ]
  const reader = (pauseMs: number): Opts => ({ via: COUNTING_READER, env: { READ_PAUSE_MS: String(pauseMs) }, timeoutMs: 120_000 })
  return commands.map(([name, args]) => [`${name}: 20 MB of output, byte for byte, fast and slow readers`, async (c) => {
    const sum = await c.ok('direct', ['exec', c.box, 'sha256sum', '/data/big'])
    const expected = `${BIG} ${sum.split(' ')[0]}\n`
    const [fast, ...slow] = await Promise.all([
      c.both(args(c), reader(0)),
      ...[1, 2, 3].map(async () => await c.ok('gateway', args(c), reader(1))),
    ])
    for (const side of SIDES) c.t.equal(fast[side].stdout.toString(), expected, `${side}: length and sha256`)
    for (const out of slow) c.t.equal(out, expected, 'gateway, slow reader: length and sha256')
  }])
}

function steps (cli: Cli): Step[] {
  return [
    ['version: same server, same API version', async (c) => {
      await c.same(['version'])
      c.t.match(await c.same(['version', '--format', '{{.Server.APIVersion}}']), /^1\.\d+\n$/)
    }],

    ['run --rm: same stdout', async (c) => {
      const text = await c.same(['run', '--rm', '--label', c.label, c.image, 'echo', 'hello from', c.cli.name])
      c.t.equal(text, `hello from ${c.cli.name}\n`)
    }],

    ['run -i --rm cat: piped stdin comes back', async (c) => {
      const input = randomBytes(256 * 1024)
      const r = await c.both(['run', '-i', '--rm', '--label', c.label, c.image, 'cat'], { stdin: input, timeoutMs: 30_000 })
      for (const side of SIDES) c.t.equal(sha256(r[side].stdout), sha256(input), `${side}: stdin echoed byte for byte`)
    }],

    ['run -d, ps shows it', async (c) => {
      const name = uniqueName('pcc-detached')
      const id = (await c.ok('gateway', ['run', '-d', '--name', name, '--label', c.label, c.image, 'sleep', '1000'])).trim()
      c.cleanup('rm', '-f', name)
      c.t.match(id, /^[0-9a-f]{64}$/, 'run -d prints the container id')
      const ps = await c.same(['ps', '--no-trunc', '--filter', `name=^${name}$`, '--format', '{{.ID}} {{.Names}} {{.Command}}'])
      c.t.equal(ps, `${id} ${name} "sleep 1000"\n`)
    }],

    ['exec -i cat: half-close ends it', async (c) => {
      // Without the client's FIN reaching the engine, cat never exits and the timeout kills the CLI.
      const r = await c.both(['exec', '-i', c.box, 'cat'], { stdin: 'x', timeoutMs: 20_000 })
      for (const side of SIDES) c.t.equal(r[side].stdout.toString(), 'x', `${side}: x comes back and exec exits`)
    }],

    ...bigOutputSteps(),

    ['logs and logs -f', async (c) => {
      const name = uniqueName('pcc-logs')
      const lines = 300
      // stderr first, then stdout: the engine copies the two streams independently, so only
      // lines written apart have a defined order in the log.
      const script = `sleep 1; for i in $(seq 1 ${lines}); do echo err $i >&2; done; sleep 0.2; for i in $(seq 1 ${lines}); do echo out $i; done`
      await c.ok('gateway', ['run', '-d', '--name', name, '--label', c.label, c.image, 'sh', '-c', script])
      c.cleanup('rm', '-f', name)
      const expect = (stream: string): string => Array.from({ length: lines }, (_, i) => `${stream} ${i + 1}\n`).join('')
      // Started while the container runs: both follow it live and end when it exits.
      const follow = await c.both(['logs', '-f', name], { timeoutMs: 30_000 })
      for (const side of SIDES) {
        c.t.equal(follow[side].stdout.toString(), expect('out'), `${side}: logs -f stdout, every line, in order`)
        c.t.equal(follow[side].stderr, expect('err'), `${side}: logs -f stderr, every line, in order`)
      }
      c.t.match(await c.same(['logs', '--timestamps', name]), /^\S+Z out 1\n/)
      c.t.equal(await c.same(['logs', '--tail', '2', name]), `out ${lines - 1}\nout ${lines}\n`)
    }],

    ['cp 10 MB in and out', async (c) => {
      const data = randomBytes(10 * 1024 * 1024)
      const local = path.join(c.tmp, 'cp-in')
      fs.writeFileSync(local, data)
      for (const side of SIDES) await c.ok(side, ['cp', local, `${c.box}:/cp-${side}`])
      const inside = await c.same(['exec', c.box, 'sha256sum', '/cp-direct', '/cp-gateway'])
      c.t.equal(inside, `${sha256(data)}  /cp-direct\n${sha256(data)}  /cp-gateway\n`, 'copied in intact both ways')
      for (const side of SIDES) {
        const out = path.join(c.tmp, `cp-out-${side}`)
        await c.ok(side, ['cp', `${c.box}:/cp-gateway`, out])
        c.t.equal(sha256(fs.readFileSync(out)), sha256(data), `${side}: copied out intact`)
      }
    }],

    ...buildSteps(cli),

    ['events --since/--until', async (c) => {
      const name = uniqueName('pcc-events')
      const since = (Date.now() / 1000 - 1).toFixed(3)
      await c.ok('gateway', ['run', '--rm', '--name', name, '--label', c.label, c.image, 'true'])
      const upTo = (Date.now() / 1000 + 1).toFixed(3)
      const events = await c.same(['events', '--since', since, '--until', upTo, '--filter', 'type=container', '--filter', `container=${name}`,
        '--format', '{{.Type}} {{.Action}} {{.Actor.Attributes.name}}'], { timeoutMs: 30_000 })
      c.t.equal(events, ['create', 'attach', 'start', 'die', 'destroy'].map((a) => `container ${a} ${name}\n`).join(''))
    }],

    ['stats --no-stream', async (c) => {
      c.t.equal(await c.same(['stats', '--no-stream', '--format', '{{.Name}} {{.PIDs}}', c.box]), `${c.box} 1\n`)
    }],

    ['save, load', async (c) => {
      const tag = `${uniqueName('pcc-save')}:v1`
      await c.ok('gateway', ['tag', c.image, tag])
      c.cleanup('rmi', tag)
      const id = await c.same(['image', 'inspect', '--format', '{{.Id}}', tag])
      const saved = await c.both(['save', tag])
      c.t.ok(saved.gateway.stdout.length > 1_000_000, 'a whole image is saved')
      c.t.equal(sha256(saved.gateway.stdout), sha256(saved.direct.stdout), 'the same archive through the gateway')
      c.t.equal(await c.ok('gateway', ['rmi', tag]), `Untagged: ${tag}\n`)
      await c.sameFailure(['image', 'inspect', tag])
      c.t.equal(await c.ok('gateway', ['load'], { stdin: saved.gateway.stdout }), `Loaded image: ${tag}\n`)
      c.t.equal(await c.same(['image', 'inspect', '--format', '{{.Id}}', tag]), id, 'loaded as the same image')
    }],

    ['volume lifecycle', async (c) => {
      const name = uniqueName('pcc-vol')
      c.t.equal(await c.ok('gateway', ['volume', 'create', '--label', c.label, name]), `${name}\n`)
      c.cleanup('volume', 'rm', '-f', name)
      c.t.equal(await c.same(['volume', 'ls', '--filter', `name=${name}`, '--format', '{{.Name}} {{.Driver}}']), `${name} local\n`)
      const labels = JSON.stringify(Object.fromEntries([c.label.split('=')]))
      c.t.equal(await c.same(['volume', 'inspect', '--format', '{{.Name}} {{json .Labels}}', name]), `${name} ${labels}\n`)
      c.t.equal(await c.ok('gateway', ['volume', 'rm', name]), `${name}\n`)
      c.t.match(await c.sameFailure(['volume', 'inspect', name]), /no such volume/i)
    }],

    ['network lifecycle', async (c) => {
      const name = uniqueName('pcc-net')
      const id = (await c.ok('gateway', ['network', 'create', '--label', c.label, name])).trim()
      c.cleanup('network', 'rm', name)
      c.t.equal(await c.same(['network', 'ls', '--no-trunc', '--filter', `name=${name}`, '--format', '{{.ID}} {{.Name}} {{.Driver}}']), `${id} ${name} bridge\n`)
      const members = ['network', 'inspect', '--format', '{{.Name}}:{{range .Containers}} {{.Name}}{{end}}', name]
      c.t.equal(await c.same(members), `${name}:\n`)
      await c.ok('gateway', ['network', 'connect', name, c.box])
      c.t.equal(await c.same(members), `${name}: ${c.box}\n`, 'connected')
      await c.ok('gateway', ['network', 'disconnect', name, c.box])
      c.t.equal(await c.same(members), `${name}:\n`, 'disconnected')
      c.t.equal(await c.ok('gateway', ['network', 'rm', name]), `${name}\n`)
      c.t.match(await c.sameFailure(['network', 'inspect', name]), new RegExp(name))
    }],
  ]
}

/**
 * Swarm is engine-wide: these run against the run's swarm-mode engine (a single-node
 * manager for the whole run, test/engine/engine.ts), and nothing here may init or leave
 * it. One CLI, one subtest.
 */
async function swarm (c: Ctx): Promise<void> {
  const service = uniqueName('pcc-svc')
  const secret = uniqueName('pcc-secret')
  c.t.teardown(async () => {
    const host = swarmEngine().dockerHost
    await run(c.cli.bin, ['service', 'rm', service], { host })
    await run(c.cli.bin, ['secret', 'rm', secret], { host })
  })
  c.t.equal(await c.same(['info', '--format', '{{.Swarm.LocalNodeState}} {{.Swarm.ControlAvailable}}']), 'active true\n')
  // Both reach the engine through the gateway, and the engine refuses them the same way.
  c.t.match(await c.sameFailure(['swarm', 'init', '--advertise-addr', '127.0.0.1']), /already part of a swarm/)
  c.t.match(await c.sameFailure(['swarm', 'leave']), /last manager/)

  const serviceId = (await c.ok('gateway', ['service', 'create', '--detach', '--no-resolve-image', '--name', service, '--label', c.label, c.image, 'sleep', '1000'])).trim()
  c.t.match(serviceId, /^[0-9a-z]{25}$/, 'service create prints the service id')
  c.t.equal(await c.same(['service', 'ls', '--filter', `name=${service}`, '--format', '{{.ID}} {{.Name}} {{.Mode}}']), `${serviceId.slice(0, 12)} ${service} replicated\n`)
  const tasks = ['service', 'ps', '--filter', 'desired-state=running', '--format', '{{.Name}} {{.DesiredState}} {{.CurrentState}}', service]
  const running = await until(async () => /^\S+ Running Running/.test((await c.docker('direct', tasks)).stdout.toString()))
  c.t.ok(running, 'the task runs')
  c.t.match(await c.same(tasks), new RegExp(`^${service}\\.1 Running Running`))

  const secretId = (await c.ok('gateway', ['secret', 'create', '--label', c.label, secret, '-'], { stdin: 'not for the logs' })).trim()
  c.t.match(secretId, /^[0-9a-z]{25}$/, 'secret create prints the secret id')
  c.t.equal(await c.same(['secret', 'ls', '--filter', `name=${secret}`, '--format', '{{.ID}} {{.Name}}']), `${secretId} ${secret}\n`)

  c.t.equal(await c.ok('gateway', ['service', 'rm', service]), `${service}\n`)
  c.t.equal(await c.ok('gateway', ['secret', 'rm', secret]), `${secret}\n`)
  c.t.equal(await c.same(['secret', 'ls', '--filter', `name=${secret}`, '--format', '{{.Name}}']), '')
  c.t.equal(await c.same(['info', '--format', '{{.Swarm.LocalNodeState}}']), 'active\n', 'still a swarm manager')
}

let gw: TestGateway
t.before(async () => { gw = await startTestGateway() })
t.teardown(async () => { await gw.close() })

for (const cli of CLIS) {
  t.test(cli.name, async (t) => {
    const s = shared(t, cli)
    await startBox(bind(t, s, gw))
    for (const [name, fn] of steps(cli)) await t.test(name, async (t) => { await fn(bind(t, s, gw)) })
  })
}

t.test('swarm (cli28, swarm-mode engine)', async (t) => {
  const swarmGw = await startTestGateway('', `unix://${swarmEngine().socket}`)
  t.teardown(async () => { await swarmGw.close() })
  await swarm(bind(t, shared(t, CLIS[0], swarmEngine()), swarmGw, swarmEngine()))
})

/** On a plain engine (not a swarm manager) the swarm commands fail through the gateway as they do directly. */
async function noSwarm (c: Ctx): Promise<void> {
  c.t.equal(await c.same(['info', '--format', '{{.Swarm.LocalNodeState}} {{.Swarm.ControlAvailable}}']), 'inactive false\n')
  for (const args of [['service', 'ls'], ['secret', 'ls'], ['config', 'ls'], ['node', 'ls'], ['service', 'ps', 'nothing-here']]) {
    c.t.match(await c.sameFailure(args), /not a swarm manager/, `docker ${args.join(' ')}`)
  }
}

for (const cli of CLIS) {
  t.test(`not a swarm manager (${cli.name}, plain engine)`, async (t) => { await noSwarm(bind(t, shared(t, cli), gw)) })
}
