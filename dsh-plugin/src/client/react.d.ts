/**
 * The little of React the composer status uses. DSH Web supplies React at run time (its module
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
    type: string | FunctionComponent<never>,
    props?: Record<string, unknown> | null,
    ...children: ReactNode[]
  ): ReactElement
  export function useState<T>(initial: T | (() => T)): [T, (next: T | ((previous: T) => T)) => void]
  export function useEffect(effect: () => void | (() => void), deps?: readonly unknown[]): void
}
