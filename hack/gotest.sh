#!/usr/bin/env bash
# make test's go test step: every package, against the local cluster, in
# three groups, then each package's time, slowest first.
#
#   - with the race detector: every package but e2e/... and hack/image,
#     where deckhand's own concurrent code (controllers, in-process
#     operators) runs inside the test binary;
#   - without it: e2e/..., whose operator runs as a separate process built
#     without -race, so the detector would only watch Helm and the tests'
#     own polling: it made those packages' test binaries 4x as costly in
#     CPU (174 s against 42 s for e2e) on a machine whose two cores the
#     suite keeps busy; and hack/image, the image build, which starts no
#     goroutine: the detector only slowed its layers' compression (99
#     CPU-s against 14).
#
# go test starts packages in the order given: the slowest go first, so no
# long package starts last. -parallel 6 (12 for the raced group, below):
# the cluster tests marked t.Parallel (Database, MySQLCluster) wait on
# Jobs and the API server far more than they use CPU; go test's default
# runs two at a time on 2 cores.
#
# The real-node group (e2e/node, docs/development/realnode.md) starts the
# node cluster (hack/node.sh up) first, the raced group once the node is
# up; the node's tests run once the raced group has ended, beside the e2e
# group (the other e2e packages and hack/image) and then the fuzz targets,
# which start when the raced group and the e2e group end; the fault
# campaign (e2e/faults) runs last. The node cluster is removed (hack/node.sh
# down) when gotest.sh exits, failed or not.
# Measured: the node's tests beside the raced group (a 1-minute load of 30
# to 38 on 2 cores) missed deadlines of seconds in every run, serial fault
# tests and parallel ones alike (docs/development/testing.md).
# DECKHAND_NODE=0 leaves the node out (and e2e/node then skips, saying
# why): the fast part alone, no root needed for it.
#
# GO_TEST_FLAGS is passed to every go test run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
module=$(go list -m)
# operator/database/postgres second: third, it would start only when
# operator/mysqlcluster ended, and the two would make the raced group's
# longest chain.
slowest=(operator/database operator/database/postgres operator/mysqlcluster operator/jmxexporter
  operator/database/mysql operator/configmonitor)
# Only packages with tests: go test would only print "no test files" for
# the others, and several of those (the API types' v1 packages) share a
# name, which go test -o DIR/ (below) refuses.
mapfile -t raced < <({ printf "$module/%s\n" "${slowest[@]}"
  go list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' ./... |
    grep -v "^$module/\(e2e\(/.*\)\?\|hack/image\)$"; } | awk 'NF && !seen[$0]++')
node=${DECKHAND_NODE:-1}
# The fault campaign runs in a group of its own (faults_group, below).
mapfile -t e2e_pkgs < <(go list ./e2e/... ./hack/image | grep -v "^$module/e2e/faults$")
if [[ $node != 0 ]]; then
  mapfile -t e2e_pkgs < <(printf '%s\n' "${e2e_pkgs[@]}" | grep -v "^$module/e2e/node$")
fi
log=$(mktemp -d)
# The real-server tests (initdb, dumps, restores, the upgrade Job's
# servers) write their roots under TMPDIR: on a tmpfs, where the machine
# has one, their fsyncs cost nothing and the postgres package used 153
# CPU-s instead of 209 (docs/performance.md). The servers' own settings are
# the shipped ones either way. One directory per run, removed at its end;
# every test process of the run shares it, as internal/freeport's port
# locks must. DECKHAND_TEST_TMPDIR names another place; empty keeps TMPDIR.
# Names stay short: servers' sockets live deep under it (107 bytes at most).
scratch=
if [[ -z ${DECKHAND_TEST_TMPDIR+set} && $(stat -f -c %T /dev/shm 2>/dev/null) == tmpfs && -w /dev/shm ]]; then
  scratch=$(mktemp -d /dev/shm/dh-XXXXXX)
elif [[ -n ${DECKHAND_TEST_TMPDIR:-} ]]; then
  mkdir -p "$DECKHAND_TEST_TMPDIR"
  scratch=$(mktemp -d "$DECKHAND_TEST_TMPDIR/dh-XXXXXX")
