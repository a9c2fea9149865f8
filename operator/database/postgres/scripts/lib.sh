# deckhand: functions the PostgreSQL scripts share. Sourced by them (from
# the same directory of the scripts ConfigMap), never run on its own.
#
# Uses only what PostgreSQL 15 to 18 and the official images (Debian and
# Alpine: coreutils or busybox) share.

script=${0##*/}
script=${script%.sh}

log() { printf '%s %s: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$script" "$*" >&2; }

fail() {
	log "$*"
	exit 1
}

# wait_for_server: until the server at PGHOST:PGPORT accepts connections,
# for at most SERVER_WAIT_SECONDS (default 600).
wait_for_server() {
	waited=0
	until pg_isready -q; do
		if [ "$waited" -ge "${SERVER_WAIT_SECONDS:-600}" ]; then
			fail "the server at $PGHOST:$PGPORT did not accept connections within ${waited}s"
		fi
		log "waiting for the server at $PGHOST:$PGPORT"
		sleep 2
		waited=$((waited + 2))
	done
}

# conninfo_value VALUE: VALUE quoted for a libpq connection string
# (single quotes, with quotes and backslashes backslash-escaped).
conninfo_value() {
	printf "'%s'" "$(printf '%s' "$1" | sed "s/[\\\\']/\\\\&/g")"
}

# app_dbname: a connection string that names APP_DATABASE and nothing else.
# libpq reads a dbname argument (pg_dump --dbname, psql -d) that holds "="
# or starts with "postgresql://" as a connection string of its own: a
# database named "dbname=postgres host=elsewhere" would connect elsewhere.
# Quoted as the value of dbname= (the manual's advice), a name is only a
# name.
app_dbname() {
	printf 'dbname=%s' "$(conninfo_value "$APP_DATABASE")"
}

# json_string VALUE: VALUE as a JSON string (quotes and backslashes
# escaped; the values here hold no control characters).
json_string() {
	printf '"%s"' "$(printf '%s' "$1" | sed 's/[\\"]/\\&/g')"
}

# sha256_of FILE: the file's SHA-256, in lower-case hex.
sha256_of() {
	sha256sum "$1" | cut -d ' ' -f 1
}

# check_sha256 FILE EXPECTED: refuses a missing file or one whose content
# is not the backup's.
check_sha256() {
	[ -f "$1" ] || fail "backup file $1 not found: refusing to restore"
	[ -n "$2" ] || fail "no SHA-256 given for $1: refusing to restore a file that cannot be checked"
	actual=$(sha256_of "$1")
	expected=$(printf '%s' "$2" | tr 'A-F' 'a-f')
	if [ "$actual" != "$expected" ]; then
		fail "backup file $1 has SHA-256 $actual, but the backup recorded $expected: the file is damaged or is not that backup; refusing to restore it"
	fi
	log "backup file $1: SHA-256 $actual as recorded"
}

# init_datadir DIR: a new cluster whose superuser (PGUSER) has the password
# PGPASSWORD, reached from other pods with a password only. Its pg_hba.conf
# is deckhand's own: initdb's default lets every role replicate over the
# loopback address; here no TCP replication connection is allowed until
# ensure_replication_hba (bootstrap.sh, at every start of the primary)
# admits the replication role. With INITDB_NO_SYNC set, initdb does not
# wait for its files to reach the disk (a scratch cluster that is thrown
# away).
init_datadir() {
	# initdb reads the password from a file: keep it off the command line.
	pwfile=$(mktemp)
	trap 'rm -f "$pwfile"' EXIT
	printf '%s\n' "$PGPASSWORD" >"$pwfile"
	initdb -D "$1" --username="$PGUSER" --pwfile="$pwfile" \
		--auth-local=trust --auth-host=scram-sha-256 \
		--encoding=UTF8 --locale=C --data-checksums ${INITDB_NO_SYNC:+--no-sync} >&2
	rm -f "$pwfile"
	trap - EXIT
	cat >"$1/pg_hba.conf" <<-'HBA'
	# deckhand: pg_hba.conf of a Database's data directory. The first line
	# that matches a connection decides. Inside the pod, over the Unix
	# socket: trust (as initdb's default).
	local all all trust
	local replication all trust

	# deckhand: clients from other pods, with a password
	host all all all scram-sha-256
	HBA
}

# ensure_replication_hba DIR: DIR's pg_hba.conf admits replication
# connections over TCP from the replication role (REPLICATION_USER), with a
# password, and from no other role through a line deckhand wrote: the
# "host replication all all" line that init_datadir wrote before deckhand
# had a replication role is removed (only inside a block that starts with
# a "# deckhand:" comment and ends at a blank line; a line the user wrote is
# left alone). With TLS required (TLS_DIR set, tls_required) deckhand's
# lines for other hosts are hostssl: a connection without TLS matches none
# of them and is refused; otherwise they are host. Changes the file only when something is
# missing or of the other type, in one rename.
ensure_replication_hba() {
	hba=$1/pg_hba.conf
	type=host
	if [ -n "${TLS_DIR:-}" ] && tls_required; then
		type=hostssl
	fi
	rule="$type replication $REPLICATION_USER all scram-sha-256"
	# What a start killed before its rename left.
	rm -f "$hba".deckhand-*
	new=$(mktemp "$hba.deckhand-XXXXXX")
	awk -v rule="$rule" -v type="$type" -v user="$REPLICATION_USER" '
		/^# deckhand:/ { block = 1 }
		/^[ \t]*$/ { block = 0 }
		block && NF == 5 && $1 == "host" && $2 == "replication" && $3 == "all" && $4 == "all" && $5 == "scram-sha-256" { dropped = 1; next }
		block && NF == 5 && ($1 == "host" || $1 == "hostssl") && $1 != type && $4 == "all" && $5 == "scram-sha-256" &&
			(($2 == "all" && $3 == "all") || ($2 == "replication" && $3 == user)) {
			$0 = type " " $2 " " $3 " " $4 " " $5
			dropped = 1
		}
		{ print }
		$0 == rule { found = 1 }
		END {
			if (!found) {
				print ""
				print "# deckhand: standbys replicate as the replication role only, with a password"
				print rule
			}
			exit (dropped || !found) ? 0 : 3
		}' "$hba" >"$new" || status=$?
	case ${status:-0} in
	0)
		chmod 600 "$new"
		mv "$new" "$hba"
		log "$hba: replication connections over TCP only for $REPLICATION_USER; connections from other hosts: $type"
		;;
	3) rm -f "$new" ;;
	*)
		rm -f "$new"
		fail "could not rewrite $hba"
		;;
	esac
	unset status
}

