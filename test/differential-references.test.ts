/**
 * Differential test of reference resolution: generated references (full ids, id
 * prefixes of every length, names, `/names`, names shaped like other objects' ids and
 * id prefixes, random hex) across two tenants' containers and networks, each sent to the
 * engine directly and through the gateway as tenant A. What the engine picks is the
 * truth; the gateway must answer with exactly that object when it is A's (or a
 * predefined network), and as missing otherwise. For container links in a create body,
 * the link the engine stored must point at the engine's pick, which must be A's.
 *
 * The objects are made directly on the engine (tenants may not take id-shaped names,
 * but an administrator, an older gateway or another replica could have). A bounded run
 * is part of `npm test`; `PCX_DIFF_RUNS=5000 node dist/test/differential-references.test.js`
 * runs a longer one.
 */
import { randomBytes } from 'node:crypto'
import fc from 'fast-check'
import jwt from 'jsonwebtoken'
import t from 'tap'
import { engine, policiesOnSharedBridge, startTestGateway, type TestGateway, request, type RawReply } from './helpers/gateway'

const RUNS = Number(process.env.PCX_DIFF_RUNS ?? 150)
const SECRET = randomBytes(32).toString('hex')
const RUN = randomBytes(3).toString('hex')
const TA = `diff-a-${RUN}`
const TB = `diff-b-${RUN}`
const TENANT_LABEL = 'io.portcullis.tenant'
const IMAGE = engine().image
const TOKEN = jwt.sign({ sub: 'alice', tenant: TA, roles: ['tenant'], exp: Math.floor(Date.now() / 1000) + 3600 }, SECRET, { algorithm: 'HS256' })

let gw: TestGateway
const direct = async (method: string, path: string, body?: object): Promise<RawReply> => await request(engine().socket, method, path, body)
const asA = async (method: string, path: string, body?: object): Promise<RawReply> => await request(gw.socket, method, path, body, { token: TOKEN })

interface Obj { id: string, name: string, tenant: string | null }
const containers: Obj[] = []
const networks: Obj[] = []
const made: string[] = []

async function container (name: string, tenant: string): Promise<void> {
  const r = await direct('POST', `/containers/create?name=${name}`, { Image: IMAGE, Cmd: ['sleep', '600'], Labels: { [TENANT_LABEL]: tenant } })
  if (r.status !== 201) throw new Error(`container ${name}: ${r.status} ${JSON.stringify(r.json)}`)
  containers.push({ id: r.json.Id, name, tenant })
  made.push(`/containers/${r.json.Id as string}?force=1`)
}
async function network (name: string, tenant: string): Promise<void> {
  const r = await direct('POST', '/networks/create', { Name: name, Labels: { [TENANT_LABEL]: tenant } })
  if (r.status !== 201) throw new Error(`network ${name}: ${r.status} ${JSON.stringify(r.json)}`)
  networks.push({ id: r.json.Id, name, tenant })
  made.push(`/networks/${r.json.Id as string}`)
}

t.before(async () => {
  // Tenants on the engine's bridge: the oracle is the engine's reading of the same body sent directly.
  gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, undefined, policiesOnSharedBridge())
  for (let i = 0; i < 4; i++) {
    await container(`diff-${RUN}-a${i}`, TA)
    await container(`diff-${RUN}-b${i}`, TB)
    await network(`diff-${RUN}-an${i}`, TA)
    await network(`diff-${RUN}-bn${i}`, TB)
  }
  // Names that are other objects' ids and id prefixes, in both directions.
  const [a0, b0, a1, b1] = [containers[0], containers[1], containers[2], containers[3]]
  await container(a0.id.slice(0, 6), TB)
  await container(a1.id.slice(0, 13), TB)
  await container(b0.id.slice(0, 7), TA)
  await container(b1.id, TA)
  const [an0, bn0, an1] = [networks[0], networks[1], networks[2]]
  await network(an0.id.slice(0, 5), TB)
  await network(an1.id, TB)
  await network(bn0.id.slice(0, 9), TA)
  // The predefined networks: nobody's, visible to all.
  for (const n of (await direct('GET', '/networks')).json as any[]) {
    if (['bridge', 'host', 'none'].includes(n.Name)) networks.push({ id: n.Id, name: n.Name, tenant: null })
  }
})
t.teardown(async () => {
  for (const p of made.reverse()) await direct('DELETE', p)
  await gw?.close()
})

