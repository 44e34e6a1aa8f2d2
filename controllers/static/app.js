// The Harmonics live view: reads the JSON API (/api/v1/...) and draws it with uPlot.
// Plain JavaScript, no build step. Refreshes every REFRESH_MS while the run is live.
"use strict";

const REFRESH_MS = 2000;
const MAX_TIMELINE_EPOCHS = 240;
const MAX_TIMELINE_JOBS = 40;
const MAX_PLOTTED_JOBS = 24;
const MAX_LINK_CHARTS = 8;
const COLORS = ["#2166ac", "#d6604d", "#1a9850", "#762a83", "#e08214", "#01665e", "#c51b7d",
                "#4d4d4d", "#8c510a", "#35978f"];

const state = { epochs: [], notes: [], plots: {}, timer: null, live: false };

function $(id) { return document.getElementById(id); }
function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}
function fmt(x, digits) {
  if (x === null || x === undefined || Number.isNaN(x)) return "–";
  return Number(x).toFixed(digits === undefined ? 4 : digits);
}
function notAvailable(node, why) {
  node.textContent = "";
  node.appendChild(el("span", { class: "na", title: why || "" }, "not available"));
}

async function getJSON(path) {
  const r = await fetch(path, { cache: "no-store" });
  if (!r.ok) throw new Error(path + ": HTTP " + r.status);
  return r.json();
}

// ------------------------------------------------------------------ charts
// series: [{label, values, color, points}] aligned on xs
function plot(container, key, xs, series, opts) {
  const labels = series.map(s => s.label).join("|");
  const width = Math.max(320, Math.min(container.clientWidth || 900, opts.width || 900));
  const data = [xs].concat(series.map(s => s.values));
  let points = 0;
  for (const s of series) for (const v of s.values) if (v !== null && v !== undefined) points++;
  let p = state.plots[key];
  if (p && p.labels === labels && p.width === width) {
    p.u.setData(data);
  } else {
    if (p) p.u.destroy();
    let holder = container.querySelector('[data-chart="' + key + '"]');
    if (!holder) {
      holder = el("div", { class: "chart", "data-chart": key });
      container.appendChild(holder);
    }
    holder.textContent = "";
    const u = new uPlot({
      title: opts.title || "", width: width, height: opts.height || 220,
      scales: { x: { time: false } },
      axes: [{ label: opts.xlabel }, { label: opts.ylabel, size: 60 }],
      series: [{ label: opts.xlabel }].concat(series.map((s, i) => ({
        label: s.label, stroke: s.color || COLORS[i % COLORS.length], width: s.points ? 0 : 1.5,
        spanGaps: !s.points,
        points: { show: s.points ? true : undefined, size: s.points ? 8 : 4,
                  fill: s.color || COLORS[i % COLORS.length] },
      }))),
    }, data, holder);
    p = state.plots[key] = { u: u, labels: labels, width: width, holder: holder };
  }
  p.holder.setAttribute("data-points", String(points));
  p.holder.setAttribute("data-series", String(series.length));
}

function align(seriesList) {
  // [{t: [...], v: [...]}] -> {xs, columns}: the union of x values, nulls where missing
  const set = new Set();
  for (const s of seriesList) for (const t of s.t) if (t !== null) set.add(t);
  const xs = Array.from(set).sort((a, b) => a - b);
  const index = new Map(xs.map((x, i) => [x, i]));
  const columns = seriesList.map(s => {
    const col = new Array(xs.length).fill(null);
    s.t.forEach((t, i) => { if (t !== null) col[index.get(t)] = s.v[i]; });
    return col;
  });
  return { xs: xs, columns: columns };
}

