/**
 * A loop card in DSH Web's chat (contract §15): each message dshloop's plugin delivered is drawn as
 * a compact card — the loop's name (or its prompt's first words), its schedule in dshloop's words,
 * "delivered by dshloop", how the run went once known, a link to the loop — with the XML only on
 * demand. Every other message is handed back to DSH's own renderer.
 *
 * Guarded three ways, because one throwing client plugin blanks all of DSH Web: the card takes
 * DSH's "context" seat only when DSH's own entry for it is there to hand the rest back to (its seat
 * or fields not as expected: nothing of ours is registered); a node that is not exactly ours goes to
 * that entry; and an error while drawing a card draws DSH's own row for that message instead.
 */

import { createElement, type ReactElement, useEffect, useState } from 'react'
import type { CardLoop, CardRun } from '../cards.ts'
import { LoopIcon } from './ui.ts'

/** The fields of the `source` dshloop's plugin gives a message (deliver.ts). */
export interface CardSource {
  readonly summary: string
  readonly loopId: string
  readonly runId: string
  readonly notice: boolean
}

/** Our source in a chat node's props, or undefined for every node that is not exactly ours. */
export function cardSource(props: unknown): CardSource | undefined {
  const data = (props as { node?: { data?: { source?: unknown } } } | null)?.node?.data
  const source = data?.source as Record<string, unknown> | undefined
  if (source?.kind !== 'plugin' || source.plugin !== 'dshloop') return undefined
  const loop = source.loop as { loop_id?: unknown; run_id?: unknown } | undefined
  if (typeof loop?.loop_id !== 'string' || typeof loop.run_id !== 'string') return undefined
  return {
    summary: typeof source.summary === 'string' ? source.summary : '',
    loopId: loop.loop_id,
    runId: loop.run_id,
    notice: source.notice === true,
  }
}

/** The message's text (the XML), shown only when asked for. */
export function messageText(props: unknown): string {
  const content = (props as { node?: { data?: { content?: unknown } } } | null)?.node?.data?.content
  if (!Array.isArray(content)) return ''
  return content.map(part => (typeof part?.text === 'string' ? part.text : '')).join('')
}

/** How one run went, in the panels' words. */
export function runWords(run: CardRun | undefined): { text: string; failed: boolean } | undefined {
  if (run === undefined) return undefined
  if (run.status === 'failed') return { text: `delivery failed${run.error ? `: ${run.error}` : ''}`, failed: true }
  if (run.status === 'skipped') return { text: 'skipped', failed: false }
  if (run.outcome === 'succeeded') return { text: 'succeeded', failed: false }
  if (run.outcome === 'failed' || run.outcome === 'cancelled') {
    return { text: `${run.outcome}${run.error ? `: ${run.error}` : ''}`, failed: true }
  }
  if (run.status === 'delivered') return { text: 'turn running', failed: false }
  return { text: 'delivering', failed: false }
}

/** A loop's own mark: paused (with why: auto-paused after failures, awaiting approval) or deleted. */
export function loopMark(loop: CardLoop | undefined): string | undefined {
  if (loop === undefined) return undefined
  if (loop.deleted) return 'loop deleted'
  if (loop.state === 'paused') return loop.pause_reason ? `paused: ${loop.pause_reason}` : 'paused'
  return undefined
}

type Load = (loopIds: string[]) => Promise<Record<string, CardLoop>>

/** How often the cards on screen ask again: a run's outcome shows within a few seconds. */
export const CARD_REFRESH_MS = 5_000

/**
 * The cards' data, shared by every card of the page: one `cards` call per refresh for all loops
 * whose cards are mounted (at most MAX_CARD_LOOPS each), while the page is visible.
 */
export class CardStore {
  private readonly loops = new Map<string, CardLoop>()
  private readonly wanted = new Map<string, number>() // loop ID -> mounted cards
  private readonly listeners = new Set<() => void>()
  private timer: ReturnType<typeof setTimeout> | undefined
  private readonly load: Load

  constructor(load: Load) {
    this.load = load
  }

  get(loopId: string): CardLoop | undefined {
    return this.loops.get(loopId)
  }

  /** A card of `loopId` is on screen until the returned function is called. */
  watch(loopId: string, listener: () => void): () => void {
    this.wanted.set(loopId, (this.wanted.get(loopId) ?? 0) + 1)
    this.listeners.add(listener)
    if (!this.loops.has(loopId)) this.schedule(0)
    else this.schedule(CARD_REFRESH_MS)
    return () => {
      const count = (this.wanted.get(loopId) ?? 1) - 1
      if (count > 0) this.wanted.set(loopId, count)
      else this.wanted.delete(loopId)
      this.listeners.delete(listener)
    }
  }

  private schedule(delay: number): void {
    if (this.timer !== undefined && delay > 0) return
    if (this.timer !== undefined) clearTimeout(this.timer)
    this.timer = setTimeout(() => void this.refresh(), delay)
  }

