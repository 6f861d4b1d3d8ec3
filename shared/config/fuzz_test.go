package config

import (
	"os"
	"testing"
)

// FuzzParse: configuration comes from users (a ConfigMap, --check-config in
// their CI). Any document must give either a configuration that validates or
// field errors; never a panic, never an accepted config that Validate rejects.
func FuzzParse(f *testing.F) {
	if seed, err := os.ReadFile("testdata/seed.yml"); err == nil {
		f.Add(seed)
	}
	for _, s := range []string{
		"", "autoCordon:\n  maxPods: 5\n  minPods: 2\n", "autoCordon: 3", "- a\n- b", "sendReport:\n  schedule: '* * *'\n",
		"notifier:\n  receivers:\n  - name: a\n    url: http://x\n  routes:\n  - receivers: [a]\n",
		"controller:\n  leaseDuration: -1s\n", "delException:\n  interval: 1e400\n", "{",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			if _, ok := err.(Errors); !ok {
				t.Fatalf("Parse error is %T, want field Errors: %v", err, err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted a config that Validate rejects: %v", err)
		}
	})
}
