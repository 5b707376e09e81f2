// The load test runs without the race detector: under it the CPU kernels
// are some thirty times slower and 200 clients' requests would take
// minutes. make test runs it as a step of its own (go test -run TestLoad
// ./serve/); the other tests of this package cover the server's
// concurrency under -race.

//go:build !race

package serve_test

import (
	"context"
	"flag"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/flextensor-go/flextensor/bench/loadgen"
	"github.com/flextensor-go/flextensor/models/generate"
)

var (
	long         = flag.Bool("long", false, "TestLoad: the full run (200 clients for a minute) instead of CI's short one")
	loadDuration = flag.Duration("load-duration", 0, "TestLoad: how long the clients send requests (default 12s, 60s with -long)")
)

// TestLoad: 200 concurrent streaming clients against the tiny model on the
// CPU, a tenth of them hanging up after their first token. No request
// fails (429s aside), the KV blocks all come back, memory and goroutines
// return to where they were. CI runs 12 s; go test ./serve -run TestLoad
// -args -long runs the full minute (-load-duration D any other).
func TestLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("the load test is long; -short skips it")
	}
	d := 12 * time.Second
	if *long {
		d = time.Minute
	}
	if *loadDuration > 0 {
		d = *loadDuration
	}
	ts := newServer(t, serverConfig{blocks: 1024, sched: generate.Options{MaxSeqs: 64, MaxQueue: 512}})
	ts.post(t, "/v1/completions", `{"prompt": "warm up", "max_tokens": 2}`)
	heap0, gor0 := heapAndGoroutines()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 256
	rep, err := loadgen.Run(context.Background(), loadgen.Options{
		URL: ts.http.URL, Clients: 200, Duration: d, PromptWords: 12, MaxTokens: 16, Temperature: 0.8,
		DisconnectEvery: 10, Client: &http.Client{Transport: tr, Timeout: 5 * time.Minute},
	})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	rep.Format(&b)
	t.Logf("200 clients for %v:\n%s", d, b.String())
	if rep.Failed > 0 {
		t.Errorf("%d requests failed: %v", rep.Failed, rep.Errors)
	}
	if rep.Completed < 200 || rep.Disconnected == 0 {
		t.Errorf("%d requests completed, %d disconnected; want at least one per client and some hang-ups", rep.Completed, rep.Disconnected)
	}
	if rep.Tokens == 0 || rep.TTFT.N == 0 || rep.ITL.N == 0 {
		t.Errorf("no tokens measured: %+v", rep)
	}
	waitFor(t, 10*time.Second, "the batch to empty", func() bool {
		return ts.Scheduler().Running() == 0 && ts.Scheduler().Waiting() == 0 && ts.KVBlocksInUse() == 0
	})
	tr.CloseIdleConnections()
	ts.http.CloseClientConnections()
	var heap1 uint64
	var gor1 int
	waitFor(t, 10*time.Second, "goroutines to settle", func() bool {
		heap1, gor1 = heapAndGoroutines()
		return gor1 <= gor0+4
	})
	if heap1 > heap0+32<<20 {
		t.Errorf("live heap grew from %d MiB to %d MiB over the load", heap0>>20, heap1>>20)
	}
	t.Logf("live heap %d -> %d KiB, goroutines %d -> %d", heap0>>10, heap1>>10, gor0, gor1)
	if code, out, _ := ts.post(t, "/v1/completions", `{"prompt": "after", "max_tokens": 2}`); code != 200 {
		t.Errorf("after the load: %d %v", code, out)
	}
}

func heapAndGoroutines() (uint64, int) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, runtime.NumGoroutine()
}
