// Package docs_test checks the repository's Markdown: every relative link
// in README.md, docs/, bench/README.md and every other Markdown file
// resolves, to a file or directory of the repository and, when it names
// an anchor of a Markdown file, to one of that file's headings.
package docs_test

import (
	"bufio"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// root is the repository's root, from this package's directory.
const root = ".."

// skipDirs are directories whose Markdown is not the repository's own:
// built binaries and images, git's, vendored code and module caches,
// and test data (which may hold broken links on purpose).
var skipDirs = map[string]bool{
	"bin": true, ".git": true, "vendor": true, "node_modules": true,
	"testdata": true, "conformance-results": true,
}

// mustCheck are files whose links the test must have read: a walk that
// missed them would pass without checking what matters.
var mustCheck = []string{"README.md", "docs/README.md", "bench/README.md"}

var (
	// link is an inline link or image, [text](target) or
	// [text](target "title"); submatch 1 is the text, 2 the target.
	link = regexp.MustCompile(`!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*<?([^\s()<>]+(?:\([^\s()]*\)[^\s()<>]*)*)>?(?:\s+"[^"]*")?\s*\)`)
	// codeSpan is inline code, whose text is no link.
	codeSpan = regexp.MustCompile("`+[^`]*`+")
	// htmlAnchor is an anchor an HTML element names.
	htmlAnchor = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
)

// TestRelativeLinksResolve walks the repository's Markdown files and fails
// for every relative link whose file or directory does not exist, that
// leaves the repository, or whose anchor no heading of its Markdown file
// produces; each failure names file:line and the link.
func TestRelativeLinksResolve(t *testing.T) {
	files := markdownFiles(t)
	for _, want := range mustCheck {
		if !slices.Contains(files, want) {
			t.Errorf("%s was not found: the walk would not check it", want)
		}
	}
	anchors := map[string]map[string]bool{} // by file, read once
	checked := 0
	for _, file := range files {
		for _, l := range relativeLinks(t, file) {
			checked++
			if err := resolve(file, l.target, anchors); err != nil {
				t.Errorf("%s:%d: broken link [%s](%s): %v", file, l.line, l.text, l.target, err)
			}
		}
	}
	if checked < 50 {
		t.Errorf("only %d relative links checked in %d files: the docs have many more", checked, len(files))
	}
	t.Logf("%d relative links checked in %d Markdown files", checked, len(files))
}

// markdownFiles are the repository's Markdown files, relative to root,
// slash-separated.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (skipDirs[d.Name()] || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			// A directory of its own module's cache (GOMODCACHE or
			// GOPATH/pkg/mod under the repository) is not ours either.
			if d.Name() == "mod" && filepath.Base(filepath.Dir(path)) == "pkg" && isModCache(path) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.EqualFold(filepath.Ext(path), ".md") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// isModCache says whether dir looks like a Go module cache: it holds
// cache/download.
func isModCache(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "cache", "download"))
	return err == nil
}

// mdLink is a link of a Markdown file.
type mdLink struct {
	line         int
	text, target string
}

// relativeLinks are file's links that are not URLs (http(s), mailto or any
// other scheme), outside fenced code blocks and code spans.
func relativeLinks(t *testing.T, file string) []mdLink {
	t.Helper()
	f, err := os.Open(filepath.Join(root, filepath.FromSlash(file)))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var links []mdLink
	fence := ""
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for n := 1; scanner.Scan(); n++ {
		line := scanner.Text()
		if next, changed := fenceChange(line, fence); changed {
			fence = next
			continue
		}
		if fence != "" {
			continue
		}
		line = codeSpan.ReplaceAllString(line, "")
		for _, m := range link.FindAllStringSubmatch(line, -1) {
			target := m[2]
			if isURL(target) {
				continue
			}
			links = append(links, mdLink{line: n, text: m[1], target: target})
		}
	}
	if err := scanner.Err(); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return links
}

// fenceChange says whether line opens or closes a fenced code block, given
// the fence of the block it is in ("" for none), and the fence after it.
func fenceChange(line, fence string) (string, bool) {
	trimmed := strings.TrimLeft(line, " ")
	if len(line)-len(trimmed) > 3 {
		return fence, false
	}
	for _, c := range []string{"```", "~~~"} {
		if !strings.HasPrefix(trimmed, c) {
			continue
		}
		marker := trimmed[:len(trimmed)-len(strings.TrimLeft(trimmed, c[:1]))]
		switch {
		case fence == "":
			return marker, true
		case marker[0] == fence[0] && len(marker) >= len(fence) && strings.TrimSpace(trimmed[len(marker):]) == "":
			return "", true
		}
	}
	return fence, false
}