// ------------------------------------------------------------------ sections
function drawStatus(st) {
  $("run-title").textContent = (st.scenario || "run") + " · " + (st.policy || "?");
  const bits = [st.kind + " run", "status " + st.status];
  if (st.kind === "emulated") bits.push("time ×" + st.time_scale + ", bandwidth ÷" + st.bandwidth_scale);
  if (st.controller) {
    const c = st.controller;
    bits.push("epoch " + (c.epoch === null ? "–" : c.epoch),
              (c.switches || []).length + "/" + c.expected_switches + " switches",
              c.active_flows + " flows");
    if ((c.down_links || []).length) bits.push("links down: " + c.down_links.join(", "));
  }
  $("run-meta").textContent = bits.join(" · ");
  state.live = !!st.live && st.status === "running";
  const conn = $("conn");
  conn.className = "conn " + (st.live ? "live" : "ended");
  conn.textContent = st.live ? "live · updated " + new Date().toLocaleTimeString()
                             : "finished run (from its files)";
}

function currentClass(job) {
  for (let i = state.epochs.length - 1; i >= 0; i--) {
    const d = state.epochs[i].decisions[job];
    if (d) return d.class;
  }
  return null;
}

function drawJobs(js) {
  const body = $("jobs").querySelector("tbody");
  body.textContent = "";
  for (const j of js.jobs) {
    const tr = el("tr", { class: "job", "data-job": j.name });
    const n = j.iterations.length;
    const mean = n ? j.iter_s.reduce((a, b) => a + b, 0) / n : null;
    const s = j.summary || {};
    tr.appendChild(el("td", {}, j.name));
    tr.appendChild(el("td", { class: "num" }, n + (j.total_iterations ? " / " + j.total_iterations : "")));
    tr.appendChild(el("td", { class: "num" }, fmt(s.mean_iter_s !== undefined ? s.mean_iter_s : mean)));
    tr.appendChild(el("td", { class: "num" }, fmt(n ? j.iter_s[n - 1] : null)));
    tr.appendChild(el("td", { class: "num" }, currentClass(j.name) ?? "–"));
    tr.appendChild(el("td", { class: "num" }, fmt(s.slowdown_vs_isolated, 3)));
    tr.appendChild(el("td", { class: "num" }, "phase_error" in s ? fmt(s.phase_error, 4) : "n/a"));
    tr.appendChild(el("td", { class: "num" }, "corrections" in s ? (s.corrections ?? "–") : "n/a"));
    body.appendChild(tr);
  }
  const shown = js.jobs.filter(j => j.iterations.length).slice(0, MAX_PLOTTED_JOBS);
  const box = $("chart-iter");
  if (!shown.length) { notAvailable(box, "no iteration logged yet"); delete state.plots.iter; return; }
  if (box.querySelector(".na")) box.textContent = "";
  const a = align(shown.map(j => ({ t: j.iterations, v: j.iter_s })));
  plot(box, "iter", a.xs, shown.map((j, i) => ({ label: j.name, values: a.columns[i] })),
       { xlabel: "iteration", ylabel: "iteration time (s)" });
}

function describe(d) {
  const caps = Object.entries(d.caps_gbps || {}).map(([l, g]) => l + " ≤ " + fmt(g, 1) + " Gb/s");
  const pins = Object.entries(d.flow_spines || {}).map(([p, s]) => p + " via spine " + s);
  return {
    cap: caps.length ? caps.join(", ") : "none",
    path: d.spine !== null && d.spine !== undefined ? "spine " + d.spine + (pins.length ? "; " + pins.join(", ") : "")
          : (pins.length ? pins.join(", ") : "ECMP"),
  };
}

