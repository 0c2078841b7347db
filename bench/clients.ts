/**
 * The client side of the benchmark. Every function takes the socket (or a pool on it)
 * and nothing else, so the same code measures the engine directly and the gateway.
 */
import http from 'node:http'
import type { Socket } from 'node:net'
import { Readable } from 'node:stream'
import { Pool } from 'undici'
import { tarLength, tarStream } from './tar'

export const API = '/v1.41'

export function pool (socketPath: string, connections: number): Pool {
  // No timeouts from undici itself: each call below bounds its own time.
  return new Pool('http://localhost', { socketPath, connections, headersTimeout: 0, bodyTimeout: 0 })
}

/**
 * Where requests go: a pool on a unix socket, the socket itself (for hijacked streams),
 * and the headers every request carries there (a bearer token, or none).
 */
export interface Endpoint {
  readonly pool: Pool
  readonly socket: string
  readonly headers: Readonly<Record<string, string>>
}

export function endpoint (socket: string, connections: number, headers: Record<string, string> = {}): Endpoint {
  return { pool: pool(socket, connections), socket, headers }
}

/** A JSON call to the Engine API that must succeed. */
export async function call<T = unknown> (e: Endpoint, method: 'GET' | 'POST' | 'PUT' | 'DELETE', path: string, body?: unknown, timeoutMs = 120_000): Promise<T> {
  const r = await e.pool.request({
    method,
    path,
    headers: body === undefined ? { ...e.headers } : { ...e.headers, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(timeoutMs),
  })
  const text = await r.body.text()
  if (r.statusCode >= 300) throw new Error(`${method} ${path}: ${r.statusCode} ${text.trim()}`)
  return (text ? JSON.parse(text) : undefined) as T
}

export interface LoadRun {
  elapsedMs: number
  latenciesMs: Float64Array
}

/**
 * `n` requests, `concurrency` at a time, each read to its end; every answer must be 200.
 * Latency is from just before the request to the end of its body.
 */
export async function load (e: Endpoint, method: 'GET' | 'HEAD', path: string, n: number, concurrency: number, deadline: number): Promise<LoadRun> {
  const p = e.pool
  const headers = e.headers
  const latenciesMs = new Float64Array(n)
  let next = 0
  const worker = async (): Promise<void> => {
    for (;;) {
      const i = next++
      if (i >= n) return
      if (Date.now() > deadline) throw new Error(`${method} ${path}: load run exceeded its time budget`)
      const start = performance.now()
      const r = await p.request({ method, path, headers, signal: AbortSignal.timeout(30_000) })
      await r.body.arrayBuffer()
      latenciesMs[i] = performance.now() - start
      if (r.statusCode !== 200) throw new Error(`${method} ${path}: status ${r.statusCode}`)
    }
  }
  const start = performance.now()
  await Promise.all(Array.from({ length: concurrency }, worker))
  return { elapsedMs: performance.now() - start, latenciesMs }
}

/** Nearest-rank percentile of the latencies (any order). */
export function percentile (sorted: Float64Array, q: number): number {
  if (sorted.length === 0) return NaN
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]
}

/**
 * Counts the payload of a multiplexed stdout/stderr stream (8-byte frame headers:
 * stream, 3 zero bytes, big-endian length), as the engine sends for containers
 * without a TTY. Frames may be split anywhere across chunks.
 */
export class Demux {
  payload = 0
  frames = 0
  private readonly header = Buffer.alloc(8)
  private headerFill = 0
  private bodyLeft = 0

  push (chunk: Buffer): void {
    let i = 0
    while (i < chunk.length) {
      if (this.bodyLeft > 0) {
        const n = Math.min(this.bodyLeft, chunk.length - i)
        this.payload += n
        this.bodyLeft -= n
        i += n
      } else {
        const n = Math.min(8 - this.headerFill, chunk.length - i)
        chunk.copy(this.header, this.headerFill, i, i + n)
        this.headerFill += n
        i += n
        if (this.headerFill === 8) {
          this.headerFill = 0
          this.bodyLeft = this.header.readUInt32BE(4)
          this.frames++
        }
      }
    }
  }

