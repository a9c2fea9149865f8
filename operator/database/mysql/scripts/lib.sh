# deckhand: shared functions of the MySQL/MariaDB scripts (sourced, not run).
#
# Everything that differs between MySQL and MariaDB is decided here, from
# the server's own version string ("8.4.8" or "10.11.19-MariaDB-..."): the
# command names, the replication statements, the GTID syntax and the
# authentication plugin of the replication user. The sql_* functions only
# print statements, so tests can check the MySQL branch without a MySQL
# server (Debian ships MariaDB only).
#
# Secrets reach the client through MYSQL_PWD (the root password) and the
# statements on stdin, never through a command line.

# The replication account the replicas connect as.
REPLICATION_USER=deckhand_repl

# say LINE: LINE as it is (dash's echo would read backslashes in it).
say() { printf '%s\n' "$*"; }

log() { printf '%s %s: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "${0##*/}" "$*" >&2; }

# pick_commands sets CLIENT, DUMP, ADMIN, SERVER and INSTALL_DB: MariaDB
# 11 images have only the mariadb* names; MySQL images only mysql*.
pick_commands() {
	if command -v mariadb >/dev/null 2>&1; then
		CLIENT=mariadb DUMP=mariadb-dump ADMIN=mariadb-admin SERVER=mariadbd INSTALL_DB=mariadb-install-db
	else
		CLIENT=mysql DUMP=mysqldump ADMIN=mysqladmin SERVER=mysqld INSTALL_DB=
	fi
}

# server_version: the server binary's version ("8.4.8",
# "10.11.19-MariaDB-0+deb12u1"), as SELECT VERSION() says it.
server_version() {
	"$SERVER" --version | sed -n 's/.* Ver \([^ ]*\).*/\1/p'
}

# TLS (a cluster with TLS on): the servers present the certificate of the
# mounted Secret (TLS_DIR), and TLS_CA_FILE is the CA bundle the scripts
# verify the servers with. The file "tls" beside the scripts says
# "required" once every server presents it: from then on the servers
# refuse connections without TLS from other hosts
# (require_secure_transport; the socket is exempt), replicas replicate over
# TLS, and every client verifies the server's certificate and name. Until
# then (TLS being turned on or off under running servers) nothing is
# required or verified, so a server restarted first still reaches one that
# is not. The file changes without a restart: the readiness probe applies
# it (probe.sh).

# tls_required: TLS is required, not only offered.
tls_required() {
	[ -n "${TLS_CA_FILE:-}" ] && [ "$(cat "$(dirname "$0")/tls" 2>/dev/null || true)" = required ]
}

# client_flavor: mariadb or mysql, the family of the client tools (whose
# TLS options differ).
client_flavor() {
	case $("$CLIENT" --version) in
	*MariaDB*) say mariadb ;;
	*) say mysql ;;
	esac
}

# tls_client_args: the options that make a client (or the dump tool)
# verify the server's certificate and name against TLS_CA_FILE, once TLS
# is required; none before.
tls_client_args() {
	tls_required || return 0
	if [ "$(client_flavor)" = mariadb ]; then
		say "--ssl-ca=$TLS_CA_FILE"
		say "--ssl-verify-server-cert"
	else
		say "--ssl-mode=VERIFY_IDENTITY"
		say "--ssl-ca=$TLS_CA_FILE"
	fi
}

# remote HOST PORT ARGS...: the client, as root, connected to another
# server, verifying it once TLS is required.
remote() {
	_host=$1 _port=$2
	shift 2
	# shellcheck disable=SC2046 # one option per line
	"$CLIENT" -h "$_host" -P "$_port" -uroot $(tls_client_args) "$@"
}

# server_tls_args: a server's TLS settings: the mounted certificate and
# key, and require_secure_transport once TLS is required.
server_tls_args() {
	[ -n "${TLS_DIR:-}" ] || return 0
	say "--ssl-cert=$TLS_DIR/tls.crt"
	say "--ssl-key=$TLS_DIR/tls.key"
	if tls_required; then say "--require-secure-transport=ON"; fi
	return 0
}

