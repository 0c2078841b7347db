/**
 * The pipeline's view of a request as the audit trail's input (AuditInput).
 * The audit module knows nothing of the gateway: it records what it is given.
 */
import { decodeBody } from '../api/body/decode'
import type { AuditEventKind, AuditInput } from '../audit'
import { buildInput, zeroFacts } from '../policy/facts'
import type { RequestContext } from './context'

/** The operations whose records carry a security summary (audit/record.ts), worked out from facts. */
const SUMMARIZED = new Set(['ContainerCreate', 'ServiceCreate', 'ServiceUpdate', 'ContainerExec'])

export interface ContextExtras {
  /** Default: now. */
  readonly time?: number
  /** Default: since the request started. */
  readonly durationMs?: number
  /** The policy's facts (Evaluation.input); worked out here from the body when the policy did not judge it. */
  readonly facts?: AuditInput['facts']
  /** The decoded body (Evaluation.body); default: ctx.body, the canonical bytes forwarded. */
  readonly body?: unknown
  /** Whether the record reads the policy's facts (AuditInput.policyFacts: levels `facts` and `request`); default true. */
  readonly policyFacts?: boolean
  /** ExecStart: the exec's command, if the caller knows it. */
  readonly command?: readonly string[]
  /** session.end: the exec's exit code, when known. */
  readonly exitCode?: number | null
}

export function inputFromContext (ctx: RequestContext, event: AuditEventKind, extras: ContextExtras = {}): AuditInput {
  const t = ctx.target
  return {
    event,
    time: extras.time ?? Date.now(),
    req: ctx.id,
    listener: ctx.listener,
    client: ctx.remote,
    method: ctx.method,
    identity: ctx.identity ?? null,
    target: t === undefined
      ? null
      : { operation: t.operation.id, kind: t.operation.kind, param: t.operation.param, resource: t.resource, apiVersion: t.apiVersion, query: t.query },
    decision: ctx.decision ?? null,
    rewrites: ctx.rewrites ?? [],
    facts: extras.facts ?? factsOf(ctx, extras.body ?? ctx.body),
    policyFacts: extras.facts && extras.policyFacts !== false ? nonZeroFacts(extras.facts) : null,
    body: extras.body ?? ctx.body,
    command: extras.command ?? null,
    status: ctx.status ?? null,
    bytesIn: ctx.bytesIn,
    bytesOut: ctx.bytesOut,
    durationMs: extras.durationMs ?? performance.now() - ctx.startedAt,
    upstreamMs: ctx.upstreamMs ?? null,
    error: ctx.error ? { code: ctx.error.code, message: ctx.error.message } : null,
    aborted: ctx.aborted ?? null,
    hijack: ctx.hijack ?? null,
    exitCode: extras.exitCode ?? null,
  }
}

/**
 * A request the policy did not judge (refused earlier, or failed) still gets the facts
 * of its body in the record, worked out as the policy would have (buildInput).
 */
function factsOf (ctx: RequestContext, body: unknown): AuditInput['facts'] {
  const t = ctx.target
  if (t === undefined || !SUMMARIZED.has(t.operation.id)) return null
  let value = body
  if (value instanceof Uint8Array) {
    if (value.length === 0) return null
    try {
      value = decodeBody(t.operation.id, Buffer.from(value.buffer, value.byteOffset, value.length)).value
    } catch {
      return null
    }
  }
  return buildInput(t.operation.id, t.operation.kind, t.resource ?? '', t.query, value)
}

const FACT_NAMES = Object.keys(zeroFacts())

function isZero (v: unknown): boolean {
  if (Array.isArray(v)) return v.length === 0
  if (v !== null && typeof v === 'object') return Object.values(v).every(isZero)
  return v === false || v === '' || v === 0 || v === null || v === undefined
}

/**
 * The facts the policy judged, without the ones at their zero value (audit levels
 * `facts` and `request`, for `policy learn`): picked by the vocabulary's names, so
 * nothing else the input holds (its body, its query) is copied.
 */
function nonZeroFacts (facts: object): Record<string, unknown> {
  const out: Record<string, unknown> = {}
  for (const name of FACT_NAMES) {
    const v = (facts as Record<string, unknown>)[name]
    if (!isZero(v)) out[name] = v
  }
  return out
}
