// A job's overview: totals, status counts, reward over time, the heat map, phases, failures, the rollout table;
// and two jobs side by side.
function jobView(j) {
  const job = JOBS[j];
  const sum = job.summary;
  const view = [
    h("h1", {}, "Job ", job.name),
    h(
      "div",
      { class: "meta" },
      `${job.path} · image ${job.image || "–"} · model ${job.model || "–"} · ${job.tasks.length} tasks × ${job.n_attempts} attempts · ${job.n_concurrent} at once · `,
      h("span", { "data-key": "complete", "data-job": j }, job.complete ? "complete" : "incomplete")
    ),
    h(
      "div",
      { class: "cards", id: `totals-${j}` },
      card("finished", job.finished, "finished", j),
      card("of total", job.total, "total", j),
      card("mean reward", sum.reward_mean, "reward_mean", j),
      card("rollouts", sum.rollouts, "rollouts", j),
      card("turns", sum.turns, "turns", j),
      card("tokens", sum.tokens, "tokens", j),
      card("calls without token ids", sum.calls_without_token_ids, "calls_without_token_ids", j)
    ),
    h("div", { class: "grid2" }, h("div", {}, h("h2", {}, "Status"), statusChart(j)), h("div", {}, h("h2", {}, "Reward over time"), timeline(j))),
    h("h2", {}, "Reward per task and attempt"),
    heatmap(j),
    h("h2", {}, "Time per phase"),
    phaseView(j),
    h("h2", {}, "Failures by cause"),
    failures(j),
    h("h2", {}, "Rollouts"),
    rolloutTable(j),
  ];
  return view;
}

function statusChart(j) {
  const statuses = JOBS[j].summary.statuses;
  const entries = Object.entries(statuses);
  const most = Math.max(1, ...entries.map(([, n]) => n));
  const rows = entries.map(([status, n]) =>
    h(
      "tr",
      { "data-status": status, "data-job": j },
      h("td", { class: statusClass(status) }, status),
      h("td", { class: "num", "data-value": n }, fmt(n)),
      h("td", {}, s("svg", { width: 220, height: 12 }, s("rect", { x: 0, y: 1, width: Math.max(1, (200 * n) / most), height: 10, fill: status === "ok" ? "#1a7f37" : "#c62828" })))
    )
  );
  return h("table", { class: "statuses" }, rows.length ? rows : h("tr", {}, h("td", {}, "no rollout finished")));
}

function rewardColor(reward, low, high) {
  const t = high > low ? Math.min(1, Math.max(0, (reward - low) / (high - low))) : reward > 0 ? 1 : 0;
  const r = Math.round(198 + (26 - 198) * t), g = Math.round(40 + (127 - 40) * t), b = Math.round(40 + (55 - 40) * t);
  return `rgb(${r},${g},${b})`;
}

