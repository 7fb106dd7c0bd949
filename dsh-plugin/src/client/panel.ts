/**
 * The Loops panel inside DSH Web (contract §15): every loop (the global panel, a shell overlay the
 * sidebar's "Loops" action opens) or one conversation's (its "Loops" tab), with the actions of
 * dshloop's own panel, in its words. Data comes from the host half over the loopback channel
 * (`panel {op, …}`, ../panel.ts); the page holds no token.
 *
 * Refresh: one `list` every REFRESH_MS while the page is visible (and a loop's runs and trail while
 * it is open); between answers the countdowns tick locally. A fault in here draws an error in the
 * panel (PanelBoundary), never a blank DSH Web.
 */

import { createElement as h, type ReactElement, useEffect, useRef, useState } from 'react'
import {
  ACTION_LABELS,
  actionsOf,
  ago,
  emptyForm,
  FORM_FIELDS,
  FormError,
  endsWords,
  formFieldOf,
  type FormMode,
  formOf,
  isFailing,
  keepOrder,
  lastRunWords,
  type LoopForm,
  nextWords,
  opOf,
  type PanelLoop,
  preview,
  stateWords,
  targetWords,
  toChanges,
  toInput,
} from '../loops-view.ts'
import { runWords } from './card.ts'
import { errorText, fault, RpcError } from './runtime.ts'
import { Badge, Boundary, Button, usePoll } from './ui.ts'

export const PANEL_REFRESH_MS = 3_000
const TICK_MS = 1_000
const TYPING_MS = 300

/** A refusal from the host half (runtime.ts): dshloop's code, its sentence, and the input field it names. */
export const PanelError = RpcError

export type PanelRpc = (payload: { readonly op: string; readonly [key: string]: unknown }) => Promise<unknown>

export interface PanelDeps {
  readonly rpc: PanelRpc
  /**
   * Shows a DSH session's chat (ctx.sessions.open, then its Chat view), at one run's card when it is
   * there; undefined when DSH Web offers no way to open a session.
   */
  readonly showSession: ((sessionId: string, runId?: string) => void) | undefined
  /** A session's title as DSH Web lists it: dshloop knows the titles of sessions it delivered to only. */
  readonly titleOf: (sessionId: string) => string | undefined
}

interface ListAnswer {
  readonly loops: readonly PanelLoop[]
  readonly more: boolean
  readonly titles: Readonly<Record<string, string>>
  /** Whether the rows are drawn in another order than dshloop's (by next run): they kept their places. */
  readonly unsorted?: boolean
}

