import t from 'tap'
import { execFileSync } from 'node:child_process'
import { generateKeyPairSync } from 'node:crypto'
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir, userInfo } from 'node:os'
import { join } from 'node:path'
import {
  ConfigError,
  defaultConfig,
  defaultMtlsMapping,
  describeConfig,
  loadConfig,
  parseConfig,
  type Config,
  type ListenerConfig,
} from '../src/config'

type DirSpec = { [name: string]: string | DirSpec }

/**
 * A fixture directory under the system's temporary directory, removed after the test.
 * Not t.testdir(): that lives below the checkout, and a config's default unix socket
 * beside it can pass the 107-byte limit of a socket path when the checkout's path is long.
 */
function shortDir (test: { teardown: (fn: () => void) => void }, spec: DirSpec): string {
  const dir = mkdtempSync(join(tmpdir(), 'pcc-'))
  test.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const fill = (at: string, node: DirSpec): void => {
    for (const [name, value] of Object.entries(node)) {
      if (typeof value === 'string') writeFileSync(join(at, name), value)
      else {
        mkdirSync(join(at, name))
        fill(join(at, name), value)
      }
    }
  }
  fill(dir, spec)
  return dir
}

/** Runs fn, which must throw a ConfigError, and returns its problems. */
function problemsOf (fn: () => unknown): string[] {
  try {
    fn()
  } catch (err) {
    if (err instanceof ConfigError) return err.problems
    throw err
  }
  throw new Error('expected a ConfigError, but nothing was thrown')
}

function hasOpenssl (): boolean {
  try {
    execFileSync('openssl', ['version'], { stdio: 'ignore' })
    return true
  } catch {
    return false
  }
}
const OPENSSL = hasOpenssl()

/** Writes a self-signed cert/key pair into dir as <prefix>c.pem / <prefix>k.pem. */
function selfSigned (dir: string, prefix = ''): { cert: string; key: string } {
  const cert = join(dir, `${prefix}c.pem`)
  const key = join(dir, `${prefix}k.pem`)
  execFileSync(
    'openssl',
    ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-subj', '/CN=test', '-days', '1', '-keyout', key, '-out', cert],
    { stdio: 'ignore' }
  )
  return { cert, key }
}

function unixListener (c: Config, i: number): Extract<ListenerConfig, { kind: 'unix' }> {
  const l = c.listen[i]
  if (l === undefined || l.kind !== 'unix') throw new Error(`listen[${i}] is not a unix listener`)
  return l
}

function tcpListener (c: Config, i: number): Extract<ListenerConfig, { kind: 'tcp' }> {
  const l = c.listen[i]
  if (l === undefined || l.kind !== 'tcp') throw new Error(`listen[${i}] is not a tcp listener`)
  return l
}

t.test('built-in defaults', async (t) => {
  const dir = shortDir(t, {})
  const c = defaultConfig(dir)
  t.equal(c.source, null)
  // The socket is owner-only and acts as the user running the gateway; TCP needs a token.
  t.same(c.listen, [
    {
      kind: 'unix',
      name: `unix:${join(dir, 'portcullis.sock')}`,
      path: join(dir, 'portcullis.sock'),
      mode: 0o600,
      identity: { subject: userInfo().username, roles: ['admin'] },
    },
    { kind: 'tcp', name: 'tcp:127.0.0.1:2375', host: '127.0.0.1', port: 2375 },
  ])
  t.same(c.upstream, { kind: 'unix', path: '/var/run/docker.sock', url: 'unix:///var/run/docker.sock' })
  t.same(c.api, { minVersion: '1.24', maxVersion: '1.56' })
  t.same(c.limits, { jsonBodyBytes: 1048576, bufferedBytes: 268435456 })
  t.same(c.auth, {})
  t.same(c.policy, { dir: join(dir, 'policies') })
  t.equal(c.audit.file, join(dir, 'audit.jsonl'))
  t.equal(c.audit.level, 'metadata')
  t.notOk(c.audit.stdout)
  t.same(c.metrics, {})
  t.same(c.log, { level: 'info' })
  t.same(c.shutdown, { graceSeconds: 10 })

  t.ok(Object.isFrozen(c), 'config is frozen')
  t.ok(Object.isFrozen(c.listen), 'listen array is frozen')
  t.ok(Object.isFrozen(c.listen[0]), 'listeners are frozen')
  t.ok(Object.isFrozen(c.api), 'sections are frozen')
  t.throws(() => {
    (c.shutdown as { graceSeconds: number }).graceSeconds = 1
  }, TypeError)

  // A minimal file gives the same values, resolved against the file's directory.
  const fromFile = parseConfig('log: { level: info }\n', join(dir, 'portcullis.yaml'))
  t.same({ ...fromFile, source: null }, c)
  t.equal(fromFile.source, join(dir, 'portcullis.yaml'))

  // Sections written with no value take their defaults.
  const blank = parseConfig('api:\nlimits:\nauth:\nmetrics:\n', join(dir, 'p.yaml'))
  t.same(blank.api, c.api)
  t.same(blank.auth, {})
})

t.test('the schema\'s defaults are the ones the hand-written validation gave', async (t) => {
  // Pinned in full: the defaults now come from schema.ts (ajv useDefaults), and
  // these are the values src/config/validate.ts filled in before it.
  const dir = shortDir(t, {})
  const file = join(dir, 'p.yaml')
  const minimal = parseConfig('log:\n', file)
  t.strictSame(JSON.parse(JSON.stringify(minimal)), {
    source: file,
    upstreamFrom: 'default',
    listen: [
      { kind: 'unix', name: `unix:${join(dir, 'portcullis.sock')}`, path: join(dir, 'portcullis.sock'), mode: 0o600, identity: { subject: userInfo().username, roles: ['admin'] } },
      { kind: 'tcp', name: 'tcp:127.0.0.1:2375', host: '127.0.0.1', port: 2375 },
    ],
    upstream: { kind: 'unix', path: '/var/run/docker.sock', url: 'unix:///var/run/docker.sock' },
    hostPaths: 'auto',
    api: { minVersion: '1.24', maxVersion: '1.56' },
    limits: { jsonBodyBytes: 1048576, bufferedBytes: 268435456 },
    rates: { roles: { admin: {}, tenant: { per: ['tenant'], read: { rate: 100, burst: 400 }, write: { rate: 20, burst: 200 }, transfer: { rate: 2, burst: 50 }, sessions: 64, streams: 128 } }, others: { per: ['tenant'], read: { rate: 100, burst: 400 }, write: { rate: 20, burst: 200 }, transfer: { rate: 2, burst: 50 }, sessions: 64, streams: 128 } },
    auth: {},
    policy: { dir: join(dir, 'policies') },
    audit: { file: join(dir, 'audit.jsonl'), stdout: false, level: 'metadata' },
    metrics: {},
    registries: { credentials: null },
    provenance: { file: join(dir, 'provenance.jsonl') },
    log: { level: 'info' },
    shutdown: { graceSeconds: 10 },
    workers: 1,
  }, 'a file that sets nothing')
  t.strictSame(JSON.parse(JSON.stringify(defaultConfig(dir))), { ...JSON.parse(JSON.stringify(minimal)), source: null }, 'no file at all')

  // Defaults below the top level, filled in when their parent is given.
  const nested = parseConfig(`listen: [{ unix: s.sock, identity: { subject: a } }]
auth: { mtls: { roles: OU } }
policy: { database: { url: "postgres://h/db" } }
audit: { transport: { target: x } }
`, file)
  t.strictSame({ ...nested.listen[0]?.identity }, { subject: 'a', roles: [] }, 'identity.roles: none')
  t.strictSame(JSON.parse(JSON.stringify(nested.auth.mtls)), { subject: ['CN'], tenant: ['O'], roles: ['OU'] }, 'auth.mtls: subject CN, tenant O')
  t.strictSame(defaultMtlsMapping(), { subject: ['CN'], tenant: ['O'], roles: [] }, 'auth.mtls left out: the same defaults')
  t.equal(nested.policy.database?.channel, 'portcullis_policy', 'policy.database.channel')
  t.strictSame(JSON.parse(JSON.stringify(nested.audit)), { file: join(dir, 'audit.jsonl'), stdout: false, level: 'metadata', transport: { target: 'x' } }, 'audit: fsync, onFailure, redactEnv and rotate stay absent')
  t.match(describeConfig(nested)['audit'], { fsync: false, onFailure: 'closed', redactEnv: true, rotate: {} }, 'and are shown with the defaults src/audit applies')
})

