/**
 * The agents page (docs/ARCHITECTURE.md, "Web UI", `/agents`): the sessions of the coding-agent CLIs this
 * server runs, one session's history, and its live runs as the event channel reports them.
 *
 * - Sidebar: combobox "Agent" (from `GET /api/agents`), button "New session", list "Sessions"
 *   (a button per session; agent, status, latest message).
 * - The session: status, queue length, goal and orchestration state when their events arrive,
 *   the history (`GET /api/sessions/:id`), and each run seen live in place of its answer: its
 *   status, tool steps (one listitem per `stepRef`, running -> done/error), thinking, streamed
 *   output, the final answer, retries and fallbacks.
 * - Composer: textbox "Message", buttons "Send", "Steer", "Cancel"; API errors as the API words
 *   them.
 * - Transport: ./channel.js (SSE with the cursor, `/ws` only if SSE never opened, quiet
 *   reconnects); the `status` region says "Disconnected" only after 8 s down; a `replay_gap`
 *   reloads the list and the session from the API.
 * @module
 */
import { ApiError, apiJson, getApiKey } from "./api.js";
import { createChannel } from "./channel.js";
import { $, clear, h } from "./dom.js";
import { renderMarkdown } from "./markdown.js";
import { initShell } from "./shell.js";

/**
 * @typedef {{ role: "user" | "assistant", content: string, at: string, error?: string,
 *   errorKind?: string, partial?: boolean, fromQueue?: boolean, steer?: boolean }} Message
 * @typedef {{ id: string, agent: string, cwd: string, status: string, queue: string[],
 *   latestMessage: Message | null, createdAt: string, updatedAt: string }} Session
 * @typedef {{ stepRef: string, toolType: string, label: string, detail?: string, status: string,
 *   el: HTMLElement }} Step
 * @typedef {{ sessionId: string, prompt: string | undefined, answer: string | undefined,
 *   status: string, agent: string, steps: Map<string, Step>, output: string, done: boolean,
 *   el: HTMLElement, parts: Record<string, HTMLElement> }} Run
 * @typedef {{ runs: Run[], goal: Record<string, any> | null,
 *   orc: Record<string, any> | null, orcNotes: string[] }} Live
 * @typedef {{ topic: string, event: string, [field: string]: any }} Ev
 */

initShell();

// ---------------------------------------------------------------------------------------------
// State
// ---------------------------------------------------------------------------------------------

/** @type {{ name: string, provider: string, fallback?: string }[]} */
let agents = [];
/** @type {Map<string, Session>} */
const sessions = new Map();
/** Status from `agent_status` events, by session (running, evaluating, done, error). */
/** @type {Map<string, string>} */
const liveStatus = new Map();
/** What was seen live, by session: runs (with their DOM), goal, orchestration. */
/** @type {Map<string, Live>} */
const live = new Map();
/** @type {string | null} */
let currentId = null;
/** The current session's history (from the API, then kept current by events). */
/** @type {Message[]} */
let msgs = [];
let detailLoaded = false;
/** @type {string | null} */
let detailError = null;
let sessionsLoaded = false;
/** @type {string | null} */
let sessionsError = null;
/** Events that arrive while the list or the session is being reloaded wait here. */
/** @type {Ev[] | null} */
let held = null;
let reloads = 0;

/** @param {string} id */
function liveOf(id) {
  let l = live.get(id);
  if (!l) {
    l = { runs: [], goal: null, orc: null, orcNotes: [] };
    live.set(id, l);
  }
  return l;
}

// ---------------------------------------------------------------------------------------------
// Page structure
// ---------------------------------------------------------------------------------------------

const main = $("main");
main.classList.add("agents-page");

const agentSelect = /** @type {HTMLSelectElement} */ (h("select", {
  "aria-label": "Agent",
  class: "agent-select",
}));
const newButton = /** @type {HTMLButtonElement} */ (h("button", {
  type: "button",
  class: "primary",
  onclick: () => void newSession(),
}, "New session"));
const sessionList = h("ul", { "aria-label": "Sessions", class: "session-list" });
const sessionsNote = h("p", { class: "empty sessions-note" }, "Loading sessions…");
const agentsError = h("p", { class: "error-box agents-error", hidden: true });

const sidebar = h(
  "aside",
  { class: "sidebar agents-sidebar", "aria-label": "Agent sessions" },
  h(
    "div",
    { class: "sidebar-head agents-new" },
    h("label", { class: "field agent-field" }, "Agent", agentSelect),
    newButton,
  ),
  agentsError,
  h("h2", { class: "sidebar-title" }, "Sessions"),
  sessionList,
  sessionsNote,
);

