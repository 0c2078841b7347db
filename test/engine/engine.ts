// Private Docker engine for the real-engine tests.
//
// startEngine() runs a dockerd of its own (data, exec root, socket, logs and its
// own containerd all under one directory), detached so that it outlives the
// process that started it, and loads a busybox test image without any registry.
// The shared test engine is a plain engine, as most users run it: not a swarm
// manager. Tests of swarm objects (services, tasks, secrets, configs, nodes) opt
// in to a second engine that startEngine(dir, { swarm: true }) makes a
// single-node swarm manager. stopEngine() tears all of it down again.
import { spawn, spawnSync } from 'node:child_process'
import * as fs from 'node:fs'
import * as http from 'node:http'
import * as path from 'node:path'

export interface EngineInfo {
  dir: string;
  socket: string;
  dockerHost: string;
  pid: number;
  image: string;
  /**
   * A tmpfs mounted `nosymfollow` (in the host's mount namespace before the engine's own
   * was made, so both see it): where tests put tenants' bind directories (issue 18,
   * class 8: the shipped policy binds only from such mounts).
   */
  binds: string;
}

export const TEST_IMAGE = 'portcullis-test/busybox:latest'

/** Repository root: the nearest directory above this file holding package.json. */
export const REPO_ROOT = findRepoRoot(__dirname)
export const STATE_FILE = path.join(REPO_ROOT, '.engine', 'state.json')
/** The swarm-mode engine, for the tests that opt in to swarm mode. */
export const SWARM_STATE_FILE = path.join(REPO_ROOT, '.engine', 'swarm.json')

/** Which of the run's two engines: the plain default one, or the swarm manager. */
export type EngineRole = 'plain' | 'swarm'
const stateFile = (role: EngineRole): string => (role === 'swarm' ? SWARM_STATE_FILE : STATE_FILE)

const BUSYBOX = '/bin/busybox' // the static one, from busybox-static
const DOCKER_INIT = '/usr/bin/docker-init' // tini, shipped by docker.io
const START_TIMEOUT_MS = 60_000
const SWARM_TIMEOUT_MS = 30_000
// A single-node swarm on loopback: the engine has a network namespace of its own,
// so nothing else can reach (or collide with) its port 2377.
const SWARM_INIT = { ListenAddr: '127.0.0.1:2377', AdvertiseAddr: '127.0.0.1' }
const TERM_TIMEOUT_MS = 20_000
const KILL_TIMEOUT_MS = 5_000
// Unix socket paths must fit in sun_path (108 bytes with the NUL); the longest
// socket below an engine dir is containerd's ttrpc one.
const LONGEST_SOCKET = 'exec/containerd/containerd.sock.ttrpc'
const SOCKET_PATH_MAX = 107
// comm names of the processes an engine consists of ("containerd-shim" is the
// 15-character truncation of containerd-shim-runc-v2).
const ENGINE_PROCESS = /^(dockerd|containerd|containerd-shim.*|docker-init|docker-proxy|runc)$/

function findRepoRoot (from: string): string {
  for (let dir = from; ; dir = path.dirname(dir)) {
    if (fs.existsSync(path.join(dir, 'package.json'))) return dir
    if (path.dirname(dir) === dir) throw new Error(`no package.json above ${from}`)
  }
}

/** Whether an engine in dir keeps all its unix socket paths within the kernel limit. */
export function fitsSocketLimit (dir: string): boolean {
  return Buffer.byteLength(path.join(path.resolve(dir), LONGEST_SOCKET)) <= SOCKET_PATH_MAX
}

export function engineInfo (dir: string, pid: number): EngineInfo {
  const socket = path.join(dir, 'docker.sock')
  return { dir, socket, dockerHost: `unix://${socket}`, pid, image: TEST_IMAGE, binds: path.join(dir, 'binds') }
}

