/**
 * ContainerCreate bodies with host configuration at the top level (the engine's deprecated
 * runconfig.ContainerConfigWrapper, which docker-py still uses for `runtime=`), on the real
 * engine. The gateway resolves them as the engine does (src/api/body/quirks.ts): without
 * HostConfig the top-level fields are the host config, beside one they are ignored except
 * Memory, MemorySwap, CpuShares, CpusetCpus and VolumeDriver (copied into an empty field),
 * and Cpuset fills an empty CpusetCpus. It evaluates and forwards that result.
 *
 * Differential: every body is sent to the engine directly, through the gateway as an admin
 * (no rewrites: the engine must store exactly the same HostConfig), and through the gateway
 * as a tenant (the shipped policy's rewrites add defaults, so the fields the body decides are
 * compared, or the denial naming the rule is checked). A relay records that the body on the
 * wire is the resolved one; bodies the engine refuses are refused; docker-py's
 * create_container(runtime=) is run the same three ways (test/fixtures/docker_py_legacy.py);
 * and a tenant memory quota counts a top-level Memory exactly when the engine would apply it.
 *
 * Everything is named after one run-wide prefix and removed by that prefix afterwards.
 */
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import http from 'node:http'
import os from 'node:os'
import path from 'node:path'
import jwt from 'jsonwebtoken'
import t from 'tap'
import { engine, run, startTestGateway, uniqueName, type TestGateway } from './helpers/gateway'

const SYSTEM_PYTHON = '/usr/bin/python3'
const DOCKER_PY_SCRIPT = path.resolve(__dirname, '../../test/fixtures/docker_py_legacy.py')
const POLICIES = path.resolve(__dirname, '../../policies')
const IMAGE = engine().image
const PREFIX = uniqueName('pclg')
const SECRET = randomBytes(32).toString('hex')
/** The differential tenant (the default quota of 64 GiB), and one with a memory quota of 100 MiB. */
const TENANT = uniqueName('tl')
const QUOTA_TENANT = uniqueName('tlq')
const MiB = 1024 * 1024

const sign = (tenant: string): string =>
  jwt.sign({ sub: 'lee', tenant, roles: ['tenant'], exp: Math.floor(Date.now() / 1000) + 3600 }, SECRET, { algorithm: 'HS256' })
const TOKEN = sign(TENANT)
const QUOTA_TOKEN = sign(QUOTA_TENANT)

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pclg-'))
let gw: TestGateway

type Doc = Record<string, any>
interface Reply { status: number, json: Doc }

/** One request on a unix socket, the body sent byte for byte as given. */
async function call (socket: string, method: string, urlPath: string, body?: string, token?: string): Promise<Reply> {
  return await new Promise((resolve, reject) => {
    const headers: Record<string, string> = {}
    if (body !== undefined) headers['content-type'] = 'application/json'
    if (token !== undefined) headers.authorization = `Bearer ${token}`
    const req = http.request({ socketPath: socket, method, path: urlPath, headers }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString()
        let json: Doc = {}
        try { json = JSON.parse(text) as Doc } catch { json = { text } }
        resolve({ status: res.statusCode ?? 0, json })
      })
    })
    req.on('error', reject)
    req.end(body)
  })
}

const direct = async (method: string, urlPath: string, body?: string): Promise<Reply> => await call(engine().socket, method, urlPath, body)
const inspect = async (name: string): Promise<Doc> => (await direct('GET', `/v1.41/containers/${name}/json`)).json

async function removeEverythingNamed (prefix: string): Promise<void> {
  const list = await direct('GET', `/v1.41/containers/json?all=1&filters=${encodeURIComponent(JSON.stringify({ name: [prefix] }))}`)
  for (const c of (Array.isArray(list.json) ? list.json : []) as Doc[]) await direct('DELETE', `/v1.41/containers/${String(c.Id)}?force=1&v=1`)
}

t.before(async () => {
  const policyDir = path.join(tmp, 'policies')
  fs.cpSync(POLICIES, policyDir, { recursive: true })
  const tenancy = path.join(policyDir, 'tenancy.yaml')
  const text = fs.readFileSync(tenancy, 'utf8')
  if (!/^ {2}tenants: \{\}$/m.test(text)) throw new Error('the shipped tenancy.yaml is not as expected (tenants: {})')
  fs.writeFileSync(tenancy, text.replace(/^ {2}tenants: \{\}$/m, `  tenants:\n    ${QUOTA_TENANT}: { memory: 100MiB }`))
  gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, undefined, policyDir)
})

