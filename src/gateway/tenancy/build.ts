/**
 * A tenant's build, inspected before the engine builds it. The classic builder reads the
 * Dockerfile from the build context (a tar, plain or gzip-compressed, in the request
 * body): `dockerfile` names it, `Dockerfile` (then `dockerfile`) by default. The context
 * streams to the engine unchanged, while a copy is read here: the Dockerfile (at most
 * DOCKERFILE_MAX bytes; the last entry of its name wins, as on the engine's disk) is held,
 * nothing else. The context's last chunk is held back until the whole context has been
 * read and the Dockerfile judged, so a refused build never reaches the engine whole (its
 * tar reader fails on the cut upload and nothing is built).
 *
 * The Dockerfile is judged as a create or pull would be: every image it names (FROM,
 * COPY --from, RUN --mount from=), after ARG substitution from its defaults and the
 * request's `buildargs`, must be visible to the tenant (its own or the shared catalog);
 * `ADD` of a URL (which makes the daemon fetch) is refused; no LABEL may set an owner
 * label. A context the gateway cannot read (bzip2, xz, no Dockerfile, a Dockerfile that
 * is a link) is refused.
 */
import { once } from 'node:events'
import { PassThrough } from 'node:stream'
import { DockerfileParser, type Instruction } from 'dockerfile-ast'
import { BLOCK, Bytes, cleanName, cstr, decompressed, isZero, padding, parseHeader, parsePax } from './archive'
import type { BodyFilter } from './call'
import { mayBeOwnerLabel } from './dockerfile'
import { refuse } from './refusal'

/** Largest Dockerfile the gateway reads (the engine's own limit is far above any real one). */
const DOCKERFILE_MAX = 1 << 20
const META_MAX = 1 << 20

export interface BuildScope {
  /** The `dockerfile` query parameter, as the engine reads it (Form.Get). */
  readonly dockerfile: string
  /** The `buildargs` query parameter, decoded. */
  readonly buildArgs: Readonly<Record<string, string | null>>
  /** An image the Dockerfile names must be the tenant's or shared; throws the refusal; returns what the engine has stored for it. */
  readonly checkImage: (ref: string, where: string) => Promise<BaseImage>
}

export function inspectBuild (scope: BuildScope): BodyFilter {
  return (source) => relay(source, scope)
}

async function * relay (source: AsyncIterable<Buffer>, scope: BuildScope): AsyncGenerator<Buffer> {
  const copy = new PassThrough()
  let failure: unknown
  const judged = judge(copy, scope).catch((err) => { failure = err; copy.resume() })
  let held: Buffer | undefined
  for await (const chunk of source) {
    if (failure !== undefined) throw failure
    if (!copy.write(chunk)) await Promise.race([once(copy, 'drain'), judged])
    if (held) yield held
    held = chunk
  }
  copy.end()
  await judged
  if (failure !== undefined) throw failure
  if (held) yield held
}

async function judge (context: AsyncIterable<Buffer>, scope: BuildScope): Promise<void> {
  const names = scope.dockerfile === '' || scope.dockerfile === 'Dockerfile' ? ['Dockerfile', 'dockerfile'] : [cleanName(scope.dockerfile) ?? '']
  const found = new Map<string, Buffer | 'link'>()
  const input = new Bytes(await decompressed(context))
  let pax: Map<string, string> | undefined
  let longName: string | undefined
  for (;;) {
    const h = await input.block(BLOCK)
    if (h === null || isZero(h)) break
    const head = parseHeader(h)
    if (head.type === 'x' || head.type === 'g') {
      const data = await input.whole(head.size, META_MAX, 'a PAX header')
      if (head.type === 'x') pax = parsePax(data)
      await input.skip(padding(head.size))
      continue
    }
    if (head.type === 'L' || head.type === 'K') {
      const text = cstr(await input.whole(head.size, META_MAX, 'a GNU long name'))
      if (head.type === 'L') longName = text
      await input.skip(padding(head.size))
      continue
    }
    let name = longName ?? pax?.get('path') ?? head.name
    let size = head.size
    if (pax?.has('size')) size = Number(pax.get('size'))
    if (longName !== undefined) name = longName
    pax = undefined
    longName = undefined
    // Header-only types carry no data, whatever their size field says.
    const regular = head.type === '0' || head.type === '\0' || head.type === '7'
    const dataSize = regular ? size : 0
    const clean = cleanName(name)
    if (clean !== null && names.includes(clean)) {
      if (regular) found.set(clean, await input.whole(dataSize, DOCKERFILE_MAX, `the Dockerfile ${clean}`))
      else if (head.type !== '5') found.set(clean, 'link')
      else await input.skip(dataSize)
    } else {
      await input.skip(dataSize)
    }
    await input.skip(padding(dataSize))
  }
  // Whatever follows the end of the archive is the engine's to ignore: read and dropped.
  await input.drain(Number.MAX_SAFE_INTEGER)
  const name = names.find((n) => found.has(n))
  const dockerfile = name === undefined ? undefined : found.get(name)
  if (dockerfile === undefined) throw refuse('build-dockerfile', `the build context has no ${names.join(' or ')} the gateway could read: tenants send the Dockerfile in the context (tar or gzip)`)
  if (dockerfile === 'link') throw refuse('build-dockerfile', `the Dockerfile ${name!} in the build context is a link: send the file itself`)
  await judgeDockerfile(dockerfile.toString('utf8'), scope)
}

