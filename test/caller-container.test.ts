/**
 * The calling container as the identity (issue 22 item 5; listener `containerIdentity`).
 * Against the real engine: the gateway runs (as `portcullis serve`) in the test
 * engine's network namespace, where the engine's default bridge is, and listens on the
 * bridge's gateway address, which containers on the bridge reach; a second listener is a
 * unix socket bind-mounted into containers. Containers call it as the first command of
 * their entrypoint, so the request comes the moment they start:
 *
 * - two containers with different role labels get different answers (traefik or
 *   dashboard list containers, a role the policy does not know gets 403), on TCP and on the unix socket, and the audit
 *   record names each container (subject container:<name>, auth container, its id);
 * - a container without role labels is itself, with no roles (the policy may grant it
 *   some by its subject); a caller that is no container gets the listener's default identity;
 * - labels that grant roles count only where an admin set them: a tenant's container
 *   with one, and a container whose image carries one, get no role;
 * - a tenant cannot set them: its create, commit config, image load and build labels carrying one
 *   are refused (rule role-labels), and nothing is created; a Dockerfile LABEL is
 *   (rule owner-labels).
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { containerIdInCgroup, roleLabels } from '../src/gateway/callers'
import { engine, POLICIES, request, tarOf, type RawReply } from './helpers/gateway'

const CLI = path.resolve(__dirname, '../src/cli.js')
const RUN = randomBytes(3).toString('hex')
const IMAGE = engine().image
const PORT = 2390
/** The docker CLI 28 is one static binary: it runs in a busybox container as it is. */
const DOCKER_STATIC = '/usr/local/bin/docker'

const direct = async (method: string, p: string, body?: object): Promise<RawReply> => await request(engine().socket, method, p, body)

let dir = ''
let child: ChildProcess | undefined
let output = ''
let bridge = ''
const containers: string[] = []
const images: string[] = []

const sock = (name: string): string => path.join(dir, `${name}.sock`)

