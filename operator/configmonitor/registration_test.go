package configmonitor

import (
	"testing"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/registration"
)

func settings(t *testing.T, args ...string) *viper.Viper {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.StringSlice(registration.FlagWatchNamespaces, nil, "")
	fs.StringSlice(registration.FlagExcludeNamespaces, nil, "")
	addFlags(fs)
	require.NoError(t, fs.Parse(args))
	v := viper.New()
	require.NoError(t, v.BindPFlags(fs))
	return v
}

func TestWorkersAndNamespacesComeFromTheOperatorsSettings(t *testing.T) {
	o, err := OptionsFrom(settings(t))
	require.NoError(t, err)
	assert.Equal(t, DefaultWorkers, o.Workers)
	assert.Empty(t, o.Namespaces, "the workload cache covers every namespace unless the operator is limited")

	o, err = OptionsFrom(settings(t, "--configmonitor-workers=16", "--watch-namespaces=a,b"))
	require.NoError(t, err)
	assert.Equal(t, 16, o.Workers)
	assert.Equal(t, []string{"a", "b"}, o.Namespaces)
}

func TestZeroWorkersIsRefused(t *testing.T) {
	_, err := OptionsFrom(settings(t, "--configmonitor-workers=0"))
	require.ErrorContains(t, err, "configmonitor-workers must be positive")
}
