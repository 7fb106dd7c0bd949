/**
 * The pieces the web half draws with, taken from DSH Web itself so that a person cannot tell where
 * DSH ends and dshloop begins, in light and dark themes: DSH Web's own Button, Pill, StateDot and
 * Tooltip (`@deepseek-ai/dsh-client-ui-primitives`, which DSH Web 0.1.0-rc.8 hands every client
 * module), and for the rest (cards, fields, selects) a small style sheet over DSH Web's design
 * tokens (`--dsw-alias-*`, which its themes set). A DSH Web without the primitives gets plain
 * elements with the same classes: never an error.
 *
 * Also the React glue of runtime.ts: usePoll, and the boundary that draws a fault in place.
 */

import type * as Primitives from '@deepseek-ai/dsh-client-ui-primitives'
import { Component, createElement as h, type ReactElement, type ReactNode, useEffect, useRef } from 'react'
import { errorText, poll } from './runtime.ts'

let loaded: typeof Primitives | null | undefined

/** DSH Web's primitives, or null where this DSH Web has none. */
export function primitives(): typeof Primitives | null {
  if (loaded === undefined) {
    try {
      loaded = require('@deepseek-ai/dsh-client-ui-primitives') as typeof Primitives
      if (typeof loaded?.Button !== 'function') loaded = null
    } catch {
      loaded = null
    }
  }
  return loaded
}

type Props = Record<string, unknown> & { readonly children?: ReactNode }

/** DSH Web's button: `primary` for the one thing to do, `outline` for the rest, `ghost` in rows. */
export function Button(variant: 'primary' | 'ghost' | 'outline', props: Props, ...children: ReactNode[]): ReactElement {
  const ui = primitives()
  const className = ['dshloop-button', props.className].filter(Boolean).join(' ')
  if (ui !== null) return h(ui.Button, { variant, size: 'sm', ...props, className }, ...children)
  return h('button', { type: 'button', ...props, className: `${className} dshloop-button--${variant}` }, ...children)
}

/** A small state word, drawn as DSH Web draws its own (a Pill), with its StateDot when it means something. */
export function Badge(tone: 'error' | 'warning' | 'done' | 'ongoing' | undefined, props: Props, text: string): ReactElement {
  const ui = primitives()
  const className = ['dshloop-badge', tone ? `dshloop-badge--${tone}` : '', props.className].filter(Boolean).join(' ')
  const dot = tone !== undefined && ui !== null ? h(ui.StateDot, { state: tone, size: 8 }) : null
  if (ui !== null) return h('span', { ...props, className }, h(ui.Pill, null, dot, text))
  return h('span', { ...props, className }, text)
}

/** A hint on hover and focus, DSH Web's own where it has one. */
export function Hint(label: string, child: ReactElement): ReactElement {
  const ui = primitives()
  return ui === null ? child : h(ui.Tooltip, { label, delayMs: 400 }, child)
}

const STYLE_ID = 'dshloop-styles'

