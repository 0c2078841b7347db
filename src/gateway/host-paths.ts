/**
 * Whether the gateway shares the engine's filesystem (config `hostPaths`). Bind sources
 * are walked on the gateway's filesystem (policy/fields.ts resolveHostPath): right only
 * when that is the filesystem the engine's runtime mounts from. A gateway on another
 * machine, or in a container with only the engine's socket mounted, sees other files
 * (or none) at those paths, and a tenant's link would be judged where it does not lead.
 *
 * `auto` decides `shared` when the upstream is a unix socket and the engine's
 * DockerRootDir (GET /info) is a directory here; else `remote`. It is decided at start
 * and again whenever the engine's event stream connects (a restarted or replaced engine);
 * until the engine has answered it is `remote`, which refuses more, never less.
 */
import fs from 'node:fs'
import type { Logger } from 'pino'
import type { Config } from '../config'
import type { HostPathMode } from '../policy/facts'
import type { Evaluation, Policy } from '../policy/engine'
import type { Target } from '../api/catalog/route'
import { GatewayError } from '../api/errors'
import type { Identity } from './authenticate'
import { engineJson, type Upstream } from './upstream'

export class HostPaths {
  private current: HostPathMode
  private why: string
  private detecting: Promise<void> | null = null

  constructor (private readonly setting: Config['hostPaths'], private readonly unixUpstream: boolean, private readonly upstream: Upstream, private readonly log: Logger) {
    this.current = setting === 'shared' ? 'shared' : 'remote'
    this.why = setting === 'auto' ? 'not decided yet: the engine has not been asked' : `set by the configuration (hostPaths: ${setting})`
  }

  /** The mode in force now. */
  get mode (): HostPathMode { return this.current }

  /** For the start-up log line. */
  describe (): { setting: string, mode: HostPathMode, why: string } {
    return { setting: this.setting, mode: this.current, why: this.why }
  }

  /** Decide `auto` (again); logs when the mode changes. Never throws. */
  async detect (): Promise<void> {
    if (this.setting !== 'auto') return
    // One at a time: a reconnect during start-up waits for the first.
    this.detecting ??= this.probe().then(({ mode, why }) => {
      const changed = mode !== this.current
      this.current = mode
      this.why = why
      if (changed) this.log.info({ hostPaths: this.describe() }, `host paths are judged in mode ${mode}: ${why}`)
    }).finally(() => { this.detecting = null })
    await this.detecting
  }

  private async probe (): Promise<{ mode: HostPathMode, why: string }> {
    if (!this.unixUpstream) return { mode: 'remote', why: 'the engine is reached over TCP, not a unix socket' }
    let info: { status: number, body: unknown }
    try {
      info = await engineJson(this.upstream, 'GET', '/info', undefined, 5000)
    } catch (err) {
      return { mode: 'remote', why: `the engine did not answer GET /info (${(err as Error).message}); asked again when its event stream connects` }
    }
    const root = info.status === 200 ? (info.body as { DockerRootDir?: unknown } | null)?.DockerRootDir : undefined
    if (typeof root !== 'string' || !root.startsWith('/')) return { mode: 'remote', why: `the engine's GET /info names no DockerRootDir (status ${info.status})` }
    let isDir = false
    try {
      isDir = fs.statSync(root).isDirectory()
    } catch {}
    return isDir
      ? { mode: 'shared', why: `the engine's DockerRootDir ${root} is a directory on the gateway's filesystem` }
      : { mode: 'remote', why: `the engine's DockerRootDir ${root} is not a directory on the gateway's filesystem` }
  }
}

/**
 * The engine walks a container's bind sources when it mounts them (the runtime at a
 * start; dockerd itself for a copy in or out), not when the container was created: a
 * directory under an allowed prefix may have become a link since. Before a tenant's
 * start, restart or copy (policy/fields.ts REMOUNTING_OPS) is forwarded, the sources the engine
 * stored (HostConfig.Binds and bind Mounts) are judged again, as they resolve now, by
 * the policy's rules for this operation (host-binds and host-binds-unresolved read them
 * as the start's facts); a denial names the rule. What can still change between this
 * walk and the runtime's is in the README (Policy: host paths). Returns the denying
 * evaluation, or null when they pass (or the container is gone).
 */
export async function judgeStoredBinds (upstream: Upstream, policy: Policy, identity: Identity, target: Target, id: string, mode: HostPathMode): Promise<Evaluation | null> {
  const res = await engineJson(upstream, 'GET', `/containers/${encodeURIComponent(id)}/json`)
  // Gone meanwhile: the engine answers the start itself.
  if (res.status === 404) return null
  if (res.status !== 200) throw new GatewayError('UPSTREAM_FAILED', `cannot read the container's mounts to judge them again: the engine answered ${res.status}`)
  const hc = (res.body as { HostConfig?: { Binds?: unknown, Mounts?: unknown } } | null)?.HostConfig ?? {}
  const evaluation = await policy.evaluate(identity, {
    op: target.operation.id,
    kind: target.operation.kind,
    resource: id,
    query: new URLSearchParams(),
    body: { HostConfig: { Binds: hc.Binds ?? [], Mounts: hc.Mounts ?? [] } },
    hostPaths: mode,
  })
  return evaluation.decision.decision === 'deny' ? evaluation : null
}