t.teardown(async () => {
  try {
    await removeEverythingNamed(PREFIX)
  } finally {
    await gw?.close()
    fs.rmSync(tmp, { recursive: true, force: true })
  }
})

/** `"Image":…,"Cmd":["true"],` then `rest`: bodies written by hand, keys exactly as listed. */
const body = (rest: string): string => `{"Image":${JSON.stringify(IMAGE)},"Cmd":["true"]${rest === '' ? '' : `,${rest}`}}`

interface Case {
  name: string
  rest: string
  /** What the engine must have stored directly (a check on the engine's own rule, so the comparison means something). */
  engine: Doc
  /** For the tenant: the HostConfig fields the body decides (the rest the shipped rewrites fill), or the rule that denies it. */
  tenant: string[] | { rule: string }
}

const cases: Case[] = [
  {
    name: 'no HostConfig: the top-level fields are the host config',
    rest: '"Memory":67108864,"CpuShares":512,"Runtime":"runc","CapDrop":["MKNOD"],"Privileged":false',
    engine: { Memory: 64 * MiB, CpuShares: 512, Runtime: 'runc', CapDrop: ['MKNOD'], Privileged: false },
    tenant: ['Memory', 'MemorySwap', 'CpuShares', 'Runtime', 'CapDrop', 'Privileged'],
  },
  {
    name: 'no HostConfig, lower-case keys',
    rest: '"memory":67108864,"runtime":"io.containerd.runc.v2","privileged":false',
    engine: { Memory: 64 * MiB, Runtime: 'io.containerd.runc.v2', Privileged: false },
    tenant: { rule: 'runtime' },
  },
  {
    name: 'no HostConfig: a top-level Privileged',
    rest: '"Privileged":true',
    engine: { Privileged: true },
    tenant: { rule: 'no-privileged' },
  },
  {
    name: 'HostConfig null: the top-level fields are the host config',
    rest: '"HostConfig":null,"Memory":67108864,"CpusetCpus":"0"',
    engine: { Memory: 64 * MiB, CpusetCpus: '0' },
    tenant: ['Memory', 'MemorySwap', 'CpusetCpus'],
  },
  {
    name: 'beside HostConfig, top-level Privileged, CapAdd, Runtime and Binds are ignored',
    rest: '"HostConfig":{"NetworkMode":"none"},"Privileged":true,"CapAdd":["ALL"],"Runtime":"io.containerd.runc.v2","Binds":["/etc:/x"],"PidMode":"host"',
    engine: { Privileged: false, CapAdd: null, Runtime: 'runc', Binds: null, PidMode: '', NetworkMode: 'none' },
    tenant: ['Privileged', 'CapAdd', 'Runtime', 'Binds', 'PidMode', 'NetworkMode'],
  },
  {
    name: 'beside an empty HostConfig, Memory, MemorySwap, CpuShares, CpusetCpus, VolumeDriver are copied in',
    rest: '"HostConfig":{"Memory":0,"CpuShares":null},"Memory":67108864,"MemorySwap":134217728,"CpuShares":512,"CpusetCpus":"0","VolumeDriver":"local","PidsLimit":-1',
    engine: { Memory: 64 * MiB, MemorySwap: 128 * MiB, CpuShares: 512, CpusetCpus: '0', VolumeDriver: 'local', PidsLimit: null },
    tenant: ['Memory', 'MemorySwap', 'CpuShares', 'CpusetCpus', 'VolumeDriver'],
  },
  {
    name: 'beside HostConfig values, the top-level ones are not copied',
    rest: '"HostConfig":{"Memory":33554432,"CpuShares":256,"CpusetCpus":"1"},"Memory":67108864,"CpuShares":512,"CpusetCpus":"0"',
    engine: { Memory: 32 * MiB, CpuShares: 256, CpusetCpus: '1' },
    tenant: ['Memory', 'MemorySwap', 'CpuShares', 'CpusetCpus'],
  },
  {
    name: 'Cpuset beside an empty HostConfig fills CpusetCpus',
    rest: '"Cpuset":"1","HostConfig":{}',
    engine: { CpusetCpus: '1' },
    tenant: ['CpusetCpus'],
  },
  {
    name: 'Cpuset after a top-level CpusetCpus',
    rest: '"Cpuset":"1","CpusetCpus":"0","HostConfig":{}',
    engine: { CpusetCpus: '0' },
    tenant: ['CpusetCpus'],
  },
  {
    name: 'Cpuset alone: no host config at all (the engine stores no Runtime then)',
    rest: '"Cpuset":"1"',
    engine: { CpusetCpus: '', Runtime: undefined },
    tenant: ['CpusetCpus'],
  },
]