const titleEl = h("h1", { class: "session-title" }, "Agents");
const statusBadge = h("span", { class: "badge" }, "idle");
const queueEl = h("span", { class: "queue-length" }, "Queue: 0");
const cwdEl = h("span", { class: "muted session-cwd" });
const statusLine = h(
  "div",
  { class: "session-facts", hidden: true },
  h("span", { class: "fact" }, h("span", { class: "muted" }, "Status "), statusBadge),
  queueEl,
  cwdEl,
);
const goalPanel = h("section", { class: "state-panel goal", "aria-label": "Goal", hidden: true });
const orcPanel = h("section", {
  class: "state-panel orchestration",
  "aria-label": "Orchestration",
  hidden: true,
});
const head = h(
  "div",
  { class: "session-head" },
  h("div", { class: "narrow" }, titleEl, statusLine, goalPanel, orcPanel),
);

const conversation = h("div", { class: "narrow conversation" });
const scroller = h("div", { class: "scroll" }, conversation);

const errorBox = h("div", { class: "error-box page-error", role: "alert", hidden: true });
const messageBox = /** @type {HTMLTextAreaElement} */ (h("textarea", {
  "aria-label": "Message",
  placeholder: "Message the agent (Enter sends, Shift+Enter for a new line)",
  rows: 2,
}));
const sendButton = /** @type {HTMLButtonElement} */ (h("button", {
  type: "submit",
  class: "primary",
}, "Send"));
const steerButton = /** @type {HTMLButtonElement} */ (h("button", {
  type: "button",
  title: "Send to the running agent now (queued first if it cannot take input)",
  onclick: () => void steer(),
}, "Steer"));
const cancelButton = /** @type {HTMLButtonElement} */ (h("button", {
  type: "button",
  class: "danger",
  title: "Stop the current run (the queue goes on)",
  onclick: () => void cancelRun(),
}, "Cancel"));
const composer = h(
  "form",
  { class: "composer", onsubmit: (/** @type {Event} */ e) => (e.preventDefault(), void send()) },
  h(
    "div",
    { class: "narrow" },
    messageBox,
    h("div", { class: "composer-buttons" }, sendButton, steerButton, cancelButton),
  ),
);
messageBox.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    void send();
  }
});

const column = h(
  "section",
  { class: "column agents-main", "aria-label": "Session" },
  head,
  scroller,
  h("div", { class: "narrow page-error-wrap" }, errorBox),
  composer,
);
const notice = h("div", { role: "status", class: "notice agents-notice", "aria-live": "polite" });

main.append(sidebar, column, notice);

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/** @param {unknown} err */
function messageOf(err) {
  if (err instanceof ApiError) return err.message;
  if (err instanceof Error) return err.message;
  return String(err);
}

/** @param {unknown} err */
function showError(err) {
  errorBox.textContent = messageOf(err);
  errorBox.hidden = false;
}

function clearError() {
  errorBox.hidden = true;
  errorBox.textContent = "";
}

const ERROR_KINDS = /** @type {Record<string, string>} */ ({
  cancelled: "Cancelled",
  timeout: "Timed out",
  stalled: "Stalled",
  rate_limit: "Rate limited",
  connection: "Connection failed",
  auth: "Not authorised",
  crash: "The agent crashed",
  spawn: "Could not start the agent",
  agent: "The agent failed",
});

/** An error as the server words it, led by what kind it is. */
/** @param {unknown} error @param {unknown} kind @param {boolean} [partial] */
function errorText(error, kind, partial = false) {
  const lead = ERROR_KINDS[String(kind)] ?? (partial ? "Stopped early" : "Error");
  return `${lead}: ${error}`;
}

/** @param {string} iso */
function timeOf(iso) {
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? "" : d.toLocaleTimeString();
}

/** @param {string} text @param {number} n */
function cut(text, n) {
  const one = text.replace(/\s+/g, " ").trim();
  return one.length > n ? one.slice(0, n - 1) + "…" : one;
}

const shortId = (/** @type {string} */ id) => id.slice(0, 8);

/** A session's status as shown: a run's own status wins while it runs or once it ended. */
/** @param {Session} s */
function statusOf(s) {
  const l = liveStatus.get(s.id);
  if (l === "running" || l === "evaluating") return l;
  if (s.status === "running") return "running";
  return l ?? "idle";
}

/** @param {HTMLElement} el @param {string} status */
function setBadge(el, status) {
  el.className = `badge ${status}`;
  el.textContent = status;
}

/** @param {string} path @param {RequestInit & { json?: unknown }} [init] */
function api(path, init) {
  return apiJson(path, init);
}

function nearBottom() {
  return scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 120;
}

/** Keeps the view at the bottom when it was there before `f` changed it. */
/** @param {() => void} f */
function keepingBottom(f) {
  const pinned = nearBottom();
  f();
  if (pinned) scroller.scrollTop = scroller.scrollHeight;
}

// ---------------------------------------------------------------------------------------------
// Sidebar
// ---------------------------------------------------------------------------------------------

function renderAgents() {
  const chosen = agentSelect.value;
  clear(agentSelect);
  for (const a of agents) {
    agentSelect.append(h("option", { value: a.name }, `${a.name} (${a.provider})`));
  }
  if (agents.some((a) => a.name === chosen)) agentSelect.value = chosen;
  newButton.disabled = agents.length === 0;
  agentSelect.disabled = agents.length === 0;
}

