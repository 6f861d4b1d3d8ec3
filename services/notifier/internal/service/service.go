// Package service wires the notifier together: it resolves receiver
// credentials, creates the dead-letter stream, the delivered-id bucket and
// the lease bucket, and runs the active replica's delivery until shutdown.
//
// One replica is active at a time (internal/lease): only it consumes,
// groups, rate-limits and sends, so Feishu's per-bot limits hold and a burst
// becomes the same cards with any number of replicas. The active replica
// runs one durable consumer and one dispatcher per receiver, so a receiver
// that is down holds only its own consumer's messages (its MaxAckPending),
// never another receiver's.
package service

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/opswire/opswire/services/notifier/internal/dingtalk"
	"github.com/opswire/opswire/services/notifier/internal/dispatch"
	"github.com/opswire/opswire/services/notifier/internal/feishu"
	"github.com/opswire/opswire/services/notifier/internal/lease"
	"github.com/opswire/opswire/services/notifier/internal/locale"
	"github.com/opswire/opswire/services/notifier/internal/notify"
	"github.com/opswire/opswire/services/notifier/internal/ratelimit"
	"github.com/opswire/opswire/services/notifier/internal/route"
	"github.com/opswire/opswire/services/notifier/internal/slack"
	"github.com/opswire/opswire/services/notifier/internal/teams"
	"github.com/opswire/opswire/services/notifier/internal/webhook"
	"github.com/opswire/opswire/services/notifier/internal/wecom"
	"github.com/opswire/opswire/shared/app"
	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/pause"
	"github.com/opswire/opswire/shared/subject"
)

// RateMargin widens every rate window: the receiver counts arrival times,
// which jitter with the network.
const RateMargin = 150 * time.Millisecond

// ReplaySubject is the request subject of the dead-letter replay,
// ctl.<cluster>.notifier.replay; only the active replica answers.
func ReplaySubject(cluster string) string {
	return "ctl." + subject.Encode(cluster) + ".notifier.replay"
}

// ReplayRequest is the body of a replay request; an empty receiver replays
// every receiver's dead letters.
type ReplayRequest struct {
	Receiver string `json:"receiver"`
}

// Run is the notifier's main loop.
func Run(ctx context.Context, rt *app.Runtime) error {
	cfg := rt.Config
	n := cfg.Notifier
	// The locale of receivers without their own: the file's, or the one
	// its titles imply (the seed's Chinese msgtitle), said in the log.
	loc, note := cfg.NotifierLocale()
	n.Locale = loc
	receivers, err := BuildReceivers(cfg.NotifierReceivers(), n, &http.Client{}, &ratelimit.Registry{})
	if err != nil {
		return err
	}
	if len(receivers) == 0 {
		rt.Log.Warn().Msg("no receivers configured (notifier.receivers, sendReport.apiurl, delException.apiurl); OPS messages are not consumed")
	}
	if note != "" {
		rt.Log.Info().Msg(note)
	}
	for _, r := range receivers {
		rt.Log.Info().Str("receiver", r.Name).Str("locale", r.Locale.Name()).Str("timezone", r.Locale.Zone().String()).Msg("receiver ready")
	}
	var nc *nats.Conn
	var js jetstream.JetStream
	if ReadsOwnOps(n) {
		nc, js, err = rt.NATS(ctx)
	} else {
		// A fleet stream (or another stream) is the deployment's: its
		// sources would be lost to an update, so it is only waited for.
		nc, js, err = rt.NATSReading(ctx, n.Stream)
	}
	if err != nil {
		return err
	}
	if err := dispatch.EnsureDeadLetterStream(ctx, js, n.DeadLetterMaxAge.Duration, cfg.NATS.Replicas); err != nil {
		return err
	}
	kv, err := dispatch.EnsureDeliveredBucket(ctx, js, n.DeliveredTTL.Duration, cfg.NATS.Replicas)
	if err != nil {
		return err
	}
	records, err := dispatch.NewAsyncRecorder(nc, deliveredAsyncMarks, 10*time.Second)
	if err != nil {
		return err
	}
	// Standbys follow the pause records too: a new active replica knows at once.
	paused, err := pause.Follow(ctx, js, cfg.NATS.Replicas,
		pause.WatcherConfig{Cluster: rt.Cluster, Actor: "notifier", Registry: rt.Server.Registry}, rt.Log)
	if err != nil {
		return err
	}
	a := &active{rt: rt, nc: nc, js: js, kv: kv, records: records, receivers: receivers, metrics: dispatch.NewMetrics(rt.Server.Registry),
		backlog: newBacklogMetrics(rt.Server.Registry), pause: paused}
	for _, r := range receivers {
		a.metrics.InitReceiver(r.Name)
		a.backlog.initReceiver(r.Name)
	}
	activeGauge := prometheus.NewGauge(prometheus.GaugeOpts{Name: "opswire_notifier_active",
		Help: "1 while this replica is the active one (holds the lease), 0 on standby."})
	rt.Server.Registry.MustRegister(activeGauge)
	rt.Server.AddReadiness("consumer", a.ready)
	c := cfg.Controller
	if !c.LeaderElect {
		activeGauge.Set(1)
		return a.run(ctx)
	}
	lkv, err := lease.EnsureBucket(ctx, js, c.LeaseDuration.Duration, cfg.NATS.Replicas)
	if err != nil {
		return err
	}
	l := &lease.Lease{KV: lkv, Key: config.ClusterKey(rt.Cluster), ID: rt.Options.ID, Duration: c.LeaseDuration.Duration,
		RenewDeadline: c.RenewDeadline.Duration, RetryPeriod: c.RetryPeriod.Duration, Log: rt.Log,
		OnChange: func(on bool) { activeGauge.Set(map[bool]float64{true: 1}[on]) }}
	rt.Log.Info().Str("lease", lease.Bucket+"/"+l.Key).Str("id", l.ID).Msg("notifier standing by until it holds the lease")
	return l.Run(ctx, a.run)
}

