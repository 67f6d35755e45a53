/**
 * The generation scheduler: owns the llama context and is the only caller of `llama_decode`.
 * Every step packs one token for each generating sequence plus prefill chunks of admitted prompts
 * into a single batch (a token budget keeps long prompts from stalling running streams), decodes
 * it, then samples each sequence that produced logits. A sequence whose consumer went away is
 * dropped before the next step and its KV cells freed.
 *
 * Every step is decoded with synchronous FFI and the loop takes no I/O turn of its own: it is
 * meant for a thread that serves nothing else (`worker_thread.ts`), where a turn would only wake
 * a blocking-pool thread that takes a core from ggml's, and a large step handed to such a thread
 * would cost a hop there and back (about 10 ms a step on 2 cores). Whoever shares the thread
 * (requests, cancels, pauses, the consumers of `submit`) gets in through `onStep`, between two
 * steps.
 *
 * Logprobs are opt-in per request (`logprobs`, `promptLogprobs`): a request without them costs
 * nothing extra, with them each sampled token's raw-logit log-softmax is computed from the logits
 * row already in the context, and every prompt row asks llama.cpp for logits.
 *
 * @example
 * ```ts
 * import { createScheduler } from "./scheduler.ts";
 * const engine = createScheduler(model);
 * for await (const ev of engine.submit({ prompt, maxTokens: 16, sampling, stop: [], ignoreEos: false })) {
 *   if (ev.type === "text") console.log(ev.text);
 * }
 * ```
 * @module
 */
import {
  type Batch,
  decodeSync,
  logitsIth,
  memorySeqPosMax,
  memorySeqRm,
  newBatch,
  sampledToken,
  samplerAccept,
  samplerFree,
  type SamplerPtr,
  samplerSample,
  seqStateGet,
  seqStateSet,
  setBackendSampler,
  setBatchSize,
  tokenToPiece,
} from "../../ffi/mod.ts";
import { newChannel } from "./channel.ts";
import { fastSampler, type RowSampler } from "./fast_sample.ts";
import { onAccelerator } from "./devices.ts";
import {
  acceptForced,
  freeGrammarSampler,
  newGrammarSampler,
  sampleConstrained,
  type SeqGrammar,
} from "./constrained.ts";
import { logSoftmaxTop, type TokenLogprob, type TopTokenLogprob } from "./logprobs.ts";
import type { EngineModel } from "./model.ts";
import type { GrammarTriggers } from "./triggers.ts";
import {
  backendSamplingFits,
  buildSamplerChain,
  type GreedyBias,
  greedyBias,
  greedyPick,
  isNeutralPenalty,
  type Sampling,
} from "./sampling.ts";
import { lookupDraft } from "./lookup.ts";
import {
  draftAll,
  type DraftAsk,
  dropFrom,
  type Heads,
  mirrorStep,
  newHeads,
  settle,
} from "./mtp_heads.ts";
import { endText, newTextStream, pushPiece, type TextStream } from "./text_stream.ts";
import {
  type CacheHit,
  openPromptCache,
  type PromptCache,
  type PromptCacheOptions,
  type PromptCacheStats,
} from "./prompt_cache.ts";

const NO_DRAFTS: number[] = [];
export type GenRequest = {
  prompt: Int32Array;
  /** GBNF the output must match (structured outputs); checked with `checkGrammar` first. */
  grammar?: string;
  /**
   * Makes `grammar` lazy: unconstrained until a token in `tokens` is sampled or the generated
   * text matches one of `patterns` (std::regex, searched from the start of the output; the
   * grammar is fed from the first non-empty capture group, else the match). Check with
   * `checkGrammar(m, grammar, grammarTriggers)` first.
   */
  grammarTriggers?: GrammarTriggers;
  /**
   * Per sampled token, a `logprobs` event with this many top alternatives (0..20); undefined:
   * off. Also adds the sampled ids to `done.tokens`.
   */
  logprobs?: number;
  /**
   * A cap on reasoning tokens: counted between the family's `start` marker (or from the first
   * token when the prompt left reasoning `open`) and its `end`; at the cap the `force` tokens
   * (the end marker) are emitted as the next tokens, so the model goes on to answer.
   */
  reasoningBudget?: ReasoningBudget;
  /**
   * Tokens printed with their text even when the vocabulary makes them control tokens (printed
   * as nothing otherwise): a tool-call family's markers, which its parser must see.
   */
  printTokens?: number[];
  /**
   * Logprobs of each prompt token given its prefix, with this many alternatives (0..20), in
   * `done.promptLogprobs`. Recomputes the whole prompt (no prefix reuse: reused cells have no
   * logits).
   */
  promptLogprobs?: number;
  maxTokens: number;
  sampling: Sampling;
  stop: string[];
  ignoreEos: boolean;
  signal?: AbortSignal;
  /**
   * KV cells of the first `tokens` prompt tokens, computed by a prefill server
   * (`seqStateGet` there): loaded instead of computing them here. Cells llama.cpp will not take
   * (another model or cache type) are dropped and the prompt is computed here as usual.
   */
  kv?: { state: Uint8Array; tokens: number };
  /** Prefill only: compute the prompt, send its cells as a `kv` event, generate nothing. */
  exportKv?: boolean;
};

export type { TokenLogprob, TopTokenLogprob };

export type FinishReason = "stop" | "length";

/** Most alternatives a request may ask for (`logprobs`, `promptLogprobs`), as OpenAI allows. */
export const MAX_LOGPROBS = 20;

export type GenEvent =
  | { type: "text"; text: string }
  /** Pushed just before the text its token produces (which stop matching may still hold). */
  | { type: "logprobs"; entries: TokenLogprob[] }
  /** With `exportKv`: the sequence's KV cells for its `tokens` prompt tokens. */
  | { type: "kv"; state: Uint8Array; tokens: number }
  | {
    type: "done";
    finishReason: FinishReason;
    promptTokens: number;
    /** Prompt tokens whose KV was reused from an earlier request (not recomputed). */
    cachedTokens: number;
    /** With `kv`: prompt tokens whose cells were loaded from it (0: refused, computed here). */
    remoteTokens?: number;
    completionTokens: number;
    /** The stop string that ended generation, when one did. */
    stopString?: string;
    /** Sampled token ids in order (end-of-generation excluded), when logprobs were asked for. */
    tokens?: number[];
    /** With `promptLogprobs`: one entry per prompt token, null for the first. */
    promptLogprobs?: (TokenLogprob | null)[];
  }
  | { type: "error"; message: string };

