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
var import_react7 = require("react");

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
var import_react2 = require("react");

// src/client/ui.ts
var import_react = require("react");

// src/client/runtime.ts
var CHANNEL = "/dshloop";
var RpcError = class extends Error {
  code;
  field;
  constructor(code, message, field) {
    super(message);
    this.code = code;
    this.field = field;
  }
  /** dshloop or the host half could not be reached, as opposed to refusing. */
  get unreachable() {
    return this.code === "unreachable" || this.code === "timeout";
  }
};
function unwrap(result, missing) {
  const answer = result;
  const refused = answer?.ok === true ? answer.value?.refused : answer?.error;
  if (answer?.ok === true && refused === void 0 && answer.value !== void 0) return answer.value;
  const field = refused?.field;
  throw new RpcError(refused?.code ?? "internal", refused?.message ?? missing, typeof field === "string" ? field : void 0);
}
function endpoint(call, name2, missing) {
  return async (payload) => unwrap(await call(CHANNEL, name2, payload), missing);
}
function errorText(error) {
  return error instanceof Error ? error.message : String(error);
}
function pageHidden() {
  return typeof document !== "undefined" && document.hidden;
}
function poll({ load, every, onValue, onError, skip = pageHidden, timers = TIMERS }) {
  let stopped = false;
  let handle;
  const round = async () => {
    if (!skip()) {
      try {
        const value = await load();
        if (!stopped) onValue(value);
      } catch (error) {
        if (!stopped) onError(error);
      }
    }
    if (!stopped) handle = timers.set(() => void round(), every);
  };
  void round();
  return () => {
    stopped = true;
    if (handle !== void 0) timers.clear(handle);
  };
}
var TIMERS = {
  set: (callback, ms) => setTimeout(callback, ms),
  clear: (handle) => clearTimeout(handle)
};
function fault() {
  const value = globalThis.DSHLOOP_FAULT;
  return typeof value === "string" ? value : "";
}

