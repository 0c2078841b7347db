/**
 * Routes and answers as the engine has them, with real clients on the real engine.
 *
 * - `docker rm --link` (`DELETE /containers/parent/alias?link=1`, the link name spanning
 *   two segments as the engine's `{name:.*}` allows): removed through the gateway by the
 *   docker CLI 28, CLI 20.10 and docker-py, as admin and as a tenant on its own parent
 *   container; another tenant gets the engine's "No such container" and the link stays.
 *   Legacy links are the default bridge's: tenants here are on it (tenancy.yaml
 *   networks.tenantDefault off), as on an engine that keeps them there.
 * - `GET` and `HEAD /_ping` answer exactly as the engine does (status, headers, body), for
 *   an admin, a tenant and an anonymous listener.
 * - `/events` with every Accept the engine negotiates (application/jsonl, x-ndjson,
 *   json-seq, json): the engine's Content-Type comes back, and a tenant gets exactly the
 *   engine's own lines for its objects, nothing of another tenant's. The filter stage
 *   itself is checked with JSON-lines and JSON-sequence bodies (which dockerd 20.10 never
 *   sends) and with a newer engine's answer holding fields the gateway does not know.
 * - A tenant's list and inspect answers are the engine's bytes where it owns everything
 *   in them, and every API version up to api.maxVersion is routed.
 */
import fs from 'node:fs'
import http from 'node:http'
import os from 'node:os'
import path from 'node:path'
import { randomBytes } from 'node:crypto'
import { Readable } from 'node:stream'
import jwt from 'jsonwebtoken'
import pino from 'pino'
import t from 'tap'
import { parseConfig } from '../src/config'
import { startGateway, type Gateway } from '../src/gateway'
import { operations } from '../src/api/catalog/operations'
import { lineNarrower, narrowedHeaders, narrowJson } from '../src/gateway/forward'
import { Call, type ResponseFilter } from '../src/gateway/tenancy/call'
import { Credentials } from '../src/config'
import { serializeFilters, withLabel } from '../src/gateway/tenancy/filters'
import { goBool, handlers } from '../src/gateway/tenancy/operations'
import { filterEvents } from '../src/gateway/tenancy/responses'
import { DEFAULT_TENANCY } from '../src/policy/tenancy'
import { CLI20, CLI28, engine, policiesOnSharedBridge, run, uniqueName, type RunResult } from './helpers/gateway'

const SYSTEM_PYTHON = '/usr/bin/python3'
const TENANT_LABEL = 'io.portcullis.tenant'
const IMAGE = engine().image
const SECRET = randomBytes(32).toString('hex')
const RUN = randomBytes(3).toString('hex')
const TA = `team-a-${RUN}`
const TB = `team-b-${RUN}`
/** Every object of this file is named P-…: A's P-a-…, B's P-b-…, the admin's P-x-…. */
const P = uniqueName('pcr')

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pcr-'))
t.teardown(() => fs.rmSync(tmp, { recursive: true, force: true }))

type Who = 'a' | 'b'
const TOKENS: Record<Who, string> = {
  a: jwt.sign({ sub: 'alice', tenant: TA, roles: ['tenant'], exp: Math.floor(Date.now() / 1000) + 3 * 3600 }, SECRET, { algorithm: 'HS256' }),
  b: jwt.sign({ sub: 'bob', tenant: TB, roles: ['tenant'], exp: Math.floor(Date.now() / 1000) + 3 * 3600 }, SECRET, { algorithm: 'HS256' }),
}
/** DOCKER_CONFIG directories: the CLIs and docker-py send the token from config.json HttpHeaders. */
const CONFIG: Record<Who | 'admin', string> = Object.fromEntries((['a', 'b', 'admin'] as const).map((who) => {
  const dir = path.join(tmp, `cfg-${who}`)
  fs.mkdirSync(dir)
  fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify(who === 'admin' ? {} : { HttpHeaders: { Authorization: `Bearer ${TOKENS[who]}` } }))
  return [who, dir]
})) as Record<Who | 'admin', string>

let gateway: Gateway
/** The admin socket (a fixed admin identity; a bearer token on it makes a tenant) and an anonymous one. */
const SOCK = path.join(tmp, 'gw.sock')
const ANON = path.join(tmp, 'anon.sock')

