/**
 * The little of React the composer status and the loop cards use. DSH Web supplies React at run time (its module
 * loader answers `require("react")`); typing only these calls spares the plugin @types/react and a
 * second React version in the lockfile.
 */
declare module 'react' {
  export type ReactNode = ReactElement | string | number | null | undefined | readonly ReactNode[]
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
  export class Component<P, S> {
    constructor(props: P)
    readonly props: P
    state: S
    setState(state: Partial<S>): void
  }
}
