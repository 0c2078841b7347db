/**
 * The shipped presets (base.csv, "presets"; README, "Presets"): each consumer's request
 * sequence passes, and a request outside it (a privileged create) is refused.
 *
 * Where the sequences come from:
 *   - prometheus-sd: recorded from the real client. Debian's prometheus (2.42) runs with a
 *     docker_sd_configs job against the gateway's TCP listener with the preset's token;
 *     it must discover a container, and every request it made (read back from the audit
 *     trail) must have been allowed.
 *   - traefik, watchtower, log-viewer (Dozzle), dashboard (Homepage / Portainer read-only),
 *     ci-runner: none is installable here; the sequences are the Engine API calls their
 *     documentation and their Go/JS Docker client calls name (traefik's docker provider:
 *     version, container list and inspect, events; watchtower: list, inspect container and
 *     image, pull, stop, rename, create, start, remove image; Dozzle: list, inspect, logs,
 *     stats, events, info; Homepage: list, inspect, stats; a CI executor: pull, create,
 *     start, wait, logs, remove), written out here by hand, not recorded.
 */
import { randomBytes } from 'node:crypto'
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import http from 'node:http'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import jwt from 'jsonwebtoken'
import pino from 'pino'
import t, { type Test } from 'tap'
import { parseConfig } from '../src/config'
import { startGateway, type Gateway } from '../src/gateway'
import { engine, request, run, uniqueName, waitUntil } from './helpers/gateway'

const IMAGE = engine().image
const SECRET = randomBytes(32).toString('hex')
const TENANT = `team-p-${randomBytes(3).toString('hex')}`
const P = uniqueName('pcp')
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pcp-'))
t.teardown(() => fs.rmSync(tmp, { recursive: true, force: true }))

const token = (sub: string, roles: string[], tenant?: string): string =>
  jwt.sign({ sub, roles, ...(tenant ? { tenant } : {}), exp: Math.floor(Date.now() / 1000) + 3600 }, SECRET, { algorithm: 'HS256' })

let gateway: Gateway
const socket = path.join(tmp, 'gw.sock')
const auditFile = path.join(tmp, 'audit.jsonl')
let tcp = ''
const direct = async (args: readonly string[]): Promise<string> => (await run('/usr/local/bin/docker', args, { host: engine().dockerHost })).stdout.toString().trim()

t.before(async () => {
  const text = `listen:\n  - { unix: ${socket} }\n  - { tcp: 127.0.0.1:0 }\nupstream: unix://${engine().socket}\npolicy: { dir: ${path.resolve(__dirname, '../../policies')} }\n` +
    `auth: { jwt: { secret: ${SECRET} } }\naudit: { file: ${auditFile} }\nlog: { level: silent }\nshutdown: { graceSeconds: 2 }\n`
  gateway = await startGateway(parseConfig(text, path.join(tmp, 'gw.yaml')), pino({ level: 'silent' }))
  tcp = gateway.listeners.find((l) => l.config.kind === 'tcp')?.address ?? ''
  await direct(['run', '-d', '--name', `${P}-app`, '--label', 'traefik.enable=true', '--label', 'com.centurylinklabs.watchtower.enable=true', '-e', 'DB_PASSWORD=hunter2', IMAGE, 'sleep', '600'])
  await direct(['run', '-d', '--name', `${P}-hidden`, '--label', 'traefik.enable=false', IMAGE, 'sleep', '600'])
})
t.teardown(async () => {
  const ids = (await direct(['ps', '-aq', '--filter', `name=${P}`])).split('\n').filter(Boolean)
  const owned = (await direct(['ps', '-aq', '--filter', `label=io.portcullis.tenant=${TENANT}`])).split('\n').filter(Boolean)
  if (ids.length + owned.length) await direct(['rm', '-f', ...ids, ...owned])
  await gateway?.close()
})

interface Step { method: string, path: string, body?: object, want?: number }
const PRIVILEGED = { Image: IMAGE, Cmd: ['true'], HostConfig: { Privileged: true } }