# tls_required: TLS is required, not only offered: the file "tls" beside
# this script (the scripts ConfigMap's key) says "required", which the
# operator writes once every server of the Database runs with its
# certificate. Until then (TLS being turned on or off under running
# servers) the servers accept connections without TLS and the scripts ask
# for TLS without requiring it, so a server restarted first still reaches
# one that is not.
tls_required() {
	[ "$(cat "$(dirname "$0")/tls" 2>/dev/null || true)" = required ]
}

# tls_sslmode: how this pod connects to another server: verify-full with
# TLS required, prefer while TLS is being turned on or off, nothing
# without TLS (TLS_CA_FILE unset).
tls_sslmode() {
	if [ -z "${TLS_CA_FILE:-}" ]; then
		return 0
	elif tls_required; then
		printf verify-full
	else
		printf prefer
	fi
}

# tls_client_env: with TLS_CA_FILE set (a Database with TLS), every
# connection libpq makes from here to another server is encrypted and
# verifies the server's certificate against that CA bundle and the name
# dialled (sslmode=verify-full; prefer while TLS is not yet required).
# Connections over the Unix socket are not affected.
tls_client_env() {
	mode=$(tls_sslmode)
	if [ -n "$mode" ]; then
		export PGSSLMODE="$mode" PGSSLROOTCERT="$TLS_CA_FILE"
	fi
}

