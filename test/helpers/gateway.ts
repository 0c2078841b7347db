/**
 * Test helpers: the shared real engine (started once per run by test/engine/before.ts),
 * a gateway in front of it on a temporary unix socket and an ephemeral TCP port,
 * and a docker CLI runner that can point at either.
 */
import { spawn } from 'node:child_process'
import http from 'node:http'
import { createHash, randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import jwt from 'jsonwebtoken'
import pino from 'pino'
import { parseConfig, type Config } from '../../src/config'
import { startGateway, type Gateway } from '../../src/gateway'
import { readState, type EngineInfo } from '../engine/engine'

export const CLI28 = '/usr/local/bin/docker'
export const CLI20 = '/usr/bin/docker'

/** The shipped policy directory (policies/ at the repository root). */
export const POLICIES = path.resolve(__dirname, '../../../policies')

/** The run's shared engine: a plain one, not a swarm manager, as most users run it. */
export function engine (): EngineInfo {
  return readState()
}

/** The run's swarm-mode engine (a single-node manager), for the tests that opt in to swarm objects. */
export function swarmEngine (): EngineInfo {
  return readState('swarm')
}

export interface TestGateway {
  readonly gateway: Gateway
  readonly config: Config
  readonly socket: string
  readonly dockerHost: string
  readonly tcp: string
  readonly dir: string
  close (): Promise<void>
}

/**
 * Start a gateway in this process. `yaml` adds to (or overrides) the generated config.
 * Its two listeners take requests without credentials (`identity: { subject: tester, roles: [admin] }`).
 * `policyDir` replaces the shipped policy directory (a test's own copy with other settings);
 * a `policy:` line in `yaml` replaces the generated one altogether.
 */
export async function startTestGateway (extraYaml = '', upstream?: string, policyDir = POLICIES): Promise<TestGateway> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pcg-'))
  const socket = path.join(dir, 'gw.sock')
  // A `policy:` of the caller's own (a database) replaces the generated one.
  const policy = /^policy:/m.test(extraYaml) ? '' : `policy: { dir: ${policyDir} }\n`
  const text = `listen:\n  - { unix: ${socket}, identity: { subject: tester, roles: [admin] } }\n  - { tcp: 127.0.0.1:0, identity: { subject: tester, roles: [admin] } }\nupstream: ${upstream ?? `unix://${engine().socket}`}\n${policy}audit: { file: ${dir}/audit.jsonl }\n${/^provenance:/m.test(extraYaml) ? '' : `provenance: { file: ${dir}/provenance.jsonl }\n`}log: { level: ${process.env.PORTCULLIS_TEST_LOG ?? 'silent'} }\nshutdown: { graceSeconds: 2 }\n${extraYaml}`
  const config = parseConfig(text, path.join(dir, 'portcullis.yaml'))
  const gateway = await startGateway(config, pino({ level: config.log.level }))
  const tcp = gateway.listeners.find((l) => l.config.kind === 'tcp')?.address ?? ''
  return {
    gateway,
    config,
    socket,
    dockerHost: `unix://${socket}`,
    tcp,
    dir,
    async close () {
      await gateway.close()
      fs.rmSync(dir, { recursive: true, force: true })
    },
  }
}

export interface RunResult { code: number | null, stdout: Buffer, stderr: string }

/**
 * Run a command with DOCKER_HOST pointing at `host`, feeding `stdin` if given.
 * A private DOCKER_CONFIG keeps the user's config (and any credentials) out of tests.
 */
export async function run (cmd: string, args: readonly string[], opts: { host: string, stdin?: Buffer | string, env?: NodeJS.ProcessEnv, cwd?: string, timeoutMs?: number }): Promise<RunResult> {
  const child = spawn(cmd, args, {
    cwd: opts.cwd,
    env: { ...process.env, DOCKER_HOST: opts.host, DOCKER_CONFIG: opts.env?.DOCKER_CONFIG ?? emptyDockerConfig(), ...opts.env },
    stdio: ['pipe', 'pipe', 'pipe'],
  })
  const out: Buffer[] = []
  let err = ''
  child.stdout.on('data', (b: Buffer) => out.push(b))
  child.stderr.on('data', (b: Buffer) => { err += b.toString() })
  // A command that exits before reading its input must not fail the test with EPIPE.
  child.stdin.on('error', () => {})
  if (opts.stdin !== undefined) child.stdin.end(opts.stdin)
  else child.stdin.end()
  const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 120_000)
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve))
  clearTimeout(timer)
  return { code, stdout: Buffer.concat(out), stderr: err }
}

let dockerConfig: string | undefined
function emptyDockerConfig (): string {
  if (dockerConfig === undefined) {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pcd-'))
    process.once('exit', () => fs.rmSync(dir, { recursive: true, force: true }))
    dockerConfig = dir
  }
  return dockerConfig
}

export function sha256 (data: Buffer | string): string {
  return createHash('sha256').update(data).digest('hex')
}

/** A name unique to this test run, so parallel test files never collide on the shared engine. */
export function uniqueName (prefix: string): string {
  return `${prefix}-${randomBytes(4).toString('hex')}`
}

/** The payload of a chunked HTTP/1.1 body, as read off a raw socket. */
export function dechunk (data: Buffer): Buffer {
  const out: Buffer[] = []
  let at = 0
  for (;;) {
    const eol = data.indexOf('\r\n', at)
    if (eol < 0) break
    const size = parseInt(data.subarray(at, eol).toString('latin1'), 16)
    if (!(size > 0)) break
    out.push(data.subarray(eol + 2, eol + 2 + size))
    at = eol + 2 + size + 2
  }
  return Buffer.concat(out)
}