// src/client/ui.ts
var loaded;
function primitives() {
  if (loaded === void 0) {
    try {
      loaded = require("@deepseek-ai/dsh-client-ui-primitives");
      if (typeof loaded?.Button !== "function") loaded = null;
    } catch {
      loaded = null;
    }
  }
  return loaded;
}
function Button(variant, props, ...children) {
  const ui = primitives();
  const className = ["dshloop-button", props.className].filter(Boolean).join(" ");
  if (ui !== null) return (0, import_react.createElement)(ui.Button, { variant, size: "sm", ...props, className }, ...children);
  return (0, import_react.createElement)("button", { type: "button", ...props, className: `${className} dshloop-button--${variant}` }, ...children);
}
function Badge(tone, props, text) {
  const ui = primitives();
  const className = ["dshloop-badge", tone ? `dshloop-badge--${tone}` : "", props.className].filter(Boolean).join(" ");
  const dot = tone !== void 0 && ui !== null ? (0, import_react.createElement)(ui.StateDot, { state: tone, size: 8 }) : null;
  if (ui !== null) return (0, import_react.createElement)("span", { ...props, className }, (0, import_react.createElement)(ui.Pill, null, dot, text));
  return (0, import_react.createElement)("span", { ...props, className }, text);
}
function Hint(label, child) {
  const ui = primitives();
  return ui === null ? child : (0, import_react.createElement)(ui.Tooltip, { label, delayMs: 400 }, child);
}
var STYLE_ID = "dshloop-styles";
var CSS2 = String.raw`
.dshloop-panel,.dshloop-panel *{box-sizing:border-box}
.dshloop-panel{width:100%;max-width:100%;min-width:0;padding:16px;color:var(--dsw-alias-label-primary,CanvasText);font-family:var(--dsw-font-family,system-ui);font-size:13px;line-height:20px;overflow-wrap:anywhere}
.dshloop-header{display:flex;flex-wrap:wrap;gap:8px;align-items:center;margin-bottom:12px}
.dshloop-title{font-size:16px;line-height:24px;font-weight:600;flex:1 1 auto;min-width:0}
.dshloop-row{display:flex;flex-wrap:wrap;gap:6px 10px;align-items:center;min-width:0}
.dshloop-card{border:1px solid var(--dsw-alias-border-l2,rgba(127,127,127,.35));border-radius:12px;background:var(--dsw-alias-bg-layer-1,transparent);padding:12px 14px;margin:8px 0;min-width:0}
.dshloop-card--failing{border-color:color-mix(in srgb,var(--dsw-alias-state-error-primary,#d92d20) 55%,var(--dsw-alias-border-l2,transparent))}
.dshloop-name{font:inherit;font-weight:600;font-size:14px;background:none;border:none;padding:0;color:inherit;cursor:pointer;text-align:left;min-width:0;flex:1 1 12em}
.dshloop-name:hover{color:var(--dsw-alias-state-business-primary,inherit)}
.dshloop-meta{color:var(--dsw-alias-label-secondary,inherit);font-size:12px;line-height:18px}
.dshloop-muted{color:var(--dsw-alias-label-tertiary,inherit)}
.dshloop-error{color:var(--dsw-alias-state-error-primary,#b42318);font-size:12px;line-height:18px}
.dshloop-section{font-size:12px;font-weight:600;color:var(--dsw-alias-label-secondary,inherit);margin:16px 0 4px}
.dshloop-actions{display:flex;flex-wrap:wrap;gap:6px;margin-top:8px}
.dshloop-button{max-width:100%}
.dshloop-button--outline{border:1px solid var(--dsw-alias-border-l2,rgba(127,127,127,.5));background:transparent;color:inherit;border-radius:14px;padding:0 10px;height:28px;font:inherit;font-size:12px;cursor:pointer}
.dshloop-button--primary{border:none;background:var(--dsw-alias-button-primary-fill,#333);color:var(--dsw-alias-label-primary-foreground,#fff);border-radius:14px;padding:0 12px;height:28px;font:inherit;font-size:12px;font-weight:600;cursor:pointer}
.dshloop-button--ghost{border:none;background:transparent;color:inherit;border-radius:14px;padding:0 10px;height:28px;font:inherit;font-size:12px;cursor:pointer}
.dshloop-button.dshloop-danger{color:var(--dsw-alias-state-error-primary,#b42318)}
.dshloop-badge{display:inline-flex;flex:none;font-size:12px}
.dshloop-badge--error{color:var(--dsw-alias-state-error-primary,#b42318)}
.dshloop-badge--error>*{color:var(--dsw-alias-state-error-primary,#b42318)}
.dshloop-badge--warning>*{color:var(--dsw-alias-state-warn-label,inherit)}
.dshloop-field{display:grid;gap:4px;min-width:0;font-size:12px;color:var(--dsw-alias-label-secondary,inherit)}
.dshloop-input{display:block;width:100%;max-width:100%;min-width:0;height:32px;padding:0 8px;border:1px solid var(--dsw-alias-border-l2,rgba(127,127,127,.5));border-radius:8px;background:var(--dsw-alias-bg-layer-1,transparent);color:var(--dsw-alias-label-primary,inherit);font:inherit;font-size:13px;outline:none}
textarea.dshloop-input{height:auto;min-height:72px;padding:6px 8px;resize:vertical}
.dshloop-input:focus{border-color:var(--dsw-alias-state-business-primary,Highlight)}
select.dshloop-input{appearance:none;-webkit-appearance:none;padding-right:28px;cursor:pointer;background-image:url("data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' width='14' height='14' viewBox='0 0 14 14'%3E%3Cpath d='M3.5 5.25 7 8.75l3.5-3.5' fill='none' stroke='%23888' stroke-width='1.3' stroke-linecap='round' stroke-linejoin='round'/%3E%3C/svg%3E");background-repeat:no-repeat;background-position:right 8px center}
select.dshloop-input option{background:var(--dsw-alias-bg-base,Canvas);color:var(--dsw-alias-label-primary,CanvasText)}
.dshloop-filters{display:grid;grid-template-columns:repeat(auto-fit,minmax(150px,1fr));gap:8px}
.dshloop-form{display:grid;gap:10px;min-width:0}
.dshloop-run{display:flex;flex-wrap:wrap;gap:4px 10px;align-items:center;padding:6px 8px;margin:0 -8px;border-radius:8px;font-size:12px;line-height:18px;min-width:0}
button.dshloop-run{width:calc(100% + 16px);border:none;background:none;color:inherit;font:inherit;font-size:12px;text-align:left;cursor:pointer}
button.dshloop-run:hover{background:var(--dsw-alias-interactive-bg-hover,rgba(127,127,127,.12))}
.dshloop-overlay{position:fixed;inset:0;z-index:1000;pointer-events:auto;background:var(--dsw-alias-bg-mask-1,rgba(0,0,0,.35));display:flex;justify-content:center;align-items:flex-start;padding:min(6vh,48px) 0 0}
.dshloop-dialog{background:var(--dsw-alias-bg-base,Canvas);color:var(--dsw-alias-label-primary,CanvasText);width:min(960px,100vw);max-height:calc(100vh - min(6vh,48px));overflow-y:auto;border:1px solid var(--dsw-alias-border-l2,transparent);border-radius:16px;box-shadow:var(--dsw-shadow-lv3,0 8px 32px rgba(0,0,0,.25))}
.dshloop-sidebar-action{display:flex;align-items:center;gap:8px;width:100%;height:32px;padding:0 8px;border:none;border-radius:8px;background:transparent;color:var(--dsw-alias-label-secondary,inherit);font:inherit;font-size:13px;cursor:pointer;text-align:left}
.dshloop-sidebar-action:hover{background:var(--dsw-alias-interactive-bg-hover,rgba(127,127,127,.12));color:var(--dsw-alias-label-primary,inherit)}
.dshloop-sidebar-action--rail{justify-content:center;width:36px;height:36px;padding:0;margin:0 auto}
.dshloop-sidebar-action svg{flex:none}
@media (max-width:560px){.dshloop-panel{padding:12px}.dshloop-dialog{border-radius:0;border:none;max-height:100vh}.dshloop-overlay{padding:0}}
`;
function installStyles() {
  if (typeof document === "undefined" || document.getElementById(STYLE_ID) !== null) return () => void 0;
  const style = document.createElement("style");
  style.id = STYLE_ID;
  style.textContent = CSS2;
  document.head.append(style);
  return () => style.remove();
}
function usePoll(load, every, onValue, onError, deps) {
  const handlers = (0, import_react.useRef)({ load, onValue, onError });
  handlers.current = { load, onValue, onError };
  (0, import_react.useEffect)(() => poll({
    load: () => handlers.current.load(),
    every,
    onValue: (value) => handlers.current.onValue(value),
    onError: (error) => handlers.current.onError(error)
  }), deps);
}
var Boundary = class extends import_react.Component {
  constructor(props) {
    super(props);
    this.state = { error: void 0 };
  }
  static getDerivedStateFromError(error) {
    return { error: errorText(error) };
  }
  componentDidCatch(error) {
    console.error(`dshloop: ${this.props.label} failed`, error);
  }
  render() {
    return this.state.error === void 0 ? this.props.children : this.props.fallback(this.state.error);
  }
};
function LoopIcon(size) {
  return (0, import_react.createElement)(
    "svg",
    { width: size, height: size, viewBox: "0 0 16 16", fill: "none", "aria-hidden": "true" },
    (0, import_react.createElement)("path", {
      d: "M13.5 8a5.5 5.5 0 1 1-1.61-3.89M13.5 2.5v3h-3",
      stroke: "currentColor",
      strokeWidth: 1.3,
      strokeLinecap: "round",
      strokeLinejoin: "round"
    })
  );
}

