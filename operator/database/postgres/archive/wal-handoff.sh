# PostgreSQL's archive_command and restore_command in a server pod: hands
# one WAL segment (or history file) to the archiver sidecar (archiver.sh,
# in an image that has Barman Cloud) through a directory both containers
# mount, and waits for its answer. It needs nothing but sh, cat, mv, rm
# and sleep, so it works in any PostgreSQL image, the official ones
# included.
#
#   archive_command = 'sh /deckhand/scripts/wal-handoff.sh <queue directory> %p'
#   restore_command = 'sh /deckhand/scripts/wal-handoff.sh --restore <queue directory> %f %p'
#
# Archiving: it writes <queue>/<file>.<id>.req holding the file's absolute
# path, then waits for <file>.<id>.done (exit 0) or <file>.<id>.failed
# (exit 1, with the archiver's reason on stderr, which PostgreSQL logs).
# No answer within ARCHIVE_HANDOFF_TIMEOUT seconds (default 300), or no
# archiver running (<queue>/archiver-ready absent): exit 1. On any exit
# but 0 PostgreSQL keeps the segment in pg_wal, counts a failure in
# pg_stat_archiver and tries again.
#
# Restoring (a server recovering from the archive it is told of): it
# writes <queue>/<file>.<id>.restore holding the file's name and the
# absolute path to write it to, and waits for .done (exit 0), .missing
# (exit 1: not in the archive, which PostgreSQL reads as the end of what
# can be replayed) or .failed (exit 126). Anything that is not a sure
# "not in the archive" (the store unreachable, no archiver within the
# timeout) exits 126, which PostgreSQL treats as fatal: recovery stops
# and is tried again at the next start, rather than ending early and
# losing what the archive holds after that point. An archiver that is
# not running yet (the sidecar starts beside the server) is waited for.
set -eu
mode=archive
if [ "${1:-}" = --restore ]; then
  mode=restore
  shift
fi
fail() {
  echo "deckhand: $*" >&2
  # Never "not in the archive" by mistake.
  [ "$mode" = archive ] || exit 126
  exit 1
}
timeout=${ARCHIVE_HANDOFF_TIMEOUT:-300}
case $timeout in
  '' | *[!0-9]*) fail "ARCHIVE_HANDOFF_TIMEOUT is '$timeout', not a number of seconds" ;;
esac
# Five looks a second.
left=$((timeout * 5))

# answer ID VERB: waits for the archiver's answer to the request ID and
# prints it: done, missing or failed (the archiver's reason on stderr).
# None within the timeout: the request is withdrawn if the archiver has
# not taken it yet (an answer that comes later is removed by the
# archiver), and nothing is printed.
answer() {
  while [ "$left" -gt 0 ]; do
    for a in done missing failed; do
      [ -f "$queue/$1.$a" ] || continue
      if [ "$a" = failed ]; then
        echo "deckhand: the archiver could not $2 $name:" >&2
        cat "$queue/$1.failed" >&2 || true
      fi
      rm -f "$queue/$1.$a"
      echo "$a"
      return 0
    done
    sleep 0.2
    left=$((left - 1))
  done
  rm -f "$queue/$1.req" "$queue/$1.restore"
}

# request ID KIND LINES...: writes the request ID.KIND holding LINES,
# aside first and renamed into place, so the archiver never reads half of
# it. The id is unique among the requests of one file: the shell's PID
# and the time.
request() {
  id=$1
  kind=$2
  shift 2
  printf '%s\n' "$@" >"$queue/.$id.tmp"
  mv "$queue/.$id.tmp" "$queue/$id.$kind"
}

if [ "$mode" = restore ]; then
  [ $# -eq 3 ] || fail "usage: wal-handoff.sh --restore <queue directory> <%f> <%p>"
  queue=$1
  name=$2
  case $3 in
    /*) into=$3 ;;
    *) into=$(pwd)/$3 ;;
  esac
  while [ ! -f "$queue/archiver-ready" ]; do
    [ "$left" -gt 0 ] || fail "cannot restore $name: the archiver did not start within ${timeout}s (no $queue/archiver-ready)"
    sleep 0.2
    left=$((left - 1))
  done
  request "$name.$$.$(date +%s)" restore "$name" "$into"
  case $(answer "$id" restore) in
    done) exit 0 ;;
    missing) exit 1 ;;
    failed) exit 126 ;;
  esac
  fail "the archiver did not answer for $name within ${timeout}s; stopping recovery rather than ending it early"
fi

[ $# -eq 2 ] || fail "usage: wal-handoff.sh <queue directory> <%p>"
queue=$1
case $2 in
  /*) wal=$2 ;;
  *) wal=$(pwd)/$2 ;;
esac
name=${wal##*/}
[ -f "$wal" ] || fail "cannot archive $name: $wal is not a file"
[ -f "$queue/archiver-ready" ] || fail "cannot archive $name: the archiver is not running (no $queue/archiver-ready)"
request "$name.$$.$(date +%s)" req "$wal"
case $(answer "$id" archive) in
  done) exit 0 ;;
  failed) exit 1 ;;
esac
fail "the archiver did not answer for $name within ${timeout}s; PostgreSQL keeps it and tries again"
