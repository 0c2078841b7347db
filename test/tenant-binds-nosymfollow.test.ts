/**
 * Issue 18, class 8: host paths under a writable bind. Between the gateway's walk of a
 * bind source and the runtime's mount, a tenant that writes in its own directory can
 * swap a directory for a link. The shipped policy closes the window by construction: a
 * tenant's bind source must lie on a mount with `nosymfollow` (rule
 * host-binds-symfollow), where the kernel follows no link at all. Shown on the real
 * engine:
 * - directly (no gateway), a bind through a link on an ordinary filesystem reads the
 *   link's target: what a won race gives;
 * - directly, under a nosymfollow tmpfs (the engine's test mount, engine().binds), the
 *   engine refuses the same bind: the kernel closes it whatever the gateway does;
 * - through the gateway: a source off any nosymfollow mount is refused at create, and at
 *   start when the mount lost the option after create; a genuine directory under
 *   nosymfollow works;
 * - a race loop swapping a directory for a link during repeated starts through the
 *   gateway: the engine never mounts the link's target.
 */
import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import jwt from 'jsonwebtoken'
import t from 'tap'
import { engine, POLICIES, request, startTestGateway, type RawReply, type TestGateway } from './helpers/gateway'

const SECRET = randomBytes(32).toString('hex')
const RUN = randomBytes(3).toString('hex')
const TB = `nsf-${RUN}`
const IMAGE = engine().image
const TOKEN = jwt.sign({ sub: 'bea', tenant: TB, roles: ['tenant'], exp: Math.floor(Date.now() / 1000) + 3600 }, SECRET, { algorithm: 'HS256' })
const SECRET_TEXT = `host secret ${RUN}`

/** On the engine's nosymfollow tmpfs (both mount namespaces see it). */
const NSF = fs.mkdtempSync(path.join(engine().binds, 'nsf-'))
/** On the host's ordinary filesystem. */
const PLAIN = fs.mkdtempSync('/tmp/pcx-plain-')
/** A nosymfollow tmpfs of this test's own, in the gateway's mount namespace only. */
const OWN = fs.mkdtempSync('/tmp/pcx-own-')
/** What a link would lead to. */
const OUTSIDE = fs.mkdtempSync('/tmp/pcx-secret-')
fs.writeFileSync(path.join(OUTSIDE, 'secret'), SECRET_TEXT)
for (const root of [NSF, PLAIN, OWN]) {
  if (root === OWN && spawnSync('mount', ['-t', 'tmpfs', '-o', 'nosymfollow,size=1m', 'pcx-own', OWN]).status !== 0) throw new Error('cannot mount a tmpfs')
  fs.mkdirSync(path.join(root, TB, 'real'), { recursive: true })
  fs.writeFileSync(path.join(root, TB, 'real', 'mine'), `mine ${RUN}\n`)
  fs.symlinkSync(OUTSIDE, path.join(root, TB, 'link'))
}

const POLICY = ((): string => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pcq-'))
  fs.cpSync(POLICIES, dir, { recursive: true })
  const file = path.join(dir, 'base.csv')
  const before = fs.readFileSync(file, 'utf8')
  const after = before.replace("anyOutside(r.obj.hostPaths, '/srv/portcullis/' + r.dom)", `anyOutside(r.obj.hostPaths, '${NSF}/${TB},${PLAIN}/${TB},${OWN}/${TB}')`)
  if (after === before) throw new Error('the edit changed nothing in the shipped base.csv')
  fs.writeFileSync(file, after)
  return dir
})()

let gw: TestGateway
const as = async (method: string, target: string, body?: object): Promise<RawReply> => await request(gw.socket, method, target, body, { token: TOKEN })
const direct = async (method: string, target: string, body?: object): Promise<RawReply> => await request(engine().socket, method, target, body)
const containers: string[] = []
const fresh = (what: string): string => `nsf-${RUN}-${what}-${randomBytes(2).toString('hex')}`

t.before(async () => {
  gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, undefined, POLICY)
})
t.teardown(async () => {
  for (const c of containers) await direct('DELETE', `/containers/${c}?force=1`)
  await gw?.close()
  spawnSync('umount', ['-l', OWN])
  for (const d of [NSF, PLAIN, OWN, OUTSIDE, POLICY]) fs.rmSync(d, { recursive: true, force: true })
})

/** The container's output as the engine has it (its log frames' payloads). */
async function output (id: string): Promise<string> {
  await direct('POST', `/containers/${id}/wait`)
  return Buffer.from((await direct('GET', `/containers/${id}/logs?stdout=1&stderr=1`)).text, 'latin1').toString()
}

async function directContainer (bind: string): Promise<string> {
  const c = await direct('POST', `/containers/create?name=${fresh('d')}`, { Image: IMAGE, Cmd: ['cat', '/x/secret'], HostConfig: { Binds: [bind] } })
  if (c.status !== 201) throw new Error(`create: ${c.text}`)
  containers.push(c.json.Id)
  return c.json.Id
}

t.test('the hole, directly on the engine: a bind through a link on an ordinary filesystem reads its target', async (t) => {
  const id = await directContainer(`${PLAIN}/${TB}/link:/x:ro`)
  t.equal((await direct('POST', `/containers/${id}/start`)).status, 204)
  t.match(await output(id), SECRET_TEXT, 'the engine followed the link')
})