function drawTimeline() {
  const box = $("timeline");
  box.textContent = "";
  const decided = state.epochs.filter(e => Object.keys(e.decisions).length);
  const eps = decided.slice(-MAX_TIMELINE_EPOCHS);
  if (!eps.length) { notAvailable(box, "no decision recorded yet"); return; }
  const jobs = [];
  for (const e of eps) for (const j of Object.keys(e.decisions)) if (!jobs.includes(j)) jobs.push(j);
  jobs.sort();
  for (const job of jobs.slice(0, MAX_TIMELINE_JOBS)) {
    const row = el("div", { class: "tl-row" });
    row.appendChild(el("span", { class: "tl-job" }, job));
    for (const e of eps) {
      const d = e.decisions[job];
      if (!d) { row.appendChild(el("span", { class: "decision none", title: "epoch " + e.epoch + ": no decision" })); continue; }
      const x = describe(d);
      const mark = d.shift_s > 0 ? "▸" : (Object.keys(d.caps_gbps || {}).length ? "▾" : (d.spine !== null ? "◆" : ""));
      const title = "epoch " + e.epoch + " at " + fmt(e.time_s, 3) + " s — " + job + ": class " + d.class +
                    ", shift " + fmt(d.shift_s, 4) + " s, cap " + x.cap + ", path " + x.path +
                    "\nreason: " + (d.reason || "(none given)");
      row.appendChild(el("span", { class: "decision c" + Math.min(7, d.class ?? 0), "data-epoch": e.epoch,
                                   "data-job": job, "data-reason": d.reason || "", title: title }, mark));
    }
    box.appendChild(row);
  }
  if (jobs.length > MAX_TIMELINE_JOBS) box.appendChild(el("div", { class: "hint" }, "… and " + (jobs.length - MAX_TIMELINE_JOBS) + " more jobs"));
  if (decided.length > eps.length) box.appendChild(el("div", { class: "hint" }, "last " + eps.length + " of " + decided.length + " epochs with decisions"));
}

function drawChanges() {
  const body = $("changes").querySelector("tbody");
  body.textContent = "";
  const last = {}, rows = [];
  for (const e of state.epochs) {
    for (const [job, d] of Object.entries(e.decisions)) {
      const key = JSON.stringify([d.class, d.shift_s, d.caps_gbps, d.spine, d.flow_spines, d.reason]);
      if (last[job] !== key) rows.push([e, job, d]);
      last[job] = key;
    }
  }
  for (const [e, job, d] of rows.slice(-100).reverse()) {
    const x = describe(d);
    const tr = el("tr", { class: "change", "data-job": job });
    [e.epoch, fmt(e.time_s, 3), job, d.class, fmt(d.shift_s, 4), x.cap, x.path].forEach(v => tr.appendChild(el("td", {}, v)));
    tr.appendChild(el("td", { class: "reason" }, d.reason || "(none given)"));
    body.appendChild(tr);
  }
  if (!rows.length) { const tr = el("tr"); tr.appendChild(el("td", { colspan: 8, class: "na" }, "not available")); body.appendChild(tr); }
}

function drawThroughput(tp) {
  const box = $("throughput");
  $("throughput-source").textContent = tp.available ? tp.source + " · " + tp.units : "";
  if (!tp.available || !tp.series.length) { notAvailable(box, tp.reason); state.plots = Object.fromEntries(Object.entries(state.plots).filter(([k]) => !k.startsWith("tp:"))); return; }
  if (box.querySelector(".na") || !box.classList.contains("charts")) { box.textContent = ""; box.classList.add("charts"); }
  const byLink = {};
  for (const s of tp.series) (byLink[s.link] = byLink[s.link] || []).push(s);
  const total = l => byLink[l].reduce((a, s) => a + s.gbps.reduce((x, y) => x + (y || 0), 0), 0);
  // the links jobs share (ToR-spine) first, then the busiest
  const shared = l => /(^|>)(sp|spine)/.test(l) ? 1 : 0;
  const links = Object.keys(byLink).sort((a, b) => shared(b) - shared(a) || total(b) - total(a))
    .slice(0, MAX_LINK_CHARTS).sort((a, b) => shared(b) - shared(a) || a.localeCompare(b));
  for (const link of links) {
    const ss = byLink[link].sort((a, b) => a.class.localeCompare(b.class));
    const a = align(ss.map(s => ({ t: s.t, v: s.gbps })));
    plot(box, "tp:" + link, a.xs, ss.map((s, i) => ({
      label: s.class === "all" ? "all" : (s.class === "none" ? "no class" : "class " + s.class),
      values: a.columns[i], color: COLORS[(s.class === "none" ? 7 : Number(s.class) || i) % COLORS.length] })),
      { title: link, xlabel: "time (s)", ylabel: "Gb/s", width: 440, height: 180 });
  }
}

