/**
 * One tenant's flood, in a process of its own (so that its answers do not queue behind
 * the measuring client's, nor its own behind them): `concurrency` workers send the same
 * request again as soon as the last one is answered, until SIGTERM; then it prints
 * `{"requests":n,"statuses":{...},"errors":n}` and exits.
 *
 *   node dist/bench/flood.js '{"socket":"/x.sock","headers":{...},"method":"GET","path":"/_ping","concurrency":32}'
 *
 * `bodyBytes` sends a JSON body of that size (`body` padded by an `Env` entry).
 */
import { Pool } from 'undici'

interface FloodSpec {
  socket: string
  headers: Record<string, string>
  method: 'GET' | 'POST'
  path: string
  concurrency: number
  /** A JSON body (sent as is), padded to `bodyBytes` with an Env entry when given. */
  body?: Record<string, unknown>
  bodyBytes?: number
}

function padded (body: Record<string, unknown>, size: number): Buffer {
  const base = JSON.stringify({ ...body, Env: ['PAD='] })
  return Buffer.from(base.replace('"PAD="', `"PAD=${'x'.repeat(Math.max(0, size - base.length))}"`))
}

async function main (): Promise<void> {
  const spec = JSON.parse(process.argv[2] ?? '{}') as FloodSpec
  const pool = new Pool('http://localhost', { socketPath: spec.socket, connections: spec.concurrency, headersTimeout: 0, bodyTimeout: 0 })
  const body = spec.body ? (spec.bodyBytes ? padded(spec.body, spec.bodyBytes) : Buffer.from(JSON.stringify(spec.body))) : undefined
  const headers = body ? { ...spec.headers, 'content-type': 'application/json' } : spec.headers
  const statuses: Record<string, number> = {}
  let requests = 0
  let errors = 0
  let stop = false
  process.on('SIGTERM', () => { stop = true })
  const worker = async (): Promise<void> => {
    // eslint-disable-next-line no-unmodified-loop-condition -- set by the caller between awaits
    while (!stop) {
      try {
        const r = await pool.request({ method: spec.method, path: spec.path, headers, body })
        await r.body.arrayBuffer()
        // A 429 or 503 counts like any answer: a flooding client retries at once, whatever Retry-After says.
        statuses[r.statusCode] = (statuses[r.statusCode] ?? 0) + 1
        requests++
      } catch {
        errors++
        await new Promise((resolve) => setTimeout(resolve, 10))
      }
    }
  }
  await Promise.all(Array.from({ length: spec.concurrency }, worker))
  process.stdout.write(JSON.stringify({ requests, statuses, errors }) + '\n')
  await pool.destroy()
}

void main()
