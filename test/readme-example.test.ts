/**
 * README.md's "Two tenants, worked example", run as written: its `sh` blocks and the
 * `$ ` commands of its `console` block in one bash session, in a directory laid out
 * like a checkout (the `./portcullis` wrapper, the build, node_modules, the shipped
 * policies), against the run's real engine (the example's gateway finds it through
 * DOCKER_HOST, as the README says) with docker 28 as both tenants. Each command's
 * output (stdout and stderr) must be what the README shows; a line `…` there stands
 * for one line of anything (a container id).
 *
 * The example runs `busybox`. Its first block makes that image offline, from
 * busybox-static with `docker import`, when the engine has none: run as written on the
 * run's engine (and the image removed afterwards if this test made it).
 */
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { CLI28, engine, POLICIES, run } from './helpers/gateway'

const ROOT = path.resolve(__dirname, '../..')
const README = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8')
const HEADING = '## Two tenants, worked example'
// The example's objects as the engine names them (per-tenant names: `<tenant>.<name>`).
const CONTAINERS = ['acme.web', 'globex.web']
const VOLUMES = ['acme.data', 'globex.data']
const NETWORKS = ['acme.net', 'globex.net']

interface Block { lang: string, text: string }
interface Command { command: string, expected: string[] }

/** The section's fenced blocks, in order. */
function blocks (): Block[] {
  const start = README.indexOf(`\n${HEADING}\n`)
  if (start < 0) throw new Error(`README.md has no "${HEADING}" section`)
  const end = README.indexOf('\n## ', start + HEADING.length + 2)
  const section = README.slice(start, end < 0 ? undefined : end)
  return [...section.matchAll(/^```(\w*)\n([\s\S]*?)^```$/gm)].map((m) => ({ lang: m[1], text: m[2] }))
}

/** `$ command` lines and the output lines that follow each. */
function commands (console: string): Command[] {
  const out: Command[] = []
  for (const line of console.replace(/\n$/, '').split('\n')) {
    if (line.startsWith('$ ')) out.push({ command: line.slice(2), expected: [] })
    else if (out.length) out[out.length - 1].expected.push(line)
    else throw new Error(`console block: output before any command: ${line}`)
  }
  return out
}

const direct = async (args: string[]): Promise<void> => { await run(CLI28, args, { host: engine().dockerHost }) }

