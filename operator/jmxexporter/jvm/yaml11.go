package jvm

import (
	"errors"
	"fmt"
	"math/big"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The exporter reads its configuration with SnakeYAML 2.2's `new
// Yaml().load(...)` (jmx_exporter 1.0.1, JmxCollector's constructor and
// HTTPServerFactory.createMapAccessor), which resolves plain scalars by
// YAML 1.1 rules: `on`, `yes`, `off` are Booleans, `2024-01-01` is a
// java.util.Date, `010` is the Integer 8, `08` a Double. The agent then
// casts values to the types it expects, and a wrong one is a
// ClassCastException that exits the JVM at start. So the check decodes
// the document structure with yaml.v3 (yaml.Node keeps each scalar's style
// and explicit tag) and types plain scalars here with SnakeYAML's own
// implicit resolvers (org.yaml.snakeyaml.resolver.Resolver), not with
// yaml.v3's YAML 1.2 rules nor yaml.v2's (which also takes y/n for
// Booleans, SnakeYAML does not).

// Java types the decoded values stand for.
type (
	// javaInt is an Integer, Long or BigInteger, as SnakeYAML's
	// SafeConstructor picks by size.
	javaInt struct{ v *big.Int }
	// javaDate is a java.util.Date (an implicit timestamp).
	javaDate struct{ text string }
	// javaMap is a LinkedHashMap; only String keys can be looked up by
	// the exporter's containsKey("...").
	javaMap struct {
		keys   []any
		values []any
	}
)

func (m *javaMap) get(key string) (any, bool) {
	// Duplicate keys are allowed (LoaderOptions.allowDuplicateKeys is true
	// by default) and the last one wins, as in a Java Map.put.
	for i := len(m.keys) - 1; i >= 0; i-- {
		if k, ok := m.keys[i].(string); ok && k == key {
			return m.values[i], true
		}
	}
	return nil, false
}

func (m *javaMap) put(key, value any) {
	m.keys = append(m.keys, key)
	m.values = append(m.values, value)
}

// SnakeYAML 2.2 Resolver's implicit patterns; each applies only when the
// scalar starts with one of its characters (addImplicitResolvers).
var (
	yaml11Bool  = regexp.MustCompile(`^(?:yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF)$`)
	yaml11Int   = regexp.MustCompile(`^(?:[-+]?0b_*[0-1]+[0-1_]*|[-+]?0_*[0-7]+[0-7_]*|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x_*[0-9a-fA-F]+[0-9a-fA-F_]*|[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+)$`)
	yaml11Float = regexp.MustCompile(`^(?:[-+]?(?:\.[0-9]+|[0-9_]+(?:\.[0-9_]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$`)
	yaml11Null  = regexp.MustCompile(`^(?:~|null|Null|NULL| )$`)
	yaml11Time  = regexp.MustCompile(`^(?:[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]|[0-9][0-9][0-9][0-9]-[0-9][0-9]?-[0-9][0-9]?(?:[Tt]|[ \t]+)[0-9][0-9]?:[0-9][0-9]:[0-9][0-9](?:\.[0-9]*)?(?:[ \t]*(?:Z|[-+][0-9][0-9]?(?::[0-9][0-9])?))?)$`)
)

// errUnsupportedYAML marks YAML this check does not model; it is refused
// rather than guessed at.
var errUnsupportedYAML = errors.New("unsupported YAML")

// decodeYAML11 loads the first document as SnakeYAML would: nil for an
// empty one, otherwise bool, string, javaInt, float64, javaDate, []any or
// *javaMap values.
func decodeYAML11(raw []byte) (any, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, nil
	}
	d := &yaml11Decoder{anchored: map[*yaml.Node]any{}}
	return d.value(doc.Content[0], 0)
}

// SnakeYAML 2.2's LoaderOptions defaults: at most 50 aliases to lists or
// mappings (maxAliasesForCollections; more throws, against "billion
// laughs") and at most 50 nested collections (nestingDepthLimit).
const (
	maxCollectionAliases = 50
	maxNesting           = 50
)

// yaml11Decoder builds the Java values; an anchored node is built once
// and shared by its aliases, as SnakeYAML shares the object.
type yaml11Decoder struct {
	aliases  int
	anchored map[*yaml.Node]any
}

