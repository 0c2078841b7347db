/**
 * Differential test of request bodies: generated JSON bodies for ContainerCreate,
 * ContainerUpdate, ContainerExec, NetworkCreate, VolumeCreate and (on the swarm engine)
 * ServiceCreate, full of the fields that
 * decide what a container may reach (Privileged, Binds, Mounts, CapAdd, namespace modes,
 * SecurityOpt, Devices, Memory, PidsLimit, User, owner labels...), spelled the ways Go's
 * encoding/json still reads them or nearly does: any key casing, `\u` escapes in keys and
 * values, the Kelvin sign and the long s (which Go folds to `k` and `s`), lookalikes it does
 * not fold (dotless i, fullwidth letters), a field twice in two spellings, host fields at
 * the top level of a create body beside, instead of or without HostConfig, numbers at and
 * past the int64 limits (`9223372036854775808`, `1e3`, `1.0`, `-0`, `1e400`), null and
 * values of the wrong JSON type.
 *
 * Each body goes to the engine three ways, byte for byte as generated:
 *   (a) directly: what the engine stores (inspected) or its refusal is the truth;
 *   (b) through the gateway as an administrator (no rewrites, no owner labels): the engine
 *       must store exactly what (a) stored, or refuse as (a) refused. The gateway may refuse
 *       more only where it is stricter by design (a field twice, a non-ASCII field name:
 *       src/api/body/decode.ts), and may be accepted where (a) was refused only for a
 *       top-level host field of the wrong type beside a HostConfig object, which the engine
 *       ignores but still type-checks and the gateway drops (quirks.ts);
 *   (c) through the gateway as tenant A: when it is let through, what the engine stored
 *       keeps A off the host (not privileged, no host binds or bind mounts, capabilities of
 *       the allowed set, no devices, no host namespaces, no security option but
 *       no-new-privileges, a PID and a memory limit, A's owner labels) and equals what (a)
 *       stored in every field the tenant's rewrites do not set. So a body the engine would
 *       run privileged is refused to A, whatever its spelling.
 * Neither gateway path may fail (502, 503, 504) where the engine answered.
 *
 * Any difference fails with the body and fast-check's seed and path. A bounded run is part
 * of `npm test` (a fixed seed, printed); `PCX_DIFF_RUNS=2000 node
 * dist/test/differential-bodies.test.js` runs a longer one with a fresh seed (also printed;
 * `PCX_DIFF_SEED=<seed>` repeats a run). README.md, "Tests".
 */
import { randomBytes } from 'node:crypto'
import path from 'node:path'
import { isDeepStrictEqual } from 'node:util'
import fc from 'fast-check'
import jwt from 'jsonwebtoken'
import t from 'tap'
import { engine, policiesOnSharedBridge, swarmEngine, startTestGateway, type TestGateway, request, type RawReply } from './helpers/gateway'

const LONG = process.env.PCX_DIFF_RUNS !== undefined
const RUNS = Number(process.env.PCX_DIFF_RUNS ?? 200)
const SEED = process.env.PCX_DIFF_SEED !== undefined ? Number(process.env.PCX_DIFF_SEED) : LONG ? randomBytes(4).readInt32LE() : 20261125
const SECRET = randomBytes(32).toString('hex')
const RUN = randomBytes(3).toString('hex')
const TA = `diffb-${RUN}`
const SUBJECT = 'alice'
const TENANT_LABEL = 'io.portcullis.tenant'
const SUBJECT_LABEL = 'io.portcullis.subject'
const IMAGE = engine().image
const TOKEN = jwt.sign({ sub: SUBJECT, tenant: TA, roles: ['tenant'], exp: Math.floor(Date.now() / 1000) + 7200 }, SECRET, { algorithm: 'HS256' })
const V = '/v1.41'
const GiB = 1024 ** 3
/** base.csv's capabilities rule, and tenancy.yaml's default memory quota. */
const ALLOWED_CAPS = new Set('AUDIT_WRITE,CHOWN,DAC_OVERRIDE,FOWNER,FSETID,KILL,MKNOD,NET_BIND_SERVICE,NET_RAW,SETFCAP,SETGID,SETPCAP,SETUID,SYS_CHROOT'.split(','))
const MEMORY_QUOTA = 64 * GiB
const TENANT_NETWORK_OPTIONS = new Set(['com.docker.network.bridge.enable_icc', 'com.docker.network.driver.mtu', 'com.docker.network.container_iface_prefix'])

let gw: TestGateway
/** The same in front of the swarm-mode engine, for services. */
let swarmGw: TestGateway
type Doc = Record<string, any>

// ---------------------------------------------------------------------------------------
// Bodies as text: keys spelled as a client chooses, values as raw JSON.

/** A JSON value as text: an object's members keep their key's exact spelling (JSON string text, quotes included). */
type Raw = { readonly o: ReadonlyArray<readonly [string, Raw]> } | { readonly a: readonly Raw[] } | { readonly v: string }

/** A placeholder for a name unique to each request (networks, volumes), never escaped. */
const N = '@N@'
const T = TA

function render (r: Raw): string {
  if ('v' in r) return r.v
  if ('a' in r) return `[${r.a.map(render).join(',')}]`
  return `{${r.o.map(([k, v]) => `${k}:${render(v)}`).join(',')}}`
}
/** A body's text as some clients send it: compact, indented, or ending in a newline (Go's json.Encoder). */
const layout: fc.Arbitrary<(text: string) => string> = fc.constantFrom(
  (x: string) => x,
  (x: string) => `${x}\n`,
  (x: string) => `\t${x.replaceAll('":', '" :\r\n ').replaceAll(',"', ', "')} `
)
const laidOut = (body: fc.Arbitrary<Raw>): fc.Arbitrary<Raw> => fc.tuple(body, layout).map(([r, f]) => lit(f(render(r))))
const lit = (text: string): Raw => ({ v: text })
const obj = (members: ReadonlyArray<readonly [string, Raw]>): Raw => ({ o: members })
const flag = (n: number): fc.Arbitrary<boolean[]> => fc.array(fc.boolean(), { minLength: n, maxLength: n })
const hex4 = (c: number, upper: boolean): string => { const h = c.toString(16).padStart(4, '0'); return upper ? h.toUpperCase() : h }
/** One character as JSON string text: `\uXXXX` when `escape`, else as JSON.stringify writes it. */
const jsonChar = (c: string, escape: boolean, upper: boolean): string => escape ? `\\u${hex4(c.charCodeAt(0), upper)}` : JSON.stringify(c).slice(1, -1)

/** A string value as JSON text: plainly, with some characters `\u`-escaped, or with `/` as `\/`. */
function strText (s: string): fc.Arbitrary<string> {
  if (s === '') return fc.constant('""')
  return fc.oneof(
    { weight: 8, arbitrary: fc.constant(JSON.stringify(s)) },
    { weight: 2, arbitrary: fc.tuple(flag(s.length), fc.boolean()).map(([m, up]) => `"${[...s].map((c, i) => jsonChar(c, m[i], up)).join('')}"`) },
    { weight: s.includes('/') ? 1 : 0, arbitrary: fc.constant(JSON.stringify(s).replaceAll('/', '\\/')) }
  )
}

/** Letters Go's encoding/json folds onto ASCII ones (unicode.SimpleFold): the Kelvin sign and the long s. */
const GO_FOLDS: Record<string, string> = { k: '\u212a', K: '\u212a', s: '\u017f', S: '\u017f' }
/** Lookalikes Go does NOT fold onto ASCII: dotless i, dotted capital I, fullwidth letters. */
function lookalike (c: string): string {
  if (c === 'i') return '\u0131'
  if (c === 'I') return '\u0130'
  const code = c.charCodeAt(0)
  if (code >= 0x41 && code <= 0x5a) return String.fromCharCode(0xff21 + code - 0x41)
  if (code >= 0x61 && code <= 0x7a) return String.fromCharCode(0xff41 + code - 0x61)
  return c
}
const flipCase = (c: string): string => c === c.toUpperCase() ? c.toLowerCase() : c.toUpperCase()

/**
 * A field name as a JSON key: exact, case-flipped, partly `\u`-escaped, or with one letter
 * replaced by a Go-folding (K, ſ) or a non-folding (ı, Ａ) lookalike, itself sometimes escaped.
 */
