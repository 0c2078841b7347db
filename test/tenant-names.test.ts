/**
 * Per-tenant names (tenancy.yaml `names: private`, src/gateway/tenancy/names.ts), on the
 * real engine with the docker CLI 28 and docker-compose 1.29 as clients: two tenants use
 * the same container, network and volume names, and the same compose project name, at
 * once; each sees only its own objects under its plain names (lists, inspects, filters,
 * links, network modes, mounts, events, errors, df); on the engine they exist as
 * `<tenant>.<name>`; neither reaches the other's by any spelling (plain, qualified, full
 * id, id prefix); the admin sees the engine's names.
 *
 * On the old code (no `names` key) the gateway refuses the policy directory, and the
 * second tenant's `--name db` is a 409.
 */
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import http from 'node:http'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { CLI28, engine, policiesWith, run, type RunResult, startTestGateway, type TestGateway, tokensFor } from './helpers/gateway'

const COMPOSE = '/usr/bin/docker-compose'
const TENANT_LABEL = 'io.portcullis.tenant'
const IMAGE = engine().image

const SECRET = randomBytes(32).toString('hex')
const RUN = randomBytes(3).toString('hex')
const TA = `names-a-${RUN}`
const TB = `names-b-${RUN}`
/** Names both tenants use; unique per run only through the tenants' prefixes. */
const PROJECT = 'shop'

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pcn-'))
t.teardown(() => fs.rmSync(tmp, { recursive: true, force: true }))

type Who = 'a' | 'b' | 'admin' | 'dotted'
const CLAIMS: Record<Who, object> = {
  a: { sub: 'ann', tenant: TA, roles: ['tenant'] },
  b: { sub: 'bo', tenant: TB, roles: ['tenant'] },
  admin: { sub: 'root-op', roles: ['admin'] },
  // A tenant whose name has a dot: `<tenant>.<name>` would not split back into one tenant.
  dotted: { sub: 'dot', tenant: `names.c-${RUN}`, roles: ['tenant'] },
}
const { token: TOKEN, config: CONFIG } = tokensFor(CLAIMS, SECRET, tmp)
const TENANT: Record<'a' | 'b', string> = { a: TA, b: TB }

let gw: TestGateway
const as = async (who: Who, args: readonly string[]): Promise<RunResult> =>
  await run(CLI28, args, { host: gw.dockerHost, env: { DOCKER_CONFIG: CONFIG[who] }, timeoutMs: 180_000 })
const direct = async (args: readonly string[]): Promise<RunResult> =>
  await run(CLI28, args, { host: engine().dockerHost, timeoutMs: 180_000 })
const lines = (r: RunResult): string[] => r.stdout.toString().split('\n').filter((l) => l !== '')
const out = (r: RunResult): Record<string, unknown> => r.code === 0 ? {} : { stderr: r.stderr.trim() }
const inspectDirect = async (kind: string, ref: string): Promise<any> => {
  const r = await direct([kind, 'inspect', ref])
  return r.code === 0 ? JSON.parse(r.stdout.toString())[0] : null
}
const inspectAs = async (who: Who, kind: string, ref: string): Promise<any> => {
  const r = await as(who, [kind, 'inspect', ref])
  return r.code === 0 ? JSON.parse(r.stdout.toString())[0] : null
}

/** The first chunk of a streamed GET through the gateway as `who`, the stream then closed. */
async function api (who: 'a' | 'b', target: string): Promise<string> {
  return await new Promise((resolve, reject) => {
    const req = http.request({ socketPath: gw.socket, path: target, headers: { authorization: `Bearer ${TOKEN[who]}` } }, (res) => {
      res.once('data', (c: Buffer) => { resolve(c.toString()); req.destroy() })
      res.once('end', () => resolve(''))
    })
    req.on('error', reject)
    req.end()
  })
}

