package jmxexporter

import (
	"strings"
	"testing"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/deckhand-dev/deckhand/operator/jmxexporter/jvm"
)

// FuzzParseResult feeds the parser of the helper's output (stdout of an
// exec: anything the container printed, then the helper's JSON line)
// arbitrary text: it never panics, a parsed result always has an outcome,
// and it is read from the last non-empty line only, so a program printing
// JSON earlier cannot speak for the helper.
func FuzzParseResult(f *testing.F) {
	f.Add(`{"result":"Attached","jvm":{"pid":7,"startTime":12,"uid":1000}}`)
	f.Add("warning: something\n{\"result\":\"Failed\",\"reason\":\"NoJVM\",\"retry\":true}\n\n")
	f.Add(`{"result":""}`)
	f.Add("{\"result\":\"Attached\"}\nnot json")
	f.Add("")
	f.Fuzz(func(t *testing.T, out string) {
		r, ok := parseResult(out)
		if !ok {
			return
		}
		if r.Result == "" {
			t.Fatalf("parsed a result without an outcome from %q", out)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if again, ok := parseResult(lines[len(lines)-1]); !ok || again.Result != r.Result {
			t.Fatalf("result %q not read from the last line of %q", r.Result, out)
		}
	})
}

// FuzzReadState feeds the pod annotation holding the controller's memory
// of a pod (anyone who can edit the pod can write it) arbitrary text: it
// is a state or nothing, never a panic, and a state read survives being
// written back.
func FuzzReadState(f *testing.F) {
	good := (&podState{Exporter: "e", PodUID: "u", Container: "app", Result: jvm.Attached, Port: 9404, Time: metav1.Now()}).encode()
	f.Add(good)
	f.Add(`{"result":"Unknown","retry":true,"attempts":-5}`)
	f.Add(`{"time":"not a time"}`)
	f.Add(`null`)
	f.Fuzz(func(t *testing.T, raw string) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationState: raw}}}
		st := readState(pod)
		if st == nil {
			return
		}
		_ = st.loaded()
		_ = st.sameInstance(pod)
		if d := backoff(st.Attempts); d <= 0 {
			t.Fatalf("backoff(%d) = %v", st.Attempts, d)
		}
		once := st.encode()
		pod.Annotations[AnnotationState] = once
		again := readState(pod)
		if again == nil || again.encode() != once {
			t.Fatalf("state %q does not survive a round trip: %q", raw, once)
		}
	})
}

// FuzzShort checks the shortening of exec output that goes into messages
// (status, Events, the pod's annotation): bounded, and valid UTF-8 when
// the output was.
func FuzzShort(f *testing.F) {
	f.Add(strings.Repeat("é", 200))
	f.Add(strings.Repeat("a", 299) + "€")
	f.Add("  short  ")
	f.Fuzz(func(t *testing.T, s string) {
		got := short(s)
		if len(got) > 303 {
			t.Fatalf("short gave %d bytes", len(got))
		}
		if utf8.ValidString(s) && !utf8.ValidString(got) {
			t.Fatalf("short cut a character in two: %q", got)
		}
	})
}
