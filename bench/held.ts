/**
 * Held sessions: N `logs -f`, `events` and attach sessions (a third each) held through
 * the gateway by 30 tenants, each on a container of its own that prints a line every
 * 2 s; the gateway's memory (resident set from /proc, V8 heap from its inspector after a
 * full collection) before, while held, and after every session has closed; `_ping`
 * latency before and while held; its open file descriptors before and after (each held
 * session costs a client socket and an engine socket, which must both be gone).
 *
 * `runHeld` is section 8 of `npm run bench` (and BENCH_ONLY=held); run alone:
 *   node dist/bench/held.js [N ...]     e.g. `node dist/bench/held.js 1000 3000`
 * HELD_KINDS=logs (or events, attach, a comma-separated list) holds only those kinds.
 * Every step is bounded in time and fails loudly past it.
 */
import { execSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import jwt from 'jsonwebtoken'
import { WebSocket } from 'undici'
import { API, call, endpoint, holdStream, load, type Endpoint, type HeldStream } from './clients'
import { readMemory, startGatewayProcess, type GatewayProcess } from './gateway'
import { freePort } from './peer'

export interface HeldOptions {
  /** The gateway, started with `--inspect=127.0.0.1:0` (heap statistics, forced collections). */
  gateway: GatewayProcess
  /** The bearer-token socket of the gateway. */
  socket: string
  jwtSecret: string
  image: string
  /** Sessions to hold (a third each of logs -f, events and attach). */
  sessions: number
  tenants: number
  /** GET /_ping per measurement, concurrency 8. */
  pings: number
  /** Each step (setup, opening, pinging, closing) fails past this. */
  stepTimeoutMs: number
  say: (line: string) => void
}

export interface Memory { rss: number, heapUsed: number, fds: number }

export interface HeldResult {
  sessions: number
  opened: { logs: number, events: number, attach: number }
  /** Held sessions that had received nothing by the time they were closed. */
  silent: number
  start: Memory
  held: Memory
  after: Memory
  /** (held - start) / sessions. */
  rssPerSession: number
  heapPerSession: number
  pingIdle: { p50Ms: number, p99Ms: number }
  pingHeld: { p50Ms: number, p99Ms: number }
}

/** Resolve within `ms`, or reject naming the step. */
export async function within<T> (step: string, ms: number, ...args: [Promise<T>] | [() => string, Promise<T>]): Promise<T> {
  const [state, work] = args.length === 1 ? [undefined, args[0]] : args
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<never>((_resolve, reject) => { timer = setTimeout(() => reject(new Error(`${step}: not done within ${ms / 1000} s${state ? ` (${state()})` : ''}`)), ms) })
  try {
    return await Promise.race([work, timeout])
  } finally {
    clearTimeout(timer)
  }
}

/** The gateway's inspector: the address it printed (`Debugger listening on ws://...`). */
function inspectorUrl (gw: GatewayProcess): string {
  const m = /Debugger listening on (ws:\/\/\S+)/.exec(gw.output())
  if (!m) throw new Error('the gateway was not started with --inspect (no "Debugger listening" line in its output)')
  return m[1]!
}

/** A full collection in the gateway, then its V8 heap in use. */
async function heapAfterGc (url: string, snapshot?: string): Promise<number> {
  const ws = new WebSocket(url)
  await new Promise<void>((resolve, reject) => {
    ws.addEventListener('open', () => resolve(), { once: true })
    ws.addEventListener('error', () => reject(new Error(`cannot reach the gateway's inspector at ${url}`)), { once: true })
  })
  let id = 0
  const chunks: string[] = []
  const pending = new Map<number, (result: any) => void>()
  ws.addEventListener('message', (e) => {
    const msg = JSON.parse(String(e.data)) as { id?: number, result?: unknown, method?: string, params?: { chunk: string } }
    if (msg.method === 'HeapProfiler.addHeapSnapshotChunk') chunks.push(msg.params!.chunk)
    if (msg.id !== undefined) pending.get(msg.id)?.(msg.result)
  })
  const send = async (method: string): Promise<any> => await new Promise((resolve) => {
    const n = ++id
    pending.set(n, resolve)
    ws.send(JSON.stringify({ id: n, method }))
  })
  try {
    await send('HeapProfiler.collectGarbage')
    await send('HeapProfiler.collectGarbage')
    const usage = await send('Runtime.getHeapUsage') as { usedSize: number }
    // HELD_SNAPSHOTS=dir: a heap snapshot at each measurement, to compare by constructor.
    if (snapshot) {
      await send('HeapProfiler.takeHeapSnapshot')
      fs.writeFileSync(snapshot, chunks.join(''))
    }
    return usage.usedSize
  } finally {
    ws.close()
  }
}

async function memory (gw: GatewayProcess, url: string, snapshot?: string): Promise<Memory> {
  const heapUsed = await heapAfterGc(url, snapshot)
  // Let the collection's freed pages go back before reading the resident set.
  await sleep(500)
  return { rss: readMemory(gw.pid).rss, heapUsed, fds: fs.readdirSync(`/proc/${gw.pid}/fd`).length }
}

type Held = Pick<HeldStream, 'bytes' | 'close'>

/** One held session; resolves once its head (or 101) is in. */
async function hold (e: Endpoint, kind: 'logs' | 'events' | 'attach', containerId: string, timeoutMs: number): Promise<Held> {
  return await holdStream(e, kind, containerId, timeoutMs, 1)
}

async function parallel<T> (items: readonly T[], width: number, work: (item: T) => Promise<void>): Promise<void> {
  let next = 0
  await Promise.all(Array.from({ length: Math.min(width, items.length) }, async () => {
    while (next < items.length) await work(items[next++]!)
  }))
}

function pingStats (latencies: Float64Array): { p50Ms: number, p99Ms: number } {
  const s = Float64Array.from(latencies).sort()
  return { p50Ms: s[Math.floor(s.length * 0.5)] ?? NaN, p99Ms: s[Math.min(s.length - 1, Math.floor(s.length * 0.99))] ?? NaN }
}

export async function runHeld (o: HeldOptions): Promise<HeldResult> {
  const url = inspectorUrl(o.gateway)
  const tenants = Array.from({ length: o.tenants }, (_x, i) => {
    const token = jwt.sign({ sub: `held-${i}`, tenant: `team-held-${i}`, roles: ['tenant'] }, o.jwtSecret, { algorithm: 'HS256', expiresIn: '2h' })
    return endpoint(o.socket, 4, { authorization: `Bearer ${token}` })
  })
  const containers: string[] = []
  const snaps = process.env.HELD_SNAPSHOTS
  const snap = (name: string): string | undefined => snaps ? path.join(snaps, `${o.sessions}-${name}.heapsnapshot`) : undefined
  const ping = endpoint(o.socket, 8, tenants[0]!.headers as Record<string, string>)
  const held: Held[] = []
  try {
    o.say(`held: a ticking container for each of ${o.tenants} tenants`)
    await within('held: containers', o.stepTimeoutMs, parallel(tenants, 4, async (t) => {
      const { Id } = await call<{ Id: string }>(t, 'POST', `${API}/containers/create`, {
        Image: o.image,
        Cmd: ['sh', '-c', 'while :; do echo tick; sleep 2; done'],
        HostConfig: { NetworkMode: 'none', Memory: 64 * 1024 * 1024, PidsLimit: 64, CapDrop: ['NET_RAW'], SecurityOpt: ['no-new-privileges=true'] },
      })
      containers[tenants.indexOf(t)] = Id
      await call(t, 'POST', `${API}/containers/${Id}/start`)
    }))
    const deadline = Date.now() + o.stepTimeoutMs
    await load(ping, 'GET', '/_ping', Math.min(200, o.pings), 8, deadline)
    const pingIdle = pingStats((await within('held: idle pings', o.stepTimeoutMs, load(ping, 'GET', '/_ping', o.pings, 8, deadline))).latenciesMs)
    const start = await within('held: memory at start', o.stepTimeoutMs, memory(o.gateway, url, snap('start')))

    // HELD_KINDS=logs,events: only those kinds (each kind's cost per session, alone).
    const only = (process.env.HELD_KINDS ?? '').split(',').filter((k) => k)
    const kinds = (['logs', 'events', 'attach'] as const).filter((k) => only.length === 0 || only.includes(k))
    const opened = { logs: 0, events: 0, attach: 0 }
    o.say(`held: opening ${o.sessions} sessions (logs -f, events, attach) across ${o.tenants} tenants`)
    await within(`held: opening ${o.sessions} sessions`, o.stepTimeoutMs, () => `${opened.logs} logs -f, ${opened.events} events, ${opened.attach} attach open`, parallel(Array.from({ length: o.sessions }, (_x, i) => i), 32, async (i) => {
      const t = i % o.tenants
      const kind = kinds[Math.floor(i / o.tenants) % kinds.length]!
      held.push(await hold(tenants[t]!, kind, containers[t]!, 30_000))
      opened[kind]++
    }))
    await sleep(3000)
    const pingHeld = pingStats((await within('held: pings while held', o.stepTimeoutMs, load(ping, 'GET', '/_ping', o.pings, 8, Date.now() + o.stepTimeoutMs))).latenciesMs)
    const during = await within('held: memory while held', o.stepTimeoutMs, memory(o.gateway, url, snap('held')))
    const silent = held.filter((h) => h.bytes === 0).length
    o.say(`held: closing ${held.length} sessions`)
    for (const h of held.splice(0)) h.close()
    // The gateway sees each close, ends its engine side and writes the audit records:
    // measured once its descriptors are back near the start (at most a minute).
    await sleep(3000)
    for (const end = Date.now() + 60_000; Date.now() < end && fs.readdirSync(`/proc/${o.gateway.pid}/fd`).length > start.fds + 16;) await sleep(500)
    const after = await within('held: memory after close', o.stepTimeoutMs, memory(o.gateway, url, snap('after')))
    if (process.env.HELD_DEBUG) o.say(execSync(`ss -xp | grep -c 'pid=${o.gateway.pid},'`).toString())
    if (process.env.HELD_DEBUG) await sleep(35_000)
    if (process.env.HELD_DEBUG) o.say(execSync(`ss -xp | grep 'pid=${o.gateway.pid},' | awk '{print $2, $5}' | sed 's/[0-9][0-9]*$//' | sort | uniq -c | sort -rn | head -20`).toString())
    return {
      sessions: o.sessions,
      opened,
      silent,
      start,
      held: during,
      after,
      rssPerSession: (during.rss - start.rss) / o.sessions,
      heapPerSession: (during.heapUsed - start.heapUsed) / o.sessions,
      pingIdle,
      pingHeld,
    }
  } finally {
    for (const h of held) h.close()
    const admin = tenants[0]
    await Promise.allSettled(containers.map(async (id, i) => await call(tenants[i] ?? admin!, 'DELETE', `${API}/containers/${id}?force=1`, undefined, 30_000)))
    await Promise.allSettled([...tenants, ping].map(async (t) => await t.pool.destroy()))
  }
}

export function renderHeld (r: HeldResult): string {
  const mb = (n: number): string => (n / 1e6).toFixed(1)
  const kb = (n: number): string => (n / 1e3).toFixed(1)
  return [
    `8. Held sessions: ${r.sessions} (${r.opened.logs} logs -f, ${r.opened.events} events, ${r.opened.attach} attach) across tenants, a line every 2 s each`,
    '   | | start | held | after close |',
    '   |---|---|---|---|',
    `   | resident (MB) | ${mb(r.start.rss)} | ${mb(r.held.rss)} | ${mb(r.after.rss)} |`,
    `   | V8 heap after GC (MB) | ${mb(r.start.heapUsed)} | ${mb(r.held.heapUsed)} | ${mb(r.after.heapUsed)} |`,
    `   | open descriptors | ${r.start.fds} | ${r.held.fds} | ${r.after.fds} |`,
    `   per session: ${kb(r.rssPerSession)} kB resident, ${kb(r.heapPerSession)} kB heap; after close ${((r.after.rss / r.start.rss - 1) * 100).toFixed(0)}% over start`,
    `   GET /_ping p50/p99: idle ${r.pingIdle.p50Ms.toFixed(2)}/${r.pingIdle.p99Ms.toFixed(2)} ms, held ${r.pingHeld.p50Ms.toFixed(2)}/${r.pingHeld.p99Ms.toFixed(2)} ms; ${r.silent} sessions received nothing`,
  ].join('\n')
}

/** Alone: a private engine, the gateway (inspector on), one run per count on the command line. */
async function main (): Promise<void> {
  const counts = process.argv.slice(2).map(Number)
  if (counts.length === 0) counts.push(1000)
  const { startEngine, stopEngine } = await import('../test/engine/engine')
  const dir = fs.mkdtempSync(path.join('/tmp', 'pcx-held-'))
  const engine = await startEngine(path.join(dir, 'e'))
  const secret = 'held-bench-secret-0123456789abcdef'
  fs.mkdirSync(path.join(dir, 'gw'))
  const nodeArgs = ['--inspect=127.0.0.1:0', ...(process.env.BENCH_GATEWAY_NODE_ARGS ?? '').split(' ').filter((a) => a)]
  const gw = await startGatewayProcess(path.join(dir, 'gw'), engine.socket, { jwtSecret: secret, tcpPort: await freePort(), nodeArgs })
  try {
    for (const n of counts) {
      const r = await runHeld({ gateway: gw, socket: gw.tokenSocket, jwtSecret: secret, image: engine.image, sessions: n, tenants: 30, pings: 1000, stepTimeoutMs: 180_000, say: (l) => { console.log(l) } })
      console.log(renderHeld(r))
    }
  } finally {
    await gw.stop()
    await stopEngine(engine)
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

if (require.main === module) {
  main().catch((err) => { console.error(err); process.exitCode = 1 })
}
