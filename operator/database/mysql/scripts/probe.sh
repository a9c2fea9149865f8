#!/bin/sh
# deckhand: the probes of a MySQL or MariaDB server.
#
# "ready": the server answers a query as root (the Secret's password), on
# a replica only while both replication threads run. "alive": the server
# answers at all (ping succeeds even when a password is refused, so a
# changed password never gets a running server killed).
#
# Environment: PORT, MYSQL_PWD, POD_NAME.
set -eu
. "$(dirname "$0")/lib.sh"
pick_commands

case ${1:-ready} in
alive)
	exec "$ADMIN" -h 127.0.0.1 -P "$PORT" -uroot --connect-timeout=3 ping >/dev/null
	;;
ready)
	version=$(query 127.0.0.1 "$PORT" 'SELECT VERSION()')
	[ "${POD_NAME##*-}" = 0 ] && exit 0
	if [ "$(flavor "$version")" = mysql ] && version_at_least "$version" 8 0 22; then
		status=$("$CLIENT" -h 127.0.0.1 -P "$PORT" -uroot -e 'SHOW REPLICA STATUS\G')
		running='Replica_(IO|SQL)_Running: Yes'
	else
		status=$("$CLIENT" -h 127.0.0.1 -P "$PORT" -uroot -e 'SHOW SLAVE STATUS\G')
		running='Slave_(IO|SQL)_Running: Yes'
	fi
	[ "$(printf '%s\n' "$status" | grep -cE "$running")" = 2 ]
	;;
esac
