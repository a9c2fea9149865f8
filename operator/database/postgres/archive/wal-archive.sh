# PostgreSQL's archive_command: ships one WAL segment (or history file) to
# the object store with Barman Cloud: through the resident process
# (wal-resident.sh archive) whose directory WAL_ARCHIVE_RESIDENT names
# while it is alive, as in the archiver sidecar; else with
# barman-cloud-wal-archive.
#
#   archive_command = 'sh /path/to/wal-archive.sh %p'
#
# It runs in the data directory, with the store's settings in the
# environment (store.sh). A non-zero exit leaves the segment in pg_wal and
# PostgreSQL tries again; pg_stat_archiver counts the failures.
#
# Before the first segment goes to a destination, the archive there must
# hold no WAL of that segment's timeline or a later one
# (barman-cloud-check-wal-archive --timeline): a second server pointed at
# another's archive is refused instead of mixing its WAL into it. The
# check is recorded in the data directory (deckhand-archive-checked, which
# names the destination), so it runs again when the destination changes;
# STORE_SKIP_EMPTY_CHECK=true skips it (a Database taking over its own
# archive, restored from it).
#
# ARCHIVE_AHEAD=true (the archiver shipping a segment before PostgreSQL
# asks for it): exit 3 without archiving while the check is not recorded,
# so that several uploads at once never each check an archive the others
# are filling.
set -eu
here=$(dirname "$0")
. "$here/store.sh"
[ $# -eq 1 ] || store_fail "usage: wal-archive.sh <%p>"
trap store_cleanup EXIT
store_setup

data=${PGDATA:-.}
checked="$data/deckhand-archive-checked"
destination="$store_url/$STORE_SERVER ${STORE_ENDPOINT:-}"
if [ "$(cat "$checked" 2>/dev/null || true)" != "$destination" ]; then
  [ "${ARCHIVE_AHEAD:-false}" != true ] || exit 3
  if [ "${STORE_SKIP_EMPTY_CHECK:-false}" != true ]; then
    # Only WAL of this file's timeline or a later one counts: a standby
    # promoted after the archive began (its data directory cloned before
    # the check was recorded) archives its new timeline's history file
    # first, and the WAL its old primary archived is of earlier timelines.
    name=${1##*/}
    case $name in
      [0-9A-F][0-9A-F][0-9A-F][0-9A-F][0-9A-F][0-9A-F][0-9A-F][0-9A-F]*) timeline=$((0x${name%"${name#????????}"})) ;;
      *) store_fail "$name is not a WAL segment or history file" ;;
    esac
    # Exit 1: the archive holds WAL already; 2: the store did not answer.
    rc=0
    barman-cloud-check-wal-archive $store_endpoint --timeline "$timeline" "$store_url" "$STORE_SERVER" || rc=$?
    case $rc in
      0) ;;
      1) store_fail "refusing to archive into $store_url/$STORE_SERVER: it already holds WAL of another server (set STORE_SKIP_EMPTY_CHECK=true only for a server restored from that archive, whose history it continues)" ;;
      *) store_fail "cannot check that $store_url/$STORE_SERVER is empty (barman-cloud-check-wal-archive exited $rc)" ;;
    esac
  fi
  printf '%s\n' "$destination" >"$checked.tmp"
  mv "$checked.tmp" "$checked"
fi

if resident_call "${WAL_ARCHIVE_RESIDENT:-}" "$(absolute "$1")"; then
  exit "$resident_rc"
fi
# shellcheck disable=SC2086 # the flags are single words or empty
barman-cloud-wal-archive $store_endpoint $store_compress "$store_url" "$STORE_SERVER" "$1"
