/**
 * Why a rule's condition held, in the words of the request: which facts (and the
 * request fields and docker flags they come from) made it hold, with the values that
 * did, and what the condition lets through. Derived from the condition's expression
 * and the request's facts, so every rule explains itself without a hand-written
 * message; a condition of a shape not known here is quoted as written.
 *
 * Only facts are shown (host paths, capability names, namespace modes, the exec
 * user...), never the body or query as sent, which may hold secrets (environment
 * values, credentials): a condition over `r.obj.body` or `r.obj.query` names the
 * field and hides its value.
 */
import { eval as evaluate, parse } from '@casbin/expression-eval'
import { Util } from 'casbin'
import { conditionFunctions } from './functions'
import { libpodSource } from './libpod-facts'
import { REMOUNTING_OPS } from './fields'

export interface Reason {
  /** What matched: `hostPaths /etc (HostConfig.Binds/Mounts, -v/--mount)`. Empty: the rule has no condition. */
  readonly matched: readonly string[]
  /** What the condition lets through: `hostPaths under /srv/portcullis/team-a`. */
  readonly allowed: readonly string[]
}

interface Node {
  type: string
  name?: string
  value?: unknown
  operator?: string
  left?: Node
  right?: Node
  argument?: Node
  object?: Node
  property?: Node
  computed?: boolean
  callee?: Node
  arguments?: Node[]
}

type Context = Record<string, unknown>
interface Clause { matched: string, allowed?: string }

const SERVICE = /^Service(Create|Update)$/

