// Package doccheck holds the documentation's own checks: every relative
// link in the README and under docs/ lands on a file that exists and, where
// it names one, on a heading of that file.
package doccheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	link       = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	codeFence  = regexp.MustCompile("(?s)```.*?```")
	inlineCode = regexp.MustCompile("`[^`\n]*`")
	htmlAnchor = regexp.MustCompile(`<a (?:id|name)="([^"]+)"`)
)

func TestEveryRelativeLinkInTheDocsLandsOnAFileAndHeading(t *testing.T) {
	root := filepath.Join("..", "..")
	files := []string{filepath.Join(root, "README.md"), filepath.Join(root, "charts", "deckhand", "README.md")}
	require.NoError(t, filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			files = append(files, p)
		}
		return err
	}))
	anchors := map[string]map[string]bool{}
	checked := 0
	for _, file := range files {
		data, err := os.ReadFile(file)
		require.NoError(t, err)
		text := inlineCode.ReplaceAllString(codeFence.ReplaceAllString(string(data), ""), "")
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, frag, _ := strings.Cut(target, "#")
			dest := file
			if path != "" {
				dest = filepath.Join(filepath.Dir(file), path)
			}
			checked++
			if _, err := os.Stat(dest); err != nil {
				assert.Failf(t, "broken link", "%s links to %s: no such file", rel(root, file), target)
				continue
			}
			if frag == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			if anchors[dest] == nil {
				anchors[dest] = headingAnchors(t, dest)
			}
			assert.True(t, anchors[dest][frag], "%s links to %s: %s has no such heading", rel(root, file), target, rel(root, dest))
		}
	}
	require.Greater(t, checked, 50, "the walk found the docs' links")
}

func rel(root, p string) string {
	r, err := filepath.Rel(root, p)
	if err != nil {
		return p
	}
	return r
}

// headingAnchors lists the ids GitHub gives a file's headings: lower case,
// punctuation but '-' and '_' dropped, spaces to '-', a repeated id
// numbered -1, -2, ...; and explicit <a id> anchors.
func headingAnchors(t *testing.T, file string) map[string]bool {
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	text := codeFence.ReplaceAllString(string(data), "")
	ids := map[string]bool{}
	seen := map[string]int{}
	for _, line := range strings.Split(text, "\n") {
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			ids[m[1]] = true
		}
		if !strings.HasPrefix(line, "#") {
			continue
		}
		heading := strings.TrimSpace(strings.TrimLeft(line, "#"))
		id := slug(heading)
		if n := seen[id]; n > 0 {
			ids[id+"-"+strconv.Itoa(n)] = true
		} else {
			ids[id] = true
		}
		seen[id]++
	}
	return ids
}

func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_':
			b.WriteRune(r)
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}
