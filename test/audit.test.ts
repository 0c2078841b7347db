/**
 * The audit trail: records and redaction, the hash chain and its seal, every kind of
 * tampering, rotation, restart, write failures, the report, the CLI. No engine needed.
 */
import t, { type Test } from 'tap'
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import pino from 'pino'
import { AuditTrail, AuditWriteError, buildRecord, recordJson, report, verify, type AuditInput } from '../src/audit'
import { chainLine, readSealFile } from '../src/audit/chain'
import { describeConfig, parseConfig, ConfigError, type AuditConfig } from '../src/config'
import { decodeBody } from '../src/api/body/decode'
import { buildInput } from '../src/policy/facts'

type AuditConfigLike = AuditConfig

const CLI = path.join(__dirname, '..', 'src', 'cli.js')

// ---------------------------------------------------------------------------
// helpers

function tmp (t: Test): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pcx-audit-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  return dir
}

interface Captured { logger: pino.Logger, lines: Array<Record<string, unknown>> }
function capture (): Captured {
  const lines: Array<Record<string, unknown>> = []
  const logger = pino({ level: 'info' }, { write (s: string) { lines.push(JSON.parse(s) as Record<string, unknown>) } })
  return { logger, lines }
}
const quiet = (): pino.Logger => pino({ level: 'silent' })

const ALICE = { subject: 'alice', tenant: 'team-a', roles: ['tenant'], method: 'jwt' as const, tokenId: 'tok-1' }
const BOB = { subject: 'bob', tenant: 'team-b', roles: ['tenant'], method: 'mtls' as const, certFingerprint: 'ab'.repeat(32) }

function request (i: number, over: Partial<AuditInput> = {}): AuditInput {
  return {
    event: 'request',
    time: Date.UTC(2026, 10, 22, 10, 0, i),
    req: `req-${i}`,
    listener: 'unix:/run/portcullis/docker.sock',
    client: '127.0.0.1:50000',
    method: 'GET',
    identity: ALICE,
    target: { operation: 'ContainerList', kind: 'container', apiVersion: '1.41' },
    decision: { decision: 'allow', rule: { policy: 'base.csv', rule: 'tenant-read' }, wouldDeny: [], policyVersion: 'abc123' },
    status: 200,
    bytesIn: 0,
    bytesOut: 100 + i,
    durationMs: 1.5,
    upstreamMs: 1.2,
    ...over,
  }
}

/** A trail of `n` request records (plus its chain.head) in `dir`; returns the file. */
async function trailOf (dir: string, n: number, cfg: Partial<AuditConfigLike> = {}): Promise<string> {
  const file = path.join(dir, 'audit.jsonl')
  const trail = AuditTrail.open({ file, level: 'metadata', ...cfg }, quiet())
  for (let i = 0; i < n; i++) trail.record(request(i))
  await trail.close()
  return file
}

const readLines = (file: string): string[] => fs.readFileSync(file, 'utf8').split('\n').slice(0, -1)
const writeLines = (file: string, lines: string[]): void => fs.writeFileSync(file, lines.map((l) => l + '\n').join(''))
const parse = (line: string): Record<string, unknown> => JSON.parse(line) as Record<string, unknown>

/** A line for `rec` with a recomputed hash (a forger's best effort). */
function forge (rec: Record<string, unknown>, seq: number, prev: string | null): string {
  const { seq: _s, prev: _p, hash: _h, ...rest } = rec
  return chainLine(JSON.stringify(rest), seq, prev).line.slice(0, -1)
}

/** A copy of `file` (with its seal) under a new name in the same directory. */
function copyTrail (file: string, name: string): string {
  const to = path.join(path.dirname(file), name)
  fs.copyFileSync(file, to)
  fs.copyFileSync(`${file}.seal`, `${to}.seal`)
  return to
}

// ---------------------------------------------------------------------------
// Records and redaction

