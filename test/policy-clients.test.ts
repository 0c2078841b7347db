/**
 * The shipped policy as the real docker CLIs (28, and Debian's 20.10) meet it, one bearer
 * token per role in config.json `HttpHeaders`: an admin may run privileged containers, a
 * tenant is refused with the gateway's message naming the rule (and works in its own
 * container: exec runs as 65534 by default (tenancy.yaml users), docker cp copies in; its prunes remove only
 * its own objects), a read-only auditor of the same tenant may look but not read or
 * change, and a CI runner's push is forwarded (and fails at the registry, there is none)
 * where a tenant's is refused.
 *
 * The auditor is scoped to its tenant like any non-admin: the objects it looks at are
 * made through the gateway by the tenant's user. Everything has a unique name and is
 * removed at teardown (other files share the engine).
 */
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import jwt from 'jsonwebtoken'
import t from 'tap'
import { CLI20, CLI28, engine, policiesWith, run, startTestGateway, uniqueName, type RunResult, type TestGateway } from './helpers/gateway'

const SECRET = randomBytes(32).toString('hex')
const IMAGE = engine().image
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pcpc-'))

const IDENTITIES = {
  admin: { sub: 'root-op', roles: ['admin'] },
  tenant: { sub: 'trudy', tenant: 'team-a', roles: ['tenant'] },
  readonly: { sub: 'auditor', tenant: 'team-a', roles: ['readonly'] },
  ci: { sub: 'runner-7', tenant: 'team-a', roles: ['ci'] },
} as const
type Role = keyof typeof IDENTITIES

/** A DOCKER_CONFIG directory per role, its config.json sending that role's token. */
const CONFIGS = Object.fromEntries(Object.entries(IDENTITIES).map(([role, claims]) => {
  const dir = path.join(tmp, role)
  fs.mkdirSync(dir)
  const token = jwt.sign({ ...claims, exp: Math.floor(Date.now() / 1000) + 3600 }, SECRET, { algorithm: 'HS256' })
  fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify({ HttpHeaders: { Authorization: `Bearer ${token}` } }))
  return [role, dir]
})) as Record<Role, string>

let gw: TestGateway
const as = async (role: Role, cli: string, args: readonly string[]): Promise<RunResult> =>
  await run(cli, args, { host: gw.dockerHost, env: { DOCKER_CONFIG: CONFIGS[role] }, timeoutMs: 60_000 })
const direct = async (args: readonly string[]): Promise<RunResult> => await run(CLI28, args, { host: engine().dockerHost })
async function inspect (name: string): Promise<Record<string, any> | null> {
  const r = await direct(['inspect', '--format', '{{json .}}', name])
  return r.code === 0 ? JSON.parse(r.stdout.toString()) as Record<string, any> : null
}

/** A container and a volume of tenant team-a (made by its user trudy) the auditor can see; events about them since `since`. */
const TARGET = uniqueName('pcpc-target')
const VOLUME = uniqueName('pcpc-vol')
let since = 0

/** The label on everything the prune checks make, so that a prune never reaches other files' objects. */
const PRUNE_LABEL = `pcpc-prune=${uniqueName('run')}`
const pruneFilter = ['--filter', `label=${PRUNE_LABEL}`]
/** Prune candidates: a stopped container and an unused volume each, one the tenant's and one the admin's. */
const PRUNED = { tenantContainer: uniqueName('pcpc-pt'), adminContainer: uniqueName('pcpc-pa'), tenantVolume: uniqueName('pcpc-pvt'), adminVolume: uniqueName('pcpc-pva') }

