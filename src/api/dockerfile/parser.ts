/**
 * A Dockerfile split into instructions as the classic builder splits it: a port of
 * moby/buildkit frontend/dockerfile/parser (parser.go, line_parsers.go,
 * split_command.go) at the version dockerd 20.10 vendors (v0.8): parser directives
 * (`# escape=`), line continuations (the escape token as the last non-blank character,
 * comment and blank lines inside a continuation skipped), comments, builder flags
 * (`--from=...`), and each instruction's own argument syntax (words with quotes kept,
 * `key=value` pairs, JSON arrays, plain strings, ONBUILD's sub-instruction).
 *
 * Nothing here substitutes variables or removes quotes: that is the lexer's (lex.ts),
 * run on the arguments later, as the builder runs it.
 */
import { DockerfileError, isSpace } from './lex'

export interface Node {
  /** The instruction, lower case (`from`, `copy`...). */
  readonly cmd: string
  /** The whole logical line, continuations joined (`Original`). */
  readonly original: string
  /** Builder flags (`--from=x`) as extractBuilderFlags leaves them. */
  readonly flags: readonly string[]
  /** The text after the flags (trimmed): what the instruction's line parser read. */
  readonly rest: string
  /** The arguments (nodeArgs): words, pairs flattened key, value, key, value... */
  readonly args: readonly string[]
  /** JSON array form. */
  readonly json: boolean
  /** ONBUILD's instruction. */
  readonly sub?: Node
  /** Lines in the file, 1-based, first and last. */
  readonly startLine: number
  readonly endLine: number
}

export interface ParseResult {
  readonly nodes: readonly Node[]
  readonly escape: string
}

/** bufio.Scanner's limit: a longer line fails the build. */
const MAX_LINE = 64 * 1024 - 1
const WHITESPACE = /[\t\v\f\r ]+/
/** Go's `\s` is ASCII: tab, newline, form feed, carriage return, space. */
const DIRECTIVE = /^#[\t\n\f\r ]*([a-zA-Z][a-zA-Z0-9]*)[\t\n\f\r ]*=[\t\n\f\r ]*(.+?)[\t\n\f\r ]*$/s

function trimLeft (s: string): string {
  let i = 0
  while (i < s.length) {
    const cp = s.codePointAt(i)!
    if (!isSpace(cp)) break
    i += cp > 0xffff ? 2 : 1
  }
  return s.slice(i)
}

/** Go's strings.TrimSpace. */
export function trimSpace (s: string): string {
  const l = trimLeft(s)
  let j = l.length
  while (j > 0) {
    const lo = l.charCodeAt(j - 1)
    const cp = lo >= 0xdc00 && lo <= 0xdfff && j >= 2 ? l.codePointAt(j - 2)! : lo
    if (!isSpace(cp)) break
    j -= cp > 0xffff ? 2 : 1
  }
  return l.slice(0, j)
}

class Directives {
  escape = '\\'
  continuation = Directives.continuationFor('\\')
  done = false
  readonly seen = new Set<string>()

  static continuationFor (e: string): RegExp {
    const q = '\\' + e
    return new RegExp(`([^${q}])${q}[ \\t]*$|^${q}[ \\t]*$`, 's')
  }

  possible (line: string): void {
    if (this.done) return
    const m = DIRECTIVE.exec(line)
    if (m === null) { this.done = true; return }
    const k = m[1].toLowerCase()
    if (k !== 'escape' && k !== 'syntax') { this.done = true; return }
    if (this.seen.has(k)) throw new DockerfileError(`only one ${k} parser directive can be used`)
    this.seen.add(k)
    if (k === 'escape') {
      if (m[2] !== '`' && m[2] !== '\\') throw new DockerfileError(`invalid escape token '${m[2]}' does not match \` or \\`)
      this.escape = m[2]
      this.continuation = Directives.continuationFor(m[2])
    }
  }
}

function isComment (line: string): boolean {
  return trimLeft(line).startsWith('#')
}

/** Lines as bufio.ScanLines gives them: split at \n, one trailing \r dropped, no empty last line. */
function scanLines (text: string): string[] {
  const lines = text.split('\n')
  if (lines[lines.length - 1] === '') lines.pop()
  return lines.map((l) => {
    const line = l.endsWith('\r') ? l.slice(0, -1) : l
    if (Buffer.byteLength(line) > MAX_LINE) throw new DockerfileError(`dockerfile line greater than max allowed size of ${MAX_LINE}`)
    return line
  })
}