t.test('a request record has every field of the schema', async (t) => {
  const createBody = Buffer.from('{"Image":"busybox","User":"0","HostConfig":{"Privileged":true,"Binds":["/srv/portcullis/team-a/x:/x"],"CapAdd":["NET_ADMIN"],"Devices":[{"PathOnHost":"/dev/fuse"}],"NetworkMode":"host","SecurityOpt":["seccomp=unconfined"],"Memory":9223372036854775807}}')
  const r = buildRecord({
    ...request(1),
    method: 'POST',
    target: { operation: 'ContainerCreate', kind: 'container', apiVersion: '1.41', query: new URLSearchParams('name=web') },
    // The audit trail records the facts it is given (the policy's); it works none out itself.
    facts: buildInput('ContainerCreate', 'container', '', new URLSearchParams('name=web'), decodeBody('ContainerCreate', createBody).value),
    decision: { decision: 'would_deny', rule: { policy: 'base.csv', rule: 'tenant-containers' }, wouldDeny: [{ policy: 'strict.csv', rule: 'no-root' }], policyVersion: 'abc123' },
    rewrites: [{ id: 'owner-labels', patch: [{ op: 'add', path: '/Labels/io.portcullis.tenant', value: 'team-a' }] }],
    body: createBody,
    status: 201,
    error: null,
  }, 'metadata')
  t.match(r, {
    v: 1,
    time: '2026-11-22T10:00:01.000Z',
    event: 'request',
    req: 'req-1',
    listener: 'unix:/run/portcullis/docker.sock',
    client: '127.0.0.1:50000',
    method: 'POST',
    identity: { subject: 'alice', tenant: 'team-a', roles: ['tenant'], auth: 'jwt', tokenId: 'tok-1' },
    operation: 'ContainerCreate',
    resource: { kind: 'container', name: 'web' },
    apiVersion: '1.41',
    decision: 'would_deny',
    rule: { policy: 'base.csv', rule: 'tenant-containers' },
    wouldDeny: [{ policy: 'strict.csv', rule: 'no-root' }],
    policyVersion: 'abc123',
    rewrites: [{ id: 'owner-labels', patch: [{ op: 'add', path: '/Labels/io.portcullis.tenant', value: 'team-a' }] }],
    status: 201,
    bytesIn: 0,
    durationMs: 1.5,
    upstreamMs: 1.2,
    error: null,
    security: {
      image: 'busybox',
      privileged: true,
      user: '0',
      hostPaths: ['/srv/portcullis/team-a/x'],
      capAdd: ['NET_ADMIN'],
      devices: 1,
      namespaces: { network: 'host' },
      securityOpt: ['seccomp=unconfined'],
    },
  })
  t.notOk('body' in r, 'level metadata: no body')
  t.notOk('session' in r, 'no session for an ordinary request')
  const full = buildRecord({ ...request(1), target: { operation: 'ContainerCreate', kind: 'container', apiVersion: null }, body: Buffer.from('{"Image":"x","HostConfig":{"Memory":9223372036854775807}}') }, 'request')
  t.match(recordJson(full), /"Memory":9223372036854775807\}/, 'level request: the body, exact numbers kept')
  t.ok(recordJson(full).startsWith('{"v":1,"time":'), 'v first')
  t.equal(recordJson({ ...full, seq: 7, prev: null, hash: 'x' } as typeof full), recordJson(full), 'seq, prev and hash of a stored record are dropped')

  const anon = buildRecord({ event: 'request', req: 'r', listener: 'tcp:127.0.0.1:2375', client: '10.0.0.9:1', error: { code: 'UNAUTHENTICATED', message: 'authentication required' }, status: 401 }, 'metadata')
  t.match(anon, { identity: null, operation: null, resource: null, decision: null, rule: null, wouldDeny: [], policyVersion: null, rewrites: [], error: { code: 'UNAUTHENTICATED' }, status: 401 })

  const mtls = buildRecord({ ...request(2), identity: BOB, target: { operation: 'ImageInspect', kind: 'image', param: 'name', resource: 'localhost:5000/app:1', apiVersion: '1.41' } }, 'metadata')
  t.same(mtls.identity, { subject: 'bob', tenant: 'team-b', roles: ['tenant'], auth: 'mtls', certFingerprint: 'ab'.repeat(32) })
  t.same(mtls.resource, { kind: 'image', name: 'localhost:5000/app:1' })
})

t.test('exec and sessions: command, security, exit code', async (t) => {
  const exec = buildRecord({
    ...request(3),
    method: 'POST',
    target: { operation: 'ContainerExec', kind: 'exec', param: 'id', resource: 'web', apiVersion: '1.41' },
    facts: buildInput('ContainerExec', 'exec', 'web', new URLSearchParams(), { Cmd: ['sh', '-c', 'id'], User: 'root', Privileged: true }),
    body: { Cmd: ['sh', '-c', 'id'], User: 'root', Privileged: true, Env: ['TOKEN=abc'] },
  }, 'request')
  const judgedNothing = buildRecord({ ...request(3), method: 'POST', target: { operation: 'ContainerExec', kind: 'exec', param: 'id', resource: 'web', apiVersion: '1.41' }, body: { Privileged: true } }, 'request')
  t.same(judgedNothing.security, { privileged: false, user: '' }, 'without facts the summary claims nothing')
  t.same(exec.command, ['sh', '-c', 'id'])
  t.same(exec.security, { privileged: true, user: 'root' })
  t.same(exec.resource, { kind: 'container', id: 'web' }, 'the exec is created in this container')
  t.same((exec.body as { Env: string[] }).Env, ['TOKEN=[REDACTED]'])

  const start = buildRecord({ ...request(4), event: 'session.start', hijack: 'upgrade', target: { operation: 'ExecStart', kind: 'exec', param: 'id', resource: 'e1', apiVersion: '1.41' }, command: ['sh'] }, 'metadata')
  t.same(start.session, { mode: 'upgrade' })
  t.same(start.command, ['sh'])
  const end = buildRecord({ ...request(5), event: 'session.end', hijack: 'raw', bytesIn: 10, bytesOut: 2000, durationMs: 65000, exitCode: 3 }, 'metadata')
  t.same(end.session, { mode: 'raw', exitCode: 3 })
  t.match(end, { bytesIn: 10, bytesOut: 2000, durationMs: 65000 })
  const unknown = buildRecord({ ...request(5), event: 'session.end', hijack: 'raw' }, 'metadata')
  t.same(unknown.session, { mode: 'raw', exitCode: null }, 'exit code null when unknown')
})

