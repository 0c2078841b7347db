// tap's global `after` script (.taprc): stops the engines before.ts started.
import { readState, removeState, stateOwner, stopEngine, type EngineRole } from './engine'

async function stop (role: EngineRole): Promise<void> {
  let info
  try {
    info = readState(role)
  } catch {
    console.log(`# no ${role} test engine to stop`)
    return
  }
  const owner = stateOwner(role)
  // The tap runner is our parent; any other live owner's engine is not ours to stop.
  if (owner !== undefined && owner !== process.ppid) {
    console.log(`# the ${role} engine in ${info.dir} belongs to pid ${owner}, leaving it running`)
    return
  }
  await stopEngine(info)
  removeState(role)
  console.log(`# ${role} test engine in ${info.dir} stopped`)
}

Promise.all([stop('plain'), stop('swarm')]).catch((err: Error) => {
  console.error(`# cannot stop the test engines: ${err.stack ?? err}`)
  process.exit(1)
})
