/**
 * The inspect-and-authorize stage: decode the body the way the engine will, apply
 * the policy's rewrites, evaluate, and produce the exact bytes to forward.
 * Shared by the gateway's pipeline and by `portcullis policy check/test`, so the
 * tools judge requests exactly as the gateway does.
 */
import type { Target } from '../api/catalog/route'
import { decodeBody, encodeBody } from '../api/body/decode'
import type { Evaluation, LayerTrace, Policy, Principal, RuleRef } from './engine'
import type { HostPathMode } from './facts'
import { describeReason } from './explain'

export interface Authorization {
  readonly evaluation: Evaluation
  /** The body to forward: the canonical serialization of the evaluated body (undefined: none), encoded on first use. */
  readonly body: Buffer | undefined
}

/** `hostPaths`: whether the engine's filesystem is this one (facts.ts HostPathMode; the gateway detects it). */
export async function authorize (policy: Policy, who: Principal, target: Target, raw: Buffer | undefined, hostPaths: HostPathMode = 'shared'): Promise<Authorization> {
  const op = target.operation
  const decoded = raw?.length ? decodeBody(op.id, raw) : undefined
  const evaluation = await policy.evaluate(who, {
    op: op.id,
    kind: op.kind,
    resource: target.resource ?? '',
    query: target.query,
    body: decoded?.value,
    hostPaths,
  })
  // Encoded when first asked for: a denied request never is.
  let body: Buffer | undefined
  let encoded = false
  return {
    evaluation,
    get body () {
      if (!encoded) {
        encoded = true
        if (evaluation.rewrites.length) body = encodeBody(evaluation.body)
        else if (decoded) body = decoded.bytes
      }
      return body
    },
  }
}

/**
 * The denial message: operation, rule, subject and tenant, then why. For a denying
 * rule, the facts that made its condition hold and what it allows, and any other
 * rule that denies too (fixing one should not just reveal the next); when no rule
 * allows the request, which file did not and for which roles. Facts only, never body
 * contents (see explain.ts).
 */
export async function denialMessage (policy: Policy, who: Principal, target: Target, evaluation: Evaluation): Promise<string> {
  const d = evaluation.decision
  const op = target.operation.id
  const by = d.rule ? `policy rule ${d.rule.rule} (${d.rule.policy})` : 'policy: no rule allows it'
  const head = `${op} denied by ${by} for subject ${who.subject}${who.tenant ? ` in tenant ${who.tenant}` : ''}`
  try {
    const layers = (await policy.trace(who, op, target.operation.kind, evaluation.input)).filter((l) => l.mode === 'enforce')
    return `${head}: ${denialReason(layers, d.rule, op)}`
  } catch {
    // The explanation is a courtesy: a denial is a denial without it.
    return head
  }
}

/** Why a request was denied, from the trace of the enforce-mode layers. */
export function denialReason (layers: readonly LayerTrace[], rule: RuleRef | null, op: string): string {
  const denials = layers.flatMap((l) => l.deniedBy)
  if (rule) {
    const decisive = denials.find((m) => m.rule === rule.rule && m.policy === rule.policy)
    const others = denials.filter((m) => m !== decisive).map((m) => `${m.rule} (${m.policy})`)
    const why = decisive?.reason ? describeReason(decisive.reason, op) : 'its condition holds'
    return `${why}${others.length ? `; also denied by ${others.join(', ')}` : ''}`
  }
  const i = layers.findIndex((l) => l.allowedBy === null && l.deniedBy.length === 0)
  const layer = layers[i]
  if (!layer) return `no allow rule applies to ${op}`
  const roles = layer.principals.filter((p) => !p.startsWith('user:'))
  const layered = i > 0 ? ` (each enforce-mode file is a layer that must itself allow a request; ${layers.slice(0, i).map((l) => l.file).join(', ')} allowed it)` : ''
  return `no allow rule in ${layer.file} applies to ${op} for ${roles.length ? `roles ${roles.join(', ')}` : 'an identity without roles (check the token\'s roles claim or the listener\'s identity)'}${layered}`
}
