/**
 * A real registry for tests: Debian's docker-registry (distribution 2.8) with htpasswd
 * (bcrypt) authentication and filesystem storage in a temporary directory.
 *
 * The test engine has a network namespace of its own (test/engine/engine.ts), so the
 * registry runs in that namespace (`nsenter --net=/proc/<dockerd>/ns/net`): the engine
 * reaches it on 127.0.0.1, which it treats as an insecure (plain HTTP) registry; the
 * host, and so this process, cannot connect to it.
 */
import { execFile, spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import YAML from 'yaml'
import { engine } from './gateway'
import { assertTool } from './tools'

const REGISTRY = '/usr/bin/docker-registry'
const BUSYBOX = '/bin/busybox' // busybox-static: its wget probes the registry from inside the namespace
const START_TIMEOUT_MS = 15_000
const STOP_TIMEOUT_MS = 5_000

export interface Registry {
  /** host:port as the engine reaches it (127.0.0.1 in the engine's network namespace). */
  readonly address: string
  /** username → password, all accepted by the registry. */
  readonly users: Record<string, string>
  /** Temporary directory holding config, htpasswd file and storage; removed by stop(). */
  readonly dir: string
  /** Kills the registry and removes dir; safe to call more than once. */
  stop (): Promise<void>
}

/**
 * Start a registry on a free port in the test engine's network namespace, and wait until it
 * answers `GET /v2/` with 401. Without `users`, one user with a random password.
 */
export async function startRegistry (opts: { users?: Record<string, string> } = {}): Promise<Registry> {
  const netns = `/proc/${engine().pid}/ns/net`
  if (!fs.existsSync(netns)) throw new Error(`no test engine network namespace at ${netns}`)
  const users = opts.users ?? { [`user-${randomBytes(3).toString('hex')}`]: randomBytes(12).toString('hex') }
  if (Object.keys(users).length === 0) throw new Error('startRegistry: at least one user is needed')

  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pcr-'))
  let stop: () => Promise<void> = async () => { fs.rmSync(dir, { recursive: true, force: true }) }
  try {
    const htpasswd = path.join(dir, 'htpasswd')
    fs.writeFileSync(htpasswd, (await Promise.all(Object.entries(users).map(([u, p]) => htpasswdLine(u, p)))).join(''))
    const config = path.join(dir, 'config.yml')
    fs.writeFileSync(config, YAML.stringify({
      version: '0.1',
      log: { level: 'info', formatter: 'text' },
      storage: {
        filesystem: { rootdirectory: path.join(dir, 'data') },
        delete: { enabled: true },
        maintenance: { uploadpurging: { enabled: false } },
      },
      // Port 0: the kernel picks a free port, which the registry logs ("listening on ...").
      http: { addr: '127.0.0.1:0', secret: randomBytes(16).toString('hex') },
      auth: { htpasswd: { realm: 'portcullis-test', path: htpasswd } },
    }))

    // REGISTRY_* variables would override the config file.
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('REGISTRY_')))
    const child = spawn('nsenter', [`--net=${netns}`, REGISTRY, 'serve', config], { env, stdio: ['ignore', 'pipe', 'pipe'] })
    let log = ''
    let exited: string | undefined
    const onLog = (b: Buffer) => { log = (log + b.toString()).slice(-20_000) }
    child.stdout.on('data', onLog)
    child.stderr.on('data', onLog)
    child.on('error', (err) => { exited = `cannot start docker-registry: ${err.message}` })
    child.on('exit', (code, signal) => { exited ??= `docker-registry exited (${signal ?? code})` })
    // Never keep the test process alive, and never outlive it.
    child.unref()
    for (const s of [child.stdout, child.stderr]) (s as unknown as { unref (): void }).unref()
    const killOnExit = () => { child.kill('SIGKILL') }
    process.once('exit', killOnExit)

    stop = async () => {
      process.removeListener('exit', killOnExit)
      if (exited === undefined) {
        child.kill('SIGTERM')
        if (!await waitFor(() => exited !== undefined, STOP_TIMEOUT_MS)) {
          child.kill('SIGKILL')
          await waitFor(() => exited !== undefined, STOP_TIMEOUT_MS)
        }
      }
      fs.rmSync(dir, { recursive: true, force: true })
    }

    let address: string | undefined
    await waitFor(() => {
      address = /msg="listening on (127\.0\.0\.1:\d+)"/.exec(log)?.[1]
      return address !== undefined || exited !== undefined
    }, START_TIMEOUT_MS)
    if (address === undefined) throw new Error(`${exited ?? 'docker-registry did not say where it listens'}\n${log}`)
    const ready = await waitFor(async () => exited !== undefined || await answers401(netns, address!), START_TIMEOUT_MS)
    if (!ready || exited !== undefined) throw new Error(`docker-registry on ${address} never answered GET /v2/ with 401: ${exited ?? ''}\n${log}`)

    return { address, users: { ...users }, dir, stop: once(stop) }
  } catch (err) {
    await stop()
    throw err
  }
}

/**
 * The value of `X-Registry-Auth` as the docker CLI builds it: the JSON of its AuthConfig
 * (Go's field order, empty fields left out, <, > and & escaped) in base64url *with* padding.
 * dockerd 20.10 decodes it with Go's padded URL encoding: without the padding it silently
 * falls back to no credentials.
 */
export function registryAuthHeader (username: string, password: string, serveraddress: string): string {
  const fields = Object.entries({ username, password, serveraddress }).filter(([, v]) => v !== '')
  const json = JSON.stringify(Object.fromEntries(fields))
    .replace(/[<>&\u2028\u2029]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)
  return Buffer.from(json).toString('base64').replace(/\+/g, '-').replace(/\//g, '_')
}

/** One line of an htpasswd file, bcrypt-hashed. */
async function htpasswdLine (user: string, password: string): Promise<string> {
  if (user.includes(':')) throw new Error(`htpasswd user names cannot contain ':': ${user}`)
  assertTool('htpasswd')
  const { stdout } = await promisify(execFile)('htpasswd', ['-Bbn', user, password])
  return `${stdout.trim()}\n`
}

/**
 * Whether GET /v2/ from inside the namespace is answered with 401 (busybox wget fails and says so).
 * No `-T`: Debian's busybox-static 1.35 wget segfaults with it when the connection is refused.
 */
function answers401 (netns: string, address: string): Promise<boolean> {
  return new Promise((resolve) => {
    execFile('nsenter', [`--net=${netns}`, BUSYBOX, 'wget', '-q', '-O', '/dev/null', `http://${address}/v2/`],
      { timeout: 5_000 }, (_err, _stdout, stderr) => { resolve(/\b401 Unauthorized\b/.test(stderr)) })
  })
}

async function waitFor (cond: () => boolean | Promise<boolean>, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    if (await cond()) return true
    if (Date.now() > deadline) return false
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

function once (fn: () => Promise<void>): () => Promise<void> {
  let p: Promise<void> | undefined
  return () => (p ??= fn())
}