t.test('redaction: secrets, credentials and environment values never reach a record', async (t) => {
  const SECRET = 'c3VwZXItc2VjcmV0LXZhbHVl'
  const cases: Array<{ op: string, body: unknown, check: (b: any) => void }> = [
    { op: 'SecretCreate', body: { Name: 'db', Data: SECRET, Labels: { team: 'a' } }, check: (b) => { t.equal(b.Data, '[REDACTED]'); t.equal(b.Name, 'db') } },
    { op: 'ConfigCreate', body: { Name: 'cfg', Data: SECRET }, check: (b) => t.equal(b.Data, '[REDACTED]') },
    { op: 'SecretUpdate', body: { Name: 'db', Data: SECRET }, check: (b) => t.equal(b.Data, '[REDACTED]') },
    { op: 'SystemAuth', body: { username: 'u', password: SECRET, identitytoken: SECRET, serveraddress: 'r.example' }, check: (b) => { t.equal(b.password, '[REDACTED]'); t.equal(b.identitytoken, '[REDACTED]'); t.equal(b.username, 'u') } },
    { op: 'SwarmJoin', body: { RemoteAddrs: ['10.0.0.1:2377'], JoinToken: SECRET }, check: (b) => t.equal(b.JoinToken, '[REDACTED]') },
    { op: 'SwarmUnlock', body: { UnlockKey: SECRET }, check: (b) => t.equal(b.UnlockKey, '[REDACTED]') },
    { op: 'SwarmInit', body: { ListenAddr: '0.0.0.0', Spec: { CAConfig: { SigningCAKey: SECRET, SigningCACert: 'pem' } } }, check: (b) => { t.equal(b.Spec.CAConfig.SigningCAKey, '[REDACTED]'); t.equal(b.Spec.CAConfig.SigningCACert, 'pem') } },
    { op: 'ContainerCreate', body: { Image: 'x', Env: ['A=b', `DB=${SECRET}`, 'PASSTHROUGH'], Labels: { 'db.password': SECRET, owner: 'a' } }, check: (b) => { t.same(b.Env, ['A=[REDACTED]', 'DB=[REDACTED]', 'PASSTHROUGH']); t.equal(b.Labels['db.password'], '[REDACTED]'); t.equal(b.Labels.owner, 'a') } },
    { op: 'ServiceCreate', body: { Name: 's', TaskTemplate: { ContainerSpec: { Image: 'x', Env: [`K=${SECRET}`], Secrets: [{ SecretID: 'id1', SecretName: 'db', File: { Name: 'db' } }] } } }, check: (b) => { t.same(b.TaskTemplate.ContainerSpec.Env, ['K=[REDACTED]']); t.same(b.TaskTemplate.ContainerSpec.Secrets[0], { SecretID: 'id1', SecretName: 'db', File: { Name: 'db' } }, 'references to secrets are kept') } },
    { op: 'VolumeCreate', body: { Name: 'v', Driver: 'local', DriverOpts: { type: 'cifs', device: '//srv/share', o: `addr=srv,username=u,password=${SECRET},vers=3.0` } }, check: (b) => t.equal(b.DriverOpts.o, 'addr=srv,username=u,password=[REDACTED],vers=3.0') },
    { op: 'PluginSet', body: [`DEBUG=${SECRET}`], check: (b) => t.same(b, ['DEBUG=[REDACTED]']) },
    { op: 'ContainerUpdate', body: { Whatever: { apiToken: SECRET, ClientSecret: SECRET, PassWord: SECRET } }, check: (b) => t.same(b.Whatever, { apiToken: '[REDACTED]', ClientSecret: '[REDACTED]', PassWord: '[REDACTED]' }) },
  ]
  for (const c of cases) {
    const input: AuditInput & { headers?: unknown } = {
      ...request(1),
      target: { operation: c.op, kind: 'x', apiVersion: '1.41' },
      body: c.body,
      rewrites: [{ id: 'env', patch: [{ op: 'add', path: '/Env/-', value: `INJECTED=${SECRET}` }, { op: 'add', path: '/Labels/api-token', value: SECRET }] }],
      // Whatever the caller has at hand, headers do not make it into a record.
      headers: { authorization: `Bearer ${SECRET}`, 'x-registry-auth': SECRET, 'x-registry-config': SECRET },
    }
    const r = buildRecord(input, 'request')
    c.check(r.body)
    const json = recordJson(r)
    t.notOk(json.includes(SECRET), `${c.op}: the secret value appears nowhere in the record`)
    t.notOk(/authorization|x-registry-auth|x-registry-config/i.test(json), `${c.op}: no credential header in the record`)
  }
  // redactEnv: false keeps environment values, except those of sensitive variable names.
  const kept = buildRecord({ ...request(1), target: { operation: 'ContainerCreate', kind: 'container', apiVersion: null }, body: { Env: ['MODE=prod', `DB_PASSWORD=${SECRET}`] } }, 'request', { redactEnv: false })
  t.same((kept.body as { Env: string[] }).Env, ['MODE=prod', 'DB_PASSWORD=[REDACTED]'])
  // The caller's body is not changed.
  const body = { Data: SECRET }
  buildRecord({ ...request(1), target: { operation: 'SecretCreate', kind: 'secret', apiVersion: null }, body }, 'request')
  t.equal(body.Data, SECRET, 'redaction copies, never mutates')
})

// ---------------------------------------------------------------------------
// The chain

t.test('an untouched trail verifies; lines carry seq, prev and hash', async (t) => {
  const dir = tmp(t)
  const file = await trailOf(dir, 10)
  const lines = readLines(file).map(parse)
  t.equal(lines.length, 11)
  t.match(lines[0], { v: 1, seq: 0, event: 'chain.head', prev: null, chain: { reason: 'new', prevFile: null } })
  for (let i = 1; i < lines.length; i++) {
    t.equal(lines[i].seq, i)
    t.equal(lines[i].prev, lines[i - 1].hash)
  }
  const seal = readSealFile(file)
  t.match(seal, { seq: 10, hash: lines[10].hash, size: fs.statSync(file).size })
  const r = verify([file])
  t.same(r, { ok: true, records: 11, files: [file], notes: [] })
  t.equal(fs.statSync(file).mode & 0o777, 0o600, 'owner-only file')
})

