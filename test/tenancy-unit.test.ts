// The tenancy stage's pure parts, without an engine: every catalog operation has a
// tenancy handler, filters and image references are read as the engine reads them,
// tenancy.yaml and the registry credentials file are checked.
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { operations } from '../src/api/catalog/operations'
import { judgeDockerfile, type BaseImage } from '../src/gateway/tenancy/dockerfile'
import { handlers } from '../src/gateway/tenancy/operations'
import { parseFilters, serializeFilters, withLabel } from '../src/gateway/tenancy/filters'
import { familiar, inNamespace, looksLikeImageId, parseImageRef } from '../src/gateway/tenancy/images'
import { loadCredentials } from '../src/config'
import { registryAuthHeader } from '../src/gateway/tenancy/registry-auth'
import { compileTenancy, parseBytes, quotaFor, registryAllowed, DEFAULT_TENANCY } from '../src/policy/tenancy'
import { GatewayError } from '../src/api/errors'
import { OwnerCache, SWARM_SERVICE_LABEL, TENANT_LABEL } from '../src/gateway/tenancy/lookup'

t.test('every operation of the catalog has a tenancy handler, and no handler names an unknown operation', async (t) => {
  const ids = new Set(operations.map((o) => o.id))
  for (const id of ids) t.type(handlers[id], 'function', `${id} is scoped for tenants`)
  t.same(Object.keys(handlers).filter((k) => !ids.has(k)), [], 'no stray handlers')
})

t.test('filters: both JSON forms, terms added by ANDed label, one canonical serialization', async (t) => {
  const q = (s: string): URLSearchParams => new URLSearchParams({ filters: s })
  t.same([...parseFilters(q('{"label":["a=b"],"status":["exited"]}')).entries()].map(([k, v]) => [k, [...v]]), [['label', ['a=b']], ['status', ['exited']]])
  t.same([...parseFilters(q('{"label":{"a=b":true,"off":false}}')).get('label')!], ['a=b'], 'set form; false entries dropped')
  t.equal(parseFilters(new URLSearchParams('')).size, 0, 'none given')
  const scoped = withLabel(parseFilters(q('{"label":["x=1"]}')), 'io.portcullis.tenant=team-a')
  t.same(JSON.parse(serializeFilters(scoped)), { label: { 'x=1': true, 'io.portcullis.tenant=team-a': true } })
  const refused = (f: () => unknown, code: string, why: string): void => {
    try { f(); t.fail(`${why}: not refused`) } catch (err) { t.ok(err instanceof GatewayError && err.code === code, `${why}: ${(err as Error).message}`) }
  }
  refused(() => parseFilters(new URLSearchParams('filters=%7B%7D&filters=%7B%7D')), 'PATH_AMBIGUOUS', 'given twice (Go reads the first, others the last)')
  refused(() => parseFilters(q('not json')), 'BODY_INVALID', 'not JSON')
  refused(() => parseFilters(q('{"label":"a=b"}')), 'BODY_INVALID', 'a bare string is not a filter list')
  refused(() => parseFilters(q('[1]')), 'BODY_INVALID', 'a list is not a filter object')
})

t.test('image references as the engine reads them', async (t) => {
  t.same(parseImageRef('busybox'), { registry: 'docker.io', path: 'library/busybox' })
  t.same(parseImageRef('team-a/app:1'), { registry: 'docker.io', path: 'team-a/app', tag: '1' })
  t.same(parseImageRef('127.0.0.1:5000/team-a/app:1'), { registry: '127.0.0.1:5000', path: 'team-a/app', tag: '1' })
  t.same(parseImageRef('localhost/team-a/app'), { registry: 'localhost', path: 'team-a/app' })
  t.same(parseImageRef('index.docker.io/team-a/app'), { registry: 'docker.io', path: 'team-a/app' })
  t.match(parseImageRef(`team-a/app@sha256:${'a'.repeat(64)}`), { path: 'team-a/app', digest: `sha256:${'a'.repeat(64)}` })
  t.same(parseImageRef('Team-A/app'), { registry: 'Team-A', path: 'app' }, 'an upper-case first component is a registry host, as in distribution/reference')
  t.equal(parseImageRef('a//b'), null)
  t.ok(inNamespace(parseImageRef('127.0.0.1:5000/team-a/app')!, 'team-a'))
  t.notOk(inNamespace(parseImageRef('team-ab/app')!, 'team-a'), 'a namespace is a whole path component')
  t.notOk(inNamespace(parseImageRef('team-a')!, 'team-a'), 'library/team-a is not in team-a/')
  t.equal(familiar('busybox'), 'busybox:latest')
  t.equal(familiar('busybox:1'), 'busybox:1')
  t.ok(looksLikeImageId('sha256:abcd'))
  t.ok(looksLikeImageId('0123456789ab'))
  t.notOk(looksLikeImageId('busybox'))
})

