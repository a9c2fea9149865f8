package jvm

import (
	"fmt"
	"strings"
	"unicode"
)

// javaRegex checks a pattern against java.util.regex.Pattern's syntax
// (JDK 17's Pattern.compile), which the exporter uses for rules' patterns:
// a PatternSyntaxException at start exits the JVM. Go's regexp is a
// different dialect (no lookaround, no backreferences, no possessive
// quantifiers; `{` is a literal where Java demands a repetition), so it
// cannot stand in. This is a syntax checker, not a matcher. Where it
// approximates it refuses: a construct it does not model (comments mode
// (?x), \N{name}, \p{In...} blocks and properties it does not know) is
// reported as not checkable rather than passed.
type javaRegex struct {
	s      []rune
	i      int
	groups int
	names  map[string]bool
	// behind counts the lookbehinds being parsed: a backreference there
	// has no maximum length, which Java refuses.
	behind int
}

// javaPatternError is what Pattern.compile would throw, or why the check
// cannot tell.
type javaPatternError struct{ msg string }

func (e *javaPatternError) Error() string { return e.msg }

// parseJavaRegex returns the pattern's capturing groups (count and names)
// or the syntax error Java reports (as near to its words as practical).
func parseJavaRegex(pattern string) (groups int, names map[string]bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			e, ok := r.(*javaPatternError)
			if !ok {
				panic(r)
			}
			err = e
		}
	}()
	p := &javaRegex{s: []rune(pattern), names: map[string]bool{}}
	p.alternation()
	if p.i < len(p.s) {
		p.fail("Unmatched closing ')'")
	}
	return p.groups, p.names, nil
}

func (p *javaRegex) fail(format string, args ...any) {
	panic(&javaPatternError{fmt.Sprintf(format, args...) + fmt.Sprintf(" near index %d", p.i)})
}

func (p *javaRegex) unsupported(what string) {
	panic(&javaPatternError{what + " is not checked by deckhand; rewrite the pattern without it"})
}

func (p *javaRegex) more() bool { return p.i < len(p.s) }

func (p *javaRegex) peek() rune {
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return -1
}

func (p *javaRegex) next() rune {
	c := p.peek()
	p.i++
	return c
}

func (p *javaRegex) alternation() {
	for {
		p.sequence()
		if p.peek() != '|' {
			return
		}
		p.i++
	}
}

// sequence is Pattern.sequence: atoms, each with an optional closure.
func (p *javaRegex) sequence() {
	for p.more() {
		switch c := p.peek(); c {
		case ')', '|':
			return
		case '*', '+', '?':
			p.fail("Dangling meta character '%c'", c)
		case '(':
			if !p.group() {
				continue // a flag group (?i) takes no quantifier
			}
		case '[':
			p.i++
			p.class()
		case '\\':
			p.i++
			p.escape(false)
		case '{':
			// Java's atom() stops at '{' and closure() reads it as a
			// repetition of nothing: it must be a valid one.
		default:
			p.i++
		}
		p.closure()
	}
}

// closure reads an optional quantifier and its lazy/possessive suffix.
func (p *javaRegex) closure() {
	switch p.peek() {
	case '?':
		p.i++
	case '*', '+':
		p.boundedBehind()
		p.i++
	case '{':
		p.i++
		p.repetition()
	default:
		return
	}
	if c := p.peek(); c == '?' || c == '+' {
		p.i++
	}
}

func (p *javaRegex) repetition() {
	if !isDigit(p.peek()) {
		p.fail("Illegal repetition")
	}
	lo := p.number()
	hi, bounded := lo, true
	if p.peek() == ',' {
		p.i++
		if isDigit(p.peek()) {
			hi = p.number()
		} else {
			bounded = false
		}
	}
	if p.next() != '}' {
		p.fail("Unclosed counted closure")
	}
	if bounded && hi < lo {
		p.fail("Illegal repetition range")
	}
	if !bounded {
		p.boundedBehind()
	}
}

func (p *javaRegex) number() int {
	n := 0
	for isDigit(p.peek()) {
		n = n*10 + int(p.next()-'0')
		if n > 1<<31-1 {
			p.fail("Illegal repetition range")
		}
	}
	return n
}

