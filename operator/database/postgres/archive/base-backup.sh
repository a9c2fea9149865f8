# A physical base backup of the server into the object store, with
# barman-cloud-backup, then a marker row and a named restore point right
# after it, so a restore of this backup can be recovered to a known point
# and checked (the marker row must be there).
#
# The environment: the store's settings (store.sh); the server through
# libpq's PGHOST, PGPORT, PGUSER, PGPASSWORD (a superuser); BACKUP_NAME,
# the backup's name, which is also the restore point's and the marker
# row's (deckhand.backup_markers in the postgres database);
# BACKUP_JOBS, the parallel uploads (default 2). It reads the server's
# data directory, so it runs where that is mounted.
#
# It prints what it made, one key=value a line: backup_id, backup_name,
# begin_lsn, end_lsn, begin_time, end_time (UTC, as barman records them),
# timeline, restore_point_lsn.
#
# Run again with the same name (a retried Job), it makes no second backup:
# it finishes what the first run left undone.
set -eu
here=$(dirname "$0")
. "$here/store.sh"
: "${BACKUP_NAME:?BACKUP_NAME is not set}"
case $BACKUP_NAME in
  *[!A-Za-z0-9._-]*) store_fail "BACKUP_NAME '$BACKUP_NAME' may hold only letters, digits, '.', '_' and '-'" ;;
esac
trap store_cleanup EXIT
store_setup
# barman records the times the server reports, in the session's time
# zone: UTC, so they are read back without a zone.
export PGTZ=UTC

# backup_info prints the DONE backup named BACKUP_NAME as key=value lines,
# nothing when there is none.
backup_info() {
  barman-cloud-backup-list $store_endpoint --format json "$store_url" "$STORE_SERVER" | python3 -c '
import json, sys
name = sys.argv[1]
for b in json.load(sys.stdin)["backups_list"]:
    if b.get("backup_name") == name and b.get("status") == "DONE":
        for k, v in (("backup_id", b["backup_id"]), ("backup_name", name),
                     ("begin_lsn", b["begin_xlog"]), ("end_lsn", b["end_xlog"]),
                     ("begin_time", b["begin_time"]), ("end_time", b["end_time"]),
                     ("timeline", b["timeline"])):
            print("%s=%s" % (k, v))
        break
' "$BACKUP_NAME"
}

info=$(backup_info)
if [ -n "$info" ]; then
  echo "deckhand: backup $BACKUP_NAME is in the store already" >&2
else
  # shellcheck disable=SC2086
  barman-cloud-backup $store_endpoint $store_compress --immediate-checkpoint \
    --jobs "${BACKUP_JOBS:-2}" --name "$BACKUP_NAME" "$store_url" "$STORE_SERVER"
  info=$(backup_info)
  [ -n "$info" ] || store_fail "barman-cloud-backup ended, but the store lists no finished backup named $BACKUP_NAME"
fi

# The marker row commits before the restore point is made: recovered to
# the point, a server holds the row. The row then records the point's LSN
# (on the source only: that update comes after the point). The switch
# sends the restore point's segment to the archive now rather than at
# archive_timeout.
sql() { psql -X -A -t -q -v ON_ERROR_STOP=1 -v name="$BACKUP_NAME" -d postgres "$@"; }
lsn=$(sql <<'SQL'
CREATE SCHEMA IF NOT EXISTS deckhand;
CREATE TABLE IF NOT EXISTS deckhand.backup_markers (
  name text PRIMARY KEY,
  written_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  restore_point_lsn pg_lsn
);
INSERT INTO deckhand.backup_markers (name) VALUES (:'name') ON CONFLICT (name) DO NOTHING;
SELECT coalesce(restore_point_lsn::text, '') FROM deckhand.backup_markers WHERE name = :'name';
SQL
)
if [ -z "$lsn" ]; then
  lsn=$(sql <<'SQL'
SELECT pg_create_restore_point(:'name') AS lsn \gset
UPDATE deckhand.backup_markers SET restore_point_lsn = :'lsn' WHERE name = :'name';
SELECT pg_switch_wal() AS switched \gset
SELECT :'lsn';
SQL
)
  lsn=$(printf '%s\n' "$lsn" | tail -n 1)
fi
printf '%s\nrestore_point_lsn=%s\n' "$info" "$lsn"
