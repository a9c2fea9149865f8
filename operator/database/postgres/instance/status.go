package instance

import (
	"context"
	"database/sql"
	"strings"
	"time"
)

// Role is what an instance is, as its server says.
type Role string

const (
	RolePrimary Role = "primary"
	RoleStandby Role = "standby"
	// RoleUnknown: the server is down or did not answer in time.
	RoleUnknown Role = "unknown"
)

// Status is GET /status: what the agent read from its server, at Time.
// LSNs are omitted ("") when they do not apply or are unknown.
type Status struct {
	Pod string `json:"pod"`
	// ServerUp: the server accepted a connection over the local socket
	// and answered the status query within the agent's bound.
	ServerUp bool `json:"serverUp"`
	Role     Role `json:"role"`
	// InRecovery is pg_is_in_recovery() (nil when the server is down).
	InRecovery *bool `json:"inRecovery,omitempty"`
	// Timeline is the timeline the server writes (a primary) or receives
	// or replays (a standby): it grows by one at every promotion.
	Timeline int64 `json:"timeline,omitempty"`
	// CurrentLSN is pg_current_wal_lsn() (a primary only).
	CurrentLSN LSN `json:"currentLSN"`
	// ReceiveLSN and ReplayLSN are pg_last_wal_receive_lsn() and
	// pg_last_wal_replay_lsn() (a standby only).
	ReceiveLSN LSN `json:"receiveLSN"`
	ReplayLSN  LSN `json:"replayLSN"`
	// WALReceiver is pg_stat_wal_receiver's status ("streaming",
	// "waiting", ...), "" when no WAL receiver runs.
	WALReceiver string `json:"walReceiver"`
	// Streaming: the WAL receiver streams from a primary now.
	Streaming bool `json:"streaming"`
	// ReceiverStalledSeconds: for how long (by the agent's reads, one
	// a second) the WAL receiver's connection has held replies its
	// primary did not acknowledge, the kernel retransmitting them
	// (linkstall.go); 0 when it has not, or no receiver runs.
	ReceiverStalledSeconds float64 `json:"receiverStalledSeconds,omitempty"`
	// PrimaryHost is the host of primary_conninfo (the setting's other
	// keys, the password among them, are never read out).
	PrimaryHost string `json:"primaryHost,omitempty"`
	// Fenced: the fence marker is in place (POST /fence): the server is
	// stopped and must not be started until the operator lifts it.
	Fenced bool `json:"fenced"`
	// SelfFenced: the agent fenced its own server (selffence.go): it ran
	// as a primary while its pod named another pod the primary.
	SelfFenced bool `json:"selfFenced,omitempty"`
	// NamedPrimary is the primary the pod's scripts ConfigMap names now,
	// as its server's entrypoint reads it at its next start (the kubelet
	// refreshes a mounted ConfigMap at its own pace); "" when the agent
	// has no scripts mounted. The operator lifts an old primary's fence
	// only once it names another pod (rejoin.go).
	NamedPrimary string `json:"namedPrimary,omitempty"`
	// AwaitingRole: the server's entrypoint would start it as the primary
	// (its pod names itself) and waits for the operator to confirm that
	// (POST /role; role.go).
	AwaitingRole bool `json:"awaitingRole,omitempty"`
	// DataDirectoryError says why the data directory cannot be read (a
	// failed disk, a mode changed by hand); "" when it can, or does not
	// exist yet (an empty volume, cloned at the start). The operator
	// keeps an old primary fenced while it is set: lifted, its
	// entrypoint would only fail, over and over, and the kubelet's
	// back-off between restarts grows to five minutes.
	DataDirectoryError string `json:"dataDirectoryError,omitempty"`
	// SynchronousStandbyNames is the server's synchronous_standby_names
	// ("": asynchronous).
	SynchronousStandbyNames string `json:"synchronousStandbyNames,omitempty"`
	// StreamingStandbys are the application names (pod names) of the
	// standbys streaming from this server now (a primary's
	// pg_stat_replication), sorted.
	StreamingStandbys []string `json:"streamingStandbys,omitempty"`
	// Detached: the standby was told to stop streaming (POST /detach,
	// during a failover) and not told to stream again yet.
	Detached bool `json:"detached,omitempty"`
	// Archiver is the server's pg_stat_archiver, on a primary whose
	// archive_mode is not off; nil otherwise.
	Archiver *ArchiverStatus `json:"archiver,omitempty"`
	// BaseBackups is what the archiver sidecar of a primary last found in
	// its archive (BaseBackupsFile); nil on a standby, or before the
	// sidecar looked.
	BaseBackups *BaseBackups `json:"baseBackups,omitempty"`
	// DataVolume is the size and free space of the file system that holds
	// the data directory (pg_wal among it); nil when it cannot be read.
	DataVolume *VolumeUsage `json:"dataVolume,omitempty"`
	// WALFlushStalledSince (a primary): since when WAL has waited to be
	// flushed with the flush position not moving, as the agent's reads
	// found it; nil when nothing waits or the position moves. See
	// WALFlushStalled.
	WALFlushStalledSince *time.Time `json:"walFlushStalledSince,omitempty"`
	// Error says why the server is not up (connection refused, timeout).
	Error string    `json:"error,omitempty"`
	Time  time.Time `json:"time"`
}