const composeDir = path.join(tmp, 'compose')
fs.mkdirSync(composeDir)
fs.writeFileSync(path.join(composeDir, 'docker-compose.yml'), `version: "2.4"
services:
  web:
    image: ${IMAGE}
    command: sh -c 'echo web up; sleep 600'
    stop_grace_period: 1s
    volumes: [data:/data]
    depends_on: [db]
  db:
    image: ${IMAGE}
    command: sh -c 'echo db up; sleep 600'
    stop_grace_period: 1s
    volumes: [data:/srv]
volumes:
  data: {}
`)
async function compose (who: 'a' | 'b', ...args: string[]): Promise<RunResult> {
  return await run(COMPOSE, ['--ansi', 'never', '-p', PROJECT, ...args], { host: gw.dockerHost, cwd: composeDir, env: { DOCKER_CONFIG: CONFIG[who] }, timeoutMs: 300_000 })
}

const started = Math.floor(Date.now() / 1000)

t.before(async () => {
  // Legacy links and the default bridge's /etc/hosts are part of what is compared: tenants stay on the engine's bridge.
  const policies = policiesWith((text) => text.replace(/^names: engine$/m, 'names: private').replace(/^ {2}tenantDefault: true$/m, '  tenantDefault: false'))
  gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, undefined, policies)
})

t.teardown(async () => {
  for (const who of ['a', 'b'] as const) await compose(who, 'down', '-v', '-t', '1').catch(() => undefined)
  for (const tenant of [TA, TB]) {
    const label = `label=${TENANT_LABEL}=${tenant}`
    const cs = lines(await direct(['ps', '-aq', '--filter', label]))
    if (cs.length) await direct(['rm', '-f', '-v', ...cs])
    const vs = lines(await direct(['volume', 'ls', '-q', '--filter', label]))
    if (vs.length) await direct(['volume', 'rm', '-f', ...vs])
    const ns = lines(await direct(['network', 'ls', '-q', '--filter', label]))
    if (ns.length) await direct(['network', 'rm', ...ns])
  }
  await gw?.close()
})

