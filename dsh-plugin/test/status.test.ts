import assert from 'node:assert/strict'
import { test } from 'node:test'
import { countdown, countText, panelUrl, statusText, summarize } from '../src/status.ts'

const NOW = 1_764_000_000_000

test('the status begins with the number of loops, as the contract spells it', () => {
  assert.equal(countText(0), 'no loops')
  assert.equal(countText(1), '1 loop')
  assert.equal(countText(3), '3 loops')
  assert.equal(statusText(summarize([]), NOW), 'no loops')
})

test('the nearest next run is the countdown, and loops without one are counted', () => {
  const summary = summarize([
    { loop_id: 'loop_a', state: 'scheduled', next_at: NOW + 600_000 },
    { loop_id: 'loop_b', state: 'scheduled', next_at: NOW + 485_000 },
    { loop_id: 'loop_c', state: 'paused' },
  ])
  assert.equal(summary.count, 3)
  assert.equal(summary.nextAt, NOW + 485_000)
  assert.equal(statusText(summary, NOW), '3 loops · next in 8m 05s · 1 paused')
})

test('overdue and failed loops are marked', () => {
  const summary = summarize([
    { loop_id: 'loop_a', state: 'overdue', next_at: NOW - 70_000 },
    { loop_id: 'loop_b', state: 'scheduled', next_at: NOW + 5_000, last_result: 'failed' },
    { loop_id: 'loop_c', state: 'failed' },
  ])
  assert.deepEqual([summary.overdue, summary.failed], [1, 2])
  assert.equal(statusText(summary, NOW), '3 loops · next late 1m 10s · 1 overdue · 2 failed')
})

test('a loop whose turn failed is marked failed, and an auto-paused one failed and paused', () => {
  // contract §15: loop_list says last_result "failed" after a failed turn; five in a row pause the loop.
  const failing = summarize([{ loop_id: 'loop_a', state: 'scheduled', next_at: NOW + 30_000, last_result: 'failed' }])
  assert.equal(statusText(failing, NOW), '1 loop · next in 30s · 1 failed')
  const paused = summarize([{ loop_id: 'loop_a', state: 'paused', last_result: 'failed' }])
  assert.deepEqual([paused.failed, paused.paused], [1, 1])
  assert.equal(statusText(paused, NOW), '1 loop · 1 failed · 1 paused')
  // A later delivered run clears the mark.
  const mended = summarize([{ loop_id: 'loop_a', state: 'scheduled', next_at: NOW + 30_000, last_result: 'delivered' }])
  assert.equal(statusText(mended, NOW), '1 loop · next in 30s')
})

test('the countdown reads in the largest sensible units', () => {
  assert.equal(countdown(NOW + 42_000, NOW), 'in 42s')
  assert.equal(countdown(NOW + 400, NOW), 'due now')
  assert.equal(countdown(NOW + 3 * 3_600_000 + 60_000, NOW), 'in 3h 01m')
  assert.equal(countdown(NOW + 2 * 86_400_000 + 5 * 3_600_000, NOW), 'in 2d 5h')
})

test('the panel link names the session, escaped', () => {
  assert.equal(panelUrl('http://127.0.0.1:8000/', 'ses a/b'), 'http://127.0.0.1:8000/panel/?session=ses%20a%2Fb')
})
