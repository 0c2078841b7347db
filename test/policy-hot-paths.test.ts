/**
 * What issue 21's policy speed-ups must keep exact: the mount table behind the
 * `linkFollowingHostPaths` fact is judged from the table as it is now (a parsed copy
 * is reused only for the same text), and the rewrites, which now change their own
 * copies in place within a rule, never touch the body they were given.
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { followsLinks } from '../src/policy/fields'
import { loadPolicy, type EvaluationRequest, type Policy, type Principal } from '../src/policy/engine'
import { applyRewrites, compileRewrites } from '../src/policy/rewrite'

const REPO = path.resolve(__dirname, '..', '..')

function line (id: number, point: string, options: string): string {
  return `${id} 1 8:1 / ${point} ${options} shared:1 - ext4 /dev/sda1 rw`
}

t.test('followsLinks reads the mount table anew: a changed table changes the answer', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pcx-mounts-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  const file = path.join(dir, 'mountinfo')
  const guarded = [line(1, '/', 'rw,relatime'), line(2, '/srv/binds', 'rw,nosymfollow')].join('\n') + '\n'
  const open = [line(1, '/', 'rw,relatime'), line(2, '/srv/binds', 'rw,relatime')].join('\n') + '\n'
  fs.writeFileSync(file, guarded)
  t.equal(followsLinks('/srv/binds/team-a/data', file), false, 'nosymfollow mount: links are not followed')
  t.equal(followsLinks('/srv/other', file), true, 'outside it they are')
  fs.writeFileSync(file, open)
  t.equal(followsLinks('/srv/binds/team-a/data', file), true, 'the same path once the option is gone')
  // A mount stacked on top (listed later, same point) decides.
  fs.writeFileSync(file, open + line(3, '/srv/binds', 'rw,nosymfollow') + '\n')
  t.equal(followsLinks('/srv/binds/team-a/data', file), false, 'a later mount on the same point decides')
  // Escaped mount points (\040 for a space) are decoded.
  fs.writeFileSync(file, [line(1, '/', 'rw'), line(2, '/srv/my\\040binds', 'rw,nosymfollow')].join('\n') + '\n')
  t.equal(followsLinks('/srv/my binds/x', file), false, 'decoded mount point')
  fs.rmSync(file)
  t.equal(followsLinks('/srv/my binds/x', file), true, 'an unreadable table proves nothing')
})

function deepFreeze<T> (v: T): T {
  if (v !== null && typeof v === 'object') {
    for (const x of Object.values(v)) deepFreeze(x)
    Object.freeze(v)
  }
  return v
}

t.test('rewrites apply every step and never change the body they were given', async (t) => {
  const problems: string[] = []
  const rules = compileRewrites(path.join(REPO, 'policies', 'rewrites.yaml'), 'rewrites.yaml', problems)
  t.same(problems, [])
  const given = { Image: 'alpine', HostConfig: { Binds: ['/srv/x:/x'], SecurityOpt: ['label=disable'], Memory: 0 } }
  const body = deepFreeze(structuredClone(given))
  const who = { subject: 'alice', tenant: 'team-a' }
  const first = applyRewrites(rules, 'ContainerCreate', ['user:alice', 'tenant'], who, body)
  t.same(body, given, 'the given body is unchanged (frozen: a write would have thrown)')
  const hc = (first.body as { HostConfig: Record<string, unknown> }).HostConfig
  t.same(hc.SecurityOpt, ['label=disable', 'no-new-privileges'], 'append')
  t.equal(hc.Memory, 1073741824, 'a zero value is defaulted')
  t.equal(hc.PidsLimit, 1024)
  t.same(hc.LogConfig, { Type: 'json-file', Config: { 'max-size': '10m', 'max-file': '3' } }, 'a defaulted object, then its field')
  t.same(hc.Binds, ['/srv/x:/x'], 'other fields kept')
  const patch = first.applied.find((a) => a.id === 'tenant-safe-defaults')?.patch ?? []
  t.same(patch.map((p) => p.path), ['/HostConfig/Memory', '/HostConfig/PidsLimit', '/HostConfig/CgroupnsMode', '/HostConfig/ShmSize', '/HostConfig/LogConfig', '/HostConfig/SecurityOpt'], 'one patch per step that changed something')
  const again = applyRewrites(rules, 'ContainerCreate', ['user:alice', 'tenant'], who, body)
  t.same(again, first, 'the same answer for the same body')
  t.not(again.body, first.body, 'a new body each time')
  // A later rule's steps start from the earlier rule's result, which that rule's own
  // copies became: the first result must not change when the second call rewrites.
  const snapshot = structuredClone(first.body)
  applyRewrites(rules, 'ContainerCreate', ['user:alice', 'tenant'], who, first.body)
  t.same(first.body, snapshot, 'a body the rewrites returned is not changed by rewriting it again')
})

t.test('body-less decisions are kept per identity, operation, target and query, and only while their policy is in force', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pcx-bodyless-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  fs.cpSync(path.join(REPO, 'policies'), dir, { recursive: true })
  const alice = { subject: 'alice', tenant: 'team-a', roles: ['tenant'] }
  const build = (query: string): EvaluationRequest => ({ op: 'ImageBuild', kind: 'build', resource: '', query: new URLSearchParams(query), body: undefined })
  const inspect = (id: string): EvaluationRequest => ({ op: 'ContainerInspect', kind: 'container', resource: id, query: new URLSearchParams(), body: undefined })
  const decided = async (p: Policy, who: Principal, r: EvaluationRequest): Promise<string> => {
    const e = await p.evaluate(who, r)
    return `${e.decision.decision}:${e.decision.rule?.rule ?? '-'}`
  }
  const before = await loadPolicy(dir)
  for (let i = 0; i < 2; i++) {
    t.equal(await decided(before, alice, build('t=x')), 'allow:tenant-build', `a plain build is allowed (${i ? 'again' : 'first'})`)
    t.equal(await decided(before, alice, build('t=x&networkmode=host')), 'deny:build-network', 'the query decides: not the cached answer of the plain build')
    t.equal(await decided(before, { ...alice, roles: ['readonly'] }, build('t=x')), 'deny:-', 'another role: its own decision, not alice\'s')
    t.equal(await decided(before, alice, inspect('abc')), 'allow:tenant-containers', 'another operation')
  }
  fs.appendFileSync(path.join(dir, 'base.csv'), 'p, user:alice, *, ContainerInspect, *, deny, alice-no-inspect, true\n')
  const after = await loadPolicy(dir)
  t.equal(await decided(after, alice, inspect('abc')), 'deny:alice-no-inspect', 'a reloaded policy decides anew')
  t.equal(await decided(after, { ...alice, subject: 'bob' }, inspect('abc')), 'allow:tenant-containers', 'and per subject')
  t.equal(await decided(before, alice, inspect('abc')), 'allow:tenant-containers', 'the old policy keeps its own answers')
})

/** Reads of this process's mount table (through a kept descriptor or as a file) while `f` runs. */
async function mountTableReads<T> (f: () => Promise<T>): Promise<{ value: T, reads: number }> {
  const isTable = (target: string): boolean => /^\/proc\/(self|\d+|thread-self)\/mountinfo$/.test(target)
  const readSync = fs.readSync
  const readFileSync = fs.readFileSync
  let reads = 0
  fs.readSync = ((fd: number, ...rest: unknown[]) => {
    let target = ''
    try { target = fs.readlinkSync(`/proc/self/fd/${fd}`) } catch { /* not ours to judge */ }
    if (isTable(target)) reads++
    return (readSync as (...a: unknown[]) => number)(fd, ...rest)
  }) as typeof fs.readSync
  fs.readFileSync = ((p: fs.PathOrFileDescriptor, ...rest: unknown[]) => {
    if (typeof p === 'string' && isTable(p)) reads++
    return (readFileSync as (...a: unknown[]) => unknown)(p, ...rest)
  }) as typeof fs.readFileSync
  try {
    return { value: await f(), reads }
  } finally {
    fs.readSync = readSync
    fs.readFileSync = readFileSync
  }
}

