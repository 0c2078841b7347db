/**
 * A tenant's lists at engine speed (issue 21): the engine narrows a list by the owner
 * label the gateway adds to the client's filters, and the gateway checks each element's
 * owner again in one pass over the engine's bytes (src/gateway/json-list.ts), cutting out
 * other owners' elements and the owner labels, without decoding and re-encoding the list.
 *
 * - narrowList against the decoded path it replaces (keepOwn's transform), on generated
 *   lists with escaped keys, brackets and quotes in strings, whitespace, other owners,
 *   missing and odd labels: the same document, every kept byte the engine's; what is not
 *   the engine's shape (repeated keys, elements that are not objects, trailing bytes) is
 *   left to the decoded path.
 * - On the real engine, differentially: for each client filter (label terms, owner-label
 *   terms, `label!`, the legacy `{"label":{"x":true}}` form, status, name, several at
 *   once) the tenant's `containers/json` and `volumes` are exactly the engine's own answer
 *   to the client's filters, less every object not the tenant's, with the owner labels
 *   hidden; malformed filters are refused (400; dockerd 20.10 answers 500, later engines 400).
 * - The scan that writes the narrowed list into one buffer (issue 21, LST) against the
 *   one it replaced (test/helpers/json-list-before.ts): the same bytes, or both leave the
 *   answer to the decoded path, on generated lists and on the engine's answer for 240
 *   containers of 12 tenants, where the tenant's list through the gateway holds every one
 *   of its containers and no other's.
 */
import { randomBytes } from 'node:crypto'
import fc from 'fast-check'
import jwt from 'jsonwebtoken'
import t from 'tap'
import { narrowList, type ListNarrowing } from '../src/gateway/json-list'
import { hideOwner } from '../src/gateway/tenancy/labels'
import { engine, startTestGateway, request, type RawReply, type TestGateway } from './helpers/gateway'
import { narrowList as narrowListBefore } from './helpers/json-list-before'

const TENANT_LABEL = 'io.portcullis.tenant'
const SUBJECT_LABEL = 'io.portcullis.subject'
const OWNER_KEYS = [TENANT_LABEL, SUBJECT_LABEL]

// ---------------------------------------------------------------- narrowList, unit

/** What keepOwn's decoded path answers (operations.ts): the reference. */
function reference (doc: any, n: ListNarrowing): unknown {
  const labelsOf = (o: any): any => n.labels.reduce((x, k) => x?.[k], o)
  const keep = (o: any): boolean => { const v = labelsOf(o)?.[n.ownerKey]; return n.keep(typeof v === 'string' ? v : null) }
  const view = (xs: any[]): any[] => xs.filter(keep).map((o) => n.hide ? hideOwner(o, n.labels, n.hide.empty) : o)
  return n.at !== undefined ? { ...doc, [n.at]: view(doc[n.at]) } : view(doc)
}

const CONTAINERS: ListNarrowing = { labels: ['Labels'], ownerKey: TENANT_LABEL, keep: (o) => o === 'team-a', hide: { keys: OWNER_KEYS, empty: {} } }
const VOLUMES: ListNarrowing = { at: 'Volumes', labels: ['Labels'], ownerKey: TENANT_LABEL, keep: (o) => o === 'team-a', hide: { keys: OWNER_KEYS, empty: null } }
const SERVICES: ListNarrowing = { labels: ['Spec', 'Labels'], ownerKey: TENANT_LABEL, keep: (o) => o === 'team-a' }

