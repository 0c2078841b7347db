/**
 * A fast-check generator of Dockerfiles for differential builds (test/dockerfile-differential):
 * texts that read differently depending on how a reader scopes ARGs (global before the
 * first FROM vs per stage), substitutes variables ($X, ${X}, ${X:-word}, ${X:+word}),
 * quotes and escapes words, honours the `# escape=` directive and joins continuation
 * lines (with comment lines inside, and one left open on the last line), and names
 * stages and images alike (stage names that are hex prefixes of an image id, COPY --from
 * of a finished stage, of the stage being built, of an index, of an image reference).
 *
 * The generator knows nothing of which image is whose: it is given the image reference
 * spellings (`refs`, each one resolving to an image on the engine; repeat one to draw it
 * more often), spellings that do not (`oddRefs`) and the stage names (`stageNames`).
 *
 * Most Dockerfiles are meant to build: a build that fails on both sides compares nothing.
 * So the generator keeps what the builder needs true, and breaks it only on purpose, now
 * and then (the `odd` choices): a variable FROM names a global ARG that has a value (FROM
 * sees global ARGs only), or carries its own `${X:-ref}` default; a FROM of a stage name
 * names an earlier stage; COPY --from of an index names an earlier stage and of an image
 * not scratch; stage names are not reused; single quotes and escapes go only where the
 * lexer reads them back to the same word; ADD $V has `ARG V=data.txt` before it, V not
 * an ENV of the stage nor a build argument.
 */
import fc from 'fast-check'

export interface GenPools {
  /** Image reference spellings that resolve on the engine: names, `sha256:` ids, id prefixes, scratch. */
  readonly refs: readonly string[]
  /** Spellings that are no image: a bare 64-hex id, a name nothing has, ... (drawn rarely). */
  readonly oddRefs: readonly string[]
  /** Stage names: ordinary ones and hex prefixes of image ids. */
  readonly stageNames: readonly string[]
  /** A URL the daemon would fetch (ADD): a local canary. */
  readonly url: string
}

export interface GenCase {
  readonly dockerfile: string
  readonly buildArgs: Record<string, string>
}

/** Variable names: ordinary ones and the builder's builtin proxy arguments (usable without an ARG). */
export const VARS = ['X', 'Y', 'HTTP_PROXY', 'X', 'Y', 'https_proxy', 'NO_PROXY'] as const

type Form = 'bare' | 'braced' | 'default' | 'alt'
type Word = { kind: 'lit', text: string } | { kind: 'var', form: Form, name: string, word: string }

/**
 * A FROM's base: a literal reference, an earlier stage's name (`back` stages back), a
 * variable that render binds to a global ARG with a value (`bound`), a variable with its
 * own default, or (`odd`) a word as drawn, which may well name nothing.
 */
type Base =
  | { kind: 'ref', text: string }
  | { kind: 'stage', back: number, text: string }
  | { kind: 'bound', form: 'bare' | 'braced' | 'alt', word: string }
  | { kind: 'default', name: string, word: string }
  | { kind: 'odd', word: Word }

interface Stage {
  from: Base
  quote: 'none' | 'double' | 'single'
  as?: string
  body: Body[]
}
type CopySource =
  /** An earlier stage's index (`text`, an image, in the first stage). */
  | { kind: 'stage', index: number, text: string }
  | { kind: 'named', back: number, text: string }
  | { kind: 'current', text: string }
  | { kind: 'word', text: string }
type Body =
  | { kind: 'arg', name: string, value?: Word }
  | { kind: 'env', name: string, value: Word, form: 'eq' | 'space' }
  | { kind: 'copyFrom', from: CopySource, src: string }
  | { kind: 'argStage', name: string, back: number }
  | { kind: 'copyCtx' }
  | { kind: 'label' }
  | { kind: 'addVar', name: string, how: 'arg' | 'default' | 'url' }
  | { kind: 'comment' }

interface Spec {
  escape: '\\' | '`'
  directive: boolean
  globals: Array<{ name: string, value?: Word }>
  stages: Stage[]
  buildArgs: Array<[string, string]>
  /** Between tokens: 0 a space, 1 a continuation, 2 a continuation then a comment line, 3 a continuation then an empty line. */
  joins: number[]
  openLast: boolean
  escapes: number[]
}

