#!/usr/bin/env bash
# make run: a cluster, the chart installed with Helm, the operator, and the
# seeds' demos.
#
# Where the operator runs (RUN_MODE):
#   auto (default)  KUBECONFIG's cluster when it answers, with the operator
#                   on this machine (host); else, as root, the real node
#                   (node); else the local kwok cluster (host)
#   node            the real-node cluster (hack/node.sh; started if it does
#                   not answer): the chart's Deployment runs the operator
#                   from its image (make image), replicaCount 1; this
#                   terminal follows its log
#   host            the operator in this terminal with the chart's config and
#                   ServiceAccount, the chart's Deployment scaled to 0 (kwok
#                   runs no containers): for development
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

hack/tools.sh build etcd kube kwok helm
kubectl=$(hack/tools.sh dir kube)/kubectl
helm=$(hack/tools.sh dir helm)/helm
release=deckhand namespace=deckhand-system
mode=${RUN_MODE:-auto}
case $mode in auto | node | host) ;; *) echo "RUN_MODE=$mode: use auto, node or host" >&2; exit 2 ;; esac

answers() { "$kubectl" --kubeconfig "$1" get --raw /readyz >/dev/null 2>&1; }

if [[ $mode != node && -n ${KUBECONFIG:-} ]] && "$kubectl" get --raw /readyz >/dev/null 2>&1; then
  echo ">> using the cluster KUBECONFIG points at: $("$kubectl" config current-context)"
  mode=host
elif [[ $mode == node || ($mode == auto && $(id -u) == 0) ]]; then
  [[ -n ${KUBECONFIG:-} && $mode == auto ]] && echo ">> KUBECONFIG=$KUBECONFIG is not reachable; using the real node"
  KUBECONFIG=$(hack/node.sh kubeconfig)
  if answers "$KUBECONFIG"; then
    echo ">> using the real-node cluster (RUN_MODE=host: the kwok cluster and the operator on this machine instead)"
  else
    echo ">> starting the real-node cluster (hack/node.sh up; RUN_MODE=host: the kwok cluster and the operator on this machine instead)"
    hack/node.sh up >/dev/null
  fi
  mode=node
else
  [[ -n ${KUBECONFIG:-} ]] && echo ">> KUBECONFIG=$KUBECONFIG is not reachable; using the local cluster"
  eval "$(hack/cluster.sh up | tail -n 1)"
  mode=host
fi
export KUBECONFIG

if [[ $mode == node ]]; then
  # The chart as users install it: the operator from its image (imported as
  # deckhand-local/deckhand), one replica, in a namespace enforcing the
  # restricted Pod Security Standard; the demo's Flask app from the node's
  # image of seed 000's app.
  demo_image=$(hack/node/images.sh ref demo-flask)
  echo ">> hack/node.sh operator: make image, import it, helm upgrade --install $release charts/deckhand -n $namespace"
  out=$(mktemp)
  # shellcheck disable=SC2086 # DECKHAND_HELM_ARGS: extra flags, split on purpose
  if ! hack/node.sh operator --set replicaCount=1 --set demo.enabled=true --set controllers.database.enabled=true \
    --set demo.flask.image.repository="${demo_image%:*}" --set demo.flask.image.tag="${demo_image##*:}" \
    --set demo.flask.image.pullPolicy=Never ${DECKHAND_HELM_ARGS:-} >"$out" 2>&1; then
    cat "$out" >&2; rm -f "$out"; exit 1
  fi
  rm -f "$out"
  # The object store the demo Database archives into (hack/node/store.sh).
  echo ">> hack/node/store.sh up: the object store, https://store.deckhand-store.svc:7070"
  hack/node/store.sh up