function renderSessions() {
  clear(sessionList);
  const list = [...sessions.values()].sort((a, b) =>
    b.createdAt.localeCompare(a.createdAt) || b.id.localeCompare(a.id)
  );
  for (const s of list) {
    const status = statusOf(s);
    const latest = s.latestMessage;
    const snippet = latest
      ? `${latest.role === "user" ? "You: " : ""}${cut(latest.error ?? latest.content, 70)}`
      : "No messages yet";
    const pending = s.queue.length;
    sessionList.append(h(
      "li",
      { dataset: { sessionId: s.id } },
      h(
        "button",
        {
          type: "button",
          "aria-label": `${s.agent} ${shortId(s.id)}, ${status}${
            pending ? `, ${pending} queued` : ""
          }`,
          "aria-current": s.id === currentId ? "true" : null,
          onclick: () => void selectSession(s.id),
        },
        h(
          "span",
          { class: "session-line" },
          h("span", { class: "session-agent" }, s.agent),
          h("span", { class: `badge ${status}` }, status),
        ),
        h("span", { class: "meta" }, `${shortId(s.id)} · ${timeOf(s.updatedAt)}`),
        h("span", { class: "meta snippet" }, snippet),
      ),
    ));
  }
  if (sessionsError) {
    sessionsNote.textContent = sessionsError;
    sessionsNote.className = "error-box sessions-note";
    sessionsNote.hidden = false;
  } else if (!sessionsLoaded) {
    sessionsNote.textContent = "Loading sessions…";
    sessionsNote.className = "empty sessions-note";
    sessionsNote.hidden = false;
  } else if (sessions.size === 0) {
    sessionsNote.textContent = "No sessions yet — create one";
    sessionsNote.className = "empty sessions-note";
    sessionsNote.hidden = false;
  } else sessionsNote.hidden = true;
}

// ---------------------------------------------------------------------------------------------
// The session: header, history, runs
// ---------------------------------------------------------------------------------------------

function renderHead() {
  const s = currentId ? sessions.get(currentId) : undefined;
  if (!s) {
    titleEl.textContent = "Agents";
    statusLine.hidden = true;
    goalPanel.hidden = true;
    orcPanel.hidden = true;
    steerButton.disabled = true;
    cancelButton.disabled = true;
    return;
  }
  titleEl.textContent = `${s.agent} · ${shortId(s.id)}`;
  statusLine.hidden = false;
  setBadge(statusBadge, statusOf(s));
  queueEl.textContent = `Queue: ${s.queue.length}`;
  queueEl.title = s.queue.length ? s.queue.map((q) => cut(q, 80)).join("\n") : "";
  cwdEl.textContent = s.cwd;
  steerButton.disabled = false;
  cancelButton.disabled = false;
  renderGoal(liveOf(s.id).goal);
  renderOrc(liveOf(s.id));
}

/** @param {Record<string, any> | null} goal */
function renderGoal(goal) {
  clear(goalPanel);
  goalPanel.hidden = !goal;
  if (!goal) return;
  const status = String(goal.status ?? "active");
  goalPanel.append(
    h(
      "div",
      { class: "state-line" },
      h("strong", {}, "Goal"),
      h("span", { class: `badge ${status}` }, status),
      h("span", { class: "state-title" }, goal.objective ? String(goal.objective) : ""),
    ),
  );
  /** @type {string[]} */
  const facts = [];
  if (goal.turns !== undefined) {
    facts.push(`turns ${goal.turns}${goal.maxTurns ? ` of ${goal.maxTurns}` : ""}`);
  }
  if (goal.summary) facts.push(`last checkpoint: ${cut(String(goal.summary), 160)}`);
  if (goal.reason) facts.push(`reason: ${cut(String(goal.reason), 160)}`);
  if (goal.note) facts.push(String(goal.note));
  if (facts.length) goalPanel.append(h("div", { class: "muted state-facts" }, facts.join(" · ")));
}

/** @param {Live} l */
function renderOrc(l) {
  const orc = l.orc;
  clear(orcPanel);
  orcPanel.hidden = !orc;
  if (!orc) return;
  const state = String(orc.state ?? "");
  const step = orc.step !== undefined
    ? `step ${orc.step}${orc.of !== undefined ? ` of ${orc.of}` : ""}`
    : "";
  orcPanel.append(h(
    "div",
    { class: "state-line" },
    h("strong", {}, "Orchestration"),
    h("span", { class: `badge ${state}` }, state),
    h("span", { class: "state-title" }, orc.title ? String(orc.title) : ""),
    step ? h("span", { class: "muted" }, step) : null,
  ));
  if (orc.doneText || orc.error) {
    orcPanel.append(
      h(
        "div",
        { class: orc.error ? "state-facts error-text" : "muted state-facts" },
        cut(String(orc.error ?? orc.doneText), 300),
      ),
    );
  }
  for (const n of l.orcNotes.slice(-3)) {
    orcPanel.append(h("div", { class: "state-facts warn-text" }, n));
  }
}