/** Parses a Dockerfile (parser.Parse). */
export function parse (text: string): ParseResult {
  const d = new Directives()
  const lines = scanLines(text)
  const nodes: Node[] = []
  let i = 0
  const processLine = (raw: string, stripLeft: boolean): string => {
    const token = stripLeft ? trimLeft(raw) : raw
    d.possible(token)
    return token.startsWith('#') ? '' : token
  }
  const trimContinuation = (line: string): [string, boolean] => {
    if (d.continuation.test(line)) return [line.replace(d.continuation, '$1'), false]
    return [line, true]
  }
  while (i < lines.length) {
    let first = lines[i]
    if (i === 0 && first.startsWith('\ufeff')) first = first.slice(1)
    const bytes = processLine(first, true)
    i++
    const startLine = i
    let [line, end] = trimContinuation(bytes)
    if (end && line === '') continue
    while (!end && i < lines.length) {
      const raw = lines[i]
      const cont = processLine(raw, false)
      i++
      if (isComment(raw)) continue
      if (trimLeft(cont).length === 0) continue
      const [piece, e] = trimContinuation(cont)
      line += piece
      end = e
    }
    nodes.push(nodeFromLine(line, d.escape, startLine, i))
  }
  if (nodes.length === 0) throw new DockerfileError('file with no instructions')
  return { nodes, escape: d.escape }
}

type LineParser = (rest: string, escape: string) => { args: string[], json: boolean, sub?: Node }

const LINE_PARSERS: Record<string, LineParser> = {
  add: maybeJSONToList,
  arg: nameOrNameVal,
  cmd: maybeJSON,
  copy: maybeJSONToList,
  entrypoint: maybeJSON,
  env: nameVal,
  expose: whitespaceDelimited,
  from: whitespaceDelimited,
  healthcheck: healthConfig,
  label: nameVal,
  maintainer: plainString,
  run: maybeJSON,
  shell: maybeJSON,
  stopsignal: plainString,
  user: plainString,
  volume: maybeJSONToList,
  workdir: plainString,
}

function nodeFromLine (line: string, escape: string, startLine: number, endLine: number): Node {
  const [cmd, flags, rest] = splitCommand(line)
  let parsed: { args: string[], json: boolean, sub?: Node }
  if (cmd === 'onbuild') {
    const sub = rest === '' ? undefined : nodeFromLine(rest, escape, startLine, endLine)
    parsed = { args: sub ? [sub.cmd, ...sub.args] : [], json: false, ...(sub ? { sub } : {}) }
  } else {
    // An instruction the parser does not know keeps no arguments (parseIgnore); the
    // instruction step then fails the build with "unknown instruction".
    parsed = (LINE_PARSERS[cmd] ?? (() => ({ args: [], json: false })))(rest, escape)
  }
  return { cmd, original: line, flags, rest, args: parsed.args, json: parsed.json, ...(parsed.sub ? { sub: parsed.sub } : {}), startLine, endLine }
}

function splitCommand (line: string): [string, string[], string] {
  const trimmed = trimSpace(line)
  const m = WHITESPACE.exec(trimmed)
  const cmd = (m === null ? trimmed : trimmed.slice(0, m.index)).toLowerCase()
  if (m === null) return [cmd, [], '']
  const [args, flags] = extractBuilderFlags(trimmed.slice(m.index + m[0].length))
  return [cmd, flags, trimSpace(args)]
}

/**
 * Leading `--flag` words (extractBuilderFlags). The builder walks the line byte by byte
 * here, so a non-ASCII character in a flag is split where the gateway would not: such a
 * flag is refused rather than guessed.
 */
function extractBuilderFlags (line: string): [string, string[]] {
  const words: string[] = []
  let phase: 'spaces' | 'word' | 'quote' = 'spaces'
  let word = ''
  let quote = ''
  let blankOK = false
  for (let pos = 0; pos <= line.length; pos++) {
    let ch = pos < line.length ? line[pos] : ''
    if (phase === 'spaces') {
      if (pos === line.length) break
      if (isSpace(ch.charCodeAt(0))) continue
      if (ch !== '-' || pos + 1 === line.length || line[pos + 1] !== '-') return [line.slice(pos), words]
      phase = 'word'
    }
    if (ch.charCodeAt(0) > 0x7f) throw new DockerfileError(`a builder flag holds the non-ASCII character ${JSON.stringify(ch)}: the builder reads flags byte by byte`)
    if (pos === line.length) {
      if (word !== '--' && (blankOK || word.length > 0)) words.push(word)
      break
    }
    if (phase === 'word') {
      if (isSpace(ch.charCodeAt(0))) {
        phase = 'spaces'
        if (word === '--') return [line.slice(pos), words]
        if (blankOK || word.length > 0) words.push(word)
        word = ''
        blankOK = false
        continue
      }
      if (ch === "'" || ch === '"') { quote = ch; blankOK = true; phase = 'quote'; continue }
      if (ch === '\\') {
        if (pos + 1 === line.length) continue
        ch = line[++pos]
        if (ch.charCodeAt(0) > 0x7f) throw new DockerfileError(`a builder flag holds the non-ASCII character ${JSON.stringify(ch)}: the builder reads flags byte by byte`)
      }
      word += ch
      continue
    }
    // In quotes.
    if (ch === quote) { phase = 'word'; continue }
    if (ch === '\\') {
      if (pos + 1 === line.length) { phase = 'word'; continue }
      ch = line[++pos]
      if (ch.charCodeAt(0) > 0x7f) throw new DockerfileError(`a builder flag holds the non-ASCII character ${JSON.stringify(ch)}: the builder reads flags byte by byte`)
    }
    word += ch
  }
  return ['', words]
}

