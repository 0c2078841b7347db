/**
 * Host resources the quotas do not count, and connections the daemon would make for a
 * tenant: one attempt per field or option, as a tenant through the gateway in front of
 * the real engines (the plain one, and the swarm manager for services, secrets and the
 * swarm itself). Each refusal is a 4xx naming its rule, and the engine is checked
 * unchanged: no object of that name was made, an updated container's HostConfig and an
 * updated service's or the swarm's spec are as they were. The safe defaults that
 * rewrites.yaml gives are checked on what the engine stored, memory-backed mounts
 * against a memory quota, and the ordinary commands (docker run with a small tmpfs,
 * --shm-size, --log-opt max-size, --ulimit nofile) with both CLIs.
 */
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import jwt from 'jsonwebtoken'
import t from 'tap'
import { CLI20, CLI28, engine, policiesWithQuota, request, run, servicesWithoutNoNewPrivileges, startTestGateway, swarmEngine, tarOf, type RawReply, type TestGateway } from './helpers/gateway'

const SECRET = randomBytes(32).toString('hex')
const RUN = randomBytes(3).toString('hex')
const TENANT = `hres-${RUN}`
/** A tenant with a memory quota of 1 GiB. */
const TQ = `hresq-${RUN}`
const MiB = 1024 ** 2
const GiB = 1024 ** 3
const sign = (tenant: string): string => jwt.sign({ sub: 'hana', tenant, roles: ['tenant'], exp: Math.floor(Date.now() / 1000) + 3600 }, SECRET, { algorithm: 'HS256' })
const TOKEN = sign(TENANT)
const QTOKEN = sign(TQ)
// (and tenants' services on the API 1.41 swarm engine allowed without no-new-privileges)
const policyDir = policiesWithQuota(TQ, '{ memory: 1GiB }', servicesWithoutNoNewPrivileges)
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'hres-'))

let gw: TestGateway
let sgw: TestGateway
const as = async (method: string, target: string, body?: object, token = TOKEN): Promise<RawReply> => await request(gw.socket, method, target, body, { token })
const asSwarm = async (method: string, target: string, body?: object, token = TOKEN): Promise<RawReply> => await request(sgw.socket, method, target, body, { token })
const direct = async (method: string, target: string, body?: object): Promise<RawReply> => await request(engine().socket, method, target, body)
const swarmDirect = async (method: string, target: string, body?: object): Promise<RawReply> => await request(swarmEngine().socket, method, target, body)

const containers: string[] = []
const volumes: string[] = []
const services: string[] = []
const fresh = (what: string): string => `hres-${RUN}-${what}-${randomBytes(3).toString('hex')}`
const ruleOf = (rule: string): RegExp => new RegExp(`rule ${rule}\\b`)

let box = ''
let boxHostConfig: any
let service = ''

t.before(async () => {
  gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, undefined, policyDir)
  sgw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, `unix://${swarmEngine().socket}`, policyDir)
  const r = await as('POST', `/v1.41/containers/create?name=${fresh('box')}`, { Image: engine().image, Cmd: ['sleep', '600'], HostConfig: { Tmpfs: { '/scratch': 'size=16m' } } })
  if (r.status !== 201) throw new Error(`create: ${r.status} ${r.text}`)
  box = r.json.Id
  containers.push(box)
  await direct('POST', `/containers/${box}/start`)
  boxHostConfig = (await direct('GET', `/containers/${box}/json`)).json.HostConfig
  const s = await asSwarm('POST', '/v1.41/services/create', { Name: fresh('svc'), Mode: { Replicated: { Replicas: 0 } }, TaskTemplate: { ContainerSpec: { Image: swarmEngine().image, Command: ['sleep', '600'] } } })
  if (s.status !== 201) throw new Error(`service create: ${s.status} ${s.text}`)
  service = s.json.ID
  services.push(service)
})

t.teardown(async () => {
  for (const id of containers) await direct('DELETE', `/containers/${id}?force=1&v=1`)
  for (const v of volumes) await direct('DELETE', `/volumes/${v}?force=1`)
  for (const id of services) await swarmDirect('DELETE', `/services/${id}`)
  await gw?.close()
  await sgw?.close()
  fs.rmSync(tmp, { recursive: true, force: true })
})

