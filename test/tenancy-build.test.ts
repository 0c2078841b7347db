/**
 * Builds are inspected: the gateway reads the Dockerfile from the build context as it
 * streams (plain or gzip tar, `dockerfile` or the default name) and judges it like a
 * create or pull, on the real (plain) engine, as tenant B next to tenant A:
 * - FROM and COPY --from naming A's private image (also through ARG
 *   defaults and `buildargs`) answer as a missing image, and nothing is built;
 * - ADD of a URL, an owner label in a LABEL, a base image from a registry outside the
 *   allow-list, and a context the gateway cannot read are refused;
 * - a build from the shared catalog goes through, by raw request and with the docker CLI,
 *   and its image is B's.
 */
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { gzipSync } from 'node:zlib'
import jwt from 'jsonwebtoken'
import t from 'tap'
import { CLI28, engine, request, run, startTestGateway, tarOf, type RawReply, type TestGateway } from './helpers/gateway'

const SECRET = randomBytes(32).toString('hex')
const RUN = randomBytes(3).toString('hex')
const TA = `bld-a-${RUN}`
const TB = `bld-b-${RUN}`
const IMAGE = engine().image
const token = (sub: string, tenant: string): string => jwt.sign({ sub, tenant, roles: ['tenant'], exp: Math.floor(Date.now() / 1000) + 3600 }, SECRET, { algorithm: 'HS256' })
const TOKENS = { a: token('alice', TA), b: token('bob', TB) }
const A_IMAGE = `${TA}/private:1`

let gw: TestGateway
const as = async (who: 'a' | 'b', method: string, target: string, body?: Buffer | object, contentType?: string): Promise<RawReply> =>
  await request(gw.socket, method, target, body, { token: TOKENS[who], contentType })
const direct = async (method: string, target: string): Promise<RawReply> => await request(engine().socket, method, target)
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pcb-'))

async function build (dockerfile: string, query = '', extra: Record<string, string> = {}, gzip = false): Promise<{ r: RawReply, tag: string, built: boolean }> {
  const tag = `${TB}/build-${randomBytes(3).toString('hex')}:1`
  const name = /dockerfile=([^&]+)/.exec(query)?.[1]
  const context = tarOf({ [name ? decodeURIComponent(name) : 'Dockerfile']: dockerfile, 'data.txt': 'context data\n', ...extra })
  const r = await as('b', 'POST', `/v1.41/build?t=${encodeURIComponent(tag)}&rm=1&forcerm=1${query}`, gzip ? gzipSync(context) : context, 'application/x-tar')
  const built = (await direct('GET', `/images/${tag}/json`)).status === 200
  return { r, tag, built }
}

t.before(async () => {
  gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`)
  const c = await as('a', 'POST', `/v1.41/containers/create?name=bld-${RUN}-a`, { Image: IMAGE, Cmd: ['true'] })
  if (c.status !== 201) throw new Error(`create: ${c.status} ${c.text}`)
  const [repo, tag] = A_IMAGE.split(':')
  const commit = await as('a', 'POST', `/v1.41/commit?container=${c.json.Id as string}&repo=${repo}&tag=${tag}`, {})
  if (commit.status !== 201) throw new Error(`commit: ${commit.status} ${commit.text}`)
  await direct('DELETE', `/containers/${c.json.Id as string}?force=1`)
})
t.teardown(async () => {
  const images = (await direct('GET', '/images/json')).json as any[]
  for (const i of images) for (const tag of (i.RepoTags ?? []) as string[]) if (tag.startsWith(`${TA}/`) || tag.startsWith(`${TB}/`)) await direct('DELETE', `/images/${tag}?force=1`)
  await gw?.close()
  fs.rmSync(tmp, { recursive: true, force: true })
})

t.test('A\'s private image, however the Dockerfile names it, is missing for B; nothing built', async (t) => {
  const cases: Array<[string, string, string?]> = [
    ['FROM', `FROM ${A_IMAGE}\nRUN true\n`],
    ['FROM through an ARG default', `ARG BASE=${A_IMAGE}\nFROM $BASE\n`],
    ['FROM through buildargs', `ARG BASE=${IMAGE}\nFROM \${BASE}\n`, `&buildargs=${encodeURIComponent(JSON.stringify({ BASE: A_IMAGE }))}`],
    ['COPY --from', `FROM ${IMAGE}\nCOPY --from=${A_IMAGE} /bin/busybox /x\n`],
    ['a second stage', `FROM ${IMAGE} AS one\nFROM ${A_IMAGE}\nCOPY --from=one /bin/busybox /x\n`],
  ]
  for (const [why, dockerfile, query] of cases) {
    const { r, built } = await build(dockerfile, query)
    t.equal(r.status, 404, `${why}: answered as a missing image`)
    t.match(r.json?.message, `No such image: ${A_IMAGE}`)
    t.notOk(built, `${why}: nothing built`)
  }
})

t.test('URLs, owner labels, registries and unreadable contexts are refused', async (t) => {
  const cases: Array<[string, string, RegExp, string?, Record<string, string>?, boolean?]> = [
    ['ADD of a URL', `FROM ${IMAGE}\nADD http://127.0.0.1:1/x /x\n`, /rule build-add-url/],
    // The classic builder refuses RUN flags (they need BuildKit): so does the gateway, before anything runs.
    ['RUN --mount from=', `# syntax=docker/dockerfile:1\nFROM ${IMAGE}\nRUN --mount=type=bind,from=${A_IMAGE},target=/a true\n`, /--mount option requires BuildKit.*rule build-dockerfile/],
    ['an owner label', `FROM ${IMAGE}\nLABEL a=b "io.portcullis.tenant"=${TA}\n`, /rule owner-labels/],
    ['an owner label, escaped', `FROM ${IMAGE}\nLABEL io\\.portcullis\\.tenant=${TA}\n`, /rule owner-labels/],
    ['a registry outside the allow-list', 'FROM registry.invalid:5000/x/y:1\n', /rule registry-not-allowed/],
    ['an ARG that names nothing', 'FROM ${NOPE}\n', /rule build-image/],
    ['no Dockerfile', '', /rule build-dockerfile/, '&dockerfile=missing.df', { 'other.df': `FROM ${IMAGE}\n` }],
  ]
  for (const [why, dockerfile, rule, query, extra] of cases) {
    const files = why === 'no Dockerfile' ? extra! : extra
    const { r, built } = why === 'no Dockerfile'
      ? await (async () => {
        const tag = `${TB}/build-none:1`
        const r = await as('b', 'POST', `/v1.41/build?t=${encodeURIComponent(tag)}${query!}`, tarOf(files!), 'application/x-tar')
        return { r, built: (await direct('GET', `/images/${tag}/json`)).status === 200 }
      })()
      : await build(dockerfile, query, files)
    t.equal(r.status, 403, why)
    t.match(r.json?.message, rule)
    t.notOk(built, `${why}: nothing built`)
  }
})

