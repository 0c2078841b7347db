// Client libraries through the gateway: Debian's docker-py (python3-docker 5.0.3),
// dockerode and docker-compose 1.29 each do the same things once on the engine directly
// and once through the gateway (unix socket and TCP), and get the same answers.
// Everything is named after one run-wide prefix and removed by that prefix afterwards;
// other test files share the engine, so nothing here lists or removes by anything else.
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { PassThrough } from 'node:stream'
import Docker from 'dockerode'
import t from 'tap'
import { engine, run, startTestGateway, uniqueName, type RunResult, type TestGateway } from './helpers/gateway'

/** Debian's python, the only one that imports python3-docker 5.0.3 (PATH's pyenv python has another docker). */
const SYSTEM_PYTHON = '/usr/bin/python3'
const COMPOSE = '/usr/bin/docker-compose'
const DOCKER_PY_SCRIPT = path.resolve(__dirname, '../../test/fixtures/docker_py_compat.py')
const PREFIX = uniqueName('pcsdk')

/** One way to reach the engine: its own socket, or the gateway's unix socket or TCP port. */
interface Side {
  readonly label: string
  /** DOCKER_HOST for command-line clients. */
  readonly host: string
  readonly docker: Docker
  /** Prefix of every object this side creates; the same length on every side, so outputs line up. */
  readonly prefix: string
}

let gw: TestGateway
let direct: Docker
let sides: Side[] = []

t.before(async () => {
  gw = await startTestGateway()
  direct = new Docker({ socketPath: engine().socket })
  const [host, port] = gw.tcp.split(':')
  sides = [
    { label: 'direct', host: engine().dockerHost, docker: direct, prefix: `${PREFIX}-d` },
    { label: 'gateway unix', host: gw.dockerHost, docker: new Docker({ socketPath: gw.socket }), prefix: `${PREFIX}-u` },
    { label: 'gateway tcp', host: `tcp://${gw.tcp}`, docker: new Docker({ host, port: Number(port), protocol: 'http' }), prefix: `${PREFIX}-t` },
  ]
})

t.teardown(async () => {
  try {
    await removeEverythingNamed(PREFIX)
  } finally {
    await gw?.close() // even when the engine is gone: an open listener would keep the process alive
  }
})

/** Remove this file's containers, networks and volumes (all named PREFIX…) on the engine directly. */
async function removeEverythingNamed (prefix: string): Promise<void> {
  if (!direct) return
  const ignore = (): void => undefined
  for (const c of await direct.listContainers({ all: true, filters: { name: [prefix] } })) {
    await direct.getContainer(c.Id).remove({ force: true, v: true }).catch(ignore)
  }
  for (const n of await direct.listNetworks({ filters: { name: [prefix] } })) {
    await direct.getNetwork(n.Id).remove().catch(ignore)
  }
  const { Volumes: volumes } = await direct.listVolumes({ filters: { name: [prefix] } })
  for (const v of volumes ?? []) await direct.getVolume(v.Name).remove({ force: true }).catch(ignore)
}

/**
 * A test `name` that does `action` every way at once (each way uses its own objects),
 * checks each way's result with `expect` in a subtest, and checks that every gateway
 * result equals the direct one.
 */
function eachWay<T> (name: string, action: (side: Side) => Promise<T>, expect: (t: tap.Test, result: T) => void): void {
  t.test(name, async (t) => {
    // settled, not all: a way that fails must not leave the others running into the teardown
    const results = await Promise.allSettled(sides.map(action))
    const [first] = results
    for (const [i, side] of sides.entries()) {
      await t.test(side.label, async (t) => {
        const result = results[i]
        if (result.status === 'rejected') throw result.reason
        expect(t, result.value)
        if (i > 0 && first.status === 'fulfilled') t.same(result.value, first.value, 'same result as directly on the engine')
      })
    }
  })
}

/** The streams of a multiplexed (non-TTY) attach/logs body, checking every 8-byte frame header. */
function demux (body: Buffer): { stdout: string, stderr: string } {
  const out: Record<number, string> = { 1: '', 2: '' }
  let at = 0
  while (at < body.length) {
    if (body.length - at < 8) throw new Error(`truncated frame header at byte ${at} of ${body.length}`)
    const stream = body[at]
    if (stream !== 1 && stream !== 2) throw new Error(`bad stream type ${stream} at byte ${at}`)
    if (body[at + 1] !== 0 || body[at + 2] !== 0 || body[at + 3] !== 0) throw new Error(`non-zero padding at byte ${at}`)
    const size = body.readUInt32BE(at + 4)
    if (at + 8 + size > body.length) throw new Error(`frame at byte ${at} claims ${size} bytes, ${body.length - at - 8} left`)
    out[stream] += body.subarray(at + 8, at + 8 + size).toString()
    at += 8 + size
  }
  return { stdout: out[1], stderr: out[2] }
}

