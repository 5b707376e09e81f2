package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flextensor-go/flextensor/kernels/host"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/hostmem"
	ftsession "github.com/flextensor-go/flextensor/session"
)

// bench-host --copy-device DEV: does a device's host-to-device copy engine
// share the host's DRAM read rate with the host cores? It times, one after
// the other in one process: the STREAM-like read on the pool's threads
// alone, H2D copies out of the device's pinned host memory (AllocHost, the
// memory the offload engine streams weights from) alone, and both at once
// over different buffers; with --layer also one host-placed decoder layer's
// step alone and beside the copies. If the two share one rate, "reads +
// copies" sums to about "reads alone" and the layer slows by the share the
// copies take.

// dramProbeOptions are the probe's own flags (bench-host's --threads,
// --read-mib, --layer, --layer-scale, --layer-iters and --context apply too).
type dramProbeOptions struct {
	device   string // --copy-device
	copyMiB  int    // --copy-mib: the pinned source buffer
	chunkMiB int    // --copy-chunk-mib: one copy's size
	ms       int    // --probe-ms: each timed phase
}

func dramProbeFlags(o *dramProbeOptions, fs interface {
	StringVar(*string, string, string, string)
	IntVar(*int, string, int, string)
}) {
	fs.StringVar(&o.device, "copy-device", "", "measure whether H2D copies from this device's pinned host memory (e.g. cuda:0) and the host cores' reads share the DRAM read rate: reads alone, copies alone, both at once (with --layer: a host layer's step alone and beside the copies); cpu: the same with memcpy copies (a test of the probe, not of a copy engine)")
	fs.IntVar(&o.copyMiB, "copy-mib", 4096, "--copy-device: the pinned host buffer the copies read, MiB (several times the last-level cache)")
	fs.IntVar(&o.chunkMiB, "copy-chunk-mib", 64, "--copy-device: MiB per copy (the copies cycle through the buffer, two in flight)")
	fs.IntVar(&o.ms, "probe-ms", 2000, "--copy-device: milliseconds each timed phase runs")
}

// check validates the probe's sizes before anything is allocated.
func (o *dramProbeOptions) check() error {
	if o.copyMiB < 1 || o.chunkMiB < 1 || o.chunkMiB > o.copyMiB || o.ms < 1 {
		return usagef("--copy-mib %d, --copy-chunk-mib %d, --probe-ms %d: want copy-mib ≥ copy-chunk-mib ≥ 1 and probe-ms ≥ 1", o.copyMiB, o.chunkMiB, o.ms)
	}
	return nil
}

// dramProbeRow is one phase's result; a negative rate (notRun) did not
// run in it.
type dramProbeRow struct {
	Phase        string
	ReadGBs      float64       // the pool's STREAM-like read
	CopyGBs      float64       // H2D copies (bytes of the copies completed in the phase)
	Layer        time.Duration // median host layer step
	LayerRunning bool          // the row times the layer
}

