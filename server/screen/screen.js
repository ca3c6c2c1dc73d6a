// The Memory screen: one page over the admin routes (/v1/conductor/...). Every value
// reaches the page as text (textContent), never as markup.
"use strict";

const ROOT = document.body.dataset.root || "";
const TABS = ["notes", "context", "layers", "jobs", "bench"];
const PAGE = 50;
const view = { user: null, csrf: null, tab: "notes", scope: null, offset: 0, total: 0, note: null };

// ---------------------------------------------------------------- helpers
function $(sel) { return document.querySelector(sel); }

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function when(iso) {  // in the browser's own time zone
  if (!iso) return "";
  const date = new Date(iso);
  return isNaN(date) ? String(iso) : date.toLocaleString();
}

function say(text, isError) {
  const status = $("#status");
  status.textContent = text || "";
  status.classList.toggle("error", Boolean(isError));
}

class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

async function api(method, path, body) {
  const options = { method, headers: {}, credentials: "same-origin" };
  if (body !== undefined) {
    options.headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  if (view.csrf && method !== "GET") options.headers["X-CSRF-Token"] = view.csrf;
  const response = await fetch(ROOT + path, options);
  const type = response.headers.get("content-type") || "";
  const data = type.includes("json") ? await response.json() : null;
  if (!response.ok) {
    const message = (data && data.error && data.error.message) || response.statusText;
    if (response.status === 401) showLogin();
    throw new ApiError(response.status, message);
  }
  return data;
}

function query(params) {
  const parts = [];
  for (const [key, value] of Object.entries(params)) {
    if (value !== null && value !== undefined && value !== "") {
      parts.push(encodeURIComponent(key) + "=" + encodeURIComponent(value));
    }
  }
  return parts.length ? "?" + parts.join("&") : "";
}

function fill(table, rows, empty) {
  const body = table.tBodies[0];
  body.replaceChildren(...rows);
  if (!rows.length) {
    const cols = table.tHead.rows[0].cells.length;
    body.append(el("tr", { class: "empty" }, el("td", { colspan: cols }, empty || "nothing yet")));
  }
}

function debounce(fn, ms) {
  let timer = null;
  return (...args) => { clearTimeout(timer); timer = setTimeout(() => fn(...args), ms); };
}

async function guarded(work, done) {
  try {
    await work();
    if (done) say(done);
  } catch (error) {
    say(error.message, true);
  }
}

function confirmDialog(text, okLabel) {
  const dialog = $("#confirm");
  $("#confirm-text").textContent = text;
  $("#confirm-ok").textContent = okLabel || "Delete";
  dialog.returnValue = "";
  dialog.showModal();
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
  });
}

// ---------------------------------------------------------------- session
function showOnly(id) {
  for (const section of document.querySelectorAll("main > section")) {
    section.hidden = section.id !== id;
  }
}

function showLogin() {
  showOnly("login");
  $("#password").focus();
}

async function start() {
  let session;
  try {
    session = await api("GET", "/v1/conductor/admin/session");
  } catch (error) {
    // a 401 here is the API key check: a server with keys and no admin password, whose
    // screen a browser (which sends no key) cannot open
    $("#denied-reason").textContent = error.status === 401
      ? "This server has API keys: set an admin password (tandem admin password) to sign in here."
      : error.message;
    showOnly("denied");
    return;
  }
  view.csrf = session.csrf;
  $("#logout").hidden = !session.signed_in;
  if (!session.allowed) {
    if (session.password_set) { showLogin(); return; }
    $("#denied-reason").textContent = session.reason;
    showOnly("denied");
    return;
  }
  view.user = view.user || session.user;
  await loadUsers();
  openTab(tabFromPath(), false);
}

$("#login-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  $("#login-error").textContent = "";
  try {
    const answer = await api("POST", "/v1/conductor/admin/login", { password: $("#password").value });
    view.csrf = answer.csrf;
    $("#password").value = "";
    await start();
  } catch (error) {
    $("#login-error").textContent = error.message;
  }
});

$("#logout").addEventListener("click", async () => {
  await guarded(() => api("POST", "/v1/conductor/admin/logout"));
  view.csrf = null;
  $("#logout").hidden = true;
  showLogin();
});

