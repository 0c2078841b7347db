/**
 * Dockerfile text a tenant hands the engine, judged as the classic builder will run it
 * and forwarded as the gateway's own re-serialization of what was judged:
 *
 * - a build's Dockerfile (judgeDockerfile): the builder's own reading (src/api/dockerfile:
 *   moby's parser, instructions and shell lexer, ported), run through a model of its
 *   dispatch (moby builder/dockerfile, dockerd 20.10): ARGs before the first FROM are the
 *   only ones FROM and `--platform` see (with `buildargs`, and the builtin proxy
 *   arguments the builder lets through without an ARG); each stage's ARGs are its own
 *   and start empty; a stage's environment is its base image's, then its ENVs; a name is
 *   a stage only once that stage has finished (FROM by name; COPY --from by name or
 *   index, where the stage being built is an error), and anything else is an image
 *   reference the engine resolves by name, id or unique id prefix; the triggers stored
 *   in a base image (or an earlier stage) run right after its FROM.
 *   The text forwarded names every image literally: each FROM as the `sha256:` id the
 *   gateway inspected (or an earlier stage by its name, or scratch), each COPY --from as
 *   that id or the stage's index, each ADD as a JSON list of literal words (the values
 *   the gateway judged, escaped so that no variable is left), each USER a step runs as
 *   as the judged `uid:gid`. Every other line is the builder's own logical line. The
 *   result is parsed again and must give back the same lines, one instruction each.
 * - commit and import `changes` (judgeChanges): the engine joins them with newlines and
 *   reads them as a Dockerfile (dockerfile.BuildFromConfig); the gateway forwards one
 *   logical line per change, so that its own LABEL change after them is an instruction
 *   of its own, and no label key may come to name an owner label once the lexer has
 *   removed its quotes and escapes.
 * - triggers stored in an image (judgeTriggers): each is one instruction, judged as it
 *   is stored, and again (in the state of that build) when a build runs it.
 */
import { GatewayError } from '../../api/errors'
import { isStage, parseDockerfile, parseInstruction, type Instruction, type Stage } from '../../api/dockerfile/instructions'
import { buildEnvs, DockerfileError, literalWord, processWord } from '../../api/dockerfile/lex'
import { parse } from '../../api/dockerfile/parser'
import { refuse } from './refusal'

/** What the builder takes from an image a build starts FROM: its id, user, triggers and environment. */
export interface BaseImage {
  /** The full id the gateway inspected: what the forwarded Dockerfile names (FROM, COPY --from). */
  readonly id: string
  /** `Config.User`: whom the stage's steps run as until a USER instruction. */
  readonly user: string
  /** `Config.OnBuild`: run as Dockerfile lines right after the FROM that names the image. */
  readonly onBuild: readonly string[]
  /** `Config.Env` (`KEY=value`): the stage's environment until its ENVs. */
  readonly env: readonly string[]
}

export interface BuildScope {
  /** The `dockerfile` query parameter, as the engine reads it (Form.Get). */
  readonly dockerfile: string
  /** The `buildargs` query parameter, decoded (null: given without a value, which the builder ignores). */
  readonly buildArgs: Readonly<Record<string, string | null>>
  /** The `target` query parameter: the stage the build stops after ('' for the last). */
  readonly target?: string
  /** An image the Dockerfile names must be the tenant's or shared; throws the refusal; returns what the engine has stored for it. */
  readonly checkImage: (ref: string, where: string) => Promise<BaseImage>
  /**
   * Who the build's steps may run as (tenancy.yaml `builds.runAsRoot`, users.ts stepUser):
   * returns the `uid:gid` to forward for `user`, or throws the refusal. Absent: any user.
   */
  readonly stepUser?: (user: string, where: string) => string
  /** Told of each text of a forwarded step that stands for another in the Dockerfile (an image by its id), in order: the text sent and the text it replaced. */
  readonly pinned?: (sent: string, original: string) => void
}

/** The builder's default PATH on Linux (system.DefaultPathEnv), added to a stage's environment that has none. */
const DEFAULT_PATH = 'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'

