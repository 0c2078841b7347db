/**
 * A tenant's build, inspected before the engine builds it. The classic builder reads the
 * Dockerfile from the build context (a tar, plain or gzip-compressed, in the request
 * body): `dockerfile` names it, `Dockerfile` (then `dockerfile`) by default.
 *
 * What reaches the engine is the gateway's own reading of the context, written again in
 * one form (tar.ts), never the client's bytes: regular files, directories, symbolic links
 * and hard links to earlier files, at clean relative paths, as plain tar. The daemon
 * unpacks the context to disk (replacing what a name already holds, following links that
 * are already there) and reads the Dockerfile from there, so anything that would make its
 * disk differ from the gateway's list of entries is refused by the rule `build-context`:
 * two entries of one name (or a file where an earlier entry made a directory), an entry
 * below a link or a file, global and sparse headers, devices and fifos, malformed headers.
 * The data streams through; the Dockerfile (at most DOCKERFILE_MAX bytes) is held, judged,
 * and written last as the text that was judged, followed by the end of the archive. A
 * refused build therefore never reaches the engine whole: it has no Dockerfile, and the
 * upload is cut.
 *
 * The Dockerfile is judged as a create or pull would be: every image it names (FROM,
 * COPY --from, RUN --mount from=), after ARG substitution from its defaults and the
 * request's `buildargs`, must be visible to the tenant (its own or the shared catalog);
 * `ADD` of a URL (which makes the daemon fetch) is refused; no LABEL may set an owner
 * label. A context the gateway cannot read (bzip2, xz, no Dockerfile, a Dockerfile that
 * is a link) is refused. Every step the builder runs is judged as the user it runs as
 * (BuildScope.stepUser), and the Dockerfile forwarded names each image by the id the
 * gateway inspected (judgeDockerfile).
 */
import { DockerfileParser, type Instruction } from 'dockerfile-ast'
import { GatewayError } from '../../api/errors'
import { BLOCK, Bytes, cleanName, cstr, decompressed, isZero, padding, parseHeader, parsePax } from './archive'
import type { BodyFilter } from './call'
import { mayBeOwnerLabel } from './dockerfile'
import { refuse, TenancyRefusal } from './refusal'
import { endOfArchive, writeHeader, type OutEntry } from './tar'

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
  /**
   * Who the build's steps may run as (tenancy.yaml `builds.runAsRoot`, users.ts stepUser):
   * returns the `uid:gid` to forward for `user`, or throws the refusal. Absent: any user.
   */
  readonly stepUser?: (user: string, where: string) => string
  /** Told of each image reference the forwarded Dockerfile names by id instead, in order: the id sent and the text it replaced. */
  readonly pinned?: (sent: string, original: string) => void
}

export function inspectBuild (scope: BuildScope): BodyFilter {
  return (source) => canonical(source, scope)
}

function refused (message: string): TenancyRefusal {
  return refuse('build-context', `build context refused: ${message}`)
}

/** The shared tar primitives word their errors for image archives: said here of the build context. */
function contextError (err: unknown): unknown {
  if (err instanceof TenancyRefusal && err.rule !== 'image-archive') return err
  if (!(err instanceof GatewayError)) return err
  const message = err.message.replace(/^(invalid image archive|image archive refused): /, '').replace(/ \(rule image-archive\)$/, '')
  return refused(message)
}

async function * canonical (source: AsyncIterable<Buffer>, scope: BuildScope): AsyncGenerator<Buffer> {
  try {
    yield * rewrite(source, scope)
  } catch (err) {
    throw contextError(err)
  }
}

type Kind = OutEntry['kind']

