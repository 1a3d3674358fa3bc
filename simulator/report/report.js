// servesim report: draws the page from its embedded JSON (#servesim-data) as inline SVG.
// No library and no network: every number shown comes from the data; nothing is simulated here.
"use strict";
(function () {
  const DATA = JSON.parse(document.getElementById("servesim-data").textContent);
  // The SVG namespace, taken from an element the HTML parser made (no URL written in the page).
  const SVG_NS = (() => { const d = document.createElement("div"); d.innerHTML = "<svg></svg>"; return d.firstChild.namespaceURI; })();
  const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
  const DASHES = ["", "6 3", "2 2", "8 3 2 3", "1 3"];   // replicas of one run among several
  const W = 640, H = 300, M = { l: 64, r: 16, t: 14, b: 44 };
  const tip = document.getElementById("tip");
  let clipCount = 0;   // each chart's clip path needs its own id

  function svg(tag, attrs, parent, text) {
    const e = document.createElementNS(SVG_NS, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }
  function html(tag, attrs, parent, text) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }
  function fmt(v) {
    if (v === null || v === undefined || Number.isNaN(v)) return "-";
    if (Number.isInteger(v)) return String(v);
    return Math.abs(v) >= 1000 ? v.toFixed(0) : String(Number(v.toPrecision(3)));
  }
  const ok = (v, log) => v !== null && Number.isFinite(v) && (!log || v > 0);

  // Axes: a linear range starts at zero (a flat 20 ms must read as 20 ms); log when asked or,
  // with "auto", when the values span more than a factor of 20.
  function extent(values, log, fromZero) {
    let lo = Infinity, hi = -Infinity;
    for (const v of values) if (ok(v, log)) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
    if (lo === Infinity) return log ? [1, 10] : [0, 1];
    if (log) return lo === hi ? [lo / 2, hi * 2] : [lo / 1.1, hi * 1.1];
    if (fromZero) lo = Math.min(lo, 0);
    return lo === hi ? [lo - 1, hi + 1] : [lo, hi + (hi - lo) * 0.04];
  }
  const wantsLog = (mode, values) => {
    if (mode !== "auto") return !!mode;
    const [lo, hi] = extent(values, true);
    return hi / lo > 20 * 1.21;
  };
  function scale(lo, hi, log, a, b) {
    if (log) { const l0 = Math.log10(lo), s = Math.log10(hi) - l0; return v => a + (Math.log10(v) - l0) / s * (b - a); }
    return v => a + (v - lo) / (hi - lo) * (b - a);
  }
  function ticks(lo, hi, log) {
    if (log) {
      const out = [], decades = Math.log10(hi / lo), steps = decades < 2.5 ? [1, 2, 5] : [1];
      for (let p = Math.floor(Math.log10(lo)); p <= Math.ceil(Math.log10(hi)); p++)
        for (const m of steps) { const v = m * 10 ** p; if (v >= lo && v <= hi) out.push(v); }
      return out;
    }
    const raw = (hi - lo) / 5, mag = 10 ** Math.floor(Math.log10(raw));
    const step = [1, 2, 5, 10].map(m => m * mag).find(s => s >= raw);
    const out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
    return out;
  }
  function axes(root, X, Y, xr, yr, o) {
    const g = svg("g", { class: "axes" }, root);
    for (const v of ticks(xr[0], xr[1], o.xlog)) {
      svg("line", { x1: X(v), x2: X(v), y1: M.t, y2: H - M.b, class: "grid" }, g);
      svg("text", { x: X(v), y: H - M.b + 15, "text-anchor": "middle" }, g, fmt(v));
    }
    for (const v of ticks(yr[0], yr[1], o.ylog)) {
      svg("line", { x1: M.l, x2: W - M.r, y1: Y(v), y2: Y(v), class: "grid" }, g);
      svg("text", { x: M.l - 6, y: Y(v) + 4, "text-anchor": "end" }, g, fmt(v));
    }
    svg("rect", { x: M.l, y: M.t, width: W - M.l - M.r, height: H - M.t - M.b, class: "frame" }, g);
    svg("text", { x: (M.l + W - M.r) / 2, y: H - 8, "text-anchor": "middle", class: "label" }, g, o.xlabel + (o.xlog ? " (log)" : ""));
    svg("text", { x: 14, y: (M.t + H - M.b) / 2, transform: `rotate(-90 14 ${(M.t + H - M.b) / 2})`, "text-anchor": "middle", class: "label" }, g, o.ylabel + (o.ylog ? " (log)" : ""));
  }

  // A legend shared by the charts of a section: clicking a name hides or shows it in all of them.
  function legend(parent, items) {
    const group = { hidden: new Set(), charts: [] };
    const bar = html("div", { class: "legend" }, parent);
    for (const it of items) {
      const b = html("button", { type: "button", class: "item" }, bar);
      html("span", { class: "swatch", style: `background:${it.color}` }, b);
      html("span", {}, b, it.label);
      b.addEventListener("click", () => {
        if (group.hidden.has(it.key)) group.hidden.delete(it.key); else group.hidden.add(it.key);
        b.classList.toggle("off", group.hidden.has(it.key));
        group.charts.forEach(draw => draw());
      });
    }
    html("span", { class: "hint" }, bar, "click a name to hide or show it; hover a chart for values");
    return group;
  }

  function showTip(e, text) {
    tip.textContent = text;
    tip.hidden = false;
    tip.style.left = `${e.clientX + 14}px`;
    tip.style.top = `${e.clientY + 14}px`;
  }

  // One chart. o: title, xlabel, ylabel, xlog/ylog (true, false or "auto"), yrange, step (lines
  // held until the next point), markers (with each point's label), hover ("nearest" or "x"),
  // hline {y, label}, series [{key, label, color, x, y, labels?, xci?, yci?}].
  function chart(parent, o, group) {
    const box = html("figure", { class: "chart" }, parent);
    html("figcaption", {}, box, o.title);
    const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "plot", role: "img" }, box);
    const allX = o.series.flatMap(s => s.x), allY = o.series.flatMap(s => s.y);
    o.xlog = wantsLog(o.xlog, allX); o.ylog = wantsLog(o.ylog, allY);
    function draw() {
      root.textContent = "";
      const vis = o.series.filter(s => !group.hidden.has(s.key));
      const xr = extent(vis.flatMap(s => s.x), o.xlog, !o.xlog && o.xzero !== false);
      if (o.markers) xr[1] = o.xlog ? xr[1] * 1.15 : xr[1] + (xr[1] - xr[0]) * 0.08;   // room for labels
      const yr = o.yrange || extent(vis.flatMap(s => s.y).concat(o.hline ? [o.hline.y] : []), o.ylog, true);
      if (o.markers && !o.yrange) yr[1] = o.ylog ? yr[1] * 1.5 : yr[1] + (yr[1] - yr[0]) * 0.06;
      const X = scale(xr[0], xr[1], o.xlog, M.l, W - M.r), Y = scale(yr[0], yr[1], o.ylog, H - M.b, M.t);
      axes(root, X, Y, xr, yr, o);
      if (o.hline) {
        svg("line", { x1: M.l, x2: W - M.r, y1: Y(o.hline.y), y2: Y(o.hline.y), class: "slo" }, root);
        svg("text", { x: W - M.r - 4, y: Y(o.hline.y) - 4, "text-anchor": "end", class: "slo-label" }, root, o.hline.label);
      }
      const clip = `servesim-clip-${++clipCount}`;
      svg("rect", { x: M.l, y: M.t, width: W - M.l - M.r, height: H - M.t - M.b }, svg("clipPath", { id: clip }, root));
      const plot = svg("g", { "clip-path": `url(#${clip})` }, root);
      const points = [];
      for (const s of vis) {
        let d = "";
        const pts = [];
        s.x.forEach((x, i) => {
          const y = s.y[i];
          if (!ok(x, o.xlog) || !ok(y, o.ylog)) return;
          const px = X(x).toFixed(1), py = Y(y).toFixed(1);
          d += !d ? `M${px},${py}` : o.step ? `H${px}V${py}` : `L${px},${py}`;
          pts.push({ s, i, px: +px, py: +py });
        });
        svg("path", Object.assign({ d, stroke: s.color, class: "line" }, s.dash ? { "stroke-dasharray": s.dash } : {}), plot);
        if (o.markers) for (const p of pts) {
          const ci = s.yci && s.yci[p.i];
          if (ci) svg("line", { x1: p.px, x2: p.px, y1: Y(Math.max(s.y[p.i] - ci, yr[0])), y2: Y(s.y[p.i] + ci), stroke: s.color, class: "ci" }, plot);
          svg("circle", { cx: p.px, cy: p.py, r: 3.5, fill: s.color }, plot);
          // Alternate series label above and below their points, so overlapping curves stay legible.
          if (s.labels) svg("text", { x: p.px + 5, y: p.py + (vis.indexOf(s) % 2 ? 14 : -6), fill: s.color, class: "point-label" }, plot, s.labels[p.i]);
        }
        points.push(...pts);
      }
      const hover = svg("g", { class: "hover" }, root);
      const area = svg("rect", { x: M.l, y: M.t, width: W - M.l - M.r, height: H - M.t - M.b, class: "hit" }, root);
      area.addEventListener("mouseleave", () => { hover.textContent = ""; tip.hidden = true; });
      area.addEventListener("mousemove", e => {
        const r = root.getBoundingClientRect();
        const mx = (e.clientX - r.left) * W / r.width, my = (e.clientY - r.top) * H / r.height;
        hover.textContent = "";
        if (o.hover === "x") return hoverX(e, mx, vis, X, hover);
        let best = null, bestD = 40 * 40;
        for (const p of points) { const dd = (p.px - mx) ** 2 + (p.py - my) ** 2; if (dd < bestD) { best = p; bestD = dd; } }
        if (!best) { tip.hidden = true; return; }
        svg("circle", { cx: best.px, cy: best.py, r: 5, class: "mark", stroke: best.s.color }, hover);
        const { s, i } = best, pm = v => v ? ` ± ${fmt(v)}` : "";
        const head = s.labels ? `${s.label}, ${s.labels[i]}` : s.label;
        showTip(e, `${head}\n${o.xname || o.xlabel}: ${fmt(s.x[i])}${pm(s.xci && s.xci[i])}\n${o.yname || o.ylabel}: ${fmt(s.y[i])}${pm(s.yci && s.yci[i])}`);
      });
      // The values of every shown series at the hovered time (a series holds until its next point).
      function hoverX(e, mx, shown, Xs, g) {
        const lo = xr[0], hi = xr[1], t = o.xlog ? lo * (hi / lo) ** ((mx - M.l) / (W - M.l - M.r)) : lo + (mx - M.l) / (W - M.l - M.r) * (hi - lo);
        svg("line", { x1: Xs(t), x2: Xs(t), y1: M.t, y2: H - M.b, class: "cursor" }, g);
        const lines = [`${o.xlabel}: ${fmt(t)}`];
        for (const s of shown) {
          let a = 0, b = s.x.length - 1;
          if (b < 0 || s.x[0] > t) continue;
          while (a < b) { const m = (a + b + 1) >> 1; if (s.x[m] <= t) a = m; else b = m - 1; }
          lines.push(`${s.label}: ${fmt(s.y[a])}`);
        }
        showTip(e, lines.join("\n"));
      }
    }
    group.charts.push(draw);
    draw();
  }

  function section(title, intro) {
    const sec = html("section", {}, document.getElementById("app"));
    html("h2", {}, sec, title);
    if (intro) html("p", { class: "intro" }, sec, intro);
    return sec;
  }
  const colored = items => items.map((it, i) => Object.assign({ color: COLORS[i % COLORS.length] }, it));

  function runsSection() {
    const runs = DATA.runs;
    if (!runs.length) return;
    const sec = section(`Run: ${DATA.title}`, `${runs.length} schedulers on the same requests. Latencies in ms; percentiles as in summary.json.`);
    const table = html("table", { class: "summary" }, sec);
    const head = html("tr", {}, html("thead", {}, table));
    html("th", {}, head, "scheduler");
    for (const [, name] of DATA.summary_columns) html("th", {}, head, name);
    const body = html("tbody", {}, table);
    for (const r of runs) {
      const tr = html("tr", {}, body);
      html("th", {}, tr, r.label);
      for (const [key] of DATA.summary_columns) html("td", { title: `${key} = ${r.summary[key]}` }, tr, fmt(r.summary[key]));
    }
    const items = colored(runs.map(r => ({ key: r.label, label: r.label })));
    const group = legend(sec, items);
    const grid = html("div", { class: "grid" }, sec);
    const series = (pick, xs, ys) => runs.map((r, i) => ({ key: r.label, label: r.label, color: items[i].color, x: pick(r)[xs], y: pick(r)[ys] }));
    for (const [col, name] of DATA.latencies)
      chart(grid, { title: `${name.split(" (")[0]} CDF`, xlabel: name, ylabel: "fraction of requests", xlog: "auto", xzero: false, yrange: [0, 1.02], hover: "nearest", series: series(r => r.cdfs[col], "x", "y") }, group);
    // One line per replica where a run has several: a colour each when the page shows one run,
    // else the run's colour with a dash pattern per replica (hover names every line).
    const engineLines = col => runs.flatMap((r, i) => r.series[col].map((line, j) => ({
      key: r.label, label: line.name ? `${r.label}: ${line.name}` : r.label,
      color: runs.length === 1 ? COLORS[j % COLORS.length] : items[i].color,
      dash: runs.length === 1 ? "" : DASHES[j % DASHES.length], x: line.t, y: line.y })));
    for (const [col, name] of DATA.engine_series)
      chart(grid, { title: `${name} over time`, xlabel: "time (s)", ylabel: name, step: true, hover: "x", series: engineLines(col) }, group);
  }

  function sweepSection() {
    const sw = DATA.sweep;
    if (!sw) return;
    const by = sw.load_key ? `labelled by ${sw.load_key}` : "labelled by their sweep point";
    const errors = sw.num_errors ? ` ${sw.num_errors} of ${sw.num_runs} runs could not finish and are left out.` : "";
    const sec = section(`Sweep: ${sw.scenario}`, `Throughput against latency; each point is the mean over seeds (bar: 95% interval), ${by}.${errors}`);
    const items = colored(sw.curves.map(c => ({ key: c.label, label: c.label })));
    const group = legend(sec, items);
    const grid = html("div", { class: "grid" }, sec);
    const xm = sw.x_metric;
    for (const p of sw.panels)
      chart(grid, {
        title: `${p.label.split(" (")[0]} vs throughput`, xlabel: "output throughput (tok/s)", xname: "output tok/s", ylabel: p.label,
        ylog: "auto", markers: true, hover: "nearest", hline: p.slo_ms === null ? null : { y: p.slo_ms, label: `SLO ${fmt(p.slo_ms)} ms` },
        series: sw.curves.map((c, i) => ({ key: c.label, label: c.label, color: items[i].color, labels: c.labels,
          x: c.metrics[xm].mean, y: c.metrics[p.metric].mean, xci: c.metrics[xm].ci, yci: c.metrics[p.metric].ci })),
      }, group);
  }

  window.servesimReport = { DATA, html, svg, fmt, section };
  runsSection();
  sweepSection();
})();
