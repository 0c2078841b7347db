/**
 * The gateway under test, as a child process (`node dist/src/cli.js serve`), so that
 * its memory is its own and can be read from /proc/<pid>/status while it streams.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { Pool } from 'undici'

export interface GatewayProcess {
  readonly pid: number
  /** The admin socket: a fixed identity (role admin) for whoever connects. */
  readonly socket: string
  /** A second unix socket without identity: bearer tokens only (the tenant's, in the bench). */
  readonly tokenSocket: string
  /** The loopback TCP listener: bearer tokens only. */
  readonly tcp: { host: string, port: number }
  readonly configFile: string
  /** The last lines the gateway wrote (stdout and stderr), for error reports. */
  output (): string
  /** Rejects when the gateway exits on its own before `stop()`. */
  readonly exited: Promise<never>
  stop (): Promise<void>
}

const CLI = path.join(__dirname, '..', 'src', 'cli.js')

export interface GatewayOptions {
  /** The policy directory (default: the repository's policies/). */
  policyDir?: string
  /** HS256 secret for bearer tokens on the TCP listener and the token socket. */
  jwtSecret: string
  /** Loopback TCP port of the bearer-token listener. */
  tcpPort: number
  /** Extra node options (profiling). */
  nodeArgs?: string[]
  /** The config's `workers` (default: the config's default, one process). */
  workers?: number
}

/**
 * A realistic deployment: authentication, policy and audit on. Three listeners: the
 * admin socket (fixed identity), a unix socket and a loopback TCP port that take HS256
 * bearer tokens only; the audit trail goes to a file in `dir`.
 */
export async function startGatewayProcess (dir: string, engineSocket: string, options: GatewayOptions): Promise<GatewayProcess> {
  const socket = path.join(dir, 'gw.sock')
  const tokenSocket = path.join(dir, 'gw-token.sock')
  const tcp = { host: '127.0.0.1', port: options.tcpPort }
  const configFile = path.join(dir, 'portcullis.yaml')
  fs.writeFileSync(configFile, [
    'listen:',
    `  - { unix: ${socket}, identity: { subject: tester, roles: [admin] } }`,
    `  - { unix: ${tokenSocket} }`,
    `  - { tcp: "${tcp.host}:${tcp.port}" }`,
    `upstream: unix://${engineSocket}`,
    `auth: { jwt: { secret: ${JSON.stringify(options.jwtSecret)} } }`,
    `policy: { dir: ${options.policyDir ?? path.resolve(__dirname, '../../policies')} }`,
    `audit: { file: ${path.join(dir, 'audit.jsonl')} }`,
    'log: { level: warn }',
    'shutdown: { graceSeconds: 2 }',
    ...(options.workers !== undefined ? [`workers: ${options.workers}`] : []),
    // The bench measures what the gateway costs, not where its rate limits cut in: none,
    // except for identities with the role `limited` (section 7's flood over its rate limit).
    'rates: { roles: { limited: { read: { rate: 200, burst: 400 }, write: { rate: 20, burst: 100 } } }, others: null }',
    '',
  ].join('\n'))

  const child: ChildProcess = spawn(process.execPath, ['--max-semi-space-size=4', ...(options.nodeArgs ?? []), CLI, 'serve', '--config', configFile], { stdio: ['ignore', 'pipe', 'pipe'] })
  let tail = ''
  const keep = (b: Buffer): void => { tail = (tail + b.toString()).slice(-16_384) }
  child.stdout?.on('data', keep)
  child.stderr?.on('data', keep)
  const { exited, hasExited, stop } = supervise(child, 'gateway', () => tail)
  if (child.pid === undefined) throw new Error('could not spawn the gateway')

  // Ready when a ping through it succeeds.
  const deadline = Date.now() + 60_000
  let last = 'no answer'
  for (;;) {
    if (hasExited()) await exited
    if (fs.existsSync(socket)) {
      const pool = new Pool('http://localhost', { socketPath: socket, connections: 1 })
      try {
        const r = await pool.request({ method: 'GET', path: '/_ping' })
        const text = await r.body.text()
        if (r.statusCode === 200) break
        last = `${r.statusCode} ${text.trim()}`
      } catch { /* not yet */ } finally {
        await pool.destroy()
      }
    }
    if (Date.now() > deadline) {
      await stop()
      throw new Error(`gateway did not become ready within 60 s (GET /_ping on the admin socket: ${last})\n${tail}`)
    }
    await sleep(100)
  }
  return { pid: child.pid, socket, tokenSocket, tcp, configFile, output: () => tail, exited, stop }
}

