import assert from 'node:assert/strict'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { test } from 'node:test'
import catalogue from '../src/catalogue.json' with { type: 'json' }
import { callTool, DshloopError, type Endpoint, errorMessage, headerValue, parseCatalogue } from '../src/dshloop.ts'

const TOKEN = 'dsh_secret_for_tests'

function endpoint(fetchImpl: typeof fetch, timeoutMs = 1_000): Endpoint {
  return { url: 'http://dshloop.test/', token: TOKEN, timeoutMs, fetch: fetchImpl }
}

test('a call posts the input as the caller, with the token, and returns the answer', async () => {
  let seen: { url: string; init: RequestInit } | undefined
  const fake = (async (url: string, init: RequestInit) => {
    seen = { url, init }
    return new Response(JSON.stringify({ loops: [] }), { status: 200 })
  }) as unknown as typeof fetch
  const answer = await callTool(endpoint(fake), 'loop_list', {}, 'ses_A')
  assert.deepEqual(answer, { loops: [] })
  assert.equal(seen?.url, 'http://dshloop.test/api/tools/loop_list')
  const headers = seen?.init.headers as Record<string, string>
  assert.equal(headers['X-DSH-Session-Id'], 'ses_A')
  assert.equal(headers.Authorization, `Bearer ${TOKEN}`)
  assert.equal(seen?.init.body, '{}')
})

test('a contract error becomes a failure with its code and message, never the token', async () => {
  const fake = (async () => new Response(JSON.stringify({
    error: { code: 'invalid_input', message: 'every_seconds must be at least 1.', field: 'schedule.every_seconds' },
  }), { status: 422 })) as unknown as typeof fetch
  await assert.rejects(callTool(endpoint(fake), 'loop_create', {}, 'ses_A'), (error: unknown) => {
    assert.ok(error instanceof DshloopError)
    assert.equal(error.code, 'invalid_input')
    assert.match(error.message, /invalid_input: every_seconds must be at least 1\. \(field: schedule\.every_seconds\)/)
    assert.doesNotMatch(error.message, new RegExp(TOKEN))
    return true
  })
})

test('an error without the contract body still says what happened', () => {
  const error = errorMessage(502, '<html>')
  assert.equal(error.code, 'http_502')
  assert.match(error.message, /HTTP 502/)
})

test('dshloop down is a clear failure naming the URL', async () => {
  const server = createServer()
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as AddressInfo).port
  await new Promise<void>(resolve => server.close(() => resolve()))
  const down: Endpoint = { url: `http://127.0.0.1:${port}`, token: TOKEN, timeoutMs: 2_000 }
  await assert.rejects(callTool(down, 'loop_list', {}, 'ses_A'), (error: unknown) => {
    assert.ok(error instanceof DshloopError)
    assert.equal(error.code, 'unreachable')
    assert.match(error.message, new RegExp(`dshloop is not reachable at http://127\\.0\\.0\\.1:${port} \\(ECONNREFUSED\\)`))
    return true
  })
})

test('a dshloop that never answers fails after the timeout, not never', async () => {
  const server = createServer(() => { /* holds every request open */ })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as AddressInfo).port
  const slow: Endpoint = { url: `http://127.0.0.1:${port}`, token: TOKEN, timeoutMs: 300 }
  const started = Date.now()
  try {
    await assert.rejects(callTool(slow, 'loop_list', {}, 'ses_A'), { name: 'DshloopError', code: 'timeout' })
    assert.ok(Date.now() - started < 3_000)
  } finally {
    server.closeAllConnections()
    server.close()
  }
})

test('a session ID outside latin-1 goes as its UTF-8 bytes', () => {
  assert.equal(Buffer.from(headerValue('会话'), 'latin1').toString('utf8'), '会话')
  assert.equal(headerValue('ses_A'), 'ses_A')
})

test('the built-in catalogue has the five tools; a partial one is refused', () => {
  assert.deepEqual(parseCatalogue(catalogue)?.map(tool => tool.name).sort(), [
    'check_session_status', 'list_sessions', 'loop_create', 'loop_delete', 'loop_list',
  ])
  assert.equal(parseCatalogue({ tools: catalogue.tools.slice(1) }), undefined)
  assert.equal(parseCatalogue({ nope: 1 }), undefined)
})
