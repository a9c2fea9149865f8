#!/bin/sh
# deckhand: the probes of a PostgreSQL server container (ServerPod); the
# kubelet runs them with the container's environment.
#
# probe.sh ready: the readiness probe. The server runs (postmaster.pid
# says it accepts connections) and answers a query, and,
# when it is a standby (in recovery), its WAL receiver is streaming from
# the primary (pg_stat_wal_receiver.status = 'streaming'): a standby that
# answers but has stopped following the primary (its WAL was removed, its
# slot lost, the primary unreachable) is not ready, so it is not a backup
# source or a read-only endpoint, and the Database reports it.
#
# probe.sh live: the startup and liveness probes. The server answers, or a
# standby's first clone (pg_basebackup, which cannot resume) is still
# making progress: the bytes it reports copied grew within the last
# CLONE_STALL_SECONDS (default 600). A clone that progresses is never
# restarted, however long it takes; one that stalls is. A standby whose
# slot the primary reports lost fails it: its restart clones it again
# (bootstrap.sh).
#
# probe.sh live passes while the server is fenced (the file
# deckhand-fenced beside PGDATA): bootstrap.sh waits on purpose; probe.sh
# ready fails, even while the server still runs. It passes while the
# server replays an archive before it serves (point-in-time recovery: the
# server's PID in deckhand-recovering beside PGDATA). It passes too while
# bootstrap.sh waits for the operator to confirm the pod is the primary
# (deckhand-role-wait in DECKHAND_ROLE_DIR), and for up to an hour while
# a server whose fence was lifted (deckhand-restarted there, which
# bootstrap.sh writes: restarted_recently) does not answer yet.
#
# probe.sh ready also fails while the server's role disagrees with the
# operator's: the file "primary" beside this script (the scripts
# ConfigMap's key) names the primary's pod; a server out of recovery in
# another pod, or the named pod still in recovery, is not ready, so no
# Service routes to it (bootstrap.sh makes the role agree at the next
# start). Except a standby the operator promoted through the agent to
# replace the pod still named (promoted_replacing): the new name has not
# reached the pod yet.
#
# Also (ready, on the primary): with a file "replicas" beside this script
# (the operator writes the Database's replicas there), drops the inactive
# replication slots of standbys that no longer exist (deckhand_standby_<n>
# with n >= replicas), so a removed standby does not hold the primary's
# WAL.
#
# Also (ready, with TLS): when the server TLS Secret's files (TLS_DIR)
# changed, copies them (tls_install) and reloads the server.
#
# Also (ready, on a primary that archives with archive_timeout): once per
# server start, reloads the server, which wakes its checkpointer
# (wake_checkpointer).
#
# Environment: PGPORT, PGUSER and PGPASSWORD (the superuser), PGDATA,
# POD_NAME, PRIMARY_HOST, PRIMARY_PORT, REPLICATION_USER and
# REPLICATION_PASSWORD; TLS_DIR, TLS_RUN_DIR and TLS_CA_FILE with TLS.
# PGHOST: where the server is asked (default 127.0.0.1).
#
# In a pod with the instance agent, the kubelet asks the agent for the
# readiness probe and the agent runs probe.sh ready in its own container
# (the server's image and the mounts this script reads), with PGHOST the
# server's socket directory and PGUSER the local superuser
# (instance/probe.go): no password there, and no exec in the server's
# container every 5 s. The startup and liveness probes stay exec probes.
set -u
. "$(dirname "$0")/lib.sh"

export PGHOST="${PGHOST:-127.0.0.1}" PGDATABASE=postgres PGCONNECT_TIMEOUT=4

mode=${1:-ready}
staging=$PGDATA.deckhand-new
# beside the data directory: the fence marker and the promotion note
beside=$(dirname "$PGDATA")
progress=$staging.progress
mark=$staging.probe

# clone_progressing: a clone is under way and its copied bytes grew within
# CLONE_STALL_SECONDS. pg_basebackup --progress writes "<done>/<total> kB"
# to the progress file at least once a second; the probe remembers the
# last value it saw and when it changed.
clone_progressing() {
	[ -d "$staging" ] && [ -f "$progress" ] || return 1
	done_kb=$(tail -c 512 "$progress" | tr '\r' '\n' | sed -n 's#^ *\([0-9][0-9]*\)/[0-9]* kB.*#\1#p' | tail -n 1)
	done_kb=${done_kb:-0}
	now=$(date +%s)
	seen_kb=
	seen_at=
	[ ! -f "$mark" ] || read -r seen_kb seen_at <"$mark" || true
	if [ "$done_kb" != "${seen_kb:-}" ] || [ -z "${seen_at:-}" ]; then
		printf '%s %s\n' "$done_kb" "$now" >"$mark"
		return 0
	fi
	[ $((now - seen_at)) -lt "${CLONE_STALL_SECONDS:-600}" ]
}

