/**
 * The per-request context. Each stage adds its result here; the operational log,
 * and later the audit record and metrics, are written from it when the request ends.
 */
import { randomUUID } from 'node:crypto'
import type { Identity } from './authenticate'
import type { Target } from '../api/catalog/route'
import type { Decision } from '../policy/engine'
import type { PolicyInput } from '../policy/facts'
import type { AppliedRewrite } from '../policy/rewrite'
import type { GatewayError } from '../api/errors'
import type { BodyFilter, LocalAnswer, ResponseFilter } from './exchange'
import type { BodyHold } from './budget'
import type { Turn } from './turns'

export interface RequestContext {
  readonly id: string
  readonly listener: string
  readonly remote: string
  readonly method: string
  readonly url: string
  readonly startedAt: number
  target?: Target
  /** Who is making the request, once authenticated. */
  identity?: Identity
  /** The policy's decision, and the rewrites applied before it. */
  decision?: Decision
  rewrites?: readonly AppliedRewrite[]
  /** What the policy judged: the facts and the decoded (rewritten) body, for the audit record. */
  facts?: PolicyInput
  decodedBody?: unknown
  /** An exec session's command, and its exit code once the session ends, as the engine reports them. */
  execCommand?: readonly string[]
  exitCode?: number | null
  /** Which audit records have been written for this request. */
  audited?: 'request' | 'session'
  /** For operations with an inspected body: exactly the bytes evaluated and forwarded. */
  body?: Buffer
  /** What the body is charged to in the gateway's body budget, until the request lets go of it. */
  hold?: BodyHold
  /** The identity's slot this request is worked on in (turns.ts). */
  turn?: Turn
  /** Gives back the session or stream slot this request holds under the rate limits (rates.ts); called in finish(). */
  opened?: () => void
  /** Gives back the identity's large-body lane (turns.ts), once the large body has been judged. */
  large?: () => void
  /** The request target to forward when tenancy rewrote it (full ids, owner-label filters). */
  upstreamUrl?: string
  /** Request headers the gateway sets upstream (registry credentials). */
  upstreamHeaders?: Readonly<Record<string, string>>
  /** How the answer is narrowed to the caller's tenant. */
  respond?: ResponseFilter
  /** How an engine error's message is put in the tenant's names (tenancy/names.ts). */
  errorText?: (message: string) => string
  /** How a streamed request body is rewritten on its way to the engine (tenancy). */
  bodyFilter?: BodyFilter
  /** An answer the gateway gives itself instead of forwarding (tenancy). */
  answer?: LocalAnswer
  /** Tenancy's end-of-request work (quota reservations released), run by the pipeline's finish. */
  settled?: (status: number) => void
  /** `upgrade` (101 relayed) or `raw` (200 + raw stream) once a hijack is established. */
  hijack?: 'upgrade' | 'raw'
  status?: number
  bytesIn: number
  bytesOut: number
  upstreamMs?: number
  error?: GatewayError
  /** Why the request ended early, if it did: `client-closed`, `shutdown`, `upstream-error`, `not-recorded` (its audit record could not be written). */
  aborted?: string
}

export function newContext (listener: string, remote: string, method: string, url: string): RequestContext {
  return { id: randomUUID(), listener, remote, method, url, startedAt: performance.now(), bytesIn: 0, bytesOut: 0 }
}

export function elapsedMs (ctx: RequestContext): number {
  return Math.round((performance.now() - ctx.startedAt) * 1000) / 1000
}
