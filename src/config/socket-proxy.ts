/**
 * A drop-in for Tecnativa/docker-socket-proxy: its environment variables, read as
 * that project reads them, become a Portcullis configuration and policy.
 *
 * That project is HAProxy with one configuration (haproxy.cfg): every method but GET
 * and HEAD is refused unless POST is true, then a request is allowed when its path
 * (URL-decoded, with or without a /vX.Y prefix) starts with a section that is switched
 * on (`^(/v[\d.]+)?/containers` for CONTAINERS=1, ...), or names a container's
 * start/stop/restart/kill with ALLOW_START, ALLOW_STOP, ALLOW_RESTARTS; the rest is
 * refused (403). Here each catalog operation is judged by the same rules, on the
 * operation's own path, once, at start: the result is one Casbin line per allowed
 * operation for the role `socket-proxy`, written to a policy directory of its own and
 * logged. The listener is TCP port 2375 on every interface ([::] with IPv4 too, or
 * 0.0.0.0 with DISABLE_IPV6), without authentication, as that project binds it; the
 * engine is SOCKET_PATH.
 *
 * Trigger (cli.ts): `portcullis serve` with no config file (no --config, no
 * PORTCULLIS_CONFIG) and at least one section switch set, or
 * PORTCULLIS_DROP_IN=docker-socket-proxy (the image sets it). LOG_LEVEL, DISABLE_IPV6
 * and SOCKET_PATH alone do not switch it on. A value that project would read
 * differently from what it looks like (`CONTAINERS=true` is false to HAProxy) is an error.
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { operations, type Operation } from '../api/catalog/operations'

/** The section switches, in haproxy.cfg's order, with the path each allows. */
export const SECTIONS: ReadonlyArray<readonly [variable: string, section: string]> = [
  ['AUTH', 'auth'], ['BUILD', 'build'], ['COMMIT', 'commit'], ['CONFIGS', 'configs'], ['CONTAINERS', 'containers'],
  ['DISTRIBUTION', 'distribution'], ['EVENTS', 'events'], ['EXEC', 'exec'], ['GRPC', 'grpc'], ['IMAGES', 'images'],
  ['INFO', 'info'], ['NETWORKS', 'networks'], ['NODES', 'nodes'], ['PING', '_ping'], ['PLUGINS', 'plugins'],
  ['SECRETS', 'secrets'], ['SERVICES', 'services'], ['SESSION', 'session'], ['SWARM', 'swarm'], ['SYSTEM', 'system'],
  ['TASKS', 'tasks'], ['VERSION', 'version'], ['VOLUMES', 'volumes'],
]

/** Switches that allow one container action each (they need POST=1 too: haproxy.cfg's first rule). */
const CONTAINER_ACTIONS: ReadonlyArray<readonly [variable: string, actions: RegExp]> = [
  ['ALLOW_RESTARTS', /^(\/v[\d.]+)?\/containers\/[a-zA-Z0-9_.-]+\/((stop)|(restart)|(kill))/i],
  ['ALLOW_START', /^(\/v[\d.]+)?\/containers\/[a-zA-Z0-9_.-]+\/start/i],
  ['ALLOW_STOP', /^(\/v[\d.]+)?\/containers\/[a-zA-Z0-9_.-]+\/stop/i],
]

/** Every switch that turns the drop-in on. */
export const SWITCHES: readonly string[] = ['POST', ...CONTAINER_ACTIONS.map(([v]) => v), ...SECTIONS.map(([v]) => v)]
/** The variables that only tune it. */
const TUNING = ['DISABLE_IPV6', 'LOG_LEVEL', 'SOCKET_PATH'] as const
export const VARIABLES: readonly string[] = [...SWITCHES, ...TUNING]

/** That project's defaults (its Dockerfile's ENV). */
export const DEFAULTS: Readonly<Record<string, string>> = Object.freeze({
  ...Object.fromEntries(SWITCHES.map((v) => [v, '0'])),
  EVENTS: '1',
  PING: '1',
  VERSION: '1',
  DISABLE_IPV6: '0',
  LOG_LEVEL: 'info',
  SOCKET_PATH: '/var/run/docker.sock',
})

