/**
 * A delivery's confirmation: DSH counts a message delivered once its session's log holds the
 * `user/message` (a message still pending in the inbox when DSH stops is cancelled), so the channel's
 * `deliver` answers only then, with the message's ID, or says it is not logged yet after a while.
 * Without this dshloop read the session's history back every 0.2 s until it saw the message: most of
 * the DSH calls a delivery made, each on DSH's one thread.
 *
 * DSH appends every session event synchronously and tells `session/event` listeners at once
 * (dsh-session's `Session.append`); `session.history` serves an attached session from the same
 * in-memory log, so what is confirmed here is what dshloop would have read there. A waiter is
 * registered before the message is sent, so nothing logged in between is missed.
 */

import { deliveryKeyOf, type LoggedEvent, messageIdOf } from './deliver.ts'

interface Waiter {
  readonly sessionId: string
  readonly resolve: (messageId: string) => void
}

export interface Expected {
  /** The logged message's ID, or undefined when `ms` passed (or the call was aborted) first. */
  within(ms: number, signal?: AbortSignal): Promise<string | undefined>
  /** Stop waiting (also done by `within` when it settles). */
  cancel(): void
}

export class Confirmations {
  private readonly waiting = new Map<string, Set<Waiter>>()

  /** One session event, as DSH's `session/event` hands it over: a waited-for message resolves its waiters. */
  observe(sessionId: string, event: LoggedEvent): void {
    if (event.type !== 'user/message' || this.waiting.size === 0) return
    const key = deliveryKeyOf(event.data)
    if (typeof key !== 'string') return
    for (const waiter of this.waiting.get(key) ?? []) {
      if (waiter.sessionId === sessionId) waiter.resolve(messageIdOf(event))
    }
  }

  /** Wait for the `user/message` carrying `key` in `sessionId`'s log, from now on. */
  expect(sessionId: string, key: string): Expected {
    let logged: string | undefined
    let wake: (() => void) | undefined
    const waiter: Waiter = {
      sessionId,
      resolve: messageId => {
        logged ??= messageId
        wake?.()
      },
    }
    const waiters = this.waiting.get(key) ?? new Set<Waiter>()
    waiters.add(waiter)
    this.waiting.set(key, waiters)
    const cancel = (): void => {
      waiters.delete(waiter)
      if (waiters.size === 0 && this.waiting.get(key) === waiters) this.waiting.delete(key)
    }
    return {
      cancel,
      async within(ms: number, signal?: AbortSignal): Promise<string | undefined> {
        try {
          if (logged === undefined && ms > 0 && !signal?.aborted) {
            await new Promise<void>(resolve => {
              const done = (): void => {
                clearTimeout(timer)
                signal?.removeEventListener('abort', done)
                resolve()
              }
              const timer = setTimeout(done, ms)
              signal?.addEventListener('abort', done)
              wake = done
            })
          }
          return logged
        } finally {
          cancel()
        }
      },
    }
  }

  /** How many deliveries wait (for the tests). */
  get size(): number {
    return this.waiting.size
  }
}
