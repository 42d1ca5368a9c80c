#!/usr/bin/env bash
# Checks the shape of the house that review alone would have to catch, so it holds as the code
# grows: no product file past 800 lines, and errors as strings only where WIT makes them so.
# Each rule has an allow-list; an entry gives its reason, and an entry that no longer breaks
# the rule fails the check too, so the lists only shrink.
set -euo pipefail
cd "$(dirname "$0")/.."

failed=0
fail() {
  echo "shape: $*" >&2
  failed=1
}

# ---- Files: at most 800 product lines ----------------------------------------------------
# Product lines: the file up to an inline `#[cfg(test)] mod …` (the tests at its end). Test
# files (`tests.rs`, anything under a `tests/` folder) are not product code.
max_lines=800
declare -A long_files_allowed=()

product_lines() {
  awk 'prev ~ /^#\[cfg\(test\)\]/ && /^mod / { print NR - 2; found = 1; exit }
       { prev = $0 }
       END { if (!found) print NR }' "$1"
}

mapfile -t product_files < <(find host/src host/*/src plugins/*/src -name '*.rs' \
  ! -name tests.rs ! -name '*_tests.rs' ! -path '*/tests/*' | sort)
for file in "${product_files[@]}"; do
  lines=$(product_lines "$file")
  if [ "$lines" -gt "$max_lines" ] && [ -z "${long_files_allowed[$file]+x}" ]; then
    fail "$file has $lines product lines (at most $max_lines): split it by concept"
  fi
done
for file in "${!long_files_allowed[@]}"; do
  if [ ! -f "$file" ] || [ "$(product_lines "$file")" -le "$max_lines" ]; then
    fail "$file is allowed past $max_lines lines but is no longer: take it off the list"
  fi
done

# ---- Errors: `Result<_, String>` only where WIT makes the error a string -------------------
# A WIT `result<_, string>` is a Rust `Result<_, String>` in the generated traits and in what
# calls them; everywhere else in the host an error is a type (thiserror) that says what went
# wrong. (Plugins are guests of that WIT: their errors end as strings by design.)
declare -A string_errors_allowed=(
  [host/capabilities/src/kv.rs]="the kv capability's WIT functions return result<_, string>"
  [host/runtime/src/world.rs]="the plugin world's init export returns result<_, string>"
  [host/runtime/src/plugin.rs]="carries the init export's result<_, string> as the guest gave it"
  [host/src/cli/plugin/new/lib.rs]="the plugin template's init, a WIT export"
)

string_error_lines() {
  # Lines of product code (before an inline test module) with a Result whose error is String.
  awk 'prev ~ /^#\[cfg\(test\)\]/ && /^mod / { exit } { prev = $0; print FILENAME ":" FNR ":" $0 }' "$1" |
    grep -P 'Result<(?:[^<>]|<(?:[^<>]|<[^<>]*>)*>)*,\s*String>' || true
}

for file in "${product_files[@]}"; do
  [[ "$file" == host/* ]] || continue
  hits=$(string_error_lines "$file")
  if [ -n "$hits" ] && [ -z "${string_errors_allowed[$file]+x}" ]; then
    fail "an error as a string outside the WIT-facing files (give it a type):"
    echo "$hits" >&2
  fi
done
for file in "${!string_errors_allowed[@]}"; do
  if [ ! -f "$file" ] || [ -z "$(string_error_lines "$file")" ]; then
    fail "$file is allowed string errors but has none: take it off the list"
  fi
done

if [ "$failed" -ne 0 ]; then
  exit 1
fi
echo "shape: no product file past $max_lines lines; string errors only where WIT has them"
