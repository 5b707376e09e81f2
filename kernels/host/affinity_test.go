package host

import (
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestPinPlan: helper w goes to the w-th allowed CPU, wrapping; the caller
// (index 0) is not planned.
func TestPinPlan(t *testing.T) {
	if got := pinPlan(5, []int{2, 5, 7}); !slices.Equal(got[1:], []int{5, 7, 2, 5}) {
		t.Fatalf("pinPlan(5, [2 5 7]) = %v, want helpers on 5 7 2 5", got)
	}
	if got := pinPlan(1, []int{0}); len(got) != 1 {
		t.Fatalf("pinPlan(1) = %v: want no helper", got)
	}
}

// TestAffinityEnv: FT_HOST_AFFINITY takes 1 or 0; anything else is an
// error from NewEngine naming the switch.
func TestAffinityEnv(t *testing.T) {
	for v, want := range map[string]bool{"": false, "0": false, "1": true} {
		t.Setenv(AffinityEnv, v)
		if on, err := affinityFromEnv(); on != want || err != nil {
			t.Errorf("%s=%q: %v, %v: want %v", AffinityEnv, v, on, err, want)
		}
	}
	t.Setenv(AffinityEnv, "yes")
	if _, err := NewEngine(Options{Threads: 2}); err == nil || !strings.Contains(err.Error(), AffinityEnv) {
		t.Fatalf("%s=yes: NewEngine error %v, want one naming the switch", AffinityEnv, err)
	}
}

// TestPoolAffinity: with FT_HOST_AFFINITY=1 every helper that takes part
// in a Run does so on a thread pinned to its planned CPU, the caller's
// thread stays unpinned, and the engine's results are those of an
// unpinned one.
func TestPoolAffinity(t *testing.T) {
	if goruntime.GOOS != "linux" {
		t.Skip("CPU affinity is Linux-only")
	}
	cpus, err := allowedCPUs()
	if err != nil {
		t.Fatal(err)
	}
	const threads = 3
	plan := pinPlan(threads, cpus)
	t.Setenv(AffinityEnv, "1")
	e, err := NewEngine(Options{Threads: threads})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	var mu sync.Mutex
	seen := map[int][]int{}
	e.pool.Run(400, 1, func(w, lo, hi int) {
		time.Sleep(20 * time.Microsecond)
		got, err := threadCPUs()
		if err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if prev, ok := seen[w]; ok && !slices.Equal(prev, got) {
			t.Errorf("worker %d ran on masks %v and %v", w, prev, got)
		}
		seen[w] = got
	})
	helpers := 0
	for w, got := range seen {
		if w == 0 {
			if len(cpus) > 1 && len(got) == 1 {
				t.Errorf("the caller's thread is pinned to %v", got)
			}
			continue
		}
		helpers++
		if !slices.Equal(got, []int{plan[w]}) {
			t.Errorf("helper %d's thread may run on %v, want only CPU %d", w, got, plan[w])
		}
	}
	if helpers == 0 {
		t.Fatalf("no helper took part in 400 chunks of 20 µs: %v", seen)
	}
	t.Setenv(AffinityEnv, "")
	ref, err := NewEngine(Options{Threads: threads})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	buf := make([]float32, 3*readChunk+17)
	for i := range buf {
		buf[i] = float32(i%7) - 3
	}
	if a, b := e.ReadSum(buf), ref.ReadSum(buf); a != b {
		t.Fatalf("pinned engine's ReadSum %v, unpinned %v", a, b)
	}
}