/** Path of the docker CLI, preferring docker.io's own (same version as the daemon). */
export function dockerCli (): string {
  const cli = ['/usr/bin/docker', '/usr/local/bin/docker'].find((p) => fs.existsSync(p))
  if (!cli) throw new Error('docker CLI not found in /usr/bin or /usr/local/bin')
  return cli
}

/** Environment for running the docker CLI against the engine. */
export function dockerEnv (info: EngineInfo): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, DOCKER_HOST: info.dockerHost }
  for (const k of ['DOCKER_CONTEXT', 'DOCKER_TLS_VERIFY', 'DOCKER_CERT_PATH']) delete env[k]
  return env
}

// The state file also records which process owns the engine (the tap runner
// or `npm run engine`), so that a second run in the same checkout refuses to
// start instead of stopping an engine that is still in use.
interface State extends EngineInfo {
  owner?: { pid: number; start: string };
}

function readStateFile (role: EngineRole = 'plain'): State | undefined {
  const file = stateFile(role)
  let text: string
  try {
    text = fs.readFileSync(file, 'utf8')
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined
    throw err
  }
  const s = JSON.parse(text) as Partial<State>
  if (typeof s.dir !== 'string' || typeof s.pid !== 'number') {
    throw new Error(`${file} is not a valid engine state: ${text}`)
  }
  return { ...engineInfo(s.dir, s.pid), owner: s.owner }
}

/** The run's plain engine (the default), or with 'swarm' its swarm-mode engine. */
export function readState (role: EngineRole = 'plain'): EngineInfo {
  const state = readStateFile(role)
  if (!state) {
    throw new Error(
      `No ${role} test engine: ${stateFile(role)} does not exist. Run the tests through tap ` +
        '(its before script starts the engine) or start one with `npm run engine`.'
    )
  }
  return engineInfo(state.dir, state.pid)
}

/** Records info as the current engine of a role, owned by process ownerPid. */
export function writeState (info: EngineInfo, ownerPid: number, role: EngineRole = 'plain'): void {
  const file = stateFile(role)
  const state: State = { ...info, owner: { pid: ownerPid, start: readProc(ownerPid)?.start ?? '' } }
  fs.mkdirSync(path.dirname(file), { recursive: true })
  const tmp = `${file}.${process.pid}`
  fs.writeFileSync(tmp, JSON.stringify(state, null, 2) + '\n')
  fs.renameSync(tmp, file)
}

export function removeState (role: EngineRole = 'plain'): void {
  fs.rmSync(stateFile(role), { force: true })
}

/** Pid of the still running owner of the engine in the state file, if any. */
export function stateOwner (role: EngineRole = 'plain'): number | undefined {
  const owner = readStateFile(role)?.owner
  return owner && readProc(owner.pid)?.start === owner.start ? owner.pid : undefined
}

/** Whether info.pid is still the (non-zombie) dockerd of info.dir. */
export function isEngineAlive (info: EngineInfo): boolean {
  const proc = readProc(info.pid)
  return proc !== undefined && proc.comm === 'dockerd' && mentions(proc.args, info.dir)
}

/**
 * Stops an engine left behind by an earlier run, as recorded in the state file
 * or found in dir; returns whether there was anything to clean up. Throws if
 * the engine in the state file is owned by a process that is still running.
 */
export async function stopStaleEngine (dir?: string): Promise<boolean> {
  let stale = false
  for (const role of ['plain', 'swarm'] as const) {
    const state = readStateFile(role)
    if (!state) continue
    const owner = stateOwner(role)
    if (owner !== undefined) {
      throw new Error(
        `the engine in ${state.dir} (${stateFile(role)}) is in use by pid ${owner}, ` +
          'a tap run or `npm run engine` in this checkout; stop that first'
      )
    }
    await stopEngine(state)
    removeState(role)
    stale = true
  }
  if (dir && fs.existsSync(dir)) {
    let pid = 0
    try {
      pid = Number(fs.readFileSync(path.join(dir, 'dockerd.pid'), 'utf8').trim())
    } catch {
      // no pidfile: dockerd is not running, or killLeftovers will find it
    }
    await stopEngine(engineInfo(path.resolve(dir), pid))
    stale = true
  }
  return stale
}

