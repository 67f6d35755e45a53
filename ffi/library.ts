/**
 * Finds and opens the llama.cpp shared libraries once per process.
 *
 * Order of discovery: an explicit directory given by the caller (`serve` passes the build it
 * chose), then `HEARTH_LLAMA_LIB_DIR`, then the prebuilt CPU build of
 * `@node-llama-cpp/linux-x64@3.22.1` in the project's `node_modules`. ggml's backends must be
 * registered (`ggml_backend_load_all_from_path`) before `llama_backend_init`, or llama.cpp finds no
 * CPU device at all.
 *
 * @example
 * ```ts
 * import { openLlama } from "./library.ts";
 * const llama = openLlama();
 * llama.sym.llama_vocab_n_tokens; // bound symbols
 * ```
 * @module
 */
import { type GgmlSymbols, ggmlSymbols, type LlamaSymbols, llamaSymbols } from "./symbols.ts";

/** An opened llama.cpp build. */
export type Llama = {
  dir: string;
  sym: LlamaSymbols;
  ggml: GgmlSymbols;
  /** Recent warning/error lines llama.cpp logged, newest last (for error messages). */
  recentLog: string[];
};

/** Where the prebuilt CPU libraries sit inside the npm package. */
export const PREBUILT_SUBDIR = "node_modules/@node-llama-cpp/linux-x64/bins/linux-x64";
export const LLAMA_LIB = "libllama.v0.5.0.so";
export const GGML_LIB = "libggml.v0.5.0.so";

/**
 * The two libraries to open, as each build names them: the CPU prebuilt, the CUDA prebuilt
 * (`@node-llama-cpp/linux-x64-cuda`), and a source build (`deno task build:cuda`).
 */
export const LIBRARY_NAMES: readonly { llama: string; ggml: string }[] = [
  { llama: LLAMA_LIB, ggml: GGML_LIB },
  { llama: "libllama.cuda.v0.5.0.so", ggml: "libggml.cuda.v0.5.0.so" },
  { llama: "libllama.so", ggml: "libggml.so" },
];

/** Which of `LIBRARY_NAMES` the directory holds; undefined when none. */
export function libraryFiles(dir: string): { llama: string; ggml: string } | undefined {
  for (const names of LIBRARY_NAMES) {
    try {
      Deno.statSync(`${dir}/${names.llama}`);
      Deno.statSync(`${dir}/${names.ggml}`);
      return names;
    } catch {
      // try the next naming
    }
  }
  return undefined;
}

let opened: Llama | undefined;

/** The prebuilt CPU build's directory in this project. */
export function prebuiltDir(): string {
  return `${projectRoot()}/${PREBUILT_SUBDIR}`;
}

/** The project root (this file lives in `<root>/ffi/`). */
export function projectRoot(): string {
  return new URL("..", import.meta.url).pathname.replace(/\/$/, "");
}

/** Picks the directory holding `libllama`, or explains what is missing. */
export function findLibraryDir(explicit?: string): string {
  // The caller's choice first: `serve` passes the build it chose, which is not
  // HEARTH_LLAMA_LIB_DIR when that build failed its smoke decode.
  const candidates = [
    explicit,
    Deno.env.get("HEARTH_LLAMA_LIB_DIR"),
    `${projectRoot()}/${PREBUILT_SUBDIR}`,
  ].filter((d): d is string => !!d);
  for (const dir of candidates) if (libraryFiles(dir)) return dir;
  throw new Error(
    `llama.cpp library ${LLAMA_LIB} not found (looked in ${candidates.join(", ")}); ` +
      "run `deno install` or set HEARTH_LLAMA_LIB_DIR",
  );
}

const LOG_WARN = 3;
const LOG_CONT = 5;