export type ReasoningBudget = {
  tokens: number;
  open: boolean;
  start: string;
  end: string;
  force: number[];
};

/** A sequence's progress against its reasoning budget. */
type BudgetState = {
  left: number;
  inside: boolean;
  tail: string;
  forcing: number[];
  done: boolean;
};

/** A request the engine refuses before it starts (bad input or no room): carries an HTTP-ish kind. */
export type EngineRefusal = Error & {
  kind: "too_long" | "busy" | "invalid";
  /** For `too_long`: the prompt's tokens and the context per sequence, for clients' own words. */
  promptTokens?: number;
  contextTokens?: number;
};

export function refusal(
  kind: EngineRefusal["kind"],
  message: string,
  sizes: { promptTokens?: number; contextTokens?: number } = {},
): EngineRefusal {
  return Object.assign(new Error(message), { kind, ...sizes });
}

export function isRefusal(e: unknown): e is EngineRefusal {
  return e instanceof Error && "kind" in e;
}

/** Throws the refusal a request gets before it starts (empty, too long, bad logprobs). */
export function checkRequest(m: EngineModel, req: GenRequest): void {
  if (req.prompt.length === 0) throw refusal("invalid", "the prompt is empty (0 tokens)");
  if (req.prompt.length >= m.nCtxSeq) {
    throw refusal(
      "too_long",
      `the prompt has ${req.prompt.length} tokens but the context per sequence is ` +
        `${m.nCtxSeq} tokens (it must leave room for at least one generated token)`,
      { promptTokens: req.prompt.length, contextTokens: m.nCtxSeq },
    );
  }
  for (const key of ["logprobs", "promptLogprobs"] as const) {
    const n = req[key];
    if (n !== undefined && !(Number.isInteger(n) && n >= 0 && n <= MAX_LOGPROBS)) {
      throw refusal("invalid", `${key} must be an integer from 0 to ${MAX_LOGPROBS} (got ${n})`);
    }
  }
  if (
    req.kv && !(Number.isInteger(req.kv.tokens) && req.kv.tokens > 0 &&
      req.kv.tokens < req.prompt.length)
  ) {
    throw refusal(
      "invalid",
      `kv.tokens must be 1 to ${req.prompt.length - 1} (got ${req.kv.tokens})`,
    );
  }
}

export type EngineStats = {
  running: number;
  waiting: number;
  /** KV cells held (running sequences and cached prefixes) over the context's cells. */
  kvUsage: number;
  promptTokensTotal: number;
  generatedTokensTotal: number;
  decodeSteps: number;
  /** Tokens sampled inside the decode graph (backend sampling). */
  backendSampledTotal: number;
  /** Speculative decoding: draft tokens decoded, and those the target's samples agreed with. */
  draftTokensTotal: number;
  draftAcceptedTotal: number;
  /** Prompt tokens whose KV came from a prefill server, and KV states llama.cpp refused. */
  remotePrefillTokensTotal: number;
  remotePrefillRefusedTotal: number;
  /** `--graph-batch`: steps padded to a graph size, and the padding rows they carried. */
  graphPaddedStepsTotal: number;
  graphPaddingRowsTotal: number;
  /**
   * Prompt reuse: requests whose prefix came from the KV a slot still held (`slotHits`, tokens
   * in `slotTokens`), and the prompt cache's tiers (`promptCache`, when it is on).
   */
  slotHits: number;
  slotTokens: number;
  promptCache?: PromptCacheStats;
  /**
   * Where the loop's time went since start, in ms: `decode` (llama_decode), `sample` (sampling,
   * detokenizing, stop strings, events), `io` (waits for a slot that a cancelled request has not
   * freed yet), `other` (`onStep`, exclusive work, admission, batch packing, prompt scoring).
   */
  loopMs: { decode: number; sample: number; io: number; other: number };
};

/** Stats before anything ran (and while the model loads). */
export function emptyStats(): EngineStats {
  return {
    running: 0,
    waiting: 0,
    kvUsage: 0,
    promptTokensTotal: 0,
    generatedTokensTotal: 0,
    decodeSteps: 0,
    backendSampledTotal: 0,
    draftTokensTotal: 0,
    draftAcceptedTotal: 0,
    remotePrefillTokensTotal: 0,
    remotePrefillRefusedTotal: 0,
    graphPaddedStepsTotal: 0,
    graphPaddingRowsTotal: 0,
    slotHits: 0,
    slotTokens: 0,
    loopMs: { decode: 0, sample: 0, io: 0, other: 0 },
  };
}

export type Scheduler = {
  model: EngineModel;
  /** Starts a generation; throws an `EngineRefusal` when it cannot be accepted. */
  submit(req: GenRequest): AsyncIterable<GenEvent>;
  stats(): EngineStats;
  /** Resolves once no sequence is running or waiting. */
  idle(): Promise<void>;
  /** Runs `fn` between decode steps, so it never overlaps a `llama_decode` of this engine. */
  exclusive<T>(fn: () => Promise<T> | T): Promise<T>;
  /** Resolves once every prompt-cache state saved so far is on disk (at once without a disk tier). */
  flushCache?(): Promise<void>;
};

/**
 * Takes a request's events as the step that made them ends, with no async hop: the engine worker
 * posts them straight after the step. `close` comes after the last event.
 */
export type EventSink = { push(ev: GenEvent): void; close(): void };

