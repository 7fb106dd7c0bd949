import assert from 'node:assert/strict'
import { createServer, type IncomingMessage } from 'node:http'
import type { AddressInfo } from 'node:net'
import { test } from 'node:test'
import { cappedCall, MAX_RESULT_CHARS } from '../src/cap.ts'
import { apply } from '../src/index.ts'

/** A LoopView as dshloop answers it (contract §3), about 400 characters of JSON with a short prompt. */
function loopView(index: number, prompt = `Check deploy number ${index} and report what changed since the last check.`) {
  return {
    loop_id: `loop_${String(index).padStart(6, '0')}`,
    session_id: 'ses_busy',
    created_by_session_id: 'ses_busy',
    prompt,
    schedule: { kind: 'every', every_seconds: 600 },
    state: 'scheduled',
    next_at: 1_796_079_600_000 + index * 1000,
    created_at: 1_796_000_000_000,
    overdue: false,
    runs_delivered: 3,
  }
}

/** A dshloop that pages loop_list as contract §3 says (`limit`, `cursor`, `next_cursor`). */
async function fakeDshloop(loops: object[], sessions: object[] = []) {
  const asked: { tool: string; body: any }[] = []
  const server = createServer(async (request, response) => {
    const body = JSON.parse((await text(request)) || '{}')
    const tool = request.url!.replace('/api/tools/', '')
    response.setHeader('Content-Type', 'application/json')
    if (request.method !== 'POST') {
      response.statusCode = 404 // GET /api/tools: the plugin keeps its built-in catalogue
      response.end(JSON.stringify({ error: { code: 'not_found', message: 'no catalogue here' } }))
      return
    }
    asked.push({ tool, body })
    if (tool === 'loop_list') {
      const start = body.cursor === undefined ? 0 : Number(String(body.cursor).replace('c_', ''))
      const end = body.limit === undefined ? loops.length : Math.min(loops.length, start + body.limit)
      response.end(JSON.stringify({ loops: loops.slice(start, end), ...(end < loops.length ? { next_cursor: `c_${end}` } : {}) }))
    } else if (tool === 'list_sessions') {
      response.end(JSON.stringify({ sessions: sessions.slice(0, body.limit ?? 50) }))
    } else {
      response.end(JSON.stringify(loops[0]))
    }
  })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, asked, close: () => server.close() }
}

async function text(request: IncomingMessage): Promise<string> {
  let body = ''
  for await (const chunk of request) body += chunk
  return body
}

/** The plugin's own tools on one root agent, as DSH would run them. */
function tools(url: string) {
  const registered = new Map<string, any>()
  const agent = {
    id: 'ses_busy',
    ctx: {
      tools: { register(definition: any) { registered.set(definition.name, definition); return () => registered.delete(definition.name) } },
      effect(body: () => () => void) { return body() },
    },
  }
  const ctx = {
    agents: { roots: () => [agent] },
    connection: { rpc: { handle: () => () => {} } },
    logger: { info() {}, warn() {} },
    on: () => () => {},
    effect(body: () => unknown) { return body() },
  }
  apply(ctx as any, { url, timeoutSeconds: 5 })
  return (name: string, args: unknown) =>
    registered.get(name).execute(args, { name, arguments: args, agent, signal: new AbortController().signal })
}

const size = (value: unknown) => JSON.stringify(value).length

test('a loop_list too big for the model is a page that fits, whose cursor leads to exactly the rest', async () => {
  const loops = Array.from({ length: 300 }, (_, index) => loopView(index))
  assert.ok(size({ loops }) > 5 * MAX_RESULT_CHARS)
  const dshloop = await fakeDshloop(loops)
  try {
    const call = tools(dshloop.url)
    const first = await call('loop_list', {})
    assert.ok(size(first) <= MAX_RESULT_CHARS, `${size(first)} characters: ${JSON.stringify({ ...first, loops: first.loops.length })}`)
    const shown = first.loops.length
    assert.ok(shown > 10 && shown < 300, `${shown} loops`)
    assert.deepEqual(first.loops, loops.slice(0, shown)) // whole loops, in the list's order
    assert.equal(first.truncated.slice(0, 40), 'This answer is cut to fit the 16,000 cha')
    assert.match(first.truncated, new RegExp(`shows the first ${shown} of the 300 loops`))
    assert.match(first.truncated, new RegExp(`call loop_list again with the same arguments and "cursor": "${first.next_cursor}", "limit": ${shown}`))
    // The plugin asked dshloop again for a page of that size: the cursor is dshloop's own.
    assert.deepEqual(dshloop.asked.map(item => item.body), [{}, { limit: shown }])

    // Doing what the note says walks the whole list, each loop once, each answer within the bound.
    const seen = [...first.loops]
    let cursor = first.next_cursor
    while (cursor !== undefined) {
      const page = await call('loop_list', { cursor, limit: shown })
      assert.ok(size(page) <= MAX_RESULT_CHARS)
      assert.equal(page.truncated, undefined) // a page of that size fits as it is
      seen.push(...page.loops)
      cursor = page.next_cursor
    }
    assert.deepEqual(seen, loops)
  } finally {
    dshloop.close()
  }
})