// scheme starts a URL: https:, mailto:, ...
var scheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)

// isURL says whether target is a URL, and so no path of the repository.
func isURL(target string) bool { return scheme.MatchString(target) || strings.HasPrefix(target, "//") }

// resolve says why target, a link of file, does not resolve.
func resolve(file, target string, anchors map[string]map[string]bool) error {
	pathPart, anchor, _ := strings.Cut(target, "#")
	pathPart, _, _ = strings.Cut(pathPart, "?")
	p, err := url.PathUnescape(pathPart)
	if err != nil {
		return fmt.Errorf("bad path: %v", err)
	}
	var dest string // slash-separated, relative to root
	switch {
	case p == "":
		dest = file
	case strings.HasPrefix(p, "/"): // from the repository's root, as GitHub reads it
		dest = strings.TrimPrefix(filepathClean(p), "/")
	default:
		dest = filepathClean(filepath.ToSlash(filepath.Join(filepath.Dir(file), p)))
	}
	if dest == ".." || strings.HasPrefix(dest, "../") {
		return fmt.Errorf("%s is outside the repository", dest)
	}
	info, err := os.Stat(filepath.Join(root, filepath.FromSlash(dest)))
	if err != nil {
		return fmt.Errorf("no such file or directory: %s", dest)
	}
	if strings.HasSuffix(p, "/") && !info.IsDir() {
		return fmt.Errorf("%s is not a directory", dest)
	}
	if anchor == "" || info.IsDir() || !strings.EqualFold(filepath.Ext(dest), ".md") {
		return nil
	}
	known, ok := anchors[dest]
	if !ok {
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(dest)))
		if err != nil {
			return err
		}
		known = headingAnchors(string(data))
		anchors[dest] = known
	}
	a, err := url.PathUnescape(anchor)
	if err != nil {
		return fmt.Errorf("bad anchor: %v", err)
	}
	if !known[strings.ToLower(a)] {
		return fmt.Errorf("%s has no heading whose anchor is #%s", dest, anchor)
	}
	return nil
}

// filepathClean cleans a slash-separated path.
func filepathClean(p string) string { return filepath.ToSlash(filepath.Clean(filepath.FromSlash(p))) }

var (
	atxHeading  = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	inlineLink  = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTag     = regexp.MustCompile(`<[^>]+>`)
	setextUnder = regexp.MustCompile(`^ {0,3}(=+|-+)[ \t]*$`)
)

// headingAnchors are the anchors GitHub gives a Markdown file's headings
// (ATX and setext; a repeated one gets -1, -2, ...), and those that HTML
// anchors name.
func headingAnchors(text string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	add := func(heading string) {
		a := slug(heading)
		if n := seen[a]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	fence, previous := "", ""
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimRight(line, "\r")
		if next, changed := fenceChange(line, fence); changed {
			fence, previous = next, ""
			continue
		}
		if fence != "" {
			continue
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			anchors[strings.ToLower(m[1])] = true
		}
		if m := atxHeading.FindStringSubmatch(line); m != nil {
			add(m[2])
			previous = ""
			continue
		}
		if setextUnder.MatchString(line) && strings.TrimSpace(previous) != "" && !strings.HasPrefix(strings.TrimSpace(previous), "|") {
			add(strings.TrimSpace(previous))
			previous = ""
			continue
		}
		previous = line
	}
	return anchors
}

// slug is the anchor GitHub gives a heading: its text (links as their
// text, without HTML tags), lower-cased, with spaces as '-' and every
// character but letters, digits, '-' and '_' dropped.
func slug(heading string) string {
	heading = inlineLink.ReplaceAllString(heading, "$1")
	heading = htmlTag.ReplaceAllString(heading, "")
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestSlug pins the heading rule against headings of these docs.
func TestSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"Registering tenants, and the fleet at a glance": "registering-tenants-and-the-fleet-at-a-glance",
		"The `Ready` condition of a `VirtualCluster`":    "the-ready-condition-of-a-virtualcluster",
		"Syncing down and up: `pkg/syncer`":              "syncing-down-and-up-pkgsyncer",
		"`tenantry register`":                            "tenantry-register",
		"Two commands":                                   "two-commands",
		"A [linked](x.md) heading_with-marks!":           "a-linked-heading_with-marks",
	} {
		if got := slug(heading); got != want {
			t.Errorf("slug(%q) = %q, want %q", heading, got, want)
		}
	}
}