# tls_conninfo: the same, as words of a libpq connection string ("" without
# TLS).
tls_conninfo() {
	mode=$(tls_sslmode)
	if [ -n "$mode" ]; then
		printf ' sslmode=%s sslrootcert=%s' "$mode" "$(conninfo_value "$TLS_CA_FILE")"
	fi
}

# tls_install: with TLS_DIR set (the server TLS Secret, mounted), copies its
# tls.crt and tls.key into TLS_RUN_DIR, the key with mode 0600 (PostgreSQL
# refuses a key others can read, and a Secret volume's files are root's),
# each renamed into place. Returns 0 when it copied (the files changed, or
# were not there), 1 when the copies are current or there is no TLS.
tls_install() {
	[ -n "${TLS_DIR:-}" ] || return 1
	[ -f "$TLS_DIR/tls.crt" ] && [ -f "$TLS_DIR/tls.key" ] || fail "TLS is on but $TLS_DIR holds no tls.crt and tls.key"
	if [ -f "$TLS_RUN_DIR/tls.crt" ] && [ -f "$TLS_RUN_DIR/tls.key" ] &&
		[ "$(cat "$TLS_DIR/tls.crt" "$TLS_DIR/tls.key" | sha256sum)" = "$(cat "$TLS_RUN_DIR/tls.crt" "$TLS_RUN_DIR/tls.key" | sha256sum)" ]; then
		return 1
	fi
	(
		umask 077
		cp "$TLS_DIR/tls.key" "$TLS_RUN_DIR/tls.key.new"
		cp "$TLS_DIR/tls.crt" "$TLS_RUN_DIR/tls.crt.new"
	) || fail "could not copy the server certificate into $TLS_RUN_DIR"
	chmod 600 "$TLS_RUN_DIR/tls.key.new"
	mv "$TLS_RUN_DIR/tls.key.new" "$TLS_RUN_DIR/tls.key"
	mv "$TLS_RUN_DIR/tls.crt.new" "$TLS_RUN_DIR/tls.crt"
	return 0
}

# restore_marker FILE SHA256: what a restore writes as the comment of the
# database it restored, in the restore's own transaction.
restore_marker() {
	printf 'deckhand: restored from %s (sha256 %s)' "${1##*/}" "$2"
}