// DSH Web's tokens only (its themes set them for light and dark); the fallbacks are for a page
// without them. Every class is dshloop's own: nothing here restyles DSH.
const CSS = String.raw`
.dshloop-panel,.dshloop-panel *{box-sizing:border-box}
.dshloop-panel{width:100%;max-width:100%;min-width:0;padding:16px;color:var(--dsw-alias-label-primary,CanvasText);font-family:var(--dsw-font-family,system-ui);font-size:13px;line-height:20px;overflow-wrap:anywhere}
.dshloop-header{display:flex;flex-wrap:wrap;gap:8px;align-items:center;margin-bottom:12px}
.dshloop-title{font-size:16px;line-height:24px;font-weight:600;flex:1 1 auto;min-width:0}
.dshloop-row{display:flex;flex-wrap:wrap;gap:6px 10px;align-items:center;min-width:0}
.dshloop-card{border:1px solid var(--dsw-alias-border-l2,rgba(127,127,127,.35));border-radius:12px;background:var(--dsw-alias-bg-layer-1,transparent);padding:12px 14px;margin:8px 0;min-width:0}
.dshloop-card--failing{border-color:color-mix(in srgb,var(--dsw-alias-state-error-primary,#d92d20) 55%,var(--dsw-alias-border-l2,transparent))}
.dshloop-name{font:inherit;font-weight:600;font-size:14px;background:none;border:none;padding:0;color:inherit;cursor:pointer;text-align:left;min-width:0;flex:1 1 12em}
.dshloop-name:hover{color:var(--dsw-alias-state-business-primary,inherit)}
.dshloop-meta{color:var(--dsw-alias-label-secondary,inherit);font-size:12px;line-height:18px}
.dshloop-muted{color:var(--dsw-alias-label-tertiary,inherit)}
.dshloop-error{color:var(--dsw-alias-state-error-primary,#b42318);font-size:12px;line-height:18px}
.dshloop-section{font-size:12px;font-weight:600;color:var(--dsw-alias-label-secondary,inherit);margin:16px 0 4px}
.dshloop-actions{display:flex;flex-wrap:wrap;gap:6px;margin-top:8px}
.dshloop-button{max-width:100%}
.dshloop-button--outline{border:1px solid var(--dsw-alias-border-l2,rgba(127,127,127,.5));background:transparent;color:inherit;border-radius:14px;padding:0 10px;height:28px;font:inherit;font-size:12px;cursor:pointer}
.dshloop-button--primary{border:none;background:var(--dsw-alias-button-primary-fill,#333);color:var(--dsw-alias-label-primary-foreground,#fff);border-radius:14px;padding:0 12px;height:28px;font:inherit;font-size:12px;font-weight:600;cursor:pointer}
.dshloop-button--ghost{border:none;background:transparent;color:inherit;border-radius:14px;padding:0 10px;height:28px;font:inherit;font-size:12px;cursor:pointer}
.dshloop-button.dshloop-danger{color:var(--dsw-alias-state-error-primary,#b42318)}
.dshloop-badge{display:inline-flex;flex:none;font-size:12px}
.dshloop-badge--error{color:var(--dsw-alias-state-error-primary,#b42318)}
.dshloop-badge--error>*{color:var(--dsw-alias-state-error-primary,#b42318)}
.dshloop-badge--warning>*{color:var(--dsw-alias-state-warn-label,inherit)}
.dshloop-field{display:grid;gap:4px;min-width:0;font-size:12px;color:var(--dsw-alias-label-secondary,inherit)}
.dshloop-input{display:block;width:100%;max-width:100%;min-width:0;height:32px;padding:0 8px;border:1px solid var(--dsw-alias-border-l2,rgba(127,127,127,.5));border-radius:8px;background:var(--dsw-alias-bg-layer-1,transparent);color:var(--dsw-alias-label-primary,inherit);font:inherit;font-size:13px;outline:none}
textarea.dshloop-input{height:auto;min-height:72px;padding:6px 8px;resize:vertical}
.dshloop-input:focus{border-color:var(--dsw-alias-state-business-primary,Highlight)}
select.dshloop-input{appearance:none;-webkit-appearance:none;padding-right:28px;cursor:pointer;background-image:url("data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' width='14' height='14' viewBox='0 0 14 14'%3E%3Cpath d='M3.5 5.25 7 8.75l3.5-3.5' fill='none' stroke='%23888' stroke-width='1.3' stroke-linecap='round' stroke-linejoin='round'/%3E%3C/svg%3E");background-repeat:no-repeat;background-position:right 8px center}
select.dshloop-input option{background:var(--dsw-alias-bg-base,Canvas);color:var(--dsw-alias-label-primary,CanvasText)}
.dshloop-filters{display:grid;grid-template-columns:repeat(auto-fit,minmax(150px,1fr));gap:8px}
.dshloop-form{display:grid;gap:10px;min-width:0}
.dshloop-run{display:flex;flex-wrap:wrap;gap:4px 10px;align-items:center;padding:6px 8px;margin:0 -8px;border-radius:8px;font-size:12px;line-height:18px;min-width:0}
button.dshloop-run{width:calc(100% + 16px);border:none;background:none;color:inherit;font:inherit;font-size:12px;text-align:left;cursor:pointer}
button.dshloop-run:hover{background:var(--dsw-alias-interactive-bg-hover,rgba(127,127,127,.12))}
.dshloop-overlay{position:fixed;inset:0;z-index:1000;pointer-events:auto;background:var(--dsw-alias-bg-mask-1,rgba(0,0,0,.35));display:flex;justify-content:center;align-items:flex-start;padding:min(6vh,48px) 0 0}
.dshloop-dialog{background:var(--dsw-alias-bg-base,Canvas);color:var(--dsw-alias-label-primary,CanvasText);width:min(960px,100vw);max-height:calc(100vh - min(6vh,48px));overflow-y:auto;border:1px solid var(--dsw-alias-border-l2,transparent);border-radius:16px;box-shadow:var(--dsw-shadow-lv3,0 8px 32px rgba(0,0,0,.25))}
.dshloop-sidebar-action{display:flex;align-items:center;gap:8px;width:100%;height:32px;padding:0 8px;border:none;border-radius:8px;background:transparent;color:var(--dsw-alias-label-secondary,inherit);font:inherit;font-size:13px;cursor:pointer;text-align:left}
.dshloop-sidebar-action:hover{background:var(--dsw-alias-interactive-bg-hover,rgba(127,127,127,.12));color:var(--dsw-alias-label-primary,inherit)}
.dshloop-sidebar-action--rail{justify-content:center;width:36px;height:36px;padding:0;margin:0 auto}
.dshloop-sidebar-action svg{flex:none}
@media (max-width:560px){.dshloop-panel{padding:12px}.dshloop-dialog{border-radius:0;border:none;max-height:100vh}.dshloop-overlay{padding:0}}
`

