/**
 * A counting relay in front of the engine's socket: bytes are piped both ways
 * unchanged, and the HTTP request lines going to the engine are counted. A second
 * gateway process with this relay as its upstream shows how many engine round trips a
 * request costs (ownership checks: at most one; none for lists). Not used for timing.
 */
import fs from 'node:fs'
import net from 'node:net'

export interface Relay {
  readonly socket: string
  /** Requests seen so far, and the last few of them ("GET /v1.41/containers/json"). */
  count (): number
  recent (): string[]
  close (): Promise<void>
}

const REQUEST_LINE = /(?:^|\r\n)(GET|HEAD|POST|PUT|DELETE) (\S+) HTTP\/1\.[01]\r\n/g

export async function startRelay (socket: string, upstream: string): Promise<Relay> {
  let n = 0
  const last: string[] = []
  const open = new Set<net.Socket>()
  const server = net.createServer((client) => {
    const engine = net.connect(upstream)
    open.add(client)
    open.add(engine)
    client.on('data', (chunk: Buffer) => {
      // Request heads are small and written at once by the gateway's HTTP client.
      for (const m of chunk.toString('latin1').matchAll(REQUEST_LINE)) {
        n++
        last.push(`${m[1]} ${m[2]}`)
        if (last.length > 50) last.shift()
      }
    })
    client.pipe(engine)
    engine.pipe(client)
    const done = (): void => { client.destroy(); engine.destroy(); open.delete(client); open.delete(engine) }
    client.on('error', done)
    engine.on('error', done)
    client.on('close', done)
    engine.on('close', done)
  })
  fs.rmSync(socket, { force: true })
  await new Promise<void>((resolve, reject) => { server.once('error', reject); server.listen(socket, resolve) })
  return {
    socket,
    count: () => n,
    recent: () => [...last],
    close: async () => {
      for (const s of open) s.destroy()
      if (server.listening) await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}
