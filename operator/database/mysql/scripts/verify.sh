#!/bin/sh
# deckhand: a verification Job of a MySQL or MariaDB backup: the
# backup is proven by restoring it.
#
# Runs in the cluster's own image, with the backup volume mounted
# read-only and a scratch volume of its own (SCRATCH_DIR). The checks run
# in this order and stop at the first that fails:
#   checksum   the file's SHA-256 equals BACKUP_SHA256;
#   restore    a new data directory initialised in SCRATCH_DIR, its server
#              listening on 127.0.0.1 only (bind-address; MySQL's X
#              protocol off), takes the whole dump with the image's own
#              client, which stops at the first error;
#   rowCounts  each base table's row count in the restored server equals
#              the count recorded in BACKUP_FILE.counts, counted from the
#              dump's own stream by the backup Job; a table on one side
#              only is a difference too;
#   userCheck  (only with USER_CHECK) the query, run as APP_USER in
#              APP_DATABASE in read-only transactions, returns true (1). APP_USER is made here with
#              the grants the init Job gives it (all privileges on its
#              database, nothing else); without one (a MySQLCluster names
#              none) the query runs as deckhand_verify, which may only
#              read the restored databases. Never as root.
# A check that fails is a verification that ran: the Job exits 0 and its
# Report says which check failed and why. A Job that cannot verify at all
# (the scratch server does not start) exits non-zero.
#
# Whatever happens, the scratch server is stopped and its data removed
# before the Job ends. It has no Secret of the cluster: its accounts get
# random passwords made here, known only to this Job. Its binary log is
# off and its redo log flushed once a second: it is thrown away.
#
# Writes {"serverVersion", "verification": {"checks": [...], "tables",
# "rows"}} to the termination message.
#
# Environment (set by the Job): BACKUP_DIR, BACKUP_FILE, BACKUP_SHA256,
# SCRATCH_DIR, VERIFY_PORT (the scratch server's, on 127.0.0.1),
# APP_DATABASE, APP_USER, USER_CHECK (optional), TERMINATION_MESSAGE_PATH.
set -eu
. "$(dirname "$0")/lib.sh"
pick_commands
unset MYSQL_PWD

file=$BACKUP_DIR/$BACKUP_FILE
recorded=$file.counts
data=$SCRATCH_DIR/data
work=$SCRATCH_DIR/work
MYSQL_UNIX_PORT=$work/mysqld.sock
export MYSQL_UNIX_PORT
version=$(server_version)
checks=
tables=0
rows=0
scratch_pid=

# The scratch server, whatever the outcome.
cleanup() {
	if [ -n "$scratch_pid" ]; then
		kill "$scratch_pid" 2>/dev/null || true
		wait "$scratch_pid" 2>/dev/null || true
	fi
	rm -rf "$data" "$work"
}
trap cleanup EXIT
trap 'cleanup; trap - EXIT; exit 1' INT TERM
rm -rf "$data" "$work"
mkdir -p "$work"

# check NAME PASSED [MESSAGE]: one check's result, in order.
check() {
	_message=
	[ -z "${3:-}" ] || _message=,\"message\":$(json_string "$3")
	checks=${checks:+$checks,}$(printf '{"name":"%s","passed":%s%s}' "$1" "$2" "$_message")
	if [ "$2" = true ]; then log "check $1 passed"; else log "check $1 FAILED: $3"; fi
}

# finish: the Report, then exit 0 (a failed check is a result, not an
# error of the Job).
finish() {
	printf '{"serverVersion":%s,"verification":{"checks":[%s],"tables":%s,"rows":%s}}\n' \
		"$(json_string "$version")" "$checks" "$tables" "$rows" >"$TERMINATION_MESSAGE_PATH"
	exit 0
}

# scratch_client [ARGS...]: the image's client as the scratch server's root.
scratch_client() {
	MYSQL_PWD=$rootpw "$CLIENT" --socket="$MYSQL_UNIX_PORT" -uroot "$@"
}

