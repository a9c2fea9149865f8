package instance_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

func TestLSNReadsComparesAndWritesAsPostgreSQLDoes(t *testing.T) {
	l, err := instance.ParseLSN("16/B374D848")
	require.NoError(t, err)
	assert.Equal(t, instance.LSN(0x16B374D848), l)
	assert.Equal(t, "16/B374D848", l.String())
	m, _ := instance.ParseLSN("16/B374D900")
	assert.Equal(t, uint64(0xB8), l.Behind(m))
	assert.Zero(t, m.Behind(l))
	for _, bad := range []string{"", "16", "x/1", "1/100000000"} {
		_, err := instance.ParseLSN(bad)
		assert.Error(t, err, bad)
	}
	b, err := json.Marshal(struct {
		A, B instance.LSN
	}{A: l})
	require.NoError(t, err)
	assert.JSONEq(t, `{"A":"16/B374D848","B":""}`, string(b))
	var back struct{ A, B instance.LSN }
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, l, back.A)
}

// The host of primary_conninfo, and nothing else of it (the password is
// in the same string).
func TestConninfoHostReadsOnlyTheHost(t *testing.T) {
	for conninfo, want := range map[string]string{
		"user=deckhand_replication password='s3cr\\'et host' host=db-rw.ns.svc port=5432": "db-rw.ns.svc",
		"host='db-rw.ns.svc' port='5432' password='p'":                                    "db-rw.ns.svc",
		"host = 10.0.0.1 port=5432":                                                       "10.0.0.1",
		"port=5432":                                                                       "",
		"":                                                                                "",
	} {
		assert.Equal(t, want, instance.ConninfoHost(conninfo), conninfo)
	}
}