/** References to try: every name and id, prefixes of every id, `/name`, random hex. */
function refs (objs: () => Obj[]): fc.Arbitrary<string> {
  return fc.oneof(
    fc.constant(null).map(() => objs()).chain((os) => fc.constantFrom(...os.map((o) => o.name))),
    fc.constant(null).map(() => objs()).chain((os) => fc.constantFrom(...os.map((o) => `/${o.name}`))),
    // Prefixes of 5 digits or more: other test files create containers on the shared engine
    // meanwhile, and a shorter prefix could change meaning between the two lookups.
    fc.constant(null).map(() => objs()).chain((os) => fc.tuple(fc.constantFrom(...os.map((o) => o.id)), fc.integer({ min: 5, max: 64 }))).map(([id, n]) => id.slice(0, n)),
    fc.stringMatching(/^[0-9a-f]{5,8}$/)
  )
}

const owner = (objs: Obj[], id: string): string | null | undefined => objs.find((o) => o.id === id)?.tenant

t.test('container references: the gateway answers with the engine\'s pick when it is A\'s, as missing otherwise', async (t) => {
  let checked = 0
  await fc.assert(fc.asyncProperty(refs(() => containers), async (ref) => {
    const path = `/containers/${encodeURIComponent(ref)}/json`
    const [d, g] = await Promise.all([direct('GET', path), asA('GET', `/v1.41${path}`)])
    const pick = d.status === 200 ? String(d.json.Id) : undefined
    const mine = pick !== undefined && owner(containers, pick) === TA
    checked++
    if (mine) return g.status === 200 && g.json.Id === pick
    return g.status >= 400 && g.status < 500 && g.status !== 403
  }), { numRuns: RUNS })
  t.pass(`${checked} references checked against the engine`)
})

t.test('network references: the engine\'s pick when it is A\'s or predefined, missing otherwise', async (t) => {
  let checked = 0
  await fc.assert(fc.asyncProperty(refs(() => networks), async (ref) => {
    const path = `/networks/${encodeURIComponent(ref)}`
    const [d, g] = await Promise.all([direct('GET', path), asA('GET', `/v1.41${path}`)])
    const pick = d.status === 200 ? String(d.json.Id) : undefined
    const who = pick === undefined ? undefined : owner(networks, pick)
    checked++
    if (pick !== undefined && (who === TA || who === null)) return g.status === 200 && g.json.Id === pick
    return g.status >= 400 && g.status < 500 && g.status !== 403
  }), { numRuns: RUNS })
  t.pass(`${checked} references checked against the engine`)
})

t.test('links in a create body: what the engine stored is the engine\'s pick, and A\'s', async (t) => {
  let created = 0
  let refused = 0
  await fc.assert(fc.asyncProperty(refs(() => containers.filter((c) => !c.name.startsWith('/'))), async (ref) => {
    // A link's name loses its leading slash (opts.ParseLink) before the engine looks it up.
    const d = await direct('GET', `/containers/${encodeURIComponent(ref.replace(/^\//, ''))}/json`)
    const pick = d.status === 200 ? String(d.json.Id) : undefined
    const mine = pick !== undefined && owner(containers, pick) === TA
    const name = `diff-${RUN}-l${randomBytes(4).toString('hex')}`
    const g = await asA('POST', `/v1.41/containers/create?name=${name}`, { Image: IMAGE, Cmd: ['true'], HostConfig: { Links: [`${ref}:peer`] } })
    if (g.status !== 201) { refused++; if (mine) t.comment(`refused ${ref}: ${g.status} ${JSON.stringify(g.json)}`); return !mine && g.status >= 400 && g.status < 500 }
    created++
    made.push(`/containers/${g.json.Id as string}?force=1`)
    const stored = (await direct('GET', `/containers/${g.json.Id as string}/json`)).json.HostConfig.Links as string[]
    const target = containers.find((c) => c.id === pick)
    const ok = mine && stored.length === 1 && target !== undefined && stored[0] === `/${target.name}:/${name}/peer`
    if (!ok) t.comment(`link ${ref}: engine's pick ${String(pick)} (${String(owner(containers, pick ?? ''))}), stored ${JSON.stringify(stored)}`)
    return ok
  }), { numRuns: Math.max(20, Math.floor(RUNS / 3)) })
  t.pass(`${created} creates with a link to the engine's pick, ${refused} refused`)
})
