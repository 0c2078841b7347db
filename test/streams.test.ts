// The stream stage that writes the audit record before an answer completes.
import { PassThrough, Writable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import t from 'tap'
import { counter } from '../src/gateway/streams'

async function through (chunks: string[], beforeEnd: () => void, length?: number): Promise<{ out: string[], error: unknown }> {
  const src = new PassThrough()
  const out: string[] = []
  const sink = new Writable({ write (c: Buffer, _e, cb) { out.push(c.toString()); cb() } })
  const done = pipeline(src, counter(() => {}, beforeEnd, length), sink).then(() => null, (e: unknown) => e)
  for (const c of chunks) src.write(c)
  src.end()
  return { out, error: await done }
}

t.test('a known-length body: the completing chunk waits for the record', async (t) => {
  const order: string[] = []
  const r = await through(['ab', 'cd'], () => { order.push('record') }, 4)
  t.same(r.out, ['ab', 'cd'])
  t.equal(r.error, null)
  t.same(order, ['record'])
})

t.test('a failed record keeps the completing chunk from the client', async (t) => {
  const r = await through(['ab', 'cd'], () => { throw new Error('audit trail down') }, 4)
  t.same(r.out, ['ab'], 'the client never holds a complete answer')
  t.match(r.error, { message: 'audit trail down' })
})

t.test('a chunked body streams unheld; the failed record stops its end', async (t) => {
  const r = await through(['ab', 'cd'], () => { throw new Error('audit trail down') })
  t.same(r.out, ['ab', 'cd'])
  t.match(r.error, { message: 'audit trail down' }, 'no end, so the chunked answer is never complete')
})
