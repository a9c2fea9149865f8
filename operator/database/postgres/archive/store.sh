# Sourced by the archiving scripts: how to reach the object store, for
# Barman Cloud (barman-cloud-* of barman-cli-cloud, over boto3).
#
# The store's settings, from the environment:
#   STORE_ENDPOINT          https://host:port of an S3-compatible store;
#                           empty for AWS S3 itself
#   STORE_BUCKET            the bucket
#   STORE_PREFIX            a path inside the bucket (may be empty)
#   STORE_SERVER            the archive's name under the prefix (a
#                           Database's): s3://bucket/prefix/server/
#   STORE_REGION            the region (default us-east-1)
#   STORE_PATH_STYLE        true (default): https://endpoint/bucket/key, as
#                           a store without per-bucket DNS names needs;
#                           false: https://bucket.endpoint/key
#   STORE_CA_FILE           a PEM bundle of the CAs to trust (optional)
#   STORE_ACCESS_KEY_FILE   a file holding the access key ID
#   STORE_SECRET_KEY_FILE   a file holding the secret access key
#   STORE_COMPRESSION       gzip (default), bzip2, snappy or none
#
# The keys are read from files (a mounted Secret) into a credentials file
# of a private directory: they are never on a command line, in the
# environment of a process or in a log.

store_fail() {
  echo "deckhand: $*" >&2
  exit 1
}

# store_setup writes the boto3 configuration and credentials into a
# private directory (removed by store_cleanup) and points boto3 at them.
store_setup() {
  : "${STORE_BUCKET:?STORE_BUCKET is not set}" "${STORE_SERVER:?STORE_SERVER is not set}"
  : "${STORE_ACCESS_KEY_FILE:?STORE_ACCESS_KEY_FILE is not set}" "${STORE_SECRET_KEY_FILE:?STORE_SECRET_KEY_FILE is not set}"
  [ -r "$STORE_ACCESS_KEY_FILE" ] || store_fail "cannot read the access key file $STORE_ACCESS_KEY_FILE"
  [ -r "$STORE_SECRET_KEY_FILE" ] || store_fail "cannot read the secret key file $STORE_SECRET_KEY_FILE"
  case ${STORE_PATH_STYLE:-true} in
    true) style=path ;;
    false) style=virtual ;;
    *) store_fail "STORE_PATH_STYLE is '$STORE_PATH_STYLE', not true or false" ;;
  esac
  case ${STORE_COMPRESSION:-gzip} in
    gzip) store_compress=--gzip ;;
    bzip2) store_compress=--bzip2 ;;
    snappy) store_compress=--snappy ;;
    none) store_compress= ;;
    *) store_fail "STORE_COMPRESSION is '$STORE_COMPRESSION', not gzip, bzip2, snappy or none" ;;
  esac
  store_tmp=$(umask 077 && mktemp -d "${TMPDIR:-/tmp}/deckhand-store.XXXXXX")
  {
    echo "[default]"
    echo "region = ${STORE_REGION:-us-east-1}"
    echo "s3 ="
    echo "    addressing_style = $style"
  } >"$store_tmp/config"
  # Written without echoing a key through a command's arguments: printf is
  # a shell builtin, and the keys come from the files.
  {
    echo "[default]"
    printf 'aws_access_key_id = %s\n' "$(tr -d '\r\n' <"$STORE_ACCESS_KEY_FILE")"
    printf 'aws_secret_access_key = %s\n' "$(tr -d '\r\n' <"$STORE_SECRET_KEY_FILE")"
  } >"$store_tmp/credentials"
  export AWS_CONFIG_FILE="$store_tmp/config" AWS_SHARED_CREDENTIALS_FILE="$store_tmp/credentials"
  # Only these files, never ~/.aws or keys a container may have been given.
  unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN AWS_PROFILE AWS_DEFAULT_PROFILE
  if [ -n "${STORE_CA_FILE:-}" ]; then
    [ -r "$STORE_CA_FILE" ] || store_fail "cannot read the CA bundle $STORE_CA_FILE"
    export AWS_CA_BUNDLE="$STORE_CA_FILE"
  else
    unset AWS_CA_BUNDLE
  fi
  store_url="s3://$STORE_BUCKET${STORE_PREFIX:+/${STORE_PREFIX%/}}"
  store_endpoint=
  [ -z "${STORE_ENDPOINT:-}" ] || store_endpoint="--endpoint-url=$STORE_ENDPOINT"
}

store_cleanup() {
  [ -z "${store_tmp:-}" ] || rm -rf "$store_tmp"
}

# resident_call DIR REQUEST hands REQUEST (its lines) to the resident
# Barman Cloud process serving DIR (wal-resident.sh), waits for the
# answer, prints what Barman said about it and sets resident_rc to its
# exit code. It returns 1 without an answer when DIR is empty, no such
# process is alive, or it goes before answering: the caller then runs
# Barman Cloud's command itself (a file shipped or fetched twice is the
# same file twice).
resident_call() {
  [ -n "$1" ] || return 1
  resident_pid=$(cat "$1/pid" 2>/dev/null) && kill -0 "$resident_pid" 2>/dev/null || return 1
  printf '%s\n' "$2" >"$1/.$$.tmp"
  mv "$1/.$$.tmp" "$1/$$.up"
  while [ ! -e "$1/$$.rc" ]; do
    if ! kill -0 "$resident_pid" 2>/dev/null; then
      rm -f "$1/$$.up" "$1/$$.taken"
      return 1
    fi
    sleep 0.05
  done
  { read -r resident_rc && resident_said=$(cat); } <"$1/$$.rc"
  rm -f "$1/$$.rc"
  [ -z "$resident_said" ] || printf '%s\n' "$resident_said" >&2
}

# absolute prints path $1 from the working directory.
absolute() {
  case $1 in
    /*) echo "$1" ;;
    *) echo "$(pwd)/$1" ;;
  esac
}