/** Options of startEngine; the tests use none. */
export interface EngineOptions {
  /** Make the engine a single-node swarm manager (the default test engine is a plain one). */
  swarm?: boolean;
  /**
   * Also listen on tcp://127.0.0.1:PORT (plain HTTP, no TLS). dockerd runs in a network
   * namespace of its own, so the port is reachable only from inside it: run the client
   * with `nsenter --net=/proc/<info.pid>/ns/net` (the benchmark does, for wrk).
   */
  tcpPort?: number;
  /**
   * Start dockerd with --userns-remap: containers run in a user namespace where root is
   * host uid 300000 and up. The subordinate ranges are written to /etc/subuid and
   * /etc/subgid of an overlay over /etc in dockerd's own mount namespace: the host's
   * files are not touched. Mapped to Debian's `nobody:nogroup` (the ranges are looked up by the user's name).
   */
  usernsRemap?: boolean;
  /** Start dockerd with --no-new-privileges: every container it creates, a build's step containers too, gets no-new-privileges. */
  noNewPrivileges?: boolean;
  /**
   * Start dockerd with its firewall on (no --iptables=false): it writes its chains
   * (DOCKER-ISOLATION-STAGE-1/2) into its own network namespace's iptables, never the
   * host's. Networks are then isolated from each other as on a production engine.
   */
  iptables?: boolean;
  /** dockerd's default-address-pools (default: 10.64.0.0/12 in /24s, room for 4,096 tenant networks). */
  addressPools?: ReadonlyArray<{ base: string, size: number }>;
}

/** The first host uid and gid of a remapping engine's containers (usernsRemap). */
export const REMAP_BASE = 300000

export async function startEngine (dir: string, options: EngineOptions = {}): Promise<EngineInfo> {
  if (process.getuid?.() !== 0) throw new Error('the test engine must be started as root')
  dir = path.resolve(dir)
  if (!fitsSocketLimit(dir)) {
    throw new Error(`${dir} is too long for unix socket paths below it; use something like /tmp/pcx-XXXX`)
  }
  await ensurePackages()
  const dockerd = findExecutable('dockerd')
  if (!dockerd) throw new Error('dockerd not found after installing docker.io')

  fs.mkdirSync(dir, { recursive: true })
  const info = engineInfo(dir, 0)
  try {
    mountBinds(info.binds)
    const failure = spawnDockerd(info, dockerd, options)
    await waitForPing(info.socket, failure)
    info.pid = Number(fs.readFileSync(path.join(dir, 'dockerd.pid'), 'utf8').trim())
    await ensureImage(info)
    if (options.swarm === true) await ensureSwarm(info)
    return info
  } catch (err) {
    const tail = logTail(path.join(dir, 'dockerd.log'), 40)
    await stopEngine(info).catch((e) => console.error(`# cleanup after failed start: ${(e as Error).message}`))
    throw new Error(`${(err as Error).message}\n--- last lines of ${dir}/dockerd.log ---\n${tail}`)
  }
}

/** A nosymfollow tmpfs at `dir` (world-traversable: tenants' uids reach their directories in it). */
function mountBinds (dir: string): void {
  fs.mkdirSync(dir, { recursive: true })
  if (!spawnSyncOk('mount', ['-t', 'tmpfs', '-o', 'nosymfollow,mode=0755,size=256m', 'pcx-binds', dir])) {
    throw new Error(`cannot mount a nosymfollow tmpfs at ${dir} (Linux 5.10+ and util-linux 2.36+ needed)`)
  }
}