// active is the work of the active replica.
type active struct {
	rt        *app.Runtime
	nc        *nats.Conn
	js        jetstream.JetStream
	pause     dispatch.Pauser
	kv        jetstream.KeyValue
	records   jetstream.JetStream // the delivered records' asynchronous writes
	receivers []dispatch.Receiver
	metrics   *dispatch.Metrics
	backlog   *backlogMetrics

	mu      sync.Mutex
	running []jetstream.ConsumeContext // nil on standby
	on      atomic.Bool
}

// ready: a standby is ready (it waits, by design); the active replica is
// ready while every consumer runs.
func (a *active) ready() error {
	if !a.on.Load() {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, cc := range a.running {
		select {
		case <-cc.Closed():
			return errors.New("consumer stopped")
		default:
		}
	}
	return nil
}

// run consumes and delivers until ctx ends, then stops consuming, lets the
// requests in flight finish (bounded by their timeout), records and acks
// what they delivered, and naks everything else it held.
func (a *active) run(ctx context.Context) error {
	rt, n := a.rt, a.rt.Config.Notifier
	rateLog := &dispatch.KVRateLog{KV: a.kv}
	seeded := map[string]bool{}
	for _, r := range a.receivers {
		if seeded[r.Budget] {
			continue
		}
		seeded[r.Budget] = true
		if sends, err := rateLog.Load(ctx, r.Budget); err != nil {
			rt.Log.Warn().Err(err).Str("receiver", r.Name).Msg("cannot load the rate log; starting with a fresh budget")
		} else {
			r.Limiter.Seed(sends)
		}
	}
	routes := route.New(rt.Config.NotifierRoutes(), n.DefaultReceivers, n.GroupWait, n.GroupInterval)
	dctx, dcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer dcancel()
	var wg sync.WaitGroup
	dispatchers := map[string]*dispatch.Dispatcher{}
	trackers := map[string]tracked{}
	var ccs []jetstream.ConsumeContext
	var replays replayRuns
	stop := func() {
		for _, cc := range ccs {
			cc.Stop()
		}
		dcancel()
		replays.wait()
		wg.Wait()
		a.mu.Lock()
		a.running = nil
		a.mu.Unlock()
		a.on.Store(false)
	}
	for _, r := range a.receivers {
		cons, err := EnsureConsumer(ctx, a.js, rt.Cluster, r.Name, n)
		if err != nil {
			stop()
			return err
		}
		d := dispatch.New(dispatch.Settings{
			Cluster: rt.Cluster, Fleet: n.Fleet(), Consumer: r.Name, RetryInitial: n.RetryInitial.Duration, RetryMax: n.RetryMax.Duration,
			GiveUpAfter: n.GiveUpAfter.Duration, AckWait: n.AckWait.Duration, MaxDeliver: n.MaxDeliver,
			Lookups: deliveredLookups, LookupBatch: deliveredLookupBatch,
		}, dispatch.Deps{
			Routes: routes, Receivers: []dispatch.Receiver{r}, Delivered: &dispatch.KVDelivered{KV: a.kv, Async: a.records, Parallel: deliveredMarks, Log: rt.Log}, DeadJS: a.js,
			Core: a.nc, Metrics: a.metrics, Log: rt.Log, RateLog: rateLog, Pause: a.pause,
		})
		dispatchers[r.Name] = d
		wg.Add(1)
		go func() { defer wg.Done(); d.Run(dctx) }()
		name := r.Name
		// Loaded before consuming: the jump to the first message this term
		// gets is counted against what earlier terms accounted for.
		info := cons.CachedInfo()
		tr := loadTracker(ctx, a.kv, name, info, a.firstSeq(ctx, n.Stream), rt.Log)
		// Saved at once: a term that settles nothing (its receiver down) must
		// still leave the next one its starting point, not the consumer's ack
		// floor, which the server moves past messages it dropped.
		if err := tr.save(ctx, a.kv, info); err != nil {
			rt.Log.Warn().Err(err).Str("receiver", name).Msg("cannot save the accounted OPS sequences")
		}
		trackers[name] = tracked{tr: tr, info: info}
		cc, err := cons.Consume(func(m jetstream.Msg) {
			if md, err := m.Metadata(); err == nil {
				tr.observe(md.Sequence.Stream)
				d.Handle(dctx, trackedMsg{Msg: m, tr: tr, seq: md.Sequence.Stream})
				return
			}
			d.Handle(dctx, m)
		},
			consumeOpts(n, func(err error) {
				if errors.Is(err, jetstream.ErrNoHeartbeat) {
					// Nothing from the server for two heartbeats: a lost
					// refill (docs/notifier.md#consumer-stalls) or an
					// unreachable server; nats.go has pulled again.
					a.metrics.ConsumerStalls.WithLabelValues(name).Inc()
					rt.Log.Warn().Err(err).Str("receiver", name).Dur("after", 2*consumeHeartbeat).
						Msg("consumer received nothing for two heartbeats; pulled again")
					return
				}
				rt.Log.Warn().Err(err).Str("receiver", name).Msg("consumer")
			})...)
		if err != nil {
			stop()
			return fmt.Errorf("consume for receiver %s: %w", r.Name, err)
		}
		ccs = append(ccs, cc)
	}
	a.mu.Lock()
	a.running = ccs
	a.mu.Unlock()
	a.on.Store(true)
	var subs []*nats.Subscription
	unsubscribe := func() {
		for _, sub := range subs {
			_ = sub.Unsubscribe()
		}
	}
	replaySubjects := ReplaySubjects(rt.Cluster, n)
	for _, subj := range replaySubjects {
		sub, err := a.nc.QueueSubscribe(subj, "opswire-notifier", func(m *nats.Msg) {
			a.replay(dctx, &replays, dispatchers, m)
		})
		if err != nil {
			unsubscribe()
			stop()
			return fmt.Errorf("subscribe %s: %w", subj, err)
		}
		subs = append(subs, sub)
	}
	// "notifier running" means a replay request is answered: the
	// subscriptions have reached the server (a NATS outage only delays it;
	// the subscriptions are resent on reconnect).
	if err := a.nc.FlushTimeout(5 * time.Second); err != nil {
		rt.Log.Warn().Err(err).Msg("replay subscriptions not confirmed by the server yet")
	}
	ev := rt.Log.Info().Int("receivers", len(a.receivers)).Strs("replay", replaySubjects).Str("stream", n.Stream).
		Strs("filter", OpsFilters(rt.Cluster, n))
	if n.Fleet() {
		ev = ev.Strs("clusters", n.Clusters)
	}
	ev.Msg("notifier running")
	wg.Add(1)
	go func() {
		defer wg.Done()
		watchBacklog(dctx, a.js, a.kv, n.Stream, rt.Cluster, trackers, min(max(n.AckWait.Duration, time.Second), 10*time.Second), a.backlog, rt.Log)
	}()
	<-ctx.Done()
	unsubscribe()
	stop()
	ectx, ecancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer ecancel()
	endTerm(ectx, a.js, a.kv, n.Stream, trackers, a.backlog, rt.Log)
	return nil
}

// firstSeq is the stream's first sequence now (0 if it cannot be read),
// read after the consumer's info the tracker is loaded with.
func (a *active) firstSeq(ctx context.Context, stream string) uint64 {
	si, err := streamInfo(ctx, a.js, stream)
	if err != nil {
		a.rt.Log.Warn().Err(err).Str("stream", stream).Msg("cannot read the stream; what the last term acked since its last save may be counted lost")
		return 0
	}
	return si.State.FirstSeq
}

// ReadsOwnOps reports whether the notifier reads its own cluster's OPS
// stream (the default), which it may create like every service; a fleet
// notifier, or one reading another stream, never creates or changes it.
func ReadsOwnOps(n config.Notifier) bool {
	return !n.Fleet() && n.Stream == subject.OpsStream
}

// OpsFilters are the subject filters of every receiver's consumer:
// ops.<cluster>.> for the notifier's own cluster; on a fleet notifier
// ops.*.> (clusters ["*"]) or one ops.<c>.> per listed cluster.
func OpsFilters(cluster string, n config.Notifier) []string {
	if !n.Fleet() {
		return []string{"ops." + subject.Encode(cluster) + ".>"}
	}
	out := make([]string, 0, len(n.Clusters))
	for _, c := range n.Clusters {
		out = append(out, "ops."+c+".>") // "*" or a validated token
	}
	return out
}

// ReplaySubjects are the replay request subjects the active replica
// answers: ctl.<cluster>.notifier.replay for its own cluster; on a fleet
// notifier ctl.*.notifier.replay or one per listed cluster, each replaying
// the dead letters of the cluster its subject names.
func ReplaySubjects(cluster string, n config.Notifier) []string {
	if !n.Fleet() {
		return []string{ReplaySubject(cluster)}
	}
	out := make([]string, 0, len(n.Clusters))
	for _, c := range n.Clusters {
		out = append(out, "ctl."+c+".notifier.replay")
	}
	return out
}

// replayRuns are the replays a term runs. The term waits for them when it
// ends (wait), so a replayed card at the bot is recorded and its dead letters
// removed before the lease goes to a standby, and starts none after.
type replayRuns struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// start runs f in its own goroutine unless the term is ending.
func (r *replayRuns) start(f func()) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.wg.Go(f)
	return true
}

