package harness

import corev1 "k8s.io/api/core/v1"

// Recorded is how often a recorder recorded Event e. client-go's recorder
// folds a repeat into the same Event and raises its count (series.count in
// the events.k8s.io form), so counting Event objects would hide a repeat.
func Recorded(e corev1.Event) int {
	n := max(int(e.Count), 1)
	if e.Series != nil {
		n = max(n, int(e.Series.Count))
	}
	return n
}
