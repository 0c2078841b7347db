/**
 * The shared image set (tenancy.yaml `images.shared`, src/gateway/tenancy/shared-images.ts),
 * under `names: private`, on the real engine with the docker CLI 28: an unowned image is
 * the tenants' only by a listed name (or by id when one of its names is listed), and shows
 * only its listed names; an unlisted one is "No such image" everywhere (run, FROM,
 * inspect, list, history, tag, by id too) and cannot be pulled; a tenant's own tag of a
 * listed name wins for that tenant only.
 *
 * On the old code tenancy.yaml's `images` key is an unknown key (the gateway refuses the
 * policy directory); without it every unowned named image is shared.
 */
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { compileTenancy } from '../src/policy/tenancy'
import { CLI28, engine, policiesWith, request, run, type RunResult, startTestGateway, type TestGateway, tarOf, tokensFor } from './helpers/gateway'

const TENANT_LABEL = 'io.portcullis.tenant'
const SECRET = randomBytes(32).toString('hex')
const RUN = randomBytes(3).toString('hex')
const TA = `shra-${RUN}`
const TB = `shrb-${RUN}`
const LISTED = `listed-${RUN}:1`
const SECRET_TAG = `secret-${RUN}:1`
const HIDDEN = `hidden-${RUN}:1`

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pcs-'))
t.teardown(() => fs.rmSync(tmp, { recursive: true, force: true }))
const { config: CONFIG } = tokensFor({ a: { sub: 'ann', tenant: TA, roles: ['tenant'] }, b: { sub: 'bo', tenant: TB, roles: ['tenant'] } }, SECRET, tmp)

let gw: TestGateway
const as = async (who: 'a' | 'b', args: readonly string[], stdin?: string): Promise<RunResult> =>
  await run(CLI28, args, { host: gw.dockerHost, env: { DOCKER_CONFIG: CONFIG[who], DOCKER_BUILDKIT: '0' }, timeoutMs: 120_000, ...(stdin !== undefined ? { stdin } : {}) })
const direct = async (args: readonly string[]): Promise<RunResult> => await run(CLI28, args, { host: engine().dockerHost })
const out = (r: RunResult): Record<string, unknown> => r.code === 0 ? {} : { stderr: r.stderr.trim() }
const lines = (r: RunResult): string[] => r.stdout.toString().split('\n').filter((l) => l !== '')

/** An admin's image of its own (a distinct id) built on the engine directly, with these tags. */
async function adminImage (label: string, tags: readonly string[]): Promise<string> {
  const q = tags.map((x) => `t=${encodeURIComponent(x)}`).join('&')
  const r = await request(engine().socket, 'POST', `/build?${q}`, tarOf({ Dockerfile: `FROM ${engine().image}\nLABEL ${label}=${RUN}\n` }), { contentType: 'application/x-tar' })
  if (r.status !== 200 || !/Successfully built/.test(r.text)) throw new Error(`admin build failed: ${r.text}`)
  return JSON.parse((await direct(['image', 'inspect', tags[0]])).stdout.toString())[0].Id
}

let listedId = ''
let hiddenId = ''
t.before(async () => {
  listedId = await adminImage('shared-test', [LISTED, SECRET_TAG])
  hiddenId = await adminImage('hidden-test', [HIDDEN])
  const policies = policiesWith((text) => text.replace(/^names: engine$/m, `names: private\nimages:\n  shared: ["${engine().image.replace(/:latest$/, '')}", "listed-${RUN}:*"]`))
  gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, undefined, policies)
})

t.teardown(async () => {
  for (const tenant of [TA, TB]) {
    const label = `label=${TENANT_LABEL}=${tenant}`
    const cs = lines(await direct(['ps', '-aq', '--filter', label]))
    if (cs.length) await direct(['rm', '-f', ...cs])
    const is = lines(await direct(['image', 'ls', '-q', '--filter', label]))
    if (is.length) await direct(['image', 'rm', '-f', ...new Set(is)])
    const ns = lines(await direct(['network', 'ls', '-q', '--filter', label]))
    if (ns.length) await direct(['network', 'rm', ...ns])
  }
  await direct(['image', 'rm', '-f', LISTED, SECRET_TAG, HIDDEN])
  await gw?.close()
})

t.test('images.shared is checked when the policy loads', async (t) => {
  const check = (yaml: string): string[] => {
    const file = path.join(tmp, `tenancy-${randomBytes(3).toString('hex')}.yaml`)
    fs.writeFileSync(file, yaml)
    const problems: string[] = []
    compileTenancy(file, 'tenancy.yaml', problems)
    return problems
  }
  t.same(check('images: { shared: [busybox, "alpine:*", "docker.io/library/*", "registry.example:5000/base/*", "busybox@sha256:0123456789abcdef0123456789abcdef", "*"] }\n'), [], 'references, tags, digests and wildcards load')
  const bad = check('images: { shared: [Busybox, "busybox:", "a@b", "busybox:1@sha256:0123456789abcdef0123456789abcdef", 3, "no spaces"] }\n')
  t.equal(bad.length, 6, 'each invalid entry is a problem')
  t.match(bad.join('\n'), /images\.shared\[0\]: "Busybox"/, 'naming the entry and its index')
  t.match(check('images: { shared: busybox }\n').join('\n'), /images\.shared: expected a list/, 'a string is no list')
  t.match(check('images: { share: [busybox] }\n').join('\n'), /images\.share: unknown key/, 'an unknown key is a problem')
  const file = path.join(tmp, 'absent.yaml')
  fs.writeFileSync(file, 'names: private\n')
  t.equal(compileTenancy(file, 'tenancy.yaml', []).images?.shared, null, 'absent: no set (every unowned named image is shared)')
})

