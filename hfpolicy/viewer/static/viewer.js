// hfpolicy view: draws a dataset's, an evaluation's or a training run's page from the JSON in #page-data.
// Plots are uPlot (vendored inline); everything else is plain DOM. No network access of any kind.
"use strict";
(function () {
  const DATA = JSON.parse(document.getElementById("page-data").textContent);
  const COLORS = ["#3b5bdb", "#e8590c", "#2f9e44", "#ae3ec9", "#1098ad", "#f08c00", "#c2255c", "#5c940d",
    "#364fc7", "#d9480f", "#087f5b", "#862e9c", "#0b7285", "#e67700", "#a61e4d", "#495057"];

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") node.className = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v === true ? "" : v);
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }
  function fmt(v, digits = 3) {
    if (v === null || v === undefined) return "–";
    if (typeof v !== "number") return String(v);
    if (Number.isInteger(v)) return String(v);
    return Math.abs(v) >= 1000 ? v.toFixed(0) : Number(v.toPrecision(digits)).toString();
  }
  // Axis ticks: small or large magnitudes (learning rates, 1e-5) in exponent form, others as they are.
  const tick = (v) => (v === null ? "" : v !== 0 && (Math.abs(v) < 1e-2 || Math.abs(v) >= 1e5) ? v.toExponential(1) : String(Number(v.toPrecision(6))));
  const pct = (v) => (v === null || v === undefined ? "–" : v.toFixed(1) + "%");
  const card = (value, key, sub) => el("div", { class: "card" }, el("div", { class: "v" }, value),
    el("div", { class: "k" }, key), sub ? el("div", { class: "s" }, sub) : null);
  const resultCell = (success) => success === null || success === undefined ? el("td", {}, "–")
    : el("td", { class: success ? "ok" : "bad" }, success ? "success" : "failure");

  // --- plots ------------------------------------------------------------------------------------------------
  // A uPlot line plot with a vertical marker (the time cursor) and click-to-seek; returns {plot, setMarker}.
  function linePlot(parent, title, xs, ys, names, opts = {}) {
    const box = el("div", { class: "plot" }, el("div", { class: "title" }, title));
    parent.append(box);
    const width = Math.max(320, (opts.width || parent.clientWidth || 640) - 8);
    const series = [{ label: opts.xLabel || "step" }].concat(names.map((name, i) => Object.assign({
      label: name, stroke: (opts.colors || COLORS)[i % COLORS.length], width: 1.5, fill: i === 0 ? opts.fill : undefined,
      dash: opts.dashes && opts.dashes[i] ? opts.dashes[i] : undefined, points: { show: opts.points || false },
    }, opts.series ? opts.series[i] : null)));
    const plot = new uPlot({
      width, height: opts.height || 170, series,
      scales: { x: { time: false }, y: opts.yScale || { range: (u, lo, hi) => (lo === hi ? [lo - 1, hi + 1] : uPlot.rangeNum(lo, hi, 0.1, true)) } },
      axes: [{ label: opts.xLabel || "step", size: 36 }, { label: opts.yLabel || "", size: 60, values: (u, ticks) => ticks.map(tick) }],
      legend: { show: names.length > 1 && names.length <= 16, live: true },
      cursor: { drag: { x: false, y: false } },
      hooks: { draw: [() => place()] },  // the first draw comes after construction; resizes redraw too
    }, [xs, ...ys], box);
    const marker = el("div", { class: "marker", style: "display:none" });
    plot.over.append(marker);
    let markerX = null;
    function place() {
      if (markerX === null) return;
      const left = plot.valToPos(markerX, "x");
      if (!Number.isFinite(left)) return;
      marker.style.display = "block";
      marker.style.left = left.toFixed(1) + "px";
    }
    if (opts.onSeek) {
      plot.over.addEventListener("click", (e) => opts.onSeek(plot.posToVal(e.offsetX, "x")));
    }
    return { plot, setMarker(x) { markerX = x; place(); } };
  }

  // A grid of plots in `parent`: two columns when there is room for two 400-px plots, else one; returns the grid
  // and the width each plot should take.
  function plotGrid(parent) {
    const grid = el("div", { class: "plots" });
    parent.append(grid);
    const inner = parent.clientWidth - 24, two = inner >= 800;
    grid.style.gridTemplateColumns = two ? "repeat(2, minmax(0, 1fr))" : "minmax(0, 1fr)";
    return { grid, width: two ? (inner - 14) / 2 : inner };
  }

  function histogramPlot(parent, hist, width) {
    const centres = hist.edges.slice(0, -1).map((e, i) => (e + hist.edges[i + 1]) / 2);
    const totals = hist.successes.map((s, i) => s + hist.failures[i]);
    const bars = uPlot.paths.bars({ size: [0.9, 60] });
    const box = el("div", { class: "plot", id: "histogram" },
      el("div", { class: "title" }, "red: failures, green: successes"));
    parent.append(box);
    new uPlot({
      width: Math.max(320, width - 8), height: 170,
      series: [{ label: "max reward" },
        { label: "episodes", stroke: "#c0392b", fill: "rgba(192,57,43,.55)", paths: bars, points: { show: false } },
        { label: "successes", stroke: "#1a7f4b", fill: "rgba(26,127,75,.75)", paths: bars, points: { show: false } }],
      scales: { x: { time: false, range: [hist.edges[0], hist.edges[hist.edges.length - 1]] }, y: { range: (u, lo, hi) => [0, Math.max(1, hi)] } },
      axes: [{ label: "max reward", size: 36 }, { label: "episodes", size: 48 }],
      legend: { show: false },
    }, [centres, totals, hist.successes], box);
  }

  // --- sortable table ---------------------------------------------------------------------------------------
  // columns: [{key, label, value(row) -> sortable, cell(row) -> td, left}]; rows: objects with .index
  function sortableTable(columns, rows, initialOrder, onSelect) {
    const tbody = el("tbody");
    const byIndex = new Map(rows.map((r) => [r.index, r]));
    let order = initialOrder.slice(), sortKey = null, ascending = true, selected = null, filter = () => true;
    const headers = columns.map((c) => el("th", { class: c.left ? "l" : null, "data-key": c.key, onclick: () => sortBy(c) }, c.label));
    function render() {
      tbody.replaceChildren(...order.map((i) => byIndex.get(i)).filter(filter).map((row) => {
        const tr = el("tr", { "data-index": row.index, class: row.index === selected ? "selected" : null,
          onclick: () => select(row.index) }, columns.map((c) => c.cell(row)));
        return tr;
      }));
      headers.forEach((h, i) => { h.className = (columns[i].left ? "l " : "") + (columns[i].key === sortKey ? "sorted" + (ascending ? " asc" : "") : ""); });
    }
    function sortBy(column) {
      ascending = sortKey === column.key ? !ascending : true;
      sortKey = column.key;
      const sign = ascending ? 1 : -1;
      order = rows.slice().sort((a, b) => {
        const va = column.value(a), vb = column.value(b);
        if (va === vb) return a.index - b.index;
        if (va === null || va === undefined) return 1;
        if (vb === null || vb === undefined) return -1;
        return va < vb ? -sign : sign;
      }).map((r) => r.index);
      render();
    }
    function select(index) { selected = index; render(); onSelect(byIndex.get(index)); }
    const table = el("table", { id: "episodes" }, el("thead", {}, el("tr", {}, headers)), tbody);
    render();
    function visible() { return order.filter((i) => filter(byIndex.get(i))); }
    function step(offset) {  // the next / previous visible row
      const rows = visible(), at = rows.indexOf(selected);
      if (!rows.length) return;
      const next = rows[Math.max(0, Math.min(rows.length - 1, at < 0 ? 0 : at + offset))];
      select(next);
      const tr = tbody.querySelector(`tr[data-index="${next}"]`);
      if (tr) tr.scrollIntoView({ block: "nearest" });
    }
    return { table, select, step, setFilter(f) { filter = f; render(); }, visible };
  }

  // --- time cursor: videos + slider + plot markers ----------------------------------------------------------
  // videos: [{el, from}] played in sync; frame f shows at time from + f / fps. nFrames: frames 0..nFrames-1.
  function timeCursor(parent, videos, fps, nFrames, xOfFrame, onFrame) {
    const slider = el("input", { type: "range", id: "time-cursor", min: 0, max: Math.max(0, nFrames - 1), step: 1, value: 0 });
    const label = el("span", { class: "t" });
    const play = el("button", { type: "button" }, "play");
    parent.append(el("div", { class: "timebar" }, play, slider, label));
    let frame = -1, raf = null;
    function show(f, seekVideos) {
      f = Math.max(0, Math.min(nFrames - 1, Math.round(f)));
      if (seekVideos && fps) for (const v of videos) v.el.currentTime = v.from + (f + 0.25) / fps;
      if (f === frame) return;
      frame = f;
      slider.value = f;
      label.textContent = `frame ${f}` + (fps ? ` · ${(f / fps).toFixed(2)} s` : "");
      onFrame(xOfFrame(f));
    }
    function tick() {
      const lead = videos[0];
      const f = Math.floor((lead.el.currentTime - lead.from) * fps + 1e-6);
      if (f >= nFrames - 1) { for (const v of videos) v.el.pause(); show(nFrames - 1, false); raf = null; play.textContent = "play"; return; }
      show(f, false);
      raf = requestAnimationFrame(tick);
    }
    slider.addEventListener("input", () => show(Number(slider.value), true));
    play.addEventListener("click", () => {
      if (!videos.length || !fps) return;
      if (raf) { for (const v of videos) v.el.pause(); cancelAnimationFrame(raf); raf = null; play.textContent = "play"; return; }
      if (frame >= nFrames - 1) show(0, true);
      for (const v of videos) v.el.play().catch(() => {});
      play.textContent = "pause";
      raf = requestAnimationFrame(tick);
    });
    if (!videos.length) play.disabled = true;
    for (const v of videos) v.el.addEventListener("loadedmetadata", () => { v.el.currentTime = v.from + (Math.max(frame, 0) + 0.25) / fps; });
    show(0, false);
    return {
      show: (f) => show(f, true), toggle: () => play.click(), step: (d) => show(frame + d, true),
      stop() { if (raf) cancelAnimationFrame(raf); for (const v of videos) v.el.pause(); },
    };
  }

  // --- evaluation -------------------------------------------------------------------------------------------
  function evalPage(root) {
    const agg = DATA.aggregated;
    const [lo, hi] = agg.pc_success_ci95;
    root.append(el("div", { class: "cards" },
      card(pct(agg.pc_success), "success", `95% CI ${lo.toFixed(1)}–${hi.toFixed(1)}% (Wilson)`),
      card(String(agg.n_episodes), "episodes", DATA.partial ? "from episodes.jsonl (unfinished)" : null),
      card(fmt(agg.avg_max_reward), "avg max reward"),
      card(fmt(agg.avg_sum_reward), "avg sum reward"),
      card(fmt(agg.avg_length), "avg length (steps)"),
      card(String(agg.n_actions_outside_space ?? agg.n_clipped_actions), "actions outside the action space", "applied unchanged"),
      agg.eval_s ? card(agg.eval_s.toFixed(1) + " s", "eval time", `${fmt(agg.episodes_per_s)} episodes/s`) : null));
    root.append(provenancePanel(DATA.provenance));
    const left = el("div", { class: "panel" }), right = el("div", { class: "panel", id: "episode" });
    root.append(el("div", { class: "layout wide-list" }, left, right));
    const columns = [
      { key: "index", label: "episode", value: (r) => r.index, cell: (r) => el("td", { title: r.video ? "filmed" : null }, r.video ? el("span", { class: "filmed" }, "▶ ") : null, r.index) },
      { key: "success", label: "result", value: (r) => r.success, cell: (r) => resultCell(r.success) },
      { key: "max_reward", label: "max reward", value: (r) => r.max_reward, cell: (r) => el("td", {},
        el("span", { class: "bar", style: `width:${Math.round(50 * Math.max(0, Math.min(1, r.max_reward)))}px` }), " ", fmt(r.max_reward)) },
      { key: "sum_reward", label: "sum reward", value: (r) => r.sum_reward, cell: (r) => el("td", {}, fmt(r.sum_reward)) },
      { key: "length", label: "length", value: (r) => r.length, cell: (r) => el("td", {}, r.length) },
      { key: "seed", label: "seed", value: (r) => r.seed, cell: (r) => el("td", {}, r.seed) },
    ];
    let cursor = null;
    const table = sortableTable(columns, DATA.episodes, DATA.default_order, (row) => showEpisode(right, row));
    keys = { table, cursor: () => cursor };
    left.append(el("h2", {}, "episodes ", el("span", { class: "note" }, "failures first · click a header to sort · ↑↓ episodes, ←→ frames, space plays")),
      el("div", { class: "tablewrap" }, table.table));
    function showEpisode(panel, row) {
      if (cursor) cursor.stop();
      panel.replaceChildren(el("h2", {}, `episode ${row.index} · seed ${row.seed} · `,
        el("span", { class: row.success ? "ok" : "bad" }, row.success ? "success" : "failure"),
        ` · max reward ${fmt(row.max_reward)} · ${row.length} steps`));
      const videos = [];
      if (row.video) {
        const video = el("video", { src: row.video, muted: true, playsinline: true, preload: "auto", id: "episode-video" });
        video.muted = true;
        panel.append(el("div", { class: "videos" }, el("figure", {}, video, el("figcaption", {}, "rollout (frame 0: the reset)"))));
        videos.push({ el: video, from: 0 });
      } else {
        panel.append(el("p", { class: "note" }, "not filmed (evaluation films the first --eval.n_videos episodes)"));
      }
      const steps = row.rewards.map((_, i) => i + 1);
      const holder = el("div");
      let plots = [];
      cursor = timeCursor(panel, videos, DATA.fps, row.length + 1, (f) => f, (x) => plots.forEach((p) => p.setMarker(x)));
      panel.append(holder);
      if (row.rewards.length) {
        const inUnit = row.rewards.every((r) => r === null || (r >= 0 && r <= 1));
        plots = [linePlot(holder, "reward per step (click to seek)", steps, [row.rewards], ["reward"],
          { width: panel.clientWidth - 24, height: 200, yLabel: "reward", onSeek: (x) => cursor.show(x),
            yScale: inUnit ? { range: [0, 1] } : undefined, fill: "rgba(59,91,219,.12)" })];
      } else {
        holder.append(el("p", { class: "note" }, "this eval_info.json has no per-step rewards (written before hfpolicy kept them)"));
      }
      plots = plots.concat(actionPlots(holder, row, (x) => cursor.show(x)));
      plots.forEach((p) => p.setMarker(0));
    }
    const first = DATA.default_order.map((i) => DATA.episodes.find((e) => e.index === i)).find((e) => e.video) || DATA.episodes.find((e) => e.index === DATA.default_order[0]);
    table.select(first.index);
    left.append(el("h2", { style: "margin-top:12px" }, "max reward per episode"));
    histogramPlot(left, DATA.histogram, left.clientWidth - 24);
  }

  // What was evaluated: eval_info.json's provenance (the policy, its checkpoint, the command, the version).
  function provenancePanel(provenance) {
    if (!provenance) return el("p", { class: "note", id: "provenance" }, "this eval_info.json does not say which policy it evaluated (written before hfpolicy kept it)");
    const words = { policy: "policy", folder: "its folder", revision: "revision", commit: "commit", policy_type: "policy type",
      checkpoint_step: "checkpoint step", ema_weights: "EMA weights", env: "env", command: "command", hfpolicy_version: "hfpolicy" };
    const shown = (v) => (v === null || v === undefined ? "unknown" : v === true ? "yes" : v === false ? "no" : typeof v === "object" ? JSON.stringify(v) : String(v));
    const items = Object.entries(provenance).map(([k, v]) => el("div", { class: k === "command" ? "wide" : null },
      el("dt", {}, words[k] || k), el("dd", {}, shown(v))));
    return el("div", { class: "panel", style: "margin-bottom:14px" }, el("h2", {}, "what was evaluated"),
      el("dl", { class: "provenance", id: "provenance" }, items));
  }

  // Per action dimension: the commanded action beside the state it acted on, the action space's bounds, and marks on
  // the steps whose action lay outside the space and on those that began a new predicted chunk.
  function actionPlots(holder, row, onSeek) {
    if (row.actions === null) {
      holder.append(el("p", { class: "note" }, "actions and states left out: the page holds those of the first episodes in the table's order only (too many steps)"));
      return [];
    }
    const actions = row.actions || [], states = row.states || [];
    if (!actions.length) return [];
    const steps = actions[0].map((_, i) => i + 1);
    const outside = new Set(Array.isArray(row.outside_steps) ? row.outside_steps : []);
    const chunks = new Set(Array.isArray(row.chunk_steps) ? row.chunk_steps : []);
    const everyStep = chunks.size > 0 && chunks.size >= steps.length;
    const space = DATA.action_space;
    holder.append(el("p", { class: "note", id: "chunk-note" }, everyStep ? "a new chunk is predicted at every step (temporal ensembling, or one action per chunk)"
      : `${chunks.size} predicted chunks (black dots: their first steps) · red dots: ${outside.size} steps outside the action space`));
    const { grid, width } = plotGrid(holder);
    return actions.map((action, d) => {
      const ys = [action], names = [`action ${d}`], series = [{}];
      if (states[d]) { ys.push(states[d]); names.push(`state ${d}`); series.push({}); }
      for (const [bound, label] of [[space && space.low ? space.low[d] : null, "low"], [space && space.high ? space.high[d] : null, "high"]]) {
        if (bound === null || bound === undefined) continue;
        ys.push(steps.map(() => bound)); names.push(`action space ${label}`); series.push({ stroke: "#868e96", dash: [4, 4], width: 1 });
      }
      const marks = (set) => steps.map((s, i) => (set.has(s) ? action[i] : null));
      ys.push(marks(outside)); names.push("outside the action space");
      series.push({ stroke: "#e03131", paths: () => null, points: { show: true, size: 8, fill: "#e03131", stroke: "#e03131" } });
      if (!everyStep) {
        ys.push(marks(chunks)); names.push("new chunk");
        series.push({ stroke: "#212529", paths: () => null, points: { show: true, size: 5, fill: "#212529", stroke: "#212529" } });
      }
      return linePlot(grid, `action ${d} (commanded) and state ${d} over the steps`, steps, ys, names,
        { width, height: 160, xLabel: "step", onSeek, series, colors: ["#3b5bdb", "#e8590c"] });
    });
  }

  // --- dataset ----------------------------------------------------------------------------------------------
  function datasetPage(root) {
    const eps = DATA.episodes;
    const withSuccess = eps.filter((e) => e.success !== null);
    const nSuccess = withSuccess.filter((e) => e.success).length;
    root.append(el("div", { class: "cards" },
      card(String(DATA.n_episodes), "episodes", DATA.n_shown < DATA.n_episodes ? `${DATA.n_shown} shown here (--episodes)` : null),
      card(String(DATA.n_frames), "frames"), card(fmt(DATA.fps), "fps"),
      withSuccess.length ? card(pct(100 * nSuccess / withSuccess.length), "episodes that succeed") : null,
      card(String(DATA.cameras.length), "cameras", DATA.cameras.join(", ")),
      card(String(DATA.tasks.length), "tasks", DATA.tasks.length === 1 ? DATA.tasks[0] : null),
      DATA.codebase_version ? card(DATA.codebase_version, "format") : null));
    const left = el("div", { class: "panel" }), right = el("div", { class: "panel", id: "episode" });
    root.append(el("div", { class: "layout" }, left, right));
    const columns = [
      { key: "index", label: "episode", value: (r) => r.index, cell: (r) => el("td", {}, r.index) },
      { key: "length", label: "length", value: (r) => r.length, cell: (r) => el("td", {}, r.length) },
      { key: "success", label: "result", value: (r) => r.success, cell: (r) => resultCell(r.success) },
      { key: "max_reward", label: "max reward", value: (r) => r.max_reward, cell: (r) => el("td", {}, fmt(r.max_reward)) },
      { key: "task", label: "task", left: true, value: (r) => r.task, cell: (r) => el("td", { class: "l", title: r.task }, r.task.length > 40 ? r.task.slice(0, 38) + "…" : r.task) },
    ];
    let cursor = null;
    const table = sortableTable(columns, eps, eps.map((e) => e.index), (row) => showEpisode(row));
    keys = { table, cursor: () => cursor };
    const result = el("select", { id: "filter-result" }, el("option", { value: "" }, "all results"),
      el("option", { value: "success" }, "successes"), el("option", { value: "failure" }, "failures"));
    const task = el("select", { id: "filter-task" }, el("option", { value: "" }, "all tasks"), DATA.tasks.map((t) => el("option", { value: t }, t.slice(0, 50))));
    const minLength = el("input", { id: "filter-length", type: "number", min: 0, placeholder: "min length", style: "width:90px" });
    const count = el("span", { class: "note" });
    function applyFilter() {
      const r = result.value, t = task.value, m = Number(minLength.value || 0);
      table.setFilter((e) => (!r || (r === "success") === !!e.success) && (!t || e.task.includes(t)) && e.length >= m);
      count.textContent = `${table.visible().length} of ${eps.length}`;
    }
    [result, task, minLength].forEach((c) => c.addEventListener("input", applyFilter));
    left.append(el("h2", {}, "episodes"), el("div", { class: "filters" }, result, DATA.tasks.length > 1 ? task : null, minLength, count),
      el("div", { class: "tablewrap" }, table.table));
    applyFilter();
    function showEpisode(row) {
      if (cursor) cursor.stop();
      right.replaceChildren(el("h2", {}, `episode ${row.index} · ${row.length} frames · ${(row.length / DATA.fps).toFixed(1)} s`,
        row.success === null ? "" : " · ", row.success === null ? "" : el("span", { class: row.success ? "ok" : "bad" }, row.success ? "success" : "failure")),
        el("div", { class: "note" }, row.task));
      const videos = [];
      const figures = DATA.cameras.map((key) => {
        const span = row.cameras[key];
        const video = el("video", { src: DATA.video_files[span.file], preload: "auto", muted: true, playsinline: true });
        video.muted = true;
        videos.push({ el: video, from: span.from });
        return el("figure", {}, video, el("figcaption", {}, key));
      });
      right.append(el("div", { class: "videos" }, figures));
      let plots = [];
      cursor = timeCursor(right, videos, DATA.fps, row.length, (f) => f, (x) => plots.forEach((p) => p.setMarker(x)));
      if (!row.series) {
        right.append(el("p", { class: "note" }, "plots left out: the page holds the series of the first episodes only (too many frames)"));
        return;
      }
      const frames = Array.from({ length: row.length }, (_, i) => i);
      const { grid, width } = plotGrid(right);
      plots = DATA.series_keys.map(({ key, names }) => linePlot(grid, key, frames, row.series[key], names,
        { width, xLabel: "frame", height: 150, onSeek: (x) => cursor.show(x) }));
      plots.forEach((p) => p.setMarker(0));
    }
    if (eps.length) table.select(eps[0].index);
    const features = el("table", { class: "kv", id: "features" },
      el("thead", {}, el("tr", {}, ["feature", "dtype", "shape", "dimension", "mean", "std", "min", "max"].map((h) => el("th", { class: "l" }, h)))),
      el("tbody", {}, DATA.features.flatMap((f) => {
        if (!f.names || !f.stats) return [el("tr", {}, el("td", {}, f.key), el("td", {}, f.dtype), el("td", {}, JSON.stringify(f.shape)), el("td", { colspan: 5 }, ""))];
        return f.names.map((name, d) => el("tr", {}, el("td", {}, d === 0 ? f.key : ""), el("td", {}, d === 0 ? f.dtype : ""),
          el("td", {}, d === 0 ? JSON.stringify(f.shape) : ""), el("td", {}, name),
          ["mean", "std", "min", "max"].map((s) => el("td", {}, fmt(f.stats[s] ? f.stats[s][d] : null, 4)))));
      })));
    root.append(el("div", { class: "panel", style: "margin-top:14px" }, el("h2", {}, `features and stats (${fmt(DATA.fps)} fps)`), features));
  }

  // --- training run -----------------------------------------------------------------------------------------
  function runPage(root) {
    const evals = DATA.evaluations;
    const best = evals.length ? evals.reduce((a, b) => (b.pc_success > a.pc_success ? b : a)) : null;
    const last = evals.length ? evals[evals.length - 1] : null;
    root.append(el("div", { class: "cards" },
      card(DATA.policy_type || "–", "policy"),
      card(`${fmt(DATA.last_step)}${DATA.steps ? " / " + DATA.steps : ""}`, "steps logged"),
      last ? card(pct(last.pc_success), `success at step ${last.step}`, `95% CI ${last.ci95[0].toFixed(1)}–${last.ci95[1].toFixed(1)}%`) : null,
      best ? card(pct(best.pc_success), `best success (step ${best.step})`) : null,
      card(String(evals.length), "evaluations")));
    const outer = el("div", { class: "panel", id: "curves" });
    root.append(outer);
    const { grid: panel, width } = plotGrid(outer);
    const c = DATA.curves;
    if (c.loss) linePlot(panel, "training loss (log scale)", c.loss[0], [c.loss[1]], ["loss"], { width, yScale: { distr: 3 }, yLabel: "loss" });
    if (evals.length) {
      linePlot(panel, "eval success over steps, with its 95% Wilson interval", evals.map((e) => e.step),
        [evals.map((e) => e.pc_success), evals.map((e) => e.ci95[0]), evals.map((e) => e.ci95[1])],
        ["success %", "CI low", "CI high"], { width, points: true, yLabel: "%", colors: ["#2f9e44", "#8ce99a", "#8ce99a"], dashes: [null, [4, 4], [4, 4]], yScale: { range: [0, 100] } });
    }
    if (evals.length) {
      linePlot(panel, "eval average max reward over steps", evals.map((e) => e.step), [evals.map((e) => e.avg_max_reward)],
        ["avg max reward"], { width, points: true, yLabel: "reward", colors: ["#e8590c"] });
    }
    if (c.lr) linePlot(panel, "learning rate", c.lr[0], [c.lr[1]], ["lr"], { width, yLabel: "lr" });
    if (c.grad_norm) linePlot(panel, "gradient norm (before clipping)", c.grad_norm[0], [c.grad_norm[1]], ["grad norm"], { width });
    if (!c.loss) panel.append(el("p", { class: "note" }, "no loss logged yet (metrics.jsonl is empty)"));
    const rows = evals.map((e) => el("tr", {}, el("td", {}, e.step), el("td", {}, pct(e.pc_success)),
      el("td", {}, `${e.ci95[0].toFixed(1)}–${e.ci95[1].toFixed(1)}%`), el("td", {}, fmt(e.avg_max_reward)),
      el("td", {}, fmt(e.avg_length)), el("td", {}, e.n_episodes), el("td", {}, e.page ? el("a", { href: e.page }, "open page") : "")));
    root.append(el("div", { class: "panel", style: "margin-top:14px" }, el("h2", {}, "evaluations"),
      evals.length ? el("table", { id: "evaluations" }, el("thead", {}, el("tr", {}, ["step", "success", "95% CI", "avg max reward", "avg length", "episodes", ""].map((h) => el("th", {}, h)))), el("tbody", {}, rows))
        : el("p", { class: "note" }, "no evaluation yet (--eval.freq)")));
    const kv = Object.entries(DATA.config).map(([k, v]) => el("tr", {}, el("td", {}, k), el("td", {}, String(v))));
    root.append(el("details", { class: "panel" }, el("summary", {}, "train_config.json"), el("table", { class: "kv" }, el("tbody", {}, kv))));
  }

  // Keys: up/down (or j/k) the previous/next episode in the table, left/right a frame, space play/pause.
  let keys = null;
  document.addEventListener("keydown", (e) => {
    if (!keys || ["INPUT", "SELECT", "TEXTAREA"].includes(e.target.tagName) && e.target.type !== "range") return;
    const action = { ArrowDown: () => keys.table.step(1), j: () => keys.table.step(1), ArrowUp: () => keys.table.step(-1),
      k: () => keys.table.step(-1), ArrowRight: () => keys.cursor().step(1), ArrowLeft: () => keys.cursor().step(-1),
      " ": () => keys.cursor().toggle() }[e.key];
    if (action) { e.preventDefault(); action(); }
  });

  const app = document.getElementById("app");
  app.append(el("header", {}, el("h1", {}, DATA.title), el("span", { class: "src" }, DATA.source)));
  const main = el("main");
  app.append(main);
  ({ eval: evalPage, dataset: datasetPage, run: runPage })[DATA.kind](main);
  document.body.setAttribute("data-ready", "1");
})();
