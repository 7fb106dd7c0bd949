import assert from 'node:assert/strict'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { test } from 'node:test'
import { apply } from '../src/index.ts'

type Handler = (endpoint: string, payload: unknown, signal: AbortSignal) => Promise<{ ok: boolean; value?: any; error?: any }>

/** dshloop on a real port: it offers one fresh run's message, and records the operator API calls. */
async function dshloop(offer: Record<string, unknown>) {
  const calls: string[] = []
  const server = createServer((request: IncomingMessage, response: ServerResponse) => {
    const path = request.url ?? ''
    calls.push(`${request.method} ${path}`)
    response.setHeader('Content-Type', 'application/json')
    if (path === `/api/dsh/deliveries/${encodeURIComponent(String(offer.key))}`) return response.end(JSON.stringify(offer))
    if (path === '/api/loops' && request.method === 'POST') {
      response.statusCode = 201
      return response.end(JSON.stringify({ loop_id: 'loop_made', state: 'scheduled' }))
    }
    response.statusCode = 404
    response.end(JSON.stringify({ error: { code: 'not_found', message: 'no' } }))
  })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, calls, close: () => server.close() }
}

/** A DSH with one loaded session whose agent DSH says is running a turn; the channel's handler kept. */
function dshWithRunningSession(id: string) {
  let handler: Handler | undefined
  const agent = {
    id,
    status: 'running',
    session: { events: [] as unknown[] },
    inbox: { nextTurn: [] as unknown[], nextStep: [] as unknown[] },
    send(message: unknown) { agent.inbox.nextStep.push(message) },
    ctx: {
      tools: { register: () => () => {}, guard: () => () => {} },
      effect(body: () => () => void) { return body() },
    },
  }
  const ctx = {
    agents: { roots: () => [agent], get: (wanted: string) => (wanted === id ? agent : undefined) },
    connection: { rpc: { handle(_channel: string, body: Handler) { handler = body; return () => {} } } },
    logger: { info() {}, warn() {} },
    on() { return () => {} },
    effect(body: () => unknown) { return body() },
  }
  return { ctx, agent, call: (endpoint: string, payload: unknown) => handler!(endpoint, payload, new AbortController().signal) }
}

const CREATE = { op: 'create', input: { prompt: 'More', schedule: { kind: 'every', every_seconds: 600 }, session_id: 'self' } }

for (const [extraTools, refused] of [[[], true], [['loop_create', 'loop_delete'], false]] as const) {
  test(`a fresh run at work ${refused ? 'stops' : 'does not stop, when the operator lets it make loops,'} the channel's loop creates`, async () => {
    const offer = {
      sessionId: 'loop-fresh', text: '<loop/>', key: 'loop_1@1000', summary: 's',
      loop: { loop_id: 'loop_1', run_id: 'run_1' }, unattended: true, notice: false, extraTools,
    }
    const server = await dshloop(offer)
    try {
      const dsh = dshWithRunningSession('loop-fresh')
      apply(dsh.ctx as any, { url: server.url, timeoutSeconds: 2 })
      // Before dshloop's delivery says the session is a fresh run's, nothing is held back.
      assert.equal((await dsh.call('panel', CREATE)).value?.loop_id, 'loop_made')
      assert.equal((await dsh.call('deliver', { key: 'loop_1@1000' })).ok, true)
      const answer = await dsh.call('panel', CREATE)
      if (refused) assert.equal(answer.value?.refused?.code, 'forbidden')
      else assert.equal(answer.value?.loop_id, 'loop_made')
      dsh.agent.status = 'idle' // its turn ended: DSH Web creates again
      assert.equal((await dsh.call('panel', CREATE)).value?.loop_id, 'loop_made')
      assert.equal(server.calls.filter(call => call === 'POST /api/loops').length, refused ? 2 : 3)
    } finally {
      server.close()
    }
  })
}
