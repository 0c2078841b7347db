/**
 * Per-tenant image names (tenancy.yaml `names: private`, src/gateway/tenancy/names.ts),
 * on the real engine with the docker CLI 28: two tenants build, tag, run, commit, import
 * and load images under the same plain names at once; each sees only its own under those
 * names (list, inspect, a container's image, events, df, errors); on the engine they are
 * `portcullis.invalid/<tenant>/<name>`; a shared image stays reachable by its plain name
 * and a tenant's own name wins over it; `FROM` another tenant's name, in any spelling,
 * never builds on that tenant's image (checked on what the engine built); the admin sees
 * the engine's names.
 *
 * On the old code every `-t myapp` of a tenant is refused (rule image-namespace).
 */
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { CLI28, engine, policiesWith, run, type RunResult, startTestGateway, type TestGateway, tokensFor } from './helpers/gateway'

const TENANT_LABEL = 'io.portcullis.tenant'
const IMAGE = engine().image
/** The shared image's plain repository, as a tenant names it. */
const SHARED = IMAGE.replace(/:latest$/, '')

const SECRET = randomBytes(32).toString('hex')
const RUN = randomBytes(3).toString('hex')
const TA = `imgnames-a-${RUN}`
const TB = `imgnames-b-${RUN}`
const HOST = 'portcullis.invalid'
const engineName = (tenant: string, name: string): string => `${HOST}/${tenant}/${name}`

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pci-'))
t.teardown(() => fs.rmSync(tmp, { recursive: true, force: true }))

type Who = 'a' | 'b' | 'admin'
const CLAIMS: Record<Who, object> = {
  a: { sub: 'ann', tenant: TA, roles: ['tenant'] },
  b: { sub: 'bo', tenant: TB, roles: ['tenant'] },
  admin: { sub: 'root-op', roles: ['admin'] },
}
const { config: CONFIG } = tokensFor(CLAIMS, SECRET, tmp)
const TENANT: Record<'a' | 'b', string> = { a: TA, b: TB }

let gw: TestGateway
const as = async (who: Who, args: readonly string[], stdin?: Buffer): Promise<RunResult> =>
  await run(CLI28, args, { host: gw.dockerHost, env: { DOCKER_CONFIG: CONFIG[who] }, timeoutMs: 180_000, ...(stdin ? { stdin } : {}) })
const direct = async (args: readonly string[]): Promise<RunResult> =>
  await run(CLI28, args, { host: engine().dockerHost, timeoutMs: 180_000 })
const lines = (r: RunResult): string[] => r.stdout.toString().split('\n').filter((l) => l !== '')
const out = (r: RunResult): Record<string, unknown> => r.code === 0 ? {} : { stderr: r.stderr.trim() }
const inspectDirect = async (ref: string): Promise<any> => {
  const r = await direct(['image', 'inspect', ref])
  return r.code === 0 ? JSON.parse(r.stdout.toString())[0] : null
}
const inspectAs = async (who: Who, kind: string, ref: string): Promise<any> => {
  const r = await as(who, [kind, 'inspect', ref])
  return r.code === 0 ? JSON.parse(r.stdout.toString())[0] : null
}
const envOf = (i: any): string[] => i?.Config?.Env ?? []

/** A build context whose Dockerfile is `dockerfile`. */
function context (name: string, dockerfile: string): string {
  const dir = path.join(tmp, name)
  fs.mkdirSync(dir, { recursive: true })
  fs.writeFileSync(path.join(dir, 'Dockerfile'), dockerfile)
  return dir
}

const started = Math.floor(Date.now() / 1000)

t.before(async () => {
  const policies = policiesWith((text) => text.replace(/^names: engine$/m, 'names: private'))
  gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, undefined, policies)
})

t.teardown(async () => {
  for (const tenant of [TA, TB]) {
    const cs = lines(await direct(['ps', '-aq', '--filter', `label=${TENANT_LABEL}=${tenant}`]))
    if (cs.length) await direct(['rm', '-f', ...cs])
    const is = lines(await direct(['image', 'ls', '-q', '--filter', `label=${TENANT_LABEL}=${tenant}`]))
    if (is.length) await direct(['image', 'rm', '-f', ...new Set(is)])
  }
  await direct(['image', 'rm', `ld-${RUN}:1`])
  await gw?.close()
})

