// Package jvm is what the attach helper (cmd/deckhand-jmx-attach) does
// inside a container: find the JVMs from /proc, check that the agent can
// start (free port, a configuration it can parse), load it through the
// HotSpot dynamic attach protocol, and check that metrics answer. It needs
// no JDK, shell or other tool in the container, and only the standard
// library and a YAML parser, so the helper stays a small static binary.
//
// Every command reports one Result as a JSON line on stdout; the controller
// parses it. The types here are that contract.
package jvm

// Outcomes of an attach.
const (
	// Attached: the agent was loaded into the JVM now.
	Attached = "Attached"
	// AlreadyAttached: this helper loaded the agent into this JVM earlier.
	AlreadyAttached = "AlreadyAttached"
	// Failed: nothing was loaded; Retry says whether trying again later is
	// safe and may help.
	Failed = "Failed"
	// Unknown: the load command was sent but its outcome is unknown. It is
	// never retried: a second agent in one JVM exits it (its metrics'
	// registration or its port's bind fails, and the agent calls
	// System.exit).
	Unknown = "Unknown"
	// Serving and NotServing are the outcomes of verify.
	Serving    = "Serving"
	NotServing = "NotServing"
)

// Reasons, as users see them in the pod's state and the exporter's status.
const (
	ReasonNoJVM           = "NoJVM"
	ReasonAmbiguousJVM    = "AmbiguousJVM"
	ReasonAttachDisabled  = "AttachDisabled"
	ReasonDifferentUser   = "DifferentUser"
	ReasonReadOnlyFS      = "ReadOnlyFilesystem"
	ReasonNoSpace         = "NoSpaceLeft"
	ReasonPortInUse       = "PortInUse"
	ReasonPortNotAllowed  = "PortNotAllowed"
	ReasonInvalidConfig   = "InvalidConfig"
	ReasonAgentConfigured = "AgentAlreadyConfigured"
	ReasonAttachTimeout   = "AttachTimeout"
	ReasonAttachRefused   = "AttachRefused"
	ReasonAgentFailed     = "AgentFailed"
	// ReasonJVMExited: the JVM ended while the agent was loading. A JVM
	// gone before anything was sent is ReasonNoJVM (nothing was loaded).
	ReasonJVMExited        = "JVMExited"
	ReasonNoResponse       = "NoResponse"
	ReasonAttachError      = "AttachError"
	ReasonMetricsNotServed = "MetricsNotServed"
	ReasonSignalNotHandled = "SignalNotHandled"
	ReasonNotInspectable   = "JVMNotInspectable"
)

// JVM is a Java process found in the container. It carries no command line:
// those often hold passwords (-Dpassword=...), and results end up in the
// pod's annotations and the exporter's status.
type JVM struct {
	PID int `json:"pid"`
	// StartTime is the process start time in clock ticks since boot
	// (/proc/<pid>/stat), so a reused PID is never taken for the same JVM.
	StartTime uint64 `json:"startTime"`
	UID       int    `json:"uid"`
	// GID is the JVM's effective group: HotSpot checks it too.
	GID int `json:"gid"`
	// Main is the main class, module or jar.
	Main string `json:"main,omitempty"`
	// JavaVersion is JAVA_VERSION from the JDK's release file, when readable.
	JavaVersion string `json:"javaVersion,omitempty"`
	// AttachDisabled: started with -XX:+DisableAttachMechanism.
	AttachDisabled bool `json:"attachDisabled,omitempty"`
	// DynamicAgentsAllowed: started with -XX:+EnableDynamicAgentLoading.
	DynamicAgentsAllowed bool `json:"dynamicAgentsAllowed,omitempty"`
}

// Result is what each helper command prints, as one JSON line.
type Result struct {
	// Result is one of the outcomes above.
	Result string `json:"result"`
	// Reason is set when Result is Failed, Unknown or NotServing.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// Retry: trying again later is safe (nothing was loaded) and may help.
	Retry bool `json:"retry,omitempty"`
	// JVM is the JVM attached to (or chosen).
	JVM *JVM `json:"jvm,omitempty"`
	// JVMs are all the JVMs found (discover; ambiguity).
	JVMs []JVM `json:"jvms,omitempty"`
	// Warning is worth an Event even on success (JDK 21+'s warning about
	// dynamically loaded agents).
	Warning string `json:"warning,omitempty"`
	// Serving: the metrics endpoint answered with Prometheus text.
	Serving bool `json:"serving,omitempty"`
	// Checksums maps file names to their SHA-256 (checksum; "" when absent).
	Checksums map[string]string `json:"checksums,omitempty"`
}

// failed is a Result for a failure that left the JVM untouched.
func failed(reason, msg string, retry bool) Result {
	return Result{Result: Failed, Reason: reason, Message: msg, Retry: retry}
}

// MayHaveLoaded says whether an attach with this outcome may have put the
// agent into the JVM, so that loading it again could start a second
// exporter (which exits the JVM): a success, an unknown outcome, or a
// failure after the load command reached the JVM. Every other failure
// left the JVM untouched and may be tried again once its cause is fixed.
func MayHaveLoaded(result, reason string) bool {
	switch result {
	case Attached, AlreadyAttached, Unknown:
		return true
	case Failed:
		return reason == ReasonAgentFailed || reason == ReasonJVMExited
	}
	return false
}