# restore_app_database FILE SHA256: restores the dump FILE into
# APP_DATABASE on the server at PGHOST:PGPORT, creating the database (owned
# by APP_USER) and the role (LOGIN, no password: init.sh gives it one) if
# missing.
#
# All or nothing, and at most once: the restore is one transaction that
# ends by commenting the database with restore_marker. A database that
# carries the marker is already restored (a retried Job succeeds without
# touching it); a database that holds anything else is refused, never
# cleaned: the restore never drops what it did not write.
restore_app_database() {
	psql -X -q -v ON_ERROR_STOP=1 -d postgres <<-'SQL'
	\getenv appdb APP_DATABASE
	\getenv approle APP_USER
	SELECT format('CREATE ROLE %I LOGIN', :'approle')
	 WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = :'approle') \gexec
	SELECT format('CREATE DATABASE %I OWNER %I', :'appdb', :'approle')
	 WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_database WHERE datname = :'appdb') \gexec
	SQL
	marker=$(restore_marker "$1" "$(printf '%s' "$2" | tr 'A-F' 'a-f')")
	current=$(current_marker)
	if [ "$current" = "$marker" ]; then
		log "database $APP_DATABASE was already restored from this backup: nothing to do"
		return 0
	fi
	objects=$(psql -X -A -t -v ON_ERROR_STOP=1 -d "$(app_dbname)" <<-'SQL'
	SELECT (SELECT count(*) FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
	         WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname !~ '^pg_(toast|temp)')
	     + (SELECT count(*) FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
	         WHERE n.nspname NOT IN ('pg_catalog', 'information_schema'))
	     + (SELECT count(*) FROM pg_catalog.pg_namespace
	         WHERE nspname NOT IN ('public', 'pg_catalog', 'information_schema') AND nspname !~ '^pg_')
	     + (SELECT count(*) FROM pg_catalog.pg_extension WHERE extname <> 'plpgsql')
	SQL
	)
	if [ "$objects" != 0 ]; then
		fail "database $APP_DATABASE already holds $objects objects that no restore of this backup wrote${current:+ (its comment: $current)}: refusing to restore over them"
	fi

	log "restoring ${1##*/} into database $APP_DATABASE, owned by $APP_USER"
	status=$(mktemp -d)
	# pg_restore writes SQL that psql runs in one transaction. COMMIT is
	# written only after pg_restore succeeded: if it fails part-way, psql
	# reaches the end of its input inside the transaction and the server
	# rolls it back. Every object is created by APP_USER (--role), who owns
	# the database; owners and grants of the source are not restored (a
	# backup holds no roles).
	{
		printf 'BEGIN;\n'
		if ! pg_restore --no-owner --no-privileges --role="$APP_USER" -f - "$1"; then
			: >"$status/pg_restore"
			exit 0
		fi
		printf 'RESET ROLE;\n'
		printf 'SELECT format(%s, current_database(), :%s) \\gexec\n' "'COMMENT ON DATABASE %I IS %L'" "'marker'"
		printf 'COMMIT;\n'
	} | if ! psql -X -q -v ON_ERROR_STOP=1 -v marker="$marker" -d "$(app_dbname)" >/dev/null; then
		: >"$status/psql"
	fi
	# psql first: when it stops, pg_restore fails writing to the pipe.
	if [ -e "$status/psql" ]; then
		rm -rf "$status"
		fail "restoring ${1##*/}: psql stopped at the error above: nothing was restored"
	elif [ -e "$status/pg_restore" ]; then
		rm -rf "$status"
		fail "pg_restore could not read ${1##*/} (above): nothing was restored"
	fi
	rm -rf "$status"
	# The marker is the proof: it commits with the data or not at all.
	[ "$(current_marker)" = "$marker" ] || fail "the restore of ${1##*/} did not commit: nothing was restored"
	log "restored ${1##*/} into database $APP_DATABASE"
}

# current_marker: APP_DATABASE's comment.
current_marker() {
	psql -X -A -t -v ON_ERROR_STOP=1 -d postgres <<-'SQL'
	\getenv appdb APP_DATABASE
	SELECT coalesce(pg_catalog.shobj_description(oid, 'pg_database'), '') FROM pg_catalog.pg_database WHERE datname = :'appdb'
	SQL
}

# check_data_owner DIR: the data directory DIR belongs to the user the
# server runs as (the pod's runAsUser), or the server stops here with a
# message naming both owners. The user is fixed before any container runs
# and PostgreSQL refuses a data directory of another owner, so a mismatch
# can only be reported: as JSON in the termination message (the operator
# reads it into the Ready condition, reason DataDirectoryOwnerMismatch),
# and in the log.
check_data_owner() {
	found=$(stat -c %u "$1")
	expected=$(id -u)
	[ "$found" = "$expected" ] && return 0
	printf '{"dataDirectory":%s,"dataOwner":"%s","runAsUser":"%s"}\n' "$(json_string "$1")" "$found" "$expected" \
		>"${TERMINATION_MESSAGE_PATH:-/dev/termination-log}" || true
	fail "the data directory $1 belongs to uid $found, but the server runs as uid $expected: set runAsUser to $found in the spec if the image's server user is $found"
}

