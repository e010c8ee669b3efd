// The admin page's DOM helpers and number formats, and its sparkline drawing
// (admin.js): pure functions of what they are given, nothing of the page's state.

export const HISTORY_MS = 5 * 60 * 1000; // what the sparklines show
const CHART_MIN_MS = 60 * 1000; // a chart spans at least this, growing to HISTORY_MS

export const $ = (id) => document.getElementById(id);
const countFormat = new Intl.NumberFormat("en-US");

export function h(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "testid") node.setAttribute("data-testid", value);
    else if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children) if (child !== null && child !== undefined) node.append(child);
  return node;
}

export function setText(node, text) {
  const value = String(text);
  if (node.textContent !== value) node.textContent = value;
}

export function show(node, visible) {
  if (node.hidden === visible) node.hidden = !visible;
}

export const count = (n) => countFormat.format(n || 0);

export function rate(perSecond) {
  const n = perSecond || 0;
  if (n === 0) return "0";
  return n < 10 ? n.toFixed(1) : countFormat.format(Math.round(n));
}

export function bytes(n) {
  if (!n) return "–";
  const units = ["B", "KiB", "MiB", "GiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i += 1;
  }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

export function duration(seconds) {
  if (!(seconds >= 0)) return "–";
  const s = Math.floor(seconds);
  const d = Math.floor(s / 86400);
  const hh = Math.floor((s % 86400) / 3600);
  const mm = Math.floor((s % 3600) / 60);
  if (d) return `${d}d ${hh}h`;
  if (hh) return `${hh}h ${mm}m`;
  if (mm) return `${mm}m ${s % 60}s`;
  return `${s}s`;
}

export function clock(ms) {
  const t = new Date(ms);
  const pad = (n, w = 2) => String(n).padStart(w, "0");
  return `${pad(t.getHours())}:${pad(t.getMinutes())}:${pad(t.getSeconds())}.${pad(t.getMilliseconds(), 3)}`;
}

export function hostPort(host, port) {
  return host.includes(":") && !host.startsWith("[") ? `[${host}]:${port}` : `${host}:${port}`;
}

// ------------------------------------------------------------------ sparklines

let palette = null;

function colors() {
  if (!palette) {
    const style = getComputedStyle(document.documentElement);
    palette = {
      rate: style.getPropertyValue("--chart-rate").trim() || "#2f6fde",
      depth: style.getPropertyValue("--chart-depth").trim() || "#c77a12",
      grid: style.getPropertyValue("--chart-grid").trim() || "#ddd",
    };
  }
  return palette;
}

// The time a chart spans: from one minute (a page just opened) up to HISTORY_MS.
export function chartWindow(points, now) {
  const seen = points && points.length ? now - points[0].t : 0;
  return Math.min(HISTORY_MS, Math.max(CHART_MIN_MS, Math.ceil(seen / 60000) * 60000));
}

export function drawSpark(canvas, points, field, now) {
  const ratio = window.devicePixelRatio || 1;
  const width = canvas.clientWidth;
  const height = canvas.clientHeight;
  if (!width || !height) return;
  if (canvas.width !== Math.round(width * ratio) || canvas.height !== Math.round(height * ratio)) {
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(height * ratio);
  }
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, width, height);
  const color = colors()[field];
  ctx.strokeStyle = colors().grid;
  ctx.lineWidth = 1;
  ctx.beginPath();
  ctx.moveTo(0, height - 0.5);
  ctx.lineTo(width, height - 0.5);
  ctx.stroke();
  if (!points || !points.length) return;
  let top = 0;
  for (const p of points) top = Math.max(top, p[field]);
  const span = chartWindow(points, now);
  const start = now - span;
  const x = (t) => ((t - start) / span) * (width - 2) + 1;
  const y = (v) => height - 1.5 - (top > 0 ? (v / top) * (height - 4) : 0);
  ctx.beginPath();
  points.forEach((p, i) => (i ? ctx.lineTo(x(p.t), y(p[field])) : ctx.moveTo(x(p.t), y(p[field]))));
  ctx.strokeStyle = color;
  ctx.lineWidth = 1.5;
  ctx.stroke();
  const last = points[points.length - 1];
  ctx.lineTo(x(last.t), height);
  ctx.lineTo(x(points[0].t), height);
  ctx.closePath();
  ctx.globalAlpha = 0.15;
  ctx.fillStyle = color;
  ctx.fill();
  ctx.globalAlpha = 1;
  ctx.beginPath();
  ctx.arc(x(last.t), y(last[field]), 2, 0, 2 * Math.PI);
  ctx.fill();
  canvas.title = `${field === "rate" ? "messages/s" : "depth"}, last ${Math.round(span / 60000)} min (highest ${field === "rate" ? rate(top) : count(top)})`;
}

export function spark(field, label, testid) {
  return h("canvas", { class: `spark spark-${field}`, testid, "aria-label": label, role: "img" });
}