/** @param {Message} m */
function messageEl(m) {
  const who = m.role === "user" ? (m.steer ? "You (steer)" : "You") : "Assistant";
  return h(
    "article",
    { class: `message ${m.role}`, "aria-label": m.role },
    h(
      "div",
      { class: "who" },
      who,
      m.fromQueue ? " · from the queue" : "",
      h("span", { class: "when" }, timeOf(m.at)),
    ),
    m.content
      ? m.role === "user"
        ? h("div", { class: "text" }, m.content)
        : h("div", { class: "md" }, renderMarkdown(m.content))
      : null,
    m.error ? h("div", { class: "error-box" }, errorText(m.error, m.errorKind, m.partial)) : null,
  );
}

/** Rebuilds the conversation: each run seen live takes the place of its answer. */
function renderConversation() {
  keepingBottom(() => {
    clear(conversation);
    if (!currentId) {
      conversation.append(h(
        "div",
        { class: "empty" },
        agents.length
          ? sessions.size
            ? "Pick a session, or choose an agent and press New session."
            : "Choose an agent, then press New session to start one."
          : "No agents to start yet.",
      ));
      return;
    }
    if (detailError) {
      conversation.append(h("div", { class: "error-box" }, detailError));
      return;
    }
    if (!detailLoaded) {
      conversation.append(h("div", { class: "empty" }, "Loading…"));
      return;
    }
    const runs = liveOf(currentId).runs;
    const placed = new Set();
    /** @type {Run | undefined} */
    let open;
    for (const m of msgs) {
      if (m.role === "user" && !m.steer) {
        if (open) conversation.append(open.el);
        open = runs.find((r) => !placed.has(r) && r.prompt === m.content);
        if (open) placed.add(open);
        conversation.append(messageEl(m));
        continue;
      }
      if (m.role === "assistant" && open) {
        // The run seen live stands for its answer; any other answer follows it.
        conversation.append(open.el);
        const same = open.answer === m.content;
        open = undefined;
        if (same) continue;
      }
      conversation.append(messageEl(m));
    }
    if (open) conversation.append(open.el);
    for (const r of runs) if (!placed.has(r)) conversation.append(r.el);
    if (msgs.length === 0 && runs.length === 0) {
      conversation.append(h("div", { class: "empty" }, "No messages yet — send one below."));
    }
  });
}

/** @param {string} sessionId @param {string | undefined} prompt */
function newRun(sessionId, prompt) {
  const s = sessions.get(sessionId);
  const parts = {
    badge: h("span", { class: "badge running" }, "starting"),
    steps: h("ul", { class: "steps", "aria-label": "Tool steps", hidden: true }),
    notes: h("ul", { class: "run-notes", hidden: true }),
    outputText: h("div", { class: "output-text" }),
    output: h("details", { class: "stream", open: true, hidden: true }),
    finalText: h("div", { class: "md" }),
    final: h("section", { class: "final", "aria-label": "Final answer", hidden: true }),
    error: h("div", { class: "error-box", hidden: true }),
    agent: h("span", { class: "who" }, s?.agent ?? "Agent"),
  };
  parts.output.append(h("summary", {}, "Output"), parts.outputText);
  parts.final.append(h("div", { class: "who" }, "Final answer"), parts.finalText);
  const el = h(
    "article",
    { class: "message assistant run", "aria-label": "assistant" },
    h(
      "div",
      { class: "run-head" },
      parts.agent,
      h("span", { class: "muted run-status-label" }, "Status"),
      parts.badge,
    ),
    parts.steps,
    parts.notes,
    parts.output,
    parts.final,
    parts.error,
  );
  /** @type {Run} */
  const run = {
    sessionId,
    prompt,
    answer: undefined,
    status: "starting",
    agent: s?.agent ?? "",
    steps: new Map(),
    output: "",
    done: false,
    el,
    parts,
  };
  liveOf(sessionId).runs.push(run);
  return run;
}

/** The run an event of this session belongs to: the newest one still going, else a new one. */
/** @param {string} sessionId */
function currentRun(sessionId) {
  const runs = liveOf(sessionId).runs;
  const last = runs.at(-1);
  if (last && !last.done) return last;
  // Joined mid-run (the page was loaded while it ran): its prompt is the last message shown.
  const tail = sessionId === currentId && detailLoaded ? msgs.at(-1) : undefined;
  return newRun(sessionId, tail?.role === "user" ? tail.content : undefined);
}

/** @param {Run} run @param {string} status */
function setRunStatus(run, status) {
  run.status = status;
  run.el.dataset.status = status;
  setBadge(run.parts.badge, status);
}

/** @param {Run} run @param {Ev} e */
function upsertStep(run, e) {
  const ref = String(e.stepRef ?? `${e.toolType}:${e.label}`);
  let step = run.steps.get(ref);
  if (!step) {
    step = {
      stepRef: ref,
      toolType: String(e.toolType ?? "tool"),
      label: String(e.label ?? ""),
      status: "running",
      el: h("li", { class: "step", dataset: { stepRef: ref } }),
    };
    run.steps.set(ref, step);
    run.parts.steps.append(step.el);
    run.parts.steps.hidden = false;
  }
  if (e.label) step.label = String(e.label);
  if (e.detail !== undefined) step.detail = String(e.detail);
  if (e.status) step.status = String(e.status);
  renderStep(step);
}

