// The shipped policy against its fixtures, and what happens to policies that are wrong.
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import pino from 'pino'
import t from 'tap'
import { newEnforcer, newModel, StringAdapter, Util } from 'casbin'
import { operations } from '../src/api/catalog/operations'
import { loadPolicy, PolicyError, type Principal } from '../src/policy/engine'
import { conditionFunctions } from '../src/policy/functions'
import { PolicyStore } from '../src/policy/store'
import { runFixtures } from '../src/policy/tool'

const shipped = path.resolve(__dirname, '../../policies')

/** A copy of the shipped policy directory that a test may break. */
function copyPolicy (): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pcp-'))
  fs.cpSync(shipped, dir, { recursive: true })
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  return dir
}

t.test('the shipped policy passes its fixtures', async (t) => {
  const { lines, passed, failed } = await runFixtures(shipped)
  t.equal(failed, 0, lines.filter((l) => l.startsWith('FAIL')).join('\n') || 'no failures')
  t.ok(passed >= 50, `${passed} fixtures`)
})

t.test('a fixture that does not hold is reported', async (t) => {
  const dir = copyPolicy()
  fs.writeFileSync(path.join(dir, 'tests', 'wrong.yaml'), `- name: tenant may push (it may not)
  as: { subject: bob, tenant: a, roles: [tenant] }
  request: POST /v1.41/images/x/push
  expect: allow
`)
  const { lines, failed } = await runFixtures(dir)
  t.equal(failed, 1)
  t.match(lines.join('\n'), /FAIL wrong\.yaml\[0\] tenant may push \(it may not\): decision deny, expected allow/)
  t.match(lines.join('\n'), /denied: no allow rule in base\.csv applies to ImagePush for roles tenant/, 'it says that nothing allowed it, in which file, for which roles')
})

t.test('a failing fixture names the rules that decided and the facts', async (t) => {
  const dir = copyPolicy()
  fs.writeFileSync(path.join(dir, 'tests', 'wrong.yaml'), `- name: privileged with a host bind (expected, wrongly, to pass)
  as: { subject: bob, tenant: team-a, roles: [tenant] }
  request: POST /v1.41/containers/create
  body: { Image: busybox, Env: ["TOKEN=s3cret-value"], HostConfig: { Privileged: true, Binds: ["/etc:/x"] } }
  expect: allow
- name: the wrong rule expected
  as: { subject: bob, tenant: team-a, roles: [tenant] }
  request: POST /v1.41/containers/create
  body: { Image: busybox, HostConfig: { CapAdd: [SYS_ADMIN] } }
  expect: deny
  rule: no-privileged
`)
  const { lines, failed } = await runFixtures(dir)
  t.equal(failed, 2)
  const text = lines.join('\n')
  const first = text.slice(text.indexOf('FAIL wrong.yaml[0]'), text.indexOf('FAIL wrong.yaml[1]'))
  t.match(first, /decision deny, expected allow/)
  t.match(first, /denied by no-privileged \(base\.csv\): matched privileged true \(HostConfig\.Privileged, --privileged\)/, 'the first denying rule, with the field and value')
  t.match(first, /denied by host-binds \(base\.csv\): matched hostPaths \/etc \(HostConfig\.Binds\/Mounts, -v\/--mount\); allowed: hostPaths under \/srv\/portcullis\/team-a/, 'and the second, with what is allowed')
  t.match(first, /allowed by tenant-containers \(base\.csv\)/, 'and the allowing rule')
  t.match(first, /facts: privileged=true, hostPaths=\[\/etc\]/, 'and the facts')
  t.notMatch(text, /s3cret-value/, 'never an environment value')
  const second = text.slice(text.indexOf('FAIL wrong.yaml[1]'))
  t.match(second, /rule capabilities, expected no-privileged/)
  t.match(second, /denied by capabilities \(base\.csv\): matched capAdd SYS_ADMIN/)
})

