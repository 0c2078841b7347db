/**
 * Build contexts: what the engine unpacks is the gateway's own writing of the context it
 * read, so the Dockerfile the engine builds is the one the gateway judged. As tenant B next
 * to tenant A (who has a private image), on the real engine:
 * - each tar header form that made the gateway's reading and the engine's differ pairs a
 *   harmless Dockerfile with one FROM A's private image: the build is refused by the rule
 *   `build-context`, or built from the harmless one (the image's label says which), never
 *   from the forbidden one; several of these contexts, sent to the engine directly, build
 *   the forbidden one (the attack is real);
 * - real clients (docker CLI 28 and 20.10 with the classic builder, docker-py, dockerode)
 *   build contexts with relative and absolute symbolic links, empty directories, long
 *   names and a .dockerignore through the gateway, and the image holds what they sent;
 * - generated contexts (entries named Dockerfile, d/Dockerfile under a link d -> ., other
 *   files, each in a random header form: plain, PAX path, GNU long name, ustar prefix,
 *   base-256 size, empty long names, global headers, trailing bytes) are never built from
 *   the forbidden Dockerfile. A bounded run (fixed seed) is part of `npm test`;
 *   `PCX_BUILD_CONTEXT_RUNS=500` runs more with a fresh seed (printed;
 *   `PCX_BUILD_CONTEXT_SEED=<seed>` repeats a run).
 */
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import Docker from 'dockerode'
import fc from 'fast-check'
import jwt from 'jsonwebtoken'
import t from 'tap'
import { CLI20, CLI28, engine, request, run, startTestGateway, type RawReply, type TestGateway } from './helpers/gateway'

const SYSTEM_PYTHON = '/usr/bin/python3'
const LONG_RUN = process.env.PCX_BUILD_CONTEXT_RUNS !== undefined
const RUNS = Number(process.env.PCX_BUILD_CONTEXT_RUNS ?? 50)
const SEED = process.env.PCX_BUILD_CONTEXT_SEED !== undefined ? Number(process.env.PCX_BUILD_CONTEXT_SEED) : LONG_RUN ? randomBytes(4).readInt32LE() : 20261126
const SECRET = randomBytes(32).toString('hex')
const RUN = randomBytes(3).toString('hex')
const TA = `bctx-a-${RUN}`
const TB = `bctx-b-${RUN}`
const IMAGE = engine().image
const token = (sub: string, tenant: string): string => jwt.sign({ sub, tenant, roles: ['tenant'], exp: Math.floor(Date.now() / 1000) + 3600 }, SECRET, { algorithm: 'HS256' })
const TOKENS = { a: token('alice', TA), b: token('bob', TB) }
const A_IMAGE = `${TA}/private:1`
const GOOD = `FROM ${IMAGE}\nLABEL which=good\n`
const EVIL = `FROM ${A_IMAGE}\nLABEL which=evil\n`

let gw: TestGateway
const direct = async (method: string, target: string, body?: Buffer): Promise<RawReply> => await request(engine().socket, method, target, body, { contentType: body ? 'application/x-tar' : undefined })
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pcbc-'))

// ---------------------------------------------------------------------------------
// Tar of any form, written by hand

interface Raw { name?: string, type?: string, size?: number, linkname?: string, prefix?: string, magic?: string, version?: string, base256?: boolean }

function header (h: Raw, dataLength: number): Buffer {
  const b = Buffer.alloc(512)
  b.write(h.name ?? '', 0, 100)
  b.write('0000644\0', 100)
  b.write('0000000\0', 108)
  b.write('0000000\0', 116)
  const size = h.size ?? dataLength
  if (h.base256) {
    b[124] = 0x80
    b.writeUIntBE(size, 136 - 6, 6)
  } else {
    b.write(size.toString(8).padStart(11, '0') + '\0', 124)
  }
  b.write('14707463512\0', 136)
  b.write(h.type ?? '0', 156, 1, 'latin1')
  b.write(h.linkname ?? '', 157, 100)
  b.write(h.magic ?? 'ustar\0', 257, 6, 'latin1')
  b.write(h.version ?? '00', 263, 2, 'latin1')
  if (h.prefix) b.write(h.prefix, 345, 155)
  b.fill(0x20, 148, 156)
  let sum = 0
  for (const x of b) sum += x
  b.write(sum.toString(8).padStart(6, '0') + '\0 ', 148, 8, 'latin1')
  return b
}

