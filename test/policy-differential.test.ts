/**
 * The indexed evaluator (src/policy/engine.ts decide: lines by operation and subject,
 * conditions compiled once, facts worked out lazily) against Casbin's own enforcer on
 * the same model and lines: the shipped policy plus generated per-user, per-role and
 * per-tenant lines with globs and conditions, judged for random requests (seeded, so a
 * failure repeats). test/policy.test.ts compares every operation for a few fixed
 * principals; this one varies the lines and the principals.
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { newEnforcer, newModel, StringAdapter, Util } from 'casbin'
import { operations } from '../src/api/catalog/operations'
import { loadPolicy, type Principal } from '../src/policy/engine'
import { conditionFunctions } from '../src/policy/functions'

const REPO = path.resolve(__dirname, '..', '..')

/** mulberry32: a small seeded generator. */
function random (seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let x = a
    x = Math.imul(x ^ (x >>> 15), x | 1)
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61)
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296
  }
}

const SUBJECTS = 40
const TENANTS = 8
const ROLES = ['tenant', 'ci', 'readonly', 'anonymous', 'admin']
const OPS = ['*', 'Container*', 'ContainerCreate', 'ContainerInspect', 'Image*', 'ImageCreate', 'Volume*', 'Network*', 'ContainerExec', 'System*']
const KINDS = ['*', '*', 'container', 'image', 'volume', 'network', 'exec']
const CONDITIONS = [
  'true',
  'true',
  'r.obj.memory > 268435456',
  'r.obj.privileged',
  'count(r.obj.capAdd) > 0',
  "anyOutside(r.obj.hostPaths, '/srv/portcullis/' + r.dom)",
  "anyOutside(r.obj.linkFollowingHostPaths, '')",
  "r.obj.namespaces.network == 'host'",
  'isRoot(r.obj.user)',
]

function generated (n: number, pick: <T>(xs: readonly T[]) => T): string {
  const out: string[] = []
  for (let i = 0; i < n; i++) {
    const sub = i % 3 === 0 ? pick(ROLES) : i % 11 === 0 ? '*' : `user:u${i % SUBJECTS}`
    const dom = i % 5 === 0 ? '*' : `team-${i % TENANTS}`
    const eft = i % 2 === 0 ? 'allow' : 'deny'
    out.push(`p, ${sub}, ${dom}, ${pick(OPS)}, ${pick(KINDS)}, ${eft}, gen-${i}, "${pick(CONDITIONS)}"`)
  }
  for (let i = 0; i < SUBJECTS; i += 4) out.push(`g, user:u${i}, ${pick(ROLES.slice(0, 3))}, team-${i % TENANTS}`)
  return out.join('\n') + '\n'
}

t.test('200 random requests on the shipped policy plus 1,000 generated lines: the same decisions as Casbin', async (t) => {
  const rnd = random(21)
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pcx-differential-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  fs.cpSync(path.join(REPO, 'policies'), dir, { recursive: true })
  fs.appendFileSync(path.join(dir, 'base.csv'), generated(1000, pick))
  const policy = await loadPolicy(dir)
  const oracle = await newEnforcer(newModel(fs.readFileSync(path.join(dir, 'model.conf'), 'utf8')), new StringAdapter(fs.readFileSync(path.join(dir, 'base.csv'), 'utf8')))
  await oracle.addNamedDomainMatchingFunc('g', Util.keyMatchFunc)
  for (const [name, fn] of Object.entries(conditionFunctions)) await oracle.addFunction(name, fn)

  const bodies: unknown[] = [
    { Image: 'x' },
    { Image: 'x', User: 'root', HostConfig: { Privileged: true, Memory: 1 << 30 } },
    { Image: 'x', HostConfig: { Binds: ['/tmp:/t', '/srv/portcullis/team-1/a:/a'], CapAdd: ['NET_ADMIN'], NetworkMode: 'host' } },
    { Image: 'x', HostConfig: { Binds: ['/srv/portcullis/team-2/b:/b'], Memory: 1 << 20 } },
    { Cmd: ['id'], User: '0' },
  ]
  const json = operations.filter((o) => o.body === 'json')
  let compared = 0
  let mismatches = 0
  const seen = { allow: 0, deny: 0, rules: new Set<string>() }
  for (let i = 0; i < 200; i++) {
    const roles = ROLES.filter(() => rnd() < 0.3)
    const tenant = rnd() < 0.8 ? `team-${Math.floor(rnd() * TENANTS)}` : null
    const who: Principal = { subject: `u${Math.floor(rnd() * (SUBJECTS + 5))}`, tenant, roles }
    const op = rnd() < 0.6 ? pick(json) : pick(operations)
    const body = op.body === 'json' ? pick(bodies) : undefined
    const dom = tenant ?? ''
    const evaluation = await policy.evaluate(who, { op: op.id, kind: op.kind, resource: '', query: new URLSearchParams(), body })
    const subs = new Set([`user:${who.subject}`, ...who.roles])
    for (const s of [...subs]) for (const r of await oracle.getImplicitRolesForUser(s, dom)) subs.add(r)
    const [ok, rule] = await oracle.enforceEx([...subs], dom, op.id, op.kind, evaluation.input)
    const d = evaluation.decision
    compared++
    seen[ok ? 'allow' : 'deny']++
    if (d.rule) seen.rules.add(d.rule.rule)
    // A deny names the first denying line in file order, as Casbin's explanation does.
    if (ok !== (d.decision !== 'deny') || (!ok && (rule[5] ?? null) !== (d.rule?.rule ?? null))) {
      mismatches++
      t.fail(`${op.id} as ${JSON.stringify(who)} with ${JSON.stringify(body)}: gateway ${d.decision}/${d.rule?.rule ?? '-'}, casbin ${String(ok)}/${rule[5] ?? '-'}`)
    }
  }
  t.equal(mismatches, 0, `${compared} random decisions compared with Casbin`)
  t.ok(seen.allow > 20 && seen.deny > 20 && [...seen.rules].some((r) => r.startsWith('gen-')), `allowed ${seen.allow}, denied ${seen.deny}, by ${seen.rules.size} rules (generated ones among them)`)
})
