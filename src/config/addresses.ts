import { isIP, isIPv4, isIPv6 } from 'node:net'

/** Maximum length of sun_path on Linux, including the terminating NUL. */
export const UNIX_PATH_MAX = 108

export interface HostPort {
  /** IPv6 addresses without brackets. */
  host: string
  port: number
}

const HOSTNAME_RE = /^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$/

/**
 * Parses `host:port`. IPv6 addresses must be bracketed (`[::1]:2375`); in YAML
 * such a value must be quoted, since a plain scalar cannot start with `[`.
 * Returns the parsed address, or a problem message (without key path).
 */
export function parseHostPort (text: string): HostPort | string {
  const shown = JSON.stringify(text)
  let host: string
  let portText: string
  if (text.startsWith('[')) {
    const close = text.indexOf(']')
    if (close < 0 || text[close + 1] !== ':') return `expected [ipv6]:port, got ${shown}`
    host = text.slice(1, close)
    portText = text.slice(close + 2)
    if (!isIPv6(host)) return `invalid IPv6 address "${host}" in ${shown}`
  } else {
    const colon = text.lastIndexOf(':')
    if (colon < 0) return `expected host:port, got ${shown}`
    host = text.slice(0, colon)
    portText = text.slice(colon + 1)
    if (host === '') return `expected host:port, got ${shown} (the host is missing)`
    if (host.includes(':')) {
      return `IPv6 addresses must be written in brackets, e.g. "[::1]:2375", got ${shown}`
    }
    if (/^[0-9.]+$/.test(host) ? !isIPv4(host) : !HOSTNAME_RE.test(host)) {
      return `invalid host "${host}" in ${shown}`
    }
  }
  if (!/^[0-9]{1,5}$/.test(portText)) {
    return portText === ''
      ? `expected host:port, got ${shown} (the port is missing)`
      : `invalid port "${portText}" in ${shown}, expected 0-65535`
  }
  const port = Number(portText)
  if (port > 65535) return `invalid port "${portText}" in ${shown}, expected 0-65535`
  return { host, port }
}

/** Formats an address back to `host:port`, bracketing IPv6 addresses. */
export function formatHostPort (a: HostPort): string {
  return `${isIP(a.host) === 6 ? `[${a.host}]` : a.host}:${a.port}`
}

/** A comparable key for duplicate detection (hostnames are case-insensitive). */
export function addressKey (a: HostPort): string {
  return formatHostPort({ host: a.host.toLowerCase(), port: a.port })
}
