/**
 * dshloop's DSH plugin, host half (contract §13): the five loop tools on every root agent, each call
 * forwarded to dshloop as that agent's session, and a loopback RPC channel the composer status reads.
 *
 * Only the few DSH APIs used here are typed below (DSH 0.1.0-rc.8, see ../shared/DSH-PLUGIN.md), so
 * the plugin builds and type-checks without DSH's packages and imports nothing from DSH at run time.
 */

import { homedir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'

import { allowedTools, refusal } from './boundary.ts'
import { cappedCall } from './cap.ts'
import builtIn from './catalogue.json' with { type: 'json' }
import { handleRpc, type RpcResult } from './channel.ts'
import { Confirmations } from './confirm.ts'
import type { LiveAgent, LoggedEvent } from './deliver.ts'
import { baseUrl, callTool, DshloopError, fetchCatalogue, type Json, parseCatalogue, type ToolDefinition } from './dshloop.ts'
import { makeToken, OwnDshloop } from './own-dshloop.ts'
import type { SessionStores } from './sessions.ts'
import { type TakenToken, takeToken, TOKEN_FD_VARIABLE } from './token.ts'

export const name = 'dshloop'
export const inject = ['agents', 'tools', 'connection', 'webServer']

export interface Config {
  /**
   * An external dshloop's URL (the patch row: $DSHLOOP_URL). Without one, the plugin runs the
   * profile's own dshloop (src/own-dshloop.ts).
   */
  readonly url?: string
  /** The profile's own dshloop: the `dshloop` command (the patch row: $DSHLOOP_COMMAND, else PATH's). */
  readonly command?: string
  /** The profile's own dshloop's port (the patch row: $DSHLOOP_PORT); 0: a free one at each start. */
  readonly port?: number
  /** How long one call to dshloop may take (seconds). */
  readonly timeoutSeconds?: number
  /** Ask the person before an agent creates a loop with session_id "new" (see docs/dsh.md). */
  readonly askBeforeNewSessionLoops?: boolean
}

interface Disposer {
  (): void | Promise<void>
}

interface ToolExecution {
  /** The model's ID of this call (ToolExecutionInput.callId): loop_create's idempotency key. */
  readonly callId?: string
  readonly name: string
  readonly arguments?: unknown
  readonly agent?: Agent
  readonly signal: AbortSignal
}

interface Agent extends LiveAgent {
  readonly id: string
  readonly ctx: {
    readonly tools: {
      register(definition: unknown): Disposer
      /** DSH's final, agent-scoped check after every `tools/pre-execute` listener: a reason denies. */
      guard(check: (exec: ToolExecution) => string | undefined): Disposer
    }
    effect(body: () => Disposer, label: string): Disposer
  }
}

interface HostContext {
  readonly agents: { roots(): readonly Agent[]; get(id: string): Agent | undefined }
  readonly connection: {
    readonly rpc: {
      handle(
        channel: string,
        handler: (endpoint: string, payload: unknown, signal: AbortSignal) => Promise<RpcResult>,
        options: { readonly authority: 'loopback' },
      ): Disposer
    }
  }
  readonly logger: { info(message: string): void; warn(message: string): void }
  /** DSH's web server: the port DSH listens on, once it does (0 before). */
  readonly webServer?: { readonly port: number }
  /** The profile directory, as a file: URL (the loader's base, dsh-app-boot). */
  readonly baseUrl?: string
  on(event: 'agent/created' | 'agent/disposed', listener: (payload: { agent: Agent }) => void): () => void
  on(event: 'tools/pre-execute', listener: (exec: ToolExecution, next: () => Promise<{ kind: string }>) => unknown): () => void
  /** Every event appended to any session's log, synchronously (dsh-session `Session.append`). */
  on(event: 'session/event', listener: (session: { readonly id: string }, event: LoggedEvent) => void): () => void
  /** A service without injecting it (cordis), each as sessions.ts reads it. */
  readonly get?: {
    (name: 'sessionProjections'): SessionStores['projections']
    (name: 'sessionPersistence'): SessionStores['persistence']
    (name: 'sessionProjectionCache'): SessionStores['projectionCache']
  }
  effect(body: () => Disposer | Promise<Disposer>, label: string): unknown
}

export { handleRpc } from './channel.ts'
export const RPC_CHANNEL = '/dshloop'
const DEFAULT_URL = 'http://127.0.0.1:8000'
const DEFAULT_TIMEOUT_SECONDS = 10

export const SUBAGENT_REFUSAL =
  'The loop tools belong to the conversation\'s main agent, not to a subagent: a subagent\'s session ' +
  'ends with its task, so a loop could neither target it nor be owned by it. Report back and let the ' +
  'main agent create, list or delete loops.'

// Taken once per process, at the first apply (DSH's boot, before any agent runs): the descriptor is
// closed after that, and a later apply (a changed patch row) reuses what was read.
let taken: TakenToken | undefined
// The profile's own dshloop's token: made once per DSH process, handed to each dshloop it starts.
let made: string | undefined

/** An external dshloop is named (a URL, or a launcher handing a token over as before): connect to it. */
export function externalUrl(config: Config, env: NodeJS.ProcessEnv = process.env): string | undefined {
  const named = config.url || env.DSHLOOP_URL
  if (named) return named
  return env[TOKEN_FD_VARIABLE] || env.DSHLOOP_TOKEN ? DEFAULT_URL : undefined
}

/** The profile's dshloop directory: `<profile>/dshloop`, the profile being the loader's base. */
export function profileDataDir(ctx: Pick<HostContext, 'baseUrl'>, env: NodeJS.ProcessEnv = process.env): string {
  if (ctx.baseUrl?.startsWith('file:')) return join(fileURLToPath(ctx.baseUrl), 'dshloop')
  return join(env.DSH_HOME || join(homedir(), '.dsh'), 'profiles', 'web', 'dshloop')
}

/** A port the person fixed for the profile's own dshloop, else 0: a free one at each start. */
export function ownPort(port: unknown): number {
  return typeof port === 'number' && Number.isInteger(port) && port > 0 && port < 65536 ? port : 0
}

export function apply(ctx: HostContext, config: Config = {}): void {
  const external = externalUrl(config)
  const endpoint: { url: string; token: string; timeoutMs: number } = {
    url: baseUrl(external ?? DEFAULT_URL), // the profile's own dshloop: replaced by its port once it serves
    token: '',
    timeoutMs: Math.max(1, config.timeoutSeconds ?? DEFAULT_TIMEOUT_SECONDS) * 1000,
  }
  if (external !== undefined) {
    // Never from the patch row: a config value is shown by `dsh … --dump-config` and DSH Web's plugin
    // settings. From a descriptor, not the environment, which an agent's bash can read (src/token.ts).
    if (taken === undefined) {
      taken = takeToken()
      for (const warning of taken.warnings) ctx.logger.warn(warning)
    }
    endpoint.token = taken.token
  } else {
    made ??= makeToken()
    endpoint.token = made
    const own = new OwnDshloop({
      command: config.command || process.env.DSHLOOP_COMMAND || 'dshloop',
      dataDir: profileDataDir(ctx),
      dshUrl: () => (ctx.webServer?.port ? `http://127.0.0.1:${ctx.webServer.port}` : undefined),
      token: made,
      port: ownPort(config.port),
      // Also on DSH's own output: its terminal (or the launcher's log) is where a person looks
      // when the loops do not come, and DSH rc.8 does not print a plugin's logger there.
      logger: {
        info: message => {
          ctx.logger.info(message)
          console.log(message)
        },
        warn: message => {
          ctx.logger.warn(message)
          console.error(message)
        },
      },
      onUrl: url => {
        endpoint.url = url
      },
    })
    ctx.effect(() => {
      own.start()
      return () => own.stop()
    }, "dshloop: the profile's dshloop")
  }

  ctx.effect(() => {
    let catalogue: readonly ToolDefinition[] = parseCatalogue(builtIn) ?? []
    let confirmed = false // true once dshloop itself has served the catalogue in use
    let refreshing: Promise<void> | undefined
    const mounted = new Map<Agent, Disposer>()
    let alive = true

    // Sessions made for a `new` run, by ID, with the tools each may call (src/boundary.ts). In
    // memory: a DSH restart interrupts their turn, and a re-driven delivery says so again; dshloop
    // itself refuses their loop-making calls meanwhile (contract §15).
    const unattended = new Map<string, ReadonlySet<string>>()
    const guarded = new Map<Agent, Disposer>()

    const mount = (agent: Agent): void => {
      if (!alive || mounted.has(agent) || !ctx.agents.roots().includes(agent)) return
      const allowed = unattended.get(agent.id)
      const tools = allowed === undefined ? catalogue : catalogue.filter(tool => allowed.has(tool.name))
      mounted.set(agent, agent.ctx.effect(() => registerTools(agent, tools), 'dshloop: loop tools'))
    }

    const remount = async (agent: Agent): Promise<void> => {
      const dispose = mounted.get(agent)
      mounted.delete(agent)
      if (dispose !== undefined) await dispose()
      mount(agent)
    }

    // A tool name may be registered once per agent layer: the old registrations must be gone
    // (their disposer may settle later) before the new catalogue's go in.
    const remountAll = async (): Promise<void> => {
      for (const agent of [...mounted.keys()]) {
        try {
          await remount(agent)
        } catch (error) {
          ctx.logger.warn(`dshloop: could not renew the loop tools of ${agent.id}: ${String(error)}`)
        }
      }
    }

    // The built-in catalogue is what dshloop served when the plugin was built; dshloop's own answer
    // wins once it gives one (a newer server may describe its tools better), without a DSH restart.
    const refresh = (): Promise<void> => {
      refreshing ??= fetchCatalogue(endpoint)
        .then(async served => {
          confirmed = true
          if (alive && JSON.stringify(served) !== JSON.stringify(catalogue)) {
            catalogue = served
            await remountAll()
          }
        })
        .catch((error: unknown) => {
          ctx.logger.info(`dshloop: the built-in tool catalogue stays in use: ${String(error)}`)
        })
        .finally(() => {
          refreshing = undefined
        })
      return refreshing
    }

    const registerTools = (agent: Agent, tools: readonly ToolDefinition[]): Disposer => {
      const disposers = tools.map(tool => agent.ctx.tools.register({
        name: tool.name,
        description: tool.description,
        parameters: tool.input_schema, // raw JSON Schema: DSH passes it to the model unchanged
        output: { schema: {}, render: (_args: unknown, value: unknown) => [{ type: 'text', text: JSON.stringify(value) }] },
        // DSH's own bound on the call, a backstop behind the fetch timeout.
        timeoutMs: endpoint.timeoutMs + 5_000,
        async execute(args: unknown, exec: ToolExecution): Promise<Json> {
          // DSH rc.8 does not hand a root agent's own registrations to its subagents (their call is
          // "unknown tool"); should a later DSH do so, the caller must still be the agent's own
          // session (contract §13), so any other agent is refused.
          if (exec.agent !== agent) throw new DshloopError('subagent', SUBAGENT_REFUSAL)
          // A loop_create that timed out may have taken effect: the call's own ID lets a retry of
          // it (DSH re-running the same call) answer the loop the first one made, not a second.
          const key = tool.name === 'loop_create' ? exec.callId : undefined
          const value = await cappedCall(tool.name, args, input =>
            callTool(endpoint, tool.name, input, agent.id, exec.signal, key))
          if (!confirmed) void refresh()
          return value
        },
      }))
      return async () => {
        for (const dispose of disposers.reverse()) await dispose()
      }
    }

    for (const agent of ctx.agents.roots()) mount(agent)
    const stopCreated = ctx.on('agent/created', ({ agent }) => mount(agent))
    const stopDisposed = ctx.on('agent/disposed', ({ agent }) => {
      mounted.delete(agent) // its ctx disposes the registrations and the guard with it
      guarded.delete(agent)
    })
    const stopAsk = config.askBeforeNewSessionLoops
      ? ctx.on('tools/pre-execute', async (exec, next) => {
          const downstream = await next()
          if (downstream.kind !== 'allow' || exec.name !== 'loop_create' || !mounted.has(exec.agent as Agent)) return downstream
          const args = exec.arguments as { session_id?: unknown } | undefined
          if (args?.session_id !== 'new') return downstream
          return {
            kind: 'ask',
            reason: 'This loop starts a fresh, unattended agent session on every run. Review its prompt and schedule.',
          }
        })
      : () => {}
    // The first delivery into a session made for a `new` run bounds its tools before the message
    // can start a turn: DSH's own guard on that agent refuses any call outside the fresh-run set,
    // and dshloop's tools outside it are not even offered (the model gets the tools as a turn starts).
    const restrict = async (agent: Agent, extra: readonly string[]): Promise<void> => {
      const allowed = allowedTools(extra)
      const before = unattended.get(agent.id)
      if (before !== undefined && before.size === allowed.size && [...allowed].every(name => before.has(name))) return
      unattended.set(agent.id, allowed)
      if (!guarded.has(agent)) {
        const check = (exec: ToolExecution): string | undefined => {
          const current = unattended.get(agent.id)
          return current === undefined ? undefined : refusal(exec.name, exec.arguments, current)
        }
        guarded.set(agent, agent.ctx.effect(() => agent.ctx.tools.guard(check), 'dshloop: fresh-run tool boundary'))
      }
      await remount(agent)
    }
    // A fresh run whose turn is running and that may not make loops: its bash reaches DSH's port as
    // DSH Web does (panel.ts). The operator's DSHLOOP_FRESH_RUNS_MAY_CREATE_LOOPS gives it loop_create.
    const freshRunAt = (): string | undefined => [...unattended].find(([id, allowed]) =>
      !allowed.has('loop_create') && ctx.agents.get(id)?.status === 'running')?.[0]
    // A delivery answers once DSH has logged its message (confirm.ts): told by every session event.
    const confirmations = new Confirmations()
    const stopLogged = ctx.on('session/event', (session, event) => confirmations.observe(session.id, event))
    const stores = (): SessionStores => ({
      projections: ctx.get?.('sessionProjections'),
      persistence: ctx.get?.('sessionPersistence'),
      projectionCache: ctx.get?.('sessionProjectionCache'),
    })
    const deliveries = { agents: ctx.agents, restrict, freshRunAt, confirmations, stores }
    const stopRpc = ctx.connection.rpc.handle(RPC_CHANNEL, (rpcEndpoint, payload, signal) =>
      handleRpc(endpoint, rpcEndpoint, payload, signal, deliveries), { authority: 'loopback' })
    void refresh()

    return async () => {
      alive = false
      stopCreated()
      stopDisposed()
      stopAsk()
      stopLogged()
      for (const dispose of mounted.values()) await dispose()
      mounted.clear()
      for (const dispose of guarded.values()) await dispose()
      guarded.clear()
      await stopRpc()
    }
  }, 'dshloop: host')
}
