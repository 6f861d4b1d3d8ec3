// Package render turns a group of OPS events into sink-neutral
// notifications: a title, a short markdown summary with counts, and a table
// of the most important rows. A burst of 500 cleanup results becomes one
// notification whose counts account for every pod, with the rows sorted so
// that a sink that must cut to fit its size limit keeps the failures first.
package render

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/opswire/opswire/services/notifier/internal/locale"
	"github.com/opswire/opswire/services/notifier/internal/notify"
	"github.com/opswire/opswire/shared/events"
)

// Group describes where a group of items goes.
type Group struct {
	Route   string
	Key     string
	Title   string // route title (msgtitle); empty uses the event's or a default
	Cluster string
	// ClusterInTitle appends " · cluster <Cluster>" to every title: a
	// fleet notifier's cards come from many clusters, and the title is what
	// a chat preview shows (the footer names the cluster on every card).
	ClusterInTitle bool
	Now            time.Time
	// Locale is the receiver's language and time zone; nil is English in UTC.
	Locale *locale.Locale
}

// Render renders the items of one group (all of one kind). A restart report
// is never merged with another: each becomes its own notification.
func Render(g Group, items []*notify.Item) []*notify.Notification {
	ns := render(g, items)
	if g.ClusterInTitle {
		for _, n := range ns {
			n.Title += g.Locale.T(" · cluster %s", Clean(g.Cluster))
		}
	}
	return ns
}

func render(g Group, items []*notify.Item) []*notify.Notification {
	if len(items) == 0 {
		return nil
	}
	switch items[0].Kind {
	case notify.KindRestarts:
		out := make([]*notify.Notification, 0, len(items))
		for _, it := range items {
			out = append(out, restarts(g, it))
		}
		return out
	case notify.KindCleanup:
		return []*notify.Notification{cleanup(g, items)}
	case notify.KindCordon:
		return []*notify.Notification{cordon(g, items)}
	case notify.KindImages:
		return []*notify.Notification{images(g, items)}
	}
	return nil
}

func base(g Group, items []*notify.Item, defaultTitle string) *notify.Notification {
	n := &notify.Notification{Route: g.Route, Key: g.Key, Cluster: g.Cluster, Time: g.Now, Items: items,
		Title: g.Locale.Title(firstNonEmpty(g.Title, defaultTitle)), Severity: events.SeverityInfo, Locale: g.Locale}
	for _, it := range items {
		if notify.SeverityRank(it.Severity) > notify.SeverityRank(n.Severity) {
			n.Severity = it.Severity
		}
	}
	return n
}

// sortItems puts the most severe first, then the newest.
func sortItems(items []*notify.Item) []*notify.Item {
	s := append([]*notify.Item(nil), items...)
	sort.SliceStable(s, func(i, j int) bool {
		ri, rj := notify.SeverityRank(s[i].Severity), notify.SeverityRank(s[j].Severity)
		if ri != rj {
			return ri > rj
		}
		return s[i].Time.After(s[j].Time)
	})
	return s
}

func cleanup(g Group, items []*notify.Item) *notify.Notification {
	l := g.Locale
	n := base(g, items, "Pod cleanup")
	verbs, reasons, nss := counter{l: l}, counter{l: l}, counter{l: l}
	for _, it := range items {
		d := it.Cleanup
		verbs.add(l.Word(d.Verb))
		reasons.add(firstNonEmpty(d.PodReason, d.Phase, "-"))
		nss.add(d.Namespace)
	}
	var b strings.Builder
	b.WriteString(l.T("**%d** cleanup results: %s", len(items), verbs))
	// Capped like namespaces: a group of pods with distinct reasons (an
	// admission error naming each pod) would otherwise make a summary no
	// row cut can bring under the body budget, a card too large for good.
	b.WriteString("\n" + l.T("**Pod reasons:** %s", reasons.top(summaryTop)))
	b.WriteString("\n" + l.T("**Namespaces:** %s", nss.top(summaryTop)))
	if len(items) == 1 {
		d := items[0].Cleanup
		b.WriteString("\n" + l.T("**Pod:** %s  **Node:** %s", Clean(d.Namespace)+"/"+Clean(d.Pod), Clean(firstNonEmpty(d.Node, "-"))))
		b.WriteString("\n" + l.T("**Why:** %s", Clean(d.Reason)))
		if d.Error != "" {
			b.WriteString("\n" + l.T("**Error:** %s", Clean(d.Error)))
		}
	}
	n.Summary = b.String()
	n.Columns = columns(l, "Pod", "Node", "Result", "Reason")
	for _, it := range sortItems(items) {
		d := it.Cleanup
		why := firstNonEmpty(d.PodReason, d.Phase)
		if d.Error != "" {
			why = d.Error
		} else if d.Reason != "" && why != "" {
			why += ": " + d.Reason
		} else if d.Reason != "" {
			why = d.Reason
		}
		n.Rows = append(n.Rows, []string{Clean(d.Namespace + "/" + d.Pod), Clean(firstNonEmpty(d.Node, "-")), Clean(dry(l, d.Verb, d.DryRun)), Clean(why)})
	}
	return n
}