  get complete (): boolean { return this.headerFill === 0 && this.bodyLeft === 0 }
}

export interface Transfer {
  /** Bytes on the wire (response or request body). */
  bytes: number
  /** Payload bytes, where the body is a multiplexed stream. */
  payload?: number
  /** Reads the client saw (chunks delivered by its socket or HTTP parser), where counted. */
  reads?: number
  ms: number
}

/** GET a (large) body and count it; `demux` also counts the multiplexed payload. */
export async function download (e: Endpoint, path: string, demux: boolean, timeoutMs: number): Promise<Transfer> {
  const start = performance.now()
  const r = await e.pool.request({ method: 'GET', path, headers: e.headers, signal: AbortSignal.timeout(timeoutMs) })
  if (r.statusCode !== 200) throw new Error(`GET ${path}: ${r.statusCode} ${(await r.body.text()).trim()}`)
  const d = demux ? new Demux() : undefined
  let bytes = 0
  let reads = 0
  for await (const chunk of r.body as AsyncIterable<Buffer>) {
    bytes += chunk.length
    reads++
    d?.push(chunk)
  }
  const ms = performance.now() - start
  if (d && !d.complete) throw new Error(`GET ${path}: multiplexed stream ended inside a frame`)
  return { bytes, payload: d?.payload, reads, ms }
}

/** PUT a generated one-file tar of `size` bytes into a container at `dir`, chunked as `docker cp` sends it. */
export async function upload (e: Endpoint, containerId: string, dir: string, fileName: string, size: number, timeoutMs: number): Promise<Transfer> {
  const path = `${API}/containers/${containerId}/archive?path=${encodeURIComponent(dir)}`
  const start = performance.now()
  const r = await e.pool.request({
    method: 'PUT',
    path,
    headers: { ...e.headers, 'content-type': 'application/x-tar' },
    body: Readable.from(tarStream(fileName, size), { objectMode: false }),
    signal: AbortSignal.timeout(timeoutMs),
  })
  const text = await r.body.text()
  const ms = performance.now() - start
  if (r.statusCode !== 200) throw new Error(`PUT ${path}: ${r.statusCode} ${text.trim()}`)
  return { bytes: tarLength(size), ms }
}

/** The size the engine reports for a path in a container (`HEAD .../archive`, as `docker cp` stats it). */
export async function statInContainer (e: Endpoint, containerId: string, path: string): Promise<number> {
  const r = await e.pool.request({ method: 'HEAD', path: `${API}/containers/${containerId}/archive?path=${encodeURIComponent(path)}`, headers: e.headers, signal: AbortSignal.timeout(30_000) })
  await r.body.arrayBuffer()
  const header = r.headers['x-docker-container-path-stat']
  if (r.statusCode !== 200 || typeof header !== 'string') throw new Error(`HEAD archive ${path}: ${r.statusCode}`)
  return (JSON.parse(Buffer.from(header, 'base64').toString('utf8')) as { size: number }).size
}

/**
 * Start an exec hijacked the way CLI 28.x does (`Connection: Upgrade`, `Upgrade: tcp`,
 * expecting `101`), read its multiplexed output until the engine closes the stream.
 * Time runs from sending the start request to the end of the stream.
 */
