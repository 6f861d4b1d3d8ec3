package kube

import "strings"

// DeleteConflictBeforeStore reports a DELETE's 409 Conflict (err) that the
// API server gave before storing anything, so that nothing of the DELETE
// can have taken effect.
//
// The API server carries out a DELETE of a pod in up to two storage steps:
// an update that marks it (deletionTimestamp, grace period), then, for grace
// 0 without finalizers, its removal at the mark's resourceVersion. A 409
// from the second step leaves the first committed: the pod goes anyway. The
// checks before it answer in texts of their own: the early precondition
// check (rest.BeforeDelete: "the UID in the precondition (…)", "the
// ResourceVersion in the precondition (…)") and the first step's
// (storage.Preconditions.Check) naming the UID, or the resourceVersion the
// DELETE was sent with (sentRV); the second step's names the mark's
// resourceVersion, which the API server moved the precondition to. These
// texts are k8s.io/apiserver's (the same for years; the e2e test
// TestDeleteConflictTexts checks them against the real API server). A 409
// they do not match is reported false: it may follow the mark (the safe
// side for the caller).
func DeleteConflictBeforeStore(err error, sentRV string) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "the UID in the precondition (") ||
		strings.Contains(msg, "the ResourceVersion in the precondition (") ||
		strings.Contains(msg, "Precondition failed: UID in precondition:") ||
		sentRV != "" && strings.Contains(msg, "Precondition failed: ResourceVersion in precondition: "+sentRV+",")
}
