# Prepares a data directory for point-in-time recovery from the object
# store: the right base backup restored with barman-cloud-restore, then
# the recovery settings, so that the server started on it replays the
# archive to the target and promotes. The server never starts empty, and
# never on a directory that holds anything: recovery is not done in place.
#
# The environment: the store's settings of the source's archive
# (store.sh); PGDATA, the empty (or absent) directory to fill; the
# server's pg_waldump on PATH; at most one target (none: the end of the
# archive, every transaction it holds):
#   RECOVERY_TARGET_TIME        a time, RFC 3339 (2026-11-28T18:50:01.5Z)
#   RECOVERY_TARGET_LSN         a WAL position (0/3000060)
#   RECOVERY_TARGET_NAME        a restore point (base-backup.sh makes one
#                               per backup, named as the backup)
#   RECOVERY_TARGET_XID         a transaction ID
#   RECOVERY_TARGET_IMMEDIATE   true: as soon as the base backup is
#                               consistent
# and optionally RECOVERY_TARGET_EXCLUSIVE (true: stop just before the
# target, recovery_target_inclusive = off), RECOVERY_TARGET_TIMELINE
# (latest, the default; current; or a number), BACKUP_ID (the base backup
# to start from; chosen for a time or LSN target, otherwise the backup of
# that name or the newest), RESTORE_COMMAND (the server's
# restore_command; default wal-restore.sh in RESTORE_SCRIPTS_DIR, which
# defaults to this script's directory).
#
# A time or LSN target outside what the archive can recover (before the
# end of the oldest base backup, after the last transaction archived) is
# refused with both ends in the message.
set -eu
here=$(dirname "$0")
. "$here/store.sh"
: "${PGDATA:?PGDATA is not set}"

targets=0
for v in "${RECOVERY_TARGET_TIME:-}" "${RECOVERY_TARGET_LSN:-}" "${RECOVERY_TARGET_NAME:-}" "${RECOVERY_TARGET_XID:-}"; do
  [ -z "$v" ] || targets=$((targets + 1))
done
case ${RECOVERY_TARGET_IMMEDIATE:-false} in
  true) targets=$((targets + 1)) ;;
  false) ;;
  *) store_fail "RECOVERY_TARGET_IMMEDIATE is '$RECOVERY_TARGET_IMMEDIATE', not true or false" ;;
esac
[ "$targets" -le 1 ] || store_fail "at most one recovery target may be set (a time, an LSN, a restore point's name, a transaction ID or immediate; none: the end of the archive); $targets are set"
case ${RECOVERY_TARGET_EXCLUSIVE:-false} in
  true) inclusive=off ;;
  false) inclusive=on ;;
  *) store_fail "RECOVERY_TARGET_EXCLUSIVE is '$RECOVERY_TARGET_EXCLUSIVE', not true or false" ;;
esac
timeline=${RECOVERY_TARGET_TIMELINE:-latest}
case $timeline in
  latest | current) ;;
  '' | *[!0-9]*) store_fail "RECOVERY_TARGET_TIMELINE is '$timeline', not latest, current or a number" ;;
esac
if [ -d "$PGDATA" ] && [ -n "$(ls -A "$PGDATA")" ]; then
  store_fail "refusing to recover into $PGDATA: it is not empty (recovery never happens in place)"
fi
command -v pg_waldump >/dev/null || store_fail "pg_waldump (of the server's version) is not on PATH"

trap store_cleanup EXIT
store_setup

