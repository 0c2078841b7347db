/**
 * `portcullis policy check` and `portcullis policy test`: the gateway's own route,
 * decode, rewrite and evaluate stages, run without a gateway or an engine.
 */
import fs from 'node:fs'
import path from 'node:path'
import { parse as parseYaml } from 'yaml'
import { resolveTarget, type ApiWindow } from '../api/catalog/route'
import { isGatewayError } from '../api/errors'
import { authorize, denialReason } from './authorize'
import { loadPolicy, type LayerTrace, type Policy, type Principal, type RuleMatch } from './engine'
import type { TSchema } from '@sinclair/typebox'
import { show, typeOfSchema } from './conditions'
import { describeReason } from './explain'
import { FactsSchema, RequestSchema } from './fields'
import { functionSignatures } from './functions'
import type { HostPathMode, PolicyInput } from './facts'

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
  /** Every rule of every layer that applied (absent when refused before policy). */
  readonly layers?: readonly LayerTrace[]
  /** The facts that are set (not empty, false or zero), as the rules saw them. */
  readonly facts?: readonly string[]
}

export async function check (policy: Policy, who: Principal, method: string, url: string, body?: Buffer, hostPaths: HostPathMode = 'shared'): Promise<CheckResult> {
  let target
  try {
    target = resolveTarget(method.toUpperCase(), url, WINDOW)
    const { evaluation, body: out } = await authorize(policy, who, target, body, hostPaths)
    const d = evaluation.decision
    const layers = await policy.trace(who, target.operation.id, target.operation.kind, evaluation.input)
    return {
      operation: target.operation.id,
      decision: d.decision,
      rule: d.rule?.rule ?? null,
      wouldDeny: d.wouldDeny.map((r) => r.rule),
      rewrites: evaluation.rewrites.map((r) => r.id),
      ...(out ? { body: out.toString('utf8') } : {}),
      layers,
      facts: factsSet(evaluation.input),
    }
  } catch (err) {
    if (!isGatewayError(err)) throw err
    return { operation: target?.operation.id ?? '', decision: 'deny', rule: null, wouldDeny: [], rewrites: [], error: `${err.code}: ${err.message}` }
  }
}

const NOT_FACTS = new Set(['op', 'kind', 'resource', 'query', 'body'])

/** `name=value` for every fact that is set; the body and query as sent are left out (they may hold secrets). */
export function factsSet (input: PolicyInput): string[] {
  const out: string[] = []
  const add = (name: string, v: unknown): void => {
    if (v === '' || v === false || v === 0 || v === null || v === undefined || (Array.isArray(v) && v.length === 0)) return
    if (typeof v === 'object' && !Array.isArray(v)) { for (const [k, x] of Object.entries(v)) add(`${name}.${k}`, x); return }
    out.push(`${name}=${Array.isArray(v) ? `[${v.map((x) => (x !== null && typeof x === 'object' ? JSON.stringify(x) : String(x))).join(', ')}]` : String(v)}`)
  }
  for (const [k, v] of Object.entries(input)) if (!NOT_FACTS.has(k)) add(k, v)
  return out
}

function named (m: RuleMatch): string {
  return `${m.rule} (${m.policy})`
}

/**
 * What decided, one line each: every denying rule with why, the allowing rule of each
 * enforce-mode layer, or the layer that allowed nothing; audit-mode denials likewise.
 */
export function decidingLines (r: CheckResult): string[] {
  if (!r.layers) return []
  const lines: string[] = []
  const enforce = r.layers.filter((l) => l.mode === 'enforce')
  const audit = r.layers.filter((l) => l.mode === 'audit')
  const denied = enforce.flatMap((l) => l.deniedBy)
  for (const m of denied) lines.push(`denied by ${named(m)}: ${m.reason ? describeReason(m.reason, r.operation) : m.condition}`)
  for (const l of enforce) {
    if (l.allowedBy) lines.push(`allowed by ${named(l.allowedBy)}`)
    else if (!denied.length) lines.push(`denied: ${denialReason([...enforce], null, r.operation)}`)
  }
  for (const m of audit.flatMap((l) => l.deniedBy)) lines.push(`would deny (audit) ${named(m)}: ${m.reason ? describeReason(m.reason, r.operation) : m.condition}`)
  for (const l of audit) if (!l.allowedBy && !l.deniedBy.length) lines.push(`would deny (audit): no allow rule in ${l.file} applies`)
  return [...new Set(lines)]
}