else
  # The chart installs CRDs, RBAC, the operator's config and the demo. Its
  # Deployment is scaled to 0: the operator runs here, with the chart's
  # config and ServiceAccount. Failover is off by default here: it asks
  # each database pod's agent at the pod's address, which an operator
  # outside the cluster cannot reach (and kwok's pods have none).
  echo ">> helm upgrade --install $release charts/deckhand -n $namespace"
  # shellcheck disable=SC2086
  "$helm" upgrade --install "$release" charts/deckhand -n "$namespace" --create-namespace \
    --take-ownership --wait --timeout 120s \
    --set replicaCount=0 --set demo.enabled=true --set controllers.database.failoverByDefault=false \
    ${DECKHAND_HELM_ARGS:-} >/dev/null
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
health=127.0.0.1:18081

# operator_waited returns once the operator answers: its readiness endpoint
# on this machine (host), or its Deployment rolled out on the node.
operator_waited() {
  if [[ $mode == node ]]; then
    "$kubectl" -n "$namespace" rollout status deployment "$release" --timeout 120s >/dev/null
    return
  fi
  for _ in $(seq 1 100); do curl -fs "http://$health/readyz" >/dev/null 2>&1 && break; sleep 0.2; done
}
# tdset_example applies seed 001's TDSet, verbatim except, on the real
# node, its image: crccheck/hello-world sits in a registry the node cannot
# reach, so seed 000's Flask app (imported on the node) stands in.
tdset_example() {
  if [[ $mode == node ]]; then
    sed "s|image: crccheck/hello-world|image: $(hack/node/images.sh ref demo-flask)|" examples/tdset.yaml | "$kubectl" apply -f -
  else
    "$kubectl" apply -f examples/tdset.yaml
  fi
}

# archiving_example applies the Database of examples/database/archiving.yaml
# in namespace ledger, with the node's PostgreSQL image, the store's keys
# and CA beside it, and the Pooler of examples/database/pooler.yaml (real
# node only: it needs running servers and the store).
archiving_example() {
  "$kubectl" create namespace ledger --dry-run=client -o yaml | "$kubectl" apply -f - >/dev/null
  hack/node/store.sh keys ledger
  sed "s|^  storage-size: 1Gi$|  storage-size: 1Gi\n  image: $(hack/node/images.sh ref postgres)|" examples/database/archiving.yaml |
    "$kubectl" apply -n ledger -f - >/dev/null
  # PgBouncer in front of it (examples/database/pooler.yaml).
  "$kubectl" apply -n ledger -f examples/database/pooler.yaml >/dev/null
}