/** @param {Step} step */
function renderStep(step) {
  const el = step.el;
  const wasOpen = el.querySelector("details")?.open ?? false;
  clear(el);
  el.dataset.status = step.status;
  el.className = `step ${step.toolType} ${step.status}`;
  const badge = h("span", { class: `badge ${step.status}` }, step.status);
  if (step.toolType === "thinking") {
    el.append(h(
      "details",
      { class: "reasoning", open: wasOpen },
      h("summary", {}, badge, " ", h("span", { class: "step-label" }, step.label || "Thinking")),
      h("div", {}, step.detail ?? ""),
    ));
    return;
  }
  el.append(
    badge,
    h("span", { class: "step-type" }, step.toolType),
    h("span", { class: "step-label" }, step.label),
  );
  if (step.detail) {
    el.append(h(
      "details",
      { class: "step-detail", open: wasOpen },
      h("summary", {}, "Details"),
      h("pre", {}, step.detail),
    ));
  }
}

/** @param {Run} run @param {string} text @param {string} [kind] */
function addNote(run, text, kind = "warn") {
  run.parts.notes.append(h("li", { class: `note ${kind}-text` }, text));
  run.parts.notes.hidden = false;
}

/** @param {Run} run @param {Ev} e */
function finishRun(run, e) {
  run.done = true;
  const text = typeof e.text === "string" ? e.text : "";
  if (Array.isArray(e.toolLog)) {
    // The tool log has the final word on every step (and steps an event may have missed).
    for (const t of e.toolLog) upsertStep(run, t);
  }
  if (text && !e.error) {
    clear(run.parts.finalText);
    run.parts.finalText.append(renderMarkdown(text));
    run.parts.final.hidden = false;
    // The streamed output stays at hand, folded, when it says more than the answer.
    if (run.output.trim() === text.trim()) run.parts.output.hidden = true;
    run.parts.output.open = false;
    run.parts.output.querySelector("summary")?.replaceChildren("Streamed output");
  }
  if (e.error) {
    run.parts.error.textContent = errorText(e.error, e.errorKind, Boolean(run.output));
    run.parts.error.hidden = false;
  }
  // A step the run left open did not finish: the run's end is its end too.
  for (const step of run.steps.values()) {
    if (step.status !== "running") continue;
    step.status = e.error ? "stopped" : "done";
    renderStep(step);
  }
  setRunStatus(run, e.errorKind === "cancelled" ? "cancelled" : e.error ? "error" : "done");
}

// ---------------------------------------------------------------------------------------------
// Events
// ---------------------------------------------------------------------------------------------

/** @param {Ev} e */
function sessionOf(e) {
  const id = e.sessionId ?? e.agentId;
  return typeof id === "string" ? id : undefined;
}