async function loadUsers() {
  const tree = await api("GET", "/v1/conductor/memory/tree" + query({ user: view.user }));
  // One entry per user folder: the session gives the engine user's name (josé), the tree
  // its folder (jose--<hash>), one user. The value sent back is the folder; the label is
  // the name where the server knows it.
  view.user = tree.user;
  const entries = tree.user_entries
    || Array.from(new Set([tree.user, ...tree.users])).map((f) => ({ folder: f, name: f }));
  $("#user").replaceChildren(...entries.map((u) => el("option", {
    value: u.folder, selected: u.folder === view.user, title: u.folder }, u.name)));
}

$("#user").addEventListener("change", () => {
  view.user = $("#user").value;
  view.scope = null;
  view.offset = 0;
  openTab(view.tab, false);
});

// ---------------------------------------------------------------- tabs
function tabFromPath() {
  const last = location.pathname.replace(/\/+$/, "").split("/").pop();
  return TABS.includes(last) ? last : "notes";
}

function openTab(tab, push) {
  view.tab = tab;
  showOnly("screen-" + tab);
  for (const link of document.querySelectorAll("#tabs a")) {
    if (link.dataset.tab === tab) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  if (push) history.pushState({ tab }, "", ROOT + "/memory/" + tab);
  const loaders = { notes: loadNotesScreen, context: loadSessions, layers: loadLayers,
                    jobs: loadJobs, bench: loadBench };
  guarded(loaders[tab]);
}

for (const link of document.querySelectorAll("#tabs a")) {
  link.addEventListener("click", (event) => {
    if (event.metaKey || event.ctrlKey || event.shiftKey) return;
    event.preventDefault();
    openTab(link.dataset.tab, true);
  });
}
window.addEventListener("popstate", () => openTab(tabFromPath(), false));

// ---------------------------------------------------------------- notes
function scopeLabel(branch) {
  return branch.scope === "user" ? "user" : branch.scope + " · " + branch.key;
}

async function loadNotesScreen() {
  await Promise.all([loadTree(), loadNotes(), loadJournal(), loadWriterRuns(), loadSettings()]);
  $("#export").href = ROOT + "/v1/conductor/memory/export" + query({ user: view.user });
}

async function loadTree() {
  const tree = await api("GET", "/v1/conductor/memory/tree" + query({ user: view.user }));
  const item = (label, scope, counts) => {
    const current = JSON.stringify(view.scope) === JSON.stringify(scope);
    return el("li", {}, el("button", {
      type: "button", class: current ? "current" : null, "aria-pressed": String(current),
      onclick: () => { view.scope = scope; view.offset = 0; loadTree(); loadNotes(); },
    }, label, counts ? el("span", { class: "count" }, counts) : null));
  };
  if ($("#kind").options.length === 1) {
    $("#kind").append(...tree.kinds.map((k) => el("option", { value: k }, k)));
  }
  const total = tree.data.reduce((sum, b) => sum + b.live, 0);
  $("#tree").replaceChildren(item("all notes", null, String(total)),
    ...tree.data.map((b) => item(scopeLabel(b), { scope: b.scope, key: b.key },
      b.live + (b.archived ? " · " + b.archived + " archived" : ""))));
}

function noteFilters() {
  const scope = view.scope || {};
  return {
    user: view.user, scope: scope.scope, project: scope.scope === "project" ? scope.key : null,
    session: scope.scope === "session" ? scope.key : null, state: $("#state").value,
    status: $("#status-filter").value, kind: $("#kind").value,
  };
}

async function loadNotes() {
  const mode = $("#mode").value;
  const text = $("#q").value.trim();
  if (text && mode !== "notes") return searchLayers(text, mode);
  const page = await api("GET", "/v1/conductor/memory/notes" + query({
    ...noteFilters(), q: text, offset: view.offset, limit: PAGE }));
  view.total = page.total;
  fill($("#notes-table"), page.data.map(noteRow), text ? "no note matches" : "no notes here");
  const last = view.offset + page.data.length;
  const of = text ? (page.has_more ? "more found" : `${last} found`) : `of ${page.total}`;
  $("#page-info").textContent = page.data.length ? `${view.offset + 1}–${last} ${of}` : "";
  $("#prev").disabled = view.offset === 0;
  $("#next").disabled = !page.has_more;
}

function noteRow(note) {
  const open = el("button", { type: "button", class: "link", onclick: () => openNote(note.id) },
    note.title);
  const status = note.status + (note.pinned ? " · pinned" : "") + (note.archived ? " · archived" : "")
    + (note.stale ? " · stale" : "");
  return el("tr", { "data-id": note.id }, el("td", {}, open), el("td", { class: "opt" }, note.kind),
    el("td", {}, note.scope), el("td", {}, status), el("td", { class: "num" }, note.uses_7d),
    el("td", { class: "opt" }, when(note.updated)),
    el("td", { class: "num opt" }, note.score !== undefined ? note.score.toFixed(3) : ""));
}

async function searchLayers(text, mode) {
  const answer = await api("GET", "/v1/conductor/memory/search" + query({
    user: view.user, q: text, mode, collection: $("#collection").value, limit: PAGE }));
  const rows = answer.data.map((hit) => {
    const id = (hit.path.match(/--([0-9a-f]{10})\.md$/) || [])[1];
    const title = id ? el("button", { type: "button", class: "link", onclick: () => openNote(id) },
      hit.section || hit.path) : (hit.section || hit.path);
    return el("tr", {}, el("td", {}, title, el("div", { class: "snippet" }, hit.text.slice(0, 160))),
      el("td", { class: "opt" }, hit.collection), el("td", {}, hit.path), el("td", {}, answer.mode),
      el("td", {}), el("td", { class: "opt" }), el("td", { class: "num opt" }, hit.score.toFixed(3)));
  });
  fill($("#notes-table"), rows, "nothing found");
  $("#page-info").textContent = `${answer.data.length} found (${answer.mode}${answer.dense ? "" : ", no dense vectors"})`;
  $("#prev").disabled = true;
  $("#next").disabled = true;
}

const searchSoon = debounce(() => { view.offset = 0; guarded(loadNotes); }, 250);
$("#q").addEventListener("input", searchSoon);
for (const id of ["#mode", "#collection", "#state", "#status-filter", "#kind"]) {
  $(id).addEventListener("change", () => { view.offset = 0; guarded(loadNotes); });
}
$("#prev").addEventListener("click", () => { view.offset = Math.max(0, view.offset - PAGE); guarded(loadNotes); });
$("#next").addEventListener("click", () => { view.offset += PAGE; guarded(loadNotes); });

async function openNote(id) {
  await guarded(async () => {
    const note = await api("GET", `/v1/conductor/memory/notes/${encodeURIComponent(id)}` + query({ user: view.user }));
    view.note = note;
    renderNote(note);
    // on a narrow screen the note is below the list: bring it into view
    if (window.matchMedia("(max-width: 1100px)").matches) $("#note").scrollIntoView();
  });
}

function renderNote(note) {
  const act = (label, action, extra) => el("button", {
    type: "button", "data-action": action, class: extra,
    onclick: () => noteAction(note, action),
  }, label);
  const actions = note.archived ? [act("Delete", "delete", "danger")] : [
    act("Edit", "edit"),
    note.status !== "ratified" ? act("Ratify", "ratify") : null,
    note.status !== "ratified" ? act("Reject", "reject") : null,
    act("Archive", "archive"),
    ["rule", "ruling"].includes(note.kind) && note.status === "ratified"
      ? act(note.pinned ? "Unpin" : "Pin", note.pinned ? "unpin" : "pin") : null,
    act("Delete", "delete", "danger"),
  ];
  const meta = [note.id, note.kind, note.scope + (note.project ? " " + note.project : "")
    + (note.session ? " " + note.session : ""), note.status, "revision " + note.revision,
    `${note.uses_7d} uses in 7 days, ${note.usage.total} in all`];
  const history = note.history.length ? note.history.map((h) => el("details", {},
    el("summary", {}, `revision ${h.from} → ${h.to}`), diffView(h.diff)))
    : [el("p", { class: "muted" }, "no earlier revision")];
  const requests = note.requests.map((r) => el("tr", {}, el("td", {}, when(r.at)),
    el("td", {}, r.request_id || ""), el("td", {}, r.how)));
  const table = el("table", { class: "requests" },
    el("thead", {}, el("tr", {}, el("th", {}, "When"), el("th", {}, "Request"), el("th", {}, "As"))),
    el("tbody", {}));
  fill(table, requests, "in no request in the last 30 days");
  $("#note").replaceChildren(
    el("h2", {}, note.title), el("p", { class: "meta" }, meta.join(" · ")),
    el("div", { class: "actions" }, actions), el("div", { id: "edit-area" }),
    el("h3", {}, "File"), el("pre", { class: "file" }, note.file),
    el("h3", {}, "History"), ...history,
    el("h3", {}, "Requests it went into"), el("div", { class: "table-wrap short" }, table));
}

function diffView(text) {
  return el("pre", { class: "diff" }, text.split("\n").map((line) => el("span", {
    class: line.startsWith("+") && !line.startsWith("+++") ? "add"
      : line.startsWith("-") && !line.startsWith("---") ? "del" : null }, line + "\n")));
}

async function noteAction(note, action) {
  const path = `/v1/conductor/memory/notes/${encodeURIComponent(note.id)}` + query({ user: view.user });
  if (action === "edit") return showEditor(note, path);
  if (action === "delete") {
    if (!(await confirmDialog(`Delete “${note.title}” and its history for good?`))) return;
    await guarded(async () => {
      await api("DELETE", path);
      $("#note").replaceChildren(el("p", { class: "muted" }, "Deleted."));
      await Promise.all([loadNotes(), loadTree(), loadJournal()]);
    }, "deleted");
    return;
  }
  const slash = path.indexOf("?");
  await guarded(async () => {
    await api("POST", path.slice(0, slash) + "/" + action + path.slice(slash), {});
    await Promise.all([openNote(note.id), loadNotes(), loadTree(), loadJournal()]);
  }, action === "archive" ? "archived" : action + (action.endsWith("e") ? "d" : "ed"));
}

function showEditor(note, path) {
  const title = el("input", { id: "edit-title", value: note.title, required: true });
  const tags = el("input", { id: "edit-tags", value: note.tags.join(", ") });
  const body = el("textarea", { id: "edit-body", rows: 8 });
  body.value = note.body;
  const form = el("form", { class: "stack editor" },
    el("label", {}, "Title ", title), el("label", {}, "Tags ", tags), el("label", {}, "Body ", body),
    el("div", {}, el("button", { type: "submit" }, "Save"), " ",
      el("button", { type: "button", onclick: () => form.remove() }, "Cancel")));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    await guarded(async () => {
      await api("PATCH", path, { title: title.value, body: body.value,
        tags: tags.value.split(",").map((t) => t.trim()).filter(Boolean) });
      await Promise.all([openNote(note.id), loadNotes(), loadJournal()]);
    }, "saved as a ratified revision");
  });
  $("#edit-area").replaceChildren(form);
  title.focus();
}

