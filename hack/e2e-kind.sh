#!/usr/bin/env bash
# make e2e-kind: the chart in a real kind cluster, for machines with Docker.
# kind cluster (sigs.k8s.io/kind, a tool of go.mod) -> docker build of the
# operator image -> kind load -> ct install of every ci values file, each
# followed by `helm test` (the chart's Job running `deckhand probe` in the
# operator image against the running operator) -> the demo, its helm test
# -> a Database (PostgreSQL) and a MySQLCluster (MySQL 8.4) with real
# servers: replication, a backup each, deletion -> the e2e suite against
# that cluster.
#
# Why not on the local kwok cluster: kwok runs no containers. It marks
# pods Running and Jobs Complete without starting anything, so the helm
# test Job would "pass" there without probing anything. The probe itself is
# tested against a host-run operator in make test (e2e/probe_test.go).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

if ! command -v docker >/dev/null 2>&1 || ! docker info >/dev/null 2>&1; then
  cat >&2 <<'MSG'
make e2e-kind needs a running Docker engine: kind runs Kubernetes nodes as containers, and
'docker info' failed here. Nothing was run.
What this target proves that make test cannot: the operator image really runs in a pod, and
`helm test` (a Job running `deckhand probe` from that image) passes against it. The local kwok
cluster of make test runs no containers (it completes Jobs without running them), so there the
hook would prove nothing; make test instead runs `deckhand probe` against a host-run operator,
builds the image without Docker (as make image does) and checks it against the chart.
MSG
  exit 1
fi

cluster=${KIND_CLUSTER:-deckhand-e2e}
image=${IMAGE:-deckhand:e2e}
kind() { go tool kind "$@"; }
hack/tools.sh build helm ct kube
export PATH="$(hack/tools.sh path):$PATH"

# The list is read whole first: under pipefail, grep -q's early exit can
# kill kind with SIGPIPE and fail the pipeline though the cluster exists.
clusters=$(kind get clusters)
if ! grep -qx -- "$cluster" <<<"$clusters"; then
  kind create cluster --name "$cluster" --wait 120s
fi
kubeconfig=$(mktemp)
trap 'rm -f "$kubeconfig"' EXIT
kind get kubeconfig --name "$cluster" > "$kubeconfig"
export KUBECONFIG=$kubeconfig