t.test('denials explain themselves from the condition and the facts', async (t) => {
  const policy = await loadPolicy(shipped)
  const who = { subject: 'bob', tenant: 'team-a', roles: ['tenant'] }
  const reasons = async (op: string, kind: string, body: unknown, query = ''): Promise<Record<string, string>> => {
    const ev = await policy.evaluate(who, { op, kind, resource: '', query: new URLSearchParams(query), body })
    const layers = await policy.trace(who, op, kind, ev.input)
    return Object.fromEntries(layers.flatMap((l) => l.deniedBy).map((m) => [m.rule, `${m.reason?.matched.join(', ')}; ${m.reason?.allowed.join(', ')}`]))
  }
  const create = await reasons('ContainerCreate', 'container', {
    Image: 'x',
    Env: ['PASSWORD=hunter2'],
    HostConfig: { Binds: ['/:/host', '/srv/portcullis/team-a/ok:/ok'], CapAdd: ['NET_ADMIN', 'CHOWN'], PidMode: 'host', IpcMode: 'container:abc', Sysctls: { 'net.ipv4.ip_forward': '1' }, CgroupParent: '/x', VolumesFrom: ['other'], Runtime: 'kata', PidsLimit: -1, DeviceRequests: [{ Driver: 'nvidia' }], SecurityOpt: ['apparmor:unconfined'] },
  })
  t.same(create, {
    'host-binds': 'hostPaths / (HostConfig.Binds/Mounts, -v/--mount); hostPaths under /srv/portcullis/team-a',
    'host-binds-symfollow': 'linkFollowingHostPaths /, /srv/portcullis/team-a/ok (HostConfig.Binds/Mounts, -v/--mount); linkFollowingHostPaths: none',
    capabilities: 'capAdd NET_ADMIN (HostConfig.CapAdd, --cap-add); capAdd only AUDIT_WRITE, CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL, MKNOD, NET_BIND_SERVICE, NET_RAW, SETFCAP, SETGID, SETPCAP, SETUID, SYS_CHROOT',
    'no-device-requests': 'deviceRequests nvidia (HostConfig.DeviceRequests, --gpus); deviceRequests: none',
    'no-host-namespaces': 'namespaces.pid host (HostConfig.PidMode, --pid), namespaces.ipc container:abc (HostConfig.IpcMode, --ipc); namespaces.pid private (not host, container:<id>, ns:<path> or another engine-specific mode), namespaces.ipc private (not host, container:<id>, ns:<path> or another engine-specific mode)',
    'security-options': 'securityOpt apparmor=unconfined (HostConfig.SecurityOpt, --security-opt); securityOpt only no-new-privileges=true',
    'no-sysctls': 'sysctls net.ipv4.ip_forward (HostConfig.Sysctls, --sysctl); sysctls: none',
    runtime: 'runtime kata (HostConfig.Runtime, --runtime); runtime unset or runc',
    'no-cgroup-parent': 'cgroupParent /x (HostConfig.CgroupParent, --cgroup-parent); cgroupParent unset',
    'no-volumes-from': 'volumesFrom other (HostConfig.VolumesFrom, --volumes-from); volumesFrom: none',
    'pids-limit': 'pidsLimit -1 (HostConfig.PidsLimit, --pids-limit); pidsLimit >= 0',
  }, 'every denying rule: the values that matched (only those), their field and flag, what is allowed')
  t.notMatch(JSON.stringify(create), /hunter2/, 'no environment value')
  t.same(await reasons('ContainerExec', 'exec', { Cmd: ['id'], User: '1000:0', Privileged: true }), {
    'no-privileged-exec': 'privileged true (Privileged, --privileged); privileged false or unset',
  }, 'root is not the policy\'s to refuse: tenancy.yaml users (test/tenant-users)')
  t.same(await reasons('ImageBuild', 'build', undefined, 'networkmode=host'), {
    'build-network': 'buildNetwork host (networkmode, docker build --network); buildNetwork unset, default, bridge or none',
  })
  t.same(await reasons('PortcullisPolicyList', 'policy', undefined), { 'policy-admin-only': 'roles tenant; role admin' })

  // A rule over the body as sent names the field, never its value; an unknown shape is quoted.
  const dir = copyPolicy()
  fs.appendFileSync(path.join(dir, 'base.csv'), [
    'p, tenant, *, ContainerPrune, *, deny, no-container-prune, true',
    'p, tenant, *, ContainerCreate, *, deny, no-secret-env, "anyStartsWith(r.obj.body.Env, \'AWS_SECRET\')"',
    'p, tenant, *, ContainerCreate, *, deny, odd-shape, "r.obj.memory * 2 > 100"',
    'p, tenant, *, ContainerExec*, *, deny, no-root-exec, isRoot(r.obj.user)',
  ].join('\n') + '\n')
  const custom = await loadPolicy(dir)
  // An operator's own root rule (isRoot) explains itself too.
  const exec = await custom.evaluate(who, { op: 'ContainerExec', kind: 'exec', resource: '', query: new URLSearchParams(), body: { Cmd: ['id'], User: '1000:0' } })
  const rootWhy = Object.fromEntries((await custom.trace(who, 'ContainerExec', 'exec', exec.input)).flatMap((l) => l.deniedBy).map((m) => [m.rule, m.reason]))
  t.same(rootWhy['no-root-exec'], { matched: ['user 1000:0 (User, --user)'], allowed: ['user with neither user nor group root (0), e.g. 1000:1000'] })
  const ev = await custom.evaluate(who, { op: 'ContainerCreate', kind: 'container', resource: '', query: new URLSearchParams(), body: { Image: 'x', Env: ['AWS_SECRET_KEY=pcp-hidden'], HostConfig: { Memory: 1 << 20 } } })
  const why = Object.fromEntries((await custom.trace(who, 'ContainerCreate', 'container', ev.input)).flatMap((l) => l.deniedBy).map((m) => [m.rule, m.reason]))
  t.same(why['no-secret-env'], { matched: ['body.Env (value not shown)'], allowed: ['body.Env not starting with AWS_SECRET'] }, 'the body field is named, its value is not')
  t.same(why['odd-shape'], { matched: ['the condition r.obj.memory * 2 > 100'], allowed: [] }, 'a condition of another shape is quoted as written')
  const prune = await custom.evaluate(who, { op: 'ContainerPrune', kind: 'container', resource: '', query: new URLSearchParams(), body: undefined })
  const unconditional = Object.fromEntries((await custom.trace(who, 'ContainerPrune', 'container', prune.input)).flatMap((l) => l.deniedBy).map((m) => [m.rule, m.reason]))
  t.same(unconditional['no-container-prune'], { matched: [], allowed: [] }, 'a rule without a condition has nothing to explain')
  t.notMatch(JSON.stringify(why), /pcp-hidden/)
})