/** Shell lines giving dockerd's mount namespace an /etc with subordinate ids for `nobody` (usernsRemap). */
function remapSetup (dir: string): string[] {
  const upper = path.join(dir, 'etc-upper')
  const work = path.join(dir, 'etc-work')
  fs.mkdirSync(upper, { recursive: true })
  fs.mkdirSync(work, { recursive: true })
  // dockerd refuses a data root the remapped root cannot traverse (a mkdtemp directory is 0700).
  fs.chmodSync(dir, 0o711)
  return [
    `${BUSYBOX} mount -t overlay pcx-etc -o lowerdir=/etc,upperdir=${upper},workdir=${work} /etc`,
    `echo nobody:${REMAP_BASE}:65536 > /etc/subuid`,
    `echo nobody:${REMAP_BASE}:65536 > /etc/subgid`,
  ]
}

/** Starts dockerd detached; returns a function telling whether it has died meanwhile. */
function spawnDockerd (info: EngineInfo, dockerd: string, options: EngineOptions): () => string | undefined {
  const { dir } = info
  // Own config file, so /etc/docker/daemon.json is not read, and the daemon key
  // (which also gives the engine its ID) is not shared via /etc/docker/key.json.
  const config = path.join(dir, 'daemon.json')
  // Small address pools, as the README asks of operators: every tenant gets a bridge network of its own (tenancy.yaml networks.tenantDefault).
  fs.writeFileSync(config, JSON.stringify({ 'deprecated-key-path': path.join(dir, 'key.json'), 'default-address-pools': options.addressPools ?? [{ base: '10.64.0.0/12', size: 24 }] }) + '\n')
  const dockerdArgs = [
    `--host=${info.dockerHost}`,
    `--data-root=${path.join(dir, 'data')}`,
    `--exec-root=${path.join(dir, 'exec')}`,
    `--pidfile=${path.join(dir, 'dockerd.pid')}`,
    `--config-file=${config}`,
    ...(options.iptables === true ? [] : ['--iptables=false']),
  ]
  if (options.tcpPort !== undefined) dockerdArgs.push(`--host=tcp://127.0.0.1:${options.tcpPort}`)
  if (options.usernsRemap === true) dockerdArgs.push('--userns-remap=nobody:nogroup')
  if (options.noNewPrivileges === true) dockerdArgs.push('--no-new-privileges')
  // dockerd gets its own mount and network namespaces: docker0, user networks,
  // published ports and all overlay/netns mounts stay private to this engine
  // (another dockerd on the host would otherwise share docker0 and its subnet)
  // and vanish with it; published ports are only reachable from inside (e.g.
  // from a --network host container), not from the host.
  // dockerd uses the system containerd if /run/containerd/containerd.sock
  // exists; covering /run/containerd with a tmpfs makes it start its own under
  // exec-root instead, shim sockets included.
  // docker-init (tini) as subreaper reaps the daemonised shims, which PID 1
  // does not do on every machine.
  const setup = [
    'set -e',
    `${BUSYBOX} ip link set lo up`,
    `${BUSYBOX} mkdir -p /run/containerd`,
    `${BUSYBOX} mount -t tmpfs -o mode=0711 pcx /run/containerd`,
    ...(options.usernsRemap === true ? remapSetup(dir) : []),
    'exec "$@"',
  ].join('\n')
  const log = fs.openSync(path.join(dir, 'dockerd.log'), 'a')
  const child = spawn(
    'unshare',
    ['--mount', '--propagation', 'slave', '--net', BUSYBOX, 'sh', '-c', setup, 'sh', DOCKER_INIT, '-s', '--', dockerd, ...dockerdArgs],
    { detached: true, stdio: ['ignore', log, log] }
  )
  fs.closeSync(log)
  let failure: string | undefined
  child.on('exit', (code, signal) => (failure = `dockerd exited (${signal ?? code}) during startup`))
  child.on('error', (err) => (failure = `cannot start dockerd: ${err.message}`))
  child.unref()
  return () => failure
}

