/**
 * systemd socket activation: the listening sockets a `.socket` unit passes to the
 * service, as sd_listen_fds(3) describes them. LISTEN_PID names the process they are
 * for (another process's variables, inherited by mistake, are ignored), LISTEN_FDS how
 * many there are (file descriptors 3, 4, ...), LISTEN_FDNAMES their names separated by
 * `:` (the unit's FileDescriptorName=, by default the socket unit's name).
 *
 * Whether a passed socket is a unix or a TCP socket is read from /proc (the socket's
 * inode is in /proc/net/unix or it is not): the listener's kind decides which default
 * identity it gets when the configuration names no listeners (resolve.ts).
 */
import fs from 'node:fs'

export interface PassedSocket {
  readonly fd: number
  readonly name: string
  readonly kind: 'unix' | 'tcp'
  /** The unix socket's path, when it has one ('' for an abstract or unnamed socket). */
  readonly path: string
}

/** First fd systemd passes (SD_LISTEN_FDS_START). */
const FIRST_FD = 3

function unixPaths (): Map<string, string> {
  const byInode = new Map<string, string>()
  let text = ''
  try { text = fs.readFileSync('/proc/net/unix', 'utf8') } catch { return byInode }
  for (const line of text.split('\n').slice(1)) {
    const cols = line.trim().split(/\s+/)
    if (cols.length >= 7 && cols[6] !== undefined) byInode.set(cols[6], cols[7] ?? '')
  }
  return byInode
}

/**
 * The sockets passed to this process, or a problem: a LISTEN_FDS that is not a
 * number, a passed fd that is not a socket, more or fewer names than sockets.
 */
export function passedSockets (env: { [key: string]: string | undefined }, pid: number = process.pid): { sockets: PassedSocket[], problem?: string } {
  const fds = env['LISTEN_FDS']
  if (fds === undefined || fds === '') return { sockets: [] }
  if (env['LISTEN_PID'] !== String(pid)) return { sockets: [] }
  if (!/^[0-9]+$/.test(fds)) return { sockets: [], problem: `LISTEN_FDS=${JSON.stringify(fds)}: expected a number of file descriptors` }
  const n = Number(fds)
  const names = env['LISTEN_FDNAMES'] === undefined ? [] : env['LISTEN_FDNAMES'].split(':')
  if (names.length > 0 && names.length !== n) return { sockets: [], problem: `LISTEN_FDNAMES names ${names.length} socket(s), LISTEN_FDS passes ${n}` }
  const unix = unixPaths()
  const sockets: PassedSocket[] = []
  for (let i = 0; i < n; i++) {
    const fd = FIRST_FD + i
    let link: string
    try { link = fs.readlinkSync(`/proc/self/fd/${fd}`) } catch (err) { return { sockets: [], problem: `passed fd ${fd}: ${(err as NodeJS.ErrnoException).code ?? 'unreadable'}` } }
    const inode = /^socket:\[([0-9]+)\]$/.exec(link)?.[1]
    if (inode === undefined) return { sockets: [], problem: `passed fd ${fd} is not a socket (${link})` }
    const path = unix.get(inode)
    // systemd's default name is the socket unit's; "unknown" is sd_listen_fds_with_names' word for none.
    sockets.push({ fd, name: names[i] ?? 'unknown', kind: path === undefined ? 'tcp' : 'unix', path: path ?? '' })
  }
  return { sockets }
}
