/**
 * Rate limits and caps on open sessions and streams (config `rates`, src/gateway/rates.ts),
 * against the real engine, with limits small enough to reach in a few requests:
 *
 *   - a tenant over its rate of reads gets `429` in the engine's shape, naming the
 *     operation, the tenant and the rule, with a `Retry-After`; another tenant's requests
 *     in the same period all go through, and the admin is not limited;
 *   - a tenant with as many long streams (events) or hijacked sessions (attach, over
 *     the upgrade path) open as it may gets `429` for one more, and gets it once one ends;
 *   - `per: [tenant]` buckets are shared by the tenant's subjects, `per: [subject]` ones
 *     are each subject's, `per: [subject, tenant]` takes from both; the first role
 *     listed in `rates.roles` that an identity holds decides (the policy still sees
 *     every role: these identities are tenants to it);
 *   - refusals are audited as denials by their rule and counted
 *     (portcullis_rate_limited_total, requests_total, denials_total).
 *
 * The rates are so slow (a token per 1000 s) that a bucket does not refill during the test:
 * what is asserted is counts of answers, never how long anything took.
 */
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import net from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import jwt from 'jsonwebtoken'
import t from 'tap'
import { rateClass, holdClass } from '../src/api/catalog/classes'
import { operations } from '../src/api/catalog/operations'
import { parseConfig } from '../src/config'
import { RateLimits, RateRefusal } from '../src/gateway/rates'
import { engine, request, startTestGateway, uniqueName, type TestGateway } from './helpers/gateway'

const SECRET = randomBytes(32).toString('hex')
const PREFIX = uniqueName('pcrate')
const [A, B, C, D, E] = ['a', 'b', 'c', 'd', 'e'].map((x) => `${PREFIX}-${x}`)
const READS = 12
const SLOW = 0.001
const token = (tenant: string, sub = `${tenant}-user`, roles = ['tenant']): string =>
  jwt.sign({ sub, tenant, roles, exp: Math.floor(Date.now() / 1000) + 3600 }, SECRET, { algorithm: 'HS256' })

const CONFIG = `auth: { jwt: { secret: ${SECRET} } }
metrics: { tenants: [${A}, ${B}, ${C}] }
rates:
  roles:
    admin: {}
    solo: { per: [subject], read: { rate: ${SLOW}, burst: 4 } }
    both: { per: [subject, tenant], read: { rate: ${SLOW}, burst: 6 } }
    tenant: { read: { rate: ${SLOW}, burst: ${READS} }, write: { rate: ${SLOW}, burst: 8 }, sessions: 2, streams: 2 }
  others: null
`

let gw: TestGateway

interface Answer { status: number, headers: Record<string, string>, text: string, json: any }

/**
 * A raw request whose answer resolves at its head for a 101 or a streamed 200 (the
 * connection stays open: `socket`), else at its end.
 */
function open (head: string[]): { answer: Promise<Answer>, socket: net.Socket } {
  const socket = net.connect(gw.socket)
  socket.on('error', () => {})
  const answer = new Promise<Answer>((resolve, reject) => {
    let data = Buffer.alloc(0)
    const timer = setTimeout(() => { socket.destroy(); reject(new Error(`no answer to ${head[0]}`)) }, 20_000)
    const onData = (chunk: Buffer): void => {
      data = Buffer.concat([data, chunk])
      const end = data.indexOf('\r\n\r\n')
      if (end < 0) return
      const lines = data.subarray(0, end).toString('latin1').split('\r\n')
      const headers: Record<string, string> = {}
      for (const l of lines.slice(1)) { const i = l.indexOf(':'); headers[l.slice(0, i).toLowerCase()] = l.slice(i + 1).trim() }
      const status = Number(lines[0].split(' ')[1])
      const text = data.subarray(end + 4).toString()
      const length = Number(headers['content-length'] ?? NaN)
      if (status === 101 || (status === 200 && Number.isNaN(length)) || text.length >= length) {
        clearTimeout(timer)
        socket.off('data', onData)
        let json: any
        try { json = JSON.parse(text) } catch { json = undefined }
        resolve({ status, headers, text, json })
      }
    }
    socket.on('data', onData)
  })
  socket.write([...head, 'Host: docker', '', ''].join('\r\n'))
  return { answer, socket }
}

