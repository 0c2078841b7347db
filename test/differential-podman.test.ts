/**
 * Podman reads the Docker-compatible API and its own libpod API its own way
 * (docs/podman.md, "How Podman reads a create"): the gateway must judge Podman's reading.
 * A private Podman service (test/engine/podman.ts) behind a gateway with an admin and two
 * tenants; every assertion is on Podman's own answers (its inspect and lists, never
 * through the gateway).
 *
 * First one regression test per class found against Podman 4.3 (each one failed on the
 * code before it): namespace paths and modes, mount options with host paths, images as
 * mounts and /system/df, health-check restarts, systemd mode and the cgroup namespace.
 *
 * Then a differential test with Podman as the oracle: fast-check generates
 * Docker-compatible and libpod create bodies over namespace modes, bind and volume
 * options, mount types and volume drivers, sends each as tenant A, and checks on Podman's
 * inspect of whatever it created that nothing the policy forbids was stored. Bounded in
 * `npm test` (a fixed seed, printed); `PCX_DIFF_RUNS=500 node
 * dist/test/differential-podman.test.js` runs longer (with a random seed, unless
 * PCX_DIFF_SEED is given).
 */
import { execFileSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import http from 'node:http'
import os from 'node:os'
import path from 'node:path'
import fc from 'fast-check'
import pino from 'pino'
import t from 'tap'
import { parseConfig } from '../src/config'
import { startGateway, type Gateway } from '../src/gateway'
import { api } from './engine/engine'
import { podmanAvailable, startPodman, stopPodman, type PodmanInfo } from './engine/podman'
import { POLICIES } from './helpers/gateway'

const started = Date.now()
const RUN = randomBytes(3).toString('hex')
const TA = `pdf-a${RUN}`
const TB = `pdf-b${RUN}`
const TENANT_LABEL = 'io.portcullis.tenant'
const P = `pdf${RUN}`
const LONG = process.env.PCX_DIFF_RUNS !== undefined
const RUNS = Number(process.env.PCX_DIFF_RUNS ?? 30)
const SEED = process.env.PCX_DIFF_SEED !== undefined ? Number(process.env.PCX_DIFF_SEED) : LONG ? Date.now() : 2326

t.setTimeout(900_000)

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pcpd-'))
// The tenants' allowed bind directory (the shipped policy's /srv/portcullis/<tenant>, here under /tmp).
// It is a nosymfollow mount, as the shipped policy requires of bind sources (rule
// host-binds-symfollow: no link planted there is ever followed).
const ROOT = fs.mkdtempSync('/tmp/pcpd-allowed-')
if (process.getuid?.() === 0) execFileSync('mount', ['-t', 'tmpfs', '-o', 'nosymfollow,mode=0755,size=64m', 'pcpd-binds', ROOT])
const ALLOWED = path.join(ROOT, TA)
fs.mkdirSync(path.join(ALLOWED, 'o'), { recursive: true })
// A host directory outside it, standing for any other (another tenant's volume, /etc...).
const OUTSIDE = fs.mkdtempSync('/tmp/pcpd-outside-')

function policies (): string {
  const dir = path.join(tmp, 'policies')
  fs.cpSync(POLICIES, dir, { recursive: true })
  const file = path.join(dir, 'base.csv')
  const before = fs.readFileSync(file, 'utf8')
  const after = before.replace("anyOutside(r.obj.hostPaths, '/srv/portcullis/' + r.dom)", `anyOutside(r.obj.hostPaths, '${ROOT}/' + r.dom)`)
  if (after === before) throw new Error('the edit changed nothing in the shipped base.csv')
  fs.writeFileSync(file, after)
  return dir
}

type Who = 'admin' | 'a' | 'b'
let pm: PodmanInfo
let gw: Gateway
let socks: Record<Who, string>

async function gateway (upstream: string): Promise<void> {
  socks = { admin: `${tmp}/admin.sock`, a: `${tmp}/a.sock`, b: `${tmp}/b.sock` }
  const text = `listen:
  - { unix: ${socks.admin}, identity: { subject: root-op, roles: [admin] } }
  - { unix: ${socks.a}, identity: { subject: alice, tenant: ${TA}, roles: [tenant] } }
  - { unix: ${socks.b}, identity: { subject: bob, tenant: ${TB}, roles: [tenant] } }
upstream: ${upstream}
policy: { dir: ${policies()} }
audit: { file: ${tmp}/audit.jsonl }
log: { level: ${process.env.PORTCULLIS_TEST_LOG ?? 'silent'} }
shutdown: { graceSeconds: 2 }
`
  const config = parseConfig(text, path.join(tmp, 'portcullis.yaml'))
  gw = await startGateway(config, pino({ level: config.log.level }))
}

/** Podman's own answer (its API, not through the gateway). */
async function podman (method: string, p: string, body?: unknown): Promise<{ status: number, body: any, text: string }> {
  const r = await api(pm.socket, method, p.startsWith('/libpod') ? `/v${pm.libpodVersion}${p}` : p, 60_000, body)
  let parsed: any = null
  try { parsed = JSON.parse(r.body) } catch { parsed = null }
  return { status: r.status, body: parsed, text: r.body }
}

/** One request through a gateway listener. */
async function ask (who: Who, method: string, p: string, body?: unknown): Promise<{ status: number, text: string, json: any }> {
  const json = body === undefined ? undefined : JSON.stringify(body)
  return await new Promise((resolve, reject) => {
    const req = http.request({ socketPath: socks[who], method, path: p, agent: false, headers: json === undefined ? {} : { 'content-type': 'application/json', 'content-length': Buffer.byteLength(json) } }, (res) => {
      let text = ''
      res.setEncoding('utf8')
      res.on('data', (c: string) => { text += c })
      res.on('end', () => {
        let parsed: any = null
        try { parsed = JSON.parse(text) } catch { parsed = null }
        resolve({ status: res.statusCode ?? 0, text, json: parsed })
      })
    })
    req.on('error', reject)
    req.end(json)
  })
}

const libpod = (): string => `/v${pm.libpodVersion}/libpod`
const said = (r: { status: number, text: string }): string => `${r.status} ${r.text.trim().slice(0, 300)}`
const allContainers = async (): Promise<any[]> => (await podman('GET', '/libpod/containers/json?all=true')).body ?? []
const names = async (): Promise<string[]> => (await allContainers()).flatMap((c) => (c.Names ?? []).map((n: string) => n.replace(/^\//, '')))
const inspect = async (ref: string): Promise<any> => (await podman('GET', `/libpod/containers/${ref}/json`)).body

/** A compat create as `who`; the answer, and whether Podman holds a container of that name afterwards. */
async function compat (who: Who, name: string, body: object): Promise<{ status: number, text: string, stored: boolean }> {
  const r = await ask(who, 'POST', `/v1.41/containers/create?name=${name}`, { Image: pm.image, Cmd: ['true'], ...body })
  return { ...r, stored: (await names()).includes(name) }
}
async function spec (who: Who, body: object): Promise<{ status: number, text: string, stored: boolean }> {
  const name = String((body as any).name)
  const r = await ask(who, 'POST', `${libpod()}/containers/create`, { image: pm.image, command: ['true'], ...body })
  return { ...r, stored: (await names()).includes(name) }
}
async function remove (name: string): Promise<void> {
  await podman('DELETE', `/libpod/containers/${name}?force=true&v=true`)
}

let seq = 0
const fresh = (what: string): string => `${P}-${what}-${++seq}`

if (process.getuid?.() !== 0 || !podmanAvailable()) {
  t.comment('Podman differential tests skipped: they need root and the podman package')
} else {
  t.before(async () => {
    pm = await startPodman()
    await gateway(`unix://${pm.socket}`)
  })
  t.teardown(async () => {
    await gw?.close()
    if (pm) await stopPodman(pm)
    try { execFileSync('umount', [ROOT]) } catch {}
    for (const d of [tmp, ROOT, OUTSIDE]) fs.rmSync(d, { recursive: true, force: true })
    t.comment(`test/differential-podman.test.ts: ${((Date.now() - started) / 1000).toFixed(1)} s`)
  })
  classes()
  differential()
}

function classes (): void {
  t.test('class 1: namespace modes are an allow-list (Podman reads ns:<path>, slirp4netns:..., keep-id...)', async (t) => {
    // /proc/self is Podman's service itself (and then runc): the namespaces of the host's side.
    const modes: Array<[string, string]> = [
      ['PidMode', 'ns:/proc/self/ns/pid'],
      ['IpcMode', 'ns:/proc/self/ns/ipc'],
      ['UTSMode', 'ns:/proc/self/ns/uts'],
      ['NetworkMode', 'ns:/proc/self/ns/net'],
      ['NetworkMode', 'slirp4netns:allow_host_loopback=true'],
      ['UsernsMode', 'keep-id'],
      ['UsernsMode', 'auto'],
    ]
    for (const [field, mode] of modes) {
      const name = fresh('ns')
      const r = await compat('a', name, { HostConfig: { [field]: mode } })
      t.match(said(r), /^403 .*no-host-namespaces/, `${field} ${mode}: refused by no-host-namespaces`)
      t.notOk(r.stored, `${field} ${mode}: Podman holds no such container`)
      if (r.stored) await remove(name)
    }
    const specs: Array<[string, object]> = [
      ['netns', { nsmode: 'slirp4netns', value: 'allow_host_loopback=true' }],
      ['netns', { nsmode: 'pasta' }],
      ['userns', { nsmode: 'keep-id' }],
      ['userns', { nsmode: 'auto' }],
      ['utsns', { nsmode: 'path', value: '/proc/self/ns/uts' }],
    ]
    for (const [field, ns] of specs) {
      const name = fresh('ns')
      const r = await spec('a', { name, [field]: ns })
      t.match(said(r), /^403 .*no-host-namespaces/, `libpod ${field} ${JSON.stringify(ns)}: refused by no-host-namespaces`)
      t.notOk(r.stored, 'Podman holds no such container')
      if (r.stored) await remove(name)
    }
    const ok = fresh('ns-ok')
    const plain = await compat('a', ok, { HostConfig: { NetworkMode: 'default', IpcMode: 'private', PidMode: '' } })
    t.equal(plain.status, 201, `the private forms are created (${said(plain)})`)
    const hc = (await inspect(ok))?.HostConfig
    t.same([hc?.PidMode, hc?.UTSMode, hc?.NetworkMode], ['private', 'private', 'bridge'], 'with namespaces of its own on Podman')
    await remove(ok)
  })

  t.test('class 2: bind and volume options are an allow-list (Podman\'s O with upperdir/workdir, U, idmap)', async (t) => {
    const src = path.join(ALLOWED, 'o')
    const up = path.join(OUTSIDE, 'up')
    const work = path.join(OUTSIDE, 'work')
    const binds = [
      `${src}:/data:O,upperdir=${up},workdir=${work}`,
      `${src}:/data:O`,
      `${src}:/data:U`,
      `${src}:/data:idmap`,
      `${P}-vol:/data:O,upperdir=${up},workdir=${work}`,
      `${src}:/data:rw,suid,dev`,
    ]
    for (const bind of binds) {
      const name = fresh('opt')
      const r = await compat('a', name, { HostConfig: { Binds: [bind] } })
      t.match(said(r), /^403 .*mount-options/, `Binds ${bind}: refused by mount-options`)
      t.notOk(r.stored, 'Podman holds no such container')
      if (r.stored) await remove(name)
    }
    t.notOk(fs.existsSync(up), 'Podman made no upper directory on the host')
    // Podman reads a source starting with `.` as a path relative to its own working directory.
    const rel = await compat('a', fresh('rel'), { HostConfig: { Binds: ['../../../etc:/data'] } })
    t.match(said(rel), /^403 .*host-binds/, 'a relative host path (../../../etc): refused by host-binds')
    const relMount = await compat('a', fresh('rel'), { HostConfig: { Mounts: [{ Type: 'bind', Source: `${src.slice(1)}`, Target: '/data' }] } })
    t.match(said(relMount), /^403 .*host-binds/, 'a relative Mounts bind source (the allowed path without its leading /, which Podman reads from its own directory): refused by host-binds')
    // In the compat API, Mounts fields are joined into one --mount string that Podman reads as CSV.
    const csv = await compat('a', fresh('csv'), { HostConfig: { Mounts: [{ Type: 'bind', Source: src, Target: '/data,idmap' }] } })
    t.match(said(csv), /^403 .*mount-options/, 'a Mounts field with a comma: refused by mount-options')
    const specMounts: object[] = [
      { mounts: [{ destination: '/data', type: 'bind', source: src, options: ['rbind', 'U'] }] },
      { mounts: [{ destination: '/data', type: 'bind', source: src, options: ['idmap=uids=0-1-10'] }] },
      { volumes: [{ Name: `${P}-vol`, Dest: '/data', Options: ['O'] }] },
    ]
    for (const body of specMounts) {
      const name = fresh('opt')
      const r = await spec('a', { name, ...body })
      t.match(said(r), /^403 .*mount-options/, `libpod ${JSON.stringify(body)}: refused by mount-options`)
      t.notOk(r.stored, 'Podman holds no such container')
      if (r.stored) await remove(name)
    }
    const ok = fresh('opt-ok')
    const fine = await compat('a', ok, { HostConfig: { Binds: [`${src}:/data:ro,rprivate`] } })
    t.equal(fine.status, 201, `a bind of the tenant's own directory, read-only, is created (${said(fine)})`)
    t.match((await inspect(ok))?.Mounts, [{ Type: 'bind', Source: src, RW: false }], 'and stored as that bind on Podman')
    await remove(ok)
  })

  t.test('class 3: images as mounts are refused, and /system/df shows a tenant its own', async (t) => {
    const name = fresh('img')
    const r = await compat('a', name, { HostConfig: { Mounts: [{ Type: 'image', Source: pm.image, Target: '/img' }] } })
    t.match(said(r), /^403 .*host-volumes/, 'a Mounts entry of type image: refused by host-volumes')
    t.notOk(r.stored, 'Podman holds no such container')
    const vol = await ask('a', 'POST', `${libpod()}/volumes/create`, { Name: `${P}-imgvol`, Driver: 'image', Options: { image: pm.image } })
    t.match(said(vol), /^403 .*volume-driver/, 'a libpod volume with the image driver: refused by volume-driver')
    t.equal((await podman('GET', `/libpod/volumes/${P}-imgvol/exists`)).status, 404, 'Podman holds no such volume')
    const iv = await spec('a', { name: fresh('imgvol'), image_volumes: [{ Source: pm.image, Destination: '/img' }] })
    t.match(said(iv), /^403 .*libpod-spec-fields/, 'libpod image_volumes: refused by libpod-spec-fields')

    // A's image (owner label as the gateway stamps it), container and volume.
    const base = fresh('df')
    t.equal((await compat('a', base, {})).status, 201, 'A creates a container')
    t.equal((await ask('a', 'POST', '/v1.41/volumes/create', { Name: `${P}-dfvol` })).status, 201, 'and a volume')
    const commit = await podman('POST', `/commit?container=${base}&repo=${TA}/own&tag=1&changes=${encodeURIComponent(`LABEL ${TENANT_LABEL}=${TA}`)}`, {})
    const image = String(commit.body?.Id ?? '').replace(/^sha256:/, '')
    t.match(image, /^[0-9a-f]{64}$/, `A's image is committed on Podman (${commit.text.trim().slice(0, 200)})`)
    const dfB = await ask('b', 'GET', '/v1.41/system/df')
    t.equal(dfB.status, 200, 'B\'s /system/df answers')
    t.notOk(JSON.stringify(dfB.json?.Images ?? []).includes(image), 'B\'s /system/df does not list A\'s image')
    t.same([dfB.json?.Containers, dfB.json?.Volumes], [[], []], 'nor A\'s containers or volumes')
    const dfA = await ask('a', 'GET', '/v1.41/system/df')
    t.ok((dfA.json?.Containers ?? []).some((c: any) => (c.Names ?? []).some((n: string) => n.replace(/^\//, '') === base)), 'A\'s /system/df lists its container')
    t.ok((dfA.json?.Volumes ?? []).some((v: any) => v.Name === `${P}-dfvol`), 'and its volume')
    t.ok((dfA.json?.Images ?? []).some((i: any) => String(i.Id).replace(/^sha256:/, '') === image), 'and its image')
    await remove(base)
    await podman('DELETE', `/libpod/images/${image}?force=true`)
    await podman('DELETE', `/libpod/volumes/${P}-dfvol?force=true`)
  })

  t.test('class 4: a health check that restarts counts as a restart policy (binds refused with it)', async (t) => {
    const health = { healthconfig: { Test: ['CMD', 'false'], Interval: 1_000_000_000, Retries: 1 }, health_check_on_failure_action: 3 }
    const name = fresh('hc')
    const r = await spec('a', { name, ...health, mounts: [{ destination: '/data', type: 'bind', source: path.join(ALLOWED, 'o'), options: ['rbind'] }] })
    t.match(said(r), /^403 .*no-restart-with-binds/, 'health_check_on_failure_action restart with a bind: refused by no-restart-with-binds')
    t.notOk(r.stored, 'Podman holds no such container')
    const ok = fresh('hc-ok')
    const fine = await spec('a', { name: ok, ...health })
    t.equal(fine.status, 201, `the same health check without binds is created (${said(fine)})`)
    t.equal((await inspect(ok))?.Config?.HealthcheckOnFailureAction, 'restart', 'with its restart action on Podman')
    await remove(ok)
  })

  t.test('class 8: no systemd mode, and a cgroup namespace of its own', async (t) => {
    const plain = fresh('cg')
    t.equal((await spec('a', { name: plain })).status, 201, 'a plain libpod create')
    t.equal((await inspect(plain))?.HostConfig?.CgroupMode, 'private', 'gets a private cgroup namespace on Podman (its default on cgroup v1 is the host\'s)')
    await remove(plain)
    for (const systemd of ['true', 'always']) {
      const name = fresh('sd')
      const r = await spec('a', { name, systemd, command: ['/sbin/init'] })
      t.equal(r.status, 201, `libpod systemd ${systemd} with /sbin/init: created (${said(r)})`)
      t.notOk((await inspect(name))?.Config?.SystemdMode, 'with systemd mode off on Podman')
      await remove(name)
    }
    for (const body of [{ Cmd: ['/sbin/init'] }, { Entrypoint: ['/usr/lib/systemd/systemd'], Cmd: [] }, { Entrypoint: ['["/usr/sbin/init"]'] }, { Cmd: ['/bin/sh', '-c', '/usr/local/sbin/init'] }]) {
      const name = fresh('sd')
      const r = await compat('a', name, body)
      t.match(said(r), /^403 .*podman-systemd/, `compat ${JSON.stringify(body)}: refused by podman-systemd`)
      t.notOk(r.stored, 'Podman holds no such container')
      if (r.stored) await remove(name)
    }
    // (Podman here has no init binary to run, so the create itself fails on Podman's side.)
    const init = fresh('sd-init')
    const withInit = await compat('a', init, { Cmd: ['/sbin/init'], HostConfig: { Init: true } })
    t.notMatch(said(withInit), /^403/, `with --init the command is Podman's init's argument: not refused (${said(withInit)})`)
    if (withInit.stored) t.notOk((await inspect(init))?.Config?.SystemdMode, 'and without systemd mode')
    await remove(init)
  })

  t.test('forward only what was judged: a tenant\'s create reaches Podman re-encoded from the fields the gateway knows', async (t) => {
    const name = fresh('known')
    const r = await spec('a', { name, rootfs: '', conmon_pid_file: '', mounts: [{ destination: '/t', type: 'tmpfs', source: 'tmpfs', options: ['size=1m'], extra: 'x' }] })
    t.equal(r.status, 201, `a SpecGenerator with zero-valued fields outside the tenant's set and an unknown mount key is created (${said(r)})`)
    const cname = fresh('known-compat')
    const c = await compat('a', cname, { Unknown: { Privileged: true }, UnsetEnv: ['X'] })
    t.equal(c.status, 201, `a compat create with an unknown field is created (${said(c)})`)
    const records = fs.readFileSync(path.join(tmp, 'audit.jsonl'), 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l))
    const removed = (n: string): string[] => records.filter((x) => JSON.stringify(x).includes(n)).flatMap((x) => JSON.stringify(x).match(/"op":"remove","path":"[^"]*"/g) ?? [])
    t.same(removed('ContainerCreateLibpod').sort(), ['"op":"remove","path":"/conmon_pid_file"', '"op":"remove","path":"/mounts/0/extra"', '"op":"remove","path":"/rootfs"'], 'the audit record shows what was not sent: the fields outside the tenant\'s set, the key no mount has')
    t.same(removed(cname), ['"op":"remove","path":"/Unknown"'], 'and of the compat create, the field Podman does not read (UnsetEnv, which it does, goes on)')
    t.ok(Object.keys((await inspect(name))?.HostConfig?.Tmpfs ?? {}).includes('/t'), 'Podman holds the container with its tmpfs')
    await remove(name)
    await remove(cname)
  })

  t.test('class 5: libpod log drivers are an allow-list, and the log is bounded as on the compat path', async (t) => {
    for (const [log, rule] of [[{ driver: 'passthrough' }, 'libpod-log-driver'], [{ driver: 'journald' }, 'libpod-log-driver'], [{ driver: 'k8s-file', size: -1 }, 'libpod-log-max-size'], [{ driver: 'k8s-file', size: 1073741824 }, 'libpod-log-max-size']] as const) {
      const name = fresh('log')
      const r = await spec('a', { name, log_configuration: log })
      t.match(said(r), new RegExp(`^403 .*${rule}`), `log_configuration ${JSON.stringify(log)}: refused by ${rule}`)
      t.notOk(r.stored, 'Podman holds no such container')
      if (r.stored) await remove(name)
    }
    const name = fresh('log-ok')
    t.equal((await spec('a', { name })).status, 201, 'a create that names no log configuration')
    const lc = (await inspect(name))?.HostConfig?.LogConfig
    t.same([lc?.Type, lc?.Size], ['k8s-file', '10.49MB'], 'gets a k8s-file truncated at 10 MiB on Podman (its default is unbounded)')
    await remove(name)
  })

  t.test('class 7: the engine work of one create is bounded (rule request-size), ranges expanded', async (t) => {
    const big: Array<[string, () => Promise<{ status: number, text: string, stored: boolean }>]> = [
      ['compat ExposedPorts 1-2000 published', async () => await compat('a', fresh('size'), { ExposedPorts: { '1-2000/tcp': {} }, HostConfig: { PublishAllPorts: true } })],
      ['compat 1100 PortBindings', async () => await compat('a', fresh('size'), { HostConfig: { PortBindings: Object.fromEntries(Array.from({ length: 1100 }, (_, i) => [`${i + 1}/tcp`, [{ HostPort: String(20000 + i) }]])) } })],
      ['libpod portmappings range 2000', async () => await spec('a', { name: fresh('size'), portmappings: [{ container_port: 1, host_port: 30000, range: 2000 }] })],
      ['libpod 5000 environment entries', async () => await spec('a', { name: fresh('size'), env: Object.fromEntries(Array.from({ length: 5000 }, (_, i) => [`V${i}`, 'x'])) })],
      ['compat 200 tmpfs mounts', async () => await compat('a', fresh('size'), { HostConfig: { Tmpfs: Object.fromEntries(Array.from({ length: 200 }, (_, i) => [`/t${i}`, 'size=1m'])) } })],
    ]
    for (const [what, send] of big) {
      const r = await send()
      t.match(said(r), /^403 .*request-size/, `${what}: refused by request-size`)
      t.notOk(r.stored, 'Podman holds no such container')
    }
    const ok = fresh('size-ok')
    const fine = await spec('a', { name: ok, portmappings: [{ container_port: 80, host_port: 30080, range: 10 }] })
    t.equal(fine.status, 201, `a range of 10 ports is created (${said(fine)})`)
    await remove(ok)
  })

  t.test('class 9: libpod tmpfs options and ramfs, and image search within the registries allowed', async (t) => {
    for (const [mount, rule] of [[{ destination: '/t', type: 'tmpfs', source: 'tmpfs', options: ['size=1m', 'suid'] }, 'tmpfs-options'], [{ destination: '/t', type: 'tmpfs', source: 'tmpfs', options: ['size=1m', 'dev'] }, 'tmpfs-options'], [{ destination: '/t', type: 'ramfs', source: 'ramfs' }, 'tmpfs-size']] as const) {
      const name = fresh('tmpfs')
      const r = await spec('a', { name, mounts: [mount] })
      t.match(said(r), new RegExp(`^403 .*${rule}`), `libpod mount ${JSON.stringify(mount)}: refused by ${rule}`)
      t.notOk(r.stored, 'Podman holds no such container')
      if (r.stored) await remove(name)
    }
    const ok = fresh('tmpfs-ok')
    const fine = await spec('a', { name: ok, mounts: [{ destination: '/t', type: 'tmpfs', source: 'tmpfs', options: ['size=1m', 'rprivate', 'nosuid', 'nodev', 'tmpcopyup'] }] })
    t.equal(fine.status, 201, `a sized tmpfs with the options podman --read-only sends is created (${said(fine)})`)
    await remove(ok)
    const short = await ask('a', 'GET', `${libpod()}/images/search?term=busybox`)
    t.match(said(short), /^403 .*libpod-short-names/, 'a search without a registry (Podman asks every registry it knows): refused')
    const far = await ask('a', 'GET', `${libpod()}/images/search?term=${encodeURIComponent('registry.invalid.example/x')}`)
    t.match(said(far), /^403 .*registry-not-allowed/, 'a search in a registry outside registries.allowed: refused')
  })

  t.test('class 10: a tenant\'s own secrets: list, inspect and delete work on Podman, another tenant\'s are missing', async (t) => {
    const sec = `${P}-sec`
    const made = await ask('a', 'POST', '/v1.41/secrets/create', { Name: sec, Data: Buffer.from('s3cret').toString('base64') })
    t.equal(made.status, 200, `A creates a secret (Podman answers 200: ${said(made)})`)
    const listA = await ask('a', 'GET', '/v1.41/secrets')
    t.equal(listA.status, 200, `A's secret list answers (${said(listA)})`)
    t.same((listA.json ?? []).map((s: any) => s.Spec?.Name), [sec], 'with exactly its own secret')
    const listB = await ask('b', 'GET', '/v1.41/secrets')
    t.same([listB.status, listB.json], [200, []], 'B\'s list is empty')
    t.equal((await ask('b', 'GET', `/v1.41/secrets/${sec}`)).status, 404, 'B cannot inspect it')
    t.equal((await ask('b', 'DELETE', `/v1.41/secrets/${sec}`)).status, 404, 'nor delete it')
    const ins = await ask('a', 'GET', `/v1.41/secrets/${sec}`)
    t.equal(ins.status, 200, `A inspects it by name (${said(ins)})`)
    t.equal((await ask('a', 'GET', `/v1.41/secrets/${String(made.json?.ID)}`)).status, 200, 'and by id')
    t.equal((await ask('a', 'DELETE', `/v1.41/secrets/${sec}`)).status, 204, 'A deletes it')
    t.same((await podman('GET', '/v1.41/secrets')).body?.filter((s: any) => s.Spec?.Name === sec), [], 'Podman holds it no more')
  })

  t.test('class 6: a libpod network create with explicit subnets is refused as the compat create is', async (t) => {
    const net = `${P}-subnet`
    const r = await ask('a', 'POST', `${libpod()}/networks/create`, { name: net, subnets: [{ subnet: '10.88.0.0/24' }] })
    t.match(said(r), /^403 .*network-ipam/, 'explicit subnets: refused by network-ipam')
    t.equal((await podman('GET', `/libpod/networks/${net}/exists`)).status, 404, 'Podman holds no such network')
    const ok = await ask('a', 'POST', `${libpod()}/networks/create`, { name: net })
    t.equal(ok.status, 200, `without subnets it is created (${said(ok)})`)
    await podman('DELETE', `/libpod/networks/${net}`)
  })
}

// ---------------------------------------------------------------------------------
// The differential test

const NS_MODES = ['', 'private', 'host', 'none', 'bridge', 'default', 'shareable', 'ns:/proc/self/ns/pid', 'ns:/proc/self/ns/net', 'container:x', 'slirp4netns', 'slirp4netns:allow_host_loopback=true', 'pasta', 'keep-id', 'auto', 'nomap', 'Host', 'host:x']
const OPTIONS = ['ro', 'rw', 'O', 'U', 'z', 'nocopy', 'rprivate', 'rshared', 'idmap', 'suid', 'dev', 'exec', 'noexec', 'nosuid', 'nodev', 'rbind', 'copy', 'upperdir=UP', 'workdir=WORK']
const NS_FIELDS = ['PidMode', 'IpcMode', 'UTSMode', 'UsernsMode', 'NetworkMode', 'CgroupnsMode'] as const
const LIBPOD_NS = ['pidns', 'ipcns', 'utsns', 'userns', 'netns', 'cgroupns'] as const
const LIBPOD_MODES = ['', 'default', 'private', 'host', 'path', 'bridge', 'none', 'slirp4netns', 'pasta', 'keep-id', 'auto', 'nomap', 'shareable', 'container', 'pod']

const options = fc.subarray(OPTIONS, { maxLength: 3 }).map((os) => os.map((o) => o.replace('UP', path.join(OUTSIDE, 'up')).replace('WORK', path.join(OUTSIDE, 'work'))))
const source = fc.constantFrom(path.join(ALLOWED, 'o'), `${P}-dvol`, './x', '/etc', path.join(OUTSIDE, 'up'))

const compatBody = fc.record({
  modes: fc.dictionary(fc.constantFrom(...NS_FIELDS), fc.constantFrom(...NS_MODES), { maxKeys: 3 }),
  binds: fc.array(fc.tuple(source, options).map(([s, o]) => `${s}:/m${randomBytes(2).toString('hex')}${o.length ? ':' + o.join(',') : ''}`), { maxLength: 2 }),
  mounts: fc.array(fc.record({
    Type: fc.constantFrom('bind', 'volume', 'tmpfs', 'image', 'devpts'),
    Source: fc.constantFrom(path.join(ALLOWED, 'o'), `${P}-dvol`, 'portcullis-test/busybox', ''),
    Target: fc.constantFrom('/t1', '/t2,idmap', '/t3'),
    BindOptions: fc.option(fc.record({ Propagation: fc.constantFrom('rprivate', 'rshared', 'private,U') }), { nil: undefined }),
  }, { requiredKeys: ['Type', 'Target'] }), { maxLength: 1 }),
  cmd: fc.constantFrom(['true'], ['/sbin/init'], ['/bin/sh', '-c', 'true']),
})

const libpodBody = fc.record({
  ns: fc.dictionary(fc.constantFrom(...LIBPOD_NS), fc.record({ nsmode: fc.constantFrom(...LIBPOD_MODES), value: fc.constantFrom('', '/proc/self/ns/net', 'allow_host_loopback=true') }), { maxKeys: 2 }),
  mounts: fc.array(fc.record({ destination: fc.constantFrom('/p1', '/p2'), type: fc.constantFrom('bind', 'tmpfs', 'image', 'overlay', 'devpts'), source, options }), { maxLength: 1 }),
  volumes: fc.array(fc.record({ Name: fc.constant(`${P}-dvol`), Dest: fc.constant('/v1'), Options: options }), { maxLength: 1 }),
  systemd: fc.constantFrom('true', 'false', 'always', undefined),
  command: fc.constantFrom(['true'], ['/sbin/init']),
  health: fc.constantFrom(0, 2, 3, 4),
})

const PRIVATE = {
  PidMode: ['private'],
  IpcMode: ['private', 'shareable', 'none'],
  UTSMode: ['private'],
  UsernsMode: ['', 'private'],
}
const OPTION_ALLOWED = new Set(['ro', 'rw', 'z', 'Z', 'nocopy', 'copy', 'private', 'rprivate', 'slave', 'rslave', 'shared', 'rshared', 'unbindable', 'runbindable', 'bind', 'rbind', 'exec', 'noexec', 'nosuid', 'nodev',
  // what Podman adds itself
  'tmpcopyup', 'notmpcopyup'])

/** What Podman stored for a container a tenant created: the list of what the policy forbids that is there. */
async function forbidden (id: string): Promise<string[]> {
  const c = await inspect(id)
  const bad: string[] = []
  const hc = c?.HostConfig ?? {}
  for (const [k, ok] of Object.entries(PRIVATE)) if (!ok.includes(String(hc[k] ?? ''))) bad.push(`${k} ${String(hc[k])}`)
  const net = String(hc.NetworkMode ?? '')
  if (net === 'host' || net.includes(':') || net.startsWith('slirp4netns') || net === 'pasta') bad.push(`NetworkMode ${net}`)
  if (c?.Config?.SystemdMode === true) bad.push('systemd mode')
  if (c?.Config?.HealthcheckOnFailureAction === 'restart' && (c?.Mounts ?? []).some((m: any) => m.Type === 'bind')) bad.push('health restart with binds')
  for (const m of c?.Mounts ?? []) {
    if (!['bind', 'volume', 'tmpfs'].includes(m.Type)) bad.push(`mount type ${String(m.Type)}`)
    if (m.Type === 'bind' && !String(m.Source).startsWith(ALLOWED + '/')) bad.push(`bind of ${String(m.Source)}`)
    for (const o of m.Options ?? []) if (!OPTION_ALLOWED.has(String(o).split('=')[0])) bad.push(`mount option ${String(o)}`)
  }
  for (const v of (c?.HostConfig?.Binds ?? [])) {
    const parts = String(v).split(':')
    if (parts[0].startsWith('/') && !parts[0].startsWith(ALLOWED + '/')) bad.push(`bind of ${parts[0]}`)
    for (const o of (parts[2] ?? '').split(',').filter(Boolean)) if (!OPTION_ALLOWED.has(o.split('=')[0])) bad.push(`bind option ${o}`)
  }
  return bad
}

function differential (): void {
  t.test(`differential: generated compat and libpod creates as a tenant, judged on Podman's inspect (${RUNS} runs each, seed ${SEED})`, async (t) => {
    t.equal((await ask('a', 'POST', '/v1.41/volumes/create', { Name: `${P}-dvol` })).status, 201, 'A\'s volume for the bodies to name')
    let created = 0
    let refused = 0
    await fc.assert(fc.asyncProperty(compatBody, async (b) => {
      const name = fresh('dc')
      const hc: Record<string, unknown> = { ...b.modes }
      if (b.binds.length) hc.Binds = b.binds
      if (b.mounts.length) hc.Mounts = b.mounts
      const r = await compat('a', name, { Cmd: b.cmd, HostConfig: hc })
      if (r.status === 201) created++
      else refused++
      if (!r.stored) return
      const bad = await forbidden(name)
      await remove(name)
      if (bad.length) throw new Error(`compat ${JSON.stringify({ Cmd: b.cmd, HostConfig: hc })} was stored with ${bad.join('; ')}`)
    }), { numRuns: RUNS, seed: SEED, endOnFailure: true })
    await fc.assert(fc.asyncProperty(libpodBody, async (b) => {
      const name = fresh('dl')
      const body: Record<string, unknown> = { name, command: b.command, ...b.ns }
      if (b.mounts.length) body.mounts = b.mounts
      if (b.volumes.length) body.volumes = b.volumes
      if (b.systemd !== undefined) body.systemd = b.systemd
      if (b.health) Object.assign(body, { healthconfig: { Test: ['CMD', 'true'] }, health_check_on_failure_action: b.health })
      const r = await spec('a', body)
      if (r.status === 201) created++
      else refused++
      if (!r.stored) return
      const bad = await forbidden(name)
      if ((await inspect(name))?.HostConfig?.CgroupMode === 'host') bad.push('CgroupMode host')
      await remove(name)
      if (bad.length) throw new Error(`libpod ${JSON.stringify(body)} was stored with ${bad.join('; ')}`)
    }), { numRuns: RUNS, seed: SEED, endOnFailure: true })
    t.ok(created > 0 && refused > 0, `both kinds of answer were seen (${created} created, ${refused} refused)`)
    await podman('DELETE', `/libpod/volumes/${P}-dvol?force=true`)
  })
}