func (d *yaml11Decoder) alias(n *yaml.Node, depth int) (any, error) {
	target := n.Alias
	if target.Kind == yaml.MappingNode || target.Kind == yaml.SequenceNode {
		d.aliases++
		if d.aliases > maxCollectionAliases {
			return nil, fmt.Errorf("more than %d aliases to lists or mappings (SnakeYAML's limit, line %d)", maxCollectionAliases, n.Line)
		}
	}
	if v, ok := d.anchored[target]; ok {
		return v, nil
	}
	v, err := d.value(target, depth)
	if err == nil {
		d.anchored[target] = v
	}
	return v, err
}

func (d *yaml11Decoder) value(n *yaml.Node, depth int) (any, error) {
	if depth > maxNesting {
		return nil, fmt.Errorf("lists and mappings nested deeper than %d levels (SnakeYAML's limit)", maxNesting)
	}
	switch n.Kind {
	case yaml.AliasNode:
		return d.alias(n, depth)
	case yaml.SequenceNode:
		if err := standardTag(n, "!!seq"); err != nil {
			return nil, err
		}
		out := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := d.value(c, depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case yaml.MappingNode:
		return d.mapping(n, depth)
	case yaml.ScalarNode:
		return javaScalar(n)
	}
	return nil, fmt.Errorf("%w: node kind %d", errUnsupportedYAML, n.Kind)
}

func (d *yaml11Decoder) mapping(n *yaml.Node, depth int) (any, error) {
	if err := standardTag(n, "!!map"); err != nil {
		return nil, err
	}
	m := &javaMap{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.Value == "<<" && (k.Tag == "!!merge" || k.Style == 0) {
			if err := d.merge(m, v, depth); err != nil {
				return nil, err
			}
			continue
		}
		key, err := d.value(k, depth+1)
		if err != nil {
			return nil, err
		}
		if _, ok := key.(string); !ok && k.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("%w: a mapping or list used as a key (line %d)", errUnsupportedYAML, k.Line)
		}
		value, err := d.value(v, depth+1)
		if err != nil {
			return nil, err
		}
		m.put(key, value)
	}
	return m, nil
}

// merge applies a `<<` merge key: keys already set win (SnakeYAML's
// flattenMapping keeps the explicit ones).
func (d *yaml11Decoder) merge(m *javaMap, v *yaml.Node, depth int) error {
	sources := []*yaml.Node{v}
	if v.Kind == yaml.SequenceNode {
		sources = v.Content
	}
	for _, s := range sources {
		val, err := d.value(s, depth+1)
		if err != nil {
			return err
		}
		src, ok := val.(*javaMap)
		if !ok {
			return fmt.Errorf("%w: a merge key (<<) needs a mapping (line %d)", errUnsupportedYAML, s.Line)
		}
		for i, k := range src.keys {
			if ks, ok := k.(string); ok {
				if _, set := m.get(ks); set {
					continue
				}
			}
			m.put(k, src.values[i])
		}
	}
	return nil
}

// standardTag refuses explicit tags other than the node's own: SnakeYAML
// 2.x refuses global tags (!!java...), and local ones (!foo) construct
// nothing the exporter can use.
func standardTag(n *yaml.Node, own string) error {
	if n.Tag == "" || n.Tag == own || n.Style&yaml.TaggedStyle == 0 {
		return nil
	}
	return fmt.Errorf("%w: the tag %s (line %d)", errUnsupportedYAML, n.Tag, n.Line)
}

func javaScalar(n *yaml.Node) (any, error) {
	tag := n.Tag
	if n.Style&yaml.TaggedStyle == 0 {
		tag = "" // yaml.v3 fills in its own YAML 1.2 resolution; ignore it
	}
	if tag == "" {
		if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
			return n.Value, nil
		}
		tag = resolvePlain(n.Value)
	}
	switch tag {
	case "!!str":
		return n.Value, nil
	case "!!null":
		return nil, nil
	case "!!bool":
		if !yaml11Bool.MatchString(n.Value) {
			return nil, fmt.Errorf("%w: a value tagged !!bool that is not a boolean (line %d)", errUnsupportedYAML, n.Line)
		}
		switch strings.ToLower(n.Value) {
		case "yes", "true", "on":
			return true, nil
		}
		return false, nil
	case "!!int":
		i, ok := parseYAML11Int(n.Value)
		if !ok {
			return nil, fmt.Errorf("%w: a value tagged !!int that is not an integer (line %d)", errUnsupportedYAML, n.Line)
		}
		return javaInt{i}, nil
	case "!!float":
		return parseYAML11Float(n.Value), nil
	case "!!timestamp":
		return javaDate{n.Value}, nil
	}
	return nil, fmt.Errorf("%w: the tag %s (line %d)", errUnsupportedYAML, tag, n.Line)
}

