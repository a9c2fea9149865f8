package jvm

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// What jmx_prometheus_javaagent 1.0.1 does with a configuration, at start
// (the attach) and when it re-reads a changed file (on the next scrape).
const (
	// UpstreamExit: System.exit, the application is gone.
	UpstreamExit = "exit"
	// UpstreamLog: the agent logs an error; at a reload it keeps its
	// previous configuration, at a scrape the scrape fails.
	UpstreamLog = "log"
	// UpstreamAccept: the agent takes it.
	UpstreamAccept = "accept"
)

// ConfigVerdict is the check of one configuration: what the agent would
// do with it at start and on a reload, and the first problem found.
type ConfigVerdict struct {
	// Problem is empty when the configuration is accepted.
	Problem string
	// AtStart and OnReload are Upstream* outcomes.
	AtStart, OnReload string
	// KeyStore is httpServer.ssl.keyStore.filename, which only the
	// container can check exists.
	KeyStore string
}

// Refused: the operator does not hand this configuration to the agent.
// Besides everything the agent fails on, it refuses what the agent would
// take in a sense the user surely did not mean (a pattern that YAML 1.1
// turned into a Boolean).
func (v ConfigVerdict) Refused() bool { return v.Problem != "" }

// problem kinds, by where upstream meets them.
type configProblem struct {
	msg  string
	kind problemKind
}

type problemKind int

const (
	// loadError: an exception in JmxCollector.loadConfig (or SnakeYAML,
	// or ObjectNameAttributeFilter.create). At start the constructor
	// throws and JavaAgent.premain calls System.exit(1); at a reload
	// JmxCollector.reloadConfig logs it and keeps the old configuration.
	loadError problemKind = iota
	// remoteJVM: jmxUrl or hostPort; JmxCollector.exitOnConfigError calls
	// System.exit(-1) in agent mode, at start and after every reload
	// (getLatestConfig calls it on each scrape).
	remoteJVM
	// serverError: HTTPServerFactory.createHTTPServer throws; it runs once
	// in premain (exit), a reload does not read httpServer again.
	serverError
	// scrapeError: loads, but every scrape the rule matches throws
	// (JmxCollector.collect logs it; the metrics are missing).
	scrapeError
	// surprising: upstream takes it, but not as written.
	surprising
)

func (p configProblem) outcomes() (start, reload string) {
	switch p.kind {
	case loadError:
		return UpstreamExit, UpstreamLog
	case remoteJVM:
		return UpstreamExit, UpstreamExit
	case serverError:
		return UpstreamExit, UpstreamAccept
	case scrapeError:
		return UpstreamLog, UpstreamLog
	}
	return UpstreamAccept, UpstreamAccept
}

// CheckAgentConfig checks a configuration as jmx_prometheus_javaagent
// 1.0.1 loads it.
func CheckAgentConfig(raw []byte) ConfigVerdict {
	c := &configChecker{}
	p := c.check(raw)
	if p == nil {
		return ConfigVerdict{AtStart: UpstreamAccept, OnReload: UpstreamAccept, KeyStore: c.keyStore}
	}
	start, reload := p.outcomes()
	return ConfigVerdict{Problem: p.msg, AtStart: start, OnReload: reload, KeyStore: c.keyStore}
}

// Message says why the configuration is refused and what the agent would
// have done, for conditions and Events; loaded says whether an agent runs
// already (a change) or not (an attach).
func (v ConfigVerdict) Message(loaded bool) string {
	what := v.AtStart
	if loaded {
		what = v.OnReload
	}
	switch what {
	case UpstreamExit:
		return "the JMX exporter agent would exit the JVM (and the application with it): " + v.Problem
	case UpstreamLog:
		if loaded {
			return "the JMX exporter agent would reject it and keep its previous configuration, or fail its scrapes: " + v.Problem
		}
		return "the JMX exporter agent would fail its scrapes: " + v.Problem
	}
	if v.AtStart == UpstreamExit {
		return "the JMX exporter agent ignores this until it restarts, then it would exit the JVM: " + v.Problem
	}
	return "the JMX exporter agent would not read it as written: " + v.Problem
}

type configChecker struct {
	keyStore string
}

func loadProblem(format string, args ...any) *configProblem {
	return &configProblem{msg: fmt.Sprintf(format, args...), kind: loadError}
}

