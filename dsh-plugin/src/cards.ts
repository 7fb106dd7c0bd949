/**
 * What a loop card in DSH Web shows beside the message it stands for (contract §15): the loop's
 * name and schedule in dshloop's own words, its state and last error, and how each of its runs
 * went. `POST /dshloop/cards {loopIds}` from DSH Web; the host half asks dshloop with its token
 * (the browser holds none): per loop, its detail (`GET /api/loops/<id>`, scope `manage`) and its
 * newest runs (`GET /api/loops/<id>/runs`, scope `tools`): two index reads per loop on view. A loop
 * deleted since has no detail (404 unknown_loop) but keeps its runs (spec §4): its card shows how
 * the run went, marked as a deleted loop's, and its title stays the message's summary.
 */

import { DshloopError, type Endpoint, getJson, type Json } from './dshloop.ts'

/** Loops one call may ask about: what one screen of a conversation can show. */
export const MAX_CARD_LOOPS = 20
/** Runs read per loop: a card of an older run shows no outcome (it is still in dshloop's panel). */
export const CARD_RUNS = 100

export interface CardLoop {
  readonly loop_id: string
  readonly deleted: boolean
  readonly name?: string
  readonly prompt?: string
  readonly schedule_text?: string
  readonly state?: string
  readonly last_result?: string
  readonly last_error?: string
  readonly pause_reason?: string
  readonly panelUrl: string
  readonly runs: Readonly<Record<string, CardRun>>
}

export interface CardRun {
  readonly status: string
  readonly outcome?: string
  readonly error?: string
}

export function parseLoopIds(payload: unknown): string[] {
  const ids = (payload as { loopIds?: unknown } | null)?.loopIds
  if (!Array.isArray(ids) || ids.length === 0 || ids.length > MAX_CARD_LOOPS) {
    throw new DshloopError('bad-request', `loopIds must list 1 to ${MAX_CARD_LOOPS} loop IDs`)
  }
  if (!ids.every(id => typeof id === 'string' && id !== '' && id.length <= 120)) {
    throw new DshloopError('bad-request', 'each loop ID must be a non-empty string')
  }
  return [...new Set(ids as string[])]
}

/** The loop's page in dshloop's own panel (until DSH Web has a Loops panel of its own). */
export function loopPanelUrl(dshloopUrl: string, loopId: string): string {
  return `${dshloopUrl.replace(/\/+$/, '')}/panel/loops/${encodeURIComponent(loopId)}/`
}

function text(value: Json | undefined): string | undefined {
  return typeof value === 'string' && value !== '' ? value : undefined
}

export async function loopCard(endpoint: Endpoint, loopId: string, signal?: AbortSignal): Promise<CardLoop> {
  const path = `/api/loops/${encodeURIComponent(loopId)}`
  const panelUrl = loopPanelUrl(endpoint.url, loopId)
  let detail: { [key: string]: Json }
  try {
    detail = await getJson(endpoint, path, signal) as { [key: string]: Json }
  } catch (error) {
    if (error instanceof DshloopError && error.code === 'unknown_loop') {
      return { loop_id: loopId, deleted: true, panelUrl, runs: await cardRuns(endpoint, path, signal) }
    }
    throw error
  }
  const runs = await cardRuns(endpoint, path, signal)
  const optional = (name: string) => (text(detail[name]) === undefined ? {} : { [name]: text(detail[name]) })
  return {
    loop_id: loopId,
    deleted: false,
    ...optional('name'),
    ...optional('prompt'),
    ...optional('schedule_text'),
    ...optional('state'),
    ...optional('last_result'),
    ...optional('last_error'),
    ...optional('pause_reason'),
    panelUrl,
    runs,
  }
}

/** The loop's newest runs by run ID. Runs outlive their loop (a deleted loop's answer too); a failure
 * to read them leaves the card without outcomes, not blank. */
async function cardRuns(endpoint: Endpoint, path: string, signal?: AbortSignal): Promise<Record<string, CardRun>> {
  const listed = await getJson(endpoint, `${path}/runs?limit=${CARD_RUNS}`, signal).catch(() => ({ runs: [] }))
  const runs: Record<string, CardRun> = {}
  for (const run of (listed as { runs?: Json }).runs as Json[] ?? []) {
    const item = run as { [key: string]: Json }
    if (typeof item.run_id !== 'string') continue
    const outcome = text(item.outcome), error = text(item.error)
    runs[item.run_id] = {
      status: String(item.status ?? ''),
      ...(outcome === undefined ? {} : { outcome }),
      ...(error === undefined ? {} : { error }),
    }
  }
  return runs
}

export async function loopCards(endpoint: Endpoint, payload: unknown, signal?: AbortSignal): Promise<Record<string, CardLoop>> {
  const ids = parseLoopIds(payload)
  const cards = await Promise.all(ids.map(id => loopCard(endpoint, id, signal)))
  return Object.fromEntries(cards.map(card => [card.loop_id, card]))
}
