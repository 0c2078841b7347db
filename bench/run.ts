/**
 * `npm run bench`: the gateway against the engine directly, measured in one run with
 * the same client code, reported as ratios (gateway / direct). On this 2-core machine
 * the load generator, the gateway and dockerd share the CPU, so absolute numbers say
 * little across runs; the ratio measured side by side is the number to quote.
 *
 * On its own it starts a private engine (test/engine/engine.ts) in a fresh /tmp/pcb-*
 * directory, the gateway as a child process in front of it (so that its memory can be
 * read from /proc), runs the measurements, prints a table, writes
 * dist/bench-results.json, and removes everything again, also on error or Ctrl-C.
 *
 * Knobs (environment, for quick runs): BENCH_REQUESTS (2000), BENCH_CONCURRENCY (8),
 * BENCH_STREAM_BYTES (1 GiB), BENCH_STREAM_ROUNDS (1 per side), BENCH_EXEC_BYTES (100 MiB).
 */
import { execFileSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import type { Pool } from 'undici'
import { engineInfo, startEngine, stopEngine, type EngineInfo } from '../test/engine/engine'
import { API, call, download, execStart, load, percentile, pool, statInContainer, upload, type LoadRun, type Transfer } from './clients'
import { cpuSeconds, readMemory, startGatewayProcess, watchMemory, type GatewayProcess, type MemoryWindow } from './gateway'
import { renderPolicyBench, runPolicyBench, type PolicyBench } from './policy'

const MiB = 1 << 20
const GiB = 1 << 30
const MB = 1e6

function envInt (name: string, fallback: number): number {
  const v = process.env[name]
  if (v === undefined || v === '') return fallback
  const n = Number(v)
  if (!Number.isSafeInteger(n) || n <= 0) throw new Error(`${name} must be a positive integer, got ${JSON.stringify(v)}`)
  return n
}

const settings = {
  requests: envInt('BENCH_REQUESTS', 2000),
  concurrency: envInt('BENCH_CONCURRENCY', 8),
  /** Requests per side before each measured kind, not counted: V8 compiles the gateway's hot paths meanwhile. */
  warmup: 500,
  /** Blocks per side for the request runs, alternating which side goes first. */
  segments: 4,
  streamBytes: envInt('BENCH_STREAM_BYTES', GiB),
  execBytes: envInt('BENCH_EXEC_BYTES', 100 * MiB),
  /** Transfers per side for the 1 GiB streams, alternating which side goes first. */
  streamRounds: envInt('BENCH_STREAM_ROUNDS', 1),
  execRounds: 2,
  /** The brief's target: the gateway's resident memory stays under 150 MB while streaming 1 GB. */
  rssLimitBytes: 150 * MB,
  sampleMs: 50,
  /** The whole run is bounded: past this it stops, cleans up and fails. */
  totalBudgetMs: 9 * 60_000,
  streamTimeoutMs: 240_000,
}

const REPO = path.resolve(__dirname, '..', '..')
const RESULTS = path.join(REPO, 'dist', 'bench-results.json')

// ---------------------------------------------------------------- cleanup

/** Steps run once, last added first, each bounded in time; failures are reported and skipped. */
class Cleanup {
  private readonly steps: Array<{ name: string, fn: () => Promise<void> | void }> = []
  private running: Promise<void> | undefined

  add (name: string, fn: () => Promise<void> | void): void { this.steps.push({ name, fn }) }

  run (): Promise<void> {
    this.running ??= (async () => {
      for (const step of this.steps.reverse()) {
        try {
          await Promise.race([
            Promise.resolve().then(step.fn),
            sleep(60_000, undefined, { ref: false }).then(() => { throw new Error('timed out after 60 s') }),
          ])
        } catch (err) {
          process.stderr.write(`bench cleanup: ${step.name}: ${(err as Error).message}\n`)
        }
      }
    })()
    return this.running
  }
}

const cleanup = new Cleanup()
let interrupted = false

async function exit (code: number): Promise<never> {
  await cleanup.run()
  process.exit(code)
}

for (const [signal, code] of [['SIGINT', 130], ['SIGTERM', 143], ['SIGHUP', 129]] as const) {
  process.on(signal, () => {
    if (interrupted) return
    interrupted = true
    process.stderr.write(`\nbench: ${signal}, stopping the gateway and the engine...\n`)
    void exit(code)
  })
}

// ---------------------------------------------------------------- helpers

function say (line: string): void { process.stderr.write(`bench: ${line}\n`) }

/** Run `work` against the gateway, failing at once if the gateway process dies meanwhile. */
async function viaGateway<T> (gw: GatewayProcess, work: () => Promise<T>): Promise<T> {
  return await Promise.race([work(), gw.exited])
}

interface ContainerCreated { Id: string }

async function createContainer (p: Pool, image: string, name: string, cmd: string[]): Promise<string> {
  const created = await call<ContainerCreated>(p, 'POST', `${API}/containers/create?name=${name}`, {
    Image: image,
    Cmd: cmd,
    // json-file is the driver `docker logs` reads back; stated here so that a daemon
    // default never turns the logs case into something else.
    HostConfig: { LogConfig: { Type: 'json-file', Config: {} } },
  })
  return created.Id
}

/** Run a container to completion; it must exit 0. */
async function runToExit (p: Pool, id: string, timeoutMs: number): Promise<void> {
  await call(p, 'POST', `${API}/containers/${id}/start`)
  const waited = await call<{ StatusCode: number }>(p, 'POST', `${API}/containers/${id}/wait?condition=not-running`, undefined, timeoutMs)
  if (waited.StatusCode !== 0) throw new Error(`container ${id.slice(0, 12)} exited ${waited.StatusCode}`)
}

/** Wait until the container's json-file log stops growing (the engine may still be writing its tail). */
async function settleLog (p: Pool, id: string): Promise<void> {
  const info = await call<{ LogPath?: string }>(p, 'GET', `${API}/containers/${id}/json`)
  if (!info.LogPath) return
  let last = -1
  for (let i = 0; i < 100; i++) {
    let size = -1
    try { size = fs.statSync(info.LogPath).size } catch { return }
    if (size === last) return
    last = size
    await sleep(200)
  }
}

/** Flush dirty pages before a timed transfer, so that writeback left by the previous one is not charged to this one. */
function syncDisks (): void {
  try { execFileSync('sync', { timeout: 120_000 }) } catch { /* best effort */ }
}

/** The processes whose CPU time is counted: dockerd, and the gateway. */
interface Pids { engine: number, gateway: number }
/** CPU seconds used by each during some runs. */
interface Cpu { engine: number, gateway: number }

/** Run `work`, adding the CPU time dockerd and the gateway used meanwhile to `into`. */
async function countCpu<T> (pids: Pids, into: Cpu, work: () => Promise<T>): Promise<T> {
  const e0 = cpuSeconds(pids.engine)
  const g0 = cpuSeconds(pids.gateway)
  const result = await work()
  into.engine += cpuSeconds(pids.engine) - e0
  into.gateway += cpuSeconds(pids.gateway) - g0
  return result
}

/**
 * CPU per unit of work: dockerd's when asked directly, dockerd's and the gateway's when
 * asked through it, and `ratio` = (dockerd + gateway) / dockerd direct, the CPU cost of
 * the same work through the gateway. Less sensitive than wall-clock rates to whatever
 * else runs on the machine (clock-tick resolution: 10 ms per process and run).
 */
interface CpuCost { unit: string, direct: { engine: number }, gateway: { engine: number, gateway: number }, ratio: number }

function cpuCost (unit: string, perUnit: number, direct: Cpu, viaGw: Cpu): CpuCost {
  return {
    unit,
    direct: { engine: direct.engine / perUnit },
    gateway: { engine: viaGw.engine / perUnit, gateway: viaGw.gateway / perUnit },
    ratio: (viaGw.engine + viaGw.gateway) / direct.engine,
  }
}

const mb = (bytes: number): number => bytes / MB
const rate = (t: Transfer | { bytes: number, ms: number }): number => mb(t.bytes) / (t.ms / 1000)

// ---------------------------------------------------------------- measurements

interface LatencyStats { requests: number, reqPerSec: number, p50Ms: number, p99Ms: number, meanMs: number }

function stats (runs: LoadRun[]): LatencyStats {
  const all = new Float64Array(runs.reduce((n, r) => n + r.latenciesMs.length, 0))
  let at = 0
  for (const r of runs) { all.set(r.latenciesMs, at); at += r.latenciesMs.length }
  all.sort()
  const elapsed = runs.reduce((t, r) => t + r.elapsedMs, 0)
  return {
    requests: all.length,
    reqPerSec: all.length / (elapsed / 1000),
    p50Ms: percentile(all, 0.5),
    p99Ms: percentile(all, 0.99),
    meanMs: all.reduce((a, b) => a + b, 0) / all.length,
  }
}

interface RequestResult {
  name: string
  direct: LatencyStats
  gateway: LatencyStats
  ratio: { reqPerSec: number, p50: number, p99: number }
  /** CPU microseconds per request. */
  cpu: CpuCost
}

/**
 * Each request kind: a warm-up on both sides, then the count in `segments` blocks per
 * side, ordered direct, gateway, gateway, direct, direct, gateway..., so that drift over
 * the run (caches, the engine's state, other load on the machine) weighs on both alike.
 */
async function measureRequests (direct: Pool, gwPool: Pool, gw: GatewayProcess, pids: Pids, deadline: number): Promise<RequestResult[]> {
  const cases: Array<{ method: 'GET' | 'HEAD', path: string }> = [
    { method: 'GET', path: '/_ping' },
    { method: 'HEAD', path: '/_ping' },
    { method: 'GET', path: `${API}/containers/json` },
    { method: 'GET', path: `${API}/version` },
  ]
  const { requests, concurrency, warmup, segments } = settings
  const results: RequestResult[] = []
  for (const c of cases) {
    const name = `${c.method} ${c.path}`
    say(`requests: ${name}`)
    const cpuDirect: Cpu = { engine: 0, gateway: 0 }
    const cpuVia: Cpu = { engine: 0, gateway: 0 }
    const run = async (side: 'direct' | 'gateway', n: number): Promise<LoadRun> => side === 'direct'
      ? await countCpu(pids, cpuDirect, async () => await load(direct, c.method, c.path, n, concurrency, deadline))
      : await countCpu(pids, cpuVia, async () => await viaGateway(gw, async () => await load(gwPool, c.method, c.path, n, concurrency, deadline)))
    await run('direct', warmup)
    await run('gateway', warmup)
    for (const cpu of [cpuDirect, cpuVia]) { cpu.engine = 0; cpu.gateway = 0 }
    const dRuns: LoadRun[] = []
    const gRuns: LoadRun[] = []
    for (let i = 0; i < segments; i++) {
      const n = Math.floor(requests * (i + 1) / segments) - Math.floor(requests * i / segments)
      if (i % 2 === 0) { dRuns.push(await run('direct', n)); gRuns.push(await run('gateway', n)) } else { gRuns.push(await run('gateway', n)); dRuns.push(await run('direct', n)) }
    }
    const d = stats(dRuns)
    const g = stats(gRuns)
    results.push({
      name,
      direct: d,
      gateway: g,
      ratio: { reqPerSec: g.reqPerSec / d.reqPerSec, p50: g.p50Ms / d.p50Ms, p99: g.p99Ms / d.p99Ms },
      cpu: cpuCost('µs/request', requests / 1e6, cpuDirect, cpuVia),
    })
  }
  return results
}

interface SideResult { bytes: number, payload?: number, ms: number, mbPerSec: number, /** Mean bytes per read on the client. */ bytesPerRead?: number }
interface StreamResult {
  name: string
  /** Bytes moved per side (wire bytes: frame headers and tar blocks included). */
  bytes: number
  runs: number
  direct: SideResult
  gateway: SideResult & { memory: MemoryWindow }
  ratio: number
  rssPeak: number
  rssPass: boolean
  /** CPU seconds per GB (10^9 bytes) moved. */
  cpu: CpuCost
  notes: string[]
}

function side (transfers: Transfer[]): SideResult {
  const bytes = transfers.reduce((n, t) => n + t.bytes, 0)
  const ms = transfers.reduce((n, t) => n + t.ms, 0)
  const payloads = transfers.map((t) => t.payload)
  const payload = payloads.every((p) => p !== undefined) ? payloads.reduce((n: number, p) => n + (p ?? 0), 0) : undefined
  const reads = transfers.every((t) => t.reads !== undefined) ? transfers.reduce((n, t) => n + (t.reads ?? 0), 0) : undefined
  return { bytes, payload, ms, mbPerSec: rate({ bytes, ms }), bytesPerRead: reads ? Math.round(bytes / reads) : undefined }
}

function streamResult (name: string, runs: number, d: Transfer[], g: Transfer[], memory: MemoryWindow, cpu: { direct: Cpu, via: Cpu }, notes: string[]): StreamResult {
  const direct = side(d)
  const gateway = side(g)
  const rssPeak = Math.max(memory.sampledPeak, memory.hwm)
  return {
    name,
    bytes: direct.bytes / runs,
    runs,
    direct,
    gateway: { ...gateway, memory },
    ratio: gateway.mbPerSec / direct.mbPerSec,
    rssPeak,
    rssPass: rssPeak < settings.rssLimitBytes,
    cpu: cpuCost('s/GB', direct.bytes / 1e9, cpu.direct, cpu.via),
    notes,
  }
}

function mergeWindows (a: MemoryWindow, b: MemoryWindow): MemoryWindow {
  return { sampledPeak: Math.max(a.sampledPeak, b.sampledPeak), hwm: Math.max(a.hwm, b.hwm), hwmReset: a.hwmReset && b.hwmReset, before: a.before, samples: a.samples + b.samples }
}

/**
 * `rounds` transfers per side, alternating which side goes first (d g, g d, ...); the
 * gateway's memory is watched during its own transfers only. With `sync`, dirty pages
 * are flushed before each transfer.
 */
async function compare (gw: GatewayProcess, pids: Pids, rounds: number, sync: boolean, directRun: () => Promise<Transfer>, gatewayRun: () => Promise<Transfer>): Promise<{ d: Transfer[], g: Transfer[], memory: MemoryWindow, cpu: { direct: Cpu, via: Cpu } }> {
  const d: Transfer[] = []
  const g: Transfer[] = []
  let memory: MemoryWindow | undefined
  const cpu = { direct: { engine: 0, gateway: 0 }, via: { engine: 0, gateway: 0 } }
  const runDirect = async (): Promise<void> => {
    if (sync) syncDisks()
    d.push(await countCpu(pids, cpu.direct, directRun))
  }
  const runGateway = async (): Promise<void> => {
    if (sync) syncDisks()
    const w = await watchMemory(gw.pid, settings.sampleMs, async () => await countCpu(pids, cpu.via, async () => await viaGateway(gw, gatewayRun)))
    g.push(w.result)
    memory = memory ? mergeWindows(memory, w.memory) : w.memory
  }
  for (let i = 0; i < rounds; i++) {
    if (i % 2 === 0) { await runDirect(); await runGateway() } else { await runGateway(); await runDirect() }
  }
  if (!memory) throw new Error('no transfer through the gateway')
  return { d, g, memory, cpu }
}

// ---------------------------------------------------------------- report

function fmt (n: number, digits = 1): string {
  if (!Number.isFinite(n)) return '-'
  return n.toFixed(digits)
}

function table (header: string[], rows: string[][], align: Array<'l' | 'r'>): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)))
  const line = (cells: string[]): string => cells.map((c, i) => align[i] === 'l' ? c.padEnd(widths[i]) : c.padStart(widths[i])).join('  ').trimEnd()
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n')
}