# table_counts OUT: writes to OUT one line per table of the database psql connects to,
# "<schema>.<table>\t<rows>" (each name as quote_ident writes it), sorted
# byte-wise: the format of the counts file beside a dump (engine.CountsSuffix).
# Counted with count(*) in psql's own transaction: a backup runs it inside
# the dump's exported snapshot (SNAPSHOT set: SET TRANSACTION SNAPSHOT), so
# it counts exactly the rows pg_dump reads. The tables are those pg_dump
# dumps the rows of: ordinary tables (partitions count as themselves; a
# partitioned parent holds no rows of its own) outside the system schemas,
# not members of an extension.
table_counts() {
	counted=$(mktemp)
	table_counts_sql | psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$(app_dbname)" >"$counted" || {
		rm -f "$counted"
		return 1
	}
	LC_ALL=C sort "$counted" >"$1"
	rm -f "$counted"
}

# table_counts_sql: the SQL table_counts runs (one "<table>\t<rows>" line
# per table, unsorted), for a caller that runs it alongside other work.
table_counts_sql() {
	{
		printf 'BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY;\n'
		[ -z "${SNAPSHOT:-}" ] || printf "SET TRANSACTION SNAPSHOT '%s';\n" "$SNAPSHOT"
		cat <<-'SQL'
		SELECT format('SELECT %L || E''\t'' || count(*) FROM %I.%I', quote_ident(n.nspname) || '.' || quote_ident(c.relname), n.nspname, c.relname)
		  FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		 WHERE c.relkind = 'r' AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname !~ '^pg_(toast|temp)'
		   AND NOT EXISTS (SELECT FROM pg_catalog.pg_depend d WHERE d.classid = 'pg_catalog.pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e')
		 ORDER BY 1 \gexec
		COMMIT;
		SQL
	}
}

# counts_summary FILE: "<tables> <rows>" of a counts file.
counts_summary() {
	[ -f "$1" ] || {
		echo "0 0"
		return 0
	}
	awk -F '\t' '{ n++; rows += $2 } END { printf "%d %d\n", n, rows }' "$1"
}

# json_text VALUE: VALUE as a JSON string, also for a tool's messages: each
# control character (newline, tab) becomes a space, and at most 400
# characters are kept (a termination message holds 4 KiB).
json_text() {
	json_string "$(printf '%s' "$1" | tr '\001-\037' ' ' | cut -c 1-400)"
}

# check NAME PASSED [MESSAGE]: one check of a verification (verify.sh,
# verify-base.sh), appended in order to $checks, the Report's JSON list.
check() {
	message=
	[ -z "${3:-}" ] || message=,\"message\":$(json_text "$3")
	entry=$(printf '{"name":%s,"passed":%s%s}' "$(json_string "$1")" "$2" "$message")
	checks=${checks:+$checks,}$entry
	if [ "$2" = true ]; then
		log "check $1 passed"
	else
		log "check $1 FAILED: $3"
	fi
}

# ask_role DIR FENCE: asks the operator, through the instance agent, which
# pod is the primary, and prints its answer. The question is a token of
# this run in DIR/deckhand-role-asked; the agent writes "<token> <pod>" to
# DIR/deckhand-role-answer when the operator answers (POST /role; the Go
# side is instance/role.go). Returns 2, the question withdrawn, once the
# file FENCE exists (the server was fenced while it waited).
ask_role() {
	asked=$1/deckhand-role-asked
	answer=$1/deckhand-role-answer
	token=$$.$(date +%s%N)
	rm -f "$answer"
	printf '%s\n' "$token" >"$asked.tmp"
	mv "$asked.tmp" "$asked"
	while :; do
		if [ -e "$2" ]; then
			rm -f "$asked"
			return 2
		fi
		reply=$(cat "$answer" 2>/dev/null || true)
		case $reply in "$token "*) break ;; esac
		sleep 0.2
	done
	rm -f "$asked" "$answer"
	printf '%s\n' "${reply#"$token "}"
}