/** Words, quotes and escapes kept (parseWords). */
export function parseWords (rest: string, escape: string): string[] {
  const words: string[] = []
  let phase: 'spaces' | 'word' | 'quote' = 'spaces'
  let word = ''
  let quote = ''
  let blankOK = false
  const cps = Array.from(rest)
  for (let pos = 0; pos <= cps.length; pos++) {
    let ch = pos < cps.length ? cps[pos] : ''
    if (phase === 'spaces') {
      if (pos === cps.length) break
      if (isSpace(ch.codePointAt(0)!)) continue
      phase = 'word'
    }
    if (pos === cps.length) {
      if (blankOK || word.length > 0) words.push(word)
      break
    }
    if (phase === 'word') {
      if (isSpace(ch.codePointAt(0)!)) {
        phase = 'spaces'
        if (blankOK || word.length > 0) words.push(word)
        word = ''
        blankOK = false
        continue
      }
      if (ch === "'" || ch === '"') { quote = ch; blankOK = true; phase = 'quote' }
      if (ch === escape) {
        if (pos + 1 === cps.length) continue
        word += ch
        ch = cps[++pos]
      }
      word += ch
      continue
    }
    if (ch === quote) phase = 'word'
    if (ch === escape && quote !== "'") {
      if (pos + 1 === cps.length) { phase = 'word'; continue }
      word += ch
      ch = cps[++pos]
    }
    word += ch
  }
  return words
}

/** ENV and LABEL: `key value` (old form) or `key=value ...` (parseNameVal); args are key, value, key, value... */
function nameVal (rest: string, escape: string): { args: string[], json: boolean } {
  const words = parseWords(rest, escape)
  if (words.length === 0) return { args: [], json: false }
  if (!words[0].includes('=')) {
    const m = WHITESPACE.exec(rest)
    if (m === null) throw new DockerfileError('must have two arguments')
    return { args: [rest.slice(0, m.index), rest.slice(m.index + m[0].length)], json: false }
  }
  const args: string[] = []
  for (const w of words) {
    const eq = w.indexOf('=')
    if (eq < 0) throw new DockerfileError(`Syntax error - can't find = in ${JSON.stringify(w)}. Must be of the form: name=value`)
    args.push(w.slice(0, eq), w.slice(eq + 1))
  }
  return { args, json: false }
}

function nameOrNameVal (rest: string, escape: string): { args: string[], json: boolean } {
  return { args: parseWords(rest, escape), json: false }
}

function whitespaceDelimited (rest: string): { args: string[], json: boolean } {
  return { args: rest === '' ? [] : rest.split(WHITESPACE), json: false }
}

function plainString (rest: string): { args: string[], json: boolean } {
  return { args: rest === '' ? [] : [rest], json: false }
}

class NotStringArray extends DockerfileError {}

/**
 * A JSON array of strings at the start of `rest` (parseJSON: Go's json.Decoder reads
 * the first value and ignores what follows it); null when it is not one.
 */
function json (rest: string): string[] | null {
  const text = trimLeft(rest)
  if (!text.startsWith('[')) return null
  const end = firstValueEnd(text)
  if (end < 0) return null
  let v: unknown
  try { v = JSON.parse(text.slice(0, end)) } catch { return null }
  if (!Array.isArray(v)) return null
  if (!v.every((x) => typeof x === 'string')) throw new NotStringArray('when using JSON array syntax, arrays must be comprised of strings only')
  // Go's decoder reads an unpaired surrogate escape as U+FFFD; JSON.parse keeps it.
  return v.map((s: string) => s.replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, '\ufffd'))
}

/** Where the JSON value that starts `text` with `[` ends, brackets and strings followed; -1 when it does not. */
function firstValueEnd (text: string): number {
  let depth = 0
  for (let i = 0; i < text.length; i++) {
    const c = text[i]
    if (c === '"') {
      for (i++; i < text.length && text[i] !== '"'; i++) if (text[i] === '\\') i++
      if (i >= text.length) return -1
    } else if (c === '[' || c === '{') {
      depth++
    } else if (c === ']' || c === '}') {
      if (--depth === 0) return i + 1
    }
  }
  return -1
}

function maybeJSON (rest: string): { args: string[], json: boolean } {
  if (rest === '') return { args: [], json: false }
  const j = json(rest)
  return j === null ? { args: [rest], json: false } : { args: j, json: true }
}

function maybeJSONToList (rest: string): { args: string[], json: boolean } {
  const j = json(rest)
  return j === null ? whitespaceDelimited(rest) : { args: j, json: true }
}

function healthConfig (rest: string): { args: string[], json: boolean } {
  let sep = 0
  while (sep < rest.length && !isSpace(rest.charCodeAt(sep))) sep++
  let next = sep
  while (next < rest.length && isSpace(rest.charCodeAt(next))) next++
  if (sep === 0) return { args: [], json: false }
  const cmd = maybeJSON(rest.slice(next))
  return { args: [rest.slice(0, sep), ...cmd.args], json: cmd.json }
}
