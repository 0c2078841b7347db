// sockopt ships no types: the two functions it exports, integer options only.
declare module 'sockopt' {
  import type { Socket } from 'node:net'
  import type { Socket as DgramSocket } from 'node:dgram'
  export function getsockopt (socket: Socket | DgramSocket, level: number, option: number): number
  export function setsockopt (socket: Socket | DgramSocket, level: number, option: number, value: number): void
}
