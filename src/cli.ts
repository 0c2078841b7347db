#!/usr/bin/env -S node --max-semi-space-size=4
/**
 * The `portcullis` command.
 *
 * `--max-semi-space-size=4` (MiB) sizes V8's young generation for a proxy. Every
 * request leaves some 60 KB of short-lived garbage; with 1 MiB semi-spaces the
 * collector ran every dozen requests (78 µs of scavenging per `_ping` at concurrency
 * 32), with 4 MiB it costs 25 µs (8 MiB: 21, 16: 22). Larger ones only cost memory:
 * streaming gigabytes allocates many short-lived buffers that are then collected
 * late (npm run bench: 167 MB peak with the default 16 MiB, 129 MB with 1 MiB).
 * `npm start` and the benchmark start Node with the same flag.
 */
import fs from 'node:fs'
import { parseArgs } from 'node:util'
import jwt from 'jsonwebtoken'
import pino from 'pino'
import { ConfigError, configWarnings, defaultConfig, dropInRequested, loadConfig, SOCKET_PROXY_SWITCHES, socketProxyConfig, type CommandLine, type Config } from './config'
import { report as auditReport, verify as auditVerify } from './audit'
import { startGateway } from './gateway'
import { runPrimary, workerNumber, workerStarted, workerStarting } from './gateway/cluster'
import { loadPolicy, PolicyError } from './policy/engine'
import { checkTraffic, learn, type LearnRecord, type LearnSelection } from './policy/learn'
import { check, decidingLines, factList, factsTable, runFixtures } from './policy/tool'

const HELP = `Usage: portcullis <command> [options]

A policy gateway for the Docker Engine API.

Commands:
  serve [--config FILE] [--upstream URL] [--listen ADDRESS]...
                            Run the gateway. Without a config file (or PORTCULLIS_CONFIG)
                            it serves on built-in defaults: unix socket ./portcullis.sock
                            (mode 0600; you, role admin) and 127.0.0.1:2375 (bearer
                            tokens only), policies from ./policies.
                            The engine: --upstream URL (unix:///path, tcp://host:port),
                            else the config file's upstream, else DOCKER_HOST (with
                            DOCKER_TLS_VERIFY, DOCKER_CERT_PATH), else
                            unix:///var/run/docker.sock. --listen replaces the listeners.
  config check FILE         Validate a config file; lists every problem, exits 1 if any;
                            warns (exit 0) about weak secrets, an engine that does not
                            answer, an audit directory it cannot write, open TCP listeners.
  token [--config FILE] --subject S [--tenant T] [--roles R1,R2] [--ttl 24h]
                            Print a bearer token (JWT) the gateway accepts, signed with the
                            config's auth.jwt.secret, with its claim names, issuer and
                            audience; --ttl in s, m, h or d (default 24h).
  policy check [--dir DIR] --subject S [--tenant T] [--roles R1,R2] METHOD PATH [--body FILE]
                            Decide one request with the policy in DIR (default ./policies):
                            prints the decision, the rule that decided and any rewrite.
  policy test [--coverage] [DIR]
                            Run the fixtures in DIR/tests/*.yaml (default ./policies);
                            exits 1 on any mismatch. --coverage: also list the deny
                            lines that decide no fixture's denial (exits 1 if any).
  policy facts [--json]     The facts conditions may name (r.obj.*): type, meaning and
                            the request fields each comes from (docs/facts.md).
  policy learn [--subject S | --tenant T | --role R] [--out FILE] [--partial] AUDIT...
                            Write the policy lines that would have allowed the recorded
                            traffic and nothing more (audit level facts or request), with
                            a comment per line saying which requests needed it.
  policy learn --check [--dir DIR] [--subject S | --tenant T | --role R] AUDIT...
                            What the policy in DIR would deny of the recorded traffic;
                            exits 1 if anything.
  audit verify [--partial] FILE...
                            Check audit files (in any order, rotated ones included):
                            exits 0 if the chain is intact, 1 naming the first broken
                            record (file:line and why). --partial: the files are a
                            capture (stdout, a collector) that may start mid-chain
                            and has no seal.
  audit report FILE... [--since 2026-11-22T00:00:00Z|24h] [--tenant T]
                            Summary: requests by tenant and operation, denials and
                            would-deny by rule, cross-tenant denials and misses (no such
                            object), hijacked sessions by subject.
  help [COMMAND], --help    Show this help, or one command's usage (also COMMAND --help).
  --version                 Print the version.

Signals (serve): SIGTERM/SIGINT drain in-flight requests and close long streams;
SIGHUP reloads the policy and the config file (log level, TLS certificates, auth,
registry credentials); every other changed setting is logged as needing a restart.
`