fi
if [[ -n $scratch ]]; then
  # The servers run as their own users and must reach their directories.
  chmod 1777 "$scratch"
  # go test's work directory, with every package's test binary until it
  # exits (gigabytes with -race), stays on disk.
  export GOTMPDIR=${GOTMPDIR:-${TMPDIR:-/tmp}} TMPDIR=$scratch
fi
node_started=
# node_down removes the real-node cluster if this run started it.
node_down() {
  [[ -n $node_started ]] || return 0
  node_started=
  local t=$SECONDS
  if ! hack/node.sh down >"$log/node-down" 2>&1; then
    echo "hack/node.sh down failed:"
    cat "$log/node-down"
    return 1
  fi
  echo "real-node cluster removed in $((SECONDS - t)) s"
}
# The groups that run on this machine's own processes (every group but
# the node's) share one cpu cgroup, weighted as the kubelet weighs all of
# the node's pods (kubepods, 1024 per core): when both want the cores,
# each gets half. Without it each of those processes weighs as much as
# the whole node: with twenty runnable, the node's pods got a tenth of the
# CPU, and its BestEffort pods almost none, and tests timed the machine's
# load instead of the operator. Weighted half as much as the node, the
# other groups starved instead (a host archive test's segment not
# archived within a minute, kwok waits missed). The node group itself
# (its control plane, kubelet, containerd and the e2e/node binary; not
# its pods, which the kubelet puts under kubepods) gets a cgroup of the
# same weight: outside one, each of its busy threads weighed 1024 against
# kubepods' 2048, and at the suite's peak (load 45 to 50) the node's pods
# got 7 to 12% of the cores: an operator rollout missed helm's 3-minute
# wait, a primary's agent missed its deadlines and a healthy primary was
# failed over. cgroup v1's cpu hierarchy, as root; elsewhere the groups
# run as they are.
tests_cgroup= node_cgroup=
# weighted_cgroup makes a cpu cgroup named $1 beside this script's, of
# the weight of this machine's cores, and prints its path.
weighted_cgroup() {
  local cpu_dir cpu_root dir
  cpu_dir=$(awk -F: '$2 ~ /(^|,)cpu(,|$)/ { print $3; exit }' /proc/self/cgroup)
  cpu_root=$(awk '$3 == "cgroup" && $4 ~ /(^|,)cpu(,|$)/ { print $2; exit }' /proc/self/mounts)
  dir=$cpu_root${cpu_dir%/}/$1
  if [[ -n $cpu_root && -n $cpu_dir ]] && mkdir "$dir" 2>/dev/null; then
    echo $(($(nproc) * 1024)) >"$dir/cpu.shares"
    echo "$dir"
  fi
}
if [[ $node != 0 && $(id -u) == 0 ]]; then
  tests_cgroup=$(weighted_cgroup "deckhand-tests-$$")
  node_cgroup=$(weighted_cgroup "deckhand-node-$$")
fi
# The local cluster's control plane (its API server, etcd, controllers and
# provisioner) serves those groups and joins them: outside, each of its
# busy processes weighed as much as the whole node, and the node's pods
# got a quarter of the cores at the suite's peak, when a Database's agent
# and probes missed their deadlines for ten seconds and a healthy primary
# was failed over. Its processes go back to the parent cgroup at the end.
if [[ -n $tests_cgroup && ${DECKHAND_TEST_KUBECONFIG:-} == "$(hack/cluster.sh kubeconfig)" ]]; then
  for pid in $(hack/cluster.sh pids); do
    echo "$pid" >"$tests_cgroup/cgroup.procs" 2>/dev/null || true
  done
