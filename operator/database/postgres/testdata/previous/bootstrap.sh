#!/bin/sh
# deckhand: entrypoint of a PostgreSQL replica (the database container).
#
# Ordinal 0 is the primary: on an empty volume it runs initdb. Every other
# ordinal is a streaming standby: on an empty volume it clones the primary
# with pg_basebackup -R. A volume that holds a data directory is never
# initialised again, and one that holds anything else is refused. Then the
# server runs in the foreground with the arguments given (-c name=value).
#
# Uses only what PostgreSQL 15 to 18 share.
#
# A standby whose data directory is of another major version than the
# server's (after a major upgrade of the primary) moves it aside, as
# pgdata.old-<its version>, and clones the primary again. With
# REMOVE_OLD_DATA=true (the operator sets it once the upgraded primary has
# been ready), the pgdata.old-* directories beside PGDATA (upgrade.sh's and
# those standbys') are removed before the server starts.
#
# Environment (set by the StatefulSet): PGDATA, PGPORT, PGUSER and
# PGPASSWORD (the superuser), POD_NAME (ends in -<ordinal>), PRIMARY_HOST
# and PRIMARY_PORT (the read-write Service), LISTEN_ADDRESSES;
# REMOVE_OLD_DATA (optional).
set -eu
. "$(dirname "$0")/lib.sh"

# clone_primary DIR: a standby streaming from the primary.
clone_primary() {
	until pg_isready -q -h "$PRIMARY_HOST" -p "$PRIMARY_PORT"; do
		log "waiting for the primary at $PRIMARY_HOST:$PRIMARY_PORT"
		sleep 2
	done
	# -R writes standby.signal and primary_conninfo; -X stream copies the
	# WAL written meanwhile, so the copy is consistent.
	pg_basebackup -h "$PRIMARY_HOST" -p "$PRIMARY_PORT" -D "$1" -R -X stream \
		--checkpoint=fast --no-password >&2
}

ordinal=${POD_NAME##*-}
server_major=$(postgres -V | sed 's/^postgres (PostgreSQL) //; s/[^0-9].*//')
data_major=$(cat "$PGDATA/PG_VERSION" 2>/dev/null || true)
if [ "$ordinal" != 0 ] && [ -n "$data_major" ] && [ "$data_major" != "$server_major" ]; then
	aside=$PGDATA.old-$data_major
	log "standby data directory is PostgreSQL $data_major, the server $server_major: moving it to $aside and cloning the primary again"
	rm -rf "$aside"
	mv "$PGDATA" "$aside"
fi
if [ "${REMOVE_OLD_DATA:-false}" = true ]; then
	for dir in "$PGDATA".old-*; do
		[ -d "$dir" ] || continue
		log "REMOVE_OLD_DATA=true: removing the old data directory $dir"
		rm -rf "$dir"
	done
fi
if [ -s "$PGDATA/PG_VERSION" ]; then
	log "$PGDATA holds a PostgreSQL $(cat "$PGDATA/PG_VERSION") data directory: starting it as it is"
elif [ -d "$PGDATA" ] && [ -n "$(ls -A "$PGDATA")" ]; then
	log "$PGDATA is not empty but holds no data directory (no PG_VERSION): refusing to initialise over it"
	exit 1
else
	# Initialise beside the target and rename it into place at the end, so
	# an interrupted initdb or clone never leaves a directory that looks
	# complete.
	staging=$PGDATA.deckhand-new
	rm -rf "$staging"
	if [ "$ordinal" = 0 ]; then
		log "empty volume on the primary (ordinal 0): initialising $PGDATA"
		init_datadir "$staging"
	else
		log "empty volume on standby ordinal $ordinal: cloning the primary into $PGDATA"
		clone_primary "$staging"
	fi
	rmdir "$PGDATA" 2>/dev/null || true
	mv "$staging" "$PGDATA"
fi

exec postgres -D "$PGDATA" -p "$PGPORT" -c listen_addresses="$LISTEN_ADDRESSES" "$@"