/** Puts the style sheet in the page once; it stays for as long as the plugin does. */
export function installStyles(): () => void {
  if (typeof document === 'undefined' || document.getElementById(STYLE_ID) !== null) return () => undefined
  const style = document.createElement('style')
  style.id = STYLE_ID
  style.textContent = CSS
  document.head.append(style)
  return () => style.remove()
}

/**
 * Polls `load` (runtime.ts `poll`) while mounted and visible, restarting when `deps` change; the
 * latest `onValue`/`onError` are called, so a render's handlers never go stale.
 */
export function usePoll<T>(load: () => Promise<T>, every: number, onValue: (value: T) => void, onError: (error: unknown) => void, deps: readonly unknown[]): void {
  const handlers = useRef({ load, onValue, onError })
  handlers.current = { load, onValue, onError }
  useEffect(() => poll<T>({
    load: () => handlers.current.load(),
    every,
    onValue: value => handlers.current.onValue(value),
    onError: error => handlers.current.onError(error),
  }), deps)
}

interface BoundaryProps {
  readonly fallback: (error: string) => ReactNode
  readonly label: string
  readonly children?: ReactNode
}

/** An error while drawing what it wraps draws `fallback` in its place: DSH Web around it keeps working. */
export class Boundary extends Component<BoundaryProps, { error: string | undefined }> {
  constructor(props: BoundaryProps) {
    super(props)
    this.state = { error: undefined }
  }

  static getDerivedStateFromError(error: unknown): { error: string } {
    return { error: errorText(error) }
  }

  componentDidCatch(error: unknown): void {
    console.error(`dshloop: ${this.props.label} failed`, error)
  }

  render(): ReactNode {
    return this.state.error === undefined ? this.props.children : this.props.fallback(this.state.error)
  }
}

/** dshloop's mark (a loop), drawn like DSH Web's 16 px outline icons. */
export function LoopIcon(size: number): ReactElement {
  return h('svg', { width: size, height: size, viewBox: '0 0 16 16', fill: 'none', 'aria-hidden': 'true' },
    h('path', {
      d: 'M13.5 8a5.5 5.5 0 1 1-1.61-3.89M13.5 2.5v3h-3',
      stroke: 'currentColor',
      strokeWidth: 1.3,
      strokeLinecap: 'round',
      strokeLinejoin: 'round',
    }))
}