func cordon(g Group, items []*notify.Item) *notify.Notification {
	l := g.Locale
	n := base(g, items, "Node cordon")
	verbs := counter{l: l}
	for _, it := range items {
		verbs.add(l.Word(it.Cordon.Verb))
	}
	var b strings.Builder
	b.WriteString(l.T("**%d** cordon decisions: %s", len(items), verbs))
	if len(items) == 1 {
		d := items[0].Cordon
		b.WriteString("\n" + l.T("**Node:** %s  **Pods:** %d (cordon at %d, uncordon at %d)", Clean(d.Node), d.Pods, d.MaxPods, d.MinPods))
		b.WriteString("\n" + l.T("**Why:** %s", Clean(d.Reason)))
		if d.Error != "" {
			b.WriteString("\n" + l.T("**Error:** %s", Clean(d.Error)))
		}
	}
	n.Summary = b.String()
	n.Columns = columns(l, "Node", "Result", "Pods", "Reason")
	for _, it := range sortItems(items) {
		d := it.Cordon
		why := d.Reason
		if d.Error != "" {
			why = d.Error
		}
		n.Rows = append(n.Rows, []string{Clean(d.Node), Clean(dry(l, d.Verb, d.DryRun)), fmt.Sprintf("%d/%d", d.Pods, d.MaxPods), Clean(why)})
	}
	return n
}

func images(g Group, items []*notify.Item) *notify.Notification {
	l := g.Locale
	n := base(g, items, "Node image storage")
	n.Summary = l.T("**%d** nodes over the image-storage threshold", len(items))
	n.Columns = columns(l, "Node", "Images", "Size", "Reason")
	truncated := false
	for _, it := range sortItems(items) {
		a := it.Image
		size := Bytes(a.ImageBytes)
		if a.Percent > 0 {
			size += fmt.Sprintf(" (%.0f%%)", a.Percent)
		}
		count := fmt.Sprintf("%d", a.ImageCount)
		if a.ImagesTruncated {
			// The kubelet listed only its largest images: the figures are lower bounds.
			size, count = "≥ "+size, "≥ "+count
			truncated = true
		}
		n.Rows = append(n.Rows, []string{Clean(a.Node), count, size, Clean(l.Word(a.Reason))})
	}
	if truncated {
		n.Summary += "\n" + l.T("≥: at least; the kubelet lists only a node's largest images (raise --node-status-max-images to see all)")
	}
	return n
}

func restarts(g Group, it *notify.Item) *notify.Notification {
	r := it.Report
	l := g.Locale
	n := base(g, []*notify.Item{it}, "Pods restarting too often")
	if r.Title != "" && g.Title == "" {
		n.Title = l.Title(r.Title)
	}
	summary := "**%d** pods restarted more than **%d** times (%s), %d restarts in all; %d pods checked"
	if r.GroupBy == "workload" {
		summary = "**%d** workloads restarted more than **%d** times (%s), %d restarts in all; %d pods checked"
	}
	n.Summary = l.T(summary, r.Offenders, r.Threshold, Clean(l.Word(firstNonEmpty(r.Mode, "total"))), r.Restarts, r.PodsSeen)
	if r.Offenders == 0 {
		n.Summary = l.T("No pod restarted more than **%d** times; %d pods checked", r.Threshold, r.PodsSeen)
	}
	n.Columns = columns(l, "Namespace", "Pod", "Node", "Restarts", "Last reason")
	for _, row := range r.Rows {
		name := row.Pod
		if name == "" && row.Owner != nil {
			name = l.T("%s/%s (%d pods)", row.Owner.Kind, row.Owner.Name, row.Pods)
		}
		n.Rows = append(n.Rows, []string{Clean(row.Namespace), Clean(name), Clean(firstNonEmpty(row.Node, "-")),
			fmt.Sprintf("%d", row.Restarts), Clean(lastReason(row))})
	}
	n.Omitted = r.Truncated
	return n
}

