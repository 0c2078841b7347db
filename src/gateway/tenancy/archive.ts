/**
 * `docker load` for tenants. An image archive (what `docker save` writes: the image
 * configs, the layers, `manifest.json` naming each image's config, layers and tags, and
 * the legacy `repositories`) is rewritten on its way to the engine, entry by entry as
 * it arrives; only small JSON files are held, never the layers:
 *
 *   - every entry is read by the gateway and written again with a header of its own
 *     (ustar, PAX records for long names and sizes), so the engine's tar reader sees
 *     exactly the entries the gateway read, at clean paths;
 *   - the archive's own `manifest.json`, `repositories`, `index.json` and `oci-layout`
 *     are never passed on: they are what names images and tags;
 *   - every tag (manifest.json `RepoTags`, `repositories`) must pass `checkTag` (the
 *     tenant's namespace);
 *   - each image's config gets the owner labels (`config.Labels`), which gives it a new
 *     digest, hence a new image id, unless it already carries exactly these labels: the
 *     loaded image is the tenant's, as a built or committed one, and can never be an
 *     image of the shared catalog or of another tenant (those have other labels, so
 *     other ids). The configs are written again under the gateway's own names after the
 *     archive's entries, followed by a `manifest.json` of the gateway's own naming them
 *     with the checked tags and the archive's layer paths (a layer's content is checked
 *     by the engine against the config's diff ids), without the legacy `Parent` links.
 *
 * A refusal is thrown before the end of the upload reaches the engine: the engine's tar
 * reader then fails on the cut request and loads nothing (and it never saw a manifest).
 *
 * Accepted input: tar (ustar, GNU or PAX headers), or tar compressed with gzip; regular
 * files, directories and symbolic links (docker save links repeated layers). The engine
 * (Go's archive/tar and the daemon's untar) is followed where it differs from a naive
 * reader: header-only types carry no data whatever their size field, a PAX `size`
 * overrides the header's, names are cleaned as filepath.Clean would, the first of two
 * zero blocks ends the archive, and JSON object keys match struct fields ignoring case.
 */
import { createHash } from 'node:crypto'
import path from 'node:path'
import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { createGunzip } from 'node:zlib'
import { decodeBody, encodeBody, isJsonNumber } from '../../api/body/decode'
import { GatewayError } from '../../api/errors'
import type { BodyFilter } from './call'
import { TenancyRefusal } from './refusal'
import { BLOCK, padding, writeHeader } from './tar'

export { BLOCK, padding } from './tar'

export interface ArchiveScope {
  /** Checks one of the archive's tags (`team-a/app:1`); throws the refusal. */
  readonly checkTag: (ref: string) => void
  /** The engine's name for a checked tag (per-tenant image names: names.ts); the tag itself when absent. */
  readonly engineTag?: (ref: string) => string
  /** The labels every loaded image's config gets. */
  readonly labels: Readonly<Record<string, string>>
  /** Judges the ONBUILD triggers an image config stores (`config.OnBuild`); throws the refusal. */
  readonly checkTriggers?: (triggers: readonly string[]) => Promise<void>
}

/** An image config is a few KiB; configs (and other JSON files) are held up to this size each... */
const HELD_FILE_MAX = 1 << 20
/** ...and this much together. A config that was not held is refused. */
const HELD_MAX = 64 << 20
const MANIFEST_MAX = 16 << 20
const REPOSITORIES_MAX = 1 << 20
/** PAX records and GNU long names. */
const META_MAX = 1 << 20
/** What may follow the end of the archive (tar writers pad to a record size). */
const TRAILING_MAX = 1 << 20

/** The files that name images and tags: never passed on from the client. */
const RESERVED = new Set(['manifest.json', 'repositories', 'index.json', 'oci-layout'])

export function scopeArchive (scope: ArchiveScope): BodyFilter {
  return (source) => rewrite(source, scope)
}

/**
 * Something that is not a readable archive. The engine answers a load it cannot read
 * with `200` and its streamed error record (moby postImagesLoad writes
 * `streamformatter.FormatError` into the JSON stream it has begun, quiet or not), and
 * clients read it there (docker-py raises ImageLoadError from the stream, the CLI prints
 * it): the gateway's refusal takes the same form, with its own reason.
 */