/** The scheduler as its own thread drives it: `submitTo` delivers events to a sink. */
export type LocalScheduler = Scheduler & {
  /** As `submit`, but events go to `sink` synchronously; cancel through `req.signal`. */
  submitTo(req: GenRequest, sink: EventSink): void;
};

/** A request's event outlet: a channel (`submit`) or a caller's sink (`submitTo`). */
type Outlet = { push(ev: GenEvent): void; close(): void; readonly cancelled: boolean };

type Seq = {
  slot: number;
  req: GenRequest;
  out: Outlet;
  chain?: SamplerPtr;
  /** The chain runs inside the decode graph: no logits row is copied out for this sequence. */
  backend: boolean;
  /** A plain greedy chain on the CPU, taken straight from the logits row (`greedyPick`). */
  greedy?: GreedyBias;
  /** A seeded chain without penalties or top-k, sampled from the logits row (`fastSampler`). */
  fast?: RowSampler;
  grammar?: SeqGrammar;
  fed: number; // prompt tokens already in the KV cache
  pos: number; // next position
  pending: number; // sampled token not yet decoded (-1 none)
  /** Draft tokens decoded after `pending` in this step, to verify against its rows. */
  drafts: number[];
  logitIndex: number; // batch row to sample from after this step (-1 none)
  generated: number;
  cached: number;
  /** Prompt tokens loaded from `req.kv`. */
  remote: number;
  text: TextStream;
  /** Sampled ids, kept only when logprobs were asked for. */
  tokens?: number[];
  promptLogprobs?: (TokenLogprob | null)[];
  /** Prompt rows of this step with logits to score: batch row of prompt token `from` onwards. */
  promptRows?: { row: number; from: number; count: number };
  budget?: BudgetState;
  print?: Set<number>;
  /**
   * Models whose cache cannot be trimmed: the prompt position at which the prefill pauses so
   * the slot's state is kept as a checkpoint (0: none).
   */
  checkpointAt: number;
};

/**
 * Prompt rows with logits per step, for `promptLogprobs`: llama.cpp keeps an output buffer of
 * rows x vocabulary floats sized for the largest step it has seen (128 x 128k x 4 = 64 MiB).
 */
const PROMPT_LOGIT_ROWS = 128;

export type SchedulerOptions = {
  /** Tokens per decode step (decode tokens first, prompt chunks fill the rest). */
  stepBudget?: number;
  /** Requests allowed to wait for a free sequence before `busy` refusals. */
  maxWaiting?: number;
  /**
   * Sample in the decode graph where a request allows it. Default: when the model sits on a GPU
   * or RPC device (`onAccelerator`); on a CPU it is slower than the CPU chain.
   */
  backendSampling?: boolean;
  /**
   * Speculative decoding: up to this many draft tokens per sequence and step, verified in the
   * same batched decode (0: off). Drafts come from prompt lookup (`lookup.ts`).
   */
  draftTokens?: number;
  /**
   * Where drafts come from: up to `k` tokens to follow `history` (the sequence's tokens so far,
   * prompt included, the token about to be decoded last). Default: prompt lookup.
   */
  draft?: (history: readonly number[], k: number) => number[];
  /**
   * Awaited at the top of every loop iteration, after the previous step's events reached their
   * consumers: the loop's only way to let anything else run on its thread. The worker thread
   * posts the events and reads its messages here; without it, a generation runs to its end
   * before its consumer sees a token or can cancel.
   */
  onStep?: () => Promise<void> | void;
  /**
   * The prompt cache beyond the slots (`--cache-ram`, `--cache-dir`, `--cache-disk`): a slot's
   * KV is saved there before another request takes the slot, and restored when a later prompt
   * shares its prefix. Off when absent.
   */
  promptCache?: PromptCacheOptions;
  /**
   * The fewest tokens worth saving or restoring (and the fewest a slot's reuse must throw away
   * before its state is saved): a state copy costs about as much as computing a few tokens.
   */
  cacheMinTokens?: number;
  /** Called when the prompt cache finished writing a state to disk (stats changed). */
  onCacheWritten?: () => void;
};

/** Tokens before the end of a prompt at which a model that cannot trim its cache checkpoints. */
const CHECKPOINT_TAIL = 4;