async function * rewrite (source: AsyncIterable<Buffer>, scope: BuildScope): AsyncGenerator<Buffer> {
  const names = scope.dockerfile === '' || scope.dockerfile === 'Dockerfile' ? ['Dockerfile', 'dockerfile'] : [cleanName(scope.dockerfile) ?? '']
  /** What each path is on the engine's disk once the entries so far are unpacked ('implicit': a parent directory it makes). */
  const seen = new Map<string, Kind | 'implicit'>()
  const held = new Map<string, { entry: OutEntry, data: Buffer }>()
  const input = new Bytes(await decompressed(source))
  let pax: Map<string, string> | undefined
  let longName = ''
  let longLink = ''
  for (;;) {
    const h = await input.block(BLOCK)
    if (h === null) break // a clean end at a header boundary ends the archive for Go's reader
    if (isZero(h)) {
      const next = await input.block(BLOCK)
      if (next !== null && !isZero(next)) throw refused('a zero block inside the archive')
      break
    }
    const head = parseHeader(h)
    const type = head.type
    if (type === 'x') {
      // A later extended header replaces an earlier one, as in Go's reader.
      pax = parsePax(await input.whole(head.size, META_MAX, 'a PAX header'))
      await input.skip(padding(head.size))
      continue
    }
    if (type === 'L' || type === 'K') {
      const text = cstr(await input.whole(head.size, META_MAX, 'a GNU long name'))
      await input.skip(padding(head.size))
      if (type === 'L') longName = text
      else longLink = text
      continue
    }
    if (type === 'g') throw refused('a global (PAX type g) header: the engine would unpack it as an entry of its own')
    if (type === 'S') throw refused('a sparse (GNU type S) file')
    let name = head.name
    let linkname = head.linkname
    let size = head.size
    if (pax) {
      for (const k of pax.keys()) if (k.startsWith('GNU.sparse.')) throw refused('a sparse (PAX GNU.sparse) file')
      if (pax.has('path')) name = pax.get('path')!
      if (pax.has('linkpath')) linkname = pax.get('linkpath')!
      if (pax.has('size')) {
        const v = pax.get('size')!
        if (!/^\d+$/.test(v) || !Number.isSafeInteger(Number(v))) throw refused(`PAX size ${JSON.stringify(v)}`)
        size = Number(v)
      }
    }
    // Go's reader applies GNU long names after the PAX records (and an empty one not at all).
    if (longName !== '') name = longName
    if (longLink !== '') linkname = longLink
    pax = undefined
    longName = ''
    longLink = ''

    let kind: Kind
    if (type === '0' || type === '\0') kind = type === '\0' && name.endsWith('/') ? 'dir' : 'file'
    else if (type === '5') kind = 'dir'
    else if (type === '2') kind = 'symlink'
    else if (type === '1') kind = 'hardlink'
    else throw refused(`the entry ${JSON.stringify(name)} is of tar type ${JSON.stringify(type)}: only files, directories and links are sent`)
    // Header-only types carry no data, whatever their size field says.
    const dataSize = kind === 'file' ? size : 0
    const clean = cleanName(name)
    if (clean === null) {
      // The context's directory itself: the daemon skips it.
      if (kind !== 'dir') throw refused(`the entry ${JSON.stringify(name)} names the context's directory`)
      await input.skip(dataSize + padding(dataSize))
      continue
    }
    place(seen, clean, kind)
    let target = ''
    if (kind === 'hardlink') {
      const t = cleanName(linkname)
      const k = t === null ? undefined : seen.get(t)
      if (t === null || (k !== 'file' && k !== 'hardlink')) throw refused(`the hard link ${JSON.stringify(clean)} does not name an earlier file`)
      if (names.includes(t)) throw refused(`the hard link ${JSON.stringify(clean)} names the Dockerfile`)
      target = t
    } else if (kind === 'symlink') {
      target = linkname
    }
    const entry: OutEntry = { name: clean, kind, size: dataSize, mode: head.mode, mtime: head.mtime, linkname: target }
    if (names.includes(clean)) {
      if (kind !== 'file') throw refuse('build-dockerfile', `the Dockerfile ${clean} in the build context is a ${kind === 'dir' ? 'directory' : 'link'}: send the file itself`)
      held.set(clean, { entry, data: await input.whole(dataSize, DOCKERFILE_MAX, `the Dockerfile ${clean}`) })
      await input.skip(padding(dataSize))
      continue
    }
    yield writeHeader(entry)
    yield * input.take(dataSize)
    await input.skip(padding(dataSize))
    if (dataSize % BLOCK) yield Buffer.alloc(padding(dataSize))
  }
  // Whatever follows the end of the archive is the engine's to ignore: read and dropped.
  await input.drain(Number.MAX_SAFE_INTEGER)
  const name = names.find((n) => held.has(n))
  if (name === undefined) throw refuse('build-dockerfile', `the build context has no ${names.join(' or ')} the gateway could read: tenants send the Dockerfile in the context (tar or gzip)`)
  const judged = Buffer.from(await judgeDockerfile(held.get(name)!.data.toString('utf8'), scope), 'utf8')
  for (const [n, { entry, data }] of held) {
    const bytes = n === name ? judged : data
    yield writeHeader({ ...entry, size: bytes.length })
    if (bytes.length) yield bytes
    if (bytes.length % BLOCK) yield Buffer.alloc(padding(bytes.length))
  }
  yield endOfArchive()
}

/**
 * Records `name` as the daemon's untar will leave it, refusing what would make the disk
 * differ from the list of entries: a name given twice (the daemon replaces the first, and
 * with a link, redirects what lies below it), or an entry below a link or a file.
 */
