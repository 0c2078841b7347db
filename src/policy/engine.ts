/**
 * Loading, validating and evaluating a policy directory.
 *
 * A policy directory holds (see policies/README.md):
 *   policy.yaml   the manifest: the Casbin model, the policy files with their mode
 *                 (`enforce` or `audit`), and the rewrites file
 *   model.conf    the Casbin model (subjects and roles, tenants as domains,
 *                 operation ids and resource kinds, allow/deny with deny winning)
 *   *.csv         Casbin policy lines: `p, SUBJECT, TENANT, OPERATION, KIND, EFFECT, RULE-ID, CONDITION`
 *                 and role lines: `g, ROLE-OR-USER, ROLE, TENANT`
 *   rewrites.yaml body rewrites applied before evaluation
 *
 * Casbin loads and parses the model and the policy lines and resolves roles (`g`,
 * with tenants as domains). Decisions are then made by an index compiled from those
 * lines: for each operation id and subject, the lines that can apply, with their
 * conditions compiled once. The model's matcher is evaluated exactly (tests compare
 * every decision with Casbin's own `enforceEx`), but a request looks at a handful of
 * lines instead of all of them: thousands of per-user lines cost nothing extra.
 *
 * A directory is compiled as a whole into an immutable `Policy`; anything wrong
 * (syntax, an unknown operation id, a condition that does not compile, a duplicate
 * rule id) is reported as a PolicyError listing every problem, and nothing is used.
 */
import { createHash } from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { addBinaryOp, compile as compileExpression, parse as parseExpression } from '@casbin/expression-eval'
import { newEnforcer, newModel, StringAdapter, Util, type Enforcer } from 'casbin'
import { parse as parseYaml } from 'yaml'
import { operations, type Operation } from '../api/catalog/operations'
import { closest, typeProblems } from './conditions'
import { explain, type Reason } from './explain'
import { buildInput, type HostPathMode, type PolicyInput } from './facts'
import { conditionFunctions } from './functions'
import { compileTenancy, DEFAULT_TENANCY, type TenancySettings } from './tenancy'
import { compileRewrites, type AppliedRewrite, type RewriteRule, applyRewrites } from './rewrite'

export type Mode = 'enforce' | 'audit'

export interface Principal {
  readonly subject: string
  readonly tenant: string | null
  readonly roles: readonly string[]
}

export interface RuleRef { readonly policy: string, readonly rule: string }

export interface Decision {
  /** What happens: `allow`, `deny`, or `would_deny` (allowed, but an audit-mode policy would deny). */
  readonly decision: 'allow' | 'deny' | 'would_deny'
  /** The rule that decided (the denying rule, or the allowing one); null when no rule matched (default deny). */
  readonly rule: RuleRef | null
  /** Audit-mode rules that would have denied. */
  readonly wouldDeny: readonly RuleRef[]
  readonly policyVersion: string
}

export interface Evaluation {
  readonly decision: Decision
  readonly input: PolicyInput
  /** The body after rewrites (undefined if there was none and none was added). */
  readonly body: unknown
  readonly rewrites: readonly AppliedRewrite[]
}

/** A rule whose line applied to a request (subject, tenant, operation, kind and condition). */
export interface RuleMatch {
  readonly policy: string
  readonly rule: string
  readonly effect: 'allow' | 'deny'
  readonly condition: string
  /** For a denying rule: which facts made its condition hold, and what it lets through. */
  readonly reason?: Reason
}

/** One policy file's view of a request: every rule of it that applied. */
export interface LayerTrace {
  readonly file: string
  readonly mode: Mode
  /** The principals the request acts as in this layer (`user:<subject>`, roles, inherited roles). */
  readonly principals: readonly string[]
  /** The first allowing rule (the one a decision names), null when none applies. */
  readonly allowedBy: RuleMatch | null
  /** Every denying rule that applies, in file order. */
  readonly deniedBy: readonly RuleMatch[]
}

