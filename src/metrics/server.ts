/**
 * The metrics listener: its own fastify instance on its own address (config
 * `metrics.listen`), separate from the engine-facing listeners, so that scraping
 * and health probes never pass through the policy and the Engine API never answers here.
 *
 *   GET /metrics  Prometheus text format (also refreshes portcullis_ready)
 *   GET /healthz  200 {"status":"ok"} while the process is up
 *   GET /readyz   200 when the engine is reachable and a policy is loaded, else 503
 *
 * Anything else is 404 (HEAD and other methods included).
 */
import type { AddressInfo } from 'node:net'
import Fastify from 'fastify'
import type { Logger } from 'pino'
import type { Metrics } from './index'

export interface Readiness {
  readonly engine: boolean
  readonly policy: boolean
  readonly detail?: object
}

export type ReadinessCheck = () => Promise<Readiness>

export interface MetricsServer {
  /** `host:port` actually bound (IPv6 in brackets). */
  readonly address: string
  close (): Promise<void>
}

export interface MetricsServerOptions {
  /** A readiness check that takes longer counts as failing; default 2000 ms. */
  readonly readinessTimeoutMs?: number
}

const NO_STORE = { 'cache-control': 'no-store' }

/** Runs the check with a time limit; a check that throws or times out fails every part. */
async function check (readiness: ReadinessCheck, timeoutMs: number): Promise<Readiness & { error?: string }> {
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => reject(new Error(`readiness check timed out after ${timeoutMs} ms`)), timeoutMs)
  })
  try {
    const r = await Promise.race([readiness(), timeout])
    return { engine: r.engine === true, policy: r.policy === true, ...(r.detail !== undefined ? { detail: r.detail } : {}) }
  } catch (err) {
    return { engine: false, policy: false, error: err instanceof Error ? err.message : String(err) }
  } finally {
    clearTimeout(timer)
  }
}

export async function startMetricsServer (
  listen: { readonly host: string, readonly port: number },
  metrics: Pick<Metrics, 'contentType' | 'setReadiness' | 'metrics'>,
  readiness: ReadinessCheck,
  log: Logger,
  opts: MetricsServerOptions = {}
): Promise<MetricsServer> {
  const timeoutMs = opts.readinessTimeoutMs ?? 2000
  const app = Fastify({
    logger: false,
    exposeHeadRoutes: false,
    return503OnClosing: true,
    forceCloseConnections: true,
    routerOptions: { caseSensitive: true, ignoreTrailingSlash: false, ignoreDuplicateSlashes: false },
  })

  app.get('/metrics', async (_request, reply) => {
    metrics.setReadiness(await check(readiness, timeoutMs))
    let text: string
    try {
      text = await metrics.metrics()
    } catch (err) {
      log.error({ err: { message: (err as Error).message } }, 'metrics: collecting failed')
      return reply.code(500).headers(NO_STORE).type('application/json').send({ message: 'collecting metrics failed' })
    }
    return reply.code(200).headers(NO_STORE).type(metrics.contentType).send(text)
  })

  app.get('/healthz', async (_request, reply) => {
    return reply.code(200).headers(NO_STORE).send({ status: 'ok' })
  })

  app.get('/readyz', async (_request, reply) => {
    const r = await check(readiness, timeoutMs)
    metrics.setReadiness(r)
    const failing = (['engine', 'policy'] as const).filter((k) => !r[k])
    const body = {
      status: failing.length === 0 ? 'ready' : 'not ready',
      engine: r.engine,
      policy: r.policy,
      ...(failing.length ? { failing } : {}),
      ...(r.error !== undefined ? { error: r.error } : {}),
      ...(r.detail !== undefined ? { detail: r.detail } : {}),
    }
    return reply.code(failing.length === 0 ? 200 : 503).headers(NO_STORE).send(body)
  })

  app.setNotFoundHandler((_request, reply) => {
    void reply.code(404).headers(NO_STORE).send({ message: 'not found' })
  })

  await app.listen({ host: listen.host, port: listen.port })
  const addr = app.server.address() as AddressInfo
  const address = `${addr.address.includes(':') ? `[${addr.address}]` : addr.address}:${addr.port}`
  log.info({ address }, 'metrics listening')
  return {
    address,
    async close () {
      await app.close()
    },
  }
}