/**
 * Each command's usage: printed by `COMMAND --help` / `-h` (stdout, exit 0) and after a
 * mistake in its arguments (stderr, exit 2). The first line is the synopsis.
 */
const USAGE: Record<string, string> = {
  serve: `usage: portcullis serve [--config FILE] [--upstream URL] [--listen ADDRESS]...

Run the gateway.
  -c, --config FILE     the config file (default: PORTCULLIS_CONFIG, else built-in defaults:
                        ./portcullis.sock and 127.0.0.1:2375, policies from ./policies)
  --upstream URL        the engine: unix:///path or tcp://host:port (default: the config
                        file's upstream, else DOCKER_HOST, else unix:///var/run/docker.sock)
  --listen ADDRESS      listen here instead of the config's (or the default) listeners;
                        repeat for several. unix:PATH is an owner-only socket (0600) where
                        you act as admin, as the default socket; tcp:HOST:PORT takes
                        bearer tokens only (auth.jwt). Relative paths: the working directory.
  -h, --help            show this usage
`,
  'config check': `usage: portcullis config check FILE

Validate a config file: every problem is listed, exit 1 if there is any. Then warnings
(on stderr, prefixed "warning:"; exit 0): a JWT secret that is short or a placeholder, an
engine that does not answer /_ping, an audit directory that cannot be written, a TCP
listener without authentication.
`,
  token: `usage: portcullis token [--config FILE] --subject S [--tenant T] [--roles R1,R2] [--ttl 24h]

Print a bearer token (JWT) signed with the config's auth.jwt.secret.
`,
  'policy check': `usage: portcullis policy check [--dir DIR] --subject S [--tenant T] [--roles R1,R2] METHOD PATH [--body FILE]

Decide one request with the policy in DIR (default ./policies).
`,
  'policy test': `usage: portcullis policy test [--coverage] [DIR]

Run the fixtures in DIR/tests/*.yaml (default ./policies); exit 1 on any mismatch.
--coverage: also list the deny lines that decide no fixture's denial (exit 1 if any).
`,
  'policy facts': `usage: portcullis policy facts [--json]

The facts policy conditions may name (r.obj.*): type, meaning and the request fields
each comes from (docs/facts.md).
`,
  'policy learn': `usage: portcullis policy learn [--subject S | --tenant T | --role R] [--out FILE] [--partial] AUDIT...
       portcullis policy learn --check [--dir DIR] [--subject S | --tenant T | --role R] AUDIT...

Write the policy lines that would have allowed the recorded traffic and nothing more
(audit level facts or request), with a comment per line saying which requests needed
it; with --check, what the policy in DIR would deny of that traffic (exit 1 if anything).
`,
  'audit verify': `usage: portcullis audit verify [--partial] FILE...

Check audit files' hash chain; exit 1 naming the first broken record.
`,
  'audit report': `usage: portcullis audit report FILE... [--since TIME|DURATION] [--tenant T]

Summarize audit files: requests, denials, cross-tenant denials and misses, sessions.
`,
  help: `usage: portcullis help [COMMAND]

Show the list of commands, or one command's usage (serve, config check, token,
policy check, policy test, audit verify, audit report).
`,
  config: 'usage: portcullis config check FILE\n',
  policy: 'usage: portcullis policy check|test|facts|learn ... (portcullis policy check --help)\n',
  audit: 'usage: portcullis audit verify|report FILE... (portcullis audit report --help)\n',
}

/** `--help` asked for (problem null), or a mistake in a command's arguments. */
class UsageError extends Error {
  constructor (readonly command: string, readonly problem: string | null) {
    super(problem ?? 'help')
  }
}

