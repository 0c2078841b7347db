/**
 * The gateway's own tar headers: what it forwards of an archive it read (a `docker load`
 * archive, a build context) is written again in one form, so that the engine's reader
 * sees exactly the entries the gateway read. One ustar header per entry; a PAX header
 * before it only for a name or link target longer than the ustar field, or a size beyond
 * its octal range. No prefix field, no GNU records, no base-256 numbers, no owner.
 */
export const BLOCK = 512
const OCTAL_MAX = 0o77777777777

export interface OutEntry {
  /** A clean relative path (archive.ts cleanName). */
  name: string
  kind: 'file' | 'dir' | 'symlink' | 'hardlink'
  size: number
  mode: number
  mtime: number
  /** A symbolic link's target as the client wrote it, or a hard link's clean target path. */
  linkname: string
  /** Owner written into the header (volume-owner.ts); 0 when absent. */
  uid?: number
  gid?: number
}

const TYPES: Record<OutEntry['kind'], string> = { file: '0', dir: '5', symlink: '2', hardlink: '1' }

export function writeHeader (e: OutEntry): Buffer {
  const records: Array<[string, string]> = []
  const nameBytes = Buffer.byteLength(e.name)
  const linkBytes = Buffer.byteLength(e.linkname)
  if (nameBytes > 100) records.push(['path', e.name])
  if (linkBytes > 100) records.push(['linkpath', e.linkname])
  if (e.size > OCTAL_MAX) records.push(['size', String(e.size)])
  const main = ustar({
    name: nameBytes > 100 ? 'PaxHeaders/entry' : e.name,
    linkname: linkBytes > 100 ? '' : e.linkname,
    size: e.size > OCTAL_MAX ? 0 : e.size,
    mode: e.mode & 0o7777 || (e.kind === 'dir' ? 0o755 : 0o644),
    mtime: e.mtime >= 0 && e.mtime <= OCTAL_MAX ? e.mtime : 0,
    type: TYPES[e.kind],
    uid: e.uid ?? 0,
    gid: e.gid ?? 0,
  })
  if (records.length === 0) return main
  const body = Buffer.from(records.map(([k, v]) => paxRecord(k, v)).join(''), 'utf8')
  const x = ustar({ name: 'PaxHeaders/entry', linkname: '', size: body.length, mode: 0o644, mtime: 0, type: 'x' })
  return Buffer.concat([x, body, Buffer.alloc(padding(body.length)), main])
}

/** The zero blocks that end an archive. */
export function endOfArchive (): Buffer {
  return Buffer.alloc(2 * BLOCK)
}

export function padding (n: number): number {
  return (BLOCK - (n % BLOCK)) % BLOCK
}

function paxRecord (key: string, value: string): string {
  const rest = ` ${key}=${value}\n`
  const restBytes = Buffer.byteLength(rest)
  let len = restBytes + 1
  while (String(len).length + restBytes !== len) len = String(len).length + restBytes
  return `${len}${rest}`
}

interface Fields { name: string, linkname: string, size: number, mode: number, mtime: number, type: string, uid?: number, gid?: number }

function ustar (h: Fields): Buffer {
  const b = Buffer.alloc(BLOCK)
  b.write(h.name, 0, 100, 'utf8')
  octal(b, 100, 8, h.mode)
  octal(b, 108, 8, h.uid ?? 0)
  octal(b, 116, 8, h.gid ?? 0)
  octal(b, 124, 12, h.size)
  octal(b, 136, 12, h.mtime)
  b.write(h.type, 156, 1, 'latin1')
  b.write(h.linkname, 157, 100, 'utf8')
  b.write('ustar\0', 257, 6, 'latin1')
  b.write('00', 263, 2, 'latin1')
  b.fill(0x20, 148, 156)
  let sum = 0
  for (let i = 0; i < BLOCK; i++) sum += b[i]
  b.write(sum.toString(8).padStart(6, '0') + '\0 ', 148, 8, 'latin1')
  return b
}

function octal (b: Buffer, at: number, width: number, n: number): void {
  b.write(n.toString(8).padStart(width - 1, '0') + '\0', at, width, 'latin1')
}
