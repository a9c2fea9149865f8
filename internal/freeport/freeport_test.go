package freeport

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Two ports below the range Get uses, so that this test and the tests that
// run beside it never ask for the same ones.
const testLo, testHi = 19998, 19999

// holderEnv makes the test binary a holder: it reserves a port of the test
// range, prints it, and holds it until its stdin closes.
const holderEnv = "DECKHAND_FREEPORT_HOLDER"

func TestMain(m *testing.M) {
	if os.Getenv(holderEnv) == "1" {
		port, release, err := reserve(testLo, testHi)
		if err != nil {
			os.Stdout.WriteString("error " + err.Error() + "\n")
			os.Exit(0)
		}
		os.Stdout.WriteString(strconv.Itoa(port) + "\n")
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		release()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// holder starts another process that reserves a port of the test range:
// what it got ("error ..." when none), held until the test ends.
func holder(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holderEnv+"=1")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	return strings.TrimSpace(line)
}

// A port one process holds is never handed to another while it holds it,
// even though nothing listens on it yet; once every port is held, the
// next asker is told so instead of being given a taken port.
func TestAHeldPortIsNeverHandedToAnotherProcess(t *testing.T) {
	port, release, err := reserve(testLo, testHi)
	require.NoError(t, err)
	defer release()

	other := holder(t)
	require.NotEqual(t, strconv.Itoa(port), other, "the other process was given the port this one holds")
	assert.Contains(t, []string{strconv.Itoa(testLo), strconv.Itoa(testHi)}, other)

	third := holder(t)
	assert.Contains(t, third, "error no free port in 19998-19999", "both ports are held")
}

// Within one process too: two tests side by side never share a port.
func TestAHeldPortIsNeverHandedOutAgainInTheSameProcess(t *testing.T) {
	a, releaseA, err := reserve(testLo, testHi)
	require.NoError(t, err)
	b, releaseB, err := reserve(testLo, testHi)
	require.NoError(t, err)
	assert.NotEqual(t, a, b)
	_, _, err = reserve(testLo, testHi)
	require.Error(t, err, "both ports are held")

	releaseA()
	again, releaseAgain, err := reserve(testLo, testHi)
	require.NoError(t, err, "a released port is free again")
	assert.Equal(t, a, again)
	releaseAgain()
	releaseB()
}

// A port something listens on (a process that is no deckhand test) is
// skipped.
func TestAPortSomethingListensOnIsNotHandedOut(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(testLo))
	require.NoError(t, err)
	defer l.Close()
	for range 5 {
		port, release, err := reserve(testLo, testHi)
		require.NoError(t, err)
		assert.Equal(t, testHi, port)
		release()
	}
}

// Get's ports are in its range, and the test holds them until it ends.
func TestGetHoldsThePortUntilTheTestEnds(t *testing.T) {
	var port int
	t.Run("holder", func(t *testing.T) {
		port = Get(t)
		assert.GreaterOrEqual(t, port, first)
		assert.LessOrEqual(t, port, last)
		_, err := hold(port)
		require.ErrorIs(t, err, errTaken, "held while the test runs")
	})
	release, err := hold(port)
	require.NoError(t, err, "released when the test ended")
	release()
}