t.test('two tenants build, tag and run the same plain image names side by side', async (t) => {
  for (const who of ['a', 'b'] as const) {
    const b = await as(who, ['build', '-q', '-t', 'myapp', context(`app-${who}`, `FROM ${IMAGE}\nENV WHO=${who}\nLABEL who=${who}\n`)])
    t.equal(b.code, 0, `${who}: docker build -t myapp`, out(b))
    const tag = await as(who, ['tag', 'myapp', 'myapp:v2'])
    t.equal(tag.code, 0, `${who}: docker tag myapp myapp:v2`, out(tag))
  }
  for (const who of ['a', 'b'] as const) {
    // On the engine: under the tenant's prefix, with the tenant's own content.
    for (const name of ['myapp:latest', 'myapp:v2']) {
      const stored = await inspectDirect(engineName(TENANT[who], name))
      t.ok(stored, `${who}: the engine has ${engineName(TENANT[who], name)}`)
      t.equal(stored?.Config?.Labels?.[TENANT_LABEL], TENANT[who], `${who}: ${name} is the tenant's`)
      t.ok(envOf(stored).includes(`WHO=${who}`), `${who}: ${name} is the tenant's build`)
    }
    t.equal(await inspectDirect('myapp:latest'), null, 'no plain myapp on the engine')
    const ran = await as(who, ['run', '--rm', 'myapp', 'sh', '-c', 'echo $WHO'])
    t.equal(ran.stdout.toString().trim(), who, `${who}: docker run myapp runs its own`, out(ran))
    const seen = await inspectAs(who, 'image', 'myapp')
    t.same([...(seen?.RepoTags ?? [])].sort(), ['myapp:latest', 'myapp:v2'], `${who}: inspect RepoTags in plain names`)
    const ls = lines(await as(who, ['image', 'ls', '--format', '{{.Repository}}:{{.Tag}}']))
    t.ok(ls.includes('myapp:latest') && ls.includes('myapp:v2'), `${who}: image ls shows myapp`, { ls })
    t.notOk(ls.some((l) => l.includes(HOST)), `${who}: image ls shows no engine name`, { ls })
    const hist = await as(who, ['history', '-q', 'myapp:v2'])
    t.equal(hist.code, 0, `${who}: docker history myapp:v2`, out(hist))
  }
  const loud = await as('a', ['build', '-t', 'myapp:loud', context('app-a', `FROM ${IMAGE}\nENV WHO=a\nLABEL who=a\n`)])
  t.match(loud.stdout.toString(), /Successfully tagged myapp:loud\n/, 'the build\'s output in plain names', out(loud))
  t.notMatch(loud.stdout.toString(), HOST)
  const missingTag = await as('a', ['image', 'inspect', 'myapp:nope'])
  t.match(missingTag.stderr, /No such image: myapp:nope/, 'a missing tag: the engine\'s message in plain names')
  t.notMatch(missingTag.stderr, HOST)
})