// statusQuery reads everything in one round trip. pg_current_wal_lsn()
// fails during recovery, so it is asked of a primary only (CASE runs its
// branches lazily for volatile functions). The timeline: a primary's from
// the name of the WAL file it writes (its first 8 hex digits), a
// standby's the one its WAL receiver receives, or its last checkpoint's
// when no receiver runs.
const statusQuery = `
SELECT r.rec,
  CASE WHEN NOT r.rec THEN pg_catalog.pg_current_wal_lsn()::text END,
  pg_catalog.pg_last_wal_receive_lsn()::text,
  pg_catalog.pg_last_wal_replay_lsn()::text,
  CASE WHEN NOT r.rec
    THEN ('x' || substr(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()), 1, 8))::bit(32)::int8
    ELSE coalesce((SELECT received_tli FROM pg_catalog.pg_stat_wal_receiver), (pg_catalog.pg_control_checkpoint()).timeline_id)::int8
  END,
  coalesce((SELECT status FROM pg_catalog.pg_stat_wal_receiver), ''),
  pg_catalog.current_setting('primary_conninfo'),
  pg_catalog.current_setting('synchronous_standby_names'),
  coalesce((SELECT string_agg(application_name, ',' ORDER BY application_name) FROM pg_catalog.pg_stat_replication WHERE state = 'streaming'), ''),
  pg_catalog.current_setting('archive_mode'),
  a.archived_count, a.failed_count, coalesce(a.last_archived_wal, ''), a.last_archived_time,
  coalesce(a.last_failed_wal, ''), a.last_failed_time,
  CASE WHEN NOT r.rec THEN pg_catalog.pg_current_wal_insert_lsn()::text END,
  CASE WHEN NOT r.rec THEN pg_catalog.pg_current_wal_flush_lsn()::text END,
  EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity WHERE wait_event IN ('WALWrite', 'WALSync', 'WALInitWrite', 'WALInitSync')),
  CASE WHEN NOT r.rec AND pg_catalog.current_setting('archive_mode') <> 'off'
    THEN (SELECT count(*) FROM pg_catalog.pg_ls_archive_statusdir() WHERE name ~ '^[0-9A-F]{24}[.]ready$') END,
  (SELECT setting::int8 FROM pg_catalog.pg_settings WHERE name = 'wal_segment_size')
FROM (SELECT pg_catalog.pg_is_in_recovery() AS rec) r, pg_catalog.pg_stat_archiver a`

