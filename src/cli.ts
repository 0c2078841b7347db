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
import { ConfigError, defaultConfig, dropInRequested, loadConfig, SOCKET_PROXY_SWITCHES, socketProxyConfig, type Config, type UpstreamOverrides } from './config'
import { report as auditReport, verify as auditVerify } from './audit'
import { startGateway } from './gateway'
import { loadPolicy, PolicyError } from './policy/engine'
import { check, decidingLines, runFixtures } from './policy/tool'

const HELP = `Usage: portcullis <command> [options]

A policy gateway for the Docker Engine API.

Commands:
  serve [--config FILE] [--upstream URL]
                            Run the gateway. Without a config file (or PORTCULLIS_CONFIG)
                            it serves on built-in defaults: unix socket ./portcullis.sock
                            (mode 0600; you, role admin) and 127.0.0.1:2375 (bearer
                            tokens only), policies from ./policies.
                            The engine: --upstream URL (unix:///path, tcp://host:port),
                            else the config file's upstream, else DOCKER_HOST (with
                            DOCKER_TLS_VERIFY, DOCKER_CERT_PATH), else
                            unix:///var/run/docker.sock.
  config check FILE         Validate a config file; lists every problem, exits 1 if any.
  token [--config FILE] --subject S [--tenant T] [--roles R1,R2] [--ttl 24h]
                            Print a bearer token (JWT) the gateway accepts, signed with the
                            config's auth.jwt.secret, with its claim names, issuer and
                            audience; --ttl in s, m, h or d (default 24h).
  policy check [--dir DIR] --subject S [--tenant T] [--roles R1,R2] METHOD PATH [--body FILE]
                            Decide one request with the policy in DIR (default ./policies):
                            prints the decision, the rule that decided and any rewrite.
  policy test [DIR]         Run the fixtures in DIR/tests/*.yaml (default ./policies);
                            exits 1 on any mismatch.
  audit verify [--partial] FILE...
                            Check audit files (in any order, rotated ones included):
                            exits 0 if the chain is intact, 1 naming the first broken
                            record (file:line and why). --partial: the files are a
                            capture (stdout, a collector) that may start mid-chain
                            and has no seal.
  audit report FILE... [--since 2026-11-22T00:00:00Z|24h] [--tenant T]
                            Summary: requests by tenant and operation, denials and
                            would-deny by rule, hijacked sessions by subject.
  help, --help              Show this help.
  --version                 Print the version.

Signals (serve): SIGTERM/SIGINT drain in-flight requests and close long streams;
SIGHUP reloads the policy and the config file (log level, TLS certificates, auth).
`

function version (): string {
  // dist/src/cli.js -> package.json two levels up
  return (require('../../package.json') as { version: string }).version
}

function configFrom (file: string | undefined, upstream: UpstreamOverrides): Config {
  return file ? loadConfig(file, upstream) : defaultConfig(process.cwd(), upstream)
}

function reportConfigError (err: unknown): number {
  if (err instanceof ConfigError) {
    process.stderr.write(`portcullis: ${err.message}\n`)
    return 2
  }
  throw err
}

async function serve (args: string[]): Promise<number> {
  let values: { config?: string, upstream?: string }
  try {
    values = parseArgs({ args, options: { config: { type: 'string', short: 'c' }, upstream: { type: 'string' } }, allowPositionals: false }).values
  } catch (err) {
    process.stderr.write(`portcullis serve: ${(err as Error).message}\n\n${HELP}`)
    return 2
  }
  const file = values.config ?? process.env.PORTCULLIS_CONFIG
  // Read once: a SIGHUP reload keeps the engine the gateway started with.
  const upstream: UpstreamOverrides = { ...(values.upstream !== undefined ? { flag: values.upstream } : {}), env: { ...process.env }, cwd: process.cwd() }
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
  const gateway = await startGateway(config, log).catch((err: Error) => {
    log.fatal({ err: { message: err.message } }, 'cannot start')
    return null
  })
  if (!gateway) return 1
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
      gateway.close().then(() => resolve(0), () => resolve(1))
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
  const usage = 'usage: portcullis token [--config FILE] --subject S [--tenant T] [--roles R1,R2] [--ttl 24h]\n'
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: { config: { type: 'string', short: 'c' }, subject: { type: 'string' }, tenant: { type: 'string' }, roles: { type: 'string' }, ttl: { type: 'string' } },
  })
  if (!values.subject || positionals.length) { process.stderr.write(usage); return 2 }
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