async function loadJournal() {
  const page = await api("GET", "/v1/conductor/memory/journal" + query({ user: view.user, limit: 50 }));
  fill($("#journal"), page.data.map((e) => el("tr", { class: e.ok ? null : "refused" },
    el("td", {}, when(e.at)), el("td", {}, e.op), el("td", { class: "opt" }, e.id || ""),
    el("td", { class: "opt" }, [e.by, e.via || e.source].filter(Boolean).join(" · ")),
    el("td", {}, e.ok ? "done" : "refused: " + (e.reason || "")))), "no writes yet");
}

async function loadWriterRuns() {
  const page = await api("GET", "/v1/conductor/memory/writer/runs?limit=20");
  fill($("#writer-runs"), page.data.map((r) => el("tr", {}, el("td", {}, when(r.started_at)),
    el("td", {}, r.session), el("td", {}, r.trigger), el("td", {}, r.outcome),
    el("td", { class: "num" }, r.notes_written))), "the writer has not run");
}

async function loadSettings() {
  const settings = await api("GET", "/v1/conductor/memory/settings");
  $("#memory-mode").value = settings.memory_mode;
  $("#writer-mode").value = settings.writer_mode || "off";
  $("#settings-profile").textContent = `profile ${settings.profile}; the profile file is unchanged`;
}

