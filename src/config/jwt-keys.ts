/**
 * JWT verification keys and algorithms, shared by config validation (which reports
 * problems at load time) and the gateway's authenticator (which uses the keys).
 */
import { createPublicKey, type JsonWebKey, type KeyObject } from 'node:crypto'
import { errorCode } from './files'

export const HMAC_ALGORITHMS: readonly string[] = ['HS256', 'HS384', 'HS512']
export const JWT_ALGORITHMS: readonly string[] = [
  ...HMAC_ALGORITHMS,
  'RS256', 'RS384', 'RS512',
  'PS256', 'PS384', 'PS512',
  'ES256', 'ES384', 'ES512',
]

/** Algorithms accepted when `auth.jwt.algorithms` is not given. */
export const DEFAULT_SECRET_ALGORITHMS: readonly string[] = ['HS256']
export const DEFAULT_PUBLIC_KEY_ALGORITHMS: readonly string[] = ['RS256', 'ES256']

const EC_CURVES: { [alg: string]: string } = { ES256: 'prime256v1', ES384: 'secp384r1', ES512: 'secp521r1' }

/** Why the asymmetric algorithm `alg` cannot verify with `key` (a public key), or null if it can. */
export function keyFitProblem (alg: string, key: KeyObject, where: string): string | null {
  const type = key.asymmetricKeyType
  if (type === 'rsa') return alg.startsWith('RS') || alg.startsWith('PS') ? null : `"${alg}" does not fit the RSA key in ${where}`
  if (type === 'rsa-pss') return alg.startsWith('PS') ? null : `"${alg}" does not fit the RSA-PSS key in ${where}`
  if (type === 'ec') {
    const curve = key.asymmetricKeyDetails?.namedCurve
    const want = EC_CURVES[alg]
    if (want === undefined) return `"${alg}" does not fit the EC key in ${where}`
    return curve === undefined || curve === want ? null : `"${alg}" does not fit the EC key (curve ${curve}) in ${where}`
  }
  return `"${alg}" does not fit the ${type ?? 'unknown'} key in ${where}`
}

/** The algorithms of `algs` that can verify with the public key `key`. */
export function fittingAlgorithms (algs: readonly string[], key: KeyObject): string[] {
  return algs.filter((alg) => !HMAC_ALGORITHMS.includes(alg) && keyFitProblem(alg, key, '') === null)
}

/** A signing key from a JSON Web Key Set. */
export interface JwksKey {
  readonly kid?: string
  /** The key's own `alg`, when the set names one: only this algorithm may use it. */
  readonly alg?: string
  readonly key: KeyObject
}

/**
 * Parses a JWKS file: `{ "keys": [ {kty, ...}, ... ] }`. Symmetric (`oct`) keys,
 * keys that do not parse, duplicate `kid`s and unknown `alg`s are problems; keys
 * whose `use` is not `sig` are left out. Returns the signing keys, or a problem message.
 */
export function parseJwks (data: Buffer): JwksKey[] | string {
  let doc: unknown
  try {
    doc = JSON.parse(data.toString('utf8'))
  } catch (err) {
    return `not valid JSON (${errorCode(err)})`
  }
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) return 'not a JSON Web Key Set: expected an object'
  const keys = (doc as { keys?: unknown }).keys
  if (!Array.isArray(keys) || keys.length === 0) return 'not a JSON Web Key Set: expected a non-empty "keys" array'
  const out: JwksKey[] = []
  const kids = new Map<string, number>()
  for (let i = 0; i < keys.length; i++) {
    const k: unknown = keys[i]
    if (typeof k !== 'object' || k === null || Array.isArray(k)) return `keys[${i}]: expected an object`
    const jwk = k as { [key: string]: unknown }
    if (typeof jwk['kty'] !== 'string') return `keys[${i}]: missing "kty"`
    if (jwk['kty'] === 'oct') return `keys[${i}]: symmetric ("oct") keys are not allowed in a JWKS file; use auth.jwt.secret`
    const kid = jwk['kid']
    if (kid !== undefined && typeof kid !== 'string') return `keys[${i}]: "kid" must be a string`
    if (kid !== undefined) {
      const first = kids.get(kid)
      if (first !== undefined) return `keys[${i}]: duplicate kid ${JSON.stringify(kid)} (also keys[${first}])`
      kids.set(kid, i)
    }
    const alg = jwk['alg']
    if (alg !== undefined && (typeof alg !== 'string' || HMAC_ALGORITHMS.includes(alg) || !JWT_ALGORITHMS.includes(alg))) {
      return `keys[${i}]: unsupported "alg" ${JSON.stringify(alg)}`
    }
    let key: KeyObject
    try {
      key = createPublicKey({ key: jwk as JsonWebKey, format: 'jwk' })
    } catch (err) {
      return `keys[${i}]: not a valid public key (${errorCode(err)})`
    }
    if (alg !== undefined) {
      const problem = keyFitProblem(alg, key, `keys[${i}]`)
      if (problem !== null) return problem
    }
    const use = jwk['use']
    if (use !== undefined && use !== 'sig') continue
    out.push({ ...(kid !== undefined ? { kid } : {}), ...(alg !== undefined ? { alg } : {}), key })
  }
  if (out.length === 0) return 'no signing keys (every key has a "use" other than "sig")'
  return out
}

/** The algorithms a JWKS key may verify, given the configured (or default) list. */
export function jwksKeyAlgorithms (k: JwksKey, algs: readonly string[]): string[] {
  return fittingAlgorithms(k.alg === undefined ? algs : algs.filter((a) => a === k.alg), k.key)
}
