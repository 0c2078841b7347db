/**
 * More differences that docker-py's and dockerode's suites found between the gateway and
 * the engine (issue 20 item 2). Each request is sent to the engine directly and through
 * the gateway (as a tenant, and as an admin where admins differed), and the answers are
 * compared: status and body.
 *
 * - Swarm requests on an engine that is not a swarm manager (the run's plain engine):
 *   the engine's own 503, also for `swarm leave` (docker-py's `leave_swarm(force=True)`
 *   counts a 503 as done) and the unlock key; on a manager a tenant's leave stays refused.
 * - `docker load` of something that is not an archive: the engine answers 200 with its
 *   streamed error record, quiet or not; so does the gateway.
 * - `POST /session` with `Upgrade: h2c` and an empty chunked body: upgraded (101) for an
 *   admin as by the engine; a tenant gets the named BuildKit refusal while
 *   `builds.buildkit` is off, and the 101 when it is on.
 * - An untagged import (`fromSrc=-`, no `repo`): the tenant's own image, owner-labelled,
 *   listed for it and for no other tenant.
 */
import { randomBytes } from 'node:crypto'
import net from 'node:net'
import t from 'tap'
import { engine, policiesWithBuildKit, request, startTestGateway, swarmEngine, tarOf, tokensFor, type RawReply, type TestGateway } from './helpers/gateway'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'

const SECRET = randomBytes(32).toString('hex')
const RUN = randomBytes(3).toString('hex')
const TA = `diffs2-a-${RUN}`
const TB = `diffs2-b-${RUN}`
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pce-'))
const { token } = tokensFor({ a: { sub: 'alice', tenant: TA, roles: ['tenant'] }, b: { sub: 'bob', tenant: TB, roles: ['tenant'] } }, SECRET, tmp)

let gw: TestGateway
const as = async (who: 'a' | 'b' | 'admin', method: string, target: string, body?: Buffer | object, contentType?: string): Promise<RawReply> =>
  await request(gw.socket, method, target, body, { token: who === 'admin' ? undefined : token[who], contentType })
const direct = async (method: string, target: string, body?: Buffer | object, contentType?: string): Promise<RawReply> =>
  await request(engine().socket, method, target, body, { contentType })
const images: string[] = []

t.before(async () => { gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`) })
t.teardown(async () => {
  for (const id of images) await direct('DELETE', `/images/${id}?force=1`)
  await gw?.close()
  fs.rmSync(tmp, { recursive: true, force: true })
})

t.test('swarm requests on an engine that is not a swarm manager: the engine\'s own answers', async (t) => {
  const cases: Array<[string, string, object?]> = [
    ['GET', '/v1.41/swarm'], ['POST', '/v1.41/swarm/leave?force=1'], ['POST', '/v1.41/swarm/leave'],
    ['GET', '/v1.41/swarm/unlockkey'], ['POST', '/v1.41/swarm/unlock', { UnlockKey: 'SWMKEY-1-x' }],
    ['GET', '/v1.41/services'], ['GET', '/v1.41/nodes'], ['GET', '/v1.41/tasks'], ['GET', '/v1.41/secrets'], ['GET', '/v1.41/configs'],
  ]
  for (const [method, target, body] of cases) {
    const engineSays = await direct(method, target, body)
    t.equal(engineSays.status, 503, `directly: ${method} ${target}`)
    const tenantGets = await as('a', method, target, body)
    t.same({ status: tenantGets.status, text: tenantGets.text }, { status: engineSays.status, text: engineSays.text }, `tenant: ${method} ${target} answered as the engine answers`)
  }
  t.equal((await direct('GET', '/info')).json.Swarm.LocalNodeState, 'inactive', 'and the engine is still in no swarm')
})

t.test('on a swarm manager a tenant\'s leave and unlock key stay refused, and the swarm stays', async (t) => {
  const swarmGw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, `unix://${swarmEngine().socket}`)
  t.teardown(async () => { await swarmGw.close() })
  for (const [method, target] of [['POST', '/v1.41/swarm/leave?force=1'], ['GET', '/v1.41/swarm/unlockkey']]) {
    const r = await request(swarmGw.socket, method, target, undefined, { token: token.a })
    t.equal(r.status, 403, `${method} ${target}`)
    t.match(r.json?.message, /\(rule swarm-read-only\)/)
  }
  const info = (await request(swarmEngine().socket, 'GET', '/info')).json
  t.same([info.Swarm.LocalNodeState, info.Swarm.ControlAvailable], ['active', true], 'still a swarm manager')
})