// resolvePlain is Resolver.resolve for a plain scalar: the first pattern
// registered for its first character that matches, in registration order
// (BOOL, INT, FLOAT, MERGE, NULL, EMPTY, TIMESTAMP, VALUE), else a string.
func resolvePlain(s string) string {
	if s == "" {
		return "!!null"
	}
	first := s[0]
	switch {
	case strings.IndexByte("yYnNtTfFoO", first) >= 0 && yaml11Bool.MatchString(s):
		return "!!bool"
	case strings.IndexByte("-+0123456789", first) >= 0 && yaml11Int.MatchString(s):
		return "!!int"
	case strings.IndexByte("-+0123456789.", first) >= 0 && yaml11Float.MatchString(s):
		return "!!float"
	case strings.IndexByte("~nN", first) >= 0 && yaml11Null.MatchString(s):
		return "!!null"
	case strings.IndexByte("0123456789", first) >= 0 && yaml11Time.MatchString(s):
		return "!!timestamp"
	case s == "=":
		// Resolver.VALUE: SnakeYAML has no constructor for it and throws.
		return "!!value"
	}
	return "!!str"
}

// parseYAML11Int is SafeConstructor.ConstructYamlInt: underscores dropped,
// 0b binary, 0x hex, a leading 0 octal, a:b:c base 60.
func parseYAML11Int(s string) (*big.Int, bool) {
	s = strings.ReplaceAll(s, "_", "")
	sign := ""
	if s != "" && (s[0] == '-' || s[0] == '+') {
		if s[0] == '-' {
			sign = "-"
		}
		s = s[1:]
	}
	v := new(big.Int)
	ok := false
	switch {
	case s == "0":
		ok = true
	case strings.HasPrefix(s, "0b"):
		_, ok = v.SetString(s[2:], 2)
	case strings.HasPrefix(s, "0x"):
		_, ok = v.SetString(s[2:], 16)
	case strings.HasPrefix(s, "0"):
		_, ok = v.SetString(s[1:], 8)
	case strings.Contains(s, ":"):
		ok = true
		for _, digit := range strings.Split(s, ":") {
			d, good := new(big.Int).SetString(digit, 10)
			ok = ok && good
			if good {
				v.Mul(v, big.NewInt(60)).Add(v, d)
			}
		}
	default:
		_, ok = v.SetString(s, 10)
	}
	if sign == "-" {
		v.Neg(v)
	}
	return v, ok
}

func parseYAML11Float(s string) float64 {
	f, _, _ := big.ParseFloat(strings.ReplaceAll(strings.TrimPrefix(s, "+"), "_", ""), 10, 53, big.ToNearestEven)
	if f == nil {
		return 0 // .inf, .nan and base 60: the value does not matter, the type does
	}
	v, _ := f.Float64()
	return v
}

// isJavaInteger: the value is a java.lang.Integer (SnakeYAML makes an
// Integer when it fits, else a Long or BigInteger).
func isJavaInteger(v any) bool {
	i, ok := v.(javaInt)
	return ok && i.v.IsInt64() && i.v.Int64() >= -1<<31 && i.v.Int64() < 1<<31
}

// javaTypeName names the Java class a decoded value has, for messages.
func javaTypeName(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "a Boolean"
	case string:
		return "a String"
	case javaInt:
		switch {
		case isJavaInteger(x):
			return "an Integer"
		case x.v.IsInt64():
			return "a Long"
		}
		return "a BigInteger"
	case float64:
		return "a Double"
	case javaDate:
		return "a Date"
	case []any:
		return "a List"
	case *javaMap:
		return "a Map"
	}
	return fmt.Sprintf("%T", v)
}

// javaString is String.valueOf(v) for the scalars the exporter turns into
// text (a rule's pattern is concatenated, not cast).
func javaString(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		if x {
			return "true"
		}
		return "false"
	case string:
		return x
	case javaInt:
		return x.v.String()
	}
	return fmt.Sprint(v)
}