// writeDRAMProbeTable prints the rows and, when the reads-alone, copies-alone
// and both-at-once rows are there, how the sum compares with each alone.
func writeDRAMProbeTable(w io.Writer, rows []dramProbeRow) {
	fmt.Fprintf(w, "%-24s %11s %12s %9s %10s\n", "phase", "reads GB/s", "copies GB/s", "sum GB/s", "layer ms")
	cell := func(v float64, width int) string {
		if v < 0 {
			return fmt.Sprintf("%*s", width, "-")
		}
		return fmt.Sprintf("%*.1f", width, v)
	}
	byPhase := map[string]dramProbeRow{}
	for _, r := range rows {
		byPhase[r.Phase] = r
		layer := fmt.Sprintf("%10s", "-")
		if r.LayerRunning {
			layer = fmt.Sprintf("%10.3f", r.Layer.Seconds()*1e3)
		}
		sum := float64(notRun)
		if r.ReadGBs >= 0 || r.CopyGBs >= 0 {
			sum = max(r.ReadGBs, 0) + max(r.CopyGBs, 0)
		}
		fmt.Fprintf(w, "%-24s %s %s %s %s\n", r.Phase, cell(r.ReadGBs, 11), cell(r.CopyGBs, 12), cell(sum, 9), layer)
	}
	ra, okR := byPhase[phaseReads]
	ca, okC := byPhase[phaseCopies]
	both, okB := byPhase[phaseBoth]
	if okR && okC && okB && ra.ReadGBs > 0 && ca.CopyGBs > 0 && both.ReadGBs >= 0 && both.CopyGBs >= 0 {
		sum := both.ReadGBs + both.CopyGBs
		fmt.Fprintf(w, "\nboth at once: %.1f GB/s = %.0f%% of reads alone (%.1f), %.0f%% of reads alone + copies alone (%.1f); reads kept %.0f%%, copies kept %.0f%%\n",
			sum, 100*sum/ra.ReadGBs, ra.ReadGBs, 100*sum/(ra.ReadGBs+ca.CopyGBs), ra.ReadGBs+ca.CopyGBs,
			100*both.ReadGBs/ra.ReadGBs, 100*both.CopyGBs/ca.CopyGBs)
	}
	la, okLA := byPhase[phaseLayer]
	lb, okLB := byPhase[phaseLayerCopies]
	if okLA && okLB && la.Layer > 0 {
		fmt.Fprintf(w, "host layer beside the copies: %.3f ms against %.3f alone (%+.0f%%)\n",
			lb.Layer.Seconds()*1e3, la.Layer.Seconds()*1e3, 100*(float64(lb.Layer)/float64(la.Layer)-1))
	}
}

// notRun marks a rate a phase did not measure.
const notRun = -1

const (
	phaseReads       = "reads alone"
	phaseCopies      = "copies alone"
	phaseBoth        = "reads + copies"
	phaseLayer       = "host layer alone"
	phaseLayerCopies = "host layer + copies"
)

// copyLoop keeps H2D copies of chunk bytes cycling through src on a stream
// of dev, two in flight, and counts the bytes of those completed.
type copyLoop struct {
	dev   runtime.Device
	s     runtime.Stream
	src   *runtime.HostBuffer
	dst   *runtime.DeviceBuffer
	chunk int64
	bytes atomic.Int64 // completed
	stop  atomic.Bool
	wg    sync.WaitGroup
	err   error
	done  chan struct{} // closed when run returns (err is then set)
}

func newCopyLoop(dev runtime.Device, srcBytes, chunk int64) (*copyLoop, error) {
	s, err := dev.NewStream("dram-probe copies")
	if err != nil {
		return nil, err
	}
	src, err := dev.AllocHost(srcBytes, "dram-probe source")
	if err != nil {
		s.Close()
		return nil, err
	}
	// Touch every page (AllocHost may hand out memory not yet faulted in).
	b := src.Bytes()
	for i := 0; i < len(b); i += 4096 {
		b[i] = byte(i >> 12)
	}
	dst, err := dev.Alloc(2*chunk, "dram-probe destination")
	if err != nil {
		src.Free()
		s.Close()
		return nil, err
	}
	return &copyLoop{dev: dev, s: s, src: src, dst: dst, chunk: chunk}, nil
}

// start runs the loop on a goroutine of its own until halt.
func (c *copyLoop) start() {
	c.stop.Store(false)
	c.done = make(chan struct{})
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.err = c.run()
		close(c.done)
	}()
}

// waitStarted waits until two copies have completed. If the loop ends
// first (a copy or an event failed), it returns the loop's error; if
// timeout passes first, an error saying so.
func (c *copyLoop) waitStarted(timeout time.Duration) error {
	deadline := time.After(timeout)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for c.bytes.Load() < 2*c.chunk {
		select {
		case <-c.done:
			if err := c.halt(); err != nil {
				return fmt.Errorf("copies: %w", err)
			}
			return errors.New("copies: the copy loop ended before two copies completed")
		case <-deadline:
			return fmt.Errorf("copies: fewer than two completed in %v", timeout)
		case <-tick.C:
		}
	}
	return nil
}