export async function stopEngine (info: EngineInfo): Promise<void> {
  const dir = path.resolve(info.dir)
  if (isEngineAlive(info)) {
    await emptyEngine(info).catch((err) => console.error(`# engine cleanup via API failed: ${(err as Error).message}`))
    signalAll([info.pid], 'SIGTERM')
    if (!(await waitGone([info.pid], TERM_TIMEOUT_MS))) {
      signalAll([info.pid], 'SIGKILL')
      await waitGone([info.pid], KILL_TIMEOUT_MS)
    }
  }
  await killLeftovers(dir)
  unmountBelow(dir)
  fs.rmSync(dir, { recursive: true, force: true, maxRetries: 3 })
}

// ---------------------------------------------------------------- engine API

interface Reply {
  status: number;
  body: string;
}

/** One request to the engine; a body is sent as JSON. */
export function api (socket: string, method: string, urlPath: string, timeoutMs = 30_000, body?: unknown): Promise<Reply> {
  const json = body === undefined ? undefined : JSON.stringify(body)
  const headers = json === undefined ? {} : { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(json) }
  return new Promise((resolve, reject) => {
    const req = http.request({ socketPath: socket, method, path: urlPath, timeout: timeoutMs, headers }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (chunk: string) => (body += chunk))
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }))
      res.on('error', reject)
    })
    req.on('timeout', () => req.destroy(new Error(`${method} ${urlPath}: timed out`)))
    req.on('error', reject)
    req.end(json)
  })
}

async function waitForPing (socket: string, failure: () => string | undefined): Promise<void> {
  const deadline = Date.now() + START_TIMEOUT_MS
  for (;;) {
    const err = failure()
    if (err) throw new Error(err)
    const ok = await api(socket, 'GET', '/_ping', 2_000).then(
      (r) => r.status === 200 && r.body === 'OK',
      () => false
    )
    if (ok) return
    if (Date.now() > deadline) throw new Error(`dockerd did not answer /_ping on ${socket} within ${START_TIMEOUT_MS / 1000} s`)
    await sleep(100)
  }
}

interface SwarmInfo {
  LocalNodeState?: string;
  ControlAvailable?: boolean;
  Error?: string;
}

async function swarmInfo (info: EngineInfo): Promise<SwarmInfo> {
  return (JSON.parse((await api(info.socket, 'GET', '/info')).body) as { Swarm?: SwarmInfo }).Swarm ?? {}
}

/**
 * Removes services, secrets and configs, leaves swarm mode and removes every
 * container, so no shims outlive dockerd.
 */
async function emptyEngine (info: EngineInfo): Promise<void> {
  const swarm = await swarmInfo(info)
  if (swarm.LocalNodeState && swarm.LocalNodeState !== 'inactive') {
    // Services first: secrets and configs in use by one cannot be removed.
    if (swarm.ControlAvailable) {
      for (const kind of ['services', 'secrets', 'configs']) {
        const res = await api(info.socket, 'GET', `/${kind}`)
        const list = res.status === 200 ? (JSON.parse(res.body) as { ID: string }[]) : []
        await Promise.all(list.map((x) => api(info.socket, 'DELETE', `/${kind}/${x.ID}`)))
      }
    }
    const left = await api(info.socket, 'POST', '/swarm/leave?force=1', 60_000)
    if (left.status !== 200) console.error(`# leaving swarm mode: ${left.status} ${left.body.trim()}`)
  }
  const list = JSON.parse((await api(info.socket, 'GET', '/containers/json?all=1')).body) as { Id: string }[]
  await Promise.all(list.map((c) => api(info.socket, 'DELETE', `/containers/${c.Id}?force=1&v=1`, 60_000)))
}

