/**
 * Policy decision cost with a large policy: the shipped policy plus 10,000 generated
 * lines (per-user grants and conditional denies spread over 500 tenants), timed
 * in-process. Reported as median and p99 per decision; the target is a median under
 * 50 µs. Also reported: the full inspect stage (decode + rewrite + decide + encode)
 * for a realistic ContainerCreate body as the docker CLI sends it.
 *
 * Runs inside `npm run bench`, or alone: `node dist/bench/policy.js`.
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { resolveTarget } from '../src/gateway/catalog/route'
import { authorize } from '../src/policy/authorize'
import { decodeBody } from '../src/policy/body/decode'
import { loadPolicy } from '../src/policy/engine'

const REPO = path.resolve(__dirname, '..', '..')

export interface PolicyBench {
  readonly lines: number
  readonly decisions: number
  readonly decideMedianUs: number
  readonly decideP99Us: number
  readonly inspectMedianUs: number
  readonly inspectP99Us: number
  readonly targetUs: number
  readonly pass: boolean
}

function generatedLines (n: number): string {
  const out: string[] = []
  for (let i = 0; i < n; i++) {
    const tenant = `team-${i % 500}`
    out.push(i % 2 === 0
      ? `p, user:u${i}, ${tenant}, Container*, container, allow, grant-${i}, true`
      : `p, user:u${i}, ${tenant}, ContainerCreate, *, deny, memory-cap-${i}, "r.obj.memory > ${(i % 64 + 1) * 67108864}"`)
  }
  return out.join('\n') + '\n'
}

function percentile (sorted: number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]
}

async function time (n: number, f: () => Promise<unknown>): Promise<number[]> {
  const out: number[] = []
  for (let i = 0; i < n; i++) {
    const t0 = process.hrtime.bigint()
    await f()
    out.push(Number(process.hrtime.bigint() - t0) / 1000)
  }
  return out.sort((a, b) => a - b)
}

export async function runPolicyBench (extraLines = 10_000, decisions = 20_000): Promise<PolicyBench> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pcb-policy-'))
  try {
    fs.cpSync(path.join(REPO, 'policies'), dir, { recursive: true })
    fs.appendFileSync(path.join(dir, 'base.csv'), generatedLines(extraLines))
    const policy = await loadPolicy(dir)
    const raw = fs.readFileSync(path.join(REPO, 'test', 'fixtures', 'bodies', 'container-create-cli.json'))
    const body = decodeBody('ContainerCreate', raw).value
    const who = { subject: 'u1234', tenant: 'team-234', roles: ['tenant'] }
    const query = new URLSearchParams('name=web')
    const request = { op: 'ContainerCreate', kind: 'container', resource: '', query, body }
    const target = resolveTarget('POST', '/v1.41/containers/create?name=web', { minVersion: '1.24', maxVersion: '1.56' })
    // Warm up (JIT, the principal cache), then measure.
    for (let i = 0; i < 2000; i++) await policy.evaluate(who, request)
    const decide = await time(decisions, async () => await policy.evaluate(who, request))
    const inspect = await time(decisions / 4, async () => await authorize(policy, who, target, raw))
    const lines = fs.readFileSync(path.join(dir, 'base.csv'), 'utf8').split('\n').filter((l) => /^\s*[pg],/.test(l)).length
    const median = percentile(decide, 0.5)
    return {
      lines,
      decisions,
      decideMedianUs: median,
      decideP99Us: percentile(decide, 0.99),
      inspectMedianUs: percentile(inspect, 0.5),
      inspectP99Us: percentile(inspect, 0.99),
      targetUs: 50,
      pass: median < 50,
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

export function renderPolicyBench (r: PolicyBench): string {
  return [
    `4. Policy decisions: ${r.lines} policy lines, ${r.decisions} decisions in-process (tenant ContainerCreate, docker CLI body)`,
    `   decide (rewrites + facts + rules): median ${r.decideMedianUs.toFixed(1)} µs, p99 ${r.decideP99Us.toFixed(1)} µs  -> ${r.pass ? 'PASS' : 'FAIL'} (target: median < ${r.targetUs} µs)`,
    `   inspect (decode + decide + encode): median ${r.inspectMedianUs.toFixed(1)} µs, p99 ${r.inspectP99Us.toFixed(1)} µs`,
    '',
  ].join('\n')
}

if (require.main === module) {
  runPolicyBench().then((r) => { process.stdout.write(renderPolicyBench(r)) }, (err: Error) => {
    process.stderr.write(`${err.stack ?? err.message}\n`)
    process.exitCode = 1
  })
}