function spelled (name: string): fc.Arbitrary<string> {
  const n = name.length
  const folding = [...name].map((c, i) => GO_FOLDS[c] !== undefined ? i : -1).filter((i) => i >= 0)
  const swap = (pick: (c: string) => string, positions: number[]): fc.Arbitrary<string> =>
    fc.tuple(fc.constantFrom(...positions), fc.boolean(), flag(n)).map(([at, esc, flips]) =>
      `"${[...name].map((c, i) => i === at ? jsonChar(pick(c), esc, false) : jsonChar(flips[i] ? flipCase(c) : c, false, false)).join('')}"`)
  const letters = [...name].map((c, i) => /[a-zA-Z]/.test(c) ? i : -1).filter((i) => i >= 0)
  return fc.oneof(
    { weight: 12, arbitrary: fc.constant(JSON.stringify(name)) },
    { weight: 6, arbitrary: flag(n).map((m) => `"${[...name].map((c, i) => m[i] ? flipCase(c) : c).join('')}"`) },
    { weight: 2, arbitrary: fc.tuple(flag(n), flag(n), fc.boolean()).map(([m, e, up]) => `"${[...name].map((c, i) => jsonChar(m[i] ? flipCase(c) : c, e[i], up)).join('')}"`) },
    { weight: folding.length > 0 ? 1 : 0, arbitrary: folding.length > 0 ? swap((c) => GO_FOLDS[c], folding) : fc.constant('""') },
    { weight: letters.length > 0 ? 1 : 0, arbitrary: letters.length > 0 ? swap(lookalike, letters) : fc.constant('""') }
  )
}

type Spec = Readonly<Record<string, fc.Arbitrary<Raw>>>

/**
 * Members for some of `spec`'s fields (those in `required` always), each spelled as
 * spelled() does, in any order; sometimes one of them twice, in another spelling with
 * another value (Go: the last one wins; the gateway refuses the body).
 */
function members (spec: Spec, opts: { required?: readonly string[], max?: number } = {}): fc.Arbitrary<Array<readonly [string, Raw]>> {
  const required = opts.required ?? []
  const optional = Object.keys(spec).filter((k) => !required.includes(k))
  return fc.subarray(optional, { maxLength: Math.min(opts.max ?? 6, optional.length) }).chain((chosen) => {
    const names = [...required, ...chosen]
    const twice = names.length === 0
      ? fc.constant<string[]>([])
      : fc.oneof({ weight: 9, arbitrary: fc.constant<string[]>([]) }, { weight: 1, arbitrary: fc.constantFrom(...names).map((x) => [x]) })
    return twice.chain((extra) => {
      const all = [...names, ...extra]
      return fc.tuple(...all.map((k) => fc.tuple(spelled(k), spec[k]))).chain((ms) => fc.shuffledSubarray(ms, { minLength: ms.length, maxLength: ms.length }))
    })
  })
}
const struct = (spec: Spec, opts?: { required?: readonly string[], max?: number }): fc.Arbitrary<Raw> => members(spec, opts).map(obj)

// ---------------------------------------------------------------------------------------
// Values.

/** null and values of the wrong JSON type (Go: null leaves the field alone, a wrong type refuses the body). */
const odd = fc.constantFrom('null', 'true', '1', '"1"', '[]', '{}').map(lit)
const weighted = (good: fc.Arbitrary<Raw>, oddWeight = 1): fc.Arbitrary<Raw> => fc.oneof({ weight: 14, arbitrary: good }, { weight: oddWeight, arbitrary: odd })
const str = (...xs: string[]): fc.Arbitrary<Raw> => weighted(fc.constantFrom(...xs).chain(strText).map(lit))
const bool = weighted(fc.constantFrom('true', 'false').map(lit))
/** Integers at and past the limits of int64 and of what the engine accepts, and numbers Go refuses for an integer field. */
const LIMITS = ['0', '-0', '0.0', '-0.0', '1', '-1', '-2', '1.0', '1e0', '0.5', '100e-2', '1e3', '1E9', '1e400', '-1e400', '1e-400', '9223372036854775807', '9223372036854775808',
  '-9223372036854775808', '-9223372036854775809', '18446744073709551616', '100', '1024', '4194304', '6291456', '1073741824', '2147483648', '68719476736', '68719476737']
const num = (...extra: string[]): fc.Arbitrary<Raw> => weighted(fc.constantFrom(...LIMITS, ...extra).map(lit))
const strList = (...xs: string[]): fc.Arbitrary<Raw> => weighted(fc.array(fc.constantFrom(...xs).chain(strText).map(lit), { maxLength: 3 }).map((a) => ({ a })))
/** A map (keys exact in Go) of some of these entries, keys sometimes escaped or re-cased (another key then). */
function map (entries: Record<string, string[]>): fc.Arbitrary<Raw> {
  const keys = Object.keys(entries)
  const key = (k: string): fc.Arbitrary<string> => fc.oneof({ weight: 6, arbitrary: fc.constant(JSON.stringify(k)) }, { weight: 1, arbitrary: strText(k) }, { weight: 1, arbitrary: fc.constant(JSON.stringify(k.toUpperCase())) })
  return weighted(fc.subarray(keys, { maxLength: Math.min(3, keys.length) }).chain((ks) => fc.tuple(...ks.map((k) => fc.tuple(key(k), fc.constantFrom(...entries[k]).chain(strText).map(lit))))).map(obj))
}
const list = (item: fc.Arbitrary<Raw>): fc.Arbitrary<Raw> => weighted(fc.array(item, { maxLength: 2 }).map((a) => ({ a })))

/** Another tenant's volume, on the swarm engine. */
const OTHERS_VOLUME = `diffb-${RUN}-others`
const OWNER_LABELS = map({ [TENANT_LABEL]: ['mallory-team', T, ''], [SUBJECT_LABEL]: ['mallory'], 'com.example.app': ['web'] })

/** HostConfig's fields that decide what a container reaches, with values that do and do not. */
const HOST: Spec = {
  Privileged: bool,
  Binds: strList('/etc:/h', `/srv/portcullis/${T}/d:/d`, `/srv/portcullis/${T}/../../../etc:/h`, 'diffb-vol:/v', '/:/h:ro'),
  CapAdd: strList('SYS_ADMIN', 'CAP_SYS_ADMIN', 'sys_admin', 'ALL', 'CHOWN', 'NET_RAW', 'cap_net_raw'),
  CapDrop: strList('ALL', 'CHOWN'),
  NetworkMode: str('host', 'HOST', 'host ', 'host\u0000', 'bridge', 'none', 'default', ''),
  PidMode: str('host', 'HOST', ' host', ''),
  IpcMode: str('host', 'private', 'shareable', 'none', ''),
  UTSMode: str('host', ''),
  UsernsMode: str('host', ''),
  CgroupnsMode: str('host', 'private', 'HOST', ''),
  SecurityOpt: strList('seccomp=unconfined', 'seccomp:unconfined', 'apparmor=unconfined', 'label=disable', 'label:disable', 'no-new-privileges', 'no-new-privileges=true', 'no-new-privileges:false', 'systempaths=unconfined'),
  Devices: list(struct({ PathOnHost: str('/dev/null', '/dev/mem'), PathInContainer: str('/dev/x'), CgroupPermissions: str('rwm', 'r') }, { required: ['PathOnHost'] })),
  Mounts: list(struct({
    Type: str('bind', 'volume', 'tmpfs', 'BIND'),
    Source: str('/etc', `/srv/portcullis/${T}/m`, 'diffb-mvol', ''),
    Target: str('/mnt'),
    VolumeOptions: weighted(struct({ DriverConfig: weighted(struct({ Name: str('local', ''), Options: map({ type: ['none', 'tmpfs'], o: ['bind', 'size=1m'], device: ['/etc', 'tmpfs'] }) })) })),
  }, { required: ['Target'] })),
  MaskedPaths: strList('/proc/kcore'),
  Sysctls: map({ 'net.ipv4.ip_forward': ['1'], 'kernel.shmmax': ['1'] }),
  Runtime: str('runc', 'RUNC', ''),
  CgroupParent: str('/', 'diffb', ''),
  Memory: num(),
  MemorySwap: num(),
  CpuShares: num(),
  CpusetCpus: str('0', ''),
  NanoCpus: num('1000000000', '1e9'),
  PidsLimit: num(),
  VolumeDriver: str('local', ''),
  ReadonlyRootfs: bool,
}
const CONFIG: Spec = {
  Image: weighted(strText(IMAGE).map(lit), 0),
  Cmd: weighted(fc.constant(lit('["sleep","1"]')), 0),
  User: str('root', '0', '0:0', '1000', '1000:0', 'nobody', ''),
  Labels: OWNER_LABELS,
  Env: strList('A=1'),
}