function place (seen: Map<string, Kind | 'implicit'>, name: string, kind: Kind): void {
  const parts = name.split('/')
  for (let i = 1; i < parts.length; i++) {
    const parent = parts.slice(0, i).join('/')
    const k = seen.get(parent)
    if (k === undefined) seen.set(parent, 'implicit')
    else if (k !== 'dir' && k !== 'implicit') throw refused(`the entry ${JSON.stringify(name)} lies below the ${k === 'file' ? 'file' : 'link'} ${JSON.stringify(parent)}`)
  }
  const before = seen.get(name)
  if (before === 'implicit' && kind === 'dir') { seen.set(name, 'dir'); return }
  if (before !== undefined) throw refused(`the name ${JSON.stringify(name)} is given twice (or names a directory of earlier entries)`)
  seen.set(name, kind)
}

/** What the builder takes from an image a build starts FROM: its id, user, triggers and environment. */
export interface BaseImage {
  /** The full id the gateway inspected: what the forwarded Dockerfile names (FROM, COPY --from). */
  readonly id: string
  /** `Config.User`: whom the stage's steps run as until a USER instruction. */
  readonly user: string
  /** `Config.OnBuild`: run as Dockerfile lines right after the FROM that names the image. */
  readonly onBuild: readonly string[]
  /** `Config.Env` (`KEY=value`): substituted into ADD and COPY sources like the Dockerfile's own ENV. */
  readonly env: readonly string[]
}

/** An image the engine does not have: nothing to run, or not known yet (no triggers, no environment). */
const NO_BASE: BaseImage = { id: '', user: '', onBuild: [], env: [] }

/** Instructions the builder refuses as a trigger (moby instructions.parseOnBuild). */
const NOT_TRIGGERS = new Set(['ONBUILD', 'FROM', 'MAINTAINER'])

type Flags = Array<{ getName: () => string, getValue: () => string | null, getValueRange: () => Range | null }>
type Range = ReturnType<Instruction['getRange']>
type Properties = Array<{ getName: () => string, getValue: () => string | null }>

/**
 * The Dockerfile's images, URLs and labels, as the classic builder will read them, and the
 * triggers it will run: those stored in each image a stage starts FROM (inspected on the
 * engine: `scope.checkImage`), run right after that FROM in the stage's state, and those
 * the Dockerfile stores with ONBUILD, judged by the same rules now (and again, in the
 * state of the build that runs them, when an image built FROM this one is built).
 *
 * With `scope.stepUser`, every step the builder runs (RUN, its own or a trigger's) is
 * judged as the user the builder will run it as: each stage's user starts as its base
 * image's `Config.User` (an earlier stage's last user; root for scratch) and follows the
 * USER instructions, the Dockerfile's and the triggers', expanded as the builder expands
 * them (dispatch: the stage's environment, then its build arguments).
 *
 * Returns the Dockerfile text to forward: the text judged, with each image it names (the
 * FROM of a stage, COPY --from) replaced by the full id the gateway inspected, so that a
 * tag moved meanwhile changes nothing, and each USER a step may run as written as the
 * literal `uid:gid` that was judged (a lone uid gets the tenant's group, as on a create).
 */
