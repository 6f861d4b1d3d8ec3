//go:build bench

package bench

import (
	"testing"
	"time"
)

func TestQuantile(t *testing.T) {
	var l latencies
	for i := 1; i <= 200; i++ {
		l = append(l, time.Duration(i)*time.Millisecond)
	}
	tests := []struct {
		q    float64
		want float64
	}{{0.5, 100}, {0.99, 198}, {1, 200}, {0, 1}}
	for _, tt := range tests {
		if got := l.quantile(tt.q); got != tt.want {
			t.Errorf("quantile(%v) = %v, want %v", tt.q, got, tt.want)
		}
	}
	if got := (latencies{}).quantile(0.5); got != -1 {
		t.Errorf("empty quantile = %v, want -1", got)
	}
}