func (c *copyLoop) run() error {
	n := c.src.Size() / c.chunk
	var inflight []runtime.Event
	var off int64
	for i := int64(0); !c.stop.Load(); i++ {
		if err := c.s.CopyH2D(c.dst, (i%2)*c.chunk, c.src, off, c.chunk); err != nil {
			return err
		}
		off = ((i + 1) % n) * c.chunk
		ev, err := c.s.Record()
		if err != nil {
			return err
		}
		inflight = append(inflight, ev)
		if len(inflight) == 2 {
			if err := inflight[0].Synchronize(); err != nil {
				return err
			}
			c.bytes.Add(c.chunk)
			inflight = inflight[:copy(inflight, inflight[1:])]
		}
	}
	return c.s.Synchronize()
}

// halt stops the loop and returns its error.
func (c *copyLoop) halt() error {
	c.stop.Store(true)
	c.wg.Wait()
	return c.err
}

// rate measures the loop's GB/s while fn runs: the bytes completed between
// fn's start and end.
func (c *copyLoop) rate(fn func() error) (float64, error) {
	b0, t0 := c.bytes.Load(), time.Now()
	if err := fn(); err != nil {
		return 0, err
	}
	b1, dt := c.bytes.Load(), time.Since(t0)
	return float64(b1-b0) / dt.Seconds() / 1e9, nil
}

func (c *copyLoop) close() {
	c.dst.Free()
	c.src.Free()
	c.s.Close()
}

// readFor runs the STREAM-like read over buf on e's threads for at least d
// and returns GB/s.
func readFor(e *host.Engine, buf []float32, d time.Duration) float64 {
	var n int
	var sink float32
	t0 := time.Now()
	for n == 0 || time.Since(t0) < d {
		sink += e.ReadSum(buf)
		n++
	}
	dt := time.Since(t0)
	_ = sink
	return float64(n) * float64(len(buf)*4) / dt.Seconds() / 1e9
}

// layerFor times the layer's steps for at least iters steps and d, and
// returns the median step.
func layerFor(h *decoder.HostLayerBench, iters int, d time.Duration) (time.Duration, error) {
	var ts []time.Duration
	t0 := time.Now()
	for len(ts) < iters || time.Since(t0) < d {
		s := time.Now()
		if err := h.Step(); err != nil {
			return 0, err
		}
		ts = append(ts, time.Since(s))
	}
	slices.Sort(ts)
	return ts[len(ts)/2], nil
}

