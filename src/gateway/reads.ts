/**
 * Engine connections for hijacked sessions whose reads land in one reused buffer
 * (`net`'s `onread` option) once the session is relayed.
 *
 * An ordinary socket allocates a 64 KiB buffer for every read, shrinks it to what was
 * read and wraps it in a Buffer that the collector frees later; the engine sends an
 * exec's or attach's output in writes of a few kilobytes, so a `docker exec` streaming
 * hundreds of MB costs the gateway tens of thousands of such reads, and relaying one
 * costs as much CPU as the engine spends producing it. Read into one buffer and written
 * straight on, a bare relay of the same exec took 29% less CPU (6.2 s/GB against 8.7,
 * median of 5 interleaved 200 MB runs each).
 *
 * Until `take` is called the socket behaves as any other: each read is copied into a
 * Buffer of its own and pushed, for the HTTP client that reads the engine's answer.
 */
import net from 'node:net'
import { streamed } from './young'

/** What a read fills: the size an ordinary socket reads with. */
const READ_SIZE = 64 * 1024

/**
 * The buffer every such socket reads into until it has relayed OWN_AFTER bytes: what
 * lands in it is copied out before the callback returns, so one serves them all. A
 * session that streams gets a buffer of its own, which its writes may keep; thousands of
 * idle `attach` sessions keep none.
 */
let shared: Buffer | undefined
const OWN_AFTER = 1024 * 1024

/** The receiving end of `take`. */
export interface ReadSink {
  /** A read, valid only during the call (unless `holds` says the sink kept it): false stops reading until `more()`. */
  bytes: (chunk: Buffer) => boolean
  /** Whether the last chunk is still referenced once `bytes` has returned (a write left pending). */
  holds: () => boolean
}

export interface DirectReads {
  /**
   * From now on hand every read to `sink` (what was pushed before and not yet read goes
   * first). The socket is left flowing, so that its end is still an `end` event.
   */
  take: (sink: ReadSink) => void
  /** Read again after `bytes` returned false. */
  more: () => void
}

const direct = new WeakMap<net.Socket, DirectReads>()

/** The `DirectReads` of a socket from `connectDirect`, if it is one. */
export function directReads (socket: net.Socket): DirectReads | undefined {
  return direct.get(socket)
}

/** `net.connect` with reads into a reused buffer (see above). */
export function connectDirect (options: net.NetConnectOpts): net.Socket {
  let own: Buffer | undefined
  let relayed = 0
  let sink: ReadSink | null = null
  const socket = net.connect({
    ...options,
    onread: {
      buffer: () => own ?? (shared ??= Buffer.allocUnsafeSlow(READ_SIZE)),
      callback: (n: number, buf: Buffer): boolean => {
        if (buf !== own) {
          // The shared buffer: copied out (for the HTTP client until `take`, then for the sink).
          streamed(n)
          const copy = Buffer.from(buf.subarray(0, n))
          if (sink === null) return socket.push(copy)
          relayed += n
          if (relayed >= OWN_AFTER) own = Buffer.allocUnsafeSlow(READ_SIZE)
          return sink.bytes(copy)
        }
        const more = sink!.bytes(buf.subarray(0, n))
        if (sink!.holds()) {
          // A pending write keeps this buffer: the next reads go to a fresh one.
          own = Buffer.allocUnsafeSlow(READ_SIZE)
          streamed(READ_SIZE)
        }
        return more
      },
    },
  })
  direct.set(socket, {
    take: (s) => {
      for (let chunk = socket.read() as Buffer | null; chunk !== null; chunk = socket.read() as Buffer | null) s.bytes(chunk)
      sink = s
      socket.resume()
    },
    // (A stopped read is restarted by the socket's own _read: `resume()` would not,
    // the stream being flowing already.)
    more: () => { socket._read(READ_SIZE) },
  })
  return socket
}