$("#settings-form").addEventListener("submit", (event) => {
  event.preventDefault();
  guarded(async () => {
    await api("PUT", "/v1/conductor/memory/settings", {
      memory_mode: $("#memory-mode").value, writer_mode: $("#writer-mode").value });
    await loadSettings();
  }, "settings applied for this run");
});

$("#delete-user-form").addEventListener("submit", (event) => {
  event.preventDefault();
  guarded(async () => {
    const answer = await api("POST", "/v1/conductor/memory/delete-user", {
      user: view.user, confirm: $("#delete-user-confirm").value });
    $("#delete-user-confirm").value = "";
    const label = $("#user").selectedOptions[0]?.textContent || answer.user;  // the name
    say(`deleted ${answer.notes_deleted} notes of ${label}`);
    await loadNotesScreen();
  });
});

// ---------------------------------------------------------------- context
async function loadSessions() {
  const page = await api("GET", "/v1/conductor/memory/sessions" + query({ user: view.user }));
  fill($("#sessions"), page.data.map((s) => el("tr", {},
    el("td", {}, el("button", { type: "button", class: "link", onclick: () => openContext(s.session) },
      s.session)), el("td", {}, s.project || ""), el("td", { class: "num" }, s.messages),
    el("td", { class: "num" }, s.tokens))), "no session has a recorded turn");
}

