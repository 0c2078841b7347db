/**
 * Who a tenant's processes run as (tenancy.yaml `users`). Without a user the engine
 * runs a container, an exec or a service task as the image's user, often root; the
 * tenancy stage makes that the policy's choice:
 *
 * - no user (absent or `""`) → the tenant's uid:gid (`users.tenants`, else `users.default`);
 * - a numeric `uid:gid`, neither 0 → kept; a numeric `uid` alone → `uid:<the tenant's gid>`;
 * - root (uid 0 or gid 0, `0`, `00`, `1000:0`, supplementary group 0) → refused (`tenant-user`);
 * - any supplementary group → refused (`tenant-groups`: see tenantGroups);
 * - a name (`root`, `app`, `1000:wheel`) → refused (`numeric-user`).
 *
 * Unless root is allowed: the tenant is listed in `users.root`, or the engine remaps user
 * namespaces (dockerd --userns-remap, seen in GET /info) and `users.rootWhenRemapped` is
 * true. Then the request is left as it is (no user stays the image's).
 *
 * Why names are refused: the runtime (runc's user.GetExecUser) resolves a name in the
 * container's own /etc/passwd and /etc/group, which the tenant writes (any image it
 * builds or loads), so `app` may well be uid 0 there. Why a lone uid gets a group: the
 * runtime then takes the group from the passwd entry of that uid (the tenant's file), or
 * 0 when there is none, and adds every group of /etc/group that lists the entry's name
 * (the tenant's file again, where `wheel:x:0:app` is root's group). With an explicit
 * group it reads neither: `uid:gid` is exactly what the process gets.
 */
import { rootGranted, userOf } from '../../policy/tenancy'
import { list, refuse, str, type Call } from './call'

/** Whether root is the tenant's to use (its grant, or an engine that remaps user namespaces). */
export async function rootAllowed (call: Call): Promise<boolean> {
  if (rootGranted(call.settings, call.tenant)) return true
  return call.settings.users.rootWhenRemapped && await call.r.usernsRemapped()
}

const NUMBER = /^[0-9]+$/

/**
 * The user to send for `given` (a body's `User`): the tenant's uid:gid when none is
 * given, a lone uid completed with the tenant's gid; throws for root or a name.
 * Only for a tenant that may not be root (see rootAllowed).
 */
export function tenantUser (call: Call, given: unknown, what: string): string {
  const user = str(given)
  const own = userOf(call.settings, call.tenant)
  if (user === '') return `${own.uid}:${own.gid}`
  const parts = user.split(':')
  if (parts.length > 2 || !parts.every((p) => NUMBER.test(p))) {
    throw refuse('numeric-user', `${what} ${JSON.stringify(user)}: tenants give users and groups as numbers (uid:gid, e.g. ${own.uid}:${own.gid}); a name is looked up in the container's own /etc/passwd and /etc/group, which can make it root`)
  }
  if (parts.some((p) => Number(p) === 0)) {
    throw refuse('tenant-user', `${what} ${JSON.stringify(user)}: ${Number(parts[0]) === 0 ? 'root (uid 0)' : 'the root group (gid 0)'} is not available to tenant ${call.tenant}; run as a numeric uid:gid other than 0, e.g. ${own.uid}:${own.gid}`)
  }
  return parts.length === 2 ? user : `${user}:${own.gid}`
}

/**
 * The user a step of a tenant's classic build (RUN) may run as, as the `uid:gid` to
 * forward; throws for root and names. The builder runs a step as the stage's user
 * (moby builder/dockerfile: the base image's Config.User, then USER), resolved by the
 * runtime like a container's: empty is root, a name is looked up in the image's own
 * /etc/passwd (which the tenant writes), a lone uid takes its group from there (0 when
 * it has no entry). Used only where tenancy.yaml `builds.runAsRoot` judges the tenant's
 * steps (see buildStepsJudged).
 */