function entry (h: Raw, data: string | Buffer = ''): Buffer {
  const d = Buffer.from(data)
  return Buffer.concat([header(h, d.length), d, Buffer.alloc((512 - (d.length % 512)) % 512)])
}

function paxData (records: Record<string, string>): string {
  return Object.entries(records).map(([k, v]) => {
    const rest = ` ${k}=${v}\n`
    let len = Buffer.byteLength(rest) + 1
    while (String(len).length + Buffer.byteLength(rest) !== len) len = String(len).length + Buffer.byteLength(rest)
    return `${len}${rest}`
  }).join('')
}

const file = (name: string, text: string): Buffer => entry({ name }, text)
const END = Buffer.alloc(1024)

/** The contexts, each pairing GOOD with EVIL; `attack`: the engine alone builds EVIL from it. */
const CASES: Array<{ why: string, context: Buffer, attack?: boolean, rule?: boolean }> = [
  { why: 'PAX path', context: Buffer.concat([file('Dockerfile', GOOD), entry({ name: 'x', type: 'x' }, paxData({ path: 'other.txt' })), file('Dockerfile', EVIL), END]) },
  { why: 'PAX path naming the Dockerfile', context: Buffer.concat([file('Dockerfile', EVIL), entry({ name: 'x', type: 'x' }, paxData({ path: 'Dockerfile' })), file('other.txt', GOOD), END]), rule: true },
  { why: 'GNU long name, empty (Go ignores it)', context: Buffer.concat([file('Dockerfile', GOOD), entry({ name: '././@LongLink', type: 'L' }, ''), file('Dockerfile', EVIL), END]), attack: true, rule: true },
  { why: 'GNU long name over a PAX path', context: Buffer.concat([file('Dockerfile', GOOD), entry({ name: 'x', type: 'x' }, paxData({ path: 'other.txt' })), entry({ name: '././@LongLink', type: 'L' }, 'Dockerfile\0'), file('third.txt', EVIL), END]), rule: true },
  { why: 'ustar prefix with an odd version field', context: Buffer.concat([file('Dockerfile', EVIL), entry({ name: 'Dockerfile', prefix: 'zz', version: '\0\0' }, GOOD), END]), attack: true },
  { why: 'duplicate Dockerfile entries', context: Buffer.concat([file('Dockerfile', GOOD), file('Dockerfile', EVIL), END]), rule: true },
  { why: 'Dockerfile under a directory link d -> .', context: Buffer.concat([file('Dockerfile', GOOD), entry({ name: 'd', type: '2', linkname: '.' }), file('d/Dockerfile', EVIL), END]), attack: true, rule: true },
  { why: 'a global header', context: Buffer.concat([file('Dockerfile', EVIL), entry({ name: 'pax_global_header', type: 'g' }, paxData({ path: 'Dockerfile' })), file('other.txt', GOOD), END]), attack: true, rule: true },
  {
    why: 'a sparse entry named by GNU.sparse.name',
    context: Buffer.concat([file('Dockerfile', GOOD), entry({ name: 'x', type: 'x' }, paxData({ 'GNU.sparse.major': '0', 'GNU.sparse.minor': '1', 'GNU.sparse.name': 'Dockerfile', 'GNU.sparse.numblocks': '1', 'GNU.sparse.map': `0,${EVIL.length}`, 'GNU.sparse.size': String(EVIL.length) })), file('other.txt', EVIL), END]),
    attack: true,
    rule: true,
  },
  { why: 'a GNU sparse (type S) entry', context: Buffer.concat([file('Dockerfile', GOOD), entry({ name: 'other.txt', type: 'S' }, EVIL), END]), rule: true },
  { why: 'base-256 size', context: Buffer.concat([file('other.txt', EVIL), entry({ name: 'Dockerfile', base256: true }, GOOD), END]) },
  { why: 'base-256 size, twice', context: Buffer.concat([file('Dockerfile', EVIL), entry({ name: 'Dockerfile', base256: true }, GOOD), END]), rule: true },
  { why: 'trailing garbage after the end blocks', context: Buffer.concat([file('Dockerfile', GOOD), END, file('Dockerfile', EVIL), END]) },
  { why: 'a hard link as the Dockerfile', context: Buffer.concat([file('evil.df', EVIL), file('good.df', GOOD), entry({ name: 'Dockerfile', type: '1', linkname: 'evil.df' }), END]) },
  { why: 'a file replaced by a link below which the Dockerfile lies', context: Buffer.concat([file('sub/Dockerfile', GOOD), file('evil/Dockerfile', EVIL), entry({ name: 'sub', type: '2', linkname: 'evil' }), END]), rule: true },
  { why: 'a fifo', context: Buffer.concat([file('Dockerfile', GOOD), entry({ name: 'fifo', type: '6' }), END]), rule: true },
]

