# The first half of a base backup's verification (the init container
# restore of its Job, in the archiver image; verify-base.sh, in the
# server's image, is the second):
#
#   archive  every WAL segment from the start of the base backup to the
#            end of the archive is in the store: for each segment number
#            in between, a segment of the backup's timeline or a later
#            one (a timeline switch writes the switch's segment on both);
#   restore  recover.sh restores the base backup BACKUP_ID into PGDATA,
#            with the settings that recover it to its own restore point
#            (RECOVERY_TARGET_NAME, named as the backup: base-backup.sh
#            made it right after the backup ended).
#
# A check that fails is the verification's result, not this container's
# failure: each check's outcome goes to RESULT_DIR (<check>.passed, or
# <check>.failed holding why), where verify-base.sh reports them, and the
# container exits 0 (the server's container then reports). It exits
# non-zero only when it cannot run at all.
#
# The environment: the store's settings of the archive (store.sh),
# BACKUP_ID, RECOVERY_TARGET_NAME, PGDATA, RESTORE_COMMAND (recover.sh's),
# RESULT_DIR.
set -eu
here=$(dirname "$0")
. "$here/store.sh"
: "${BACKUP_ID:?BACKUP_ID is not set}" "${RESULT_DIR:?RESULT_DIR is not set}"
mkdir -p "$RESULT_DIR"
rm -f "$RESULT_DIR"/archive.* "$RESULT_DIR"/restore.*

# result CHECK OUTPUT_FILE RC [WHAT]: the check's outcome from its exit
# status and output. Why it failed: Barman's last error, else the last
# line when it is deckhand's own, else the last lines; after WHAT.
result() {
  if [ "$3" = 0 ]; then
    : >"$RESULT_DIR/$1.passed"
    return
  fi
  why=$(grep 'ERROR' "$2" | tail -n 1 | sed 's/^.*ERROR:* *//')
  [ -n "$why" ] || why=$(tail -n 1 "$2" | sed -n 's/^deckhand: //p')
  [ -n "$why" ] || why=$(tail -n 3 "$2")
  printf '%s%s\n' "${4:-}" "${why:-exited $3 without a word}" >"$RESULT_DIR/$1.failed"
}

out=$(mktemp)
trap 'rm -f "$out"; store_cleanup' EXIT
store_setup

# shellcheck disable=SC2086
rc=0
python3 - $store_endpoint "$store_url" "$STORE_SERVER" "$BACKUP_ID" >"$out" 2>&1 <<'PY' || rc=$?
import sys

from barman import xlog
from barman.clients.cloud_cli import UrlArgumentType, create_argument_parser
from barman.cloud import CloudBackupCatalog
from barman.cloud_providers import get_cloud_interface

def fail(msg):
    print("deckhand: " + msg)
    sys.exit(1)

backup_id = sys.argv.pop()
parser, _, _ = create_argument_parser(description="deckhand", source_or_destination=UrlArgumentType.source)
config = parser.parse_args(sys.argv[1:])
where = "%s/%s" % (config.source_url, config.server_name)
cloud = get_cloud_interface(config)
if not cloud.test_connectivity():
    fail("cannot reach the store of %s" % where)
catalog = CloudBackupCatalog(cloud, config.server_name)
backup = catalog.get_backup_list().get(backup_id)
if backup is None:
    fail("%s holds no base backup %s" % (where, backup_id))
size = backup.xlog_segment_size or xlog.DEFAULT_XLOG_SEG_SIZE
per_file = xlog.xlog_segments_per_file(size)

def segno(name):
    tli, log, seg = xlog.decode_segment_name(name)
    return tli, log * per_file + seg

held = {}
for name in catalog.get_wal_paths():
    if xlog.is_wal_file(name) and not xlog.is_partial_file(name):
        tli, n = segno(name)
        held.setdefault(n, set()).add(tli)
first_tli, first = segno(backup.begin_wal)
last = max(held) if held else first
missing = [n for n in range(first, last + 1) if not any(t >= first_tli for t in held.get(n, ()))]
if missing:
    names = [xlog.encode_segment_name(first_tli, n // per_file, n % per_file) for n in missing[:3]]
    fail("the archive lacks WAL segment %s%s (%d of the %d segments from base backup %s's start at %s to the archive's end): no recovery from this backup reaches past it" % (
        ", ".join(names), " and more" if len(missing) > 3 else "", len(missing), last - first + 1, backup_id, backup.begin_wal))
print("deckhand: the archive holds every WAL segment from %s (the start of base backup %s) to the end, %d in all" % (backup.begin_wal, backup_id, last - first + 1))
PY
cat "$out" >&2
result archive "$out" "$rc"

rc=0
sh "$here/recover.sh" >"$out" 2>&1 || rc=$?
cat "$out" >&2
result restore "$out" "$rc" "restoring base backup $BACKUP_ID ($store_url/$STORE_SERVER/base/$BACKUP_ID/): "
