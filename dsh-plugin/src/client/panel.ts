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

import { Component, createElement as h, type ReactElement, type ReactNode, useEffect, useState } from 'react'
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
  type LoopForm,
  opOf,
  type PanelLoop,
  preview,
  stateWords,
  targetWords,
  toChanges,
  toInput,
} from '../loops-view.ts'
import { countdown } from '../status.ts'
import { runWords } from './card.ts'

export const PANEL_REFRESH_MS = 3_000
const TICK_MS = 1_000
const TYPING_MS = 300

/** A refusal from the host half: dshloop's code, its sentence, and the input field it names. */
export class PanelError extends Error {
  readonly code: string
  readonly field: string | undefined
  constructor(code: string, message: string, field?: string) {
    super(message)
    this.code = code
    this.field = field
  }
}

export type PanelRpc = (payload: { readonly op: string; readonly [key: string]: unknown }) => Promise<unknown>

export interface PanelDeps {
  readonly rpc: PanelRpc
  /** Opens a DSH session (ctx.sessions.open); undefined when DSH Web offers none. */
  readonly openSession: ((sessionId: string) => void) | undefined
  /** A session's title as DSH Web lists it: dshloop knows the titles of sessions it delivered to only. */
  readonly titleOf: (sessionId: string) => string | undefined
}

interface ListAnswer {
  readonly loops: readonly PanelLoop[]
  readonly more: boolean
  readonly titles: Readonly<Record<string, string>>
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
  return h(PanelBoundary, { scope: props.scope }, h(PanelBody, props as never))
}

function fault(): boolean {
  return (globalThis as { DSHLOOP_FAULT?: unknown }).DSHLOOP_FAULT === 'panel'
}

function PanelBody({ scope, deps, onClose, focus }: PanelProps): ReactElement {
  if (fault()) throw new Error('dshloop: a fault forced into the Loops panel (DSHLOOP_FAULT)')
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

  useEffect(() => {
    let stopped = false
    let timer: ReturnType<typeof setTimeout> | undefined
    const poll = async (): Promise<void> => {
      if (typeof document === 'undefined' || !document.hidden) {
        try {
          const asked = { ...filters, q, ...(current === undefined ? {} : { session: current }) }
          const answer = await deps.rpc({ op: 'list', ...asked }) as ListAnswer
          if (!stopped) {
            setList(answer)
            setListError(undefined)
          }
          if (current !== undefined) {
            const delivered = await deps.rpc({ op: 'delivered', sessionId: current }) as { runs: RunRow[] }
            if (!stopped) setDelivered(delivered.runs)
          }
          if (openId !== undefined) {
            const more = await deps.rpc({ op: 'loop', loopId: openId }) as { runs: RunRow[]; events: EventRow[] }
            if (!stopped) setHistory({ loopId: openId, runs: more.runs, events: more.events })
          }
        } catch (error) {
          if (!stopped) setListError(error instanceof Error ? error.message : String(error))
        }
      }
      if (!stopped) timer = setTimeout(() => void poll(), PANEL_REFRESH_MS)
    }
    void poll()
    return () => {
      stopped = true
      if (timer !== undefined) clearTimeout(timer)
    }
  }, [deps, current, filters.state, filters.target, filters.session, q, openId, version])

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
      setNotices(previous => ({ ...previous, [loop.loop_id]: error instanceof Error ? error.message : String(error) }))
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
      refresh()
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error)
      const field = error instanceof FormError ? error.field : formFieldOf(error instanceof PanelError ? error.field : undefined, form.values)
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
  return h('div', { 'data-dshloop-panel': scope, style: PANEL },
    h('div', { style: HEADER },
      h('strong', { style: { fontSize: '16px' } }, current === undefined ? 'Loops' : 'Loops of this conversation'),
      h('span', { style: { flex: '1' } }),
      h('button', {
        type: 'button',
        'data-dshloop-action': 'new',
        style: PRIMARY,
        onClick: () => setForm({ mode: 'create', values: emptyForm(current), errors: {}, busy: false }),
      }, 'New loop'),
      onClose ? h('button', { type: 'button', 'aria-label': 'Close', 'data-dshloop-action': 'close', style: BUTTON, onClick: onClose }, 'Close') : null),
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
    listError ? h('div', { 'data-dshloop-error': 'list', style: ERROR }, `Could not refresh: ${listError}`) : null,
    list === undefined
      ? h('div', { style: MUTED }, listError ? '' : 'Loading…')
      : list.loops.length === 0
        ? deletedOpen ? null : h('div', { 'data-dshloop-empty': 'true', style: { ...MUTED, padding: '12px 0' } }, 'no loops')
        : h('div', null, ...list.loops.map(loop => h(LoopRow, {
          key: loop.loop_id,
          loop,
          titles,
          now,
          open: openId === loop.loop_id,
          confirming: confirming === loop.loop_id,
          notice: notices[loop.loop_id] ?? '',
          history: history?.loopId === loop.loop_id ? history : undefined,
          openSession: deps.openSession,
          onToggle: () => setOpenId(openId === loop.loop_id ? undefined : loop.loop_id),
          onAction: (action: string) => void act(loop, action),
        }))),
    deletedOpen && history !== undefined
      ? h(DeletedLoop, { history, name: delivered?.find(run => run.loop_id === history.loopId)?.loop_name, now, openSession: deps.openSession })
      : null,
    list?.more ? h('div', { style: MUTED }, `Showing the first ${list.loops.length}; narrow the filters to see the rest.`) : null,
    current !== undefined && delivered !== undefined
      ? h(Delivered, { sessionId: current, runs: delivered, loops: list?.loops ?? [], now })
      : null)
}

