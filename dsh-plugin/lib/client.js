window.__ModuleLoader__.load({ id: "@dshloop/dsh-plugin", factory: (require) => {
var module = { exports: {} }; var exports = module.exports;
"use strict";
var __defProp = Object.defineProperty;
var __getOwnPropDesc = Object.getOwnPropertyDescriptor;
var __getOwnPropNames = Object.getOwnPropertyNames;
var __hasOwnProp = Object.prototype.hasOwnProperty;
var __export = (target, all) => {
  for (var name2 in all)
    __defProp(target, name2, { get: all[name2], enumerable: true });
};
var __copyProps = (to, from, except, desc) => {
  if (from && typeof from === "object" || typeof from === "function") {
    for (let key of __getOwnPropNames(from))
      if (!__hasOwnProp.call(to, key) && key !== except)
        __defProp(to, key, { get: () => from[key], enumerable: !(desc = __getOwnPropDesc(from, key)) || desc.enumerable });
  }
  return to;
};
var __toCommonJS = (mod) => __copyProps(__defProp({}, "__esModule", { value: true }), mod);

// src/client/index.ts
var index_exports = {};
__export(index_exports, {
  LoopStatus: () => LoopStatus,
  REFRESH_MS: () => REFRESH_MS,
  apply: () => apply,
  inject: () => inject,
  name: () => name,
  openLoopsTab: () => openLoopsTab
});
module.exports = __toCommonJS(index_exports);
var import_react3 = require("react");

// src/status.ts
function summarize(loops) {
  let nextAt;
  let overdue = 0;
  let failed = 0;
  let paused = 0;
  for (const loop of loops) {
    if (typeof loop.next_at === "number" && (nextAt === void 0 || loop.next_at < nextAt)) nextAt = loop.next_at;
    if (loop.state === "overdue") overdue += 1;
    if (loop.state === "failed" || loop.last_result === "failed") failed += 1;
    if (loop.state === "paused") paused += 1;
  }
  return { count: loops.length, ...nextAt === void 0 ? {} : { nextAt }, overdue, failed, paused };
}
function countText(count) {
  if (count === 0) return "no loops";
  return count === 1 ? "1 loop" : `${count} loops`;
}
function countdown(at, now) {
  const seconds = Math.round((at - now) / 1e3);
  if (seconds === 0) return "due now";
  const text = duration(Math.abs(seconds));
  return seconds > 0 ? `in ${text}` : `late ${text}`;
}
function duration(seconds) {
  const days = Math.floor(seconds / 86400);
  const hours = Math.floor(seconds % 86400 / 3600);
  const minutes = Math.floor(seconds % 3600 / 60);
  const secs = seconds % 60;
  if (days > 0) return `${days}d ${hours}h`;
  if (hours > 0) return `${hours}h ${pad(minutes)}m`;
  if (minutes > 0) return `${minutes}m ${pad(secs)}s`;
  return `${secs}s`;
}
function statusText(summary, now) {
  const parts = [countText(summary.count)];
  if (summary.nextAt !== void 0) parts.push(`next ${countdown(summary.nextAt, now)}`);
  if (summary.overdue > 0) parts.push(`${summary.overdue} overdue`);
  if (summary.failed > 0) parts.push(`${summary.failed} failed`);
  if (summary.paused > 0) parts.push(`${summary.paused} paused`);
  return parts.join(" \xB7 ");
}
function pad(value) {
  return String(value).padStart(2, "0");
}

// src/client/card.ts
var import_react = require("react");
function cardSource(props) {
  const data = props?.node?.data;
  const source = data?.source;
  if (source?.kind !== "plugin" || source.plugin !== "dshloop") return void 0;
  const loop = source.loop;
  if (typeof loop?.loop_id !== "string" || typeof loop.run_id !== "string") return void 0;
  return {
    summary: typeof source.summary === "string" ? source.summary : "",
    loopId: loop.loop_id,
    runId: loop.run_id,
    notice: source.notice === true
  };
}
function messageText(props) {
  const content = props?.node?.data?.content;
  if (!Array.isArray(content)) return "";
  return content.map((part) => typeof part?.text === "string" ? part.text : "").join("");
}
function runWords(run) {
  if (run === void 0) return void 0;
  if (run.status === "failed") return { text: `delivery failed${run.error ? `: ${run.error}` : ""}`, failed: true };
  if (run.status === "skipped") return { text: "skipped", failed: false };
  if (run.outcome === "succeeded") return { text: "succeeded", failed: false };
  if (run.outcome === "failed" || run.outcome === "cancelled") {
    return { text: `${run.outcome}${run.error ? `: ${run.error}` : ""}`, failed: true };
  }
  if (run.status === "delivered") return { text: "delivered, turn running", failed: false };
  return { text: "delivering", failed: false };
}
function loopMark(loop) {
  if (loop === void 0) return void 0;
  if (loop.deleted) return "loop deleted";
  if (loop.state === "paused") return loop.pause_reason ? `paused: ${loop.pause_reason}` : "paused";
  return void 0;
}
var CARD_REFRESH_MS = 5e3;
var CardStore = class {
  loops = /* @__PURE__ */ new Map();
  wanted = /* @__PURE__ */ new Map();
  // loop ID -> mounted cards
  listeners = /* @__PURE__ */ new Set();
  timer;
  load;
  constructor(load) {
    this.load = load;
  }
  get(loopId) {
    return this.loops.get(loopId);
  }
  /** A card of `loopId` is on screen until the returned function is called. */
  watch(loopId, listener) {
    this.wanted.set(loopId, (this.wanted.get(loopId) ?? 0) + 1);
    this.listeners.add(listener);
    if (!this.loops.has(loopId)) this.schedule(0);
    else this.schedule(CARD_REFRESH_MS);
    return () => {
      const count = (this.wanted.get(loopId) ?? 1) - 1;
      if (count > 0) this.wanted.set(loopId, count);
      else this.wanted.delete(loopId);
      this.listeners.delete(listener);
    };
  }
  schedule(delay) {
    if (this.timer !== void 0 && delay > 0) return;
    if (this.timer !== void 0) clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.refresh(), delay);
  }
  async refresh() {
    this.timer = void 0;
    const ids = [...this.wanted.keys()];
    if (ids.length === 0) return;
    if (typeof document === "undefined" || !document.hidden) {
      for (let start = 0; start < ids.length; start += 20) {
        try {
          for (const [id, loop] of Object.entries(await this.load(ids.slice(start, start + 20)))) this.loops.set(id, loop);
        } catch {
        }
      }
      for (const listener of [...this.listeners]) listener();
    }
    this.schedule(CARD_REFRESH_MS);
  }
};
function LoopCard({ source, text, store, fault: fault3, openLoop }) {
  if (fault3) throw new Error("dshloop: a fault forced into the loop card (DSHLOOP_FAULT)");
  const [, setVersion] = (0, import_react.useState)(0);
  const [open, setOpen] = (0, import_react.useState)(false);
  (0, import_react.useEffect)(() => store.watch(source.loopId, () => setVersion((version) => version + 1)), [store, source.loopId]);
  const loop = store.get(source.loopId);
  const run = runWords(loop?.runs[source.runId]);
  const mark = loopMark(loop);
  const title = loop?.name ?? source.summary ?? "Loop";
  const failed = run?.failed === true || loop?.last_result === "failed";
  return (0, import_react.createElement)(
    "div",
    {
      "data-dshloop-card": source.runId,
      // A failure notice (contract §16) about the loop, not one of its occurrences.
      ...source.notice ? { "data-dshloop-notice": source.loopId } : {},
      ...failed ? { "data-dshloop-mark": "failed" } : {},
      ...mark !== void 0 ? { "data-dshloop-loop-mark": mark } : {},
      style: { ...CARD, ...failed ? { borderColor: "#d92d20" } : {} }
    },
    (0, import_react.createElement)(
      "div",
      { style: ROW },
      (0, import_react.createElement)("span", { "aria-hidden": "true", style: ICON }, source.notice ? "\u26A0" : "\u27F3"),
      (0, import_react.createElement)("strong", { style: TITLE, title }, source.notice ? `Notice: ${title}` : title),
      loop?.schedule_text ? (0, import_react.createElement)("span", { style: MUTED }, loop.schedule_text) : null
    ),
    (0, import_react.createElement)(
      "div",
      { style: { ...MUTED, ...ROW } },
      (0, import_react.createElement)("span", null, source.notice ? "failure notice from dshloop" : "delivered by dshloop"),
      run ? (0, import_react.createElement)("span", { style: run.failed ? FAILED : void 0 }, `\xB7 ${run.text}`) : null,
      mark ? (0, import_react.createElement)("span", { style: FAILED }, `\xB7 ${mark}`) : null
    ),
    (0, import_react.createElement)(
      "div",
      { style: { ...ROW, marginTop: "2px" } },
      (0, import_react.createElement)("a", {
        href: loop?.panelUrl,
        target: "_blank",
        rel: "noopener",
        "data-dshloop-action": "open-loop",
        title: "This loop in the Loops panel (Ctrl-click: dshloop's own panel)",
        // The Loops panel in place; dshloop's own panel page with a modifier, or where there is none.
        onClick: (event) => {
          if (event.ctrlKey || event.metaKey) return;
          if (openLoop?.(source.loopId) === true) event.preventDefault();
        },
        style: LINK
      }, "Open loop"),
      (0, import_react.createElement)(
        "button",
        { type: "button", onClick: () => setOpen(!open), style: BUTTON, "aria-expanded": open },
        open ? "Hide message" : "Show message"
      )
    ),
    open ? (0, import_react.createElement)("pre", { style: PRE }, text) : null
  );
}
var CardBoundary = class extends import_react.Component {
  constructor(props) {
    super(props);
    this.state = { failed: false };
  }
  static getDerivedStateFromError() {
    return { failed: true };
  }
  componentDidCatch(error) {
    console.error("dshloop: a loop card failed; DSH draws its own row instead", error);
  }
  render() {
    return this.state.failed ? this.props.fallback() : this.props.children;
  }
};
var CARD = {
  border: "1px solid rgba(127, 127, 127, 0.35)",
  borderRadius: "8px",
  padding: "8px 10px",
  margin: "4px 0",
  fontSize: "13px",
  lineHeight: "18px",
  maxWidth: "100%",
  boxSizing: "border-box",
  overflowWrap: "anywhere"
};
var ROW = { display: "flex", flexWrap: "wrap", gap: "6px", alignItems: "baseline" };
var ICON = { opacity: 0.7 };
var TITLE = { fontWeight: 600 };
var MUTED = { opacity: 0.75, fontSize: "12px" };
var FAILED = { color: "#d92d20", fontWeight: 600 };
var LINK = { color: "inherit", fontSize: "12px" };
var BUTTON = { font: "inherit", fontSize: "12px", background: "none", border: "none", padding: 0, cursor: "pointer", textDecoration: "underline", color: "inherit" };
var PRE = { whiteSpace: "pre-wrap", fontSize: "12px", margin: "6px 0 0", opacity: 0.85 };

// src/client/panel.ts
var import_react2 = require("react");

// src/loops-view.ts
var AWAITING_APPROVAL = "awaiting approval";
function stateWords(loop) {
  if (loop.state === "paused") return loop.pause_reason === AWAITING_APPROVAL ? AWAITING_APPROVAL : "paused";
  return loop.state;
}
function isFailing(loop) {
  return loop.state === "failed" || loop.last_result === "failed";
}
function targetWords(sessionId, titles) {
  if (sessionId === "self" || sessionId === "new") return sessionId;
  const title = titles[sessionId];
  return title ? `${title} (${sessionId})` : sessionId;
}
function preview(prompt, limit = 120) {
  const line = prompt.replace(/\s+/g, " ").trim();
  return line.length <= limit ? line : `${line.slice(0, limit - 1)}\u2026`;
}
function ago(at, now) {
  const seconds = Math.round((now - at) / 1e3);
  return seconds < 2 ? "just now" : `${duration(seconds)} ago`;
}
function actionsOf(loop) {
  const actions = [];
  if (loop.state === "completed") return ["delete"];
  if (loop.state === "paused") actions.push(loop.pause_reason === AWAITING_APPROVAL ? "approve" : "resume");
  else if (loop.state !== "failed") actions.push("pause");
  actions.push(isFailing(loop) ? "retry" : "run");
  actions.push("edit", "delete");
  return actions;
}
function opOf(loop, action) {
  return action === "retry" && loop.state !== "failed" ? "run" : action;
}
var ACTION_LABELS = {
  pause: "Pause",
  resume: "Resume",
  approve: "Approve",
  run: "Run now",
  retry: "Retry",
  edit: "Edit",
  delete: "Delete"
};
var always = () => true;
var whenNew = (form) => form.target === "new";
var FORM_FIELDS = [
  { key: "name", label: "Name", control: "text", show: (_form, mode) => mode === "edit", hint: "For people; empty removes it." },
  { key: "prompt", label: "Prompt", control: "textarea", show: always },
  {
    key: "kind",
    label: "Schedule",
    control: "select",
    options: [["every", "every \u2026 seconds"], ["after", "once, after \u2026 seconds"], ["cron", "cron (wall clock)"]],
    show: always
  },
  { key: "seconds", label: "Seconds", control: "number", show: (form) => form.kind !== "cron" },
  { key: "expr", label: "Cron expression", control: "text", show: (form) => form.kind === "cron", hint: "e.g. 30 9 * * 1-5" },
  { key: "tz", label: "Time zone", control: "text", show: (form) => form.kind === "cron", hint: "IANA name; empty: the host's" },
  { key: "target", label: "Target", control: "select", show: always },
  { key: "session", label: "Session", control: "select", show: (form) => form.target === "session" },
  { key: "preset", label: "Preset", control: "text", show: whenNew, hint: "Optional: a DSH preset for the fresh sessions" },
  { key: "workspace", label: "Workspace", control: "text", show: (form, mode, unattended) => mode === "edit" && unattended && whenNew(form) },
  { key: "permission_preset", label: "Permission preset", control: "text", show: (form, mode, unattended) => mode === "edit" && unattended && whenNew(form) },
  {
    key: "overlap",
    label: "Overlap",
    control: "select",
    options: [["allow", "allow: every run starts a fresh session"], ["skip", "skip a run while the previous one runs"]],
    show: (form, mode, unattended) => mode === "edit" && unattended && whenNew(form)
  },
  { key: "ends_at", label: "Ends at", control: "datetime", show: (_form, mode) => mode === "edit", hint: "The last run is the last occurrence at or before it; empty: never" },
  { key: "max_runs", label: "Ends after", control: "number", show: (_form, mode) => mode === "edit", hint: "delivered runs; empty: no limit" }
];
function emptyForm(currentSession) {
  return {
    name: "",
    prompt: "",
    kind: "every",
    seconds: "600",
    expr: "",
    tz: "",
    target: currentSession === void 0 ? "session" : "current",
    session: "",
    preset: "",
    workspace: "",
    permission_preset: "",
    overlap: "allow",
    ends_at: "",
    max_runs: ""
  };
}
function formOf(loop, currentSession) {
  const schedule = loop.schedule;
  const reserved = loop.session_id === "self" || loop.session_id === "new";
  return {
    ...emptyForm(currentSession),
    name: loop.name ?? "",
    prompt: loop.prompt,
    kind: schedule.kind === "cron" ? "cron" : schedule.kind === "after" ? "after" : "every",
    seconds: String(schedule.every_seconds ?? schedule.after_seconds ?? ""),
    expr: schedule.expr ?? "",
    tz: schedule.tz ?? "",
    target: reserved ? loop.session_id : loop.session_id === currentSession ? "current" : "session",
    session: reserved ? "" : loop.session_id,
    preset: loop.preset ?? "",
    workspace: loop.workspace ?? "",
    permission_preset: loop.permission_preset ?? "",
    overlap: loop.overlap ?? "allow",
    ends_at: loop.ends_at == null ? "" : localInput(loop.ends_at),
    max_runs: loop.max_runs == null ? "" : String(loop.max_runs)
  };
}
function localInput(ms) {
  const at = new Date(ms);
  const two = (n) => String(n).padStart(2, "0");
  return `${at.getFullYear()}-${two(at.getMonth() + 1)}-${two(at.getDate())}T${two(at.getHours())}:${two(at.getMinutes())}`;
}
function endsOf(form) {
  const when = form.ends_at.trim();
  let endsAt = null;
  if (when !== "") {
    endsAt = new Date(when).getTime();
    if (Number.isNaN(endsAt)) throw new FormError("ends_at", "Give a date and time, or leave it empty for no end.");
  }
  const count = form.max_runs.trim();
  const maxRuns = count === "" ? null : /^\d{1,10}$/.test(count) ? Number(count) : count;
  return { ends_at: endsAt, max_runs: maxRuns };
}
function endsWords(loop, now) {
  const parts = [];
  if (loop.max_runs != null) parts.push(`after ${loop.max_runs} runs (${loop.runs_delivered ?? 0} so far)`);
  if (loop.ends_at != null) parts.push(loop.ends_at > now ? `in ${duration(Math.round((loop.ends_at - now) / 1e3))}` : "now");
  return parts.length === 0 ? void 0 : `ends ${parts.join(" or ")}`;
}
var FormError = class extends Error {
  field;
  constructor(field, message) {
    super(message);
    this.field = field;
  }
};
function scheduleOf(form) {
  if (form.kind === "cron") return { kind: "cron", expr: form.expr.trim(), ...form.tz.trim() ? { tz: form.tz.trim() } : {} };
  const text = form.seconds.trim();
  const seconds = /^\d{1,16}$/.test(text) ? Number(text) : text;
  return form.kind === "after" ? { kind: "after", after_seconds: seconds } : { kind: "every", every_seconds: seconds };
}
function targetOf(form, currentSession) {
  if (form.target === "current") {
    if (currentSession === void 0) throw new FormError("target", "There is no current session here: pick one.");
    return currentSession;
  }
  if (form.target === "session") {
    if (form.session === "") throw new FormError("session", "Pick the session the loop delivers to.");
    return form.session;
  }
  return form.target;
}
function toInput(form, currentSession) {
  const target = targetOf(form, currentSession);
  return {
    prompt: form.prompt,
    schedule: scheduleOf(form),
    session_id: target,
    ...target === "new" && form.preset.trim() ? { preset: form.preset.trim() } : {}
  };
}
function toChanges(form, loop, currentSession) {
  const changes = {};
  const name2 = form.name.trim();
  if (name2 !== (loop.name ?? "")) changes.name = name2 === "" ? null : name2;
  if (form.prompt !== loop.prompt) changes.prompt = form.prompt;
  const schedule = scheduleOf(form);
  if (JSON.stringify(schedule) !== JSON.stringify(loop.schedule)) changes.schedule = schedule;
  const target = targetOf(form, currentSession);
  if (target !== loop.session_id) changes.session_id = target;
  if (target === "new") {
    const preset = form.preset.trim();
    if (preset !== (loop.preset ?? "") && preset !== "") changes.preset = preset;
    if (loop.session_id === "new") {
      if (form.workspace !== (loop.workspace ?? "")) changes.workspace = form.workspace.trim() === "" ? null : form.workspace.trim();
      if (form.permission_preset !== (loop.permission_preset ?? "")) {
        changes.permission_preset = form.permission_preset.trim() === "" ? null : form.permission_preset.trim();
      }
      if (form.overlap !== (loop.overlap ?? "allow")) changes.overlap = form.overlap;
    }
  }
  const ends = endsOf(form);
  if (form.ends_at !== (loop.ends_at == null ? "" : localInput(loop.ends_at))) changes.ends_at = ends.ends_at;
  if (ends.max_runs !== (loop.max_runs ?? null)) changes.max_runs = ends.max_runs;
  return changes;
}
function formFieldOf(field, form) {
  if (field === void 0 || field === "") return void 0;
  const head = field.split(".")[0] ?? "";
  if (head === "schedule" || head === "every_seconds" || head === "after_seconds") {
    if (field.endsWith("expr")) return "expr";
    if (field.endsWith("tz")) return "tz";
    if (field.endsWith("kind")) return "kind";
    return form.kind === "cron" ? "expr" : "seconds";
  }
  if (head === "session_id") return form.target === "session" ? "session" : "target";
  const known = FORM_FIELDS.map((spec) => spec.key);
  return known.includes(head) ? head : void 0;
}

// src/client/panel.ts
var PANEL_REFRESH_MS = 3e3;
var TICK_MS = 1e3;
var TYPING_MS = 300;
var PanelError = class extends Error {
  code;
  field;
  constructor(code, message, field) {
    super(message);
    this.code = code;
    this.field = field;
  }
};
var NO_FILTERS = { state: "", target: "", session: "", q: "" };
function focusFilters(focus) {
  return { ...NO_FILTERS, q: focus.loopId, ...focus.state === "completed" ? { state: "completed" } : {} };
}
var STATE_OPTIONS = [
  ["", "Any state"],
  ["scheduled", "Scheduled"],
  ["running", "Running"],
  ["overdue", "Overdue"],
  ["paused", "Paused"],
  ["failed", "Failed"],
  ["last_failed", "Last run failed"],
  ["completed", "Completed (history)"]
];
var TARGET_OPTIONS = [
  ["", "Any target"],
  ["self", "self (global interface)"],
  ["new", "new (fresh session)"],
  ["session", "An existing session"]
];
function LoopsPanel(props) {
  return (0, import_react2.createElement)(PanelBoundary, { scope: props.scope }, (0, import_react2.createElement)(PanelBody, props));
}
function fault() {
  return globalThis.DSHLOOP_FAULT === "panel";
}
function PanelBody({ scope, deps, onClose, focus }) {
  if (fault()) throw new Error("dshloop: a fault forced into the Loops panel (DSHLOOP_FAULT)");
  const current = scope === "global" ? void 0 : scope;
  const [filters, setFilters] = (0, import_react2.useState)(focus === void 0 ? NO_FILTERS : focusFilters(focus));
  const [list, setList] = (0, import_react2.useState)(void 0);
  const [listError, setListError] = (0, import_react2.useState)(void 0);
  const [version, setVersion] = (0, import_react2.useState)(0);
  const [now, setNow] = (0, import_react2.useState)(() => Date.now());
  const [openId, setOpenId] = (0, import_react2.useState)(focus?.loopId);
  const [history, setHistory] = (0, import_react2.useState)(void 0);
  const [form, setForm] = (0, import_react2.useState)(void 0);
  const [delivered, setDelivered] = (0, import_react2.useState)(void 0);
  const [sessions, setSessions] = (0, import_react2.useState)(void 0);
  const [notices, setNotices] = (0, import_react2.useState)({});
  const [confirming, setConfirming] = (0, import_react2.useState)(void 0);
  const refresh = () => setVersion((value) => value + 1);
  const [q, setQ] = (0, import_react2.useState)(focus?.loopId ?? "");
  (0, import_react2.useEffect)(() => {
    const timer = setTimeout(() => setQ(filters.q.trim()), TYPING_MS);
    return () => clearTimeout(timer);
  }, [filters.q]);
  (0, import_react2.useEffect)(() => {
    let stopped = false;
    let timer;
    const poll = async () => {
      if (typeof document === "undefined" || !document.hidden) {
        try {
          const asked = { ...filters, q, ...current === void 0 ? {} : { session: current } };
          const answer = await deps.rpc({ op: "list", ...asked });
          if (!stopped) {
            setList(answer);
            setListError(void 0);
          }
          if (current !== void 0) {
            const delivered2 = await deps.rpc({ op: "delivered", sessionId: current });
            if (!stopped) setDelivered(delivered2.runs);
          }
          if (openId !== void 0) {
            const more = await deps.rpc({ op: "loop", loopId: openId });
            if (!stopped) setHistory({ loopId: openId, runs: more.runs, events: more.events });
          }
        } catch (error) {
          if (!stopped) setListError(error instanceof Error ? error.message : String(error));
        }
      }
      if (!stopped) timer = setTimeout(() => void poll(), PANEL_REFRESH_MS);
    };
    void poll();
    return () => {
      stopped = true;
      if (timer !== void 0) clearTimeout(timer);
    };
  }, [deps, current, filters.state, filters.target, filters.session, q, openId, version]);
  (0, import_react2.useEffect)(() => {
    const ticker = setInterval(() => setNow(Date.now()), TICK_MS);
    return () => clearInterval(ticker);
  }, []);
  const needSessions = form !== void 0 || current === void 0;
  (0, import_react2.useEffect)(() => {
    if (!needSessions || sessions !== void 0) return;
    deps.rpc({ op: "sessions" }).then((answer) => setSessions(answer.sessions ?? [])).catch(() => setSessions([]));
  }, [deps, needSessions, sessions]);
  const act = async (loop, action) => {
    if (action === "edit") {
      setForm({ mode: "edit", loop, values: formOf(loop, current), errors: {}, busy: false });
      return;
    }
    if (action === "delete" && confirming !== loop.loop_id) {
      setConfirming(loop.loop_id);
      return;
    }
    setConfirming(void 0);
    try {
      await deps.rpc({ op: opOf(loop, action), loopId: loop.loop_id });
      setNotices((previous) => ({ ...previous, [loop.loop_id]: "" }));
    } catch (error) {
      setNotices((previous) => ({ ...previous, [loop.loop_id]: error instanceof Error ? error.message : String(error) }));
    }
    refresh();
  };
  const submit = async () => {
    if (form === void 0) return;
    setForm({ ...form, busy: true, errors: {} });
    try {
      if (form.mode === "create") await deps.rpc({ op: "create", input: toInput(form.values, current) });
      else if (form.loop !== void 0) {
        await deps.rpc({ op: "edit", loopId: form.loop.loop_id, changes: toChanges(form.values, form.loop, current) });
      }
      setForm(void 0);
      refresh();
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      const field = error instanceof FormError ? error.field : formFieldOf(error instanceof PanelError ? error.field : void 0, form.values);
      setForm({ ...form, busy: false, errors: field === void 0 ? {} : { [field]: message }, ...field === void 0 ? { general: message } : {} });
    }
  };
  const deletedOpen = openId !== void 0 && history?.loopId === openId && history.events[0]?.kind === "deleted" && list !== void 0 && !list.loops.some((loop) => loop.loop_id === openId);
  const titles = {};
  for (const loop of list?.loops ?? []) {
    const title = list?.titles[loop.session_id] ?? deps.titleOf(loop.session_id);
    if (title) titles[loop.session_id] = title;
  }
  return (0, import_react2.createElement)(
    "div",
    { "data-dshloop-panel": scope, style: PANEL },
    (0, import_react2.createElement)(
      "div",
      { style: HEADER },
      (0, import_react2.createElement)("strong", { style: { fontSize: "16px" } }, current === void 0 ? "Loops" : "Loops of this conversation"),
      (0, import_react2.createElement)("span", { style: { flex: "1" } }),
      (0, import_react2.createElement)("button", {
        type: "button",
        "data-dshloop-action": "new",
        style: PRIMARY,
        onClick: () => setForm({ mode: "create", values: emptyForm(current), errors: {}, busy: false })
      }, "New loop"),
      onClose ? (0, import_react2.createElement)("button", { type: "button", "aria-label": "Close", "data-dshloop-action": "close", style: BUTTON2, onClick: onClose }, "Close") : null
    ),
    (0, import_react2.createElement)(FilterBar, { filters, setFilters, global: current === void 0, sessions: sessions ?? [] }),
    form ? (0, import_react2.createElement)(LoopFormView, {
      form,
      sessions: sessions ?? [],
      current,
      // From the latest state, not this render's: two quick keystrokes must both land.
      onField: (key, value) => setForm((previous) => previous === void 0 ? previous : { ...previous, values: { ...previous.values, [key]: value } }),
      onCancel: () => setForm(void 0),
      onSubmit: () => void submit()
    }) : null,
    listError ? (0, import_react2.createElement)("div", { "data-dshloop-error": "list", style: ERROR }, `Could not refresh: ${listError}`) : null,
    list === void 0 ? (0, import_react2.createElement)("div", { style: MUTED2 }, listError ? "" : "Loading\u2026") : list.loops.length === 0 ? deletedOpen ? null : (0, import_react2.createElement)("div", { "data-dshloop-empty": "true", style: { ...MUTED2, padding: "12px 0" } }, "no loops") : (0, import_react2.createElement)("div", null, ...list.loops.map((loop) => (0, import_react2.createElement)(LoopRow, {
      key: loop.loop_id,
      loop,
      titles,
      now,
      open: openId === loop.loop_id,
      confirming: confirming === loop.loop_id,
      notice: notices[loop.loop_id] ?? "",
      history: history?.loopId === loop.loop_id ? history : void 0,
      openSession: deps.openSession,
      onToggle: () => setOpenId(openId === loop.loop_id ? void 0 : loop.loop_id),
      onAction: (action) => void act(loop, action)
    }))),
    deletedOpen && history !== void 0 ? (0, import_react2.createElement)(DeletedLoop, { history, name: delivered?.find((run) => run.loop_id === history.loopId)?.loop_name, now, openSession: deps.openSession }) : null,
    list?.more ? (0, import_react2.createElement)("div", { style: MUTED2 }, `Showing the first ${list.loops.length}; narrow the filters to see the rest.`) : null,
    current !== void 0 && delivered !== void 0 ? (0, import_react2.createElement)(Delivered, { sessionId: current, runs: delivered, loops: list?.loops ?? [], now }) : null
  );
}
function DeletedLoop({ history, name: name2, now, openSession }) {
  const deleted = history.events[0];
  return (0, import_react2.createElement)(
    "div",
    { "data-dshloop-loop-deleted": history.loopId, style: CARD2 },
    (0, import_react2.createElement)(
      "div",
      { style: ROW2 },
      (0, import_react2.createElement)("strong", null, name2 ?? history.loopId),
      (0, import_react2.createElement)("span", { "data-dshloop-field": "state", style: MARKED }, "deleted")
    ),
    (0, import_react2.createElement)(
      "div",
      { style: { ...SMALL, ...MUTED2 } },
      `Deleted${deleted ? ` ${ago(deleted.at, now)}` : ""}: it no longer runs; its runs and trail stay.`
    ),
    (0, import_react2.createElement)(History, { history, now, openSession })
  );
}
function Delivered({ sessionId, runs, loops, now }) {
  const prompts = new Map(loops.map((loop) => [loop.loop_id, loop.name ?? preview(loop.prompt, 60)]));
  return (0, import_react2.createElement)(
    "div",
    { "data-dshloop-delivered": sessionId, style: { marginTop: "12px" } },
    (0, import_react2.createElement)("strong", { style: SMALL }, "Runs delivered here"),
    runs.length === 0 ? (0, import_react2.createElement)("div", { style: { ...SMALL, ...MUTED2 } }, "none yet") : null,
    ...runs.map((run) => {
      const words = runWords(run);
      return (0, import_react2.createElement)(
        "div",
        { key: run.run_id, "data-dshloop-run": run.run_id, style: { ...ROW2, ...SMALL } },
        (0, import_react2.createElement)("span", null, ago(run.scheduled_at, now)),
        (0, import_react2.createElement)("span", { style: MUTED2 }, prompts.get(run.loop_id) ?? run.loop_name ?? run.loop_id),
        run.loop_deleted ? (0, import_react2.createElement)("span", { "data-dshloop-loop-deleted": run.loop_id, style: MUTED2 }, "loop deleted") : null,
        run.manual ? (0, import_react2.createElement)("span", { style: MUTED2 }, "run now") : null,
        (0, import_react2.createElement)("span", { style: words?.failed ? { color: "#d92d20" } : void 0 }, words?.text ?? run.status)
      );
    })
  );
}
function FilterBar({ filters, setFilters, global, sessions }) {
  const set = (key) => (event) => {
    const value = event.target.value;
    setFilters((previous) => ({ ...previous, [key]: value }));
  };
  return (0, import_react2.createElement)(
    "div",
    { style: ROW2 },
    select("dshloop-filter-state", filters.state, STATE_OPTIONS, set("state")),
    global ? select("dshloop-filter-target", filters.target, TARGET_OPTIONS, set("target")) : null,
    global ? select("dshloop-filter-session", filters.session, [["", "Any session"], ...sessions.map(sessionOption)], set("session")) : null,
    (0, import_react2.createElement)("input", {
      type: "search",
      name: "dshloop-filter-q",
      placeholder: "Prompt text or loop ID",
      value: filters.q,
      onChange: set("q"),
      style: { ...INPUT, flex: "1 1 160px" }
    })
  );
}
function sessionOption(session) {
  return [session.session_id, session.title ? `${session.title} (${session.session_id})` : session.session_id];
}
function select(name2, value, options, onChange) {
  return (0, import_react2.createElement)("select", { name: name2, value, onChange, style: INPUT }, ...options.map(([key, label]) => (0, import_react2.createElement)("option", { key, value: key }, label)));
}
function LoopRow({ loop, titles, now, open, confirming, notice, history, openSession, onToggle, onAction }) {
  const state = stateWords(loop);
  const failing = isFailing(loop);
  return (0, import_react2.createElement)(
    "div",
    {
      "data-dshloop-loop": loop.loop_id,
      "data-dshloop-state": state,
      ...failing ? { "data-dshloop-mark": "failed" } : {},
      style: { ...CARD2, ...failing ? { borderColor: "#d92d20" } : {} }
    },
    (0, import_react2.createElement)(
      "div",
      { style: ROW2 },
      (0, import_react2.createElement)(
        "button",
        { type: "button", onClick: onToggle, style: { ...LINKISH, fontWeight: 600 }, "aria-expanded": open, title: loop.prompt },
        loop.name ? `${loop.name} \u2014 ${preview(loop.prompt, 80)}` : preview(loop.prompt)
      ),
      (0, import_react2.createElement)("span", { "data-dshloop-field": "state", style: state === "failed" || state === "awaiting approval" || state === "paused" ? MARKED : BADGE }, state)
    ),
    (0, import_react2.createElement)(
      "div",
      { style: { ...ROW2, ...SMALL } },
      (0, import_react2.createElement)("span", { "data-dshloop-field": "schedule" }, loop.schedule_text ?? loop.schedule.kind),
      (0, import_react2.createElement)("span", null, "\u2192"),
      (0, import_react2.createElement)("span", { "data-dshloop-field": "target" }, targetWords(loop.session_id, titles)),
      loop.next_at !== void 0 ? (0, import_react2.createElement)("span", { "data-dshloop-field": "next" }, `next ${countdown(loop.next_at, now)}`) : null,
      loop.last_run_at !== void 0 ? (0, import_react2.createElement)("span", { "data-dshloop-field": "last-run" }, `last run ${ago(loop.last_run_at, now)}${loop.last_result ? ` \xB7 ${loop.last_result}` : ""}`) : (0, import_react2.createElement)("span", { style: MUTED2 }, "not run yet"),
      endsWords(loop, now) !== void 0 ? (0, import_react2.createElement)("span", { "data-dshloop-field": "ends" }, endsWords(loop, now)) : null
    ),
    loop.last_error ? (0, import_react2.createElement)("div", { "data-dshloop-field": "last-error", style: { ...SMALL, color: "#d92d20" } }, `last error: ${loop.last_error}`) : null,
    (0, import_react2.createElement)(
      "div",
      { style: { ...ROW2, marginTop: "4px" } },
      ...actionsOf(loop).map((action) => (0, import_react2.createElement)("button", {
        key: action,
        type: "button",
        "data-dshloop-action": action,
        style: action === "delete" && confirming ? DANGER : BUTTON2,
        onClick: () => onAction(action)
      }, action === "delete" && confirming ? "Confirm delete" : ACTION_LABELS[action] ?? action)),
      (0, import_react2.createElement)("button", { type: "button", "data-dshloop-action": "runs", style: BUTTON2, onClick: onToggle }, open ? "Hide runs" : "Runs")
    ),
    notice ? (0, import_react2.createElement)("div", { "data-dshloop-notice": "true", style: ERROR }, notice) : null,
    open ? (0, import_react2.createElement)(History, { history, now, openSession }) : null
  );
}
function History({ history, now, openSession }) {
  if (history === void 0) return (0, import_react2.createElement)("div", { style: MUTED2 }, "Loading runs\u2026");
  return (0, import_react2.createElement)(
    "div",
    { style: { marginTop: "6px" } },
    (0, import_react2.createElement)("div", { style: SMALL }, history.runs.length === 0 ? "No runs yet." : "Runs, newest first"),
    ...history.runs.map((run) => {
      const words = runWords(run);
      return (0, import_react2.createElement)(
        "div",
        { key: run.run_id, "data-dshloop-run": run.run_id, style: { ...ROW2, ...SMALL } },
        (0, import_react2.createElement)("span", null, ago(run.scheduled_at, now)),
        run.manual ? (0, import_react2.createElement)("span", { style: MUTED2 }, "run now") : null,
        (0, import_react2.createElement)("span", { style: words?.failed ? { color: "#d92d20" } : void 0 }, words?.text ?? run.status),
        run.target_session_id && openSession ? (0, import_react2.createElement)("button", { type: "button", "data-dshloop-open-session": run.target_session_id, style: BUTTON2, onClick: () => openSession(run.target_session_id) }, "Open session") : null
      );
    }),
    history.events.length > 0 ? (0, import_react2.createElement)("div", { style: { ...SMALL, marginTop: "6px" } }, "Trail") : null,
    ...history.events.map((event, index) => (0, import_react2.createElement)(
      "div",
      { key: `${event.at}-${index}`, "data-dshloop-event": event.kind, style: { ...SMALL, ...MUTED2 } },
      `${ago(event.at, now)} \xB7 ${event.kind} \xB7 ${event.actor.kind}${event.actor.id ? ` ${event.actor.id}` : ""}`
    ))
  );
}
function LoopFormView({ form, sessions, current, onField, onCancel, onSubmit }) {
  const unattended = form.loop?.session_id === "new";
  const targets = [
    ...current === void 0 ? [] : [["current", "This conversation"]],
    ["session", "A session, by title"],
    ["self", "self (the global interface)"],
    ["new", "new (a fresh session each run)"]
  ];
  const optionsOf = (key) => {
    if (key === "target") return targets;
    if (key === "session") return [["", "Pick a session\u2026"], ...sessions.map(sessionOption)];
    return FORM_FIELDS.find((spec) => spec.key === key)?.options;
  };
  return (0, import_react2.createElement)(
    "form",
    {
      "data-dshloop-form": form.mode,
      style: { ...CARD2, display: "grid", gap: "6px" },
      onSubmit: (event) => {
        event.preventDefault();
        onSubmit();
      }
    },
    (0, import_react2.createElement)("strong", null, form.mode === "create" ? "New loop" : `Edit ${form.loop?.loop_id ?? ""}`),
    ...FORM_FIELDS.filter((spec) => spec.show(form.values, form.mode, unattended)).map((spec) => {
      const value = form.values[spec.key];
      const onInput = (event) => onField(spec.key, event.target.value);
      const error = form.errors[spec.key];
      const options = optionsOf(spec.key);
      const control = spec.control === "textarea" ? (0, import_react2.createElement)("textarea", { name: spec.key, value, onChange: onInput, rows: 3, style: INPUT }) : spec.control === "select" && options !== void 0 ? (0, import_react2.createElement)("select", { name: spec.key, value, onChange: onInput, style: INPUT }, ...options.map(([key, label]) => (0, import_react2.createElement)("option", { key, value: key }, label))) : spec.control === "datetime" ? (0, import_react2.createElement)("input", { name: spec.key, type: "datetime-local", value, onChange: onInput, style: INPUT }) : (0, import_react2.createElement)("input", { name: spec.key, type: "text", inputMode: spec.control === "number" ? "numeric" : void 0, value, onChange: onInput, style: INPUT });
      return (0, import_react2.createElement)(
        "label",
        { key: spec.key, "data-dshloop-input": spec.key, style: { display: "grid", gap: "2px", ...SMALL } },
        (0, import_react2.createElement)("span", null, spec.label, spec.hint ? (0, import_react2.createElement)("span", { style: MUTED2 }, ` \u2014 ${spec.hint}`) : null),
        control,
        error ? (0, import_react2.createElement)("span", { "data-dshloop-field-error": spec.key, role: "alert", style: { color: "#d92d20" } }, error) : null
      );
    }),
    form.general ? (0, import_react2.createElement)("div", { "data-dshloop-field-error": "form", role: "alert", style: ERROR }, form.general) : null,
    (0, import_react2.createElement)(
      "div",
      { style: ROW2 },
      (0, import_react2.createElement)("button", { type: "submit", "data-dshloop-action": "save", disabled: form.busy, style: PRIMARY }, form.mode === "create" ? "Create" : "Save"),
      (0, import_react2.createElement)("button", { type: "button", "data-dshloop-action": "cancel", onClick: onCancel, style: BUTTON2 }, "Cancel")
    )
  );
}
var PanelBoundary = class extends import_react2.Component {
  constructor(props) {
    super(props);
    this.state = { error: void 0 };
  }
  static getDerivedStateFromError(error) {
    return { error: error instanceof Error ? error.message : String(error) };
  }
  componentDidCatch(error) {
    console.error("dshloop: the Loops panel failed", error);
  }
  render() {
    if (this.state.error === void 0) return this.props.children;
    return (0, import_react2.createElement)(
      "div",
      { "data-dshloop-panel": this.props.scope, "data-dshloop-error": "panel", style: { ...PANEL, ...ERROR } },
      `The Loops panel failed: ${this.state.error}. DSH works as before; dshloop's own panel shows the same loops.`
    );
  }
};
var PANEL = { fontSize: "13px", lineHeight: "18px", padding: "12px", boxSizing: "border-box", width: "100%", overflowWrap: "anywhere" };
var HEADER = { display: "flex", gap: "8px", alignItems: "center", marginBottom: "8px" };
var ROW2 = { display: "flex", flexWrap: "wrap", gap: "6px", alignItems: "center" };
var CARD2 = { border: "1px solid rgba(127, 127, 127, 0.35)", borderRadius: "8px", padding: "8px 10px", margin: "6px 0" };
var SMALL = { fontSize: "12px" };
var MUTED2 = { opacity: 0.7 };
var ERROR = { color: "#b42318", fontSize: "12px", margin: "4px 0" };
var BADGE = { fontSize: "11px", border: "1px solid rgba(127, 127, 127, 0.45)", borderRadius: "10px", padding: "0 6px" };
var MARKED = { ...BADGE, color: "#b42318", borderColor: "#d92d20", fontWeight: 600 };
var INPUT = { font: "inherit", fontSize: "13px", padding: "4px 6px", borderRadius: "6px", border: "1px solid rgba(127, 127, 127, 0.5)", background: "transparent", color: "inherit", maxWidth: "100%", boxSizing: "border-box" };
var BUTTON2 = { font: "inherit", fontSize: "12px", whiteSpace: "nowrap", padding: "2px 8px", borderRadius: "6px", border: "1px solid rgba(127, 127, 127, 0.5)", background: "transparent", color: "inherit", cursor: "pointer" };
var PRIMARY = { ...BUTTON2, fontWeight: 600 };
var DANGER = { ...BUTTON2, color: "#b42318", borderColor: "#d92d20", fontWeight: 600 };
var LINKISH = { font: "inherit", background: "none", border: "none", padding: 0, color: "inherit", cursor: "pointer", textAlign: "left" };

// src/client/index.ts
var name = "dshloop-client";
var inject = ["slots", "connection", "sessions"];
var REFRESH_MS = 3e3;
var TICK_MS2 = 1e3;
function apply(ctx) {
  try {
    applyStatus(ctx);
  } catch (error) {
    console.error("dshloop: the composer status could not be installed", error);
  }
  try {
    applyCards(ctx);
  } catch (error) {
    console.error("dshloop: loop cards could not be installed; DSH draws its own rows", error);
  }
  try {
    applyPanel(ctx);
  } catch (error) {
    console.error("dshloop: the Loops panel could not be installed", error);
  }
}
var TAB_ID = "dshloop-loops";
var TAB_LABEL = "Loops";
function applyPanel(ctx) {
  const deps = {
    rpc: async (payload) => {
      const result = await ctx.connection.rpc.call("/dshloop", "panel", payload);
      const refused = result?.ok === true ? result.value?.refused : result?.error;
      if (result?.ok === true && refused === void 0) return result.value;
      const field = refused?.field;
      throw new PanelError(
        refused?.code ?? "internal",
        refused?.message ?? "The dshloop plugin did not answer.",
        typeof field === "string" ? field : void 0
      );
    },
    openSession: ctx.sessions === void 0 ? void 0 : (sessionId) => ctx.sessions?.open(sessionId),
    titleOf: (sessionId) => {
      try {
        return ctx.sessions?.list?.getSnapshot().byId?.[sessionId]?.title;
      } catch {
        return void 0;
      }
    }
  };
  const Action = ({ wide }) => (0, import_react3.createElement)("button", {
    type: "button",
    "data-dshloop-open": "panel",
    title: "Every loop, from dshloop",
    onClick: () => overlay.show(),
    style: { ...ACTION, ...wide === false ? { padding: "6px 0", justifyContent: "center" } : {} }
  }, (0, import_react3.createElement)("span", { "aria-hidden": "true" }, "\u27F3"), wide === false ? null : (0, import_react3.createElement)("span", null, "Loops"));
  const Overlay = () => {
    const [open, setOpen] = (0, import_react3.useState)(overlay.open);
    (0, import_react3.useEffect)(() => overlay.watch(setOpen), []);
    (0, import_react3.useEffect)(() => {
      if (!open) return void 0;
      const close = (event) => {
        if (event.key === "Escape") overlay.set(false);
      };
      document.addEventListener("keydown", close);
      return () => document.removeEventListener("keydown", close);
    }, [open]);
    if (!open) return null;
    return (0, import_react3.createElement)("div", {
      "data-dshloop-overlay": "true",
      style: OVERLAY,
      onClick: (event) => {
        if (event.target === event.currentTarget) overlay.set(false);
      }
    }, (0, import_react3.createElement)(
      "div",
      { role: "dialog", "aria-label": "Loops", style: OVERLAY_BOX },
      // Keyed by the loop it was opened on, so a card's "Open loop" starts it afresh on that loop.
      (0, import_react3.createElement)(LoopsPanel, { key: overlay.focus?.loopId ?? "", scope: "global", deps, focus: overlay.focus, onClose: () => overlay.set(false) })
    ));
  };
  const Tab = ({ dshloopSessionId }) => (0, import_react3.createElement)("div", { style: { height: "100%", overflowY: "auto" } }, (0, import_react3.createElement)(LoopsPanel, { scope: dshloopSessionId, deps }));
  ctx.slots.inject("sidebar.footer.action", () => ctx.slots.register({ name: "sidebar.footer.action", id: "dshloop-loops", order: 20 }, Action));
  ctx.slots.inject("shell.overlay", () => ctx.slots.register({ name: "shell.overlay", id: "dshloop-loops" }, Overlay));
  ctx.slots.inject("conversation.view", () => ctx.slots.register({
    name: "conversation.view",
    id: TAB_ID,
    order: 50,
    label: () => TAB_LABEL,
    inject: (sessionId) => ({ dshloopSessionId: sessionId })
  }, Tab));
  overlay.installed = true;
}
var OverlayState = class {
  open = false;
  /** The loop the panel was opened on (a card's), or undefined for the whole list. */
  focus;
  /** Whether the panel's seats were taken: a card opens dshloop's own panel page otherwise. */
  installed = false;
  listeners = /* @__PURE__ */ new Set();
  /** Opens the panel (on one loop); false when there is no panel in this DSH Web to open. */
  show(focus) {
    if (!this.installed) return false;
    this.focus = focus;
    this.set(true);
    return true;
  }
  set(open) {
    this.open = open;
    for (const listener of [...this.listeners]) listener(open);
  }
  watch(listener) {
    this.listeners.add(listener);
    return () => {
      this.listeners.delete(listener);
    };
  }
};
function openLoopsTab(from) {
  const tabs = Array.from((from?.ownerDocument ?? document).querySelectorAll('[role="tab"]'));
  const tab = tabs.find((element) => element.textContent?.trim() === TAB_LABEL);
  if (!(tab instanceof HTMLElement)) return false;
  tab.click();
  return true;
}
var overlay = new OverlayState();
var ACTION = {
  display: "flex",
  alignItems: "center",
  gap: "8px",
  width: "100%",
  font: "inherit",
  fontSize: "13px",
  padding: "6px 10px",
  background: "transparent",
  border: "none",
  borderRadius: "6px",
  color: "inherit",
  cursor: "pointer",
  textAlign: "left"
};
var OVERLAY = {
  position: "fixed",
  inset: "0",
  zIndex: 1e3,
  pointerEvents: "auto",
  background: "rgba(0, 0, 0, 0.35)",
  display: "flex",
  justifyContent: "center",
  alignItems: "flex-start",
  padding: "min(6vh, 48px) 0 0"
};
var OVERLAY_BOX = {
  background: "Canvas",
  color: "CanvasText",
  width: "min(960px, 100vw)",
  maxHeight: "calc(100vh - min(6vh, 48px))",
  overflowY: "auto",
  borderRadius: "10px",
  boxShadow: "0 8px 32px rgba(0, 0, 0, 0.25)",
  boxSizing: "border-box"
};
function fault2() {
  const value = globalThis.DSHLOOP_FAULT;
  return typeof value === "string" ? value : "";
}
function applyStatus(ctx) {
  const load = async (sessionId) => {
    const result = await ctx.connection.rpc.call("/dshloop", "status", { sessionId });
    if (result?.ok === true && result.value !== void 0) return result.value;
    const failure = new Error(result?.error?.message ?? "The dshloop plugin sent no status.");
    throw Object.assign(failure, { code: result?.error?.code ?? "internal" });
  };
  ctx.slots.inject("conversation.input.right", () => ctx.slots.register({
    name: "conversation.input.right",
    id: "dshloop-status",
    order: -10,
    // before the model picker's neighbours: the status is context, not a control
    inject: (sessionId) => ({ dshloopSessionId: sessionId, load })
  }, LoopStatus));
}
var CHAT_NODE = "conversation.chat.node";
function applyCards(ctx) {
  if (fault2() === "apply") throw new Error("dshloop: a fault forced into apply (DSHLOOP_FAULT)");
  const store = new CardStore(async (loopIds) => {
    const result = await ctx.connection.rpc.call("/dshloop", "cards", { loopIds });
    if (result?.ok !== true || result.value?.loops === void 0) throw new Error("The dshloop plugin sent no cards.");
    return result.value.loops;
  });
  let shipped;
  const ContextNode = (props) => {
    const own = shipped?.component;
    const theirs = () => (0, import_react3.createElement)(own, props);
    const source = cardSource(props);
    if (source === void 0) return theirs();
    return (0, import_react3.createElement)(
      CardBoundary,
      { fallback: theirs },
      (0, import_react3.createElement)(LoopCard, {
        source,
        text: messageText(props),
        store,
        fault: fault2() === "card",
        openLoop: (loopId) => overlay.show({ loopId, state: store.get(loopId)?.state })
      })
    );
  };
  ctx.slots.inject(CHAT_NODE, () => {
    shipped = ctx.slots.entries(CHAT_NODE).find((entry) => entry?.options?.key === "context" && entry.component !== ContextNode);
    const usable = shipped !== void 0 && (typeof shipped.component === "function" || typeof shipped.component === "object");
    if (!usable) {
      console.warn("dshloop: DSH Web has no context row renderer this plugin knows; loop cards are off");
      return void 0;
    }
    return ctx.slots.register({
      name: CHAT_NODE,
      key: "context",
      priority: -1,
      ...shipped?.locale === void 0 ? {} : { locale: shipped.locale }
    }, ContextNode);
  });
}
function LoopStatus({ dshloopSessionId: sessionId, load }) {
  const [view, setView] = (0, import_react3.useState)({ kind: "loading" });
  const [now, setNow] = (0, import_react3.useState)(() => Date.now());
  (0, import_react3.useEffect)(() => {
    let stopped = false;
    let timer;
    const poll = async () => {
      if (typeof document === "undefined" || !document.hidden) {
        try {
          const answer2 = await load(sessionId);
          if (!stopped) setView({ kind: "ready", sessionId, answer: answer2 });
        } catch (error) {
          if (!stopped) {
            setView((previous) => ({
              kind: "error",
              sessionId,
              message: error instanceof Error ? error.message : String(error),
              unreachable: ["unreachable", "timeout"].includes(error.code ?? ""),
              ...previous.kind === "loading" || previous.sessionId !== sessionId ? {} : { answer: previous.answer }
            }));
          }
        }
      }
      if (!stopped) timer = setTimeout(() => void poll(), REFRESH_MS);
    };
    void poll();
    return () => {
      stopped = true;
      if (timer !== void 0) clearTimeout(timer);
    };
  }, [sessionId, load]);
  (0, import_react3.useEffect)(() => {
    const ticker = setInterval(() => setNow(Date.now()), TICK_MS2);
    return () => clearInterval(ticker);
  }, []);
  if (view.kind === "loading" || view.sessionId !== sessionId) return null;
  if (view.kind === "error" && view.answer === void 0) {
    return (0, import_react3.createElement)("span", {
      "data-dshloop-status": sessionId,
      "data-dshloop-error": "true",
      title: view.message,
      style: { ...STYLE, opacity: 0.7 }
    }, view.unreachable ? "loops: dshloop unreachable" : "loops: unavailable");
  }
  const answer = view.answer;
  const summary = summarize(answer.loops);
  const mark = summary.failed > 0 ? "failed" : summary.paused > 0 ? "paused" : summary.overdue > 0 ? "overdue" : void 0;
  const marked = mark !== void 0;
  return (0, import_react3.createElement)("a", {
    "data-dshloop-status": sessionId,
    ...marked ? { "data-dshloop-mark": mark } : {},
    ...view.kind === "error" ? { "data-dshloop-stale": "true" } : {},
    href: answer.panelUrl,
    target: "_blank",
    rel: "noopener",
    // The conversation's Loops tab, in place; dshloop's own panel (the link) where there is none.
    onClick: (event) => {
      if (event.ctrlKey || event.metaKey) return;
      if (openLoopsTab(event.currentTarget)) event.preventDefault();
    },
    title: view.kind === "error" ? `Last known; refreshing failed: ${view.message}` : "This conversation's loops (the Loops tab)",
    style: { ...STYLE, ...marked ? { color: "#b42318", fontWeight: 600 } : {} }
  }, statusText(summary, now), marked ? MARK : null);
}
var MARK = (0, import_react3.createElement)("span", { "aria-hidden": "true", style: { marginLeft: "4px" } }, "\u26A0");
var STYLE = {
  fontSize: "12px",
  lineHeight: "20px",
  whiteSpace: "nowrap",
  textDecoration: "none",
  color: "inherit",
  opacity: 0.85,
  padding: "0 6px"
};
return module.exports; } });