/** The `-h`/`--help` option every command takes. */
const HELP_OPTION = { help: { type: 'boolean', short: 'h' } } as const

/**
 * A command's arguments, parsed strictly (util.parseArgs): an unknown option is a
 * UsageError naming it, `--help` a UsageError without a problem.
 */
function parsed<T extends { values: { help?: boolean } }> (command: string, parse: () => T): T {
  let r: T
  try {
    r = parse()
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code?.startsWith('ERR_PARSE_ARGS') === true) throw new UsageError(command, (err as Error).message)
    throw err
  }
  if (r.values.help === true) throw new UsageError(command, null)
  return r
}

/** What a UsageError means to the user: the usage on stdout (exit 0), or the problem and the usage on stderr (exit 2). */
function usageAnswer (err: UsageError): number {
  const usage = USAGE[err.command] ?? HELP
  if (err.problem === null) { process.stdout.write(usage); return 0 }
  process.stderr.write(`portcullis ${err.command}: ${err.problem}\n\n${usage}`)
  return 2
}

function version (): string {
  // dist/src/cli.js -> package.json two levels up
  return (require('../../package.json') as { version: string }).version
}

function configFrom (file: string | undefined, overrides: CommandLine): Config {
  return file ? loadConfig(file, overrides) : defaultConfig(process.cwd(), overrides)
}

function reportConfigError (err: unknown): number {
  if (err instanceof ConfigError) {
    process.stderr.write(`portcullis: ${err.message}\n`)
    return 2
  }
  throw err
}

async function serve (args: string[]): Promise<number> {
  const { values } = parsed('serve', () => parseArgs({ args, options: { ...HELP_OPTION, config: { type: 'string', short: 'c' }, upstream: { type: 'string' }, listen: { type: 'string', multiple: true } }, allowPositionals: false, strict: true }))
  const file = values.config ?? process.env.PORTCULLIS_CONFIG
  // Read once: a SIGHUP reload keeps the engine and the listeners the gateway started with.
  const upstream: CommandLine = {
    ...(values.upstream !== undefined ? { flag: values.upstream } : {}),
    ...(values.listen !== undefined ? { listen: values.listen } : {}),
    env: { ...process.env },
    cwd: process.cwd(),
  }
  let config: Config
  // Without a config file, docker-socket-proxy's variables (config/socket-proxy.ts) make one.
  let dropIn: ReturnType<typeof socketProxyConfig> | null = null
  try {
    const wanted = dropInRequested(process.env)
    if (wanted.problem !== undefined) throw new ConfigError([wanted.problem], null)
    if (!file && wanted.requested) {
      dropIn = socketProxyConfig(process.env, { upstream })
      config = dropIn.config
    } else {
      config = configFrom(file, upstream)
    }
  } catch (err) {
    return reportConfigError(err)
  }
  // The operational log is buffered (one write per 4 KiB or 250 ms, not per line): it
  // is not the audit trail, which has its own synchronous destination. Flushed on exit.
  const destination = pino.destination({ dest: 1, sync: false, minLength: 4096 })
  const log = pino({ level: config.log.level, base: { service: 'portcullis' } }, destination)
  setInterval(() => { destination.flush() }, 250).unref()
  if (dropIn) {
    const on = SOCKET_PROXY_SWITCHES.filter((v) => dropIn.settings.switches[v])
    log.warn({ dropIn: 'docker-socket-proxy', given: dropIn.settings.given, switchedOn: on, listen: dropIn.settings.listen, policyDir: dropIn.policyDir, policy: dropIn.lines },
      `docker-socket-proxy drop-in: no config file, its variables make the policy (switched on: ${on.join(', ') || 'none'}); requests on ${dropIn.settings.listen} are NOT authenticated`)
  } else if (file) {
    const ignored = SOCKET_PROXY_SWITCHES.filter((v) => process.env[v] !== undefined)
    if (ignored.length) log.warn({ ignored }, 'docker-socket-proxy variables are ignored: a config file is given')
  }
  process.once('exit', () => { destination.flushSync() })
  // Several processes (config workers; gateway/cluster.ts): this one binds and hands out.
  const worker = workerNumber()
  if (config.workers > 1 && worker === null) return await runPrimary(config, log.child({ primary: true }))
  if (worker !== null) workerStarting()
  const gateway = await startGateway(config, worker !== null ? log.child({ worker }) : log).catch((err: Error) => {
    log.fatal({ err: { message: err.message } }, 'cannot start')
    return null
  })
  if (!gateway) return 1
  if (worker !== null) workerStarted()
  process.on('SIGHUP', () => {
    if (!file) {
      log.info('SIGHUP: no config file to reload; reloading the policy')
      void gateway.policy.reload()
      return
    }
    try {
      void gateway.reload(loadConfig(file, upstream))
    } catch (err) {
      if (err instanceof ConfigError) log.error({ problems: err.problems }, 'SIGHUP: new configuration is invalid; keeping the running one')
      else log.error({ err: { message: (err as Error).message } }, 'SIGHUP: reload failed')
    }
  })
  return await new Promise<number>((resolve) => {
    const stop = (signal: string): void => {
      log.info({ signal }, 'signal received')
      // A worker lets go of the primary's IPC channel, which would keep it alive.
      gateway.close().then(() => resolve(0), () => resolve(1)).finally(() => { if (worker !== null) process.disconnect?.() })
    }
    process.once('SIGTERM', stop)
    process.once('SIGINT', stop)
  })
}

