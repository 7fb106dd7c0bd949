/**
 * What the Loops panel draws of each loop: its row (state, schedule, target, next and last run, its
 * actions), its runs and trail once opened, a deleted loop's remains, and a conversation's runs
 * delivered here. Each run's words are its card's (card.ts).
 */

import { createElement as h, type ReactElement } from 'react'
import {
  ACTION_LABELS,
  actionsOf,
  ago,
  endsWords,
  isFailing,
  lastRunWords,
  nextWords,
  type PanelLoop,
  preview,
  stateWords,
  targetWords,
} from '../loops-view.ts'
import { runWords } from './card.ts'
import { Badge, Button } from './ui.ts'

export interface RunRow {
  readonly run_id: string
  readonly loop_id: string
  readonly status: string
  readonly scheduled_at: number
  readonly outcome?: string
  readonly error?: string
  readonly manual?: boolean
  readonly target_session_id?: string
  /** `delivered` only (GET /api/runs): the run's loop was deleted since (its runs stay), and its name. */
  readonly loop_deleted?: boolean
  readonly loop_name?: string
}

export interface EventRow {
  readonly at: number
  readonly kind: string
  readonly actor: { readonly kind: string; readonly id?: string }
}

/** An opened loop's runs (newest first) and trail. */
export interface LoopHistory {
  readonly runs: readonly RunRow[]
  readonly events: readonly EventRow[]
}

/** Shows a session's chat, at one run's card when given. */
export type ShowSession = (sessionId: string, runId?: string) => void

export interface RowProps {
  readonly loop: PanelLoop
  readonly titles: Readonly<Record<string, string>>
  readonly now: number
  readonly open: boolean
  readonly confirming: boolean
  readonly notice: string
  readonly history: LoopHistory | undefined
  /** The newest run the panel holds of this loop, if any. */
  readonly latest?: RunRow | undefined
  readonly showSession: ShowSession | undefined
  readonly onToggle: () => void
  readonly onAction: (action: string) => void
}

export function LoopRow({ loop, titles, now, open, confirming, notice, history, latest, showSession, onToggle, onAction }: RowProps): ReactElement {
  const state = stateWords(loop)
  const failing = isFailing(loop)
  const marked = state === 'failed' || state === 'awaiting approval' || state === 'paused'
  const next = nextWords(loop, now)
  // Its words only when it is the run the loop last recorded (a run at or before last_run_at).
  const current = latest !== undefined && loop.last_run_at !== undefined && latest.scheduled_at <= loop.last_run_at ? latest : undefined
  const last = lastRunWords(loop, now, runWords(current)?.text)
  const ends = endsWords(loop, now)
  return h('div', {
    'data-dshloop-loop': loop.loop_id,
    'data-dshloop-state': state,
    ...(failing ? { 'data-dshloop-mark': 'failed' } : {}),
    className: failing ? 'dshloop-card dshloop-card--failing' : 'dshloop-card',
  },
  h('div', { className: 'dshloop-row' },
    h('button', { type: 'button', onClick: onToggle, className: 'dshloop-name', 'aria-expanded': open, title: loop.prompt },
      loop.name ? `${loop.name} — ${preview(loop.prompt, 80)}` : preview(loop.prompt)),
    Badge(state === 'failed' ? 'error' : marked ? 'warning' : state === 'running' ? 'ongoing' : undefined, { 'data-dshloop-field': 'state' }, state)),
  h('div', { className: 'dshloop-row dshloop-meta' },
    h('span', { 'data-dshloop-field': 'schedule' }, loop.schedule_text ?? loop.schedule.kind),
    h('span', { className: 'dshloop-muted' }, '→'),
    h('span', { 'data-dshloop-field': 'target' }, targetWords(loop.session_id, titles)),
    next !== undefined ? h('span', { 'data-dshloop-field': 'next' }, next) : null,
    last !== undefined ? h('span', { 'data-dshloop-field': 'last-run' }, last) : h('span', { className: 'dshloop-muted' }, 'not run yet'),
    ends !== undefined ? h('span', { 'data-dshloop-field': 'ends' }, ends) : null),
  loop.last_error ? h('div', { 'data-dshloop-field': 'last-error', className: 'dshloop-error' }, `last error: ${loop.last_error}`) : null,
  h('div', { className: 'dshloop-actions' },
    ...actionsOf(loop).map(action => Button(action === 'delete' && confirming ? 'primary' : 'outline', {
      key: action,
      'data-dshloop-action': action,
      ...(action === 'delete' ? { className: 'dshloop-danger' } : {}),
      onClick: () => onAction(action),
    }, action === 'delete' && confirming ? 'Confirm delete' : ACTION_LABELS[action] ?? action)),
    Button('ghost', { 'data-dshloop-action': 'runs', onClick: onToggle, 'aria-expanded': open }, open ? 'Hide runs' : 'Runs')),
  notice ? h('div', { 'data-dshloop-notice': 'true', className: 'dshloop-error' }, notice) : null,
  open ? h(History, { history, now, showSession }) : null)
}