const as = async (who: 'a' | 'b', method: string, target: string, body?: Buffer | object, contentType?: string): Promise<RawReply> =>
  await request(gw.socket, method, target, body, { token: TOKENS[who], contentType })

async function which (tag: string): Promise<string | undefined> {
  const r = await direct('GET', `/images/${tag}/json`)
  return r.status === 200 ? String(r.json?.Config?.Labels?.which) : undefined
}

t.before(async () => {
  gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`)
  const c = await as('a', 'POST', `/v1.41/containers/create?name=bctx-${RUN}-a`, { Image: IMAGE, Cmd: ['true'] })
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

t.test('the engine alone builds the forbidden Dockerfile from these contexts', async (t) => {
  for (const c of CASES.filter((c) => c.attack)) {
    const tag = `${TA}/direct-${randomBytes(3).toString('hex')}:1`
    await direct('POST', `/build?t=${encodeURIComponent(tag)}&rm=1&forcerm=1`, c.context)
    t.equal(await which(tag), 'evil', `${c.why}: the engine built FROM A's private image`)
  }
})

t.test('through the gateway: refused, or built from the Dockerfile it judged', async (t) => {
  for (const c of CASES) {
    const tag = `${TB}/ctx-${randomBytes(3).toString('hex')}:1`
    const r = await as('b', 'POST', `/v1.41/build?t=${encodeURIComponent(tag)}&rm=1&forcerm=1`, c.context, 'application/x-tar')
    const built = await which(tag)
    t.not(built, 'evil', `${c.why}: never built from the forbidden Dockerfile`)
    if (c.rule) {
      t.equal(r.status, 403, `${c.why}: refused`)
      t.match(r.json?.message, /rule build-context/, `${c.why}: by build-context`)
      t.equal(built, undefined, `${c.why}: nothing built`)
    } else {
      t.ok(built === 'good' || (r.status >= 400 && built === undefined), `${c.why}: built from the judged Dockerfile, or refused`, { status: r.status, text: r.text.slice(0, 300) })
    }
  }
})

// ---------------------------------------------------------------------------------
// Real clients

const LONG = `${'l'.repeat(90)}/${'m'.repeat(90)}`

