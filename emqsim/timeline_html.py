"""An interactive timeline of one run as ONE self-contained HTML file (inline script and style, no network).

Swimlanes per worker show each attempt (a take of a job), the lock it holds (set -> expired/released), the
heartbeat renewals on it, reclaims, and the worker's faults; a lane above them shows the recovery sweeps. Scroll
to zoom, drag to pan, hover any mark to see the record behind it. It reads only a `Run`'s records
(`emqsim.records`), so it works for simulated and live runs alike, and a worker event of a kind it does not know
still appears, drawn in a generic style.

>>> from emqsim import LeasePolicy, simulate, standard
>>> from emqsim.timeline_html import write_timeline_html
>>> write_timeline_html(simulate(standard("fast-dead"), LeasePolicy(30, 10), seed=0), "run.html")
"""

from __future__ import annotations

import dataclasses
import html
import json
import os
from typing import Any

from emqsim.palette import FINISH_COLOURS
from emqsim.records import Run, with_expiries
from emqsim.stats import write_atomically

# Worker-event kinds that open and close a state span on the worker's lane. Kinds not listed here (and kinds
# added later) are drawn as generic point marks, each with its record on hover.
STATE_SPANS = {"crash": ("restart", "dead"), "freeze": ("resume", "frozen")}
LOCK_ENDS = ("expired", "released", "deleted", "evicted")
LOCK_MARKS = ("renewed", "renew_failed", "renew_lost")


def _record(obj: Any) -> dict[str, Any]:
    data = (
        dataclasses.asdict(obj) if dataclasses.is_dataclass(obj) and not isinstance(obj, type) else dict(obj)
    )
    return {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}