/** A container create as the tenant, refused by `rule`; no container of that name on the engine. */
function refusedCreate (why: string, hostConfig: object, rule: string, version = 'v1.41'): void {
  t.test(`create: ${why}`, async (t) => {
    const name = fresh('c')
    const r = await as('POST', `/${version}/containers/create?name=${name}`, { Image: engine().image, Cmd: ['true'], HostConfig: hostConfig })
    if (r.status === 201) containers.push(r.json.Id)
    t.equal(r.status, 403, `refused (${r.text.trim()})`)
    t.match(r.json?.message, ruleOf(rule), `naming rule ${rule}`)
    t.equal((await direct('GET', `/containers/${name}/json`)).status, 404, 'no container was created')
  })
}

/** An update of the tenant's running container, refused by `rule`; its HostConfig unchanged. */
function refusedUpdate (why: string, body: object, rule: string): void {
  t.test(`update: ${why}`, async (t) => {
    const r = await as('POST', `/v1.41/containers/${box}/update`, body)
    t.equal(r.status, 403, `refused (${r.text.trim()})`)
    t.match(r.json?.message, ruleOf(rule), `naming rule ${rule}`)
    t.same((await direct('GET', `/containers/${box}/json`)).json.HostConfig, boxHostConfig, 'the container\'s HostConfig is unchanged')
  })
}

function refusedVolume (why: string, body: object, rule: string): void {
  t.test(`volume create: ${why}`, async (t) => {
    const name = fresh('v')
    const r = await as('POST', '/v1.41/volumes/create', { Name: name, ...body })
    if (r.status === 201) volumes.push(name)
    t.equal(r.status, 403, `refused (${r.text.trim()})`)
    t.match(r.json?.message, ruleOf(rule), `naming rule ${rule}`)
    t.equal((await direct('GET', `/volumes/${name}`)).status, 404, 'no volume was created')
  })
}

/** A service create on the swarm engine, refused by `rule`; no service of that name. */
function refusedService (why: string, task: object, rule: string): void {
  t.test(`service create: ${why}`, async (t) => {
    const name = fresh('s')
    const r = await asSwarm('POST', '/v1.41/services/create', { Name: name, Mode: { Replicated: { Replicas: 0 } }, TaskTemplate: { ContainerSpec: { Image: swarmEngine().image }, ...task } })
    if (r.status === 201) services.push(r.json.ID)
    t.equal(r.status, 403, `refused (${r.text.trim()})`)
    t.match(r.json?.message, ruleOf(rule), `naming rule ${rule}`)
    t.equal((await swarmDirect('GET', `/services/${name}`)).status, 404, 'no service was created')
  })
}

/** An update of the tenant's service with `edit` applied to its spec, refused by `rule`; the service unchanged. */
function refusedServiceUpdate (why: string, edit: (spec: any) => void, rule: string): void {
  t.test(`service update: ${why}`, async (t) => {
    const before = (await swarmDirect('GET', `/services/${service}`)).json
    const spec = structuredClone(before.Spec)
    edit(spec)
    const r = await asSwarm('POST', `/v1.41/services/${service}/update?version=${before.Version.Index as number}`, spec)
    t.equal(r.status, 403, `refused (${r.text.trim()})`)
    t.match(r.json?.message, ruleOf(rule), `naming rule ${rule}`)
    const after = (await swarmDirect('GET', `/services/${service}`)).json
    t.equal(after.Version.Index, before.Version.Index, 'the service was not updated')
    t.same(after.Spec, before.Spec, 'its spec is as it was')
  })
}