/** What `evaluate` judges: the operation, its target and query, the decoded body. */
export interface EvaluationRequest {
  op: string
  kind: string
  resource: string
  query: URLSearchParams
  body: unknown
  /** Whether host paths can be followed on this filesystem (default `shared`: the tools run on the engine's host). */
  hostPaths?: HostPathMode
}

export interface Policy {
  readonly dir: string
  /** sha256 over every file the policy was compiled from, and the database's lines when they form the enforce set (first 12 hex digits). */
  readonly version: string
  /** Where the enforce set's lines came from: the manifest's file, or `database`. */
  readonly source: 'files' | 'database'
  /** The lines of the enforce set (`['p', ...fields]`, `['g', ...fields]`), in evaluation order. */
  readonly lines: readonly PolicyLine[]
  /** How objects are scoped to tenants (tenancy.yaml; defaults without one). */
  readonly tenancy: TenancySettings
  /**
   * What is legal but probably not meant: an enforce-mode file without any allow rule
   * (every enforce-mode file is a layer that must itself allow a request, so it denies
   * everything). Logged at start-up and on reload, printed by the policy tools.
   */
  readonly warnings: readonly string[]
  evaluate (who: Principal, request: EvaluationRequest): Promise<Evaluation>
  /**
   * Every rule of every layer that applies to a request with these facts (as
   * `evaluate` produced them), with the reasons of the denying ones. For the tools and
   * for denial messages: slower than `evaluate`, which stops at what decides.
   */
  trace (who: Principal, op: string, kind: string, input: PolicyInput): Promise<readonly LayerTrace[]>
}

export class PolicyError extends Error {
  readonly problems: readonly string[]
  constructor (dir: string, problems: string[]) {
    super(`invalid policy in ${dir}:\n${problems.map((p) => `  - ${p}`).join('\n')}`)
    this.problems = problems
  }
}

/** One Casbin line as stored: the ptype (`p` or `g`) and its fields. */
export type PolicyLine = readonly string[]

/**
 * The enforce set's lines given from elsewhere than the manifest's file (the
 * database, see src/policy/database.ts). They are compiled exactly as a file's are.
 */
export interface LineSource {
  readonly name: string
  readonly lines: readonly PolicyLine[]
}

type Condition = (context: Record<string, unknown>) => unknown
interface CompiledRule { readonly line: number, readonly dom: string, readonly eft: 'allow' | 'deny', readonly id: string, readonly cond: Condition | null, readonly text: string }
interface PolicySet {
  readonly file: string
  readonly mode: Mode
  readonly enforcer: Enforcer
  /** operation id -> subject -> the lines that may apply, in file order. */
  readonly index: ReadonlyMap<string, ReadonlyMap<string, readonly CompiledRule[]>>
  /** Principals by (tenant, subject, roles): role resolution is the costly part of a decision. */
  readonly principals: Map<string, readonly string[]>
  /** How many of its `p` lines allow. */
  readonly allows: number
}

/** The only matcher this evaluator implements; model.conf must say exactly this. */
export const SUPPORTED_MATCHER = 'member(r.sub, p.sub) && (p.dom == "*" || p.dom == r.dom) && globMatch(r.op, p.op) && globMatch(r.kind, p.kind) && eval(p.cond)'
export const SUPPORTED_EFFECT = 'some(where (p.eft == allow)) && !some(where (p.eft == deny))'

// Casbin registers its `in` operator on first use; conditions compiled here need it too.
addBinaryOp('in', 1, Util.customIn)

function compileCondition (cond: string): Condition | null {
  if (cond.trim() === 'true') return null
  return compileExpression(Util.bracketCompatible(Util.escapeAssertion(cond))) as Condition
}

/** The operations a line's operation and kind globs select; lines share few distinct patterns. */
const selected = new Map<string, readonly Operation[]>()
function operationsFor (opPattern: string, kindPattern: string): readonly Operation[] {
  const key = `${opPattern}\0${kindPattern}`
  let ops = selected.get(key)
  if (!ops) {
    ops = operations.filter((o) => Util.globMatch(o.id, opPattern) && Util.globMatch(o.kind, kindPattern))
    selected.set(key, ops)
  }
  return ops
}

