// kinetolens dashboard: draws the blocks the server sends; every table is sorted,
// filtered and paged on the server, so the page only holds what it shows.
"use strict";

const VIEWS = ["overview", "operators", "kernels", "modules", "roofline", "memory", "critical_path", "distributed", "diff", "timeline"];
const S = { runs: [], run: null, worker: null, step: "", view: "overview", other_run: "", other_worker: "",
            start_ms: "", end_ms: "", perfetto: false, full_names: false };
const $ = (sel, root = document) => root.querySelector(sel);
let pollTimer = null;
let viewToken = 0;
const SMALL_TABLE = 10;
const MIN_FIGURE_PX = 320;  // rows up to which a table shows no filter box

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v; else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (v !== null && v !== undefined) e.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

function fmt(v) {
  if (v === null || v === undefined) return "-";
  if (typeof v === "number") return Number.isInteger(v) ? v.toLocaleString("en-US") : v.toLocaleString("en-US", { maximumFractionDigits: 3 });
  return String(v);
}

function baseParams(extra = {}) {
  const p = new URLSearchParams({ run: S.run ?? "", worker: S.worker ?? "" });
  if (S.step !== "") p.set("step", S.step);
  if (S.full_names) p.set("full_names", "1");  // kernel cells: the recorded name, not the short form
  if (S.view === "distributed") p.set("ranks", "all");
  if (S.view === "diff" && S.other_run && S.other_worker) { p.set("other_run", S.other_run); p.set("other_worker", S.other_worker); }
  if (S.view === "memory") { if (S.start_ms !== "") p.set("start_ms", S.start_ms); if (S.end_ms !== "") p.set("end_ms", S.end_ms); }
  for (const [k, v] of Object.entries(extra)) if (v !== "" && v !== null && v !== undefined) p.set(k, v);
  return p;
}

async function getJSON(url) {
  const r = await fetch(url);
  let body;
  try { body = await r.json(); } catch (e) { body = { error: `${r.status} ${r.statusText}` }; }
  return { status: r.status, body };
}

// ---- left panel ---------------------------------------------------------------
async function loadRuns() {
  const { body } = await getJSON("/api/runs");
  if (body.error) { $("#content").replaceChildren(el("p", { class: "error" }, body.error)); return; }
  S.runs = body.runs || [];
  S.perfetto = !!body.perfetto;
  const runSel = $("#run");
  runSel.replaceChildren(...S.runs.map(r => el("option", { value: r.run }, r.run)));
  if (!S.runs.length) { $("#content").replaceChildren(el("p", { class: "note warn" }, `No traces found under ${body.logdir}.`)); return; }
  followHash();
}

// The address's #run=..&worker=..&view=.. picks what is shown, so a view can be linked to.
function followHash() {
  const hash = new URLSearchParams(location.hash.slice(1));
  S.run = S.runs.some(r => r.run === hash.get("run")) ? hash.get("run") : S.runs[0].run;
  $("#run").value = S.run;
  fillWorkers(hash.get("worker"));
  if (VIEWS.includes(hash.get("view"))) S.view = hash.get("view");
  S.step = ""; S.start_ms = ""; S.end_ms = "";
  drawViewList();
  loadView();
}

function workersOf(run) { return (S.runs.find(r => r.run === run) || { workers: [] }).workers; }

function fillWorkers(wanted) {
  const ws = workersOf(S.run);
  $("#worker").replaceChildren(...ws.map(w => el("option", { value: w.id },
    (w.rank !== null ? `rank ${w.rank}: ` : "") + w.worker + (w.span ? ` (${w.span})` : ""))));
  S.worker = ws.some(w => w.id === wanted) ? wanted : (ws[0] ? ws[0].id : null);
  $("#worker").value = S.worker;
}

function fillSteps(steps) {
  const sel = $("#step");
  const have = [...sel.options].map(o => o.value).join(",");
  const want = ["", ...steps.map(String)].join(",");
  if (have !== want) {
    sel.replaceChildren(el("option", { value: "" }, "all steps"), ...steps.map(s => el("option", { value: s }, `step ${s}`)));
    if (!steps.map(String).includes(S.step)) S.step = "";
  }
  sel.value = S.step;
}

function drawViewList() {
  $("#views").replaceChildren(...VIEWS.map(v => el("li", { class: v === S.view ? "active" : "", "data-view": v,
    onclick: () => { S.view = v; drawViewList(); loadView(); } }, v[0].toUpperCase() + v.slice(1).replace("_", " "))));
}

