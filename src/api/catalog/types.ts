/** The shapes of the operation catalog (operations.ts, libpod.ts). */

export type ResourceKind =
  | 'container' | 'image' | 'network' | 'volume' | 'exec' | 'node' | 'service' | 'task'
  | 'secret' | 'config' | 'plugin' | 'swarm' | 'system' | 'build' | 'distribution' | 'session'
  /** Podman's pods (libpod.ts). */
  | 'pod'
  /** The gateway's own policy admin API (answered by the gateway, never forwarded). */
  | 'policy'

/** How the request body travels. `json`: small JSON the gateway buffers (capped) and inspects. `stream`: piped with backpressure. */
export type RequestBody = 'none' | 'json' | 'stream'

/**
 * How the connection is used after the request.
 * `tcp`: the engine hijacks the connection (101 UPGRADED / 200 raw stream), attach and exec-start.
 * `h2c`: BuildKit's session and gRPC tunnels, upgraded to HTTP/2 cleartext.
 * `websocket`: attach over WebSocket.
 */
export type Hijack = 'tcp' | 'h2c' | 'websocket'

export interface Operation {
  readonly id: string
  readonly method: 'GET' | 'HEAD' | 'POST' | 'PUT' | 'DELETE'
  readonly path: string
  readonly kind: ResourceKind
  /** Name of the path parameter that identifies the resource, if any. */
  readonly param?: string
  readonly body: RequestBody
  /** The response is a long-lived stream (logs -f, events, pull progress, export...): never timed out, counted as active. */
  readonly streams: boolean
  readonly hijack?: Hijack
  /** The API version that introduced the operation; a request naming an older version is refused. */
  readonly minVersion?: string
  /** Not described in the spec files (engine routes the spec leaves out). */
  readonly unlisted?: boolean
  /** Podman's own API (libpod.ts): matched only under `/v<libpod version>/libpod/...`. */
  readonly libpod?: boolean
}

/** One catalog row: method, path template, operation id, resource kind, and the rest. */
export type Row = [Operation['method'], string, string, ResourceKind, Partial<Omit<Operation, 'id' | 'method' | 'path' | 'kind'>>?]