t.before(async () => {
  const text = `listen:
  - { unix: ${SOCK}, identity: { subject: tester, roles: [admin] } }
  - { unix: ${ANON}, anonymous: true }
upstream: unix://${engine().socket}
policy: { dir: ${policiesOnSharedBridge()} }
auth: { jwt: { secret: ${SECRET} } }
audit: { file: ${tmp}/audit.jsonl }
log: { level: ${process.env.PORTCULLIS_TEST_LOG ?? 'silent'} }
shutdown: { graceSeconds: 2 }
`
  const config = parseConfig(text, path.join(tmp, 'portcullis.yaml'))
  gateway = await startGateway(config, pino({ level: config.log.level }))
})

t.teardown(async () => {
  const names = lines(await direct(['ps', '-aq', '--filter', `name=${P}-`]))
  if (names.length) await direct(['rm', '-f', '-v', ...names])
  const vols = lines(await direct(['volume', 'ls', '-q', '--filter', `name=${P}-`]))
  if (vols.length) await direct(['volume', 'rm', '-f', ...vols])
  const nets = lines(await direct(['network', 'ls', '-q', '--filter', `name=${P}-`]))
  if (nets.length) await direct(['network', 'rm', ...nets])
  await gateway?.close()
})

// ---------------------------------------------------------------------------------------
// Clients

const lines = (r: RunResult): string[] => r.stdout.toString().split('\n').filter((l) => l !== '')
const out = (r: RunResult): Record<string, unknown> => ({ code: r.code, stderr: r.stderr.trim() })
const direct = async (args: readonly string[], cli = CLI28): Promise<RunResult> => await run(cli, args, { host: engine().dockerHost })
/** A docker CLI through the gateway, as a tenant (its token in config.json) or as the admin socket's identity. */
const cli = async (who: Who | 'admin', args: readonly string[], bin = CLI28): Promise<RunResult> =>
  await run(bin, args, { host: `unix://${SOCK}`, env: { DOCKER_CONFIG: CONFIG[who] } })

/** docker-py 5.0.3 (Debian's) through the gateway: `remove_container(ref, link=True)`; the status and explanation of a refusal. */
async function dockerPyRemoveLink (who: Who | 'admin', ref: string): Promise<{ status: number | null, message: string }> {
  const script = `
import json, sys
import docker
from docker.errors import APIError
try:
    docker.from_env().api.remove_container(sys.argv[1], link=True)
    print(json.dumps({'status': None, 'message': 'removed'}))
except APIError as e:
    print(json.dumps({'status': e.status_code, 'message': e.explanation}))
`
  const r = await run(SYSTEM_PYTHON, ['-c', script, ref], { host: `unix://${SOCK}`, env: { DOCKER_CONFIG: CONFIG[who] } })
  if (r.code !== 0) throw new Error(`docker-py failed (${r.code}): ${r.stderr}`)
  return JSON.parse(r.stdout.toString())
}

interface Answer { status: number, headers: Record<string, string>, rawNames: string[], body: Buffer }

/** One request over a unix socket; `token` makes it a tenant's. Header names lower-cased, values as sent. */
async function request (socketPath: string, method: string, target: string, opts: { token?: string, headers?: Record<string, string> } = {}): Promise<Answer> {
  return await new Promise((resolve, reject) => {
    const headers: Record<string, string> = { ...opts.headers, ...(opts.token ? { authorization: `Bearer ${opts.token}` } : {}) }
    const req = http.request({ socketPath, method, path: target, headers, agent: false }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => {
        const h: Record<string, string> = {}
        const names: string[] = []
        for (let i = 0; i < res.rawHeaders.length; i += 2) {
          const name = res.rawHeaders[i].toLowerCase()
          names.push(name)
          h[name] = h[name] === undefined ? res.rawHeaders[i + 1] : `${h[name]}, ${res.rawHeaders[i + 1]}`
        }
        resolve({ status: res.statusCode ?? 0, headers: h, rawNames: names, body: Buffer.concat(chunks) })
      })
    })
    req.on('error', reject)
    req.end()
  })
}
const engineSock = (): string => engine().socket
const messageOf = (a: Answer): string | undefined => { try { return JSON.parse(a.body.toString()).message } catch { return undefined } }
/** A container's HostConfig.Links as the engine holds them (none: []). */
const linksOf = async (name: string): Promise<unknown> => JSON.parse(lines(await direct(['inspect', '--format', '{{json .HostConfig.Links}}', name]))[0] ?? 'null') ?? []
const exists = async (name: string): Promise<boolean> => (await direct(['inspect', '--format', '{{.Id}}', name])).code === 0

