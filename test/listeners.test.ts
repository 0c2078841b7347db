// Listeners and upstreams against the real engine: TLS with and without client
// certificates, gateway -> gateway -> engine chains over TCP and TLS, unix socket
// permissions and stale-socket handling, and an unreachable engine.
import { execFileSync, spawn } from 'node:child_process'
import fs from 'node:fs'
import http from 'node:http'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import pino from 'pino'
import t from 'tap'
import { parseConfig, type Config } from '../src/config'
import { startGateway, type Gateway } from '../src/gateway'
import { CLI28, engine, POLICIES, run, startTestGateway, uniqueName, waitUntil, type TestGateway } from './helpers/gateway'
import { assertTool } from './helpers/tools'

interface Teardown { teardown: (fn: () => unknown) => void }
type LogLine = Record<string, unknown>

function tempDir (t: Teardown, prefix: string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  return dir
}

// ---------------------------------------------------------------------------
// Certificates, generated per run with openssl (no key material is committed).

interface Pki {
  dir: string
  ca: string
  server: string
  serverKey: string
  client: string
  clientKey: string
  /** A client certificate issued by a CA the gateway does not trust. */
  foreignClient: string
  foreignClientKey: string
}

function makePki (dir: string): Pki {
  assertTool('openssl')
  const openssl = (...args: string[]): void => { execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] }) }
  const newKey = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes']
  const authority = (name: string): void => openssl('req', '-x509', ...newKey, '-subj', `/CN=${name}`, '-days', '2',
    '-keyout', `${name}-key.pem`, '-out', `${name}.pem`,
    '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign')
  let serial = 1
  const leaf = (name: string, issuer: string, extensions: string): void => {
    fs.writeFileSync(path.join(dir, `${name}.ext`), extensions)
    // Client certificates carry their role in OU (mapped by auth.mtls.roles below).
    openssl('req', '-new', ...newKey, '-subj', `${name.endsWith('client') ? '/OU=admin' : ''}/CN=${name}`, '-keyout', `${name}-key.pem`, '-out', `${name}.csr`)
    openssl('x509', '-req', '-in', `${name}.csr`, '-CA', `${issuer}.pem`, '-CAkey', `${issuer}-key.pem`,
      '-set_serial', String(++serial), '-days', '2', '-extfile', `${name}.ext`, '-out', `${name}.pem`)
  }
  authority('ca')
  authority('foreign-ca')
  leaf('server', 'ca', 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n')
  leaf('client', 'ca', 'extendedKeyUsage=clientAuth\n')
  leaf('foreign-client', 'foreign-ca', 'extendedKeyUsage=clientAuth\n')
  const p = (f: string): string => path.join(dir, f)
  return {
    dir,
    ca: p('ca.pem'),
    server: p('server.pem'),
    serverKey: p('server-key.pem'),
    client: p('client.pem'),
    clientKey: p('client-key.pem'),
    foreignClient: p('foreign-client.pem'),
    foreignClientKey: p('foreign-client-key.pem'),
  }
}

// ---------------------------------------------------------------------------
// A gateway in this process with its own listeners, its log captured.

/** Listeners and upstream as YAML; the rest of the config points into `dir`. */
function gatewayConfig (dir: string, yaml: string): Config {
  const text = `${yaml}\nauth: { mtls: { roles: OU } }\npolicy: { dir: ${POLICIES} }\naudit: { file: ${dir}/audit.jsonl }\nlog: { level: info }\nshutdown: { graceSeconds: 2 }\n`
  return parseConfig(text, path.join(dir, 'portcullis.yaml'))
}

interface LoggedGateway {
  readonly gateway: Gateway
  /** Every log line the gateway wrote, parsed. */
  readonly log: LogLine[]
  /** host:port (or unix:path) a listener is bound to, by listener name. */
  address (name: string): string
  /** The request lines logged for one listener. */
  requests (listener: string): LogLine[]
}

