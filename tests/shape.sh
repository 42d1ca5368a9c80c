#!/usr/bin/env bash
# Checks the shape of the house that review alone would have to catch, so it holds as the code
# grows: no product file past 800 lines, errors as strings only where WIT makes them so, and
# no lock that poisons (nor the shim every caller of one writes).
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

# ---- Locks: none that poison, so no shim that un-poisons them ----------------------------
# A std lock is poisoned by a panic while held, and every caller then writes the same shim
# (`.lock().unwrap_or_else(|p| p.into_inner())`) or turns the poison into an error nobody can
# act on. `parking_lot` locks do not poison (a tokio lock, where a guard crosses an `.await`,
# does not either): the shim, `PoisonError` and the std locks themselves stay out of the code.
declare -A poison_locks_allowed=()

poison_lock_lines() {
  # `file:line: text` of every std lock, poison type or poison shim (comments left out; an
  # import or a shim may span lines, so the file is read whole).
  perl -0777 -ne '
    my $text = $_;
    $text =~ s{//[^\n]*}{}g;
    my $name = qr/\b(?:Mutex|RwLock|MutexGuard|RwLockReadGuard|RwLockWriteGuard|Condvar)\b/;
    my @patterns = (
      qr/\bPoisonError\b/,
      qr/\.(?:lock|read|write|try_lock|try_read|try_write)\(\)\s*\.unwrap_or_else\(\s*\|\s*(\w+)\s*\|\s*\g{-1}\.into_inner\(\)/,
      qr/\bstd::sync::$name/,
      qr/(?<![\w:])sync::$name/,
      qr/\buse\s+std::sync::\{(?:[^{}]|\{[^{}]*\})*?$name(?:[^{}]|\{[^{}]*\})*\}/,
    );
    for my $pattern (@patterns) {
      while ($text =~ /$pattern/g) {
        my $line = 1 + (substr($text, 0, $-[0]) =~ tr/\n//);
        my $hit = substr($text, $-[0], $+[0] - $-[0]);
        $hit =~ s/\s+/ /g;
        print "$ARGV:$line: $hit\n";
      }
    }
  ' "$1"
}

mapfile -t lock_files < <(find host/src host/*/src tests/kit/src -name '*.rs' | sort)
for file in "${lock_files[@]}"; do
  hits=$(poison_lock_lines "$file")
  if [ -n "$hits" ] && [ -z "${poison_locks_allowed[$file]+x}" ]; then
    fail "a lock that poisons, or its shim (use parking_lot, or tokio's lock across an .await):"
    echo "$hits" >&2
  fi
done
for file in "${!poison_locks_allowed[@]}"; do
  if [ ! -f "$file" ] || [ -z "$(poison_lock_lines "$file")" ]; then
    fail "$file is allowed a lock that poisons but has none: take it off the list"
  fi
done

if [ "$failed" -ne 0 ]; then
  exit 1
fi
echo "shape: no product file past $max_lines lines; string errors only where WIT has them;" \
  "no lock that poisons"
