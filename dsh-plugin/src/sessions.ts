/**
 * The channel's `sessions {ids}`: for each session, whether DSH has its agent loaded, and if so what
 * dshloop's adapter would otherwise read from three calls (the tail of `session.history`,
 * `subagent.list`, `session.export`): running or idle, its projections (title, blank), cwd and preset.
 * Read from DSH's memory (`ctx.agents`, `sessionProjections`), in one call for a whole delivery batch,
 * whatever the profile's size: rc.8's `subagent.list` reads every persisted session's header.
 * A session not loaded is `{attached: false}`: it may be cold or may not exist, which only DSH's
 * own calls tell (dshloop asks them for those).
 */

import type { LiveAgent } from './deliver.ts'

export type SessionAgent = Pick<LiveAgent, 'status' | 'session'>

/** DSH's `sessionProjections` service: the values `session.history`'s tail page carries. */
export interface Projections {
  snapshot(session: unknown): unknown
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

export function sessionsOf(
  agents: { get(id: string): SessionAgent | undefined },
  projections: Projections | undefined,
  payload: unknown,
): Record<string, unknown>[] {
  return idsOf(payload).map(sessionId => {
    const agent = agents.get(sessionId)
    if (agent === undefined) return { sessionId, attached: false }
    const header = agent.session.header ?? {}
    let snapshot: unknown
    try {
      snapshot = projections?.snapshot(agent.session)
    } catch {
      snapshot = undefined // fail-soft, as DSH's own listing is: no title rather than no answer
    }
    return {
      sessionId,
      attached: true,
      running: agent.status === 'running',
      cwd: typeof header.cwd === 'string' ? header.cwd : undefined,
      agentPreset: presetOf(agent),
      createdAt: typeof header.createdAt === 'number' ? header.createdAt : undefined,
      projections: snapshot,
    }
  })
}