/** `90`, `90s`, `15m`, `8h`, `7d` -> seconds. */
function ttlSeconds (text: string): number | null {
  const m = /^([1-9][0-9]*)([smhd]?)$/.exec(text)
  if (!m) return null
  return Number(m[1]) * { '': 1, s: 1, m: 60, h: 3600, d: 86400 }[m[2] as '' | 's' | 'm' | 'h' | 'd']
}

/**
 * A token for the gateway's own HS* secret: what an identity provider would issue,
 * for trying the gateway out and for small set-ups. Tokens verified with public keys
 * come from whoever holds the private key.
 */
function token (args: string[]): number {
  const usage = USAGE.token.split('\n')[0] + '\n'
  const { values, positionals } = parsed('token', () => parseArgs({
    args,
    allowPositionals: true,
    strict: true,
    options: { ...HELP_OPTION, config: { type: 'string', short: 'c' }, subject: { type: 'string' }, tenant: { type: 'string' }, roles: { type: 'string' }, ttl: { type: 'string' } },
  }))
  if (positionals.length) throw new UsageError('token', `unexpected argument ${JSON.stringify(positionals[0])}`)
  if (!values.subject) throw new UsageError('token', '--subject is required')
  const ttl = ttlSeconds(values.ttl ?? '24h')
  if (ttl === null) { process.stderr.write(`portcullis token: --ttl ${JSON.stringify(values.ttl)}: expected a number of seconds, or a number with s, m, h or d\n`); return 2 }
  const file = values.config ?? process.env.PORTCULLIS_CONFIG
  if (!file) { process.stderr.write(`portcullis token: no config file (--config FILE or PORTCULLIS_CONFIG): the token is signed with its auth.jwt.secret\n${usage}`); return 2 }
  let jwtConfig
  try {
    jwtConfig = loadConfig(file).auth.jwt
  } catch (err) {
    return reportConfigError(err)
  }
  if (jwtConfig?.secret === undefined) {
    process.stderr.write(`portcullis token: ${file} has no auth.jwt.secret; ${jwtConfig ? 'with public keys, tokens come from whoever holds the private key' : 'add auth: { jwt: { secret: ... } } to sign tokens'}\n`)
    return 1
  }
  const claims = { subject: jwtConfig.claims?.subject ?? 'sub', tenant: jwtConfig.claims?.tenant ?? 'tenant', roles: jwtConfig.claims?.roles ?? 'roles' }
  const roles = (values.roles ?? '').split(',').map((r) => r.trim()).filter(Boolean)
  const audience = typeof jwtConfig.audience === 'string' ? jwtConfig.audience : jwtConfig.audience?.[0]
  const signed = jwt.sign({
    [claims.subject]: values.subject,
    ...(values.tenant ? { [claims.tenant]: values.tenant } : {}),
    [claims.roles]: roles,
    ...(jwtConfig.issuer !== undefined ? { iss: jwtConfig.issuer } : {}),
    ...(audience !== undefined ? { aud: audience } : {}),
  }, jwtConfig.secret, { algorithm: (jwtConfig.algorithms?.[0] ?? 'HS256') as jwt.Algorithm, expiresIn: ttl })
  process.stdout.write(`${signed}\n`)
  return 0
}