function buildIndex (rules: string[][], conditions: ReadonlyArray<Condition | null>): Map<string, Map<string, CompiledRule[]>> {
  const index = new Map<string, Map<string, CompiledRule[]>>()
  rules.forEach((r, line) => {
    const rule: CompiledRule = { line, dom: r[P.dom], eft: r[P.eft] === 'deny' ? 'deny' : 'allow', id: r[P.rule], cond: conditions[line], text: r[P.cond] }
    for (const op of operationsFor(r[P.op], r[P.kind])) {
      const bySub = index.get(op.id) ?? new Map<string, CompiledRule[]>()
      index.set(op.id, bySub)
      const list = bySub.get(r[P.sub]) ?? []
      list.push(rule)
      bySub.set(r[P.sub], list)
    }
  })
  return index
}

const KINDS = new Set(operations.map((o) => o.kind))
const EFFECTS = new Set(['allow', 'deny'])

/** The columns of a `p` line, as the model names them. */
const P = { sub: 0, dom: 1, op: 2, kind: 3, eft: 4, rule: 5, cond: 6 } as const

function readManifest (dir: string, problems: string[]): { model: string, policies: Array<{ file: string, mode: Mode }>, rewrites?: string, tenancy?: string } | null {
  const file = path.join(dir, 'policy.yaml')
  let doc: unknown
  try {
    doc = parseYaml(fs.readFileSync(file, 'utf8'))
  } catch (err) {
    problems.push(`policy.yaml: ${(err as Error).message.split('\n')[0]}`)
    return null
  }
  const m = doc as { model?: unknown, policies?: unknown, rewrites?: unknown, tenancy?: unknown }
  if (m === null || typeof m !== 'object') { problems.push('policy.yaml: expected a mapping'); return null }
  for (const k of Object.keys(m)) if (!['model', 'policies', 'rewrites', 'tenancy'].includes(k)) problems.push(`policy.yaml: ${k}: unknown key`)
  if (typeof m.model !== 'string') problems.push('policy.yaml: model: expected a file name')
  if (m.rewrites !== undefined && typeof m.rewrites !== 'string') problems.push('policy.yaml: rewrites: expected a file name')
  if (m.tenancy !== undefined && typeof m.tenancy !== 'string') problems.push('policy.yaml: tenancy: expected a file name')
  const policies: Array<{ file: string, mode: Mode }> = []
  if (!Array.isArray(m.policies) || m.policies.length === 0) {
    problems.push('policy.yaml: policies: expected a non-empty list of { file, mode }')
  } else {
    m.policies.forEach((p: unknown, i) => {
      const e = p as { file?: unknown, mode?: unknown }
      if (typeof e?.file !== 'string') { problems.push(`policy.yaml: policies[${i}].file: expected a file name`); return }
      const mode = e.mode ?? 'enforce'
      if (mode !== 'enforce' && mode !== 'audit') { problems.push(`policy.yaml: policies[${i}].mode: expected enforce or audit`); return }
      for (const k of Object.keys(e)) if (k !== 'file' && k !== 'mode') problems.push(`policy.yaml: policies[${i}].${k}: unknown key`)
      policies.push({ file: e.file, mode })
    })
    if (!policies.some((p) => p.mode === 'enforce')) problems.push('policy.yaml: policies: at least one policy must be in enforce mode')
  }
  if (typeof m.model !== 'string') return null
  return { model: m.model, policies, ...(typeof m.rewrites === 'string' ? { rewrites: m.rewrites } : {}), ...(typeof m.tenancy === 'string' ? { tenancy: m.tenancy } : {}) }
}

interface Node { type: string, name?: string, callee?: Node, object?: Node, computed?: boolean, property?: Node, [k: string]: unknown }

const REQUEST_NAMES = new Set(['r_obj', 'r_dom', 'r_op', 'r_kind', 'r_sub'])

/**
 * Names a condition uses that do not exist. The expression evaluator quietly yields
 * `undefined` for an unknown function or variable, which would make a misspelt deny
 * rule never match: refuse them when the policy is compiled.
 */
