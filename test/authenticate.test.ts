// The authentication stage on its own, without an engine: bearer tokens (HS256,
// RS256, ES256, a JWKS with kids), client certificates, listener identities,
// anonymous listeners, and what is refused and why.
import { execFileSync } from 'node:child_process'
import { X509Certificate, createHash, createHmac, generateKeyPairSync, type KeyObject } from 'node:crypto'
import fs from 'node:fs'
import type { IncomingMessage } from 'node:http'
import os from 'node:os'
import path from 'node:path'
import jwt from 'jsonwebtoken'
import t from 'tap'
import { parseConfig, type Config, type ListenerConfig } from '../src/config'
import { ANONYMOUS, createAuthenticator, type Identity } from '../src/gateway/authenticate'
import { isGatewayError } from '../src/api/errors'
import { assertTool } from './helpers/tools'

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pca-'))
t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))

const SECRET = 'a shared secret of reasonable length for HS256'
const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 })
const rsaOther = generateKeyPairSync('rsa', { modulusLength: 2048 })
const ec = generateKeyPairSync('ec', { namedCurve: 'prime256v1' })
const pem = (k: KeyObject): string => k.export({ type: 'spki', format: 'pem' }) as string
const jwk = (k: KeyObject, extra: object = {}): object => ({ ...k.export({ format: 'jwk' }), ...extra })
fs.writeFileSync(path.join(dir, 'rsa.pub'), pem(rsa.publicKey))
fs.writeFileSync(path.join(dir, 'ec.pub'), pem(ec.publicKey))
fs.writeFileSync(path.join(dir, 'jwks.json'), JSON.stringify({ keys: [jwk(rsa.publicKey, { kid: 'rsa-1', use: 'sig' }), jwk(ec.publicKey, { kid: 'ec-1' })] }))
fs.writeFileSync(path.join(dir, 'one.json'), JSON.stringify({ keys: [jwk(ec.publicKey)] }))

/** The auth section of a config file written into `dir`. */
function auth (yaml: string): Config['auth'] {
  return parseConfig(`auth:\n${yaml}\n`, path.join(dir, 'portcullis.yaml')).auth
}

const unix: ListenerConfig = { kind: 'unix', name: 'unix:/x.sock', path: '/x.sock' }
const fixed: ListenerConfig = { ...unix, identity: { subject: 'ops', tenant: 'acme', roles: ['admin'] } }
const anonymous: ListenerConfig = { ...unix, anonymous: true }
const mtlsListener = { kind: 'tcp', name: 'mtls', host: '127.0.0.1', port: 2376, tls: { cert: 'c', key: 'k', ca: 'ca', material: { cert: Buffer.alloc(0), key: Buffer.alloc(0), ca: Buffer.alloc(0) } } } as ListenerConfig

interface FakeSocket { authorized?: boolean, getPeerCertificate?: () => object }
function request (headers: Record<string, string> = {}, socket: FakeSocket = {}): IncomingMessage {
  return { headers, socket } as unknown as IncomingMessage
}

/** The 401 message authenticate throws, or fails the test if it returns. */
function refusal (fn: () => Identity): string {
  try {
    const id = fn()
    return `(not refused: ${JSON.stringify(id)})`
  } catch (err) {
    if (isGatewayError(err) && err.code === 'UNAUTHENTICATED' && err.status === 401) return err.message
    throw err
  }
}

const now = (): number => Math.floor(Date.now() / 1000)
const b64 = (o: object): string => Buffer.from(JSON.stringify(o)).toString('base64url')
/** An HS256 token built by hand, for payloads jsonwebtoken's sign() would refuse to write. */
const handmade = (payload: object): string => {
  const input = `${b64({ alg: 'HS256', typ: 'JWT' })}.${b64(payload)}`
  return `${input}.${createHmac('sha256', SECRET).update(input).digest('base64url')}`
}

// ---------------------------------------------------------------------------
// Bearer tokens

interface TokenCase {
  name: string
  /** The auth section (YAML, indented under auth:). */
  config: string
  token: () => string
  /** The identity expected (a subset), or the 401 message expected (a pattern). */
  want: Partial<Identity> | RegExp
}