t.test('a listed image is reachable; its unlisted names and unlisted images are not', async (t) => {
  // Listed: run, FROM, inspect, list.
  const runListed = await as('a', ['run', '--rm', '--pull', 'never', LISTED, 'echo', 'ran'])
  t.equal(runListed.stdout.toString().trim(), 'ran', `a: run ${LISTED}`, out(runListed))
  const build = await as('a', ['build', '-q', '-t', `from-listed-${RUN}`, '-'], `FROM ${LISTED}\nLABEL mine=a\n`)
  t.equal(build.code, 0, `a: build FROM ${LISTED}`, out(build))
  const inspected = await as('a', ['image', 'inspect', LISTED])
  t.equal(inspected.code, 0, `a: image inspect ${LISTED}`, out(inspected))
  t.same(JSON.parse(inspected.stdout.toString())[0].RepoTags, [LISTED], 'inspect shows only the listed name of the image (not its unlisted tag)')
  t.equal((await as('a', ['image', 'inspect', '--format', '{{.Id}}', listedId])).stdout.toString().trim(), listedId, 'by id: one of its names is listed')
  const ls = lines(await as('a', ['image', 'ls', '--format', '{{.Repository}}:{{.Tag}}']))
  t.ok(ls.includes(LISTED), 'image ls lists the listed name')
  t.ok(ls.includes(engine().image), 'and the listed base image')
  t.notOk(ls.some((l) => l.startsWith(`secret-${RUN}`) || l.startsWith(`hidden-${RUN}`)), 'but neither an unlisted tag nor an unlisted image')
  t.same(lines(await as('a', ['image', 'ls', '--format', '{{.Repository}}:{{.Tag}}', `hidden-${RUN}`])), [], 'image ls hidden-... (reference filter) lists nothing')
  const df = await as('a', ['system', 'df', '-v', '--format', '{{json .}}'])
  t.notMatch(df.stdout.toString(), new RegExp(`(hidden|secret)-${RUN}`), 'system df shows no unlisted name')

  // Unlisted: every operation answers as for a missing image.
  for (const ref of [HIDDEN, SECRET_TAG, hiddenId, hiddenId.slice(7, 19)]) {
    const what = ref === hiddenId ? 'the unlisted image\'s id' : ref === hiddenId.slice(7, 19) ? 'its id prefix' : ref
    const r = await as('a', ['run', '--rm', '--pull', 'never', ref, 'true'])
    t.match(r.stderr, /No such image/, `a: run ${what}: No such image`)
    t.match((await as('a', ['image', 'inspect', ref])).stderr, /No such image/, `a: image inspect ${what}: No such image`)
    t.match((await as('a', ['image', 'history', ref])).stderr, /No such image/, `a: image history ${what}: No such image`)
    t.match((await as('a', ['tag', ref, `copy-${RUN}`])).stderr, /No such image/, `a: tag ${what}: No such image`)
    const from = await as('a', ['build', '-q', '-'], `FROM ${ref}\n`)
    t.not(from.code, 0, `a: build FROM ${what} fails`)
    t.match(from.stderr, /No such image/, `a: build FROM ${what}: No such image`)
  }
  const pull = await as('a', ['pull', HIDDEN])
  t.match(pull.stderr, /not in the shared image set.*rule image-shared/, 'a: pull of an unlisted name is refused (rule image-shared)')
  t.equal((await direct(['image', 'inspect', '--format', '{{.Id}}', HIDDEN])).stdout.toString().trim(), hiddenId, 'the engine still has it')
})

t.test('a tenant\'s own tag of a shared name wins, for that tenant only', async (t) => {
  const own = await as('a', ['build', '-q', '-t', LISTED, '-'], `FROM ${LISTED}\nLABEL mine=a-${RUN}\n`)
  t.equal(own.code, 0, `a: build -t ${LISTED} (its own image of that name)`, out(own))
  const label = async (who: 'a' | 'b'): Promise<string> => (await as(who, ['image', 'inspect', '--format', '{{index .Config.Labels "mine"}}', LISTED])).stdout.toString().trim()
  t.equal(await label('a'), `a-${RUN}`, `a: ${LISTED} is a's own`)
  t.not(await label('b'), `a-${RUN}`, `b: ${LISTED} is not a's`)
  t.equal((await as('b', ['image', 'inspect', '--format', '{{.Id}}', LISTED])).stdout.toString().trim(), listedId, `b: ${LISTED} is still the shared one`)
  const runA = await as('a', ['run', '--rm', '--pull', 'never', LISTED, 'true'])
  t.equal(runA.code, 0, 'a: runs its own', out(runA))
  const listA = lines(await as('a', ['image', 'ls', '--format', '{{.Repository}}:{{.Tag}}', `listed-${RUN}`]))
  t.same(listA, [LISTED], 'a: image ls lists the name once (its own)')
  t.same(lines(await as('b', ['image', 'ls', '--format', '{{.ID}}', `listed-${RUN}`])), [listedId.slice(7, 19)], 'b: lists the shared image under it')
  t.equal((await direct(['image', 'inspect', '--format', '{{.Id}}', LISTED])).stdout.toString().trim(), listedId, 'the engine\'s name is untouched')
})
