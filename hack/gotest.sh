#!/usr/bin/env bash
# make test's go test step: every package, against the local cluster, in
# two groups run side by side, then each package's time, slowest first.
#
#   - with the race detector: every package but e2e/..., where deckhand's
#     own concurrent code (controllers, in-process operators) runs inside
#     the test binary;
#   - without it: e2e/..., whose operator runs as a separate process built
#     without -race, so the detector would only watch Helm and the tests'
#     own polling: it made those packages' test binaries 4x as costly in
#     CPU (174 s against 42 s for e2e) on a machine whose two cores the
#     suite keeps busy.
#
# go test starts packages in the order given: the slowest go first, so no
# long package starts last. -parallel 6: the cluster tests marked
# t.Parallel (Database, MySQLCluster) wait on Jobs and the API server far
# more than they use CPU; go test's default runs two at a time on 2 cores.
#
# GO_TEST_FLAGS is passed to both go test runs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
module=$(go list -m)
slowest=(operator/database operator/mysqlcluster operator/database/postgres operator/jmxexporter
  operator/database/mysql hack/image operator/configmonitor)
mapfile -t raced < <({ printf "$module/%s\n" "${slowest[@]}"; go list ./... | grep -v "^$module/e2e\(/\|$\)"; } | awk '!seen[$0]++')
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT
start=$(date +%s)
common=(-count=1 -timeout 25m -parallel 6 ${GO_TEST_FLAGS:-})
# The e2e group starts first: the fault campaign in it is the longest package.
(go test "${common[@]}" ./e2e/faults ./e2e/... 2>&1 | tee "$log/e2e") & e2e=$!
(go test -race "${common[@]}" "${raced[@]}" 2>&1 | tee "$log/raced") & raced_pid=$!
status=0
wait "$raced_pid" || status=$?
# FUZZ=1 (make test): the fuzz targets run once the raced group is done.
# By then only the fault campaign is left, waiting on its cluster more than
# computing: one fuzz worker uses the core it leaves idle.
if [[ ${FUZZ:-} == 1 ]]; then
  FUZZ_WORKERS=1 hack/fuzz.sh || status=$?
fi
wait "$e2e" || status=$?
echo
echo "go test time per package (slowest first; total $(( $(date +%s) - start )) s wall):"
awk '($1 == "ok" || $1 == "FAIL") && NF >= 3 { t = $3; if (t == "(cached)") t = "0s (cached)"; printf "  %-5s %12s  %s\n", $1, t, $2 }' "$log/raced" "$log/e2e" | sort -k2 -g -r
exit $status
