/**
 * A bound on what one loop tool call puts into the model's context. A busy profile's `loop_list`,
 * or a loop whose prompt runs to 100,000 characters, would otherwise go in whole. An answer over the
 * bound is cut, and says so in a `truncated` field: what was left out and how to ask for the rest.
 *
 * - `loop_list` is asked again for a page that fits (`limit`), so its `next_cursor` is dshloop's own
 *   and leads to exactly the loops not shown (contract §3: `limit` and `cursor`).
 * - `list_sessions` keeps its newest sessions (it has no paging).
 * - Texts still too long (a loop's prompt) are cut where marked; dshloop keeps them whole.
 */

import type { Json } from './dshloop.ts'

/** The most characters of JSON one tool result may take in the model's context. */
export const MAX_RESULT_CHARS = 16_000
/** Kept free under the bound for the `truncated` note itself. */
const NOTE_ROOM = 1_000
/** Kept free in a page for the `next_cursor` dshloop adds to it (an opaque string). */
const CURSOR_ROOM = 300
/** Texts are never cut shorter than this: IDs, times and cursors stay whole. */
const SHORTEST_CUT = 200

type JsonObject = { [key: string]: Json }

/** Per tool, the list in its answer that may lose items. */
const LISTS: Readonly<Record<string, string>> = { loop_list: 'loops', list_sessions: 'sessions' }

export function resultSize(value: Json): number {
  return JSON.stringify(value).length
}

/** What `call` answers for `args`, cut to MAX_RESULT_CHARS as described above. */
export async function cappedCall(tool: string, args: unknown, call: (args: unknown) => Promise<Json>): Promise<Json> {
  const answer = await call(args)
  if (resultSize(answer) <= MAX_RESULT_CHARS) return answer
  const loops = listIn('loop_list', answer)
  if (tool === 'loop_list' && loops !== undefined && loops.length > 1 && isObject(args)) {
    const limit = itemsThatFit(answer as JsonObject, 'loops')
    const page = await call({ ...args, limit })
    const pageLoops = listIn('loop_list', page) ?? []
    const more = isObject(page) && typeof page.next_cursor === 'string'
    // A page size for the rest that fits too, judged by the loops already seen after this page.
    const rest = loops.slice(pageLoops.length)
    const nextLimit = rest.length > 0 ? itemsThatFit({ ...(answer as JsonObject), loops: rest }, 'loops') : limit
    const note = more
      ? `It shows the first ${pageLoops.length} of the ${loops.length}${isObject(answer) && answer.next_cursor !== undefined ? ' or more' : ''} ` +
        `loops asked for. For the next ones, call loop_list again with the same arguments and ` +
        `"cursor": ${JSON.stringify((page as JsonObject).next_cursor)}, "limit": ${nextLimit}; each answer's next_cursor leads on.`
      : undefined
    return cut(tool, page, note)
  }
  return cut(tool, answer, undefined)
}

/** How many leading items of answer[key] fit under the bound with the rest of the answer (at least 1). */
export function itemsThatFit(answer: JsonObject, key: string): number {
  const items = answer[key] as Json[]
  let room = MAX_RESULT_CHARS - NOTE_ROOM - CURSOR_ROOM - resultSize({ ...answer, [key]: [] })
  let count = 0
  for (const item of items) {
    room -= resultSize(item) + 1 // the comma
    if (room < 0) break
    count += 1
  }
  return Math.max(1, count)
}

function cut(tool: string, answer: Json, pagedNote: string | undefined): Json {
  const notes = pagedNote === undefined ? [] : [pagedNote]
  let value = answer
  const budget = MAX_RESULT_CHARS - NOTE_ROOM
  const key = LISTS[tool]
  const items = listIn(tool, value)
  if (tool === 'list_sessions' && key !== undefined && items !== undefined && resultSize(value) > budget) {
    const kept = itemsThatFit(value as JsonObject, key)
    if (kept < items.length) {
      value = { ...(value as JsonObject), [key]: items.slice(0, kept) }
      notes.push(
        `It shows the newest ${kept} of the ${items.length} sessions; list_sessions has no paging, so the ` +
          'older ones are left out. check_session_status reads any one session by its ID.',
      )
    }
  }
  if (resultSize(value) > budget) {
    const shortened = shortenTexts(value, budget)
    if (shortened !== undefined) {
      value = shortened.value
      notes.push(
        `${shortened.count} long text${shortened.count === 1 ? ' is' : 's are'} cut short where marked ` +
          '"…[N more characters cut]"; dshloop keeps them whole.',
      )
    }
  }
  if (notes.length === 0 && resultSize(value) <= MAX_RESULT_CHARS) return value
  const bound = String(MAX_RESULT_CHARS).replace(/\B(?=(\d{3})+$)/g, ',')
  const note = [`This answer is cut to fit the ${bound} characters a tool result may take.`, ...notes].join(' ')
  // First, so that the model reads it before the list it explains.
  const noted = isObject(value) ? { truncated: note, ...value } : undefined
  if (noted !== undefined && resultSize(noted) <= MAX_RESULT_CHARS) return noted
  // Nothing above made it fit (an answer of countless short fields): its start, marked as such.
  const text = JSON.stringify(value)
  const truncated = `${note} Only its start is shown, as JSON text.`
  let length = MAX_RESULT_CHARS - truncated.length
  let partial: JsonObject
  do {
    partial = { truncated, partial: text.slice(0, length) }
    length -= resultSize(partial) - MAX_RESULT_CHARS // the escaping of quotes grows the text
  } while (resultSize(partial) > MAX_RESULT_CHARS)
  return partial
}

/** `value` with every text longer than some length cut to it: the longest length that fits `budget`. */
function shortenTexts(value: Json, budget: number): { value: Json; count: number } | undefined {
  let low = SHORTEST_CUT
  let high = longestText(value)
  if (high <= low || resultSize(shorten(value, low).value) > budget) {
    const shortest = shorten(value, low)
    return shortest.count > 0 ? shortest : undefined
  }
  while (low < high) {
    const middle = Math.ceil((low + high) / 2)
    if (resultSize(shorten(value, middle).value) <= budget) low = middle
    else high = middle - 1
  }
  return shorten(value, low)
}

function shorten(value: Json, length: number): { value: Json; count: number } {
  let count = 0
  const walk = (node: Json): Json => {
    if (typeof node === 'string') {
      if (node.length <= length) return node
      count += 1
      // Never end on half of a surrogate pair.
      const end = /[\uD800-\uDBFF]/.test(node[length - 1] ?? '') ? length - 1 : length
      return `${node.slice(0, end)}…[${node.length - end} more characters cut]`
    }
    if (Array.isArray(node)) return node.map(walk)
    if (isObject(node)) return Object.fromEntries(Object.entries(node).map(([key, item]) => [key, walk(item)]))
    return node
  }
  return { value: walk(value), count }
}

function longestText(value: Json): number {
  if (typeof value === 'string') return value.length
  if (Array.isArray(value)) return value.reduce<number>((longest, item) => Math.max(longest, longestText(item)), 0)
  if (isObject(value)) return Object.values(value).reduce<number>((longest, item) => Math.max(longest, longestText(item)), 0)
  return 0
}

function listIn(tool: string, value: Json): Json[] | undefined {
  const key = LISTS[tool]
  if (key === undefined || !isObject(value)) return undefined
  const items = value[key]
  return Array.isArray(items) ? items : undefined
}

function isObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}
