/**
 * Per-tenant names without an engine (src/gateway/tenancy/names.ts, the tenancy.yaml key):
 * the qualified form is reversible and never lands in another tenant's prefix, only the
 * tenant's own prefix is ever taken off an answer, and `names` is checked when the
 * policy loads. The engine-side behaviour is test/tenant-names.test.ts.
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { matchesName, Names, TENANT_NAME } from '../src/gateway/tenancy/names'
import { compileTenancy } from '../src/policy/tenancy'

t.test('qualify and plain are inverse, per kind; predefined networks and modes stay', async (t) => {
  const a = new Names('team-a')
  t.equal(a.qualify('container', 'db'), 'team-a.db')
  t.equal(a.qualify('container', '/db'), '/team-a.db', 'a leading slash kept')
  t.equal(a.qualify('container', 'web/alias'), 'team-a.web/alias', 'a link name: the parent qualified, the alias not')
  t.equal(a.qualify('network', 'net'), 'team-a.net')
  for (const n of ['bridge', 'host', 'none', 'default']) t.equal(a.qualify('network', n), n, `${n} is never qualified`)
  t.equal(a.qualify('volume', 'data'), 'team-a.data')
  for (const [kind, name] of [['container', '/db'], ['container', 'web/alias'], ['network', 'net'], ['volume', 'data']] as const) {
    t.equal(a.plain(kind, a.qualify(kind, name)), name, `${kind} ${name} round-trips`)
  }
  t.equal(a.plain('container', '/team-b.db'), '/team-b.db', 'another tenant\'s prefix is never taken off')
  t.equal(a.plain('volume', 'team-a.'), 'team-a.', 'a bare prefix is not a name')
  t.equal(a.plain('container', '/eager_turing'), '/eager_turing', 'a generated name as it is')
  const off = new Names(null)
  t.equal(off.qualify('container', 'db'), 'db', 'names: engine qualifies nothing')
  t.equal(off.container({ Name: '/db' }).Name, '/db')
})

t.test('no tenant can forge another\'s prefix: the engine names of two tenants never meet', async (t) => {
  const tenants = ['a', 'a-b', 'b', 'a_b', 'ab']
  const names = ['db', 'b.db', 'a.db', 'b-db', '.x', 'a', 'ab.db']
  const seen = new Map<string, string>()
  for (const tenant of tenants) {
    t.ok(TENANT_NAME.test(tenant), `${tenant} may have private names`)
    for (const name of names) {
      const engine = new Names(tenant).qualify('volume', name)
      const before = seen.get(engine)
      t.equal(before, undefined, `${tenant}:${name} -> ${engine} is nobody else's`)
      seen.set(engine, `${tenant}:${name}`)
      t.equal(engine.slice(0, engine.indexOf('.')), tenant, 'and splits at its first dot into its tenant')
    }
  }
  for (const bad of ['a.b', '', '-a', 'a/b', 'a b']) t.notOk(TENANT_NAME.test(bad), `${JSON.stringify(bad)} may not`)
})

t.test('answers in plain names: copies only where something changes', async (t) => {
  const a = new Names('a')
  const inspect = {
    Name: '/a.web',
    HostConfig: { NetworkMode: 'a.net', Links: ['/a.db:/a.web/db'], Binds: ['a.data:/data:rw', '/host:/h', 'a.x:/y'], Mounts: [{ Type: 'volume', Source: 'a.v' }, { Type: 'bind', Source: '/a.v' }] },
    Mounts: [{ Type: 'volume', Name: 'a.data' }, { Type: 'bind', Source: '/srv' }],
    NetworkSettings: { Networks: { 'a.net': { IPAddress: '1' }, bridge: {} } },
    Config: { Labels: { 'com.docker.compose.project': 'a.shop' } },
  }
  const seen = a.container(inspect)
  t.same(seen, {
    Name: '/web',
    HostConfig: { NetworkMode: 'net', Links: ['/db:/web/db'], Binds: ['data:/data:rw', '/host:/h', 'x:/y'], Mounts: [{ Type: 'volume', Source: 'v' }, { Type: 'bind', Source: '/a.v' }] },
    Mounts: [{ Type: 'volume', Name: 'data' }, { Type: 'bind', Source: '/srv' }],
    NetworkSettings: { Networks: { net: { IPAddress: '1' }, bridge: {} } },
    Config: { Labels: { 'com.docker.compose.project': 'a.shop' } },
  }, 'every name field plain; labels and host paths untouched')
  t.equal(seen.Config, inspect.Config, 'an unchanged part is the same object')
  t.equal(inspect.Name, '/a.web', 'the engine\'s document is not modified')
  const plainAlready = { Names: ['/eager_turing'], HostConfig: { NetworkMode: 'bridge' } }
  t.equal(a.container(plainAlready), plainAlready, 'nothing to change: the same object (the engine\'s bytes go out)')
  t.same(a.network({ Name: 'a.net', Containers: { x: { Name: 'a.db' } } }), { Name: 'net', Containers: { x: { Name: 'db' } } })
  t.same(a.volume({ Name: 'a.data', Mountpoint: '/v/a.data/_data' }), { Name: 'data', Mountpoint: '/v/a.data/_data' })
  t.same(a.event({ Type: 'container', Action: 'rename', Actor: { ID: 'x', Attributes: { name: 'a.new', oldName: '/a.old', image: 'a.img' } } }),
    { Type: 'container', Action: 'rename', Actor: { ID: 'x', Attributes: { name: 'new', oldName: '/old', image: 'a.img' } } })
  t.same(a.event({ Type: 'volume', Action: 'create', Actor: { ID: 'a.data', Attributes: { driver: 'local' } } }).Actor.ID, 'data')
  t.same(a.event({ Type: 'network', Action: 'connect', Actor: { ID: 'n', Attributes: { name: 'a.net', container: 'c' } } }).Actor.Attributes, { name: 'net', container: 'c' })
  t.equal(a.text('Conflict. The container name "/a.db" is already in use by container "123"'), 'Conflict. The container name "/db" is already in use by container "123"')
  t.equal(a.text('network with name a.net already exists'), 'network with name net already exists')
  t.equal(a.text('x ba.net and b.a.net'), 'x ba.net and b.a.net', 'only a whole prefix, never inside another name')
  t.equal(a.stats({ name: '/a.db', id: 'x' }).name, '/db')
})

t.test('name filters: any expression matching any name; a broken one matches nothing', async (t) => {
  t.ok(matchesName(new Set(), ['x']), 'no filter')
  t.ok(matchesName(new Set(['db']), ['/mydb', 'mydb']))
  t.ok(matchesName(new Set(['^/db$']), ['/db', 'db']))
  t.notOk(matchesName(new Set(['^db$', '(']), ['/xdb', 'xdb']))
})

t.test('tenancy.yaml names: engine (default), private, anything else an error', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pcn-unit-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  const load = (text: string): { names: unknown, problems: string[] } => {
    const file = path.join(dir, 'tenancy.yaml')
    fs.writeFileSync(file, text)
    const problems: string[] = []
    return { names: compileTenancy(file, 'tenancy.yaml', problems).names, problems }
  }
  t.same(load('unscopedRoles: [admin]\n'), { names: 'engine', problems: [] })
  t.same(load('names: private\n'), { names: 'private', problems: [] })
  t.same(load('names: engine\n'), { names: 'engine', problems: [] })
  const bad = load('names: tenant\n')
  t.match(bad.problems.join('\n'), /names: expected private .* or engine/, 'an unknown value is an error')
  const shipped: string[] = []
  t.equal(compileTenancy(path.resolve(__dirname, '../../policies/tenancy.yaml'), 'tenancy.yaml', shipped).names, 'engine', 'shipped off')
  t.same(shipped, [])
})

// Per-tenant image names (names.ts qualifyImage / plainImage).
t.test('image names: Docker Hub names under portcullis.invalid/<tenant>/, reversible, registry names and ids untouched', async (t) => {
  const a = new Names('team-a')
  t.equal(a.qualifyImage('myapp'), 'portcullis.invalid/team-a/myapp')
  t.equal(a.qualifyImage('myapp:v2'), 'portcullis.invalid/team-a/myapp:v2')
  t.equal(a.qualifyImage('library/myapp'), 'portcullis.invalid/team-a/myapp', 'library/ is the plain name, as the engine reads it')
  t.equal(a.qualifyImage('docker.io/team/app:1'), 'portcullis.invalid/team-a/team/app:1')
  t.equal(a.qualifyImage('team-b/app'), 'portcullis.invalid/team-a/team-b/app', 'another tenant\'s name lands under a\'s prefix')
  t.equal(a.qualifyImage(`app@sha256:${'a'.repeat(64)}`), `portcullis.invalid/team-a/app@sha256:${'a'.repeat(64)}`)
  for (const ref of ['registry:5000/team-a/app', 'localhost/app', 'portcullis.invalid/team-b/app', `sha256:${'b'.repeat(64)}`, 'b'.repeat(64), 'Bad']) {
    t.equal(a.qualifyImage(ref), null, `${ref}: not a tenant's private name`)
  }
  for (const name of ['myapp:latest', 'team/app:1', 'app@sha256:' + 'c'.repeat(64)]) t.equal(a.plainImage(a.qualifyImage(name)!), name, `${name} round-trips`)
  t.equal(a.plainImage('portcullis.invalid/team-b/app:1'), 'portcullis.invalid/team-b/app:1', 'another tenant\'s prefix is never taken off')
  t.same(a.image({ RepoTags: ['portcullis.invalid/team-a/x:1', 'busybox:latest'] }).RepoTags, ['x:1', 'busybox:latest'])
  t.equal(a.text('No such image: portcullis.invalid/team-a/x:1'), 'No such image: x:1')
  t.throws(() => new Names('Team-A').qualifyImage('x'), /cannot hold private image names/, 'a tenant that is no repository component is refused')
  const off = new Names(null)
  t.equal(off.qualifyImage('myapp'), 'myapp', 'names: engine qualifies nothing')
  t.equal(off.plainImage('portcullis.invalid/team-a/x:1'), 'portcullis.invalid/team-a/x:1')
})