/** A deleted loop opened from one of its cards: what is left of it, its runs and its trail (spec §4). */
function DeletedLoop({ history, name, now, openSession }: {
  history: { readonly loopId: string; readonly runs: readonly RunRow[]; readonly events: readonly EventRow[] }
  name: string | undefined
  now: number
  openSession: RowProps['openSession']
}): ReactElement {
  const deleted = history.events[0]
  return h('div', { 'data-dshloop-loop-deleted': history.loopId, style: CARD },
    h('div', { style: ROW },
      h('strong', null, name ?? history.loopId),
      h('span', { 'data-dshloop-field': 'state', style: MARKED }, 'deleted')),
    h('div', { style: { ...SMALL, ...MUTED } },
      `Deleted${deleted ? ` ${ago(deleted.at, now)}` : ''}: it no longer runs; its runs and trail stay.`),
    h(History, { history, now, openSession }))
}

/** The runs delivered into this conversation, newest first, each with the loop it came from. */
function Delivered({ sessionId, runs, loops, now }: { sessionId: string; runs: readonly RunRow[]; loops: readonly PanelLoop[]; now: number }): ReactElement {
  const prompts = new Map(loops.map(loop => [loop.loop_id, loop.name ?? preview(loop.prompt, 60)]))
  return h('div', { 'data-dshloop-delivered': sessionId, style: { marginTop: '12px' } },
    h('strong', { style: SMALL }, 'Runs delivered here'),
    runs.length === 0 ? h('div', { style: { ...SMALL, ...MUTED } }, 'none yet') : null,
    ...runs.map(run => {
      const words = runWords(run)
      return h('div', { key: run.run_id, 'data-dshloop-run': run.run_id, style: { ...ROW, ...SMALL } },
        h('span', null, ago(run.scheduled_at, now)),
        h('span', { style: MUTED }, prompts.get(run.loop_id) ?? run.loop_name ?? run.loop_id),
        run.loop_deleted ? h('span', { 'data-dshloop-loop-deleted': run.loop_id, style: MUTED }, 'loop deleted') : null,
        run.manual ? h('span', { style: MUTED }, 'run now') : null,
        h('span', { style: words?.failed ? { color: '#d92d20' } : undefined }, words?.text ?? run.status))
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
  return h('div', { style: ROW },
    select('dshloop-filter-state', filters.state, STATE_OPTIONS, set('state')),
    global ? select('dshloop-filter-target', filters.target, TARGET_OPTIONS, set('target')) : null,
    global ? select('dshloop-filter-session', filters.session, [['', 'Any session'], ...sessions.map(sessionOption)], set('session')) : null,
    h('input', {
      type: 'search',
      name: 'dshloop-filter-q',
      placeholder: 'Prompt text or loop ID',
      value: filters.q,
      onChange: set('q'),
      style: { ...INPUT, flex: '1 1 160px' },
    }))
}

function sessionOption(session: SessionRow): readonly [string, string] {
  return [session.session_id, session.title ? `${session.title} (${session.session_id})` : session.session_id]
}

function select(name: string, value: string, options: readonly (readonly [string, string])[], onChange: (event: { target: { value: string } }) => void): ReactElement {
  return h('select', { name, value, onChange, style: INPUT }, ...options.map(([key, label]) => h('option', { key, value: key }, label)))
}

interface RowProps {
  readonly loop: PanelLoop
  readonly titles: Readonly<Record<string, string>>
  readonly now: number
  readonly open: boolean
  readonly confirming: boolean
  readonly notice: string
  readonly history: { readonly runs: readonly RunRow[]; readonly events: readonly EventRow[] } | undefined
  readonly openSession: ((sessionId: string) => void) | undefined
  readonly onToggle: () => void
  readonly onAction: (action: string) => void
}

function LoopRow({ loop, titles, now, open, confirming, notice, history, openSession, onToggle, onAction }: RowProps): ReactElement {
  const state = stateWords(loop)
  const failing = isFailing(loop)
  return h('div', {
    'data-dshloop-loop': loop.loop_id,
    'data-dshloop-state': state,
    ...(failing ? { 'data-dshloop-mark': 'failed' } : {}),
    style: { ...CARD, ...(failing ? { borderColor: '#d92d20' } : {}) },
  },
  h('div', { style: ROW },
    h('button', { type: 'button', onClick: onToggle, style: { ...LINKISH, fontWeight: 600 }, 'aria-expanded': open, title: loop.prompt },
      loop.name ? `${loop.name} — ${preview(loop.prompt, 80)}` : preview(loop.prompt)),
    h('span', { 'data-dshloop-field': 'state', style: state === 'failed' || state === 'awaiting approval' || state === 'paused' ? MARKED : BADGE }, state)),
  h('div', { style: { ...ROW, ...SMALL } },
    h('span', { 'data-dshloop-field': 'schedule' }, loop.schedule_text ?? loop.schedule.kind),
    h('span', null, '→'),
    h('span', { 'data-dshloop-field': 'target' }, targetWords(loop.session_id, titles)),
    loop.next_at !== undefined ? h('span', { 'data-dshloop-field': 'next' }, `next ${countdown(loop.next_at, now)}`) : null,
    loop.last_run_at !== undefined
      ? h('span', { 'data-dshloop-field': 'last-run' }, `last run ${ago(loop.last_run_at, now)}${loop.last_result ? ` · ${loop.last_result}` : ''}`)
      : h('span', { style: MUTED }, 'not run yet'),
    endsWords(loop, now) !== undefined ? h('span', { 'data-dshloop-field': 'ends' }, endsWords(loop, now)) : null),
  loop.last_error ? h('div', { 'data-dshloop-field': 'last-error', style: { ...SMALL, color: '#d92d20' } }, `last error: ${loop.last_error}`) : null,
  h('div', { style: { ...ROW, marginTop: '4px' } },
    ...actionsOf(loop).map(action => h('button', {
      key: action,
      type: 'button',
      'data-dshloop-action': action,
      style: action === 'delete' && confirming ? DANGER : BUTTON,
      onClick: () => onAction(action),
    }, action === 'delete' && confirming ? 'Confirm delete' : ACTION_LABELS[action] ?? action)),
    h('button', { type: 'button', 'data-dshloop-action': 'runs', style: BUTTON, onClick: onToggle }, open ? 'Hide runs' : 'Runs')),
  notice ? h('div', { 'data-dshloop-notice': 'true', style: ERROR }, notice) : null,
  open ? h(History, { history, now, openSession }) : null)
}

function History({ history, now, openSession }: { history: RowProps['history']; now: number; openSession: RowProps['openSession'] }): ReactElement {
  if (history === undefined) return h('div', { style: MUTED }, 'Loading runs…')
  return h('div', { style: { marginTop: '6px' } },
    h('div', { style: SMALL }, history.runs.length === 0 ? 'No runs yet.' : 'Runs, newest first'),
    ...history.runs.map(run => {
      const words = runWords(run)
      return h('div', { key: run.run_id, 'data-dshloop-run': run.run_id, style: { ...ROW, ...SMALL } },
        h('span', null, ago(run.scheduled_at, now)),
        run.manual ? h('span', { style: MUTED }, 'run now') : null,
        h('span', { style: words?.failed ? { color: '#d92d20' } : undefined }, words?.text ?? run.status),
        run.target_session_id && openSession
          ? h('button', { type: 'button', 'data-dshloop-open-session': run.target_session_id, style: BUTTON, onClick: () => openSession(run.target_session_id as string) }, 'Open session')
          : null)
    }),
    history.events.length > 0 ? h('div', { style: { ...SMALL, marginTop: '6px' } }, 'Trail') : null,
    ...history.events.map((event, index) => h('div', { key: `${event.at}-${index}`, 'data-dshloop-event': event.kind, style: { ...SMALL, ...MUTED } },
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
    style: { ...CARD, display: 'grid', gap: '6px' },
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
    const control = spec.control === 'textarea'
      ? h('textarea', { name: spec.key, value, onChange: onInput, rows: 3, style: INPUT })
      : spec.control === 'select' && options !== undefined
        ? h('select', { name: spec.key, value, onChange: onInput, style: INPUT }, ...options.map(([key, label]) => h('option', { key, value: key }, label)))
        : spec.control === 'datetime'
          ? h('input', { name: spec.key, type: 'datetime-local', value, onChange: onInput, style: INPUT })
          : h('input', { name: spec.key, type: 'text', inputMode: spec.control === 'number' ? 'numeric' : undefined, value, onChange: onInput, style: INPUT })
    return h('label', { key: spec.key, 'data-dshloop-input': spec.key, style: { display: 'grid', gap: '2px', ...SMALL } },
      h('span', null, spec.label, spec.hint ? h('span', { style: MUTED }, ` — ${spec.hint}`) : null),
      control,
      error ? h('span', { 'data-dshloop-field-error': spec.key, role: 'alert', style: { color: '#d92d20' } }, error) : null)
  }),
  form.general ? h('div', { 'data-dshloop-field-error': 'form', role: 'alert', style: ERROR }, form.general) : null,
  h('div', { style: ROW },
    h('button', { type: 'submit', 'data-dshloop-action': 'save', disabled: form.busy, style: PRIMARY }, form.mode === 'create' ? 'Create' : 'Save'),
    h('button', { type: 'button', 'data-dshloop-action': 'cancel', onClick: onCancel, style: BUTTON }, 'Cancel')))
}

interface BoundaryProps {
  readonly scope: string
  readonly children?: ReactNode
}

/** An error while drawing the panel shows in the panel: DSH Web around it keeps working. */
export class PanelBoundary extends Component<BoundaryProps, { error: string | undefined }> {
  constructor(props: BoundaryProps) {
    super(props)
    this.state = { error: undefined }
  }

  static getDerivedStateFromError(error: unknown): { error: string } {
    return { error: error instanceof Error ? error.message : String(error) }
  }

  componentDidCatch(error: unknown): void {
    console.error('dshloop: the Loops panel failed', error)
  }

  render(): ReactNode {
    if (this.state.error === undefined) return this.props.children
    return h('div', { 'data-dshloop-panel': this.props.scope, 'data-dshloop-error': 'panel', style: { ...PANEL, ...ERROR } },
      `The Loops panel failed: ${this.state.error}. DSH works as before; dshloop's own panel shows the same loops.`)
  }
}

const PANEL = { fontSize: '13px', lineHeight: '18px', padding: '12px', boxSizing: 'border-box', width: '100%', overflowWrap: 'anywhere' }
const HEADER = { display: 'flex', gap: '8px', alignItems: 'center', marginBottom: '8px' }
const ROW = { display: 'flex', flexWrap: 'wrap', gap: '6px', alignItems: 'center' }
const CARD = { border: '1px solid rgba(127, 127, 127, 0.35)', borderRadius: '8px', padding: '8px 10px', margin: '6px 0' }
const SMALL = { fontSize: '12px' }
const MUTED = { opacity: 0.7 }
const ERROR = { color: '#b42318', fontSize: '12px', margin: '4px 0' }
const BADGE = { fontSize: '11px', border: '1px solid rgba(127, 127, 127, 0.45)', borderRadius: '10px', padding: '0 6px' }
const MARKED = { ...BADGE, color: '#b42318', borderColor: '#d92d20', fontWeight: 600 }
const INPUT = { font: 'inherit', fontSize: '13px', padding: '4px 6px', borderRadius: '6px', border: '1px solid rgba(127, 127, 127, 0.5)', background: 'transparent', color: 'inherit', maxWidth: '100%', boxSizing: 'border-box' }
const BUTTON = { font: 'inherit', fontSize: '12px', whiteSpace: 'nowrap', padding: '2px 8px', borderRadius: '6px', border: '1px solid rgba(127, 127, 127, 0.5)', background: 'transparent', color: 'inherit', cursor: 'pointer' }
const PRIMARY = { ...BUTTON, fontWeight: 600 }
const DANGER = { ...BUTTON, color: '#b42318', borderColor: '#d92d20', fontWeight: 600 }
const LINKISH = { font: 'inherit', background: 'none', border: 'none', padding: 0, color: 'inherit', cursor: 'pointer', textAlign: 'left' }
