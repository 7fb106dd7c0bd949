/**
 * The schedule kinds the Loops panel form offers, as dshloop describes them once (timing.schedules;
 * `manage.py schedule_kinds` writes schedule-kinds.json, a dshloop test keeps it current), and the
 * form control each kind's fields are typed in. Only the web half (loops-view.ts) imports it.
 */

import scheduleKinds from './schedule-kinds.json' with { type: 'json' }

/** A kind: its name, how a person picks it, the fields its schedule takes. */
export interface ScheduleKind {
  readonly kind: string
  readonly label: string
  readonly fields: readonly KindField[]
}

/** A field a kind's schedule takes: its name, its JSON type (`integer` or `string`), whether it must be given. */
export interface KindField {
  readonly name: string
  readonly type: string
  readonly required: boolean
}

/** The kinds the form offers, in dshloop's order; the first is a new loop's. */
export const SCHEDULE_KINDS: readonly ScheduleKind[] = scheduleKinds

/** The form's controls a schedule's fields are typed in. */
const SCHEDULE_CONTROLS = ['seconds', 'expr', 'tz'] as const
export type ScheduleControl = (typeof SCHEDULE_CONTROLS)[number]

/** A duration (`every_seconds`, `after_seconds`) is typed in Seconds; any other field in the control of its name. */
export function controlOf(field: string): ScheduleControl | undefined {
  return field.endsWith('_seconds') ? 'seconds' : SCHEDULE_CONTROLS.find(control => control === field)
}

export function kindOf(kind: string): ScheduleKind | undefined {
  return SCHEDULE_KINDS.find(known => known.kind === kind)
}

/** The kind's fields with the control each is typed in (none for a kind dshloop does not describe). */
export function controlsOf(kind: string): (KindField & { readonly control: ScheduleControl | undefined })[] {
  return (kindOf(kind)?.fields ?? []).map(field => ({ ...field, control: controlOf(field.name) }))
}