/** Build arguments every step and FROM may read without an ARG, from `buildargs` (builtinAllowedBuildArgs). */
const BUILTIN_ARGS = ['HTTP_PROXY', 'http_proxy', 'HTTPS_PROXY', 'https_proxy', 'FTP_PROXY', 'ftp_proxy', 'NO_PROXY', 'no_proxy']

/** The instructions a commit's or import's `changes` may hold (moby validCommitCommands). */
const CHANGE_COMMANDS = new Set(['cmd', 'entrypoint', 'healthcheck', 'env', 'expose', 'label', 'onbuild', 'user', 'volume', 'workdir'])

/** A platform the gateway writes back as it is. */
const PLATFORM = /^[A-Za-z0-9_./-]+$/

/**
 * Whether a label key could be one of the gateway's owner labels: any spelling of the
 * prefix (the key as the lexer leaves it).
 */
export function mayBeOwnerLabel (key: string): boolean {
  return /io\.portcullis\./i.test(key)
}

/**
 * A LABEL instruction setting one label, key and value in double quotes; null when a
 * value holds a character whose reading depends on the escape character or on
 * variables: such a label cannot be stamped reliably.
 */
export function labelInstruction (key: string, value: string): string | null {
  if ([key, value].some((s) => /["\\`$'\r\n]/.test(s))) return null
  return `LABEL "${key}"="${value}"`
}

/** The build arguments of one scope (moby builder/dockerfile BuildArgs). */
class BuildArgs {
  /** Declared by ARG in the current stage (before the first FROM: every meta ARG), with its default. */
  private allowed = new Map<string, string | undefined>()
  constructor (
    private readonly options: Readonly<Record<string, string | null>>,
    /** The ARGs before the first FROM. */
    private readonly meta = new Map<string, string | undefined>()
  ) {}

  /** A stage's arguments: the meta ARGs, none of its own yet (Clone, ResetAllowed). */
  forStage (): BuildArgs {
    return new BuildArgs(this.options, new Map(this.meta))
  }

  addArg (key: string, value: string | undefined): void { this.allowed.set(key, value) }
  addMeta (key: string, value: string | undefined): void { this.meta.set(key, value) }

  /** getBuildArg: `buildargs` first, then the declared default, then the meta ARG's. */
  private value (key: string, source: Map<string, string | undefined>): string | undefined {
    const given = Object.hasOwn(this.options, key) ? this.options[key] : null
    if (typeof given === 'string') return given
    return source.get(key) ?? this.meta.get(key)
  }

  private all (source: Map<string, string | undefined>): Map<string, string> {
    const out = new Map<string, string>()
    for (const key of new Set([...source.keys(), ...BUILTIN_ARGS])) {
      const v = this.value(key, source)
      if (v !== undefined) out.set(key, v)
    }
    return out
  }

  /** GetAllAllowed as `KEY=value`. */
  allowedList (): string[] { return [...this.all(this.allowed)].map(([k, v]) => `${k}=${v}`) }
  /** GetAllMeta, as the variables FROM is expanded with. */
  metaEnv (): Map<string, string> { return this.all(this.meta) }
  /** FilterAllowed: the allowed arguments the environment does not set. */
  notIn (env: readonly string[]): string[] {
    const keys = new Set(env.map((e) => e.split('=', 1)[0]))
    return [...this.all(this.allowed)].filter(([k]) => !keys.has(k)).map(([k, v]) => `${k}=${v}`)
  }
}

/** What an instruction runs in: its stage's environment, arguments, user and stored triggers. */
interface State {
  env: string[]
  args: BuildArgs
  /** The user steps run as; undefined when the gateway cannot tell (a stored trigger's USER through a variable). */
  user: string | undefined
  onBuild: string[]
}

/** A finished stage: what a later FROM of it starts from, and its index for COPY --from. */
interface Finished { readonly index: number, readonly name: string, readonly env: readonly string[], readonly user: string | undefined, readonly onBuild: readonly string[] }

/**
 * How an instruction comes to run: a line of the Dockerfile (forwarded as the gateway
 * writes it), a trigger stored in the image a stage starts from (runs now, as the image
 * holds it), or a trigger being stored by ONBUILD or a commit (runs in another build,
 * where it is judged again).
 */
type Origin = { readonly kind: 'line' } | { readonly kind: 'trigger', readonly of: string } | { readonly kind: 'storing' }

/** A failure the builder reports too: the build would fail there; the gateway refuses it before anything runs. */
function unreadable (err: unknown): unknown {
  if (err instanceof DockerfileError) return refuse('build-dockerfile', `the builder would refuse this Dockerfile: ${err.message}`)
  return err
}

/** A word as the builder expands it with `env`. */
function word (text: string, env: ReadonlyMap<string, string>, escape: string): string {
  return processWord(text, env, escape).value
}

/** A builder flag written back so that the flag parser reads `--name=value`. */
function flagWord (name: string, value: string): string {
  if (/^[A-Za-z0-9_.:/@+=,-]*$/.test(value)) return `--${name}=${value}`
  return `--${name}="${value.replace(/[\\"]/g, '\\$&')}"`
}

function flagValue (flag: string): [string, string] {
  const eq = flag.indexOf('=')
  return eq < 0 ? [flag.slice(2), ''] : [flag.slice(2, eq), flag.slice(eq + 1)]
}

/**
 * The Dockerfile's images, URLs, labels and users, as the classic builder will read
 * them, and the triggers it will run (see the file's comment). Returns the text to
 * forward.
 */
export async function judgeDockerfile (text: string, scope: BuildScope): Promise<string> {
  try {
    return await judge(text, scope)
  } catch (err) {
    throw unreadable(err)
  }
}

async function judge (text: string, scope: BuildScope): Promise<string> {
  const df = parseDockerfile(text)
  const escape = df.escape
  let stages: readonly Stage[] = df.stages
  const target = (scope.target ?? '').toLowerCase()
  if (target !== '') {
    const at = stages.findIndex((s) => s.name === target)
    if (at < 0) throw new DockerfileError(`failed to reach build target ${scope.target ?? ''} in Dockerfile`)
    stages = stages.slice(0, at + 1)
  }
  /** Each forwarded line, with the instruction the builder must read from it. */
  const out: string[] = []
  const global = new BuildArgs(scope.buildArgs)
  for (const meta of df.metaArgs) {
    const env = buildEnvs(global.allowedList())
    const pairs = meta.args.map((a) => ({ key: word(a.key, env, escape), value: a.value === undefined ? undefined : word(a.value, env, escape) }))
    for (const a of pairs) { global.addArg(a.key, a.value); global.addMeta(a.key, a.value) }
    out.push(meta.node.original)
  }
  const finished = new Map<string, Finished>()
  const judging = new Judge(scope, escape, finished)

  for (const stage of stages) {
    if (stage.name !== '' && finished.has(stage.name)) throw new DockerfileError(`${stage.name} stage name already used`)
    const args = global.forStage()
    const metaEnv = args.metaEnv()
    const platform = stage.platform === '' ? '' : word(stage.platform, metaEnv, escape)
    if (platform !== '' && !PLATFORM.test(platform)) throw refuse('build-image', `FROM --platform=${JSON.stringify(platform)}: not a platform`)
    const name = word(stage.base, metaEnv, escape)
    if (name === '') throw refuse('build-image', `FROM ${stage.base} does not name an image once its build arguments are substituted (the builder: base name should not be blank)`)
    const earlier = finished.get(name.toLowerCase())
    let from: string
    let start: { env: readonly string[], user: string | undefined, onBuild: readonly string[] }
    if (earlier !== undefined) {
      from = earlier.name
      start = earlier
    } else if (name === 'scratch') {
      from = 'scratch'
      start = { env: [], user: '', onBuild: [] }
    } else {
      const base = await judging.image(name, 'FROM')
      from = base.id
      start = base
      scope.pinned?.(base.id, stage.base)
    }
    out.push(`FROM ${platform !== '' ? `--platform=${platform} ` : ''}${from}${stage.name !== '' ? ` AS ${stage.name}` : ''}`)
    const state: State = { env: [...start.env], args, user: start.user, onBuild: [] }
    if (!state.env.some((e) => e.split('=', 1)[0] === 'PATH')) state.env.push(DEFAULT_PATH)
    // The base's triggers run now, each parsed alone with the default escape character.
    for (const t of start.onBuild) await judging.run(trigger(t, name), state, { kind: 'trigger', of: name })
    for (const ins of stage.commands) out.push(await judging.run(ins, state, { kind: 'line' }) ?? ins.node.original)
    const done: Finished = { index: judging.stagesDone++, name: stage.name, env: state.env, user: state.user, onBuild: state.onBuild }
    if (stage.name !== '') finished.set(stage.name, done)
  }
  const forwarded = (escape === '\\' ? '' : '# escape=`\n') + out.join('\n') + '\n'
  sameLines(forwarded, out)
  return forwarded
}

/**
 * `text`, parsed as the builder will parse it, gives back exactly `lines`, one
 * instruction each: nothing the gateway forwards joins or splits a line it judged.
 */
function sameLines (text: string, lines: readonly string[]): void {
  const nodes = parse(text).nodes
  if (nodes.length !== lines.length || nodes.some((n, i) => n.original !== lines[i])) {
    throw refuse('build-dockerfile', 'the Dockerfile cannot be written back in a form the builder reads line for line as the gateway judged it (an escape character at the end of its last line?)')
  }
}

/** A stored trigger as the builder reads it (dispatchTriggeredOnBuild): one instruction, not FROM. */
function trigger (t: string, of: string): Instruction {
  const { nodes } = parse(t)
  if (nodes.length !== 1) throw refuse('build-onbuild', `a trigger of ${of} is ${nodes.length} instructions; the builder runs one per trigger`)
  const ins = parseInstruction(nodes[0])
  if (isStage(ins)) throw refuse('build-onbuild', `FROM is not allowed as an ONBUILD trigger (a trigger of ${of})`)
  return ins
}

class Judge {
  /** How many stages have finished: the next one's index (COPY --from by index). */
  stagesDone = 0

  constructor (
    private readonly scope: Pick<BuildScope, 'checkImage' | 'stepUser' | 'pinned'>,
    private readonly escape: string,
    /** Finished stages by name (lower case). */
    private readonly finished: ReadonlyMap<string, Finished> = new Map(),
    /** Names the build's own stages have: a trigger being stored may name one (it is judged where it runs). */
    private readonly stageNames: ReadonlySet<string> = new Set()
  ) {}

  async image (ref: string, where: string): Promise<BaseImage> {
    if (ref.includes('$')) throw refuse('build-image', `${where} ${JSON.stringify(ref)} does not name an image`)
    return await this.scope.checkImage(ref, where)
  }

  /** A step the builder runs as the stage's user. */
  private runs (state: State, where: string): void {
    if (!this.scope.stepUser) return
    if (state.user === undefined) throw refuse('build-run-root', `${where}: the user it would run as is set by a stored trigger through a variable, which the gateway cannot resolve; give a numeric USER uid:gid before it`)
    const as = this.scope.stepUser(state.user, where)
    if (as !== state.user) throw refuse('build-run-root', `${where} would run as ${JSON.stringify(state.user)}, a uid without a group: the runtime takes its group from the image's own /etc/passwd, or 0 when it has no entry; give USER ${as} before it`)
  }

  /**
   * One instruction (dispatch): judged in `state`, which it changes as the builder's
   * would change. Returns the line to forward in its place, when it is a line of the
   * Dockerfile the gateway writes otherwise than the builder's own logical line.
   */
  async run (ins: Instruction, state: State, origin: Origin): Promise<string | undefined> {
    const escape = this.escape
    const env = buildEnvs([...state.env, ...state.args.notIn(state.env)])
    const expand = (s: string): string => word(s, env, escape)
    const where = (what: string): string => origin.kind === 'trigger' ? `${what} (a trigger of ${origin.of})` : what
    const line = origin.kind === 'line'
    switch (ins.kind) {
      case 'arg': {
        const pairs = ins.args.map((a) => ({ key: expand(a.key), value: a.value === undefined ? undefined : expand(a.value) }))
        for (const a of pairs) state.args.addArg(a.key, a.value)
        return undefined
      }
      case 'env': {
        const pairs = ins.pairs.map((p) => ({ key: expand(p.key), value: expand(p.value) }))
        for (const { key, value } of pairs) {
          const at = state.env.findIndex((e) => e.split('=', 1)[0] === key)
          if (at >= 0) state.env[at] = `${key}=${value}`
          else state.env.push(`${key}=${value}`)
        }
        return undefined
      }
      case 'label':
        for (const p of ins.pairs) {
          const key = processWord(p.key, env, escape)
          if (key.vars.length > 0 || mayBeOwnerLabel(key.value)) throw refuse('owner-labels', `LABEL ${p.key}${origin.kind === 'trigger' ? ` (a trigger of ${origin.of})` : ''}: io.portcullis.* labels, and labels named with variables, are the gateway's`)
        }
        return undefined
      case 'add': {
        if (ins.chmod !== '') throw new DockerfileError('the --chmod option requires BuildKit')
        const paths = ins.paths.map(expand)
        for (const s of paths.slice(0, -1)) {
          if (/^[a-z][a-z0-9+.-]*:\/\//i.test(s) || s.startsWith('git@')) throw refuse('build-add-url', `${where('ADD')} ${s} makes the engine fetch a URL: not available to tenants (download it into the context)`)
        }
        if (!line) return undefined
        const flags = ins.node.flags.map((f) => flagWord(...flagValue(f)))
        return ['ADD', ...flags, JSON.stringify(paths.map((p) => literalWord(p, escape)))].join(' ')
      }
      case 'copy': {
        if (ins.chmod !== '') throw new DockerfileError('the --chmod option requires BuildKit')
        ins.paths.forEach(expand)
        if (ins.from === '') return undefined
        const sent = await this.copyFrom(ins.from, origin)
        if (!line || sent === undefined) return undefined
        const flags = ins.node.flags.map((f) => { const [n, v] = flagValue(f); return flagWord(n, n === 'from' ? sent : v) })
        this.scope.pinned?.(sent.startsWith('sha256:') ? sent : `--from=${sent}`, sent.startsWith('sha256:') ? ins.from : `--from=${ins.from}`)
        return ['COPY', ...flags, ins.node.rest].join(' ')
      }
      case 'user': {
        // A trigger being stored runs in another build, where it is judged.
        if (origin.kind === 'storing') return undefined
        const user = processWord(ins.user, env, escape)
        // A stored trigger's variables are the build's that runs it: the gateway leaves
        // the user unknown (a step after it is refused) rather than guess.
        if (origin.kind === 'trigger' && user.vars.length > 0) { state.user = undefined; return undefined }
        state.user = user.value
        if (!line || !this.scope.stepUser) return undefined
        let as: string | undefined
        // A user no step may run as is refused at the step (a Dockerfile without RUN runs nothing).
        try { as = this.scope.stepUser(user.value, 'USER') } catch {}
        if (as === undefined) return undefined
        state.user = as
        return `USER ${as}`
      }
      case 'run':
        if (ins.flagsUsed.length > 0) throw new DockerfileError(`the --${ins.flagsUsed[0]} option requires BuildKit`)
        if (origin.kind !== 'storing') this.runs(state, where('RUN'))
        return undefined
      case 'onbuild':
        await this.store(ins.expression)
        state.onBuild.push(ins.expression)
        return undefined
      case 'other':
        return undefined
    }
  }

  /**
   * A trigger being stored in the image this makes (an ONBUILD line, a commit's or a load
   * archive's OnBuild): one instruction that may be a trigger (moby parseOnBuild), judged
   * now with what this build knows; the build that runs it judges it again, in its own state.
   */
  async store (expression: string, of = 'this build'): Promise<void> {
    const inner = trigger(expression, of)
    const keyword = inner.node.cmd.toUpperCase()
    if (keyword === 'ONBUILD') throw new DockerfileError('Chaining ONBUILD via `ONBUILD ONBUILD` isn\'t allowed')
    if (keyword === 'MAINTAINER') throw new DockerfileError(`${keyword} isn't allowed as an ONBUILD trigger`)
    const storing = new Judge(this.scope, '\\', new Map(), new Set([...this.stageNames, ...this.finished.keys()]))
    await storing.run(inner, { env: [], args: new BuildArgs({}), user: undefined, onBuild: [] }, { kind: 'storing' })
  }

  /**
   * COPY --from as the builder resolves it (getImageMount): a finished stage by name,
   * then by index (the stage being built, or one beyond it, is an error), else an image
   * reference. Returns what to forward: the stage's index, or the image's id.
   */
  private async copyFrom (from: string, origin: Origin): Promise<string | undefined> {
    if (origin.kind === 'storing') {
      // Resolved in the build that runs the trigger: only an image it could not but
      // mean is judged now.
      if (/^[+-]?\d+$/.test(from) || this.stageNames.has(from.toLowerCase())) return undefined
      await this.image(from, 'COPY --from')
      return undefined
    }
    const stage = this.finished.get(from.toLowerCase())
    if (stage !== undefined) return String(stage.index)
    if (/^[+-]?\d+$/.test(from)) {
      const i = Number(from)
      if (!Number.isSafeInteger(i)) throw new DockerfileError(`invalid from flag value ${from}: index out of bounds`)
      if (i === this.stagesDone) throw new DockerfileError(`invalid from flag value ${from}: refers to current build stage`)
      if (i < 0 || i > this.stagesDone) throw new DockerfileError(`invalid from flag value ${from}: index out of bounds`)
      return String(i)
    }
    return (await this.image(from, 'COPY --from')).id
  }
}

/**
 * Triggers a tenant stores in an image it makes by other means than a build: a commit's
 * `OnBuild`, the `config.OnBuild` of an image config in a load archive. Each must be
 * one instruction that may be a trigger (moby parseOnBuild), judged as being stored.
 */
export async function judgeTriggers (triggers: readonly string[], checkImage: BuildScope['checkImage']): Promise<void> {
  const judge = new Judge({ checkImage }, '\\')
  try {
    for (const t of triggers) await judge.store(t, 'the image')
  } catch (err) {
    throw changeError(err, 'build-onbuild')
  }
}

/** A failure the engine answers with 400 (InvalidParameter): a refusal by `rule` that says so. */
function changeError (err: unknown, rule: string): unknown {
  if (err instanceof DockerfileError) return refuse(rule, `the engine would refuse this: ${err.message}`)
  return err
}

/**
 * A commit's or import's `changes`, judged as the engine will read them (joined with
 * newlines, parsed as a Dockerfile, each instruction one of the commands a change may
 * be): no label key may name an owner label, or be named through a variable; triggers
 * are judged as being stored. Returns the changes to forward: one logical line each,
 * after the escape directive they chose.
 */
export async function judgeChanges (changes: readonly string[], checkImage: BuildScope['checkImage']): Promise<string[]> {
  if (changes.length === 0) return []
  try {
    const { nodes, escape } = parse(changes.join('\n'))
    const judge = new Judge({ checkImage }, escape)
    const state: State = { env: [], args: new BuildArgs({}), user: undefined, onBuild: [] }
    for (const node of nodes) {
      if (!CHANGE_COMMANDS.has(node.cmd)) throw new GatewayError('BODY_INVALID', `${node.cmd} is not a valid change command`)
      const ins = parseInstruction(node)
      if (isStage(ins)) throw new GatewayError('BODY_INVALID', `${node.cmd} is not a valid change command`)
      await judge.run(ins, state, { kind: 'storing' })
    }
    return [...(escape === '\\' ? [] : ['# escape=`']), ...nodes.map((n) => n.original)]
  } catch (err) {
    if (err instanceof DockerfileError) throw new GatewayError('BODY_INVALID', `invalid changes: ${err.message}`)
    throw err
  }
}

/**
 * `changes` (judged, from judgeChanges) with the gateway's own `stamps` after them:
 * throws unless the engine, joining them with newlines, reads each stamp as an
 * instruction of its own.
 */
export function stampedChanges (changes: readonly string[], stamps: readonly string[]): string[] {
  const all = [...changes, ...stamps]
  const lines = all.filter((c) => !c.startsWith('# escape='))
  try {
    const nodes = parse(all.join('\n')).nodes
    if (nodes.length === lines.length && nodes.every((n, i) => n.original === lines[i])) return all
  } catch {}
  throw refuse('owner-labels', 'the changes cannot be written back so that the owner labels after them stay instructions of their own')
}
