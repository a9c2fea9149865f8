#!/bin/sh
# deckhand: entrypoint of a MySQL or MariaDB server (the database container).
#
# Ordinal 0 is the primary: on an empty volume it initialises a data
# directory whose root password is the Secret's. Every other ordinal is a
# read-only replica: on an empty volume it initialises one too, loads a
# consistent dump of the primary (one transaction, with the accounts and
# the GTID position) and replicates from there with GTID auto-positioning.
# A data directory is never initialised again, and a non-empty directory
# that is not one is refused. Then the server runs in the foreground with
# the arguments given (--name=value settings).
#
# Environment (set by the StatefulSet): DATA_DIR, PORT, BIND_ADDRESS,
# MYSQL_UNIX_PORT (the socket), MYSQL_PWD (root's password),
# REPLICATION_PASSWORD, POD_NAME (ends in -<ordinal>), PRIMARY_HOST and
# PRIMARY_PORT (the read-write Service); PRIMARY_WAIT_SECONDS (0: forever).
set -eu
. "$(dirname "$0")/lib.sh"
pick_commands

ordinal=${POD_NAME##*-}
version=$(server_version)
log "server: $version"

# clone_primary DIR: load a consistent dump of the primary and follow it.
clone_primary() {
	wait_for "$PRIMARY_HOST" "$PRIMARY_PORT"
	dump=$1.deckhand-clone.sql
	if [ "$(flavor "$version")" = mariadb ]; then
		# The accounts come as statements (--system=users), the databases
		# by name; with none yet, an empty list dumps only the accounts.
		dbs=$(databases_of "$PRIMARY_HOST" "$PRIMARY_PORT")
		set --
		while IFS= read -r db; do
			if [ -n "$db" ]; then set -- "$@" "$db"; fi
		done <<-LIST
		$dbs
		LIST
		if [ $# -gt 0 ]; then set -- --databases "$@"; fi
	else
		set -- --all-databases
	fi
	# shellcheck disable=SC2046 # one argument per word
	"$DUMP" -h "$PRIMARY_HOST" -P "$PRIMARY_PORT" -uroot $(clone_dump_args "$version") \
		--result-file="$dump" "$@"
	log "dumped the primary ($(wc -c <"$dump") bytes): loading it"
	{
		sql_reset_gtids "$version"
		say "SET SESSION sql_log_bin = 0;"
		cat "$dump"
		say "FLUSH PRIVILEGES;"
		sql_follow_primary "$version" "$PRIMARY_HOST" "$PRIMARY_PORT" "$REPLICATION_PASSWORD"
	} | "$CLIENT" --socket="$MYSQL_UNIX_PORT" -uroot
	rm -f "$dump"
}

if [ -d "$DATA_DIR/mysql" ]; then
	log "$DATA_DIR holds a data directory: starting it as it is"
elif [ -d "$DATA_DIR" ] && [ -n "$(ls -A "$DATA_DIR")" ]; then
	log "$DATA_DIR is not empty but holds no data directory (no mysql/): refusing to initialise over it"
	exit 1
else
	# Initialise beside the target and rename it into place at the end, so
	# an interrupted initialisation or clone never leaves a directory that
	# looks complete.
	staging=$DATA_DIR.deckhand-new
	rm -rf "$staging" "$staging.deckhand-clone.sql"
	if [ "$ordinal" = 0 ]; then
		log "empty volume on the primary (ordinal 0): initialising $DATA_DIR"
	else
		log "empty volume on replica ordinal $ordinal: cloning the primary into $DATA_DIR"
	fi
	initialise "$staging"
	start_private "$staging" "$ordinal"
	sql_accounts "$version" "$MYSQL_PWD" "$REPLICATION_PASSWORD" | as_root_without_password
	if [ "$ordinal" != 0 ]; then
		clone_primary "$staging"
	fi
	stop_private
	rmdir "$DATA_DIR" 2>/dev/null || true
	mv "$staging" "$DATA_DIR"
fi

# shellcheck disable=SC2046 # one argument per line
exec "$SERVER" --datadir="$DATA_DIR" --port="$PORT" ${BIND_ADDRESS:+--bind-address="$BIND_ADDRESS"} \
	--socket="$MYSQL_UNIX_PORT" --pid-file="$DATA_DIR.pid" \
	$(server_args "$version" "$ordinal") "$@"
