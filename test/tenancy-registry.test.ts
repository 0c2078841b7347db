/**
 * Registry credentials held by the gateway (config `registries.credentials`), with the
 * docker CLI 28 against a real registry (docker-registry with htpasswd, in the test
 * engine's network namespace: test/helpers/registry.ts).
 *
 * Tenant team-a's credentials for the registry are in the gateway's file; the tenant's
 * own config.json has none. Its push and pull work, and the password is nowhere the
 * tenant can see it, nor in the audit trail or the gateway's log. Tenant team-b has no
 * credentials: its pull and push fail at the registry, even with the right password in
 * its own config.json (tenancy.yaml `tenantCredentials: strip`). Tags and pushes outside
 * the tenant's namespace and registries outside the allow-list are refused by the
 * gateway; `docker login` as team-a succeeds with any password (the gateway logs in
 * with its own), as team-b it is refused. A credentials file readable by others fails
 * `portcullis config check`.
 *
 * Both identities have role ci (a tenant that may push: base.csv refuses ImagePush to
 * plain tenants). team-a and team-b here touch only images named after this run's registry.
 */
import fs from 'node:fs'
import http from 'node:http'
import os from 'node:os'
import path from 'node:path'
import { randomBytes } from 'node:crypto'
import jwt from 'jsonwebtoken'
import pino from 'pino'
import t from 'tap'
import { parseConfig } from '../src/config'
import { startGateway, type Gateway } from '../src/gateway'
import { CLI28, engine, POLICIES, policiesWith, run, startTestGateway, type RunResult } from './helpers/gateway'
import { registryAuthHeader, startRegistry, type Registry } from './helpers/registry'

const IMAGE = engine().image
const SECRET = randomBytes(32).toString('hex')
const CLI = path.resolve(__dirname, '../src/cli.js')

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pctr-'))
t.teardown(() => fs.rmSync(tmp, { recursive: true, force: true }))

type Who = 'a' | 'b' | 'admin'
const CLAIMS: Record<Who, object> = {
  a: { sub: 'alice', tenant: 'team-a', roles: ['ci'] },
  b: { sub: 'bob', tenant: 'team-b', roles: ['ci'] },
  admin: { sub: 'root-op', roles: ['admin'] },
}
const TOKENS = Object.fromEntries(Object.entries(CLAIMS).map(([who, claims]) =>
  [who, jwt.sign({ ...claims, exp: Math.floor(Date.now() / 1000) + 3600 }, SECRET, { algorithm: 'HS256' })])) as Record<Who, string>

/** A DOCKER_CONFIG directory for `who`: its token, and registry credentials only if given. */
function dockerConfig (who: Who, auths?: Record<string, { auth: string }>): string {
  const dir = fs.mkdtempSync(path.join(tmp, `cfg-${who}-`))
  fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify({ HttpHeaders: { Authorization: `Bearer ${TOKENS[who]}` }, ...(auths ? { auths } : {}) }))
  return dir
}

let reg: Registry
let user = ''
let password = ''
let credFile = ''
/** The shipped policies, with this run's registry allowed (the shipped allow-list has no loopback registry). */
let policyDir = ''
let gateway: Gateway
const log: string[] = []
const sock = path.join(tmp, 'gw.sock')
const audit = path.join(tmp, 'audit.jsonl')
let A = ''
let B = ''
let REPO = ''
/** Everything the tenants' CLIs printed. */
const printed: string[] = []

function configText (credentials: string): string {
  return `listen:
  - { name: unix, unix: ${sock} }
upstream: unix://${engine().socket}
auth: { jwt: { secret: ${SECRET} } }
policy: { dir: ${policyDir} }
audit: { file: ${audit} }
log: { level: trace }
shutdown: { graceSeconds: 2 }
registries: { credentials: ${credentials} }
`
}

async function docker (config: string, args: readonly string[], stdin?: string): Promise<RunResult> {
  const r = await run(CLI28, args, { host: `unix://${sock}`, env: { DOCKER_CONFIG: config }, stdin, timeoutMs: 180_000 })
  printed.push(r.stdout.toString(), r.stderr)
  return r
}
const direct = async (args: readonly string[]): Promise<RunResult> => await run(CLI28, args, { host: engine().dockerHost, timeoutMs: 180_000 })
const out = (r: RunResult): Record<string, unknown> => r.code === 0 ? {} : { stderr: r.stderr.trim() }
const lastLine = (s: string): string => s.trim().split('\n').pop() ?? ''