# slot_lost: this server is a standby that is not streaming, and the
# primary answers that its replication slot is lost: it can never catch
# up. Its restart makes bootstrap.sh move its data aside and clone again.
slot_lost() {
	receiver=$(psql -X -A -t -c "SELECT pg_is_in_recovery() AND NOT EXISTS (SELECT FROM pg_stat_wal_receiver WHERE status = 'streaming')" 2>/dev/null) || return 1
	[ "$receiver" = t ] || return 1
	lost=$(tls_client_env && PGUSER=$REPLICATION_USER PGPASSWORD=$REPLICATION_PASSWORD PGHOST=$PRIMARY_HOST PGPORT=$PRIMARY_PORT \
		psql -X -A -t -c "SELECT wal_status FROM pg_catalog.pg_replication_slots WHERE slot_name = 'deckhand_standby_${POD_NAME##*-}'" 2>/dev/null) || return 1
	[ "$lost" = lost ]
}

# promoted_replacing NAME: the operator promoted this server through its
# agent to replace NAME, the primary the pod named then and still names:
# the agent notes that name beside the data directory before pg_promote
# (instance.PromotedMarker) and removes the note once the pod names this
# pod. The key's new name reaches the pod only when the kubelet refreshes
# the mounted ConfigMap, minutes after an API-server outage; the promoted
# primary is ready meanwhile, as the agent's own guard leaves it running.
# Any other name (a third pod: a later failover replaced it too) is not
# excused.
promoted_replacing() {
	[ -f "$beside/deckhand-promoted" ] && [ "$(cat "$beside/deckhand-promoted")" = "$1" ]
}

# tls_converge: a renewed certificate (the mounted Secret's files changed)
# is copied; pg_hba.conf follows TLS becoming required or not (the file
# "tls" beside this script), and so does a standby's primary_conninfo
# (sslmode); then the server reloads (SIGHUP): sessions are kept, new
# connections and a restarted WAL receiver get the new settings.
tls_converge() {
	why=
	if tls_install; then
		why="server certificate changed in $TLS_DIR"
	fi
	before=$(sha256sum "$PGDATA/pg_hba.conf" 2>/dev/null || true)
	ensure_replication_hba "$PGDATA" 2>/dev/null
	if [ "$before" != "$(sha256sum "$PGDATA/pg_hba.conf" 2>/dev/null || true)" ]; then
		why="${why:+$why; }pg_hba.conf rewritten (TLS required: $(tls_required && echo yes || echo no))"
	fi
	want=$(tls_sslmode)
	conninfo=$(psql -X -A -t -v ON_ERROR_STOP=1 -c "SELECT CASE WHEN pg_is_in_recovery() THEN current_setting('primary_conninfo') END" 2>/dev/null || true)
	case $conninfo in
	*" sslmode=$want "* | *" sslmode=$want") ;;
	*" sslmode="*)
		CONNINFO=$(printf '%s' "$conninfo" | sed "s/ sslmode=[a-z-]*/ sslmode=$want/") psql -X -q -v ON_ERROR_STOP=1 >/dev/null 2>&1 <<-'SQL' &&
		\getenv c CONNINFO
		ALTER SYSTEM SET primary_conninfo = :'c';
		SQL
			why="${why:+$why; }primary_conninfo sslmode=$want"
		;;
	esac
	unset conninfo
	if [ -n "$why" ] && pg_ctl -D "$PGDATA" reload >/dev/null 2>&1; then
		log "$why: reloaded"
	fi
}

# server_running: postmaster.pid names this port, says "ready" (its
# eighth line: a primary running, or a standby open to read-only
# sessions) and its PID runs: what pg_ctl -w waits for. The readiness
# probe asks the server itself next; this look forks nothing, where
# pg_isready cost a process and a backend every 5 s.
server_running() {
	{ read -r pm_pid && read -r _ && read -r _ && read -r pm_port && read -r _ && read -r _ && read -r _ && read -r pm_status; } 2>/dev/null <"$PGDATA/postmaster.pid" || return 1
	[ "$pm_status" = ready ] && [ "$pm_port" = "$PGPORT" ] && kill -0 "$pm_pid" 2>/dev/null
}

# wake_checkpointer: once per server start (postmaster.pid's PID and start
# time, noted beside PGDATA), on a primary that archives with
# archive_timeout, reloads the server. PostgreSQL (15 and later) starts
# its checkpointer while the startup process still runs, and the
# checkpointer's first sleep, computed then, leaves archive_timeout out
# (it counts only outside recovery): for the first checkpoint_timeout (5
# minutes by default) after a start, no segment was ended at
# archive_timeout, and the archive's newest recoverable point lagged by
# minutes. A reload wakes the checkpointer, which then sleeps at most
# archive_timeout. A promotion wakes it itself.
# It runs at every probe, so the look at the marker forks nothing.
wake_checkpointer() {
	{ read -r pid && read -r _ && read -r started_at; } 2>/dev/null <"$PGDATA/postmaster.pid" || return 0
	started="$pid $started_at"
	woken=
	read -r woken 2>/dev/null <"$beside/deckhand-checkpointer-woken" || true
	[ "$woken" != "$started" ] || return 0
	archiving=$(psql -X -A -t -v ON_ERROR_STOP=1 -c "SELECT current_setting('archive_mode') <> 'off' AND setting::int > 0 FROM pg_catalog.pg_settings WHERE name = 'archive_timeout'" 2>/dev/null) || return 0
	if [ "$archiving" = t ]; then
		psql -X -q -A -t -v ON_ERROR_STOP=1 -c "SELECT pg_catalog.pg_reload_conf()" >/dev/null 2>&1 || return 0
	fi
	printf '%s\n' "$started" >"$beside/deckhand-checkpointer-woken" 2>/dev/null || true
}

