package harness

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/opswire/opswire/services/notifier/feishutest"
)

var cardCount = regexp.MustCompile(`\*\*(\d+)\*\* cleanup results`)

// CardResults sums the "**N** cleanup results" counts of accepted Feishu
// cards: a card batches many results, so the number of cards says little.
func CardResults(t testing.TB, cards []*feishutest.Card) int {
	t.Helper()
	total := 0
	for _, c := range cards {
		m := cardCount.FindStringSubmatch(c.Text())
		if m == nil {
			t.Fatalf("card without a count:\n%s", c.Text())
		}
		n, _ := strconv.Atoi(m[1])
		total += n
	}
	return total
}
