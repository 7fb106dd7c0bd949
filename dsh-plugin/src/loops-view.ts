/**
 * The Loops panel in DSH Web as plain data (contract §15): a loop's words (state, target, times) in
 * dshloop's own panel's vocabulary, and the create/edit form turned into the API's input. No DOM,
 * no React: the node test runner checks it, and the web half only renders its result.
 */

import { controlOf, controlsOf, kindOf, SCHEDULE_KINDS, type ScheduleControl } from './schedule-kinds.ts'
import { countdown, duration } from './status.ts'

export interface PanelLoop {
  readonly loop_id: string
  readonly prompt: string
  /** `kind` and the fields that kind takes (SCHEDULE_KINDS), e.g. `{ kind: 'every', every_seconds: 600 }`. */
  readonly schedule: { readonly kind: string; readonly [field: string]: string | number | undefined }
  readonly session_id: string
  readonly preset?: string
  readonly state: string
  readonly next_at?: number
  readonly last_run_at?: number
  readonly last_result?: string
  readonly last_error?: string
  readonly name?: string
  readonly revision?: number
  readonly pause_reason?: string
  /** Failed scheduled runs in a row: each pushes the next run back (dshloop's failure backoff). */
  readonly consecutive_failures?: number
  readonly schedule_text?: string
  readonly workspace?: string
  readonly permission_preset?: string
  readonly overlap?: string
  /** contract §16: where the loop ends (epoch ms, a count of delivered runs; null when unset). */
  readonly ends_at?: number | null
  readonly max_runs?: number | null
  readonly runs_delivered?: number
}

export const AWAITING_APPROVAL = 'awaiting approval'

/** The state in dshloop's panel's words: "awaiting approval" is a paused loop waiting for a person. */
export function stateWords(loop: PanelLoop): string {
  if (loop.state === 'paused') return loop.pause_reason === AWAITING_APPROVAL ? AWAITING_APPROVAL : 'paused'
  return loop.state
}

/** Whether a loop is drawn as a problem: it failed, or its latest finished run did (contract §15). */
export function isFailing(loop: PanelLoop): boolean {
  return loop.state === 'failed' || loop.last_result === 'failed'
}

/** The target as spec §8.2 shows it: `self`, `new`, or the session's title with its ID. */
export function targetWords(sessionId: string, titles: Readonly<Record<string, string>>): string {
  if (sessionId === 'self' || sessionId === 'new') return sessionId
  const title = titles[sessionId]
  return title ? `${title} (${sessionId})` : sessionId
}

/**
 * The list in the order the person has been looking at: dshloop lists loops by next run, which
 * changes every time one fires, so re-sorting each refresh would move a row from under the pointer.
 * Loops already shown keep their places (`shown`, their IDs in the order drawn), the ones gone drop
 * out, and loops new to the list come after them in dshloop's order. Without `shown` (the first
 * answer, or a deliberate re-sort) it is dshloop's order.
 */
export function keepOrder<L extends { readonly loop_id: string }>(shown: readonly string[] | undefined, loops: readonly L[]): L[] {
  if (shown === undefined) return [...loops]
  const place = new Map(shown.map((loopId, index) => [loopId, index]))
  const known = loops.filter(loop => place.has(loop.loop_id))
  known.sort((a, b) => (place.get(a.loop_id) ?? 0) - (place.get(b.loop_id) ?? 0))
  return [...known, ...loops.filter(loop => !place.has(loop.loop_id))]
}

/** The first words of a prompt, on one line. */
export function preview(prompt: string, limit = 120): string {
  const line = prompt.replace(/\s+/g, ' ').trim()
  return line.length <= limit ? line : `${line.slice(0, limit - 1)}…`
}

/** `3m 05s ago`, `just now`. */
export function ago(at: number, now: number): string {
  const seconds = Math.round((now - at) / 1000)
  return seconds < 2 ? 'just now' : `${duration(seconds)} ago`
}

/**
 * The actions a loop offers; the operations decide what is allowed, these leave out no-ops. A loop
 * whose last run failed offers Retry in place of Run now: for a failed one-shot that is dshloop's
 * retry, for a recurring loop (still scheduled after a failed turn) a run now (retryOp).
 */
export function actionsOf(loop: PanelLoop): string[] {
  const actions: string[] = []
  if (loop.state === 'completed') return ['delete']
  if (loop.state === 'paused') actions.push(loop.pause_reason === AWAITING_APPROVAL ? 'approve' : 'resume')
  else if (loop.state !== 'failed') actions.push('pause')
  actions.push(isFailing(loop) ? 'retry' : 'run')
  actions.push('edit', 'delete')
  return actions
}

