// The admin page's views (admin.js): one object per broker card, topic card and
// channel, built once and updated in place. The page's model and its action runner
// come from admin.js through bind(), so this module imports nothing of it.

import { bytes, chartWindow, count, drawSpark, duration, h, rate, setText, show, spark } from "./admin_dom.js";

const CONSUMERS_SHOWN = 20;

export const OPS = {
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

let page = null; // admin.js's model: mode, history
let act = null; // admin.js's action runner: (op, topic, channel, brokers) => Promise

export function bind(model, runAction) {
  page = model;
  act = runAction;
}

// One view object per broker card, topic card and channel: built once, then updated in
// place, so what the user looks at (focus, scroll) does not jump at every snapshot.

export class BrokerView {
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
    this.mode = h("span", { class: "badge", testid: `broker-mode-${k}` });
    this.node = h(
      "article",
      { class: "broker card", testid: `broker-${k}` },
      h("header", {}, this.status, this.host, this.address, this.auth, this.mode, h("span", { class: "version" }, this.version)),
      h(
        "dl",
        { class: "facts" },
        ...[
          ["health", this.health],
          ["up", this.uptime],
          ["memory", this.rss],
          ["clients", this.clients],
          ["topics", this.topicCount],
          ["tcp / http", this.ports],
        ].flatMap(([term, value]) => [h("dt", { text: term }), value]),
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
    const trionsq = hello && hello.trionsq_version ? ` · trionsq ${hello.trionsq_version}` : "";
    setText(this.version, hello ? `nsqd ${hello.version}${trionsq}` : "");
    show(this.auth, Boolean(hello && hello.auth_required));
    // read-only (--admin-stream), or actions locked until the admin secret is given
    const mode = !hello ? "" : hello.mode === "read-only" ? "READ-ONLY" : broker.unlocked ? "" : "LOCKED";
    setText(this.mode, mode);
    this.mode.title = mode === "LOCKED" ? "actions need the broker's admin secret (--admin-secret)" : "";
    show(this.mode, Boolean(mode));
    setText(this.detail, broker.detail);
    this.detail.classList.toggle("note", broker.state === "polled"); // how it is seen, not a fault
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

export class TopicView {
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

export class ChannelView {
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
