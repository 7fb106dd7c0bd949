/**
 * dshloop's DSH plugin, web half: the composer status (spec §8.1, contract §13) in every
 * conversation's composer tool row (slot `conversation.input.right`), and the loop cards in the
 * chat (card.ts, contract §15).
 *
 * It asks the host half (RPC channel /dshloop, loopback authority) for `loop_list {}` as this
 * conversation's session every few seconds while the page is visible: one index read in dshloop per
 * open conversation per refresh. Between answers the countdown ticks locally.
 */

import type { ClientContext, ShippedEntry } from 'dsh:client'
import { createElement, type FunctionComponent, type ReactElement, useEffect, useState } from 'react'
import type { CardLoop } from '../cards.ts'
import { type LoopSummary, statusText, summarize } from '../status.ts'
import { CardStore, cardSource, LoopCard, messageText } from './card.ts'
import { LoopsPanel, type PanelDeps, type PanelFocus } from './panel.ts'
import { CHANNEL, endpoint, errorText, fault, RpcError } from './runtime.ts'
import { Boundary, Hint, installStyles, LoopIcon, usePoll } from './ui.ts'

export const name = 'dshloop-client'
export const inject = ['slots', 'connection', 'sessions']

/** How often the status asks dshloop again: "within a few seconds" of a change (spec §8.1). */
export const REFRESH_MS = 3_000
const TICK_MS = 1_000

interface StatusAnswer {
  readonly loops: readonly LoopSummary[]
  readonly panelUrl: string
}

type Load = (sessionId: string) => Promise<StatusAnswer>

interface StatusProps {
  readonly dshloopSessionId: string
  readonly load: Load
}

export function apply(ctx: ClientContext): void {
  // Nothing of ours may stop DSH Web from loading: a plugin whose apply throws blanks the page.
  try {
    ctx.effect(() => installStyles(), 'dshloop: styles')
  } catch (error) {
    console.error('dshloop: the styles could not be installed', error)
  }
  try {
    applyStatus(ctx)
  } catch (error) {
    console.error('dshloop: the composer status could not be installed', error)
  }
  try {
    applyCards(ctx)
  } catch (error) {
    console.error('dshloop: loop cards could not be installed; DSH draws its own rows', error)
  }
  try {
    applyPanel(ctx)
  } catch (error) {
    console.error('dshloop: the Loops panel could not be installed', error)
  }
}

/** The Loops tab's id among a conversation's views (Chat, Trajectory, …). */
const TAB_ID = 'dshloop-loops'
const TAB_LABEL = 'Loops'

/**
 * The Loops panel in three seats DSH Web offers plugins (../shared/DSH-PLUGIN.md): a "Loops" action
 * at the sidebar's foot (`sidebar.footer.action`) that opens the global panel over DSH
 * (`shell.overlay`), and a "Loops" tab in every conversation (`conversation.view`). Never a single
 * seat (root, sidebar, conversation…): those replace a part of DSH Web.
 */