// --- 1. Memory-backed filesystems ------------------------------------------------------
refusedCreate('a tmpfs without a size (the kernel allows half the host\'s RAM)', { Tmpfs: { '/tmp': '' } }, 'tmpfs-size')
refusedCreate('a tmpfs of 2 GiB', { Tmpfs: { '/tmp': 'size=2g' } }, 'tmpfs-size')
refusedCreate('a tmpfs whose last size is 0 (unlimited)', { Tmpfs: { '/tmp': 'size=64m,size=0' } }, 'tmpfs-size')
refusedCreate('a tmpfs sized as a share of the host\'s RAM', { Tmpfs: { '/tmp': 'size=50%' } }, 'tmpfs-size')
refusedCreate('a tmpfs sized in pages (nr_blocks) past the cap', { Tmpfs: { '/tmp': 'size=1m,nr_blocks=1048576' } }, 'tmpfs-size')
refusedCreate('a tmpfs size in hexadecimal past the cap', { Tmpfs: { '/tmp': 'size=0x80000000' } }, 'tmpfs-size')
refusedCreate('a tmpfs with suid', { Tmpfs: { '/tmp': 'size=1m,suid' } }, 'tmpfs-options')
refusedCreate('a tmpfs with device files', { Tmpfs: { '/tmp': 'size=1m,dev' } }, 'tmpfs-options')
refusedCreate('a tmpfs with a NUMA memory policy', { Tmpfs: { '/tmp': 'size=1m,mpol=bind:0' } }, 'tmpfs-options')
refusedCreate('a tmpfs with unlimited inodes', { Tmpfs: { '/tmp': 'size=1m,nr_inodes=0' } }, 'tmpfs-options')
refusedCreate('a tmpfs mount without SizeBytes', { Mounts: [{ Type: 'tmpfs', Target: '/scratch' }] }, 'tmpfs-size')
refusedCreate('a tmpfs mount of 4 GiB', { Mounts: [{ Type: 'tmpfs', Target: '/scratch', TmpfsOptions: { SizeBytes: 4 * GiB } }] }, 'tmpfs-size')
refusedCreate('a volume mount that makes a local tmpfs volume without a size', { Mounts: [{ Type: 'volume', Source: fresh('tv'), Target: '/t', VolumeOptions: { DriverConfig: { Name: 'local', Options: { type: 'tmpfs', device: 'tmpfs' } } } }] }, 'tmpfs-size')
refusedVolume('a tmpfs volume without a size', { Driver: 'local', DriverOpts: { type: 'tmpfs', device: 'tmpfs' } }, 'tmpfs-size')
refusedVolume('a tmpfs volume with suid', { Driver: 'local', DriverOpts: { type: 'tmpfs', device: 'tmpfs', o: 'size=1m,suid' } }, 'tmpfs-options')
refusedCreate('/dev/shm of 4 GiB', { ShmSize: 4 * GiB }, 'shm-size')
refusedService('a tmpfs mount without a size', { ContainerSpec: { Image: swarmEngine().image, Mounts: [{ Type: 'tmpfs', Target: '/t' }] } }, 'tmpfs-size')
refusedService('a tmpfs mount of 4 GiB', { ContainerSpec: { Image: swarmEngine().image, Mounts: [{ Type: 'tmpfs', Target: '/t', TmpfsOptions: { SizeBytes: 4 * GiB } }] } }, 'tmpfs-size')
refusedServiceUpdate('adding a tmpfs mount without a size', (s) => { s.TaskTemplate.ContainerSpec.Mounts = [{ Type: 'tmpfs', Target: '/t' }] }, 'tmpfs-size')

