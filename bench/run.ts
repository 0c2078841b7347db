/**
 * `npm run bench`: every workload against the engine directly, through a peer (HAProxy
 * configured like the popular allow-list socket proxies, bench/peer.ts) and through
 * Portcullis (authentication, policy and audit on), interleaved, reported as ratios to
 * direct. On this 2-core machine the load generator, the proxies and dockerd share the
 * CPU, so absolute numbers say little across runs; the ratios measured side by side are
 * the numbers to quote. Medians and ratios only: nothing here fails on a missed target;
 * the run exits non-zero only when a measurement is broken (a byte count that differs, a
 * failed request where none should fail).
 *
 * On its own it installs what it needs from Debian (haproxy, wrk) if missing, starts a
 * private engine (test/engine/engine.ts, also on a loopback TCP port in its network
 * namespace, for wrk), the gateway and HAProxy as child processes (so that their memory
 * can be read from /proc), runs the workloads, prints the tables, writes
 * dist/bench-results.json and removes everything again, also on error or Ctrl-C.
 *
 * Portcullis is deployed as in production: an admin socket (fixed identity), a unix
 * socket and a loopback TCP port that take HS256 bearer tokens, the policy of policies/
 * plus bench.csv (20 ContainerCreate body rules, all passing for the bench's body;
 * bench/policy.ts), audit records to a file. Portcullis columns act as the tenant
 * `team-bench` with a bearer token unless a row says otherwise; the tenant created every
 * container the workloads use, through the gateway, so it sees and owns them all.
 *
 * Knobs (environment; defaults in brackets) for quick runs:
 *   BENCH_REQUESTS          undici requests per side for GET /_ping, per concurrency [2000]
 *   BENCH_VERSION_REQUESTS  undici requests per side for GET /version, per concurrency [400]
 *   BENCH_SEGMENTS          interleaved blocks per side for the undici runs [4]
 *   BENCH_JIT_WARMUP        GET /_ping per side (8 at a time) before the small requests, not counted [5000]
 *   BENCH_WRK_SECONDS       seconds per wrk block [3]
 *   BENCH_WRK_BLOCKS        interleaved wrk blocks per side (median reported) [2]
 *   BENCH_LIST_CONTAINERS   containers the tenant owns for the listing [200]
 *   BENCH_LIST_REQUESTS     GET /containers/json?all=1 per side, concurrency 1 [100]
 *   BENCH_LIST_MANY         containers across BENCH_LIST_TENANTS tenants for the listing among tenants, 1 and 8 at a time (0: none) [2000]
 *   BENCH_LIST_TENANTS      tenants owning them, the bench tenant one of them [50]
 *   BENCH_CYCLES            create-start-remove cycles per side [16]
 *   BENCH_CREATES           ContainerCreate (20-rule body policy) per side [40]
 *   BENCH_LOGS_BYTES        the logs stream [1000000000]
 *   BENCH_CP_BYTES          docker cp out and in [500000000]
 *   BENCH_EXEC_BYTES        hijacked exec output, raw client and docker CLI [500000000]
 *   BENCH_LOGS_ROUNDS       transfers per side for the logs stream [1]
 *   BENCH_STREAM_ROUNDS     transfers per side for cp out, cp in and the execs (alternating order) [2]
 *   BENCH_GATEWAY_NODE_ARGS extra node options for the gateway process, e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof" []
 *   BENCH_FOLLOWERS         concurrent `logs -f` held open [200]
 *   BENCH_ATTACHES          concurrent attach sessions held open [100]
 *   BENCH_HOLD_REQUESTS     small requests (GET /_ping, concurrency 8) before and during the hold [1000]
 *   BENCH_POLICY_DECISIONS  decisions per policy size [20000]
 *   BENCH_ONLY=policy       only section 4 (policy decisions in-process: no engine, gateway or HAProxy;
 *                           also `node dist/bench/policy.js`, BENCH_POLICY_SIZES=10,1000,10000)
 *   BENCH_FAIRNESS_PINGS    tenant B's pings per block, alone and during tenant A's flood [1000]
 *   BENCH_FAIRNESS_BLOCKS   blocks alone and during each flood [2]
 *   BENCH_ONLY=fairness     only section 7 (one tenant's flood, another's _ping): the engine,
 *                           the gateway and BENCH_LIST_CONTAINERS containers of tenant A, no HAProxy
 *   BENCH_HELD_SESSIONS     section 8: logs -f, events and attach sessions held by 30 tenants through a
 *                           second gateway (inspector on: heap after GC), memory before, held and
 *                           after close, _ping while held [3000]
 *   BENCH_ONLY=held         only section 8 (the engine and that gateway, no HAProxy)
 *   BENCH_ONLY=creates      only section 2's create rows (create-start-remove cycle, ContainerCreate),
 *                           after BENCH_LIST_CONTAINERS containers of the tenant, and their targets
 *   BENCH_ONLY=streams      only section 3 (cp out and in, exec raw and with the CLI; the logs stream
 *                           too when BENCH_LOGS_BYTES is set), its CPU rows and targets
 *   BENCH_ONLY=lists        only section 2's listing rows (the tenant's BENCH_LIST_CONTAINERS containers, then
 *                           BENCH_LIST_MANY among BENCH_LIST_TENANTS tenants), with the proxies' CPU per list,
 *                           after BENCH_JIT_WARMUP _pings per side, and their targets
 *   BENCH_BUDGET_MINUTES    the whole run stops, cleans up and fails past this [15]
 * e.g. a quick check: BENCH_REQUESTS=300 BENCH_VERSION_REQUESTS=60 BENCH_WRK_SECONDS=1
 *   BENCH_WRK_BLOCKS=1 BENCH_LIST_CONTAINERS=20 BENCH_LIST_REQUESTS=20 BENCH_CYCLES=4
 *   BENCH_CREATES=6 BENCH_LOGS_BYTES=20000000 BENCH_CP_BYTES=20000000 BENCH_EXEC_BYTES=20000000
 *   BENCH_FOLLOWERS=10 BENCH_ATTACHES=5 BENCH_HOLD_REQUESTS=200 BENCH_POLICY_DECISIONS=2000 npm run bench
 */
import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import jwt from 'jsonwebtoken'
import { engineInfo, startEngine, stopEngine, type EngineInfo } from '../test/engine/engine'
import { API, call, download, endpoint, execStart, holdStream, load, statInContainer, upload, type Endpoint, type HeldStream, type LoadRun, type Transfer } from './clients'
import { readMemory, startGatewayProcess, type MemoryWindow } from './gateway'
import { countCpu, interleave, median, mergeWindows, onSide, peakOf, SIDES, stats, syncDisks, withMemory, type LatencyStats, type Pids, type Side, type SideName } from './measure'
import { ensureDebianPackages, freePort, startHaproxy } from './peer'
import { startRelay } from './relay'
import { renderPolicyBench, runPolicyBench, writeBenchPolicy, type PolicyBench } from './policy'
import { fairnessTargets, renderFairness, runFairness, type FairnessCase, type FairnessOptions } from './fairness'
import { fmt, ratio, renderGroup, renderTargets, table, type Column, type Group, type Row, type Target } from './report'
import { wrk, writeWrkScript, type WrkRun } from './wrk'
import { renderHeld, runHeld, within, type HeldResult } from './held'

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
  versionRequests: envInt('BENCH_VERSION_REQUESTS', 400),
  segments: envInt('BENCH_SEGMENTS', 4),
  /** Requests per side before each undici case, not counted: V8 compiles the gateway's hot paths meanwhile. */
  warmup: 300,
  /**
   * `_ping`s (8 at a time) per side once before the small-request section, not counted: V8
   * keeps a function in its baseline tier for 10-20 s of traffic (measured: the first
   * 1,000 `_ping`s cost the gateway ~2,600 µs each, ~550 µs once optimized), and a
   * gateway in service has long been past that; the engine and HAProxy need no warm-up.
   */
  jitWarmup: envInt('BENCH_JIT_WARMUP', 5000),
  wrkSeconds: envInt('BENCH_WRK_SECONDS', 3),
  wrkBlocks: envInt('BENCH_WRK_BLOCKS', 2),
  listContainers: envInt('BENCH_LIST_CONTAINERS', 200),
  listRequests: envInt('BENCH_LIST_REQUESTS', 100),
  // [L] the listing among many tenants (0: left out)
  listMany: process.env.BENCH_LIST_MANY === '0' ? 0 : envInt('BENCH_LIST_MANY', 2000),
  listTenants: envInt('BENCH_LIST_TENANTS', 50),
  cycles: envInt('BENCH_CYCLES', 16),
  creates: envInt('BENCH_CREATES', 40),
  logsBytes: envInt('BENCH_LOGS_BYTES', 1_000_000_000),
  cpBytes: envInt('BENCH_CP_BYTES', 500_000_000),
  execBytes: envInt('BENCH_EXEC_BYTES', 500_000_000),
  /** Transfers per side for the 1 GB logs stream (engine-bound at ~60 MB/s here, so one each). */
  logsRounds: envInt('BENCH_LOGS_ROUNDS', 1),
  /** Transfers per side for cp out, cp in and the two execs. */
  streamRounds: envInt('BENCH_STREAM_ROUNDS', 2),
  followers: envInt('BENCH_FOLLOWERS', 200),
  attaches: envInt('BENCH_ATTACHES', 100),
  holdRequests: envInt('BENCH_HOLD_REQUESTS', 1000),
  policyDecisions: envInt('BENCH_POLICY_DECISIONS', 20_000),
  fairnessPings: envInt('BENCH_FAIRNESS_PINGS', 1000),
  fairnessBlocks: envInt('BENCH_FAIRNESS_BLOCKS', 2),
  only: process.env.BENCH_ONLY ?? '',
  heldSessions: envInt('BENCH_HELD_SESSIONS', 3000),
  /** Issue 21's target: the gateway's peak resident memory stays under 120 MB in every workload. */
  rssLimitBytes: 120 * MB,
  sampleMs: 50,
  totalBudgetMs: envInt('BENCH_BUDGET_MINUTES', 15) * 60_000,
  streamTimeoutMs: 240_000,
  tenant: 'team-bench',
  /** Tenant B of section 7, whose pings are measured while team-bench floods. */
  otherTenant: 'team-other',
  cli: '/usr/local/bin/docker',
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
    process.stderr.write(`\nbench: ${signal}, stopping the proxies and the engine...\n`)
    void exit(code)
  })
}