// wait refuses new replays and waits for those running; their context has
// ended, so each finishes the attempt under way and starts no other.
func (r *replayRuns) wait() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.wg.Wait()
}

// replay answers one replay request (in its own goroutine: a replay waits
// for the receivers' rate limits).
func (a *active) replay(ctx context.Context, runs *replayRuns, dispatchers map[string]*dispatch.Dispatcher, m *nats.Msg) {
	var req ReplayRequest
	if len(m.Data) > 0 {
		if err := json.Unmarshal(m.Data, &req); err != nil {
			b, _ := json.Marshal(map[string]string{"error": "request must be JSON {\"receiver\": \"<name>\"}: " + err.Error()})
			_ = m.Respond(b)
			return
		}
	}
	// The cluster whose dead letters are replayed is the one the subject
	// names (ctl.<cluster>.notifier.replay): the notifier's own, or on a
	// fleet notifier any cluster it reads.
	cluster := subject.Encode(a.rt.Cluster)
	if a.rt.Config.Notifier.Fleet() {
		if t := strings.Split(m.Subject, "."); len(t) > 1 {
			cluster = t[1]
		}
	}
	started := runs.start(func() {
		var out []dispatch.ReplayResult
		dl := dispatch.StreamDeadLetters{JS: a.js}
		for _, r := range a.receivers {
			if req.Receiver != "" && r.Name != req.Receiver {
				continue
			}
			out = append(out, dispatchers[r.Name].ReplayCluster(ctx, dl, r.Name, cluster))
		}
		if len(out) == 0 {
			out = append(out, dispatch.ReplayResult{Receiver: req.Receiver, Error: "unknown receiver"})
		}
		b, _ := json.Marshal(out)
		_ = m.Respond(b)
	})
	if !started {
		b, _ := json.Marshal([]dispatch.ReplayResult{{Receiver: req.Receiver, Error: "the notifier is stopping; ask again (the next active replica answers)"}})
		_ = m.Respond(b)
	}
}

