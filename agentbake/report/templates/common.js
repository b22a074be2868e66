// Shared by the views: the inline data, element builders, number formats, the rollouts' details on demand.
const DATA = JSON.parse(document.getElementById("report-data").textContent);
const JOBS = DATA.jobs;
const PHASES = ["image", "create", "upload", "setup", "agent", "stop", "verifier", "collect", "teardown"];
const SVGNS = "http://www.w3.org/2000/svg";
const PAGE = 100;
let details = null; // lines of the details block, split on first use
let shared = null; // the shared texts (line 0)

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined) continue;
    if (key === "onclick" || key === "oninput") el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVGNS, tag);
  for (const [key, value] of Object.entries(attrs || {})) el.setAttribute(key, value);
  for (const child of children.flat()) if (child) el.append(child instanceof Node ? child : String(child));
  return el;
}

// Numbers as the page shows them: integers whole, others to 4 decimals without trailing zeros.
function fmt(value) {
  if (value === null || value === undefined) return "–";
  if (typeof value !== "number") return String(value);
  if (Number.isInteger(value)) return String(value);
  return value.toFixed(4).replace(/0+$/, "").replace(/\.$/, "");
}

function secs(value) {
  return value === null || value === undefined ? "–" : fmt(value) + " s";
}

function text(value) {
  if (typeof value !== "number") return value === null || value === undefined ? "" : value;
  if (shared === null) loadDetails();
  return shared[value];
}

function loadDetails() {
  if (details === null) {
    details = document.getElementById("report-details").textContent.split("\n");
    shared = JSON.parse(details[0]);
  }
}

function detailOf(job, index) {
  loadDetails();
  let offset = 1;
  for (let j = 0; j < job; j++) offset += JOBS[j].rows.length;
  return JSON.parse(details[offset + index]);
}

function statusClass(status) {
  return status === "ok" ? "status-ok" : "status-bad";
}

function card(label, value, key, job) {
  return h(
    "div",
    { class: "card", "data-key": key, "data-job": job, "data-value": JSON.stringify(value === undefined ? null : value) },
    h("div", { class: "label" }, label),
    h("div", { class: "value" }, fmt(value))
  );
}

function rolloutLink(job, index, label) {
  return h("a", { href: `#rollout/${job}/${index}` }, label);
}
