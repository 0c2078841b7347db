/**
 * Redaction of recorded request bodies (and rewrite values), declared up front and
 * compiled once per setting of `audit.redactEnv`.
 *
 * Headers are never recorded at all: a record is built field by field from an
 * AuditInput that has no header field, so `Authorization`, `X-Registry-Auth` and
 * `X-Registry-Config` cannot reach it. What remains to redact is in bodies:
 *
 *   1. Paths per operation (PATH_RULES): secret and config payloads, registry
 *      credentials (SystemAuth), swarm join tokens, unlock keys, the swarm CA key.
 *   2. Field names anywhere in any body (SENSITIVE_NAME): password, secret, token,
 *      credential, API and private keys, `auth`; except the swarm references that
 *      merely name a secret (REFERENCE_NAMES). Label keys count as field names:
 *      `Labels: {"db.password": "x"}` is redacted.
 *   3. Environment values: every `Env` list and the PluginSet body (`["K=V"]`)
 *      become `["K=[REDACTED]"]` when redactEnv is on (default). With it off, the
 *      values of variables whose NAME is sensitive (DB_PASSWORD=...) are still redacted.
 *   4. Mount options strings (`o` in volume DriverOpts / mount DriverConfig options):
 *      `password=...`, `secret=...`, `token=...`, `credentials=...` parts.
 *
 * Matching is case-insensitive, like the engine's decoder. Redacting never changes
 * the shape of a body: only values are replaced (null stays null).
 */

export const REDACTED = '[REDACTED]'

/** Fields redacted at these JSON Pointer paths of these operations' bodies. */
export const PATH_RULES: ReadonlyArray<{ readonly operations: readonly string[], readonly paths: readonly string[] }> = [
  { operations: ['SecretCreate', 'SecretUpdate', 'ConfigCreate', 'ConfigUpdate'], paths: ['/Data'] },
  { operations: ['SystemAuth'], paths: ['/password', '/identitytoken', '/registrytoken', '/auth'] },
  { operations: ['SwarmJoin'], paths: ['/JoinToken'] },
  { operations: ['SwarmUnlock'], paths: ['/UnlockKey'] },
  { operations: ['SwarmInit'], paths: ['/Spec/CAConfig/SigningCAKey'] },
  { operations: ['SwarmUpdate'], paths: ['/CAConfig/SigningCAKey'] },
]

/** Any body field named like this is redacted, in any operation. */
export const SENSITIVE_NAME = /passw(?:or)?d|passphrase|secret|token|credential|api[-_.]?key|private[-_.]?key|^auth$/i
/** Swarm references that name a secret or credential spec without containing it: kept. */
export const REFERENCE_NAMES: readonly string[] = ['Secrets', 'SecretID', 'SecretName', 'CredentialSpec']
/** Lists of `NAME=value` whose values are redacted (with redactEnv). */
export const ENV_NAMES: readonly string[] = ['Env']
/** Operations whose whole body is a `NAME=value` list. */
export const ENV_BODY_OPERATIONS: readonly string[] = ['PluginSet']
/** Mount option strings (`o=addr=x,password=y`) in which credentials are redacted. */
export const OPTION_STRING_NAMES: readonly string[] = ['o']
const OPTION_SECRET = /((?:^|,)\s*[^,=]*(?:passw(?:or)?d|secret|token|credentials?|pass)\s*=)[^,]*/gi

/** Whether an environment variable's NAME is sensitive (DB_PASSWORD, GITHUB_TOKEN, AWS_SECRET_ACCESS_KEY...). */
export function sensitiveEnvName (name: string): boolean {
  return SENSITIVE_NAME.test(name) && !REFERENCE_NAMES.some((n) => n.toLowerCase() === name.toLowerCase())
}

const ALL_NAMES = (): boolean => true

/**
 * One `NAME=value` entry with its value redacted when `redactName(NAME)` says so: the
 * name is kept, so that a reader sees what is set. `NAME` alone (no `=`: a client asking
 * the CLI to pass its own value) carries no value and is kept as it is. Shared with the
 * gateway's answers to roles that do not read secrets (src/gateway/redact.ts).
 */
export function redactEnvEntry (entry: string, redactName: (name: string) => boolean): string {
  const eq = entry.indexOf('=')
  if (eq < 0) return entry
  return redactName(entry.slice(0, eq)) ? `${entry.slice(0, eq + 1)}${REDACTED}` : entry
}

interface Node { readonly children: Map<string, Node>, redact: boolean }

export interface RedactOptions { readonly redactEnv: boolean }

export interface Redactor {
  /** A redacted deep copy of a decoded body (exact numbers kept as they are). */
  body (operation: string | null, body: unknown): unknown
  /** A rewrite's value at `pointer` (RFC 6901), redacted as it would be inside the body. */
  atPointer (operation: string | null, pointer: string, value: unknown): unknown
}