// --- 1. Ulimits, OOM, PIDs, CPU and block IO -------------------------------------------
refusedCreate('ulimit rtprio (real-time scheduling without CAP_SYS_NICE)', { Ulimits: [{ Name: 'rtprio', Soft: 99, Hard: 99 }] }, 'ulimits')
refusedCreate('ulimit RTPRIO in capitals (the engine upper-cases names)', { Ulimits: [{ Name: 'RTPRIO', Soft: 99, Hard: 99 }] }, 'ulimits')
refusedCreate('ulimit rttime', { Ulimits: [{ Name: 'rttime', Soft: -1, Hard: -1 }] }, 'ulimits')
refusedCreate('ulimit nice (a raised priority)', { Ulimits: [{ Name: 'nice', Soft: 40, Hard: 40 }] }, 'ulimits')
refusedCreate('ulimit memlock unlimited', { Ulimits: [{ Name: 'memlock', Soft: -1, Hard: -1 }] }, 'ulimits')
refusedCreate('ulimit nofile past the cap', { Ulimits: [{ Name: 'nofile', Soft: 1024, Hard: 4194304 }] }, 'ulimits')
refusedCreate('ulimit nproc unlimited', { Ulimits: [{ Name: 'nproc', Soft: -1, Hard: -1 }] }, 'ulimits')
refusedCreate('ulimit msgqueue raised', { Ulimits: [{ Name: 'msgqueue', Soft: GiB, Hard: GiB }] }, 'ulimits')
refusedCreate('ulimit sigpending', { Ulimits: [{ Name: 'sigpending', Soft: 1 << 24, Hard: 1 << 24 }] }, 'ulimits')
refusedService('a task ulimit raising nice', { ContainerSpec: { Image: swarmEngine().image, Ulimits: [{ Name: 'nice', Soft: 40, Hard: 40 }] } }, 'ulimits')
refusedServiceUpdate('adding ulimit rtprio', (s) => { s.TaskTemplate.ContainerSpec.Ulimits = [{ Name: 'rtprio', Soft: 99, Hard: 99 }] }, 'ulimits')
refusedCreate('the OOM killer disabled', { OomKillDisable: true }, 'no-oom-kill-disable')
refusedCreate('a negative OOM score (others are killed first)', { OomScoreAdj: -1000 }, 'oom-score-adj')
refusedCreate('a process limit past the cap', { PidsLimit: 10_000_000 }, 'pids-limit-max')
refusedUpdate('a process limit past the cap', { PidsLimit: 10_000_000 }, 'pids-limit-max')
refusedService('a task process limit past the cap', { Resources: { Limits: { Pids: 10_000_000 } } }, 'pids-limit-max')
refusedCreate('a real-time CPU period', { CpuRealtimePeriod: 1_000_000 }, 'no-realtime-cpu')
refusedCreate('a real-time CPU runtime', { CpuRealtimeRuntime: 950_000 }, 'no-realtime-cpu')
refusedUpdate('a real-time CPU runtime', { CpuRealtimeRuntime: 950_000 }, 'no-realtime-cpu')
refusedCreate('CPU shares above the default', { CpuShares: 262144 }, 'cpu-shares')
refusedUpdate('CPU shares above the default', { CpuShares: 100_000 }, 'cpu-shares')
refusedCreate('a block-IO weight above the default', { BlkioWeight: 1000 }, 'blkio-weight')
refusedUpdate('a block-IO weight above the default', { BlkioWeight: 1000 }, 'blkio-weight')
refusedCreate('a block-IO device weight', { BlkioWeightDevice: [{ Path: '/dev/sda', Weight: 1000 }] }, 'no-blkio-devices')
refusedCreate('a device read throttle (bytes)', { BlkioDeviceReadBps: [{ Path: '/dev/sda', Rate: 1 }] }, 'no-blkio-devices')
refusedCreate('a device write throttle (bytes)', { BlkioDeviceWriteBps: [{ Path: '/dev/sda', Rate: 1 }] }, 'no-blkio-devices')
refusedCreate('a device read throttle (operations)', { BlkioDeviceReadIOps: [{ Path: '/dev/sda', Rate: 1 }] }, 'no-blkio-devices')
refusedCreate('a device write throttle (operations)', { BlkioDeviceWriteIOps: [{ Path: '/dev/sda', Rate: 1 }] }, 'no-blkio-devices')
refusedCreate('unlimited swap', { Memory: 64 * MiB, MemorySwap: -1 }, 'memory-swap')
refusedCreate('swap past the default (as much again as the memory)', { Memory: 64 * MiB, MemorySwap: 100 * GiB }, 'memory-swap')
refusedUpdate('unlimited swap', { Memory: 512 * MiB, MemorySwap: -1 }, 'memory-swap')

