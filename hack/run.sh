#!/usr/bin/env bash
# make run: a cluster (yours when KUBECONFIG works, else the local one), the
# chart installed with Helm, the operator in the foreground with the chart's
# config and RBAC, and the demo.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

hack/tools.sh build etcd kube kwok helm
kubectl=$(hack/tools.sh dir kube)/kubectl
helm=$(hack/tools.sh dir helm)/helm
release=deckhand namespace=deckhand-system

if [[ -n ${KUBECONFIG:-} ]] && "$kubectl" get --raw /readyz >/dev/null 2>&1; then
  echo ">> using the cluster KUBECONFIG points at: $("$kubectl" config current-context)"
else
  [[ -n ${KUBECONFIG:-} ]] && echo ">> KUBECONFIG=$KUBECONFIG is not reachable; using the local cluster"
  eval "$(hack/cluster.sh up | tail -n 1)"
fi
export KUBECONFIG

# The chart installs CRDs, RBAC, the operator's config and the demo. Its
# Deployment is scaled to 0: the local cluster runs no containers, so the
# operator runs here, with the chart's config and ServiceAccount.
echo ">> helm upgrade --install $release charts/deckhand -n $namespace"
"$helm" upgrade --install "$release" charts/deckhand -n "$namespace" --create-namespace \
  --take-ownership --wait --timeout 120s \
  --set replicaCount=0 --set demo.enabled=true ${DECKHAND_HELM_ARGS:-} >/dev/null

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$kubectl" -n "$namespace" get configmap "$release-config" -o jsonpath='{.data.config\.yaml}' > "$work/config.yaml"
mapfile -t args < <("$kubectl" -n "$namespace" get deployment "$release" \
  -o jsonpath='{range .spec.template.spec.containers[0].args[*]}{@}{"\n"}{end}' | grep -v '^--config=')
"$kubectl" config view --raw --minify > "$work/kubeconfig"
token=$("$kubectl" -n "$namespace" create token "$release" --duration 24h)
"$kubectl" --kubeconfig "$work/kubeconfig" config set-credentials deckhand-operator --token "$token" >/dev/null
"$kubectl" --kubeconfig "$work/kubeconfig" config set-context --current --user deckhand-operator >/dev/null

health=127.0.0.1:18081
# elapsed START: seconds since $EPOCHREALTIME was START, to 0.01 s.
elapsed() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }'; }
demo() {
  # Wait for the operator, then apply the seed's BlogPost and time it.
  for _ in $(seq 1 100); do curl -fs "http://$health/readyz" >/dev/null 2>&1 && break; sleep 0.2; done
  "$kubectl" delete -f examples/blogpost.yaml --ignore-not-found >/dev/null
  local start=$EPOCHREALTIME
  "$kubectl" apply -f examples/blogpost.yaml >/dev/null
  "$kubectl" wait --for jsonpath='{.status.publishedAt}' --timeout 30s blogpost/blog-post-1 >/dev/null
  local post_took; post_took=$(elapsed "$start")
  # Seed 001's TDSet, verbatim, in the namespace it names.
  "$kubectl" create namespace temp --dry-run=client -o yaml | "$kubectl" apply -f - >/dev/null
  "$kubectl" apply -f examples/tdset.yaml >/dev/null
  "$kubectl" wait --for condition=Ready --timeout 60s -n temp tdset/tdset-hello-world >/dev/null ||
    echo ">> demo: TDSet tdset-hello-world is not Ready yet (kubectl describe tdset -n temp)" >&2
  # Seed 000's lab: the chart installed the frontend, flaskapp-config and the
  # ConfigMonitor flakapp-config-monitor. Change MSG as the seed does.
  local lab=""
  if "$kubectl" -n "$namespace" wait --for condition=Ready --timeout 60s configmonitor/flakapp-config-monitor >/dev/null 2>&1; then
    local gen; gen=$("$kubectl" -n "$namespace" get deploy frontend -o jsonpath='{.metadata.generation}')
    start=$EPOCHREALTIME
    "$kubectl" -n "$namespace" apply -f examples/configmonitor/configmap-changed.yml >/dev/null
    for _ in $(seq 1 200); do
      [[ $("$kubectl" -n "$namespace" get deploy frontend -o jsonpath='{.metadata.generation}') -gt $gen ]] && break
      sleep 0.05
    done
    lab=">> demo: MSG changed in ConfigMap flaskapp-config; ConfigMonitor rolled Deployment frontend within $(elapsed "$start")s"
  else
    lab=">> demo: ConfigMonitor flakapp-config-monitor is not Ready (kubectl -n $namespace describe cmon)"
  fi
  cat >&2 <<MSG

>> demo: BlogPost blog-post-1 applied; publishedAt stamped ${post_took}s after kubectl apply
$("$kubectl" get blogposts -o wide)

$lab
$("$kubectl" -n "$namespace" get cmon; "$kubectl" -n "$namespace" get rs -l app=frontend)

>> demo: TDSet tdset-hello-world (seed 001) in namespace temp runs its current window
$("$kubectl" get tdsets,deployments -n temp)

Try next, in another shell:
  eval "\$(make -s env)"                  # kubectl, helm, kwokctl on PATH; KUBECONFIG set
  kubectl get blogposts                   # Title, Author, Published, Age
  kubectl describe blogpost blog-post-1   # Ready condition and the Published event
  kubectl explain blogpost.spec
  kubectl -n $namespace describe cmon flakapp-config-monitor   # Restarted events, observedHash
  kubectl -n $namespace get rs -l app=frontend  # a new ReplicaSet per change of MSG
  kubectl describe tdset -n temp          # schedule, next change, Scaled events at each boundary
  kubectl explain tdset.spec.schedulingConfig
The operator runs in this terminal: Ctrl-C stops it.

MSG
}
demo &
demo_pid=$!
trap 'kill $demo_pid 2>/dev/null || true; rm -rf "$work"' EXIT

echo ">> starting the operator (${args[*]}) as ServiceAccount $namespace/$release"
POD_NAMESPACE=$namespace bin/deckhand --config "$work/config.yaml" "${args[@]}" \
  --kubeconfig "$work/kubeconfig" --log-format console \
  --metrics-bind-address 127.0.0.1:18080 --health-probe-bind-address "$health"
