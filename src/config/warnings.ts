/**
 * What `portcullis config check` warns about in a valid configuration: settings the
 * gateway accepts and would start with, but that an operator most likely did not mean.
 * Warnings never fail the check (the problems in resolve.ts do).
 */
import fs from 'node:fs'
import http from 'node:http'
import https from 'node:https'
import { dirname } from 'node:path'
import { formatHostPort } from './addresses'
import type { Config, ListenerConfig } from './types'

/** HS256 wants a key as long as its hash (RFC 7518 §3.2): 256 bits. */
const MIN_SECRET_BYTES = 32
/** Words that mark a secret copied from an example rather than generated. */
const PLACEHOLDERS = ['changeme', 'changeit', 'replaceme', 'placeholder', 'secret', 'password', 'passwd', 'example', 'default', 'sample', 'dummy', 'insecure', 'letmein', 'todo', 'xxxx']
/** How long the engine has to answer `/_ping` (it answers in well under a millisecond). */
const PING_TIMEOUT_MS = 2000

/** Every warning for `config`, one line each, without the `warning:` prefix. */
export async function configWarnings (config: Config): Promise<string[]> {
  return [
    ...secretWarnings(config),
    ...await upstreamWarnings(config),
    ...fileWarnings('audit.file', config.audit.file),
    // Not writable: the record stays in memory, and a restart forgets the tenants' cache sources.
    ...fileWarnings('provenance.file', config.provenance.file ?? undefined),
    ...config.listen.flatMap((l, i) => listenerWarnings(l, i)),
  ]
}

function secretWarnings (config: Config): string[] {
  const secret = config.auth.jwt?.secret
  if (secret === undefined) return []
  const out: string[] = []
  const bytes = Buffer.byteLength(secret)
  if (bytes < MIN_SECRET_BYTES) out.push(`auth.jwt.secret is ${bytes} bytes long: anyone who guesses it signs tokens for any tenant; use at least ${MIN_SECRET_BYTES} random bytes (openssl rand -hex 32)`)
  const folded = secret.toLowerCase().replace(/[^a-z0-9]/g, '')
  const word = PLACEHOLDERS.find((w) => folded.includes(w))
  if (word !== undefined || /^(.)\1*$/.test(folded)) out.push(`auth.jwt.secret looks like a placeholder${word !== undefined ? ` (it contains "${word}")` : ''}: generate one (openssl rand -hex 32)`)
  return out
}

/** The engine must exist and answer `/_ping`, as the gateway's readiness check asks it. */
async function upstreamWarnings (config: Config): Promise<string[]> {
  const u = config.upstream
  const from = config.upstreamFrom !== undefined && config.upstreamFrom !== 'config' ? ` (from ${config.upstreamFrom})` : ''
  if (u.kind === 'unix') {
    let st: fs.Stats
    try {
      st = fs.statSync(u.path)
    } catch (err) {
      return [`upstream ${u.url}${from}: ${u.path} does not exist (${(err as NodeJS.ErrnoException).code ?? 'error'}): is the engine running?`]
    }
    if (!st.isSocket()) return [`upstream ${u.url}${from}: ${u.path} is not a socket`]
  }
  const answer = await ping(config)
  return answer === null ? [] : [`upstream ${u.url}${from}: GET /_ping ${answer}`]
}

/** Null when the engine answers `/_ping` with 200; else what happened instead. */
async function ping (config: Config): Promise<string | null> {
  const u = config.upstream
  return await new Promise((resolve) => {
    const options: https.RequestOptions = { method: 'GET', path: '/_ping', timeout: PING_TIMEOUT_MS }
    let req: http.ClientRequest
    if (u.kind === 'unix') req = http.request({ ...options, socketPath: u.path })
    else if (u.tls !== undefined) req = https.request({ ...options, host: u.host, port: u.port, cert: u.tls.material.cert, key: u.tls.material.key, ...(u.tls.material.ca ? { ca: u.tls.material.ca } : {}) })
    else req = http.request({ ...options, host: u.host, port: u.port })
    req.on('response', (res) => {
      res.resume()
      resolve(res.statusCode === 200 ? null : `answered ${res.statusCode ?? '?'}: is that a Docker engine?`)
    })
    req.on('timeout', () => { req.destroy(); resolve(`got no answer within ${PING_TIMEOUT_MS / 1000} s`) })
    req.on('error', (err: NodeJS.ErrnoException) => { resolve(`failed: ${err.code ?? err.message}`) })
    req.end()
  })
}

/**
 * A file's directory must exist and be writable: the audit trail (with onFailure closed, a
 * trail that cannot be opened stops the start), the provenance record.
 */
function fileWarnings (key: string, file: string | undefined): string[] {
  if (file === undefined) return []
  const dir = dirname(file)
  let st: fs.Stats
  try {
    st = fs.statSync(dir)
  } catch (err) {
    return [`${key} ${file}: its directory ${dir} does not exist (${(err as NodeJS.ErrnoException).code ?? 'error'})`]
  }
  if (!st.isDirectory()) return [`${key} ${file}: ${dir} is not a directory`]
  try {
    fs.accessSync(dir, fs.constants.W_OK)
  } catch (err) {
    return [`${key} ${file}: its directory ${dir} is not writable by this user (${(err as NodeJS.ErrnoException).code ?? 'error'})`]
  }
  return []
}

/**
 * A TCP listener that lets requests through without credentials (anonymous, or a fixed
 * identity) and asks for no client certificate: anyone who can reach the port acts so.
 */
function listenerWarnings (l: ListenerConfig, i: number): string[] {
  if (l.kind !== 'tcp' || l.tls?.ca !== undefined) return []
  const at = `listen[${i}] (tcp ${formatHostPort(l)})`
  const fix = 'require client certificates (tls with ca) or bearer tokens, or use a unix socket'
  if (l.identity !== undefined) return [`${at}: has no authentication: anyone who can reach the port acts as ${l.identity.subject} (roles ${l.identity.roles.join(', ') || 'none'}); ${fix}`]
  if (l.anonymous === true) return [`${at}: has no authentication: anyone who can reach the port acts as anonymous; ${fix}`]
  return []
}