function applyPanel(ctx: ClientContext): void {
  const deps: PanelDeps = {
    rpc: endpoint(ctx.connection.rpc.call.bind(ctx.connection.rpc), 'panel', 'The dshloop plugin did not answer.'),
    showSession: ctx.sessions === undefined ? undefined : (sessionId: string, runId?: string) => {
      ctx.sessions?.open(sessionId)
      showChat(runId)
    },
    titleOf: sessionId => {
      try {
        return ctx.sessions?.list?.getSnapshot().byId?.[sessionId]?.title
      } catch {
        return undefined // DSH Web's list not as this plugin knows it: the ID alone
      }
    },
  }
  // DSH's rail (a narrow sidebar, a phone) hands `wide: false`: the icon alone, as DSH's own
  // actions there, at their size, named for screen readers and on hover.
  const Action = ({ wide }: { wide?: boolean }): ReactElement => {
    const rail = wide === false
    const button = createElement('button', {
      type: 'button',
      'data-dshloop-open': 'panel',
      'aria-label': 'Loops',
      ...(rail ? {} : { title: 'Every loop, from dshloop' }),
      onClick: () => overlay.show(),
      className: rail ? 'dshloop-sidebar-action dshloop-sidebar-action--rail' : 'dshloop-sidebar-action',
    }, LoopIcon(rail ? 18 : 16), rail ? null : createElement('span', null, 'Loops'))
    return rail ? Hint('Loops', button) : button
  }

  const Overlay = (): ReactElement | null => {
    const [open, setOpen] = useState(overlay.open)
    useEffect(() => overlay.watch(setOpen), [])
    useEffect(() => {
      if (!open) return undefined
      const close = (event: KeyboardEvent): void => {
        if (event.key === 'Escape') overlay.set(false)
      }
      document.addEventListener('keydown', close)
      return () => document.removeEventListener('keydown', close)
    }, [open])
    if (!open) return null
    return createElement('div', {
      'data-dshloop-overlay': 'true',
      className: 'dshloop-overlay',
      onClick: (event: { target: unknown; currentTarget: unknown }) => {
        if (event.target === event.currentTarget) overlay.set(false)
      },
    }, createElement('div', { role: 'dialog', 'aria-label': 'Loops', className: 'dshloop-dialog' },
      // Keyed by the loop it was opened on, so a card's "Open loop" starts it afresh on that loop.
      createElement(LoopsPanel, { key: overlay.focus?.loopId ?? '', scope: 'global', deps, focus: overlay.focus, onClose: () => overlay.set(false) })))
  }

  const Tab = ({ dshloopSessionId }: { dshloopSessionId: string }): ReactElement =>
    createElement('div', { style: { height: '100%', overflowY: 'auto' } }, createElement(LoopsPanel, { scope: dshloopSessionId, deps }))

  ctx.slots.inject('sidebar.footer.action', () => ctx.slots.register({ name: 'sidebar.footer.action', id: 'dshloop-loops', order: 20 }, Action))
  ctx.slots.inject('shell.overlay', () => ctx.slots.register({ name: 'shell.overlay', id: 'dshloop-loops' }, Overlay))
  ctx.slots.inject('conversation.view', () => ctx.slots.register({
    name: 'conversation.view',
    id: TAB_ID,
    order: 50,
    label: () => TAB_LABEL,
    inject: sessionId => ({ dshloopSessionId: sessionId }),
  }, Tab))
  overlay.installed = true
}

/**
 * Whether the global panel is open, and on which loop: shared by the sidebar's action, the loop
 * cards' "Open loop" and the overlay they open.
 */
class OverlayState {
  open = false
  /** The loop the panel was opened on (a card's), or undefined for the whole list. */
  focus: PanelFocus | undefined
  /** Whether the panel's seats were taken: a card opens dshloop's own panel page otherwise. */
  installed = false
  private readonly listeners = new Set<(open: boolean) => void>()

  /** Opens the panel (on one loop); false when there is no panel in this DSH Web to open. */
  show(focus?: PanelFocus): boolean {
    if (!this.installed) return false
    this.focus = focus
    this.set(true)
    return true
  }

  set(open: boolean): void {
    this.open = open
    for (const listener of [...this.listeners]) listener(open)
  }

  watch(listener: (open: boolean) => void): () => void {
    this.listeners.add(listener)
    return () => {
      this.listeners.delete(listener)
    }
  }
}

/**
 * Opens this conversation's Loops tab, as a click on it would: DSH Web gives a plugin no call that
 * switches views, so the composer status presses the tab's own button. False when it is not there.
 */
export function openLoopsTab(from: Element | null): boolean {
  const tab = loopsTab(from?.ownerDocument ?? document)
  if (tab === undefined) return false
  tab.click()
  return true
}

function loopsTab(page: Document): HTMLElement | undefined {
  const tab = Array.from(page.querySelectorAll('[role="tab"]')).find(element => element.textContent?.trim() === TAB_LABEL)
  return tab instanceof HTMLElement ? tab : undefined
}

/**
 * After a session is opened: its chat, not the Loops tab it may have been left on (the view is kept
 * per session), scrolled to the run's card when there is one. DSH Web switches views only through
 * its tabs, so this presses the first (Chat), for as long as the newly opened session takes to draw.
 */
