/**
 * The request lifecycle, and the only module that knows its order:
 *
 *   listen -> route (operation id) -> authenticate -> the identity's turn -> rate limits
 *          -> read body (capped, counted, charged to the body budget) -> decode, rewrite,
 *          authorize (policy) -> scope to the tenant (ownership, references, owner
 *          labels, quotas, registry credentials) -> forward | hijack (answers narrowed
 *          to the tenant) -> audit record (before the answer completes; at a session's
 *          start and end) -> log line + metrics
 *
 * A request that becomes a long stream (a hijacked session once established, a
 * streamed answer once its head arrived) lets go of its body, decoded value and facts
 * then, keeping only what its last audit record reads (letGo).
 *
 * Two entry points feed the same stages: ordinary requests from the listener's
 * fastify instance, and requests Node hands over through its `upgrade` event.
 * Every stage throws coded GatewayErrors; only this module renders them.
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import type { Duplex } from 'node:stream'
import type { Logger } from 'pino'
import type { ListenerConfig } from '../config'
import { authorize, denialMessage } from '../policy/authorize'
import type { Policy } from '../policy/engine'
import type { HostPathMode } from '../policy/facts'
import type { AuditTrail } from '../audit'
import { inputFromContext } from './audit-input'
import { recordNeeds } from '../audit/record'
import type { Metrics, UpstreamErrorKind } from '../metrics'
import type { Caller, Identity } from './authenticate'
import type { ContainerCallers } from './callers'
import { hasBody, readCapped, readUpgradeBody, type BodyLimits } from './body'
import type { BodyBudget } from './budget'
import { LARGE_BODY, type Turns } from './turns'
import { RateRefusal, type RateAdmission } from './rates'
import { pruneTurn } from './prunes'
import type { Operation } from '../api/catalog/operations'
import { resolveTarget, type ApiWindow } from '../api/catalog/route'
import { elapsedMs, type RequestContext } from './context'
import { GatewayError, isGatewayError, renderError, toGatewayError } from '../api/errors'
import { answerLocally, forward } from './forward'
import { assertNoDuplicateHeaders } from './headers'
import { hijack, writeSocketError, type HijackClient } from './hijack'
import { execInfo, type Upstream } from './upstream'
import { encodeBody } from '../api/body/decode'
import { TenancyRefusal, type Tenancy } from './tenancy'
import type { AnswerEvent, AnswerEvents } from './exchange'
import type { PolicyAdmin } from './admin'
import { withEnvRedaction } from './redact'
import { judgeStoredBinds } from './host-paths'

export interface GatewayDeps {
  readonly api: ApiWindow
  readonly limits: { readonly jsonBodyBytes: number }
  /** The memory held for request bodies, all requests together and per identity (limits.bufferedBytes). */
  readonly budget: BodyBudget
  /** Each identity's share of the gateway's attention (turns.ts). */
  readonly turns: Turns
  /** Request rates and open sessions/streams per identity or tenant (rates.ts, config `rates`). */
  readonly rates: RateAdmission
  readonly upstream: Upstream
  readonly log: Logger
  readonly inflight: Inflight
  /** Who is making the request; throws UNAUTHENTICATED. */
  readonly authenticate: (req: IncomingMessage, listener: ListenerConfig, caller?: Caller) => Identity
  /** The calling containers of listeners with `containerIdentity` (callers.ts). */
  readonly callers?: ContainerCallers
  /** The policy in force now (swapped atomically on reload). */
  readonly policy: () => Policy
  /** Whether bind sources can be walked on this filesystem now (host-paths.ts). */
  readonly hostPaths: () => HostPathMode
  readonly metrics: Metrics
  readonly audit: AuditTrail
  readonly tenancy: Tenancy
  /** Answers the gateway's own policy admin API (operations of kind `policy`). */
  readonly admin: PolicyAdmin
}

