package jmxexporter

import (
	"fmt"
	"path"

	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"

	banzaiv1alpha1 "github.com/deckhand-dev/deckhand/operator/apis/banzaicloud/v1alpha1"
	"github.com/deckhand-dev/deckhand/operator/registration"
)

// The controller's settings, by flag name.
const (
	flagHelper     = "jmxexporter-helper"
	flagAgentJar   = "jmxexporter-agent-jar"
	flagTargetDir  = "jmxexporter-target-dir"
	flagNamespaces = "jmxexporter-namespaces"
)

// Defaults match the operator image (Dockerfile).
const (
	DefaultHelper   = "/usr/local/lib/deckhand/deckhand-jmx-attach-linux-{arch}"
	DefaultAgentJar = "/usr/local/lib/deckhand/jmx_prometheus_javaagent.jar"
)

// Registration is how the registry knows PrometheusJmxExporter.
var Registration = registration.Controller{
	Name:        Name,
	ValuesKey:   "jmxExporter",
	AddToScheme: banzaiv1alpha1.AddToScheme,
	Flags:       addFlags,
	Check:       func(s registration.Settings) error { _, err := OptionsFrom(s); return err },
	Setup: func(mgr ctrl.Manager, s registration.Settings) error {
		o, err := OptionsFrom(s)
		if err != nil {
			return err
		}
		return Setup(mgr, o)
	},
}

func addFlags(fs *pflag.FlagSet) {
	fs.String(flagHelper, DefaultHelper, "the attach helper binary copied into Java containers; {arch} is replaced by the container's architecture (amd64, arm64)")
	fs.String(flagAgentJar, DefaultAgentJar, "the Prometheus JMX exporter agent jar (jmx_prometheus_javaagent) copied into Java containers")
	fs.String(flagTargetDir, DefaultTargetDir, "directory inside Java containers for the agent, its configuration and the helper (must be writable)")
	fs.StringSlice(flagNamespaces, nil, "limit the JMX exporter controller to these namespaces (its caches and so its RBAC), whatever --watch-namespaces says; empty: the operator's namespaces")
}

// OptionsFrom reads the controller's settings and checks them.
func OptionsFrom(s registration.Settings) (Options, error) {
	o := Options{
		HelperPath: s.GetString(flagHelper),
		AgentJar:   s.GetString(flagAgentJar),
		TargetDir:  s.GetString(flagTargetDir),
		Namespaces: s.GetStringSlice(flagNamespaces),
	}
	if o.TargetDir == "" {
		o.TargetDir = DefaultTargetDir
	}
	if !path.IsAbs(o.TargetDir) {
		return o, fmt.Errorf("%s %q must be an absolute path inside the containers", flagTargetDir, o.TargetDir)
	}
	if o.HelperPath == "" || o.AgentJar == "" {
		return o, fmt.Errorf("%s and %s must name files", flagHelper, flagAgentJar)
	}
	return o, nil
}