function showChat(runId: string | undefined, page: Document = document): void {
  const until = Date.now() + 1_500
  // The person's own click meanwhile (a tab, another session) wins: stop pressing for them.
  let theirs = false
  const watch = (event: Event): void => {
    if (event.isTrusted) theirs = true
  }
  page.addEventListener('click', watch, true)
  const step = (): void => {
    if (theirs) return finish()
    const ours = loopsTab(page)
    if (ours?.getAttribute('aria-selected') === 'true') {
      const first = ours.parentElement?.querySelector('[role="tab"]')
      if (first instanceof HTMLElement && first !== ours) first.click()
    }
    const card = runId === undefined ? null : page.querySelector(`[data-dshloop-card="${CSS.escape(runId)}"]`)
    if (card !== null) card.scrollIntoView({ block: 'center' })
    if (card === null && Date.now() < until) setTimeout(step, 100)
    else finish()
  }
  const finish = (): void => page.removeEventListener('click', watch, true)
  setTimeout(step, 0)
}

const overlay = new OverlayState()

function applyStatus(ctx: ClientContext): void {
  const status = endpoint(ctx.connection.rpc.call.bind(ctx.connection.rpc), 'status', 'The dshloop plugin sent no status.')
  const load: Load = async sessionId => await status({ sessionId }) as StatusAnswer
  ctx.slots.inject('conversation.input.right', () => ctx.slots.register({
    name: 'conversation.input.right',
    id: 'dshloop-status',
    order: -10, // before the model picker's neighbours: the status is context, not a control
    inject: sessionId => ({ dshloopSessionId: sessionId, load }),
  }, LoopStatus))
}

const CHAT_NODE = 'conversation.chat.node'

function applyCards(ctx: ClientContext): void {
  if (fault() === 'apply') throw new Error('dshloop: a fault forced into apply (DSHLOOP_FAULT)')
  const store = new CardStore(async loopIds => {
    const result = await ctx.connection.rpc.call(CHANNEL, 'cards', { loopIds }) as {
      ok?: boolean
      value?: { loops?: Record<string, CardLoop> }
    }
    if (result?.ok !== true || result.value?.loops === undefined) throw new Error('The dshloop plugin sent no cards.')
    return result.value.loops
  })
  let shipped: ShippedEntry | undefined
  const ContextNode = (props: Record<string, unknown>): ReactElement | null => {
    const own = shipped?.component as FunctionComponent<never>
    const theirs = () => createElement(own, props)
    const source = cardSource(props)
    if (source === undefined) return theirs()
    return createElement(Boundary, { label: 'a loop card (DSH draws its own row instead)', fallback: theirs },
      createElement(LoopCard, {
        source,
        text: messageText(props),
        store,
        fault: fault() === 'card',
        openLoop: (loopId: string) => overlay.show({ loopId, state: store.get(loopId)?.state }),
      }))
  }
  ctx.slots.inject(CHAT_NODE, () => {
    // DSH's own renderer of injected-context rows, which every row that is not ours goes back to.
    // Not there, or not the shape this plugin knows: register nothing, and DSH draws its rows.
    shipped = ctx.slots.entries(CHAT_NODE).find(entry =>
      entry?.options?.key === 'context' && entry.component !== ContextNode)
    const usable = shipped !== undefined && (typeof shipped.component === 'function' || typeof shipped.component === 'object')
    if (!usable) {
      console.warn('dshloop: DSH Web has no context row renderer this plugin knows; loop cards are off')
      return undefined
    }
    // Priority -1: ahead of DSH's own entry (the default priority is taken: registering there throws).
    return ctx.slots.register({
      name: CHAT_NODE,
      key: 'context',
      priority: -1,
      ...(shipped?.locale === undefined ? {} : { locale: shipped.locale }),
    }, ContextNode as never)
  })
}