func (c *configChecker) check(raw []byte) *configProblem {
	doc, err := decodeYAML11(raw)
	if err != nil {
		if errors.Is(err, errUnsupportedYAML) {
			return &configProblem{msg: err.Error() + "; deckhand cannot tell how the agent reads it", kind: loadError}
		}
		return loadProblem("not YAML the agent can read: %v", err)
	}
	if extra, err := moreDocuments(raw); err != nil || extra {
		// Yaml.load reads exactly one document (Composer.getSingleNode).
		return loadProblem("more than one YAML document (---); the agent reads a single one")
	}
	var top *javaMap
	switch d := doc.(type) {
	case nil:
		top = &javaMap{}
	case *javaMap:
		top = d
	default:
		// JmxCollector's constructor casts the document to a Map.
		return loadProblem("the top level is %s, not a mapping of settings (lowercaseOutputName, rules, ...)", javaTypeName(doc))
	}
	if p := c.loadConfig(top); p != nil {
		return p
	}
	if p := remoteJVMProblem(top); p != nil {
		return p
	}
	if doc == nil {
		// HTTPServerFactory.createMapAccessor: new YamlMapAccessor(null)
		// throws "Map is null".
		return &configProblem{msg: "the configuration is empty; write at least one setting (e.g. `rules: [{pattern: \".*\"}]`)", kind: serverError}
	}
	return c.httpServer(top)
}

func moreDocuments(raw []byte) (bool, error) {
	d := yaml.NewDecoder(strings.NewReader(string(raw)))
	var first, second yaml.Node
	if err := d.Decode(&first); err != nil {
		return false, nil
	}
	return d.Decode(&second) == nil, nil
}

// remoteJVMProblem is JmxCollector.exitOnConfigError in agent mode, after
// loadConfig turned hostPort into a jmxUrl.
func remoteJVMProblem(top *javaMap) *configProblem {
	if _, ok := top.get("hostPort"); ok {
		return &configProblem{kind: remoteJVM, msg: "hostPort is set; it is for the standalone exporter that scrapes a remote JVM, and the agent calls System.exit when it is set (remove hostPort)"}
	}
	v, ok := top.get("jmxUrl")
	switch {
	case !ok:
		return nil
	case v == nil:
		// cfg.jmxUrl = null; exitOnConfigError's jmxUrl.isEmpty() throws:
		// at start the constructor fails (exit), later every scrape does.
		return &configProblem{kind: loadError, msg: "jmxUrl is null; remove it"}
	case v == "":
		return nil
	}
	return &configProblem{kind: remoteJVM, msg: "jmxUrl is set; it is for the standalone exporter that scrapes a remote JVM, and the agent calls System.exit when it is set (remove jmxUrl)"}
}

// loadConfig follows JmxCollector.loadConfig (1.0.1) key by key, in its
// order, with its casts: (Integer), (String), (Boolean) into a primitive
// (so null fails too), (List), (Map).
func (c *configChecker) loadConfig(top *javaMap) *configProblem {
	if v, ok := top.get("startDelaySeconds"); ok {
		switch {
		case v == nil:
			return &configProblem{kind: scrapeError, msg: "startDelaySeconds is null (every scrape fails unboxing it); give a whole number or remove it"}
		case !isJavaInteger(v):
			return loadProblem("startDelaySeconds is %s, not an Integer", javaTypeName(v))
		}
	}
	if _, ok := top.get("hostPort"); ok {
		if _, both := top.get("jmxUrl"); both {
			return loadProblem("at most one of hostPort and jmxUrl may be set (and neither for the agent)")
		}
	} else if v, ok := top.get("jmxUrl"); ok {
		if p := castString("jmxUrl", v); p != nil {
			return p
		}
	}
	for _, key := range []string{"username", "password"} {
		if v, ok := top.get(key); ok {
			if p := castString(key, v); p != nil {
				return p
			}
		}
	}
	for _, key := range []string{"ssl", "lowercaseOutputName", "lowercaseOutputLabelNames"} {
		if v, ok := top.get(key); ok {
			if p := castBoolean(key, v); p != nil {
				return p
			}
		}
	}
	// include before the old whitelist name, exclude before blacklist: the
	// old name is not read at all when the new one is there.
	for _, keys := range [][2]string{{"includeObjectNames", "whitelistObjectNames"}, {"excludeObjectNames", "blacklistObjectNames"}} {
		for _, key := range keys {
			if v, ok := top.get(key); ok {
				if p := objectNames(key, v); p != nil {
					return p
				}
				break
			}
		}
	}
	if v, ok := top.get("rules"); ok {
		if p := rules(v); p != nil {
			return p
		}
	}
	return objectNameAttributeFilter(top)
}

