/**
 * Authentication: who is making this request. Runs right after routing, for ordinary
 * and `upgrade` requests alike, and tries, in this order:
 *
 *  1. `Authorization: Bearer <JWT>`, when the request has an Authorization header.
 *     It must verify; a failing token, or any other scheme, is a 401 and nothing
 *     else is tried (explicit credentials that fail never fall back).
 *  2. The verified client certificate, on a TLS listener with a `ca`.
 *  3. On a listener with `containerIdentity`, the calling container (callers.ts, looked
 *     up by the pipeline before this runs), else that option's `default` identity.
 *  4. The listener's fixed `identity`.
 *  5. `anonymous: true` on the listener.
 *  6. Otherwise 401, naming what the listener accepts.
 *
 * Key material is read once, when the Authenticator is created from the config (at
 * start-up and on reload). Messages say why a credential was refused; they never
 * contain the token or key material.
 */
import { createHash, createPublicKey, createSecretKey, type KeyObject } from 'node:crypto'
import { readFileSync } from 'node:fs'
import type { IncomingMessage } from 'node:http'
import type { TLSSocket } from 'node:tls'
import jwt from 'jsonwebtoken'
import { defaultMtlsMapping, type Config, type JwtConfig, type ListenerConfig, type MtlsMappingConfig } from '../config'
import {
  DEFAULT_PUBLIC_KEY_ALGORITHMS,
  DEFAULT_SECRET_ALGORITHMS,
  JWT_ALGORITHMS,
  fittingAlgorithms,
  jwksKeyAlgorithms,
  parseJwks,
} from '../config/jwt-keys'
import { GatewayError } from '../api/errors'

export interface Identity {
  readonly subject: string
  readonly tenant: string | null
  readonly roles: readonly string[]
  readonly method: 'jwt' | 'mtls' | 'listener' | 'anonymous' | 'container'
  /** The calling container's full id, for container identities (subject `container:<name>`). */
  readonly container?: string
  /** Hex SHA-256 of the verified client certificate (DER), for mTLS identities. */
  readonly certFingerprint?: string
  /** The token's `jti`, if it has one. */
  readonly tokenId?: string
}

// The calling container, as the pipeline found it (callers.ts) before authentication.
export interface CallerContainer {
  readonly id: string
  /** Its name, without the leading `/`. */
  readonly name: string
  readonly labels: Readonly<Record<string, string>>
  /** The id of its image. */
  readonly image: string
}

/** How a caller was found: the addresses known, the engine asked, asked again after a container start, a unix peer's process. */
export type LookupKind = 'cached' | 'listed' | 'waited' | 'peer'

/** What a listener with `containerIdentity` knows of a request's caller, before it is authenticated. */
export type Caller = (
  | { readonly kind: 'container', readonly container: CallerContainer, readonly roles: readonly string[], readonly ignored?: string }
  | { readonly kind: 'unknown', readonly why: string }
) & { readonly via: LookupKind }

export interface Authenticator {
  /**
   * The identity behind a request on `listener`; throws GatewayError UNAUTHENTICATED.
   * `caller`: who is calling, on a listener with `containerIdentity`.
   */
  authenticate (req: IncomingMessage, listener: ListenerConfig, caller?: Caller): Identity
}

export const ANONYMOUS: Identity = Object.freeze({ subject: 'anonymous', tenant: null, roles: Object.freeze(['anonymous']), method: 'anonymous' })

function unauthenticated (message: string): GatewayError {
  return new GatewayError('UNAUTHENTICATED', message)
}

function identity (fields: Identity): Identity {
  return Object.freeze({ ...fields, roles: Object.freeze([...new Set(fields.roles)]) })
}

// ---------------------------------------------------------------------------
// Bearer tokens

/** RFC 9110 token characters, for the auth-scheme. */
const SCHEME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/
/** A JWS in compact serialization: three base64url parts. */
const COMPACT_JWS = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/

/** The token of an `Authorization: Bearer <token>` header value. */
function bearerToken (header: string): string {
  const value = header.trim()
  const space = value.search(/[ \t]/)
  const scheme = space === -1 ? value : value.slice(0, space)
  if (scheme === '') throw unauthenticated('empty Authorization header; send "Authorization: Bearer <token>"')
  if (scheme.toLowerCase() !== 'bearer') {
    const named = SCHEME.test(scheme) && scheme.length <= 32 ? `"${scheme}" ` : ''
    throw unauthenticated(`authorization scheme ${named}is not accepted; send "Authorization: Bearer <token>"`)
  }
  const token = space === -1 ? '' : value.slice(space).trim()
  if (token === '') throw unauthenticated('empty bearer token')
  return token
}