// ---------------------------------------------------------------------------------------

let eventsSince = 0

t.test('docker rm --link as the admin: CLI 28, CLI 20.10, docker-py', async (t) => {
  eventsSince = Math.floor(Date.now() / 1000) - 1
  const child = `${P}-x-child`
  t.equal((await direct(['create', '--name', child, IMAGE, 'true'])).code, 0, 'a child container')
  const ways: Array<[string, (parent: string) => Promise<boolean>]> = [
    ['CLI 28', async (parent) => { const r = await cli('admin', ['rm', '--link', `/${parent}/db`]); t.equal(r.code, 0, `CLI 28: docker rm --link /${parent}/db`, out(r)); return r.code === 0 }],
    ['CLI 20.10', async (parent) => { const r = await cli('admin', ['rm', '--link', `/${parent}/db`], CLI20); t.equal(r.code, 0, `CLI 20.10: docker rm --link /${parent}/db`, out(r)); return r.code === 0 }],
    ['docker-py', async (parent) => { const r = await dockerPyRemoveLink('admin', `${parent}/db`); t.same(r, { status: null, message: 'removed' }, `docker-py: remove_container('${parent}/db', link=True)`); return r.status === null }],
  ]
  for (const [i, [label, remove]] of ways.entries()) {
    const parent = `${P}-x-parent${i}`
    t.equal((await direct(['create', '--name', parent, '--link', `${child}:db`, IMAGE, 'true'])).code, 0, `${label}: a parent linking it as db`)
    t.same(await linksOf(parent), [`/${child}:/${parent}/db`], `${label}: the engine holds the link`)
    await remove(parent)
    t.same(await linksOf(parent), [], `${label}: the link is gone from the parent (HostConfig.Links)`)
    t.ok(await exists(child), `${label}: the linked container stays`)
  }
})

