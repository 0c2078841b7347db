// Private Podman engine for the tests that run the gateway in front of Podman.
//
// startPodman() runs `podman system service` with a root, run root, tmp dir,
// containers.conf, network config dir and events log of its own, all under one
// short directory in /tmp, and imports the busybox test image through the
// Docker-compatible API (as the docker engine's harness does). The service runs in
// mount and network namespaces of its own, like the test dockerd: its bridge,
// container network namespaces and iptables rules stay private, and so does
// everything Podman keeps in fixed places whatever its flags say (/run/netns,
// runc's /run/runc, CNI's IP allocations in /var/lib/cni, the SHM lock segment in
// /dev/shm): /run and /dev/shm are empty tmpfs mounts there, /var/lib an overlay
// whose writes land in the directory. The system's Podman storage is never touched.
// stopPodman() removes every container and pod, stops the service and whatever it
// left running (conmon, exec sessions), and removes the directory.
//
// Run directly (`node dist/test/engine/podman.js`) it starts one for development and
// prints its DOCKER_HOST, until SIGINT/SIGTERM.
import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import * as fs from 'node:fs'
import * as path from 'node:path'
import { api, ensureImage, logTail, readProc, signalAll, sleep, TEST_IMAGE, waitGone, type EngineInfo } from './engine'

export interface PodmanInfo extends EngineInfo {
  /** Podman's own API version (`4.3.1`): the version in `/v4.3.1/libpod/...` paths. */
  libpodVersion: string;
}

const BUSYBOX = '/bin/busybox'
const PODMAN = '/usr/bin/podman'
const START_TIMEOUT_MS = 60_000
const TERM_TIMEOUT_MS = 20_000
const KILL_TIMEOUT_MS = 5_000
const SOCKET_PATH_MAX = 107
/** The directory of a private Podman: /tmp/pcp-<hex>. */
const DIR_PREFIX = '/tmp/pcp-'

/**
 * Rootful Podman's containers cannot start in this environment without explicit
 * ulimits ("error setting rlimits ... operation not permitted"): the defaults copy
 * the service's own limits, which the container's user may not raise.
 */
function containersConf (dir: string): string {
  return [
    '[containers]',
    'default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]',
    '[engine]',
    'cgroup_manager = "cgroupfs"',
    'events_logger = "file"',
    `events_logfile_path = "${dir}/events.log"`,
    `image_copy_tmp_dir = "${dir}/tmp"`,
    'runtime = "runc"',
    '[network]',
    'network_backend = "cni"',
    `network_config_dir = "${dir}/cni"`,
    '',
  ].join('\n')
}

// ---------------------------------------------------------------- owner

// Each directory records the process that started it: a later start removes the
// directories of owners that are gone (a test run killed before its teardown).
interface Owner {
  pid: number;
  start: string;
  service: number;
}

function procStart (pid: number): string | undefined {
  return readProc(pid)?.start
}

function writeOwner (dir: string, service: number): void {
  const owner: Owner = { pid: process.pid, start: procStart(process.pid) ?? '', service }
  fs.writeFileSync(path.join(dir, 'owner.json'), JSON.stringify(owner) + '\n')
}

async function removeStale (): Promise<void> {
  for (const name of fs.readdirSync('/tmp')) {
    const dir = `/tmp/${name}`
    if (!dir.startsWith(DIR_PREFIX)) continue
    let owner: Owner
    try {
      owner = JSON.parse(fs.readFileSync(path.join(dir, 'owner.json'), 'utf8')) as Owner
    } catch {
      continue // not ours, or still starting
    }
    if (procStart(owner.pid) === owner.start) continue
    console.error(`# removing a Podman test engine left over in ${dir}`)
    await stopPodman(info(dir, owner.service, ''))
  }
}

// ---------------------------------------------------------------- start and stop

function info (dir: string, pid: number, libpodVersion: string): PodmanInfo {
  const socket = path.join(dir, 'podman.sock')
  // Not a nosymfollow mount: Podman's tests bind no tenant directories.
  return { dir, socket, dockerHost: `unix://${socket}`, pid, image: TEST_IMAGE, libpodVersion, binds: path.join(dir, 'binds') }
}

