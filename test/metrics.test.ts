/**
 * Metrics: label bounding, what each call moves, the metrics listener's endpoints,
 * the metrics section of the configuration, and the deploy/ files (Prometheus
 * config, alerting rules, Grafana dashboard). Unit level: no engine.
 */
import t from 'tap'
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import pino from 'pino'
import { register as globalRegister } from 'prom-client'
import YAML from 'yaml'
import { ConfigError, describeConfig, parseConfig } from '../src/config'
import { DURATION_BUCKETS, Metrics, statusClass, type ObservedRequest } from '../src/metrics'
import { startMetricsServer, type Readiness } from '../src/metrics/server'

const ROOT = path.resolve(__dirname, '../..')
const DEPLOY = path.join(ROOT, 'deploy')
const silent = pino({ level: 'silent' })

// ---------------------------------------------------------------------------
// A small reader for the Prometheus text format.

interface Sample { readonly name: string, readonly labels: Record<string, string>, readonly value: number }

function parseLabels (text: string): Record<string, string> {
  const out: Record<string, string> = {}
  const re = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(,|$)/y
  let m: RegExpExecArray | null
  while ((m = re.exec(text)) !== null) out[m[1]!] = m[2]!.replace(/\\(.)/g, (_s, c: string) => (c === 'n' ? '\n' : c))
  if (re.lastIndex !== 0 && re.lastIndex !== text.length) throw new Error(`bad labels: ${text}`)
  return out
}

/** Every sample; throws on a line that is not a comment, blank, or `name{labels} value`. */
function parseProm (text: string): Sample[] {
  const out: Sample[] = []
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line)
    if (!m) throw new Error(`not a sample line: ${JSON.stringify(line)}`)
    // As Go's ParseFloat reads them: NaN and Inf in any letter case (prom-client writes `Nan`).
    const v = m[3]!.toLowerCase()
    const value = v === 'nan' ? NaN : v === '+inf' || v === 'inf' ? Infinity : v === '-inf' ? -Infinity : Number(m[3])
    if (Number.isNaN(value) && v !== 'nan') throw new Error(`bad value: ${line}`)
    out.push({ name: m[1]!, labels: m[2] ? parseLabels(m[2]) : {}, value })
  }
  return out
}

function matching (samples: Sample[], name: string, labels: Record<string, string> = {}): Sample[] {
  return samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))
}

/** The value of the one series of `name` that has `labels` (a subset), or undefined if there is none. */
function value (samples: Sample[], name: string, labels: Record<string, string> = {}): number | undefined {
  const found = matching(samples, name, labels)
  if (found.length > 1) throw new Error(`${found.length} series of ${name} match ${JSON.stringify(labels)}`)
  return found[0]?.value
}

async function scrape (m: Metrics): Promise<Sample[]> {
  return parseProm(await m.metrics())
}

function newMetrics (): Metrics {
  return new Metrics({ tenants: ['acme', 'globex'], listeners: ['unix', 'tcp'], version: '9.8.7' })
}

const base: ObservedRequest = {
  operation: 'ContainerList',
  listener: 'unix',
  tenant: 'acme',
  decision: 'allow',
  status: 200,
  durationMs: 3,
  upstreamMs: 2,
  bytesIn: 0,
  bytesOut: 100,
}

// ---------------------------------------------------------------------------

t.test('status classes', async (t) => {
  t.equal(statusClass(101), '1xx')
  t.equal(statusClass(200), '2xx')
  t.equal(statusClass(304), '3xx')
  t.equal(statusClass(403), '4xx')
  t.equal(statusClass(599), '5xx')
  t.equal(statusClass(0), 'none')
  t.equal(statusClass(600), 'none')
  t.equal(statusClass(NaN), 'none')
})