t.test('a full valid file', { skip: OPENSSL ? false : 'openssl not available' }, async (t) => {
  const dir = shortDir(t, { tls: {}, keys: {} })
  const server = selfSigned(join(dir, 'tls'), 'server-')
  const client = selfSigned(join(dir, 'tls'), 'client-')
  const ca = join(dir, 'tls', 'ca.pem')
  writeFileSync(ca, readFileSync(server.cert))
  const secret = 'correct horse battery staple, but longer'
  const file = join(dir, 'portcullis.yaml')
  writeFileSync(
    file,
    `# Portcullis
listen:
  - unix: /tmp/portcullis-test.sock
    mode: "0660"
    group: root
    identity: { subject: ops, tenant: acme, roles: [admin, viewer] }
  - tcp: 127.0.0.1:2375
    name: plain
    anonymous: true
  - tcp: 0.0.0.0:2376
    tls: { cert: tls/server-c.pem, key: tls/server-k.pem, ca: tls/ca.pem }
  - tcp: "[::1]:2377"
upstream:
  url: tcp://10.0.0.5:2376
  tls: { cert: tls/client-c.pem, key: tls/client-k.pem, ca: tls/ca.pem }
api: { minVersion: "1.40", maxVersion: 1.50 }
limits: { jsonBodyBytes: 2097152 }
auth:
  jwt:
    secret: "${secret}"
    issuer: https://issuer.example
    audience: [portcullis, docker]
    algorithms: [HS256, HS512]
    clockToleranceSeconds: 30
    claims: { subject: sub, tenant: org, roles: groups }
policy: { dir: ./policies }
audit: { file: ./audit.jsonl, stdout: true, level: request }
metrics: { listen: 127.0.0.1:9323 }
log: { level: debug }
shutdown: { graceSeconds: 2.5 }
`
  )
  const c = loadConfig(file)
  t.equal(c.source, file)
  t.equal(c.listen.length, 4)

  const u = unixListener(c, 0)
  t.equal(u.path, '/tmp/portcullis-test.sock')
  t.equal(u.name, 'unix:/tmp/portcullis-test.sock')
  t.equal(u.mode, 0o660)
  t.equal(u.group, 'root')
  t.equal(u.gid, 0)
  t.same(u.identity, { subject: 'ops', tenant: 'acme', roles: ['admin', 'viewer'] })

  const plain = tcpListener(c, 1)
  t.same(plain, { kind: 'tcp', name: 'plain', host: '127.0.0.1', port: 2375, anonymous: true })

  const secure = tcpListener(c, 2)
  t.equal(secure.name, 'tcp:0.0.0.0:2376')
  t.equal(secure.tls?.cert, server.cert)
  t.equal(secure.tls?.key, server.key)
  t.equal(secure.tls?.ca, ca)
  t.ok(secure.tls?.material.cert.equals(readFileSync(server.cert)), 'cert material loaded')
  t.ok(secure.tls?.material.key.equals(readFileSync(server.key)), 'key material loaded')
  t.ok(secure.tls?.material.ca?.equals(readFileSync(ca)), 'ca material loaded')

  const v6 = tcpListener(c, 3)
  t.equal(v6.host, '::1')
  t.equal(v6.port, 2377)
  t.equal(v6.name, 'tcp:[::1]:2377')

  t.equal(c.upstream.kind, 'tcp')
  if (c.upstream.kind === 'tcp') {
    t.equal(c.upstream.host, '10.0.0.5')
    t.equal(c.upstream.port, 2376)
    t.equal(c.upstream.url, 'tcp://10.0.0.5:2376')
    t.equal(c.upstream.tls?.cert, client.cert)
    t.ok(c.upstream.tls?.material.key.equals(readFileSync(client.key)))
  }
  // An unquoted 1.50 is a YAML float; it is read as written, not as "1.5".
  t.same(c.api, { minVersion: '1.40', maxVersion: '1.50' })
  t.equal(c.limits.jsonBodyBytes, 2097152)
  t.same(c.auth.jwt, {
    secret,
    issuer: 'https://issuer.example',
    audience: ['portcullis', 'docker'],
    algorithms: ['HS256', 'HS512'],
    clockToleranceSeconds: 30,
    claims: { subject: 'sub', tenant: 'org', roles: 'groups' },
  })
  t.same(c.policy, { dir: join(dir, 'policies') })
  t.same(c.audit, { file: join(dir, 'audit.jsonl'), stdout: true, level: 'request' })
  t.same(c.metrics, { listen: { host: '127.0.0.1', port: 9323 } })
  t.equal(c.log.level, 'debug')
  t.equal(c.shutdown.graceSeconds, 2.5)
  t.ok(Object.isFrozen(secure.tls), 'tls block is frozen')
  t.ok(Object.isFrozen(secure.tls?.material), 'material object is frozen')
  t.ok(Object.isFrozen(c.auth.jwt?.audience), 'nested arrays are frozen')

  // describeConfig: JSON-safe, no secrets, no key material.
  const summary = describeConfig(c)
  const json = JSON.stringify(summary)
  t.same(JSON.parse(json), summary, 'summary survives a JSON round trip')
  t.notOk(json.includes(secret), 'jwt secret is not in the summary')
  t.ok(json.includes('<redacted>'), 'jwt secret is redacted')
  t.notOk(json.includes('PRIVATE KEY'), 'no key material')
  t.notOk(json.includes('BEGIN CERTIFICATE'), 'no certificate material')
  t.match(summary, {
    source: file,
    listen: [
      { kind: 'unix', path: '/tmp/portcullis-test.sock', mode: '0660', group: 'root', gid: 0 },
      { kind: 'tcp', name: 'plain', address: '127.0.0.1:2375', anonymous: true },
      { kind: 'tcp', address: '0.0.0.0:2376', tls: { cert: server.cert, key: server.key, ca, clientCertificates: 'required' } },
      { kind: 'tcp', address: '[::1]:2377' },
    ],
    upstream: { kind: 'tcp', url: 'tcp://10.0.0.5:2376', tls: { cert: client.cert } },
    auth: { jwt: { secret: '<redacted>', issuer: 'https://issuer.example' } },
    metrics: { listen: '127.0.0.1:9323' },
  })
})

t.test('a file with many problems reports all of them', async (t) => {
  const dir = shortDir(t, {})
  const file = join(dir, 'bad.yaml')
  writeFileSync(
    file,
    // An absolute, short socket path: a relative one resolves under the
    // fixture directory, whose length depends on where the checkout lives and
    // can pass the 107-byte limit of sun_path (an extra, unexpected problem).
    `listen:
  - unix: /tmp/portcullis-config-test.sock
    mode: "0999"
    group: no-such-group-portcullis
  - tcp: 127.0.0.1:70000
  - tcp: abc
  - tcp: 0.0.0.0:2376
    tls: { cert: missing-cert.pem, ca: /nonexistent/ca.pem }
  - unix: /tmp/a.sock
    tcp: 127.0.0.1:1
  - {}
upstream: ftp://example.com:21
api: { minVersion: "1.10", maxVersion: "2.0" }
limits: { jsonBodyBytes: -5 }
auth:
  jwt:
    secret: s
    jwksFile: ./jwks.json
    algorithms: [none, HS999]
    surprise: 1
policy: { dir: 42 }
audit: { level: verbose }
metrics: { listen: abc }
log: { level: loud }
shutdown: { graceSeconds: "ten" }
unknownKey: true
`
  )
  const problems = problemsOf(() => loadConfig(file))
  const expected = [
    'unknownKey: unknown key',
    'listen[0].mode: expected an octal mode between "0000" and "0777" (e.g. "0660"), got "0999"',
    'listen[0].group: unknown group "no-such-group-portcullis" (not found in /etc/group; use a numeric gid)',
    'listen[1].tcp: invalid port "70000" in "127.0.0.1:70000", expected 0-65535',
    'listen[2].tcp: expected host:port, got "abc"',
    'listen[3].tls.key: required: TLS needs both cert and key',
    `listen[3].tls.cert: file not readable: ${join(dir, 'missing-cert.pem')} (ENOENT)`,
    'listen[3].tls.ca: file not readable: /nonexistent/ca.pem (ENOENT)',
    'listen[4]: give exactly one of unix or tcp, not both',
    'listen[5]: missing unix: <socket path>, tcp: <host:port> or systemd: <socket name>',
    'upstream: unsupported scheme "ftp://" in "ftp://example.com:21", expected unix:// or tcp:// (http:// and https:// are also accepted)',
    'api.minVersion: must be between 1.24 and 1.56, got 1.10',
    'api.maxVersion: expected a version of the form 1.NN (e.g. "1.24"), got "2.0"',
    'limits.jsonBodyBytes: must be at least 1, got -5',
    'auth.jwt.surprise: unknown key',
    'auth.jwt: exactly one of secret, publicKeyFile or jwksFile is allowed, got secret and jwksFile',
    `auth.jwt.jwksFile: file not readable: ${join(dir, 'jwks.json')} (ENOENT)`,
    'auth.jwt.algorithms[0]: "none" is never allowed',
    'auth.jwt.algorithms[1]: unsupported algorithm "HS999", expected one of HS256, HS384, HS512, RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, ES512',
    'policy.dir: expected a string, got number 42',
    'audit.level: expected one of metadata, facts, request, got "verbose"',
    'metrics.listen: expected host:port, got "abc"',
    'log.level: expected one of fatal, error, warn, info, debug, trace, silent, got "loud"',
    'shutdown.graceSeconds: expected a number, got "ten"',
  ]
  for (const p of expected) t.ok(problems.includes(p), `reports: ${p}`)
  t.equal(problems.length, expected.length, 'and nothing else')
  t.same(problems.filter((p) => !expected.includes(p)), [], 'no unexpected problems')

  // The error message lists them too.
  try {
    loadConfig(file)
  } catch (err) {
    t.type(err, ConfigError)
    t.match((err as Error).message, /24 problems/)
    t.match((err as Error).message, /unknownKey: unknown key/)
  }
})