/** Everything a stream gives until it ends; fails if it has not ended within `ms`. */
async function untilEnd (stream: NodeJS.ReadableStream, ms = 30_000): Promise<Buffer> {
  const chunks: Buffer[] = []
  return await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`stream did not end within ${ms} ms; got ${JSON.stringify(Buffer.concat(chunks).toString())}`)), ms)
    const done = (): void => { clearTimeout(timer); resolve(Buffer.concat(chunks)) }
    stream.on('data', (b: Buffer | string) => chunks.push(Buffer.from(b)))
    stream.once('end', done)
    stream.once('close', done)
    stream.once('error', (err) => { clearTimeout(timer); reject(err) })
  })
}

async function isGone (container: Docker.Container): Promise<boolean> {
  return await container.inspect().then(() => false, (err: { statusCode?: number }) => err.statusCode === 404)
}

/** Text of a client's output with this side's prefix replaced, so the three ways compare equal. */
function normalize (side: Side, text: Buffer | string): string {
  return text.toString().split(side.prefix).join('PFX').replace(/\r/g, '')
}

/** Lines of `text`, whitespace runs collapsed, empty lines dropped, sorted (clients that work in parallel print in any order). */
function sortedLines (text: string): string[] {
  return text.split('\n').map((l) => l.trim().replace(/\s+/g, ' ')).filter((l) => l !== '').sort()
}

eachWay('docker-py (python3-docker 5.0.3)', async (side) => {
  const r = await run(SYSTEM_PYTHON, [DOCKER_PY_SCRIPT, engine().image, `${side.prefix}-py`], { host: side.host, timeoutMs: 180_000 })
  if (r.code !== 0) throw new Error(`docker-py via ${side.label} exited ${r.code}: ${r.stderr}`)
  return JSON.parse(r.stdout.toString()) as Record<string, unknown>
}, (t, r) => {
  t.equal(r.ping, true, 'ping')
  t.match(r.api_version, /^1\.\d+$/, 'version')
  t.equal(r.run, 'run-out\n', 'containers.run returns the stdout')
  t.equal(r.run_stderr, 'only-err\n', 'containers.run(stdout=False, stderr=True) returns the stderr')
  t.equal(r.run_removed, true, 'containers.run(remove=True) removes the container')
  t.same(r.run_error, { exit_status: 3, stderr: 'failing\n' }, 'containers.run of a failing command raises ContainerError')
  t.same(r.exec, { exit_code: 7, output: 'exec-out\n' }, 'exec_run output and exit code')
  t.same(r.exec_demux, { exit_code: 0, stdout: 'to-out\n', stderr: 'to-err\n' }, 'exec_run(demux=True)')
  t.same(r.exec_env, { exit_code: 0, output: 'hi there\n/tmp\n' }, 'exec_run with environment and workdir')
  t.equal(r.exec_stream, 'line1\nline2\nline3\n', 'exec_run(stream=True)')
  t.equal(r.exec_status, 'running', 'the container runs on after exec')
  t.equal(r.logs_wait, 0, 'wait')
  t.same(r.logs, {
    stdout: 'l1\nl2\nl3\n',
    stderr: 'e1\n',
    both_sorted: ['e1', 'l1', 'l2', 'l3'],
    tail1: 'l3\n',
    streamed: 'l1\nl2\nl3\n',
  }, 'logs: stdout, stderr, both, tail, stream')
  t.same(r.attach, { stdout: 'hello\n', stderr: 'oops\n' }, 'attach_socket before start reads the output frames until EOF')
  t.equal(r.attach_wait, 0, 'attached container exits 0')
  t.equal(r.stdin_once, true, 'create(stdin_open=True) sets StdinOnce')
  t.same(r.attach_stdin, { stdout: 'from stdin\nsecond line\ndone\n' }, 'attach_socket with stdin: echo, then EOF after the half-close')
  t.equal(r.attach_stdin_wait, 0, 'stdin container exits 0')
  t.same(r.leftovers, [], 'no containers left')
})