/** @param {Ev} e @param {boolean} replayed true for events held during a reload */
function apply(e, replayed = false) {
  const sid = sessionOf(e);
  const isCurrent = sid !== undefined && sid === currentId;
  const s = sid ? sessions.get(sid) : undefined;
  switch (e.event) {
    case "session_created": {
      const session = /** @type {Session} */ (e.session);
      if (session?.id && !sessions.has(session.id)) {
        sessions.set(session.id, session);
        renderSessions();
        if (!currentId) renderConversation();
      }
      return;
    }
    case "session_list": {
      if (!Array.isArray(e.sessions)) return;
      sessions.clear();
      for (const x of e.sessions) sessions.set(x.id, x);
      renderSessions();
      if (currentId && !sessions.has(currentId)) {
        currentId = null;
        msgs = [];
        renderHead();
        renderConversation();
      } else renderHead();
      return;
    }
    case "queue_update": {
      if (!s) return;
      s.queue = Array.isArray(e.queue)
        ? e.queue.map(String)
        : Array.from({ length: Number(e.pending) || 0 }, () => "");
      renderSessions();
      if (isCurrent) renderHead();
      return;
    }
    case "new_message": {
      /** @type {Message} */
      const m = {
        role: e.role === "user" ? "user" : "assistant",
        content: String(e.content ?? ""),
        at: new Date().toISOString(),
      };
      if (e.error) m.error = String(e.error);
      if (e.errorKind) m.errorKind = String(e.errorKind);
      if (e.partial) m.partial = true;
      if (e.fromQueue) m.fromQueue = true;
      if (s) {
        s.latestMessage = m;
        s.updatedAt = m.at;
        if (m.role === "assistant") s.status = "idle";
      }
      if (sid) {
        const runs = liveOf(sid).runs;
        if (m.role === "user") {
          const last = runs.at(-1);
          // A run whose events came before its prompt was known (a reload) takes the prompt.
          if (last && !last.done && last.prompt === undefined) last.prompt = m.content;
          else if (!replayed || !runs.some((r) => r.prompt === m.content && !r.done)) {
            newRun(sid, m.content);
          }
        } else {
          const run = [...runs].reverse().find((r) => r.answer === undefined);
          if (run) {
            run.answer = m.content;
            if (!run.done) {
              // Ended without agent_done (e.g. interrupted): the message says how.
              finishRun(run, { topic: "agent", event: "agent_done", text: m.content, ...m });
            }
          }
        }
      }
      if (isCurrent && detailLoaded) {
        const last = msgs.at(-1);
        const dup = replayed && last && last.role === m.role && last.content === m.content;
        if (!dup) msgs.push(m);
        renderConversation();
      }
      renderSessions();
      if (isCurrent) renderHead();
      return;
    }
    case "steer_started": {
      if (!isCurrent || !detailLoaded) return;
      const text = String(e.prompt ?? "");
      const last = msgs.at(-1);
      if (replayed && last?.role === "user" && last.content === text) return;
      msgs.push({ role: "user", content: text, at: new Date().toISOString(), steer: true });
      renderConversation();
      return;
    }
    case "agent_status": {
      if (!sid) return;
      const runs = liveOf(sid).runs;
      const last = runs.at(-1);
      // A cancelled run ends with `error`; it is shown as what it is.
      const status = e.status === "error" && last?.status === "cancelled"
        ? "cancelled"
        : String(e.status);
      liveStatus.set(sid, status);
      if (s) s.status = status === "running" || status === "evaluating" ? "running" : "idle";
      if (status === "running" || status === "evaluating") {
        const run = currentRun(sid);
        if (e.agent) run.agent = String(e.agent);
        setRunStatus(run, status);
        if (!last || last !== run) renderIfCurrent(sid);
      } else if (last && last.status !== status) {
        if (!last.done) last.done = true;
        setRunStatus(last, status);
      }
      renderSessions();
      if (isCurrent) renderHead();
      return;
    }
    case "agent_tool": {
      if (!sid) return;
      const runs = liveOf(sid).runs;
      const before = runs.at(-1);
      const run = currentRun(sid);
      keepingBottom(() => upsertStep(run, e));
      if (before !== run) renderIfCurrent(sid);
      return;
    }
    case "agent_output": {
      if (!sid) return;
      const before = liveOf(sid).runs.at(-1);
      const run = currentRun(sid);
      run.output += String(e.text ?? "");
      keepingBottom(() => {
        run.parts.outputText.textContent = run.output;
        run.parts.output.hidden = false;
      });
      if (before !== run) renderIfCurrent(sid);
      return;
    }
    case "agent_done": {
      if (!sid) return;
      const run = liveOf(sid).runs.findLast((r) => !r.done) ?? liveOf(sid).runs.at(-1);
      if (!run) return;
      keepingBottom(() => finishRun(run, e));
      return;
    }
    case "agent_retry": {
      if (!sid) return;
      const run = currentRun(sid);
      const secs = Math.round((Number(e.delay) || 0) / 100) / 10;
      addNote(run, `Retry ${e.attempt} of ${e.maxRetries} in ${secs} s: ${e.reason ?? ""}`);
      return;
    }
    case "agent_fallback": {
      if (!sid) return;
      const run = currentRun(sid);
      run.agent = String(e.to ?? run.agent);
      run.parts.agent.textContent = run.agent;
      addNote(run, `Fell back from ${e.from} to ${e.to}: ${e.reason ?? ""}`);
      return;
    }
    case "worker_stalled":
    case "worker_disconnected":
    case "worker_timeout": {
      if (!sid) return;
      const run = liveOf(sid).runs.at(-1);
      if (!run) return;
      const text = e.event === "worker_stalled"
        ? `No output for ${e.silentSeconds ?? "?"} s`
        : e.event === "worker_timeout"
        ? `Timed out after ${e.timeoutSeconds ?? "?"} s`
        : `The agent process ended${
          e.exitCode !== undefined && e.exitCode !== null ? ` with code ${e.exitCode}` : ""
        }${e.signal ? ` (${e.signal})` : ""}`;
      addNote(run, text);
      return;
    }
    case "orc_state": {
      if (!sid) return;
      const l = liveOf(sid);
      if (l.orc?.runId !== e.runId) l.orcNotes = [];
      l.orc = { ...(l.orc?.runId === e.runId ? l.orc : {}), ...e };
      if (isCurrent) renderHead();
      return;
    }
    default:
      break;
  }
  if (sid && typeof e.event === "string") {
    if (e.event.startsWith("goal_")) {
      const l = liveOf(sid);
      l.goal = goalState(l.goal, e);
      if (isCurrent) renderHead();
    } else if (e.event.startsWith("orchestrate_")) {
      const l = liveOf(sid);
      l.orc ??= { runId: e.runId, state: "", title: "" };
      if (e.event === "orchestrate_warning") l.orcNotes.push(String(e.message ?? ""));
      if (e.event === "orchestrate_done") {
        l.orc = {
          ...l.orc,
          state: e.error ? "failed" : "done",
          doneText: e.text,
          error: e.error,
        };
      }
      if (isCurrent) renderHead();
    }
  }
}