export function dockerfileCase (pools: GenPools): fc.Arbitrary<GenCase> {
  const varName = fc.constantFrom(...VARS)
  const ref = fc.constantFrom(...pools.refs)
  // COPY --from's images: not scratch (nothing to copy), not an id prefix of digits only (the builder reads a stage index).
  const image = fc.constantFrom(...pools.refs.filter((r) => r !== 'scratch' && !/^\d+$/.test(r)))
  const odd = fc.constantFrom(...pools.oddRefs, pools.url)
  const stageName = fc.constantFrom(...pools.stageNames)
  /** A value as ARG, ENV and build arguments carry it: mostly a reference, some stage names, rarely an odd one. */
  const literal = fc.oneof(
    { weight: 8, arbitrary: ref },
    { weight: 2, arbitrary: stageName },
    { weight: 1, arbitrary: odd }
  )
  const form = fc.constantFrom('bare', 'braced', 'default', 'alt') as fc.Arbitrary<Form>
  const word: fc.Arbitrary<Word> = fc.oneof(
    { weight: 5, arbitrary: literal.map((text): Word => ({ kind: 'lit', text })) },
    { weight: 3, arbitrary: fc.record({ form, name: varName, word: literal }).map((v): Word => ({ kind: 'var', ...v })) }
  )
  /** A global ARG's value: a reference, or a variable with a reference for its default or alternative. */
  const globalValue: fc.Arbitrary<Word> = fc.oneof(
    { weight: 6, arbitrary: ref.map((text): Word => ({ kind: 'lit', text })) },
    { weight: 2, arbitrary: fc.record({ form: fc.constantFrom('default', 'default', 'alt') as fc.Arbitrary<Form>, name: varName, word: ref }).map((v): Word => ({ kind: 'var', ...v })) },
    { weight: 1, arbitrary: word }
  )
  const base: fc.Arbitrary<Base> = fc.oneof(
    { weight: 4, arbitrary: ref.map((text): Base => ({ kind: 'ref', text })) },
    { weight: 2, arbitrary: fc.record({ back: fc.nat({ max: 2 }), text: ref }).map((b): Base => ({ kind: 'stage', ...b })) },
    { weight: 5, arbitrary: fc.record({ form: fc.constantFrom('bare', 'braced', 'bare', 'braced', 'alt') as fc.Arbitrary<'bare' | 'braced' | 'alt'>, word: ref }).map((b): Base => ({ kind: 'bound', ...b })) },
    { weight: 2, arbitrary: fc.record({ name: varName, word: ref }).map((b): Base => ({ kind: 'default', ...b })) },
    { weight: 1, arbitrary: word.map((w): Base => ({ kind: 'odd', word: w })) }
  )
  const copySource: fc.Arbitrary<CopySource> = fc.oneof(
    { weight: 3, arbitrary: fc.record({ index: fc.nat({ max: 3 }), text: image }).map((c): CopySource => ({ kind: 'stage', ...c })) },
    { weight: 2, arbitrary: fc.record({ back: fc.nat({ max: 2 }), text: image }).map((c): CopySource => ({ kind: 'named', ...c })) },
    { weight: 1, arbitrary: image.map((text): CopySource => ({ kind: 'current', text })) },
    { weight: 3, arbitrary: image.map((text): CopySource => ({ kind: 'word', text })) },
    { weight: 1, arbitrary: fc.oneof(stageName, odd).map((text): CopySource => ({ kind: 'word', text })) }
  )
  const body: fc.Arbitrary<Body> = fc.oneof(
    { weight: 4, arbitrary: fc.record({ name: varName, value: fc.option(word, { nil: undefined, freq: 3 }) }).map((a): Body => ({ kind: 'arg', ...a })) },
    { weight: 2, arbitrary: fc.record({ name: varName, value: word, form: fc.constantFrom('eq', 'space') as fc.Arbitrary<'eq' | 'space'> }).map((e): Body => ({ kind: 'env', ...e })) },
    { weight: 4, arbitrary: fc.record({ from: copySource, src: fc.constantFrom('/etc', '/etc', '/etc', '/etc', '/etc/marker') }).map((c): Body => ({ kind: 'copyFrom', ...c })) },
    // A stage ARG whose value is a stage's name (this one's or an earlier one's): the ARG-scope confusion.
    { weight: 2, arbitrary: fc.record({ name: varName, back: fc.nat({ max: 2 }) }).map((a): Body => ({ kind: 'argStage', ...a })) },
    { weight: 1, arbitrary: fc.constant<Body>({ kind: 'copyCtx' }) },
    { weight: 1, arbitrary: fc.constant<Body>({ kind: 'label' }) },
    { weight: 1, arbitrary: fc.record({ name: varName, how: fc.constantFrom('arg', 'arg', 'arg', 'default', 'url') as fc.Arbitrary<'arg' | 'default' | 'url'> }).map((a): Body => ({ kind: 'addVar', ...a })) },
    { weight: 1, arbitrary: fc.constant<Body>({ kind: 'comment' }) }
  )
  const stage: fc.Arbitrary<Stage> = fc.record({
    from: base,
    quote: fc.constantFrom('none', 'none', 'none', 'none', 'none', 'double', 'single') as fc.Arbitrary<'none' | 'double' | 'single'>,
    as: fc.option(stageName, { nil: undefined, freq: 3 }),
    body: fc.array(body, { maxLength: 4 }),
  })
  const spec: fc.Arbitrary<Spec> = fc.record({
    escape: fc.constantFrom('\\', '\\', '`') as fc.Arbitrary<'\\' | '`'>,
    directive: fc.boolean(),
    globals: fc.array(fc.record({ name: varName, value: fc.option(globalValue, { nil: undefined, freq: 6 }) }), { minLength: 1, maxLength: 4 }),
    stages: fc.array(stage, { minLength: 1, maxLength: 3 }),
    buildArgs: fc.array(fc.tuple(varName, fc.oneof({ weight: 6, arbitrary: literal }, { weight: 1, arbitrary: word.map(wordText) })), { maxLength: 2 }),
    joins: fc.array(fc.constantFrom(0, 0, 0, 0, 0, 0, 1, 2, 3), { minLength: 8, maxLength: 8 }),
    openLast: fc.boolean(),
    escapes: fc.array(fc.nat({ max: 40 }), { maxLength: 2 }),
  })
  return spec.map((s) => render(s, pools))
}

