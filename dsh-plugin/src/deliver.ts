/**
 * Deliveries through the plugin (contract §15): dshloop's `dsh` host adapter rings `POST
 * /dshloop/deliver {key}` on DSH's loopback channel, the plugin reads that occurrence's message from
 * dshloop with its own token (`GET /api/dsh/deliveries/{key}`, offered only while dshloop's call is in
 * flight) and hands it to the session's live agent with a plugin source. DSH Web then draws it as the
 * plugin's own row (a loop card), not as something the person typed, and the source carries the
 * occurrence's key, so that a retried delivery finds the message it already made instead of making a
 * second one.
 *
 * Why the channel carries only the key: it answers any local process (DSH checks the Host and Origin
 * headers, which a local process sets as it likes, and hands the handler nothing else), an agent's
 * bash included (`curl $DSH_WEB_URL/dshloop/deliver`). A loop card must mean "dshloop delivered this",
 * so nothing said on the channel is delivered: only what dshloop itself offers, read with the token
 * that only this process's memory holds. A made-up key finds nothing; a real one, rung by someone
 * else while dshloop delivers it, delivers dshloop's own message, once (`whereIs` below).
 *
 * Exactly once, with dshloop's adapter: this handler looks for the key in the live agent's log and
 * its pending inbox right before it sends (`whereIs`: the rules the adapter reads DSH's history by
 * without the plugin), and sends only when the occurrence is in neither (the two can race only with
 * another delivery of the same occurrence, which dshloop's lease rules out). A message DSH still holds
 * in the inbox when it stops is cancelled there (its log says `canceled`), so a delivery counts only
 * once the log holds the `user/message`: the handler waits for that (confirm.ts) and answers its ID,
 * which is what dshloop records; not logged in time, it answers without one and dshloop tries again.
 */

import { DshloopError, type Endpoint, getJson } from './dshloop.ts'

export const PLUGIN_NAME = 'dshloop'

/** What dshloop asks: one occurrence's message into one loaded session. */
export interface DeliverRequest {
  readonly sessionId: string
  readonly text: string
  readonly key: string
  readonly summary: string
  readonly loop: { readonly loop_id: string; readonly run_id: string }
  /** A notice about a loop (a failure notice) rather than one of its occurrences. */
  readonly notice: boolean
  /** DSH epoch ms no message of this occurrence can predate (its scheduled time, less a margin): 0, the whole log. */
  readonly since: number
  /** How long after the ring to wait for the message to be logged before answering (ms; 0: do not wait). */
  readonly confirmMs: number
}

export interface DeliverAnswer {
  readonly status: 'sent' | 'already'
  readonly delivery: 'next_turn' | 'next_step'
  /** The `user/message`'s ID once DSH has logged it: only then is the occurrence delivered. */
  readonly messageId?: string
}

export interface LoggedEvent {
  readonly type: string
  readonly seq?: number
  readonly time?: number
  readonly data?: unknown
}

export interface LiveAgent {
  readonly id: string
  readonly status: string
  readonly session: {
    readonly header?: { readonly cwd?: unknown; readonly agentPreset?: unknown; readonly createdAt?: unknown }
    readonly events: readonly LoggedEvent[]
  }
  readonly inbox: { readonly nextTurn: readonly unknown[]; readonly nextStep: readonly unknown[] }
  send(message: unknown, target: 'next-turn' | 'next-step', wakeup: boolean): void
}

export class DeliverError extends Error {
  readonly code: string
  constructor(code: string, message: string) {
    super(message)
    this.code = code
  }
}

// DSH's CONTEXT_SUMMARY_MAX_CHARS: a longer summary is cut by DSH itself, mid-word.
export const SUMMARY_MAX = 120
// The longest a delivery waits for its message to be logged: below dshloop's call timeout.
export const CONFIRM_MAX_MS = 30_000

export function parseDeliverRequest(payload: unknown): DeliverRequest {
  const body = (payload ?? {}) as Record<string, unknown>
  const text = (name: string): string => {
    const value = body[name]
    if (typeof value !== 'string' || value === '') throw new DeliverError('bad-request', `${name} must be a non-empty string`)
    return value
  }
  const sessionId = text('sessionId'), message = text('text'), key = text('key')
  const loop = (body.loop ?? {}) as Record<string, unknown>
  if (typeof loop.loop_id !== 'string' || typeof loop.run_id !== 'string') {
    throw new DeliverError('bad-request', 'loop must be {loop_id, run_id}')
  }
  const summary = typeof body.summary === 'string' ? body.summary : ''
  const number = (value: unknown, max: number): number =>
    typeof value === 'number' && Number.isFinite(value) && value > 0 ? Math.min(value, max) : 0
  return {
    sessionId,
    text: message,
    key,
    summary: summary.length <= SUMMARY_MAX ? summary : `${summary.slice(0, SUMMARY_MAX - 1)}…`,
    loop: { loop_id: loop.loop_id, run_id: loop.run_id },
    notice: body.notice === true,
    since: number(body.since, Number.MAX_SAFE_INTEGER),
    confirmMs: number(body.confirmMs, CONFIRM_MAX_MS),
  }
}

