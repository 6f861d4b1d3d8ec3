package app

import (
	"strings"
	"testing"

	"github.com/opswire/opswire/shared/config"
)

// TestConfigNotesNameTheSeedsTraps: --check-config says, for the seed's
// config, that its weekly schedule is read in UTC without a zone, that the
// image alerts it never had are on and go to its report bot, and which
// Feishu receivers and routes its apiurl keys imply; a file that sets the
// zone and the section gets none of that.
func TestConfigNotesNameTheSeedsTraps(t *testing.T) {
	seed, err := config.Load("../config/testdata/seed.yml")
	if err != nil {
		t.Fatal(err)
	}
	seedRaw := topLevel("../config/testdata/seed.yml")
	tuned := *seed
	tuned.SendReport.Timezone = "Asia/Shanghai"
	tunedRaw := map[string]any{"sendReport": nil, "imageAlert": nil}
	for _, tc := range []struct {
		name        string
		service     string
		cfg         *config.Config
		raw         map[string]any
		tz          string
		warn, notes []string // substrings, in order
	}{
		{name: "report, seed config, no TZ", service: "report", cfg: seed, raw: seedRaw,
			warn: []string{`sendReport.schedule "00 00 10 * * 1" is read in UTC`}, notes: []string{"imageAlert is on by default and the file has no imageAlert section: node image-storage alerts go to the sendReport.apiurl bot"}},
		{name: "report, seed config, TZ set", service: "report", cfg: seed, raw: seedRaw, tz: "Asia/Shanghai",
			notes: []string{"imageAlert is on by default"}},
		{name: "notifier, seed config", service: "notifier", cfg: seed, raw: seedRaw,
			notes: []string{"imageAlert is on by default", `receiver "sendReport" (feishu, from sendReport.apiurl)`,
				`receiver "delException" (feishu, from delException.apiurl)`, `route "sendReport": ops.*.report.restarts -> sendReport`,
				`route "sendReport-images": ops.*.report.images.> -> sendReport`, `route "delException": ops.*.cleanup.> -> delException`}},
		{name: "report, zone and section set", service: "report", cfg: &tuned, raw: tunedRaw},
	} {
		t.Run(tc.name, func(t *testing.T) {
			warnings, notes := configNotes(Spec{Service: tc.service}, tc.cfg, tc.raw, tc.tz)
			check := func(kind string, got, want []string) {
				t.Helper()
				if len(got) != len(want) {
					t.Fatalf("%s = %q, want %d matching %q", kind, got, len(want), want)
				}
				for i := range want {
					if !strings.Contains(got[i], want[i]) {
						t.Errorf("%s[%d] = %q, want it to contain %q", kind, i, got[i], want[i])
					}
				}
			}
			check("warnings", warnings, tc.warn)
			check("notes", notes, tc.notes)
		})
	}
}
