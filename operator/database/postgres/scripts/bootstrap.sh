#!/bin/sh
# deckhand: entrypoint of a PostgreSQL replica (the database container).
#
# The role comes from the operator, never from the ordinal: the file
# "primary" beside this script (the scripts ConfigMap's key, which the
# operator writes from status.currentPrimary) names the primary's pod.
# Without it the server does not start. The named pod is the primary: on an
# empty volume it runs initdb; a standby's data directory (standby.signal)
# is promoted before it serves. Every other pod is a streaming standby of
# it: on an empty volume it clones the primary with pg_basebackup -R; a data
# directory that was a primary's (no standby.signal) rejoins as a standby:
# pg_rewind from the named primary (its writes since the two diverged are
# undone; pg_rewind first finishes crash recovery of a target that was not
# stopped cleanly), or, when pg_rewind fails, it is moved aside as
# pgdata.lost-<UTC time> (kept) and the primary cloned again. It never runs
# as a second primary. A volume that holds a data directory is never
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
# Standbys replicate as the replication role, REPLICATION_USER, never as
# the superuser. At every start, before it serves, the primary makes that
# role (LOGIN REPLICATION, nothing more) with the password
# REPLICATION_PASSWORD, or sets its password again (a data directory made
# before deckhand had the role gets it; a changed Secret takes effect), and
# admits it, and no other role, to replication connections in pg_hba.conf.
# At every start a standby writes primary_conninfo (postgresql.auto.conf,
# mode 0600 like every file of the data directory) with that role and
# password, so a standby cloned as the superuser by an older deckhand
# follows as the role too. Neither password is left in the environment of
# the server: they are unset before it starts.
#
# Environment (set by the StatefulSet): PGDATA, PGPORT, PGUSER and
# PGPASSWORD (the superuser: initdb gives it its password),
# REPLICATION_USER and REPLICATION_PASSWORD, POD_NAME (ends in -<ordinal>),
# PRIMARY_HOST and PRIMARY_PORT (the read-write Service), LISTEN_ADDRESSES;
# REMOVE_OLD_DATA, CLONE_MAX_RATE, PROMOTE_WAIT_SECONDS, DECKHAND_ROLE_DIR
# (optional; the last set where the instance agent runs, see below);
# with TLS, TLS_DIR (the server TLS Secret, mounted), TLS_RUN_DIR (where
# the server reads its copy) and TLS_CA_FILE (the CA bundle the
# connections to the primary verify). The
# file "primary" beside this script names the primary's pod; a file
# deckhand-fenced beside PGDATA keeps the server from starting.
set -eu
. "$(dirname "$0")/lib.sh"
# With TLS, every connection to the primary (clone, rewind, slots) is
# verify-full against the CA bundle.
tls_client_env