export function podmanAvailable (): boolean {
  return fs.existsSync(PODMAN) && fs.existsSync('/usr/bin/conmon')
}

export async function startPodman (): Promise<PodmanInfo> {
  if (process.getuid?.() !== 0) throw new Error('the Podman test engine must be started as root')
  if (!podmanAvailable()) throw new Error(`${PODMAN} not found: install the Debian package podman`)
  await removeStale()
  const dir = `${DIR_PREFIX}${randomBytes(4).toString('hex')}`
  for (const d of ['root', 'runroot', 'tmp', 'cni', 'varlib-upper', 'varlib-work']) fs.mkdirSync(path.join(dir, d), { recursive: true })
  const pi = info(dir, 0, '')
  if (Buffer.byteLength(pi.socket) > SOCKET_PATH_MAX) throw new Error(`${pi.socket} is too long for a unix socket`)
  fs.writeFileSync(path.join(dir, 'containers.conf'), containersConf(dir))
  writeOwner(dir, 0)
  try {
    const { pid, failure } = spawnService(dir, pi.dockerHost)
    pi.pid = pid
    writeOwner(dir, pid)
    await waitForPing(pi.socket, failure)
    const version = JSON.parse((await api(pi.socket, 'GET', '/version')).body) as { Components?: Array<{ Name: string; Version: string }> }
    pi.libpodVersion = version.Components?.find((c) => c.Name === 'Podman Engine')?.Version ?? ''
    if (!/^\d+\.\d+\.\d+$/.test(pi.libpodVersion)) throw new Error(`no Podman version in /version: ${JSON.stringify(version)}`)
    await ensureImage(pi)
    return pi
  } catch (err) {
    const tail = logTail(path.join(dir, 'podman.log'), 40)
    await stopPodman(pi).catch((e) => console.error(`# cleanup after failed start: ${(e as Error).message}`))
    throw new Error(`${(err as Error).message}\n--- last lines of ${dir}/podman.log ---\n${tail}`)
  }
}

function spawnService (dir: string, dockerHost: string): { pid: number; failure: () => string | undefined } {
  const setup = [
    'set -e',
    `${BUSYBOX} ip link set lo up`,
    `${BUSYBOX} mount -t tmpfs -o mode=0755 pcp /run`,
    `${BUSYBOX} mount -t tmpfs -o mode=1777 pcp /dev/shm`,
    `${BUSYBOX} mount -t overlay pcp -o lowerdir=/var/lib,upperdir=${dir}/varlib-upper,workdir=${dir}/varlib-work /var/lib`,
    'exec "$@"',
  ].join('\n')
  const args = [
    `--root=${dir}/root`,
    `--runroot=${dir}/runroot`,
    `--tmpdir=${dir}/tmp/libpod`,
    '--cgroup-manager=cgroupfs',
    '--events-backend=file',
    'system', 'service', '--time=0', dockerHost,
  ]
  const log = fs.openSync(path.join(dir, 'podman.log'), 'a')
  const child = spawn(
    'unshare',
    ['--mount', '--propagation', 'slave', '--net', BUSYBOX, 'sh', '-c', setup, 'sh', PODMAN, ...args],
    { detached: true, stdio: ['ignore', log, log], env: { ...process.env, CONTAINERS_CONF: path.join(dir, 'containers.conf') } }
  )
  fs.closeSync(log)
  let failure: string | undefined
  child.on('exit', (code, signal) => (failure = `podman system service exited (${signal ?? code}) during startup`))
  child.on('error', (err) => (failure = `cannot start podman: ${err.message}`))
  child.unref()
  // unshare and sh exec: the child's pid is the service's.
  return { pid: child.pid ?? 0, failure: () => failure }
}

async function waitForPing (socket: string, failure: () => string | undefined): Promise<void> {
  const deadline = Date.now() + START_TIMEOUT_MS
  for (;;) {
    const err = failure()
    if (err) throw new Error(err)
    const ok = await api(socket, 'GET', '/_ping', 2_000).then((r) => r.status === 200, () => false)
    if (ok) return
    if (Date.now() > deadline) throw new Error(`podman did not answer /_ping on ${socket} within ${START_TIMEOUT_MS / 1000} s`)
    await sleep(100)
  }
}