t.test('labels are bounded', async (t) => {
  const m = newMetrics()
  m.observeRequest({ ...base, tenant: 'acme' })
  m.observeRequest({ ...base, tenant: 'initech-secret-team' })
  m.observeRequest({ ...base, tenant: 'another-unlisted' })
  m.observeRequest({ ...base, tenant: null })
  m.observeRequest({ ...base, tenant: 'other' })
  m.observeRequest({ ...base, operation: null, decision: null, status: 404, tenant: null })
  m.observeRequest({ ...base, operation: '/containers/abc123/json', decision: null, status: 400, tenant: null })
  m.observeRequest({ ...base, listener: 'not-configured', decision: 'maybe', status: 101 })
  const s = await scrape(m)
  const requests = (labels: Record<string, string>) => matching(s, 'portcullis_requests_total', labels).reduce((a, x) => a + x.value, 0)

  t.equal(requests({ tenant: 'acme' }), 2, 'a listed tenant keeps its name (also with an unknown listener)')
  t.equal(requests({ tenant: 'other' }), 3, 'unlisted tenants (and one literally called "other") are other')
  t.equal(requests({ tenant: 'none' }), 3, 'no tenant is none')
  t.equal(requests({ operation: 'none' }), 2, 'no operation, or one the catalog does not know, is none')
  t.equal(value(s, 'portcullis_requests_total', { operation: 'none', code: '4xx', decision: 'none', tenant: 'none' }), 2)
  t.equal(requests({ decision: 'none', code: '1xx' }), 1, 'an unknown decision is none; 101 is 1xx')
  t.equal(value(s, 'portcullis_request_duration_seconds_count', { operation: 'ContainerList', listener: 'other' }), 1, 'an unknown listener is other')

  const text = await m.metrics()
  for (const leaked of ['initech', 'another-unlisted', 'abc123', 'not-configured', 'maybe', '/containers']) {
    t.notOk(text.includes(leaked), `${leaked} does not appear in any label`)
  }
  const tenants = new Set(matching(s, 'portcullis_requests_total').map((x) => x.labels['tenant']))
  t.same([...tenants].sort(), ['acme', 'none', 'other'])
})

