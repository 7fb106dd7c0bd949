/**
 * The plugin's loopback channel in DSH, `POST /dshloop/<endpoint>` (DSH's request envelope; DSH
 * answers only loopback callers, and hands the handler no headers: any local process may call it).
 * - `status {sessionId}` from DSH Web: that session's loops, as `loop_list {}` answers them for that
 *   session as the caller — never another session's (spec §8.1);
 * - `hello {}` from dshloop: that this plugin is here, can deliver, confirms a delivery once its
 *   message is logged (`confirm`) and answers `sessions`;
 * - `deliver {key}` from dshloop: one occurrence's message into a loaded session (deliver.ts), read
 *   from dshloop under that key (the channel's payload is never delivered), with `unattended: true`
 *   for a session dshloop made for a `new` run, and in `extraTools` the tools an operator added to
 *   its set (src/boundary.ts); answered once DSH has logged the message (confirm.ts), with its ID;
 * - `sessions {ids}` from dshloop: each session's live agent, if DSH has one loaded, else its stored
 *   log (sessions.ts): what dshloop would otherwise ask `subagent.list`, `session.history` and
 *   `session.export` for, each of which reads every persisted session's header in rc.8 (for a cold
 *   session). Nothing DSH's own HTTP API does not already tell any local caller;
 * - `cards {loopIds}` from DSH Web: what the loop cards of those loops show (cards.ts);
 * - `panel {op, …}` from DSH Web: the Loops panel's reads and a person's actions (panel.ts): dshloop's
 *   answer as the value, or `{refused: {code, message, field?}}` with dshloop's code, its sentence and
 *   the field it names.
 */

import { extraToolsOf } from './boundary.ts'
import { loopCards } from './cards.ts'
import type { Confirmations } from './confirm.ts'
import { deliver, DeliverError, fetchDelivery, type LiveAgent, parseDeliverRequest, PLUGIN_NAME, ringKeyOf, whereIs } from './deliver.ts'
import { callTool, DshloopError, type Endpoint } from './dshloop.ts'
import { panelCall } from './panel.ts'
import { type SessionStores, sessionsOf } from './sessions.ts'
import { panelUrl } from './status.ts'

export interface RpcResult {
  readonly ok: boolean
  readonly value?: unknown
  readonly error?: { readonly code: string; readonly message: string; readonly details: Record<string, unknown> }
}

/** What the channel's delivery endpoints need of the host half. */
export interface Deliveries {
  readonly agents: { get(id: string): LiveAgent | undefined }
  /** Bound a fresh run's tools: the built-in set plus `extra` (src/boundary.ts). */
  restrict(agent: LiveAgent, extra: readonly string[]): Promise<void>
  /** A session made for a `new` run whose turn is running now, if any (panel.ts). */
  freshRunAt?(): string | undefined
  /** The deliveries waiting for their message to be logged (fed by DSH's `session/event`). */
  readonly confirmations?: Confirmations
  /** DSH's session stores the `sessions` endpoint reads (sessions.ts), each when DSH provides it. */
  stores?(): SessionStores
}

