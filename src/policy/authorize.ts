/**
 * The inspect-and-authorize stage: decode the body the way the engine will, apply
 * the policy's rewrites, evaluate, and produce the exact bytes to forward.
 * Shared by the gateway's pipeline and by `portcullis policy check/test`, so the
 * tools judge requests exactly as the gateway does.
 */
import type { Target } from '../gateway/catalog/route'
import { decodeBody, encodeBody } from './body/decode'
import type { Evaluation, Policy, Principal } from './engine'

export interface Authorization {
  readonly evaluation: Evaluation
  /** The body to forward: the canonical serialization of the evaluated body (undefined: none). */
  readonly body: Buffer | undefined
}

export async function authorize (policy: Policy, who: Principal, target: Target, raw: Buffer | undefined): Promise<Authorization> {
  const op = target.operation
  const decoded = raw?.length ? decodeBody(op.id, raw) : undefined
  const evaluation = await policy.evaluate(who, {
    op: op.id,
    kind: op.kind,
    resource: target.resource ?? '',
    query: target.query,
    body: decoded?.value,
  })
  let body: Buffer | undefined
  if (evaluation.rewrites.length) body = encodeBody(evaluation.body)
  else if (decoded) body = decoded.bytes
  return { evaluation, body }
}

/** The denial message: operation, tenant and rule, never body contents. */
export function denialMessage (who: Principal, target: Target, evaluation: Evaluation): string {
  const d = evaluation.decision
  const by = d.rule ? `policy rule ${d.rule.rule} (${d.rule.policy})` : 'policy: no rule allows it'
  return `${target.operation.id} denied by ${by} for subject ${who.subject}${who.tenant ? ` in tenant ${who.tenant}` : ''}`
}
