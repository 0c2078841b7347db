// src/gateway/reads.ts against the run's real engine: an exec's output read into the
// reused buffer and handed to a sink that keeps some reads past the call (a write left
// pending) and stops reading now and then. Every byte must arrive once, in order: a read
// that lands in a buffer a kept chunk still points into would change the kept bytes.
import { once } from 'node:events'
import t from 'tap'
import { connectDirect, directReads } from '../src/gateway/reads'
import { engine, request, sha256, uniqueName } from './helpers/gateway'

const eng = engine()

t.test('an exec of 8 MB of random bytes through connectDirect: kept reads stay intact, stopped reads resume', async (t) => {
  const size = 8 * 1000 * 1000
  const name = uniqueName('pcx-reads')
  const created = await request(eng.socket, 'POST', `/containers/create?name=${name}`, {
    Image: eng.image, Cmd: ['sh', '-c', `head -c ${size} /dev/urandom > /tmp/r && sha256sum /tmp/r && sleep 600`],
  })
  t.equal(created.status, 201)
  t.teardown(() => request(eng.socket, 'DELETE', `/containers/${name}?force=1`))
  t.equal((await request(eng.socket, 'POST', `/containers/${name}/start`)).status, 204)
  let expected = ''
  for (const end = Date.now() + 60_000; expected === '' && Date.now() < end; await new Promise((resolve) => setTimeout(resolve, 200))) {
    expected = /[0-9a-f]{64}/.exec((await request(eng.socket, 'GET', `/containers/${name}/logs?stdout=1`)).text)?.[0] ?? ''
  }
  t.not(expected, '', 'the container hashed its file')
  const exec = await request(eng.socket, 'POST', `/containers/${name}/exec`, { Cmd: ['cat', '/tmp/r'], AttachStdout: true })
  t.equal(exec.status, 201)

  const socket = connectDirect({ path: eng.socket })
  const reads = directReads(socket)
  t.ok(reads, 'a socket of connectDirect has its DirectReads')
  await once(socket, 'connect')
  const body = '{"Detach":false,"Tty":false}'
  socket.write(`POST /exec/${exec.json.Id}/start HTTP/1.1\r\nHost: engine\r\nConnection: Upgrade\r\nUpgrade: tcp\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`)
  // Before `take`: ordinary reads (copies), as the HTTP client reads the engine's answer.
  let head = Buffer.alloc(0)
  while (head.indexOf('\r\n\r\n') < 0) {
    const [chunk] = await once(socket, 'data') as [Buffer]
    head = Buffer.concat([head, chunk])
  }
  socket.pause()
  const at = head.indexOf('\r\n\r\n') + 4
  t.match(head.subarray(0, at).toString(), /^HTTP\/1\.1 101 /, 'the engine upgraded the connection')

  const pieces: Buffer[] = [head.subarray(at)]
  let n = 0
  let held = false
  let stops = 0
  reads!.take({
    bytes: (chunk) => {
      n++
      // Every third read is kept as it is (as a pending write keeps it), the others copied
      // at once (as a write that went out within the call).
      held = n % 3 === 0
      pieces.push(held ? chunk : Buffer.from(chunk))
      if (n % 20 !== 0) return true
      stops++
      setTimeout(() => reads!.more(), 5)
      return false
    },
    holds: () => held,
  })
  await once(socket, 'end')
  socket.destroy()
  // The engine's stream frames (8-byte header, then the payload), as the CLI reads them.
  const framed = Buffer.concat(pieces)
  const payload: Buffer[] = []
  let i = 0
  for (; i + 8 <= framed.length; i += 8 + framed.readUInt32BE(i + 4)) payload.push(framed.subarray(i + 8, i + 8 + framed.readUInt32BE(i + 4)))
  t.equal(i, framed.length, 'whole frames')
  const out = Buffer.concat(payload)
  t.equal(out.length, size, 'every byte')
  t.equal(sha256(out), expected, 'the same bytes, in order, kept reads unchanged by later ones')
  t.ok(n > 100, `${n} reads`)
  t.ok(stops > 2, `reading stopped ${stops} times and resumed`)
})