t.before(async () => {
  // The default bridge's inspect names no gateway (dockerd 20.10): its interface's address is it.
  const name = (await direct('GET', '/networks/bridge')).json?.Options?.['com.docker.network.bridge.name'] ?? 'docker0'
  const addr = execFileSync('nsenter', [`--net=/proc/${engine().pid}/ns/net`, '/bin/busybox', 'ip', '-4', '-o', 'addr', 'show', name], { encoding: 'utf8' })
  bridge = /inet (\d+\.\d+\.\d+\.\d+)\//.exec(addr)?.[1] ?? ''
  if (bridge === '') throw new Error(`no address on the engine's bridge ${name}: ${addr}`)
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pcc-'))
  // World-traversable: the unix socket is bind-mounted into containers.
  fs.chmodSync(dir, 0o755)
  // The shipped policy, and one line granting a role to a container by its subject.
  const policies = path.join(dir, 'policies')
  fs.cpSync(POLICIES, policies, { recursive: true })
  fs.appendFileSync(path.join(policies, 'base.csv'), `\ng, user:container:cc-${RUN}-granted, dashboard, *\n`)
  const config = path.join(dir, 'portcullis.yaml')
  fs.writeFileSync(config, [
    'listen:',
    `  - { unix: ${sock('admin')}, identity: { subject: tester, roles: [admin] } }`,
    `  - { unix: ${sock('tenant')}, identity: { subject: bob, tenant: team-${RUN}, roles: [tenant] } }`,
    `  - { tcp: "${bridge}:${PORT}", name: bridge, containerIdentity: { default: { subject: stranger, roles: [] } } }`,
    `  - { unix: ${sock('callers')}, name: callers, mode: "0666", containerIdentity: {} }`,
    `upstream: unix://${engine().socket}`,
    `policy: { dir: ${policies} }`,
    `audit: { file: ${dir}/audit.jsonl }`,
    `metrics: { listen: "127.0.0.1:${PORT + 1}" }`,
    'log: { level: info }',
    'shutdown: { graceSeconds: 1 }',
    '',
  ].join('\n'))
  // In the engine's network namespace (test/engine: dockerd has its own), where its bridge is.
  child = spawn('nsenter', [`--net=/proc/${engine().pid}/ns/net`, process.execPath, CLI, 'serve', '--config', config], { stdio: ['ignore', 'pipe', 'pipe'] })
  child.stdout!.on('data', (b: Buffer) => { output += b.toString() })
  child.stderr!.on('data', (b: Buffer) => { output += b.toString() })
  const deadline = Date.now() + 30_000
  for (;;) {
    if (child.exitCode !== null || Date.now() > deadline) throw new Error(`the gateway did not start:\n${output}`)
    if (fs.existsSync(sock('callers')) && (await request(sock('admin'), 'GET', '/_ping').catch(() => ({ status: 0 }))).status === 200) break
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
})

t.teardown(async () => {
  // What a test that failed may have left: the tenant's forged container and builds.
  for (const c of [...containers, `cc-${RUN}-forged`]) await direct('DELETE', `/containers/${c}?force=1`)
  for (const i of [...images, `team-${RUN}/x:1`, `team-${RUN}/y:1`, `team-${RUN}/c:1`]) await direct('DELETE', `/images/${i}?force=1`)
  if (child !== undefined && child.exitCode === null) {
    const gone = new Promise((resolve) => child!.once('exit', resolve))
    child.kill('SIGTERM')
    await gone
  }
  if (dir !== '') fs.rmSync(dir, { recursive: true, force: true })
})

interface Ran { id: string, name: string, logs: string, exit: number }

/** Create and start a container directly on the engine, wait for it to end; its output (tty: one stream). */
async function runContainer (name: string, labels: Record<string, string>, cmd: string[], extra: { image?: string, binds?: string[] } = {}): Promise<Ran> {
  const full = `cc-${RUN}-${name}`
  const c = await direct('POST', `/containers/create?name=${full}`, {
    Image: extra.image ?? IMAGE,
    Cmd: cmd,
    Labels: labels,
    Tty: true,
    HostConfig: { Binds: extra.binds ?? [] },
  })
  if (c.status !== 201) throw new Error(`create ${full}: ${c.status} ${c.text}`)
  containers.push(c.json.Id)
  const s = await direct('POST', `/containers/${c.json.Id}/start`)
  if (s.status !== 204) throw new Error(`start ${full}: ${s.status} ${s.text}`)
  const w = await direct('POST', `/containers/${c.json.Id}/wait`)
  const logs = await direct('GET', `/containers/${c.json.Id}/logs?stdout=1&stderr=1`)
  return { id: c.json.Id, name: full, logs: logs.text, exit: w.json?.StatusCode }
}

/** The first command of the entrypoint: GET /containers/json on the bridge listener, the status line printed. */
const WGET = (target = '/v1.41/containers/json'): string[] => ['sh', '-c', `wget -S -q -O /dev/null http://${bridge}:${PORT}${target} 2>&1 | head -1`]
/** The same through the unix socket mounted at /gw.sock, with the docker CLI. */
const DOCKER_PS = ['/docker', '-H', 'unix:///gw.sock', 'ps', '-q']
const unixBinds = (): string[] => [`${sock('callers')}:/gw.sock`, `${DOCKER_STATIC}:/docker:ro`]

interface AuditIdentity { subject: string, roles: string[], auth: string, container?: string }
function auditedIdentities (op: string): AuditIdentity[] {
  return fs.readFileSync(path.join(dir, 'audit.jsonl'), 'utf8').split('\n').filter((l) => l !== '')
    .map((l) => JSON.parse(l)).filter((r) => r.operation === op || r.target?.operation === op).map((r) => r.identity).filter((i) => i)
}

t.test('TCP: two containers, two role labels, two answers from their first request', async (t) => {
  // Traefik (a shipped preset) sees the containers that opt in: this one does.
  const reader = await runContainer('reader', { 'io.portcullis.role': 'traefik', 'traefik.enable': 'true' }, WGET())
  const other = await runContainer('other', { 'io.portcullis.roles': 'nobody, nothing' }, WGET())
  t.match(reader.logs, /HTTP\/1\.1 200/, `the traefik container lists containers: ${reader.logs}`)
  t.match(other.logs, /HTTP\/1\.1 403/, `a container whose roles grant nothing is refused: ${other.logs}`)
  const seen = auditedIdentities('ContainerList')
  t.ok(seen.some((i) => i.subject === `container:${reader.name}` && i.auth === 'container' && i.container === reader.id && i.roles.join() === 'traefik'), 'audited as the reader container, with its id and role')
  t.ok(seen.some((i) => i.subject === `container:${other.name}` && i.container === other.id && i.roles.join() === 'nobody,nothing'), 'audited as the other container, with its roles')
})

t.test('TCP: a container without role labels is itself, with no role; a caller that is no container gets the default', async (t) => {
  const plain = await runContainer('plain', {}, WGET())
  t.match(plain.logs, /HTTP\/1\.1 403/, plain.logs)
  t.ok(auditedIdentities('ContainerList').some((i) => i.subject === `container:${plain.name}` && i.roles.length === 0), 'audited as itself, no roles')
  // From the engine's namespace, the bridge's own address: no container's.
  const host = await new Promise<string>((resolve) => {
    const p = spawn('nsenter', [`--net=/proc/${engine().pid}/ns/net`, '/bin/busybox', 'wget', '-S', '-q', '-O', '/dev/null', `http://${bridge}:${PORT}/v1.41/containers/json`])
    let err = ''
    p.stderr.on('data', (b: Buffer) => { err += b.toString() })
    p.on('exit', () => resolve(err))
  })
  t.match(host, /403/, `no container: the default identity (no roles): ${host}`)
  t.ok(auditedIdentities('ContainerList').some((i) => i.subject === 'stranger' && i.auth === 'listener'), 'audited as the default identity')
})

t.test('the policy grants a container a role by its subject', async (t) => {
  // What the policy alone decides for an identity without a tenant: the engine's version (tenancy refuses the rest).
  const granted = await runContainer('granted', {}, WGET('/v1.41/version'))
  const other = await runContainer('ungranted', {}, WGET('/v1.41/version'))
  t.match(granted.logs, /HTTP\/1\.1 200/, `g, user:container:<name>, dashboard: ${granted.logs}`)
  t.match(other.logs, /HTTP\/1\.1 403/, `another container without the line: ${other.logs}`)
})

t.test('role labels count only where an admin set them', async (t) => {
  // A tenant's container (it carries the owner label) with a role label: no identity of its own.
  const owned = await runContainer('owned', { 'io.portcullis.role': 'dashboard', 'io.portcullis.tenant': `team-${RUN}` }, WGET())
  t.match(owned.logs, /HTTP\/1\.1 403/, `a tenant's container gets no role: ${owned.logs}`)
  t.notOk(auditedIdentities('ContainerList').some((i) => i.subject === `container:${owned.name}`), 'and is not itself: the default identity')
  // An image that carries a role label (anyone can build or pull one): the container inherits it, and gets no role.
  const repo = `cc-${RUN}-labelled:1`
  const base = await runContainer('base', {}, ['true'])
  const commit = await direct('POST', `/commit?container=${base.id}&repo=${repo.split(':')[0]}&tag=1&changes=${encodeURIComponent('LABEL io.portcullis.role=dashboard')}`, {})
  t.equal(commit.status, 201, commit.text)
  images.push(repo)
  const inherited = await runContainer('inherited', {}, WGET(), { image: repo })
  const labels = (await direct('GET', `/containers/${inherited.id}/json`)).json?.Config?.Labels
  t.equal(labels?.['io.portcullis.role'], 'dashboard', 'the container carries the image\'s label')
  t.match(inherited.logs, /HTTP\/1\.1 403/, `a role label from the image gives no role: ${inherited.logs}`)
})

t.test('unix socket: the peer\'s process names its container', async (t) => {
  const reader = await runContainer('ureader', { 'io.portcullis.role': 'dashboard' }, DOCKER_PS, { binds: unixBinds() })
  const other = await runContainer('uother', { 'io.portcullis.role': 'nobody' }, DOCKER_PS, { binds: unixBinds() })
  t.equal(reader.exit, 0, `the dashboard container lists containers: ${reader.logs}`)
  t.match(reader.logs, reader.id.slice(0, 12), 'and sees itself in the list')
  t.not(other.exit, 0, `the other is refused: ${other.logs}`)
  t.match(other.logs, /denied|403|Forbidden/i)
  const seen = auditedIdentities('ContainerList')
  t.ok(seen.some((i) => i.subject === `container:${reader.name}` && i.container === reader.id), 'audited as the reader container')
  // The test process is no container: no default on this listener, so 401.
  const me = await request(sock('callers'), 'GET', '/v1.41/containers/json')
  t.equal(me.status, 401, me.text)
  t.match(me.json?.message, /no container this listener knows/)
})

t.test('a tenant cannot set role labels', async (t) => {
  const name = `cc-${RUN}-forged`
  for (const key of ['io.portcullis.role', 'io.portcullis.roles']) {
    const r = await request(sock('tenant'), 'POST', `/v1.41/containers/create?name=${name}`, { Image: IMAGE, Cmd: ['true'], Labels: { [key]: 'admin' } })
    t.equal(r.status, 403, `${key}: ${r.text}`)
    t.match(r.json?.message, /rule role-labels/)
  }
  t.equal((await direct('GET', `/containers/${name}/json`)).status, 404, 'nothing created')
  // A commit's config labels (the tenant's own container to commit).
  const own = await request(sock('tenant'), 'POST', `/v1.41/containers/create?name=${name}-own`, { Image: IMAGE, Cmd: ['true'] })
  t.equal(own.status, 201, own.text)
  containers.push(own.json?.Id)
  const commit = await request(sock('tenant'), 'POST', `/v1.41/commit?container=${own.json?.Id}&repo=team-${RUN}/c&tag=1`, { Labels: { 'io.portcullis.role': 'admin' } })
  t.equal(commit.status, 403, commit.text)
  t.match(commit.json?.message, /rule role-labels/)
  // An image archive whose config carries one (an admin's image, tagged into the tenant's namespace and saved).
  const base = await runContainer('tobesaved', {}, ['true'])
  const labelled = await direct('POST', `/commit?container=${base.id}&repo=team-${RUN}/l&tag=1&changes=${encodeURIComponent('LABEL io.portcullis.role=admin')}`, {})
  t.equal(labelled.status, 201, labelled.text)
  images.push(`team-${RUN}/l:1`)
  const tarFile = path.join(dir, 'labelled.tar')
  execFileSync('/usr/bin/docker', ['-H', `unix://${engine().socket}`, 'save', '-o', tarFile, `team-${RUN}/l:1`])
  await direct('DELETE', `/images/team-${RUN}/l:1`)
  const load = await request(sock('tenant'), 'POST', '/v1.41/images/load', fs.readFileSync(tarFile), { contentType: 'application/x-tar' })
  t.equal(load.status, 403, load.text)
  t.match(load.json?.message, /rule role-labels/)
  t.equal((await direct('GET', `/images/team-${RUN}/l:1/json`)).status, 404, 'nothing loaded')
  const build = await request(sock('tenant'), 'POST', `/v1.41/build?t=team-${RUN}/x:1&labels=${encodeURIComponent(JSON.stringify({ 'io.portcullis.role': 'admin' }))}`,
    tarOf({ Dockerfile: `FROM ${IMAGE}\n` }), { contentType: 'application/x-tar' })
  t.equal(build.status, 403, build.text)
  t.match(build.json?.message, /rule role-labels/)
  const dockerfile = await request(sock('tenant'), 'POST', `/v1.41/build?t=team-${RUN}/y:1`,
    tarOf({ Dockerfile: `FROM ${IMAGE}\nLABEL io.portcullis.role=admin\n` }), { contentType: 'application/x-tar' })
  t.equal(dockerfile.status, 403, dockerfile.text)
  t.match(dockerfile.json?.message, /rule owner-labels/)
})

t.test('metrics count the callers by listener, result and lookup, never by container', async (t) => {
  const text = execFileSync('nsenter', [`--net=/proc/${engine().pid}/ns/net`, '/bin/busybox', 'wget', '-q', '-O', '-', `http://127.0.0.1:${PORT + 1}/metrics`], { encoding: 'utf8' })
  const lines = text.split('\n').filter((l) => l.startsWith('portcullis_container_callers_total{'))
  t.comment(lines.join('\n'))
  t.ok(lines.some((l) => /listener="bridge",result="container",lookup="(listed|waited|cached)"\} [1-9]/.test(l)), 'containers found on the TCP listener')
  t.ok(lines.some((l) => /listener="bridge",result="unknown",lookup="listed"\} [1-9]/.test(l)), 'the host\'s own address got the default at once, without waiting for a container start')
  t.ok(lines.some((l) => /listener="callers",result="container",lookup="peer"\} [1-9]/.test(l)), 'containers found by their process on the unix socket')
  t.notOk(lines.some((l) => l.includes(`cc-${RUN}`)), 'no container name in a label')
})