t.test('tampering is detected at the first broken record', async (t) => {
  const dir = tmp(t)
  const file = await trailOf(dir, 10)
  const original = readLines(file)
  const check = (name: string, edit: (lines: string[]) => string[], line: number, reason: RegExp): void => {
    const f = copyTrail(file, `${name}.jsonl`)
    writeLines(f, edit([...original]))
    const r = verify([f])
    t.notOk(r.ok, `${name}: detected`)
    t.same({ file: r.problem?.file, line: r.problem?.line }, { file: f, line }, `${name}: line ${line}`)
    t.match(r.problem?.reason, reason, `${name}: ${r.problem?.reason}`)
  }

  check('modified', (l) => { l[4] = l[4].replace('"subject":"alice"', '"subject":"mallory"'); return l }, 5, /^modified: hash mismatch/)
  check('modified-recomputed', (l) => {
    const rec = parse(l[4])
    l[4] = forge({ ...rec, status: 204 }, rec.seq as number, rec.prev as string)
    return l
  }, 5, /^modified: line 5 was rewritten with a recomputed hash/)
  check('deleted', (l) => { l.splice(4, 1); return l }, 5, /^deleted: seq jumps from 3 \(line 4\) to 5: 1 record missing before line 5/)
  check('deleted-two', (l) => { l.splice(4, 2); return l }, 5, /^deleted: .* 2 records missing/)
  check('inserted-forged', (l) => {
    // A forged record claiming line 5's place: right seq, right prev, recomputed hash.
    const rec = parse(l[4])
    l.splice(4, 0, forge({ ...rec, req: 'forged', decision: 'allow' }, rec.seq as number, rec.prev as string))
    return l
  }, 5, /^inserted: line 5 \(seq 4\) is not part of the chain: line 6 takes the same place/)
  check('inserted-after', (l) => {
    // A forged record after line 5, linked to it: the genuine line 6 now repeats its seq.
    const rec = parse(l[4])
    l.splice(5, 0, forge({ ...rec, req: 'forged' }, (rec.seq as number) + 1, rec.hash as string))
    return l
  }, 6, /^inserted: line 6 \(seq 5\) is not part of the chain/)
  check('reordered', (l) => { [l[4], l[5]] = [l[5], l[4]]; return l }, 5, /^reordered: line 5 has seq 5, but seq 4 comes later \(line 6\)/)
  check('truncated', (l) => l.slice(0, -2), 10, /^truncated: the file ends with record 8 \(line 9\), but its seal says record 10 was written: 2 records cut off the end/)
  check('truncated-one', (l) => l.slice(0, -1), 11, /^truncated: .* 1 record cut off the end/)
  check('head-deleted', (l) => l.slice(1), 1, /^deleted: the file does not begin with a chain.head/)
  check('blank', (l) => { l[6] = ''; return l }, 7, /^modified: empty line/)
  check('tail-rewritten', (l) => {
    // Rewrite everything from line 5 on with a consistent, recomputed chain: only the seal shows it.
    let prev = parse(l[3]).hash as string
    for (let i = 4; i < l.length; i++) {
      const rec = parse(l[i])
      l[i] = forge({ ...rec, identity: null }, rec.seq as number, prev)
      prev = parse(l[i]).hash as string
    }
    return l
  }, 11, /^modified: the last record is not the one sealed/)

  // Truncated mid-line: the last line cut in half.
  const cut = copyTrail(file, 'cut.jsonl')
  const bytes = fs.readFileSync(file)
  fs.writeFileSync(cut, bytes.subarray(0, bytes.length - 40))
  const r = verify([cut])
  t.same({ line: r.problem?.line }, { line: 11 })
  t.match(r.problem?.reason, /^truncated mid-line: line 11 is incomplete \(\d+ bytes without a newline\)/)

  // Without its seal, the end of a live file cannot be checked; --partial accepts it with a note.
  const noSeal = copyTrail(file, 'noseal.jsonl')
  fs.rmSync(`${noSeal}.seal`)
  t.match(verify([noSeal]).problem, { line: 12, reason: /^unverifiable end: no seal/ })
  const partial = verify([noSeal], { partial: true })
  t.ok(partial.ok)
  t.match(partial.notes, [/no seal; records cut off its end would not be detected/])
  // A capture that starts mid-chain (say, stdout after a restart) verifies with partial.
  const mid = copyTrail(file, 'mid.jsonl')
  fs.rmSync(`${mid}.seal`)
  writeLines(mid, original.slice(3))
  t.match(verify([mid]).problem, { line: 1, reason: /^deleted: the file does not begin with a chain.head/ })
  t.ok(verify([mid], { partial: true }).ok)
})