async function configCheck (args: string[]): Promise<number> {
  const { positionals } = parsed('config check', () => parseArgs({ args, allowPositionals: true, strict: true, options: { ...HELP_OPTION } }))
  if (positionals.length !== 1) throw new UsageError('config check', positionals.length === 0 ? 'no FILE given' : `expected one FILE, got ${positionals.length}`)
  const file = positionals[0]
  let config: Config
  try {
    // The engine as serve would find it without --upstream (the file's, else DOCKER_HOST...).
    config = loadConfig(file, { env: { ...process.env }, cwd: process.cwd(), checkOnly: true })
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stdout.write(`${file}: ${err.problems.length} problem${err.problems.length === 1 ? '' : 's'}\n${err.problems.map((p) => `  - ${p}`).join('\n')}\n`)
      return 1
    }
    throw err
  }
  process.stdout.write(`${file}: OK\n`)
  // Valid, and would start: what it would most likely do other than meant.
  for (const w of await configWarnings(config)) process.stderr.write(`warning: ${w}\n`)
  return 0
}

async function policyCheck (args: string[]): Promise<number> {
  const { values, positionals } = parsed('policy check', () => parseArgs({
    args,
    allowPositionals: true,
    strict: true,
    options: { ...HELP_OPTION, dir: { type: 'string' }, subject: { type: 'string' }, tenant: { type: 'string' }, roles: { type: 'string' }, body: { type: 'string' } },
  }))
  if (!values.subject) throw new UsageError('policy check', '--subject is required')
  if (positionals.length !== 2) throw new UsageError('policy check', `expected METHOD and PATH, got ${positionals.length} argument(s)`)
  const policy = await loadPolicy(values.dir ?? 'policies')
  const who = { subject: values.subject, tenant: values.tenant ?? null, roles: (values.roles ?? '').split(',').filter(Boolean) }
  const body = values.body ? fs.readFileSync(values.body) : undefined
  const r = await check(policy, who, positionals[0], positionals[1], body)
  for (const w of policy.warnings) process.stderr.write(`warning: ${w}\n`)
  const deciding = decidingLines(r)
  process.stdout.write(`operation: ${r.operation || '(none)'}\ndecision:  ${r.decision}\nrule:      ${r.rule ?? (r.error ? '(refused before policy)' : '(no rule allows it)')}\n` +
    (r.error ? `error:     ${r.error}\n` : '') +
    (deciding.length ? `why:\n${deciding.map((l) => `  ${l}\n`).join('')}` : '') +
    (r.facts ? `facts:     ${r.facts.length ? r.facts.join(', ') : '(none set)'}\n` : '') +
    (r.wouldDeny.length ? `would deny (audit mode): ${r.wouldDeny.join(', ')}\n` : '') +
    `rewrites:  ${r.rewrites.length ? r.rewrites.join(', ') : '(none)'}\n` +
    (r.body && r.rewrites.length && r.decision !== 'deny' ? `body sent: ${r.body}\n` : '') +
    `policy:    ${policy.version}\n`)
  return r.decision === 'deny' ? 1 : 0
}

async function policyTest (args: string[]): Promise<number> {
  const { values, positionals } = parsed('policy test', () => parseArgs({ args, allowPositionals: true, strict: true, options: { ...HELP_OPTION, coverage: { type: 'boolean' } } }))
  if (positionals.length > 1) throw new UsageError('policy test', `expected one directory, got ${positionals.length}`)
  const dir = positionals[0] ?? 'policies'
  const { lines, passed, failed, warnings, uncovered } = await runFixtures(dir)
  for (const w of warnings) process.stderr.write(`warning: ${w}\n`)
  process.stdout.write(lines.join('\n') + `\n${passed} passed, ${failed} failed\n`)
  if (!values.coverage) return failed ? 1 : 0
  // A deny line that decides no fixture's denial could be deleted or broken unseen.
  process.stdout.write(uncovered.length
    ? `deny lines no fixture exercises (${uncovered.length}):\n${uncovered.map((r) => `  ${r}`).join('\n')}\n`
    : 'coverage: every deny line decides some fixture\'s denial\n')
  return failed || uncovered.length ? 1 : 0
}

