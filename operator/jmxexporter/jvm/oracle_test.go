package jvm

import (
	"bytes"
	"encoding/base64"
	"math/rand"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/jmxexporter/jvm/jvmtest"
)

// askJDK runs ConfigOracle (jvmtest) on the host's JDK 17: for each
// (kind, text) whether Pattern.compile or new ObjectName accepts it, and
// a pattern's group count.
func askJDK(t *testing.T, kind string, texts []string) (ok []bool, groups []int, msgs []string) {
	t.Helper()
	var in bytes.Buffer
	for _, s := range texts {
		in.WriteString(kind + " " + base64.StdEncoding.EncodeToString([]byte(s)) + "\n")
	}
	cmd := exec.Command("java", "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-cp", jvmtest.Compile(t).Classes, "ConfigOracle")
	cmd.Stdin = &in
	out, err := cmd.Output()
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	require.Len(t, lines, len(texts))
	for _, l := range lines {
		verdict, rest, _ := strings.Cut(l, " ")
		n, _ := strconv.Atoi(rest)
		ok, groups, msgs = append(ok, verdict == "ok"), append(groups, n), append(msgs, rest)
	}
	return ok, groups, msgs
}

// randomTexts are n strings of up to max characters from alphabet, from
// a fixed seed (the same corpus every run).
func randomTexts(seed int64, n, max int, alphabet []string) []string {
	r := rand.New(rand.NewSource(seed))
	out := make([]string, n)
	for i := range out {
		var b strings.Builder
		for k := r.Intn(max) + 1; k > 0; k-- {
			b.WriteString(alphabet[r.Intn(len(alphabet))])
		}
		out[i] = b.String()
	}
	return out
}

