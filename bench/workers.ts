/**
 * `workers: N` side by side (issue 21's "bench rows for workers: 1 and 2"): one private
 * engine, a gateway with `workers: 1` and one with `workers: 2` (same config otherwise:
 * a tenant's bearer token, the shipped policy, the audit trail on), and interleaved
 * blocks of GET /_ping at 32 concurrent on the engine directly and through each gateway.
 * Reported per side: requests per second (median of the blocks), its ratio to the
 * engine's, and the gateway's CPU per request summed over its whole process tree
 * (primary and workers). Ratios, never timed assertions.
 *
 *   npm run build && node dist/bench/workers.js      (BENCH_WORKERS_REQUESTS, BENCH_WORKERS_BLOCKS)
 */
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import jwt from 'jsonwebtoken'
import { startEngine, stopEngine } from '../test/engine/engine'
import { endpoint, type Endpoint } from './clients'
import { cpuSeconds, startGatewayProcess, type GatewayProcess } from './gateway'
import { freePort } from './peer'
import { table } from './report'

const REQUESTS = Number(process.env.BENCH_WORKERS_REQUESTS ?? 4000)
const BLOCKS = Number(process.env.BENCH_WORKERS_BLOCKS ?? 3)
const CONCURRENCY = 32

/** A process and every descendant (the cluster's workers), from /proc/<pid>/task/<pid>/children. */
function tree (pid: number): number[] {
  let kids: number[] = []
  try { kids = fs.readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter((x) => x).map(Number) } catch { return [] }
  return [pid, ...kids.flatMap(tree)]
}

function treeCpu (pid: number): number {
  return tree(pid).reduce((sum, p) => { try { return sum + cpuSeconds(p) } catch { return sum } }, 0)
}

async function block (e: Endpoint, n: number): Promise<number> {
  let next = 0
  const t0 = performance.now()
  await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
    while (next < n) {
      next++
      const r = await e.pool.request({ method: 'GET', path: '/_ping', headers: { ...e.headers }, signal: AbortSignal.timeout(30_000) })
      await r.body.dump()
      if (r.statusCode !== 200) throw new Error(`GET /_ping: ${r.statusCode}`)
    }
  }))
  return n / ((performance.now() - t0) / 1000)
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]

async function main (): Promise<void> {
  const dir = fs.mkdtempSync('/tmp/pcbw-')
  const engine = await startEngine(dir, {})
  const gateways: Array<{ label: string, gw: GatewayProcess }> = []
  try {
    const secret = randomBytes(32).toString('hex')
    const bearer = { authorization: `Bearer ${jwt.sign({ sub: 'bench', tenant: 'team-bench', roles: ['tenant'] }, secret, { algorithm: 'HS256', expiresIn: '2h' })}` }
    for (const workers of [1, 2]) {
      const gwDir = `${dir}/gw${workers}`
      fs.mkdirSync(gwDir)
      gateways.push({ label: `Portcullis, workers: ${workers}`, gw: await startGatewayProcess(gwDir, engine.socket, { jwtSecret: secret, tcpPort: await freePort(), workers }) })
    }
    // A worker needs a moment after the primary answers: every side warms up first.
    const sides = [{ label: 'engine directly', e: endpoint(engine.socket, CONCURRENCY), pid: null as number | null },
      ...gateways.map(({ label, gw }) => ({ label, e: endpoint(gw.tokenSocket, CONCURRENCY, bearer), pid: gw.pid }))]
    for (const s of sides) await block(s.e, 500)
    const rates = new Map<string, number[]>(sides.map((s) => [s.label, []]))
    const cpu = new Map<string, number>(sides.map((s) => [s.label, 0]))
    for (let b = 0; b < BLOCKS; b++) {
      for (const s of b % 2 === 0 ? sides : [...sides].reverse()) {
        const c0 = s.pid === null ? 0 : treeCpu(s.pid)
        rates.get(s.label)!.push(await block(s.e, REQUESTS))
        if (s.pid !== null) cpu.set(s.label, cpu.get(s.label)! + treeCpu(s.pid) - c0)
      }
    }
    const engineRate = median(rates.get('engine directly')!)
    const rows = sides.map((s) => {
      const rate = median(rates.get(s.label)!)
      const perRequest = s.pid === null ? '' : `${Math.round(cpu.get(s.label)! / (REQUESTS * BLOCKS) * 1e6)} µs`
      const processes = s.pid === null ? '' : String(tree(s.pid).length)
      return [s.label, String(Math.round(rate)), `${(rate / engineRate).toFixed(2)}x`, perRequest, processes]
    })
    process.stdout.write(`GET /_ping, ${CONCURRENCY} concurrent, as a tenant with the audit trail on; median of ${BLOCKS} interleaved blocks of ${REQUESTS}\n\n`)
    process.stdout.write(table(['side', 'req/s', 'ratio to the engine', 'gateway CPU per request (all processes)', 'processes'], rows, ['l', 'r', 'r', 'r', 'r']) + '\n')
    for (const s of sides) await s.e.pool.close()
  } finally {
    for (const { gw } of gateways) await gw.stop().catch(() => undefined)
    await stopEngine(engine)
  }
}

main().catch((err) => { process.stderr.write(`bench workers: ${(err as Error).stack ?? String(err)}\n`); process.exit(1) })
