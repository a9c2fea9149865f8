# PostgreSQL's restore_command: fetches one WAL segment (or history file)
# from the object store with Barman Cloud: through the resident process
# (wal-resident.sh restore) whose directory WAL_RESTORE_RESIDENT names
# while it is alive, as in the archiver sidecar; else with
# barman-cloud-wal-restore.
#
#   restore_command = 'sh /path/to/wal-restore.sh %f %p'
#
# PostgreSQL reads exit status 1 as "not in the archive", the end of what
# can be replayed: recovery then ends (or promotes). Any other failure
# (the store unreachable, a download cut off, a credential refused) must
# not be read that way, or a server would promote early and lose what the
# archive holds after that point: it exits 126, which PostgreSQL treats
# as fatal, so recovery stops and is tried again when the server restarts.
set -eu
here=$(dirname "$0")
. "$here/store.sh"
# Settings that are wrong are not "the end of the archive" either.
store_fail() {
  echo "deckhand: $*" >&2
  exit 126
}
[ $# -eq 2 ] || store_fail "usage: wal-restore.sh <%f> <%p>"
trap store_cleanup EXIT
store_setup
rc=0
if resident_call "${WAL_RESTORE_RESIDENT:-}" "$1
$(absolute "$2")"; then
  rc=$resident_rc
else
  barman-cloud-wal-restore $store_endpoint "$store_url" "$STORE_SERVER" "$1" "$2" || rc=$?
fi
case $rc in
  0) exit 0 ;;
  1) exit 1 ;;
  *) echo "deckhand: cannot fetch $1 from $store_url/$STORE_SERVER (Barman Cloud's restore exited $rc); stopping recovery rather than ending it early" >&2
     exit 126 ;;
esac