// The rules' pattern check against java.util.regex itself: everything
// the JDK refuses is refused (the agent would exit the JVM), everything
// it accepts is accepted (with the same groups) unless the check says it
// does not model that construct.
func TestJavaRegexCheckAgreesWithTheJDK(t *testing.T) {
	patterns := []string{
		`^hadoop<(service)=(DataNode), name=DataNodeActivity-ams-hdd001-50010><>(replaceBlockOpMinTime):`,
		`kafka.server<type=(.+), name=(.+)PerSec\w*, topic=(.+)><>Count`,
		`Catalina<j2eeType=Servlet, WebModule=//([-a-zA-Z0-9+&@#/%?=~_|!:.,;]*[-a-zA-Z0-9+&@#/%=~_|]), name=([-a-zA-Z0-9+/$%~_-|!.]*)>`,
		`kafka<name=${topic}>`, `a{`, `a{1`, `a{2,1}`, `a{,3}`, `{2}`, `x{2147483648}`,
		`(?<n>a)\k<n>`, `\k<n>(?<n>a)`, `(?<1a>x)`, `(?<a>x)(?<a>y)`, `(?i)a(?-i:b)(?u)`, `(?z)`, `(?i`,
		`(?<=ab|c)d`, `(?<!a{1,3})b`, `(?<=a*)b`, `(?<=a{2,})b`, `(?>a+)b`, `a*+b++c?+`, `a**`, `a*??`,
		`[]a]`, `[]`, `[^]a]`, `[a-]`, `[-a]`, `[a-\d]`, `[\d-z]`, `[z-a]`, `[a-z&&[^m]]`, `[[a][b]]`, `[a&&]`,
		`\x41\x{1F600}\u0041\0101\cA\t\e`, `\x4`, `\x{}`, `\u12`, `\08`, `\0`, `\c`,
		`\p{Lu}\p{IsLatin}\p{javaLowerCase}\P{Alpha}\pL`, `\p{Foo}`, `\p{}`, `\p{IsGreek}`,
		`\Qa(b\E)`, `\Qa(b`, `\E`, `\b{g}`, `\b{w}`, `\R\X\h\v\z\Z\G\A`, `[\R]`, `[\b]`, `[\1]`,
		`(a)\1\2`, `(a)(b)\21`, `\y`, `\_`, `\%`, `a|`, `|`, `()`, `(?:)`, `)`, `(`, `a\`, `\`,
	}
	// Every character property the check accepts, as \p{X} and \p{IsX}.
	for name := range javaProperties {
		patterns = append(patterns, `\p{`+name+`}`, `\p{Is`+name+`}`)
	}
	for name := range unicode.Scripts {
		patterns = append(patterns, `\p{Is`+name+`}`) // the check takes javaScripts only
	}
	for name := range unicode.Categories {
		patterns = append(patterns, `\p{Is`+name+`}`)
	}
	alphabet := []string{"a", "b", "(", ")", "[", "]", "{", "}", "*", "+", "?", "|", "^", "$", ".", "-", "&",
		"\\", ":", "=", "!", "<", ">", ",", "0", "1", "2", "d", "p", "Q", "E", "k", "x", "i", "u", "n"}
	patterns = append(patterns, randomTexts(22, 3000, 7, alphabet)...)
	// Bigger pieces: the constructs the check models, combined.
	tokens := []string{"a", "(", ")", "[", "]", "|", "*", "+", "?", "{1,2}", "{2}", "{", "}", "-", "&&", "^",
		`\d`, `\w`, `\p{L}`, `\p{IsLatin}`, `\x4`, `\x41`, `\x{41}`, `\u004`, `\0`, `\07`, `\1`, `\2`, `\Q`, `\E`,
		`\b`, `\k<n>`, "(?<n>", "(?=", "(?!", "(?<=", "(?<!", "(?>", "(?i)", "(?-i:", "(?:", "[a-c]", "[^", "z-a", `\`}
	patterns = append(patterns, randomTexts(24, 3000, 6, tokens)...)
	ok, groups, msgs := askJDK(t, "regex", patterns)
	unmodelled := 0
	for i, p := range patterns {
		n, _, err := parseJavaRegex("^.*(?:" + p + ").*$")
		if !ok[i] {
			assert.Error(t, err, "the JDK refuses %q (%s), the check must too", p, msgs[i])
			continue
		}
		if err != nil && strings.Contains(err.Error(), "not checked by deckhand") {
			unmodelled++
			continue
		}
		if assert.NoError(t, err, "the JDK accepts %q", p) {
			assert.Equal(t, groups[i], n, "groups of %q", p)
		}
	}
	t.Logf("%d patterns, %d accepted by the JDK, %d refused as not modelled", len(patterns), count(ok), unmodelled)
}

// ObjectNames (include/exclude lists) against javax.management.ObjectName.
func TestObjectNameCheckAgreesWithTheJDK(t *testing.T) {
	names := []string{"", "java.lang:*", "java.lang:type=Memory", "java.lang", "d:", "d:k=", `d:k=""`, `d:k="a,b"`,
		`d:k="a\"b"`, `d:k="a\qb"`, `d:k="a`, "d:k=v,*", "d:*,k=v", "d:k=v,", "d:k=v,k=w", "d:k*=v", "d:k=v*",
		"*:*", "d*:k=v", "d:k=a:b", "d:k=a=b", "d:=v", "d:k=v,,j=w", "d:k=\"v\"x", "a\nb:k=v"}
	alphabet := []string{"a", "b", ":", "=", ",", "*", "?", "\"", "\\", " ", "n", "\n"}
	names = append(names, randomTexts(23, 2000, 8, alphabet)...)
	for _, props := range randomTexts(25, 2000, 8, []string{"a", "b", "=", ",", "*", "?", "\"", "\\", " ", "\n", "k=v"}) {
		names = append(names, "d:"+props)
	}
	ok, _, msgs := askJDK(t, "objectname", names)
	for i, n := range names {
		problem := objectNameProblem(n)
		if ok[i] {
			assert.Empty(t, problem, "the JDK accepts %q", n)
		} else {
			assert.NotEmpty(t, problem, "the JDK refuses %q (%s), the check must too", n, msgs[i])
		}
	}
	t.Logf("%d ObjectNames, %d accepted by the JDK", len(names), count(ok))
}

func count(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}