t.test('observeRequest moves counters and histograms', async (t) => {
  const m = newMetrics()
  const before = await scrape(m)
  t.equal(value(before, 'portcullis_requests_total'), undefined, 'no request series before the first request')

  m.observeRequest({ ...base, durationMs: 3, upstreamMs: 2, bytesIn: 0, bytesOut: 100 })
  m.observeRequest({ ...base, durationMs: 1500, upstreamMs: 1400, bytesIn: 50, bytesOut: 1000 })
  // Refused by the policy: never forwarded, no upstream time.
  m.observeRequest({ ...base, operation: 'ContainerCreate', decision: 'deny', status: 403, rule: 'no-privileged', durationMs: 1, upstreamMs: undefined, bytesIn: 300, bytesOut: 60 })
  m.observeRequest({ ...base, operation: 'ContainerCreate', decision: 'deny', status: 403, rule: null, durationMs: 1, upstreamMs: undefined, bytesIn: 10, bytesOut: 60 })
  m.observeRequest({ ...base, operation: 'ContainerCreate', decision: 'would_deny', status: 201, rule: 'allow-all', wouldDeny: ['audit-mounts', 'audit-mounts', 'audit-caps'], durationMs: 20, upstreamMs: 15, bytesIn: 300, bytesOut: 80 })
  const s = await scrape(m)

  t.equal(value(s, 'portcullis_requests_total', { operation: 'ContainerList', tenant: 'acme', decision: 'allow', code: '2xx' }), 2)
  t.equal(value(s, 'portcullis_requests_total', { operation: 'ContainerCreate', decision: 'deny', code: '4xx' }), 2)
  t.equal(value(s, 'portcullis_requests_total', { operation: 'ContainerCreate', decision: 'would_deny', code: '2xx' }), 1)

  const list = { operation: 'ContainerList', listener: 'unix' }
  t.equal(value(s, 'portcullis_request_duration_seconds_count', list), 2)
  t.ok(Math.abs(value(s, 'portcullis_request_duration_seconds_sum', list)! - 1.503) < 1e-9, 'sum in seconds')
  t.equal(value(s, 'portcullis_request_duration_seconds_bucket', { ...list, le: '0.0025' }), 0)
  t.equal(value(s, 'portcullis_request_duration_seconds_bucket', { ...list, le: '0.005' }), 1, '3 ms falls in the 5 ms bucket')
  t.equal(value(s, 'portcullis_request_duration_seconds_bucket', { ...list, le: '2.5' }), 2)
  t.equal(value(s, 'portcullis_request_duration_seconds_bucket', { ...list, le: '+Inf' }), 2)
  const les = matching(s, 'portcullis_request_duration_seconds_bucket', list).map((x) => x.labels['le'])
  t.same(les, [...DURATION_BUCKETS.map(String), '+Inf'], 'buckets from 0.5 ms to 60 s')
  t.equal(les[0], '0.0005')
  t.equal(les.at(-2), '60')

  t.equal(value(s, 'portcullis_upstream_duration_seconds_count', { operation: 'ContainerList' }), 2)
  t.ok(Math.abs(value(s, 'portcullis_upstream_duration_seconds_sum', { operation: 'ContainerList' })! - 1.402) < 1e-9)
  t.equal(value(s, 'portcullis_upstream_duration_seconds_count', { operation: 'ContainerCreate' }), 1, 'denied requests have no upstream time')

  t.equal(value(s, 'portcullis_request_bytes_total', { operation: 'ContainerList' }), 50)
  t.equal(value(s, 'portcullis_response_bytes_total', { operation: 'ContainerList' }), 1100)
  t.equal(value(s, 'portcullis_request_bytes_total', { operation: 'ContainerCreate' }), 610)

  t.equal(value(s, 'portcullis_denials_total', { rule: 'no-privileged' }), 1)
  t.equal(value(s, 'portcullis_denials_total', { rule: 'none' }), 1, 'default deny (no rule matched) is rule none')
  t.equal(value(s, 'portcullis_denials_total', { rule: 'allow-all' }), undefined, 'an allowing rule is not a denial')
  t.equal(value(s, 'portcullis_would_deny_total', { rule: 'audit-mounts' }), 1, 'each rule once per request')
  t.equal(value(s, 'portcullis_would_deny_total', { rule: 'audit-caps' }), 1)

  // Bad numbers do not throw (prom-client refuses negative increments) and count as 0.
  m.observeRequest({ ...base, durationMs: -1, upstreamMs: NaN, bytesIn: -5, bytesOut: Infinity })
  const after = await scrape(m)
  t.equal(value(after, 'portcullis_request_bytes_total', { operation: 'ContainerList' }), 50)
  t.equal(value(after, 'portcullis_upstream_duration_seconds_count', { operation: 'ContainerList' }), 2, 'NaN upstream time is not observed')
  t.equal(value(after, 'portcullis_request_duration_seconds_bucket', { ...list, le: '0.0005' }), 1, 'a negative duration counts as 0')
})