t.test('docker rm --link as tenants: only a link of one\'s own parent container', async (t) => {
  const child = `${P}-a-child`
  const parents = [`${P}-a-parent0`, `${P}-a-parent1`, `${P}-a-parent2`, `${P}-a-parent3`]
  const made = [
    await cli('a', ['create', '--name', child, IMAGE, 'true']),
    ...await Promise.all(parents.map(async (p) => await cli('a', ['create', '--name', p, '--link', `${child}:db`, IMAGE, 'true']))),
    await cli('b', ['create', '--name', `${P}-b-box`, IMAGE, 'true']),
  ]
  for (const r of made) t.equal(r.code, 0, 'created through the gateway by its tenant', out(r))
  // A container of nobody's (the admin's) linking A's container.
  const foreign = `${P}-x-parent-of-a`
  t.equal((await direct(['create', '--name', foreign, '--link', `${child}:db`, IMAGE, 'true'])).code, 0, 'an admin\'s parent linking A\'s container')

  const [parent0, parent1, parent2, parent3] = parents
  const link = `${parent0}/db`
  // B, on A's link: answered as the engine answers for a link that does not exist.
  const nothing = await request(engineSock(), 'DELETE', `/v1.41/containers/${P}-nope/db?link=1`)
  t.same([nothing.status, messageOf(nothing)], [404, `No such container: ${P}-nope/db`], 'the engine, on a link that does not exist')
  const b = await request(SOCK, 'DELETE', `/v1.41/containers/${link}?link=1`, { token: TOKENS.b })
  t.same([b.status, messageOf(b)], [404, `No such container: ${link}`], 'B removing A\'s link: the engine\'s answer for no such link')
  const bCli = await cli('b', ['rm', '--link', `/${link}`])
  t.not(bCli.code, 0, 'B: docker rm --link fails')
  t.match(bCli.stderr, `No such container: ${link}`, 'B: No such container')
  t.same(await dockerPyRemoveLink('b', link), { status: 404, message: `No such container: ${link}` }, 'B: docker-py remove_container(link=True) gets the 404')
  // Without `link`, the path names the linked child by its link name: A's container, not B's.
  const bRm = await cli('b', ['rm', link])
  t.not(bRm.code, 0, 'B: docker rm of A\'s link name (A\'s container) fails')
  t.match(bRm.stderr, `No such container: ${link}`, 'B: No such container')
  t.same(await linksOf(parent0), [`/${child}:/${link}`], 'A\'s link is still there')
  t.ok(await exists(child), 'and A\'s linked container too')

  // A names its child by the link name, as the engine allows.
  const inspect = await cli('a', ['inspect', '--format', '{{.Name}}', link])
  t.same([inspect.code, lines(inspect)], [0, [`/${child}`]], 'A: docker inspect parent/db is the linked container')
  // A removes its links, with every client.
  const aCli = await cli('a', ['rm', '--link', `/${link}`])
  t.equal(aCli.code, 0, 'A: CLI 28 docker rm --link', out(aCli))
  t.same(await linksOf(parent0), [], 'A: the link is gone (CLI 28)')
  const aCli20 = await cli('a', ['rm', '--link', `/${parent1}/db`], CLI20)
  t.equal(aCli20.code, 0, 'A: CLI 20.10 docker rm --link', out(aCli20))
  t.same(await linksOf(parent1), [], 'A: the link is gone (CLI 20.10)')
  t.same(await dockerPyRemoveLink('a', `${parent2}/db`), { status: null, message: 'removed' }, 'A: docker-py remove_container(link=True)')
  t.same(await linksOf(parent2), [], 'A: the link is gone (docker-py)')
  t.ok(await exists(child), 'A\'s linked container stays')
  // A's link gone: then A gets the engine's own answer, as for any missing link.
  const again = await request(SOCK, 'DELETE', `/v1.41/containers/${link}?link=1`, { token: TOKENS.a })
  t.same([again.status, messageOf(again)], [404, `No such container: ${link}`], 'A: a removed link is no such container')

  // The parent must be named as the engine names it: by its name, never its id.
  const parentId = lines(await direct(['inspect', '--format', '{{.Id}}', parent3]))[0]
  const byIdEngine = await request(engineSock(), 'DELETE', `/v1.41/containers/${parentId}/db?link=1`)
  const byId = await request(SOCK, 'DELETE', `/v1.41/containers/${parentId}/db?link=1`, { token: TOKENS.a })
  t.same([byId.status, messageOf(byId)], [byIdEngine.status, messageOf(byIdEngine)], `A: <parent id>/db answered as the engine answers it (${byIdEngine.status})`)
  t.same(await linksOf(parent3), [`/${child}:/${parent3}/db`], 'and the link stays')
  // `link` read as the engine reads it (Go's BoolValue; docker-py sends link=True): with
  // link=no the same path deletes the linked container itself (A's own here).
  const spare = `${P}-a-spare`
  t.equal((await cli('a', ['create', '--name', spare, IMAGE, 'true'])).code, 0, 'A: a spare container')
  t.equal((await cli('a', ['create', '--name', `${P}-a-parent4`, '--link', `${spare}:db`, IMAGE, 'true'])).code, 0, 'A: linked from parent4')
  const off = await request(SOCK, 'DELETE', `/v1.41/containers/${P}-a-parent4/db?link=no`, { token: TOKENS.a })
  t.equal(off.status, 204, 'link=no: a delete of the container the link name names', { message: messageOf(off) })
  t.notOk(await exists(spare), 'the linked container is gone, as on the engine')
  t.ok(await exists(`${P}-a-parent4`), 'its parent stays')
  const yes = await request(SOCK, 'DELETE', `/v1.41/containers/${parent3}/db?link=%20Yes%20`, { token: TOKENS.a })
  t.equal(yes.status, 204, 'link=" Yes ": a link removal', { message: messageOf(yes) })
  t.same(await linksOf(parent3), [], 'the link is gone')
  // A single-segment name with link=1: the engine's own refusal (the default link name).
  const single = [await request(engineSock(), 'DELETE', `/v1.41/containers/${parent3}?link=1`), await request(SOCK, 'DELETE', `/v1.41/containers/${parent3}?link=1`, { token: TOKENS.a })]
  t.same([single[1].status, messageOf(single[1])], [single[0].status, messageOf(single[0])], `A: parent?link=1 answered as the engine answers it (${single[0].status} ${messageOf(single[0])})`)

  // A's container linked by a parent A does not own: the link is not A's to remove.
  const notOwn = await cli('a', ['rm', '--link', `/${foreign}/db`])
  t.not(notOwn.code, 0, 'A: docker rm --link on an admin\'s parent fails')
  t.match(notOwn.stderr, `No such container: ${foreign}/db`, 'as no such container')
  t.same(await linksOf(foreign), [`/${child}:/${foreign}/db`], 'the admin\'s link stays')
})

