package instance

import (
	"errors"
	"syscall"
)

// processAlive: a signal 0 reaches pid (EPERM: it exists, as another
// user's).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
