#!/usr/bin/env bash
# deckhand's local cluster: a real control plane (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler built from source by hack/tools.sh)
# run as local processes by kwokctl, with fake nodes from kwok.
#
#   hack/cluster.sh up          create or restart the cluster; last line: export KUBECONFIG=...
#   hack/cluster.sh down        delete it
#   hack/cluster.sh stop        stop its processes (up starts them again)
#   hack/cluster.sh kubeconfig  print its kubeconfig path
#   hack/cluster.sh env         print exports for tools on PATH and KUBECONFIG
#   hack/cluster.sh pids        print the pids of its running processes, one a line
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tools=$root/hack/tools.sh
cache=${DECKHAND_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/deckhand}
name=${DECKHAND_CLUSTER:-deckhand}
nodes=${DECKHAND_CLUSTER_NODES:-3}

export KWOK_WORKDIR=$cache/kwok
kubeconfig=$KWOK_WORKDIR/clusters/$name/kubeconfig.yaml

use_tools() {
  local kube etcd kwok
  kube=$("$tools" dir kube) etcd=$("$tools" dir etcd) kwok=$("$tools" dir kwok)
  export KWOK_KUBE_VERSION=v1.36.3
  export KWOK_KUBE_BINARY_PREFIX=$kube KWOK_KUBECTL_BINARY=$kube/kubectl
  export KWOK_ETCD_BINARY=$etcd/etcd KWOK_CONTROLLER_BINARY=$kwok/kwok
  kwokctl=$kwok/kwokctl kubectl=$kube/kubectl
}

ready() { [[ -f $kubeconfig ]] && "$kubectl" --kubeconfig "$kubeconfig" get --raw /readyz >/dev/null 2>&1; }

wait_ready() {
  local i
  for i in $(seq 1 120); do
    if ready; then return 0; fi
    sleep 0.5
  done
  echo "cluster $name did not become ready within 60 s; logs: $KWOK_WORKDIR/clusters/$name/logs" >&2
  return 1
}

# without_inherited_fds runs a command with only descriptors 0-2: the
# cluster's processes outlive this script and must not hold a caller's
# `flock` lock (whatever descriptor it is on) for as long as they run.
without_inherited_fds() {
  (
    close_inherited_fds
    exec "$@"
  )
}

# close_inherited_fds closes every descriptor beyond 0-2 of the current
# (sub)shell; call it only in a subshell.
close_inherited_fds() {
  local fd
  for fd in /proc/$BASHPID/fd/*; do
    fd=${fd##*/}
    if ((fd > 2)); then eval "exec $fd>&-"; fi
  done
}

create() {
  echo ">> creating cluster $name (kwokctl, binary runtime, Kubernetes $KWOK_KUBE_VERSION)" >&2
  local since
  since=$(date +%s)
  without_inherited_fds "$kwokctl" create cluster --name "$name" --runtime binary \
    --config "$root/hack/kwok.yaml" --kubeconfig "$kubeconfig" --wait 60s >&2
  wait_ready
  ensure_nodes
  wait_leases_renewed_since "$since"
  fingerprint >"$fingerprint_file"
}

# Fake nodes with room for thousands of pods; kwok marks their pods Running.
ensure_nodes() {
  local i manifest=""
  for i in $(seq 1 "$nodes"); do
    manifest+="
---
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$i
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: \"0\"
  labels:
    kubernetes.io/hostname: kwok-node-$i
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    type: kwok
status:
  allocatable: {cpu: \"1000\", memory: 4Ti, pods: \"5000\"}
  capacity: {cpu: \"1000\", memory: 4Ti, pods: \"5000\"}
  nodeInfo: {architecture: amd64, operatingSystem: linux, kubeletVersion: fake}
"
  done
  echo "$manifest" | "$kubectl" --kubeconfig "$kubeconfig" apply -f - >/dev/null
}

# Volumes: kwok runs no provisioner, so a small one (hack/provisioner) runs
# as a host process beside the cluster, as kind's local-path provisioner
# runs in kind: a PersistentVolume (a directory under the cluster's work
# dir) for every claim of its classes, deleted with the claim. "standard"
# is the default class, as in kind; "expandable" also allows volume
# expansion.
cluster_dir=$KWOK_WORKDIR/clusters/$name
provisioner_bin=$cache/bin/deckhand-provisioner
provisioner_pid=$cluster_dir/deckhand-provisioner.pid

ensure_storage() {
  "$kubectl" --kubeconfig "$kubeconfig" apply -f - >/dev/null <<'EOF'
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: standard
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
provisioner: deckhand.dev/hostpath
reclaimPolicy: Delete
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: expandable
provisioner: deckhand.dev/hostpath
reclaimPolicy: Delete
volumeBindingMode: WaitForFirstConsumer
allowVolumeExpansion: true
EOF
}

provisioner_running() {
  local pid
  pid=$(cat "$provisioner_pid" 2>/dev/null) || return 1
  [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) == [RSD] ]] &&
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "--root $cluster_dir/volumes"
}