t.test('rotation by size keeps the chain across files, given in any order', async (t) => {
  const dir = tmp(t)
  const file = path.join(dir, 'audit.jsonl')
  let clock = Date.UTC(2026, 10, 22, 10, 0, 0)
  const trail = AuditTrail.open({ file, level: 'metadata', rotate: { maxBytes: 4096 } }, quiet(), { now: () => (clock += 7) })
  for (let i = 0; i < 60; i++) trail.record(request(i))
  await trail.close()
  const files = fs.readdirSync(dir).filter((f) => !f.endsWith('.seal')).map((f) => path.join(dir, f))
  t.ok(files.length >= 4, `${files.length} files`)
  for (const f of files) {
    t.ok(fs.statSync(f).size <= 4096 + 600, `${path.basename(f)}: about maxBytes (${fs.statSync(f).size})`)
    t.ok(fs.existsSync(`${f}.seal`), `${path.basename(f)} has its seal`)
  }
  const rotated = files.filter((f) => f !== file).sort()
  // Each rotated file ends with chain.end naming its new name; the next head names it too.
  for (const f of rotated) {
    const lines = readLines(f).map(parse)
    t.match(lines[lines.length - 1], { event: 'chain.end', chain: { reason: 'size', renamedTo: path.basename(f) } })
  }
  const heads = files.map((f) => parse(readLines(f)[0]))
  t.equal(heads.filter((h) => h.chain && (h.chain as { reason: string }).reason === 'rotate').length, rotated.length)

  const shuffled = [file, ...rotated.reverse()]
  const r = verify(shuffled)
  t.ok(r.ok, 'verifies in any order')
  t.equal(r.records, 60 + 2 * rotated.length + 1, 'every record, head and end')
  t.equal(r.files[r.files.length - 1], file, 'ordered by the chain: the live file last')
  t.same(r.files.slice(0, -1), [...rotated].sort(), 'rotated files in chain order')

  // A middle file missing: its records are missing between its neighbours.
  const without = shuffled.filter((f) => f !== rotated[1])
  t.match(verify(without).problem, { line: 1, reason: /^deleted: records \d+\.\.\d+ are missing between/ })
  // Only the newest files (older ones archived away): intact, with a note on where it starts.
  const newest = verify([file, rotated[0]])
  t.ok(newest.ok)
  t.match(newest.notes, [/the chain starts at seq \d+ in .*, continuing audit\.jsonl\..* which was not given/])
  // A rotated file cut short without its seal: the next file's head still shows it.
  const victim = [...rotated].sort()[1]
  const vl = readLines(victim)
  writeLines(victim, vl.slice(0, -2))
  fs.rmSync(`${victim}.seal`)
  const cutShort = verify(shuffled)
  t.match(cutShort.problem, { file: victim, line: vl.length - 1, reason: /^truncated: the file ends with record \d+ .* chain\.head says it ended with record \d+/ })
})

t.test('rotation by age', async (t) => {
  const dir = tmp(t)
  const file = path.join(dir, 'audit.jsonl')
  let clock = Date.UTC(2026, 10, 22, 10, 0, 0)
  const trail = AuditTrail.open({ file, level: 'metadata', rotate: { maxAgeSeconds: 60 } }, quiet(), { now: () => clock })
  for (let i = 0; i < 5; i++) { trail.record(request(i)); clock += 25_000 }
  await trail.close()
  const files = fs.readdirSync(dir).filter((f) => !f.endsWith('.seal'))
  t.same(files.sort(), ['audit.jsonl', 'audit.jsonl.2026-11-22T10-01-15.000Z'])
  t.match(parse(readLines(path.join(dir, files[1])).pop()!), { event: 'chain.end', chain: { reason: 'age' } })
  t.ok(verify(files.map((f) => path.join(dir, f))).ok)
})

t.test('a restart continues the chain in the same file', async (t) => {
  const dir = tmp(t)
  const file = await trailOf(dir, 5)
  const again = AuditTrail.open({ file, level: 'metadata' }, quiet())
  t.match(again.status(), { seq: 5, healthy: true })
  again.record(request(6))
  await again.close()
  const lines = readLines(file).map(parse)
  t.equal(lines.length, 7)
  t.equal(lines.filter((l) => l.event === 'chain.head').length, 1, 'no new head')
  t.match(lines[6], { seq: 6, prev: lines[5].hash })
  t.ok(verify([file]).ok)
  t.same(fs.readdirSync(dir).sort(), ['audit.jsonl', 'audit.jsonl.seal'])
})

t.test('a restart after damage keeps the damaged file and starts a linked new one', async (t) => {
  for (const damage of ['cut-mid-line', 'truncated', 'modified-last'] as const) {
    const dir = tmp(t)
    const file = await trailOf(dir, 5)
    const lines = readLines(file)
    if (damage === 'cut-mid-line') fs.writeFileSync(file, fs.readFileSync(file).subarray(0, -30))
    if (damage === 'truncated') writeLines(file, lines.slice(0, -2))
    if (damage === 'modified-last') writeLines(file, [...lines.slice(0, -1), lines[lines.length - 1].replace('alice', 'mallo')])
    const log = capture()
    const trail = AuditTrail.open({ file, level: 'metadata' }, log.logger)
    trail.record(request(9))
    await trail.close()
    const loud = log.lines.find((l) => l.level === 50)
    t.ok(loud, `${damage}: logged loudly at error level`)
    const aside = fs.readdirSync(dir).filter((f) => /^audit\.jsonl\.\d{4}-.*Z$/.test(f))
    t.equal(aside.length, 1, `${damage}: the damaged file is kept as ${aside[0]}`)
    const head = parse(readLines(file)[0])
    t.match(head, { event: 'chain.head', chain: { reason: 'recover', prevFile: aside[0], problem: String } }, `${damage}: ${String((head.chain as { problem: string }).problem)}`)
    const alone = verify([file])
    t.ok(alone.ok, `${damage}: the new file verifies`)
    t.match(alone.notes.join('\n'), /started this file after a problem/)
    const both = verify([file, path.join(dir, aside[0])])
    t.notOk(both.ok, `${damage}: together, the damage is reported`)
    t.equal(both.problem?.file, path.join(dir, aside[0]))
  }
  // The file deleted while the gateway was down: its seal remains and tells.
  const dir = tmp(t)
  const file = await trailOf(dir, 3)
  fs.rmSync(file)
  const trail = AuditTrail.open({ file, level: 'metadata' }, quiet())
  trail.record(request(4))
  await trail.close()
  t.match(parse(readLines(file)[0]), { seq: 4, chain: { reason: 'recover', prevSeq: 3, problem: /missing but its seal says record 3 was written/ } })
})

