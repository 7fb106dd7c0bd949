/**
 * The Loops panel inside DSH Web (contract §15): every loop (the global panel, a shell overlay the
 * sidebar's "Loops" action opens) or one conversation's (its "Loops" tab), with the actions of
 * dshloop's own panel, in its words. Data comes from the host half over the loopback channel
 * (`panel {op, …}`, ../panel.ts); the page holds no token.
 *
 * Refresh: one `list` every REFRESH_MS while the page is visible (and a loop's runs and trail while
 * it is open); between answers the countdowns tick locally. A fault in here draws an error in the
 * panel (ui.ts's Boundary), never a blank DSH Web.
 */

import { createElement as h, type ReactElement, useEffect, useRef, useState } from 'react'
import {
  emptyForm,
  FormError,
  formFieldOf,
  formOf,
  keepOrder,
  type LoopForm,
  opOf,
  type PanelLoop,
  toChanges,
  toInput,
} from '../loops-view.ts'
import { FilterBar, type Filters, NO_FILTERS, type SessionRow } from './filters.ts'
import { type FormState, LoopFormView } from './loop-form.ts'
import { DeletedLoop, Delivered, type EventRow, type LoopHistory, LoopRow, type RunRow, type ShowSession } from './loop-rows.ts'
import { errorText, fault, RpcError } from './runtime.ts'
import { Boundary, Button, usePoll } from './ui.ts'

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
  readonly showSession: ShowSession | undefined
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

/** A loop the panel opens on: its ID, and its state if known (a completed loop is history, listed apart). */
export interface PanelFocus {
  readonly loopId: string
  readonly state?: string | undefined
}

function focusFilters(focus: PanelFocus): Filters {
  return { ...NO_FILTERS, q: focus.loopId, ...(focus.state === 'completed' ? { state: 'completed' } : {}) }
}

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
  const [history, setHistory] = useState<(LoopHistory & { loopId: string }) | undefined>(undefined)
  const [form, setForm] = useState<FormState | undefined>(undefined)
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
