/**
 * The one error catalogue. Stages throw `GatewayError`s with a stable code; only the
 * renderer turns them into an HTTP status and the engine's `{"message": "..."}` body.
 * Callers match on `code`, never on classes or messages.
 */

export const errorCatalog = {
  // Request target
  PATH_INVALID: 400,
  PATH_AMBIGUOUS: 400,
  API_VERSION_UNSUPPORTED: 400,
  OPERATION_UNKNOWN: 404,
  OPERATION_TOO_NEW: 400,
  HEADER_AMBIGUOUS: 400,
  UPGRADE_UNSUPPORTED: 400,
  // Bodies
  BODY_INVALID: 400,
  BODY_TOO_LARGE: 413,
  /** The identity holds its share of the memory for request bodies (limits.bufferedBytes): retry later. */
  IDENTITY_BUSY: 429,
  /** The gateway holds all the memory it may for request bodies (limits.bufferedBytes): retry later. */
  GATEWAY_BUSY: 503,
  // Rates
  /** The identity (or its tenant) is over a rate limit or holds as many sessions or streams as it may (rates): retry after the time said. */
  RATE_LIMITED: 429,
  // Identity and policy (used from the authentication issue on)
  UNAUTHENTICATED: 401,
  FORBIDDEN: 403,
  POLICY_FAILED: 500,
  /** A policy change through the admin API that does not compile, or cannot be applied: nothing was written. */
  POLICY_INVALID: 400,
  /** The policy database does not answer: the change was not made. */
  POLICY_STORE_UNAVAILABLE: 503,
  // Tenancy: another tenant's object answers as a missing one; a name held by another tenant
  NOT_FOUND: 404,
  /** A body or query names an object the tenant does not have (the engine's 400 for VolumesFrom). */
  REFERENCE_MISSING: 400,
  CONFLICT: 409,
  /** The shared quota store (policy database) does not answer: a quota-limited create is refused (fail closed). */
  QUOTA_STORE_UNAVAILABLE: 503,
  /** A swarm object asked of an engine that is not a swarm manager: the engine's own 503, relayed. */
  SWARM_INACTIVE: 503,
  // Upstream
  UPSTREAM_UNREACHABLE: 502,
  UPSTREAM_FAILED: 502,
  UPSTREAM_TIMEOUT: 504,
  // Gateway
  SHUTTING_DOWN: 503,
  AUDIT_UNAVAILABLE: 503,
  INTERNAL: 500,
} as const

export type ErrorCode = keyof typeof errorCatalog

/** An answer given in the engine's place, worded and shaped as that engine answers (status and exact body). */
export interface EngineAnswer { readonly status: number, readonly body: string }

export class GatewayError extends Error {
  readonly code: ErrorCode
  readonly status: number
  /**
   * Rendered verbatim instead of `{"message": ...}`: another tenant's object must answer
   * exactly like a missing one, and engines other than dockerd (Podman) word and shape
   * that answer their own way.
   */
  readonly answer?: EngineAnswer
  /** Whole seconds after which a retry may succeed (the `Retry-After` of a 429 or 503). */
  readonly retryAfter?: number
  constructor (code: ErrorCode, message: string, options?: { cause?: unknown, answer?: EngineAnswer, retryAfter?: number }) {
    super(message, options)
    this.code = code
    this.status = options?.answer?.status ?? errorCatalog[code]
    if (options?.answer) this.answer = options.answer
    if (options?.retryAfter !== undefined) this.retryAfter = Math.max(1, Math.ceil(options.retryAfter))
  }
}

export function isGatewayError (err: unknown): err is GatewayError {
  return err instanceof GatewayError
}

/** Any thrown value as a GatewayError; unknown failures become INTERNAL without leaking their text. */
export function toGatewayError (err: unknown): GatewayError {
  if (isGatewayError(err)) return err
  return new GatewayError('INTERNAL', 'internal gateway error', { cause: err })
}

/**
 * The engine's error body shape, and the headers the status requires
 * (a 401 names the scheme it wants, RFC 9110 §11.6.1; a 429 or 503 for a full body
 * budget says when to come back).
 */
export function renderError (err: GatewayError): { status: number, body: string, headers: Record<string, string> } {
  const body = err.answer ? err.answer.body : JSON.stringify({ message: err.message }) + '\n'
  return {
    status: err.status,
    body,
    headers: {
      'content-type': 'application/json',
      'content-length': String(Buffer.byteLength(body)),
      ...(err.code === 'UNAUTHENTICATED' ? { 'www-authenticate': 'Bearer realm="portcullis"' } : {}),
      // Full for a moment, not for good (RFC 9110 §10.2.3); a rate limit says when its next token comes.
      ...(err.retryAfter !== undefined ? { 'retry-after': String(err.retryAfter) } : err.code === 'IDENTITY_BUSY' || err.code === 'GATEWAY_BUSY' ? { 'retry-after': '1' } : {}),
    },
  }
}