function configCheck (args: string[]): number {
  const file = args[0]
  if (!file || args.length > 1) {
    process.stderr.write('usage: portcullis config check FILE\n')
    return 2
  }
  try {
    loadConfig(file)
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stdout.write(`${file}: ${err.problems.length} problem${err.problems.length === 1 ? '' : 's'}\n${err.problems.map((p) => `  - ${p}`).join('\n')}\n`)
      return 1
    }
    throw err
  }
  process.stdout.write(`${file}: OK\n`)
  return 0
}

async function policyCheck (args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: { dir: { type: 'string' }, subject: { type: 'string' }, tenant: { type: 'string' }, roles: { type: 'string' }, body: { type: 'string' } },
  })
  if (!values.subject || positionals.length !== 2) {
    process.stderr.write('usage: portcullis policy check [--dir DIR] --subject S [--tenant T] [--roles R1,R2] METHOD PATH [--body FILE]\n')
    return 2
  }
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
  const dir = args[0] ?? 'policies'
  const { lines, passed, failed, warnings } = await runFixtures(dir)
  for (const w of warnings) process.stderr.write(`warning: ${w}\n`)
  process.stdout.write(lines.join('\n') + `\n${passed} passed, ${failed} failed\n`)
  return failed ? 1 : 0
}

async function policy (args: string[]): Promise<number> {
  try {
    if (args[0] === 'check') return await policyCheck(args.slice(1))
    if (args[0] === 'test') return await policyTest(args.slice(1))
  } catch (err) {
    if (err instanceof PolicyError) { process.stderr.write(`portcullis: ${err.message}\n`); return 1 }
    if (err instanceof TypeError && (err as NodeJS.ErrnoException).code?.startsWith('ERR_PARSE_ARGS')) { process.stderr.write(`portcullis policy: ${err.message}\n`); return 2 }
    throw err
  }
  process.stderr.write('usage: portcullis policy check|test ...\n')
  return 2
}

function auditVerifyCommand (args: string[]): number {
  const { values, positionals } = parseArgs({ args, allowPositionals: true, options: { partial: { type: 'boolean' } } })
  if (positionals.length === 0) {
    process.stderr.write('usage: portcullis audit verify [--partial] FILE...\n')
    return 2
  }
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
  const { values, positionals } = parseArgs({ args, allowPositionals: true, options: { since: { type: 'string' }, tenant: { type: 'string' } } })
  if (positionals.length === 0) {
    process.stderr.write('usage: portcullis audit report FILE... [--since TIME|DURATION] [--tenant T]\n')
    return 2
  }
  process.stdout.write(auditReport(positionals, { ...(values.since !== undefined ? { since: values.since } : {}), ...(values.tenant !== undefined ? { tenant: values.tenant } : {}) }))
  return 0
}

function audit (args: string[]): number {
  try {
    if (args[0] === 'verify') return auditVerifyCommand(args.slice(1))
    if (args[0] === 'report') return auditReportCommand(args.slice(1))
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    if (code?.startsWith('ERR_PARSE_ARGS') === true || (err as Error).message.startsWith('--since')) { process.stderr.write(`portcullis audit: ${(err as Error).message}\n`); return 2 }
    if (code !== undefined && /^E[A-Z]+$/.test(code)) { process.stderr.write(`portcullis audit: ${(err as Error).message}\n`); return 1 }
    throw err
  }
  process.stderr.write('usage: portcullis audit verify|report FILE...\n')
  return 2
}

export async function main (argv: string[]): Promise<number> {
  const [command, ...rest] = argv
  switch (command) {
    case 'serve':
      return await serve(rest)
    case 'policy':
      return await policy(rest)
    case 'audit':
      return audit(rest)
    case 'token':
      try {
        return token(rest)
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code?.startsWith('ERR_PARSE_ARGS') === true) { process.stderr.write(`portcullis token: ${(err as Error).message}\n`); return 2 }
        throw err
      }
    case 'config':
      if (rest[0] === 'check') return configCheck(rest.slice(1))
      process.stderr.write('usage: portcullis config check FILE\n')
      return 2
    case undefined:
    case 'help':
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
