// src/index.ts
import { homedir } from "node:os";
import { join as join2 } from "node:path";
import { fileURLToPath } from "node:url";

// src/boundary.ts
var FRESH_RUN_TOOLS = [
  // the workspace: shell in the foreground, files, search
  "bash",
  "pwsh",
  "read",
  "read_image",
  "write",
  "edit",
  "str_replace_editor",
  "glob",
  "grep",
  "lsp",
  // the web, read-only
  "web_search",
  "web_fetch",
  // instructions the profile ships, and Code Mode's transport (each call inside it is checked too)
  "skill",
  "run_code",
  // dshloop's tools that change nothing (loop_create and loop_delete: DSHLOOP_FRESH_RUNS_MAY_CREATE_LOOPS)
  "loop_list",
  "list_sessions",
  "check_session_status"
];
var SHELLS = ["bash", "pwsh"];
var RULE_TOOLS = "fresh-run-tools";
var RULE_FOREGROUND = "fresh-run-foreground";
var RULE_SANDBOX = "fresh-run-sandbox";
function allowedTools(extra = []) {
  return /* @__PURE__ */ new Set([...FRESH_RUN_TOOLS, ...extra]);
}
function extraToolsOf(value) {
  if (!Array.isArray(value)) return [];
  return value.filter((name2) => typeof name2 === "string" && name2 !== "");
}
function refusal(name2, args, allowed) {
  if (!allowed.has(name2)) {
    return `dshloop refused ${name2} (rule ${RULE_TOOLS}): this is an unattended run in a session dshloop made for a "new" loop, and it may use only these tools: ${[...allowed].sort().join(", ")}. Nested agents, background jobs, workflows, goals and plans, questions to a person, loop-making and tools of other plugins are refused, since nobody watches this run (an operator may widen the set with DSHLOOP_FRESH_RUN_TOOLS). Do the work with the tools you have, and say in your answer what you could not do.`;
  }
  if (!SHELLS.includes(name2) || !isObject(args)) return void 0;
  if (args.run_in_background === true) {
    return `dshloop refused ${name2} (rule ${RULE_FOREGROUND}): run_in_background starts a process that outlives this unattended run, which nobody watches or stops. Run the command in the foreground, with a timeoutMs.`;
  }
  if (typeof args.sandbox_permissions === "string" && args.sandbox_permissions !== "") {
    return `dshloop refused ${name2} (rule ${RULE_SANDBOX}): a wider sandbox needs a person's approval, and nobody watches this unattended run; it may do what its loop's permission_preset allows. Work within it, and say in your answer what needed more.`;
  }
  return void 0;
}
function isObject(value) {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

// src/cap.ts
var MAX_RESULT_CHARS = 16e3;
var NOTE_ROOM = 1e3;
var CURSOR_ROOM = 300;
var SHORTEST_CUT = 200;
var LISTS = { loop_list: "loops", list_sessions: "sessions" };
function resultSize(value) {
  return JSON.stringify(value).length;
}
async function cappedCall(tool, args, call) {
  const answer = await call(args);
  if (resultSize(answer) <= MAX_RESULT_CHARS) return answer;
  const loops = listIn("loop_list", answer);
  if (tool === "loop_list" && loops !== void 0 && loops.length > 1 && isObject2(args)) {
    const limit = itemsThatFit(answer, "loops");
    const page = await call({ ...args, limit });
    const pageLoops = listIn("loop_list", page) ?? [];
    const more = isObject2(page) && typeof page.next_cursor === "string";
    const rest = loops.slice(pageLoops.length);
    const nextLimit = rest.length > 0 ? itemsThatFit({ ...answer, loops: rest }, "loops") : limit;
    const note = more ? `It shows the first ${pageLoops.length} of the ${loops.length}${isObject2(answer) && answer.next_cursor !== void 0 ? " or more" : ""} loops asked for. For the next ones, call loop_list again with the same arguments and "cursor": ${JSON.stringify(page.next_cursor)}, "limit": ${nextLimit}; each answer's next_cursor leads on.` : void 0;
    return cut(tool, page, note);
  }
  return cut(tool, answer, void 0);
}
function itemsThatFit(answer, key) {
  const items = answer[key];
  let room = MAX_RESULT_CHARS - NOTE_ROOM - CURSOR_ROOM - resultSize({ ...answer, [key]: [] });
  let count = 0;
  for (const item of items) {
    room -= resultSize(item) + 1;
    if (room < 0) break;
    count += 1;
  }
  return Math.max(1, count);
}
function cut(tool, answer, pagedNote) {
  const notes = pagedNote === void 0 ? [] : [pagedNote];
  let value = answer;
  const budget = MAX_RESULT_CHARS - NOTE_ROOM;
  const key = LISTS[tool];
  const items = listIn(tool, value);
  if (tool === "list_sessions" && key !== void 0 && items !== void 0 && resultSize(value) > budget) {
    const kept = itemsThatFit(value, key);
    if (kept < items.length) {
      value = { ...value, [key]: items.slice(0, kept) };
      notes.push(
        `It shows the newest ${kept} of the ${items.length} sessions; list_sessions has no paging, so the older ones are left out. check_session_status reads any one session by its ID.`
      );
    }
  }
  if (resultSize(value) > budget) {
    const shortened = shortenTexts(value, budget);
    if (shortened !== void 0) {
      value = shortened.value;
      notes.push(
        `${shortened.count} long text${shortened.count === 1 ? " is" : "s are"} cut short where marked "\u2026[N more characters cut]"; dshloop keeps them whole.`
      );
    }
  }
  if (notes.length === 0 && resultSize(value) <= MAX_RESULT_CHARS) return value;
  const bound = String(MAX_RESULT_CHARS).replace(/\B(?=(\d{3})+$)/g, ",");
  const note = [`This answer is cut to fit the ${bound} characters a tool result may take.`, ...notes].join(" ");
  const noted = isObject2(value) ? { truncated: note, ...value } : void 0;
  if (noted !== void 0 && resultSize(noted) <= MAX_RESULT_CHARS) return noted;
  const text2 = JSON.stringify(value);
  const truncated = `${note} Only its start is shown, as JSON text.`;
  let length = MAX_RESULT_CHARS - truncated.length;
  let partial;
  do {
    partial = { truncated, partial: text2.slice(0, length) };
    length -= resultSize(partial) - MAX_RESULT_CHARS;
  } while (resultSize(partial) > MAX_RESULT_CHARS);
  return partial;
}
function shortenTexts(value, budget) {
  let low = SHORTEST_CUT;
  let high = longestText(value);
  if (high <= low || resultSize(shorten(value, low).value) > budget) {
    const shortest = shorten(value, low);
    return shortest.count > 0 ? shortest : void 0;
  }
  while (low < high) {
    const middle = Math.ceil((low + high) / 2);
    if (resultSize(shorten(value, middle).value) <= budget) low = middle;
    else high = middle - 1;
  }
  return shorten(value, low);
}
function shorten(value, length) {
  let count = 0;
  const walk = (node) => {
    if (typeof node === "string") {
      if (node.length <= length) return node;
      count += 1;
      const end = /[\uD800-\uDBFF]/.test(node[length - 1] ?? "") ? length - 1 : length;
      return `${node.slice(0, end)}\u2026[${node.length - end} more characters cut]`;
    }
    if (Array.isArray(node)) return node.map(walk);
    if (isObject2(node)) return Object.fromEntries(Object.entries(node).map(([key, item]) => [key, walk(item)]));
    return node;
  };
  return { value: walk(value), count };
}
function longestText(value) {
  if (typeof value === "string") return value.length;
  if (Array.isArray(value)) return value.reduce((longest, item) => Math.max(longest, longestText(item)), 0);
  if (isObject2(value)) return Object.values(value).reduce((longest, item) => Math.max(longest, longestText(item)), 0);
  return 0;
}
function listIn(tool, value) {
  const key = LISTS[tool];
  if (key === void 0 || !isObject2(value)) return void 0;
  const items = value[key];
  return Array.isArray(items) ? items : void 0;
}
function isObject2(value) {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

// src/catalogue.json
var catalogue_default = {
  tools: [
    {
      name: "loop_create",
      description: `Schedule a prompt to be sent to an agent session, repeatedly or once. schedule is one of three kinds (durations in whole seconds): every N seconds, e.g. {"kind": "every", "every_seconds": 600} (every 10 minutes, the first one 10 minutes from now); once after N seconds, e.g. {"kind": "after", "after_seconds": 3600} (in an hour); or a 5-field cron in an IANA time zone (the host's if tz is omitted), e.g. {"kind": "cron", "expr": "30 9 * * 1-5", "tz": "Asia/Shanghai"} (09:30 on weekdays). session_id is the target: omit it for your own session; "self" for the global interface session; "new" for a fresh session on every run (optionally with "preset": "<name>"; a recurring "new" loop runs at most every 5 minutes by default); or an existing session ID from list_sessions, e.g. "ses_123". Example: {"prompt": "Check the deploy", "schedule": {"kind": "every", "every_seconds": 600}}. Returns the loop with its loop_id and next_at (epoch ms).`,
      input_schema: {
        $defs: {
          AfterSchedule: {
            additionalProperties: false,
            description: "One occurrence, after_seconds after creation.",
            properties: {
              kind: {
                const: "after",
                title: "Kind",
                type: "string"
              },
              after_seconds: {
                description: "Whole seconds, 1..2^53-1 (a JSON integer).",
                maximum: 9007199254740991,
                minimum: 1,
                title: "After Seconds",
                type: "integer"
              }
            },
            required: [
              "kind",
              "after_seconds"
            ],
            title: "AfterSchedule",
            type: "object"
          },
          CronSchedule: {
            additionalProperties: false,
            description: "Wall-clock schedule, 5-field cron, in tz (IANA) or the host time zone.",
            properties: {
              kind: {
                const: "cron",
                title: "Kind",
                type: "string"
              },
              expr: {
                description: 'e.g. "30 9 * * 1-5"',
                maxLength: 200,
                minLength: 1,
                title: "Expr",
                type: "string"
              },
              tz: {
                anyOf: [
                  {
                    description: 'IANA name, e.g. "Asia/Shanghai"',
                    maxLength: 64,
                    type: "string"
                  },
                  {
                    type: "null"
                  }
                ],
                default: null,
                title: "Tz"
              }
            },
            required: [
              "kind",
              "expr"
            ],
            title: "CronSchedule",
            type: "object"
          },
          EverySchedule: {
            additionalProperties: false,
            description: "Recurring interval; the first occurrence is one full interval after creation.",
            properties: {
              kind: {
                const: "every",
                title: "Kind",
                type: "string"
              },
              every_seconds: {
                description: "Whole seconds, 1..2^53-1 (a JSON integer).",
                maximum: 9007199254740991,
                minimum: 1,
                title: "Every Seconds",
                type: "integer"
              }
            },
            required: [
              "kind",
              "every_seconds"
            ],
            title: "EverySchedule",
            type: "object"
          }
        },
        additionalProperties: false,
        properties: {
          prompt: {
            description: "What to send; trimmed, non-empty, at most 100,000 characters, no control characters but tab and line breaks.",
            maxLength: 1e5,
            pattern: "^[^\0-\b\v\f-\uFFFE\uFFFF]*$",
            title: "Prompt",
            type: "string"
          },
          schedule: {
            anyOf: [
              {
                discriminator: {
                  mapping: {
                    after: "#/$defs/AfterSchedule",
                    cron: "#/$defs/CronSchedule",
                    every: "#/$defs/EverySchedule"
                  },
                  propertyName: "kind"
                },
                oneOf: [
                  {
                    $ref: "#/$defs/EverySchedule"
                  },
                  {
                    $ref: "#/$defs/AfterSchedule"
                  },
                  {
                    $ref: "#/$defs/CronSchedule"
                  }
                ]
              },
              {
                type: "null"
              }
            ],
            default: null,
            description: "Required unless the deprecated time_in_seconds is used.",
            title: "Schedule"
          },
          session_id: {
            anyOf: [
              {
                description: 'Omit for the calling session; "self" for the global interface; "new" for a fresh session per occurrence; or an existing session ID.',
                maxLength: 255,
                minLength: 1,
                type: "string"
              },
              {
                type: "null"
              }
            ],
            default: null,
            title: "Session Id"
          },
          preset: {
            anyOf: [
              {
                description: 'Only with session_id "new": the preset to mount.',
                maxLength: 255,
                minLength: 1,
                type: "string"
              },
              {
                type: "null"
              }
            ],
            default: null,
            title: "Preset"
          },
          time_in_seconds: {
            anyOf: [
              {
                description: "Whole seconds, 1..2^53-1 (a JSON integer).",
                maximum: 9007199254740991,
                minimum: 1,
                type: "integer"
              },
              {
                type: "null"
              }
            ],
            default: null,
            deprecated: true,
            description: "Deprecated v1 alias for schedule {kind: every, every_seconds}.",
            title: "Time In Seconds"
          }
        },
        required: [
          "prompt"
        ],
        title: "LoopCreateIn",
        type: "object"
      }
    },
    {
      name: "loop_list",
      description: `List active loops, soonest next_at first (loops without one last): {} for the loops that target your session, {"session_id": "global"} for every loop, or {"session_id": "ses_123"} for one session's. "self" and "new" are loop_create targets, not list scopes. The whole list by default; for pages, add "limit" (1..1000) and pass each answer's "next_cursor" back as "cursor" until an answer has none, e.g. {"session_id": "global", "limit": 100}. Read-only.`,
      input_schema: {
        additionalProperties: false,
        description: "The whole list, or with limit one page of it; the order is the same either way (contract \xA73).",
        properties: {
          session_id: {
            anyOf: [
              {
                description: 'Omit for the calling session; "global" for every loop; or a session ID.',
                maxLength: 255,
                minLength: 1,
                type: "string"
              },
              {
                type: "null"
              }
            ],
            default: null,
            title: "Session Id"
          },
          limit: {
            anyOf: [
              {
                description: "Page size, 1..1000: at most this many loops, with next_cursor while more remain. Omit for the whole list.",
                maximum: 1e3,
                minimum: 1,
                type: "integer"
              },
              {
                type: "null"
              }
            ],
            default: null,
            title: "Limit"
          },
          cursor: {
            anyOf: [
              {
                description: "The next_cursor of the previous page, as it came: the next page of the same list (same session_id, and the same caller for {}). Needs limit.",
                maxLength: 1e3,
                minLength: 1,
                type: "string"
              },
              {
                type: "null"
              }
            ],
            default: null,
            title: "Cursor"
          }
        },
        title: "LoopListIn",
        type: "object"
      }
    },
    {
      name: "loop_delete",
      description: 'Delete a loop by its loop_id, e.g. {"loop_id": "loop_3f9a1c2b7d4e6a80"}: any loop, from any session (loop_list shows the IDs). Its run history is kept.',
      input_schema: {
        additionalProperties: false,
        properties: {
          loop_id: {
            anyOf: [
              {
                maxLength: 255,
                minLength: 1,
                type: "string"
              },
              {
                type: "null"
              }
            ],
            default: null,
            title: "Loop Id"
          },
          id: {
            anyOf: [
              {
                maxLength: 255,
                minLength: 1,
                type: "string"
              },
              {
                type: "null"
              }
            ],
            default: null,
            deprecated: true,
            description: "Deprecated v1 alias of loop_id.",
            title: "Id"
          }
        },
        title: "LoopDeleteIn",
        type: "object"
      }
    },
    {
      name: "list_sessions",
      description: 'List sessions (live and cold), newest activity first, with their durable titles, e.g. {"limit": 20}; a session_id from here is a loop_create target. Read-only.',
      input_schema: {
        additionalProperties: false,
        properties: {
          limit: {
            default: 50,
            description: "How many sessions, newest first.",
            maximum: 500,
            minimum: 1,
            title: "Limit",
            type: "integer"
          }
        },
        title: "ListSessionsIn",
        type: "object"
      }
    },
    {
      name: "check_session_status",
      description: 'Status of one exact session, e.g. {"session_id": "ses_123"}: running, idle, cold or missing. Read-only: it never resumes the session.',
      input_schema: {
        additionalProperties: false,
        properties: {
          session_id: {
            description: "An exact session ID.",
            maxLength: 255,
            minLength: 1,
            title: "Session Id",
            type: "string"
          }
        },
        required: [
          "session_id"
        ],
        title: "CheckSessionStatusIn",
        type: "object"
      }
    }
  ]
};

// src/dshloop.ts
var DshloopError = class extends Error {
  code;
  /** contract §3: the input field the refusal is about, when dshloop named one. */
  field;
  /** dshloop's own sentence, without the prefix a model reads (a person's form shows this). */
  detail;
  constructor(code, message, field, detail) {
    super(message);
    this.name = "DshloopError";
    this.code = code;
    this.field = field;
    this.detail = detail ?? message;
  }
};
var TOOL_NAMES = ["loop_create", "loop_list", "loop_delete", "list_sessions", "check_session_status"];
function baseUrl(url) {
  return url.replace(/\/+$/, "");
}
function headerValue(text2) {
  return Buffer.from(text2, "utf8").toString("latin1");
}
function errorMessage(status, body) {
  const error = isObject3(body) && isObject3(body.error) ? body.error : void 0;
  const code = typeof error?.code === "string" && error.code !== "" ? error.code : `http_${status}`;
  const message = typeof error?.message === "string" && error.message !== "" ? error.message : `dshloop answered HTTP ${status} without the contract's error body.`;
  const field = typeof error?.field === "string" && error.field !== "" ? error.field : void 0;
  const where = field === void 0 ? "" : ` (field: ${field})`;
  return new DshloopError(code, `dshloop refused the call: ${code}: ${message}${where}`, field, message);
}
function unreachable(url, cause) {
  const detail = cause instanceof Error ? causeText(cause) : String(cause);
  return new DshloopError(
    "unreachable",
    `dshloop is not reachable at ${baseUrl(url)} (${detail}). The loop tools need the dshloop server running there; nothing was changed. Try again once it is back.`
  );
}
function timedOut(url, timeoutMs) {
  return new DshloopError(
    "timeout",
    `dshloop at ${baseUrl(url)} did not answer within ${timeoutMs / 1e3} s; whether the call took effect is unknown (loop_list shows the current loops).`
  );
}
async function callTool(endpoint, name2, args, sessionId, signal, idempotencyKey) {
  const headers = {
    "Content-Type": "application/json",
    "X-DSH-Session-Id": headerValue(sessionId)
  };
  if (idempotencyKey !== void 0 && idempotencyKey !== "") headers["Idempotency-Key"] = headerValue(idempotencyKey);
  const response = await request(endpoint, `/api/tools/${encodeURIComponent(name2)}`, signal, {
    method: "POST",
    headers,
    body: JSON.stringify(args ?? {})
  });
  const body = await readJson(endpoint, response, signal);
  if (!response.ok) throw errorMessage(response.status, body);
  return body;
}
async function getJson(endpoint, path, signal) {
  const response = await request(endpoint, path, signal, { method: "GET" });
  const body = await readJson(endpoint, response, signal);
  if (!response.ok) throw errorMessage(response.status, body);
  return body;
}
async function callApi(endpoint, method, path, options = {}) {
  const headers = {};
  if (options.via !== void 0) headers["X-Dshloop-Via"] = options.via;
  if (options.body !== void 0) headers["Content-Type"] = "application/json";
  const response = await request(endpoint, path, options.signal, {
    method,
    headers,
    ...options.body === void 0 ? {} : { body: JSON.stringify(options.body) }
  });
  const body = await readJson(endpoint, response, options.signal);
  if (!response.ok) throw errorMessage(response.status, body);
  return body;
}
async function fetchCatalogue(endpoint, signal) {
  const response = await request(endpoint, "/api/tools", signal, { method: "GET" });
  const body = await readJson(endpoint, response, signal);
  if (!response.ok) throw errorMessage(response.status, body);
  const tools = parseCatalogue(body);
  if (tools === void 0) throw new DshloopError("bad_catalogue", "dshloop sent a tool catalogue without the five tools.");
  return tools;
}
function parseCatalogue(body) {
  if (!isObject3(body) || !Array.isArray(body.tools)) return void 0;
  const tools = [];
  for (const item of body.tools) {
    if (!isObject3(item) || typeof item.name !== "string" || typeof item.description !== "string") return void 0;
    if (!isObject3(item.input_schema)) return void 0;
    tools.push({ name: item.name, description: item.description, input_schema: item.input_schema });
  }
  const names = tools.map((tool) => tool.name).sort();
  if (JSON.stringify(names) !== JSON.stringify([...TOOL_NAMES].sort())) return void 0;
  return tools;
}
async function request(endpoint, path, signal, init) {
  const doFetch = endpoint.fetch ?? fetch;
  const timeout = AbortSignal.timeout(endpoint.timeoutMs);
  try {
    return await doFetch(`${baseUrl(endpoint.url)}${path}`, {
      ...init,
      headers: { ...init.headers, Authorization: `Bearer ${endpoint.token}` },
      signal: signal === void 0 ? timeout : AbortSignal.any([signal, timeout]),
      redirect: "error"
      // a redirect would carry the token elsewhere
    });
  } catch (error) {
    throw failure(endpoint, error, timeout, signal);
  }
}
async function readJson(endpoint, response, signal) {
  let text2;
  try {
    text2 = await response.text();
  } catch (error) {
    throw failure(endpoint, error, void 0, signal);
  }
  try {
    return JSON.parse(text2);
  } catch {
    throw new DshloopError(
      `http_${response.status}`,
      `dshloop at ${baseUrl(endpoint.url)} answered HTTP ${response.status} with a body that is not JSON; is DSHLOOP_URL right?`
    );
  }
}
function failure(endpoint, error, timeout, signal) {
  if (signal?.aborted) return new DshloopError("cancelled", "The call was cancelled.");
  if (timeout?.aborted || error instanceof Error && error.name === "TimeoutError") {
    return timedOut(endpoint.url, endpoint.timeoutMs);
  }
  return unreachable(endpoint.url, error);
}
function causeText(error) {
  const cause = error.cause;
  if (cause instanceof Error) {
    const code = cause.code;
    return typeof code === "string" ? code : cause.message;
  }
  return error.message;
}
function isObject3(value) {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

// src/cards.ts
var MAX_CARD_LOOPS = 20;
var CARD_RUNS = 100;
function parseLoopIds(payload) {
  const ids = payload?.loopIds;
  if (!Array.isArray(ids) || ids.length === 0 || ids.length > MAX_CARD_LOOPS) {
    throw new DshloopError("bad-request", `loopIds must list 1 to ${MAX_CARD_LOOPS} loop IDs`);
  }
  if (!ids.every((id) => typeof id === "string" && id !== "" && id.length <= 120)) {
    throw new DshloopError("bad-request", "each loop ID must be a non-empty string");
  }
  return [...new Set(ids)];
}
function loopPanelUrl(dshloopUrl, loopId) {
  return `${dshloopUrl.replace(/\/+$/, "")}/panel/loops/${encodeURIComponent(loopId)}/`;
}
function text(value) {
  return typeof value === "string" && value !== "" ? value : void 0;
}
async function loopCard(endpoint, loopId, signal) {
  const path = `/api/loops/${encodeURIComponent(loopId)}`;
  const panelUrl2 = loopPanelUrl(endpoint.url, loopId);
  let detail;
  try {
    detail = await getJson(endpoint, path, signal);
  } catch (error) {
    if (error instanceof DshloopError && error.code === "unknown_loop") {
      return { loop_id: loopId, deleted: true, panelUrl: panelUrl2, runs: await cardRuns(endpoint, path, signal) };
    }
    throw error;
  }
  const runs = await cardRuns(endpoint, path, signal);
  const optional = (name2) => text(detail[name2]) === void 0 ? {} : { [name2]: text(detail[name2]) };
  return {
    loop_id: loopId,
    deleted: false,
    ...optional("name"),
    ...optional("prompt"),
    ...optional("schedule_text"),
    ...optional("state"),
    ...optional("last_result"),
    ...optional("last_error"),
    ...optional("pause_reason"),
    panelUrl: panelUrl2,
    runs
  };
}
async function cardRuns(endpoint, path, signal) {
  const listed = await getJson(endpoint, `${path}/runs?limit=${CARD_RUNS}`, signal).catch(() => ({ runs: [] }));
  const runs = {};
  for (const run of listed.runs ?? []) {
    const item = run;
    if (typeof item.run_id !== "string") continue;
    const outcome = text(item.outcome), error = text(item.error);
    runs[item.run_id] = {
      status: String(item.status ?? ""),
      ...outcome === void 0 ? {} : { outcome },
      ...error === void 0 ? {} : { error }
    };
  }
  return runs;
}
async function loopCards(endpoint, payload, signal) {
  const ids = parseLoopIds(payload);
  const cards = await Promise.all(ids.map((id) => loopCard(endpoint, id, signal)));
  return Object.fromEntries(cards.map((card) => [card.loop_id, card]));
}

// src/deliver.ts
var PLUGIN_NAME = "dshloop";
var DeliverError = class extends Error {
  code;
  constructor(code, message) {
    super(message);
    this.code = code;
  }
};
var SUMMARY_MAX = 120;
var CONFIRM_MAX_MS = 3e4;
function parseDeliverRequest(payload) {
  const body = payload ?? {};
  const text2 = (name2) => {
    const value = body[name2];
    if (typeof value !== "string" || value === "") throw new DeliverError("bad-request", `${name2} must be a non-empty string`);
    return value;
  };
  const sessionId = text2("sessionId"), message = text2("text"), key = text2("key");
  const loop = body.loop ?? {};
  if (typeof loop.loop_id !== "string" || typeof loop.run_id !== "string") {
    throw new DeliverError("bad-request", "loop must be {loop_id, run_id}");
  }
  const summary = typeof body.summary === "string" ? body.summary : "";
  const number = (value, max) => typeof value === "number" && Number.isFinite(value) && value > 0 ? Math.min(value, max) : 0;
  return {
    sessionId,
    text: message,
    key,
    summary: summary.length <= SUMMARY_MAX ? summary : `${summary.slice(0, SUMMARY_MAX - 1)}\u2026`,
    loop: { loop_id: loop.loop_id, run_id: loop.run_id },
    notice: body.notice === true,
    since: number(body.since, Number.MAX_SAFE_INTEGER),
    confirmMs: number(body.confirmMs, CONFIRM_MAX_MS)
  };
}
function ringKeyOf(payload) {
  const key = payload?.key;
  if (typeof key !== "string" || key === "" || key.length > 255) throw new DeliverError("bad-request", "key must be a delivery key");
  return key;
}
async function fetchDelivery(endpoint, key, signal) {
  let body;
  try {
    body = await getJson(endpoint, `/api/dsh/deliveries/${encodeURIComponent(key)}`, signal);
  } catch (error) {
    if (error instanceof DshloopError) {
      const code = error.code === "not_found" ? "not-offered" : error.code;
      throw new DeliverError(code, `Nothing was delivered: ${error.message}`);
    }
    throw error;
  }
  const offered = body ?? {};
  if (offered.key !== key) throw new DeliverError("not-offered", `dshloop offered no message under ${key}: nothing was delivered.`);
  return offered;
}
function deliveryKeyOf(message) {
  const source = message?.source;
  return source?.deliveryKey;
}
function messageIdOf(event) {
  const id = event.data?.id;
  return typeof id === "string" && id !== "" ? id : String(event.seq ?? "");
}
function whereIs(agent, key, since = 0) {
  const events = agent.session.events;
  let start = events.length;
  while (start > 0 && !((events[start - 1].time ?? since) < since)) start -= 1;
  let queuedOn;
  for (let index = start; index < events.length; index += 1) {
    const event = events[index];
    if (event.type === "user/message") {
      if (deliveryKeyOf(event.data) === key) return { where: "delivered", messageId: messageIdOf(event) };
    } else if (event.type === "agent/inbox/spliced") {
      const splice = event.data ?? {};
      const inserted = Array.isArray(splice.inserted) ? splice.inserted : [];
      if (inserted.some((message) => deliveryKeyOf(message) === key)) queuedOn = splice.target;
      else if (queuedOn !== void 0 && splice.target === queuedOn && splice.outcome === "canceled") queuedOn = void 0;
    }
  }
  const inbox = [...agent.inbox.nextTurn, ...agent.inbox.nextStep];
  return queuedOn !== void 0 || inbox.some((message) => deliveryKeyOf(message) === key) ? { where: "pending" } : { where: "absent" };
}
function frozen(value) {
  if (value !== null && typeof value === "object") {
    for (const part of Object.values(value)) frozen(part);
    Object.freeze(value);
  }
  return value;
}
function deliver(agent, request2) {
  if (agent === void 0) {
    throw new DeliverError(
      "session-not-loaded",
      `Session ${request2.sessionId} is not loaded in DSH (dshloop loads a cold session before it delivers): try again.`
    );
  }
  const delivery = agent.status === "running" ? "next_step" : "next_turn";
  const found = whereIs(agent, request2.key, request2.since);
  if (found.where === "delivered") return { status: "already", delivery, messageId: found.messageId };
  if (found.where === "pending") return { status: "already", delivery };
  const message = frozen({
    id: crypto.randomUUID(),
    role: "user",
    content: [{ type: "text", text: request2.text }],
    source: {
      kind: "plugin",
      plugin: PLUGIN_NAME,
      form: "notice",
      summary: request2.summary,
      deliveryKey: request2.key,
      loop: { loop_id: request2.loop.loop_id, run_id: request2.loop.run_id },
      ...request2.notice ? { notice: true } : {}
    }
  });
  agent.send(message, delivery === "next_step" ? "next-step" : "next-turn", true);
  return { status: "sent", delivery };
}

// src/panel.ts
var VIA = "DSH Web";
var LIST_LIMIT = 100;
var HISTORY_LIMIT = 20;
var DELIVERED_LIMIT = 10;
var SESSIONS_LIMIT = 200;
var ACTIONS = { pause: "pause", resume: "resume", approve: "resume", run: "run", retry: "retry" };
var FILTERS = ["state", "target", "session", "q"];
var LOOP_MAKING_OPS = ["create", "edit"];
async function panelCall(endpoint, payload, signal, freshRunAt = () => void 0) {
  if (!isObject4(payload) || typeof payload.op !== "string") throw new DshloopError("bad-request", "payload must be {op, \u2026}");
  const options = signal === void 0 ? { via: VIA } : { via: VIA, signal };
  const op = payload.op;
  const working = LOOP_MAKING_OPS.includes(op) ? freshRunAt() : void 0;
  if (working !== void 0) {
    throw new DshloopError(
      "forbidden",
      `A fresh run (session ${working}) is working now, and DSH Web's channel cannot tell its commands from you: no loop is made or edited here until it ends. Try again then, or use dshloop's own panel.`
    );
  }
  if (op === "list") return callApi(endpoint, "GET", `/api/loops?${listQuery(payload)}`, options);
  if (op === "sessions") {
    return callApi(endpoint, "POST", "/api/tools/list_sessions", { ...options, body: { limit: SESSIONS_LIMIT } });
  }
  if (op === "delivered") {
    const sessionId = payload.sessionId;
    if (typeof sessionId !== "string" || sessionId === "") throw new DshloopError("bad-request", "sessionId must be a session ID");
    const query = new URLSearchParams({ session: sessionId, limit: String(DELIVERED_LIMIT) });
    return callApi(endpoint, "GET", `/api/runs?${query}`, options);
  }
  if (op === "create") return callApi(endpoint, "POST", "/api/loops", { ...options, body: objectOf(payload.input, "input") });
  const path = `/api/loops/${encodeURIComponent(loopIdOf(payload))}`;
  if (op === "loop") {
    const [runs, events] = await Promise.all([
      callApi(endpoint, "GET", `${path}/runs?limit=${HISTORY_LIMIT}`, options),
      callApi(endpoint, "GET", `${path}/events?limit=${HISTORY_LIMIT}`, options)
    ]);
    return { ...runs, ...events };
  }
  if (op === "edit") return callApi(endpoint, "PATCH", path, { ...options, body: objectOf(payload.changes, "changes") });
  if (op === "delete") return callApi(endpoint, "DELETE", path, options);
  if (Object.hasOwn(ACTIONS, op)) return callApi(endpoint, "POST", `${path}/${ACTIONS[op]}`, options);
  throw new DshloopError("bad-request", `unknown panel op ${op}`);
}
function listQuery(payload) {
  const query = new URLSearchParams();
  for (const name2 of FILTERS) {
    const value = payload[name2];
    if (typeof value === "string" && value !== "") query.set(name2, value);
  }
  query.set("limit", String(LIST_LIMIT));
  return query.toString();
}
function loopIdOf(payload) {
  const loopId = payload.loopId;
  if (typeof loopId !== "string" || loopId === "" || loopId.length > 200) {
    throw new DshloopError("bad-request", "loopId must be a loop ID");
  }
  return loopId;
}
function objectOf(value, name2) {
  if (!isObject4(value)) throw new DshloopError("bad-request", `${name2} must be an object`);
  return value;
}
function isObject4(value) {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

// src/sessions.ts
var SESSIONS_MAX = 200;
function idsOf(payload) {
  const ids = payload?.ids;
  if (!Array.isArray(ids) || ids.length > SESSIONS_MAX || !ids.every((id) => typeof id === "string" && id !== "")) {
    throw new Error(`ids must be a list of at most ${SESSIONS_MAX} session IDs`);
  }
  return [...new Set(ids)];
}
function presetOf(agent) {
  const events = agent.session.events;
  for (let index = events.length - 1; index >= 0; index -= 1) {
    const event = events[index];
    if (event.type === "agent-preset/selected") {
      const chosen = event.data?.agentPreset;
      if (chosen !== void 0) return chosen;
    }
  }
  return agent.session.header?.agentPreset;
}
function described(header, events, projections) {
  return {
    cwd: typeof header.cwd === "string" ? header.cwd : void 0,
    agentPreset: presetOf({ status: "idle", session: { header, events } }),
    createdAt: typeof header.createdAt === "number" ? header.createdAt : void 0,
    projections
  };
}
function fromMemory(read) {
  try {
    return read();
  } catch {
    return void 0;
  }
}
async function stored(sessionId, stores) {
  if (stores.persistence === void 0) return { sessionId, attached: false };
  let inspected;
  try {
    inspected = await stores.persistence.inspect(sessionId);
  } catch (error) {
    const missing = error instanceof Error && error.message === `session "${sessionId}" not found`;
    return missing ? { sessionId, attached: false, found: false } : { sessionId, attached: false };
  }
  const header = inspected.meta ?? {};
  if (typeof header.cwd !== "string") return { sessionId, attached: false, found: false };
  const projections = fromMemory(() => stores.projectionCache?.cachedSnapshot(inspected.meta));
  return { sessionId, attached: false, found: true, ...described(header, inspected.events ?? [], projections) };
}
async function sessionsOf(agents, stores, payload) {
  return Promise.all(idsOf(payload).map(async (sessionId) => {
    const agent = agents.get(sessionId);
    if (agent === void 0) return stored(sessionId, stores);
    const projections = fromMemory(() => stores.projections?.snapshot(agent.session));
    const live = { sessionId, attached: true, running: agent.status === "running" };
    return { ...live, ...described(agent.session.header ?? {}, agent.session.events, projections) };
  }));
}

// src/status.ts
function panelUrl(dshloopUrl, sessionId) {
  return `${dshloopUrl.replace(/\/+$/, "")}/panel/?session=${encodeURIComponent(sessionId)}`;
}

// src/channel.ts
async function handleRpc(endpoint, rpcEndpoint, payload, signal, deliveries) {
  if (rpcEndpoint === "hello") {
    const can = deliveries !== void 0;
    return { ok: true, value: { plugin: PLUGIN_NAME, deliver: can, confirm: can && deliveries.confirmations !== void 0, sessions: can } };
  }
  if (rpcEndpoint === "deliver" && deliveries !== void 0) return deliverRpc(endpoint, payload, signal, deliveries);
  if (rpcEndpoint === "sessions" && deliveries !== void 0) {
    try {
      return { ok: true, value: { sessions: await sessionsOf(deliveries.agents, deliveries.stores?.() ?? {}, payload) } };
    } catch (error) {
      return rpcError("bad-request", error instanceof Error ? error.message : String(error));
    }
  }
  if (rpcEndpoint === "cards") {
    try {
      return { ok: true, value: { loops: await loopCards(endpoint, payload, signal) } };
    } catch (error) {
      const code = error instanceof DshloopError ? error.code : "internal";
      return rpcError(code, error instanceof Error ? error.message : String(error));
    }
  }
  if (rpcEndpoint === "panel") {
    try {
      return { ok: true, value: await panelCall(endpoint, payload, signal, deliveries?.freshRunAt) };
    } catch (error) {
      if (error instanceof DshloopError) {
        return { ok: true, value: { refused: { code: error.code, message: error.detail, ...error.field === void 0 ? {} : { field: error.field } } } };
      }
      return rpcError("internal", error instanceof Error ? error.message : String(error));
    }
  }
  if (rpcEndpoint !== "status") return rpcError("not-found", `unknown endpoint ${rpcEndpoint}`);
  const sessionId = payload?.sessionId;
  if (typeof sessionId !== "string" || sessionId === "") return rpcError("bad-request", "sessionId must be a non-empty string");
  try {
    const answer = await callTool(endpoint, "loop_list", {}, sessionId, signal);
    const loops = answer.loops;
    return { ok: true, value: { loops: Array.isArray(loops) ? loops : [], panelUrl: panelUrl(endpoint.url, sessionId) } };
  } catch (error) {
    const code = error instanceof DshloopError ? error.code : "internal";
    if (code === "unknown_session") return { ok: true, value: { loops: [], panelUrl: panelUrl(endpoint.url, sessionId) } };
    return rpcError(code, error instanceof Error ? error.message : String(error));
  }
}
async function deliverRpc(endpoint, payload, signal, deliveries) {
  let logged;
  const rung = Date.now();
  try {
    const body = await fetchDelivery(endpoint, ringKeyOf(payload), signal);
    const request2 = parseDeliverRequest(body);
    const agent = deliveries.agents.get(request2.sessionId);
    if (agent !== void 0 && body.unattended === true) await deliveries.restrict(agent, extraToolsOf(body.extraTools));
    logged = request2.confirmMs > 0 ? deliveries.confirmations?.expect(request2.sessionId, request2.key) : void 0;
    const answer = deliver(agent, request2);
    if (answer.messageId !== void 0 || logged === void 0 || agent === void 0) return { ok: true, value: answer };
    const messageId = await logged.within(request2.confirmMs - (Date.now() - rung), signal) ?? loggedId(agent, request2);
    return { ok: true, value: messageId === void 0 ? answer : { ...answer, messageId } };
  } catch (error) {
    if (error instanceof DeliverError) return rpcError(error.code, error.message);
    return rpcError("internal", error instanceof Error ? error.message : String(error));
  } finally {
    logged?.cancel();
  }
}
function loggedId(agent, request2) {
  const found = whereIs(agent, request2.key, request2.since);
  return found.where === "delivered" ? found.messageId : void 0;
}
function rpcError(code, message) {
  return { ok: false, error: { code, message, details: {} } };
}

// src/confirm.ts
var Confirmations = class {
  waiting = /* @__PURE__ */ new Map();
  /** One session event, as DSH's `session/event` hands it over: a waited-for message resolves its waiters. */
  observe(sessionId, event) {
    if (event.type !== "user/message" || this.waiting.size === 0) return;
    const key = deliveryKeyOf(event.data);
    if (typeof key !== "string") return;
    for (const waiter of this.waiting.get(key) ?? []) {
      if (waiter.sessionId === sessionId) waiter.resolve(messageIdOf(event));
    }
  }
  /** Wait for the `user/message` carrying `key` in `sessionId`'s log, from now on. */
  expect(sessionId, key) {
    let logged;
    let wake;
    const waiter = {
      sessionId,
      resolve: (messageId) => {
        logged ??= messageId;
        wake?.();
      }
    };
    const waiters = this.waiting.get(key) ?? /* @__PURE__ */ new Set();
    waiters.add(waiter);
    this.waiting.set(key, waiters);
    const cancel = () => {
      waiters.delete(waiter);
      if (waiters.size === 0 && this.waiting.get(key) === waiters) this.waiting.delete(key);
    };
    return {
      cancel,
      async within(ms, signal) {
        try {
          if (logged === void 0 && ms > 0 && !signal?.aborted) {
            await new Promise((resolve) => {
              const done = () => {
                clearTimeout(timer);
                signal?.removeEventListener("abort", done);
                resolve();
              };
              const timer = setTimeout(done, ms);
              signal?.addEventListener("abort", done);
              wake = done;
            });
          }
          return logged;
        } finally {
          cancel();
        }
      }
    };
  }
  /** How many deliveries wait (for the tests). */
  get size() {
    return this.waiting.size;
  }
};

// src/own-dshloop.ts
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmodSync, closeSync, mkdirSync, openSync, readSync, statSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
var RESTART_BACKOFF_MS = [1e3, 2e3, 5e3, 1e4, 3e4];
var HEALTHY_AFTER_MS = 6e4;
var LOCK_HELD_EXIT = 75;
var LOCK_HELD_QUICK_TRIES = 3;
var LOCK_HELD_RETRY_MS = 3e4;
var READY_TIMEOUT_MS = 12e4;
var POLL_MS = 200;
var STOP_TIMEOUT_MS = 15e3;
var NOT_INHERITED = ["DATABASE_URL", "DJANGO_SECRET_KEY", "DJANGO_SETTINGS_MODULE", "DSHLOOP_TOKEN", "DSHLOOP_TOKEN_FD", "DSHLOOP_URL", "DSHLOOP_VAR_DIR"];
function makeToken() {
  return "dsh_" + randomBytes(32).toString("base64url");
}
function startFailure(command, spawnError, output, exit, logPath, fixedPort = 0) {
  const fix = "DSH Web keeps working, without loops, meanwhile.";
  if (spawnError === "ENOENT") {
    return `dshloop: cannot start this profile's dshloop: no ${JSON.stringify(command)} command on DSH's PATH. Install it (pip install dshloop, Python 3.11 or newer) or set DSHLOOP_COMMAND to its path, or set DSHLOOP_URL to a dshloop you run; then restart DSH. ${fix}`;
  }
  if (spawnError !== void 0) return `dshloop: cannot start this profile's dshloop (${command}: ${spawnError}). ${fix}`;
  const lines = output.split("\n").map((line) => line.trim()).filter((line) => line !== "");
  const last = lines.at(-1) ?? `no output, ${exit}`;
  if (/SyntaxError|requires[- ]python|Python 3\.(?:[0-9]|10)\b/i.test(output)) {
    return `dshloop: this profile's dshloop needs Python 3.11 or newer (${command} said: ${last}). Reinstall dshloop with a newer Python, or set DSHLOOP_COMMAND to one that has it. ${fix}`;
  }
  if (/address already in use|Errno 98/i.test(output)) {
    if (fixedPort) return `dshloop: port ${fixedPort} (DSHLOOP_PORT) is taken: free it, or set DSHLOOP_PORT to another port or unset it and restart DSH. ${fix}`;
    return `dshloop: the port chosen for this profile's dshloop was taken meanwhile; trying another (${last}).`;
  }
  return `dshloop: this profile's dshloop stopped (${exit}): ${last} (its log: ${logPath}). ${fix}`;
}
function freePort() {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once("error", reject);
    probe.listen(0, "127.0.0.1", () => {
      const address = probe.address();
      const port = typeof address === "object" && address !== null ? address.port : 0;
      probe.close(() => resolve(port));
    });
  });
}
var sleep = (ms, signal) => new Promise((resolve) => {
  const wake = () => {
    clearTimeout(timer);
    signal.removeEventListener("abort", wake);
    resolve();
  };
  const timer = setTimeout(wake, ms);
  signal.addEventListener("abort", wake, { once: true });
});
function exitWords(code, signal) {
  return signal !== null ? `signal ${signal}` : `exit code ${String(code)}`;
}
var OwnDshloop = class {
  stopping = new AbortController();
  child;
  bootstrapping;
  running;
  logPath;
  options;
  constructor(options) {
    this.options = options;
    this.logPath = join(options.dataDir, "dshloop.log");
  }
  start() {
    mkdirSync(this.options.dataDir, { recursive: true, mode: 448 });
    chmodSync(this.options.dataDir, 448);
    this.running = this.supervise().catch((error) => {
      this.options.logger.warn(`dshloop: the profile's dshloop is no longer supervised: ${String(error)}`);
    });
  }
  async stop() {
    this.stopping.abort();
    this.bootstrapping?.kill("SIGTERM");
    const child = this.child;
    if (child !== void 0 && child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((resolve) => child.once("exit", () => resolve()));
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), STOP_TIMEOUT_MS);
      await exited;
      clearTimeout(timer);
    }
    await this.running;
  }
  env() {
    const env = { ...this.options.env ?? process.env };
    for (const name2 of NOT_INHERITED) delete env[name2];
    return { ...env, DSHLOOP_VAR_DIR: this.options.dataDir, DSHLOOP_HOST: "dsh", PYTHONUNBUFFERED: "1" };
  }
  async supervise() {
    const signal = this.stopping.signal;
    let failures = 0;
    let lockHeld = 0;
    let said;
    const say = (why, then = "") => {
      if (why !== said) this.options.logger.warn(`${why}${then}`);
      said = why;
    };
    while (!signal.aborted) {
      const dshUrl = await this.waitForDsh(signal);
      if (dshUrl === void 0) return;
      const port = this.options.port || await freePort();
      const url = `http://127.0.0.1:${port}`;
      const started = Date.now();
      const outcome = await this.runOnce(dshUrl, port, url, signal);
      if (signal.aborted) return;
      if (outcome.exitCode === LOCK_HELD_EXIT) {
        lockHeld += 1;
        if (lockHeld < LOCK_HELD_QUICK_TRIES) {
          await sleep(1e3, signal);
          continue;
        }
        say(`dshloop: another DSH runs this profile's dshloop (${this.options.dataDir}); this one starts none and its loop tools answer once that DSH stops and this one takes over`);
        await sleep(LOCK_HELD_RETRY_MS, signal);
        continue;
      }
      lockHeld = 0;
      if (Date.now() - started >= HEALTHY_AFTER_MS) failures = 0;
      const delay = RESTART_BACKOFF_MS[Math.min(failures, RESTART_BACKOFF_MS.length - 1)] ?? 3e4;
      failures += 1;
      say(outcome.why, ` Restarting it in ${delay / 1e3} s.`);
      await sleep(delay, signal);
    }
  }
  /** Resolves once DSH listens (dshloop is told where to deliver), or undefined when stopping. */
  async waitForDsh(signal) {
    for (; ; ) {
      const url = this.options.dshUrl();
      if (url !== void 0) return url;
      if (signal.aborted) return void 0;
      await sleep(POLL_MS, signal);
    }
  }
  logSize() {
    try {
      return statSync(this.logPath).size;
    } catch {
      return 0;
    }
  }
  logSince(offset) {
    let descriptor;
    try {
      descriptor = openSync(this.logPath, "r");
      const buffer = Buffer.alloc(Math.min(Math.max(this.logSize() - offset, 0), 64 * 1024));
      readSync(descriptor, buffer, 0, buffer.length, Math.max(offset, this.logSize() - buffer.length));
      return buffer.toString("utf8");
    } catch {
      return "";
    } finally {
      if (descriptor !== void 0) closeSync(descriptor);
    }
  }
  /** Run one command to its end (migrate, bootstrap), its output to the log. */
  async once(args, dshUrl) {
    const log = openSync(this.logPath, "a", 384);
    try {
      const child = spawn(this.options.command, args, { stdio: ["ignore", log, log], env: { ...this.env(), DSHLOOP_DSH_URL: dshUrl }, detached: true });
      this.child = child;
      return await new Promise((resolve) => {
        child.once("error", (error) => resolve({ code: null, error: error.code ?? String(error), exit: "not started" }));
        child.once("exit", (code, sig) => resolve({ code, exit: exitWords(code, sig) }));
      });
    } finally {
      closeSync(log);
    }
  }
  async runOnce(dshUrl, port, url, signal) {
    const { command } = this.options;
    const offset = this.logSize();
    const migrated = await this.once(["migrate", "--noinput", "-v", "0"], dshUrl);
    if (signal.aborted) return { why: "stopping" };
    if (migrated.code !== 0) return { why: startFailure(command, migrated.error, this.logSince(offset), `migrate: ${migrated.exit}`, this.logPath, this.options.port) };
    const log = openSync(this.logPath, "a", 384);
    let child;
    try {
      child = spawn(command, ["serve", `127.0.0.1:${port}`, "--plugin-token-fd", "3", "--exit-with-stdin", "--lock-file", join(this.options.dataDir, "serve.lock")], {
        // stdin: a pipe this process holds until it ends (serve --exit-with-stdin); 3: the token.
        stdio: ["pipe", log, log, "pipe"],
        env: { ...this.env(), DSHLOOP_DSH_URL: dshUrl },
        // Its own process group: DSH's terminal's Ctrl-C reaches DSH, which stops dshloop in order.
        detached: true
      });
    } finally {
      closeSync(log);
    }
    this.child = child;
    const ended = new Promise((resolve) => {
      child.once("error", (error) => resolve({ code: null, error: error.code ?? String(error), exit: "not started" }));
      child.once("exit", (code, sig) => resolve({ code, exit: exitWords(code, sig) }));
    });
    const handover = child.stdio[3];
    handover?.on("error", () => {
    });
    handover?.end(`${this.options.token}
`);
    child.stdin?.on("error", () => {
    });
    const ready = await Promise.race([this.waitForHealth(url, signal), ended.then(() => false)]);
    if (ready) {
      this.options.onUrl(url);
      this.options.logger.info(`dshloop: this profile's dshloop serves ${url} (pid ${String(child.pid)}, data in ${this.options.dataDir})`);
      void this.bootstrap(dshUrl);
    }
    const end = await ended;
    if (signal.aborted) return { why: "stopping" };
    if (end.error !== void 0 || !ready) return { why: startFailure(command, end.error, this.logSince(offset), end.exit, this.logPath, this.options.port), exitCode: end.code };
    return { why: `dshloop: this profile's dshloop (pid ${String(child.pid)}) exited unexpectedly with ${end.exit}.`, exitCode: end.code };
  }
  async waitForHealth(url, signal) {
    const deadline = Date.now() + READY_TIMEOUT_MS;
    while (!signal.aborted && Date.now() < deadline) {
      try {
        await fetch(`${url}/api/health`, { signal: AbortSignal.timeout(2e3) });
        return true;
      } catch {
        await sleep(POLL_MS, signal);
      }
    }
    return false;
  }
  /** `self` out of the box: bootstrap makes the global interface session in DSH once DSH answers. */
  async bootstrap(dshUrl) {
    const signal = this.stopping.signal;
    const deadline = Date.now() + READY_TIMEOUT_MS;
    while (!signal.aborted && Date.now() < deadline) {
      try {
        const answer = await fetch(`${dshUrl}/api/host.describe`, {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ type: "client-request", rpcId: "dshloop-ready", method: "host.describe", payload: {} }),
          signal: AbortSignal.timeout(2e3)
        });
        if (answer.ok) break;
      } catch {
      }
      await sleep(POLL_MS, signal);
    }
    if (signal.aborted) return;
    const log = openSync(this.logPath, "a", 384);
    try {
      const child = spawn(this.options.command, ["bootstrap"], { stdio: ["ignore", "ignore", log], env: { ...this.env(), DSHLOOP_DSH_URL: dshUrl } });
      child.on("error", () => {
      });
      this.bootstrapping = child;
    } finally {
      closeSync(log);
    }
  }
};