def timeline_data(run: Run) -> dict[str, Any]:
    """The marks the page draws, each with the record behind it (plain JSON-able data)."""
    by_token = {a.token: a for a in run.attempts}
    workers = sorted({a.worker for a in run.attempts} | {e.worker for e in run.worker_events})

    # Attempts: a bar from the take to the attempt's end, packed into rows so overlapping takes do not hide
    # each other (a worker with concurrency > 1 runs several at once).
    attempts: list[dict[str, Any]] = []
    rows_end: dict[int, list[float]] = {w: [] for w in workers}
    for a in sorted(run.attempts, key=lambda a: (a.taken_at, a.job, a.attempt)):
        ends = [t for t in (a.finish_applied_at, a.reclaimed_at, a.failed_at, a.stopped_at) if t is not None]
        end = max(ends) if ends else run.end
        free = rows_end[a.worker]
        row = next((i for i, busy_until in enumerate(free) if busy_until <= a.taken_at), len(free))
        if row == len(free):
            free.append(end)
        else:
            free[row] = end
        record = _record(a)
        record["false_reclaim"] = a.false_reclaim
        record["detection_latency"] = a.detection_latency
        attempts.append({"worker": a.worker, "row": row, "start": a.taken_at, "end": end, "record": record})
    row_of = {(m["record"]["job"], m["record"]["token"]): m["row"] for m in attempts}

    # Locks: one bar per (job, token) from its SET to the event that ends it (or the end of the run), with the
    # renewals on it as ticks.
    locks: list[dict[str, Any]] = []
    ticks: list[dict[str, Any]] = []
    open_locks: dict[tuple[str, str | None], dict[str, Any]] = {}
    for e in with_expiries(run.lock_events, run.end):
        owner = by_token.get(e.token) if e.token is not None else None
        if owner is None:
            continue  # a lock no attempt holds (cannot be placed on a worker's lane)
        key = (e.job, e.token)
        row = row_of.get(key, 0)
        if e.kind == "set":
            lock = {"worker": owner.worker, "row": row, "start": e.time, "end": run.end, "record": _record(e)}
            lock["record"]["ended_by"] = "end of run"
            open_locks[key] = lock
            locks.append(lock)
        elif e.kind in LOCK_ENDS and key in open_locks:
            lock = open_locks.pop(key)
            lock["end"] = e.time
            lock["record"]["ended_by"] = f"{e.kind} at {e.time:g} s"
        elif e.kind in LOCK_MARKS:
            ticks.append(
                {"worker": owner.worker, "row": row, "time": e.time, "kind": e.kind, "record": _record(e)}
            )

    reclaims = [
        {"worker": m["worker"], "row": m["row"], "time": m["record"]["reclaimed_at"], "record": m["record"]}
        for m in attempts
        if m["record"]["reclaimed_at"] is not None
    ]

    # Faults: known kinds open a state span (crash -> restart is dead, freeze -> resume is frozen); every event
    # but a worker's start is also a point mark. Unknown kinds get the generic style.
    spans: list[dict[str, Any]] = []
    faults: list[dict[str, Any]] = []
    opened: dict[tuple[int, str], dict[str, Any]] = {}
    closers = {closer: opener for opener, (closer, _) in STATE_SPANS.items()}
    for w in sorted(run.worker_events, key=lambda w: w.time):
        record = _record(w)
        if w.kind in STATE_SPANS:
            span = {"worker": w.worker, "start": w.time, "end": run.end, "state": STATE_SPANS[w.kind][1]}
            span["record"] = record
            opened[(w.worker, w.kind)] = span
            spans.append(span)
        elif w.kind in closers and (w.worker, closers[w.kind]) in opened:
            opened.pop((w.worker, closers[w.kind]))["end"] = w.time
        if w.kind != "start":
            faults.append({"worker": w.worker, "time": w.time, "kind": w.kind, "record": record})

    sweeps = [{"time": s.time, "record": _record(s)} for s in run.sweeps]
    rows = {w: max(1, len(rows_end[w])) for w in workers}
    return {
        "title": f"{run.scenario} under {_policy_text(run.policy)}, seed {run.seed}, replication {run.replication}",
        "summary": {
            "scenario": run.scenario,
            "policy": run.policy,
            "seed": run.seed,
            "replication": run.replication,
            "end": run.end,
            "ended_by": run.ended_by,
            "jobs": run.jobs,
            "attempts": len(run.attempts),
            "reclaims": len(reclaims),
            "false_reclaims": sum(1 for a in run.attempts if a.false_reclaim),
            "requests": run.total_requests,
        },
        "end": run.end,
        "workers": [{"id": w, "rows": rows[w]} for w in workers],
        "attempts": attempts,
        "locks": locks,
        "ticks": ticks,
        "reclaims": reclaims,
        "spans": spans,
        "faults": faults,
        "sweeps": sweeps,
    }


def _policy_text(policy: dict[str, Any]) -> str:
    name = policy.get("policy", "policy")
    settings = ", ".join(
        f"{k} {policy[k]:g} s" for k in ("lease", "beat", "scan", "timeout") if policy.get(k) is not None
    )
    return f"{name} ({settings})" if settings else str(name)


def timeline_html(run: Run) -> str:
    """The page as text: deterministic (same run, same bytes), with everything inline."""
    data = json.dumps(timeline_data(run), separators=(",", ":"), allow_nan=False)  # records in field order
    data = (
        data.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    )  # safe inside <script>
    title = html.escape(f"emqsim timeline: {run.scenario} under {run.policy.get('policy', '')}")
    return (
        _PAGE.replace("__TITLE__", title)
        .replace("__STYLE__", _STYLE)
        .replace("__DATA__", data)
        .replace("__SCRIPT__", _SCRIPT.replace("__FINISH_COLOURS__", json.dumps(FINISH_COLOURS)))
    )


def write_timeline_html(run: Run, path: str | os.PathLike[str]) -> None:
    """Write the page to `path` atomically (a temporary file beside it, then a rename)."""
    write_atomically(path, timeline_html(run))


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>__TITLE__</title>
<style>__STYLE__</style>
</head>
<body>
<header>
  <h1 id="title"></h1>
  <p id="summary"></p>
  <p class="help">Scroll to zoom (around the pointer), drag to pan, double-click or press <b>0</b> to see the
  whole run. Hover a mark for the record behind it.
  <button id="reset" type="button">whole run</button>
  <button id="zoom-in" type="button">zoom in</button>
  <button id="zoom-out" type="button">zoom out</button></p>
  <div id="legend"></div>