// consumeExpiry bounds each pull request of a receiver's consumer and
// consumeHeartbeat is the server's idle heartbeat on it. nats.go's Consume
// can miss a refill: it skips the refill check while its previous pull
// request is still being published, and retries it only on the next
// message, so when the messages answering that request are all handled
// before the puller marks its publish done (a goroutine waiting for a CPU
// on a loaded machine) no request is left on the server, which then sends
// nothing, not even heartbeats, and the client pulls again only after two
// missed heartbeats (30 s with the default 30 s expiry). A short expiry
// bounds that stall to 2*consumeHeartbeat (docs/notifier.md#consumer-stalls);
// an idle consumer costs one pull request per expiry.
const (
	consumeExpiry    = 4 * time.Second
	consumeHeartbeat = 1 * time.Second
)

// consumeOpts are the Consume options of a receiver's consumer; onErr gets
// the consumer's errors.
func consumeOpts(n config.Notifier, onErr func(error)) []jetstream.PullConsumeOpt {
	return []jetstream.PullConsumeOpt{
		jetstream.PullMaxMessages(min(500, max(1, n.MaxAckPending))),
		jetstream.PullExpiry(consumeExpiry),
		jetstream.PullHeartbeat(consumeHeartbeat),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) { onErr(err) }),
	}
}

