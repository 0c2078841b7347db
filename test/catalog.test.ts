// The operation catalog against the Engine API spec files: every path and method in
// each spec resolves to the spec's operationId, versioned and unversioned, and every
// catalog row (except the ones marked unlisted) is in some spec.
import fs from 'node:fs'
import path from 'node:path'
import t from 'tap'
import { operations } from '../src/api/catalog/operations'
import { resolveTarget } from '../src/api/catalog/route'

// The spec files live in the repository (spec/README.md): a clone on its own must pass.
const specDir = path.resolve(__dirname, '../../spec')
const window = { minVersion: '1.24', maxVersion: '1.56' }
const METHODS = ['get', 'head', 'post', 'put', 'delete', 'patch', 'options']

interface SpecOp { method: string, path: string, id: string }

/**
 * Paths, methods and operation ids of a spec file, read line by line: the v1.32 file
 * has multi-line quoted scalars that YAML 1.2 parsers reject, and the `paths:`
 * section's layout (path at indent 2, method at 4) is regular in all of them.
 */
function specOperations (file: string): SpecOp[] {
  const out: SpecOp[] = []
  let inPaths = false
  let current = ''
  let method = ''
  for (const line of fs.readFileSync(path.join(specDir, file), 'utf8').split('\n')) {
    if (/^\S/.test(line)) { inPaths = line.startsWith('paths:'); continue }
    if (!inPaths) continue
    const p = /^ {2}(\/\S*):\s*$/.exec(line)
    if (p) { current = p[1]; method = ''; continue }
    const m = /^ {4}(\w+):\s*$/.exec(line)
    if (m) { method = METHODS.includes(m[1]) ? m[1].toUpperCase() : ''; continue }
    const id = /^ {6}operationId:\s*"?(\w+)"?\s*$/.exec(line)
    if (id && method) out.push({ method, path: current, id: id[1] })
  }
  return out
}

/** A concrete request path for a spec template; image-like names get slashes, tags and digests. */
function concrete (template: string): string {
  return template
    .replace('{name}', template.startsWith('/images/') || template.startsWith('/distribution/') || template.startsWith('/plugins/')
      ? 'registry.example:5000/team/app:v1'
      : 'my-volume.1')
    .replace('{id}', '4f2a9c')
}

const specFiles = fs.readdirSync(specDir).filter((f) => /^engine-api-v[\d.]+\.yaml$/.test(f))
t.ok(specFiles.length >= 3, 'spec files found')
const seen = new Set<string>()

for (const file of specFiles) {
  t.test(file, async (t) => {
    const ops = specOperations(file)
    t.ok(ops.length > 100, `${ops.length} operations`)
    for (const op of ops) {
      seen.add(`${op.method} ${op.path}`)
      const p = concrete(op.path)
      for (const url of [p, `/v1.56${p}`, `${p}?all=1`]) {
        const target = resolveTarget(op.method, url, window)
        t.equal(target.operation.id, op.id, `${op.method} ${url}`)
      }
      const row = operations.find((o) => o.id === op.id)
      t.ok(row, `${op.id} in the catalog`)
      t.equal(`${row?.method} ${row?.path.replace('*', '')}`, `${op.method} ${op.path}`, `${op.id} template`)
    }
  })
}

t.test('every catalog row is in a spec file unless marked unlisted', async (t) => {
  for (const op of operations) {
    const key = `${op.method} ${op.path.replace('*', '')}`
    if (op.unlisted) t.notOk(seen.has(key), `${op.id} is really unlisted`)
    else t.ok(seen.has(key), `${op.id} (${key}) is in a spec`)
  }
  t.equal(new Set(operations.map((o) => o.id)).size, operations.length, 'operation ids are unique')
})

