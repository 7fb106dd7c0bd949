/**
 * The plugin's dshloop token, handed over by whoever starts DSH on an inherited file descriptor
 * (`DSHLOOP_TOKEN_FD`, e.g. `3<<<"$(manage.py dsh_plugin_token)"`; docs/dsh.md, "The plugin's token").
 *
 * Why not the environment (read only as a last resort, with a warning): an agent's bash is DSH's child, and a process's environment is readable
 * to its children under DSH's default sandbox (`tr '\0' '\n' </proc/$PPID/environ`); deleting the
 * variable later does not change what /proc shows. A descriptor is read once, to its end, and closed
 * before any agent runs, so no child inherits it and nothing is left to read but this process's
 * memory, which DSH's sandbox keeps from the agents' commands.
 */

import { closeSync, readFileSync } from 'node:fs'

export const TOKEN_FD_VARIABLE = 'DSHLOOP_TOKEN_FD'

export interface TakenToken {
  /** The token, or '' when none was handed over. */
  readonly token: string
  /** Why there is no token, or what was ignored: for the DSH log, never containing the token. */
  readonly warnings: readonly string[]
}

/** The descriptor operations, injectable for tests. */
export interface Descriptors {
  read(fd: number): string
  close(fd: number): void
}

const NODE_DESCRIPTORS: Descriptors = {
  read: fd => readFileSync(fd, 'utf8'),
  close: fd => closeSync(fd),
}

/**
 * Read the token from the descriptor `env.DSHLOOP_TOKEN_FD` names, then close it; call once per
 * process. Without one, DSHLOOP_TOKEN from the environment (contract §13's launch), with a warning.
 */
export function takeToken(env: NodeJS.ProcessEnv = process.env, descriptors: Descriptors = NODE_DESCRIPTORS): TakenToken {
  const fromDescriptor = takeFromDescriptor(env, descriptors)
  const inEnvironment = env.DSHLOOP_TOKEN?.trim() ?? ''
  if (inEnvironment === '') return fromDescriptor
  if (fromDescriptor.token !== '') {
    return {
      token: fromDescriptor.token,
      warnings: [...fromDescriptor.warnings, `dshloop: DSHLOOP_TOKEN in the DSH process environment is ignored (${TOKEN_FD_VARIABLE} gave one) ${EXPOSED}`],
    }
  }
  // Contract §13's older launch: still accepted, so that a DSH started that way works, but said
  // loudly at every boot, since any agent can read it there.
  return { token: inEnvironment, warnings: [`dshloop: the token comes from DSHLOOP_TOKEN in the DSH process environment ${EXPOSED}`] }
}

const EXPOSED =
  "— an agent's bash can read that environment, so the token there is exposed: hand it over on a " +
  `file descriptor (${TOKEN_FD_VARIABLE}, docs/dsh.md "The plugin's token") and revoke the one in the environment.`

function takeFromDescriptor(env: NodeJS.ProcessEnv, descriptors: Descriptors): TakenToken {
  const warnings: string[] = []
  const named = env[TOKEN_FD_VARIABLE]
  if (named === undefined || named === '') {
    warnings.push(`dshloop: ${TOKEN_FD_VARIABLE} is not set; every loop tool call will answer unauthorized`)
    return { token: '', warnings }
  }
  // 0-2 are DSH's own stdin, stdout and stderr: never read or closed here.
  const fd = /^[0-9]+$/.test(named) ? Number(named) : Number.NaN
  if (!Number.isSafeInteger(fd) || fd < 3) {
    warnings.push(`dshloop: ${TOKEN_FD_VARIABLE}=${JSON.stringify(named)} is not a file descriptor number of 3 or more; no token`)
    return { token: '', warnings }
  }
  let text: string
  try {
    text = descriptors.read(fd)
  } catch (error) {
    warnings.push(`dshloop: could not read the token from descriptor ${fd} (${errorCode(error)}); no token`)
    return { token: '', warnings }
  } finally {
    try {
      descriptors.close(fd)
    } catch {
      // Already closed, or never open: nothing is left for a child to inherit either way.
    }
  }
  const token = text.trim()
  if (token === '') warnings.push(`dshloop: descriptor ${fd} held no token; every loop tool call will answer unauthorized`)
  return { token, warnings }
}

function errorCode(error: unknown): string {
  const code = (error as { code?: unknown } | null)?.code
  return typeof code === 'string' ? code : String(error)
}