// deliveredLookups bounds each dispatcher's messages queued for or in a
// delivered-record lookup, deliveredLookupBatch the messages one read takes
// (one batched direct get): up to 4 reads in flight, so a burst is taken in
// at the speed of the consumer rather than of one round trip per message,
// and a lone message is looked up at once.
const (
	deliveredLookups     = 1024
	deliveredLookupBatch = 256
)

// deliveredAsyncMarks bounds the delivered-record writes in flight after a
// card was accepted (asynchronous publishes, acknowledged as the server
// stores them): a 10,000-event card is recorded in about the time the server
// takes to store 10,000 small messages, the window in which a crash could
// repeat it. deliveredMarks bounds the puts that rewrite a record whose
// asynchronous write failed.
const (
	deliveredAsyncMarks = 4096
	deliveredMarks      = 128
)

// ConsumerName is the durable consumer of one receiver. The cluster name is
// written as config.ClusterToken: a consumer name may not hold '/' (an EKS
// ARN) and its record's key (seqKey) may not hold ':'; a name already safe
// is kept.
func ConsumerName(cluster, receiver string) string {
	return "opswire-notifier-" + config.ClusterToken(subject.Encode(cluster)) + "-" + receiver
}

// ConsumerConfig is the durable consumer of one receiver, used by whichever
// replica is active. Held messages are kept alive with progress acks, so
// AckWait only decides how soon a crashed replica's messages move on;
// BackOff spaces redeliveries of messages that keep coming back. The
// consumer has no MaxDeliver of its own: the dispatcher dead-letters a
// message on its maxDeliver-th delivery and acks it only once the dead
// letter is stored, so a message is never dropped by the server.
func ConsumerConfig(cluster, receiver string, n config.Notifier) jetstream.ConsumerConfig {
	ack := n.AckWait.Duration
	var backoff []time.Duration
	for i, d := 0, ack; i < n.MaxDeliver-1 && i < 6; i++ {
		backoff = append(backoff, d)
		d = min(2*d, 10*ack) // documented cap: never more than 10× ackWait
	}
	desc := "opswire notifier: OPS results for receiver " + receiver
	if n.Fleet() {
		desc += " of clusters " + strings.Join(n.Clusters, ", ")
	}
	cc := jetstream.ConsumerConfig{
		Durable:       ConsumerName(cluster, receiver),
		Description:   desc,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ack,
		BackOff:       backoff,
		MaxDeliver:    -1,
		MaxAckPending: n.MaxAckPending,
	}
	if f := OpsFilters(cluster, n); len(f) == 1 {
		cc.FilterSubject = f[0]
	} else {
		cc.FilterSubjects = f
	}
	return cc
}

// LegacyConsumerName is the one consumer all receivers shared before
// per-receiver consumers.
func LegacyConsumerName(cluster string) string { return "opswire-notifier-" + subject.Encode(cluster) }

