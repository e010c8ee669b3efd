// trionsq's admin page: a client of the admin stream (docs/admin.md). Plain ES2020, no
// framework, no build step, nothing fetched from anywhere but the brokers it watches.
//
// Served by a broker, it follows that broker's stream. Served by a lookupd (which answers
// /nodes, where a broker answers 404), it follows the stream of every broker lookupd
// lists and merges each topic across them; a broker without a stream (Go nsqd) is shown
// from its /stats instead, which the lookupd fetches for the page (a browser may not
// read another origin's), polled. Events change the view at once; snapshots (every
// second) replace every number. Actions go over the same socket and their replies are
// shown. A broker lost, back or gone from lookupd's list is an event of the log.

import { $, HISTORY_MS, clock, h, hostPort, setText, show } from "./admin_dom.js";
import { mergeTopics, newChannel, newTopic, topicFromStats, topicsFromPolls } from "./admin_model.js";
import { BrokerView, OPS, TopicView, bind } from "./admin_views.js";

const SAMPLE_MS = 1000; // one sparkline point per second
const EVENT_LOG_SIZE = 100;
const RETRY_FIRST_MS = 500;
const RETRY_MAX_MS = 15000;
const NODES_REFRESH_MS = 10000; // lookupd has no push: look at /nodes again this often
const POLL_MS = 2000; // a broker without a stream: its /stats this often
const TOAST_MS = 8000;

const CLOSE_REASONS = {
  1000: "the broker is shutting down",
  1006: "connection lost",
  4001: "the broker needs an auth secret",
  4008: "the broker dropped this page: it read the stream too slowly",
};

// ------------------------------------------------------------------ the model

const page = {
  mode: null, // "broker" or "cluster"
  secret: null,
  brokers: new Map(), // key "host:port" -> Broker
  history: new Map(), // "t:<topic>" or "c:<topic>/<channel>" -> [{t, rate, depth}]
  merged: new Map(),
  nextRef: 1,
  pending: new Map(), // ref -> what was asked, for its reply
  afterUnlock: null, // the action to do once the admin secret was taken
  nodesError: "",
};

class Broker {
  constructor(key, url, node = null) {
    this.key = key;
    this.url = url;
    this.node = node; // its /nodes entry (on a lookupd's page)
    this.streamed = false; // its stream ever opened: a broker with a stream
    this.lost = false; // it went after being seen: its return is logged
    this.polledAt = 0;
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
    this.unlocked = false; // actions open (no --admin-secret, or it was given): see hello
  }

  get connected() {
    return this.state === "connected" || this.state === "polled";
  }

  // Seen (a hello, or a /stats answer): after a loss, that is an event.
  seen() {
    if (this.lost) logLine(this, "broker_back", "", Date.now());
    this.lost = false;
  }

  // Gone after being seen: an event, once per loss.
  gone(why) {
    if (!this.lost && (this.state === "connected" || this.state === "polled")) {
      this.lost = true;
      logLine(this, "broker_lost", why, Date.now());
    }
  }

