/**
 * Issue 18, class 6: anonymous volumes made by a tenant's create. The engine makes a
 * volume without a name, and without labels, for a `-v /data` (Config.Volumes), an
 * image's VOLUME, a `--mount type=volume` without a source and a Binds entry that is only
 * a container path. Through the gateway each is made first as an owned volume (owner
 * labels and the anonymous marker), counted in the volume quota, removed by `rm -v` and
 * by the daemon's own removal of a `--rm` container, never left behind by a create that
 * fails, and invisible to another tenant. Every check is made on the engine itself; the
 * clients are the docker CLI 28 and the raw API.
 */
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { engine, policiesWith, request, run, startTestGateway, tokensFor, type RawReply, type TestGateway } from './helpers/gateway'

const SECRET = randomBytes(32).toString('hex')
const RUN = randomBytes(3).toString('hex')
const TA = `anon-a-${RUN}`
const TB = `anon-b-${RUN}`
const IMAGE = engine().image
const WITH_VOLUME = `${TA}/withvol:${RUN}`
const CLI = '/usr/local/bin/docker'
const ANON = 'io.portcullis.anonymous-volume'
const policyDir = policiesWith((text) => text.replace(/^ {2}tenants: \{\}$/m, `  tenants:\n    ${TA}: { containers: 100, memory: 64GiB, volumes: 3 }`))

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pcav-'))
t.teardown(() => fs.rmSync(tmp, { recursive: true, force: true }))
const { token: TOKEN, config: CONFIG } = tokensFor({
  a: { sub: 'ana', tenant: TA, roles: ['tenant'] },
  b: { sub: 'bo', tenant: TB, roles: ['tenant'] },
}, SECRET, tmp)

let gw: TestGateway
const direct = async (method: string, target: string, body?: object): Promise<RawReply> => await request(engine().socket, method, target, body)
const cli = async (who: 'a' | 'b', ...args: string[]): Promise<{ code: number | null, out: string, err: string }> => {
  const r = await run(CLI, args, { host: gw.dockerHost, env: { DOCKER_CONFIG: CONFIG[who] }, timeoutMs: 120_000 })
  return { code: r.code, out: r.stdout.toString().trim(), err: r.stderr }
}
const name = (): string => `anon-${RUN}-${randomBytes(3).toString('hex')}`

/** The tenant's volumes as the engine lists them. */
async function volumesOf (tenant: string): Promise<Array<{ Name: string, Labels: Record<string, string> }>> {
  const filters = encodeURIComponent(JSON.stringify({ label: [`io.portcullis.tenant=${tenant}`] }))
  return (await direct('GET', `/volumes?filters=${filters}`)).json.Volumes ?? []
}

/** Every volume on the engine (anonymous ones made without labels included). */
async function allVolumes (): Promise<string[]> {
  return ((await direct('GET', '/volumes')).json.Volumes ?? []).map((v: { Name: string }) => v.Name)
}

async function settle (pred: () => Promise<boolean>, ms = 10_000): Promise<boolean> {
  const end = Date.now() + ms
  while (Date.now() < end) {
    if (await pred()) return true
    await new Promise((resolve) => setTimeout(resolve, 200))
  }
  return await pred()
}

t.before(async () => {
  gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, undefined, policyDir)
  // The tenant's image declares a VOLUME (as a tenant's commit with --change leaves it).
  const c = await direct('POST', `/containers/create?name=${name()}`, { Image: IMAGE, Cmd: ['true'] })
  if (c.status !== 201) throw new Error(`create: ${c.status} ${c.text}`)
  const [repo, tag] = WITH_VOLUME.split(':')
  const changes = ['VOLUME /vol', `LABEL io.portcullis.tenant=${TA}`].map((x) => `changes=${encodeURIComponent(x)}`).join('&')
  const commit = await direct('POST', `/commit?container=${c.json.Id as string}&repo=${repo}&tag=${tag}&${changes}`, {})
  await direct('DELETE', `/containers/${c.json.Id as string}?force=1`)
  if (commit.status !== 201) throw new Error(`commit: ${commit.status} ${commit.text}`)
})