t.test('README: two tenants, worked example', async (t) => {
  const found = blocks()
  t.same(found.map((b) => b.lang), ['sh', 'sh', 'console', 'sh'], 'the section: the busybox image offline, set-up, what each sees, stopping')
  const [image, setup, transcript, stop] = found
  const steps = commands(transcript.text)
  t.ok(steps.length >= 8, `${steps.length} commands`)

  // A directory laid out like a checkout after `npm ci`.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pcrx-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  fs.copyFileSync(path.join(ROOT, 'portcullis'), path.join(dir, 'portcullis'))
  fs.chmodSync(path.join(dir, 'portcullis'), 0o755)
  fs.copyFileSync(path.join(ROOT, 'package.json'), path.join(dir, 'package.json'))
  fs.symlinkSync(path.join(ROOT, 'dist'), path.join(dir, 'dist'))
  fs.symlinkSync(path.join(ROOT, 'node_modules'), path.join(dir, 'node_modules'))
  fs.cpSync(POLICIES, path.join(dir, 'policies'), { recursive: true })

  const hadBusybox = (await run(CLI28, ['image', 'inspect', 'busybox:latest'], { host: engine().dockerHost })).code === 0
  const clean = async (): Promise<void> => {
    await direct(['rm', '-f', ...CONTAINERS])
    await direct(['volume', 'rm', '-f', ...VOLUMES])
    await direct(['network', 'rm', ...NETWORKS])
  }
  await clean()
  t.teardown(async () => {
    await clean()
    await direct(['rmi', '-f', 'portcullis.invalid/acme/app:latest'])
    if (!hadBusybox) await direct(['rmi', 'busybox:latest'])
  })

  // One bash session: the image and the set-up as written, each command between markers, then the stop.
  const script = [
    image.text,
    'printf "\\n@@@ image cmd=%s\\n" "$(docker image inspect --format "{{json .Config.Cmd}}" busybox:latest 2>&1)"',
    setup.text,
    ...steps.map((s, i) => `printf '\\n@@@ %s\\n' ${i}\n${s.command} 2>&1\nprintf '\\n@@@ %s rc=%s\\n' ${i} $?`),
    'printf "\\n@@@ stop\\n"',
    stop.text,
    'wait',
  ].join('\n')
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    // The gateway of the example forwards to DOCKER_HOST; `docker` is docker 28.
    DOCKER_HOST: engine().dockerHost,
    PATH: `${path.dirname(CLI28)}:${process.env.PATH ?? ''}`,
    NODE_OPTIONS: '',
  }
  delete env.DOCKER_CONFIG
  delete env.PORTCULLIS_CONFIG
  const version = await run('docker', ['version', '--format', '{{.Client.Version}}'], { host: engine().dockerHost, env: { PATH: env.PATH } })
  t.match(version.stdout.toString(), /^28\./, 'docker on the PATH is docker 28')

  const child = spawn('bash', ['-c', script], { cwd: dir, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true })
  t.teardown(() => { try { process.kill(-child.pid!, 'SIGKILL') } catch {} })
  let stdout = ''
  let stderr = ''
  child.stdout.setEncoding('utf8').on('data', (s: string) => { stdout += s })
  child.stderr.setEncoding('utf8').on('data', (s: string) => { stderr += s })
  const timer = setTimeout(() => { try { process.kill(-child.pid!, 'SIGKILL') } catch {} }, 180_000)
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve))
  clearTimeout(timer)
  const log = fs.existsSync(path.join(dir, 'portcullis.log')) ? fs.readFileSync(path.join(dir, 'portcullis.log'), 'utf8') : ''
  const diag = { stderr: stderr.slice(-3000), log: log.slice(-3000) }
  t.equal(code, 0, 'the session ends: the gateway stopped with kill %1', diag)
  t.equal(stderr, '', 'the set-up prints nothing on stderr', diag)
  const made = /\n@@@ image cmd=(.*)\n/.exec(stdout)?.[1]
  if (hadBusybox) t.pass('the engine had busybox: the offline step left it alone')
  else t.equal(made, '["sh"]', 'no busybox on the engine: the offline step imported one from busybox-static')

  steps.forEach((s, i) => {
    const m = new RegExp(`\\n@@@ ${i}\\n([\\s\\S]*?)\\n?\\n@@@ ${i} rc=(\\d+)\\n`).exec(stdout)
    if (!m) { t.fail(`$ ${s.command}: did not run`, diag); return }
    const got = m[1] === '' ? [] : m[1].split('\n')
    const same = got.length === s.expected.length && got.every((line, j) => s.expected[j] === '…' ? line !== '' : line === s.expected[j])
    t.ok(same, `$ ${s.command}`, { got: got.join('\n'), expected: s.expected.join('\n'), exit: Number(m[2]) })
  })

  const lines = log.split('\n').filter(Boolean).map((l) => JSON.parse(l) as Record<string, any>)
  const started = lines.find((l) => l.msg === 'portcullis started')
  t.match(started?.config?.upstream, { url: engine().dockerHost, from: 'DOCKER_HOST' }, 'the gateway forwarded to the engine named by DOCKER_HOST')
  const requests = lines.filter((l) => l.msg === 'request' || l.msg === 'request failed')
  t.ok(requests.some((l) => l.subject === 'alice' && l.tenant === 'acme' && l.auth === 'jwt'), 'alice came with her token')
  t.ok(requests.some((l) => l.subject === 'bob' && l.tenant === 'globex' && l.auth === 'jwt'), 'bob came with his')
  t.ok(lines.some((l) => l.msg === 'stopped'), 'kill %1 stopped the gateway cleanly')
  t.notOk(fs.existsSync(path.join(dir, 'tenants.sock')), 'and it removed its sockets')
})