/** Folds one `goal_*` event into what is shown: its fields, and a status from its name. */
/** @param {Record<string, any> | null} prev @param {Ev} e */
function goalState(prev, e) {
  const next = { ...(prev && prev.goalId === e.goalId ? prev : {}) };
  for (const [k, v] of Object.entries(e)) {
    if (k === "topic" || k === "event" || v === undefined || v === null) continue;
    if (typeof v === "object" && k !== "goal") continue;
    next[k] = v;
  }
  if (e.goal && typeof e.goal === "object") Object.assign(next, e.goal);
  if (e.checkpoint && typeof e.checkpoint === "object" && e.checkpoint.summary) {
    next.summary = e.checkpoint.summary;
  }
  const byName = /** @type {Record<string, string>} */ ({
    goal_created: "active",
    goal_set: "active",
    goal_started: "active",
    goal_resume: "active",
    goal_resumed: "active",
    goal_pause: "paused",
    goal_paused: "paused",
    goal_pause_detected: "paused",
    goal_done: "done",
    goal_cancel: "cancelled",
    goal_cancelled: "cancelled",
  });
  if (typeof e.status !== "string" && byName[e.event]) next.status = byName[e.event];
  if (e.event === "goal_pause_gate_pending") {
    next.note = "pause requested once (asked again, it pauses)";
  } else if (e.event !== "goal_checkpoint") delete next.note;
  return next;
}

/** @param {string} sid */
function renderIfCurrent(sid) {
  if (sid === currentId) renderConversation();
}

/** @param {Ev} e */
function onEvent(e) {
  if (held) {
    held.push(e);
    return;
  }
  apply(e);
}

// ---------------------------------------------------------------------------------------------
// Loading
// ---------------------------------------------------------------------------------------------

let loading = Promise.resolve();

/**
 * Reloads from the API (the list, and the current session when `detail`), holding the events
 * that arrive meanwhile and applying them after, so nothing is lost or shown twice.
 * @param {{ list?: boolean, detail?: boolean }} what
 */
function reload(what) {
  loading = loading.then(async () => {
    held ??= [];
    try {
      if (what.list) await loadSessions();
      if (what.detail) await loadDetail();
    } finally {
      const events = held ?? [];
      held = null;
      for (const e of events) apply(e, true);
    }
  });
  return loading;
}

async function loadAgents() {
  try {
    const body = await api("/api/agents");
    agents = Array.isArray(body.agents) ? body.agents : [];
    agentsError.hidden = true;
  } catch (err) {
    agents = [];
    agentsError.textContent = messageOf(err);
    agentsError.hidden = false;
  }
  renderAgents();
}

async function loadSessions() {
  try {
    const body = await api("/api/sessions");
    sessions.clear();
    for (const s of body.sessions ?? []) {
      sessions.set(s.id, s);
      // The API's word wins over a live status that may be stale (a restart in between).
      const l = liveStatus.get(s.id);
      if (s.status !== "running" && (l === "running" || l === "evaluating")) {
        liveStatus.delete(s.id);
      }
    }
    sessionsLoaded = true;
    sessionsError = null;
    if (currentId && !sessions.has(currentId)) currentId = null;
    if (!currentId) {
      const fromHash = decodeURIComponent(location.hash.slice(1));
      const newest = [...sessions.values()].sort((a, b) =>
        b.createdAt.localeCompare(a.createdAt)
      )[0];
      currentId = sessions.has(fromHash)
        ? fromHash
        : body.activeSessionId && sessions.has(body.activeSessionId)
        ? body.activeSessionId
        : newest?.id ?? null;
      detailLoaded = false;
    }
  } catch (err) {
    sessionsError = messageOf(err);
  }
  renderSessions();
  renderHead();
}

async function loadDetail() {
  const id = currentId;
  if (!id) {
    renderConversation();
    return;
  }
  try {
    const enc = encodeURIComponent(id);
    const [s, goal, orcs] = await Promise.all([
      api(`/api/sessions/${enc}`),
      // Absent (404) when the session never had one, or when the server predates goals.
      api(`/api/sessions/${enc}/goal`).catch(() => null),
      api(`/api/orchestrations?sessionId=${enc}`).catch(() => null),
    ]);
    if (id !== currentId) return;
    loadFeatures(id, goal, orcs);
    const { history: h0, ...session } = s;
    sessions.set(id, session);
    msgs = Array.isArray(h0) ? h0 : [];
    detailLoaded = true;
    detailError = null;
    if (session.status !== "running") {
      // Runs that were going when the connection was lost and are not any more.
      for (const r of liveOf(id).runs) {
        if (!r.done) {
          r.done = true;
          setRunStatus(r, "stopped");
        }
      }
    }
  } catch (err) {
    if (id !== currentId) return;
    detailError = messageOf(err);
  }
  renderSessions();
  renderHead();
  renderConversation();
}

/**
 * The goal and newest orchestration as the server has them, so a page opened (or reconnected)
 * after their events still shows them; live events keep them current from here.
 * @param {string} id @param {Record<string, any> | null} goal @param {Record<string, any> | null} orcs
 */
