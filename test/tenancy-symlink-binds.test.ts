/**
 * Host paths are judged where they end (issue 13, item 4). A tenant allowed binds under
 * a prefix can plant symlinks there; on the real engine, as that tenant:
 * - shared mode (the gateway sees the engine's filesystem; `auto` decides it here): a
 *   link to /etc, a relative `../../..` link, a path through a link, a dangling link and
 *   a bind Mount through a link are refused by rule host-binds and nothing is created;
 *   a directory that becomes a link after create is refused at start, at restart and
 *   for copies in and out, and the engine does not start it or write through it; a genuine directory works (the container reads a
 *   file put there); a service's bind mount through a link is refused too;
 * - a gateway whose mount namespace hides the engine's DockerRootDir (as in a container
 *   with only the socket mounted) comes out `remote`;
 * - remote mode: a bind under the prefix is refused by host-binds-unresolved unless the
 *   policy lists the prefix as symlink-free, then it works.
 */
import { execFile } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import jwt from 'jsonwebtoken'
import t from 'tap'
import { engine, POLICIES, request, startTestGateway, swarmEngine, tarOf, type RawReply, type TestGateway } from './helpers/gateway'

const SECRET = randomBytes(32).toString('hex')
const RUN = randomBytes(3).toString('hex')
const TA = `links-${RUN}`
const IMAGE = engine().image
const TOKEN = jwt.sign({ sub: 'alice', tenant: TA, roles: ['tenant'], exp: Math.floor(Date.now() / 1000) + 3600 }, SECRET, { algorithm: 'HS256' })
const AUTH = `auth: { jwt: { secret: ${SECRET} } }\n`

// The tenant's allowed directory, and what it plants there.
// Under the engine's nosymfollow tmpfs: the shipped policy binds only from such mounts (rule host-binds-symfollow).
const ROOT = fs.mkdtempSync(path.join(engine().binds, 'allowed-'))
const ALLOWED = path.join(ROOT, TA)
fs.mkdirSync(path.join(ALLOWED, 'real'), { recursive: true })
fs.writeFileSync(path.join(ALLOWED, 'real', 'hello.txt'), `hello ${RUN}\n`)
fs.symlinkSync('/etc', path.join(ALLOWED, 'link'))
// From ROOT/TA, three levels up is /.
fs.symlinkSync('../../..', path.join(ALLOWED, 'rel'))
fs.symlinkSync(`/etc/pcx-dangling-${RUN}`, path.join(ALLOWED, 'dangling'))

/** A copy of the shipped policies with tenants' binds allowed under ROOT/<tenant>, and optionally ROOT declared symlink-free. */
function policiesFor (symlinkFree: boolean): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pcq-'))
  fs.cpSync(POLICIES, dir, { recursive: true })
  const file = path.join(dir, 'base.csv')
  const before = fs.readFileSync(file, 'utf8')
  let after = before.replace("anyOutside(r.obj.hostPaths, '/srv/portcullis/' + r.dom)", `anyOutside(r.obj.hostPaths, '${ROOT}/' + r.dom)`)
  if (symlinkFree) {
    after = after.replace("anyOutside(r.obj.unresolvedHostPaths, '')", `anyOutside(r.obj.unresolvedHostPaths, '${ROOT}/' + r.dom)`)
      .replace("anyOutside(r.obj.linkFollowingHostPaths, '')", `anyOutside(r.obj.linkFollowingHostPaths, '${ROOT}/' + r.dom)`)
  }
  if (after === before || (symlinkFree && !after.includes(`unresolvedHostPaths, '${ROOT}/'`))) throw new Error('the edit changed nothing in the shipped base.csv')
  fs.writeFileSync(file, after)
  return dir
}
const POLICY = policiesFor(false)
const POLICY_FREE = policiesFor(true)

let gw: TestGateway
const as = async (g: TestGateway, method: string, target: string, body?: object): Promise<RawReply> => await request(g.socket, method, target, body, { token: TOKEN })
const direct = async (method: string, target: string, body?: object): Promise<RawReply> => await request(engine().socket, method, target, body)
const containers: string[] = []

t.before(async () => {
  gw = await startTestGateway(AUTH, undefined, POLICY)
})
t.teardown(async () => {
  for (const c of containers) await direct('DELETE', `/containers/${c}?force=1`)
  await gw?.close()
  for (const d of [ROOT, POLICY, POLICY_FREE]) fs.rmSync(d, { recursive: true, force: true })
})

const fresh = (what: string): string => `links-${RUN}-${what}-${randomBytes(2).toString('hex')}`

