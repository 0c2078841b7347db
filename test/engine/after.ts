// tap's global `after` script (.taprc): stops the engine before.ts started.
import * as fs from 'node:fs';
import { readState, removeState, STATE_FILE, stateOwner, stopEngine } from './engine';

async function main(): Promise<void> {
  if (!fs.existsSync(STATE_FILE)) {
    console.log('# no test engine to stop');
    return;
  }
  const info = readState();
  const owner = stateOwner();
  // The tap runner is our parent; any other live owner's engine is not ours to stop.
  if (owner !== undefined && owner !== process.ppid) {
    console.log(`# the engine in ${info.dir} belongs to pid ${owner}, leaving it running`);
    return;
  }
  await stopEngine(info);
  removeState();
  console.log(`# test engine in ${info.dir} stopped`);
}

main().catch((err: Error) => {
  console.error(`# cannot stop the test engine: ${err.stack ?? err}`);
  process.exit(1);
});