/** `engineText`: what the engine streams for the same body, where it is known (dockerd 20.10's untar). */
function invalid (message: string, engineText?: string): GatewayError {
  const text = `invalid image archive: ${message}`
  const shown = engineText ?? text
  const body = JSON.stringify({ errorDetail: { message: shown }, error: shown }) + '\r\n'
  return new GatewayError('BODY_INVALID', text, { answer: { status: 200, body } })
}

function unsupported (message: string): TenancyRefusal {
  return new TenancyRefusal('FORBIDDEN', `image archive refused: ${message} (rule image-archive)`, 'image-archive')
}

async function * rewrite (source: AsyncIterable<Buffer>, scope: ArchiveScope): AsyncGenerator<Buffer> {
  const input = new Bytes(await decompressed(source))
  const held = new Map<string, Buffer>()
  let heldBytes = 0
  let manifest: Buffer | undefined
  let repositories: Buffer | undefined
  let pax: Map<string, string> | undefined
  let longName: string | undefined
  let longLink: string | undefined

  for (;;) {
    const h = await input.block(BLOCK)
    if (h === null) break // Go's reader takes a clean end at a header boundary as the end of the archive
    if (isZero(h)) {
      const next = await input.block(BLOCK)
      if (next !== null && !isZero(next)) throw invalid('a zero block inside the archive')
      break
    }
    const head = parseHeader(h)
    const type = head.type
    if (type === 'x') {
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
    let name = head.name
    let linkname = head.linkname
    let size = head.size
    if (pax) {
      for (const k of pax.keys()) if (k.startsWith('GNU.sparse.')) throw unsupported('sparse files')
      if (pax.has('path')) name = pax.get('path')!
      if (pax.has('linkpath')) linkname = pax.get('linkpath')!
      if (pax.has('size')) {
        const v = pax.get('size')!
        if (!/^\d+$/.test(v) || !Number.isSafeInteger(Number(v))) throw invalid(`PAX size ${JSON.stringify(v)}`)
        size = Number(v)
      }
    }
    if (longName !== undefined) name = longName
    if (longLink !== undefined) linkname = longLink
    pax = undefined
    longName = undefined
    longLink = undefined

    let kind: 'file' | 'dir' | 'symlink'
    if (type === '0' || type === '\0') kind = type === '\0' && name.endsWith('/') ? 'dir' : 'file'
    else if (type === '5') kind = 'dir'
    else if (type === '2') kind = 'symlink'
    else throw unsupported(`entry ${JSON.stringify(name)} is of tar type ${JSON.stringify(type)}: only files, directories and symbolic links are loaded`)
    // Header-only types carry no data, whatever their size field says.
    const dataSize = kind === 'file' ? size : 0
    const clean = cleanName(name)

    if (clean === null || RESERVED.has(clean)) {
      if (kind === 'file' && clean === 'manifest.json') manifest = await input.whole(dataSize, MANIFEST_MAX, 'manifest.json')
      else if (kind === 'file' && clean === 'repositories') repositories = await input.whole(dataSize, REPOSITORIES_MAX, 'repositories')
      else await input.skip(dataSize)
      await input.skip(padding(dataSize))
      continue
    }
    const entry = { name: clean, kind, size: dataSize, mode: head.mode, mtime: head.mtime, linkname: kind === 'symlink' ? linkname : '' }
    yield writeHeader(entry)
    // A later entry of the same name replaces an earlier one, as on the engine's disk.
    heldBytes -= held.get(clean)?.length ?? 0
    held.delete(clean)
    if (dataSize <= HELD_FILE_MAX) {
      const data = await input.whole(dataSize, HELD_FILE_MAX, clean)
      if (kind === 'file' && startsLikeJson(data) && heldBytes + data.length <= HELD_MAX) {
        heldBytes += data.length
        held.set(clean, data)
      }
      if (data.length) yield data
    } else {
      yield * input.take(dataSize)
    }
    await input.skip(padding(dataSize))
    if (dataSize % BLOCK) yield Buffer.alloc(padding(dataSize))
  }
  // Nothing that follows the end of the archive reaches the engine; it is read (within a
  // bound) so that the client has sent everything and hears the answer.
  if (await input.drain(TRAILING_MAX)) throw invalid(`more than ${TRAILING_MAX} bytes after the end of the archive`)

  if (!manifest) throw unsupported('it has no manifest.json: tenants load archives written by docker save (1.10 and later)')
  const images = readManifest(manifest)
  for (const image of images) for (const tag of image.tags) checkArchiveTag(scope, tag)
  if (repositories) for (const tag of readRepositories(repositories)) checkArchiveTag(scope, tag)

  // Each config once, with the owner labels, under a name of the gateway's own.
  const configs = new Map<string, { name: string, bytes: Buffer }>()
  for (const image of images) {
    if (configs.has(image.config)) continue
    const original = held.get(image.config)
    if (!original) throw unsupported(`the image config ${JSON.stringify(image.config)} named by manifest.json is not a JSON file of at most ${HELD_FILE_MAX} bytes in the archive`)
    // A build FROM the loaded image runs its triggers: judged as the tenant's own would be.
    if (scope.checkTriggers) await scope.checkTriggers(triggersOf(original, image.config))
    const bytes = stamped(original, image.config, scope.labels)
    configs.set(image.config, { name: `${createHash('sha256').update(bytes).digest('hex')}.json`, bytes })
  }
  const now = Math.floor(Date.now() / 1000)
  for (const { name, bytes } of configs.values()) {
    yield writeHeader({ name, kind: 'file', size: bytes.length, mode: 0o644, mtime: now, linkname: '' })
    yield bytes
    if (bytes.length % BLOCK) yield Buffer.alloc(padding(bytes.length))
  }
  const items = images.map((i) => ({
    Config: configs.get(i.config)!.name,
    RepoTags: scope.engineTag ? i.tags.map(scope.engineTag) : i.tags,
    Layers: i.layers,
    ...(i.layerSources !== undefined ? { LayerSources: i.layerSources } : {}),
  }))
  const out = encodeBody(items)
  yield writeHeader({ name: 'manifest.json', kind: 'file', size: out.length, mode: 0o644, mtime: now, linkname: '' })
  yield out
  if (out.length % BLOCK) yield Buffer.alloc(padding(out.length))
  yield Buffer.alloc(2 * BLOCK)
}

function checkArchiveTag (scope: ArchiveScope, tag: string): void {
  scope.checkTag(tag)
  // The engine tags only with a tag (reference.NamedTagged), never a digest.
  const at = tag.indexOf('@')
  const colon = tag.lastIndexOf(':')
  if (at >= 0 || colon <= tag.lastIndexOf('/')) throw invalid(`the tag ${JSON.stringify(tag)} is not of the form NAME:TAG`)
}

// ---------------------------------------------------------------------------------
// Decompression

export async function decompressed (source: AsyncIterable<Buffer>): Promise<AsyncIterable<Buffer>> {
  const it = source[Symbol.asyncIterator]()
  let first = Buffer.alloc(0)
  let done = false
  while (first.length < 6 && !done) {
    const r = await it.next()
    if (r.done) done = true
    else first = Buffer.concat([first, Buffer.from(r.value)])
  }
  const whole: AsyncIterable<Buffer> = (async function * () {
    if (first.length) yield first
    if (done) return
    for (;;) {
      const r = await it.next()
      if (r.done) return
      yield Buffer.from(r.value)
    }
  })()
  if (first[0] === 0x1f && first[1] === 0x8b) {
    const gunzip = createGunzip()
    // An error of either side ends the iteration of gunzip with that error.
    pipeline(Readable.from(whole), gunzip).catch(() => {})
    return (async function * () {
      try {
        for await (const chunk of gunzip) yield chunk as Buffer
      } catch (err) {
        if (typeof (err as { code?: unknown }).code === 'string' && (err as { code: string }).code.startsWith('Z_')) throw invalid(`gzip: ${(err as Error).message}`)
        throw err
      }
    })()
  }
  const magic: Array<[string, number[]]> = [['bzip2', [0x42, 0x5a, 0x68]], ['xz', [0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00]], ['zstd', [0x28, 0xb5, 0x2f, 0xfd]]]
  for (const [what, bytes] of magic) {
    if (bytes.every((b, i) => first[i] === b)) throw unsupported(`it is compressed with ${what}: send it uncompressed or gzip-compressed`)
  }
  return whole
}

// ---------------------------------------------------------------------------------
// Reading tar

/** Reads exact amounts from a chunked source. */
export class Bytes {
  private readonly it: AsyncIterator<Buffer>
  private buf: Buffer = Buffer.alloc(0)
  private ended = false

  constructor (source: AsyncIterable<Buffer>) { this.it = source[Symbol.asyncIterator]() }

  private async more (): Promise<boolean> {
    if (this.ended) return false
    const r = await this.it.next()
    if (r.done) { this.ended = true; return false }
    const chunk = Buffer.isBuffer(r.value) ? r.value : Buffer.from(r.value as Uint8Array)
    this.buf = this.buf.length ? Buffer.concat([this.buf, chunk]) : chunk
    return true
  }

  /** `n` bytes; null at a clean end (nothing left at all); throws when the data ends within them. */
  async block (n: number): Promise<Buffer | null> {
    while (this.buf.length < n) {
      if (!await this.more()) {
        if (this.buf.length === 0) return null
        // Go's tar reader: io.ErrUnexpectedEOF, which the engine's untar reports so.
        throw invalid('the archive ends within a block', 'Error processing tar file(exit status 1): unexpected EOF')
      }
    }
    const out = this.buf.subarray(0, n)
    this.buf = this.buf.subarray(n)
    return out
  }

  /** `n` bytes at once (a JSON file, a PAX header), refused beyond `max`. */
  async whole (n: number, max: number, what: string): Promise<Buffer> {
    if (n > max) throw unsupported(`${what} is larger than ${max} bytes`)
    if (n === 0) return Buffer.alloc(0)
    const out = await this.block(n)
    if (out === null) throw invalid('the archive ends within an entry')
    return Buffer.from(out)
  }

  /** `n` bytes as they arrive. */
  async * take (n: number): AsyncGenerator<Buffer> {
    let left = n
    while (left > 0) {
      if (this.buf.length === 0 && !await this.more()) throw invalid('the archive ends within an entry')
      const piece = this.buf.subarray(0, Math.min(left, this.buf.length))
      this.buf = this.buf.subarray(piece.length)
      left -= piece.length
      yield piece
    }
  }

  async skip (n: number): Promise<void> {
    // eslint-disable-next-line @typescript-eslint/no-unused-vars -- the chunks are read to be discarded
    for await (const _ of this.take(n)) { /* discarded */ }
  }

  /** Read to the end; true if more than `max` bytes were left. */
  async drain (max: number): Promise<boolean> {
    let seen = this.buf.length
    this.buf = Buffer.alloc(0)
    while (seen <= max && await this.more()) {
      seen += this.buf.length
      this.buf = Buffer.alloc(0)
    }
    return seen > max
  }
}

interface Header { name: string, linkname: string, size: number, mode: number, mtime: number, type: string }

export function parseHeader (h: Buffer): Header {
  const stored = parseNumeric(h.subarray(148, 156), 'checksum')
  let unsigned = 0
  let signed = 0
  for (let i = 0; i < BLOCK; i++) {
    const b = i >= 148 && i < 156 ? 0x20 : h[i]
    unsigned += b
    signed += b > 127 ? b - 256 : b
  }
  if (stored !== unsigned && stored !== signed) throw invalid('a header with a wrong checksum')
  const magic = h.subarray(257, 263).toString('latin1')
  let name = cstr(h.subarray(0, 100))
  // Go's archive/tar takes the ustar magic alone (whatever the version field) as ustar.
  if (magic === 'ustar\0') {
    if (h.subarray(508, 512).toString('latin1') === 'tar\0') throw unsupported('star archives are not read')
    const prefix = cstr(h.subarray(345, 500))
    if (prefix) name = `${prefix}/${name}`
  }
  const size = parseNumeric(h.subarray(124, 136), 'size')
  if (!Number.isSafeInteger(size) || size < 0) throw invalid('an entry size out of range')
  return {
    name,
    linkname: cstr(h.subarray(157, 257)),
    size,
    mode: parseNumeric(h.subarray(100, 108), 'mode'),
    mtime: parseNumeric(h.subarray(136, 148), 'mtime'),
    type: String.fromCharCode(h[156]),
  }
}

/** Octal, or GNU base-256 (first byte's high bit set), as Go's archive/tar reads them. */
function parseNumeric (b: Buffer, what: string): number {
  if (b.length && (b[0] & 0x80) !== 0) {
    if (b[0] & 0x40) throw invalid(`a negative ${what}`)
    let n = b[0] & 0x3f
    for (let i = 1; i < b.length; i++) n = n * 256 + b[i]
    return n
  }
  const text = b.toString('latin1').replace(/^[ \0]+|[ \0]+$/g, '')
  if (text === '') return 0
  if (!/^[0-7]+$/.test(text)) throw invalid(`a header with an invalid ${what} field`)
  return parseInt(text, 8)
}

export function cstr (b: Buffer): string {
  const nul = b.indexOf(0)
  return b.subarray(0, nul < 0 ? b.length : nul).toString('utf8')
}

export function parsePax (data: Buffer): Map<string, string> {
  const out = new Map<string, string>()
  let at = 0
  while (at < data.length) {
    const space = data.indexOf(0x20, at)
    const len = space < 0 ? NaN : Number(data.subarray(at, space).toString('latin1'))
    if (!Number.isSafeInteger(len) || len <= 0 || at + len > data.length || data[at + len - 1] !== 0x0a) throw invalid('a malformed PAX record')
    const record = data.subarray(space + 1, at + len - 1).toString('utf8')
    const eq = record.indexOf('=')
    if (eq <= 0) throw invalid('a malformed PAX record')
    const key = record.slice(0, eq)
    const value = record.slice(eq + 1)
    if ((key === 'path' || key === 'linkpath') && value.includes('\0')) throw invalid('a PAX path with a NUL byte')
    out.set(key, value)
    at += len
  }
  return out
}

export function isZero (b: Buffer): boolean {
  for (let i = 0; i < b.length; i++) if (b[i] !== 0) return false
  return true
}

/**
 * The path the engine writes an entry to, relative to its directory (filepath.Clean,
 * then joined below it); null for the directory itself. Names that climb out are refused.
 */
export function cleanName (name: string): string | null {
  const n = path.posix.normalize(name).replace(/\/+$/, '').replace(/^\/+/, '')
  if (n === '' || n === '.') return null
  if (n === '..' || n.startsWith('../')) throw invalid(`the entry ${JSON.stringify(name)} lies outside the archive`)
  return n
}

function startsLikeJson (data: Buffer): boolean {
  for (const b of data) {
    if (b === 0x20 || b === 0x09 || b === 0x0a || b === 0x0d) continue
    return b === 0x7b
  }
  return false
}

// ---------------------------------------------------------------------------------
// The archive's JSON files, read as the engine reads them

/** A JSON file of the archive: strict JSON, exact duplicate keys refused, numbers kept exact. */
function json (data: Buffer, what: string): unknown {
  try {
    return decodeBody('', data).value
  } catch (err) {
    throw invalid(`${what}: ${(err as Error).message}`)
  }
}

function isObject (v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v) && !isJsonNumber(v)
}