/**
 * A ContainerCreate body: Config fields, and host fields in HostConfig, at the top level
 * (the engine's deprecated wrapper), or both; HostConfig an object, null or absent;
 * sometimes the deprecated top-level Cpuset.
 */
const createBody: fc.Arbitrary<Raw> = fc.record({
  config: members(CONFIG, { required: ['Image'], max: 4 }),
  inner: members(HOST, { max: 6 }),
  top: fc.oneof({ weight: 3, arbitrary: fc.constant([]) }, { weight: 1, arbitrary: members(HOST, { max: 3 }) }),
  hostConfig: fc.constantFrom('object', 'object', 'object', 'null', 'absent'),
  hcKey: spelled('HostConfig'),
  cpuset: fc.oneof({ weight: 6, arbitrary: fc.constant(null) }, { weight: 1, arbitrary: fc.tuple(spelled('Cpuset'), str('0', '')) }),
}).chain(({ config, inner, top, hostConfig, hcKey, cpuset }) => {
  const ms: Array<readonly [string, Raw]> = [...config, ...top]
  if (hostConfig === 'object') ms.push([hcKey, obj(inner)])
  else if (hostConfig === 'null') ms.push([hcKey, lit('null')])
  if (cpuset !== null) ms.push(cpuset)
  return fc.shuffledSubarray(ms, { minLength: ms.length, maxLength: ms.length }).map(obj)
})

/** A ContainerUpdate body: the resources it changes, and fields an update does not have (the engine ignores them). */
const updateBody: fc.Arbitrary<Raw> = struct({
  Memory: num(),
  MemorySwap: num(),
  MemoryReservation: num(),
  PidsLimit: num(),
  CpuShares: num(),
  NanoCpus: num('1000000000'),
  CpuQuota: num(),
  CpuPeriod: num(),
  BlkioWeight: num('10', '65536'),
  RestartPolicy: weighted(struct({ Name: str('always', 'no', 'on-failure', 'unless-stopped', 'bogus'), MaximumRetryCount: num() })),
  Privileged: bool,
  CapAdd: strList('SYS_ADMIN'),
  HostConfig: weighted(struct({ Privileged: bool, Memory: num() })),
}, { max: 5 })

/** A ContainerExec body. */
const execBody: fc.Arbitrary<Raw> = struct({
  Cmd: weighted(fc.constant(lit('["true"]')), 0),
  Privileged: bool,
  User: str('root', '0', '00', '+0', '0:0', '1000:0', '1000', '65534:65534', 'nobody', ''),
  Tty: bool,
  AttachStdout: bool,
  Env: strList('A=1'),
  WorkingDir: str('/', '/tmp'),
  Detach: bool,
}, { required: ['Cmd'], max: 5 })

/** A NetworkCreate body (named N: each request its own name). No explicit subnets: the three requests would overlap. */
const networkBody: fc.Arbitrary<Raw> = struct({
  Name: weighted(fc.constant(lit(JSON.stringify(N))), 0),
  Driver: str('bridge', 'host', 'null', 'overlay', ''),
  Internal: bool,
  Attachable: bool,
  Ingress: bool,
  ConfigOnly: bool,
  CheckDuplicate: bool,
  Options: map({ 'com.docker.network.bridge.enable_icc': ['false'], 'com.docker.network.driver.mtu': ['1400'], 'com.docker.network.bridge.host_binding_ipv4': ['127.0.0.1'], 'com.docker.network.bridge.enable_ip_masquerade': ['false'] }),
  IPAM: weighted(struct({ Driver: str('default', 'null', ''), Options: map({ foo: ['bar'] }) })),
  Labels: OWNER_LABELS,
}, { required: ['Name'], max: 5 })

/** A VolumeCreate body (named N). */
const volumeBody: fc.Arbitrary<Raw> = struct({
  Name: weighted(fc.constant(lit(JSON.stringify(N))), 0),
  // (no unknown driver names: the engine looks for a plugin of that name for 15 s)
  Driver: str('local', ''),
  DriverOpts: map({ type: ['none', 'tmpfs', 'ext4'], o: ['bind', 'size=1m', 'rbind'], device: ['/etc', 'tmpfs', `/srv/portcullis/${T}/v`, '/dev/sda1'], Type: ['none'] }),
  Labels: OWNER_LABELS,
}, { required: ['Name'], max: 4 })

/**
 * A ServiceCreate body (named N) for the swarm engine: what its tasks' containers may
 * reach, spelled as above; no replicas unless the Mode is misspelled.
 */
const serviceBody: fc.Arbitrary<Raw> = struct({
  Name: weighted(fc.constant(lit(JSON.stringify(N))), 0),
  Mode: weighted(fc.constant(lit('{"Replicated":{"Replicas":0}}')), 0),
  Labels: OWNER_LABELS,
  TaskTemplate: weighted(struct({
    ContainerSpec: weighted(struct({
      Image: weighted(strText(IMAGE).map(lit), 0),
      User: str('0', '1000', '1000:0', 'root', 'nobody', ''),
      Groups: strList('0', '1000', 'wheel'),
      CapabilityAdd: strList('CAP_SYS_ADMIN', 'SYS_ADMIN', 'CAP_CHOWN', 'ALL'),
      CapabilityDrop: strList('ALL'),
      Privileges: weighted(struct({
        SELinuxContext: weighted(struct({ Disable: bool, User: str('system_u') })),
        Seccomp: weighted(struct({ Mode: str('default', 'unconfined', 'custom') })),
        AppArmor: weighted(struct({ Mode: str('default', 'disabled') })),
        NoNewPrivileges: bool,
      })),
      // (the swarm reads a mount's Type ignoring case, and no Type as a bind)
      Mounts: list(struct({
        Type: str('bind', 'volume', 'tmpfs', 'BIND', 'Volume', 'b\u0131nd', ''),
        Source: str('/etc', `/srv/portcullis/${T}/m`, OTHERS_VOLUME, ''),
        Target: str('/mnt'),
        ReadOnly: bool,
        VolumeOptions: weighted(struct({ DriverConfig: weighted(struct({ Name: str('local', ''), Options: map({ type: ['none', 'tmpfs'], o: ['bind', 'size=1m'], device: ['/etc', 'tmpfs'] }) })) })),
      }, { required: ['Target'] })),
      Sysctls: map({ 'net.ipv4.ip_forward': ['1'] }),
      Labels: OWNER_LABELS,
      Init: bool,
    }, { required: ['Image'], max: 5 }), 0),
    Resources: weighted(struct({ Limits: weighted(struct({ MemoryBytes: num(), Pids: num(), NanoCPUs: num('1000000000') })) })),
    Networks: list(struct({ Target: str('host', 'bridge') }, { required: ['Target'] })),
  }, { required: ['ContainerSpec'], max: 3 }), 0),
}, { required: ['Name', 'Mode', 'TaskTemplate'], max: 2 })

// ---------------------------------------------------------------------------------------
// Sending, and what the engine stored.

type Who = 'direct' | 'admin' | 'tenant'
const WHO: readonly Who[] = ['direct', 'admin', 'tenant']
let named = 0

/** The body's text for one request, with a name of its own. */
function text (body: Raw, who: Who): { text: string, name: string } {
  const name = `diffb-${RUN}-${++named}-${who[0]}`
  return { text: render(body).replaceAll(N, name), name }
}
/**
 * Send a body; status 0 when the connection is closed without an answer. The engine 20.10
 * does that for a create body without any Config field and with `"UTSMode": "host"` or a
 * `container:` network mode: runconfig.validateNetMode reads the nil Config, and net/http
 * recovers the panic by closing the connection (the gateway then answers 502).
 */
async function send (who: Who, method: string, target: string, body: string, swarm = false): Promise<RawReply> {
  const data = Buffer.from(body)
  try {
    if (who === 'direct') return await request((swarm ? swarmEngine() : engine()).socket, method, `${V}${target}`, data)
    return await request((swarm ? swarmGw : gw).socket, method, `${V}${target}`, data, who === 'tenant' ? { token: TOKEN } : {})
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ECONNRESET') throw err
    return { status: 0, text: `no answer: ${(err as Error).message}`, json: undefined }
  }
}
const direct = async (method: string, target: string, body?: object): Promise<RawReply> => await request(engine().socket, method, `${V}${target}`, body)
const message = (r: RawReply): string => String(r.json?.message ?? r.text)

interface Outcome { status: number, message: string, doc?: Doc }