t.test('unknown keys at every level', async (t) => {
  const problems = problemsOf(() =>
    parseConfig(
      `bogus: 1
listen:
  - tcp: 127.0.0.1:1
    extra: 2
    identity: { subject: a, rolez: [x] }
upstream: { url: "unix:///var/run/docker.sock", verify: true }
api: { min: "1.30" }
auth: { oauth: {} }
audit: { path: x }
metrics: { port: 1 }
`,
      '/etc/portcullis/p.yaml'
    )
  )
  t.same([...problems].sort(), [
    'api.min: unknown key',
    'audit.path: unknown key',
    'auth.oauth: unknown key',
    'bogus: unknown key',
    'listen[0].extra: unknown key',
    'listen[0].identity.rolez: unknown key',
    'metrics.port: unknown key',
    'upstream.verify: unknown key',
  ])
})

t.test('tcp addresses and ports', async (t) => {
  const bad = (addr: string): string[] => problemsOf(() => parseConfig(`listen:\n  - tcp: "${addr}"\n`, '/x/p.yaml'))
  t.same(bad('127.0.0.1:65536'), ['listen[0].tcp: invalid port "65536" in "127.0.0.1:65536", expected 0-65535'])
  t.same(bad('127.0.0.1:-1'), ['listen[0].tcp: invalid port "-1" in "127.0.0.1:-1", expected 0-65535'])
  t.same(bad('127.0.0.1:http'), ['listen[0].tcp: invalid port "http" in "127.0.0.1:http", expected 0-65535'])
  t.same(bad('127.0.0.1:'), ['listen[0].tcp: expected host:port, got "127.0.0.1:" (the port is missing)'])
  t.same(bad(':2375'), ['listen[0].tcp: expected host:port, got ":2375" (the host is missing)'])
  t.same(bad('::1:2375'), ['listen[0].tcp: IPv6 addresses must be written in brackets, e.g. "[::1]:2375", got "::1:2375"'])
  t.same(bad('[zz::1]:2375'), ['listen[0].tcp: invalid IPv6 address "zz::1" in "[zz::1]:2375"'])
  t.same(bad('300.1.1.1:80'), ['listen[0].tcp: invalid host "300.1.1.1" in "300.1.1.1:80"'])
  t.same(bad('bad host:80'), ['listen[0].tcp: invalid host "bad host" in "bad host:80"'])
  t.same(problemsOf(() => parseConfig('listen:\n  - tcp: 2375\n', '/x/p.yaml')), ['listen[0].tcp: expected host:port, got number 2375'])

  const ok = parseConfig('listen:\n  - tcp: localhost:0\n  - tcp: 127.0.0.1:0\n  - tcp: "[::]:65535"\n', '/x/p.yaml')
  t.same(
    ok.listen.map((l) => (l.kind === 'tcp' ? [l.host, l.port] : [])),
    [['localhost', 0], ['127.0.0.1', 0], ['::', 65535]]
  )
})

t.test('the upstream from --upstream, the file, DOCKER_HOST, or the default', async (t) => {
  const env = { DOCKER_HOST: 'unix:///run/user/1000/docker.sock' }
  const file = '/etc/portcullis/p.yaml'
  const from = (c: Config): [string, string | undefined] => [c.upstream.url, c.upstreamFrom]
  t.same(from(parseConfig('log: { level: info }\n', file)), ['unix:///var/run/docker.sock', 'default'], 'nothing given: the default')
  t.same(from(parseConfig('log: { level: info }\n', file, { env })), ['unix:///run/user/1000/docker.sock', 'DOCKER_HOST'], 'DOCKER_HOST when the file has none')
  t.same(from(parseConfig('upstream: tcp://10.0.0.1:2375\n', file, { env })), ['tcp://10.0.0.1:2375', 'config'], 'the file over DOCKER_HOST')
  t.same(from(parseConfig('upstream: tcp://10.0.0.1:2375\n', file, { env, flag: 'unix:///srv/docker.sock' })), ['unix:///srv/docker.sock', '--upstream'], '--upstream over both')
  t.same(from(defaultConfig('/home/u/src', { env: {}, flag: 'unix://run/d.sock', cwd: '/home/u' })), ['unix:///home/u/run/d.sock', '--upstream'], 'a relative path given on the command line is relative to the working directory')
  t.same(from(defaultConfig('/home/u/src', { env: { DOCKER_HOST: '' } })), ['unix:///var/run/docker.sock', 'default'], 'an empty DOCKER_HOST is none')
  t.same(from(defaultConfig('/home/u/src', { env: { DOCKER_HOST: 'tcp://docker.internal' } })), ['tcp://docker.internal:2375', 'DOCKER_HOST'], 'tcp://host: port 2375, as the docker CLI reads it')
  t.same(problemsOf(() => defaultConfig('/home/u/src', { env: { DOCKER_HOST: 'ssh://me@host' } })), [
    'DOCKER_HOST: unsupported scheme "ssh://" in "ssh://me@host", expected unix:// or tcp:// (http:// and https:// are also accepted)',
  ], 'a DOCKER_HOST the gateway cannot use is named as such')
  t.same(problemsOf(() => parseConfig('log: { level: info }\n', file, { flag: 'docker.sock' })), ['--upstream: expected unix:///path or tcp://host:port, got "docker.sock"'])
  t.match(describeConfig(parseConfig('log: { level: info }\n', file, { env })), { upstream: { url: 'unix:///run/user/1000/docker.sock', from: 'DOCKER_HOST' } }, 'the start-up summary says where it came from')

  // DOCKER_TLS_VERIFY: the client certificate, key and CA from DOCKER_CERT_PATH, as the docker CLI takes them.
  const certs = shortDir(t, {})
  const missing = problemsOf(() => defaultConfig('/home/u/src', { env: { DOCKER_HOST: 'tcp://10.0.0.5', DOCKER_TLS_VERIFY: '1', DOCKER_CERT_PATH: certs } }))
  t.same(missing, ['cert', 'key', 'ca'].map((f) => `DOCKER_HOST.tls.${f}: file not readable: ${join(certs, `${f}.pem`)} (ENOENT)`), 'DOCKER_TLS_VERIFY reads DOCKER_CERT_PATH/{cert,key,ca}.pem')
  if (OPENSSL) {
    const pair = selfSigned(certs)
    writeFileSync(join(certs, 'cert.pem'), readFileSync(pair.cert))
    writeFileSync(join(certs, 'key.pem'), readFileSync(pair.key))
    writeFileSync(join(certs, 'ca.pem'), readFileSync(pair.cert))
    const c = defaultConfig('/home/u/src', { env: { DOCKER_HOST: 'tcp://10.0.0.5', DOCKER_TLS_VERIFY: '1', DOCKER_CERT_PATH: certs } })
    t.match(c.upstream, { kind: 'tcp', url: 'tcp://10.0.0.5:2376', tls: { cert: join(certs, 'cert.pem'), key: join(certs, 'key.pem'), ca: join(certs, 'ca.pem') } }, 'TLS, port 2376 by default')
  }
})

