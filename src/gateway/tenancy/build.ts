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
 * The Dockerfile is judged as the classic builder will run it, and forwarded as the
 * gateway's own re-serialization of what it judged: dockerfile.ts (every image it names
 * visible to the tenant and named by id, no ADD of a URL, no owner label, every step's
 * user). A context the gateway cannot read (bzip2, xz, no Dockerfile, a Dockerfile that
 * is a link) is refused.
 */
import { GatewayError } from '../../api/errors'
import { BLOCK, Bytes, cleanName, cstr, decompressed, isZero, padding, parseHeader, parsePax } from './archive'
import type { BodyFilter } from './call'
import { judgeDockerfile, type BuildScope } from './dockerfile'
import { refuse, TenancyRefusal } from './refusal'
import { endOfArchive, writeHeader, type OutEntry } from './tar'

/** Largest Dockerfile the gateway reads (the engine's own limit is far above any real one). */
const DOCKERFILE_MAX = 1 << 20
const META_MAX = 1 << 20

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