t.test('the same body directly, through the gateway as an admin and as a tenant', async (t) => {
  let n = 0
  for (const c of cases) {
    t.test(c.name, async (t) => {
      const raw = body(c.rest)
      const [d, a, tn] = [`${PREFIX}-${++n}-d`, `${PREFIX}-${n}-a`, `${PREFIX}-${n}-t`]
      const directly = await direct('POST', `/v1.41/containers/create?name=${d}`, raw)
      t.equal(directly.status, 201, `the engine takes it directly: ${JSON.stringify(directly.json)}`)
      const stored = (await inspect(d)).HostConfig as Doc
      for (const [field, want] of Object.entries(c.engine)) t.same(stored[field], want, `directly, the engine stored ${field} ${JSON.stringify(want)}`)

      const admin = await call(gw.socket, 'POST', `/v1.41/containers/create?name=${a}`, raw)
      t.equal(admin.status, 201, `through the gateway as an admin: ${JSON.stringify(admin.json)}`)
      t.same((await inspect(a)).HostConfig, stored, 'as an admin: the engine stored exactly the same HostConfig')

      const tenant = await call(gw.socket, 'POST', `/v1.41/containers/create?name=${tn}`, raw, TOKEN)
      if (Array.isArray(c.tenant)) {
        t.equal(tenant.status, 201, `through the gateway as a tenant: ${JSON.stringify(tenant.json)}`)
        const mine = (await inspect(tn)).HostConfig as Doc
        for (const field of c.tenant) t.same(mine[field], stored[field], `as a tenant: ${field} as stored directly (${JSON.stringify(stored[field])})`)
      } else {
        t.equal(tenant.status, 403, 'as a tenant: denied')
        t.match(tenant.json.message, new RegExp(`^ContainerCreate denied by policy rule ${c.tenant.rule} \\(base\\.csv\\) for subject lee in tenant ${TENANT}(: |$)`), `naming the rule ${c.tenant.rule}`)
        t.equal((await direct('GET', `/v1.41/containers/${tn}/json`)).status, 404, 'nothing created')
      }
    })
  }
})

