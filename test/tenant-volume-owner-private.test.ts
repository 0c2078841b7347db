/**
 * Fresh named volumes are writable by a tenant's non-root user under per-tenant names
 * (tenancy.yaml `names: private` and `users.ownFreshVolumes`, src/gateway/tenancy/volume-owner.ts).
 * Two tenants on the default uid:gid (65534:65534) each `docker run -v data:/srv/db` (the
 * volume made by the create) and `docker volume create store` then run: each writes into
 * its own volume, stored on the engine as `<tenant>.data`, whose root is the tenant uid's.
 *
 * On the old code the gateway looked for the client's plain names (`data`) among the
 * qualified ones it had created (`<tenant>.data`): nothing was owned, and the write failed.
 */
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { CLI28, engine, policiesWith, run, startTestGateway, tokensFor, type TestGateway } from './helpers/gateway'

const SECRET = randomBytes(32).toString('hex')
const RUN = randomBytes(3).toString('hex')
const TENANTS = { a: `volpa-${RUN}`, b: `volpb-${RUN}` } as const
// The shared test image (a plain name every tenant may use).
const IMAGE = engine().image
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pcx-volownp-'))
const { config } = tokensFor({ a: { sub: 'ann', tenant: TENANTS.a, roles: ['tenant'] }, b: { sub: 'bo', tenant: TENANTS.b, roles: ['tenant'] } }, SECRET, dir)

let gw: TestGateway
const as = async (who: 'a' | 'b', args: string[]): Promise<{ code: number | null, out: string, err: string }> => {
  const r = await run(CLI28, args, { host: gw.dockerHost, env: { DOCKER_CONFIG: config[who] } })
  return { code: r.code, out: r.stdout.toString(), err: r.stderr }
}
const onEngine = async (args: string[]): Promise<string> => (await run(CLI28, args, { host: engine().dockerHost })).stdout.toString().trim()
const rootOf = async (name: string): Promise<string> => {
  const mp = await onEngine(['volume', 'inspect', name, '-f', '{{.Mountpoint}}'])
  if (mp === '') return 'missing'
  const st = fs.statSync(mp)
  return `${st.uid}:${st.gid}`
}

t.before(async () => {
  const policies = policiesWith((text) => text.replace(/^names: engine$/m, 'names: private'))
  gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, undefined, policies)
})
t.teardown(async () => {
  for (const tenant of Object.values(TENANTS)) {
    const cs = (await onEngine(['ps', '-aq', '--filter', `label=io.portcullis.tenant=${tenant}`])).split('\n').filter(Boolean)
    if (cs.length > 0) await onEngine(['rm', '-f', ...cs])
    const vs = (await onEngine(['volume', 'ls', '-q', '--filter', `label=io.portcullis.tenant=${tenant}`])).split('\n').filter(Boolean)
    if (vs.length > 0) await onEngine(['volume', 'rm', '-f', ...vs])
  }
  await gw?.close()
  fs.rmSync(dir, { recursive: true, force: true })
})

t.test('docker run -v data:/srv/db by two tenants: each volume is its tenant uid\'s', async (t) => {
  for (const who of ['a', 'b'] as const) {
    const r = await as(who, ['run', '--rm', '-v', 'data:/srv/db', IMAGE, 'sh', '-c', `echo ${who} > /srv/db/f`])
    t.equal(r.code, 0, `${who}: the tenant's process writes into its new volume: ${r.err}`)
    t.equal(await rootOf(`${TENANTS[who]}.data`), '65534:65534', `${who}: the engine's ${TENANTS[who]}.data is the tenant uid's`)
  }
  t.equal(await rootOf('data'), 'missing', 'no unqualified volume was made')
  for (const who of ['a', 'b'] as const) {
    t.equal((await as(who, ['run', '--rm', '-v', 'data:/srv/db', IMAGE, 'cat', '/srv/db/f'])).out, `${who}\n`, `${who}: a later container reads its own`)
  }
})

t.test('docker volume create store, then run', async (t) => {
  for (const who of ['a', 'b'] as const) {
    const c = await as(who, ['volume', 'create', 'store'])
    t.equal(c.out.trim(), 'store', `${who}: volume create answers with the plain name`)
    t.equal(await rootOf(`${TENANTS[who]}.store`), '0:0', `${who}: a created volume starts as root's`)
    const r = await as(who, ['run', '--rm', '-v', 'store:/srv/db', IMAGE, 'sh', '-c', 'echo x > /srv/db/f'])
    t.equal(r.code, 0, `${who}: the first container writes into it: ${r.err}`)
    t.equal(await rootOf(`${TENANTS[who]}.store`), '65534:65534')
  }
})

t.test('--mount type=volume', async (t) => {
  const r = await as('a', ['run', '--rm', '--mount', 'type=volume,source=mnt,target=/srv/db', IMAGE, 'sh', '-c', 'echo x > /srv/db/f'])
  t.equal(r.code, 0, `the tenant's process writes into a volume named in Mounts: ${r.err}`)
  t.equal(await rootOf(`${TENANTS.a}.mnt`), '65534:65534')
})
