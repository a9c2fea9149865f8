package jvm

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// configCase is one configuration with what jmx_prometheus_javaagent
// 1.0.1 does with it at start (the attach) and when it re-reads it after a
// change, and a part of deckhand's refusal ("" when accepted).
type configCase struct {
	name            string
	config          string
	atStart, reload string
	refusal         string
}

const (
	exit   = UpstreamExit
	log    = UpstreamLog
	accept = UpstreamAccept
)

// upstreamCases come from jmx_exporter 1.0.1's own tests
// (collector/src/test/java/io/prometheus/jmx/JmxCollectorTest.java),
// retyped; JmxCollectorTest builds a JmxCollector without the agent, so
// where the agent adds a step (HTTPServerFactory, exitOnConfigError) the
// outcome here is the agent's.
var upstreamCases = []configCase{
	{"testRulesMustHaveNameWithHelp", "---\nrules:\n- help: foo", exit, log, "without a name"},
	{"testRulesMustHaveNameWithLabels", "---\nrules:\n- labels: {}", exit, log, "without a name"},
	{"testRulesMustHavePatternWithName", "---\nrules:\n- name: foo", exit, log, "without a pattern"},
	{"testNameIsReplacedOnMatch", "\n---\nrules:\n- pattern: \"^hadoop<service=DataNode, name=DataNodeActivity-ams-hdd001-50010><>replaceBlockOpMinTime:\"\n  name: foo", accept, accept, ""},
	{"testSnakeCaseAttrName", "\n---\nrules:\n- pattern: \"^hadoop<service=DataNode, name=DataNodeActivity-ams-hdd001-50010><>replace_block_op_min_time:\"\n  name: foo\n  attrNameSnakeCase: true", accept, accept, ""},
	{"testLabelsAreSet", "\n---\nrules:\n- pattern: \"^hadoop<service=DataNode, name=DataNodeActivity-ams-hdd001-50010><>replaceBlockOpMinTime:\"\n  name: foo\n  labels:\n    l: v", accept, accept, ""},
	{"testEmptyLabelsAreIgnored", "\n---\nrules:\n- pattern: \"^hadoop<service=DataNode, name=DataNodeActivity-ams-hdd001-50010><>replaceBlockOpMinTime:\"\n  name: foo\n  labels:\n    '': v\n    l: ''", accept, accept, ""},
	{"testLowercaseOutputName", "\n---\nlowercaseOutputName: true\nrules:\n- pattern: \"^hadoop<service=DataNode, name=DataNodeActivity-ams-hdd001-50010><>replaceBlockOpMinTime:\"\n  name: Foo", accept, accept, ""},
	{"testLowercaseOutputLabelNames", "\n---\nlowercaseOutputLabelNames: true\nrules:\n- pattern: \"^hadoop<service=DataNode, name=DataNodeActivity-ams-hdd001-50010><>replaceBlockOpMinTime:\"\n  name: Foo\n  labels:\n    ABC: DEF", accept, accept, ""},
	{"testNameAndLabelsFromPattern", "\n---\nrules:\n- pattern: \"^hadoop<(service)=(DataNode), name=DataNodeActivity-ams-hdd001-50010><>(replaceBlockOpMinTime):\"\n  name: hadoop_$3\n  labels:\n    \"$1\": \"$2\"", accept, accept, ""},
	{"testNameAndLabelSanitized", "\n---\nrules:\n- pattern: \"^(hadoop<service=DataNode, )name=DataNodeActivity-ams-hdd001-50010><>replaceBlockOpMinTime:\"\n  name: \"$1\"\n  labels:\n    \"$1\": \"$1\"", accept, accept, ""},
	{"stopsOnEmptyName", "\n---\nrules:\n- pattern: \".*\"\n  name: ''\n- pattern: \".*\"\n  name: foo", accept, accept, ""},
	// JmxCollectorTest's "---" (an empty document) is fine for the
	// collector, but the agent's HTTPServerFactory.createMapAccessor
	// throws "Map is null" on it: premain exits.
	{"testDefaultExportLowercaseOutputName (---)", "---", exit, accept, "empty"},
	{"testIncludeObjectNames", "\n---\nincludeObjectNames:\n- java.lang:*\n- java.lang:*\n- org.apache.cassandra.concurrent:*", accept, accept, ""},
	{"testWhitelist", "\n---\nwhitelistObjectNames:\n- java.lang:*\n- java.lang:*\n- org.apache.cassandra.concurrent:*", accept, accept, ""},
	{"testIncludeExclude", "\n---\nincludeObjectNames:\n- java.lang:*\n- org.apache.cassandra.concurrent:*\nexcludeObjectNames:\n- org.apache.cassandra.concurrent:*", accept, accept, ""},
	{"testWhitelistBlacklist", "\n---\nwhitelistObjectNames:\n- java.lang:*\n- org.apache.cassandra.concurrent:*\nblacklistObjectNames:\n- org.apache.cassandra.concurrent:*", accept, accept, ""},
	{"testDefaultExport lowercaseOutputName", "---\nlowercaseOutputName: true", accept, accept, ""},
	{"testServletRequestPattern", "\n---\nrules:\n- pattern: 'Catalina<j2eeType=Servlet, WebModule=//([-a-zA-Z0-9+&@#/%?=~_|!:.,;]*[-a-zA-Z0-9+&@#/%=~_|]),\n    name=([-a-zA-Z0-9+/$%~_-|!.]*), J2EEApplication=none, \nJ2EEServer=none><>RequestCount:'\n  name: tomcat_request_servlet_count\n  labels:\n    module: \"$1\"\n    servlet: \"$2\"\n  help: Tomcat servlet request count\n  type: COUNTER\n  attrNameSnakeCase: false", accept, accept, ""},
	{"testValueEmpty", "\n---\nrules:\n- pattern: \".*\"\n  name: foo\n  value:", accept, accept, ""},
	{"testValueStatic", "\n---\nrules:\n- pattern: \".*\"\n  name: foo\n  value: 1", accept, accept, ""},
	{"testValueCaptureGroup", "\n---\nrules:\n- pattern: \"^hadoop<.+-500(10)>\"\n  name: foo\n  value: $1", accept, accept, ""},
	{"testValueIgnoreNonNumber", "\n---\nrules:\n- pattern: \".*\"\n  name: foo\n  value: a", accept, accept, ""},
	{"testValueFactorEmpty", "\n---\nrules:\n- pattern: \".*\"\n  name: foo\n  value: 1\n  valueFactor:", accept, accept, ""},
	{"testValueFactor", "\n---\nrules:\n- pattern: \".*\"\n  name: foo\n  value: 1\n  valueFactor: 0.001", accept, accept, ""},
	{"testEnumValue", "\n---\nrules:\n- pattern: \"org.bean.enum<type=StateMetrics.*>State: RUNNING\"\n  name: bean_running\n  value: 1", accept, accept, ""},
	{"testDelayedStartNotReady", "---\nstartDelaySeconds: 1", accept, accept, ""},
	{"testCachedBeansDisabled", "\n---\nrules:\n- pattern: \".*\"\n  name: foo\n  value: 1\n  valueFactor: 4\n  cache: true\n  help: help message", accept, accept, ""},
	{"testCamelLastExchangeFailureTimestamp", "\n---\nrules:\n- pattern: \"io.prometheus.jmx.test<name=PerformanceMetricsMBean><PerformanceMetrics>.*\"\n  attrNameSnakeCase: true", accept, accept, ""},
}