t.test('what reaches the engine is the resolved body the policy evaluated', async (t) => {
  // A relay between a second gateway and the engine records each create body on the wire.
  const socket = path.join(tmp, 'relay.sock')
  const bodies: Buffer[] = []
  const relay = http.createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      if (req.method === 'POST' && /\/containers\/create\?/.test(req.url ?? '')) bodies.push(Buffer.concat(chunks))
      const up = http.request({ socketPath: engine().socket, method: req.method, path: req.url, headers: req.headers }, (r) => {
        res.writeHead(r.statusCode ?? 502, r.headers)
        r.pipe(res)
      })
      up.on('error', () => res.destroy())
      // The gateway's event subscription never ends by itself: it ends with its client.
      res.on('close', () => up.destroy())
      up.end(Buffer.concat(chunks))
    })
  })
  await new Promise<void>((resolve) => relay.listen(socket, resolve))
  const recorded = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, `unix://${socket}`)
  t.teardown(async () => {
    await recorded.close()
    relay.closeAllConnections()
    await new Promise((resolve) => relay.close(resolve))
  })
  const sent = async (rest: string, token?: string): Promise<Doc> => {
    const before = bodies.length
    const r = await call(recorded.socket, 'POST', `/v1.41/containers/create?name=${PREFIX}-rec-${randomBytes(3).toString('hex')}`, body(rest), token)
    t.equal(r.status, 201, `created: ${JSON.stringify(r.json)}`)
    t.equal(bodies.length, before + 1, 'one create body forwarded')
    const wire = bodies[bodies.length - 1].toString()
    t.equal(wire, JSON.stringify(JSON.parse(wire)), 'as compact JSON')
    return JSON.parse(wire) as Doc
  }
  const cmd = { Image: IMAGE, Cmd: ['true'] }
  t.same(await sent('"runtime":"runc","Privileged":false,"memory":67108864'), { ...cmd, HostConfig: { Runtime: 'runc', Privileged: false, Memory: 64 * MiB } },
    'admin, no HostConfig: the top-level fields moved into HostConfig, canonically spelled')
  t.same(await sent('"Runtime":"io.containerd.runc.v2","Privileged":true,"HostConfig":{"CpuShares":0},"CpuShares":512,"Cpuset":"0"'), { ...cmd, HostConfig: { CpuShares: 512, CpusetCpus: '0' } },
    'admin, beside HostConfig: the ignored fields dropped, CpuShares and Cpuset copied in')
  t.same(await sent('"Runtime":"io.containerd.runc.v2","Privileged":true,"Memory":67108864,"HostConfig":{}', TOKEN),
    { ...cmd, User: '65534:65534', HostConfig: { NetworkMode: `${TENANT}-default`, Memory: 64 * MiB, SecurityOpt: ['no-new-privileges'], PidsLimit: 1024, CgroupnsMode: 'private', ShmSize: 64 * MiB, LogConfig: { Type: 'json-file', Config: { 'max-size': '10m', 'max-file': '3' } } }, Labels: { 'io.portcullis.tenant': TENANT, 'io.portcullis.subject': 'lee' } },
    'tenant, beside HostConfig: resolved, then rewritten, given the tenant\'s user (tenancy.yaml users) and labelled')
})

t.test('what the engine refuses, the gateway refuses (400, before the engine), saying what to send', async (t) => {
  for (const [rest, engineSays, gatewaySays] of [
    ['"HostConfig":{},"Memory":"64m"', /cannot unmarshal string into Go struct field ContainerConfigWrapper\.Memory of type int64/,
      /^invalid request body: Memory at the top level \(deprecated: the engine copies it into an empty HostConfig\.Memory\) must be a 64-bit integer or null; send HostConfig\.Memory instead$/],
    ['"HostConfig":"none","Privileged":true', /cannot unmarshal string into Go struct field ContainerConfigWrapper\.HostConfig/,
      /^invalid request body: HostConfig must be a JSON object or null, not a string$/],
    ['"Cpuset":1', /cannot unmarshal number into Go struct field ContainerConfigWrapper\.Cpuset of type string/,
      /^invalid request body: Cpuset at the top level .* must be a string or null; send HostConfig\.CpusetCpus instead$/],
  ] as const) {
    const name = `${PREFIX}-bad-${randomBytes(3).toString('hex')}`
    const directly = await direct('POST', `/v1.41/containers/create?name=${name}-d`, body(rest))
    // Engine 20.10 answers its JSON decoding errors 500, later engines 400.
    t.ok(directly.status === 400 || directly.status === 500, `directly: refused (${directly.status}) for ${rest}`)
    t.match(directly.json.message, engineSays, 'the engine says why')
    for (const [who, token] of [['admin', undefined], ['tenant', TOKEN]] as const) {
      const r = await call(gw.socket, 'POST', `/v1.41/containers/create?name=${name}-${who}`, body(rest), token)
      t.equal(r.status, 400, `through the gateway as ${who}: 400`)
      t.match(r.json.message, gatewaySays, 'saying what to send')
      t.equal((await direct('GET', `/v1.41/containers/${name}-${who}/json`)).status, 404, 'nothing created')
    }
  }
})

