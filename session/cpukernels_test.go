package session_test

import (
	"errors"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/kernels/host"
	"github.com/flextensor-go/flextensor/session"
)

// TestOpenDeviceCPUKernels: the "cpu" device runs the host kernels unless
// FT_CPU_KERNELS=reference; the devices of a sharded model ("cpu:N") run
// the reference ones; a bad value is an error naming the variable; closing
// the device stops the host kernels' workers.
func TestOpenDeviceCPUKernels(t *testing.T) {
	before := goruntime.NumGoroutine()
	dev, b, err := session.OpenDevice("cpu", 0)
	if err != nil {
		t.Fatal(err)
	}
	hb, ok := b.(*host.Backend)
	if !ok {
		dev.Close()
		t.Fatalf("cpu: backend %T, want *host.Backend", b)
	}
	helpers := hb.Engine().Threads() - 1
	if err := dev.Close(); err != nil {
		t.Fatal(err)
	}
	// The pool's helpers return once Close's quit job reaches them.
	deadline := time.Now().Add(5 * time.Second)
	for goruntime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := goruntime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines after the device closed, %d before it opened (the pool had %d helpers)", n, before, helpers)
	}

	for _, c := range []struct{ name, env string }{{"cpu", "reference"}, {"cpu:1", ""}, {"cpu:0", "host"}} {
		t.Setenv(session.CPUKernelsEnv, c.env)
		dev, b, err := session.OpenDevice(c.name, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := b.(*kernels.CPUBackend); !ok {
			t.Errorf("%s with %s=%q: backend %T, want the reference *kernels.CPUBackend", c.name, session.CPUKernelsEnv, c.env, b)
		}
		if err := dev.Close(); err != nil {
			t.Error(err)
		}
	}

	t.Setenv(session.CPUKernelsEnv, "fast")
	if _, _, err := session.OpenDevice("cpu", 0); !errors.Is(err, session.ErrBadOptions) || !strings.Contains(err.Error(), session.CPUKernelsEnv) ||
		!strings.Contains(err.Error(), `"fast"`) {
		t.Errorf("OpenDevice with %s=fast: %v, want an error wrapping ErrBadOptions naming the variable and the value", session.CPUKernelsEnv, err)
	}
}
