package postgres

import (
	"embed"
	"path"
	"strings"
)

// The continuous archiving scripts (docs/design/database-backup.md,
// Continuous archiving): they run Barman Cloud (barman-cli-cloud) against
// an S3-compatible object store, with the store's settings in the
// environment (archive/store.sh says which). They are apart from
// Scripts(): they run where Barman Cloud is installed, beside the server,
// not in the server's image.
const (
	// WALArchiveScript is archive_command: sh wal-archive.sh %p.
	WALArchiveScript = "wal-archive.sh"
	// WALRestoreScript is restore_command: sh wal-restore.sh %f %p.
	WALRestoreScript = "wal-restore.sh"
	// BaseBackupScript makes a base backup, then a marker row and a
	// restore point named as the backup.
	BaseBackupScript = "base-backup.sh"
	// RecoverScript fills an empty data directory for point-in-time
	// recovery: a base backup and the recovery settings.
	RecoverScript = "recover.sh"
	// ExpireScript applies an archive's retention policy.
	ExpireScript = "expire.sh"
	// HoldsScript applies the operator's holds on base backups (Barman's
	// keep annotations); expire.sh runs it first.
	HoldsScript = "holds.sh"
	// BaseBackupHoldsKey is the scripts ConfigMap's key the operator
	// writes its holds on the archive's base backups into, one a line:
	// BaseBackupHold's keep and pause lines (archive/holds.sh).
	BaseBackupHoldsKey = "base-backup-holds"
	// storeLib is sourced by the others.
	storeLib = "store.sh"
)

//go:embed archive/*.sh
var archiveFiles embed.FS

// ArchiveScripts are the embedded archiving scripts, by file name.
func ArchiveScripts() map[string]string {
	entries, err := archiveFiles.ReadDir("archive")
	if err != nil {
		panic(err) // embedded at build time
	}
	out := map[string]string{}
	for _, e := range entries {
		b, err := archiveFiles.ReadFile(path.Join("archive", e.Name()))
		if err != nil {
			panic(err)
		}
		out[e.Name()] = string(b)
	}
	return out
}

// KeepHold is the holds line that keeps base backup id (why: who holds it
// and for what; one line).
func KeepHold(id, why string) string { return "keep " + id + " " + oneLine(why) + "\n" }

// PauseHold is the holds line that pauses retention (why: one line).
func PauseHold(why string) string { return "pause " + oneLine(why) + "\n" }

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