t.test('under nosymfollow, directly on the engine: the kernel refuses the link', async (t) => {
  for (const bind of [`${NSF}/${TB}/link:/x:ro`, `${NSF}/${TB}/link/.:/x:ro`]) {
    const id = await directContainer(bind)
    const s = await direct('POST', `/containers/${id}/start`)
    t.not(s.status, 204, `${bind}: not started (${s.text.trim()})`)
    t.notMatch(await output(id), SECRET_TEXT, 'the link\'s target was never mounted')
  }
  const id = await directContainer(`${NSF}/${TB}/real:/x:ro`)
  t.equal((await direct('POST', `/containers/${id}/start`)).status, 204, 'a genuine directory binds')
})

t.test('through the gateway: only sources on a nosymfollow mount', async (t) => {
  for (const bind of [`${PLAIN}/${TB}/real:/x`, `${PLAIN}/${TB}/new:/x`]) {
    const name = fresh('plain')
    const r = await as('POST', `/v1.41/containers/create?name=${name}`, { Image: IMAGE, Cmd: ['true'], HostConfig: { Binds: [bind] } })
    if (r.status === 201) containers.push(r.json.Id)
    t.equal(r.status, 403, `${bind}: refused (${r.text.trim()})`)
    t.match(r.json?.message, /rule host-binds-symfollow \(base\.csv\)/)
    t.match(r.json?.message, /linkFollowingHostPaths/)
    t.equal((await direct('GET', `/containers/${name}/json`)).status, 404, 'no container was created')
  }
  const m = await as('POST', `/v1.41/containers/create?name=${fresh('plainm')}`, { Image: IMAGE, HostConfig: { Mounts: [{ Type: 'bind', Source: `${PLAIN}/${TB}/real`, Target: '/x' }] } })
  t.equal(m.status, 403, 'a bind Mount alike')
  const name = fresh('good')
  const r = await as('POST', `/v1.41/containers/create?name=${name}`, { Image: IMAGE, Cmd: ['cat', '/x/mine'], HostConfig: { Binds: [`${NSF}/${TB}/real:/x:ro`] } })
  t.equal(r.status, 201, `under nosymfollow: ${r.text}`)
  containers.push(r.json.Id)
  t.equal((await as('POST', `/v1.41/containers/${name}/start`)).status, 204)
  t.match(await output(r.json.Id), `mine ${RUN}`, 'the container read the file put there')
})

t.test('checked again at start: a mount that lost nosymfollow after create', async (t) => {
  const name = fresh('own')
  const r = await as('POST', `/v1.41/containers/create?name=${name}`, { Image: IMAGE, Cmd: ['true'], HostConfig: { Binds: [`${OWN}/${TB}/real:/x`] } })
  t.equal(r.status, 201, `created while nosymfollow: ${r.text}`)
  containers.push(r.json.Id)
  t.equal(spawnSync('mount', ['-o', 'remount,symfollow', OWN]).status, 0)
  t.teardown(() => { spawnSync('mount', ['-o', 'remount,nosymfollow', OWN]) })
  const s = await as('POST', `/v1.41/containers/${name}/start`)
  t.equal(s.status, 403, s.text)
  t.match(s.json?.message, /ContainerStart denied by policy rule host-binds-symfollow/)
  t.match((await direct('GET', `/containers/${name}/json`)).json?.State?.StartedAt, /^0001-01-01/, 'the engine never started it')
})

t.test('a race loop swapping the directory for a link during starts: the target is never mounted', async (t) => {
  const swap = path.join(NSF, TB, 'swap')
  fs.mkdirSync(swap)
  const name = fresh('race')
  const r = await as('POST', `/v1.41/containers/create?name=${name}`, { Image: IMAGE, Cmd: ['sh', '-c', 'cat /x/secret 2>/dev/null; true'], HostConfig: { Binds: [`${swap}:/x:ro`] } })
  t.equal(r.status, 201, r.text)
  containers.push(r.json.Id)
  const swapper = spawn('sh', ['-c', `while :; do rmdir '${swap}' 2>/dev/null || rm -f '${swap}'; ln -s '${OUTSIDE}' '${swap}'; rm -f '${swap}'; mkdir '${swap}'; done`], { stdio: 'ignore' })
  const counts: Record<string, number> = {}
  try {
    for (let i = 0; i < 40; i++) {
      const s = await as('POST', `/v1.41/containers/${name}/start`)
      const k = s.status === 403 ? `403 ${/rule ([\w-]+)/.exec(s.json?.message ?? '')?.[1] ?? ''}` : String(s.status)
      counts[k] = (counts[k] ?? 0) + 1
      if (s.status === 204) await direct('POST', `/containers/${r.json.Id as string}/wait`)
    }
  } finally {
    swapper.kill('SIGKILL')
  }
  t.comment(`starts while swapping: ${JSON.stringify(counts)}`)
  t.ok((counts['204'] ?? 0) > 0, 'some starts reached the engine')
  t.notMatch(await output(r.json.Id), SECRET_TEXT, 'the link\'s target was never read')
})
