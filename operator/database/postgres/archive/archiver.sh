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
# Base backups: with the server's superuser (PGPORT, PGUSER,
# SUPERUSER_PASSWORD_FILE: a file holding its password), a loop beside the
# queue's looks at the archive every BASE_BACKUP_CHECK seconds (default
# 300) while this server is the primary, and writes what it holds into
# deckhand-base-backups.json beside PGDATA (summarize), which the instance
# agent reports. With BASE_BACKUP_EVERY (seconds) it also takes a base
# backup (base-backup.sh, named base-<UTC time>) whenever the archive
# holds no base backup of that kind newer than that: at once when
# archiving starts into an archive without one, then at that interval,
# and after a failover by the new primary's sidecar; a failed one is tried
# again at the next look. It runs apart from the queue: a base backup ends
# only once the server's last segment is archived, through the queue.
# After each base backup, with RETENTION_POLICY (Barman's), expire.sh
# deletes the backups and WAL the policy no longer needs, bar those the
# operator holds (holds.sh, applied at each look too).
#
# Base backups on demand: the instance agent (POST /base-backups) writes
# one empty file per request into deckhand-base-backup-requests/ beside
# PGDATA, named as the backup (a Kubernetes object's name). Every 5 s, on
# the primary, the loop takes each, oldest first: base-backup.sh with that
# name (a name already in the archive makes no second backup), then the
# retention policy, then a summary. A failure is kept as <name>.failed
# (the end of the output) and reported in the summary for an hour. A
# request still there after an hour (left on a server that stopped being
# the primary) is dropped unanswered.
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

# requests: the base backups asked for on demand, one empty file each,
# named as the backup (the instance agent writes them; BaseBackupRequests
# in its package).
requests=$(dirname "$PGDATA")/deckhand-base-backup-requests

# is_primary: the server answers, out of recovery. Exit 2: it does not
# answer (yet).
is_primary() {
  role=$(psql -X -A -t -d postgres -c 'SELECT pg_is_in_recovery()' 2>/dev/null) || return 2
  [ "$role" = f ]
}

# base_backup_due: this server is the primary, it takes scheduled base
# backups (BASE_BACKUP_EVERY), and the archive's newest scheduled one is
# older than BASE_BACKUP_EVERY (or there is none). Their names carry their
# UTC time, so they compare as strings. Exit 2: the server does not answer
# (yet). On the primary it also writes what the archive holds into
# deckhand-base-backups.json beside PGDATA (summarize), which the instance
# agent reports to the operator.
base_backup_due() {
  is_primary || return
  apply_holds
  newest=$(summarize) || return 1
  [ -n "${BASE_BACKUP_EVERY:-}" ] || return 1
  [ "$newest" \< "base-$(date -u -d "@$(($(date +%s) - BASE_BACKUP_EVERY))" +%Y%m%dT%H%M%SZ)" ]
}

# apply_holds applies the operator's holds on base backups (holds.sh) at
# each look, so the status shows them soon after they change; expire.sh
# applies them again before it deletes anything.
apply_holds() {
  out=$(sh "$here/holds.sh" 2>&1) || { printf 'deckhand: the holds on base backups could not be applied (tried again at the next look):\n%s\n' "$out" >&2; return 0; }
  [ -z "$out" ] || printf '%s\n' "$out" >&2
}

# apply_retention runs expire.sh after a base backup, with
# RETENTION_POLICY.
apply_retention() {
  if [ -z "${RETENTION_POLICY:-}" ]; then
    :
  elif out=$(sh "$here/expire.sh" 2>&1); then
    printf '%s\n' "$out" >&2
  else
    printf 'deckhand: the retention policy could not be applied (tried again after the next base backup):\n%s\n' "$out" >&2
  fi
}

