package tdset

import (
	"testing"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func settings(t *testing.T, args ...string) *viper.Viper {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	Registration.Flags(fs)
	require.NoError(t, fs.Parse(args))
	v := viper.New()
	require.NoError(t, v.BindPFlags(fs))
	return v
}

func TestWorkersFlag(t *testing.T) {
	o, err := OptionsFrom(settings(t))
	require.NoError(t, err)
	assert.Equal(t, DefaultWorkers, o.Workers)
	o, err = OptionsFrom(settings(t, "--tdset-workers=32"))
	require.NoError(t, err)
	assert.Equal(t, 32, o.Workers)
	_, err = OptionsFrom(settings(t, "--tdset-workers=0"))
	require.ErrorContains(t, err, "tdset-workers must be positive")
}