t.test('a stop between writing and sealing: verify says so; a restart seals and continues', async (t) => {
  const dir = tmp(t)
  const file = await trailOf(dir, 5)
  // seq 5 lives in slot 1 (seq % 2); spoil it as a torn write would. Slot 0 still holds seq 4.
  const seal = fs.readFileSync(`${file}.seal`)
  seal.fill(0x78, 256, 300)
  fs.writeFileSync(`${file}.seal`, seal)
  t.match(readSealFile(file), { seq: 4 })
  t.match(verify([file]).problem, { line: 6, reason: /^appended: the records from seq 5 on are not covered by the seal \(.*stopped between writing and sealing\)/ })
  const log = capture()
  const trail = AuditTrail.open({ file, level: 'metadata' }, log.logger)
  t.ok(log.lines.some((l) => l.level === 40 && /written but not sealed/.test(String(l.msg))), 'warned')
  trail.record(request(6))
  await trail.close()
  t.ok(verify([file]).ok, 'sealed and continued')
  t.equal(readLines(file).filter((l) => parse(l).event === 'chain.head').length, 1)
  // Both slots spoiled: the seal is unreadable.
  fs.writeFileSync(`${file}.seal`, Buffer.alloc(512, 0x78))
  t.match(verify([file]).problem, { file: `${file}.seal`, reason: /unreadable/ })
})

t.test('inputFromContext: a RequestContext as an AuditInput', async (t) => {
  const { inputFromContext } = await import('../src/gateway/audit-input')
  const { resolveTarget } = await import('../src/api/catalog/route')
  const target = resolveTarget('POST', '/v1.41/containers/create?name=web', { minVersion: '1.24', maxVersion: '1.56' })
  const ctx = {
    id: 'r1',
    listener: 'unix:/s',
    remote: '127.0.0.1',
    method: 'POST',
    url: '/v1.41/containers/create?name=web',
    startedAt: performance.now() - 5,
    target,
    identity: ALICE,
    decision: { decision: 'allow' as const, rule: null, wouldDeny: [], policyVersion: 'v' },
    rewrites: [],
    body: Buffer.from('{"Image":"busybox","HostConfig":{"Privileged":true}}'),
    status: 201,
    bytesIn: 50,
    bytesOut: 80,
    upstreamMs: 3,
  }
  const r = buildRecord(inputFromContext(ctx, 'request'), 'request')
  t.match(r, { req: 'r1', operation: 'ContainerCreate', resource: { kind: 'container', name: 'web' }, apiVersion: '1.41', status: 201, security: { image: 'busybox', privileged: true }, body: { Image: 'busybox' } })
  t.ok(r.durationMs! >= 5)
})

// ---------------------------------------------------------------------------
// Failures

t.test('append to an unwritable location throws; the trail recovers and records it', async (t) => {
  const dir = tmp(t)
  // A path under a regular file: ENOTDIR, whoever we run as.
  fs.writeFileSync(path.join(dir, 'plain'), '')
  const bad = { file: path.join(dir, 'plain', 'audit.jsonl'), level: 'metadata' as const }
  t.throws(() => AuditTrail.open(bad, quiet()), AuditWriteError, 'open throws (onFailure closed)')
  const open = AuditTrail.open({ ...bad, onFailure: 'open' }, quiet(), { retryMs: 0 })
  t.notOk(open.healthy())
  t.doesNotThrow(() => open.record(request(1)), 'onFailure open: dropped, not thrown')
  t.match(open.status(), { healthy: false, dropped: 1 })
  await open.close()

  // A working trail whose directory goes away.
  const logs = path.join(dir, 'logs')
  const file = path.join(logs, 'audit.jsonl')
  const log = capture()
  const trail = AuditTrail.open({ file, level: 'metadata' }, log.logger, { retryMs: 0 })
  trail.record(request(1))
  fs.renameSync(logs, path.join(dir, 'logs.moved'))
  fs.writeFileSync(logs, 'not a directory')
  let err: unknown
  try { trail.record(request(2)) } catch (e) { err = e }
  t.type(err, AuditWriteError, 'append throws AuditWriteError')
  t.match(err, { sink: 'file', code: /^E[A-Z]+$/ })
  t.notOk(trail.healthy(), 'unhealthy while it cannot write')
  t.ok(log.lines.some((l) => l.level === 50 && /AUDIT TRAIL FAILED/.test(String(l.msg))), 'logged loudly')
  fs.rmSync(logs)
  fs.mkdirSync(logs)
  t.ok(trail.healthy(), 'healthy again: healthy() re-opened the file')
  trail.record(request(3))
  await trail.close()
  const head = parse(readLines(file)[0])
  t.match(head, { chain: { reason: 'recover', prevSeq: 1, problem: /writing failed|removed/ } })
  const all = [file, path.join(dir, 'logs.moved', 'audit.jsonl')]
  t.ok(verify(all).ok, 'the chain holds across the failure')

  // onFailure: open counts the dropped records in the next head.
  const d2 = path.join(dir, 'd2')
  const f2 = path.join(d2, 'audit.jsonl')
  const t2 = AuditTrail.open({ file: f2, level: 'metadata', onFailure: 'open' }, quiet(), { retryMs: 0 })
  t2.record(request(1))
  fs.renameSync(d2, `${d2}.moved`)
  fs.writeFileSync(d2, '')
  t2.record(request(2))
  t2.record(request(3))
  fs.rmSync(d2)
  t2.record(request(4))
  await t2.close()
  t.match(parse(readLines(f2)[0]), { chain: { reason: 'recover', dropped: 2 } })
  t.match(t2.status(), { dropped: 2 })
})

