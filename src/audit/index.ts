/**
 * The compliance audit trail (docs/audit.md): records (record.ts), redaction
 * (redact.ts), the hash-chained, sealed, rotated file writer (trail.ts), and the
 * offline tools behind `portcullis audit verify|report` (verify.ts, report.ts).
 */
export {
  buildRecord,
  recordJson,
  RECORD_VERSION,
  type AuditDecisionInput,
  type AuditEventKind,
  type AuditIdentity,
  type AuditIdentityInput,
  type AuditInput,
  type AuditLevel,
  type AuditRecord,
  type AuditResource,
  type AuditRewrite,
  type AuditRewriteInput,
  type AuditRuleRef,
  type AuditSecurity,
  type AuditSession,
  type AuditTargetInput,
  type AuthMethod,
  type BuildOptions,
  type ChainInfo,
  type ChainRecord,
  type DecisionKind,
  type StoredRecord,
} from './record'
export { REDACTED, redactor, type Redactor } from './redact'
export { AuditTrail, AuditWriteError, type AuditTrailOptions, type AuditTrailStatus } from './trail'
export { verify, type VerifyOptions, type VerifyProblem, type VerifyResult } from './verify'
export { parseSince, report, type ReportOptions } from './report'