function unknownNames (node: Node): string[] {
  const out: string[] = []
  const visit = (n: unknown): void => {
    if (n === null || typeof n !== 'object') return
    if (Array.isArray(n)) { n.forEach(visit); return }
    const x = n as Node
    if (x.type === 'Identifier' && x.name) {
      if (!REQUEST_NAMES.has(x.name) && !(x.name in conditionFunctions)) out.push(x.name)
      return
    }
    if (x.type === 'MemberExpression') {
      visit(x.object)
      if (x.computed) visit(x.property)
      return
    }
    for (const [k, v] of Object.entries(x)) if (k !== 'type') visit(v)
  }
  visit(node)
  return [...new Set(out)]
}

function suggestFunctions (names: readonly string[]): string {
  const hints = names.flatMap((n) => closest(n, Object.keys(conditionFunctions)).slice(0, 1).map((c) => `${n} → ${c}`))
  return hints.length ? `; did you mean ${hints.join(', ')}?` : ''
}

/** A request context with empty facts, to run each condition once when it is compiled. */
const PROBE = { r_obj: buildInput('ContainerCreate', 'container', '', new URLSearchParams(), {}), r_dom: '', r_op: 'ContainerCreate', r_kind: 'container', r_sub: [], ...conditionFunctions }

/** Check one `p` line and compile its condition (run once on empty facts to catch unknown names). */
function checkRule (where: string, rule: string[], seen: Set<string>, problems: string[]): Condition | null {
  if (rule.length !== 7) { problems.push(`${where}: expected 7 fields (sub, tenant, operation, kind, effect, rule id, condition), got ${rule.length}`); return null }
  const opPattern = rule[P.op]
  if (!operationsFor(opPattern, '*').length) problems.push(`${where}: operation ${JSON.stringify(opPattern)} matches no Engine API operation`)
  if (rule[P.kind] !== '*' && !KINDS.has(rule[P.kind] as never)) problems.push(`${where}: unknown resource kind ${JSON.stringify(rule[P.kind])}`)
  if (!EFFECTS.has(rule[P.eft])) problems.push(`${where}: effect must be allow or deny, got ${JSON.stringify(rule[P.eft])}`)
  if (!/^[a-z0-9][a-z0-9-]*$/.test(rule[P.rule])) problems.push(`${where}: rule id must be lower-case letters, digits and dashes, got ${JSON.stringify(rule[P.rule])}`)
  else if (seen.has(rule[P.rule])) problems.push(`${where}: duplicate rule id ${rule[P.rule]}`)
  seen.add(rule[P.rule])
  try {
    const ast = parseExpression(Util.escapeAssertion(rule[P.cond]))
    const unknown = unknownNames(ast as unknown as Node)
    if (unknown.length) throw new Error(`unknown name${unknown.length > 1 ? 's' : ''} ${unknown.join(', ')}${suggestFunctions(unknown)}`)
    const typed = typeProblems(ast)
    if (typed.length) {
      problems.push(...typed.map((p) => `${where}: ${p} (rule ${rule[P.rule]})`))
      return null
    }
    const cond = compileCondition(rule[P.cond])
    cond?.(PROBE)
    return cond
  } catch (err) {
    problems.push(`${where}: condition ${JSON.stringify(rule[P.cond])} does not evaluate: ${(err as Error).message}`)
    return null
  }
}

/**
 * The file line of each `p` line, in the order Casbin's string adapter reads them (one
 * policy line per text line; blank lines and `#` comments skipped), so that a problem
 * names the line an editor shows.
 */
function pLineNumbers (text: string): number[] {
  const out: number[] = []
  text.split(/\r?\n/).forEach((l, i) => { if (/^\s*p\s*,/.test(l)) out.push(i + 1) })
  return out
}