t.before(async () => {
  reg = await startRegistry()
  policyDir = policiesWith((text) => text.replace(/^( {2}allowed: \[docker\.io)\]$/m, `$1, "${reg.address}"]`))
  ;[[user, password]] = Object.entries(reg.users)
  REPO = `${reg.address}/team-a/app`
  credFile = path.join(tmp, 'registry-credentials.yaml')
  fs.writeFileSync(credFile, `team-a:\n  "${reg.address}": { username: ${user}, password: "${password}" }\n`, { mode: 0o600 })
  const config = parseConfig(configText(credFile), path.join(tmp, 'portcullis.yaml'))
  gateway = await startGateway(config, pino({ level: 'trace' }, { write: (s: string) => { log.push(s) } }))
  A = dockerConfig('a')
  B = dockerConfig('b')
})

t.teardown(async () => {
  await gateway?.close()
  for (const ref of [`${REPO}:1`, `${reg?.address}/team-b/x:1`, `${reg?.address}/team-a/other:1`]) await direct(['rmi', ref])
  await reg?.stop()
})

const registryAuth = /no basic auth credentials|unauthorized: authentication required/

t.test('team-a pushes with the gateway\'s credentials; its config.json has none', async (t) => {
  // Go decodes X-Registry-Auth as padded base64url: this one needs the padding (see helpers/registry.ts).
  const json = JSON.stringify({ username: user, password, serveraddress: reg.address })
  t.not(json.length % 3, 0, 'the credentials\' X-Registry-Auth needs base64 padding')
  t.same(JSON.parse(fs.readFileSync(path.join(A, 'config.json'), 'utf8')).auths, undefined, 'no auths in team-a\'s config.json')
  const tag = await docker(A, ['tag', IMAGE, `${REPO}:1`])
  t.equal(tag.code, 0, `docker tag ${IMAGE} ${REPO}:1`, out(tag))
  const push = await docker(A, ['push', `${REPO}:1`])
  t.equal(push.code, 0, `docker push ${REPO}:1`, out(push))
  t.match(push.stdout.toString(), /^1: digest: sha256:[0-9a-f]{64} size: \d+$/m, 'the registry took it')
  t.ok(fs.existsSync(path.join(reg.dir, 'data/docker/registry/v2/repositories/team-a/app/_manifests/tags/1')), 'the registry stored team-a/app:1')
})

t.test('team-a removes the tag and pulls it back', async (t) => {
  const rmi = await docker(A, ['rmi', `${REPO}:1`])
  t.equal(rmi.code, 0, `docker rmi ${REPO}:1`, out(rmi))
  t.not((await direct(['image', 'inspect', `${REPO}:1`])).code, 0, 'the engine no longer has the tag')
  const pull = await docker(A, ['pull', `${REPO}:1`])
  t.equal(pull.code, 0, `docker pull ${REPO}:1`, out(pull))
  t.match(pull.stdout.toString(), new RegExp(`Status: Downloaded newer image for ${REPO.replace(/\./g, '\\.')}:1`), lastLine(pull.stdout.toString()))
  t.equal((await direct(['image', 'inspect', `${REPO}:1`])).code, 0, 'the engine has it again')
})

t.test('a build FROM team-a\'s private registry image: pulled through the gateway first, then built', async (t) => {
  const dir = fs.mkdtempSync(path.join(tmp, 'ctx-'))
  fs.writeFileSync(path.join(dir, 'Dockerfile'), `FROM ${REPO}:1\nUSER 65534:65534\nRUN true\n`)
  // team-a's own config.json carries (wrong) credentials: the CLI sends them in X-Registry-Config.
  const own = dockerConfig('a', { [reg.address]: { auth: Buffer.from('someone:wrong').toString('base64') } })
  const buildIt = async (): Promise<RunResult> => await run(CLI28, ['build', '-q', '-t', 'team-a/from-registry:1', dir], { host: `unix://${sock}`, env: { DOCKER_CONFIG: own, DOCKER_BUILDKIT: '0' }, timeoutMs: 180_000 })
  const built = await buildIt()
  t.equal(built.code, 0, 'built FROM the pulled image', out(built))
  t.equal((await docker(A, ['rmi', `${REPO}:1`])).code, 0, 'team-a removes the tag')
  const absent = await buildIt()
  t.not(absent.code, 0, 'without the image the build is refused')
  t.match(absent.stderr, /rule build-image-absent/, lastLine(absent.stderr))
  t.equal((await docker(own, ['pull', `${REPO}:1`])).code, 0, 'team-a pulls it with the gateway\'s credentials (its own wrong ones replaced)')
  const again = await buildIt()
  t.equal(again.code, 0, 'and builds', out(again))
  await direct(['rmi', 'team-a/from-registry:1'])
})