/** What is in progress, so that shutdown can drain requests and close long streams. */
export class Inflight {
  private readonly streams = new Set<() => void>()
  private requests = 0
  private idle: Array<() => void> = []
  closing = false

  begin (): () => void {
    this.requests++
    return () => {
      if (--this.requests === 0) for (const f of this.idle.splice(0)) f()
    }
  }

  /** Register a long stream's closer; returns the function that unregisters it. */
  track (close: () => void): () => void {
    this.streams.add(close)
    return () => { this.streams.delete(close) }
  }

  get activeStreams (): number { return this.streams.size }
  get activeRequests (): number { return this.requests }

  /** Close every long stream now, then wait (at most `graceMs`) for the other requests to finish. */
  async drain (graceMs: number): Promise<void> {
    this.closing = true
    for (const close of [...this.streams]) close()
    if (this.requests === 0) return
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, graceMs)
      this.idle.push(() => { clearTimeout(timer); resolve() })
    })
  }
}

/**
 * On a listener whose callers are containers, which container is calling: decided
 * (the engine asked, if need be) before anything of the request is judged. A request
 * with credentials of its own is not looked up: they decide.
 */
async function identifyCaller (deps: GatewayDeps, listener: ListenerConfig, req: IncomingMessage, socket: Duplex): Promise<Caller | undefined> {
  if (listener.containerIdentity === undefined || req.headers.authorization !== undefined) return undefined
  if (deps.callers === undefined) throw new GatewayError('INTERNAL', 'the listener identifies containers, but the gateway follows none')
  const caller = await deps.callers.identify(socket as Socket, listener)
  deps.metrics.callerLookup(listener.name, caller.kind, caller.via)
  if (caller.kind === 'container' && caller.ignored !== undefined) {
    deps.log.warn({ listener: listener.name, container: caller.container.id, subject: `container:${caller.container.name}` }, `calling container: role labels ignored: ${caller.ignored}`)
  }
  return caller
}

/** Stages that run for every request, whatever its transport. */
function admit (deps: GatewayDeps, listener: ListenerConfig, ctx: RequestContext, req: IncomingMessage, caller?: Caller): void {
  if (deps.inflight.closing) throw new GatewayError('SHUTTING_DOWN', 'the gateway is shutting down')
  assertNoDuplicateHeaders(req.rawHeaders)
  // Go's ParseForm merges a form-encoded body into the parameters the engine reads,
  // ahead of the query string the gateway checked. No Docker client sends forms.
  if (/^\s*(application\/x-www-form-urlencoded|multipart\/form-data)/i.test(req.headers['content-type'] ?? '')) {
    throw new GatewayError('BODY_INVALID', 'form-encoded request bodies are not accepted')
  }
  ctx.target = resolveTarget(req.method ?? '', req.url ?? '', deps.api)
  ctx.identity = deps.authenticate(req, listener, caller)
}

/**
 * The identity's (or its tenant's) rate limits and caps on open sessions and streams
 * (rates.ts), before anything of the request's body is read. Checked in the identity's
 * turn (takeTurn), and refused like anything else refused there (the body unread, the
 * connection closed): a refusal is cheap, but a flood of them took the event loop from
 * everyone else. Bench section 7, one tenant's c32 `_ping` flood over its limit, another
 * tenant's `_ping` p50 during / alone: 41x with the check before the turn and the
 * connection kept, 33x in the turn with the connection kept (the flood got 3000 429s a
 * second), 10x as here, as for a ping flood that is let through. The slot a session or
 * stream takes is given back in finish(). A refusal is recorded as a denial by its rule
 * (`rates.<role>.<limit>`).
 */
function limitRate (deps: GatewayDeps, ctx: RequestContext): Promise<void> | undefined {
  const refused = (err: unknown): never => {
    if (err instanceof RateRefusal) ctx.decision = { decision: 'deny', rule: { policy: 'rates', rule: err.rule }, wouldDeny: [], policyVersion: deps.policy().version }
    throw err
  }
  try {
    const opened = deps.rates.admit(ctx.identity!, ctx.target!.operation)
    // Across workers the buckets are the primary's (cluster.ts): an answer to wait for.
    if (typeof opened !== 'function') return opened.then((o) => { ctx.opened = o }, refused)
    ctx.opened = opened
  } catch (err) {
    refused(err)
  }
}

