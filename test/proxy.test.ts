// What the gateway forwards, and what it refuses to, at the HTTP level.
// Against the real engine wherever the engine can show it; a byte-recording upstream
// where only the bytes on the wire can (what exactly the engine would have received).
import http from 'node:http'
import net from 'node:net'
import jwt from 'jsonwebtoken'
import t from 'tap'
import { engine, startTestGateway, uniqueName, type TestGateway } from './helpers/gateway'

interface Answer { status: number, headers: http.IncomingHttpHeaders, body: string }

/** One request over a unix socket or to host:port, with headers given exactly. */
async function request (to: { socketPath: string } | { host: string, port: number }, method: string, path: string, headers: http.OutgoingHttpHeaders = {}, body?: string | string[]): Promise<Answer> {
  return await new Promise((resolve, reject) => {
    const req = http.request({ ...to, method, path, headers, agent: false }, (res) => {
      let data = ''
      res.setEncoding('utf8')
      res.on('data', (c: string) => { data += c })
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: data }))
    })
    req.on('error', reject)
    for (const part of Array.isArray(body) ? body : body === undefined ? [] : [body]) req.write(part)
    req.end()
  })
}

function tcpOf (gw: TestGateway): { host: string, port: number } {
  const [host, port] = gw.tcp.split(':')
  return { host, port: Number(port) }
}

/**
 * The gateway's own subscription to the engine's event stream (the tenancy stage keeps
 * its ownership cache fresh with it): `GET /events`, unversioned, opened at start.
 * Not something a client sent, so the recorder leaves it out.
 */
const OWN_EVENTS = /GET \/events HTTP\/1\.1\r\n(?:[^\r\n]+\r\n)*\r\n/g

/**
 * An upstream that records the raw bytes it receives and answers with a fixed response
 * (or holds the connection open). It stands where the engine would, to show what the
 * gateway puts on the wire on behalf of its clients.
 */