func isDigit(c rune) bool { return c >= '0' && c <= '9' }

// group parses "(...)"; it returns false for a pure flag group "(?i)".
func (p *javaRegex) group() bool {
	p.i++ // (
	lookbehind := false
	if p.peek() == '?' {
		p.i++
		switch c := p.next(); c {
		case ':', '=', '!', '>':
		case '<':
			switch p.peek() {
			case '=', '!':
				p.i++
				lookbehind = true
			default:
				p.namedGroup()
			}
		default:
			p.i--
			if !p.flags() {
				return false
			}
		}
	} else {
		p.groups++
	}
	if lookbehind {
		p.behind++
	}
	p.alternation()
	if lookbehind {
		p.behind--
	}
	if p.next() != ')' {
		p.fail("Unclosed group")
	}
	return true
}

func (p *javaRegex) namedGroup() {
	start := p.i
	if c := p.peek(); !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
		p.fail("capturing group name does not start with a Latin letter")
	}
	for c := p.peek(); c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || isDigit(c); c = p.peek() {
		p.i++
	}
	name := string(p.s[start:p.i])
	if p.next() != '>' {
		p.fail("named capturing group is missing trailing '>'")
	}
	if p.names[name] {
		p.fail("Named capturing group <%s> is already defined", name)
	}
	p.names[name] = true
	p.groups++
}

// flags parses (?idmsuxU-idmsuxU) or (?flags:...); true when a group
// body follows.
func (p *javaRegex) flags() bool {
	off := false
	for {
		c := p.next()
		switch {
		case strings.ContainsRune("idmsuU", c):
		case c == 'x':
			if !off {
				p.unsupported("comments mode (?x)")
			}
		case c == '-' && !off:
			off = true
		case c == ')':
			return false
		case c == ':':
			return true
		default:
			p.i--
			p.fail("Unknown inline modifier")
		}
	}
}

// escape parses what follows a backslash. It returns the character the
// escape stands for, or -1 for a class or an assertion.
func (p *javaRegex) escape(inClass bool) rune {
	if !p.more() {
		p.fail("Unexpected internal error")
	}
	c := p.next()
	switch {
	case c == '0':
		return p.octal()
	case c >= '1' && c <= '9':
		if inClass {
			p.fail("Illegal/unsupported escape sequence")
		}
		p.backReference(int(c - '0'))
		return -1
	case c == 'Q':
		for p.more() {
			if p.peek() == '\\' && p.i+1 < len(p.s) && p.s[p.i+1] == 'E' {
				p.i += 2
				break
			}
			p.i++
		}
		return -1
	case c == 'x':
		return p.hex()
	case c == 'u':
		return p.unicodeEscape()
	case c == 'c':
		if !p.more() {
			p.fail("Illegal control escape sequence")
		}
		return p.next() ^ 64
	case c == 'p' || c == 'P':
		p.property()
		return -1
	case c == 'N':
		p.unsupported(`\N{name}`)
	case c == 'k':
		if inClass {
			p.fail("Illegal/unsupported escape sequence")
		}
		p.namedReference()
		return -1
	case strings.ContainsRune("dDhHsSvVwW", c):
		return -1
	case strings.ContainsRune("bBAGZzRX", c):
		if inClass {
			p.fail("Illegal/unsupported escape sequence")
		}
		if c == 'b' && string(p.s[p.i:min(p.i+3, len(p.s))]) == "{g}" {
			p.unsupported(`\b{g} (JDK 9 and later)`)
		}
		if c == 'X' {
			p.unsupported(`\X (JDK 9 and later)`)
		}
		return -1
	case c == 't':
		return '\t'
	case c == 'n':
		return '\n'
	case c == 'r':
		return '\r'
	case c == 'f':
		return '\f'
	case c == 'a':
		return 7
	case c == 'e':
		return 27
	case c < 128 && (unicode.IsLetter(c) || unicode.IsDigit(c)):
		p.fail("Illegal/unsupported escape sequence")
	}
	return c // an escaped non-alphanumeric character is itself
}

