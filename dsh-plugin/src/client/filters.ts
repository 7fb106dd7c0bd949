/**
 * The Loops panel's filters (state, target, session, prompt text or loop ID), the words of dshloop's
 * own panel; the panel asks the host half's `list` with them.
 */

import { createElement as h, type ReactElement } from 'react'

export interface SessionRow {
  readonly session_id: string
  readonly title?: string
}

export interface Filters {
  readonly state: string
  readonly target: string
  readonly session: string
  readonly q: string
}

export const NO_FILTERS: Filters = { state: '', target: '', session: '', q: '' }

const STATE_OPTIONS: readonly (readonly [string, string])[] = [
  ['', 'Any state'],
  ['scheduled', 'Scheduled'],
  ['running', 'Running'],
  ['overdue', 'Overdue'],
  ['paused', 'Paused'],
  ['failed', 'Failed'],
  ['last_failed', 'Last run failed'],
  ['completed', 'Completed (history)'],
]
const TARGET_OPTIONS: readonly (readonly [string, string])[] = [
  ['', 'Any target'],
  ['self', 'self (global interface)'],
  ['new', 'new (fresh session)'],
  ['session', 'An existing session'],
]

export interface FilterBarProps {
  readonly filters: Filters
  readonly setFilters: (update: (previous: Filters) => Filters) => void
  readonly global: boolean
  readonly sessions: readonly SessionRow[]
}

export function FilterBar({ filters, setFilters, global, sessions }: FilterBarProps): ReactElement {
  const set = (key: keyof Filters) => (event: { target: { value: string } }) => {
    const value = event.target.value
    setFilters(previous => ({ ...previous, [key]: value }))
  }
  return h('div', { className: 'dshloop-filters' },
    select('dshloop-filter-state', filters.state, STATE_OPTIONS, set('state'), 'State'),
    global ? select('dshloop-filter-target', filters.target, TARGET_OPTIONS, set('target'), 'Target') : null,
    global ? select('dshloop-filter-session', filters.session, [['', 'Any session'], ...sessions.map(sessionOption)], set('session'), 'Session') : null,
    h('input', {
      type: 'search',
      name: 'dshloop-filter-q',
      'aria-label': 'Prompt text or loop ID',
      placeholder: 'Prompt text or loop ID',
      value: filters.q,
      onChange: set('q'),
      className: 'dshloop-input',
    }))
}

export function sessionOption(session: SessionRow): readonly [string, string] {
  return [session.session_id, session.title ? `${session.title} (${session.session_id})` : session.session_id]
}

function select(name: string, value: string, options: readonly (readonly [string, string])[], onChange: (event: { target: { value: string } }) => void, label?: string): ReactElement {
  return h('select', { name, value, onChange, className: 'dshloop-input', ...(label ? { 'aria-label': label } : {}) },
    ...options.map(([key, text]) => h('option', { key, value: key }, text)))
}