async function sequence (t: Test, role: string, steps: Step[], tenant?: string): Promise<void> {
  const tk = token(`${role}-bot`, [role], tenant)
  for (const s of steps) {
    const r = await request(socket, s.method, s.path, s.body, { token: tk })
    t.equal(r.status, s.want ?? 200, `${role}: ${s.method} ${s.path.split('?')[0]}`, { answer: r.text.slice(0, 300) })
  }
  const denied = await request(socket, 'POST', `/v1.41/containers/create?name=${P}-${role}-priv`, PRIVILEGED, { token: tk })
  t.equal(denied.status, 403, `${role}: a privileged create is refused`)
  t.match(denied.json?.message, /denied by policy/, `${role}: by the policy (${String(denied.json?.message).slice(0, 120)})`)
}

const now = (): number => Math.floor(Date.now() / 1000)
const app = (): string => `${P}-app`

t.test('traefik: version, containers and their labels, events', async (t) => {
  await sequence(t, 'traefik', [
    { method: 'HEAD', path: '/_ping' },
    { method: 'GET', path: '/v1.41/version' },
    { method: 'GET', path: '/v1.41/containers/json?limit=0' },
    { method: 'GET', path: `/v1.41/containers/${app()}/json` },
    { method: 'GET', path: '/v1.41/networks' },
    { method: 'GET', path: `/v1.41/events?since=${now() - 5}&until=${now()}&filters=${encodeURIComponent('{"type":["container"]}')}` },
  ])
  const tk = token('traefik-bot', ['traefik'])
  const inspect = await request(socket, 'GET', `/v1.41/containers/${app()}/json`, undefined, { token: tk })
  t.ok(inspect.json?.Config?.Env?.includes('DB_PASSWORD=[REDACTED]'), 'it reads labels, not environment values')
  t.equal(inspect.json?.Config?.Labels?.['traefik.enable'], 'true', 'the labels it routes by')
  // Its view (tenancy.yaml views): only the containers that opt in.
  const listed = await request(socket, 'GET', '/v1.41/containers/json?all=1', undefined, { token: tk })
  const names = (listed.json as any[]).flatMap((c) => c.Names)
  t.ok(names.includes(`/${app()}`), 'its list shows the container labelled traefik.enable=true')
  t.notOk(names.includes(`/${P}-hidden`), 'and not one labelled traefik.enable=false', { names })
  t.ok((listed.json as any[]).every((c) => c.Labels?.['traefik.enable'] === 'true'), 'nor any other without the label')
  const filtered = await request(socket, 'GET', `/v1.41/containers/json?all=1&filters=${encodeURIComponent(JSON.stringify({ label: ['traefik.enable=false'] }))}`, undefined, { token: tk })
  t.same(filtered.json, [], 'a filter of its own cannot widen the view')
  const hidden = await request(socket, 'GET', `/v1.41/containers/${P}-hidden/json`, undefined, { token: tk })
  t.equal(hidden.status, 404, 'inspecting a container outside the view answers as missing')
  t.match(hidden.json?.message, /No such container/, 'in the engine\'s words')
  const hiddenId = await direct(['inspect', '-f', '{{.Id}}', `${P}-hidden`])
  t.equal((await request(socket, 'GET', `/v1.41/containers/${hiddenId.slice(0, 12)}/json`, undefined, { token: tk })).status, 404, 'by id prefix as well')
  const shown = await request(socket, 'GET', `/v1.41/containers/${app()}/json`, undefined, { token: tk })
  t.equal(shown.status, 200, 'the container in view is inspected')
  const admin = await request(socket, 'GET', `/v1.41/containers/${P}-hidden/json`, undefined, { token: token('ops', ['admin']) })
  t.equal(admin.status, 200, 'an admin (no view) sees the hidden one')
  for (const [m, p] of [['POST', `/v1.41/containers/${app()}/stop`], ['GET', `/v1.41/containers/${app()}/logs?stdout=1`], ['POST', `/v1.41/containers/${app()}/exec`]]) {
    t.equal((await request(socket, m, p, m === 'POST' ? { Cmd: ['true'] } : undefined, { token: tk })).status, 403, `nothing else: ${m} ${p.split('/').pop()}`)
  }
})