# elapsed START: seconds since $EPOCHREALTIME was START, to 0.01 s.
elapsed() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }'; }
demo() {
  # Wait for the operator, then apply the seed's BlogPost and time it.
  operator_waited
  "$kubectl" delete -f examples/blogpost.yaml --ignore-not-found >/dev/null
  local start=$EPOCHREALTIME
  "$kubectl" apply -f examples/blogpost.yaml >/dev/null
  "$kubectl" wait --for jsonpath='{.status.publishedAt}' --timeout 30s blogpost/blog-post-1 >/dev/null
  local post_took; post_took=$(elapsed "$start")
  # Seed 001's TDSet, verbatim, in the namespace it names.
  "$kubectl" create namespace temp --dry-run=client -o yaml | "$kubectl" apply -f - >/dev/null
  tdset_example >/dev/null
  "$kubectl" wait --for condition=Ready --timeout 60s -n temp tdset/tdset-hello-world >/dev/null ||
    echo ">> demo: TDSet tdset-hello-world is not Ready yet (kubectl describe tdset -n temp)" >&2
  # On the real node: a Database archiving into the store, until its first
  # base backup is in the archive.
  local archive=""
  if [[ $mode == node ]]; then
    archiving_example
    local count=""
    for _ in $(seq 1 120); do
      count=$("$kubectl" -n ledger get database ledger -o jsonpath='{.status.baseBackups.count}' 2>/dev/null || true)
      [[ ${count:-0} -ge 1 ]] && break
      sleep 2
    done
    if [[ ${count:-0} -ge 1 ]]; then
      archive=">> demo: Database ledger (namespace ledger) archives into the store; its first base backup is in the archive"
    else
      archive=">> demo: Database ledger (namespace ledger) has no base backup yet (kubectl -n ledger describe database ledger)"
    fi
    "$kubectl" -n ledger wait --for condition=Ready --timeout 120s pooler/ledger-pool >/dev/null 2>&1 ||
      echo ">> demo: Pooler ledger-pool is not Ready yet (kubectl -n ledger describe pooler ledger-pool)" >&2
    archive="$archive
$("$kubectl" -n ledger get database ledger -o wide)

>> demo: Pooler ledger-pool: PgBouncer in front of ledger's primary (connect with Secret ledger-pool)
$("$kubectl" -n ledger get pooler ledger-pool)"
  fi
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
${archive:+
$archive
}
Try next, in another shell:
$(env_hint)
  kubectl get blogposts                   # Title, Author, Published, Age
  kubectl describe blogpost blog-post-1   # Ready condition and the Published event
  kubectl explain blogpost.spec
  kubectl -n $namespace describe cmon flakapp-config-monitor   # Restarted events, observedHash
  kubectl -n $namespace get rs -l app=frontend  # a new ReplicaSet per change of MSG
  kubectl describe tdset -n temp          # schedule, next change, Scaled events at each boundary
  kubectl explain tdset.spec.schedulingConfig
$([[ $mode == node ]] && echo "  kubectl -n ledger get database ledger -o wide   # ARCHIVING, RECOVERABLE FROM and UNTIL
  kubectl -n ledger get database ledger -o jsonpath='{.status.baseBackups}'
  kubectl -n ledger get secret ledger-pool -o jsonpath='{.data.verify-full-uri}' | base64 -d   # through PgBouncer")
$(foreground_hint)

MSG
}

env_hint() {
  if [[ $mode == node ]]; then
    echo "  eval \"\$(make -s env)\"; export KUBECONFIG=$KUBECONFIG   # the tools on PATH; KUBECONFIG at the node"
  else
    echo "  eval \"\$(make -s env)\"                  # kubectl, helm, kwokctl on PATH; KUBECONFIG set"
  fi
}

foreground_hint() {
  if [[ $mode == node ]]; then
    echo "The operator runs on the real node (deployment/$release in $namespace, from its image);"
    echo "this terminal follows its log: Ctrl-C stops following, the operator keeps running."
  else
    echo "The operator runs in this terminal: Ctrl-C stops it."
  fi
}
demo &
demo_pid=$!
trap 'kill $demo_pid 2>/dev/null || true; rm -rf "$work"' EXIT

if [[ $mode == node ]]; then
  echo ">> following the log of deployment/$release (the operator, in its container on the node)"
  "$kubectl" -n "$namespace" logs --follow "deployment/$release"
  exit
fi

"$kubectl" -n "$namespace" get configmap "$release-config" -o jsonpath='{.data.config\.yaml}' > "$work/config.yaml"
mapfile -t args < <("$kubectl" -n "$namespace" get deployment "$release" \
  -o jsonpath='{range .spec.template.spec.containers[0].args[*]}{@}{"\n"}{end}' | grep -v '^--config=')
"$kubectl" config view --raw --minify > "$work/kubeconfig"
token=$("$kubectl" -n "$namespace" create token "$release" --duration 24h)
"$kubectl" --kubeconfig "$work/kubeconfig" config set-credentials deckhand-operator --token "$token" >/dev/null
"$kubectl" --kubeconfig "$work/kubeconfig" config set-context --current --user deckhand-operator >/dev/null

echo ">> starting the operator (${args[*]}) as ServiceAccount $namespace/$release"
POD_NAMESPACE=$namespace bin/deckhand --config "$work/config.yaml" "${args[@]}" \
  --kubeconfig "$work/kubeconfig" --log-format console \
  --metrics-bind-address 127.0.0.1:18080 --health-probe-bind-address "$health"