export async function execStart (e: Endpoint, execId: string, timeoutMs: number): Promise<Transfer> {
  const socketPath = e.socket
  const body = JSON.stringify({ Detach: false, Tty: false })
  return await new Promise<Transfer>((resolve, reject) => {
    const start = performance.now()
    const req = http.request({
      socketPath,
      method: 'POST',
      path: `${API}/exec/${execId}/start`,
      agent: false,
      headers: { ...e.headers, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), connection: 'Upgrade', upgrade: 'tcp' },
    })
    let socket: Socket | undefined
    const timer = setTimeout(() => {
      const err = new Error(`exec start ${execId}: no end within ${timeoutMs} ms`)
      req.destroy(err)
      socket?.destroy()
      reject(err)
    }, timeoutMs)
    req.on('error', (err) => { clearTimeout(timer); reject(err) })
    req.on('response', (res) => {
      let text = ''
      res.on('data', (b: Buffer) => { text += b.toString() })
      res.on('end', () => {
        clearTimeout(timer)
        // A proxy that turned the 101 into 200 passes the raw stream on as the body: show its size, not its bytes.
        const shown = /^[\x20-\x7e\s]*$/.test(text) ? text.trim().slice(0, 200) : `and ${text.length} bytes of stream data`
        reject(new Error(`exec start ${execId.slice(0, 12)}: expected 101, got ${res.statusCode} ${shown}`))
      })
    })
    req.on('upgrade', (res, sock: Socket, head: Buffer) => {
      socket = sock
      if (res.statusCode !== 101) {
        clearTimeout(timer)
        sock.destroy()
        reject(new Error(`exec start ${execId}: upgrade answered ${res.statusCode}`))
        return
      }
      const d = new Demux()
      let bytes = head.length
      let reads = 0
      d.push(head)
      sock.on('data', (chunk: Buffer) => { bytes += chunk.length; reads++; d.push(chunk) })
      let done = false
      const finish = (): void => {
        if (done) return
        done = true
        const ms = performance.now() - start
        clearTimeout(timer)
        sock.destroy()
        if (!d.complete) reject(new Error(`exec start ${execId}: stream ended inside a frame`))
        else resolve({ bytes, payload: d.payload, reads, ms })
      }
      sock.once('end', finish)
      sock.once('close', finish)
      sock.once('error', (err) => { if (!done) { done = true; clearTimeout(timer); reject(err) } })
    })
    req.end(body)
  })
}

/**
 * A stream held open: `GET /containers/{id}/logs?follow=1` (from the last `logsTail`
 * lines), `GET /events`, or an attach hijacked as CLI 28.x does it. Resolves once the response head has arrived (the stream is then
 * established); `close()` ends it. `status` is what the server answered (101 for an
 * attach upgrade, 200 for logs, or an old-style 200 for an attach).
 */
export interface HeldStream { readonly status: number, bytes: number, close (): void }

export async function holdStream (e: Endpoint, kind: 'logs' | 'attach' | 'events', containerId: string, timeoutMs = 30_000, logsTail = 0): Promise<HeldStream> {
  const attach = kind === 'attach'
  return await new Promise<HeldStream>((resolve, reject) => {
    const req = http.request({
      socketPath: e.socket,
      method: attach ? 'POST' : 'GET',
      path: attach
        ? `${API}/containers/${containerId}/attach?stream=1&stdout=1&stderr=1`
        : kind === 'logs'
          ? `${API}/containers/${containerId}/logs?follow=1&stdout=1&stderr=1&tail=${logsTail}`
          : `${API}/events`,
      agent: false,
      headers: attach ? { ...e.headers, connection: 'Upgrade', upgrade: 'tcp' } : { ...e.headers },
    })
    const timer = setTimeout(() => { req.destroy(new Error(`${kind} ${containerId.slice(0, 12)}: no answer within ${timeoutMs} ms`)) }, timeoutMs)
    req.on('error', (err) => { clearTimeout(timer); reject(err) })
    req.on('response', (res) => {
      clearTimeout(timer)
      const held: HeldStream = { status: res.statusCode ?? 0, bytes: 0, close: () => { res.destroy(); req.destroy() } }
      res.on('data', (b: Buffer) => { held.bytes += b.length })
      res.on('error', () => {})
      if (held.status !== 200) { held.close(); reject(new Error(`${kind} ${containerId.slice(0, 12)}: status ${held.status}`)); return }
      resolve(held)
    })
    req.on('upgrade', (res, sock: Socket) => {
      clearTimeout(timer)
      const held: HeldStream = { status: res.statusCode ?? 0, bytes: 0, close: () => { sock.destroy() } }
      sock.on('data', (b: Buffer) => { held.bytes += b.length })
      sock.on('error', () => {})
      resolve(held)
    })
    req.end()
  })
}