t.test('a container\'s image, commit, import, load and remove in plain names', async (t) => {
  const tar = await rootfsTar()
  for (const who of ['a', 'b'] as const) {
    const c = await as(who, ['run', '-d', '--name', 'app', 'myapp', 'sleep', '60'])
    t.equal(c.code, 0, `${who}: docker run -d myapp`, out(c))
    const ci = await inspectAs(who, 'container', 'app')
    t.equal(ci?.Config?.Image, 'myapp', `${who}: container inspect Config.Image`)
    const ps = lines(await as(who, ['ps', '--format', '{{.Names}} {{.Image}}']))
    t.ok(ps.includes('app myapp'), `${who}: ps shows the image as named`, { ps })
    const commit = await as(who, ['commit', 'app', 'snap:1'])
    t.equal(commit.code, 0, `${who}: docker commit app snap:1`, out(commit))
    t.equal((await inspectDirect(engineName(TENANT[who], 'snap:1')))?.Config?.Labels?.[TENANT_LABEL], TENANT[who], `${who}: the engine has its snap:1`)
    const imp = await as(who, ['import', '-', 'imp:1'], tar)
    t.equal(imp.code, 0, `${who}: docker import - imp:1`, out(imp))
    t.equal((await inspectDirect(engineName(TENANT[who], 'imp:1')))?.Config?.Labels?.[TENANT_LABEL], TENANT[who], `${who}: the engine has its imp:1`)
    await as(who, ['rm', '-f', 'app'])
  }
  // An archive tagged with a plain name, loaded by both tenants.
  t.equal((await direct(['tag', IMAGE, `ld-${RUN}:1`])).code, 0)
  const archive = await direct(['save', `ld-${RUN}:1`])
  t.equal(archive.code, 0)
  for (const who of ['a', 'b'] as const) {
    const ld = await as(who, ['load'], archive.stdout)
    t.equal(ld.code, 0, `${who}: docker load`, out(ld))
    t.match(ld.stdout.toString(), `Loaded image: ld-${RUN}:1`, `${who}: load's output in plain names`)
    t.notMatch(ld.stdout.toString(), HOST)
    t.equal((await inspectDirect(engineName(TENANT[who], `ld-${RUN}:1`)))?.Config?.Labels?.[TENANT_LABEL], TENANT[who], `${who}: the engine has its ld-${RUN}:1`)
    const seen = await inspectAs(who, 'image', `ld-${RUN}:1`)
    t.ok(seen?.RepoTags?.includes(`ld-${RUN}:1`), `${who}: the loaded tag is its own`, { tags: seen?.RepoTags })
    const saved = await as(who, ['save', `ld-${RUN}:1`])
    t.equal(saved.code, 0, `${who}: docker save of its own name`, out(saved))
  }
  // Remove: a's own tag only; b's stays.
  const rmi = await as('a', ['rmi', 'myapp:v2'])
  t.equal(rmi.code, 0, 'a: docker rmi myapp:v2', out(rmi))
  t.equal(rmi.stdout.toString().trim(), 'Untagged: myapp:v2', 'rmi\'s answer in plain names')
  t.equal(await inspectDirect(engineName(TA, 'myapp:v2')), null, 'a\'s myapp:v2 is gone')
  t.ok(await inspectDirect(engineName(TB, 'myapp:v2')), 'b\'s myapp:v2 stays')
})

/** A root filesystem tar of the shared image (its single layer). */
async function rootfsTar (): Promise<Buffer> {
  const id = lines(await direct(['create', IMAGE]))[0]
  const r = await direct(['export', id])
  await direct(['rm', id])
  return r.stdout
}

t.test('shared images by plain name; a tenant\'s own name wins', async (t) => {
  const shared = await as('b', ['run', '--rm', SHARED, 'sh', '-c', 'echo "[$WHO]"'])
  t.equal(shared.stdout.toString().trim(), '[]', 'b: the shared image by its plain name', out(shared))
  const own = await as('a', ['tag', 'myapp', SHARED])
  t.equal(own.code, 0, 'a: tags its own image with the shared image\'s name', out(own))
  t.ok(await inspectDirect(engineName(TA, `${SHARED}:latest`)), 'stored under a\'s prefix')
  t.equal((await inspectDirect(IMAGE))?.Config?.Labels?.[TENANT_LABEL], undefined, 'the shared image is untouched')
  const mine = await as('a', ['run', '--rm', SHARED, 'sh', '-c', 'echo "[$WHO]"'])
  t.equal(mine.stdout.toString().trim(), '[a]', 'a: its own name wins', out(mine))
  const theirs = await as('b', ['run', '--rm', SHARED, 'sh', '-c', 'echo "[$WHO]"'])
  t.equal(theirs.stdout.toString().trim(), '[]', 'b: still the shared image', out(theirs))
  const built = await as('a', ['build', '-q', '-t', 'onshared', context('onshared', `FROM ${SHARED}\nLABEL step=two\n`)])
  t.equal(built.code, 0, 'a: FROM the name it owns', out(built))
  t.ok(envOf(await inspectDirect(engineName(TA, 'onshared:latest'))).includes('WHO=a'), 'a: the build started from a\'s own image')
  const rmi = await as('a', ['rmi', SHARED])
  t.equal(rmi.code, 0, 'a: removes its own tag', out(rmi))
  t.ok(await inspectDirect(IMAGE), 'the shared image stays')
})

