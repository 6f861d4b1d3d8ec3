package actuate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
)

// Recovery is what a new leader reads back at leadership start.
type Recovery struct {
	// Intents is the actor's intent filter, ops.<cluster>.<actor>.intent.>.
	Intents string
	// Outcomes are the actor's action subjects (the rate window's filters).
	Outcomes []string
	// Span is how far back intents are completed (DefaultRecoverySpan when
	// 0); at least the window's Per and the late-commit horizon (ReadSpan).
	Span time.Duration
	// Happened reports, from live state, whether the write an intent names
	// took place (e.g. the pod is gone or was replaced: true; the same pod
	// is still there: false). An error retries the whole recovery.
	Happened func(ctx context.Context, in events.Intent) (bool, error)
	// Audit publishes the outcomes of the writes that happened.
	Audit Audit
	// Live, when set, lists the actor's actions done since the given time
	// as the Kubernetes API shows them (e.g. the marks a cordon wrote, with
	// their time): a record that does not depend on NATS. A leader that acted
	// during a NATS outage stored neither intents nor outcomes, and its
	// outcomes died with it in the Auditor's backlog; only the API still
	// knows. Each one whose outcome id is neither in OPS nor carried by an
	// intent counts in the window and has its rebuilt outcome published. An
	// error retries the whole recovery (fail closed: no action before).
	Live func(ctx context.Context, since time.Time) ([]LiveAction, error)
	// LateCommit is how long after its intent a write whose answer was lost
	// (or whose leader died while it was under way) can still commit: the
	// actor's late-commit horizon. With it, an intent whose write happened
	// but whose outcome is missing counts in the window from the read that
	// showed it happened, at most LateCommit after the intent was stored, as
	// the old leader counts a write in doubt from the read that decides it:
	// a late commit counted from its intent freed its slot up to LateCommit
	// early, and the new leader's next write went out less than Per after
	// the commit. 0: from the intent.
	LateCommit time.Duration
}

// LiveAction is one action of an actor found in the Kubernetes API at
// leadership start (Recovery.Live).
type LiveAction struct {
	// Time is when the action was done (the actor's clock at the write,
	// e.g. the mark's time); it counts in the window when after its start.
	Time time.Time
	// Subject and Outcome are the outcome audit rebuilt from the API. Its
	// ID must be the one the original outcome has (derived from what the
	// write left, e.g. node uid + verb + the resourceVersion the write was
	// decided on), so an original stored after all is dropped by the stream
	// as a duplicate, and one already in OPS is recognised.
	Subject string
	Outcome envelope.Event
	// Pending marks an action the API shows only as intended: a write-ahead
	// record the actor stored there (e.g. cleanup's CleanupIntent Event,
	// written when OPS could not store the intent) while the live object
	// does not show that the write happened. Like an intent in OPS, it
	// counts in the window at its time, and nothing is published for it.
	Pending bool
	// Check, when set, is verified like an OPS intent (Recovery.Happened)
	// before an action OPS does not know is published: a write the API
	// record claims but the live object does not show (a forged or stale
	// record) makes it Pending. The actor sets it when its record is not
	// authenticated (cleanup's outcome Events).
	Check *events.Intent
}

