# The archiver sidecar of a server pod: serves the requests wal-handoff.sh
# (the server's archive_command and, while it recovers from an archive,
# its restore_command) writes into the queue directory both containers
# mount, one at a time. An archive request (<id>.req) runs wal-archive.sh
# (Barman Cloud) and is answered <id>.done or <id>.failed (the end of
# wal-archive.sh's output: why); a restore request (<id>.restore) runs
# wal-restore.sh against the source archive and is answered <id>.done,
# <id>.missing (not in the archive) or <id>.failed.
#
# The environment: the store's settings (store.sh) of the Database's own
# archive, if it archives; those of the archive it recovers from, if it
# does, as SOURCE_STORE_* (SOURCE_STORE_BUCKET, ...); PGDATA, the
# server's data directory, mounted here at the same path as in the
# server's container (wal-archive.sh records there that the archive was
# checked empty, and restored files are written there); ARCHIVE_QUEUE,
# the queue directory.
#
# Base backups: with BASE_BACKUP_EVERY (seconds) and the server's
# superuser (PGPORT, PGUSER, SUPERUSER_PASSWORD_FILE: a file holding its
# password), a loop beside the queue's takes a base backup (base-backup.sh,
# named base-<UTC time>) whenever this server is the primary and the
# archive holds no base backup of that kind newer than BASE_BACKUP_EVERY:
# at once when archiving starts into an archive without one, then at that
# interval, and after a failover by the new primary's sidecar. It looks
# every BASE_BACKUP_CHECK seconds (default 300); a failed backup is tried
# again at the next look. It runs apart from the queue: a base backup ends
# only once the server's last segment is archived, through the queue.
# After each base backup, with RETENTION_POLICY (Barman's), expire.sh
# deletes the backups and WAL the policy no longer needs, bar those the
# operator holds (holds.sh, applied at each look too).
#
# Several segments at once: with ARCHIVE_MAX_PARALLEL (n > 1), a request
# for a segment also ships up to n-1 finished segments after it (their
# .ready files in pg_wal/archive_status), side by side, and records each
# one shipped in <queue>/ahead/; PostgreSQL's request for one of those is
# answered done at once. A segment that could not be shipped ahead is
# shipped when PostgreSQL asks for it, as any other. PostgreSQL removes a
# segment only once it is answered done, so none is lost either way.
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

# source_settings makes the source archive's settings the store's.
source_settings() {
  for v in ENDPOINT BUCKET PREFIX SERVER REGION PATH_STYLE CA_FILE ACCESS_KEY_FILE SECRET_KEY_FILE; do
    eval "unset STORE_$v; [ -z \"\${SOURCE_STORE_$v+set}\" ] || export STORE_$v=\"\$SOURCE_STORE_$v\""
  done
}
# from_source runs a command with the source archive's settings as the
# store's.
from_source() {
  (
    source_settings
    "$@"
  )
}
# check_store says why the store cannot be used, if it cannot.
check_store() {
  (. "$here/store.sh" && trap store_cleanup EXIT && store_setup) 2>&1
}

# Settings that cannot work (a Secret not there yet) are said at once,
# but the archiver runs on and answers each request with the reason: a
# container that exits would take the pod, and the server, out of its
# Services. A Secret created later appears in its volume.
if [ -n "${STORE_BUCKET:-}" ] && ! err=$(check_store); then
  echo "deckhand: archiving cannot work until this is fixed (every segment fails, and PostgreSQL keeps it): $err" >&2
fi
if [ -n "${SOURCE_STORE_BUCKET:-}" ] && ! err=$(from_source check_store); then
  echo "deckhand: recovery from the source archive cannot work until this is fixed (the server waits, and its recovery is tried again): $err" >&2
fi

# superuser_env: libpq's settings for the server in this pod, as its
# superuser, with the password in a pgpass file of a private directory
# (never in the environment of a process or on a command line).
superuser_env() {
  pgpass_dir=$(mktemp -d)
  chmod 700 "$pgpass_dir"
  pw=$(cat "$SUPERUSER_PASSWORD_FILE") || return 1
  # pgpass escapes ':' and backslashes.
  printf '127.0.0.1:%s:*:%s:%s\n' "$PGPORT" "$PGUSER" "$(printf '%s' "$pw" | sed 's/[\\:]/\\&/g')" >"$pgpass_dir/pgpass"
  unset pw
  chmod 600 "$pgpass_dir/pgpass"
  export PGHOST=127.0.0.1 PGPASSFILE="$pgpass_dir/pgpass" PGCONNECT_TIMEOUT=10
}

