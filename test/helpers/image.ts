/**
 * The Portcullis image (deploy/Dockerfile), built on the private test engine. No
 * registry is reachable, so its base (NODE_IMAGE) is made here: a root filesystem with
 * this machine's own node (at /usr/local/bin/node, as in the official image), the
 * libraries `ldd` lists, and /etc/passwd and /etc/group with the official image's
 * `node` user (uid 1000), `docker import`ed. The app goes in through the `prebuilt`
 * target (deploy/prebuilt.sh: this checkout's dist/ and production node_modules).
 */
import { execFileSync, spawnSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { CLI28, engine } from './gateway'

export const NODE_BASE = 'portcullis-test/node-base:20'
export const IMAGE = 'portcullis-test/portcullis:dev'
const REPO = path.resolve(__dirname, '../../..')

export function docker (args: readonly string[], opts: { input?: Buffer | string, allowFail?: boolean, env?: NodeJS.ProcessEnv, cwd?: string } = {}): { code: number | null, stdout: string, stderr: string } {
  const r = spawnSync(CLI28, args, {
    input: opts.input,
    cwd: opts.cwd,
    env: { ...process.env, DOCKER_HOST: engine().dockerHost, DOCKER_BUILDKIT: '0', ...opts.env },
    maxBuffer: 64 * 1024 * 1024,
  })
  const out = { code: r.status, stdout: r.stdout?.toString() ?? '', stderr: r.stderr?.toString() ?? '' }
  if (!opts.allowFail && out.code !== 0) throw new Error(`docker ${args.join(' ')}: exit ${out.code}\n${out.stderr}`)
  return out
}

function copyResolved (src: string, root: string): void {
  const dest = path.join(root, src)
  fs.mkdirSync(path.dirname(dest), { recursive: true })
  fs.copyFileSync(fs.realpathSync(src), dest)
  fs.chmodSync(dest, 0o755)
}

/** The NODE_IMAGE stand-in: node and its libraries, nothing else (no shell). */
function makeNodeBase (): void {
  if (docker(['image', 'inspect', NODE_BASE], { allowFail: true }).code === 0) return
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'pci-root-'))
  try {
    const node = fs.realpathSync(process.execPath)
    fs.mkdirSync(path.join(root, 'usr/local/bin'), { recursive: true })
    fs.copyFileSync(node, path.join(root, 'usr/local/bin/node'))
    fs.chmodSync(path.join(root, 'usr/local/bin/node'), 0o755)
    const ldd = execFileSync('ldd', [node], { encoding: 'utf8' })
    for (const m of ldd.matchAll(/(\/\S+)\s+\(0x/g)) copyResolved(m[1]!, root)
    fs.mkdirSync(path.join(root, 'etc'))
    fs.writeFileSync(path.join(root, 'etc/passwd'), 'root:x:0:0:root:/root:/sbin/nologin\nnode:x:1000:1000::/home/node:/sbin/nologin\n')
    fs.writeFileSync(path.join(root, 'etc/group'), 'root:x:0:\nnode:x:1000:\n')
    fs.mkdirSync(path.join(root, 'tmp'))
    fs.chmodSync(path.join(root, 'tmp'), 0o1777)
    const tar = execFileSync('tar', ['-C', root, '--owner=0', '--group=0', '-c', '.'], { maxBuffer: 512 * 1024 * 1024 })
    docker(['import', '-c', 'ENV PATH=/usr/local/bin:/usr/bin:/bin', '-', NODE_BASE], { input: tar })
  } finally {
    fs.rmSync(root, { recursive: true, force: true })
  }
}

/**
 * Runs `f` holding the checkout's image-build lock: the test files that build the image
 * run in parallel, and deploy/prebuilt.sh rewrites one `.prebuilt/` directory. A lock left
 * by a process that is gone is taken over.
 */
function withBuildLock (f: () => void): void {
  const lock = path.join(REPO, '.prebuilt.lock')
  const deadline = Date.now() + 10 * 60_000
  for (;;) {
    try {
      fs.mkdirSync(lock)
      fs.writeFileSync(path.join(lock, 'pid'), String(process.pid))
      break
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err
      const holder = Number(fs.readFileSync(path.join(lock, 'pid'), { encoding: 'utf8', flag: 'a+' }))
      let alive = true
      if (holder > 0) { try { process.kill(holder, 0) } catch { alive = false } }
      if (!alive) { fs.rmSync(lock, { recursive: true, force: true }); continue }
      if (Date.now() > deadline) throw new Error(`the image-build lock ${lock} is held by ${holder || 'a process starting'}`)
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 200)
    }
  }
  try { f() } finally { fs.rmSync(lock, { recursive: true, force: true }) }
}

let built = false
/** Builds deploy/Dockerfile's `prebuilt` target from this checkout (once per process). */
export function buildImage (): void {
  if (built) return
  makeNodeBase()
  withBuildLock(() => {
    execFileSync(path.join(REPO, 'deploy/prebuilt.sh'), { cwd: REPO, env: { ...process.env, PORTCULLIS_PREBUILT_SKIP_BUILD: '1' }, stdio: 'pipe' })
    docker(['build', '-q', '--build-arg', `NODE_IMAGE=${NODE_BASE}`, '--target', 'prebuilt', '-f', 'deploy/Dockerfile', '-t', IMAGE, '.'], { cwd: REPO })
  })
  built = true
}

/** The engine socket's group, for `--group-add` (the image's user is not root). */
export function engineSocketGid (): number {
  return fs.statSync(engine().socket).gid
}