t.test('watchtower: finds, pulls, recreates', async (t) => {
  const name = `${P}-wt`
  await sequence(t, 'watchtower', [
    { method: 'GET', path: '/v1.41/version' },
    { method: 'GET', path: '/v1.41/info' },
    { method: 'GET', path: `/v1.41/containers/json?filters=${encodeURIComponent('{"status":["running"]}')}` },
    { method: 'GET', path: `/v1.41/containers/${app()}/json` },
    { method: 'GET', path: `/v1.41/images/${IMAGE}/json` },
    { method: 'POST', path: `/v1.41/containers/create?name=${name}`, body: { Image: IMAGE, Cmd: ['sleep', '60'], Labels: { 'com.centurylinklabs.watchtower.enable': 'true' }, HostConfig: { Binds: ['/srv/wt-data:/data'] } }, want: 201 },
    { method: 'POST', path: `/v1.41/containers/${name}/start`, want: 204 },
    { method: 'POST', path: `/v1.41/containers/${name}/stop?t=1`, want: 204 },
    { method: 'POST', path: `/v1.41/containers/${name}/rename?name=${name}-old`, want: 204 },
    { method: 'DELETE', path: `/v1.41/containers/${name}-old?v=1`, want: 204 },
  ])
  const tk = token('watchtower-bot', ['watchtower'])
  for (const [what, body] of [
    ['the engine socket bound in', { Image: IMAGE, HostConfig: { Binds: ['/var/run/docker.sock:/var/run/docker.sock'] } }],
    ['the host pid namespace', { Image: IMAGE, HostConfig: { PidMode: 'host' } }],
    ['SYS_ADMIN', { Image: IMAGE, HostConfig: { CapAdd: ['SYS_ADMIN'] } }],
  ] as const) {
    t.equal((await request(socket, 'POST', '/v1.41/containers/create', body, { token: tk })).status, 403, `a recreate with ${what} is refused`)
  }
  t.equal((await request(socket, 'POST', '/v1.41/volumes/create', { Name: `${P}-v` }, { token: tk })).status, 403, 'no volumes')
})

t.test('log-viewer (Dozzle): containers, logs, stats, events', async (t) => {
  await sequence(t, 'log-viewer', [
    { method: 'GET', path: '/v1.41/info' },
    { method: 'GET', path: '/v1.41/containers/json?all=1' },
    { method: 'GET', path: `/v1.41/containers/${app()}/json` },
    { method: 'GET', path: `/v1.41/containers/${app()}/logs?stdout=1&stderr=1&timestamps=1&tail=300` },
    { method: 'GET', path: `/v1.41/containers/${app()}/stats?stream=false` },
    { method: 'GET', path: `/v1.41/events?since=${now() - 5}&until=${now()}` },
  ])
  t.equal((await request(socket, 'POST', `/v1.41/containers/${app()}/restart`, undefined, { token: token('lv', ['log-viewer']) })).status, 403, 'no actions')
})

t.test('dashboard (Homepage, Portainer read-only): lists, inspects, stats', async (t) => {
  await sequence(t, 'dashboard', [
    { method: 'GET', path: '/v1.41/info' },
    { method: 'GET', path: '/v1.41/containers/json?all=1' },
    { method: 'GET', path: `/v1.41/containers/${app()}/json` },
    { method: 'GET', path: `/v1.41/containers/${app()}/stats?stream=false` },
    { method: 'GET', path: '/v1.41/images/json' },
    { method: 'GET', path: '/v1.41/volumes' },
    { method: 'GET', path: '/v1.41/networks' },
  ])
  const tk = token('dash', ['dashboard'])
  t.equal((await request(socket, 'GET', `/v1.41/containers/${app()}/logs?stdout=1`, undefined, { token: tk })).status, 403, 'no logs')
  t.equal((await request(socket, 'DELETE', `/v1.41/containers/${app()}?force=1`, undefined, { token: tk })).status, 403, 'no removal')
})

