/**
 * The tool boundary of a fresh run (contract §14, §15): the session dshloop made for a `new` loop's
 * occurrence runs with nobody watching, so it may use a small set of coding tools and nothing that
 * fans out (nested agents, background jobs, workflows), waits for a person (questions, plan
 * approval), sets itself goals, schedules more unattended work, or that some other plugin mounted.
 * An operator widens the set (dshloop's DSHLOOP_FRESH_RUN_TOOLS, sent with each delivery); an agent
 * never can, per loop or otherwise.
 *
 * Pure: index.ts installs `refusal` as the agent's own DSH guard (`agent.ctx.tools.guard`), which
 * runs after every `tools/pre-execute` listener, so no other plugin's "allow" lifts a denial. A
 * denial reaches the model as the tool's error; dshloop reads it back from the session's log
 * (sessions_app/hosts/dsh_turns.py, REFUSED) and records it on the run, so the words
 * `dshloop refused <tool> (rule <rule>)` are a wire format: change both sides together.
 */

/** DSH's coding tools a fresh run keeps (DSH 0.1.0-rc.8's web profile names, plus the same tools
 * under the names other profiles mount them), and dshloop's own read-only tools. */
export const FRESH_RUN_TOOLS: readonly string[] = [
  // the workspace: shell in the foreground, files, search
  'bash', 'pwsh', 'read', 'read_image', 'write', 'edit', 'str_replace_editor', 'glob', 'grep', 'lsp',
  // the web, read-only
  'web_search', 'web_fetch',
  // instructions the profile ships, and Code Mode's transport (each call inside it is checked too)
  'skill', 'run_code',
  // dshloop's tools that change nothing (loop_create and loop_delete: DSHLOOP_FRESH_RUNS_MAY_CREATE_LOOPS)
  'loop_list', 'list_sessions', 'check_session_status',
]

/** The shells, whose arguments can ask for a process that outlives the call, or for a wider
 * sandbox (DSH asks a person to approve that, and an unwatched ask waits until dshloop cancels it). */
const SHELLS: readonly string[] = ['bash', 'pwsh']

/** The rules a refusal names (in the tool error and, through dshloop, on the run). */
export const RULE_TOOLS = 'fresh-run-tools'
export const RULE_FOREGROUND = 'fresh-run-foreground'
export const RULE_SANDBOX = 'fresh-run-sandbox'

/** The tools one fresh run may call: the built-in set and what the operator added. */
export function allowedTools(extra: readonly string[] = []): ReadonlySet<string> {
  return new Set([...FRESH_RUN_TOOLS, ...extra])
}

/** Names from a delivery's `extraTools` (anything else in it is ignored, never widening). */
export function extraToolsOf(value: unknown): readonly string[] {
  if (!Array.isArray(value)) return []
  return value.filter((name): name is string => typeof name === 'string' && name !== '')
}

/**
 * Why a fresh run may not make this call, or undefined when it may. The text is the tool error the
 * model reads: it names the tool and the rule, says why, and what to do instead.
 */
export function refusal(name: string, args: unknown, allowed: ReadonlySet<string>): string | undefined {
  if (!allowed.has(name)) {
    return (
      `dshloop refused ${name} (rule ${RULE_TOOLS}): this is an unattended run in a session dshloop made for a ` +
      `"new" loop, and it may use only these tools: ${[...allowed].sort().join(', ')}. Nested agents, ` +
      'background jobs, workflows, goals and plans, questions to a person, loop-making and tools of other ' +
      'plugins are refused, since nobody watches this run (an operator may widen the set with ' +
      "DSHLOOP_FRESH_RUN_TOOLS). Do the work with the tools you have, and say in your answer what you could not do."
    )
  }
  if (!SHELLS.includes(name) || !isObject(args)) return undefined
  if (args.run_in_background === true) {
    return (
      `dshloop refused ${name} (rule ${RULE_FOREGROUND}): run_in_background starts a process that outlives ` +
      'this unattended run, which nobody watches or stops. Run the command in the foreground, with a timeoutMs.'
    )
  }
  if (typeof args.sandbox_permissions === 'string' && args.sandbox_permissions !== '') {
    return (
      `dshloop refused ${name} (rule ${RULE_SANDBOX}): a wider sandbox needs a person's approval, and nobody ` +
      "watches this unattended run; it may do what its loop's permission_preset allows. Work within it, and " +
      'say in your answer what needed more.'
    )
  }
  return undefined
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}
