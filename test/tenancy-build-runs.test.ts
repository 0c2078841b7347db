/**
 * What a tenant's build runs beyond its Dockerfile (issue 18, classes 2, 4 and 10), on the
 * real (plain) engine, as tenant B next to tenant A:
 * - triggers (ONBUILD): a trigger naming A's private image or a URL cannot be stored by B
 *   (commit and import `changes`, a commit's OnBuild); one that is stored anyway (by an
 *   admin, in an image labelled B's) is judged when B builds FROM it: refused, nothing
 *   copied. `ONBUILD RUN` in a Dockerfile is built (no 502); a stored harmless trigger runs.
 *   An ADD source spelled through ENV is read as the builder reads it;
 * - the build cache is each tenant's own: B building A's Dockerfile text gets none of A's
 *   layers (no "Using cache", another secret), A rebuilding gets its own;
 * - base images the engine would pull (absent, or `pull=1`) are refused with named rules.
 */
import { createHash, randomBytes } from 'node:crypto'
import jwt from 'jsonwebtoken'
import t from 'tap'
import { engine, request, startTestGateway, tarOf, type RawReply, type TestGateway } from './helpers/gateway'

const SECRET = randomBytes(32).toString('hex')
const RUN = randomBytes(3).toString('hex')
const TA = `bru-a-${RUN}`
const TB = `bru-b-${RUN}`
const IMAGE = engine().image
const token = (sub: string, tenant: string): string => jwt.sign({ sub, tenant, roles: ['tenant'], exp: Math.floor(Date.now() / 1000) + 3600 }, SECRET, { algorithm: 'HS256' })
const TOKENS = { a: token('alice', TA), b: token('bob', TB) }
const A_IMAGE = `${TA}/private:1`

let gw: TestGateway
let container = ''
const as = async (who: 'a' | 'b', method: string, target: string, body?: Buffer | object, contentType?: string): Promise<RawReply> =>
  await request(gw.socket, method, target, body, { token: TOKENS[who], contentType })
const direct = async (method: string, target: string, body?: Buffer | object): Promise<RawReply> => await request(engine().socket, method, target, body)
const q = encodeURIComponent

async function build (who: 'a' | 'b', dockerfile: string, query = ''): Promise<{ r: RawReply, tag: string, built: boolean }> {
  const tag = `${who === 'a' ? TA : TB}/run-${randomBytes(3).toString('hex')}:1`
  const r = await as(who, 'POST', `/v1.41/build?t=${q(tag)}&rm=1&forcerm=1${query}`, tarOf({ Dockerfile: dockerfile }), 'application/x-tar')
  const built = (await direct('GET', `/images/${tag}/json`)).status === 200
  return { r, tag, built }
}

/** An image labelled B's carrying `triggers`, made behind the gateway's back (as an admin could). */
async function triggerImage (triggers: string[]): Promise<string> {
  const tag = `${TB}/trig-${randomBytes(3).toString('hex')}`
  const r = await direct('POST', `/commit?container=${container}&repo=${tag}&tag=1`, { OnBuild: triggers, Labels: { 'io.portcullis.tenant': TB, 'io.portcullis.subject': 'bob' } })
  if (r.status !== 201) throw new Error(`commit: ${r.status} ${r.text}`)
  const stored = (await direct('GET', `/images/${tag}:1/json`)).json?.Config?.OnBuild
  if (JSON.stringify(stored) !== JSON.stringify(triggers)) throw new Error(`the engine stored the triggers ${JSON.stringify(stored)}`)
  return `${tag}:1`
}

/** A file's contents in an image, read by running it on the engine directly. */
async function cat (image: string, file: string): Promise<string> {
  const c = await direct('POST', '/containers/create', { Image: image, Cmd: ['cat', file], Labels: { 'io.portcullis.test': RUN } })
  await direct('POST', `/containers/${c.json.Id as string}/start`)
  await direct('POST', `/containers/${c.json.Id as string}/wait`)
  const logs = await direct('GET', `/containers/${c.json.Id as string}/logs?stdout=1`)
  await direct('DELETE', `/containers/${c.json.Id as string}?force=1`)
  // One frame of the multiplexed stream: its 8-byte header, then the output.
  return logs.text.slice(8)
}

