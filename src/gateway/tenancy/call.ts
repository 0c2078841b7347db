/**
 * One scoped request as the tenancy stage sees it: what it may change before the
 * request is forwarded (path parameters, query, decoded body, registry headers) and
 * how the answer is to be filtered. Handlers in operations.ts fill it in.
 */
import type { Operation } from '../catalog/operations'
import { GatewayError } from '../errors'
import type { TenancySettings } from '../../policy/tenancy'
import type { PatchOp } from '../../policy/rewrite'
import type { Credentials } from './credentials'
import type { ObjectKind, Resolver } from './lookup'
import { familiar } from './images'

/** How the engine's answer is filtered for a tenant. */
export type ResponseFilter =
  /** A JSON answer (2xx only), read whole, transformed and re-serialized. */
  | { readonly kind: 'json', transform (body: any): Promise<unknown> | unknown }
  /** A stream of JSON lines (events): each kept or dropped, in order. */
  | { readonly kind: 'lines', keep (event: any): Promise<boolean> }

export interface TenancyRefusal { readonly rule: string, readonly message: string }

export class Call {
  readonly params: Record<string, string>
  query: URLSearchParams
  queryChanged = false
  body: any
  bodyChanged = false
  paramsChanged = false
  readonly patch: PatchOp[] = []
  readonly setHeaders: Record<string, string> = {}
  readonly removeHeaders: string[] = []
  respond?: ResponseFilter

  constructor (
    readonly op: Operation,
    params: Readonly<Record<string, string>>,
    query: URLSearchParams,
    body: unknown,
    readonly tenant: string,
    readonly subject: string,
    readonly settings: TenancySettings,
    readonly r: Resolver,
    readonly credentials: Credentials,
    /** The raw X-Registry-Auth the client sent, if any. */
    readonly clientRegistryAuth: string | undefined,
  ) {
    this.params = { ...params }
    this.query = new URLSearchParams(query)
    this.body = body
  }

  /** The tenant's image namespace (`team-a`). */
  get namespace (): string { return this.settings.imageNamespace.replaceAll('{tenant}', this.tenant) }

  setParam (name: string, value: string): void {
    if (this.params[name] !== value) { this.params[name] = value; this.paramsChanged = true }
  }

  setQuery (name: string, value: string): void {
    this.query.set(name, value)
    this.queryChanged = true
  }

  /** Set a value in the decoded body (creating objects on the way), recorded as a JSON Patch operation. */
  setBody (pointer: readonly string[], value: unknown): void {
    if (this.body === undefined || this.body === null) this.body = {}
    let node = this.body
    for (const key of pointer.slice(0, -1)) {
      if (node[key] === undefined || node[key] === null || typeof node[key] !== 'object') node[key] = {}
      node = node[key]
    }
    const last = pointer[pointer.length - 1]
    const existed = Object.hasOwn(node, last)
    if (existed && node[last] === value) return
    node[last] = value
    this.bodyChanged = true
    this.patch.push({ op: existed ? 'replace' : 'add', path: '/' + pointer.map((k) => k.replace(/~/g, '~0').replace(/\//g, '~1')).join('/'), value })
  }
}

/** 403 naming the tenancy rule. */
export function refuse (rule: string, message: string): GatewayError {
  return Object.assign(new GatewayError('FORBIDDEN', `${message} (rule ${rule})`), { tenancyRule: rule })
}

/**
 * The engine's own answer for a missing object: another tenant's object answers
 * exactly like this. A reference in the path is a 404; one inside a body or query
 * (VolumesFrom, links, network connect's container) is the engine's 400.
 */
export function missing (kind: ObjectKind, ref: string, opId: string, where: 'path' | 'body' = 'path'): GatewayError {
  let message: string
  switch (kind) {
    case 'container': message = `No such container: ${ref}`; break
    case 'volume': message = `get ${ref}: no such volume`; break
    case 'network': message = `network ${ref} not found`; break
    case 'exec': message = `No such exec instance: ${ref}`; break
    case 'image':
      message = ['ImageInspect', 'ImageHistory', 'ImageGet', 'ImageGetAll', 'ImageAttestations'].includes(opId)
        ? `no such image: ${ref}: No such image: ${familiar(ref)}`
        : `No such image: ${familiar(ref)}`
      break
    default: message = `${kind} ${ref} not found`
  }
  return Object.assign(new GatewayError(where === 'path' ? 'NOT_FOUND' : 'REFERENCE_MISSING', message), { tenancyRule: 'tenant-ownership' })
}
