/**
 * Measurement primitives shared by the workloads: sides, interleaving, latency
 * statistics, CPU accounting and memory windows.
 */
import { execFileSync } from 'node:child_process'
import type { Endpoint, LoadRun, Transfer } from './clients'
import { percentile } from './clients'
import { cpuSeconds, watchMemory, type MemoryWindow } from './gateway'
import type { WrkTarget } from './wrk'

export type SideName = 'direct' | 'haproxy' | 'portcullis'
export const SIDES: SideName[] = ['direct', 'haproxy', 'portcullis']

export interface Side {
  readonly name: SideName
  /** What this side is, for the report: transport and identity. */
  readonly label: string
  readonly ep: Endpoint
  readonly wrk: WrkTarget
  /** The proxy's process (none for direct). */
  readonly pid?: number
  /** Rejects if the proxy process dies. */
  readonly exited?: Promise<never>
  /** DOCKER_CONFIG directory for the docker CLI on this side (holds the bearer header where one is needed). */
  readonly dockerConfig: string
}

/** Run `work` on a side, failing at once if its proxy dies meanwhile. */
export async function onSide<T> (side: Side, work: () => Promise<T>): Promise<T> {
  return side.exited ? await Promise.race([work(), side.exited]) : await work()
}

/**
 * `blocks` rounds over the sides, the order reversed every other round (d h p, p h d,
 * d h p...), so that drift over the run weighs on every side alike.
 */
export async function interleave<S extends { name: string }, T> (sides: readonly S[], blocks: number, run: (side: S, block: number) => Promise<T>): Promise<Map<string, T[]>> {
  const out = new Map<string, T[]>(sides.map((s) => [s.name, []]))
  for (let b = 0; b < blocks; b++) {
    const order = b % 2 === 0 ? sides : [...sides].reverse()
    for (const s of order) out.get(s.name)?.push(await run(s, b))
  }
  return out
}

export interface LatencyStats { requests: number, reqPerSec: number, p50Ms: number, p99Ms: number, meanMs: number }

export function stats (runs: LoadRun[]): LatencyStats {
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

export function median (xs: number[]): number {
  if (xs.length === 0) return NaN
  const s = [...xs].sort((a, b) => a - b)
  const m = Math.floor(s.length / 2)
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2
}

/** The processes whose CPU time is counted. */
export interface Pids { engine: number, gateway: number, haproxy: number }

/** CPU seconds of the engine and of the side's proxy (0 for direct) while `work` ran, added to `into`. */
export async function countCpu<T> (pids: Pids, side: SideName, into: { engine: number, proxy: number }, work: () => Promise<T>): Promise<T> {
  const proxyPid = side === 'haproxy' ? pids.haproxy : side === 'portcullis' ? pids.gateway : 0
  const e0 = cpuSeconds(pids.engine)
  const p0 = proxyPid ? cpuSeconds(proxyPid) : 0
  const result = await work()
  into.engine += cpuSeconds(pids.engine) - e0
  if (proxyPid) into.proxy += cpuSeconds(proxyPid) - p0
  return result
}

/** CPU per unit of work on each side: the engine's, and the proxy's own. */
export interface CpuCost { unit: string, sides: Partial<Record<SideName, { engine: number, proxy: number }>> }

/** Flush dirty pages before a timed transfer, so that writeback left by the previous one is not charged to this one. */
export function syncDisks (): void {
  try { execFileSync('sync', { timeout: 120_000 }) } catch { /* best effort */ }
}

export function mergeWindows (a: MemoryWindow | undefined, b: MemoryWindow): MemoryWindow {
  if (!a) return b
  return { sampledPeak: Math.max(a.sampledPeak, b.sampledPeak), hwm: Math.max(a.hwm, b.hwm), hwmReset: a.hwmReset && b.hwmReset, before: a.before, samples: a.samples + b.samples }
}

export const peakOf = (w: MemoryWindow | undefined): number => w ? Math.max(w.sampledPeak, w.hwm) : NaN

/** Watch the side's proxy memory (when it has one) while `work` runs. */
export async function withMemory<T> (side: Side, sampleMs: number, work: () => Promise<T>): Promise<{ result: T, memory?: MemoryWindow }> {
  if (side.pid === undefined) return { result: await work() }
  return await watchMemory(side.pid, sampleMs, work)
}

export interface SideTransfers { transfers: Transfer[], memory?: MemoryWindow, error?: string, cpu: { engine: number, proxy: number } }
