/**
 * The user a tenant's build steps run as (issue 18, class 3), and the images a forwarded
 * Dockerfile names (the base-image TOCTOU), on the real (plain) engine:
 * - a RUN that the classic builder would run as root (the image's default user, `USER
 *   root`, `USER 0`, `USER 0:0`, `USER 65534:0`, a user spelled through ENV or a build
 *   argument, a stored trigger's `USER` in the base image, a stage FROM a root stage) is
 *   refused with a named rule (build-run-root, numeric-user) and nothing is built;
 * - `USER 65534` (or `65534:65534`) before the RUN lines builds, and the step's own
 *   output shows it ran as 65534:65534 (a lone uid gets the tenant's group, as on a
 *   create); a Dockerfile without RUN runs nothing and builds whatever its USER;
 * - a tenant in `users.root`, a gateway with `builds.runAsRoot: always`, and the admin
 *   build root steps as before;
 * - the builder is given the id the gateway inspected (FROM and COPY --from), so a tag
 *   moved or removed while builds run cannot redirect or make it pull.
 */
import { execFileSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import jwt from 'jsonwebtoken'
import t from 'tap'
import { startEngine, stopEngine } from './engine/engine'
import { engine, policiesWith, request, startTestGateway, tarOf, type RawReply, type TestGateway } from './helpers/gateway'
import { assertTool } from './helpers/tools'

const SECRET = randomBytes(32).toString('hex')
const RUN = randomBytes(3).toString('hex')
const TB = `bus-b-${RUN}`
const TR = `bus-r-${RUN}`
const IMAGE = engine().image
const token = (sub: string, tenant: string): string => jwt.sign({ sub, tenant, roles: ['tenant'], exp: Math.floor(Date.now() / 1000) + 3600 }, SECRET, { algorithm: 'HS256' })
const q = encodeURIComponent

let gw: TestGateway
const direct = async (method: string, target: string, body?: Buffer | object): Promise<RawReply> => await request(engine().socket, method, target, body)

/** A build through `g` (tenant `tenant`, or the admin for null) of `dockerfile`. */
async function build (g: TestGateway, tenant: string | null, dockerfile: string, query = '', on = engine().socket): Promise<{ r: RawReply, tag: string, built: boolean }> {
  const tag = `${tenant ?? TB}/u-${randomBytes(3).toString('hex')}:1`
  const r = await request(g.socket, 'POST', `/v1.41/build?t=${q(tag)}&rm=1&forcerm=1${query}`, tarOf({ Dockerfile: dockerfile }), { token: tenant === null ? undefined : token('bob', tenant), contentType: 'application/x-tar' })
  const built = (await request(on, 'GET', `/images/${tag}/json`)).status === 200
  return { r, tag, built }
}

/** A tar entry with the given mode (tarOf writes 0644 files only). */
function entry (name: string, data: Buffer, mode: number): Buffer {
  const h = Buffer.alloc(512)
  h.write(name, 0, 100)
  h.write(mode.toString(8).padStart(7, '0') + '\0', 100)
  h.write('0000000\0', 108)
  h.write('0000000\0', 116)
  h.write(data.length.toString(8).padStart(11, '0') + '\0', 124)
  h.write('00000000000\0', 136)
  h.write('        ', 148)
  h.write('0', 156)
  h.write('ustar\u000000', 257)
  let sum = 0
  for (const b of h) sum += b
  h.write(sum.toString(8).padStart(6, '0') + '\0 ', 148)
  return Buffer.concat([h, data, Buffer.alloc((512 - data.length % 512) % 512)])
}

/**
 * A build context whose Dockerfile ADDs a local archive holding a setuid-root program (the
 * builder unpacks it keeping the mode; COPY would clear the bit), then runs it as 65534.
 */
function setuidContext (dir: string, image: string): Buffer {
  fs.writeFileSync(path.join(dir, 'suid.c'), '#include <unistd.h>\nint main(void){setgid(0);setuid(0);execl("/bin/sh","sh","-c","echo suid=$(id -u):$(id -g)",(char*)0);return 1;}\n')
  assertTool('gcc')
  execFileSync('gcc', ['-static', '-O2', '-o', path.join(dir, 'suid'), path.join(dir, 'suid.c')])
  const inner = Buffer.concat([entry('suid', fs.readFileSync(path.join(dir, 'suid')), 0o4755), Buffer.alloc(1024)])
  const dockerfile = Buffer.from(`FROM ${image}\nADD inner.tar /x/\nUSER 65534:65534\nRUN echo ${fresh()} && /x/suid\n`)
  return Buffer.concat([entry('inner.tar', inner, 0o644), entry('Dockerfile', dockerfile, 0o644), Buffer.alloc(1024)])
}

/** An image labelled `tenant`'s, committed on the engine directly with `body` (as an admin could). */
async function commitImage (tenant: string, body: object, changes: string[] = []): Promise<string> {
  const c = await direct('POST', '/containers/create', { Image: IMAGE, Cmd: ['true'], Labels: { 'io.portcullis.test': RUN } })
  const tag = `${tenant}/base-${randomBytes(3).toString('hex')}`
  const r = await direct('POST', `/commit?container=${c.json.Id as string}&repo=${tag}&tag=1${changes.map((x) => `&changes=${q(x)}`).join('')}`, { ...body, Labels: { 'io.portcullis.tenant': tenant, 'io.portcullis.subject': 'bob' } })
  await direct('DELETE', `/containers/${c.json.Id as string}?force=1`)
  if (r.status !== 201) throw new Error(`commit: ${r.status} ${r.text}`)
  return `${tag}:1`
}

/** A word no earlier build's step had: the layer cache never answers for the step. */
const fresh = (): string => randomBytes(4).toString('hex')
const imageId = async (ref: string): Promise<string> => String((await direct('GET', `/images/${ref}/json`)).json?.Id)

t.before(async () => {
  gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`)
})
t.teardown(async () => {
  const images = (await direct('GET', '/images/json')).json as any[]
  for (const i of images) for (const tag of (i.RepoTags ?? []) as string[]) if (tag.startsWith(`${TB}/`) || tag.startsWith(`${TR}/`)) await direct('DELETE', `/images/${tag}?force=1`)
  await gw?.close()
})

t.test('a tenant\'s RUN that would run as root, or as a name, is refused with a named rule; nothing is built', async (t) => {
  const onbuildRoot = await commitImage(TB, { User: '65534:65534', OnBuild: ['USER root'] })
  const onbuildZero = await commitImage(TB, { User: '65534:65534', OnBuild: ['USER 0'] })
  const loneUid = await commitImage(TB, { User: '65534' })
  const cases: Array<[string, string, string, RegExp]> = [
    ['the image\'s default user (root)', `FROM ${IMAGE}\nRUN id -u\n`, '', /rule build-run-root/],
    ['USER root', `FROM ${IMAGE}\nUSER root\nRUN id -u\n`, '', /rule numeric-user/],
    ['USER 0', `FROM ${IMAGE}\nUSER 0\nRUN id -u\n`, '', /rule build-run-root/],
    ['USER 0:0', `FROM ${IMAGE}\nUSER 0:0\nRUN id -u\n`, '', /rule build-run-root/],
    ['USER 00', `FROM ${IMAGE}\nUSER 00\nRUN id -u\n`, '', /rule build-run-root/],
    ['the root group', `FROM ${IMAGE}\nUSER 65534:0\nRUN id -u\n`, '', /rule build-run-root/],
    ['exec form', `FROM ${IMAGE}\nRUN ["id", "-u"]\n`, '', /rule build-run-root/],
    ['USER through ENV', `FROM ${IMAGE}\nENV U=0\nUSER $U\nRUN id -u\n`, '', /rule build-run-root/],
    ['USER through a build argument', `FROM ${IMAGE}\nARG U=65534\nUSER \${U}\nRUN id -u\n`, `&buildargs=${q(JSON.stringify({ U: '0' }))}`, /rule build-run-root/],
    ['back to root after a RUN as 65534', `FROM ${IMAGE}\nUSER 65534\nRUN true\nUSER 0\nRUN id -u\n`, '', /rule build-run-root/],
    ['a stored trigger USER root', `FROM ${onbuildRoot}\nRUN id -u\n`, '', /rule numeric-user/],
    ['a stored trigger USER 0', `FROM ${onbuildZero}\nRUN id -u\n`, '', /rule build-run-root/],
    ['a base image whose user is a lone uid (its group from the image\'s passwd)', `FROM ${loneUid}\nRUN id -u\n`, '', /rule build-run-root/],
    ['a stage FROM a root stage', `FROM ${IMAGE} AS one\nUSER 65534\nRUN true\nFROM ${IMAGE} AS two\nFROM two\nRUN id -u\n`, '', /rule build-run-root/],
  ]
  for (const [why, dockerfile, query, rule] of cases) {
    const { r, built } = await build(gw, TB, dockerfile, query)
    t.equal(r.status, 403, why)
    t.match(r.json?.message, rule, why)
    t.notOk(built, `${why}: nothing built`)
  }
})

t.test('a tenant\'s RUN as a numeric non-root user builds, and runs as that user', async (t) => {
  for (const user of ['65534', '65534:65534']) {
    const { r, tag, built } = await build(gw, TB, `FROM ${IMAGE}\nUSER ${user}\nRUN echo "step=$(id -u):$(id -g) ${RUN}" ${user}\n`)
    t.equal(r.status, 200, `USER ${user}`)
    t.ok(built, `USER ${user}: built`, { body: r.text.slice(-600) })
    t.match(r.text, `step=65534:65534 ${RUN}`, `USER ${user}: the step ran as 65534:65534`)
    t.equal((await direct('GET', `/images/${tag}/json`)).json?.Config?.User, '65534:65534', `USER ${user}: the image's user is the judged uid:gid`)
  }
  const env = await build(gw, TB, `FROM ${IMAGE}\nENV U=65534\nUSER $U\nRUN echo "step=$(id -u) ${RUN}" ${fresh()}\n`)
  t.ok(env.built, 'USER through ENV')
  t.match(env.r.text, `step=65534 ${RUN}`)
  const stages = await build(gw, TB, `FROM ${IMAGE} AS one\nUSER 65534\nFROM one\nRUN echo "step=$(id -u) ${RUN}" ${fresh()}\n`)
  t.ok(stages.built, 'a stage FROM a stage runs as its last user', { body: stages.r.text.slice(-600) })
  t.match(stages.r.text, `step=65534 ${RUN}`)
  const none = await build(gw, TB, `FROM ${IMAGE}\nUSER root\nCMD ["id"]\n`)
  t.ok(none.built, 'no RUN: no step runs, nothing to judge', { body: none.r.text.slice(-600) })
})