func castString(key string, v any) *configProblem {
	if _, ok := v.(string); ok || v == nil {
		return nil
	}
	return loadProblem("%s is %s, not a String (ClassCastException); quote it", key, javaTypeName(v))
}

func castBoolean(key string, v any) *configProblem {
	if _, ok := v.(bool); ok {
		return nil
	}
	return loadProblem("%s is %s, not a Boolean (true/false, yes/no, on/off)", key, javaTypeName(v))
}

func objectNames(key string, v any) *configProblem {
	list, ok := v.([]any)
	if !ok {
		return loadProblem("%s is %s, not a list of ObjectNames", key, javaTypeName(v))
	}
	for i, n := range list {
		s, ok := n.(string)
		if !ok {
			return loadProblem("%s[%d] is %s, not an ObjectName string", key, i, javaTypeName(n))
		}
		if msg := objectNameProblem(s); msg != "" {
			return loadProblem("%s[%d] %q is not a valid ObjectName (MalformedObjectNameException): %s", key, i, s, msg)
		}
	}
	return nil
}

// rules checks each rule as loadConfig builds it, then its validation:
// help or labels need a name, a name needs a pattern.
func rules(v any) *configProblem {
	list, ok := v.([]any)
	if !ok {
		return loadProblem("rules is %s, not a list", javaTypeName(v))
	}
	for i, r := range list {
		rule, ok := r.(*javaMap)
		if !ok {
			return loadProblem("rules[%d] is %s, not a mapping (pattern, name, ...)", i, javaTypeName(r))
		}
		if p := checkRule(rule); p != nil {
			p.msg = fmt.Sprintf("rules[%d]: %s", i, p.msg)
			return p
		}
	}
	return nil
}

// rulePattern is the rule's compiled pattern, as far as the check needs
// it: its groups (for the replacements), a refusal (load), or a surprise
// the agent takes (late).
type rulePattern struct {
	groups int
	names  map[string]bool
	late   *configProblem
}

// checkPattern follows Pattern.compile("^.*(?:" + pattern + ").*$"): a
// concatenation, not a cast, so `pattern: on` makes the regex "true". Not
// a crash, but not what the user wrote either.
func checkPattern(pattern any) (rulePattern, *configProblem) {
	rp := rulePattern{names: map[string]bool{}}
	text, ok := pattern.(string)
	if !ok {
		switch pattern.(type) {
		case nil, bool, javaInt:
			text = javaString(pattern)
			rp.late = &configProblem{kind: surprising, msg: fmt.Sprintf("pattern is %s to the agent (YAML 1.1), so the rule would match the text %q; quote the pattern", javaTypeName(pattern), text)}
		default:
			return rp, loadProblem("pattern is %s; deckhand cannot tell which text the agent would make of it: quote the pattern", javaTypeName(pattern))
		}
	}
	var err error
	rp.groups, rp.names, err = parseJavaRegex("^.*(?:" + text + ").*$")
	if err != nil {
		return rp, loadProblem("pattern %q is not a valid Java regular expression (PatternSyntaxException): %v", text, err)
	}
	return rp, nil
}

func checkRule(rule *javaMap) *configProblem {
	pattern, hasPattern := rule.get("pattern")
	rp := rulePattern{names: map[string]bool{}}
	if hasPattern {
		var p *configProblem
		if rp, p = checkPattern(pattern); p != nil {
			return p
		}
	}
	late := rp.late // found by the loader's later steps or at scrape
	name, hasName := rule.get("name")
	if hasName {
		if p := castString("name", name); p != nil {
			return p
		}
	}
	for _, key := range []string{"attrNameSnakeCase", "cache"} {
		if v, ok := rule.get(key); ok {
			if p := castBoolean(key, v); p != nil {
				return p
			}
		}
	}
	if v, ok := rule.get("type"); ok {
		if p := castString("type", v); p != nil {
			return p
		}
		if v == nil && late == nil {
			late = &configProblem{kind: scrapeError, msg: "type is null (every scrape the rule matches fails); give GAUGE, COUNTER or UNTYPED, or remove it"}
		}
	}
	help, hasHelp := rule.get("help")
	if hasHelp {
		if p := castString("help", help); p != nil {
			return p
		}
	}
	labels, hasLabels := rule.get("labels")
	if hasLabels {
		p, scrape := checkLabels(labels)
		if p != nil {
			return p
		}
		if late == nil {
			late = scrape
		}
	}
	// Validation, as loadConfig does it: a null name or help counts as
	// absent, labels (even {}) as present.
	if (hasLabels || help != nil) && name == nil {
		return loadProblem("help or labels are given without a name (\"Must provide name, if help or labels are given\")")
	}
	if name != nil && !hasPattern {
		return loadProblem("a name is given without a pattern (\"Must provide pattern, if name is given\")")
	}
	if late == nil && name != nil {
		late = replacementProblems(rule, rp.groups, rp.names)
	}
	return late
}