func lastReason(row events.RestartRow) string {
	for _, c := range row.Containers {
		if c.LastReason != "" {
			return c.LastReason
		}
	}
	return "-"
}

// dry is a verb in the locale, marked when only a dry run decided it.
func dry(l *locale.Locale, verb string, dryRun bool) string {
	if dryRun && verb != "dryrun" {
		return l.T("%s (dry run)", l.Word(verb))
	}
	return l.Word(verb)
}

// columns are column labels in the locale.
func columns(l *locale.Locale, labels ...string) []string {
	out := make([]string, len(labels))
	for i, s := range labels {
		out[i] = l.T(s)
	}
	return out
}

// Clean makes user-supplied text safe inside a one-line markdown cell: no
// line breaks, no markup that could mention people (<at>), break bold text
// or hide a link target, and at most 160 characters. Comparisons stay
// readable: ">=" becomes "≥", "<=" "≤", and a lone "<" or ">" its fullwidth
// form (＜ ＞), which no markdown or tag parser reads as markup. A markdown
// link "[text](url)" from cluster data (a pod status reason, an admission
// message) is shown as "text (url)", so the target is visible and not a link.
func Clean(s string) string {
	// Most values (pod, node and namespace names) hold none of the
	// replaced characters: skipping the replacer and the link search
	// for them halves the rendering of a 10,000-event card.
	if strings.ContainsAny(s, cleanerChars) {
		s = cleaner.Replace(s)
	}
	// Until none is left: "[[a](b)](c)" is a link again after one pass.
	for strings.IndexByte(s, '[') >= 0 && mdLink.MatchString(s) {
		s = mdLink.ReplaceAllString(s, "$1 ($2)")
	}
	// A "](" left over (a target with parentheses) must not start a link either.
	s = strings.ReplaceAll(s, "](", "] (")
	const max = 160
	if utf8.RuneCountInString(s) > max {
		r := []rune(s)
		s = string(r[:max-1]) + "…"
	}
	return s
}

var (
	cleanerPairs = []string{"\r", " ", "\n", " ", "\t", " ", ">=", "≥", "<=", "≤", "<", "＜", ">", "＞",
		"*", "∗", "|", "¦", "`", "'"}
	cleaner = strings.NewReplacer(cleanerPairs...)
	// cleanerChars are the first bytes of cleaner's patterns.
	cleanerChars = func() string {
		var b []byte
		for i := 0; i < len(cleanerPairs); i += 2 {
			b = append(b, cleanerPairs[i][0])
		}
		return string(b)
	}()
	mdLink = regexp.MustCompile(`\[([^\[\]]*)\]\(([^()]*)\)`)
)

// Bytes formats a byte count for people.
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// summaryTop is how many pod reasons and namespaces a summary names before
// "and N more".
const summaryTop = 5

// counter counts values and prints them most frequent first.
type counter struct {
	l *locale.Locale
	m map[string]int
}

func (c *counter) add(k string) {
	if c.m == nil {
		c.m = map[string]int{}
	}
	c.m[k]++
}

func (c counter) sorted() []string {
	keys := make([]string, 0, len(c.m))
	for k := range c.m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if c.m[keys[i]] != c.m[keys[j]] {
			return c.m[keys[i]] > c.m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	return keys
}

func (c counter) top(n int) string {
	keys := c.sorted()
	var parts []string
	for i, k := range keys {
		if i == n {
			parts = append(parts, c.l.T("and %d more", len(keys)-n))
			break
		}
		parts = append(parts, fmt.Sprintf("%s %d", Clean(k), c.m[k]))
	}
	return strings.Join(parts, c.l.T(", "))
}

func (c counter) String() string { return c.top(len(c.m)) }