function node (): Node { return { children: new Map(), redact: false } }

function pointerTokens (pointer: string): string[] {
  if (pointer === '') return []
  return pointer.slice(1).split('/').map((t) => t.replace(/~1/g, '/').replace(/~0/g, '~'))
}

function compile (opts: RedactOptions): Redactor {
  const tries = new Map<string, Node>()
  for (const rule of PATH_RULES) {
    for (const op of rule.operations) {
      const root = tries.get(op) ?? node()
      tries.set(op, root)
      for (const p of rule.paths) {
        let n = root
        for (const tok of pointerTokens(p)) {
          const key = tok.toLowerCase()
          let next = n.children.get(key)
          if (next === undefined) { next = node(); n.children.set(key, next) }
          n = next
        }
        n.redact = true
      }
    }
  }
  const references = new Set(REFERENCE_NAMES.map((n) => n.toLowerCase()))
  const envNames = new Set(ENV_NAMES.map((n) => n.toLowerCase()))
  const envBodies = new Set(ENV_BODY_OPERATIONS)
  const optionNames = new Set(OPTION_STRING_NAMES.map((n) => n.toLowerCase()))

  const sensitive = (key: string): boolean => SENSITIVE_NAME.test(key) && !references.has(key.toLowerCase())

  /** `NAME=value` -> `NAME=[REDACTED]` (or only for sensitive names, without redactEnv). */
  const envEntry = (v: unknown): unknown => {
    if (typeof v !== 'string') return v === null ? null : REDACTED
    return redactEnvEntry(v, opts.redactEnv ? ALL_NAMES : sensitiveEnvName)
  }
  const envList = (v: unknown): unknown => Array.isArray(v) ? v.map(envEntry) : (v === null ? null : REDACTED)

  const walk = (v: unknown, trie: Node | undefined, depth: number): unknown => {
    if (v === null || typeof v !== 'object') return v
    if (depth > 600) return REDACTED // deeper than the decoder allows: not a decoded body
    if (Array.isArray(v)) return v.map((x) => walk(x, undefined, depth + 1))
    // Exact numbers (JsonNumber) and other non-plain objects are kept as they are.
    const proto = Object.getPrototypeOf(v)
    if (proto !== Object.prototype && proto !== null) return v
    const out: Record<string, unknown> = {}
    for (const key of Object.keys(v)) {
      const value = (v as Record<string, unknown>)[key]
      const lower = key.toLowerCase()
      const child = trie?.children.get(lower)
      if (value === null || value === undefined) out[key] = value
      else if (child?.redact === true || sensitive(key)) out[key] = REDACTED
      else if (envNames.has(lower)) out[key] = envList(value)
      else if (optionNames.has(lower) && typeof value === 'string') out[key] = value.replace(OPTION_SECRET, `$1${REDACTED}`)
      else out[key] = walk(value, child, depth + 1)
    }
    return out
  }

  return {
    body (operation, body) {
      if (operation !== null && envBodies.has(operation) && Array.isArray(body)) return envList(body)
      return walk(body, operation === null ? undefined : tries.get(operation), 0)
    },
    atPointer (operation, pointer, value) {
      const tokens = pointerTokens(pointer)
      // The whole body is a NAME=value list: the root, or one of its elements.
      if (operation !== null && envBodies.has(operation) && tokens.length <= 1) return tokens.length === 0 ? envList(value) : envEntry(value)
      let trie = operation === null ? undefined : tries.get(operation)
      // The last field name on the path (array indexes and `-` are not names).
      let name: string | undefined
      let parentName: string | undefined
      for (const tok of tokens) {
        trie = trie?.children.get(tok.toLowerCase())
        if (trie?.redact === true) return value === null ? null : REDACTED
        if (/^(?:[0-9]+|-)$/.test(tok)) { parentName = name; name = undefined } else { parentName = undefined; name = tok }
        if (name !== undefined && sensitive(name)) return value === null ? null : REDACTED
      }
      if (name !== undefined && envNames.has(name.toLowerCase())) return envList(value)
      if (name === undefined && parentName !== undefined && envNames.has(parentName.toLowerCase())) return envEntry(value)
      if (name !== undefined && optionNames.has(name.toLowerCase()) && typeof value === 'string') return value.replace(OPTION_SECRET, `$1${REDACTED}`)
      return walk(value, trie, 0)
    },
  }
}

const compiled = { env: compile({ redactEnv: true }), noEnv: compile({ redactEnv: false }) }

/** The redactor for a setting of `audit.redactEnv` (both are compiled at load). */
export function redactor (opts: RedactOptions): Redactor {
  return opts.redactEnv ? compiled.env : compiled.noEnv
}