t.test('the live file removed, replaced or appended to by someone else', async (t) => {
  const dir = tmp(t)
  const file = path.join(dir, 'audit.jsonl')
  const log = capture()
  const trail = AuditTrail.open({ file, level: 'metadata' }, log.logger)
  trail.record(request(1))
  fs.rmSync(file)
  trail.record(request(2))
  t.match(parse(readLines(file)[0]), { chain: { reason: 'recover', problem: /removed or moved away/ } })
  fs.appendFileSync(file, '{"forged":true}\n')
  trail.record(request(3))
  await trail.close()
  t.match(parse(readLines(file)[0]), { chain: { reason: 'recover', problem: /changed by another process/ } })
  t.ok(log.lines.filter((l) => /TAMPERING OR INTERFERENCE/.test(String(l.msg))).length === 2, 'both logged loudly')
})

t.test('stdout sink: the same lines, synchronously; a failing stdout throws', async (t) => {
  const dir = tmp(t)
  const file = path.join(dir, 'audit.jsonl')
  const out = path.join(dir, 'stdout.jsonl')
  const fd = fs.openSync(out, 'w')
  const trail = AuditTrail.open({ file, stdout: true, level: 'metadata' }, quiet(), { stdoutFd: fd })
  trail.record(request(1))
  await trail.close()
  fs.closeSync(fd)
  t.equal(fs.readFileSync(out, 'utf8'), fs.readFileSync(file, 'utf8'), 'identical lines')
  t.ok(verify([out], { partial: true }).ok, 'a stdout capture verifies (partial: no seal)')

  const only = path.join(dir, 'only.jsonl')
  const fd2 = fs.openSync(only, 'w')
  const t2 = AuditTrail.open({ stdout: true, level: 'metadata' }, quiet(), { stdoutFd: fd2 })
  t2.record(request(1))
  await t2.close()
  fs.closeSync(fd2)
  t.match(parse(readLines(only)[0]), { event: 'chain.head', seq: 0 })
})

t.test('stdout failure throws AuditWriteError', async (t) => {
  const dir = tmp(t)
  const ro = fs.openSync(path.join(dir, 'ro'), 'w+')
  fs.closeSync(ro)
  const rofd = fs.openSync(path.join(dir, 'ro'), 'r')
  t.throws(() => AuditTrail.open({ stdout: true, level: 'metadata' }, quiet(), { stdoutFd: rofd }), { name: 'AuditWriteError', sink: 'stdout', code: 'EBADF' })
  fs.closeSync(rofd)
})

t.test('transport: records reach a pino transport too', async (t) => {
  const dir = tmp(t)
  const dest = path.join(dir, 'transport.jsonl')
  const trail = AuditTrail.open({ file: path.join(dir, 'audit.jsonl'), level: 'metadata', transport: { target: 'pino/file', options: { destination: dest } } }, quiet())
  trail.record(request(1))
  await trail.close()
  const got = readLines(dest).map(parse)
  t.match(got, [{ event: 'chain.head', msg: 'audit' }, { event: 'request', req: 'req-1', seq: 1, hash: String, msg: 'audit' }])
})

// ---------------------------------------------------------------------------
// Report, config, CLI, cost

t.test('report: requests by tenant and operation, denials, would-deny, sessions', async (t) => {
  const dir = tmp(t)
  const file = path.join(dir, 'audit.jsonl')
  const trail = AuditTrail.open({ file, level: 'metadata' }, quiet())
  trail.record(request(1))
  trail.record(request(2))
  trail.record(request(3, { identity: BOB, target: { operation: 'ContainerCreate', kind: 'container', apiVersion: '1.41' }, decision: { decision: 'deny', rule: { policy: 'base.csv', rule: 'no-privileged' }, wouldDeny: [], policyVersion: 'v' }, status: 403, error: { code: 'FORBIDDEN', message: 'denied' } }))
  trail.record(request(4, { target: { operation: 'ContainerCreate', kind: 'container', apiVersion: '1.41' }, decision: { decision: 'would_deny', rule: { policy: 'base.csv', rule: 'tenant-containers' }, wouldDeny: [{ policy: 'strict.csv', rule: 'no-root' }], policyVersion: 'v' } }))
  trail.record(request(5, { event: 'session.start', hijack: 'upgrade', target: { operation: 'ExecStart', kind: 'exec', apiVersion: '1.41' } }))
  trail.record(request(6, { event: 'session.end', hijack: 'upgrade', target: { operation: 'ExecStart', kind: 'exec', apiVersion: '1.41' }, bytesIn: 2048, bytesOut: 3 * 1024 * 1024, durationMs: 95_000, exitCode: 0 }))
  trail.record(request(7, { identity: null, target: null, decision: null, status: 401, error: { code: 'UNAUTHENTICATED', message: 'x' } }))
  await trail.close()

  const text = report([file])
  t.match(text, /Chain: intact \(8 records\)/)
  t.match(text, /team-a\s+ContainerList\s+2\s+0\s+0\s+0/)
  t.match(text, /team-a\s+ContainerCreate\s+1\s+0\s+1\s+0/)
  t.match(text, /team-b\s+ContainerCreate\s+1\s+1\s+0\s+0/)
  t.match(text, /team-a\s+ExecStart\s+1\s+0\s+0\s+0/)
  t.match(text, /\(unauthenticated\)\s+\(no operation\)\s+1\s+0\s+0\s+1/)
  t.match(text, /Denials by rule\n.*\n\s+no-privileged \(base\.csv\)\s+1\s+bob@team-b/)
  t.match(text, /Would deny by rule.*\n.*\n\s+no-root \(strict\.csv\)\s+1\s+alice@team-a/)
  t.match(text, /alice\s+team-a\s+1\s+0\s+2\.0 KiB\s+3\.0 MiB\s+1m35s\s+1m35s/)
  t.comment(text)

  const teamB = report([file], { tenant: 'team-b' })
  t.notMatch(teamB, /ContainerList/)
  t.match(teamB, /team-b\s+ContainerCreate/)
  const late = report([file], { since: '2026-11-22T10:00:05Z' })
  t.match(late, /3 of 7 request\/session records/)
  const recent = report([file], { since: '24h', now: Date.UTC(2026, 10, 23, 9, 0, 0) })
  t.match(recent, /7 of 7/)
  t.throws(() => report([file], { since: 'yesterday' }), /--since/)
})