function loadFeatures(id, goal, orcs) {
  const l = liveOf(id);
  if (goal && typeof goal.goalId === "string") {
    const last = Array.isArray(goal.checkpoints) ? goal.checkpoints.at(-1) : undefined;
    l.goal = {
      ...goal,
      ...(last?.summary ? { summary: last.summary } : {}),
      ...(goal.pauseGatePending ? { note: "pause requested once (asked again, it pauses)" } : {}),
    };
  }
  const runs = Array.isArray(orcs?.orchestrations) ? orcs.orchestrations : [];
  const run = runs.reduce(
    (/** @type {Record<string, any> | null} */ a, /** @type {Record<string, any>} */ r) =>
      !a || String(r.createdAt) > String(a.createdAt) ? r : a,
    null,
  );
  if (run && typeof run.runId === "string") {
    const steps = Array.isArray(run.steps) ? run.steps : [];
    const done = steps.filter((/** @type {{status: string}} */ x) => x.status === "done").length;
    if (l.orc?.runId !== run.runId) l.orcNotes = [];
    l.orc = {
      runId: run.runId,
      state: run.state,
      title: `${cut(String(run.task ?? ""), 120)} · round ${run.round} of ${run.maxRounds}`,
      ...(steps.length ? { step: done, of: steps.length } : {}),
      ...(run.state === "done" || run.state === "failed"
        ? { doneText: run.text, error: run.error }
        : {}),
    };
  }
}

/** @param {string} id */
async function selectSession(id) {
  if (id === currentId && detailLoaded) {
    messageBox.focus();
    return;
  }
  currentId = id;
  msgs = [];
  detailLoaded = false;
  detailError = null;
  if (location.hash.slice(1) !== id) rememberInUrl(id);
  clearError();
  renderSessions();
  renderHead();
  renderConversation();
  await reload({ detail: true });
  // Remembered by the server too (the manager and a reloaded page start here).
  api(`/api/sessions/${encodeURIComponent(id)}/activate`, { method: "POST" }).catch(() => {});
}

/** @param {string} id */
function rememberInUrl(id) {
  globalThis.history.replaceState(null, "", `#${encodeURIComponent(id)}`);
}

// ---------------------------------------------------------------------------------------------
// Actions
// ---------------------------------------------------------------------------------------------

/** Runs an action with its button busy; an API refusal is shown as the API words it. */
/** @param {HTMLButtonElement} button @param {() => Promise<void>} f */
async function act(button, f) {
  button.disabled = true;
  try {
    clearError();
    await f();
  } catch (err) {
    showError(err);
  } finally {
    button.disabled = false;
    newButton.disabled = agents.length === 0;
    renderHead();
  }
}

async function createSession() {
  const agent = agentSelect.value;
  if (!agent) throw new Error("No agent to start: the server has none configured.");
  /** @type {Session} */
  const s = await api("/api/sessions", { method: "POST", json: { agent } });
  if (!sessions.has(s.id)) sessions.set(s.id, s);
  await selectSession(s.id);
  return s;
}

function newSession() {
  return act(newButton, async () => {
    await createSession();
    messageBox.focus();
  });
}

function send() {
  return act(sendButton, async () => {
    const text = messageBox.value;
    if (!text.trim()) throw new Error("Write a message first.");
    const id = currentId ?? (await createSession()).id;
    await api(`/api/sessions/${encodeURIComponent(id)}/messages`, {
      method: "POST",
      json: { text },
    });
    if (messageBox.value === text) messageBox.value = "";
    messageBox.focus();
  });
}

function steer() {
  return act(steerButton, async () => {
    const text = messageBox.value;
    if (!text.trim()) throw new Error("Write what to steer the agent with first.");
    if (!currentId) throw new Error("No session: create one first.");
    await api(`/api/sessions/${encodeURIComponent(currentId)}/steer`, {
      method: "POST",
      json: { text },
    });
    if (messageBox.value === text) messageBox.value = "";
  });
}

function cancelRun() {
  return act(cancelButton, async () => {
    if (!currentId) throw new Error("No session: create one first.");
    await api(`/api/sessions/${encodeURIComponent(currentId)}/cancel`, { method: "POST" });
  });
}

// ---------------------------------------------------------------------------------------------
// Start
// ---------------------------------------------------------------------------------------------

const channel = createChannel({
  getApiKey,
  onEvent,
  onGap: () => {
    reloads++;
    main.dataset.reloads = String(reloads);
    void reload({ list: true, detail: true });
  },
  onStatus: (s) => {
    const text = s.disconnected ? "Disconnected" : "";
    if (notice.textContent !== text) notice.textContent = text;
    main.dataset.channel = s.state;
  },
  onAuth: (message) => {
    globalThis.dispatchEvent(new CustomEvent("hearth:need-key", { detail: message }));
  },
});

addEventListener("hearth:key-changed", () => {
  channel.reconnect();
  void loadAgents();
  void reload({ list: true, detail: true });
});

renderAgents();
renderSessions();
renderHead();
renderConversation();
channel.start();
void loadAgents();
void reload({ list: true, detail: true });
