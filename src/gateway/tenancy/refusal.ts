/**
 * A request the tenancy stage refuses, and the rule that refused it. The stage's own
 * handlers throw it (deep in a lookup, or while a body filter reads an upload); the
 * stage hands it back to the pipeline as its decision (index.ts Tenancy.scope), which
 * records the denial by that rule and renders the error.
 */
import { GatewayError, type EngineAnswer, type ErrorCode } from '../../api/errors'
import type { MissingRef } from './podman'

export class TenancyRefusal extends GatewayError {
  /** The tenancy rule that refused, as the audit record, log line and metrics name it. */
  readonly rule: string
  /** Set when the refusal is "no such object": another engine words that its own way (podman.ts). */
  readonly missing?: MissingRef
  constructor (code: ErrorCode, message: string, rule: string, options?: { cause?: unknown, answer?: EngineAnswer, missing?: MissingRef }) {
    super(code, message, options)
    this.rule = rule
    if (options?.missing) this.missing = options.missing
  }
}

/** 403 naming the tenancy rule. */
export function refuse (rule: string, message: string): TenancyRefusal {
  return new TenancyRefusal('FORBIDDEN', `${message} (rule ${rule})`, rule)
}