async function openContext(session) {
  await guarded(async () => {
    const ctx = await api("GET", "/v1/conductor/memory/context" + query({ user: view.user, session }));
    const bar = el("div", { class: "bar", role: "img",
      "aria-label": `${ctx.cached_tokens} of ${ctx.tokens} tokens cached` },
      ctx.parts.map((p) => el("span", { class: "seg " + (p.kind === "visible" ? "visible" : "hidden"),
        "data-cached": p.cached_tokens === p.tokens ? "all" : p.cached_tokens ? "part" : "none",
        title: `${p.name}: ${p.tokens} tokens`, "data-tokens": p.tokens })));
    for (const seg of bar.children) seg.style.flexGrow = seg.dataset.tokens;
    const rows = ctx.parts.map((p) => el("tr", {},
      el("td", {}, el("details", {}, el("summary", {}, p.name), el("pre", {}, p.text + (p.text_cut ? "…" : "")))),
      el("td", { class: "num" }, p.tokens), el("td", { class: "num" }, p.cached_tokens),
      el("td", {}, p.note_ids.join(", "))));
    const table = el("table", { id: "parts" }, el("thead", {}, el("tr", {}, el("th", {}, "Part"),
      el("th", { class: "num" }, "Tokens"), el("th", { class: "num" }, "Cached"), el("th", {}, "Notes"))),
      el("tbody", {}, rows));
    $("#context").replaceChildren(el("h2", {}, "Next prompt of " + ctx.session),
      el("p", { class: "meta" }, `${ctx.tokens} tokens from ${ctx.messages} messages; ${ctx.cached_tokens} `
        + `held by the prefix cache after the last turn (blocks of ${ctx.block_size}, unless evicted since)`
        + (ctx.memory_on ? "" : "; made with memory off")),
      bar, el("div", { class: "table-wrap" }, table), el("p", { class: "muted" }, ctx.pending));
  });
}

