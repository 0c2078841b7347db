// Authentication with real clients on the real engine: the docker CLI (28 and 20.10)
// sending a bearer token from its config file's HttpHeaders (also on hijacked
// attach and exec requests), refused without one or with a tampered one, and a
// `docker --tlsverify` client whose certificate becomes its identity.
import { execFileSync } from 'node:child_process'
import { generateKeyPairSync } from 'node:crypto'
import fs from 'node:fs'
import http from 'node:http'
import os from 'node:os'
import path from 'node:path'
import jwt from 'jsonwebtoken'
import pino from 'pino'
import t from 'tap'
import { parseConfig } from '../src/config'
import { startGateway, type Gateway } from '../src/gateway'
import { CLI20, CLI28, engine, policiesWithBuildKit, run, uniqueName, waitUntil } from './helpers/gateway'
import { assertTool } from './helpers/tools'

// Tenants may build with BuildKit here (tenancy.yaml builds.buildkit): the session's authentication is under test.
const BUILDKIT_POLICIES = policiesWithBuildKit()

type LogLine = Record<string, unknown>

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pcau-'))
t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))

// ---------------------------------------------------------------------------
// Keys and certificates, generated per run.

const signer = generateKeyPairSync('ec', { namedCurve: 'prime256v1' })
const stranger = generateKeyPairSync('ec', { namedCurve: 'prime256v1' })
fs.writeFileSync(path.join(dir, 'jwks.json'), JSON.stringify({ keys: [{ ...signer.publicKey.export({ format: 'jwk' }), kid: 'ci-2024', use: 'sig', alg: 'ES256' }] }))

function token (claims: object, key = signer.privateKey): string {
  const exp = Math.floor(Date.now() / 1000) + 600
  return jwt.sign({ sub: 'ci-bot', tenant: 'team-a', roles: ['tenant'], jti: 'run-42', exp, ...claims }, key,
    { algorithm: 'ES256', keyid: 'ci-2024', issuer: 'https://auth.example', audience: 'portcullis' })
}

function openssl (...args: string[]): void {
  assertTool('openssl')
  execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] })
}
const newKey = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes']
openssl('req', '-x509', ...newKey, '-subj', '/CN=test-ca', '-days', '2', '-keyout', 'ca-key.pem', '-out', 'ca.pem',
  '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign')
