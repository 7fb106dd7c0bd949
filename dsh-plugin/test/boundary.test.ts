import assert from 'node:assert/strict'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { test } from 'node:test'
import { allowedTools, extraToolsOf, FRESH_RUN_TOOLS, refusal, RULE_FOREGROUND, RULE_TOOLS } from '../src/boundary.ts'
import { apply } from '../src/index.ts'

const DEFAULT = allowedTools()

test('a fresh run keeps the coding tools and dshloop read-only tools, and nothing that fans out or waits', () => {
  for (const name of ['bash', 'read', 'write', 'edit', 'glob', 'grep', 'web_search', 'loop_list', 'list_sessions']) {
    assert.equal(refusal(name, {}, DEFAULT), undefined, name)
  }
  const denied = [
    'subagent', 'subagent_fork', 'send_message', 'interrupt_agent', 'list_agents', 'workflow', 'ralph',
    'job_kill', 'job_list', 'job_output', 'create_goal', 'get_goal', 'update_goal', 'exit_plan_mode',
    'ask_user_question', 'loop_create', 'loop_delete', 'thirdparty_echo',
  ]
  for (const name of denied) {
    const reason = refusal(name, {}, DEFAULT)
    assert.ok(reason?.startsWith(`dshloop refused ${name} (rule ${RULE_TOOLS}): `), `${name}: ${reason}`)
    assert.match(reason ?? '', /DSHLOOP_FRESH_RUN_TOOLS/)
  }
})

test('a shell in the background is refused by its own rule; in the foreground it runs', () => {
  for (const shell of ['bash', 'pwsh']) {
    const reason = refusal(shell, { command: 'sleep 600', run_in_background: true }, DEFAULT)
    assert.ok(reason?.startsWith(`dshloop refused ${shell} (rule ${RULE_FOREGROUND}): `), reason)
    assert.equal(refusal(shell, { command: 'ls', run_in_background: false }, DEFAULT), undefined)
    assert.equal(refusal(shell, { command: 'ls' }, DEFAULT), undefined)
  }
})

test('a shell asking for a wider sandbox is refused by its own rule: nobody could approve it', () => {
  const escalate = { command: 'touch /etc/x', sandbox_permissions: 'danger-full-access', justification: 'needs it' }
  assert.match(refusal('bash', escalate, DEFAULT) ?? '', /^dshloop refused bash \(rule fresh-run-sandbox\): /)
  assert.equal(refusal('bash', { command: 'ls', sandbox_permissions: '' }, DEFAULT), undefined)
})

test('the operator widens the set; what a delivery sends that is not a name widens nothing', () => {
  const widened = allowedTools(extraToolsOf(['thirdparty_echo', 'loop_create', 3, '', null]))
  assert.equal(refusal('thirdparty_echo', {}, widened), undefined)
  assert.equal(refusal('loop_create', {}, widened), undefined)
  assert.ok(refusal('subagent', {}, widened))
  assert.deepEqual(extraToolsOf('subagent'), [])
  assert.deepEqual(extraToolsOf(undefined), [])
  assert.equal(widened.size, FRESH_RUN_TOOLS.length + 2)
})

/** dshloop as the plugin reads a delivery from it: what `offered` holds under each key. */
async function dshloopOffering(offered: Map<string, Record<string, unknown>>): Promise<{ url: string; close(): void }> {
  const server = createServer((request, response) => {
    const key = decodeURIComponent((request.url ?? '').replace('/api/dsh/deliveries/', ''))
    const body = offered.get(key)
    response.writeHead(body === undefined ? 404 : 200, { 'Content-Type': 'application/json' })
    response.end(JSON.stringify(body ?? { error: { code: 'not_found', message: 'not offered' } }))
  })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, close: () => server.close() }
}

