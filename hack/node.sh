#!/usr/bin/env bash
# deckhand's real-node cluster: a control plane of its own (kwokctl's binary
# runtime, without kwok's fake nodes) and two real nodes on this machine:
# kubelet, kube-proxy and containerd built from source (hack/tools.sh
# kubenode, containerd), runc and the CNI plugins from Debian, pods on
# bridges of 198.18.0.0/15 addresses that route nowhere off the machine.
# Each node, dh-node and dh-node2, runs in a network namespace of its own
# (joined to the machine's by a veth pair) with its own containerd,
# kubelet, kube-proxy and state directories, and the control plane listens
# on an address of the machine's own (bridge dh-cp), so a test can power
# either node off or cut its network while the other node and the control
# plane run on. The machine runs a kube-proxy too, for clients on the
# machine (the tests) to reach Services. The second node is tainted
# (second_node_taint): only pods that tolerate it run there.
# DECKHAND_NODES=1 starts the first node only.
#
#   hack/node.sh up          create (or restart) the cluster and its nodes; last line: export KUBECONFIG=...
#   hack/node.sh down        remove all of it: processes, mounts, network, iptables rules, cgroups, state
#                            (not the node's image store: see image_store)
#   hack/node.sh forget-images  remove the nodes' image stores (the next up imports every image)
#   hack/node.sh deps        install runc, the CNI plugins, busybox-static, iptables from Debian
#   hack/node.sh kubeconfig  print its kubeconfig path
#   hack/node.sh status      say what runs
#   hack/node.sh leftovers   list what down would have left behind (exit 1 if anything)
#   hack/node.sh operator [HELM ARGS]  build the operator image, import it, install the chart with it
#   hack/node.sh ctr ARGS    run containerd's ctr on the node's socket, namespace k8s.io (tests kill containers with it)
#   hack/node.sh operator-tag  print the tag of the operator image that `operator` imports
#   hack/node.sh apiserver stop|start  kill the node cluster's kube-apiserver (SIGKILL) / start it again (fault tests)
#   hack/node.sh kubelet stop|start [NODE]  stop a node's kubelet, the first's by default (its containers keep
#                                      running) / start it again (fault tests)
#   hack/node.sh power off|on [NODE]   power a node (the second by default) off (its network, kubelet, containerd
#                                      and every container killed at once) / on again (as after a reboot)
#   hack/node.sh network cut|restore [NODE]  cut a node's network (its processes run on) / restore it
#   hack/node.sh ctr-on NODE ARGS      ctr on NODE's containerd
#
# Addresses (docs/development/realnode.md): the API server 198.18.254.1 on bridge dh-cp;
# dh-node 198.18.0.1/23 on bridge dh-node0 in network namespace dh-node, its pods 198.18.1.0/24,
# reached through veth dh-node-h (198.18.255.5/30, the namespace's end 198.18.255.6/30); dh-node2
# 198.18.2.1/23 on bridge dh-node2 in network namespace dh-node2, its pods 198.18.3.0/24, through
# veth dh-node2-h (198.18.255.1/30, 198.18.255.2/30); Services 198.19.0.0/16. Nothing here uses
# the kwok cluster `deckhand` that the rest of the suite runs on.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tools=$root/hack/tools.sh
cache=${DECKHAND_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/deckhand}
name=${DECKHAND_NODE_CLUSTER:-deckhand-node}
first_node=dh-node
second_node=dh-node2
node_count=${DECKHAND_NODES:-2}
apiserver_port=${DECKHAND_NODE_APISERVER_PORT:-16443}
# The control plane's address, on a bridge of the machine's with no port
# (dh-cp): neither node holds it, so either can be lost while the API
# server answers the other. The nodes' kubelets, kube-proxies and pods
# reach it there.
apiserver_ip=198.18.254.1
control_plane_bridge=dh-cp
# The machine's own daemons (use_node): its kube-proxy, through which
# clients on the machine reach Services, and the volume provisioner.
machine=dh-machine
# Pods that tolerate this taint may run on the second node; the rest of
# the node tests run on the first, as they did with one node.
second_node_taint=deckhand.dev/second-node
# Both nodes' pod ranges (kube-proxy's clusterCIDR).
cluster_cidr=198.18.0.0/22
service_cidr=198.19.0.0/16
cluster_dns=198.19.0.10
# Pods get a route to the project's range only: no default route, so
# nothing in a pod can address anything off this machine.
project_range=198.18.0.0/15
# The nodes' and pods' addresses (not the Services'), blackholed on the
# machine beneath the nodes' routes (network_up).
node_range=198.18.0.0/16

export KWOK_WORKDIR=$cache/kwok
kubeconfig=$KWOK_WORKDIR/clusters/$name/kubeconfig.yaml
pki=$KWOK_WORKDIR/clusters/$name/pki
# Persistent state (images, kubelet's pods) and runtime state (sockets,
# mounts of running containers) of the cluster, removed by `down`; each
# node's, and the machine's daemons', are directories inside them.
cluster_state=$cache/node/$name
cluster_run=/run/deckhand-node/$name
guard_chain=DECKHAND-NODE-APISERVER

# veth_of NODE is the machine's end of NODE's veth pair.
veth_of() { echo "$1-h"; }

# use_node NAME selects the node the functions below act on: its name
# (and the name its kube-proxy goes by), network namespace, bridge and addresses (one subnet on the bridge, a
# /23: the bridge plugin accepts only one IPv4 address on its bridge, so
# the node's address is also the pods' gateway, and host-local hands out
# the upper half), the veth pair joining its namespace to the machine's
# (a /30), directories, containerd socket and cgroup parent. NAME
# $machine selects the machine's own daemons (its kube-proxy, the volume
# provisioner): no namespace of their own, the control plane's address.
use_node() {
  case $1 in
  "$first_node")
    node=$first_node proxy_name=$first_node netns=$first_node bridge=dh-node0 node_ip=198.18.0.1 node_cidr=198.18.0.1/23
    pod_subnet=198.18.0.0/23 pod_cidr=198.18.1.0/24 cgroup_parent=
    veth=$(veth_of "$first_node") veth_host_ip=198.18.255.5 veth_node_ip=198.18.255.6
    ;;
  "$second_node")
    node=$second_node proxy_name=$second_node netns=$second_node bridge=dh-node2 node_ip=198.18.2.1 node_cidr=198.18.2.1/23
    pod_subnet=198.18.2.0/23 pod_cidr=198.18.3.0/24 cgroup_parent=$second_node
    veth=$(veth_of "$second_node") veth_host_ip=198.18.255.1 veth_node_ip=198.18.255.2
    ;;
  "$machine")
    node=$machine netns='' bridge=$control_plane_bridge node_ip=$apiserver_ip node_cidr=$apiserver_ip/32
    # its kube-proxy goes by the first node's name (kube_proxy_config)
    proxy_name=$first_node
    pod_subnet='' pod_cidr='' cgroup_parent='' veth='' veth_host_ip='' veth_node_ip=''
    ;;
  *)
    echo "no node $1 (nodes: $first_node, $second_node)" >&2
    return 1
    ;;
  esac
  state=$cluster_state/$node run=$cluster_run/$node
  sock=$run/containerd/containerd.sock
}
use_node "$first_node"