/**
 * Operations that take no body still get small JSON objects from real clients, which
 * the engine ignores: docker-py sends `{}` with a push, dockerode repeats a call's
 * options (`{"t":5}` on a stop, `{"stream":true,...}` on an attach) beside the query.
 * Options that fit in a request head (which Node caps at 16 KiB) fit here; they are
 * read and checked like any body. Anything larger is refused before it is read.
 * (Form-encoded bodies, which Go would merge into the parameters, are refused in admit.)
 */
export const NO_BODY_MAX = 16 * 1024

/** Whose share a request counts against: its tenant's, else its subject's. */
function shareOf (ctx: RequestContext): string {
  const who = ctx.identity!
  return who.tenant !== null ? `tenant:${who.tenant}` : `subject:${who.subject}`
}

/**
 * Wait for the identity's turn (turns.ts) before its request is read and worked on, and
 * again for the engine's answer: between the two the engine has it, not the gateway.
 */
async function takeTurn (deps: GatewayDeps, ctx: RequestContext): Promise<void> {
  ctx.turn = await deps.turns.take(shareOf(ctx), ctx.identity!.tenant)
}

/** The engine's answer is the gateway's work again: in the identity's turn (kept, or taken anew if it lapsed). */
async function turnForAnswer (deps: GatewayDeps, ctx: RequestContext): Promise<void> {
  if (ctx.turn?.held) ctx.turn.answered()
  else if (ctx.identity) ctx.turn = await deps.turns.take(shareOf(ctx), ctx.identity.tenant)
}

/** How the body of `op` is read: its cap and the budget it is charged to. */
function bodyLimits (deps: GatewayDeps, ctx: RequestContext, op: Operation): BodyLimits {
  const who = ctx.identity!
  const hold = ctx.hold ??= deps.budget.open(shareOf(ctx), who.tenant)
  const take = (bytes: number): void => hold.take(bytes)
  if (op.body !== 'none') return { limit: deps.limits.jsonBodyBytes, take }
  return {
    limit: NO_BODY_MAX,
    take,
    tooLarge: (limit) => new GatewayError('BODY_TOO_LARGE', `${op.id} takes no request body: up to ${limit} bytes of JSON (the options some clients repeat there) are read, a larger body is refused unread`),
  }
}

/** Read the body of an operation that declares one, and whatever small body a body-less operation was sent. */
async function readBody (deps: GatewayDeps, ctx: RequestContext, req: IncomingMessage): Promise<void> {
  const op = ctx.target!.operation
  if (op.body === 'json' || (op.body === 'none' && hasBody(req))) {
    ctx.body = await readCapped(req, {
      ...bodyLimits(deps, ctx, op),
      // A large body announced (and fitting the budget) is read in the identity's large-body lane (turns.ts).
      ready: async (declared) => { if (declared > LARGE_BODY) ctx.large = await deps.turns.largeBody(shareOf(ctx), ctx.identity!.tenant) },
    })
  }
}

/**
 * A request that has become a long stream (`logs -f`, events, an attach or exec
 * session) may run for days: what only its check needed is let go now, its charge in
 * the body budget, the decoded body and the facts, and the canonical bytes unless its
 * last audit record reads them (recordNeeds: at level `request`, or for the few
 * operations whose record derives fields from the body; none of them streams).
 */
function letGo (deps: GatewayDeps, ctx: RequestContext): void {
  ctx.hold?.release()
  ctx.turn?.release()
  // Given back for good (release is once): not kept, with its timer, for the stream's life.
  ctx.turn = undefined
  const needs = recordNeeds(ctx.target?.operation.id ?? null, deps.audit.level)
  ctx.decodedBody = undefined
  if (!needs.facts) ctx.facts = undefined
  if (!needs.body) ctx.body = undefined
}