async function create (g: TestGateway, name: string, hostConfig: object, cmd = ['sleep', '600']): Promise<RawReply> {
  const r = await as(g, 'POST', `/v1.41/containers/create?name=${name}`, { Image: IMAGE, Cmd: cmd, HostConfig: hostConfig })
  if (r.status === 201) containers.push(r.json.Id)
  return r
}

/** The container's output as the engine has it (its log frames' payloads). */
async function output (id: string): Promise<string> {
  await direct('POST', `/containers/${id}/wait`)
  const raw = Buffer.from((await direct('GET', `/containers/${id}/logs?stdout=1&stderr=1`)).text, 'latin1')
  return raw.toString()
}

t.test('auto decides shared: the gateway sees the engine\'s DockerRootDir', async (t) => {
  t.equal(gw.gateway.hostPaths.mode, 'shared')
  t.match(gw.gateway.hostPaths.describe().why, /DockerRootDir .* is a directory/)
})

t.test('shared: binds that end outside the prefix through a link are refused, nothing created', async (t) => {
  const refused: Array<[string, object]> = [
    ['-v through a link to /etc', { Binds: [`${ALLOWED}/link:/x`] }],
    ['-v through a relative ../../.. link', { Binds: [`${ALLOWED}/rel:/x`] }],
    ['-v to a path through the link', { Binds: [`${ALLOWED}/link/sub:/x`] }],
    ['-v through the relative link and on', { Binds: [`${ALLOWED}/rel/etc:/x:ro`] }],
    ['-v .. after a link', { Binds: [`${ALLOWED}/link/../x:/x`] }],
    ['-v a dangling link (the engine would create its target)', { Binds: [`${ALLOWED}/dangling:/x`] }],
    ['Mounts type bind through the link', { Mounts: [{ Type: 'bind', Source: `${ALLOWED}/link`, Target: '/x' }] }],
    ['Mounts type bind through the link, trailing slash', { Mounts: [{ Type: 'bind', Source: `${ALLOWED}/link/`, Target: '/x' }] }],
  ]
  for (const [why, hc] of refused) {
    const name = fresh('bad')
    const r = await create(gw, name, hc)
    t.equal(r.status, 403, why)
    t.match(r.json?.message, /rule host-binds \(base\.csv\)/, `${why}: the rule is named`)
    t.equal((await direct('GET', `/containers/${name}/json`)).status, 404, `${why}: no container was created`)
  }
  t.notOk(fs.existsSync(`/etc/pcx-dangling-${RUN}`), 'nothing was made at the dangling link\'s target')
})

t.test('shared: a genuine directory under the prefix works', async (t) => {
  const name = fresh('good')
  const r = await create(gw, name, { Binds: [`${ALLOWED}/real:/data:ro`] }, ['cat', '/data/hello.txt'])
  t.equal(r.status, 201, r.text)
  t.equal((await as(gw, 'POST', `/v1.41/containers/${name}/start`)).status, 204)
  t.match(await output(r.json.Id), `hello ${RUN}`, 'the container read the file put there')
  // A missing tail under a genuine directory is what dockerd creates.
  const made = await create(gw, fresh('made'), { Binds: [`${ALLOWED}/real/new/sub:/data`] }, ['true'])
  t.equal(made.status, 201, made.text)
})

t.test('shared: a directory swapped for a link after create is refused at start', async (t) => {
  const dir = path.join(ALLOWED, `swap-${RUN}`)
  fs.mkdirSync(dir)
  for (const [why, hc] of [
    ['-v', { Binds: [`${dir}:/x`] }],
    ['Mounts type bind', { Mounts: [{ Type: 'bind', Source: dir, Target: '/x' }] }],
  ] as const) {
    if (!fs.lstatSync(dir).isDirectory()) { fs.rmSync(dir); fs.mkdirSync(dir) }
    const name = fresh('swap')
    const r = await create(gw, name, hc)
    t.equal(r.status, 201, `${why}: created while a directory`)
    fs.rmdirSync(dir)
    fs.symlinkSync('/etc', dir)
    const s = await as(gw, 'POST', `/v1.41/containers/${name}/start`)
    t.equal(s.status, 403, `${why}: start after the swap`)
    t.match(s.json?.message, /ContainerStart denied by policy rule host-binds \(base\.csv\)/)
    t.match(s.json?.message, /walked again as the engine mounts them/)
    // dockerd binds the container's mounts on its own host to copy in or out.
    const put = await request(gw.socket, 'PUT', `/v1.41/containers/${name}/archive?path=/x`, tarOf({ [`pcx-${RUN}`]: 'x' }), { token: TOKEN, contentType: 'application/x-tar' })
    t.equal(put.status, 403, `${why}: a copy into it`)
    t.match(put.json?.message, /PutContainerArchive denied by policy rule host-binds/)
    t.notOk(fs.existsSync(`/etc/pcx-${RUN}`), `${why}: nothing was written through the link`)
    const get = await as(gw, 'GET', `/v1.41/containers/${name}/archive?path=/x/hostname`)
    t.equal(get.status, 403, `${why}: a copy out of it`)
    const state = (await direct('GET', `/containers/${r.json.Id}/json`)).json?.State
    t.equal(state?.Running, false, `${why}: not running`)
    t.match(state?.StartedAt, /^0001-01-01/, `${why}: the engine never started it`)
  }
})