# start_scratch: a new data directory in $data, served on 127.0.0.1 only.
start_scratch() {
	initialise "$data"
	set -- --skip-log-bin --mysqlx=OFF
	[ "$(flavor "$version")" = mysql ] || set --
	"$SERVER" --datadir="$data" --bind-address=127.0.0.1 --port="$VERIFY_PORT" \
		--socket="$MYSQL_UNIX_PORT" --pid-file="$work/server.pid" --skip-name-resolve \
		--innodb-flush-log-at-trx-commit=2 "$@" >"$work/server.log" 2>&1 &
	scratch_pid=$!
	until "$ADMIN" --socket="$MYSQL_UNIX_PORT" -uroot ping >/dev/null 2>&1; do
		if ! kill -0 "$scratch_pid" 2>/dev/null; then
			cat "$work/server.log" >&2
			scratch_pid=
			log "the scratch server on $data did not start (its log is above)"
			exit 1
		fi
		sleep 1
	done
	# Its accounts: root and the replication account get passwords only
	# this Job knows, and no password-less or anonymous account is left.
	sql_accounts "$version" "$rootpw" "$(random_password)" | as_root_without_password
}

# 1. checksum
[ -n "$BACKUP_SHA256" ] || { log "no SHA-256 given for $file: nothing to check the file against"; exit 1; }
if [ ! -f "$file" ]; then
	check checksum false "backup file $BACKUP_FILE not found on the backup volume"
	finish
fi
actual=$(sha256sum "$file" | cut -d ' ' -f 1)
expected=$(printf '%s' "$BACKUP_SHA256" | tr 'A-F' 'a-f')
if [ "$actual" != "$expected" ]; then
	check checksum false "the file has SHA-256 $actual, but the backup recorded $expected: it is damaged or is not that backup"
	finish
fi
check checksum true

# 2. restore
rootpw=$(random_password)
log "initialising a scratch server in $data ($version)"
start_scratch
if ! scratch_client <"$file" 2>"$work/restore.log"; then
	cat "$work/restore.log" >&2
	check restore false "$(client_error <"$work/restore.log")"
	finish
fi
check restore true

# 3. rowCounts
table_counts scratch_client >"$work/restored.counts"
summary=$(counts_summary "$work/restored.counts")
tables=${summary% *} rows=${summary#* }
if [ ! -f "$recorded" ]; then
	check rowCounts false "no row counts were recorded beside the backup ($BACKUP_FILE.counts is missing): the backup was taken before deckhand recorded them, or the file was removed"
	finish
fi
differences=$(counts_differences "$recorded" "$work/restored.counts")
if [ -n "$differences" ]; then
	check rowCounts false "$(printf '%s\n' "$differences" | wc -l | tr -d ' ') table(s) differ from the counts recorded from the dump: $(printf '%s\n' "$differences" | awk 'NR <= 5 { printf "%s%s", sep, $0; sep = "; " }')"
	finish
fi
check rowCounts true

# 4. userCheck, never as root.
if [ -n "${USER_CHECK:-}" ]; then
	userpw=$(random_password)
	user=${APP_USER:-deckhand_verify}
	{
		say "CREATE USER $(sql_string "$user")@'%' IDENTIFIED BY $(sql_string "$userpw");"
		if [ -n "${APP_DATABASE:-}" ]; then
			sql_grant_database "$APP_DATABASE" "$user"
		else
			while IFS= read -r db; do
				[ -z "$db" ] || say "GRANT SELECT ON $(sql_ident "$db").* TO $(sql_string "$user")@'%';"
			done <<-LIST
			$(user_databases_sql | scratch_client -N -B --raw)
			LIST
		fi
	} | scratch_client
	set -- -h 127.0.0.1 -P "$VERIFY_PORT" -u "$user" -N -B
	[ -z "${APP_DATABASE:-}" ] || set -- "$@" -D "$APP_DATABASE"
	if ! answer=$(printf 'SET SESSION TRANSACTION READ ONLY; %s\n' "$USER_CHECK" | MYSQL_PWD=$userpw "$CLIENT" "$@" 2>"$work/check.log"); then
		check userCheck false "the query failed: $(client_error <"$work/check.log")"
		finish
	fi
	case $answer in
	1) check userCheck true ;;
	*) check userCheck false "the query returned \"$answer\", not true (1)" ;;
	esac
fi
finish
