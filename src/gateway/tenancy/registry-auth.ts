import type { RegistryAuth } from '../../config/credentials'

/** The X-Registry-Auth value the docker CLI would send for these credentials. */
export function registryAuthHeader (auth: RegistryAuth | undefined, registry: string): string {
  const doc = auth ? { ...auth, serveraddress: registry } : {}
  // URL-safe base64 *with* padding: dockerd decodes it with Go's base64.URLEncoding
  // and silently treats an unpadded value as no credentials at all.
  return Buffer.from(JSON.stringify(doc)).toString('base64').replace(/\+/g, '-').replace(/\//g, '_')
}
