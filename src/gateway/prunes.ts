/**
 * One prune at a time on the engine. dockerd runs a single prune of a kind at once and
 * answers another that arrives meanwhile `409 a prune operation is already running`
 * (moby daemon `pruneRunning`, shared by container and network prunes; the image and
 * volume services keep one each). On a private engine a tenant's prune never meets
 * another tenant's; through one gateway, two tenants' `docker network prune` at the same
 * moment would. So the gateway sends prunes one after another (in this process: with
 * `workers` > 1, or beside the engine's other clients, the engine's 409 can still come).
 */
const PRUNES = new Set(['ContainerPrune', 'ImagePrune', 'NetworkPrune', 'VolumePrune', 'BuildPrune'])

let last: Promise<void> = Promise.resolve()

/** For a prune: waits for the prunes before it and returns the release; null for any other operation. */
export async function pruneTurn (operation: string): Promise<(() => void) | null> {
  if (!PRUNES.has(operation)) return null
  const before = last
  let release!: () => void
  last = new Promise((resolve) => { release = resolve })
  await before
  return release
}
