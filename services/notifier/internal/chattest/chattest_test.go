package chattest

import (
	"testing"
	"time"
)

func TestSlide(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var a []time.Time
	for i := 0; i < 3; i++ {
		a = Slide(a, t0.Add(time.Duration(i)*time.Second), time.Minute)
	}
	if len(a) != 3 {
		t.Fatalf("within the window: %d arrivals, want 3", len(a))
	}
	// Exactly one period after the first arrival, the first drops out.
	a = Slide(a, t0.Add(time.Minute), time.Minute)
	if len(a) != 3 || !a[0].Equal(t0.Add(time.Second)) {
		t.Fatalf("after a minute: %v", a)
	}
}

func TestWithin(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, c := range []struct {
		d    time.Duration
		want bool
	}{{0, true}, {time.Hour, true}, {-time.Hour, true}, {time.Hour + 1, false}, {-time.Hour - 1, false}} {
		if got := Within(now, now.Add(c.d), time.Hour); got != c.want {
			t.Errorf("Within(now, now%+v, 1h) = %v, want %v", c.d, got, c.want)
		}
	}
}

func TestTable(t *testing.T) {
	rows, more := Table("**a · b**\n- x\n- y\nnot - a row\n…and 7 more", "- ")
	if rows != 2 || more != 7 {
		t.Fatalf("Table = %d, %d; want 2, 7", rows, more)
	}
	if rows, more := Table("- only", "- "); rows != 1 || more != 0 {
		t.Fatalf("Table = %d, %d; want 1, 0", rows, more)
	}
}

func TestBook(t *testing.T) {
	var b Book[int, string]
	b.Record(200, "h", "m1", true)
	b.Record(429, "h", "", false)
	b.Record(200, "g", "m2", true)
	if got := b.Messages("h"); len(got) != 1 || got[0] != "m1" {
		t.Fatalf("Messages(h) = %v", got)
	}
	if got := b.Messages("none"); got != nil {
		t.Fatalf("Messages(none) = %v, want nil", got)
	}
	if n := b.Count(func(s int) bool { return s == 200 }); n != 2 {
		t.Fatalf("Count(200) = %d", n)
	}
	r := b.Requests()
	r[0] = 0
	if b.Requests()[0] != 200 {
		t.Fatal("Requests is not a copy")
	}
}

// TestTableReadsChineseMoreLine: the zh-CN "…另有 N 行" counts as "…and N more".
func TestTableReadsChineseMoreLine(t *testing.T) {
	if rows, more := Table("**a · b**\n- x\n…另有 12 行", "- "); rows != 1 || more != 12 {
		t.Errorf("Table = %d, %d; want 1, 12", rows, more)
	}
}