function remember() {
  history.replaceState(null, "", "#" + new URLSearchParams({ run: S.run ?? "", worker: S.worker ?? "", view: S.view }));
}

// ---- views ----------------------------------------------------------------------
async function loadView() {
  clearTimeout(pollTimer);
  const token = ++viewToken;
  remember();
  const content = $("#content");
  delete content.dataset.key;  // set again once this view's final state is drawn
  const key = `${S.run}|${S.worker}|${S.view}`;
  const { status, body } = await getJSON(`/api/view/${S.view}?${baseParams()}`);
  if (token !== viewToken) return;
  const st = $("#worker-status");
  if (status === 202) {
    const what = body.waiting_for ? `waiting for ${body.waiting_for.length} rank(s), ${body.loaded} loaded` :
      body.state === "loading" ? `loading… ${fmt(body.elapsed_s || 0)} s` + (body.bytes ? ` (${(body.bytes / 2 ** 20).toFixed(1)} MiB file)` : "") :
      `${body.state}…`;
    st.textContent = what;
    content.replaceChildren(el("p", { class: "note loading" }, `Loading ${S.worker}: ${what}`));
    pollTimer = setTimeout(loadView, 400);
    return;
  }
  if (body.state === "error" || body.error) {
    st.textContent = "error";
    content.replaceChildren(el("p", { class: "error" }, body.error));
    content.dataset.key = key;
    return;
  }
  st.textContent = "ready";
  fillSteps(body.steps || []);
  const root = el("div", { class: "view", "data-view": S.view });
  for (const b of body.blocks) root.append(renderBlock(b));
  content.replaceChildren(root);
  for (const f of root.querySelectorAll(".figure")) drawFigure(f);
  content.dataset.key = key;
}

function renderBlock(b) {
  switch (b.type) {
    case "cards":
      return el("div", { class: "block cards" }, ...b.items.map(([k, v]) =>
        el("div", { class: "card" }, el("div", { class: "label" }, k), el("div", { class: "value" }, v))));
    case "figure": {
      const d = el("div", { class: "block figure" });
      d._figure = b.figure; d._rangeFor = b.range_for || null;
      return d;
    }
    case "table": return tableBlock(b);
    case "text": return el("p", { class: `block note ${b.kind}` }, b.text);
    case "row": return el("div", { class: "block row" }, ...b.blocks.map(renderBlock));
    case "image": return el("div", { class: "block" }, el("h3", {}, b.title),
      el("img", { class: "flow", alt: b.title, src: `/api/${b.src}?${baseParams()}` }));
    case "link":
      if (b.needs === "perfetto" && !S.perfetto) return el("p", { class: "block note" }, "Perfetto export: not available in this installation.");
      return el("p", { class: "block" }, el("a", { href: `/api/${b.href}?${baseParams()}`, download: "" }, b.text));
    case "range": return rangeBlock(b);
    case "findings": return findingsBlock(b);
    case "diff-picker": return diffPicker();
    default: return el("p", { class: "error" }, `unknown block ${b.type}`);
  }
}

// A trace holds data where any of its data arrays has an element (plain or plotly's typed {bdata}).
function hasData(trace) {
  return ["x", "y", "z", "values", "labels", "ids", "r"].some(k => {
    const v = trace[k];
    return v !== undefined && v !== null && (Array.isArray(v) ? v.length > 0 : !!(v.bdata && v.bdata.length));
  });
}

function titleOf(fig) {
  const t = fig.layout && fig.layout.title;
  return typeof t === "string" ? t : (t && t.text) || "Chart";
}

function drawFigure(div) {
  const fig = div._figure;
  if (!(fig.data || []).some(hasData)) {  // an empty chart says nothing: one line saying why instead
    const why = ((fig.layout && fig.layout.annotations) || []).map(a => a.text).filter(Boolean).join("; ");
    div.replaceWith(el("p", { class: "block note" }, `${titleOf(fig)}: ${why || "nothing to draw"}.`));
    return;
  }
  const pie = fig.data.length === 1 && fig.data[0].type === "pie" ? fig.data[0] : null;
  if (pie && Array.isArray(pie.labels) && pie.labels.length === 1) {  // a one-slice pie is a sentence
    div.replaceWith(el("p", { class: "block note" }, `${titleOf(fig)}: all of it is ${pie.labels[0]}.`));
    return;
  }
  // a figure that sizes itself (bars per rank, per op) takes exactly its height, not the placeholder's
  // but never so short that its plot area shrinks to a strip under its title and axis
  if (fig.layout && fig.layout.height) { fig.layout.height = Math.max(fig.layout.height, MIN_FIGURE_PX); div.style.minHeight = `${fig.layout.height}px`; }
  Plotly.newPlot(div, fig.data, fig.layout, { responsive: true, displaylogo: false });
  if (div._rangeFor) {
    div.on("plotly_relayout", ev => {
      let lo = ev["xaxis.range[0]"], hi = ev["xaxis.range[1]"];
      if (ev["xaxis.range"]) [lo, hi] = ev["xaxis.range"];
      if (ev["xaxis.autorange"]) { lo = ""; hi = ""; }
      if (lo === undefined && hi === undefined) return;
      setRange(lo === "" ? "" : Number(lo).toFixed(3), hi === "" ? "" : Number(hi).toFixed(3), div._rangeFor);
    });
  }
}

