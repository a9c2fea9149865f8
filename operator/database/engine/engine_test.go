package engine

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestTagVersion(t *testing.T) {
	for image, want := range map[string]string{
		"postgres:17.6":        "17.6",
		"postgres:17":          "17",
		"postgres:15.4-alpine": "15.4",
		"docker.io/library/postgres:16.2-bookworm@sha256:0123": "16.2",
		"registry.local:5000/db/postgres:18.0":                 "18.0",
		"mariadb:v11.4.2":                                      "11.4.2",
		"super-great-docker-image":                             "",
		"postgres:latest":                                      "",
		"registry.local:5000/postgres":                         "",
		"postgres@sha256:0123":                                 "",
	} {
		got, ok := TagVersion(image)
		assert.Equal(t, want, got, image)
		assert.Equal(t, want != "", ok, image)
	}
}

func TestParseReport(t *testing.T) {
	r, err := ParseReport(`{"serverVersion":"15.14 (Debian 15.14-0+deb12u1)"}` + "\n")
	assert.NoError(t, err)
	assert.Equal(t, "15.14", r.Version())
	r, err = ParseReport("")
	assert.NoError(t, err)
	assert.Empty(t, r.Version())
	_, err = ParseReport("psql: error: connection refused")
	assert.Error(t, err)
}