/** Makes the engine a single-node swarm manager, and waits until its node is ready. */
async function ensureSwarm (info: EngineInfo): Promise<void> {
  if ((await swarmInfo(info)).LocalNodeState !== 'active') {
    const res = await api(info.socket, 'POST', '/swarm/init', SWARM_TIMEOUT_MS, SWARM_INIT)
    if (res.status !== 200) throw new Error(`POST /swarm/init: ${res.status} ${res.body.trim()}`)
  }
  const deadline = Date.now() + SWARM_TIMEOUT_MS
  for (;;) {
    const swarm = await swarmInfo(info)
    const nodes = await api(info.socket, 'GET', '/nodes')
    const list = nodes.status === 200 ? (JSON.parse(nodes.body) as { Status?: { State?: string } }[]) : []
    const ready = list.length > 0 && list.every((n) => n.Status?.State === 'ready')
    if (swarm.LocalNodeState === 'active' && swarm.ControlAvailable && ready) return
    if (Date.now() > deadline) {
      throw new Error(`swarm mode not ready within ${SWARM_TIMEOUT_MS / 1000} s: ${JSON.stringify(swarm)}, nodes ${nodes.body.trim()}`)
    }
    await sleep(100)
  }
}

/** Imports the busybox test image through the engine's API (also used for the Podman engine, test/engine/podman.ts). */
export async function ensureImage (info: EngineInfo): Promise<void> {
  if ((await api(info.socket, 'GET', `/images/${info.image}/json`)).status === 200) return
  const root = path.join(info.dir, 'image-rootfs')
  const tar = path.join(info.dir, 'image.tar')
  fs.rmSync(root, { recursive: true, force: true })
  for (const d of ['bin', 'etc', 'tmp', 'data']) fs.mkdirSync(path.join(root, d), { recursive: true })
  fs.chmodSync(path.join(root, 'tmp'), 0o1777)
  // Tenants' containers run as an unprivileged uid (tenancy.yaml users): /data is where the
  // tests mount volumes, writable by any user as an image made for a non-root user prepares
  // its volume paths (the engine copies the mode to an empty volume mounted there).
  fs.chmodSync(path.join(root, 'data'), 0o1777)
  fs.copyFileSync(BUSYBOX, path.join(root, 'bin/busybox'))
  fs.chmodSync(path.join(root, 'bin/busybox'), 0o755)
  const applets = (await run(BUSYBOX, ['--list'])).split('\n').filter((a) => a && a !== 'busybox')
  for (const applet of applets) fs.symlinkSync('busybox', path.join(root, 'bin', applet))
  fs.writeFileSync(
    path.join(root, 'etc/passwd'),
    'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n'
  )
  fs.writeFileSync(path.join(root, 'etc/group'), 'root:x:0:\nnogroup:x:65534:\n')
  await run('tar', ['--numeric-owner', '-C', root, '-cf', tar, '.'])
  await run(dockerCli(), ['import', '--change', 'CMD ["/bin/sh"]', tar, info.image], { env: dockerEnv(info) })
  fs.rmSync(root, { recursive: true, force: true })
  fs.rmSync(tar, { force: true })
}

// ---------------------------------------------------------------- packages

/**
 * What the tests need from Debian: the engine, the busybox the test image is made of,
 * the real clients the compatibility tests drive (docker-py and compose 1.29), a
 * registry with htpasswd authentication (test/helpers/registry.ts), promtool (from
 * prometheus: deploy/ alert rules and scrape config) PostgreSQL (the policy database
 * of test/scale-out) and Podman (the second engine implementation test/podman.test.ts
 * puts behind the gateway, test/engine/podman.ts), and the programs of TOOLS. The
 * README's list and .ci/run's are the same.
 */
// busybox-static, not busybox: only its /bin/busybox can be copied into an empty image.
const BASE_PACKAGES = ['docker.io', 'busybox-static', 'python3-docker', 'docker-compose', 'docker-registry', 'apache2-utils', 'prometheus', 'postgresql', 'podman']

