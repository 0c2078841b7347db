// Checks the real-engine harness: the engine tap's before script started is up,
// speak API 1.41 and have the test image; the default one is a plain engine (not a
// swarm manager, as most users run Docker), the opt-in one is in swarm mode.
import { execFile } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { randomBytes } from 'node:crypto'
import { promisify } from 'node:util'
import t from 'tap'
import { api, dockerCli, dockerEnv, PACKAGES, readState, REPO_ROOT, toolMissing, TOOLS } from './engine/engine'

const info = readState()
const swarmInfo = readState('swarm')

t.test('the README, .ci/run and the harness install the same Debian packages, and every tool a test runs', async (t) => {
  const ci = fs.readFileSync(path.join(REPO_ROOT, '.ci/run'), 'utf8')
  const ciList = /for pkg in ([^;]+); do/.exec(ci)?.[1]?.trim().split(/\s+/) ?? []
  t.same([...ciList].sort(), [...PACKAGES].sort(), '.ci/run installs PACKAGES')
  const readme = fs.readFileSync(path.join(REPO_ROOT, 'README.md'), 'utf8')
  const comment = /# install and run the tests \(they install ([^]*?) from\s+(?:#\s*)?Debian if missing/.exec(readme)?.[1] ?? ''
  const readmeList = comment.replace(/#/g, ' ').replace(/\band\b/g, ',').split(/[\s,]+/).filter(Boolean)
  t.same([...readmeList].sort(), [...PACKAGES].sort(), 'the README\'s test command names PACKAGES')
  for (const tool of Object.keys(TOOLS)) t.equal(toolMissing(tool), undefined, `${tool} (${TOOLS[tool]}) is installed`)
  t.match(toolMissing('pcx-no-such-tool') ?? '', /pcx-no-such-tool is not installed: apt-get install pcx-no-such-tool/)
})

t.test('engine answers /_ping', async (t) => {
  const res = await api(info.socket, 'GET', '/_ping')
  t.equal(res.status, 200)
  t.equal(res.body, 'OK')
})

t.test('engine speaks Engine API 1.41 or later', async (t) => {
  const res = await api(info.socket, 'GET', '/version')
  t.equal(res.status, 200)
  const { ApiVersion } = JSON.parse(res.body) as { ApiVersion: string }
  t.match(ApiVersion, /^1\.\d+$/)
  t.ok(Number(ApiVersion.split('.')[1]) >= 41, `ApiVersion ${ApiVersion} >= 1.41`)
})

t.test('test image exists', async (t) => {
  const res = await api(info.socket, 'GET', `/images/${info.image}/json`)
  t.equal(res.status, 200, `GET /images/${info.image}/json`)
  const image = JSON.parse(res.body) as { RepoTags: string[]; Config: { Cmd: string[] } }
  t.ok(image.RepoTags.includes(info.image))
  t.same(image.Config.Cmd, ['/bin/sh'])
})

t.test('docker run through the CLI', async (t) => {
  const { stdout } = await promisify(execFile)(dockerCli(), ['run', '--rm', info.image, 'echo', 'hello'], {
    env: dockerEnv(info),
  })
  t.equal(stdout, 'hello\n')
})

t.test('the default engine is a plain engine, not a swarm manager', async (t) => {
  const res = await api(info.socket, 'GET', '/info')
  t.equal(res.status, 200)
  const { Swarm } = JSON.parse(res.body) as { Swarm: { LocalNodeState: string; ControlAvailable: boolean } }
  t.equal(Swarm.LocalNodeState, 'inactive')
  t.equal(Swarm.ControlAvailable, false)
  const services = await api(info.socket, 'GET', '/services')
  t.equal(services.status, 503, 'a plain engine answers 503 to /services')
})

t.test('the swarm engine is a single-node swarm manager', async (t) => {
  const res = await api(swarmInfo.socket, 'GET', '/info')
  t.equal(res.status, 200)
  const { Swarm } = JSON.parse(res.body) as { Swarm: { LocalNodeState: string; ControlAvailable: boolean; Nodes: number } }
  t.equal(Swarm.LocalNodeState, 'active')
  t.equal(Swarm.ControlAvailable, true, 'a manager')
  t.equal(Swarm.Nodes, 1)
})

t.test('a service runs a task with the test image', async (t) => {
  const name = `harness-${randomBytes(4).toString('hex')}`
  const spec = {
    Name: name,
    Labels: { 'io.portcullis.test': 'engine-harness' },
    // sleep as PID 1 ignores SIGTERM: a short grace period, so removal does not wait 10 s.
    TaskTemplate: { ContainerSpec: { Image: swarmInfo.image, Command: ['sleep', '300'], StopGracePeriod: 1e9 } },
    Mode: { Replicated: { Replicas: 1 } },
  }
  const created = await api(swarmInfo.socket, 'POST', '/services/create', 30_000, spec)
  t.equal(created.status, 201, `created: ${created.body}`)
  const { ID: id } = JSON.parse(created.body) as { ID: string }
  t.teardown(() => api(swarmInfo.socket, 'DELETE', `/services/${id}`))

  interface Task {
    Status: { State: string; Err?: string; ContainerStatus?: { ContainerID?: string } };
  }
  const filters = encodeURIComponent(JSON.stringify({ service: [id] }))
  let tasks: Task[] = []
  const deadline = Date.now() + 30_000
  while (!tasks.some((task) => task.Status.State === 'running') && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 200))
    tasks = JSON.parse((await api(swarmInfo.socket, 'GET', `/tasks?filters=${filters}`)).body) as Task[]
  }
  const running = tasks.find((task) => task.Status.State === 'running')
  t.ok(running, `a running task: ${JSON.stringify(tasks.map((task) => task.Status))}`)
  const container = JSON.parse(
    (await api(swarmInfo.socket, 'GET', `/containers/${running?.Status.ContainerStatus?.ContainerID}/json`)).body
  ) as { Config: { Image: string; Entrypoint: string[] }; State: { Running: boolean } }
  t.match(container.Config.Image, swarmInfo.image)
  t.same(container.Config.Entrypoint, ['sleep', '300'], "a service's Command is the container's entrypoint")
  t.equal(container.State.Running, true)

  t.equal((await api(swarmInfo.socket, 'DELETE', `/services/${id}`)).status, 200, 'removed')
  t.equal((await api(swarmInfo.socket, 'GET', `/services/${id}`)).status, 404)
  // The task's container goes a moment later: wait, so no other test file sees it.
  const gone = Date.now() + 30_000
  let status = 200
  while (status !== 404 && Date.now() < gone) {
    await new Promise((resolve) => setTimeout(resolve, 200))
    status = (await api(swarmInfo.socket, 'GET', `/containers/${running?.Status.ContainerStatus?.ContainerID}/json`)).status
  }
  t.equal(status, 404, "the task's container is removed too")
})