async function metric (series: string): Promise<number> {
  const text = await gw.gateway.metrics.metrics()
  const line = text.split('\n').find((l) => l.startsWith(series + ' '))
  return line === undefined ? 0 : Number(line.slice(series.length + 1))
}

/** Poll a metric until it has `value` (at most 10 s); the caller asserts. */
async function metricBecomes (series: string, value: number): Promise<void> {
  for (let i = 0; i < 100 && await metric(series) !== value; i++) await sleep(100)
}

const ping = async (tok: string): Promise<Answer> => {
  const r = await request(gw.socket, 'GET', '/_ping', undefined, { token: tok })
  return { ...r, headers: {} }
}

t.before(async () => {
  gw = await startTestGateway(CONFIG)
})

t.teardown(async () => {
  const list = await request(engine().socket, 'GET', `/containers/json?all=1&filters=${encodeURIComponent(JSON.stringify({ name: [PREFIX] }))}`)
  for (const c of list.json ?? []) await request(engine().socket, 'DELETE', `/containers/${String(c.Id)}?force=1`)
  await gw?.close()
})

t.test('operation classes come from the catalog', async (t) => {
  const op = (id: string) => operations.find((o) => o.id === id)!
  t.equal(rateClass(op('SystemPing')), 'read')
  t.equal(rateClass(op('ContainerCreate')), 'write')
  for (const id of ['ImageBuild', 'ImageCreate', 'ImagePush', 'ImageLoad', 'ImageGet', 'PutContainerArchive']) t.equal(rateClass(op(id)), 'transfer', id)
  t.equal(holdClass(op('ContainerAttach')), 'session')
  t.equal(holdClass(op('ExecStart')), 'session')
  t.equal(holdClass(op('SystemEvents')), 'stream')
  t.equal(holdClass(op('ContainerLogs')), 'stream')
  t.equal(holdClass(op('ContainerList')), null)
})

function thrown (f: () => unknown): RateRefusal | undefined {
  try { f() } catch (err) { if (err instanceof RateRefusal) return err; throw err }
  return undefined
}

t.test('an identity without a tenant: its own buckets, one token a request whatever per says', async (t) => {
  // The limiter alone (no engine is needed to count tokens); the gateway's use of it is tested below.
  const config = parseConfig('rates: { roles: { both: { per: [tenant, subject], read: { rate: 0.001, burst: 3 }, streams: 1 } }, others: null }\n', '/p.yaml').rates
  const limits = new RateLimits(config)
  const ping = operations.find((o) => o.id === 'SystemPing')!
  const events = operations.find((o) => o.id === 'SystemEvents')!
  const who = { subject: 'robot', tenant: null, roles: ['both'], method: 'jwt' as const }
  for (let i = 0; i < 3; i++) t.doesNotThrow(() => limits.admit(who, ping), `read ${i + 1} of a burst of 3`)
  const refused = thrown(() => limits.admit(who, ping))
  t.ok(refused instanceof RateRefusal, 'the fourth is refused: one bucket, not two')
  t.equal(refused?.rule, 'rates.both.read')
  t.match(refused?.message, /^SystemPing refused: subject robot is over its rate limit for reads/)
  t.same(limits.admit({ ...who, roles: ['admin'] }, ping)(), undefined, 'a role not listed, with others: null: not limited')
  const limits2 = new RateLimits(config)
  const close = limits2.admit(who, events)
  const full = thrown(() => limits2.admit(who, events))
  t.equal(full?.limit, 'streams', 'a second stream is refused')
  t.equal(full?.retryAfter, 1)
  close()
  close()
  t.doesNotThrow(() => limits2.admit(who, events)(), 'the slot is given back once')
})