function heatmap(j) {
  const job = JOBS[j];
  const tasks = job.tasks.length ? job.tasks : [...new Set(job.rows.map((r) => r.task))];
  const attempts = Math.max(job.n_attempts || 1, ...job.rows.map((r) => r.attempt + 1));
  const rewards = job.rows.map((r) => r.reward);
  const low = Math.min(0, ...rewards), high = Math.max(1, ...rewards);
  const cw = Math.max(4, Math.min(28, Math.floor(900 / attempts)));
  const ch = tasks.length > 80 ? 4 : 16;
  const left = ch >= 12 ? Math.min(220, 8 + 7 * Math.max(...tasks.map((t) => t.length))) : 8;
  const top = 18;
  const svg = s("svg", { width: left + cw * attempts + 10, height: top + ch * tasks.length + 4, class: "heatmap", "data-job": j });
  const line = new Map(tasks.map((t, i) => [t, i]));
  if (cw >= 14) for (let a = 0; a < attempts; a++) svg.append(s("text", { x: left + a * cw + cw / 2, y: 12, "text-anchor": "middle" }, String(a)));
  if (ch >= 12) tasks.forEach((t, i) => svg.append(s("text", { x: left - 6, y: top + i * ch + ch - 4, "text-anchor": "end" }, t)));
  job.rows.forEach((row, i) => {
    const y = line.get(row.task);
    if (y === undefined) return;
    const rect = s("rect", {
      class: "cell",
      x: left + row.attempt * cw,
      y: top + y * ch,
      width: cw - 1,
      height: ch - 1,
      fill: rewardColor(row.reward, low, high),
      "data-i": i,
    });
    rect.append(s("title", {}, `${row.task} #${row.attempt}: reward ${fmt(row.reward)}, ${row.status}`));
    svg.append(rect);
    if (row.status !== "ok" && ch >= 12) svg.append(s("text", { x: left + row.attempt * cw + cw / 2 - 0.5, y: top + y * ch + ch - 4, "text-anchor": "middle", style: "fill:#fff;pointer-events:none" }, "!"));
  });
  svg.addEventListener("click", (event) => {
    const i = event.target.getAttribute && event.target.getAttribute("data-i");
    if (i !== null && i !== undefined) location.hash = `#rollout/${j}/${i}`;
  });
  return h("div", {}, svg, h("div", { class: "legend" }, `green: reward ${fmt(high)}, red: ${fmt(low)}; “!” marks a status other than ok; click a cell for its rollout`));
}

function timeline(j) {
  const rows = JOBS[j].rows;
  if (!rows.length) return h("p", {}, "no rollout finished");
  const timed = rows.every((r) => r.start_s !== null && r.start_s !== undefined);
  const points = rows.map((r, i) => [timed ? r.start_s : i, r.reward]).sort((a, b) => a[0] - b[0]);
  const W = 520, H = 200, L = 40, B = 24;
  const xs = points.map((p) => p[0]), ys = points.map((p) => p[1]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs, x0 + 1e-9);
  const y0 = Math.min(0, ...ys), y1 = Math.max(1, ...ys);
  const X = (x) => L + ((x - x0) / (x1 - x0 || 1)) * (W - L - 10);
  const Y = (y) => H - B - ((y - y0) / (y1 - y0 || 1)) * (H - B - 10);
  const svg = s("svg", { width: W, height: H, class: "timeline", "data-job": j });
  svg.append(s("line", { x1: L, y1: H - B, x2: W - 10, y2: H - B, stroke: "#ccc" }), s("line", { x1: L, y1: 10, x2: L, y2: H - B, stroke: "#ccc" }));
  svg.append(s("text", { x: L - 4, y: Y(y1) + 4, "text-anchor": "end" }, fmt(y1)), s("text", { x: L - 4, y: Y(y0) + 4, "text-anchor": "end" }, fmt(y0)));
  svg.append(s("text", { x: W - 10, y: H - 6, "text-anchor": "end" }, timed ? `seconds since the first model call (${fmt(x1)})` : `rollouts in start order (${points.length})`));
  if (points.length <= 2000) for (const [x, y] of points) svg.append(s("circle", { cx: X(x), cy: Y(y), r: 2, fill: "#2f5fb3", "fill-opacity": 0.35 }));
  const span = Math.max(Math.min(5, points.length), Math.round(points.length / 20));
  let sum = 0;
  const path = [];
  points.forEach(([x, y], i) => {
    sum += y;
    if (i >= span) sum -= points[i - span][1];
    const n = Math.min(i + 1, span);
    path.push(`${i ? "L" : "M"}${X(x).toFixed(1)},${Y(sum / n).toFixed(1)}`);
  });
  svg.append(s("path", { d: path.join(""), fill: "none", stroke: "#1d2330", "stroke-width": 1.5 }));
  return h("div", {}, svg, h("div", { class: "legend" }, `dots: each rollout's reward; line: mean of the last ${span}`));
}

