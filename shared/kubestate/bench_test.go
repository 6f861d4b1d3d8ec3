package kubestate

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/subject"
)

// BenchmarkDecodeApply is the mirror's own work per KUBE message (envelope,
// subject, payload, map), without the server and the consumer: what it adds
// to the floor of figure 3. The pods are figure 3's, with the ack reply
// subjects a server gives them.
func BenchmarkDecodeApply(b *testing.B) {
	const n = 50_000
	now := time.Now().UTC()
	finished := now.Add(-time.Hour)
	msgs := make([]replyMsg, n)
	for i := range msgs {
		ns, name := fmt.Sprintf("ns-%03d", i%200), fmt.Sprintf("web-7d9f8c6b5-%06d", i)
		s := events.PodState{Op: events.OpUpsert, UID: fmt.Sprintf("00000000-0000-4000-8000-%012d", i), Namespace: ns, Name: name,
			ResourceVersion: fmt.Sprint(200000 + i), NodeName: fmt.Sprintf("node-%04d", i%5000), Phase: "Running",
			CreationTimestamp: now.Add(-24 * time.Hour), Owner: &events.Owner{Kind: "Deployment", Name: fmt.Sprintf("web-%03d", i%500)},
			Containers: []events.Container{{Name: "app", Restarts: int32(i % 7), LastReason: "OOMKilled", LastExitCode: 137, LastFinished: &finished}, {Name: "proxy"}}}
		ev, err := envelope.New("pod/"+s.UID+"/"+s.ResourceVersion, envelope.Source("bench", "watcher"), events.TypePod, ns+"/"+name, s, now)
		if err != nil {
			b.Fatal(err)
		}
		m := ev.Msg(subject.Pod("bench", ns, name))
		// The ack reply subject a v2 server gives (stream sequence, time, pending).
		reply := fmt.Sprintf("$JS.ACK._.ACCHASH.KUBE.ordered-cons.1.%d.%d.%d.%d.rnd", 100+i, 1+i, now.UnixNano(), n-1-i)
		msgs[i] = replyMsg{fuzzMsg{subj: m.Subject, h: m.Header, data: m.Data}, reply}
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU()
	for b.Loop() {
		m := New(nil, "bench", zerolog.Nop(), nil, Handlers{})
		m.presize(n)
		in := &events.Interner{}
		for i := range msgs {
			m.apply(msgs[i], decode(msgs[i], in, m.held))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/msg")
	// CPU time (GC included) says more than wall time on a shared machine.
	b.ReportMetric(float64((processCPU()-cpu).Nanoseconds())/float64(b.N*n), "cpu-ns/msg")
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