function History({ history, now, showSession }: { history: LoopHistory | undefined; now: number; showSession: ShowSession | undefined }): ReactElement {
  if (history === undefined) return h('div', { className: 'dshloop-muted' }, 'Loading runs…')
  return h('div', { style: { marginTop: '8px' } },
    h('div', { className: 'dshloop-section' }, history.runs.length === 0 ? 'No runs yet.' : 'Runs, newest first'),
    ...history.runs.map(run => {
      const words = runWords(run)
      return h('div', { key: run.run_id, 'data-dshloop-run': run.run_id, className: 'dshloop-run' },
        h('span', null, ago(run.scheduled_at, now)),
        run.manual ? h('span', { className: 'dshloop-muted' }, 'run now') : null,
        h('span', { className: words?.failed ? 'dshloop-error' : undefined }, words?.text ?? run.status),
        run.target_session_id && showSession
          ? Button('outline', {
            'data-dshloop-open-session': run.target_session_id,
            onClick: () => showSession(run.target_session_id as string, run.run_id),
          }, 'Open session')
          : null)
    }),
    history.events.length > 0 ? h('div', { className: 'dshloop-section' }, 'Trail') : null,
    ...history.events.map((event, index) => h('div', { key: `${event.at}-${index}`, 'data-dshloop-event': event.kind, className: 'dshloop-meta' },
      `${ago(event.at, now)} · ${event.kind} · ${event.actor.kind}${event.actor.id ? ` ${event.actor.id}` : ''}`)))
}


/** A deleted loop opened from one of its cards: what is left of it, its runs and its trail (spec §4). */
export function DeletedLoop({ history, name, now, showSession }: {
  history: LoopHistory & { readonly loopId: string }
  name: string | undefined
  now: number
  showSession: ShowSession | undefined
}): ReactElement {
  const deleted = history.events[0]
  return h('div', { 'data-dshloop-loop-deleted': history.loopId, className: 'dshloop-card' },
    h('div', { className: 'dshloop-row' },
      h('strong', null, name ?? history.loopId),
      Badge('error', { 'data-dshloop-field': 'state' }, 'deleted')),
    h('div', { className: 'dshloop-meta' },
      `Deleted${deleted ? ` ${ago(deleted.at, now)}` : ''}: it no longer runs; its runs and trail stay.`),
    h(History, { history, now, showSession }))
}

/**
 * The runs delivered into this conversation, newest first, each with the loop it came from; a click
 * shows the run in the chat (its card).
 */
export function Delivered({ sessionId, runs, loops, now, showSession }: {
  sessionId: string
  runs: readonly RunRow[]
  loops: readonly PanelLoop[]
  now: number
  showSession: ShowSession | undefined
}): ReactElement {
  const prompts = new Map(loops.map(loop => [loop.loop_id, loop.name ?? preview(loop.prompt, 60)]))
  return h('div', { 'data-dshloop-delivered': sessionId },
    h('div', { className: 'dshloop-section' }, 'Runs delivered here'),
    runs.length === 0 ? h('div', { className: 'dshloop-meta' }, 'none yet') : null,
    ...runs.map(run => {
      const words = runWords(run)
      const parts = [
        h('span', { key: 'at' }, ago(run.scheduled_at, now)),
        h('span', { key: 'loop', className: 'dshloop-muted' }, prompts.get(run.loop_id) ?? run.loop_name ?? run.loop_id),
        run.loop_deleted ? h('span', { key: 'deleted', 'data-dshloop-loop-deleted': run.loop_id, className: 'dshloop-muted' }, 'loop deleted') : null,
        run.manual ? h('span', { key: 'manual', className: 'dshloop-muted' }, 'run now') : null,
        h('span', { key: 'words', className: words?.failed ? 'dshloop-error' : undefined }, words?.text ?? run.status),
      ]
      if (showSession === undefined) return h('div', { key: run.run_id, 'data-dshloop-run': run.run_id, className: 'dshloop-run' }, ...parts)
      return h('button', {
        key: run.run_id,
        type: 'button',
        'data-dshloop-run': run.run_id,
        className: 'dshloop-run',
        title: 'Show this run in the chat',
        onClick: () => showSession(sessionId, run.run_id),
      }, ...parts)
    }))
}
