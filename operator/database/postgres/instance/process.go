package instance

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/deckhand-dev/deckhand/internal/procfs"
)

// processAlive: a signal 0 reaches pid (EPERM: it exists, as another
// user's).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// sigkillBit is SIGKILL's bit in /proc/<pid>/status's signal masks.
const sigkillBit = 1 << (syscall.SIGKILL - 1)

// processDoomed: pid is gone, a zombie, or has a SIGKILL pending. A
// process frozen by the cgroup freezer or stuck in the kernel (a stalled
// disk) acts on a SIGKILL only when it runs again, and then dies before
// it runs one more instruction of its own: it can never again answer a
// client.
func processDoomed(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return !processAlive(pid)
	}
	for _, line := range strings.Split(string(b), "\n") {
		key, value, _ := strings.Cut(line, ":")
		value = strings.TrimSpace(value)
		switch key {
		case "State":
			if strings.HasPrefix(value, "Z") || strings.HasPrefix(value, "X") {
				return true
			}
		case "SigPnd", "ShdPnd":
			if mask, err := strconv.ParseUint(value, 16, 64); err == nil && mask&sigkillBit != 0 {
				return true
			}
		}
	}
	return false
}

// killTree SIGKILLs root and every process under it, read twice (one
// forked as the first were killed is found the second time), and says
// whether every one is now doomed.
func killTree(root int) bool {
	var killed []int
	for range 2 {
		for _, pid := range procfs.Tree("/proc", root) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			killed = append(killed, pid)
		}
	}
	for _, pid := range killed {
		if !processDoomed(pid) {
			return false
		}
	}
	return true
}