# summarize writes into deckhand-base-backups.json beside PGDATA, in one
# rename: the archive's settings (so that a listing of another archive is
# told from this one's), its finished base backups (each with its times,
# LSNs, the bytes its objects take in the store and Barman's keep target
# when it has a keep; the oldest and the newest again on their own), those
# the operator holds (holds.sh), the last failure of a scheduled one
# (BASE_BACKUP_ERROR, from $summary_error when set) and the requests that
# failed within the hour (their .failed files: drop_stale_requests removes
# older ones).
# Read through Barman's own catalogue, with zones; Barman records no
# size, so the store's listing is summed. It prints the newest scheduled
# backup's name.
summarize() {
  (
    . "$here/store.sh"
    trap store_cleanup EXIT
    store_setup
    # shellcheck disable=SC2086
    SUMMARY_FILE=$(dirname "$PGDATA")/deckhand-base-backups.json REQUESTS_DIR=$requests BASE_BACKUP_ERROR=${summary_error:-} \
      python3 - $store_endpoint "$store_url" "$STORE_SERVER" <<'PY'
import datetime, json, os, re, sys

from barman import xlog
from barman.clients.cloud_cli import UrlArgumentType, create_argument_parser
from barman.cloud import CloudBackupCatalog
from barman.cloud_providers import get_cloud_interface
from barman.infofile import BackupInfo

parser, _, _ = create_argument_parser(description="deckhand", source_or_destination=UrlArgumentType.source)
config = parser.parse_args(sys.argv[1:])
cloud = get_cloud_interface(config)
catalog = CloudBackupCatalog(cloud, config.server_name)
done = sorted((b for b in catalog.get_backup_list().values() if b.status == BackupInfo.DONE),
              key=lambda b: xlog.parse_lsn(b.end_xlog))
utc = datetime.timezone.utc

# The bytes of each backup's objects (<prefix>/<server>/base/<id>/...),
# from one listing of the catalogue's prefix, page by page. The same
# listing fills Barman's cache of which annotations exist (its own walk
# reads only the first page, a thousand objects).
sizes, notes = {}, {}
base = catalog.prefix + "/"
for page in cloud.s3.meta.client.get_paginator("list_objects_v2").paginate(Bucket=cloud.bucket_name, Prefix=base):
    for o in page.get("Contents", []):
        parts = o["Key"][len(base):].split("/")
        sizes[parts[0]] = sizes.get(parts[0], 0) + o["Size"]
        if len(parts) == 3 and parts[1] == "annotations":
            notes[(parts[0], parts[2])] = True
catalog.annotation_manager.annotation_cache = notes

def when(t):
    return t.astimezone(utc).strftime("%Y-%m-%dT%H:%M:%SZ")

def backup(b):
    return {"name": b.backup_name or "", "id": b.backup_id, "beginTime": when(b.begin_time), "endTime": when(b.end_time),
            "beginLSN": b.begin_xlog, "endLSN": b.end_xlog, "timeline": b.timeline}

summary = {"checkedAt": when(datetime.datetime.now(utc)), "count": len(done),
           "archive": {k.lower(): os.environ.get("STORE_" + k, "") for k in ("ENDPOINT", "BUCKET", "PREFIX", "SERVER")}}
if done:
    summary["oldest"], summary["newest"] = backup(done[0]), backup(done[-1])
backups, held = [], []
for b in done:
    entry = backup(b)
    entry["size"] = sizes.get(b.backup_id, 0)
    kept = catalog.get_keep_target(b.backup_id)
    if kept is not None:
        entry["kept"] = kept.strip()
    backups.append(entry)
    why = catalog.annotation_manager.get_annotation(b.backup_id, "deckhand-hold")
    if why is not None:
        held.append({"id": b.backup_id, "name": b.backup_name or "", "reason": why.strip()})
summary["backups"] = backups
if held:
    summary["held"] = held
if os.environ.get("BASE_BACKUP_ERROR"):
    summary["error"] = os.environ["BASE_BACKUP_ERROR"][-1000:]
failed = {}
try:
    entries = os.listdir(os.environ["REQUESTS_DIR"])
except FileNotFoundError:
    entries = []
for f in sorted(entries):
    if not f.endswith(".failed") or f.startswith("."):
        continue
    path = os.path.join(os.environ["REQUESTS_DIR"], f)
    try:
        with open(path, errors="replace") as why:
            failed[f[:-len(".failed")]] = why.read().strip()[-1000:]
    except FileNotFoundError:
        pass
if failed:
    summary["failed"] = failed
path = os.environ["SUMMARY_FILE"]
with open(path + ".tmp", "w") as f:
    json.dump(summary, f)
os.rename(path + ".tmp", path)
# Only the scheduled ones' names (base-<UTC time>) say when the next is
# due: a requested backup may be named anything, base-... among them.
print(max([b.backup_name for b in done if re.fullmatch(r"base-[0-9]{8}T[0-9]{6}Z", b.backup_name or "")], default=""))
PY
  )
}

# take_base_backup KIND NAME runs base-backup.sh under NAME (KIND, "" or
# "requested ", starts its log lines) and, once it is done, the retention
# policy. Its output is left in $out for a failure's record.
take_base_backup() {
  echo "deckhand: taking ${1}base backup $2" >&2
  out=$(BACKUP_NAME=$2 sh "$here/base-backup.sh" 2>&1) || return
  printf 'deckhand: %sbase backup %s done: %s\n' "$1" "$2" "$(printf '%s\n' "$out" | grep -E '^[a-z_]+=' | tr '\n' ' ')" >&2
  apply_retention
}