t.test('the same container, network and volume names in two tenants at once', async (t) => {
  for (const who of ['a', 'b'] as const) {
    const net = await as(who, ['network', 'create', 'net'])
    t.equal(net.code, 0, `${who}: network create net`, out(net))
    const vol = await as(who, ['volume', 'create', 'data'])
    t.equal(vol.code, 0, `${who}: volume create data`, out(vol))
    t.equal(vol.stdout.toString().trim(), 'data', `${who}: volume create answers with the plain name`)
    const db = await as(who, ['run', '-d', '--name', 'db', '--network', 'net', '-v', 'data:/data', IMAGE, 'sh', '-c', `echo hello from ${who} > /data/who; echo log of ${who}; sleep 600`])
    t.equal(db.code, 0, `${who}: run --name db --network net -v data:/data`, out(db))
    const cache = await as(who, ['run', '-d', '--name', 'cache', IMAGE, 'sleep', '600'])
    t.equal(cache.code, 0, `${who}: run --name cache`, out(cache))
    const web = await as(who, ['run', '-d', '--name', 'web', '--link', 'cache:c', '-v', 'fresh:/fresh', IMAGE, 'sleep', '600'])
    t.equal(web.code, 0, `${who}: run --name web --link cache:c -v fresh:/fresh (a volume made implicitly)`, out(web))
  }

  // On the engine: every object under its tenant's qualified name, owned by that tenant.
  for (const who of ['a', 'b'] as const) {
    const tenant = TENANT[who]
    for (const [kind, name] of [['container', 'db'], ['container', 'web'], ['container', 'cache'], ['network', 'net'], ['volume', 'data'], ['volume', 'fresh']]) {
      const o = await inspectDirect(kind, `${tenant}.${name}`)
      t.equal(o?.Config?.Labels?.[TENANT_LABEL] ?? o?.Labels?.[TENANT_LABEL], tenant, `engine: ${kind} ${tenant}.${name} is ${who}'s`)
    }
    // "db" is also an id prefix (hex): the engine may answer with a container whose id starts so.
    t.not((await inspectDirect('container', 'db'))?.Name, '/db', 'engine: no container named plainly db')
  }

  for (const who of ['a', 'b'] as const) {
    const tenant = TENANT[who]
    const ps = lines(await as(who, ['ps', '-a', '--no-trunc', '--format', '{{.Names}}'])).sort()
    t.same(ps, ['cache,web/c', 'db', 'web'], `${who}: ps shows its own plain names, link names too`)
    t.same(lines(await as(who, ['ps', '-a', '--filter', 'name=db', '--format', '{{.Names}}'])), ['db'], `${who}: ps --filter name=db`)
    t.same(lines(await as(who, ['ps', '-a', '--filter', 'name=^/web$', '--format', '{{.Names}}'])), ['web'], `${who}: ps --filter name=^/web$ (an anchored expression on the plain name)`)
    t.same(lines(await as(who, ['ps', '-a', '--filter', `name=${tenant}`, '--format', '{{.Names}}'])), [], `${who}: the qualified prefix matches nothing in a name filter`)
    t.same(lines(await as(who, ['ps', '-a', '--filter', 'network=net', '--format', '{{.Names}}'])), ['db'], `${who}: ps --filter network=net`)
    t.same(lines(await as(who, ['ps', '-a', '--filter', 'volume=data', '--format', '{{.Names}}'])), ['db'], `${who}: ps --filter volume=data`)
    t.same(lines(await as(who, ['ps', '-a', '--filter', 'since=db', '--format', '{{.Names}}'])).sort(), ['cache', 'web'], `${who}: ps --filter since=db`)

    const db = await inspectAs(who, 'container', 'db')
    t.equal(db?.Name, '/db', `${who}: inspect db .Name`)
    t.equal(db?.HostConfig?.NetworkMode, 'net', `${who}: .HostConfig.NetworkMode`)
    t.same(Object.keys(db?.NetworkSettings?.Networks ?? {}), ['net'], `${who}: .NetworkSettings.Networks keys`)
    t.same(db?.HostConfig?.Binds, ['data:/data'], `${who}: .HostConfig.Binds`)
    t.same((db?.Mounts ?? []).map((m: any) => m.Name), ['data'], `${who}: .Mounts[].Name`)
    const web = await inspectAs(who, 'container', 'web')
    t.same(web?.HostConfig?.Links, ['/cache:/web/c'], `${who}: .HostConfig.Links`)
    const ping = await as(who, ['exec', 'web', 'grep', '-c', 'cache', '/etc/hosts'])
    t.equal(ping.stdout.toString().trim(), '1', `${who}: the link's alias and plain name are in web's /etc/hosts`)
    // (Host paths such as Mounts[].Source keep the engine's directory name.)
    t.notMatch(JSON.stringify([db, web]), new RegExp(`"/?${tenant}\\.`), `${who}: no qualified name as a value in the inspects`)

    // The network's DNS answers the plain name (an alias of the gateway's on the tenant's own network).
    const ip = db?.NetworkSettings?.Networks?.net?.IPAddress
    const lookup = await as(who, ['run', '--rm', '--network', 'net', IMAGE, 'nslookup', 'db'])
    t.match(lookup.stdout.toString(), new RegExp(`Address:\\s+${String(ip).replace(/\./g, '\\.')}\\b`), `${who}: on net, db resolves to its own db (${ip})`, out(lookup))
    const connect = await as(who, ['network', 'connect', 'net', 'cache'])
    t.equal(connect.code, 0, `${who}: network connect net cache`, out(connect))
    const viaConnect = await as(who, ['run', '--rm', '--network', 'net', IMAGE, 'nslookup', 'cache'])
    t.match(viaConnect.stdout.toString(), /Address:\s+\d+\.\d+\.\d+\.\d+/, `${who}: and cache, connected later, resolves too`, out(viaConnect))

    const stats = await as(who, ['stats', '--no-stream', '--format', '{{.Name}}', 'db'])
    t.equal(stats.stdout.toString().trim(), 'db', `${who}: stats --no-stream db names it db`, out(stats))
    const streamed = await api(who, '/containers/db/stats?stream=true')
    t.match(streamed, /"name":"\/db"/, `${who}: a streamed stats document names it /db`)

    const logs = await as(who, ['logs', 'db'])
    t.equal(logs.stdout.toString().trim(), `log of ${who}`, `${who}: logs db are its own`)
    const cat = await as(who, ['exec', 'db', 'cat', '/data/who'])
    t.equal(cat.stdout.toString().trim(), `hello from ${who}`, `${who}: exec db reads its own volume data`)

    const nets = lines(await as(who, ['network', 'ls', '--format', '{{.Name}}'])).sort()
    t.same(nets, ['bridge', 'host', 'net', 'none'], `${who}: network ls`)
    t.same(lines(await as(who, ['network', 'ls', '--filter', 'name=net', '--format', '{{.Name}}'])), ['net'], `${who}: network ls --filter name=net`)
    const net = await inspectAs(who, 'network', 'net')
    t.equal(net?.Name, 'net', `${who}: network inspect net .Name`)
    t.same(Object.values(net?.Containers ?? {}).map((c: any) => c.Name).sort(), ['cache', 'db'], `${who}: network inspect .Containers[].Name`)
    const vols = lines(await as(who, ['volume', 'ls', '--format', '{{.Name}}'])).sort()
    t.same(vols, ['data', 'fresh'], `${who}: volume ls`)
    t.same(lines(await as(who, ['volume', 'ls', '--filter', 'name=dat', '--format', '{{.Name}}'])), ['data'], `${who}: volume ls --filter name=dat`)
    t.equal((await inspectAs(who, 'volume', 'data'))?.Name, 'data', `${who}: volume inspect data .Name`)

    // The engine's own errors name the tenant's objects plainly.
    const again = await as(who, ['run', '-d', '--name', 'db', IMAGE, 'true'])
    t.not(again.code, 0, `${who}: a second --name db fails`)
    t.match(again.stderr, /The container name "\/db" is already in use/, `${who}: the engine's conflict, in plain names`)
    t.notMatch(again.stderr, new RegExp(`${tenant}\\.`), `${who}: without the qualified name`)
    const netAgain = await as(who, ['network', 'create', 'net'])
    t.match(netAgain.stderr, /network with name net already exists/, `${who}: the engine's network conflict, in plain names`)

    const df = await as(who, ['system', 'df', '-v', '--format', '{{json .}}'])
    t.equal(df.code, 0, `${who}: system df -v`, out(df))
    // (A volume's Mountpoint is a host path: the engine's directory keeps the engine's name.)
    t.notMatch(df.stdout.toString(), new RegExp(`"(Name|Names|Mounts|Networks)":"[^"]*${tenant}\\.`), `${who}: system df -v shows no qualified name`)
    t.match(df.stdout.toString(), /"Name":"data"|"Names":"db"|data/, `${who}: system df -v shows its plain names`)
  }

  // Neither reaches the other's objects, by any spelling.
  const bDb = await inspectDirect('container', `${TB}.db`)
  const bNet = await inspectDirect('network', `${TB}.net`)
  const aDb = await inspectDirect('container', `${TA}.db`)
  const aNet = await inspectDirect('network', `${TA}.net`)
  for (const ref of ['db-of-b', `${TB}.db`, `/${TB}.db`, bDb.Id, bDb.Id.slice(0, 12)]) {
    const name = ref === 'db-of-b' ? `${TB}.db` : ref
    const r = await as('a', ['logs', name])
    t.match(r.stderr, /No such container/, `a: logs ${name === bDb.Id ? 'b\'s full id' : name} is no such container`)
  }
  for (const ref of [`${TB}.net`, bNet.Id, bNet.Id.slice(0, 12)]) {
    const r = await as('a', ['network', 'inspect', ref])
    t.match(r.stderr, /not found|No such network/, `a: network inspect ${ref === bNet.Id ? 'b\'s full id' : ref} is not found`)
  }
  const r = await as('a', ['volume', 'inspect', `${TB}.data`])
  t.match(r.stderr, /no such volume/, `a: volume inspect ${TB}.data is no such volume`)
  const bind = await as('a', ['run', '--rm', '-v', `${TB}.data:/x`, IMAGE, 'cat', '/x/who'])
  t.not(bind.stdout.toString().trim(), 'hello from b', 'a: -v <b\'s qualified volume> does not mount b\'s volume')
  const forged = await as('a', ['run', '-d', '--name', `${TB}.evil`, IMAGE, 'sleep', '60'])
  t.equal(forged.code, 0, 'a: a name spelled with b\'s prefix is a\'s own name', out(forged))
  t.equal((await inspectDirect('container', `${TA}.${TB}.evil`))?.Config?.Labels?.[TENANT_LABEL], TA, 'stored under a\'s prefix')
  t.equal(await inspectDirect('container', `${TB}.evil`), null, 'never under b\'s')
  t.same(lines(await as('b', ['ps', '-a', '--format', '{{.Names}}'])).sort(), ['cache', 'db', 'web'], 'b does not see it')
  const since = await as('a', ['ps', '-a', '--filter', `since=${bDb.Id}`])
  t.match(since.stderr, /No such container/, 'a: ps --filter since=<b\'s id> is no such container')

  // Names the engine generated (no --name, no volume name) are the tenant's own plain names, and nobody else's.
  const anon = await as('a', ['run', '-d', IMAGE, 'sleep', '600'])
  const anonId = anon.stdout.toString().trim()
  const generated = String((await inspectDirect('container', anonId))?.Name).slice(1)
  t.notMatch(generated, /\./, `the engine generated a name without a prefix (${generated})`)
  t.equal((await inspectAs('a', 'container', generated))?.Id, anonId, 'a reaches its container by that name')
  t.match((await as('b', ['logs', generated])).stderr, /No such container/, 'b does not')
  const anonVol = await as('a', ['volume', 'create'])
  const hex = anonVol.stdout.toString().trim()
  t.match(hex, /^[0-9a-f]{64}$/, 'an unnamed volume gets the engine\'s 64 hex digits')
  t.equal((await inspectAs('a', 'volume', hex))?.Name, hex, 'a reaches it by them')
  t.match((await as('b', ['volume', 'inspect', hex])).stderr, /no such volume/, 'b does not')
  t.equal((await as('a', ['rm', '-f', generated])).code, 0, 'a removes its container by the generated name')

  const rmB = await as('a', ['rm', '-f', `${TB}.db`])
  t.match(rmB.stderr, /No such container/, 'a: rm -f <b\'s qualified name> is no such container')
  t.ok(await inspectDirect('container', `${TB}.db`), 'b\'s db is still there')

  // Renames and removal by the plain name act on the tenant's own object.
  const rename = await as('a', ['rename', 'web', 'front'])
  t.equal(rename.code, 0, 'a: rename web front', out(rename))
  t.ok(await inspectDirect('container', `${TA}.front`), 'engine: renamed to a\'s qualified front')
  t.ok(await inspectDirect('container', `${TB}.web`), 'b\'s web untouched')

  // The admin sees the engine's names.
  const admin = lines(await as('admin', ['ps', '-a', '--filter', `label=${TENANT_LABEL}=${TA}`, '--format', '{{.Names}}'])).sort()
  t.same(admin, [`${TA}.${TB}.evil`, `${TA}.cache`, `${TA}.db`, `${TA}.front`].sort(), 'the admin sees the engine\'s (qualified) names')

  // Events: the tenant's own, in plain names.
  const until = Math.floor(Date.now() / 1000) + 1
  for (const who of ['a', 'b'] as const) {
    const ev = await as(who, ['events', '--since', String(started), '--until', String(until), '--format', '{{.Type}} {{.Action}} {{.Actor.ID}} {{index .Actor.Attributes "name"}}'])
    const text = ev.stdout.toString()
    t.notMatch(text, new RegExp(`${TENANT[who]}\\.`), `${who}: events name nothing by its qualified name`)
    t.match(text, /container create [0-9a-f]{64} db\n/, `${who}: the create of db, named db`)
    t.match(text, /network create [0-9a-f]{64} net\n/, `${who}: the create of net, named net`)
    t.match(text, /volume create data /, `${who}: the create of data (a volume's id is its name)`)
    // (a's own events name its containers `b.evil`... : names it gave.)
    const other = who === 'a' ? [bDb.Id, bNet.Id] : [aDb.Id, aNet.Id]
    t.notOk(other.some((id) => text.includes(id)), `${who}: nothing of the other tenant's db and net`)
    const filtered = await as(who, ['events', '--since', String(started), '--until', String(until), '--filter', 'container=db', '--format', '{{.Action}} {{index .Actor.Attributes "name"}}'])
    t.match(filtered.stdout.toString(), /^create db$/m, `${who}: events --filter container=db finds db`)
  }

  for (const who of ['a', 'b'] as const) {
    const rm = await as(who, ['rm', '-f', 'db'])
    t.equal(rm.code, 0, `${who}: rm -f db`, out(rm))
    const busy = await as(who, ['volume', 'rm', 'fresh'])
    t.match(busy.stderr, /remove fresh: volume is in use/, `${who}: the engine's "in use", in plain names`)
    t.notMatch(busy.stderr, new RegExp(`${TENANT[who]}\\.`), `${who}: without the qualified name`)
    const unused = await as(who, ['network', 'create', 'spare'])
    t.equal(unused.code, 0, `${who}: network create spare`, out(unused))
    const prune = await as(who, ['network', 'prune', '-f'])
    t.same(lines(prune).filter((l) => !/^Deleted Networks:$/.test(l)).sort(), ['spare'], `${who}: network prune names what it deleted plainly (net still has cache)`)
    const vprune = await as(who, ['volume', 'prune', '-f'])
    t.match(vprune.stdout.toString(), /^data$/m, `${who}: volume prune names what it deleted plainly`)
    t.notMatch(vprune.stdout.toString() + prune.stdout.toString(), new RegExp(`${TENANT[who]}\\.`), `${who}: no qualified name in either`)
  }
  t.equal(await inspectDirect('container', `${TA}.db`), null, 'a\'s db is gone')
  t.equal(await inspectDirect('container', `${TB}.db`), null, 'b\'s db is gone')
})