function phaseView(j) {
  const job = JOBS[j];
  const names = [...PHASES, "ready", "total"].filter((p) => job.phases[p]);
  if (!names.length) return h("p", {}, "no timings");
  const W = 420, rowH = 18;
  const rows = names.map((name) => {
    const st = job.phases[name];
    const sp = job.summary.phases[name] || {};
    const scale = (v) => 4 + (st.max > 0 ? (v / st.max) * (W - 8) : 0);
    const box = s(
      "svg",
      { width: W, height: rowH },
      s("line", { x1: scale(st.min), x2: scale(st.max), y1: rowH / 2, y2: rowH / 2, stroke: "#999" }),
      s("rect", { x: scale(st.p25), y: 3, width: Math.max(1, scale(st.p75) - scale(st.p25)), height: rowH - 6, fill: "#dbe5f6", stroke: "#2f5fb3" }),
      s("line", { x1: scale(st.p50), x2: scale(st.p50), y1: 2, y2: rowH - 2, stroke: "#1d2330", "stroke-width": 2 }),
      s("line", { x1: scale(st.p95), x2: scale(st.p95), y1: 4, y2: rowH - 4, stroke: "#c62828", "stroke-width": 2 })
    );
    return h(
      "tr",
      { "data-phase": name, "data-job": j },
      h("td", {}, name),
      h("td", { class: "num p50", "data-value": JSON.stringify(sp.p50 ?? null) }, secs(sp.p50)),
      h("td", { class: "num p95", "data-value": JSON.stringify(sp.p95 ?? null) }, secs(sp.p95)),
      h("td", { class: "num" }, secs(st.max)),
      h("td", {}, box)
    );
  });
  return h(
    "div",
    {},
    h("table", { class: "phases" }, h("tr", {}, h("th", {}, "phase"), h("th", { class: "num" }, "p50"), h("th", { class: "num" }, "p95"), h("th", { class: "num" }, "max"), h("th", {}, "min · p25–p75 · p50 (black) · p95 (red) · max")), rows),
    h("div", { class: "legend" }, "each row on its own scale, 0 to its max")
  );
}

function failures(j) {
  const groups = JOBS[j].failures;
  if (!groups.length) return h("p", { class: "status-ok" }, "every rollout ended ok");
  return groups.map((group) =>
    h(
      "div",
      { class: "failure", "data-status": group.status },
      h("div", {}, h("b", { class: "status-bad" }, group.status), ` × ${group.rollouts.length} — `, group.cause),
      h("pre", {}, group.messages.join("\n")),
      h("div", { class: "legend" }, "rollouts: ", group.rollouts.slice(0, 30).map((i) => [rolloutLink(j, i, JOBS[j].rows[i].folder), " "]), group.rollouts.length > 30 ? `and ${group.rollouts.length - 30} more` : "")
    )
  );
}

function rolloutTable(j) {
  const rows = JOBS[j].rows;
  const body = h("tbody");
  const info = h("span", { class: "legend" });
  let page = 0, shown = rows.map((_, i) => i);
  const draw = () => {
    body.replaceChildren(
      ...shown.slice(page * PAGE, (page + 1) * PAGE).map((i) => {
        const r = rows[i];
        return h(
          "tr",
          { "data-i": i },
          h("td", {}, rolloutLink(j, i, r.folder)),
          h("td", { class: statusClass(r.status) }, r.status),
          h("td", { class: "num" }, fmt(r.reward)),
          h("td", { class: "num" }, fmt(r.turns)),
          h("td", { class: "num" }, fmt(r.tokens)),
          h("td", { class: "num" }, secs(r.total_s)),
          h("td", {}, r.error || "")
        );
      })
    );
    const pages = Math.max(1, Math.ceil(shown.length / PAGE));
    info.textContent = `${shown.length} rollouts · page ${page + 1} of ${pages}`;
  };
  const filter = h("input", {
    type: "search",
    placeholder: "filter: task, status, id",
    oninput: (event) => {
      const q = event.target.value.toLowerCase();
      shown = rows.map((_, i) => i).filter((i) => !q || `${rows[i].folder} ${rows[i].status} ${rows[i].id}`.toLowerCase().includes(q));
      page = 0;
      draw();
    },
  });
  const pager = h(
    "div",
    { class: "pager" },
    filter,
    h("button", { onclick: () => { if (page > 0) { page--; draw(); } } }, "‹ previous"),
    h("button", { onclick: () => { if ((page + 1) * PAGE < shown.length) { page++; draw(); } } }, "next ›"),
    info
  );
  draw();
  const head = h("tr", {}, ["rollout", "status", "reward", "turns", "tokens", "total", "error"].map((c) => h("th", {}, c)));
  return h("div", {}, pager, h("table", { class: "rollouts", "data-job": j }, h("thead", {}, head), body));
}