t.teardown(async () => {
  for (const tenant of [TA, TB]) {
    const filters = encodeURIComponent(JSON.stringify({ label: [`io.portcullis.tenant=${tenant}`] }))
    for (const c of (await direct('GET', `/containers/json?all=1&filters=${filters}`)).json ?? []) await direct('DELETE', `/containers/${c.Id as string}?force=1&v=1`)
    for (const v of await volumesOf(tenant)) await direct('DELETE', `/volumes/${v.Name}`)
  }
  await direct('DELETE', `/images/${WITH_VOLUME}?force=1`)
  await gw?.close()
})

t.test('-v /data, --mount type=volume,dst=/x and the image VOLUME: owned, marked, counted, removed by rm -v', async (t) => {
  const before = await allVolumes()
  const n = name()
  const c = await cli('a', 'create', '--name', n, '-v', '/data', '--mount', 'type=volume,dst=/x', WITH_VOLUME, 'sleep', '600')
  t.equal(c.code, 0, `created (${c.err.trim()})`)
  const inspect = (await direct('GET', `/containers/${n}/json`)).json
  const mounts = (inspect.Mounts ?? []).filter((m: { Type: string }) => m.Type === 'volume')
  t.same(mounts.map((m: { Destination: string }) => m.Destination).sort(), ['/data', '/vol', '/x'], 'the engine mounts a volume at each anonymous place')
  for (const m of mounts) {
    const v = (await direct('GET', `/volumes/${m.Name as string}`)).json
    t.equal(v.Labels?.['io.portcullis.tenant'], TA, `${m.Destination as string}: the volume is the tenant's`)
    t.equal(v.Labels?.['io.portcullis.subject'], 'ana', `${m.Destination as string}: and names its subject`)
    t.type(v.Labels?.[ANON], 'string', `${m.Destination as string}: marked as standing for an anonymous volume`)
    t.equal(m.RW, true, `${m.Destination as string}: read-write, as an anonymous volume is`)
  }
  t.same((await allVolumes()).filter((v) => !before.includes(v)).sort(), mounts.map((m: { Name: string }) => m.Name).sort(), 'no unlabelled volume beside them')

  // The tenant sees and counts them; another tenant neither sees nor removes them.
  const listed = await cli('a', 'volume', 'ls', '-q')
  for (const m of mounts) t.ok(listed.out.split('\n').includes(m.Name), `the tenant lists ${m.Destination as string}'s volume`)
  const other = await cli('b', 'volume', 'ls', '-q')
  t.equal(other.out, '', 'another tenant lists none of them')
  const steal = await cli('b', 'volume', 'rm', mounts[0].Name)
  t.not(steal.code, 0, 'another tenant cannot remove one')
  t.equal((await direct('GET', `/volumes/${mounts[0].Name as string}`)).status, 200, 'it is still there')

  // Three volumes of a quota of three: one more anonymous volume is refused, nothing made.
  const over = await cli('a', 'create', '--name', name(), '-v', '/more', IMAGE, 'sleep', '600')
  t.not(over.code, 0, 'a fourth volume is refused')
  t.match(over.err, /quota-volumes/, 'by the volume quota')
  t.equal((await volumesOf(TA)).length, 3, 'no volume made for the refused create')

  const rm = await cli('a', 'rm', '-v', n)
  t.equal(rm.code, 0, `rm -v (${rm.err.trim()})`)
  for (const m of mounts) t.equal((await direct('GET', `/volumes/${m.Name as string}`)).status, 404, `rm -v removed ${m.Destination as string}'s volume before it answered`)
})

t.test('rm without -v keeps them, as the engine keeps anonymous volumes', async (t) => {
  const n = name()
  t.equal((await cli('a', 'create', '--name', n, '-v', '/data', IMAGE, 'true')).code, 0)
  const vol = (await direct('GET', `/containers/${n}/json`)).json.Mounts[0].Name as string
  t.equal((await cli('a', 'rm', n)).code, 0)
  t.equal((await direct('GET', `/volumes/${vol}`)).status, 200, 'kept')
  t.equal((await cli('a', 'volume', 'rm', vol)).code, 0, 'and the tenant can remove it')
})