# The replication role's name is written into SQL and pg_hba.conf as it
# is: a plain lower-case identifier only.
case $REPLICATION_USER in
'' | [!a-z_]* | *[!a-z0-9_]*) fail "REPLICATION_USER \"$REPLICATION_USER\" is not a plain lower-case identifier" ;;
esac
# It is written into a configuration file's string, which cannot hold a
# line break (a Secret edited by hand may end with one).
case $REPLICATION_PASSWORD in
'') fail "REPLICATION_PASSWORD (the replication Secret's password) is empty" ;;
*"
"*) fail "REPLICATION_PASSWORD (the replication Secret's password) holds a line break: remove it from the Secret" ;;
esac

# primary_sql SQL: runs SQL on the primary as the replication role (an
# ordinary connection: the role may read pg_replication_slots and manage
# its slots). Prints the result.
primary_sql() {
	PGUSER=$REPLICATION_USER PGPASSWORD=$REPLICATION_PASSWORD PGCONNECT_TIMEOUT=5 \
		psql -X -A -t -v ON_ERROR_STOP=1 -h "$PRIMARY_HOST" -p "$PRIMARY_PORT" -d postgres --no-password -c "$1"
}

# slot_state: the primary's wal_status of this standby's slot ("" when it
# has none); fails when the primary cannot be asked.
slot_state() {
	primary_sql "SELECT coalesce(wal_status, 'unknown') FROM pg_catalog.pg_replication_slots WHERE slot_name = '$slot'"
}

# ensure_slot: this standby's physical replication slot exists on the
# primary, holding WAL from now on (so the standby never needs WAL the
# primary removed, up to max_slot_wal_keep_size).
ensure_slot() {
	primary_sql "SELECT pg_catalog.pg_create_physical_replication_slot('$slot', true) WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_replication_slots WHERE slot_name = '$slot')" >/dev/null
	log "replication slot $slot on the primary"
}

# drop_slot: removes this standby's slot on the primary (a lost one is
# of no use: it can never hold WAL again).
drop_slot() {
	primary_sql "SELECT pg_catalog.pg_drop_replication_slot('$slot') FROM pg_catalog.pg_replication_slots WHERE slot_name = '$slot'" >/dev/null
}

wait_for_primary() {
	until pg_isready -q -h "$PRIMARY_HOST" -p "$PRIMARY_PORT"; do
		log "waiting for the primary at $PRIMARY_HOST:$PRIMARY_PORT"
		sleep 2
	done
}

# log_clone_progress FILE RUNNING: while the file RUNNING exists, every
# CLONE_PROGRESS_SECONDS (default 30) logs the last "<done>/<total> kB"
# pg_basebackup wrote to FILE as "clone progress: <done> of <total> kB".
# The operator reads these lines from the pod's log and shows them in the
# Database's status and Events. It sleeps a second at a time and ends
# within one of RUNNING's removal: dash's wait is not interrupted by a
# trapped signal, so a killed reporter would leave its sleep behind.
log_clone_progress() {
	elapsed=0
	while [ -e "$2" ]; do
		sleep 1
		elapsed=$((elapsed + 1))
		[ "$elapsed" -ge "${CLONE_PROGRESS_SECONDS:-30}" ] || continue
		elapsed=0
		kb=$(tail -c 512 "$1" 2>/dev/null | tr '\r' '\n' | sed -n 's#^ *\([0-9][0-9]*\)/\([0-9][0-9]*\) kB.*#\1 of \2#p' | tail -n 1)
		[ -z "$kb" ] || log "clone progress: $kb kB"
	done
}

# clone_primary DIR: a standby streaming from the primary through its
# slot, cloned as the replication role. pg_basebackup's progress goes to
# DIR.progress, which the startup and liveness probes read (probe.sh
# live): a clone that progresses is never restarted.
clone_primary() {
	wait_for_primary
	ensure_slot
	rm -f "$1.progress" "$1.probe"
	: >"$1.cloning"
	log_clone_progress "$1.progress" "$1.cloning" &
	reporter=$!
	# -R writes standby.signal and primary_conninfo; -X stream copies the
	# WAL written meanwhile, so the copy is consistent. CLONE_MAX_RATE
	# (optional) limits the transfer rate, as pg_basebackup --max-rate.
	cloned=true
	PGUSER=$REPLICATION_USER PGPASSWORD=$REPLICATION_PASSWORD \
		pg_basebackup -h "$PRIMARY_HOST" -p "$PRIMARY_PORT" -D "$1" -R -X stream \
		--slot="$slot" --checkpoint=fast --no-password --progress --verbose \
		${CLONE_MAX_RATE:+--max-rate="$CLONE_MAX_RATE"} 2>"$1.progress" || cloned=false
	rm -f "$1.cloning"
	wait "$reporter" || true
	if [ "$cloned" != true ]; then
		tr '\r' '\n' <"$1.progress" | tail -n 20 >&2
		fail "pg_basebackup could not clone the primary (above)"
	fi
	tr '\r' '\n' <"$1.progress" | tail -n 3 >&2
	rm -f "$1.progress" "$1.probe"
	log "clone finished: the primary is copied; starting the standby"
}

# sql_literal VALUE: VALUE as an SQL string literal (standard conforming:
# only quotes are doubled). The value goes through a pipe, never a command
# line.
sql_literal() {
	printf "'%s'" "$(printf '%s' "$1" | sed "s/'/''/g")"
}

# ensure_replication_role DIR: the replication role exists with LOGIN
# REPLICATION (and nothing more) and REPLICATION_PASSWORD, in the data
# directory DIR of a primary that is not running, and may run the four
# file functions pg_rewind reads a primary with (the manual's list for a
# role that is not a superuser: they read files of the data directory,
# which a base backup, already the role's right, copies whole), in single
# user mode.
ensure_replication_role() {
	{
		printf '%s\n' "DO \$deckhand\$ BEGIN IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = '$REPLICATION_USER') THEN CREATE ROLE $REPLICATION_USER; END IF; END \$deckhand\$;"
		printf '%s\n' "ALTER ROLE $REPLICATION_USER WITH LOGIN REPLICATION NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT NOBYPASSRLS CONNECTION LIMIT -1 PASSWORD $(sql_literal "$REPLICATION_PASSWORD");"
		for f in 'pg_ls_dir(text, boolean, boolean)' 'pg_stat_file(text, boolean)' 'pg_read_binary_file(text)' 'pg_read_binary_file(text, bigint, bigint, boolean)'; do
			printf '%s\n' "GRANT EXECUTE ON FUNCTION pg_catalog.$f TO $REPLICATION_USER;"
		done
		printf '%s\n' "SELECT 'deckhand: replication role ready' FROM pg_catalog.pg_authid WHERE rolname = '$REPLICATION_USER' AND rolcanlogin AND rolreplication AND NOT rolsuper AND rolpassword LIKE 'SCRAM-SHA-256\$%';"
	} | single_user "$1" 'replication role ready' || fail "could not make the replication role $REPLICATION_USER (the errors above)"
	log "replication role $REPLICATION_USER in place, with the password of its Secret"
}

# single_user DIR DONE: runs the statements on stdin in the server of the
# data directory DIR, which is not running, in single-user mode (never on
# a command line; never logged, not even with an error). Fails unless
# their output holds "deckhand: DONE" and no error.
# synchronous_commit=local: with synchronous_standby_names set (synchronous
# replication), a commit in single-user mode waits for a standby that can
# never connect to it, for good; what it commits is the server's own.
single_user() {
	out=$(mktemp)
	errors=$(mktemp)
	trap 'rm -f "$out" "$errors"' EXIT
	postgres --single -D "$1" \
		-c log_statement=none -c log_min_error_statement=panic \
		-c password_encryption=scram-sha-256 -c standard_conforming_strings=on \
		-c synchronous_commit=local \
		postgres >"$out" 2>"$errors" || true
	cat "$errors" >&2
	ok=true
	if grep -q -E '(^| )(ERROR|FATAL|PANIC): ' "$errors" || ! grep -q "\"deckhand: $2\"" "$out"; then
		ok=false
	fi
	rm -f "$out" "$errors"
	trap - EXIT
	[ "$ok" = true ]
}

# write_primary_conninfo DIR: a standby's postgresql.auto.conf names the
# primary, the replication role and its password (every other line is
# kept). The file is made beside it with mode 0600 and renamed into place.
write_primary_conninfo() {
	conf=$1/postgresql.auto.conf
	conninfo="host=$(conninfo_value "$PRIMARY_HOST") port=$(conninfo_value "$PRIMARY_PORT")"
	conninfo="$conninfo user=$(conninfo_value "$REPLICATION_USER") password=$(conninfo_value "$REPLICATION_PASSWORD")"
	conninfo="$conninfo application_name=$(conninfo_value "$POD_NAME")$(tls_conninfo)"
	# What a start killed before its rename left.
	rm -f "$conf".deckhand-*
	new=$(umask 077 && mktemp "$conf.deckhand-XXXXXX")
	{
		[ ! -f "$conf" ] || grep -v -E '^[[:space:]]*primary_(conninfo|slot_name)[[:space:]]*=' "$conf" || true
		# A configuration file's string: quotes and backslashes doubled.
		printf "primary_conninfo = '%s'\n" "$(printf '%s' "$conninfo" | sed "s/[\\']/&&/g")"
		printf "primary_slot_name = '%s'\n" "$slot"
	} >"$new"
	chmod 600 "$new"
	mv "$new" "$conf"
	unset conninfo
	log "primary_conninfo: $PRIMARY_HOST:$PRIMARY_PORT as $REPLICATION_USER"
}

# promote DIR: the standby's data directory DIR (standby.signal) of the pod
# the operator names the primary becomes a primary's, on a new timeline,
# before it serves: the server starts as a standby that follows nothing and
# listens on a private socket only (no TCP), is promoted, and stops
# cleanly. pg_ctl's waits are bounded by PROMOTE_WAIT_SECONDS (default
# 3600: replaying the WAL it has may take long).
promote() {
	log "$1 is a standby's (standby.signal), and the operator names $POD_NAME the primary: promoting it before it serves"
	sockets=$(mktemp -d)
	patience=${PROMOTE_WAIT_SECONDS:-3600}
	if ! pg_ctl -D "$1" -w -t "$patience" -o "-p $PGPORT -c listen_addresses='' -c unix_socket_directories='$sockets' -c primary_conninfo='' -c primary_slot_name=''" start >&2 ||
		! pg_ctl -D "$1" -w -t "$patience" promote >&2 ||
		! pg_ctl -D "$1" -w -t "$patience" -m fast stop >&2; then
		pg_ctl -D "$1" -w -m fast stop >&2 || true
		rm -rf "$sockets"
		fail "could not promote $1 (above)"
	fi
	rm -rf "$sockets"
	log "promoted $1: it starts as the primary"
}

# recover_to_target DIR ARGS...: DIR holds a base backup and the settings
# of a point-in-time recovery (recovery.signal: recover-primary.sh, the
# init container of a Database recovering from an archive). The server
# replays the archive to the target and promotes itself
# (recovery_target_action = promote) before it serves: it runs with the
# server's arguments ARGS (archive_command among them, so the new
# timeline's history file is archived) but listens on a private socket
# only (no TCP). Its restore_command reaches the archive through the
# archiver sidecar. Then it stops cleanly (finish_recovery follows). A
# recovery that stops before the promotion (the target not reached, the
# archive unreachable: the server's log says which) fails the container;
# its next start replays again. While the server replays,
# deckhand-recovering beside DIR holds its PID (probe.sh live passes).
recover_to_target() {
	dir=$1
	shift
	log "$dir holds a base backup to recover (recovery.signal): replaying the archive to the target before the server serves"
	sockets=$(mktemp -d)
	marker=$(dirname "$dir")/deckhand-recovering
	postgres -D "$dir" -p "$PGPORT" "$@" -c listen_addresses='' -c unix_socket_directories="$sockets" &
	pid=$!
	echo "$pid" >"$marker"
	state=
	while kill -0 "$pid" 2>/dev/null; do
		state=$(psql -X -A -t -h "$sockets" -p "$PGPORT" -d postgres -c 'SELECT pg_is_in_recovery()' 2>/dev/null || true)
		[ "$state" != f ] || break
		sleep 1
	done
	if [ "$state" != f ]; then
		wait "$pid" || true
		rm -f "$marker"
		rm -rf "$sockets"
		fail "the point-in-time recovery stopped before the server was promoted (its log above says why); the next start replays again"
	fi
	log "recovered: the server reached its target and was promoted"
	pg_ctl -D "$dir" -w -t "${PROMOTE_WAIT_SECONDS:-3600}" -m fast stop >&2 || true
	wait "$pid" || true
	rm -f "$marker"
	rm -rf "$sockets"
}

# finish_recovery DIR: the data directory DIR was recovered from an archive
# (its postgresql.auto.conf still holds the recovery settings, under
# recover.sh's "# deckhand: point-in-time recovery" line) and promoted.
# The superuser gets the password of its Secret (the source's roles came
# with the data; the replication role's is set at every start), then the
# recovery settings leave postgresql.auto.conf: standbys cloned from it
# must not restore from the source archive. Run at each start until done,
# so a start cut off in between finishes it.
finish_recovery() {
	printf '%s\n' "ALTER ROLE $PGUSER PASSWORD $(sql_literal "$PGPASSWORD");" "SELECT 'deckhand: superuser password set';" |
		single_user "$1" 'superuser password set' || fail "could not give the superuser $PGUSER the password of its Secret (the errors above)"
	conf=$1/postgresql.auto.conf
	grep -v -E '^(# deckhand: point-in-time recovery|[[:space:]]*(restore_command|recovery_target[a-z_]*)[[:space:]]*=)' "$conf" >"$conf.deckhand-tmp" || true
	chmod 600 "$conf.deckhand-tmp"
	mv "$conf.deckhand-tmp" "$conf"
	log "recovery finished: the superuser has the password of its Secret, and the recovery settings are removed"
}

# rejoin DIR: the data directory DIR was a primary's (no standby.signal),
# but the operator names another pod the primary, so it must never serve
# as one again. pg_rewind makes it the named primary's copy as of the
# point where their histories diverged (the writes it took after that are
# undone; it first finishes crash recovery of a directory that was not
# stopped cleanly), and it comes up as the named primary's standby. When
# pg_rewind cannot (another system, WAL the primary no longer has, ...),
# DIR is moved aside as pgdata.lost-<UTC time> (kept, never deleted:
# remove it by hand once the new clone serves) and the primary is cloned
# again. pg_rewind reads the primary as the replication role (see
# ensure_replication_role).
rejoin() {
	wait_for_primary
	log "$1 was a primary's (no standby.signal), but the operator names $named_primary the primary: rewinding it to follow $named_primary (pg_rewind)"
	ensure_slot || log "could not make replication slot $slot on the primary (above)"
	# pg_rewind reads the source's timeline from its control file, which a
	# standby promoted online (pg_promote, as a failover does) updates only
	# at the checkpoint its promotion requests, spread over minutes: until
	# then pg_rewind says "no rewind required" and this directory, its WAL
	# past the fork, could never follow. A checkpoint first (the
	# superuser's; the replication role may not) makes the timeline current.
	PGCONNECT_TIMEOUT=10 psql -X -q -v ON_ERROR_STOP=1 -h "$PRIMARY_HOST" -p "$PRIMARY_PORT" -d postgres --no-password -c CHECKPOINT >&2 ||
		fail "could not ask the primary $PRIMARY_HOST:$PRIMARY_PORT for a checkpoint before pg_rewind (above): not rewinding against a timeline that may not be current"
	source="host=$(conninfo_value "$PRIMARY_HOST") port=$(conninfo_value "$PRIMARY_PORT") user=$(conninfo_value "$REPLICATION_USER") dbname=postgres connect_timeout=10"
	if PGPASSWORD=$REPLICATION_PASSWORD pg_rewind --target-pgdata="$1" --source-server="$source" --progress >&2; then
		: >"$1/standby.signal"
		log "rewound $1: it starts as a standby of $named_primary"
		return 0
	fi
	aside=$1.lost-$(date -u +%Y%m%d%H%M%S)
	log "pg_rewind could not rewind $1 (above): moving it to $aside (kept: remove it by hand once the new clone serves) and cloning the primary again"
	mv "$1" "$aside"
}

ordinal=${POD_NAME##*-}
case $ordinal in '' | *[!0-9]*) fail "POD_NAME \"$POD_NAME\" does not end in -<ordinal>" ;; esac
# A fenced server does not start: the instance agent writes the marker
# deckhand-fenced beside PGDATA, on the data volume, before it stops the
# server, so a fence outlives the container. The script waits until the
# agent lifts the fence (removes the marker), and only then reads its
# role: a failover names the new primary while the old one is fenced.
# With the agent, the script runs under its supervisor (deckhand-instance
# supervise), which starts it again when the server ends fenced, so the
# container is not restarted; it sets DECKHAND_FENCED_RESTART=1 then.
fence_marker=$(dirname "$PGDATA")/deckhand-fenced
if [ -e "$fence_marker" ]; then
	log "fenced ($fence_marker is there): not starting the server until the fence is lifted"
	while [ -e "$fence_marker" ]; do sleep 1; done
	log "the fence is lifted: starting"
	DECKHAND_FENCED_RESTART=1
fi
# The start after a fence (waited for here, or lifted before the
# supervisor started this script again: DECKHAND_FENCED_RESTART) may take
# as long as a first one, and the container's startup probe ran long ago:
# the time goes to probe.sh (restarted_recently).
if [ -n "${DECKHAND_FENCED_RESTART:-}" ] && [ -n "${DECKHAND_ROLE_DIR:-}" ]; then
	date +%s >"$DECKHAND_ROLE_DIR/deckhand-restarted" || log "could not write $DECKHAND_ROLE_DIR/deckhand-restarted: the liveness probe gives this start only its usual minute"
fi
# The role: the operator's word, read once now (a later change of the
# file takes effect at the next start; the readiness probe fails meanwhile).
named_primary=$(cat "$(dirname "$0")/primary" 2>/dev/null || true)
[ -n "$named_primary" ] || fail "no primary named in $(dirname "$0")/primary (the scripts ConfigMap's key primary, which the operator writes): not starting, so that no server runs as a primary the operator did not name"
role=standby
[ "$POD_NAME" != "$named_primary" ] || role=primary
# With the instance agent in the pod (DECKHAND_ROLE_DIR: the directory it
# shares with this container), a server about to start as the primary
# first asks the operator, through the agent (ask_role): the mounted file
# above can be a minute behind (the kubelet refreshes it at its own pace),
# and an old primary whose pod is made again while a failover promotes
# another would read its own name there and start writable beside the new
# primary. The operator answers from the Database's status as the API
# server has it, never while a failover is under way. Another pod named:
# the file is read again 2 s later, until it names that pod too. Fenced
# meanwhile: the script starts over and waits on the fence.
# A question left by a run that was killed while it waited is withdrawn.
# deckhand-role-wait tells probe.sh live that the server is down on
# purpose while the operator is asked (restarting the container would
# change nothing, and the kubelet's back-off would delay the start).
[ -z "${DECKHAND_ROLE_DIR:-}" ] || rm -f "$DECKHAND_ROLE_DIR/deckhand-role-asked" "$DECKHAND_ROLE_DIR/deckhand-role-wait"
if [ "$role" = primary ] && [ -n "${DECKHAND_ROLE_DIR:-}" ]; then
	: >"$DECKHAND_ROLE_DIR/deckhand-role-wait"
	log "$named_primary (this pod) is named the primary: waiting for the operator to confirm it before the server starts"
	if ! confirmed=$(ask_role "$DECKHAND_ROLE_DIR" "$fence_marker"); then
		log "fenced while waiting for the operator: starting over"
		exec sh "$0" "$@"
	fi
	if [ "$confirmed" != "$POD_NAME" ]; then
		log "the operator names $confirmed the primary, not this pod (the mounted file is behind): not starting; reading it again in 2 s"
		sleep 2
		exec sh "$0" "$@"
	fi
	rm -f "$DECKHAND_ROLE_DIR/deckhand-role-wait"
	log "the operator confirmed this pod is the primary"
fi
log "the operator names $named_primary the primary: starting as the $role"
if [ -d "$PGDATA" ]; then
	check_data_owner "$PGDATA"
	# A directory that cannot be read (a failed disk, a mode changed by
	# hand) is not an empty one: nothing is initialised or cloned beside
	# it (a clone moved into place once it is readable again would have
	# left the old directory to start as it was, a primary's as a second
	# primary). The container fails and is restarted until it can be read.
	if [ ! -r "$PGDATA" ] || [ ! -x "$PGDATA" ]; then
		fail "cannot read the data directory $PGDATA (mode $(stat -c %A "$PGDATA")): not starting, and not initialising or cloning over it; it starts once it can be read again"
	fi
fi
# Each standby streams through a physical replication slot of its own on
# the primary, named after its ordinal.
slot=deckhand_standby_$ordinal
server_major=$(postgres -V | sed 's/^postgres (PostgreSQL) //; s/[^0-9].*//')
data_major=$(cat "$PGDATA/PG_VERSION" 2>/dev/null || true)
if [ "$role" = standby ] && [ -n "$data_major" ] && [ "$data_major" != "$server_major" ]; then
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
# A standby whose slot the primary reports lost (it removed WAL the
# standby still needed, beyond max_slot_wal_keep_size) can never catch up:
# its data directory is moved aside as pgdata.lost-<UTC time> (kept, never
# deleted: remove it by hand once the new clone serves) and the primary is
# cloned again through a new slot.
if [ "$role" = standby ] && [ -s "$PGDATA/PG_VERSION" ]; then
	if state=$(slot_state 2>/dev/null) && [ "$state" = lost ]; then
		aside=$PGDATA.lost-$(date -u +%Y%m%d%H%M%S)
		log "the primary reports replication slot $slot lost: this standby cannot catch up; moving $PGDATA to $aside and cloning the primary again"
		drop_slot
		mv "$PGDATA" "$aside"
	fi
fi
# A standby must never serve as a primary: a data directory that was a
# primary's rejoins as a standby of the named primary, or is moved aside.
if [ "$role" = standby ] && [ -s "$PGDATA/PG_VERSION" ] && [ ! -f "$PGDATA/standby.signal" ]; then
	rejoin "$PGDATA"
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
	if [ "$role" = primary ]; then
		log "empty volume on the primary $POD_NAME: initialising $PGDATA"
		init_datadir "$staging"
	else
		log "empty volume on standby $POD_NAME: cloning the primary into $PGDATA"
		clone_primary "$staging"
	fi
	# Into place only where nothing is: mv onto a directory would move
	# the new one inside it and leave the old one to start.
	if [ -e "$PGDATA" ] && ! rmdir "$PGDATA" 2>/dev/null; then
		fail "$PGDATA is no longer empty (something wrote it while $staging was made): not moving $staging over it"
	fi
	mv "$staging" "$PGDATA"
fi

if [ "$role" = primary ]; then
	if [ -f "$PGDATA/recovery.signal" ]; then
		recover_to_target "$PGDATA" "$@"
	fi
	if grep -q '^# deckhand: point-in-time recovery' "$PGDATA/postgresql.auto.conf" 2>/dev/null; then
		finish_recovery "$PGDATA"
	fi
	if [ -f "$PGDATA/standby.signal" ]; then
		promote "$PGDATA"
	fi
	ensure_replication_role "$PGDATA"
	ensure_replication_hba "$PGDATA"
else
	# A standby serves reads: its pg_hba.conf (a copy of the primary's)
	# follows TLS being turned on or off too.
	ensure_replication_hba "$PGDATA"
	# A standby cloned before deckhand used slots gets one; a primary that
	# does not answer yet gets none now (the standby streams without it
	# until its next start).
	if pg_isready -q -h "$PRIMARY_HOST" -p "$PRIMARY_PORT" -t 10; then
		ensure_slot || log "could not make replication slot $slot on the primary (above)"
	fi
	write_primary_conninfo "$PGDATA"
fi

# max_slot_wal_keep_size: unless the parameters set it, a quarter of the
# data volume (measured now): slots may hold that much WAL for a standby
# that is behind; beyond it the primary lets the slot go (lost) rather
# than fill its volume.
case " $* " in
*" max_slot_wal_keep_size="*) ;;
*)
	volume_kb=$(df -P -k "$(dirname "$PGDATA")" | awk 'NR == 2 { print $2 }')
	set -- "$@" -c "max_slot_wal_keep_size=$((volume_kb / 4 / 1024))MB"
	;;
esac

# TLS: the server presents the certificate copied from the mounted Secret
# (tls_install); the readiness probe copies a renewed one and reloads.
if [ -n "${TLS_DIR:-}" ]; then
	tls_install || true
	set -- "$@" -c ssl=on -c "ssl_cert_file=$TLS_RUN_DIR/tls.crt" -c "ssl_key_file=$TLS_RUN_DIR/tls.key"
	log "TLS on: serving the certificate of $TLS_DIR; connections from other hosts must use TLS"
fi

# The server needs neither password: keep them out of its environment (and
# so of every process it starts).
unset PGPASSWORD REPLICATION_PASSWORD PGSSLMODE PGSSLROOTCERT
exec postgres -D "$PGDATA" -p "$PGPORT" -c listen_addresses="$LISTEN_ADDRESSES" "$@"
