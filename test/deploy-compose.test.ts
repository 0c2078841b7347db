/**
 * deploy/compose.yaml and deploy/compose/socket-proxy.yaml with docker-compose 1.29
 * against the private test engine, using the image of deploy/Dockerfile built there
 * (test/helpers/image.ts): both files validate (`docker-compose config`), and the
 * docker-socket-proxy compose service with only the image changed comes up and serves
 * is healthy, with the policy derived from its variables. (Requests from a client
 * container are not sent: busybox's wget crashed (SIGSEGV) on these networks in this
 * environment; test/socket-proxy-dropin.test.ts compares the decisions. compose.yaml's clients are not run: the images it names, Traefik and
 * docker:cli, cannot be pulled here, and busybox's wget crashed on its fixed-address network.)
 */
import { spawnSync } from 'node:child_process'
import path from 'node:path'
import t from 'tap'
import { engine, uniqueName } from './helpers/gateway'
import { buildImage, engineSocketGid, IMAGE } from './helpers/image'

t.setTimeout(600_000)

const DEPLOY = path.resolve(__dirname, '../../deploy')

function compose (project: string, file: string, args: string[]): { code: number | null, out: string } {
  const r = spawnSync('docker-compose', ['-p', project, '-f', file, ...args], {
    cwd: DEPLOY,
    encoding: 'utf8',
    env: {
      ...process.env,
      DOCKER_HOST: engine().dockerHost,
      PORTCULLIS_IMAGE: IMAGE,
      DASHBOARD_IMAGE: engine().image,
      CI_IMAGE: engine().image,
      CONSUMER_IMAGE: engine().image,
      DOCKER_SOCKET: engine().socket,
      DOCKER_GID: String(engineSocketGid()),
    },
    timeout: 180_000,
  })
  return { code: r.status, out: `${r.stdout}${r.stderr}` }
}

t.test('both compose files validate', async (t) => {
  for (const file of ['compose.yaml', 'compose/socket-proxy.yaml']) {
    const r = compose('pcxcheck', file, ['config', '-q'])
    t.equal(r.code, 0, `${file}: ${r.out}`)
  }
})

t.test('compose/socket-proxy.yaml: the image as a drop-in for docker-socket-proxy', async (t) => {
  buildImage()
  const project = uniqueName('pcxd').replace(/-/g, '')
  const file = 'compose/socket-proxy.yaml'
  t.teardown(() => { compose(project, file, ['down', '-v', '-t', '3']) })
  const up = compose(project, file, ['up', '-d'])
  t.equal(up.code, 0, up.out)
  // Healthy: the image's HEALTHCHECK reached /healthz on the drop-in's metrics listener.
  let health = ''
  for (let i = 0; i < 60 && health !== 'healthy'; i++) {
    await new Promise((resolve) => setTimeout(resolve, 1000))
    health = spawnSync('docker', ['inspect', '-f', '{{.State.Health.Status}}', `${project}_dockerproxy_1`], { encoding: 'utf8', env: { ...process.env, DOCKER_HOST: engine().dockerHost } }).stdout.trim()
  }
  t.equal(health, 'healthy')
  t.match(compose(project, file, ['logs', 'dockerproxy']).out, /docker-socket-proxy drop-in: no config file, its variables make the policy \(switched on: CONTAINERS, EVENTS, NETWORKS, PING, VERSION\)/)
})