// ---------------------------------------------------------------- helpers

function say (line: string): void { process.stderr.write(`bench: ${line}\n`) }

const mb = (bytes: number): number => bytes / MB
const rate = (t: { bytes: number, ms: number }): number => mb(t.bytes) / (t.ms / 1000)
/** An error's first line, printable characters only (a broken upgrade may carry stream bytes). */
const errText = (err: unknown): string => ((err as Error).message ?? String(err)).split('\n')[0].replace(/[^\x20-\x7e]/g, '').replace(/\s+/g, ' ').trim().slice(0, 200)

/** Run `f` over `items`, `n` at a time. */
async function parallel<T, R> (items: T[], n: number, f: (item: T, i: number) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array<R>(items.length)
  let next = 0
  await Promise.all(Array.from({ length: Math.min(n, items.length) }, async () => {
    for (;;) {
      const i = next++
      if (i >= items.length) return
      out[i] = await f(items[i], i)
    }
  }))
  return out
}

interface Created { Id: string }

/** A create body of the kind the docker CLI sends, within the tenant's rules (and the bench's 20). */
function createBody (image: string, cmd: string[]): Record<string, unknown> {
  return {
    Image: image,
    Cmd: cmd,
    Env: ['BENCH=1', 'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'],
    Labels: { 'com.example.bench': 'portcullis' },
    HostConfig: {
      // json-file is the driver `docker logs` reads back; stated so that a daemon default never changes the logs case.
      // One file big enough for the 1 GB log (bench/policy.ts raises the tenant role's
      // log-max-size cap for the bench deployment: at 10 x 100 MiB json-file rotates part of it away).
      LogConfig: { Type: 'json-file', Config: { 'max-size': '2g', 'max-file': '1' } },
      Memory: 256 * 1024 * 1024,
      PidsLimit: 512,
      CapDrop: ['NET_RAW'],
      SecurityOpt: ['no-new-privileges=true'],
      NetworkMode: 'none',
    },
  }
}

async function createContainer (e: Endpoint, image: string, name: string | undefined, cmd: string[]): Promise<string> {
  const q = name ? `?name=${name}` : ''
  return (await call<Created>(e, 'POST', `${API}/containers/create${q}`, createBody(image, cmd))).Id
}

async function runToExit (e: Endpoint, id: string, timeoutMs: number): Promise<void> {
  await call(e, 'POST', `${API}/containers/${id}/start`)
  const waited = await call<{ StatusCode: number }>(e, 'POST', `${API}/containers/${id}/wait?condition=not-running`, undefined, timeoutMs)
  if (waited.StatusCode !== 0) throw new Error(`container ${id.slice(0, 12)} exited ${waited.StatusCode}`)
}

