import assert from 'node:assert/strict'
import { test } from 'node:test'
import type { Endpoint } from '../src/dshloop.ts'
import { handleRpc } from '../src/index.ts'
import {
  actionsOf,
  emptyForm,
  endsWords,
  formFieldOf,
  formOf,
  localInput,
  opOf,
  type PanelLoop,
  stateWords,
  targetWords,
  toChanges,
  toInput,
} from '../src/loops-view.ts'
import { listQuery } from '../src/panel.ts'

const TOKEN = 'dsh_secret_for_tests'

interface Seen {
  readonly url: string
  readonly method: string
  readonly headers: Record<string, string>
  readonly body: string | undefined
}

function recording(answer: (seen: Seen) => Response): { endpoint: Endpoint; seen: Seen[] } {
  const seen: Seen[] = []
  const fake = (async (url: string, init: RequestInit) => {
    const call = { url, method: String(init.method), headers: init.headers as Record<string, string>, body: init.body as string | undefined }
    seen.push(call)
    return answer(call)
  }) as unknown as typeof fetch
  return { endpoint: { url: 'http://dshloop.test', token: TOKEN, timeoutMs: 1_000, fetch: fake }, seen }
}

const ok = (body: unknown, status = 200) => new Response(JSON.stringify(body), { status })
const signal = new AbortController().signal

const LOOP: PanelLoop = {
  loop_id: 'loop_a',
  prompt: 'Check the deploy',
  schedule: { kind: 'every', every_seconds: 600 },
  session_id: 'ses_A',
  state: 'scheduled',
}

test('each panel op is one call of the operator API, with the token and the DSH Web label, never a session', async () => {
  const { endpoint, seen } = recording(() => ok({}))
  const ops: [Record<string, unknown>, string, string][] = [
    [{ op: 'list', state: 'paused', q: 'deploy' }, 'GET', '/api/loops?state=paused&q=deploy&limit=100'],
    [{ op: 'create', input: { prompt: 'x' } }, 'POST', '/api/loops'],
    [{ op: 'edit', loopId: 'loop_a', changes: { name: 'n' } }, 'PATCH', '/api/loops/loop_a'],
    [{ op: 'pause', loopId: 'loop_a' }, 'POST', '/api/loops/loop_a/pause'],
    [{ op: 'approve', loopId: 'loop_a' }, 'POST', '/api/loops/loop_a/resume'],
    [{ op: 'run', loopId: 'loop_a' }, 'POST', '/api/loops/loop_a/run'],
    [{ op: 'retry', loopId: 'loop_a' }, 'POST', '/api/loops/loop_a/retry'],
    [{ op: 'delete', loopId: 'loop/../x' }, 'DELETE', '/api/loops/loop%2F..%2Fx'],
    [{ op: 'sessions' }, 'POST', '/api/tools/list_sessions'],
    [{ op: 'delivered', sessionId: 'ses A' }, 'GET', '/api/runs?session=ses+A&limit=10'],
  ]
  for (const [payload, method, path] of ops) {
    const answer = await handleRpc(endpoint, 'panel', payload, signal)
    assert.equal(answer.ok, true, JSON.stringify(payload))
    const call = seen.at(-1) as Seen
    assert.equal(call.method, method)
    assert.equal(call.url, `http://dshloop.test${path}`)
    assert.equal(call.headers.Authorization, `Bearer ${TOKEN}`)
    assert.equal(call.headers['X-Dshloop-Via'], 'DSH Web')
    assert.equal(call.headers['X-DSH-Session-Id'], undefined)
  }
  assert.equal(seen[1]?.body, '{"prompt":"x"}')
})

test('a refusal is the answer with dshloop\'s code, sentence and field, and never the token', async () => {
  const { endpoint } = recording(() => ok({ error: { code: 'invalid_input', message: 'every_seconds must be at least 1.', field: 'schedule.every_seconds' } }, 422))
  const answer = await handleRpc(endpoint, 'panel', { op: 'create', input: {} }, signal)
  assert.deepEqual(answer, {
    ok: true,
    value: { refused: { code: 'invalid_input', message: 'every_seconds must be at least 1.', field: 'schedule.every_seconds' } },
  })
  assert.ok(!JSON.stringify(answer).includes(TOKEN))
  const bad = await handleRpc(endpoint, 'panel', { op: 'pause' }, signal)
  assert.equal((bad.value as { refused: { code: string } }).refused.code, 'bad-request')
})

test('the list query keeps only the filters that are set', () => {
  assert.equal(listQuery({ state: '', target: 'new', session: 'ses A', q: '' }), 'target=new&session=ses+A&limit=100')
})

test('the words are dshloop panel\'s: awaiting approval, self/new, a title with its ID', () => {
  assert.equal(stateWords({ ...LOOP, state: 'paused', pause_reason: 'awaiting approval' }), 'awaiting approval')
  assert.equal(stateWords({ ...LOOP, state: 'paused', pause_reason: 'operator' }), 'paused')
  assert.equal(targetWords('ses_A', { ses_A: 'Deploy watch' }), 'Deploy watch (ses_A)')
  assert.equal(targetWords('ses_B', {}), 'ses_B')
  assert.equal(targetWords('new', {}), 'new')
})

