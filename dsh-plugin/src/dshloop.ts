/**
 * The wire to dshloop (contract §2, §3): one POST per tool call, the caller's session in
 * `X-DSH-Session-Id`, the token in `Authorization`. Everything here is plain functions over an
 * injectable `fetch`, so the node test runner checks them without DSH or dshloop.
 *
 * The token is handed over by the caller (src/token.ts) and passed in; it never
 * appears in a message this module builds (those reach the model as tool results).
 */

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json }

export interface ToolDefinition {
  readonly name: string
  readonly description: string
  readonly input_schema: { [key: string]: Json }
}

export interface Endpoint {
  /** dshloop's base URL, e.g. http://127.0.0.1:8000 (no trailing slash needed). */
  readonly url: string
  readonly token: string
  /** How long one call may take before it fails: a tool call never hangs a turn. */
  readonly timeoutMs: number
  readonly fetch?: typeof fetch
}

/** A failure the model should read: its message is the tool result's text. */
export class DshloopError extends Error {
  readonly code: string
  /** contract §3: the input field the refusal is about, when dshloop named one. */
  readonly field: string | undefined
  /** dshloop's own sentence, without the prefix a model reads (a person's form shows this). */
  readonly detail: string
  constructor(code: string, message: string, field?: string, detail?: string) {
    super(message)
    this.name = 'DshloopError'
    this.code = code
    this.field = field
    this.detail = detail ?? message
  }
}

export const TOOL_NAMES = ['loop_create', 'loop_list', 'loop_delete', 'list_sessions', 'check_session_status'] as const

export function baseUrl(url: string): string {
  return url.replace(/\/+$/, '')
}

/**
 * A header value as fetch accepts it. dshloop reads `X-DSH-Session-Id` as UTF-8 bytes (README), but
 * fetch refuses a string with characters above U+00FF, so the UTF-8 bytes go as latin-1 characters:
 * the same bytes on the wire.
 */
export function headerValue(text: string): string {
  return Buffer.from(text, 'utf8').toString('latin1')
}

/** The contract's error body → one sentence for the model, keeping the code (contract §3). */
export function errorMessage(status: number, body: unknown): DshloopError {
  const error = isObject(body) && isObject(body.error) ? body.error : undefined
  const code = typeof error?.code === 'string' && error.code !== '' ? error.code : `http_${status}`
  const message = typeof error?.message === 'string' && error.message !== ''
    ? error.message
    : `dshloop answered HTTP ${status} without the contract's error body.`
  const field = typeof error?.field === 'string' && error.field !== '' ? error.field : undefined
  const where = field === undefined ? '' : ` (field: ${field})`
  return new DshloopError(code, `dshloop refused the call: ${code}: ${message}${where}`, field, message)
}

export function unreachable(url: string, cause: unknown): DshloopError {
  const detail = cause instanceof Error ? causeText(cause) : String(cause)
  return new DshloopError(
    'unreachable',
    `dshloop is not reachable at ${baseUrl(url)} (${detail}). The loop tools need the dshloop server ` +
      'running there; nothing was changed. Try again once it is back.',
  )
}

export function timedOut(url: string, timeoutMs: number): DshloopError {
  return new DshloopError(
    'timeout',
    `dshloop at ${baseUrl(url)} did not answer within ${timeoutMs / 1000} s; whether the call took effect ` +
      'is unknown (loop_list shows the current loops).',
  )
}

/** POST /api/tools/<name> as `sessionId`; the parsed 200 body, or a DshloopError. */
export async function callTool(
  endpoint: Endpoint,
  name: string,
  args: unknown,
  sessionId: string,
  signal?: AbortSignal,
  idempotencyKey?: string,
): Promise<Json> {
  const headers: Record<string, string> = {
    'Content-Type': 'application/json',
    'X-DSH-Session-Id': headerValue(sessionId),
  }
  // contract §3: the same key from the same session answers what its first call made.
  if (idempotencyKey !== undefined && idempotencyKey !== '') headers['Idempotency-Key'] = headerValue(idempotencyKey)
  const response = await request(endpoint, `/api/tools/${encodeURIComponent(name)}`, signal, {
    method: 'POST',
    headers,
    body: JSON.stringify(args ?? {}),
  })
  const body = await readJson(endpoint, response, signal)
  if (!response.ok) throw errorMessage(response.status, body)
  return body as Json
}

/** GET `path` of dshloop's API (e.g. `/api/loops/<id>`); the parsed 200 body, or a DshloopError. */
export async function getJson(endpoint: Endpoint, path: string, signal?: AbortSignal): Promise<Json> {
  const response = await request(endpoint, path, signal, { method: 'GET' })
  const body = await readJson(endpoint, response, signal)
  if (!response.ok) throw errorMessage(response.status, body)
  return body as Json
}

