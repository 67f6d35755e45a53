/**
 * Counters for `/metrics`, rendered in the Prometheus text format: requests by route and status
 * (counted by the HTTP layer) next to the engine's own token and sequence figures.
 *
 * @example
 * ```ts
 * import { countRequest, newMetrics, renderMetrics } from "./metrics.ts";
 * const metrics = newMetrics();
 * countRequest(metrics, "/v1/completions", 200);
 * renderMetrics(metrics, engine.stats());
 * ```
 * @module
 */
import { emptyStats, type EngineStats } from "./scheduler.ts";
import type { TierStats } from "./cache/prompt_cache.ts";

/** Event-channel counters (the HTTP layer reads them from the fan-out). */
export type ChannelCounters = {
  listeners: number;
  published: number;
  dropped: number;
  rejected: number;
};

export type Metrics = {
  requests: Map<string, number>;
  /** Last scrape, for the tokens-per-second gauge. */
  last?: { at: number; generated: number; rate: number };
};

export function newMetrics(): Metrics {
  return { requests: new Map() };
}

export function countRequest(m: Metrics, route: string, status: number): void {
  const key = `route="${escapeLabel(route)}",status="${status}"`;
  m.requests.set(key, (m.requests.get(key) ?? 0) + 1);
}

function escapeLabel(v: string): string {
  return v.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");
}

/** Prometheus exposition text; `stats` is undefined while the model loads. */
export function renderMetrics(
  m: Metrics,
  stats?: EngineStats,
  now = performance.now(),
  channel?: ChannelCounters,
): string {
  const out: string[] = [];
  const metric = (name: string, type: string, help: string, rows: [string, number][]) => {
    out.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
    for (const [labels, v] of rows) out.push(`${name}${labels ? `{${labels}}` : ""} ${v}`);
  };
  metric(
    "hearth_requests_total",
    "counter",
    "HTTP requests by route and status.",
    [...m.requests.entries()],
  );
  const s = stats ?? emptyStats();
  // The rate covers the time since the previous scrape, so each scrape sees fresh throughput.
  let rate = 0;
  if (m.last && now > m.last.at) {
    rate = (s.generatedTokensTotal - m.last.generated) / ((now - m.last.at) / 1000);
  }
  m.last = { at: now, generated: s.generatedTokensTotal, rate };
  metric("hearth_prompt_tokens_total", "counter", "Prompt tokens processed (prefill).", [[
    "",
    s.promptTokensTotal,
  ]]);
  metric("hearth_generated_tokens_total", "counter", "Tokens generated.", [[
    "",
    s.generatedTokensTotal,
  ]]);
  metric("hearth_tokens_per_second", "gauge", "Generated tokens/s since the previous scrape.", [[
    "",
    Math.round(rate * 100) / 100,
  ]]);
  metric("hearth_decode_steps_total", "counter", "llama_decode calls by the scheduler.", [[
    "",
    s.decodeSteps,
  ]]);
  metric(
    "hearth_backend_sampled_tokens_total",
    "counter",
    "Tokens sampled inside the decode graph (backend sampling).",
    [["", s.backendSampledTotal]],
  );
  metric(
    "hearth_fast_sampled_tokens_total",
    "counter",
    "Tokens drawn from the logits row by Hearth's fast sampler (a seeded chain without top-k).",
    [["", s.fastSampledTotal]],
  );
  metric("hearth_draft_tokens_total", "counter", "Speculative draft tokens verified (--mtp).", [[
    "",
    s.draftTokensTotal,
  ]]);
  metric(
    "hearth_draft_accepted_tokens_total",
    "counter",
    "Draft tokens the target's own samples agreed with.",
    [["", s.draftAcceptedTotal]],
  );
  metric(
    "hearth_graph_padding_rows_total",
    "counter",
    "Rows added to pad decode steps to a --graph-batch size.",
    [["", s.graphPaddingRowsTotal]],
  );
  metric(
    "hearth_engine_loop_seconds_total",
    "counter",
    "Scheduler loop time by phase (decode, sample, io, other).",
    Object.entries(s.loopMs).map(([phase, ms]) => [`phase="${phase}"`, ms / 1000]),
  );
  metric("hearth_sequences_running", "gauge", "Sequences being decoded.", [["", s.running]]);
  metric("hearth_queue_length", "gauge", "Requests waiting for a free sequence.", [[
    "",
    s.waiting,
  ]]);
  metric("hearth_kv_cache_usage_ratio", "gauge", "KV cells in use (incl. cached prefixes).", [[
    "",
    Math.round(s.kvUsage * 1e6) / 1e6,
  ]]);
  // Where reused prompt prefixes came from: the KV a slot still held, or the prompt cache's tiers.
  const pc = s.promptCache;
  const tiers: [string, TierStats][] = pc
    ? [["ram", pc.ram], ...(pc.disk ? [["disk", pc.disk] as [string, TierStats]] : [])]
    : [];
  metric(
    "hearth_prompt_cache_hits",
    "counter",
    "Requests whose prompt prefix was reused, by where it was kept (slot, ram, disk).",
    [
      ['tier="slot"', s.slotHits],
      ...tiers.map(([t, x]): [string, number] => [`tier="${t}"`, x.hits]),
    ],
  );
  metric(
    "hearth_prompt_cache_misses",
    "counter",
    "Requests of at least the cache's minimum length whose prefix no tier held.",
    tiers.map(([t, x]): [string, number] => [`tier="${t}"`, x.misses]),
  );
  metric(
    "hearth_prompt_cache_bytes",
    "gauge",
    "Bytes of KV states the prompt cache holds, by tier.",
    tiers.map(([t, x]): [string, number] => [`tier="${t}"`, x.bytes]),
  );
  metric(
    "hearth_prompt_cache_entries",
    "gauge",
    "KV states the prompt cache holds, by tier.",
    tiers.map(([t, x]): [string, number] => [`tier="${t}"`, x.entries]),
  );
  metric(
    "hearth_prompt_cache_tokens_total",
    "counter",
    "Prompt tokens reused instead of computed, by where they were kept.",
    [
      ['tier="slot"', s.slotTokens],
      ...tiers.map(([t, x]): [string, number] => [`tier="${t}"`, x.tokens]),
    ],
  );
  if (channel) {
    metric("hearth_event_listeners", "gauge", "Open /api/events and /ws listeners.", [[
      "",
      channel.listeners,
    ]]);
    metric("hearth_events_published_total", "counter", "Public events published.", [[
      "",
      channel.published,
    ]]);
    metric(
      "hearth_event_listeners_dropped_total",
      "counter",
      "Listeners dropped for falling too far behind.",
      [["", channel.dropped]],
    );
    metric(
      "hearth_event_listeners_rejected_total",
      "counter",
      "Listeners refused at the cap (SSE_CAPACITY).",
      [["", channel.rejected]],
    );
  }
  return out.join("\n") + "\n";
}