fi
# in_cgroup moves the calling (sub)shell into cgroup $1 (none: stays).
in_cgroup() {
  [[ -z $1 ]] || echo "$BASHPID" >"$1/tasks" ||
    echo "hack/gotest.sh: could not join $1; this group runs outside it" >&2
}
# remove_cgroup moves what is left in cgroup $1 (the local cluster, a
# server a test left running) to its parent, every thread of each process
# (cgroup.procs), then removes it.
remove_cgroup() {
  [[ -n $1 && -d $1 ]] || return 0
  local pid try
  for try in 1 2 3; do
    while read -r pid; do echo "$pid" >"${1%/*}/cgroup.procs" 2>/dev/null || true; done <"$1/cgroup.procs"
    rmdir "$1" 2>/dev/null && return 0
  done
  return 0
}
# The node cluster goes whatever happened: a failed or interrupted run
# must not leave a kubelet, containers or iptables rules behind.
trap 'node_down || true; remove_cgroup "$tests_cgroup"; remove_cgroup "$node_cgroup"; rm -rf "$log" ${scratch:+"$scratch"}' EXIT
start=$(date +%s)
# -ldflags=-w: test binaries without DWARF, which only a debugger reads
# (stack traces and the race detector's reports use the symbol table):
# linking a raced test binary took a third less CPU (8 s against 12 s for
# operator/database), and go test links every package's binary afresh in
# each run. -vet=off: make test's lint step has run go vet ./... (every
# check, test files included) before this script; go test's own vet pass
# would repeat a subset of it.
build_flags=(-ldflags=-w -vet=off)
# Test binaries are linked into a directory kept between runs (go test -o
# DIR/): go test links every package's test binary afresh in each run,
# about 200 CPU-s of the run's 2,200, but with -o it skips the link when
# the binary already there has the build's ID. -trimpath makes that ID,
# and the build cache's keys, the same in every checkout, so a fresh clone
# finds both. One slot per run at a time (flock, held until this script
# and what it started exit): two runs at once would overwrite each
# other's binaries. With every slot taken the run links afresh, as before.
# hack/fuzz.sh keeps its binaries in the same slot (FUZZ_BIN_DIR).
build_flags+=(-trimpath)
testbin=
testbin_root=${DECKHAND_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/deckhand}/testbin
for slot in 0 1 2; do
  mkdir -p "$testbin_root/$slot"
  exec {testbin_lock}>"$testbin_root/$slot.lock"
  if flock -n "$testbin_lock"; then
    testbin=$testbin_root/$slot
    break
  fi
  exec {testbin_lock}>&-
done
# Each group's go test -o, empty without a slot. go test -o DIR/ names
# each binary after its package's last element, and refuses two packages
# of one name: then the group links afresh.
raced_out=() faults_out=() e2e_out=() node_out=()
if [[ -n $(printf '%s\n' "${raced[@]}" "${e2e_pkgs[@]}" | xargs -n1 basename | sort | uniq -d) ]]; then
  echo "hack/gotest.sh: two tested packages share a name; test binaries are linked afresh" >&2
  testbin=
fi
if [[ -n $testbin ]]; then
  mkdir -p "$testbin"/{raced,faults,e2e,node}
  raced_out=(-o "$testbin/raced/") faults_out=(-o "$testbin/faults/") e2e_out=(-o "$testbin/e2e/")
  node_out=(-o "$testbin/node/")
  export FUZZ_BIN_DIR=$testbin/fuzz
fi
common=(-count=1 -timeout 25m -parallel 6 "${build_flags[@]}" ${GO_TEST_FLAGS:-})
# The raced group's t.Parallel tests are the kwok Database and
# MySQLCluster tests, which wait on the API server and the controllers,
# and the real-server tests, which the postgres package itself holds to
# six at once (serverSlots). Twelve side by side took operator/database
# from 175 s to 126 s alone, but in a whole run they kept the load near
# 20 on the two cores while the raced group ended 400 s before the node
# group, and a kwok Job controller that created no pod for a minute
# failed a test: eight. e2e keeps six (its tests share one cluster);
# e2e/node holds itself to two (node_group). -timeout 40m: at 25 minutes
# operator/database/postgres, slowed by a loaded machine, was ended by go
# test, whose panic runs no cleanup: its servers and stores kept running
# beside the groups after it.
raced_flags=(-count=1 -timeout 40m -parallel 8 "${build_flags[@]}" ${GO_TEST_FLAGS:-})

