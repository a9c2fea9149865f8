#!/usr/bin/env bash
# ct install of the chart's ci/*-values.yaml against the real-node cluster
# (hack/node.sh up), with the operator image hack/node.sh operator imported
# (deckhand-local/deckhand:<hack/node.sh operator-tag>) and seed 000's Flask image
# (hack/node/images.sh): each values file is installed as its own release,
# its operator must become Available on the node (probes passing), and
# `helm test` (deckhand probe, in a pod) must pass; then ct uninstalls it.
#
# The releases go to one namespace, deckhand-ct, that enforces the
# restricted Pod Security Standard, and watch only it: the cluster's own
# release (deckhand in deckhand-system, which the other node tests use)
# keeps the CRDs, so the ct releases install none (crds.enabled=false; a
# CRD belongs to one release). One operator at a time must handle the
# demo's objects: when that release's operator excludes deckhand-ct
# (excludeNamespaces, as e2e/node installs it) it keeps running beside ct;
# otherwise it is scaled to 0 meanwhile (and back afterwards). Without that
# release, each ct release installs the CRDs and removes them again
# (ct.yaml's crds.keep=false).
#
#   hack/node/ct-install.sh            every ci values file
#   CT_ARGS='--debug' hack/node/ct-install.sh
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
hack/tools.sh build helm ct kube >/dev/null
PATH="$(hack/tools.sh path):$PATH"
KUBECONFIG=$(hack/node.sh kubeconfig)
export KUBECONFIG
kubectl get --raw /readyz >/dev/null || { echo "the node cluster does not answer (make node-cluster)" >&2; exit 1; }

ns=deckhand-ct
tag=$(hack/node.sh operator-tag)
ctr_images=$(hack/node.sh ctr images ls -q 2>/dev/null)
grep -qx "docker.io/deckhand-local/deckhand:$tag" <<<"$ctr_images" ||
  { echo "the operator image deckhand-local/deckhand:$tag is not on the node: hack/node.sh operator" >&2; exit 1; }
demo=$(hack/node/images.sh ref demo-flask)
grep -qx "docker.io/$demo" <<<"$ctr_images" ||
  { echo "seed 000's image $demo is not on the node: hack/node.sh up imports it" >&2; exit 1; }

sets=(--set=crds.keep=false
  --set=image.repository=deckhand-local/deckhand --set=image.tag="$tag" --set=image.pullPolicy=Never
  --set=demo.flask.image.repository="${demo%:*}" --set=demo.flask.image.tag="${demo##*:}"
  --set=demo.flask.image.pullPolicy=Never
  "--set=watchNamespaces={$ns}")

# release_value prints a value of the cluster's release (a Python
# expression over its values, v), as JSON.
release_value() {
  helm get values deckhand -n deckhand-system --all -o json |
    python3 -c "import json, sys; v = json.load(sys.stdin); print(json.dumps($1))"
}

# The cluster's own release holds the CRDs.
if helm status deckhand -n deckhand-system >/dev/null 2>&1; then
  sets+=(--set=crds.enabled=false)
  # It holds only its enabled controllers' CRDs; the ci values enable
  # others (all-controllers-values.yaml: every one), so it installs all.
  if [[ $(release_value "v.get('crds', {}).get('installAll')") != true ]]; then
    helm upgrade deckhand "$root/charts/deckhand" -n deckhand-system --reuse-values --set=crds.installAll=true >/dev/null
  fi
  if [[ $(release_value "'$ns' in (v.get('excludeNamespaces') or [])") == true ]]; then
    echo ">> the release deckhand-system/deckhand keeps the CRDs; its operator excludes $ns and keeps running"
  else
    replicas=$(kubectl -n deckhand-system get deployment deckhand -o jsonpath='{.spec.replicas}')
    trap 'kubectl -n deckhand-system scale deployment deckhand --replicas "$replicas" >/dev/null' EXIT
    kubectl -n deckhand-system scale deployment deckhand --replicas 0 >/dev/null
    echo ">> the release deckhand-system/deckhand keeps the CRDs; its operator is scaled to 0 until ct ends"
  fi
fi

# ci/monitoring-values.yaml renders a ServiceMonitor, a PodMonitor and a PrometheusRule:
# the Prometheus Operator's CRDs, from its Go module at the pinned version
# (as make e2e-kind does).
promop_version=$(cat hack/prometheus-operator.version)
promop=$(cd "$(mktemp -d)" && go mod download -json "github.com/prometheus-operator/prometheus-operator@$promop_version" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
for crd in servicemonitors podmonitors prometheusrules; do
  kubectl apply --server-side -f "$promop/example/prometheus-operator-crd/monitoring.coreos.com_$crd.yaml" >/dev/null
done

kubectl create namespace "$ns" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl label namespace "$ns" --overwrite pod-security.kubernetes.io/enforce=restricted >/dev/null

start=$SECONDS
# shellcheck disable=SC2086 # CT_ARGS: extra flags, split on purpose
ct install --config ct.yaml --charts charts/deckhand --namespace "$ns" \
  --helm-extra-set-args "${sets[*]}" ${CT_ARGS:-}
values=(charts/deckhand/ci/*-values.yaml)
echo ">> ct install of ${#values[@]} values files on the node: $((SECONDS - start)) s"
kubectl delete namespace "$ns" --wait=false >/dev/null
