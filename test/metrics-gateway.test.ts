// Metrics as an SRE sees them: a gateway in front of the real engine, scraped on its
// own listener while real requests (allowed, denied, streamed, hijacked) go through.
import fs from 'node:fs'
import http from 'node:http'
import jwt from 'jsonwebtoken'
import t from 'tap'
import { CLI28, engine, run, startTestGateway, uniqueName } from './helpers/gateway'

async function get (address: string, path: string): Promise<{ status: number, body: string }> {
  const [host, port] = address.split(':')
  return await new Promise((resolve, reject) => {
    http.get({ host, port: Number(port), path, agent: false }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (c: string) => { body += c })
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }))
    }).on('error', reject)
  })
}

/** The value of one series line, e.g. `portcullis_requests_total{...}`; 0 when absent. */
function value (text: string, name: string, labels: Record<string, string>): number {
  const want = Object.entries(labels).map(([k, v]) => `${k}="${v}"`)
  for (const line of text.split('\n')) {
    if (!line.startsWith(name + '{') && !line.startsWith(name + ' ')) continue
    if (want.every((w) => line.includes(w))) return Number(line.slice(line.lastIndexOf(' ') + 1))
  }
  return 0
}

t.test('requests, denials, streams and sessions show up with bounded labels', async (t) => {
  const secret = 'metrics-test-secret'
  const gw = await startTestGateway(`auth: { jwt: { secret: ${secret} } }\nmetrics: { listen: 127.0.0.1:0, tenants: [team-a] }\n`)
  t.teardown(() => gw.close())
  const address = gw.gateway.metricsServer?.address ?? ''
  t.match(address, /^127\.0\.0\.1:\d+$/, 'metrics listener on its own address')

  t.equal((await get(address, '/healthz')).status, 200)
  const ready = await get(address, '/readyz')
  t.equal(ready.status, 200, `ready: ${ready.body}`)

  const token = jwt.sign({ sub: 'trudy', tenant: 'team-a', roles: ['tenant'] }, secret, { expiresIn: 600 })
  const dir = fs.mkdtempSync('/tmp/pcm-')
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  fs.writeFileSync(`${dir}/config.json`, JSON.stringify({ HttpHeaders: { Authorization: `Bearer ${token}` } }))
  const env = { DOCKER_CONFIG: dir }
  const name = uniqueName('pcm')
  t.teardown(async () => { await run(CLI28, ['rm', '-f', name], { host: engine().dockerHost }) })

  t.equal((await run(CLI28, ['run', '--rm', '--name', name, engine().image, 'echo', 'hi'], { host: gw.dockerHost, env })).stdout.toString(), 'hi\n', 'tenant run works')
  const denied = await run(CLI28, ['run', '--rm', '--privileged', engine().image, 'true'], { host: gw.dockerHost, env })
  t.match(denied.stderr, /no-privileged/, 'tenant privileged run is denied')

  const text = (await get(address, '/metrics')).body
  t.ok(value(text, 'portcullis_requests_total', { operation: 'ContainerCreate', tenant: 'team-a', decision: 'allow', code: '2xx' }) >= 1, 'allowed create counted')
  t.ok(value(text, 'portcullis_requests_total', { operation: 'ContainerCreate', tenant: 'team-a', decision: 'deny', code: '4xx' }) >= 1, 'denied create counted')
  t.ok(value(text, 'portcullis_denials_total', { rule: 'no-privileged' }) >= 1, 'denial counted by rule id')
  t.ok(value(text, 'portcullis_request_duration_seconds_count', { operation: 'ContainerAttach' }) >= 1, 'hijacked attach observed')
  t.ok(value(text, 'portcullis_upstream_duration_seconds_count', { operation: 'ContainerCreate' }) >= 1, 'upstream duration observed')
  t.match(text, /portcullis_policy_info\{version="[0-9a-f]{12}"\} 1/, 'policy version exported')
  t.match(text, /portcullis_process_resident_memory_bytes \d+/, 'process metrics included')
  t.notMatch(text, /trudy|pcm-[0-9a-f]{8}|[0-9a-f]{64}/, 'no subjects, names or ids in any label')
  t.equal(value(text, 'portcullis_active_hijacked_sessions', {}), 0, 'no session left open')
})

t.test('readyz answers 503 naming the engine when the engine is unreachable', async (t) => {
  const gw = await startTestGateway('metrics: { listen: 127.0.0.1:0 }\n', 'unix:///tmp/portcullis-no-such-engine.sock')
  t.teardown(() => gw.close())
  const r = await get(gw.gateway.metricsServer?.address ?? '', '/readyz')
  t.equal(r.status, 503)
  t.match(JSON.parse(r.body), { failing: ['engine'] })
  await run(CLI28, ['version'], { host: gw.dockerHost })
  const text = (await get(gw.gateway.metricsServer?.address ?? '', '/metrics')).body
  t.ok(value(text, 'portcullis_upstream_errors_total', { kind: 'unreachable' }) >= 1, 'upstream errors counted by kind')
})