/** Opens the libraries (first call) and returns the shared handle. */
export function openLlama(explicitDir?: string): Llama {
  if (opened) return opened;
  const dir = findLibraryDir(explicitDir);
  const files = libraryFiles(dir)!;
  // libllama first so its logger (which also routes ggml's) is set before backends announce
  // themselves on stderr.
  const sym = Deno.dlopen(`${dir}/${files.llama}`, llamaSymbols).symbols;
  const ggml = Deno.dlopen(`${dir}/${files.ggml}`, ggmlSymbols).symbols;
  const llama: Llama = { dir, sym, ggml, recentLog: [] };
  installLogger(llama);
  ggml.ggml_backend_load_all_from_path(cString(dir));
  if (Number(ggml.ggml_backend_dev_count()) === 0) {
    throw new Error(`no ggml backend device could be loaded from ${dir}`);
  }
  const copies = loadedCopies("libggml-base");
  if (copies.length > 1) {
    // Two device registries and two loggers in one process: tensors of one meet the other's
    // backends. Refused here, before anything is allocated, instead of crashing later.
    throw new Error(
      `two copies of ggml are loaded (${copies.join(", ")}): LD_LIBRARY_PATH or another ` +
        `build put a second libggml-base in the process; load only ${dir}`,
    );
  }
  sym.llama_backend_init();
  opened = llama;
  return llama;
}

/** The distinct files of a library (`libggml-base`) mapped into this process. */
export function loadedCopies(stem: string): string[] {
  let maps: string;
  try {
    maps = Deno.readTextFileSync("/proc/self/maps");
  } catch {
    return [];
  }
  const files = new Set<string>();
  for (const line of maps.split("\n")) {
    const path = line.slice(line.indexOf("/"));
    const name = path.slice(path.lastIndexOf("/") + 1);
    if (line.includes("/") && (name.startsWith(`${stem}.so`) || name.startsWith(`${stem}.`))) {
      files.add(path.trim());
    }
  }
  return [...files];
}

/**
 * The libraries as opened by another thread of this process (a worker): the same loaded copies,
 * bound for this isolate, without registering backends or a logger again (both are process-wide
 * and done once by `openLlama` on the main thread).
 */
export function attachLlama(dir: string): Llama {
  if (opened) return opened;
  const files = libraryFiles(dir);
  if (!files) throw new Error(`no llama.cpp library in ${dir}`);
  const sym = Deno.dlopen(`${dir}/${files.llama}`, llamaSymbols).symbols;
  const ggml = Deno.dlopen(`${dir}/${files.ggml}`, ggmlSymbols).symbols;
  opened = { dir, sym, ggml, recentLog: [] };
  return opened;
}

// llama.cpp logs from worker threads during nonblocking calls, so the callback must be
// thread-safe; it is unref'd so it never keeps the process alive on its own. Output is quiet by
// default (HEARTH_LLAMA_LOG=1 shows it); warnings are kept for error messages.
//
// The callback is process-global in llama.cpp but belongs to one JS isolate. Where several
// isolates share the process (`deno test --parallel` workers), one ending would leave llama.cpp
// calling a dead callback, so HEARTH_LLAMA_LOG=off registers a native no-op sink instead.
function installLogger(llama: Llama): void {
  const mode = Deno.env.get("HEARTH_LLAMA_LOG");
  if (mode === "off") {
    llama.sym.llama_log_set(nativeNoop(), null);
    return;
  }
  const verbose = mode === "1";
  let lastLevel = 0;
  const cb = Deno.UnsafeCallback.threadSafe(
    { parameters: ["i32", "pointer", "pointer"], result: "void" } as const,
    (level: number, text: Deno.PointerValue) => {
      const effective = level === LOG_CONT ? lastLevel : level;
      lastLevel = effective;
      if (!text) return;
      const line = Deno.UnsafePointerView.getCString(text);
      if (effective >= LOG_WARN) {
        llama.recentLog.push(line.trimEnd());
        if (llama.recentLog.length > 50) llama.recentLog.shift();
      }
      if (verbose) Deno.stderr.writeSync(new TextEncoder().encode(line));
    },
  );
  cb.unref();
  llama.sym.llama_log_set(cb.pointer, null);
}

/**
 * A C function that can stand in for `void (*)(int, const char *, void *)` and does nothing:
 * libc's `abs` reads only its first integer argument and has no side effects.
 */
function nativeNoop(): Deno.PointerValue {
  const libc = Deno.dlopen("libc.so.6", {
    dlsym: { parameters: ["pointer", "buffer"], result: "pointer" },
  });
  const p = libc.symbols.dlsym(null, cString("abs"));
  if (!p) throw new Error("libc has no abs() to use as a silent log sink");
  return p;
}

const encoder = new TextEncoder();

/** A NUL-terminated UTF-8 copy of `s`, for `const char *` parameters. */
export function cString(s: string): Uint8Array<ArrayBuffer> {
  const bytes = encoder.encode(s);
  const out = new Uint8Array(bytes.length + 1);
  out.set(bytes);
  return out;
}
