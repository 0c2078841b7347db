/**
 * deploy/compose.yaml's clients, against the private test engine with the image of
 * deploy/Dockerfile built there (test/helpers/image.ts): the gateway comes up in front
 * of the engine, the read-only consumer on its private network lists containers through
 * the listener bound to the gateway's address there and is refused a create, and the CI
 * runner's docker CLI, with its tenant token, runs `docker ps` on the other network.
 * The images the file names (Traefik, docker:cli) cannot be pulled here: the test's
 * busybox image stands in for both, the CI runner with the docker CLI (one static
 * binary) mounted, which the file's entrypoint runs as it would in docker:cli.
 * Not tested here: that the CI network cannot reach the read-only listener. The engine's
 * iptables rules isolate its networks, and the test engines run with --iptables=false
 * (measured: a container on the ci network reached 172.30.101.2:2375 through the host).
 */
import { spawnSync } from 'node:child_process'
import path from 'node:path'
import jwt from 'jsonwebtoken'
import t from 'tap'
import { engine, uniqueName } from './helpers/gateway'
import { buildImage, engineSocketGid, IMAGE } from './helpers/image'

t.setTimeout(600_000)

const DEPLOY = path.resolve(__dirname, '../../deploy')
/** The placeholder secret of deploy/compose/portcullis.yaml: a token signed with it verifies there. */
const SECRET = 'REPLACE-ME-with-openssl-rand-hex-32'
const TOKEN = jwt.sign({ sub: 'ci', tenant: 'ci', roles: ['ci'], exp: Math.floor(Date.now() / 1000) + 3600 }, SECRET, { algorithm: 'HS256' })
const FILE = 'compose.yaml'

function compose (project: string, args: string[]): { code: number | null, out: string } {
  const r = spawnSync('docker-compose', ['-p', project, '-f', FILE, ...args], {
    cwd: DEPLOY,
    encoding: 'utf8',
    env: {
      ...process.env,
      DOCKER_HOST: engine().dockerHost,
      PORTCULLIS_IMAGE: IMAGE,
      DASHBOARD_IMAGE: engine().image,
      CI_IMAGE: engine().image,
      CI_TOKEN: TOKEN,
      DOCKER_SOCKET: engine().socket,
      DOCKER_GID: String(engineSocketGid()),
    },
    timeout: 180_000,
  })
  return { code: r.status, out: `${r.stdout}${r.stderr}` }
}

t.test('compose.yaml: the gateway up, its read-only consumer and its CI runner served', async (t) => {
  buildImage()
  const project = uniqueName('pcxc').replace(/-/g, '')
  t.teardown(() => { compose(project, ['down', '-v', '-t', '3']) })
  const up = compose(project, ['up', '-d', 'portcullis'])
  t.equal(up.code, 0, up.out)
  const dashboard = (args: string[]): { code: number | null, out: string } =>
    compose(project, ['run', '--rm', '--no-deps', '--entrypoint', 'wget', 'dashboard', '-S', '-O', '-', ...args])
  // The gateway takes a moment to listen: the consumer asks until it answers.
  let list = dashboard(['http://172.30.101.2:2375/v1.41/containers/json'])
  for (let i = 0; i < 30 && !/HTTP\/1\.1 200/.test(list.out); i++) {
    await new Promise((resolve) => setTimeout(resolve, 1000))
    list = dashboard(['http://172.30.101.2:2375/v1.41/containers/json'])
  }
  t.match(list.out, /HTTP\/1\.1 200/, `the read-only consumer lists containers: ${list.out}`)
  t.match(list.out, new RegExp(`${project}_portcullis_1`), 'and sees the gateway\'s own container')
  const create = dashboard(['--post-data', '{}', '--header', 'Content-Type: application/json', 'http://172.30.101.2:2375/v1.41/containers/create'])
  t.match(create.out, /HTTP\/1\.1 403/, `but may not create one: ${create.out}`)
  const ci = compose(project, ['run', '--rm', '--no-deps', '-v', '/usr/local/bin/docker:/usr/local/bin/docker:ro', 'ci'])
  t.equal(ci.code, 0, `the CI runner's docker ps, as tenant ci: ${ci.out}`)
  t.match(ci.out, /CONTAINER ID/)
  // A CI job without its token on the CI listener: 401, not the read-only identity.
  const anonymous = compose(project, ['run', '--rm', '--no-deps', '--entrypoint', 'wget', 'ci', '-S', '-O', '-', 'http://portcullis:2376/v1.41/containers/json'])
  t.match(anonymous.out, /HTTP\/1\.1 401/, `no token: ${anonymous.out}`)
})