t.test('the container id in /proc/<pid>/cgroup, cgroup v1 and v2', async (t) => {
  const id = 'a'.repeat(60) + '0123'
  t.equal(containerIdInCgroup(`12:memory:/docker/${id}\n11:cpu,cpuacct:/docker/${id}\n0::/docker/${id}\n`), id, 'v1, cgroupfs driver')
  t.equal(containerIdInCgroup(`0::/system.slice/docker-${id}.scope\n`), id, 'v2, systemd driver')
  t.equal(containerIdInCgroup(`0::/docker/${id}\n`), id, 'v2, cgroupfs driver')
  t.equal(containerIdInCgroup(`4:memory:/process_api/efc1fc88/docker/${id}\n0::/\n`), id, 'below a parent of the host\'s own')
  t.equal(containerIdInCgroup('0::/user.slice/user-0.slice/session-1.scope\n1:name=systemd:/\n'), null, 'a host process')
  t.equal(containerIdInCgroup(`0::/docker/${id}/docker/${'b'.repeat(64)}\n`), null, 'two ids (a container in a container): none')
  t.equal(containerIdInCgroup(`0::/docker/${id}x\n`), null, 'not a whole path segment')
  t.same(roleLabels({ 'io.portcullis.role': 'traefik', 'io.portcullis.roles': 'a, b traefik', other: 'x' }, 'io.portcullis.'), ['traefik', 'a', 'b'])
  t.same(roleLabels({ 'my.role': 'x' }, 'io.portcullis.'), [])
})
