package main

import (
	"bytes"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/flextensor-go/flextensor/runtime"
)

// TestBenchHostDRAMProbeCPU: bench-host --copy-device cpu runs every phase
// of the DRAM sharing probe (memcpy copies on the cpu device) and prints a
// rate in each phase's cells, the layer's time in the layer rows, and the
// comparison lines.
func TestBenchHostDRAMProbeCPU(t *testing.T) {
	code, out, errOut := run(t, "bench-host", "--copy-device", "cpu", "--read-mib", "4", "--copy-mib", "4", "--copy-chunk-mib", "1",
		"--probe-ms", "100", "--threads", "2", "--layer", "--layer-scale", "32", "--layer-iters", "2", "--context", "8")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	num := `[0-9]+\.[0-9]+`
	for _, re := range []string{
		`reads alone +` + num + ` +- +` + num + ` +-\n`,
		`copies alone +- +` + num + ` +` + num + ` +-\n`,
		`reads \+ copies +` + num + ` +` + num + ` +` + num + ` +-\n`,
		`host layer alone +- +- +- +` + num + `\n`,
		`host layer \+ copies +- +` + num + ` +` + num + ` +` + num + `\n`,
		`both at once: ` + num + ` GB/s = [0-9]+% of reads alone`,
		`host layer beside the copies: ` + num + ` ms against ` + num + ` alone`,
		`memcpy on a goroutine`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("output lacks %q:\n%s", re, out)
		}
	}
	// Nothing competes with the copies in their own phase: they progress.
	if regexp.MustCompile(`copies alone +- +0\.0 `).MatchString(out) {
		t.Errorf("no copy completed in the copies-alone phase:\n%s", out)
	}
}

// TestBenchHostDRAMProbeArgs: bad probe sizes and devices are clear errors
// before anything runs.
func TestBenchHostDRAMProbeArgs(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--copy-mib", "4", "--copy-chunk-mib", "8"}, 2, "want copy-mib ≥ copy-chunk-mib"},
		{[]string{"--copy-chunk-mib", "0"}, 2, "--copy-chunk-mib 0"},
		{[]string{"--probe-ms", "0"}, 2, "--probe-ms 0"},
		{[]string{"--layer", "--layer-iters", "0", "--copy-mib", "1", "--copy-chunk-mib", "1"}, 2, "--layer-iters 0"},
	} {
		args := append([]string{"bench-host", "--copy-device", "cpu", "--read-mib", "1"}, c.args...)
		code, _, errOut := run(t, args...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q: want exit %d naming %q", c.args, code, errOut, c.code, c.want)
		}
	}
	code, _, errOut := run(t, "bench-host", "--copy-device", "gpu0", "--read-mib", "1")
	if code == 0 || !strings.Contains(errOut, "gpu0") {
		t.Errorf("--copy-device gpu0: exit %d, stderr %q: want an error naming the device", code, errOut)
	}
}