t.test('HEAD and GET /_ping answer as the engine: admin, tenant, anonymous', async (t) => {
  const callers: Array<[string, string, string | undefined]> = [['admin', SOCK, undefined], ['tenant', SOCK, TOKENS.a], ['anonymous', ANON, undefined]]
  // Hop-by-hop and per-answer headers: each side has its own.
  const comparable = (a: Answer): Record<string, string> => Object.fromEntries(Object.entries(a.headers).filter(([k]) => !['date', 'connection', 'keep-alive'].includes(k)))
  for (const method of ['HEAD', 'GET']) {
    for (const target of ['/_ping', '/v1.41/_ping', '/v1.24/_ping']) {
      const d = await request(engineSock(), method, target)
      t.equal(d.status, 200, `engine: ${method} ${target}`)
      t.ok(d.headers['api-version'] && d.headers.ostype && d.headers['docker-experimental'] && d.headers['cache-control'] && d.headers.pragma, `engine: ${method} ${target} sends Api-Version, Ostype, Docker-Experimental, Cache-Control, Pragma`)
      for (const [who, sock, token] of callers) {
        const g = await request(sock, method, target, { token })
        t.equal(g.status, d.status, `${who}: ${method} ${target} status`)
        t.same(comparable(g), comparable(d), `${who}: ${method} ${target} headers`)
        t.equal(g.body.toString('latin1'), d.body.toString('latin1'), `${who}: ${method} ${target} body (${JSON.stringify(d.body.toString())})`)
        t.ok(g.headers.date, `${who}: ${method} ${target} has a Date`)
        t.equal(g.rawNames.filter((n) => n === 'date').length, 1, `${who}: one Date, the engine's`)
      }
    }
  }
})

t.test('/events with every Accept: the engine\'s Content-Type, the tenant\'s own lines only', async (t) => {
  // The events of the tests above (A's, B's and the admin's containers) are in the window.
  const until = Math.floor(Date.now() / 1000) + 1
  await new Promise((resolve) => setTimeout(resolve, 1500))
  for (const accept of ['application/jsonl', 'application/x-ndjson', 'application/json-seq', 'application/json', 'application/jsonl, application/json;q=0.5', undefined]) {
    const target = `/v1.41/events?since=${eventsSince}&until=${until}`
    const headers = accept ? { accept } : undefined
    const d = await request(engineSock(), 'GET', target, { headers })
    const g = await request(SOCK, 'GET', target, { headers, token: TOKENS.a })
    const label = `Accept: ${accept ?? '(none)'}`
    t.equal(g.status, 200, `${label}: 200`)
    t.equal(g.headers['content-type'], d.headers['content-type'], `${label}: the engine's Content-Type (${d.headers['content-type']})`)
    const all = d.body.toString('utf8').split('\n').filter((l) => l !== '')
    const mine = all.filter((l) => { const ev = JSON.parse(l.replace(/^\x1e/, '')); return ['container', 'image'].includes(ev.Type) && ev.Actor?.Attributes?.[TENANT_LABEL] === TA })
    const got = g.body.toString('utf8').split('\n').filter((l) => l !== '')
    t.ok(mine.length >= 5, `${label}: A created containers in the window (${mine.length} events of A's)`)
    t.ok(all.some((l) => l.includes(TB)), `${label}: the engine has B's events in the window`)
    t.same(got, mine, `${label}: A gets exactly the engine's own lines for its objects, in order`)
    t.notOk(g.body.toString().includes(TB) || g.body.toString().includes(`${P}-b-`) || g.body.toString().includes(`${P}-x-`), `${label}: nothing of B's or the admin's`)
  }
})