let serial = 1
function leaf (name: string, subject: string, ext: string): void {
  fs.writeFileSync(path.join(dir, `${name}.ext`), ext)
  openssl('req', '-new', ...newKey, '-subj', subject, '-keyout', `${name}-key.pem`, '-out', `${name}.csr`)
  openssl('x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.pem', '-CAkey', 'ca-key.pem', '-set_serial', String(++serial), '-days', '2', '-extfile', `${name}.ext`, '-out', `${name}.pem`)
}
leaf('server', '/CN=portcullis', 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n')
leaf('client', '/O=acme/OU=tenant/OU=audit/CN=release-runner', 'extendedKeyUsage=clientAuth\n')
const p = (f: string): string => path.join(dir, f)
const TLS_FLAGS = ['--tlsverify', '--tlscacert', p('ca.pem'), '--tlscert', p('client.pem'), '--tlskey', p('client-key.pem')]

/** A DOCKER_CONFIG directory whose config.json makes the CLI send these headers. */
function dockerConfig (headers: Record<string, string> | null): string {
  const d = fs.mkdtempSync(path.join(dir, 'dcfg-'))
  fs.writeFileSync(path.join(d, 'config.json'), JSON.stringify(headers === null ? {} : { HttpHeaders: headers }))
  return d
}

// ---------------------------------------------------------------------------
// One gateway: a unix socket and a TCP port that take tokens only, and an mTLS port.

const log: LogLine[] = []
let gateway: Gateway
const sock = p('gw.sock')
const address = (name: string): string => gateway.listeners.find((l) => l.config.name === name)?.address ?? ''
const requests = (): LogLine[] => log.filter((l) => 'op' in l)

function configText (jwks: string): string {
  return `listen:
  - { name: unix, unix: ${sock} }
  - { name: tcp, tcp: 127.0.0.1:0 }
  - { name: mtls, tcp: 127.0.0.1:0, tls: { cert: server.pem, key: server-key.pem, ca: ca.pem } }
upstream: unix://${engine().socket}
auth:
  jwt: { jwksFile: ${jwks}, issuer: https://auth.example, audience: portcullis }
  mtls: { subject: CN, tenant: O, roles: OU }
policy: { dir: ${BUILDKIT_POLICIES} }
audit: { file: ${dir}/audit.jsonl }
log: { level: info }
shutdown: { graceSeconds: 2 }
`
}

t.before(async () => {
  const config = parseConfig(configText('jwks.json'), p('portcullis.yaml'))
  gateway = await startGateway(config, pino({ level: 'info' }, { write: (s: string) => { log.push(JSON.parse(s) as LogLine) } }))
})
t.teardown(async () => { await gateway?.close() })

// The exec targets: a tenant execs only into its own containers, so each identity below
// has one of its tenant (owner label as the gateway stamps it): team-a for the tokens,
// acme for the client certificate.
let box = ''
let acmeBox = ''
t.before(async () => {
  box = uniqueName('pcau-box')
  acmeBox = uniqueName('pcau-acme-box')
  for (const [name, tenant] of [[box, 'team-a'], [acmeBox, 'acme']]) {
    const started = await run(CLI28, ['run', '-d', '--name', name, '--label', `io.portcullis.tenant=${tenant}`, engine().image, 'sleep', '600'], { host: engine().dockerHost })
    if (started.code !== 0) throw new Error(`cannot start the exec target: ${started.stderr}`)
  }
})
t.teardown(async () => {
  for (const name of [box, acmeBox]) if (name) await run(CLI28, ['rm', '-f', name], { host: engine().dockerHost })
})

let engineVersion = ''
async function expectedVersion (): Promise<string> {
  if (!engineVersion) engineVersion = (await run(CLI28, ['version', '--format', '{{.Server.Version}}'], { host: engine().dockerHost })).stdout.toString().trim()
  return engineVersion
}

// ---------------------------------------------------------------------------

const clis = [['docker 28', CLI28], ['docker 20.10', CLI20]] as const

for (const [cliName, cli] of clis) {
  t.test(`${cliName}: a bearer token from config.json HttpHeaders`, async (t) => {
    const tok = token({})
    const cfg = dockerConfig({ Authorization: `Bearer ${tok}` })
    for (const host of [`unix://${sock}`, `tcp://${address('tcp')}`]) {
      const env = { DOCKER_CONFIG: cfg }
      const seen = requests().length
      const version = await run(cli, ['version', '--format', '{{.Server.Version}}'], { host, env, timeoutMs: 30_000 })
      t.equal(version.code, 0, `${host}: docker version exits 0 (${version.stderr.trim()})`)
      t.equal(version.stdout.toString().trim(), await expectedVersion(), `${host}: the engine's version`)

      const hi = await run(cli, ['run', '--rm', engine().image, 'echo', 'hi'], { host, env, timeoutMs: 60_000 })
      t.equal(hi.code, 0, `${host}: docker run --rm exits 0 (${hi.stderr.trim()})`)
      t.equal(hi.stdout.toString(), 'hi\n', `${host}: docker run --rm prints the output (the attach carried the token)`)

      const cat = await run(cli, ['exec', '-i', box, 'cat'], { host, env, stdin: 'x\n', timeoutMs: 30_000 })
      t.equal(cat.code, 0, `${host}: echo x | docker exec -i cat exits 0 (${cat.stderr.trim()})`)
      t.equal(cat.stdout.toString(), 'x\n', `${host}: stdin reached the engine and back (the exec start carried the token)`)

      // An exec session is logged once the gateway has asked the engine for its exit
      // code, which may be a moment after the CLI is done.
      await waitUntil(() => requests().slice(seen).some((l) => l.op === 'ExecStart' && l.hijack !== undefined))
      const lines = requests().slice(seen)
      t.ok(lines.length > 0, `${host}: requests logged`)
      t.same(lines.filter((l) => l.status !== 200 && l.status !== 201 && l.status !== 204 && l.status !== 101).map((l) => `${String(l.op)} ${String(l.status)}`), [], `${host}: nothing refused`)
      t.ok(lines.every((l) => l.auth === 'jwt' && l.subject === 'ci-bot' && l.tenant === 'team-a'), `${host}: every request logged with subject ci-bot, tenant team-a, auth jwt`)
      t.ok(lines.some((l) => l.op === 'ContainerAttach' && l.hijack !== undefined), `${host}: the hijacked attach was authenticated`)
      t.ok(lines.some((l) => l.op === 'ExecStart' && l.hijack !== undefined), `${host}: the hijacked exec start was authenticated`)
    }
  })

  t.test(`${cliName}: without a token, or with a tampered one, the CLI fails with the 401 message`, async (t) => {
    const [, payload, signature] = token({}).split('.')
    const forged = Buffer.from(JSON.stringify({ ...JSON.parse(Buffer.from(payload, 'base64url').toString()), roles: ['admin'] })).toString('base64url')
    const attempts: Array<[string, Record<string, string> | null, RegExp]> = [
      ['no Authorization header', null, /authentication required: send a bearer token \(Authorization: Bearer <JWT>\)/],
      ['a tampered payload', { Authorization: `Bearer ${token({}).split('.')[0]}.${forged}.${signature}` }, /invalid bearer token: bad signature/],
      ['a token signed by another key', { Authorization: `Bearer ${token({}, stranger.privateKey)}` }, /invalid bearer token: bad signature/],
      ['an expired token', { Authorization: `Bearer ${token({ exp: Math.floor(Date.now() / 1000) - 3600 })}` }, /invalid bearer token: token expired at /],
      ['Basic credentials', { Authorization: 'Basic Y2k6c2VjcmV0' }, /authorization scheme "Basic" is not accepted/],
    ]
    for (const [what, headers, want] of attempts) {
      const env = { DOCKER_CONFIG: dockerConfig(headers) }
      for (const host of [`unix://${sock}`, `tcp://${address('tcp')}`]) {
        const seen = requests().length
        const version = await run(cli, ['version', '--format', '{{.Server.Version}}'], { host, env, timeoutMs: 30_000 })
        t.not(version.code, 0, `${what}, ${host}: docker version fails`)
        t.match(version.stderr, want, `${what}, ${host}: the CLI shows why: ${version.stderr.trim().split('\n').pop()}`)
        const ps = await run(cli, ['ps'], { host, env, timeoutMs: 30_000 })
        t.not(ps.code, 0, `${what}, ${host}: docker ps fails`)
        t.match(ps.stderr, want, `${what}, ${host}: docker ps shows why`)
        const exec = await run(cli, ['exec', '-i', box, 'cat'], { host, env, stdin: 'x\n', timeoutMs: 30_000 })
        t.not(exec.code, 0, `${what}, ${host}: docker exec fails`)
        t.equal(exec.stdout.toString(), '', `${what}, ${host}: no exec output`)
        const lines = requests().slice(seen)
        t.ok(lines.length > 0 && lines.every((l) => l.status === 401 && (l.error as { code?: string })?.code === 'UNAUTHENTICATED' && l.subject === undefined),
          `${what}, ${host}: every request refused with 401 UNAUTHENTICATED, no subject logged`)
      }
    }
  })
}

t.test('docker 20.10 with BuildKit: the session (h2c) and build carry the token', async (t) => {
  const context = fs.mkdtempSync(path.join(dir, 'ctx-'))
  const marker = uniqueName('marker')
  fs.writeFileSync(path.join(context, 'marker'), marker)
  fs.writeFileSync(path.join(context, 'Dockerfile'), `FROM ${engine().image}\nCOPY marker /marker\nRUN cat /marker > /copied\nCMD ["cat", "/copied"]\n`)
  // Build tags of a tenant live in its namespace (tenancy.yaml imageNamespace).
  const tag = `team-a/${uniqueName('pcau-build')}`
  t.teardown(() => run(CLI28, ['rmi', '-f', tag], { host: engine().dockerHost }))
  const env = { DOCKER_CONFIG: dockerConfig({ Authorization: `Bearer ${token({})}` }), DOCKER_BUILDKIT: '1' }
  const seen = requests().length
  const built = await run(CLI20, ['build', '--network', 'none', '-t', tag, context], { host: `unix://${sock}`, env, timeoutMs: 120_000 })
  t.equal(built.code, 0, `DOCKER_BUILDKIT=1 docker build exits 0 (${built.stderr.trim().split('\n').slice(-3).join(' | ')})`)
  const ran = await run(CLI20, ['run', '--rm', tag], { host: `unix://${sock}`, env, timeoutMs: 60_000 })
  t.equal(ran.stdout.toString(), marker, 'the built image saw the context')
  const lines = requests().slice(seen)
  t.ok(lines.some((l) => l.op === 'Session' && l.hijack !== undefined), 'the BuildKit session was hijacked through the gateway')
  t.ok(lines.every((l) => l.auth === 'jwt' && l.subject === 'ci-bot'), `every request authenticated by the token (${lines.filter((l) => l.auth !== 'jwt').map((l) => `${String(l.op)} ${String(l.status)}`).join(', ')})`)
})

t.test('a hijack request without credentials is refused on the upgrade path too', async (t) => {
  const seen = requests().length
  const answer = await new Promise<{ status: number, body: string, challenge?: string }>((resolve, reject) => {
    const req = http.request({ socketPath: sock, method: 'POST', path: `/v1.41/containers/${box}/attach?stream=1&stdout=1`, headers: { connection: 'Upgrade', upgrade: 'tcp' }, agent: false })
    req.on('upgrade', () => reject(new Error('upgraded without credentials')))
    req.on('response', (res) => {
      let body = ''
      res.on('data', (c: Buffer) => { body += c.toString() })
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body, challenge: res.headers['www-authenticate'] }))
    })
    req.on('error', reject)
    req.end()
  })
  t.equal(answer.status, 401, '401')
  t.equal(answer.challenge, 'Bearer realm="portcullis"', 'with the scheme it wants (WWW-Authenticate)')
  t.same(JSON.parse(answer.body), { message: 'authentication required: send a bearer token (Authorization: Bearer <JWT>)' }, 'in the engine\'s error shape')
  t.match(requests().slice(seen), [{ op: 'ContainerAttach', status: 401, error: { code: 'UNAUTHENTICATED' } }], 'logged as refused')
})