interface VerificationKey {
  readonly key: KeyObject
  /** The algorithms this key may verify: the allow-list, narrowed to what fits the key. */
  readonly algorithms: readonly string[]
  readonly kid?: string
}

interface Claims { readonly subject: string, readonly tenant: string, readonly roles: string }

function isoDate (d: Date): string {
  return Number.isNaN(d.getTime()) ? 'an invalid date' : d.toISOString()
}

/** Why jsonwebtoken refused a token, in words that name no token content. */
function verifyFailure (err: unknown): string {
  if (err instanceof jwt.TokenExpiredError) return `token expired at ${isoDate(err.expiredAt)}`
  if (err instanceof jwt.NotBeforeError) return `token not valid yet (not before ${isoDate(err.date)})`
  if (err instanceof jwt.JsonWebTokenError) {
    const m = err.message
    if (m === 'invalid signature') return 'bad signature'
    if (m.startsWith('jwt audience invalid')) return 'wrong audience'
    if (m.startsWith('jwt issuer invalid')) return 'wrong issuer'
    if (m === 'invalid algorithm') return 'algorithm not allowed'
    if (m === 'invalid exp value') return 'the exp claim is not a number'
    if (m === 'invalid nbf value') return 'the nbf claim is not a number'
    if (m === 'jwt signature is required') return 'token is not signed'
  }
  return 'malformed token'
}

function own (o: Record<string, unknown>, key: string): unknown {
  return Object.prototype.hasOwnProperty.call(o, key) ? o[key] : undefined
}

/** The roles claim: a list of strings, or one string of names separated by spaces or commas. */
function rolesOf (v: unknown, name: string): string[] {
  if (v === undefined || v === null) return []
  if (typeof v === 'string') return v.split(/[\s,]+/).filter((r) => r !== '')
  if (Array.isArray(v) && v.every((r) => typeof r === 'string')) return (v as string[]).map((r) => r.trim()).filter((r) => r !== '')
  throw unauthenticated(`invalid bearer token: the "${name}" claim must be a list of strings or a string`)
}

function keyFor (header: jwt.JwtHeader, keys: readonly VerificationKey[], jwks: boolean): VerificationKey {
  if (!jwks) return keys[0]
  if (header.kid === undefined) {
    if (keys.length === 1) return keys[0]
    throw unauthenticated(`invalid bearer token: the token names no key id (kid) and the key set has ${keys.length} keys`)
  }
  const key = typeof header.kid === 'string' ? keys.find((k) => k.kid === header.kid) : undefined
  if (key === undefined) throw unauthenticated('invalid bearer token: no key in the key set has the token\'s key id (kid)')
  return key
}

