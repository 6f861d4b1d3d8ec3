package logging

import (
	"bytes"
	"strings"
	"testing"
)

func TestLevelsAndFormats(t *testing.T) {
	var buf bytes.Buffer
	log, err := New(&buf, "warn", "json", "watcher")
	if err != nil {
		t.Fatal(err)
	}
	log.Info().Msg("hidden")
	log.Warn().Msg("shown")
	out := buf.String()
	if strings.Contains(out, "hidden") || !strings.Contains(out, `"service":"watcher"`) || !strings.Contains(out, "shown") {
		t.Fatalf("unexpected output %q", out)
	}
	for _, bad := range [][2]string{{"loud", "json"}, {"info", "xml"}, {"", "json"}} {
		if _, err := New(&buf, bad[0], bad[1], "x"); err == nil {
			t.Errorf("New(%q,%q) succeeded, want error", bad[0], bad[1])
		}
	}
}