t.test('docker-py create_container(runtime=...) directly and through the gateway', async (t) => {
  const ways = [
    { label: 'directly', host: engine().dockerHost, token: undefined },
    { label: 'gateway, admin', host: gw.dockerHost, token: undefined },
    { label: 'gateway, tenant', host: gw.dockerHost, token: TOKEN },
  ]
  const results: Doc[] = []
  for (const [i, way] of ways.entries()) {
    const env: NodeJS.ProcessEnv = {}
    if (way.token !== undefined) {
      const dir = fs.mkdtempSync(path.join(tmp, 'cfg-'))
      fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify({ HttpHeaders: { Authorization: `Bearer ${way.token}` } }))
      env.DOCKER_CONFIG = dir
    }
    const r = await run(SYSTEM_PYTHON, [DOCKER_PY_SCRIPT, IMAGE, `${PREFIX}-py${i}`], { host: way.host, env, timeoutMs: 180_000 })
    t.equal(r.code, 0, `docker-py ${way.label} ran`, r.code === 0 ? {} : { stderr: r.stderr })
    results.push(JSON.parse(r.stdout.toString() || '{}') as Doc)
  }
  const [directly, admin, tenant] = results
  const stored = (runtime: string, more: Doc = {}): Doc => ({ status: 201, stored: { Runtime: runtime, Privileged: false, Memory: 0, CpuShares: 0, ...more } })
  t.same(directly, {
    'runc beside host_config': stored('runc', { Memory: 64 * MiB, CpuShares: 512 }),
    'another runtime beside host_config': stored('runc', { Memory: 64 * MiB }),
    'runc, no host_config': stored('runc'),
    'another runtime, no host_config': stored('io.containerd.runc.v2'),
  }, 'directly: the engine ignores the top-level Runtime beside a HostConfig and applies it without one')
  t.same(admin, directly, 'through the gateway as an admin: the same, case by case')
  for (const c of ['runc beside host_config', 'another runtime beside host_config']) t.same(tenant[c], directly[c], `as a tenant, ${c}: the same`)
  t.same([tenant['runc, no host_config']?.status, tenant['runc, no host_config']?.stored?.Runtime], [201, 'runc'], 'as a tenant, runc without host_config: created with runc (the rewrites add a memory limit)')
  t.match(tenant['another runtime, no host_config'], { status: 403, message: new RegExp(`^ContainerCreate denied by policy rule runtime \\(base\\.csv\\) for subject lee in tenant ${TENANT}: matched runtime `) },
    'as a tenant, another runtime without host_config: denied by the runtime rule, as the engine would have applied it')
})

t.test('a tenant memory quota counts a top-level Memory exactly when the engine applies it', async (t) => {
  const create = async (rest: string): Promise<{ reply: Reply, name: string }> => {
    const name = `${PREFIX}-q-${randomBytes(3).toString('hex')}`
    return { reply: await call(gw.socket, 'POST', `/v1.41/containers/create?name=${name}`, body(rest), QUOTA_TOKEN), name }
  }
  const quota = /^quota exceeded for tenant tlq-[0-9a-f]+: memory limits .* > 0\.1 GiB \(.* in use\) \(rule quota-memory\)$/

  const ignored = await create(`"HostConfig":{"Memory":${32 * MiB}},"Memory":${200 * MiB}`)
  t.equal(ignored.reply.status, 201, 'a top-level 200 MiB beside HostConfig.Memory 32 MiB: within the 100 MiB quota')
  t.equal((await inspect(ignored.name)).HostConfig.Memory, 32 * MiB, 'the engine stored 32 MiB')

  const copied = await create(`"HostConfig":{},"Memory":${200 * MiB}`)
  t.equal(copied.reply.status, 403, 'a top-level 200 MiB beside an empty HostConfig: over the quota')
  t.match(copied.reply.json.message, quota, 'naming the memory quota')
  const moved = await create(`"Memory":${200 * MiB}`)
  t.equal(moved.reply.status, 403, 'a top-level 200 MiB without HostConfig: over the quota')
  t.match(moved.reply.json.message, quota, 'naming the memory quota')

  const fits = await create(`"HostConfig":{"Memory":0},"Memory":${64 * MiB}`)
  t.equal(fits.reply.status, 201, 'a top-level 64 MiB beside HostConfig.Memory 0: 96 MiB in all, within the quota')
  t.equal((await inspect(fits.name)).HostConfig.Memory, 64 * MiB, 'the engine stored 64 MiB (the 1 GiB default rewrite did not replace it)')
  const over = await create(`"Cpuset":"0","Memory":${8 * MiB}`)
  t.equal(over.reply.status, 403, 'a top-level 8 MiB more (no HostConfig): 104 MiB, over the quota')
  t.match(over.reply.json.message, quota, 'naming the memory quota')
})
