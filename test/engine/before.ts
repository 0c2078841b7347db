// tap's global `before` script (.taprc): starts a fresh engine for the test run
// and records it in the state file, owned by the tap runner (our parent);
// dockerd keeps running after this exits.
import { randomBytes } from 'node:crypto'
import { startEngine, stopStaleEngine, writeState } from './engine'

async function main (): Promise<void> {
  if (await stopStaleEngine()) console.log('# stopped a test engine left over from an earlier run')
  const started = Date.now()
  // The plain engine is the default for every test; the swarm-mode one serves only
  // the tests that opt in to swarm objects. Both start together.
  const [plain, swarm] = await Promise.all([
    startEngine(`/tmp/pcx-${randomBytes(4).toString('hex')}`),
    startEngine(`/tmp/pcx-${randomBytes(4).toString('hex')}`, { swarm: true }),
  ])
  writeState(plain, process.ppid, 'plain')
  writeState(swarm, process.ppid, 'swarm')
  const secs = ((Date.now() - started) / 1000).toFixed(1)
  console.log(`# test engine (plain): DOCKER_HOST=${plain.dockerHost} (dockerd pid ${plain.pid}); swarm-mode engine: DOCKER_HOST=${swarm.dockerHost}; ready in ${secs} s`)
}

main().catch((err: Error) => {
  console.error(`# cannot start the test engine: ${err.stack ?? err}`)
  process.exit(1)
})