async function startLogged (t: Teardown, config: Config): Promise<LoggedGateway> {
  const log: LogLine[] = []
  const gateway = await startGateway(config, pino({ level: 'info' }, { write: (s: string) => { log.push(JSON.parse(s) as LogLine) } }))
  t.teardown(() => gateway.close())
  return {
    gateway,
    log,
    address (name) {
      const l = gateway.listeners.find((x) => x.config.name === name)
      if (!l) throw new Error(`no listener named ${name}`)
      return l.address
    },
    requests: (listener) => log.filter((l) => l.listener === listener && 'op' in l),
  }
}

// ---------------------------------------------------------------------------

interface Reply { status: number, contentType: string, body: string }

/** One plain HTTP request to a unix socket path or a host:port. */
async function ask (to: string, reqPath: string, opts: { method?: string, headers?: http.OutgoingHttpHeaders } = {}): Promise<Reply> {
  const where = to.startsWith('/') ? { socketPath: to } : { host: to.slice(0, to.lastIndexOf(':')), port: Number(to.slice(to.lastIndexOf(':') + 1)) }
  return await new Promise((resolve, reject) => {
    const req = http.request({ ...where, path: reqPath, method: opts.method ?? 'GET', headers: opts.headers, agent: false }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => resolve({ status: res.statusCode ?? 0, contentType: String(res.headers['content-type']), body: Buffer.concat(chunks).toString() }))
    })
    req.on('upgrade', () => reject(new Error('unexpected upgrade')))
    req.on('error', reject)
    req.end()
  })
}

function tlsFlags (pki: Pki, client?: 'trusted' | 'foreign'): string[] {
  const flags = ['--tlsverify', '--tlscacert', pki.ca]
  if (client === 'trusted') flags.push('--tlscert', pki.client, '--tlskey', pki.clientKey)
  if (client === 'foreign') flags.push('--tlscert', pki.foreignClient, '--tlskey', pki.foreignClientKey)
  return flags
}

async function serverVersion (host: string, flags: string[] = []): Promise<{ code: number | null, version: string, stderr: string }> {
  const r = await run(CLI28, [...flags, 'version', '--format', '{{.Server.Version}}'], { host, timeoutMs: 30_000 })
  return { code: r.code, version: r.stdout.toString().trim(), stderr: r.stderr }
}

let engineVersion: string | undefined
async function expectedVersion (): Promise<string> {
  engineVersion ??= (await serverVersion(engine().dockerHost)).version
  return engineVersion
}

const TLS_LISTENERS = (pki: Pki): string => `
  - { name: mtls, tcp: 127.0.0.1:0, tls: { cert: ${pki.server}, key: ${pki.serverKey}, ca: ${pki.ca} } }
  - { name: tls, tcp: 127.0.0.1:0, tls: { cert: server.pem, key: server-key.pem }, identity: { subject: tester, roles: [admin] } }
  - { name: plain, tcp: 127.0.0.1:0, identity: { subject: tester, roles: [admin] } }`

/** `docker run --rm IMAGE echo hi` and `echo x | docker exec -i BOX cat` against `host`. */
async function hijackChecks (t: tap.Test, host: string, box: string, flags: string[] = []): Promise<void> {
  const hi = await run(CLI28, [...flags, 'run', '--rm', engine().image, 'echo', 'hi'], { host, timeoutMs: 60_000 })
  t.equal(hi.code, 0, `docker run --rm exits 0 (${hi.stderr.trim()})`)
  t.equal(hi.stdout.toString(), 'hi\n', 'docker run --rm prints the container\'s output')
  const cat = await run(CLI28, [...flags, 'exec', '-i', box, 'cat'], { host, stdin: 'x\n', timeoutMs: 30_000 })
  t.equal(cat.code, 0, `echo x | docker exec -i cat exits 0 (${cat.stderr.trim()})`)
  t.equal(cat.stdout.toString(), 'x\n', 'stdin reached the engine and the output came back; the half-close ended it')
}

/** A container that sleeps, for exec sessions; removed at teardown. */
async function execTarget (t: tap.Test): Promise<string> {
  const { image, dockerHost } = engine()
  const box = uniqueName('pcl-box')
  t.teardown(() => run(CLI28, ['rm', '-f', box], { host: dockerHost }))
  const started = await run(CLI28, ['run', '-d', '--name', box, image, 'sleep', '600'], { host: dockerHost })
  t.equal(started.code, 0, `exec target container started on the engine (${started.stderr.trim()})`)
  return box
}