/** The panel op an action is: Retry of a loop that is not itself failed runs it now. */
export function opOf(loop: PanelLoop, action: string): string {
  return action === 'retry' && loop.state !== 'failed' ? 'run' : action
}

export const ACTION_LABELS: Readonly<Record<string, string>> = {
  pause: 'Pause',
  resume: 'Resume',
  approve: 'Approve',
  run: 'Run now',
  retry: 'Retry',
  edit: 'Edit',
  delete: 'Delete',
}

// -- the form ---------------------------------------------------------------------------------------

/** Whether the chosen kind takes a field typed in this control. */
const takes = (control: ScheduleControl) => (form: LoopForm): boolean => controlsOf(form.kind).some(field => field.control === control)

export type Target = 'current' | 'self' | 'new' | 'session'

export interface LoopForm {
  readonly name: string
  readonly prompt: string
  /** One of SCHEDULE_KINDS' `kind`s. */
  readonly kind: string
  readonly seconds: string
  readonly expr: string
  readonly tz: string
  readonly target: Target
  /** The session picked by title (target "session"). */
  readonly session: string
  readonly preset: string
  readonly workspace: string
  readonly permission_preset: string
  readonly overlap: string
  /** The instant the loop ends, as a datetime-local input holds it (the browser's own zone). */
  readonly ends_at: string
  readonly max_runs: string
}

export type FormMode = 'create' | 'edit'

/**
 * The form's fields in order: what each is, when it shows. Adding a field is one row here, one
 * line in toInput/toChanges and, for an edit, one in formOf.
 */
export interface FieldSpec {
  readonly key: keyof LoopForm
  readonly label: string
  readonly control: 'text' | 'textarea' | 'select' | 'number' | 'datetime'
  readonly options?: readonly (readonly [string, string])[]
  readonly show: (form: LoopForm, mode: FormMode, unattended: boolean) => boolean
  readonly hint?: string
}

const always = (): boolean => true
const whenNew = (form: LoopForm): boolean => form.target === 'new'

export const FORM_FIELDS: readonly FieldSpec[] = [
  { key: 'name', label: 'Name', control: 'text', show: (_form, mode) => mode === 'edit', hint: 'For people; empty removes it.' },
  { key: 'prompt', label: 'Prompt', control: 'textarea', show: always },
  {
    key: 'kind',
    label: 'Schedule',
    control: 'select',
    options: SCHEDULE_KINDS.map(({ kind, label }) => [kind, label] as const),
    show: always,
  },
  // Each shows when the chosen kind takes a field typed in it.
  { key: 'seconds', label: 'Seconds', control: 'number', show: takes('seconds') },
  { key: 'expr', label: 'Cron expression', control: 'text', show: takes('expr'), hint: 'e.g. 30 9 * * 1-5' },
  { key: 'tz', label: 'Time zone', control: 'text', show: takes('tz'), hint: 'IANA name; empty: the host\'s' },
  { key: 'target', label: 'Target', control: 'select', show: always },
  { key: 'session', label: 'Session', control: 'select', show: form => form.target === 'session' },
  { key: 'preset', label: 'Preset', control: 'text', show: whenNew, hint: 'Optional: a DSH preset for the fresh sessions' },
  { key: 'workspace', label: 'Workspace', control: 'text', show: (form, mode, unattended) => mode === 'edit' && unattended && whenNew(form) },
  { key: 'permission_preset', label: 'Permission preset', control: 'text', show: (form, mode, unattended) => mode === 'edit' && unattended && whenNew(form) },
  {
    key: 'overlap',
    label: 'Overlap',
    control: 'select',
    options: [['allow', 'allow: every run starts a fresh session'], ['skip', 'skip a run while the previous one runs']],
    show: (form, mode, unattended) => mode === 'edit' && unattended && whenNew(form),
  },
  { key: 'ends_at', label: 'Ends at', control: 'datetime', show: (_form, mode) => mode === 'edit', hint: 'The last run is the last occurrence at or before it; empty: never' },
  { key: 'max_runs', label: 'Ends after', control: 'number', show: (_form, mode) => mode === 'edit', hint: 'delivered runs; empty: no limit' },
]

export function emptyForm(currentSession: string | undefined): LoopForm {
  return {
    name: '',
    prompt: '',
    kind: SCHEDULE_KINDS[0]?.kind ?? '',
    seconds: '600',
    expr: '',
    tz: '',
    target: currentSession === undefined ? 'session' : 'current',
    session: '',
    preset: '',
    workspace: '',
    permission_preset: '',
    overlap: 'allow',
    ends_at: '',
    max_runs: '',
  }
}