t.test('a tenant\'s answers are the engine\'s bytes where it owns everything in them (less the owner labels)', async (t) => {
  t.equal((await cli('a', ['volume', 'create', `${P}-a-vol`])).code, 0, 'A creates a volume')
  t.equal((await cli('a', ['network', 'create', `${P}-a-net`])).code, 0, 'A creates a network')
  const own = encodeURIComponent(serializeFilters(withLabel(new Map(), `${TENANT_LABEL}=${TA}`)))
  const childId = lines(await direct(['inspect', '--format', '{{.Id}}', `${P}-a-child`]))[0]
  const netId = lines(await direct(['network', 'inspect', '--format', '{{.Id}}', `${P}-a-net`]))[0]
  const pairs: Array<[string, string, string]> = [
    // [what, the tenant's request, the same request to the engine with the owner filter the gateway adds]
    ['ContainerList', '/v1.41/containers/json?all=1', `/v1.41/containers/json?all=1&filters=${own}`],
    ['ContainerList, unversioned', '/containers/json?all=1', `/containers/json?all=1&filters=${own}`],
    ['ContainerList, v1.24', '/v1.24/containers/json?all=1', `/v1.24/containers/json?all=1&filters=${own}`],
    ['ContainerInspect by name', `/v1.41/containers/${P}-a-child/json`, `/v1.41/containers/${childId}/json`],
    ['ContainerInspect by link name', `/v1.41/containers/${P}-x-parent-of-a/db/json`, `/v1.41/containers/${childId}/json`],
    ['VolumeList', '/v1.41/volumes', `/v1.41/volumes?filters=${own}`],
    ['VolumeInspect', `/v1.41/volumes/${P}-a-vol`, `/v1.41/volumes/${P}-a-vol`],
    ['NetworkInspect (own)', `/v1.41/networks/${P}-a-net`, `/v1.41/networks/${netId}`],
    ['NetworkInspect (predefined, nobody\'s containers on it)', '/v1.41/networks/none', '/v1.41/networks/none'],
    // Versions the engine does not speak are routed and answered by the engine.
    ['a version newer than the engine\'s', '/v1.56/containers/json?all=1', `/v1.56/containers/json?all=1&filters=${own}`],
  ]
  for (const [what, mine, engines] of pairs) {
    const g = await request(SOCK, 'GET', mine, { token: TOKENS.a })
    const d = await request(engineSock(), 'GET', engines)
    t.equal(g.status, d.status, `${what}: status ${d.status}`)
    t.equal(g.headers['content-type'], d.headers['content-type'], `${what}: Content-Type`)
    // The owner labels are the gateway's own and kept out of a tenant's view (compose
    // compares the labels it set): everything else is the engine's, byte for byte.
    // A volume without labels of its own shows null, as the engine shows it for one created without any.
    const expected = withoutOwnerLabels(d.body.toString('utf8'), what.startsWith('Volume') ? 'null' : '{}')
    t.equal(g.body.toString('utf8'), expected, `${what}: byte for byte the engine's answer, less the owner labels (${d.body.length} bytes)`)
  }
})

/**
 * The engine's JSON text without the owner-label members (Go writes map keys sorted, no
 * spaces); a labels map left empty by that reads `empty` (volumes show null for none).
 */
function withoutOwnerLabels (text: string, empty: '{}' | 'null'): string {
  const str = '"(?:[^"\\\\]|\\\\.)*"'
  return text.replace(new RegExp(`"Labels":\\{(?:${str}:${str},?)*\\}`, 'g'), (labels) => {
    const kept = labels.replace(new RegExp(`"io\\.portcullis\\.(?:tenant|subject)":${str},?`, 'g'), '').replace(/,\}$/, '}')
    return kept === '"Labels":{}' && labels !== kept ? `"Labels":${empty}` : kept
  })
}

// ---------------------------------------------------------------------------------------
// The filter stage on bodies dockerd 20.10 never sends: no fake engine, the functions themselves.

