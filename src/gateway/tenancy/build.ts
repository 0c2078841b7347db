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
  /** An image the Dockerfile names must be the tenant's or shared; throws the refusal. */
  readonly checkImage: (ref: string, where: string) => Promise<void>
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

/** The Dockerfile's images, URLs and labels, as the classic builder will read them. */
export async function judgeDockerfile (text: string, scope: BuildScope): Promise<void> {
  const instructions = DockerfileParser.parse(text).getInstructions()
  const args = new Map<string, string>()
  const stages = new Set<string>()
  let stageCount = 0
  const expand = (s: string): string => substitute(s, args, scope.buildArgs)
  for (const ins of instructions) {
    const keyword = ins.getKeyword().toUpperCase()
    const values = ins.getArguments().map((a) => unquote(a.getValue()))
    const flags = (ins as unknown as { getFlags?: () => Array<{ getName: () => string, getValue: () => string | null }> }).getFlags?.() ?? []
    switch (keyword) {
      case 'ARG':
        for (const v of values) {
          const eq = v.indexOf('=')
          const key = eq < 0 ? v : v.slice(0, eq)
          args.set(key, eq < 0 ? (args.get(key) ?? '') : expand(v.slice(eq + 1)))
        }
        break
      case 'FROM': {
        const image = expand(values[0] ?? '')
        if (image.toLowerCase() !== 'scratch' && !stages.has(image.toLowerCase())) await image_(image, 'FROM')
        if ((values[1] ?? '').toUpperCase() === 'AS' && values[2]) stages.add(values[2].toLowerCase())
        stages.add(String(stageCount++))
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
          const s = expand(src)
          if (/^[a-z][a-z0-9+.-]*:\/\//i.test(s) || s.startsWith('git@')) throw refuse('build-add-url', `ADD ${s} makes the engine fetch a URL: not available to tenants (download it into the context)`)
        }
        break
      case 'LABEL':
      case 'ONBUILD':
        labels(ins)
        break
    }
  }

  async function image_ (ref: string, where: string): Promise<void> {
    if (ref === '' || ref.includes('$')) throw refuse('build-image', `${where} ${JSON.stringify(ref)} does not name an image once its build arguments are substituted`)
    await scope.checkImage(ref, where)
  }
  async function fromRef (ref: string, where: string): Promise<void> {
    if (stages.has(ref.toLowerCase())) return
    await image_(ref, where)
  }
}

function labels (ins: Instruction): void {
  const keyword = ins.getKeyword().toUpperCase()
  if (keyword === 'ONBUILD') {
    const trigger = (ins as unknown as { getTriggerInstruction: () => Instruction | null }).getTriggerInstruction()
    if (trigger) labels(trigger)
    return
  }
  for (const p of (ins as unknown as { getProperties: () => Array<{ getName: () => string }> }).getProperties()) {
    if (mayBeOwnerLabel(p.getName())) throw refuse('owner-labels', `LABEL ${p.getName()} in the Dockerfile: io.portcullis.* labels, and labels named with variables, are the gateway's`)
  }
}

function unquote (s: string): string {
  return s.length >= 2 && ((s.startsWith('"') && s.endsWith('"')) || (s.startsWith("'") && s.endsWith("'"))) ? s.slice(1, -1) : s
}

/**
 * $VAR, ${VAR}, ${VAR:-default} and ${VAR:+alternative}, as the builder substitutes build
 * arguments: a `buildargs` value overrides an ARG's default for an ARG the Dockerfile
 * declares; an unset one is empty.
 */
function substitute (s: string, args: ReadonlyMap<string, string>, given: Readonly<Record<string, string | null>>): string {
  const value = (name: string): string | undefined => {
    if (!args.has(name)) return undefined
    const g = given[name]
    return typeof g === 'string' ? g : args.get(name)
  }
  return s.replace(/\\\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([-+])([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)/g, (m, braced?: string, op?: string, word?: string, bare?: string) => {
    if (m === '\\$') return '$'
    const v = value((braced ?? bare)!)
    if (op === '-') return v === undefined || v === '' ? (word ?? '') : v
    if (op === '+') return v === undefined || v === '' ? '' : (word ?? '')
    return v ?? ''
  })
}
