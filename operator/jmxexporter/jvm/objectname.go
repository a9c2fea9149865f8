package jvm

import "strings"

// objectNameProblem is what javax.management.ObjectName's constructor
// (ObjectName.construct) would throw MalformedObjectNameException for,
// for includeObjectNames, excludeObjectNames (and their old names) and
// excludeObjectNameAttributes' keys; "" when it is valid. The exporter
// builds these at start (JmxCollector.loadConfig), so a malformed one
// exits the JVM.
func objectNameProblem(name string) string {
	if name == "" {
		return "" // the empty name is the pattern *:*
	}
	domain, props, ok := strings.Cut(name, ":")
	if !ok {
		return "no domain part (write domain:key=value, or domain:*)"
	}
	if strings.ContainsRune(domain, '\n') {
		return "a newline in the domain"
	}
	if props == "" {
		return "no key properties after the colon (write domain:* for all)"
	}
	seen := map[string]bool{}
	for rest := props; ; {
		var elem string
		var value string
		if strings.HasPrefix(rest, "*") {
			if seen["*"] {
				return "several '*' in the property list"
			}
			seen["*"] = true
			elem, rest = "*", rest[1:]
		} else {
			key, after, ok := strings.Cut(rest, "=")
			if !ok {
				return "a key property without '=' in " + quoteName(rest)
			}
			if key == "" || strings.ContainsAny(key, ":,*?\n") {
				return "an invalid key " + quoteName(key) + " (a key is not empty and has none of : , * ? or a newline)"
			}
			if seen[key] {
				return "the key " + quoteName(key) + " twice"
			}
			seen[key] = true
			var problem string
			value, rest, problem = objectNameValue(after)
			if problem != "" {
				return problem + " in the value of " + quoteName(key)
			}
			elem = key
		}
		if rest == "" {
			return ""
		}
		if rest[0] != ',' {
			return "an unexpected " + quoteName(rest[:1]) + " after " + quoteName(elem+value)
		}
		rest = rest[1:]
		if rest == "" && elem != "*" {
			return "a comma at the end" // the JDK takes one after a final *
		}
		if rest == "" {
			return ""
		}
	}
}

// objectNameValue reads one value, quoted or not, and returns the rest.
func objectNameValue(s string) (value, rest, problem string) {
	if !strings.HasPrefix(s, `"`) {
		end := strings.IndexByte(s, ',')
		if end < 0 {
			end = len(s)
		}
		value = s[:end]
		if strings.ContainsAny(value, "=:\"\n") {
			return "", "", `one of = : " or a newline unquoted (quote the value)`
		}
		return value, s[end:], ""
	}
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
			if i == len(s) || !strings.ContainsRune(`\"*?n`, rune(s[i])) {
				return "", "", `an invalid escape in a quoted value (only \\ \" \* \? \n)`
			}
		case '\n':
			return "", "", "a newline"
		case '"':
			return s[:i+1], s[i+1:], ""
		}
	}
	return "", "", "a quoted value without its closing quote"
}

func quoteName(s string) string { return "'" + s + "'" }
