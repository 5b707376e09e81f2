package offload_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// panicBackend panics inside the armed block's forward: SiLUMul runs once
// per Tower block, so its k-th call of a forward is block k.
type panicBackend struct {
	kernels.Backend
	armed atomic.Int32 // block to panic in, -1 for none
	calls atomic.Int32 // SiLUMul calls in the current forward
}

func (p *panicBackend) SiLUMul(out, gate, up *runtime.Tensor) error {
	k := p.calls.Add(1) - 1
	if k == p.armed.Load() {
		p.armed.Store(-1)
		panic(fmt.Sprintf("unit forward panics in block %d", k))
	}
	return p.Backend.SiLUMul(out, gate, up)
}

// forward runs the tower once and returns its output (or the recovered panic).
func (p *panicBackend) forward(tower *Tower, x *runtime.Tensor) (out []float32, err error, recovered any) {
	p.calls.Store(0)
	defer func() { recovered = recover() }()
	got, err := tower.Forward(p, x)
	if err != nil {
		return nil, err, nil
	}
	defer got.Buffer().Free()
	return append([]float32(nil), got.F32()...), nil, nil
}

// releaseWithin releases the manager on another goroutine and fails the test
// if that does not return within d (a manager left locked blocks forever).
func releaseWithin(t *testing.T, name string, d time.Duration) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- offload.Release(name, true) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Release: %v", err)
		}
	case <-time.After(d):
		t.Fatalf("Release did not return within %v: the manager is still locked", d)
	}
}

// TestPanicInUnitForward: a unit's forward panics in DISCOVERY, PROFILING or
// INFERENCE (in a streamed and in a resident unit) and the caller recovers.
// The engine abandons the pass: the panic reaches the caller, the manager is
// unlocked (Release returns), and the next forwards are correct, with or
// without a Release in between.
func TestPanicInUnitForward(t *testing.T) {
	const depth, dim, hidden = 6, 32, 64
	const blockBytes = 3 * dim * hidden * 4
	for _, c := range []struct {
		name     string
		before   int    // good forwards before the panicking one
		phase    string // the phase the panic happens in
		streamed bool   // in INFERENCE: panic in a streamed unit (else a resident one)
	}{
		{"discovery", 0, "DISCOVERY", false},
		{"profiling", 1, "PROFILING", false},
		{"profiling-last", 2, "PROFILING", false},
		{"inference-streamed", 3, "INFERENCE", true},
		{"inference-resident", 3, "INFERENCE", false},
		{"inference-later", 7, "INFERENCE", true},
	} {
		for _, release := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/release=%v", c.name, release), func(t *testing.T) {
				host, gpu := runtime.NewCPU(0), runtime.NewCPU(0)
				tower, err := NewTower(host, depth, dim, hidden, 7)
				if err != nil {
					t.Fatal(err)
				}
				x, _ := runtime.NewTensor(host, runtime.F32, runtime.Shape{2, dim}, "x")
				for i := range x.F32() {
					x.F32()[i] = float32(i%5) - 2
				}
				hk, _ := kernels.NewCPUBackend(host)
				ref, err := tower.Forward(hk, x)
				if err != nil {
					t.Fatal(err)
				}
				want := append([]float32(nil), ref.F32()...)
				ref.Buffer().Free()

				name := uniqueName(t)
				cfg := offload.DefaultConfig(gpu)
				cfg.Include = []string{"blocks.*"}
				cfg.GPUBudget = offload.Budget{Bytes: 256 + 4*blockBytes} // two slots, two resident blocks
				cfg.TransferBlocks = 2
				if err := offload.Offload(tower, &cfg, name); err != nil {
					t.Fatal(err)
				}
				gk, _ := kernels.NewCPUBackend(gpu)
				pb := &panicBackend{Backend: strictBackend{gk, gpu}}
				pb.armed.Store(-1)
				xs, _ := runtime.NewTensor(gpu, runtime.F32, runtime.Shape{2, dim}, "x on device")
				copy(xs.F32(), x.F32())
				defer xs.Buffer().Free()
				check := func(what string) {
					t.Helper()
					got, err, p := pb.forward(tower, xs)
					if err != nil || p != nil {
						t.Fatalf("%s: forward: %v, panic %v", what, err, p)
					}
					for i := range want {
						if got[i] != want[i] {
							t.Fatalf("%s: output[%d] = %v, want %v", what, i, got[i], want[i])
						}
					}
				}
				for i := 0; i < c.before; i++ {
					check(fmt.Sprintf("forward %d", i))
				}
				mgr := offload.GetOffloadManager(name)
				if got := mgr.Phase().String(); got != c.phase {
					t.Fatalf("phase before the panic %s, want %s", got, c.phase)
				}
				block := 1
				if c.phase == "INFERENCE" {
					block = -1
					units := offload.ResidentUnits(name)
					if c.streamed {
						units = offload.OffloadUnits(name)
					}
					if len(units) == 0 {
						t.Fatalf("no unit to panic in (streamed %v)", c.streamed)
					}
					fmt.Sscanf(strings.TrimPrefix(units[len(units)-1].Name, "blocks."), "%d", &block)
				}
				pb.armed.Store(int32(block))
				_, err, p := pb.forward(tower, xs)
				if p == nil || !strings.Contains(fmt.Sprint(p), "panics in block") {
					t.Fatalf("the panic did not reach the caller: recovered %v, error %v", p, err)
				}
				// Reading the state takes the manager's mutex: bounded too.
				stc := make(chan offload.PipelineState, 1)
				go func() { stc <- offload.PipelineStateOf(name) }()
				var st offload.PipelineState
				select {
				case st = <-stc:
				case <-time.After(10 * time.Second):
					t.Fatal("the manager is still locked after the panic")
				}
				if st.InForward || st.Active != "" || st.Failed != nil {
					t.Fatalf("after the panic: in forward %v, active unit %q, failed %v", st.InForward, st.Active, st.Failed)
				}
				if st.Issued != 0 || st.Entered != 0 || st.Exited != 0 {
					t.Fatalf("after the panic the pipeline was not resynchronised: %+v", st)
				}
				if release {
					releaseWithin(t, name, 10*time.Second)
					// The model runs on its own weights again.
					got, err := tower.Forward(hk, x)
					if err != nil {
						t.Fatal(err)
					}
					for i := range want {
						if got.F32()[i] != want[i] {
							t.Fatalf("after Release: output[%d] = %v, want %v", i, got.F32()[i], want[i])
						}
					}
					got.Buffer().Free()
				} else {
					// Further forwards without Release: correct, and the
					// engine goes on to (and through) INFERENCE.
					for i := 0; i < 6; i++ {
						check(fmt.Sprintf("forward %d after the panic", i))
					}
					if got := mgr.Phase().String(); got != "INFERENCE" {
						t.Fatalf("phase after the panic and six forwards %s, want INFERENCE", got)
					}
					releaseWithin(t, name, 10*time.Second)
				}
				xs.Buffer().Free()
				if n := gpu.Memory().InUse; n != 0 {
					t.Fatalf("device bytes after Release: %d", n)
				}
				if n := gpu.HostMemory().InUse; n != 0 {
					t.Fatalf("pinned bytes after Release: %d", n)
				}
			})
		}
	}
}