// src/token.ts
import { closeSync as closeSync2, readFileSync } from "node:fs";
var TOKEN_FD_VARIABLE = "DSHLOOP_TOKEN_FD";
var NODE_DESCRIPTORS = {
  read: (fd) => readFileSync(fd, "utf8"),
  close: (fd) => closeSync2(fd)
};
function takeToken(env = process.env, descriptors = NODE_DESCRIPTORS) {
  const fromDescriptor = takeFromDescriptor(env, descriptors);
  const inEnvironment = env.DSHLOOP_TOKEN?.trim() ?? "";
  if (inEnvironment === "") return fromDescriptor;
  if (fromDescriptor.token !== "") {
    return {
      token: fromDescriptor.token,
      warnings: [...fromDescriptor.warnings, `dshloop: DSHLOOP_TOKEN in the DSH process environment is ignored (${TOKEN_FD_VARIABLE} gave one) ${EXPOSED}`]
    };
  }
  return { token: inEnvironment, warnings: [`dshloop: the token comes from DSHLOOP_TOKEN in the DSH process environment ${EXPOSED}`] };
}
var EXPOSED = `\u2014 an agent's bash can read that environment, so the token there is exposed: hand it over on a file descriptor (${TOKEN_FD_VARIABLE}, docs/dsh.md "The plugin's token") and revoke the one in the environment.`;
function takeFromDescriptor(env, descriptors) {
  const warnings = [];
  const named = env[TOKEN_FD_VARIABLE];
  if (named === void 0 || named === "") {
    warnings.push(`dshloop: ${TOKEN_FD_VARIABLE} is not set; every loop tool call will answer unauthorized`);
    return { token: "", warnings };
  }
  const fd = /^[0-9]+$/.test(named) ? Number(named) : Number.NaN;
  if (!Number.isSafeInteger(fd) || fd < 3) {
    warnings.push(`dshloop: ${TOKEN_FD_VARIABLE}=${JSON.stringify(named)} is not a file descriptor number of 3 or more; no token`);
    return { token: "", warnings };
  }
  let text2;
  try {
    text2 = descriptors.read(fd);
  } catch (error) {
    warnings.push(`dshloop: could not read the token from descriptor ${fd} (${errorCode(error)}); no token`);
    return { token: "", warnings };
  } finally {
    try {
      descriptors.close(fd);
    } catch {
    }
  }
  const token = text2.trim();
  if (token === "") warnings.push(`dshloop: descriptor ${fd} held no token; every loop tool call will answer unauthorized`);
  return { token, warnings };
}
function errorCode(error) {
  const code = error?.code;
  return typeof code === "string" ? code : String(error);
}

