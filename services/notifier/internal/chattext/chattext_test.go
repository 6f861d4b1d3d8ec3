package chattext

import (
	"strings"
	"testing"
)

func TestDefuse(t *testing.T) {
	for _, in := range []string{"@all", "<!channel>", "<at>x</at>", "<@U123>", "see https://evil.example/x", "www.evil.example", "WWW.evil.example", "[a](b)", "@here"} {
		out := strings.ToLower(Defuse(in))
		for _, bad := range []string{"@", "<", ">", "://", "www.", "]("} {
			if strings.Contains(out, bad) {
				t.Errorf("Defuse(%q) = %q still contains %q", in, out, bad)
			}
		}
	}
}

func TestFit(t *testing.T) {
	size := func(rows int) int { return 100 + 10*rows }
	for _, tc := range []struct {
		want, limit, rows int
		ok                bool
	}{
		{5, 1000, 5, true}, {50, 300, 20, true}, {50, 305, 20, true}, {50, 99, -1, false}, {50, 100, 0, true},
	} {
		rows, ok := Fit(tc.want, tc.limit, size)
		if rows != tc.rows || ok != tc.ok {
			t.Errorf("Fit(%d, %d) = %d, %v; want %d, %v", tc.want, tc.limit, rows, ok, tc.rows, tc.ok)
		}
	}
}
