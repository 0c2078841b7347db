/**
 * 7. One tenant's flood and another tenant's `_ping`: tenant B asks `GET /_ping` one at a
 * time, alone and while tenant A floods the gateway from a process of its own (every
 * worker sends its next request as soon as the last is answered): pings at concurrency
 * 32, its container list at 8, 1 MB ContainerCreate bodies the policy denies at 8 (the
 * gateway reads, counts, decodes and judges each; the engine never sees them), and all
 * three at once; and pings at concurrency 32 by a subject of A whose role is rate-limited
 * (the gateway's `limited` role, 200 reads/s: most of its flood is refused with 429 after
 * authentication, before anything else is done). Blocks alternate (alone, during, alone, during) so that drift weighs on
 * both. The engine directly, with the same ping and list floods, is the reference: what
 * B would see on an engine shared without a gateway.
 *
 * The target: during any of these floods, B's p99 at most 3x its p99 alone.
 */
import { spawn } from 'node:child_process'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { API, endpoint, load, type Endpoint, type LoadRun } from './clients'
import { stats, type LatencyStats } from './measure'
import { fmt, table, type Target } from './report'

const FLOOD = path.join(__dirname, 'flood.js')

export interface FloodResult { requests: number, statuses: Record<string, number>, errors: number, seconds: number }

export interface FairnessCase {
  flood: string
  side: 'direct' | 'portcullis'
  alone: LatencyStats
  during: LatencyStats
  /** What A's flood got done meanwhile. */
  a: FloodResult
}

export interface FairnessOptions {
  /** The gateway's bearer-token socket, and the engine's socket. */
  gatewaySocket: string
  engineSocket: string
  /** Authorization headers of tenants A (the flood) and B (the pings). */
  a: Record<string, string>
  b: Record<string, string>
  /** Tenant A's header for a subject whose role is rate-limited; without it that case is left out. */
  aLimited?: Record<string, string>
  image: string
  /** B's pings per block. */
  pings: number
  blocks: number
  deadline: number
  say: (line: string) => void
}

interface FloodKind {
  name: string
  specs: Array<{ method: 'GET' | 'POST', path: string, concurrency: number, body?: Record<string, unknown>, bodyBytes?: number }>
  /** Also run against the engine directly (only floods the engine can take without a policy in front). */
  direct: boolean
  /** A floods as its rate-limited subject (FairnessOptions.aLimited). */
  limited?: boolean
}

function kinds (image: string): FloodKind[] {
  const ping = { method: 'GET' as const, path: '/_ping', concurrency: 32 }
  const list = { method: 'GET' as const, path: `${API}/containers/json?all=1`, concurrency: 8 }
  // Denied by the shipped policy (no-privileged) after the whole 1 MB body is read and decoded.
  const bodies = { method: 'POST' as const, path: `${API}/containers/create`, concurrency: 8, body: { Image: image, Cmd: ['true'], HostConfig: { Privileged: true } }, bodyBytes: 1_000_000 }
  return [
    { name: 'pings, c32', specs: [ping], direct: true },
    { name: 'container list, c8', specs: [list], direct: true },
    { name: '1 MB denied creates, c8', specs: [bodies], direct: false },
    { name: 'all three at once', specs: [ping, list, bodies], direct: false },
    { name: 'pings, c32, over its rate limit', specs: [ping], direct: false, limited: true },
  ]
}

/** Start A's flood processes; the returned function stops them and sums what they did. */
function startFlood (socket: string, headers: Record<string, string>, kind: FloodKind): () => Promise<FloodResult> {
  const started = performance.now()
  const children = kind.specs.map((spec) => {
    const child = spawn(process.execPath, [FLOOD, JSON.stringify({ socket, headers, ...spec })], { stdio: ['ignore', 'pipe', 'inherit'] })
    let out = ''
    child.stdout.on('data', (b: Buffer) => { out += b.toString() })
    const exited = new Promise<FloodResult>((resolve) => child.on('close', () => {
      try { resolve({ ...(JSON.parse(out) as Omit<FloodResult, 'seconds'>), seconds: 0 }) } catch { resolve({ requests: 0, statuses: {}, errors: 1, seconds: 0 }) }
    }))
    return { child, exited }
  })
  return async () => {
    const seconds = (performance.now() - started) / 1000
    for (const c of children) c.child.kill('SIGTERM')
    const results = await Promise.all(children.map(async (c) => await c.exited))
    const statuses: Record<string, number> = {}
    for (const r of results) for (const [k, v] of Object.entries(r.statuses)) statuses[k] = (statuses[k] ?? 0) + v
    return { requests: results.reduce((n, r) => n + r.requests, 0), statuses, errors: results.reduce((n, r) => n + r.errors, 0), seconds }
  }
}

