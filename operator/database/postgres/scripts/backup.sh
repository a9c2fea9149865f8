#!/bin/sh
# deckhand: a backup Job of a PostgreSQL Database.
#
# Dumps APP_DATABASE with the server image's own pg_dump (custom format:
# compressed, restored with pg_restore) from SOURCE_HOST (the primary), or
# from STANDBY_HOST when that standby streams and replays at most
# MAX_LAG_BYTES behind the primary, measured before the dump starts, and
# the database holds no unlogged table or sequence; as the superuser.
#
# Unlogged tables and sequences are not written to the WAL, so a standby
# has none of their contents, and pg_dump on a standby dumps their
# definitions only: a dump taken there would restore them empty (an
# unlogged sequence at its start, below the ids its table's rows hold). A
# database that holds one is dumped from the primary. One made after that
# check, found in the standby's snapshot, fails the Job: its next try
# reads the primary.
#
# What a dump holds: the database's schemas, tables, data, sequences (with
# their values), functions, extensions' CREATE EXTENSION. What it does not
# hold: roles and their passwords, grants to roles, and settings of the
# database itself (globals live outside a database). A restore recreates
# the Database's own roles from its Secrets and makes the app role own
# everything; roles created by hand are listed in this Job's log as not
# kept.
#
# The dump is written as BACKUP_FILE.partial, fsynced, checksummed and only
# then renamed to BACKUP_FILE (and the directory fsynced): a file named
# BACKUP_FILE is always complete. A killed Job leaves only a .partial file,
# which the next backup removes.
#
# The file is bound to the Job that wrote it: BACKUP_FILE.owner, written
# before the rename, holds BACKUP_JOB_UID. A BACKUP_FILE that exists when
# the Job starts is reported only when its .owner names this Job (a retry
# after the rename); otherwise the Job fails and leaves it alone. The
# operator names files after the DatabaseBackup's UID, so another file of
# that name is never this backup's.
#
# Row counts: each table's rows, counted inside the dump's own snapshot
# (a REPEATABLE READ transaction held open that exports its snapshot;
# pg_dump --snapshot reads the same one), written to BACKUP_FILE.counts
# (one "<schema>.<table>\t<rows>" line per table, sorted) and fsynced
# before the dump is renamed: a complete dump always has its counts. A
# verification Job (verify.sh) compares a restore's counts with them.
#
# Writes {"serverVersion","file","size","sha256","source","lagBytes",
# "sourceReason","tables","rows"} to the termination message (source: the
# host dumped from; lagBytes: the standby's measured lag, only when it was
# the source; sourceReason: with STANDBY_HOST, why the dump read where it
# did; tables and rows: what the counts file holds).
#
# Uses only what PostgreSQL 15 to 18 share.
#
# Environment (set by the Job): SOURCE_HOST, SOURCE_PORT, PGUSER and
# PGPASSWORD (the superuser), APP_DATABASE, BACKUP_DIR, BACKUP_FILE
# (relative to BACKUP_DIR), BACKUP_JOB_UID, TERMINATION_MESSAGE_PATH;
# STANDBY_HOST, STANDBY_PORT and MAX_LAG_BYTES (optional); REPLICATION_USER
# (optional: the operator's replication role, which the warning about
# roles a backup does not hold leaves out); SERVER_WAIT_SECONDS (default
# 600).
set -eu
. "$(dirname "$0")/lib.sh"

export PGHOST="$SOURCE_HOST" PGPORT="$SOURCE_PORT" PGDATABASE=postgres PGCONNECT_TIMEOUT=5
tls_client_env

target=$BACKUP_DIR/$BACKUP_FILE
dir=$(dirname "$target")
partial=$target.partial
# counts: each table's rows, counted inside the dump's snapshot
# (engine.CountsSuffix).
counts=$target.counts
# owner records the UID of the Job that completed target, written before
# the rename that completes it.
owner=$target.owner
mkdir -p "$dir"