async function compileSet (dir: string, model: string, file: string, mode: Mode, problems: string[], given?: LineSource): Promise<PolicySet | null> {
  let enforcer: Enforcer
  let fileText = ''
  if (given) {
    try {
      const other = given.lines.find((l) => l[0] !== 'p' && l[0] !== 'g')
      if (other) throw new Error(`line type ${JSON.stringify(other[0])}: only p and g lines are allowed`)
      enforcer = await newEnforcer(newModel(model))
      await addLines(enforcer, given.lines)
    } catch (err) {
      problems.push(`${given.name}: ${(err as Error).message}`)
      return null
    }
    file = given.name
  } else {
    let text: string
    try {
      text = fs.readFileSync(path.join(dir, file), 'utf8')
    } catch (err) {
      problems.push(`${file}: cannot read (${(err as NodeJS.ErrnoException).code ?? 'error'})`)
      return null
    }
    try {
      enforcer = await newEnforcer(newModel(model), new StringAdapter(text))
      fileText = text
    } catch (err) {
      problems.push(`${file}: ${(err as Error).message}`)
      return null
    }
  }
  // `g, ci, tenant, *`: a role granted in every tenant.
  await enforcer.addNamedDomainMatchingFunc('g', Util.keyMatchFunc)
  for (const [name, fn] of Object.entries(conditionFunctions)) await enforcer.addFunction(name, fn)
  const seen = new Set<string>()
  const rules = await enforcer.getPolicy()
  const before = problems.length
  const at = given ? null : pLineNumbers(fileText)
  const conditions = rules.map((rule, i) => checkRule(at && at.length === rules.length ? `${path.join(dir, file)}:${at[i]}` : `${file}: p line ${i + 1}`, rule, seen, problems))
  if (given && !rules.length) problems.push(`${file}: holds no p lines (an empty policy would deny everything)`)
  if (problems.length > before) return null
  return { file, mode, enforcer, index: buildIndex(rules, conditions), principals: new Map(), allows: rules.filter((r) => r[P.eft] === 'allow').length }
}

function checkModel (model: string, name: string, problems: string[]): void {
  const section = (key: string): string | undefined => new RegExp(`^\\s*${key}\\s*=\\s*(.+?)\\s*$`, 'm').exec(model)?.[1]
  if (section('m') !== SUPPORTED_MATCHER) problems.push(`${name}: the matcher must be exactly: m = ${SUPPORTED_MATCHER}`)
  if (section('e') !== SUPPORTED_EFFECT) problems.push(`${name}: the effect must be exactly: e = ${SUPPORTED_EFFECT}`)
  if (section('p') !== 'sub, dom, op, kind, eft, rule, cond') problems.push(`${name}: the policy definition must be: p = sub, dom, op, kind, eft, rule, cond`)
}

function digest (dir: string, files: string[], lines?: readonly PolicyLine[]): string {
  const h = createHash('sha256')
  for (const f of [...files].sort()) {
    h.update(f).update('\0')
    try { h.update(fs.readFileSync(path.join(dir, f))) } catch { /* reported elsewhere */ }
    h.update('\0')
  }
  // Database lines in their canonical order (sortLines): every replica computes the same version.
  if (lines) h.update('database\0').update(JSON.stringify(lines))
  return h.digest('hex').slice(0, 12)
}

/** In database mode the manifest's single enforce-mode file is what the database replaces (and what seeds it). */
function enforceFileForDatabase (policies: ReadonlyArray<{ file: string, mode: Mode }>, problems: string[]): string | null {
  const enforce = policies.filter((p) => p.mode === 'enforce')
  if (enforce.length !== 1) {
    problems.push(`policy.yaml: policies: with policy.database exactly one file may be in enforce mode (its lines live in the database), found ${enforce.length}`)
    return null
  }
  return enforce[0].file
}

function checkDuplicates (given: LineSource, problems: string[]): void {
  const seen = new Set<string>()
  for (const l of given.lines) {
    const key = JSON.stringify(l)
    if (seen.has(key)) problems.push(`${given.name}: duplicate line ${l.join(', ')}`)
    seen.add(key)
  }
}

/**
 * A canonical order for lines that come from a table (which has none): role lines
 * first, then p lines by rule id. Decisions never depend on the order (any deny wins,
 * else any allow); only which of several matching rules is named does.
 */