/**
 * Decode the body as the engine will, apply the policy's rewrites, evaluate, and keep
 * exactly the bytes evaluated as the bytes to forward. A denial names the rule.
 */
async function inspect (deps: GatewayDeps, ctx: RequestContext, req: IncomingMessage): Promise<unknown> {
  // One large body per identity is decoded and judged at a time (turns.ts); a chunked one
  // takes the lane now that its size is known.
  if (ctx.large === undefined && (ctx.body?.length ?? 0) > LARGE_BODY) ctx.large = await deps.turns.largeBody(shareOf(ctx), ctx.identity!.tenant)
  try {
    return await inspectNow(deps, ctx, req)
  } finally {
    ctx.large?.()
  }
}

async function inspectNow (deps: GatewayDeps, ctx: RequestContext, req: IncomingMessage): Promise<unknown> {
  const target = ctx.target!
  const identity = ctx.identity!
  const policy = deps.policy()
  let result
  try {
    result = await authorize(policy, identity, target, ctx.body, deps.hostPaths())
  } catch (err) {
    if (isGatewayError(err)) throw err
    throw new GatewayError('POLICY_FAILED', `policy evaluation failed for ${target.operation.id}`, { cause: err })
  }
  const { evaluation } = result
  ctx.decision = evaluation.decision
  ctx.rewrites = evaluation.rewrites
  ctx.facts = evaluation.input
  ctx.decodedBody = evaluation.body
  if (evaluation.decision.decision === 'deny') throw new GatewayError('FORBIDDEN', await denialMessage(policy, identity, target, evaluation))
  // A large body is encoded on a turn of the loop of its own (what else is ready goes first).
  if ((ctx.body?.length ?? 0) > LARGE_BODY) await new Promise((resolve) => setImmediate(resolve))
  ctx.body = result.body
  const scoped = await scope(deps, ctx, req, policy)
  // Read-only roles do not read secrets (redact.ts), whatever tenancy decided: after its narrowing.
  ctx.respond = withEnvRedaction(identity, target.operation, policy.tenancy, ctx.respond)
  // Fail closed before the engine acts: a request is only forwarded when its audit
  // record can be written (unless the operator chose audit.onFailure: open).
  if (deps.audit.onFailure === 'closed' && !deps.audit.healthy()) throw new GatewayError('AUDIT_UNAVAILABLE', 'the audit trail cannot be written; request refused')
  return scoped
}

/**
 * Scope an allowed request to the caller's tenant. What it changes (full ids, filters,
 * owner labels, credentials) is what is forwarded, and is recorded as a rewrite; a
 * refusal is recorded as a denial by the tenancy rule that made it.
 */
async function scope (deps: GatewayDeps, ctx: RequestContext, req: IncomingMessage, policy: Policy): Promise<unknown> {
  const clientAuth = req.headers['x-registry-auth']
  const scoped = await deps.tenancy.scope(ctx.identity!, ctx.target!, ctx.decodedBody, policy.tenancy, typeof clientAuth === 'string' ? clientAuth : undefined)
  if (scoped.decision === 'unscoped') return ctx.decodedBody
  if (scoped.decision === 'refused') {
    deniedByTenancy(ctx, scoped.error)
    throw scoped.error
  }
  if (scoped.remounts !== undefined) {
    try {
      await recheckBinds(deps, ctx, policy, scoped.remounts)
    } catch (err) {
      scoped.settled?.(0)
      throw err
    }
  }
  if (scoped.url) ctx.upstreamUrl = scoped.url
  const headers: Record<string, string> = { ...scoped.setHeaders }
  if (scoped.body !== undefined) {
    ctx.body = encodeBody(scoped.body)
    ctx.decodedBody = scoped.body
    // A body the client did not send (owner labels on a body-less commit): the engine reads a body only as JSON.
    if (req.headers['content-type'] === undefined) headers['content-type'] = 'application/json'
  }
  if (scoped.patch.length) ctx.rewrites = [...(ctx.rewrites ?? []), { id: 'tenancy', patch: scoped.patch }]
  if (Object.keys(headers).length) ctx.upstreamHeaders = headers
  if (scoped.respond) ctx.respond = scoped.respond
  if (scoped.errorText) ctx.errorText = scoped.errorText
  if (scoped.bodyFilter) ctx.bodyFilter = scoped.bodyFilter
  if (scoped.answer) ctx.answer = scoped.answer
  if (scoped.settled) ctx.settled = scoped.settled
  return ctx.decodedBody
}

