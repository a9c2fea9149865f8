#!/usr/bin/env bash
# Runs every Go fuzz target (func FuzzXxx) of the module for a bounded time
# each: FUZZTIME (default 5s) of new inputs after the seed corpus, with
# FUZZ_WORKERS worker processes (default: one per core). A
# failing input is written under the package's testdata/fuzz and fails
# the run; commit it so `go test` replays it from then on.
#
# Each package's instrumented test binary is built once (go test -c -fuzz)
# and run once per target, in the package's directory as go test would:
# building and linking it per target was most of the run's time.
#
# Go's fuzzing engine can end a run with "context deadline exceeded" and no
# failing input when a worker is slow to stop at the deadline: such a run is
# tried once more, and fails only if it happens again.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
module=$(go list -m)
fuzztime=${FUZZTIME:-5s}
# Worker processes per target; go test's default is one per core.
workers=${FUZZ_WORKERS:-$(nproc)}
status=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log=$work/log
# No cgo: the parsers need none, and cgo's external linker took about 45 s
# of each target's minute (one link per target) on 2 busy cores.
export CGO_ENABLED=0
# Where go test keeps the inputs each target found interesting.
corpus=$(go env GOCACHE)/fuzz
fuzz() {
  # -test.fuzzminimizetime bounded: minimising an interesting input may
  # otherwise take 60 s, with no new inputs tried meanwhile.
  (cd "$root/$1" && "$2" -test.run '^$' -test.fuzz "^${3}\$" -test.fuzztime "$fuzztime" \
    -test.parallel "$workers" -test.fuzzminimizetime 100x -test.fuzzcachedir "$corpus/$module/$1") >"$log" 2>&1
}
while read -r dir; do
  bin=$work/$(echo "$dir" | tr / _).test
  go test -c -fuzz . -o "$bin" "./$dir"
  for target in $(cd "$dir" && "$bin" -test.list '^Fuzz' | grep '^Fuzz' || true); do
    echo ">> $module/$dir $target ($fuzztime)"
    if ! fuzz "$dir" "$bin" "$target"; then
      if grep -q 'context deadline exceeded' "$log" && ! grep -q 'Failing input written' "$log"; then
        echo ">> $target: the engine timed out stopping a worker (no failing input); once more"
        fuzz "$dir" "$bin" "$target" && continue
      fi
      cat "$log"
      status=1
    fi
  done
done < <(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u | sed 's|^\./||')
exit $status
