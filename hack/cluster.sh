#!/usr/bin/env bash
# deckhand's local cluster: a real control plane (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler built from source by hack/tools.sh)
# run as local processes by kwokctl, with fake nodes from kwok.
#
#   hack/cluster.sh up          create or restart the cluster; last line: export KUBECONFIG=...
#   hack/cluster.sh down        delete it
#   hack/cluster.sh kubeconfig  print its kubeconfig path
#   hack/cluster.sh env         print exports for tools on PATH and KUBECONFIG
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

create() {
  echo ">> creating cluster $name (kwokctl, binary runtime, Kubernetes $KWOK_KUBE_VERSION)" >&2
  # 9>&-: the cluster's processes must not inherit (and hold) the lock.
  "$kwokctl" create cluster --name "$name" --runtime binary --config "$root/hack/kwok.yaml" \
    --kubeconfig "$kubeconfig" --wait 60s >&2 9>&-
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

up() {
  mkdir -p "$cache"
  # Several test processes may ask for the cluster at once: one creates it.
  mkdir -p "$cache/locks"
  exec 9>"$cache/locks/cluster-$name.lock"
  flock 9
  "$tools" build etcd kube kwok
  use_tools
  if ready; then
    :
  elif "$kwokctl" get clusters 2>/dev/null | grep -qx "$name"; then
    # Its processes are gone (reboot, end of a session): start them again.
    echo ">> restarting cluster $name" >&2
    if ! "$kwokctl" start cluster --name "$name" >&2 9>&- || ! wait_ready; then
      echo ">> restart failed; recreating cluster $name" >&2
      "$kwokctl" delete cluster --name "$name" >&2 || true
      create
    fi
  else
    create
  fi
  wait_ready
  ensure_nodes
  echo "export KUBECONFIG=$kubeconfig"
}

down() {
  use_tools
  if "$kwokctl" get clusters 2>/dev/null | grep -qx "$name"; then
    "$kwokctl" delete cluster --name "$name" >&2
  fi
}

case ${1:-up} in
  up) up ;;
  down) down ;;
  kubeconfig) echo "$kubeconfig" ;;
  env)
    echo "export PATH=\"$("$tools" path):\$PATH\""
    echo "export KUBECONFIG=$kubeconfig" ;;
  *) echo "usage: $0 up|down|kubeconfig|env" >&2; exit 2 ;;
esac
