#!/usr/bin/env bash
# Installs what `make test` needs that Go does not bring: Debian packages
# (as root, through apt) and the pinned toolchain.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

need=()
command -v yamllint >/dev/null || need+=(yamllint)
command -v curl >/dev/null || need+=(curl)
# The seed 000 demo app is tested with Debian's Python and Flask.
/usr/bin/python3 -c 'import flask' 2>/dev/null || need+=(python3-flask)
# The Database controller's scripts are proven on Debian's PostgreSQL (15 on
# bookworm); the servers run as its postgres user.
compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null && id postgres >/dev/null 2>&1 || need+=(postgresql)
# The continuous archiving scripts are proven with Debian's Barman Cloud
# (barman-cli-cloud 3.4; boto3 is its S3 client).
command -v barman-cloud-wal-archive >/dev/null && /usr/bin/python3 -c 'import boto3' 2>/dev/null || need+=(barman-cli-cloud python3-boto3)
# The Pooler's PgBouncer is proven on Debian's (1.18 on bookworm).
[[ -x /usr/sbin/pgbouncer ]] || need+=(pgbouncer)
# A disk that takes no writes is an ext4 loop device frozen with fsfreeze.
command -v mkfs.ext4 >/dev/null || need+=(e2fsprogs)
command -v fsfreeze >/dev/null && command -v losetup >/dev/null || need+=(util-linux)
# The MySQL engine's scripts are proven on Debian's MariaDB (10.11 on bookworm).
command -v mariadbd >/dev/null || [[ -x /usr/sbin/mariadbd ]] && command -v mariadb >/dev/null || need+=(mariadb-server mariadb-client)
# The MySQL engine's row counting runs in the images' awk: gawk (MySQL's)
# and mawk (MariaDB's, and Debian's default) are both tested.
for p in gawk mawk; do command -v "$p" >/dev/null || need+=("$p"); done
# The JMX exporter's tests compile and run a real JVM (java, javac, jar).
command -v javac >/dev/null && command -v jar >/dev/null || need+=(openjdk-17-jdk-headless)
# The multi-host JDBC strings are proven with Debian's pgjdbc on that JDK.
[[ -e /usr/share/java/postgresql.jar ]] || need+=(libpostgresql-jdbc-java)
# A standby whose primary stops acknowledging its replies: iptables drops
# them on the loopback interface (pgtest.DropPackets).
dpkg-query -W -f '${Status}' iptables 2>/dev/null | grep -q 'ok installed' || need+=(iptables)
# The real node (e2e/node, hack/node.sh): runc, the CNI plugins, busybox
# for its test image (iptables, above, for kube-proxy too). DECKHAND_NODE=0
# (the fast part of make test alone) needs none of it.
node=${DECKHAND_NODE:-1}
if [[ $node != 0 ]]; then
  for p in runc containernetworking-plugins busybox-static; do
    dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || need+=("$p")
  done
fi
if [[ ${#need[@]} -gt 0 ]]; then
  echo ">> installing Debian packages: ${need[*]}" >&2
  if [[ $(id -u) -ne 0 ]]; then
    echo "need root to apt-get install ${need[*]}; install them and re-run" >&2
    exit 1
  fi
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >&2
fi
"$root/hack/tools.sh" build
# The object store the archiving tests run (versitygw, ~2 min cold). Not in
# tools.sh's default list: the local cluster and make run do not use it.
"$root/hack/tools.sh" build versitygw
# The node's own tools, built from source on a fresh machine (cold, on 2
# busy cores: kubenode ~2.5 min, containerd ~2 min, coredns ~6 min;
# docs/performance.md), cached like the others.
if [[ $node != 0 ]]; then
  "$root/hack/tools.sh" build kubenode containerd coredns
fi
