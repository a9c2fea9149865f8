#!/bin/sh
# deckhand: the probes of a MySQL or MariaDB server.
#
# "ready": the server answers a query as root (the Secret's password,
# through its socket), on a replica only while both replication threads
# run. "alive": the server answers at all (ping succeeds even when a
# password is refused, so a changed password never gets a running server
# killed).
#
# With TLS, "ready" also keeps the running server in line with the
# mounted files, without a restart (lib.sh, TLS): a renewed certificate is
# loaded, require_secure_transport follows the file "tls" beside the
# scripts, and a replica's replication connection verifies the primary
# exactly while TLS is required.
#
# Environment: PORT, MYSQL_PWD, MYSQL_UNIX_PORT, POD_NAME; with TLS,
# TLS_DIR and TLS_CA_FILE.
set -eu
. "$(dirname "$0")/lib.sh"
pick_commands

# reload_renewed_certificate VERSION: the server reads its certificate and
# key again when the Secret's files differ from those it loaded.
reload_renewed_certificate() {
	[ -n "${TLS_DIR:-}" ] || return 0
	loaded=${MYSQL_UNIX_PORT%/*}/$TLS_LOADED_FILE
	sum=$(tls_files_sum)
	[ "$sum" = "$(cat "$loaded" 2>/dev/null || true)" ] && return 0
	sql_reload_tls "$1" | local_client
	printf '%s\n' "$sum" >"$loaded"
	log "loaded the renewed certificate of $TLS_DIR"
}

# require_transport REQUIRED: require_secure_transport as the file "tls"
# says (REQUIRED is the server's current value, 0 or 1).
require_transport() {
	want=0
	if [ -n "${TLS_DIR:-}" ] && tls_required; then want=1; fi
	[ "$1" = "$want" ] && return 0
	local_client -e "SET GLOBAL require_secure_transport = $want;"
	log "require_secure_transport set to $want"
}

# verify_replication VERSION STATUS: the replication connection verifies
# the primary exactly while TLS is required (STATUS: SHOW REPLICA STATUS).
verify_replication() {
	verifying=$(printf '%s\n' "$2" | sed -n 's/^ *\(Master\|Source\)_SSL_Verify_Server_Cert: //p')
	# No replication configured: nothing to change (and not ready, below).
	[ -n "$verifying" ] || return 0
	want=0 want_word=No
	if tls_required; then want=1 want_word=Yes; fi
	[ "$verifying" = "$want_word" ] && return 0
	sql_replication_tls "$1" "$want" | local_client
	log "replication: verifying the primary's certificate set to $want_word"
}

case ${1:-ready} in
alive)
	exec "$ADMIN" -h 127.0.0.1 -P "$PORT" -uroot --connect-timeout=3 ping >/dev/null
	;;
ready)
	# shellcheck disable=SC2046 # the version and the setting
	set -- $(local_query 'SELECT VERSION(), @@require_secure_transport')
	version=$1
	reload_renewed_certificate "$version"
	require_transport "$2"
	[ "${POD_NAME##*-}" = 0 ] && exit 0
	if [ "$(flavor "$version")" = mysql ] && version_at_least "$version" 8 0 22; then
		status=$(local_client -e 'SHOW REPLICA STATUS\G')
		running='Replica_(IO|SQL)_Running: Yes'
	else
		status=$(local_client -e 'SHOW SLAVE STATUS\G')
		running='Slave_(IO|SQL)_Running: Yes'
	fi
	verify_replication "$version" "$status"
	[ "$(printf '%s\n' "$status" | grep -cE "$running")" = 2 ]
	;;
esac