# nodes lists the nodes up starts, first first.
nodes() {
  echo "$first_node"
  if [[ $node_count -ge 2 ]]; then echo "$second_node"; fi
}

# in_netns runs a command in the selected node's network namespace.
in_netns() {
  if [[ -n $netns ]]; then nsenter --net="/run/netns/$netns" "$@"; else "$@"; fi
}

use_tools() {
  local kube etcd kwok
  kube=$("$tools" dir kube) etcd=$("$tools" dir etcd) kwok=$("$tools" dir kwok)
  kubenode=$("$tools" dir kubenode) containerd_dir=$("$tools" dir containerd)
  export KWOK_KUBE_VERSION=v1.36.3
  export KWOK_KUBE_BINARY_PREFIX=$kube KWOK_KUBECTL_BINARY=$kube/kubectl
  export KWOK_ETCD_BINARY=$etcd/etcd KWOK_CONTROLLER_BINARY=$kwok/kwok
  kwokctl=$kwok/kwokctl kubectl=$kube/kubectl
  ctr=$containerd_dir/ctr
}

log() { echo ">> $*" >&2; }

# timed runs a step and logs how long it took (docs/performance.md).
timed() {
  local what=$1 start=$SECONDS
  shift
  "$@"
  log "$what: $((SECONDS - start)) s"
}

deps() {
  local missing=() p
  for p in runc containernetworking-plugins busybox-static iptables; do
    dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
  done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  log "installing from Debian: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
}

require_root() {
  if [[ $(id -u) != 0 ]]; then
    echo "hack/node.sh $1 needs root: it creates a bridge, network namespaces, mounts and cgroups" >&2
    exit 1
  fi
}

# --- network -----------------------------------------------------------------

# network_up makes the selected node's network (netns_up, then its
# bridge), or for the machine the control plane's bridge, the API
# server's guard and the blackhole.
network_up() {
  if [[ -n $netns ]]; then
    netns_up
  fi
  if ! in_netns ip link show "$bridge" >/dev/null 2>&1; then
    in_netns ip link add "$bridge" type bridge
  fi
  in_netns ip addr replace "$node_cidr" dev "$bridge"
  in_netns ip link set "$bridge" up
  [[ -n $netns ]] && return 0
  apiserver_guard_up
  # The nodes' addresses end here: with a node powered off or cut, its
  # addresses must not follow the machine's default route off the
  # machine. A blackhole drops them silently, as a dead node's packets
  # vanish in a routed network (the senders time out). Not the Services'
  # range: the machine's route lookup for a ClusterIP comes before
  # kube-proxy rewrites it (OUTPUT), or rejects one with no endpoints
  # (FORWARD), and a blackhole there failed both. The control plane's
  # address is local, which the kernel looks up before the blackhole.
  ip route replace blackhole "$node_range"
}

# netns_up makes the node's network namespace, the veth pair that joins it
# to the machine's, and the routes between the two: the machine reaches
# the node's /23 through the pair, the node the project's range (the
# control plane, the other node, its pods, Services) through the machine,
# which forwards between the nodes. Nothing else: no default route.
# Forwarding and bridge netfilter (kube-proxy's rules see bridged traffic)
# are per namespace.
netns_up() {
  [[ -e /run/netns/$netns ]] || ip netns add "$netns"
  if ! ip link show "$veth" >/dev/null 2>&1; then
    ip link add "$veth" type veth peer name eth0 netns "$netns"
  fi
  sysctl -qw net.ipv4.ip_forward=1
  in_netns sysctl -qw net.ipv4.ip_forward=1
  modprobe br_netfilter 2>/dev/null || true
  in_netns sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null || true
  ip addr replace "$veth_host_ip/30" dev "$veth"
  in_netns ip addr replace "$veth_node_ip/30" dev eth0
  in_netns ip link set lo up
  link_up
}

# link_up brings the veth pair up and (again: a link taken down loses its
# routes) routes each side to the other.
link_up() {
  ip link set "$veth" up
  in_netns ip link set eth0 up
  ip route replace "$pod_subnet" via "$veth_node_ip" dev "$veth"
  in_netns ip route replace "$project_range" via "$veth_host_ip" dev eth0
}

# The API server listens on every address of both families (kube-apiserver
# takes one bind address, kwokctl's clients use 127.0.0.1 and the nodes
# need the control plane's; 0.0.0.0 gives a dual-stack socket), so this
# chain, in iptables and ip6tables, lets only loopback (the machine's own
# clients, the control plane's address included) and the nodes' veth
# pairs reach its port.
apiserver_guard_up() {
  local cmd n
  for cmd in iptables ip6tables; do
    "$cmd" -w -N "$guard_chain" 2>/dev/null || "$cmd" -w -F "$guard_chain"
    "$cmd" -w -A "$guard_chain" -i lo -j RETURN
    for n in "$first_node" "$second_node"; do
      "$cmd" -w -A "$guard_chain" -i "$(veth_of "$n")" -j RETURN
    done
    "$cmd" -w -A "$guard_chain" -j DROP
    "$cmd" -w -C INPUT -p tcp --dport "$apiserver_port" -j "$guard_chain" 2>/dev/null ||
      "$cmd" -w -I INPUT -p tcp --dport "$apiserver_port" -j "$guard_chain"
  done
}

apiserver_guard_down() {
  local cmd
  for cmd in iptables ip6tables; do
    command -v "$cmd" >/dev/null || continue
    while "$cmd" -w -D INPUT -p tcp --dport "$apiserver_port" -j "$guard_chain" 2>/dev/null; do :; done
    "$cmd" -w -F "$guard_chain" 2>/dev/null || true
    "$cmd" -w -X "$guard_chain" 2>/dev/null || true
  done
}

# --- control plane -----------------------------------------------------------