/** The gateway refusing what the engine would take, by design (decode.ts): a field or map key twice, a non-ASCII field name. */
const STRICT = /^invalid request body: (duplicate field|duplicate key|non-ASCII field name)/
/** A body the gateway's decoder refused (decode.ts, quirks.ts). */
const OWN_REFUSAL = /^(invalid request body|request body is not valid JSON)/
/**
 * The engine refusing a top-level host field of the wrong type beside a HostConfig object,
 * which it then ignores: the gateway drops such a field unread (quirks.ts), so it forwards
 * a body the engine takes.
 */
const IGNORED_TOP_LEVEL = /^json: cannot unmarshal .+? into Go struct field ContainerConfigWrapper\.(\w+) of type/

/**
 * The gateway answering 502, 503 or 504 says the engine failed it; when the engine, asked
 * directly, answered without failing, the gateway asked it something it cannot answer.
 */
function gatewayFailure (op: string, body: string, d: Outcome, ...through: Outcome[]): void {
  const failed = (s: number): boolean => s === 0 || s === 502 || s === 503 || s === 504
  for (const o of through) if (failed(o.status) && !failed(d.status)) differ(op, body, `the gateway failed (${o.status} ${o.message}) where the engine answered ${d.status} ${d.message}`)
}

const tally = new Map<string, number>()
const count = (what: string): void => { tally.set(what, (tally.get(what) ?? 0) + 1) }
const debug = (...xs: unknown[]): void => { if (process.env.PCX_DIFF_DEBUG !== undefined) console.error(...xs) }

/**
 * Compare (a) and (b): the same status class and, when stored, the same `view`. Returns
 * a description of the difference, or null.
 */
function adminDifference (op: string, d: Outcome, g: Outcome, view: (doc: Doc) => unknown): string | null {
  const ok = (s: number): boolean => s >= 200 && s < 300
  if (ok(d.status) && ok(g.status)) {
    if (isDeepStrictEqual(view(d.doc!), view(g.doc!))) { count(`${op}: both stored the same`); return null }
    return `stored differently:\n  engine:  ${JSON.stringify(view(d.doc!))}\n  gateway: ${JSON.stringify(view(g.doc!))}`
  }
  if (ok(d.status) && g.status === 400 && STRICT.test(g.message)) { count(`${op}: gateway stricter (${STRICT.exec(g.message)![1]})`); return null }
  // Both refused: by the engine both times, or by the gateway's decoder for a body the engine
  // refuses too (the engine 20.10 answers some of its JSON errors with 500).
  if (!ok(d.status) && !ok(g.status)) {
    if (Math.floor(d.status / 100) === Math.floor(g.status / 100) || (g.status === 400 && OWN_REFUSAL.test(g.message))) { count(`${op}: both refused`); return null }
    if (d.status === 0 && g.status === 502) { count(`${op}: the engine hung up both ways`); return null }
  }
  const ignored = IGNORED_TOP_LEVEL.exec(d.message)?.[1]
  if (op === 'ContainerCreate' && !ok(d.status) && ok(g.status) && ignored !== undefined && hostFields.has(ignored)) { count(`${op}: ignored top-level field dropped`); return null }
  return `engine ${d.status} ${d.message}, gateway ${g.status} ${g.message}`
}

// ---------------------------------------------------------------------------------------
// The tenant's side: what the engine stored keeps the tenant off the host.

const under = (p: string, dir: string): boolean => p === dir || p.startsWith(`${dir}/`)
const tenantDir = (): string => `/srv/portcullis/${TA}`
const hostPathOk = (p: string): boolean => !p.startsWith('/') || under(path.posix.normalize(p).replace(/(.)\/$/, '$1'), tenantDir())
const cap = (c: string): string => { const u = c.toUpperCase(); return u.startsWith('CAP_') ? u.slice(4) : u }
/** A security option as key=value (`seccomp:x` is the old syntax; bare no-new-privileges means true). */
const secOpt = (o: string): string => o === 'no-new-privileges' ? 'no-new-privileges=true' : o.replace(/^([^=:]*):/, '$1=')
/** Local volume options that take something from the host (the local driver mounts `device` with `type` and `o`). */
function hostVolume (driver: string, opts: Doc | null | undefined): boolean {
  if ((driver !== '' && driver !== 'local') || opts === null || opts === undefined || Object.keys(opts).length === 0) return false
  const o = String(opts.o ?? '').split(',')
  return !(opts.type === 'tmpfs' && !o.includes('bind') && !o.includes('rbind') && !String(opts.device ?? '').startsWith('/'))
}
const ownerOk = (labels: Doc | null | undefined): boolean => labels?.[TENANT_LABEL] === TA && labels?.[SUBJECT_LABEL] === SUBJECT

let defaultPaths: { MaskedPaths: unknown, ReadonlyPaths: unknown }
/** HostConfig's fields, as the engine shows them. */
let hostFields: ReadonlySet<string>

/** What in a stored container (inspect) reaches past the tenant's confinement. */
function hostReach (doc: Doc): string[] {
  const hc = doc.HostConfig ?? {}
  const out: string[] = []
  if (hc.Privileged === true) out.push('Privileged')
  for (const b of hc.Binds ?? []) if (!hostPathOk(String(b).split(':')[0])) out.push(`bind ${String(b)}`)
  for (const m of hc.Mounts ?? []) {
    if (m.Type === 'bind' && !hostPathOk(String(m.Source))) out.push(`bind mount ${String(m.Source)}`)
    if (m.Type === 'volume' && hostVolume(String(m.VolumeOptions?.DriverConfig?.Name ?? ''), m.VolumeOptions?.DriverConfig?.Options)) out.push('host volume mount')
  }
  for (const c of hc.CapAdd ?? []) if (!ALLOWED_CAPS.has(cap(String(c)))) out.push(`CapAdd ${String(c)}`)
  if ((hc.Devices ?? []).length > 0) out.push('Devices')
  for (const ns of ['NetworkMode', 'PidMode', 'IpcMode', 'UTSMode', 'UsernsMode']) {
    if (hc[ns] === 'host' || String(hc[ns] ?? '').startsWith('container:')) out.push(`${ns} ${String(hc[ns])}`)
  }
  for (const o of hc.SecurityOpt ?? []) if (secOpt(String(o)) !== 'no-new-privileges=true') out.push(`SecurityOpt ${String(o)}`)
  if (!isDeepStrictEqual(hc.MaskedPaths, defaultPaths.MaskedPaths) || !isDeepStrictEqual(hc.ReadonlyPaths, defaultPaths.ReadonlyPaths)) out.push('custom masked paths')
  if (Object.keys(hc.Sysctls ?? {}).length > 0) out.push('Sysctls')
  if (hc.Runtime !== undefined && hc.Runtime !== '' && hc.Runtime !== 'runc') out.push(`Runtime ${String(hc.Runtime)}`)
  if (hc.CgroupParent !== undefined && hc.CgroupParent !== '') out.push('CgroupParent')
  return out
}

/** hostReach, and what a tenant's container must have: a private cgroup namespace, PID and memory limits, A's owner labels. */
function tenantViolations (doc: Doc): string[] {
  const hc = doc.HostConfig ?? {}
  const out = hostReach(doc)
  if (hc.CgroupnsMode === 'host') out.push('CgroupnsMode host')
  if (!(Number(hc.PidsLimit) > 0)) out.push(`PidsLimit ${String(hc.PidsLimit)}`)
  if (!(Number(hc.Memory) > 0 && Number(hc.Memory) <= MEMORY_QUOTA)) out.push(`Memory ${String(hc.Memory)}`)
  if (!ownerOk(doc.Config?.Labels)) out.push(`owner labels ${JSON.stringify(doc.Config?.Labels)}`)
  if (!tenantRuns(doc.Config?.User)) out.push(`User ${JSON.stringify(doc.Config?.User)}`)
  for (const g of hc.GroupAdd ?? []) if (!/^[0-9]+$/.test(String(g)) || Number(g) === 0) out.push(`GroupAdd ${String(g)}`)
  return out
}

/**
 * tenancy.yaml users as shipped (users.default 65534:65534, no tenant granted root): the
 * user a tenant's container, exec or task runs as for the user the body names, or null
 * where the gateway must refuse it (uid or gid 0, a name, which the container's own
 * /etc/passwd resolves). No user: 65534:65534; a lone uid: the tenant's gid.
 */
const TENANT_USER = '65534:65534'
function tenantUser (u: string): string | null {
  if (u === '') return TENANT_USER
  const parts = u.split(':')
  if (parts.length > 2 || !parts.every((p) => /^[0-9]+$/.test(p)) || parts.some((p) => Number(p) === 0)) return null
  return parts.length === 2 ? u : `${u}:65534`
}
/** A user a tenant's process may run as: a numeric uid:gid, neither 0. */
const tenantRuns = (u: unknown): boolean => typeof u === 'string' && /^[0-9]+:[0-9]+$/.test(u) && tenantUser(u) === u

