/**
 * Variable substitution and quote removal in a Dockerfile word, as the classic builder
 * does it: a port of moby/buildkit frontend/dockerfile/shell/lex.go at the version
 * dockerd 20.10 vendors (v0.8). `$X`, `${X}`, `${X:-w}`, `${X:+w}`, `${X?w}`,
 * `${X:?w}`, single quotes (literal), double quotes (with `$` expanded and the escape
 * token quoting `"`, `$` and itself), and the escape token (`\` or, with the
 * `# escape=` directive, a backtick) outside quotes.
 *
 * Every difference from the builder's reading is a way to make the gateway judge one
 * name while the engine uses another: change this file only against lex.go, and keep
 * test/dockerfile-parse.test.ts's cases passing.
 */

/** A failure the builder reports too (the build fails there): the gateway refuses the build. */
export class DockerfileError extends Error {}

/** What a word came to: its value, and the variables it read (set or not). */
export interface Processed {
  readonly value: string
  readonly words: string[]
  readonly vars: readonly string[]
}

/**
 * Variables as the builder hands them to the lexer (BuildEnvs): `KEY=value` strings,
 * a later one replacing an earlier one of the same key; an entry without `=` is an
 * empty variable. Keys compare exactly (EqualEnvKeys on Linux).
 */
export function buildEnvs (env: readonly string[]): Map<string, string> {
  const m = new Map<string, string>()
  for (const e of env) {
    const i = e.indexOf('=')
    if (i < 0) m.set(e, '')
    else m.set(e.slice(0, i), e.slice(i + 1))
  }
  return m
}

const EOF = -1

/** Go's unicode.IsSpace. */
export function isSpace (cp: number): boolean {
  if (cp <= 0xff) return cp === 0x20 || (cp >= 0x09 && cp <= 0x0d) || cp === 0x85 || cp === 0xa0
  return cp === 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp === 0x2028 || cp === 0x2029 || cp === 0x202f || cp === 0x205f || cp === 0x3000
}

function isDigit (cp: number): boolean {
  return /^\p{Nd}$/u.test(String.fromCodePoint(cp))
}

function isLetter (cp: number): boolean {
  return /^\p{L}$/u.test(String.fromCodePoint(cp))
}

const SPECIAL_PARAMS = new Set(['@', '*', '#', '?', '-', '$', '!', '0'].map((c) => c.codePointAt(0)!))

class Words {
  word = ''
  words: string[] = []
  inWord = false
  addChar (ch: number): void {
    if (isSpace(ch) && this.inWord) {
      if (this.word.length !== 0) {
        this.words.push(this.word)
        this.word = ''
        this.inWord = false
      }
    } else if (!isSpace(ch)) {
      this.addRawChar(ch)
    }
  }

  addRawChar (ch: number): void {
    this.word += String.fromCodePoint(ch)
    this.inWord = true
  }

  addString (s: string): void {
    for (const c of s) this.addChar(c.codePointAt(0)!)
  }

  addRawString (s: string): void {
    this.word += s
    this.inWord = true
  }

  get (): string[] {
    if (this.word.length > 0) {
      this.words.push(this.word)
      this.word = ''
      this.inWord = false
    }
    return this.words
  }
}

/**
 * One word processed as shell.Lex.process does. Go's text/scanner reads the word by
 * code point and skips a byte order mark at its start.
 */
class ShellWord {
  private readonly cps: number[]
  private pos = 0
  readonly vars: string[] = []
  constructor (word: string, private readonly env: ReadonlyMap<string, string>, private readonly escape: number) {
    this.cps = Array.from(word, (c) => c.codePointAt(0)!)
    if (this.cps[0] === 0xfeff) this.pos = 1
  }

  private peek (): number { return this.pos < this.cps.length ? this.cps[this.pos] : EOF }
  private next (): number { return this.pos < this.cps.length ? this.cps[this.pos++] : EOF }

  private getEnv (name: string): [string, boolean] {
    this.vars.push(name)
    const v = this.env.get(name)
    return v === undefined ? ['', false] : [v, true]
  }

  processStopOn (stop: number): [string, string[]] {
    let result = ''
    const words = new Words()
    while (this.peek() !== EOF) {
      let ch = this.peek()
      if (stop !== EOF && ch === stop) {
        this.next()
        return [result, words.get()]
      }
      if (ch === 0x27 || ch === 0x22 || ch === 0x24) {
        const tmp = ch === 0x27 ? this.singleQuote() : ch === 0x22 ? this.doubleQuote() : this.dollar()
        result += tmp
        if (ch === 0x24) words.addString(tmp)
        else words.addRawString(tmp)
        continue
      }
      ch = this.next()
      if (ch === this.escape) {
        // The escape token escapes the next character; at the end of the word it is dropped.
        ch = this.next()
        if (ch === EOF) break
        words.addRawChar(ch)
      } else {
        words.addChar(ch)
      }
      result += String.fromCodePoint(ch)
    }
    if (stop !== EOF) throw new DockerfileError(`unexpected end of statement while looking for matching ${String.fromCodePoint(stop)}`)
    return [result, words.get()]
  }

