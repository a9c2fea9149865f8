#!/usr/bin/env bash
# make run: a cluster (yours when KUBECONFIG works, else the local one), the
# CRDs, the operator in the foreground with every controller, and the demo.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

hack/tools.sh build etcd kube kwok
kubectl=$(hack/tools.sh dir kube)/kubectl

if [[ -n ${KUBECONFIG:-} ]] && "$kubectl" get --raw /readyz >/dev/null 2>&1; then
  echo ">> using the cluster KUBECONFIG points at: $("$kubectl" config current-context)"
else
  [[ -n ${KUBECONFIG:-} ]] && echo ">> KUBECONFIG=$KUBECONFIG is not reachable; using the local cluster"
  eval "$(hack/cluster.sh up | tail -n 1)"
fi
export KUBECONFIG

echo ">> installing CRDs"
"$kubectl" apply --server-side --force-conflicts -f crds/ >/dev/null
"$kubectl" wait --for condition=Established --timeout 60s -f crds/ >/dev/null

health=127.0.0.1:18081
demo() {
  # Wait for the operator, then apply the seed's BlogPost and time it.
  for _ in $(seq 1 100); do curl -fs "http://$health/readyz" >/dev/null 2>&1 && break; sleep 0.2; done
  "$kubectl" delete -f examples/blogpost.yaml --ignore-not-found >/dev/null
  local start=$EPOCHREALTIME
  "$kubectl" apply -f examples/blogpost.yaml >/dev/null
  "$kubectl" wait --for jsonpath='{.status.publishedAt}' --timeout 30s blogpost/blog-post-1 >/dev/null
  local took; took=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }')
  cat >&2 <<MSG

>> demo: BlogPost blog-post-1 applied; publishedAt stamped ${took}s after kubectl apply
$("$kubectl" get blogposts -o wide)

Try next, in another shell:
  eval "\$(make -s env)"                  # kubectl, helm, kwokctl on PATH; KUBECONFIG set
  kubectl get blogposts                   # Title, Author, Published, Age
  kubectl describe blogpost blog-post-1   # Ready condition and the Published event
  kubectl explain blogpost.spec
The operator runs in this terminal: Ctrl-C stops it.

MSG
}
demo &
demo_pid=$!
trap 'kill $demo_pid 2>/dev/null || true' EXIT

echo ">> starting the operator (all controllers) against $("$kubectl" config view --minify -o jsonpath='{.clusters[0].cluster.server}')"
bin/deckhand --kubeconfig "$KUBECONFIG" --controllers '*' --log-format console \
  --metrics-bind-address 127.0.0.1:18080 --health-probe-bind-address "$health"
