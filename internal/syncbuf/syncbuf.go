// Package syncbuf is a bytes.Buffer a process writes while a test reads
// it: the output of a server, an agent or an operator that a test starts.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is safe for concurrent writes and reads.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