t.test('tenancy.yaml: defaults, every problem reported, quotas per tenant over the default', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pct-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  const file = path.join(dir, 'tenancy.yaml')
  fs.writeFileSync(file, 'unscopedRoles: [admin, auditor]\nregistries: { allowed: ["127.0.0.1:*"] }\nquotas:\n  default: { containers: 10, memory: 8GiB, cpus: 2 }\n  tenants: { team-a: { containers: 3, volumes: 1 } }\n')
  const problems: string[] = []
  const s = compileTenancy(file, 'tenancy.yaml', problems)
  t.same(problems, [])
  t.same(s.unscopedRoles, ['admin', 'auditor'])
  t.same(quotaFor(s, 'team-a'), { containers: 3, memory: 8 * 1024 ** 3, nanoCpus: 2e9, volumes: 1 })
  t.same(quotaFor(s, 'team-b'), { containers: 10, memory: 8 * 1024 ** 3, nanoCpus: 2e9 })
  t.ok(registryAllowed(s, '127.0.0.1:5000'))
  t.notOk(registryAllowed(s, 'docker.io'))
  t.notOk(registryAllowed(s, '127.0.0.1.evil.example:5000'), 'a wildcard is anchored: no suffix tricks')
  t.ok(registryAllowed(DEFAULT_TENANCY, 'docker.io'))
  t.equal(s.builds.buildkit, false, 'BuildKit builds are refused for tenants unless allowed')
  t.equal(parseBytes('512MiB'), 512 * 1024 ** 2)
  t.equal(parseBytes('1.5g'), 1.5 * 1024 ** 3)
  t.equal(parseBytes('lots'), null)

  fs.writeFileSync(file, 'builds: { buildkit: true }\n')
  const allowed: string[] = []
  t.equal(compileTenancy(file, 'tenancy.yaml', allowed).builds.buildkit, true, 'builds.buildkit: true allows them')
  t.same(allowed, [])
  t.equal(s.builds.runAsRoot, 'users', 'build steps run as root only for tenants that may run containers as root, unless the file says so')
  for (const mode of ['never', 'always'] as const) {
    fs.writeFileSync(file, `builds: { runAsRoot: ${mode} }\n`)
    const p: string[] = []
    t.equal(compileTenancy(file, 'tenancy.yaml', p).builds.runAsRoot, mode, `builds.runAsRoot: ${mode}`)
    t.same(p, [])
  }
  fs.writeFileSync(file, 'builds: { runAsRoot: sometimes }\n')
  const runAs: string[] = []
  compileTenancy(file, 'tenancy.yaml', runAs)
  t.same(runAs, ['tenancy.yaml: builds.runAsRoot: expected never, users or always, got "sometimes"'], 'an unknown builds.runAsRoot is an error')

  fs.writeFileSync(file, 'imageNamespace: shared\nregistries: { tenantCredentials: maybe }\nquotas: { default: { memory: lots, cpus: -1, pods: 3 } }\nbuilds: { buildkit: yes please }\nsurprise: 1\n')
  const bad: string[] = []
  compileTenancy(file, 'tenancy.yaml', bad)
  t.same(bad.sort(), [
    'tenancy.yaml.surprise: unknown key',
    'tenancy.yaml: imageNamespace: expected a repository path containing {tenant}, e.g. "{tenant}" or "teams/{tenant}"',
    'tenancy.yaml: quotas.default.cpus: expected a number of CPUs >= 0 (e.g. 4 or 0.5)',
    'tenancy.yaml: quotas.default.memory: expected bytes (e.g. 32GiB, 512MiB or a number), got "lots"',
    'tenancy.yaml: quotas.default.pods: unknown key',
    'tenancy.yaml: registries.tenantCredentials: expected strip or allow',
    'tenancy.yaml: builds.buildkit: expected true or false',
  ].sort())
})

