/**
 * A tenant's build cache comes only from images the gateway itself recorded as made by
 * that tenant (issue 30: an image that merely carries the tenant's owner label, however
 * it got it, is no cache source; a label is not an identity). On the real (plain) engine:
 *
 * - a "planted" image: the same Dockerfile built directly on the engine (as any engine
 *   user, or a forged label, could make it) with tenant A's owner labels; A's build of that
 *   Dockerfile through the gateway must not reuse its RUN layer (the layer is random bytes:
 *   reused, it would be the same layer);
 * - A's second build of the same Dockerfile through the gateway does reuse A's own first
 *   build's layer (the record works, and survives a gateway restart with the same file);
 * - tenant B's build of the same Dockerfile reuses neither.
 */
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import jwt from 'jsonwebtoken'
import t from 'tap'
import { engine, request, startTestGateway, tarOf, type RawReply, type TestGateway } from './helpers/gateway'

const SECRET = randomBytes(32).toString('hex')
const RUN = randomBytes(3).toString('hex')
const TA = `bc-a-${RUN}`
const TB = `bc-b-${RUN}`
const IMAGE = engine().image
const token = (tenant: string): string => jwt.sign({ sub: 'carol', tenant, roles: ['tenant'], exp: Math.floor(Date.now() / 1000) + 3600 }, SECRET, { algorithm: 'HS256' })
// Non-root steps: the shipped defaults judge who a tenant's build steps run as.
const DOCKERFILE = `FROM ${IMAGE}\nUSER 65534:65534\nRUN head -c 32 /dev/urandom | od -x > /tmp/random-${RUN}\n`
const direct = async (method: string, path: string, body?: Buffer | object, contentType?: string): Promise<RawReply> => await request(engine().socket, method, path, body, { contentType })

let gw: TestGateway
const tags: string[] = []

async function build (via: 'engine' | 'a' | 'b', labels: Record<string, string> = {}): Promise<string[]> {
  const tag = `${via === 'b' ? TB : TA}/cache-${randomBytes(3).toString('hex')}:1`
  tags.push(tag)
  const target = `/v1.41/build?t=${encodeURIComponent(tag)}&rm=1&labels=${encodeURIComponent(JSON.stringify(labels))}`
  const context = tarOf({ Dockerfile: DOCKERFILE })
  const r = via === 'engine'
    ? await direct('POST', target, context, 'application/x-tar')
    : await request(gw.socket, 'POST', target, context, { token: token(via === 'a' ? TA : TB), contentType: 'application/x-tar' })
  if (r.status !== 200 || /errorDetail/.test(r.text)) throw new Error(`build via ${via}: ${r.status} ${r.text.slice(-400)}`)
  const inspect = await direct('GET', `/images/${tag}/json`)
  if (inspect.status !== 200) throw new Error(`no image ${tag}: ${r.text.slice(-400)}`)
  return inspect.json.RootFS.Layers as string[]
}

t.before(async () => { gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`) })
t.teardown(async () => {
  for (const tag of tags) await direct('DELETE', `/images/${tag}?force=1`)
  await gw?.close()
})

t.test('a planted image with the tenant\'s label is no cache source; the tenant\'s own build is', async (t) => {
  const planted = await build('engine', { 'io.portcullis.tenant': TA, 'io.portcullis.subject': 'carol' })
  const base = (await direct('GET', `/images/${IMAGE}/json`)).json.RootFS.Layers as string[]
  const step = planted[planted.length - 1]
  t.notOk(base.includes(step), 'the planted image\'s RUN layer is its own')
  const first = await build('a')
  t.notOk(first.includes(step), 'A\'s build did not reuse the planted layer, which carries A\'s owner label')
  const second = await build('a')
  t.same(second, first, 'A\'s next build reused A\'s own first build (the gateway recorded it)')
  const other = await build('b')
  t.notOk(other.includes(step) || other.includes(first[first.length - 1]), 'B reuses neither A\'s layer nor the planted one')
  const record = fs.readFileSync(`${gw.dir}/provenance.jsonl`, 'utf8')
  t.match(record, TA, 'the record names A')
  t.notMatch(record, /"tenant":"bc-a-[0-9a-f]+","id":"[^"]+","op":"ImageCommit"/, 'and no commit')

  // A gateway started again on the same record still knows A's images.
  const file = `${gw.dir}/provenance.jsonl`
  const again = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\nprovenance: { file: ${file}.copy }\n`)
  fs.copyFileSync(file, `${file}.copy`)
  try {
    const saved = gw
    gw = again
    const third = await build('a')
    gw = saved
    t.same(third, first, 'after a restart, the record still makes A\'s own layer a cache source')
  } finally {
    await again.close()
  }
})

t.test('a commit and an import through the gateway are recorded as the tenant\'s', async (t) => {
  const c = await request(gw.socket, 'POST', `/v1.41/containers/create?name=bc-${RUN}`, { Image: IMAGE, Cmd: ['true'] }, { token: token(TA) })
  t.equal(c.status, 201, c.text)
  const commit = await request(gw.socket, 'POST', `/v1.41/commit?container=${c.json.Id as string}&repo=${TA}/committed&tag=1`, {}, { token: token(TA) })
  t.equal(commit.status, 201, commit.text)
  tags.push(`${TA}/committed:1`)
  await direct('DELETE', `/containers/${c.json.Id as string}?force=1`)
  const imported = await request(gw.socket, 'POST', `/v1.41/images/create?fromSrc=-&repo=${TA}/imported&tag=1`, tarOf({ 'hello.txt': 'hello\n' }), { token: token(TA), contentType: 'application/x-tar' })
  t.equal(imported.status, 200, imported.text)
  tags.push(`${TA}/imported:1`)
  const record = fs.readFileSync(`${gw.dir}/provenance.jsonl`, 'utf8').trim().split('\n').map((l) => JSON.parse(l))
  t.ok(record.some((r) => r.tenant === TA && r.op === 'ImageCommit' && r.id === commit.json.Id), 'the commit\'s image id recorded')
  const importedId = (await direct('GET', `/images/${TA}/imported:1/json`)).json.Id
  t.ok(record.some((r) => r.tenant === TA && r.op === 'ImageCreate' && r.id === importedId), 'the import\'s image id recorded')
})