t.test('an upstream that is one of the gateway\'s own listeners is refused', async (t) => {
  t.same(problemsOf(() => defaultConfig('/home/u/src', { env: { DOCKER_HOST: 'unix:///home/u/src/portcullis.sock' } })), [
    "DOCKER_HOST: unix:///home/u/src/portcullis.sock is this gateway's own listener (listen[0]): it would forward every request to itself; give the engine's address with --upstream (e.g. --upstream unix:///var/run/docker.sock) or unset DOCKER_HOST",
  ])
  t.same(problemsOf(() => defaultConfig('/home/u/src', { flag: 'tcp://127.0.0.1:2375' })), [
    "--upstream: tcp://127.0.0.1:2375 is this gateway's own listener (listen[1]): it would forward every request to itself; give the engine's address with --upstream (e.g. --upstream unix:///var/run/docker.sock)",
  ])
  t.same(problemsOf(() => parseConfig('listen: [{ tcp: "0.0.0.0:2375", anonymous: true }]\nupstream: tcp://localhost:2375\n', '/etc/portcullis/p.yaml')), [
    'listen[0].tcp: is the upstream tcp://localhost:2375; the gateway cannot listen on the address it forwards to',
  ], 'a wildcard listener and a loopback upstream on its port')
  // The same socket through a symlinked directory.
  const dir = mkdtempSync(join(tmpdir(), 'pcfg-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  mkdirSync(join(dir, 'real'))
  symlinkSync(join(dir, 'real'), join(dir, 'link'))
  t.same(problemsOf(() => parseConfig(`listen: [{ unix: ${join(dir, 'real', 'gw.sock')}, anonymous: true }]\n`, join(dir, 'p.yaml'), { env: { DOCKER_HOST: `unix://${join(dir, 'link', 'gw.sock')}` } })), [
    `DOCKER_HOST: unix://${join(dir, 'link', 'gw.sock')} is this gateway's own listener (listen[0]): it would forward every request to itself; give the engine's address with --upstream (e.g. --upstream unix:///var/run/docker.sock) or unset DOCKER_HOST`,
  ])
  t.same(parseConfig('listen: [{ tcp: "127.0.0.1:2375", anonymous: true }]\nupstream: tcp://127.0.0.1:2376\n', '/etc/portcullis/p.yaml').upstream.url, 'tcp://127.0.0.1:2376', 'another port is another address')
})

t.test('upstream URLs', async (t) => {
  const up = (yaml: string): Config['upstream'] => parseConfig(`upstream: ${yaml}\n`, '/etc/portcullis/p.yaml').upstream
  t.same(up('unix:///run/docker.sock'), { kind: 'unix', path: '/run/docker.sock', url: 'unix:///run/docker.sock' })
  t.same(up('unix://docker.sock'), { kind: 'unix', path: '/etc/portcullis/docker.sock', url: 'unix:///etc/portcullis/docker.sock' })
  t.same(up('tcp://10.0.0.1:2375'), { kind: 'tcp', host: '10.0.0.1', port: 2375, url: 'tcp://10.0.0.1:2375' })
  t.same(up('http://docker.internal:2375/'), { kind: 'tcp', host: 'docker.internal', port: 2375, url: 'tcp://docker.internal:2375' })
  t.same(up('"tcp://[fd00::1]:2375"'), { kind: 'tcp', host: 'fd00::1', port: 2375, url: 'tcp://[fd00::1]:2375' })
  t.same(up('{ url: "tcp://h:1" }'), { kind: 'tcp', host: 'h', port: 1, url: 'tcp://h:1' })

  const bad = (yaml: string): string[] => problemsOf(() => parseConfig(`upstream: ${yaml}\n`, '/etc/portcullis/p.yaml'))
  t.same(bad('ssh://host:22'), [
    'upstream: unsupported scheme "ssh://" in "ssh://host:22", expected unix:// or tcp:// (http:// and https:// are also accepted)',
  ])
  t.same(bad('/var/run/docker.sock'), ['upstream: expected unix:///path or tcp://host:port, got "/var/run/docker.sock"'])
  t.same(bad('tcp://host'), ['upstream: expected host:port, got "host"'])
  t.same(bad('https://host:2376'), ['upstream: https:// requires tls: { cert, key } (use the long form: { url, tls })'])
  t.same(bad('{ url: "unix:///var/run/docker.sock", tls: { cert: a, key: b } }'), [
    'upstream.tls.cert: file not readable: /etc/portcullis/a (ENOENT)',
    'upstream.tls.key: file not readable: /etc/portcullis/b (ENOENT)',
    'upstream.tls: only allowed with a tcp upstream',
  ])
  t.same(bad('{ tls: {} }'), [
    'upstream.url: required',
    'upstream.tls.cert: required: TLS needs both cert and key',
    'upstream.tls.key: required: TLS needs both cert and key',
  ])
  t.same(bad('42'), ['upstream: expected a URL (unix:///path or tcp://host:port) or a mapping with url and tls, got number 42'])
})

t.test('policy.database: a PostgreSQL connection string, named without its password', async (t) => {
  const db = (yaml: string): Config['policy'] => parseConfig(`policy: ${yaml}\n`, '/etc/portcullis/p.yaml').policy
  t.same(db('{ dir: pol, database: { url: "postgres://gw:s3cret@db.example:5433/policy" } }'), {
    dir: '/etc/portcullis/pol',
    database: { url: 'postgres://gw:s3cret@db.example:5433/policy', where: 'db.example:5433/policy', channel: 'portcullis_policy' },
  })
  t.same(db('{ database: { url: "postgresql://gw@/policy?host=/run/postgresql", channel: gw_policy } }').database,
    { url: 'postgresql://gw@/policy?host=/run/postgresql', where: '/run/postgresql/policy', channel: 'gw_policy' })
  t.same(db('{ database: { url: "postgres://gw@db/policy" } }').database?.where, 'db:5432/policy', 'default port')
  t.notOk('database' in db('{ dir: pol }'), 'absent: the policy is read from files')
  const c = parseConfig('policy: { database: { url: "postgres://gw:s3cret@db.example/policy" } }\n', '/etc/portcullis/p.yaml')
  t.same(describeConfig(c)['policy'], { dir: '/etc/portcullis/policies', database: { where: 'db.example:5432/policy', channel: 'portcullis_policy' } }, 'described by where it is')
  t.notOk(JSON.stringify(describeConfig(c)).includes('s3cret'), 'never with the password')

  const bad = (yaml: string): string[] => problemsOf(() => parseConfig(`policy: ${yaml}\n`, '/etc/portcullis/p.yaml'))
  t.same(bad('{ database: {} }'), ['policy.database.url: required: a PostgreSQL connection string, e.g. postgres://portcullis@db.example:5432/portcullis'])
  t.same(bad('{ database: { url: "mysql://u:pw@h/db" } }'), ['policy.database.url: expected a postgres:// or postgresql:// URL, got scheme "mysql"'])
  t.same(bad('{ database: { url: "postgres://u:pw@h" } }'), ['policy.database.url: names no database (postgres://user@host:port/DATABASE)'])
  t.same(bad('{ database: { url: "not a url" } }'), ['policy.database.url: is not a URL (expected postgres://user@host:port/database)'])
  t.same(bad('{ database: { url: "postgres://h/db", channel: "Bad-Channel", table: t } }'), [
    'policy.database.table: unknown key',
    'policy.database.channel: must be a lower-case PostgreSQL identifier (letters, digits, _), got "Bad-Channel"',
  ])
  t.same(bad('{ database: "postgres://h/db" }'), ['policy.database: expected a mapping, got "postgres://h/db"'])
  for (const p of bad('{ database: { url: "mysql://u:s3cret@h/db" } }')) t.notOk(p.includes('s3cret'), 'a problem never repeats the password')
})

t.test('jwt key sources and algorithms', async (t) => {
  const dir = shortDir(t, {})
  const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 })
  const ec = generateKeyPairSync('ec', { namedCurve: 'prime256v1' })
  writeFileSync(join(dir, 'rsa.pub'), rsa.publicKey.export({ type: 'spki', format: 'pem' }))
  writeFileSync(join(dir, 'ec.pub'), ec.publicKey.export({ type: 'spki', format: 'pem' }))
  writeFileSync(join(dir, 'jwks.json'), JSON.stringify({ keys: [{ ...rsa.publicKey.export({ format: 'jwk' }), kid: 'one' }] }))
  writeFileSync(join(dir, 'oct.json'), JSON.stringify({ keys: [{ kty: 'oct', k: 'c2VjcmV0' }] }))
  writeFileSync(join(dir, 'garbage.pub'), 'not a key')
  const file = join(dir, 'p.yaml')
  const jwt = (body: string): Config['auth'] => parseConfig(`auth:\n  jwt: ${body}\n`, file).auth
  const bad = (body: string): string[] => problemsOf(() => parseConfig(`auth:\n  jwt: ${body}\n`, file))

  t.same(bad('{ secret: s, publicKeyFile: rsa.pub }'), [
    'auth.jwt: exactly one of secret, publicKeyFile or jwksFile is allowed, got secret and publicKeyFile',
  ])
  t.same(bad('{ issuer: x }'), ['auth.jwt: exactly one of secret, publicKeyFile or jwksFile is required'])
  t.same(bad('{ secret: "" }'), ['auth.jwt.secret: must not be empty'])

  t.same(jwt('{ publicKeyFile: rsa.pub, algorithms: [RS256, PS512] }'), {
    jwt: { publicKeyFile: join(dir, 'rsa.pub'), algorithms: ['RS256', 'PS512'] },
  })
  t.same(jwt('{ jwksFile: jwks.json, audience: portcullis }'), { jwt: { jwksFile: join(dir, 'jwks.json'), audience: 'portcullis' } })
  t.same(jwt('{ publicKeyFile: ec.pub, algorithms: [ES256] }').jwt?.algorithms, ['ES256'])

  t.same(bad('{ publicKeyFile: rsa.pub, algorithms: [HS256] }'), [
    'auth.jwt.algorithms[0]: "HS256" cannot be used with publicKeyFile (HMAC with a public key lets anyone forge tokens)',
  ])
  t.same(bad('{ secret: s, algorithms: [RS256] }'), [
    'auth.jwt.algorithms[0]: "RS256" cannot be used with secret (a shared secret needs HS256, HS384 or HS512)',
  ])
  t.same(bad('{ publicKeyFile: ec.pub, algorithms: [RS256, ES384] }'), [
    'auth.jwt.algorithms[0]: "RS256" does not fit the EC key in publicKeyFile',
    'auth.jwt.algorithms[1]: "ES384" does not fit the EC key (curve prime256v1) in publicKeyFile',
  ])
  t.same(bad('{ secret: s, algorithms: [None] }'), ['auth.jwt.algorithms[0]: "none" is never allowed'])
  t.same(bad('{ secret: s, algorithms: [] }'), ['auth.jwt.algorithms: must not be an empty list'])
  t.match(bad('{ publicKeyFile: garbage.pub }'), [/^auth\.jwt\.publicKeyFile: not a valid public key \(.*\): .*garbage\.pub$/])
  t.same(bad('{ jwksFile: oct.json }'), [
    `auth.jwt.jwksFile: keys[0]: symmetric ("oct") keys are not allowed in a JWKS file; use auth.jwt.secret: ${join(dir, 'oct.json')}`,
  ])
  t.same(bad('{ jwksFile: rsa.pub }').length, 1)
  t.same(bad('{ secret: s, clockToleranceSeconds: -1, audience: [], claims: { subject: 1, group: x } }'), [
    'auth.jwt.audience: must not be an empty list',
    'auth.jwt.clockToleranceSeconds: must be between 0 and 3600, got -1',
    'auth.jwt.claims.group: unknown key',
    'auth.jwt.claims.subject: expected a string, got number 1',
  ])
})

