// Issue 19, item 1: the facts are one typed declaration (FactsSchema). Conditions are
// type-checked against it wherever a policy is compiled (here: `policy check` and
// `policy test`); docs/facts.md and `policy facts` are generated from it; `policy test
// --coverage` lists the deny lines no fixture's denial is decided by.
import { execFile } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { loadPolicy, PolicyError } from '../src/policy/engine'

const CLI = path.resolve(__dirname, '../src/cli.js')
const shipped = path.resolve(__dirname, '../../policies')

function run (file: string, args: string[]): Promise<{ code: number, stdout: string, stderr: string }> {
  return new Promise((resolve) => {
    const child = execFile(process.execPath, [file, ...args], { timeout: 60_000 }, (err, stdout, stderr) => {
      resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, stdout, stderr })
    })
    child.stdin?.end()
  })
}

function copyPolicy (): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pcf-'))
  fs.cpSync(shipped, dir, { recursive: true })
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  return dir
}

t.test('docs/facts.md is generated from the declaration and current', async (t) => {
  const r = await run(path.resolve(__dirname, '../scripts/gen-facts-doc.js'), ['--check'])
  t.equal(r.code, 0, r.stderr || 'docs/facts.md is current')
  const doc = fs.readFileSync(path.resolve(__dirname, '../../docs/facts.md'), 'utf8')
  t.match(doc, /\| `r\.obj\.privileged` \| `boolean` \| .* \| HostConfig\.Privileged/)
  t.match(doc, /\| `r\.obj\.namespaces\.pid` \| `string` \|/)
  t.match(doc, /\| `r\.obj\.ulimits` \| `list<ulimit>` \|/)
})

t.test('portcullis policy facts lists every fact with its type and source', async (t) => {
  const text = await run(CLI, ['policy', 'facts'])
  t.equal(text.code, 0)
  t.match(text.stdout, /^r\.obj\.privileged +boolean +A privileged container or exec\. \[from HostConfig\.Privileged/m)
  t.match(text.stdout, /^r\.obj\.sysctls +list<string> /m)
  const json = await run(CLI, ['policy', 'facts', '--json'])
  const facts = JSON.parse(json.stdout) as Array<{ name: string, type: string, source: string }>
  t.match(facts.find((f) => f.name === 'r.obj.tmpfsSizes'), { type: 'list<number>', source: /HostConfig\.Tmpfs/ })
  t.ok(facts.length > 45, `${facts.length} facts`)
})

t.test('a condition that does not type-check is refused, with file:line and the closest names', async (t) => {
  const cases: Array<[string, string, RegExp]> = [
    ['r.obj.privileged', 'r.obj.privilegd', /r\.obj\.privilegd: no such fact; did you mean privileged\?/],
    ['count(r.obj.sysctls) > 0', 'count(r.obj.sysctl) > 0', /r\.obj\.sysctl: no such fact; did you mean sysctls\?/],
    ['count(r.obj.devices) > 0', 'count(r.obj.runtime) > 0', /count: argument 1 \(r\.obj\.runtime\) is a string, expected a list/],
    ['count(r.obj.volumesFrom) > 0', 'r.obj.volumesFrom != \'\'', /r\.obj\.volumesFrom: a list<string> compared with !=/],
    ['"anyOutside(r.obj.hostPaths, \'/srv/portcullis/\' + r.dom)"', '"anyOutside(r.obj.privileged, \'/srv\')"', /anyOutside: argument 1 \(r\.obj\.privileged\) is a boolean, expected a list<string>/],
    ['r.obj.shmSize > 1073741824', 'r.obj.shmSize > \'1g\'', /r\.obj\.shmSize > '1g': compares a number with a string/],
    ['"sharedNamespace(r.obj.namespaces, \'*\')"', '"r.obj.namespaces.pdi == \'host\'"', /r\.obj\.namespaces\.pdi: no such field of namespaces; did you mean pid\?/],
    ['count(r.obj.blkioDevices) > 0', 'cont(r.obj.blkioDevices) > 0', /unknown name cont; did you mean cont → count\?/],
    ['r.obj.oomKillDisable', 'r.obj.ulimits', /r\.obj\.ulimits: a list<ulimit> used as the condition/],
  ]
  for (const [from, to, want] of cases) {
    const dir = copyPolicy()
    const file = path.join(dir, 'base.csv')
    const text = fs.readFileSync(file, 'utf8')
    const at = text.indexOf(`, ${from}\n`)
    t.ok(at > 0, `base.csv has ${from}`)
    fs.writeFileSync(file, text.slice(0, at) + `, ${to}\n` + text.slice(at + from.length + 3))
    const line = text.slice(0, at).split('\n').length
    const err = await loadPolicy(dir).then(() => null, (e: unknown) => e)
    t.type(err, PolicyError, `${to}: refused`)
    t.match((err as PolicyError | null)?.problems.join('\n'), new RegExp(`${file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}:${line}: .*${want.source}`), `${to}: ${want}`)
  }
  // The tools refuse it the same way.
  const dir = copyPolicy()
  const file = path.join(dir, 'base.csv')
  fs.writeFileSync(file, fs.readFileSync(file, 'utf8').replace('deny, no-privileged, r.obj.privileged', 'deny, no-privileged, r.obj.privilegd'))
  for (const args of [['policy', 'test', dir], ['policy', 'check', '--dir', dir, '--subject', 'bob', '--tenant', 'a', '--roles', 'tenant', 'GET', '/_ping']]) {
    const r = await run(CLI, args)
    t.equal(r.code, 1, `${args[1]} fails`)
    t.match(r.stderr, /base\.csv:\d+: r\.obj\.privilegd: no such fact; did you mean privileged\?/, `${args[1]} names the typo`)
  }
})

t.test('policy test --coverage: the deny lines no fixture exercises', async (t) => {
  const ok = await run(CLI, ['policy', 'test', '--coverage', shipped])
  t.equal(ok.code, 0, 'the shipped policy: none')
  t.match(ok.stdout, /every deny line decides some fixture's denial/)
  const dir = copyPolicy()
  fs.appendFileSync(path.join(dir, 'base.csv'), 'p, tenant, *, ContainerCreate, *, deny, no-big-memory, r.obj.memory > 1073741824\n')
  const r = await run(CLI, ['policy', 'test', '--coverage', dir])
  t.equal(r.code, 1, 'a deny line without a fixture fails the run')
  t.match(r.stdout, /deny lines no fixture exercises \(1\):\n {2}no-big-memory\n/)
})