t.test('shared: a directory swapped for a link while running is refused at restart', async (t) => {
  const dir = path.join(ALLOWED, `swap2-${RUN}`)
  fs.mkdirSync(dir)
  const name = fresh('restart')
  const r = await create(gw, name, { Binds: [`${dir}:/x`] })
  t.equal(r.status, 201)
  t.equal((await as(gw, 'POST', `/v1.41/containers/${name}/start`)).status, 204, 'started while a directory')
  const before = (await direct('GET', `/containers/${r.json.Id}/json`)).json?.State
  fs.renameSync(dir, `${dir}.old`)
  fs.symlinkSync('/etc', dir)
  const s = await as(gw, 'POST', `/v1.41/containers/${name}/restart?t=0`)
  t.equal(s.status, 403, 'restart after the swap')
  t.match(s.json?.message, /ContainerRestart denied by policy rule host-binds/)
  const after = (await direct('GET', `/containers/${r.json.Id}/json`)).json?.State
  t.equal(after?.StartedAt, before?.StartedAt, 'the engine did not restart it')
  t.equal(after?.Running, true, 'still the first run')
})

t.test('shared: a service\'s bind mount through a link is refused (swarm engine)', async (t) => {
  const sgw = await startTestGateway(AUTH, `unix://${swarmEngine().socket}`, POLICY)
  t.teardown(async () => { await sgw.close() })
  const name = fresh('svc')
  const spec = (source: string): object => ({ Name: name, Mode: { Replicated: { Replicas: 0 } }, TaskTemplate: { ContainerSpec: { Image: swarmEngine().image, Command: ['sleep', '600'], Mounts: [{ Source: source, Target: '/x' }] } } })
  const r = await as(sgw, 'POST', '/v1.41/services/create', spec(`${ALLOWED}/link/sub`))
  t.equal(r.status, 403, 'a mount without Type is a bind')
  t.match(r.json?.message, /rule host-binds/)
  t.equal((await request(swarmEngine().socket, 'GET', `/services/${name}`)).status, 404, 'no service was created')
  // The orchestrator starts, restarts and reschedules tasks where the gateway cannot walk
  // their sources again: a tenant's service has no binds, a genuine directory included.
  const genuine = await as(sgw, 'POST', '/v1.41/services/create', spec(`${ALLOWED}/real`))
  if (genuine.status === 201) await request(swarmEngine().socket, 'DELETE', `/services/${name}`)
  t.equal(genuine.status, 403, 'a bind of a genuine directory')
  t.match(genuine.json?.message, /rule no-service-binds/)
  t.equal((await request(swarmEngine().socket, 'GET', `/services/${name}`)).status, 404, 'no service was created')
})

t.test('shared: binds and a restart policy do not go together (the engine restarts unseen)', async (t) => {
  for (const policy of ['always', 'unless-stopped', 'on-failure']) {
    const name = fresh('rp')
    const r = await create(gw, name, { Binds: [`${ALLOWED}/real:/data`], RestartPolicy: { Name: policy, ...(policy === 'on-failure' ? { MaximumRetryCount: 3 } : {}) } })
    t.equal(r.status, 403, `--restart ${policy} with a bind`)
    t.match(r.json?.message, /rule no-restart-with-binds/)
    t.equal((await direct('GET', `/containers/${name}/json`)).status, 404, 'nothing created')
  }
  const plain = fresh('rp-plain')
  t.equal((await create(gw, plain, { RestartPolicy: { Name: 'always' } })).status, 201, 'a restart policy without binds')
  const bound = fresh('rp-bound')
  const b = await create(gw, bound, { Binds: [`${ALLOWED}/real:/data`], RestartPolicy: { Name: 'no' } })
  t.equal(b.status, 201, 'binds with restart policy no')
  const before = (await direct('GET', `/containers/${b.json.Id}/json`)).json.HostConfig.RestartPolicy
  const u = await as(gw, 'POST', `/v1.41/containers/${bound}/update`, { RestartPolicy: { Name: 'always' } })
  t.equal(u.status, 403, 'an update adding a restart policy to a container with binds')
  t.match(u.json?.message, /rule no-restart-with-binds/)
  t.same((await direct('GET', `/containers/${b.json.Id}/json`)).json.HostConfig.RestartPolicy, before, 'its restart policy is unchanged')
  const u2 = await as(gw, 'POST', `/v1.41/containers/${plain}/update`, { RestartPolicy: { Name: 'unless-stopped' } })
  t.equal(u2.status, 200, `an update of a container without binds: ${u2.text}`)
})

