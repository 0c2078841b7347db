/**
 * The gateway reads Dockerfile text as the engine does (issue 30): the parser, the
 * instructions and the shell lexer of src/api/dockerfile against the real engine's own,
 * and the owner labels that commit and import `changes` could forge.
 *
 * - Differential, on the engine directly: generated `changes` (ENV and LABEL lines with
 *   quotes, escapes, variables and their `${X:-y}` forms, line continuations, comments,
 *   the escape directive) are committed, and the labels and environment the engine stored
 *   (or its refusal) are compared with what the port reads from the same text.
 * - Through the gateway as a tenant: the findings of issue 30 (`io.portcul''lis.tenant`,
 *   a last change ending in the escape character that would swallow the gateway's own
 *   label) and generated changes: whatever the gateway lets through, the image the engine
 *   stores carries exactly the caller's owner labels.
 *
 * PORTCULLIS_DIFF_RUNS sets the number of generated cases per property (default 60).
 */
import { randomBytes } from 'node:crypto'
import fc from 'fast-check'
import jwt from 'jsonwebtoken'
import t from 'tap'
import { parseInstruction, isStage } from '../src/api/dockerfile/instructions'
import { buildEnvs, DockerfileError, processWord } from '../src/api/dockerfile/lex'
import { parse } from '../src/api/dockerfile/parser'
import { engine, policiesWith, request, startTestGateway, type RawReply, type TestGateway } from './helpers/gateway'

const RUNS = Number(process.env.PORTCULLIS_DIFF_RUNS ?? 60)
const SECRET = randomBytes(32).toString('hex')
const RUN = randomBytes(3).toString('hex')
const TA = `dfl-a-${RUN}`
const IMAGE = engine().image
const TOKEN = jwt.sign({ sub: 'alice', tenant: TA, roles: ['tenant'], exp: Math.floor(Date.now() / 1000) + 3600 }, SECRET, { algorithm: 'HS256' })
const OWNER = { 'io.portcullis.tenant': TA, 'io.portcullis.subject': 'alice' }

let gw: TestGateway
let box = ''
let plain = ''
const made: string[] = []
const direct = async (method: string, path: string, body?: object): Promise<RawReply> => await request(engine().socket, method, path, body)
/** As tenant A; a large run (PORTCULLIS_DIFF_RUNS) goes past the shipped write rate: it waits its turn. */
const asA = async (method: string, path: string, body?: object): Promise<RawReply> => {
  for (;;) {
    const r = await request(gw.socket, method, path, body, { token: TOKEN })
    if (r.status !== 429) return r
    await new Promise((resolve) => setTimeout(resolve, 1000))
  }
}
const query = (cs: readonly string[]): string => cs.map((c) => `changes=${encodeURIComponent(c)}`).join('&')