kwok_config() {
  cat <<EOF
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokctlConfiguration
options:
  runtime: binary
  # etcd, the controller manager and the scheduler: loopback only
  bindAddress: 127.0.0.1
  # the node is real: no kwok controller faking nodes and pods
  disable:
  - kwok-controller
  kubeAuthorization: true
  kubeAdmission: true
  securePort: true
  kubeApiserverPort: $apiserver_port
  # the nodes and their pods reach the API server at the control plane's
  # address and through the kubernetes Service's first address
  kubeApiserverCertSANs:
  - $apiserver_ip
  - ${service_cidr%.0/16}.1
  - kubernetes.default.svc
  - kubernetes.default.svc.cluster.local
# GOGC and GOMEMLIMIT: as in hack/kwok.yaml, the collectors run a third as
# often, under a ceiling.
componentsPatches:
- name: etcd
  extraArgs:
  - key: unsafe-no-fsync
    value: "true"
  extraEnvs:
  - {name: GOGC, value: "300"}
  - {name: GOMEMLIMIT, value: 1GiB}
- name: kube-apiserver
  extraEnvs:
  - {name: GOGC, value: "300"}
  - {name: GOMEMLIMIT, value: 2GiB}
  extraArgs:
  # later flags win: kwokctl binds 127.0.0.1; see apiserver_guard_up
  - key: bind-address
    value: 0.0.0.0
  - key: advertise-address
    value: $apiserver_ip
  # the kubelet may change only its own Node and its pods, as in kubeadm clusters
  - key: enable-admission-plugins
    value: NodeRestriction
  - key: service-cluster-ip-range
    value: $service_cidr
  # exec, logs, port-forward: the API server authenticates to the kubelet
  - key: kubelet-client-certificate
    value: $pki/admin.crt
  - key: kubelet-client-key
    value: $pki/admin.key
  - key: kubelet-preferred-address-types
    value: InternalIP
- name: kube-controller-manager
  extraEnvs:
  - {name: GOGC, value: "300"}
  - {name: GOMEMLIMIT, value: 1GiB}
  extraArgs:
  - key: service-cluster-ip-range
    value: $service_cidr
  # kube-controller-manager's own defaults, which kwokctl raises for fake
  # nodes: a node whose kubelet stops posting is NotReady within 50 s
  - key: node-monitor-period
    value: 5s
  - key: node-monitor-grace-period
    value: 50s
EOF
}

control_plane_up() {
  if [[ -f $kubeconfig ]]; then
    log "starting cluster $name"
    "$kwokctl" start cluster --name "$name" >&2
  else
    log "creating cluster $name (kwokctl binary runtime, no kwok controller, Kubernetes $KWOK_KUBE_VERSION)"
    mkdir -p "$cluster_state"
    kwok_config >"$cluster_state/kwok.yaml"
    "$kwokctl" create cluster --name "$name" --runtime binary \
      --config "$cluster_state/kwok.yaml" --kubeconfig "$kubeconfig" --wait 60s >&2
  fi
  wait_for "the API server" 120 api_ready
}

api_ready() { "$kubectl" --kubeconfig "$kubeconfig" get --raw /readyz >/dev/null 2>&1; }

wait_for() { # what, seconds, command...
  local what=$1 seconds=$2 i
  shift 2
  for ((i = 0; i < seconds * 2; i++)); do
    if "$@"; then return 0; fi
    sleep 0.5
  done
  echo "$what not ready within $seconds s; logs: $state/*.log, $KWOK_WORKDIR/clusters/$name/logs" >&2
  return 1
}

# --- identities ----------------------------------------------------------------

# client_kubeconfig writes a kubeconfig for one of the node's components,
# with a client certificate from the cluster's CA for the given user and
# group, so the API server authorizes it as a real cluster would: the
# kubelet as system:node:<node> (the Node authorizer), kube-proxy as
# system:kube-proxy (RBAC's system:node-proxier).
client_kubeconfig() { # file, user, group
  local out=$1 user=$2 group=$3 dir key crt server
  dir=$state/pki key=$state/pki/$(basename "$out" .kubeconfig).key crt=${key%.key}.crt
  mkdir -p "$dir"
  if [[ ! -f $crt ]]; then
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$key" \
      -subj "/O=$group/CN=$user" -out "${key%.key}.csr" 2>/dev/null
    openssl x509 -req -in "${key%.key}.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
      -days 365 -out "$crt" 2>/dev/null
    chmod 600 "$key"
  fi
  server=$("$kubectl" --kubeconfig "$kubeconfig" config view --minify -o jsonpath='{.clusters[0].cluster.server}')
  # A node's loopback is its own: it reaches the API server at the
  # control plane's address.
  if [[ -n $netns ]]; then server=https://$apiserver_ip:$apiserver_port; fi
  KUBECONFIG=$out "$kubectl" config set-cluster "$name" --server "$server" \
    --certificate-authority "$pki/ca.crt" --embed-certs >/dev/null
  KUBECONFIG=$out "$kubectl" config set-credentials "$user" --client-certificate "$crt" \
    --client-key "$key" --embed-certs >/dev/null
  KUBECONFIG=$out "$kubectl" config set-context default --cluster "$name" --user "$user" >/dev/null
  KUBECONFIG=$out "$kubectl" config use-context default >/dev/null
}

# --- containerd --------------------------------------------------------------

containerd_config() {
  cat <<EOF
version = 3
root = "$(image_store)"
state = "$run/containerd"
[grpc]
  address = "$sock"
[ttrpc]
  address = "$run/containerd/containerd.sock.ttrpc"
[plugins.'io.containerd.internal.v1.opt']
  path = "$state/opt"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "docker.io/$("$root/hack/node/images.sh" ref pause)"
  # Every registry is this machine's closed port (registry_hosts): a pod
  # whose image was not imported fails to pull without a DNS lookup or a
  # connection off the machine.
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = "$state/certs.d"
[plugins.'io.containerd.cri.v1.runtime']
  # pods' network namespaces under $run, so down finds and removes them
  netns_mounts_under_state_dir = true
  # Root here lacks CAP_SYS_RESOURCE, so no process may lower its OOM score
  # adjustment: runc failed the sandbox's -998 with "failed to update
  # /proc/self/oom_score_adj: Permission denied". This clamps every
  # container's adjustment to containerd's own (0) instead.
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        # runc's container state, under $run like the rest, not /run/containerd
        Root = "$run/runc"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$state/cni/net.d"
[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
EOF
}

# The pod network: Debian's bridge plugin on dh-node0 with host-local IPAM.
# No ipMasq and only a route to the project's range: pods talk to the node,
# each other and (with kube-proxy) Services, and to nothing else.
cni_config() {
  cat <<EOF
{
  "cniVersion": "1.0.0",
  "name": "deckhand-node",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$bridge",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$state/cni/ipam",
        "ranges": [[{"subnet": "$pod_subnet", "gateway": "$node_ip",
                     "rangeStart": "${pod_cidr%.0/24}.2", "rangeEnd": "${pod_cidr%.0/24}.254"}]],
        "routes": [{"dst": "$project_range"}]
      }
    }
  ]
}
EOF
}

containerd_up() {
  if containerd_ready; then return 0; fi
  mkdir -p "$state/cni/net.d" "$run/containerd"
  containerd_config >"$state/containerd.toml"
  registry_hosts
  cni_config >"$state/cni/net.d/10-deckhand-node.conflist"
  start_containerd
  if [[ -n $(containers_in_store) ]]; then
    # A down that did not finish (or none) left containers in the store;
    # containerd's CRI has loaded them already, so the store starts afresh
    # rather than have the kubelet meet pods of a cluster that is gone.
    log "the node's image store holds containers of an earlier node: starting it empty"
    stop_daemon containerd
    rm -rf "$(image_store)"
    start_containerd
  fi
}

