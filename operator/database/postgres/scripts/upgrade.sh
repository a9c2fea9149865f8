#!/bin/sh
# deckhand: the major-version upgrade Job of a PostgreSQL Database.
#
# Runs with the NEW image while no server runs on the primary's data
# volume (the StatefulSet is at zero replicas). Beside the data directory
# PGDATA (.../data/pgdata) it:
#   1. initialises pgdata.deckhand-upgrade with the new version (the same
#      superuser and password, the same pg_hba rules as bootstrap.sh),
#   2. starts a server on it that listens on 127.0.0.1 only,
#   3. creates the app role (with APP_PASSWORD) and database (init.sh) and
#      restores the pre-upgrade dump BACKUP_FILE into it (SHA-256 checked
#      first; see restore_app_database in lib.sh),
#   4. stops it and renames it pgdata.deckhand-upgraded (complete),
#   5. renames PGDATA to pgdata.old-FROM_VERSION (kept), then
#      pgdata.deckhand-upgraded to PGDATA.
# Every step is a rename or can be redone, so a Job killed anywhere and run
# again finishes the upgrade and never loses the old directory:
#   - pgdata.deckhand-upgrade (incomplete) is removed and made again;
#   - pgdata.deckhand-upgraded is complete: the swap is finished;
#   - PGDATA of TO_VERSION's major and pgdata.old-FROM_VERSION: done.
#
# The old directory stays until the new primary has been ready; then the
# operator sets REMOVE_OLD_DATA=true on the server, and bootstrap.sh removes
# it at the server's next start. The volume must hold both directories and
# the dump's data (about twice the database) during the upgrade.
#
# Writes {"serverVersion"} (the new server's) to the termination message.
#
# With ROLLBACK=true (the operator's way back after a failed upgrade, run
# with the OLD image while no server runs) it undoes whatever step the
# upgrade reached: pgdata.deckhand-upgrade and pgdata.deckhand-upgraded
# (made from the dump, never served) are removed; when
# pgdata.old-FROM_VERSION exists, PGDATA (which the new version served: a
# client may have written to it) is kept as
# pgdata.failed-TO_VERSION-<UTC time> and the old directory is renamed back
# to PGDATA. It writes the old image's version as serverVersion.
#
# Uses only what PostgreSQL 15 to 18 share.
#
# Environment (set by the Job): PGDATA, PGPORT (for the Job's own server),
# PGUSER and PGPASSWORD (the superuser), APP_DATABASE, APP_USER,
# APP_PASSWORD, BACKUP_DIR, BACKUP_FILE (relative to BACKUP_DIR),
# BACKUP_SHA256, FROM_VERSION, TO_VERSION, TERMINATION_MESSAGE_PATH.
set -eu
here=$(dirname "$0")
. "$here/lib.sh"

case $FROM_VERSION in '' | *[!0-9.]*) fail "FROM_VERSION \"$FROM_VERSION\" is not a version" ;; esac
case $TO_VERSION in '' | *[!0-9.]*) fail "TO_VERSION \"$TO_VERSION\" is not a version" ;; esac

parent=$(dirname "$PGDATA")
staging=$PGDATA.deckhand-upgrade
ready=$PGDATA.deckhand-upgraded
old=$parent/$(basename "$PGDATA").old-$FROM_VERSION
from_major=${FROM_VERSION%%.*}
to_major=${TO_VERSION%%.*}
# "postgres (PostgreSQL) 17.6 (Debian 17.6-1.pgdg120+1)" -> "17.6 (Debian ...)"
version=$(postgres -V | sed 's/^postgres (PostgreSQL) //')

data_major() { cat "$1/PG_VERSION" 2>/dev/null || true; }

report() {
	printf '{"serverVersion":%s}\n' "$(json_string "$version")" >"$TERMINATION_MESSAGE_PATH"
	log "$PGDATA runs PostgreSQL $version; the old data directory is $old"
}