t.test('a tenant in users.root, builds.runAsRoot: always, and the admin build root steps', async (t) => {
  const root = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, undefined, policiesWith((text) => text.replace(/^ {2}root: \[\]$/m, `  root: [${TR}]`)))
  t.teardown(async () => await root.close())
  const granted = await build(root, TR, `FROM ${IMAGE}\nRUN echo "step=$(id -u) ${RUN}" ${fresh()}\n`)
  t.ok(granted.built, 'users.root', { body: granted.r.text.slice(-600) })
  t.match(granted.r.text, `step=0 ${RUN}`)
  const other = await build(root, TB, `FROM ${IMAGE}\nRUN id -u\n`)
  t.match(other.r.json?.message, /rule build-run-root/, 'another tenant on that gateway still may not')

  const always = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, undefined, policiesWith((text) => text.replace(/^ {2}runAsRoot: users$/m, '  runAsRoot: always')))
  t.teardown(async () => await always.close())
  const any = await build(always, TB, `FROM ${IMAGE}\nUSER root\nRUN echo "step=$(id -u) ${RUN}" ${fresh()}\n`)
  t.ok(any.built, 'builds.runAsRoot: always', { body: any.r.text.slice(-600) })
  t.match(any.r.text, `step=0 ${RUN}`)

  const never = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, undefined, policiesWith((text) => text.replace(/^ {2}root: \[\]$/m, `  root: [${TR}]`).replace(/^ {2}runAsRoot: users$/m, '  runAsRoot: never')))
  t.teardown(async () => await never.close())
  const refused = await build(never, TR, `FROM ${IMAGE}\nRUN id -u\n`)
  t.match(refused.r.json?.message, /rule build-run-root/, 'builds.runAsRoot: never refuses even a users.root tenant')

  const admin = await build(gw, null, `FROM ${IMAGE}\nRUN echo "step=$(id -u) ${RUN}" ${fresh()}\n`)
  t.ok(admin.built, 'the admin', { body: admin.r.text.slice(-600) })
  t.match(admin.r.text, `step=0 ${RUN}`)
})

