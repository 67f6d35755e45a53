/**
 * What the scheduler's callers see: a generation request and its events, the refusals a request
 * gets before it starts (`refusal`, `checkRequest`), the engine's stats, the scheduler's record
 * and its options. `scheduler.ts` re-exports all of it, so importers name that module.
 *
 * @example
 * ```ts ignore
 * import { checkRequest, isRefusal } from "./scheduler_types.ts";
 * try {
 *   checkRequest(model, { prompt: new Int32Array(), maxTokens: 8, sampling, stop: [], ignoreEos: false });
 * } catch (e) {
 *   if (isRefusal(e)) console.log(e.kind); // "invalid": the prompt is empty
 * }
 * ```
 * @module
 */
import type { TokenLogprob, TopTokenLogprob } from "./sampling/logprobs.ts";
import type { EngineModel } from "./model.ts";
import type { PromptCacheOptions, PromptCacheStats } from "./cache/prompt_cache.ts";
import type { Sampling } from "./sampling/sampling.ts";
import type { GrammarTriggers } from "./grammar/triggers.ts";

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
  /** Tokens drawn from the logits row by the fast sampler (`sampling/fast_sample.ts`). */
  fastSampledTotal: number;
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
    fastSampledTotal: 0,
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