  private async refresh(): Promise<void> {
    this.timer = undefined
    const ids = [...this.wanted.keys()]
    if (ids.length === 0) return
    if (typeof document === 'undefined' || !document.hidden) {
      for (let start = 0; start < ids.length; start += 20) {
        try {
          for (const [id, loop] of Object.entries(await this.load(ids.slice(start, start + 20)))) this.loops.set(id, loop)
        } catch {
          // dshloop unreachable: the cards keep what they showed; the composer says it is unreachable.
        }
      }
      for (const listener of [...this.listeners]) listener()
    }
    this.schedule(CARD_REFRESH_MS)
  }
}

interface CardProps {
  readonly source: CardSource
  readonly text: string
  readonly store: CardStore
  readonly fault: boolean
  /** Opens the loop in DSH Web's Loops panel; false when there is none (the link's page opens instead). */
  readonly openLoop?: (loopId: string) => boolean
}

export function LoopCard({ source, text, store, fault, openLoop }: CardProps): ReactElement {
  if (fault) throw new Error('dshloop: a fault forced into the loop card (DSHLOOP_FAULT)')
  const [, setVersion] = useState(0)
  const [open, setOpen] = useState(false)
  useEffect(() => store.watch(source.loopId, () => setVersion(version => version + 1)), [store, source.loopId])

  const loop = store.get(source.loopId)
  const run = runWords(loop?.runs[source.runId])
  const mark = loopMark(loop)
  const title = loop?.name ?? source.summary ?? 'Loop'
  const failed = run?.failed === true || loop?.last_result === 'failed'
  return createElement('div', {
    'data-dshloop-card': source.runId,
    // A failure notice (contract §16) about the loop, not one of its occurrences.
    ...(source.notice ? { 'data-dshloop-notice': source.loopId } : {}),
    ...(failed ? { 'data-dshloop-mark': 'failed' } : {}),
    ...(mark !== undefined ? { 'data-dshloop-loop-mark': mark } : {}),
    style: { ...CARD, ...(failed ? { borderColor: 'var(--dsw-alias-state-error-primary, #d92d20)' } : {}) },
  },
  createElement('div', { style: ROW },
    createElement('span', { 'aria-hidden': 'true', style: ICON }, source.notice ? '⚠' : LoopIcon(14)),
    createElement('strong', { style: TITLE, title }, source.notice ? `Notice: ${title}` : title),
    loop?.schedule_text ? createElement('span', { style: MUTED }, loop.schedule_text) : null),
  createElement('div', { style: { ...MUTED, ...ROW } },
    createElement('span', null, source.notice ? 'failure notice from dshloop' : 'delivered by dshloop'),
    run ? createElement('span', { style: run.failed ? FAILED : undefined }, `· ${run.text}`) : null,
    mark ? createElement('span', { style: FAILED }, `· ${mark}`) : null),
  createElement('div', { style: { ...ROW, marginTop: '2px' } },
    createElement('a', {
      href: loop?.panelUrl,
      target: '_blank',
      rel: 'noopener',
      'data-dshloop-action': 'open-loop',
      title: 'This loop in the Loops panel (Ctrl-click: dshloop\'s own panel)',
      // The Loops panel in place; dshloop's own panel page with a modifier, or where there is none.
      onClick: (event: { preventDefault(): void; ctrlKey?: boolean; metaKey?: boolean }) => {
        if (event.ctrlKey || event.metaKey) return
        if (openLoop?.(source.loopId) === true) event.preventDefault()
      },
      style: LINK,
    }, 'Open loop'),
    createElement('button', { type: 'button', onClick: () => setOpen(!open), style: BUTTON, 'aria-expanded': open },
      open ? 'Hide message' : 'Show message')),
  open ? createElement('pre', { style: PRE }, text) : null)
}

const CARD = {
  border: '1px solid var(--dsw-alias-border-l2, rgba(127, 127, 127, 0.35))',
  borderRadius: '12px',
  background: 'var(--dsw-alias-bg-layer-1, transparent)',
  padding: '8px 10px',
  margin: '4px 0',
  fontSize: '13px',
  lineHeight: '18px',
  maxWidth: '100%',
  boxSizing: 'border-box',
  overflowWrap: 'anywhere',
}
const ROW = { display: 'flex', flexWrap: 'wrap', gap: '4px 10px', alignItems: 'baseline' }
const ICON = { color: 'var(--dsw-alias-label-tertiary, inherit)', alignSelf: 'center', display: 'inline-flex' }
const TITLE = { fontWeight: 600 }
const MUTED = { color: 'var(--dsw-alias-label-secondary, inherit)', fontSize: '12px' }
const FAILED = { color: 'var(--dsw-alias-state-error-primary, #d92d20)', fontWeight: 600 }
// DSH Web's own link colour (its business accent), as its context rows' actions.
const LINK = { color: 'var(--dsw-alias-state-business-primary, inherit)', fontSize: '12px', textDecoration: 'none', cursor: 'pointer' }
const BUTTON = { font: 'inherit', fontSize: '12px', background: 'none', border: 'none', padding: 0, cursor: 'pointer', color: 'var(--dsw-alias-state-business-primary, inherit)' }
const PRE = { whiteSpace: 'pre-wrap', fontSize: '12px', margin: '6px 0 0', opacity: 0.85 }