/**
 * Every other program a test runs, and the Debian package that has it: a test that
 * finds one missing says which package to install (toolMissing), never ENOENT.
 * Programs of essential packages (tar, mount, util-linux's unshare/nsenter/runuser,
 * libc-bin's ldd) are not listed.
 */
export const TOOLS: Readonly<Record<string, string>> = {
  haproxy: 'haproxy', //            test/socket-proxy-dropin: docker-socket-proxy's own haproxy.cfg
  htpasswd: 'apache2-utils', //     test/helpers/registry.ts
  promtool: 'prometheus', //        test/deploy-*: alert rules and scrape config
  openssl: 'openssl', //            certificates of the TLS and mTLS tests
  gcc: 'gcc', //                    test/tenancy-build-user: a static setuid program
  'systemd-analyze': 'systemd', //  test/deploy-systemd
  'systemd-socket-activate': 'systemd',
}
/** gcc -static needs libc.a. */
const TOOL_EXTRAS = ['libc6-dev']

export const PACKAGES: readonly string[] = [...new Set([...BASE_PACKAGES, ...Object.values(TOOLS), ...TOOL_EXTRAS])]

/**
 * undefined when `name` (a key of TOOLS) is on the PATH, else a message naming the
 * Debian package to install.
 */
export function toolMissing (name: string): string | undefined {
  if (findExecutable(name) !== undefined) return undefined
  const pkg = TOOLS[name] ?? name
  return `${name} is not installed: apt-get install ${pkg} (Debian package ${pkg}; npm test installs it, see PACKAGES in test/engine/engine.ts)`
}

// Two engines start at once: one apt run for both.
let packagesReady: Promise<void> | undefined
function ensurePackages (): Promise<void> {
  packagesReady ??= installPackages()
  return packagesReady
}

async function installPackages (): Promise<void> {
  const missing: string[] = []
  for (const pkg of PACKAGES) {
    const status = await run('dpkg-query', ['-W', '-f=${Status}', pkg]).catch(() => '')
    if (status.trim() !== 'install ok installed') missing.push(pkg)
  }
  if (missing.length === 0 && findExecutable('dockerd') && fs.existsSync(DOCKER_INIT) && fs.existsSync(BUSYBOX)) return
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' }
  console.error(`# installing ${missing.join(' ') || PACKAGES.join(' ')}`)
  await run('apt-get', ['update'], { env, inherit: true })
  await run('apt-get', ['install', '-y', ...(missing.length ? missing : PACKAGES)], { env, inherit: true })
}

export function findExecutable (name: string): string | undefined {
  const dirs = [...(process.env.PATH ?? '').split(':'), '/usr/local/sbin', '/usr/sbin', '/sbin']
  for (const d of dirs) {
    const p = path.join(d || '.', name)
    try {
      fs.accessSync(p, fs.constants.X_OK)
      return p
    } catch {
      // keep looking
    }
  }
  return undefined
}

// ---------------------------------------------------------------- processes

interface Proc {
  pid: number;
  ppid: number;
  start: string; // in clock ticks since boot: with pid, identifies a process
  comm: string;
  args: string[];
}

/** A live (non-zombie) process; undefined if gone or a zombie. */
export function readProc (pid: number): Proc | undefined {
  if (!(pid > 0)) return undefined
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8')
    // "pid (comm) state ppid ...": comm may itself contain spaces and parens.
    const close = stat.lastIndexOf(')')
    const fields = stat.slice(close + 2).split(' ')
    if (fields[0] === 'Z' || fields[0] === 'X') return undefined
    const comm = stat.slice(stat.indexOf('(') + 1, close)
    const args = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')
    return { pid, ppid: Number(fields[1]), start: fields[19], comm, args }
  } catch {
    return undefined
  }
}

function allProcs (): Proc[] {
  return fs
    .readdirSync('/proc')
    .filter((n) => /^\d+$/.test(n))
    .map((n) => readProc(Number(n)))
    .filter((p): p is Proc => p !== undefined)
}