/** Where each fact comes from: the request field and the docker flag, by operation where they differ. */
function source (fact: string, op: string): string {
  if (op.endsWith('Libpod')) return libpodSource(fact, op)
  const service = SERVICE.test(op)
  const hc = (field: string): string => op === 'ContainerUpdate' ? field : `HostConfig.${field}`
  const spec = (field: string): string => `TaskTemplate.ContainerSpec.${field}`
  switch (fact) {
    case 'privileged': return op === 'ContainerExec' ? 'Privileged, --privileged' : `${hc('Privileged')}, --privileged`
    case 'hostPaths':
    case 'unresolvedHostPaths': return op === 'VolumeCreate' ? 'DriverOpts device, -o device=' : service ? `${spec('Mounts')}, --mount` : REMOUNTING_OPS.has(op) ? 'the container\'s HostConfig.Binds/Mounts, walked again as the engine mounts them' : `${hc('Binds')}/Mounts, -v/--mount`
    case 'linkFollowingHostPaths': return op === 'VolumeCreate' ? 'DriverOpts device, -o device=' : service ? `${spec('Mounts')}, --mount` : REMOUNTING_OPS.has(op) ? 'the container\'s HostConfig.Binds/Mounts, walked again as the engine mounts them' : `${hc('Binds')}/Mounts, -v/--mount`
    case 'hostVolume': return op === 'VolumeCreate' ? 'DriverOpts, -o' : service ? `${spec('Mounts')} volume options, --mount` : `${hc('Mounts')} volume options, --mount`
    case 'tmpfsVolume': return op === 'VolumeCreate' ? 'DriverOpts, -o' : service ? `${spec('Mounts')} volume options, --mount` : `${hc('Mounts')} volume options, --mount`
    case 'capAdd': return service ? `${spec('CapabilityAdd')}, --cap-add` : `${hc('CapAdd')}, --cap-add`
    case 'capDrop': return service ? `${spec('CapabilityDrop')}, --cap-drop` : `${hc('CapDrop')}, --cap-drop`
    case 'devices': return `${hc('Devices')}, --device`
    case 'deviceRequests': return `${hc('DeviceRequests')}, --gpus`
    case 'deviceCgroupRules': return `${hc('DeviceCgroupRules')}, --device-cgroup-rule`
    case 'namespaces.network': return service ? 'TaskTemplate.Networks, --network' : `${hc('NetworkMode')}, --network`
    case 'namespaces.pid': return `${hc('PidMode')}, --pid`
    case 'namespaces.ipc': return `${hc('IpcMode')}, --ipc`
    case 'namespaces.uts': return `${hc('UTSMode')}, --uts`
    case 'namespaces.userns': return `${hc('UsernsMode')}, --userns`
    case 'namespaces.cgroupns': return `${hc('CgroupnsMode')}, --cgroupns`
    case 'securityOpt': return service ? `${spec('Privileges')}` : `${hc('SecurityOpt')}, --security-opt`
    case 'sysctls': return service ? `${spec('Sysctls')}, --sysctl` : `${hc('Sysctls')}, --sysctl`
    case 'runtime': return `${hc('Runtime')}, --runtime`
    case 'annotations': return `${hc('Annotations')}, --annotation`
    case 'restartPolicy': return `${hc('RestartPolicy')}, --restart`
    case 'cgroupParent': return op === 'ImageBuild' ? 'cgroupparent, --cgroup-parent' : `${hc('CgroupParent')}, --cgroup-parent`
    case 'volumesFrom': return `${hc('VolumesFrom')}, --volumes-from`
    case 'links': return `${hc('Links')}, --link`
    case 'user': return service ? `${spec('User')}, --user` : 'User, --user'
    case 'memory': return service ? 'TaskTemplate.Resources.Limits.MemoryBytes, --limit-memory' : op === 'ImageBuild' ? 'memory, --memory' : `${hc('Memory')}, --memory`
    case 'nanoCpus': return service ? 'TaskTemplate.Resources.Limits.NanoCPUs, --limit-cpu' : `${hc('NanoCpus')}, --cpus`
    case 'pidsLimit': return service ? 'TaskTemplate.Resources.Limits.Pids, --limit-pids' : `${hc('PidsLimit')}, --pids-limit`
    case 'buildNetwork': return 'networkmode, docker build --network'
    case 'buildExtraHosts': return 'extrahosts, docker build --add-host'
    case 'networkDriver': return 'Driver, docker network create --driver'
    case 'pluginPrivileges': return 'the privileges granted'
    case 'tmpfsSizes':
    case 'tmpfsOptions': return op === 'VolumeCreate' ? 'DriverOpts o of a tmpfs volume, -o o=' : service ? `${spec('Mounts')} tmpfs, --mount type=tmpfs` : `${hc('Tmpfs')}/Mounts tmpfs, --tmpfs/--mount type=tmpfs`
    case 'counts': return 'ExposedPorts and PortBindings (ranges expanded), Binds/Mounts/Tmpfs/Volumes, Env, Devices, ExtraHosts, Dns*, Ulimits, Labels, Annotations'
    case 'mountOptions': return service ? `${spec('Mounts')} propagation` : `${hc('Binds')} modes and Mounts propagation, -v src:dst:opts/--mount bind-propagation=`
    case 'shmSize': return `${hc('ShmSize')}, --shm-size`
    case 'ulimits': return service ? `${spec('Ulimits')}, --ulimit` : `${hc('Ulimits')}, --ulimit`
    case 'oomKillDisable': return `${hc('OomKillDisable')}, --oom-kill-disable`
    case 'oomScoreAdj': return service ? `${spec('OomScoreAdj')}, --oom-score-adj` : `${hc('OomScoreAdj')}, --oom-score-adj`
    case 'cpuShares': return `${hc('CpuShares')}, --cpu-shares`
    case 'blkioWeight': return `${hc('BlkioWeight')}, --blkio-weight`
    case 'blkioDevices': return `${hc('BlkioWeightDevice')}/BlkioDevice*, --blkio-weight-device/--device-read-bps/--device-write-bps/--device-read-iops/--device-write-iops`
    case 'cpuRealtimePeriod': return `${hc('CpuRealtimePeriod')}, --cpu-rt-period`
    case 'cpuRealtimeRuntime': return `${hc('CpuRealtimeRuntime')}, --cpu-rt-runtime`
    case 'memorySwap': return `${hc('MemorySwap')}, --memory-swap`
    case 'logDriver': return service ? 'TaskTemplate.LogDriver.Name, --log-driver' : `${hc('LogConfig')}.Type, --log-driver`
    case 'logOptions':
    case 'logMaxSize':
    case 'logMaxFile': return service ? 'TaskTemplate.LogDriver.Options, --log-opt' : `${hc('LogConfig')}.Config, --log-opt`
    case 'volumeDrivers': return op === 'VolumeCreate' ? 'Driver, docker volume create --driver' : service ? `${spec('Mounts')} volume driver, --mount volume-driver=` : `${hc('VolumeDriver')}/Mounts volume driver, --volume-driver/--mount volume-driver=`
    case 'serviceRuntime': return 'TaskTemplate.Runtime/PluginSpec'
    case 'secretDriver': return 'Driver, docker secret create --driver'
    default: return ''
  }
}