// src/client/card.ts
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
  if (run.status === "delivered") return { text: "turn running", failed: false };
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
function LoopCard({ source, text, store, fault: fault2, openLoop }) {
  if (fault2) throw new Error("dshloop: a fault forced into the loop card (DSHLOOP_FAULT)");
  const [, setVersion] = (0, import_react2.useState)(0);
  const [open, setOpen] = (0, import_react2.useState)(false);
  (0, import_react2.useEffect)(() => store.watch(source.loopId, () => setVersion((version) => version + 1)), [store, source.loopId]);
  const loop = store.get(source.loopId);
  const run = runWords(loop?.runs[source.runId]);
  const mark = loopMark(loop);
  const title = loop?.name ?? source.summary ?? "Loop";
  const failed = run?.failed === true || loop?.last_result === "failed";
  return (0, import_react2.createElement)(
    "div",
    {
      "data-dshloop-card": source.runId,
      // A failure notice (contract §16) about the loop, not one of its occurrences.
      ...source.notice ? { "data-dshloop-notice": source.loopId } : {},
      ...failed ? { "data-dshloop-mark": "failed" } : {},
      ...mark !== void 0 ? { "data-dshloop-loop-mark": mark } : {},
      style: { ...CARD, ...failed ? { borderColor: "var(--dsw-alias-state-error-primary, #d92d20)" } : {} }
    },
    (0, import_react2.createElement)(
      "div",
      { style: ROW },
      (0, import_react2.createElement)("span", { "aria-hidden": "true", style: ICON }, source.notice ? "\u26A0" : LoopIcon(14)),
      (0, import_react2.createElement)("strong", { style: TITLE, title }, source.notice ? `Notice: ${title}` : title),
      loop?.schedule_text ? (0, import_react2.createElement)("span", { style: MUTED }, loop.schedule_text) : null
    ),
    (0, import_react2.createElement)(
      "div",
      { style: { ...MUTED, ...ROW } },
      (0, import_react2.createElement)("span", null, source.notice ? "failure notice from dshloop" : "delivered by dshloop"),
      run ? (0, import_react2.createElement)("span", { style: run.failed ? FAILED : void 0 }, `\xB7 ${run.text}`) : null,
      mark ? (0, import_react2.createElement)("span", { style: FAILED }, `\xB7 ${mark}`) : null
    ),
    (0, import_react2.createElement)(
      "div",
      { style: { ...ROW, marginTop: "2px" } },
      (0, import_react2.createElement)("a", {
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
      (0, import_react2.createElement)(
        "button",
        { type: "button", onClick: () => setOpen(!open), style: BUTTON, "aria-expanded": open },
        open ? "Hide message" : "Show message"
      )
    ),
    open ? (0, import_react2.createElement)("pre", { style: PRE }, text) : null
  );
}
var CARD = {
  border: "1px solid var(--dsw-alias-border-l2, rgba(127, 127, 127, 0.35))",
  borderRadius: "12px",
  background: "var(--dsw-alias-bg-layer-1, transparent)",
  padding: "8px 10px",
  margin: "4px 0",
  fontSize: "13px",
  lineHeight: "18px",
  maxWidth: "100%",
  boxSizing: "border-box",
  overflowWrap: "anywhere"
};
var ROW = { display: "flex", flexWrap: "wrap", gap: "4px 10px", alignItems: "baseline" };
var ICON = { color: "var(--dsw-alias-label-tertiary, inherit)", alignSelf: "center", display: "inline-flex" };
var TITLE = { fontWeight: 600 };
var MUTED = { color: "var(--dsw-alias-label-secondary, inherit)", fontSize: "12px" };
var FAILED = { color: "var(--dsw-alias-state-error-primary, #d92d20)", fontWeight: 600 };
var LINK = { color: "var(--dsw-alias-state-business-primary, inherit)", fontSize: "12px", textDecoration: "none", cursor: "pointer" };
var BUTTON = { font: "inherit", fontSize: "12px", background: "none", border: "none", padding: 0, cursor: "pointer", color: "var(--dsw-alias-state-business-primary, inherit)" };
var PRE = { whiteSpace: "pre-wrap", fontSize: "12px", margin: "6px 0 0", opacity: 0.85 };

// src/client/panel.ts
var import_react6 = require("react");

// src/schedule-kinds.json
var schedule_kinds_default = [
  {
    kind: "every",
    label: "Every\u2026",
    fields: [
      {
        name: "every_seconds",
        type: "integer",
        required: true
      }
    ]
  },
  {
    kind: "after",
    label: "Once, after\u2026",
    fields: [
      {
        name: "after_seconds",
        type: "integer",
        required: true
      }
    ]
  },
  {
    kind: "cron",
    label: "On a cron schedule",
    fields: [
      {
        name: "expr",
        type: "string",
        required: true
      },
      {
        name: "tz",
        type: "string",
        required: false
      }
    ]
  }
];

// src/schedule-kinds.ts
var SCHEDULE_KINDS = schedule_kinds_default;
var SCHEDULE_CONTROLS = ["seconds", "expr", "tz"];
function controlOf(field) {
  return field.endsWith("_seconds") ? "seconds" : SCHEDULE_CONTROLS.find((control) => control === field);
}
function kindOf(kind) {
  return SCHEDULE_KINDS.find((known) => known.kind === kind);
}
function controlsOf(kind) {
  return (kindOf(kind)?.fields ?? []).map((field) => ({ ...field, control: controlOf(field.name) }));
}

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
function keepOrder(shown, loops) {
  if (shown === void 0) return [...loops];
  const place = new Map(shown.map((loopId, index) => [loopId, index]));
  const known = loops.filter((loop) => place.has(loop.loop_id));
  known.sort((a, b) => (place.get(a.loop_id) ?? 0) - (place.get(b.loop_id) ?? 0));
  return [...known, ...loops.filter((loop) => !place.has(loop.loop_id))];
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
var takes = (control) => (form) => controlsOf(form.kind).some((field) => field.control === control);
var always = () => true;
var whenNew = (form) => form.target === "new";
var FORM_FIELDS = [
  { key: "name", label: "Name", control: "text", show: (_form, mode) => mode === "edit", hint: "For people; empty removes it." },
  { key: "prompt", label: "Prompt", control: "textarea", show: always },
  {
    key: "kind",
    label: "Schedule",
    control: "select",
    options: SCHEDULE_KINDS.map(({ kind, label }) => [kind, label]),
    show: always
  },
  // Each shows when the chosen kind takes a field typed in it.
  { key: "seconds", label: "Seconds", control: "number", show: takes("seconds") },
  { key: "expr", label: "Cron expression", control: "text", show: takes("expr"), hint: "e.g. 30 9 * * 1-5" },
  { key: "tz", label: "Time zone", control: "text", show: takes("tz"), hint: "IANA name; empty: the host's" },
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
    kind: SCHEDULE_KINDS[0]?.kind ?? "",
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
  const typed = (control) => {
    const field = controlsOf(schedule.kind).find((known) => known.control === control);
    const value = field === void 0 ? void 0 : schedule[field.name];
    return value === void 0 ? "" : String(value);
  };
  const reserved = loop.session_id === "self" || loop.session_id === "new";
  return {
    ...emptyForm(currentSession),
    name: loop.name ?? "",
    prompt: loop.prompt,
    // A kind this plugin does not know stays the form's first.
    ...kindOf(schedule.kind) === void 0 ? {} : { kind: schedule.kind },
    seconds: typed("seconds"),
    expr: typed("expr"),
    tz: typed("tz"),
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
function nextWords(loop, now) {
  if (loop.next_at === void 0) return void 0;
  const failures = loop.consecutive_failures ?? 0;
  const held = failures > 0 && loop.state !== "paused" && loop.state !== "completed";
  return `next ${countdown(loop.next_at, now)}${held ? ` \xB7 held back after ${failures === 1 ? "a failed run" : `${failures} failed runs in a row`}` : ""}`;
}
function lastRunWords(loop, now, latest) {
  if (loop.last_run_at === void 0) return void 0;
  const result = loop.last_result === "failed" ? " \xB7 failed" : latest === void 0 ? "" : ` \xB7 ${latest}`;
  return `last run ${ago(loop.last_run_at, now)}${result}`;
}
function endsWords(loop, now) {
  const parts = [];
  if (loop.max_runs != null) {
    parts.push(`after ${loop.max_runs} scheduled runs (${loop.runs_delivered ?? 0} so far; Run now and Retry do not count)`);
  }
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
  const schedule = { kind: form.kind };
  for (const field of controlsOf(form.kind)) {
    const text = field.control === void 0 ? "" : form[field.control].trim();
    if (text === "" && !field.required) continue;
    schedule[field.name] = field.type === "integer" && /^\d{1,16}$/.test(text) ? Number(text) : text;
  }
  return schedule;
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
  const path = field.split(".");
  const head = path[0] ?? "";
  if (head === "schedule" || SCHEDULE_KINDS.some((kind) => kind.fields.some((taken) => taken.name === head))) {
    const last = path[path.length - 1] ?? "";
    if (last === "kind") return "kind";
    return controlOf(last) ?? controlsOf(form.kind).find((taken) => taken.control !== void 0)?.control ?? "kind";
  }
  if (head === "session_id") return form.target === "session" ? "session" : "target";
  const known = FORM_FIELDS.map((spec) => spec.key);
  return known.includes(head) ? head : void 0;
}

// src/client/filters.ts
var import_react3 = require("react");
var NO_FILTERS = { state: "", target: "", session: "", q: "" };
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
function FilterBar({ filters, setFilters, global, sessions }) {
  const set = (key) => (event) => {
    const value = event.target.value;
    setFilters((previous) => ({ ...previous, [key]: value }));
  };
  return (0, import_react3.createElement)(
    "div",
    { className: "dshloop-filters" },
    select("dshloop-filter-state", filters.state, STATE_OPTIONS, set("state"), "State"),
    global ? select("dshloop-filter-target", filters.target, TARGET_OPTIONS, set("target"), "Target") : null,
    global ? select("dshloop-filter-session", filters.session, [["", "Any session"], ...sessions.map(sessionOption)], set("session"), "Session") : null,
    (0, import_react3.createElement)("input", {
      type: "search",
      name: "dshloop-filter-q",
      "aria-label": "Prompt text or loop ID",
      placeholder: "Prompt text or loop ID",
      value: filters.q,
      onChange: set("q"),
      className: "dshloop-input"
    })
  );
}
function sessionOption(session) {
  return [session.session_id, session.title ? `${session.title} (${session.session_id})` : session.session_id];
}
function select(name2, value, options, onChange, label) {
  return (0, import_react3.createElement)(
    "select",
    { name: name2, value, onChange, className: "dshloop-input", ...label ? { "aria-label": label } : {} },
    ...options.map(([key, text]) => (0, import_react3.createElement)("option", { key, value: key }, text))
  );
}

// src/client/loop-form.ts
var import_react4 = require("react");
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
  return (0, import_react4.createElement)(
    "form",
    {
      "data-dshloop-form": form.mode,
      className: "dshloop-card dshloop-form",
      onSubmit: (event) => {
        event.preventDefault();
        onSubmit();
      }
    },
    (0, import_react4.createElement)("strong", null, form.mode === "create" ? "New loop" : `Edit ${form.loop?.loop_id ?? ""}`),
    ...FORM_FIELDS.filter((spec) => spec.show(form.values, form.mode, unattended)).map((spec) => {
      const value = form.values[spec.key];
      const onInput = (event) => onField(spec.key, event.target.value);
      const error = form.errors[spec.key];
      const options = optionsOf(spec.key);
      const common = { name: spec.key, value, onChange: onInput, className: "dshloop-input" };
      const control = spec.control === "textarea" ? (0, import_react4.createElement)("textarea", { ...common, rows: 3 }) : spec.control === "select" && options !== void 0 ? (0, import_react4.createElement)("select", common, ...options.map(([key, label]) => (0, import_react4.createElement)("option", { key, value: key }, label))) : spec.control === "datetime" ? (0, import_react4.createElement)("input", { ...common, type: "datetime-local" }) : (0, import_react4.createElement)("input", { ...common, type: "text", inputMode: spec.control === "number" ? "numeric" : void 0 });
      return (0, import_react4.createElement)(
        "label",
        { key: spec.key, "data-dshloop-input": spec.key, className: "dshloop-field" },
        (0, import_react4.createElement)("span", null, spec.label, spec.hint ? (0, import_react4.createElement)("span", { className: "dshloop-muted" }, ` \u2014 ${spec.hint}`) : null),
        control,
        error ? (0, import_react4.createElement)("span", { "data-dshloop-field-error": spec.key, role: "alert", className: "dshloop-error" }, error) : null
      );
    }),
    form.general ? (0, import_react4.createElement)("div", { "data-dshloop-field-error": "form", role: "alert", className: "dshloop-error" }, form.general) : null,
    (0, import_react4.createElement)(
      "div",
      { className: "dshloop-actions" },
      Button("primary", { type: "submit", "data-dshloop-action": "save", disabled: form.busy }, form.mode === "create" ? "Create" : "Save"),
      Button("outline", { "data-dshloop-action": "cancel", onClick: onCancel }, "Cancel")
    )
  );
}

// src/client/loop-rows.ts
var import_react5 = require("react");
function LoopRow({ loop, titles, now, open, confirming, notice, history, latest, showSession, onToggle, onAction }) {
  const state = stateWords(loop);
  const failing = isFailing(loop);
  const marked = state === "failed" || state === "awaiting approval" || state === "paused";
  const next = nextWords(loop, now);
  const current = latest !== void 0 && loop.last_run_at !== void 0 && latest.scheduled_at <= loop.last_run_at ? latest : void 0;
  const last = lastRunWords(loop, now, runWords(current)?.text);
  const ends = endsWords(loop, now);
  return (0, import_react5.createElement)(
    "div",
    {
      "data-dshloop-loop": loop.loop_id,
      "data-dshloop-state": state,
      ...failing ? { "data-dshloop-mark": "failed" } : {},
      className: failing ? "dshloop-card dshloop-card--failing" : "dshloop-card"
    },
    (0, import_react5.createElement)(
      "div",
      { className: "dshloop-row" },
      (0, import_react5.createElement)(
        "button",
        { type: "button", onClick: onToggle, className: "dshloop-name", "aria-expanded": open, title: loop.prompt },
        loop.name ? `${loop.name} \u2014 ${preview(loop.prompt, 80)}` : preview(loop.prompt)
      ),
      Badge(state === "failed" ? "error" : marked ? "warning" : state === "running" ? "ongoing" : void 0, { "data-dshloop-field": "state" }, state)
    ),
    (0, import_react5.createElement)(
      "div",
      { className: "dshloop-row dshloop-meta" },
      (0, import_react5.createElement)("span", { "data-dshloop-field": "schedule" }, loop.schedule_text ?? loop.schedule.kind),
      (0, import_react5.createElement)("span", { className: "dshloop-muted" }, "\u2192"),
      (0, import_react5.createElement)("span", { "data-dshloop-field": "target" }, targetWords(loop.session_id, titles)),
      next !== void 0 ? (0, import_react5.createElement)("span", { "data-dshloop-field": "next" }, next) : null,
      last !== void 0 ? (0, import_react5.createElement)("span", { "data-dshloop-field": "last-run" }, last) : (0, import_react5.createElement)("span", { className: "dshloop-muted" }, "not run yet"),
      ends !== void 0 ? (0, import_react5.createElement)("span", { "data-dshloop-field": "ends" }, ends) : null
    ),
    loop.last_error ? (0, import_react5.createElement)("div", { "data-dshloop-field": "last-error", className: "dshloop-error" }, `last error: ${loop.last_error}`) : null,
    (0, import_react5.createElement)(
      "div",
      { className: "dshloop-actions" },
      ...actionsOf(loop).map((action) => Button(action === "delete" && confirming ? "primary" : "outline", {
        key: action,
        "data-dshloop-action": action,
        ...action === "delete" ? { className: "dshloop-danger" } : {},
        onClick: () => onAction(action)
      }, action === "delete" && confirming ? "Confirm delete" : ACTION_LABELS[action] ?? action)),
      Button("ghost", { "data-dshloop-action": "runs", onClick: onToggle, "aria-expanded": open }, open ? "Hide runs" : "Runs")
    ),
    notice ? (0, import_react5.createElement)("div", { "data-dshloop-notice": "true", className: "dshloop-error" }, notice) : null,
    open ? (0, import_react5.createElement)(History, { history, now, showSession }) : null
  );
}
function History({ history, now, showSession }) {
  if (history === void 0) return (0, import_react5.createElement)("div", { className: "dshloop-muted" }, "Loading runs\u2026");
  return (0, import_react5.createElement)(
    "div",
    { style: { marginTop: "8px" } },
    (0, import_react5.createElement)("div", { className: "dshloop-section" }, history.runs.length === 0 ? "No runs yet." : "Runs, newest first"),
    ...history.runs.map((run) => {
      const words = runWords(run);
      return (0, import_react5.createElement)(
        "div",
        { key: run.run_id, "data-dshloop-run": run.run_id, className: "dshloop-run" },
        (0, import_react5.createElement)("span", null, ago(run.scheduled_at, now)),
        run.manual ? (0, import_react5.createElement)("span", { className: "dshloop-muted" }, "run now") : null,
        (0, import_react5.createElement)("span", { className: words?.failed ? "dshloop-error" : void 0 }, words?.text ?? run.status),
        run.target_session_id && showSession ? Button("outline", {
          "data-dshloop-open-session": run.target_session_id,
          onClick: () => showSession(run.target_session_id, run.run_id)
        }, "Open session") : null
      );
    }),
    history.events.length > 0 ? (0, import_react5.createElement)("div", { className: "dshloop-section" }, "Trail") : null,
    ...history.events.map((event, index) => (0, import_react5.createElement)(
      "div",
      { key: `${event.at}-${index}`, "data-dshloop-event": event.kind, className: "dshloop-meta" },
      `${ago(event.at, now)} \xB7 ${event.kind} \xB7 ${event.actor.kind}${event.actor.id ? ` ${event.actor.id}` : ""}`
    ))
  );
}
function DeletedLoop({ history, name: name2, now, showSession }) {
  const deleted = history.events[0];
  return (0, import_react5.createElement)(
    "div",
    { "data-dshloop-loop-deleted": history.loopId, className: "dshloop-card" },
    (0, import_react5.createElement)(
      "div",
      { className: "dshloop-row" },
      (0, import_react5.createElement)("strong", null, name2 ?? history.loopId),
      Badge("error", { "data-dshloop-field": "state" }, "deleted")
    ),
    (0, import_react5.createElement)(
      "div",
      { className: "dshloop-meta" },
      `Deleted${deleted ? ` ${ago(deleted.at, now)}` : ""}: it no longer runs; its runs and trail stay.`
    ),
    (0, import_react5.createElement)(History, { history, now, showSession })
  );
}
function Delivered({ sessionId, runs, loops, now, showSession }) {
  const prompts = new Map(loops.map((loop) => [loop.loop_id, loop.name ?? preview(loop.prompt, 60)]));
  return (0, import_react5.createElement)(
    "div",
    { "data-dshloop-delivered": sessionId },
    (0, import_react5.createElement)("div", { className: "dshloop-section" }, "Runs delivered here"),
    runs.length === 0 ? (0, import_react5.createElement)("div", { className: "dshloop-meta" }, "none yet") : null,
    ...runs.map((run) => {
      const words = runWords(run);
      const parts = [
        (0, import_react5.createElement)("span", { key: "at" }, ago(run.scheduled_at, now)),
        (0, import_react5.createElement)("span", { key: "loop", className: "dshloop-muted" }, prompts.get(run.loop_id) ?? run.loop_name ?? run.loop_id),
        run.loop_deleted ? (0, import_react5.createElement)("span", { key: "deleted", "data-dshloop-loop-deleted": run.loop_id, className: "dshloop-muted" }, "loop deleted") : null,
        run.manual ? (0, import_react5.createElement)("span", { key: "manual", className: "dshloop-muted" }, "run now") : null,
        (0, import_react5.createElement)("span", { key: "words", className: words?.failed ? "dshloop-error" : void 0 }, words?.text ?? run.status)
      ];
      if (showSession === void 0) return (0, import_react5.createElement)("div", { key: run.run_id, "data-dshloop-run": run.run_id, className: "dshloop-run" }, ...parts);
      return (0, import_react5.createElement)("button", {
        key: run.run_id,
        type: "button",
        "data-dshloop-run": run.run_id,
        className: "dshloop-run",
        title: "Show this run in the chat",
        onClick: () => showSession(sessionId, run.run_id)
      }, ...parts);
    })
  );
}

// src/client/panel.ts
var PANEL_REFRESH_MS = 3e3;
var TICK_MS = 1e3;
var TYPING_MS = 300;
function focusFilters(focus) {
  return { ...NO_FILTERS, q: focus.loopId, ...focus.state === "completed" ? { state: "completed" } : {} };
}
function LoopsPanel(props) {
  return (0, import_react6.createElement)(Boundary, {
    label: "the Loops panel",
    fallback: (error) => (0, import_react6.createElement)(
      "div",
      { "data-dshloop-panel": props.scope, "data-dshloop-error": "panel", className: "dshloop-panel dshloop-error" },
      `The Loops panel failed: ${error}. DSH works as before; dshloop's own panel shows the same loops.`
    )
  }, (0, import_react6.createElement)(PanelBody, props));
}
function PanelBody({ scope, deps, onClose, focus }) {
  if (fault() === "panel") throw new Error("dshloop: a fault forced into the Loops panel (DSHLOOP_FAULT)");
  const current = scope === "global" ? void 0 : scope;
  const [filters, setFilters] = (0, import_react6.useState)(focus === void 0 ? NO_FILTERS : focusFilters(focus));
  const [list, setList] = (0, import_react6.useState)(void 0);
  const [listError, setListError] = (0, import_react6.useState)(void 0);
  const [version, setVersion] = (0, import_react6.useState)(0);
  const [now, setNow] = (0, import_react6.useState)(() => Date.now());
  const [openId, setOpenId] = (0, import_react6.useState)(focus?.loopId);
  const [history, setHistory] = (0, import_react6.useState)(void 0);
  const [form, setForm] = (0, import_react6.useState)(void 0);
  const [delivered, setDelivered] = (0, import_react6.useState)(void 0);
  const [sessions, setSessions] = (0, import_react6.useState)(void 0);
  const [notices, setNotices] = (0, import_react6.useState)({});
  const [confirming, setConfirming] = (0, import_react6.useState)(void 0);
  const refresh = () => setVersion((value) => value + 1);
  const [q, setQ] = (0, import_react6.useState)(focus?.loopId ?? "");
  (0, import_react6.useEffect)(() => {
    const timer = setTimeout(() => setQ(filters.q.trim()), TYPING_MS);
    return () => clearTimeout(timer);
  }, [filters.q]);
  const shown = (0, import_react6.useRef)(void 0);
  const resort = () => {
    shown.current = void 0;
    refresh();
  };
  usePoll(async () => {
    const asked = { ...filters, q, ...current === void 0 ? {} : { session: current } };
    const answer = await deps.rpc({ op: "list", ...asked });
    const loops = keepOrder(shown.current, answer.loops);
    shown.current = loops.map((loop) => loop.loop_id);
    const unsorted = loops.some((loop, index) => answer.loops[index]?.loop_id !== loop.loop_id);
    setList({ ...answer, loops, unsorted });
    setListError(void 0);
    if (current !== void 0) setDelivered((await deps.rpc({ op: "delivered", sessionId: current })).runs);
    if (openId !== void 0) {
      const more = await deps.rpc({ op: "loop", loopId: openId });
      setHistory({ loopId: openId, runs: more.runs, events: more.events });
    }
  }, PANEL_REFRESH_MS, () => void 0, (error) => setListError(errorText(error)), [deps, current, openId, version]);
  (0, import_react6.useEffect)(() => resort(), [filters.state, filters.target, filters.session, q]);
  (0, import_react6.useEffect)(() => {
    const ticker = setInterval(() => setNow(Date.now()), TICK_MS);
    return () => clearInterval(ticker);
  }, []);
  const needSessions = form !== void 0 || current === void 0;
  (0, import_react6.useEffect)(() => {
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
      setNotices((previous) => ({ ...previous, [loop.loop_id]: errorText(error) }));
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
      resort();
    } catch (error) {
      const message = errorText(error);
      const field = error instanceof FormError ? error.field : formFieldOf(error instanceof RpcError ? error.field : void 0, form.values);
      setForm({ ...form, busy: false, errors: field === void 0 ? {} : { [field]: message }, ...field === void 0 ? { general: message } : {} });
    }
  };
  const deletedOpen = openId !== void 0 && history?.loopId === openId && history.events[0]?.kind === "deleted" && list !== void 0 && !list.loops.some((loop) => loop.loop_id === openId);
  const titles = {};
  for (const loop of list?.loops ?? []) {
    const title = list?.titles[loop.session_id] ?? deps.titleOf(loop.session_id);
    if (title) titles[loop.session_id] = title;
  }
  const newest = /* @__PURE__ */ new Map();
  for (const run of [...delivered ?? [], ...history?.runs ?? []]) {
    const known = newest.get(run.loop_id);
    if (known === void 0 || run.scheduled_at > known.scheduled_at) newest.set(run.loop_id, run);
  }
  const showSession = deps.showSession === void 0 ? void 0 : (sessionId, runId) => {
    onClose?.();
    deps.showSession?.(sessionId, runId);
  };
  return (0, import_react6.createElement)(
    "div",
    { "data-dshloop-panel": scope, className: "dshloop-panel" },
    (0, import_react6.createElement)(
      "div",
      { className: "dshloop-header" },
      (0, import_react6.createElement)("span", { className: "dshloop-title" }, current === void 0 ? "Loops" : "Loops of this conversation"),
      // Always in its place, shown only when the rows' order is no longer dshloop's: appearing must
      // not push the rows down either.
      Button("ghost", {
        "data-dshloop-action": "sort",
        ...list?.unsorted ? { "data-dshloop-unsorted": "true" } : { "aria-hidden": "true", tabIndex: -1, disabled: true },
        title: "Rows keep their places while you look; dshloop lists loops by next run.",
        style: { visibility: list?.unsorted ? "visible" : "hidden" },
        onClick: resort
      }, "Sort by next run"),
      Button("primary", {
        "data-dshloop-action": "new",
        onClick: () => setForm({ mode: "create", values: emptyForm(current), errors: {}, busy: false })
      }, "New loop"),
      onClose ? Button("outline", { "aria-label": "Close", "data-dshloop-action": "close", onClick: onClose }, "Close") : null
    ),
    (0, import_react6.createElement)(FilterBar, { filters, setFilters, global: current === void 0, sessions: sessions ?? [] }),
    form ? (0, import_react6.createElement)(LoopFormView, {
      form,
      sessions: sessions ?? [],
      current,
      // From the latest state, not this render's: two quick keystrokes must both land.
      onField: (key, value) => setForm((previous) => previous === void 0 ? previous : { ...previous, values: { ...previous.values, [key]: value } }),
      onCancel: () => setForm(void 0),
      onSubmit: () => void submit()
    }) : null,
    listError ? (0, import_react6.createElement)("div", { "data-dshloop-error": "list", className: "dshloop-error" }, `Could not refresh: ${listError}`) : null,
    list === void 0 ? (0, import_react6.createElement)("div", { className: "dshloop-muted" }, listError ? "" : "Loading\u2026") : list.loops.length === 0 ? deletedOpen ? null : (0, import_react6.createElement)("div", { "data-dshloop-empty": "true", className: "dshloop-muted", style: { padding: "12px 0" } }, "no loops") : (0, import_react6.createElement)("div", null, ...list.loops.map((loop) => (0, import_react6.createElement)(LoopRow, {
      key: loop.loop_id,
      loop,
      titles,
      now,
      open: openId === loop.loop_id,
      confirming: confirming === loop.loop_id,
      notice: notices[loop.loop_id] ?? "",
      history: history?.loopId === loop.loop_id ? history : void 0,
      latest: newest.get(loop.loop_id),
      showSession,
      onToggle: () => setOpenId(openId === loop.loop_id ? void 0 : loop.loop_id),
      onAction: (action) => void act(loop, action)
    }))),
    deletedOpen && history !== void 0 ? (0, import_react6.createElement)(DeletedLoop, { history, name: delivered?.find((run) => run.loop_id === history.loopId)?.loop_name, now, showSession }) : null,
    list?.more ? (0, import_react6.createElement)("div", { className: "dshloop-muted" }, `Showing the first ${list.loops.length}; narrow the filters to see the rest.`) : null,
    current !== void 0 && delivered !== void 0 ? (0, import_react6.createElement)(Delivered, { sessionId: current, runs: delivered, loops: list?.loops ?? [], now, showSession }) : null
  );
}

// src/client/index.ts
var name = "dshloop-client";
var inject = ["slots", "connection", "sessions"];
var REFRESH_MS = 3e3;
var TICK_MS2 = 1e3;
function apply(ctx) {
  try {
    ctx.effect(() => installStyles(), "dshloop: styles");
  } catch (error) {
    console.error("dshloop: the styles could not be installed", error);
  }
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
    rpc: endpoint(ctx.connection.rpc.call.bind(ctx.connection.rpc), "panel", "The dshloop plugin did not answer."),
    showSession: ctx.sessions === void 0 ? void 0 : (sessionId, runId) => {
      ctx.sessions?.open(sessionId);
      showChat(runId);
    },
    titleOf: (sessionId) => {
      try {
        return ctx.sessions?.list?.getSnapshot().byId?.[sessionId]?.title;
      } catch {
        return void 0;
      }
    }
  };
  const Action = ({ wide }) => {
    const rail = wide === false;
    const button = (0, import_react7.createElement)("button", {
      type: "button",
      "data-dshloop-open": "panel",
      "aria-label": "Loops",
      ...rail ? {} : { title: "Every loop, from dshloop" },
      onClick: () => overlay.show(),
      className: rail ? "dshloop-sidebar-action dshloop-sidebar-action--rail" : "dshloop-sidebar-action"
    }, LoopIcon(rail ? 18 : 16), rail ? null : (0, import_react7.createElement)("span", null, "Loops"));
    return rail ? Hint("Loops", button) : button;
  };
  const Overlay = () => {
    const [open, setOpen] = (0, import_react7.useState)(overlay.open);
    (0, import_react7.useEffect)(() => overlay.watch(setOpen), []);
    (0, import_react7.useEffect)(() => {
      if (!open) return void 0;
      const close = (event) => {
        if (event.key === "Escape") overlay.set(false);
      };
      document.addEventListener("keydown", close);
      return () => document.removeEventListener("keydown", close);
    }, [open]);
    if (!open) return null;
    return (0, import_react7.createElement)("div", {
      "data-dshloop-overlay": "true",
      className: "dshloop-overlay",
      onClick: (event) => {
        if (event.target === event.currentTarget) overlay.set(false);
      }
    }, (0, import_react7.createElement)(
      "div",
      { role: "dialog", "aria-label": "Loops", className: "dshloop-dialog" },
      // Keyed by the loop it was opened on, so a card's "Open loop" starts it afresh on that loop.
      (0, import_react7.createElement)(LoopsPanel, { key: overlay.focus?.loopId ?? "", scope: "global", deps, focus: overlay.focus, onClose: () => overlay.set(false) })
    ));
  };
  const Tab = ({ dshloopSessionId }) => (0, import_react7.createElement)("div", { style: { height: "100%", overflowY: "auto" } }, (0, import_react7.createElement)(LoopsPanel, { scope: dshloopSessionId, deps }));
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
  const tab = loopsTab(from?.ownerDocument ?? document);
  if (tab === void 0) return false;
  tab.click();
  return true;
}
function loopsTab(page) {
  const tab = Array.from(page.querySelectorAll('[role="tab"]')).find((element) => element.textContent?.trim() === TAB_LABEL);
  return tab instanceof HTMLElement ? tab : void 0;
}
function showChat(runId, page = document) {
  const until = Date.now() + 1500;
  let theirs = false;
  const watch = (event) => {
    if (event.isTrusted) theirs = true;
  };
  page.addEventListener("click", watch, true);
  const step = () => {
    if (theirs) return finish();
    const ours = loopsTab(page);
    if (ours?.getAttribute("aria-selected") === "true") {
      const first = ours.parentElement?.querySelector('[role="tab"]');
      if (first instanceof HTMLElement && first !== ours) first.click();
    }
    const card = runId === void 0 ? null : page.querySelector(`[data-dshloop-card="${CSS.escape(runId)}"]`);
    if (card !== null) card.scrollIntoView({ block: "center" });
    if (card === null && Date.now() < until) setTimeout(step, 100);
    else finish();
  };
  const finish = () => page.removeEventListener("click", watch, true);
  setTimeout(step, 0);
}
var overlay = new OverlayState();
function applyStatus(ctx) {
  const status = endpoint(ctx.connection.rpc.call.bind(ctx.connection.rpc), "status", "The dshloop plugin sent no status.");
  const load = async (sessionId) => await status({ sessionId });
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
  if (fault() === "apply") throw new Error("dshloop: a fault forced into apply (DSHLOOP_FAULT)");
  const store = new CardStore(async (loopIds) => {
    const result = await ctx.connection.rpc.call(CHANNEL, "cards", { loopIds });
    if (result?.ok !== true || result.value?.loops === void 0) throw new Error("The dshloop plugin sent no cards.");
    return result.value.loops;
  });
  let shipped;
  const ContextNode = (props) => {
    const own = shipped?.component;
    const theirs = () => (0, import_react7.createElement)(own, props);
    const source = cardSource(props);
    if (source === void 0) return theirs();
    return (0, import_react7.createElement)(
      Boundary,
      { label: "a loop card (DSH draws its own row instead)", fallback: theirs },
      (0, import_react7.createElement)(LoopCard, {
        source,
        text: messageText(props),
        store,
        fault: fault() === "card",
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
  const [view, setView] = (0, import_react7.useState)({ kind: "loading" });
  const [now, setNow] = (0, import_react7.useState)(() => Date.now());
  usePoll(() => load(sessionId), REFRESH_MS, (answer2) => setView({ kind: "ready", sessionId, answer: answer2 }), (error) => {
    setView((previous) => ({
      kind: "error",
      sessionId,
      message: errorText(error),
      unreachable: error instanceof RpcError && error.unreachable,
      ...previous.kind === "loading" || previous.sessionId !== sessionId ? {} : { answer: previous.answer }
    }));
  }, [sessionId, load]);
  (0, import_react7.useEffect)(() => {
    const ticker = setInterval(() => setNow(Date.now()), TICK_MS2);
    return () => clearInterval(ticker);
  }, []);
  if (view.kind === "loading" || view.sessionId !== sessionId) return null;
  if (view.kind === "error" && view.answer === void 0) {
    return (0, import_react7.createElement)("span", {
      "data-dshloop-status": sessionId,
      "data-dshloop-error": "true",
      title: view.message,
      style: { ...STYLE, color: "var(--dsw-alias-label-tertiary, inherit)" }
    }, view.unreachable ? "loops: dshloop unreachable" : "loops: unavailable");
  }
  const answer = view.answer;
  const summary = summarize(answer.loops);
  const mark = summary.failed > 0 ? "failed" : summary.paused > 0 ? "paused" : summary.overdue > 0 ? "overdue" : void 0;
  const marked = mark !== void 0;
  return (0, import_react7.createElement)("a", {
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
    title: view.kind === "error" ? `Last known; refreshing failed: ${view.message}` : summary.failed > 0 ? "This conversation's loops (the Loops tab). A loop whose scheduled runs fail waits longer before each next run, and pauses after several failures in a row; its row in the tab says how long and why." : "This conversation's loops (the Loops tab)",
    style: { ...STYLE, ...marked ? { color: "var(--dsw-alias-state-error-primary, #b42318)", fontWeight: 600 } : {} }
  }, statusText(summary, now), marked ? MARK : null);
}
var MARK = (0, import_react7.createElement)("span", { "aria-hidden": "true", style: { marginLeft: "4px" } }, "\u26A0");
var STYLE = {
  fontSize: "12px",
  lineHeight: "20px",
  display: "inline-block",
  maxWidth: "100%",
  verticalAlign: "middle",
  whiteSpace: "nowrap",
  overflow: "hidden",
  textOverflow: "ellipsis",
  minWidth: "0",
  flexShrink: 1,
  textDecoration: "none",
  color: "var(--dsw-alias-label-secondary, inherit)",
  padding: "0 6px"
};
return module.exports; } });
