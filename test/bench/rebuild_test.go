//go:build bench

package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/kubestate"
	"github.com/opswire/opswire/shared/natsx"
	"github.com/opswire/opswire/shared/subject"
	"github.com/opswire/opswire/test/harness"
)

const (
	rebuildPods   = 150_000
	rebuildNodes  = 5_000
	rebuildRounds = 5
)

// BenchmarkMirrorRebuild150k is figure 3: the time a new leader needs to
// hold the whole state, i.e. a kubestate.Mirror (what every actor runs) from
// creation to WaitSynced over a KUBE stream of 150,000 pods and 5,000 nodes
// (each stored twice, so the stream also holds superseded messages as in
// production). Floor: a bare ordered consumer reading the last message of
// every subject without decoding. Rounds alternate floor and mirror; the
// medians are reported.
func BenchmarkMirrorRebuild150k(b *testing.B) {
	// nats-server as a process of its own, as in production: embedded, its
	// heap would be scanned by every collection the mirror's allocations
	// cause, which no actor pays.
	n := harness.StartNATSClusterFrom(b, 1, func(n harness.NATSNode) string {
		return fmt.Sprintf("server_name: %s\nlisten: 127.0.0.1:%d\njetstream {\n  store_dir: %q\n  max_file_store: 4GB\n}\n", n.Name, n.ClientPort, n.StoreDir)
	})
	server := findProcess(b, filepath.Dir(n.Nodes[0].StoreDir))
	cpuNow := func() time.Duration { return processCPU() + procCPU(server) }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := natsx.EnsureStreams(ctx, n.JS, config.Default().NATS); err != nil {
		b.Fatal(err)
	}
	js, err := jetstream.New(n.Conn, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		b.Fatal(err)
	}
	for version := range 2 {
		fillKube(b, js, version)
	}
	want := rebuildPods + rebuildNodes

	b.ResetTimer()
	// CPU time (this process and the nats-server's) beside wall time: on a loaded machine the wall ratio mostly shows the
	// share of the cores the round got, the CPU ratio what the mirror costs. The nats-server's share is also kept apart:
	// what the consumer asks for (its filters) changes the server's work too.
	var floor, mirror, floorCPU, mirrorCPU, floorServer, mirrorServer []time.Duration
	for range rebuildRounds {
		start, cpu, srv := time.Now(), cpuNow(), procCPU(server)
		if got := readLastPerSubject(b, ctx, js); got != want {
			b.Fatalf("bare consumer read %d messages, want %d", got, want)
		}
		floor = append(floor, time.Since(start))
		floorCPU = append(floorCPU, cpuNow()-cpu)
		floorServer = append(floorServer, procCPU(server)-srv)

		mctx, mcancel := context.WithCancel(ctx)
		start, cpu, srv = time.Now(), cpuNow(), procCPU(server)
		m := kubestate.New(js, "bench", zerolog.Nop(), nil, kubestate.Handlers{})
		go func() { _ = m.Run(mctx) }()
		if err := m.WaitSynced(mctx); err != nil {
			b.Fatal(err)
		}
		mirror = append(mirror, time.Since(start))
		mirrorCPU = append(mirrorCPU, cpuNow()-cpu)
		mirrorServer = append(mirrorServer, procCPU(server)-srv)
		if p, nd := len(m.Pods()), len(m.Nodes()); p != rebuildPods || nd != rebuildNodes {
			b.Fatalf("mirror holds %d pods and %d nodes", p, nd)
		}
		mcancel()
	}
	b.StopTimer()
	b.ReportMetric(float64(median(mirror).Microseconds())/1000, "mirror-ms")
	b.ReportMetric(float64(median(floor).Microseconds())/1000, "floor-ms")
	b.ReportMetric(float64(median(mirror))/float64(median(floor)), "x-floor")
	b.ReportMetric(float64(median(mirrorCPU).Microseconds())/1000, "mirror-cpu-ms")
	b.ReportMetric(float64(median(floorCPU).Microseconds())/1000, "floor-cpu-ms")
	b.ReportMetric(float64(median(mirrorServer).Microseconds())/1000, "mirror-server-cpu-ms")
	b.ReportMetric(float64(median(floorServer).Microseconds())/1000, "floor-server-cpu-ms")
	b.Logf("rounds: mirror %v, floor %v; CPU: mirror %v, floor %v; of which the nats-server's: mirror %v, floor %v",
		mirror, floor, mirrorCPU, floorCPU, mirrorServer, floorServer)
}

