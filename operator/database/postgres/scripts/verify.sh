#!/bin/sh
# deckhand: a verification Job of a PostgreSQL Database's backup:
# the backup is proven by restoring it.
#
# Runs in the Database's own image, with the backup volume mounted
# read-only and a scratch volume of its own (SCRATCH_DIR, removed with the
# pod). The checks run in this order and stop at the first that fails:
#   checksum   the file's SHA-256 equals BACKUP_SHA256;
#   restore    a new cluster initialised in SCRATCH_DIR, served on
#              127.0.0.1 only (no Unix socket), takes the whole dump with
#              the restore Job's own restore (restore_app_database in
#              lib.sh: one transaction, stopped by the first error);
#   rowCounts  each table's row count in the restored database equals the
#              count recorded in BACKUP_FILE.counts, taken inside the
#              dump's own snapshot by the backup Job; a table on one side
#              only is a difference too;
#   userCheck  (only with USER_CHECK) the query, run as APP_USER (a plain
#              LOGIN role, never a superuser) in the restored database, in
#              a read-only transaction, returns true.
# A check that fails is a verification that ran: the Job exits 0 and its
# Report says which check failed and why. A Job that cannot verify at all
# (no initdb, no space for the scratch cluster) exits non-zero.
#
# Whatever happens, the scratch server is stopped and its data removed
# before the Job ends. Nothing in it is kept, so it runs without fsync and
# with wal_level=minimal: the restore creates each table in the
# transaction that fills it, so its rows are written once, not to the WAL
# too.
#
# The scratch cluster has no Secrets: its superuser and the app role get
# random passwords made here, known only to this Job.
#
# Writes {"serverVersion","tables","rows","verification":{"checks":[...],
# "tables","rows"}} to the termination message.
#
# Environment (set by the Job): APP_DATABASE, APP_USER, BACKUP_DIR,
# BACKUP_FILE (relative to BACKUP_DIR), BACKUP_SHA256, SCRATCH_DIR, PGPORT
# (the scratch server's port, on 127.0.0.1), USER_CHECK (optional),
# TERMINATION_MESSAGE_PATH.
set -eu
. "$(dirname "$0")/lib.sh"

file=$BACKUP_DIR/$BACKUP_FILE
recorded=$file.counts
data=$SCRATCH_DIR/pgdata
work=$SCRATCH_DIR/work
version=$(postgres -V | sed 's/^postgres (PostgreSQL) //')
checks=
tables=0
rows=0

# The scratch server, whatever the outcome.
cleanup() {
	if [ -f "$data/postmaster.pid" ]; then
		pg_ctl -D "$data" -m immediate stop >/dev/null 2>&1 || true
	fi
	rm -rf "$data" "$work"
}
arm_cleanup() {
	trap cleanup EXIT
	trap 'cleanup; exit 1' INT TERM
}
arm_cleanup
rm -rf "$data" "$work"
mkdir -p "$work"

# finish: the Report, then exit 0 (a failed check is a result, not an
# error of the Job).
finish() {
	printf '{"serverVersion":%s,"verification":{"checks":[%s],"tables":%s,"rows":%s}}\n' \
		"$(json_string "$version")" "$checks" "$tables" "$rows" >"$TERMINATION_MESSAGE_PATH"
	exit 0
}

# 1. checksum
[ -n "$BACKUP_SHA256" ] || fail "no SHA-256 given for $file: nothing to check the file against"
if [ ! -f "$file" ]; then
	check checksum false "backup file $BACKUP_FILE not found on the backup volume"
	finish
fi
actual=$(sha256_of "$file")
expected=$(printf '%s' "$BACKUP_SHA256" | tr 'A-F' 'a-f')
if [ "$actual" != "$expected" ]; then
	check checksum false "the file has SHA-256 $actual, but the backup recorded $expected: it is damaged or is not that backup"
	finish
fi
check checksum true

