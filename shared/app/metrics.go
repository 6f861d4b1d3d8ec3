package app

import (
	"context"
	"math"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// registerBuildInfo exports opswire_build_info{service,version} 1. Every
// other opswire series carries no service label (one service per process);
// dashboards and alert rules join on this one to tell the services apart
// whatever the scrape configuration calls the job.
func registerBuildInfo(reg prometheus.Registerer, service string) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "opswire_build_info",
		Help:        "Always 1; labels name the service and the version of this process.",
		ConstLabels: prometheus.Labels{"service": service, "version": Version},
	})
	g.Set(1)
	reg.MustRegister(g)
}

// opsStreamPoll is how often watchOpsStream reads the OPS stream's size.
const opsStreamPoll = 30 * time.Second

// watchOpsStream exports the OPS stream's size and limits, read every
// interval from the stream info (one small JetStream API request), so an
// alert can fire before OPS reaches its max bytes and starts discarding the
// oldest audit messages. A failed read keeps the last values.
func watchOpsStream(ctx context.Context, js jetstream.JetStream, stream string, reg prometheus.Registerer, log zerolog.Logger, interval time.Duration) {
	var bytes, maxBytes, msgs atomic.Uint64
	maxBytes.Store(math.Float64bits(-1))
	gauge := func(name, help string, v *atomic.Uint64, bits bool) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 {
			if bits {
				return math.Float64frombits(v.Load())
			}
			return float64(v.Load())
		})
	}
	reg.MustRegister(
		gauge("opswire_ops_stream_bytes", "Bytes stored in the OPS audit stream (read every 30 s).", &bytes, false),
		gauge("opswire_ops_stream_messages", "Messages stored in the OPS audit stream (read every 30 s).", &msgs, false),
		gauge("opswire_ops_stream_max_bytes", "The OPS stream's max bytes (nats.opsMaxBytes; -1: unlimited). At the limit the oldest audit messages are discarded.", &maxBytes, true),
	)
	read := func() {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		s, err := js.Stream(rctx, stream)
		if err == nil {
			var info *jetstream.StreamInfo
			if info, err = s.Info(rctx); err == nil {
				bytes.Store(info.State.Bytes)
				msgs.Store(info.State.Msgs)
				maxBytes.Store(math.Float64bits(float64(info.Config.MaxBytes)))
				return
			}
		}
		if ctx.Err() == nil {
			log.Debug().Err(err).Msg("cannot read the OPS stream's size")
		}
	}
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			read()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}