const tricky = fc.oneof(fc.string(), fc.constantFrom('"', '\\', '\\"', '}', ']', '{"Labels":', '"io.portcullis.tenant":"team-a"', 'team-a', '\u2028', 'é', '\u0000'))
const labels = fc.oneof(
  { weight: 6, arbitrary: fc.record({ [TENANT_LABEL]: fc.constantFrom('team-a', 'team-b', ''), [SUBJECT_LABEL]: fc.constantFrom('alice', 'bob'), x: tricky }, { requiredKeys: [] }) },
  { weight: 1, arbitrary: fc.constantFrom(null, [], 'team-a', 7, { [TENANT_LABEL]: 5 }, { [TENANT_LABEL]: null }) }
)
const element = fc.record({
  Id: fc.string({ unit: fc.constantFrom(...'0123456789abcdef'), minLength: 4, maxLength: 12 }),
  Names: fc.array(tricky, { maxLength: 2 }),
  Labels: labels,
  Spec: fc.record({ Name: tricky, Labels: labels }, { requiredKeys: [] }),
  Size: fc.oneof(fc.integer(), fc.double({ noNaN: true, noDefaultInfinity: true })),
  Nested: fc.array(fc.dictionary(fc.string(), fc.oneof(fc.string(), fc.boolean(), fc.constant(null), fc.array(fc.string()))), { maxLength: 2 }),
}, { requiredKeys: ['Id'] })
/** How a list is laid out: compact (as the engine writes it), indented, or with an escaped key. */
const layout = fc.constantFrom(
  (x: unknown) => JSON.stringify(x) + '\n',
  (x: unknown) => JSON.stringify(x, null, 2),
  (x: unknown) => ` ${JSON.stringify(x, null, '\t')} \r\n`,
  (x: unknown) => JSON.stringify(x).replaceAll('"Labels":', '"\\u004cabels":').replaceAll(`"${TENANT_LABEL}":`, '"io.portcullis.tenan\\u0074":')
)

t.test('narrowList: the decoded path\'s document, in one pass over the engine\'s bytes', async (t) => {
  let taken = 0
  fc.assert(fc.property(fc.array(element, { maxLength: 8 }), layout, (list, lay) => {
    for (const [n, doc] of [[CONTAINERS, list], [SERVICES, list], [VOLUMES, { Volumes: list, Warnings: null }]] as const) {
      const raw = Buffer.from(lay(doc))
      const out = narrowList(raw, n)
      // Generated lists are the engine's shape: always taken in one pass.
      if (out === undefined) throw new Error(`not taken: ${raw.toString()}`)
      taken++
      const want = reference(JSON.parse(raw.toString()), n)
      if (JSON.stringify(JSON.parse(out.toString())) !== JSON.stringify(want)) throw new Error(`differs for ${raw.toString()}: ${out.toString()}`)
    }
  }), { numRuns: 400 })
  t.ok(taken >= 1200, `${taken} lists narrowed, each the same document as the decoded path`)
})

t.test('narrowList: the same bytes as the scan it replaced, or the decoded path for both', async (t) => {
  let same = 0
  let neither = 0
  // Generated lists, and the same with a byte cut or doubled somewhere (not the engine's shape, mostly).
  fc.assert(fc.property(fc.array(element, { maxLength: 8 }), layout, fc.nat(), fc.constantFrom('cut', 'double', 'none'), (list, lay, at, edit) => {
    for (const [n, doc] of [[CONTAINERS, list], [SERVICES, list], [VOLUMES, { Volumes: list, Warnings: null }]] as const) {
      let raw = Buffer.from(lay(doc))
      const i = at % raw.length
      if (edit === 'cut') raw = Buffer.concat([raw.subarray(0, i), raw.subarray(i + 1)])
      if (edit === 'double') raw = Buffer.concat([raw.subarray(0, i + 1), raw.subarray(i)])
      const now = narrowList(raw, n)
      const before = narrowListBefore(raw, n)
      if (now === undefined || before === undefined) {
        if (now !== before) throw new Error(`one scan took it, the other not: ${raw.toString()}`)
        neither++
      } else {
        if (!now.equals(before)) throw new Error(`differs for ${raw.toString()}: ${now.toString()} against ${before.toString()}`)
        if ((now === raw) !== (before === raw)) throw new Error(`one answered the engine's own buffer, the other not: ${raw.toString()}`)
        same++
      }
    }
  }), { numRuns: 600 })
  t.ok(same >= 600, `${same} narrowed to the same bytes`)
  t.ok(neither >= 30, `${neither} left to the decoded path by both`)
})