/**
 * The key of a Go struct field in `obj` (matched ignoring case, as encoding/json does).
 * Two spellings of one field, or a non-ASCII key (Go folds some to ASCII letters), are refused.
 */
function fieldKey (obj: Record<string, unknown>, field: string, what: string): string | undefined {
  const found: string[] = []
  for (const k of Object.keys(obj)) {
    if (/[^\x00-\x7f]/.test(k)) throw invalid(`${what}: the key ${JSON.stringify(k)} is not ASCII`)
    if (k.toLowerCase() === field.toLowerCase()) found.push(k)
  }
  if (found.length > 1) throw invalid(`${what}: ${found.map((k) => JSON.stringify(k)).join(' and ')} are one field`)
  return found[0]
}

function strings (v: unknown, what: string): string[] {
  if (v === null || v === undefined) return []
  if (!Array.isArray(v) || !v.every((x) => typeof x === 'string')) throw invalid(`${what} must be a list of strings`)
  return v
}

interface ImageItem { config: string, tags: string[], layers: string[], layerSources?: unknown }

function readManifest (data: Buffer): ImageItem[] {
  const doc = json(data, 'manifest.json')
  if (!Array.isArray(doc)) throw invalid('manifest.json must be a list')
  return doc.map((item, i) => {
    const what = `manifest.json[${i}]`
    if (!isObject(item)) throw invalid(`${what} must be an object`)
    const get = (field: string): unknown => { const k = fieldKey(item, field, what); return k === undefined ? undefined : item[k] }
    const config = get('Config')
    if (typeof config !== 'string' || config === '') throw invalid(`${what}.Config must name the image's config file`)
    const clean = cleanName(config)
    if (clean === null) throw invalid(`${what}.Config must name the image's config file`)
    const sources = get('LayerSources')
    if (sources !== undefined && sources !== null && !isObject(sources)) throw invalid(`${what}.LayerSources must be an object`)
    return {
      config: clean,
      tags: strings(get('RepoTags'), `${what}.RepoTags`),
      layers: strings(get('Layers'), `${what}.Layers`),
      ...(isObject(sources) ? { layerSources: sources } : {}),
    }
  })
}