t.test('resource parameters are decoded and multi-segment where the engine allows it', async (t) => {
  const img = resolveTarget('GET', '/v1.41/images/localhost:5000/team/app:1/json', window)
  t.equal(img.operation.id, 'ImageInspect')
  t.equal(img.resource, 'localhost:5000/team/app:1')
  t.equal(img.apiVersion, '1.41')
  // docker-py percent-encodes '@' in digests
  const dig = resolveTarget('DELETE', '/images/busybox%40sha256:abc', window)
  t.equal(dig.operation.id, 'ImageDelete')
  t.equal(dig.resource, 'busybox@sha256:abc')
  t.equal(dig.rawUrl, '/images/busybox%40sha256:abc', 'forwarded exactly as received')
  // literal routes win: /images/json is the list, not an image called "json"
  t.equal(resolveTarget('GET', '/images/json', window).operation.id, 'ImageList')
  t.equal(resolveTarget('GET', '/images/json/json', window).resource, 'json')
  t.equal(resolveTarget('GET', '/containers/web/json', window).resource, 'web')
  t.equal(resolveTarget('POST', '/grpc', window).operation.id, 'Grpc')
})

t.test('refusals', async (t) => {
  const cases: Array<[string, string, string]> = [
    ['GET', '/containers//json', 'PATH_AMBIGUOUS'],
    ['GET', '/containers/json/', 'PATH_AMBIGUOUS'],
    ['GET', '/containers/./json', 'PATH_AMBIGUOUS'],
    ['GET', '/containers/x/../json', 'PATH_AMBIGUOUS'],
    ['GET', '/containers/%2e%2e/json', 'PATH_AMBIGUOUS'],
    ['GET', '/containers/a%2Fb/json', 'PATH_AMBIGUOUS'],
    ['GET', '/containers/a%5cb/json', 'PATH_AMBIGUOUS'],
    ['GET', '/containers/a%00/json', 'PATH_AMBIGUOUS'],
    ['GET', '/containers/a%zz/json', 'PATH_AMBIGUOUS'],
    ['GET', '/containers/a\\b/json', 'PATH_AMBIGUOUS'],
    ['GET', '/Containers/json', 'PATH_AMBIGUOUS'],
    ['GET', '/containers/JSON', 'PATH_AMBIGUOUS'],
    ['GET', '/V1.41/containers/json', 'PATH_AMBIGUOUS'],
    ['GET', '/v1.041/containers/json', 'PATH_AMBIGUOUS'],
    ['GET', '/v1/containers/json', 'PATH_AMBIGUOUS'],
    ['GET', '/v1.23/containers/json', 'API_VERSION_UNSUPPORTED'],
    ['GET', '/v1.57/containers/json', 'API_VERSION_UNSUPPORTED'],
    ['GET', '/v1.41/', 'PATH_AMBIGUOUS'],
    ['GET', 'http://engine/containers/json', 'PATH_INVALID'],
    ['GET', '*', 'PATH_INVALID'],
    ['POST', '/containers/x/copy', 'OPERATION_UNKNOWN'],
    ['GET', '/containers/x/start', 'OPERATION_UNKNOWN'],
    ['PATCH', '/containers/json', 'OPERATION_UNKNOWN'],
    ['GET', '/debug/pprof/', 'PATH_AMBIGUOUS'],
    ['GET', '/debug/pprof', 'OPERATION_UNKNOWN'],
    ['PUT', '/v1.41/volumes/v', 'OPERATION_TOO_NEW'],
    ['POST', '/build?networkmode=host;x=1', 'PATH_AMBIGUOUS'],
    ['POST', '/build?networkmode=%zzhost', 'PATH_AMBIGUOUS'],
  ]
  for (const [method, url, code] of cases) {
    t.throws(() => resolveTarget(method, url, window), { code }, `${method} ${url} -> ${code}`)
  }
  t.throws(() => resolveTarget('GET', '/v1.41/containers/json', { minVersion: '1.24', maxVersion: '1.40' }), { code: 'API_VERSION_UNSUPPORTED', status: 400 })
})

