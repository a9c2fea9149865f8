package configmonitor

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// stamps remembers, per workload and annotation, the configuration hash
// this process put on (or found on) the workload's template and the
// generation that carried it. The metadata cache has no template, so
// without it every pass of a rollout would patch each workload it already
// rolled, one restart token each: with a small burst a rollout then spends
// its tokens re-walking what is done. While the generation is unchanged the
// template is too, so the workload still carries the hash.
//
// An entry is a few dozen bytes per workload and monitor; entries of
// deleted workloads stay until the process restarts.
type stamps struct {
	mu sync.Mutex
	m  map[stampKey]stamp
}

type stampKey struct {
	uid        types.UID
	annotation string
}

type stamp struct {
	hash       string
	generation int64
}

// carries reports whether the workload of this uid, now at generation,
// carries hash under annotation as far as this process knows.
func (s *stamps) carries(uid types.UID, annotation, hash string, generation int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	got, ok := s.m[stampKey{uid, annotation}]
	return ok && got.hash == hash && got.generation == generation
}

// record notes that the workload's template at generation carries hash.
func (s *stamps) record(uid types.UID, annotation, hash string, generation int64) {
	if uid == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[stampKey]stamp{}
	}
	s.m[stampKey{uid, annotation}] = stamp{hash: hash, generation: generation}
}