/** Wait until the container's json-file log stops growing (the engine may still be writing its tail). */
async function settleLog (e: Endpoint, id: string): Promise<void> {
  const info = await call<{ LogPath?: string }>(e, 'GET', `${API}/containers/${id}/json`)
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

function loadRun (latenciesMs: number[], elapsedMs: number): LoadRun {
  return { latenciesMs: Float64Array.from(latenciesMs), elapsedMs }
}

const cpuZero = (): { engine: number, proxy: number } => ({ engine: 0, proxy: 0 })

// ---------------------------------------------------------------- workloads

interface Context {
  sides: Side[]
  /** Portcullis through the admin socket (fixed identity, role admin). */
  admin: Side
  pids: Pids
  deadline: number
  problems: string[]
  image: string
  /** The tenant's endpoint (through Portcullis), for setup. */
  tenant: Endpoint
  direct: Endpoint
}

interface CpuRow { name: string, unit: string, perSide: Partial<Record<Column, { engine: number, proxy: number }>> }

/** 1. Small requests with the Node generator (undici Pool on each unix socket). */
async function smallUndici (ctx: Context, cpuRows: CpuRow[]): Promise<{ group: Group, stats: Record<string, Partial<Record<Column, LatencyStats>>> }> {
  const all: Array<Side & { col: Column }> = [...ctx.sides.map((s) => ({ ...s, col: s.name as Column })), { ...ctx.admin, col: 'admin' as Column }]
  const cases = [
    { path: '/_ping', c: 1, n: settings.requests },
    { path: '/_ping', c: 32, n: settings.requests },
    { path: `${API}/version`, c: 1, n: settings.versionRequests },
    { path: `${API}/version`, c: 32, n: settings.versionRequests },
  ]
  const rows: Row[] = []
  const out: Record<string, Partial<Record<Column, LatencyStats>>> = {}
  if (settings.jitWarmup > 0) {
    say(`small requests (undici): warm-up, ${settings.jitWarmup} GET /_ping per side`)
    for (const s of all) await onSide(s, async () => await load(s.ep, 'GET', `${API}/_ping`, settings.jitWarmup, 8, ctx.deadline))
  }
  for (const k of cases) {
    const name = `GET ${k.path} c${k.c}`
    say(`small requests (undici): ${name}`)
    for (const s of all) await onSide(s, async () => await load(s.ep, 'GET', k.path, Math.min(settings.warmup, k.n), k.c, ctx.deadline))
    const cpu = new Map(all.map((s) => [s.col, cpuZero()]))
    const runs = await interleave(all.map((s) => ({ name: s.col, s })), settings.segments, async ({ s }, b) => {
      const n = Math.floor(k.n * (b + 1) / settings.segments) - Math.floor(k.n * b / settings.segments)
      const side: SideName = s.col === 'admin' ? 'portcullis' : s.col
      return await countCpu(ctx.pids, side, cpu.get(s.col) ?? cpuZero(), async () => await onSide(s, async () => await load(s.ep, 'GET', k.path, n, k.c, ctx.deadline)))
    })
    const st: Partial<Record<Column, LatencyStats>> = {}
    for (const s of all) st[s.col] = stats(runs.get(s.col) ?? [])
    out[name] = st
    const pick = (f: (x: LatencyStats) => number): Partial<Record<Column, number>> => Object.fromEntries(all.map((s) => [s.col, f(st[s.col] as LatencyStats)]))
    rows.push({ name, unit: 'req/s', better: 'higher', values: pick((x) => x.reqPerSec), digits: 0 })
    rows.push({ name, unit: 'p50 ms', better: 'lower', values: pick((x) => x.p50Ms), digits: 3 })
    rows.push({ name, unit: 'p99 ms', better: 'lower', values: pick((x) => x.p99Ms), digits: 3 })
    cpuRows.push({ name: `${name} (undici)`, unit: 'µs/request', perSide: Object.fromEntries(all.map((s) => { const c = cpu.get(s.col) ?? cpuZero(); return [s.col, { engine: c.engine / k.n * 1e6, proxy: c.proxy / k.n * 1e6 }] })) })
  }
  return {
    group: {
      title: `1a. Small requests, Node load generator (undici Pool on each side's unix socket; ${settings.requests} /_ping and ${settings.versionRequests} /version requests per side and concurrency, in ${settings.segments} interleaved blocks)`,
      about: [`direct: the engine's socket; haproxy: its unix socket; portcullis: tenant ${settings.tenant} with a bearer token on the token socket; portcullis admin: the admin socket's fixed identity (no token)`],
      columns: ['direct', 'haproxy', 'portcullis', 'admin'],
      rows,
      notes: [],
    },
    stats: out,
  }
}

/** 1b. Small requests with wrk over loopback TCP. */
async function smallWrk (ctx: Context, script: string): Promise<{ group: Group, runs: Record<string, Partial<Record<SideName, WrkRun[]>>> }> {
  const cases = [
    { path: '/_ping', t: 1, c: 1 },
    { path: '/_ping', t: 2, c: 32 },
    { path: `${API}/version`, t: 1, c: 1 },
    { path: `${API}/version`, t: 2, c: 32 },
  ]
  say('small requests (wrk): warm-up')
  for (const s of ctx.sides) await onSide(s, async () => await wrk(script, s.wrk, '/_ping', 1, 8, 1))
  const rows: Row[] = []
  const out: Record<string, Partial<Record<SideName, WrkRun[]>>> = {}
  for (const k of cases) {
    const name = `GET ${k.path} c${k.c}`
    say(`small requests (wrk): ${name}`)
    const runs = await interleave(ctx.sides, settings.wrkBlocks, async (s) => await onSide(s, async () => await wrk(script, s.wrk, k.path, k.t, k.c, settings.wrkSeconds)))
    const per: Partial<Record<SideName, WrkRun[]>> = {}
    for (const s of ctx.sides) {
      const r = runs.get(s.name) ?? []
      per[s.name] = r
      for (const x of r) if (x.errors || x.non2xx) ctx.problems.push(`wrk ${name} via ${s.name}: ${x.errors} socket errors, ${x.non2xx} non-2xx answers of ${x.requests}`)
    }
    out[name] = per
    const pick = (f: (x: WrkRun) => number): Partial<Record<Column, number>> => Object.fromEntries(ctx.sides.map((s) => [s.name, median((per[s.name] ?? []).map(f))]))
    rows.push({ name, unit: 'req/s', better: 'higher', values: pick((x) => x.reqPerSec), digits: 0 })
    rows.push({ name, unit: 'p50 ms', better: 'lower', values: pick((x) => x.p50Us / 1000), digits: 3 })
    rows.push({ name, unit: 'p99 ms', better: 'lower', values: pick((x) => x.p99Us / 1000), digits: 3 })
  }
  return {
    group: {
      title: `1b. Small requests, wrk over loopback TCP (-t1 -c1 / -t2 -c32, ${settings.wrkBlocks} interleaved blocks of ${settings.wrkSeconds} s per side; medians of the blocks)`,
      about: ['direct: the engine\'s TCP port (wrk under nsenter in the engine\'s network namespace); haproxy: its TCP frontend; portcullis: its TCP listener, tenant bearer token (wrk -H)'],
      columns: ['direct', 'haproxy', 'portcullis'],
      rows,
      notes: [],
    },
    runs: out,
  }
}

/** 2. Engine-bound operations: the tenant's listing, the create-start-remove cycle, ContainerCreate against 20 body rules. */
async function engineBound (ctx: Context): Promise<{ group: Group, stats: Record<string, Partial<Record<SideName, LatencyStats>>> }> {
  const rows: Row[] = []
  const notes: string[] = []
  const out: Record<string, Partial<Record<SideName, LatencyStats>>> = {}
  const blocks = 2
  const add = (name: string, unit: string, st: Partial<Record<SideName, LatencyStats>>, rateUnit: string): void => {
    out[name] = st
    const pick = (f: (x: LatencyStats) => number): Partial<Record<Column, number>> => Object.fromEntries(SIDES.map((s) => [s, f(st[s] as LatencyStats)]))
    rows.push({ name, unit: rateUnit, better: 'higher', values: pick((x) => x.reqPerSec), digits: 1 })
    rows.push({ name, unit: `p50 ${unit}`, better: 'lower', values: pick((x) => x.p50Ms), digits: 2 })
    rows.push({ name, unit: `p99 ${unit}`, better: 'lower', values: pick((x) => x.p99Ms), digits: 2 })
  }

  // Listing: every container on the engine is the tenant's, so all three sides list the same set.
  if (settings.only !== 'creates') {
    const p = `${API}/containers/json?all=1`
    const name = 'GET /containers/json?all=1 c1'
    say(`engine-bound: ${name}`)
    const counts: Partial<Record<SideName, number>> = {}
    for (const s of ctx.sides) counts[s.name] = (await onSide(s, async () => await call<unknown[]>(s.ep, 'GET', p))).length
    if (counts.portcullis !== counts.direct || counts.haproxy !== counts.direct) ctx.problems.push(`listing: direct ${counts.direct}, haproxy ${counts.haproxy}, portcullis (tenant) ${counts.portcullis} containers`)
    notes.push(`listing: ${counts.direct} containers on the engine, ${counts.portcullis} in the tenant's view`)
    for (const s of ctx.sides) await onSide(s, async () => await load(s.ep, 'GET', p, 10, 1, ctx.deadline))
    // [LST] with the proxies' CPU per list, as the listing among tenants below
    const cpu = new Map(SIDES.map((s) => [s, cpuZero()]))
    const per = Math.max(1, Math.round(settings.listRequests / (blocks * 2)))
    const runs = await interleave(ctx.sides, blocks * 2, async (s) => await onSide(s, async () => await countCpu(ctx.pids, s.name, cpu.get(s.name) ?? cpuZero(), async () => await load(s.ep, 'GET', p, per, 1, ctx.deadline))))
    add(`${name} (${counts.direct} containers)`, 'ms', Object.fromEntries(SIDES.map((s) => [s, stats(runs.get(s) ?? [])])), 'req/s')
    notes.push(`${name} (${counts.direct} containers): proxy CPU per list ${SIDES.filter((s) => s !== 'direct').map((s) => `${s} ${fmt((cpu.get(s)?.proxy ?? 0) / (per * blocks * 2) * 1e6, 0)} µs`).join(', ')}`)
  }

  // [L] Listing among many tenants: BENCH_LIST_MANY containers (create-only, never started)
  // made on the engine directly with the owner labels of BENCH_LIST_TENANTS tenants, one of
  // them the bench tenant. The tenant's plain list through Portcullis is compared with the
  // same answer asked of the engine and HAProxy, i.e. with the owner-label filter in the query.
  if (settings.listMany > 0 && settings.only !== 'creates') {
    const tenants = Math.max(1, settings.listTenants)
    const tag = randomBytes(3).toString('hex')
    say(`engine-bound: ${settings.listMany} containers across ${tenants} tenants (create only, directly on the engine)`)
    const ids = await parallel(Array.from({ length: settings.listMany }, (_x, i) => i), 8, async (i) => {
      const owner = i % tenants === 0 ? settings.tenant : `team-many-${i % tenants}`
      return (await call<Created>(ctx.direct, 'POST', `${API}/containers/create?name=pcb-many-${tag}-${i}`, {
        Image: ctx.image, Cmd: ['true'], Labels: { 'io.portcullis.tenant': owner, 'io.portcullis.subject': 'bench' },
      })).Id
    })
    try {
      const filtered = `${API}/containers/json?all=1&filters=${encodeURIComponent(JSON.stringify({ label: [`io.portcullis.tenant=${settings.tenant}`] }))}`
      const pathOf = (s: Side): string => s.name === 'portcullis' ? `${API}/containers/json?all=1` : filtered
      const counts: Partial<Record<SideName, number>> = {}
      for (const s of ctx.sides) counts[s.name] = (await onSide(s, async () => await call<unknown[]>(s.ep, 'GET', pathOf(s)))).length
      if (counts.portcullis !== counts.direct || counts.haproxy !== counts.direct) ctx.problems.push(`listing among tenants: direct ${counts.direct}, haproxy ${counts.haproxy}, portcullis (tenant) ${counts.portcullis} containers`)
      for (const c of [1, 8]) {
        const name = `GET /containers/json?all=1 c${c} (${settings.listMany} containers, ${tenants} tenants; ${counts.direct} the tenant's)`
        say(`engine-bound: ${name}`)
        for (const s of ctx.sides) await onSide(s, async () => await load(s.ep, 'GET', pathOf(s), 10, c, ctx.deadline))
        const cpu = new Map(SIDES.map((s) => [s, cpuZero()]))
        const per = Math.max(c, Math.round(settings.listRequests / (blocks * 2)))
        const runs = await interleave(ctx.sides, blocks * 2, async (s) => await onSide(s, async () => await countCpu(ctx.pids, s.name, cpu.get(s.name) ?? cpuZero(), async () => await load(s.ep, 'GET', pathOf(s), per, c, ctx.deadline))))
        add(name, 'ms', Object.fromEntries(SIDES.map((s) => [s, stats(runs.get(s) ?? [])])), 'req/s')
        const n = per * blocks * 2
        notes.push(`${name}: proxy CPU per list ${SIDES.filter((s) => s !== 'direct').map((s) => `${s} ${fmt((cpu.get(s)?.proxy ?? 0) / n * 1e6, 0)} µs`).join(', ')}; engine CPU per list ${SIDES.map((s) => `${s} ${fmt((cpu.get(s)?.engine ?? 0) / n * 1e6, 0)} µs`).join(', ')}`)
      }
    } finally {
      say(`engine-bound: removing the ${ids.length} containers`)
      await parallel(ids, 8, async (id) => await call(ctx.direct, 'DELETE', `${API}/containers/${id}?force=1`))
    }
  }

  // Create, start, remove (force), timed per cycle. ([LST] not with BENCH_ONLY=lists)
  if (settings.only !== 'lists') {
    say('engine-bound: create-start-remove cycle')
    const cycle = async (s: Side, n: number): Promise<LoadRun> => {
      const lat: number[] = []
      const t0 = performance.now()
      for (let i = 0; i < n; i++) {
        const t = performance.now()
        const id = (await call<Created>(s.ep, 'POST', `${API}/containers/create`, createBody(ctx.image, ['true']))).Id
        await call(s.ep, 'POST', `${API}/containers/${id}/start`)
        await call(s.ep, 'DELETE', `${API}/containers/${id}?force=1`)
        lat.push(performance.now() - t)
      }
      return loadRun(lat, performance.now() - t0)
    }
    for (const s of ctx.sides) await onSide(s, async () => await cycle(s, 1))
    const runs = await interleave(ctx.sides, blocks, async (s) => await onSide(s, async () => await cycle(s, Math.max(1, Math.round(settings.cycles / blocks)))))
    add('create + start + remove cycle', 'ms', Object.fromEntries(SIDES.map((s) => [s, stats(runs.get(s) ?? [])])), 'cycles/s')
  }

  // ContainerCreate alone: through Portcullis the tenant's create is checked against base.csv and bench.csv's 20 body rules.
  if (settings.only !== 'lists') {
    say('engine-bound: ContainerCreate (20-rule body policy)')
    const created: string[] = []
    const create = async (s: Side, n: number): Promise<LoadRun> => {
      const lat: number[] = []
      const t0 = performance.now()
      for (let i = 0; i < n; i++) {
        const t = performance.now()
        created.push((await call<Created>(s.ep, 'POST', `${API}/containers/create`, createBody(ctx.image, ['true']))).Id)
        lat.push(performance.now() - t)
      }
      const elapsed = performance.now() - t0
      // Removed between blocks, not timed, so that every block starts from the same engine state.
      await parallel(created.splice(0), 4, async (id) => await call(ctx.direct, 'DELETE', `${API}/containers/${id}?force=1`))
      return loadRun(lat, elapsed)
    }
    for (const s of ctx.sides) await onSide(s, async () => await create(s, 1))
    const runs = await interleave(ctx.sides, blocks * 2, async (s) => await onSide(s, async () => await create(s, Math.max(1, Math.round(settings.creates / (blocks * 2))))))
    add('POST /containers/create (20 body rules)', 'ms', Object.fromEntries(SIDES.map((s) => [s, stats(runs.get(s) ?? [])])), 'creates/s')
  }
  return {
    group: {
      title: '2. Engine-bound operations (undici, concurrency 1, interleaved blocks)',
      about: [`portcullis: tenant ${settings.tenant} (bearer token): the listing is narrowed to the tenant's containers by an owner-label filter and checked again; creates are stamped with owner labels, checked against the container quota and 20 + base.csv body rules`],
      columns: ['direct', 'haproxy', 'portcullis'],
      rows,
      notes,
    },
    stats: out,
  }
}

interface StreamSide { mbPerSec: number | null, bytes: number, ms: number, error?: string, rssPeak?: number, rssBefore?: number }
interface StreamResult { name: string, bytesPerRun: number, sides: Partial<Record<SideName, StreamSide>>, cpu: Partial<Record<SideName, { engine: number, proxy: number }>>, notes: string[] }

/**
 * One stream on every side, `rounds` times, the order reversed every other round; each
 * proxy's memory is watched during its own transfers. A side whose transfer fails is
 * reported as broken with its error (HAProxy and CLI 28.x exec), not as a failed run.
 */
async function streamCompare (ctx: Context, name: string, bytesPerRun: number, rounds: number, sync: boolean,
  run: (s: Side) => Promise<Transfer>, check: (s: Side, t: Transfer) => string | undefined, expectBreak: SideName[] = []): Promise<StreamResult> {
  say(`streams: ${name}`)
  const acc = new Map<SideName, { transfers: Transfer[], memory?: MemoryWindow, error?: string, cpu: { engine: number, proxy: number } }>(SIDES.map((s) => [s, { transfers: [], cpu: cpuZero() }]))
  await interleave(ctx.sides, rounds, async (s) => {
    const a = acc.get(s.name)
    if (!a || a.error) return
    if (sync) syncDisks()
    try {
      const w = await withMemory(s, settings.sampleMs, async () => await countCpu(ctx.pids, s.name, a.cpu, async () => await onSide(s, async () => await run(s))))
      a.transfers.push(w.result)
      if (w.memory) a.memory = mergeWindows(a.memory, w.memory)
      const bad = check(s, w.result)
      if (bad) ctx.problems.push(`${name} via ${s.name}: ${bad}`)
    } catch (err) {
      a.error = errText(err)
      if (!expectBreak.includes(s.name)) ctx.problems.push(`${name} via ${s.name}: ${a.error}`)
    }
  })
  const result: StreamResult = { name, bytesPerRun, sides: {}, cpu: {}, notes: [] }
  for (const s of SIDES) {
    const a = acc.get(s)
    if (!a) continue
    const bytes = a.transfers.reduce((n, t) => n + t.bytes, 0)
    const ms = a.transfers.reduce((n, t) => n + t.ms, 0)
    result.sides[s] = { mbPerSec: a.error ? null : rate({ bytes, ms }), bytes, ms, error: a.error, rssPeak: a.memory ? peakOf(a.memory) : undefined, rssBefore: a.memory?.before }
    if (!a.error && bytes > 0) result.cpu[s] = { engine: a.cpu.engine / (bytes / 1e9), proxy: a.cpu.proxy / (bytes / 1e9) }
    if (a.error) result.notes.push(`${s} breaks: ${a.error}`)
  }
  return result
}

/** `docker exec` with the real CLI 28.x, its output counted by wc -c; timed from spawn to exit. */
async function cliExec (s: Side, containerId: string, bytes: number, timeoutMs: number): Promise<Transfer> {
  const start = performance.now()
  const out = await new Promise<string>((resolve, reject) => {
    const child = spawn('sh', ['-c', `"${settings.cli}" -H "unix://${s.ep.socket}" exec ${containerId} head -c ${bytes} /dev/zero | wc -c; exit $(( $? ))`], {
      env: { ...process.env, DOCKER_CONFIG: s.dockerConfig, DOCKER_HOST: '', DOCKER_CONTEXT: '' },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let text = ''
    let errText = ''
    child.stdout.on('data', (b: Buffer) => { text += b.toString() })
    child.stderr.on('data', (b: Buffer) => { errText += b.toString() })
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs)
    child.on('error', reject)
    child.on('close', () => {
      clearTimeout(timer)
      if (errText.trim()) reject(new Error(`docker exec: ${errText.trim()}`))
      else resolve(text.trim())
    })
  })
  const n = Number(out)
  if (!Number.isFinite(n) || n !== bytes) throw new Error(`docker exec: ${out} bytes, expected ${bytes}`)
  return { bytes: n, payload: n, ms: performance.now() - start }
}

/** 3. The streams: logs (when `ids.logs` is given), cp out and in, exec with a raw client and with the CLI. */
async function streamSection (ctx: Context, ids: { logs?: string, big: string, upload: string, exec: string }, cliVersion: string): Promise<StreamResult[]> {
  const { sides, direct, problems } = ctx
  const t = settings.streamTimeoutMs
  const streams: StreamResult[] = []
  if (ids.logs !== undefined) {
    const p = `${API}/containers/${ids.logs}/logs?stdout=1`
    const r = await streamCompare(ctx, `GET logs (${fmt(mb(settings.logsBytes), 0)} MB stdout)`, settings.logsBytes, settings.logsRounds, true,
      async (s) => await download(s.ep, p, true, t),
      (_s, x) => x.payload === settings.logsBytes ? undefined : `${x.payload} payload bytes, expected ${settings.logsBytes}`)
    streams.push(r)
  }
  {
    const p = `${API}/containers/${ids.big}/archive?path=${encodeURIComponent('/tmp/big')}`
    let expect: number | undefined
    const r = await streamCompare(ctx, `GET archive, cp out (${fmt(mb(settings.cpBytes), 0)} MB file)`, settings.cpBytes, settings.streamRounds, true,
      async (s) => await download(s.ep, p, false, t),
      (_s, x) => { expect ??= x.bytes; return x.bytes === expect && x.bytes >= settings.cpBytes ? undefined : `${x.bytes} bytes (first side: ${expect}) for a ${settings.cpBytes}-byte file` })
    streams.push(r)
  }
  {
    const names: Array<{ side: SideName, name: string }> = []
    const r = await streamCompare(ctx, `PUT archive, cp in (${fmt(mb(settings.cpBytes), 0)} MB tar)`, settings.cpBytes, settings.streamRounds, true,
      async (s) => {
        const name = `${s.name}-${names.length}.bin`
        names.push({ side: s.name, name })
        return await upload(s.ep, ids.upload, '/tmp', name, settings.cpBytes, t)
      },
      () => undefined)
    for (const { name } of names) {
      const size = await statInContainer(direct, ids.upload, `/tmp/${name}`).catch(() => -1)
      if (size !== settings.cpBytes) problems.push(`archive PUT: /tmp/${name} is ${size} bytes in the container, expected ${settings.cpBytes}`)
    }
    streams.push(r)
  }
  {
    const one = async (s: Side, bytes: number): Promise<Transfer> => {
      const exec = await call<{ Id: string }>(s.ep, 'POST', `${API}/containers/${ids.exec}/exec`, {
        AttachStdout: true, AttachStderr: true, Tty: false, Cmd: ['head', '-c', String(bytes), '/dev/zero'],
      })
      return await execStart(s.ep, exec.Id, t)
    }
    // One small warm-up each (not counted; HAProxy's break shows here already and is reported below).
    for (const s of sides) await onSide(s, async () => await one(s, 10 * 1000 * 1000)).catch(() => undefined)
    streams.push(await streamCompare(ctx, `exec start, raw 101 client (${fmt(mb(settings.execBytes), 0)} MB stdout)`, settings.execBytes, settings.streamRounds, false,
      async (s) => await one(s, settings.execBytes),
      (_s, x) => x.payload === settings.execBytes ? undefined : `${x.payload} payload bytes, expected ${settings.execBytes}`, ['haproxy']))
    streams.push(await streamCompare(ctx, `docker exec, CLI ${cliVersion.split(',')[0]} (${fmt(mb(settings.execBytes), 0)} MB stdout)`, settings.execBytes, settings.streamRounds, false,
      async (s) => await cliExec(s, ids.exec, settings.execBytes, t),
      () => undefined, ['haproxy']))
  }
  return streams
}

interface HoldResult {
  side: SideName
  opened: { logs: number, attach: number, attachStatus: number[] }
  without: LatencyStats
  during: LatencyStats
  rssPeak?: number
  rssBefore?: number
  error?: string
}

/** 5. `logs -f` and attach sessions held open while small requests continue. */
async function holdOpen (ctx: Context, tickId: string): Promise<HoldResult[]> {
  const results: HoldResult[] = []
  const p = '/_ping'
  await interleave(ctx.sides, 1, async (s) => {
    say(`hold: ${settings.followers} logs -f and ${settings.attaches} attaches via ${s.name}`)
    await onSide(s, async () => await load(s.ep, 'GET', p, Math.min(200, settings.holdRequests), 8, ctx.deadline))
    const without = stats([await onSide(s, async () => await load(s.ep, 'GET', p, settings.holdRequests, 8, ctx.deadline))])
    const held: HeldStream[] = []
    const statuses = new Set<number>()
    let error: string | undefined
    let logs = 0
    let attach = 0
    try {
      const kinds: Array<'logs' | 'attach'> = [...Array<'logs'>(settings.followers).fill('logs'), ...Array<'attach'>(settings.attaches).fill('attach')]
      await onSide(s, async () => await parallel(kinds, 16, async (k) => {
        const h = await holdStream(s.ep, k, tickId)
        held.push(h)
        if (k === 'logs') logs++
        else { attach++; statuses.add(h.status) }
      }))
      await sleep(1000)
      const w = await withMemory(s, settings.sampleMs, async () => await onSide(s, async () => await load(s.ep, 'GET', p, settings.holdRequests, 8, ctx.deadline)))
      const dead = held.filter((h) => h.bytes === 0).length
      if (dead) ctx.problems.push(`hold via ${s.name}: ${dead} of ${held.length} held streams received nothing`)
      results.push({ side: s.name, opened: { logs, attach, attachStatus: [...statuses] }, without, during: stats([w.result]), rssPeak: w.memory ? peakOf(w.memory) : undefined, rssBefore: w.memory?.before })
    } catch (err) {
      error = errText(err)
      ctx.problems.push(`hold via ${s.name}: ${error} (${logs} logs -f and ${attach} attaches open)`)
      results.push({ side: s.name, opened: { logs, attach, attachStatus: [...statuses] }, without, during: without, error })
    } finally {
      for (const h of held) h.close()
      await sleep(500)
    }
  })
  return results
}

interface RoundTrip {
  name: string
  /** Engine requests for the first such request (cold: nothing cached yet). */
  cold: number
  /** Engine requests per request, mean over the following ones. */
  warm: number
  /** The issue's bound on extra round trips (beyond the forwarded request itself); null: none (shown for reference). */
  maxExtra: number | null
}

/**
 * 6. Engine round trips per request: a second gateway (same configuration) whose
 * upstream is a counting relay in front of the engine, asked as the tenant.
 */
async function roundTrips (dir: string, engineSocket: string, gwOptions: { policyDir: string, jwtSecret: string }, bearer: Record<string, string>, target: { id: string, name: string }, image: string, direct: Endpoint): Promise<RoundTrip[]> {
  const relay = await startRelay(path.join(dir, 'relay.sock'), engineSocket)
  const gwDir = path.join(dir, 'gateway-counted')
  fs.mkdirSync(gwDir)
  let gw2: Awaited<ReturnType<typeof startGatewayProcess>> | undefined
  let ep: Endpoint | undefined
  try {
    cleanup.add('stop the counted gateway and its relay', async () => { await gw2?.stop(); await relay.close() })
    gw2 = await startGatewayProcess(gwDir, relay.socket, { ...gwOptions, tcpPort: await freePort() })
    ep = endpoint(gw2.tokenSocket, 1, bearer)
    await sleep(500)
    const e = ep
    const created: string[] = []
    const hit = async (p: string, body?: unknown): Promise<void> => {
      const method = body === undefined ? 'GET' : 'POST'
      const r = await e.pool.request({
        method,
        path: p,
        headers: body === undefined ? e.headers : { ...e.headers, 'content-type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(30_000),
      })
      const text = await r.body.text()
      if (r.statusCode >= 300) throw new Error(`round trips: ${method} ${p}: ${r.statusCode} ${text.trim().slice(0, 200)}`)
      if (body !== undefined) created.push((JSON.parse(text) as Created).Id)
    }
    const cases: Array<{ name: string, path: string, body?: unknown, maxExtra: number | null, n: number }> = [
      { name: 'GET /_ping', path: '/_ping', maxExtra: 0, n: 10 },
      { name: 'GET /containers/json?all=1 (list)', path: `${API}/containers/json?all=1`, maxExtra: 0, n: 10 },
      { name: 'GET /containers/{name}/json (by name)', path: `${API}/containers/${target.name}/json`, maxExtra: 1, n: 10 },
      { name: 'GET /containers/{id}/json (by full id)', path: `${API}/containers/${target.id}/json`, maxExtra: 1, n: 10 },
      { name: 'GET /containers/{id}/logs?tail=1', path: `${API}/containers/${target.id}/logs?stdout=1&tail=1`, maxExtra: 1, n: 10 },
      { name: 'GET /version (reference)', path: `${API}/version`, maxExtra: null, n: 10 },
      { name: 'POST /containers/create (reference)', path: `${API}/containers/create`, body: createBody(image, ['true']), maxExtra: null, n: 3 },
    ]
    const out: RoundTrip[] = []
    try {
      for (const c of cases) {
        const c0 = relay.count()
        await hit(c.path, c.body)
        const c1 = relay.count()
        for (let i = 0; i < c.n; i++) await hit(c.path, c.body)
        out.push({ name: c.name, cold: c1 - c0, warm: (relay.count() - c1) / c.n, maxExtra: c.maxExtra })
      }
    } finally {
      await parallel(created, 4, async (id) => await call(direct, 'DELETE', `${API}/containers/${id}?force=1`))
    }
    return out
  } finally {
    await ep?.pool.destroy()
    await gw2?.stop()
    await relay.close()
  }
}

function renderRoundTrips (rows: RoundTrip[]): string {
  return [
    '6. Engine requests per request through Portcullis (tenant, bearer token; a second gateway whose upstream is a counting relay; 1 = the forwarded request alone)',
    table(['request', 'first (cold)', 'next ones (mean)', 'extra round trips allowed'],
      rows.map((r) => [r.name, String(r.cold), fmt(r.warm, 1), r.maxExtra === null ? '- (no bound)' : String(r.maxExtra)]), ['l', 'r', 'r', 'r']),
    '',
  ].join('\n')
}

// ---------------------------------------------------------------- main

interface Report {
  date: string
  machine: { cpus: number, cpuModel: string, kernel: string, node: string, memoryBytes: number }
  engine: { version: string, apiVersion: string }
  peer: { haproxy: string, config: string }
  cli: string
  settings: typeof settings
  gateway: { rssIdle: number, rssAfterSetup: number, rssAfterRequests: number }
  groups: Group[]
  undici: Record<string, Partial<Record<Column, LatencyStats>>>
  wrk: Record<string, Partial<Record<SideName, WrkRun[]>>>
  engineBound: Record<string, Partial<Record<SideName, LatencyStats>>>
  streams: StreamResult[]
  hold: HoldResult[]
  roundTrips: RoundTrip[]
  fairness: FairnessCase[]
  held: HeldResult | null
  cpu: CpuRow[]
  policy: PolicyBench
  targets: Target[]
  problems: string[]
  totalSeconds: number
}

function streamGroup (streams: StreamResult[]): Group {
  const rows: Row[] = []
  const notes: string[] = []
  for (const s of streams) {
    rows.push({ name: s.name, unit: 'MB/s', better: 'higher', values: Object.fromEntries(SIDES.map((k) => [k, s.sides[k]?.mbPerSec ?? null])), digits: 1 })
    const rss: Partial<Record<Column, number | null>> = { haproxy: s.sides.haproxy?.rssPeak !== undefined ? mb(s.sides.haproxy.rssPeak) : null, portcullis: s.sides.portcullis?.rssPeak !== undefined ? mb(s.sides.portcullis.rssPeak) : null }
    rows.push({ name: s.name, unit: 'peak RSS MB', better: 'lower', values: rss, digits: 1 })
    for (const n of s.notes) notes.push(`${s.name}: ${n}`)
  }
  return {
    title: `3. Streams (MB/s, 1 MB = 10^6 bytes; ${settings.logsRounds} logs and ${settings.streamRounds} other transfer(s) per side, interleaved; peak RSS = max(VmRSS sampled every ${settings.sampleMs} ms, VmHWM reset before the run) of the proxy process during its own transfers)`,
    about: [`portcullis: tenant ${settings.tenant} (bearer token on the token socket; the CLI sends it from DOCKER_CONFIG HttpHeaders); exec (raw) is the CLI 28.x handshake (Upgrade: tcp, expects 101) from Node`],
    columns: ['direct', 'haproxy', 'portcullis'],
    rows,
    notes,
  }
}

function holdGroup (hold: HoldResult[]): Group {
  const by = (side: SideName): HoldResult | undefined => hold.find((h) => h.side === side)
  const v = (f: (h: HoldResult) => number): Partial<Record<Column, number | null>> => Object.fromEntries(SIDES.map((s) => { const h = by(s); return [s, h && !h.error ? f(h) : null] }))
  const notes = hold.map((h) => `${h.side}: ${h.opened.logs} logs -f and ${h.opened.attach} attaches open (attach answered ${h.opened.attachStatus.join('/') || '-'})${h.error ? `; broke: ${h.error}` : ''}`)
  return {
    title: `5. Held streams: ${settings.followers} logs -f and ${settings.attaches} attach sessions open on a container printing a line every 0.5 s, while GET /_ping continues (${settings.holdRequests} requests, undici, concurrency 8)`,
    about: ['without = the same requests on the same side just before the streams were opened'],
    columns: ['direct', 'haproxy', 'portcullis'],
    rows: [
      { name: 'GET /_ping without streams', unit: 'p50 ms', better: 'lower', values: v((h) => h.without.p50Ms), digits: 3 },
      { name: 'GET /_ping during the hold', unit: 'p50 ms', better: 'lower', values: v((h) => h.during.p50Ms), digits: 3 },
      { name: 'GET /_ping without streams', unit: 'p99 ms', better: 'lower', values: v((h) => h.without.p99Ms), digits: 3 },
      { name: 'GET /_ping during the hold', unit: 'p99 ms', better: 'lower', values: v((h) => h.during.p99Ms), digits: 3 },
      { name: 'GET /_ping during the hold', unit: 'req/s', better: 'higher', values: v((h) => h.during.reqPerSec), digits: 0 },
      { name: 'proxy peak RSS during the hold', unit: 'MB', better: 'lower', values: { haproxy: by('haproxy')?.rssPeak !== undefined ? mb(by('haproxy')?.rssPeak ?? 0) : null, portcullis: by('portcullis')?.rssPeak !== undefined ? mb(by('portcullis')?.rssPeak ?? 0) : null }, digits: 1 },
    ],
    notes,
  }
}

function cpuTable (rows: CpuRow[]): string {
  const cols: Column[] = ['direct', 'haproxy', 'portcullis', 'admin']
  const cell = (r: CpuRow, c: Column): string => {
    const x = r.perSide[c]
    if (!x) return '-'
    return c === 'direct' ? fmt(x.engine, 1) : `${fmt(x.engine, 1)} + ${fmt(x.proxy, 1)}`
  }
  const total = (r: CpuRow, c: Column): number => (r.perSide[c]?.engine ?? NaN) + (r.perSide[c]?.proxy ?? 0)
  return [
    'CPU for the same work (from /proc/<pid>/stat; dockerd + the proxy process; x = total / dockerd direct; 10 ms clock ticks)',
    table(['case', 'unit', ...cols.flatMap((c) => c === 'direct' ? ['dockerd direct'] : [`dockerd + ${c}`, 'x']),],
      rows.map((r) => [r.name, r.unit, ...cols.flatMap((c) => c === 'direct' ? [cell(r, c)] : [cell(r, c), fmt(total(r, c) / total(r, 'direct'), 2)])]),
      ['l', 'l', 'r', 'r', 'r', 'r', 'r', 'r', 'r']),
    '',
  ].join('\n')
}

/** Issue 21's targets, from this run's ratios and CPU table. */
function targets (r: Omit<Report, 'targets' | 'totalSeconds'>): Target[] {
  const out: Target[] = []
  const rowOf = (g: Group | undefined, name: string, unit: string): Row | undefined => g?.rows.find((x) => x.name.startsWith(name) && x.unit === unit)
  const [gUndici, gWrk, gEngine] = [r.groups[0], r.groups[1], r.groups[2]]
  for (const [name, limit] of [['GET /_ping c32', 100], ['GET /_ping c1', 150], [`GET ${API}/version c32`, 100], [`GET ${API}/version c1`, 150]] as const) {
    const row = r.cpu.find((x) => x.name.startsWith(name))
    const us = row?.perSide.portcullis?.proxy
    out.push({ target: `gateway CPU per small request, ${name.replace(/^GET /, '')} (tenant, audit on): at most ${limit} µs`, measured: us === undefined ? '-' : `${fmt(us, 0)} µs (haproxy ${fmt(row?.perSide.haproxy?.proxy ?? null, 0)} µs)`, met: us === undefined ? null : us <= limit })
  }
  for (const [label, g] of [['wrk', gWrk], ['undici', gUndici]] as const) {
    const row = rowOf(g, 'GET /_ping c32', 'req/s')
    const p = row ? ratio(row, 'portcullis') : null
    const h = row ? ratio(row, 'haproxy') : null
    out.push({ target: `_ping c32 req/s ratio >= HAProxy's, ${label}`, measured: `portcullis ${fmt(p, 2)}x, haproxy ${fmt(h, 2)}x direct`, met: p !== null && h !== null ? p >= h : null })
  }
  // Every engine-bound workload at or above HAProxy's ratio, or 0.9x where HAProxy cannot do it.
  const atLeastPeer = (label: string, p: number | null, h: number | null): void => {
    const min = h === null ? 0.9 : h
    out.push({ target: `${label}: ratio >= HAProxy's (0.9x where it is broken)`, measured: `${fmt(p, 2)}x (haproxy ${h === null ? 'broken' : fmt(h, 2) + 'x'})`, met: p === null ? null : p >= min })
  }
  for (const [name, g, unit] of [[`GET ${API}/version c1`, gWrk, 'req/s'], [`GET ${API}/version c32`, gWrk, 'req/s'], ['GET /containers/json', gEngine, 'req/s'], ['POST /containers/create', gEngine, 'creates/s'], ['create + start + remove', gEngine, 'cycles/s']] as const) {
    for (const row of (g?.rows ?? []).filter((x) => x.name.startsWith(name) && x.unit === unit)) atLeastPeer(`${row.name} ${unit}`, ratio(row, 'portcullis'), ratio(row, 'haproxy'))
  }
  for (const s of r.streams) {
    const d = s.sides.direct?.mbPerSec
    const p = s.sides.portcullis?.mbPerSec
    const h = s.sides.haproxy?.mbPerSec
    atLeastPeer(`${s.name} MB/s`, typeof d === 'number' && typeof p === 'number' ? p / d : null, typeof d === 'number' && typeof h === 'number' ? h / d : null)
  }
  const peaks = r.streams.map((s) => ({ name: s.name, peak: s.sides.portcullis?.rssPeak ?? NaN })).filter((x) => Number.isFinite(x.peak))
  const worst = peaks.reduce<{ name: string, peak: number } | undefined>((a, b) => (!a || b.peak > a.peak ? b : a), undefined)
  out.push({ target: `gateway peak resident memory under ${fmt(mb(settings.rssLimitBytes), 0)} MB in every workload`, measured: worst ? `worst ${fmt(mb(worst.peak), 1)} MB (${worst.name}); ${peaks.map((x) => fmt(mb(x.peak), 0)).join(' / ')} MB` : '-', met: worst ? worst.peak < settings.rssLimitBytes : null })
  const largest = r.policy.sizes[r.policy.sizes.length - 1]
  out.push({ target: 'policy: median decision at most 25 µs with 10,000 lines', measured: largest ? `${fmt(largest.decideMedianUs, 1)} µs with ${largest.lines} lines (${r.policy.sizes.map((x) => `${x.lines}: ${fmt(x.decideMedianUs, 1)}`).join(', ')} µs)` : '-', met: largest ? largest.decideMedianUs <= 25 : null })
  if (r.roundTrips.length) {
    const worst = (f: (x: RoundTrip) => boolean): RoundTrip[] => r.roundTrips.filter(f)
    const bounded = r.roundTrips.filter((x) => x.maxExtra !== null)
    const over = worst((x) => x.maxExtra !== null && Math.max(x.cold, x.warm) - 1 > x.maxExtra)
    out.push({ target: 'ownership checks add at most one engine round trip, none for list calls', measured: bounded.map((x) => `${x.name.replace(/^GET /, '')}: ${x.cold}/${fmt(x.warm, 1)}`).join('; ') + ' engine requests (cold/warm)', met: over.length === 0 })
  } else {
    out.push({ target: 'ownership checks add at most one engine round trip, none for list calls', measured: 'not measured (see PROBLEMS)', met: null })
  }
  out.push(...fairnessTargets(r.fairness))
  return out
}

function render (r: Report): string {
  const out: string[] = []
  out.push('')
  out.push('Portcullis benchmark: the engine directly, HAProxy (docker-socket-proxy style allow-list) and Portcullis (auth + policy + audit), measured in the same run')
  out.push(`engine ${r.engine.version} (API ${r.engine.apiVersion}), ${r.peer.haproxy}, docker CLI ${r.cli}, node ${r.machine.node}, ${r.machine.cpus} CPUs (${r.machine.cpuModel}), Linux ${r.machine.kernel}`)
  out.push('x direct = side / direct: for rates below 1 is slower, for times above 1 is slower. "broken" = the side cannot do it (see the notes).')
  out.push('')
  for (const g of r.groups) out.push(renderGroup(g))
  out.push(`4. ${renderPolicyBench(r.policy)}`)
  if (r.roundTrips.length) out.push(renderRoundTrips(r.roundTrips))
  if (r.fairness.length) out.push(renderFairness(r.fairness, { pings: settings.fairnessPings, blocks: settings.fairnessBlocks }))
  if (r.held) out.push(renderHeld(r.held), '')
  out.push(cpuTable(r.cpu))
  out.push(`gateway RSS: ${fmt(mb(r.gateway.rssIdle))} MB idle after start, ${fmt(mb(r.gateway.rssAfterSetup))} MB after the setup, ${fmt(mb(r.gateway.rssAfterRequests))} MB after the request runs`)
  out.push('')
  out.push(renderTargets(r.targets))
  if (r.problems.length) {
    out.push('PROBLEMS (broken measurements):')
    for (const p of r.problems) out.push(`  - ${p}`)
  }
  out.push(`total ${fmt(r.totalSeconds, 0)} s; results in ${path.relative(process.cwd(), RESULTS) || RESULTS}`)
  out.push('')
  return out.join('\n')
}

/** BENCH_ONLY=fairness: tenant A's containers (for its list), section 7, its targets. */
async function fairnessOnly (o: FairnessOptions, tenant: Endpoint, image: string, began: number, problems: string[]): Promise<number> {
  say(`setup: ${settings.listContainers} containers of tenant ${settings.tenant} (through the gateway)`)
  const tag = randomBytes(3).toString('hex')
  await parallel(Array.from({ length: settings.listContainers }, (_x, i) => i), 4, async (i) => await createContainer(tenant, image, `pcb-list-${tag}-${i}`, ['true']))
  await tenant.pool.destroy()
  const fairness = await runFairness(o).catch((err) => { problems.push(`fairness: ${errText(err)}`); return [] })
  fs.mkdirSync(path.dirname(RESULTS), { recursive: true })
  fs.writeFileSync(RESULTS, JSON.stringify({ date: new Date().toISOString(), settings, fairness, targets: fairnessTargets(fairness), problems }, null, 2) + '\n')
  const out = ['', renderFairness(fairness, { pings: settings.fairnessPings, blocks: settings.fairnessBlocks }), renderTargets(fairnessTargets(fairness))]
  if (problems.length) out.push('PROBLEMS (broken measurements):', ...problems.map((p) => `  - ${p}`))
  out.push(`total ${fmt((performance.now() - began) / 1000, 0)} s; results in ${path.relative(process.cwd(), RESULTS) || RESULTS}`, '')
  process.stdout.write(out.join('\n'))
  return problems.length ? 1 : 0
}

/**
 * 8. Held sessions (bench/held.ts) through a gateway of their own, started with its
 * inspector on (heap after a forced collection); every step bounded, a failure a problem.
 */
async function heldSessions (dir: string, engineSocket: string, image: string, gwOptions: { policyDir: string, jwtSecret: string }, problems: string[]): Promise<HeldResult | null> {
  const gwDir = path.join(dir, 'gateway-held')
  fs.mkdirSync(gwDir)
  let gw: Awaited<ReturnType<typeof startGatewayProcess>> | undefined
  cleanup.add('stop the held-sessions gateway', async () => { await gw?.stop() })
  try {
    gw = await startGatewayProcess(gwDir, engineSocket, { ...gwOptions, tcpPort: await freePort(), nodeArgs: ['--inspect=127.0.0.1:0'] })
    const g = gw
    const stepTimeoutMs = 180_000
    return await within(`held sessions (${settings.heldSessions})`, 8 * stepTimeoutMs, Promise.race([g.exited, runHeld({ gateway: g, socket: g.tokenSocket, jwtSecret: gwOptions.jwtSecret, image, sessions: settings.heldSessions, tenants: 30, pings: settings.holdRequests, stepTimeoutMs, say })]))
  } catch (err) {
    problems.push(`held sessions: ${errText(err)}`)
    return null
  } finally {
    await gw?.stop()
  }
}

/**
 * BENCH_ONLY=creates or lists: the tenant's BENCH_LIST_CONTAINERS containers, made through
 * the gateway as in the full run, then section 2's create rows or its listing rows (with
 * the proxies' CPU per list; after the full run's JIT warm-up of _pings) and their targets.
 */
async function engineBoundOnly (ctx: Context, began: number, only: 'creates' | 'lists'): Promise<number> {
  say(`setup: ${settings.listContainers} containers of tenant ${settings.tenant} (through the gateway)`)
  const tag = randomBytes(3).toString('hex')
  await parallel(Array.from({ length: settings.listContainers }, (_x, i) => i), 4, async (i) => await createContainer(ctx.tenant, ctx.image, `pcb-list-${tag}-${i}`, ['true']))
  if (only === 'lists' && settings.jitWarmup > 0) {
    say(`JIT warm-up: ${settings.jitWarmup} GET /_ping per side`)
    for (const s of ctx.sides) await onSide(s, async () => await load(s.ep, 'GET', `${API}/_ping`, settings.jitWarmup, 8, ctx.deadline))
  }
  const bound = await engineBound(ctx)
  const group = { ...bound.group, title: `${bound.group.title}, BENCH_ONLY=${only}` }
  const rows = group.rows.filter((x) => x.unit.endsWith('/s'))
  const targets: Target[] = rows.map((row) => {
    const p = ratio(row, 'portcullis')
    const h = ratio(row, 'haproxy')
    return { target: `${row.name} ${row.unit}: ratio >= HAProxy's`, measured: `${fmt(p, 2)}x (haproxy ${fmt(h, 2)}x)`, met: p === null || h === null ? null : p >= h }
  })
  fs.mkdirSync(path.dirname(RESULTS), { recursive: true })
  fs.writeFileSync(RESULTS, JSON.stringify({ date: new Date().toISOString(), settings, engineBound: bound.stats, notes: group.notes, targets, problems: ctx.problems }, null, 2) + '\n')
  const out = ['', renderGroup(group), renderTargets(targets)]
  if (ctx.problems.length) out.push('PROBLEMS (broken measurements):', ...ctx.problems.map((p) => `  - ${p}`))
  out.push(`total ${fmt((performance.now() - began) / 1000, 0)} s; results in ${path.relative(process.cwd(), RESULTS) || RESULTS}`, '')
  process.stdout.write(out.join('\n'))
  return ctx.problems.length ? 1 : 0
}

/** BENCH_ONLY=held: section 8 alone. */
async function heldOnly (dir: string, engineSocket: string, image: string, gwOptions: { policyDir: string, jwtSecret: string }, began: number, problems: string[]): Promise<number> {
  const held = await heldSessions(dir, engineSocket, image, gwOptions, problems)
  fs.mkdirSync(path.dirname(RESULTS), { recursive: true })
  fs.writeFileSync(RESULTS, JSON.stringify({ date: new Date().toISOString(), settings, held, problems }, null, 2) + '\n')
  const out = ['']
  if (held) out.push(renderHeld(held))
  if (problems.length) out.push('PROBLEMS (broken measurements):', ...problems.map((p) => `  - ${p}`))
  out.push(`total ${fmt((performance.now() - began) / 1000, 0)} s; results in ${path.relative(process.cwd(), RESULTS) || RESULTS}`, '')
  process.stdout.write(out.join('\n'))
  return problems.length ? 1 : 0
}

// [STR] BENCH_ONLY=streams
/**
 * Section 3 alone: cp out and in and the two execs (the logs stream too when
 * BENCH_LOGS_BYTES is set), with the CPU table's stream rows and the stream targets.
 */
async function streamsOnly (ctx: Context, cliVersion: string, began: number): Promise<number> {
  const tag = randomBytes(3).toString('hex')
  const { tenant, image } = ctx
  say(`setup: a ${fmt(mb(settings.cpBytes), 0)} MB file (as tenant ${settings.tenant}, through the gateway)`)
  const withLogs = (process.env.BENCH_LOGS_BYTES ?? '') !== ''
  const ids = {
    logs: withLogs ? await createContainer(tenant, image, `pcb-logs-${tag}`, ['sh', '-c', `L=$(head -c 3072 /dev/urandom | base64 | tr -d '\\n'); yes "$L" | head -c ${settings.logsBytes}`]) : undefined,
    big: await createContainer(tenant, image, `pcb-big-${tag}`, ['sh', '-c', `head -c ${settings.cpBytes} /dev/zero > /tmp/big`]),
    upload: await createContainer(tenant, image, `pcb-upload-${tag}`, ['true']),
    exec: await createContainer(tenant, image, `pcb-exec-${tag}`, ['sleep', '3600']),
  }
  await call(tenant, 'POST', `${API}/containers/${ids.exec}/start`)
  await runToExit(tenant, ids.big, settings.streamTimeoutMs)
  if (ids.logs !== undefined) {
    await runToExit(tenant, ids.logs, settings.streamTimeoutMs)
    await settleLog(tenant, ids.logs)
  }
  const streams = await streamSection(ctx, ids, cliVersion)
  const cpu: CpuRow[] = streams.map((s) => ({ name: s.name, unit: 's/GB', perSide: s.cpu }))
  const all = targets({ groups: [], cpu: [], streams, roundTrips: [], fairness: [], policy: { sizes: [], targetUs: 25, pass: false } } as unknown as Omit<Report, 'targets' | 'totalSeconds'>)
  const mine = all.filter((x) => streams.some((s) => x.target.startsWith(s.name)) || x.target.includes('peak resident memory'))
  fs.mkdirSync(path.dirname(RESULTS), { recursive: true })
  fs.writeFileSync(RESULTS, JSON.stringify({ date: new Date().toISOString(), settings, streams, targets: mine, problems: ctx.problems }, null, 2) + '\n')
  const out = ['', renderGroup(streamGroup(streams)), cpuTable(cpu), renderTargets(mine)]
  if (ctx.problems.length) out.push('PROBLEMS (broken measurements):', ...ctx.problems.map((p) => `  - ${p}`))
  out.push(`total ${fmt((performance.now() - began) / 1000, 0)} s; results in ${path.relative(process.cwd(), RESULTS) || RESULTS}`, '')
  process.stdout.write(out.join('\n'))
  return ctx.problems.length ? 1 : 0
}

function dockerConfigDir (dir: string, headers: Record<string, string>): string {
  fs.mkdirSync(dir, { recursive: true })
  fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify(Object.keys(headers).length ? { HttpHeaders: headers } : {}) + '\n')
  return dir
}

async function main (): Promise<number> {
  const began = performance.now()
  const deadline = Date.now() + settings.totalBudgetMs
  const watchdog = setTimeout(() => {
    process.stderr.write(`bench: over its ${settings.totalBudgetMs / 60_000} minute budget, giving up\n`)
    void exit(1)
  }, settings.totalBudgetMs + 60_000)
  watchdog.unref()
  const problems: string[] = []
  if (settings.only === 'policy') {
    // Section 4 alone: in-process, nothing to start.
    const policy = await runPolicyBench([10, 1_000, 10_000], settings.policyDecisions)
    process.stdout.write(`4. ${renderPolicyBench(policy)}`)
    return 0
  }

  await ensureDebianPackages(['haproxy', 'wrk'], say)
  const dir = fs.mkdtempSync('/tmp/pcb-')
  const engineTcp = await freePort()
  say(`starting a private engine in ${dir} (also on 127.0.0.1:${engineTcp} in its network namespace)`)
  const starting = startEngine(dir, { tcpPort: engineTcp })
  // stopEngine also removes the directory (never descending into a mount left below it).
  cleanup.add('stop the engine', async () => {
    const started = await starting.catch(() => undefined)
    await stopEngine(started ?? engineInfo(dir, 0))
    if (fs.existsSync(dir)) process.stderr.write(`bench cleanup: ${dir} was left behind\n`)
  })
  const engine: EngineInfo = await starting
  const direct = endpoint(engine.socket, 32)
  cleanup.add('close the direct pool', () => direct.pool.destroy())
  const version = await call<{ Version: string, ApiVersion: string }>(direct, 'GET', `${API}/version`)

  // Portcullis: policy dir with bench.csv, HS256 tokens, three listeners, audit to a file.
  const gwDir = path.join(dir, 'gateway')
  const policyDir = path.join(gwDir, 'policies')
  fs.mkdirSync(gwDir)
  writeBenchPolicy(policyDir, Math.max(1000, settings.listContainers * 2 + 100))
  const secret = randomBytes(32).toString('hex')
  const token = jwt.sign({ sub: 'bench', tenant: settings.tenant, roles: ['tenant'] }, secret, { algorithm: 'HS256', expiresIn: '2h' })
  const bearer = { authorization: `Bearer ${token}` }
  say('starting the gateway')
  const nodeArgs = (process.env.BENCH_GATEWAY_NODE_ARGS ?? '').split(' ').filter((a) => a)
  const gw = await startGatewayProcess(gwDir, engine.socket, { policyDir, jwtSecret: secret, tcpPort: await freePort(), nodeArgs })
  cleanup.add('stop the gateway', () => gw.stop())
  const rssIdle = readMemory(gw.pid).rss
  const tokenOther = jwt.sign({ sub: 'bench-b', tenant: settings.otherTenant, roles: ['tenant'] }, secret, { algorithm: 'HS256', expiresIn: '2h' })
  const fairnessOptions: FairnessOptions = {
    gatewaySocket: gw.tokenSocket,
    engineSocket: engine.socket,
    a: bearer,
    b: { authorization: `Bearer ${tokenOther}` },
    // A subject of the same tenant whose role the bench gateway rate-limits (gateway.ts).
    aLimited: { authorization: `Bearer ${jwt.sign({ sub: 'bench-limited', tenant: settings.tenant, roles: ['tenant', 'limited'] }, secret, { algorithm: 'HS256', expiresIn: '2h' })}` },
    image: engine.image,
    pings: settings.fairnessPings,
    blocks: settings.fairnessBlocks,
    deadline,
    say,
  }
  if (settings.only === 'fairness') return await fairnessOnly(fairnessOptions, endpoint(gw.tokenSocket, 4, bearer), engine.image, began, problems)
  if (settings.only === 'held') return await heldOnly(dir, engine.socket, engine.image, { policyDir, jwtSecret: secret }, began, problems)
  if (settings.only !== '' && settings.only !== 'creates' && settings.only !== 'streams' && settings.only !== 'lists') throw new Error(`BENCH_ONLY=${settings.only}: only "fairness", "held", "creates", "streams", "lists" and "policy" can run alone`)

  const peerDir = path.join(dir, 'haproxy')
  fs.mkdirSync(peerDir)
  say('starting haproxy')
  const peer = await startHaproxy(peerDir, engine.socket, await freePort())
  cleanup.add('stop haproxy', () => peer.stop())

  const cliVersion = await new Promise<string>((resolve) => {
    const c = spawn(settings.cli, ['--version'], { stdio: ['ignore', 'pipe', 'ignore'] })
    let t = ''
    c.stdout.on('data', (b: Buffer) => { t += b.toString() })
    c.on('error', () => resolve('missing'))
    c.on('close', () => resolve(t.trim().replace(/^Docker version /, '')))
  })

  const cfgDir = path.join(dir, 'docker-config')
  const sides: Side[] = [
    { name: 'direct', label: 'engine socket', ep: direct, wrk: { host: '127.0.0.1', port: engineTcp, headers: {}, netnsPid: engine.pid }, dockerConfig: dockerConfigDir(path.join(cfgDir, 'direct'), {}) },
    { name: 'haproxy', label: 'haproxy socket', ep: endpoint(peer.socket, 32), wrk: { host: peer.tcp.host, port: peer.tcp.port, headers: {} }, pid: peer.pid, exited: peer.exited, dockerConfig: dockerConfigDir(path.join(cfgDir, 'haproxy'), {}) },
    { name: 'portcullis', label: `tenant ${settings.tenant}, bearer token`, ep: endpoint(gw.tokenSocket, 32, bearer), wrk: { host: gw.tcp.host, port: gw.tcp.port, headers: { Authorization: bearer.authorization } }, pid: gw.pid, exited: gw.exited, dockerConfig: dockerConfigDir(path.join(cfgDir, 'portcullis'), { Authorization: bearer.authorization }) },
  ]
  const admin: Side = { name: 'portcullis', label: 'admin socket (fixed identity)', ep: endpoint(gw.socket, 32), wrk: { host: gw.tcp.host, port: gw.tcp.port, headers: {} }, pid: gw.pid, exited: gw.exited, dockerConfig: dockerConfigDir(path.join(cfgDir, 'admin'), {}) }
  for (const s of [...sides, admin]) if (s.ep !== direct) cleanup.add(`close the ${s.name} pool`, () => s.ep.pool.destroy())
  const tenant = sides[2].ep
  const ctx: Context = { sides, admin, pids: { engine: engine.pid, gateway: gw.pid, haproxy: peer.pid }, deadline, problems, image: engine.image, tenant, direct }
  // [STR] BENCH_ONLY=streams: section 3 alone.
  if (settings.only === 'streams') return await streamsOnly(ctx, cliVersion, began)

  if (settings.only === 'creates') return await engineBoundOnly(ctx, began, 'creates')
  // [LST] BENCH_ONLY=lists: section 2's listing rows alone.
  if (settings.only === 'lists') return await engineBoundOnly(ctx, began, 'lists')

  // Setup, not measured: every container is created by the tenant through the gateway.
  const tag = randomBytes(3).toString('hex')
  say(`setup: ${settings.listContainers} containers for the listing, a ${fmt(mb(settings.logsBytes), 0)} MB log, a ${fmt(mb(settings.cpBytes), 0)} MB file (as tenant ${settings.tenant}, through the gateway)`)
  const image = engine.image
  const idLogs = await createContainer(tenant, image, `pcb-logs-${tag}`, ['sh', '-c',
    // Lines of 4096 printable characters: json-file stores one JSON object per line,
    // so short lines (or NULs, escaped as \u0000) would multiply the bytes on disk.
    `L=$(head -c 3072 /dev/urandom | base64 | tr -d '\\n'); yes "$L" | head -c ${settings.logsBytes}`])
  const idBig = await createContainer(tenant, image, `pcb-big-${tag}`, ['sh', '-c', `head -c ${settings.cpBytes} /dev/zero > /tmp/big`])
  const idUpload = await createContainer(tenant, image, `pcb-upload-${tag}`, ['true'])
  const idExec = await createContainer(tenant, image, `pcb-exec-${tag}`, ['sleep', '3600'])
  const idTick = await createContainer(tenant, image, `pcb-tick-${tag}`, ['sh', '-c', 'while true; do echo tick; sleep 0.5; done'])
  await call(tenant, 'POST', `${API}/containers/${idExec}/start`)
  await call(tenant, 'POST', `${API}/containers/${idTick}/start`)
  await Promise.all([
    runToExit(tenant, idLogs, settings.streamTimeoutMs),
    runToExit(tenant, idBig, settings.streamTimeoutMs),
    parallel(Array.from({ length: settings.listContainers }, (_x, i) => i), 4, async (i) => await createContainer(tenant, image, `pcb-list-${tag}-${i}`, ['true'])),
  ])
  await settleLog(tenant, idLogs)
  const rssAfterSetup = readMemory(gw.pid).rss

  const script = writeWrkScript(dir)
  const cpuRows: CpuRow[] = []
  const undici = await smallUndici(ctx, cpuRows)
  const wrkResult = await smallWrk(ctx, script)
  const rssAfterRequests = readMemory(gw.pid).rss
  const bound = await engineBound(ctx)

  // 3. Streams
  const streams = await streamSection(ctx, { logs: idLogs, big: idBig, upload: idUpload, exec: idExec }, cliVersion)

  const hold = await holdOpen(ctx, idTick)
  say('engine round trips per request (second gateway behind a counting relay)')
  const trips = await roundTrips(dir, engine.socket, { policyDir, jwtSecret: secret }, bearer, { id: idTick, name: `pcb-tick-${tag}` }, image, direct)
    .catch((err) => { problems.push(`round trips: ${errText(err)}`); return [] })
  say('policy decisions')
  const policy = await runPolicyBench([10, 1_000, 10_000], settings.policyDecisions)
  const fairness = await runFairness(fairnessOptions).catch((err) => { problems.push(`fairness: ${errText(err)}`); return [] })
  const held = await heldSessions(dir, engine.socket, engine.image, { policyDir, jwtSecret: secret }, problems)

  const groups = [undici.group, wrkResult.group, bound.group, streamGroup(streams), holdGroup(hold)]
  for (const s of streams) cpuRows.push({ name: s.name, unit: 's/GB', perSide: s.cpu })
  // Added latency at the median, c1, under the wrk table.
  for (const [g, label] of [[undici.group, 'undici'], [wrkResult.group, 'wrk']] as const) {
    for (const k of ['GET /_ping c1', `GET ${API}/version c1`]) {
      const row = g.rows.find((x) => x.name === k && x.unit === 'p50 ms')
      if (!row || typeof row.values.direct !== 'number') continue
      const d = row.values.direct
      const added = g.columns.filter((c) => c !== 'direct').map((c) => `${c} ${typeof row.values[c] === 'number' ? `+${fmt((row.values[c] as number) - d, 3)}` : '-'} ms`)
      g.notes.push(`added latency at the median, ${k} (${label}): ${added.join(', ')}`)
    }
  }
  const partial = {
    date: new Date().toISOString(),
    machine: { cpus: os.cpus().length, cpuModel: os.cpus()[0]?.model.trim() ?? 'unknown', kernel: os.release(), node: process.version, memoryBytes: os.totalmem() },
    engine: { version: version.Version, apiVersion: version.ApiVersion },
    peer: { haproxy: peer.version, config: fs.readFileSync(peer.configFile, 'utf8') },
    cli: cliVersion,
    settings,
    gateway: { rssIdle, rssAfterSetup, rssAfterRequests },
    groups,
    undici: undici.stats,
    wrk: wrkResult.runs,
    engineBound: bound.stats,
    streams,
    hold,
    roundTrips: trips,
    fairness,
    held,
    cpu: cpuRows,
    policy,
    problems,
  }
  const report: Report = { ...partial, targets: targets(partial), totalSeconds: (performance.now() - began) / 1000 }
  fs.mkdirSync(path.dirname(RESULTS), { recursive: true })
  fs.writeFileSync(RESULTS, JSON.stringify(report, null, 2) + '\n')
  process.stdout.write(render(report))
  clearTimeout(watchdog)
  // Broken measurements (a byte count that differs, a request that failed) make the comparison meaningless.
  return problems.length ? 1 : 0
}

main().then(async (code) => await exit(code), async (err: Error) => {
  if (!interrupted) process.stderr.write(`bench failed: ${err.stack ?? err.message}\n`)
  await exit(interrupted ? 130 : 1)
})