// --- 2. Logging drivers ------------------------------------------------------------------
const drivers: Array<[string, Record<string, string>]> = [
  ['syslog', { 'syslog-address': 'udp://203.0.113.1:514' }],
  ['gelf', { 'gelf-address': 'udp://203.0.113.1:12201' }],
  ['fluentd', { 'fluentd-address': '203.0.113.1:24224', 'fluentd-async': 'true' }],
  ['splunk', { 'splunk-url': 'https://203.0.113.1:8088', 'splunk-token': 'x' }],
  ['awslogs', { 'awslogs-endpoint': 'https://203.0.113.1', 'awslogs-group': 'g' }],
  ['gcplogs', { 'gcp-project': 'p' }],
  ['logentries', { 'logentries-token': 'x' }],
  ['journald', {}],
  ['etwlogs', {}],
  ['grafana/loki-docker-driver:latest', { 'loki-url': 'http://203.0.113.1/loki/api/v1/push' }],
]
for (const [driver, config] of drivers) refusedCreate(`the ${driver} log driver`, { LogConfig: { Type: driver, Config: config } }, 'log-driver')
refusedCreate('json-file without max-size (one unbounded file)', { LogConfig: { Type: 'json-file', Config: {} } }, 'log-max-size')
refusedCreate('json-file with max-size past the cap', { LogConfig: { Type: 'json-file', Config: { 'max-size': '1g' } } }, 'log-max-size')
refusedCreate('json-file with an unreadable max-size', { LogConfig: { Type: 'json-file', Config: { 'max-size': 'lots' } } }, 'log-max-size')
refusedCreate('json-file with 1000 files', { LogConfig: { Type: 'json-file', Config: { 'max-size': '10m', 'max-file': '1000' } } }, 'log-max-file')
refusedCreate('local with max-size 0', { LogConfig: { Type: 'local', Config: { 'max-size': '0' } } }, 'log-max-size')
refusedCreate('a log buffer in the daemon\'s memory (max-buffer-size)', { LogConfig: { Type: 'local', Config: { mode: 'non-blocking', 'max-buffer-size': '100g' } } }, 'log-options')
refusedService('a task log driver sending to an address (gelf)', { LogDriver: { Name: 'gelf', Options: { 'gelf-address': 'udp://203.0.113.1:12201' } } }, 'log-driver')
refusedService('a task log driver json-file past the cap', { LogDriver: { Name: 'json-file', Options: { 'max-size': '10g' } } }, 'log-max-size')
refusedServiceUpdate('switching its log driver to syslog', (s) => { s.TaskTemplate.LogDriver = { Name: 'syslog', Options: { 'syslog-address': 'tcp://203.0.113.1:514' } } }, 'log-driver')

// --- The runtime's own settings, and a service's confinement -----------------------------
// (API 1.43+ and 1.44+ fields: the gateway judges them whatever engine is behind it.)
refusedCreate('OCI annotations for the runtime (crun reads run.oci.*)', { Annotations: { 'run.oci.keep_original_groups': '1' } }, 'no-annotations', 'v1.43')
refusedService('a custom seccomp profile that allows every call', { ContainerSpec: { Image: swarmEngine().image, Privileges: { Seccomp: { Mode: 'custom', Profile: Buffer.from('{"defaultAction":"SCMP_ACT_ALLOW"}').toString('base64') } } } }, 'security-options')
refusedService('tasks as SELinux type spc_t', { ContainerSpec: { Image: swarmEngine().image, Privileges: { SELinuxContext: { Type: 'spc_t' } } } }, 'security-options')
refusedServiceUpdate('switching to an unconfined seccomp profile', (s) => { s.TaskTemplate.ContainerSpec.Privileges = { Seccomp: { Mode: 'unconfined' } } }, 'security-options')

t.test('swarm update: the swarm\'s default task log driver is the administrator\'s', async (t) => {
  const before = (await swarmDirect('GET', '/swarm')).json
  const spec = structuredClone(before.Spec)
  spec.TaskDefaults = { LogDriver: { Name: 'syslog', Options: { 'syslog-address': 'udp://203.0.113.1:514' } } }
  const r = await asSwarm('POST', `/v1.41/swarm/update?version=${before.Version.Index as number}`, spec)
  t.equal(r.status, 403, r.text.trim())
  // The policy allows tenants no swarm update at all (tenancy would refuse it too: swarm-read-only).
  t.match(r.json?.message, /^SwarmUpdate denied by policy: no rule allows it/)
  const after = (await swarmDirect('GET', '/swarm')).json
  t.equal(after.Version.Index, before.Version.Index, 'the swarm was not updated')
  t.same(after.Spec.TaskDefaults, before.Spec.TaskDefaults, 'its task defaults are as they were')
})

