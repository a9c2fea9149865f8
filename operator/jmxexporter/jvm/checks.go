package jvm

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"go.yaml.in/yaml/v3"
)

// CheckPort fails when the agent could not listen on port: a port already
// in use (in the pod's network namespace) or a privileged port. The agent
// calls System.exit(1) when it cannot bind, taking the application down,
// so this is checked before loading it.
//
// The check is a snapshot, not a reservation: between the test bind (and
// its close) and the agent's own bind, another process may take the port
// (an application opening it during its start, a sidecar), and for the
// moment of the test bind the helper itself holds the port, so a process
// of the pod that binds it just then fails. Both windows are a few
// milliseconds; the first still ends with the agent exiting the JVM.
// Choose a port nothing else in the pod uses.
func CheckPort(port int) *Result {
	if owner := listening(port); owner != "" {
		r := failed(ReasonPortInUse, fmt.Sprintf("port %d is already in use in the pod (%s); choose another spec.port", port, owner), true)
		return &r
	}
	l, err := net.Listen("tcp", ":"+strconv.Itoa(port))
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		r := failed(ReasonPortInUse, fmt.Sprintf("port %d is already in use in the pod; choose another spec.port", port), true)
		return &r
	case errors.Is(err, syscall.EACCES):
		r := failed(ReasonPortNotAllowed, fmt.Sprintf("port %d is privileged and the container may not bind it; choose a port above 1023", port), false)
		return &r
	case err != nil:
		r := failed(ReasonPortInUse, fmt.Sprintf("cannot listen on port %d: %v", port, err), true)
		return &r
	}
	_ = l.Close()
	return nil
}

// listening names a listening socket on port from /proc/net/tcp{,6}, which
// sees ports whatever address they are bound to.
func listening(port int) string {
	for _, file := range []string{"tcp", "tcp6"} {
		f, err := os.Open(filepath.Join(Proc, "net", file))
		if err != nil {
			continue
		}
		s := bufio.NewScanner(f)
		for s.Scan() {
			fields := strings.Fields(s.Text())
			// sl local_address rem_address st ...; st 0A is LISTEN.
			if len(fields) < 4 || fields[3] != "0A" {
				continue
			}
			_, hexPort, ok := strings.Cut(fields[1], ":")
			if p, err := strconv.ParseUint(hexPort, 16, 16); ok && err == nil && int(p) == port {
				f.Close()
				return "a socket listens on " + file
			}
		}
		f.Close()
	}
	return ""
}

// CheckConfig parses the exporter's configuration the way the agent will:
// the agent exits the JVM on a configuration it cannot read, so a bad one
// is reported instead of loaded. Unknown keys are accepted (the agent
// ignores them); the known ones must have the right type.
func CheckConfig(file string) *Result {
	raw, err := os.ReadFile(file)
	if err != nil {
		r := failed(ReasonInvalidConfig, fmt.Sprintf("reading the exporter configuration: %v", err), true)
		return &r
	}
	if msg := configProblem(raw); msg != "" {
		r := failed(ReasonInvalidConfig, "the exporter configuration would make the agent exit the JVM: "+msg, true)
		return &r
	}
	return nil
}

func configProblem(raw []byte) string {
	var doc any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return "not YAML: " + err.Error()
	}
	if doc == nil {
		return "" // an empty configuration exports every MBean
	}
	top, ok := doc.(map[string]any)
	if !ok {
		return "the top level must be a mapping of settings (lowercaseOutputName, rules, ...)"
	}
	checks := map[string]string{
		"startDelaySeconds": "int", "lowercaseOutputName": "bool", "lowercaseOutputLabelNames": "bool",
		"ssl": "bool", "hostPort": "string", "jmxUrl": "string", "username": "string", "password": "string",
		"whitelistObjectNames": "list", "blacklistObjectNames": "list", "includeObjectNames": "list",
		"excludeObjectNames": "list", "rules": "list",
	}
	for key, kind := range checks {
		if v, ok := top[key]; ok && !hasKind(v, kind) {
			return fmt.Sprintf("%s must be a %s", key, kindName(kind))
		}
	}
	if top["hostPort"] != nil && top["jmxUrl"] != nil {
		return "at most one of hostPort and jmxUrl may be set"
	}
	rules, _ := top["rules"].([]any)
	for i, r := range rules {
		rule, ok := r.(map[string]any)
		if !ok {
			return fmt.Sprintf("rules[%d] must be a mapping (pattern, name, ...)", i)
		}
		for _, key := range []string{"pattern", "name", "help", "type"} {
			if v, ok := rule[key]; ok && !hasKind(v, "string") {
				return fmt.Sprintf("rules[%d].%s must be a string", i, key)
			}
		}
		if t, ok := rule["type"].(string); ok && !strings.Contains(" GAUGE COUNTER UNTYPED UNKNOWN ", " "+t+" ") {
			return fmt.Sprintf("rules[%d].type must be GAUGE, COUNTER or UNTYPED, not %q", i, t)
		}
		if rule["name"] != nil && rule["pattern"] == nil {
			return fmt.Sprintf("rules[%d] has a name but no pattern", i)
		}
		if v, ok := rule["labels"]; ok && !hasKind(v, "map") {
			return fmt.Sprintf("rules[%d].labels must be a mapping", i)
		}
	}
	return ""
}

func hasKind(v any, kind string) bool {
	switch kind {
	case "int":
		_, ok := v.(int)
		return ok
	case "bool":
		_, ok := v.(bool)
		return ok
	case "string":
		_, ok := v.(string)
		return ok
	case "list":
		_, ok := v.([]any)
		return ok
	case "map":
		_, ok := v.(map[string]any)
		return ok
	}
	return false
}

func kindName(kind string) string {
	return map[string]string{"int": "whole number", "bool": "boolean (true/false)", "string": "string", "list": "list", "map": "mapping"}[kind]
}
