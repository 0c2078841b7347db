// A reload cannot weaken the policy unnoticed (issue 19, item 3): a new policy, from the
// files or from the policy database, must compile (conditions type-checked) and pass the
// directory's fixtures before it replaces the running one; every reload logs the lines
// it added and removed.
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import pino from 'pino'
import t from 'tap'
import { PolicyDatabase } from '../src/policy/database'
import { PolicyStore, type StoreOptions } from '../src/policy/store'
import { startPostgres } from './helpers/postgres'

const shipped = path.resolve(__dirname, '../../policies')

interface Reloaded { ok: boolean, problems?: readonly string[] }
interface LogLine { level: number, msg: string, problems?: string[], added?: string[], removed?: string[], linesAdded?: number, linesRemoved?: number }

function copyPolicy (): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pcr-'))
  fs.cpSync(shipped, dir, { recursive: true })
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  return dir
}

async function open (dir: string, options: StoreOptions = {}, database?: { url: string, where: string, channel: string }): Promise<{ store: PolicyStore, logged: LogLine[] }> {
  const logged: LogLine[] = []
  const log = pino({ level: 'info' }, { write: (line: string) => { logged.push(JSON.parse(line) as LogLine) } })
  const store = await PolicyStore.open(dir, log, database, options)
  t.teardown(() => store.close())
  return { store, logged }
}

const bob = { subject: 'bob', tenant: 'team-a', roles: ['tenant'] }
const privileged = { op: 'ContainerCreate', kind: 'container', resource: '', query: new URLSearchParams(), body: { Image: 'busybox', HostConfig: { Privileged: true } } }

function edit (dir: string, from: string, to: string): void {
  const file = path.join(dir, 'base.csv')
  const text = fs.readFileSync(file, 'utf8')
  if (!text.includes(from)) throw new Error(`base.csv has no ${from}`)
  fs.writeFileSync(file, text.replace(from, to))
}

t.test('a reload with a misspelt fact keeps the running policy and names file:line', async (t) => {
  const dir = copyPolicy()
  const { store, logged } = await open(dir)
  const before = store.current.version
  edit(dir, 'deny, no-privileged, r.obj.privileged', 'deny, no-privileged, r.obj.privilegd')
  const r = await store.reload()
  t.notOk(r.ok, 'refused')
  t.equal(store.current.version, before, 'the running policy is kept')
  const d = await store.current.evaluate(bob, privileged)
  t.same([d.decision.decision, d.decision.rule?.rule], ['deny', 'no-privileged'], "a tenant's privileged create is still refused")
  const line = logged.find((l) => l.level === 50)
  t.match(line?.msg, /keeping the running policy/, 'logged as an error')
  t.match(line?.problems?.join('\n'), /base\.csv:\d+: r\.obj\.privilegd: no such fact; did you mean privileged\?/, 'the log names the file, the line, the name and the closest fact')
  const lineNo = Number(/base\.csv:(\d+):/.exec(line?.problems?.join('\n') ?? '')?.[1])
  t.match(fs.readFileSync(path.join(dir, 'base.csv'), 'utf8').split('\n')[lineNo - 1], /no-privileged, r\.obj\.privilegd/, 'the line number is the file\'s')
})

t.test('a reload that drops a deny line a fixture covers is kept out', async (t) => {
  const dir = copyPolicy()
  const { store, logged } = await open(dir)
  const before = store.current.version
  edit(dir, 'p, tenant, *, ContainerCreate*, *, deny, no-privileged, r.obj.privileged\n', '')
  const r = await store.reload()
  t.notOk(r.ok, 'refused')
  t.equal(store.current.version, before, 'the running policy is kept')
  t.equal((await store.current.evaluate(bob, privileged)).decision.decision, 'deny', 'privileged still refused')
  const line = logged.find((l) => l.level === 50)
  t.match(line?.msg, /fixtures? fail against the new policy; keeping the running policy/)
  t.match(line?.problems?.join('\n'), /fixture body-rules\.yaml\[0\] privileged: decision allow, expected deny; rule tenant-containers, expected no-privileged/, 'the log names the failed fixture and why')

  // The switch: with reloadTests off the same edit is taken (and its removal logged).
  fs.writeFileSync(path.join(dir, 'base.csv'), fs.readFileSync(path.join(shipped, 'base.csv')))
  const off = await open(dir, { reloadTests: false })
  const offStore = off.store
  const shippedVersion = offStore.current.version
  edit(dir, 'p, tenant, *, ContainerCreate*, *, deny, no-privileged, r.obj.privileged\n', '')
  t.ok((await offStore.reload()).ok, 'reloadTests: false takes it')
  t.not(offStore.current.version, shippedVersion)
  const info = off.logged.find((l) => l.msg === 'policy reloaded')
  t.same(info?.removed, ['p, tenant, *, ContainerCreate*, *, deny, no-privileged, r.obj.privileged'], 'and logs the line it removed')
})