# base_backup_due: this server is the primary, and the archive's newest
# base-* backup is older than BASE_BACKUP_EVERY (or there is none). Names
# carry their UTC time, so they compare as strings. Exit 2: the server
# does not answer (yet). On the primary it also writes what the archive
# holds into deckhand-base-backups.json beside PGDATA (summarize), which
# the instance agent reports to the operator.
base_backup_due() {
  role=$(psql -X -A -t -d postgres -c 'SELECT pg_is_in_recovery()' 2>/dev/null) || return 2
  [ "$role" = f ] || return 1
  apply_holds
  newest=$(summarize) || return 1
  [ "$newest" \< "base-$(date -u -d "@$(($(date +%s) - BASE_BACKUP_EVERY))" +%Y%m%dT%H%M%SZ)" ]
}

# apply_holds applies the operator's holds on base backups (holds.sh) at
# each look, so the status shows them soon after they change; expire.sh
# applies them again before it deletes anything.
apply_holds() {
  out=$(sh "$here/holds.sh" 2>&1) || { printf 'deckhand: the holds on base backups could not be applied (tried again at the next look):\n%s\n' "$out" >&2; return 0; }
  [ -z "$out" ] || printf '%s\n' "$out" >&2
}

# summarize writes the archive's finished base backups, the oldest and
# the newest with their times and LSNs (read through Barman's own
# catalogue, with zones), those the operator holds (holds.sh), and the
# last failure (BASE_BACKUP_ERROR, from
# $summary_error when set) into deckhand-base-backups.json beside PGDATA,
# in one rename; it prints the newest base-* backup's name.
summarize() {
  (
    . "$here/store.sh"
    trap store_cleanup EXIT
    store_setup
    # shellcheck disable=SC2086
    SUMMARY_FILE=$(dirname "$PGDATA")/deckhand-base-backups.json BASE_BACKUP_ERROR=${summary_error:-} \
      python3 - $store_endpoint "$store_url" "$STORE_SERVER" <<'PY'
import datetime, json, os, sys

from barman import xlog
from barman.clients.cloud_cli import UrlArgumentType, create_argument_parser
from barman.cloud import CloudBackupCatalog
from barman.cloud_providers import get_cloud_interface
from barman.infofile import BackupInfo

parser, _, _ = create_argument_parser(description="deckhand", source_or_destination=UrlArgumentType.source)
config = parser.parse_args(sys.argv[1:])
catalog = CloudBackupCatalog(get_cloud_interface(config), config.server_name)
done = sorted((b for b in catalog.get_backup_list().values() if b.status == BackupInfo.DONE),
              key=lambda b: xlog.parse_lsn(b.end_xlog))
utc = datetime.timezone.utc

def when(t):
    return t.astimezone(utc).strftime("%Y-%m-%dT%H:%M:%SZ")

def backup(b):
    return {"name": b.backup_name or "", "id": b.backup_id, "beginTime": when(b.begin_time), "endTime": when(b.end_time),
            "beginLSN": b.begin_xlog, "endLSN": b.end_xlog, "timeline": b.timeline}

summary = {"checkedAt": when(datetime.datetime.now(utc)), "count": len(done)}
if done:
    summary["oldest"], summary["newest"] = backup(done[0]), backup(done[-1])
held = []
for b in done:
    why = catalog.annotation_manager.get_annotation(b.backup_id, "deckhand-hold")
    if why is not None:
        held.append({"id": b.backup_id, "name": b.backup_name or "", "reason": why.strip()})
if held:
    summary["held"] = held
if os.environ.get("BASE_BACKUP_ERROR"):
    summary["error"] = os.environ["BASE_BACKUP_ERROR"][-1000:]
path = os.environ["SUMMARY_FILE"]
with open(path + ".tmp", "w") as f:
    json.dump(summary, f)
os.rename(path + ".tmp", path)
print(max([b.backup_name for b in done if (b.backup_name or "").startswith("base-")], default=""))
PY
  )
}