/** `r.obj.a.b` -> `a.b`; null for anything else. */
function factPath (n: Node | undefined): string | null {
  const parts: string[] = []
  let x = n
  while (x?.type === 'MemberExpression' && x.computed !== true && x.property?.type === 'Identifier') {
    parts.unshift(x.property.name ?? '')
    x = x.object
  }
  return x?.type === 'Identifier' && x.name === 'r_obj' && parts.length ? parts.join('.') : null
}

/** The body and query as sent may hold secrets: their values are never shown. */
function hidden (fact: string): boolean {
  return fact === 'body' || fact === 'query' || fact.startsWith('body.') || fact.startsWith('query.')
}

/** The value of the fact at `path` (`namespaces.network`). */
function factValue (path: string, c: Context): unknown {
  let v: unknown = c.r_obj
  for (const k of path.split('.')) v = v !== null && typeof v === 'object' ? (v as Record<string, unknown>)[k] : undefined
  return v
}

function value (n: Node | undefined, c: Context): unknown {
  if (!n) return undefined
  try { return evaluate(n as never, c) } catch { return undefined }
}

function text (v: unknown): string {
  if (v === '') return 'unset'
  if (typeof v === 'string') return /^[\x21-\x7e]{1,120}$/.test(v) ? v : JSON.stringify(v.length > 120 ? v.slice(0, 120) + '…' : v)
  if (typeof v === 'number' || typeof v === 'boolean') return String(v)
  if (v === undefined || v === null) return 'unset'
  return JSON.stringify(v).slice(0, 120)
}

/** At most five values, then a count. */
function list (vs: readonly unknown[]): string {
  if (!vs.length) return 'none'
  const shown = vs.slice(0, 5).map(text).join(', ')
  return vs.length > 5 ? `${shown} and ${vs.length - 5} more` : shown
}

function csv (v: unknown): string[] {
  return String(v ?? '').split(',').map((s) => s.trim()).filter(Boolean)
}

function values (v: unknown): unknown[] {
  return Array.isArray(v) ? v : []
}

/** `hostPaths /etc (HostConfig.Binds/Mounts, -v/--mount)`, or the field alone when its value is not to be shown. */
function shown (fact: string, op: string, v: string): string {
  const from = source(fact, op)
  if (hidden(fact)) return `${fact} (value not shown)`
  return `${fact} ${v}${from ? ` (${from})` : ''}`
}

const NEGATED: Record<string, string> = { '<': '>=', '<=': '>', '>': '<=', '>=': '<', '==': 'other than', '===': 'other than', '!=': '', '!==': '' }

/** `F != 'a' && F != 'b' && ...` over one fact: the values it lets through. */
function exceptions (n: Node): { fact: string, allowed: unknown[] } | null {
  if (n.type === 'LogicalExpression' && n.operator === '&&') {
    const l = exceptions(n.left!)
    const r = exceptions(n.right!)
    return l && r && l.fact === r.fact ? { fact: l.fact, allowed: [...l.allowed, ...r.allowed] } : null
  }
  if (n.type === 'BinaryExpression' && (n.operator === '!=' || n.operator === '!==') && n.right?.type === 'Literal') {
    const fact = factPath(n.left)
    return fact ? { fact, allowed: [n.right.value] } : null
  }
  return null
}

function alternatives (vs: readonly unknown[]): string {
  const t = vs.map(text)
  return t.length > 1 ? `${t.slice(0, -1).join(', ')} or ${t[t.length - 1]}` : t.join('')
}