eachWay('dockerode', async (side) => {
  const d = side.docker
  const image = engine().image
  const name = `${side.prefix}-node`

  // attach with hijack: stdin in, half-close, output back, stream ends when the container exits
  const cat = await d.createContainer({
    name: `${name}-cat`,
    Image: image,
    Cmd: ['sh', '-c', 'cat; echo stdin-closed >&2'],
    OpenStdin: true,
    StdinOnce: true,
    AttachStdin: true,
    AttachStdout: true,
    AttachStderr: true,
  })
  const hijacked = await cat.attach({ stream: true, stdin: true, stdout: true, stderr: true, hijack: true })
  const hijackedBody = untilEnd(hijacked)
  await cat.start()
  hijacked.write('hello stdin\n')
  hijacked.end('second line\n')
  const attachStdin = demux(await hijackedBody)
  const catWait = await cat.wait()
  const catLogs = demux(await cat.logs({ stdout: true, stderr: true }))
  const catInspect = await cat.inspect()
  await cat.remove()
  const catGone = await isGone(cat)

  // attach without hijack: output only, demultiplexed by docker-modem
  const sh = await d.createContainer({ name: `${name}-sh`, Image: image, Cmd: ['sh', '-c', 'sleep 1; echo out-line; sleep 1; echo err-line >&2; exit 3'] })
  const plain = await sh.attach({ stream: true, stdout: true, stderr: true })
  const stdout = new PassThrough()
  const stderr = new PassThrough()
  d.modem.demuxStream(plain, stdout, stderr)
  const [outText, errText] = [untilEnd(stdout), untilEnd(stderr)]
  plain.on('end', () => { stdout.end(); stderr.end() })
  await sh.start()
  const attachPlain = { stdout: (await outText).toString(), stderr: (await errText).toString() }
  const shWait = await sh.wait()
  const shLogs = {
    stdout: demux(await sh.logs({ stdout: true })).stdout,
    stderr: demux(await sh.logs({ stderr: true })).stderr,
    tail: demux(await sh.logs({ stdout: true, stderr: true, tail: 1 })),
  }
  const listed = (await d.listContainers({ all: true, filters: { name: [`${name}-sh`] } })).map((c) => ({ names: c.Names.map((n) => normalize(side, n)), state: c.State, image: c.Image }))
  await sh.remove({ force: true })

  // exec with hijacked stdin on a running container
  const sleeper = await d.createContainer({ name: `${name}-exec`, Image: image, Cmd: ['sleep', '1000'] })
  await sleeper.start()
  const exec = await sleeper.exec({ Cmd: ['sh', '-c', 'cat; exit 5'], AttachStdin: true, AttachStdout: true, AttachStderr: true })
  const execStream = await exec.start({ hijack: true, stdin: true })
  const execBody = untilEnd(execStream)
  execStream.end('exec input\n')
  const execOut = demux(await execBody)
  let execInspect = await exec.inspect()
  for (let i = 0; execInspect.Running && i < 50; i++) {
    await new Promise((resolve) => setTimeout(resolve, 100))
    execInspect = await exec.inspect()
  }
  await sleeper.remove({ force: true })

  return {
    attachStdin,
    catWait: catWait.StatusCode,
    catLogs,
    catState: { status: catInspect.State.Status, exitCode: catInspect.State.ExitCode, name: normalize(side, catInspect.Name) },
    catGone,
    attachPlain,
    shWait: shWait.StatusCode,
    shLogs,
    listed,
    execOut,
    execExit: { running: execInspect.Running, exitCode: execInspect.ExitCode },
    sleeperGone: await isGone(sleeper),
  }
}, (t, r) => {
  t.same(r.attachStdin, { stdout: 'hello stdin\nsecond line\n', stderr: 'stdin-closed\n' }, 'hijacked attach: stdin echoed by cat, EOF reaches it, stream ends')
  t.equal(r.catWait, 0, 'wait after hijacked attach')
  t.same(r.catLogs, r.attachStdin, 'logs hold what attach saw')
  t.same(r.catState, { status: 'exited', exitCode: 0, name: '/PFX-node-cat' }, 'inspect')
  t.equal(r.catGone, true, 'remove')
  t.same(r.attachPlain, { stdout: 'out-line\n', stderr: 'err-line\n' }, 'attach without hijack: output demultiplexed by modem.demuxStream')
  t.equal(r.shWait, 3, 'wait returns the exit code')
  t.same(r.shLogs, { stdout: 'out-line\n', stderr: 'err-line\n', tail: { stdout: '', stderr: 'err-line\n' } }, 'logs per stream and tail')
  t.same(r.listed, [{ names: ['/PFX-node-sh'], state: 'exited', image: engine().image }], 'listContainers filtered by name')
  t.same(r.execOut, { stdout: 'exec input\n', stderr: '' }, 'exec start hijacked with stdin')
  t.same(r.execExit, { running: false, exitCode: 5 }, 'exec inspect exit code')
  t.equal(r.sleeperGone, true, 'forced remove of a running container')
})

function composeFile (): string {
  return `services:
  web:
    image: ${engine().image}
    command: sleep 1000
    stop_grace_period: 1s
    volumes: [data:/data]
    networks: [net]
  worker:
    image: ${engine().image}
    command: sleep 1000
    stop_grace_period: 1s
    networks: [net]
volumes:
  data: {}
networks:
  net: {}
`
}