function drawPhase(ph) {
  const box = $("phase");
  if (!ph.available) { notAvailable(box, ph.reason); $("phase-source").textContent = ""; delete state.plots.phase; return; }
  $("phase-source").textContent = ph.units + (ph.corrections.length ? " · " + ph.corrections.length + " corrections (points)" : "");
  if (box.querySelector(".na")) box.textContent = "";
  const jobs = Object.keys(ph.jobs).sort();
  const list = jobs.map(j => ({ t: ph.jobs[j].t, v: ph.jobs[j].error }));
  const corr = {};
  for (const c of ph.corrections) (corr[c.job] = corr[c.job] || { t: [], v: [] }) && (corr[c.job].t.push(c.time_s), corr[c.job].v.push(c.error));
  const cjobs = Object.keys(corr).sort();
  const a = align(list.concat(cjobs.map(j => corr[j])));
  if (!a.xs.length) { notAvailable(box, "no phase record has a time"); return; }
  const series = jobs.map((j, i) => ({ label: j + " error" + (ph.jobs[j].ref ? " (vs " + ph.jobs[j].ref + ")" : ""), values: a.columns[i], color: COLORS[i % COLORS.length] }))
    .concat(cjobs.map((j, i) => ({ label: j + " correction", values: a.columns[jobs.length + i], points: true,
                                   color: COLORS[(jobs.indexOf(j) >= 0 ? jobs.indexOf(j) : i) % COLORS.length] })));
  plot(box, "phase", a.xs, series, { xlabel: "time (s)", ylabel: "phase error" });
}

function drawFidelity(f) {
  const box = $("fidelity");
  if (!f.available) { box.className = "fidelity"; notAvailable(box, f.reason); return; }
  const verdict = String(f.verdict || "no verdict");
  box.className = "fidelity " + (verdict.startsWith("faithful") ? "faithful" : (verdict.startsWith("suspect") ? "suspect" : ""));
  box.textContent = "";
  box.appendChild(el("strong", {}, verdict));
  const figs = Object.entries(f).filter(([k, v]) => k !== "verdict" && k !== "available" && (typeof v !== "object" || v === null));
  if (figs.length) box.appendChild(el("span", {}, " — " + figs.map(([k, v]) => k + " " + (typeof v === "number" ? fmt(v, 4) : v)).join(", ")));
}

function drawNotes() {
  const ul = $("notes");
  ul.textContent = "";
  if (!state.notes.length) { ul.appendChild(el("li", { class: "na" }, "none")); return; }
  for (const n of state.notes) ul.appendChild(el("li", {}, (n.time_s === null ? "" : fmt(n.time_s, 2) + " s: ") + n.text));
}

// ------------------------------------------------------------------ refresh
async function refresh() {
  try {
    const st = await getJSON("/api/v1/status");
    drawStatus(st);
    const ep = await getJSON("/api/v1/epochs?since=" + state.epochs.length);
    if (ep.total < state.epochs.length) { state.epochs = []; return refresh(); }
    state.epochs = state.epochs.concat(ep.epochs);
    state.notes = ep.notes || [];
    const [js, tp, ph, fi] = await Promise.all(["jobs", "throughput", "phase", "fidelity"].map(s => getJSON("/api/v1/" + s)));
    drawJobs(js);
    drawTimeline();
    drawChanges();
    drawThroughput(tp);
    drawPhase(ph);
    drawFidelity(fi);
    drawNotes();
    document.body.setAttribute("data-loaded", "1");
  } catch (err) {
    const conn = $("conn");
    conn.className = "conn ended";
    conn.textContent = state.live ? "disconnected: the run has ended (or its controller stopped)" : "error: " + err.message;
    state.live = false;
  }
  if (state.live) state.timer = setTimeout(refresh, REFRESH_MS);
}

refresh();