function clientContext (dir: string): void {
  fs.mkdirSync(path.join(dir, 'data'), { recursive: true })
  fs.writeFileSync(path.join(dir, 'data', 'file.txt'), 'hello\n')
  fs.symlinkSync('data/file.txt', path.join(dir, 'rel-link'))
  fs.symlinkSync('/data/file.txt', path.join(dir, 'abs-link'))
  fs.mkdirSync(path.join(dir, 'empty'))
  fs.mkdirSync(path.join(dir, path.dirname(LONG)), { recursive: true })
  fs.writeFileSync(path.join(dir, LONG), 'long\n')
  fs.writeFileSync(path.join(dir, 'ignored.txt'), 'ignored\n')
  fs.writeFileSync(path.join(dir, '.dockerignore'), 'ignored.txt\n')
  fs.writeFileSync(path.join(dir, 'Dockerfile'), [
    `FROM ${IMAGE}`,
    'COPY . /ctx/',
    'COPY rel-link /rel-copied',
    'COPY abs-link /abs-copied',
    `CMD ["sh", "-c", "cat /rel-copied /abs-copied /ctx/${LONG} && readlink /ctx/rel-link && readlink /ctx/abs-link && test -d /ctx/empty && test ! -e /ctx/ignored.txt && echo ok"]`,
    '',
  ].join('\n'))
}

const EXPECTED = 'hello\nhello\nlong\ndata/file.txt\n/data/file.txt\nok\n'

t.test('real clients build contexts with links, empty directories, long names and .dockerignore', async (t) => {
  const cfg = path.join(tmp, 'cfg')
  fs.mkdirSync(cfg)
  fs.writeFileSync(path.join(cfg, 'config.json'), JSON.stringify({ HttpHeaders: { Authorization: `Bearer ${TOKENS.b}` } }))
  const env = { DOCKER_CONFIG: cfg, DOCKER_BUILDKIT: '0' }
  const clients: Array<[string, (dir: string, tag: string) => Promise<{ code: number | null, stderr: string }>]> = [
    ['docker CLI 28', async (dir, tag) => await run(CLI28, ['build', '-q', '-t', tag, dir], { host: gw.dockerHost, env })],
    ['docker CLI 20.10', async (dir, tag) => await run(CLI20, ['build', '-q', '-t', tag, dir], { host: gw.dockerHost, env })],
    ['docker-py', async (dir, tag) => await run(SYSTEM_PYTHON, ['-c', 'import docker, sys\ndocker.from_env(timeout=120).images.build(path=sys.argv[1], tag=sys.argv[2], rm=True)', dir, tag], { host: gw.dockerHost, env })],
    ['dockerode', async (dir, tag) => {
      const docker = new Docker({ socketPath: gw.socket, headers: { Authorization: `Bearer ${TOKENS.b}` } } as Docker.DockerOptions)
      try {
        const stream = await docker.buildImage({ context: dir, src: ['Dockerfile', '.dockerignore', 'data', 'rel-link', 'abs-link', 'empty', LONG.split('/')[0]] }, { t: tag, rm: true })
        const out: any[] = await new Promise((resolve, reject) => docker.modem.followProgress(stream, (err: Error | null, res: any[]) => err ? reject(err) : resolve(res)))
        const error = out.find((o) => o.error)
        return { code: error ? 1 : 0, stderr: error ? String(error.error) : '' }
      } catch (err) {
        return { code: 1, stderr: String(err) }
      }
    }],
  ]
  for (const [name, build] of clients) {
    const dir = path.join(tmp, name.replace(/\W/g, '-'))
    clientContext(dir)
    const tag = `${TB}/client-${randomBytes(3).toString('hex')}:1`
    const r = await build(dir, tag)
    t.equal(r.code, 0, `${name}: built through the gateway`, { stderr: r.stderr })
    const out = await run(CLI28, ['run', '--rm', tag], { host: engine().dockerHost })
    t.equal(out.stdout.toString(), EXPECTED, `${name}: the image holds the context as sent`, { stderr: out.stderr })
  }
})

// ---------------------------------------------------------------------------------
// Generated contexts

type Form = 'plain' | 'pax' | 'gnu' | 'prefix' | 'base256' | 'empty-gnu' | 'global'
interface GenEntry { name: string, kind: 'file' | 'link-dot' | 'dir', text: string, form: Form }

