package runtime_test

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// cpuTensor makes an F32 tensor holding vals on dev.
func cpuTensor(t *testing.T, dev runtime.Device, vals []float32) *runtime.Tensor {
	t.Helper()
	x, err := runtime.NewTensor(dev, runtime.F32, runtime.Shape{len(vals)}, "x")
	if err != nil {
		t.Fatal(err)
	}
	copy(x.F32(), vals)
	t.Cleanup(x.Buffer().Free)
	return x
}

// TestCPUGroupAllReduceAndGather: three ranks on three CPU devices, each
// from its own goroutine, sum their tensors (every rank gets the sum, in
// rank order) and gather them in rank order, twice in a row.
func TestCPUGroupAllReduceAndGather(t *testing.T) {
	const n = 3
	g, err := runtime.NewCPUGroup(n)
	if err != nil {
		t.Fatal(err)
	}
	comms := g.Members()
	devs := make([]*runtime.CPUDevice, n)
	for i := range devs {
		devs[i] = runtime.NewCPUNamed("cpu:"+string(rune('0'+i)), 0)
	}
	if devs[2].Name() != "cpu:2" {
		t.Fatalf("name %q", devs[2].Name())
	}
	xs := make([]*runtime.Tensor, n)
	srcs := make([]*runtime.Tensor, n)
	dsts := make([]*runtime.Tensor, n)
	for r := range n {
		xs[r] = cpuTensor(t, devs[r], []float32{float32(r + 1), float32(10 * (r + 1)), 0.5})
		srcs[r] = cpuTensor(t, devs[r], []float32{float32(r), float32(-r)})
		dsts[r] = cpuTensor(t, devs[r], make([]float32, 2*n))
	}
	for round := range 2 {
		var wg sync.WaitGroup
		errs := make([]error, n)
		for r := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if errs[r] = comms[r].AllReduceSum(xs[r], devs[r].Compute()); errs[r] != nil {
					return
				}
				errs[r] = comms[r].AllGather(dsts[r], srcs[r], devs[r].Compute())
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		scale := float32(1)
		if round == 1 {
			scale = n // the second round sums the sums
		}
		for r := range n {
			got := xs[r].F32()
			if got[0] != 6*scale || got[1] != 60*scale || got[2] != 1.5*scale {
				t.Fatalf("round %d rank %d: all-reduce gave %v", round, r, got)
			}
			if d := dsts[r].F32(); d[0] != 0 || d[2] != 1 || d[3] != -1 || d[4] != 2 || d[5] != -2 {
				t.Fatalf("round %d rank %d: all-gather gave %v", round, r, d)
			}
		}
	}
	if comms[1].Rank() != 1 || comms[1].Size() != n {
		t.Fatalf("rank %d of %d", comms[1].Rank(), comms[1].Size())
	}
}

// TestCPUGroupAbort: a rank waiting in a collective returns when another
// aborts, with an error naming the cause; later collectives fail too.
func TestCPUGroupAbort(t *testing.T) {
	g, err := runtime.NewCPUGroup(2)
	if err != nil {
		t.Fatal(err)
	}
	dev := runtime.NewCPU(0)
	x := cpuTensor(t, dev, []float32{1})
	done := make(chan error)
	go func() { done <- g.Member(0).AllReduceSum(x, dev.Compute()) }()
	g.Member(1).Abort(errors.New("rank 1's forward failed"))
	err = <-done
	if !errors.Is(err, runtime.ErrCommAborted) || !strings.Contains(err.Error(), "rank 1's forward failed") {
		t.Fatalf("waiting rank got %v", err)
	}
	if err := g.Member(1).AllReduceSum(x, dev.Compute()); !errors.Is(err, runtime.ErrCommAborted) {
		t.Fatalf("after abort: %v", err)
	}
}

// TestCPUGroupMismatch: ranks in different collectives, or bringing
// different shapes, get errors instead of a wrong result.
func TestCPUGroupMismatch(t *testing.T) {
	dev := runtime.NewCPU(0)
	g, _ := runtime.NewCPUGroup(2)
	a, b := cpuTensor(t, dev, []float32{1, 2}), cpuTensor(t, dev, []float32{1, 2, 3})
	done := make(chan error)
	go func() { done <- g.Member(0).AllReduceSum(a, dev.Compute()) }()
	err1 := g.Member(1).AllReduceSum(b, dev.Compute())
	err0 := <-done
	if err0 == nil || err1 == nil || !strings.Contains(err1.Error(), "shapes and dtypes must agree") {
		t.Fatalf("shape mismatch: %v / %v", err0, err1)
	}
	g2, _ := runtime.NewCPUGroup(2)
	dst := cpuTensor(t, dev, make([]float32, 4))
	go func() { done <- g2.Member(0).AllReduceSum(a, dev.Compute()) }()
	errGather := g2.Member(1).AllGather(dst, a, dev.Compute())
	errReduce := <-done
	for _, err := range []error{errGather, errReduce} {
		if !errors.Is(err, runtime.ErrCommAborted) || !strings.Contains(err.Error(), "out of step") {
			t.Fatalf("an all-gather meeting an all-reduce: %v", err)
		}
	}
	if _, err := runtime.NewCPUGroup(0); err == nil {
		t.Fatal("a group of 0 ranks")
	}
}