// EnsureConsumer creates or updates a receiver's consumer on notifier.stream.
// A new one starts where the legacy shared consumer stood, if it exists
// (one cluster's OPS only), instead of replaying the stream; an existing one
// keeps its start position.
func EnsureConsumer(ctx context.Context, js jetstream.JetStream, cluster, receiver string, n config.Notifier) (jetstream.Consumer, error) {
	cc := ConsumerConfig(cluster, receiver, n)
	stream := n.Stream
	if c, err := js.Consumer(ctx, stream, cc.Durable); err == nil {
		old := c.CachedInfo().Config
		cc.DeliverPolicy, cc.OptStartSeq, cc.OptStartTime = old.DeliverPolicy, old.OptStartSeq, old.OptStartTime
		c, err := js.UpdateConsumer(ctx, stream, cc)
		if err != nil {
			return nil, fmt.Errorf("consumer %s: %w", cc.Durable, err)
		}
		return c, nil
	} else if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, fmt.Errorf("consumer %s: %w", cc.Durable, err)
	}
	if !n.Fleet() {
		if legacy, err := js.Consumer(ctx, stream, LegacyConsumerName(cluster)); err == nil {
			cc.DeliverPolicy, cc.OptStartSeq = jetstream.DeliverByStartSequencePolicy, legacy.CachedInfo().AckFloor.Stream+1
		}
	}
	c, err := js.CreateConsumer(ctx, stream, cc)
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", cc.Durable, err)
	}
	return c, nil
}

// BuildReceivers resolves every receiver's URL and secret (from the file, a
// file path or an environment variable) and builds its sink. Errors name the
// receiver and the source (file path, variable), never the value. Each
// receiver's cards are in its locale (receivers[].locale, else n.Locale:
// Run sets the effective one) and n's time zone.
func BuildReceivers(rs []config.Receiver, n config.Notifier, client *http.Client, limits *ratelimit.Registry) ([]dispatch.Receiver, error) {
	var out []dispatch.Receiver
	var errs []error
	zone := n.Location()
	for _, r := range rs {
		u, err := config.ResolveSecret(r.URL, r.URLFile, r.URLEnv)
		if err == nil && !u.IsSet() {
			err = errors.New("URL is empty")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("receiver %s: url: %w", r.Name, err))
			continue
		}
		secret, err := config.ResolveSecret(r.Secret, r.SecretFile, r.SecretEnv)
		if err != nil {
			errs = append(errs, fmt.Errorf("receiver %s: secret: %w", r.Name, err))
			continue
		}
		var sink notify.Sink
		switch r.Type {
		case config.ReceiverWebhook:
			sink, err = webhook.New(u, client)
		case config.ReceiverWeCom:
			sink, err = wecom.New(wecom.Options{URL: u, ContentLimit: r.BodyLimit, MaxRows: n.TopRows, Client: client})
		case config.ReceiverSlack:
			sink, err = slack.New(slack.Options{URL: u, BodyLimit: r.BodyLimit, MaxRows: n.TopRows, Client: client})
		case config.ReceiverTeams:
			sink, err = teams.New(teams.Options{URL: u, BodyLimit: r.BodyLimit, MaxRows: n.TopRows, Client: client})
		case config.ReceiverDingTalk:
			sink, err = dingtalk.New(dingtalk.Options{URL: u, Secret: secret, Keyword: r.Keyword, BodyLimit: r.BodyLimit, MaxRows: n.TopRows, Client: client})
		default:
			sink, err = feishu.New(feishu.Options{URL: u, Secret: secret, Keyword: r.Keyword, BodyLimit: n.BodyLimit, MaxRows: n.TopRows, Client: client})
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("receiver %s: %w", r.Name, err))
			continue
		}
		sum := sha256.Sum256([]byte(u.Value()))
		budget := hex.EncodeToString(sum[:20])
		perSecond, perMinute, perHour := r.RatePerSecond, r.RatePerMinute, r.RatePerHour
		lim := limits.Get(budget, func() *ratelimit.Limiter {
			return ratelimit.New(RateMargin, ratelimit.Window{Limit: perSecond, Period: time.Second},
				ratelimit.Window{Limit: perMinute, Period: time.Minute}, ratelimit.Window{Limit: perHour, Period: time.Hour})
		})
		out = append(out, dispatch.Receiver{Name: r.Name, Sink: sink, Limiter: lim, Budget: budget, Timeout: r.Timeout.Duration,
			Locale: locale.New(cmp.Or(r.Locale, n.Locale), zone)})
	}
	return out, errors.Join(errs...)
}