t.test('a version accepted once is judged again under another window (versions are parsed once per window)', async (t) => {
  const wide = { minVersion: '1.24', maxVersion: '1.56' }
  t.equal(resolveTarget('GET', '/v1.41/containers/json', wide).apiVersion, '1.41', 'accepted under the wide window')
  t.equal(resolveTarget('GET', '/v1.41/containers/json', wide).apiVersion, '1.41', 'and again, from what was kept')
  t.throws(() => resolveTarget('GET', '/v1.41/containers/json', { minVersion: '1.24', maxVersion: '1.40' }), { code: 'API_VERSION_UNSUPPORTED' }, 'another window object refuses it')
  t.throws(() => resolveTarget('GET', '/v1.41/containers/json', { minVersion: '1.42', maxVersion: '1.56' }), { code: 'API_VERSION_UNSUPPORTED' }, 'too old for a window that starts later')
  // The same window object with other bounds (a window is read-only, but nothing is assumed).
  const changing = { minVersion: '1.24', maxVersion: '1.56' }
  t.equal(resolveTarget('GET', '/v1.41/version', changing).apiVersion, '1.41')
  changing.maxVersion = '1.40'
  t.throws(() => resolveTarget('GET', '/v1.41/version', changing), { code: 'API_VERSION_UNSUPPORTED' }, 'the same window object with a lower maximum refuses it')
  // An operation's own minimum still applies to a kept version (VolumeUpdate: 1.42).
  t.throws(() => resolveTarget('PUT', '/v1.41/volumes/v', wide), { code: 'OPERATION_TOO_NEW' })
  t.equal(resolveTarget('PUT', '/v1.42/volumes/v', wide).operation.id, 'VolumeUpdate')
  t.throws(() => resolveTarget('GET', '/V1.41/version', wide), { code: 'PATH_AMBIGUOUS' }, 'a version segment in another letter case is never taken from what was kept')
  // Many accepted versions (a window across majors): each is still checked and routed.
  const majors = { minVersion: '1.24', maxVersion: '2.0' }
  for (let minor = 24; minor < 200; minor++) t.equal(resolveTarget('GET', `/v1.${minor}/version`, majors).apiVersion, `1.${minor}`)
  t.throws(() => resolveTarget('GET', '/v2.1/version', majors), { code: 'API_VERSION_UNSUPPORTED' })
})