t.test('config: audit keys, defaults and messages', async (t) => {
  const c = parseConfig(`audit:
  file: ./a.jsonl
  level: request
  stdout: true
  transport: { target: pino-syslog, options: { appname: portcullis } }
  rotate: { maxBytes: 104857600, maxAgeSeconds: 86400 }
  fsync: true
  onFailure: open
  redactEnv: false
`, '/etc/portcullis/c.yaml')
  t.same(c.audit, {
    file: '/etc/portcullis/a.jsonl',
    level: 'request',
    stdout: true,
    transport: { target: 'pino-syslog', options: { appname: 'portcullis' } },
    rotate: { maxBytes: 104857600, maxAgeSeconds: 86400 },
    fsync: true,
    onFailure: 'open',
    redactEnv: false,
  })
  t.same(parseConfig('audit: { transport: { target: ./t.js } }\n', '/etc/p/c.yaml').audit.transport, { target: '/etc/p/t.js' }, 'relative transport paths resolve')
  const d = parseConfig('audit: {}\n', '/p/c.yaml')
  t.same(describeConfig(d)['audit'], { level: 'metadata', stdout: false, file: '/p/audit.jsonl', rotate: {}, fsync: false, onFailure: 'closed', redactEnv: true }, 'describeConfig shows the defaults')
  t.same(describeConfig(c)['audit'], {
    level: 'request',
    stdout: true,
    file: '/etc/portcullis/a.jsonl',
    transport: { target: 'pino-syslog', options: ['appname: <set>'] },
    rotate: { maxBytes: 104857600, maxAgeSeconds: 86400 },
    fsync: true,
    onFailure: 'open',
    redactEnv: false,
  }, 'transport option values are not shown')
  const problems = (yaml: string): string[] => {
    try { parseConfig(yaml, '/p/c.yaml') } catch (err) { if (err instanceof ConfigError) return err.problems; throw err }
    return []
  }
  t.same(problems(`audit:
  transport: { options: {} }
  rotate: { maxBytes: 100, maxAgeSeconds: 0, every: 1 }
  fsync: yes
  onFailure: ignore
  redactEnv: 1
`), [
    'audit.transport.target: required: a pino transport module name (e.g. pino-syslog) or a path to one',
    'audit.rotate.every: unknown key',
    'audit.rotate.maxBytes: must be at least 4096, got 100',
    'audit.rotate.maxAgeSeconds: must be at least 1, got 0',
    'audit.fsync: expected true or false, got "yes"',
    'audit.onFailure: expected one of closed, open, got "ignore"',
    'audit.redactEnv: expected true or false, got number 1',
  ])
  t.same(problems('audit: { transport: { target: x, options: [1] } }\n'), ['audit.transport.options: expected a mapping (passed to the transport as its options), got a list'])
  t.same(problems('audit: { file: null, transport: { target: x } }\n'), ['audit.transport: is asynchronous and not a durable record on its own; with file: null set stdout: true as well'])
})

t.test('CLI: audit verify and audit report', async (t) => {
  const dir = tmp(t)
  const file = path.join(dir, 'audit.jsonl')
  const trail = AuditTrail.open({ file, level: 'metadata', rotate: { maxBytes: 4096 } }, quiet())
  for (let i = 0; i < 30; i++) trail.record(request(i))
  await trail.close()
  const all = fs.readdirSync(dir).map((f) => path.join(dir, f)) // seals included, as a shell glob would
  const ok = spawnSync(process.execPath, [CLI, 'audit', 'verify', ...all.reverse()], { encoding: 'utf8' })
  t.equal(ok.status, 0, ok.stdout + ok.stderr)
  t.match(ok.stdout, /^OK: \d+ records in \d+ file\(s\), chain intact/)
  const lines = readLines(file)
  writeLines(file, [...lines.slice(0, 2), ...lines.slice(3)])
  const bad = spawnSync(process.execPath, [CLI, 'audit', 'verify', ...all], { encoding: 'utf8' })
  t.equal(bad.status, 1)
  t.match(bad.stdout, new RegExp(`^${file.replace(/[.]/g, '\\.')}:3: deleted: seq jumps`))
  const rep = spawnSync(process.execPath, [CLI, 'audit', 'report', ...all, '--tenant', 'team-a', '--since', '2026-11-22T00:00:00Z'], { encoding: 'utf8' })
  t.equal(rep.status, 0, rep.stderr)
  t.match(rep.stdout, /Requests by tenant and operation/)
  t.equal(spawnSync(process.execPath, [CLI, 'audit', 'verify'], { encoding: 'utf8' }).status, 2)
  t.equal(spawnSync(process.execPath, [CLI, 'audit', 'report', file, '--since', 'soon'], { encoding: 'utf8' }).status, 2)
})