const withoutOwner = (labels: Doc | null | undefined): Doc => Object.fromEntries(Object.entries(labels ?? {}).filter(([k]) => k !== TENANT_LABEL && k !== SUBJECT_LABEL))

/**
 * What a tenant's create stores that must equal what the engine stored for the body
 * itself: everything the tenant's rewrites and owner labels leave alone (Memory and
 * PidsLimit unless zero, SecurityOpt plus no-new-privileges), and the user the tenant's
 * users give it.
 */
function createKept (doc: Doc, tenant: boolean, directDoc: Doc): unknown {
  const hc = doc.HostConfig
  const dhc = directDoc.HostConfig
  const keep = ['Privileged', 'Binds', 'CapAdd', 'CapDrop', 'Devices', 'NetworkMode', 'PidMode', 'IpcMode', 'UTSMode', 'UsernsMode', 'Mounts', 'MaskedPaths', 'ReadonlyPaths',
    'Sysctls', 'Runtime', 'CgroupParent', 'CpuShares', 'CpusetCpus', 'NanoCpus', 'VolumeDriver', 'ReadonlyRootfs']
  const out: Doc = Object.fromEntries(keep.map((k) => [k, hc[k]]))
  // (with a memory limit and no swap limit, the engine sets swap to twice the memory)
  if (Number(dhc.Memory) !== 0) { out.Memory = hc.Memory; out.MemorySwap = hc.MemorySwap }
  // (created without any host configuration, a container shows no runtime: the default one)
  out.Runtime = hc.Runtime ?? 'runc'
  if (Number(dhc.PidsLimit) > 0) out.PidsLimit = hc.PidsLimit
  out.SecurityOpt = tenant ? hc.SecurityOpt : [...(dhc.SecurityOpt ?? []), ...((dhc.SecurityOpt ?? []).includes('no-new-privileges') ? [] : ['no-new-privileges'])]
  // the tenant's user (tenancy.yaml users) in place of what the engine would run as
  out.User = tenant ? doc.Config.User : tenantUser(String(doc.Config.User ?? ''))
  out.Image = doc.Config.Image
  out.Cmd = doc.Config.Cmd
  out.Env = doc.Config.Env
  out.Labels = withoutOwner(doc.Config.Labels)
  return out
}

// ---------------------------------------------------------------------------------------

t.before(async () => {
  // The oracle is the engine's reading of the very body sent directly: tenants stay on the
  // engine's bridge here (a redirected NetworkMode is the one difference by design, tested in tenant-networks).
  gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, undefined, policiesOnSharedBridge())
  swarmGw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, `unix://${swarmEngine().socket}`, policiesOnSharedBridge())
  const base = await direct('POST', '/containers/create', { Image: IMAGE })
  const doc = (await direct('GET', `/containers/${String(base.json.Id)}/json`)).json
  defaultPaths = { MaskedPaths: doc.HostConfig.MaskedPaths, ReadonlyPaths: doc.HostConfig.ReadonlyPaths }
  // (inspect leaves out empty omitempty fields such as Mounts: the generated ones are host fields too)
  hostFields = new Set([...Object.keys(doc.HostConfig), ...Object.keys(HOST)])
  await direct('DELETE', `/containers/${String(base.json.Id)}?force=1`)
})
t.teardown(async () => {
  // Anything a failed run left behind, by its name or labels.
  const filters = (f: object): string => encodeURIComponent(JSON.stringify(f))
  for (const c of (await direct('GET', `/containers/json?all=1&filters=${filters({ label: [`${TENANT_LABEL}=${TA}`] })}`)).json ?? []) await direct('DELETE', `/containers/${String(c.Id)}?force=1`)
  for (const n of (await direct('GET', `/networks?filters=${filters({ name: [`diffb-${RUN}-`] })}`)).json ?? []) await direct('DELETE', `/networks/${String(n.Id)}`)
  for (const v of (await direct('GET', `/volumes?filters=${filters({ name: [`diffb-${RUN}-`] })}`)).json?.Volumes ?? []) await direct('DELETE', `/volumes/${String(v.Name)}`)
  for (const v of (await request(swarmEngine().socket, 'GET', `${V}/services?filters=${filters({ name: [`diffb-${RUN}-`] })}`)).json ?? []) await request(swarmEngine().socket, 'DELETE', `${V}/services/${String(v.ID)}`)
  await gw?.close()
  await swarmGw?.close()
  t.comment(`seed ${SEED}: ${[...tally].map(([k, n]) => `${k} ${n}`).join('; ')}`)
})

const params = <T>(runs: number, examples: T[] = []): fc.Parameters<[T]> => ({ numRuns: runs, seed: SEED, includeErrorInReport: true, examples: examples.map((e) => [e] as [T]) })
/** Fail the property with the body and what differed (fast-check adds the seed and the path, and shrinks). */
function differ (op: string, body: string, what: string): never {
  throw new Error(`${op} body ${body}\n${what}`)
}
const raw = (s: string): Raw => lit(s)

t.test('the engine folds the Kelvin sign and the long s onto k and s, and not dotless i: the gateway refuses all three', async (t) => {
  const cases: Array<[string, string, (hc: Doc) => unknown, unknown]> = [
    ['Bind\u017f', '["/etc:/h"]', (hc) => hc.Binds, ['/etc:/h']],
    ['Networ\u212aMode', '"host"', (hc) => hc.NetworkMode, 'host'],
    ['CapAdd', '["SYS_ADMIN"],"Privıleged":true', (hc) => hc.Privileged, false],
  ]
  for (const [key, value, read, stored] of cases) {
    const body = `{"Image":"${IMAGE}","HostConfig":{"${key}":${value}}}`
    const d = await send('direct', 'POST', '/containers/create', body)
    t.equal(d.status, 201, `the engine takes ${body}`)
    const doc = (await direct('GET', `/containers/${String(d.json.Id)}/json`)).json
    await direct('DELETE', `/containers/${String(d.json.Id)}?force=1`)
    t.same(read(doc.HostConfig), stored, `and stores ${JSON.stringify(stored)}`)
    for (const who of ['admin', 'tenant'] as const) {
      const g = await send(who, 'POST', '/containers/create', body)
      t.equal(g.status, 400, `the gateway refuses it (${who})`)
      t.match(message(g), /non-ASCII field name/)
    }
  }
})