t.test('a Binds entry that is only a container path (raw API)', async (t) => {
  const n = name()
  const r = await request(gw.socket, 'POST', `/v1.41/containers/create?name=${n}`, { Image: IMAGE, Cmd: ['true'], HostConfig: { Binds: ['/b'] } }, { token: TOKEN.a })
  t.equal(r.status, 201, r.text)
  const m = (await direct('GET', `/containers/${n}/json`)).json.Mounts
  t.equal(m.length, 1)
  t.same([m[0].Type, m[0].Destination], ['volume', '/b'])
  t.equal((await direct('GET', `/volumes/${m[0].Name as string}`)).json.Labels?.['io.portcullis.tenant'], TA, 'owned')
  const d = await request(gw.socket, 'DELETE', `/v1.41/containers/${n}?v=1`, undefined, { token: TOKEN.a })
  t.equal(d.status, 204)
  t.equal((await direct('GET', `/volumes/${m[0].Name as string}`)).status, 404, 'removed with v=1')
})

t.test('--rm: the daemon removes the container, the gateway its anonymous volumes', async (t) => {
  const n = name()
  const c = await cli('a', 'run', '-d', '--rm', '--name', n, '-v', '/data', IMAGE, 'sleep', '600')
  t.equal(c.code, 0, c.err)
  const vol = (await direct('GET', `/containers/${n}/json`)).json.Mounts[0].Name as string
  t.equal((await direct('GET', `/volumes/${vol}`)).json.Labels?.['io.portcullis.tenant'], TA, 'owned while it runs')
  t.equal((await cli('a', 'stop', '-t', '0', n)).code, 0)
  t.ok(await settle(async () => (await direct('GET', `/volumes/${vol}`)).status === 404), 'removed after the container\'s destroy')
  const fg = await cli('a', 'run', '--rm', '-v', '/data', IMAGE, 'sh', '-c', 'echo hi > /data/f')
  t.equal(fg.code, 0, fg.err)
  t.ok(await settle(async () => (await volumesOf(TA)).length === 0), 'a foreground --rm run leaves none')
})

t.test('a create the engine refuses leaves no volume', async (t) => {
  const before = await allVolumes()
  // Two anonymous volume mounts on one destination: the engine answers "Duplicate mount point".
  const c = await cli('a', 'create', '--name', name(), '--mount', 'type=volume,dst=/dup', '--mount', 'type=volume,dst=/dup', IMAGE, 'true')
  t.not(c.code, 0, 'the engine refused it')
  t.match(c.err, /[Dd]uplicate mount point/)
  t.ok(await settle(async () => (await allVolumes()).filter((v) => !before.includes(v)).length === 0), 'no volume left behind')
})

t.test('a tmpfs is compared as the engine compares it: written as is, not cleaned', async (t) => {
  const before = await allVolumes()
  // The engine skips a Volumes entry only under a tmpfs of exactly its path: `/t/` is
  // not `/t`, and the engine makes an anonymous volume at /t beside it.
  const n = name()
  const r = await request(gw.socket, 'POST', `/v1.41/containers/create?name=${n}`, { Image: IMAGE, Cmd: ['true'], Volumes: { '/t': {} }, HostConfig: { Tmpfs: { '/t/': 'size=1m' } } }, { token: TOKEN.a })
  t.equal(r.status, 201, r.text)
  const made = (await allVolumes()).filter((v) => !before.includes(v))
  t.equal(made.length, 1, 'one volume at /t, as the engine makes')
  t.equal((await direct('GET', `/volumes/${made[0]}`)).json.Labels?.['io.portcullis.tenant'], TA, 'the tenant\'s, not an unlabelled one')
  t.equal((await request(gw.socket, 'DELETE', `/v1.41/containers/${n}?v=1`, undefined, { token: TOKEN.a })).status, 204)
  t.ok(await settle(async () => (await allVolumes()).filter((v) => !before.includes(v)).length === 0), 'and removed with it')
  const m = name()
  const same = await request(gw.socket, 'POST', `/v1.41/containers/create?name=${m}`, { Image: IMAGE, Cmd: ['true'], Volumes: { '/t': {} }, HostConfig: { Tmpfs: { '/t': 'size=1m' } } }, { token: TOKEN.a })
  t.equal(same.status, 201, same.text)
  t.same((await allVolumes()).filter((v) => !before.includes(v)), [], 'a tmpfs at exactly /t: no volume, as the engine makes none')
  await request(gw.socket, 'DELETE', `/v1.41/containers/${m}`, undefined, { token: TOKEN.a })
})
