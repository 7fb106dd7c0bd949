import assert from 'node:assert/strict'
import { test } from 'node:test'
import { emptyForm, FORM_FIELDS, formFieldOf, formOf, type LoopForm, type PanelLoop, toChanges, toInput } from '../src/loops-view.ts'
import scheduleKinds from '../src/schedule-kinds.json' with { type: 'json' }
import { SCHEDULE_KINDS } from '../src/schedule-kinds.ts'

const LOOP: PanelLoop = { loop_id: 'loop_a', prompt: 'Check', schedule: { kind: 'every', every_seconds: 600 }, session_id: 'ses_A', state: 'scheduled' }

const shown = (form: LoopForm): string[] => FORM_FIELDS.filter(spec => spec.show(form, 'create', false)).map(spec => spec.key)

test('the form offers the schedule kinds dshloop describes, in its order and words', () => {
  const kind = FORM_FIELDS.find(spec => spec.key === 'kind')
  assert.deepEqual(kind?.options, scheduleKinds.map(({ kind, label }) => [kind, label]))
  assert.deepEqual(kind?.options, [['every', 'Every…'], ['after', 'Once, after…'], ['cron', 'On a cron schedule']])
  assert.equal(emptyForm(undefined).kind, SCHEDULE_KINDS[0]?.kind)
})

test('the form shows the fields the chosen kind takes, and only those', () => {
  const form = emptyForm('ses_A')
  const schedule = (kind: string) => shown({ ...form, kind }).filter(key => key === 'seconds' || key === 'expr' || key === 'tz')
  assert.deepEqual(schedule('every'), ['seconds'])
  assert.deepEqual(schedule('after'), ['seconds'])
  assert.deepEqual(schedule('cron'), ['expr', 'tz'])
  assert.deepEqual(schedule('hourly'), [])
})

test('each kind\'s fields go into its schedule: durations as whole numbers, an empty optional field left out', () => {
  const form = { ...emptyForm('ses_A'), prompt: 'p', seconds: ' 30 ', expr: ' 30 9 * * 1-5 ', tz: '' }
  assert.deepEqual(toInput({ ...form, kind: 'after' }, 'ses_A').schedule, { kind: 'after', after_seconds: 30 })
  assert.deepEqual(toInput({ ...form, kind: 'cron' }, 'ses_A').schedule, { kind: 'cron', expr: '30 9 * * 1-5' })
  assert.deepEqual(toInput({ ...form, kind: 'cron', tz: 'Asia/Shanghai' }, 'ses_A').schedule, { kind: 'cron', expr: '30 9 * * 1-5', tz: 'Asia/Shanghai' })
  assert.deepEqual(toInput({ ...form, kind: 'cron', expr: '' }, 'ses_A').schedule, { kind: 'cron', expr: '' }) // dshloop says what is missing
  assert.deepEqual(toInput({ ...form, kind: 'every', seconds: 'ten' }, 'ses_A').schedule, { kind: 'every', every_seconds: 'ten' })
})

test('an edit holds the loop\'s schedule in the controls its fields are typed in, and sends it back unchanged', () => {
  const cron: PanelLoop = { ...LOOP, schedule: { kind: 'cron', expr: '0 6 * * *', tz: 'Europe/Berlin' } }
  assert.deepEqual(
    (({ kind, seconds, expr, tz }) => ({ kind, seconds, expr, tz }))(formOf(cron, 'ses_A')),
    { kind: 'cron', seconds: '', expr: '0 6 * * *', tz: 'Europe/Berlin' },
  )
  const after: PanelLoop = { ...LOOP, schedule: { kind: 'after', after_seconds: 90 } }
  assert.equal(formOf(after, 'ses_A').seconds, '90')
  for (const loop of [LOOP, cron, after, { ...LOOP, schedule: { kind: 'cron', expr: '0 6 * * *' } }]) {
    assert.deepEqual(toChanges(formOf(loop, 'ses_A'), loop, 'ses_A'), {})
  }
  assert.equal(formOf({ ...LOOP, schedule: { kind: 'hourly' } }, 'ses_A').kind, 'every') // a kind this plugin does not know: the first
})

test('a schedule error shows on the control of the field it names, or on the chosen kind\'s first', () => {
  const form = emptyForm(undefined)
  assert.equal(formFieldOf('schedule.after_seconds', { ...form, kind: 'after' }), 'seconds')
  assert.equal(formFieldOf('schedule.expr', { ...form, kind: 'cron' }), 'expr')
  assert.equal(formFieldOf('schedule.kind', form), 'kind')
  assert.equal(formFieldOf('schedule', form), 'seconds')
  assert.equal(formFieldOf('schedule', { ...form, kind: 'cron' }), 'expr')
  assert.equal(formFieldOf('every_seconds', form), 'seconds')
})