// processCPU is the user and system time of this process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// fillKube stores one version of every object, with the payloads the watcher writes.
func fillKube(b *testing.B, js jetstream.JetStream, version int) {
	b.Helper()
	now := time.Now().UTC()
	src := envelope.Source("bench", "watcher")
	publish := func(subj, id, typ, ceSubject string, payload any) {
		ev, err := envelope.New(id, src, typ, ceSubject, payload, now)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := js.PublishMsgAsync(ev.Msg(subj), jetstream.WithStallWait(time.Minute)); err != nil {
			b.Fatal(err)
		}
	}
	for i := range rebuildNodes {
		name := fmt.Sprintf("node-%04d", i)
		s := events.NodeState{Op: events.OpUpsert, UID: fmt.Sprintf("node-uid-%04d", i), Name: name, ResourceVersion: fmt.Sprint(1000 + version),
			Labels: map[string]string{"kubernetes.io/hostname": name, "pool": "web"}, Ready: "True", AllocatablePods: 110,
			EphemeralBytes: 100 << 30, Pods: 30, ImageBytes: 12 << 30, ImageCount: 42}
		publish(subject.Node("bench", name), fmt.Sprintf("node/%s/%d", s.UID, version), events.TypeNode, name, s)
	}
	finished := now.Add(-time.Hour)
	for i := range rebuildPods {
		ns, name := fmt.Sprintf("ns-%03d", i%200), fmt.Sprintf("web-7d9f8c6b5-%06d", i)
		s := events.PodState{Op: events.OpUpsert, UID: fmt.Sprintf("00000000-0000-4000-8000-%012d", i), Namespace: ns, Name: name,
			ResourceVersion: fmt.Sprint(200000 + i + version*rebuildPods), NodeName: fmt.Sprintf("node-%04d", i%rebuildNodes), Phase: "Running",
			CreationTimestamp: now.Add(-24 * time.Hour), Owner: &events.Owner{Kind: "Deployment", Name: fmt.Sprintf("web-%03d", i%500)},
			Containers: []events.Container{{Name: "app", Restarts: int32(i % 7), LastReason: "OOMKilled", LastExitCode: 137, LastFinished: &finished}, {Name: "proxy"}}}
		publish(subject.Pod("bench", ns, name), "pod/"+s.UID+"/"+s.ResourceVersion, events.TypePod, ns+"/"+name, s)
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(5 * time.Minute):
		b.Fatal("KUBE not filled in 5 minutes")
	}
}

// readLastPerSubject is the floor: the ordered consumer a Mirror uses, same
// batch size, reading every message without decoding it.
func readLastPerSubject(b *testing.B, ctx context.Context, js jetstream.JetStream) int {
	b.Helper()
	cons, err := js.OrderedConsumer(ctx, subject.KubeStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subject.Kube("bench")}, DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy,
	})
	if err != nil {
		b.Fatal(err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(2000))
	if err != nil {
		b.Fatal(err)
	}
	defer it.Stop()
	count := 0
	for {
		msg, err := it.Next()
		if err != nil {
			b.Fatal(err)
		}
		count++
		md, err := msg.Metadata()
		if err != nil {
			b.Fatal(err)
		}
		if md.NumPending == 0 {
			return count
		}
	}
}

// findProcess returns the pid of the process whose command line mentions s.
func findProcess(b *testing.B, s string) int {
	b.Helper()
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if cmd, err := os.ReadFile("/proc/" + d.Name() + "/cmdline"); err == nil && strings.Contains(string(cmd), s) {
			return pid
		}
	}
	b.Fatalf("no process mentions %s", s)
	return 0
}

// procCPU is the user and system time of another process (/proc/<pid>/stat).
func procCPU(pid int) time.Duration {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command (which may hold spaces) in parentheses.
	_, rest, _ := strings.Cut(string(stat), ") ")
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ
}