function compareView() {
  const [a, b] = JOBS;
  const row = (label, key, va, vb) => {
    const delta = typeof va === "number" && typeof vb === "number" ? vb - va : null;
    const rewardLike = key === "reward_mean" || key.startsWith("task."); // green where B's reward is higher
    return h(
      "tr",
      { "data-key": key },
      h("td", {}, label),
      h("td", { class: "num", "data-job": 0, "data-value": JSON.stringify(va ?? null) }, fmt(va)),
      h("td", { class: "num", "data-job": 1, "data-value": JSON.stringify(vb ?? null) }, fmt(vb)),
      h("td", { class: `num ${rewardLike && delta > 0 ? "delta-up" : rewardLike && delta < 0 ? "delta-down" : ""}` }, delta === null ? "" : (delta > 0 ? "+" : "") + fmt(delta))
    );
  };
  const metrics = [
    ["finished", "finished", a.finished, b.finished],
    ["of total", "total", a.total, b.total],
    ["mean reward", "reward_mean", a.summary.reward_mean, b.summary.reward_mean],
    ["rollouts", "rollouts", a.summary.rollouts, b.summary.rollouts],
    ["turns", "turns", a.summary.turns, b.summary.turns],
    ["tokens", "tokens", a.summary.tokens, b.summary.tokens],
    ["calls without token ids", "calls_without_token_ids", a.summary.calls_without_token_ids, b.summary.calls_without_token_ids],
  ];
  const statuses = [...new Set([...Object.keys(a.summary.statuses), ...Object.keys(b.summary.statuses)])].sort();
  for (const st of statuses) metrics.push([`status ${st}`, `status.${st}`, a.summary.statuses[st] || 0, b.summary.statuses[st] || 0]);
  for (const p of [...PHASES, "ready", "total"]) {
    const pa = a.summary.phases[p], pb = b.summary.phases[p];
    if (pa || pb) metrics.push([`${p} p50 (s)`, `phases.${p}.p50`, pa ? pa.p50 : null, pb ? pb.p50 : null]);
  }
  const head = h("tr", {}, h("th", {}, ""), h("th", { class: "num" }, h("a", { href: "#job/0" }, `A: ${a.name}`)), h("th", { class: "num" }, h("a", { href: "#job/1" }, `B: ${b.name}`)), h("th", { class: "num" }, "B − A"));
  const mean = (job, task) => {
    const rs = job.rows.filter((r) => r.task === task);
    return rs.length ? rs.reduce((x, r) => x + r.reward, 0) / rs.length : null;
  };
  const tasks = [...new Set([...a.tasks, ...b.tasks])].sort();
  return [
    h("h1", {}, `${a.name} vs ${b.name}`),
    h("div", { class: "meta" }, `A: ${a.path} (${a.image || "–"}, model ${a.model || "–"}) · B: ${b.path} (${b.image || "–"}, model ${b.model || "–"})`),
    h("h2", {}, "Totals"),
    h("table", { class: "compare" }, head, metrics.map((m) => row(...m))),
    h("h2", {}, "Mean reward per task"),
    h("table", { class: "compare-tasks" }, head.cloneNode(true), tasks.map((t) => row(t, `task.${t}`, mean(a, t), mean(b, t)))),
    h("div", { class: "grid2" }, [0, 1].map((j) => h("div", {}, h("h2", {}, `${j ? "B" : "A"}: reward per task and attempt`), heatmap(j)))),
    h("div", { class: "grid2" }, [0, 1].map((j) => h("div", {}, h("h2", {}, `${j ? "B" : "A"}: reward over time`), timeline(j)))),
  ];
}
