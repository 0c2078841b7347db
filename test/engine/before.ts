// tap's global `before` script (.taprc): starts a fresh engine for the test run
// and records it in the state file, owned by the tap runner (our parent);
// dockerd keeps running after this exits.
import { randomBytes } from 'node:crypto';
import { startEngine, stopStaleEngine, writeState } from './engine';

async function main(): Promise<void> {
  if (await stopStaleEngine()) console.log('# stopped a test engine left over from an earlier run');
  const started = Date.now();
  const info = await startEngine(`/tmp/pcx-${randomBytes(4).toString('hex')}`);
  writeState(info, process.ppid);
  const secs = ((Date.now() - started) / 1000).toFixed(1);
  console.log(`# test engine: DOCKER_HOST=${info.dockerHost} (dockerd pid ${info.pid}, ready in ${secs} s)`);
}

main().catch((err: Error) => {
  console.error(`# cannot start the test engine: ${err.stack ?? err}`);
  process.exit(1);
});
