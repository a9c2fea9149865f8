package s3test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTheStoreServesTLSAndKeepsItsObjectsAcrossARestart(t *testing.T) {
	t.Parallel()
	s := Start(t, "bucket")
	s.request(t, http.MethodPut, "/bucket/some/key", []byte("value"))
	assert.Equal(t, []string{"some/key"}, s.Keys(t, ""))

	// Down: nothing answers on the port.
	s.Stop(t)
	_, err := s.client().Get(s.Endpoint + "/")
	require.Error(t, err)

	s.Restart(t)
	s.request(t, http.MethodPut, "/bucket/other", []byte("value"))
	assert.Equal(t, []string{"other", "some/key"}, s.Keys(t, ""))

	// An unsigned request is refused: the keys are needed.
	resp, err := s.client().Get(s.Endpoint + "/bucket/other")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
}
