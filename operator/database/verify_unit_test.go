package database

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The scratch volume holds the restored cluster: 8 x the dump plus 1Gi,
// in whole MiB.
func TestScratchVolumeIsSizedFromTheDump(t *testing.T) {
	for _, tc := range []struct {
		dump int64
		want string
	}{
		{0, "1Gi"},
		{100 << 20, "1824Mi"},
		{1 << 30, "9Gi"},
		{12345, "1025Mi"},
	} {
		got := scratchSize(tc.dump)
		assert.Zero(t, got.Cmp(resource.MustParse(tc.want)), "dump %d: %s, want %s", tc.dump, got.String(), tc.want)
	}
}