t.test(`ContainerCreate: what the engine stores for a body, directly and through the gateway (seed ${SEED})`, async (t) => {
  /** Create, inspect, remove. */
  async function create (who: Who, body: Raw): Promise<Outcome> {
    const r = await send(who, 'POST', '/containers/create', text(body, who).text)
    if (r.status !== 201) return { status: r.status, message: message(r) }
    const doc = (await direct('GET', `/containers/${String(r.json.Id)}/json`)).json
    // A network named by a name or id prefix is stored as given directly, and by the full id
    // a tenant's request is pinned to (tenancy): compared by the id the engine resolves.
    const mode = String(doc.HostConfig.NetworkMode ?? '')
    if (!['', 'default', 'bridge', 'host', 'none'].includes(mode) && !mode.startsWith('container:')) {
      const n = await direct('GET', `/networks/${encodeURIComponent(mode)}`)
      if (n.status === 200) doc.HostConfig.NetworkMode = n.json.Id
    }
    await direct('DELETE', `/containers/${String(r.json.Id)}?force=1`)
    return { status: r.status, message: '', doc }
  }
  const view = (doc: Doc): unknown => ({ HostConfig: doc.HostConfig, Config: { ...doc.Config, Hostname: undefined } })
  let checked = 0
  await fc.assert(fc.asyncProperty(laidOut(createBody), async (body) => {
    const [d, g, a] = await Promise.all(WHO.map(async (who) => await create(who, body)))
    const shown = text(body, 'direct').text
    gatewayFailure('ContainerCreate', shown, d, g, a)
    const diff = adminDifference('ContainerCreate', d, g, view)
    if (diff !== null) differ('ContainerCreate', shown, diff)
    if (a.doc !== undefined) {
      const v = tenantViolations(a.doc)
      if (v.length > 0) differ('ContainerCreate', shown, `tenant's container let through with ${v.join(', ')}`)
      if (d.doc !== undefined) {
        if (hostReach(d.doc).length > 0) differ('ContainerCreate', shown, `tenant let through a body the engine stores with ${hostReach(d.doc).join(', ')}`)
        const want = createKept(d.doc, false, d.doc)
        const got = createKept(a.doc, true, d.doc)
        if (!isDeepStrictEqual(want, got)) differ('ContainerCreate', shown, `tenant's container differs from the engine's reading:\n  engine: ${JSON.stringify(want)}\n  tenant: ${JSON.stringify(got)}`)
        count('ContainerCreate: tenant stored as the engine reads it')
      } else count('ContainerCreate: tenant let through a body the engine refuses (rewritten)')
    } else if (d.doc !== undefined && hostReach(d.doc).length > 0) count('ContainerCreate: tenant refused a host-reaching body')
    else { count(`ContainerCreate: tenant refused (${a.status})`); debug(`ContainerCreate tenant ${a.status} ${a.message} | engine ${d.status} ${d.message} | ${shown}`) }
    checked++
    return true
  }), params(RUNS, [
    // Go folds the Kelvin sign and the long s; the gateway refuses non-ASCII field names.
    raw(`{"Image":"${IMAGE}","Uſer":"0","HostConfig":{"Privileged":true,"Binds":["/etc:/h"],"NetworkMode":"host","\\u212aernelMemory":0}}`),
    raw(`{"Image":"${IMAGE}","HostConfig":{"Privileged":false,"privileged":true}}`),
    raw(`{"Image":"${IMAGE}","Privileged":true,"HostConfig":null}`),
    raw(`{"Image":"${IMAGE}","Privileged":true,"Memory":1073741824,"HostConfig":{"PidsLimit":100}}`),
    raw(`{"Image":"${IMAGE}","HostConfig":{"Memory":9223372036854775808}}`),
    raw(`{"Image":"${IMAGE}","HostConfig":{"NetworkMode":"\\u0068ost","Net\\u0077orkMode":"bridge"}}`),
    raw(`{"Image":"${IMAGE}","Labels":{"${TENANT_LABEL}":"mallory-team","io.portcullis.tenan\\u0074":"x"}}`),
    // Found by this test: a volume named like a path was looked up as /volumes//etc, which the
    // engine answers with a redirect, and the tenant got 502 where the engine answers 400.
    raw(`{"Image":"${IMAGE}","HostConfig":{"Mounts":[{"Type":"volume","Source":"/etc","Target":"/mnt"}]}}`),
    // Found by this test: an object where a number belongs made the policy input's Number()
    // throw (the decoder's objects have no prototype), and the gateway answered 503.
    raw(`{"Image":"${IMAGE}","HostConfig":{"NanoCpus":{},"Memory":[{}]}}`),
    // The engine 20.10 panics on this one (see send()): no answer directly, 502 as an admin.
    raw('{"HostConfig":{"UTSMode":"host"}}'),
  ]))
  t.pass(`${checked} ContainerCreate bodies checked three ways`)
})

t.test(`ContainerUpdate: the resources the engine stores, directly and through the gateway (seed ${SEED})`, async (t) => {
  /** Three like containers of A's, as a tenant's create leaves them (its defaults and owner labels): one per way. */
  const spec = { Image: IMAGE, Cmd: ['sleep', '600'], User: TENANT_USER, Labels: { [TENANT_LABEL]: TA, [SUBJECT_LABEL]: SUBJECT }, HostConfig: { Memory: GiB, PidsLimit: 1024, SecurityOpt: ['no-new-privileges'], CgroupnsMode: 'private' } }
  const fresh = async (): Promise<string> => { const r = await direct('POST', '/containers/create', spec); if (r.status !== 201) throw new Error(message(r)); return String(r.json.Id) }
  let ids = await Promise.all(WHO.map(fresh))
  const inspect = async (id: string): Promise<Doc> => (await direct('GET', `/containers/${id}/json`)).json
  let checked = 0
  await fc.assert(fc.asyncProperty(laidOut(updateBody), async (body) => {
    const outs: Outcome[] = await Promise.all(WHO.map(async (who, i) => {
      const r = await send(who, 'POST', `/containers/${ids[i]}/update`, text(body, who).text)
      return { status: r.status, message: message(r), doc: r.status === 200 ? await inspect(ids[i]) : undefined }
    }))
    const [d, g, a] = outs
    const shown = text(body, 'direct').text
    try {
      gatewayFailure('ContainerUpdate', shown, d, g, a)
      const diff = adminDifference('ContainerUpdate', d, g, (doc) => doc.HostConfig)
      if (diff !== null) differ('ContainerUpdate', shown, diff)
      if (a.doc !== undefined) {
        const v = tenantViolations(a.doc)
        if (v.length > 0) differ('ContainerUpdate', shown, `tenant's update let through, leaving ${v.join(', ')}`)
        if (d.doc !== undefined && !isDeepStrictEqual(d.doc.HostConfig, a.doc.HostConfig)) {
          differ('ContainerUpdate', shown, `tenant's update stored differently:\n  engine: ${JSON.stringify(d.doc.HostConfig)}\n  tenant: ${JSON.stringify(a.doc.HostConfig)}`)
        }
        count(`ContainerUpdate: tenant let through${d.doc === undefined ? ' (engine refused)' : ''}`)
      } else if (d.doc !== undefined && tenantViolations(d.doc).length > 0) count('ContainerUpdate: tenant refused an update that removes a limit')
      else { count(`ContainerUpdate: tenant refused (${a.status})`); debug(`ContainerUpdate tenant ${a.status} ${a.message} | engine ${d.status} ${d.message} | ${shown}`) }
    } finally {
      // An update that took changes the container: the next body starts from three like ones again.
      if (outs.some((o) => o.status === 200)) {
        await Promise.all(ids.map(async (id) => await direct('DELETE', `/containers/${id}?force=1`)))
        ids = await Promise.all(WHO.map(fresh))
      }
    }
    checked++
    return true
  }), params(Math.max(20, Math.floor(RUNS * 2 / 3)), [
    raw('{"PidsLimit":0}'),
    raw('{"pidsLimit":-1}'),
    raw('{"Memory":-1,"MemorySwap":-1}'),
    raw('{"Privileged":true,"HostConfig":{"Privileged":true}}'),
    raw('{"PidsLimit":9223372036854775807,"Memory":68719476737}'),
    raw('{"PidsLimit":{}}'),
  ]))
  await Promise.all(ids.map(async (id) => await direct('DELETE', `/containers/${id}?force=1`)))
  t.pass(`${checked} ContainerUpdate bodies checked three ways`)
})

t.test(`ContainerExec: the exec the engine stores, directly and through the gateway (seed ${SEED})`, async (t) => {
  const r = await direct('POST', '/containers/create', { Image: IMAGE, Cmd: ['sleep', '3600'], Labels: { [TENANT_LABEL]: TA, [SUBJECT_LABEL]: SUBJECT } })
  const box = String(r.json.Id)
  t.equal((await direct('POST', `/containers/${box}/start`)).status, 204, 'a running container of A\'s')
  const view = (doc: Doc): unknown => ({ ...doc, ID: undefined })
  const rootUser = (u: string): boolean => u.split(':').slice(0, 2).some((p) => p === 'root' || (/^[+-]?\d+$/.test(p) && Number(p) === 0))
  let checked = 0
  await fc.assert(fc.asyncProperty(laidOut(execBody), async (body) => {
    const [d, g, a] = await Promise.all(WHO.map(async (who): Promise<Outcome> => {
      const e = await send(who, 'POST', `/containers/${box}/exec`, text(body, who).text)
      if (e.status !== 201) return { status: e.status, message: message(e) }
      return { status: e.status, message: '', doc: (await direct('GET', `/exec/${String(e.json.Id)}/json`)).json }
    }))
    const shown = text(body, 'direct').text
    gatewayFailure('ContainerExec', shown, d, g, a)
    const diff = adminDifference('ContainerExec', d, g, view)
    if (diff !== null) differ('ContainerExec', shown, diff)
    if (a.doc !== undefined) {
      const p = a.doc.ProcessConfig
      if (p.privileged === true || !tenantRuns(p.user) || rootUser(String(p.user))) differ('ContainerExec', shown, `tenant's exec let through: ${JSON.stringify(p)}`)
      if (d.doc !== undefined) {
        const dp = d.doc.ProcessConfig
        if (dp.privileged === true || rootUser(String(dp.user))) differ('ContainerExec', shown, `tenant let through an exec the engine stores as ${JSON.stringify(dp)}`)
        // The container runs as the image's root: an exec without a user gets the tenant's (users.ts).
        const kept = (x: Doc, tenant: boolean): unknown => ({ ...x.ProcessConfig, user: tenant ? x.ProcessConfig.user : tenantUser(String(x.ProcessConfig.user ?? '')) })
        if (!isDeepStrictEqual(kept(d.doc, false), kept(a.doc, true))) differ('ContainerExec', shown, `tenant's exec differs: engine ${JSON.stringify(dp)}, tenant ${JSON.stringify(p)}`)
      }
      count('ContainerExec: tenant let through')
    } else { count(`ContainerExec: tenant refused (${a.status})`); debug(`ContainerExec tenant ${a.status} ${a.message} | engine ${d.status} ${d.message} | ${shown}`) }
    checked++
    return true
  }), params(Math.max(20, Math.floor(RUNS / 2)), [
    raw('{"Cmd":["true"],"privileged":true}'),
    raw('{"Cmd":["true"],"User":"65534","user":"0"}'),
    raw('{"Cmd":["true"],"U\\u017fer":"0"}'),
  ]))
  await direct('DELETE', `/containers/${box}?force=1`)
  t.pass(`${checked} ContainerExec bodies checked three ways`)
})