t.test('TLS listeners: client certificates required and verified with ca, plain TLS without', async (t) => {
  const pki = makePki(tempDir(t, 'pcl-pki-'))
  // Relative TLS paths resolve against the config file's directory (here: pki.dir).
  const gw = await startLogged(t, gatewayConfig(pki.dir, `listen:${TLS_LISTENERS(pki)}\nupstream: unix://${engine().socket}`))
  const want = await expectedVersion()
  const mtls = `tcp://${gw.address('mtls')}`

  const ok = await serverVersion(mtls, tlsFlags(pki, 'trusted'))
  t.equal(ok.code, 0, `client certificate from the trusted CA: docker version works (${ok.stderr.trim()})`)
  t.equal(ok.version, want, 'and shows the engine\'s version')
  t.ok(gw.requests('mtls').some((l) => l.op === 'SystemVersion' && l.status === 200), 'the request was forwarded and logged on the mTLS listener')

  for (const [what, flags] of [['a client certificate from a foreign CA', tlsFlags(pki, 'foreign')], ['no client certificate', tlsFlags(pki)]] as const) {
    const before = gw.requests('mtls').length
    const r = await serverVersion(mtls, flags)
    t.not(r.code, 0, `${what}: docker version fails`)
    t.match(r.stderr, /tls|certificate|handshake|connection reset|EOF/i, `${what}: the client sees a TLS failure`)
    t.equal(r.version, '', `${what}: no server version shown`)
    t.equal(gw.requests('mtls').length, before, `${what}: nothing was forwarded`)
  }

  // Plain HTTP to a TLS port is not an HTTP request either.
  const before = gw.requests('mtls').length
  await ask(gw.address('mtls'), '/_ping').then(() => t.fail('plain HTTP answered on a TLS port'), () => t.pass('plain HTTP to the TLS port fails'))
  t.equal(gw.requests('mtls').length, before, 'plain HTTP to the TLS port forwards nothing')

  const tls = `tcp://${gw.address('tls')}`
  const verified = await serverVersion(tls, tlsFlags(pki))
  t.equal(verified.code, 0, `TLS without ca: docker --tlsverify --tlscacert (no client cert) works (${verified.stderr.trim()})`)
  t.equal(verified.version, want, 'TLS without ca: engine version shown')
  const loose = await serverVersion(tls, ['--tls', '--tlscacert', pki.ca])
  t.equal(loose.code, 0, 'TLS without ca: docker --tls --tlscacert works')
  const withCert = await serverVersion(tls, tlsFlags(pki, 'foreign'))
  t.equal(withCert.code, 0, 'TLS without ca: an unrequested client certificate does not matter')
  t.ok(gw.requests('tls').some((l) => l.op === 'SystemVersion' && l.status === 200), 'requests logged on the TLS listener')

  await t.test('hijacked sessions over the mTLS listener', async (t) => {
    await hijackChecks(t, mtls, await execTarget(t), tlsFlags(pki, 'trusted'))
  })
})

