#!/usr/bin/env bash
# Builds the real node's images from this machine's Debian packages and the
# repository's sources, as OCI archives for `ctr images import`, cached
# outside the repository keyed by name and version (no registry is
# reachable here, so nothing is pulled).
#
#   hack/node/images.sh build [image...]  build what is missing (default: all)
#   hack/node/images.sh archive <image>   print an image's archive path
#   hack/node/images.sh ref <image>       print an image's reference
#   hack/node/images.sh list              print the images' names, one a line (what hack/node.sh up imports)
#   hack/node/images.sh agent-jar         build the JMX stand-in agent jar, print its path
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cache=${DECKHAND_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/deckhand}
# The node's images: the one list, which hack/node.sh up builds and imports.
images=(pause busybox coredns demo-flask postgres mariadb jdk-app archiver store pgbouncer)

# candidate prints the version of a package that apt would install.
# apt-cache reads every package list (0.6 s of CPU a call), and the node
# tests ask for the images' references dozens of times a run, so the
# answers are kept, keyed by the package lists (apt-get update rewrites
# them).
candidate() {
  local stamp memo
  stamp=$(stat -c '%n %Y %s' /var/lib/apt/lists/*Packages* 2>/dev/null | sha256sum | cut -c1-12)
  memo=$cache/apt-candidates/$stamp-$1
  if [[ ! -s $memo ]]; then
    mkdir -p "$cache/apt-candidates"
    apt-cache policy "$1" | awk '/Candidate:/ {print $2}' >"$memo.$$"
    mv "$memo.$$" "$memo"
  fi
  cat "$memo"
}

version_of() {
  case $1 in
    # the sandbox: hack/node/pause, versioned by its source's hash
    pause) echo "0.1-$(sha256sum "$root/hack/node/pause/main.go" | cut -c1-12)" ;;
    # busybox: Debian's busybox-static package version
    # coredns: the version hack/tools.sh builds
    coredns) basename "$("$root/hack/tools.sh" dir coredns)" | sed 's/^coredns-v//' ;;
    # store: the versitygw version hack/tools.sh builds
    store) basename "$("$root/hack/tools.sh" dir versitygw)" | sed 's/^versitygw-v//' ;;
    # seed 000's Flask app: the chart's demo tag, then Debian's python3-flask
    # version and the app's hash, so either change rebuilds it
    demo-flask) echo "0.1.0-flask$(candidate python3-flask | sed 's/[+~:]/-/g')-$(content_hash "$root/demo/flask/app")" ;;
    busybox) dpkg-query -W -f '${Version}' busybox-static 2>/dev/null | sed 's/^[0-9]*://; s/[+~]/-/g' ;;
    # postgres: PostgreSQL's own version from Debian's postgresql-15
    # (15.20-0+deb12u1 -> 15.20), as the official image's tags, so the
    # engine reads the major version from the tag
    postgres) candidate postgresql-15 | sed 's/-.*//' ;;
    # mariadb: MariaDB's version from Debian's mariadb-server
    # (1:10.11.19-0+deb12u1 -> 10.11.19), as the official image's tags
    mariadb) candidate mariadb-server | sed 's/^[0-9]*://; s/-.*//' ;;
    # archiver: Barman Cloud's version from Debian's barman-cli-cloud
    # (3.4.0-1 -> 3.4.0), as the operator's default archiver image's tag
    archiver) candidate barman-cli-cloud | sed 's/^[0-9]*://; s/-.*//' ;;
    # pgbouncer: PgBouncer's version from Debian's pgbouncer
    # (1.18.0-1+deb12u1 -> 1.18.0), as the official images' tags
    pgbouncer) candidate pgbouncer | sed 's/^[0-9]*://; s/-.*//' ;;
    # jdk-app: the JDK's version from Debian's openjdk-17-jre-headless
    # (17.0.21.1+2-1~deb12u1 -> 17.0.21.1), then the app's hash
    jdk-app) echo "$(candidate openjdk-17-jre-headless | sed 's/+.*//')-app$(sha256sum "$root/hack/node/jdk-app/App.java" | cut -c1-8)" ;;
  esac
}

# content_hash is a short hash of the files under a directory, their names
# and contents only: the same in every checkout (a tar of it would carry
# each checkout's modification times and owners, and give another tag).
content_hash() {
  (cd "$1" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum) | sha256sum | cut -c1-8
}