export async function judgeDockerfile (text: string, scope: BuildScope): Promise<string> {
  const instructions = DockerfileParser.parse(text).getInstructions()
  const edits: Array<{ range: Range, text: string }> = []
  const args = new Map<string, string>()
  // Earlier stages: by name and by index for COPY --from (moby stagesBuildResults.get),
  // by name alone for FROM (getByName: `FROM 0` names an image the builder would pull).
  const stages = new Set<string>()
  const named = new Set<string>()
  // The stage's environment: the base image's Env, then the stage's ENV instructions.
  let env = new Map<string, string>()
  let stageCount = 0
  // The user the stage's steps run as; undefined when the gateway cannot tell (a stored
  // trigger's USER through a variable: its variables are the builder's to resolve).
  let user: string | undefined = ''
  let stageNames: string[] = []
  const stageUsers = new Map<string, string | undefined>()
  const stageEnvs = new Map<string, Map<string, string>>()
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
  async function fromRef (ref: string, where: string): Promise<BaseImage | undefined> {
    if (stages.has(ref.toLowerCase())) return undefined
    return await image(ref, where)
  }
  /** A step the builder runs as the stage's user. */
  function runs (where: string): void {
    if (!scope.stepUser) return
    if (user === undefined) throw refuse('build-run-root', `${where}: the user it would run as is set by a stored trigger through a variable, which the gateway cannot resolve; give a numeric USER uid:gid before it`)
    const as = scope.stepUser(user, where)
    if (as !== user) throw refuse('build-run-root', `${where} would run as ${JSON.stringify(user)}, a uid without a group: the runtime takes its group from the image's own /etc/passwd, or 0 when it has no entry; give USER ${as} before it`)
  }

  /** One instruction; `trigger` names the image whose stored trigger it is, or 'ONBUILD' for a trigger being stored. */
  async function step (ins: Instruction, trigger?: string): Promise<void> {
    const keyword = ins.getKeyword().toUpperCase()
    const values = ins.getArguments().map((a) => unquote(a.getValue()))
    const flags = (ins as unknown as { getFlags?: () => Flags }).getFlags?.() ?? []
    // Only the Dockerfile's own lines are forwarded as text; triggers are the image's.
    const editable = trigger === undefined
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
        const stage = named.has(ref.toLowerCase())
        const base = ref.toLowerCase() === 'scratch' || stage ? NO_BASE : await image(ref, 'FROM')
        if (base.id !== '' && editable) {
          edits.push({ range: ins.getArguments()[0].getRange(), text: base.id })
          scope.pinned?.(base.id, ins.getArguments()[0].getValue())
        }
        for (const n of stageNames) { stageUsers.set(n, user); stageEnvs.set(n, env) }
        stageNames = [String(stageCount)]
        if ((values[1] ?? '').toUpperCase() === 'AS' && values[2]) { stages.add(values[2].toLowerCase()); named.add(values[2].toLowerCase()); stageNames.push(values[2].toLowerCase()) }
        stages.add(String(stageCount++))
        // A stage FROM an earlier stage runs as that stage's last user.
        user = stage ? stageUsers.get(ref.toLowerCase()) : base.user
        // A stage FROM an earlier stage starts from that stage's image: its triggers ran
        // when that stage began, and the builder clears them (initializeStage).
        // Its environment is that stage's last one.
        env = stage
          ? new Map(stageEnvs.get(ref.toLowerCase()))
          : new Map(base.env.map((e) => { const eq = e.indexOf('='); return eq < 0 ? [e, ''] : [e.slice(0, eq), e.slice(eq + 1)] }))
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
          if (f.getName().toLowerCase() !== 'from') continue
          const from = await fromRef(expand(f.getValue() ?? ''), 'COPY --from')
          const range = f.getValueRange()
          if (from !== undefined && from.id !== '' && range !== null && editable) {
            edits.push({ range, text: from.id })
            scope.pinned?.(from.id, f.getValue() ?? '')
          }
        }
        break
      case 'USER': {
        // A trigger being stored runs in another build, where it is judged.
        if (trigger === 'ONBUILD') break
        // The builder refuses a USER of more than one word, and reads a stored trigger's
        // variables its own way (its build arguments' scoping).
        const raw = values.length === 1 ? values[0] : undefined
        if (raw === undefined || (!editable && raw.includes('$'))) { user = undefined; break }
        user = expandEnv(raw)
        if (!scope.stepUser || !editable) break
        let as: string | undefined
        // A user no step may run as is refused at the step (a Dockerfile without RUN runs nothing).
        try { as = scope.stepUser(user, 'USER') } catch {}
        if (as !== undefined) {
          edits.push({ range: ins.getArgumentsRange() ?? ins.getArguments()[0].getRange(), text: as })
          user = as
        }
        break
      }
      case 'RUN':
        for (const f of flags) {
          if (f.getName().toLowerCase() !== 'mount') continue
          for (const part of (f.getValue() ?? '').split(',')) {
            const [k, v] = part.split('=', 2)
            if (k.trim().toLowerCase() === 'from' && v !== undefined) await fromRef(expand(v.trim()), 'RUN --mount from')
          }
        }
        if (trigger !== 'ONBUILD') runs(trigger === undefined ? 'RUN' : `RUN (a trigger of ${trigger})`)
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
  return applyEdits(text, edits)
}

/** `text` with each range replaced (ranges in the parser's lines and UTF-16 characters; they never overlap). */
function applyEdits (text: string, edits: ReadonlyArray<{ range: Range, text: string }>): string {
  if (edits.length === 0) return text
  // Line starts as the parser counts lines (vscode TextDocument: \r\n, \r or \n).
  const starts = [0]
  for (const m of text.matchAll(/\r\n|\r|\n/g)) starts.push(m.index + m[0].length)
  const offset = (p: Range['start']): number => Math.min(starts[p.line] + p.character, text.length)
  let out = text
  for (const e of [...edits].sort((a, b) => offset(b.range.start) - offset(a.range.start))) {
    out = out.slice(0, offset(e.range.start)) + e.text + out.slice(offset(e.range.end))
  }
  return out
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