// --- 2. Other requests that make the daemon connect somewhere -----------------------------
refusedCreate('a volume driver plugin for the container\'s volumes', { VolumeDriver: 'vieux/sshfs', Binds: [`${fresh('dv')}:/v`] }, 'volume-driver')
refusedCreate('a volume mount with a driver plugin', { Mounts: [{ Type: 'volume', Source: fresh('dv'), Target: '/v', VolumeOptions: { DriverConfig: { Name: 'vieux/sshfs', Options: { sshcmd: 'u@203.0.113.1:/' } } } }] }, 'volume-driver')
refusedVolume('a volume driver plugin', { Driver: 'vieux/sshfs', DriverOpts: { sshcmd: 'u@203.0.113.1:/' } }, 'volume-driver')
refusedVolume('an NFS volume of the local driver (the daemon mounts a remote share)', { Driver: 'local', DriverOpts: { type: 'nfs', o: 'addr=203.0.113.1,rw', device: ':/export' } }, 'host-volumes')
refusedVolume('a CIFS volume of the local driver', { Driver: 'local', DriverOpts: { type: 'cifs', o: 'addr=203.0.113.1,username=u', device: '//203.0.113.1/share' } }, 'host-volumes')
refusedService('a plugin task (the engine pulls and installs it)', { Runtime: 'plugin', PluginSpec: { Name: 'evil', Remote: '203.0.113.1:5000/evil/plugin:latest' }, ContainerSpec: undefined }, 'service-runtime')
refusedService('a task volume driver plugin', { ContainerSpec: { Image: swarmEngine().image, Mounts: [{ Type: 'volume', Source: 'v', Target: '/v', VolumeOptions: { DriverConfig: { Name: 'vieux/sshfs' } } }] } }, 'volume-driver')

t.test('secret create: an external secret driver (a plugin the manager calls)', async (t) => {
  const name = fresh('sec')
  const r = await asSwarm('POST', '/v1.41/secrets/create', { Name: name, Data: Buffer.from('x').toString('base64'), Driver: { Name: 'vault' } })
  t.equal(r.status, 403, r.text.trim())
  t.match(r.json?.message, ruleOf('no-secret-driver'))
  const listed = (await swarmDirect('GET', `/secrets?filters=${encodeURIComponent(JSON.stringify({ name: [name] }))}`)).json
  t.same(listed, [], 'no secret was created')
})

t.test('a build from a remote context', async (t) => {
  const tag = `${TENANT}/remote:${RUN}`
  const r = await as('POST', `/v1.41/build?t=${encodeURIComponent(tag)}&remote=${encodeURIComponent('http://203.0.113.1/ctx.tar')}`, tarOf({ Dockerfile: 'FROM scratch\n' }), TOKEN)
  t.equal(r.status, 403, r.text.trim())
  t.match(r.json?.message, ruleOf('build-remote'))
  t.equal((await direct('GET', `/images/${encodeURIComponent(tag)}/json`)).status, 404, 'no image was built')
})

t.test('an image import from a URL', async (t) => {
  const repo = `${TENANT}/imported`
  const r = await as('POST', `/v1.41/images/create?fromSrc=${encodeURIComponent('http://203.0.113.1/rootfs.tar')}&repo=${repo}&tag=${RUN}`)
  t.equal(r.status, 403, r.text.trim())
  t.match(r.json?.message, ruleOf('image-import-url'))
  t.equal((await direct('GET', `/images/${repo}:${RUN}/json`)).status, 404, 'no image was imported')
})

t.test('a pull from a registry that is not allowed', async (t) => {
  const ref = `203.0.113.1:5000/${TENANT}/x`
  const r = await as('POST', `/v1.41/images/create?fromImage=${encodeURIComponent(ref)}&tag=latest`)
  t.equal(r.status, 403, r.text.trim())
  t.match(r.json?.message, ruleOf('registry-not-allowed'))
  t.equal((await direct('GET', `/images/${encodeURIComponent(ref)}:latest/json`)).status, 404, 'nothing was pulled')
})

t.test('a login to a registry that is not allowed', async (t) => {
  const r = await as('POST', '/v1.41/auth', { serveraddress: 'https://203.0.113.1:5000', username: 'u', password: 'p' })
  t.equal(r.status, 403, r.text.trim())
  t.match(r.json?.message, ruleOf('registry-not-allowed'))
})

