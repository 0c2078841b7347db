/**
 * deploy/Dockerfile: the image, built on the private test engine from a base made
 * here (test/helpers/image.ts), runs as a non-root user that reaches the root-owned
 * engine socket through its group (--group-add), reads its config and policies from
 * mounts, keeps its audit trail on a volume, reports healthy through its HEALTHCHECK
 * (/healthz on the metrics listener), serves the docker CLI as an admin and as a
 * tenant, and stops cleanly on SIGTERM (docker stop).
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { CLI28, engine, run, uniqueName } from './helpers/gateway'
import { buildImage, docker, engineSocketGid, IMAGE } from './helpers/image'

t.setTimeout(600_000)

t.test('the image: production dependencies only, non-root, a health check, the gateway as entrypoint', async (t) => {
  buildImage()
  const cfg = JSON.parse(docker(['image', 'inspect', '-f', '{{json .Config}}', IMAGE]).stdout) as { User: string, Healthcheck: { Test: string[] }, Entrypoint: string[], Cmd: string[], Volumes: object, StopSignal?: string }
  t.equal(cfg.User, '1000:1000')
  t.match(cfg.Healthcheck.Test.join(' '), /PORTCULLIS_HEALTH_URL/)
  t.same(cfg.Entrypoint, ['node', '--max-semi-space-size=4', '/app/dist/src/cli.js'])
  t.same(cfg.Cmd, ['serve'])
  t.ok(Object.hasOwn(cfg.Volumes, '/var/lib/portcullis'), 'the audit directory is a volume')
  const deps = docker(['run', '--rm', '--entrypoint', 'node', IMAGE, '-e',
    "const fs = require('fs'); console.log(['fastify', 'casbin', 'pino', 'tap', 'typescript', 'eslint'].map((p) => p + '=' + fs.existsSync('/app/node_modules/' + p)).join(' '))"])
  t.equal(deps.stdout.trim(), 'fastify=true casbin=true pino=true tap=false typescript=false eslint=false')
})

t.test('config and policies mounted, the engine socket through its group: the docker CLI as admin and as tenant, healthy, SIGTERM', async (t) => {
  buildImage()
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pci-'))
  fs.chmodSync(dir, 0o777)
  const run1 = path.join(dir, 'run')
  fs.mkdirSync(run1)
  fs.chmodSync(run1, 0o777)
  const name = uniqueName('pci-gw')
  const volume = `${name}-audit`
  fs.writeFileSync(path.join(dir, 'portcullis.yaml'), [
    'listen:',
    '  - { unix: /run/portcullis/admin.sock, mode: "0666", identity: { subject: ops, roles: [admin] } }',
    '  - { unix: /run/portcullis/tenant.sock, mode: "0666", identity: { subject: alice, tenant: acme, roles: [tenant] } }',
    'upstream: unix:///var/run/docker.sock',
    'policy: { dir: /etc/portcullis/policies }',
    'audit: { file: /var/lib/portcullis/audit.jsonl }',
    'metrics: { listen: "127.0.0.1:9102" }',
    'shutdown: { graceSeconds: 2 }',
    '',
  ].join('\n'))
  fs.chmodSync(path.join(dir, 'portcullis.yaml'), 0o644)
  t.teardown(() => {
    docker(['rm', '-f', name], { allowFail: true })
    docker(['volume', 'rm', '-f', volume], { allowFail: true })
    fs.rmSync(dir, { recursive: true, force: true })
  })
  const policies = path.resolve(__dirname, '../../policies')
  docker(['run', '-d', '--name', name, '--group-add', String(engineSocketGid()),
    '--health-interval', '1s', '--health-start-period', '30s',
    '-v', `${engine().socket}:/var/run/docker.sock`,
    '-v', `${path.join(dir, 'portcullis.yaml')}:/etc/portcullis/portcullis.yaml:ro`,
    '-v', `${policies}:/etc/portcullis/policies:ro`,
    '-e', 'PORTCULLIS_CONFIG=/etc/portcullis/portcullis.yaml',
    '-v', `${volume}:/var/lib/portcullis`,
    '-v', `${run1}:/run/portcullis`,
    IMAGE])
  let health = ''
  for (let i = 0; i < 120 && health !== 'healthy'; i++) {
    await new Promise((resolve) => setTimeout(resolve, 500))
    health = docker(['inspect', '-f', '{{.State.Health.Status}}', name]).stdout.trim()
  }
  t.equal(health, 'healthy', health === 'healthy' ? 'healthy' : docker(['logs', name]).stdout.slice(-3000))

  const admin = { host: `unix://${path.join(run1, 'admin.sock')}`, timeoutMs: 60_000 }
  const tenant = { host: `unix://${path.join(run1, 'tenant.sock')}`, timeoutMs: 60_000 }
  const hello = await run(CLI28, ['run', '--rm', engine().image, 'echo', 'admin through the image'], admin)
  t.equal(hello.code, 0, hello.stderr)
  t.equal(hello.stdout.toString().trim(), 'admin through the image')
  const mine = await run(CLI28, ['run', '--rm', engine().image, 'echo', 'tenant through the image'], tenant)
  t.equal(mine.code, 0, mine.stderr)
  t.equal(mine.stdout.toString().trim(), 'tenant through the image')
  const privileged = await run(CLI28, ['run', '--rm', '--privileged', engine().image, 'true'], tenant)
  t.not(privileged.code, 0)
  t.match(privileged.stderr, /denied by policy rule no-privileged/)
  // The tenant sees only its own objects: not the gateway's container.
  const ps = await run(CLI28, ['ps', '-a', '--format', '{{.Names}}'], tenant)
  t.equal(ps.code, 0, ps.stderr)
  t.notMatch(ps.stdout.toString(), name)

  // docker stop sends SIGTERM: the gateway drains and exits 0, well before the kill.
  const started = Date.now()
  docker(['stop', '-t', '20', name])
  t.ok(Date.now() - started < 15_000, 'stopped on SIGTERM, not killed')
  t.equal(docker(['inspect', '-f', '{{.State.ExitCode}}', name]).stdout.trim(), '0')
  t.match(docker(['logs', name]).stdout, /"msg":"stopped"/)
  // The audit trail is on the volume, the tenant's refusal in it.
  const audit = docker(['run', '--rm', '-v', `${volume}:/a:ro`, engine().image, 'cat', '/a/audit.jsonl']).stdout
  t.match(audit, /"subject":"alice".*"rule":"no-privileged"|"rule":"no-privileged".*"subject":"alice"/)
})