t.test('registry credentials: the file must be private; its content is checked', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pct-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  const file = path.join(dir, 'creds.yaml')
  fs.writeFileSync(file, 'team-a:\n  "127.0.0.1:5000": { username: u, password: p }\n  docker.io: { identitytoken: tok }\nteam-b:\n  r.example: { username: only }\n', { mode: 0o600 })
  const problems: string[] = []
  const c = loadCredentials(file, 'registries.credentials', problems)
  t.same(problems, ['registries.credentials: ' + file + ': team-b.r.example: give username and password, or identitytoken'])
  t.same(c.get('team-a', '127.0.0.1:5000'), { username: 'u', password: 'p' })
  t.equal(c.get('team-b', '127.0.0.1:5000'), undefined)
  t.same(JSON.parse(Buffer.from(registryAuthHeader(c.get('team-a', '127.0.0.1:5000'), '127.0.0.1:5000'), 'base64url').toString()), { username: 'u', password: 'p', serveraddress: '127.0.0.1:5000' })
  t.equal(registryAuthHeader(undefined, 'x'), 'e30=', 'no credentials: an empty auth, padded, as the CLI sends it')
  t.match(registryAuthHeader({ username: 'ab', password: 'c' }, 'r'), /^[A-Za-z0-9_-]+=*$/, 'URL-safe alphabet')
  t.equal(registryAuthHeader({ username: 'ab', password: 'c' }, 'r').length % 4, 0, 'padded: the engine ignores unpadded credentials')
  t.same(c.describe(), { 'team-a': ['127.0.0.1:5000', 'docker.io'], 'team-b': [] }, 'described without values')
  fs.chmodSync(file, 0o644)
  const open: string[] = []
  loadCredentials(file, 'registries.credentials', open)
  t.match(open[0], /accessible to group or others \(mode 0644\).*chmod 600/)
})

t.test('kept container lists: corrected by the events that arrive while the engine answers, per tenant', async (t) => {
  const cache = new OwnerCache()
  cache.live = true
  let answer: (ids: Array<{ id: string, counts: boolean }>) => void = () => {}
  const listing = cache.listContainers('a', async () => await new Promise((resolve) => { answer = resolve }))
  cache.containerEvent('create', 'a-new', { [TENANT_LABEL]: 'a' })
  cache.containerEvent('create', 'a-task', { [TENANT_LABEL]: 'a', [SWARM_SERVICE_LABEL]: 'svc' })
  cache.containerEvent('create', 'b-new', { [TENANT_LABEL]: 'b' })
  cache.containerEvent('create', 'nobodys', {})
  cache.containerEvent('destroy', 'a-old', { [TENANT_LABEL]: 'a' })
  answer([{ id: 'a-old', counts: true }, { id: 'a-kept', counts: true }])
  t.same([...await listing].sort(), [['a-kept', true], ['a-new', true], ['a-task', false]], 'the list, plus a\'s creates, less what was destroyed; not b\'s or unowned containers')
  t.same([...cache.containersOf('a') ?? []].sort(), [['a-kept', true], ['a-new', true], ['a-task', false]], 'and kept')
  cache.containerEvent('destroy', 'a-new', {})
  cache.containerEvent('create', 'a-later', { [TENANT_LABEL]: 'a' })
  t.same([...cache.containersOf('a') ?? []].sort(), [['a-kept', true], ['a-later', true], ['a-task', false]], 'later events keep it current')
  t.equal(cache.containersOf('b'), undefined, 'b was never listed: nothing kept for b')
  cache.clear()
  t.equal(cache.containersOf('a'), undefined, 'a cleared cache (the event stream was lost) keeps nothing')
})

t.test('system df: the per-type summaries of API 1.52 are rebuilt from what the tenant may see, unknown fields left out', async (t) => {
  const { filterDataUsage } = await import('../src/gateway/tenancy/responses')
  const { Call } = await import('../src/gateway/tenancy/call')
  const op = operations.find((o) => o.id === 'SystemDataUsage')!
  // The engine is dockerd (Podman's df is relabelled from its lists: test/differential-podman).
  const dockerd = { engine: async () => 'docker' }
  const call = new Call(op, {}, new URLSearchParams(), undefined, 'team-a', 'alice', DEFAULT_TENANCY, dockerd as never, undefined as never, undefined)
  const own = { [TENANT_LABEL]: 'team-a' }
  const other = { [TENANT_LABEL]: 'team-b' }
  const df = {
    ImageUsage: {
      ActiveCount: 2,
      TotalCount: 3,
      Reclaimable: 700,
      TotalSize: 1000,
      Items: [
        { Id: 'sha256:shared', RepoTags: ['busybox:latest'], Size: 100, Containers: 2, Labels: null },
        { Id: 'sha256:mine', Size: 200, Containers: 0, Labels: own },
        { Id: 'sha256:theirs', Size: 700, Containers: 1, Labels: other },
        { Id: 'sha256:intermediate', RepoTags: [], Size: 50, Containers: 0, Labels: null },
      ]
    },
    ContainerUsage: {
      ActiveCount: 2,
      TotalCount: 2,
      Reclaimable: 0,
      TotalSize: 30,
      Items: [
        { Id: 'c1', ImageID: 'sha256:shared', State: 'running', SizeRw: 10, Labels: own },
        { Id: 'c2', ImageID: 'sha256:shared', State: 'running', SizeRw: 20, Labels: other },
      ]
    },
    VolumeUsage: {
      ActiveCount: 0,
      TotalCount: 2,
      Reclaimable: 15,
      TotalSize: 15,
      Items: [
        { Name: 'v1', Labels: own, UsageData: { Size: 5, RefCount: 0 } },
        { Name: 'v2', Labels: other, UsageData: { Size: 10, RefCount: 0 } },
      ]
    },
    BuildCacheUsage: { ActiveCount: 1, TotalCount: 1, Reclaimable: 9, TotalSize: 9 },
    SomethingNewer: { engineWide: true },
  }
  const out = await filterDataUsage(call, df) as any
  t.same(out.ImageUsage, {
    ActiveCount: 1,
    TotalCount: 2,
    Reclaimable: 200,
    TotalSize: 300,
    Items: [
      { Id: 'sha256:shared', RepoTags: ['busybox:latest'], Size: 100, Containers: 1, Labels: null }, { Id: 'sha256:mine', Size: 200, Containers: 0, Labels: own },
    ]
  }, 'images: shared and own, containers counted among the tenant\'s own')
  t.same(out.ContainerUsage, { ActiveCount: 1, TotalCount: 1, Reclaimable: 0, TotalSize: 10, Items: [df.ContainerUsage.Items[0]] })
  t.same(out.VolumeUsage, { ActiveCount: 0, TotalCount: 1, Reclaimable: 5, TotalSize: 5, Items: [df.VolumeUsage.Items[0]] })
  t.same(out.BuildCacheUsage, { ActiveCount: 0, TotalCount: 0, Reclaimable: 0, TotalSize: 0 }, 'the build cache has no owner: none')
  t.notOk('SomethingNewer' in out, 'a field the gateway does not know is not passed on')
  t.notOk('Images' in out, 'the legacy lists only when the engine sent them')
})