func (p *javaRegex) octal() rune {
	n := 0
	digits := 0
	for digits < 3 && p.peek() >= '0' && p.peek() <= '7' {
		d := int(p.peek() - '0')
		if digits == 2 && n > 037 {
			break // \0377 is the largest three-digit octal escape
		}
		n = n*8 + d
		digits++
		p.i++
	}
	if digits == 0 {
		p.fail("Illegal octal escape sequence")
	}
	return rune(n)
}

func (p *javaRegex) hexDigits(n int) (rune, bool) {
	v := rune(0)
	for k := 0; k < n; k++ {
		d := hexValue(p.peek())
		if d < 0 {
			return 0, false
		}
		v = v*16 + d
		p.i++
	}
	return v, true
}

func hexValue(c rune) rune {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10
	}
	return -1
}

func (p *javaRegex) hex() rune {
	if p.peek() == '{' {
		p.i++
		v, n := rune(0), 0
		for hexValue(p.peek()) >= 0 {
			v = v*16 + hexValue(p.next())
			n++
			if v > unicode.MaxRune {
				p.fail("Hexadecimal codepoint is too big")
			}
		}
		if n == 0 || p.next() != '}' {
			p.fail("Unclosed hexadecimal escape sequence")
		}
		return v
	}
	v, ok := p.hexDigits(2)
	if !ok {
		p.fail("Illegal hexadecimal escape sequence")
	}
	return v
}

func (p *javaRegex) unicodeEscape() rune {
	v, ok := p.hexDigits(4)
	if !ok {
		p.fail("Illegal Unicode escape sequence")
	}
	return v
}

// backReference is Pattern.ref: more digits are taken while they name a
// group that exists; a reference to a group not (yet) defined compiles.
func (p *javaRegex) backReference(n int) {
	p.noReferenceBehind()
	for isDigit(p.peek()) {
		next := n*10 + int(p.peek()-'0')
		if next > p.groups {
			return
		}
		n = next
		p.i++
	}
}

// boundedBehind: JDK 17 takes an unbounded repetition inside a
// lookbehind (oracle_test.go shows it), JDK 8 refuses it, and the JVM's
// JDK is not known here.
func (p *javaRegex) boundedBehind() {
	if p.behind > 0 {
		p.unsupported("an unbounded repetition (*, +, {n,}) inside a lookbehind (JDK 8 refuses it)")
	}
}

func (p *javaRegex) noReferenceBehind() {
	if p.behind > 0 {
		p.fail("Look-behind group does not have an obvious maximum length")
	}
}

func (p *javaRegex) namedReference() {
	p.noReferenceBehind()
	if p.next() != '<' {
		p.fail("\\k is not followed by '<' for named capturing group")
	}
	start := p.i
	for c := p.peek(); c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || isDigit(c); c = p.peek() {
		p.i++
	}
	name := string(p.s[start:p.i])
	if p.next() != '>' {
		p.fail("named capturing group is missing trailing '>'")
	}
	if !p.names[name] {
		p.fail("named capturing group <%s> does not exist", name)
	}
}

// Character property names Java accepts (Pattern.CharPredicates): POSIX
// classes, java.lang.Character methods and general categories. Blocks
// are not checked.
var javaProperties = map[string]bool{}

// javaScripts are the scripts accepted as \p{IsX}: ones every JDK since 8
// (Unicode 6.2) knows. Go's tables are newer (JDK 17 refuses Unicode 14's
// Toto, as oracle_test.go shows), and the JVM's JDK is not known here.
var javaScripts = map[string]bool{}

func init() {
	for _, n := range strings.Fields(`Lower Upper ASCII Alpha Digit Alnum Punct Graph Print Blank Cntrl XDigit Space
		javaLowerCase javaUpperCase javaWhitespace javaMirrored javaLetter javaDigit javaLetterOrDigit javaAlphabetic
		javaIdeographic javaTitleCase javaIdentifierIgnorable javaDefined javaISOControl javaSpaceChar
		javaJavaIdentifierStart javaJavaIdentifierPart javaUnicodeIdentifierStart javaUnicodeIdentifierPart
		L Lu Ll Lt Lm Lo M Mn Mc Me N Nd Nl No P Pc Pd Ps Pe Pi Pf Po S Sm Sc Sk So Z Zs Zl Zp C Cc Cf Co Cs Cn LC LD L1 all`) {
		javaProperties[n] = true
	}
	for _, n := range strings.Fields(`Common Inherited Latin Greek Cyrillic Armenian Hebrew Arabic Syriac Thaana
		Devanagari Bengali Gurmukhi Gujarati Oriya Tamil Telugu Kannada Malayalam Sinhala Thai Lao Tibetan Myanmar
		Georgian Hangul Ethiopic Cherokee Khmer Mongolian Hiragana Katakana Bopomofo Han Yi`) {
		javaScripts[n] = true
	}
}

