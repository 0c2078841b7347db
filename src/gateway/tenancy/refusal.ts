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
  /**
   * A "no such object" for a reference that names nothing on the engine at all (lookup.ts
   * Resolution `absent`): the engine's own answer, given by the gateway; a miss, not a
   * refusal. The pipeline records it as the policy decided (allowed), with the answer's
   * status, never as a denial by `rule`. The client's answer is the same either way.
   */
  readonly absent: boolean
  constructor (code: ErrorCode, message: string, rule: string, options?: { cause?: unknown, answer?: EngineAnswer, missing?: MissingRef, absent?: boolean }) {
    super(code, message, options)
    this.rule = rule
    if (options?.missing) this.missing = options.missing
    this.absent = options?.absent === true
  }
}

/** 403 naming the tenancy rule. */
export function refuse (rule: string, message: string): TenancyRefusal {
  return new TenancyRefusal('FORBIDDEN', `${message} (rule ${rule})`, rule)
}