// Each answer names the session it is for: when the composer switches conversation, the previous
// one's loops are never drawn under the new one's name while its first answer is on the way.
type View =
  | { readonly kind: 'loading'; readonly sessionId?: undefined }
  | { readonly kind: 'ready'; readonly sessionId: string; readonly answer: StatusAnswer }
  | {
    readonly kind: 'error'
    readonly sessionId: string
    readonly message: string
    readonly unreachable: boolean
    readonly answer?: StatusAnswer
  }

export function LoopStatus({ dshloopSessionId: sessionId, load }: StatusProps): ReactElement | null {
  const [view, setView] = useState<View>({ kind: 'loading' })
  const [now, setNow] = useState(() => Date.now())

  usePoll(() => load(sessionId), REFRESH_MS, answer => setView({ kind: 'ready', sessionId, answer }), error => {
    setView(previous => ({
      kind: 'error',
      sessionId,
      message: errorText(error),
      unreachable: error instanceof RpcError && error.unreachable,
      ...(previous.kind === 'loading' || previous.sessionId !== sessionId ? {} : { answer: previous.answer }),
    }))
  }, [sessionId, load])

  useEffect(() => {
    const ticker = setInterval(() => setNow(Date.now()), TICK_MS)
    return () => clearInterval(ticker)
  }, [])

  if (view.kind === 'loading' || view.sessionId !== sessionId) return null
  if (view.kind === 'error' && view.answer === undefined) {
    return createElement('span', {
      'data-dshloop-status': sessionId,
      'data-dshloop-error': 'true',
      title: view.message,
      style: { ...STYLE, color: 'var(--dsw-alias-label-tertiary, inherit)' },
    }, view.unreachable ? 'loops: dshloop unreachable' : 'loops: unavailable')
  }
  const answer = view.answer as StatusAnswer
  const summary = summarize(answer.loops)
  // The worst first: a failure, then a loop paused (by an operator, or by itself after failures).
  const mark = summary.failed > 0 ? 'failed' : summary.paused > 0 ? 'paused' : summary.overdue > 0 ? 'overdue' : undefined
  const marked = mark !== undefined
  return createElement('a', {
    'data-dshloop-status': sessionId,
    ...(marked ? { 'data-dshloop-mark': mark } : {}),
    ...(view.kind === 'error' ? { 'data-dshloop-stale': 'true' } : {}),
    href: answer.panelUrl,
    target: '_blank',
    rel: 'noopener',
    // The conversation's Loops tab, in place; dshloop's own panel (the link) where there is none.
    onClick: (event: { preventDefault(): void; currentTarget: Element | null; ctrlKey?: boolean; metaKey?: boolean }) => {
      if (event.ctrlKey || event.metaKey) return
      if (openLoopsTab(event.currentTarget)) event.preventDefault()
    },
    title: view.kind === 'error'
      ? `Last known; refreshing failed: ${view.message}`
      : summary.failed > 0
        // The countdown of a failing loop is its held-back next run: say so where the number shows.
        ? 'This conversation\'s loops (the Loops tab). A loop whose scheduled runs fail waits longer before each next run, and pauses after several failures in a row; its row in the tab says how long and why.'
        : 'This conversation\'s loops (the Loops tab)',
    style: { ...STYLE, ...(marked ? { color: 'var(--dsw-alias-state-error-primary, #b42318)', fontWeight: 600 } : {}) },
  }, statusText(summary, now), marked ? MARK : null)
}

const MARK = createElement('span', { 'aria-hidden': 'true', style: { marginLeft: '4px' } }, '⚠')

// One line that gives way first on a narrow composer (an ellipsis, the whole text on hover in
// the tab it opens), so that DSH's own controls beside it keep their room.
const STYLE = {
  fontSize: '12px',
  lineHeight: '20px',
  display: 'inline-block',
  maxWidth: '100%',
  verticalAlign: 'middle',
  whiteSpace: 'nowrap',
  overflow: 'hidden',
  textOverflow: 'ellipsis',
  minWidth: '0',
  flexShrink: 1,
  textDecoration: 'none',
  color: 'var(--dsw-alias-label-secondary, inherit)',
  padding: '0 6px',
}