/** A word as Dockerfile text, its variable forms spelled out. */
function wordText (w: Word): string {
  if (w.kind === 'lit') return w.text
  switch (w.form) {
    case 'bare': return `$${w.name}`
    case 'braced': return `\${${w.name}}`
    case 'default': return `\${${w.name}:-${w.word}}`
    case 'alt': return `\${${w.name}:+${w.word}}`
  }
}

function render (s: Spec, pools: GenPools): GenCase {
  // The escape directive only counts when it is on; without it the escape is a backslash.
  const esc = s.directive ? s.escape : '\\'
  let joinAt = 0
  let escAt = 0
  const lines: string[] = []
  if (s.directive) lines.push(`# escape=${s.escape}`)
  /** Tokens of one instruction, joined by spaces or by continuations as the spec says. */
  const instr = (tokens: string[]): void => {
    let out = tokens[0]
    for (const t of tokens.slice(1)) {
      const j = s.joins[joinAt++ % s.joins.length]
      out += j === 0 ? ' ' : j === 1 ? ` ${esc}\n  ` : j === 2 ? ` ${esc}\n# a comment inside a continuation\n  ` : ` ${esc}\n\n  `
      out += t
    }
    lines.push(out)
  }
  /** A literal word with an escape character put before one of its letters (the lexer drops it outside quotes). */
  const escaped = (text: string): string => {
    if (s.escapes.length === 0) return text
    const n = s.escapes[escAt++ % s.escapes.length]
    const letters = [...text.matchAll(/[a-z]/g)].map((m) => m.index)
    if (n % 3 !== 0 || letters.length === 0) return text
    const at = letters[n % letters.length]
    return text.slice(0, at) + esc + text.slice(at)
  }
  const value = (w: Word): string => w.kind === 'lit' ? escaped(w.text) : wordText(w)
  const buildArgs: Record<string, string> = {}
  for (const [k, v] of s.buildArgs) buildArgs[k] = v
  /** Global ARGs whose last declaration has a value a FROM can stand on (a literal or a default). */
  const bound = new Map<string, boolean>()
  for (const g of s.globals) bound.set(g.name, g.value !== undefined && (g.value.kind === 'lit' || g.value.form === 'default'))
  for (const g of s.globals) instr(['ARG', g.value === undefined ? g.name : `${g.name}=${value(g.value)}`])
  // An ADD of the URL: its global ARG, last (a FROM does not stand on it).
  const urlNames = new Set<string>()
  for (const st of s.stages) for (const b of st.body) if (b.kind === 'addVar' && b.how === 'url') urlNames.add(b.name)
  for (const name of urlNames) { bound.set(name, false); instr(['ARG', `${name}=${pools.url}`]) }
  const boundNames = [...bound].filter(([, ok]) => ok).map(([name]) => name)
  const names: string[] = []
  s.stages.forEach((st, i) => {
    /** The base as text (`esc` as the lexer reads it back outside quotes), and whether it may stand in single quotes (no variable). */
    const plain = st.quote === 'none' ? escaped : (x: string): string => x
    let text: string
    let literal = true
    switch (st.from.kind) {
      case 'ref': text = plain(st.from.text); break
      case 'stage': text = names.length === 0 ? plain(st.from.text) : names[Math.max(0, names.length - 1 - st.from.back)]; break
      case 'bound': {
        literal = false
        if (boundNames.length === 0) { text = `\${X:-${st.from.word}}`; break }
        text = wordText({ kind: 'var', form: st.from.form, name: boundNames[i % boundNames.length], word: st.from.word })
        break
      }
      case 'default': text = wordText({ kind: 'var', form: 'default', name: st.from.name, word: st.from.word }); literal = false; break
      case 'odd': text = st.from.word.kind === 'lit' ? plain(st.from.word.text) : wordText(st.from.word); literal = st.from.word.kind === 'lit'; break
    }
    const quote = st.quote === 'single' && !literal ? 'double' : st.quote
    const from = ['FROM', quote === 'double' ? `"${text}"` : quote === 'single' ? `'${text}'` : text]
    const as = st.as !== undefined && !names.includes(st.as) ? st.as : undefined
    if (as !== undefined) from.push(i % 2 === 0 ? 'AS' : 'as', as)
    instr(from)
    const envs = new Set<string>()
    let k = 0
    for (const b of st.body) {
      k++
      switch (b.kind) {
        case 'arg': instr(['ARG', b.value === undefined ? b.name : `${b.name}=${value(b.value)}`]); break
        case 'env': envs.add(b.name); instr(b.form === 'eq' ? ['ENV', `${b.name}=${value(b.value)}`] : ['ENV', b.name, value(b.value)]); break
        case 'copyFrom': {
          let from: string
          switch (b.from.kind) {
            case 'stage': from = i === 0 ? b.from.text : String(b.from.index % i); break
            case 'named': from = names.length > 0 ? names[Math.max(0, names.length - 1 - b.from.back)] : i > 0 ? String(i - 1) : b.from.text; break
            // The stage being built, by its name (an id prefix: the builder takes the image), or an image.
            case 'current': from = as ?? b.from.text; break
            case 'word': from = b.from.text; break
          }
          instr(['COPY', `--from=${from}`, b.src, `/c${i}${k}`])
          break
        }
        case 'argStage': {
          const named = [...names, ...(as === undefined ? [] : [as])]
          instr(['ARG', `${b.name}=${named.length === 0 ? 'foo' : named[Math.max(0, named.length - 1 - b.back)]}`])
          break
        }
        case 'copyCtx': instr(['COPY', 'data.txt', `/d${i}${k}`]); break
        case 'label': instr(['LABEL', `stage${i}="a b"`]); break
        case 'addVar': {
          // The variable: not an ENV of this stage (an ENV wins over the ARG) nor a build argument (one overrides the ARG's default).
          const name = b.how === 'url' ? b.name : [b.name, ...VARS, 'F'].find((x) => !envs.has(x) && !(x in buildArgs))!
          if (b.how === 'arg') instr(['ARG', `${name}=data.txt`])
          // The canary's URL by a global ARG, taken up by a stage ARG without a value: the gateway refuses, the engine fetches.
          if (b.how === 'url') instr(['ARG', name])
          instr(['ADD', b.how === 'default' ? `\${${name}:-data.txt}` : `$${name}`, `/a${i}${k}`])
          break
        }
        case 'comment': lines.push('# just a comment'); break
      }
    }
    if (as !== undefined) names.push(as)
  })
  let text = lines.join('\n')
  // A continuation left open on the last line (the builder ends the instruction there).
  text += s.openLast ? ` ${esc}` : '\n'
  return { dockerfile: text, buildArgs }
}