/** The key dshloop's ring names (`{key}`); anything else in the ring is ignored. */
export function ringKeyOf(payload: unknown): string {
  const key = (payload as { key?: unknown } | null)?.key
  if (typeof key !== 'string' || key === '' || key.length > 255) throw new DeliverError('bad-request', 'key must be a delivery key')
  return key
}

/**
 * What dshloop is delivering under `key`, read from dshloop with the plugin's token: the body of a
 * DeliverRequest (parseDeliverRequest), plus what the host half reads of it (`unattended`, …).
 * DeliverError `not-offered` when dshloop is not delivering it now: nothing is sent.
 */
export async function fetchDelivery(endpoint: Endpoint, key: string, signal?: AbortSignal): Promise<Record<string, unknown>> {
  let body: unknown
  try {
    body = await getJson(endpoint, `/api/dsh/deliveries/${encodeURIComponent(key)}`, signal)
  } catch (error) {
    if (error instanceof DshloopError) {
      const code = error.code === 'not_found' ? 'not-offered' : error.code
      throw new DeliverError(code, `Nothing was delivered: ${error.message}`)
    }
    throw error
  }
  const offered = (body ?? {}) as Record<string, unknown>
  // dshloop offers a key's own message only; anything else is not delivered under it.
  if (offered.key !== key) throw new DeliverError('not-offered', `dshloop offered no message under ${key}: nothing was delivered.`)
  return offered
}

export function deliveryKeyOf(message: unknown): unknown {
  const source = (message as { source?: { deliveryKey?: unknown } } | null)?.source
  return source?.deliveryKey
}

/** A logged `user/message`'s ID (DSH's, a UUID), else its seq. */
export function messageIdOf(event: LoggedEvent): string {
  const id = (event.data as { id?: unknown } | undefined)?.id
  return typeof id === 'string' && id !== '' ? id : String(event.seq ?? '')
}

export type Where = { readonly where: 'delivered'; readonly messageId: string } | { readonly where: 'pending' | 'absent' }

/**
 * Where the occurrence's message is in the agent's session: `delivered` once a `user/message` carries
 * its key; `pending` while DSH holds it (queued in the inbox by a splice it has not cancelled since:
 * waiting for a turn or a step, or claimed by a step that has not logged it yet); else `absent`:
 * never sent, or cancelled (a prompt still queued when DSH stops). The log is read from `since` on.
 */
export function whereIs(agent: LiveAgent, key: string, since = 0): Where {
  const events = agent.session.events
  let start = events.length
  while (start > 0 && !((events[start - 1]!.time ?? since) < since)) start -= 1
  let queuedOn: unknown
  for (let index = start; index < events.length; index += 1) {
    const event = events[index]!
    if (event.type === 'user/message') {
      if (deliveryKeyOf(event.data) === key) return { where: 'delivered', messageId: messageIdOf(event) }
    } else if (event.type === 'agent/inbox/spliced') {
      const splice = (event.data ?? {}) as { target?: unknown; inserted?: unknown; outcome?: unknown }
      const inserted = Array.isArray(splice.inserted) ? splice.inserted : []
      if (inserted.some(message => deliveryKeyOf(message) === key)) queuedOn = splice.target
      else if (queuedOn !== undefined && splice.target === queuedOn && splice.outcome === 'canceled') queuedOn = undefined
    }
  }
  const inbox = [...agent.inbox.nextTurn, ...agent.inbox.nextStep]
  return queuedOn !== undefined || inbox.some(message => deliveryKeyOf(message) === key) ? { where: 'pending' } : { where: 'absent' }
}

function frozen<T>(value: T): T {
  if (value !== null && typeof value === 'object') {
    for (const part of Object.values(value)) frozen(part)
    Object.freeze(value)
  }
  return value
}

/**
 * Send the message to the loaded agent of the session, or say it is there already (with its ID once
 * logged). A running agent takes it at its next step (spec §6), an idle one opens a turn for it. The
 * message's ID is DSH's kind (a fresh UUID): DSH accepts a chosen ID twice and DSH Web then drops the
 * second turn.
 */
export function deliver(agent: LiveAgent | undefined, request: DeliverRequest): DeliverAnswer {
  if (agent === undefined) {
    throw new DeliverError(
      'session-not-loaded',
      `Session ${request.sessionId} is not loaded in DSH (dshloop loads a cold session before it delivers): try again.`,
    )
  }
  const delivery = agent.status === 'running' ? 'next_step' : 'next_turn'
  const found = whereIs(agent, request.key, request.since)
  if (found.where === 'delivered') return { status: 'already', delivery, messageId: found.messageId }
  if (found.where === 'pending') return { status: 'already', delivery }
  const message = frozen({
    id: crypto.randomUUID(),
    role: 'user',
    content: [{ type: 'text', text: request.text }],
    source: {
      kind: 'plugin',
      plugin: PLUGIN_NAME,
      form: 'notice',
      summary: request.summary,
      deliveryKey: request.key,
      loop: { loop_id: request.loop.loop_id, run_id: request.loop.run_id },
      ...(request.notice ? { notice: true } : {}),
    },
  })
  agent.send(message, delivery === 'next_step' ? 'next-step' : 'next-turn', true)
  return { status: 'sent', delivery }
}