t.before(async () => {
  // The ci push below goes to a registry on the engine's loopback, which the shipped allow-list leaves out.
  gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, undefined, policiesWith((text) => text.replace(/^( {2}allowed: \[docker\.io)\]$/m, '$1, "localhost:5999"]')))
  since = Math.floor(Date.now() / 1000) - 1
  for (const args of [['run', '-d', '--name', TARGET, IMAGE, 'sh', '-c', 'echo private; sleep 600'], ['volume', 'create', VOLUME]]) {
    const r = await as('tenant', CLI28, args)
    if (r.code !== 0) throw new Error(`docker ${args.join(' ')} as the tenant: ${r.stderr}`)
  }
})
t.teardown(async () => {
  await direct(['rm', '-f', TARGET])
  await direct(['volume', 'rm', VOLUME])
  for (const name of [PRUNED.tenantContainer, PRUNED.adminContainer]) await direct(['rm', '-f', name])
  for (const name of [PRUNED.tenantVolume, PRUNED.adminVolume]) await direct(['volume', 'rm', name])
  await gw?.close()
  fs.rmSync(tmp, { recursive: true, force: true })
})

const escape = (s: string): string => s.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')
const deniedBy = (op: string, rule: string | null, who: string): RegExp =>
  new RegExp(`${op} denied by ${rule ? `policy rule ${rule} \\(base\\.csv\\)` : 'policy: no rule allows it'} for subject ${who}`)

/** One CLI command as one role: it succeeds with stdout matching `ok`, or fails with stderr matching `refused`. */
interface Check { role: Role, args: () => string[], ok?: RegExp, refused?: RegExp, unseen?: RegExp }

const checks: Check[] = [
  { role: 'tenant', args: () => ['run', '--rm', IMAGE, 'echo', 'ordinary'], ok: /^ordinary$/ },
  { role: 'tenant', args: () => ['run', '--rm', '--privileged', IMAGE, 'true'], refused: deniedBy('ContainerCreate', 'no-privileged', 'trudy in tenant team-a') },
  // The message says which field and value matched and what is allowed; every other rule that denies too; never an
  // environment value (docker run adds a full stop to the engine's message).
  {
    role: 'tenant',
    args: () => ['run', '--rm', '-v', '/etc:/host-etc', IMAGE, 'true'],
    refused: new RegExp(`${deniedBy('ContainerCreate', 'host-binds', 'trudy in tenant team-a').source}: matched hostPaths /etc \\(HostConfig\\.Binds/Mounts, -v/--mount\\); allowed: hostPaths under /srv/portcullis/team-a; also denied by host-binds-symfollow \\(base\\.csv\\)\\.?\n`),
  },
  {
    role: 'tenant',
    args: () => ['run', '--rm', '-e', 'API_TOKEN=pcpc-secret-value', '--cap-add', 'SYS_ADMIN', '--privileged', IMAGE, 'true'],
    refused: new RegExp(`${deniedBy('ContainerCreate', 'no-privileged', 'trudy in tenant team-a').source}: matched privileged true \\(HostConfig\\.Privileged, --privileged\\); allowed: privileged false or unset; also denied by capabilities \\(base\\.csv\\)\\.?\n`),
    unseen: /pcpc-secret-value/,
  },
  // Who a tenant runs as is tenancy.yaml's (users): root and names are refused there, by rule.
  { role: 'tenant', args: () => ['exec', '-u', 'root', TARGET, 'id'], refused: /^Error response from daemon: exec User "root": tenants give users and groups as numbers \(uid:gid, e\.g\. 65534:65534\).* \(rule numeric-user\)\n$/ },
  { role: 'tenant', args: () => ['exec', '-u', '1000:0', TARGET, 'id'], refused: /^Error response from daemon: exec User "1000:0": the root group \(gid 0\) is not available to tenant team-a; .* \(rule tenant-user\)\n$/ },
  // The build cache carries no owner: a tenant's prune is answered by the gateway, nothing deleted.
  { role: 'tenant', args: () => ['builder', 'prune', '-f', '--filter', `label=pcpc-never=${TARGET}`], ok: /^Total reclaimed space:\s+0B$/m },
  { role: 'readonly', args: () => ['ps', '--filter', `name=${TARGET}`, '--format', '{{.Names}}'], ok: new RegExp(`^${TARGET}$`) },
  { role: 'readonly', args: () => ['images', '--format', '{{.Repository}}:{{.Tag}}'], ok: new RegExp(`^${escape(IMAGE)}$`, 'm') },
  { role: 'readonly', args: () => ['volume', 'ls', '-q'], ok: new RegExp(`^${VOLUME}$`, 'm') },
  { role: 'readonly', args: () => ['version', '--format', '{{.Server.Version}}'], ok: /^\d+\.\d+/ },
  { role: 'readonly', args: () => ['info', '--format', '{{.ServerVersion}} {{.Images}}'], ok: /^\d+\.\d+\S* [1-9]/ },
  {
    role: 'readonly',
    // --until a second ahead, so that events of this very second are in (the CLI waits for it).
    args: () => ['events', '--since', String(since), '--until', String(Math.ceil(Date.now() / 1000) + 1), '--filter', `container=${TARGET}`, '--format', '{{.Action}}'],
    ok: /^create\nstart/,
  },
  { role: 'readonly', args: () => ['logs', TARGET], refused: new RegExp(`${deniedBy('ContainerLogs', null, 'auditor in tenant team-a').source}: no allow rule in base\\.csv applies to ContainerLogs for roles readonly\n`) },
  { role: 'readonly', args: () => ['cp', `${TARGET}:/etc/hostname`, tmp], refused: deniedBy('ContainerArchive', null, 'auditor in tenant team-a') },
  { role: 'readonly', args: () => ['export', TARGET], refused: deniedBy('ContainerExport', null, 'auditor in tenant team-a') },
  { role: 'readonly', args: () => ['run', '--rm', IMAGE, 'true'], refused: deniedBy('ContainerCreate', null, 'auditor in tenant team-a') },
  { role: 'readonly', args: () => ['exec', TARGET, 'true'], refused: deniedBy('ContainerExec', null, 'auditor in tenant team-a') },
]