  // No stream here (Go nsqd has none): ask the lookupd for the broker's /stats.
  async poll() {
    this.timer = 0;
    if (this.stopped) return;
    let stats;
    try {
      const response = await fetch(`/admin/broker_stats?broker=${encodeURIComponent(this.key)}`, { cache: "no-store" });
      const answer = await response.json();
      if (!response.ok) throw new Error(answer.message || `HTTP ${response.status}`);
      stats = answer;
    } catch (error) {
      if (this.stopped) return;
      this.gone(`no stream, and /stats failed: ${error.message}`);
      this.polledAt = 0;
      this.retry(`no stream, and /stats failed: ${error.message}`);
      return;
    }
    if (this.stopped) return;
    const now = Date.now();
    this.topics = topicsFromPolls(stats, this.polledAt ? this.topics : null, (now - this.polledAt) / 1000);
    this.polledAt = now;
    const node = this.node || {};
    this.hello = { hostname: node.hostname || this.key, version: stats.version, tcp_port: node.tcp_port, http_port: node.http_port, mode: "read-only" };
    this.unlocked = true; // nothing to unlock: no actions without a stream (see act)
    const clients = (stats.producers || []).length + [...this.topics.values()].reduce((n, t) => n + [...t.channels.values()].reduce((m, c) => m + c.clients.size, 0), 0);
    this.info = { health: stats.health, start_time: stats.start_time, client_count: clients };
    this.state = "polled";
    this.detail = "no admin stream (Go nsqd?): its /stats, polled through lookupd";
    this.retryMs = RETRY_FIRST_MS;
    this.seen();
    changed();
    this.timer = setTimeout(() => this.poll(), POLL_MS);
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
      const kind = this.hello && this.hello.admin_secret_required ? "admin secret" : "auth secret";
      this.detail = page.secret ? `the ${kind} was refused (4001)` : `needs an ${kind} (4001)`;
      showAuth();
      changed();
      return;
    }
    if (code === 4008) this.retryMs = RETRY_FIRST_MS; // a fresh start is the cure
    const why = CLOSE_REASONS[code] || (event.reason ? `closed: ${event.reason}` : "closed");
    const wasConnected = this.state === "connected";
    if (page.mode === "cluster" && !this.streamed && code === 1006) {
      this.poll(); // never opened: no stream there, or the broker is down; /stats tells
      return;
    }
    this.gone(`${why} (${code})`);
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
    clearTimeout(this.timer); // a reconnect, or the next poll
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
      broker.streamed = true;
      broker.seen();
      broker.hello = message;
      broker.retryMs = RETRY_FIRST_MS;
      broker.detail = "";
      // --admin-secret: the secret sent at open (auth_secret=) unlocked actions, or the
      // stream closes with 4001; without one, actions ask for it first
      broker.unlocked = !message.admin_secret_required || Boolean(page.secret);
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

async function act(op, topic, channel, everywhere) {
  const polled = everywhere.filter((broker) => broker.state === "polled");
  for (const broker of polled) toast(`${op} on ${broker.key}: it has no admin stream (read-only)`, "error");
  const targets = everywhere.filter((broker) => broker.state !== "polled");
  if (!targets.length) return;
  const locked = targets.filter((broker) => !broker.unlocked);
  if (locked.length) {
    // --admin-secret: ask for it, then do this once the brokers took it
    page.afterUnlock = () => act(op, topic, channel, targets);
    showAuth(`${locked.map((b) => b.key).join(", ")}: actions need the broker's admin secret (--admin-secret).`);
    return;
  }
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
  if (asked && asked.op === "auth") {
    unlocked(broker, reply);
    return;
  }
  if (reply.error === "ADMIN_SECRET_REQUIRED") broker.unlocked = false;
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

function showAuth(why) {
  const waiting = [...page.brokers.values()].filter((b) => b.state === "auth");
  const reason = waiting.length ? `${waiting.map((b) => b.key).join(", ")}: ${waiting[0].detail}.` : "";
  const byServer = waiting.some((b) => !b.hello || b.hello.auth_required);
  const checked = byServer ? " The broker checks secrets with its auth server (--auth-http-address)." : "";
  setText($("auth-why"), why || `${reason}${checked}`);
  $("auth").hidden = false;
  $("auth-secret").focus();
}

function hideAuthIfDone() {
  const asking = [...page.brokers.values()].some((b) => b.state === "auth");
  if (!asking && !page.afterUnlock) $("auth").hidden = true;
}

// An answer to the admin secret: actions open on that broker, or the form asks again.
function unlocked(broker, reply) {
  if (!reply.ok) {
    toast(`${broker.key}: the admin secret was refused`, "error");
    showAuth(`${broker.key}: the admin secret was refused; actions need the broker's admin secret (--admin-secret).`);
    return;
  }
  broker.unlocked = true;
  if ([...page.brokers.values()].some((b) => b.connected && !b.unlocked)) return;
  const next = page.afterUnlock;
  page.afterUnlock = null;
  hideAuthIfDone();
  if (next) next();
}

function setupAuth() {
  $("auth").addEventListener("submit", (event) => {
    event.preventDefault();
    page.secret = $("auth-secret").value;
    for (const broker of page.brokers.values()) {
      if (broker.state === "auth") {
        if (broker.send({ op: "auth", secret: page.secret })) {
          broker.state = "authenticating"; // the open stream still waits for it
          broker.detail = "";
          changed();
        } else {
          broker.connect();
        }
      } else if (broker.connected && !broker.unlocked) {
        const ref = page.nextRef++;
        if (broker.send({ op: "auth", secret: page.secret, ref })) page.pending.set(ref, { op: "auth", broker: broker.key });
      }
    }
  });
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
  page.merged = mergeTopics(page.brokers.values());
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
  // --admin-stream=read-only everywhere: no actions to offer
  document.body.classList.toggle("read-only", brokers.length > 0 && brokers.every((b) => b.hello && b.hello.mode === "read-only"));
  document.body.classList.toggle("disconnected", brokers.length > 0 && up === 0);
}

function tick() {
  const now = Date.now();
  page.merged = mergeTopics(page.brokers.values());
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
      const broker = new Broker(key, `ws://${key}/admin/stream`, node);
      page.brokers.set(key, broker);
      broker.connect();
    }
  }
  for (const [key, broker] of page.brokers) {
    if (!keys.has(key)) {
      logLine(broker, "broker_removed", "lookupd no longer lists it", Date.now());
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
  bind(page, act);
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