/**
 * A tenant's start, restart or copy makes the engine mount the container's bind sources
 * again: they are judged again first (host-paths.ts judgeStoredBinds); a denial names
 * the rule.
 */
async function recheckBinds (deps: GatewayDeps, ctx: RequestContext, policy: Policy, id: string): Promise<void> {
  const evaluation = await judgeStoredBinds(deps.upstream, policy, ctx.identity!, ctx.target!, id, deps.hostPaths())
  if (evaluation === null) return
  ctx.decision = evaluation.decision
  ctx.facts = evaluation.input
  throw new GatewayError('FORBIDDEN', await denialMessage(policy, ctx.identity!, ctx.target!, evaluation))
}

/**
 * A tenancy refusal (while scoping, or while a body filter reads the body) is recorded as
 * a denial by its rule. A reference that names nothing on the engine at all is not a
 * refusal but the engine's own "no such object" (refusal.ts `absent`): the record keeps
 * the policy's decision and shows the 404 (or 400) the client got, so that a probe of
 * another tenant's object stands out from an ordinary miss (compose asking whether its
 * network exists yet).
 */
function deniedByTenancy (ctx: RequestContext, refusal: TenancyRefusal): void {
  if (refusal.absent) return
  if (ctx.decision) ctx.decision = { ...ctx.decision, decision: 'deny', rule: { policy: 'tenancy', rule: refusal.rule } }
}

/**
 * Write the audit record for `ctx`. The request record goes out before the answer
 * completes (forward/hijack await `finished` before the last byte; errors are recorded
 * before they are sent); a hijacked session gets a record when it is established and
 * one when it ends. The record is taken from `ctx` now; it is written with the others
 * of this turn of the event loop (AuditTrail.commit), and the promise settles once it
 * is. With audit.onFailure: closed a failed write rejects with AUDIT_UNAVAILABLE.
 */
async function audit (deps: GatewayDeps, ctx: RequestContext, event: 'request' | 'session.start' | 'session.end'): Promise<void> {
  try {
    const written = await deps.audit.commit(inputFromContext(ctx, event, { facts: ctx.facts, policyFacts: deps.audit.level !== 'metadata', body: ctx.decodedBody, exitCode: ctx.exitCode, ...(ctx.execCommand ? { command: ctx.execCommand } : {}) }))
    if (written) deps.metrics.auditWritten()
    else { deps.metrics.auditFailed(); deps.log.error({ req: ctx.id, op: ctx.target?.operation.id }, 'audit record dropped (audit.onFailure: open)') }
  } catch (err) {
    deps.metrics.auditFailed()
    deps.log.error({ req: ctx.id, op: ctx.target?.operation.id, err: { message: (err as Error).message } }, 'audit record not written')
    if (deps.audit.onFailure === 'closed') throw new GatewayError('AUDIT_UNAVAILABLE', 'the audit trail cannot be written', { cause: err })
  }
}

/** Docker's exec start, and Podman's own (catalog/libpod.ts). */
const isExecStart = (id: string | undefined): boolean => id === 'ExecStart' || id === 'ExecStartLibpod'