t.test('streams, sessions, audit, upstream errors, build info', async (t) => {
  const m = newMetrics()
  let s = await scrape(m)
  t.equal(value(s, 'portcullis_active_streams'), 0)
  t.equal(value(s, 'portcullis_active_hijacked_sessions', { listener: 'unix' }), 0, 'configured listeners start at 0')
  t.equal(value(s, 'portcullis_audit_failures_total'), 0)
  for (const kind of ['unreachable', 'failed', 'timeout']) t.equal(value(s, 'portcullis_upstream_errors_total', { kind }), 0, `${kind} starts at 0`)

  const a = m.streamOpened()
  const b = m.streamOpened()
  const x = m.sessionOpened('tcp')
  const y = m.sessionOpened('somewhere-else')
  s = await scrape(m)
  t.equal(value(s, 'portcullis_active_streams'), 2)
  t.equal(value(s, 'portcullis_active_hijacked_sessions', { listener: 'tcp' }), 1)
  t.equal(value(s, 'portcullis_active_hijacked_sessions', { listener: 'other' }), 1)
  a(); a(); a()
  x(); x()
  s = await scrape(m)
  t.equal(value(s, 'portcullis_active_streams'), 1, 'a closer counts once')
  t.equal(value(s, 'portcullis_active_hijacked_sessions', { listener: 'tcp' }), 0)
  b(); y()
  s = await scrape(m)
  t.equal(value(s, 'portcullis_active_streams'), 0)
  t.equal(value(s, 'portcullis_active_hijacked_sessions', { listener: 'other' }), 0)

  m.auditWritten(); m.auditWritten(); m.auditFailed()
  m.upstreamError('unreachable'); m.upstreamError('timeout'); m.upstreamError('timeout')
  m.upstreamError('bogus' as 'failed')
  s = await scrape(m)
  t.equal(value(s, 'portcullis_audit_records_total'), 2)
  t.equal(value(s, 'portcullis_audit_failures_total'), 1)
  t.equal(value(s, 'portcullis_upstream_errors_total', { kind: 'unreachable' }), 1)
  t.equal(value(s, 'portcullis_upstream_errors_total', { kind: 'timeout' }), 2)
  t.equal(value(s, 'portcullis_upstream_errors_total', { kind: 'failed' }), 1, 'an unknown kind is failed')
  t.equal(matching(s, 'portcullis_upstream_errors_total').length, 3)

  t.equal(value(s, 'portcullis_build_info', { version: '9.8.7', node: process.version }), 1)
  t.ok(value(s, 'portcullis_process_resident_memory_bytes')! > 0, 'process metrics, prefixed')
  t.ok(matching(s, 'portcullis_nodejs_heap_size_used_bytes').length === 1)
})

t.test('policy_info follows the version in force; reloads are counted', async (t) => {
  const m = newMetrics()
  let s = await scrape(m)
  t.equal(value(s, 'portcullis_policy_reloads_total', { result: 'ok' }), 0)
  t.equal(value(s, 'portcullis_policy_reloads_total', { result: 'error' }), 0)
  t.equal(value(s, 'portcullis_policy_last_reload_successful'), 1)
  t.equal(matching(s, 'portcullis_policy_info').length, 0, 'no version before one is set')

  m.setPolicyVersion('aaaaaaaaaaaa')
  s = await scrape(m)
  t.same(matching(s, 'portcullis_policy_info').map((x) => [x.labels['version'], x.value]), [['aaaaaaaaaaaa', 1]])
  t.equal(value(s, 'portcullis_policy_reloads_total', { result: 'ok' }), 0, 'setting the start-up version is not a reload')

  m.policyReloaded(true, 'bbbbbbbbbbbb')
  s = await scrape(m)
  t.same(matching(s, 'portcullis_policy_info').map((x) => [x.labels['version'], x.value]), [['bbbbbbbbbbbb', 1]], 'old version label removed')
  t.equal(value(s, 'portcullis_policy_reloads_total', { result: 'ok' }), 1)

  m.policyReloaded(false, 'bbbbbbbbbbbb')
  s = await scrape(m)
  t.same(matching(s, 'portcullis_policy_info').map((x) => x.labels['version']), ['bbbbbbbbbbbb'], 'a failed reload keeps the running version')
  t.equal(value(s, 'portcullis_policy_reloads_total', { result: 'error' }), 1)
  t.equal(value(s, 'portcullis_policy_last_reload_successful'), 0)

  m.policyReloaded(true, 'bbbbbbbbbbbb')
  m.policyReloaded(true, 'cccccccccccc')
  s = await scrape(m)
  t.same(matching(s, 'portcullis_policy_info').map((x) => x.labels['version']), ['cccccccccccc'])
  t.equal(value(s, 'portcullis_policy_reloads_total', { result: 'ok' }), 3)
  t.equal(value(s, 'portcullis_policy_last_reload_successful'), 1)
})