func (p *javaRegex) property() {
	var name string
	if p.peek() == '{' {
		p.i++
		start := p.i
		for p.more() && p.peek() != '}' {
			p.i++
		}
		if !p.more() {
			p.fail("Unclosed character family")
		}
		name = string(p.s[start:p.i])
		p.i++
	} else {
		if !p.more() {
			p.fail("Illegal character family")
		}
		name = string(p.next())
	}
	if javaProperties[name] {
		return
	}
	if rest, ok := strings.CutPrefix(name, "Is"); ok {
		if javaProperties[rest] || javaScripts[rest] || unicode.Categories[rest] != nil {
			return
		}
	}
	if name == "" {
		p.fail("Empty character family")
	}
	p.unsupported(fmt.Sprintf(`the character property \p{%s}`, name))
}

// class parses a character class after its '[' (Pattern.clazz): nested
// classes, && intersections, ranges that must not run backwards.
func (p *javaRegex) class() {
	if p.peek() == '^' {
		p.i++
	}
	items := 0
	for {
		if !p.more() {
			p.fail("Unclosed character class")
		}
		c := p.next()
		switch {
		case c == ']' && items > 0:
			return
		case c == '[':
			p.class()
			items++
			continue
		case c == '&' && p.peek() == '&':
			p.i++
			continue
		}
		lo := c
		if c == '\\' {
			lo = p.escape(true)
		}
		items++
		if lo < 0 || p.peek() != '-' || p.i+1 >= len(p.s) || p.s[p.i+1] == ']' || p.s[p.i+1] == '[' {
			continue
		}
		p.i++ // -
		hi := p.next()
		if hi == '\\' {
			hi = p.escape(true)
			if hi < 0 {
				p.fail("Illegal character range")
			}
		}
		if hi < lo {
			p.fail("Illegal character range")
		}
	}
}

// javaReplacementProblem is Matcher.appendExpandedReplacement's check of
// a replacement (a rule's name, help, label name or value) against the
// pattern's groups; a bad one throws on every scrape the rule matches.
func javaReplacementProblem(r string, groups int, names map[string]bool) string {
	s := []rune(r)
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
			if i == len(s) {
				return `ends with a backslash ("character to be escaped is missing")`
			}
		case '$':
			i++
			if i == len(s) {
				return `ends with "$" ("Illegal group reference: group index is missing")`
			}
			if s[i] == '{' {
				j := i + 1
				for j < len(s) && (s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z' || isDigit(s[j])) {
					j++
				}
				name := string(s[i+1 : j])
				switch {
				case name == "":
					return `has "${}" ("named capturing group has 0 length name")`
				case j == len(s) || s[j] != '}':
					return fmt.Sprintf(`has "${%s" without "}"`, name)
				case isDigit(s[i+1]):
					return fmt.Sprintf(`has "${%s}", a group name starting with a digit`, name)
				case !names[name]:
					return fmt.Sprintf(`refers to ${%s}, a group the pattern does not define`, name)
				}
				i = j
				continue
			}
			if !isDigit(s[i]) {
				return fmt.Sprintf(`has "$%c" ("Illegal group reference"; write \$ for a dollar sign)`, s[i])
			}
			n := int(s[i] - '0')
			if n > groups {
				return fmt.Sprintf("refers to $%d but the pattern has %d group(s) (\"No group %d\")", n, groups, n)
			}
			for i+1 < len(s) && isDigit(s[i+1]) && n*10+int(s[i+1]-'0') <= groups {
				n = n*10 + int(s[i+1]-'0')
				i++
			}
		}
	}
	return ""
}