# node_group starts the real-node cluster and runs e2e/node against it.
# Its output goes to $log/node, shown when it ends, so it does not
# interleave with the other groups' lines.
node_group() {
  local t=$SECONDS
  if ! hack/node.sh up >"$log/node-up" 2>&1; then
    touch "$log/node.up"
    echo "hack/node.sh up failed; its last lines:"
    tail -40 "$log/node-up"
    return 1
  fi
  touch "$log/node.up"
  echo "real-node cluster up in $((SECONDS - t)) s"
  wait_ended raced
  # -timeout 45m: the tests' own deadlines, not go test's, should end a
  # stuck test. -parallel 32, more than its parallel tests: the package
  # holds them to two at once itself, longest first
  # (e2e/node/slots_test.go), which it can do only when go test lets every
  # one of them reach its own wait.
  DECKHAND_NODE_KUBECONFIG=$(hack/node.sh kubeconfig) \
    go test "${common[@]}" "${node_out[@]}" -timeout 45m -parallel 32 "./e2e/node/"
}

# timed runs a group and notes when it ended (seconds from start), so the
# run's end says which group was the critical path.
timed() {
  local group=$1 rc=0
  shift
  "$@" || rc=$?
  echo "$(($(date +%s) - start))" >"$log/$group.ended"
  return $rc
}
# wait_ended waits until group $1 has ended (timed wrote $1.ended).
wait_ended() {
  while [[ ! -f $log/$1.ended ]]; do
    sleep 2
  done
}
# faults_group runs the fault campaign after the node group, when that
# runs: the campaign's 1,000-workload storm keeps its own API server, etcd
# and controllers busy (a 1-minute load of 50 to 57), and beside the node's
# parallel tests the node's pods got 1 to 2 CPU-s in 10 s: in two runs in
# a row a healthy primary of the certificate test missed its agent's
# deadlines and was failed over. Alone at the end it costs its own time
# (about 150 s). Without the node group it starts once
# operator/database/postgres, the raced group's longest package, has
# ended (or the raced group has), and uses the cores the raced group's
# tail leaves idle. Its output goes to $log/faults, shown when it ends.
faults_group() {
  if [[ $node != 0 ]]; then
    wait_ended node
  else
    while [[ ! -f $log/raced.ended ]] &&
      ! grep -qE "^(ok|FAIL)[[:space:]]+$module/operator/database/postgres[[:space:]]" "$log/raced" 2>/dev/null; do
      sleep 2
    done
  fi
  go test "${common[@]}" "${faults_out[@]}" ./e2e/faults
}

# e2e_group runs the other e2e packages once the raced group has ended:
# the chart's tests change the cluster's CRDs (an upgrade to a chart with
# an extra field), and a raced package's first InstallCRDs puts the
# repository's back (testenv), so the two cannot share the cluster's
# CRDs at once. fuzz_group (FUZZ=1, make test) runs the fuzz targets with
# one worker once the e2e group has ended: beside it and the node's tests
# they made the suite's peak (load 45 to 50 on 2 cores). Their output
# goes to $log/e2e and $log/fuzz, shown at the end.
e2e_group() {
  wait_ended raced
  go test "${common[@]}" "${e2e_out[@]}" "${e2e_pkgs[@]}"
}
fuzz_group() {
  wait_ended e2e
  FUZZ_WORKERS=1 hack/fuzz.sh
}

# The node cluster comes up first, alone (hack/node.sh up took 127 to 170
# s instead of 45 s beside the raced group's start), then the raced group
# runs; the node's tests wait for its end (node_group).
node_pid=
if [[ $node != 0 ]]; then
  node_started=1
  (in_cgroup "$node_cgroup"; timed node node_group >"$log/node" 2>&1) & node_pid=$!
  while [[ ! -f $log/node.up ]] && kill -0 "$node_pid" 2>/dev/null; do
    sleep 1
  done
fi
(in_cgroup "$tests_cgroup"; timed faults faults_group >"$log/faults" 2>&1) & faults_pid=$!
(in_cgroup "$tests_cgroup"; timed e2e e2e_group >"$log/e2e" 2>&1) & e2e=$!
fuzz_pid=
if [[ ${FUZZ:-} == 1 ]]; then
  (in_cgroup "$tests_cgroup"; timed fuzz fuzz_group >"$log/fuzz" 2>&1) & fuzz_pid=$!