/** A Call as the tenancy stage makes it, for tenant A, with a resolver that knows A's objects. */
function callFor (opId: string, params: Record<string, string>, resolver: Record<string, unknown>): Call {
  const op = operations.find((o) => o.id === opId)!
  return new Call(op, params, new URLSearchParams(), undefined, 'team-a', 'alice', DEFAULT_TENANCY, resolver as never, new Credentials(), undefined)
}

/** The bytes as several chunks, cut at every `cuts` offsets (mid-line and mid-character). */
function chunked (bytes: Buffer, cuts: number[]): Readable {
  const parts: Buffer[] = []
  let at = 0
  for (const c of [...cuts, bytes.length]) { parts.push(bytes.subarray(at, c)); at = c }
  return Readable.from(parts)
}

t.test('filter stage: JSON lines, NDJSON and JSON sequences, the engine\'s bytes and Content-Type kept', async (t) => {
  const event = (tenant: string, name: string, extra: object = {}): string => JSON.stringify({
    Type: 'container', Action: 'create', Actor: { ID: randomBytes(32).toString('hex'), Attributes: { image: 'busybox', name, [TENANT_LABEL]: tenant, note: 'ünïcødé ✓' } }, scope: 'local', time: 1700000000, timeNano: '1700000000123456789', ...extra,
  })
  const a1 = event('team-a', 'a1')
  const b1 = event('team-b', 'b1')
  // eslint-disable-next-line @typescript-eslint/no-loss-of-precision -- JSON.stringify rounds it; replaced by the exact digits below
  const a2 = event('team-a', 'a2', { FutureField: { Nested: [1, 18446744073709551615] } }).replace('18446744073709552000', '18446744073709551615')
  const vol = JSON.stringify({ Type: 'volume', Action: 'create', Actor: { ID: 'vb', Attributes: { driver: 'local' } } })
  const resolver = { volume: async (name: string) => (name === 'va' ? { state: 'own', id: 'va' } : { state: 'missing' }) }
  const va = JSON.stringify({ Type: 'volume', Action: 'create', Actor: { ID: 'va', Attributes: { driver: 'local' } } })
  for (const [framing, sep, contentType] of [['JSON lines', '', 'application/jsonl'], ['NDJSON', '', 'application/x-ndjson'], ['JSON text sequence (RFC 7464)', '\x1e', 'application/json-seq'], ['JSON', '', 'application/json']] as const) {
    const records = [a1, b1, 'not json', '', vol, a2, va, b1]
    const body = Buffer.from(records.map((r) => `${sep}${r}\n`).join(''), 'utf8')
    // Cut inside a record, inside a multi-byte character, and right after a separator.
    const mb = body.indexOf(Buffer.from('✓')) + 1
    const cuts = [7, mb, body.indexOf(0x0a) + 1, body.length - 5].sort((x, y) => x - y)
    const keep = filterEvents(callFor('SystemEvents', {}, resolver))
    const narrow = lineNarrower(keep)
    const parts: Buffer[] = []
    for await (const chunk of chunked(body, cuts)) {
      const out = await narrow(chunk as Buffer)
      if (out !== undefined) parts.push(out)
    }
    const narrowed = Buffer.concat(parts)
    t.equal(narrowed.toString('utf8'), [a1, a2, va].map((r) => `${sep}${r}\n`).join(''), `${framing}: A's records, in order, byte for byte (separator kept)`)
    t.notOk(narrowed.includes('team-b'), `${framing}: nothing of B's`)
    t.ok(narrowed.includes('18446744073709551615'), `${framing}: a field the gateway does not know, digits as sent`)
    const head = narrowedHeaders({ 'content-type': contentType, 'transfer-encoding': 'chunked', 'content-length': '99', 'api-version': '1.53', connection: 'keep-alive', 'docker-experimental': 'false' })
    t.same(head, { 'content-type': contentType, 'api-version': '1.53', 'docker-experimental': 'false' }, `${framing}: the engine's Content-Type and headers, without its framing`)
  }
})