/** `portcullis policy facts [--json]`: the facts conditions may name (FactsSchema), with types and sources. */
function policyFacts (args: string[]): number {
  const { values } = parsed('policy facts', () => parseArgs({ args, strict: true, options: { ...HELP_OPTION, json: { type: 'boolean' } } }))
  process.stdout.write(values.json ? JSON.stringify(factList(), null, 2) + '\n' : factsTable())
  return 0
}

/** The records of audit files, once their chain verifies (a trail that was tampered with teaches nothing). */
function readTrail (files: readonly string[], partial: boolean): LearnRecord[] | string {
  const v = auditVerify(files, { partial })
  if (!v.ok) return `${v.problem!.file}:${v.problem!.line}: ${v.problem!.reason}`
  return v.files.flatMap((f) => fs.readFileSync(f, 'utf8').split('\n').filter((l) => l !== '').map((l) => JSON.parse(l) as LearnRecord))
}

async function policyLearn (args: string[]): Promise<number> {
  const { values, positionals } = parsed('policy learn', () => parseArgs({
    args,
    allowPositionals: true,
    strict: true,
    options: { ...HELP_OPTION, check: { type: 'boolean' }, dir: { type: 'string' }, subject: { type: 'string' }, tenant: { type: 'string' }, role: { type: 'string' }, out: { type: 'string' }, partial: { type: 'boolean' } },
  }))
  const picked = [values.subject, values.tenant, values.role].filter((v) => v !== undefined).length
  if (positionals.length === 0) throw new UsageError('policy learn', 'no AUDIT file given')
  if (picked > 1) throw new UsageError('policy learn', 'at most one of --subject, --tenant, --role')
  const records = readTrail(positionals, values.partial === true)
  if (typeof records === 'string') { process.stderr.write(`portcullis policy learn: the audit trail does not verify: ${records}\n`); return 1 }
  const sel: LearnSelection = { ...(values.subject !== undefined ? { subject: values.subject } : {}), ...(values.tenant !== undefined ? { tenant: values.tenant } : {}), ...(values.role !== undefined ? { role: values.role } : {}) }
  if (values.check === true) {
    const policy = await loadPolicy(values.dir ?? 'policies')
    const { checked, denials } = await checkTraffic(policy, records, sel)
    for (const d of denials) {
      process.stdout.write(`deny ${d.operation} x${d.reqs.length} by ${d.subject}${d.tenant ? ` (tenant ${d.tenant})` : ''}: ${d.rule} (e.g. req ${d.reqs.slice(0, 3).join(', ')})\n`)
    }
    const n = denials.reduce((a, d) => a + d.reqs.length, 0)
    process.stdout.write(`${n} of ${checked} request(s) would be denied by the policy in ${values.dir ?? 'policies'} (${policy.version})\n`)
    return n ? 1 : 0
  }
  const r = learn(records, sel)
  if (r.records === 0) { process.stderr.write('portcullis policy learn: no request records match\n'); return 1 }
  if (r.withoutFacts) process.stderr.write(`warning: ${r.withoutFacts} record(s) carry no facts (audit level metadata): what their bodies asked for is unknown and is not allowed; record at level facts\n`)
  if (values.out) fs.writeFileSync(values.out, r.text)
  else process.stdout.write(r.text)
  return 0
}

async function policy (args: string[]): Promise<number> {
  try {
    if (args[0] === 'learn') return await policyLearn(args.slice(1))
    if (args[0] === 'check') return await policyCheck(args.slice(1))
    if (args[0] === 'test') return await policyTest(args.slice(1))
    if (args[0] === 'facts') return policyFacts(args.slice(1))
  } catch (err) {
    if (err instanceof PolicyError) { process.stderr.write(`portcullis: ${err.message}\n`); return 1 }
    throw err
  }
  if (args[0] === '--help' || args[0] === '-h') throw new UsageError('policy', null)
  throw new UsageError('policy', args[0] === undefined ? 'which one: check, test, facts or learn?' : `unknown subcommand ${JSON.stringify(args[0])}`)
}