# Dumps of earlier Jobs that were killed: one backup runs at a time per
# Database (the operator sees to it), so none of them is still written.
for stale in "$dir"/*.partial; do
	[ -e "$stale" ] || continue
	log "removing $stale, left by a backup that did not finish"
	rm -f "$stale"
done
# Records of files that are gone (deleted with their DatabaseBackup, or a
# Job stopped between the record and the rename).
for record in "$dir"/*.owner "$dir"/*.counts; do
	[ -e "$record" ] || continue
	[ -e "${record%.*}" ] || rm -f "$record"
done

wait_for_server
source=$SOURCE_HOST
lag=
# reason: why the dump reads where it does, when it had a standby to read.
reason=

# unlogged_relations [SNAPSHOT]: the unlogged tables and sequences of
# APP_DATABASE on the server at PGHOST (read inside the exported SNAPSHOT
# when given) as "<how many><TAB><the first five names>", or nothing when
# it holds none. Partitions count as themselves.
unlogged_relations() {
	{
		printf 'BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY;\n'
		[ -z "${1:-}" ] || printf "SET TRANSACTION SNAPSHOT '%s';\n" "$1"
		cat <<-'SQL'
		SELECT count(*), string_agg(name, ', ' ORDER BY name) FILTER (WHERE nth <= 5)
		  FROM (SELECT quote_ident(n.nspname) || '.' || quote_ident(c.relname) AS name,
		               row_number() OVER (ORDER BY quote_ident(n.nspname) || '.' || quote_ident(c.relname)) AS nth
		          FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		         WHERE c.relpersistence = 'u' AND c.relkind IN ('r', 'p', 'S')
		           AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname !~ '^pg_(toast|temp)') unlogged
		HAVING count(*) > 0;
		COMMIT;
		SQL
	} | psql -X -q -A -t -F "$(printf '\t')" -v ON_ERROR_STOP=1 -d "$(app_dbname)"
}

# unlogged_names LINE: an unlogged_relations line as words
# ("public.sessions, public.tokens and 3 more").
unlogged_names() {
	tab=$(printf '\t')
	n=${1%%"$tab"*} names=${1#*"$tab"}
	if [ "$n" -gt 5 ]; then
		printf '%s and %s more' "$names" "$((n - 5))"
	else
		printf '%s' "$names"
	fi
}

# use_standby_if_close: with STANDBY_HOST, dump from the standby instead
# when the database holds no unlogged table or sequence, and the standby is
# streaming from the primary and its replay position is at most
# MAX_LAG_BYTES behind the primary's current WAL position, both read now,
# before the dump starts (the primary's first: the lag can only be
# overstated). Otherwise the dump reads the primary. reason says why.
use_standby_if_close() {
	unlogged=$(unlogged_relations) || fail "could not list the unlogged tables of database $APP_DATABASE on the primary"
	if [ -n "$unlogged" ]; then
		reason="the database holds unlogged tables or sequences ($(unlogged_names "$unlogged")), whose contents a dump taken on a standby leaves out"
		log "$reason: dumping from the primary"
		return 0
	fi
	primary_lsn=$(psql -X -A -t -v ON_ERROR_STOP=1 -c 'SELECT pg_current_wal_lsn()') || return 0
	standby=$(PGHOST=$STANDBY_HOST PGPORT=$STANDBY_PORT psql -X -A -t -v ON_ERROR_STOP=1 \
		-c "SELECT coalesce((SELECT status FROM pg_stat_wal_receiver), 'none') || ' ' || coalesce(pg_last_wal_replay_lsn()::text, 'none')" 2>&1) || {
		reason="standby $STANDBY_HOST does not answer ($standby)"
		log "$reason: dumping from the primary"
		return 0
	}
	status=${standby% *} standby_lsn=${standby#* }
	if [ "$status" != streaming ]; then
		reason="standby $STANDBY_HOST is not streaming from the primary (WAL receiver: $status)"
		log "$reason: dumping from the primary"
		return 0
	fi
	case $standby_lsn in
	*[!0-9A-F/]* | '') fail "standby $STANDBY_HOST reported replay position \"$standby_lsn\"" ;;
	esac
	bytes=$(psql -X -A -t -v ON_ERROR_STOP=1 -c "SELECT greatest(pg_wal_lsn_diff('$primary_lsn', '$standby_lsn'), 0)::bigint")
	if [ "$bytes" -gt "$MAX_LAG_BYTES" ]; then
		reason="standby $STANDBY_HOST replays $bytes bytes behind the primary (at most $MAX_LAG_BYTES allowed)"
		log "$reason: dumping from the primary"
		return 0
	fi
	reason="standby $STANDBY_HOST replays $bytes bytes behind the primary (at most $MAX_LAG_BYTES allowed)"
	log "$reason: dumping from it"
	source=$STANDBY_HOST lag=$bytes
	export PGHOST="$STANDBY_HOST" PGPORT="$STANDBY_PORT"
}
if [ -n "${STANDBY_HOST:-}" ]; then
	case ${MAX_LAG_BYTES:-} in '' | *[!0-9]*) fail "MAX_LAG_BYTES \"${MAX_LAG_BYTES:-}\" is not a number of bytes" ;; esac
	use_standby_if_close
fi
version=$(psql -X -A -t -v ON_ERROR_STOP=1 -c 'SHOW server_version')

# report SIZE SHA256: the Report of the complete file $target.
report() {
	size=$1 sha256=$2
	summary=$(counts_summary "$counts")
	tables=${summary% *} rows=${summary#* }
	log "$target: $size bytes, SHA-256 $sha256; $tables tables, $rows rows"
	why=
	[ -z "$reason" ] || why=,\"sourceReason\":$(json_text "$reason")
	printf '{"serverVersion":%s,"file":%s,"size":%s,"sha256":%s,"source":%s%s%s,"tables":%s,"rows":%s}\n' \
		"$(json_string "$version")" "$(json_string "$BACKUP_FILE")" "$size" "$(json_string "$sha256")" \
		"$(json_string "$source")" "${lag:+,\"lagBytes\":$lag}" "$why" "$tables" "$rows" >"$TERMINATION_MESSAGE_PATH"
}

# A file under this backup's name is this backup's result only when this
# Job wrote it (an earlier attempt stopped after the rename): then it is
# reported again, never rewritten. Anything else (another Job's file, a
# file nothing recorded) is refused and left as it is: reporting it would
# make an old dump look like a new backup.
if [ -e "$target" ]; then
	written_by=$(cat "$owner" 2>/dev/null || true)
	if [ -n "${BACKUP_JOB_UID:-}" ] && [ "$written_by" = "$BACKUP_JOB_UID" ]; then
		log "$target exists: an earlier attempt of this Job ($BACKUP_JOB_UID) completed it"
		report "$(stat -c %s "$target")" "$(sha256_of "$target")"
		exit 0
	fi
	fail "$target exists, but this backup did not write it (${written_by:+written by Job $written_by, }this is Job ${BACKUP_JOB_UID:-of unknown UID}): refusing to report a file this backup did not write; it is left as it is"
fi

# A dump holds one database, not roles: say which roles it leaves out.
# The operator's replication role is not one of them: every primary makes
# it again, and naming it in each backup's log would bury the roles a
# restore really loses.
others=$(psql -X -A -t -v ON_ERROR_STOP=1 -v repl="${REPLICATION_USER:-}" <<-'SQL'
\getenv appdb APP_DATABASE
SELECT string_agg(quote_ident(rolname), ', ' ORDER BY rolname) FROM pg_catalog.pg_roles
 WHERE rolname !~ '^pg_' AND rolname <> current_user AND rolname <> :'repl'
   AND rolname <> (SELECT pg_catalog.pg_get_userbyid(datdba) FROM pg_catalog.pg_database WHERE datname = :'appdb')
SQL
)
[ -z "$others" ] || log "roles besides the superuser and the database's owner exist ($others): a backup holds no roles, so a restore does not recreate them or their grants"

# hold_snapshot: a session that opens a REPEATABLE READ transaction,
# exports its snapshot and keeps it open (reading its input from a FIFO
# this shell holds open on fd 3) until release_snapshot; SNAPSHOT is its
# name. An exported snapshot can be imported only while the transaction
# that exported it is open: pg_dump and the counts both import it, so both
# read the same rows.
work=$(mktemp -d)
hold_snapshot() {
	mkfifo "$work/session"
	psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$(app_dbname)" <"$work/session" >"$work/session.log" 2>&1 &
	holder=$!
	exec 3>"$work/session"
	printf '%s\n' 'BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY;' \
		"SELECT pg_catalog.pg_export_snapshot() \\g $work/snapshot" >&3
	waited=0
	until [ -s "$work/snapshot" ]; do
		kill -0 "$holder" 2>/dev/null || fail "could not export a snapshot: $(cat "$work/session.log")"
		[ "$waited" -lt 600 ] || fail "no snapshot exported within 60s"
		sleep 0.1
		waited=$((waited + 1))
	done
	SNAPSHOT=$(cat "$work/snapshot")
	log "dump and row counts read snapshot $SNAPSHOT"
}
release_snapshot() {
	printf 'COMMIT;\n' >&3
	exec 3>&-
	wait "$holder" || fail "the session holding the dump's snapshot failed: $(cat "$work/session.log")"
	holder=
}
cleanup() {
	[ -z "${counter:-}" ] || kill "$counter" 2>/dev/null || true
	rm -f "$partial" "$counts.partial"
	if [ -n "${holder:-}" ]; then
		exec 3>&- || true
		kill "$holder" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

log "dumping database $APP_DATABASE from $PGHOST:$PGPORT (PostgreSQL $version) to $partial"
hold_snapshot
if [ -n "$lag" ]; then
	# The primary held no unlogged table or sequence when the standby was
	# chosen; one made since may be in the standby's snapshot, and its
	# contents would be missing from a dump taken here.
	unlogged=$(unlogged_relations "$SNAPSHOT") || fail "could not list the unlogged tables of database $APP_DATABASE on standby $STANDBY_HOST"
	[ -z "$unlogged" ] || fail "database $APP_DATABASE holds unlogged tables or sequences ($(unlogged_names "$unlogged")) made after the primary was checked: a dump taken on standby $STANDBY_HOST would leave their contents out; the next try reads the primary"
fi
# The counts read the snapshot alongside the dump, so they add no time of
# their own to the backup; counter is that psql's PID (a killed dump must
# not leave it waiting).
table_counts_sql >"$work/counts.sql"
psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$(app_dbname)" -f "$work/counts.sql" >"$work/counted" &
counter=$!
pg_dump --format=custom --no-password --snapshot="$SNAPSHOT" --file="$partial" --dbname="$(app_dbname)"
wait "$counter" || fail "counting each table's rows in the dump's snapshot failed"
counter=
LC_ALL=C sort "$work/counted" >"$counts.partial"
release_snapshot
# The data reaches the disk before the name that says it is complete; the
# counts are complete before the dump is.
sync "$partial"
sync "$counts.partial"
mv "$counts.partial" "$counts"
size=$(stat -c %s "$partial")
sha256=$(sha256_of "$partial")
printf '%s\n' "${BACKUP_JOB_UID:-}" >"$owner"
sync "$owner"
sync "$dir"
mv "$partial" "$target"
trap - EXIT
cleanup
sync "$dir"
report "$size" "$sha256"