/** What the builder takes from an image a build starts FROM: its triggers and its environment. */
export interface BaseImage {
  /** `Config.OnBuild`: run as Dockerfile lines right after the FROM that names the image. */
  readonly onBuild: readonly string[]
  /** `Config.Env` (`KEY=value`): substituted into ADD and COPY sources like the Dockerfile's own ENV. */
  readonly env: readonly string[]
}

/** An image the engine does not have: nothing to run, or not known yet (no triggers, no environment). */
const NO_BASE: BaseImage = { onBuild: [], env: [] }

/** Instructions the builder refuses as a trigger (moby instructions.parseOnBuild). */
const NOT_TRIGGERS = new Set(['ONBUILD', 'FROM', 'MAINTAINER'])

type Flags = Array<{ getName: () => string, getValue: () => string | null }>
type Properties = Array<{ getName: () => string, getValue: () => string | null }>

/**
 * The Dockerfile's images, URLs and labels, as the classic builder will read them, and the
 * triggers it will run: those stored in each image a stage starts FROM (inspected on the
 * engine: `scope.checkImage`), run right after that FROM in the stage's state, and those
 * the Dockerfile stores with ONBUILD, judged by the same rules now (and again, in the
 * state of the build that runs them, when an image built FROM this one is built). Returns
 * the Dockerfile text to forward.
 */