// readStatus asks the server through db; on any error the status says the
// server is down and why. It also returns a primary's WAL positions.
func readStatus(ctx context.Context, db *sql.DB, pod string, now time.Time) (Status, walPositions) {
	st := Status{Pod: pod, Role: RoleUnknown, Time: now}
	var (
		rec                       bool
		current, receive, replay  sql.NullString
		timeline                  sql.NullInt64
		receiver, primaryConninfo string
		syncNames, streamingTo    string
		archiveMode               string
		arch                      ArchiverStatus
		archivedAt, failedAt      sql.NullTime
		insert, flush             sql.NullString
		waiting                   bool
		pending                   sql.NullInt64
		segmentSize               int64
	)
	err := db.QueryRowContext(ctx, statusQuery).Scan(&rec, &current, &receive, &replay, &timeline, &receiver, &primaryConninfo, &syncNames, &streamingTo,
		&archiveMode, &arch.ArchivedCount, &arch.FailedCount, &arch.LastArchivedWAL, &archivedAt, &arch.LastFailedWAL, &failedAt, &insert, &flush, &waiting, &pending, &segmentSize)
	if err != nil {
		st.Error = describe(ctx, err)
		return st, walPositions{}
	}
	st.ServerUp, st.InRecovery = true, &rec
	st.Role = RolePrimary
	if rec {
		st.Role = RoleStandby
	}
	st.CurrentLSN, st.ReceiveLSN, st.ReplayLSN = lsnOf(current), lsnOf(receive), lsnOf(replay)
	st.Timeline = timeline.Int64
	st.WALReceiver, st.Streaming = receiver, receiver == "streaming"
	st.PrimaryHost = ConninfoHost(primaryConninfo)
	st.SynchronousStandbyNames = syncNames
	if streamingTo != "" {
		st.StreamingStandbys = strings.Split(streamingTo, ",")
	}
	if !rec && archiveMode != "off" {
		if archivedAt.Valid {
			arch.LastArchivedTime = &archivedAt.Time
		}
		if failedAt.Valid {
			arch.LastFailedTime = &failedAt.Time
		}
		arch.PendingSegments = pending.Int64
		arch.PendingBytes = pending.Int64 * segmentSize
		st.Archiver = &arch
	}
	return st, walPositions{insert: lsnOf(insert), flush: lsnOf(flush), waiting: waiting}
}

// ArchiverStatus is a primary's pg_stat_archiver: what its
// archive_command did.
type ArchiverStatus struct {
	ArchivedCount    int64      `json:"archivedCount"`
	FailedCount      int64      `json:"failedCount"`
	LastArchivedWAL  string     `json:"lastArchivedWAL,omitempty"`
	LastArchivedTime *time.Time `json:"lastArchivedTime,omitempty"`
	LastFailedWAL    string     `json:"lastFailedWAL,omitempty"`
	LastFailedTime   *time.Time `json:"lastFailedTime,omitempty"`
	// PendingSegments are the WAL segments waiting in pg_wal to be
	// archived (their .ready files), PendingBytes their size: what
	// piles up while archiving fails.
	PendingSegments int64 `json:"pendingSegments"`
	PendingBytes    int64 `json:"pendingBytes"`
}

// VolumeUsage is a file system's size and free space, in bytes.
type VolumeUsage struct {
	TotalBytes int64 `json:"totalBytes"`
	FreeBytes  int64 `json:"freeBytes"`
}

// BaseBackupsFile, beside PGDATA on the data volume, is where the archiver
// sidecar of a primary writes what its archive holds, at each of its looks
// (archive/archiver.sh, summarize).
const BaseBackupsFile = "deckhand-base-backups.json"