t.test('docker --tlsverify with a client certificate: the certificate is the identity', async (t) => {
  const host = `tcp://${address('mtls')}`
  const env = { DOCKER_CONFIG: dockerConfig(null) }
  for (const [cliName, cli] of clis) {
    const seen = requests().length
    const version = await run(cli, [...TLS_FLAGS, 'version', '--format', '{{.Server.Version}}'], { host, env, timeoutMs: 30_000 })
    t.equal(version.code, 0, `${cliName}: docker --tlsverify version exits 0 (${version.stderr.trim()})`)
    t.equal(version.stdout.toString().trim(), await expectedVersion(), `${cliName}: the engine's version`)
    const cat = await run(cli, [...TLS_FLAGS, 'exec', '-i', acmeBox, 'cat'], { host, env, stdin: 'x\n', timeoutMs: 30_000 })
    t.equal(cat.stdout.toString(), 'x\n', `${cliName}: echo x | docker exec -i cat over mTLS (${cat.stderr.trim()})`)
    const lines = requests().slice(seen)
    t.ok(lines.length > 0, `${cliName}: requests logged`)
    for (const l of lines) {
      t.match(l, { listener: 'mtls', subject: 'release-runner', tenant: 'acme', auth: 'mtls' }, `${cliName}: ${String(l.op)} logged with the certificate's CN and O`)
    }
  }
  // A token, when sent, still comes first on the mTLS listener.
  const seen = requests().length
  const withToken = await run(CLI28, [...TLS_FLAGS, 'version'], { host, env: { DOCKER_CONFIG: dockerConfig({ Authorization: `Bearer ${token({ sub: 'token-wins' })}` }) }, timeoutMs: 30_000 })
  t.equal(withToken.code, 0, 'mTLS plus a token works')
  t.ok(requests().slice(seen).every((l) => l.subject === 'token-wins' && l.auth === 'jwt'), 'and the token is the identity')
})