t.test('the mount table is read for linkFollowingHostPaths only when something reads that fact, once, and the fact is what it was', async (t) => {
  const policy = await loadPolicy(path.join(REPO, 'policies'))
  const alice = { subject: 'alice', tenant: 'team-a', roles: ['tenant'] }
  const create = (...binds: string[]): EvaluationRequest => ({ op: 'ContainerCreate', kind: 'container', resource: '', query: new URLSearchParams(), body: { Image: 'alpine', HostConfig: { Binds: binds } } })
  const expected = (paths: string[]): string[] => paths.filter((p) => followsLinks(p))

  // Denied by host-binds (an earlier line): the rule that reads the fact is never reached.
  const outside = await mountTableReads(async () => await policy.evaluate(alice, create('/tmp:/data')))
  t.equal(`${outside.value.decision.decision}:${outside.value.decision.rule?.rule}`, 'deny:host-binds')
  t.equal(outside.reads, 0, 'no rule read linkFollowingHostPaths: the table was not read')
  const first = await mountTableReads(async () => outside.value.input.linkFollowingHostPaths)
  t.equal(first.reads, 1, 'read when the fact is read')
  t.same(first.value, expected(['/tmp']), 'the fact as the table says')
  const again = await mountTableReads(async () => [outside.value.input.linkFollowingHostPaths, JSON.parse(JSON.stringify(outside.value.input)).linkFollowingHostPaths])
  t.equal(again.reads, 0, 'kept for the rest of the judgement')
  t.same(again.value, [first.value, first.value], 'the same value, also when the facts are serialized')
  t.same(Object.keys(outside.value.input).filter((k) => /ostPaths$/.test(k)), ['hostPaths', 'unresolvedHostPaths', 'linkFollowingHostPaths'], 'an ordinary enumerable fact')

  // An admin's create: no rule of the admin's reads it.
  const admin = await mountTableReads(async () => await policy.evaluate({ subject: 'root', tenant: null, roles: ['admin'] }, create('/tmp:/data', '/srv/x:/x')))
  t.equal(admin.value.decision.decision, 'allow')
  t.equal(admin.reads, 0, 'admin: not read')

  // Inside the tenant's directory: host-binds passes, host-binds-symfollow reads the fact.
  const inside = await mountTableReads(async () => await policy.evaluate(alice, create('/srv/portcullis/team-a/one:/one', '/srv/portcullis/team-a/two:/two')))
  t.equal(inside.reads, 1, 'read once for both paths of the judgement')
  const follows = expected(['/srv/portcullis/team-a/one', '/srv/portcullis/team-a/two'])
  t.same(inside.value.input.linkFollowingHostPaths, follows)
  t.equal(`${inside.value.decision.decision}:${inside.value.decision.rule?.rule ?? '-'}`, follows.length ? 'deny:host-binds-symfollow' : 'allow:tenant-containers', 'decided on the table as it is')

  // Written over (as a caller may): the written value is the fact.
  outside.value.input.linkFollowingHostPaths = ['/elsewhere']
  t.same(outside.value.input.linkFollowingHostPaths, ['/elsewhere'])
})