base_backups() {
  superuser_env || { echo "deckhand: base backups cannot run: cannot read $SUPERUSER_PASSWORD_FILE" >&2; return; }
  while :; do
    due=0
    base_backup_due || due=$?
    if [ "$due" -eq 2 ]; then
      sleep 5
      continue
    fi
    if [ "$due" -eq 0 ]; then
      name=base-$(date -u +%Y%m%dT%H%M%SZ)
      echo "deckhand: taking base backup $name" >&2
      if out=$(BACKUP_NAME=$name sh "$here/base-backup.sh" 2>&1); then
        summary_error=
        printf 'deckhand: base backup %s done: %s\n' "$name" "$(printf '%s\n' "$out" | grep -E '^[a-z_]+=' | tr '\n' ' ')" >&2
        if [ -z "${RETENTION_POLICY:-}" ]; then
          :
        elif out=$(sh "$here/expire.sh" 2>&1); then
          printf '%s\n' "$out" >&2
        else
          printf 'deckhand: the retention policy could not be applied (tried again after the next base backup):\n%s\n' "$out" >&2
        fi
      else
        summary_error="base backup $name failed at $(date -u +%Y-%m-%dT%H:%M:%SZ): $(printf '%s\n' "$out" | tail -n 3 | tr '\n' ' ')"
        printf 'deckhand: base backup %s failed (tried again in %ss):\n%s\n' "$name" "${BASE_BACKUP_CHECK:-300}" "$out" >&2
      fi
      # What the archive holds now, and the failure if there was one. A
      # failed look is said: the status keeps the previous one until the
      # next look.
      summarize >/dev/null || echo "deckhand: could not read the archive's base backups (looked at again in ${BASE_BACKUP_CHECK:-300}s)" >&2
    fi
    sleep "${BASE_BACKUP_CHECK:-300}"
  done
}

if [ -n "${BASE_BACKUP_EVERY:-}" ] && [ -n "${STORE_BUCKET:-}" ]; then
  base_backups &
  backups_pid=$!
fi

# The resident Barman Cloud processes (wal-resident.sh): one ships the
# segments wal-archive.sh hands it (when the Database archives), one
# fetches what wal-restore.sh asks for (when it recovers from an archive,
# with the source's settings), each serving a private directory. Each is
# started again when it has exited: at once after a change of keys (exit
# 75), else fifty turns of the loop below (ten seconds or more) after its
# last start, so that one that cannot start (the store's settings not
# usable yet) is not started in a tight loop; meanwhile the scripts run
# Barman Cloud's commands themselves.
archive_pid= archive_started=-100 restore_pid= restore_started=-100
WAL_ARCHIVE_RESIDENT= WAL_RESTORE_RESIDENT=
[ -z "${STORE_BUCKET:-}" ] || WAL_ARCHIVE_RESIDENT=$(mktemp -d "${TMPDIR:-/tmp}/deckhand-archive.XXXXXX")
[ -z "${SOURCE_STORE_BUCKET:-}" ] || WAL_RESTORE_RESIDENT=$(mktemp -d "${TMPDIR:-/tmp}/deckhand-restore.XXXXXX")
export WAL_ARCHIVE_RESIDENT WAL_RESTORE_RESIDENT

# keep_resident MODE DIR starts wal-resident.sh MODE serving DIR when it
# is not running and is due; its pid and last start are ${MODE}_pid and
# ${MODE}_started.
keep_resident() {
  [ -n "$2" ] || return 0
  eval "r_pid=\$$1_pid r_started=\$$1_started"
  if [ -n "$r_pid" ]; then
    ! kill -0 "$r_pid" 2>/dev/null || return 0
    r_rc=0
    wait "$r_pid" || r_rc=$?
    # No request waits on a process that is gone (its pid reused).
    rm -f "$2/pid"
    r_pid=
    if [ "$r_rc" -eq 75 ]; then
      r_started=$((ticks - 50))
    else
      echo "deckhand: the resident Barman Cloud process ($1) exited ($r_rc); each file takes a barman-cloud-wal-$1 process of its own until it is started again" >&2
    fi
  fi
  if [ $((ticks - r_started)) -ge 50 ]; then
    if [ "$1" = archive ]; then
      sh "$here/wal-resident.sh" archive "$2" &
    else
      (source_settings; exec sh "$here/wal-resident.sh" restore "$2") &
    fi
    r_pid=$! r_started=$ticks
  fi
  eval "$1_pid=\$r_pid $1_started=\$r_started"
}

stopping=0
trap 'stopping=1' TERM INT
trap 'rm -f "$queue/archiver-ready"; for p in "${backups_pid:-}" "$archive_pid" "$restore_pid"; do [ -z "$p" ] || kill "$p" 2>/dev/null; done; rm -rf ${WAL_ARCHIVE_RESIDENT:+"$WAL_ARCHIVE_RESIDENT"} ${WAL_RESTORE_RESIDENT:+"$WAL_RESTORE_RESIDENT"}' EXIT
: >"$queue/archiver-ready"
[ -z "${STORE_BUCKET:-}" ] || echo "deckhand: archiver ready: s3://$STORE_BUCKET${STORE_PREFIX:+/${STORE_PREFIX%/}}/${STORE_SERVER:-} ${STORE_ENDPOINT:-(AWS S3)}, shipping through $WAL_ARCHIVE_RESIDENT" >&2
[ -z "${SOURCE_STORE_BUCKET:-}" ] || echo "deckhand: archiver ready to restore from s3://$SOURCE_STORE_BUCKET${SOURCE_STORE_PREFIX:+/${SOURCE_STORE_PREFIX%/}}/${SOURCE_STORE_SERVER:-} ${SOURCE_STORE_ENDPOINT:-(AWS S3)}, fetching through $WAL_RESTORE_RESIDENT" >&2

