/**
 * wrk (Debian's) over loopback TCP: sub-millisecond latency percentiles that a Node
 * load generator on the same 2 cores cannot give. A Lua `done()` prints one JSON line
 * with the request count, duration and the 50th/99th latency percentiles in µs.
 *
 * The engine's TCP port lives in its own network namespace (test/engine/engine.ts),
 * so for the direct side wrk runs under `nsenter --net=/proc/<dockerd>/ns/net`;
 * loopback costs the same in either namespace.
 */
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'

export interface WrkTarget {
  readonly host: string
  readonly port: number
  readonly headers: Readonly<Record<string, string>>
  /** Run wrk in this process's network namespace (the engine's). */
  readonly netnsPid?: number
}

export interface WrkRun {
  requests: number
  seconds: number
  reqPerSec: number
  p50Us: number
  p99Us: number
  meanUs: number
  errors: number
  non2xx: number
}

const SCRIPT = `
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('WRKJSON {"requests":%d,"durationUs":%d,"p50":%d,"p99":%d,"mean":%.1f,"errors":%d,"non2xx":%d}\\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99), latency.mean,
    e.connect + e.read + e.write + e.timeout, e.status))
end
`

export function writeWrkScript (dir: string): string {
  const file = path.join(dir, 'wrk-report.lua')
  fs.writeFileSync(file, SCRIPT)
  return file
}

export async function wrk (script: string, target: WrkTarget, urlPath: string, threads: number, connections: number, seconds: number): Promise<WrkRun> {
  const args = ['-t', String(threads), '-c', String(connections), '-d', `${seconds}s`, '--timeout', '10s', '-s', script]
  for (const [k, v] of Object.entries(target.headers)) args.push('-H', `${k}: ${v}`)
  args.push(`http://${target.host}:${target.port}${urlPath}`)
  const [cmd, argv] = target.netnsPid !== undefined
    ? ['nsenter', [`--net=/proc/${target.netnsPid}/ns/net`, 'wrk', ...args]]
    : ['wrk', args]
  const out = await new Promise<string>((resolve, reject) => {
    const child = spawn(cmd, argv, { stdio: ['ignore', 'pipe', 'pipe'] })
    let text = ''
    child.stdout.on('data', (b: Buffer) => { text += b.toString() })
    child.stderr.on('data', (b: Buffer) => { text += b.toString() })
    const timer = setTimeout(() => child.kill('SIGKILL'), (seconds + 30) * 1000)
    child.on('error', reject)
    child.on('close', (code) => {
      clearTimeout(timer)
      if (code === 0) resolve(text)
      else reject(new Error(`wrk ${urlPath} on port ${target.port} exited ${code}: ${text.trim().slice(-500)}`))
    })
  })
  const line = out.split('\n').find((l) => l.startsWith('WRKJSON '))
  if (!line) throw new Error(`wrk printed no report: ${out.slice(-500)}`)
  const j = JSON.parse(line.slice(8)) as { requests: number, durationUs: number, p50: number, p99: number, mean: number, errors: number, non2xx: number }
  const secs = j.durationUs / 1e6
  return { requests: j.requests, seconds: secs, reqPerSec: j.requests / secs, p50Us: j.p50, p99Us: j.p99, meanUs: j.mean, errors: j.errors, non2xx: j.non2xx }
}
