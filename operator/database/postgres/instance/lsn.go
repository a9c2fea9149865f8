package instance

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// LSN is a position in the write-ahead log (PostgreSQL's pg_lsn): a byte
// offset, so two positions compare and subtract as numbers. It reads and
// writes as PostgreSQL prints it ("16/B374D848"); 0 means unknown.
type LSN uint64

// ParseLSN reads PostgreSQL's text form of a pg_lsn.
func ParseLSN(s string) (LSN, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok {
		return 0, fmt.Errorf("LSN %q: want two hexadecimal numbers separated by /", s)
	}
	h, err := strconv.ParseUint(hi, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("LSN %q: %w", s, err)
	}
	l, err := strconv.ParseUint(lo, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("LSN %q: %w", s, err)
	}
	return LSN(h<<32 | l), nil
}

func (l LSN) String() string { return fmt.Sprintf("%X/%X", uint64(l)>>32, uint64(l)&0xFFFFFFFF) }

// Behind is how many bytes l is behind other (0 when it is not).
func (l LSN) Behind(other LSN) uint64 {
	if l >= other {
		return 0
	}
	return uint64(other - l)
}

// MarshalJSON writes the text form; an unknown position is omitted by
// its struct tag or written as "".
func (l LSN) MarshalJSON() ([]byte, error) {
	if l == 0 {
		return json.Marshal("")
	}
	return json.Marshal(l.String())
}

func (l *LSN) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	if s == "" {
		*l = 0
		return nil
	}
	v, err := ParseLSN(s)
	*l = v
	return err
}