// benchDRAMProbe is bench-host --copy-device.
func benchDRAMProbe(o *benchHostOptions, level host.Level, stdout io.Writer) (err error) {
	p := &o.probe
	if err := p.check(); err != nil {
		return err
	}
	if o.layer {
		if err := checkLayer(o); err != nil {
			return err
		}
	}
	dev, _, err := ftsession.OpenDevice(p.device, 0)
	if err != nil {
		return fmt.Errorf("--copy-device %q: %w", p.device, err)
	}
	defer dev.Close()
	cpu := runtime.NewCPU(0)
	defer cpu.Close()
	hb, err := host.New(cpu, host.Options{Threads: o.threads, Level: level})
	if err != nil {
		return err
	}
	defer hb.Close()
	e := hb.Engine()
	blk, buf, err := e.MapReadBuffer(int64(o.readMiB) << 20)
	if err != nil {
		return fmt.Errorf("read buffer: %w", err)
	}
	defer blk.Free()
	cl, err := newCopyLoop(dev, int64(p.copyMiB)<<20, int64(p.chunkMiB)<<20)
	if err != nil {
		return fmt.Errorf("--copy-device %s: %w", p.device, err)
	}
	defer cl.close()
	var h *decoder.HostLayerBench
	if o.layer {
		h, err = decoder.NewHostLayerBenchWith(hb, decoder.HostLayerBenchConfig{Scale: o.scale, Context: o.context, Layers: o.layers,
			Alloc: hostmemLayerAlloc(cpu)})
		if err != nil {
			return err
		}
		defer h.Close()
	}
	d := time.Duration(p.ms) * time.Millisecond
	note := ""
	if dev.Kind() == runtime.KindCPU {
		note = " (cpu device: the copies are memcpy on a goroutine, not a copy engine)"
	}
	fmt.Fprintf(stdout, "DRAM sharing probe: reads on %d threads (level %v) over %d MiB of huge-page host memory; H2D copies to %s from %d MiB of its pinned host memory, %d MiB a copy, two in flight%s; %d ms a phase\n\n",
		e.Threads(), e.Level(), o.readMiB, dev.Name(), p.copyMiB, p.chunkMiB, note, p.ms)

	var rows []dramProbeRow
	s0 := sampleCPU()
	readFor(e, buf, 0) // warm
	rows = append(rows, dramProbeRow{Phase: phaseReads, ReadGBs: readFor(e, buf, d), CopyGBs: notRun})
	if h != nil {
		// Warm the layer, then time it alone.
		if _, err := layerFor(h, 2, 0); err != nil {
			return err
		}
		t, err := layerFor(h, o.iters, d)
		if err != nil {
			return err
		}
		rows = append(rows, dramProbeRow{Phase: phaseLayer, ReadGBs: notRun, CopyGBs: notRun, Layer: t, LayerRunning: true})
	}
	cl.start()
	defer func() {
		if herr := cl.halt(); herr != nil && err == nil {
			err = fmt.Errorf("copies: %w", herr)
		}
	}()
	// Copies under way: two completed and a while more.
	if err := cl.waitStarted(10 * time.Second); err != nil {
		return err
	}
	time.Sleep(min(d/4, 200*time.Millisecond))
	cr, err := cl.rate(func() error { time.Sleep(d); return nil })
	if err != nil {
		return err
	}
	rows = append(rows, dramProbeRow{Phase: phaseCopies, ReadGBs: notRun, CopyGBs: cr})
	var rr float64
	cr, err = cl.rate(func() error { rr = readFor(e, buf, d); return nil })
	if err != nil {
		return err
	}
	rows = append(rows, dramProbeRow{Phase: phaseBoth, ReadGBs: rr, CopyGBs: cr})
	if h != nil {
		var t time.Duration
		cr, err = cl.rate(func() error {
			var lerr error
			t, lerr = layerFor(h, o.iters, d)
			return lerr
		})
		if err != nil {
			return err
		}
		rows = append(rows, dramProbeRow{Phase: phaseLayerCopies, ReadGBs: notRun, CopyGBs: cr, Layer: t, LayerRunning: true})
	}
	if herr := cl.halt(); herr != nil {
		return fmt.Errorf("copies: %w", herr)
	}
	writeDRAMProbeTable(stdout, rows)
	if s1 := sampleCPU(); s1.total > s0.total {
		fmt.Fprintf(stdout, "CPU steal over the probe: %.2f%% of all CPUs' time; GC cycles %d\n", 100*float64(s1.steal-s0.steal)/float64(s1.total-s0.total), s1.numGC-s0.numGC)
	}
	return nil
}

// hostmemLayerAlloc maps a host layer's weights as the engine's pinned
// blocks are mapped (bench-host --layer's default memory).
func hostmemLayerAlloc(dev *runtime.CPUDevice) func(n int64, label string) (*runtime.DeviceBuffer, func(), error) {
	return func(n int64, label string) (*runtime.DeviceBuffer, func(), error) {
		blk, err := hostmem.Map(n, hostmem.Options{Huge: true})
		if err != nil {
			return nil, nil, err
		}
		buf, err := dev.Wrap(blk.Bytes(), label)
		if err != nil {
			blk.Free()
			return nil, nil, err
		}
		return buf, func() { blk.Free() }, nil
	}
}