t.test('remote: a gateway that cannot see the engine\'s DockerRootDir decides remote', async (t) => {
  // As in a container with only the engine's socket mounted: a mount namespace of its
  // own where the engine's directory is an empty tmpfs and the socket is bound elsewhere.
  const state = path.dirname(engine().socket)
  const sock = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'pcx-ns-')), 'docker.sock')
  fs.writeFileSync(sock, '')
  const script = `
    const { parseConfig } = require(${JSON.stringify(path.resolve(__dirname, '../src/config'))})
    const { startGateway } = require(${JSON.stringify(path.resolve(__dirname, '../src/gateway'))})
    const pino = require('pino')
    const dir = require('fs').mkdtempSync('/tmp/pcg-ns-')
    const config = parseConfig('listen:\\n  - { unix: ' + dir + '/gw.sock, identity: { subject: t, roles: [admin] } }\\nupstream: unix://${sock}\\npolicy: { dir: ${POLICY} }\\naudit: { file: ' + dir + '/audit.jsonl }\\nlog: { level: silent }\\n', dir + '/p.yaml')
    startGateway(config, pino({ level: 'silent' })).then(async (g) => {
      console.log(JSON.stringify(g.hostPaths.describe()))
      await g.close()
      require('fs').rmSync(dir, { recursive: true, force: true })
    })`
  const cmd = `mount --make-rprivate / && mount --bind ${engine().socket} ${sock} && mount -t tmpfs none ${state} && exec node -e "$SCRIPT"`
  const out = await new Promise<string>((resolve, reject) => {
    execFile('unshare', ['-m', 'sh', '-c', cmd], { env: { ...process.env, SCRIPT: script }, cwd: path.resolve(__dirname, '../..'), timeout: 60_000 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`${err.message}\n${stderr}`))
      else resolve(stdout)
    })
  })
  fs.rmSync(path.dirname(sock), { recursive: true, force: true })
  const d = JSON.parse(out.trim().split('\n').pop() ?? '{}')
  t.equal(d.mode, 'remote', 'the engine answered, but its DockerRootDir is not here')
  t.match(d.why, /is not a directory on the gateway's filesystem/)
})

t.test('remote: binds under the prefix are refused unless the prefix is declared symlink-free', async (t) => {
  const remote = await startTestGateway(`${AUTH}hostPaths: remote\n`, undefined, POLICY)
  t.teardown(async () => { await remote.close() })
  t.equal(remote.gateway.hostPaths.mode, 'remote')
  const name = fresh('remote')
  const r = await create(remote, name, { Binds: [`${ALLOWED}/real:/data:ro`] }, ['cat', '/data/hello.txt'])
  t.equal(r.status, 403, 'a genuine directory, which a remote gateway cannot tell from a link')
  t.match(r.json?.message, /rule host-binds-unresolved \(base\.csv\)/)
  t.match(r.json?.message, /unresolvedHostPaths: none/, 'says no prefix is declared symlink-free')
  t.equal((await direct('GET', `/containers/${name}/json`)).status, 404, 'no container was created')
  const m = await create(remote, name, { Mounts: [{ Type: 'bind', Source: `${ALLOWED}/real`, Target: '/data' }] })
  t.equal(m.status, 403, 'Mounts type bind alike')
  t.match(m.json?.message, /rule host-binds-unresolved/)

  const free = await startTestGateway(`${AUTH}hostPaths: remote\n`, undefined, POLICY_FREE)
  t.teardown(async () => { await free.close() })
  const ok = await create(free, name, { Binds: [`${ALLOWED}/real:/data:ro`] }, ['cat', '/data/hello.txt'])
  t.equal(ok.status, 201, `declared symlink-free: ${ok.text}`)
  t.equal((await as(free, 'POST', `/v1.41/containers/${name}/start`)).status, 204)
  t.match(await output(ok.json.Id), `hello ${RUN}`, 'the container read the file put there')
  const outside = await create(free, fresh('outside'), { Binds: ['/etc:/x'] })
  t.equal(outside.status, 403, 'outside the prefix: still refused')
  t.match(outside.json?.message, /rule host-binds/)
  const lexical = await create(free, fresh('dotdot'), { Binds: [`${ALLOWED}/../../../etc:/x`] })
  t.equal(lexical.status, 403, '.. out of the prefix, judged as written')
})