/** Exec sessions: the command (for both session records) before, the exit code after. */
async function execCommand (deps: GatewayDeps, ctx: RequestContext): Promise<void> {
  if (isExecStart(ctx.target?.operation.id) && ctx.target?.resource) ctx.execCommand = (await execInfo(deps.upstream, ctx.target.resource))?.command
}
async function sessionExit (deps: GatewayDeps, ctx: RequestContext): Promise<void> {
  if (ctx.hijack && isExecStart(ctx.target?.operation.id) && ctx.target?.resource) {
    ctx.exitCode = (await execInfo(deps.upstream, ctx.target.resource))?.exitCode ?? null
  }
}

/**
 * The one callback forward(), hijack() and the gateway's own answers are called with
 * (exchange.ts AnswerEvents): the request's audit record when its answer is finished, a
 * session's first record when it is established, letting go once it is a long stream,
 * the identity's turn for an answer the gateway reads. `ended` closes what it opened.
 */
function answerEvents (deps: GatewayDeps, ctx: RequestContext): { on: AnswerEvents, ended: () => void } {
  let closeSession: (() => void) | null = null
  function on (event: 'answering' | 'established' | 'finished'): Promise<void>
  function on (event: 'streaming'): void
  function on (event: AnswerEvent): void | Promise<void> {
    switch (event) {
      case 'answering': return turnForAnswer(deps, ctx)
      case 'streaming': letGo(deps, ctx); return
      case 'established': {
        // The record is taken before letGo drops what it reads.
        const written = audit(deps, ctx, 'session.start')
        ctx.audited = 'session'
        closeSession = deps.metrics.sessionOpened(ctx.listener)
        letGo(deps, ctx)
        return written
      }
      case 'finished':
        if (ctx.audited) return FINISHED
        ctx.audited = 'request'
        return audit(deps, ctx, 'request')
    }
  }
  return { on, ended: () => { closeSession?.() } }
}

const FINISHED = Promise.resolve()

/** How much of a refused upload is read and dropped before the refusal is sent. */
const DISCARD_MAX_BYTES = 1024 * 1024 * 1024
const DISCARD_MAX_MS = 30_000

async function discardUpload (req: IncomingMessage): Promise<void> {
  await new Promise<void>((resolve) => {
    let seen = 0
    const done = (): void => { clearTimeout(timer); req.off('data', onData); req.off('end', done); req.off('close', done); req.off('error', done); resolve() }
    const onData = (chunk: Buffer): void => { seen += chunk.length; if (seen > DISCARD_MAX_BYTES) done() }
    const timer = setTimeout(done, DISCARD_MAX_MS)
    timer.unref()
    req.on('data', onData)
    req.once('end', done)
    req.once('close', done)
    req.once('error', done)
    req.unpipe()
    req.resume()
  })
}

const EMPTY = Buffer.alloc(0)

/** Exec start hijacks unless its (canonical) body asks to detach. */
function detaches (body: unknown): boolean {
  return body !== null && typeof body === 'object' && (body as { Detach?: unknown }).Detach === true
}

