/**
 * The web half's runtime, apart from the views that use it: polling the plugin's loopback channel
 * while the page is visible, turning its answers into values or errors, and the switch tests use to
 * force a fault. No DOM and no React here (the React glue is hooks.ts): the node test runner checks
 * it as it is.
 */

/** The channel the host half answers on (index.ts `handleRpc`). */
export const CHANNEL = '/dshloop'

/** DSH Web's loopback RPC, as a client plugin gets it (`ctx.connection.rpc.call`). */
export type RpcCall = (channel: string, endpoint: string, payload: unknown) => Promise<unknown>

/** A refusal or failure from the host half: dshloop's code, its sentence, and the input field it names. */
export class RpcError extends Error {
  readonly code: string
  readonly field: string | undefined
  constructor(code: string, message: string, field?: string) {
    super(message)
    this.code = code
    this.field = field
  }

  /** dshloop or the host half could not be reached, as opposed to refusing. */
  get unreachable(): boolean {
    return this.code === 'unreachable' || this.code === 'timeout'
  }
}

/**
 * The value of one channel answer, `{ok: true, value}`; a failure (`{ok: false, error}`) or a
 * refusal the host half passes on (`value.refused`, the panel's writes) is thrown as an RpcError.
 */
export function unwrap(result: unknown, missing: string): unknown {
  const answer = result as {
    ok?: boolean
    value?: { refused?: { code?: string; message?: string; field?: unknown } }
    error?: { code?: string; message?: string; field?: unknown }
  } | null | undefined
  const refused = answer?.ok === true ? answer.value?.refused : answer?.error
  if (answer?.ok === true && refused === undefined && answer.value !== undefined) return answer.value
  const field = refused?.field
  throw new RpcError(refused?.code ?? 'internal', refused?.message ?? missing, typeof field === 'string' ? field : undefined)
}

/** One endpoint of the channel, its answers unwrapped. */
export function endpoint(call: RpcCall, name: string, missing: string): (payload: unknown) => Promise<unknown> {
  return async payload => unwrap(await call(CHANNEL, name, payload), missing)
}

export function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error)
}

/** Whether the page is hidden: a hidden page asks dshloop nothing, and catches up when shown. */
export function pageHidden(): boolean {
  return typeof document !== 'undefined' && document.hidden
}

export interface PollOptions<T> {
  readonly load: () => Promise<T>
  readonly every: number
  readonly onValue: (value: T) => void
  readonly onError: (error: unknown) => void
  /** Whether to skip this round (the page is hidden); the next round asks again. */
  readonly skip?: () => boolean
  readonly timers?: {
    set(callback: () => void, ms: number): unknown
    clear(handle: unknown): void
  }
}

/**
 * Asks `load` now and again `every` ms after each answer (never two at once), until the returned
 * stop is called; nothing is reported after stop, even for an answer already on its way.
 */
export function poll<T>({ load, every, onValue, onError, skip = pageHidden, timers = TIMERS }: PollOptions<T>): () => void {
  let stopped = false
  let handle: unknown
  const round = async (): Promise<void> => {
    if (!skip()) {
      try {
        const value = await load()
        if (!stopped) onValue(value)
      } catch (error) {
        if (!stopped) onError(error)
      }
    }
    if (!stopped) handle = timers.set(() => void round(), every)
  }
  void round()
  return () => {
    stopped = true
    if (handle !== undefined) timers.clear(handle)
  }
}

const TIMERS = {
  set: (callback: () => void, ms: number): unknown => setTimeout(callback, ms),
  clear: (handle: unknown): void => clearTimeout(handle as ReturnType<typeof setTimeout>),
}

/**
 * A switch that forces a fault into the web half, for the tests that prove a fault there leaves DSH
 * Web usable: `window.DSHLOOP_FAULT` = "apply" (installing throws), "card" (drawing a card throws)
 * or "panel" (drawing the Loops panel throws). Nothing sets it but those tests.
 */
export function fault(): string {
  const value = (globalThis as { DSHLOOP_FAULT?: unknown }).DSHLOOP_FAULT
  return typeof value === 'string' ? value : ''
}
