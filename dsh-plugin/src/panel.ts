/**
 * The Loops panel's data (contract §15): DSH Web asks `POST /dshloop/panel {op, …}` on the plugin's
 * loopback channel, and the host half asks dshloop's operator API with the plugin's token (scopes
 * `tools` and `manage`), which never leaves this process. Every write names its client in the loop's
 * trail ("dsh-plugin via DSH Web", a token actor): a person in DSH Web never acts as an agent's
 * session. A loop created for a session targets it; its creator is dshloop's global interface
 * session, as for a loop made in dshloop's own panel.
 *
 * Who can call it: whoever reaches DSH's port. DSH hands a channel's handler the request's body and
 * nothing about its caller, and checks only Host and Origin headers, which any local process sets as
 * it likes: an agent's bash (`curl $DSH_WEB_URL/dshloop/panel`) is as welcome as DSH Web. So dshloop
 * takes the plugin's token as no person's word (loops/api.py `vouched`: with the approval on, a `new`
 * loop made or widened here awaits approval and cannot be approved or run here), and this side keeps
 * a fresh run from making loops here while it works (`freshRunAt`), which is all it can tell.
 *
 * What one refresh of an open panel costs dshloop: one `list` (one read of the loop index, one of
 * the session headers); a conversation's tab adds `delivered` (the runs delivered into it). `loop`
 * (a loop's runs and trail) only while a loop is open in the panel.
 */

import { callApi, DshloopError, type Endpoint, type Json } from './dshloop.ts'

/** How the trail names what a person did in DSH Web (after the token's name: "dsh-plugin via DSH Web"). */
export const VIA = 'DSH Web'
/** Loops one list shows: more than a screen; past it the panel asks for narrower filters. */
export const LIST_LIMIT = 100
/** A loop's runs and events shown when it is opened. */
export const HISTORY_LIMIT = 20
/** Runs a conversation's tab shows as delivered into it. */
export const DELIVERED_LIMIT = 10
/** Sessions offered in the target picker (list_sessions, newest first). */
export const SESSIONS_LIMIT = 200

const ACTIONS = { pause: 'pause', resume: 'resume', approve: 'resume', run: 'run', retry: 'retry' } as const
const FILTERS = ['state', 'target', 'session', 'q'] as const

/** The writes that make or reshape loops: refused while a fresh run works (unattended work may not
 * schedule more of itself, contract §15). */
export const LOOP_MAKING_OPS: readonly string[] = ['create', 'edit']

export interface PanelRequest {
  readonly op: string
  readonly [key: string]: unknown
}

/**
 * One panel op. `freshRunAt` names a session dshloop made for a `new` run whose turn is running now
 * (undefined: none): its commands may be the caller, so a loop-making op is refused meanwhile.
 */
export async function panelCall(
  endpoint: Endpoint,
  payload: unknown,
  signal?: AbortSignal,
  freshRunAt: () => string | undefined = () => undefined,
): Promise<Json> {
  if (!isObject(payload) || typeof payload.op !== 'string') throw new DshloopError('bad-request', 'payload must be {op, …}')
  const options = signal === undefined ? { via: VIA } : { via: VIA, signal }
  const op = payload.op
  const working = LOOP_MAKING_OPS.includes(op) ? freshRunAt() : undefined
  if (working !== undefined) {
    throw new DshloopError(
      'forbidden',
      `A fresh run (session ${working}) is working now, and DSH Web's channel cannot tell its commands from you: ` +
        'no loop is made or edited here until it ends. Try again then, or use dshloop\'s own panel.',
    )
  }
  if (op === 'list') return callApi(endpoint, 'GET', `/api/loops?${listQuery(payload)}`, options)
  if (op === 'sessions') {
    return callApi(endpoint, 'POST', '/api/tools/list_sessions', { ...options, body: { limit: SESSIONS_LIMIT } })
  }
  if (op === 'delivered') {
    const sessionId = payload.sessionId
    if (typeof sessionId !== 'string' || sessionId === '') throw new DshloopError('bad-request', 'sessionId must be a session ID')
    const query = new URLSearchParams({ session: sessionId, limit: String(DELIVERED_LIMIT) })
    return callApi(endpoint, 'GET', `/api/runs?${query}`, options)
  }
  if (op === 'create') return callApi(endpoint, 'POST', '/api/loops', { ...options, body: objectOf(payload.input, 'input') })
  const path = `/api/loops/${encodeURIComponent(loopIdOf(payload))}`
  if (op === 'loop') {
    const [runs, events] = await Promise.all([
      callApi(endpoint, 'GET', `${path}/runs?limit=${HISTORY_LIMIT}`, options),
      callApi(endpoint, 'GET', `${path}/events?limit=${HISTORY_LIMIT}`, options),
    ])
    return { ...(runs as { [key: string]: Json }), ...(events as { [key: string]: Json }) }
  }
  if (op === 'edit') return callApi(endpoint, 'PATCH', path, { ...options, body: objectOf(payload.changes, 'changes') })
  if (op === 'delete') return callApi(endpoint, 'DELETE', path, options)
  if (Object.hasOwn(ACTIONS, op)) return callApi(endpoint, 'POST', `${path}/${ACTIONS[op as keyof typeof ACTIONS]}`, options)
  throw new DshloopError('bad-request', `unknown panel op ${op}`)
}

/** The list's query: the filters a person set (dshloop checks their values), one page. */
export function listQuery(payload: { readonly [key: string]: unknown }): string {
  const query = new URLSearchParams()
  for (const name of FILTERS) {
    const value = payload[name]
    if (typeof value === 'string' && value !== '') query.set(name, value)
  }
  query.set('limit', String(LIST_LIMIT))
  return query.toString()
}

function loopIdOf(payload: { readonly [key: string]: unknown }): string {
  const loopId = payload.loopId
  if (typeof loopId !== 'string' || loopId === '' || loopId.length > 200) {
    throw new DshloopError('bad-request', 'loopId must be a loop ID')
  }
  return loopId
}

function objectOf(value: unknown, name: string): { [key: string]: Json } {
  if (!isObject(value)) throw new DshloopError('bad-request', `${name} must be an object`)
  return value as { [key: string]: Json }
}

function isObject(value: unknown): value is { [key: string]: unknown } {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}
