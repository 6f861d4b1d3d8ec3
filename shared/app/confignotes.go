package app

import (
	"fmt"
	"os"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/opswire/opswire/shared/config"
)

// configNotes are what --check-config says about a valid file besides its
// effective configuration: the traps a person would not see there. The
// seed's config keys imply Feishu receivers and routes that the notifier
// section leaves empty; a schedule is read in UTC when neither its zone nor
// TZ is set (a scratch image has no local zone); and sections the file does
// not have are on by default. warnings go to stderr, notes are printed as
// YAML comments before the configuration.
func configNotes(spec Spec, cfg *config.Config, raw map[string]any, tz string) (warnings, notes []string) {
	if s := cfg.SendReport; s.Enable && s.Timezone == "" && tz == "" && (spec.Service == "report" || spec.Service == "") {
		warnings = append(warnings, fmt.Sprintf("sendReport.schedule %q is read in UTC: neither sendReport.timezone nor TZ is set "+
			"(a scratch image has no local zone, so \"10:00\" is 18:00 in Asia/Shanghai); set sendReport.timezone, e.g. Asia/Shanghai", s.Schedule))
	}
	if _, ok := raw["imageAlert"]; !ok && cfg.ImageAlert.Enable {
		to := "the notifier's routes for ops.*.report.images.>"
		if cfg.SendReport.APIURL.IsSet() {
			to = "the sendReport.apiurl bot (the restart report's)"
		}
		notes = append(notes, "imageAlert is on by default and the file has no imageAlert section: node image-storage alerts go to "+
			to+"; set imageAlert.enable: false to turn them off")
	}
	if spec.Service == "notifier" {
		notes = append(notes, impliedReceivers(cfg)...)
	}
	return warnings, notes
}

// impliedReceivers names the receivers and routes the seed's apiurl keys
// make, which the notifier section of the effective configuration does not
// show.
func impliedReceivers(cfg *config.Config) []string {
	var out []string
	for _, r := range cfg.NotifierReceivers() {
		if r.Name != config.ImplicitReportReceiver && r.Name != config.ImplicitCleanupReceiver {
			continue
		}
		from := "sendReport.apiurl"
		if r.Name == config.ImplicitCleanupReceiver {
			from = "delException.apiurl"
		}
		out = append(out, fmt.Sprintf("receiver %q (%s, from %s)", r.Name, r.Type, from))
	}
	for _, rt := range cfg.NotifierRoutes() {
		if rt.Name == config.ImplicitReportReceiver || rt.Name == config.ImplicitReportReceiver+"-images" || rt.Name == config.ImplicitCleanupReceiver {
			out = append(out, fmt.Sprintf("route %q: %s -> %s, title %q", rt.Name, strings.Join(rt.Subjects, ", "), strings.Join(rt.Receivers, ", "), rt.Title))
		}
	}
	return out
}

// topLevel reads the file's top-level keys (nil when it cannot: the file
// was loaded already, so this only fails on a race with its writer).
func topLevel(path string) map[string]any {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var raw map[string]any
	if yaml.Unmarshal(data, &raw) != nil {
		return nil
	}
	return raw
}
