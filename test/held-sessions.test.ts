// Held sessions leave nothing behind: after 300 `logs -f`, `events` and attach sessions of
// ten tenants open and close, the gateway's engine connections and tracked streams are back where
// they started (counts, never times or bytes). undici's Pool keeps every Client it ever
// opened, and the engine socket of an ended stream stayed open in it: 3,000 held
// sessions left thousands of sockets and Clients behind (issue 21).
import { randomBytes } from 'node:crypto'
import http from 'node:http'
import type { Socket } from 'node:net'
import jwt from 'jsonwebtoken'
import t from 'tap'
import { engine, request, startTestGateway, uniqueName, waitUntil, type TestGateway } from './helpers/gateway'

const SESSIONS = 300
/** Tenants, each with a container of its own (within the shipped per-tenant caps on sessions and streams). */
const TENANTS = 10
const SECRET = randomBytes(32).toString('hex')

let gw: TestGateway
const tenants = Array.from({ length: TENANTS }, (_x, i) => ({
  token: jwt.sign({ sub: `held-${i}`, tenant: `team-held-${i}`, roles: ['tenant'] }, SECRET, { algorithm: 'HS256', expiresIn: '1h' }),
  container: '',
}))

t.before(async () => {
  gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`)
  for (const tenant of tenants) {
    const created = await request(gw.socket, 'POST', `/v1.41/containers/create?name=${uniqueName('held')}`, {
      Image: engine().image,
      Cmd: ['sh', '-c', 'while :; do echo tick; sleep 1; done'],
      HostConfig: { NetworkMode: 'none' },
    }, { token: tenant.token })
    if (created.status !== 201) throw new Error(`create: ${created.status} ${created.text}`)
    tenant.container = (created.json as { Id: string }).Id
    await request(gw.socket, 'POST', `/v1.41/containers/${tenant.container}/start`, undefined, { token: tenant.token })
  }
})

t.teardown(async () => {
  for (const tenant of tenants) if (tenant.container) await request(gw.socket, 'DELETE', `/v1.41/containers/${tenant.container}?force=1`, undefined, { token: tenant.token })
  await gw.close()
})

interface Held { first: Promise<void>, close (): void }

function hold (kind: 'logs' | 'events' | 'attach', tenant: { token: string, container: string }): Promise<Held> {
  const attach = kind === 'attach'
  const container = tenant.container
  const auth = { authorization: `Bearer ${tenant.token}` }
  return new Promise((resolve, reject) => {
    const req = http.request({
      socketPath: gw.socket,
      method: attach ? 'POST' : 'GET',
      path: kind === 'logs'
        ? `/v1.41/containers/${container}/logs?follow=1&stdout=1&tail=1`
        : kind === 'events' ? '/v1.41/events' : `/v1.41/containers/${container}/attach?stream=1&stdout=1`,
      agent: false,
      headers: attach ? { ...auth, connection: 'Upgrade', upgrade: 'tcp' } : auth,
    })
    req.on('error', reject)
    req.on('response', (res) => {
      if (res.statusCode !== 200) { reject(new Error(`${kind}: ${res.statusCode}`)); return }
      res.on('error', () => {})
      resolve({ first: Promise.resolve(), close: () => { res.destroy(); req.destroy() } })
    })
    req.on('upgrade', (res, sock: Socket) => {
      sock.on('error', () => {})
      // The first line the container prints after the attach: the session is live end to end.
      const first = new Promise<void>((resolve) => sock.once('data', () => resolve()))
      resolve({ first, close: () => { sock.destroy() } })
    })
    req.end()
  })
}

t.test(`${SESSIONS} held sessions open and close; the engine connections and tracked streams return to the start`, async (t) => {
  const { inflight, upstream } = gw.gateway
  const before = { streams: inflight.activeStreams, owned: upstream.owned, running: upstream.pool.stats.running }
  t.equal(before.owned, 0, 'no stream connections before')

  const kinds = ['logs', 'events', 'attach'] as const
  const held: Held[] = []
  try {
    for (let i = 0; i < SESSIONS; i += 20) {
      held.push(...await Promise.all(Array.from({ length: 20 }, async (_x, j) => await hold(kinds[(i + j) % 3]!, tenants[(i + j) % TENANTS]!))))
    }
    await Promise.all(held.map(async (h) => await h.first))
    t.equal(upstream.owned, SESSIONS / 3 * 2, 'each logs -f and events holds one engine connection of its own')
    t.equal(inflight.activeStreams, before.streams + SESSIONS, 'every session is tracked (closed at shutdown)')
  } finally {
    for (const h of held) h.close()
  }
  await waitUntil(() => upstream.owned === 0 && inflight.activeStreams === before.streams, 20_000)
  t.equal(upstream.owned, 0, 'every stream\'s engine connection is closed with it')
  t.equal(inflight.activeStreams, before.streams, 'no session is still tracked')
  // The pool serves the small requests only (inspects, pings): nothing of the held
  // streams runs on it (its idle keep-alive connections are not counted: they depend on
  // how many small requests ran at once).
  // (The gateway's own long requests, its event watchers, run there before and after.)
  await waitUntil(() => upstream.pool.stats.running === before.running, 20_000)
  t.equal(upstream.pool.stats.running, before.running, 'no more requests running on the pool than before')
})