# tls_files_sum: the checksum of the mounted certificate and key, which the
# server recorded at start (TLS_LOADED_FILE) and the probe compares to
# reload a renewed pair.
tls_files_sum() {
	cat "$TLS_DIR/tls.crt" "$TLS_DIR/tls.key" | sha256sum | cut -d ' ' -f 1
}
TLS_LOADED_FILE=deckhand-tls.sha256

# sql_reload_tls VERSION: the statement that makes a running server read
# its certificate and key again.
sql_reload_tls() {
	if [ "$(flavor "$1")" = mariadb ]; then
		say "FLUSH SSL;"
	else
		say "ALTER INSTANCE RELOAD TLS;"
	fi
}

# sql_replication_tls VERSION VERIFY: a replica's replication connection
# verifying the primary's certificate and name against TLS_CA_FILE (VERIFY
# 1), or not (0), its threads stopped and started around the change (the
# rest of its settings, the GTID position included, are kept).
sql_replication_tls() {
	if [ "$2" = 1 ]; then _ca=$(sql_string "$TLS_CA_FILE"); else _ca="''"; fi
	if [ "$(flavor "$1")" = mariadb ]; then
		say "STOP SLAVE;"
		say "CHANGE MASTER TO MASTER_SSL=$2, MASTER_SSL_CA=$_ca, MASTER_SSL_VERIFY_SERVER_CERT=$2;"
		say "START SLAVE;"
	elif version_at_least "$1" 8 0 23; then
		say "STOP REPLICA;"
		say "CHANGE REPLICATION SOURCE TO SOURCE_SSL=$2, SOURCE_SSL_CA=$_ca, SOURCE_SSL_VERIFY_SERVER_CERT=$2;"
		say "START REPLICA;"
	else
		say "STOP SLAVE;"
		say "CHANGE MASTER TO MASTER_SSL=$2, MASTER_SSL_CA=$_ca, MASTER_SSL_VERIFY_SERVER_CERT=$2;"
		say "START SLAVE;"
	fi
}

# wait_for HOST PORT: until the server there answers a query as root
# (PRIMARY_WAIT_SECONDS, default 600; 0 waits forever).
wait_for() {
	_waited=0
	until _error=$(remote "$1" "$2" --connect-timeout=5 -N -B -e 'SELECT 1' 2>&1 >/dev/null); do
		_limit=${PRIMARY_WAIT_SECONDS:-600}
		if [ "$_limit" != 0 ] && [ "$_waited" -ge "$_limit" ]; then
			log "the server at $1:$2 did not accept connections within ${_waited}s: $(printf '%s' "$_error" | tail -n 1)"
			return 1
		fi
		# The client's reason (a refused connection, a certificate that
		# does not verify), so a wait that never ends says why.
		log "waiting for the server at $1:$2: $(printf '%s' "$_error" | tail -n 1)"
		sleep 2
		_waited=$((_waited + 2))
	done
}

# series VERSION: the release series ("8.4.8" -> 8.4, "10.11.19-MariaDB"
# -> 10.11), which a data directory records in SERIES_FILE.
series() {
	_v=${1%%[!0-9.]*}
	_maj=${_v%%.*}
	_rest=${_v#*.}
	say "$_maj.${_rest%%.*}"
}
SERIES_FILE=deckhand-series

# flavor VERSION: mariadb or mysql.
flavor() {
	case $1 in
	*MariaDB* | *mariadb*) say mariadb ;;
	*) say mysql ;;
	esac
}

