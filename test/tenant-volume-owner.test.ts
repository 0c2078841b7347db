/**
 * Fresh named volumes are writable by a tenant's non-root user (tenancy.yaml
 * `users.ownFreshVolumes`, src/gateway/tenancy/volume-owner.ts; issue 20 item 3). Through
 * the gateway with the docker CLI 28 as a tenant on the default uid:gid (65534:65534):
 * `docker run -v data:/srv/db` (the volume made by the create), `docker volume create`
 * then run, and a compose project's named volume each write into the volume, and the
 * volume's root on the engine's disk is the tenant's uid; the container's root filesystem
 * is left alone. A volume someone already gave an owner, a volume another container
 * uses, and an admin's volume keep theirs. The mount point /srv/db is not in the test
 * image, so the volume starts as the local driver makes it (root's, 0755).
 */
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { CLI28, engine, run, startTestGateway, tokensFor, type TestGateway } from './helpers/gateway'
import { compileTenancy } from '../src/policy/tenancy'

const SECRET = randomBytes(32).toString('hex')
const RUN = randomBytes(3).toString('hex')
const TENANT = `volown-${RUN}`
const IMAGE = engine().image
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pcx-volown-'))
const { config } = tokensFor({ tenant: { sub: 'vera', tenant: TENANT, roles: ['tenant'] } }, SECRET, dir)
const vol = (what: string): string => `volown-${RUN}-${what}`
const volumes: string[] = []
const containers: string[] = []

let gw: TestGateway
const asTenant = async (args: string[]): Promise<{ code: number | null, out: string, err: string }> => {
  const r = await run(CLI28, args, { host: gw.dockerHost, env: { DOCKER_CONFIG: config.tenant } })
  return { code: r.code, out: r.stdout.toString(), err: r.stderr }
}
const asAdmin = async (args: string[]): Promise<{ code: number | null, out: string, err: string }> => {
  const r = await run(CLI28, args, { host: gw.dockerHost })
  return { code: r.code, out: r.stdout.toString(), err: r.stderr }
}
const onEngine = async (args: string[]): Promise<string> => (await run(CLI28, args, { host: engine().dockerHost })).stdout.toString().trim()
const rootOf = async (name: string): Promise<string> => {
  const mp = await onEngine(['volume', 'inspect', name, '-f', '{{.Mountpoint}}'])
  const st = fs.statSync(mp)
  return `${st.uid}:${st.gid}`
}
const writeInto = (name: string, extra: string[] = []): string[] => ['run', '--rm', ...extra, '-v', `${name}:/srv/db`, IMAGE, 'sh', '-c', 'echo x > /srv/db/f']

t.before(async () => { gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`) })
t.teardown(async () => {
  for (const c of containers) await onEngine(['rm', '-f', c])
  for (const v of volumes) await onEngine(['volume', 'rm', '-f', v])
  await gw?.close()
  fs.rmSync(dir, { recursive: true, force: true })
})

t.test('users.ownFreshVolumes is a boolean, on by default', async (t) => {
  const file = path.join(dir, 'tenancy.yaml')
  fs.writeFileSync(file, 'users: { ownFreshVolumes: false }\n')
  const problems: string[] = []
  t.equal(compileTenancy(file, 'tenancy.yaml', problems).users.ownFreshVolumes, false)
  t.same(problems, [])
  fs.writeFileSync(file, 'users: { ownFreshVolumes: yes-please }\n')
  compileTenancy(file, 'tenancy.yaml', problems)
  t.match(problems.join('\n'), /users\.ownFreshVolumes: expected true or false/)
  fs.writeFileSync(file, 'users: { default: "65534:65534" }\n')
  t.equal(compileTenancy(file, 'tenancy.yaml', []).users.ownFreshVolumes, true)
})

t.test('docker run -v data:/srv/db: the volume the create makes is the tenant uid\'s', async (t) => {
  const name = vol('run')
  volumes.push(name)
  const c = `volown-${RUN}-c1`
  containers.push(c)
  const r = await asTenant(['run', '--name', c, '-v', `${name}:/srv/db`, IMAGE, 'sh', '-c', 'echo x > /srv/db/f'])
  t.equal(r.code, 0, `the tenant's process writes into its new volume: ${r.err}`)
  t.equal(await rootOf(name), '65534:65534', 'the volume\'s root on the engine is the tenant uid\'s')
  const mp = await onEngine(['volume', 'inspect', name, '-f', '{{.Mountpoint}}'])
  const f = fs.statSync(path.join(mp, 'f'))
  t.equal(`${f.uid}:${f.gid}`, '65534:65534', 'the file it wrote is the tenant uid\'s')
  const upper = await onEngine(['inspect', c, '-f', '{{.GraphDriver.Data.UpperDir}}'])
  const inRootfs = path.join(upper, 'srv', 'db')
  if (fs.existsSync(inRootfs)) t.equal(fs.statSync(inRootfs).uid, 0, 'the root filesystem\'s mount point is not given away')
  else t.pass('the root filesystem has no mount point directory of its own')
  t.equal((await asTenant(['run', '--rm', '-v', `${name}:/srv/db`, IMAGE, 'cat', '/srv/db/f'])).out, 'x\n', 'a later container reads it')
})

