/**
 * Preloaded into a gateway process (`node --require`) by test/audit-group: counts the
 * writes that reach the audit file without asking the trail. Every `fs.writeSync` whose
 * descriptor names PCX_AUDIT_FILE (read from /proc/self/fd) is passed on, and then the
 * number of lines it carried is appended to PCX_AUDIT_WRITES, one number per write,
 * with the original writeSync (so these lines are not counted themselves). The audit
 * trail's file sink writes only through `fs.writeSync` (a synchronous SonicBoom).
 */
import fs from 'node:fs'

const file = process.env.PCX_AUDIT_FILE
const log = process.env.PCX_AUDIT_WRITES
if (file !== undefined && log !== undefined) {
  const original = fs.writeSync as (fd: number, ...rest: unknown[]) => number
  const logFd = fs.openSync(log, 'a')
  const patched = (fd: number, ...rest: unknown[]): number => {
    const n = original.call(fs, fd, ...rest)
    let target = ''
    try { target = fs.readlinkSync(`/proc/self/fd/${fd}`) } catch { /* not a file */ }
    if (target === file) {
      const data = rest[0]
      const text = typeof data === 'string' ? data : Buffer.from(data as Uint8Array).toString('latin1')
      original.call(fs, logFd, `${text.split('\n').length - 1}\n`)
    }
    return n
  }
  Object.assign(fs, { writeSync: patched })
}