/** Poll `check` every 100 ms until it holds or `timeoutMs` passes (the caller asserts afterwards). */
export async function waitUntil (check: () => boolean, timeoutMs = 5000): Promise<void> {
  for (const end = Date.now() + timeoutMs; !check() && Date.now() < end;) await new Promise((resolve) => setTimeout(resolve, 100))
}

export interface RawReply { status: number, text: string, json: any }

/**
 * One HTTP request on a unix socket (the gateway's or the engine's): a JSON body unless a
 * Buffer is given (then `contentType`), a bearer token if given; the whole answer read.
 */
export async function request (socketPath: string, method: string, target: string, body?: Buffer | object, opts: { token?: string, contentType?: string } = {}): Promise<RawReply> {
  const data = body === undefined ? undefined : Buffer.isBuffer(body) ? body : Buffer.from(JSON.stringify(body))
  const headers: Record<string, string | number> = {}
  if (data) { headers['content-type'] = opts.contentType ?? 'application/json'; headers['content-length'] = data.length }
  if (opts.token) headers.authorization = `Bearer ${opts.token}`
  return await new Promise((resolve, reject) => {
    const req = http.request({ socketPath, method, path: target, headers }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString()
        let json: any
        try { json = JSON.parse(text) } catch { json = undefined }
        resolve({ status: res.statusCode ?? 0, text, json })
      })
    })
    req.on('error', reject)
    req.end(data)
  })
}

/** A copy of the shipped policies with `edit` applied to its tenancy.yaml; removed at exit. */
export function policiesWith (edit: (tenancyYaml: string) => string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pcq-'))
  process.once('exit', () => fs.rmSync(dir, { recursive: true, force: true }))
  fs.cpSync(POLICIES, dir, { recursive: true })
  const file = path.join(dir, 'tenancy.yaml')
  const before = fs.readFileSync(file, 'utf8')
  const after = edit(before)
  if (after === before) throw new Error('the edit changed nothing in the shipped tenancy.yaml')
  fs.writeFileSync(file, after)
  return dir
}

/** A copy of the shipped policies whose tenancy.yaml gives `tenant` the quota `quota` (YAML flow mapping). */
export function policiesWithQuota (tenant: string, quota: string, more: (tenancyYaml: string) => string = (text) => text): string {
  return policiesWith((text) => more(text.replace(/^ {2}tenants: \{\}$/m, `  tenants:\n    ${tenant}: ${quota}`)))
}

/** A copy of the shipped policies that lets tenants build with BuildKit (tenancy.yaml builds.buildkit). */
export function policiesWithBuildKit (): string {
  return policiesWith((text) => text.replace(/^ {2}buildkit: false$/m, '  buildkit: true'))
}

/** A tar archive of small regular files (a root filesystem, a build context). */
export function tarOf (files: Record<string, string>): Buffer {
  const blocks: Buffer[] = []
  for (const [name, content] of Object.entries(files)) {
    const data = Buffer.from(content)
    const h = Buffer.alloc(512)
    h.write(name, 0, 100)
    h.write('0000644\0', 100)
    h.write('0000000\0', 108)
    h.write('0000000\0', 116)
    h.write(data.length.toString(8).padStart(11, '0') + '\0', 124)
    h.write(Math.floor(Date.now() / 1000).toString(8).padStart(11, '0') + '\0', 136)
    h.write('        ', 148)
    h.write('0', 156)
    h.write('ustar\0', 257)
    h.write('00', 263)
    let sum = 0
    for (const b of h) sum += b
    h.write(sum.toString(8).padStart(6, '0') + '\0 ', 148)
    blocks.push(h, data, Buffer.alloc((512 - (data.length % 512)) % 512))
  }
  blocks.push(Buffer.alloc(1024))
  return Buffer.concat(blocks)
}

/**
 * Bearer tokens (HS256, valid three hours) for named identities, and for each a private
 * DOCKER_CONFIG under `dir` whose config.json sends its token on every request (how the
 * docker CLI, compose and docker-py carry a token).
 */
export function tokensFor<W extends string> (claims: Record<W, object>, secret: string, dir: string): { token: Record<W, string>, config: Record<W, string> } {
  const token = {} as Record<W, string>
  const config = {} as Record<W, string>
  for (const who of Object.keys(claims) as W[]) {
    token[who] = jwt.sign({ ...claims[who], exp: Math.floor(Date.now() / 1000) + 3 * 3600 }, secret, { algorithm: 'HS256' })
    const cfg = path.join(dir, `cfg-${who}`)
    fs.mkdirSync(cfg)
    fs.writeFileSync(path.join(cfg, 'config.json'), JSON.stringify({ HttpHeaders: { Authorization: `Bearer ${token[who]}` } }))
    config[who] = cfg
  }
  return { token, config }
}

/**
 * tenancy.yaml text with tenants' swarm services allowed where the engine's API cannot
 * set no-new-privileges for their tasks (services.withoutNoNewPrivileges: the test
 * engines are dockerd 20.10, API 1.41). For policiesWith.
 */
export function servicesWithoutNoNewPrivileges (text: string): string {
  const out = text.replace(/^ {2}withoutNoNewPrivileges: false$/m, '  withoutNoNewPrivileges: true')
  if (out === text) throw new Error('tenancy.yaml has no services.withoutNoNewPrivileges: false to switch')
  return out
}

/**
 * A copy of the shipped policies with tenants on the engine's shared bridge (tenancy.yaml
 * networks.tenantDefault off): for tests of what only the default bridge has (legacy
 * links) or whose oracle is the exact body a client sent.
 */
export function policiesOnSharedBridge (): string {
  return policiesWith((text) => text.replace(/^ {2}tenantDefault: true$/m, '  tenantDefault: false'))
}
