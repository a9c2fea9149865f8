#!/usr/bin/env bash
# Runs every Go fuzz target (func FuzzXxx) of the module for a bounded time
# each: FUZZTIME (default 5s) of new inputs after the seed corpus. A
# failing input is written under the package's testdata/fuzz and fails
# the run; commit it so `go test` replays it from then on.
#
# Go's fuzzing engine can end a run with "context deadline exceeded" and no
# failing input when a worker is slow to stop at the deadline: such a run is
# tried once more, and fails only if it happens again.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-5s}
status=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# No cgo: the parsers need none, and cgo's external linker took about 45 s
# of each target's minute (one link per target) on 2 busy cores.
export CGO_ENABLED=0
fuzz() {
  # -fuzzminimizetime bounded: minimising an interesting input may
  # otherwise take 60 s, with no new inputs tried meanwhile.
  go test -run '^$' -fuzz "^${2}\$" -fuzztime "$fuzztime" -fuzzminimizetime 100x "$1" >"$log" 2>&1
}
while read -r pkg; do
  for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
    echo ">> $pkg $target ($fuzztime)"
    if ! fuzz "$pkg" "$target"; then
      if grep -q 'context deadline exceeded' "$log" && ! grep -q 'Failing input written' "$log"; then
        echo ">> $target: the engine timed out stopping a worker (no failing input); once more"
        fuzz "$pkg" "$target" && continue
      fi
      cat "$log"
      status=1
    fi
  done
done < <(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u | sed 's|^\.|github.com/deckhand-dev/deckhand|')
exit $status
