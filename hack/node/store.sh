#!/usr/bin/env bash
# The object store of the real node, what `make run` archives its demo
# Database into: versitygw (the node's store image, hack/node/images.sh)
# as Deployment store in namespace deckhand-store, behind Service store on
# port 7070, serving TLS with a certificate for store.deckhand-store.svc
# from a CA made here (its key is not kept), over an emptyDir that holds
# the bucket "archive" (the archive is lost with the pod: a demo, not a
# backup). Databases reach it at https://store.deckhand-store.svc:7070,
# bucket archive, with the keys of Secret store-keys and the CA of
# ConfigMap store-ca, which `keys` copies into their namespace.
#
#   hack/node/store.sh up               start it, or leave it as it is
#   hack/node/store.sh keys NAMESPACE   copy store-keys and store-ca into NAMESPACE
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
kubectl=$("$root/hack/tools.sh" dir kube)/kubectl
export KUBECONFIG=${KUBECONFIG:-$("$root/hack/node.sh" kubeconfig)}
ns=deckhand-store
service=store.$ns.svc

# credentials makes the TLS Secret, the CA ConfigMap and the root keys,
# once.
credentials() {
  "$kubectl" get secret -n "$ns" store-tls >/dev/null 2>&1 && return
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' EXIT
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
    -subj "/CN=deckhand node store CA" -keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$service" \
    -keyout "$dir/tls.key" -out "$dir/tls.csr" 2>/dev/null
  printf 'subjectAltName=DNS:%s,DNS:%s.cluster.local,DNS:store.%s\nextendedKeyUsage=serverAuth\n' \
    "$service" "$service" "$ns" >"$dir/ext"
  openssl x509 -req -in "$dir/tls.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial \
    -days 3650 -extfile "$dir/ext" -out "$dir/tls.crt" 2>/dev/null
  "$kubectl" create secret tls -n "$ns" store-tls --cert "$dir/tls.crt" --key "$dir/tls.key" >/dev/null
  "$kubectl" create configmap -n "$ns" store-ca --from-file ca.crt="$dir/ca.crt" >/dev/null
  "$kubectl" create secret generic -n "$ns" store-keys \
    --from-literal access-key-id="deckhand$(openssl rand -hex 6)" \
    --from-literal secret-access-key="$(openssl rand -hex 20)" >/dev/null
}

up() {
  "$kubectl" create namespace "$ns" --dry-run=client -o yaml | "$kubectl" apply -f - >/dev/null
  "$kubectl" label namespace "$ns" --overwrite pod-security.kubernetes.io/enforce=restricted >/dev/null
  credentials
  "$kubectl" apply -n "$ns" -f - >/dev/null <<YAML
apiVersion: apps/v1
kind: Deployment
metadata:
  name: store
spec:
  replicas: 1
  strategy: {type: Recreate}
  selector: {matchLabels: {app: store}}
  template:
    metadata: {labels: {app: store}}
    spec:
      securityContext:
        runAsNonRoot: true
        runAsUser: 65532
        fsGroup: 65532
        seccompProfile: {type: RuntimeDefault}
      initContainers:
        - name: bucket
          image: $("$root/hack/node/images.sh" ref busybox)
          command: [mkdir, -p, /data/archive]
          volumeMounts: [{name: data, mountPath: /data}]
          securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
      containers:
        - name: versitygw
          image: $("$root/hack/node/images.sh" ref store)
          args: [--port, ":7070", --cert, /tls/tls.crt, --key, /tls/tls.key, --quiet, posix, /data]
          env:
            - {name: ROOT_ACCESS_KEY_ID, valueFrom: {secretKeyRef: {name: store-keys, key: access-key-id}}}
            - {name: ROOT_SECRET_ACCESS_KEY, valueFrom: {secretKeyRef: {name: store-keys, key: secret-access-key}}}
          ports: [{containerPort: 7070}]
          readinessProbe: {tcpSocket: {port: 7070}, periodSeconds: 2}
          # Not BestEffort: archiving waits on it, and a busy node gives
          # BestEffort pods almost no CPU.
          resources: {requests: {cpu: 50m, memory: 64Mi}}
          volumeMounts:
            - {name: data, mountPath: /data}
            - {name: tls, mountPath: /tls, readOnly: true}
          securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
      volumes:
        - {name: data, emptyDir: {}}
        - {name: tls, secret: {secretName: store-tls}}
---
apiVersion: v1
kind: Service
metadata:
  name: store
spec:
  selector: {app: store}
  ports: [{port: 7070, targetPort: 7070}]
YAML
  "$kubectl" rollout status -n "$ns" deployment/store --timeout 120s >/dev/null
}

# keys NAMESPACE: the keys (Secret store-keys: access-key-id,
# secret-access-key) and the CA (ConfigMap store-ca: ca.crt) where a
# Database of NAMESPACE names them.
keys() {
  local to=$1 access secret ca
  access=$("$kubectl" get secret -n "$ns" store-keys -o jsonpath='{.data.access-key-id}' | base64 -d)
  secret=$("$kubectl" get secret -n "$ns" store-keys -o jsonpath='{.data.secret-access-key}' | base64 -d)
  ca=$("$kubectl" get configmap -n "$ns" store-ca -o jsonpath='{.data.ca\.crt}')
  "$kubectl" create secret generic -n "$to" store-keys --from-literal access-key-id="$access" \
    --from-literal secret-access-key="$secret" --dry-run=client -o yaml | "$kubectl" apply -f - >/dev/null
  "$kubectl" create configmap -n "$to" store-ca --from-literal ca.crt="$ca" --dry-run=client -o yaml |
    "$kubectl" apply -f - >/dev/null
}

case ${1:-} in
  up) up ;;
  keys) [[ -n ${2:-} ]] || { echo "usage: $0 keys NAMESPACE" >&2; exit 2; }; keys "$2" ;;
  *) echo "usage: $0 up | keys NAMESPACE" >&2; exit 2 ;;
esac
