package postgres

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestArchiveScriptsAreTheFilesInTheRepository(t *testing.T) {
	scripts := ArchiveScripts()
	require.ElementsMatch(t, []string{WALArchiveScript, WALRestoreScript, BaseBackupScript, RecoverScript, RecoverPrimaryScript, ExpireScript, storeLib, HandoffScript, ArchiverScript,
		VerifyBaseRestoreScript, HoldsScript, ResidentScript, DeleteBaseScript}, keys(scripts))
	for name, body := range scripts {
		b, err := os.ReadFile("archive/" + name)
		require.NoError(t, err)
		assert.Equal(t, string(b), body, name)
	}
	for name := range scripts {
		_, ok := Engine{}.Scripts()[name]
		assert.False(t, ok, "%s is not in the server's scripts ConfigMap", name)
	}
}