t.test('stages as the builder reads them: FROM <index> is an image, a stage FROM a stage keeps its environment', async (t) => {
  // `0` is an image reference (docker.io/library/0, or a unique id prefix, as for the
  // builder's GetImage): judged as one, so the builder never pulls it. No RUN step: on the
  // shared engine the image found by that prefix may be another file's, without a shell
  // (seen on a full run: `stat /bin/sh: no such file or directory`).
  const index = await build(gw, TB, `FROM ${IMAGE}\nFROM 0\nUSER 65534:65534\n`)
  t.notMatch(index.r.text, /registry-1\.docker\.io|pull access denied|errorDetail/, 'FROM 0 names an image, not the first stage: the builder pulls nothing')
  if (index.r.status === 200) t.match(index.r.text, /Step 2\/\d+ : FROM sha256:0/, 'an image whose id starts with 0, by its id')
  else t.match(index.r.json?.message, /rule build-image-absent|No such image: 0/, 'or refused as absent (or another tenant\'s)')
  const url = await build(gw, TB, `FROM ${IMAGE} AS one\nENV U=http://127.0.0.1:1/x\nFROM one\nADD $U /x\n`)
  t.equal(url.r.status, 403, 'ADD of a URL spelled through an earlier stage\'s ENV')
  t.match(url.r.json?.message, /rule build-add-url/)
  const user = await build(gw, TB, `FROM ${IMAGE} AS one\nENV U=65534\nFROM one\nUSER $U\nRUN echo "step=$(id -u) ${RUN}" ${fresh()}\n`)
  t.ok(user.built, 'USER through an earlier stage\'s ENV', { body: user.r.text.slice(-600) })
  t.match(user.r.text, `step=65534 ${RUN}`)
})