function finish (deps: GatewayDeps, ctx: RequestContext): void {
  ctx.opened?.()
  ctx.hold?.release()
  ctx.turn?.release()
  ctx.large?.()
  // The answer is out (or the request failed): what tenancy held for it is let go.
  try { ctx.settled?.(ctx.status ?? 0) } catch (err) { deps.log.error({ req: ctx.id, err: { message: (err as Error).message } }, 'tenancy settle failed') }
  // A session's end, or a request that ended before its answer completed (client gone,
  // upstream failure): recorded now, after the fact; nothing is left to refuse.
  const after = ctx.audited === 'session' ? 'session.end' : ctx.audited ? null : 'request'
  if (after !== null) {
    ctx.audited ??= 'request'
    audit(deps, ctx, after).catch(() => { /* already counted and logged by audit() */ })
  }
  const op = ctx.target?.operation.id ?? null
  const ms = elapsedMs(ctx)
  // At the shipped level (warn) an ordinary request's line is not written: nor built.
  if ((ctx.error !== undefined && ctx.error.status >= 500) || deps.log.isLevelEnabled('info')) logLine(deps, ctx, op, ms)
  deps.metrics.observeRequest({
    operation: op,
    listener: ctx.listener,
    tenant: ctx.identity?.tenant ?? null,
    decision: ctx.decision?.decision ?? null,
    status: ctx.status ?? 0,
    durationMs: ms,
    upstreamMs: ctx.upstreamMs,
    bytesIn: ctx.bytesIn,
    bytesOut: ctx.bytesOut,
    rule: ctx.decision?.decision === 'deny' ? ctx.decision.rule?.rule ?? null : null,
    wouldDeny: ctx.decision?.wouldDeny.length ? ctx.decision.wouldDeny.map((r) => r.rule) : undefined,
  })
  const kind = ctx.error && UPSTREAM_ERRORS[ctx.error.code]
  if (kind) deps.metrics.upstreamError(kind)
}

/** The request's operational log line. */
function logLine (deps: GatewayDeps, ctx: RequestContext, op: string | null, ms: number): void {
  const line = {
    req: ctx.id,
    listener: ctx.listener,
    op,
    method: ctx.method,
    subject: ctx.identity?.subject,
    tenant: ctx.identity ? ctx.identity.tenant : undefined,
    auth: ctx.identity?.method,
    decision: ctx.decision?.decision,
    rule: ctx.decision?.rule?.rule,
    status: ctx.status,
    bytesIn: ctx.bytesIn,
    bytesOut: ctx.bytesOut,
    ms,
    upstreamMs: ctx.upstreamMs === undefined ? undefined : Math.round(ctx.upstreamMs * 1000) / 1000,
    hijack: ctx.hijack,
    exitCode: ctx.exitCode ?? undefined,
    aborted: ctx.aborted,
    error: ctx.error ? { code: ctx.error.code, message: ctx.error.message, ...(ctx.error.code === 'INTERNAL' ? { cause: String((ctx.error.cause as Error)?.stack ?? ctx.error.cause) } : {}) } : undefined,
  }
  if (ctx.error && ctx.error.status >= 500) deps.log.error(line, 'request failed')
  else deps.log.info(line, 'request')
}

const UPSTREAM_ERRORS: Partial<Record<string, UpstreamErrorKind>> = {
  UPSTREAM_UNREACHABLE: 'unreachable',
  UPSTREAM_FAILED: 'failed',
  UPSTREAM_TIMEOUT: 'timeout',
}

function fail (ctx: RequestContext, err: unknown): GatewayError {
  const e = toGatewayError(err)
  ctx.error = e
  ctx.status = e.status
  return e
}

/**
 * Check a request whose body has been read, and answer it when that is the gateway's
 * to do; otherwise say how it goes on. The decoded body lives in this frame only: the
 * long awaits that follow (a stream, a session) must not hold it.
 */
async function check (deps: GatewayDeps, ctx: RequestContext, req: IncomingMessage, res: ServerResponse, on: AnswerEvents): Promise<'answered' | 'hijack' | 'forward'> {
  const op = ctx.target!.operation
  const body = await inspect(deps, ctx, req)
  if (op.kind === 'policy') {
    await deps.admin(ctx, body, res, on)
    return 'answered'
  }
  if (ctx.answer) {
    await answerLocally(ctx, ctx.answer, res, on)
    return 'answered'
  }
  return op.hijack === 'tcp' && !(isExecStart(op.id) && detaches(body)) ? 'hijack' : 'forward'
}