</header>
<div id="chart"></div>
<div id="tip" role="tooltip" hidden></div>
<script type="application/json" id="data">__DATA__</script>
<script>__SCRIPT__</script>
</body>
</html>
"""

_STYLE = """
body { font: 13px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 12px 16px; color: #222; }
h1 { font-size: 17px; margin: 0 0 4px; }
p { margin: 2px 0 6px; }
.help { color: #555; }
button { font: inherit; margin-left: 6px; }
#legend { display: flex; flex-wrap: wrap; gap: 4px 14px; margin: 6px 0 8px; }
#legend span { display: inline-flex; align-items: center; gap: 5px; }
#legend svg { width: 22px; height: 12px; }
#chart { border: 1px solid #ddd; overflow: hidden; user-select: none; cursor: grab; }
#chart.dragging { cursor: grabbing; }
svg text { font: 11px system-ui, sans-serif; fill: #333; }
.lane-bg { fill: #fafafa; }
.lane-bg.odd { fill: #f2f2f2; }
.grid { stroke: #e0e0e0; }
.mark:hover { stroke: #000; stroke-width: 1.5px; }
#tip { position: fixed; z-index: 10; background: #fff; border: 1px solid #888; border-radius: 4px;
  box-shadow: 0 2px 6px rgba(0,0,0,.25); padding: 6px 8px; max-width: 420px; pointer-events: none; }
#tip h2 { font-size: 12px; margin: 0 0 4px; }
#tip table { border-collapse: collapse; }
#tip td { padding: 0 6px 0 0; vertical-align: top; font-size: 11px; }
#tip td:first-child { color: #666; white-space: nowrap; }
"""

_SCRIPT = r"""
"use strict";
(function () {
  const D = JSON.parse(document.getElementById("data").textContent);
  const NS = "http://www.w3.org/2000/svg";
  const C = {
    completed: "#0072B2", ...__FINISH_COLOURS__, reclaimed: "#D55E00",
    failed: "#000000", running: "#56B4E9", held: "#999999", lock: "#56B4E9", renewed: "#000000",
    renew_failed: "#D55E00", renew_lost: "#E69F00", dead: "rgba(0,0,0,0.14)", frozen: "rgba(240,228,66,0.55)",
    rightReclaim: "#009E73", falseReclaim: "#D55E00", sweep: "#555555", sweepHit: "#009E73",
    generic: "#7F3C8D", crash: "#000000", freeze: "#E69F00", restart: "#009E73", resume: "#B8A800",
  };
  const ROW = 22, LEFT = 118, RIGHT = 16, TOP = 28, SWEEP_LANE = 26, GAP = 8;
  const end = Math.max(D.end, 1e-3);
  let t0 = 0, t1 = end * 1.02;

  document.getElementById("title").textContent = D.title;
  const s = D.summary;
  document.getElementById("summary").textContent =
    `${count(s.jobs, "job")}, ${count(s.attempts, "attempt")}, ${count(s.reclaims, "reclaim")} ` +
    `(${s.false_reclaims} false), ${count(s.requests, "request")} to Redis; ` +
    (s.ended_by === "done" ? `every job settled by ${fmt(s.end)} s.` : `stopped at the horizon, ${fmt(s.end)} s.`);

  // Lanes: sweeps on top, then one per worker, as tall as the attempts it ran at once.
  const lanes = [];
  let y = TOP;
  lanes.push({ key: "sweeps", label: "recovery sweeps", y: y, h: SWEEP_LANE });
  y += SWEEP_LANE + GAP;
  const laneOf = {};
  for (const w of D.workers) {
    const h = w.rows * ROW + 8;
    laneOf[w.id] = { key: "w" + w.id, label: "worker " + w.id, y: y, h: h };
    lanes.push(laneOf[w.id]);
    y += h + GAP;
  }
  const height = y + 4;

  const chart = document.getElementById("chart");
  const svg = el("svg", { height: height, role: "img", "aria-label": D.title });
  chart.appendChild(svg);
  const bg = el("g"), grid = el("g"), body = el("g"), front = el("g"), axis = el("g");
  for (const g of [bg, grid, body, front, axis]) svg.appendChild(g);
  const clip = el("clipPath", { id: "plot-clip" });
  const clipRect = el("rect", { x: LEFT, y: 0, height: height });
  clip.appendChild(clipRect);
  svg.insertBefore(clip, bg);
  body.setAttribute("clip-path", "url(#plot-clip)");
  front.setAttribute("clip-path", "url(#plot-clip)");

  lanes.forEach((lane, i) => {
    bg.appendChild(el("rect", { class: "lane-bg" + (i % 2 ? " odd" : ""), x: 0, y: lane.y - 3, height: lane.h + 6, width: 99999 }));
    const label = el("text", { x: 8, y: lane.y + Math.min(lane.h, ROW) / 2 + 4 });
    label.textContent = lane.label;
    bg.appendChild(label);
  });

  // Every mark keeps its time(s); redraw() places it for the current zoom.
  const placed = [];
  const records = [];
  function mark(node, kind, rec, place) {
    node.classList.add("mark");
    node.dataset.kind = kind;
    node.dataset.i = String(records.length);
    records.push({ kind: kind, record: rec });
    placed.push({ node: node, place: place });
    return node;
  }
  const rowY = (m) => laneOf[m.worker].y + 4 + m.row * ROW;
  const faultLabels = [];  // names of fault kinds the page has no symbol for, placed by declutter()
  const textWidths = new Map();
  function textWidth(t) {  // a label's rendered width in px (measured once: labels never change text)
    if (!textWidths.has(t)) { t.style.display = ""; textWidths.set(t, t.getComputedTextLength()); }
    return textWidths.get(t);
  }
  function declutter(x) {
    // a fault's name stands right of its mark; one that would run into the previous name in its lane, or
    // out of the plot, is not drawn (the mark and its hover stay)
    const lastEnd = {};
    const order = faultLabels.slice().sort((p, q) => p.time - q.time);
    for (const f of order) {
      const at = x(f.time) + 7, w = textWidth(f.node);
      f.node.setAttribute("x", at);
      const clear = at >= LEFT && at + w <= width() - RIGHT && at >= (lastEnd[f.worker] ?? -Infinity) + 4;
      f.node.style.display = clear ? "" : "none";
      if (clear) lastEnd[f.worker] = at + w;
    }
  }

  for (const sp of D.spans) {
    const lane = laneOf[sp.worker];
    const r = el("rect", { y: lane.y - 2, height: lane.h + 4, fill: C[sp.state] || C.generic });
    body.appendChild(mark(r, sp.state, sp.record, (x) => span(r, x(sp.start), x(sp.end))));
  }
  for (const a of D.attempts) {
    const r = el("rect", { y: rowY(a), height: ROW - 9, rx: 2, fill: C[a.record.outcome] || C.generic });
    const label = `job ${a.record.job} attempt ${a.record.attempt}`;
    body.appendChild(mark(r, "attempt", a.record, (x) => span(r, x(a.start), x(a.end))));
    const t = el("text", { y: rowY(a) + 10, "pointer-events": "none", fill: "#fff", class: "attempt-label" });
    t.textContent = label;
    t.style.fill = "#fff";
    body.appendChild(t);
    placed.push({ node: t, place: (x) => {
      // drawn only where it fits inside the bar's visible part (its measured width, not a guess)
      const lo = Math.max(x(a.start), LEFT), hi = Math.min(x(a.end), width() - RIGHT);
      t.setAttribute("x", lo + 3);
      t.style.display = "";
      if (hi - lo < textWidth(t) + 6) t.style.display = "none";
    } });
  }
  for (const l of D.locks) {
    const r = el("rect", { y: rowY(l) + ROW - 8, height: 4, fill: C.lock });
    body.appendChild(mark(r, "lock", l.record, (x) => span(r, x(l.start), x(l.end))));
  }
  for (const k of D.ticks) {
    const ln = el("line", { y1: rowY(k) + ROW - 10, y2: rowY(k) + ROW - 2, stroke: C[k.kind] || C.generic, "stroke-width": k.kind === "renewed" ? 1.2 : 2.2 });
    front.appendChild(mark(ln, k.kind === "renewed" ? "beat" : k.kind, k.record, (x) => { ln.setAttribute("x1", x(k.time)); ln.setAttribute("x2", x(k.time)); }));
  }
  const sweepLane = lanes[0];
  for (const sw of D.sweeps) {
    const hit = sw.record.reclaimed.length + sw.record.failed.length > 0;
    const ln = el("line", {
      y1: sweepLane.y + (hit ? 2 : 8), y2: sweepLane.y + sweepLane.h - (hit ? 2 : 8),
      stroke: hit ? C.sweepHit : C.sweep, "stroke-width": hit ? 3 : 1.2, opacity: sw.record.skipped ? 0.35 : 0.9,
    });
    front.appendChild(mark(ln, "sweep", sw.record, (x) => { ln.setAttribute("x1", x(sw.time)); ln.setAttribute("x2", x(sw.time)); }));
  }
  for (const f of D.faults) {
    const yy = laneOf[f.worker].y + 2;
    let node;
    if (f.kind === "crash") {
      node = el("path", { stroke: C.crash, "stroke-width": 2.5, fill: "none" });
    } else {
      node = el("path", { fill: C[f.kind] || C.generic, stroke: "#fff", "stroke-width": 0.8 });
    }
    front.appendChild(mark(node, "fault", Object.assign({ fault: f.kind }, f.record), (x) => {
      const cx = x(f.time), cy = yy;
      if (f.kind === "crash") node.setAttribute("d", `M${cx - 5},${cy - 5}L${cx + 5},${cy + 5}M${cx - 5},${cy + 5}L${cx + 5},${cy - 5}`);
      else if (C[f.kind]) node.setAttribute("d", `M${cx - 5},${cy - 5}L${cx + 5},${cy - 5}L${cx},${cy + 4}Z`);
      else node.setAttribute("d", `M${cx},${cy - 6}A6,6 0 1,0 ${cx + 0.01},${cy - 6}Z`);
    }));
    if (!(f.kind in C)) {
      const t = el("text", { y: yy - 8, "pointer-events": "none" });
      t.textContent = f.kind;
      front.appendChild(t);
      faultLabels.push({ node: t, worker: f.worker, time: f.time });
    }
  }
  for (const rc of D.reclaims) {
    const yy = rowY(rc) + (ROW - 9) / 2;
    const wrong = rc.record.false_reclaim;
    const p = el("path", { fill: wrong ? C.falseReclaim : C.rightReclaim, stroke: "#fff", "stroke-width": 1 });
    front.appendChild(mark(p, "reclaim", rc.record, (x) => {
      const cx = x(rc.time);
      p.setAttribute("d", `M${cx},${yy - 8}L${cx + 7},${yy}L${cx},${yy + 8}L${cx - 7},${yy}Z`);
    }));
  }

  // -- axis, zoom, pan -------------------------------------------------------------------------------------
  function width() { return Math.max(chart.clientWidth, 320); }
  function scale() { const w = width(); return (t) => LEFT + (t - t0) / (t1 - t0) * (w - LEFT - RIGHT); }
  function span(node, a, b) { node.setAttribute("x", a); node.setAttribute("width", Math.max(b - a, 1.5)); }
  function niceStep(range, ticks) {
    const raw = range / ticks, p = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
    return 10 * p;
  }
  function redraw() {
    const w = width(), x = scale();
    svg.setAttribute("width", w);
    svg.setAttribute("viewBox", `0 0 ${w} ${height}`);
    clipRect.setAttribute("width", w - LEFT - RIGHT + 1);
    while (grid.firstChild) grid.removeChild(grid.firstChild);
    while (axis.firstChild) axis.removeChild(axis.firstChild);
    const step = niceStep(t1 - t0, Math.max(2, Math.min(8, Math.floor((w - LEFT - RIGHT) / 80))));
    for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) {
      const xx = x(t);
      grid.appendChild(el("line", { class: "grid", x1: xx, x2: xx, y1: TOP - 6, y2: height }));
      const label = el("text", { x: xx, y: 14, "text-anchor": "middle" });
      label.textContent = fmt(t) + " s";
      axis.appendChild(label);
    }
    for (const p of placed) p.place(x);
    declutter(x);
  }
  function zoom(factor, at) {
    const x = scale(), w = width();
    const t = t0 + (Math.min(Math.max(at, LEFT), w - RIGHT) - LEFT) / (w - LEFT - RIGHT) * (t1 - t0);
    const range = Math.min(Math.max((t1 - t0) * factor, 0.002), end * 1.02);
    t0 = Math.max(t - (t - t0) * range / (t1 - t0), -end * 0.01);
    t1 = t0 + range;
    void x;
    redraw();
  }
  function reset() { t0 = 0; t1 = end * 1.02; redraw(); }
  chart.addEventListener("wheel", (ev) => { ev.preventDefault(); zoom(ev.deltaY > 0 ? 1.25 : 0.8, ev.offsetX); }, { passive: false });
  let drag = null;
  chart.addEventListener("mousedown", (ev) => { drag = { x: ev.clientX, t0: t0, t1: t1 }; chart.classList.add("dragging"); });
  window.addEventListener("mouseup", () => { drag = null; chart.classList.remove("dragging"); });
  window.addEventListener("mousemove", (ev) => {
    if (!drag) return;
    const dt = (ev.clientX - drag.x) / (width() - LEFT - RIGHT) * (drag.t1 - drag.t0);
    t0 = drag.t0 - dt; t1 = drag.t1 - dt; redraw();
  });
  chart.addEventListener("dblclick", reset);
  document.getElementById("reset").addEventListener("click", reset);
  document.getElementById("zoom-in").addEventListener("click", () => zoom(0.5, (width() + LEFT) / 2));
  document.getElementById("zoom-out").addEventListener("click", () => zoom(2, (width() + LEFT) / 2));
  window.addEventListener("keydown", (ev) => {
    if (ev.key === "0") reset();
    if (ev.key === "+" || ev.key === "=") zoom(0.5, (width() + LEFT) / 2);
    if (ev.key === "-") zoom(2, (width() + LEFT) / 2);
  });
  window.addEventListener("resize", redraw);

  // -- hover: the record behind the mark --------------------------------------------------------------------
  const tip = document.getElementById("tip");
  const TITLES = { attempt: "attempt (a take of a job)", lock: "lock", beat: "heartbeat renewal",
    renew_failed: "renewal refused", renew_lost: "renewal lost", sweep: "recovery sweep", reclaim: "reclaim",
    fault: "worker event", dead: "worker dead", frozen: "worker frozen" };
  svg.addEventListener("mouseover", (ev) => {
    const node = ev.target.closest(".mark");
    if (!node) return;
    const item = records[Number(node.dataset.i)];
    let title = TITLES[item.kind] || item.kind;
    if (item.kind === "reclaim") title = `reclaim of job ${item.record.job}, attempt ${item.record.attempt}` + (item.record.false_reclaim ? ": WRONG, its worker was " + item.record.worker_state_at_reclaim : ": right, its worker was dead");
    if (item.kind === "fault") title = "worker " + item.record.worker + ": " + item.record.kind;
    const h = document.createElement("h2");
    h.textContent = title;
    const table = document.createElement("table");
    for (const [k, v] of Object.entries(item.record)) {
      if (v === null || v === "" || (Array.isArray(v) && v.length === 0)) continue;
      const tr = table.insertRow();
      tr.insertCell().textContent = k;
      tr.insertCell().textContent = typeof v === "number" ? fmt(v) : Array.isArray(v) ? v.join(", ") : typeof v === "object" ? JSON.stringify(v) : String(v);
    }
    tip.replaceChildren(h, table);
    tip.hidden = false;
    move(ev);
  });
  svg.addEventListener("mousemove", (ev) => { if (!tip.hidden) move(ev); });
  svg.addEventListener("mouseout", (ev) => { if (ev.target.closest(".mark")) tip.hidden = true; });
  function move(ev) {
    const r = tip.getBoundingClientRect();
    let x = ev.clientX + 14, yy = ev.clientY + 14;
    if (x + r.width > window.innerWidth) x = ev.clientX - r.width - 14;
    if (yy + r.height > window.innerHeight) yy = Math.max(4, ev.clientY - r.height - 14);
    tip.style.left = x + "px";
    tip.style.top = yy + "px";
  }

  // -- legend -------------------------------------------------------------------------------------------------
  const legend = document.getElementById("legend");
  // an attempt's colour is its outcome: list the outcomes this run has, and only those
  const outcomes = new Set(D.attempts.map((a) => a.record.outcome));
  const outcomeItems = [
    ["completed", "attempt, completed"], ["duplicate_completion", "duplicate completion"],
    ["finish_rejected", "finish rejected (token check)"], ["reclaimed", "attempt reclaimed"],
    ["failed", "attempt failed (stalled too often)"], ["held", "held by a dead worker at the end"],
    ["running", "still running at the end"],
  ].filter(([k]) => outcomes.has(k)).map(([k, text]) => ["rect", C[k], text]);
  const items = [
    ...outcomeItems,
    ["thin", C.lock, "lock alive"], ["tick", C.renewed, "heartbeat renewal"], ["tick", C.renew_failed, "renewal refused"],
    ["diamond", C.rightReclaim, "reclaim (worker dead)"], ["diamond", C.falseReclaim, "false reclaim"],
    ["tick", C.sweepHit, "sweep that reclaimed"], ["tick", C.sweep, "sweep"],
    ["band", C.dead, "worker dead"], ["band", C.frozen, "worker frozen"], ["cross", C.crash, "crash"],
    ["circle", C.generic, "other worker event"],
  ];
  for (const [shape, colour, text] of items) {
    const s2 = document.createElementNS(NS, "svg");
    s2.setAttribute("viewBox", "0 0 22 12");
    let n;
    if (shape === "rect" || shape === "band") n = el("rect", { x: 1, y: 2, width: 20, height: 8, fill: colour });
    else if (shape === "thin") n = el("rect", { x: 1, y: 4, width: 20, height: 4, fill: colour });
    else if (shape === "tick") n = el("line", { x1: 11, x2: 11, y1: 1, y2: 11, stroke: colour, "stroke-width": 2 });
    else if (shape === "diamond") n = el("path", { d: "M11,0L17,6L11,12L5,6Z", fill: colour });
    else if (shape === "cross") n = el("path", { d: "M6,1L16,11M6,11L16,1", stroke: colour, "stroke-width": 2 });
    else n = el("circle", { cx: 11, cy: 6, r: 5, fill: colour });
    s2.appendChild(n);
    const span2 = document.createElement("span");
    span2.appendChild(s2);
    span2.appendChild(document.createTextNode(text));
    legend.appendChild(span2);
  }

  function count(n, word) {
    return `${n} ${word}${n === 1 ? "" : "s"}`;
  }

  function el(name, attrs) {
    const n = document.createElementNS(NS, name);
    for (const [k, v] of Object.entries(attrs || {})) n.setAttribute(k, v);
    return n;
  }
  function fmt(v) {
    if (!Number.isFinite(v)) return String(v);
    if (Number.isInteger(v)) return String(v);
    return String(Number(v.toFixed(3)));
  }
  redraw();
})();
"""