t.test('jwt keys and requireExp', async (t) => {
  const dir = shortDir(t, {})
  const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 })
  const p256 = generateKeyPairSync('ec', { namedCurve: 'prime256v1' })
  const p384 = generateKeyPairSync('ec', { namedCurve: 'secp384r1' })
  const ed = generateKeyPairSync('ed25519')
  const jwk = (k: { publicKey: import('node:crypto').KeyObject }, extra: object = {}): object => ({ ...k.publicKey.export({ format: 'jwk' }), ...extra })
  const files: Record<string, string | object> = {
    'p384.pub': p384.publicKey.export({ type: 'spki', format: 'pem' }) as string,
    'ed.pub': ed.publicKey.export({ type: 'spki', format: 'pem' }) as string,
    'two.json': { keys: [jwk(rsa, { kid: 'r' }), jwk(p256, { kid: 'e' })] },
    'dup.json': { keys: [jwk(rsa, { kid: 'same' }), jwk(p256, { kid: 'same' })] },
    'enc.json': { keys: [jwk(rsa, { kid: 'r', use: 'enc' })] },
    'mixed-use.json': { keys: [jwk(rsa, { kid: 'r', use: 'enc' }), jwk(p256, { kid: 'e', use: 'sig' })] },
    'badalg.json': { keys: [jwk(rsa, { alg: 'ES256' })] },
    'hsalg.json': { keys: [jwk(rsa, { alg: 'HS256' })] },
    'broken.json': { keys: [{ kty: 'RSA', n: 'AQAB' }] },
    'numkid.json': { keys: [jwk(rsa, { kid: 7 })] },
    'p384.json': { keys: [jwk(p384, { kid: 'x' })] },
  }
  for (const [name, body] of Object.entries(files)) writeFileSync(join(dir, name), typeof body === 'string' ? body : JSON.stringify(body))
  const file = join(dir, 'p.yaml')
  const jwt = (body: string): Config['auth'] => parseConfig(`auth:\n  jwt: ${body}\n`, file).auth
  const bad = (body: string): string[] => problemsOf(() => parseConfig(`auth:\n  jwt: ${body}\n`, file))

  t.same(jwt('{ secret: s, requireExp: false }'), { jwt: { secret: 's', requireExp: false } }, 'requireExp: false is kept')
  t.same(jwt('{ secret: s }').jwt?.requireExp, undefined, 'requireExp left out: the authenticator requires exp')
  t.same(bad('{ secret: s, requireExp: "no" }'), ['auth.jwt.requireExp: expected true or false, got "no"'])
  t.same(jwt('{ secret: s, claims: { subject: email, tenant: org, roles: groups } }').jwt?.claims, { subject: 'email', tenant: 'org', roles: 'groups' })

  // Keys the default algorithms (RS256, ES256) cannot use need algorithms to be set.
  t.same(bad('{ publicKeyFile: p384.pub }'), [
    'auth.jwt.publicKeyFile: the default algorithms (RS256, ES256) do not fit the ec key; set auth.jwt.algorithms',
  ])
  t.same(jwt('{ publicKeyFile: p384.pub, algorithms: [ES384] }').jwt?.algorithms, ['ES384'])
  t.same(bad('{ publicKeyFile: ed.pub }'), [
    'auth.jwt.publicKeyFile: the default algorithms (RS256, ES256) do not fit the ed25519 key; set auth.jwt.algorithms',
  ])
  t.same(bad('{ jwksFile: p384.json }'), [
    'auth.jwt.jwksFile: no key in the set can verify the default algorithms (RS256, ES256); set auth.jwt.algorithms',
  ])
  t.same(jwt('{ jwksFile: two.json, algorithms: [PS512] }').jwt?.algorithms, ['PS512'], 'the RSA key of the set fits PS512')
  t.same(jwt('{ jwksFile: two.json, algorithms: [ES256] }').jwt?.algorithms, ['ES256'], 'one key of the set fits: enough')
  t.same(bad('{ jwksFile: p384.json, algorithms: [RS256] }'), [
    'auth.jwt.jwksFile: no key in the set can verify auth.jwt.algorithms (RS256)',
  ])

  // What a JWKS file may hold.
  t.same(jwt('{ jwksFile: two.json }'), { jwt: { jwksFile: join(dir, 'two.json') } })
  t.same(jwt('{ jwksFile: mixed-use.json }'), { jwt: { jwksFile: join(dir, 'mixed-use.json') } }, 'keys for encryption are left out')
  const jwks = (name: string): string => join(dir, name)
  t.same(bad('{ jwksFile: dup.json }'), [`auth.jwt.jwksFile: keys[1]: duplicate kid "same" (also keys[0]): ${jwks('dup.json')}`])
  t.same(bad('{ jwksFile: enc.json }'), [`auth.jwt.jwksFile: no signing keys (every key has a "use" other than "sig"): ${jwks('enc.json')}`])
  t.same(bad('{ jwksFile: badalg.json }'), [`auth.jwt.jwksFile: "ES256" does not fit the RSA key in keys[0]: ${jwks('badalg.json')}`])
  t.same(bad('{ jwksFile: hsalg.json }'), [`auth.jwt.jwksFile: keys[0]: unsupported "alg" "HS256": ${jwks('hsalg.json')}`])
  t.match(bad('{ jwksFile: broken.json }'), [/^auth\.jwt\.jwksFile: keys\[0\]: not a valid public key \(.*\): .*broken\.json$/])
  t.same(bad('{ jwksFile: numkid.json }'), [`auth.jwt.jwksFile: keys[0]: "kid" must be a string: ${jwks('numkid.json')}`])
})

