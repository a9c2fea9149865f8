package manager

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

func TestLeaderElectionTimesDefaultToTenEightAndTwoSeconds(t *testing.T) {
	cfg, err := Load(nil)
	require.NoError(t, err)
	assert.Equal(t, 10*time.Second, cfg.LeaderElectionLeaseDuration)
	assert.Equal(t, 8*time.Second, cfg.LeaderElectionRenewDeadline)
	assert.Equal(t, 2*time.Second, cfg.LeaderElectionRetryPeriod)

	// A Config built in code gets the same.
	lease, renew, retry := Config{}.leaderElectionTimes()
	assert.Equal(t, []time.Duration{10 * time.Second, 8 * time.Second, 2 * time.Second}, []time.Duration{lease, renew, retry})
}

func TestLeaderElectionTimesFromFlagsEnvAndFile(t *testing.T) {
	t.Setenv("DECKHAND_CONFIG", writeFile(t, "leader-election-lease-duration: 30s\nleader-election-renew-deadline: 20s\n"))
	t.Setenv("DECKHAND_LEADER_ELECTION_RENEW_DEADLINE", "25s")
	cfg, err := Load([]string{"--leader-election-retry-period=5s"})
	require.NoError(t, err)
	assert.Equal(t, 30*time.Second, cfg.LeaderElectionLeaseDuration, "from the file")
	assert.Equal(t, 25*time.Second, cfg.LeaderElectionRenewDeadline, "env over file")
	assert.Equal(t, 5*time.Second, cfg.LeaderElectionRetryPeriod, "from the flag")
}

func TestLeaderElectionTimesAreChecked(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		want []string // in the error, all of them
	}{
		"lease not longer than renew": {[]string{"--leader-election-lease-duration=8s"},
			[]string{"leader-election-lease-duration 8s must be longer than leader-election-renew-deadline 8s"}},
		"renew not longer than retry": {[]string{"--leader-election-renew-deadline=2s"},
			[]string{"leader-election-renew-deadline 2s must be longer than 1.2 × leader-election-retry-period 2s"}},
		// client-go's elector refuses it (renewals come with up to 20% jitter).
		"renew within the retry's jitter": {[]string{"--leader-election-renew-deadline=10s", "--leader-election-retry-period=9s"},
			[]string{"leader-election-renew-deadline 10s must be longer than 1.2 × leader-election-retry-period 9s"}},
		"zero retry": {[]string{"--leader-election-retry-period=0s"},
			[]string{"leader-election-retry-period 0s: must be positive"}},
		"negative lease": {[]string{"--leader-election-lease-duration=-15s"},
			[]string{"leader-election-lease-duration -15s: must be positive"}},
		"lease in part seconds": {[]string{"--leader-election-lease-duration=15500ms"},
			[]string{"leader-election-lease-duration 15.5s: must be whole seconds"}},
		"not a duration": {[]string{"--leader-election-lease-duration=15"},
			[]string{"--leader-election-lease-duration", `must be a duration like "30s"`}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Load(tc.args)
			require.Error(t, err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}

	// From the config file, the file is named too.
	file := writeFile(t, "leader-election-lease-duration: 5s\n")
	_, err := Load([]string{"--config", file})
	require.ErrorContains(t, err, "leader-election-lease-duration 5s must be longer than leader-election-renew-deadline 8s")
	assert.Contains(t, err.Error(), file)

	for _, ok := range [][]string{
		nil,
		{"--leader-election-lease-duration=30s", "--leader-election-renew-deadline=20s", "--leader-election-retry-period=4s"},
		{"--leader-election-lease-duration=4s", "--leader-election-renew-deadline=3s", "--leader-election-retry-period=500ms"},
	} {
		_, err := Load(ok)
		assert.NoError(t, err, "%v", ok)
	}
}

// What Load accepts, client-go's elector accepts: the manager cannot
// fail at start over its times.
func TestAcceptedLeaderElectionTimesSuitClientGo(t *testing.T) {
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, "ns", "lease", nil, nil, resourcelock.ResourceLockConfig{Identity: "me"})
	require.NoError(t, err)
	seconds := []time.Duration{0, 500 * time.Millisecond, time.Second, 2 * time.Second, 2400 * time.Millisecond, 3 * time.Second, 10 * time.Second, 15 * time.Second}
	accepted := 0
	for _, lease := range seconds {
		for _, renew := range seconds {
			for _, retry := range seconds {
				if checkLeaderElectionTimes(lease, renew, retry) != nil {
					continue
				}
				accepted++
				_, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
					Lock: lock, LeaseDuration: lease, RenewDeadline: renew, RetryPeriod: retry,
					Callbacks: leaderelection.LeaderCallbacks{OnStartedLeading: func(context.Context) {}, OnStoppedLeading: func() {}},
				})
				assert.NoError(t, err, "lease %s, renew %s, retry %s", lease, renew, retry)
			}
		}
	}
	require.Positive(t, accepted)
}

func TestTheLeaderIdentityInAPodIsThePodsName(t *testing.T) {
	t.Setenv("POD_NAME", "deckhand-6c9f8b7d5-x2k4q")
	first, err := leaderIdentity()
	require.NoError(t, err)
	again, err := leaderIdentity()
	require.NoError(t, err)
	assert.Equal(t, "deckhand-6c9f8b7d5-x2k4q", first)
	assert.Equal(t, first, again, "a container restarted in the pod holds the Lease under the same name")
}

func TestTheLeaderIdentityOutsideAPodIsUnique(t *testing.T) {
	t.Setenv("POD_NAME", "")
	host, err := os.Hostname()
	require.NoError(t, err)
	first, err := leaderIdentity()
	require.NoError(t, err)
	second, err := leaderIdentity()
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(first, host+"_"), "controller-runtime's default: host_uuid, got %q", first)
	assert.NotEqual(t, first, second, "two operators on one host must never share an identity")
}
