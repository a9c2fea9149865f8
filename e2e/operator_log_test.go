package e2e

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/deckhand-dev/deckhand/internal/syncbuf"
)

func TestOperatorFailuresAreErrorLinesNotWords(t *testing.T) {
	op := &HostOperator{logs: &syncbuf.Buffer{}}
	for _, line := range []string{
		`{"level":"info","msg":"Starting workers","controller":"blogpost"}`,
		`{"level":"info","msg":"monitor names a Secret the operator may not read (forbidden by choice)"}`,
		`{"level":"error","msg":"Reconciler error","error":"Operation cannot be fulfilled on deployments.apps \"frontend\": the object has been modified; please apply your changes to the latest version and try again"}`,
		`{"level":"error","msg":"Reconciler error","controller":"tdset","error":"deployments.apps is forbidden"}`,
		`E1123 13:03:53.123456   42 reflector.go:200] "Failed to watch" err="secrets is forbidden"`,
		`I1123 13:03:53.123456   42 leaderelection.go:258] "Attempting to acquire leader lease"`,
		`panic: runtime error: invalid memory address or nil pointer dereference`,
	} {
		_, _ = op.logs.Write([]byte(line + "\n"))
	}
	assert.Equal(t, []string{
		`{"level":"error","msg":"Reconciler error","controller":"tdset","error":"deployments.apps is forbidden"}`,
		`E1123 13:03:53.123456   42 reflector.go:200] "Failed to watch" err="secrets is forbidden"`,
		`panic: runtime error: invalid memory address or nil pointer dereference`,
	}, op.Failures())
}