/** The legacy `repositories` file: `{"repo": {"tag": "id"}}`, as `repo:tag`. */
function readRepositories (data: Buffer): string[] {
  const doc = json(data, 'repositories')
  if (!isObject(doc)) throw invalid('repositories must be an object')
  const out: string[] = []
  for (const [repo, tags] of Object.entries(doc)) {
    if (!isObject(tags)) throw invalid(`repositories[${JSON.stringify(repo)}] must be an object`)
    for (const tag of Object.keys(tags)) out.push(`${repo}:${tag}`)
  }
  return out
}

/** The triggers (`config.OnBuild`) an image config stores. */
function triggersOf (data: Buffer, file: string): string[] {
  const what = `the image config ${file}`
  const doc = json(data, what)
  if (!isObject(doc)) throw invalid(`${what} must be an object`)
  const configKey = fieldKey(doc, 'config', what)
  const config = configKey === undefined ? null : doc[configKey] ?? null
  if (config === null) return []
  if (!isObject(config)) throw invalid(`${what}: config must be an object`)
  const key = fieldKey(config, 'OnBuild', `${what} config`)
  return key === undefined ? [] : strings(config[key], `${what}: config.OnBuild`)
}

/**
 * An image config with `labels` set in `config.Labels`. The same bytes when it carries
 * them already (the image keeps its id: a tenant's own image saved and loaded again).
 */
