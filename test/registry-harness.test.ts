// Checks the registry harness (test/helpers/registry.ts): the shared engine pushes to and
// pulls from a real registry with htpasswd authentication, with credentials only in
// X-Registry-Auth. Talks to the engine directly. Push and pull answer 200 and report
// most failures inside their JSON-lines stream.
import fs from 'node:fs'
import http from 'node:http'
import t from 'tap'
import { engine, uniqueName } from './helpers/gateway'
import { registryAuthHeader, startRegistry, type Registry } from './helpers/registry'

interface Answer { status: number, body: string }

/** One request to the engine's socket, without the docker CLI in between. */
async function request (method: string, path: string, headers: http.OutgoingHttpHeaders = {}, body?: string): Promise<Answer> {
  return await new Promise((resolve, reject) => {
    const req = http.request({ socketPath: engine().socket, method, path, headers, agent: false, timeout: 120_000 }, (res) => {
      let data = ''
      res.setEncoding('utf8')
      res.on('data', (c: string) => { data += c })
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: data }))
      res.on('error', reject)
    })
    req.on('timeout', () => req.destroy(new Error(`${method} ${path}: timed out`)))
    req.on('error', reject)
    req.end(body)
  })
}

interface Progress { status?: string, error?: string, errorDetail?: { message?: string }, aux?: { Digest?: string } }

/** The messages of a JSON-lines progress stream. */
function progress (body: string): Progress[] {
  return body.split('\n').filter((l) => l.trim() !== '').map((l) => JSON.parse(l) as Progress)
}

/** What went wrong, if anything: an error status (JSON message) or the stream's errorDetail. */
function failure (a: Answer): string | undefined {
  if (a.status !== 200) return `${a.status} ${(JSON.parse(a.body) as { message?: string }).message ?? a.body}`
  return progress(a.body).find((m) => m.errorDetail !== undefined)?.errorDetail?.message
}

/** How many live processes run with this config file. */
function registries (config: string): number {
  return fs.readdirSync('/proc').filter((p) => /^\d+$/.test(p)).filter((p) => {
    try {
      return fs.readFileSync(`/proc/${p}/cmdline`, 'utf8').split('\0').includes(config) && !/^\S+ \S+ Z/.test(fs.readFileSync(`/proc/${p}/stat`, 'utf8'))
    } catch {
      return false
    }
  }).length
}

const image = engine().image
let reg: Registry
let repo: string // <address>/harness/busybox-<random>
let user: string
let password: string
let startSecs = 0

t.before(async () => {
  const started = Date.now()
  reg = await startRegistry()
  startSecs = (Date.now() - started) / 1000
  repo = `${reg.address}/harness/${uniqueName('busybox')}`
  ;[[user, password]] = Object.entries(reg.users)
})

t.teardown(async () => {
  await request('DELETE', `/images/${repo}:1`)
  await reg?.stop()
})

const auth = (pass = password): http.OutgoingHttpHeaders => ({ 'X-Registry-Auth': registryAuthHeader(user, pass, reg.address) })
const push = async (headers: http.OutgoingHttpHeaders, body?: string) => await request('POST', `/images/${repo}/push?tag=1`, headers, body)
const pull = async (headers: http.OutgoingHttpHeaders) =>
  await request('POST', `/images/create?fromImage=${encodeURIComponent(repo)}&tag=1`, headers)

t.test('the registry runs in the engine network namespace', async (t) => {
  t.comment(`registry on ${reg.address} ready in ${startSecs.toFixed(2)} s`)
  t.match(reg.address, /^127\.0\.0\.1:\d+$/)
  t.equal(Object.keys(reg.users).length, 1, 'one default user')
  t.match(password, /^[0-9a-f]{24}$/, 'with a random password')
})

