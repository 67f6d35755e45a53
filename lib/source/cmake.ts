/**
 * Configures and builds targets of the llama.cpp source bundle with CMake, logging every step to
 * a file so a failure quotes the tail of the real compiler output. Used by `deno task build:rpc`,
 * `deno task build:cuda` and the benchmark's peer `llama-server`.
 *
 * @example
 * ```ts
 * import { cmakeBuild } from "./cmake.ts";
 * await cmakeBuild({
 *   what: "ggml-rpc",
 *   src: "/path/to/llama.cpp",
 *   dir: "/tmp/rpc-build",
 *   flags: ["-DGGML_RPC=ON"],
 *   targets: ["ggml-rpc"],
 * });
 * ```
 * @module
 */

export type CmakeBuild = {
  /** What is being built, for messages (`llama-server`, `ggml-rpc`). */
  what: string;
  src: string;
  dir: string;
  flags: string[];
  targets: string[];
  /** Parallel jobs; default the machine's cores. */
  jobs?: number;
  /** Each line the build prints (progress: ninja's `[N/M]`, make's `[ NN%]`). */
  onLine?: (line: string) => void;
};

export async function exists(path: string): Promise<boolean> {
  try {
    await Deno.stat(path);
    return true;
  } catch {
    return false;
  }
}

/** Whether `tool` is on PATH. */
export async function hasTool(tool: string): Promise<boolean> {
  return (await new Deno.Command("sh", { args: ["-c", `command -v ${tool}`], stdout: "null" })
    .output()).success;
}

/**
 * Runs a build step with its output appended to `log` as it comes (a long build's log can be
 * followed while it runs), each line also handed to `onLine`, so a failure can quote the tail.
 */
async function step(
  what: string,
  cmd: string,
  args: string[],
  log: string,
  onLine?: (line: string) => void,
): Promise<void> {
  const child = new Deno.Command(cmd, { args, stdout: "piped", stderr: "piped" }).spawn();
  using file = await Deno.open(log, { append: true, create: true });
  await file.write(new TextEncoder().encode(`$ ${cmd} ${args.join(" ")}\n`));
  const tail: string[] = [];
  const pump = async (stream: ReadableStream<Uint8Array>) => {
    let rest = "";
    for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
      await file.write(new TextEncoder().encode(chunk));
      const lines = (rest + chunk).split("\n");
      rest = lines.pop()!;
      for (const line of lines) {
        tail.push(line);
        if (tail.length > 15) tail.shift();
        onLine?.(line);
      }
    }
    if (rest) tail.push(rest);
  };
  const [status] = await Promise.all([child.status, pump(child.stdout), pump(child.stderr)]);
  if (!status.success) {
    throw new Error(
      `${what} build failed at \`${cmd} ${args.slice(0, 3).join(" ")} ...\` ` +
        `(full log: ${log}):\n${tail.join("\n").trim()}`,
    );
  }
}

/** Configures `dir` from `src` and builds `targets`; returns the log's path. */
export async function cmakeBuild(b: CmakeBuild): Promise<string> {
  for (const tool of ["cmake", "c++"]) {
    if (!await hasTool(tool)) throw new Error(`cannot build ${b.what}: \`${tool}\` is not on PATH`);
  }
  await Deno.mkdir(b.dir, { recursive: true });
  const log = `${b.dir}/build.log`;
  await Deno.writeTextFile(log, "");
  const ninja = await hasTool("ninja");
  await step(b.what, "cmake", [
    "-S",
    b.src,
    "-B",
    b.dir,
    ...(ninja ? ["-G", "Ninja"] : []),
    ...b.flags,
  ], log);
  const jobs = b.jobs ?? navigator.hardwareConcurrency;
  await step(
    b.what,
    "cmake",
    ["--build", b.dir, `-j${jobs}`, "--target", ...b.targets],
    log,
    b.onLine,
  );
  return log;
}

/**
 * Flags that make a ggml backend built here load beside the prebuilt libraries: backends as
 * loadable modules, and unversioned sonames without an rpath, so the module links to the
 * `libggml-base.so` already in the process instead of bringing a second copy.
 */
export const PREBUILT_COMPATIBLE_FLAGS = [
  "-DCMAKE_BUILD_TYPE=Release",
  "-DBUILD_SHARED_LIBS=ON",
  "-DGGML_BACKEND_DL=ON",
  "-DCMAKE_PLATFORM_NO_VERSIONED_SONAME=ON",
  "-DCMAKE_SKIP_RPATH=ON",
  "-DLLAMA_BUILD_TESTS=OFF",
  "-DLLAMA_BUILD_TOOLS=OFF",
  "-DLLAMA_BUILD_EXAMPLES=OFF",
  "-DLLAMA_BUILD_SERVER=OFF",
  "-DLLAMA_BUILD_COMMON=OFF",
  "-DLLAMA_OPENSSL=OFF",
];