# summarize_now writes the summary after a base backup, and says so when
# it could not: the status keeps the previous one until the next look.
summarize_now() {
  summarize >/dev/null || echo "deckhand: could not read the archive's base backups (looked at again in ${BASE_BACKUP_CHECK:-300}s)" >&2
}

# scheduled_backup takes the scheduled base backup that is due, then
# summarizes: what the archive holds now, and the failure if there was
# one.
scheduled_backup() {
  name=base-$(date -u +%Y%m%dT%H%M%SZ)
  if take_base_backup "" "$name"; then
    summary_error=
  else
    summary_error="base backup $name failed at $(date -u +%Y-%m-%dT%H:%M:%SZ): $(printf '%s\n' "$out" | tail -n 3 | tr '\n' ' ')"
    printf 'deckhand: base backup %s failed (tried again in %ss):\n%s\n' "$name" "${BASE_BACKUP_CHECK:-300}" "$out" >&2
  fi
  summarize_now
}

# pending_requests prints the names of the requests waiting, oldest
# first. A file whose name is not a backup's is removed: the names go on
# command lines and into the summary.
pending_requests() {
  [ -d "$requests" ] || return 0
  find "$requests" -maxdepth 1 -type f ! -name '.*' ! -name '*.failed' -printf '%T@ %f\n' 2>/dev/null | sort -n | while read -r _ name; do
    case $name in
      *[!a-z0-9.-]* | [!a-z0-9]* | *[!a-z0-9]) ;;
      *)
        if [ ${#name} -le 253 ]; then
          echo "$name"
          continue
        fi
        ;;
    esac
    echo "deckhand: removed the base backup request $name: not a backup's name" >&2
    rm -f "$requests/$name"
  done
}

# drop_stale_requests removes requests and failures older than an hour,
# on any server: a request left on a server that stopped being the
# primary is not taken later, when nobody waits for it any more.
drop_stale_requests() {
  [ -d "$requests" ] || return 0
  find "$requests" -maxdepth 1 -type f ! -name '.*' -mmin +60 2>/dev/null | while read -r f; do
    rm -f "$f"
    case $f in
      *.failed) ;;
      *) echo "deckhand: dropped the base backup request ${f##*/}, unanswered for an hour" >&2 ;;
    esac
  done
}

# take_requests takes the base backups asked for, oldest first, when this
# server is the primary: each runs base-backup.sh with its name, then the
# retention policy, and is removed; a failure leaves <name>.failed. Each
# is summarized at once, so the operator sees it soon. A scheduled look's
# error (summary_error) is left alone: it is the schedule's.
take_requests() {
  pending=$(pending_requests)
  [ -n "$pending" ] || return 0
  is_primary || return 0
  for name in $pending; do
    [ -e "$requests/$name" ] || continue
    if take_base_backup "requested " "$name"; then
      rm -f "$requests/$name.failed"
    else
      { printf '%s\n' "$out" | tail -n 20 >"$requests/.failed.tmp" && mv "$requests/.failed.tmp" "$requests/$name.failed"; } ||
        echo "deckhand: could not record the failure of the requested base backup $name" >&2
      printf 'deckhand: requested base backup %s failed (not tried again):\n%s\n' "$name" "$out" >&2
    fi
    rm -f "$requests/$name"
    summarize_now
  done
}

# base_backups looks at the archive every BASE_BACKUP_CHECK seconds (every
# 5 s until the server answers), and for requests every 5 s. A request
# file .look asks for a look now (the operator, once it deleted a base
# backup: the summary must stop listing it).
base_backups() {
  superuser_env || { echo "deckhand: base backups cannot run: cannot read $SUPERUSER_PASSWORD_FILE" >&2; return; }
  next_look=0
  while :; do
    drop_stale_requests
    if [ -e "$requests/.look" ]; then
      rm -f "$requests/.look"
      next_look=0
    fi
    if [ "$(date +%s)" -ge "$next_look" ]; then
      due=0
      base_backup_due || due=$?
      if [ "$due" -ne 2 ]; then
        if [ "$due" -eq 0 ]; then
          scheduled_backup
        fi
        next_look=$(($(date +%s) + ${BASE_BACKUP_CHECK:-300}))
      fi
    fi
    take_requests
    sleep 5
  done
}

# The loop runs wherever the superuser is given, with or without a
# schedule: requested backups and the summary need no schedule.
if [ -n "${STORE_BUCKET:-}" ] && { [ -n "${BASE_BACKUP_EVERY:-}" ] || [ -n "${SUPERUSER_PASSWORD_FILE:-}" ]; }; then
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