/** The clauses that make `n` hold in `c`; null when its shape is not one known here. */
function holds (n: Node, c: Context, op: string): Clause[] | null {
  switch (n.type) {
    case 'Literal':
      return n.value === true ? [] : null
    case 'UnaryExpression':
      return n.operator === '!' ? fails(n.argument!, c, op) : null
    case 'LogicalExpression': {
      const ex = exceptions(n)
      if (ex) return [{ matched: shown(ex.fact, op, text(factValue(ex.fact, c))), allowed: `${ex.fact} ${alternatives(ex.allowed)}` }]
      if (n.operator === '&&') {
        const l = holds(n.left!, c, op)
        const r = holds(n.right!, c, op)
        return l && r ? [...l, ...r] : null
      }
      if (n.operator === '||') {
        const out: Clause[] = []
        for (const side of [n.left!, n.right!]) {
          if (!value(side, c)) continue
          const h = holds(side, c, op)
          if (!h) return null
          out.push(...h)
        }
        return out
      }
      return null
    }
    case 'BinaryExpression':
      return comparison(n, c, op)
    case 'CallExpression':
      return call(n, c, op)
    case 'MemberExpression': {
      const fact = factPath(n)
      return fact ? [{ matched: shown(fact, op, text(value(n, c))), allowed: `${fact} false or unset` }] : null
    }
    default:
      return null
  }
}

/** The clauses that make `n` fail in `c` (for `!n`). */
function fails (n: Node, c: Context, op: string): Clause[] | null {
  if (n.type === 'BinaryExpression' && n.operator === 'in' && n.left?.type === 'Literal' && n.right?.type === 'Identifier' && n.right.name === 'r_sub') {
    const roles = values(c.r_sub).map(String).filter((s) => !s.startsWith('user:'))
    return [{ matched: `roles ${roles.length ? roles.join(', ') : 'none'}`, allowed: `role ${text(n.left.value)}` }]
  }
  const fact = factPath(n)
  if (fact) return [{ matched: shown(fact, op, text(value(n, c))), allowed: `${fact} set` }]
  if (n.type === 'UnaryExpression' && n.operator === '!') return holds(n.argument!, c, op)
  return null
}

function comparison (n: Node, c: Context, op: string): Clause[] | null {
  const operator = n.operator ?? ''
  if (!(operator in NEGATED) || n.right?.type !== 'Literal') return null
  const limit = n.right.value
  const left = n.left!
  // count(F) > 0: F must be empty.
  if (left.type === 'CallExpression' && left.callee?.name === 'count') {
    const fact = factPath(left.arguments?.[0])
    if (!fact) return null
    const vs = values(value(left.arguments?.[0], c))
    const none = (operator === '>' && limit === 0) || (operator === '>=' && limit === 1) || (operator === '!=' && limit === 0)
    return [{ matched: shown(fact, op, list(vs)), allowed: none ? `${fact}: none` : `count of ${fact} ${NEGATED[operator]} ${text(limit)}` }]
  }
  const fact = factPath(left)
  if (!fact) return null
  const negated = NEGATED[operator]
  return [{ matched: shown(fact, op, text(value(left, c))), allowed: `${fact} ${negated ? `${negated} ` : ''}${text(limit)}` }]
}