// ---- recommendations: one card each, the whole evidence and change ----------------
function findingsBlock(b) {
  const box = el("div", { class: "block findings" }, el("h3", {}, b.title));
  if (!b.items.length) { box.append(el("p", { class: "note" }, b.empty)); return box; }
  b.items.forEach((f, i) => box.append(el("div", { class: "finding" },
    el("h4", {}, `${i + 1}. ${f.title} `, el("span", { class: "saving" }, f.saving)),
    el("p", { class: "evidence" }, f.evidence),
    el("p", { class: "change" }, el("b", {}, "Change: "), f.change),
    el("p", { class: "estimate" }, `Estimate: ${f.estimate}`))));
  return box;
}

// ---- memory range ------------------------------------------------------------
function setRange(lo, hi, sources) {
  S.start_ms = lo; S.end_ms = hi;
  const a = $("#range-start"), b = $("#range-end");
  if (a) a.value = lo; if (b) b.value = hi;
  for (const src of sources) { const t = document.querySelector(`.table-block[data-source="${src}"]`); if (t) t._reload(0); }
  const img = $("img.flow"); if (img) img.src = `/api/memory_flow.svg?${baseParams()}`;
}

function rangeBlock(b) {
  const lo = el("input", { id: "range-start", type: "number", step: "any", placeholder: "start ms", value: S.start_ms });
  const hi = el("input", { id: "range-end", type: "number", step: "any", placeholder: "end ms", value: S.end_ms });
  const apply = el("button", { id: "range-apply", onclick: () => setRange(lo.value, hi.value, b.for) }, "Apply range");
  const clear = el("button", { onclick: () => setRange("", "", b.for) }, "Whole trace");
  return el("div", { class: "block controls range" }, "Range (ms from the first memory event):", lo, hi, apply, clear);
}

// ---- diff picker ----------------------------------------------------------------
function diffPicker() {
  const runSel = el("select", { id: "other-run" }, el("option", { value: "" }, "(choose a run)"),
    ...S.runs.map(r => el("option", { value: r.run }, r.run)));
  const wSel = el("select", { id: "other-worker" });
  const fillW = () => {
    wSel.replaceChildren(...workersOf(runSel.value).map(w => el("option", { value: w.id }, w.worker + (w.rank !== null ? ` (rank ${w.rank})` : ""))));
  };
  runSel.value = S.other_run; fillW(); if (S.other_worker) wSel.value = S.other_worker;
  runSel.addEventListener("change", fillW);
  const go = el("button", { id: "diff-go", onclick: () => { S.other_run = runSel.value; S.other_worker = wSel.value; loadView(); } }, "Compare");
  return el("div", { class: "block controls diff-picker" }, `Baseline: ${S.run} / ${S.worker}. Experiment:`, runSel, wSel, go);
}