t.test('an enforce-mode file without an allow rule is a warning: it denies everything', async (t) => {
  const dir = copyPolicy()
  t.same((await loadPolicy(dir)).warnings, [], 'the shipped policy: no warning')
  fs.writeFileSync(path.join(dir, 'extra.csv'), 'p, tenant, *, ContainerCreate, *, deny, no-big-memory, "r.obj.memory > 268435456"\n')
  fs.writeFileSync(path.join(dir, 'policy.yaml'), 'model: model.conf\npolicies:\n  - { file: base.csv, mode: enforce }\n  - { file: extra.csv, mode: enforce }\nrewrites: rewrites.yaml\n')
  const policy = await loadPolicy(dir)
  t.equal(policy.warnings.length, 1)
  t.match(policy.warnings[0], /^extra\.csv has no allow rule, so it denies every request: each enforce-mode file is a layer that must itself allow a request\. Add an allow line to it \(`p, \*, \*, \*, \*, allow, extra-rest, true`/)
  const who = { subject: 'bob', tenant: 'team-a', roles: ['tenant'] }
  const ps = await policy.evaluate(who, { op: 'ContainerList', kind: 'container', resource: '', query: new URLSearchParams(), body: undefined })
  t.same([ps.decision.decision, ps.decision.rule], ['deny', null], 'indeed: docker ps is denied')
  const trace = await policy.trace(who, 'ContainerList', 'container', ps.input)
  const { denialReason } = await import('../src/policy/authorize')
  t.equal(denialReason(trace.filter((l) => l.mode === 'enforce'), null, 'ContainerList'),
    'no allow rule in extra.csv applies to ContainerList for roles tenant (each enforce-mode file is a layer that must itself allow a request; base.csv allowed it)', 'and the denial says which layer and why')

  // With the suggested line the layer only adds its denial.
  fs.appendFileSync(path.join(dir, 'extra.csv'), 'p, *, *, *, *, allow, extra-rest, true\n')
  const fixed = await loadPolicy(dir)
  t.same(fixed.warnings, [], 'no warning once the layer allows')
  t.equal((await fixed.evaluate(who, { op: 'ContainerList', kind: 'container', resource: '', query: new URLSearchParams(), body: undefined })).decision.decision, 'allow')
  const big = await fixed.evaluate(who, { op: 'ContainerCreate', kind: 'container', resource: '', query: new URLSearchParams(), body: { Image: 'x', HostConfig: { Memory: 1 << 30 } } })
  t.same(big.decision.rule, { policy: 'extra.csv', rule: 'no-big-memory' }, 'its deny line still denies')

  // The start-up log says so too.
  const logged: string[] = []
  const log = pino({ level: 'warn' }, { write: (line: string) => { logged.push(line) } })
  fs.writeFileSync(path.join(dir, 'extra.csv'), 'p, tenant, *, ContainerCreate, *, deny, no-big-memory, "r.obj.memory > 268435456"\n')
  const store = await PolicyStore.open(dir, log)
  t.teardown(() => store.close())
  const line = logged.map((l) => JSON.parse(l) as { level: number, msg: string, file?: string }).find((l) => l.msg.startsWith('extra.csv has no allow rule'))
  t.match(line, { level: 40 }, 'PolicyStore.open logs the warning')
})

t.test('an invalid policy lists every problem and is not used', async (t) => {
  const dir = copyPolicy()
  fs.appendFileSync(path.join(dir, 'base.csv'), [
    'p, tenant, *, ContainerCreat, *, deny, typo-op, true',
    'p, tenant, *, ContainerCreate, *, maybe, bad-effect, true',
    'p, tenant, *, ContainerCreate, *, deny, no-privileged, true',
    'p, tenant, *, ContainerCreate, *, deny, bad-cond, "r.obj.privileged &&"',
    'p, tenant, *, ContainerCreate, *, deny, unknown-fn, "nosuchfn(r.obj.user)"',
  ].join('\n') + '\n')
  const err = await loadPolicy(dir).then(() => null, (e: unknown) => e)
  t.type(err, PolicyError)
  const problems = (err as PolicyError).problems.join('\n')
  t.match(problems, /ContainerCreat" matches no Engine API operation/)
  t.match(problems, /effect must be allow or deny, got "maybe"/)
  t.match(problems, /duplicate rule id no-privileged/)
  t.match(problems, /bad-cond|r\.obj\.privileged &&/)
  t.match(problems, /nosuchfn/)
})

t.test('hot reload swaps a valid policy and keeps the old one when the new one is invalid', async (t) => {
  const dir = copyPolicy()
  // The swap itself: the fixtures would (rightly) refuse the push this test allows (test/policy-reload).
  const store = await PolicyStore.open(dir, pino({ level: 'silent' }), undefined, { reloadTests: false })
  t.teardown(() => store.close())
  const first = store.current.version
  const who = { subject: 'bob', tenant: 'a', roles: ['tenant'] }
  const push = { op: 'ImagePush', kind: 'image', resource: 'x', query: new URLSearchParams(), body: undefined }
  t.equal((await store.current.evaluate(who, push)).decision.decision, 'deny')

  fs.appendFileSync(path.join(dir, 'base.csv'), 'p, tenant, *, ImagePush, image, allow, tenant-push, true\n')
  const ok = await store.reload()
  t.ok(ok.ok)
  t.not(store.current.version, first, 'new version')
  t.equal((await store.current.evaluate(who, push)).decision.decision, 'allow', 'new policy in force')

  const good = store.current.version
  fs.appendFileSync(path.join(dir, 'base.csv'), 'p, tenant, *, Nope, *, allow, nope, true\n')
  const bad = await store.reload()
  t.notOk(bad.ok)
  t.match(bad.problems?.join('\n') ?? '', /Nope/)
  t.equal(store.current.version, good, 'old policy kept')

  // The watcher picks up edits by itself.
  const lines = fs.readFileSync(path.join(dir, 'base.csv'), 'utf8').split('\n').filter((l) => !l.includes('Nope') && !l.includes('tenant-push'))
  const reloaded = new Promise<void>((resolve) => { store.onReload = (r) => { if (r.ok) resolve() } })
  store.watch(50)
  fs.writeFileSync(path.join(dir, 'base.csv'), lines.join('\n'))
  // The watcher does not keep the process alive; this timer does, and bounds the wait.
  let timer: NodeJS.Timeout | undefined
  await Promise.race([reloaded, new Promise((resolve) => { timer = setTimeout(resolve, 5000) })])
  clearTimeout(timer)
  t.equal(store.current.version, first, 'back to the first policy through the watcher')
})

t.test('audit mode records would_deny and allows', async (t) => {
  const dir = copyPolicy()
  fs.writeFileSync(path.join(dir, 'strict.csv'), [
    'p, *, *, *, *, allow, everything, true',
    'p, tenant, *, ContainerCreate, *, deny, strict-memory, "r.obj.memory > 268435456"',
  ].join('\n') + '\n')
  fs.writeFileSync(path.join(dir, 'policy.yaml'), 'model: model.conf\npolicies:\n  - { file: base.csv, mode: enforce }\n  - { file: strict.csv, mode: audit }\nrewrites: rewrites.yaml\n')
  const policy = await loadPolicy(dir)
  const who = { subject: 'bob', tenant: 'a', roles: ['tenant'] }
  const create = (mem: number): Parameters<typeof policy.evaluate>[1] => ({ op: 'ContainerCreate', kind: 'container', resource: '', query: new URLSearchParams(), body: { Image: 'x', HostConfig: { Memory: mem } } })
  const loose = await policy.evaluate(who, create(1 << 30))
  t.equal(loose.decision.decision, 'would_deny')
  t.same(loose.decision.wouldDeny, [{ policy: 'strict.csv', rule: 'strict-memory' }])
  t.equal((await policy.evaluate(who, create(1 << 20))).decision.decision, 'allow')
})

t.test('a missing policy directory is an error', async (t) => {
  const err = await loadPolicy(path.join(os.tmpdir(), 'no-such-policy-dir')).then(() => null, (e: unknown) => e)
  t.type(err, PolicyError)
  t.match((err as PolicyError).problems.join('\n'), /policy\.yaml: ENOENT/)
})

t.test("every decision matches Casbin's own enforcer on the same model and lines", async (t) => {
  const policy = await loadPolicy(shipped)
  const oracle = await newEnforcer(newModel(fs.readFileSync(path.join(shipped, 'model.conf'), 'utf8')), new StringAdapter(fs.readFileSync(path.join(shipped, 'base.csv'), 'utf8')))
  await oracle.addNamedDomainMatchingFunc('g', Util.keyMatchFunc)
  for (const [name, fn] of Object.entries(conditionFunctions)) await oracle.addFunction(name, fn)
  const bodies: unknown[] = [undefined, { Image: 'x' }, { Image: 'x', HostConfig: { Privileged: true } }, { Image: 'x', HostConfig: { Binds: ['/etc:/e'], NetworkMode: 'host' } }, { Cmd: ['id'], User: 'root' }]
  const people: Principal[] = [
    { subject: 'root-op', tenant: null, roles: ['admin'] },
    { subject: 'bob', tenant: 'team-a', roles: ['tenant'] },
    { subject: 'runner', tenant: 'team-b', roles: ['ci'] },
    { subject: 'auditor', tenant: null, roles: ['readonly'] },
    { subject: 'anonymous', tenant: null, roles: ['anonymous'] },
    { subject: 'nobody', tenant: 'team-a', roles: [] },
  ]
  let compared = 0
  let mismatches = 0
  for (const op of operations) {
    for (const who of people) {
      for (const body of op.body === 'json' ? bodies : [undefined]) {
        const dom = who.tenant ?? ''
        const evaluation = await policy.evaluate(who, { op: op.id, kind: op.kind, resource: '', query: new URLSearchParams(), body })
        const subs = new Set([`user:${who.subject}`, ...who.roles])
        for (const s of [...subs]) for (const r of await oracle.getImplicitRolesForUser(s, dom)) subs.add(r)
        const [ok, rule] = await oracle.enforceEx([...subs], dom, op.id, op.kind, evaluation.input)
        const d = evaluation.decision
        const same = ok === (d.decision !== 'deny') && (ok || (rule[5] ?? null) === (d.rule?.rule ?? null))
        compared++
        if (!same) {
          mismatches++
          t.fail(`${op.id} as ${who.subject} with ${JSON.stringify(body)}: gateway ${d.decision}/${d.rule?.rule ?? '-'}, casbin ${String(ok)}/${rule[5] ?? '-'}`)
        }
      }
    }
  }
  t.equal(mismatches, 0, `${compared} decisions compared with Casbin`)
})