fi
status=0
(in_cgroup "$tests_cgroup"; timed raced go test -race "${raced_flags[@]}" "${raced_out[@]}" "${raced[@]}") 2>&1 | tee "$log/raced" || status=$?
e2e_status=0
wait "$e2e" || e2e_status=$?
cat "$log/e2e"
[[ $e2e_status -eq 0 ]] || status=$e2e_status
if [[ -n $fuzz_pid ]]; then
  fuzz_status=0
  wait "$fuzz_pid" || fuzz_status=$?
  cat "$log/fuzz"
  [[ $fuzz_status -eq 0 ]] || status=$fuzz_status
fi
if [[ -n $node_pid ]]; then
  node_status=0
  wait "$node_pid" || node_status=$?
  cat "$log/node"
  [[ $node_status -eq 0 ]] || status=$node_status
  node_down || status=$?
fi
faults_status=0
wait "$faults_pid" || faults_status=$?
cat "$log/faults"
[[ $faults_status -eq 0 ]] || status=$faults_status
echo
logs=("$log/raced" "$log/e2e" "$log/faults")
[[ -f $log/node ]] && logs+=("$log/node")
for group in raced faults e2e fuzz node; do
  if [[ -f $log/$group.ended ]]; then echo "the $group group ended at $(cat "$log/$group.ended") s"; fi
done
echo "go test time per package (slowest first; total $(( $(date +%s) - start )) s wall):"
awk '($1 == "ok" || $1 == "FAIL") && NF >= 3 { t = $3; if (t == "(cached)") t = "0s (cached)"; printf "  %-5s %12s  %s\n", $1, t, $2 }' "${logs[@]}" | sort -k2 -g -r
# With GO_TEST_FLAGS=-v each test's own time is in the logs too: the slowest
# tests are what to look at first when the suite grows slow. (awk, not
# head, keeps the first 30: head would end the pipe early, and with
# pipefail sort's SIGPIPE would fail the run.)
if grep -qh -- '^--- \(PASS\|FAIL\): ' "${logs[@]}" 2>/dev/null; then
  echo "slowest top-level tests (GO_TEST_FLAGS=-v):"
  grep -h -- '^--- \(PASS\|FAIL\): ' "${logs[@]}" | sed -E 's/^--- (PASS|FAIL): ([^ ]+) \(([0-9.]+)s\).*/\3 \1 \2/' |
    sort -g -r | awk 'NR <= 30 { printf "  %8.1f s  %-4s %s\n", $1, $2, $3 }'
fi
# Last, each failed test's first error, so the end of the output (what a
# CI page shows first) says why, not only which tests failed: testify's
# Error (with its next line) and Messages, or else the test's last
# file_test.go:N: line (t.Fatal, t.Error).
if [[ $status -ne 0 ]]; then
  echo "the first errors of the failed tests:"
  awk '
    function clean(s) { sub(/^[[:space:]]+/, "", s); gsub(/\t/, " ", s); return substr(s, 1, 240) }
    match($0, /^(=== (RUN|CONT|NAME)|[[:space:]]*--- (FAIL|PASS|SKIP):)[[:space:]]+[^[:space:]]+/) {
      n = split(substr($0, RSTART, RLENGTH), f, /[[:space:]]+/); test = f[n]; more = 0
      if ($0 ~ /--- FAIL:/ && !(test in failed)) { failed[test] = 1; order[++nfailed] = test }
      next
    }
    test == "" { next }
    more > 0 && /^[[:space:]]+\t[[:space:]]+\t/ { if (count[test] < 3) detail[test] = detail[test] "\n      " clean($0); more--; next }
    { more = 0 }
    /^[[:space:]]+Error Trace:/ && !(test in loc) { loc[test] = $3; next }
    /^[[:space:]]+(Error|Messages):/ && count[test] < 3 {
      detail[test] = detail[test] "\n    " clean($0); count[test]++; more = /Error:/ ? 1 : 0; next
    }
    /^[[:space:]]+[^[:space:]]+_test\.go:[0-9]+: [^[:space:]]/ { last[test] = clean($0) }
    END {
      for (i = 1; i <= nfailed; i++) {
        t = order[i]
        if (t in detail) printf "  %s (%s)%s\n", t, loc[t], detail[t]
        else if (t in last) printf "  %s\n    %s\n", t, last[t]
      }
    }
  ' "${logs[@]}" | awk 'NR <= 60'
fi
exit $status