# rollback: the old directory back in place (see ROLLBACK above).
rollback() {
	[ "${version%%.*}" = "$from_major" ] || fail "this image runs PostgreSQL $version, not $FROM_VERSION: roll back with the image the upgrade started from"
	rm -rf "$staging" "$ready"
	if [ -d "$old" ]; then
		if [ -e "$PGDATA" ]; then
			failed=$PGDATA.failed-$TO_VERSION-$(date -u +%Y%m%d%H%M%S)
			log "keeping the upgraded data directory as $failed"
			mv "$PGDATA" "$failed"
			sync "$parent"
		fi
		log "putting the old data directory $old back as $PGDATA"
		mv "$old" "$PGDATA"
		sync "$parent"
	fi
	current=$(data_major "$PGDATA")
	[ "$current" = "$from_major" ] || fail "$PGDATA is PostgreSQL ${current:-nothing}, not $FROM_VERSION, and no $old to put back: nothing to roll back to"
	printf '{"serverVersion":%s}\n' "$(json_string "$version")" >"$TERMINATION_MESSAGE_PATH"
	log "$PGDATA is the PostgreSQL $current directory of before the upgrade again"
}

if [ "${ROLLBACK:-false}" = true ]; then
	rollback
	exit 0
fi
[ "${version%%.*}" = "$to_major" ] || fail "this image runs PostgreSQL $version, not $TO_VERSION: refusing to upgrade with it"

# swap: PGDATA aside as $old, the complete new directory in its place.
swap() {
	if [ -d "$PGDATA" ]; then
		[ ! -e "$old" ] || fail "both $PGDATA and $old exist beside the upgraded $ready: refusing to choose; move one away by hand"
		log "keeping the old data directory as $old"
		mv "$PGDATA" "$old"
		sync "$parent"
	fi
	mv "$ready" "$PGDATA"
	sync "$parent"
}

# An earlier attempt got this far.
if [ -d "$ready" ]; then
	log "$ready is complete: finishing the swap"
	swap
	report
	exit 0
fi
if [ -e "$old" ]; then
	if [ "$(data_major "$PGDATA")" = "$to_major" ]; then
		log "$PGDATA is already the upgraded directory"
		report
		exit 0
	fi
	fail "$old exists but $PGDATA is not a PostgreSQL $to_major directory: refusing to touch either; move $old away by hand"
fi
current=$(data_major "$PGDATA")
[ -n "$current" ] || fail "$PGDATA holds no data directory (no PG_VERSION): nothing to upgrade"
if [ "$current" = "$to_major" ] && [ "$from_major" != "$to_major" ]; then
	log "$PGDATA is already PostgreSQL $to_major (its old directory was removed)"
	report
	exit 0
fi
[ "$current" = "$from_major" ] || fail "$PGDATA is PostgreSQL $current, not $FROM_VERSION: refusing to upgrade it"
[ ! -e "$PGDATA/postmaster.pid" ] || log "warning: $PGDATA/postmaster.pid exists: its server stopped without a clean shutdown (the dump was taken before; the directory is only renamed)"

file=$BACKUP_DIR/$BACKUP_FILE
check_sha256 "$file" "$BACKUP_SHA256"

log "initialising $staging for PostgreSQL $version"
rm -rf "$staging"
init_datadir "$staging"

# A server only this Job reaches: 127.0.0.1, no Unix socket.
export PGHOST=127.0.0.1 PGDATABASE=postgres PGCONNECT_TIMEOUT=5
trap 'pg_ctl -D "$staging" -m immediate stop >/dev/null 2>&1 || true' EXIT
pg_ctl -D "$staging" -l "$staging.log" -w -t 600 \
	-o "-p $PGPORT -c listen_addresses=127.0.0.1 -c unix_socket_directories=''" start >&2 ||
	{
		cat "$staging.log" >&2
		fail "the new server on $staging did not start (its log is above)"
	}
wait_for_server

PRIMARY_HOST=127.0.0.1 PRIMARY_PORT=$PGPORT TERMINATION_MESSAGE_PATH=/dev/null sh "$here/init.sh"
restore_app_database "$file" "$BACKUP_SHA256"
# The old directory's app role was fenced (NOLOGIN, fence.sh) before the
# dump; whatever the dump or an earlier run carried, the new directory's
# role logs in.
psql -X -q -v ON_ERROR_STOP=1 <<-'SQL'
\getenv approle APP_USER
SELECT format('ALTER ROLE %I LOGIN', :'approle') \gexec
SQL

pg_ctl -D "$staging" -m fast -w -t 600 stop >&2
trap - EXIT
rm -f "$staging.log"
mv "$staging" "$ready"
sync "$parent"
swap
report
