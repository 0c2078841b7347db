/**
 * Counts the writes that reach the audit file without asking the trail: every
 * `fs.writeSync` whose descriptor names the file (read from /proc/self/fd) is passed on,
 * and then the number of lines it carried is handed to `counted`. The audit trail's file
 * sink writes only through `fs.writeSync` (a synchronous SonicBoom).
 *
 * Preloaded into a gateway process (`node --require`) by test/audit-group, with
 * PCX_AUDIT_FILE and PCX_AUDIT_WRITES set: one number per write is appended to
 * PCX_AUDIT_WRITES, with the original writeSync (so these lines are not counted themselves).
 */
import fs from 'node:fs'

type WriteSync = (fd: number, ...rest: unknown[]) => number

/** Count the writes to `file` from now on; returns what puts the original writeSync back. */
export function countAuditWrites (file: string, counted: (lines: number, original: WriteSync) => void): () => void {
  const original = fs.writeSync as WriteSync
  const patched = (fd: number, ...rest: unknown[]): number => {
    const n = original.call(fs, fd, ...rest)
    let target = ''
    try { target = fs.readlinkSync(`/proc/self/fd/${fd}`) } catch { /* not a file */ }
    if (target === file) {
      const data = rest[0]
      counted((typeof data === 'string' ? data : Buffer.from(data as Uint8Array).toString('latin1')).split('\n').length - 1, original)
    }
    return n
  }
  Object.assign(fs, { writeSync: patched })
  return () => { Object.assign(fs, { writeSync: original }) }
}

const file = process.env.PCX_AUDIT_FILE
const log = process.env.PCX_AUDIT_WRITES
if (file !== undefined && log !== undefined) {
  const logFd = fs.openSync(log, 'a')
  countAuditWrites(file, (lines, original) => { original.call(fs, logFd, `${lines}\n`) })
}