t.test('a plugin pull', async (t) => {
  const r = await as('POST', `/v1.41/plugins/pull?remote=${encodeURIComponent('203.0.113.1:5000/evil/plugin:latest')}&name=${fresh('plugin')}`, [])
  t.equal(r.status, 403, r.text.trim())
  t.match(r.json?.message, /^PluginPull denied by policy: no rule allows it/)
  t.same((await direct('GET', '/plugins')).json.filter((p: any) => String(p.PluginReference).includes('203.0.113.1')), [], 'no plugin was installed')
})

// --- The safe defaults, as the engine stored them ------------------------------------------
t.test('a container without a log configuration gets json-file, 10 MiB x 3, and /dev/shm of 64 MiB', async (t) => {
  const name = fresh('logdef')
  const r = await as('POST', `/v1.41/containers/create?name=${name}`, { Image: engine().image, Cmd: ['true'], HostConfig: { LogConfig: { Type: '', Config: {} } } })
  t.equal(r.status, 201, r.text)
  containers.push(r.json.Id)
  const hc = (await direct('GET', `/containers/${name}/json`)).json.HostConfig
  t.same(hc.LogConfig, { Type: 'json-file', Config: { 'max-size': '10m', 'max-file': '3' } }, 'the engine stored the bounded json-file default')
  t.equal(hc.ShmSize, 64 * MiB)
})

t.test('a service without a log driver gets json-file, 10 MiB x 3', async (t) => {
  const spec = (await swarmDirect('GET', `/services/${service}`)).json.Spec
  t.same(spec.TaskTemplate.LogDriver, { Name: 'json-file', Options: { 'max-size': '10m', 'max-file': '3' } })
})

// --- Memory-backed mounts count against the memory quota (1 GiB) ------------------------------
t.test('memory-backed mounts count against the memory quota', async (t) => {
  const create = async (what: string, hostConfig: object): Promise<RawReply & { name: string }> => {
    const name = fresh(what)
    const r = await as('POST', `/v1.41/containers/create?name=${name}`, { Image: engine().image, Cmd: ['true'], HostConfig: hostConfig }, QTOKEN)
    if (r.status === 201) containers.push(r.json.Id)
    return { ...r, name }
  }
  const quota = /quota exceeded for tenant hresq-[0-9a-f]+: memory limits .* > 1 GiB .*rule quota-memory/
  const shm = await create('q-shm', { Memory: 512 * MiB, ShmSize: 600 * MiB })
  t.equal(shm.status, 403, '512 MiB of memory and 600 MiB of /dev/shm (536 MiB past the default): over 1 GiB')
  t.match(shm.json?.message, quota)
  t.equal((await direct('GET', `/containers/${shm.name}/json`)).status, 404, 'not created')

  const first = await create('q-1', { Memory: 256 * MiB, Tmpfs: { '/a': 'size=256m' }, Mounts: [{ Type: 'tmpfs', Target: '/b', TmpfsOptions: { SizeBytes: 256 * MiB } }] })
  t.equal(first.status, 201, `256 MiB of memory and two tmpfs of 256 MiB: 768 MiB (${first.text.trim()})`)
  const second = await create('q-2', { Memory: 300 * MiB })
  t.equal(second.status, 403, 'another 300 MiB: 1068 MiB, over the quota (the first container\'s tmpfs mounts count)')
  t.match(second.json?.message, quota)
  t.equal((await direct('GET', `/containers/${second.name}/json`)).status, 404, 'not created')

  const over = await as('POST', `/v1.41/containers/${first.name}/update`, { Memory: 600 * MiB }, QTOKEN)
  t.equal(over.status, 403, 'raising the first container to 600 MiB: 1112 MiB with its mounts')
  t.match(over.json?.message, quota)
  t.equal((await direct('GET', `/containers/${first.name}/json`)).json.HostConfig.Memory, 256 * MiB, 'its memory limit is unchanged')
  const fits = await as('POST', `/v1.41/containers/${first.name}/update`, { Memory: 400 * MiB }, QTOKEN)
  t.equal(fits.status, 200, `400 MiB: 912 MiB with its mounts, within the quota (${fits.text.trim()})`)

  const svc = fresh('q-svc')
  const s = await asSwarm('POST', '/v1.41/services/create', {
    Name: svc,
    TaskTemplate: { ContainerSpec: { Image: swarmEngine().image, Command: ['sleep', '600'], Mounts: [{ Type: 'tmpfs', Target: '/t', TmpfsOptions: { SizeBytes: 600 * MiB } }] }, Resources: { Limits: { MemoryBytes: 512 * MiB } } },
  }, QTOKEN)
  if (s.status === 201) services.push(s.json.ID)
  t.equal(s.status, 403, 'a service replica of 512 MiB with a 600 MiB tmpfs: over 1 GiB')
  t.match(s.json?.message, quota)
  t.equal((await swarmDirect('GET', `/services/${svc}`)).status, 404, 'no service was created')
})