# 2. restore, into a server only this Job reaches.
superpw=$(od -A n -N 24 -t x1 /dev/urandom | tr -d ' \n')
apppw=$(od -A n -N 24 -t x1 /dev/urandom | tr -d ' \n')
export PGUSER=deckhand_verify PGPASSWORD="$superpw" PGHOST=127.0.0.1 PGDATABASE=postgres PGCONNECT_TIMEOUT=5
log "initialising a scratch cluster in $data for PostgreSQL $version"
INITDB_NO_SYNC=1 init_datadir "$data"
# init_datadir replaced the EXIT trap with its own.
arm_cleanup
pg_ctl -D "$data" -l "$work/server.log" -w -t 600 \
	-o "-p $PGPORT -c listen_addresses=127.0.0.1 -c unix_socket_directories='' -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c wal_level=minimal -c max_wal_senders=0" \
	start >&2 || {
	cat "$work/server.log" >&2
	fail "the scratch server on $data did not start (its log is above)"
}
wait_for_server

# In a subshell of its own that stops at its first error (set -e does not
# reach into the condition of an if): the restore's failure is a check's.
set +e
(
	set -e
	restore_app_database "$file" "$BACKUP_SHA256"
) 2>"$work/restore.log"
restored=$?
set -e
if [ "$restored" != 0 ]; then
	cat "$work/restore.log" >&2
	# The tool's own error lines, not deckhand's log lines.
	why=$(grep -v "^[0-9T:-]*Z verify: " "$work/restore.log" | tail -n 3 || true)
	check restore false "${why:-$(tail -n 1 "$work/restore.log")}"
	finish
fi
cat "$work/restore.log" >&2
check restore true

# 3. rowCounts
table_counts "$work/restored.counts"
summary=$(counts_summary "$work/restored.counts")
tables=${summary% *} rows=${summary#* }
if [ ! -f "$recorded" ]; then
	check rowCounts false "no row counts were recorded beside the backup ($BACKUP_FILE$(printf '%s' .counts) is missing): the backup was taken before deckhand recorded them, or the file was removed"
	finish
fi
differences=$(awk -F '\t' '
	FNR == NR { want[$1] = $2; next }
	{ got[$1] = $2 }
	END {
		for (t in want) {
			if (!(t in got)) print t ": " want[t] " recorded, table missing from the restore"
			else if (got[t] != want[t]) print t ": " want[t] " recorded, " got[t] " restored"
		}
		for (t in got) if (!(t in want)) print t ": not in the recorded counts, " got[t] " restored"
	}' "$recorded" "$work/restored.counts" | LC_ALL=C sort)
if [ -n "$differences" ]; then
	n=$(printf '%s\n' "$differences" | wc -l)
	check rowCounts false "$n table(s) differ from the counts recorded in the dump's snapshot: $(printf '%s\n' "$differences" | awk 'NR <= 5 { printf "%s%s", sep, $0; sep = "; " }')"
	finish
fi
check rowCounts true

# 4. userCheck, as the app role: a plain LOGIN role (restore_app_database
# made it so), given a password only this Job knows.
if [ -n "${USER_CHECK:-}" ]; then
	psql -X -q -v ON_ERROR_STOP=1 -v pw="$apppw" <<-'SQL'
	\getenv approle APP_USER
	SELECT format('ALTER ROLE %I LOGIN NOSUPERUSER PASSWORD %L', :'approle', :'pw') \gexec
	SQL
	if ! answer=$(PGUSER=$APP_USER PGPASSWORD=$apppw PGOPTIONS='-c default_transaction_read_only=on' \
		psql -X -A -t -v ON_ERROR_STOP=1 -d "$(app_dbname)" -c "$USER_CHECK" 2>&1); then
		check userCheck false "the query failed: $answer"
		finish
	fi
	case $answer in
	t | true) check userCheck true ;;
	*) check userCheck false "the query returned \"$answer\", not true" ;;
	esac
fi
finish