const HS = `  jwt: { secret: "${SECRET}", issuer: https://issuer.example, audience: portcullis, clockToleranceSeconds: 30 }`
const RS = '  jwt: { publicKeyFile: rsa.pub }'
const ES = '  jwt: { publicKeyFile: ec.pub }'
const JWKS = '  jwt: { jwksFile: jwks.json }'
const hs = (payload: object, opts: jwt.SignOptions = {}): string =>
  jwt.sign({ iss: 'https://issuer.example', aud: 'portcullis', exp: now() + 300, ...payload }, SECRET, { algorithm: 'HS256', ...opts })
const rs = (payload: object, opts: jwt.SignOptions = {}, key: KeyObject = rsa.privateKey): string =>
  jwt.sign({ exp: now() + 300, ...payload }, key, { algorithm: 'RS256', ...opts })
const es = (payload: object, opts: jwt.SignOptions = {}): string => jwt.sign({ exp: now() + 300, ...payload }, ec.privateKey, { algorithm: 'ES256', ...opts })

const cases: TokenCase[] = [
  { name: 'HS256: subject, tenant, roles as a list, jti', config: HS, token: () => hs({ sub: 'alice', tenant: 'acme', roles: ['dev', 'ops', 'dev'], jti: 'tok-1' }), want: { subject: 'alice', tenant: 'acme', roles: ['dev', 'ops'], method: 'jwt', tokenId: 'tok-1' } },
  { name: 'HS256: roles as a space/comma separated string', config: HS, token: () => hs({ sub: 'alice', roles: 'dev, ops  audit,' }), want: { subject: 'alice', tenant: null, roles: ['dev', 'ops', 'audit'] } },
  { name: 'HS256: no roles, no tenant', config: HS, token: () => hs({ sub: 'bob' }), want: { subject: 'bob', tenant: null, roles: [] } },
  { name: 'HS256: roles of the wrong type', config: HS, token: () => hs({ sub: 'bob', roles: [1, 2] }), want: /^invalid bearer token: the "roles" claim must be a list of strings or a string$/ },
  { name: 'HS256: tenant of the wrong type', config: HS, token: () => hs({ sub: 'bob', tenant: ['a'] }), want: /^invalid bearer token: the "tenant" claim must be a non-empty string$/ },
  { name: 'HS256: missing sub', config: HS, token: () => hs({ tenant: 'acme' }), want: /^invalid bearer token: no "sub" claim \(the subject\)$/ },
  { name: 'HS256: empty sub', config: HS, token: () => hs({ sub: '' }), want: /^invalid bearer token: the "sub" claim must be a non-empty string$/ },
  { name: 'HS256: expired beyond the leeway', config: HS, token: () => hs({ sub: 'a', exp: now() - 120 }), want: /^invalid bearer token: token expired at \d{4}-\d\d-\d\dT/ },
  { name: 'HS256: expired within the leeway', config: HS, token: () => hs({ sub: 'a', exp: now() - 10 }), want: { subject: 'a' } },
  { name: 'HS256: nbf in the future, within the leeway', config: HS, token: () => hs({ sub: 'a', nbf: now() + 10 }), want: { subject: 'a' } },
  { name: 'HS256: nbf in the future, beyond the leeway', config: HS, token: () => hs({ sub: 'a', nbf: now() + 120 }), want: /^invalid bearer token: token not valid yet \(not before \d{4}-/ },
  { name: 'HS256: wrong issuer', config: HS, token: () => hs({ sub: 'a', iss: 'https://evil.example' }), want: /^invalid bearer token: wrong issuer$/ },
  { name: 'HS256: no issuer', config: HS, token: () => jwt.sign({ sub: 'a', aud: 'portcullis', exp: now() + 60 }, SECRET), want: /^invalid bearer token: wrong issuer$/ },
  { name: 'HS256: wrong audience', config: HS, token: () => hs({ sub: 'a', aud: 'someone-else' }), want: /^invalid bearer token: wrong audience$/ },
  { name: 'HS256: one of several audiences matches', config: HS, token: () => hs({ sub: 'a', aud: ['x', 'portcullis'] }), want: { subject: 'a' } },
  { name: 'HS256: no exp (required by default)', config: HS, token: () => jwt.sign({ sub: 'a', iss: 'https://issuer.example', aud: 'portcullis' }, SECRET), want: /^invalid bearer token: the token has no expiry \(exp\)$/ },
  { name: 'HS256: no exp with requireExp: false', config: `  jwt: { secret: "${SECRET}", requireExp: false }`, token: () => jwt.sign({ sub: 'a' }, SECRET), want: { subject: 'a' } },
  { name: 'HS256: exp that is not a number', config: HS, token: () => handmade({ sub: 'a', iss: 'https://issuer.example', aud: 'portcullis', exp: 'tomorrow' }), want: /^invalid bearer token: the exp claim is not a number$/ },
  { name: 'HS256: signed with another secret', config: HS, token: () => jwt.sign({ sub: 'a', iss: 'https://issuer.example', aud: 'portcullis', exp: now() + 60 }, 'another secret'), want: /^invalid bearer token: bad signature$/ },
  {
    name: 'HS256: payload tampered with (roles raised), signature kept',
    config: HS,
    token: () => {
      const [h, , s] = hs({ sub: 'a', roles: ['viewer'] }).split('.')
      return `${h}.${b64({ sub: 'a', roles: ['admin'], iss: 'https://issuer.example', aud: 'portcullis', exp: now() + 300 })}.${s}`
    },
    want: /^invalid bearer token: bad signature$/,
  },
  { name: 'HS384 token, HS256 allowed by default', config: HS, token: () => hs({ sub: 'a' }, { algorithm: 'HS384' }), want: /^invalid bearer token: algorithm HS384 not allowed \(allowed: HS256\)$/ },
  { name: 'HS384 token, HS384 configured', config: `  jwt: { secret: "${SECRET}", algorithms: [HS384] }`, token: () => jwt.sign({ sub: 'a', exp: now() + 60 }, SECRET, { algorithm: 'HS384' }), want: { subject: 'a' } },
  { name: 'alg none', config: HS, token: () => `${b64({ alg: 'none', typ: 'JWT' })}.${b64({ sub: 'root', iss: 'https://issuer.example', aud: 'portcullis', exp: now() + 60 })}.`, want: /^invalid bearer token: algorithm none not allowed/ },
  { name: 'alg None (case)', config: RS, token: () => `${b64({ alg: 'None' })}.${b64({ sub: 'root', exp: now() + 60 })}.`, want: /^invalid bearer token: algorithm None not allowed/ },
  { name: 'an unknown alg is not repeated back', config: RS, token: () => `${b64({ alg: 'X<script>' })}.${b64({ sub: 'root' })}.c2ln`, want: /^invalid bearer token: algorithm not allowed \(allowed: RS256\)$/ },
  { name: 'not a JWT', config: HS, token: () => 'abc', want: /^invalid bearer token: malformed token \(expected a JWT\)$/ },
  { name: 'payload not an object', config: `  jwt: { secret: "${SECRET}", requireExp: false }`, token: () => handmade(['sub', 'a']), want: /^invalid bearer token: the payload is not a JSON object$/ },
  { name: 'header not JSON', config: HS, token: () => `${Buffer.from('{oops').toString('base64url')}.${b64({ sub: 'a' })}.c2ln`, want: /^invalid bearer token: malformed token$/ },

  { name: 'RS256 with publicKeyFile', config: RS, token: () => rs({ sub: 'carol', roles: ['ci'] }), want: { subject: 'carol', roles: ['ci'], method: 'jwt' } },
  // The classic confusion: an HMAC token keyed with the (public) PEM text.
  { name: 'HS256 keyed with the public key PEM, against publicKeyFile', config: RS, token: () => jwt.sign({ sub: 'root', exp: now() + 60 }, pem(rsa.publicKey), { algorithm: 'HS256' }), want: /^invalid bearer token: algorithm HS256 not allowed \(allowed: RS256\)$/ },
  { name: 'ES256 token against an RSA publicKeyFile', config: RS, token: () => es({ sub: 'a' }), want: /^invalid bearer token: algorithm ES256 not allowed \(allowed: RS256\)$/ },
  { name: 'RS256 signed by another key', config: RS, token: () => rs({ sub: 'a' }, {}, rsaOther.privateKey), want: /^invalid bearer token: bad signature$/ },
  { name: 'RS384 not in the default list', config: RS, token: () => rs({ sub: 'a' }, { algorithm: 'RS384' }), want: /^invalid bearer token: algorithm RS384 not allowed/ },
  { name: 'PS256 when configured', config: '  jwt: { publicKeyFile: rsa.pub, algorithms: [PS256] }', token: () => rs({ sub: 'a' }, { algorithm: 'PS256' }), want: { subject: 'a' } },
  { name: 'ES256 with publicKeyFile', config: ES, token: () => es({ sub: 'dave', tenant: 't1' }), want: { subject: 'dave', tenant: 't1' } },

  { name: 'JWKS: RS256 with kid rsa-1', config: JWKS, token: () => rs({ sub: 'erin' }, { keyid: 'rsa-1' }), want: { subject: 'erin', method: 'jwt' } },
  { name: 'JWKS: ES256 with kid ec-1', config: JWKS, token: () => es({ sub: 'frank' }, { keyid: 'ec-1' }), want: { subject: 'frank' } },
  { name: 'JWKS: ES256 naming the RSA key', config: JWKS, token: () => es({ sub: 'a' }, { keyid: 'rsa-1' }), want: /^invalid bearer token: algorithm ES256 not allowed for the token's key \(allowed: RS256\)$/ },
  { name: 'JWKS: unknown kid', config: JWKS, token: () => rs({ sub: 'a' }, { keyid: 'rsa-2' }), want: /^invalid bearer token: no key in the key set has the token's key id \(kid\)$/ },
  { name: 'JWKS: no kid, several keys', config: JWKS, token: () => rs({ sub: 'a' }), want: /^invalid bearer token: the token names no key id \(kid\) and the key set has 2 keys$/ },
  { name: 'JWKS: no kid, one key', config: '  jwt: { jwksFile: one.json }', token: () => es({ sub: 'gina' }), want: { subject: 'gina' } },
  { name: 'JWKS: right kid, wrong key', config: JWKS, token: () => rs({ sub: 'a' }, { keyid: 'rsa-1' }, rsaOther.privateKey), want: /^invalid bearer token: bad signature$/ },
  { name: 'JWKS: HS256 keyed with the JWK', config: JWKS, token: () => jwt.sign({ sub: 'a', exp: now() + 60 }, JSON.stringify(jwk(rsa.publicKey)), { algorithm: 'HS256', keyid: 'rsa-1' }), want: /^invalid bearer token: algorithm HS256 not allowed \(allowed: RS256, ES256\)$/ },

  { name: 'claims mapped to other names', config: `  jwt: { secret: "${SECRET}", claims: { subject: email, tenant: org, roles: groups } }`, token: () => jwt.sign({ sub: 'ignored', email: 'h@example.com', org: 'o1', groups: 'a b', exp: now() + 60 }, SECRET), want: { subject: 'h@example.com', tenant: 'o1', roles: ['a', 'b'] } },
  { name: 'mapped subject claim missing', config: `  jwt: { secret: "${SECRET}", claims: { subject: email } }`, token: () => jwt.sign({ sub: 'x', exp: now() + 60 }, SECRET), want: /^invalid bearer token: no "email" claim \(the subject\)$/ },
  { name: 'claims named like Object.prototype members are not inherited', config: `  jwt: { secret: "${SECRET}", claims: { subject: constructor } }`, token: () => jwt.sign({ sub: 'x', exp: now() + 60 }, SECRET), want: /^invalid bearer token: no "constructor" claim/ },
]

t.test('bearer tokens', async (t) => {
  for (const c of cases) {
    const authenticator = createAuthenticator(auth(c.config))
    const token = c.token()
    // Every listener kind: a token that is presented must verify, whatever else the listener accepts.
    for (const listener of [unix, anonymous, fixed, mtlsListener]) {
      const req = request({ authorization: `Bearer ${token}` }, { authorized: true, getPeerCertificate: () => { throw new Error('not consulted') } })
      const what = `${c.name} (${listener === unix ? 'plain' : listener === anonymous ? 'anonymous' : listener === fixed ? 'fixed identity' : 'mTLS'} listener)`
      if (c.want instanceof RegExp) {
        const message = refusal(() => authenticator.authenticate(req, listener))
        t.match(message, c.want, `${what}: 401 ${message}`)
        for (const part of token.split('.').filter((p) => p.length > 8)) t.notOk(message.includes(part), `${what}: the message does not repeat the token`)
      } else {
        const id = authenticator.authenticate(req, listener)
        t.match(id, { method: 'jwt', ...c.want }, `${what}: identity`)
        if (c.want.roles) t.same(id.roles, c.want.roles, `${what}: exactly these roles`)
        t.ok(Object.isFrozen(id) && Object.isFrozen(id.roles), `${what}: the identity is frozen`)
      }
    }
  }
})

t.test('a verified token is remembered, but its time claims are checked at every use', async (t) => {
  const authenticator = createAuthenticator(auth(`  jwt: { secret: "${SECRET}", clockToleranceSeconds: 5 }`))
  const realNow = Date.now
  t.teardown(() => { Date.now = realNow })
  const at = (seconds: number): void => { Date.now = () => seconds * 1000 }
  const t0 = now()
  const token = jwt.sign({ sub: 'alice', tenant: 'acme', roles: ['tenant'], nbf: t0 + 100, exp: t0 + 200 }, SECRET, { algorithm: 'HS256', noTimestamp: true })
  const req = request({ authorization: `Bearer ${token}` })
  at(t0)
  t.match(refusal(() => authenticator.authenticate(req, unix)), /not valid yet/, 'before nbf (beyond the leeway): refused')
  at(t0 + 96)
  t.match(authenticator.authenticate(req, unix), { subject: 'alice', tenant: 'acme' }, 'within the leeway before nbf: accepted')
  at(t0 + 150)
  const first = authenticator.authenticate(req, unix)
  t.equal(authenticator.authenticate(req, unix), first, 'the same token again: the identity verified before')
  at(t0 + 204)
  t.equal(authenticator.authenticate(req, unix), first, 'within the leeway after exp: still accepted')
  at(t0 + 205)
  t.match(refusal(() => authenticator.authenticate(req, unix)), /expired/, 'at exp + leeway: refused, although it was verified before')
  at(t0 + 150)
  const tampered = token.slice(0, -2) + (token.endsWith('AA') ? 'BB' : 'AA')
  t.match(refusal(() => authenticator.authenticate(request({ authorization: `Bearer ${tampered}` }), unix)), /signature|malformed/, 'a token differing in its signature is verified on its own, and refused')
})

t.test('the Authorization header: scheme and shape', async (t) => {
  const authenticator = createAuthenticator(auth(HS))
  const token = hs({ sub: 'alice' })
  t.equal(authenticator.authenticate(request({ authorization: `bearer ${token}` }), unix).subject, 'alice', 'the scheme is case-insensitive')
  t.equal(authenticator.authenticate(request({ authorization: `Bearer   ${token}  ` }), unix).subject, 'alice', 'extra spaces are tolerated')
  const refused: Array<[string, RegExp]> = [
    ['Basic YWxpY2U6c2VjcmV0', /^authorization scheme "Basic" is not accepted; send "Authorization: Bearer <token>"$/],
    [`Token ${token}`, /^authorization scheme "Token" is not accepted/],
    [token, /^authorization scheme is not accepted/],
    ['Bearer', /^empty bearer token$/],
    ['Bearer    ', /^empty bearer token$/],
    ['', /^empty Authorization header/],
    [`Bearer ${token} extra`, /^invalid bearer token: malformed token \(expected a JWT\)$/],
  ]
  for (const [header, want] of refused) {
    // Explicit credentials that fail never fall back to the listener's identity or anonymous access.
    for (const listener of [fixed, anonymous]) {
      const message = refusal(() => authenticator.authenticate(request({ authorization: header }), listener))
      t.match(message, want, `Authorization: ${header.slice(0, 20)}...: ${message}`)
      t.notOk(message.includes(token.split('.')[1]), 'the token is not repeated')
    }
  }
  const none = createAuthenticator({})
  t.equal(refusal(() => none.authenticate(request({ authorization: `Bearer ${token}` }), anonymous)),
    'bearer tokens are not accepted: auth.jwt is not configured', 'a token on a gateway without auth.jwt: 401, not anonymous')
})

t.test('key material is read once, when the authenticator is created', async (t) => {
  const file = path.join(dir, 'rotating.pub')
  fs.writeFileSync(file, pem(rsa.publicKey))
  const authenticator = createAuthenticator(auth('  jwt: { publicKeyFile: rotating.pub }'))
  fs.writeFileSync(file, pem(rsaOther.publicKey))
  t.equal(authenticator.authenticate(request({ authorization: `Bearer ${rs({ sub: 'a' })}` }), unix).subject, 'a', 'the key read at creation is used')
  const reloaded = createAuthenticator(auth('  jwt: { publicKeyFile: rotating.pub }'))
  t.match(refusal(() => reloaded.authenticate(request({ authorization: `Bearer ${rs({ sub: 'a' })}` }), unix)), /bad signature/, 'a new authenticator (reload) reads the new key')
  fs.rmSync(file)
  t.throws(() => createAuthenticator({ jwt: { publicKeyFile: file } }), { code: 'ENOENT' }, 'an unreadable key file fails creation (start-up or reload)')
})

// ---------------------------------------------------------------------------
// Client certificates

function certificate (subject: string): X509Certificate {
  const name = createHash('sha256').update(subject).digest('hex').slice(0, 8)
  const [key, cert] = [path.join(dir, `${name}-key.pem`), path.join(dir, `${name}.pem`)]
  assertTool('openssl')
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-subj', subject, '-days', '1', '-keyout', key, '-out', cert], { stdio: 'ignore' })
  return new X509Certificate(fs.readFileSync(cert))
}

/** A TLS socket as Node presents it after verifying the peer's certificate. */
function peer (cert: X509Certificate, authorized = true): FakeSocket {
  return { authorized, getPeerCertificate: () => cert.toLegacyObject() }
}

t.test('client certificates', async (t) => {
  const alice = certificate('/C=DE/O=acme/OU=dev/OU=ops/CN=alice/UID=a1')
  const fingerprint = alice.fingerprint256.replace(/:/g, '').toLowerCase()
  const defaults = createAuthenticator({})
  const id = defaults.authenticate(request({}, peer(alice)), mtlsListener)
  t.same(id, { subject: 'alice', tenant: 'acme', roles: [], method: 'mtls', certFingerprint: fingerprint }, 'default mapping: CN, O, no roles; sha256 of the DER')
  t.equal(id.certFingerprint, createHash('sha256').update(alice.raw).digest('hex'))

  const mapped = createAuthenticator(auth('  mtls: { subject: [UID, CN], tenant: [OU], roles: [OU, C] }'))
  t.match(refusal(() => mapped.authenticate(request({}, peer(alice)), mtlsListener)), /^the client certificate's subject has more than one OU$/, 'a multi-valued attribute cannot be a tenant')
  const mapped2 = createAuthenticator(auth('  mtls: { subject: [UID, CN], tenant: [L, O], roles: [OU, C] }'))
  t.same(mapped2.authenticate(request({}, peer(alice)), mtlsListener), { subject: 'a1', tenant: 'acme', roles: ['dev', 'ops', 'DE'], method: 'mtls', certFingerprint: fingerprint }, 'configured mapping: first present wins, roles from all')

  const noTenant = certificate('/CN=bob')
  t.match(defaults.authenticate(request({}, peer(noTenant)), mtlsListener), { subject: 'bob', tenant: null, roles: [] }, 'no O: tenant null')
  const noCn = certificate('/O=acme/OU=x')
  t.equal(refusal(() => defaults.authenticate(request({}, peer(noCn)), mtlsListener)), 'the client certificate\'s subject has no CN', 'no CN: 401')
  t.equal(refusal(() => mapped2.authenticate(request({}, peer(noCn)), mtlsListener)), 'the client certificate\'s subject has no UID or CN', 'names every attribute tried')
  const twoCn = certificate('/CN=a/CN=b')
  t.equal(refusal(() => defaults.authenticate(request({}, peer(twoCn)), mtlsListener)), 'the client certificate\'s subject has more than one CN', 'two CNs: 401')

  t.equal(refusal(() => defaults.authenticate(request({}, peer(alice, false)), mtlsListener)), 'client certificate not verified', 'not verified by the TLS layer: 401, never the next method')
  const withIdentity = { ...mtlsListener, identity: { subject: 'fallback', roles: [] } } as ListenerConfig
  t.equal(refusal(() => defaults.authenticate(request({}, { authorized: true, getPeerCertificate: () => ({}) }), withIdentity)), 'no client certificate', 'no certificate on an mTLS listener: 401, even with a fixed identity')

  // A certificate on a listener without a CA is not consulted (Node does not even ask for one there).
  const tlsOnly = { ...mtlsListener, tls: { cert: 'c', key: 'k', material: { cert: Buffer.alloc(0), key: Buffer.alloc(0) } }, anonymous: true } as ListenerConfig
  t.same(defaults.authenticate(request({}, peer(alice)), tlsOnly), ANONYMOUS, 'TLS without ca: the certificate is ignored')

  const jwtToo = createAuthenticator(auth(HS))
  t.match(jwtToo.authenticate(request({ authorization: `Bearer ${hs({ sub: 'tok' })}` }, peer(alice)), mtlsListener), { subject: 'tok', method: 'jwt' }, 'a bearer token comes first, also on an mTLS listener')
})

// ---------------------------------------------------------------------------
// Listener identities, anonymous, nothing

t.test('listener identity, anonymous, and nothing', async (t) => {
  const none = createAuthenticator({})
  const withJwt = createAuthenticator(auth(HS))
  for (const [name, a] of [['without auth.jwt', none], ['with auth.jwt', withJwt]] as const) {
    const id = a.authenticate(request(), fixed)
    t.same(id, { subject: 'ops', tenant: 'acme', roles: ['admin'], method: 'listener' }, `${name}: the listener's fixed identity`)
    t.ok(Object.isFrozen(id), 'frozen')
    const noTenant = a.authenticate(request(), { ...unix, identity: { subject: 'me', roles: [] } })
    t.same(noTenant, { subject: 'me', tenant: null, roles: [], method: 'listener' }, `${name}: no tenant is null`)
    t.same(a.authenticate(request(), anonymous), { subject: 'anonymous', tenant: null, roles: ['anonymous'], method: 'anonymous' }, `${name}: anonymous`)
  }
  t.equal(refusal(() => none.authenticate(request(), unix)),
    'authentication required: this listener accepts no credentials (configure auth.jwt, or give the listener a client CA, a fixed identity or anonymous: true)',
    'nothing accepted: 401 saying so')
  t.equal(refusal(() => withJwt.authenticate(request(), unix)), 'authentication required: send a bearer token (Authorization: Bearer <JWT>)', 'a listener that takes tokens: 401 asking for one')
  t.notMatch(refusal(() => withJwt.authenticate(request(), unix)), SECRET, 'no secret in the message')
})

// ---------------------------------------------------------------------------
// The calling container (listener containerIdentity; callers.ts finds it)

t.test('the calling container, its listener\'s default, and a token before both', async (t) => {
  const a = createAuthenticator(auth(HS))
  const containers = { ...unix, containerIdentity: { labelPrefix: 'io.portcullis.' } } as ListenerConfig
  const withDefault = { ...unix, containerIdentity: { labelPrefix: 'io.portcullis.', default: { subject: 'stranger', roles: ['guest'] } } } as ListenerConfig
  const withAnonymous = { ...containers, anonymous: true } as ListenerConfig
  const container = { id: 'c'.repeat(64), name: 'traefik', labels: { 'io.portcullis.role': 'traefik' }, image: `sha256:${'d'.repeat(64)}` }
  const caller = { kind: 'container' as const, container, roles: ['traefik'], via: 'listed' as const }
  const unknown = { kind: 'unknown' as const, why: 'no container has the address 10.0.0.9', via: 'waited' as const }
  const id = a.authenticate(request(), containers, caller)
  t.same(id, { subject: 'container:traefik', tenant: null, roles: ['traefik'], method: 'container', container: 'c'.repeat(64) }, 'the container, with the roles of its labels')
  t.ok(Object.isFrozen(id), 'frozen')
  t.same(a.authenticate(request(), withDefault, unknown), { subject: 'stranger', tenant: null, roles: ['guest'], method: 'listener' }, 'no container: the default identity')
  t.same(a.authenticate(request(), withAnonymous, unknown), ANONYMOUS, 'no container, no default, anonymous: true')
  t.equal(refusal(() => a.authenticate(request(), containers, unknown)),
    'authentication required: the caller is no container this listener knows (no container has the address 10.0.0.9); send a bearer token', 'no container, no default: 401 saying why')
  t.match(a.authenticate(request({ authorization: `Bearer ${hs({ sub: 'tok' })}` }), containers, caller), { subject: 'tok', method: 'jwt' }, 'a bearer token comes first')
})
