package engine

import (
	"encoding/json"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

var dottedNumbers = regexp.MustCompile(`^[0-9]+(\.[0-9]+)*$`)

// FuzzTagVersion: whatever an image reference holds, a version read from
// it is dotted numbers that its tag starts with (a registry's port or a
// digest is never taken for one).
func FuzzTagVersion(f *testing.F) {
	for _, s := range []string{"postgres:17.6", "registry.local:5000/postgres", "mariadb:v11.4.2", "postgres@sha256:17.6", "a:1:2", ":", "x/:9", "@:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, image string) {
		v, ok := TagVersion(image)
		if !ok {
			if v != "" {
				t.Fatalf("no version but %q", v)
			}
			return
		}
		if !dottedNumbers.MatchString(v) {
			t.Fatalf("version %q of %q is not dotted numbers", v, image)
		}
		ref, _, _ := strings.Cut(image, "@")
		name := ref[strings.LastIndex(ref, "/")+1:]
		_, tag, _ := strings.Cut(name, ":")
		if !strings.HasPrefix(strings.TrimPrefix(tag, "v"), v) {
			t.Fatalf("version %q is not the start of %q's tag %q", v, image, tag)
		}
	})
}

// FuzzParseReport: any termination message (a Job's log tail when it
// wrote no report) is a Report or an error, never a panic, and a Report
// survives a round trip.
func FuzzParseReport(f *testing.F) {
	for _, s := range []string{`{"serverVersion":"15.14 (Debian)"}`, `{"file":"a","size":-1,"sha256":"x"}`, "psql: error", "", "null", `{"size":1e400}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, message string) {
		r, err := ParseReport(message)
		if err != nil {
			return
		}
		raw, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseReport(string(raw))
		if err != nil || !reflect.DeepEqual(r, again) {
			t.Fatalf("report %+v did not survive a round trip: %+v, %v", r, again, err)
		}
		_ = r.Version()
	})
}
