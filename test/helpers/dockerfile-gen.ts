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
 * spellings (`refs`) and the stage names (`stageNames`) to draw from.
 */
import fc from 'fast-check'

export interface GenPools {
  /** Image reference spellings: names, `sha256:` ids, bare ids and id prefixes, scratch. */
  readonly refs: readonly string[]
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

type Word = { kind: 'lit', text: string } | { kind: 'var', form: 'bare' | 'braced' | 'default' | 'alt', name: string, word: string }

interface Stage {
  from: Word
  quote: 'none' | 'double' | 'single'
  as?: string
  /** A variable FROM names the k-th global ARG's variable (most do: others are blank to the builder). */
  bind: boolean
  body: Body[]
}
type Body =
  | { kind: 'arg', name: string, value?: Word }
  | { kind: 'env', name: string, value: Word, form: 'eq' | 'space' }
  | { kind: 'copyFrom', from: { kind: 'stage', index: number } | { kind: 'current' } | { kind: 'word', word: Word }, src: string }
  | { kind: 'argStage', name: string, back: number }
  | { kind: 'copyCtx' }
  | { kind: 'label' }
  | { kind: 'addVar', name: string }
  | { kind: 'comment' }

interface Spec {
  escape: '\\' | '`'
  directive: boolean
  globals: Array<{ name: string, value?: Word }>
  stages: Stage[]
  buildArgs: Array<[string, Word]>
  /** Between tokens: 0 a space, 1 a continuation, 2 a continuation then a comment line, 3 a continuation then an empty line. */
  joins: number[]
  openLast: boolean
  escapes: number[]
}

export function dockerfileCase (pools: GenPools): fc.Arbitrary<GenCase> {
  const varName = fc.constantFrom(...VARS)
  const literal = fc.oneof(
    { weight: 6, arbitrary: fc.constantFrom(...pools.refs) },
    { weight: 2, arbitrary: fc.constantFrom(...pools.stageNames) },
    { weight: 1, arbitrary: fc.constant(pools.url) }
  )
  const word: fc.Arbitrary<Word> = fc.oneof(
    { weight: 3, arbitrary: literal.map((text): Word => ({ kind: 'lit', text })) },
    {
      weight: 4,
      arbitrary: fc.record({ form: fc.constantFrom('bare', 'braced', 'default', 'alt') as fc.Arbitrary<'bare' | 'braced' | 'default' | 'alt'>, name: varName, word: literal })
        .map((v): Word => ({ kind: 'var', ...v })),
    }
  )
  const stageIndex = fc.nat({ max: 3 })
  const body: fc.Arbitrary<Body> = fc.oneof(
    { weight: 4, arbitrary: fc.record({ name: varName, value: fc.option(word, { nil: undefined, freq: 3 }) }).map((a): Body => ({ kind: 'arg', ...a })) },
    { weight: 2, arbitrary: fc.record({ name: varName, value: word, form: fc.constantFrom('eq', 'space') as fc.Arbitrary<'eq' | 'space'> }).map((e): Body => ({ kind: 'env', ...e })) },
    {
      weight: 4,
      arbitrary: fc.record({
        from: fc.oneof(
          stageIndex.map((index) => ({ kind: 'stage' as const, index })),
          fc.constant({ kind: 'current' as const }),
          literal.map((text) => ({ kind: 'word' as const, word: { kind: 'lit', text } as Word })),
          fc.constantFrom(...pools.stageNames).map((text) => ({ kind: 'word' as const, word: { kind: 'lit', text } as Word }))
        ),
        src: fc.constantFrom('/etc', '/etc', '/etc/marker'),
      }).map((c): Body => ({ kind: 'copyFrom', ...c })),
    },
    // A stage ARG whose value is a stage's name (this one's or an earlier one's): the ARG-scope confusion.
    { weight: 2, arbitrary: fc.record({ name: varName, back: fc.nat({ max: 2 }) }).map((a): Body => ({ kind: 'argStage', ...a })) },
    { weight: 1, arbitrary: fc.constant<Body>({ kind: 'copyCtx' }) },
    { weight: 1, arbitrary: fc.constant<Body>({ kind: 'label' }) },
    { weight: 1, arbitrary: varName.map((name): Body => ({ kind: 'addVar', name })) },
    { weight: 1, arbitrary: fc.constant<Body>({ kind: 'comment' }) }
  )
  const stage: fc.Arbitrary<Stage> = fc.record({
    from: word,
    quote: fc.constantFrom('none', 'none', 'none', 'none', 'none', 'double', 'single') as fc.Arbitrary<'none' | 'double' | 'single'>,
    as: fc.option(fc.constantFrom(...pools.stageNames), { nil: undefined, freq: 2 }),
    bind: fc.constantFrom(true, true, true, false),
    body: fc.array(body, { maxLength: 4 }),
  })
  const spec: fc.Arbitrary<Spec> = fc.record({
    escape: fc.constantFrom('\\', '\\', '`') as fc.Arbitrary<'\\' | '`'>,
    directive: fc.boolean(),
    globals: fc.array(fc.record({ name: varName, value: fc.option(word, { nil: undefined, freq: 6 }) }), { minLength: 1, maxLength: 4 }),
    stages: fc.array(stage, { minLength: 1, maxLength: 3 }),
    buildArgs: fc.array(fc.tuple(varName, word), { maxLength: 2 }),
    joins: fc.array(fc.constantFrom(0, 0, 0, 0, 0, 0, 1, 2, 3), { minLength: 8, maxLength: 8 }),
    openLast: fc.boolean(),
    escapes: fc.array(fc.nat({ max: 40 }), { maxLength: 2 }),
  })
  return spec.map(render)
}

/** A word as Dockerfile text (with `esc` as the escape character), its variable forms spelled out. */
function wordText (w: Word): string {
  if (w.kind === 'lit') return w.text
  switch (w.form) {
    case 'bare': return `$${w.name}`
    case 'braced': return `\${${w.name}}`
    case 'default': return `\${${w.name}:-${w.word}}`
    case 'alt': return `\${${w.name}:+${w.word}}`
  }
}

/** A literal word (a build arg's value: no variables are substituted in those) as the builder would get it. */
function wordValue (w: Word): string {
  return w.kind === 'lit' ? w.text : wordText(w)
}

function render (s: Spec): GenCase {
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
  /** A literal word with an escape character put before one of its letters (the lexer drops it). */
  const escaped = (text: string): string => {
    if (s.escapes.length === 0) return text
    const n = s.escapes[escAt++ % s.escapes.length]
    const letters = [...text.matchAll(/[a-z]/g)].map((m) => m.index)
    if (n % 3 !== 0 || letters.length === 0) return text
    const at = letters[n % letters.length]
    return text.slice(0, at) + esc + text.slice(at)
  }
  const value = (w: Word): string => w.kind === 'lit' ? escaped(w.text) : wordText(w)
  const quoted = (text: string, q: 'none' | 'double' | 'single'): string => q === 'double' ? `"${text}"` : q === 'single' ? `'${text}'` : text
  for (const g of s.globals) instr(['ARG', g.value === undefined ? g.name : `${g.name}=${value(g.value)}`])
  s.stages.forEach((st, i) => {
    const g = s.globals[i % Math.max(1, s.globals.length)]
    const fromWord: Word = st.bind && st.from.kind === 'var' && g !== undefined ? { ...st.from, name: g.name } : st.from
    const from = ['FROM', quoted(value(fromWord), st.quote)]
    if (st.as !== undefined) from.push(i % 2 === 0 ? 'AS' : 'as', st.as)
    instr(from)
    let k = 0
    for (const b of st.body) {
      k++
      switch (b.kind) {
        case 'arg': instr(['ARG', b.value === undefined ? b.name : `${b.name}=${value(b.value)}`]); break
        case 'env': instr(b.form === 'eq' ? ['ENV', `${b.name}=${value(b.value)}`] : ['ENV', b.name, value(b.value)]); break
        case 'copyFrom': {
          const from = b.from.kind === 'stage' ? String(b.from.index % Math.max(1, i)) : b.from.kind === 'current' ? (st.as ?? String(i)) : value(b.from.word)
          instr(['COPY', `--from=${from}`, b.src, `/c${i}${k}`])
          break
        }
        case 'argStage': {
          const named = s.stages.slice(0, i + 1).map((x) => x.as).filter((x) => x !== undefined)
          instr(['ARG', `${b.name}=${named.length === 0 ? 'foo' : named[Math.max(0, named.length - 1 - b.back)]}`])
          break
        }
        case 'copyCtx': instr(['COPY', 'data.txt', `/d${i}${k}`]); break
        case 'label': instr(['LABEL', `stage${i}="a b"`]); break
        case 'addVar': instr(['ADD', `$${b.name}`, `/a${i}${k}`]); break
        case 'comment': lines.push('# just a comment'); break
      }
    }
  })
  let text = lines.join('\n')
  // A continuation left open on the last line (the builder ends the instruction there).
  text += s.openLast ? ` ${esc}` : '\n'
  const buildArgs: Record<string, string> = {}
  for (const [k, v] of s.buildArgs) buildArgs[k] = wordValue(v)
  return { dockerfile: text, buildArgs }
}