docker build --build-arg VERSION="$(awk '/^appVersion:/ {gsub(/"/, "", $2); print $2}' charts/deckhand/Chart.yaml)" -t "$image" .
kind load docker-image "$image" --name "$cluster"
repo=${image%:*} tag=${image##*:}
# Seed 000's Flask app, for the chart's demo.
demo_image=deckhand-demo-flask:e2e
docker build -t "$demo_image" demo/flask
kind load docker-image "$demo_image" --name "$cluster"
demo_sets="--set=demo.flask.image.repository=${demo_image%:*} --set=demo.flask.image.tag=${demo_image##*:} --set=demo.flask.image.pullPolicy=Never"

# ci/monitoring-values.yaml renders a ServiceMonitor and a PrometheusRule:
# the Prometheus Operator's CRDs, from its Go module at the pinned version.
promop=$(cd "$(mktemp -d)" && go mod download -json "github.com/prometheus-operator/prometheus-operator@$(cat "$root/hack/prometheus-operator.version")" \
  | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
for crd in servicemonitors podmonitors prometheusrules; do
  kubectl apply --server-side -f "$promop/example/prometheus-operator-crd/monitoring.coreos.com_$crd.yaml"
done

# ct installs each ci/*-values.yaml as its own release and runs helm test
# (the probe Job) on each.
ct install --config ct.yaml --all \
  --helm-extra-set-args "--set=crds.keep=false --set=image.repository=$repo --set=image.tag=$tag --set=image.pullPolicy=Never $demo_sets"

# Seed 000's lab for real: the Flask app answers MSG; changing MSG makes the
# operator roll it, and it answers the new message.
ns=deckhand-demo
helm upgrade --install demo charts/deckhand -n "$ns" --create-namespace --wait --timeout 5m \
  --set crds.keep=false --set image.repository="$repo" --set image.tag="$tag" --set image.pullPolicy=Never \
  $demo_sets --set demo.enabled=true
kubectl -n "$ns" rollout status deploy/frontend --timeout 120s
# The chart's helm test: deckhand probe, from the operator image, in a pod.
helm test demo -n "$ns" --logs --timeout 5m
echo ">> helm test: deckhand probe passed against the operator in kind"
answer() {
  kubectl -n "$ns" port-forward svc/frontend 18081:80 >/dev/null 2>&1 & local pf=$!
  local out=""
  for _ in $(seq 1 50); do out=$(curl -fsS localhost:18081/ 2>/dev/null) && break; sleep 0.2; done
  kill "$pf" 2>/dev/null || true
  echo "$out"
}
[[ $(answer) == "Welcome to Kubernetes!" ]] || { echo "demo: the Flask app did not answer the seed's first message" >&2; exit 1; }
kubectl -n "$ns" apply -f examples/configmonitor/configmap-changed.yml
for _ in $(seq 1 60); do
  [[ $(kubectl -n "$ns" get deploy frontend -o jsonpath='{.metadata.generation}') -ge 2 ]] && break; sleep 1
done
kubectl -n "$ns" rollout status deploy/frontend --timeout 120s
[[ $(answer) == "Welcome to Operators!" ]] || { echo "demo: after changing MSG the app does not answer 'Welcome to Operators!'" >&2; exit 1; }
echo ">> demo: changing MSG rolled the frontend; it answers 'Welcome to Operators!'"
helm uninstall demo -n "$ns"

# The two database engines with real servers (kwok runs none): a Database on
# PostgreSQL and seed 000's MySQLCluster on MySQL 8.4 (the MySQL branch of
# the scripts is proven on a real server only here), each a primary and a
# replica. A row written on the primary must reach the replica, and a backup
# Job (the engine's own dump tool) must complete with a size and checksum.
dbns=deckhand-dbs
helm upgrade --install dbs charts/deckhand -n "$dbns" --create-namespace --take-ownership --wait --timeout 5m \
  --set crds.keep=false --set image.repository="$repo" --set image.tag="$tag" --set image.pullPolicy=Never \
  --set controllers.database.enabled=true --set controllers.mysqlCluster.enabled=true
kubectl -n "$dbns" apply -f - <<'YAML'
apiVersion: stable.imaginedata.co/v1
kind: Database
metadata:
  name: pg
spec:
  name: app
  port: 5432
  storage-size: 1Gi
  replicas: 2
YAML
sed 's/image: "mysql:latest"/image: "mysql:8.4.8"/' examples/mysqlcluster-fresh.yaml | kubectl -n "$dbns" apply -f -
# wait_phase KIND NAME PHASE: up to 10 minutes (images are pulled).
wait_phase() {
  for _ in $(seq 1 120); do
    [[ $(kubectl -n "$dbns" get "$1" "$2" -o jsonpath='{.status.phase}') == "$3" ]] && return 0
    sleep 5
  done
  echo "$1 $2 never reached $3:" >&2
  kubectl -n "$dbns" get "$1" "$2" -o yaml >&2
  return 1
}
# replicated POD COMMAND...: the command, run on the replica, prints 42.
replicated() {
  for _ in $(seq 1 60); do
    [[ $(kubectl -n "$dbns" exec "$1" -- "${@:2}" 2>/dev/null) == *42* ]] && return 0
    sleep 2
  done
  return 1
}
wait_phase database pg Ready
wait_phase mysqlcluster my-cluster Ready
kubectl -n "$dbns" exec pg-0 -- psql -v ON_ERROR_STOP=1 -d app -c 'CREATE TABLE e2e (v int); INSERT INTO e2e VALUES (42)'
replicated pg-1 psql -At -d app -c 'SELECT v FROM e2e' \
  || { echo "PostgreSQL: the row written on the primary never reached the standby" >&2; exit 1; }
# The standby streams as the replication role, not the superuser (docs/design/database.md).
streamer=$(kubectl -n "$dbns" exec pg-0 -- psql -At -d postgres -c 'SELECT usename FROM pg_stat_replication')
[[ $streamer == deckhand_replication ]] \
  || { echo "PostgreSQL: the standby streams as \"$streamer\", not deckhand_replication" >&2; exit 1; }
kubectl -n "$dbns" exec my-cluster-0 -- mysql -uroot -e 'CREATE DATABASE e2e; CREATE TABLE e2e.t (v INT PRIMARY KEY); INSERT INTO e2e.t VALUES (42)'
replicated my-cluster-1 mysql -uroot -N -e 'SELECT v FROM e2e.t' \
  || { echo "MySQL: the row written on the primary never reached the replica" >&2; exit 1; }
kubectl -n "$dbns" apply -f - <<'YAML'
apiVersion: stable.imaginedata.co/v1
kind: DatabaseBackup
metadata:
  name: pg-e2e
spec:
  database: pg
---
apiVersion: cr.mysqloperator.grtl.github.com/v1
kind: MySQLBackupInstance
metadata:
  name: my-cluster-e2e
spec:
  cluster: my-cluster
YAML
wait_phase databasebackup pg-e2e Completed
wait_phase mysqlbackupinstance my-cluster-e2e Completed
echo ">> databases: PostgreSQL and MySQL replicate a row to their replica; a backup of each completed"
# Deleting them runs the default deletionPolicy (Snapshot): a final backup first.
kubectl -n "$dbns" delete database pg --timeout 10m
kubectl -n "$dbns" delete mysqlcluster my-cluster --timeout 10m
helm uninstall dbs -n "$dbns"

# The same e2e suite, against the kind cluster.
DECKHAND_TEST_KUBECONFIG=$kubeconfig go test -count=1 ./e2e/...
echo ">> e2e-kind passed on kind cluster $cluster (delete it with: go tool kind delete cluster --name $cluster)"