t.test('team-b has no credentials: its pull and push fail at the registry', async (t) => {
  const pull = await docker(B, ['pull', `${REPO}:1`])
  t.not(pull.code, 0, `team-b: docker pull ${REPO}:1 fails`)
  t.match(pull.stderr, registryAuth, `the registry's answer: ${lastLine(pull.stderr)}`)
  t.notMatch(pull.stderr, /denied by policy|\(rule /, 'not a refusal of the gateway')
  const ref = `${reg.address}/team-b/x:1`
  const tag = await docker(B, ['tag', IMAGE, ref])
  t.equal(tag.code, 0, `team-b: docker tag ${IMAGE} ${ref} (its own namespace)`, out(tag))
  const push = await docker(B, ['push', ref])
  t.not(push.code, 0, `team-b: docker push ${ref} fails`)
  t.match(push.stderr, registryAuth, `the registry's answer: ${lastLine(push.stderr)}`)
  t.notOk(fs.existsSync(path.join(reg.dir, 'data/docker/registry/v2/repositories/team-b')), 'the registry has nothing of team-b')
})

t.test('team-b\'s own X-Registry-Auth, with the right password, is stripped', async (t) => {
  const auths = { [reg.address]: { auth: Buffer.from(`${user}:${password}`).toString('base64') } }
  const ref = `${reg.address}/team-b/x:1`
  const own = dockerConfig('b', auths)
  const push = await docker(own, ['push', ref])
  t.not(push.code, 0, 'team-b with the password in its config.json: docker push still fails')
  t.match(push.stderr, /no basic auth credentials/, `as without credentials: ${lastLine(push.stderr)}`)
  const pull = await docker(own, ['pull', `${REPO}:1`])
  t.not(pull.code, 0, 'and docker pull of team-a\'s image fails')
  t.match(pull.stderr, /no basic auth credentials/, lastLine(pull.stderr))
  t.notOk(fs.existsSync(path.join(reg.dir, 'data/docker/registry/v2/repositories/team-b')), 'the registry has nothing of team-b')
  // The same config.json as an admin (whose header is passed on): the password is right.
  const admin = await run(CLI28, ['pull', `${REPO}:1`], { host: `unix://${sock}`, env: { DOCKER_CONFIG: dockerConfig('admin', auths) }, timeoutMs: 180_000 })
  t.equal(admin.code, 0, 'an admin with that config.json pulls (the password is right)', out(admin))
  const bare = await run(CLI28, ['pull', `${REPO}:1`], { host: `unix://${sock}`, env: { DOCKER_CONFIG: dockerConfig('admin') }, timeoutMs: 180_000 })
  t.match(bare.stderr, /no basic auth credentials/, 'an admin without it does not: the gateway\'s credentials are team-a\'s only')
})

t.test('tags and pushes outside the tenant\'s namespace: 403 image-namespace', async (t) => {
  const outside = `${reg.address}/team-b/x:1`
  const cases: Array<[string[], RegExp]> = [
    [['tag', IMAGE, outside], new RegExp(`tag "${outside.replace(/\./g, '\\.')}" is outside tenant team-a's namespace: use team-a/NAME\\[:TAG\\] \\(or REGISTRY/team-a/NAME\\[:TAG\\]\\) \\(rule image-namespace\\)`)],
    [['tag', IMAGE, 'other/app:1'], /tag "(docker\.io\/)?other\/app:1" is outside tenant team-a's namespace.* \(rule image-namespace\)/],
    [['tag', IMAGE, `${reg.address}/app:1`], /is outside tenant team-a's namespace.* \(rule image-namespace\)/],
    // team-b tagged this one above (images are one catalog): team-a may not push it.
    [['push', outside], new RegExp(`pushed image "${outside.replace(/\./g, '\\.')}" is outside tenant team-a's namespace.* \\(rule image-namespace\\)`)],
  ]
  for (const [args, want] of cases) {
    const r = await docker(A, args)
    t.not(r.code, 0, `team-a: docker ${args.join(' ')} fails`)
    t.match(r.stderr, want, lastLine(r.stderr))
  }
  t.notOk(fs.existsSync(path.join(reg.dir, 'data/docker/registry/v2/repositories/team-b')), 'the registry has nothing under team-b')
  t.not((await direct(['image', 'inspect', 'other/app:1'])).code, 0, 'no tag other/app:1 on the engine')
})

t.test('a registry outside the allow-list: 403 registry-not-allowed', async (t) => {
  for (const ref of ['10.1.2.3:5000/x', '10.1.2.3:5000/team-a/x:1']) {
    const started = Date.now()
    const r = await docker(A, ['pull', ref])
    t.not(r.code, 0, `team-a: docker pull ${ref} fails`)
    t.match(r.stderr, /pulling from or to registry 10\.1\.2\.3:5000 is not allowed for tenant team-a: tenancy\.yaml registries\.allowed does not list it and the gateway holds no credentials of the tenant for it \(config registries\.credentials\) \(rule registry-not-allowed\)/, lastLine(r.stderr))
    t.ok(Date.now() - started < 30_000, 'at once (the engine never tried it)')
  }
})

t.test('docker login: team-a\'s bogus password works (the gateway logs in with its own), team-b is refused', async (t) => {
  const login = await docker(A, ['login', reg.address, '-u', 'someone', '--password-stdin'], 'not-the-password\n')
  t.equal(login.code, 0, 'team-a: docker login with a bogus password exits 0', out(login))
  t.match(login.stdout.toString(), /Login Succeeded/, 'Login Succeeded')
  const stored = JSON.parse(fs.readFileSync(path.join(A, 'config.json'), 'utf8'))
  t.same(Buffer.from(String(stored.auths?.[reg.address]?.auth), 'base64').toString(), 'someone:not-the-password', 'the CLI stored what the tenant typed, nothing else')
  // Its config.json now has (bogus) credentials, which the CLI sends: replaced again.
  const push = await docker(A, ['push', `${REPO}:1`])
  t.equal(push.code, 0, 'team-a: docker push with bogus credentials in config.json still works', out(push))

  const b = await docker(dockerConfig('b'), ['login', reg.address, '-u', user, '--password-stdin'], `${password}\n`)
  t.not(b.code, 0, 'team-b: docker login with the right password fails')
  t.match(b.stderr, new RegExp(`the gateway holds no credentials of tenant team-b for ${reg.address.replace(/\./g, '\\.')}, and tenants' own credentials are not used \\(rule registry-credentials\\)`), lastLine(b.stderr))
  const far = await docker(dockerConfig('a'), ['login', '10.1.2.3:5000', '-u', 'x', '--password-stdin'], 'y\n')
  t.not(far.code, 0, 'team-a: docker login to a registry outside the allow-list fails')
  t.match(far.stderr, /login to registry 10\.1\.2\.3:5000 is not allowed for tenant team-a: tenancy\.yaml registries\.allowed does not list it and the gateway holds no credentials of the tenant for it \(config registries\.credentials\) \(rule registry-not-allowed\)/, lastLine(far.stderr))
})

t.test('the shipped allow-list (docker.io only): the loopback registry the gateway holds team-a\'s credentials for is team-a\'s to use, no one else\'s', async (t) => {
  // The operator named this registry for team-a (registries.credentials, by its exact
  // host:port): pulls, pushes, logins and builds from it work without an allow-list entry.
  // The daemon reaches 127.0.0.1 on the host: only at that address, never a port a tenant picks.
  const shippedSock = path.join(tmp, 'gw-shipped.sock')
  const text = configText(credFile).replace(`policy: { dir: ${policyDir} }`, `policy: { dir: ${POLICIES} }`).replace(sock, shippedSock).replace(audit, path.join(tmp, 'audit-shipped.jsonl'))
  const shipped = await startGateway(parseConfig(text, path.join(tmp, 'portcullis-shipped.yaml')), pino({ level: 'silent' }))
  t.teardown(async () => { await shipped.close() })
  const via = async (config: string, args: readonly string[], stdin?: string): Promise<RunResult> => await run(CLI28, args, { host: `unix://${shippedSock}`, env: { DOCKER_CONFIG: config, DOCKER_BUILDKIT: '0' }, stdin, timeoutMs: 180_000 })
  await direct(['rmi', `${REPO}:1`])
  const pull = await via(A, ['pull', `${REPO}:1`])
  t.equal(pull.code, 0, `team-a: docker pull ${REPO}:1`, out(pull))
  t.equal((await direct(['image', 'inspect', `${REPO}:1`])).code, 0, 'the engine has the image')
  const dir = fs.mkdtempSync(path.join(tmp, 'ctx-'))
  fs.writeFileSync(path.join(dir, 'Dockerfile'), `FROM ${REPO}:1\nUSER 65534:65534\nRUN true\n`)
  const built = await via(A, ['build', '-q', '-t', `${REPO}:built`, dir])
  t.equal(built.code, 0, 'team-a builds FROM it', out(built))
  const push = await via(A, ['push', `${REPO}:built`])
  t.equal(push.code, 0, 'and pushes the result', out(push))
  t.ok(fs.existsSync(path.join(reg.dir, 'data/docker/registry/v2/repositories/team-a/app/_manifests/tags/built')), 'the registry stored team-a/app:built')
  const login = await via(A, ['login', reg.address, '-u', 'someone', '--password-stdin'], 'bogus\n')
  t.equal(login.code, 0, 'team-a: docker login (the gateway logs in with its own)', out(login))
  await direct(['rmi', `${REPO}:built`])
  const b = await via(B, ['pull', `${REPO}:1`])
  t.not(b.code, 0, 'team-b (no credentials held): docker pull fails')
  t.match(b.stderr, /registry 127\.0\.0\.1:\d+ is not allowed for tenant team-b: tenancy\.yaml registries\.allowed does not list it .*\(rule registry-not-allowed\)/, lastLine(b.stderr))
  const other = reg.address.replace(/:\d+$/, ':1')
  const port = await via(A, ['pull', `${other}/team-a/app:1`])
  t.match(port.stderr, /\(rule registry-not-allowed\)/, `team-a: another port on the host's loopback is refused (${lastLine(port.stderr)})`)
})

t.test('a registry that answers the login with a refresh token: the tenant does not get it', async (t) => {
  // A stand-in for the engine (the htpasswd registry issues no tokens): it records the
  // login it receives and answers like dockerd does for an OAuth registry.
  const fakeSock = path.join(tmp, 'fake-engine.sock')
  const received: any[] = []
  const fake = http.createServer((req, res) => {
    let body = ''
    req.on('data', (c: Buffer) => { body += c.toString() })
    req.on('end', () => {
      const p = (req.url ?? '').replace(/^\/v[\d.]+/, '').split('?')[0]
      res.setHeader('Api-Version', '1.41')
      if (p === '/_ping') { res.end('OK'); return }
      if (p === '/events') { res.writeHead(200, { 'content-type': 'application/json' }); res.flushHeaders(); return }
      if (p === '/auth' && req.method === 'POST') {
        received.push(JSON.parse(body))
        res.setHeader('content-type', 'application/json')
        res.end(JSON.stringify({ Status: 'Login Succeeded', IdentityToken: 'refresh-token-of-the-gateways-account' }))
        return
      }
      res.writeHead(404, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ message: `not in this fake: ${req.method} ${p}` }))
    })
  })
  await new Promise<void>((resolve) => fake.listen(fakeSock, resolve))
  const fgw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\nregistries: { credentials: ${credFile} }\n`, `unix://${fakeSock}`, policyDir)
  t.teardown(async () => { await fgw.close(); fake.closeAllConnections(); fake.close() })
  const cfg = dockerConfig('a')
  const login = await run(CLI28, ['login', reg.address, '-u', 'someone', '--password-stdin'], { host: fgw.dockerHost, env: { DOCKER_CONFIG: cfg }, stdin: 'typed\n', timeoutMs: 60_000 })
  printed.push(login.stdout.toString(), login.stderr)
  t.equal(login.code, 0, 'team-a: docker login exits 0', out(login))
  t.same(received, [{ username: user, password, serveraddress: reg.address }], 'the engine was asked to log in with the gateway\'s credentials, not the typed ones')
  const stored = fs.readFileSync(path.join(cfg, 'config.json'), 'utf8')
  t.notMatch(stored, /refresh-token|identitytoken/, 'no identity token in the tenant\'s config.json')
  t.notMatch(login.stdout.toString() + login.stderr, /refresh-token/, 'nor in what the CLI printed')
})

t.test('the password is nowhere the tenant sees it, nor in the audit trail or the log', async (t) => {
  const secrets = {
    password,
    'user:password in base64': Buffer.from(`${user}:${password}`).toString('base64'),
    'the X-Registry-Auth value': registryAuthHeader(user, password, reg.address).replace(/=+$/, ''),
  }
  const files = (dir: string): string[] => fs.readdirSync(dir, { recursive: true, encoding: 'utf8' }).map((f) => path.join(dir, f)).filter((f) => fs.statSync(f).isFile())
  const tenantFiles = fs.readdirSync(tmp).filter((d) => /^cfg-[ab]-/.test(d)).flatMap((d) => files(path.join(tmp, d)))
  t.ok(tenantFiles.length >= 2, `the tenants' DOCKER_CONFIG files (${tenantFiles.length})`)
  const ownCopy = tenantFiles.filter((f) => fs.readFileSync(f, 'utf8').includes(Buffer.from(`${user}:${password}`).toString('base64')))
  t.equal(ownCopy.length, 1, 'only the config.json the test gave team-b holds it (its own copy, stripped above)')
  const auditText = fs.readFileSync(audit, 'utf8')
  const logText = log.join('')
  for (const [what, value] of Object.entries(secrets)) {
    t.notOk(tenantFiles.filter((f) => !ownCopy.includes(f)).some((f) => fs.readFileSync(f, 'utf8').includes(value)), `${what}: in no file of team-a's`)
    t.notOk(printed.some((p) => p.includes(value)), `${what}: in nothing the CLI printed`)
    t.notOk(auditText.includes(value), `${what}: not in the audit trail`)
    t.notOk(logText.includes(value), `${what}: not in the gateway's log`)
  }
  t.ok(auditText.length > 0 && logText.length > 0, 'both were written')
  const records = auditText.split('\n').filter((l) => l !== '').map((l) => JSON.parse(l))
  const login = records.find((r) => JSON.stringify(r).includes('"SystemAuth"') && JSON.stringify(r).includes('"tenancy"') && JSON.stringify(r).includes('alice'))
  t.ok(login, 'the audit trail records team-a\'s login and the gateway\'s change to it')
  t.same(login.rewrites.find((r: any) => r.id === 'tenancy')?.patch, [{ op: 'replace', path: '/username', value: user }, { op: 'replace', path: '/password', value: '[REDACTED]' }],
    'the substituted username recorded, the password as [REDACTED]')
})

t.test('portcullis config check: a credentials file readable by others fails, naming it', async (t) => {
  const loose = path.join(tmp, 'loose-credentials.yaml')
  fs.copyFileSync(credFile, loose)
  fs.chmodSync(loose, 0o644)
  const config = path.join(tmp, 'check.yaml')
  fs.writeFileSync(config, configText(loose))
  const bad = await run(process.execPath, [CLI, 'config', 'check', config], { host: '' })
  t.equal(bad.code, 1, 'exits 1')
  t.match(bad.stdout.toString(), `registries.credentials: ${loose} is accessible to group or others (mode 0644); it holds registry passwords: chmod 600 it`, lastLine(bad.stdout.toString()))
  t.notMatch(bad.stdout.toString() + bad.stderr, password, 'without printing the password')
  fs.chmodSync(loose, 0o600)
  const good = await run(process.execPath, [CLI, 'config', 'check', config], { host: '' })
  t.equal(good.code, 0, 'the same file with mode 0600 passes', out(good))
  t.match(good.stdout.toString(), `${config}: OK`)
})
