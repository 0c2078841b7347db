/**
 * Parsed Dockerfile lines as typed instructions, grouped into stages: a port of
 * moby/buildkit frontend/dockerfile/instructions (parse.go, bflag.go) at the version
 * dockerd 20.10 vendors. The values are still raw words: the builder expands them with
 * the lexer (lex.ts) when it runs each instruction, with the variables of that moment.
 */
import { DockerfileError } from './lex'
import { parse, type Node } from './parser'

export interface Pair { readonly key: string, readonly value: string }
export interface OptionalPair { readonly key: string, readonly value: string | undefined }

export type Instruction =
  | { readonly kind: 'arg', readonly node: Node, readonly args: readonly OptionalPair[] }
  | { readonly kind: 'env' | 'label', readonly node: Node, readonly pairs: readonly Pair[] }
  | { readonly kind: 'copy', readonly node: Node, readonly paths: readonly string[], readonly from: string, readonly chown: string, readonly chmod: string }
  | { readonly kind: 'add', readonly node: Node, readonly paths: readonly string[], readonly chown: string, readonly chmod: string }
  | { readonly kind: 'user', readonly node: Node, readonly user: string }
  | { readonly kind: 'run', readonly node: Node, readonly flagsUsed: readonly string[] }
  | { readonly kind: 'onbuild', readonly node: Node, readonly expression: string }
  | { readonly kind: 'other', readonly node: Node }

export interface Stage {
  readonly node: Node
  /** The base name as written (variables not substituted). */
  readonly base: string
  /** The stage's name, lower case; '' when it has none. */
  readonly name: string
  readonly platform: string
  readonly commands: Instruction[]
}

export interface Dockerfile {
  readonly escape: string
  /** ARG instructions before the first FROM. */
  readonly metaArgs: ReadonlyArray<Extract<Instruction, { kind: 'arg' }>>
  readonly stages: readonly Stage[]
}

type FlagType = 'bool' | 'string' | 'strings'

/** BFlags.Parse for the flags an instruction declares: values by name; `used` in order of first use. */
function parseFlags (args: readonly string[], declared: Record<string, FlagType>): { values: Map<string, string[]>, used: string[] } {
  const values = new Map<string, string[]>()
  const used: string[] = []
  for (let arg of args) {
    if (!arg.startsWith('--')) throw new DockerfileError(`Arg should start with -- : ${arg}`)
    if (arg === '--') break
    arg = arg.slice(2)
    let value = ''
    const index = arg.indexOf('=')
    if (index >= 0) { value = arg.slice(index + 1); arg = arg.slice(0, index) }
    const type = Object.hasOwn(declared, arg) ? declared[arg] : undefined
    if (type === undefined) throw new DockerfileError(`Unknown flag: ${arg}`)
    if (values.has(arg) && type !== 'strings') throw new DockerfileError(`Duplicate flag specified: ${arg}`)
    if (!values.has(arg)) { values.set(arg, []); used.push(arg) }
    if (type === 'bool') {
      if (index >= 0 && value === '') throw new DockerfileError(`Missing a value on flag: ${arg}`)
      const lower = value.toLowerCase()
      if (lower !== '' && lower !== 'true' && lower !== 'false') throw new DockerfileError(`Expecting boolean value for flag ${arg}, not: ${value}`)
      values.set(arg, [lower === '' ? 'true' : lower])
    } else {
      if (index < 0) throw new DockerfileError(`Missing a value on flag: ${arg}`)
      values.get(arg)!.push(value)
    }
  }
  return { values, used }
}

const flag = (f: { values: Map<string, string[]> }, name: string): string => f.values.get(name)?.[0] ?? ''

const STAGE_NAME = /^[a-z][a-z0-9-_.]*$/

