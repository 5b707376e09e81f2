package all_test

import (
	"os"
	goruntime "runtime"
	"runtime/pprof"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/kernels/host"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

func TestProbeHostAllocs(t *testing.T) {
	hostDev, _ := cpu(t)
	dev := runtime.NewCPU(0)
	defer dev.Close()
	cpuHost := runtime.NewCPUNamed("host", 0)
	defer cpuHost.Close()
	hbk, err := host.New(cpuHost, host.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer hbk.Close()
	m := load(t, "../../testdata/tiny-llama", hostDev)
	cb, _ := kernels.NewCPUBackend(dev)
	cfg := offload.DefaultConfig(dev)
	cfg.HostBackend = slowHost{hbk}
	cfg.HostUnits = []string{os.Getenv("PROBE_UNITS")}
	cfg.OffloadTiming = offload.TimingEager
	if err := offload.Offload(m, &cfg, "probe"); err != nil {
		t.Fatal(err)
	}
	defer offload.Release("probe", true)
	prompt := []int32{3, 17, 42, 5}
	for i := 0; i < 3; i++ {
		cache, _ := m.NewKVCache(cb, 200)
		ids := prompt
		for s := 0; s < 150; s++ {
			lt, err := m.Forward(cb, cache, ids, false)
			if err != nil {
				t.Fatal(err)
			}
			_ = lt
			ids = []int32{int32(s % 50)}
			if i == 2 && s == 20 {
				goruntime.MemProfileRate = 1
			}
		}
		cache.Free()
	}
	goruntime.GC()
	f, _ := os.Create("/tmp/h1/mem.prof")
	pprof.Lookup("allocs").WriteTo(f, 0)
	f.Close()
}
