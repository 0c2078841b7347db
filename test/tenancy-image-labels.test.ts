/**
 * Owner labels cannot be forged, and image creation says what it does. On the real
 * (plain) engine, as tenant A through the gateway, the engine's state checked:
 *
 * - commit and import `changes` are Dockerfile instructions (joined with newlines, parser
 *   directives, escapes, quoting, line continuations, several pairs per LABEL, ONBUILD):
 *   any that would set an io.portcullis.* label is refused, and nothing is created;
 *   before, a regex over the raw text let `io\.portcullis\.tenant` through and the image
 *   belonged to another tenant;
 * - a commit or import the gateway lets through carries the caller's owner labels;
 * - POST /images/create with `fromImage` is a pull (the engine's branch order) even with
 *   `fromSrc=-`: the registry allow-list applies;
 * - a build `remote` other than the context in the body (git and URL forms) is refused.
 */
import http from 'node:http'
import { randomBytes } from 'node:crypto'
import jwt from 'jsonwebtoken'
import t from 'tap'
import { engine, startTestGateway, type TestGateway } from './helpers/gateway'

const SECRET = randomBytes(32).toString('hex')
const RUN = randomBytes(3).toString('hex')
const TA = `img-a-${RUN}`
const OWNER = { 'io.portcullis.tenant': TA, 'io.portcullis.subject': 'alice' }
const IMAGE = engine().image
const TOKEN = jwt.sign({ sub: 'alice', tenant: TA, roles: ['tenant'], exp: Math.floor(Date.now() / 1000) + 3600 }, SECRET, { algorithm: 'HS256' })