t.test('narrowList: the engine\'s bytes pass as they are; other owners and owner labels are cut out', async (t) => {
  const raw = Buffer.from('[{"Id":"1","Labels":{"a":"x","io.portcullis.subject":"alice","io.portcullis.tenant":"team-a"},"Size":12345678901234567890,"T":"\\u2028<&>"},' +
    '{"Id":"2","Labels":{"io.portcullis.tenant":"team-b","a":"y"}},{"Id":"3","Labels":{"io.portcullis.tenant":"team-a"},"N":1.0e+21}]\n')
  const out = narrowList(raw, CONTAINERS)
  t.equal(out?.toString(), '[{"Id":"1","Labels":{"a":"x"},"Size":12345678901234567890,"T":"\\u2028<&>"},{"Id":"3","Labels":{},"N":1.0e+21}]\n',
    'numbers, escapes and layout as the engine wrote them; team-b\'s element and the owner labels gone')
  const own = Buffer.from('[{"ID":"1","Spec":{"Labels":{"io.portcullis.tenant":"team-a"}}}]\n')
  t.equal(narrowList(own, SERVICES), own, 'nothing changed: the engine\'s own buffer')
  t.equal(narrowList(Buffer.from('{"Volumes":[{"Name":"v","Labels":{"io.portcullis.tenant":"team-a"}}],"Warnings":null}\n'), VOLUMES)?.toString(),
    '{"Volumes":[{"Name":"v","Labels":null}],"Warnings":null}\n', 'a volume\'s emptied labels are null, as the engine writes them')
  t.equal(narrowList(Buffer.from('[{"Id":"1","Labels":{"io.portcullis.tenant":"team-b"}}]'), CONTAINERS)?.toString(), '[]', 'every element dropped: an empty list')
})

t.test('narrowList: what is not the engine\'s shape is left to the decoded path', async (t) => {
  const cases: Array<[string, string, ListNarrowing]> = [
    ['a repeated labels key', '[{"Labels":{"io.portcullis.tenant":"team-b"},"Labels":{"io.portcullis.tenant":"team-a"}}]', CONTAINERS],
    ['a repeated owner label', '[{"Labels":{"io.portcullis.tenant":"team-b","io.portcullis.tenan\\u0074":"team-a"}}]', CONTAINERS],
    ['an element that is not an object', '[{"Labels":{"io.portcullis.tenant":"team-a"}},["x"]]', CONTAINERS],
    ['bytes after the list', '[{"Labels":{"io.portcullis.tenant":"team-a"}}] [{"Labels":{}}]', CONTAINERS],
    ['a missing comma', '[{"Labels":{"io.portcullis.tenant":"team-a"}} {"Labels":{}}]', CONTAINERS],
    ['mismatched brackets', '[{"Labels":{"io.portcullis.tenant":"team-a"},"x":[}]', CONTAINERS],
    ['an unterminated string', '[{"Labels":{"io.portcullis.tenant":"team-a"},"x":"]', CONTAINERS],
    ['not a list', '{"message":"x"}', CONTAINERS],
    ['a null Volumes', '{"Volumes":null,"Warnings":null}', VOLUMES],
    ['no Volumes', '{"Warnings":null}', VOLUMES],
  ]
  for (const [what, text, n] of cases) t.equal(narrowList(Buffer.from(text), n), undefined, what)
})

// ---------------------------------------------------------------- against the engine

const SECRET = randomBytes(32).toString('hex')
const RUN = randomBytes(3).toString('hex')
const TA = `lists-a-${RUN}`
const TB = `lists-b-${RUN}`
const IMAGE = engine().image
const TOKEN = jwt.sign({ sub: 'alice', tenant: TA, roles: ['tenant'], exp: Math.floor(Date.now() / 1000) + 3600 }, SECRET, { algorithm: 'HS256' })

let gw: TestGateway
const asA = async (method: string, path: string, body?: object): Promise<RawReply> => await request(gw.socket, method, path, body, { token: TOKEN })
const direct = async (method: string, path: string, body?: object): Promise<RawReply> => await request(engine().socket, method, path, body)
const made: Array<[string, string]> = []