/** HAProxy's syslog levels -> pino's. */
const LOG_LEVELS: Readonly<Record<string, 'fatal' | 'error' | 'warn' | 'info' | 'debug'>> = {
  emerg: 'fatal', alert: 'fatal', crit: 'fatal', err: 'error', warning: 'warn', notice: 'info', info: 'info', debug: 'debug',
}

export const DROP_IN_VARIABLE = 'PORTCULLIS_DROP_IN'
export const DROP_IN_VALUE = 'docker-socket-proxy'
export const ROLE = 'socket-proxy'

export interface SocketProxySettings {
  /** Switch -> on, every switch, defaults applied. */
  readonly switches: Readonly<Record<string, boolean>>
  readonly listen: string
  readonly logLevel: 'fatal' | 'error' | 'warn' | 'info' | 'debug'
  readonly socketPath: string
  /** The variables given (the rest took that project's defaults). */
  readonly given: readonly string[]
}

type Env = { readonly [key: string]: string | undefined }

/** Whether the drop-in applies (when no config file is given); an unknown PORTCULLIS_DROP_IN is an error. */
export function dropInRequested (env: Env): { requested: boolean, problem?: string } {
  const mode = env[DROP_IN_VARIABLE]
  if (mode !== undefined && mode !== '' && mode !== DROP_IN_VALUE) return { requested: false, problem: `${DROP_IN_VARIABLE}=${JSON.stringify(mode)}: expected ${DROP_IN_VALUE} or nothing` }
  return { requested: mode === DROP_IN_VALUE || SWITCHES.some((v) => env[v] !== undefined) }
}

/** Reads the variables; every value that project would not read as written is a problem. */
export function readSettings (env: Env): { settings: SocketProxySettings, problems: string[] } {
  const problems: string[] = []
  const value = (v: string): string => env[v] ?? DEFAULTS[v] ?? ''
  const switches: Record<string, boolean> = {}
  for (const v of SWITCHES) {
    const text = value(v)
    // HAProxy's `env(X) -m bool` reads an integer: 0 and empty are false, 1 is true,
    // and `true`/`yes` are false too. Only 0, 1 and empty are taken here.
    if (text !== '0' && text !== '1' && text !== '') problems.push(`${v}=${JSON.stringify(text)}: expected 0 or 1 (docker-socket-proxy reads "${text}" as ${/^[1-9][0-9]*$/.test(text) ? 'true' : 'false'}; write what you mean)`)
    switches[v] = text === '1'
  }
  const ipv6 = value('DISABLE_IPV6').toLowerCase()
  if (!['0', '1', 'true', 'false', 'yes', 'no', ''].includes(ipv6)) problems.push(`DISABLE_IPV6=${JSON.stringify(value('DISABLE_IPV6'))}: expected 1, true or yes (IPv4 only), or 0, false or no`)
  const level = LOG_LEVELS[value('LOG_LEVEL').toLowerCase()]
  if (level === undefined) problems.push(`LOG_LEVEL=${JSON.stringify(value('LOG_LEVEL'))}: expected one of ${Object.keys(LOG_LEVELS).join(', ')}`)
  const socketPath = value('SOCKET_PATH')
  if (!socketPath.startsWith('/')) problems.push(`SOCKET_PATH=${JSON.stringify(socketPath)}: expected the absolute path of the engine's unix socket`)
  return {
    settings: {
      switches,
      listen: ['1', 'true', 'yes'].includes(ipv6) ? '0.0.0.0:2375' : '[::]:2375',
      logLevel: level ?? 'info',
      socketPath,
      given: VARIABLES.filter((v) => env[v] !== undefined),
    },
    problems,
  }
}