for (const [version, cli] of [['28', CLI28], ['20.10', CLI20]] as const) {
  t.test(`docker ${version}`, async (t) => {
    for (const check of checks) {
      t.test(`${check.role}: docker ${check.args().join(' ')}`, async (t) => {
        const r = await as(check.role, cli, check.args())
        if (check.ok) {
          t.equal(r.code, 0, 'exits 0', { stderr: r.stderr })
          t.match(r.stdout.toString().trim(), check.ok, 'prints what the engine has')
        } else {
          t.not(r.code, 0, 'fails')
          t.match(r.stderr, check.refused ?? /^$/, `shows the gateway's message: ${r.stderr.trim().split('\n')[0]}`)
          t.equal(r.stdout.length, 0, 'and prints nothing else')
          if (check.unseen) t.notMatch(r.stderr, check.unseen, 'and never repeats what it must not')
        }
      })
    }

    t.test('tenant: in its own container, exec without -u runs as 65534 and docker cp copies in', async (t) => {
      const name = uniqueName('pcpc-own')
      t.teardown(async () => { await direct(['rm', '-f', name]) })
      const started = await as('tenant', cli, ['run', '-d', '--name', name, IMAGE, 'sleep', '600'])
      t.equal(started.code, 0, 'docker run -d', { stderr: started.stderr })
      const id = await as('tenant', cli, ['exec', name, 'id', '-u'])
      t.same([id.code, id.stdout.toString()], [0, '65534\n'], 'the CLI sends "User":"" and the exec runs as 65534 (the container\'s user: tenancy.yaml users.default)', { stderr: id.stderr })
      const file = path.join(tmp, `cp-in-${version}`)
      fs.writeFileSync(file, `copied in by docker ${version}\n`)
      const cp = await as('tenant', cli, ['cp', file, `${name}:/tmp/cp-in`])
      t.equal(cp.code, 0, 'docker cp into the container', { stderr: cp.stderr })
      const cat = await direct(['exec', name, 'cat', '/tmp/cp-in'])
      t.equal(cat.stdout.toString(), `copied in by docker ${version}\n`, 'the container has the file (read directly on the engine)')
    })

    t.test('tenant: container and volume prune remove the tenant\'s own, never the admin\'s', async (t) => {
      // Made anew for each CLI: a stopped container and an unused volume, each one the tenant's and one the admin's, all with the same label.
      for (const [who, args] of [
        ['tenant', ['create', '--name', PRUNED.tenantContainer, '--label', PRUNE_LABEL, IMAGE, 'true']],
        ['admin', ['create', '--name', PRUNED.adminContainer, '--label', PRUNE_LABEL, IMAGE, 'true']],
        ['tenant', ['volume', 'create', '--label', PRUNE_LABEL, PRUNED.tenantVolume]],
        ['admin', ['volume', 'create', '--label', PRUNE_LABEL, PRUNED.adminVolume]],
      ] as const) {
        const r = who === 'tenant' ? await as('tenant', cli, args) : await direct(args)
        t.equal(r.code, 0, `${who}: docker ${args.join(' ')}`, { stderr: r.stderr })
      }
      const exists = async (args: string[]): Promise<boolean> => (await direct(args)).code === 0
      const containers = await as('tenant', cli, ['container', 'prune', '-f', ...pruneFilter])
      t.equal(containers.code, 0, 'docker container prune is allowed', { stderr: containers.stderr })
      t.match(containers.stdout.toString(), /^Deleted Containers:\n[0-9a-f]{64}\n/, 'and reports one deleted container')
      t.same([await exists(['container', 'inspect', PRUNED.tenantContainer]), await exists(['container', 'inspect', PRUNED.adminContainer])], [false, true],
        'the tenant\'s stopped container is gone, the admin\'s is still there')
      const volumes = await as('tenant', cli, ['volume', 'prune', '-f', ...pruneFilter])
      t.equal(volumes.code, 0, 'docker volume prune is allowed', { stderr: volumes.stderr })
      t.same([await exists(['volume', 'inspect', PRUNED.tenantVolume]), await exists(['volume', 'inspect', PRUNED.adminVolume])], [false, true],
        'the tenant\'s unused volume is gone, the admin\'s is still there')
      await direct(['rm', '-f', PRUNED.adminContainer])
      await direct(['volume', 'rm', PRUNED.adminVolume])
    })

    t.test('admin: docker run --privileged creates a privileged container', async (t) => {
      const name = uniqueName('pcpc-priv')
      t.teardown(async () => { await direct(['rm', '-f', name]) })
      const r = await as('admin', cli, ['run', '-d', '--privileged', '--name', name, IMAGE, 'sleep', '60'])
      t.notMatch(r.stderr, /denied by policy/, 'not refused by the gateway')
      // Privileged containers may not start on this machine (no capabilities to hand out); what was stored is what counts.
      if (r.code !== 0) t.comment(`the engine could not start it here: ${r.stderr.trim().split('\n')[0]}`)
      const c = await inspect(name)
      t.equal(c?.HostConfig?.Privileged, true, 'the engine stored HostConfig.Privileged: true')
      t.notOk(c?.Config?.Labels?.['io.portcullis.tenant'], 'without owner labels: what an admin creates belongs to no tenant')
    })

    t.test('ci: docker push is forwarded and fails at the registry; tenant: refused', async (t) => {
      // In the tenant's namespace (tenancy.yaml imageNamespace), where a CI runner of team-a may push.
      const ref = `localhost:5999/team-a/${uniqueName('pcpc')}:1`
      t.teardown(async () => { await direct(['rmi', ref]) })
      t.equal((await direct(['tag', IMAGE, ref])).code, 0, `tagged ${ref} on the engine`)
      const ci = await as('ci', cli, ['push', ref])
      t.not(ci.code, 0, 'the push fails: there is no registry')
      t.notMatch(ci.stderr, /denied by policy/, 'not refused by the gateway')
      t.match(ci.stderr, /dial tcp 127\.0\.0\.1:5999: connect: connection refused/, `the engine tried the registry: ${ci.stderr.trim().split('\n').pop()}`)
      const tenant = await as('tenant', cli, ['push', ref])
      t.not(tenant.code, 0, 'tenant push fails')
      t.match(tenant.stderr, deniedBy('ImagePush', null, 'trudy in tenant team-a'), 'refused by the gateway, naming the operation')
    })
  })
}