t.test('on the engine: a tenant\'s list is the engine\'s answer to the client\'s filters, less what is not the tenant\'s', async (t) => {
  gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`)
  t.teardown(async () => {
    for (const [kind, id] of made.reverse()) await direct('DELETE', kind === 'containers' ? `/containers/${id}?force=1` : `/volumes/${id}?force=1`)
    await gw?.close()
  })
  // A's, B's and an unowned object, each with and without client labels of the same names.
  const owners: Array<Record<string, string>> = [{ [TENANT_LABEL]: TA, [SUBJECT_LABEL]: 'alice' }, { [TENANT_LABEL]: TB, [SUBJECT_LABEL]: 'bob' }, {}]
  const clientLabels: Array<Record<string, string>> = [{}, { [`app-${RUN}`]: 'web' }, { [`app-${RUN}`]: 'db', tier: 'x' }]
  let i = 0
  for (const owner of owners) {
    for (const labels of clientLabels) {
      const name = `lists-${RUN}-${i++}`
      const c = await direct('POST', `/containers/create?name=${name}`, { Image: IMAGE, Cmd: ['true'], Labels: { ...labels, ...owner } })
      if (c.status !== 201) throw new Error(`create: ${c.status} ${c.text}`)
      made.push(['containers', c.json.Id])
      const v = await direct('POST', '/volumes/create', { Name: name, Labels: { ...labels, ...owner } })
      if (v.status !== 201) throw new Error(`volume: ${v.status} ${v.text}`)
      made.push(['volumes', name])
    }
  }
  const app = `app-${RUN}`
  const filters: Array<[string, object]> = [
    ['none', {}],
    ['a label key', { label: [app] }],
    ['a label key=value', { label: [`${app}=web`] }],
    ['two label terms (ANDed)', { label: [`${app}=db`, 'tier=x'] }],
    ['the legacy set form', { label: { [`${app}=web`]: true } }],
    ['an owner label term (matches nothing for a tenant)', { label: [`${TENANT_LABEL}=${TA}`] }],
    ['another tenant\'s owner label', { label: [`${TENANT_LABEL}=${TB}`] }],
    ['the subject label', { label: [SUBJECT_LABEL] }],
    ['label! of a client label', { 'label!': [`${app}=web`] }],
    ['label! of the owner label (excludes nothing)', { 'label!': [TENANT_LABEL] }],
    ['name', { name: [`lists-${RUN}-`] }],
    ['status (containers)', { status: ['created'] }],
    ['dangling (volumes)', { dangling: ['true'] }],
    ['several at once', { label: [app], name: [`lists-${RUN}`] }],
  ]
  const mine = (labels: any): boolean => labels?.[TENANT_LABEL] === TA
  /** The engine's answer as the tenant should see it: the client's own filters, then A's objects only, owner labels hidden. */
  const expected = (xs: any[], id: (x: any) => string): Array<[string, unknown]> =>
    xs.filter((x) => mine(x.Labels) && String(x.Name ?? x.Names?.[0]).includes(`lists-${RUN}-`)).map((x) => [id(x), hideOwner(x, ['Labels'], x.Name !== undefined ? null : {}).Labels] as [string, unknown]).sort()
  const seen = (xs: any[], id: (x: any) => string): Array<[string, unknown]> =>
    xs.filter((x) => String(x.Name ?? x.Names?.[0]).includes(`lists-${RUN}-`)).map((x) => [id(x), x.Labels] as [string, unknown]).sort()
  for (const [what, f] of filters) {
    // The label! term naming the owner label is read as the tenant sees its objects: no object
    // carries one, so it excludes nothing; the owner-label term matches nothing (labels.ts).
    const engineFilter = what.startsWith('label! of the owner') ? {} : f
    const q = `filters=${encodeURIComponent(JSON.stringify(f))}`
    const eq = `filters=${encodeURIComponent(JSON.stringify(engineFilter))}`
    const ownerTerm = what.includes('owner label term') || what.includes('another tenant') || what.includes('subject label')
    if (what !== 'dangling (volumes)') {
      const gwList = await asA('GET', `/v1.41/containers/json?all=1&${q}`)
      const engList = await direct('GET', `/v1.41/containers/json?all=1&${eq}`)
      t.equal(gwList.status, engList.status, `containers, ${what}: the engine's status`)
      if (engList.status !== 200) t.equal(gwList.json?.message, engList.json?.message, `containers, ${what}: the engine's message (${String(engList.json?.message)})`)
      else {
        const want = ownerTerm ? [] : expected(engList.json, (c) => c.Id)
        t.same(seen(gwList.json, (c) => c.Id), want, `containers, ${what}: ${want.length} of the engine's, with the client's labels`)
      }
    }
    if (what !== 'status (containers)') {
      const gwList = await asA('GET', `/v1.41/volumes?${q}`)
      const engList = await direct('GET', `/v1.41/volumes?${eq}`)
      t.equal(gwList.status, engList.status, `volumes, ${what}: the engine's status`)
      if (engList.status !== 200) t.equal(gwList.json?.message, engList.json?.message, `volumes, ${what}: the engine's message (${String(engList.json?.message)})`)
      else {
        const want = ownerTerm ? [] : expected(engList.json.Volumes ?? [], (v) => v.Name)
        t.same(seen(gwList.json.Volumes ?? [], (v) => v.Name), want, `volumes, ${what}: ${want.length} of the engine's`)
      }
    }
  }
  // Malformed filters: refused with the engine's status, nothing listed.
  for (const [what, raw] of [['not JSON', 'notjson'], ['a string instead of a list', '{"label":"x"}'], ['a number in the list', '{"label":[1]}']]) {
    const q = `filters=${encodeURIComponent(raw)}`
    const gwList = await asA('GET', `/v1.41/containers/json?all=1&${q}`)
    const engList = await direct('GET', `/v1.41/containers/json?all=1&${q}`)
    // dockerd 20.10 answers 500 here (its filter errors were not yet typed); later engines 400, as the gateway does.
    t.ok(engList.status >= 400, `malformed filters, ${what}: the engine refuses it (${engList.status}: ${String(engList.json?.message)})`)
    t.equal(gwList.status, 400, `malformed filters, ${what}: refused, 400`)
    t.type(gwList.json?.message, 'string', `malformed filters, ${what}: in the engine's {"message"} shape, nothing listed`)
  }
})