t.test('ci-runner: a tenant\'s job (pull, create, start, wait, logs, remove)', async (t) => {
  const name = `${P}-job`
  await sequence(t, 'ci-runner', [
    { method: 'GET', path: '/v1.41/version' },
    { method: 'GET', path: `/v1.41/images/${IMAGE}/json` },
    { method: 'POST', path: `/v1.41/containers/create?name=${name}`, body: { Image: IMAGE, Cmd: ['echo', 'built'] }, want: 201 },
    { method: 'POST', path: `/v1.41/containers/${name}/start`, want: 204 },
    { method: 'POST', path: `/v1.41/containers/${name}/wait` },
    { method: 'GET', path: `/v1.41/containers/${name}/logs?stdout=1` },
    { method: 'DELETE', path: `/v1.41/containers/${name}?v=1`, want: 204 },
  ], TENANT)
  const tk = token('ci-runner-bot', ['ci-runner'], TENANT)
  t.equal((await request(socket, 'GET', `/v1.41/containers/${app()}/json`, undefined, { token: tk })).status, 404, 'scoped to its tenant: the admin\'s container is not there')
})

/** A free TCP port on 127.0.0.1. */
async function freePort (): Promise<number> {
  return await new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address() as net.AddressInfo
      s.close(() => resolve(port))
    })
  })
}

async function getJson (url: string): Promise<any> {
  return await new Promise((resolve) => {
    http.get(url, (res) => {
      let text = ''
      res.on('data', (c: Buffer) => { text += c.toString() })
      res.on('end', () => { try { resolve(JSON.parse(text)) } catch { resolve(null) } })
    }).on('error', () => resolve(null))
  })
}

t.test('prometheus-sd: the real Prometheus discovers containers through it', async (t) => {
  const port = await freePort()
  const tk = token('prometheus', ['prometheus-sd'])
  const cfg = path.join(tmp, 'prometheus.yml')
  fs.writeFileSync(cfg, `global: { scrape_interval: 1h }\nscrape_configs:\n  - job_name: docker\n    docker_sd_configs:\n      - host: http://${tcp}\n        refresh_interval: 1s\n        authorization: { credentials: ${tk} }\n`)
  const prom = spawn('/usr/bin/prometheus', [`--config.file=${cfg}`, `--storage.tsdb.path=${path.join(tmp, 'tsdb')}`, `--web.listen-address=127.0.0.1:${port}`], { stdio: ['ignore', 'ignore', 'pipe'] })
  let log = ''
  prom.stderr.on('data', (b: Buffer) => { log = (log + b.toString()).slice(-4000) })
  t.teardown(() => { prom.kill('SIGTERM') })
  let names: string[] = []
  await waitUntil(() => {
    void getJson(`http://127.0.0.1:${port}/api/v1/targets?state=any`).then((r) => {
      const all = [...(r?.data?.activeTargets ?? []), ...(r?.data?.droppedTargets ?? [])]
      names = all.map((x: any) => x.discoveredLabels?.__meta_docker_container_name).filter(Boolean)
    })
    return names.includes(`/${app()}`)
  }, 30_000).catch(() => undefined)
  t.ok(names.includes(`/${app()}`), 'the container is discovered, with its labels', { log: log.slice(-1500) })
  const records = fs.readFileSync(auditFile, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l)).filter((r) => r.identity?.subject === 'prometheus')
  const ops = [...new Set(records.map((r) => r.operation))].sort()
  t.ok(records.length > 0, `Prometheus' requests are in the trail: ${ops.join(', ')}`)
  t.same(records.filter((r) => r.decision !== 'allow' || r.status >= 400).map((r) => `${r.operation} ${r.status}`), [], 'every one was allowed and answered')
  t.ok(ops.includes('ContainerList') && ops.includes('NetworkList'), 'containers and networks')
  const denied = await request(socket, 'GET', `/v1.41/containers/${app()}/json`, undefined, { token: tk })
  t.equal(denied.status, 403, 'nothing beyond discovery: no inspect')
  const priv = await request(socket, 'POST', '/v1.41/containers/create', PRIVILEGED, { token: tk })
  t.equal(priv.status, 403, 'a privileged create is refused')
})