export function sortLines (lines: readonly PolicyLine[]): PolicyLine[] {
  const key = (l: PolicyLine): string => l[0] === 'p' ? `1\0${l[6] ?? ''}\0${JSON.stringify(l)}` : `0\0${JSON.stringify(l)}`
  return [...lines].sort((a, b) => { const ka = key(a); const kb = key(b); return ka < kb ? -1 : ka > kb ? 1 : 0 })
}

/** The lines of the manifest's enforce-mode file, parsed by Casbin (to seed an empty database). */
export async function readEnforceFileLines (dir: string): Promise<{ file: string, lines: PolicyLine[] }> {
  const problems: string[] = []
  const manifest = readManifest(dir, problems)
  const file = manifest ? enforceFileForDatabase(manifest.policies, problems) : null
  if (!manifest || !file || problems.length) throw new PolicyError(dir, problems)
  const model = newModel(fs.readFileSync(path.join(dir, manifest.model), 'utf8'))
  const enforcer = await newEnforcer(model, new StringAdapter(fs.readFileSync(path.join(dir, file), 'utf8')))
  return { file, lines: await enforcerLines(enforcer) }
}

/** An enforcer's `p` and `g` lines, as `['p', ...fields]` and `['g', ...fields]`. */
export async function enforcerLines (enforcer: Enforcer): Promise<PolicyLine[]> {
  return [
    ...(await enforcer.getPolicy()).map((r) => Object.freeze(['p', ...r])),
    ...(await enforcer.getGroupingPolicy()).map((r) => Object.freeze(['g', ...r])),
  ]
}

/** Add `p` and `g` lines to an enforcer (and to its adapter, if it saves as it goes). */
export async function addLines (enforcer: Enforcer, lines: readonly PolicyLine[]): Promise<void> {
  const p = lines.filter((l) => l[0] === 'p').map((l) => l.slice(1))
  const g = lines.filter((l) => l[0] === 'g').map((l) => l.slice(1))
  if (p.length) await enforcer.addNamedPolicies('p', p)
  if (g.length) await enforcer.addNamedGroupingPolicies('g', g)
}

/** Every principal the request acts as: the user, its roles, and the roles those inherit in this tenant. */
async function principals (set: PolicySet, who: Principal, dom: string): Promise<readonly string[]> {
  const key = `${dom}\0${who.subject}\0${who.roles.join('\0')}`
  const cached = set.principals.get(key)
  if (cached) return cached
  const out = new Set<string>([`user:${who.subject}`, ...who.roles])
  for (const start of [`user:${who.subject}`, ...who.roles]) {
    for (const r of await set.enforcer.getImplicitRolesForUser(start, dom)) out.add(r)
  }
  const list = Object.freeze([...out])
  if (set.principals.size >= 10_000) set.principals.clear()
  set.principals.set(key, list)
  return list
}

/**
 * The model's matcher and effect over the indexed lines: a line applies when its
 * subject is one of the principals (or *), its tenant matches, and its condition
 * holds. Any applicable deny wins (the first in file order is reported); otherwise
 * the first applicable allow; otherwise nothing allows it.
 */
function decide (set: PolicySet, subs: readonly string[], dom: string, op: string, kind: string, input: PolicyInput): { ok: boolean, rule: string | null } {
  const bySub = set.index.get(op)
  if (!bySub) return { ok: false, rule: null }
  // The condition functions from the prototype (a condition looks names up as
  // `context[name]`): copying them into every decision's context was a dictionary-mode
  // object per request (issue 21).
  const context: Record<string, unknown> = Object.create(conditionFunctions)
  context.r_obj = input
  context.r_dom = dom
  context.r_op = op
  context.r_kind = kind
  context.r_sub = subs
  let allow: CompiledRule | null = null
  let deny: CompiledRule | null = null
  for (let i = 0; i <= subs.length; i++) {
    const rules = bySub.get(i < subs.length ? subs[i] : '*')
    if (rules === undefined) continue
    for (const r of rules) {
      if (r.dom !== '*' && r.dom !== dom) continue
      const best = r.eft === 'deny' ? deny : allow
      if (best && best.line < r.line) continue
      if (r.cond && !r.cond(context)) continue
      if (r.eft === 'deny') deny = r
      else allow = r
    }
  }
  if (deny) return { ok: false, rule: deny.id }
  return { ok: allow !== null, rule: allow?.id ?? null }
}