# version_at_least VERSION MAJOR MINOR [PATCH]: true when VERSION's leading
# numbers are at least MAJOR.MINOR.PATCH.
version_at_least() {
	_v=${1%%[!0-9.]*}
	_maj=${_v%%.*}
	_rest=${_v#*.}
	_min=${_rest%%.*}
	_pat=${_rest#*.}
	_pat=${_pat%%.*}
	[ "$_maj" -gt "$2" ] && return 0
	[ "$_maj" -lt "$2" ] && return 1
	[ "${_min:-0}" -gt "$3" ] && return 0
	[ "${_min:-0}" -lt "$3" ] && return 1
	[ "${_pat:-0}" -ge "${4:-0}" ]
}

# sql_string VALUE: VALUE as an SQL string literal (quotes doubled,
# backslashes escaped, as the default sql_mode reads them).
sql_string() {
	printf "'%s'" "$(printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e "s/'/''/g")"
}

# sql_ident NAME: NAME as a quoted identifier.
sql_ident() {
	printf '`%s`' "$(printf '%s' "$1" | sed 's/`/``/g')"
}

# sql_accounts VERSION ROOT_PASSWORD REPLICATION_PASSWORD: root from
# anywhere (with the Secret's password) and the replication account. Not
# written to the binary log: every server makes its own accounts, so a
# replica's history starts empty, as GTID auto-positioning needs.
sql_accounts() {
	_root=$(sql_string "$2")
	_repl=$(sql_string "$3")
	say "SET SESSION sql_log_bin = 0;"
	say "ALTER USER 'root'@'localhost' IDENTIFIED BY $_root;"
	say "CREATE USER IF NOT EXISTS 'root'@'%' IDENTIFIED BY $_root;"
	say "GRANT ALL PRIVILEGES ON *.* TO 'root'@'%' WITH GRANT OPTION;"
	if [ "$(flavor "$1")" = mariadb ]; then
		# MariaDB's replicas authenticate with the native plugin.
		say "CREATE USER IF NOT EXISTS '$REPLICATION_USER'@'%' IDENTIFIED VIA mysql_native_password USING PASSWORD($_repl);"
		# mariadb-install-db makes root@127.0.0.1, root@::1 and
		# root@<hostname> without a password, and may make anonymous
		# accounts: each would win over root@'%' for some connections.
		say "DELETE FROM mysql.global_priv WHERE User = '' OR (User = 'root' AND Host NOT IN ('localhost', '%'));"
		say "DELETE FROM mysql.proxies_priv WHERE Host NOT IN ('localhost', '%');"
	else
		# MySQL 8.4 disables mysql_native_password: caching_sha2_password,
		# whose key the replica fetches (GET_SOURCE_PUBLIC_KEY).
		say "CREATE USER IF NOT EXISTS '$REPLICATION_USER'@'%' IDENTIFIED WITH caching_sha2_password BY $_repl;"
	fi
	say "GRANT REPLICATION SLAVE ON *.* TO '$REPLICATION_USER'@'%';"
	say "FLUSH PRIVILEGES;"
}

# sql_reset_gtids VERSION: forget this server's binary logs and GTID
# history before a clone's dump sets them.
sql_reset_gtids() {
	if [ "$(flavor "$1")" = mysql ] && version_at_least "$1" 8 2; then
		say "RESET BINARY LOGS AND GTIDS;"
	else
		say "RESET MASTER;"
	fi
}

# sql_follow_primary VERSION HOST PORT PASSWORD: replicate from the primary
# from the GTID position the clone's dump set.
sql_follow_primary() {
	_host=$(sql_string "$2")
	_pass=$(sql_string "$4")
	if [ "$(flavor "$1")" = mariadb ]; then
		say "CHANGE MASTER TO MASTER_HOST=$_host, MASTER_PORT=$3, MASTER_USER='$REPLICATION_USER', MASTER_PASSWORD=$_pass, MASTER_CONNECT_RETRY=5, MASTER_USE_GTID=slave_pos;"
		say "START SLAVE;"
	elif version_at_least "$1" 8 0 23; then
		say "CHANGE REPLICATION SOURCE TO SOURCE_HOST=$_host, SOURCE_PORT=$3, SOURCE_USER='$REPLICATION_USER', SOURCE_PASSWORD=$_pass, SOURCE_CONNECT_RETRY=5, SOURCE_AUTO_POSITION=1, GET_SOURCE_PUBLIC_KEY=1;"
		say "START REPLICA;"
	else
		say "CHANGE MASTER TO MASTER_HOST=$_host, MASTER_PORT=$3, MASTER_USER='$REPLICATION_USER', MASTER_PASSWORD=$_pass, MASTER_CONNECT_RETRY=5, MASTER_AUTO_POSITION=1, GET_MASTER_PUBLIC_KEY=1;"
		say "START SLAVE;"
	fi
}

# server_args VERSION ORDINAL: the replication settings of a server (the
# primary at ordinal 0, read-only replicas beside it).
server_args() {
	say "--server-id=$(($2 + 1))"
	say "--log-bin=binlog"
	say "--skip-name-resolve"
	if [ "$(flavor "$1")" = mariadb ]; then
		say "--log-slave-updates=ON"
		say "--gtid-strict-mode=ON"
	else
		say "--gtid-mode=ON"
		say "--enforce-gtid-consistency=ON"
	fi
	if [ "$2" != 0 ]; then
		say "--read-only=ON"
		if [ "$(flavor "$1")" = mysql ]; then say "--super-read-only=ON"; fi
	fi
	return 0
}

# clone_dump_args VERSION: how a replica dumps the primary: consistent
# (one transaction), with the accounts and the GTID position.
clone_dump_args() {
	if [ "$(flavor "$1")" = mariadb ]; then
		# --system=users dumps accounts as CREATE USER/GRANT (the mysql
		# tables themselves would carry the primary's replication position
		# too); --master-data --gtid sets gtid_slave_pos.
		say "--system=users --insert-ignore --master-data=1 --gtid"
	else
		# The mysql schema carries the accounts; the GTID set lands in
		# gtid_purged (not through the gtid_executed table), and the
		# replica keeps its own InnoDB statistics, tables MySQL 8 refuses
		# to drop and re-create.
		say "--set-gtid-purged=ON --ignore-table=mysql.gtid_executed --ignore-table=mysql.innodb_index_stats --ignore-table=mysql.innodb_table_stats"
	fi
	say "--single-transaction --routines --events --triggers --hex-blob"
}

# initialise DIR (needs $version): an empty data directory with its accounts.
initialise() {
	if [ "$(flavor "$version")" = mariadb ]; then
		"$INSTALL_DB" --datadir="$1" --auth-root-authentication-method=normal \
			--skip-test-db --skip-name-resolve >&2
	else
		"$SERVER" --initialize-insecure --datadir="$1" >&2
	fi
}

# start_private DIR ORDINAL: the server on DIR with no network, for setting up.
start_private() {
	# shellcheck disable=SC2046 # one argument per line
	"$SERVER" --datadir="$1" --skip-networking --socket="$MYSQL_UNIX_PORT" \
		--pid-file="$1.deckhand.pid" $(server_args "$version" "$2") >&2 &
	private_pid=$!
	until "$ADMIN" --socket="$MYSQL_UNIX_PORT" -uroot ping >/dev/null 2>&1; do
		kill -0 "$private_pid" 2>/dev/null || { log "the server did not start"; exit 1; }
		sleep 1
	done
}

stop_private() {
	"$ADMIN" --socket="$MYSQL_UNIX_PORT" -uroot shutdown
	wait "$private_pid" || true
}

# as_root_without_password: a new data directory's root has none yet.
as_root_without_password() {
	env -u MYSQL_PWD "$CLIENT" --socket="$MYSQL_UNIX_PORT" -uroot
}

# user_databases: the databases a dump holds (not the server's own).
user_databases_sql() {
	say "SELECT schema_name FROM information_schema.schemata WHERE schema_name NOT IN ('mysql', 'sys', 'information_schema', 'performance_schema') ORDER BY schema_name;"
}

# report KEY=VALUE...: the termination message, as JSON of strings and
# numbers (values are versions, file names and hex: no quoting needed
# beyond dropping quotes and backslashes).
report() {
	_out='{'
	_sep=
	for _kv in "$@"; do
		_k=${_kv%%=*}
		_v=$(printf '%s' "${_kv#*=}" | tr -d '"\\')
		case $_k in
		size | tables | rows) _out="$_out$_sep\"$_k\":$_v" ;;
		*) _out="$_out$_sep\"$_k\":\"$_v\"" ;;
		esac
		_sep=,
	done
	printf '%s}\n' "$_out" >"$TERMINATION_MESSAGE_PATH"
}