t.test('a tenant over its rate is refused; another tenant and the admin are not', async (t) => {
  const a = token(A)
  const b = token(B)
  // A sends twice its burst while B sends its requests in the same period.
  const aAnswers: Array<Promise<Answer>> = []
  const bAnswers: Array<Promise<Answer>> = []
  for (let i = 0; i < 2 * READS; i++) {
    aAnswers.push(ping(a))
    if (i % 2 === 0) bAnswers.push(ping(b))
  }
  const [as, bs] = await Promise.all([Promise.all(aAnswers), Promise.all(bAnswers)])
  t.equal(bs.length, READS, 'all of B\'s requests completed')
  t.same(bs.map((r) => r.status), Array(READS).fill(200), 'B is never refused')
  const ok = as.filter((r) => r.status === 200).length
  const refused = as.filter((r) => r.status === 429)
  t.equal(ok + refused.length, 2 * READS, 'A gets 200 or 429')
  t.ok(ok >= READS && ok <= READS + 1, `A gets its burst (${ok} of ${2 * READS})`)
  t.ok(refused.length >= READS - 1, 'the rest is refused')
  t.match(refused[0].json, { message: new RegExp(`^SystemPing refused: tenant ${A} is over its rate limit for reads \\(rule rates\\.tenant\\.read: ${SLOW}/s, burst ${READS}\\); retry in \\d+ s$`) }, 'the engine\'s error shape, naming the operation, the tenant and the rule')
  t.notMatch(refused[0].text, SECRET, 'no secret in the message')

  // The head, on a raw request: Retry-After in whole seconds.
  const raw = await open(['GET /v1.41/containers/json HTTP/1.1', `Authorization: Bearer ${a}`]).answer
  t.equal(raw.status, 429)
  t.match(raw.headers['retry-after'], /^[1-9]\d*$/, 'Retry-After in whole seconds')
  t.ok(Number(raw.headers['retry-after']) <= Math.ceil(1 / SLOW), 'at most the time one token takes')
  t.equal(raw.headers['content-type'], 'application/json')
  t.match(raw.json.message, /^ContainerList refused: tenant .*\(rule rates\.tenant\.read/)

  // Another subject of A's tenant shares the tenant's bucket (per: [tenant]).
  t.equal((await ping(token(A, 'someone-else'))).status, 429, 'per tenant: another subject of the tenant is refused too')

  // The admin (the listener's identity) is not limited.
  const admin = await Promise.all(Array.from({ length: 3 * READS }, async () => (await request(gw.socket, 'GET', '/_ping')).status))
  t.same(admin, Array(3 * READS).fill(200), 'admin: {} is unlimited')

  // Audited as a denial by the rule, and counted.
  const records = fs.readFileSync(`${gw.dir}/audit.jsonl`, 'utf8').split('\n').filter((l) => l.includes('RATE_LIMITED')).map((l) => JSON.parse(l))
  t.ok(records.length >= READS, 'each refusal has an audit record')
  t.equal(records[0].decision, 'deny')
  t.match(JSON.stringify(records[0].rule), /rates\.tenant\.read/, 'naming the rule')
  t.equal(records[0].status, 429)
  t.notMatch(JSON.stringify(records), a, 'no token in the audit trail')
  t.equal(await metric(`portcullis_rate_limited_total{tenant="${A}",class="read",limit="rate"}`), refused.length + 2, 'rate_limited_total counts the refusals by tenant, class and limit')
  t.equal(await metric(`portcullis_rate_limited_total{tenant="${B}",class="read",limit="rate"}`), 0, 'none for B')
  t.equal(await metric(`portcullis_requests_total{operation="SystemPing",tenant="${A}",decision="deny",code="4xx"}`), refused.length + 1, 'requests_total counts them as denials')
  t.ok(await metric('portcullis_denials_total{rule="rates.tenant.read"}') >= refused.length + 2, 'denials_total by the rule')
})

t.test('a cap on long streams: one more is refused until one ends', async (t) => {
  const c = token(C)
  const events = (): { answer: Promise<Answer>, socket: net.Socket } => open(['GET /v1.41/events HTTP/1.1', `Authorization: Bearer ${c}`])
  const first = [events(), events()]
  t.same(await Promise.all(first.map(async (s) => (await s.answer).status)), [200, 200], 'two event streams open')
  const third = await events().answer
  t.equal(third.status, 429, 'the third is refused')
  t.match(third.json.message, new RegExp(`^SystemEvents refused: tenant ${C} has 2 long streams .* open, as many as it may \\(rule rates\\.tenant\\.streams: 2\\)`))
  t.equal(third.headers['retry-after'], '1')
  t.equal(await metric(`portcullis_rate_limited_total{tenant="${C}",class="read",limit="streams"}`), 1, 'counted as a streams refusal')
  first[0].socket.destroy()
  await metricBecomes('portcullis_active_streams', 1)
  const again = events()
  t.equal((await again.answer).status, 200, 'once one has ended, another opens')
  first[1].socket.destroy()
  again.socket.destroy()
  await metricBecomes('portcullis_active_streams', 0)
  t.equal(await metric('portcullis_active_streams'), 0, 'all let go')
})

t.test('a cap on hijacked sessions, over the upgrade path', async (t) => {
  const c = token(C)
  const name = `${PREFIX}-box`
  t.equal((await request(gw.socket, 'POST', `/v1.41/containers/create?name=${name}`, { Image: engine().image, Cmd: ['sleep', '3600'], OpenStdin: true }, { token: c })).status, 201)
  t.equal((await request(gw.socket, 'POST', `/v1.41/containers/${name}/start`, undefined, { token: c })).status, 204)
  const attach = (): { answer: Promise<Answer>, socket: net.Socket } => open([
    `POST /v1.41/containers/${name}/attach?stream=1&stdin=1&stdout=1 HTTP/1.1`,
    `Authorization: Bearer ${c}`, 'Connection: Upgrade', 'Upgrade: tcp', 'Content-Length: 0',
  ])
  const first = [attach(), attach()]
  t.same(await Promise.all(first.map(async (s) => (await s.answer).status)), [101, 101], 'two sessions open')
  const third = await attach().answer
  t.equal(third.status, 429, 'the third is refused')
  t.match(third.json.message, new RegExp(`^ContainerAttach refused: tenant ${C} has 2 hijacked sessions .* \\(rule rates\\.tenant\\.sessions: 2\\)`))
  t.equal(third.headers['retry-after'], '1')
  t.equal(await metric(`portcullis_rate_limited_total{tenant="${C}",class="write",limit="sessions"}`), 1, 'counted as a sessions refusal')
  first[0].socket.destroy()
  await metricBecomes(`portcullis_active_hijacked_sessions{listener="${gw.config.listen[0].name}"}`, 1)
  const again = attach()
  t.equal((await again.answer).status, 101, 'once one has ended, another opens')
  first[1].socket.destroy()
  again.socket.destroy()
})

t.test('per subject, and per subject and tenant', async (t) => {
  const solo = (sub: string): string => token(D, sub, ['tenant', 'solo'])
  for (let i = 0; i < 4; i++) t.equal((await ping(solo('d1'))).status, 200)
  const over = await ping(solo('d1'))
  t.equal(over.status, 429, 'the subject is over its own rate')
  t.match(over.json.message, new RegExp(`subject d1 of tenant ${D} is over its rate limit for reads \\(rule rates\\.solo\\.read`))
  for (let i = 0; i < 4; i++) t.equal((await ping(solo('d2'))).status, 200, 'another subject of the same tenant has a bucket of its own')

  const both = (sub: string): string => token(E, sub, ['tenant', 'both'])
  for (let i = 0; i < 4; i++) t.equal((await ping(both('e1'))).status, 200)
  for (let i = 0; i < 2; i++) t.equal((await ping(both('e2'))).status, 200)
  const tenantOver = await ping(both('e2'))
  t.equal(tenantOver.status, 429, 'the tenant\'s bucket is empty, though e2\'s own is not')
  t.match(tenantOver.json.message, new RegExp(`^SystemPing refused: tenant ${E} is over its rate limit for reads \\(rule rates\\.both\\.read`))
  // E is not in metrics.tenants: counted under `other`.
  t.ok(await metric('portcullis_rate_limited_total{tenant="other",class="read",limit="rate"}') >= 2, 'unlisted tenants count as other')
})