export async function handleRpc(
  endpoint: Endpoint,
  rpcEndpoint: string,
  payload: unknown,
  signal: AbortSignal,
  deliveries?: Deliveries,
): Promise<RpcResult> {
  if (rpcEndpoint === 'hello') {
    const can = deliveries !== undefined
    return { ok: true, value: { plugin: PLUGIN_NAME, deliver: can, confirm: can && deliveries.confirmations !== undefined, sessions: can } }
  }
  if (rpcEndpoint === 'deliver' && deliveries !== undefined) return deliverRpc(endpoint, payload, signal, deliveries)
  if (rpcEndpoint === 'sessions' && deliveries !== undefined) {
    try {
      return { ok: true, value: { sessions: await sessionsOf(deliveries.agents, deliveries.stores?.() ?? {}, payload) } }
    } catch (error) {
      return rpcError('bad-request', error instanceof Error ? error.message : String(error))
    }
  }
  if (rpcEndpoint === 'cards') {
    try {
      return { ok: true, value: { loops: await loopCards(endpoint, payload, signal) } }
    } catch (error) {
      const code = error instanceof DshloopError ? error.code : 'internal'
      return rpcError(code, error instanceof Error ? error.message : String(error))
    }
  }
  if (rpcEndpoint === 'panel') {
    try {
      return { ok: true, value: await panelCall(endpoint, payload, signal, deliveries?.freshRunAt) }
    } catch (error) {
      // A refusal is an answer, not a failed call: DSH's channel takes only its own error codes, so
      // dshloop's code, sentence and field travel in the value, for the form to show on the field.
      if (error instanceof DshloopError) {
        return { ok: true, value: { refused: { code: error.code, message: error.detail, ...(error.field === undefined ? {} : { field: error.field }) } } }
      }
      return rpcError('internal', error instanceof Error ? error.message : String(error))
    }
  }
  if (rpcEndpoint !== 'status') return rpcError('not-found', `unknown endpoint ${rpcEndpoint}`)
  const sessionId = (payload as { sessionId?: unknown } | null)?.sessionId
  if (typeof sessionId !== 'string' || sessionId === '') return rpcError('bad-request', 'sessionId must be a non-empty string')
  try {
    const answer = await callTool(endpoint, 'loop_list', {}, sessionId, signal)
    const loops = (answer as { loops?: unknown }).loops
    return { ok: true, value: { loops: Array.isArray(loops) ? loops : [], panelUrl: panelUrl(endpoint.url, sessionId) } }
  } catch (error) {
    const code = error instanceof DshloopError ? error.code : 'internal'
    // A conversation dshloop's host does not know yet (a draft DSH Web shows before its first
    // message): no loop can target it, so it has none.
    if (code === 'unknown_session') return { ok: true, value: { loops: [], panelUrl: panelUrl(endpoint.url, sessionId) } }
    return rpcError(code, error instanceof Error ? error.message : String(error))
  }
}

async function deliverRpc(endpoint: Endpoint, payload: unknown, signal: AbortSignal, deliveries: Deliveries): Promise<RpcResult> {
  let logged: ReturnType<Confirmations['expect']> | undefined
  const rung = Date.now() // confirmMs counts from the ring: dshloop's call has a timeout of its own
  try {
    // The ring names a key only; the message is what dshloop offers under it (deliver.ts).
    const body = await fetchDelivery(endpoint, ringKeyOf(payload), signal)
    const request = parseDeliverRequest(body)
    const agent = deliveries.agents.get(request.sessionId)
    if (agent !== undefined && body.unattended === true) await deliveries.restrict(agent, extraToolsOf(body.extraTools))
    // Waiting from before the send: a message logged at once is not missed.
    logged = request.confirmMs > 0 ? deliveries.confirmations?.expect(request.sessionId, request.key) : undefined
    const answer = deliver(agent, request)
    if (answer.messageId !== undefined || logged === undefined || agent === undefined) return { ok: true, value: answer }
    const messageId = (await logged.within(request.confirmMs - (Date.now() - rung), signal)) ?? loggedId(agent, request)
    return { ok: true, value: messageId === undefined ? answer : { ...answer, messageId } }
  } catch (error) {
    if (error instanceof DeliverError) return rpcError(error.code, error.message)
    return rpcError('internal', error instanceof Error ? error.message : String(error))
  } finally {
    logged?.cancel()
  }
}

/** The log itself, once more, after the wait: the answer never rests on the listener alone. */
function loggedId(agent: LiveAgent, request: { readonly key: string; readonly since: number }): string | undefined {
  const found = whereIs(agent, request.key, request.since)
  return found.where === 'delivered' ? found.messageId : undefined
}

function rpcError(code: string, message: string): RpcResult {
  return { ok: false, error: { code, message, details: {} } }
}