test("a loop whose prompt alone is too big shows the prompt's start, marked, and says so", async () => {
  const prompt = 'Summarise the incident log. '.repeat(4_000) // 112,000 characters
  const loops = [loopView(0, prompt), loopView(1, prompt)]
  const dshloop = await fakeDshloop(loops)
  try {
    const call = tools(dshloop.url)
    const made = await call('loop_create', { prompt, schedule: { kind: 'every', every_seconds: 600 } })
    assert.ok(size(made) <= MAX_RESULT_CHARS)
    assert.equal(made.loop_id, 'loop_000000') // everything but the long text is whole
    assert.deepEqual(made.schedule, { kind: 'every', every_seconds: 600 })
    assert.ok(prompt.startsWith(made.prompt.replace(/…\[\d+ more characters cut\]$/, '')))
    const [, cut] = made.prompt.match(/…\[(\d+) more characters cut\]$/)
    assert.ok(Number(cut) > 90_000)
    assert.match(made.truncated, /1 long text is cut short where marked "…\[N more characters cut\]"; dshloop keeps them whole/)

    // In a list, one such loop per page, its prompt cut the same way.
    const listed = await call('loop_list', {})
    assert.ok(size(listed) <= MAX_RESULT_CHARS)
    assert.deepEqual(listed.loops.map((loop: any) => loop.loop_id), ['loop_000000'])
    assert.equal(listed.next_cursor, 'c_1')
    assert.match(listed.truncated, /first 1 of the 2 loops/)
    assert.match(listed.truncated, /1 long text is cut short/)
  } finally {
    dshloop.close()
  }
})

test('list_sessions keeps the newest sessions that fit and says the rest are left out', async () => {
  const sessions = Array.from({ length: 500 }, (_, index) => ({
    session_id: `ses_${index}`,
    title: `Conversation number ${index} about the nightly deploy and its checks`,
    updated_at: '2026-12-04T10:00:00+00:00',
  }))
  const dshloop = await fakeDshloop([], sessions)
  try {
    const listed = await tools(dshloop.url)('list_sessions', { limit: 500 })
    assert.ok(size(listed) <= MAX_RESULT_CHARS)
    const kept = listed.sessions.length
    assert.deepEqual(listed.sessions, sessions.slice(0, kept))
    assert.match(listed.truncated, new RegExp(`newest ${kept} of the 500 sessions; list_sessions has no paging`))
  } finally {
    dshloop.close()
  }
})

test('an answer within the bound is passed on exactly as dshloop gave it', async () => {
  const loops = Array.from({ length: 5 }, (_, index) => loopView(index))
  const dshloop = await fakeDshloop(loops)
  try {
    assert.deepEqual(await tools(dshloop.url)('loop_list', {}), { loops })
    assert.equal(dshloop.asked.length, 1)
  } finally {
    dshloop.close()
  }
})

test('an answer nothing else can shorten shows its start as JSON text, within the bound, and says so', async () => {
  const strange = { codes: Array.from({ length: 5_000 }, (_, index) => `code-${index}`) }
  const capped = (await cappedCall('check_session_status', {}, async () => strange)) as { truncated: string; partial: string }
  assert.ok(size(capped) <= MAX_RESULT_CHARS)
  assert.match(capped.truncated, /Only its start is shown, as JSON text\.$/)
  assert.ok(JSON.stringify(strange).startsWith(capped.partial))
})
