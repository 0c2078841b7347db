// Checks the real-engine harness: the engine tap's before script started is up,
// speaks API 1.41 and has the test image.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import t from 'tap';
import { api, dockerCli, dockerEnv, readState } from './engine/engine';

const info = readState();

t.test('engine answers /_ping', async (t) => {
  const res = await api(info.socket, 'GET', '/_ping');
  t.equal(res.status, 200);
  t.equal(res.body, 'OK');
});

t.test('engine speaks Engine API 1.41 or later', async (t) => {
  const res = await api(info.socket, 'GET', '/version');
  t.equal(res.status, 200);
  const { ApiVersion } = JSON.parse(res.body) as { ApiVersion: string };
  t.match(ApiVersion, /^1\.\d+$/);
  t.ok(Number(ApiVersion.split('.')[1]) >= 41, `ApiVersion ${ApiVersion} >= 1.41`);
});

t.test('test image exists', async (t) => {
  const res = await api(info.socket, 'GET', `/images/${info.image}/json`);
  t.equal(res.status, 200, `GET /images/${info.image}/json`);
  const image = JSON.parse(res.body) as { RepoTags: string[]; Config: { Cmd: string[] } };
  t.ok(image.RepoTags.includes(info.image));
  t.same(image.Config.Cmd, ['/bin/sh']);
});

t.test('docker run through the CLI', async (t) => {
  const { stdout } = await promisify(execFile)(dockerCli(), ['run', '--rm', info.image, 'echo', 'hello'], {
    env: dockerEnv(info),
  });
  t.equal(stdout, 'hello\n');
});