t.test('a private registry per instance', async (t) => {
  const a = newMetrics()
  const b = newMetrics()
  a.auditWritten()
  t.equal(value(await scrape(a), 'portcullis_audit_records_total'), 1)
  t.equal(value(await scrape(b), 'portcullis_audit_records_total'), 0, 'instances do not share series')
  t.notOk((await globalRegister.metrics()).includes('portcullis_'), 'nothing in the global registry')
  t.match(a.contentType, /^text\/plain; version=0\.0\.4/)
})

t.test('the prom text parses and has HELP and TYPE for every family', async (t) => {
  const m = newMetrics()
  m.observeRequest({ ...base, tenant: 'has "quotes" \\ and\nnewline' })
  m.setPolicyVersion('v1')
  const text = await m.metrics()
  const samples = parseProm(text)
  t.ok(samples.length > 50)
  const types = new Map<string, string>()
  for (const line of text.split('\n')) {
    const tm = /^# TYPE (\S+) (counter|gauge|histogram|summary|untyped)$/.exec(line)
    if (tm) types.set(tm[1]!, tm[2]!)
  }
  t.equal(types.get('portcullis_requests_total'), 'counter')
  t.equal(types.get('portcullis_request_duration_seconds'), 'histogram')
  t.equal(types.get('portcullis_active_streams'), 'gauge')
  t.equal(types.get('portcullis_policy_info'), 'gauge')
  for (const s of samples) {
    const family = s.name.replace(/_(bucket|sum|count)$/, '')
    t.ok(s.name.startsWith('portcullis_'), `${s.name} is prefixed`)
    if (!types.has(s.name) && !types.has(family)) t.fail(`${s.name} has no TYPE line`)
  }
  t.match(text, /^# HELP portcullis_requests_total .+$/m)
  t.match(text, /^portcullis_requests_total\{operation="ContainerList",tenant="other",decision="allow",code="2xx"\} 1$/m)
  t.match(text, /^portcullis_policy_info\{version="v1"\} 1$/m)
  t.match(text, /^portcullis_build_info\{version="9\.8\.7",node="v\d+\.\d+\.\d+"\} 1$/m)
})

// ---------------------------------------------------------------------------
// The metrics listener

interface Got { status: number, type: string | null, text: string }

async function get (address: string, p: string, method = 'GET'): Promise<Got> {
  const res = await fetch(`http://${address}${p}`, { method })
  return { status: res.status, type: res.headers.get('content-type'), text: await res.text() }
}

t.test('metrics server: /metrics, /healthz, /readyz, 404 for the rest', async (t) => {
  const m = newMetrics()
  m.auditWritten()
  let state: Readiness | Error | 'hang' = { engine: true, policy: true, detail: { policyVersion: 'abc' } }
  const readiness = async (): Promise<Readiness> => {
    if (state === 'hang') return new Promise<Readiness>(() => {})
    if (state instanceof Error) throw state
    return state
  }
  const server = await startMetricsServer({ host: '127.0.0.1', port: 0 }, m, readiness, silent, { readinessTimeoutMs: 100 })
  t.teardown(() => server.close())
  t.match(server.address, /^127\.0\.0\.1:\d+$/)
  t.not(server.address, '127.0.0.1:0')

  const metrics = await get(server.address, '/metrics')
  t.equal(metrics.status, 200)
  t.match(metrics.type, /^text\/plain; version=0\.0\.4/)
  const s = parseProm(metrics.text)
  t.equal(value(s, 'portcullis_audit_records_total'), 1)
  t.equal(value(s, 'portcullis_ready', { check: 'engine' }), 1, 'a scrape refreshes readiness')
  t.equal(value(s, 'portcullis_ready', { check: 'policy' }), 1)

  const health = await get(server.address, '/healthz')
  t.equal(health.status, 200)
  t.match(health.type, /^application\/json/)
  t.same(JSON.parse(health.text), { status: 'ok' })

  let ready = await get(server.address, '/readyz')
  t.equal(ready.status, 200)
  t.same(JSON.parse(ready.text), { status: 'ready', engine: true, policy: true, detail: { policyVersion: 'abc' } })

  state = { engine: false, policy: true, detail: { engine: 'connect ENOENT /run/docker.sock' } }
  ready = await get(server.address, '/readyz')
  t.equal(ready.status, 503)
  t.same(JSON.parse(ready.text), { status: 'not ready', engine: false, policy: true, failing: ['engine'], detail: { engine: 'connect ENOENT /run/docker.sock' } })
  t.equal(value(parseProm(await m.metrics()), 'portcullis_ready', { check: 'engine' }), 0, '/readyz records what it found')
  t.equal((await get(server.address, '/healthz')).status, 200, 'healthz stays 200 while not ready')

  state = { engine: true, policy: false }
  ready = await get(server.address, '/readyz')
  t.equal(ready.status, 503)
  t.same(JSON.parse(ready.text).failing, ['policy'])

  state = new Error('boom')
  ready = await get(server.address, '/readyz')
  t.equal(ready.status, 503)
  t.match(JSON.parse(ready.text), { status: 'not ready', failing: ['engine', 'policy'], error: 'boom' })

  state = 'hang'
  ready = await get(server.address, '/readyz')
  t.equal(ready.status, 503, 'a check that hangs times out')
  t.match(JSON.parse(ready.text), { error: /timed out after 100 ms/ })
  const hung = await get(server.address, '/metrics')
  t.equal(hung.status, 200, '/metrics still answers when the readiness check hangs')
  t.equal(value(parseProm(hung.text), 'portcullis_ready', { check: 'engine' }), 0)

  for (const [method, p] of [['GET', '/'], ['GET', '/metrics/'], ['GET', '/Metrics'], ['GET', '/v1.41/containers/json'], ['GET', '/_ping'], ['POST', '/metrics'], ['HEAD', '/metrics'], ['DELETE', '/healthz'], ['GET', '/readyz/x']] as const) {
    const r = await get(server.address, p, method)
    t.equal(r.status, 404, `${method} ${p} is 404`)
  }
  t.same(JSON.parse((await get(server.address, '/nope')).text), { message: 'not found' })
  const q = await get(server.address, '/healthz?verbose=1')
  t.equal(q.status, 200, 'a query string does not change the path')
})

t.test('metrics server: close frees the port', async (t) => {
  const server = await startMetricsServer({ host: '127.0.0.1', port: 0 }, newMetrics(), async () => ({ engine: true, policy: true }), silent)
  const address = server.address
  await server.close()
  await t.rejects(fetch(`http://${address}/healthz`))
})

// ---------------------------------------------------------------------------
// The metrics section of the configuration

function problemsOf (text: string): string[] {
  try {
    parseConfig(text, path.join(ROOT, 'p.yaml'))
  } catch (err) {
    if (err instanceof ConfigError) return err.problems
    throw err
  }
  return []
}

t.test('config: metrics.tenants', async (t) => {
  const c = parseConfig('metrics: { listen: 127.0.0.1:9323, tenants: [acme, globex] }\n', path.join(ROOT, 'p.yaml'))
  t.same(c.metrics, { listen: { host: '127.0.0.1', port: 9323 }, tenants: ['acme', 'globex'] })
  t.ok(Object.isFrozen(c.metrics.tenants))
  t.same(describeConfig(c)['metrics'], { listen: '127.0.0.1:9323', tenants: ['acme', 'globex'] })

  t.same(parseConfig('metrics: { tenants: [] }\n', path.join(ROOT, 'p.yaml')).metrics, { tenants: [] })
  t.same(parseConfig('metrics: { listen: 127.0.0.1:9323 }\n', path.join(ROOT, 'p.yaml')).metrics, { listen: { host: '127.0.0.1', port: 9323 } }, 'absent: no tenants key')

  t.same(problemsOf('metrics: { tenants: acme }\n'), ['metrics.tenants: expected a list of strings, got "acme"'])
  t.same(problemsOf('metrics: { tenants: [acme, 7, ""] }\n'), ['metrics.tenants[1]: expected a string, got number 7', 'metrics.tenants[2]: must not be empty'])
  t.same(problemsOf('metrics: { tenants: [acme, other, none, acme] }\n'), [
    'metrics.tenants[1]: "other" is reserved (the label value for unlisted tenants)',
    'metrics.tenants[2]: "none" is reserved (the label value for requests without a tenant)',
    'metrics.tenants[3]: "acme" is listed more than once',
  ])
  t.same(problemsOf(`metrics: { tenants: ["${'x'.repeat(129)}", "a\\tb"] }\n`), [
    `metrics.tenants[0]: a tenant name must be at most 128 characters without control characters, got "${'x'.repeat(77)}..."`,
    'metrics.tenants[1]: a tenant name must be at most 128 characters without control characters, got "a\\tb"',
  ])
  const many = Array.from({ length: 101 }, (_v, i) => `t${i}`).join(', ')
  t.same(problemsOf(`metrics: { tenants: [${many}] }\n`), ['metrics.tenants: at most 100 tenants, got 101'])
  t.same(problemsOf('metrics: { tenant: [a] }\n'), ['metrics.tenant: unknown key'])
})

// ---------------------------------------------------------------------------
// deploy/: Prometheus config, alerting rules, Grafana dashboard

/** Every `portcullis_*` series a PromQL expression names, as the family the registry exposes. */
function seriesIn (expr: string): string[] {
  return [...expr.matchAll(/\bportcullis_[a-zA-Z0-9_]+/g)].map((m) => m[0])
}

async function exposedNames (): Promise<Set<string>> {
  const m = newMetrics()
  m.observeRequest({ ...base, decision: 'deny', rule: 'r', wouldDeny: ['w'] })
  m.setPolicyVersion('v')
  m.setReadiness({ engine: true, policy: true })
  // Exposed only with policy.database (labelled by the database).
  m.policyDatabaseUp('db.example:5432/portcullis')
  return new Set(parseProm(await m.metrics()).map((s) => s.name))
}

t.test('deploy/alerts.yml and prometheus.yml name only series that exist', async (t) => {
  const names = await exposedNames()
  const rules = YAML.parse(fs.readFileSync(path.join(DEPLOY, 'alerts.yml'), 'utf8')) as { groups: Array<{ rules: Array<{ alert: string, expr: string, labels: { severity: string } }> }> }
  const alerts = rules.groups.flatMap((g) => g.rules)
  const wanted = ['PortcullisDown', 'PortcullisNotReady', 'PortcullisUpstreamDown', 'PortcullisUpstreamErrors', 'PortcullisDenialSpike', 'PortcullisPolicyReloadFailed', 'PortcullisAuditFailures']
  for (const a of wanted) t.ok(alerts.some((r) => r.alert === a), `alert ${a}`)
  for (const r of alerts) {
    t.match(r.labels.severity, /^(warning|critical)$/, `${r.alert} has a severity`)
    for (const name of seriesIn(r.expr)) t.ok(names.has(name), `${r.alert}: ${name} is exposed`)
  }
  const prom = YAML.parse(fs.readFileSync(path.join(DEPLOY, 'prometheus.yml'), 'utf8')) as { rule_files: string[], scrape_configs: Array<{ job_name: string, metrics_path: string }> }
  t.same(prom.rule_files, ['alerts.yml'])
  t.match(prom.scrape_configs[0], { job_name: 'portcullis', metrics_path: '/metrics' })
})

t.test('deploy/grafana-dashboard.json is a dashboard over series that exist', async (t) => {
  const names = await exposedNames()
  const dash = JSON.parse(fs.readFileSync(path.join(DEPLOY, 'grafana-dashboard.json'), 'utf8')) as {
    title: string,
    uid: string,
    schemaVersion: number,
    templating: { list: Array<{ name: string }> },
    panels: Array<{ id: number, type: string, title: string, gridPos: { x: number, y: number, w: number, h: number }, targets?: Array<{ expr: string, refId: string, datasource: { uid: string } }> }>
  }
  t.equal(dash.title, 'Portcullis')
  t.equal(typeof dash.uid, 'string')
  t.ok(dash.schemaVersion >= 30)
  t.same(dash.templating.list.map((v) => v.name), ['datasource', 'instance'])
  const ids = dash.panels.map((p) => p.id)
  t.equal(new Set(ids).size, ids.length, 'panel ids are unique')
  const exprs: string[] = []
  for (const p of dash.panels) {
    t.ok(p.gridPos.x >= 0 && p.gridPos.x + p.gridPos.w <= 24 && p.gridPos.h > 0, `${p.title}: fits the grid`)
    if (p.type === 'row') continue
    t.ok(p.targets && p.targets.length > 0, `${p.title}: has queries`)
    for (const target of p.targets ?? []) {
      t.equal(target.datasource.uid, '${datasource}')
      exprs.push(target.expr)
      for (const name of seriesIn(target.expr)) t.ok(names.has(name), `${p.title}: ${name} is exposed`)
    }
  }
  const all = exprs.join('\n')
  for (const needed of ['portcullis_requests_total', 'portcullis_denials_total', 'portcullis_request_duration_seconds_bucket', 'portcullis_upstream_duration_seconds_bucket',
    'portcullis_request_bytes_total', 'portcullis_response_bytes_total', 'portcullis_active_streams', 'portcullis_active_hijacked_sessions',
    'portcullis_policy_info', 'portcullis_policy_reloads_total', 'portcullis_audit_failures_total', 'portcullis_process_resident_memory_bytes']) {
    t.ok(all.includes(needed), `the dashboard shows ${needed}`)
  }
  t.match(all, /histogram_quantile\(0\.99, sum by \(le\) \(rate\(portcullis_upstream_duration_seconds_bucket/)
  t.match(all, /histogram_quantile\(0\.5, sum by \(le\) \(rate\(portcullis_request_duration_seconds_bucket/)
})

function hasPromtool (): boolean {
  return spawnSync('promtool', ['--version'], { stdio: 'ignore' }).status === 0
}
const PROMTOOL = hasPromtool()
const NO_PROMTOOL = 'promtool not installed (Debian: apt-get install prometheus); deploy/ files not checked by promtool'

function promtool (args: string[], input?: string): { status: number | null, out: string } {
  const r = spawnSync('promtool', args, { cwd: ROOT, encoding: 'utf8', ...(input !== undefined ? { input } : {}) })
  return { status: r.status, out: `${r.stdout}${r.stderr}` }
}

t.test('promtool accepts deploy/', { skip: PROMTOOL ? false : NO_PROMTOOL }, async (t) => {
  const rules = promtool(['check', 'rules', 'deploy/alerts.yml'])
  t.equal(rules.status, 0, rules.out)
  t.match(rules.out, /SUCCESS: \d+ rules found/)
  const config = promtool(['check', 'config', 'deploy/prometheus.yml'])
  t.equal(config.status, 0, config.out)
  const tests = promtool(['test', 'rules', 'deploy/alerts.test.yml'])
  t.equal(tests.status, 0, tests.out)
  t.match(tests.out, /SUCCESS/)
})

t.test('promtool check metrics: no problems in portcullis series', { skip: PROMTOOL ? false : NO_PROMTOOL }, async (t) => {
  const m = newMetrics()
  m.observeRequest({ ...base, decision: 'deny', rule: 'r', wouldDeny: ['w'] })
  m.setPolicyVersion('v')
  m.setReadiness({ engine: true, policy: true })
  const r = promtool(['check', 'metrics'], await m.metrics())
  // prom-client's own Node.js gauges end in _total (nodejs_active_handles_total...);
  // promtool flags those. Everything else must be clean.
  const problems = r.out.split('\n').filter((l) => l.trim() !== '' && !/^portcullis_nodejs_active_(handles|requests|resources)_total non-counter metrics should not have "_total" suffix$/.test(l))
  t.same(problems, [], 'promtool check metrics')
})
