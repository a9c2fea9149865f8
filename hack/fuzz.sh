#!/usr/bin/env bash
# Runs every Go fuzz target (func FuzzXxx) of the module for a bounded time
# each: FUZZTIME (default 10s) of new inputs after the seed corpus. A
# failing input is written under the package's testdata/fuzz and fails
# the run; commit it so `go test` replays it from then on.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-10s}
status=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
while read -r pkg; do
  for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
    echo ">> $pkg $target ($fuzztime)"
    # -fuzzminimizetime bounded: minimising an interesting input may
    # otherwise take 60 s, with no new inputs tried meanwhile.
    if ! go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" -fuzzminimizetime 100x "$pkg" >"$log" 2>&1; then
      cat "$log"
      status=1
    fi
  done
done < <(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u | sed 's|^\.|github.com/deckhand-dev/deckhand|')
exit $status