// agentCases are read from JmxCollector.loadConfig, exitOnConfigError,
// ObjectNameAttributeFilter and HTTPServerFactory (1.0.1), and from
// SnakeYAML 2.2's YAML 1.1 resolver.
var agentCases = []configCase{
	// The standalone exporter's settings exit the agent.
	{"hostPort", "hostPort: localhost:9999\n", exit, exit, "hostPort is set"},
	{"jmxUrl", "jmxUrl: service:jmx:rmi:///jndi/rmi://localhost:9999/jmxrmi\n", exit, exit, "jmxUrl is set"},
	{"hostPort and jmxUrl", "hostPort: a:1\njmxUrl: b\n", exit, log, "at most one of hostPort and jmxUrl"},
	{"empty jmxUrl", "jmxUrl: ''\n", accept, accept, ""},
	{"null jmxUrl", "jmxUrl:\n", exit, log, "jmxUrl is null"},
	// YAML 1.1 scalars.
	{"lowercaseOutputName: yes", "lowercaseOutputName: yes\n", accept, accept, ""},
	{"lowercaseOutputName: On", "lowercaseOutputName: On\nlowercaseOutputLabelNames: off\n", accept, accept, ""},
	{"lowercaseOutputName: y is a String in SnakeYAML", "lowercaseOutputName: y\n", exit, log, "is a String, not a Boolean"},
	{"lowercaseOutputName: yes-ish", "lowercaseOutputName: yes-ish\n", exit, log, "not a Boolean"},
	{"lowercaseOutputName: null", "lowercaseOutputName:\n", exit, log, "is null, not a Boolean"},
	{"pattern: on is the regex true", "rules:\n- pattern: on\n", accept, accept, `match the text "true"`},
	{"quoted pattern 'on'", "rules:\n- pattern: 'on'\n", accept, accept, ""},
	{"name: on", "rules:\n- pattern: x\n  name: on\n", exit, log, "name is a Boolean, not a String"},
	{"name: a date", "rules:\n- pattern: x\n  name: 2024-01-01\n", exit, log, "name is a Date"},
	{"label value: yes", "rules:\n- pattern: x\n  name: n\n  labels:\n    enabled: yes\n", exit, log, "labels.enabled is a Boolean"},
	{"help: 12", "rules:\n- pattern: x\n  name: n\n  help: 12\n", exit, log, "help is an Integer"},
	{"type: 1", "rules:\n- pattern: x\n  type: 1\n", exit, log, "type is an Integer"},
	{"type HISTOGRAM is exported as unknown", "rules:\n- pattern: x\n  name: n\n  type: HISTOGRAM\n", accept, accept, ""},
	{"cache: yes", "rules:\n- pattern: x\n  cache: yes\n", accept, accept, ""},
	{"attrNameSnakeCase: 1", "rules:\n- pattern: x\n  attrNameSnakeCase: 1\n", exit, log, "attrNameSnakeCase is an Integer"},
	{"startDelaySeconds octal", "startDelaySeconds: 010\n", accept, accept, ""},
	{"startDelaySeconds: 08 is a Double", "startDelaySeconds: 08\n", exit, log, "is a Double"},
	{"startDelaySeconds beyond int", "startDelaySeconds: 2147483648\n", exit, log, "is a Long"},
	{"startDelaySeconds quoted", "startDelaySeconds: '5'\n", exit, log, "is a String"},
	{"startDelaySeconds null", "startDelaySeconds:\n", log, log, "startDelaySeconds is null"},
	{"username 1234", "username: 1234\n", exit, log, "username is an Integer"},
	{"ssl: yes", "ssl: yes\n", accept, accept, ""},
	// Structure.
	{"not YAML", "startDelaySeconds: [1\n", exit, log, "not YAML"},
	{"a list at the top", "- a\n- b\n", exit, log, "top level is a List"},
	{"two documents", "rules: []\n---\nrules: []\n", exit, log, "more than one YAML document"},
	{"rules not a list", "rules:\n  pattern: not-a-list\n", exit, log, "rules is a Map, not a list"},
	{"a rule not a mapping", "rules:\n- x\n", exit, log, "rules[0] is a String"},
	{"rules: null", "rules:\n", exit, log, "rules is null"},
	{"labels not a mapping", "rules:\n- pattern: x\n  name: n\n  labels: [a]\n", exit, log, "labels is a List"},
	{"unknown keys", "someFutureKey: 1\nrules:\n- pattern: x\n  futureRuleKey: {}\n", accept, accept, ""},
	{"anchors and a merge key", "base: &b {pattern: x, name: n}\nrules:\n- <<: *b\n  help: h\n", accept, accept, ""},
	{"an alias bomb (more than 50 aliases to lists)", aliasBomb(), exit, log, "more than 50 aliases"},
	{"51 nested lists", "x: " + strings.Repeat("[", 51) + strings.Repeat("]", 51) + "\n", exit, log, "nested deeper than 50"},
	{"duplicate keys: the last wins", "lowercaseOutputName: 1\nlowercaseOutputName: true\n", accept, accept, ""},
	// SnakeYAML's Resolver registered VALUE ("=") with no constructor for
	// it, so loading threw; whether 2.2 still does is not verified here
	// (no SnakeYAML on this machine): refused either way.
	{"a plain = (SnakeYAML's value tag, no constructor)", "rules:\n- pattern: x\n  name: =\n", exit, log, "tag !!value"},
	{"a Java class tag", "rules: !!java.util.ArrayList []\n", exit, log, "tag"},
	// Rules' patterns are java.util.regex patterns, wrapped in "^.*(?:" and ").*$".
	{"Java lookahead and possessive", "rules:\n- pattern: '(?=java)java\\.lang<type=(\\w++)>(?<attr>\\w+)(?!x)'\n  name: jvm_$1_${attr}\n", accept, accept, ""},
	{"Java backreference and bounded lookbehind", "rules:\n- pattern: '(a)\\1(?<=a{1,3})'\n", accept, accept, ""},
	{"a brace that is no repetition", "rules:\n- pattern: 'kafka<name=${topic}>'\n", exit, log, "Illegal repetition"},
	{"unbounded lookbehind (JDK 17 takes it, JDK 8 does not)", "rules:\n- pattern: '(?<=a+)b'\n", exit, log, "JDK 8 refuses it"},
	{"unbalanced parenthesis", "rules:\n- pattern: 'a)'\n", exit, log, "Unmatched closing"},
	{"unclosed class", "rules:\n- pattern: '[abc'\n", exit, log, "Unclosed"},
	{"backwards range", "rules:\n- pattern: '[z-a]'\n", exit, log, "Illegal character range"},
	{"unknown escape", "rules:\n- pattern: 'a\\qb'\n", exit, log, "Illegal/unsupported escape"},
	{"dangling star", "rules:\n- pattern: '*foo'\n", exit, log, "Dangling meta character"},
	{"a property Java knows", "rules:\n- pattern: '\\p{IsLatin}\\p{Lu}\\p{javaLowerCase}\\p{Alpha}'\n", accept, accept, ""},
	{"a block deckhand does not check", "rules:\n- pattern: '\\p{InGreek}'\n", exit, log, "not checked by deckhand"},
	{"comments mode is not modelled", "rules:\n- pattern: '(?x) a b'\n", exit, log, "not checked by deckhand"},
	{"name refers to a missing group", "rules:\n- pattern: '(a)'\n  name: x_$2\n", log, log, "No group 2"},
	{"label refers to a missing named group", "rules:\n- pattern: '(a)'\n  name: x\n  labels:\n    l: ${b}\n", log, log, "does not define"},
	{"help with a trailing backslash", "rules:\n- pattern: '(a)'\n  name: x\n  help: 'a\\'\n", log, log, "backslash"},
	{"$10 with one group is $1 then 0", "rules:\n- pattern: '(a)'\n  name: x_$10\n", accept, accept, ""},
	// ObjectNames.
	{"an ObjectName without a domain", "includeObjectNames: [java.lang]\n", exit, log, "no domain part"},
	{"an ObjectName with a key twice", "excludeObjectNames: ['java.lang:type=Memory,type=Heap']\n", exit, log, "twice"},
	{"an ObjectName with a quoted value and a wildcard", "includeObjectNames: ['kafka:name=\"a,b\",*', 'java.lang:type=Mem*']\n", accept, accept, ""},
	{"an ObjectName that is a number", "includeObjectNames: [1]\n", exit, log, "is an Integer"},
	{"blacklist is not read when exclude is there", "excludeObjectNames: ['a:*']\nblacklistObjectNames: [nonsense]\n", accept, accept, ""},
	{"excludeObjectNameAttributes", "excludeObjectNameAttributes:\n  'java.lang:type=OperatingSystem': [ObjectName]\nautoExcludeObjectNameAttributes: no\n", accept, accept, ""},
	{"excludeObjectNameAttributes with a null list", "excludeObjectNameAttributes:\n  'java.lang:type=OperatingSystem':\n", exit, log, "is null"},
	// httpServer is read once, at start (HTTPServerFactory).
	{"threads", "httpServer:\n  threads:\n    minimum: 1\n    maximum: '10'\n    keepAliveTime: 120\n", accept, accept, ""},
	{"threads without maximum", "httpServer:\n  threads:\n    minimum: 1\n    keepAliveTime: 120\n", exit, accept, "maximum is a required integer"},
	{"threads maximum below minimum", "httpServer:\n  threads: {minimum: 5, maximum: 2, keepAliveTime: 1}\n", exit, accept, "greater than or equal"},
	{"threads: 1.5", "httpServer:\n  threads: {minimum: 1.5, maximum: 2, keepAliveTime: 1}\n", exit, accept, "must be an integer"},
	{"httpServer not a mapping is ignored", "httpServer: on\n", accept, accept, ""},
	{"plaintext authentication", "httpServer:\n  authentication:\n    basic:\n      username: Prometheus\n      password: secret\n", accept, accept, ""},
	{"authentication without a password", "httpServer:\n  authentication:\n    basic:\n      username: Prometheus\n", exit, accept, "password is a required string"},
	{"a blank username", "httpServer:\n  authentication:\n    basic:\n      username: ' '\n      password: x\n", exit, accept, "must not be blank"},
	{"SHA-256 without a salt", "httpServer:\n  authentication:\n    basic:\n      username: u\n      algorithm: SHA-256\n      passwordHash: abc\n", exit, accept, "salt is a required string"},
	{"PBKDF2 with iterations", "httpServer:\n  authentication:\n    basic:\n      username: u\n      algorithm: PBKDF2WithHmacSHA256\n      passwordHash: abc\n      salt: s\n      iterations: 600000\n", accept, accept, ""},
	{"an unknown algorithm", "httpServer:\n  authentication:\n    basic:\n      username: u\n      algorithm: MD5\n      passwordHash: abc\n", exit, accept, "Unsupported"},
	// Upstream's SSL integration tests name the key store with
	// -Djavax.net.ssl.keyStore; the check takes it (it cannot see it).
	{"ssl with the JVM's key store", "httpServer:\n  ssl:\n    certificate:\n      alias: localhost\nrules:\n  - pattern: \".*\"\n", accept, accept, ""},
	{"ssl without a certificate alias", "httpServer:\n  ssl:\n    keyStore:\n      filename: /k.jks\n      password: changeit\n", exit, accept, "alias is a required string"},
}