stop_provisioner() {
  if provisioner_running; then
    kill "$(cat "$provisioner_pid")" 2>/dev/null || true
  fi
  rm -f "$provisioner_pid"
}

# Start the provisioner when it is not running, or runs an older build.
ensure_provisioner() {
  mkdir -p "$cache/bin" "$cluster_dir/volumes" "$cluster_dir/logs"
  (cd "$root" && go build -o "$provisioner_bin.new" ./hack/provisioner)
  if provisioner_running && cmp -s "$provisioner_bin.new" "$provisioner_bin"; then
    rm -f "$provisioner_bin.new"
    return 0
  fi
  stop_provisioner
  mv "$provisioner_bin.new" "$provisioner_bin"
  # setsid: it outlives this script. One subshell, exec'd: a function
  # called with & would leave a bash parent holding the lock of `up`.
  (
    close_inherited_fds
    exec setsid "$provisioner_bin" --kubeconfig "$kubeconfig" --root "$cluster_dir/volumes" \
      >>"$cluster_dir/logs/deckhand-provisioner.log" 2>&1 </dev/null
  ) &
  echo $! >"$provisioner_pid"
  sleep 0.5
  if ! provisioner_running; then
    echo "the volume provisioner did not start; its log: $cluster_dir/logs/deckhand-provisioner.log" >&2
    tail -5 "$cluster_dir/logs/deckhand-provisioner.log" >&2
    return 1
  fi
}

# A cluster made from another hack/kwok.yaml is recreated: kwokctl keeps
# the options it was created with, even across restarts.
fingerprint() { sha256sum <"$root/hack/kwok.yaml" | cut -d' ' -f1; }
fingerprint_file=$KWOK_WORKDIR/clusters/$name/deckhand.fingerprint
same_config() { [[ -f $fingerprint_file && $(cat "$fingerprint_file") == "$(fingerprint)" ]]; }

# "name renewTime-in-seconds" for each lease of a namespace.
lease_renewals() {
  local lease renewed
  { "$kubectl" --kubeconfig "$kubeconfig" -n "$1" get lease \
      -o jsonpath='{range .items[*]}{.metadata.name} {.spec.renewTime}{"\n"}{end}' 2>/dev/null || true; } |
    while read -r lease renewed; do
      echo "$lease $(date -d "${renewed:-@0}" +%s 2>/dev/null || echo 0)"
    done
}

# After a restart the leases still name the processes that died. kwok
# retries a node lease held by someone else only every renew interval and
# takes it only once expired; kube-controller-manager and kube-scheduler
# wait out the 15 s of theirs. Deleting the stale ones (renewed before
# $since, so not the new processes') lets each create a fresh one at its
# next try. A holder that finds its lease gone creates it again, so a race
# with a take-over loses nothing.
forget_stale_leases() {
  local since=$1
  stale_leases kube-node-lease "$since" | xargs -r "$kubectl" --kubeconfig "$kubeconfig" \
    -n kube-node-lease delete lease --ignore-not-found >/dev/null
  stale_leases kube-system "$since" | { grep -xE 'kube-(controller-manager|scheduler)' || true; } |
    xargs -r "$kubectl" --kubeconfig "$kubeconfig" -n kube-system delete lease --ignore-not-found >/dev/null
}

stale_leases() { lease_renewals "$1" | awk -v since="$2" '$2 < since { print $1 }'; }

# The cluster runs pods only once the processes started at $since hold
# their leases: kwok one per fake node, kube-controller-manager and
# kube-scheduler theirs (which a dead holder keeps for up to 15 s).
wait_leases_renewed_since() {
  local since=$1 i fresh
  for i in $(seq 1 120); do
    fresh=$({ lease_renewals kube-node-lease
              lease_renewals kube-system | awk '$1 == "kube-controller-manager" || $1 == "kube-scheduler"'
            } | awk -v since="$since" '$2 >= since' | wc -l)
    if (( fresh >= nodes + 2 )); then return 0; fi
    sleep 0.5
  done
  echo "the control plane did not take over its leases within 60 s; logs: $KWOK_WORKDIR/clusters/$name/logs" >&2
  return 1
}

