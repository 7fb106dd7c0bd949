/**
 * dshloop's DSH plugin, web half: the composer status (spec §8.1, contract §13) in every
 * conversation's composer tool row (slot `conversation.input.right`).
 *
 * It asks the host half (RPC channel /dshloop, loopback authority) for `loop_list {}` as this
 * conversation's session every few seconds while the page is visible: one index read in dshloop per
 * open conversation per refresh. Between answers the countdown ticks locally.
 */

import { createElement, type ReactElement, useEffect, useState } from 'react'
import { type LoopSummary, statusText, summarize } from '../status.ts'

export const name = 'dshloop-client'
export const inject = ['slots', 'connection']

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

interface ClientContext {
  effect(factory: () => void | (() => void), label?: string): void
  readonly connection: {
    readonly rpc: { call(channel: string, endpoint: string, payload: unknown): Promise<unknown> }
  }
  readonly slots: {
    inject(name: string, register: () => void | (() => void)): void
    register(
      options: {
        readonly name: string
        readonly id: string
        readonly order: number
        readonly inject: (sessionId: string) => StatusProps
      },
      component: (props: StatusProps) => ReactElement | null,
    ): () => void
  }
}

export function apply(ctx: ClientContext): void {
  const load: Load = async sessionId => {
    const result = await ctx.connection.rpc.call('/dshloop', 'status', { sessionId }) as {
      ok?: boolean
      value?: StatusAnswer
      error?: { code?: string; message?: string }
    }
    if (result?.ok === true && result.value !== undefined) return result.value
    const failure = new Error(result?.error?.message ?? 'The dshloop plugin sent no status.')
    throw Object.assign(failure, { code: result?.error?.code ?? 'internal' })
  }
  ctx.slots.inject('conversation.input.right', () => ctx.slots.register({
    name: 'conversation.input.right',
    id: 'dshloop-status',
    order: -10, // before the model picker's neighbours: the status is context, not a control
    inject: sessionId => ({ dshloopSessionId: sessionId, load }),
  }, LoopStatus))
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

  useEffect(() => {
    let stopped = false
    let timer: ReturnType<typeof setTimeout> | undefined
    const poll = async (): Promise<void> => {
      // A hidden tab costs dshloop nothing; it catches up when it is shown again.
      if (typeof document === 'undefined' || !document.hidden) {
        try {
          const answer = await load(sessionId)
          if (!stopped) setView({ kind: 'ready', sessionId, answer })
        } catch (error) {
          if (!stopped) {
            setView(previous => ({
              kind: 'error',
              sessionId,
              message: error instanceof Error ? error.message : String(error),
              unreachable: ['unreachable', 'timeout'].includes((error as { code?: string }).code ?? ''),
              ...(previous.kind === 'loading' || previous.sessionId !== sessionId ? {} : { answer: previous.answer }),
            }))
          }
        }
      }
      if (!stopped) timer = setTimeout(() => void poll(), REFRESH_MS)
    }
    void poll()
    return () => {
      stopped = true
      if (timer !== undefined) clearTimeout(timer)
    }
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
      style: { ...STYLE, opacity: 0.7 },
    }, view.unreachable ? 'loops: dshloop unreachable' : 'loops: unavailable')
  }
  const answer = view.answer as StatusAnswer
  const summary = summarize(answer.loops)
  const marked = summary.overdue > 0 || summary.failed > 0
  return createElement('a', {
    'data-dshloop-status': sessionId,
    ...(marked ? { 'data-dshloop-mark': summary.failed > 0 ? 'failed' : 'overdue' } : {}),
    ...(view.kind === 'error' ? { 'data-dshloop-stale': 'true' } : {}),
    href: answer.panelUrl,
    target: '_blank',
    rel: 'noopener',
    title: view.kind === 'error'
      ? `Last known; refreshing failed: ${view.message}`
      : 'This conversation\'s loops in the dshloop panel',
    style: { ...STYLE, ...(marked ? { color: '#b42318', fontWeight: 600 } : {}) },
  }, statusText(summary, now), marked ? MARK : null)
}

const MARK = createElement('span', { 'aria-hidden': 'true', style: { marginLeft: '4px' } }, '⚠')

const STYLE = {
  fontSize: '12px',
  lineHeight: '20px',
  whiteSpace: 'nowrap',
  textDecoration: 'none',
  color: 'inherit',
  opacity: 0.85,
  padding: '0 6px',
}