t.test('reload: new key material applies to the next request', async (t) => {
  fs.writeFileSync(p('rotated.json'), JSON.stringify({ keys: [{ ...stranger.publicKey.export({ format: 'jwk' }), kid: 'ci-2024' }] }))
  const version = async (tok: string): Promise<{ code: number | null, stderr: string }> =>
    await run(CLI28, ['version'], { host: `unix://${sock}`, env: { DOCKER_CONFIG: dockerConfig({ Authorization: `Bearer ${tok}` }) }, timeoutMs: 30_000 })
  t.equal((await version(token({}))).code, 0, 'before: a token from the first key works')
  await gateway.reload(parseConfig(configText('rotated.json'), p('portcullis.yaml')))
  t.ok(log.some((l) => l.msg === 'configuration reloaded'), 'reloaded')
  t.notOk(log.some((l) => l.msg === 'configuration changes that need a restart were not applied'), 'an auth change needs no restart')
  const old = await version(token({}))
  t.not(old.code, 0, 'after: a token from the old key is refused')
  t.match(old.stderr, /invalid bearer token: bad signature/, 'with a bad signature')
  t.equal((await version(token({}, stranger.privateKey))).code, 0, 'after: a token from the new key works')
})

t.test('no token appears in the log', async (t) => {
  const text = JSON.stringify(log)
  t.notMatch(text, /eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}/, 'nothing that looks like a JWT')
  t.notMatch(text, /Bearer [A-Za-z0-9]/, 'no Authorization header value')
})