t.test('the builder is given the ids the gateway inspected: FROM and COPY --from', async (t) => {
  const x = await commitImage(TB, { User: '65534:65534' }, ['ENV MARK=x'])
  const id = await imageId(x)
  const { r, built } = await build(gw, TB, `FROM ${x} AS first\nRUN echo "mark=$MARK"\nFROM ${IMAGE}\nCOPY --from=${x} /bin/busybox /copied\nCOPY --from=first /bin/busybox /again\n`)
  t.ok(built, 'built', { body: r.text.slice(-800) })
  t.match(r.text, `FROM ${id} AS first`, 'the base image by its full id, the stage name kept')
  t.match(r.text, `FROM ${await imageId(IMAGE)}`, 'the shared image by its full id')
  t.match(r.text, `COPY --from=${id} /bin/busybox /copied`, 'COPY --from an image by its full id')
  t.match(r.text, 'COPY --from=0 /bin/busybox /again', 'COPY --from a finished stage by its index (a name the builder could also read as an image\'s)')
  t.match(r.text, 'mark=x', 'the step ran in the inspected image')
})

t.test('a tag moved and removed while builds run: each build uses the image the gateway inspected, and none pulls', async (t) => {
  const x = await commitImage(TB, { User: '65534:65534' }, ['ENV MARK=x'])
  const y = await commitImage(TB, { User: '65534:65534' }, ['ENV MARK=y'])
  const ids = { x: await imageId(x), y: await imageId(y) }
  const moving = `${TB}/moving`
  const running = { stop: false }
  const flip = (async () => {
    for (let i = 0; !running.stop; i++) {
      const which = i % 3 === 2 ? null : i % 3 === 0 ? x : y
      if (which === null) await direct('DELETE', `/images/${moving}:1`)
      else await direct('POST', `/images/${which}/tag?repo=${moving}&tag=1`)
    }
  })()
  const seen: string[] = []
  try {
    for (let i = 0; i < 12; i++) {
      const { r, built } = await build(gw, TB, `FROM ${moving}:1\nRUN echo "mark=$MARK" ${fresh()}\n`)
      if (r.status === 403 || r.status === 404) {
        // Missing at the gateway's inspect: refused before the engine builds anything.
        t.match(r.json?.message, /rule build-image-absent|No such image/, `build ${i}: refused as absent`)
        continue
      }
      t.notMatch(r.text, /pull access denied|repository does not exist|not found|errorDetail/, `build ${i}: the builder looked nothing up by name`)
      const from = /Step 1\/\d+ : FROM (sha256:[0-9a-f]{64})/.exec(r.text)?.[1]
      t.ok(from === ids.x || from === ids.y, `build ${i}: FROM one of the tag's images by id`, { body: r.text.slice(0, 400) })
      t.match(r.text, `mark=${from === ids.x ? 'x' : 'y'}`, `build ${i}: the step ran in the image named by that id`)
      t.ok(built, `build ${i}: built`)
      seen.push(from ?? '')
    }
  } finally {
    running.stop = true
    await flip
  }
  t.ok(seen.length > 0, 'some builds went through')
})

