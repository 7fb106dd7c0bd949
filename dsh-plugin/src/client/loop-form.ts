/**
 * The Loops panel's create and edit form: the fields loops-view.ts describes (one per schedule
 * kind's input, from the one description of the kinds), each with the error dshloop gave for it.
 */

import { createElement as h, type ReactElement } from 'react'
import { FORM_FIELDS, type FormMode, type LoopForm, type PanelLoop } from '../loops-view.ts'
import { type SessionRow, sessionOption } from './filters.ts'
import { Button } from './ui.ts'

/** The form as the panel holds it: what is typed, the errors by field, and whether a save is under way. */
export interface FormState {
  readonly mode: FormMode
  readonly loop?: PanelLoop
  readonly values: LoopForm
  readonly errors: Record<string, string>
  readonly general?: string
  readonly busy: boolean
}

export interface FormProps {
  readonly form: FormState
  readonly sessions: readonly SessionRow[]
  readonly current: string | undefined
  readonly onField: (key: keyof LoopForm, value: string) => void
  readonly onCancel: () => void
  readonly onSubmit: () => void
}

export function LoopFormView({ form, sessions, current, onField, onCancel, onSubmit }: FormProps): ReactElement {
  const unattended = form.loop?.session_id === 'new'
  const targets: (readonly [string, string])[] = [
    ...(current === undefined ? [] : [['current', 'This conversation'] as const]),
    ['session', 'A session, by title'],
    ['self', 'self (the global interface)'],
    ['new', 'new (a fresh session each run)'],
  ]
  const optionsOf = (key: keyof LoopForm): readonly (readonly [string, string])[] | undefined => {
    if (key === 'target') return targets
    if (key === 'session') return [['', 'Pick a session…'], ...sessions.map(sessionOption)]
    return FORM_FIELDS.find(spec => spec.key === key)?.options
  }
  return h('form', {
    'data-dshloop-form': form.mode,
    className: 'dshloop-card dshloop-form',
    onSubmit: (event: { preventDefault(): void }) => {
      event.preventDefault()
      onSubmit()
    },
  },
  h('strong', null, form.mode === 'create' ? 'New loop' : `Edit ${form.loop?.loop_id ?? ''}`),
  ...FORM_FIELDS.filter(spec => spec.show(form.values, form.mode, unattended)).map(spec => {
    const value = form.values[spec.key]
    const onInput = (event: { target: { value: string } }) => onField(spec.key, event.target.value)
    const error = form.errors[spec.key]
    const options = optionsOf(spec.key)
    const common = { name: spec.key, value, onChange: onInput, className: 'dshloop-input' }
    const control = spec.control === 'textarea'
      ? h('textarea', { ...common, rows: 3 })
      : spec.control === 'select' && options !== undefined
        ? h('select', common, ...options.map(([key, label]) => h('option', { key, value: key }, label)))
        : spec.control === 'datetime'
          ? h('input', { ...common, type: 'datetime-local' })
          : h('input', { ...common, type: 'text', inputMode: spec.control === 'number' ? 'numeric' : undefined })
    return h('label', { key: spec.key, 'data-dshloop-input': spec.key, className: 'dshloop-field' },
      h('span', null, spec.label, spec.hint ? h('span', { className: 'dshloop-muted' }, ` — ${spec.hint}`) : null),
      control,
      error ? h('span', { 'data-dshloop-field-error': spec.key, role: 'alert', className: 'dshloop-error' }, error) : null)
  }),
  form.general ? h('div', { 'data-dshloop-field-error': 'form', role: 'alert', className: 'dshloop-error' }, form.general) : null,
  h('div', { className: 'dshloop-actions' },
    Button('primary', { type: 'submit', 'data-dshloop-action': 'save', disabled: form.busy }, form.mode === 'create' ? 'Create' : 'Save'),
    Button('outline', { 'data-dshloop-action': 'cancel', onClick: onCancel }, 'Cancel')))
}
