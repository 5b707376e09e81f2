package all_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flextensor-go/flextensor/offload"
)

// TestHostReplanTimingTable: a generation (prompt, then one-token decode
// steps, as run-model drives it) with the timing report on, under a host
// backend slower than its estimate, so that the measured-host replan moves
// layers off the host mid-run. The report collected at the end holds only
// passes of the placement in force: every host-labelled row is a unit the
// plan computes on the host and has host times and no copies, every
// streamed row is a streamed unit with no host times, each record's label
// is the placement it ran under, and the passes measured before the
// replan are counted as dropped and said so under the table.
func TestHostReplanTimingTable(t *testing.T) {
	fx := batchFixtures[0] // llama: 4 layers
	hostDev, _ := cpu(t)
	resident := load(t, fx.dir, hostDev)
	prompt := []int32{3, 17, 42, 5, 9, 11, 2}
	const steps = 14

	dev, cb := offloadDevice(t)
	defer dev.Close()
	cfg := hybridConfig(t, resident, dev, hostBackend(t), 1)
	cfg.HostBackend = sleepyHost{hostBackend(t), 30 * time.Millisecond}
	cfg.OffloadTiming = offload.TimingEager
	traced := collectTrace(&cfg)
	const name = "host-replan-timing"
	m := load(t, fx.dir, hostDev)
	mgr, release := offloadAs(t, m, &cfg, name)
	defer release()
	var firstHost []string
	generate(t, m, cb, prompt, steps, func(int) {
		if mgr.Phase() == offload.PhaseInference && firstHost == nil {
			firstHost = unitNames(offload.HostUnits(name))
		}
	})
	if ht := mgr.HostTimes(); ht.Applied != 1 {
		t.Fatalf("%d measured-host replans applied, want 1 (the test needs a placement change)", ht.Applied)
	}
	hostU := unitNames(offload.HostUnits(name))
	streamed := unitNames(offload.OffloadUnits(name))
	if slices.Equal(hostU, firstHost) {
		t.Fatalf("host units %v before and after the replan: no placement change", hostU)
	}
	r, err := mgr.CollectOffloadTiming()
	if err != nil {
		t.Fatal(err)
	}
	if r == nil || r.NumPasses() == 0 {
		t.Fatal("no passes in the timing report after the replan")
	}
	if r.DroppedPasses == 0 {
		t.Fatal("the report drops no pass although the placement changed mid-run")
	}
	rows := 0
	for _, tr := range r.Traps {
		if !strings.HasPrefix(tr.Trap, "model.layers.") {
			continue
		}
		rows++
		switch {
		case tr.Host:
			if !slices.Contains(hostU, tr.Trap) {
				t.Errorf("%s labelled host; the plan's host units are %v", tr.Trap, hostU)
			}
			if len(tr.HostMs) != tr.Passes || slices.Max(tr.TransferMs) != 0 {
				t.Errorf("host row %s: %d host samples in %d passes, transfers %v", tr.Trap, len(tr.HostMs), tr.Passes, tr.TransferMs)
			}
		case tr.Streamed:
			if !slices.Contains(streamed, tr.Trap) {
				t.Errorf("%s labelled streamed; the plan's streamed units are %v", tr.Trap, streamed)
			}
			if len(tr.HostMs) != 0 {
				t.Errorf("streamed row %s has host samples %v", tr.Trap, tr.HostMs)
			}
		default:
			if slices.Contains(hostU, tr.Trap) || slices.Contains(streamed, tr.Trap) {
				t.Errorf("%s labelled resident; host %v, streamed %v", tr.Trap, hostU, streamed)
			}
		}
	}
	if rows != len(resident.Layers) {
		t.Errorf("%d layer rows, want %d", rows, len(resident.Layers))
	}
	for _, s := range r.Snapshots {
		for _, rec := range s.Records {
			if rec.Host != slices.Contains(hostU, rec.Trap) && strings.HasPrefix(rec.Trap, "model.layers.") {
				t.Errorf("pass %d: %s recorded host=%v under host units %v", s.Pass, rec.Trap, rec.Host, hostU)
			}
		}
	}
	var plans []string
	for _, s := range traced() {
		if strings.HasPrefix(s, "plan ") {
			plans = append(plans, s)
		}
	}
	if len(plans) != 2 || !strings.HasPrefix(plans[0], "plan from profiling:") || !strings.HasPrefix(plans[1], "plan replaced after measuring host units") ||
		!strings.Contains(plans[1], fmt.Sprintf("/ %d host,", len(hostU))) || !strings.Contains(plans[1], "host unit measured") {
		t.Errorf("traced plans %q: want the profiling plan, then the measured-host replacement with %d host units", plans, len(hostU))
	}
	table := offload.FormatOffloadTimingTable(r)
	if !strings.Contains(table, "earlier passes left out") {
		t.Errorf("the table does not say passes were left out:\n%s", table)
	}
	t.Logf("host before %v, after %v; %d passes kept, %d dropped\n%s\n%s", firstHost, hostU, r.NumPasses(), r.DroppedPasses, strings.Join(plans, "\n"), table)
}