t.test('what remains, and the engine that closes it: a setuid program ADDed from an archive; --userns-remap and --no-new-privileges', async (t) => {
  const dir = fs.mkdtempSync('/tmp/pcx-')
  const plain = await request(gw.socket, 'POST', `/v1.41/build?t=${TB}/suid:1&rm=1&forcerm=1`, setuidContext(dir, IMAGE), { token: token('bob', TB), contentType: 'application/x-tar' })
  t.match(plain.text, /suid=0:0/, 'remains on an engine without no-new-privileges: a step as 65534 runs a setuid-root program as root')

  const strict = await startEngine(dir, { usernsRemap: true, noNewPrivileges: true })
  t.teardown(async () => { await stopEngine(strict) })
  const remapped = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, `unix://${strict.socket}`)
  const noRemapRoot = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, `unix://${strict.socket}`, policiesWith((text) => text.replace(/^ {2}rootWhenRemapped: true$/m, '  rootWhenRemapped: false')))
  t.teardown(async () => { await remapped.close(); await noRemapRoot.close() })
  const root = await build(remapped, TB, `FROM ${strict.image}\nRUN echo "step=$(id -u) ${RUN}" ${fresh()}\n`, '', strict.socket)
  t.ok(root.built, 'users.rootWhenRemapped on a --userns-remap engine: a tenant\'s root step builds', { body: root.r.text.slice(-600) })
  t.match(root.r.text, `step=0 ${RUN}`)
  const refused = await build(noRemapRoot, TB, `FROM ${strict.image}\nRUN id -u\n`, '', strict.socket)
  t.match(refused.r.json?.message, /rule build-run-root/, 'rootWhenRemapped: false: refused on that engine too')
  const nnp = await request(noRemapRoot.socket, 'POST', `/v1.41/build?t=${TB}/suid:2&rm=1&forcerm=1`, setuidContext(dir, strict.image), { token: token('bob', TB), contentType: 'application/x-tar' })
  t.match(nnp.text, /suid=65534:65534/, 'dockerd --no-new-privileges: the setuid program stays 65534', { body: nnp.text.slice(-600) })
})