t.before(async () => {
  gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`)
  const c = await as('a', 'POST', `/v1.41/containers/create?name=bru-${RUN}-a`, { Image: IMAGE, Cmd: ['true'] })
  if (c.status !== 201) throw new Error(`create: ${c.status} ${c.text}`)
  const commit = await as('a', 'POST', `/v1.41/commit?container=${c.json.Id as string}&repo=${TA}/private&tag=1`, {})
  if (commit.status !== 201) throw new Error(`commit: ${commit.status} ${commit.text}`)
  await direct('DELETE', `/containers/${c.json.Id as string}?force=1`)
  const b = await as('b', 'POST', `/v1.41/containers/create?name=bru-${RUN}-b`, { Image: IMAGE, Cmd: ['true'] })
  if (b.status !== 201) throw new Error(`create: ${b.status} ${b.text}`)
  container = b.json.Id
})
t.teardown(async () => {
  if (container) await direct('DELETE', `/containers/${container}?force=1`)
  const images = (await direct('GET', '/images/json')).json as any[]
  for (const i of images) for (const tag of (i.RepoTags ?? []) as string[]) if (tag.startsWith(`${TA}/`) || tag.startsWith(`${TB}/`)) await direct('DELETE', `/images/${tag}?force=1`)
  await gw?.close()
})

t.test('B cannot store a trigger the gateway would refuse: commit changes, commit OnBuild, import changes', async (t) => {
  const cases: Array<[string, () => Promise<RawReply>, number, RegExp]> = [
    ['commit changes: COPY --from A\'s image', async () => await as('b', 'POST', `/v1.41/commit?container=${container}&repo=${TB}/c1&tag=1&changes=${q(`ONBUILD COPY --from=${A_IMAGE} /bin/busybox /x`)}`, {}), 404, new RegExp(`No such image: ${A_IMAGE}`)],
    ['commit changes: ADD a URL', async () => await as('b', 'POST', `/v1.41/commit?container=${container}&repo=${TB}/c2&tag=1&changes=${q('ONBUILD ADD http://127.0.0.1:1/x /x')}`, {}), 403, /rule build-add-url/],
    ['commit body OnBuild: COPY --from A\'s image', async () => await as('b', 'POST', `/v1.41/commit?container=${container}&repo=${TB}/c3&tag=1`, { OnBuild: [`COPY --from=${A_IMAGE} /bin/busybox /x`] }), 404, new RegExp(`No such image: ${A_IMAGE}`)],
    ['import changes: COPY --from A\'s image', async () => await as('b', 'POST', `/v1.41/images/create?fromSrc=-&repo=${TB}/i1&tag=1&changes=${q(`ONBUILD COPY --from=${A_IMAGE} /bin/busybox /x`)}`, tarOf({ x: 'y' }), 'application/x-tar'), 404, new RegExp(`No such image: ${A_IMAGE}`)],
    ['import changes: ONBUILD ONBUILD', async () => await as('b', 'POST', `/v1.41/images/create?fromSrc=-&repo=${TB}/i2&tag=1&changes=${q('ONBUILD ONBUILD RUN true')}`, tarOf({ x: 'y' }), 'application/x-tar'), 400, /Chaining ONBUILD/],
  ]
  for (const [why, send, status, message] of cases) {
    const r = await send()
    t.equal(r.status, status, why)
    t.match(r.json?.message, message, why)
  }
  for (const name of ['c1', 'c2', 'c3', 'i1', 'i2']) t.equal((await direct('GET', `/images/${TB}/${name}:1/json`)).status, 404, `no image ${name}`)
  const ok = await as('b', 'POST', `/v1.41/commit?container=${container}&repo=${TB}/ok&tag=1&changes=${q(`ONBUILD COPY --from=${IMAGE} /bin/busybox /copied`)}`, {})
  t.equal(ok.status, 201, 'a trigger naming the shared catalog is stored')
})

/** A `docker load` archive of one image tagged `tag` whose config stores `triggers`. */
function loadArchive (tag: string, triggers: string[]): Buffer {
  const layer = tarOf({ x: 'y\n' })
  const config = { architecture: 'amd64', os: 'linux', config: { OnBuild: triggers }, rootfs: { type: 'layers', diff_ids: [`sha256:${createHash('sha256').update(layer).digest('hex')}`] } }
  // tarOf's entries are text: the layer (a tar of ASCII headers and data) passes as one.
  return tarOf({ 'layer.tar': layer.toString('latin1'), 'config.json': JSON.stringify(config), 'manifest.json': JSON.stringify([{ Config: 'config.json', RepoTags: [tag], Layers: ['layer.tar'] }]) })
}

t.test('a load archive\'s image config: its triggers are judged', async (t) => {
  const bad = await as('b', 'POST', '/v1.41/images/load', loadArchive(`${TB}/loaded-bad:1`, [`COPY --from=${A_IMAGE} /bin/busybox /stolen`]), 'application/x-tar')
  t.equal(bad.status, 404, 'a trigger naming A\'s image: answered as missing')
  t.match(bad.json?.message, `No such image: ${A_IMAGE}`)
  t.equal((await direct('GET', `/images/${TB}/loaded-bad:1/json`)).status, 404, 'nothing loaded')
  const url = await as('b', 'POST', '/v1.41/images/load', loadArchive(`${TB}/loaded-url:1`, ['ADD http://127.0.0.1:1/x /x']), 'application/x-tar')
  t.equal(url.status, 403, 'a trigger fetching a URL')
  t.match(url.json?.message, /rule build-add-url/)
  const ok = await as('b', 'POST', '/v1.41/images/load', loadArchive(`${TB}/loaded-ok:1`, ['RUN true']), 'application/x-tar')
  t.equal(ok.status, 200, 'a harmless trigger is loaded', { body: ok.text })
  t.same((await direct('GET', `/images/${TB}/loaded-ok:1/json`)).json?.Config?.OnBuild, ['RUN true'], 'and stored')
})

t.test('a stored trigger is judged when B builds FROM the image: refused, nothing copied', async (t) => {
  const cases: Array<[string, string[], number, RegExp]> = [
    ['COPY --from A\'s image', [`COPY --from=${A_IMAGE} /bin/busybox /stolen`], 404, new RegExp(`No such image: ${A_IMAGE}`)],
    ['ADD a URL', ['ADD http://127.0.0.1:1/x /x'], 403, /rule build-add-url/],
    ['ADD a URL through ENV', ['ENV U=http://127.0.0.1:1/x', 'ADD $U /x'], 403, /rule build-add-url/],
    ['a stored ONBUILD storing COPY --from', [`ONBUILD COPY --from=${A_IMAGE} /bin/busybox /stolen`], 404, new RegExp(`No such image: ${A_IMAGE}`)],
  ]
  for (const [why, triggers, status, message] of cases) {
    const base = await triggerImage(triggers)
    const { r, built } = await build('b', `FROM ${base}\nRUN true\n`)
    t.equal(r.status, status, why)
    t.match(r.json?.message, message, why)
    t.notOk(built, `${why}: nothing built`)
  }
})

t.test('ONBUILD RUN in a Dockerfile is built; a harmless stored trigger runs; ENV-spelled ADD URLs are refused', async (t) => {
  const parent = await build('b', `FROM ${IMAGE}\nUSER 65534:65534\nONBUILD RUN echo triggered > /tmp/trigger.txt\n`)
  t.equal(parent.r.status, 200, 'ONBUILD RUN: built, not a 502', { body: parent.r.text })
  t.ok(parent.built)
  const child = await build('b', `FROM ${parent.tag}\nRUN true\n`)
  t.equal(child.r.status, 200, 'a build FROM it runs the trigger')
  t.equal(await cat(child.tag, '/tmp/trigger.txt'), 'triggered\n', 'the trigger ran')
  const inspect = await direct('GET', `/images/${child.tag}/json`)
  t.same(inspect.json?.Config?.OnBuild ?? [], [], 'the engine keeps no trigger in the child')
  const env = await build('b', `FROM ${IMAGE}\nENV SRC=http://127.0.0.1:1/x\nADD $SRC /x\n`)
  t.equal(env.r.status, 403, 'ADD $SRC with SRC a URL')
  t.match(env.r.json?.message, /rule build-add-url/)
  const label = await build('b', `FROM ${IMAGE}\nONBUILD LABEL io.portcullis.tenant=${TA}\n`)
  t.equal(label.r.status, 403, 'ONBUILD LABEL of an owner label')
  t.match(label.r.json?.message, /rule owner-labels/)
})