t.test('upstream over TCP and over TLS: gateway -> gateway -> engine', async (t) => {
  const pki = makePki(tempDir(t, 'pcl-pki-'))
  const front = await startLogged(t, gatewayConfig(pki.dir, `listen:${TLS_LISTENERS(pki)}\nupstream: unix://${engine().socket}`))
  const box = await execTarget(t)

  const chains: Array<[string, string, string]> = [
    ['TCP', 'plain', `tcp://${front.address('plain')}`],
    ['TLS', 'mtls', `{ url: tcp://${front.address('mtls')}, tls: { cert: ${pki.client}, key: ${pki.clientKey}, ca: ${pki.ca} } }`],
  ]
  for (const [kind, listener, upstream] of chains) {
    const back: TestGateway = await startTestGateway('', upstream)
    t.teardown(() => back.close())
    // Over the unix socket the docker CLI sends `Host: api.moby.localhost`, over TCP `Host: 127.0.0.1:port`.
    for (const client of ['tcp', 'unix'] as const) {
      await t.test(`upstream over ${kind}, client on the back gateway's ${client} listener`, async (t) => {
        const host = client === 'unix' ? back.dockerHost : `tcp://${back.tcp}`
        t.equal((await serverVersion(host)).version, await expectedVersion(), 'docker version through the chain')

        const seen = front.requests(listener).length
        await hijackChecks(t, host, box)

        // The front gateway logs an exec session once it has asked the engine for the
        // exit code, which may be a moment after the client is done.
        await waitUntil(() => front.requests(listener).slice(seen).some((l) => l.op === 'ExecStart' && l.hijack !== undefined))
        const hops = front.requests(listener).slice(seen)
        t.ok(hops.some((l) => l.op === 'ContainerAttach' && l.hijack !== undefined), `the attach was hijacked through the front gateway's ${listener} listener`)
        t.ok(hops.some((l) => l.op === 'ExecStart' && l.hijack !== undefined && l.bytesIn === 2 && l.bytesOut === 10),
          `the exec session was relayed through the front gateway's ${listener} listener: 2 bytes of stdin, one 10-byte stdout frame`)
      })
    }
  }

  await t.test('upstream TLS with a client certificate the front gateway does not trust', async (t) => {
    const url = `tcp://${front.address('mtls')}`
    const back = await startTestGateway('', `{ url: ${url}, tls: { cert: ${pki.foreignClient}, key: ${pki.foreignClientKey}, ca: ${pki.ca} } }`)
    t.teardown(() => back.close())
    const seen = front.requests('mtls').length
    const r = await ask(back.tcp, '/v1.41/version')
    t.equal(r.status, 502, 'answers 502')
    const { message } = JSON.parse(r.body) as { message: string }
    t.ok(message.startsWith(`the Docker engine at ${url} `), `the message names the upstream: ${message}`)
    t.notMatch(message, /ALTNAME/, 'the failure is the refused client certificate, not a name mismatch')
    t.equal(front.requests('mtls').length, seen, 'the front gateway forwarded nothing')
  })
})

// ---------------------------------------------------------------------------
// Unix sockets

/** A group other than our own when we may chown to it (root), else our primary group. */
function socketGroup (): { name: string, gid: number } {
  const groups = fs.readFileSync('/etc/group', 'utf8').split('\n').map((l) => l.split(':')).filter((f) => f.length >= 3 && /^[0-9]+$/.test(f[2]))
    .map((f) => ({ name: f[0], gid: Number(f[2]) }))
  const mine = process.getgid?.() ?? 0
  const pick = process.getuid?.() === 0
    ? groups.find((g) => g.name === 'docker') ?? groups.find((g) => g.gid !== mine)
    : groups.find((g) => g.gid === mine)
  if (!pick) throw new Error('no usable group in /etc/group')
  return pick
}

t.test('unix socket: mode and group are applied', async (t) => {
  const dir = tempDir(t, 'pcl-')
  const sock = path.join(dir, 'm.sock')
  const group = socketGroup()
  const gw = await startLogged(t, gatewayConfig(dir, `listen:\n  - { unix: ${sock}, mode: "0660", group: ${group.name}, identity: { subject: tester, roles: [admin] } }\nupstream: unix://${engine().socket}`))
  const st = fs.statSync(sock)
  t.ok(st.isSocket(), 'the socket exists')
  t.equal((st.mode & 0o777).toString(8), '660', 'mode 0660')
  t.equal(st.gid, group.gid, `group ${group.name} (${group.gid})`)
  t.equal(gw.address(`unix:${sock}`), `unix:${sock}`, 'listener address')
  const ping = await ask(sock, '/_ping')
  t.equal(ping.status, 200, 'serves')
})

/** Leave a socket file behind with nobody listening: a process that binds it and is killed. */
async function staleSocket (file: string): Promise<void> {
  const script = `require('net').createServer().listen(${JSON.stringify(file)}, () => process.kill(process.pid, 'SIGKILL'))`
  const child = spawn(process.execPath, ['-e', script], { stdio: 'ignore' })
  await new Promise((resolve) => child.on('exit', resolve))
}

