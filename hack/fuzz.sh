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
# Go's fuzzing coordinator (before Go 1.27, go.dev/issue/75804) can end a
# run with a bare "context deadline exceeded" when a worker on a busy
# machine is slow to stop at the deadline. That is not a finding: a real
# one (a failure, panic or hang) always ends with its input written under
# testdata/fuzz. Such a run is tried once more; if it happens again the
# target is reported as not fuzzed, and the run does not fail on it.
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
# coordinator_race: the last run ended with the coordinator's bare
# deadline error and wrote no failing input.
coordinator_race() {
  grep -q '^    context deadline exceeded$' "$log" && ! grep -q 'Failing input written' "$log"
}
# FUZZ_BIN_DIR keeps the binaries between runs (hack/gotest.sh gives it a
# directory of its own): go test -c skips the link when the binary there
# has the build's ID already, which -trimpath keeps the same in every
# checkout.
bin_dir=${FUZZ_BIN_DIR:-$work}
mkdir -p "$bin_dir"
while read -r dir; do
  bin=$bin_dir/$(echo "$dir" | tr / _).test
  # -s -w, as go test does for the binaries it does not keep: a
  # binary built with -c is linked with DWARF otherwise.
  go test -c -fuzz . -trimpath "-ldflags=-s -w" -o "$bin" "./$dir"
  for target in $(cd "$dir" && "$bin" -test.list '^Fuzz' | grep '^Fuzz' || true); do
    echo ">> $module/$dir $target ($fuzztime)"
    if fuzz "$dir" "$bin" "$target"; then continue; fi
    if coordinator_race; then
      echo ">> $target: the engine timed out stopping a worker (no failing input); once more"
      if fuzz "$dir" "$bin" "$target"; then continue; fi
      if coordinator_race; then
        echo ">> WARNING $target: not fuzzed: the engine timed out stopping a worker again (go.dev/issue/75804, no failing input)"
        continue
      fi
    fi
    cat "$log"
    status=1
  done
done < <(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u | sed 's|^\./||')
exit $status