export function createScheduler(m: EngineModel, opts: SchedulerOptions = {}): LocalScheduler {
  const budget = Math.min(opts.stepBudget ?? m.nBatch, m.nBatch);
  const maxWaiting = opts.maxWaiting ?? 1024;
  // Room for padding a small step up to the largest graph size, whatever the step budget.
  const batch: Batch = newBatch(Math.max(budget, m.graphBatch?.sizes.at(-1) ?? 0));
  const freeSlots = Array.from({ length: m.maxBatch }, (_, i) => m.maxBatch - 1 - i);
  const running: Seq[] = [];
  const waiting: Seq[] = [];
  // The counters start from emptyStats(); the gauges are computed when stats() is read.
  const { running: _r, waiting: _w, kvUsage: _k, loopMs, ...stats } = emptyStats();
  // What each slot's KV cells hold, in order: kept after a request ends so the next request
  // with the same prefix (a system prompt, a growing conversation) skips recomputing it.
  const slotTokens: number[][] = Array.from({ length: m.maxBatch }, () => []);
  const exclusiveQueue: (() => Promise<void>)[] = [];
  /** Stateless chains left attached to idle slots for the next request (see attachChain). */
  const slotKept: ({ chain: SamplerPtr; key: string } | undefined)[] = new Array(m.maxBatch)
    .fill(undefined);
  const draftTokens = opts.draftTokens ?? 0;
  const draft = opts.draft ?? lookupDraft;
  // The model's own heads draft when it has them; any failure there falls back to lookup.
  let heads: Heads | undefined = draftTokens > 0 && m.mtp && !opts.draft ? newHeads(m) : undefined;
  const headsFailed = (e: unknown) => {
    console.error(`hearth: MTP heads disabled, drafting by prompt lookup: ${(e as Error).message}`);
    heads = undefined;
  };
  // A verified draft needs logits for several rows of one sequence in a step; llama.cpp's
  // backend samplers give one row per sequence, so speculative sequences sample on the CPU.
  const backendSampling = (opts.backendSampling ?? onAccelerator(m.devices)) && draftTokens === 0;
  let looping = false;
  let idleWaiters: (() => void)[] = [];
  const cache: PromptCache | undefined = opts.promptCache &&
      (opts.promptCache.ramBytes > 0 || opts.promptCache.dir)
    ? openPromptCache({ ...opts.promptCache, onWritten: opts.onCacheWritten })
    : undefined;
  const cacheMin = Math.max(1, opts.cacheMinTokens ?? 256);
  // Recurrent and hybrid caches cannot be cut back to a shorter prefix, and restored states of
  // sliding-window ones neither: there a state is reused only whole (`exact`), so the cache
  // keeps checkpoints of prompts' prefixes.
  const exact = !m.stateTrim;
  const liveTrim = m.kvTrim;

  function submit(req: GenRequest): AsyncIterable<GenEvent> {
    const ch = newChannel<GenEvent>(() => wakeLoop());
    enqueue(req, ch);
    return ch.iterable;
  }

  function submitTo(req: GenRequest, sink: EventSink): void {
    enqueue(req, { push: sink.push, close: sink.close, cancelled: false });
  }

  function enqueue(req: GenRequest, out: Outlet): void {
    checkRequest(m, req);
    if (waiting.length >= maxWaiting) {
      throw refusal("busy", `the queue is full (${waiting.length} requests waiting)`);
    }
    const seq: Seq = {
      slot: -1,
      req,
      out,
      backend: false,
      drafts: NO_DRAFTS,
      fed: 0,
      pos: 0,
      pending: -1,
      logitIndex: -1,
      generated: 0,
      cached: 0,
      remote: 0,
      text: newTextStream(req.stop),
      ...(req.printTokens?.length ? { print: new Set(req.printTokens) } : {}),
      ...(req.reasoningBudget
        ? {
          budget: {
            left: req.reasoningBudget.tokens,
            inside: req.reasoningBudget.open,
            tail: "",
            forcing: req.reasoningBudget.open && req.reasoningBudget.tokens <= 0
              ? [...req.reasoningBudget.force]
              : [],
            done: req.reasoningBudget.force.length === 0,
          },
        }
        : {}),
      checkpointAt: 0,
      ...(req.logprobs !== undefined ? { tokens: [] } : {}),
      ...(req.promptLogprobs !== undefined
        ? { promptLogprobs: new Array<TokenLogprob | null>(req.prompt.length).fill(null) }
        : {}),
    };
    req.signal?.addEventListener("abort", () => wakeLoop(), { once: true });
    // Scoring a prompt without generating (`echo` with max_tokens 0) still has to decode it.
    if (req.maxTokens <= 0 && req.promptLogprobs === undefined && !req.exportKv) {
      seq.out.push(done(seq, "length"));
      seq.out.close();
      return;
    }
    waiting.push(seq);
    wakeLoop();
  }

  function done(seq: Seq, finishReason: FinishReason, stopString?: string): GenEvent {
    return {
      type: "done",
      finishReason,
      ...(stopString !== undefined ? { stopString } : {}),
      promptTokens: seq.req.prompt.length,
      cachedTokens: seq.cached,
      ...(seq.req.kv ? { remoteTokens: seq.remote } : {}),
      completionTokens: seq.generated,
      ...(seq.tokens ? { tokens: seq.tokens } : {}),
      ...(seq.promptLogprobs ? { promptLogprobs: seq.promptLogprobs } : {}),
    };
  }

  // Pieces of tokens seen in logprobs, spelled with special tokens; filled as they come up.
  const pieces = new Map<number, { text: string; bytes: number[] }>();
  const lossy = new TextDecoder();

  function piece(token: number): { text: string; bytes: number[] } {
    let p = pieces.get(token);
    if (!p) {
      const bytes = tokenToPiece(m.llama, m.vocab, token, true);
      p = { text: lossy.decode(bytes), bytes: Array.from(bytes) };
      pieces.set(token, p);
    }
    return p;
  }

  /** The logprob entry of `token` at batch row `row` (read before the next decode). */
  function tokenLogprob(row: number, token: number, n: number): TokenLogprob {
    const r = logSoftmaxTop(logitsIth(m.llama, m.ctx, row, m.nVocab), token, n);
    const entry = (t: number, logprob: number): TopTokenLogprob => {
      const p = piece(t);
      return { token: t, text: p.text, bytes: p.bytes.slice(), logprob };
    };
    return { ...entry(token, r.logprob), top: r.top.map((a) => entry(a.token, a.logprob)) };
  }

  /** Scores this step's prompt rows of sequences that asked for prompt logprobs. */
  function scorePrompts(): void {
    for (const seq of running) {
      const rows = seq.promptRows;
      if (!rows) continue;
      seq.promptRows = undefined;
      const { prompt, promptLogprobs: n } = seq.req;
      for (let r = 0; r < rows.count; r++) {
        const next = rows.from + r + 1; // row k's logits predict prompt token k + 1
        if (next < prompt.length) {
          seq.promptLogprobs![next] = tokenLogprob(rows.row + r, prompt[next], n!);
        }
      }
    }
  }

  function gone(seq: Seq): boolean {
    return seq.out.cancelled || !!seq.req.signal?.aborted;
  }

  /** Frees the sequence; `keepCache` leaves its KV cells for prefix reuse. */
  function release(seq: Seq, keepCache = false): void {
    if (seq.chain && slotKept[seq.slot]?.chain !== seq.chain) {
      if (seq.backend) setBackendSampler(m.llama, m.ctx, seq.slot, null);
      samplerFree(m.llama, seq.chain);
    }
    seq.chain = undefined;
    seq.backend = false;
    if (seq.grammar) freeGrammarSampler(m, seq.grammar);
    seq.grammar = undefined;
    if (seq.slot >= 0) {
      if (!keepCache) clearSlot(seq.slot);
      freeSlots.push(seq.slot);
      seq.slot = -1;
    }
    const i = running.indexOf(seq);
    if (i >= 0) running.splice(i, 1);
  }

  /** Ends a sequence; text held back is released unless a stop string ended it. */
  function finish(seq: Seq, reason: FinishReason, stopString?: string): void {
    const rest = stopString !== undefined ? "" : endText(seq.text);
    if (rest) seq.out.push({ type: "text", text: rest });
    seq.out.push(done(seq, reason, stopString));
    seq.out.close();
    release(seq, true);
  }

  function clearSlot(slot: number): void {
    memorySeqRm(m.llama, m.mem, slot, -1, -1);
    if (heads) dropFrom(heads, m, slot, 0);
    slotTokens[slot] = [];
  }

  /**
   * Picks the free slot sharing the longest prefix with `prompt`; ties go to the lowest slot id.
   * Low, dense ids matter: llama.cpp's attention view spans the KV streams from the lowest to the
   * highest sequence id in a batch, so scattered ids cost compute for idle streams.
   */
  function takeSlot(prompt: Int32Array): { slot: number; common: number } {
    let best = -1;
    let bestLen = -1;
    for (let i = 0; i < freeSlots.length; i++) {
      const toks = slotTokens[freeSlots[i]];
      let n = 0;
      const max = Math.min(toks.length, prompt.length);
      while (n < max && toks[n] === prompt[n]) n++;
      if (n > bestLen || (n === bestLen && freeSlots[i] < freeSlots[best])) {
        best = i;
        bestLen = n;
      }
    }
    const slot = freeSlots.splice(best, 1)[0];
    return { slot, common: bestLen };
  }

  /**
   * Builds the sequence's sampler chain and, when the request allows it, hands it to the decode
   * graph (backend sampling). A stateless chain (greedy without penalties) stays attached to its
   * slot after the request and serves the next request that would build the same one, because
   * attaching or detaching a chain makes llama.cpp reserve its graphs again on the next step.
   */
  function attachChain(seq: Seq): void {
    const { req } = seq;
    const banned = req.ignoreEos ? m.eogTokens : [];
    const backend = backendSampling && !req.grammar && req.logprobs === undefined &&
      req.promptLogprobs === undefined && backendSamplingFits(req.sampling);
    const key = backend && req.sampling.temperature <= 0 && isNeutralPenalty(req.sampling)
      ? JSON.stringify([req.sampling.logitBias, banned.length > 0])
      : undefined;
    const kept = slotKept[seq.slot];
    if (kept && key !== undefined && kept.key === key) {
      seq.chain = kept.chain;
      seq.backend = true;
      return;
    }
    if (kept) {
      // The slot's kept chain would sample this request in the graph: take it off.
      setBackendSampler(m.llama, m.ctx, seq.slot, null);
      samplerFree(m.llama, kept.chain);
      slotKept[seq.slot] = undefined;
    }
    seq.chain = buildSamplerChain(m.llama, m.nVocab, req.sampling, banned);
    if (backend && setBackendSampler(m.llama, m.ctx, seq.slot, seq.chain)) {
      seq.backend = true;
      if (key !== undefined) slotKept[seq.slot] = { chain: seq.chain, key };
    } else if (!req.grammar) {
      seq.greedy = greedyBias(req.sampling, banned, m.nVocab);
      if (!seq.greedy) seq.fast = fastSampler(req.sampling, banned, m.nVocab);
    }
  }

  function fail(seq: Seq, message: string): void {
    seq.out.push({ type: "error", message });
    seq.out.close();
    release(seq);
  }

  function admit(): void {
    while (waiting.length > 0 && freeSlots.length > 0) {
      const seq = waiting.shift()!;
      if (gone(seq)) {
        seq.out.close();
        continue;
      }
      const { slot, common } = takeSlot(seq.req.prompt);
      seq.slot = slot;
      try {
        attachChain(seq);
        if (seq.req.grammar) {
          seq.grammar = newGrammarSampler(m, seq.req.grammar, seq.req.grammarTriggers);
        }
      } catch (e) {
        fail(seq, `could not build the sampler: ${(e as Error).message}`);
        continue;
      }
      // Keep the shared prefix, but always recompute at least the last prompt token: its logits
      // are what the first sample needs.
      let keep = seq.promptLogprobs ? 0 : Math.min(common, seq.req.prompt.length - 1);
      // A cache that cannot be cut back is reused only when the slot holds nothing past the prefix.
      if (!liveTrim && keep < slotTokens[slot].length) keep = 0;
      const kv = seq.req.kv;
      if (kv && !seq.promptLogprobs && kv.tokens > keep) {
        stash(slot, 0);
        loadRemoteKv(seq, kv);
      } else {
        keep = reuse(seq, keep);
        if (keep > 0 && !memorySeqRm(m.llama, m.mem, slot, keep, -1)) keep = 0;
        if (keep === 0) clearSlot(slot);
        else if (heads) {
          dropFrom(heads, m, slot, keep);
          heads.hLast[slot].fill(0); // h(keep - 1) of a cached prefix is not kept
        }
        slotTokens[slot].length = keep;
        seq.fed = keep;
        seq.pos = keep;
        seq.cached = keep;
        if (exact && cache) {
          const at = seq.req.prompt.length - CHECKPOINT_TAIL;
          if (at - keep >= cacheMin && !seq.req.exportKv) seq.checkpointAt = at;
        }
      }
      // Batch rows must go in ascending sequence id: llama.cpp then packs one step's tokens
      // into a single ubatch (descending ids split it into one ubatch per sequence, ~4x slower).
      const at = running.findIndex((r) => r.slot > slot);
      running.splice(at < 0 ? running.length : at, 0, seq);
    }
  }

  /**
   * Where a new sequence's prefix comes from: the slot it took (`keep` tokens of it), or the
   * prompt cache's entry sharing a longer prefix, restored into the slot. The slot's own cells
   * are saved to the cache first when the new sequence would throw enough of them away. Returns
   * the prompt tokens the slot now holds for the sequence.
   */
  function reuse(seq: Seq, keep: number): number {
    const { prompt } = seq.req;
    const slot = seq.slot;
    const counted = prompt.length >= cacheMin;
    if (!cache || seq.promptLogprobs) {
      if (keep > 0 && counted) slotHit(keep);
      return keep;
    }
    const hit = counted ? cache.find(prompt, { limit: prompt.length - 1, exact }) : undefined;
    if (hit && hit.common >= keep + cacheMin) {
      stash(slot, keep);
      const restored = restore(slot, hit);
      cache.count(hit, restored);
      return restored;
    }
    stash(slot, keep);
    if (keep > 0 && counted) slotHit(keep);
    else if (counted) cache.count(undefined, 0);
    return keep;
  }

  function slotHit(tokens: number): void {
    stats.slotHits++;
    stats.slotTokens += tokens;
  }

  /**
   * Saves what slot `slot` holds to the prompt cache, unless a request keeping its first `keep`
   * tokens would throw away too little of it to matter, or the cache has it already.
   */
  function stash(slot: number, keep: number): void {
    const toks = slotTokens[slot];
    if (!cache || toks.length - keep < cacheMin) return;
    if (cache.covers(toks, exact)) return;
    try {
      cache.put(Int32Array.from(toks), seqStateGet(m.llama, m.ctx, slot), exact);
    } catch (e) {
      console.error(`hearth: prompt cache: could not save a slot: ${(e as Error).message}`);
    }
  }

  /** Loads a cache entry into `slot`; returns the prompt tokens it serves (0: refused). */
  function restore(slot: number, hit: CacheHit): number {
    const got = cache!.take(hit.id);
    clearSlot(slot);
    if (
      got && seqStateSet(m.llama, m.ctx, slot, got.state) &&
      memorySeqPosMax(m.llama, m.mem, slot) === got.tokens.length - 1
    ) {
      slotTokens[slot] = Array.from(got.tokens);
      if (heads) heads.hLast[slot].fill(0); // the MTP context has none of these cells
      return hit.common;
    }
    // Another layout or a damaged state: llama.cpp refused it, so nobody gets it again.
    clearSlot(slot);
    cache!.drop(hit.id);
    return 0;
  }

  /** Keeps checkpoints of the prefills that paused for one (models that cannot trim). */
  function takeCheckpoints(): void {
    for (const seq of running) {
      if (seq.checkpointAt > 0 && seq.fed === seq.checkpointAt) {
        seq.checkpointAt = 0;
        stash(seq.slot, 0);
      }
    }
  }

  /**
   * Puts a prefill server's cells for the prompt's first `kv.tokens` tokens into the sequence's
   * slot; when llama.cpp refuses them, the whole prompt is computed here instead.
   */
  function loadRemoteKv(seq: Seq, kv: { state: Uint8Array; tokens: number }): void {
    const slot = seq.slot;
    clearSlot(slot);
    let keep = 0;
    if (
      seqStateSet(m.llama, m.ctx, slot, kv.state) &&
      memorySeqPosMax(m.llama, m.mem, slot) === kv.tokens - 1
    ) {
      keep = kv.tokens;
      slotTokens[slot] = Array.from(seq.req.prompt.subarray(0, keep));
      stats.remotePrefillTokensTotal += keep;
      // The MTP context has no cells for these positions: its drafts start cold (and are
      // verified as always, so output is unchanged).
      if (heads) heads.hLast[slot].fill(0);
    } else {
      clearSlot(slot);
      stats.remotePrefillRefusedTotal++;
    }
    seq.fed = keep;
    seq.pos = keep;
    seq.cached = 0;
    seq.remote = keep;
  }

  /**
   * Fills the batch; returns its size. Generating sequences get their token (and any drafts to
   * verify) first; prompt chunks share what is left of the budget. Rows are written in ascending
   * slot order (`running` is kept sorted) so llama.cpp can take the step in as few ubatches as
   * possible.
   */
  function pack(): number {
    let prefillBudget = budget;
    const asks: DraftAsk[] = [];
    const askers: Seq[] = [];
    for (const seq of running) {
      if (seq.pending < 0) continue;
      prefillBudget--;
      seq.drafts = NO_DRAFTS;
      if (draftTokens > 0 && prefillBudget > 0) {
        // Never draft past what the request may still generate or the context can hold.
        const room = Math.min(
          draftTokens,
          seq.req.maxTokens - seq.generated - 1,
          m.nCtxSeq - seq.pos - 2,
          prefillBudget,
        );
        if (room <= 0) continue;
        if (heads) {
          asks.push({ slot: seq.slot, token: seq.pending, pos: seq.pos, k: room });
          askers.push(seq);
          prefillBudget -= room;
          continue;
        }
        const history = slotTokens[seq.slot];
        history.push(seq.pending);
        seq.drafts = draft(history, room).slice(0, room);
        history.pop();
        prefillBudget -= seq.drafts.length;
      }
    }
    if (heads && asks.length) {
      try {
        const drafts = draftAll(heads, m, asks);
        askers.forEach((seq, i) => (seq.drafts = drafts[i]));
      } catch (e) {
        headsFailed(e);
      }
    }
    // Prompts take all the budget the generating rows leave, as llama-server and vLLM do.
    // Smaller chunks beside running streams (256 or 512 tokens) were measured in paired rounds
    // against llama-server (2 cores, `small` preset): each stall was shorter but every running
    // stream met several, so ITL p99 at 32 streams was 0.86-1.07 s against llama-server's
    // 0.29-1.6 s, and 0.24 s with whole-budget steps; TTFT and tok/s were no better.
    let n = 0;
    for (const seq of running) {
      seq.logitIndex = -1;
      if (seq.pending >= 0) {
        put(n, seq.pending, seq.pos, seq.slot, true);
        seq.logitIndex = n++;
        seq.pos++;
        seq.pending = -1;
        for (const d of seq.drafts) {
          put(n++, d, seq.pos++, seq.slot, true);
          stats.draftTokensTotal++;
        }
        continue;
      }
      const left = seq.req.prompt.length - seq.fed;
      if (left <= 0 || prefillBudget <= 0) continue;
      const scored = seq.promptLogprobs !== undefined;
      const take = Math.min(
        left,
        prefillBudget,
        scored ? PROMPT_LOGIT_ROWS : Infinity,
        seq.checkpointAt > seq.fed ? seq.checkpointAt - seq.fed : Infinity,
      );
      prefillBudget -= take;
      if (scored) seq.promptRows = { row: n, from: seq.fed, count: take };
      for (let k = 0; k < take; k++) {
        const last = seq.fed + k === seq.req.prompt.length - 1;
        put(n, seq.req.prompt[seq.fed + k], seq.pos, seq.slot, last || scored);
        if (last) seq.logitIndex = n;
        n++;
        seq.pos++;
      }
      seq.fed += take;
      stats.promptTokensTotal += take;
    }
    setBatchSize(batch, n);
    return n;
  }

  /**
   * `--graph-batch`: fills the batch up to the smallest configured size that holds its `n` rows,
   * so a GPU backend sees few graph shapes and replays its captured graphs. Each padding row is
   * token 0 at position 0 of a padding sequence of its own, with an output like the real rows of
   * a decode step: the step then has as many rows, sequences and outputs as the size. Nothing
   * reads their results. Returns the rows to decode.
   */
  function padToGraphSize(n: number): number {
    const g = m.graphBatch;
    if (!g) return n;
    const size = g.sizes.find((s) => s >= n);
    if (size === undefined || size === n) return n;
    for (let i = n; i < size; i++) {
      batch.token[i] = 0;
      batch.pos[i] = 0;
      batch.seqId[i] = m.maxBatch + i - n;
      batch.logits[i] = 1;
    }
    setBatchSize(batch, size);
    stats.graphPaddedStepsTotal++;
    stats.graphPaddingRowsTotal += size - n;
    return size;
  }

  /** Frees the cells the padding rows of the last step took. */
  function dropPadding(count: number): void {
    for (let k = 0; k < count; k++) memorySeqRm(m.llama, m.mem, m.maxBatch + k, -1, -1);
  }

  function put(i: number, token: number, pos: number, seq: number, logits: boolean): void {
    slotTokens[seq].push(token);
    batch.token[i] = token;
    batch.pos[i] = pos;
    batch.seqId[i] = seq;
    batch.logits[i] = logits ? 1 : 0;
  }

  /**
   * The next token of a reasoning budget's end marker, accepted into the sequence's samplers as
   * if sampled; undefined when nothing is being forced (or a grammar that already governs the
   * output would not take it, which ends the forcing).
   */
  function forcedToken(seq: Seq): number | undefined {
    const b = seq.budget;
    if (!b?.forcing.length) return undefined;
    const token = b.forcing[0];
    if (seq.grammar) {
      if (!acceptForced(m, seq.chain!, seq.grammar, token)) {
        b.forcing = [];
        b.done = true;
        return undefined;
      }
    } else if (!seq.greedy) samplerAccept(m.llama, seq.chain!, token);
    b.forcing.shift();
    return token;
  }

  /** Counts a generated piece against the reasoning budget; at the cap, starts the forcing. */
  function countReasoning(seq: Seq, piece: string): void {
    const b = seq.budget;
    if (!b || b.done) return;
    const marks = seq.req.reasoningBudget!;
    b.tail = (b.tail + piece).slice(-(Math.max(marks.start.length, marks.end.length) + 16));
    if (!b.inside) {
      const at = b.tail.indexOf(marks.start);
      if (at < 0) return;
      b.inside = true;
      b.tail = b.tail.slice(at + marks.start.length);
      if (b.left <= 0) b.forcing = [...marks.force];
      return;
    }
    if (b.tail.includes(marks.end)) {
      b.done = true;
      b.forcing = [];
      return;
    }
    if (b.forcing.length) return;
    if (--b.left <= 0) b.forcing = [...marks.force];
  }

  /** Samples batch row `row` of `seq`; undefined when the grammar allows nothing more. */
  function sampleRow(seq: Seq, row: number): number | undefined {
    const forced = forcedToken(seq);
    if (forced !== undefined) return forced;
    if (seq.grammar) {
      return sampleConstrained(m, seq.chain!, seq.grammar, row, seq.req.ignoreEos);
    }
    if (seq.backend) {
      const token = sampledToken(m.llama, m.ctx, row);
      if (token < 0) throw new Error("the backend sampler returned no token");
      samplerAccept(m.llama, seq.chain!, token);
      stats.backendSampledTotal++;
      return token;
    }
    // Stateless (no penalties, no draws): the chain needs no accept.
    if (seq.greedy) return greedyPick(logitsIth(m.llama, m.ctx, row, m.nVocab), seq.greedy);
    if (seq.fast) return seq.fast(logitsIth(m.llama, m.ctx, row, m.nVocab));
    return samplerSample(m.llama, seq.chain!, m.ctx, row);
  }

  /**
   * Hands a sampled token to the request: end of generation, logprobs, text, stop strings and
   * length. Returns whether the sequence goes on; `pos` is the position the token would take.
   */
  function takeToken(seq: Seq, token: number | undefined, row: number, pos: number): boolean {
    // Nothing the grammar allows is left: the constrained output is complete.
    if (token === undefined || (!seq.req.ignoreEos && m.eogTokens.includes(token))) {
      finish(seq, "stop");
      return false;
    }
    seq.generated++;
    stats.generatedTokensTotal++;
    if (seq.tokens) {
      seq.tokens.push(token);
      seq.out.push({ type: "logprobs", entries: [tokenLogprob(row, token, seq.req.logprobs!)] });
    }
    const piece = tokenToPiece(m.llama, m.vocab, token, seq.print?.has(token) ?? false);
    if (seq.budget) countReasoning(seq, new TextDecoder().decode(piece));
    const { emit, stopped, stop } = pushPiece(seq.text, piece);
    if (emit) seq.out.push({ type: "text", text: emit });
    if (stopped) finish(seq, "stop", stop);
    else if (seq.generated >= seq.req.maxTokens || pos + 1 >= m.nCtxSeq) finish(seq, "length");
    else return true;
    return false;
  }

  /**
   * Samples a sequence's rows of this step. Row 0 holds the token sampled last step; rows 1..k
   * hold drafts. The sample from row j is the real next token; while it equals draft j+1, row
   * j+1 was computed on the right input and is sampled too. Every token is drawn from the chain
   * exactly as without drafts (the same draws in the same order), so greedy and seeded output
   * are unchanged; drafts only decide how many tokens one step yields. Cells of rejected drafts
   * are removed.
   */
  function sampleSeq(seq: Seq): void {
    const drafts = seq.drafts;
    seq.drafts = NO_DRAFTS;
    const slot = seq.slot;
    const first = seq.pos - 1 - drafts.length; // position of row 0's token
    let j = 0;
    for (;; j++) {
      const token = sampleRow(seq, seq.logitIndex + j);
      if (!takeToken(seq, token, seq.logitIndex + j, first + j + 1)) break;
      if (j < drafts.length && token === drafts[j]) {
        stats.draftAcceptedTotal++;
        continue;
      }
      seq.pending = token!;
      break;
    }
    // Cells after row j hold drafts that the samples did not confirm.
    const keep = first + j + 1;
    if (drafts.length && slotTokens[slot].length > keep) {
      memorySeqRm(m.llama, m.mem, slot, keep, -1);
      slotTokens[slot].length = keep;
    }
    if (heads) {
      try {
        if (seq.slot >= 0) settle(heads, m, slot, keep, seq.logitIndex + j);
        else if (slotTokens[slot].length) dropFrom(heads, m, slot, keep);
      } catch (e) {
        headsFailed(e);
      }
    }
    if (seq.slot >= 0) seq.pos = keep;
  }

  function sampleAll(): void {
    for (const seq of [...running]) {
      if (seq.logitIndex < 0) continue;
      if (gone(seq)) continue;
      if (seq.req.maxTokens <= 0) {
        // Only its prompt was to be scored, or its cells sent to a decode server.
        if (seq.req.exportKv) {
          try {
            const state = seqStateGet(m.llama, m.ctx, seq.slot);
            seq.out.push({ type: "kv", state, tokens: seq.req.prompt.length });
          } catch (e) {
            fail(seq, (e as Error).message);
            continue;
          }
        }
        finish(seq, "length");
        continue;
      }
      try {
        sampleSeq(seq);
      } catch (e) {
        fail(seq, (e as Error).message);
      }
    }
  }

  async function loop(): Promise<void> {
    looping = true;
    let t = performance.now();
    /** Adds the time since the last mark to `phase`. */
    const mark = (phase: keyof typeof loopMs) => {
      const now = performance.now();
      loopMs[phase] += now - t;
      t = now;
    };
    try {
      while (running.length || waiting.length || exclusiveQueue.length) {
        if (opts.onStep) await opts.onStep();
        while (exclusiveQueue.length) await exclusiveQueue.shift()!();
        for (const seq of [...running]) {
          // Closing wakes a consumer still waiting on the channel of an aborted request.
          if (gone(seq)) {
            release(seq);
            seq.out.close();
          }
        }
        for (const seq of waiting.filter(gone)) {
          waiting.splice(waiting.indexOf(seq), 1);
          seq.out.close();
        }
        admit();
        const n = pack();
        mark("other");
        if (n === 0) {
          if (!running.length && !waiting.length) continue;
          // Everything left is waiting for a slot that a cancelled consumer has not freed yet.
          await new Promise((r) => setTimeout(r, 1));
          mark("io");
          continue;
        }
        const rows = padToGraphSize(n);
        const rc = decodeSync(m.llama, m.ctx, batch);
        if (rows > n) dropPadding(rows - n);
        mark("decode");
        stats.decodeSteps++;
        if (rc !== 0) {
          // Only the sequences in this batch are affected; each is failed and its cells freed.
          const why = rc === 1
            ? "no room left in the KV cache for this step"
            : `llama_decode failed (${rc})`;
          for (const seq of [...running]) fail(seq, why);
          continue;
        }
        if (heads) {
          try {
            mirrorStep(heads, m, batch, n);
          } catch (e) {
            headsFailed(e);
          }
        }
        scorePrompts();
        if (exact && cache) takeCheckpoints();
        mark("other");
        sampleAll();
        mark("sample");
      }
    } finally {
      looping = false;
      const ws = idleWaiters;
      idleWaiters = [];
      for (const w of ws) w();
    }
  }

  function wakeLoop(): void {
    if (!looping && (running.length || waiting.length || exclusiveQueue.length)) {
      looping = true;
      // Start on a microtask so requests submitted in the same tick share the first step.
      queueMicrotask(() =>
        loop().catch((e) => {
          for (const seq of [...running, ...waiting.splice(0)]) {
            fail(seq, `engine error: ${(e as Error).message}`);
          }
        })
      );
    }
  }

  function exclusive<T>(fn: () => Promise<T> | T): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      exclusiveQueue.push(async () => {
        try {
          resolve(await fn());
        } catch (e) {
          reject(e);
        }
      });
      wakeLoop();
    });
  }

  function kvUsage(): number {
    let used = 0;
    for (const t of slotTokens) used += t.length;
    return used / (m.nCtxSeq * m.maxBatch);
  }

  return {
    model: m,
    submit,
    submitTo,
    exclusive,
    flushCache: () => cache?.flushed() ?? Promise.resolve(),
    stats: () => ({
      running: running.length,
      waiting: waiting.length,
      kvUsage: kvUsage(),
      ...stats,
      ...(cache ? { promptCache: cache.stats() } : {}),
      loopMs: { ...loopMs },
    }),
    idle: () =>
      looping || running.length || waiting.length
        ? new Promise<void>((r) => idleWaiters.push(r))
        : Promise.resolve(),
  };
}