/** Reads the key material once and returns the function that turns a token into an Identity. */
function createJwtVerifier (cfg: JwtConfig): (token: string) => Identity {
  const claims: Claims = { subject: cfg.claims?.subject ?? 'sub', tenant: cfg.claims?.tenant ?? 'tenant', roles: cfg.claims?.roles ?? 'roles' }
  const requireExp = cfg.requireExp ?? true
  let keys: VerificationKey[]
  if (cfg.secret !== undefined) {
    keys = [{ key: createSecretKey(Buffer.from(cfg.secret, 'utf8')), algorithms: cfg.algorithms ?? DEFAULT_SECRET_ALGORITHMS }]
  } else if (cfg.publicKeyFile !== undefined) {
    const key = createPublicKey(readFileSync(cfg.publicKeyFile))
    keys = [{ key, algorithms: fittingAlgorithms(cfg.algorithms ?? DEFAULT_PUBLIC_KEY_ALGORITHMS, key) }]
  } else if (cfg.jwksFile !== undefined) {
    const set = parseJwks(readFileSync(cfg.jwksFile))
    if (typeof set === 'string') throw new Error(`auth.jwt.jwksFile: ${set}: ${cfg.jwksFile}`)
    keys = set.map((k) => ({ key: k.key, algorithms: jwksKeyAlgorithms(k, cfg.algorithms ?? DEFAULT_PUBLIC_KEY_ALGORITHMS), ...(k.kid !== undefined ? { kid: k.kid } : {}) }))
  } else {
    throw new Error('auth.jwt: no key (secret, publicKeyFile or jwksFile)')
  }
  if (!keys.some((k) => k.algorithms.length > 0)) throw new Error('auth.jwt: no key fits the allowed algorithms')
  const allowed = [...new Set(keys.flatMap((k) => k.algorithms))]
  const jwks = cfg.jwksFile !== undefined
  const options: jwt.VerifyOptions = {
    ...(cfg.issuer !== undefined ? { issuer: cfg.issuer } : {}),
    ...(cfg.audience !== undefined ? { audience: cfg.audience as string | [string, ...string[]] } : {}),
    clockTolerance: cfg.clockToleranceSeconds ?? 0,
  }

  const tolerance = cfg.clockToleranceSeconds ?? 0
  // Tokens already verified, by their exact text (signature included): a client sends
  // the same token on every request. Time claims are checked again at every use, as
  // jsonwebtoken checks them; a token past them is verified afresh (and refused with
  // the reason). Bounded; the oldest entry goes first.
  const verified = new Map<string, { identity: Identity, exp?: number, nbf?: number }>()
  const fresh = (v: { exp?: number, nbf?: number }): boolean => {
    const now = Math.floor(Date.now() / 1000)
    return (v.nbf === undefined || v.nbf <= now + tolerance) && (v.exp === undefined || now < v.exp + tolerance)
  }
  const verify = (token: string): Identity => {
    const hit = verified.get(token)
    if (hit !== undefined && fresh(hit)) return hit.identity
    const { identity: who, payload } = verifyToken(token)
    const exp = own(payload, 'exp')
    const nbf = own(payload, 'nbf')
    if (verified.size >= VERIFIED_TOKENS_MAX) verified.delete(verified.keys().next().value as string)
    verified.set(token, { identity: who, ...(typeof exp === 'number' ? { exp } : {}), ...(typeof nbf === 'number' ? { nbf } : {}) })
    return who
  }

  const verifyToken = (token: string): { identity: Identity, payload: Record<string, unknown> } => {
    if (!COMPACT_JWS.test(token)) throw unauthenticated('invalid bearer token: malformed token (expected a JWT)')
    let header: jwt.JwtHeader
    try {
      const decoded = jwt.decode(token, { complete: true })
      if (decoded === null || typeof decoded.header?.alg !== 'string') throw new Error('no header')
      header = decoded.header
    } catch {
      throw unauthenticated('invalid bearer token: malformed token')
    }
    // Only the algorithm names the gateway knows are repeated back.
    const alg = header.alg
    const named = JWT_ALGORITHMS.includes(alg) || alg.toLowerCase() === 'none' ? `${alg} ` : ''
    if (!allowed.includes(alg)) throw unauthenticated(`invalid bearer token: algorithm ${named}not allowed (allowed: ${allowed.join(', ')})`)
    const key = keyFor(header, keys, jwks)
    if (!key.algorithms.includes(alg)) throw unauthenticated(`invalid bearer token: algorithm ${named}not allowed for the token's key (allowed: ${key.algorithms.join(', ') || 'none'})`)

    let payload: unknown
    try {
      payload = jwt.verify(token, key.key, { ...options, algorithms: [...key.algorithms] as jwt.Algorithm[] })
    } catch (err) {
      throw unauthenticated(`invalid bearer token: ${verifyFailure(err)}`)
    }
    if (typeof payload !== 'object' || payload === null || Array.isArray(payload)) throw unauthenticated('invalid bearer token: the payload is not a JSON object')
    const p = payload as Record<string, unknown>
    if (requireExp && own(p, 'exp') === undefined) throw unauthenticated('invalid bearer token: the token has no expiry (exp)')

    const subject = own(p, claims.subject)
    if (typeof subject !== 'string' || subject === '') {
      throw unauthenticated(`invalid bearer token: ${subject === undefined ? `no "${claims.subject}" claim (the subject)` : `the "${claims.subject}" claim must be a non-empty string`}`)
    }
    const tenant = own(p, claims.tenant)
    if (tenant !== undefined && tenant !== null && (typeof tenant !== 'string' || tenant === '')) {
      throw unauthenticated(`invalid bearer token: the "${claims.tenant}" claim must be a non-empty string`)
    }
    const jti = own(p, 'jti')
    return {
      payload: p,
      identity: identity({
        subject,
        tenant: typeof tenant === 'string' ? tenant : null,
        roles: rolesOf(own(p, claims.roles), claims.roles),
        method: 'jwt',
        ...(typeof jti === 'string' ? { tokenId: jti } : {}),
      }),
    }
  }
  return verify
}