function auditVerifyCommand (args: string[]): number {
  const { values, positionals } = parsed('audit verify', () => parseArgs({ args, allowPositionals: true, strict: true, options: { ...HELP_OPTION, partial: { type: 'boolean' } } }))
  if (positionals.length === 0) throw new UsageError('audit verify', 'no FILE given')
  const r = auditVerify(positionals, { partial: values.partial === true })
  for (const note of r.notes) process.stdout.write(`note: ${note}\n`)
  if (!r.ok) {
    const p = r.problem!
    process.stdout.write(`${p.file}:${p.line}: ${p.reason}\nBROKEN: ${r.records} sound record(s) before the first break\n`)
    return 1
  }
  process.stdout.write(`OK: ${r.records} records in ${r.files.length} file(s), chain intact${r.files.length > 1 ? ` (${r.files.map((f) => f.split('/').pop()).join(' -> ')})` : ''}\n`)
  return 0
}

function auditReportCommand (args: string[]): number {
  const { values, positionals } = parsed('audit report', () => parseArgs({ args, allowPositionals: true, strict: true, options: { ...HELP_OPTION, since: { type: 'string' }, tenant: { type: 'string' } } }))
  if (positionals.length === 0) throw new UsageError('audit report', 'no FILE given')
  process.stdout.write(auditReport(positionals, { ...(values.since !== undefined ? { since: values.since } : {}), ...(values.tenant !== undefined ? { tenant: values.tenant } : {}) }))
  return 0
}

function audit (args: string[]): number {
  try {
    if (args[0] === 'verify') return auditVerifyCommand(args.slice(1))
    if (args[0] === 'report') return auditReportCommand(args.slice(1))
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    if ((err as Error).message.startsWith('--since')) { process.stderr.write(`portcullis audit: ${(err as Error).message}\n`); return 2 }
    if (code !== undefined && /^E[A-Z]+$/.test(code)) { process.stderr.write(`portcullis audit: ${(err as Error).message}\n`); return 1 }
    throw err
  }
  if (args[0] === '--help' || args[0] === '-h') throw new UsageError('audit', null)
  throw new UsageError('audit', args[0] === undefined ? 'which one: verify or report?' : `unknown subcommand ${JSON.stringify(args[0])}`)
}

export async function main (argv: string[]): Promise<number> {
  try {
    return await command(argv)
  } catch (err) {
    if (err instanceof UsageError) return usageAnswer(err)
    throw err
  }
}

async function command (argv: string[]): Promise<number> {
  const [command, ...rest] = argv
  switch (command) {
    case 'serve':
      return await serve(rest)
    case 'policy':
      return await policy(rest)
    case 'audit':
      return audit(rest)
    case 'token':
      return token(rest)
    case 'config':
      if (rest[0] === 'check') return await configCheck(rest.slice(1))
      if (rest[0] === '--help' || rest[0] === '-h') throw new UsageError('config', null)
      throw new UsageError('config', rest[0] === undefined ? 'which one: check?' : `unknown subcommand ${JSON.stringify(rest[0])}`)
    case 'help': {
      const { positionals } = parsed('help', () => parseArgs({ args: rest, allowPositionals: true, strict: true, options: { ...HELP_OPTION } }))
      const topic = positionals.join(' ')
      if (topic === '') { process.stdout.write(HELP); return 0 }
      if (USAGE[topic] === undefined) throw new UsageError('help', `no command ${JSON.stringify(topic)}`)
      process.stdout.write(USAGE[topic])
      return 0
    }
    case undefined:
    case '--help':
    case '-h':
      process.stdout.write(HELP)
      return 0
    case '--version':
    case 'version':
      process.stdout.write(version() + '\n')
      return 0
    default:
      process.stderr.write(`portcullis: unknown command ${JSON.stringify(command)}\n\n${HELP}`)
      return 2
  }
}

if (require.main === module) {
  main(process.argv.slice(2)).then((code) => { process.exitCode = code }, (err: Error) => {
    process.stderr.write(`portcullis: ${err.stack ?? err.message}\n`)
    process.exitCode = 1
  })
}
