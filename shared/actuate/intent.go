package actuate

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/natsx"
	"github.com/opswire/opswire/shared/subject"
)

// VerbIntent is the verb of the write-ahead intents an actor stores before a
// write: ops.<cluster>.<actor>.intent.<object tokens>.
const VerbIntent = "intent"

// DefaultIntentTimeout bounds the synchronous store of one intent. Past it
// the write goes ahead unjournaled: an actor acts during NATS outages.
const DefaultIntentTimeout = time.Second

// DefaultRecoverySpan is how far back a new leader completes intents when the
// rate window is shorter: the stream's duplicate window (nats.duplicates), so
// a leadership gap of up to that long loses no audit.
const DefaultRecoverySpan = 10 * time.Minute

// Journal stores write-ahead intents synchronously, with a short deadline.
// An intent names the write and carries the outcome audit message the write
// will produce; a new leader completes the audits of intents whose outcome
// never reached OPS (Recover), so a SIGKILL between the write and the
// Auditor's store loses no audit and no rate-window slot.
type Journal struct {
	pub     natsx.Publisher
	timeout time.Duration
	m       *Metrics
	log     zerolog.Logger
}

// NewJournal builds a journal on pub; timeout bounds one intent
// (DefaultIntentTimeout when not positive).
func NewJournal(pub natsx.Publisher, timeout time.Duration, m *Metrics, log zerolog.Logger) *Journal {
	if timeout <= 0 {
		timeout = DefaultIntentTimeout
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	return &Journal{pub: pub, timeout: timeout, m: m, log: log}
}

// Intents is what an actuator needs of the Journal (tests pass a recorder).
type Intents interface {
	// Record stores an intent before the write it names and reports whether
	// it was stored. The write goes ahead either way.
	Record(ctx context.Context, subject string, ev envelope.Event) bool
}

var _ Intents = (*Journal)(nil)

// Record publishes the intent with its deterministic id, retrying within the
// journal's timeout. Not stored in time: counted as unjournaled and logged;
// the caller writes anyway.
func (j *Journal) Record(ctx context.Context, subj string, ev envelope.Event) bool {
	rctx, cancel := context.WithTimeout(ctx, j.timeout)
	defer cancel()
	_, err := natsx.PublishEvent(rctx, j.pub, subj, ev, j.timeout)
	if err == nil {
		j.m.Intents.WithLabelValues("journaled").Inc()
		return true
	}
	j.m.Intents.WithLabelValues("unjournaled").Inc()
	j.log.Warn().Err(err).Str("id", ev.ID).Str("subject", subj).Dur("timeout", j.timeout).
		Msg("intent not stored in OPS in time: writing unjournaled (a SIGKILL before its audit is stored would lose that audit)")
	return false
}

// NewIntent builds the intent of a write whose outcome audit is (outSubject,
// outcome). in names the object (Kind, Namespace, Name, UID) and the action;
// its subject is ops.<cluster>.<actor>.intent.[<namespace>.]<name> and its
// id IntentID(outcome's id, in.Time).
func NewIntent(cluster string, in events.Intent, outSubject string, outcome envelope.Event) (string, envelope.Event, error) {
	in.Outcome = events.IntentOutcome{Subject: outSubject, ID: outcome.ID, Source: outcome.Source, Type: outcome.Type,
		Object: outcome.Subject, Time: outcome.Time, Data: json.RawMessage(outcome.Data)}
	if in.Time.IsZero() {
		in.Time = outcome.Time
	}
	tokens := []string{VerbIntent}
	object := in.Name
	if in.Namespace != "" {
		tokens = append(tokens, in.Namespace)
		object = in.Namespace + "/" + in.Name
	}
	tokens = append(tokens, in.Name)
	ev, err := envelope.New(IntentID(outcome.ID, in.Time), outcome.Source, events.TypeIntent, object, in, in.Time)
	if err != nil {
		return "", envelope.Event{}, err
	}
	return subject.Ops(cluster, in.Actor, tokens...), ev, nil
}

// NewAnswer builds the answer record of the intent iev (as NewIntent built
// it, stored on isubj): the same intent with Answered set to why, on the same
// subject, id iev.ID + "/answered". An actor stores it once every write of
// the attempt was answered and none can still commit (a refusal, a conflict,
// a 429: processed or turned away, never applied later). A new leader's
// recovery then knows that an unchanged object means "did not happen" at
// once, instead of waiting out the late-commit horizon for an attempt whose
// answer may have been lost (SeedAndRecover). Without it (not stored: NATS
// away, the actor killed first) the recovery waits, as it must.
func NewAnswer(isubj string, iev envelope.Event, why string) (string, envelope.Event, error) {
	var in events.Intent
	if err := json.Unmarshal(iev.Data, &in); err != nil {
		return "", envelope.Event{}, fmt.Errorf("decode intent %s: %w", iev.ID, err)
	}
	if why == "" {
		why = "answered"
	}
	in.Answered = why
	ev, err := envelope.New(iev.ID+"/answered", iev.Source, events.TypeIntent, iev.Subject, in, in.Time)
	if err != nil {
		return "", envelope.Event{}, err
	}
	return isubj, ev, nil
}

// Answers is implemented by a Journal: an actor whose Intents is one stores
// the answer record of an intent whose attempt ended without a write that
// can still commit (NewAnswer). Test recorders may leave it out.
type Answers interface {
	// Answer stores the answer record of the intent (isubj, iev), once,
	// within the journal's timeout; false: not stored (the next leader
	// then waits out the late-commit horizon, as without it).
	Answer(ctx context.Context, isubj string, iev envelope.Event, why string) bool
}

var _ Answers = (*Journal)(nil)

// Answer stores the answer record of the intent (isubj, iev) (Answers).
func (j *Journal) Answer(ctx context.Context, isubj string, iev envelope.Event, why string) bool {
	subj, ev, err := NewAnswer(isubj, iev, why)
	if err != nil {
		j.log.Error().Err(err).Str("id", iev.ID).Msg("intent answer cannot be encoded")
		return false
	}
	rctx, cancel := context.WithTimeout(ctx, j.timeout)
	defer cancel()
	if _, err := natsx.PublishEvent(rctx, j.pub, subj, ev, j.timeout); err != nil {
		j.m.Intents.WithLabelValues("answer_unstored").Inc()
		j.log.Warn().Err(err).Str("id", ev.ID).Str("subject", subj).
			Msg("intent answer not stored in OPS in time: a new leader waits out the late-commit horizon for it")
		return false
	}
	j.m.Intents.WithLabelValues("answered").Inc()
	return true
}

// IntentID is the id of the intent of one attempt at the write whose outcome
// id is outcomeID, made at at: the outcome's id + "/intent/" + at in Unix
// nanoseconds. Each attempt has its own (a retry after a refused write, by
// this leader or the next), so the stream stores each attempt's intent and a
// new leader counts the action at the latest one (SeedAndRecover); with one
// id per outcome the stream dropped a retry's intent as a duplicate, and the
// action was counted at its first attempt, a retry delay (up to minutes)
// before the write. Publish retries of one attempt keep its id.
func IntentID(outcomeID string, at time.Time) string {
	return outcomeID + "/" + VerbIntent + "/" + strconv.FormatInt(at.UnixNano(), 10)
}