// SeedAndRecover is SeedFromOPS for an actor that journals its writes. Before
// the first action of a term it reads the intents and outcomes of the last
// Span from OPS, publishes (through Audit, with the outcome's own id, so a
// copy the old leader stored after all is dropped as a duplicate) the
// outcome of each intent whose write happened but whose outcome is missing,
// and seeds w with every action of the last w.Per counted once, by outcome
// id, at the latest of its records (knownActions): each intent (one per
// attempt, IntentID) and each outcome, with or without an intent (an
// unjournaled write, during a NATS outage), plus, with r.Live, each action the
// Kubernetes API shows that OPS knows nothing of (a write during a NATS
// outage by a leader that died with its audits queued: its outcome is
// rebuilt from the API and published with the original's id; a Pending one
// only counts). Nothing is
// published until every open intent was verified and the API was read, so a
// retry never publishes an outcome twice.
func SeedAndRecover(ctx context.Context, js jetstream.JetStream, w *Window, r Recovery, m *Metrics, log zerolog.Logger, now func() time.Time) error {
	if now == nil {
		now = time.Now
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	if r.Happened == nil || r.Audit == nil {
		return ErrIncompleteRecovery
	}
	backoff := 200 * time.Millisecond
	m.Recovering.Set(1)
	defer m.Recovering.Set(0)
	for attempt := 1; ; attempt++ {
		rctx, cancel := context.WithTimeout(ctx, recoveryAttemptTimeout)
		err := recoverOnce(rctx, js, w, r, m, log, now)
		cancel()
		if err == nil {
			return nil
		}
		m.RecoveryFailures.Inc()
		if apierrors.IsForbidden(err) {
			// Retrying does not help until the RBAC is fixed (e.g. a
			// ClusterRole not upgraded with the list the recovery needs).
			log.Error().Err(err).Int("attempt", attempt).
				Msg("recovery refused by the API (403): grant the permission (see the deploy RBAC); this leader does not act until it can read it")
		} else {
			log.Warn().Err(err).Int("attempt", attempt).Msg("cannot read intents and the rate window; not acting until they are known")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// recoveryAttemptTimeout bounds one recovery attempt (OPS reads, the
// actor's LIST of the API, the re-reads).
const recoveryAttemptTimeout = 2 * time.Minute

// liveSkew is how far in the future (the recovering leader's clock) a live
// action's time may be; a later one is refused.
const liveSkew = time.Minute

type openIntent struct {
	at time.Time
	in events.Intent
}

// StoredIntent is an intent or answer record as OPS stores it: its store
// time and the intent.
type StoredIntent struct {
	At     time.Time
	Intent events.Intent
}

// LatestAttempts folds the intents and answer records of OPS, in stream
// order, into the latest attempt of each outcome id, in the order the ids
// first appear. An attempt is answered (Answered set, from its own answer
// record: the same intent time) only when every attempt of its id is: a
// retry answered, say, 404 (the pod already gone) after an earlier attempt
// whose write may have committed (its answer lost, a DELETE's 409 after its
// deletion mark, a finalizer patch that went through) says nothing of that
// earlier write, and the pod's absence may be it. An answer record whose
// attempt is not there (older than the span, never stored) is no intent.
func LatestAttempts(stored []StoredIntent) []StoredIntent {
	type attempts struct {
		latest   StoredIntent
		times    []time.Time
		answered map[int64]string // by intent time (UnixNano)
	}
	byID := map[string]*attempts{}
	var order []string
	for _, s := range stored {
		id := s.Intent.Outcome.ID
		if s.Intent.Answered != "" {
			if a := byID[id]; a != nil {
				a.answered[s.Intent.Time.UnixNano()] = s.Intent.Answered
			}
			continue
		}
		a := byID[id]
		if a == nil {
			a = &attempts{answered: map[int64]string{}}
			byID[id] = a
			order = append(order, id)
		}
		a.latest = s
		a.times = append(a.times, s.Intent.Time)
	}
	out := make([]StoredIntent, 0, len(order))
	for _, id := range order {
		a := byID[id]
		latest := a.latest
		latest.Intent.Answered = a.answered[latest.Intent.Time.UnixNano()]
		for _, t := range a.times {
			if a.answered[t.UnixNano()] == "" {
				latest.Intent.Answered = "" // an attempt of it may have committed
				break
			}
		}
		out = append(out, latest)
	}
	return out
}

// ReadSpan is how far back the recovery reads OPS (and the actor's live
// actions) for a window of per: Span (DefaultRecoverySpan when 0), and at
// least per, so every action that counts in the window is seen, and at least
// LateCommit past the clock skew allowed, so an intent whose write may still
// commit is never older than what the recovery reads (kube.serverRequestTimeout
// can make the horizon longer than DefaultRecoverySpan).
func (r Recovery) ReadSpan(per time.Duration) time.Duration {
	span := r.Span
	if span == 0 {
		span = DefaultRecoverySpan
	}
	return max(span, per, r.LateCommit+liveSkew)
}

// recovery is one attempt of SeedAndRecover: what it has read so far.
type recovery struct {
	r    Recovery
	js   jetstream.JetStream
	m    *Metrics
	log  zerolog.Logger
	now  func() time.Time
	span time.Duration
	// start is when the attempt began; since is how far back it reads, and
	// windowStart where the rate window begins.
	start, since, windowStart time.Time

	intents  map[string]openIntent // by outcome id, the latest attempt's
	order    []string              // outcome ids in stream (store) order
	outcomes map[string]time.Time  // by outcome id, the latest store time
	// complete are the open intents whose write happened; happenedAt says
	// when a read showed each.
	complete   []events.Intent
	happenedAt map[string]time.Time
	// known is, by outcome id, the latest time the API shows of an action
	// OPS knows; rebuilt are the actions the API shows that OPS does not.
	known   map[string]time.Time
	rebuilt []LiveAction
	done    int // intents with their outcome in OPS
	pending int // intents (and live actions) counted but not published
}

func recoverOnce(ctx context.Context, js jetstream.JetStream, w *Window, r Recovery, m *Metrics, log zerolog.Logger, now func() time.Time) error {
	start := now()
	span := r.ReadSpan(w.Per)
	rc := &recovery{r: r, js: js, m: m, log: log, now: now, span: span,
		start: start, since: start.Add(-span), windowStart: start.Add(-w.Per),
		outcomes: map[string]time.Time{}, happenedAt: map[string]time.Time{}, known: map[string]time.Time{}}
	if err := rc.readIntents(ctx); err != nil {
		return err
	}
	if err := rc.readOutcomes(ctx); err != nil {
		return err
	}
	var live []LiveAction
	if r.Live != nil {
		var err error
		if live, err = r.Live(ctx, rc.since); err != nil {
			return fmt.Errorf("read the actor's actions from the API: %w", err)
		}
	}
	// Verify every open intent and live action first; publish only once
	// all are known, so a retried attempt never publishes twice.
	if err := rc.verifyIntents(ctx); err != nil {
		return err
	}
	if err := rc.verifyLive(ctx, live); err != nil {
		return err
	}
	rc.publish()
	rc.seed(w)
	return nil
}

// readIntents reads the actor's intents and answer records of the span and
// keeps the latest attempt of each outcome id.
func (rc *recovery) readIntents(ctx context.Context) error {
	msgs, err := readOPS(ctx, rc.js, rc.r.Intents, rc.since)
	if err != nil {
		return fmt.Errorf("read intents on %s: %w", rc.r.Intents, err)
	}
	var stored []StoredIntent
	for _, msg := range msgs {
		var in events.Intent
		if _, err := envelope.Decode(msg.Header, msg.Data, events.TypeIntent, &in); err != nil || in.Outcome.ID == "" {
			rc.log.Warn().Err(err).Str("subject", msg.Subject).Msg("malformed intent in OPS: ignored")
			continue
		}
		stored = append(stored, StoredIntent{At: msg.Time, Intent: in})
	}
	rc.intents = map[string]openIntent{}
	for _, s := range LatestAttempts(stored) {
		rc.order = append(rc.order, s.Intent.Outcome.ID)
		rc.intents[s.Intent.Outcome.ID] = openIntent{at: s.At, in: s.Intent}
	}
	return nil
}

// readOutcomes reads the actor's outcomes of the span: the latest store
// time of each id.
func (rc *recovery) readOutcomes(ctx context.Context) error {
	for _, f := range rc.r.Outcomes {
		msgs, err := readOPS(ctx, rc.js, f, rc.since)
		if err != nil {
			return fmt.Errorf("read outcomes on %s: %w", f, err)
		}
		for _, msg := range msgs {
			// ce-id: the Nats-Msg-Id differs from it when natsx.PublishEvent
			// republished the outcome under a fallback id.
			id := msg.Header.Get(envelope.HeaderID)
			if id == "" {
				id = msg.Header.Get(envelope.HeaderMsgID)
			}
			if msg.Time.After(rc.outcomes[id]) {
				rc.outcomes[id] = msg.Time
			}
		}
	}
	return nil
}

// verifyIntents asks the live object about every intent without its
// outcome.
func (rc *recovery) verifyIntents(ctx context.Context) error {
	for _, id := range rc.order {
		oi := rc.intents[id]
		if _, ok := rc.outcomes[id]; ok {
			rc.done++
			continue
		}
		happened, err := rc.r.Happened(ctx, oi.in)
		if errors.Is(err, ErrUnverifiable) {
			// Only the actor can store its intents, but one that names an
			// object the API cannot be asked about must not hold the
			// recovery back for ever: it counts (its write may have
			// happened) and is not published.
			rc.log.Warn().Err(err).Str("id", id).Msg("intent cannot be checked against the live object: counted as pending, not published")
			rc.pending++
			continue
		}
		if err != nil {
			return fmt.Errorf("verify intent %s: %w", id, err)
		}
		if happened {
			rc.complete = append(rc.complete, oi.in)
			rc.happenedAt[id] = rc.now()
		} else {
			rc.pending++
		}
	}
	if rc.r.LateCommit > 0 {
		// A completed intent's write may have committed late, up to the
		// read that showed it (and at most LateCommit after its intent):
		// it counts from then, not from its intent.
		for id, at := range rc.happenedAt {
			rc.known[id] = minTime(at, rc.intents[id].at.Add(rc.r.LateCommit))
		}
	}
	return nil
}

// verifyLive sorts the actions the API shows: those OPS knows move their
// time in known; those it knows nothing of (done during a NATS outage by a
// leader that died with their audits queued) are rebuilt with the
// original's id, Pending when the live object does not show them.
func (rc *recovery) verifyLive(ctx context.Context, live []LiveAction) error {
	seen := map[string]bool{}
	intentPrefix := strings.TrimSuffix(rc.r.Intents, ">")
	for _, la := range live {
		id := la.Outcome.ID
		if id == "" || seen[id] {
			continue
		}
		// A live action is rebuilt from the API, not from OPS: it never
		// stands for an intent, and a time in the future would hold the
		// window for the whole term.
		if intentPrefix != "" && strings.HasPrefix(la.Subject, intentPrefix) || la.Time.After(rc.start.Add(liveSkew)) {
			rc.log.Warn().Str("id", id).Str("subject", la.Subject).Time("at", la.Time).
				Msg("action shown by the API on the intent subject or in the future: refused")
			continue
		}
		seen[id] = true
		_, done := rc.outcomes[id]
		if _, journaled := rc.intents[id]; done || journaled {
			if la.Time.After(rc.known[id]) {
				rc.known[id] = la.Time
			}
			continue
		}
		if !la.Pending && la.Check != nil {
			happened, err := rc.r.Happened(ctx, *la.Check)
			if errors.Is(err, ErrUnverifiable) {
				// Permanent for this one record (a name the API cannot
				// be asked about): refused, so one forged record cannot
				// hold the recovery back for ever.
				rc.log.Warn().Err(err).Str("id", id).Str("subject", la.Subject).
					Msg("action shown by the API cannot be checked against the live object: refused")
				continue
			}
			if err != nil {
				return fmt.Errorf("verify action %s shown by the API: %w", id, err)
			}
			if !happened {
				rc.log.Warn().Str("id", id).Str("subject", la.Subject).
					Msg("action shown by the API but not by the live object (forged or stale record): counted as pending, not published")
				la.Pending = true
			}
		}
		rc.rebuilt = append(rc.rebuilt, la)
	}
	return nil
}

// publish audits the completed intents' outcomes and the rebuilt actions
// that are not Pending, with their own ids.
func (rc *recovery) publish() {
	for _, in := range rc.complete {
		o := in.Outcome
		rc.r.Audit.Publish(o.Subject, envelope.Event{ID: o.ID, Source: o.Source, Type: o.Type, Time: o.Time, Subject: o.Object, Data: o.Data})
		rc.log.Info().Str("id", o.ID).Str("subject", o.Subject).Str("uid", in.UID).
			Msg("intent without its outcome in OPS and the write happened (object gone or replaced): outcome audit published")
	}
	livePending := 0
	for _, la := range rc.rebuilt {
		if la.Pending {
			livePending++
			continue
		}
		rc.r.Audit.Publish(la.Subject, la.Outcome)
		rc.log.Info().Str("id", la.Outcome.ID).Str("subject", la.Subject).Time("at", la.Time).
			Msg("action shown by the API has neither intent nor outcome in OPS (done during a NATS outage): outcome audit rebuilt and published")
	}
	rc.m.Intents.WithLabelValues("rebuilt").Add(float64(len(rc.rebuilt) - livePending))
	rc.pending += livePending
	rc.m.Intents.WithLabelValues("completed").Add(float64(len(rc.complete)))
	rc.m.Intents.WithLabelValues("done").Add(float64(rc.done))
	rc.m.Intents.WithLabelValues("pending").Add(float64(rc.pending))
}

// seed fills w with every action of the window, each once.
func (rc *recovery) seed(w *Window) {
	times, unjournaled := knownActions(rc.intents, rc.outcomes, rc.known, rc.windowStart)
	fromAPI := 0
	for _, la := range rc.rebuilt {
		if la.Time.After(rc.windowStart) {
			times = append(times, la.Time)
			fromAPI++
		}
	}
	w.Seed(times)
	rc.m.WindowSeeded.Set(float64(len(times)))
	rc.log.Info().Int("actions", len(times)).Int("unjournaled", unjournaled).Int("fromAPI", fromAPI).Int("max", w.Max).Dur("window", w.Per).
		Int("intentsCompleted", len(rc.complete)).Int("intentsDone", rc.done).Int("intentsPending", rc.pending).Dur("span", rc.span).
		Msg("rate window seeded from OPS intents and outcomes; missing outcome audits completed")
}

// knownActions are the times of the window's actions OPS knows of, each
// once (by outcome id) at the latest of its records: its latest attempt's
// intent, its outcome (stored after the write's answer) and the API's
// record of it (known: a CleanupIntent or outcome Event of a later attempt,
// made while OPS was away; with Recovery.LateCommit, the read that showed a
// completed intent's write happened). The latest, because the slot the old leader's
// window held was its last attempt's, counted from the write: a retried
// removal seeded at its first intent freed a retry delay early. unjournaled
// counts the outcomes without an intent (writes while OPS was away).
func knownActions(intents map[string]openIntent, outcomes, known map[string]time.Time, windowStart time.Time) ([]time.Time, int) {
	latest := map[string]time.Time{}
	for id, oi := range intents {
		latest[id] = oi.at
	}
	unjournaled := 0
	for id, at := range outcomes {
		if _, ok := intents[id]; !ok && at.After(windowStart) {
			unjournaled++
		}
		if at.After(latest[id]) {
			latest[id] = at
		}
	}
	for id, at := range known {
		if at.After(latest[id]) {
			latest[id] = at
		}
	}
	var times []time.Time
	for _, at := range latest {
		if at.After(windowStart) {
			times = append(times, at)
		}
	}
	return times, unjournaled
}

// ErrUnverifiable wraps a Recovery.Happened error that is permanent for
// that one record (the object's name or namespace is not one the API could
// hold, or the API refused the read as a bad request): SeedAndRecover
// refuses a live action (LiveAction.Check) whose check fails so instead of
// retrying the whole recovery. Any other error (a timeout, a 5xx, a 403) is
// transient and fails the recovery attempt, which is retried.
var ErrUnverifiable = errors.New("actuate: the live object cannot be read for this record")

// Unverifiable reports whether an API error is permanent for the one
// request that got it (bad request, invalid), not for the API.
func Unverifiable(err error) bool {
	return apierrors.IsBadRequest(err) || apierrors.IsInvalid(err)
}

// ErrIncompleteRecovery: a Recovery needs Happened and Audit.
var ErrIncompleteRecovery = errors.New("actuate: Recovery.Happened and Recovery.Audit are required")

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