interface Reply { status: number, text: string, json: any }
async function request (socketPath: string, method: string, path: string, body?: Buffer | object, token?: string, contentType = 'application/json'): Promise<Reply> {
  const data = body === undefined ? undefined : Buffer.isBuffer(body) ? body : Buffer.from(JSON.stringify(body))
  const headers: Record<string, string | number> = {}
  if (data) { headers['content-type'] = contentType; headers['content-length'] = data.length }
  if (token) headers.authorization = `Bearer ${token}`
  return await new Promise((resolve, reject) => {
    const req = http.request({ socketPath, method, path, headers }, (res) => {
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
let gw: TestGateway
const asA = async (method: string, path: string, body?: Buffer | object, contentType?: string): Promise<Reply> => await request(gw.socket, method, path, body, TOKEN, contentType)
const direct = async (method: string, path: string, body?: object): Promise<Reply> => await request(engine().socket, method, path, body)
const imageLabels = async (ref: string): Promise<Record<string, string> | undefined> => {
  const r = await direct('GET', `/images/${ref}/json`)
  return r.status === 200 ? r.json.Config?.Labels ?? {} : undefined
}

/** A one-file tar archive (a root filesystem to import). */
function tar (name: string, content: string): Buffer {
  const data = Buffer.from(content)
  const h = Buffer.alloc(512)
  h.write(name, 0, 100)
  h.write('0000644\0', 100); h.write('0000000\0', 108); h.write('0000000\0', 116)
  h.write(data.length.toString(8).padStart(11, '0') + '\0', 124)
  h.write(Math.floor(Date.now() / 1000).toString(8).padStart(11, '0') + '\0', 136)
  h.write('        ', 148); h.write('0', 156); h.write('ustar\0', 257); h.write('00', 263)
  let sum = 0
  for (const b of h) sum += b
  h.write(sum.toString(8).padStart(6, '0') + '\0 ', 148)
  return Buffer.concat([h, data, Buffer.alloc((512 - (data.length % 512)) % 512), Buffer.alloc(1024)])
}

let box = ''
const images: string[] = []
t.before(async () => {
  gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`)
  const r = await asA('POST', `/v1.41/containers/create?name=img-${RUN}-box`, { Image: IMAGE, Cmd: ['true'] })
  if (r.status !== 201) throw new Error(`create: ${r.status} ${r.text}`)
  box = r.json.Id
})
t.teardown(async () => {
  for (const i of images) await direct('DELETE', `/images/${i}?force=1`)
  await direct('DELETE', `/containers/${box}?force=1`)
  await gw?.close()
})

const FORGED: Array<[string, string[]]> = [
  ['escaped dots', ['LABEL io\\.portcullis\\.tenant=someone-else']],
  ['quoted key, several pairs', ['LABEL a=b "io.portcullis.tenant"=someone-else']],
  ['single-quoted key', ["LABEL 'io.portcullis.subject'=root"]],
  ['a line continuation across changes', ['LABEL io.portcul\\', 'lis.tenant=someone-else']],
  ['another escape character', ['# escape=`', 'LABEL io`.portcullis`.tenant=someone-else']],
  ['lower-case instruction, space-separated form', ['label io.portcullis.tenant someone-else']],
  ['a variable in the key', ['ENV X=portcullis', 'LABEL io.${X}.tenant=someone-else']],
  ['ONBUILD', ['ONBUILD LABEL io.portcullis.tenant=someone-else']],
]
const changes = (cs: string[]): string => cs.map((c) => `changes=${encodeURIComponent(c)}`).join('&')

t.test('commit: changes that would set an owner label are refused, nothing committed', async (t) => {
  for (const [why, cs] of FORGED) {
    const repo = `${TA}/forged-${randomBytes(3).toString('hex')}`
    const r = await asA('POST', `/v1.41/commit?container=${box}&repo=${repo}&tag=1&${changes(cs)}`, {})
    t.equal(r.status, 403, `${why}: refused`)
    t.match(r.json?.message, /rule owner-labels/)
    t.equal(await imageLabels(`${repo}:1`), undefined, `${why}: no image committed`)
  }
})

t.test('commit: other labels kept, the owner labels are the caller\'s', async (t) => {
  const repo = `${TA}/committed-${RUN}`
  const r = await asA('POST', `/v1.41/commit?container=${box}&repo=${repo}&tag=1&${changes(['LABEL purpose="a test" b=c'])}`, { Labels: { 'io.portcullis.tenant': 'someone-else' } })
  t.equal(r.status, 201, r.text)
  images.push(`${repo}:1`)
  t.same(await imageLabels(`${repo}:1`), { purpose: 'a test', b: 'c', ...OWNER }, 'the engine stored the changes\' labels and the caller\'s owner labels')
})

t.test('import: changes checked the same way, the imported image is the caller\'s', async (t) => {
  const rootfs = tar('hello.txt', 'hello\n')
  for (const [why, cs] of FORGED.slice(0, 3)) {
    const repo = `${TA}/imp-forged-${randomBytes(3).toString('hex')}`
    const r = await asA('POST', `/v1.41/images/create?fromSrc=-&repo=${repo}&tag=1&${changes(cs)}`, rootfs, 'application/x-tar')
    t.equal(r.status, 403, `${why}: refused`)
    t.equal(await imageLabels(`${repo}:1`), undefined, `${why}: nothing imported`)
  }
  const repo = `${TA}/imported-${RUN}`
  const r = await asA('POST', `/v1.41/images/create?fromSrc=-&repo=${repo}&tag=1&${changes(['LABEL kind=import'])}`, rootfs, 'application/x-tar')
  t.equal(r.status, 200, r.text)
  images.push(`${repo}:1`)
  t.same(await imageLabels(`${repo}:1`), { kind: 'import', ...OWNER }, 'the imported image carries the caller\'s owner labels')
})

t.test('images/create with fromImage is a pull, whatever else the query holds', async (t) => {
  const r = await asA('POST', `/v1.41/images/create?fromImage=${encodeURIComponent('registry.invalid:5000/x/y')}&tag=1&fromSrc=-&repo=${TA}/z`, tar('a', 'a'), 'application/x-tar')
  t.equal(r.status, 403, 'checked as a pull from a registry outside the allow-list')
  t.match(r.json?.message, /registry registry\.invalid:5000 is not allowed.*rule registry-not-allowed/)
  const noSource = await asA('POST', `/v1.41/images/create?repo=${TA}/z&tag=1`)
  t.equal(noSource.status, 403, 'neither fromImage nor fromSrc=-: the engine would fetch an empty URL')
})

t.test('build: any remote context is refused for tenants', async (t) => {
  for (const remote of ['github.com/moby/moby', 'git@example.invalid:x/y.git', 'https://example.invalid/ctx.tar', 'git://example.invalid/x', 'http://127.0.0.1:1/x.git#main']) {
    const r = await asA('POST', `/v1.41/build?remote=${encodeURIComponent(remote)}&t=${TA}/remote:1`, tar('Dockerfile', `FROM ${IMAGE}\n`), 'application/x-tar')
    t.equal(r.status, 403, `remote=${remote}`)
    t.match(r.json?.message, /rule build-remote/)
  }
})

t.test('start from a checkpoint (a host directory) is refused for tenants', async (t) => {
  const r = await asA('POST', `/v1.41/containers/${box}/start?checkpoint=c1&checkpoint-dir=${encodeURIComponent('/var/lib')}`)
  t.equal(r.status, 403)
  t.match(r.json?.message, /rule no-checkpoints/)
  t.equal((await direct('GET', `/containers/${box}/json`)).json.State.Status, 'created', 'not started')
})
