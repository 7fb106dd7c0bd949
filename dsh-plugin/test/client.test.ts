import assert from 'node:assert/strict'
import { test } from 'node:test'
import { poll, RpcError, unwrap } from '../src/client/runtime.ts'
import { keepOrder, lastRunWords, nextWords, type PanelLoop } from '../src/loops-view.ts'

const NOW = 1_764_000_000_000

function loop(loopId: string, extra: Partial<PanelLoop> = {}): PanelLoop {
  return { loop_id: loopId, prompt: loopId, schedule: { kind: 'every', every_seconds: 60 }, session_id: 'self', state: 'scheduled', ...extra }
}
const ids = (loops: readonly PanelLoop[]): string[] => loops.map(each => each.loop_id)

test('rows keep their places when dshloop re-sorts by next run', () => {
  const first = keepOrder(undefined, [loop('a'), loop('b'), loop('c')])
  assert.deepEqual(ids(first), ['a', 'b', 'c'])
  // "a" fired and now runs last in dshloop's order: on screen nothing moves.
  const shown = ids(first)
  assert.deepEqual(ids(keepOrder(shown, [loop('b'), loop('c'), loop('a')])), ['a', 'b', 'c'])
  // A loop gone leaves its gap closed; a new one comes after those already shown.
  assert.deepEqual(ids(keepOrder(shown, [loop('d'), loop('c'), loop('a')])), ['a', 'c', 'd'])
  // A deliberate re-sort (no order kept) is dshloop's order.
  assert.deepEqual(ids(keepOrder(undefined, [loop('b'), loop('c'), loop('a')])), ['b', 'c', 'a'])
})

test('a next run held back by failures says so; one on schedule says only when', () => {
  assert.equal(nextWords(loop('a', { next_at: NOW + 350_000 }), NOW), 'next in 5m 50s')
  assert.equal(nextWords(loop('a', { next_at: NOW + 350_000, consecutive_failures: 1 }), NOW), 'next in 5m 50s · held back after a failed run')
  assert.equal(nextWords(loop('a', { next_at: NOW + 350_000, consecutive_failures: 3 }), NOW), 'next in 5m 50s · held back after 3 failed runs in a row')
  assert.equal(nextWords(loop('a', { state: 'paused', consecutive_failures: 5 }), NOW), undefined)
})

test('the last run speaks the runs\' words: a failure is named, a delivery leaves the outcome to the run', () => {
  assert.equal(lastRunWords(loop('a'), NOW), undefined)
  assert.equal(lastRunWords(loop('a', { last_run_at: NOW - 65_000, last_result: 'delivered' }), NOW), 'last run 1m 05s ago')
  assert.equal(lastRunWords(loop('a', { last_run_at: NOW - 65_000, last_result: 'failed' }), NOW), 'last run 1m 05s ago · failed')
  // A Retry's run, delivered, its turn not ended: the run's own words, not a stale "failed".
  assert.equal(lastRunWords(loop('a', { last_run_at: NOW - 2_000, last_result: 'delivered' }), NOW, 'turn running'), 'last run 2s ago · turn running')
  assert.equal(lastRunWords(loop('a', { last_run_at: NOW - 2_000, last_result: 'delivered' }), NOW, 'succeeded'), 'last run 2s ago · succeeded')
})

test('a channel answer is its value; a failure or a refusal is an RpcError with its code and field', () => {
  assert.deepEqual(unwrap({ ok: true, value: { loops: [] } }, 'none'), { loops: [] })
  assert.throws(() => unwrap({ ok: false, error: { code: 'unreachable', message: 'dshloop is down' } }, 'none'),
    (error: unknown) => error instanceof RpcError && error.code === 'unreachable' && error.unreachable && error.message === 'dshloop is down')
  assert.throws(() => unwrap({ ok: true, value: { refused: { code: 'invalid_input', message: 'too often', field: 'schedule.every_seconds' } } }, 'none'),
    (error: unknown) => error instanceof RpcError && error.field === 'schedule.every_seconds' && !error.unreachable)
  assert.throws(() => unwrap(undefined, 'The plugin sent nothing.'), /The plugin sent nothing/)
})

/** Timers a test drives by hand: `fire()` runs the pending one. */
function manualTimers(): { timers: { set(callback: () => void, ms: number): unknown; clear(handle: unknown): void }; fire(): void; pending(): number } {
  const queue = new Map<number, () => void>()
  let next = 0
  return {
    timers: {
      set: callback => {
        next += 1
        queue.set(next, callback)
        return next
      },
      clear: handle => void queue.delete(handle as number),
    },
    fire: () => {
      const [[handle, callback]] = [...queue.entries()] as [[number, () => void]]
      queue.delete(handle)
      callback()
    },
    pending: () => queue.size,
  }
}

const settle = (): Promise<void> => new Promise(resolve => setImmediate(resolve))

test('polling asks at once, again after each answer, skips hidden rounds, and reports nothing after stop', async () => {
  const { timers, fire, pending } = manualTimers()
  const values: number[] = []
  const errors: string[] = []
  let asked = 0
  let hidden = false
  const stop = poll({
    load: async () => {
      asked += 1
      if (asked === 2) throw new Error('dshloop is down')
      return asked
    },
    every: 3_000,
    onValue: value => values.push(value),
    onError: error => errors.push(String(error)),
    skip: () => hidden,
    timers,
  })
  await settle()
  assert.deepEqual([values, asked, pending()], [[1], 1, 1])
  fire()
  await settle()
  assert.deepEqual([errors, asked], [['Error: dshloop is down'], 2]) // an error does not stop it
  hidden = true
  fire()
  await settle()
  assert.equal(asked, 2) // a hidden page asks nothing, and the next round is still set
  assert.equal(pending(), 1)
  hidden = false
  fire()
  stop() // the answer on its way is dropped
  await settle()
  assert.deepEqual([values, asked, pending()], [[1], 3, 0])
})