interface Fixture {
  name: string
  as: Principal
  request: string
  body?: unknown
  expect: 'allow' | 'deny' | 'would_deny'
  rule?: string
  rewrites?: string[]
  /** Judge host paths as a gateway that does not share the engine's filesystem would (default shared). */
  hostPaths?: HostPathMode
}

function fixtureProblems (f: Partial<Fixture>, where: string): string[] {
  const p: string[] = []
  if (typeof f.name !== 'string') p.push(`${where}: name missing`)
  if (typeof f.as?.subject !== 'string' || !Array.isArray(f.as?.roles)) p.push(`${where}: as: { subject, tenant, roles } missing`)
  if (typeof f.request !== 'string' || !/^[A-Z]+ \//.test(f.request)) p.push(`${where}: request must be "METHOD /path"`)
  if (!['allow', 'deny', 'would_deny'].includes(f.expect as string)) p.push(`${where}: expect must be allow, deny or would_deny`)
  if (f.hostPaths !== undefined && f.hostPaths !== 'shared' && f.hostPaths !== 'remote') p.push(`${where}: hostPaths must be shared or remote`)
  return p
}

export interface FixtureRun {
  /** What to print: `ok` and `FAIL` lines, with what decided a failure. */
  readonly lines: string[]
  readonly passed: number
  readonly failed: number
  /** The failed fixtures, as `file[i] name`. */
  readonly failures: string[]
  /** The enforce set's deny lines (rule ids) that decided no fixture's denial: nothing shows they still deny. */
  readonly uncovered: string[]
}

/** Run every fixture in DIR/tests/*.yaml against the policy in DIR; returns the lines to print and whether all passed. */
export async function runFixtures (dir: string): Promise<FixtureRun & { warnings: readonly string[] }> {
  const policy = await loadPolicy(dir)
  return { ...(await runFixturesOn(policy, path.join(dir, 'tests'))), warnings: policy.warnings }
}

/** Run every fixture in testDir/*.yaml against a compiled policy (the tools, and a reload before it is used). */
export async function runFixturesOn (policy: Policy, testDir: string): Promise<FixtureRun> {
  const files = fs.existsSync(testDir) ? fs.readdirSync(testDir).filter((f) => /\.ya?ml$/.test(f)).sort() : []
  const lines: string[] = []
  let passed = 0
  let failed = 0
  const failures: string[] = []
  const decided = new Set<string>()
  for (const file of files) {
    const cases = parseYaml(fs.readFileSync(path.join(testDir, file), 'utf8')) as Array<Partial<Fixture>> | null
    for (const [i, f] of (cases ?? []).entries()) {
      const where = `${file}[${i}]`
      const problems = fixtureProblems(f, where)
      if (problems.length) { failed++; failures.push(where); lines.push(...problems.map((p) => `FAIL ${p}`)); continue }
      const fx = f as Fixture
      const [method, url] = fx.request.split(' ')
      const body = fx.body === undefined ? undefined : Buffer.from(typeof fx.body === 'string' ? fx.body : JSON.stringify(fx.body))
      const r = await check(policy, { subject: fx.as.subject, tenant: fx.as.tenant ?? null, roles: fx.as.roles }, method, url, body, fx.hostPaths)
      if (r.decision === 'deny' && r.rule) decided.add(r.rule)
      const why: string[] = []
      if (r.decision !== fx.expect) why.push(`decision ${r.decision}${r.error ? ` (${r.error})` : ''}, expected ${fx.expect}`)
      // The rule must deny it; which of several denying rules is named depends on the
      // lines' order, and a database orders them by rule id (sortLines), not as the file.
      const denies = (r.layers ?? []).some((l) => l.mode === 'enforce' && l.deniedBy.some((m) => m.rule === fx.rule))
      if (fx.rule !== undefined && r.rule !== fx.rule && !r.wouldDeny.includes(fx.rule) && !denies) why.push(`rule ${r.rule ?? 'none'}, expected ${fx.rule}`)
      // A fixture that names a denying rule exercises that line even where another line denies too.
      if (fx.rule !== undefined && fx.expect === 'deny' && denies) decided.add(fx.rule)
      if (fx.rewrites !== undefined && JSON.stringify(r.rewrites) !== JSON.stringify(fx.rewrites)) why.push(`rewrites [${r.rewrites.join(', ')}], expected [${fx.rewrites.join(', ')}]`)
      if (why.length) {
        failed++
        failures.push(`${where} ${fx.name}: ${why.join('; ')}`)
        lines.push(`FAIL ${where} ${fx.name}: ${why.join('; ')}`)
        // What decided, and on which facts: enough to tell a wrong rule from a wrong fixture.
        lines.push(...decidingLines(r).map((l) => `       ${l}`))
        if (r.facts) lines.push(`       facts: ${r.facts.length ? r.facts.join(', ') : '(none set)'}`)
      } else {
        passed++
        lines.push(`ok   ${where} ${fx.name}`)
      }
    }
  }
  if (!files.length) lines.push(`no fixtures in ${testDir}`)
  const uncovered = policy.lines.filter((l) => l[0] === 'p' && l[5] === 'deny' && !decided.has(l[6])).map((l) => l[6])
  return { lines, passed, failed, failures, uncovered }
}

export interface FactEntry {
  /** As a condition names it: `r.obj.capAdd`, `r.obj.namespaces.pid`. */
  readonly name: string
  readonly type: string
  readonly description: string
  /** The request fields it comes from. */
  readonly source: string
}

/** Every fact and request field a condition may name, from the one declaration (FactsSchema, RequestSchema). */
export function factList (): FactEntry[] {
  const out: FactEntry[] = []
  for (const [name, s] of [...Object.entries(FactsSchema.properties), ...Object.entries(RequestSchema.properties)] as Array<[string, TSchema]>) {
    out.push({ name: `r.obj.${name}`, type: show(typeOfSchema(s, name)), description: String(s.description ?? ''), source: String(s.source ?? '') })
    if (s.type === 'object' && s.properties) {
      for (const [k, f] of Object.entries(s.properties as Record<string, TSchema>)) out.push({ name: `r.obj.${name}.${k}`, type: show(typeOfSchema(f, k)), description: String(f.description ?? ''), source: '' })
    }
  }
  return out
}

/** `portcullis policy facts`: one line per fact, name, type and description. */
export function factsTable (): string {
  const facts = factList()
  const width = Math.max(...facts.map((f) => f.name.length))
  const typeWidth = Math.max(...facts.map((f) => f.type.length))
  return facts.map((f) => `${f.name.padEnd(width)}  ${f.type.padEnd(typeWidth)}  ${f.description}${f.source ? ` [from ${f.source}]` : ''}`).join('\n') + '\n'
}

/** docs/facts.md, generated by scripts/gen-facts-doc.ts (a test keeps the committed file current). */
export function factsMarkdown (): string {
  const cell = (s: string): string => s.replace(/\|/g, '\\|').replace(/\n/g, ' ')
  const sigs = Object.entries(functionSignatures).map(([n, s]) => `| \`${n}\` | ${s.args.map((a) => `\`${a}\``).join(', ')} | \`${s.returns}\` |`)
  return [
    '# Policy facts',
    '',
    '<!-- Generated by scripts/gen-facts-doc.ts from FactsSchema (src/policy/fields.ts) and functionSignatures (src/policy/functions.ts): do not edit. -->',
    '',
    'What a policy condition may name under `r.obj`, with its type and the request fields it comes from. `portcullis policy facts` prints the same list (`--json` too). A condition naming anything else, or using a value as what its type is not (a list compared with `==`, `count()` of a string, a string compared with a number, a function given the wrong arguments), is refused when the policy is compiled, with the file, the line and the closest known names.',
    '',
    'Besides `r.obj`: `r.sub` (`list<string>`, the principals), `r.dom` (`string`, the tenant), `r.op` and `r.kind` (`string`).',
    '',
    '| Name | Type | Meaning | From |',
    '|---|---|---|---|',
    ...factList().map((f) => `| \`${f.name}\` | \`${f.type}\` | ${cell(f.description)} | ${cell(f.source)} |`),
    '',
    '## Functions',
    '',
    '| Function | Arguments | Result |',
    '|---|---|---|',
    ...sigs,
    '',
  ].join('\n')
}