/** Remove every pod and container (through the service, which knows its locks), then stop everything of dir. */
export async function stopPodman (pi: PodmanInfo): Promise<void> {
  const dir = path.resolve(pi.dir)
  if (!dir.startsWith(DIR_PREFIX)) throw new Error(`not a Podman test directory: ${dir}`)
  if (pi.pid > 0 && mentions(pi.pid, dir)) {
    await emptyPodman(pi).catch((err) => console.error(`# Podman cleanup via API failed: ${(err as Error).message}`))
    signalAll([pi.pid], 'SIGTERM')
    if (!(await waitGone([pi.pid], TERM_TIMEOUT_MS))) signalAll([pi.pid], 'SIGKILL')
  }
  await killLeftovers(dir)
  // The service's mounts lived in its own namespace, gone with its last process.
  const mounted = fs.readFileSync('/proc/self/mounts', 'utf8').split('\n').map((l) => l.split(' ')[1] ?? '').filter((m) => m === dir || m.startsWith(`${dir}/`))
  if (mounted.length) throw new Error(`still mounted below ${dir}, not removing it: ${mounted.join(', ')}`)
  fs.rmSync(dir, { recursive: true, force: true, maxRetries: 3 })
}

async function emptyPodman (pi: PodmanInfo): Promise<void> {
  const v = pi.libpodVersion || '4.0.0'
  const pods = await api(pi.socket, 'GET', `/v${v}/libpod/pods/json`)
  for (const p of pods.status === 200 ? (JSON.parse(pods.body) as Array<{ Id: string }> ?? []) : []) {
    await api(pi.socket, 'DELETE', `/v${v}/libpod/pods/${p.Id}?force=true`, 60_000)
  }
  const list = JSON.parse((await api(pi.socket, 'GET', `/v${v}/libpod/containers/json?all=true`)).body) as Array<{ Id: string }>
  await Promise.all(list.map((c) => api(pi.socket, 'DELETE', `/v${v}/libpod/containers/${c.Id}?force=true&v=true&timeout=0`, 60_000)))
}

// ---------------------------------------------------------------- processes

function mentions (pid: number, dir: string): boolean {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').some((a) => a === dir || a.includes(`${dir}/`))
  } catch {
    return false
  }
}

function ppidOf (pid: number): number {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8')
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1])
  } catch {
    return 0
  }
}

/** The service, conmon monitors, exec sessions and cleanup commands of dir, and every process below them. */
async function killLeftovers (dir: string): Promise<void> {
  const pids = fs.readdirSync('/proc').filter((n) => /^\d+$/.test(n)).map(Number)
  const victims = new Set(pids.filter((p) => p !== process.pid && mentions(p, dir)))
  if (victims.size === 0) return
  for (let size = 0; size !== victims.size;) {
    size = victims.size
    for (const p of pids) if (victims.has(ppidOf(p))) victims.add(p)
  }
  const all = [...victims]
  signalAll(all, 'SIGTERM')
  if (await waitGone(all, KILL_TIMEOUT_MS)) return
  signalAll(all, 'SIGKILL')
  if (!(await waitGone(all, KILL_TIMEOUT_MS))) throw new Error(`Podman processes of ${dir} survived SIGKILL: ${all.filter((p) => procStart(p)).join(' ')}`)
}

// ---------------------------------------------------------------- development

if (require.main === module) {
  startPodman().then((pi) => {
    console.log(`export DOCKER_HOST=${pi.dockerHost}`)
    console.error(`# Podman ${pi.libpodVersion} (pid ${pi.pid}, log ${pi.dir}/podman.log); test image ${pi.image}; Ctrl-C stops it`)
    let stopping = false
    const stop = (): void => {
      if (stopping) return
      stopping = true
      stopPodman(pi).then(() => process.exit(0), (err: Error) => { console.error(`# ${err.message}`); process.exit(1) })
    }
    for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(sig, stop)
    setInterval(() => { if (procStart(pi.pid) === undefined) stop() }, 1000)
  }, (err: Error) => {
    console.error(`# cannot start Podman: ${err.stack ?? err}`)
    process.exit(1)
  })
}