t.test('the forwarded Dockerfile: images by the inspected id, stages by index, USER as the judged uid:gid', async (t) => {
  const ids: Record<string, BaseImage> = {
    'team-b/base:1': { id: `sha256:${'a'.repeat(64)}`, user: '65534:65534', onBuild: [], env: ['U=65534'] },
    other: { id: `sha256:${'b'.repeat(64)}`, user: '', onBuild: ['USER 1000'], env: [] },
  }
  const scope = {
    dockerfile: '',
    buildArgs: { V: '65534' },
    checkImage: async (ref: string) => { const b = ids[ref]; if (!b) throw new Error(`unexpected ${ref}`); return b },
    stepUser: (user: string) => { if (!/^[1-9][0-9]*(:[1-9][0-9]*)?$/.test(user)) throw new Error(`refused ${user}`); return user.includes(':') ? user : `${user}:65534` },
  }
  const text = 'ARG B=team-b/base:1\r\nFROM --platform=linux/amd64 ${B} AS one\r\nUSER $U\r\nRUN id\r\nFROM team-b/\\\nbase:1\nARG V\nUSER "${V}"\nCOPY --from=other /x /y\nCOPY --from=one /x /z\nUSER root\nCMD id\n'
  t.equal(await judgeDockerfile(text, scope),
    `ARG B=team-b/base:1\nFROM --platform=linux/amd64 ${ids['team-b/base:1'].id} AS one\nUSER 65534:65534\nRUN id\nFROM ${ids['team-b/base:1'].id}\nARG V\nUSER 65534:65534\nCOPY --from=${ids.other.id} /x /y\nCOPY --from=0 /x /z\nUSER root\nCMD id\n`,
    'the builder\'s logical lines, one a line: each image by its id, each earlier stage by its index, each USER a step may run as literal; USER root with no RUN after it kept')
  await t.rejects(judgeDockerfile('FROM other\nRUN id\n', scope), /a uid without a group/, 'a stored trigger\'s lone uid is judged at the RUN: its group is the image\'s to say')
  await t.rejects(judgeDockerfile('FROM other\nRUN id\n', { ...scope, checkImage: async () => ({ ...ids.other, onBuild: [] }) }), /refused /, 'the base image\'s user (root) is judged at the RUN')
  await t.rejects(judgeDockerfile('FROM other\nUSER 65534:65534\nONBUILD USER 0\nONBUILD RUN id\n', { ...scope, checkImage: async () => ({ ...ids.other, onBuild: [] }) }).then(() => { throw new Error('refused nothing') }), /refused nothing/, 'triggers being stored run in another build: judged there')
  await t.rejects(judgeDockerfile('FROM other\nUSER 65534\nRUN id\n', { ...scope, stepUser: undefined, checkImage: async () => ({ ...ids.other, onBuild: ['RUN id'] }) }).then(() => { throw new Error('refused nothing') }), /refused nothing/, 'without stepUser nothing is judged')
})