/**
 * One call of dshloop's operator API (contract §9, scope `manage`) for a person in DSH Web: `via`
 * names the client in the loop's trail ("dsh-plugin via DSH Web"), never a session.
 */
export async function callApi(
  endpoint: Endpoint,
  method: 'GET' | 'POST' | 'PATCH' | 'DELETE',
  path: string,
  options: { readonly body?: unknown; readonly via?: string; readonly signal?: AbortSignal } = {},
): Promise<Json> {
  const headers: Record<string, string> = {}
  if (options.via !== undefined) headers['X-Dshloop-Via'] = options.via
  if (options.body !== undefined) headers['Content-Type'] = 'application/json'
  const response = await request(endpoint, path, options.signal, {
    method,
    headers,
    ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) }),
  })
  const body = await readJson(endpoint, response, options.signal)
  if (!response.ok) throw errorMessage(response.status, body)
  return body as Json
}

/** GET /api/tools: the catalogue dshloop serves now, or a DshloopError. */
export async function fetchCatalogue(endpoint: Endpoint, signal?: AbortSignal): Promise<ToolDefinition[]> {
  const response = await request(endpoint, '/api/tools', signal, { method: 'GET' })
  const body = await readJson(endpoint, response, signal)
  if (!response.ok) throw errorMessage(response.status, body)
  const tools = parseCatalogue(body)
  if (tools === undefined) throw new DshloopError('bad_catalogue', 'dshloop sent a tool catalogue without the five tools.')
  return tools
}

/** The catalogue in `body`, when it names exactly the five tools with a description and a schema. */
export function parseCatalogue(body: unknown): ToolDefinition[] | undefined {
  if (!isObject(body) || !Array.isArray(body.tools)) return undefined
  const tools: ToolDefinition[] = []
  for (const item of body.tools) {
    if (!isObject(item) || typeof item.name !== 'string' || typeof item.description !== 'string') return undefined
    if (!isObject(item.input_schema)) return undefined
    tools.push({ name: item.name, description: item.description, input_schema: item.input_schema as { [key: string]: Json } })
  }
  const names = tools.map(tool => tool.name).sort()
  if (JSON.stringify(names) !== JSON.stringify([...TOOL_NAMES].sort())) return undefined
  return tools
}

async function request(endpoint: Endpoint, path: string, signal: AbortSignal | undefined, init: RequestInit): Promise<Response> {
  const doFetch = endpoint.fetch ?? fetch
  const timeout = AbortSignal.timeout(endpoint.timeoutMs)
  try {
    return await doFetch(`${baseUrl(endpoint.url)}${path}`, {
      ...init,
      headers: { ...(init.headers as Record<string, string>), Authorization: `Bearer ${endpoint.token}` },
      signal: signal === undefined ? timeout : AbortSignal.any([signal, timeout]),
      redirect: 'error', // a redirect would carry the token elsewhere
    })
  } catch (error) {
    throw failure(endpoint, error, timeout, signal)
  }
}

async function readJson(endpoint: Endpoint, response: Response, signal: AbortSignal | undefined): Promise<unknown> {
  let text: string
  try {
    text = await response.text()
  } catch (error) {
    throw failure(endpoint, error, undefined, signal)
  }
  try {
    return JSON.parse(text)
  } catch {
    // Not dshloop (a proxy page, another server on the port): say what answered.
    throw new DshloopError(
      `http_${response.status}`,
      `dshloop at ${baseUrl(endpoint.url)} answered HTTP ${response.status} with a body that is not JSON; is DSHLOOP_URL right?`,
    )
  }
}

function failure(endpoint: Endpoint, error: unknown, timeout: AbortSignal | undefined, signal: AbortSignal | undefined): Error {
  if (signal?.aborted) return new DshloopError('cancelled', 'The call was cancelled.')
  if (timeout?.aborted || (error instanceof Error && error.name === 'TimeoutError')) {
    return timedOut(endpoint.url, endpoint.timeoutMs)
  }
  return unreachable(endpoint.url, error)
}

/** fetch wraps the socket error in `cause`: "fetch failed" alone tells a person nothing. */
function causeText(error: Error): string {
  const cause = (error as { cause?: unknown }).cause
  if (cause instanceof Error) {
    const code = (cause as { code?: unknown }).code
    return typeof code === 'string' ? code : cause.message
  }
  return error.message
}

function isObject(value: unknown): value is { [key: string]: unknown } {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}
