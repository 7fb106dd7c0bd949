/**
 * What the web half uses of DSH Web 0.1.0-rc.8, typed here once (read from its installed
 * dsh-client-* packages and its page's module table; DSH ships no types for them).
 *
 * DSH Web hands a client module three things at run time: `require("react")` (its React),
 * `require("@deepseek-ai/dsh-client-ui-primitives")` (the UI pieces DSH Web is itself made of), and
 * the context its `apply(ctx)` gets. Typing only the calls the plugin makes spares it @types/react
 * and a second React in the lockfile.
 */

declare module 'react' {
  export type ReactNode = ReactElement | string | number | boolean | null | undefined | readonly ReactNode[]
  export interface ReactElement {
    readonly type: unknown
    readonly props: unknown
  }
  export type FunctionComponent<P> = (props: P) => ReactElement | null
  export function createElement(
    type: string | FunctionComponent<never> | (abstract new (props: never) => unknown),
    props?: Record<string, unknown> | null,
    ...children: ReactNode[]
  ): ReactElement
  export function useState<T>(initial: T | (() => T)): [T, (next: T | ((previous: T) => T)) => void]
  export function useEffect(effect: () => void | (() => void), deps?: readonly unknown[]): void
  export function useRef<T>(initial: T): { current: T }
  export class Component<P, S> {
    constructor(props: P)
    readonly props: P
    state: S
    setState(state: Partial<S>): void
  }
}

/**
 * DSH Web's own components (dsh-web-frontend's module table, `@deepseek-ai/dsh-client-ui-primitives`):
 * its Button (variants primary, ghost, outline, toolbar; sizes md, sm), Pill, Input (a wrapped
 * <input>), StateDot (done, warning, error, ongoing), Tooltip and icons. Their other props go to the
 * element they draw.
 */
declare module '@deepseek-ai/dsh-client-ui-primitives' {
  import type { FunctionComponent, ReactNode } from 'react'
  type Rest = { readonly [prop: string]: unknown }
  export const Button: FunctionComponent<Rest & {
    readonly variant?: 'primary' | 'ghost' | 'outline' | 'toolbar'
    readonly size?: 'md' | 'sm'
    readonly icon?: ReactNode
    readonly className?: string
    readonly children?: ReactNode
  }>
  export const Pill: FunctionComponent<Rest & { readonly active?: boolean; readonly className?: string; readonly children?: ReactNode }>
  export const Input: FunctionComponent<Rest & { readonly icon?: ReactNode; readonly className?: string }>
  export const StateDot: FunctionComponent<{ readonly state: 'done' | 'warning' | 'error' | 'ongoing' | 'idle'; readonly size?: number; readonly className?: string }>
  export const Tooltip: FunctionComponent<Rest & { readonly label: string; readonly delayMs?: number; readonly disabled?: boolean; readonly children?: ReactNode }>
  export const IconRefreshOutline16: FunctionComponent<{ readonly size?: number; readonly className?: string }>
}

/** The context DSH Web gives a client plugin's `apply` (the services named in its `inject`). */
declare module 'dsh:client' {
  import type { ReactElement } from 'react'

  export interface SlotOptions<P> {
    readonly name: string
    readonly id?: string
    readonly key?: string
    readonly order?: number
    readonly priority?: number
    readonly locale?: string
    readonly label?: () => string
    readonly inject?: (sessionId: string) => P
  }

  /** An entry another plugin (DSH's own) registered in a slot. */
  export interface ShippedEntry {
    readonly component?: unknown
    readonly options?: { readonly key?: string }
    readonly locale?: string
  }

  export interface ClientContext {
    effect(factory: () => void | (() => void), label?: string): void
    readonly sessions?: {
      open(id: string): void
      readonly list?: { getSnapshot(): { readonly byId?: Readonly<Record<string, { readonly title?: string } | undefined>> } }
    }
    readonly connection: {
      readonly rpc: { call(channel: string, endpoint: string, payload: unknown): Promise<unknown> }
    }
    readonly slots: {
      inject(name: string, register: () => void | (() => void)): void
      entries(name: string): readonly ShippedEntry[]
      register<P>(options: SlotOptions<P>, component: (props: P) => ReactElement | null): () => void
    }
  }
}