t.test(`NetworkCreate and VolumeCreate: what the engine stores, directly and through the gateway (seed ${SEED})`, async (t) => {
  const networkView = (n: Doc): unknown => ({ Driver: n.Driver, Scope: n.Scope, EnableIPv6: n.EnableIPv6, Internal: n.Internal, Attachable: n.Attachable, Ingress: n.Ingress, ConfigOnly: n.ConfigOnly, ConfigFrom: n.ConfigFrom, Options: n.Options, IPAM: { Driver: n.IPAM?.Driver, Options: n.IPAM?.Options }, Labels: withoutOwner(n.Labels), Owner: [n.Labels?.[TENANT_LABEL], n.Labels?.[SUBJECT_LABEL]] })
  let networks = 0
  await fc.assert(fc.asyncProperty(laidOut(networkBody), async (body) => {
    const [d, g, a] = await Promise.all(WHO.map(async (who): Promise<Outcome> => {
      const r = await send(who, 'POST', '/networks/create', text(body, who).text)
      if (r.status !== 201) return { status: r.status, message: message(r) }
      const doc = (await direct('GET', `/networks/${String(r.json.Id)}`)).json
      await direct('DELETE', `/networks/${String(r.json.Id)}`)
      return { status: r.status, message: '', doc }
    }))
    const shown = text(body, 'direct').text
    gatewayFailure('NetworkCreate', shown, d, g, a)
    const diff = adminDifference('NetworkCreate', d, g, networkView)
    if (diff !== null) differ('NetworkCreate', shown, diff)
    if (a.doc !== undefined) {
      const n = a.doc
      const bad = [
        // (a configuration-only network is stored with the null driver: it lends its options to another)
        ...(['bridge', 'overlay'].includes(n.Driver) || (n.ConfigOnly === true && n.Driver === 'null') ? [] : [`driver ${String(n.Driver)}`]),
        ...Object.keys(n.Options ?? {}).filter((k) => !TENANT_NETWORK_OPTIONS.has(k)),
        ...(['', 'default'].includes(n.IPAM?.Driver ?? '') && Object.keys(n.IPAM?.Options ?? {}).length === 0 ? [] : ['IPAM']),
        ...(n.Ingress === true ? ['Ingress'] : []),
        ...(ownerOk(n.Labels) ? [] : ['owner labels']),
      ]
      if (bad.length > 0) differ('NetworkCreate', shown, `tenant's network let through with ${bad.join(', ')}`)
      if (d.doc !== undefined) {
        const kept = (x: Doc): unknown => ({ ...(networkView(x) as Doc), Owner: undefined })
        if (!isDeepStrictEqual(kept(d.doc), kept(a.doc))) differ('NetworkCreate', shown, `tenant's network differs: engine ${JSON.stringify(kept(d.doc))}, tenant ${JSON.stringify(kept(a.doc))}`)
      }
      count('NetworkCreate: tenant let through')
    } else { count(`NetworkCreate: tenant refused (${a.status})`); debug(`NetworkCreate tenant ${a.status} ${a.message} | engine ${d.status} ${d.message} | ${shown}`) }
    networks++
    return true
  }), params(Math.max(20, Math.floor(RUNS / 2)), [
    raw(`{"Name":"${N}","driver":"host","Driver":"bridge"}`),
    raw(`{"Name":"${N}","Options":{"com.docker.network.bridge.host_binding_ipv4":"127.0.0.1"},"options":{}}`),
    raw(`{"Name":"${N}","Labels":{"${TENANT_LABEL}":"mallory-team"}}`),
  ]))

  const volumeView = (v: Doc): unknown => ({ Driver: v.Driver, Options: v.Options, Scope: v.Scope, Labels: withoutOwner(v.Labels) })
  let volumes = 0
  await fc.assert(fc.asyncProperty(laidOut(volumeBody), async (body) => {
    const [d, g, a] = await Promise.all(WHO.map(async (who): Promise<Outcome> => {
      const { text: b, name } = text(body, who)
      const r = await send(who, 'POST', '/volumes/create', b)
      if (r.status !== 201) return { status: r.status, message: message(r) }
      const doc = (await direct('GET', `/volumes/${String(r.json.Name ?? name)}`)).json
      await direct('DELETE', `/volumes/${String(r.json.Name ?? name)}`)
      return { status: r.status, message: '', doc }
    }))
    const shown = text(body, 'direct').text
    gatewayFailure('VolumeCreate', shown, d, g, a)
    const diff = adminDifference('VolumeCreate', d, g, volumeView)
    if (diff !== null) differ('VolumeCreate', shown, diff)
    if (a.doc !== undefined) {
      if (hostVolume(a.doc.Driver, a.doc.Options) || !ownerOk(a.doc.Labels)) differ('VolumeCreate', shown, `tenant's volume let through: ${JSON.stringify(a.doc)}`)
      if (d.doc !== undefined && !isDeepStrictEqual(volumeView(d.doc), volumeView(a.doc))) differ('VolumeCreate', shown, `tenant's volume differs: engine ${JSON.stringify(volumeView(d.doc))}, tenant ${JSON.stringify(volumeView(a.doc))}`)
      count('VolumeCreate: tenant let through')
    } else if (d.doc !== undefined && hostVolume(d.doc.Driver, d.doc.Options)) count('VolumeCreate: tenant refused a host volume')
    else { count(`VolumeCreate: tenant refused (${a.status})`); debug(`VolumeCreate tenant ${a.status} ${a.message} | engine ${d.status} ${d.message} | ${shown}`) }
    volumes++
    return true
  }), params(Math.max(20, Math.floor(RUNS / 2)), [
    raw(`{"Name":"${N}","DriverOpts":{"type":"none","o":"bind","device":"/etc"}}`),
    raw(`{"Name":"${N}","driverOpts":{"type":"tmpfs","device":"tmpfs"},"DriverOpts":{"type":"none","o":"bind","device":"/etc"}}`),
    raw(`{"Name":"${N}","DriverOpts":{"Type":"none","type":"tmpfs","o":"bind","device":"/etc"}}`),
    raw(`{"Name":"/${N}"}`),
  ]))
  t.pass(`${networks} NetworkCreate and ${volumes} VolumeCreate bodies checked three ways`)
})