export async function runFairness (o: FairnessOptions): Promise<FairnessCase[]> {
  const out: FairnessCase[] = []
  for (const kind of kinds(o.image)) {
    if (kind.limited && o.aLimited === undefined) continue
    const aHeaders = kind.limited ? o.aLimited ?? o.a : o.a
    for (const side of ['direct', 'portcullis'] as const) {
      if (side === 'direct' && !kind.direct) continue
      const socket = side === 'direct' ? o.engineSocket : o.gatewaySocket
      const b: Endpoint = endpoint(socket, 1, side === 'direct' ? {} : o.b)
      o.say(`fairness: tenant A floods with ${kind.name} via ${side}; tenant B pings`)
      const alone: LoadRun[] = []
      const during: LoadRun[] = []
      let a: FloodResult = { requests: 0, statuses: {}, errors: 0, seconds: 0 }
      try {
        await load(b, 'GET', '/_ping', Math.min(200, o.pings), 1, o.deadline)
        for (let i = 0; i < o.blocks; i++) {
          alone.push(await load(b, 'GET', '/_ping', o.pings, 1, o.deadline))
          const stop = startFlood(socket, side === 'direct' ? {} : aHeaders, kind)
          try {
            // The flood at full speed before B is measured.
            await sleep(1000)
            during.push(await load(b, 'GET', '/_ping', o.pings, 1, o.deadline))
          } finally {
            const r = await stop()
            a = { requests: a.requests + r.requests, errors: a.errors + r.errors, seconds: a.seconds + r.seconds, statuses: { ...a.statuses } }
            for (const [k, v] of Object.entries(r.statuses)) a.statuses[k] = (a.statuses[k] ?? 0) + v
          }
          await sleep(500)
        }
      } finally {
        await b.pool.destroy()
      }
      out.push({ flood: kind.name, side, alone: stats(alone), during: stats(during), a })
    }
  }
  return out
}

const statusText = (s: Record<string, number>): string => Object.entries(s).map(([k, v]) => `${v} ${k}`).join(', ') || '-'

export function renderFairness (cases: FairnessCase[], o: { pings: number, blocks: number }): string {
  return [
    `7. One tenant's flood, another tenant's GET /_ping (B: ${o.pings} pings at concurrency 1 per block, ${o.blocks} blocks alone and ${o.blocks} during A's flood, alternating; A floods from its own processes; x = during / alone)`,
    table(['tenant A floods with', 'side', 'A req/s', 'A answers', 'B p50 alone', 'during', 'x', 'B p99 alone', 'during', 'x'],
      cases.map((c) => [c.flood, c.side, fmt(c.a.requests / c.a.seconds, 0), statusText(c.a.statuses) + (c.a.errors ? `, ${c.a.errors} errors` : ''),
        fmt(c.alone.p50Ms, 3), fmt(c.during.p50Ms, 3), fmt(c.during.p50Ms / c.alone.p50Ms, 2),
        fmt(c.alone.p99Ms, 3), fmt(c.during.p99Ms, 3), fmt(c.during.p99Ms / c.alone.p99Ms, 2)]),
      ['l', 'l', 'r', 'l', 'r', 'r', 'r', 'r', 'r', 'r']),
    '  note: ms; direct = the same flood and pings on the engine\'s own socket (no tenants there): what sharing the engine costs B without a gateway',
    '',
  ].join('\n')
}

/** The issue's target: one tenant's flood raises another tenant's _ping p99 at most 3x. */
export function fairnessTargets (cases: FairnessCase[]): Target[] {
  return cases.filter((c) => c.side === 'portcullis').map((c) => {
    const x = c.during.p99Ms / c.alone.p99Ms
    const direct = cases.find((d) => d.side === 'direct' && d.flood === c.flood)
    return {
      target: `tenant A's flood (${c.flood}) raises tenant B's _ping p99 at most 3x`,
      measured: `${fmt(x, 2)}x (p99 ${fmt(c.alone.p99Ms, 3)} -> ${fmt(c.during.p99Ms, 3)} ms; p50 ${fmt(c.during.p50Ms / c.alone.p50Ms, 2)}x${direct ? `; the engine directly: ${fmt(direct.during.p99Ms / direct.alone.p99Ms, 2)}x` : ''})`,
      met: Number.isFinite(x) ? x <= 3 : null,
    }
  })
}