t.test('auth.mtls: which certificate subject attributes make the identity', async (t) => {
  const file = '/etc/portcullis/p.yaml'
  const mtls = (body: string): Config['auth']['mtls'] => parseConfig(`auth:\n  mtls: ${body}\n`, file).auth.mtls
  const bad = (body: string): string[] => problemsOf(() => parseConfig(`auth:\n  mtls: ${body}\n`, file))

  t.same(parseConfig('auth: {}\n', file).auth, {}, 'not given: left out (the defaults apply: CN, O, no roles)')
  t.same(mtls('{}'), { subject: ['CN'], tenant: ['O'], roles: [] }, 'an empty mapping: the defaults')
  t.same(mtls('{ subject: CN, tenant: O, roles: OU }'), { subject: ['CN'], tenant: ['O'], roles: ['OU'] })
  t.same(mtls('{ subject: [UID, CN], tenant: [O, OU], roles: [OU, title] }'), { subject: ['UID', 'CN'], tenant: ['O', 'OU'], roles: ['OU', 'title'] }, 'lists: first present wins, roles from all')
  t.same(mtls('{ tenant: [], roles: emailAddress }'), { subject: ['CN'], tenant: [], roles: ['emailAddress'] }, 'tenant: [] maps no tenant')
  t.same(bad('{ subject: cn, tenant: Org, roles: [OU, OU], extra: 1 }').sort(), [
    'auth.mtls.extra: unknown key',
    'auth.mtls.roles: names an attribute more than once',
    'auth.mtls.subject: unknown X.509 subject attribute "cn", expected one of CN, O, OU, C, ST, L, street, postalCode, DC, UID, emailAddress, serialNumber, title, GN, SN, initials, pseudonym, name, description, dnQualifier, generationQualifier, businessCategory, organizationIdentifier',
    'auth.mtls.tenant: unknown X.509 subject attribute "Org", expected one of CN, O, OU, C, ST, L, street, postalCode, DC, UID, emailAddress, serialNumber, title, GN, SN, initials, pseudonym, name, description, dnQualifier, generationQualifier, businessCategory, organizationIdentifier',
  ].sort())
  t.same(bad('{ subject: [] }'), ['auth.mtls.subject: must not be an empty list'])
  t.same(bad('{ roles: [CN, 3] }'), ['auth.mtls.roles[1]: expected a string, got number 3'])
  t.match(bad('{ roles: [CN, nope] }'), [/^auth\.mtls\.roles\[1\]: unknown X\.509 subject attribute "nope"/])
  t.same(bad('CN'), ['auth.mtls: expected a mapping, got "CN"'])

  const c = parseConfig('auth:\n  mtls: { roles: OU }\n', file)
  t.same(describeConfig(c)['auth'], { mtls: { subject: ['CN'], tenant: ['O'], roles: ['OU'] } }, 'described at start-up')
  t.ok(Object.isFrozen(c.auth.mtls?.roles), 'frozen')
})

t.test('relative paths resolve against the config file directory', { skip: OPENSSL ? false : 'openssl not available' }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'portcullis-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const etc = join(dir, 'etc')
  mkdirSync(join(etc, 'certs'), { recursive: true })
  selfSigned(join(etc, 'certs'))
  const file = join(etc, 'portcullis.yaml')
  writeFileSync(
    file,
    `listen:
  - unix: run/docker.sock
  - tcp: 127.0.0.1:2376
    tls: { cert: certs/c.pem, key: ./certs/k.pem, ca: ../etc/certs/c.pem }
policy: { dir: policies }
audit: { file: ../var/audit.jsonl }
auth:
  jwt: { publicKeyFile: certs/c.pem }
`
  )
  // Load through a relative path from another working directory.
  const cwd = process.cwd()
  process.chdir(dir)
  t.teardown(() => process.chdir(cwd))
  const c = loadConfig('etc/portcullis.yaml')
  t.equal(c.source, file)
  t.equal(unixListener(c, 0).path, join(etc, 'run', 'docker.sock'))
  const l = tcpListener(c, 1)
  t.equal(l.tls?.cert, join(etc, 'certs', 'c.pem'))
  t.equal(l.tls?.key, join(etc, 'certs', 'k.pem'))
  t.equal(l.tls?.ca, join(etc, 'certs', 'c.pem'))
  t.equal(c.policy.dir, join(etc, 'policies'))
  t.equal(c.audit.file, join(dir, 'var', 'audit.jsonl'))
  t.equal(c.auth.jwt?.publicKeyFile, join(etc, 'certs', 'c.pem'))

  // parseConfig resolves against dirname(source) in the same way.
  const p = parseConfig('policy: { dir: ./p }\n', '/srv/conf/portcullis.yaml')
  t.equal(p.policy.dir, '/srv/conf/p')
  t.equal(unixListener(p, 0).path, '/srv/conf/portcullis.sock')
  t.equal(p.audit.file, '/srv/conf/audit.jsonl')
})

t.test('TLS material is checked', { skip: OPENSSL ? false : 'openssl not available' }, async (t) => {
  const dir = shortDir(t, { 'junk.pem': 'hello\n' })
  selfSigned(dir, 'a-')
  selfSigned(dir, 'b-')
  const file = join(dir, 'p.yaml')
  const bad = (tls: string): string[] => problemsOf(() => parseConfig(`listen:\n  - tcp: 127.0.0.1:1\n    tls: ${tls}\n`, file))
  t.same(bad('{ cert: a-c.pem, key: b-k.pem }'), [`listen[0].tls.key: does not match the certificate ${join(dir, 'a-c.pem')}`])
  t.match(bad('{ cert: junk.pem, key: a-k.pem }'), [/^listen\[0\]\.tls\.cert: not a valid certificate \(.*\): .*junk\.pem$/])
  t.match(bad('{ cert: a-c.pem, key: junk.pem }'), [/^listen\[0\]\.tls\.key: not a valid unencrypted private key \(.*\): .*junk\.pem$/])
  t.same(bad('{ cert: a-c.pem, key: a-k.pem, ca: junk.pem }'), [`listen[0].tls.ca: no PEM certificate found: ${join(dir, 'junk.pem')}`])
  t.same(bad('{ key: a-k.pem }'), ['listen[0].tls.cert: required: TLS needs both cert and key'])
  t.same(bad('{ cert: a-c.pem, key: .. }'), [`listen[0].tls.key: file not readable: ${dir.replace(/\/[^/]+$/, '')} (EISDIR)`])

  // A CA bundle with two certificates is fine.
  writeFileSync(join(dir, 'bundle.pem'), Buffer.concat([readFileSync(join(dir, 'a-c.pem')), readFileSync(join(dir, 'b-c.pem'))]))
  const ok = parseConfig('listen:\n  - tcp: 127.0.0.1:1\n    tls: { cert: a-c.pem, key: a-k.pem, ca: bundle.pem }\n', file)
  t.equal(tcpListener(ok, 0).tls?.ca, join(dir, 'bundle.pem'))
  t.same(describeConfig(ok)['listen'], [
    {
      kind: 'tcp',
      name: 'tcp:127.0.0.1:1',
      address: '127.0.0.1:1',
      tls: { cert: join(dir, 'a-c.pem'), key: join(dir, 'a-k.pem'), ca: join(dir, 'bundle.pem'), clientCertificates: 'required' },
    },
  ])
})