t.test('on the engine: 240 containers of 12 tenants, the tenant\'s list holds its own 20, byte for byte as before', async (t) => {
  const gw2 = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`)
  const ids: string[] = []
  t.teardown(async () => {
    for (const id of ids) await direct('DELETE', `/containers/${id}?force=1`)
    await gw2.close()
  })
  const run = randomBytes(3).toString('hex')
  const tenant = `many-0-${run}`
  const mine = new Set<string>()
  const others = new Set<string>()
  for (let i = 0; i < 240; i += 8) {
    await Promise.all(Array.from({ length: 8 }, async (_x, j) => {
      const k = i + j
      const owner = `many-${k % 12}-${run}`
      // Client labels of every kind: none, escaped characters, a label named like the owner's.
      const labels = k % 3 === 0 ? {} : k % 3 === 1 ? { app: `a<&>"\\${k}` } : { [`${TENANT_LABEL}.x`]: tenant, tier: String(k) }
      const c = await direct('POST', `/containers/create?name=many-${run}-${k}`, { Image: IMAGE, Cmd: ['true'], Labels: { ...labels, [TENANT_LABEL]: owner, ...(k % 24 === 0 ? {} : { [SUBJECT_LABEL]: 'alice' }) } })
      if (c.status !== 201) throw new Error(`create: ${c.status} ${c.text}`)
      ids.push(c.json.Id)
      ;(owner === tenant ? mine : others).add(c.json.Id)
    }))
  }
  const token = jwt.sign({ sub: 'alice', tenant, roles: ['tenant'], exp: Math.floor(Date.now() / 1000) + 3600 }, SECRET, { algorithm: 'HS256' })
  const listed = await request(gw2.socket, 'GET', '/v1.41/containers/json?all=1', undefined, { token })
  t.equal(listed.status, 200, 'listed')
  const seen: any[] = listed.json
  t.same(seen.map((c) => c.Id).sort(), [...mine].sort(), `every one of the tenant's ${mine.size} containers, once`)
  t.notOk(seen.some((c) => others.has(c.Id)), 'no other tenant\'s container')
  t.notOk(seen.some((c) => OWNER_KEYS.some((k) => Object.hasOwn(c.Labels ?? {}, k))), 'no owner label shown')
  // The engine's answer to the filter the gateway sends, narrowed by the scan it replaced: the same bytes.
  const engineAnswer = await direct('GET', `/v1.41/containers/json?all=1&filters=${encodeURIComponent(JSON.stringify({ label: [`${TENANT_LABEL}=${tenant}`] }))}`)
  const before = narrowListBefore(Buffer.from(engineAnswer.text), { ...CONTAINERS, keep: (o) => o === tenant })
  t.equal(listed.text, before?.toString(), 'byte for byte what the scan it replaced answered')
  // And the engine's whole list, decoded, filtered and re-encoded: the same document.
  const all = await direct('GET', '/v1.41/containers/json?all=1')
  const want = (all.json as any[]).filter((c) => c.Labels?.[TENANT_LABEL] === tenant).map((c) => hideOwner(c, ['Labels'], {}))
  t.same(seen, want, 'the engine\'s own elements, owner labels hidden, in its order')
})