// src/index.ts
var name = "dshloop";
var inject = ["agents", "tools", "connection", "webServer"];
var RPC_CHANNEL = "/dshloop";
var DEFAULT_URL = "http://127.0.0.1:8000";
var DEFAULT_TIMEOUT_SECONDS = 10;
var SUBAGENT_REFUSAL = "The loop tools belong to the conversation's main agent, not to a subagent: a subagent's session ends with its task, so a loop could neither target it nor be owned by it. Report back and let the main agent create, list or delete loops.";
var taken;
var made;
function externalUrl(config, env = process.env) {
  const named = config.url || env.DSHLOOP_URL;
  if (named) return named;
  return env[TOKEN_FD_VARIABLE] || env.DSHLOOP_TOKEN ? DEFAULT_URL : void 0;
}
function profileDataDir(ctx, env = process.env) {
  if (ctx.baseUrl?.startsWith("file:")) return join2(fileURLToPath(ctx.baseUrl), "dshloop");
  return join2(env.DSH_HOME || join2(homedir(), ".dsh"), "profiles", "web", "dshloop");
}
function ownPort(port) {
  return typeof port === "number" && Number.isInteger(port) && port > 0 && port < 65536 ? port : 0;
}
function apply(ctx, config = {}) {
  const external = externalUrl(config);
  const endpoint = {
    url: baseUrl(external ?? DEFAULT_URL),
    // the profile's own dshloop: replaced by its port once it serves
    token: "",
    timeoutMs: Math.max(1, config.timeoutSeconds ?? DEFAULT_TIMEOUT_SECONDS) * 1e3
  };
  if (external !== void 0) {
    if (taken === void 0) {
      taken = takeToken();
      for (const warning of taken.warnings) ctx.logger.warn(warning);
    }
    endpoint.token = taken.token;
  } else {
    made ??= makeToken();
    endpoint.token = made;
    const own = new OwnDshloop({
      command: config.command || process.env.DSHLOOP_COMMAND || "dshloop",
      dataDir: profileDataDir(ctx),
      dshUrl: () => ctx.webServer?.port ? `http://127.0.0.1:${ctx.webServer.port}` : void 0,
      token: made,
      port: ownPort(config.port),
      // Also on DSH's own output: its terminal (or the launcher's log) is where a person looks
      // when the loops do not come, and DSH rc.8 does not print a plugin's logger there.
      logger: {
        info: (message) => {
          ctx.logger.info(message);
          console.log(message);
        },
        warn: (message) => {
          ctx.logger.warn(message);
          console.error(message);
        }
      },
      onUrl: (url) => {
        endpoint.url = url;
      }
    });
    ctx.effect(() => {
      own.start();
      return () => own.stop();
    }, "dshloop: the profile's dshloop");
  }
  ctx.effect(() => {
    let catalogue = parseCatalogue(catalogue_default) ?? [];
    let confirmed = false;
    let refreshing;
    const mounted = /* @__PURE__ */ new Map();
    let alive = true;
    const unattended = /* @__PURE__ */ new Map();
    const guarded = /* @__PURE__ */ new Map();
    const mount = (agent) => {
      if (!alive || mounted.has(agent) || !ctx.agents.roots().includes(agent)) return;
      const allowed = unattended.get(agent.id);
      const tools = allowed === void 0 ? catalogue : catalogue.filter((tool) => allowed.has(tool.name));
      mounted.set(agent, agent.ctx.effect(() => registerTools(agent, tools), "dshloop: loop tools"));
    };
    const remount = async (agent) => {
      const dispose = mounted.get(agent);
      mounted.delete(agent);
      if (dispose !== void 0) await dispose();
      mount(agent);
    };
    const remountAll = async () => {
      for (const agent of [...mounted.keys()]) {
        try {
          await remount(agent);
        } catch (error) {
          ctx.logger.warn(`dshloop: could not renew the loop tools of ${agent.id}: ${String(error)}`);
        }
      }
    };
    const refresh = () => {
      refreshing ??= fetchCatalogue(endpoint).then(async (served) => {
        confirmed = true;
        if (alive && JSON.stringify(served) !== JSON.stringify(catalogue)) {
          catalogue = served;
          await remountAll();
        }
      }).catch((error) => {
        ctx.logger.info(`dshloop: the built-in tool catalogue stays in use: ${String(error)}`);
      }).finally(() => {
        refreshing = void 0;
      });
      return refreshing;
    };
    const registerTools = (agent, tools) => {
      const disposers = tools.map((tool) => agent.ctx.tools.register({
        name: tool.name,
        description: tool.description,
        parameters: tool.input_schema,
        // raw JSON Schema: DSH passes it to the model unchanged
        output: { schema: {}, render: (_args, value) => [{ type: "text", text: JSON.stringify(value) }] },
        // DSH's own bound on the call, a backstop behind the fetch timeout.
        timeoutMs: endpoint.timeoutMs + 5e3,
        async execute(args, exec) {
          if (exec.agent !== agent) throw new DshloopError("subagent", SUBAGENT_REFUSAL);
          const key = tool.name === "loop_create" ? exec.callId : void 0;
          const value = await cappedCall(tool.name, args, (input) => callTool(endpoint, tool.name, input, agent.id, exec.signal, key));
          if (!confirmed) void refresh();
          return value;
        }
      }));
      return async () => {
        for (const dispose of disposers.reverse()) await dispose();
      };
    };
    for (const agent of ctx.agents.roots()) mount(agent);
    const stopCreated = ctx.on("agent/created", ({ agent }) => mount(agent));
    const stopDisposed = ctx.on("agent/disposed", ({ agent }) => {
      mounted.delete(agent);
      guarded.delete(agent);
    });
    const stopAsk = config.askBeforeNewSessionLoops ? ctx.on("tools/pre-execute", async (exec, next) => {
      const downstream = await next();
      if (downstream.kind !== "allow" || exec.name !== "loop_create" || !mounted.has(exec.agent)) return downstream;
      const args = exec.arguments;
      if (args?.session_id !== "new") return downstream;
      return {
        kind: "ask",
        reason: "This loop starts a fresh, unattended agent session on every run. Review its prompt and schedule."
      };
    }) : () => {
    };
    const restrict = async (agent, extra) => {
      const allowed = allowedTools(extra);
      const before = unattended.get(agent.id);
      if (before !== void 0 && before.size === allowed.size && [...allowed].every((name2) => before.has(name2))) return;
      unattended.set(agent.id, allowed);
      if (!guarded.has(agent)) {
        const check = (exec) => {
          const current = unattended.get(agent.id);
          return current === void 0 ? void 0 : refusal(exec.name, exec.arguments, current);
        };
        guarded.set(agent, agent.ctx.effect(() => agent.ctx.tools.guard(check), "dshloop: fresh-run tool boundary"));
      }
      await remount(agent);
    };
    const freshRunAt = () => [...unattended].find(([id, allowed]) => !allowed.has("loop_create") && ctx.agents.get(id)?.status === "running")?.[0];
    const confirmations = new Confirmations();
    const stopLogged = ctx.on("session/event", (session, event) => confirmations.observe(session.id, event));
    const stores = () => ({
      projections: ctx.get?.("sessionProjections"),
      persistence: ctx.get?.("sessionPersistence"),
      projectionCache: ctx.get?.("sessionProjectionCache")
    });
    const deliveries = { agents: ctx.agents, restrict, freshRunAt, confirmations, stores };
    const stopRpc = ctx.connection.rpc.handle(RPC_CHANNEL, (rpcEndpoint, payload, signal) => handleRpc(endpoint, rpcEndpoint, payload, signal, deliveries), { authority: "loopback" });
    void refresh();
    return async () => {
      alive = false;
      stopCreated();
      stopDisposed();
      stopAsk();
      stopLogged();
      for (const dispose of mounted.values()) await dispose();
      mounted.clear();
      for (const dispose of guarded.values()) await dispose();
      guarded.clear();
      await stopRpc();
    };
  }, "dshloop: host");
}
export {
  RPC_CHANNEL,
  SUBAGENT_REFUSAL,
  apply,
  externalUrl,
  handleRpc,
  inject,
  name,
  ownPort,
  profileDataDir
};