t.test('unix listeners: mode, group, path length', async (t) => {
  const file = '/srv/p.yaml'
  const listen = (body: string): Extract<ListenerConfig, { kind: 'unix' }> => unixListener(parseConfig(`listen:\n  - ${body}\n`, file), 0)
  const bad = (body: string): string[] => problemsOf(() => parseConfig(`listen:\n  - ${body}\n`, file))

  t.equal(listen('{ unix: /s, mode: "0660" }').mode, 0o660)
  t.equal(listen('{ unix: /s, mode: "600" }').mode, 0o600)
  t.equal(listen('{ unix: /s, mode: 0660 }').mode, 0o660, 'leading-zero YAML integer is octal')
  t.equal(listen('{ unix: /s, mode: 0o640 }').mode, 0o640)
  t.equal(listen('{ unix: /s, mode: 432 }').mode, 0o660, 'other numbers are taken at face value')
  t.same(bad('{ unix: /s, mode: 660 }'), ['listen[0].mode: expected an octal mode between "0000" and "0777" (e.g. "0660"), got number 660'])
  t.same(bad('{ unix: /s, mode: "1777" }'), ['listen[0].mode: expected an octal mode between "0000" and "0777" (e.g. "0660"), got "1777"'])
  t.same(bad('{ unix: /s, mode: rw }'), ['listen[0].mode: expected an octal mode between "0000" and "0777" (e.g. "0660"), got "rw"'])

  const byName = listen('{ unix: /s, group: root }')
  t.equal(byName.gid, 0)
  t.equal(byName.group, 'root')
  t.equal(listen('{ unix: /s, group: "0" }').gid, 0)
  const numeric = listen('{ unix: /s, group: 4242 }')
  t.equal(numeric.gid, 4242)
  t.same(bad('{ unix: /s, group: -1 }'), ['listen[0].group: expected a group name or a gid between 0 and 4294967294, got number -1'])

  t.same(bad('{ tcp: "127.0.0.1:1", mode: "0600", group: root }'), [
    'listen[0].mode: only allowed on unix listeners',
    'listen[0].group: only allowed on unix listeners',
  ])
  t.same(bad('{ unix: /s, tls: { cert: a, key: b } }'), ['listen[0].tls: only allowed on tcp listeners'])

  const long = `/tmp/${'x'.repeat(103)}` // 108 bytes
  t.same(bad(`{ unix: ${long} }`), [`listen[0].unix: socket path must be shorter than 108 bytes, got 108: ${long}`])
  t.equal(listen(`{ unix: ${long.slice(0, -1)} }`).path, long.slice(0, -1), '107 bytes is fine')

  t.same(bad('{ unix: /s, identity: { subject: a }, anonymous: true }'), [
    'listen[0].anonymous: cannot be true on a listener that has a fixed identity',
  ])
  t.same(bad('{ unix: /s, identity: { roles: [a, 1] } }'), [
    'listen[0].identity.subject: required',
    'listen[0].identity.roles[1]: expected a string, got number 1',
  ])
  t.same(listen('{ unix: /s, identity: { subject: a } }').identity, { subject: 'a', roles: [] })
})

t.test('containerIdentity on a listener: defaults and what it cannot be given with', async (t) => {
  const file = '/srv/p.yaml'
  const config = (body: string): Config => parseConfig(`listen:\n  - ${body}\n`, file)
  const bad = (body: string): string[] => problemsOf(() => config(body))
  t.same(unixListener(config('{ unix: /s, containerIdentity: {} }'), 0).containerIdentity, { labelPrefix: 'io.portcullis.' }, 'the default prefix')
  t.same(tcpListener(config('{ tcp: "172.17.0.1:2375", containerIdentity: { labelPrefix: acme-, default: { subject: stranger } } }'), 0).containerIdentity,
    { labelPrefix: 'acme-', default: { subject: 'stranger', roles: [] } })
  t.same(bad('{ unix: /s, identity: { subject: a }, containerIdentity: {} }'), [
    'listen[0].identity: cannot be given with containerIdentity; give the identity of callers that are no container as containerIdentity.default',
  ])
  t.same(bad('{ unix: /s, anonymous: true, containerIdentity: { default: { subject: a } } }'), [
    'listen[0].anonymous: cannot be true with containerIdentity.default (callers that are no container get that identity)',
  ])
  t.same(bad('{ unix: /s, containerIdentity: { labelPrefix: "io portcullis" } }'), [
    'listen[0].containerIdentity.labelPrefix: expected a label prefix: letters, digits, dots, dashes and underscores, ending with a dot or a dash (e.g. io.portcullis.), got "io portcullis"',
  ])
  t.same(bad('{ unix: /s, containerIdentity: { roles: [a] } }'), ['listen[0].containerIdentity.roles: unknown key'])
})

t.test('duplicate listeners and overlapping addresses', async (t) => {
  const problems = problemsOf(() =>
    parseConfig(
      `listen:
  - tcp: 127.0.0.1:2375
  - { tcp: 127.0.0.1:2375, name: other }
  - { unix: /run/a.sock, name: api }
  - { unix: /run/b.sock, name: api }
  - unix: /run/../run/a.sock
  - unix: /var/run/docker.sock
  - tcp: 127.0.0.1:0
  - tcp: 127.0.0.1:0
    name: second-ephemeral
metrics: { listen: 127.0.0.1:2375 }
`,
      '/srv/p.yaml'
    )
  )
  t.same(problems, [
    'listen[1].tcp: duplicate address 127.0.0.1:2375 (also used by listen[0])',
    'listen[3].name: duplicate listener name "api" (also used by listen[2])',
    'listen[4].unix: duplicate address /run/a.sock (also used by listen[2])',
    'listen[5].unix: is the upstream socket /var/run/docker.sock; the gateway cannot listen on the socket it forwards to',
    'metrics.listen: 127.0.0.1:2375 is also used by listen[0]',
    'metrics.listen: 127.0.0.1:2375 is also used by listen[1]',
  ])
})

t.test('api window', async (t) => {
  const api = (body: string): Config['api'] => parseConfig(`api: ${body}\n`, '/p.yaml').api
  const bad = (body: string): string[] => problemsOf(() => parseConfig(`api: ${body}\n`, '/p.yaml'))
  t.same(api('{ minVersion: "1.41" }'), { minVersion: '1.41', maxVersion: '1.56' })
  t.same(api('{ maxVersion: 1.30 }'), { minVersion: '1.24', maxVersion: '1.30' })
  t.same(bad('{ minVersion: "1.45", maxVersion: "1.44" }'), ['api: minVersion 1.45 is greater than maxVersion 1.44'])
  t.same(bad('{ minVersion: "1.4" }'), ['api.minVersion: expected a version of the form 1.NN (e.g. "1.24"), got "1.4"'])
  t.same(bad('{ maxVersion: "1.57" }'), ['api.maxVersion: must be between 1.24 and 1.56, got 1.57'])
})

t.test('hostPaths: whether the gateway sees the engine\'s filesystem', async (t) => {
  t.equal(parseConfig('log:\n', '/p.yaml').hostPaths, 'auto', 'auto by default')
  for (const v of ['shared', 'remote', 'auto']) t.equal(parseConfig(`hostPaths: ${v}\n`, '/p.yaml').hostPaths, v)
  t.same(problemsOf(() => parseConfig('hostPaths: local\n', '/p.yaml')), ['hostPaths: expected one of auto, shared, remote, got "local"'])
  t.equal(describeConfig(parseConfig('hostPaths: remote\n', '/p.yaml'))['hostPaths'], 'remote', 'shown in the start-up line')
})