test('a loop offers what can do something: approve, retry a failing one', () => {
  assert.deepEqual(actionsOf(LOOP), ['pause', 'run', 'edit', 'delete'])
  assert.deepEqual(actionsOf({ ...LOOP, state: 'paused', pause_reason: 'awaiting approval' }), ['approve', 'run', 'edit', 'delete'])
  assert.deepEqual(actionsOf({ ...LOOP, last_result: 'failed' }), ['pause', 'retry', 'edit', 'delete'])
  assert.deepEqual(actionsOf({ ...LOOP, state: 'completed' }), ['delete'])
  assert.equal(opOf({ ...LOOP, last_result: 'failed' }, 'retry'), 'run')
  assert.equal(opOf({ ...LOOP, state: 'failed' }, 'retry'), 'retry')
})

test('the form becomes loop_create\'s input and an edit sends only what changed', () => {
  const form = { ...emptyForm('ses_A'), prompt: 'Check', seconds: '900' }
  assert.deepEqual(toInput(form, 'ses_A'), { prompt: 'Check', schedule: { kind: 'every', every_seconds: 900 }, session_id: 'ses_A' })
  assert.deepEqual(toInput({ ...form, target: 'new', preset: 'coder' }, 'ses_A').preset, 'coder')
  assert.deepEqual(toInput({ ...form, seconds: '1.5' }, 'ses_A').schedule, { kind: 'every', every_seconds: '1.5' })
  assert.throws(() => toInput({ ...form, target: 'session' }, 'ses_A'), /Pick the session/)
  const edited = { ...formOf(LOOP, 'ses_A'), name: 'deploy', kind: 'cron' as const, expr: '30 9 * * 1-5' }
  assert.deepEqual(toChanges(edited, LOOP, 'ses_A'), { name: 'deploy', schedule: { kind: 'cron', expr: '30 9 * * 1-5' } })
  assert.deepEqual(toChanges(formOf(LOOP, 'ses_A'), LOOP, 'ses_A'), {})
})

test('an edit sets, keeps and clears where a loop ends', () => {
  const at = new Date(2030, 0, 2, 9, 30).getTime()
  const ending: PanelLoop = { ...LOOP, ends_at: at, max_runs: 5, runs_delivered: 2 }
  assert.deepEqual(toChanges(formOf(ending, 'ses_A'), ending, 'ses_A'), {})
  assert.equal(formOf(ending, 'ses_A').ends_at, '2030-01-02T09:30')
  assert.deepEqual(toChanges({ ...formOf(LOOP, 'ses_A'), ends_at: localInput(at), max_runs: '3' }, LOOP, 'ses_A'), { ends_at: at, max_runs: 3 })
  assert.deepEqual(toChanges({ ...formOf(ending, 'ses_A'), ends_at: '', max_runs: '' }, ending, 'ses_A'), { ends_at: null, max_runs: null })
  assert.deepEqual(toChanges({ ...formOf(LOOP, 'ses_A'), max_runs: 'ten' }, LOOP, 'ses_A'), { max_runs: 'ten' })
  assert.throws(() => toChanges({ ...formOf(LOOP, 'ses_A'), ends_at: 'soon' }, LOOP, 'ses_A'), /Give a date and time/)
  assert.equal(endsWords(ending, at - 90_000), 'ends after 5 scheduled runs (2 so far; Run now and Retry do not count) or in 1m 30s')
  assert.equal(endsWords(LOOP, at), undefined)
  assert.equal(formFieldOf('max_runs', emptyForm(undefined)), 'max_runs')
})

test('a dshloop field names the form field its message shows on', () => {
  const form = emptyForm(undefined)
  assert.equal(formFieldOf('schedule.every_seconds', form), 'seconds')
  assert.equal(formFieldOf('schedule.tz', { ...form, kind: 'cron' }), 'tz')
  assert.equal(formFieldOf('session_id', form), 'session')
  assert.equal(formFieldOf('prompt', form), 'prompt')
  assert.equal(formFieldOf('X-DSH-Session-Id', form), undefined)
})

test('while a fresh run works, DSH Web\'s channel makes and edits no loops: its bash may be the caller', async () => {
  const { endpoint, seen } = recording(() => ok({ loop_id: 'loop_1', state: 'scheduled' }, 201))
  const signal = new AbortController().signal
  let working: string | undefined = 'loop-abc'
  const deliveries = { agents: { get: () => undefined }, async restrict() {}, freshRunAt: () => working }
  const create = { op: 'create', input: { prompt: 'p', schedule: { kind: 'every', every_seconds: 600 }, session_id: 'new' } }
  const edit = { op: 'edit', loopId: 'loop_1', changes: { session_id: 'new' } }
  for (const payload of [create, edit]) {
    const answer = await handleRpc(endpoint, 'panel', payload, signal, deliveries)
    const refused = (answer.value as { refused?: { code: string; message: string } }).refused
    assert.equal(refused?.code, 'forbidden')
    assert.match(refused!.message, /fresh run \(session loop-abc\) is working now/)
  }
  assert.equal(seen.length, 0) // nothing reached dshloop
  // Reads and other actions go on; once the run's turn ends, so do creates.
  assert.equal((await handleRpc(endpoint, 'panel', { op: 'pause', loopId: 'loop_1' }, signal, deliveries)).ok, true)
  working = undefined
  const made = await handleRpc(endpoint, 'panel', create, signal, deliveries)
  assert.equal((made.value as { loop_id?: string }).loop_id, 'loop_1')
  assert.deepEqual(seen.map(call => `${call.method} ${new URL(call.url).pathname}`), ['POST /api/loops/loop_1/pause', 'POST /api/loops'])
})
