#!/bin/sh
# deckhand: the second half of a base backup's verification, in the
# Database's own image (the first, verify-base-restore.sh, restored the
# base backup into PGDATA on the Job's scratch volume and checked the
# archive). The checks, in this order:
#   archive, restore  the first half's, from RESULT_DIR;
#   recovery  the restored server, on a private socket (no TCP), replays
#             the archive through the pod's archiver sidecar to the
#             backup's own restore point (named BACKUP_NAME) and promotes;
#             the server's log says which segment it could not read;
#   marker    the restored server holds the marker row base-backup.sh
#             wrote just before that restore point
#             (deckhand.backup_markers, name BACKUP_NAME, in the postgres
#             database);
#   amcheck   pg_amcheck finds no corruption in any table or B-tree index
#             of any database (the amcheck extension installed where it
#             is missing: the server is a scratch copy);
#   writable  the promoted server takes a write.
# A check that fails is a verification that ran: later checks that need
# the server are not run, the Job exits 0, and its Report says which
# check failed and why. A Job that cannot verify at all exits non-zero.
# Whatever happens, the server is stopped and the scratch data removed.
#
# The server keeps the restored directory's settings, except that it
# listens on no TCP port, trusts local connections on its private socket
# (pg_hba.conf of its own), has no TLS, archives nothing and syncs
# nothing: nothing in it is kept.
#
# Environment (set by the Job): PGDATA, RESULT_DIR, BACKUP_NAME,
# SCRATCH_DIR, PGUSER (the superuser's name), TERMINATION_MESSAGE_PATH,
# RECOVERY_WAIT_SECONDS (default 3600). Writes {"serverVersion",
# "verification":{"checks":[...]}} to the termination message.
set -eu
. "$(dirname "$0")/lib.sh"

work=$SCRATCH_DIR/verify-work
sockets=$work/sockets
version=$(postgres -V | sed 's/^postgres (PostgreSQL) //')
checks=
pid=

cleanup() {
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		pg_ctl -D "$PGDATA" -m immediate stop >/dev/null 2>&1 || kill -9 "$pid" 2>/dev/null || true
	fi
	rm -rf "$PGDATA" "$work"
}
trap cleanup EXIT
trap 'cleanup; exit 1' INT TERM
rm -rf "$work"
mkdir -p "$sockets"
chmod 700 "$work" "$sockets"

finish() {
	printf '{"serverVersion":%s,"verification":{"checks":[%s]}}\n' \
		"$(json_string "$version")" "$checks" >"$TERMINATION_MESSAGE_PATH"
	exit 0
}

# first_half NAME: the check verify-base-restore.sh ran; false when it
# failed (or never ran).
first_half() {
	if [ -f "$RESULT_DIR/$1.passed" ]; then
		check "$1" true
	elif [ -f "$RESULT_DIR/$1.failed" ]; then
		check "$1" false "$(cat "$RESULT_DIR/$1.failed")"
		return 1
	else
		check "$1" false "the restore container reported nothing for this check"
		return 1
	fi
}

# next_segment NAME: the WAL segment after NAME (16 MB segments, 256 a
# log file), on the same timeline.
next_segment() {
	tli=$(printf '%s' "$1" | cut -c 1-8) hi=$(printf '%d' "0x$(printf '%s' "$1" | cut -c 9-16)") lo=$(printf '%d' "0x$(printf '%s' "$1" | cut -c 17-24)")
	lo=$((lo + 1))
	if [ "$lo" -gt 255 ]; then lo=0 hi=$((hi + 1)); fi
	printf '%s%08X%08X' "$tli" "$hi" "$lo"
}

# recovery_failure: why the server did not promote, from its log: its
# fatal error, the last segment it replayed, and what stopped it there.
recovery_failure() {
	srvlog=$work/server.log
	fatal=$(grep -E '(FATAL|PANIC):' "$srvlog" | tail -n 1 | sed 's/.*\(FATAL\|PANIC\): *//')
	last=$(sed -n 's/.*restored log file "\([0-9A-F]\{24\}\)" from archive.*/\1/p' "$srvlog" | tail -n 1)
	bad=$(grep -E 'invalid|incorrect|unexpected|could not' "$srvlog" | grep -v -E '(FATAL|PANIC):' | tail -n 1 | sed 's/.*LOG: *//')
	if [ "$waited" -ge "${RECOVERY_WAIT_SECONDS:-3600}" ]; then
		printf 'the server did not reach restore point %s within %ss' "$BACKUP_NAME" "$waited"
	elif [ -z "$fatal" ]; then
		printf 'the server stopped before it was promoted, without a fatal error in its log'
	else
		printf '%s' "$fatal"
	fi
	if [ -n "$last" ]; then
		printf '; the last segment replayed was %s, the next (%s) is missing from the archive or unreadable' "$last" "$(next_segment "$last")"
	fi
	[ -z "$bad" ] || printf '; %s' "$bad"
}

first_half archive || true
first_half restore || finish
[ -s "$PGDATA/PG_VERSION" ] || {
	check recovery false "the restored directory $PGDATA holds no data directory (no PG_VERSION)"
	finish
}

# recovery
printf 'local all all trust\n' >"$work/pg_hba.conf"
export PGHOST="$sockets" PGPORT=5432 PGDATABASE=postgres
postgres -D "$PGDATA" -c listen_addresses='' -c unix_socket_directories="$sockets" \
	-c hba_file="$work/pg_hba.conf" -c ssl=off -c archive_mode=off -c hot_standby=off \
	-c fsync=off -c synchronous_commit=off -c synchronous_standby_names='' \
	>"$work/server.log" 2>&1 &
pid=$!
state=
waited=0
while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt "${RECOVERY_WAIT_SECONDS:-3600}" ]; do
	state=$(psql -X -A -t -c 'SELECT pg_is_in_recovery()' 2>/dev/null || true)
	[ "$state" != f ] || break
	sleep 1
	waited=$((waited + 1))
done
cat "$work/server.log" >&2
if [ "$state" != f ]; then
	check recovery false "$(recovery_failure)"
	finish
fi
check recovery true

# marker
found=$(psql -X -A -t -v ON_ERROR_STOP=1 -v name="$BACKUP_NAME" 2>&1 <<'SQL' || true
SELECT count(*) FROM deckhand.backup_markers WHERE name = :'name';
SQL
)
if [ "$found" = 1 ]; then
	check marker true
else
	check marker false "the recovered server holds no marker row $BACKUP_NAME in deckhand.backup_markers: ${found:-no answer}"
	finish
fi

# amcheck
if out=$(pg_amcheck --all --install-missing 2>&1); then
	check amcheck true
else
	printf '%s\n' "$out" >&2
	check amcheck false "pg_amcheck: $(printf '%s\n' "$out" | head -n 4)"
	finish
fi

# writable
if out=$(psql -X -q -v ON_ERROR_STOP=1 -c 'CREATE TABLE deckhand_verify_write (x int); INSERT INTO deckhand_verify_write VALUES (1); DROP TABLE deckhand_verify_write' 2>&1); then
	check writable true
else
	check writable false "the promoted server refused a write: $out"
fi
finish
