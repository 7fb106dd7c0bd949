import assert from 'node:assert/strict'
import { test } from 'node:test'
import { Confirmations } from '../src/confirm.ts'
import { deliver, type LiveAgent, parseDeliverRequest, whereIs } from '../src/deliver.ts'
import { handleRpc } from '../src/index.ts'
import { sessionsOf } from '../src/sessions.ts'

type Event = { type: string; seq?: number; time?: number; data?: unknown }

/** A live agent whose `send` queues the message and, like DSH, logs it when `logs` says so. */
function agentLogging(logs: 'at-once' | 'later' | 'never', events: Event[] = []) {
  const observers: ((sessionId: string, event: Event) => void)[] = []
  const append = (event: Event) => {
    const logged = { ...event, seq: events.length, time: 5_000 }
    events.push(logged)
    for (const observe of observers) observe('ses_a', logged)
  }
  const agent = {
    id: 'ses_a',
    status: 'idle',
    session: { header: { cwd: '/work', agentPreset: 'agent', createdAt: 1_000 }, events },
    inbox: { nextTurn: [] as unknown[], nextStep: [] as unknown[] },
    send(message: any) {
      append({ type: 'agent/inbox/spliced', data: { target: 'next-turn', start: 0, inserted: [message] } })
      const log = () => append({ type: 'user/message', data: message })
      if (logs === 'at-once') log()
      else if (logs === 'later') setTimeout(log, 20)
    },
  }
  return { agent: agent as LiveAgent & typeof agent, observers, events }
}

const offer = (key: string, extra: Record<string, unknown> = {}) =>
  ({ sessionId: 'ses_a', text: 'x', key, summary: '', loop: { loop_id: 'l', run_id: 'r' }, confirmMs: 2_000, ...extra })

function channel(agent: LiveAgent, observers: ((sessionId: string, event: Event) => void)[], offers: Record<string, unknown>[]) {
  const confirmations = new Confirmations()
  observers.push((sessionId, event) => confirmations.observe(sessionId, event))
  const fetch = (async (url: string) => {
    const key = decodeURIComponent(url.split('/api/dsh/deliveries/')[1] ?? '')
    const found = offers.find(body => body.key === key)
    return found === undefined
      ? new Response(JSON.stringify({ error: { code: 'not_found', message: 'no' } }), { status: 404 })
      : new Response(JSON.stringify(found), { status: 200 })
  }) as unknown as typeof globalThis.fetch
  const endpoint = { url: 'http://127.0.0.1:9', token: 't', timeoutMs: 500, fetch }
  const deliveries = { agents: { get: (id: string) => (id === 'ses_a' ? agent : undefined) }, async restrict() {}, confirmations }
  return { ring: (key: string) => handleRpc(endpoint, 'deliver', { key }, new AbortController().signal, deliveries), confirmations }
}

test('a delivery answers once DSH has logged its message, with the message\'s ID', async () => {
  for (const logs of ['at-once', 'later'] as const) {
    const { agent, observers, events } = agentLogging(logs)
    const { ring, confirmations } = channel(agent, observers, [offer('k1')])
    const answer = await ring('k1')
    assert.equal(answer.ok, true)
    const value = answer.value as { status: string; messageId?: string }
    assert.equal(value.status, 'sent')
    const logged = events.find(event => event.type === 'user/message')!
    assert.equal(value.messageId, (logged.data as { id: string }).id)
    assert.equal(confirmations.size, 0) // nothing left waiting
    // Rung again (a driver that died before recording): the same message, not a second one.
    const again = (await ring('k1')).value as { status: string; messageId?: string }
    assert.deepEqual([again.status, again.messageId], ['already', value.messageId])
    assert.equal(events.filter(event => event.type === 'user/message').length, 1)
  }
})