t.test('the build cache is each tenant\'s own', async (t) => {
  // A USER no other build of this file has (B's own earlier images would answer for its step).
  const dockerfile = `FROM ${IMAGE}\nUSER 65533:65533\nRUN head -c 12 /dev/urandom | od -An -tx1 > /tmp/secret-${RUN}\n`
  const first = await build('a', dockerfile)
  t.equal(first.r.status, 200, 'A builds')
  const secretA = await cat(first.tag, `/tmp/secret-${RUN}`)
  const other = await build('b', dockerfile)
  t.equal(other.r.status, 200, 'B builds the same text')
  t.notMatch(other.r.text, /Using cache/, 'B gets no cached step')
  t.not(await cat(other.tag, `/tmp/secret-${RUN}`), secretA, 'B\'s image does not hold A\'s secret')
  const again = await build('a', dockerfile)
  t.match(again.r.text, /Using cache/, 'A rebuilding uses its own cache')
  t.equal(await cat(again.tag, `/tmp/secret-${RUN}`), secretA, 'A gets its own layer back')
  const named = await build('b', dockerfile, `&cachefrom=${q(JSON.stringify([first.tag]))}`)
  t.equal(named.r.status, 404, 'B naming A\'s image as cache: answered as missing')
  t.notOk(named.built)
})

