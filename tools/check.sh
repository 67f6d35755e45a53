#!/usr/bin/env bash
# The static checks CI runs before the tests (also `deno task check`): formatting, lint, types of
# every module, the examples in the doc comments of the pure modules (those that need no model,
# GPU or HTTP server to mean something), and no import cycle between folders. Prints one line per
# check and exits with the number that failed.
set -uo pipefail
cd "$(dirname "$0")/.."
deno=(npx --yes deno@2.9.6)
[ -n "${DENO_BIN:-}" ] && deno=("$DENO_BIN")
export NO_COLOR=1
out=$(mktemp)
failed=0
check() {
  local name=$1
  shift
  if "$@" >"$out" 2>&1; then
    echo "check: ${name}: ok"
  else
    echo "check: ${name}: FAILED"
    tail -n 60 "$out" | sed 's/^/  /'
    failed=$((failed + 1))
  fi
}
# Modules whose doc examples are type-checked: everything under these folders.
doc_dirs=(lib/chat lib/cli lib/constrain lib/events lib/gguf lib/gpu lib/manager lib/mcp lib/models
  lib/process lib/source lib/video)
mapfile -t doc_files < <(find "${doc_dirs[@]}" -name '*.ts' | sort)

check "deno fmt --check" "${deno[@]}" fmt --check
check "deno lint" "${deno[@]}" lint
check "deno check" "${deno[@]}" check main.ts routes lib ffi tools tests bench
check "doc examples (${#doc_files[@]} modules)" "${deno[@]}" check --doc-only "${doc_files[@]}"
check "import cycles and layers" "${deno[@]}" run -A tools/check_imports.ts
rm -f "$out"
exit "$failed"
