import assert from 'node:assert/strict'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { test } from 'node:test'
import catalogue from '../src/catalogue.json' with { type: 'json' }
import { apply, handleRpc, SUBAGENT_REFUSAL } from '../src/index.ts'

type Listener = (payload: any, next?: any) => unknown

/** The few DSH services the host half uses, recorded: no DSH needed. */
function fakeDsh() {
  const listeners = new Map<string, Listener>()
  const roots: any[] = []
  const rpc: { channel?: string; authority?: string } = {}
  const agent = (id: string) => {
    const tools = new Map<string, any>()
    return {
      id,
      tools,
      ctx: {
        tools: { register(definition: any) { tools.set(definition.name, definition); return () => tools.delete(definition.name) } },
        effect(body: () => () => void) { return body() },
      },
    }
  }
  const ctx = {
    agents: { roots: () => roots },
    connection: { rpc: { handle(channel: string, _handler: unknown, options: { authority: string }) { rpc.channel = channel; rpc.authority = options.authority; return () => {} } } },
    logger: { info() {}, warn() {} },
    on(event: string, listener: Listener) { listeners.set(event, listener); return () => listeners.delete(event) },
    effect(body: () => unknown) { return body() },
  }
  return { ctx, roots, agent, listeners, rpc }
}

test('every root agent gets the five tools; a subagent calling them is refused', async () => {
  const dsh = fakeDsh()
  const root = dsh.agent('ses_root')
  dsh.roots.push(root)
  // An unreachable dshloop: the built-in catalogue is what the agents get.
  apply(dsh.ctx as any, { url: 'http://127.0.0.1:9', timeoutSeconds: 1 })
  assert.deepEqual([...root.tools.keys()].sort(), ['check_session_status', 'list_sessions', 'loop_create', 'loop_delete', 'loop_list'])
  assert.equal(dsh.rpc.channel, '/dshloop')
  assert.equal(dsh.rpc.authority, 'loopback')

  const later = dsh.agent('ses_later')
  dsh.roots.push(later)
  dsh.listeners.get('agent/created')!({ agent: later })
  assert.equal(later.tools.size, 5)

  const child = dsh.agent('ses_child') // not a root: created, but gets nothing of its own
  dsh.listeners.get('agent/created')!({ agent: child })
  assert.equal(child.tools.size, 0)
  const loopList = root.tools.get('loop_list')
  await assert.rejects(loopList.execute({}, { name: 'loop_list', agent: child, signal: new AbortController().signal }), {
    message: SUBAGENT_REFUSAL,
  })
})

test('the composer status answers only the status endpoint, for a named session', async () => {
  const endpoint = { url: 'http://127.0.0.1:9', token: 't', timeoutMs: 500 }
  const signal = new AbortController().signal
  assert.equal((await handleRpc(endpoint, 'status', {}, signal)).error?.code, 'bad-request')
  assert.equal((await handleRpc(endpoint, 'other', { sessionId: 's' }, signal)).error?.code, 'not-found')
  const down = await handleRpc(endpoint, 'status', { sessionId: 's' }, signal)
  assert.equal(down.ok, false)
  assert.equal(down.error?.code, 'unreachable')
})

test('asking before a new-session loop is a setting, off by default', async () => {
  const allow = async () => ({ kind: 'allow' })
  const exec = (agent: unknown, args: unknown) => ({ name: 'loop_create', arguments: args, agent, signal: new AbortController().signal })

  const off = fakeDsh()
  apply(off.ctx as any, { url: 'http://127.0.0.1:9' })
  assert.equal(off.listeners.has('tools/pre-execute'), false)

  const on = fakeDsh()
  const root = on.agent('ses_root')
  on.roots.push(root)
  apply(on.ctx as any, { url: 'http://127.0.0.1:9', askBeforeNewSessionLoops: true })
  const ask = on.listeners.get('tools/pre-execute')!
  assert.equal(((await ask(exec(root, { session_id: 'new' }), allow)) as any).kind, 'ask')
  assert.equal(((await ask(exec(root, {}), allow)) as any).kind, 'allow')
  assert.equal(((await ask(exec(on.agent('ses_other'), { session_id: 'new' }), allow)) as any).kind, 'allow')
})

test("dshloop's own catalogue replaces the built-in one once it answers", async () => {
  const served = structuredClone(catalogue)
  served.tools[0]!.description = 'A newer description from dshloop.'
  const server = createServer((request, response) => {
    response.setHeader('Content-Type', 'application/json')
    response.end(JSON.stringify(request.url === '/api/tools' ? served : { loops: [] }))
  })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  try {
    const dsh = fakeDsh()
    const root = dsh.agent('ses_root')
    dsh.roots.push(root)
    apply(dsh.ctx as any, { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` })
    const name = served.tools[0]!.name
    assert.notEqual(root.tools.get(name).description, served.tools[0]!.description) // built in at first
    for (let i = 0; i < 100 && root.tools.get(name)?.description !== served.tools[0]!.description; i++) {
      await new Promise(resolve => setTimeout(resolve, 20))
    }
    assert.equal(root.tools.get(name).description, 'A newer description from dshloop.')
    assert.equal(root.tools.size, 5)
  } finally {
    server.close()
  }
})

test('a conversation dshloop does not know yet has no loops, not an error', async () => {
  const server = createServer((_request, response) => {
    response.statusCode = 422
    response.end(JSON.stringify({ error: { code: 'unknown_session', message: 'The host knows no session.' } }))
  })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  try {
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
    const answer = await handleRpc({ url, token: 't', timeoutMs: 2_000 }, 'status', { sessionId: 'draft' }, new AbortController().signal)
    assert.deepEqual(answer, { ok: true, value: { loops: [], panelUrl: `${url}/panel/?session=draft` } })
  } finally {
    server.close()
  }
})