/**
 * Watch a child process the bench started: `exited` rejects when it exits on its own
 * (before `stop()`), naming it with the last of its output; `stop()` sends SIGTERM,
 * then SIGKILL after 5 s, and resolves once it is gone.
 */
export function supervise (child: ChildProcess, name: string, output: () => string): { exited: Promise<never>, hasExited: () => boolean, stop: () => Promise<void> } {
  let stopping = false
  let exitedNow = false
  const exited = new Promise<never>((_resolve, reject) => {
    child.once('exit', (code, signal) => {
      exitedNow = true
      if (!stopping) reject(new Error(`${name} exited unexpectedly (code ${code}, signal ${signal})\n${output()}`))
    })
  })
  exited.catch(() => {}) // observed by whoever races against it
  const stop = async (): Promise<void> => {
    stopping = true
    if (exitedNow) return
    const gone = new Promise<void>((resolve) => child.once('exit', () => resolve()))
    child.kill('SIGTERM')
    const timer = setTimeout(() => child.kill('SIGKILL'), 5_000)
    await gone
    clearTimeout(timer)
  }
  return { exited, hasExited: () => exitedNow, stop }
}

/** A process's memory from /proc/<pid>/status, in bytes. */
export interface Memory { rss: number, hwm: number }

export function readMemory (pid: number): Memory {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8')
  const kib = (field: string): number => {
    const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)
    if (!m) throw new Error(`no ${field} in /proc/${pid}/status`)
    return Number(m[1]) * 1024
  }
  return { rss: kib('VmRSS'), hwm: kib('VmHWM') }
}

/**
 * Reset the peak resident set size (VmHWM) to the current RSS: writing `5` to
 * /proc/<pid>/clear_refs does that since Linux 4.0 (proc(5)). Returns false where
 * the kernel or permissions refuse, in which case VmHWM is the peak since start.
 */
export function resetPeak (pid: number): boolean {
  try {
    fs.writeFileSync(`/proc/${pid}/clear_refs`, '5')
    return true
  } catch {
    return false
  }
}

export interface MemoryWindow {
  /** Highest VmRSS seen by sampling. */
  sampledPeak: number
  /** VmHWM at the end of the window (peak since the reset, or since start if the reset failed). */
  hwm: number
  /** Whether VmHWM was reset at the start of the window. */
  hwmReset: boolean
  /** RSS when the window opened. */
  before: number
  samples: number
}

/** Sample a process's VmRSS every `intervalMs` while `work` runs; VmHWM is reset first and read after. */
export async function watchMemory<T> (pid: number, intervalMs: number, work: () => Promise<T>): Promise<{ result: T, memory: MemoryWindow }> {
  const hwmReset = resetPeak(pid)
  const before = readMemory(pid).rss
  let sampledPeak = before
  let samples = 1
  const timer = setInterval(() => {
    try {
      sampledPeak = Math.max(sampledPeak, readMemory(pid).rss)
      samples++
    } catch { /* the process is gone; work() will fail on its own */ }
  }, intervalMs)
  try {
    const result = await work()
    const end = readMemory(pid)
    sampledPeak = Math.max(sampledPeak, end.rss)
    return { result, memory: { sampledPeak, hwm: end.hwm, hwmReset, before, samples: samples + 1 } }
  } finally {
    clearInterval(timer)
  }
}

/**
 * CPU time (user + system, all threads) a process has used so far, in seconds, from
 * /proc/<pid>/stat (fields 14 and 15, in clock ticks: 100 per second on Linux).
 */
export function cpuSeconds (pid: number): number {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8')
  // "pid (comm) state ppid ...": comm may contain spaces and parentheses.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS
}

const CLOCK_TICKS = 100