# databases_of HOST PORT: the user databases there, one a line, as they
# are named (--raw: batch mode would print a backslash or a tab escaped,
# and the dump tool would be given another name). A name holding a line
# break is read as two names, which the dump tool refuses (loudly).
databases_of() {
	user_databases_sql | remote "$1" "$2" -N -B --raw
}

# query HOST PORT SQL: one value.
query() {
	remote "$1" "$2" -N -B -e "$3"
}

# local_client ARGS...: the client, as root, connected to this pod's
# server through its socket (exempt from require_secure_transport).
local_client() {
	"$CLIENT" --socket="$MYSQL_UNIX_PORT" -uroot "$@"
}

# local_query SQL: one value, from this pod's server.
local_query() {
	local_client -N -B -e "$1"
}

# check_sha256 FILE SUM: refuse a file whose checksum is not SUM.
check_sha256() {
	if [ ! -f "$1" ]; then
		log "$1 does not exist"
		return 1
	fi
	_actual=$(sha256sum "$1" | cut -d ' ' -f 1)
	if [ "$_actual" != "$2" ]; then
		log "$1 has checksum $_actual, not $2: refusing to load it"
		return 1
	fi
}

# sql_grant_database DATABASE USER: the user owns DATABASE ('_' and '%'
# are wildcards in a grant's database name: escaped).
sql_grant_database() {
	_db=$(printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e 's/_/\\_/g' -e 's/%/\\%/g')
	say "GRANT ALL PRIVILEGES ON $(sql_ident "$_db").* TO $(sql_string "$2")@'%';"
}

