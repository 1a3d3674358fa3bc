// servesim report: the textbook toy, played back. Every slot row was recorded by the simulator
// (simulator/report/toy.py); this file only draws the rows that have started by the time shown.
"use strict";
(function () {
  const { DATA, html, svg, fmt, section } = window.servesimReport;
  const toy = DATA.toy;
  if (!toy || !toy.cases.length) return;
  const W = 640, LANE = 30, TOP = 8, AXIS = 30, L = 54, R = 14;
  const STEPS_PER_S = 20, TICK_MS = 40;   // playback: 20 simulated steps per second at 1x
  const col = Object.fromEntries(toy.columns.map((c, i) => [c, i]));
  const state = { slots: toy.slots.includes(4) ? 4 : toy.slots[0], lengths: toy.lengths.includes("varied") ? "varied" : toy.lengths[0], t: 0, playing: true, speed: 1 };

  const sec = section("The textbook toy: static vs continuous batching",
    `${toy.num_requests} requests arrive at t=0 with ${toy.prompt_len}-token prompts; every step costs ${fmt(toy.step_time_s)} s and a prompt takes one step. ` +
    "Each lane is a batch slot; a bar is the request holding it (darker: its prefill step). Static batching refills no slot until the whole batch " +
    "has finished; continuous batching refills a slot the step after it frees. Both timelines were simulated by servesim; this page only plays them back.");
  const bar = html("div", { class: "controls" }, sec);
  const play = html("button", { type: "button", id: "toy-play" }, bar, "Pause");
  const scrub = html("input", { type: "range", id: "toy-time", min: 0, max: 1, step: 0.1, value: 0 }, bar);
  const clock = html("span", { class: "clock" }, bar);
  const slotsLabel = html("label", {}, bar, "slots ");
  const slots = html("select", { id: "toy-slots" }, slotsLabel);
  for (const k of toy.slots) html("option", { value: k }, slots, String(k));
  slots.value = String(state.slots);
  const lengthButtons = toy.lengths.map(name => {
    const b = html("button", { type: "button", class: "toggle", "data-lengths": name }, bar, `${name} output lengths`);
    b.addEventListener("click", () => { state.lengths = name; restart(); });
    return b;
  });
  const speedLabel = html("label", {}, bar, "speed ");
  const speed = html("select", { id: "toy-speed" }, speedLabel);
  for (const s of [0.5, 1, 2, 4]) html("option", { value: s }, speed, `${s}x`);
  speed.value = "1";
  const lens = html("p", { class: "intro" }, sec);
  const grid = html("div", { class: "grid toy" }, sec);
  const panels = ["static", "continuous"].map(role => {
    const box = html("figure", { class: "chart lane-panel" }, grid);
    return { role, title: html("figcaption", {}, box), root: svg("svg", { class: "plot" }, box),
             stats: html("p", { class: "stats" }, box), live: html("p", { class: "live" }, box) };
  });
  const kinds = html("p", { class: "kinds" }, sec);
  for (const [name, cls] of [["prefill", "k-prefill"], ["decode", "k-decode"], ["stalled (holds its slot, computes nothing)", "k-stalled"], ["preempted", "k-preempted"]]) {
    html("span", { class: `swatch ${cls}` }, kinds);
    html("span", {}, kinds, name);
  }

  const hue = rid => (rid * 137.508) % 360;   // golden-angle hues: neighbouring ids differ
  const current = () => toy.cases.find(c => c.slots === state.slots && c.lengths === state.lengths);
  let shapes = [], tmax = 1;

  // Rebuild both panels for the chosen slots and lengths: one rect per recorded row.
  function build() {
    const c = current();
    tmax = Math.max(c.static.finish_s, c.continuous.finish_s);
    scrub.max = tmax;
    lens.textContent = `Output lengths in arrival order: ${c.output_lens.join(" ")} (sum ${c.output_lens.reduce((a, b) => a + b, 0)}).`;
    lengthButtons.forEach(b => b.classList.toggle("on", b.dataset.lengths === state.lengths));
    shapes = [];
    const X = t => L + t / tmax * (W - L - R);
    for (const p of panels) {
      const lane = c[p.role], H = TOP + state.slots * LANE + AXIS;
      p.root.setAttribute("viewBox", `0 0 ${W} ${H}`);
      p.root.textContent = "";
      p.title.textContent = `${lane.label} (${p.role === "static" ? "static batching" : "continuous batching"}), ${state.slots} slot${state.slots > 1 ? "s" : ""}`;
      for (let k = 0; k < state.slots; k++)
        svg("text", { x: L - 6, y: TOP + k * LANE + LANE / 2 + 4, "text-anchor": "end" }, p.root, `slot ${k}`);
      const step = Math.max(1, Math.ceil(tmax / 10 / 5) * 5);
      for (let t = 0; t <= tmax; t += step) {
        svg("line", { x1: X(t), x2: X(t), y1: TOP, y2: H - AXIS, class: "grid" }, p.root);
        svg("text", { x: X(t), y: H - AXIS + 15, "text-anchor": "middle" }, p.root, fmt(t));
      }
      svg("text", { x: L - 6, y: H - AXIS + 15, "text-anchor": "end", class: "label" }, p.root, "t (s)");
      const finish = {}, held = {};   // request -> last end; lane:request -> end of its stay there
      const first = shapes.length;
      for (const row of lane.rows) {
        const [k, s, e, rid, kind] = [row[col.lane], row[col.start_s], row[col.end_s], row[col.request_id], row[col.kind]];
        finish[rid] = Math.max(finish[rid] || 0, e);
        held[`${k}:${rid}`] = Math.max(held[`${k}:${rid}`] || 0, e);
        const y = TOP + k * LANE + 2, el = kind === "preempted"
          ? svg("text", { x: X(s), y: y + LANE - 8, "text-anchor": "middle", class: "k-preempted-x" }, p.root, "x")
          : svg("rect", { x: X(s), y, height: LANE - 4, width: 0, class: `k-${kind}`,
                          style: kind === "stalled" ? "" : `fill:hsl(${hue(rid)},60%,${kind === "prefill" ? 38 : 66}%)` }, p.root);
        shapes.push({ el, s, e, kind, X, key: `${k}:${rid}`, at: [X(e) + 2, y + LANE / 2 + 4, `#${rid}`] });
      }
      for (const sh of shapes.slice(first)) if (sh.kind === "prefill") {   // on top of every bar
        sh.label = svg("text", { x: sh.at[0], y: sh.at[1], class: "rid" }, p.root, sh.at[2]);
        sh.labelEnd = held[sh.key];
      }
      p.finish = Object.values(finish);
      p.cursor = svg("line", { y1: TOP - 4, y2: H - AXIS, class: "cursor" }, p.root);
      p.X = X;
      p.stats.textContent = `finishes at t = ${fmt(lane.finish_s)} s (${lane.num_steps} steps) · ${fmt(lane.output_throughput)} output tok/s · ${fmt(lane.request_throughput)} req/s`;
    }
    const ratio = c.static.finish_s / c.continuous.finish_s;
    panels[0].stats.textContent += ` · ${fmt(ratio)}x the continuous lane's time`;
  }

  // Show time t: each row drawn up to min(its end, t); the clock and requests done below.
  function render() {
    for (const sh of shapes) {
      if (sh.kind === "preempted") { sh.el.style.display = state.t > 0 && sh.s <= state.t ? "" : "none"; continue; }
      sh.el.setAttribute("width", sh.s < state.t ? sh.X(Math.min(sh.e, state.t)) - sh.X(sh.s) : 0);
      if (sh.label) sh.label.style.display = sh.X(Math.min(sh.labelEnd, state.t)) - sh.X(sh.s) >= 22 ? "" : "none";
    }
    for (const p of panels) {
      p.cursor.setAttribute("x1", p.X(state.t)); p.cursor.setAttribute("x2", p.X(state.t));
      const done = p.finish.filter(f => f <= state.t).length;
      p.live.textContent = `t = ${state.t.toFixed(1)} s: ${done} of ${p.finish.length} requests finished`;
    }
    scrub.value = state.t;
    clock.textContent = `t = ${state.t.toFixed(1)} / ${fmt(tmax)} s`;
    play.textContent = state.playing ? "Pause" : state.t >= tmax ? "Replay" : "Play";
  }
  function restart() { state.t = 0; state.playing = true; build(); render(); }

  play.addEventListener("click", () => {
    if (!state.playing && state.t >= tmax) state.t = 0;
    state.playing = !state.playing;
    render();
  });
  scrub.addEventListener("input", () => { state.t = Number(scrub.value); state.playing = false; render(); });
  slots.addEventListener("change", () => { state.slots = Number(slots.value); restart(); });
  speed.addEventListener("change", () => { state.speed = Number(speed.value); });
  setInterval(() => {
    if (!state.playing) return;
    state.t = Math.min(tmax, state.t + state.speed * STEPS_PER_S * toy.step_time_s * TICK_MS / 1000);
    if (state.t >= tmax) state.playing = false;
    render();
  }, TICK_MS);
  build();
  render();
})();