t.before(async () => {
  gw = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`)
  const r = await asA('POST', `/v1.41/containers/create?name=dfl-${RUN}`, { Image: IMAGE, Cmd: ['true'] })
  if (r.status !== 201) throw new Error(`create: ${r.status} ${r.text}`)
  box = r.json.Id
  // The engine's own container (no owner labels) for the differential on the engine.
  const d = await direct('POST', `/containers/create?name=dfl-${RUN}-plain`, { Image: IMAGE, Cmd: ['true'] })
  if (d.status !== 201) throw new Error(`create: ${d.status} ${d.text}`)
  plain = d.json.Id
})
t.teardown(async () => {
  for (const id of made) await direct('DELETE', `/images/${id}?force=1&noprune=0`)
  for (const c of [box, plain]) if (c) await direct('DELETE', `/containers/${c}?force=1`)
  await gw?.close()
})

/** What the port says the engine stores for `changes` on a config without labels: the labels and the ENV keys set, or the engine's refusal. */
function model (changes: readonly string[], env: readonly string[]): { labels: Record<string, string>, env: string[] } | 'refused' {
  try {
    const { nodes, escape } = parse(changes.join('\n'))
    const labels: Record<string, string> = {}
    const vars = [...env]
    for (const n of nodes) {
      if (n.cmd !== 'env' && n.cmd !== 'label') return 'refused'
      const ins = parseInstruction(n)
      if (isStage(ins) || (ins.kind !== 'env' && ins.kind !== 'label')) return 'refused'
      const m = buildEnvs(vars)
      const pairs = ins.pairs.map((p) => [processWord(p.key, m, escape).value, processWord(p.value, m, escape).value])
      for (const [k, v] of pairs) {
        if (ins.kind === 'label') { labels[k] = v; continue }
        const at = vars.findIndex((e) => e.split('=', 1)[0] === k)
        if (at >= 0) vars[at] = `${k}=${v}`
        else vars.push(`${k}=${v}`)
      }
    }
    return { labels, env: vars }
  } catch (err) {
    if (err instanceof DockerfileError) return 'refused'
    throw err
  }
}

/** Words made of the characters the lexer and the parser treat specially. */
const piece = fc.oneof(
  { arbitrary: fc.constantFrom('a', 'B', '.', '-', '_', '1', 'io', 'portcullis', '$A', '${A}', '${B:-d}', '${A:+x}', '${U:-u}', '${U:+v}', '\\$', "''", '""', '"x y"', "'$A'", '"$A"', 'é'), weight: 5 },
  { arbitrary: fc.constantFrom(' ', '=', '"', "'", '\\', '`', '$', '{', '}', ':', '+', '?', '#', '\\"', '\\ '), weight: 1 }
)
const word = fc.array(piece, { minLength: 1, maxLength: 8 }).map((xs) => xs.join(''))
const change = fc.oneof(
  fc.tuple(word, word).map(([k, v]) => `LABEL ${k}=${v}`),
  fc.tuple(word, word).map(([k, v]) => `LABEL ${k} ${v}`),
  fc.tuple(word, word, word).map(([k, v, w]) => `label ${k}=${v} x${w}=1`),
  fc.tuple(word, word).map(([k, v]) => `ENV ${k}=${v}`),
  fc.constantFrom('ENV A=one', 'ENV B=', 'LABEL a=b \\', '  # a comment', '', 'LABEL c=d `', '\\')
)
const changesArb = fc.tuple(fc.boolean(), fc.array(change, { minLength: 1, maxLength: 4 })).map(([tick, cs]) => tick ? ['# escape=`', ...cs] : cs)

t.test('the port reads changes as the engine does (labels and environment the engine stored)', async (t) => {
  const base = (await direct('GET', `/containers/${plain}/json`)).json.Config.Env as string[] ?? []
  let agreed = 0
  let refused = 0
  await fc.assert(fc.asyncProperty(changesArb, async (cs) => {
    const r = await direct('POST', `/commit?container=${plain}&${query(cs)}`, {})
    const expected = model(cs, base)
    if (r.status === 201) made.push(r.json.Id)
    if (expected === 'refused') {
      refused++
      if (r.status !== 400) throw new Error(`the port refuses ${JSON.stringify(cs)}, the engine answered ${r.status} ${r.text}`)
      return
    }
    if (r.status !== 201) throw new Error(`the port reads ${JSON.stringify(cs)}, the engine answered ${r.status} ${r.text}`)
    const config = (await direct('GET', `/images/${r.json.Id as string}/json`)).json.Config
    const same = (a: unknown, b: unknown): boolean => JSON.stringify(a) === JSON.stringify(b)
    const sorted = (o: Record<string, string>): Array<[string, string]> => Object.entries(o).sort()
    if (!same(sorted(config.Labels ?? {}), sorted(expected.labels))) throw new Error(`labels of ${JSON.stringify(cs)}: the engine stored ${JSON.stringify(config.Labels)}, the port reads ${JSON.stringify(expected.labels)}`)
    if (!same(config.Env ?? [], expected.env)) throw new Error(`environment of ${JSON.stringify(cs)}: the engine stored ${JSON.stringify(config.Env)}, the port reads ${JSON.stringify(expected.env)}`)
    agreed++
  }), { numRuns: RUNS })
  t.ok(agreed >= RUNS / 5, `a fifth or more of the cases committed and compared (${agreed} compared, ${refused} refused by both)`)
  for (const id of made.splice(0)) await direct('DELETE', `/images/${id}?force=1`)
})

t.test('issue 30: a key the lexer makes an owner label is refused; a trailing escape swallows nothing', async (t) => {
  for (const cs of [["LABEL io.portcul''lis.tenant=someone-else"], ['LABEL "io.portcul"lis.subject=root'], ['LABEL a=b', 'LABEL io.port$X.tenant=x']]) {
    const r = await asA('POST', `/v1.41/commit?container=${box}&repo=${TA}/forged&tag=1&${query(cs)}`, {})
    t.equal(r.status, 403, `${JSON.stringify(cs)} refused`)
    t.match(r.json?.message, /rule owner-labels/)
  }
  t.equal((await direct('GET', `/images/${TA}/forged:1/json`)).status, 404, 'nothing committed')
  for (const [i, cs] of [['LABEL a=b \\'], ['LABEL a=b \\\\ \\'], ['# escape=`', 'LABEL a=b `'], ['ENV X=1 \\']].entries()) {
    const r = await asA('POST', `/v1.41/commit?container=${box}&repo=${TA}/swallow&tag=${i}&${query(cs)}`, {})
    if (r.status === 201) made.push(r.json.Id)
    const labels = r.status === 201 ? (await direct('GET', `/images/${r.json.Id as string}/json`)).json.Config.Labels : null
    t.ok(r.status === 400 || r.status === 403 || (r.status === 201 && labels['io.portcullis.tenant'] === TA && labels['io.portcullis.subject'] === 'alice'),
      `${JSON.stringify(cs)}: refused, or committed with the caller's owner labels (${r.status} ${JSON.stringify(labels)})`)
  }
})

t.test('whatever changes the gateway lets through, the image carries exactly the caller\'s owner labels', async (t) => {
  const owned = fc.oneof(changesArb, fc.tuple(changesArb, fc.constantFrom('LABEL io.portcullis.tenant=x', 'LABEL io.portcul\'\'lis.tenant=x', 'LABEL "io.portcullis.subject"=x', 'LABEL io\\.portcullis\\.tenant=x')).map(([cs, l]) => [...cs, l]))
  let through = 0
  await fc.assert(fc.asyncProperty(owned, async (cs) => {
    const r = await asA('POST', `/v1.41/commit?container=${box}&${query(cs)}`, {})
    if (r.status !== 201) {
      if (r.status !== 403 && r.status !== 400) throw new Error(`${JSON.stringify(cs)}: ${r.status} ${r.text}`)
      return
    }
    made.push(r.json.Id)
    through++
    const labels = (await direct('GET', `/images/${r.json.Id as string}/json`)).json.Config.Labels ?? {}
    const owners = Object.fromEntries(Object.entries(labels).filter(([k]) => /io\.portcullis\./i.test(k)))
    if (JSON.stringify(Object.entries(owners).sort()) !== JSON.stringify(Object.entries(OWNER).sort())) throw new Error(`${JSON.stringify(cs)} committed with owner labels ${JSON.stringify(owners)}`)
  }), { numRuns: RUNS })
  t.ok(through > 0, `${through} commits let through, each with the caller's owner labels only`)
})

t.test('the same under names: private', async (t) => {
  const policies = policiesWith((text) => text.replace(/^names: engine$/m, `names: private\nimages: { shared: ["${IMAGE.replace(/:latest$/, '')}"] }`))
  const priv = await startTestGateway(`auth: { jwt: { secret: ${SECRET} } }\n`, undefined, policies)
  try {
    const as = async (method: string, path: string, body?: object): Promise<RawReply> => await request(priv.socket, method, path, body, { token: TOKEN })
    const c = await as('POST', `/v1.41/containers/create?name=dflp-${RUN}`, { Image: IMAGE, Cmd: ['true'] })
    t.equal(c.status, 201, c.text)
    const forged = await as('POST', `/v1.41/commit?container=${c.json.Id as string}&repo=forged&tag=1&${query(["LABEL io.portcul''lis.tenant=someone-else"])}`, {})
    t.equal(forged.status, 403, 'a key the lexer makes an owner label is refused')
    t.match(forged.json?.message, /rule owner-labels/)
    const trailing = await as('POST', `/v1.41/commit?container=${c.json.Id as string}&repo=trailing&tag=1&${query(['LABEL a=b \\'])}`, {})
    t.equal(trailing.status, 201, trailing.text)
    if (trailing.status === 201) made.push(trailing.json.Id)
    const labels = (await direct('GET', `/images/${trailing.json.Id as string}/json`)).json.Config.Labels
    t.same([labels['io.portcullis.tenant'], labels['io.portcullis.subject'], labels.a], [TA, 'alice', 'b'], 'a last change ending in the escape character swallows no owner label')
    await direct('DELETE', `/containers/${c.json.Id as string}?force=1`)
  } finally {
    await priv.close()
  }
})
