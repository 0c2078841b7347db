/**
 * The gateway's own policy admin API, answered where other operations are forwarded.
 * By then the request went through every stage (route, authentication, Casbin
 * authorization: only `admin` in policies/base.csv, tenant scoping refuses it too);
 * the pipeline writes its audit record and log line and counts it like any other.
 *
 *   GET    /_portcullis/policy   PortcullisPolicyList    the enforce set's lines in force on this replica
 *   POST   /_portcullis/policy   PortcullisPolicyAdd     {"lines": [["p", sub, tenant, op, kind, effect, rule, cond], ["g", ...]]}
 *   DELETE /_portcullis/policy   PortcullisPolicyRemove  same body: remove exactly these lines
 *
 * A change is compiled completely (with the database's current lines, under its lock)
 * before anything is written; a change that does not compile is a 400 naming every
 * problem and nothing is written. Answers are JSON; errors are the engine's
 * `{"message": ...}` shape (GatewayError, rendered by the pipeline).
 */
import type { ServerResponse } from 'node:http'
import type { PolicyLine } from '../policy/engine'
import { DatabaseError, PolicyChangeError, type PolicyStore } from '../policy/store'
import type { RequestContext } from './context'
import type { AnswerEvents } from './exchange'
import { GatewayError } from '../api/errors'

export type PolicyAdmin = (ctx: RequestContext, body: unknown, res: ServerResponse, on: AnswerEvents) => Promise<void>

/** At most this many lines per change: a change is validated and written in one transaction. */
const MAX_LINES = 10_000

/** `{"lines": [[ptype, field, ...], ...]}`: every field a string, ptype p or g. */
function parseLines (body: unknown): PolicyLine[] {
  const lines = (body !== null && typeof body === 'object' && !Array.isArray(body)) ? (body as { lines?: unknown }).lines : undefined
  const extra = body !== null && typeof body === 'object' ? Object.keys(body).filter((k) => k !== 'lines') : []
  if (extra.length) throw new GatewayError('BODY_INVALID', `unknown key ${JSON.stringify(extra[0])}: expected {"lines": [["p", ...], ["g", ...]]}`)
  if (!Array.isArray(lines) || lines.length === 0) throw new GatewayError('BODY_INVALID', 'expected {"lines": [["p", ...], ["g", ...]]} with at least one line')
  if (lines.length > MAX_LINES) throw new GatewayError('BODY_INVALID', `at most ${MAX_LINES} lines per change, got ${lines.length}`)
  return lines.map((l: unknown, i) => {
    if (!Array.isArray(l) || l.length < 2 || !l.every((f) => typeof f === 'string')) throw new GatewayError('BODY_INVALID', `lines[${i}]: expected a list of strings, [ptype, field, ...]`)
    if (l[0] !== 'p' && l[0] !== 'g') throw new GatewayError('BODY_INVALID', `lines[${i}]: ptype must be "p" or "g", got ${JSON.stringify(l[0])}`)
    if ((l as string[]).some((f) => f !== f.trim() || /[\r\n]/.test(f))) throw new GatewayError('BODY_INVALID', `lines[${i}]: fields may not start or end with spaces or contain line breaks`)
    return Object.freeze([...l as string[]])
  })
}

async function send (ctx: RequestContext, res: ServerResponse, on: AnswerEvents, status: number, value: unknown): Promise<void> {
  const body = Buffer.from(JSON.stringify(value) + '\n')
  ctx.status = status
  // The audit record goes out before the answer, as for forwarded requests.
  await on('finished')
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': String(body.length), 'cache-control': 'no-store' })
  res.end(body)
  ctx.bytesOut += body.length
}

export function policyAdmin (store: PolicyStore): PolicyAdmin {
  return async (ctx, body, res, on) => {
    const op = ctx.target!.operation.id
    if (op === 'PortcullisPolicyList') {
      const p = store.current
      await send(ctx, res, on, 200, { version: p.version, source: p.source, ...(store.database ? { database: store.database.where } : {}), lines: p.lines })
      return
    }
    const lines = parseLines(body)
    let result
    try {
      result = await store.change(op === 'PortcullisPolicyAdd' ? 'add' : 'remove', lines)
    } catch (err) {
      if (err instanceof PolicyChangeError) throw new GatewayError('POLICY_INVALID', `${op} refused, nothing was written: ${err.message}`)
      if (err instanceof DatabaseError) throw new GatewayError('POLICY_STORE_UNAVAILABLE', `${op} failed, the policy was not changed: ${err.message}`)
      throw err
    }
    await send(ctx, res, on, 200, { version: result.version, [op === 'PortcullisPolicyAdd' ? 'added' : 'removed']: result.changed, notified: result.notified })
  }
}