# check_data_owner DIR: the data directory DIR belongs to the user the
# server runs as (the pod's runAsUser), or the server stops here with a
# message naming both owners. The user is fixed before any container runs,
# so a mismatch can only be reported: as JSON in the termination message
# (the operator reads it into the Ready condition, reason
# DataDirectoryOwnerMismatch), and in the log.
check_data_owner() {
	_found=$(stat -c %u "$1")
	_expected=$(id -u)
	[ "$_found" = "$_expected" ] && return 0
	TERMINATION_MESSAGE_PATH=${TERMINATION_MESSAGE_PATH:-/dev/termination-log} \
		report dataDirectory="$1" dataOwner="$_found" runAsUser="$_expected" || true
	log "the data directory $1 belongs to uid $_found, but the server runs as uid $_expected: set runAsUser to $_found in the spec if the image's server user is $_found"
	exit 1
}

# count_rows: reads a dump on stdin and prints what it holds, one line per
# table, "<database>.<table>\t<rows>" (engine.CountsSuffix's format,
# unsorted): the rows counted are the rows the dump inserts, so they are
# exactly what the dump's own snapshot held. A table is the dump tool's
# "Table structure for table" block (a view's stand-in is "Temporary ...
# structure for view": not a table); its rows are the tuples of the
# INSERT statements that name it, on one line (mysqldump) or a row a line
# (mariadb-dump 10.x): a line break is never inside a value (the dump tool
# escapes it), strings are quoted with backslash escapes (the dump tool
# sets its session's sql_mode to ''), and --hex-blob writes binary values
# as 0x...: once the escapes and then the quoted strings are removed, each
# "(" left opens a tuple. Lines between "DELIMITER ;;" and "DELIMITER ;"
# are the bodies of triggers, routines and events: an INSERT there is
# code, not data. Run by $AWK (default awk): mawk reads a dump several
# times faster than gawk, so backup.sh picks it when the image has it.
count_rows() {
	"${AWK:-awk}" '
	# quoted(s, p): the backquoted name that starts at s[p] (a doubled
	# backquote is one); qend is the position after it, 0 when unclosed.
	function quoted(s, p,   name, c) {
		name = ""
		for (p++; p <= length(s); p++) {
			c = substr(s, p, 1)
			if (c == "`") {
				if (substr(s, p + 1, 1) != "`") { qend = p + 1; return name }
				p++
			}
			name = name c
		}
		qend = 0
		return name
	}
	# tuples(v): counts the tuples in v, a line of an INSERT statement
	# after its "VALUES", into rows[table]; the statement goes on while v
	# does not end it (its last character is outside any value: a line
	# break never is inside one). Tuples are separated by "),(" or "),"
	# and a line break: a line without "),(" holds one tuple when it
	# starts one; only a line with "),(" (one statement a line, or a value
	# that holds it) needs its values removed before counting.
	function tuples(v,   last) {
		last = substr(v, length(v), 1)
		if (last == " " || last == "\t" || last == "\r") {
			sub(/[ \t\r]+$/, "", v)
			last = substr(v, length(v), 1)
		}
		inserting = last != ";"
		if (!index(v, "),(")) {
			rows[table] += substr(v, 1, 1) == "("
			return
		}
		gsub(/\\./, "", v)
		gsub(/\047[^\047]*\047/, "", v)
		rows[table] += gsub(/\(/, "", v)
	}
	inserting { tuples($0); next }
	/^DELIMITER ;;$/ { code = 1; next }
	/^DELIMITER ;$/ { code = 0; next }
	code { next }
	/^USE `/ { db = quoted($0, 5); next }
	/^-- Table structure for table `/ {
		rows[db "." quoted($0, 30)] += 0
		next
	}
	/^INSERT INTO `/ {
		table = db "." quoted($0, 13)
		v = substr($0, qend)
		# An explicit column list (generated or invisible columns).
		if (substr(v, 1, 2) == " (") {
			p = 3
			while (substr(v, p, 1) == "`") {
				quoted(v, p)
				p = qend
				if (substr(v, p, 1) == ",") p++
				if (substr(v, p, 1) == " ") p++
			}
			v = substr(v, p + 1)
		}
		sub(/^ *VALUES */, "", v)
		tuples(v)
	}
	END { for (t in rows) printf "%s\t%d\n", t, rows[t] }
	'
}

