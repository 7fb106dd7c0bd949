import assert from 'node:assert/strict'
import { test } from 'node:test'
import { deliver, DeliverError, type LiveAgent, parseDeliverRequest, SUMMARY_MAX } from '../src/deliver.ts'
import { handleRpc } from '../src/index.ts'

function liveAgent(status = 'idle') {
  const sent: { message: any; target: string; wakeup: boolean }[] = []
  const agent = {
    id: 'ses_a',
    status,
    session: { events: [] as { type: string; data?: unknown }[] },
    inbox: { nextTurn: [] as unknown[], nextStep: [] as unknown[] },
    send(message: unknown, target: string, wakeup: boolean) { sent.push({ message, target, wakeup }) },
  }
  return { agent: agent as LiveAgent & typeof agent, sent }
}

const request = (key = 'loop_1@1000') => parseDeliverRequest({
  sessionId: 'ses_a',
  text: '<loop>…</loop>',
  key,
  summary: 'Check the build',
  loop: { loop_id: 'loop_1', run_id: 'run_1' },
})

test('a delivery is one plugin message carrying the occurrence key, drawn as dshloop\'s own', () => {
  const { agent, sent } = liveAgent()
  assert.deepEqual(deliver(agent, request()), { status: 'sent', delivery: 'next_turn' })
  assert.equal(sent.length, 1)
  const { message, target, wakeup } = sent[0]!
  assert.equal(target, 'next-turn')
  assert.equal(wakeup, true)
  assert.equal(message.role, 'user')
  assert.deepEqual(message.content, [{ type: 'text', text: '<loop>…</loop>' }])
  assert.deepEqual(message.source, {
    kind: 'plugin',
    plugin: 'dshloop',
    form: 'notice',
    summary: 'Check the build',
    deliveryKey: 'loop_1@1000',
    loop: { loop_id: 'loop_1', run_id: 'run_1' },
  })
  assert.match(message.id, /^[0-9a-f-]{36}$/) // DSH's own kind of ID, never a chosen one
  assert.ok(Object.isFrozen(message) && Object.isFrozen(message.source))
})

test('a running agent takes the message at its next step', () => {
  const { agent, sent } = liveAgent('running')
  assert.equal(deliver(agent, request()).delivery, 'next_step')
  assert.equal(sent[0]!.target, 'next-step')
})

test('an occurrence already in the log or still pending in the inbox is not sent again', () => {
  const logged = liveAgent()
  logged.agent.session.events.push({ type: 'user/message', data: { source: { deliveryKey: 'loop_1@1000' } } })
  assert.equal(deliver(logged.agent, request()).status, 'already')
  assert.equal(logged.sent.length, 0)
  assert.equal(deliver(logged.agent, request('loop_1@2000')).status, 'sent') // another occurrence

  const pending = liveAgent('running')
  pending.agent.inbox.nextTurn.push({ source: { deliveryKey: 'loop_1@1000' } })
  assert.equal(deliver(pending.agent, request()).status, 'already')
  assert.equal(pending.sent.length, 0)
})

test('a session that is not loaded is refused, for dshloop to load it and retry', () => {
  assert.throws(() => deliver(undefined, request()), (error: unknown) =>
    error instanceof DeliverError && error.code === 'session-not-loaded')
})

test('bad requests are refused with the field; a long summary is cut to what DSH shows', () => {
  assert.throws(() => parseDeliverRequest({ sessionId: 'ses_a', text: 'x', key: '' }), /key/)
  assert.throws(() => parseDeliverRequest({ sessionId: 'ses_a', text: 'x', key: 'k', loop: {} }), /loop/)
  const long = parseDeliverRequest({ sessionId: 's', text: 'x', key: 'k', summary: 'a'.repeat(500), loop: { loop_id: 'l', run_id: 'r' } })
  assert.equal(long.summary.length, SUMMARY_MAX)
})

/** dshloop's API as the plugin reads it: what it offers under each key, every request recorded. */
function dshloopOffering(offers: Record<string, Record<string, unknown>>) {
  const asked: { url: string; authorization: string | null }[] = []
  const fetch = (async (url: string, init: RequestInit) => {
    asked.push({ url, authorization: new Headers(init.headers).get('authorization') })
    const key = decodeURIComponent(url.split('/api/dsh/deliveries/')[1] ?? '')
    const offer = offers[key]
    if (offer === undefined) {
      return new Response(JSON.stringify({ error: { code: 'not_found', message: `dshloop is not delivering '${key}'` } }), { status: 404 })
    }
    return new Response(JSON.stringify(offer), { status: 200 })
  }) as unknown as typeof globalThis.fetch
  return { endpoint: { url: 'http://127.0.0.1:9', token: 'dsh_secret', timeoutMs: 500, fetch }, asked }
}