export async function handleRequest (deps: GatewayDeps, listener: ListenerConfig, ctx: RequestContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const done = deps.inflight.begin()
  const { on, ended } = answerEvents(deps, ctx)
  // A body refused while it was being read (too large, a shape the decoder refuses, a
  // full budget) is left unread: the refusal goes out at once and the connection closes.
  let reading = false
  try {
    admit(deps, listener, ctx, req, await identifyCaller(deps, listener, req, req.socket))
    const op = ctx.target!.operation
    reading = true
    await takeTurn(deps, ctx)
    const limiting = limitRate(deps, ctx)
    if (limiting) await limiting
    await readBody(deps, ctx, req)
    reading = false
    const next = await check(deps, ctx, req, res, on)
    // With the engine now: the turn lapses if the engine takes long over it (turns.ts).
    if (next !== 'answered') ctx.turn?.engineWait()
    if (next === 'hijack') {
      await execCommand(deps, ctx)
      await hijack(ctx, { form: 'raw', req, res } satisfies HijackClient, deps.upstream, (c) => deps.inflight.track(c), on)
      await sessionExit(deps, ctx)
    } else if (next === 'answered') {
      // The gateway's own answer (policy admin API, tenancy) is out.
    } else if (op.streams) {
      const untrack = deps.inflight.track(() => { ctx.aborted ??= 'shutdown'; res.destroy() })
      const closed = deps.metrics.streamOpened()
      try { await forward(ctx, req, res, deps.upstream, on) } finally { untrack(); closed() }
    } else {
      const release = await pruneTurn(op.id)
      try { await forward(ctx, req, res, deps.upstream, on) } finally { release?.() }
    }
  } catch (err) {
    // A body filter's refusal (an upload read as it was forwarded) is tenancy's too.
    if (err instanceof TenancyRefusal) deniedByTenancy(ctx, err)
    let e = fail(ctx, err)
    if (!res.headersSent && !res.destroyed) {
      try { await on('finished') } catch (auditErr) { e = fail(ctx, auditErr) }
      const { status, body, headers } = renderError(e)
      // A refusal made while the upload streams (an archive a tenant may not load): the
      // rest of it is read and dropped first, within bounds, so that a client that writes
      // its whole body before it reads (Go's net/http) sees the refusal, not a broken pipe.
      const unread = reading || e.code === 'BODY_TOO_LARGE'
      if (e.status < 500 && !unread && !req.complete && hasBody(req)) await discardUpload(req)
      // After refusing a body we did not read to its end, the connection cannot be reused.
      const close = unread || (!req.complete && hasBody(req))
      res.writeHead(status, { ...headers, ...(close ? { connection: 'close' } : {}) })
      res.end(body)
    } else {
      res.destroy()
    }
  } finally {
    ended()
    done()
    finish(deps, ctx)
  }
}

export async function handleUpgrade (deps: GatewayDeps, listener: ListenerConfig, ctx: RequestContext, req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
  const done = deps.inflight.begin()
  const { on, ended } = answerEvents(deps, ctx)
  socket.on('error', () => socket.destroy())
  try {
    admit(deps, listener, ctx, req, await identifyCaller(deps, listener, req, socket))
    const op = ctx.target!.operation
    if (!op.hijack) throw new GatewayError('UPGRADE_UNSUPPORTED', `${op.id} does not upgrade the connection`)
    await takeTurn(deps, ctx)
    const limiting = limitRate(deps, ctx)
    if (limiting) await limiting
    let rest: Buffer
    ;({ body: ctx.body, rest } = await readUpgradeBody(req, socket, head, bodyLimits(deps, ctx, op)))
    // The head may hold the body's bytes: not kept for the length of the session.
    head = EMPTY
    await inspect(deps, ctx, req)
    ctx.turn?.engineWait()
    await execCommand(deps, ctx)
    await hijack(ctx, { form: 'upgrade', req, socket, rest }, deps.upstream, (c) => deps.inflight.track(c), on)
    await sessionExit(deps, ctx)
  } catch (err) {
    let e = fail(ctx, err)
    try { await on('finished') } catch (auditErr) { e = fail(ctx, auditErr) }
    writeSocketError(socket, e)
  } finally {
    ended()
    done()
    finish(deps, ctx)
  }
}