// checkLabels: labels is copied into a TreeMap (keys must compare with
// each other, none null) and each value cast to String.
func checkLabels(v any) (load, scrape *configProblem) {
	m, ok := v.(*javaMap)
	if !ok {
		return loadProblem("labels is %s, not a mapping of label names to values", javaTypeName(v)), nil
	}
	kinds := map[string]bool{}
	for i, k := range m.keys {
		if k == nil {
			return loadProblem("labels has a null label name"), nil
		}
		kinds[javaTypeName(k)] = true
		if _, ok := k.(string); !ok && scrape == nil {
			scrape = &configProblem{kind: scrapeError, msg: fmt.Sprintf("the label name %s is %s (every scrape the rule matches fails); quote it", javaString(k), javaTypeName(k))}
		}
		if p := castString(fmt.Sprintf("labels.%s", javaString(k)), m.values[i]); p != nil {
			return p, nil
		}
		if m.values[i] == nil && scrape == nil {
			scrape = &configProblem{kind: scrapeError, msg: fmt.Sprintf("the value of label %s is null (every scrape the rule matches fails)", javaString(k))}
		}
	}
	if len(kinds) > 1 {
		return loadProblem("labels mixes label names of different types (%d kinds; ClassCastException in the TreeMap); quote the names", len(kinds)), nil
	}
	return nil, scrape
}

// replacementProblems checks name, help and labels as replacements of
// the pattern's groups (Matcher.replaceAll at every scrape).
func replacementProblems(rule *javaMap, groups int, names map[string]bool) *configProblem {
	check := func(what string, v any) *configProblem {
		s, ok := v.(string)
		if !ok {
			return nil
		}
		if msg := javaReplacementProblem(s, groups, names); msg != "" {
			return &configProblem{kind: scrapeError, msg: fmt.Sprintf("%s %q %s (every scrape the rule matches fails)", what, s, msg)}
		}
		return nil
	}
	for _, key := range []string{"name", "help"} {
		if v, ok := rule.get(key); ok {
			if p := check(key, v); p != nil {
				return p
			}
		}
	}
	if labels, ok := rule.get("labels"); ok {
		m := labels.(*javaMap)
		for i, k := range m.keys {
			if p := check("the label name", k); p != nil {
				return p
			}
			if p := check("the label value", m.values[i]); p != nil {
				return p
			}
		}
	}
	return nil
}

// objectNameAttributeFilter is ObjectNameAttributeFilter.initialize.
func objectNameAttributeFilter(top *javaMap) *configProblem {
	if v, ok := top.get("excludeObjectNameAttributes"); ok {
		m, ok := v.(*javaMap)
		if !ok {
			return loadProblem("excludeObjectNameAttributes is %s, not a mapping of ObjectNames to attribute lists", javaTypeName(v))
		}
		for i, k := range m.keys {
			s, ok := k.(string)
			if !ok {
				return loadProblem("excludeObjectNameAttributes has the key %s, %s, not an ObjectName string", javaString(k), javaTypeName(k))
			}
			if msg := objectNameProblem(s); msg != "" {
				return loadProblem("excludeObjectNameAttributes: %q is not a valid ObjectName: %s", s, msg)
			}
			attrs, ok := m.values[i].([]any)
			if !ok {
				return loadProblem("excludeObjectNameAttributes[%q] is %s, not a list of attribute names", s, javaTypeName(m.values[i]))
			}
			for _, a := range attrs {
				if _, ok := a.(string); !ok {
					return loadProblem("excludeObjectNameAttributes[%q] has %s, not an attribute name string", s, javaTypeName(a))
				}
			}
		}
	}
	if v, ok := top.get("autoExcludeObjectNameAttributes"); ok {
		return castBoolean("autoExcludeObjectNameAttributes", v)
	}
	return nil
}