t.test('YAML-level problems', async (t) => {
  const dir = shortDir(t, {})
  t.same(problemsOf(() => parseConfig('', join(dir, 'p.yaml'))), [
    '(root): the configuration is empty; expected a mapping such as "listen: ..."',
  ])
  t.same(problemsOf(() => parseConfig('# only a comment\n', join(dir, 'p.yaml'))).length, 1)
  t.same(problemsOf(() => parseConfig('- a\n- b\n', join(dir, 'p.yaml'))), ['(root): expected a mapping at the top level, got a list'])
  t.same(problemsOf(() => parseConfig('hello\n', join(dir, 'p.yaml'))), ['(root): expected a mapping at the top level, got string "hello"'])

  const syntax = problemsOf(() => parseConfig('log:\n  level: [info\nshutdown: {}\n', join(dir, 'p.yaml')))
  t.equal(syntax.length, 1)
  t.match(syntax[0], /^yaml syntax error: .* at line \d+, column \d+$/)

  t.same(problemsOf(() => parseConfig('log: {level: info}\nlog: {level: debug}\n', join(dir, 'p.yaml'))), [
    'yaml syntax error: Map keys must be unique at line 2, column 1',
  ])
  t.match(problemsOf(() => parseConfig('listen:\n  - tcp: [::1]:2375\n', join(dir, 'p.yaml'))), [/^yaml syntax error: .*line 2/])
  t.match(problemsOf(() => parseConfig('log: *nowhere\n', join(dir, 'p.yaml'))), [/^yaml: Unresolved alias/])

  const missing = join(dir, 'nope.yaml')
  t.same(problemsOf(() => loadConfig(missing)), [`${missing}: cannot read config file (ENOENT)`])

  mkdirSync(join(dir, 'empty'))
  writeFileSync(join(dir, 'empty', 'p.yaml'), '\n')
  t.throws(() => loadConfig(join(dir, 'empty', 'p.yaml')), ConfigError)
})

t.test('misc types and nulls', async (t) => {
  const bad = (yaml: string): string[] => problemsOf(() => parseConfig(yaml, '/p.yaml'))
  t.same(bad('listen: []\n'), ['listen: expected a non-empty list of listeners, got an empty list'])
  t.same(bad('listen:\n'), ['listen: expected a non-empty list of listeners, got nothing (null)'])
  t.same(bad('listen: { tcp: "127.0.0.1:1" }\n'), ['listen: expected a non-empty list of listeners, got a mapping'])
  t.same(bad('listen: [ "127.0.0.1:1" ]\n'), ['listen[0]: expected a mapping, got "127.0.0.1:1"'])
  t.same(bad('upstream:\n'), ['upstream: expected a URL (unix:///path or tcp://host:port) or a mapping with url and tls, got nothing (null)'])
  t.same(bad('api: 5\n'), ['api: expected a mapping, got number 5'])
  t.same(bad('auth:\n  jwt:\n'), ['auth.jwt: expected a mapping, got nothing (null)'])
  t.same(bad('audit: { stdout: yes }\n'), ['audit.stdout: expected true or false, got "yes"'])
  t.same(bad('limits: { jsonBodyBytes: 1.5 }\n'), ['limits.jsonBodyBytes: expected a whole number, got 1.5'])
  t.same(bad('limits: { bufferedBytes: 4194303 }\n'), ['limits.bufferedBytes: must be at least 4194304, got 4194303'], 'one body of the largest size (4 x jsonBodyBytes) must fit')
  t.same(parseConfig('limits: { jsonBodyBytes: 1000, bufferedBytes: 4000 }\n', '/p.yaml').limits, { jsonBodyBytes: 1000, bufferedBytes: 4000 })
  t.equal(parseConfig('limits: { jsonBodyBytes: 134217728 }\n', '/p.yaml').limits.bufferedBytes, 536870912, 'the default grows with a larger body cap')
  t.same(bad('"odd key": 1\n'), ['["odd key"]: unknown key'])

  const noFile = parseConfig('audit: { file: null, stdout: true }\n', '/p.yaml')
  t.same(noFile.audit, { stdout: true, level: 'metadata' }, 'audit.file: null turns the file off')
})

t.test('rates: per role, with clear problems', async (t) => {
  const bad = (yaml: string): string[] => problemsOf(() => parseConfig(yaml, '/p.yaml'))
  t.same(bad('rates: { roles: { tenant: { read: { rate: 0, burst: 1 }, write: { rate: 1 }, per: [tenant, tenant], sessions: -1, bogus: 1 } }, others: 5 }\n'), [
    'rates.roles.tenant.bogus: unknown key',
    'rates.roles.tenant.per: names a key more than once',
    'rates.roles.tenant.read.rate: must be more than 0 requests per second (leave the class out for no limit), got number 0',
    'rates.roles.tenant.write.burst: required: a token bucket is { rate: requests per second, burst: requests at once }',
    'rates.roles.tenant.sessions: must be at least 0, got -1',
    'rates.others: expected a mapping of limits or null (no limit), got number 5',
  ])
  t.same(bad('rates: { roles: { ci: { per: [team], read: 3, streams: 1.5 } } }\n'), [
    'rates.roles.ci.per[0]: expected one of tenant, subject, got "team"',
    'rates.roles.ci.read: expected a mapping { rate, burst } or null (no limit), got number 3',
    'rates.roles.ci.streams: expected a whole number (0: none at all) or null (no limit), got number 1.5',
  ])
  t.same(bad('rates: { roles: { ci: { per: [] } } }\n'), ['rates.roles.ci.per: must name tenant, subject or both'])
  const c = parseConfig('rates: { roles: { ci: { per: [subject], write: { rate: 0.5, burst: 3 }, sessions: 0 } }, others: null }\n', '/p.yaml')
  t.same(c.rates, { roles: { ci: { per: ['subject'], write: { rate: 0.5, burst: 3 }, sessions: 0 } }, others: null }, 'roles given replace the shipped ones; others: null is no limit')
  t.same(describeConfig(c).rates, {
    roles: { ci: { per: ['subject'], read: 'unlimited', write: { rate: 0.5, burst: 3 }, transfer: 'unlimited', sessions: 0, streams: 'unlimited' } },
    others: 'unlimited',
  })
})

t.test('schema problems: one per value, in the words of the branch it was meant for', async (t) => {
  const bad = (yaml: string): string[] => problemsOf(() => parseConfig(yaml, '/etc/portcullis/p.yaml'))
  t.same(bad('policy: { database: { url: "postgres://h/db", channel: "" } }\n'), ['policy.database.channel: must not be empty'], 'not also "must be a PostgreSQL identifier"')
  t.same(bad('auth: { mtls: { roles: [CN, 3] } }\n'), ['auth.mtls.roles[1]: expected a string, got number 3'], 'not also "unknown attribute"')
  t.same(bad('auth: { jwt: { secret: s, audience: [a, ""] } }\n'), ['auth.jwt.audience[1]: must not be empty'], 'a list: the list branch of string | list')
  t.same(bad('auth: { jwt: { secret: s, audience: 5 } }\n'), ['auth.jwt.audience: expected a string or a list of strings, got number 5'], 'neither: both named')
  t.same(bad('upstream: { url: 5 }\n'), ['upstream.url: expected a string, got number 5'], 'a mapping: the mapping branch of url | mapping')
  t.same(bad('audit: { file: 5 }\n'), ['audit.file: expected a string, got number 5'], 'null, which turns the file off, is not offered')
  t.same(bad('listen:\n  - { unix: /s, group: [a] }\n'), ['listen[0].group: expected a group name or a gid between 0 and 4294967294, got a list'])
  t.same(bad('listen:\n  - { tcp: [a] }\n'), ['listen[0].tcp: expected host:port, got a list (quote IPv6 addresses in YAML: "[::1]:2375")'])
  // The file's upstream is checked even where --upstream replaces it: `config check` names every mistake in the file.
  t.same(problemsOf(() => parseConfig('upstream: 5\n', '/etc/portcullis/p.yaml', { flag: 'unix:///srv/docker.sock' })), [
    'upstream: expected a URL (unix:///path or tcp://host:port) or a mapping with url and tls, got number 5',
  ])
  // Problems are listed section by section, whether the schema or a later check found them.
  t.same(bad('log: { level: loud }\nupstream: ftp://h:1\nlisten: [{ tcp: abc }]\nzz: 1\n'), [
    'zz: unknown key',
    'listen[0].tcp: expected host:port, got "abc"',
    'upstream: unsupported scheme "ftp://" in "ftp://h:1", expected unix:// or tcp:// (http:// and https:// are also accepted)',
    'log.level: expected one of fatal, error, warn, info, debug, trace, silent, got "loud"',
  ])
})

t.test('ConfigError', async (t) => {
  const e = new ConfigError(['a: b', 'c: d'], '/x.yaml')
  t.type(e, Error)
  t.equal(e.name, 'ConfigError')
  t.same(e.problems, ['a: b', 'c: d'])
  t.equal(e.message, 'invalid configuration (/x.yaml), 2 problems:\n  - a: b\n  - c: d')
})
