// muster dashboard: a read-only view over the run store's JSON API. No framework, no network beyond this server.
"use strict";

const PALETTE = ["#0b63c5", "#d9480f", "#2b8a3e", "#862e9c", "#c2255c", "#1098ad", "#5c940d", "#e67700"];
const POLL_MS = 1500;
const TOKEN = new URLSearchParams(location.search).get("token");
const charts = new Map();   // id -> {plot, key}
let timer = null;
let view = 0;               // bumps on navigation, so a stale refresh never draws over a new page

function esc(s) {
  return String(s ?? "").replace(/[&<>"']/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
}
async function api(path) {
  const r = await fetch(path, {headers: TOKEN ? {Authorization: "Bearer " + TOKEN} : {}, cache: "no-store"});
  if (!r.ok) throw new Error(path + ": " + r.status + " " + (await r.text()));
  return r.json();
}
const when = t => t ? new Date(t * 1000).toLocaleString() : "-";
const secs = s => s == null ? "-" : s < 1 ? (s * 1000).toFixed(1) + " ms" : s.toFixed(2) + " s";
const mb = b => b == null ? "-" : (b / 2 ** 20).toFixed(0) + " MiB";
const num = v => typeof v === "number" ? (Number.isInteger(v) ? String(v) : v.toPrecision(4)) : esc(v);
const badge = (s, cls) => `<span class="badge ${cls || "s-" + esc(s)}">${esc(s)}</span>`;
const duration = r => { const end = r.ended_at || (r.status === "RUNNING" ? Date.now() / 1000 : r.updated_at);
                        return end && r.created_at ? secs(end - r.created_at) : "-"; };
const statusOf = r => r.stale ? badge("STALE", "s-STALE") + ' <span class="muted">driver gone</span>' : badge(r.status);
const metricsText = m => Object.entries(m || {}).slice(0, 4).map(([k, v]) => `${esc(k)}=${num(v)}`).join("  ");

function clearCharts() { for (const c of charts.values()) c.plot.destroy(); charts.clear(); }

// A scale range that stays readable when all values are equal (one point, or a flat zero line).
function pad(byX) {
  return (u, min, max) => {
    if (min == null || max == null) return [0, 1];
    if (min !== max) return byX ? [min, max] : [Math.min(0, min), max + (max - Math.min(0, min)) * 0.05];
    const d = byX || Math.abs(min) * 0.1 || 1;
    return [min - d, max + d];
  };
}

// One uPlot per id; redrawn in place when only the data changed.
function plot(id, title, xLabel, seriesNames, data, opts = {}) {
  const el = document.getElementById(id);
  if (!el) return;
  const key = seriesNames.join("|") + (opts.scatter ? "|s" : "");
  const old = charts.get(id);
  if (old && old.key === key) { old.plot.setData(data); return; }
  if (old) old.plot.destroy();
  el.innerHTML = "";
  const series = [{label: xLabel}].concat(seriesNames.map((name, i) => ({
    label: name, stroke: PALETTE[i % PALETTE.length], width: 1.5, spanGaps: true,
    ...(opts.scatter ? {paths: () => null, points: {show: true, size: 7, fill: PALETTE[i % PALETTE.length]}} : {}),
  })));
  const width = Math.max(el.clientWidth - 4, 300);
  const p = new uPlot({title, width, height: 200, series,
                       scales: {x: {time: false, range: pad(0.5)}, y: {range: pad(0)}},
                       axes: [{label: xLabel}, {}], legend: {live: true}}, data, el);
  charts.set(id, {plot: p, key});
}

// Rows of {x, rank, y} -> uPlot's aligned columns: one x column, one per rank (last value wins).
function byRank(rows, ranks) {
  const xs = [...new Set(rows.map(r => r.x))].sort((a, b) => a - b);
  const at = new Map(xs.map((x, i) => [x, i]));
  const cols = ranks.map(() => xs.map(() => null));
  for (const r of rows) { const k = ranks.indexOf(r.rank); if (k >= 0 && r.y != null) cols[k][at.get(r.x)] = r.y; }
  return [xs, ...cols];
}

// ---- pages ----------------------------------------------------------------------------------
async function runsPage(v) {
  const {root, runs} = await api("api/runs");
  if (v !== view) return false;
  const rows = runs.map(r => `<tr data-run="${r.id}">
      <td><a href="#/run/${r.id}">${esc(r.name)}</a></td><td>${statusOf(r)}</td>
      <td>${esc(r.experiment || "")}</td><td class="num">${r.num_workers ?? "-"}</td>
      <td class="num">${r.reports}</td><td class="num">${r.failures}</td><td>${when(r.created_at)}</td>
      <td class="num">${duration(r)}</td><td>${metricsText(r.last_metrics)}</td></tr>`).join("");
  document.getElementById("main").innerHTML = `<h1>Runs <span class="muted">in ${esc(root)}</span></h1>
    <table id="runs"><tr><th>name</th><th>status</th><th>experiment</th><th>workers</th><th>reports</th>
    <th>failures</th><th>started</th><th>duration</th><th>last metrics (rank 0)</th></tr>${rows ||
    '<tr><td colspan="9" class="muted">No runs recorded yet.</td></tr>'}</table>`;
  return runs.some(r => r.status === "RUNNING" && !r.stale);
}

async function runPage(v, id) {
  const [detail, rep, smp] = await Promise.all([api(`api/runs/${id}`), api(`api/runs/${id}/reports`),
                                                api(`api/runs/${id}/samples`)]);
  if (v !== view) return false;
  const {run, workers, checkpoints, events, attempts} = detail;
  const main = document.getElementById("main");
  if (!main.querySelector(`#run-${id}`)) {
    clearCharts();
    main.innerHTML = `<div id="run-${id}"><h1 id="run-title"></h1><div class="summary" id="summary"></div>
      <h2>Workers</h2><div id="workers"></div>
      <h2>Metrics <span class="muted">per rank, overlaid</span></h2><div class="grid" id="metric-charts"></div>
      <h2>Step time and data wait <span class="muted">per worker</span></h2><div class="grid" id="timing-charts">
        <div class="card" id="chart-step"></div><div class="card" id="chart-wait"></div></div>
      <h2>Resources <span class="muted">per worker</span></h2><div class="grid" id="resource-charts">
        <div class="card" id="chart-cpu"></div><div class="card" id="chart-rss"></div>
        <div class="card" id="chart-gpu"></div><div class="card" id="chart-gpumem"></div></div>
      <h2>Data <span class="muted">muster.data operators per worker, latest sample</span></h2><div class="grid" id="data-charts"><div class="card" id="chart-data-rate"></div></div><div id="data-ops"></div>
      <h2>Events</h2><ul class="events" id="events"></ul>
      <h2>Checkpoints</h2><div id="checkpoints"></div>
      <h2>Logs <select id="log-rank"><option value="">all ranks</option></select></h2>
      <pre class="logs" id="logs"></pre></div>`;
    main.querySelector("#log-rank").addEventListener("change", () => refreshLogs(id));
  }
  main.querySelector("#run-title").innerHTML = `${esc(run.name)} ${statusOf(run)}`;
  const best = checkpoints.length ? checkpoints[checkpoints.length - 1] : null;
  main.querySelector("#summary").innerHTML = [
    ["path", esc(run.path)], ["trainer", esc(run.trainer || "-")], ["workers", run.num_workers ?? "-"],
    ["attempts", attempts.length], ["failures", run.failures], ["reports", run.reports],
    ["started", when(run.created_at)], ["duration", duration(run)],
    ["latest checkpoint", best ? esc(best.path.split("/").pop()) : "-"],
    ...(run.experiment ? [["experiment", `<a href="#/experiment/${encodeURIComponent(run.experiment)}">${esc(run.experiment)}</a>`]] : []),
    ...(run.error ? [["error", esc(run.error)]] : []),
  ].map(([k, val]) => `<div><b>${k}</b>${val}</div>`).join("");

  main.querySelector("#workers").innerHTML = `<table><tr><th>rank</th><th>state</th><th>host</th><th>pid</th>
    <th>resources</th><th>step (median)</th><th>data wait</th><th>compute</th><th>data share</th><th>straggler</th>
    <th>CPU</th><th>RSS</th><th>GPU</th><th>GPU mem</th></tr>${workers.map(w => `<tr data-rank="${w.rank}">
    <td class="num">${w.rank}</td><td>${badge(w.state)}</td><td>${esc(w.host)}</td><td class="num">${w.pid}</td>
    <td>${esc(Object.entries(w.resources || {}).map(([k, x]) => k + "=" + x).join(" "))}</td>
    <td class="num">${secs(w.step_s)}</td><td class="num">${secs(w.data_wait_s)}</td><td class="num">${secs(w.compute_s)}</td>
    <td class="num">${w.data_share == null ? "-" : (100 * w.data_share).toFixed(0) + " %"}</td>
    <td class="straggler-cell">${w.straggler ? badge("STRAGGLER", "straggler") + " " + esc(w.reason) : ""}</td>
    <td class="num">${w.cpu_percent == null ? "-" : w.cpu_percent.toFixed(0) + " %"}</td><td class="num">${mb(w.rss_bytes)}</td>
    <td class="num">${w.gpu_util == null ? "-" : w.gpu_util.toFixed(0) + " %"}</td><td class="num">${mb(w.gpu_mem_bytes)}</td>
    </tr>`).join("")}</table>`;

  const reports = rep.reports;
  const ranks = [...new Set(reports.map(r => r.rank).concat(workers.map(w => w.rank)))].sort((a, b) => a - b);
  const names = ranks.map(r => "rank " + r);
  const charted = k => k !== "pid";  // a Tune result's process id: a number, not a metric
  const keys = [...new Set(reports.flatMap(r => Object.keys(r.metrics).filter(k => charted(k) && typeof r.metrics[k] === "number")))];
  const holder = main.querySelector("#metric-charts");
  for (const k of keys) {
    const cid = "metric-" + k.replace(/[^A-Za-z0-9_-]/g, "_");
    if (!document.getElementById(cid)) holder.insertAdjacentHTML("beforeend", `<div class="card metric-chart" id="${cid}"></div>`);
    plot(cid, k, "iteration", names, byRank(reports.filter(r => typeof r.metrics[k] === "number")
      .map(r => ({x: r.iteration, rank: r.rank, y: r.metrics[k]})), ranks));
  }
  if (!keys.length) holder.innerHTML = '<p class="muted">No numeric metrics reported yet.</p>';
  const timed = reports.filter(r => r.step_s != null);
  plot("chart-step", "step time (s)", "iteration", names, byRank(timed.map(r => ({x: r.iteration, rank: r.rank, y: r.step_s})), ranks));
  plot("chart-wait", "data wait per step (s)", "iteration", names, byRank(timed.map(r => ({x: r.iteration, rank: r.rank, y: r.data_wait_s})), ranks));
  const s = smp.samples;
  const t0 = run.created_at;   // resource charts: x is seconds since the run started
  const series = (field, scale) => byRank(s.map(r => ({x: Math.round((r.time - t0) * 10) / 10, rank: r.rank, y: r[field] == null ? null : r[field] * scale})), ranks);
  plot("chart-cpu", "CPU (%)", "seconds", names, series("cpu_percent", 1));
  plot("chart-rss", "memory RSS (MiB)", "seconds", names, series("rss_bytes", 1 / 2 ** 20));
  const gpu = s.some(r => r.gpu_util != null);
  for (const cid of ["chart-gpu", "chart-gpumem"]) document.getElementById(cid).style.display = gpu ? "" : "none";
  if (gpu) {
    plot("chart-gpu", "GPU utilisation (%)", "seconds", names, series("gpu_util", 1));
    plot("chart-gpumem", "GPU memory (MiB)", "seconds", names, series("gpu_mem_bytes", 1 / 2 ** 20));
  }

  main.querySelector("#events").innerHTML = events.map(e => `<li class="k-${esc(e.kind)}">${when(e.time)}  ${esc(e.kind.padEnd(8))} ${e.rank != null ? "rank " + e.rank + ": " : ""}${esc(e.message)}</li>`).join("");
  main.querySelector("#checkpoints").innerHTML = checkpoints.length ? `<table><tr><th>round</th><th>checkpoint</th>
    <th>committed</th><th>metrics</th></tr>${checkpoints.map(c => `<tr><td class="num">${c.round}</td>
    <td>${esc(c.path)}</td><td>${when(c.time)}</td><td>${metricsText(c.metrics)}</td></tr>`).join("")}</table>`
    : '<p class="muted">No checkpoint committed yet.</p>';
  const sel = main.querySelector("#log-rank");
  for (const r of ranks) if (!sel.querySelector(`option[value="${r}"]`)) sel.insertAdjacentHTML("beforeend", `<option value="${r}">rank ${r}</option>`);
  await refreshData(id, run.created_at);
  await refreshLogs(id);
  return run.status === "RUNNING" && !run.stale;
}

async function refreshData(id, t0) {
  const {latest: ops, samples} = await api(`api/runs/${id}/data?after=0`);
  const holder = document.getElementById("data-ops");
  if (!holder) return;
  document.getElementById("data-charts").style.display = ops.length ? "" : "none";
  const lead = samples.filter(r => r.rank === 0), names = [...new Set(lead.map(r => r.op))];
  if (ops.length) plot("chart-data-rate", "rows/s per operator (rank 0)", "seconds", names,
                       byRank(lead.map(r => ({x: Math.round((r.time - t0) * 10) / 10, rank: r.op, y: r.rows_per_s})), names));
  holder.innerHTML = ops.length ? `<table id="data-table"><tr><th>rank</th><th>pass</th><th>operator</th><th>rows in</th>
    <th>rows out</th><th>rows/s</th><th>in flight / budget</th><th>blocked on backpressure</th><th>actors</th><th>state</th></tr>
    ${ops.map(o => `<tr data-op="${esc(o.op)}" data-rank="${o.rank}"><td class="num">${o.rank}</td><td class="num">${o.execution}</td>
    <td>${esc(o.op)}</td><td class="num">${num(o.rows_in)}</td><td class="num">${num(o.rows_out)}</td>
    <td class="num">${o.rows_per_s == null ? "-" : Math.round(o.rows_per_s)}</td>
    <td class="num">${mb(o.bytes_in_flight)} / ${mb(o.budget_bytes)}</td><td class="num">${secs(o.blocked_s)}</td>
    <td class="num">${o.actors || "-"}</td><td>${o.done ? "done" : "running"}</td></tr>`).join("")}</table>`
    : '<p class="muted">No muster.data pipeline ran in this run\'s workers.</p>';
}

async function refreshLogs(id) {
  const rank = document.getElementById("log-rank").value;
  const {logs} = await api(`api/runs/${id}/logs?tail=500` + (rank === "" ? "" : "&rank=" + rank));
  const pre = document.getElementById("logs");
  const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
  pre.textContent = logs.map(l => `(rank ${l.rank}, pid=${l.pid}) ${l.line}`).join("\n") || "(no output yet)";
  if (atEnd) pre.scrollTop = pre.scrollHeight;
}

async function experimentsPage(v) {
  const {experiments} = await api("api/experiments");
  if (v !== view) return false;
  document.getElementById("main").innerHTML = `<h1>Tune experiments</h1><table id="experiments"><tr><th>experiment</th>
    <th>trials</th><th>running</th><th>finished</th><th>errored</th><th>started</th></tr>${experiments.map(e => `<tr>
    <td><a href="#/experiment/${encodeURIComponent(e.name)}">${esc(e.name)}</a></td><td class="num">${e.trials}</td>
    <td class="num">${e.running}</td><td class="num">${e.finished}</td><td class="num">${e.errored}</td>
    <td>${when(e.created_at)}</td></tr>`).join("") || '<tr><td colspan="6" class="muted">No Tune experiments recorded.</td></tr>'}</table>`;
  return experiments.some(e => e.running > 0);
}

async function experimentPage(v, name) {
  const exp = await api(`api/experiments/${encodeURIComponent(name)}`);
  if (v !== view) return false;
  const trials = exp.trials.slice().sort((a, b) => String(a.trial_id).localeCompare(String(b.trial_id)));
  const params = [...new Set(trials.flatMap(t => Object.keys(t.config || {})))];
  const metricKeys = [...new Set(trials.flatMap(t => Object.keys(t.last_metrics || {}).filter(k => typeof t.last_metrics[k] === "number")))];
  const main = document.getElementById("main");
  if (!main.querySelector("#experiment")) {
    clearCharts();
    main.innerHTML = `<div id="experiment"><h1>${esc(name)} <span class="muted">Tune experiment</span></h1>
      <div class="summary" id="exp-summary"></div><h2>Trials</h2><div id="trials"></div>
      <h2>Configs against <select id="exp-metric"></select> <span class="muted">x:</span> <select id="exp-param"></select></h2>
      <div class="card" id="chart-configs"></div></div>`;
    for (const id of ["exp-metric", "exp-param"]) main.querySelector("#" + id).addEventListener("change", () => render(view));
  }
  const fill = (id, values, preferred) => {
    const sel = main.querySelector("#" + id), cur = sel.value;
    sel.innerHTML = values.map(x => `<option>${esc(x)}</option>`).join("");
    sel.value = cur && values.includes(cur) ? cur : (values.includes(preferred) ? preferred : values[0] || "");
    return sel.value;
  };
  const metric = fill("exp-metric", metricKeys, exp.metric);
  const numericParams = params.filter(p => trials.some(t => typeof (t.config || {})[p] === "number"));
  const param = fill("exp-param", numericParams, numericParams[0]);
  const scored = trials.filter(t => typeof (t.last_metrics || {})[metric] === "number");
  const sign = exp.mode === "max" ? -1 : 1;
  const best = scored.length ? scored.reduce((a, b) => sign * b.last_metrics[metric] < sign * a.last_metrics[metric] ? b : a) : null;
  main.querySelector("#exp-summary").innerHTML = [["trials", trials.length], ["metric", esc(exp.metric || metric || "-")],
    ["mode", esc(exp.mode || "-")], ["running", trials.filter(t => t.status === "RUNNING").length],
    ["best", best ? `${esc(best.trial_id)} (${esc(metric)}=${num(best.last_metrics[metric])})` : "-"]]
    .map(([k, val]) => `<div><b>${k}</b>${val}</div>`).join("");
  main.querySelector("#trials").innerHTML = `<table id="trial-table"><tr><th>trial</th><th>run</th><th>status</th>
    ${params.map(p => `<th>${esc(p)}</th>`).join("")}<th>iterations</th>${metricKeys.map(k => `<th>${esc(k)}</th>`).join("")}</tr>
    ${trials.map(t => `<tr data-trial="${esc(t.trial_id)}"><td>${esc(t.trial_id)}</td><td><a href="#/run/${t.id}">${esc(t.name)}</a></td>
    <td>${statusOf(t)}${t === best ? ' <span class="badge s-FINISHED best">BEST</span>' : ""}</td>${params.map(p => `<td class="num">${num((t.config || {})[p])}</td>`).join("")}
    <td class="num">${t.reports}</td>${metricKeys.map(k => `<td class="num">${num((t.last_metrics || {})[k])}</td>`).join("")}</tr>`).join("")}</table>`;
  const pts = trials.filter(t => typeof (t.config || {})[param] === "number" && typeof (t.last_metrics || {})[metric] === "number")
    .map(t => [t.config[param], t.last_metrics[metric]]).sort((a, b) => a[0] - b[0]);
  plot("chart-configs", `${metric} against ${param}`, param, [metric], [pts.map(p => p[0]), pts.map(p => p[1])], {scatter: true});
  return trials.some(t => t.status === "RUNNING" && !t.stale);
}

// ---- Serve: deployments and their replicas (schema v2 tables) ------------------------------------
async function servePage(v) {
  const {deployments} = await api("api/serve");
  if (v !== view) return false;
  const ms = x => x == null ? "-" : num(x) + " ms";
  document.getElementById("main").innerHTML = `<h1>Serve deployments</h1><table id="serve-deps"><tr><th>app / deployment</th>
    <th>running</th><th>target</th><th>restarts</th><th>req/s</th><th>p50</th><th>p99</th><th>served</th><th>errors</th>
    <th>ongoing</th><th>tokens/s</th><th>TTFT p50</th><th>queue</th><th>last sample</th></tr>${deployments.map(d => { const m = d.last || {}; return `<tr data-dep="${esc(d.app + "/" + d.deployment)}">
    <td><a href="#/serve/${encodeURIComponent(d.app)}/${encodeURIComponent(d.deployment)}">${esc(d.app)} / ${esc(d.deployment)}</a></td>
    <td class="num">${d.running}</td><td class="num">${m.target ?? "-"}</td><td class="num">${m.restarts ?? "-"}</td>
    <td class="num">${num(m.requests_per_s)}</td><td class="num">${ms(m.p50_ms)}</td><td class="num">${ms(m.p99_ms)}</td>
    <td class="num">${num(m.served)}</td><td class="num">${num(m.errors)}</td><td class="num">${num(m.ongoing)}</td>
    <td class="num">${num(m.tokens_per_s)}</td><td class="num">${ms(m.ttft_p50_ms)}</td><td class="num">${num(m.queue_depth)}</td>
    <td>${when(m.time)}</td></tr>`; }).join("") || '<tr><td colspan="14" class="muted">No Serve deployments recorded.</td></tr>'}</table>`;
  return deployments.some(d => d.running > 0);
}

async function serveDeploymentPage(v, app, dep) {
  const base = `api/serve/${encodeURIComponent(app)}/${encodeURIComponent(dep)}`;
  const [detail, {metrics}] = await Promise.all([api(base), api(base + "/metrics")]);
  if (v !== view) return false;
  const main = document.getElementById("main");
  if (!main.querySelector("#serve-dep")) {
    clearCharts();
    main.innerHTML = `<div id="serve-dep"><h1 id="serve-title">${esc(app)} / ${esc(dep)} <span class="muted">Serve deployment</span></h1>
      <div class="card" id="chart-rate"></div><div class="card" id="chart-latency"></div><div class="card" id="chart-ongoing"></div>
      <div id="serve-llm" hidden><h2>LLM</h2><div class="card" id="chart-tokens"></div><div class="card" id="chart-ttft"></div>
      <div class="card" id="chart-queue"></div></div>
      <div id="serve-custom" hidden><h2>User metrics <span class="muted">serve.metrics, last sample</span></h2><div id="serve-custom-table"></div></div>
      <h2>Replicas</h2><div id="serve-replicas"></div><h2>Events</h2><ul id="serve-events"></ul>
      <h2>Logs <select id="log-replica"><option value="">all replicas</option></select></h2><pre id="serve-logs" class="logs"></pre></div>`;
    main.querySelector("#log-replica").addEventListener("change", () => render(view));
  }
  const t0 = metrics.length ? metrics[0].time : 0, xs = metrics.map(m => m.time - t0);
  plot("chart-rate", "requests / s", "s", ["requests/s", "errors (total)"], [xs, metrics.map(m => m.requests_per_s), metrics.map(m => m.errors)]);
  plot("chart-latency", "latency (ms)", "s", ["p50", "p99"], [xs, metrics.map(m => m.p50_ms), metrics.map(m => m.p99_ms)]);
  plot("chart-ongoing", "ongoing requests and replicas", "s", ["ongoing", "running replicas"], [xs, metrics.map(m => m.ongoing), metrics.map(m => m.running)]);
  if (metrics.some(m => m.completion_tokens != null)) {   // an LLM deployment (schema v3 columns)
    main.querySelector("#serve-llm").hidden = false;
    plot("chart-tokens", "output tokens / s", "s", ["tokens/s"], [xs, metrics.map(m => m.tokens_per_s)]);
    plot("chart-ttft", "time to first token (ms)", "s", ["p50", "p99"], [xs, metrics.map(m => m.ttft_p50_ms), metrics.map(m => m.ttft_p99_ms)]);
    plot("chart-queue", "engine queue (requests)", "s", ["queue depth", "running", "waiting"], [xs, metrics.map(m => m.queue_depth), metrics.map(m => m.engine_running), metrics.map(m => m.engine_waiting)]);
  }
  const custom = detail.custom_metrics || [];
  main.querySelector("#serve-custom").hidden = !custom.length;
  main.querySelector("#serve-custom-table").innerHTML = `<table id="custom-metrics"><tr><th>name</th><th>kind</th><th>tags</th><th>value</th></tr>
    ${custom.map(c => `<tr><td>${esc(c.name)}</td><td>${esc(c.kind)}</td>
    <td>${esc(Object.entries(c.tags).map(([k, x]) => `${k}=${x}`).join(" "))}</td>
    <td class="num">${c.kind === "histogram" ? `count ${num(c.count)}, sum ${num(c.sum)}` : num(c.value)}</td></tr>`).join("")}</table>`;
  const reps = detail.replicas;
  main.querySelector("#serve-replicas").innerHTML = `<table id="replicas"><tr><th>replica</th><th>state</th><th>pid</th><th>host</th>
    <th>started</th><th>ended</th><th>req/s</th><th>p50</th><th>p99</th><th>served</th><th>errors</th><th>ongoing</th><th>cause</th></tr>
    ${reps.map(r => { const m = r.last || {}; return `<tr data-replica="${r.replica}"><td>#${r.replica}</td><td>${badge(r.state)}</td>
    <td class="num">${r.pid ?? "-"}</td><td>${esc(r.host)}</td><td>${when(r.started_at)}</td><td>${when(r.ended_at)}</td>
    <td class="num">${num(m.requests_per_s)}</td><td class="num">${num(m.p50_ms)}</td><td class="num">${num(m.p99_ms)}</td>
    <td class="num">${num(m.served)}</td><td class="num">${num(m.errors)}</td><td class="num">${num(m.ongoing)}</td>
    <td>${esc(r.cause || "")}</td></tr>`; }).join("")}</table>`;
  main.querySelector("#serve-events").innerHTML = detail.events.slice(-200).map(e =>
    `<li class="k-${esc(e.kind)}">${when(e.time)} <b>${esc(e.kind)}</b> ${esc(e.message)}</li>`).join("");
  const sel = main.querySelector("#log-replica"), cur = sel.value;
  const numbers = [...new Set(reps.map(r => r.replica))].sort((a, b) => a - b);
  sel.innerHTML = '<option value="">all replicas</option>' + numbers.map(n => `<option value="${n}">#${n}</option>`).join("");
  sel.value = cur;
  const {logs} = await api(base + "/logs?tail=500" + (cur === "" ? "" : "&replica=" + cur));
  const pre = main.querySelector("#serve-logs");
  pre.textContent = logs.map(l => `(#${l.replica}, pid=${l.pid}) ${l.line}`).join("\n") || "(no output yet)";
  return reps.some(r => r.state === "RUNNING");
}

// ---- routing and live refresh -----------------------------------------------------------------
async function render(v) {
  const [, page, arg] = (location.hash || "#/").split("/");
  let live = false;
  try {
    if (page === "run") live = await runPage(v, Number(arg));
    else if (page === "experiments") live = await experimentsPage(v);
    else if (page === "experiment") live = await experimentPage(v, decodeURIComponent(arg));
    else if (page === "serve" && arg) live = await serveDeploymentPage(v, decodeURIComponent(arg), decodeURIComponent((location.hash.split("/")[3] || "")));
    else if (page === "serve") live = await servePage(v);
    else live = await runsPage(v);
  } catch (err) {
    document.getElementById("main").innerHTML = `<p class="s-ERRORED badge">error</p><pre>${esc(err.message)}</pre>`;
  }
  if (v !== view) return;
  document.getElementById("live").textContent = live ? "● live" : "";
  document.body.dataset.ready = "1";   // the browser tests wait for this
  clearTimeout(timer);
  const listing = page !== "run" && page !== "experiment" && !(page === "serve" && arg);   // lists keep polling: new runs appear
  if (live || listing) timer = setTimeout(() => render(v), live ? POLL_MS : 3 * POLL_MS);
}
window.addEventListener("hashchange", () => { view += 1; clearCharts(); document.getElementById("main").innerHTML = ""; render(view); });
render(view);