test('a message not logged in time is answered without an ID: not yet delivered', async () => {
  const { agent, observers } = agentLogging('never')
  const { ring, confirmations } = channel(agent, observers, [offer('k1', { confirmMs: 30 })])
  const value = (await ring('k1')).value as { status: string; messageId?: string }
  assert.equal(value.status, 'sent')
  assert.equal(value.messageId, undefined)
  assert.equal(confirmations.size, 0)
  // Still queued: rung again, it is not sent twice.
  assert.equal(((await ring('k1')).value as { status: string }).status, 'already')
})

test('where an occurrence is: logged, queued, cancelled when DSH stopped, or before the time looked from', () => {
  const { agent, events } = agentLogging('never')
  const splice = (key: string, extra: Record<string, unknown> = {}, time = 5_000) =>
    events.push({ type: 'agent/inbox/spliced', seq: events.length, time, data: { target: 'next-turn', start: 0, inserted: [{ source: { deliveryKey: key } }], ...extra } })
  splice('queued')
  splice('cancelled')
  events.push({ type: 'agent/inbox/spliced', seq: events.length, time: 5_000, data: { target: 'next-turn', start: 0, removedCount: 2, inserted: [], outcome: 'canceled' } })
  events.push({ type: 'user/message', seq: events.length, time: 6_000, data: { id: 'm-1', source: { deliveryKey: 'logged' } } })
  assert.deepEqual(whereIs(agent, 'logged'), { where: 'delivered', messageId: 'm-1' })
  assert.deepEqual(whereIs(agent, 'cancelled'), { where: 'absent' })
  assert.deepEqual(whereIs(agent, 'nothing'), { where: 'absent' })
  assert.deepEqual(whereIs(agent, 'logged', 7_000), { where: 'absent' }) // no message predates its occurrence
  agent.inbox.nextTurn.push({ source: { deliveryKey: 'queued' } })
  assert.deepEqual(whereIs(agent, 'queued'), { where: 'pending' })
  const request = parseDeliverRequest(offer('logged'))
  assert.deepEqual(deliver(agent, request), { status: 'already', delivery: 'next_turn', messageId: 'm-1' })
})

test('sessions: a loaded agent as dshloop reads it, a stored one from its own log, an unknown one as not found', async () => {
  const { agent, events } = agentLogging('never')
  events.push({ type: 'agent-preset/selected', data: { agentPreset: 'plan' } })
  const stores = {
    projections: { snapshot: () => ({ asOfSeq: 0, values: { title: 'Deploy' } }) },
    projectionCache: { cachedSnapshot: (meta: any) => ({ asOfSeq: 3, values: { title: `cold ${meta.id}` } }) },
    persistence: {
      async inspect(id: string) {
        if (id === 'ses_cold') return { meta: { id, cwd: '/cold', agentPreset: 'agent', createdAt: 7 }, events: [] }
        if (id === 'ses_broken') throw new Error('disk on fire')
        throw new Error(`session "${id}" not found`)
      },
    },
  }
  const sessions = await sessionsOf({ get: id => (id === 'ses_a' ? agent : undefined) }, stores, { ids: ['ses_a', 'ses_cold', 'ses_none', 'ses_broken', 'ses_a'] })
  assert.deepEqual(sessions, [
    {
      sessionId: 'ses_a',
      attached: true,
      running: false,
      cwd: '/work',
      agentPreset: 'plan',
      createdAt: 1_000,
      projections: { asOfSeq: 0, values: { title: 'Deploy' } },
    },
    {
      sessionId: 'ses_cold',
      attached: false,
      found: true,
      cwd: '/cold',
      agentPreset: 'agent',
      createdAt: 7,
      projections: { asOfSeq: 3, values: { title: 'cold ses_cold' } },
    },
    { sessionId: 'ses_none', attached: false, found: false },
    { sessionId: 'ses_broken', attached: false }, // not known either way: dshloop asks DSH itself
  ])
  assert.deepEqual(await sessionsOf({ get: () => undefined }, {}, { ids: ['ses_b'] }), [{ sessionId: 'ses_b', attached: false }])
  await assert.rejects(sessionsOf({ get: () => undefined }, {}, { ids: 'ses_a' }), /ids/)
})
