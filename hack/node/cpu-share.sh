#!/usr/bin/env bash
# What a busy node does to a Database whose servers request no CPU: two
# one-replica Databases, one with `resources: {}` (BestEffort pods) and one
# with the default resources (50m CPU requested: Burstable), beside a pod
# that requests 100m CPU (as the backup verification did) and spins on
# both cores, with BUSY (default 8) busy loops on the host. It runs the
# readiness probe's script in each server 15 times, 4 s apart, and prints
# how long each took and whether it passed, the kubelet's probe failures,
# and whether each Database's -rw Service routes to its primary.
# Needs the node cluster (hack/node.sh up), the operator with the database
# controller (hack/node.sh operator --set controllers.database.enabled=true).
#
#   hack/node/cpu-share.sh
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
hack/tools.sh build kube >/dev/null
PATH="$(hack/tools.sh path):$PATH"
KUBECONFIG=$(hack/node.sh kubeconfig)
export KUBECONFIG
postgres=$(hack/node/images.sh ref postgres) busybox=$(hack/node/images.sh ref busybox)
ns=cpu-share-$RANDOM
out=$(mktemp -d)
busy=()
cleanup() {
  [[ ${#busy[@]} == 0 ]] || kill "${busy[@]}" 2>/dev/null || true
  kubectl delete namespace "$ns" --wait=false >/dev/null 2>&1 || true
  rm -rf "$out"
}
trap cleanup EXIT

kubectl create namespace "$ns" >/dev/null
# Failover and monitoring off in both (on by default): the CPU request of
# the instance agent or of the metrics sidecar would make the BestEffort
# pod Burstable.
database() { # name, then the resources line ("" for the default)
  printf 'apiVersion: stable.imaginedata.co/v1\nkind: Database\nmetadata: {name: %s}\nspec:\n  name: app\n  image: %s\n  storage-size: 64Mi\n  replicas: 1\n  failover: {enabled: false}\n  monitoring: {enabled: false}\n%s\n' "$1" "$postgres" "$2" |
    kubectl apply -n "$ns" -f - >/dev/null
}
database besteffort "  resources: {}"
database default ""
until kubectl get pod -n "$ns" besteffort-0 default-0 >/dev/null 2>&1; do sleep 2; done
kubectl wait -n "$ns" --for=condition=Ready pod/besteffort-0 pod/default-0 --timeout=300s >/dev/null
kubectl get pod -n "$ns" besteffort-0 default-0 -o custom-columns=POD:.metadata.name,QOS:.status.qosClass
kubectl apply -n "$ns" -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: spinner}
spec:
  containers:
  - {name: a, image: $busybox, command: [sh, -c, "while :; do :; done"], resources: {requests: {cpu: 100m, memory: 16Mi}}}
  - {name: b, image: $busybox, command: [sh, -c, "while :; do :; done"], resources: {requests: {cpu: 1m, memory: 16Mi}}}
YAML
kubectl wait -n "$ns" --for=condition=Ready pod/spinner --timeout=120s >/dev/null
for _ in $(seq "${BUSY:-8}"); do (while :; do :; done) & busy+=($!); done
sleep 5
probes=()
for _ in $(seq 15); do
  for db in besteffort default; do
    (
      start=$(date +%s%N)
      rc=0
      timeout 60 kubectl exec -n "$ns" "$db-0" -c postgres -- sh /deckhand/scripts/probe.sh ready >/dev/null 2>&1 || rc=$?
      echo "$db $rc $(( ($(date +%s%N) - start) / 1000000 ))" >>"$out/times"
    ) &
    probes+=($!)
  done
  sleep 4
done
wait "${probes[@]}"
awk '{n[$1]++; s[$1]+=$3; if ($2 != 0) f[$1]++; if ($3 > m[$1]) m[$1] = $3}
  END {for (k in n) printf "%s: probe script %d times, %d failed, mean %.1f s, worst %.1f s (with kubectl exec)\n", k, n[k], f[k], s[k]/n[k]/1000, m[k]/1000}' "$out/times"
kubectl get events -n "$ns" --field-selector reason=Unhealthy -o custom-columns=POD:.involvedObject.name,COUNT:.count,MESSAGE:.message --no-headers
kubectl get endpointslices -n "$ns" -l kubernetes.io/service-name --no-headers \
  -o custom-columns=SLICE:.metadata.name,READY:.endpoints[*].conditions.ready | grep -- '-rw-'
