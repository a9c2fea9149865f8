# PostgreSQL's archive_command in a server pod: hands one WAL segment (or
# history file) to the archiver sidecar (archiver.sh, in an image that
# has Barman Cloud) through a directory both containers mount, and waits
# for its answer. It needs nothing but sh, cat, mv, rm and sleep, so it
# works in any PostgreSQL image, the official ones included.
#
#   archive_command = 'sh /deckhand/scripts/wal-handoff.sh <queue directory> %p'
#
# It writes <queue>/<file>.<id>.req holding the file's absolute path, then
# waits for <file>.<id>.done (exit 0) or <file>.<id>.failed (exit 1, with
# the archiver's reason on stderr, which PostgreSQL logs). No answer within
# ARCHIVE_HANDOFF_TIMEOUT seconds (default 300), or no archiver running
# (<queue>/archiver-ready absent): exit 1. On any exit but 0 PostgreSQL
# keeps the segment in pg_wal, counts a failure in pg_stat_archiver and
# tries again.
set -eu
fail() {
  echo "deckhand: $*" >&2
  exit 1
}
[ $# -eq 2 ] || fail "usage: wal-handoff.sh <queue directory> <%p>"
queue=$1
case $2 in
  /*) wal=$2 ;;
  *) wal=$(pwd)/$2 ;;
esac
name=${wal##*/}
timeout=${ARCHIVE_HANDOFF_TIMEOUT:-300}
case $timeout in
  '' | *[!0-9]*) fail "ARCHIVE_HANDOFF_TIMEOUT is '$timeout', not a number of seconds" ;;
esac
[ -f "$wal" ] || fail "cannot archive $name: $wal is not a file"
[ -f "$queue/archiver-ready" ] || fail "cannot archive $name: the archiver is not running (no $queue/archiver-ready)"

# The id is unique among the requests of this file: the shell's PID and
# the time.
id=$name.$$.$(date +%s)
printf '%s\n' "$wal" >"$queue/.$id.tmp"
mv "$queue/.$id.tmp" "$queue/$id.req"
# Five looks a second.
left=$((timeout * 5))
while [ "$left" -gt 0 ]; do
  if [ -f "$queue/$id.done" ]; then
    rm -f "$queue/$id.done"
    exit 0
  fi
  if [ -f "$queue/$id.failed" ]; then
    echo "deckhand: the archiver could not archive $name:" >&2
    cat "$queue/$id.failed" >&2 || true
    rm -f "$queue/$id.failed"
    exit 1
  fi
  sleep 0.2
  left=$((left - 1))
done
# Withdrawn if the archiver has not taken it yet; an answer that comes
# later is removed by the archiver.
rm -f "$queue/$id.req"
fail "the archiver did not answer for $name within ${timeout}s; PostgreSQL keeps it and tries again"