# The plan: which base backup, and the target as PostgreSQL reads it.
# barman's own catalogue of the archive (its library, as its commands use
# it) lists the base backups and the WAL; pg_waldump reads the newest
# segments for the last transaction archived.
# shellcheck disable=SC2086
plan=$(STORE_TMP=$store_tmp python3 - $store_endpoint "$store_url" "$STORE_SERVER" <<'PY'
import datetime, os, re, subprocess, sys

from barman import xlog
from barman.clients.cloud_cli import UrlArgumentType, create_argument_parser
from barman.clients.cloud_walrestore import CloudWalDownloader
from barman.cloud import CloudBackupCatalog
from barman.cloud_providers import get_cloud_interface
from barman.infofile import BackupInfo

def fail(msg):
    print("deckhand: " + msg, file=sys.stderr)
    sys.exit(1)

parser, _, _ = create_argument_parser(description="deckhand", source_or_destination=UrlArgumentType.source)
config = parser.parse_args(sys.argv[1:])
where = "%s/%s" % (config.source_url, config.server_name)
cloud = get_cloud_interface(config)
if not cloud.test_connectivity():
    fail("cannot reach the store of %s" % where)
catalog = CloudBackupCatalog(cloud, config.server_name)
backups = sorted((b for b in catalog.get_backup_list().values() if b.status == BackupInfo.DONE),
                 key=lambda b: xlog.parse_lsn(b.end_xlog))
if not backups:
    fail("%s holds no finished base backup to recover from" % where)
oldest = backups[0]
utc = datetime.timezone.utc

def when(t):
    return t.astimezone(utc).isoformat(timespec="microseconds").replace("+00:00", "Z")

# The newest recoverable point: the last transaction in the newest
# segments of the archive (pg_waldump, 8 segments back at most).
segments = sorted((n for n in catalog.get_wal_paths() if xlog.is_wal_file(n)),
                  key=lambda n: (n[8:], n[:8]))
newest_time, newest_lsn = None, None
record = re.compile(r"lsn: ([0-9A-F]+/[0-9A-F]+),.*desc: (?:COMMIT|ABORT) (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?) UTC")
any_record = re.compile(r"lsn: ([0-9A-F]+/[0-9A-F]+),")
for name in reversed(segments[-8:]):
    dest = os.path.join(os.environ["STORE_TMP"], name)
    # Barman Cloud's own downloader (barman-cloud-wal-restore's), on the
    # connection open already.
    try:
        CloudWalDownloader(cloud_interface=cloud, server_name=config.server_name).download_wal(name, dest)
    except SystemExit:
        fail("cannot read segment %s of %s: it is listed, but not there" % (name, where))
    except Exception as exc:
        fail("cannot read segment %s of %s: %s" % (name, where, exc))
    dump = subprocess.run(["pg_waldump", dest], capture_output=True, text=True, env=dict(os.environ, TZ="UTC"))
    os.remove(dest)
    lines = dump.stdout.splitlines()
    if newest_lsn is None:
        for line in reversed(lines):
            m = any_record.search(line)
            if m:
                newest_lsn = m.group(1)
                break
    for line in reversed(lines):
        m = record.search(line)
        if m:
            newest_time = datetime.datetime.fromisoformat(m.group(2)).replace(tzinfo=utc)
            break
    if newest_time is not None:
        break

def window():
    return "from %s (LSN %s, the end of base backup %s) to %s (the last transaction archived; the archive ends at LSN %s)" % (
        when(oldest.end_time), oldest.end_xlog, oldest.backup_id,
        when(newest_time) if newest_time else "an unknown time", newest_lsn or "unknown")

env = os.environ
chosen = None
if env.get("RECOVERY_TARGET_TIME"):
    raw = env["RECOVERY_TARGET_TIME"]
    try:
        target = datetime.datetime.fromisoformat(raw)
    except ValueError:
        fail("RECOVERY_TARGET_TIME '%s' is not an RFC 3339 time (2026-11-28T18:50:01Z)" % raw)
    if target.tzinfo is None:
        fail("RECOVERY_TARGET_TIME '%s' has no time zone (end it with Z or an offset)" % raw)
    if target < oldest.end_time or newest_time is None or target > newest_time:
        fail("recovery target time %s is outside what %s can recover: %s" % (when(target), where, window()))
    # barman keeps whole seconds of the end time: a backup ended a second
    # before the target at the latest is surely consistent by then.
    before = [b for b in backups if b.end_time + datetime.timedelta(seconds=1) <= target]
    chosen = before[-1] if before else None
    if chosen is None:
        fail("recovery target time %s is outside what %s can recover: %s" % (when(target), where, window()))
    print("setting=recovery_target_time=%s" % target.astimezone(utc).strftime("%Y-%m-%d %H:%M:%S.%f+00"))
elif env.get("RECOVERY_TARGET_LSN"):
    raw = env["RECOVERY_TARGET_LSN"]
    if not re.fullmatch(r"[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}", raw):
        fail("RECOVERY_TARGET_LSN '%s' is not an LSN (0/3000060)" % raw)
    target = xlog.parse_lsn(raw.upper())
    if target < xlog.parse_lsn(oldest.end_xlog) or newest_lsn is None or target > xlog.parse_lsn(newest_lsn):
        fail("recovery target LSN %s is outside what %s can recover: %s" % (raw.upper(), where, window()))
    chosen = [b for b in backups if xlog.parse_lsn(b.end_xlog) <= target][-1]
    print("setting=recovery_target_lsn=%s" % raw.upper())
elif env.get("RECOVERY_TARGET_NAME"):
    named = [b for b in backups if b.backup_name == env["RECOVERY_TARGET_NAME"]]
    chosen = named[-1] if named else backups[-1]
    print("setting=recovery_target_name=%s" % env["RECOVERY_TARGET_NAME"])
elif env.get("RECOVERY_TARGET_XID"):
    if not env["RECOVERY_TARGET_XID"].isdigit():
        fail("RECOVERY_TARGET_XID '%s' is not a transaction ID" % env["RECOVERY_TARGET_XID"])
    chosen = backups[-1]
    print("setting=recovery_target_xid=%s" % env["RECOVERY_TARGET_XID"])
elif env.get("RECOVERY_TARGET_IMMEDIATE") == "true":
    chosen = backups[-1]
    print("setting=recovery_target=immediate")
else:
    # No target: replay everything the archive holds.
    chosen = backups[-1]
if env.get("BACKUP_ID"):
    given = [b for b in backups if b.backup_id == env["BACKUP_ID"] or b.backup_name == env["BACKUP_ID"]]
    if not given:
        fail("%s holds no finished base backup %s" % (where, env["BACKUP_ID"]))
    chosen = given[0]
print("backup=%s" % chosen.backup_id)
print("window=%s" % window())
PY
)
backup=$(printf '%s\n' "$plan" | sed -n 's/^backup=//p')
setting=$(printf '%s\n' "$plan" | sed -n 's/^setting=//p')
if [ -n "$setting" ]; then
  echo "deckhand: recovering $store_url/$STORE_SERVER from base backup $backup to ${setting%%=*} ${setting#*=}" >&2