/** Verified tokens kept per verifier. */
const VERIFIED_TOKENS_MAX = 4096

// ---------------------------------------------------------------------------
// Client certificates

/** The identity of the verified client certificate on `socket`, mapped by `mapping`. */
function certificateIdentity (socket: TLSSocket, mapping: MtlsMappingConfig): Identity {
  if (socket.authorized !== true) throw unauthenticated('client certificate not verified')
  const cert = socket.getPeerCertificate(false)
  if (!cert?.raw) throw unauthenticated('no client certificate')
  // Node gives a multi-valued attribute (OU=a, OU=b) as a list.
  const subject = (cert.subject ?? {}) as unknown as Record<string, string | string[] | undefined>
  const values = (name: string): string[] => {
    const v = subject[name]
    return (v === undefined ? [] : Array.isArray(v) ? v : [v]).filter((s) => s !== '')
  }
  const first = (names: readonly string[]): string | undefined => {
    for (const name of names) {
      const vs = values(name)
      if (vs.length > 1) throw unauthenticated(`the client certificate's subject has more than one ${name}`)
      if (vs.length === 1) return vs[0]
    }
    return undefined
  }
  const sub = first(mapping.subject)
  if (sub === undefined) throw unauthenticated(`the client certificate's subject has no ${mapping.subject.join(' or ')}`)
  return identity({
    subject: sub,
    tenant: first(mapping.tenant) ?? null,
    roles: mapping.roles.flatMap(values),
    method: 'mtls',
    certFingerprint: createHash('sha256').update(cert.raw).digest('hex'),
  })
}

// ---------------------------------------------------------------------------

function requiresClientCertificate (listener: ListenerConfig): boolean {
  return listener.kind === 'tcp' && listener.tls?.ca !== undefined
}

/** What a listener accepts, in words: empty when it refuses every request. */
export function acceptedCredentials (auth: Config['auth'], listener: ListenerConfig): string[] {
  const out: string[] = []
  if (auth.jwt !== undefined) out.push('a bearer token (Authorization: Bearer <JWT>)')
  if (requiresClientCertificate(listener)) out.push('a client certificate')
  if (listener.containerIdentity !== undefined) {
    out.push(listener.containerIdentity.default !== undefined ? 'requests from any caller (a container as itself, others as its default identity)' : 'requests from containers the engine knows')
  }
  if (listener.containerIdentity?.default !== undefined) { /* said above */ } else if (listener.identity !== undefined) out.push('requests without credentials, as its fixed identity')
  else if (listener.anonymous === true) out.push('anonymous requests')
  return out
}

export function createAuthenticator (auth: Config['auth']): Authenticator {
  const bearer = auth.jwt === undefined ? undefined : createJwtVerifier(auth.jwt)
  const mapping = auth.mtls ?? defaultMtlsMapping()
  return {
    authenticate (req, listener, caller) {
      const header = req.headers.authorization
      if (header !== undefined) {
        const token = bearerToken(header)
        if (bearer === undefined) throw unauthenticated('bearer tokens are not accepted: auth.jwt is not configured')
        return bearer(token)
      }
      if (requiresClientCertificate(listener)) return certificateIdentity(req.socket as TLSSocket, mapping)
      const containers = listener.containerIdentity
      if (containers !== undefined) {
        if (caller?.kind === 'container') {
          return identity({ subject: `container:${caller.container.name}`, tenant: null, roles: [...caller.roles], method: 'container', container: caller.container.id })
        }
        if (containers.default !== undefined) {
          return identity({ subject: containers.default.subject, tenant: containers.default.tenant ?? null, roles: containers.default.roles, method: 'listener' })
        }
        if (listener.anonymous !== true) throw unauthenticated(`authentication required: the caller is no container this listener knows (${caller?.kind === 'unknown' ? caller.why : 'not looked up'}); send a bearer token`)
      }
      if (listener.identity !== undefined) {
        return identity({ subject: listener.identity.subject, tenant: listener.identity.tenant ?? null, roles: listener.identity.roles, method: 'listener' })
      }
      if (listener.anonymous === true) return ANONYMOUS
      const accepted = acceptedCredentials(auth, listener)
      throw unauthenticated(accepted.length > 0
        ? `authentication required: send ${accepted.join(' or ')}`
        : 'authentication required: this listener accepts no credentials (configure auth.jwt, or give the listener a client CA, a fixed identity or anonymous: true)')
    },
  }
}