t.test('docker-compose 1.29: one project name, two tenants, side by side', async (t) => {
  for (const who of ['a', 'b'] as const) {
    const up = await compose(who, 'up', '-d')
    t.equal(up.code, 0, `${who}: up -d`, out(up))
  }
  for (const who of ['a', 'b'] as const) {
    const tenant = TENANT[who]
    t.ok(await inspectDirect('container', `${tenant}.${PROJECT}_web_1`), `engine: ${tenant}.${PROJECT}_web_1`)
    t.ok(await inspectDirect('network', `${tenant}.${PROJECT}_default`), `engine: ${tenant}.${PROJECT}_default`)
    t.ok(await inspectDirect('volume', `${tenant}.${PROJECT}_data`), `engine: ${tenant}.${PROJECT}_data`)
    const ps = await compose(who, 'ps')
    t.equal(ps.code, 0, `${who}: ps`, out(ps))
    const names = ps.stdout.toString().split('\n').map((l) => l.split(/\s+/)[0]).filter((n) => n.startsWith(PROJECT)).sort()
    t.same(names, [`${PROJECT}_db_1`, `${PROJECT}_web_1`], `${who}: ps lists its two containers by their plain names`)
    const logs = await compose(who, 'logs', '--no-color', 'web')
    t.match(logs.stdout.toString(), /web up/, `${who}: logs web`)
    const again = await compose(who, 'up', '-d')
    t.equal(again.code, 0, `${who}: a second up -d`, out(again))
    t.match(again.stderr, /is up-to-date/, `${who}: finds its containers as they are`)
    t.notMatch(again.stderr, new RegExp(`${tenant}\\.`), `${who}: compose never shows a qualified name`)
    const net = await inspectAs(who, 'network', `${PROJECT}_default`)
    t.same(Object.values(net?.Containers ?? {}).map((c: any) => c.Name).sort(), [`${PROJECT}_db_1`, `${PROJECT}_web_1`], `${who}: the project network holds its own two containers`)
  }
  for (const who of ['a', 'b'] as const) {
    const down = await compose(who, 'down', '-v', '-t', '1')
    t.equal(down.code, 0, `${who}: down -v`, out(down))
    t.notMatch(down.stderr, /error|not found/i, `${who}: down finds everything it made`)
    const tenant = TENANT[who]
    t.equal(await inspectDirect('container', `${tenant}.${PROJECT}_web_1`), null, `engine: ${tenant}'s web is gone`)
    t.equal(await inspectDirect('network', `${tenant}.${PROJECT}_default`), null, `engine: ${tenant}'s network is gone`)
    t.equal(await inspectDirect('volume', `${tenant}.${PROJECT}_data`), null, `engine: ${tenant}'s volume is gone`)
  }
})