// --- The ordinary commands still work, with both CLIs --------------------------------------
function dockerConfig (token: string): string {
  const dir = fs.mkdtempSync(path.join(tmp, 'cfg-'))
  fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify({ HttpHeaders: { Authorization: `Bearer ${token}` } }))
  return dir
}

for (const [cliName, cli] of [['docker 28', CLI28], ['docker 20.10', CLI20]] as const) {
  t.test(`${cliName}: ordinary runs as a tenant`, async (t) => {
    const config = dockerConfig(TOKEN)
    const docker = async (args: string[]): Promise<string> => {
      const r = await run(cli, args, { host: gw.dockerHost, env: { DOCKER_CONFIG: config } })
      t.equal(r.code, 0, `docker ${args.join(' ')}`, r.code === 0 ? {} : { stderr: r.stderr })
      return r.stdout.toString()
    }
    const image = engine().image
    t.equal((await docker(['run', '--rm', image, 'echo', 'hello'])).trim(), 'hello', 'docker run --rm')
    t.match(await docker(['run', '--rm', '--tmpfs', '/tmp:size=64m', image, 'grep', ' /tmp ', '/proc/mounts']), /^tmpfs \/tmp tmpfs .*size=65536k/m, '--tmpfs with a small size')
    t.match(await docker(['run', '--rm', '--mount', 'type=tmpfs,dst=/x,tmpfs-size=1m', image, 'grep', ' /x ', '/proc/mounts']), /^tmpfs \/x tmpfs .*size=1024k/m, '--mount type=tmpfs with a size')
    t.match(await docker(['run', '--rm', '--shm-size', '64m', image, 'grep', ' /dev/shm ', '/proc/mounts']), /size=65536k/, '--shm-size 64m')
    t.equal((await docker(['run', '--rm', '--log-driver', 'json-file', '--log-opt', 'max-size=10m', image, 'echo', 'logged'])).trim(), 'logged', '--log-driver json-file --log-opt max-size=10m')
    t.equal((await docker(['run', '--rm', '--log-opt', 'max-size=10m', '--log-opt', 'max-file=2', image, 'echo', 'logged'])).trim(), 'logged', '--log-opt max-size=10m alone')
    t.equal((await docker(['run', '--rm', '--log-driver', 'local', image, 'echo', 'local'])).trim(), 'local', '--log-driver local')
    t.equal((await docker(['run', '--rm', '--ulimit', 'nofile=1024:2048', image, 'sh', '-c', 'ulimit -n'])).trim(), '1024', '--ulimit nofile')
    // A default container's logs are json-file's, and docker logs reads them back.
    const name = fresh('logs')
    await docker(['run', '--name', name, image, 'echo', 'kept'])
    containers.push(name)
    t.equal((await docker(['logs', name])).trim(), 'kept', 'docker logs')
    t.match(await docker(['inspect', '--format', '{{json .HostConfig.LogConfig}}', name]), /"Type":"json-file".*"max-size":"10m"/, 'in a bounded json-file')
    const refused = await run(cli, ['run', '--rm', '--log-driver', 'syslog', '--log-opt', 'syslog-address=udp://203.0.113.1:514', image, 'true'], { host: gw.dockerHost, env: { DOCKER_CONFIG: config } })
    t.not(refused.code, 0, '--log-driver syslog is refused')
    t.match(refused.stderr, /rule log-driver/, 'naming the rule')
  })
}