t.test('FROM another tenant\'s name never builds on its image', async (t) => {
  const a = await inspectDirect(engineName(TA, 'myapp:latest'))
  for (const from of [engineName(TA, 'myapp'), `${HOST}/${TA}/myapp:latest`, a.Id]) {
    const r = await as('b', ['build', '-q', '-t', 'stolen', context(`stolen-${from.length}`, `FROM ${from}\n`)])
    t.not(r.code, 0, `b: FROM ${from} is refused`)
    t.equal(await inspectDirect(engineName(TB, 'stolen:latest')), null, 'nothing built')
  }
  const tag = await as('b', ['tag', 'myapp', `${HOST}/${TA}/planted`])
  t.not(tag.code, 0, 'b cannot tag into a\'s names')
  t.equal(await inspectDirect(`${HOST}/${TA}/planted`), null)
  // B's FROM myapp is B's own.
  const r = await as('b', ['build', '-q', '-t', 'next', context('next-b', 'FROM myapp\n')])
  t.equal(r.code, 0, 'b: FROM myapp', out(r))
  const next = await inspectDirect(engineName(TB, 'next:latest'))
  t.ok(envOf(next).includes('WHO=b'), 'the engine built on b\'s myapp')
  t.notOk(envOf(next).includes('WHO=a'))
})

t.test('events, df and the admin\'s view', async (t) => {
  const ev = await as('a', ['events', '--since', String(started), '--until', String(Math.floor(Date.now() / 1000) + 1), '--format', '{{json .}}'])
  t.equal(ev.code, 0, out(ev))
  const events = lines(ev).map((l) => JSON.parse(l))
  t.ok(events.some((e) => e.Type === 'image' && e.Action === 'tag' && e.Actor?.Attributes?.name === 'myapp:v2'), 'a sees its tag event in plain names')
  t.ok(events.some((e) => e.Type === 'container' && e.Actor?.Attributes?.image === 'myapp'), 'a container event\'s image in plain names')
  t.notOk(ev.stdout.toString().includes(HOST), 'no engine image names in a\'s events', { found: lines(ev).filter((l) => l.includes(HOST)) })
  t.notOk(ev.stdout.toString().includes(TB), 'nothing of b\'s in a\'s events')
  const filtered = await as('a', ['events', '--since', String(started), '--until', String(Math.floor(Date.now() / 1000) + 1), '--filter', 'image=myapp', '--format', '{{json .}}'])
  const byImage = lines(filtered).map((l) => JSON.parse(l))
  t.ok(byImage.some((e) => e.Type === 'container' && e.Actor?.Attributes?.image === 'myapp'), 'a: events --filter image=myapp finds its own', { n: byImage.length })
  t.ok(byImage.every((e) => !JSON.stringify(e).includes(TB)), 'and nothing of b\'s')
  const df = await as('a', ['system', 'df', '-v', '--format', '{{json .}}'])
  t.equal(df.code, 0, out(df))
  t.ok(df.stdout.toString().includes('"myapp"') || df.stdout.toString().includes('myapp'), 'df lists myapp')
  t.notOk(df.stdout.toString().includes(HOST), 'df shows no engine image names')
  const admin = lines(await as('admin', ['image', 'ls', '--format', '{{.Repository}}:{{.Tag}}']))
  t.ok(admin.includes(`${engineName(TA, 'myapp')}:latest`) && admin.includes(`${engineName(TB, 'myapp')}:latest`), 'the admin sees the engine\'s names', { admin })
})