t.test('docker load of something that is not an archive: the engine\'s streamed error form', async (t) => {
  // What a load loads shows as the engine's `load` events (other test files build and
  // commit on the shared engine meanwhile: a count of images would move).
  const since = Math.floor(Date.now() / 1000) - 1
  for (const query of ['', '?quiet=1', '?quiet=0']) {
    const garbage = Buffer.from('this is not an image archive\n')
    const engineSays = await direct('POST', `/v1.41/images/load${query}`, garbage, 'application/x-tar')
    const tenantGets = await as('a', 'POST', `/v1.41/images/load${query}`, garbage, 'application/x-tar')
    const form = (r: RawReply): object => {
      const record = JSON.parse(r.text)
      return { status: r.status, keys: Object.keys(record), same: record.error === record.errorDetail?.message, crlf: r.text.endsWith('}\r\n') }
    }
    t.same(form(engineSays), { status: 200, keys: ['errorDetail', 'error'], same: true, crlf: true }, `directly (load${query}): 200 and one error record`)
    t.same(form(tenantGets), form(engineSays), `tenant (load${query}): the same form`)
    // A body that is no archive ends within a tar block: the engine's own words (archive.ts).
    t.equal(tenantGets.json.error, engineSays.json.error, 'in the engine\'s words')
  }
  const until = Math.floor(Date.now() / 1000) + 1
  const events = await direct('GET', `/events?since=${since}&until=${until}&filters=${encodeURIComponent(JSON.stringify({ type: ['image'], event: ['load'] }))}`)
  t.equal(events.text.trim(), '', 'nothing was loaded')
})

/** The head of the answer to a raw HTTP/1.1 request on a socket (an upgrade is read until the engine's first bytes). */
async function rawHead (socketPath: string, head: string): Promise<string> {
  return await new Promise((resolve) => {
    const s = net.connect(socketPath)
    let out = ''
    const done = (): void => { s.destroy(); resolve(out.split('\r\n\r\n')[0]) }
    s.on('data', (b: Buffer) => { out += b.toString('latin1'); if (out.includes('\r\n\r\n')) setTimeout(done, 200) })
    s.on('error', done)
    s.on('close', done)
    setTimeout(done, 3000)
    s.write(head)
  })
}
// Each with a session id of its own: the engine refuses an id it still holds ("session x already exists").
const session = (auth?: string): string =>
  'POST /session HTTP/1.1\r\nHost: docker\r\n' + (auth ? `Authorization: Bearer ${auth}\r\n` : '') +
  `Upgrade: h2c\r\nConnection: Upgrade\r\nX-Docker-Expose-Session-Uuid: ${randomBytes(8).toString('hex')}\r\nX-Docker-Expose-Session-Name: diffs2\r\n` +
  'X-Docker-Expose-Session-Sharedkey: k\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n'

t.test('POST /session with Upgrade: h2c and an empty chunked body is upgraded as the engine does', async (t) => {
  const engineSays = await rawHead(engine().socket, session())
  t.match(engineSays, /^HTTP\/1\.1 101 /, 'directly: 101')
  t.match(engineSays, /\r\nUpgrade: h2c/i)
  const adminGets = await rawHead(gw.socket, session())
  t.match(adminGets, /^HTTP\/1\.1 101 /, 'admin: 101 as directly')
  t.match(adminGets, /\r\nUpgrade: h2c/i)
  const tenantGets = await rawHead(gw.socket, session(token.a))
  t.match(tenantGets, /^HTTP\/1\.1 403 /, 'tenant with builds.buildkit off: the named BuildKit refusal')
  const withBuildKit = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, undefined, policiesWithBuildKit())
  t.teardown(async () => { await withBuildKit.close() })
  t.match(await rawHead(withBuildKit.socket, session(token.a)), /^HTTP\/1\.1 101 /, 'tenant with builds.buildkit on: 101')
  // Only an empty body: a chunk of data before the upgrade is still refused.
  const withData = session().replace('0\r\n\r\n', '3\r\nabc\r\n0\r\n\r\n')
  t.match(await rawHead(gw.socket, withData), /^HTTP\/1\.1 400 /, 'a non-empty chunked body before an upgrade: 400')
})

t.test('an untagged import by a tenant is its own image', async (t) => {
  const rootfs = tarOf({ 'hello.txt': `hello ${RUN}\n` })
  const engineSays = await direct('POST', '/v1.41/images/create?fromSrc=-', rootfs, 'application/x-tar')
  t.equal(engineSays.status, 200)
  images.push(JSON.parse(engineSays.text).status)
  const tenantGets = await as('a', 'POST', '/v1.41/images/create?fromSrc=-', rootfs, 'application/x-tar')
  t.equal(tenantGets.status, engineSays.status, 'answered as directly')
  t.match(tenantGets.text, /^\{"status":"sha256:[0-9a-f]{64}"\}\r\n$/, 'with the image id, in the engine\'s form')
  const id = JSON.parse(tenantGets.text).status as string
  images.push(id)
  const stored = (await direct('GET', `/images/${id}/json`)).json
  t.equal(stored.Config.Labels?.['io.portcullis.tenant'], TA, 'owner-labelled on the engine')
  t.same(stored.RepoTags, [], 'untagged')
  t.equal((await as('a', 'GET', `/v1.41/images/${id}/json`)).status, 200, 'the tenant inspects it')
  t.ok((await as('a', 'GET', '/v1.41/images/json')).json.some((i: any) => i.Id === id), 'and lists it')
  t.equal((await as('b', 'GET', `/v1.41/images/${id}/json`)).status, 404, 'another tenant does not see it')
  t.notOk((await as('b', 'GET', '/v1.41/images/json')).json.some((i: any) => i.Id === id), 'nor lists it')
  t.equal((await as('a', 'POST', '/v1.41/images/create?fromSrc=-&tag=latest', rootfs, 'application/x-tar')).status, 200, 'a tag without a repo is ignored, as the engine ignores it')
})