/** The host half over a recorded DSH: agents whose registrations and guards are kept. */
function fakeDsh(offered: Map<string, Record<string, unknown>>) {
  const listeners = new Map<string, (payload: any) => unknown>()
  const roots: any[] = []
  let handler: ((endpoint: string, payload: unknown, signal: AbortSignal) => Promise<any>) | undefined
  const agent = (id: string) => {
    const tools = new Map<string, any>()
    const guards = new Set<(exec: any) => string | undefined>()
    return {
      id,
      tools,
      guards,
      status: 'idle',
      session: { events: [] as any[] },
      inbox: { nextTurn: [] as unknown[], nextStep: [] as unknown[] },
      sent: [] as unknown[],
      send(message: unknown) { this.sent.push(message) },
      /** What DSH's guard stage answers for a call by this agent. */
      check(name: string, args: unknown = {}) {
        for (const guard of guards) {
          const reason = guard({ name, arguments: args, agent: this })
          if (reason !== undefined) return reason
        }
        return undefined
      },
      ctx: {
        tools: {
          register(definition: any) { tools.set(definition.name, definition); return () => tools.delete(definition.name) },
          guard(check: (exec: any) => string | undefined) { guards.add(check); return () => guards.delete(check) },
        },
        effect(body: () => () => void) { return body() },
      },
    }
  }
  const ctx = {
    agents: { roots: () => roots, get: (id: string) => roots.find(root => root.id === id) },
    connection: { rpc: { handle(_channel: string, h: typeof handler) { handler = h; return () => {} } } },
    logger: { info() {}, warn() {} },
    on(event: string, listener: (payload: any) => unknown) { listeners.set(event, listener); return () => listeners.delete(event) },
    effect(body: () => unknown) { return body() },
  }
  let deliveries = 0
  const deliver = (sessionId: string, extra: Record<string, unknown>) => {
    const key = `k-${sessionId}-${++deliveries}`
    const body = { sessionId, text: '<loop/>', key, summary: '', loop: { loop_id: 'l', run_id: 'r' }, ...extra }
    offered.set(key, body)
    // The ring carries the whole request too: a plugin reading it from the ring and one reading it
    // from dshloop (src/deliver.ts) see the same delivery.
    return handler!('deliver', body, new AbortController().signal)
  }
  return { ctx, roots, agent, deliver }
}

test('a delivery into a fresh session guards that agent alone, before its message is sent', async () => {
  const offered = new Map<string, Record<string, unknown>>()
  const dshloop = await dshloopOffering(offered)
  const dsh = fakeDsh(offered)
  const fresh = dsh.agent('loop-fresh')
  const ordinary = dsh.agent('ses_person')
  dsh.roots.push(fresh, ordinary)
  apply(dsh.ctx as any, { url: dshloop.url, timeoutSeconds: 2 })
  try {
    assert.equal((await dsh.deliver('ses_person', {})).ok, true)
    assert.equal((await dsh.deliver('loop-fresh', { unattended: true })).ok, true)
    assert.equal(fresh.sent.length, 1)

    assert.match(fresh.check('subagent') ?? '', /^dshloop refused subagent \(rule fresh-run-tools\)/)
    assert.match(fresh.check('bash', { command: 'x', run_in_background: true }) ?? '', /rule fresh-run-foreground/)
    assert.equal(fresh.check('bash', { command: 'ls' }), undefined)
    assert.deepEqual([...fresh.tools.keys()].sort(), ['check_session_status', 'list_sessions', 'loop_list'])

    // An ordinary conversation keeps every tool: no guard, all five of dshloop's.
    assert.equal(ordinary.guards.size, 0)
    assert.equal(ordinary.tools.size, 5)

    // The operator's additions come with the delivery; a redelivery installs no second guard.
    await dsh.deliver('loop-fresh', { unattended: true, extraTools: ['loop_create', 'thirdparty_echo'] })
    assert.equal(fresh.guards.size, 1)
    assert.equal(fresh.check('thirdparty_echo'), undefined)
    assert.ok(fresh.tools.has('loop_create'))
    assert.ok(!fresh.tools.has('loop_delete'))
  } finally {
    dshloop.close()
  }
})
