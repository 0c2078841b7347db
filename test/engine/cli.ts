// `npm run engine`: a test engine for development, in the foreground until
// SIGINT/SIGTERM. It writes the same state file as tap's before script, so test
// files can be run directly (node dist/test/...test.js) against it.
import * as path from 'node:path'
import {
  fitsSocketLimit,
  isEngineAlive,
  removeState,
  REPO_ROOT,
  startEngine,
  stateOwner,
  stopEngine,
  stopStaleEngine,
  writeState,
} from './engine'

const devDir = path.join(REPO_ROOT, '.engine', 'dev')
const dir = fitsSocketLimit(devDir) ? devDir : '/tmp/pcx-dev'
const swarmDir = fitsSocketLimit(`${devDir}-swarm`) ? `${devDir}-swarm` : '/tmp/pcx-dev-swarm'

async function main (): Promise<void> {
  const stale = await stopStaleEngine(dir)
  if ((await stopStaleEngine(swarmDir)) || stale) console.error('# stopped an engine left over from an earlier run')
  const started = Date.now()
  // A plain engine (the default) and a swarm manager for the tests that opt in to swarm mode.
  const [info, swarm] = await Promise.all([startEngine(dir), startEngine(swarmDir, { swarm: true })])
  writeState(info, process.pid, 'plain')
  writeState(swarm, process.pid, 'swarm')
  console.log(`export DOCKER_HOST=${info.dockerHost}`)
  console.log(`# swarm-mode engine: DOCKER_HOST=${swarm.dockerHost}`)
  console.log(`# test image: ${info.image}`)
  const secs = ((Date.now() - started) / 1000).toFixed(1)
  console.error(`# engines ready in ${secs} s (dockerd pid ${info.pid}, log ${dir}/dockerd.log); Ctrl-C stops them`)

  let stopping = false
  const shutdown = async (why: string, code: number): Promise<void> => {
    if (stopping) return
    stopping = true
    clearInterval(watch)
    console.error(`# ${why}: stopping the engine`)
    try {
      await Promise.all([stopEngine(info), stopEngine(swarm)])
      for (const role of ['plain', 'swarm'] as const) if (stateOwner(role) === process.pid) removeState(role)
    } catch (err) {
      console.error(`# cannot stop the engine: ${(err as Error).message}`)
      code = 1
    }
    process.exit(code)
  }
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(sig, () => { void shutdown(sig, 0) })
  // Also keeps this process alive.
  const watch = setInterval(() => {
    if (!isEngineAlive(info) || !isEngineAlive(swarm)) void shutdown('dockerd is gone', 1)
  }, 1000)
}

main().catch((err: Error) => {
  console.error(`# cannot start the engine: ${err.stack ?? err}`)
  process.exit(1)
})
