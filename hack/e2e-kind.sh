#!/usr/bin/env bash
# make e2e-kind: the chart in a real kind cluster, for machines with Docker.
# kind cluster (sigs.k8s.io/kind, a tool of go.mod) -> docker build of the
# operator image -> kind load -> ct install of every ci values file -> the
# e2e suite against that cluster.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

if ! command -v docker >/dev/null 2>&1 || ! docker info >/dev/null 2>&1; then
  echo "make e2e-kind needs a running Docker engine (kind runs Kubernetes nodes as containers) and 'docker info' failed here; use 'make test', which runs the same e2e suite against the local kwok cluster" >&2
  exit 1
fi

cluster=${KIND_CLUSTER:-deckhand-e2e}
image=${IMAGE:-deckhand:e2e}
kind() { go tool kind "$@"; }
hack/tools.sh build helm ct kube
export PATH="$(hack/tools.sh path):$PATH"

if ! kind get clusters | grep -qx "$cluster"; then
  kind create cluster --name "$cluster" --wait 120s
fi
kubeconfig=$(mktemp)
trap 'rm -f "$kubeconfig"' EXIT
kind get kubeconfig --name "$cluster" > "$kubeconfig"
export KUBECONFIG=$kubeconfig

docker build -t "$image" .
kind load docker-image "$image" --name "$cluster"
repo=${image%:*} tag=${image##*:}

# ct installs each ci/*-values.yaml as its own release and runs helm test.
ct install --config ct.yaml --all \
  --helm-extra-set-args "--set=crds.keep=false --set=image.repository=$repo --set=image.tag=$tag --set=image.pullPolicy=Never"

# The same e2e suite, against the kind cluster.
DECKHAND_TEST_KUBECONFIG=$kubeconfig go test -count=1 ./e2e/...
echo ">> e2e-kind passed on kind cluster $cluster (delete it with: go tool kind delete cluster --name $cluster)"
