// Package docs checks the documentation itself, without running anything.
package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// translated are the pages that must have a Simplified Chinese version. Every
// file in docs/zh-CN/ is checked too, listed here or not.
var translated = []string{
	"README.md",
	"docs/deploy.md",
	"docs/observability.md",
}

// zhPath is where the Chinese version of an English page lives:
// README.md → README.zh-CN.md, docs/x.md → docs/zh-CN/x.md.
func zhPath(en string) string {
	if en == "README.md" {
		return "README.zh-CN.md"
	}
	return filepath.ToSlash(filepath.Join(filepath.Dir(en), "zh-CN", filepath.Base(en)))
}

// TestDocsZhCNInStep keeps every Chinese page in step with its English page:
// the fenced code blocks are identical and in the same order, the headings
// have the same levels in the same order with the same inline code, each
// section (the text under one heading) names the same inline code spans
// (commands, flags, keys, metrics, paths), every relative link of both pages
// points at a file that exists (on the Chinese page also at a heading that
// exists, for #anchors into Markdown files), and each page links to the other. A change to an
// English page's commands or headings fails here, naming the page and the
// first difference, until the Chinese page follows.
func TestDocsZhCNInStep(t *testing.T) {
	root := repoRoot(t)
	pages := slices.Clone(translated)
	extra, err := filepath.Glob(filepath.Join(root, "docs", "zh-CN", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range extra {
		en := "docs/" + filepath.Base(f)
		if !slices.Contains(pages, en) {
			pages = append(pages, en)
		}
	}
	for _, en := range pages {
		zh := zhPath(en)
		t.Run(zh, func(t *testing.T) {
			e, errE := parse(root, en)
			z, errZ := parse(root, zh)
			if errE != nil {
				t.Fatalf("%s has no English page: %v", zh, errE)
			}
			if errZ != nil {
				t.Fatalf("%s has no Chinese version: %v", en, errZ)
			}
			checkPair(t, root, e, z)
		})
	}
}

func checkPair(t *testing.T, root string, e, z *page) {
	t.Helper()
	// (a) code blocks: same count, same order, identical.
	for i := 0; i < max(len(e.blocks), len(z.blocks)); i++ {
		if i >= len(e.blocks) {
			t.Errorf("%s: code block %d (line %d) has no counterpart in %s (it has %d code blocks, the Chinese page %d)",
				z.name, i+1, z.blocks[i].line, e.name, len(e.blocks), len(z.blocks))
			break
		}
		if i >= len(z.blocks) {
			t.Errorf("%s: code block %d of %s (line %d) is missing (the English page has %d code blocks, the Chinese page %d):\n%s",
				z.name, i+1, e.name, e.blocks[i].line, len(e.blocks), len(z.blocks), e.blocks[i].text)
			break
		}
		if d := firstDiff(e.blocks[i].text, z.blocks[i].text); d != "" {
			t.Errorf("%s: code block %d (line %d) differs from %s code block %d (line %d): %s",
				z.name, i+1, z.blocks[i].line, e.name, i+1, e.blocks[i].line, d)
			break
		}
	}

	// (b) headings: same levels in the same order, same inline code.
	for i := 0; i < max(len(e.headings), len(z.headings)); i++ {
		if i >= len(e.headings) {
			t.Errorf("%s: heading %d %q (line %d) has no counterpart in %s (%d headings there, %d here)",
				z.name, i+1, z.headings[i].text, z.headings[i].line, e.name, len(e.headings), len(z.headings))
			break
		}
		if i >= len(z.headings) {
			t.Errorf("%s: heading %d of %s, %s %q (line %d), is missing (%d headings there, %d here)",
				z.name, i+1, e.name, strings.Repeat("#", e.headings[i].level), e.headings[i].text, e.headings[i].line,
				len(e.headings), len(z.headings))
			break
		}
		eh, zh := e.headings[i], z.headings[i]
		if eh.level != zh.level {
			t.Errorf("%s: heading %d %s %q (line %d) is level %d, but %s heading %d %q (line %d) is level %d",
				z.name, i+1, strings.Repeat("#", zh.level), zh.text, zh.line, zh.level, e.name, i+1, eh.text, eh.line, eh.level)
			break
		}
		if ec, zc := codeSpans(eh.text), codeSpans(zh.text); !slices.Equal(ec, zc) {
			t.Errorf("%s: heading %d %q (line %d) has inline code %q, %s heading %q (line %d) has %q",
				z.name, i+1, zh.text, zh.line, zc, e.name, eh.text, eh.line, ec)
			break
		}
	}

	// Inline code per section, when the sections line up.
	if len(e.sections) == len(z.sections) {
		for i := range e.sections {
			es, zs := e.sections[i], z.sections[i]
			if only := missing(es.code, zs.code); len(only) > 0 {
				t.Errorf("%s: the section %q (line %d) lacks inline code %q that %s's section %q (line %d) has",
					z.name, zs.title, zs.line, only, e.name, es.title, es.line)
				break
			}
			if only := missing(zs.code, es.code); len(only) > 0 {
				t.Errorf("%s: the section %q (line %d) has inline code %q that %s's section %q (line %d) does not",
					z.name, zs.title, zs.line, only, e.name, es.title, es.line)
				break
			}
		}
	}

	// (c) links: every relative target exists; on the Chinese page, whose
	// headings are translated, every #anchor into a Markdown file too.
	for _, p := range []*page{e, z} {
		for _, l := range p.links {
			if err := checkLink(root, p, l.target, p == z); err != nil {
				t.Errorf("%s line %d: link %q: %v", p.name, l.line, l.target, err)
			}
		}
	}

	// Each page links to the other.
	if !linksTo(e, z.name) {
		t.Errorf("%s does not link to its Chinese version %s (put the link on its first lines)", e.name, z.name)
	}
	if !linksTo(z, e.name) {
		t.Errorf("%s does not link back to its English page %s", z.name, e.name)
	}
}

type heading struct {
	level int
	text  string
	line  int
}

type block struct {
	text string // the lines between the fences, the fence's indentation removed, plus the info string
	line int
}

type link struct {
	target string
	line   int
}

type section struct {
	title string
	line  int
	code  []string // inline code spans, sorted, unique
}

type page struct {
	name     string // slash path relative to the repository root
	headings []heading
	blocks   []block
	links    []link
	sections []section // the text before the first heading, then one per heading
	anchors  map[string]bool
}

var (
	fenceRE   = regexp.MustCompile("^(\\s*)(`{3,}|~{3,})(.*)$")
	headingRE = regexp.MustCompile(`^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$`)
	linkRE    = regexp.MustCompile(`\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	refDefRE  = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*(\S+)`)
	hrefRE    = regexp.MustCompile(`(?i)\b(?:href|src)="([^"]+)"`)
)

func parse(root, name string) (*page, error) {
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
	if err != nil {
		return nil, err
	}
	p := &page{name: name, anchors: map[string]bool{}}
	slugs := map[string]int{}
	cur := &section{title: "(before the first heading)", line: 1}
	var (
		inFence             bool
		fenceChar           byte
		fenceLen, fenceLine int
		fenceIndent         string
		body                []string
	)
	endSection := func() {
		cur.code = uniqueSorted(cur.code)
		p.sections = append(p.sections, *cur)
	}
	for i, raw := range strings.Split(strings.ReplaceAll(string(b), "\r\n", "\n"), "\n") {
		n := i + 1
		if inFence {
			trim := strings.TrimSpace(raw)
			if len(trim) >= fenceLen && strings.Trim(trim, string(fenceChar)) == "" && trim[0] == fenceChar {
				p.blocks = append(p.blocks, block{text: strings.Join(body, "\n"), line: fenceLine})
				inFence = false
				continue
			}
			body = append(body, strings.TrimPrefix(raw, fenceIndent))
			continue
		}
		if m := fenceRE.FindStringSubmatch(raw); m != nil && (m[2][0] == '~' || !strings.Contains(m[3], "`")) {
			inFence, fenceChar, fenceLen, fenceLine = true, m[2][0], len(m[2]), n
			fenceIndent = m[1]
			body = []string{"info: " + strings.TrimSpace(m[3])}
			continue
		}
		if m := headingRE.FindStringSubmatch(raw); m != nil {
			endSection()
			h := heading{level: len(m[1]), text: m[2], line: n}
			p.headings = append(p.headings, h)
			s := slug(h.text)
			if k := slugs[s]; k > 0 {
				p.anchors[fmt.Sprintf("%s-%d", s, k)] = true
			} else {
				p.anchors[s] = true
			}
			slugs[s]++
			cur = &section{title: h.text, line: n}
			continue
		}
		cur.code = append(cur.code, codeSpans(raw)...)
		text := stripCode(raw)
		for _, m := range linkRE.FindAllStringSubmatch(text, -1) {
			p.links = append(p.links, link{target: m[1], line: n})
		}
		for _, m := range hrefRE.FindAllStringSubmatch(text, -1) {
			p.links = append(p.links, link{target: m[1], line: n})
		}
		if m := refDefRE.FindStringSubmatch(text); m != nil {
			p.links = append(p.links, link{target: m[1], line: n})
		}
	}
	if inFence {
		return nil, fmt.Errorf("%s: the code block opened on line %d is never closed", name, fenceLine)
	}
	endSection()
	return p, nil
}

// codeSpans returns the inline code spans of one line of Markdown.
func codeSpans(s string) []string {
	var out []string
	for {
		i := strings.IndexByte(s, '`')
		if i < 0 {
			return out
		}
		j := i
		for j < len(s) && s[j] == '`' {
			j++
		}
		ticks := s[i:j]
		k := strings.Index(s[j:], ticks)
		if k < 0 {
			return out
		}
		out = append(out, strings.TrimSpace(s[j:j+k]))
		s = s[j+k+len(ticks):]
	}
}

// stripCode removes inline code spans, so a path in backticks is not a link.
func stripCode(s string) string {
	for _, c := range codeSpans(s) {
		s = strings.Replace(s, c, "", 1)
	}
	return s
}

// slug is GitHub's anchor for a heading: lower case, punctuation other than
// '-' and '_' removed, spaces to '-'. Letters of every script stay.
func slug(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	var b strings.Builder
	for _, r := range h {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func checkLink(root string, p *page, target string, anchors bool) error {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return nil
	}
	path, anchor, _ := strings.Cut(target, "#")
	if !anchors {
		anchor = ""
	}
	var dst *page
	if path == "" {
		dst = p
	} else {
		rel := filepath.ToSlash(filepath.Join(filepath.Dir(p.name), path))
		if strings.HasPrefix(rel, "../") || filepath.IsAbs(path) {
			return fmt.Errorf("points outside the repository")
		}
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel))); err != nil {
			return fmt.Errorf("%s does not exist", rel)
		}
		if anchor == "" || !strings.HasSuffix(rel, ".md") {
			return nil
		}
		var err error
		if dst, err = parse(root, rel); err != nil {
			return err
		}
	}
	if anchor != "" && !dst.anchors[strings.ToLower(anchor)] {
		return fmt.Errorf("%s has no heading with the anchor #%s", dst.name, anchor)
	}
	return nil
}

func linksTo(p *page, name string) bool {
	for _, l := range p.links {
		path, _, _ := strings.Cut(l.target, "#")
		if path != "" && filepath.ToSlash(filepath.Join(filepath.Dir(p.name), path)) == name {
			return true
		}
	}
	return false
}

// firstDiff describes the first line where two code blocks differ, or "".
func firstDiff(en, zh string) string {
	if en == zh {
		return ""
	}
	a, b := strings.Split(en, "\n"), strings.Split(zh, "\n")
	for i := 0; i < max(len(a), len(b)); i++ {
		var x, y string
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if i >= len(a) || i >= len(b) || x != y {
			what := fmt.Sprintf("line %d of the block", i)
			if i == 0 {
				what = "the info string"
			}
			return fmt.Sprintf("%s: English %q, Chinese %q", what, x, y)
		}
	}
	return "they differ"
}

func uniqueSorted(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}

// missing returns what a has and b lacks (both sorted and unique).
func missing(a, b []string) []string {
	var out []string
	for _, x := range a {
		if _, ok := slices.BinarySearch(b, x); !ok {
			out = append(out, x)
		}
	}
	return out
}

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.work above the working directory")
		}
		dir = parent
	}
}