t.test('docker volume create, then run', async (t) => {
  const name = vol('created')
  volumes.push(name)
  t.equal((await asTenant(['volume', 'create', name])).code, 0)
  t.equal(await rootOf(name), '0:0', 'a created volume starts as root\'s')
  const r = await asTenant(writeInto(name))
  t.equal(r.code, 0, `the tenant's first container writes into it: ${r.err}`)
  t.equal(await rootOf(name), '65534:65534')
})

t.test('a compose project\'s named volume', async (t) => {
  const project = `volown${RUN}`
  const pdir = path.join(dir, 'compose')
  fs.mkdirSync(pdir)
  fs.writeFileSync(path.join(pdir, 'docker-compose.yml'), `version: "3.7"\nservices:\n  db:\n    image: ${IMAGE}\n    command: ["sh", "-c", "echo x > /srv/db/f"]\n    volumes: ["data:/srv/db"]\nvolumes:\n  data: {}\n`)
  volumes.push(`${project}_data`)
  const r = await run('docker-compose', ['-p', project, 'up', '--no-color'], { host: gw.dockerHost, cwd: pdir, env: { DOCKER_CONFIG: config.tenant } })
  const ps = await onEngine(['ps', '-aq', '--filter', `label=com.docker.compose.project=${project}`])
  containers.push(...ps.split('\n').filter(Boolean))
  t.equal(r.code, 0, r.stderr)
  const exit = await onEngine(['inspect', ps.split('\n')[0], '-f', '{{.State.ExitCode}}'])
  t.equal(exit, '0', 'the service wrote into its volume')
  t.equal(await rootOf(`${project}_data`), '65534:65534')
})

t.test('an owner already given stays', async (t) => {
  const name = vol('owned')
  volumes.push(name)
  t.equal((await asTenant(writeInto(name, ['-u', '1000:1000']))).code, 0, 'the first container, as 1000:1000, gets it')
  t.equal(await rootOf(name), '1000:1000')
  const r = await asTenant(writeInto(name))
  t.not(r.code, 0, 'a later container as 65534 cannot write: the volume is not re-chowned')
  t.equal(await rootOf(name), '1000:1000')
})

t.test('a volume another container uses is not chowned', async (t) => {
  const name = vol('used')
  volumes.push(name)
  t.equal((await asTenant(['volume', 'create', name])).code, 0)
  const holder = `volown-${RUN}-holder`
  containers.push(holder)
  t.equal((await asAdmin(['create', '--name', holder, '-v', `${name}:/srv/db`, IMAGE, 'true'])).code, 0)
  t.not((await asTenant(writeInto(name))).code, 0, 'in use elsewhere: left as it is')
  t.equal(await rootOf(name), '0:0')
})

t.test('an admin\'s volumes are untouched', async (t) => {
  const name = vol('admin')
  volumes.push(name)
  const r = await asAdmin(writeInto(name, ['-u', '65534:65534']))
  t.not(r.code, 0, 'an admin\'s create is forwarded as it is')
  t.equal(await rootOf(name), '0:0')
  const tr = await asTenant(writeInto(name))
  t.not(tr.code, 0, 'a tenant cannot mount an admin\'s volume')
  t.equal(await rootOf(name), '0:0')
})