# answer moves a result into place in one step.
answer() {
  mv "$queue/.$1.res" "$queue/$1.$2"
}

# ahead holds the segments shipped before PostgreSQL asked (one empty
# file each).
ahead=$queue/ahead
max_parallel=${ARCHIVE_MAX_PARALLEL:-1}
case $max_parallel in
  '' | *[!0-9]* | 0) max_parallel=1 ;;
esac
[ "$max_parallel" -eq 1 ] || mkdir -p "$ahead"

# ready_after WAL: up to max_parallel-1 finished segments after WAL's (not
# history or backup files: PostgreSQL asks for those in its own order),
# oldest first, not shipped ahead already.
ready_after() {
  [ "$max_parallel" -gt 1 ] || return 0
  left=$((max_parallel - 1))
  for f in "${1%/*}"/archive_status/*.ready; do
    f=${f##*/}
    f=${f%.ready}
    case $f in
      *[!0-9A-F]*) continue ;;
    esac
    [ ${#f} -eq 24 ] && echo "$f"
  done | LC_ALL=C sort | while read -r f; do
    [ "$left" -gt 0 ] || break
    [ "$f" \> "${1##*/}" ] && [ ! -e "$ahead/$f" ] || continue
    echo "$f"
    left=$((left - 1))
  done
}

# ship_ahead WAL: ships the segment WAL (a path in pg_wal) and records it
# in $ahead; says nothing when it could not (it is shipped when asked).
ship_ahead() {
  if (cd "$PGDATA" && ARCHIVE_AHEAD=true sh "$here/wal-archive.sh" "$1") >/dev/null 2>&1; then
    : >"$ahead/${1##*/}"
    echo "deckhand: archived ${1##*/} ahead" >&2
  fi
}

ticks=0
deadline=
while :; do
  keep_resident archive "$WAL_ARCHIVE_RESIDENT"
  keep_resident restore "$WAL_RESTORE_RESIDENT"
  took=0
  for req in "$queue"/*.req; do
    [ -f "$req" ] || continue
    id=${req##*/}
    id=${id%.req}
    # Taken, unless wal-handoff.sh withdrew it just now.
    mv "$req" "$queue/$id.work" 2>/dev/null || continue
    wal=$(cat "$queue/$id.work") || { rm -f "$queue/$id.work"; continue; }
    if [ -e "$ahead/${wal##*/}" ]; then
      rm -f "$ahead/${wal##*/}"
      : >"$queue/.$id.res"
      answer "$id" done
      rm -f "$queue/$id.work"
      took=1
      continue
    fi
    # The segments after it, shipped beside it.
    pids=
    for next in $(ready_after "$wal"); do
      ship_ahead "${wal%/*}/$next" &
      pids="$pids $!"
    done
    rc=0
    out=$(cd "$PGDATA" && sh "$here/wal-archive.sh" "$wal" 2>&1) || rc=$?
    for pid in $pids; do wait "$pid" || true; done
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
  for req in "$queue"/*.restore; do
    [ -f "$req" ] || continue
    id=${req##*/}
    id=${id%.restore}
    mv "$req" "$queue/$id.work" 2>/dev/null || continue
    { read -r name && read -r into; } <"$queue/$id.work" || { rm -f "$queue/$id.work"; continue; }
    rc=0
    out=$(cd "$PGDATA" && from_source sh "$here/wal-restore.sh" "$name" "$into" 2>&1) || rc=$?
    case $rc in
      0)
        : >"$queue/.$id.res"
        answer "$id" done
        echo "deckhand: restored $name" >&2
        ;;
      1)
        : >"$queue/.$id.res"
        answer "$id" missing
        echo "deckhand: $name is not in the source archive" >&2
        ;;
      *)
        printf '%s\n' "$out" | tail -n 20 >"$queue/.$id.res"
        answer "$id" failed
        printf 'deckhand: could not restore %s (wal-restore.sh exited %s):\n%s\n' "$name" "$rc" "$out" >&2
        ;;
    esac
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
    find "$queue" -maxdepth 1 \( -name '*.done' -o -name '*.missing' -o -name '*.failed' \) -mmin +10 -exec rm -f {} + 2>/dev/null || true
    # Segments shipped ahead that PostgreSQL no longer needs archived (no
    # .ready file: done another way, or gone with a timeline).
    for f in "$ahead"/*; do
      [ -e "$f" ] || continue
      [ -e "$PGDATA/pg_wal/archive_status/${f##*/}.ready" ] || rm -f "$f"
    done
  fi
done