t.test('registryAuthHeader encodes as the docker CLI does', async (t) => {
  // What docker 20.10 sends for `docker login -u alice -p secret 127.0.0.1:33141`, then push.
  t.equal(registryAuthHeader('alice', 'secret', '127.0.0.1:33141'),
    'eyJ1c2VybmFtZSI6ImFsaWNlIiwicGFzc3dvcmQiOiJzZWNyZXQiLCJzZXJ2ZXJhZGRyZXNzIjoiMTI3LjAuMC4xOjMzMTQxIn0=')
  const decoded = Buffer.from(registryAuthHeader('a', '<&>?~~', 'r'), 'base64url').toString()
  t.equal(decoded, '{"username":"a","password":"\\u003c\\u0026\\u003e?~~","serveraddress":"r"}', 'Go escapes <, & and >')
  t.notMatch(registryAuthHeader('a', '<&>?~~', 'r'), /[+/]/, 'URL alphabet')
})

t.test('tag the test image for the registry', async (t) => {
  const res = await request('POST', `/images/${image}/tag?repo=${encodeURIComponent(repo)}&tag=1`)
  t.equal(res.status, 201, `tagged ${repo}:1`)
})

t.test('push without credentials fails', async (t) => {
  const bare = await push({})
  t.equal(bare.status, 400, 'no X-Registry-Auth and no body: refused before the registry is asked')
  t.match(bare.body, /missing X-Registry-Auth/)
  // The old form: credentials in the body, here none.
  const anonymous = await push({ 'Content-Type': 'application/json' }, '{}')
  t.equal(anonymous.status, 200, 'the stream carries the error')
  t.match(progress(anonymous.body).at(-1), { errorDetail: { message: 'no basic auth credentials' } })
  // What the CLI sends when it has no credentials: X-Registry-Auth of `{}`.
  t.equal(failure(await push({ 'X-Registry-Auth': 'e30=' })), 'no basic auth credentials')
  // Without its base64 padding, dockerd 20.10 cannot decode the header and uses no credentials.
  const header = auth()['X-Registry-Auth'] as string
  if (header.endsWith('=')) {
    t.equal(failure(await push({ 'X-Registry-Auth': header.replace(/=+$/, '') })), 'no basic auth credentials', 'unpadded header')
  } else {
    t.comment('this header needs no padding: not checking an unpadded one')
  }
  t.equal(failure(await push(auth('wrong'))), 'unauthorized: authentication required', 'wrong password')
})

t.test('push with X-Registry-Auth succeeds', async (t) => {
  const res = await push(auth())
  t.equal(res.status, 200)
  t.equal(failure(res), undefined, 'no error in the stream')
  const digest = progress(res.body).find((m) => m.aux?.Digest !== undefined)?.aux?.Digest
  t.match(digest, /^sha256:[0-9a-f]{64}$/, 'the stream reports the digest')
  t.ok(progress(res.body).some((m) => m.status?.includes(`digest: ${digest}`)))
})

t.test('pull back with X-Registry-Auth', async (t) => {
  const { Id: id } = JSON.parse((await request('GET', `/images/${image}/json`)).body) as { Id: string }
  const removed = await request('DELETE', `/images/${repo}:1`)
  t.equal(removed.status, 200, 'untagged')
  t.equal((await request('GET', `/images/${repo}:1/json`)).status, 404, 'the tag is gone')

  // An auth failure before the pull starts is an error status, not a stream.
  const wrong = await pull(auth('wrong'))
  t.match(failure(wrong), /unauthorized: authentication required/, 'wrong password')
  t.match(failure(await pull({})), /no basic auth credentials/, 'no credentials')
  t.equal((await request('GET', `/images/${repo}:1/json`)).status, 404, 'still not there')

  const res = await pull(auth())
  t.equal(res.status, 200)
  t.equal(failure(res), undefined, 'no error in the stream')
  const pulled = await request('GET', `/images/${repo}:1/json`)
  t.equal(pulled.status, 200, 'present again')
  t.equal((JSON.parse(pulled.body) as { Id: string }).Id, id, 'the same image')
})

t.test('stop removes the registry and its directory', async (t) => {
  const other = await startRegistry({ users: { alice: 'a-password', bob: 'b-password' } })
  t.same(other.users, { alice: 'a-password', bob: 'b-password' })
  t.not(other.address, reg.address)
  const config = `${other.dir}/config.yml`
  t.equal(registries(config), 1, 'running')
  await other.stop()
  await other.stop()
  t.equal(registries(config), 0, 'killed')
  t.notOk(fs.existsSync(other.dir), 'directory removed')
})