ref_of() { echo "deckhand-local/$1:$(version_of "$1")"; }
# recipe_of names a revision of how an image is built, for the images
# whose build changed without a change of version: their archives are
# rebuilt, their references (what the tests and the chart's values name)
# stay. Raise it when a rootfs function changes what it puts in an image.
recipe_of() {
  case $1 in
    demo-flask | archiver) echo -r2 ;; # Python's bytecode compiled in (compile_python)
  esac
}
archive_of() { echo "$cache/node-images/$1-$(version_of "$1")$(recipe_of "$1").tar"; }

# rootfs_pause: only the static sandbox binary.
rootfs_pause() {
  local dir=$1
  mkdir -p "$dir"
  (cd "$root" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$dir/pause" ./hack/node/pause)
  set -- --entrypoint /pause --user 65535:65535
  image_args=("$@")
}

# rootfs_busybox: Debian's static busybox with its applets linked in /bin.
rootfs_busybox() {
  local dir=$1 applet
  mkdir -p "$dir"/{bin,etc,tmp,root}
  chmod 1777 "$dir/tmp"
  cp /bin/busybox "$dir/bin/busybox"
  for applet in $("$dir/bin/busybox" --list); do
    [[ -e $dir/bin/$applet ]] || ln -s busybox "$dir/bin/$applet"
  done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$dir/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$dir/etc/group"
  image_args=(--cmd /bin/sh)
}

# rootfs_coredns: CoreDNS's static binary (hack/tools.sh build coredns).
rootfs_coredns() {
  local dir=$1
  "$root/hack/tools.sh" build coredns
  mkdir -p "$dir"
  cp "$("$root/hack/tools.sh" dir coredns)/coredns" "$dir/coredns"
  image_args=(--entrypoint /coredns --user 65532:65532)
}

# rootfs_store: versitygw's static binary (hack/tools.sh build
# versitygw), the S3-compatible object store that Databases archive into
# on the node: one process over a directory, where bucket/key is a file.
# Runs as 65532; the caller gives the port, the certificate and the keys.
rootfs_store() {
  local dir=$1
  "$root/hack/tools.sh" build versitygw
  mkdir -p "$dir/tmp"
  chmod 1777 "$dir/tmp"
  cp "$("$root/hack/tools.sh" dir versitygw)/versitygw" "$dir/versitygw"
  image_args=(--entrypoint /versitygw --user 65532:65532)
}

# rootfs_demo_flask: seed 000's Flask app (demo/flask/app) on Debian's
# python3-flask: every package of its dependency closure, downloaded from
# this machine's apt sources and unpacked (no pip: no package index is
# reachable). Runs as 10001 on port 8080, as demo/flask/Dockerfile does.
rootfs_demo_flask() {
  local dir=$1 debs pkgs deb
  debs=$cache/node-images/debs
  mkdir -p "$dir/app" "$dir/tmp" "$debs"
  chmod 1777 "$dir/tmp"
  pkgs=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
    --no-replaces --no-enhances python3-flask | grep -E '^[a-z0-9]' | sort -u)
  # shellcheck disable=SC2086 # one package a word
  (cd "$debs" && apt-get download -qq $pkgs >&2)
  for deb in $pkgs; do
    local files=("$debs/${deb}_"*.deb)
    dpkg-deb -x "${files[0]}" "$dir"
  done
  compile_python "$dir"
  cp -r "$root/demo/flask/app/." "$dir/app/"
  image_args=(--user 10001:10001 --workdir /app --env PYTHONDONTWRITEBYTECODE=1
    --cmd python3 --cmd -m --cmd flask --cmd --app --cmd main --cmd run --cmd --host --cmd 0.0.0.0 --cmd --port --cmd 8080)
}