  private singleQuote (): string {
    let result = ''
    this.next()
    for (;;) {
      const ch = this.next()
      if (ch === EOF) throw new DockerfileError('unexpected end of statement while looking for matching single-quote')
      if (ch === 0x27) return result
      result += String.fromCodePoint(ch)
    }
  }

  private doubleQuote (): string {
    let result = ''
    this.next()
    for (;;) {
      const p = this.peek()
      if (p === EOF) throw new DockerfileError('unexpected end of statement while looking for matching double-quote')
      if (p === 0x22) { this.next(); return result }
      if (p === 0x24) { result += this.dollar(); continue }
      let ch = this.next()
      if (ch === this.escape) {
        const q = this.peek()
        if (q === EOF) continue
        if (q === 0x22 || q === 0x24 || q === this.escape) ch = this.next()
      }
      result += String.fromCodePoint(ch)
    }
  }

  private dollar (): string {
    this.next()
    if (this.peek() !== 0x7b) {
      const name = this.name()
      if (name === '') return '$'
      return this.getEnv(name)[0]
    }
    this.next()
    const p = this.peek()
    if (p === EOF) throw new DockerfileError("syntax error: missing '}'")
    if (p === 0x7b || p === 0x7d || p === 0x3a) throw new DockerfileError('syntax error: bad substitution')
    const name = this.name()
    const ch = this.next()
    if (ch === 0x7d) return this.getEnv(name)[0]
    if (ch === 0x3f) {
      const word = this.stopWord()
      const [value, found] = this.getEnv(name)
      if (!found) throw new DockerfileError(`${name}: ${word !== '' ? word : 'is not allowed to be unset'}`)
      return value
    }
    if (ch === 0x3a) {
      const modifier = this.next()
      const word = this.stopWord()
      const [value, found] = this.getEnv(name)
      if (modifier === 0x2b) return value !== '' ? word : value
      if (modifier === 0x2d) return value === '' ? word : value
      if (modifier === 0x3f) {
        if (!found) throw new DockerfileError(`${name}: ${word !== '' ? word : 'is not allowed to be unset'}`)
        if (value === '') throw new DockerfileError(`${name}: ${word !== '' ? word : 'is not allowed to be empty'}`)
        return value
      }
      throw new DockerfileError(`unsupported modifier (${modifier === EOF ? 'EOF' : String.fromCodePoint(modifier)}) in substitution`)
    }
    throw new DockerfileError("missing ':' in substitution")
  }

  /** The word of a `${X:-word}` form, up to its closing brace. */
  private stopWord (): string {
    try {
      return this.processStopOn(0x7d)[0]
    } catch (err) {
      if (this.peek() === EOF) throw new DockerfileError("syntax error: missing '}'")
      throw err
    }
  }

  private name (): string {
    let name = ''
    while (this.peek() !== EOF) {
      const ch = this.peek()
      if (name.length === 0 && isDigit(ch)) {
        while (this.peek() !== EOF && isDigit(this.peek())) name += String.fromCodePoint(this.next())
        return name
      }
      if (name.length === 0 && SPECIAL_PARAMS.has(ch)) return String.fromCodePoint(this.next())
      if (!isLetter(ch) && !isDigit(ch) && ch !== 0x5f) break
      name += String.fromCodePoint(this.next())
    }
    return name
  }
}

/** `word` with its variables substituted from `env` and its quotes and escapes removed (Lex.ProcessWord / ProcessWords). */
export function processWord (word: string, env: ReadonlyMap<string, string>, escape: string): Processed {
  const sw = new ShellWord(word, env, escape.codePointAt(0)!)
  try {
    const [value, words] = sw.processStopOn(EOF)
    return { value, words, vars: sw.vars }
  } catch (err) {
    if (err instanceof DockerfileError) throw new DockerfileError(`failed to process ${JSON.stringify(word)}: ${err.message}`)
    throw err
  }
}

/**
 * `value` written as a word that processWord reads back as `value` whatever the
 * variables: each character the lexer treats specially, and the escape token itself,
 * escaped by the escape token.
 */
export function literalWord (value: string, escape: string): string {
  let out = ''
  for (const c of value) out += c === '$' || c === '"' || c === "'" || c === escape ? escape + c : c
  return out
}