function mentions (args: string[], dir: string): boolean {
  return args.some((a) => a.includes(`${dir}/`))
}

/**
 * Kills whatever is left of the engine in dir (dockerd, its containerd, shims,
 * and the container processes below the shims), e.g. after a SIGKILLed dockerd.
 */
async function killLeftovers (dir: string): Promise<void> {
  const procs = allProcs()
  const engine = procs.filter((p) => ENGINE_PROCESS.test(p.comm) && mentions(p.args, dir)).map((p) => p.pid)
  if (engine.length === 0) return
  const victims = new Set(engine)
  for (let size = 0; size !== victims.size;) {
    size = victims.size
    for (const p of procs) if (victims.has(p.ppid)) victims.add(p.pid)
  }
  const pids = [...victims]
  signalAll(pids, 'SIGTERM')
  if (await waitGone(pids, KILL_TIMEOUT_MS)) return
  signalAll(pids, 'SIGKILL')
  if (!(await waitGone(pids, KILL_TIMEOUT_MS))) {
    throw new Error(`engine processes of ${dir} survived SIGKILL: ${pids.filter((p) => readProc(p)).join(' ')}`)
  }
}

export function signalAll (pids: number[], signal: NodeJS.Signals): void {
  for (const pid of pids) {
    try {
      process.kill(pid, signal)
    } catch {
      // already gone
    }
  }
}

export async function waitGone (pids: number[], timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs
  while (pids.some((p) => readProc(p))) {
    if (Date.now() > deadline) return false
    await sleep(100)
  }
  return true
}

// ---------------------------------------------------------------- mounts

function mountsBelow (dir: string): string[] {
  // /proc/mounts escapes space, tab, newline and backslash as octal.
  const unescape = (s: string) => s.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)))
  return fs
    .readFileSync('/proc/self/mounts', 'utf8')
    .split('\n')
    .map((line) => unescape(line.split(' ')[1] ?? ''))
    .filter((m) => m === dir || m.startsWith(`${dir}/`))
    .sort((a, b) => b.length - a.length)
}

// dockerd mounts in its own namespace, so normally there is nothing here; but
// rm -r must never descend into something still mounted below dir.
function unmountBelow (dir: string): void {
  for (const m of mountsBelow(dir)) {
    if (spawnSyncOk('umount', [m])) continue
    spawnSyncOk('umount', ['-l', m])
  }
  const left = mountsBelow(dir)
  if (left.length) throw new Error(`still mounted below ${dir}, not removing it: ${left.join(', ')}`)
}

// ---------------------------------------------------------------- helpers

export function sleep (ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms))
}

export function logTail (file: string, lines: number): string {
  try {
    return fs.readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n')
  } catch {
    return '(no log)'
  }
}

function spawnSyncOk (cmd: string, args: string[]): boolean {
  return spawnSync(cmd, args, { stdio: 'ignore' }).status === 0
}

/** Runs a command, resolving with its stdout; rejects with its stderr on failure. */
function run (cmd: string, args: string[], opts: { env?: NodeJS.ProcessEnv; inherit?: boolean } = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, {
      env: opts.env ?? process.env,
      // inherit: show progress (apt) on stderr rather than interleaving with TAP on stdout
      stdio: opts.inherit ? ['ignore', process.stderr, process.stderr] : ['ignore', 'pipe', 'pipe'],
    })
    let out = ''
    let err = ''
    child.stdout?.on('data', (d: Buffer) => (out += d.toString()))
    child.stderr?.on('data', (d: Buffer) => (err += d.toString()))
    child.on('error', reject)
    child.on('close', (code) =>
      code === 0 ? resolve(out) : reject(new Error(`${cmd} ${args.join(' ')} failed (${code}): ${err.trim()}`))
    )
  })
}