/** One entry written in `form`; the name it carries is the one Go's reader gives it. */
function written (e: GenEntry): Buffer {
  const data = e.kind === 'file' ? e.text : ''
  const type = e.kind === 'file' ? '0' : e.kind === 'dir' ? '5' : '2'
  const linkname = e.kind === 'link-dot' ? '.' : ''
  const slash = e.name.lastIndexOf('/')
  switch (e.form) {
    case 'plain': return entry({ name: e.name, type, linkname }, data)
    case 'pax': return Buffer.concat([entry({ name: 'x', type: 'x' }, paxData({ path: e.name })), entry({ name: 'decoy.txt', type, linkname }, data)])
    case 'gnu': return Buffer.concat([entry({ name: '././@LongLink', type: 'L' }, `${e.name}\0`), entry({ name: 'decoy.txt', type, linkname }, data)])
    case 'prefix': return slash < 0 ? entry({ name: e.name, type, linkname }, data) : entry({ name: e.name.slice(slash + 1), prefix: e.name.slice(0, slash), version: '\0\0', type, linkname }, data)
    case 'base256': return entry({ name: e.name, type, linkname, base256: true }, data)
    case 'empty-gnu': return Buffer.concat([entry({ name: '././@LongLink', type: 'L' }, ''), entry({ name: e.name, type, linkname }, data)])
    case 'global': return Buffer.concat([entry({ name: 'pax_global_header', type: 'g' }, paxData({ path: 'Dockerfile' })), entry({ name: e.name, type, linkname }, data)])
  }
}

const FORMS: Form[] = ['plain', 'plain', 'plain', 'plain', 'pax', 'gnu', 'prefix', 'base256', 'empty-gnu', 'global']
const genEntry: fc.Arbitrary<GenEntry> = fc.oneof(
  fc.record({ name: fc.constantFrom('Dockerfile', 'd/Dockerfile', 'other.txt', 'sub/file.txt', 'sub/Dockerfile'), kind: fc.constant<GenEntry['kind']>('file'), text: fc.constantFrom(GOOD, EVIL), form: fc.constantFrom(...FORMS) }),
  fc.record({ name: fc.constant('d'), kind: fc.constantFrom<GenEntry['kind']>('link-dot', 'dir'), text: fc.constant(''), form: fc.constantFrom(...FORMS) })
)
/** A context: the harmless Dockerfile, plainly, among generated entries (or not at all). */
const genContext = fc.tuple(fc.array(genEntry, { minLength: 0, maxLength: 4 }), fc.option(fc.nat(4), { nil: undefined })).map(([entries, at]) =>
  at === undefined ? entries : [...entries.slice(0, at), { name: 'Dockerfile', kind: 'file' as const, text: GOOD, form: 'plain' as const }, ...entries.slice(at)])

t.test('generated contexts are never built from the forbidden Dockerfile', async (t) => {
  t.comment(`fast-check seed ${SEED}, ${RUNS} runs`)
  let built = 0
  await fc.assert(fc.asyncProperty(genContext, fc.boolean(), async (entries, trailing) => {
    const context = Buffer.concat([...entries.map(written), END, ...(trailing ? [file('Dockerfile', EVIL), END] : [])])
    const tag = `${TB}/gen-${randomBytes(3).toString('hex')}:1`
    const r = await as('b', 'POST', `/v1.41/build?t=${encodeURIComponent(tag)}&rm=1&forcerm=1`, context, 'application/x-tar')
    const label = await which(tag)
    if (label !== undefined) built++
    if (label === 'evil') throw new Error(`built FROM A's image: ${JSON.stringify(entries)} trailing=${String(trailing)} (status ${r.status})`)
    if (r.status >= 500) throw new Error(`the gateway failed (${r.status} ${r.text.slice(0, 200)}): ${JSON.stringify(entries)}`)
  }), { seed: SEED, numRuns: RUNS })
  t.pass(`no generated context was built from the forbidden Dockerfile (${built} of ${RUNS} built from the judged one)`)
  t.ok(built > 0, 'some generated contexts were built (the property is not vacuous)')
})