t.test('a good reload logs the lines added and removed', async (t) => {
  const dir = copyPolicy()
  const { store, logged } = await open(dir)
  edit(dir, 'r.obj.cpuShares > 1024', 'r.obj.cpuShares > 512')
  const r = await store.reload()
  t.ok(r.ok, r.problems?.join('; ') ?? 'reloaded')
  const info = logged.find((l) => l.msg === 'policy reloaded')
  t.match(info, {
    level: 30,
    linesAdded: 1,
    linesRemoved: 1,
    added: ['p, tenant, *, *, *, deny, cpu-shares, r.obj.cpuShares > 512'],
    removed: ['p, tenant, *, *, *, deny, cpu-shares, r.obj.cpuShares > 1024'],
  })
})

t.test('the policy database watcher: a typo or a weakening change made elsewhere is kept out', async (t) => {
  const pg = await startPostgres()
  t.teardown(() => pg.stop())
  process.env.PGPASSWORD = pg.password
  const settings = { url: pg.url, where: 'test', channel: 'pcx_reload_test' }
  const dir = copyPolicy()
  const { store, logged } = await open(dir, {}, settings)
  const started = store.current.version
  // Another writer (an older replica, or SQL by hand) changes the table and notifies.
  const other = await PolicyDatabase.open(settings, fs.readFileSync(path.join(dir, 'model.conf'), 'utf8'), pino({ level: 'silent' }))
  t.teardown(() => other.close())
  await other.watch(() => {})
  const line = (await other.read()).find((l) => l[0] === 'p' && l[6] === 'no-privileged')!
  t.ok(line, 'the seeded table holds no-privileged')

  const reloaded = async (change: () => Promise<void>): Promise<Reloaded> => {
    const done = new Promise<Reloaded>((resolve) => { store.onReload = resolve })
    await change()
    await other.notify()
    let timer: NodeJS.Timeout | undefined
    const r = await Promise.race([done, new Promise<Reloaded>((resolve) => { timer = setTimeout(() => resolve({ ok: true, problems: ['no reload within 10 s'] }), 10_000) })])
    clearTimeout(timer)
    return r
  }

  const typo = [...line.slice(0, 7), 'r.obj.privilegd']
  const r1 = await reloaded(() => other.transaction(async (tx) => { await tx.remove([line]); await tx.add([typo]) }))
  t.notOk(r1.ok, 'a typo from the database is refused')
  t.match(r1.problems?.join('\n'), /r\.obj\.privilegd: no such fact; did you mean privileged\? \(rule no-privileged\)/)
  t.equal(store.current.version, started, 'the running policy is kept')
  t.equal((await store.current.evaluate(bob, privileged)).decision.decision, 'deny', 'privileged still refused')

  const r2 = await reloaded(() => other.transaction(async (tx) => { await tx.remove([typo]) }))
  t.notOk(r2.ok, 'a database without no-privileged is refused')
  t.match(r2.problems?.join('\n'), /fixture body-rules\.yaml\[0\] privileged: decision allow/)
  t.equal(store.current.version, started, 'the running policy is kept')
  t.ok(logged.some((l) => l.level === 50 && /fixtures? fail against the new policy/.test(l.msg)), 'logged')

  const r3 = await reloaded(() => other.transaction(async (tx) => { await tx.add([line]) }))
  t.ok(r3.ok, 'the line back: accepted')

  // A change through the admin API (PolicyStore.change) is refused before it is written.
  await t.rejects(store.change('remove', [line]), /fixture body-rules\.yaml\[0\] privileged: decision allow/)
  t.ok((await other.read()).some((l) => JSON.stringify(l) === JSON.stringify(line)), 'nothing was written')
})