start_containerd() {
  log "starting containerd ($state/containerd.log)"
  start_daemon containerd "$containerd_dir/containerd" --config "$state/containerd.toml"
  wait_for containerd 60 containerd_ready
}

# image_store is containerd's root: its images, their unpacked layers and
# its records of containers. It outlives down, as a real node's disk
# outlives a reboot, so up imports only the images whose archives changed
# (all of them took 31 s; none, under a second). Keyed by containerd's
# version, whose store format is its own; down empties it of containers
# and sandboxes (forget_containers).
image_store() {
  local suffix=
  [[ $node == "$first_node" ]] || suffix=-$node
  echo "$cache/node-containerd/$name$suffix-$(basename "$containerd_dir")"
}

containers_in_store() { { "$ctr" -a "$sock" -n k8s.io containers ls -q; sandbox_ids; } 2>/dev/null; }

# sandbox_ids: ctr's sandboxes ls has no -q.
sandbox_ids() { "$ctr" -a "$sock" -n k8s.io sandboxes ls | awk 'NR > 1 {print $1}'; }

# forget_containers removes every task, container and sandbox from the
# running containerd (the kubelet stopped first, so none comes back), so
# the store down leaves holds images only.
forget_containers() {
  local ids
  containerd_ready || return 0
  ids=$("$ctr" -a "$sock" -n k8s.io containers ls -q 2>/dev/null) || true
  if [[ -n $ids ]]; then
    "$ctr" -a "$sock" -n k8s.io tasks delete --force $ids >/dev/null 2>&1 || true
    "$ctr" -a "$sock" -n k8s.io containers delete $ids >/dev/null 2>&1 || true
  fi
  ids=$(sandbox_ids 2>/dev/null) || true
  if [[ -n $ids ]]; then
    "$ctr" -a "$sock" -n k8s.io sandboxes remove --force $ids >/dev/null 2>&1 || true
  fi
}

# registry_hosts points every registry (containerd's _default host
# namespace: docker.io and any other) at 127.0.0.1:1, where nothing
# listens. Without it, a pod whose image was never imported makes
# containerd look up registry-1.docker.io through the machine's resolver
# ("dial tcp: lookup registry-1.docker.io on 10.255.255.53:53: no such
# host"), traffic off the machine; with it the pull fails at once with
# "connection refused".
registry_hosts() {
  mkdir -p "$state/certs.d/_default"
  cat >"$state/certs.d/_default/hosts.toml" <<EOF
server = "http://127.0.0.1:1"
[host."http://127.0.0.1:1"]
  capabilities = ["pull", "resolve"]
EOF
}

containerd_ready() { [[ -S $sock ]] && "$ctr" -a "$sock" version >/dev/null 2>&1; }

