# The archiver sidecar of a server pod: serves the requests wal-handoff.sh
# (the server's archive_command) writes into the queue directory both
# containers mount, each with wal-archive.sh (Barman Cloud), one at a
# time, and answers <id>.done or <id>.failed (the end of wal-archive.sh's
# output: why).
#
# The environment: the store's settings (store.sh); PGDATA, the server's
# data directory, mounted here at the same path as in the server's
# container (wal-archive.sh records there that the archive was checked
# empty); ARCHIVE_QUEUE, the queue directory.
#
# It runs beside every server, primary or standby; only a primary asks
# (archive_mode = on archives nothing during recovery). Asked to stop
# (SIGTERM), it keeps answering while the server's postmaster.pid exists,
# for up to ARCHIVER_STOP_GRACE seconds (default 45): a server shutting
# down archives its last segments first.
set -eu
here=$(dirname "$0")
: "${ARCHIVE_QUEUE:?ARCHIVE_QUEUE is not set}" "${PGDATA:?PGDATA is not set}"
queue=$ARCHIVE_QUEUE
grace=${ARCHIVER_STOP_GRACE:-45}
mkdir -p "$queue"

# Settings that cannot work (a Secret not there yet) are said at once,
# but the archiver runs on and answers each request with the reason: a
# container that exits would take the pod, and the server, out of its
# Services. A Secret created later appears in its volume.
if ! err=$( (. "$here/store.sh" && trap store_cleanup EXIT && store_setup) 2>&1); then
  echo "deckhand: archiving cannot work until this is fixed (every segment fails, and PostgreSQL keeps it): $err" >&2
fi

stopping=0
trap 'stopping=1' TERM INT
trap 'rm -f "$queue/archiver-ready"' EXIT
: >"$queue/archiver-ready"
echo "deckhand: archiver ready: s3://${STORE_BUCKET:-}${STORE_PREFIX:+/${STORE_PREFIX%/}}/${STORE_SERVER:-} ${STORE_ENDPOINT:-(AWS S3)}" >&2

# answer moves a result into place in one step.
answer() {
  mv "$queue/.$1.res" "$queue/$1.$2"
}

ticks=0
deadline=
while :; do
  took=0
  for req in "$queue"/*.req; do
    [ -f "$req" ] || continue
    id=${req##*/}
    id=${id%.req}
    # Taken, unless wal-handoff.sh withdrew it just now.
    mv "$req" "$queue/$id.work" 2>/dev/null || continue
    wal=$(cat "$queue/$id.work") || { rm -f "$queue/$id.work"; continue; }
    rc=0
    out=$(cd "$PGDATA" && sh "$here/wal-archive.sh" "$wal" 2>&1) || rc=$?
    if [ "$rc" -eq 0 ]; then
      : >"$queue/.$id.res"
      answer "$id" done
      echo "deckhand: archived ${wal##*/}" >&2
    else
      printf '%s\n' "$out" | tail -n 20 >"$queue/.$id.res"
      answer "$id" failed
      printf 'deckhand: could not archive %s (wal-archive.sh exited %s):\n%s\n' "${wal##*/}" "$rc" "$out" >&2
    fi
    rm -f "$queue/$id.work"
    took=1
  done
  if [ "$stopping" = 1 ]; then
    [ -n "$deadline" ] || deadline=$(($(date +%s) + grace))
    if [ ! -f "$PGDATA/postmaster.pid" ] || [ "$(date +%s)" -ge "$deadline" ]; then
      exit 0
    fi
  fi
  [ "$took" = 1 ] || sleep 0.2
  # Answers nobody waits for any more (a request that timed out), once a
  # minute or so.
  ticks=$((ticks + 1))
  if [ $((ticks % 300)) -eq 0 ]; then
    find "$queue" -maxdepth 1 \( -name '*.done' -o -name '*.failed' \) -mmin +10 -exec rm -f {} + 2>/dev/null || true
  fi
done
