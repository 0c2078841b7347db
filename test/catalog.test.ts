// The operation catalog against the Engine API spec files: every path and method in
// each spec resolves to the spec's operationId, versioned and unversioned, and every
// catalog row (except the ones marked unlisted) is in some spec.
import fs from 'node:fs'
import path from 'node:path'
import t from 'tap'
import { operations } from '../src/gateway/catalog/operations'
import { resolveTarget } from '../src/gateway/catalog/route'

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
