package main

import (
	"fmt"
	"io"
	"time"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/kernels/host"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/runtime"
	ftsession "github.com/flextensor-go/flextensor/session"
)

// benchHostLayer is bench-host --layer: one host-placed decoder layer's
// step, stage by stage, against its separate ops and its GEMVs alone.
func benchHostLayer(o *benchHostOptions, level host.Level, stdout io.Writer) error {
	if err := checkLayer(o); err != nil {
		return err
	}
	dev := runtime.NewCPU(0)
	defer dev.Close()
	hb, err := host.New(dev, host.Options{Threads: o.threads, Level: level})
	if err != nil {
		return err
	}
	defer hb.Close()
	cfg := decoder.HostLayerBenchConfig{Scale: o.scale, Context: o.context, Layers: o.layers}
	mem := "Go heap (--layer-pinned heap)"
	switch o.pinned {
	case "heap":
	case "":
		// What the engine's host units read, without a GPU: blocks mapped
		// as runtime/cuda maps its pinned ones, less the page-locking.
		mem = "huge-page host memory mapped as the engine's pinned blocks (runtime/hostmem; --layer-pinned heap: Go heap)"
		cfg.Alloc = hostmemLayerAlloc(dev)
	default:
		pdev, _, err := ftsession.OpenDevice(o.pinned, 0)
		if err != nil {
			return usagef("--layer-pinned %q: %v", o.pinned, err)
		}
		defer pdev.Close()
		mem = pdev.Name() + " pinned host memory"
		cfg.Alloc = func(n int64, label string) (*runtime.DeviceBuffer, func(), error) {
			hbuf, err := pdev.AllocHost(n, label)
			if err != nil {
				return nil, nil, err
			}
			buf, err := dev.Wrap(hbuf.Bytes()[:n], label)
			if err != nil {
				hbuf.Free()
				return nil, nil, err
			}
			return buf, hbuf.Free, nil
		}
	}
	h, err := decoder.NewHostLayerBenchWith(hb, cfg)
	if err != nil {
		return err
	}
	defer h.Close()
	read, err := hb.Engine().ReadBandwidth(256<<20, 3)
	if err != nil {
		return err
	}
	r, err := h.Measure(o.iters)
	if err != nil {
		return err
	}
	e := hb.Engine()
	ms := func(d time.Duration) float64 { return d.Seconds() * 1e3 }
	gbs := func(d time.Duration) float64 { return float64(r.Bytes) / d.Seconds() / 1e9 }
	fmt.Fprintf(stdout, "host layer: Llama-3-8B shape / %d, %.1f MB of BF16 weights, context %d, one token; level %v, %d threads; %d steps each (medians)\n",
		o.scale, float64(r.Bytes)/1e6, o.context, e.Level(), e.Threads(), o.iters)
	fmt.Fprintf(stdout, "read bandwidth (STREAM-like sum over 256 MiB): %.1f GB/s; the layer's bytes at that rate: %.3f ms\n", read, float64(r.Bytes)/read/1e6)
	var blocks [][]byte
	for _, b := range h.WeightBlocks() {
		blocks = append(blocks, b.Bytes())
	}
	fmt.Fprintf(stdout, "weights: %d distinct layer(s) the steps rotate over, in %s; %s\n\n", h.Layers(), mem, hugePagesLine(blocks))
	fmt.Fprintf(stdout, "%-34s %9s %8s %7s\n", "path", "ms", "GB/s", "%read")
	for _, row := range []struct {
		name string
		d    time.Duration
	}{{"layer as placed (FT_HOST_LAYER)", r.Layer}, {"separate ops (FT_HOST_LAYER=0)", r.Separate}, {"GEMVs alone (floor)", r.GEMVs}} {
		fmt.Fprintf(stdout, "%-34s %9.3f %8.1f %6.0f%%\n", row.name, ms(row.d), gbs(row.d), 100*gbs(row.d)/read)
	}
	if r.Stages.Steps == 0 {
		fmt.Fprintln(stdout, "\nno stage table: the one-op layer is off (FT_HOST_LAYER=0) or the level is generic")
		return nil
	}
	var total time.Duration
	for _, t := range r.Stages.Time {
		total += t
	}
	fmt.Fprintf(stdout, "\none-op layer by stage (medians of %d steps; %.3f ms in all):\n", r.Stages.Steps, ms(total))
	fmt.Fprintf(stdout, "%-14s %9s %6s %8s\n", "stage", "µs", "share", "GB/s")
	byStage := map[kernels.DecodeStage]int64{kernels.StageQKV: r.QKVBytes, kernels.StageO: r.OBytes, kernels.StageGateUp: r.GateUpBytes, kernels.StageDown: r.DownBytes}
	for s := range kernels.NumDecodeStages {
		t := r.Stages.Time[s]
		bw := ""
		if b := byStage[s]; b > 0 && t > 0 {
			bw = fmt.Sprintf("%8.1f", float64(b)/t.Seconds()/1e9)
		}
		fmt.Fprintf(stdout, "%-14s %9.1f %5.1f%% %s\n", s, t.Seconds()*1e6, 100*float64(t)/float64(total), bw)
	}
	return nil
}