# restarted_recently: the server started again after a fence less than
# an hour ago (bootstrap.sh writes the Unix time of that start, once the
# fence is lifted, into deckhand-restarted in DECKHAND_ROLE_DIR). Its
# supervisor started the entrypoint again without restarting the
# container, so the startup probe does not run again: this gives the
# start after a demotion (the wait for the new primary, pg_rewind, the
# replay after it) the hour the startup probe gives a first start
# (ServerPod: 360 tries 10 s apart).
restarted_recently() {
	[ -n "${DECKHAND_ROLE_DIR:-}" ] || return 1
	since=
	read -r since 2>/dev/null <"$DECKHAND_ROLE_DIR/deckhand-restarted" || return 1
	case $since in '' | *[!0-9]*) return 1 ;; esac
	[ $(($(date +%s) - since)) -lt 3600 ]
}

case $mode in
live)
	# A fenced server is down on purpose (bootstrap.sh waits for the
	# fence to be lifted): restarting its container would change nothing.
	if [ -e "$beside/deckhand-fenced" ]; then
		exit 0
	fi
	# Replaying an archive before it serves (bootstrap.sh
	# recover_to_target), for as long as that takes.
	if [ -s "$beside/deckhand-recovering" ] && kill -0 "$(cat "$beside/deckhand-recovering")" 2>/dev/null; then
		exit 0
	fi
	# Waiting for the operator's word on its role, on purpose too.
	if [ -n "${DECKHAND_ROLE_DIR:-}" ] && [ -e "$DECKHAND_ROLE_DIR/deckhand-role-wait" ]; then
		exit 0
	fi
	if pg_isready -q -p "$PGPORT"; then
		# The start after a fence is over (see restarted_recently); the
		# test forks nothing at the probes that find no marker.
		[ ! -e "${DECKHAND_ROLE_DIR:-/nonexistent}/deckhand-restarted" ] || rm -f "$DECKHAND_ROLE_DIR/deckhand-restarted"
		if slot_lost; then
			echo "the primary reports this standby's replication slot lost: restarting to clone it again" >&2
			exit 1
		fi
		exit 0
	fi
	clone_progressing && exit 0
	restarted_recently && exit 0
	exit 1
	;;
ready)
	# A fenced server takes no traffic, even while its fence's shutdown
	# is under way.
	if [ -e "$beside/deckhand-fenced" ]; then
		echo "fenced: not ready" >&2
		exit 1
	fi
	server_running || {
		echo "the server is not accepting connections (postmaster.pid)" >&2
		exit 1
	}
	[ -z "${TLS_DIR:-}" ] || tls_converge
	state=$(psql -X -A -t -v ON_ERROR_STOP=1 -c "SELECT CASE WHEN pg_is_in_recovery() THEN coalesce((SELECT status FROM pg_stat_wal_receiver), 'no WAL receiver') ELSE 'primary' END" 2>&1) || {
		echo "cannot ask the server: $state" >&2
		exit 1
	}
	named_primary=$(cat "$(dirname "$0")/primary" 2>/dev/null || true)
	if [ -n "$named_primary" ]; then
		if [ "$state" = primary ] && [ "$POD_NAME" != "$named_primary" ] && ! promoted_replacing "$named_primary"; then
			echo "this server runs as a primary, but the operator names $named_primary the primary: not ready (it rejoins as a standby at its next start)" >&2
			exit 1
		fi
		if [ "$state" != primary ] && [ "$POD_NAME" = "$named_primary" ]; then
			echo "the operator names this pod the primary, but its server is in recovery (WAL receiver: $state): not ready until it runs as the primary" >&2
			exit 1
		fi
	fi
	case $state in
	primary)
		wake_checkpointer
		replicas_file=$(dirname "$0")/replicas
		if [ -f "$replicas_file" ]; then
			replicas=$(cat "$replicas_file")
			case $replicas in '' | *[!0-9]*) exit 0 ;; esac
			psql -X -q -A -t -v ON_ERROR_STOP=1 -v replicas="$replicas" >/dev/null 2>&1 <<-'SQL' || true
			SELECT pg_catalog.pg_drop_replication_slot(slot_name) FROM pg_catalog.pg_replication_slots
			 WHERE slot_name ~ '^deckhand_standby_[0-9]+$' AND NOT active
			   AND substring(slot_name from '[0-9]+$')::int >= :replicas
			SQL
		fi
		exit 0
		;;
	streaming) exit 0 ;;
	*)
		echo "standby is not streaming from the primary (WAL receiver: $state)" >&2
		exit 1
		;;
	esac
	;;
*)
	echo "usage: probe.sh ready|live" >&2
	exit 2
	;;
esac
