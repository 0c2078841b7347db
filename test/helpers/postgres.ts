/**
 * A private PostgreSQL server for tests, from Debian's `postgresql` package: its own
 * cluster in /tmp/pcpg-* (initdb as the `postgres` user), on a free loopback port and
 * a socket in that directory, password authentication (scram-sha-256) for one role.
 * No system cluster is touched. `stop()` stops it and removes the directory.
 */
import { execFile } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { Client } from 'pg'

export interface TestPostgres {
  /** Connection string without the password (give it as PGPASSWORD). */
  readonly url: string
  readonly password: string
  readonly port: number
  readonly dir: string
  /** Run SQL as the test role and return the rows. */
  query (sql: string, values?: unknown[]): Promise<Array<Record<string, unknown>>>
  /** Stop the server (its data stays) and start it again. */
  pause (): Promise<void>
  resume (): Promise<void>
  stop (): Promise<void>
}

const USER = 'portcullis'
const DATABASE = 'portcullis'

function sh (cmd: string, args: readonly string[], env: NodeJS.ProcessEnv = process.env): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(cmd, args, { env, maxBuffer: 16 * 1024 * 1024, timeout: 120_000 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`${cmd} ${args.join(' ')}: ${err.message}\n${stderr}`))
      else resolve(stdout)
    })
  })
}

/** Debian installs the server in /usr/lib/postgresql/<major>/bin; the newest one there. */
function binDir (): string | undefined {
  const root = '/usr/lib/postgresql'
  const majors = fs.existsSync(root) ? fs.readdirSync(root).filter((d) => fs.existsSync(path.join(root, d, 'bin', 'initdb'))) : []
  majors.sort((a, b) => Number(b) - Number(a))
  return majors.length ? path.join(root, majors[0], 'bin') : undefined
}

/** As the engine harness installs docker.io: Debian's package when the server is missing. */
async function ensurePostgres (): Promise<string> {
  let bin = binDir()
  if (bin) return bin
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' }
  console.error('# installing postgresql')
  await sh('apt-get', ['update', '-qq'], env)
  await sh('apt-get', ['install', '-y', '-qq', '--no-install-recommends', 'postgresql'], env)
  bin = binDir()
  if (!bin) throw new Error('postgresql installed, but no /usr/lib/postgresql/*/bin/initdb')
  return bin
}

async function freePort (): Promise<number> {
  return await new Promise((resolve, reject) => {
    const s = net.createServer()
    s.once('error', reject)
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as net.AddressInfo).port
      s.close(() => resolve(port))
    })
  })
}

export async function startPostgres (): Promise<TestPostgres> {
  const bin = await ensurePostgres()
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pcpg-'))
  const data = path.join(dir, 'data')
  const password = randomBytes(12).toString('hex')
  const asPostgres = async (tool: string, args: string[]): Promise<string> => await sh('runuser', ['-u', 'postgres', '--', path.join(bin, tool), ...args])
  let started = false
  const port = await freePort()
  const ctl = async (action: 'start' | 'stop'): Promise<void> => {
    if (action === 'start') {
      await asPostgres('pg_ctl', ['-D', data, '-l', path.join(dir, 'server.log'), '-w', '-t', '60', '-o', `-c listen_addresses=127.0.0.1 -p ${port} -c unix_socket_directories=${dir} -c fsync=off -c full_page_writes=off`, 'start'])
      started = true
    } else {
      await asPostgres('pg_ctl', ['-D', data, '-w', '-t', '60', '-m', 'fast', 'stop'])
      started = false
    }
  }
  const remove = (): void => { fs.rmSync(dir, { recursive: true, force: true }) }
  try {
    // The postgres user owns the cluster; initdb refuses to run as root.
    fs.chmodSync(dir, 0o755)
    fs.writeFileSync(path.join(dir, 'pw'), password)
    await sh('chown', ['-R', 'postgres:postgres', dir])
    await asPostgres('initdb', ['-D', data, '-U', USER, '--auth=scram-sha-256', `--pwfile=${path.join(dir, 'pw')}`, '-E', 'UTF8', '--no-instructions'])
    fs.rmSync(path.join(dir, 'pw'))
    await ctl('start')
    const admin = new Client({ host: '127.0.0.1', port, user: USER, password, database: 'postgres' })
    await admin.connect()
    await admin.query(`CREATE DATABASE ${DATABASE}`)
    await admin.end()
  } catch (err) {
    if (started) await ctl('stop').catch(() => {})
    remove()
    throw err
  }
  return {
    url: `postgres://${USER}@127.0.0.1:${port}/${DATABASE}`,
    password,
    port,
    dir,
    async query (sql, values) {
      const c = new Client({ host: '127.0.0.1', port, user: USER, password, database: DATABASE })
      await c.connect()
      try {
        return (await c.query(sql, values)).rows as Array<Record<string, unknown>>
      } finally {
        await c.end()
      }
    },
    async pause () { await ctl('stop') },
    async resume () { await ctl('start') },
    async stop () {
      try {
        if (started) await asPostgres('pg_ctl', ['-D', data, '-w', '-t', '30', '-m', 'immediate', 'stop'])
      } finally {
        started = false
        remove()
      }
    },
  }
}