/** The form holding a loop as it is, for an edit. */
export function formOf(loop: PanelLoop, currentSession: string | undefined): LoopForm {
  const schedule = loop.schedule
  // What the loop's schedule holds, in the control each field is typed in.
  const typed = (control: ScheduleControl): string => {
    const field = controlsOf(schedule.kind).find(known => known.control === control)
    const value = field === undefined ? undefined : schedule[field.name]
    return value === undefined ? '' : String(value)
  }
  const reserved = loop.session_id === 'self' || loop.session_id === 'new'
  return {
    ...emptyForm(currentSession),
    name: loop.name ?? '',
    prompt: loop.prompt,
    // A kind this plugin does not know stays the form's first.
    ...(kindOf(schedule.kind) === undefined ? {} : { kind: schedule.kind }),
    seconds: typed('seconds'),
    expr: typed('expr'),
    tz: typed('tz'),
    target: reserved ? (loop.session_id as Target) : loop.session_id === currentSession ? 'current' : 'session',
    session: reserved ? '' : loop.session_id,
    preset: loop.preset ?? '',
    workspace: loop.workspace ?? '',
    permission_preset: loop.permission_preset ?? '',
    overlap: loop.overlap ?? 'allow',
    ends_at: loop.ends_at == null ? '' : localInput(loop.ends_at),
    max_runs: loop.max_runs == null ? '' : String(loop.max_runs),
  }
}

/** An instant as a datetime-local input shows it: the browser's own zone, to the minute. */
export function localInput(ms: number): string {
  const at = new Date(ms)
  const two = (n: number): string => String(n).padStart(2, '0')
  return `${at.getFullYear()}-${two(at.getMonth() + 1)}-${two(at.getDate())}T${two(at.getHours())}:${two(at.getMinutes())}`
}

/** What a person typed as an end, as the API takes it: epoch ms, a whole count, or null to clear. */
function endsOf(form: LoopForm): { ends_at: number | null; max_runs: unknown } {
  const when = form.ends_at.trim()
  let endsAt: number | null = null
  if (when !== '') {
    endsAt = new Date(when).getTime()
    if (Number.isNaN(endsAt)) throw new FormError('ends_at', 'Give a date and time, or leave it empty for no end.')
  }
  const count = form.max_runs.trim()
  // A whole number as JSON: anything else is sent as typed, for dshloop to refuse on its field.
  const maxRuns: unknown = count === '' ? null : /^\d{1,10}$/.test(count) ? Number(count) : count
  return { ends_at: endsAt, max_runs: maxRuns }
}

/**
 * When the loop runs next, and why then when it is not the schedule's own time: after failed
 * scheduled runs in a row dshloop holds the next one back (longer after each, then pauses the loop),
 * so "every minute" can read "next in 5m 50s". Undefined when it has no next run.
 */
export function nextWords(loop: PanelLoop, now: number): string | undefined {
  if (loop.next_at === undefined) return undefined
  const failures = loop.consecutive_failures ?? 0
  const held = failures > 0 && loop.state !== 'paused' && loop.state !== 'completed'
  return `next ${countdown(loop.next_at, now)}${held ? ` · held back after ${failures === 1 ? 'a failed run' : `${failures} failed runs in a row`}` : ''}`
}

/**
 * The last run, in the words a run's card and the Runs list use: a failure is "failed"; a delivered
 * run's turn is the run's own (turn running, succeeded, failed: …), given as `latest` (its words
 * from the newest run the panel holds of the loop) when known, else nothing more is said. So a
 * Retry's run reads "turn running" here while the composer, which knows no turns, drops "failed".
 */
export function lastRunWords(loop: PanelLoop, now: number, latest?: string): string | undefined {
  if (loop.last_run_at === undefined) return undefined
  const result = loop.last_result === 'failed' ? ' · failed' : latest === undefined ? '' : ` · ${latest}`
  return `last run ${ago(loop.last_run_at, now)}${result}`
}

/** How a loop ends, in words, or undefined when it has no end. */
export function endsWords(loop: PanelLoop, now: number): string | undefined {
  const parts: string[] = []
  // runs_delivered counts the schedule's own delivered runs: Run now and Retry are a person's extra
  // runs, which neither count towards the end nor move it.
  if (loop.max_runs != null) {
    parts.push(`after ${loop.max_runs} scheduled runs (${loop.runs_delivered ?? 0} so far; Run now and Retry do not count)`)
  }
  if (loop.ends_at != null) parts.push(loop.ends_at > now ? `in ${duration(Math.round((loop.ends_at - now) / 1000))}` : 'now')
  return parts.length === 0 ? undefined : `ends ${parts.join(' or ')}`
}