// ---------------------------------------------------------------- layers
async function loadLayers() {
  const layers = await api("GET", "/v1/conductor/memory/layers" + query({ user: view.user }));
  fill($("#layer-files"), layers.files.map((f) => el("tr", {},
    el("td", {}, f.layer + (f.layer === "core" ? " (read-only)" : "")),
    el("td", {}, el("button", { type: "button", class: "link", onclick: () => openLayerFile(f.layer, f.name) }, f.name)),
    el("td", { class: "num" }, f.tokens ?? ""))), "no layer files yet");
  $("#checkpoint").textContent = `${layers.history.turns} turns; checkpoint at turn `
    + `${layers.checkpoint_seq}, replay window from turn ${layers.window_start}`;
  fill($("#history-days"), layers.history_days.map((d) => el("tr", {}, el("td", {}, d.day),
    el("td", { class: "num" }, d.turns), el("td", {}, `${d.first_seq}–${d.last_seq}`))), "no turns yet");
  fill($("#entries"), layers.entries.map((e) => el("tr", {},
    el("td", {}, `${e.file} · ${e.section}`), el("td", {}, e.id), el("td", {}, e.text),
    el("td", {}, [e.unverified ? "unverified" : null, e.pending_check ? "pending check: " + e.pending_check : null]
      .filter(Boolean).join(", ")))), "no entries yet");
}

async function openLayerFile(layer, name) {
  await guarded(async () => {
    const file = await api("GET", `/v1/conductor/memory/layers/${layer}/${encodeURIComponent(name)}`
      + query({ user: view.user }));
    $("#layer-file-title").textContent = `${layer} · ${name}` + (layer === "core" ? " (read-only)" : "");
    $("#layer-file").hidden = false;
    $("#layer-file").textContent = file.text;
  });
}

// ---------------------------------------------------------------- jobs
async function loadJobs() {
  const [jobs, runs] = await Promise.all([
    api("GET", "/v1/conductor/jobs" + query({ user: view.user })),
    api("GET", "/v1/conductor/jobs/runs" + query({ user: view.user, limit: 20 }))]);
  $("#jobs-mode").textContent = "mode " + jobs.mode;
  fill($("#jobs"), jobs.data.map((j) => el("tr", {}, el("td", {}, j.job + (j.running ? " (running)" : "")),
    el("td", {}, `at ${j.schedule_utc_hours.map(utcHour).join(", ")}; after ${j.state_threshold} turns`
      + (j.dirty ? " · due" : "")),
    el("td", {}, j.last_run ? `${when(j.last_run.at)} · ${j.last_run.outcome}` : "never"),
    el("td", {}, j.model),
    el("td", {}, el("button", { type: "button", "data-job": j.job, disabled: j.running,
      onclick: () => runJob(j.job) }, "Run now")))), "no jobs");
  fill($("#job-runs"), runs.data.map((r) => el("tr", {}, el("td", {}, when(r.started_at || r.at)),
    el("td", {}, r.job), el("td", {}, r.outcome), el("td", {}, r.reason || ""),
    el("td", { class: "num" }, r.duration_s !== undefined ? Number(r.duration_s).toFixed(1) : ""))),
    "no runs yet");
}

function utcHour(hour) {  // a job's UTC hour in the browser's zone
  const date = new Date(Date.UTC(2000, 0, 1, hour));
  return date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
}

async function runJob(job) {
  say(`running ${job}…`);
  await guarded(async () => {
    const run = await api("POST", `/v1/conductor/jobs/${job}/run`, { user: view.user });
    say(`${job}: ${run.outcome}`);
    await loadJobs();
  });
}

// ---------------------------------------------------------------- bench
async function loadBench() {
  const runs = await api("GET", "/v1/conductor/bench");
  if (!runs.data.length) {
    $("#bench").replaceChildren(el("p", { class: "card muted" }, "no bench results beside this server"));
    return;
  }
  $("#bench").replaceChildren(...runs.data.map((run) => el("section", { class: "card bench" },
    el("h2", {}, run.name), el("p", { class: "meta" }, "updated " + when(run.updated)),
    el("div", { class: "plots" }, run.plots.map((plot) => el("figure", {},
      el("img", { src: ROOT + "/v1/conductor/bench/" + plot, alt: "plot " + plot, loading: "lazy" }),
      el("figcaption", {}, plot.split("/").pop())))),
    el("details", {}, el("summary", {}, "summary"), el("pre", {}, run.summary)))));
}

document.addEventListener("keydown", (event) => {
  if (event.key === "/" && document.activeElement.tagName !== "INPUT"
      && document.activeElement.tagName !== "TEXTAREA" && view.tab === "notes") {
    event.preventDefault();
    $("#q").focus();
  }
});

start();