/**
 * Every spelling of a reference, as each tenant, against the order docs/tenancy.md gives
 * (full id over all objects; `<tenant>.<ref>`; `ref` itself when the tenant's own; a
 * unique id prefix over all objects), computed from the engine's own listing: the
 * gateway's answer is that container or "No such container", and never another's.
 */
t.test('references: every spelling resolves as the documented order says, never to another tenant\'s', async (t) => {
  const made: string[] = []
  for (const [who, args] of [['a', ['--name', 'ref1']], ['a', []], ['b', ['--name', 'ref1']], ['b', ['--name', 'ref2']], ['b', []]] as const) {
    const r = await as(who, ['create', ...args, IMAGE, 'true'])
    t.equal(r.code, 0, `${who}: create ${args.join(' ')}`, out(r))
    made.push(r.stdout.toString().trim())
  }
  // The admin holds a name shaped like a's qualified one: a's plain `ref3` is still not a's.
  const admin = await direct(['create', '--name', `${TA}.ref3`, IMAGE, 'true'])
  t.equal(admin.code, 0, 'admin: create a container named like a\'s qualified ref3', out(admin))
  t.teardown(async () => { await direct(['rm', '-f', `${TA}.ref3`]) })

  const listing = lines(await direct(['ps', '-a', '--no-trunc', '--format', '{{.ID}} {{.Names}} {{.Label "io.portcullis.tenant"}}']))
  const all = listing.map((l) => { const [id, names, owner] = l.split(' '); return { id, names: names.split(','), owner: owner ?? '' } })
  const expected = (tenant: string, ref: string): string | null => {
    const name = ref.replace(/^\//, '')
    const mine = (o: { owner: string } | undefined): boolean => o?.owner === tenant
    const byId = all.find((o) => o.id === name)
    if (byId) return mine(byId) ? byId.id : null
    const named = all.filter((o) => o.names.includes(`${tenant}.${name}`))
    if (named.length === 1) return mine(named[0]) ? named[0].id : null
    if (named.length > 1) return null
    const own = all.filter((o) => o.names.includes(name) && mine(o))
    if (own.length === 1) return own[0].id
    if (own.length > 1) return null
    const prefixed = all.filter((o) => o.id.startsWith(name))
    return prefixed.length === 1 && mine(prefixed[0]) ? prefixed[0].id : null
  }
  const ours = all.filter((o) => made.includes(o.id) || o.names.includes(`${TA}.ref3`))
  const refs = new Set<string>(['ref1', '/ref1', 'ref2', 'ref3', 'nothing-here'])
  for (const o of ours) {
    for (const n of o.names) { refs.add(n); refs.add(`/${n}`); refs.add(n.slice(n.indexOf('.') + 1)) }
    for (const len of [64, 20, 12, 6, 3]) refs.add(o.id.slice(0, len))
  }
  const owners = new Map(all.map((o) => [o.id, o.owner]))
  for (const who of ['a', 'b'] as const) {
    const tenant = TENANT[who]
    for (const ref of refs) {
      const r = await as(who, ['container', 'inspect', '--format', '{{.Id}}', ref])
      const got = r.code === 0 ? r.stdout.toString().trim() : null
      if (got !== null) t.equal(owners.get(got), tenant, `${who}: ${ref} -> its own container, if any`)
      else t.match(r.stderr, /No such container/, `${who}: ${ref} -> No such container`)
      // Short prefixes can meet containers other tests make meanwhile: only their safety is asserted.
      if (ref.length >= 12 || !/^[0-9a-f]+$/.test(ref)) t.equal(got, expected(tenant, ref), `${who}: ${ref} resolves as documented`)
    }
  }
  for (const id of made) await direct(['rm', '-f', id])
})

t.test('a tenant whose name has a dot is refused while names are private', async (t) => {
  for (const args of [['ps'], ['run', '--rm', '--name', 'db', IMAGE, 'true'], ['volume', 'create', 'data']]) {
    const r = await as('dotted', args)
    t.not(r.code, 0, `docker ${args[0]} fails`)
    t.match(r.stderr, /cannot have private names .*rule tenant-names/, `docker ${args[0]}: refused by rule tenant-names`)
  }
  t.equal(await inspectDirect('volume', `names.c-${RUN}.data`), null, 'nothing was made')
})