export async function judgeDockerfile (text: string, scope: BuildScope): Promise<string> {
  const instructions = DockerfileParser.parse(text).getInstructions()
  const args = new Map<string, string>()
  const stages = new Set<string>()
  // The stage's environment: the base image's Env, then the stage's ENV instructions.
  let env = new Map<string, string>()
  let stageCount = 0
  // A build argument's value: `buildargs` overrides the default of an ARG the Dockerfile declares.
  const arg = (name: string): string | undefined => {
    if (!args.has(name)) return undefined
    const g = scope.buildArgs[name]
    return typeof g === 'string' ? g : args.get(name)
  }
  const expand = (s: string): string => substitute(s, arg)
  // ADD and COPY sources: the environment first, then the build arguments (moby dispatch getEnv).
  const expandEnv = (s: string): string => substitute(s, (name) => env.get(name) ?? arg(name))

  async function image (ref: string, where: string): Promise<BaseImage> {
    if (ref === '' || ref.includes('$')) throw refuse('build-image', `${where} ${JSON.stringify(ref)} does not name an image once its build arguments are substituted`)
    return await scope.checkImage(ref, where)
  }
  async function fromRef (ref: string, where: string): Promise<void> {
    if (stages.has(ref.toLowerCase())) return
    await image(ref, where)
  }

  /** One instruction; `trigger` names the image whose stored trigger it is, or 'ONBUILD' for a trigger being stored. */
  async function step (ins: Instruction, trigger?: string): Promise<void> {
    const keyword = ins.getKeyword().toUpperCase()
    const values = ins.getArguments().map((a) => unquote(a.getValue()))
    const flags = (ins as unknown as { getFlags?: () => Flags }).getFlags?.() ?? []
    // A trigger being stored may not be ONBUILD, FROM or MAINTAINER; a stored one that runs may not be FROM.
    if (trigger === 'ONBUILD' ? NOT_TRIGGERS.has(keyword) : trigger !== undefined && keyword === 'FROM') {
      throw refuse('build-onbuild', `${keyword} is not allowed as an ONBUILD trigger${trigger === 'ONBUILD' ? '' : ` (a trigger of ${trigger})`}`)
    }
    switch (keyword) {
      case 'ARG':
        for (const v of values) {
          const eq = v.indexOf('=')
          const key = eq < 0 ? v : v.slice(0, eq)
          args.set(key, eq < 0 ? (args.get(key) ?? '') : expand(v.slice(eq + 1)))
        }
        break
      case 'ENV':
        for (const p of (ins as unknown as { getProperties?: () => Properties }).getProperties?.() ?? []) env.set(p.getName(), expandEnv(p.getValue() ?? ''))
        break
      case 'FROM': {
        const ref = expand(values[0] ?? '')
        const stage = stages.has(ref.toLowerCase())
        const base = ref.toLowerCase() === 'scratch' || stage ? NO_BASE : await image(ref, 'FROM')
        if ((values[1] ?? '').toUpperCase() === 'AS' && values[2]) stages.add(values[2].toLowerCase())
        stages.add(String(stageCount++))
        // A stage FROM an earlier stage starts from that stage's image: its triggers ran
        // when that stage began, and the builder clears them (initializeStage).
        env = new Map(base.env.map((e) => { const eq = e.indexOf('='); return eq < 0 ? [e, ''] : [e.slice(0, eq), e.slice(eq + 1)] }))
        for (const t of base.onBuild) {
          // Each trigger is parsed alone, with the default escape character, and must be one instruction (dispatchTriggeredOnBuild).
          const parsed = DockerfileParser.parse(t).getInstructions()
          if (parsed.length !== 1) throw refuse('build-onbuild', `a trigger of ${ref} is ${parsed.length} instructions; the builder runs one per trigger`)
          await step(parsed[0], ref)
        }
        break
      }
      case 'COPY':
        for (const f of flags) {
          if (f.getName().toLowerCase() === 'from') await fromRef(expand(f.getValue() ?? ''), 'COPY --from')
        }
        break
      case 'RUN':
        for (const f of flags) {
          if (f.getName().toLowerCase() !== 'mount') continue
          for (const part of (f.getValue() ?? '').split(',')) {
            const [k, v] = part.split('=', 2)
            if (k.trim().toLowerCase() === 'from' && v !== undefined) await fromRef(expand(v.trim()), 'RUN --mount from')
          }
        }
        break
      case 'ADD':
        for (const src of values.slice(0, -1)) {
          const s = expandEnv(src)
          if (/^[a-z][a-z0-9+.-]*:\/\//i.test(s) || s.startsWith('git@')) throw refuse('build-add-url', `ADD ${s} makes the engine fetch a URL: not available to tenants (download it into the context)`)
        }
        break
      case 'LABEL':
        for (const p of (ins as unknown as { getProperties: () => Properties }).getProperties()) {
          if (mayBeOwnerLabel(p.getName())) throw refuse('owner-labels', `LABEL ${p.getName()} in the Dockerfile: io.portcullis.* labels, and labels named with variables, are the gateway's`)
        }
        break
      case 'ONBUILD': {
        // A trigger being stored in the image this builds. Judged now with what this build
        // knows (its variables are those of the build that will run it: one that names an
        // image through a variable is refused), and again when it runs.
        const inner = (ins as unknown as { getTriggerInstruction: () => Instruction | null }).getTriggerInstruction()
        if (inner === null) break
        const saved = { args: new Map(args), env }
        args.clear()
        env = new Map()
        try { await step(inner, 'ONBUILD') } finally {
          for (const [k, v] of saved.args) args.set(k, v)
          env = saved.env
        }
        break
      }
    }
  }

  for (const ins of instructions) await step(ins)
  return text
}

/**
 * Triggers a tenant stores in an image it makes: a commit's or import's `changes` (their
 * ONBUILD instructions), a commit's `OnBuild`, the `config.OnBuild` of an image config in
 * a load archive. Each is judged by the Dockerfile rules as a trigger being stored
 * (build.ts judges it again when a build runs it).
 */
export async function judgeTriggers (changes: string, triggers: readonly string[], checkImage: BuildScope['checkImage']): Promise<void> {
  const scope: BuildScope = { dockerfile: '', buildArgs: {}, checkImage }
  if (changes !== '') await judgeDockerfile(changes, scope)
  for (const t of triggers) {
    if (DockerfileParser.parse(t).getInstructions().length !== 1) throw refuse('build-onbuild', `a stored trigger must be one instruction: ${JSON.stringify(t.slice(0, 80))}`)
    await judgeDockerfile(`ONBUILD ${t}`, scope)
  }
}

function unquote (s: string): string {
  return s.length >= 2 && ((s.startsWith('"') && s.endsWith('"')) || (s.startsWith("'") && s.endsWith("'"))) ? s.slice(1, -1) : s
}

/**
 * $VAR, ${VAR}, ${VAR:-default} and ${VAR:+alternative}, as the builder substitutes
 * variables (shell.Lex): `value` gives a variable's value, undefined when it is unset; an
 * unset one is empty.
 */
function substitute (s: string, value: (name: string) => string | undefined): string {
  return s.replace(/\\\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([-+])([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)/g, (m, braced?: string, op?: string, word?: string, bare?: string) => {
    if (m === '\\$') return '$'
    const v = value((braced ?? bare)!)
    if (op === '-') return v === undefined || v === '' ? (word ?? '') : v
    if (op === '+') return v === undefined || v === '' ? '' : (word ?? '')
    return v ?? ''
  })
}
