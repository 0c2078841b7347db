// Issue 19, item 2: every condition of the shipped policy, mistyped the ways a person
// mistypes (a letter dropped, two adjacent letters swapped, a letter doubled, in each
// fact and function name; == and != swapped; a list fact compared as a scalar), must be
// refused when the policy is compiled or caught by the shipped fixtures. A mutant that
// is neither would turn a deny into nothing unseen.
//
// Compiling is the slow part, and loadPolicy reports every problem with its file:line:
// mutants of different lines are compiled together (one per line per round) and each
// counts as refused only if its own line is named. The rest are compiled alone and run
// against the fixtures.
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { loadPolicy, PolicyError } from '../src/policy/engine'
import { FactsSchema } from '../src/policy/fields'
import { runFixturesOn } from '../src/policy/tool'

const shipped = path.resolve(__dirname, '../../policies')
const lines = fs.readFileSync(path.join(shipped, 'base.csv'), 'utf8').split('\n')

function typos (name: string): string[] {
  const out = new Set<string>()
  for (let i = 0; i < name.length; i++) {
    out.add(name.slice(0, i) + name.slice(i + 1))
    out.add(name.slice(0, i) + name[i] + name.slice(i))
    if (i + 1 < name.length) out.add(name.slice(0, i) + name[i + 1] + name[i] + name.slice(i + 2))
  }
  out.delete(name)
  return [...out]
}

const LIST_FACTS = new Set(Object.entries(FactsSchema.properties).filter(([, s]) => s.type === 'array').map(([k]) => k))

/** The mutants of one condition (the text of the CSV line's last field, quotes and all). */
function mutants (cond: string): Array<{ what: string, text: string }> {
  const out: Array<{ what: string, text: string }> = []
  const replaceAt = (at: number, len: number, by: string): string => cond.slice(0, at) + by + cond.slice(at + len)
  for (const m of cond.matchAll(/r\.obj\.(\w+)/g)) {
    const at = m.index + 'r.obj.'.length
    for (const ty of typos(m[1])) out.push({ what: `r.obj.${m[1]} → r.obj.${ty}`, text: replaceAt(at, m[1].length, ty) })
  }
  for (const m of cond.matchAll(/\b([A-Za-z]\w*)\(/g)) {
    for (const ty of typos(m[1])) out.push({ what: `${m[1]}() → ${ty}()`, text: replaceAt(m.index, m[1].length, ty) })
  }
  for (const m of cond.matchAll(/[!=]=/g)) out.push({ what: `${m[0]} → ${m[0] === '==' ? '!=' : '=='}`, text: replaceAt(m.index, 2, m[0] === '==' ? '!=' : '==') })
  // A list fact compared as a scalar: count(list) > 0 → list > 0, anyX(list, 'v') → list != 'v'.
  for (const m of cond.matchAll(/count\(r\.obj\.(\w+)\)/g)) {
    if (LIST_FACTS.has(m[1])) out.push({ what: `count(r.obj.${m[1]}) → r.obj.${m[1]}`, text: replaceAt(m.index, m[0].length, `r.obj.${m[1]}`) })
  }
  for (const m of cond.matchAll(/\b\w+\(r\.obj\.(\w+), ('[^']*')\)/g)) {
    if (LIST_FACTS.has(m[1])) out.push({ what: `${m[0]} → r.obj.${m[1]} != ${m[2]}`, text: replaceAt(m.index, m[0].length, `r.obj.${m[1]} != ${m[2]}`) })
  }
  return out
}

interface Mutant { line: number, rule: string, what: string, text: string }

const all: Mutant[] = []
lines.forEach((l, i) => {
  if (!/^p\s*,/.test(l)) return
  const fields = l.split(',')
  const rule = fields[6].trim()
  const condAt = l.indexOf(',', l.indexOf(rule + ',')) + 1
  const cond = l.slice(condAt)
  if (cond.trim() === 'true') return
  for (const m of mutants(cond)) all.push({ line: i + 1, rule, what: m.what, text: l.slice(0, condAt) + m.text })
})

function policyWith (dir: string, changed: ReadonlyMap<number, string>): void {
  fs.writeFileSync(path.join(dir, 'base.csv'), lines.map((l, i) => changed.get(i + 1) ?? l).join('\n'))
}

t.test('every mutant of every shipped condition is refused or caught', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pcm-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  fs.cpSync(shipped, dir, { recursive: true })
  const byLine = new Map<number, Mutant[]>()
  for (const m of all) byLine.set(m.line, [...(byLine.get(m.line) ?? []), m])
  const conditions = byLine.size
  t.ok(conditions >= 40, `${conditions} conditions mutated`)

  // Rounds: the k-th mutant of every line at once.
  const refused = new Set<Mutant>()
  const rounds = Math.max(...[...byLine.values()].map((ms) => ms.length))
  for (let k = 0; k < rounds; k++) {
    const batch = [...byLine.values()].map((ms) => ms[k]).filter((m): m is Mutant => m !== undefined)
    policyWith(dir, new Map(batch.map((m) => [m.line, m.text])))
    const problems = await loadPolicy(dir).then(() => [] as readonly string[], (e: unknown) => (e instanceof PolicyError ? e.problems : [String(e)]))
    for (const m of batch) if (problems.some((p) => p.startsWith(`${path.join(dir, 'base.csv')}:${m.line}:`))) refused.add(m)
  }

  // The others, alone: refused after all, or caught by a fixture, or they survive.
  let caught = 0
  const survivors: string[] = []
  for (const m of all.filter((x) => !refused.has(x))) {
    policyWith(dir, new Map([[m.line, m.text]]))
    let policy
    try {
      policy = await loadPolicy(dir)
    } catch (err) {
      if (err instanceof PolicyError) { refused.add(m); continue }
      throw err
    }
    const run = await runFixturesOn(policy, path.join(dir, 'tests'))
    if (run.failed) caught++
    else survivors.push(`base.csv:${m.line} (${m.rule}): ${m.what}`)
  }
  t.comment(`mutants: ${all.length}, refused at compile time: ${refused.size}, caught by fixtures: ${caught}, survived: ${survivors.length}`)
  t.ok(all.length > 1000, `${all.length} mutants`)
  t.same(survivors, [], 'no mutant survives')
  t.equal(refused.size + caught, all.length, 'each is refused or caught')
})