export function stepUser (call: Call, user: string, where: string): string {
  const own = userOf(call.settings, call.tenant)
  const hint = `add USER ${own.uid}:${own.gid} (a numeric uid:gid other than 0) before it`
  if (user === '') throw refuse('build-run-root', `${where} would run as the image's default user, root, which tenant ${call.tenant}'s build steps may not be (tenancy.yaml builds.runAsRoot); ${hint}`)
  const parts = user.split(':')
  if (parts.length > 2 || !parts.every((p) => NUMBER.test(p))) {
    throw refuse('numeric-user', `${where} would run as ${JSON.stringify(user)}: tenants' build steps run as numbers (uid:gid); a name is looked up in the image's own /etc/passwd and /etc/group, which can make it root; ${hint}`)
  }
  if (parts.some((p) => Number(p) === 0)) {
    throw refuse('build-run-root', `${where} would run as ${JSON.stringify(user)}: ${Number(parts[0]) === 0 ? 'root (uid 0)' : 'the root group (gid 0)'}, which tenant ${call.tenant}'s build steps may not be (tenancy.yaml builds.runAsRoot); ${hint}`)
  }
  return parts.length === 2 ? user : `${user}:${own.gid}`
}

/**
 * Whether the user of the tenant's build steps is judged (tenancy.yaml `builds.runAsRoot`):
 * `never` judges every tenant's, `users` those of tenants that may not run containers as
 * root (see rootAllowed), `always` none.
 */
export async function buildStepsJudged (call: Call): Promise<boolean> {
  const mode = call.settings.builds.runAsRoot
  if (mode === 'always') return false
  if (mode === 'never') return true
  return !(await rootAllowed(call))
}

/**
 * Supplementary groups (GroupAdd, a service's Groups, Podman's groups): none. Even a
 * number is first looked up as a group *name* in the container's /etc/group (runc
 * user.GetAdditionalGroups: `g.Name == ag || strconv.Itoa(g.Gid) == ag`, every match
 * kept), so "1000" is gid 0 in an image whose /etc/group has `1000:x:0:`; and an image
 * is the tenant's to write. Names and 0 keep their older, more specific rules.
 */
export function tenantGroups (call: Call, groups: unknown, what: string): void {
  const all = list(groups)
  for (const g of all) {
    const v = str(g)
    if (!NUMBER.test(v)) throw refuse('numeric-user', `${what} ${JSON.stringify(v)}: tenants give groups as numbers`)
    if (Number(v) === 0) throw refuse('tenant-user', `${what} 0 is the root group: not available to tenant ${call.tenant}`)
  }
  if (all.length > 0) {
    throw refuse('tenant-groups', `${what} ${JSON.stringify(all.map(str))}: supplementary groups are not available to tenant ${call.tenant}; the engine looks each one up by name in the container's own /etc/group first, where a number can name gid 0`)
  }
}

/**
 * The user at `pointer` in the body, and the supplementary groups at `groups`, as the
 * tenant may have them: rewritten (recorded as the tenancy rewrite) or refused.
 * `inherited`: what the engine would use for no user (an exec: its container's user),
 * kept when the tenant could have named it itself.
 */
export async function scopeUser (call: Call, pointer: readonly string[], groups: readonly string[] | null, what: string, inherited?: () => Promise<string>): Promise<void> {
  const at = (path: readonly string[]): unknown => path.reduce<any>((node, k) => node?.[k], call.body)
  // Checked before the engine is asked anything: a name or root is refused the same
  // way whatever the engine; only a tenant that would be refused asks about remapping.
  const given = at(pointer)
  let user: string | undefined
  let problem: unknown
  try {
    user = tenantUser(call, given, what)
    if (groups) tenantGroups(call, at(groups), groups.join('.'))
  } catch (err) {
    problem = err
  }
  const unset = str(given) === ''
  if (problem === undefined && !unset && user === str(given)) return
  if (await rootAllowed(call)) return
  if (problem !== undefined) throw problem
  if (unset && inherited) {
    const theirs = await inherited()
    if (theirs !== '' && acceptable(call, theirs)) user = theirs
  }
  call.setBody(pointer, user)
}

/** A numeric uid:gid other than root, which the tenant could have asked for itself. */
function acceptable (call: Call, user: string): boolean {
  try {
    return tenantUser(call, user, 'User') === user
  } catch {
    return false
  }
}