// ---- tables -------------------------------------------------------------------------
function tableBlock(b, extra = {}) {
  const t = { sort: b.sort, desc: b.descending === false ? "0" : "1", q: "", offset: 0, limit: 50, choices: {} };
  for (const [k, vals] of Object.entries(b.choices || {})) t.choices[k] = vals[0];
  const head = el("thead"), body = el("tbody"), pager = el("div", { class: "pager" });
  const block = el("div", { class: "block table-block", "data-source": b.source });
  const details = el("div", { class: "details" });
  const controls = el("div", { class: "controls" });
  for (const [k, vals] of Object.entries(b.choices || {})) {
    const sel = el("select", { "data-choice": k, onchange: e => { t.choices[k] = e.target.value; t.sort = null; details.replaceChildren(); reload(0); } },
      ...vals.map(v => el("option", { value: v }, v)));
    controls.append(el("label", {}, `${k} `, sel));
  }
  let timer = null;
  const search = el("input", { type: "search", class: "filter", placeholder: "filter rows…",
    oninput: e => { clearTimeout(timer); timer = setTimeout(() => { t.q = e.target.value; reload(0); }, 200); } });
  controls.append(search);
  const scroll = el("div", { class: "scroll" }, el("table", {}, head, body));
  const empty = el("p", { class: "note empty", hidden: "" }, b.empty || "No rows in this trace.");
  block.append(el("h3", {}, b.title), controls, scroll, empty, pager, details);

  async function reload(offset) {
    t.offset = offset;
    const p = baseParams({ ...extra, ...t.choices, sort: t.sort || "", desc: t.desc, q: t.q, offset: t.offset, limit: t.limit });
    block.dataset.state = "loading";
    const { status, body: page } = await getJSON(`/api/table/${b.source}?${p}`);
    if (status !== 200 || page.error) { body.replaceChildren(el("tr", {}, el("td", { class: "error" }, page.error || `status ${status}`))); block.dataset.state = "error"; return; }
    head.replaceChildren(el("tr", {}, ...page.columns.map(c => {
      const cls = (c.name === page.sort ? `sorted ${page.descending ? "desc" : "asc"}` : "") + (c.numeric ? " num" : "");
      return el("th", { class: cls, "data-col": c.name, onclick: () => {
        if (t.sort === c.name) t.desc = t.desc === "1" ? "0" : "1"; else { t.sort = c.name; t.desc = c.numeric ? "1" : "0"; }
        reload(0);
      } }, c.label || c.name);
    })));
    // a table with nothing in it is one line saying so; a small one needs no filter box or pager
    const small = page.total <= SMALL_TABLE;
    search.hidden = small; pager.hidden = page.total <= page.limit;
    // kept in place (hidden), not removed: a later range or grouping may bring rows back
    scroll.hidden = page.total === 0; empty.hidden = page.total !== 0;
    body.replaceChildren(...page.rows.map((row, r) => {
      const shown = page.text ? page.text[r] : row.map(fmt);
      const tr = el("tr", { class: b.detail ? "clickable" : "" }, ...row.map((v, i) =>
        el("td", { class: page.columns[i].numeric ? "num" : "", title: v === null ? "" : String(v) }, shown[i])));
      if (b.detail) tr.addEventListener("click", () => {
        body.querySelectorAll("tr.selected").forEach(r => r.classList.remove("selected"));
        tr.classList.add("selected");
        details.replaceChildren(...b.detail.map(d => tableBlock({ source: d.source, title: `${d.title} ${row[0]}`, sort: null }, { key: row[0] })));
      });
      return tr;
    }));
    const last = Math.min(page.offset + page.rows.length, page.matched);
    pager.replaceChildren(
      el("button", { disabled: page.offset === 0 ? "" : null, onclick: () => reload(Math.max(0, page.offset - page.limit)) }, "‹ prev"),
      el("span", { class: "count" }, `rows ${page.matched ? page.offset + 1 : 0}–${last} of ${page.matched}` + (page.matched !== page.total ? ` (filtered from ${page.total})` : "")),
      el("button", { disabled: last >= page.matched ? "" : null, onclick: () => reload(page.offset + page.limit) }, "next ›"));
    block.dataset.state = "ready";
  }
  block._reload = reload;
  reload(0);
  return block;
}

// ---- wiring -------------------------------------------------------------------------
document.addEventListener("DOMContentLoaded", () => {
  $("#run").addEventListener("change", e => { S.run = e.target.value; fillWorkers(null); S.step = ""; loadView(); });
  $("#worker").addEventListener("change", e => { S.worker = e.target.value; S.step = ""; loadView(); });
  $("#step").addEventListener("change", e => { S.step = e.target.value; loadView(); });
  $("#full-names").addEventListener("change", e => { S.full_names = e.target.checked; loadView(); });
  setInterval(async () => {  // new runs appear without a restart
    const { body } = await getJSON("/api/runs");
    if (body.error) return;  // the logdir is gone for now: keep what is shown
    const names = (body.runs || []).map(r => r.run).join("\n");
    if (names !== S.runs.map(r => r.run).join("\n")) {
      S.runs = body.runs; const keep = S.run;
      $("#run").replaceChildren(...S.runs.map(r => el("option", { value: r.run }, r.run)));
      $("#run").value = keep;
    }
  }, 10000);
  window.addEventListener("hashchange", () => { if (S.runs.length) followHash(); });
  loadRuns();
});
