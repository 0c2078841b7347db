/**
 * `node dist/bench/create-requests.js`: the engine requests a tenant's container create,
 * start and remove cost through Portcullis (the bench's deployment and create body), read
 * on a counting relay in front of a private engine. Prints the mean per operation over
 * CREATE_REQUESTS_N cycles (after one not counted), then per create for as many creates
 * in a row whose containers are kept, and the request lines of the last cycle.
 */
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import jwt from 'jsonwebtoken'
import { startEngine, stopEngine } from '../test/engine/engine'
import { API, call, endpoint } from './clients'
import { startGatewayProcess } from './gateway'
import { freePort } from './peer'
import { writeBenchPolicy } from './policy'
import { startRelay } from './relay'

const N = Number(process.env.CREATE_REQUESTS_N ?? 10)

function body (image: string): Record<string, unknown> {
  return {
    Image: image,
    Cmd: ['true'],
    Env: ['BENCH=1'],
    Labels: { 'com.example.bench': 'portcullis' },
    HostConfig: { Memory: 256 * 1024 * 1024, PidsLimit: 512, CapDrop: ['NET_RAW'], SecurityOpt: ['no-new-privileges=true'], NetworkMode: 'none' },
  }
}

async function main (): Promise<void> {
  const dir = fs.mkdtempSync('/tmp/pcb-creq-')
  const engine = await startEngine(dir)
  const relay = await startRelay(path.join(dir, 'relay.sock'), engine.socket)
  const gwDir = path.join(dir, 'gateway')
  fs.mkdirSync(gwDir)
  const policyDir = path.join(gwDir, 'policies')
  writeBenchPolicy(policyDir, 1000)
  const secret = randomBytes(32).toString('hex')
  const token = jwt.sign({ sub: 'bench', tenant: 'team-bench', roles: ['tenant'] }, secret, { algorithm: 'HS256', expiresIn: '1h' })
  const gw = await startGatewayProcess(gwDir, relay.socket, { policyDir, jwtSecret: secret, tcpPort: await freePort() })
  const ep = endpoint(gw.tokenSocket, 1, { authorization: `Bearer ${token}` })
  try {
    await sleep(500)
    const counts = { create: 0, start: 0, remove: 0 }
    let lines: string[] = []
    for (let i = 0; i <= N; i++) {
      const c0 = relay.count()
      const id = (await call<{ Id: string }>(ep, 'POST', `${API}/containers/create`, body(engine.image))).Id
      const c1 = relay.count()
      await call(ep, 'POST', `${API}/containers/${id}/start`)
      const c2 = relay.count()
      await call(ep, 'DELETE', `${API}/containers/${id}?force=1`)
      const c3 = relay.count()
      if (i === 0) continue
      counts.create += c1 - c0
      counts.start += c2 - c1
      counts.remove += c3 - c2
      lines = relay.recent().slice(-(c3 - c0))
    }
    // Creates in a row, the containers kept (the bench's ContainerCreate row).
    const kept: string[] = []
    const k0 = relay.count()
    for (let i = 0; i < N; i++) kept.push((await call<{ Id: string }>(ep, 'POST', `${API}/containers/create`, body(engine.image))).Id)
    const inRow = (relay.count() - k0) / N
    for (const id of kept) await call(ep, 'DELETE', `${API}/containers/${id}?force=1`)
    console.log(`engine requests per operation (mean of ${N}): create ${counts.create / N}, start ${counts.start / N}, remove ${counts.remove / N}; create in a row (containers kept) ${inRow}`)
    console.log('last cycle:\n  ' + lines.join('\n  '))
  } finally {
    await ep.pool.destroy()
    await gw.stop()
    await relay.close()
    await stopEngine(engine)
  }
}

main().catch((err) => { console.error(err); process.exitCode = 1 })
