import type { RegistryAuth } from '../../config/credentials'

/** The X-Registry-Auth value the docker CLI would send for these credentials. */
export function registryAuthHeader (auth: RegistryAuth | undefined, registry: string): string {
  const doc = auth ? { ...auth, serveraddress: registry } : {}
  // URL-safe base64 *with* padding: dockerd decodes it with Go's base64.URLEncoding
  // and silently treats an unpadded value as no credentials at all.
  return Buffer.from(JSON.stringify(doc)).toString('base64').replace(/\+/g, '-').replace(/\//g, '_')
}

/**
 * The X-Registry-Config value of a build: a map of registry to credentials, as the CLI
 * sends it (base64url; the engine decodes either padding, but the CLI pads).
 */
export function registryConfigHeader (auths: Readonly<Record<string, RegistryAuth>>): string {
  // Docker Hub's credentials are looked up under the index server's address (registry.ResolveAuthConfig).
  const key = (registry: string): string => registry === 'docker.io' ? 'https://index.docker.io/v1/' : registry
  const doc = Object.fromEntries(Object.entries(auths).map(([registry, auth]) => [key(registry), { ...auth, serveraddress: key(registry) }]))
  return Buffer.from(JSON.stringify(doc)).toString('base64').replace(/\+/g, '-').replace(/\//g, '_')
}