interface RunRow {
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

interface EventRow {
  readonly at: number
  readonly kind: string
  readonly actor: { readonly kind: string; readonly id?: string }
}

interface SessionRow {
  readonly session_id: string
  readonly title?: string
}

interface Filters {
  readonly state: string
  readonly target: string
  readonly session: string
  readonly q: string
}

const NO_FILTERS: Filters = { state: '', target: '', session: '', q: '' }

/** A loop the panel opens on: its ID, and its state if known (a completed loop is history, listed apart). */
export interface PanelFocus {
  readonly loopId: string
  readonly state?: string | undefined
}

function focusFilters(focus: PanelFocus): Filters {
  return { ...NO_FILTERS, q: focus.loopId, ...(focus.state === 'completed' ? { state: 'completed' } : {}) }
}

const STATE_OPTIONS: readonly (readonly [string, string])[] = [
  ['', 'Any state'],
  ['scheduled', 'Scheduled'],
  ['running', 'Running'],
  ['overdue', 'Overdue'],
  ['paused', 'Paused'],
  ['failed', 'Failed'],
  ['last_failed', 'Last run failed'],
  ['completed', 'Completed (history)'],
]
const TARGET_OPTIONS: readonly (readonly [string, string])[] = [
  ['', 'Any target'],
  ['self', 'self (global interface)'],
  ['new', 'new (fresh session)'],
  ['session', 'An existing session'],
]

interface PanelProps {
  /** "global", or the session whose tab this is. */
  readonly scope: string
  readonly deps: PanelDeps
  /** A loop to show on opening (a card's "Open loop"): the filters select it, its runs open. */
  readonly focus?: PanelFocus | undefined
  readonly onClose?: () => void
}

/** The panel, guarded: an error while drawing it draws a message in its place. */
export function LoopsPanel(props: PanelProps): ReactElement {
  return h(Boundary, {
    label: 'the Loops panel',
    fallback: (error: string) => h('div', { 'data-dshloop-panel': props.scope, 'data-dshloop-error': 'panel', className: 'dshloop-panel dshloop-error' },
      `The Loops panel failed: ${error}. DSH works as before; dshloop's own panel shows the same loops.`),
  }, h(PanelBody, props as never))
}

function PanelBody({ scope, deps, onClose, focus }: PanelProps): ReactElement {
  if (fault() === 'panel') throw new Error('dshloop: a fault forced into the Loops panel (DSHLOOP_FAULT)')
  const current = scope === 'global' ? undefined : scope
  const [filters, setFilters] = useState<Filters>(focus === undefined ? NO_FILTERS : focusFilters(focus))
  const [list, setList] = useState<ListAnswer | undefined>(undefined)
  const [listError, setListError] = useState<string | undefined>(undefined)
  const [version, setVersion] = useState(0)
  const [now, setNow] = useState(() => Date.now())
  const [openId, setOpenId] = useState<string | undefined>(focus?.loopId)
  const [history, setHistory] = useState<{ loopId: string; runs: readonly RunRow[]; events: readonly EventRow[] } | undefined>(undefined)
  const [form, setForm] = useState<{ mode: FormMode; loop?: PanelLoop; values: LoopForm; errors: Record<string, string>; general?: string; busy: boolean } | undefined>(undefined)
  const [delivered, setDelivered] = useState<readonly RunRow[] | undefined>(undefined)
  const [sessions, setSessions] = useState<readonly SessionRow[] | undefined>(undefined)
  const [notices, setNotices] = useState<Record<string, string>>({})
  const [confirming, setConfirming] = useState<string | undefined>(undefined)
  const refresh = (): void => setVersion(value => value + 1)
  // The text filter asks once typing pauses, not once per key.
  const [q, setQ] = useState(focus?.loopId ?? '')
  useEffect(() => {
    const timer = setTimeout(() => setQ(filters.q.trim()), TYPING_MS)
    return () => clearTimeout(timer)
  }, [filters.q])

  // The order the rows are drawn in (loop IDs): kept while the person looks, so that a refresh never
  // moves a row from under the pointer; forgotten on a deliberate change (filters, a save, Sort).
  const shown = useRef<string[] | undefined>(undefined)
  const resort = (): void => {
    shown.current = undefined
    refresh()
  }
  usePoll(async () => {
    const asked = { ...filters, q, ...(current === undefined ? {} : { session: current }) }
    const answer = await deps.rpc({ op: 'list', ...asked }) as ListAnswer
    const loops = keepOrder(shown.current, answer.loops)
    shown.current = loops.map(loop => loop.loop_id)
    const unsorted = loops.some((loop, index) => answer.loops[index]?.loop_id !== loop.loop_id)
    setList({ ...answer, loops, unsorted })
    setListError(undefined)
    if (current !== undefined) setDelivered((await deps.rpc({ op: 'delivered', sessionId: current }) as { runs: RunRow[] }).runs)
    if (openId !== undefined) {
      const more = await deps.rpc({ op: 'loop', loopId: openId }) as { runs: RunRow[]; events: EventRow[] }
      setHistory({ loopId: openId, runs: more.runs, events: more.events })
    }
  }, PANEL_REFRESH_MS, () => undefined, error => setListError(errorText(error)), [deps, current, openId, version])
  // A deliberate change of what is listed: dshloop's order again.
  useEffect(() => resort(), [filters.state, filters.target, filters.session, q])

  useEffect(() => {
    const ticker = setInterval(() => setNow(Date.now()), TICK_MS)
    return () => clearInterval(ticker)
  }, [])

  const needSessions = form !== undefined || current === undefined
  useEffect(() => {
    if (!needSessions || sessions !== undefined) return
    deps.rpc({ op: 'sessions' })
      .then(answer => setSessions((answer as { sessions?: SessionRow[] }).sessions ?? []))
      .catch(() => setSessions([]))
  }, [deps, needSessions, sessions])

  const act = async (loop: PanelLoop, action: string): Promise<void> => {
    if (action === 'edit') {
      setForm({ mode: 'edit', loop, values: formOf(loop, current), errors: {}, busy: false })
      return
    }
    if (action === 'delete' && confirming !== loop.loop_id) {
      setConfirming(loop.loop_id)
      return
    }
    setConfirming(undefined)
    try {
      await deps.rpc({ op: opOf(loop, action), loopId: loop.loop_id })
      setNotices(previous => ({ ...previous, [loop.loop_id]: '' }))
    } catch (error) {
      setNotices(previous => ({ ...previous, [loop.loop_id]: errorText(error) }))
    }
    refresh()
  }

  const submit = async (): Promise<void> => {
    if (form === undefined) return
    setForm({ ...form, busy: true, errors: {} })
    try {
      if (form.mode === 'create') await deps.rpc({ op: 'create', input: toInput(form.values, current) })
      else if (form.loop !== undefined) {
        await deps.rpc({ op: 'edit', loopId: form.loop.loop_id, changes: toChanges(form.values, form.loop, current) })
      }
      setForm(undefined)
      resort() // the person's own change: the list in dshloop's order, their loop where it belongs
    } catch (error) {
      const message = errorText(error)
      const field = error instanceof FormError ? error.field : formFieldOf(error instanceof RpcError ? error.field : undefined, form.values)
      setForm({ ...form, busy: false, errors: field === undefined ? {} : { [field]: message }, ...(field === undefined ? { general: message } : {}) })
    }
  }

  // A loop opened (a card's "Open loop") that was deleted since: no row, but its runs and trail stay.
  const deletedOpen = openId !== undefined && history?.loopId === openId && history.events[0]?.kind === 'deleted' &&
    list !== undefined && !list.loops.some(loop => loop.loop_id === openId)
  const titles: Record<string, string> = {}
  for (const loop of list?.loops ?? []) {
    const title = list?.titles[loop.session_id] ?? deps.titleOf(loop.session_id)
    if (title) titles[loop.session_id] = title
  }
  // The newest run the panel holds of each loop (a tab's runs delivered here, an open loop's runs):
  // how its turn went, for the row's last run.
  const newest = new Map<string, RunRow>()
  for (const run of [...(delivered ?? []), ...(history?.runs ?? [])]) {
    const known = newest.get(run.loop_id)
    if (known === undefined || run.scheduled_at > known.scheduled_at) newest.set(run.loop_id, run)
  }
  // Showing a session takes the person there: the overlay that covered it closes.
  const showSession = deps.showSession === undefined ? undefined : (sessionId: string, runId?: string) => {
    onClose?.()
    deps.showSession?.(sessionId, runId)
  }
  return h('div', { 'data-dshloop-panel': scope, className: 'dshloop-panel' },
    h('div', { className: 'dshloop-header' },
      h('span', { className: 'dshloop-title' }, current === undefined ? 'Loops' : 'Loops of this conversation'),
      // Always in its place, shown only when the rows' order is no longer dshloop's: appearing must
      // not push the rows down either.
      Button('ghost', {
        'data-dshloop-action': 'sort',
        ...(list?.unsorted ? { 'data-dshloop-unsorted': 'true' } : { 'aria-hidden': 'true', tabIndex: -1, disabled: true }),
        title: 'Rows keep their places while you look; dshloop lists loops by next run.',
        style: { visibility: list?.unsorted ? 'visible' : 'hidden' },
        onClick: resort,
      }, 'Sort by next run'),
      Button('primary', {
        'data-dshloop-action': 'new',
        onClick: () => setForm({ mode: 'create', values: emptyForm(current), errors: {}, busy: false }),
      }, 'New loop'),
      onClose ? Button('outline', { 'aria-label': 'Close', 'data-dshloop-action': 'close', onClick: onClose }, 'Close') : null),
    h(FilterBar, { filters, setFilters, global: current === undefined, sessions: sessions ?? [] }),
    form ? h(LoopFormView, {
      form,
      sessions: sessions ?? [],
      current,
      // From the latest state, not this render's: two quick keystrokes must both land.
      onField: (key: keyof LoopForm, value: string) => setForm(previous => previous === undefined ? previous : { ...previous, values: { ...previous.values, [key]: value } }),
      onCancel: () => setForm(undefined),
      onSubmit: () => void submit(),
    }) : null,
    listError ? h('div', { 'data-dshloop-error': 'list', className: 'dshloop-error' }, `Could not refresh: ${listError}`) : null,
    list === undefined
      ? h('div', { className: 'dshloop-muted' }, listError ? '' : 'Loading…')
      : list.loops.length === 0
        ? deletedOpen ? null : h('div', { 'data-dshloop-empty': 'true', className: 'dshloop-muted', style: { padding: '12px 0' } }, 'no loops')
        : h('div', null, ...list.loops.map(loop => h(LoopRow, {
          key: loop.loop_id,
          loop,
          titles,
          now,
          open: openId === loop.loop_id,
          confirming: confirming === loop.loop_id,
          notice: notices[loop.loop_id] ?? '',
          history: history?.loopId === loop.loop_id ? history : undefined,
          latest: newest.get(loop.loop_id),
          showSession,
          onToggle: () => setOpenId(openId === loop.loop_id ? undefined : loop.loop_id),
          onAction: (action: string) => void act(loop, action),
        }))),
    deletedOpen && history !== undefined
      ? h(DeletedLoop, { history, name: delivered?.find(run => run.loop_id === history.loopId)?.loop_name, now, showSession })
      : null,
    list?.more ? h('div', { className: 'dshloop-muted' }, `Showing the first ${list.loops.length}; narrow the filters to see the rest.`) : null,
    current !== undefined && delivered !== undefined
      ? h(Delivered, { sessionId: current, runs: delivered, loops: list?.loops ?? [], now, showSession })
      : null)
}

/** A deleted loop opened from one of its cards: what is left of it, its runs and its trail (spec §4). */
function DeletedLoop({ history, name, now, showSession }: {
  history: { readonly loopId: string; readonly runs: readonly RunRow[]; readonly events: readonly EventRow[] }
  name: string | undefined
  now: number
  showSession: RowProps['showSession']
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
function Delivered({ sessionId, runs, loops, now, showSession }: {
  sessionId: string
  runs: readonly RunRow[]
  loops: readonly PanelLoop[]
  now: number
  showSession: RowProps['showSession']
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

interface FilterBarProps {
  readonly filters: Filters
  readonly setFilters: (update: (previous: Filters) => Filters) => void
  readonly global: boolean
  readonly sessions: readonly SessionRow[]
}

function FilterBar({ filters, setFilters, global, sessions }: FilterBarProps): ReactElement {
  const set = (key: keyof Filters) => (event: { target: { value: string } }) => {
    const value = event.target.value
    setFilters(previous => ({ ...previous, [key]: value }))
  }
  return h('div', { className: 'dshloop-filters' },
    select('dshloop-filter-state', filters.state, STATE_OPTIONS, set('state'), 'State'),
    global ? select('dshloop-filter-target', filters.target, TARGET_OPTIONS, set('target'), 'Target') : null,
    global ? select('dshloop-filter-session', filters.session, [['', 'Any session'], ...sessions.map(sessionOption)], set('session'), 'Session') : null,
    h('input', {
      type: 'search',
      name: 'dshloop-filter-q',
      'aria-label': 'Prompt text or loop ID',
      placeholder: 'Prompt text or loop ID',
      value: filters.q,
      onChange: set('q'),
      className: 'dshloop-input',
    }))
}

function sessionOption(session: SessionRow): readonly [string, string] {
  return [session.session_id, session.title ? `${session.title} (${session.session_id})` : session.session_id]
}

function select(name: string, value: string, options: readonly (readonly [string, string])[], onChange: (event: { target: { value: string } }) => void, label?: string): ReactElement {
  return h('select', { name, value, onChange, className: 'dshloop-input', ...(label ? { 'aria-label': label } : {}) },
    ...options.map(([key, text]) => h('option', { key, value: key }, text)))
}

interface RowProps {
  readonly loop: PanelLoop
  readonly titles: Readonly<Record<string, string>>
  readonly now: number
  readonly open: boolean
  readonly confirming: boolean
  readonly notice: string
  readonly history: { readonly runs: readonly RunRow[]; readonly events: readonly EventRow[] } | undefined
  /** The newest run the panel holds of this loop, if any. */
  readonly latest?: RunRow | undefined
  readonly showSession: ((sessionId: string, runId?: string) => void) | undefined
  readonly onToggle: () => void
  readonly onAction: (action: string) => void
}

function LoopRow({ loop, titles, now, open, confirming, notice, history, latest, showSession, onToggle, onAction }: RowProps): ReactElement {
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

function History({ history, now, showSession }: { history: RowProps['history']; now: number; showSession: RowProps['showSession'] }): ReactElement {
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

interface FormProps {
  readonly form: { readonly mode: FormMode; readonly loop?: PanelLoop; readonly values: LoopForm; readonly errors: Record<string, string>; readonly general?: string; readonly busy: boolean }
  readonly sessions: readonly SessionRow[]
  readonly current: string | undefined
  readonly onField: (key: keyof LoopForm, value: string) => void
  readonly onCancel: () => void
  readonly onSubmit: () => void
}

function LoopFormView({ form, sessions, current, onField, onCancel, onSubmit }: FormProps): ReactElement {
  const unattended = form.loop?.session_id === 'new'
  const targets: (readonly [string, string])[] = [
    ...(current === undefined ? [] : [['current', 'This conversation'] as const]),
    ['session', 'A session, by title'],
    ['self', 'self (the global interface)'],
    ['new', 'new (a fresh session each run)'],
  ]
  const optionsOf = (key: keyof LoopForm): readonly (readonly [string, string])[] | undefined => {
    if (key === 'target') return targets
    if (key === 'session') return [['', 'Pick a session…'], ...sessions.map(sessionOption)]
    return FORM_FIELDS.find(spec => spec.key === key)?.options
  }
  return h('form', {
    'data-dshloop-form': form.mode,
    className: 'dshloop-card dshloop-form',
    onSubmit: (event: { preventDefault(): void }) => {
      event.preventDefault()
      onSubmit()
    },
  },
  h('strong', null, form.mode === 'create' ? 'New loop' : `Edit ${form.loop?.loop_id ?? ''}`),
  ...FORM_FIELDS.filter(spec => spec.show(form.values, form.mode, unattended)).map(spec => {
    const value = form.values[spec.key]
    const onInput = (event: { target: { value: string } }) => onField(spec.key, event.target.value)
    const error = form.errors[spec.key]
    const options = optionsOf(spec.key)
    const common = { name: spec.key, value, onChange: onInput, className: 'dshloop-input' }
    const control = spec.control === 'textarea'
      ? h('textarea', { ...common, rows: 3 })
      : spec.control === 'select' && options !== undefined
        ? h('select', common, ...options.map(([key, label]) => h('option', { key, value: key }, label)))
        : spec.control === 'datetime'
          ? h('input', { ...common, type: 'datetime-local' })
          : h('input', { ...common, type: 'text', inputMode: spec.control === 'number' ? 'numeric' : undefined })
    return h('label', { key: spec.key, 'data-dshloop-input': spec.key, className: 'dshloop-field' },
      h('span', null, spec.label, spec.hint ? h('span', { className: 'dshloop-muted' }, ` — ${spec.hint}`) : null),
      control,
      error ? h('span', { 'data-dshloop-field-error': spec.key, role: 'alert', className: 'dshloop-error' }, error) : null)
  }),
  form.general ? h('div', { 'data-dshloop-field-error': 'form', role: 'alert', className: 'dshloop-error' }, form.general) : null,
  h('div', { className: 'dshloop-actions' },
    Button('primary', { type: 'submit', 'data-dshloop-action': 'save', disabled: form.busy }, form.mode === 'create' ? 'Create' : 'Save'),
    Button('outline', { 'data-dshloop-action': 'cancel', onClick: onCancel }, 'Cancel')))
}