t.test('names span segments wherever the engine\'s router takes {name:.*}', async (t) => {
  // `docker rm --link /parent/alias`: the link name is the container reference.
  const link = resolveTarget('DELETE', '/v1.41/containers/parent/alias?link=1', window)
  t.equal(link.operation.id, 'ContainerDelete')
  t.equal(link.resource, 'parent/alias')
  t.equal(link.query.get('link'), '1')
  t.equal(link.rawUrl, '/v1.41/containers/parent/alias?link=1', 'forwarded exactly as received')
  t.equal(resolveTarget('DELETE', '/containers/a/b/c', window).resource, 'a/b/c', 'greedy, as `{name:.*}`')
  // Every container, exec, volume and network route with a parameter takes a link name.
  const sample: Record<string, string> = { container: 'parent/alias', exec: 'x/y', volume: 'v/w', network: 'n/m' }
  for (const op of operations) {
    const prefix = /^\/(containers|exec|volumes|networks)\/\{(\w+)\*\}/.exec(op.path)
    if (!prefix || op.path.includes('/checkpoints/')) continue
    const value = sample[{ containers: 'container', exec: 'exec', volumes: 'volume', networks: 'network' }[prefix[1]]!]
    const url = op.path.replace(/\{\w+\*\}/, value)
    const target = resolveTarget(op.method, `/v1.56${url}`, window)
    t.equal(`${target.operation.id} ${target.resource}`, `${op.id} ${value}`, `${op.method} ${url}`)
  }
  t.equal(resolveTarget('GET', '/containers/parent/alias/attach/ws', window).resource, 'parent/alias')
  t.equal(resolveTarget('GET', '/containers/a/logs/json', window).operation.id, 'ContainerInspect', 'the last literal decides, as the engine\'s regexps')
  t.equal(resolveTarget('POST', '/containers/a/exec/start', window).operation.id, 'ContainerStart')
  t.equal(resolveTarget('POST', '/networks/a/b/connect', window).resource, 'a/b')
  // Literal routes still win over a parameter, as the engine registers them first.
  for (const [method, url, id] of [
    ['GET', '/containers/json', 'ContainerList'], ['POST', '/containers/create', 'ContainerCreate'], ['POST', '/containers/prune', 'ContainerPrune'],
    ['POST', '/networks/create', 'NetworkCreate'], ['POST', '/networks/prune', 'NetworkPrune'], ['POST', '/volumes/create', 'VolumeCreate'],
    ['POST', '/volumes/prune', 'VolumePrune'], ['GET', '/images/get', 'ImageGetAll'], ['POST', '/build/cancel', 'BuildCancel'],
    // No GET route is literal here: the engine inspects a network or volume called "create".
    ['GET', '/networks/create', 'NetworkInspect'], ['GET', '/volumes/prune', 'VolumeInspect'],
  ] as const) t.equal(resolveTarget(method, url, window).operation.id, id, `${method} ${url}`)
  // Checkpoints: the engine's checkpoint router comes before the container router, and
  // its DELETE takes single segments.
  const cp = resolveTarget('DELETE', '/v1.41/containers/web/checkpoints/cp1', window)
  t.same([cp.operation.id, cp.params], ['CheckpointDelete', { id: 'web', checkpoint: 'cp1' }])
  t.equal(resolveTarget('DELETE', '/containers/a/b/checkpoints/cp1', window).operation.id, 'ContainerDelete', '`{name}` is one segment: a longer path is a container delete there too')
  t.equal(resolveTarget('GET', '/containers/a/b/checkpoints', window).resource, 'a/b')
  t.equal(resolveTarget('POST', '/containers/web/checkpoints', window).operation.id, 'CheckpointCreate')
  t.throws(() => resolveTarget('DELETE', '/v1.24/containers/web/checkpoints/cp1', window), { code: 'OPERATION_TOO_NEW' })
  // Swarm objects and nodes are `{id}`: one segment.
  for (const url of ['/services/a/b', '/nodes/a/b', '/tasks/a/b', '/secrets/a/b', '/configs/a/b']) {
    t.throws(() => resolveTarget('GET', url, window), { code: 'OPERATION_UNKNOWN' }, `GET ${url}`)
  }
  t.throws(() => resolveTarget('DELETE', '/services/a/b', window), { code: 'OPERATION_UNKNOWN' })
  // The refusals still hold inside a multi-segment name.
  for (const url of ['/containers/parent//alias', '/containers/parent/alias/', '/containers/parent/../alias', '/containers/parent/%2e/alias',
    '/containers/parent%2Falias', '/containers/parent%5Calias', '/containers/parent\\alias', '/containers/par%zzent/alias', '/Containers/parent/alias']) {
    t.throws(() => resolveTarget('DELETE', `${url}?link=1`, window), { code: 'PATH_AMBIGUOUS' }, `DELETE ${url}?link=1`)
  }
})

t.test('every API version of the window is routed', async (t) => {
  for (let minor = 24; minor <= 56; minor++) {
    const target = resolveTarget('GET', `/v1.${minor}/networks/n1`, window)
    t.same([target.operation.id, target.apiVersion], ['NetworkInspect', `1.${minor}`], `/v1.${minor}`)
  }
  t.equal(resolveTarget('GET', '/v1.55/images/a/b:1/attestations', window).resource, 'a/b:1')
  t.throws(() => resolveTarget('GET', '/v1.54/images/a/attestations', window), { code: 'OPERATION_TOO_NEW' })
})