async function recorder (answer: string | null): Promise<{ url: string, received: () => string, connections: net.Socket[], forwarding: () => net.Socket | undefined, close: () => Promise<void> }> {
  const chunks: Buffer[] = []
  const connections: net.Socket[] = []
  const perConnection = new Map<net.Socket, Buffer[]>()
  const server = net.createServer((sock) => {
    connections.push(sock)
    perConnection.set(sock, [])
    sock.on('data', (b) => {
      chunks.push(b)
      perConnection.get(sock)?.push(b)
      if (answer !== null && Buffer.concat(perConnection.get(sock) ?? []).includes('\r\n\r\n')) sock.write(answer)
    })
    sock.on('error', () => {})
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as net.AddressInfo
  const text = (bufs: Buffer[]): string => Buffer.concat(bufs).toString('latin1').replace(OWN_EVENTS, '')
  return {
    url: `tcp://127.0.0.1:${port}`,
    received: () => text(chunks),
    connections,
    /** The first connection carrying a request other than the gateway's own event subscription. */
    forwarding: () => connections.find((c) => text(perConnection.get(c) ?? []) !== ''),
    close: async () => {
      for (const c of connections) c.destroy()
      await new Promise((resolve) => server.close(resolve))
    },
  }
}

const ENGINE_OK = 'HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nConnection: keep-alive, X-Up-Hop\r\nX-Up-Hop: 1\r\nKeep-Alive: timeout=1\r\nX-Kept: up\r\n\r\nOK'

t.test('ambiguous or unknown paths are refused and never reach the engine', async (t) => {
  const gw = await startTestGateway()
  t.teardown(() => gw.close())
  const direct = { socketPath: engine().socket }
  const variants: Array<[string, number]> = [
    ['/v1.41/volumes//create', 400],
    ['/v1.41/volumes/./create', 400],
    ['/v1.41/x/../volumes/create', 400],
    ['/v1.41/Volumes/create', 400],
    ['/V1.41/volumes/create', 400],
    ['/v1.041/volumes/create', 400],
    ['/v1.41/volumes/create/', 400],
    ['/v1.41/volumes%2fcreate', 400],
    ['/v1.20/volumes/create', 400],
    ['/v1.41/volumes/create/more', 404],
  ]
  for (const [path, status] of variants) {
    const name = uniqueName('never')
    const res = await request({ socketPath: gw.socket }, 'POST', path, { 'content-type': 'application/json' }, JSON.stringify({ Name: name }))
    t.equal(res.status, status, `${path} -> ${status}`)
    t.equal(res.headers['content-type'], 'application/json')
    t.type((JSON.parse(res.body) as { message: unknown }).message, 'string', 'engine-style error body')
    const check = await request(direct, 'GET', `/v1.41/volumes/${name}`)
    t.equal(check.status, 404, `no volume ${name} on the engine`)
  }
  // The same request, well-formed, does reach the engine.
  const name = uniqueName('vol')
  const ok = await request({ socketPath: gw.socket }, 'POST', '/v1.41/volumes/create', { 'content-type': 'application/json' }, JSON.stringify({ Name: name }))
  t.equal(ok.status, 201)
  t.equal((await request(direct, 'GET', `/v1.41/volumes/${name}`)).status, 200)
  await request(direct, 'DELETE', `/v1.41/volumes/${name}`)
})

t.test('answers match the engine, versioned and unversioned', async (t) => {
  const gw = await startTestGateway()
  t.teardown(() => gw.close())
  const direct = { socketPath: engine().socket }
  const through = { socketPath: gw.socket }
  for (const path of ['/_ping', '/v1.41/_ping', '/v1.41/containers/no-such-container-x/json', '/images/no-such-image-x/json', '/v1.41/info?x=1']) {
    const [a, b] = [await request(direct, 'GET', path), await request(through, 'GET', path)]
    t.equal(b.status, a.status, `${path} status`)
    t.equal(b.headers['api-version'], a.headers['api-version'], `${path} Api-Version`)
    if (path.includes('info')) t.equal((JSON.parse(b.body) as { ID: string }).ID, (JSON.parse(a.body) as { ID: string }).ID, 'same engine')
    else t.equal(b.body, a.body, `${path} body`)
  }
  const head = await request(through, 'HEAD', '/_ping')
  t.equal(head.status, 200)
  t.equal(head.body, '')
  t.equal(head.headers['api-version'], (await request(direct, 'HEAD', '/_ping')).headers['api-version'])
  const tcp = await request(tcpOf(gw), 'GET', '/v1.41/version')
  t.equal(tcp.status, 200, 'TCP listener serves too')
})

t.test('on the wire: exact target, end-to-end headers only, fresh Content-Length for inspected bodies', async (t) => {
  const up = await recorder(ENGINE_OK)
  // A valid token: the gateway authenticates with it and consumes it.
  const secret = 'proxy-test-secret'
  const gw = await startTestGateway(`auth: { jwt: { secret: ${secret} } }\n`, up.url)
  t.teardown(async () => { await gw.close(); await up.close() })

  const res = await request({ socketPath: gw.socket }, 'GET', '/v1.41/images/busybox%40sha256:abc/json?x=1&x=2', {
    connection: 'keep-alive, X-Client-Hop',
    'x-client-hop': 'secret',
    'keep-alive': 'timeout=5',
    te: 'trailers',
    'proxy-authorization': 'Basic cHJveHk6c2VjcmV0',
    authorization: `Bearer ${jwt.sign({ sub: 'proxy-test', roles: ['admin'] }, secret, { expiresIn: 60 })}`,
    'x-kept': 'client',
  })
  const wire = up.received()
  t.match(wire, /^GET \/v1\.41\/images\/busybox%40sha256:abc\/json\?x=1&x=2 HTTP\/1\.1\r\n/, 'request target forwarded exactly')
  t.match(wire, /\r\nx-kept: client\r\n/i)
  for (const h of ['x-client-hop', 'keep-alive', 'te', 'proxy-authorization', 'authorization']) {
    t.notMatch(wire, new RegExp(`\\r\\n${h}:`, 'i'), `${h} not forwarded`)
  }
  t.equal(res.status, 200)
  t.equal(res.body, 'OK')
  t.equal(res.headers['x-kept'], 'up')
  t.notOk(res.headers['x-up-hop'], 'header named in the engine\'s Connection not passed back')
})

t.test('a chunked JSON body is read, checked and forwarded with its length', async (t) => {
  const up = await recorder(ENGINE_OK)
  const gw = await startTestGateway('', up.url)
  t.teardown(async () => { await gw.close(); await up.close() })
  const parts = ['{"Image":', '"busybox",', '"Cmd":["true"]}']
  await request({ socketPath: gw.socket }, 'POST', '/v1.41/containers/create', { 'content-type': 'application/json', 'transfer-encoding': 'chunked' }, parts)
  const wire = up.received()
  const body = parts.join('')
  t.match(wire, new RegExp(`\\r\\ncontent-length: ${body.length}\\r\\n`, 'i'))
  t.notMatch(wire, /transfer-encoding/i)
  t.ok(wire.endsWith(`\r\n\r\n${body}`), 'exact bytes')
})

t.test('refused before forwarding: repeated single-valued headers, oversized bodies', async (t) => {
  const up = await recorder(ENGINE_OK)
  const gw = await startTestGateway('limits: { jsonBodyBytes: 1000 }\n', up.url)
  t.teardown(async () => { await gw.close(); await up.close() })
  const dup = await request({ socketPath: gw.socket }, 'POST', '/v1.41/images/create?fromImage=busybox', { 'x-registry-auth': ['e30=', 'eyJ1c2VybmFtZSI6ImEifQ=='] })
  t.equal(dup.status, 400)
  t.match(dup.body, /x-registry-auth is repeated/)
  const big = JSON.stringify({ Image: 'busybox', Env: ['A='.padEnd(2000, 'x')] })
  const large = await request({ socketPath: gw.socket }, 'POST', '/v1.41/containers/create', { 'content-type': 'application/json' }, big)
  t.equal(large.status, 413)
  const chunked = await request({ socketPath: gw.socket }, 'POST', '/v1.41/containers/create', { 'content-type': 'application/json', 'transfer-encoding': 'chunked' }, [big.slice(0, 600), big.slice(600)])
  t.equal(chunked.status, 413, 'chunked bodies are counted as they arrive')
  t.equal(up.received(), '', 'nothing reached the upstream')
  // Repeats of other headers are forwarded as repeated lines (BuildKit's session relies on it).
  await request({ socketPath: gw.socket }, 'GET', '/v1.41/_ping', { 'x-docker-expose-session-grpc-method': ['/a', '/b'] })
  t.match(up.received(), /x-docker-expose-session-grpc-method: \/a\r\nx-docker-expose-session-grpc-method: \/b\r\n/i)
})

t.test("a client's disconnect ends the upstream request, before and after the answer starts", async (t) => {
  for (const answer of [null, 'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{"a":\r\n']) {
    const up = await recorder(answer)
    const gw = await startTestGateway('', up.url)
    const client = http.request({ socketPath: gw.socket, method: 'GET', path: '/v1.41/events', agent: false })
    client.on('error', () => {})
    client.end()
    const gotAnswer = answer ? new Promise((resolve) => client.once('response', resolve)) : Promise.resolve()
    while (up.forwarding() === undefined) await new Promise((resolve) => setTimeout(resolve, 20))
    await gotAnswer
    const upstreamClosed = new Promise((resolve) => up.forwarding()?.once('close', resolve))
    client.destroy()
    await upstreamClosed
    t.pass(answer ? 'upstream closed after a streamed answer began' : 'upstream closed while waiting for the answer')
    t.equal(gw.gateway.inflight.activeStreams, 0, 'no stream left open')
    await gw.close()
    await up.close()
  }
})
