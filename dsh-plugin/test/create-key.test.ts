import assert from 'node:assert/strict'
import { createServer, type IncomingHttpHeaders } from 'node:http'
import type { AddressInfo } from 'node:net'
import { test } from 'node:test'
import { apply } from '../src/index.ts'

test("loop_create sends the tool call's ID as its Idempotency-Key; the other tools send none", async () => {
  const seen: { path: string; headers: IncomingHttpHeaders }[] = []
  const server = createServer((request, response) => {
    seen.push({ path: request.url ?? '', headers: request.headers })
    request.resume()
    response.writeHead(request.url === '/api/tools' ? 503 : 200, { 'Content-Type': 'application/json' })
    response.end(request.url === '/api/tools' ? '{}' : JSON.stringify({ loop_id: 'loop_1', loops: [] }))
  })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  try {
    const tools = new Map<string, any>()
    const root = {
      id: 'ses_root',
      ctx: {
        tools: { register(definition: any) { tools.set(definition.name, definition); return () => tools.delete(definition.name) }, guard() { return () => {} } },
        effect(body: () => () => void) { return body() },
      },
    }
    const ctx = {
      agents: { roots: () => [root], get: () => undefined },
      connection: { rpc: { handle() { return () => {} } } },
      logger: { info() {}, warn() {} },
      on() { return () => {} },
      effect(body: () => unknown) { return body() },
    }
    apply(ctx as any, { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, timeoutSeconds: 2 })
    const signal = new AbortController().signal
    const call = { prompt: 'x', schedule: { kind: 'every', every_seconds: 600 } }
    await tools.get('loop_create').execute(call, { name: 'loop_create', callId: 'call_00_abc', agent: root, signal })
    await tools.get('loop_list').execute({}, { name: 'loop_list', callId: 'call_00_def', agent: root, signal })

    const create = seen.find(request => request.path === '/api/tools/loop_create')
    assert.equal(create?.headers['idempotency-key'], 'call_00_abc')
    assert.equal(create?.headers['x-dsh-session-id'], 'ses_root')
    const list = seen.find(request => request.path === '/api/tools/loop_list')
    assert.equal(list?.headers['idempotency-key'], undefined)
  } finally {
    server.close()
  }
})
