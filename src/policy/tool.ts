/**
 * `portcullis policy check` and `portcullis policy test`: the gateway's own route,
 * decode, rewrite and evaluate stages, run without a gateway or an engine.
 */
import fs from 'node:fs'
import path from 'node:path'
import { parse as parseYaml } from 'yaml'
import { resolveTarget, type ApiWindow } from '../gateway/catalog/route'
import { isGatewayError } from '../gateway/errors'
import { authorize } from './authorize'
import { loadPolicy, type Policy, type Principal } from './engine'

const WINDOW: ApiWindow = { minVersion: '1.24', maxVersion: '1.56' }

export interface CheckResult {
  readonly operation: string
  readonly decision: 'allow' | 'deny' | 'would_deny'
  readonly rule: string | null
  readonly wouldDeny: readonly string[]
  readonly rewrites: readonly string[]
  readonly body?: string
  /** Set when the request is refused before policy (bad path, invalid body...). */
  readonly error?: string
}

export async function check (policy: Policy, who: Principal, method: string, url: string, body?: Buffer): Promise<CheckResult> {
  let target
  try {
    target = resolveTarget(method.toUpperCase(), url, WINDOW)
    const { evaluation, body: out } = await authorize(policy, who, target, body)
    const d = evaluation.decision
    return {
      operation: target.operation.id,
      decision: d.decision,
      rule: d.rule?.rule ?? null,
      wouldDeny: d.wouldDeny.map((r) => r.rule),
      rewrites: evaluation.rewrites.map((r) => r.id),
      ...(out ? { body: out.toString('utf8') } : {}),
    }
  } catch (err) {
    if (!isGatewayError(err)) throw err
    return { operation: target?.operation.id ?? '', decision: 'deny', rule: null, wouldDeny: [], rewrites: [], error: `${err.code}: ${err.message}` }
  }
}

interface Fixture {
  name: string
  as: Principal
  request: string
  body?: unknown
  expect: 'allow' | 'deny' | 'would_deny'
  rule?: string
  rewrites?: string[]
}

function fixtureProblems (f: Partial<Fixture>, where: string): string[] {
  const p: string[] = []
  if (typeof f.name !== 'string') p.push(`${where}: name missing`)
  if (typeof f.as?.subject !== 'string' || !Array.isArray(f.as?.roles)) p.push(`${where}: as: { subject, tenant, roles } missing`)
  if (typeof f.request !== 'string' || !/^[A-Z]+ \//.test(f.request)) p.push(`${where}: request must be "METHOD /path"`)
  if (!['allow', 'deny', 'would_deny'].includes(f.expect as string)) p.push(`${where}: expect must be allow, deny or would_deny`)
  return p
}

/** Run every fixture in DIR/tests/*.yaml against the policy in DIR; returns the lines to print and whether all passed. */
export async function runFixtures (dir: string): Promise<{ lines: string[], passed: number, failed: number }> {
  const policy = await loadPolicy(dir)
  const testDir = path.join(dir, 'tests')
  const files = fs.existsSync(testDir) ? fs.readdirSync(testDir).filter((f) => /\.ya?ml$/.test(f)).sort() : []
  const lines: string[] = []
  let passed = 0
  let failed = 0
  for (const file of files) {
    const cases = parseYaml(fs.readFileSync(path.join(testDir, file), 'utf8')) as Array<Partial<Fixture>> | null
    for (const [i, f] of (cases ?? []).entries()) {
      const where = `${file}[${i}]`
      const problems = fixtureProblems(f, where)
      if (problems.length) { failed++; lines.push(...problems.map((p) => `FAIL ${p}`)); continue }
      const fx = f as Fixture
      const [method, url] = fx.request.split(' ')
      const body = fx.body === undefined ? undefined : Buffer.from(typeof fx.body === 'string' ? fx.body : JSON.stringify(fx.body))
      const r = await check(policy, { subject: fx.as.subject, tenant: fx.as.tenant ?? null, roles: fx.as.roles }, method, url, body)
      const why: string[] = []
      if (r.decision !== fx.expect) why.push(`decision ${r.decision}${r.error ? ` (${r.error})` : ''}, expected ${fx.expect}`)
      if (fx.rule !== undefined && r.rule !== fx.rule && !r.wouldDeny.includes(fx.rule)) why.push(`rule ${r.rule ?? 'none'}, expected ${fx.rule}`)
      if (fx.rewrites !== undefined && JSON.stringify(r.rewrites) !== JSON.stringify(fx.rewrites)) why.push(`rewrites [${r.rewrites.join(', ')}], expected [${fx.rewrites.join(', ')}]`)
      if (why.length) { failed++; lines.push(`FAIL ${where} ${fx.name}: ${why.join('; ')}`) } else { passed++; lines.push(`ok   ${where} ${fx.name}`) }
    }
  }
  if (!files.length) lines.push(`no fixtures in ${testDir}`)
  return { lines, passed, failed }
}
