#!/usr/bin/env bash
# GPU benchmark in one command (docs/ARCHITECTURE.md, "GPU hosts"): builds or reuses llama.cpp from the source
# bundle for this GPU (libraries, llama-server and llama-batched-bench from one build), writes the
# models (the small preset in Q8_0 and a Llama-3.2-1B-shaped F16 model), then runs Hearth and
# llama-server on the same libraries in paired alternating rounds at concurrency 1, 8 and 32
# (127-token prompts, 128 generated tokens, temperature 0, streaming) with --graph-batch on and
# off, and llama-batched-bench as the library limit. Everything lands in one folder: each run's
# JSON, results.json and table.md. When a step crashes, the smoke decode of the same build is run
# under cuda-gdb (or gdb) and its backtrace saved beside the results.
#
#   bench/gpu.sh                 # on a GPU host (about 10 minutes on 16 cores, build included)
#   bench/gpu.sh --cpu           # the same pipeline on a CPU: CPU build, tiny models, short rounds
#   bench/gpu.sh --out DIR --jobs 16 --rounds 3
set -uo pipefail
cd "$(dirname "$0")/.."
mode=gpu out="" jobs=$(nproc) rounds=""
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu) mode=cpu ;;
    --out) out="$2"; shift ;;
    --jobs) jobs="$2"; shift ;;
    --rounds) rounds="$2"; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "gpu.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
export NO_COLOR=1 DENO_NO_UPDATE_CHECK=1
if command -v deno >/dev/null 2>&1; then DENO=(deno); else DENO=(npx --yes deno@2.9.6); fi
out=${out:-bench/results/gpu-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
log="$out/gpu.log"
say() { echo "gpu.sh: $*" | tee -a "$log" >&2; }
t0=$(date +%s)

"${DENO[@]}" install --quiet >>"$log" 2>&1 || { say "deno install failed (see $log)"; exit 1; }

# 1. One build: the libraries Hearth loads, llama-server and llama-batched-bench.
build_args=(--jobs "$jobs"); [ "$mode" = cpu ] && build_args+=(--cpu)
if ! "${DENO[@]}" run -A bench/gpu_build.ts "${build_args[@]}" >"$out/build.json" 2>>"$log"; then
  say "the build failed (see $log)"; exit 1
fi
lib=$(sed -nE 's/.*"libDir":"([^"]+)".*/\1/p' "$out/build.json")
server=$(sed -nE 's/.*"server":"([^"]+)".*/\1/p' "$out/build.json")
batched=$(sed -nE 's/.*"batchedBench":"([^"]+)".*/\1/p' "$out/build.json")
say "libraries, llama-server and llama-batched-bench in $lib ($(cat "$out/build.json"))"

# 2. Models (written once into the folder's models/).
mkdir -p "$out/models"
if [ "$mode" = cpu ]; then
  models=(tiny); conc=1,8; gen=32; prompt=64; maxb=8; r=${rounds:-1}; secs=1
else
  models=(small 1b); conc=1,8,32; gen=128; prompt=128; maxb=32; r=${rounds:-3}; secs=8
fi
for m in "${models[@]}"; do
  f="$out/models/$m.gguf"
  [ -f "$f" ] || "${DENO[@]}" run -A main.ts make-model --preset "$m" --out "$f" >>"$log" 2>&1 ||
    { say "make-model $m failed"; exit 1; }
done

backtrace() { # a crashed step: the smoke decode of the same build under a debugger
  local dbg; dbg=$(command -v cuda-gdb || command -v gdb || true)
  if [ -z "$dbg" ]; then say "no cuda-gdb or gdb for a backtrace"; return; fi
  say "a step crashed: backtrace of the smoke decode under $dbg in $out/backtrace.txt"
  local deno_bin; deno_bin=$("${DENO[@]}" eval 'console.log(Deno.execPath())')
  HEARTH_LLAMA_LIB_DIR="${BACKTRACE_LIB:-$lib}" HEARTH_LLAMA_LOG=1 timeout 300 "$dbg" -batch \
    -ex "handle SIGUSR1 SIGUSR2 SIGPIPE nostop noprint" -ex run -ex "thread apply all bt" \
    --args "$deno_bin" run -A main.ts smoke-decode --model "$out/models/${models[0]}.gguf" \
    >"$out/backtrace.txt" 2>&1 || true
}

# 3. Hearth vs llama-server (same build) in paired rounds, --graph-batch on and off.
failed=0
for m in "${models[@]}"; do
  for g in on off; do
    ga=$([ "$g" = on ] && echo "--graph-batch=1,2,4,8,16,32" || echo "--graph-batch=off")
    say "bench: $m, graph-batch $g"
    HEARTH_LLAMA_LIB_DIR="$lib" "${DENO[@]}" run -A bench/bench.ts --model "$out/models/$m.gguf" \
      --peer-bin "$server" --server-arg "$ga" --concurrency "$conc" --prompt-tokens "$prompt" \
      --gen-tokens "$gen" --max-batch "$maxb" --rounds "$r" --round-seconds "$secs" \
      --requests 1 --no-single --no-constrained --no-speculative \
      --json-out "$out/bench-$m-graph-$g.json" >>"$log" 2>&1
    rc=$?
    if [ $rc -ne 0 ]; then
      say "bench $m graph-batch $g failed with status $rc (see $log)"; failed=1
      [ $rc -gt 128 ] && backtrace
    fi
  done
  # 4. The library limit: llama-batched-bench on the same build.
  say "llama-batched-bench: $m"
  ngl=$([ "$mode" = cpu ] && echo 0 || echo 99)
  "$batched" -m "$out/models/$m.gguf" -c $(( (prompt + gen) * maxb + 64 )) -b 2048 -ub 512 \
    -npp $((prompt - 1)) -ntg "$gen" -npl "$conc" -ngl "$ngl" -t "$(nproc)" \
    >"$out/batched-$m.txt" 2>>"$log"
  rc=$?
  if [ $rc -ne 0 ]; then say "llama-batched-bench failed with $rc"; failed=1; [ $rc -gt 128 ] && backtrace; fi
done

# 5. One JSON and one table.
"${DENO[@]}" run -A bench/gpu_report.ts "$out" "$mode" >"$out/table.md" 2>>"$log" ||
  { say "the report failed (see $log)"; exit 1; }
cat "$out/table.md"
say "done in $(( $(date +%s) - t0 )) s; results in $out"
exit $failed