else
  echo "deckhand: recovering $store_url/$STORE_SERVER from base backup $backup to the end of the archive" >&2
fi
printf '%s\n' "$plan" | sed -n 's/^window=/deckhand: the archive can recover /p' >&2

mkdir -p "$PGDATA"
chmod 700 "$PGDATA"
barman-cloud-restore $store_endpoint "$store_url" "$STORE_SERVER" "$backup" "$PGDATA"
mkdir -p "$PGDATA/pg_wal"
# This data directory archives nowhere yet: the check that its archive is
# empty runs again before its first segment is sent.
rm -f "$PGDATA/deckhand-archive-checked"

# Recovery settings replace any the backup carried (a source that was
# itself recovered), so at most one target is set. The source's standby
# settings go too: this server follows nobody, and waits for no
# synchronous standby of the source's.
conf="$PGDATA/postgresql.auto.conf"
touch "$conf"
grep -v -E '^[[:space:]]*(restore_command|recovery_target[a-z_]*|primary_conninfo|primary_slot_name|synchronous_standby_names)[[:space:]]*=' "$conf" >"$conf.tmp" || true
quote() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/''/g")"; }
scripts=${RESTORE_SCRIPTS_DIR:-$(cd "$here" && pwd)}
{
  echo "# deckhand: point-in-time recovery from $store_url/$STORE_SERVER, base backup $backup"
  echo "restore_command = $(quote "${RESTORE_COMMAND:-sh $scripts/wal-restore.sh %f %p}")"
  [ -z "$setting" ] || echo "${setting%%=*} = $(quote "${setting#*=}")"
  echo "recovery_target_inclusive = $inclusive"
  echo "recovery_target_timeline = $(quote "$timeline")"
  echo "recovery_target_action = 'promote'"
} >>"$conf.tmp"
mv "$conf.tmp" "$conf"
touch "$PGDATA/recovery.signal"
echo "backup_id=$backup"