t.test('base images the engine would pull are refused', async (t) => {
  const absent = await build('b', 'FROM docker.io/library/portcullis-absent:1\n')
  t.equal(absent.r.status, 403)
  t.match(absent.r.json?.message, /rule build-image-absent/)
  const loopback = await build('b', 'FROM 127.0.0.1:5000/x/y:1\n')
  t.equal(loopback.r.status, 403, 'the shipped allow-list has no registry on the host\'s loopback')
  t.match(loopback.r.json?.message, /rule registry-not-allowed/)
  const pull = await build('b', `FROM ${IMAGE}\n`, '&pull=1')
  t.equal(pull.r.status, 403)
  t.match(pull.r.json?.message, /rule build-pull/)
  const noPull = await build('b', `FROM ${IMAGE}\n`, '&pull=False')
  t.equal(noPull.r.status, 200, 'pull=False (docker-py) is no pull')
})

t.test('build steps: the query\'s host settings judged like a create\'s, and a default memory limit', async (t) => {
  const cases: Array<[string, string, RegExp]> = [
    ['memory of 100 GiB', `&memory=${100 * 1024 ** 3}`, /rule build-memory/],
    ['a 64 GiB /dev/shm', `&shmsize=${64 * 1024 ** 3}`, /shm-size/],
    ['seccomp unconfined', `&securityopt=${q('seccomp=unconfined')}`, /security-options/],
    ['seccomp unconfined, second of two', `&securityopt=no-new-privileges&securityopt=${q('seccomp=unconfined')}`, /security-options/],
    ['unlimited nofile, lower-case JSON keys', `&ulimits=${q(JSON.stringify([{ name: 'nofile', soft: -1, hard: -1 }]))}`, /ulimits/],
    ['cpu shares above 1024', '&cpushares=4096', /cpu-shares/],
    ['a cgroup parent', `&cgroupparent=${q('/')}`, /no-cgroup-parent/],
  ]
  for (const [why, query, rule] of cases) {
    const { r, built } = await build('b', `FROM ${IMAGE}\nRUN true\n`, query)
    t.equal(r.status, 403, why)
    t.match(r.json?.message, rule, why)
    t.notOk(built, `${why}: nothing built`)
  }
  const probe = `FROM ${IMAGE}\nUSER 65534:65534\nRUN echo limit=$(cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes) ${RUN}-probe\n`
  const dflt = await build('b', probe)
  t.equal(dflt.r.status, 200, 'a build naming no limit is built', { body: dflt.r.text })
  t.match(dflt.r.text, `limit=${2 * 1024 ** 3} ${RUN}-probe`, 'its RUN step had the default memory limit')
  const own = await build('b', probe.replace('-probe', '-probe2'), `&memory=${512 * 1024 ** 2}`)
  t.equal(own.r.status, 200, 'a build naming a smaller limit is built')
  t.match(own.r.text, `limit=${512 * 1024 ** 2} ${RUN}-probe2`, 'with that limit')
})