// httpServer follows HTTPServerFactory (1.0.1): threads, then
// authentication, then ssl, each read through YamlMapAccessor (a path
// through something that is not a mapping counts as absent).
func (c *configChecker) httpServer(top *javaMap) *configProblem {
	if containsPath(top, "httpServer", "threads") {
		if p := threads(top); p != nil {
			return p
		}
	}
	if containsPath(top, "httpServer", "authentication") {
		if p := authentication(top); p != nil {
			return p
		}
	}
	if containsPath(top, "httpServer", "ssl") {
		return c.ssl(top)
	}
	return nil
}

func serverProblem(format string, args ...any) *configProblem {
	return &configProblem{msg: fmt.Sprintf(format, args...), kind: serverError}
}

// containsPath is YamlMapAccessor.containsPath: every step but the last
// must be a mapping; the last may be anything, even null.
func containsPath(m *javaMap, path ...string) bool {
	var cur any = m
	for _, token := range path {
		mm, ok := cur.(*javaMap)
		if !ok {
			return false
		}
		v, ok := mm.get(token)
		if !ok {
			return false
		}
		if _, isMap := v.(*javaMap); !isMap && v != nil {
			return false // the (Map) cast fails even on the last step
		}
		cur = v
	}
	return true
}

// getPath is YamlMapAccessor.get: absent (ok false) when a step is not a
// mapping or the value is null.
func getPath(m *javaMap, path ...string) (any, bool) {
	var cur any = m
	for _, token := range path {
		mm, ok := cur.(*javaMap)
		if !ok {
			return nil, false
		}
		cur, _ = mm.get(token)
	}
	return cur, cur != nil
}

func threads(top *javaMap) *configProblem {
	v, ok := getPath(top, "httpServer", "threads")
	if !ok {
		return serverProblem("/httpServer/threads configuration values are required")
	}
	t, ok := v.(*javaMap)
	if !ok {
		return serverProblem("Invalid configuration for /httpServer/threads")
	}
	values := map[string]int{}
	for _, f := range []struct {
		key string
		min int
	}{{"minimum", 0}, {"maximum", 1}, {"keepAliveTime", 1}} {
		n, p := integerSetting(t, "/httpServer/threads/"+f.key, f.key, f.min, true)
		if p != nil {
			return p
		}
		values[f.key] = n
	}
	if values["maximum"] < values["minimum"] {
		return serverProblem("/httpServer/threads/maximum must be greater than or equal to /httpServer/threads/minimum")
	}
	return nil
}

// integerSetting is ConvertToInteger (Integer.parseInt of the value's
// toString) and ValidateIntegerInRange.
func integerSetting(m *javaMap, path, key string, min int, required bool) (int, *configProblem) {
	v, ok := getPath(m, key)
	if !ok {
		if required {
			return 0, serverProblem("%s is a required integer", path)
		}
		return 0, nil
	}
	var text string
	switch x := v.(type) {
	case string:
		text = x
	case javaInt:
		text = x.v.String()
	default:
		return 0, serverProblem("%s must be an integer, not %s", path, javaTypeName(v))
	}
	n, err := strconv.ParseInt(text, 10, 32)
	if err != nil || strings.HasPrefix(text, "+") && len(text) == 1 {
		return 0, serverProblem("%s must be an integer, not %q", path, text)
	}
	if int(n) < min {
		return 0, serverProblem("%s must be %d or greater", path, min)
	}
	return int(n), nil
}

// stringSetting is ConvertToString (a cast) and ValidateStringIsNotBlank.
func stringSetting(m *javaMap, path, key string, required bool) (string, *configProblem) {
	v, ok := getPath(m, key)
	if !ok {
		if required {
			return "", serverProblem("%s is a required string", path)
		}
		return "", nil
	}
	s, isString := v.(string)
	if !isString {
		return "", serverProblem("%s must be a string, not %s; quote it", path, javaTypeName(v))
	}
	if strings.TrimFunc(s, func(r rune) bool { return r <= ' ' }) == "" {
		return "", serverProblem("%s must not be blank", path)
	}
	return s, nil
}

