import { readFileSync } from 'node:fs'
import { X509Certificate, createPrivateKey, type KeyObject } from 'node:crypto'

/** Reads a whole file, or returns a problem message (without key path). */
export function readFileOrProblem (file: string): Buffer | string {
  try {
    return readFileSync(file)
  } catch (err) {
    return `file not readable: ${file} (${errorCode(err)})`
  }
}

export function errorCode (err: unknown): string {
  if (typeof err === 'object' && err !== null) {
    const code = (err as { code?: unknown }).code
    if (typeof code === 'string') return code
    const message = (err as { message?: unknown }).message
    if (typeof message === 'string') return message
  }
  return String(err)
}

const PEM_CERT_RE = /-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g

/** Parses a certificate (PEM or DER; the first of a PEM chain). */
export function parseCertificate (data: Buffer): X509Certificate | string {
  try {
    return new X509Certificate(data)
  } catch (err) {
    return `not a valid certificate (${errorCode(err)})`
  }
}

/** Checks that a CA bundle holds at least one certificate and that each one parses. */
export function checkCaBundle (data: Buffer): string | null {
  const text = data.toString('latin1')
  const blocks = text.match(PEM_CERT_RE)
  if (blocks === null) {
    // Perhaps a single DER certificate.
    const one = parseCertificate(data)
    return typeof one === 'string' ? 'no PEM certificate found' : null
  }
  for (let i = 0; i < blocks.length; i++) {
    const cert = parseCertificate(Buffer.from(blocks[i] ?? '', 'latin1'))
    if (typeof cert === 'string') return `certificate #${i + 1}: ${cert}`
  }
  return null
}

/** Parses an unencrypted private key (PEM or DER). */
export function parsePrivateKey (data: Buffer): KeyObject | string {
  try {
    return createPrivateKey(data)
  } catch (err) {
    return `not a valid unencrypted private key (${errorCode(err)})`
  }
}