# debian_closure downloads the packages named and their dependency closure
# (apt-cache depends --recurse) from this machine's apt sources into the
# cache and unpacks them into a root filesystem, as dpkg would without
# running maintainer scripts. Extra arguments after -- are packages left
# out of the closure.
debian_closure() {
  local dir=$1 debs pkgs deb skip=() files
  shift
  local want=()
  while [[ $# -gt 0 && $1 != -- ]]; do want+=("$1"); shift; done
  [[ ${1:-} == -- ]] && { shift; skip=("$@"); }
  debs=$cache/node-images/debs
  mkdir -p "$dir" "$debs"
  pkgs=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
    --no-replaces --no-enhances "${want[@]}" | grep -E '^[a-z0-9]' | sort -u |
    grep -vxF -f <(printf '%s\n' "${skip[@]}" ""))
  # shellcheck disable=SC2086 # one package a word
  (cd "$debs" && apt-get download -qq $pkgs >&2)
  for deb in $pkgs; do
    files=("$debs/${deb}_"*.deb)
    dpkg-deb -x "${files[0]}" "$dir"
  done
}

# compile_python compiles every Python module of a root filesystem to
# bytecode, as Debian's py3compile does in the packages' postinst scripts,
# which unpacking skips. Without it each Python start compiled every module
# it imported (its users cannot write __pycache__ into the image): a Barman
# Cloud command, once per archived WAL segment, used 1.1 s of CPU to
# import boto3 instead of 0.25 s. unchecked-hash: an image never changes,
# so Python need not compare each module with its source at import. The
# image's own interpreter compiles (chroot), so the bytecode is its
# version's.
compile_python() {
  local dir=$1 py
  py=$(cd "$dir/usr/bin" && ls python3.[0-9]* | grep -E '^python3\.[0-9]+$' | head -1)
  [[ -n $py ]] || { echo "no Python interpreter in $dir/usr/bin" >&2; return 1; }
  chroot "$dir" "/usr/bin/$py" -m compileall -q --invalidation-mode unchecked-hash \
    "/usr/lib/$py" /usr/lib/python3/dist-packages >/dev/null
}

# accounts writes the image's /etc/passwd and /etc/group: root, the one
# user the image runs as (name, uid = gid, its GECOS field, home and
# shell), and nobody.
accounts() {
  local dir=$1 name=$2 id=$3 gecos=$4 home=$5 shell=$6
  printf 'root:x:0:0:root:/root:/bin/sh\n%s:x:%s:%s:%s:%s:%s\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n' \
    "$name" "$id" "$id" "$gecos" "$home" "$shell" >"$dir/etc/passwd"
  printf 'root:x:0:\n%s:x:%s:\nnogroup:x:65534:\n' "$name" "$id" >"$dir/etc/group"
}

# rootfs_postgres: PostgreSQL 15 from Debian's postgresql-15 and its
# dependency closure, laid out as the official postgres image (Debian
# flavour) which the Database engine's scripts rely on: the server user
# postgres with UID/GID 999, the server's binaries on PATH
# (/usr/lib/postgresql/15/bin), PGDATA /var/lib/postgresql/data, sh and
# the few tools the scripts call (coreutils, grep, sed, awk). No
# entrypoint: the engine runs its own scripts. Locales are left out: the
# engine's initdb uses --locale=C.
rootfs_postgres() {
  local dir=$1
  debian_closure "$dir" postgresql-15 postgresql-client-15 dash coreutils grep sed mawk findutils gzip \
    -- locales locales-all
  # /bin/sh and awk: what update-alternatives and dash's postinst would link
  [[ -e $dir/bin/sh ]] || ln -s dash "$dir/bin/sh"
  [[ -e $dir/usr/bin/awk ]] || ln -s mawk "$dir/usr/bin/awk"
  mkdir -p "$dir/tmp" "$dir/var/lib/postgresql/data" "$dir/var/run/postgresql" "$dir/etc"
  chmod 1777 "$dir/tmp"
  accounts "$dir" postgres 999 'PostgreSQL administrator' /var/lib/postgresql /bin/sh
  printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$dir/etc/nsswitch.conf"
  # as the official image's Dockerfile: PGDATA and the socket directory
  # are the server user's, 1777 and 3777, so another UID can use them too
  chown -R 999:999 "$dir/var/lib/postgresql" "$dir/var/run/postgresql"
  chmod 1777 "$dir/var/lib/postgresql/data"
  chmod 3777 "$dir/var/run/postgresql"
  image_args=(--user 999:999 --env PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
    --env PGDATA=/var/lib/postgresql/data --env LANG=C.UTF-8 --cmd postgres)
}

# rootfs_archiver: the archiver sidecar of a Database that archives WAL
# (spec.backup.storage.objectStore): Barman Cloud (barman-cli-cloud, with
# python3-boto3) and the PostgreSQL client (psql, pg_waldump for
# recover.sh) from Debian's packages and their closure, sh and the tools
# the archiving scripts call, the system CAs. The scripts come from the
# Database's scripts ConfigMap, not from the image. Runs as 999 (the
# servers' user, who owns the data directory the sidecar reads).
rootfs_archiver() {
  local dir=$1
  debian_closure "$dir" barman-cli-cloud python3-boto3 postgresql-client-15 postgresql-15 dash coreutils grep sed mawk \
    findutils gzip bzip2 ca-certificates -- locales locales-all
  [[ -e $dir/bin/sh ]] || ln -s dash "$dir/bin/sh"
  [[ -e $dir/usr/bin/awk ]] || ln -s mawk "$dir/usr/bin/awk"
  compile_python "$dir"
  # what update-ca-certificates (ca-certificates' postinst) would write
  mkdir -p "$dir/etc/ssl/certs"
  cat "$dir"/usr/share/ca-certificates/mozilla/*.crt >"$dir/etc/ssl/certs/ca-certificates.crt"
  mkdir -p "$dir/tmp" "$dir/etc"
  chmod 1777 "$dir/tmp"
  accounts "$dir" postgres 999 'PostgreSQL administrator' /tmp /bin/sh
  printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$dir/etc/nsswitch.conf"
  # pg_waldump (recover.sh) is in the server package's directory
  image_args=(--user 999:999 --env PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
    --env LANG=C.UTF-8 --env HOME=/tmp --cmd sh)
}

# rootfs_pgbouncer: the Pooler's PgBouncer from Debian's pgbouncer: its
# binary and the closure of the libraries it links (c-ares, libevent,
# OpenSSL, PAM, libsystemd) and the system CAs: with client TLS on and no
# client_tls_ca_file, PgBouncer 1.18 loads
# /etc/ssl/certs/ca-certificates.crt and will not start without it. The
# package itself is unpacked alone: it
# depends on postgresql-common (perl, the cluster wrappers) and lsb-base
# for its init script, which the binary never uses. No shell. Runs as
# 999:999 (postgres, as Debian runs it) with `pgbouncer
# /etc/pgbouncer/pgbouncer.ini` in the foreground, logging to stderr; the
# Pooler mounts the ini, the auth file and the certificates. Stopped with
# SIGINT, PgBouncer 1.18's safe shutdown (PAUSE, then exit once every
# server connection is back in its pool); SIGTERM would drop every client
# at once.
rootfs_pgbouncer() {
  local dir=$1 debs files
  debian_closure "$dir" libc-ares2 libevent-2.1-7 libssl3 libpam0g libsystemd0 ca-certificates
  # what update-ca-certificates (ca-certificates' postinst) would write
  mkdir -p "$dir/etc/ssl/certs"
  cat "$dir"/usr/share/ca-certificates/mozilla/*.crt >"$dir/etc/ssl/certs/ca-certificates.crt"
  debs=$cache/node-images/debs
  (cd "$debs" && apt-get download -qq pgbouncer >&2)
  files=("$debs/pgbouncer_"*.deb)
  dpkg-deb -x "${files[0]}" "$dir"
  # the package's sample configuration and init scripts: the Pooler's own
  # ini is mounted over /etc/pgbouncer
  rm -rf "$dir/etc/pgbouncer" "$dir/etc/init.d" "$dir/etc/default" "$dir/etc/logrotate.d" "$dir/lib/systemd"
  mkdir -p "$dir/tmp" "$dir/etc/pgbouncer"
  chmod 1777 "$dir/tmp"
  accounts "$dir" postgres 999 'PostgreSQL administrator' /nonexistent /usr/sbin/nologin
  printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$dir/etc/nsswitch.conf"
  image_args=(--user 999:999 --entrypoint /usr/sbin/pgbouncer --cmd /etc/pgbouncer/pgbouncer.ini --stop-signal SIGINT)
}

# rootfs_mariadb: MariaDB from Debian's mariadb-server and mariadb-client
# and their closure, laid out as the official mariadb image where the
# MySQL engine relies on it: the mysql user with UID/GID 999, mariadbd,
# mariadb, mariadb-dump, mariadb-admin and mariadb-install-db on PATH, the
# data in /var/lib/mysql, the socket directory /var/run/mysqld, sh. No
# entrypoint: the engine runs its own scripts.
rootfs_mariadb() {
  local dir=$1
  debian_closure "$dir" mariadb-server mariadb-client dash coreutils grep sed mawk findutils gzip hostname \
    -- locales locales-all
  [[ -e $dir/bin/sh ]] || ln -s dash "$dir/bin/sh"
  [[ -e $dir/usr/bin/awk ]] || ln -s mawk "$dir/usr/bin/awk"
  mkdir -p "$dir/tmp" "$dir/var/lib/mysql" "$dir/var/run/mysqld" "$dir/etc"
  chmod 1777 "$dir/tmp"
  accounts "$dir" mysql 999 'MySQL Server' /nonexistent /bin/false
  printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$dir/etc/nsswitch.conf"
  # as the official image: the data and socket directories are mysql's
  # (the socket's 0777, so another UID can use it too)
  chown -R 999:999 "$dir/var/lib/mysql" "$dir/var/run/mysqld"
  chmod 0777 "$dir/var/run/mysqld"
  image_args=(--user 999:999 --env LANG=C.UTF-8 --cmd mariadbd)
}

# rootfs_jdk_app: a JDK 17 application (hack/node/jdk-app/App.java, a small
# HTTP server on 8080, compiled here with the host's javac for release 17)
# on Debian's openjdk-17-jre-headless and its closure (fonts and X11 left
# out: the JVM runs headless), with sh and coreutils, which the JMX
# exporter controller's exec needs (sh, head, ls, uname), and util-linux
# (setpriv, for an entrypoint that drops from root to the app's user). Runs as
# 10001:10001 with the default capabilities, like most application images;
# /tmp is writable for HotSpot's attach socket and hsperfdata.
rootfs_jdk_app() {
  local dir=$1 java_home
  debian_closure "$dir" openjdk-17-jre-headless dash coreutils util-linux \
    -- fonts-croscore fonts-dejavu-core fonts-freefont-otf fonts-freefont-ttf fonts-liberation \
    fonts-liberation2 fonts-texgyre fonts-urw-base35 ttf-bitstream-vera xfonts-encodings xfonts-utils \
    x11-common cdebconf libdebian-installer4 libnewt0.52 libslang2 libtextwrap1
  [[ -e $dir/bin/sh ]] || ln -s dash "$dir/bin/sh"
  # /usr/bin/java: what update-alternatives would link
  java_home=$(cd "$dir" && echo usr/lib/jvm/java-17-openjdk-*)
  [[ -x $dir/$java_home/bin/java ]] || { echo "no java in $dir/$java_home" >&2; return 1; }
  ln -sf "/$java_home/bin/java" "$dir/usr/bin/java"
  mkdir -p "$dir/tmp" "$dir/app" "$dir/etc" "$dir/home/app"
  chmod 1777 "$dir/tmp"
  javac --release 17 -d "$dir/app" "$root/hack/node/jdk-app/App.java"
  chown 10001:10001 "$dir/home/app"
  accounts "$dir" app 10001 'Java application' /home/app /bin/sh
  image_args=(--user 10001:10001 --workdir /app --env "JAVA_HOME=/$java_home" --env LANG=C.UTF-8
    --cmd java --cmd -Xmx64m --cmd -XX:+UseSerialGC --cmd -XX:TieredStopAtLevel=1 --cmd -cp --cmd /app --cmd App)
}

build_one() {
  local name=$1 out work
  out=$(archive_of "$name")
  [[ -f $out ]] && return 0
  case $name in
    busybox) dpkg-query -W busybox-static >/dev/null 2>&1 || { echo "busybox-static is not installed (hack/node.sh deps)" >&2; return 1; } ;;
  esac
  echo ">> building image $(ref_of "$name")" >&2
  mkdir -p "$cache/node-images"
  work=$(mktemp -d)
  image_args=()
  "rootfs_${name//-/_}" "$work/rootfs"
  (cd "$root" && go run ./hack/node/rootfsimage --rootfs "$work/rootfs" --name "$(ref_of "$name")" \
    --out "$out.tmp" "${image_args[@]}")
  mv "$out.tmp" "$out"
  rm -rf "$work"
}

# agent_jar builds the JMX exporter's test stand-in agent
# (operator/jmxexporter/jvm/jvmtest/java/StandInAgent*.java, which behaves
# as upstream 1.0.1 where the operator relies on it) into a jar, cached by
# its sources' hash, and prints its path. hack/node.sh operator puts it in
# the node's operator image: upstream's jar is on Maven Central, which this
# machine cannot reach.
agent_jar() {
  local src=$root/operator/jmxexporter/jvm/jvmtest/java hash out work
  hash=$(cat "$src"/StandInAgent*.java | sha256sum | cut -c1-12)
  out=$cache/node-images/stand-in-agent-$hash.jar
  if [[ ! -f $out ]]; then
    mkdir -p "$cache/node-images"
    work=$(mktemp -d)
    javac --release 17 -d "$work/classes" "$src"/StandInAgent*.java
    # the manifest jvmtest writes: the agent class for -javaagent and attach
    printf 'Agent-Class: StandInAgent\nPremain-Class: StandInAgent\n' >"$work/MANIFEST.MF"
    (cd "$work/classes" && jar cfm "$work/agent.jar" "$work/MANIFEST.MF" StandInAgent*.class)
    mv "$work/agent.jar" "$out"
    rm -rf "$work"
  fi
  echo "$out"
}

case ${1:-build} in
  build)
    shift || true
    [[ $# -gt 0 ]] || set -- "${images[@]}"
    for i in "$@"; do build_one "$i"; done ;;
  archive) archive_of "$2" ;;
  ref) ref_of "$2" ;;
  list) printf '%s\n' "${images[@]}" ;;
  agent-jar) agent_jar ;;
  *) echo "usage: $0 build [image...] | archive <image> | ref <image> | list | agent-jar" >&2; exit 2 ;;
esac