t.test(`ServiceCreate: the spec the swarm stores, directly and through the gateway (seed ${SEED})`, async (t) => {
  const swarm = async (method: string, target: string): Promise<RawReply> => await request(swarmEngine().socket, method, `${V}${target}`)
  const hostNet = String(((await swarm('GET', '/networks')).json as Doc[]).find((n) => n.Name === 'host')?.Id)
  const others = await request(swarmEngine().socket, 'POST', `${V}/volumes/create`, { Name: OTHERS_VOLUME, Labels: { [TENANT_LABEL]: `${TA}-b`, [SUBJECT_LABEL]: 'bob' } })
  t.equal(others.status, 201, 'another tenant\'s volume')
  t.teardown(async () => { await swarm('DELETE', `/volumes/${OTHERS_VOLUME}`) })
  /** The spec as stored, without the name each request gives it and without owner labels. */
  const view = (spec: Doc): Doc => {
    const cs = spec.TaskTemplate?.ContainerSpec
    return { ...spec, Name: undefined, Labels: withoutOwner(spec.Labels), TaskTemplate: { ...spec.TaskTemplate, ContainerSpec: cs === undefined ? cs : { ...cs, Labels: withoutOwner(cs.Labels) } } }
  }
  function serviceViolations (spec: Doc): string[] {
    const cs = spec.TaskTemplate?.ContainerSpec ?? {}
    const limits = spec.TaskTemplate?.Resources?.Limits ?? {}
    const out: string[] = []
    for (const c of cs.CapabilityAdd ?? []) if (!ALLOWED_CAPS.has(cap(String(c)))) out.push(`CapabilityAdd ${String(c)}`)
    for (const m of cs.Mounts ?? []) {
      if (m.Type === 'bind' && !hostPathOk(String(m.Source))) out.push(`bind mount ${String(m.Source)}`)
      if (m.Type === 'volume' && hostVolume(String(m.VolumeOptions?.DriverConfig?.Name ?? ''), m.VolumeOptions?.DriverConfig?.Options)) out.push('host volume mount')
      if (m.Type === 'volume' && m.Source === OTHERS_VOLUME) out.push('another tenant\'s volume')
    }
    if (Object.keys(cs.Sysctls ?? {}).length > 0) out.push('Sysctls')
    if (cs.Privileges?.SELinuxContext?.Disable === true) out.push('SELinux disabled')
    if (['unconfined', 'custom'].includes(cs.Privileges?.Seccomp?.Mode)) out.push('seccomp')
    if (cs.Privileges?.AppArmor?.Mode === 'disabled') out.push('AppArmor disabled')
    if ((spec.TaskTemplate?.Networks ?? []).some((n: Doc) => n.Target === hostNet)) out.push('host network')
    if (!tenantRuns(cs.User)) out.push(`User ${String(cs.User)}`)
    for (const g of cs.Groups ?? []) if (!/^[0-9]+$/.test(String(g)) || Number(g) === 0) out.push(`group ${String(g)}`)
    if (!(Number(limits.Pids) > 0)) out.push(`Pids ${String(limits.Pids)}`)
    if (!(Number(limits.MemoryBytes) > 0)) out.push(`MemoryBytes ${String(limits.MemoryBytes)}`)
    if (!ownerOk(spec.Labels) || !ownerOk(cs.Labels)) out.push('owner labels')
    return out
  }
  let checked = 0
  await fc.assert(fc.asyncProperty(laidOut(serviceBody), async (body) => {
    const [d, g, a] = await Promise.all(WHO.map(async (who): Promise<Outcome> => {
      const r = await send(who, 'POST', '/services/create', text(body, who).text, true)
      if (r.status !== 201) return { status: r.status, message: message(r) }
      const doc = (await swarm('GET', `/services/${String(r.json.ID)}`)).json
      await swarm('DELETE', `/services/${String(r.json.ID)}`)
      return { status: r.status, message: '', doc: doc.Spec }
    }))
    const shown = text(body, 'direct').text
    gatewayFailure('ServiceCreate', shown, d, g, a)
    const diff = adminDifference('ServiceCreate', d, g, view)
    if (diff !== null) differ('ServiceCreate', shown, diff)
    if (a.doc !== undefined) {
      const v = serviceViolations(a.doc)
      if (v.length > 0) differ('ServiceCreate', shown, `tenant's service let through with ${v.join(', ')}`)
      if (d.doc !== undefined) {
        // The tenant's rewrites give a memory and a PID limit where the spec has none, and
        // a bounded json-file log driver where it names none.
        const kept = (spec: Doc): Doc => {
          const x = view(spec)
          const limits = d.doc!.TaskTemplate?.Resources?.Limits ?? {}
          const l = x.TaskTemplate?.Resources?.Limits ?? {}
          const logDriver = d.doc!.TaskTemplate?.LogDriver !== undefined ? x.TaskTemplate?.LogDriver : undefined
          // the tenant's user (tenancy.yaml users) where the engine would run the image's
          const cs = x.TaskTemplate?.ContainerSpec
          const user = spec === d.doc ? tenantUser(String(cs?.User ?? '')) : cs?.User
          return { ...x, TaskTemplate: { ...x.TaskTemplate, ...(cs !== undefined ? { ContainerSpec: { ...cs, User: user } } : {}), LogDriver: logDriver, Resources: { ...x.TaskTemplate?.Resources, Limits: { ...l, MemoryBytes: Number(limits.MemoryBytes) > 0 ? l.MemoryBytes : undefined, Pids: Number(limits.Pids) > 0 ? l.Pids : undefined } } } }
        }
        if (!isDeepStrictEqual(kept(d.doc), kept(a.doc))) differ('ServiceCreate', shown, `tenant's service differs:\n  engine: ${JSON.stringify(kept(d.doc))}\n  tenant: ${JSON.stringify(kept(a.doc))}`)
      }
      count('ServiceCreate: tenant let through')
    } else if (d.doc !== undefined && serviceViolations({ ...d.doc, Labels: { [TENANT_LABEL]: TA, [SUBJECT_LABEL]: SUBJECT }, TaskTemplate: { ...d.doc.TaskTemplate, ContainerSpec: { ...d.doc.TaskTemplate?.ContainerSpec, Labels: { [TENANT_LABEL]: TA, [SUBJECT_LABEL]: SUBJECT } }, Resources: { Limits: { Pids: 1, MemoryBytes: 1 } } } }).length > 0) {
      count('ServiceCreate: tenant refused a host-reaching spec')
    } else { count(`ServiceCreate: tenant refused (${a.status})`); debug(`ServiceCreate tenant ${a.status} ${a.message} | engine ${d.status} ${d.message} | ${shown}`) }
    checked++
    return true
  }), params(Math.max(20, Math.floor(RUNS / 2)), [
    raw(`{"Name":"${N}","Mode":{"Replicated":{"Replicas":0}},"TaskTemplate":{"ContainerSpec":{"Image":"${IMAGE}","capabilityAdd":["CAP_SYS_ADMIN"]}}}`),
    raw(`{"Name":"${N}","Mode":{"Replicated":{"Replicas":0}},"TaskTemplate":{"ContainerSpec":{"Image":"${IMAGE}","User":"1000","uſer":"0"}}}`),
    raw(`{"Name":"${N}","Mode":{"Replicated":{"Replicas":0}},"TaskTemplate":{"ContainerSpec":{"Image":"${IMAGE}","Mounts":[{"Type":"volume","type":"bind","Source":"/etc","Target":"/mnt"}]}}}`),
    raw(`{"Name":"${N}","Mode":{"Replicated":{"Replicas":0}},"TaskTemplate":{"ContainerSpec":{"Image":"${IMAGE}","Mounts":[{"Type":"volume","Source":"/etc","Target":"/mnt"}]}}}`),
    raw(`{"Name":"${N}","Mode":{"Replicated":{"Replicas":0}},"TaskTemplate":{"ContainerSpec":{"Image":"${IMAGE}"},"Resources":{"Limits":{"NanoCPUs":{},"Pids":{}}}}}`),
    // Found by this test: the swarm reads a mount's Type ignoring case, and no Type (or null)
    // as a bind; the policy and the volume ownership check read only "bind" and "volume".
    raw(`{"Name":"${N}","Mode":{"Replicated":{"Replicas":0}},"TaskTemplate":{"ContainerSpec":{"Image":"${IMAGE}","Mounts":[{"Source":"/etc","Target":"/mnt"}]}}}`),
    raw(`{"Name":"${N}","Mode":{"Replicated":{"Replicas":0}},"TaskTemplate":{"ContainerSpec":{"Image":"${IMAGE}","Mounts":[{"Type":null,"Source":"/","Target":"/mnt"}]}}}`),
    raw(`{"Name":"${N}","Mode":{"Replicated":{"Replicas":0}},"TaskTemplate":{"ContainerSpec":{"Image":"${IMAGE}","Mounts":[{"Type":"BIND","Source":"/etc","Target":"/mnt"}]}}}`),
    raw(`{"Name":"${N}","Mode":{"Replicated":{"Replicas":0}},"TaskTemplate":{"ContainerSpec":{"Image":"${IMAGE}","Mounts":[{"Type":"b\\u0131nd","Source":"/etc","Target":"/mnt"}]}}}`),
    raw(`{"Name":"${N}","Mode":{"Replicated":{"Replicas":0}},"TaskTemplate":{"ContainerSpec":{"Image":"${IMAGE}","Mounts":[{"Type":"Volume","Source":"${OTHERS_VOLUME}","Target":"/mnt"}]}}}`),
    raw(`{"Name":"${N}","Mode":{"Replicated":{"Replicas":0}},"TaskTemplate":{"ContainerSpec":{"Image":"${IMAGE}","Mounts":[{"Type":"VOLUME","Source":"diffb-hostvol","Target":"/mnt","VolumeOptions":{"DriverConfig":{"Options":{"type":"none","o":"bind","device":"/etc"}}}}]}}}`),
  ]))
  t.pass(`${checked} ServiceCreate bodies checked three ways`)
})