/** One line as ParseInstruction reads it: a stage's FROM, or an instruction. */
export function parseInstruction (node: Node): Stage | Instruction {
  const args = node.args
  const noFlags = (): void => { parseFlags(node.flags, {}) }
  switch (node.cmd) {
    case 'env':
    case 'label': {
      noFlags()
      if (args.length === 0) throw new DockerfileError(`${node.cmd.toUpperCase()} requires at least one argument`)
      if (args.length % 2 !== 0) throw new DockerfileError(`Bad input to ${node.cmd.toUpperCase()}, too many arguments`)
      const pairs: Pair[] = []
      for (let j = 0; j < args.length; j += 2) {
        if (args[j].length === 0) throw new DockerfileError(`${node.cmd.toUpperCase()} names can not be blank`)
        pairs.push({ key: args[j], value: args[j + 1] })
      }
      return { kind: node.cmd, node, pairs }
    }
    case 'add':
    case 'copy': {
      if (args.length < 2) throw new DockerfileError(`${node.cmd.toUpperCase()} requires at least two arguments, but only one was provided. Destination could not be determined`)
      const f = parseFlags(node.flags, node.cmd === 'copy' ? { chown: 'string', from: 'string', chmod: 'string' } : { chown: 'string', chmod: 'string' })
      if (node.cmd === 'copy') return { kind: 'copy', node, paths: args, from: flag(f, 'from'), chown: flag(f, 'chown'), chmod: flag(f, 'chmod') }
      return { kind: 'add', node, paths: args, chown: flag(f, 'chown'), chmod: flag(f, 'chmod') }
    }
    case 'from': {
      let name = ''
      if (args.length === 3 && args[1].toLowerCase() === 'as') {
        name = args[2].toLowerCase()
        if (!STAGE_NAME.test(name)) throw new DockerfileError(`invalid name for build stage: ${JSON.stringify(args[2])}, name can't start with a number or contain symbols`)
      } else if (args.length !== 1) {
        throw new DockerfileError('FROM requires either one or three arguments')
      }
      const f = parseFlags(node.flags, { platform: 'string' })
      return { node, base: args[0], name, platform: flag(f, 'platform'), commands: [] }
    }
    case 'onbuild': {
      if (args.length === 0) throw new DockerfileError('ONBUILD requires at least one argument')
      noFlags()
      const trigger = args[0].trim().toUpperCase()
      if (trigger === 'ONBUILD') throw new DockerfileError('Chaining ONBUILD via `ONBUILD ONBUILD` isn\'t allowed')
      if (trigger === 'MAINTAINER' || trigger === 'FROM') throw new DockerfileError(`${trigger} isn't allowed as an ONBUILD trigger`)
      return { kind: 'onbuild', node, expression: node.original.replace(/^[\t\n\f\r ]*ONBUILD[\t\n\f\r ]*/i, '') }
    }
    case 'run': {
      const f = parseFlags(node.flags, { mount: 'strings' })
      return { kind: 'run', node, flagsUsed: f.used }
    }
    case 'user':
      if (args.length !== 1) throw new DockerfileError('USER requires exactly one argument')
      noFlags()
      return { kind: 'user', node, user: args[0] }
    case 'arg': {
      if (args.length < 1) throw new DockerfileError('ARG requires at least one argument')
      const pairs = args.map((a): OptionalPair => {
        const eq = a.indexOf('=')
        if (eq < 0) return { key: a, value: undefined }
        if (eq === 0) throw new DockerfileError('ARG names can not be blank')
        return { key: a.slice(0, eq), value: a.slice(eq + 1) }
      })
      return { kind: 'arg', node, args: pairs }
    }
    case 'maintainer':
    case 'workdir':
      if (args.length !== 1) throw new DockerfileError(`${node.cmd.toUpperCase()} requires exactly one argument`)
      noFlags()
      return { kind: 'other', node }
    case 'expose':
    case 'volume':
      if (args.length === 0) throw new DockerfileError(`${node.cmd.toUpperCase()} requires at least one argument`)
      noFlags()
      return { kind: 'other', node }
    case 'stopsignal':
      if (args.length !== 1) throw new DockerfileError('STOPSIGNAL requires exactly one argument')
      return { kind: 'other', node }
    case 'healthcheck':
      if (args.length === 0) throw new DockerfileError('HEALTHCHECK requires at least one argument')
      if (args[0].toUpperCase() !== 'NONE') parseFlags(node.flags, { interval: 'string', timeout: 'string', 'start-period': 'string', retries: 'string' })
      return { kind: 'other', node }
    case 'cmd':
    case 'entrypoint':
    case 'shell':
      noFlags()
      return { kind: 'other', node }
  }
  throw new DockerfileError(`unknown instruction: ${node.cmd.toUpperCase()}`)
}

export function isStage (x: Stage | Instruction): x is Stage {
  return !('kind' in x)
}

/** A Dockerfile as the builder reads it before it runs anything (parser.Parse, then instructions.Parse). */
export function parseDockerfile (text: string): Dockerfile {
  const { nodes, escape } = parse(text)
  const metaArgs: Array<Extract<Instruction, { kind: 'arg' }>> = []
  const stages: Stage[] = []
  for (const node of nodes) {
    let x: Stage | Instruction
    try {
      x = parseInstruction(node)
    } catch (err) {
      if (err instanceof DockerfileError) throw new DockerfileError(`dockerfile parse error line ${node.startLine}: ${err.message}`)
      throw err
    }
    if (isStage(x)) { stages.push(x); continue }
    if (stages.length === 0) {
      if (x.kind === 'arg') { metaArgs.push(x); continue }
      throw new DockerfileError(`dockerfile parse error line ${node.startLine}: no build stage in current context`)
    }
    stages[stages.length - 1].commands.push(x)
  }
  return { escape, metaArgs, stages }
}