# counts_summary FILE: "TABLES ROWS" of a counts file.
counts_summary() {
	awk -F '\t' '{ rows += $NF } END { printf "%d %d\n", NR, rows }' "$1"
}

# json_string VALUE: VALUE as a JSON string; control characters (a tool's
# line breaks and tabs) become spaces, and at most 400 characters are kept
# (a termination message holds 4 KiB).
json_string() {
	printf '"%s"' "$(printf '%s' "$1" | tr '\001-\037' ' ' | cut -c 1-400 | sed 's/[\\"]/\\&/g')"
}

# random_password: 48 hex digits from the kernel.
random_password() {
	od -A n -N 24 -t x1 /dev/urandom | tr -d ' \n'
}

# table_counts CLIENT...: each base table's row count in the user
# databases of the server the client command reaches, in count_rows'
# format, sorted.
table_counts() {
	# shellcheck disable=SC2016 # backquotes are SQL's
	"$@" -N -B --raw -e "SELECT CONCAT('SELECT ', QUOTE(CONCAT(table_schema, '.', table_name)), ', COUNT(*) FROM \`', REPLACE(table_schema, '\`', '\`\`'), '\`.\`', REPLACE(table_name, '\`', '\`\`'), '\`;') FROM information_schema.tables WHERE table_type = 'BASE TABLE' AND table_schema NOT IN ('mysql', 'sys', 'information_schema', 'performance_schema')" |
		"$@" -N -B --raw | LC_ALL=C sort
}

# counts_differences RECORDED RESTORED: one line per table whose counts
# differ, or which is on one side only, sorted.
counts_differences() {
	awk -F '\t' '
	FNR == NR { want[$1] = $2; next }
	{ got[$1] = $2 }
	END {
		for (t in want) {
			if (!(t in got)) print t ": " want[t] " recorded, table missing from the restore"
			else if (got[t] != want[t]) print t ": " want[t] " recorded, " got[t] " restored"
		}
		for (t in got) if (!(t in want)) print t ": not in the recorded counts, " got[t] " restored"
	}' "$1" "$2" | LC_ALL=C sort
}

# client_error: the client's error lines on stdin (its "ERROR ..." lines,
# not the statement it echoes between dashes), at most the last three; all
# of its last three lines when none reads ERROR.
client_error() {
	_all=$(cat)
	_errors=$(printf '%s\n' "$_all" | grep '^ERROR' | tail -n 3 || true)
	printf '%s' "${_errors:-$(printf '%s\n' "$_all" | tail -n 3)}"
}