eachWay('docker-compose 1.29', async (side) => {
  const project = `${side.prefix}-compose`
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pcsdk-compose-'))
  fs.writeFileSync(path.join(dir, 'docker-compose.yml'), composeFile())
  const compose = async (args: string[], env: NodeJS.ProcessEnv = {}): Promise<RunResult> =>
    await run(COMPOSE, ['--ansi', 'never', '-p', project, ...args], { host: side.host, cwd: dir, env, timeoutMs: 180_000 })
  const show = (r: RunResult): { code: number | null, stdout: string, stderr: string[] } =>
    ({ code: r.code, stdout: normalize(side, r.stdout), stderr: sortedLines(normalize(side, r.stderr)) })
  try {
    const up = show(await compose(['up', '-d']))
    const ps = show(await compose(['ps']))
    const services = show(await compose(['ps', '--services']))
    const execCli = show(await compose(['exec', '-T', 'web', 'echo', 'hi']))
    const execPy = show(await compose(['exec', '-T', 'worker', 'sh', '-c', 'sleep 0.3; echo from-docker-py; exit 4'], { COMPOSE_INTERACTIVE_NO_CLI: '1' }))
    const volumeWrite = show(await compose(['exec', '-T', 'web', 'sh', '-c', 'echo kept > /data/f && cat /data/f']))
    const down = show(await compose(['down', '-v']))
    // what is left, asked of the engine directly whichever way compose went
    const containers = await direct.listContainers({ all: true, filters: { label: [`com.docker.compose.project=${project}`] } })
    const networks = await direct.listNetworks({ filters: { name: [project] } })
    const volumes = (await direct.listVolumes({ filters: { name: [project] } })).Volumes ?? []
    return {
      up,
      ps: { ...ps, stdout: sortedLines(ps.stdout) },
      services: { ...services, stdout: sortedLines(services.stdout) },
      execCli,
      execPy,
      volumeWrite,
      down,
      left: { containers: containers.length, networks: networks.map((n) => n.Name), volumes: volumes.map((v) => v.Name) },
    }
  } finally {
    await compose(['down', '-v', '--timeout', '1'])
    fs.rmSync(dir, { recursive: true, force: true })
  }
}, (t, r) => {
  t.same(r.up, {
    code: 0,
    stdout: '',
    // The shared engine is a plain engine (not a swarm manager): compose has no swarm warning.
    stderr: [
      'Creating PFX-compose_web_1 ...', 'Creating PFX-compose_web_1 ... done',
      'Creating PFX-compose_worker_1 ...', 'Creating PFX-compose_worker_1 ... done',
      'Creating network "PFX-compose_net" with the default driver',
      'Creating volume "PFX-compose_data" with default driver',
    ],
  }, 'up -d creates the network, the volume and both containers')
  t.same({ ...r.ps, stdout: r.ps.stdout.filter((l) => !/^-+$/.test(l)) }, {
    code: 0,
    stdout: ['Name Command State Ports', 'PFX-compose_web_1 sleep 1000 Up', 'PFX-compose_worker_1 sleep 1000 Up'],
    stderr: [],
  }, 'ps shows both services Up')
  t.same(r.services, { code: 0, stdout: ['web', 'worker'], stderr: [] }, 'ps --services')
  t.same(r.execCli, { code: 0, stdout: 'hi\n', stderr: [] }, 'exec -T web echo hi (through the docker CLI)')
  t.same(r.execPy, { code: 4, stdout: 'from-docker-py\n', stderr: [] }, 'exec -T with COMPOSE_INTERACTIVE_NO_CLI=1 (through docker-py): output and exit code')
  t.same(r.volumeWrite, { code: 0, stdout: 'kept\n', stderr: [] }, 'the named volume is mounted and writable')
  t.same(r.down, {
    code: 0,
    stdout: '',
    stderr: [
      'Removing PFX-compose_web_1 ...', 'Removing PFX-compose_web_1 ... done',
      'Removing PFX-compose_worker_1 ...', 'Removing PFX-compose_worker_1 ... done',
      'Removing network PFX-compose_net',
      'Removing volume PFX-compose_data',
      'Stopping PFX-compose_web_1 ...', 'Stopping PFX-compose_web_1 ... done',
      'Stopping PFX-compose_worker_1 ...', 'Stopping PFX-compose_worker_1 ... done',
    ],
  }, 'down -v stops and removes the containers, the network and the volume')
  t.same(r.left, { containers: 0, networks: [], volumes: [] }, 'down -v leaves no container, network or volume')
})