function call (n: Node, c: Context, op: string): Clause[] | null {
  const name = n.callee?.type === 'Identifier' ? n.callee.name ?? '' : ''
  const args = n.arguments ?? []
  const fact = factPath(args[0])
  if (!fact) return null
  const v = value(args[0], c)
  const arg = value(args[1], c)
  const fns = conditionFunctions
  switch (name) {
    case 'anyOutside':
      return [{ matched: shown(fact, op, list(values(v).filter((p) => fns.anyOutside([p], arg)))), allowed: csv(arg).length ? `${fact} under ${csv(arg).join(', ')}` : `${fact}: none` }]
    case 'anyNotIn':
      return [{ matched: shown(fact, op, list(values(v).filter((x) => fns.anyNotIn([x], arg)))), allowed: `${fact} only ${csv(arg).join(', ')}` }]
    case 'anyIn':
      return [{ matched: shown(fact, op, list(values(v).filter((x) => fns.anyIn([x], arg)))), allowed: `${fact} without ${csv(arg).join(', ')}` }]
    case 'anyNotPrefixed':
      return [{ matched: shown(fact, op, list(values(v).filter((x) => fns.anyNotPrefixed([x], arg)))), allowed: `${fact} only under ${csv(arg).join(', ')}` }]
    case 'anyStartsWith':
      return [{ matched: shown(fact, op, list(values(v).filter((x) => fns.anyStartsWith([x], arg)))), allowed: `${fact} not starting with ${text(arg)}` }]
    case 'startsWith':
      return [{ matched: shown(fact, op, text(v)), allowed: `${fact} not starting with ${text(arg)}` }]
    case 'count':
      return [{ matched: shown(fact, op, list(values(v))), allowed: `${fact}: none` }]
    case 'anyNotBetween': {
      const max = value(args[2], c)
      return [{ matched: shown(fact, op, list(values(v).filter((x) => fns.anyNotBetween([x], arg, max)))), allowed: `${fact} from ${text(arg)} to ${text(max)}` }]
    }
    case 'ulimitsOutside': {
      const out = values(v).filter((u) => fns.ulimitsOutside([u], arg)).map((u) => {
        const { name, soft, hard } = u as { name: unknown, soft: unknown, hard: unknown }
        return `${String(name)}=${String(soft)}:${String(hard)}`
      })
      return [{ matched: shown(fact, op, list(out)), allowed: `${fact} only ${csv(arg).join(', ')} (name=most; -1 is unlimited)` }]
    }
    case 'isRoot':
      return [{ matched: shown(fact, op, text(v)), allowed: `${fact} with neither user nor group root (0), e.g. 1000:1000` }]
    case 'sharedNamespace': {
      const modes = v !== null && typeof v === 'object' ? v as Record<string, unknown> : {}
      const keys = args[1] === undefined || arg === '*' ? Object.keys(modes) : csv(arg)
      const shared = keys.filter((k) => fns.sharedNamespace(modes, k))
      if (!shared.length) return null
      return shared.map((k) => ({ matched: shown(`${fact}.${k}`, op, text(modes[k])), allowed: `${fact}.${k} private (not host, container:<id>, ns:<path> or another engine-specific mode)` }))
    }
    case 'countsOver': {
      const counts = v !== null && typeof v === 'object' ? v as Record<string, unknown> : {}
      const over = csv(arg).filter((e) => fns.countsOver(counts, e)).map((e) => `${e.split('=')[0]}=${text(counts[e.split('=')[0]])}`)
      return [{ matched: shown(fact, op, list(over)), allowed: `${fact} at most ${csv(arg).join(', ')}` }]
    }
    default:
      return null
  }
}

const parsed = new Map<string, Node | null>()

/**
 * Why `condition` holds for the request in `context` (the evaluation context of the
 * rule: r_obj, r_dom, r_sub...). Without a known shape: the condition as written.
 */
export function explain (condition: string, context: Context): Reason {
  let node = parsed.get(condition)
  if (node === undefined) {
    try {
      node = parse(Util.bracketCompatible(Util.escapeAssertion(condition))) as unknown as Node
    } catch {
      node = null
    }
    if (parsed.size < 10_000) parsed.set(condition, node)
  }
  const op = String(context.r_op ?? '')
  const clauses = node ? holds(node, { ...conditionFunctions, ...context }, op) : null
  if (!clauses) return { matched: [`the condition ${condition}`], allowed: [] }
  const allowed = [...new Set(clauses.map((x) => x.allowed).filter((a): a is string => a !== undefined))]
  return { matched: clauses.map((x) => x.matched), allowed }
}

/** `matched …; allowed: …`, or what a rule without a condition means. */
export function describeReason (reason: Reason, op: string): string {
  if (!reason.matched.length) return `the rule has no condition: it applies to every ${op} request`
  return `matched ${reason.matched.join(', ')}${reason.allowed.length ? `; allowed: ${reason.allowed.join(', ')}` : ''}`
}
