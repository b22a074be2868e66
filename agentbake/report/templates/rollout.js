// A rollout's page: its result, timings, turns, workdir diff and verifier output.
function rolloutView(j, i) {
  const row = JOBS[j].rows[i];
  const d = detailOf(j, i);
  const nav = h(
    "div",
    { class: "pager" },
    i > 0 ? rolloutLink(j, i - 1, "‹ previous rollout") : "",
    h("a", { href: JOBS.length > 1 ? `#job/${j}` : "#" }, "job"),
    i + 1 < JOBS[j].rows.length ? rolloutLink(j, i + 1, "next rollout ›") : ""
  );
  return [
    nav,
    h("h1", {}, `${row.task} #${row.attempt}`, h("span", { class: "meta" }, ` ${row.id}`)),
    h("div", { class: "meta" }, `agent ${d.agent} ${d.agent_version || ""} · image ${d.image}${d.task_image ? " on " + d.task_image : ""} · trainable ${fmt(d.trainable)}`),
    h(
      "div",
      { class: "cards" },
      h("div", { class: "card", "data-key": "status" }, h("div", { class: "label" }, "status"), h("div", { class: `value ${statusClass(row.status)}` }, row.status)),
      card("reward", row.reward, "reward"),
      card("turns", row.turns, "turns"),
      card("tokens", row.tokens, "tokens"),
      card("agent exit", d.exit_code, "exit_code"),
      card("verifier exit", d.verifier_exit_code, "verifier_exit_code"),
      card("calls without token ids", d.calls_without_token_ids, "calls_without_token_ids")
    ),
    d.error ? [h("h2", {}, "Error"), h("pre", { class: "status-bad" }, d.error)] : null,
    d.notes && d.notes.length ? [h("h2", {}, "Notes"), h("ul", {}, d.notes.map((n) => h("li", {}, n)))] : null,
    h("h2", {}, "Timings"),
    timingBar(d.timings || {}),
    h("h2", {}, `Turns (${d.turns.length})`),
    d.skipped.length ? h("pre", { class: "status-bad" }, d.skipped.join("\n")) : null,
    d.turns.length ? d.turns.map(turnView) : h("p", {}, "no model call recorded (no trace.jsonl, or an empty one)"),
    h("h2", {}, "Workdir diff"),
    d.diff ? diffView(d.diff) : h("p", {}, "no workdir.diff"),
    h("h2", {}, "Verifier output"),
    h("h3", {}, "stdout"),
    d.verifier_stdout !== null ? h("pre", { class: "verifier-stdout" }, d.verifier_stdout) : h("p", {}, "none"),
    h("h3", {}, "stderr"),
    d.verifier_stderr !== null ? h("pre", { class: "verifier-stderr" }, d.verifier_stderr) : h("p", {}, "none"),
  ];
}

function timingBar(timings) {
  const phases = PHASES.filter((p) => timings[p] > 0);
  const total = phases.reduce((a, p) => a + timings[p], 0) || 1;
  const colors = ["#8da0cb", "#66c2a5", "#fc8d62", "#e78ac3", "#2f5fb3", "#a6d854", "#ffd92f", "#e5c494", "#b3b3b3"];
  const svg = s("svg", { width: 700, height: 22 });
  let x = 0;
  phases.forEach((p) => {
    const w = (timings[p] / total) * 700;
    const rect = s("rect", { x, y: 2, width: Math.max(0.5, w), height: 18, fill: colors[PHASES.indexOf(p)] });
    rect.append(s("title", {}, `${p}: ${secs(timings[p])}`));
    svg.append(rect);
    x += w;
  });
  const legend = [...PHASES, "ready", "total"].filter((p) => p in timings).map((p) => `${p} ${secs(timings[p])}`);
  return h("div", {}, svg, h("div", { class: "legend" }, legend.join(" · ")));
}

