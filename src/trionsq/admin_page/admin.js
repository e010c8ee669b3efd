// trionsq's admin page: a client of the admin stream (docs/admin.md). Plain ES2020, no
// framework, no build step, nothing fetched from anywhere but the brokers it watches.
//
// Served by a broker, it follows that broker's stream. Served by a lookupd (which answers
// /nodes, where a broker answers 404), it follows the stream of every broker lookupd
// lists and merges each topic across them. Events change the view at once; snapshots
// (every second) replace every number. Actions go over the same socket and their
// replies are shown.

const HISTORY_MS = 5 * 60 * 1000; // what the sparklines show
const SAMPLE_MS = 1000; // one sparkline point per second
const CHART_MIN_MS = 60 * 1000; // a chart spans at least this, growing to HISTORY_MS
const EVENT_LOG_SIZE = 100;
const RETRY_FIRST_MS = 500;
const RETRY_MAX_MS = 15000;
const NODES_REFRESH_MS = 10000; // lookupd has no push: look at /nodes again this often
const TOAST_MS = 8000;
const CONSUMERS_SHOWN = 20;

const CLOSE_REASONS = {
  1000: "the broker is shutting down",
  1006: "connection lost",
  4001: "the broker needs an auth secret",
  4008: "the broker dropped this page: it read the stream too slowly",
};

const OPS = {
  "topic.pause": {
    verb: "Pause",
    text: (t) => `Pause topic “${t}”? Publishing goes on; its channels get no new messages until it is unpaused.`,
  },
  "topic.unpause": { verb: "Unpause", text: (t) => `Unpause topic “${t}”? Its channels get messages again.` },
  "topic.empty": {
    verb: "Empty",
    danger: true,
    text: (t) => `Empty topic “${t}”? The messages queued in the topic are dropped; its channels keep theirs.`,
  },
  "topic.delete": {
    verb: "Delete",
    danger: true,
    text: (t) => `Delete topic “${t}”? The topic, its channels and every message in them are removed.`,
  },
  "channel.pause": {
    verb: "Pause",
    text: (t, c) => `Pause channel “${c}” of topic “${t}”? Its consumers get no messages until it is unpaused.`,
  },
  "channel.unpause": { verb: "Unpause", text: (t, c) => `Unpause channel “${c}” of topic “${t}”?` },
  "channel.empty": {
    verb: "Empty",
    danger: true,
    text: (t, c) => `Empty channel “${c}” of topic “${t}”? Its queued, in-flight and deferred messages are dropped.`,
  },
  "channel.delete": {
    verb: "Delete",
    danger: true,
    text: (t, c) => `Delete channel “${c}” of topic “${t}”? The channel and its messages are removed.`,
  },
};

// ------------------------------------------------------------------ small helpers

const $ = (id) => document.getElementById(id);
const countFormat = new Intl.NumberFormat("en-US");