func authentication(top *javaMap) *configProblem {
	const base = "/httpServer/authentication/basic"
	v, ok := getPath(top, "httpServer", "authentication", "basic")
	if !ok {
		return serverProblem("%s configuration values are required", base)
	}
	basic, ok := v.(*javaMap)
	if !ok {
		return serverProblem("Invalid configuration for %s", base)
	}
	if _, p := stringSetting(basic, base+"/username", "username", true); p != nil {
		return p
	}
	algorithm, p := stringSetting(basic, base+"/algorithm", "algorithm", false)
	if p != nil {
		return p
	}
	switch {
	case algorithm == "" || strings.EqualFold(algorithm, "plaintext"):
		_, p = stringSetting(basic, base+"/password", "password", true)
		return p
	case algorithm == "SHA-1" || algorithm == "SHA-256" || algorithm == "SHA-512":
		if _, p = stringSetting(basic, base+"/passwordHash", "passwordHash", true); p == nil {
			_, p = stringSetting(basic, base+"/salt", "salt", true)
		}
		return p
	case algorithm == "PBKDF2WithHmacSHA1" || algorithm == "PBKDF2WithHmacSHA256" || algorithm == "PBKDF2WithHmacSHA512":
		if _, p = stringSetting(basic, base+"/passwordHash", "passwordHash", true); p != nil {
			return p
		}
		if _, p = stringSetting(basic, base+"/salt", "salt", true); p != nil {
			return p
		}
		if _, p = integerSetting(basic, base+"/iterations", "iterations", 1, false); p != nil {
			return p
		}
		_, p = integerSetting(basic, base+"/keyLength", "keyLength", 1, false)
		return p
	}
	return serverProblem("Unsupported %s/algorithm [%s] (plaintext, SHA-1, SHA-256, SHA-512, PBKDF2WithHmacSHA1, PBKDF2WithHmacSHA256, PBKDF2WithHmacSHA512)", base, algorithm)
}

// ssl checks what the configuration says; whether the key store exists,
// opens with the password and holds the alias only the container can
// tell (CheckConfig looks for the file there).
func (c *configChecker) ssl(top *javaMap) *configProblem {
	const base = "/httpServer/ssl"
	sslMap, _ := getPath(top, "httpServer", "ssl")
	m, _ := sslMap.(*javaMap)
	if m == nil {
		m = &javaMap{}
	}
	keyStore, _ := getPath(m, "keyStore")
	ks, _ := keyStore.(*javaMap)
	if ks == nil {
		ks = &javaMap{}
	}
	// Optional: without it the agent takes the JVM's
	// -Djavax.net.ssl.keyStore (upstream's own SSL tests do so) and exits
	// at start when that is unset too. The check cannot see the JVM's
	// properties and lets it pass: a known gap, see docs/design/jmxexporter.md.
	file, p := stringSetting(ks, base+"/keyStore/filename", "filename", false)
	if p != nil {
		return p
	}
	c.keyStore = file
	if _, p := stringSetting(ks, base+"/keyStore/password", "password", false); p != nil {
		return p
	}
	cert, _ := getPath(m, "certificate")
	cm, _ := cert.(*javaMap)
	if cm == nil {
		cm = &javaMap{}
	}
	_, p = stringSetting(cm, base+"/certificate/alias", "alias", true)
	return p
}

// CheckConfig checks the configuration file in the container before an
// attach: everything CheckAgentConfig checks, and that a configured
// key store exists. Nothing that would make the agent exit the JVM (or
// that the operator refuses) is loaded.
func CheckConfig(file string) *Result {
	raw, err := os.ReadFile(file)
	if err != nil {
		r := failed(ReasonInvalidConfig, fmt.Sprintf("reading the exporter configuration: %v", err), true)
		return &r
	}
	v := CheckAgentConfig(raw)
	if v.Refused() {
		r := failed(ReasonInvalidConfig, v.Message(false), true)
		return &r
	}
	if v.KeyStore != "" {
		if _, err := os.Stat(v.KeyStore); err != nil {
			r := failed(ReasonInvalidConfig, fmt.Sprintf("the JMX exporter agent would exit the JVM: httpServer.ssl.keyStore.filename %s cannot be read in the container: %v", v.KeyStore, err), true)
			return &r
		}
	}
	return nil
}
