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
# Environment (set by the StatefulSet): PGDATA, PGPORT, PGUSER and
# PGPASSWORD (the superuser), POD_NAME (ends in -<ordinal>), PRIMARY_HOST
# and PRIMARY_PORT (the read-write Service), LISTEN_ADDRESSES.
set -eu

log() { printf '%s bootstrap: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >&2; }

# init_primary DIR: a new cluster whose superuser has the generated password.
init_primary() {
	# initdb reads the password from a file: keep it off the command line.
	pwfile=$(mktemp)
	trap 'rm -f "$pwfile"' EXIT
	printf '%s\n' "$PGPASSWORD" >"$pwfile"
	initdb -D "$1" --username="$PGUSER" --pwfile="$pwfile" \
		--auth-local=trust --auth-host=scram-sha-256 \
		--encoding=UTF8 --locale=C --data-checksums >&2
	rm -f "$pwfile"
	trap - EXIT
	# Clients and standbys connect from other pods, always with a password.
	cat >>"$1/pg_hba.conf" <<-'HBA'

	# deckhand: clients and standbys from other pods, with a password
	host all all all scram-sha-256
	host replication all all scram-sha-256
	HBA
}

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
		init_primary "$staging"
	else
		log "empty volume on standby ordinal $ordinal: cloning the primary into $PGDATA"
		clone_primary "$staging"
	fi
	rmdir "$PGDATA" 2>/dev/null || true
	mv "$staging" "$PGDATA"
fi

exec postgres -D "$PGDATA" -p "$PGPORT" -c listen_addresses="$LISTEN_ADDRESSES" "$@"