/** A form field's own refusal: a person fixes what they can see. */
export class FormError extends Error {
  readonly field: keyof LoopForm
  constructor(field: keyof LoopForm, message: string) {
    super(message)
    this.field = field
  }
}

type Input = { [key: string]: unknown }

/** The chosen kind and each field it takes, from the control it is typed in; an empty optional one is left out. */
function scheduleOf(form: LoopForm): Input {
  const schedule: Input = { kind: form.kind }
  for (const field of controlsOf(form.kind)) {
    const text = field.control === undefined ? '' : form[field.control].trim()
    if (text === '' && !field.required) continue
    // A whole number as JSON: anything else is sent as it was typed, for dshloop to refuse on its field.
    schedule[field.name] = field.type === 'integer' && /^\d{1,16}$/.test(text) ? Number(text) : text
  }
  return schedule
}

function targetOf(form: LoopForm, currentSession: string | undefined): string {
  if (form.target === 'current') {
    if (currentSession === undefined) throw new FormError('target', 'There is no current session here: pick one.')
    return currentSession
  }
  if (form.target === 'session') {
    if (form.session === '') throw new FormError('session', 'Pick the session the loop delivers to.')
    return form.session
  }
  return form.target
}

/** `POST /api/loops` input (loop_create's): dshloop validates it and says what is wrong where. */
export function toInput(form: LoopForm, currentSession: string | undefined): Input {
  const target = targetOf(form, currentSession)
  return {
    prompt: form.prompt,
    schedule: scheduleOf(form),
    session_id: target,
    ...(target === 'new' && form.preset.trim() ? { preset: form.preset.trim() } : {}),
  }
}

/** `PATCH /api/loops/<id>` changes: only what differs from the loop, so the revision says what moved. */
export function toChanges(form: LoopForm, loop: PanelLoop, currentSession: string | undefined): Input {
  const changes: Input = {}
  const name = form.name.trim()
  if (name !== (loop.name ?? '')) changes.name = name === '' ? null : name
  if (form.prompt !== loop.prompt) changes.prompt = form.prompt
  const schedule = scheduleOf(form)
  if (JSON.stringify(schedule) !== JSON.stringify(loop.schedule)) changes.schedule = schedule
  const target = targetOf(form, currentSession)
  if (target !== loop.session_id) changes.session_id = target
  if (target === 'new') {
    const preset = form.preset.trim()
    if (preset !== (loop.preset ?? '') && preset !== '') changes.preset = preset
    // A loop becoming `new` takes the defaults; those of a `new` loop are edited as they are.
    if (loop.session_id === 'new') {
      if (form.workspace !== (loop.workspace ?? '')) changes.workspace = form.workspace.trim() === '' ? null : form.workspace.trim()
      if (form.permission_preset !== (loop.permission_preset ?? '')) {
        changes.permission_preset = form.permission_preset.trim() === '' ? null : form.permission_preset.trim()
      }
      if (form.overlap !== (loop.overlap ?? 'allow')) changes.overlap = form.overlap
    }
  }
  const ends = endsOf(form)
  // Compared as the form shows them (to the minute), so an untouched end is not sent again.
  if (form.ends_at !== (loop.ends_at == null ? '' : localInput(loop.ends_at))) changes.ends_at = ends.ends_at
  if (ends.max_runs !== (loop.max_runs ?? null)) changes.max_runs = ends.max_runs
  return changes
}

/** The form field a dshloop error names (contract §3 `field`, e.g. `schedule.every_seconds`). */
export function formFieldOf(field: string | undefined, form: LoopForm): keyof LoopForm | undefined {
  if (field === undefined || field === '') return undefined
  const path = field.split('.')
  const head = path[0] ?? ''
  if (head === 'schedule' || SCHEDULE_KINDS.some(kind => kind.fields.some(taken => taken.name === head))) {
    const last = path[path.length - 1] ?? ''
    if (last === 'kind') return 'kind'
    // The field's own control; for the schedule as a whole, the chosen kind's first.
    return controlOf(last) ?? controlsOf(form.kind).find(taken => taken.control !== undefined)?.control ?? 'kind'
  }
  if (head === 'session_id') return form.target === 'session' ? 'session' : 'target'
  const known: readonly string[] = FORM_FIELDS.map(spec => spec.key)
  return known.includes(head) ? (head as keyof LoopForm) : undefined
}