interface Report {
  date: string
  machine: { cpus: number, cpuModel: string, kernel: string, node: string, memoryBytes: number }
  engine: { version: string, apiVersion: string }
  settings: typeof settings
  gateway: { rssIdle: number, rssAfterRequests: number }
  requests: RequestResult[]
  streams: StreamResult[]
  memoryTarget: { limitBytes: number, worstCase: string, worstPeakBytes: number, pass: boolean }
  policy: PolicyBench
  problems: string[]
  totalSeconds: number
}

function render (r: Report): string {
  const out: string[] = []
  out.push('')
  out.push('Portcullis benchmark: gateway vs the engine directly, measured in the same run')
  out.push(`engine ${r.engine.version} (API ${r.engine.apiVersion}), node ${r.machine.node}, ${r.machine.cpus} CPUs (${r.machine.cpuModel}), Linux ${r.machine.kernel}`)
  out.push('ratio = gateway / direct: for req/s and MB/s below 1 is slower; for latency above 1 is slower. 1 MB = 10^6 bytes.')
  out.push('')
  out.push(`1. Requests: ${r.settings.requests} per side, concurrency ${r.settings.concurrency}, undici Pool on each unix socket, in ${r.settings.segments} alternating blocks per side (d g g d d g...)`)
  out.push(table(
    ['request', 'direct req/s', 'gateway req/s', 'ratio', 'p50 direct ms', 'p50 gateway ms', 'ratio', 'p99 direct ms', 'p99 gateway ms', 'ratio'],
    r.requests.map((q) => [q.name, fmt(q.direct.reqPerSec, 0), fmt(q.gateway.reqPerSec, 0), fmt(q.ratio.reqPerSec, 2),
      fmt(q.direct.p50Ms, 2), fmt(q.gateway.p50Ms, 2), fmt(q.ratio.p50, 2), fmt(q.direct.p99Ms, 2), fmt(q.gateway.p99Ms, 2), fmt(q.ratio.p99, 2)]),
    ['l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r']))
  out.push('')
  out.push(`2-3. Streams: throughput, and the gateway's resident memory during its own runs (VmRSS sampled every ${r.settings.sampleMs} ms; VmHWM reset before each run;`)
  out.push('     growth = peak - RSS before; PASS/FAIL compares the peak, max(sampled, VmHWM), with the target;')
  out.push('     client read = mean bytes per chunk the client received, direct / through the gateway)')
  out.push(table(
    ['stream', 'size/run', 'runs', 'direct MB/s', 'gateway MB/s', 'ratio', 'gw RSS before', 'peak sampled', 'VmHWM', 'growth', `< ${fmt(mb(r.settings.rssLimitBytes), 0)} MB`, 'client read d / gw'],
    r.streams.map((s) => [s.name, `${fmt(mb(s.bytes), 1)} MB`, String(s.runs), fmt(s.direct.mbPerSec), fmt(s.gateway.mbPerSec), fmt(s.ratio, 2),
      `${fmt(mb(s.gateway.memory.before))} MB`, `${fmt(mb(s.gateway.memory.sampledPeak))} MB`, `${fmt(mb(s.gateway.memory.hwm))} MB${s.gateway.memory.hwmReset ? '' : ' (since start)'}`,
      `+${fmt(mb(s.rssPeak - s.gateway.memory.before))} MB`, s.rssPass ? 'PASS' : 'FAIL',
      s.direct.bytesPerRead && s.gateway.bytesPerRead ? `${fmt(s.direct.bytesPerRead / 1000)} / ${fmt(s.gateway.bytesPerRead / 1000)} kB` : '-']),
    ['l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'l', 'r']))
  for (const s of r.streams) for (const n of s.notes) out.push(`  note (${s.name}): ${n}`)
  out.push('')
  out.push('CPU time for the same work (from /proc/<pid>/stat; less sensitive than the rates above to other load on the machine)')
  const cpuRow = (name: string, c: CpuCost, digits: number): string[] => [name, `${fmt(c.direct.engine, digits)} ${c.unit}`, `${fmt(c.gateway.engine, digits)} ${c.unit}`, `${fmt(c.gateway.gateway, digits)} ${c.unit}`, fmt(c.ratio, 2)]
  out.push(table(
    ['case', 'dockerd, direct', 'dockerd, via gateway', 'gateway', '(dockerd + gateway) / dockerd direct'],
    [...r.requests.map((q) => cpuRow(q.name, q.cpu, 0)), ...r.streams.map((s) => cpuRow(s.name, s.cpu, 2))],
    ['l', 'r', 'r', 'r', 'r']))
  out.push('')
  out.push(`gateway RSS: ${fmt(mb(r.gateway.rssIdle))} MB idle after start, ${fmt(mb(r.gateway.rssAfterRequests))} MB after the request runs`)
  out.push(`memory target (RSS < ${fmt(mb(r.memoryTarget.limitBytes), 0)} MB while streaming ${fmt(mb(r.settings.streamBytes))} MB): ${r.memoryTarget.pass ? 'PASS' : 'FAIL'}, worst ${fmt(mb(r.memoryTarget.worstPeakBytes))} MB in "${r.memoryTarget.worstCase}"`)
  if (r.problems.length) {
    out.push('')
    out.push('PROBLEMS:')
    for (const p of r.problems) out.push(`  - ${p}`)
  }
  out.push(`total ${fmt(r.totalSeconds, 0)} s; results in ${path.relative(process.cwd(), RESULTS) || RESULTS}`)
  out.push('')
  return out.join('\n')
}

// ---------------------------------------------------------------- main

async function main (): Promise<number> {
  const began = performance.now()
  const deadline = Date.now() + settings.totalBudgetMs
  const watchdog = setTimeout(() => {
    process.stderr.write(`bench: over its ${settings.totalBudgetMs / 60_000} minute budget, giving up\n`)
    void exit(1)
  }, settings.totalBudgetMs + 60_000)
  watchdog.unref()
  const problems: string[] = []

  const dir = fs.mkdtempSync('/tmp/pcb-')
  say(`starting a private engine in ${dir}`)
  const starting = startEngine(dir)
  // stopEngine also removes the directory (never descending into a mount left below it).
  // Registered before the engine is up: a Ctrl-C during start-up waits for the start to
  // settle, then stops whatever of the engine runs in the directory.
  cleanup.add('stop the engine', async () => {
    const started = await starting.catch(() => undefined)
    await stopEngine(started ?? engineInfo(dir, 0))
    if (fs.existsSync(dir)) process.stderr.write(`bench cleanup: ${dir} was left behind\n`)
  })
  const engine: EngineInfo = await starting
  const direct = pool(engine.socket, settings.concurrency)
  cleanup.add('close the direct pool', () => direct.destroy())
  const version = await call<{ Version: string, ApiVersion: string }>(direct, 'GET', `${API}/version`)

  const gwDir = path.join(dir, 'gateway')
  fs.mkdirSync(gwDir)
  say('starting the gateway')
  const gw = await startGatewayProcess(gwDir, engine.socket)
  cleanup.add('stop the gateway', () => gw.stop())
  const via = pool(gw.socket, settings.concurrency)
  cleanup.add('close the gateway pool', () => via.destroy())
  const rssIdle = readMemory(gw.pid).rss

  // Containers: one that wrote the stream to its json-file log, one holding a big file,
  // one to upload into, one running to exec in. Made up front (and in parallel: this is
  // not measured) so that nothing else runs while we measure.
  say(`setting up containers (writing ${fmt(settings.streamBytes / MiB, 0)} MiB of logs and a ${fmt(settings.streamBytes / MiB, 0)} MiB file)`)
  const tag = randomBytes(3).toString('hex')
  const image = engine.image
  const idLogs = await createContainer(direct, image, `pcb-logs-${tag}`, ['sh', '-c',
    // Lines of 4096 printable characters: json-file stores one JSON object per line,
    // so short lines (or NULs, escaped as \u0000) would multiply the bytes on disk.
    `L=$(head -c 3072 /dev/urandom | base64 | tr -d '\\n'); yes "$L" | head -c ${settings.streamBytes}`])
  const idBig = await createContainer(direct, image, `pcb-big-${tag}`, ['sh', '-c', `head -c ${settings.streamBytes} /dev/zero > /big`])
  const idUpload = await createContainer(direct, image, `pcb-upload-${tag}`, ['true'])
  const idExec = await createContainer(direct, image, `pcb-exec-${tag}`, ['sleep', '3600'])
  await call(direct, 'POST', `${API}/containers/${idExec}/start`)
  await Promise.all([runToExit(direct, idLogs, settings.streamTimeoutMs), runToExit(direct, idBig, settings.streamTimeoutMs)])
  await settleLog(direct, idLogs)

  // 1. Requests
  const pids: Pids = { engine: engine.pid, gateway: gw.pid }
  const requests = await measureRequests(direct, via, gw, pids, deadline)
  const rssAfterRequests = readMemory(gw.pid).rss

  const streams: StreamResult[] = []
  const t = settings.streamTimeoutMs

  // 2a. Logs of a container that wrote the stream to stdout
  {
    const p = `${API}/containers/${idLogs}/logs?stdout=1`
    say('streams: container logs')
    const { d, g, memory, cpu } = await compare(gw, pids, settings.streamRounds, true, async () => await download(direct, p, true, t), async () => await download(via, p, true, t))
    const notes: string[] = []
    for (const x of [...d, ...g]) {
      if (x.bytes !== d[0].bytes || x.payload !== d[0].payload) problems.push(`logs: reads differ: ${[...d, ...g].map((y) => `${y.bytes} bytes (${y.payload} payload)`).join(', ')} (direct first)`)
    }
    if (d[0].payload !== settings.streamBytes) notes.push(`engine returned ${d[0].payload} payload bytes of the ${settings.streamBytes} written`)
    streams.push(streamResult(`GET logs (${fmt(settings.streamBytes / MiB, 0)} MiB stdout)`, settings.streamRounds, d, g, memory, cpu, notes))
  }

  // 2b. docker cp out: the archive of a big file
  {
    const p = `${API}/containers/${idBig}/archive?path=${encodeURIComponent('/big')}`
    say('streams: archive GET')
    const { d, g, memory, cpu } = await compare(gw, pids, settings.streamRounds, true, async () => await download(direct, p, false, t), async () => await download(via, p, false, t))
    for (const x of [...d, ...g]) {
      if (x.bytes !== d[0].bytes) problems.push(`archive GET: reads differ: ${[...d, ...g].map((y) => y.bytes).join(', ')} bytes (direct first)`)
    }
    if (d[0].bytes < settings.streamBytes) problems.push(`archive GET: only ${d[0].bytes} bytes for a ${settings.streamBytes}-byte file`)
    streams.push(streamResult(`GET archive (${fmt(settings.streamBytes / MiB, 0)} MiB file)`, settings.streamRounds, d, g, memory, cpu, []))
  }

  // 2c. docker cp in: a generated tar uploaded into a container
  {
    say('streams: archive PUT')
    const names: string[] = []
    const put = async (p: Pool, sideName: string): Promise<Transfer> => {
      const name = `${sideName}-${names.length}.bin`
      names.push(name)
      return await upload(p, idUpload, '/tmp', name, settings.streamBytes, t)
    }
    const { d, g, memory, cpu } = await compare(gw, pids, settings.streamRounds, true, async () => await put(direct, 'direct'), async () => await put(via, 'gateway'))
    for (const name of names) {
      const size = await statInContainer(direct, idUpload, `/tmp/${name}`)
      if (size !== settings.streamBytes) problems.push(`archive PUT: /tmp/${name} is ${size} bytes in the container, expected ${settings.streamBytes}`)
    }
    streams.push(streamResult(`PUT archive (${fmt(settings.streamBytes / MiB, 0)} MiB tar)`, settings.streamRounds, d, g, memory, cpu, []))
  }

  // 3. Exec with a hijacked (101) stream
  {
    say('streams: exec hijack')
    const one = async (p: Pool, socket: string): Promise<Transfer> => {
      const exec = await call<{ Id: string }>(p, 'POST', `${API}/containers/${idExec}/exec`, {
        AttachStdout: true, AttachStderr: true, Tty: false, Cmd: ['head', '-c', String(settings.execBytes), '/dev/zero'],
      })
      return await execStart(socket, exec.Id, t)
    }
    // One warm-up each (not counted).
    await one(direct, engine.socket)
    await viaGateway(gw, async () => await one(via, gw.socket))
    const { d, g, memory, cpu } = await compare(gw, pids, settings.execRounds, false, async () => await one(direct, engine.socket), async () => await one(via, gw.socket))
    for (const x of [...d, ...g]) {
      if (x.payload !== settings.execBytes) problems.push(`exec: ${x.payload} payload bytes, expected ${settings.execBytes}`)
    }
    streams.push(streamResult(`exec start, 101 (${fmt(settings.execBytes / MiB, 0)} MiB stdout)`, settings.execRounds, d, g, memory, cpu, []))
  }

  const worst = streams.reduce((a, b) => (b.rssPeak > a.rssPeak ? b : a))
  const report: Report = {
    date: new Date().toISOString(),
    machine: { cpus: os.cpus().length, cpuModel: os.cpus()[0]?.model.trim() ?? 'unknown', kernel: os.release(), node: process.version, memoryBytes: os.totalmem() },
    engine: { version: version.Version, apiVersion: version.ApiVersion },
    settings,
    gateway: { rssIdle, rssAfterRequests },
    requests,
    streams,
    memoryTarget: { limitBytes: settings.rssLimitBytes, worstCase: worst.name, worstPeakBytes: worst.rssPeak, pass: streams.every((s) => s.rssPass) },
    policy: await runPolicyBench(),
    problems,
    totalSeconds: (performance.now() - began) / 1000,
  }
  fs.mkdirSync(path.dirname(RESULTS), { recursive: true })
  fs.writeFileSync(RESULTS, JSON.stringify(report, null, 2) + '\n')
  process.stdout.write(render(report) + '\n' + renderPolicyBench(report.policy))
  clearTimeout(watchdog)
  // A byte count that differs between the two sides makes the comparison meaningless.
  return problems.length ? 1 : 0
}

main().then(async (code) => await exit(code), async (err: Error) => {
  if (!interrupted) process.stderr.write(`bench failed: ${err.stack ?? err.message}\n`)
  await exit(interrupted ? 130 : 1)
})
