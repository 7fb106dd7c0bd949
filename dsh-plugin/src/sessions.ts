/**
 * The channel's `sessions {ids}`: for each session, whether DSH has its agent loaded, and if so what
 * dshloop's adapter would otherwise read from three calls (the tail of `session.history`,
 * `subagent.list`, `session.export`): running or idle, its projections (title, blank), cwd and preset.
 * Read from DSH's memory (`ctx.agents`, `sessionProjections`), in one call for a whole delivery batch,
 * whatever the profile's size: rc.8's `subagent.list` reads every persisted session's header.
 * A session not loaded is read from its own stored log (`sessionPersistence.inspect`, which neither
 * resumes nor publishes it) with its cached projections (`sessionProjectionCache`, what `session.list`
 * shows of a cold session): `{attached: false, found: true, …}`, or `found: false` when DSH has no
 * such session. rc.8's own `session.history` and `session.export` of a cold session first list every
 * persisted session's header (dsh-api-remotes `inspectApiRemoteSession`). Without those services, or
 * when the read fails, it is `{attached: false}` and dshloop asks DSH's own calls.
 */

import type { LiveAgent, LoggedEvent } from './deliver.ts'

export type SessionAgent = Pick<LiveAgent, 'status' | 'session'>

/** DSH's `sessionProjections` service: the values `session.history`'s tail page carries. */
export interface Projections {
  snapshot(session: unknown): unknown
}

/** What the `sessions` endpoint reads of DSH besides its agents, each when DSH provides it. */
export interface SessionStores {
  readonly projections?: Projections | undefined
  /** `sessionPersistence`: one stored session, read without resuming it. */
  readonly persistence?: { inspect(id: string): Promise<{ readonly meta?: unknown; readonly events?: readonly LoggedEvent[] }> } | undefined
  /** `sessionProjectionCache`: a cold session's projections as `session.list` shows them. */
  readonly projectionCache?: { cachedSnapshot(meta: unknown): unknown } | undefined
}

// A delivery batch is at most a few dozen sessions; a longer list is refused, not truncated.
export const SESSIONS_MAX = 200

export function idsOf(payload: unknown): string[] {
  const ids = (payload as { ids?: unknown } | null)?.ids
  if (!Array.isArray(ids) || ids.length > SESSIONS_MAX || !ids.every(id => typeof id === 'string' && id !== '')) {
    throw new Error(`ids must be a list of at most ${SESSIONS_MAX} session IDs`)
  }
  return [...new Set(ids as string[])]
}

/** The preset the session's turns run under: DSH's own rule (resolveSessionPreset), the last
 * `agent-preset/selected` event, else the header's. */
export function presetOf(agent: SessionAgent): unknown {
  const events = agent.session.events
  for (let index = events.length - 1; index >= 0; index -= 1) {
    const event = events[index]!
    if (event.type === 'agent-preset/selected') {
      const chosen = (event.data as { agentPreset?: unknown } | undefined)?.agentPreset
      if (chosen !== undefined) return chosen
    }
  }
  return agent.session.header?.agentPreset
}

type Header = { readonly cwd?: unknown; readonly agentPreset?: unknown; readonly createdAt?: unknown }

function described(header: Header, events: readonly LoggedEvent[], projections: unknown): Record<string, unknown> {
  return {
    cwd: typeof header.cwd === 'string' ? header.cwd : undefined,
    agentPreset: presetOf({ status: 'idle', session: { header, events } }),
    createdAt: typeof header.createdAt === 'number' ? header.createdAt : undefined,
    projections,
  }
}

function fromMemory<T>(read: () => T): T | undefined {
  try {
    return read()
  } catch {
    return undefined // fail-soft, as DSH's own listing is: no title rather than no answer
  }
}

/** A session DSH has not loaded, from its own stored log (module comment). */
async function stored(sessionId: string, stores: SessionStores): Promise<Record<string, unknown>> {
  if (stores.persistence === undefined) return { sessionId, attached: false }
  let inspected: { readonly meta?: unknown; readonly events?: readonly LoggedEvent[] }
  try {
    inspected = await stores.persistence.inspect(sessionId)
  } catch (error) {
    const missing = error instanceof Error && error.message === `session "${sessionId}" not found`
    return missing ? { sessionId, attached: false, found: false } : { sessionId, attached: false }
  }
  const header = (inspected.meta ?? {}) as Header
  // DSH serves only a session with a cwd (a project-backed one): the others are not found there either.
  if (typeof header.cwd !== 'string') return { sessionId, attached: false, found: false }
  const projections = fromMemory(() => stores.projectionCache?.cachedSnapshot(inspected.meta))
  return { sessionId, attached: false, found: true, ...described(header, inspected.events ?? [], projections) }
}

export async function sessionsOf(
  agents: { get(id: string): SessionAgent | undefined },
  stores: SessionStores,
  payload: unknown,
): Promise<Record<string, unknown>[]> {
  return Promise.all(idsOf(payload).map(async sessionId => {
    const agent = agents.get(sessionId)
    if (agent === undefined) return stored(sessionId, stores)
    const projections = fromMemory(() => stores.projections?.snapshot(agent.session))
    const live = { sessionId, attached: true, running: agent.status === 'running' }
    return { ...live, ...described(agent.session.header ?? {}, agent.session.events, projections) }
  }))
}