// TestDRAMProbeTable: the comparison lines' shares are computed from the
// rows (hand-checked figures: 100 + 50 alone, 90 + 30 at once).
func TestDRAMProbeTable(t *testing.T) {
	var b bytes.Buffer
	writeDRAMProbeTable(&b, []dramProbeRow{
		{Phase: phaseReads, ReadGBs: 100, CopyGBs: notRun},
		{Phase: phaseLayer, ReadGBs: notRun, CopyGBs: notRun, Layer: 4 * time.Millisecond, LayerRunning: true},
		{Phase: phaseCopies, ReadGBs: notRun, CopyGBs: 50},
		{Phase: phaseBoth, ReadGBs: 90, CopyGBs: 30},
		{Phase: phaseLayerCopies, ReadGBs: notRun, CopyGBs: 40, Layer: 5 * time.Millisecond, LayerRunning: true},
	})
	out := b.String()
	for _, want := range []string{
		"both at once: 120.0 GB/s = 120% of reads alone (100.0), 80% of reads alone + copies alone (150.0); reads kept 90%, copies kept 60%",
		"host layer beside the copies: 5.000 ms against 4.000 alone (+25%)",
		"reads + copies                  90.0         30.0     120.0          -",
		"copies alone                       -         50.0      50.0          -",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	writeDRAMProbeTable(&b, []dramProbeRow{{Phase: phaseReads, ReadGBs: 100, CopyGBs: notRun}, {Phase: phaseBoth, ReadGBs: 0, CopyGBs: 0}})
	if !strings.Contains(b.String(), "reads + copies                   0.0          0.0       0.0") {
		t.Errorf("a measured rate of 0 is not printed as 0.0:\n%s", b.String())
	}
	if strings.Contains(b.String(), "both at once") {
		t.Errorf("comparison printed without the copy rows:\n%s", b.String())
	}
}

// failingCopies is a stream whose copies fail: a copy engine's error.
type failingCopies struct{ runtime.Stream }

var errInjectedCopy = errors.New("injected copy failure")

func (failingCopies) CopyH2D(*runtime.DeviceBuffer, int64, *runtime.HostBuffer, int64, int64) error {
	return errInjectedCopy
}

// TestCopyLoopEarlyError: when the copy loop fails before two copies
// complete, waiting for it returns the loop's own error at once, not a
// timeout.
func TestCopyLoopEarlyError(t *testing.T) {
	dev := runtime.NewCPU(0)
	defer dev.Close()
	cl, err := newCopyLoop(dev, 2<<20, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.close()
	cl.s = failingCopies{cl.s}
	cl.start()
	t0 := time.Now()
	err = cl.waitStarted(10 * time.Second)
	if !errors.Is(err, errInjectedCopy) || !strings.HasPrefix(err.Error(), "copies: ") {
		t.Fatalf("waitStarted: %v, want the loop's error prefixed with copies:", err)
	}
	if dt := time.Since(t0); dt > 5*time.Second {
		t.Errorf("waitStarted took %v: it waited for the timeout", dt)
	}
	// A loop that keeps running is waited for until two copies complete.
	ok, err := newCopyLoop(dev, 2<<20, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer ok.close()
	ok.start()
	if err := ok.waitStarted(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if ok.bytes.Load() < 2<<20 {
		t.Errorf("waitStarted returned after %d bytes, want at least two 1 MiB copies", ok.bytes.Load())
	}
	if err := ok.halt(); err != nil {
		t.Fatal(err)
	}
}

// TestBenchHostModeConflicts: flags the chosen mode would silently ignore
// are usage errors naming both flags, and --copy-device --layer checks the
// layer's sizes as --layer alone does (--layer-count 0 is rejected, not
// taken as 1).
func TestBenchHostModeConflicts(t *testing.T) {
	for _, c := range []struct {
		args  []string
		wants []string
	}{
		{[]string{"--chunk-map", "0.01", "--copy-device", "cpu"}, []string{"--chunk-map", "--copy-device"}},
		{[]string{"--chunk-map", "0.01", "--layer"}, []string{"--chunk-map", "--layer"}},
		{[]string{"--chunk-map", "0.01", "--layer-pinned", "heap"}, []string{"--chunk-map", "--layer-pinned"}},
		{[]string{"--chunk-map", "0.01", "--shapes", "o"}, []string{"--chunk-map", "--shapes"}},
		{[]string{"--copy-device", "cpu", "--layer", "--layer-pinned", "heap"}, []string{"--copy-device", "--layer-pinned"}},
		{[]string{"--copy-device", "cpu", "--shapes", "o"}, []string{"--copy-device", "--shapes"}},
		{[]string{"--copy-device", "cpu", "--layer", "--layer-count", "0", "--copy-mib", "1", "--copy-chunk-mib", "1"}, []string{"--layer-count 0"}},
		{[]string{"--layer", "--layer-count", "0"}, []string{"--layer-count 0"}},
	} {
		code, _, errOut := run(t, append([]string{"bench-host", "--read-mib", "1"}, c.args...)...)
		if code != 2 {
			t.Errorf("%v: exit %d, stderr %q: want exit 2", c.args, code, errOut)
		}
		for _, w := range c.wants {
			if !strings.Contains(errOut, w) {
				t.Errorf("%v: stderr %q does not name %q", c.args, errOut, w)
			}
		}
	}
}
