/**
 * Per-tenant registry credentials, held by the gateway so that tenants never see
 * them. The file (config `registries.credentials`) must not be readable by group or
 * others:
 *
 *   team-a:
 *     "127.0.0.1:5000": { username: builder, password: s3cret }
 *     docker.io: { identitytoken: "..." }
 *
 * Loaded with the rest of the configuration; the gateway puts them into
 * `X-Registry-Auth` (src/gateway/tenancy/registry-auth.ts) and into the body of
 * `/auth`; the values never appear in logs or audit records.
 */
import fs from 'node:fs'
import { parse as parseYaml } from 'yaml'

export interface RegistryAuth {
  readonly username?: string
  readonly password?: string
  readonly identitytoken?: string
}

export class Credentials {
  constructor (private readonly byTenant: ReadonlyMap<string, ReadonlyMap<string, RegistryAuth>> = new Map()) {}

  get (tenant: string, registry: string): RegistryAuth | undefined {
    return this.byTenant.get(tenant)?.get(registry.toLowerCase())
  }

  /** The registries the gateway holds credentials of `tenant` for (a build's X-Registry-Config). */
  registries (tenant: string): string[] {
    return [...(this.byTenant.get(tenant)?.keys() ?? [])]
  }

  /** Which tenants have credentials for how many registries (never the values). */
  describe (): Record<string, string[]> {
    return Object.fromEntries([...this.byTenant].map(([t, m]) => [t, [...m.keys()]]))
  }
}

const AUTH_KEYS = ['username', 'password', 'identitytoken']

/** Read and check the credentials file; every problem is pushed to `problems`. */
export function loadCredentials (file: string, at: string, problems: string[]): Credentials {
  let st: fs.Stats
  try {
    st = fs.statSync(file)
  } catch (err) {
    problems.push(`${at}: file not readable: ${file} (${(err as NodeJS.ErrnoException).code ?? 'error'})`)
    return new Credentials()
  }
  if ((st.mode & 0o077) !== 0) {
    problems.push(`${at}: ${file} is accessible to group or others (mode ${(st.mode & 0o777).toString(8).padStart(4, '0')}); it holds registry passwords: chmod 600 it`)
    return new Credentials()
  }
  let doc: unknown
  try {
    doc = parseYaml(fs.readFileSync(file, 'utf8'))
  } catch (err) {
    problems.push(`${at}: ${file}: ${(err as Error).message.split('\n')[0]}`)
    return new Credentials()
  }
  const out = new Map<string, Map<string, RegistryAuth>>()
  if (doc === null || doc === undefined) return new Credentials(out)
  if (typeof doc !== 'object' || Array.isArray(doc)) { problems.push(`${at}: ${file}: expected a mapping of tenant → registry → credentials`); return new Credentials() }
  for (const [tenant, regs] of Object.entries(doc)) {
    if (regs === null || typeof regs !== 'object' || Array.isArray(regs)) { problems.push(`${at}: ${file}: ${tenant}: expected a mapping of registry → credentials`); continue }
    const m = new Map<string, RegistryAuth>()
    for (const [registry, auth] of Object.entries(regs as Record<string, unknown>)) {
      const where = `${at}: ${file}: ${tenant}.${registry}`
      if (auth === null || typeof auth !== 'object' || Array.isArray(auth)) { problems.push(`${where}: expected { username, password } or { identitytoken }`); continue }
      const a = auth as Record<string, unknown>
      for (const k of Object.keys(a)) if (!AUTH_KEYS.includes(k)) problems.push(`${where}.${k}: unknown key`)
      if (!Object.values(a).every((v) => typeof v === 'string')) { problems.push(`${where}: values must be strings`); continue }
      if (!((a.username && a.password) || a.identitytoken)) { problems.push(`${where}: give username and password, or identitytoken`); continue }
      m.set(registry.toLowerCase(), Object.freeze({ ...a }) as RegistryAuth)
    }
    out.set(tenant, m)
  }
  return new Credentials(out)
}