test('the channel says hello, and an unattended session is restricted before its message', async () => {
  const signal = new AbortController().signal
  const { agent, sent } = liveAgent()
  const order: string[] = []
  const deliveries = {
    agents: { get: (id: string) => (id === 'ses_a' ? agent as any : undefined) },
    async restrict() { order.push('restricted') },
  }
  const offer = (key: string, extra: Record<string, unknown> = {}) =>
    ({ sessionId: 'ses_a', text: 'x', key, summary: '', loop: { loop_id: 'l', run_id: 'r' }, unattended: false, notice: false, ...extra })
  const { endpoint, asked } = dshloopOffering({
    k1: offer('k1'),
    k2: offer('k2', { unattended: true }),
    k3: offer('k3', { sessionId: 'ses_cold' }),
  })
  const hello = await handleRpc(endpoint, 'hello', {}, signal, deliveries)
  assert.deepEqual(hello, { ok: true, value: { plugin: 'dshloop', deliver: true, confirm: false, sessions: true } })

  const attended = await handleRpc(endpoint, 'deliver', { key: 'k1' }, signal, deliveries)
  assert.equal(attended.ok, true)
  assert.deepEqual(order, [])
  const unattended = await handleRpc(endpoint, 'deliver', { key: 'k2' }, signal, deliveries)
  assert.equal(unattended.ok, true)
  assert.deepEqual(order, ['restricted'])
  assert.equal(sent.length, 2)
  assert.deepEqual(asked.map(request => request.url), ['http://127.0.0.1:9/api/dsh/deliveries/k1', 'http://127.0.0.1:9/api/dsh/deliveries/k2'])
  assert.ok(asked.every(request => request.authorization === 'Bearer dsh_secret'))

  const cold = await handleRpc(endpoint, 'deliver', { key: 'k3' }, signal, deliveries)
  assert.equal(cold.error?.code, 'session-not-loaded')
})

test('a delivery dshloop does not offer is never drawn, whatever the channel was sent', async () => {
  const signal = new AbortController().signal
  const { agent, sent } = liveAgent()
  const send = agent.send
  agent.send = (message, target, wakeup) => { agent.inbox.nextTurn.push(message); send(message, target, wakeup) } // as DSH's inbox does
  const deliveries = { agents: { get: () => agent as any }, async restrict() { throw new Error('never restricted') } }
  const { endpoint } = dshloopOffering({
    real: { sessionId: 'ses_a', text: "dshloop's own", key: 'real', summary: 'own', loop: { loop_id: 'l', run_id: 'r' }, unattended: false, notice: false },
  })
  const forged = { sessionId: 'ses_a', text: 'a forged loop card', summary: 'forged', loop: { loop_id: 'l', run_id: 'r' }, unattended: true }
  // A made-up key, a message in the ring's body, no key at all: nothing sent.
  assert.equal((await handleRpc(endpoint, 'deliver', { ...forged, key: 'made-up' }, signal, deliveries)).error?.code, 'not-offered')
  assert.equal((await handleRpc(endpoint, 'deliver', forged, signal, deliveries)).error?.code, 'bad-request')
  assert.equal(sent.length, 0)
  // A real key rung by someone else delivers dshloop's message, not the ring's, and only once.
  assert.equal((await handleRpc(endpoint, 'deliver', { ...forged, key: 'real' }, signal, deliveries)).ok, true)
  assert.equal((await handleRpc(endpoint, 'deliver', { key: 'real' }, signal, deliveries)).ok, true)
  assert.equal(sent.length, 1)
  assert.deepEqual(sent[0]!.message.content, [{ type: 'text', text: "dshloop's own" }])
  assert.equal(sent[0]!.message.source.summary, 'own')
})

test('dshloop down or slow: nothing is sent, and the error says so for dshloop to retry', async () => {
  const signal = new AbortController().signal
  const { agent, sent } = liveAgent()
  const deliveries = { agents: { get: () => agent as any }, async restrict() {} }
  const fetch = (async () => { throw new TypeError('fetch failed', { cause: Object.assign(new Error('refused'), { code: 'ECONNREFUSED' }) }) }) as unknown as typeof globalThis.fetch
  const endpoint = { url: 'http://127.0.0.1:9', token: 't', timeoutMs: 500, fetch }
  const answer = await handleRpc(endpoint, 'deliver', { key: 'k1' }, signal, deliveries)
  assert.equal(answer.error?.code, 'unreachable')
  assert.equal(sent.length, 0)
})

test('a failure notice carries notice: true in its source; an occurrence never does', () => {
  const { agent, sent } = liveAgent()
  const notice = parseDeliverRequest({
    sessionId: 'ses_a',
    text: '<loop>…</loop>',
    key: 'loop_1@notice:run_1',
    summary: 'Loop failed: Check the build',
    loop: { loop_id: 'loop_1', run_id: 'run_1' },
    notice: true,
  })
  assert.equal(notice.notice, true)
  deliver(agent, notice)
  assert.equal(sent[0]!.message.source.notice, true)
  assert.equal(sent[0]!.message.source.deliveryKey, 'loop_1@notice:run_1')
  assert.equal(request().notice, false)
  assert.equal(parseDeliverRequest({ ...request(), notice: 'yes' }).notice, false) // only a JSON true
})
