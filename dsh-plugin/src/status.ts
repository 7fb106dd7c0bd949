/**
 * The composer status (spec §8.1, contract §13) as plain data: what `loop_list {}` answered for one
 * session, turned into the words the composer shows. No DOM, no React: the node test runner checks
 * it, and the web half only renders its result.
 */

export interface LoopSummary {
  readonly loop_id: string
  readonly state: string
  readonly next_at?: number
  readonly last_result?: string
}

export interface StatusSummary {
  /** Loops `loop_list {}` gives the session: active ones targeting it. */
  readonly count: number
  /** The nearest next run (epoch ms), when any loop has one. */
  readonly nextAt?: number
  readonly overdue: number
  /** contract §15: loops whose latest finished run failed (its delivery, or its turn). */
  readonly failed: number
  /** Paused loops: they will not fire until resumed (five failures in a row pause one). */
  readonly paused: number
}

export function summarize(loops: readonly LoopSummary[]): StatusSummary {
  let nextAt: number | undefined
  let overdue = 0
  let failed = 0
  let paused = 0
  for (const loop of loops) {
    if (typeof loop.next_at === 'number' && (nextAt === undefined || loop.next_at < nextAt)) nextAt = loop.next_at
    if (loop.state === 'overdue') overdue += 1
    // A loop whose last run failed is marked even while it waits for its next one.
    if (loop.state === 'failed' || loop.last_result === 'failed') failed += 1
    // LoopView carries no pause_reason: every paused loop is marked, an auto-paused one among them.
    if (loop.state === 'paused') paused += 1
  }
  return { count: loops.length, ...(nextAt === undefined ? {} : { nextAt }), overdue, failed, paused }
}

/** `no loops`, `1 loop`, `3 loops`: the contract's first words of the status. */
export function countText(count: number): string {
  if (count === 0) return 'no loops'
  return count === 1 ? '1 loop' : `${count} loops`
}

/** A countdown to `at` from `now`: `in 8m 05s`, `in 42s`, `due now`; past it, `late 1m 10s`. */
export function countdown(at: number, now: number): string {
  const seconds = Math.round((at - now) / 1000)
  if (seconds === 0) return 'due now'
  const text = duration(Math.abs(seconds))
  return seconds > 0 ? `in ${text}` : `late ${text}`
}

export function duration(seconds: number): string {
  const days = Math.floor(seconds / 86_400)
  const hours = Math.floor((seconds % 86_400) / 3_600)
  const minutes = Math.floor((seconds % 3_600) / 60)
  const secs = seconds % 60
  if (days > 0) return `${days}d ${hours}h`
  if (hours > 0) return `${hours}h ${pad(minutes)}m`
  if (minutes > 0) return `${minutes}m ${pad(secs)}s`
  return `${secs}s`
}

/** The whole line: `1 loop · next in 8m 05s · 1 overdue · 1 failed · 1 paused`. */
export function statusText(summary: StatusSummary, now: number): string {
  const parts = [countText(summary.count)]
  if (summary.nextAt !== undefined) parts.push(`next ${countdown(summary.nextAt, now)}`)
  if (summary.overdue > 0) parts.push(`${summary.overdue} overdue`)
  if (summary.failed > 0) parts.push(`${summary.failed} failed`)
  if (summary.paused > 0) parts.push(`${summary.paused} paused`)
  return parts.join(' · ')
}

/** The session's view in dshloop's panel (docs/panel.md). */
export function panelUrl(dshloopUrl: string, sessionId: string): string {
  return `${dshloopUrl.replace(/\/+$/, '')}/panel/?session=${encodeURIComponent(sessionId)}`
}

function pad(value: number): string {
  return String(value).padStart(2, '0')
}
