#!/usr/bin/env bash
# Builds deckhand's pinned toolchain from source (Go module proxy only, no
# release downloads) and caches each tool outside the repository, keyed by
# name and version, so every clone on this machine shares one build.
#
#   hack/tools.sh build [tool...]   build what is missing (default: all)
#   hack/tools.sh dir <tool>        print the directory holding a tool's binaries
#   hack/tools.sh path              print a PATH fragment with every tool
#
# Each tool has its own module under hack/tools/<tool>/ so its dependency
# graph never leaks into the product's go.mod or into another tool's.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${DECKHAND_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/deckhand}
# The real node's tools (kubenode, containerd, coredns, below) are not in
# this list: hack/node.sh builds them on demand (`hack/tools.sh build
# kubenode`), so a plain `build` or `path` stays as the kwok suite needs it.
# Nor is versitygw, the object store of the archiving tests:
# hack/test-deps.sh builds it, and so does the tests' harness
# (operator/database/postgres/s3test) when it is missing.
tools=(etcd kube kwok helm controller-gen ct helm-docs crd-ref-docs)

# module path whose version keys the cache, per tool
declare -A pinned=(
  [etcd]=go.etcd.io/etcd/server/v3
  [kube]=k8s.io/kubernetes
  [kwok]=sigs.k8s.io/kwok
  [helm]=helm.sh/helm/v3
  [controller-gen]=sigs.k8s.io/controller-tools
  [ct]=github.com/helm/chart-testing/v3
  [helm-docs]=github.com/norwoodj/helm-docs
  [crd-ref-docs]=github.com/elastic/crd-ref-docs
  [kubenode]=k8s.io/kubernetes
  [containerd]=github.com/containerd/containerd/v2
  [coredns]=github.com/coredns/coredns
  [versitygw]=github.com/versity/versitygw
)
# packages built per tool
declare -A packages=(
  [etcd]=go.etcd.io/etcd/server/v3
  [kube]="k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl"
  [kwok]="sigs.k8s.io/kwok/cmd/kwok sigs.k8s.io/kwok/cmd/kwokctl"
  [helm]=helm.sh/helm/v3/cmd/helm
  [controller-gen]=sigs.k8s.io/controller-tools/cmd/controller-gen
  [ct]=github.com/helm/chart-testing/v3/ct
  [helm-docs]=github.com/norwoodj/helm-docs/cmd/helm-docs
  [crd-ref-docs]=github.com/elastic/crd-ref-docs
  [kubenode]="k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy"
  [containerd]="github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 github.com/containerd/containerd/v2/cmd/ctr"
  [coredns]=github.com/coredns/coredns
  [versitygw]=github.com/versity/versitygw/cmd/versitygw
)
# Go build tags per tool: containerd without the snapshotters that need cgo
# or kernel features this node does not use (overlayfs is the one it uses).
declare -A tags=([containerd]="no_btrfs no_zfs no_devmapper")
# Bump a tool's recipe when its build flags change, so caches rebuild it.
declare -A recipe=([helm]=2)
declare -A minutes=([etcd]=3 [kube]=12 [kwok]=2 [helm]=2 [controller-gen]=1 [ct]=2 [helm-docs]=1 [crd-ref-docs]=1 [kubenode]=8 [containerd]=4 [coredns]=6 [versitygw]=2)

version_of() { # tool -> pinned version, read from the tool's go.mod
  awk -v m="${pinned[$1]}" '$1 == m || ($1 == "require" && $2 == m) { v = ($1 == m) ? $2 : $3 } END { print v }' \
    "$root/hack/tools/$1/go.mod"
}

dir_of() {
  local r=${recipe[$1]:-1}
  echo "$cache/tools/$1-$(version_of "$1")$([[ $r == 1 ]] || echo "-r$r")"
}

ldflags_of() {
  local v; v=$(version_of "$1")
  case $1 in
    kube|kubenode)
      # Without these the servers report v0.0.0-master and kubectl cannot parse it.
      local minor=${v#v1.}; minor=${minor%%.*}
      local p
      for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        printf -- '-X %s.gitVersion=%s -X %s.gitMajor=1 -X %s.gitMinor=%s -X %s.gitTreeState=clean ' "$p" "$v" "$p" "$p" "$minor" "$p"
      done ;;
    etcd) ;;
    containerd)
      # `containerd --version` and the CRI's RuntimeVersion report this.
      printf -- '-X github.com/containerd/containerd/v2/version.Version=%s -X github.com/containerd/containerd/v2/version.Package=github.com/containerd/containerd/v2' "$v" ;;
    helm)
      # Helm's default capabilities (helm template, lint) are its client-go's
      # Kubernetes version, stamped as upstream's Makefile does.
      local cg; cg=$(cd "$root/hack/tools/helm" && go list -m -f '{{.Version}}' k8s.io/client-go)
      cg=${cg#v0.}; cg=${cg%%.*}
      printf -- '-X helm.sh/helm/v3/internal/version.version=%s' "$v"
      printf -- ' -X helm.sh/helm/v3/pkg/%s.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/%s.k8sVersionMinor=%s' chartutil chartutil "$cg" lint/rules lint/rules "$cg" ;;
    ct) printf -- '-X github.com/helm/chart-testing/v3/ct/cmd.Version=%s' "$v" ;;
  esac
}

build_one() {
  local tool=$1 dir tmp
  dir=$(dir_of "$tool")
  if [[ -f $dir/.complete ]]; then return 0; fi
  echo ">> building $tool $(version_of "$tool") from source into $dir (about ${minutes[$tool]} min on 2 cores)" >&2
  mkdir -p "$cache/tools"
  tmp=$(mktemp -d "$cache/tools/.$tool.XXXXXX")
  local start=$SECONDS
  local out=$tmp/
  # etcd's main package is the module root, whose path ends in /v3
  [[ $tool == etcd ]] && out=$tmp/etcd
  # shellcheck disable=SC2086
  (cd "$root/hack/tools/$tool" && CGO_ENABLED=0 go build -trimpath -tags "${tags[$tool]:-}" \
      -ldflags "-s -w $(ldflags_of "$tool")" -o "$out" ${packages[$tool]})
  touch "$tmp/.complete"
  rm -rf "$dir"
  mv "$tmp" "$dir"
  echo ">> $tool built in $((SECONDS - start)) s" >&2
}

case ${1:-build} in
  build)
    shift || true
    [[ $# -gt 0 ]] || set -- "${tools[@]}"
    missing=()
    for t in "$@"; do [[ -f $(dir_of "$t")/.complete ]] || missing+=("$t"); done
    if [[ ${#missing[@]} -gt 0 ]]; then
      echo ">> tools missing from $cache/tools: ${missing[*]}; a first build takes ~20 minutes on 2 cores" >&2
      for t in "${missing[@]}"; do build_one "$t"; done
    fi ;;
  dir) dir_of "$2" ;;
  path)
    p=""
    for t in "${tools[@]}"; do p="$p$(dir_of "$t"):"; done
    echo "${p%:}" ;;
  *) echo "usage: $0 build [tool...] | dir <tool> | path" >&2; exit 2 ;;
esac