/** Every line of `set` that applies (the matcher without the effect), in file order. */
function applying (set: PolicySet, subs: readonly string[], dom: string, op: string, kind: string, input: PolicyInput): LayerTrace {
  const context = { r_obj: input, r_dom: dom, r_op: op, r_kind: kind, r_sub: subs, ...conditionFunctions }
  const bySub = set.index.get(op)
  const found: CompiledRule[] = []
  for (const sub of new Set([...subs, '*'])) {
    for (const r of bySub?.get(sub) ?? []) {
      if (r.dom !== '*' && r.dom !== dom) continue
      if (r.cond && !r.cond(context)) continue
      found.push(r)
    }
  }
  found.sort((a, b) => a.line - b.line)
  const match = (r: CompiledRule): RuleMatch => ({
    policy: set.file,
    rule: r.id,
    effect: r.eft,
    condition: r.text,
    ...(r.eft === 'deny' ? { reason: explain(r.text, context) } : {}),
  })
  const allow = found.find((r) => r.eft === 'allow')
  return { file: set.file, mode: set.mode, principals: subs, allowedBy: allow ? match(allow) : null, deniedBy: found.filter((r) => r.eft === 'deny').map(match) }
}

/**
 * A layer (enforce or audit) without any allow rule decides `deny` for every request:
 * a file meant to add a few denials to base.csv denies everything instead.
 */
function layerWarnings (sets: readonly PolicySet[]): string[] {
  return sets.filter((s) => s.allows === 0).map((s) => {
    const id = `${s.file.replace(/\.[^.]*$/, '').replace(/[^a-z0-9-]+/gi, '-').toLowerCase()}-rest`
    return s.mode === 'enforce'
      ? `${s.file} has no allow rule, so it denies every request: each enforce-mode file is a layer that must itself allow a request. Add an allow line to it (\`p, *, *, *, *, allow, ${id}, true\`: the other files still decide what is allowed) or move its deny lines into a file that allows`
      : `${s.file} has no allow rule: in audit mode it records would_deny for every request`
  })
}

/** Body-less evaluations kept per compiled policy (identities x operations x targets; cleared when full). */
const BODYLESS_CACHE_MAX = 10_000

function ref (file: string, rule: string | null): RuleRef | null {
  return rule ? { policy: file, rule } : null
}

/**
 * Compile the policy directory `dir`. With `given` (database mode), the manifest must
 * name exactly one `mode: enforce` file: the given lines take its place (the file only
 * seeds an empty database), audit-mode files, the model, rewrites and tenancy stay files.
 */
