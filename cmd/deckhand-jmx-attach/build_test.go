package main

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The operator copies the helper into containers of either architecture,
// which may have no libc: it must build, as the Dockerfile builds it, into
// a static executable for amd64 and arm64.
func TestHelperBuildsStaticForAmd64AndArm64(t *testing.T) {
	for arch, machine := range map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64} {
		out := filepath.Join(t.TempDir(), "deckhand-jmx-attach-linux-"+arch)
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
		b, err := cmd.CombinedOutput()
		require.NoError(t, err, string(b))
		f, err := elf.Open(out)
		require.NoError(t, err)
		assert.Equal(t, machine, f.Machine, arch)
		for _, p := range f.Progs {
			assert.NotEqual(t, elf.PT_INTERP, p.Type, "%s: dynamically linked (needs a loader the container may lack)", arch)
		}
		f.Close()
	}
}