# kwokctl start skips a component whose recorded pid answers signal 0,
# which a killed process not yet reaped (zombie) still does, and so does
# an unrelated process that got the pid after a reboot. Forget such pids.
forget_dead_pids() {
  local file
  for file in "$KWOK_WORKDIR/clusters/$name"/pids/*.pid; do
    [[ -f $file ]] || continue
    live_pid "$file" >/dev/null || rm -f "$file"
  done
}

# live_pid prints the pid a pid file records if that process runs (not a
# zombie) and is this cluster's (its command line names the cluster's
# directory); fails otherwise.
live_pid() {
  local pid dir=$KWOK_WORKDIR/clusters/$name
  pid=$(cat "$1") || return 1
  [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) == [RSD] ]] &&
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$dir/" && echo "$pid"
}

# pids prints the pids of the cluster's running processes: the control
# plane kwokctl started and the volume provisioner (hack/gotest.sh weighs
# them with the tests they serve).
pids() {
  local file
  for file in "$KWOK_WORKDIR/clusters/$name"/pids/*.pid "$provisioner_pid"; do
    [[ -f $file ]] || continue
    live_pid "$file" || true
  done
}

# Processes gone (reboot, end of a session): start them again.
restart() {
  local since
  since=$(date +%s)
  echo ">> restarting cluster $name" >&2
  forget_dead_pids
  without_inherited_fds "$kwokctl" start cluster --name "$name" >&2 && wait_ready || return 1
  ensure_nodes
  forget_stale_leases "$since"
  wait_leases_renewed_since "$since"
}

# exists says whether kwokctl knows the cluster. The list is read whole
# before it is searched: under pipefail, `kwokctl get clusters | grep -q`
# fails whenever grep's early exit kills kwokctl with SIGPIPE while it still
# prints a later cluster's name, and `up` would then take a stopped
# cluster for a missing one and run `kwokctl create` on it, which fails on
# the CRDs it made the first time (e2e/faults' restart would be lost).
exists() {
  local clusters
  clusters=$("$kwokctl" get clusters 2>/dev/null) || return 1
  grep -qx -- "$name" <<<"$clusters"
}

recreate() {
  "$kwokctl" delete cluster --name "$name" >&2 || true
  create
}

up() {
  mkdir -p "$cache"
  # Several test processes may ask for the cluster at once: one creates it.
  mkdir -p "$cache/locks"
  exec 9>"$cache/locks/cluster-$name.lock"
  flock 9
  "$tools" build etcd kube kwok
  use_tools
  if ! exists; then
    create
  elif ! same_config; then
    echo ">> hack/kwok.yaml changed since cluster $name was made; recreating it" >&2
    recreate
  elif ready; then
    ensure_nodes
  elif ! restart && ! { echo ">> restart failed; trying once more" >&2 && restart; }; then
    # A recreated cluster has new certificates and none of its objects: a
    # fault test that stopped it cannot go on (its clients fail with
    # "certificate signed by unknown authority"), and a restart can fail
    # once under load, so a failed restart is tried once more first.
    echo ">> restart failed twice; recreating cluster $name" >&2
    recreate
  fi
  ensure_storage
  ensure_provisioner
  echo "export KUBECONFIG=$kubeconfig"
}

# Stop the control plane's processes, keeping the cluster (the fault tests
# stop the API server this way; `up` starts it again).
stop() {
  use_tools
  "$kwokctl" stop cluster --name "$name" >&2
}

down() {
  use_tools
  stop_provisioner
  if exists; then
    "$kwokctl" delete cluster --name "$name" >&2
  fi
}

case ${1:-up} in
  up) up ;;
  down) down ;;
  stop) stop ;;
  kubeconfig) echo "$kubeconfig" ;;
  pids) pids ;;
  env)
    echo "export PATH=\"$("$tools" path):\$PATH\""
    echo "export KUBECONFIG=$kubeconfig" ;;
  *) echo "usage: $0 up|down|stop|kubeconfig|env" >&2; exit 2 ;;
esac