async function connects (to: string | number): Promise<boolean> {
  return await new Promise((resolve) => {
    const s = typeof to === 'string' ? net.connect(to) : net.connect(to, '127.0.0.1')
    s.once('connect', () => { s.destroy(); resolve(true) })
    s.once('error', () => resolve(false))
  })
}

async function freePort (): Promise<number> {
  const srv = net.createServer()
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve))
  const { port } = srv.address() as net.AddressInfo
  await new Promise((resolve) => srv.close(resolve))
  return port
}

t.test('unix socket: a stale socket is replaced, a live one or a regular file refuses start-up', async (t) => {
  const dir = tempDir(t, 'pcl-')
  const listenOn = (sock: string, before = ''): Config => gatewayConfig(dir, `listen:\n${before}  - { unix: ${sock}, identity: { subject: tester, roles: [admin] } }\nupstream: unix://${engine().socket}`)

  const stale = path.join(dir, 'stale.sock')
  await staleSocket(stale)
  t.ok(fs.statSync(stale).isSocket(), 'a socket file is left behind')
  t.notOk(await connects(stale), 'nobody listens on it')
  await startLogged(t, listenOn(stale))
  t.equal((await ask(stale, '/_ping')).status, 200, 'the gateway starts on the stale path and serves')

  const live = path.join(dir, 'live.sock')
  const other = net.createServer((s) => { s.on('error', () => {}); s.end('mine\n') })
  await new Promise<void>((resolve) => other.listen(live, resolve))
  t.teardown(() => new Promise((resolve) => other.close(resolve)))
  // A TCP listener opened before the failing one must be closed again.
  const port = await freePort()
  await t.rejects(startGateway(listenOn(live, `  - { tcp: 127.0.0.1:${port}, identity: { subject: tester, roles: [admin] } }\n`), pino({ level: 'silent' })),
    { message: `${live} is in use by a running process` }, 'a live socket: start-up fails with a clear error')
  t.ok(await connects(live), 'the live socket is left alone')
  t.notOk(await connects(port), 'the listener opened before the failure was closed')

  const plain = path.join(dir, 'file.sock')
  fs.writeFileSync(plain, 'not a socket')
  await t.rejects(startGateway(listenOn(plain), pino({ level: 'silent' })), { message: `${plain} exists and is not a socket` }, 'a regular file: start-up fails')
  t.equal(fs.readFileSync(plain, 'utf8'), 'not a socket', 'the file is left alone')
})

// ---------------------------------------------------------------------------

t.test('engine unreachable: 502 in the engine\'s error shape, naming the upstream', async (t) => {
  const port = await freePort()
  const upstreams = [`unix:///tmp/nonexistent-${uniqueName('pcl')}.sock`, `tcp://127.0.0.1:${port}`]
  for (const url of upstreams) {
    const gw = await startTestGateway('', url)
    t.teardown(() => gw.close())
    const attempts: Array<[string, Parameters<typeof ask>[2]]> = [
      ['GET /v1.41/version', {}],
      ['POST /v1.41/exec/abc/start (upgrade)', { method: 'POST', headers: { connection: 'Upgrade', upgrade: 'tcp', 'content-type': 'application/json' } }],
    ]
    for (const [what, opts] of attempts) {
      const r = await ask(gw.socket, what.split(' ')[1], opts)
      t.equal(r.status, 502, `${url}: ${what} answers 502`)
      t.equal(r.contentType, 'application/json', `${url}: ${what}: JSON`)
      const body = JSON.parse(r.body) as { message: string }
      t.same(Object.keys(body), ['message'], `${url}: ${what}: only a message`)
      t.ok(body.message.includes(url), `${url}: ${what}: names the upstream: ${body.message}`)
      t.notMatch(r.body, /\n\s+at |Error:|node:/, `${url}: ${what}: no stack trace`)
    }
    const cli = await run(CLI28, ['version'], { host: gw.dockerHost, timeoutMs: 30_000 })
    t.not(cli.code, 0, `${url}: docker version fails`)
  }
})
