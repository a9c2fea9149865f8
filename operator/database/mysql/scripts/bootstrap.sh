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
# Each data directory records the release series it was made with
# (deckhand-series). A replica whose directory is of another series than
# the server's (after a major upgrade of the primary, whose history starts
# again from the dump) moves it aside as DATA_DIR.deckhand-old-<series>
# and clones the primary again. With REMOVE_OLD_DATA=true (the operator
# sets it once the upgraded primary has been ready) the
# DATA_DIR.deckhand-old-* directories are removed before the server starts.
#
# Environment (set by the StatefulSet): DATA_DIR, PORT, BIND_ADDRESS,
# MYSQL_UNIX_PORT (the socket), MYSQL_PWD (root's password),
# REPLICATION_PASSWORD, POD_NAME (ends in -<ordinal>), PRIMARY_HOST and
# PRIMARY_PORT (the read-write Service); PRIMARY_WAIT_SECONDS (0: forever);
# REMOVE_OLD_DATA (optional); with TLS, TLS_DIR and TLS_CA_FILE (lib.sh).
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
		# After "--", a name is never read as an option ("--no-data").
		if [ $# -gt 0 ]; then set -- --databases -- "$@"; fi
	else
		set -- --all-databases
	fi
	# shellcheck disable=SC2046 # one argument per word
	"$DUMP" -h "$PRIMARY_HOST" -P "$PRIMARY_PORT" -uroot $(clone_dump_args "$version") $(tls_client_args) \
		--result-file="$dump" "$@"
	log "dumped the primary ($(wc -c <"$dump") bytes): loading it"
	{
		sql_reset_gtids "$version"
		say "SET SESSION sql_log_bin = 0;"
		cat "$dump"
		say "FLUSH PRIVILEGES;"
		sql_follow_primary "$version" "$PRIMARY_HOST" "$PRIMARY_PORT" "$REPLICATION_PASSWORD"
		if tls_required; then sql_replication_tls "$version" 1; fi
	} | local_client
	rm -f "$dump"
}

if [ -d "$DATA_DIR" ]; then
	check_data_owner "$DATA_DIR"
fi
if [ "${REMOVE_OLD_DATA:-false}" = true ]; then
	for dir in "$DATA_DIR".deckhand-old-*; do
		[ -d "$dir" ] || continue
		log "REMOVE_OLD_DATA=true: removing the old data directory $dir"
		rm -rf "$dir"
	done
fi
data_series=$(cat "$DATA_DIR/$SERIES_FILE" 2>/dev/null || true)
if [ "$ordinal" != 0 ] && [ -d "$DATA_DIR/mysql" ] && [ -n "$data_series" ] && [ "$data_series" != "$(series "$version")" ]; then
	log "this replica's data is of $data_series, the server is $(series "$version"): moving it aside as $DATA_DIR.deckhand-old-$data_series and cloning the primary again"
	rm -rf "$DATA_DIR.deckhand-old-$data_series"
	mv "$DATA_DIR" "$DATA_DIR.deckhand-old-$data_series"
fi
if [ -d "$DATA_DIR/mysql" ]; then
	log "$DATA_DIR holds a data directory: starting it as it is"
	series "$version" >"$DATA_DIR/$SERIES_FILE"
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
	series "$version" >"$staging/$SERIES_FILE"
	rmdir "$DATA_DIR" 2>/dev/null || true
	mv "$staging" "$DATA_DIR"
fi

# TLS: the server presents the mounted certificate; the readiness probe
# reloads it when the Secret's files change (their checksum differs from
# the one recorded here) and applies "tls" turning to required.
if [ -n "${TLS_DIR:-}" ]; then
	tls_files_sum >"${MYSQL_UNIX_PORT%/*}/$TLS_LOADED_FILE"
	if tls_required; then
		log "TLS on: serving the certificate of $TLS_DIR; connections from other hosts must use TLS"
	else
		log "TLS offered: serving the certificate of $TLS_DIR; not yet required"
	fi
fi

# shellcheck disable=SC2046 # one argument per line
exec "$SERVER" --datadir="$DATA_DIR" --port="$PORT" ${BIND_ADDRESS:+--bind-address="$BIND_ADDRESS"} \
	--socket="$MYSQL_UNIX_PORT" --pid-file="$DATA_DIR.pid" \
	$(server_args "$version" "$ordinal") $(server_tls_args) "$@"