function sparkline(points) {
  const W = 160, H = 26;
  const lo = Math.min(...points), hi = Math.max(0, ...points);
  const X = (i) => (points.length > 1 ? (i / (points.length - 1)) * (W - 2) + 1 : W / 2);
  const Y = (v) => 1 + ((hi - v) / (hi - lo || 1)) * (H - 2);
  const d = points.map((v, i) => `${i ? "L" : "M"}${X(i).toFixed(1)},${Y(v).toFixed(1)}`).join("");
  const svg = s("svg", { width: W, height: H, class: "sparkline" }, s("path", { d, fill: "none", stroke: "#2f5fb3", "stroke-width": 1.2 }));
  svg.append(s("title", {}, `logprob per token (bucket means), ${fmt(lo)} to ${fmt(hi)}`));
  return svg;
}

function messageView(m, label) {
  const body = text(m.text);
  const long = body.length > 1500 && m.role === "system";
  return h(
    "div",
    { class: "msg" },
    h("div", { class: `role role-${m.role}` }, label || m.role, m.tool_call_id ? h("span", { class: "legend" }, ` result of ${m.tool_call_id}`) : null),
    m.reasoning ? h("details", {}, h("summary", {}, "reasoning"), h("pre", {}, text(m.reasoning))) : null,
    body ? (long ? h("details", {}, h("summary", {}, `${body.length} characters`), h("pre", {}, body)) : h("pre", {}, body)) : null,
    (m.tool_calls || []).map((c) => h("div", { class: "tool-call" }, h("b", {}, `tool call ${c.name}`), c.id ? h("span", { class: "legend" }, ` ${c.id}`) : null, h("pre", {}, argumentsText(text(c.arguments)))))
  );
}

// A tool call's arguments, one per line: a text value as it reads (a command, a file), others as JSON.
function argumentsText(raw) {
  let parsed;
  try {
    parsed = JSON.parse(raw);
  } catch (error) {
    return raw;
  }
  if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) return raw;
  return Object.entries(parsed)
    .map(([key, value]) => (typeof value === "string" && value.includes("\n") ? `${key}:\n${value}` : `${key}: ${JSON.stringify(value)}`))
    .join("\n");
}

function turnView(t) {
  const facts = [
    `prompt ${fmt(t.prompt_tokens)} tokens`,
    `completion ${fmt(t.completion_tokens)} tokens`,
    `latency ${secs(t.latency_s)}`,
    `finish ${t.finish_reason || "–"}`,
    t.capture ? `capture ${t.capture}` : null,
    t.retry_of !== null && t.retry_of !== undefined ? `retry of turn ${t.retry_of}` : null,
    t.logprobs ? `logprob mean ${fmt(t.logprob_mean)} min ${fmt(t.logprob_min)}` : "no logprobs",
  ].filter((f) => f);
  const head = h("div", { class: "turn-head" }, h("b", {}, `turn ${t.turn}`), facts.map((f) => h("span", {}, f)), t.logprobs ? sparkline(t.logprobs) : null);
  return h(
    "div",
    { class: "turn", "data-turn": t.turn },
    head,
    t.tools ? h("div", { class: "legend" }, `tools offered: ${t.tools.join(", ") || "none"}`) : null,
    t.error ? h("pre", { class: "status-bad" }, `upstream ${t.status}: ${text(t.error)}`) : null,
    t.messages.map((m) => messageView(m)),
    t.completion ? messageView(t.completion, "completion") : h("div", { class: "legend" }, "no completion")
  );
}

function diffView(diff) {
  const pre = h("pre", { class: "diff" });
  diff.split("\n").forEach((line, i) => {
    const cls = line.startsWith("+") && !line.startsWith("+++") ? "add" : line.startsWith("-") && !line.startsWith("---") ? "del" : line.startsWith("@@") ? "hunk" : null;
    pre.append(i ? "\n" : "", cls ? h("span", { class: cls }, line) : line);
  });
  return pre;
}