function h(tag, props = {}, ...children) {
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

function setText(node, text) {
  const value = String(text);
  if (node.textContent !== value) node.textContent = value;
}

function show(node, visible) {
  if (node.hidden === visible) node.hidden = !visible;
}

const count = (n) => countFormat.format(n || 0);

function rate(perSecond) {
  const n = perSecond || 0;
  if (n === 0) return "0";
  return n < 10 ? n.toFixed(1) : countFormat.format(Math.round(n));
}

function bytes(n) {
  if (!n) return "–";
  const units = ["B", "KiB", "MiB", "GiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i += 1;
  }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

function duration(seconds) {
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

function clock(ms) {
  const t = new Date(ms);
  const pad = (n, w = 2) => String(n).padStart(w, "0");
  return `${pad(t.getHours())}:${pad(t.getMinutes())}:${pad(t.getSeconds())}.${pad(t.getMilliseconds(), 3)}`;
}

function hostPort(host, port) {
  return host.includes(":") && !host.startsWith("[") ? `[${host}]:${port}` : `${host}:${port}`;
}

// ------------------------------------------------------------------ the model

// Per broker, from its snapshots and events. Names follow /stats where they can.
function newTopic(name) {
  return { name, depth: 0, message_count: 0, message_rate: 0, paused: false, partitions: 1, channels: new Map() };
}

function newChannel(name) {
  return {
    name,
    depth: 0,
    in_flight_count: 0,
    deferred_count: 0,
    message_count: 0,
    finish_count: 0,
    requeue_count: 0,
    timeout_count: 0,
    message_rate: 0,
    finish_rate: 0,
    requeue_rate: 0,
    timeout_rate: 0,
    paused: false,
    clients: new Map(),
  };
}

function topicFromStats(stats) {
  const topic = newTopic(stats.topic_name);
  topic.depth = stats.depth || 0;
  topic.message_count = stats.message_count || 0;
  topic.message_rate = stats.message_rate || 0;
  topic.paused = Boolean(stats.paused);
  topic.partitions = Array.isArray(stats.partitions) ? Math.max(1, stats.partitions.length) : 1;
  for (const c of stats.channels || []) {
    const channel = newChannel(c.channel_name);
    for (const key of Object.keys(channel)) {
      if (key !== "name" && key !== "clients" && key in c) channel[key] = c[key];
    }
    channel.paused = Boolean(c.paused);
    for (const client of c.clients || []) channel.clients.set(String(client.client_id), client);
    topic.channels.set(channel.name, channel);
  }
  return topic;
}

const page = {
  mode: null, // "broker" or "cluster"
  secret: null,
  brokers: new Map(), // key "host:port" -> Broker
  history: new Map(), // "t:<topic>" or "c:<topic>/<channel>" -> [{t, rate, depth}]
  merged: new Map(),
  nextRef: 1,
  pending: new Map(), // ref -> what was asked, for its reply
  nodesError: "",
};

class Broker {
  constructor(key, url) {
    this.key = key;
    this.url = url;
    this.hello = null;
    this.info = null; // the last snapshot's broker-wide fields
    this.topics = new Map();
    this.clients = new Map(); // from client events: who a subscribing client is
    this.state = "connecting"; // connecting, connected, retrying, auth
    this.detail = "";
    this.retryAt = 0;
    this.retryMs = RETRY_FIRST_MS;
    this.timer = 0;
    this.ws = null;
    this.seq = 0;
    this.stopped = false;
  }

  get connected() {
    return this.state === "connected";
  }

  connect() {
    clearTimeout(this.timer);
    this.timer = 0;
    if (this.stopped) return;
    let url = this.url;
    if (page.secret) url += `?auth_secret=${encodeURIComponent(page.secret)}`;
    this.state = "connecting";
    this.seq = 0;
    changed();
    let ws;
    try {
      ws = new WebSocket(url);
    } catch (error) {
      this.retry(`cannot open ${this.url}: ${error.message}`);
      return;
    }
    this.ws = ws;
    ws.onmessage = (event) => {
      if (ws === this.ws) this.receive(event.data);
    };
    ws.onclose = (event) => {
      if (ws === this.ws) this.closed(event);
    };
  }

  receive(data) {
    let message;
    try {
      message = JSON.parse(data);
    } catch {
      console.warn(`${this.key}: a frame that is not JSON`, data);
      return;
    }
    if (typeof message.seq === "number") {
      if (this.seq && message.seq !== this.seq + 1) {
        logLine(this, "gap", `expected message ${this.seq + 1}, got ${message.seq}`, Date.now());
      }
      this.seq = message.seq;
    }
    handle(this, message);
  }

  closed(event) {
    this.ws = null;
    if (this.stopped) return;
    const code = event.code;
    if (code === 4001) {
      // retrying without a (new) secret cannot work: wait for the user to give one
      this.state = "auth";
      this.detail = page.secret ? "the auth secret was refused (4001)" : "needs an auth secret (4001)";
      showAuth();
      changed();
      return;
    }
    if (code === 4008) this.retryMs = RETRY_FIRST_MS; // a fresh start is the cure
    const why = CLOSE_REASONS[code] || (event.reason ? `closed: ${event.reason}` : "closed");
    const wasConnected = this.state === "connected";
    this.retry(wasConnected || code !== 1006 ? `${why} (${code})` : `cannot connect to ${this.url}`);
  }

  retry(why) {
    const delay = this.retryMs;
    this.retryMs = Math.min(this.retryMs * 2, RETRY_MAX_MS);
    this.state = "retrying";
    this.detail = why;
    this.retryAt = Date.now() + delay;
    this.timer = setTimeout(() => this.connect(), delay);
    changed();
  }

  send(message) {
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN) return false;
    this.ws.send(JSON.stringify(message));
    return true;
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
    const ws = this.ws;
    this.ws = null;
    if (ws) ws.close(1000);
  }

  topic(name) {
    let topic = this.topics.get(name);
    if (!topic) this.topics.set(name, (topic = newTopic(name)));
    return topic;
  }

  channel(topicName, name) {
    const topic = this.topic(topicName);
    let channel = topic.channels.get(name);
    if (!channel) topic.channels.set(name, (channel = newChannel(name)));
    return channel;
  }
}

// ------------------------------------------------------------------ what the stream says

function handle(broker, message) {
  if (broker.state === "authenticating" && message.type !== "hello" && message.type !== "error") {
    broker.state = "connected"; // the broker took the secret: its stream has begun
    hideAuthIfDone();
  }
  switch (message.type) {
    case "hello":
      broker.hello = message;
      broker.retryMs = RETRY_FIRST_MS;
      broker.detail = "";
      if (!message.auth_required) {
        broker.state = "connected";
        hideAuthIfDone();
      } else if (page.secret) {
        broker.state = "authenticating"; // until the first snapshot, or a 4001 close
      } else {
        // the broker waits a while for an auth message: ask the user now
        broker.state = "auth";
        broker.detail = "needs an auth secret";
        showAuth();
      }
      break;
    case "snapshot":
      broker.info = message;
      broker.topics = new Map((message.topics || []).map((t) => [t.topic_name, topicFromStats(t)]));
      break;
    case "reply":
      replied(broker, message);
      break;
    case "error":
      toast(`${broker.key}: ${message.error}`, "error");
      break;
    case "sample":
      break;
    default:
      applyEvent(broker, message);
      logEvent(broker, message);
  }
  changed();
}

function applyEvent(broker, e) {
  const topic = e.topic === undefined ? undefined : broker.topics.get(e.topic);
  const channel = topic && e.channel !== undefined ? topic.channels.get(e.channel) : undefined;
  switch (e.type) {
    case "topic_created":
      broker.topic(e.topic);
      break;
    case "topic_deleted":
      broker.topics.delete(e.topic);
      break;
    case "topic_paused":
    case "topic_unpaused":
      if (topic) topic.paused = e.type === "topic_paused";
      break;
    case "topic_emptied":
      if (topic) topic.depth = 0;
      break;
    case "partition_created": {
      const created = broker.topic(e.topic);
      created.partitions = Math.max(created.partitions, (e.partition || 0) + 1);
      break;
    }
    case "channel_created":
      broker.channel(e.topic, e.channel);
      break;
    case "channel_deleted":
      if (topic) topic.channels.delete(e.channel);
      break;
    case "channel_paused":
    case "channel_unpaused":
      if (channel) channel.paused = e.type === "channel_paused";
      break;
    case "channel_emptied":
      if (channel) Object.assign(channel, { depth: 0, in_flight_count: 0, deferred_count: 0 });
      break;
    case "client_connected":
      broker.clients.set(String(e.client_id), { client_id: String(e.client_id), remote_address: e.remote_address });
      if (broker.info) broker.info.client_count += 1;
      break;
    case "client_identified": {
      const id = String(e.client_id);
      const client = broker.clients.get(id) || { client_id: id };
      const { hostname, user_agent, tls, snappy, deflate } = e;
      broker.clients.set(id, Object.assign(client, { hostname, user_agent, tls, snappy, deflate }));
      break;
    }
    case "client_subscribed": {
      const id = String(e.client_id);
      const client = broker.clients.get(id) || { client_id: id };
      broker.clients.set(id, client);
      broker.channel(e.topic, e.channel).clients.set(id, client);
      break;
    }
    case "client_disconnected": {
      const id = String(e.client_id);
      broker.clients.delete(id);
      if (broker.info) broker.info.client_count = Math.max(0, broker.info.client_count - 1);
      for (const t of broker.topics.values()) for (const c of t.channels.values()) c.clients.delete(id);
      break;
    }
    default:
      break; // channel_offset_set and anything newer: the next snapshot tells
  }
}

// ------------------------------------------------------------------ the event log

function describe(e) {
  const where = e.channel !== undefined ? `${e.topic}/${e.channel}` : e.topic;
  switch (e.type) {
    case "partition_created":
      return `${e.topic} partition ${e.partition}`;
    case "client_connected":
      return `client ${e.client_id} from ${e.remote_address}`;
    case "client_identified":
      return `client ${e.client_id} is ${e.hostname || "?"}${e.user_agent ? ` (${e.user_agent})` : ""}${e.tls ? ", TLS" : ""}`;
    case "client_subscribed":
      return `client ${e.client_id} → ${e.topic}/${e.channel}${e.partition === null || e.partition === undefined ? "" : ` partition ${e.partition}`}`;
    case "client_disconnected":
      return `client ${e.client_id}`;
    default:
      return where === undefined ? "" : where;
  }
}

function logEvent(broker, e) {
  logLine(broker, e.type, describe(e), e.ts || Date.now());
}

function logLine(broker, type, text, ts) {
  const kind = type.split("_")[0];
  const item = h(
    "li",
    { class: `kind-${kind}`, testid: "event", "data-type": type },
    h("time", { text: clock(ts), datetime: new Date(ts).toISOString() }),
    h(
      "span",
      { class: "body" },
      h("span", { class: `type type-${kind}`, text: type.replace(/_/g, " ") }),
      " ",
      h("span", { class: "what", text }),
      page.mode === "cluster" && broker ? h("span", { class: "from", text: broker.key }) : null,
    ),
  );
  const log = $("event-log");
  log.prepend(item);
  while (log.childElementCount > EVENT_LOG_SIZE) log.lastElementChild.remove();
}

// ------------------------------------------------------------------ actions

let confirming = null;

function confirmAction(title, text, verb, danger) {
  const dialog = $("confirm");
  setText($("confirm-title"), title);
  setText($("confirm-text"), text);
  const yes = $("confirm-yes");
  setText(yes, verb);
  yes.classList.toggle("danger", Boolean(danger));
  dialog.returnValue = "";
  dialog.showModal();
  return new Promise((resolve) => {
    confirming = resolve;
  });
}

function setupDialog() {
  const dialog = $("confirm");
  dialog.addEventListener("close", () => {
    const resolve = confirming;
    confirming = null;
    if (resolve) resolve(dialog.returnValue === "yes");
  });
}

async function act(op, topic, channel, targets) {
  const spec = OPS[op];
  const where = channel === undefined ? topic : `${topic}/${channel}`;
  let text = spec.text(topic, channel);
  if (page.mode === "cluster") text += ` On ${targets.length === 1 ? "broker" : "brokers"} ${targets.map((b) => b.key).join(", ")}.`;
  const title = `${spec.verb} ${channel === undefined ? "topic" : "channel"} ${where}`;
  if (!(await confirmAction(title, text, spec.verb, spec.danger))) return;
  for (const broker of targets) {
    const ref = page.nextRef++;
    const message = { op, ref, topic };
    if (channel !== undefined) message.channel = channel;
    if (broker.send(message)) {
      page.pending.set(ref, { op, where, broker: broker.key });
    } else {
      toast(`${op} ${where} on ${broker.key}: not connected`, "error");
    }
  }
}

function replied(broker, reply) {
  const asked = page.pending.get(reply.ref);
  page.pending.delete(reply.ref);
  const what = asked ? `${asked.op} ${asked.where}` : `request ${reply.ref}`;
  const on = page.mode === "cluster" ? ` on ${broker.key}` : "";
  const outcome = reply.ok ? "ok" : `failed: ${reply.status || ""} ${reply.error || ""}`.trim();
  toast(`${what}${on}: ${outcome}`, reply.ok ? "ok" : "error");
  logLine(broker, reply.ok ? "reply_ok" : "reply_failed", `${what}: ${outcome}`, reply.ts || Date.now());
}

function toast(text, kind) {
  const note = h("div", { class: `toast ${kind}`, testid: "toast", role: kind === "error" ? "alert" : "status", text });
  const box = $("toasts");
  box.append(note);
  while (box.childElementCount > 5) box.firstElementChild.remove();
  setTimeout(() => note.remove(), TOAST_MS);
}

// ------------------------------------------------------------------ auth

function showAuth() {
  const waiting = [...page.brokers.values()].filter((b) => b.state === "auth");
  const why = waiting.length ? `${waiting.map((b) => b.key).join(", ")}: ${waiting[0].detail}.` : "";
  setText($("auth-why"), `${why} The broker checks secrets with its auth server (--auth-http-address).`);
  $("auth").hidden = false;
  $("auth-secret").focus();
}

function hideAuthIfDone() {
  if (![...page.brokers.values()].some((b) => b.state === "auth")) $("auth").hidden = true;
}

function setupAuth() {
  $("auth").addEventListener("submit", (event) => {
    event.preventDefault();
    page.secret = $("auth-secret").value;
    for (const broker of page.brokers.values()) {
      if (broker.state !== "auth") continue;
      if (broker.send({ op: "auth", secret: page.secret })) {
        broker.state = "authenticating"; // the open stream still waits for it
        broker.detail = "";
        changed();
      } else {
        broker.connect();
      }
    }
  });
}

// ------------------------------------------------------------------ merging brokers

const byName = (map) => new Map([...map.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));

function mergeTopics() {
  const merged = new Map();
  for (const broker of page.brokers.values()) {
    for (const topic of broker.topics.values()) {
      let m = merged.get(topic.name);
      if (!m) {
        m = { name: topic.name, on: [], depth: 0, message_count: 0, message_rate: 0, partitions: 0, paused: 0, channels: new Map() };
        merged.set(topic.name, m);
      }
      m.on.push({ broker, topic });
      m.depth += topic.depth;
      m.message_count += topic.message_count;
      m.message_rate += topic.message_rate;
      m.partitions += topic.partitions;
      if (topic.paused) m.paused += 1;
      for (const channel of topic.channels.values()) {
        let c = m.channels.get(channel.name);
        if (!c) {
          c = { ...newChannel(channel.name), on: [], paused: 0, consumers: [] };
          delete c.clients;
          m.channels.set(channel.name, c);
        }
        c.on.push({ broker, channel });
        for (const key of ["depth", "in_flight_count", "deferred_count", "message_count", "finish_count", "requeue_count", "timeout_count", "message_rate", "finish_rate", "requeue_rate", "timeout_rate"]) {
          c[key] += channel[key] || 0;
        }
        if (channel.paused) c.paused += 1;
        for (const client of channel.clients.values()) c.consumers.push({ broker, client });
      }
    }
  }
  for (const m of merged.values()) m.channels = byName(m.channels);
  return byName(merged);
}

// ------------------------------------------------------------------ sparklines

function record(now) {
  const seen = new Set();
  const push = (key, rateValue, depthValue) => {
    seen.add(key);
    let points = page.history.get(key);
    if (!points) page.history.set(key, (points = []));
    points.push({ t: now, rate: rateValue, depth: depthValue });
    while (points.length && points[0].t < now - HISTORY_MS) points.shift();
  };
  for (const topic of page.merged.values()) {
    push(`t:${topic.name}`, topic.message_rate, topic.depth);
    for (const c of topic.channels.values()) push(`c:${topic.name}/${c.name}`, c.message_rate, c.depth);
  }
  for (const key of page.history.keys()) if (!seen.has(key)) page.history.delete(key);
}

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
function chartWindow(points, now) {
  const seen = points && points.length ? now - points[0].t : 0;
  return Math.min(HISTORY_MS, Math.max(CHART_MIN_MS, Math.ceil(seen / 60000) * 60000));
}

function drawSpark(canvas, points, field, now) {
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

function spark(field, label, testid) {
  return h("canvas", { class: `spark spark-${field}`, testid, "aria-label": label, role: "img" });
}

// ------------------------------------------------------------------ views

// One view object per broker card, topic card and channel: built once, then updated in
// place, so what the user looks at (focus, scroll) does not jump at every snapshot.

class BrokerView {
  constructor(broker) {
    const k = broker.key;
    this.status = h("span", { class: "status", testid: `broker-status-${k}` });
    this.host = h("strong", { class: "host", testid: `broker-host-${k}` });
    this.address = h("span", { class: "muted", testid: `broker-address-${k}`, text: k });
    this.version = h("span", { class: "muted", testid: `broker-version-${k}` });
    this.detail = h("p", { class: "detail", testid: `broker-detail-${k}` });
    this.health = h("dd", { testid: `broker-health-${k}` });
    this.uptime = h("dd");
    this.rss = h("dd");
    this.clients = h("dd", { testid: `broker-clients-${k}` });
    this.topicCount = h("dd");
    this.ports = h("dd");
    this.auth = h("span", { class: "badge", text: "AUTH", title: "AUTH is on: actions need rights" });
    this.node = h(
      "article",
      { class: "broker card", testid: `broker-${k}` },
      h("header", {}, this.status, this.host, this.address, this.auth, h("span", { class: "version" }, this.version)),
      h(
        "dl",
        { class: "facts" },
        h("dt", { text: "health" }),
        this.health,
        h("dt", { text: "up" }),
        this.uptime,
        h("dt", { text: "memory" }),
        this.rss,
        h("dt", { text: "clients" }),
        this.clients,
        h("dt", { text: "topics" }),
        this.topicCount,
        h("dt", { text: "tcp / http" }),
        this.ports,
      ),
      this.detail,
    );
  }

  update(broker, now) {
    const hello = broker.hello;
    const info = broker.info;
    this.node.classList.toggle("stale", !broker.connected);
    this.status.className = `status ${broker.state}`;
    let status = broker.state;
    if (broker.state === "retrying") status = `retrying in ${Math.max(0, Math.ceil((broker.retryAt - now) / 1000))} s`;
    if (broker.state === "auth") status = "needs auth";
    if (broker.state === "authenticating") status = "checking the secret";
    setText(this.status, status);
    setText(this.host, hello ? hello.hostname : broker.key);
    setText(this.version, hello ? `nsqd ${hello.version} · trionsq ${hello.trionsq_version}` : "");
    show(this.auth, Boolean(hello && hello.auth_required));
    setText(this.detail, broker.detail);
    show(this.detail, Boolean(broker.detail));
    setText(this.health, info ? info.health : "–");
    this.health.classList.toggle("bad", Boolean(info && info.health !== "OK"));
    setText(this.uptime, info && info.start_time ? duration(now / 1000 - info.start_time) : "–");
    setText(this.rss, info ? bytes(info.rss_bytes) : "–");
    setText(this.clients, info ? count(info.client_count) : "–");
    setText(this.topicCount, count(broker.topics.size));
    setText(this.ports, hello ? `${hello.tcp_port} / ${hello.http_port}` : "–");
  }
}

function actionButton(op, label, testid, onClick) {
  const danger = OPS[op].danger ? " danger" : "";
  return h("button", { type: "button", class: `action${danger}`, testid, text: label, onclick: onClick });
}

function metric(label, testid, extra = "") {
  const value = h("span", { class: "value", testid, text: "0" });
  return [h("div", { class: `metric ${extra}` }, h("span", { class: "label", text: label }), value), value];
}

class TopicView {
  constructor(name) {
    this.name = name;
    this.model = null;
    const onAct = (op, pick) => () => act(op, name, undefined, pick(this.model));
    const all = (m) => m.on.map((x) => x.broker);
    this.paused = h("span", { class: "badge paused", testid: `topic-paused-${name}`, text: "paused" });
    this.partitions = h("span", { class: "badge muted", testid: `topic-partitions-${name}` });
    this.pause = actionButton("topic.pause", "Pause", `pause-topic-${name}`, onAct("topic.pause", (m) => m.on.filter((x) => !x.topic.paused).map((x) => x.broker)));
    this.unpause = actionButton("topic.unpause", "Unpause", `unpause-topic-${name}`, onAct("topic.unpause", (m) => m.on.filter((x) => x.topic.paused).map((x) => x.broker)));
    const [depthBox, depth] = metric("depth", `topic-depth-${name}`, "big");
    const [messagesBox, messages] = metric("messages", `topic-messages-${name}`);
    const [rateBox, rateValue] = metric("msg/s", `topic-rate-${name}`);
    Object.assign(this, { depth, messages, rateValue });
    this.rateChart = spark("rate", `message rate of ${name}`, `topic-rate-chart-${name}`);
    this.depthChart = spark("depth", `depth of ${name}`, `topic-depth-chart-${name}`);
    this.brokers = h("tbody");
    this.brokerTable = h(
      "table",
      { class: "per-broker" },
      h("thead", {}, h("tr", {}, ...["broker", "depth", "messages", "msg/s", ""].map((t) => h("th", { text: t })))),
      this.brokers,
    );
    this.brokerRows = new Map();
    this.channelViews = new Map();
    this.channelTable = h(
      "table",
      { class: "channels" },
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          ...["channel", "depth", "in flight", "deferred", "messages", "msg/s", "fin/s", "req/s", "timeout/s", "consumers", "trend"].map((t) => h("th", { text: t })),
        ),
      ),
    );
    this.noChannels = h("p", { class: "empty", text: "No channels: published messages stay in the topic until one is created." });
    this.node = h(
      "article",
      { class: "topic card", testid: `topic-${name}` },
      h(
        "header",
        {},
        h("h3", { text: name }),
        this.paused,
        this.partitions,
        h(
          "div",
          { class: "actions" },
          this.pause,
          this.unpause,
          actionButton("topic.empty", "Empty", `empty-topic-${name}`, onAct("topic.empty", all)),
          actionButton("topic.delete", "Delete", `delete-topic-${name}`, onAct("topic.delete", all)),
        ),
      ),
      h(
        "div",
        { class: "numbers" },
        depthBox,
        messagesBox,
        rateBox,
        h("figure", { class: "chart" }, this.rateChart, (this.rateCaption = h("figcaption", { text: "msg/s" }))),
        h("figure", { class: "chart" }, this.depthChart, (this.depthCaption = h("figcaption", { text: "depth" }))),
      ),
      this.brokerTable,
      h("div", { class: "scroll" }, this.channelTable),
      this.noChannels,
    );
  }

  update(m, now) {
    this.model = m;
    const name = this.name;
    const brokers = m.on.length;
    this.node.classList.toggle("stale", m.on.every((x) => !x.broker.connected));
    show(this.paused, m.paused > 0);
    setText(this.paused, m.paused === brokers || brokers === 1 ? "paused" : `paused on ${m.paused} of ${brokers}`);
    const partitions = `${m.partitions} ${m.partitions === 1 ? "partition" : "partitions"}`;
    setText(this.partitions, page.mode === "cluster" ? `${partitions} on ${brokers} ${brokers === 1 ? "broker" : "brokers"}` : partitions);
    show(this.pause, m.paused < brokers);
    show(this.unpause, m.paused > 0);
    setText(this.depth, count(m.depth));
    setText(this.messages, count(m.message_count));
    setText(this.rateValue, rate(m.message_rate));
    this.depth.classList.toggle("warn", m.depth > 0 && m.channels.size === 0);

    const cluster = page.mode === "cluster";
    show(this.brokerTable, cluster);
    if (cluster) {
      const keys = new Set();
      for (const { broker, topic } of m.on) {
        keys.add(broker.key);
        let row = this.brokerRows.get(broker.key);
        if (!row) {
          const id = `${name}@${broker.key}`;
          row = {
            tr: h("tr", { testid: `topic-broker-${id}` }),
            cells: ["host", "depth", "messages", "rate", "state"].map((f) => h("td", { testid: `topic-broker-${f}-${id}` })),
          };
          row.tr.append(...row.cells);
          this.brokerRows.set(broker.key, row);
        }
        const [host, depth, messages, rateCell, state] = row.cells;
        setText(host, broker.hello ? `${broker.hello.hostname} (${broker.key})` : broker.key);
        setText(depth, count(topic.depth));
        setText(messages, count(topic.message_count));
        setText(rateCell, rate(topic.message_rate));
        setText(state, !broker.connected ? "stale" : topic.paused ? "paused" : "");
        row.tr.classList.toggle("stale", !broker.connected);
        this.brokers.append(row.tr); // keeps rows in broker order
      }
      for (const [key, row] of this.brokerRows) {
        if (!keys.has(key)) {
          row.tr.remove();
          this.brokerRows.delete(key);
        }
      }
    }

    for (const channel of m.channels.values()) {
      let view = this.channelViews.get(channel.name);
      if (!view) {
        view = new ChannelView(name, channel.name, () => this.model);
        this.channelViews.set(channel.name, view);
        view.draw(now);
      }
      view.update(channel);
      this.channelTable.append(view.node); // re-appending in order keeps them sorted by name
    }
    for (const [channelName, view] of this.channelViews) {
      if (!m.channels.has(channelName)) {
        view.node.remove();
        this.channelViews.delete(channelName);
      }
    }
    show(this.channelTable, m.channels.size > 0);
    show(this.noChannels, m.channels.size === 0);
  }

  draw(now) {
    const points = page.history.get(`t:${this.name}`);
    drawSpark(this.rateChart, points, "rate", now);
    drawSpark(this.depthChart, points, "depth", now);
    const minutes = `last ${Math.round(chartWindow(points, now) / 60000)} min`;
    setText(this.rateCaption, `msg/s · ${minutes}`);
    setText(this.depthCaption, `depth · ${minutes}`);
    for (const view of this.channelViews.values()) view.draw(now);
  }
}

class ChannelView {
  constructor(topic, name, topicModel) {
    this.topic = topic;
    this.name = name;
    const id = `${topic}/${name}`;
    const targets = (op) => () => {
      const channel = topicModel().channels.get(name);
      let on = channel ? channel.on : [];
      if (op === "channel.pause") on = on.filter((x) => !x.channel.paused);
      if (op === "channel.unpause") on = on.filter((x) => x.channel.paused);
      return act(op, topic, name, on.map((x) => x.broker));
    };
    this.paused = h("span", { class: "badge paused", testid: `channel-paused-${id}`, text: "paused" });
    this.cells = {};
    const cell = (field) => (this.cells[field] = h("td", { class: "num", testid: `channel-${field}-${id}` }));
    this.pause = actionButton("channel.pause", "Pause", `pause-channel-${id}`, targets("channel.pause"));
    this.unpause = actionButton("channel.unpause", "Unpause", `unpause-channel-${id}`, targets("channel.unpause"));
    this.rateChart = spark("rate", `message rate of ${id}`, `channel-rate-chart-${id}`);
    this.depthChart = spark("depth", `depth of ${id}`, `channel-depth-chart-${id}`);
    this.consumers = h("ul", { class: "consumers", testid: `channel-consumers-${id}` });
    this.noConsumers = h("p", { class: "consumers muted", text: "no consumers" });
    this.row = h(
      "tr",
      { class: "channel" },
      h("th", { scope: "row" }, h("span", { class: "name", text: name }), " ", this.paused),
      ...["depth", "inflight", "deferred", "messages", "rate", "finrate", "reqrate", "timeoutrate", "clients"].map(cell),
      h("td", { class: "charts" }, this.rateChart, this.depthChart),
    );
    // under the numbers: who consumes, and what can be done to the channel
    const below = h(
      "td",
      { colspan: "11" },
      h(
        "div",
        { class: "below" },
        this.consumers,
        this.noConsumers,
        h(
          "div",
          { class: "actions" },
          this.pause,
          this.unpause,
          actionButton("channel.empty", "Empty", `empty-channel-${id}`, targets("channel.empty")),
          actionButton("channel.delete", "Delete", `delete-channel-${id}`, targets("channel.delete")),
        ),
      ),
    );
    this.node = h("tbody", { testid: `channel-${id}` }, this.row, h("tr", { class: "below-row" }, below));
    this.consumerKey = "";
  }

  update(c) {
    const brokers = c.on.length;
    this.node.classList.toggle("stale", c.on.every((x) => !x.broker.connected));
    show(this.paused, c.paused > 0);
    setText(this.paused, c.paused === brokers || brokers === 1 ? "paused" : `paused on ${c.paused} of ${brokers}`);
    show(this.pause, c.paused < brokers);
    show(this.unpause, c.paused > 0);
    const values = {
      depth: count(c.depth),
      inflight: count(c.in_flight_count),
      deferred: count(c.deferred_count),
      messages: count(c.message_count),
      rate: rate(c.message_rate),
      finrate: rate(c.finish_rate),
      reqrate: rate(c.requeue_rate),
      timeoutrate: rate(c.timeout_rate),
      clients: count(c.consumers.length),
    };
    for (const [field, value] of Object.entries(values)) setText(this.cells[field], value);
    this.cells.reqrate.classList.toggle("warn", c.requeue_rate > 0);
    this.cells.timeoutrate.classList.toggle("warn", c.timeout_rate > 0);
    this.renderConsumers(c.consumers);
  }

  renderConsumers(consumers) {
    show(this.consumers, consumers.length > 0);
    show(this.noConsumers, consumers.length === 0);
    const cluster = page.mode === "cluster";
    const lines = consumers.slice(0, CONSUMERS_SHOWN).map(({ broker, client }) => {
      const address = client.remote_address || "";
      const host = client.hostname && !address.startsWith(`${client.hostname}:`) ? client.hostname : "";
      const who = [host, address].filter(Boolean).join(" ") || `client ${client.client_id}`;
      const agent = client.user_agent ? ` · ${client.user_agent}` : "";
      const numbers = "ready_count" in client ? ` · RDY ${client.ready_count} · in flight ${count(client.in_flight_count)} · finished ${count(client.finish_count)} · requeued ${count(client.requeue_count)}` : "";
      const flags = [client.tls && "TLS", client.snappy && "snappy", client.deflate && "deflate"].filter(Boolean).join(" ");
      return [client.client_id, `${who}${agent}${numbers}${flags ? ` · ${flags}` : ""}${cluster ? ` · via ${broker.key}` : ""}`];
    });
    if (consumers.length > CONSUMERS_SHOWN) lines.push(["more", `and ${consumers.length - CONSUMERS_SHOWN} more`]);
    const key = JSON.stringify(lines);
    if (key === this.consumerKey) return;
    this.consumerKey = key;
    this.consumers.replaceChildren(...lines.map(([id, text]) => h("li", { testid: `consumer-${this.topic}/${this.name}/${id}`, text })));
  }

  draw(now) {
    const points = page.history.get(`c:${this.topic}/${this.name}`);
    drawSpark(this.rateChart, points, "rate", now);
    drawSpark(this.depthChart, points, "depth", now);
  }
}

// ------------------------------------------------------------------ rendering

const views = { brokers: new Map(), topics: new Map() };
let renderQueued = false;

function changed() {
  if (renderQueued) return;
  renderQueued = true;
  requestAnimationFrame(() => {
    renderQueued = false;
    render(Date.now());
  });
}

function render(now) {
  page.merged = mergeTopics();
  renderBrokers(now);
  const box = $("topics");
  for (const m of page.merged.values()) {
    let view = views.topics.get(m.name);
    const fresh = !view;
    if (fresh) {
      view = new TopicView(m.name);
      views.topics.set(m.name, view);
    }
    view.update(m, now);
    box.append(view.node); // re-appending in order keeps the list sorted by name
    if (fresh) view.draw(now);
  }
  for (const [name, view] of views.topics) {
    if (!page.merged.has(name)) {
      view.node.remove();
      views.topics.delete(name);
    }
  }
  show($("no-topics"), page.merged.size === 0);
  setText($("topic-count"), page.merged.size ? `(${page.merged.size})` : "");
  renderOverall();
}

function renderBrokers(now) {
  const box = $("brokers");
  for (const broker of page.brokers.values()) {
    let view = views.brokers.get(broker.key);
    if (!view) {
      view = new BrokerView(broker);
      views.brokers.set(broker.key, view);
      box.append(view.node);
    }
    view.update(broker, now);
  }
  for (const [key, view] of views.brokers) {
    if (!page.brokers.has(key)) {
      view.node.remove();
      views.brokers.delete(key);
    }
  }
}

function renderOverall() {
  const brokers = [...page.brokers.values()];
  const up = brokers.filter((b) => b.connected).length;
  let text;
  if (page.mode === "cluster") {
    text = `lookupd ${location.host}: ${up} of ${brokers.length} ${brokers.length === 1 ? "broker" : "brokers"} connected`;
    if (page.nodesError) text += ` · /nodes: ${page.nodesError}`;
  } else if (brokers.length) {
    const broker = brokers[0];
    text = broker.connected ? `connected to ${broker.key}` : `${broker.key}: ${broker.state === "retrying" ? `${broker.detail}, retrying` : broker.detail || broker.state}`;
  } else {
    text = "starting…";
  }
  const overall = $("overall");
  setText(overall, text);
  overall.classList.toggle("down", brokers.length > 0 && up < brokers.length);
  document.body.classList.toggle("disconnected", brokers.length > 0 && up === 0);
}

function tick() {
  const now = Date.now();
  page.merged = mergeTopics();
  record(now);
  render(now);
  for (const view of views.topics.values()) view.draw(now);
}

// ------------------------------------------------------------------ which brokers

function streamUrl(host) {
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  return `${scheme}://${host}/admin/stream`;
}

// What /nodes answers: {"producers": [...]} from a lookupd, 404 from a broker.
async function askNodes() {
  const response = await fetch("/nodes", { headers: { Accept: "application/json" }, cache: "no-store" });
  if (response.status === 404) return null;
  if (!response.ok) throw new Error(`HTTP ${response.status}`);
  const answer = await response.json();
  const producers = answer && Array.isArray(answer.producers) ? answer.producers : answer && answer.data && answer.data.producers;
  if (!Array.isArray(producers)) return null;
  return producers;
}

function followNodes(producers) {
  const keys = new Set();
  for (const node of producers) {
    const host = node.broadcast_address || node.hostname;
    const key = hostPort(host, node.http_port);
    keys.add(key);
    if (!page.brokers.has(key)) {
      // a lookupd lists HTTP ports only: the streams are plain ws (an https page's browser refuses them)
      const broker = new Broker(key, `ws://${key}/admin/stream`);
      page.brokers.set(key, broker);
      broker.connect();
    }
  }
  for (const [key, broker] of page.brokers) {
    if (!keys.has(key)) {
      broker.stop();
      page.brokers.delete(key);
    }
  }
  changed();
}

async function refreshNodes() {
  try {
    followNodes((await askNodes()) || []);
    page.nodesError = "";
  } catch (error) {
    page.nodesError = error.message; // keep following the brokers already known
  }
  changed();
  setTimeout(refreshNodes, NODES_REFRESH_MS);
}

async function start() {
  setupDialog();
  setupAuth();
  $("client-events").addEventListener("change", (event) => {
    $("event-log").classList.toggle("hide-client", !event.target.checked);
  });
  let producers;
  for (let wait = RETRY_FIRST_MS; ; wait = Math.min(wait * 2, RETRY_MAX_MS)) {
    try {
      producers = await askNodes();
      break;
    } catch (error) {
      setText($("overall"), `cannot reach ${location.host} (${error.message}), retrying`);
      await new Promise((resolve) => setTimeout(resolve, wait));
    }
  }
  page.mode = producers ? "cluster" : "broker";
  document.body.dataset.mode = page.mode;
  setText($("mode"), page.mode === "cluster" ? "cluster" : "broker");
  document.title = `trionsq ${page.mode} · ${location.host}`;
  if (producers) {
    followNodes(producers);
    setTimeout(refreshNodes, NODES_REFRESH_MS);
  } else {
    const broker = new Broker(location.host, streamUrl(location.host));
    page.brokers.set(broker.key, broker);
    broker.connect();
  }
  setInterval(tick, SAMPLE_MS);
  changed();
}

start();
