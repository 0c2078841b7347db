/**
 * Programs the tests run that are not part of every Debian system (test/engine/engine.ts
 * TOOLS names each one's package; npm test installs them). A test that finds one missing
 * fails with a message naming the package to install, instead of crashing on ENOENT.
 */
import type { Test } from 'tap'
import { toolMissing } from '../engine/engine'

/** true when every program is on the PATH; else one failure per missing program, naming its Debian package. */
export function haveTools (t: Test, ...names: string[]): boolean {
  let ok = true
  for (const name of names) {
    const missing = toolMissing(name)
    if (missing !== undefined) {
      t.fail(missing)
      ok = false
    }
  }
  return ok
}

/** Throws the same message (for helpers without a Test at hand). */
export function assertTool (name: string): void {
  const missing = toolMissing(name)
  if (missing !== undefined) throw new Error(missing)
}
