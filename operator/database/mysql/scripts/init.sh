#!/bin/sh
# deckhand: the init Job of a MySQL or MariaDB cluster.
#
# Waits for the primary, then creates the app database and the account
# that owns it, each only if missing (a second run changes nothing; an
# existing account keeps its password). Without APP_DATABASE (a
# MySQLCluster names none) it only reports the version.
#
# Writes what it found as JSON to the termination message, which the
# operator reads from the Job's pod: {"serverVersion": "..."}.
#
# Environment (set by the Job): PRIMARY_HOST, PRIMARY_PORT, MYSQL_PWD
# (root's password), APP_DATABASE, APP_USER, APP_PASSWORD,
# TERMINATION_MESSAGE_PATH; PRIMARY_WAIT_SECONDS (default 600); with TLS,
# TLS_CA_FILE (lib.sh).
set -eu
. "$(dirname "$0")/lib.sh"
pick_commands

wait_for "$PRIMARY_HOST" "$PRIMARY_PORT"
version=$(query "$PRIMARY_HOST" "$PRIMARY_PORT" 'SELECT VERSION()')
if [ -n "${APP_DATABASE:-}" ]; then
	{
		say "CREATE DATABASE IF NOT EXISTS $(sql_ident "$APP_DATABASE");"
		say "CREATE USER IF NOT EXISTS $(sql_string "$APP_USER")@'%' IDENTIFIED BY $(sql_string "$APP_PASSWORD");"
		sql_grant_database "$APP_DATABASE" "$APP_USER"
	} | remote "$PRIMARY_HOST" "$PRIMARY_PORT"
	log "database and account are in place"
fi
report serverVersion="$version"
log "server version $version"