t.test('filter stage: a newer engine\'s answers keep every field, exactly', async (t) => {
  const mineId = 'a'.repeat(64)
  const theirsId = 'b'.repeat(64)
  // GET /v1.52/networks/bridge: IPAM statistics are uint64 (saturating at 2^64-1), beyond a double.
  const network = (containers: string[]): Buffer => Buffer.from(`{"Name":"bridge","Id":"${'c'.repeat(64)}","Scope":"local","Driver":"bridge","EnableIPv4":true,"EnableIPv6":true,"IPAM":{"Driver":"default","Options":null,"Config":[{"Subnet":"172.17.0.0/16"},{"Subnet":"fd00:1::/64"}]},"Containers":{${containers.map((id) => `"${id}":{"Name":"c-${id.slice(0, 4)}","EndpointID":"e","MacAddress":"02:42:ac:11:00:02","IPv4Address":"172.17.0.2/16","IPv6Address":""}`).join(',')}},"Options":{"com.docker.network.bridge.default_bridge":"true"},"Labels":{},"Status":{"IPAM":{"Subnets":{"172.17.0.0/16":{"IPsInUse":4,"DynamicIPsAvailable":65532},"fd00:1::/64":{"IPsInUse":3,"DynamicIPsAvailable":18446744073709551615}}}},"SomethingNew":{"Values":[1.5,-0.25,1e-7,"\\u2028<&>"]}}\n`)
  const resolver = {
    network: async () => ({ state: 'shared', id: 'c'.repeat(64), name: 'bridge' }),
    ownList: async (kind: string) => (kind === 'container' ? [{ Id: mineId }] : []),
  }
  const call = callFor('NetworkInspect', { id: 'bridge' }, resolver)
  await handlers.NetworkInspect(call)
  const filter = call.respond as Extract<ResponseFilter, { kind: 'json' }>
  t.equal(filter?.kind, 'json', 'a predefined network\'s answer is narrowed to the tenant\'s containers')

  const onlyMine = network([mineId])
  const same = await narrowJson(onlyMine, filter, 'NetworkInspect')
  t.ok(same.equals(onlyMine), 'nothing to hide: the engine\'s own bytes')

  const both = network([mineId, theirsId])
  const narrowed = await narrowJson(both, filter, 'NetworkInspect')
  t.equal(narrowed.toString('utf8'), onlyMine.toString('utf8'), 'another tenant\'s container removed; everything else as the engine wrote it: uint64 counters, unknown fields, numbers, escapes')
  t.ok(narrowed.includes('"DynamicIPsAvailable":18446744073709551615'), 'the saturated uint64 counter, digit for digit')

  // Lists: the tenant's own, every field and digit as sent, the owner labels kept out of view.
  const volumes = Buffer.from(`{"Volumes":[{"Name":"v1","Driver":"local","Labels":{"${TENANT_LABEL}":"team-a","x":"y"},"UsageData":{"Size":-1,"RefCount":-1},"ClusterVolume":null,"NewField":18446744073709551615}],"Warnings":null}\n`)
  const seen = volumes.toString().replace(`"${TENANT_LABEL}":"team-a",`, '')
  const listCall = callFor('VolumeList', {}, {})
  await handlers.VolumeList(listCall)
  const vl = listCall.respond as Extract<ResponseFilter, { kind: 'json' }>
  t.equal((await narrowJson(volumes, vl, 'VolumeList')).toString(), seen, 'VolumeList of the tenant\'s own volumes: the engine\'s text less the owner label')
  const mixed = Buffer.from(volumes.toString().replace('{"Volumes":[', `{"Volumes":[{"Name":"v0","Labels":{"${TENANT_LABEL}":"team-b"}},`))
  t.equal((await narrowJson(mixed, vl, 'VolumeList')).toString(), seen, 'another tenant\'s volume removed, the rest exactly as sent')
})

t.test('link=… read as the engine reads it (Go\'s httputils.BoolValue)', async (t) => {
  for (const v of ['1', 'true', 'True', 'yes', ' Yes ', 'on', 'x', '\u00a01\u00a0']) t.ok(goBool(v), JSON.stringify(v))
  for (const v of [null, '', '0', 'no', 'NO', 'false', 'False', 'none', ' none\t', '\u0085no\u3000']) t.notOk(goBool(v), JSON.stringify(v))
})