export async function loadPolicy (dir: string, given?: LineSource): Promise<Policy> {
  const problems: string[] = []
  const manifest = readManifest(dir, problems)
  if (!manifest) throw new PolicyError(dir, problems)
  let model = ''
  try {
    model = fs.readFileSync(path.join(dir, manifest.model), 'utf8')
  } catch (err) {
    problems.push(`${manifest.model}: cannot read (${(err as NodeJS.ErrnoException).code ?? 'error'})`)
  }
  const replaced = given ? enforceFileForDatabase(manifest.policies, problems) : null
  const sets: PolicySet[] = []
  if (model) checkModel(model, manifest.model, problems)
  if (model) {
    for (const p of manifest.policies) {
      const set = await compileSet(dir, model, p.file, p.mode, problems, p.file === replaced ? given : undefined)
      if (set) sets.push(set)
    }
  }
  if (given && replaced) checkDuplicates(given, problems)
  let rewrites: RewriteRule[] = []
  if (manifest.rewrites) rewrites = compileRewrites(path.join(dir, manifest.rewrites), manifest.rewrites, problems)
  const tenancy = manifest.tenancy ? compileTenancy(path.join(dir, manifest.tenancy), manifest.tenancy, problems) : DEFAULT_TENANCY
  if (problems.length) throw new PolicyError(dir, problems)

  const files = ['policy.yaml', manifest.model, ...manifest.policies.map((p) => p.file).filter((f) => f !== replaced), ...(manifest.rewrites ? [manifest.rewrites] : []), ...(manifest.tenancy ? [manifest.tenancy] : [])]
  const version = digest(dir, files, given && replaced ? given.lines : undefined)
  const lines = await enforcerLines(sets.find((s) => s.mode === 'enforce')!.enforcer)
  const enforcing = sets.filter((s) => s.mode === 'enforce')
  const auditing = sets.filter((s) => s.mode === 'audit')

  const warnings = Object.freeze(layerWarnings(sets))
  const bodyless = new Map<string, Evaluation>()

  return Object.freeze({
    dir,
    version,
    source: given && replaced ? 'database' as const : 'files' as const,
    lines: Object.freeze(lines),
    tenancy,
    warnings,
    async trace (who: Principal, op: string, kind: string, input: PolicyInput): Promise<readonly LayerTrace[]> {
      const dom = who.tenant ?? ''
      const out: LayerTrace[] = []
      for (const set of [...enforcing, ...auditing]) out.push(applying(set, await principals(set, who, dom), dom, op, kind, input))
      return out
    },
    async evaluate (who: Principal, req: EvaluationRequest): Promise<Evaluation> {
      // A request without a body is judged on the identity, the operation, its target and
      // query alone (facts.ts reads nothing else then): the same ones get the same
      // evaluation for as long as this compiled policy is in force (a reload makes a new one).
      if (req.body !== undefined) return evaluateNow(who, req)
      const key = `${who.tenant ?? ''}\0${who.subject}\0${who.roles.join('\0')}\0\0${req.op}\0${req.kind}\0${req.resource}\0${req.query.toString()}\0${req.hostPaths ?? ''}`
      const hit = bodyless.get(key)
      if (hit !== undefined) return hit
      const evaluation = await evaluateNow(who, req)
      if (bodyless.size >= BODYLESS_CACHE_MAX) bodyless.clear()
      bodyless.set(key, evaluation)
      return evaluation
    },
  })

  async function evaluateNow (who: Principal, req: EvaluationRequest): Promise<Evaluation> {
    const dom = who.tenant ?? ''
    const roles = await principals(enforcing[0], who, dom)
    const { body, applied } = applyRewrites(rewrites, req.op, roles, who, req.body)
    const input = buildInput(req.op, req.kind, req.resource, req.query, body, req.hostPaths)
    let allowedBy: RuleRef | null = null
    for (const set of enforcing) {
      const subs = set === enforcing[0] ? roles : await principals(set, who, dom)
      const { ok, rule } = decide(set, subs, dom, req.op, req.kind, input)
      if (!ok) {
        return { decision: { decision: 'deny', rule: ref(set.file, rule), wouldDeny: [], policyVersion: version }, input, body, rewrites: applied }
      }
      allowedBy ??= ref(set.file, rule)
    }
    const wouldDeny: RuleRef[] = []
    for (const set of auditing) {
      const { ok, rule } = decide(set, await principals(set, who, dom), dom, req.op, req.kind, input)
      if (!ok) wouldDeny.push(ref(set.file, rule) ?? { policy: set.file, rule: 'default-deny' })
    }
    const decision = wouldDeny.length ? 'would_deny' : 'allow'
    return { decision: { decision, rule: allowedBy, wouldDeny, policyVersion: version }, input, body, rewrites: applied }
  }
}

/** The text of the manifest's model file (the database module reads lines into it). */
export function readModelText (dir: string): string {
  const problems: string[] = []
  const manifest = readManifest(dir, problems)
  if (!manifest || problems.length) throw new PolicyError(dir, problems)
  try {
    return fs.readFileSync(path.join(dir, manifest.model), 'utf8')
  } catch (err) {
    throw new PolicyError(dir, [`${manifest.model}: cannot read (${(err as NodeJS.ErrnoException).code ?? 'error'})`])
  }
}