function stamped (data: Buffer, file: string, labels: Readonly<Record<string, string>>): Buffer {
  const what = `the image config ${file}`
  const doc = json(data, what)
  if (!isObject(doc)) throw invalid(`${what} must be an object`)
  const configKey = fieldKey(doc, 'config', what) ?? 'config'
  const config = doc[configKey] ?? null
  if (config !== null && !isObject(config)) throw invalid(`${what}: config must be an object`)
  const inner = config ?? {}
  const labelsKey = fieldKey(inner, 'Labels', `${what} config`) ?? 'Labels'
  const current = inner[labelsKey] ?? null
  if (current !== null && !isObject(current)) throw invalid(`${what}: config.Labels must be an object`)
  // Labels that give a calling container roles (gateway/callers.ts) are an admin's to set.
  const roleKeys = Object.keys(current ?? {}).filter((k) => /^io\.portcullis\.roles?$/i.test(k))
  if (roleKeys.length > 0) throw new TenancyRefusal('FORBIDDEN', `image archive refused: ${what} sets ${roleKeys.map((k) => JSON.stringify(k)).join(', ')}: labels that give a container roles are set by an admin only (rule role-labels)`, 'role-labels')
  if (current !== null && Object.entries(labels).every(([k, v]) => current[k] === v)) return data
  return encodeBody({ ...doc, [configKey]: { ...inner, [labelsKey]: { ...(current ?? {}), ...labels } } })
}