/** A request path for the operation, as a client sends it (path parameters filled in). */
export function examplePath (op: Operation, version: string | null): string {
  const p = op.path.replace(/\{(\w+)\*?\}/g, (_m, name: string) => `${name}1`)
  if (op.libpod === true) return `/v4.3.1${p}`
  return version === null ? p : `/v${version}${p}`
}

/** haproxy.cfg's verdict on one request: the switch that allows it, or null (403). */
export function haproxyVerdict (switches: Readonly<Record<string, boolean>>, method: string, requestPath: string): string | null {
  if (method !== 'GET' && method !== 'HEAD' && switches['POST'] !== true) return null
  for (const [variable, re] of CONTAINER_ACTIONS) if (switches[variable] === true && re.test(requestPath)) return variable
  for (const [variable, section] of SECTIONS) {
    if (switches[variable] === true && new RegExp(`^(/v[\\d.]+)?/${section}`, 'i').test(requestPath)) return variable
  }
  return null
}

/**
 * One allow line per switch, over the operations haproxy.cfg lets through because of
 * it (the rule id names the switch: `socket-proxy-containers`).
 */
export function policyLines (settings: SocketProxySettings): string[] {
  const bySwitch = new Map<string, string[]>()
  for (const op of operations) {
    const by = haproxyVerdict(settings.switches, op.method, examplePath(op, null))
    if (by === null) continue
    const ids = bySwitch.get(by) ?? []
    if (!ids.includes(op.id)) ids.push(op.id)
    bySwitch.set(by, ids)
  }
  return [...bySwitch].map(([by, ids]) => `p, ${ROLE}, *, ${ids.length === 1 ? ids[0] : `"{${ids.join(',')}}"`}, *, allow, socket-proxy-${by.toLowerCase().replace(/_/g, '-')}, true`)
}

/** The shipped policy directory (for its model). dist/src/config -> the package root. */
function shippedPolicies (): string {
  return path.resolve(__dirname, '../../../policies')
}

/**
 * Writes the derived policy to a new directory (under the system's temporary
 * directory): the shipped model, the allow lines, and a tenancy.yaml that leaves
 * the role unscoped (docker-socket-proxy has no tenants).
 */
export function writePolicyDir (settings: SocketProxySettings, base: string = os.tmpdir()): { dir: string, lines: string[] } {
  const dir = fs.mkdtempSync(path.join(base, 'portcullis-socket-proxy-'))
  const lines = policyLines(settings)
  const on = SWITCHES.filter((v) => settings.switches[v])
  fs.copyFileSync(path.join(shippedPolicies(), 'model.conf'), path.join(dir, 'model.conf'))
  fs.writeFileSync(path.join(dir, 'policy.yaml'), 'model: model.conf\npolicies:\n  - file: socket-proxy.csv\n    mode: enforce\ntenancy: tenancy.yaml\n')
  fs.writeFileSync(path.join(dir, 'tenancy.yaml'), `# docker-socket-proxy has no tenants: its clients see every object.\nunscopedRoles: [${ROLE}]\n`)
  fs.writeFileSync(path.join(dir, 'socket-proxy.csv'), `# Derived from docker-socket-proxy's variables (switched on: ${on.join(', ') || 'none'}).\n` +
    '# One line per Engine API operation its haproxy.cfg lets through; everything else is refused.\n' +
    (lines.length ? `${lines.join('\n')}\n` : ''))
  return { dir, lines }
}

/** The configuration document for config/resolve.ts's validate(). */
export function configDocument (settings: SocketProxySettings, policyDir: string, metricsListen: string): { [key: string]: unknown } {
  return {
    listen: [{ tcp: settings.listen, name: 'docker-socket-proxy', identity: { subject: 'docker-socket-proxy', roles: [ROLE] } }],
    upstream: `unix://${settings.socketPath}`,
    policy: { dir: policyDir },
    log: { level: settings.logLevel },
    // That project limits no rates.
    rates: { roles: { [ROLE]: {} }, others: null },
    ...(metricsListen !== '' ? { metrics: { listen: metricsListen } } : {}),
  }
}