t.test('a build from the shared catalog goes through and is B\'s: raw, gzip, -f, docker CLI', async (t) => {
  for (const [why, query, gzip] of [['plain tar', '', false], ['gzip-compressed', '', true], ['dockerfile=sub/Build.df', '&dockerfile=sub%2FBuild.df', false]] as const) {
    const { r, tag, built } = await build(`ARG BASE=${IMAGE}\nFROM $BASE\nCOPY data.txt /data.txt\nLABEL purpose=test\n`, query, {}, gzip)
    t.equal(r.status, 200, `${why}: built`)
    t.ok(built, `${why}: the engine has ${tag}`)
    const labels = (await direct('GET', `/images/${tag}/json`)).json?.Config?.Labels
    t.same(labels, { purpose: 'test', 'io.portcullis.tenant': TB, 'io.portcullis.subject': 'bob' }, `${why}: B's image`)
  }
  const dir = path.join(tmp, 'cli')
  fs.mkdirSync(dir)
  fs.writeFileSync(path.join(dir, 'Dockerfile'), `FROM ${IMAGE}\nCOPY hello.txt /hello.txt\nCMD ["cat", "/hello.txt"]\n`)
  fs.writeFileSync(path.join(dir, 'hello.txt'), 'hello from a checked build\n')
  const cfg = path.join(tmp, 'cfg')
  fs.mkdirSync(cfg)
  fs.writeFileSync(path.join(cfg, 'config.json'), JSON.stringify({ HttpHeaders: { Authorization: `Bearer ${TOKENS.b}` } }))
  const tag = `${TB}/cli:1`
  const r = await run(CLI28, ['build', '-q', '-t', tag, dir], { host: gw.dockerHost, env: { DOCKER_CONFIG: cfg, DOCKER_BUILDKIT: '0' } })
  t.equal(r.code, 0, 'docker build (classic builder) through the gateway', { stderr: r.stderr })
  const out = await run(CLI28, ['run', '--rm', tag], { host: gw.dockerHost, env: { DOCKER_CONFIG: cfg } })
  t.equal(out.stdout.toString(), 'hello from a checked build\n')
  const bad = path.join(tmp, 'bad')
  fs.mkdirSync(bad)
  fs.writeFileSync(path.join(bad, 'Dockerfile'), `FROM ${A_IMAGE}\n`)
  const refused = await run(CLI28, ['build', '-q', '-t', `${TB}/bad:1`, bad], { host: gw.dockerHost, env: { DOCKER_CONFIG: cfg, DOCKER_BUILDKIT: '0' } })
  t.not(refused.code, 0, 'docker build FROM A\'s image fails')
  t.match(refused.stderr, `No such image: ${A_IMAGE}`)
})

t.test('a build\'s intermediate images (unlabelled, unnamed) are nobody\'s to see but an admin\'s', async (t) => {
  const tag = `${TB}/cli:1`
  const final = (await direct('GET', `/images/${tag}/json`)).json
  t.ok(final?.Parent, 'the classic builder left the final image a parent (the COPY step)')
  const parent = (await direct('GET', `/images/${String(final.Parent)}/json`)).json
  t.same([parent.RepoTags, parent.Config?.Labels?.['io.portcullis.tenant']], [[], undefined], 'the intermediate image carries no name and no owner label')
  for (const who of ['a', 'b'] as const) {
    const inspect = await as(who, 'GET', `/v1.41/images/${String(final.Parent)}/json`)
    t.equal(inspect.status, 404, `${who}: the intermediate image is missing`)
    const all = await as(who, 'GET', '/v1.41/images/json?all=1')
    t.notOk((all.json as any[]).some((i) => i.Id === final.Parent), `${who}: not in images -a`)
    const run = await as(who, 'POST', `/v1.41/containers/create?name=bld-${RUN}-${who}-mid`, { Image: String(final.Parent), Cmd: ['cat', '/hello.txt'] })
    t.equal(run.status, 404, `${who}: no container from it`)
  }
  t.equal((await direct('GET', `/images/${String(final.Parent)}/json`)).status, 200, 'the engine still has it (its builds use it)')
  const shared = await as('a', 'GET', `/v1.41/images/${IMAGE}/json`)
  t.equal(shared.status, 200, 'a named image of the shared catalog is still visible')
})