// aliasBomb is "billion laughs": each list holds its predecessor twice.
func aliasBomb() string {
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x]\n")
	for i := 1; i <= 30; i++ {
		fmt.Fprintf(&b, "a%d: &a%d [*a%d, *a%d]\n", i, i, i-1, i-1)
	}
	return b.String()
}

func TestConfigCheckFollowsTheAgent(t *testing.T) {
	for _, c := range append(append([]configCase{}, upstreamCases...), agentCases...) {
		t.Run(c.name, func(t *testing.T) {
			v := CheckAgentConfig([]byte(c.config))
			assert.Equal(t, c.atStart, v.AtStart, "at start: %s", v.Problem)
			assert.Equal(t, c.reload, v.OnReload, "on reload: %s", v.Problem)
			if c.refusal == "" {
				assert.False(t, v.Refused(), v.Problem)
			} else {
				assert.True(t, v.Refused())
				assert.Contains(t, v.Problem, c.refusal)
			}
		})
	}
}

// TestCheckConfigRefusesWhatWouldExitTheJVM: the helper's check before an
// attach refuses every configuration the agent exits the JVM over, and
// takes what the agent takes.
func TestCheckConfigRefusesWhatWouldExitTheJVM(t *testing.T) {
	for config, refused := range map[string]bool{
		"hostPort: localhost:9999\n":                         true,
		"jmxUrl: service:jmx:rmi:///jndi/rmi://h:1/jmxrmi\n": true,
		"":                                   true, // HTTPServerFactory: "Map is null"
		"rules:\n- pattern: x\n  name: on\n": true,
		"rules:\n- pattern: 'kafka<name=${topic}>'\n":          true,
		"lowercaseOutputName: yes\n":                           false,
		"rules:\n- pattern: x\n  name: n\n  type: HISTOGRAM\n": false,
		heapRule: false,
	} {
		file := filepath.Join(t.TempDir(), "config.yaml")
		require.NoError(t, os.WriteFile(file, []byte(config), 0o644))
		r := CheckConfig(file)
		if !refused {
			assert.Nil(t, r, "%q", config)
			continue
		}
		if assert.NotNil(t, r, "%q must be refused", config) {
			assert.Equal(t, ReasonInvalidConfig, r.Reason)
			assert.Contains(t, r.Message, "would exit the JVM", config)
		}
	}
}

func TestCheckConfigLooksForTheKeyStoreInTheContainer(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "config.yaml")
	store := filepath.Join(dir, "keystore.jks")
	config := "httpServer:\n  ssl:\n    keyStore:\n      filename: " + store + "\n    certificate:\n      alias: server\n"
	require.NoError(t, os.WriteFile(file, []byte(config), 0o644))
	r := CheckConfig(file)
	require.NotNil(t, r)
	assert.Contains(t, r.Message, "cannot be read in the container")
	require.NoError(t, os.WriteFile(store, []byte("x"), 0o644))
	assert.Nil(t, CheckConfig(file))
}