// BaseBackups is an archive's finished base backups, as the sidecar last
// found them.
type BaseBackups struct {
	CheckedAt time.Time   `json:"checkedAt"`
	Count     int         `json:"count"`
	Oldest    *BaseBackup `json:"oldest,omitempty"`
	Newest    *BaseBackup `json:"newest,omitempty"`
	// Error is the last base backup's failure, "" once one succeeds.
	Error string `json:"error,omitempty"`
	// Held are the base backups the operator's holds keep (archive's
	// holds.sh).
	Held []HeldBaseBackup `json:"held,omitempty"`
	// Archive is the archive these were read from, as the sidecar's
	// settings name it: a listing of another archive (the settings
	// changed since) is told from this one's.
	Archive *ArchiveIdentity `json:"archive,omitempty"`
	// Backups are every finished base backup, oldest first (by end LSN).
	Backups []BaseBackup `json:"backups,omitempty"`
	// Failed are the base backups requested (POST /base-backups) that
	// failed within the last hour, by name: why (the end of the output).
	Failed map[string]string `json:"failed,omitempty"`
}

// ArchiveIdentity is an archive's settings as the sidecar has them
// (STORE_ENDPOINT, _BUCKET, _PREFIX, _SERVER), unnormalized; Endpoint ""
// is AWS S3.
type ArchiveIdentity struct {
	Endpoint string `json:"endpoint"`
	Bucket   string `json:"bucket"`
	Prefix   string `json:"prefix"`
	Server   string `json:"server"`
}

// HeldBaseBackup is a base backup kept by the operator's hold, and why.
type HeldBaseBackup struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// BaseBackup is one base backup of an archive.
type BaseBackup struct {
	Name      string    `json:"name"`
	ID        string    `json:"id"`
	BeginTime time.Time `json:"beginTime"`
	EndTime   time.Time `json:"endTime"`
	BeginLSN  string    `json:"beginLSN"`
	EndLSN    string    `json:"endLSN"`
	Timeline  int64     `json:"timeline"`
	// Size is the bytes its objects take in the store (in Backups only).
	Size int64 `json:"size,omitempty"`
	// Kept is Barman's keep target ("full", "standalone") when the
	// backup has a keep (in Backups only).
	Kept string `json:"kept,omitempty"`
}

// Failing: the last attempt failed (a failure after the last success).
func (a ArchiverStatus) Failing() bool {
	return a.LastFailedTime != nil && (a.LastArchivedTime == nil || a.LastFailedTime.After(*a.LastArchivedTime))
}

// describe is err for a person; a context that ended says so plainly.
func describe(ctx context.Context, err error) string {
	if ctx.Err() != nil {
		return "the server did not answer in time: " + ctx.Err().Error()
	}
	return err.Error()
}

func lsnOf(s sql.NullString) LSN {
	if !s.Valid {
		return 0
	}
	l, _ := ParseLSN(s.String)
	return l
}

// ConninfoHost is the host of a libpq key=value connection string (as
// primary_conninfo holds it), "" when it names none. Only the host is
// returned: the string also holds the replication password.
func ConninfoHost(conninfo string) string {
	for _, kv := range conninfoPairs(conninfo) {
		if kv[0] == "host" {
			return kv[1]
		}
	}
	return ""
}

// conninfoPairs splits key = value pairs; values may be single-quoted
// with \' and \\ escapes (libpq's rules).
func conninfoPairs(s string) [][2]string {
	var out [][2]string
	i := 0
	skipSpace := func() {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
			i++
		}
	}
	for {
		skipSpace()
		if i >= len(s) {
			return out
		}
		start := i
		for i < len(s) && s[i] != '=' && s[i] != ' ' && s[i] != '\t' {
			i++
		}
		key := s[start:i]
		skipSpace()
		if i >= len(s) || s[i] != '=' {
			return out // malformed: keep what was read
		}
		i++
		skipSpace()
		var val strings.Builder
		if i < len(s) && s[i] == '\'' {
			i++
			for i < len(s) && s[i] != '\'' {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				val.WriteByte(s[i])
				i++
			}
			i++ // the closing quote
		} else {
			for i < len(s) && s[i] != ' ' && s[i] != '\t' && s[i] != '\n' {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				val.WriteByte(s[i])
				i++
			}
		}
		out = append(out, [2]string{key, val.String()})
	}
}
