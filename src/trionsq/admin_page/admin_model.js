// The admin page's model (admin.js): topics and channels as the brokers' snapshots and
// /stats describe them, and the topics merged across brokers. Pure: no DOM, no sockets.

// Per broker, from its snapshots and events. Names follow /stats where they can.
export function newTopic(name) {
  return { name, depth: 0, message_count: 0, message_rate: 0, paused: false, partitions: 1, channels: new Map() };
}

export function newChannel(name) {
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

export function topicFromStats(stats) {
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

// Every broker's topics merged by name: totals on top, one entry per broker under each.
export const byName = (map) => new Map([...map.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));

export function mergeTopics(brokers) {
  const merged = new Map();
  for (const broker of brokers) {
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

// A broker without an admin stream (Go nsqd) is polled for its /stats: rates are the
// change of each counter since the previous answer (per second), as the stream's
// snapshots give them. A channel's finishes are its clients' (nsqd counts them there).
export function topicsFromPolls(stats, previous, seconds) {
  const topics = new Map((stats.topics || []).map((t) => [t.topic_name, topicFromStats(t)]));
  const perSecond = (now, before) => (seconds > 0 && now >= before ? (now - before) / seconds : 0);
  for (const topic of topics.values()) {
    for (const channel of topic.channels.values()) {
      if (!channel.finish_count) {
        channel.finish_count = [...channel.clients.values()].reduce((sum, c) => sum + (c.finish_count || 0), 0);
      }
    }
    const was = previous && previous.get(topic.name);
    if (!was) continue;
    topic.message_rate = perSecond(topic.message_count, was.message_count);
    for (const channel of topic.channels.values()) {
      const then = was.channels.get(channel.name);
      if (!then) continue;
      channel.message_rate = perSecond(channel.message_count, then.message_count);
      channel.finish_rate = perSecond(channel.finish_count, then.finish_count);
      channel.requeue_rate = perSecond(channel.requeue_count, then.requeue_count);
      channel.timeout_rate = perSecond(channel.timeout_count, then.timeout_count);
    }
  }
  return topics;
}