# start_daemon runs a node daemon detached from this script (no inherited
# descriptors beyond 0-2, its own session), logging to $state/<name>.log,
# its pid in $run/<name>.pid, in the node's network namespace (nsenter
# joins only that one: the daemons share the machine's mounts, as the
# kubelet's volumes and containerd's root filesystems must). The shims
# find containerd-shim-runc-v2 on PATH.
start_daemon() {
  local what=$1
  shift
  mkdir -p "$run"
  (
    local fd
    for fd in "/proc/$BASHPID/fd/"*; do
      fd=${fd##*/}
      if ((fd > 2)); then eval "exec $fd>&-"; fi
    done
    export PATH=$containerd_dir:$PATH
    if [[ -n $netns ]]; then
      exec nsenter --net="/run/netns/$netns" setsid "$@" </dev/null >>"$state/$what.log" 2>&1
    fi
    exec setsid "$@" </dev/null >>"$state/$what.log" 2>&1
  ) &
  echo $! >"$run/$what.pid"
}

# images_up builds the node's images and imports each whose archive's
# manifest is not what the store holds under its reference (a recipe
# change keeps the reference and changes the digest), then removes every
# other image from the store: the operator's earlier builds, images of
# versions no longer listed, and the digest references containerd's CRI
# keeps beside them.
images_up() {
  "$root/hack/node/images.sh" build
  local i archive ref digest held imported=0 kept=0
  local -A want=()
  held=$("$ctr" -a "$sock" -n k8s.io images ls 2>/dev/null | awk 'NR > 1 {print $1, $3}')
  for i in $("$root/hack/node/images.sh" list); do
    archive=$("$root/hack/node/images.sh" archive "$i")
    ref=docker.io/$("$root/hack/node/images.sh" ref "$i")
    digest=$(archive_digest "$archive")
    want[$digest]=1
    if grep -qxF -- "$ref $digest" <<<"$held"; then
      kept=$((kept + 1))
      continue
    fi
    "$ctr" -a "$sock" -n k8s.io images import "$archive" >&2
    imported=$((imported + 1))
  done
  while read -r ref digest; do
    [[ -n $ref && -z ${want[$digest]:-} ]] || continue
    "$ctr" -a "$sock" -n k8s.io images remove "$ref" >/dev/null 2>&1 || true
  done <<<"$held"
  log "images: $imported imported, $kept already in the node's store"
}

# archive_digest prints the digest of the manifest an OCI archive's index
# names (hack/node/images.sh writes one manifest per archive).
archive_digest() {
  tar -xOf "$1" index.json | tr -d ' \n' | grep -o '"digest":"sha256:[0-9a-f]*"' | head -1 | cut -d'"' -f4
}

# --- kubelet -----------------------------------------------------------------

# cgroup v1 with the cgroupfs driver: this machine's controllers (cpu,
# memory, pids, ...) are mounted only as v1 hierarchies and there is no
# systemd, so kubelet must be told v1 is acceptable (KEP-5573 made it fail
# on v1 by default).
kubelet_config() {
  cat <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$sock
address: $node_ip
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $pki/ca.crt
authorization:
  mode: Webhook
clusterDomain: cluster.local
clusterDNS:
- $cluster_dns
resolvConf: $state/resolv.conf
podCIDR: $pod_cidr
failSwapOn: false
$(second_node_settings)
staticPodPath: ""
serializeImagePulls: false
imageGCHighThresholdPercent: 99
imageGCLowThresholdPercent: 98
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
EOF
}

# second_node_settings: the second node's pods live under a cgroup parent
# of their own (both kubelets would otherwise manage one kubepods
# hierarchy) and log to a directory of their own (each kubelet removes
# from its pod logs directory every pod it does not run: sharing
# /var/log/pods, each deleted the other's logs), and the node registers
# tainted.
second_node_settings() {
  [[ $node == "$second_node" ]] || return 0
  cat <<EOF
cgroupRoot: /$cgroup_parent
podLogsDir: $state/pod-logs
registerWithTaints:
- key: $second_node_taint
  effect: NoSchedule
EOF
}

# The kernel settings the kubelet sets at start (protectKernelDefaults
# false: overcommit, panic on oops, ...): saved before its first start and
# restored by down, since they are the machine's, not the node's.
kernel_tunables=(vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops
  kernel/keys/root_maxkeys kernel/keys/root_maxbytes)

save_kernel_tunables() {
  local k
  [[ -f $cluster_state/kernel-tunables ]] && return 0
  for k in "${kernel_tunables[@]}"; do echo "$k $(cat "/proc/sys/$k")"; done >"$cluster_state/kernel-tunables"
}

restore_kernel_tunables() {
  local k v
  [[ -f $cluster_state/kernel-tunables ]] || return 0
  while read -r k v; do
    echo "$v" >"/proc/sys/$k" 2>/dev/null || log "could not restore $k to $v"
  done <"$cluster_state/kernel-tunables"
}

kubelet_up() {
  if kubelet_running; then return 0; fi
  save_kernel_tunables
  mkdir -p "$state/kubelet"
  [[ -z $cgroup_parent ]] || cgroup_parent_up
  kubelet_config >"$state/kubelet.yaml"
  # Pods with dnsPolicy Default get this: no upstream resolver, on purpose.
  echo "# deckhand-node: no DNS beyond the cluster's" >"$state/resolv.conf"
  client_kubeconfig "$state/kubelet.kubeconfig" "system:node:$node" system:nodes
  log "starting kubelet ($state/kubelet.log)"
  start_daemon kubelet "$kubenode/kubelet" --config "$state/kubelet.yaml" \
    --kubeconfig "$state/kubelet.kubeconfig" --hostname-override "$node" --node-ip "$node_ip" \
    --root-dir "$state/kubelet" --cert-dir "$state/kubelet/pki" --v 2
  wait_for "node $node" 120 node_ready
}

kubelet_running() { pid_alive kubelet; }

# cgroup_parent_up makes the second node's cgroup parent in every cgroup
# v1 hierarchy, weighted in cpu as the kubelet weighs its own kubepods
# (1024 per core), so both nodes' pods get an equal share when they
# compete.
cgroup_parent_up() {
  local d
  for d in /sys/fs/cgroup/*/; do
    [[ -e $d/cgroup.procs && ! -L ${d%/} ]] || continue
    mkdir -p "$d$cgroup_parent"
  done
  if [[ -e /sys/fs/cgroup/cpu/$cgroup_parent/cpu.shares ]]; then
    echo $(($(nproc) * 1024)) >"/sys/fs/cgroup/cpu/$cgroup_parent/cpu.shares"
  fi
}

node_ready() {
  [[ $("$kubectl" --kubeconfig "$kubeconfig" get node "$node" \
    -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]
}

pid_alive() {
  local pid
  pid=$(cat "$run/$1.pid" 2>/dev/null) || return 1
  [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null
}

# kube_chains_down removes the iptables chains kube-proxy (the machine's)
# creates, KUBE-*, and the rules jumping to them, from every table of both
# families in the machine's namespace; the nodes' went with their
# namespaces.
kube_chains_down() {
  local cmd table rule chain
  for cmd in iptables ip6tables; do
    command -v "$cmd" >/dev/null || continue
    for table in filter nat mangle raw; do
      "$cmd" -w -t "$table" -S >/dev/null 2>&1 || continue
      while IFS= read -r rule; do
        # shellcheck disable=SC2086 # a rule as iptables -S prints it
        eval "$cmd -w -t $table ${rule/-A /-D }" 2>/dev/null || true
      done < <("$cmd" -w -t "$table" -S | grep -E '^-A [A-Z]+ .*-j KUBE-' | grep -vE '^-A KUBE-')
      for chain in $("$cmd" -w -t "$table" -S | awk '$1 == "-N" && $2 ~ /^KUBE-/ { print $2 }'); do
        "$cmd" -w -t "$table" -F "$chain" 2>/dev/null || true
      done
      for chain in $("$cmd" -w -t "$table" -S | awk '$1 == "-N" && $2 ~ /^KUBE-/ { print $2 }'); do
        "$cmd" -w -t "$table" -X "$chain" 2>/dev/null || true
      done
    done
  done
}

# --- cluster DNS -------------------------------------------------------------

dns_up() {
  sed -e "s|IMAGE|$("$root/hack/node/images.sh" ref coredns)|" -e "s|DNS_IP|$cluster_dns|" \
    "$root/hack/node/coredns.yaml" | "$kubectl" --kubeconfig "$kubeconfig" apply -f - >&2
  "$kubectl" --kubeconfig "$kubeconfig" -n kube-system rollout status deployment/coredns --timeout 120s >&2
}

# --- volumes -------------------------------------------------------------------

# storage_up runs hack/provisioner (the kwok cluster's volume provisioner)
# for this cluster on the machine (as a CSI controller runs beside the
# control plane), with its volumes under the cluster's state directory;
# each volume is pinned to a node and served from this machine's disk.
storage_up() {
  "$kubectl" --kubeconfig "$kubeconfig" apply -f "$root/hack/node/storage.yaml" >&2
  pid_alive provisioner && return 0
  mkdir -p "$cluster_state/volumes" "$cluster_state/bin"
  (cd "$root" && go build -o "$cluster_state/bin/deckhand-provisioner" ./hack/provisioner)
  start_daemon provisioner "$cluster_state/bin/deckhand-provisioner" --kubeconfig "$kubeconfig" --root "$cluster_state/volumes"
  sleep 0.5
  pid_alive provisioner || { tail -5 "$state/provisioner.log" >&2; return 1; }
}

# --- kube-proxy --------------------------------------------------------------

# kube-proxy in iptables mode: Services' ClusterIPs (198.19.0.0/16) to pods,
# one in each node's namespace and one in the machine's for the machine's
# own clients. That one goes by the first node's name (kube-proxy waits
# 30 s at start for its Node to exist, and reports itself unhealthy
# without one), which matters only to Services that keep traffic on a
# node, and none here does. Node ports only on the node's address (the
# machine's: the control plane's); conntrack sysctls and the OOM score
# left as they are (root here may not lower an OOM score).
kube_proxy_config() {
  cat <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: $state/kube-proxy.kubeconfig
hostnameOverride: $proxy_name
bindAddress: $node_ip
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
mode: iptables
clusterCIDR: $cluster_cidr
nodePortAddresses:
- $node_ip/32
oomScoreAdj: 0
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOF
}

kube_proxy_up() {
  if pid_alive kube-proxy; then return 0; fi
  client_kubeconfig "$state/kube-proxy.kubeconfig" system:kube-proxy deckhand:node-components
  kube_proxy_config >"$state/kube-proxy.yaml"
  log "starting kube-proxy ($state/kube-proxy.log)"
  start_daemon kube-proxy "$kubenode/kube-proxy" --config "$state/kube-proxy.yaml" --v 2
  wait_for kube-proxy 60 kube_proxy_ready
}

kube_proxy_ready() { in_netns curl -fsS http://127.0.0.1:10256/healthz >/dev/null 2>&1; }

# --- the operator --------------------------------------------------------------

# operator_up builds the operator image for this machine's platform (make
# image's build: an OCI layout, no Docker), with the JMX exporter's test
# stand-in agent where upstream's jar would be (hack/node/images.sh
# agent-jar: Maven Central cannot be reached), imports it as
# deckhand-local/deckhand:<appVersion>-standin-agent (not the published
# ghcr.io name, and a tag saying what it carries, so it cannot be mistaken
# for a release) and installs the chart with it, as users do; arguments go
# to helm (make run adds the demo). The image's digest goes into a pod
# annotation: a rebuilt image keeps its tag, and only the changed
# annotation rolls the operator's pods onto it.
operator_up() {
  local version tag layout archive helm jar n
  version=$(app_version)
  tag=$(operator_tag)
  layout=$cluster_state/operator-image archive=$cluster_state/operator-image.tar
  helm=$("$tools" dir helm)/helm
  "$tools" build helm
  jar=$("$root/hack/node/images.sh" agent-jar)
  log "building the operator image $tag (make image's build, linux/amd64, with the stand-in JMX agent)"
  (cd "$root" && go run ./hack/image --out "$layout" --platforms "linux/$(go env GOARCH)" --version "$version" \
    --tag "$tag" --agent-jar "$jar" --bin-dir "$cache/operator-image-bin") >&2
  tar -C "$layout" -cf "$archive" .
  for n in $(nodes); do
    use_node "$n"
    containerd_ready || continue
    "$ctr" -a "$sock" -n k8s.io images import --base-name docker.io/deckhand-local/deckhand "$archive" >&2
  done
  use_node "$first_node"
  # the release namespace enforces the restricted Pod Security Standard
  "$kubectl" --kubeconfig "$kubeconfig" create namespace deckhand-system --dry-run=client -o yaml |
    "$kubectl" --kubeconfig "$kubeconfig" apply -f - >&2
  "$kubectl" --kubeconfig "$kubeconfig" label namespace deckhand-system --overwrite \
    pod-security.kubernetes.io/enforce=restricted >&2
  "$helm" --kubeconfig "$kubeconfig" upgrade --install deckhand "$root/charts/deckhand" \
    --namespace deckhand-system \
    --set image.repository=deckhand-local/deckhand --set image.tag="$tag" --set image.pullPolicy=Never \
    --set controllers.database.archiverImage="$("$root/hack/node/images.sh" ref archiver)" \
    --set controllers.database.poolerImage="$("$root/hack/node/images.sh" ref pgbouncer)" \
    --set-string "podAnnotations.hack\.deckhand\.dev/image-digest=$(tr -d ' \n' <"$layout/index.json" | grep -o '"digest":"sha256:[0-9a-f]*"' | head -1 | cut -d'"' -f4)" \
    --wait --timeout 5m "$@" >&2
}

app_version() { awk '/^appVersion:/ {gsub(/"/, "", $2); print $2}' "$root/charts/deckhand/Chart.yaml"; }
# operator_tag is the tag operator_up imports the operator image under
# (hack/node/ct-install.sh installs its releases with it too).
operator_tag() { echo "$(app_version)-standin-agent"; }

# --- faults ------------------------------------------------------------------

# The fault tests (e2e/node) stop a part of the running cluster and start
# it again, the way this script started it, so the rest is untouched.

apiserver_pid() { cat "$KWOK_WORKDIR/clusters/$name/pids/kube-apiserver.pid" 2>/dev/null; }

# apiserver_stop kills the API server as a crash would (SIGKILL: no
# graceful shutdown, open watches cut), and returns once it is gone.
apiserver_stop() {
  local pid i
  pid=$(apiserver_pid) || { echo "no pid file of the API server of $name" >&2; return 1; }
  kill -9 "$pid" 2>/dev/null || true
  for ((i = 0; i < 200; i++)); do
    [[ -d /proc/$pid && $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) != Z ]] || return 0
    sleep 0.1
  done
  echo "the API server (pid $pid) did not end" >&2
  return 1
}

# apiserver_start starts, through kwokctl, every control-plane component
# not running, and returns once the API server is ready and the
# controller manager and the scheduler lead again. Both exit when they
# cannot renew their leader Lease (10 s): one may still be on its way out
# when the API server comes back, so the loop starts whatever is not
# running until each has renewed its Lease since the start.
apiserver_start() {
  local since i
  since=$(date -u +%s)
  for ((i = 0; i < 240; i++)); do
    control_plane_running || "$kwokctl" start cluster --name "$name" >&2
    if api_ready && lease_renewed_since kube-controller-manager "$since" &&
      lease_renewed_since kube-scheduler "$since" && control_plane_running; then
      return 0
    fi
    sleep 0.5
  done
  echo "the control plane of $name did not come back within 120 s; logs: $KWOK_WORKDIR/clusters/$name/logs" >&2
  return 1
}

control_plane_running() {
  local c pid
  for c in kube-apiserver kube-controller-manager kube-scheduler; do
    pid=$(cat "$KWOK_WORKDIR/clusters/$name/pids/$c.pid" 2>/dev/null) || return 1
    [[ -d /proc/$pid && $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) != Z ]] || return 1
  done
}

# lease_renewed_since: the Lease has a holder that renewed it at or after
# the time (a component giving up its lead on the way out empties the
# holder, and that write also sets the time).
lease_renewed_since() { # lease, unix seconds
  local out holder t
  out=$("$kubectl" --kubeconfig "$kubeconfig" -n kube-system get lease "$1" \
    -o jsonpath='{.spec.holderIdentity} {.spec.renewTime}' 2>/dev/null) || return 1
  read -r holder t <<<"$out"
  [[ -n $holder && -n $t && $(date -u -d "$t" +%s) -ge $2 ]]
}

# kubelet_stop ends the kubelet (SIGTERM, as stop_daemon does): no
# graceful node shutdown is configured, so its pods' containers keep
# running under containerd.
kubelet_stop() { stop_daemon kubelet; }

# kubelet_start starts it again and waits for its health endpoint (the
# Node may still read Ready from before the stop: the controller manager
# marks it NotReady only after its grace period).
kubelet_start() {
  kubelet_up
  wait_for "the kubelet's healthz" 120 kubelet_healthy
}

kubelet_healthy() { in_netns curl -fsS http://127.0.0.1:10248/healthz >/dev/null 2>&1; }

# power_off ends a node as a power cut would: its network first
# (the veth pair down: nothing it sends gets out), then its kubelet,
# kube-proxy, containerd, shims and every container process SIGKILLed at
# once. Nothing shuts down cleanly; the volumes keep what reached them.
power_off() {
  node_only power
  ip link set "$veth" down 2>/dev/null || true
  local what pid pids=()
  for what in kubelet kube-proxy containerd; do
    pid=$(cat "$run/$what.pid" 2>/dev/null) && pids+=("$pid")
  done
  pids+=($(container_pids) $(shim_pids))
  [[ ${#pids[@]} -eq 0 ]] || kill -9 "${pids[@]}" 2>/dev/null || true
  rm -f "$run"/{kubelet,kube-proxy,containerd}.pid
  log "node $node powered off"
}

# power_on starts a node again as after a reboot: what lived in
# memory and under /run is gone (its containers' mounts and runtime state),
# its disk is kept (the image store, the kubelet's directory, the
# volumes); its network comes back, then containerd, the kubelet (which
# starts the pods the API server still binds to the node) and kube-proxy.
power_on() {
  node_only power
  pid_alive kubelet && { echo "node $node is on" >&2; return 1; }
  remove_shim_sockets
  unmount_all
  rm -rf "$run"
  link_up
  start_containerd
  kubelet_up
  kube_proxy_up
  log "node $node powered on"
}

# network_cut takes a node's veth pair down: the node and its pods lose
# the control plane, the other node and each other's Services
# (kube-proxy's endpoints age), while every process runs on.
network_cut() {
  node_only network
  ip link set "$veth" down
  log "node $node cut off"
}

network_restore() {
  node_only network
  link_up
  log "node $node reachable again"
}

node_only() {
  if [[ -z $netns ]]; then
    echo "hack/node.sh $1: $node is not a node (nodes: $first_node, $second_node)" >&2
    exit 2
  fi
  [[ -e /run/netns/$netns ]] || { echo "node $node is not up" >&2; exit 1; }
}

# --- down --------------------------------------------------------------------

# stop_daemon ends a daemon this script started, by the pid it recorded.
stop_daemon() {
  local what=$1 pid i
  pid=$(cat "$run/$what.pid" 2>/dev/null) || return 0
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for i in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$run/$what.pid"
}

# stop_containers kills every container's processes (runc's init.pid files
# under $run) and the shims serving this node's containerd (containerd 2
# records no shim pid: they are the processes started with its socket as
# -address), so nothing started by this node outlives it.
stop_containers() {
  local pid
  for pid in $(container_pids) $(shim_pids); do kill -9 "$pid" 2>/dev/null || true; done
}

container_pids() {
  local f pid
  [[ -d $run/containerd ]] || return 0
  while IFS= read -r f; do
    pid=$(cat "$f" 2>/dev/null) || continue
    if [[ $pid =~ ^[0-9]+$ ]]; then echo "$pid"; fi
  done < <(find "$run/containerd" -name init.pid 2>/dev/null)
}

shim_pids() {
  local p args
  for p in /proc/[0-9]*; do
    { args=$(tr '\0' '\n' <"$p/cmdline"); } 2>/dev/null || continue
    [[ $args == "$containerd_dir/containerd-shim-runc-v2"$'\n'* ]] || continue
    if grep -qxF -- "$sock" <<<"$args"; then echo "${p#/proc/}"; fi
  done
}

# remove_shim_sockets removes the sockets containerd's shims leave in
# containerd's fixed /run/containerd/s (named by the sha256 of
# "<containerd address>/<namespace>/<id>") when they are killed, then the
# directories containerd and ctr made there, if nothing else uses them.
remove_shim_sockets() {
  local task ns id h
  for task in "$run"/containerd/io.containerd.runtime.v2.task/*/*; do
    [[ -d $task ]] || continue
    id=${task##*/} ns=${task%/*} ns=${ns##*/}
    for h in "$sock/$ns/$id" "$sock/$ns/$id/debug"; do
      rm -f "/run/containerd/s/$(printf %s "$h" | sha256sum | cut -d' ' -f1)"
    done
  done
  rmdir /run/containerd/s /run/containerd/fifo /run/containerd/runc/k8s.io /run/containerd/runc \
    /run/containerd 2>/dev/null || true
}

# unmount_all unmounts whatever is mounted under the node's directories
# (container root filesystems, pod volumes, network namespaces), deepest
# first.
unmount_all() {
  local m dir
  for dir in "$run" "$state"; do
    while IFS= read -r m; do
      umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done < <(awk -v d="$dir" '$5 == d || index($5, d "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r)
  done
}

# remove_cgroups removes the kubelet's kubepods hierarchy from every cgroup
# v1 controller, deepest first (rmdir only removes empty cgroups).
remove_cgroups() {
  local d
  for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/*/kubepods.slice; do
    [[ -d $d ]] || continue
    find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
}

# node_down stops the selected node's daemons and containers and removes
# what they mounted, its network namespace (its bridge, veth pair and
# iptables rules with it) and the second node's cgroup parent.
node_down() {
  stop_daemon kube-proxy
  stop_daemon kubelet
  forget_containers
  stop_containers
  stop_daemon containerd
  remove_shim_sockets
  unmount_all
  local d
  if [[ -n $cgroup_parent ]]; then
    for d in /sys/fs/cgroup/*/"$cgroup_parent"; do
      [[ -d $d ]] || continue
      find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
    done
  fi
  ip netns del "$netns" 2>/dev/null || true
  ip link del "$veth" 2>/dev/null || true
}

down() {
  use_tools
  use_node "$machine"
  stop_daemon provisioner
  stop_daemon kube-proxy
  use_node "$second_node"
  node_down
  use_node "$first_node"
  node_down
  [[ -n $(other_kubelet) ]] || remove_cgroups
  restore_kernel_tunables
  ip link del "$control_plane_bridge" 2>/dev/null || true
  ip route del blackhole "$node_range" 2>/dev/null || true
  apiserver_guard_down
  if [[ -n $(other_kubelet) ]]; then
    log "another kubelet runs here ($(other_kubelet | head -1)): leaving KUBE-* iptables chains and kubepods cgroups alone"
  else
    kube_chains_down
  fi
  if [[ -d $KWOK_WORKDIR/clusters/$name ]]; then
    "$kwokctl" delete cluster --name "$name" >&2 || true
  fi
  rm -rf "$cluster_state" "$cluster_run"
  rmdir /run/deckhand-node 2>/dev/null || true
  log "node cluster $name removed"
}

# node_present says whether anything this script creates exists here:
# its directories, network namespaces, interfaces, API-server guard chain
# or kwok cluster.
node_present() {
  local n
  [[ -e $cluster_run || -e $cluster_state || -d $KWOK_WORKDIR/clusters/$name ]] && return 0
  for n in "$first_node" "$second_node"; do
    [[ -e /run/netns/$n ]] && return 0
    ip link show "$(veth_of "$n")" >/dev/null 2>&1 && return 0
  done
  ip link show "$control_plane_bridge" >/dev/null 2>&1 && return 0
  ip route show type blackhole | grep -qF "$node_range" && return 0
  command -v iptables >/dev/null && { iptables -w -S "$guard_chain" || ip6tables -w -S "$guard_chain"; } >/dev/null 2>&1
}

# other_kubelet lists kubelets on this machine that are not this node's:
# then the KUBE-* chains and kubepods cgroups are not only ours to remove.
other_kubelet() {
  local p exe
  for p in /proc/[0-9]*; do
    [[ $(cat "$p/comm" 2>/dev/null) == kubelet ]] || continue
    exe=$(readlink "$p/exe" 2>/dev/null) || continue
    [[ $exe == "$kubenode/kubelet" ]] || echo "${p#/proc/} $exe"
  done
}

# leftovers lists anything of the node still on the machine after down:
# processes, mounts, interfaces, iptables chains, cgroups, directories.
# Empty output (exit 0) means down removed all of it.
leftovers() {
  use_tools
  local out
  out=$(list_leftovers)
  [[ -z $out ]] && return 0
  echo "$out"
  return 1
}

list_leftovers() {
  local d cmd table n
  for n in "$second_node" "$first_node" "$machine"; do
    use_node "$n"
    for d in containerd kubelet kube-proxy provisioner; do
      if pid_alive "$d"; then echo "process: $n's $d (pid $(cat "$run/$d.pid"))"; fi
    done
    [[ $n == "$machine" ]] || shim_pids | sed "s/^/shim of $n: pid /"
  done
  for n in "$second_node" "$first_node"; do
    if [[ -e /run/netns/$n ]]; then echo "network namespace: $n"; fi
    if ip link show "$(veth_of "$n")" >/dev/null 2>&1; then echo "interface: $(veth_of "$n")"; fi
  done
  if ip link show "$control_plane_bridge" >/dev/null 2>&1; then echo "interface: $control_plane_bridge"; fi
  if ip route show type blackhole | grep -qF "$node_range"; then echo "route: blackhole $node_range"; fi
  awk -v r="$cluster_run" -v s="$cluster_state" 'index($5, r) == 1 || index($5, s) == 1 { print "mount: " $5 }' /proc/self/mountinfo
  for cmd in iptables ip6tables; do
    command -v "$cmd" >/dev/null || continue
    for table in filter nat mangle raw; do
      "$cmd" -w -t "$table" -S 2>/dev/null | awk -v c="$cmd -t $table" -v g="$guard_chain" \
        '$1 == "-N" && ($2 ~ /^KUBE-/ || $2 == g) { print "iptables: " c " " $2 }'
    done
  done
  for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/*/"$second_node" "$cluster_run" "$cluster_state" "$KWOK_WORKDIR/clusters/$name" /run/containerd; do
    if [[ -e $d ]]; then echo "directory: $d"; fi
  done
}

status() {
  use_tools
  local d n
  for n in $(nodes); do
    use_node "$n"
    for d in containerd kubelet kube-proxy; do
      if pid_alive "$d"; then echo "$n $d: running (pid $(cat "$run/$d.pid"))"; else echo "$n $d: not running"; fi
    done
  done
  use_node "$machine"
  for d in kube-proxy provisioner; do
    if pid_alive "$d"; then echo "the machine's $d: running (pid $(cat "$run/$d.pid"))"; else echo "the machine's $d: not running"; fi
  done
  if api_ready; then "$kubectl" --kubeconfig "$kubeconfig" get nodes -o wide; else echo "API server: not ready"; fi
}

up() {
  require_root up
  deps
  "$tools" build etcd kube kwok kubenode containerd coredns
  use_tools
  local start=$SECONDS n
  use_node "$machine"
  network_up
  timed "control plane" control_plane_up
  for n in $(nodes); do
    use_node "$n"
    timed "$n: network" network_up
    timed "$n: containerd" containerd_up
    timed "$n: images" images_up
    timed "$n: kubelet" kubelet_up
    timed "$n: kube-proxy" kube_proxy_up
  done
  use_node "$machine"
  timed "the machine's kube-proxy" kube_proxy_up
  timed "cluster DNS" dns_up
  timed volumes storage_up
  log "nodes $(nodes | paste -sd' ') Ready; cluster $name up in $((SECONDS - start)) s"
  echo "export KUBECONFIG=$kubeconfig"
}

case ${1:-} in
  up) up ;;
  down)
    # make cluster-down calls this on every machine: with nothing of the
    # node here it has nothing to do, and needs no root.
    use_tools
    node_present || exit 0
    require_root down
    down ;;
  deps) require_root deps; deps ;;
  kubeconfig) echo "$kubeconfig" ;;
  status) status ;;
  leftovers) leftovers ;;
  operator) require_root operator; use_tools; shift; operator_up "$@" ;;
  ctr) require_root ctr; use_tools; shift; exec "$ctr" -a "$sock" -n k8s.io "$@" ;;
  ctr-on) require_root ctr-on; use_tools; use_node "${2:-}"; shift 2; exec "$ctr" -a "$sock" -n k8s.io "$@" ;;
  power)
    require_root power; use_tools; use_node "${3:-$second_node}"
    case ${2:-} in
      off) power_off ;;
      on) power_on ;;
      *) echo "usage: $0 power off|on [NODE]" >&2; exit 2 ;;
    esac ;;
  network)
    require_root network; use_tools; use_node "${3:-$second_node}"
    case ${2:-} in
      cut) network_cut ;;
      restore) network_restore ;;
      *) echo "usage: $0 network cut|restore [NODE]" >&2; exit 2 ;;
    esac ;;
  operator-tag) operator_tag ;;
  forget-images)
    require_root forget-images; use_tools
    for n in "$first_node" "$second_node"; do
      use_node "$n"
      pid_alive containerd && { echo "node $n runs: hack/node.sh down first" >&2; exit 1; }
      rm -rf "$(image_store)"; log "removed $(image_store)"
    done ;;
  apiserver)
    require_root apiserver; use_tools
    case ${2:-} in
      stop) apiserver_stop ;;
      start) apiserver_start ;;
      *) echo "usage: $0 apiserver stop|start" >&2; exit 2 ;;
    esac ;;
  kubelet)
    require_root kubelet; use_tools; use_node "${3:-$first_node}"
    case ${2:-} in
      stop) kubelet_stop ;;
      start) kubelet_start ;;
      *) echo "usage: $0 kubelet stop|start [NODE]" >&2; exit 2 ;;
    esac ;;
  *) echo "usage: $0 up | down | forget-images | deps | kubeconfig | status | leftovers | operator | ctr ARGS | ctr-on NODE ARGS | operator-tag | apiserver stop|start | kubelet stop|start [NODE] | power off|on [NODE] | network cut|restore [NODE]" >&2; exit 2 ;;
esac
