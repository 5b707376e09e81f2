package offload_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/llama"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// wideVocabDir is deep-test with a 4096-token vocabulary: its embedding
// table (512 KiB) outweighs several layers (~86 KiB each), as Llama 3's
// 1 GiB table outweighs two of its 416 MiB layers. tied shares the table
// with the LM head.
func wideVocabDir(t *testing.T, tied bool) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "wide")
	cfg := llama.Shapes["deep-test"]
	cfg.VocabSize, cfg.TieWordEmbeddings = 4096, tied
	if err := llama.MakeCheckpoint(dir, cfg, 5, 1<<30); err != nil {
		t.Fatal(err)
	}
	return dir
}

// wideVocabSetup writes wideVocabDir(t, tied) and returns it with the
// embedding tests' prompt, the resident model's logits for it and steps
// decode steps, and the model's footprint.
func wideVocabSetup(t *testing.T, tied bool, steps int) (string, []int32, [][]float32, offload.Footprint) {
	t.Helper()
	dir := wideVocabDir(t, tied)
	prompt := []int32{5, 17, 4000, 99, 3}
	want := residentReference(t, dir, prompt, steps)
	probe, _ := hostModel(t, dir)
	fp, err := offload.Measure(probe, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return dir, prompt, want, fp
}

// sameAsResident fails the test at the first pass whose logits are not
// want's bit for bit.
func sameAsResident(t *testing.T, got, want [][]float32) {
	t.Helper()
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Fatalf("pass %d differs from the resident model", i)
		}
	}
}

// embedRun offloads dir's model onto a fresh CPU compute device under
// budget (2 transfer blocks) with FT_EMBED_HOST on or off, checks the
// logits against want bit for bit, and returns the resident unit count,
// the memory usage and the host-mapped parameters.
func embedRun(t *testing.T, dir string, budget int64, on bool, prompt []int32, want [][]float32) (int, offload.GPUMemoryUsage, []string) {
	t.Helper()
	defer offload.SetEmbedHost(on)()
	model, _ := hostModel(t, dir)
	dev := runtime.NewCPU(0)
	b, err := kernels.NewCPUBackend(dev)
	if err != nil {
		t.Fatal(err)
	}
	name := uniqueName(t)
	cfg := offload.DefaultConfig(dev)
	cfg.GPUBudget = offload.Budget{Bytes: budget}
	cfg.TransferBlocks = 2
	cfg.OffloadTiming = offload.TimingEager
	var traced []string
	cfg.Trace = func(step string, _ time.Duration) {
		if strings.HasPrefix(step, "embedding ") {
			traced = append(traced, step)
		}
	}
	if err := offload.Offload(model, &cfg, name); err != nil {
		t.Fatal(err)
	}
	got := run(t, model, strictBackend{b, dev}, prompt, len(want)-1)
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Fatalf("FT_EMBED_HOST=%v pass %d: offloaded logits differ from resident ones by up to %.3g", on, i, maxAbs(got[i], want[i]))
		}
	}
	usage, err := offload.GetGPUMemoryUsage(name)
	if err != nil {
		t.Fatal(err)
	}
	if usage.TotalBytes > budget {
		t.Errorf("engine holds %d bytes, budget %d", usage.TotalBytes, budget)
	}
	if inUse := dev.Memory().InUse - model.WorkspaceBytes(); inUse != usage.TotalBytes {
		t.Errorf("device allocator holds %d weight bytes, GetGPUMemoryUsage says %d (a mapped table must not count)", inUse, usage.TotalBytes)
	}
	res, mapped := len(offload.ResidentUnits(name)), offload.HostMappedParams(name)
	// FT_TRACE's line says where the table went.
	if len(traced) != 1 || strings.Contains(traced[0], "in mapped host memory") != (len(mapped) == 1) {
		t.Errorf("trace lines %q for host-mapped %q", traced, mapped)
	}
	if err := offload.Release(name, true); err != nil {
		t.Fatal(err)
	}
	if h := dev.HostMemory().InUse; h != 0 {
		t.Errorf("host bytes after Release: %d", h)
	}
	return res, usage, mapped
}

func maxAbs(a, b []float32) float64 {
	var d float64
	for i := range a {
		x := float64(a[i]) - float64(b[i])
		d = max(d, x, -x)
	}
	return d
}

// TestEmbedHostFreesUnits: at a budget where the embedding table decides
// how many layers stay resident, keeping it in mapped host memory makes
// more units resident (as many more as its bytes hold), the device holds
// the table's bytes less, and the logits equal the resident model's bit for
// bit (the CPU device reads the table in place); with FT_EMBED_HOST=0, and
// when everything fits, the table is on the device.
func TestEmbedHostFreesUnits(t *testing.T) {
	dir, prompt, want, fp := wideVocabSetup(t, false, 4)
	const table = 4096 * 64 * 2
	unit := fp.MaxUnitBytes
	if table < 3*unit {
		t.Fatalf("table %d bytes, unit %d: the test wants a table worth several units", table, unit)
	}
	// Room for 2 slots and 2 resident units with the table on the device.
	budget := fp.FixedBytes + 2*unit + 2*unit + unit/2
	if fp.MinBudget(2) != fp.FixedBytes-table+2*unit {
		t.Errorf("MinBudget(2) = %d, want fixed %d - table %d + 2 units of %d", fp.MinBudget(2), fp.FixedBytes, table, unit)
	}
	resOff, usageOff, mappedOff := embedRun(t, dir, budget, false, prompt, want)
	resOn, usageOn, mappedOn := embedRun(t, dir, budget, true, prompt, want)
	t.Logf("budget %d: %d units resident with the table on the device, %d with it in host memory (unit %d bytes, table %d)", budget, resOff, resOn, unit, table)
	if len(mappedOff) != 0 || usageOff.HostMappedBytes != 0 {
		t.Errorf("FT_EMBED_HOST=0 mapped %q (%d bytes)", mappedOff, usageOff.HostMappedBytes)
	}
	if !slices.Equal(mappedOn, []string{"model.embed_tokens.weight"}) || usageOn.HostMappedBytes != table {
		t.Errorf("host-mapped %q (%d bytes), want the embedding table (%d bytes)", mappedOn, usageOn.HostMappedBytes, table)
	}
	if resOn < resOff+int(table/unit)-1 || resOn <= resOff {
		t.Errorf("%d units resident with the table in host memory, %d without: want about %d more", resOn, resOff, table/unit)
	}
	// Everything fits: no offload, the table stays on the device.
	_, usageAll, mappedAll := embedRun(t, dir, fp.TotalBytes, true, prompt, want)
	if len(mappedAll) != 0 || usageAll.HostMappedBytes != 0 {
		t.Errorf("with everything resident the table went to host memory: %q", mappedAll)
	}
}

// TestEmbedHostTied: a table the LM head shares is read whole every token:
// it stays on the device while the layers stream, and the logits equal the
// resident model's.
func TestEmbedHostTied(t *testing.T) {
	dir, prompt, want, fp := wideVocabSetup(t, true, 3)
	for _, budget := range []int64{fp.MinBudget(2), fp.MinBudget(2) + 3*fp.MaxUnitBytes} {
		t.Run(fmt.Sprint(budget), func(t *testing.T) {
			_, usage, mapped := embedRun(t, dir, budget, true, prompt, want)
			if len(mapped) != 0 || usage.HostMappedBytes != 0 {
				t.Errorf("a tied table went to host memory: %q", mapped)
			}
		})
	}
}

// TestFootprintHostTable: Measure counts the bytes an offloading engine
// keeps in mapped host memory: an untied table's, none of a tied one's,
// none with FT_EMBED_HOST=0.
func TestFootprintHostTable(t *testing.T) {
	for _, c := range []struct {
		tied, on bool
		want     int64
	}{{false, true, 4096 * 64 * 2}, {true, true, 0}, {false, false, 0}} {
		func() {
			defer offload.SetEmbedHost(c.on)()
			m, _ := hostModel(t, wideVocabDir(t, c.tied))
			fp, err := offload.Measure(m, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if fp.HostTableBytes != c.want {
				t.Errorf("tied %v, FT_EMBED_HOST on %v: HostTableBytes %d, want %d", c.tied, c.on, fp.HostTableBytes, c.want)
			}
		}()
	}
}

// unmappableCPU is a cpu device whose mapped allocations fail, as on a GPU
// context without mapped pinned memory.
type unmappableCPU struct{ *runtime.CPUDevice }

func (unmappableCPU) AllocMapped(int64, string) (*runtime.DeviceBuffer, []byte, error) {
	return nil, nil, errors.New("mapping refused for the test")
}

// TestEmbedHostMapFails: when the device refuses the mapping, the table is
// uploaded to the device as before (a trace line says why), the plan
// counts it, and the logits equal the resident model's; the minimum budget
// (Footprint.Min, which counts the table as mapped) gets the table's bytes
// back instead of failing at the first plan.
func TestEmbedHostMapFails(t *testing.T) {
	dir, prompt, want, fp := wideVocabSetup(t, false, 2)
	if fp.HostTableBytes == 0 {
		t.Fatal("the footprint counts no host table")
	}
	for _, c := range []struct {
		name   string
		budget offload.Budget
	}{
		{"fixed+3units", offload.Budget{Bytes: fp.FixedBytes + 3*fp.MaxUnitBytes}},
		{"min", fp.Min(2)},
	} {
		t.Run(c.name, func(t *testing.T) { embedMapFails(t, dir, c.budget, prompt, want) })
	}
}

func embedMapFails(t *testing.T, dir string, budget offload.Budget, prompt []int32, want [][]float32) {
	model, _ := hostModel(t, dir)
	inner := runtime.NewCPU(0)
	dev := unmappableCPU{inner}
	b, err := kernels.NewCPUBackend(inner)
	if err != nil {
		t.Fatal(err)
	}
	name := uniqueName(t)
	cfg := offload.DefaultConfig(dev)
	cfg.GPUBudget = budget
	cfg.TransferBlocks = 2
	var lines []string
	cfg.Trace = func(step string, _ time.Duration) {
		if strings.HasPrefix(step, "embedding ") {
			lines = append(lines, step)
		}
	}
	if err := offload.Offload(model, &cfg, name); err != nil {
		t.Fatal(err)
	}
	defer offload.Release(name, true)
	got := run(t, model, b, prompt, 2)
	sameAsResident(t, got, want)
	if m := offload.HostMappedParams(name); len(m) != 0 {
		t.Errorf("host-mapped %q on a device that refused the mapping", m)
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "mapping it failed: mapping refused for the test") {
		t.Errorf("trace lines %q", lines)
	}
	usage, err := offload.GetGPUMemoryUsage(name)
	if err != nil {
		t.Fatal(err)
	}
	if usage.ResidentBytes < 4096*64*2 {
		t.Errorf("resident bytes %d do not hold the table", usage.ResidentBytes)
	}
	if usage.TotalBytes > budget.Bytes+4096*64*2 {
		t.Errorf("engine holds %d bytes, over budget %d plus the table", usage.TotalBytes, budget.Bytes)
	}
}

// TestEmbedHostProfileMismatch: a profile made at the minimum budget
// (Footprint.Min) with the table in mapped host memory saves budget_min.
// Loaded on a device that cannot map, its budget grows by the table's
// bytes as a Min budget does when offloading: it loads, runs as the
// resident model, and a profile saved from it has the grown budget. The
// same profile without budget_min (a plain byte budget, or one saved before
// the flag existed) fails there with ErrProfileMismatch naming the table
// and FT_EMBED_HOST, and so does either profile loaded with FT_EMBED_HOST=0
// (the footprint did not count the table then, so a Min budget does not
// grow by it). With the table mapped again both load and run as profiled.
func TestEmbedHostProfileMismatch(t *testing.T) {
	dir, prompt, want, fp := wideVocabSetup(t, false, 2)
	if fp.HostTableBytes == 0 {
		t.Fatal("the footprint counts no host table")
	}
	pdir := t.TempDir()
	func() {
		defer offload.SetEmbedHost(true)()
		model, _ := hostModel(t, dir)
		dev := runtime.NewCPU(0)
		name := uniqueName(t)
		cfg := offload.DefaultConfig(dev)
		cfg.GPUBudget, cfg.TransferBlocks, cfg.OffloadTiming = fp.Min(2), 2, offload.TimingEager
		if err := offload.Offload(model, &cfg, name); err != nil {
			t.Fatal(err)
		}
		defer offload.Release(name, true)
		b, err := kernels.NewCPUBackend(dev)
		if err != nil {
			t.Fatal(err)
		}
		run(t, model, b, prompt, 2)
		if m := offload.HostMappedParams(name); len(m) != 1 {
			t.Fatalf("profiled engine host-mapped %q, want the table", m)
		}
		if err := offload.SaveProfile(pdir, name); err != nil {
			t.Fatal(err)
		}
	}()
	st, err := offload.ReadProfile(pdir)
	if err != nil {
		t.Fatal(err)
	}
	if !st.BudgetMin || st.BudgetBytes != fp.MinBudget(2) {
		t.Fatalf("profile budget %d min %v, want %d min true", st.BudgetBytes, st.BudgetMin, fp.MinBudget(2))
	}
	oldDir := writeProfile(t, pdir, func(v map[string]any) {
		if v["budget_min"] != true {
			t.Fatalf("profile.json budget_min = %v", v["budget_min"])
		}
		delete(v, "budget_min")
	})
	// load loads profile dir p and checks the logits; saved is the profile
	// the loaded engine saves.
	load := func(t *testing.T, p string, on, mappable bool) (saved *offload.State, _ error) {
		defer offload.SetEmbedHost(on)()
		model, _ := hostModel(t, dir)
		inner := runtime.NewCPU(0)
		var dev runtime.Device = inner
		if !mappable {
			dev = unmappableCPU{inner}
		}
		name := uniqueName(t)
		cfg := offload.DefaultConfig(dev)
		if err := offload.OffloadFromProfile(model, p, &cfg, name); err != nil {
			return nil, err
		}
		defer offload.Release(name, true)
		b, err := kernels.NewCPUBackend(inner)
		if err != nil {
			t.Fatal(err)
		}
		got := run(t, model, b, prompt, 2)
		sameAsResident(t, got, want)
		out := t.TempDir()
		if err := offload.SaveProfile(out, name); err != nil {
			t.Fatal(err)
		}
		if saved, err = offload.ReadProfile(out); err != nil {
			t.Fatal(err)
		}
		return saved, nil
	}
	for _, p := range []string{pdir, oldDir} {
		if _, err := load(t, p, true, true); err != nil {
			t.Fatalf("loading %s with the table mapped: %v", p, err)
		}
	}
	t.Run("min/unmappable", func(t *testing.T) {
		saved, err := load(t, pdir, true, false)
		if err != nil {
			t.Fatalf("a Min profile on a device that cannot map: %v", err)
		}
		if !saved.BudgetMin || saved.BudgetBytes != st.BudgetBytes+fp.HostTableBytes {
			t.Errorf("re-saved budget %d min %v, want %d (the profile's %d + the table's %d) min true",
				saved.BudgetBytes, saved.BudgetMin, st.BudgetBytes+fp.HostTableBytes, st.BudgetBytes, fp.HostTableBytes)
		}
		if saved.FixedBytes != st.FixedBytes+fp.HostTableBytes {
			t.Errorf("re-saved fixed bytes %d, want %d with the table", saved.FixedBytes, st.FixedBytes+fp.HostTableBytes)
		}
	})
	for _, c := range []struct {
		name         string
		p            string
		on, mappable bool
		why          string
	}{
		{"min/FT_EMBED_HOST=0", pdir, false, true, "FT_EMBED_HOST=0"},
		{"old/FT_EMBED_HOST=0", oldDir, false, true, "FT_EMBED_HOST=0"},
		{"old/unmappable", oldDir, true, false, "mapping it failed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := load(t, c.p, c.on, c.mappable)
			if !errors.Is(err, offload.ErrProfileMismatch) {
				t.Fatalf("got %v, want ErrProfileMismatch", err)
			}
			for _, s := range []string{"model.embed_tokens.weight", c.why, "FT_EMBED_HOST on"} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
		})
	}
}

// TestEnvSwitchesMalformed: FT_EMBED_HOST and FT_HOST_BLOCK_RATES take
// unset, "0" or "1"; anything else fails Offload (and Measure, for
// FT_EMBED_HOST) with an error naming the variable, and "0"/"1" work.
func TestEnvSwitchesMalformed(t *testing.T) {
	defer offload.UnsetEmbedHost()()
	for _, c := range []struct {
		name, val string
		ok        bool
	}{
		{"FT_EMBED_HOST", "off", false}, {"FT_EMBED_HOST", "2", false}, {"FT_EMBED_HOST", "0", true}, {"FT_EMBED_HOST", "1", true},
		{"FT_HOST_BLOCK_RATES", "no", false}, {"FT_HOST_BLOCK_RATES", " 0", false}, {"FT_HOST_BLOCK_RATES", "0", true}, {"FT_HOST_BLOCK_RATES", "1", true},
	} {
		t.Run(c.name+"="+c.val, func(t *testing.T) {
			t.Setenv(c.name, c.val)
			model, _ := hostModel(t, tinyDir)
			_, merr := offload.Measure(model, nil, nil)
			dev := runtime.NewCPU(0)
			cfg := offload.DefaultConfig(dev)
			cfg.GPUBudget, cfg.TransferBlocks = offload.Budget{Bytes: 1 << 30}, 2
			name := uniqueName(t)
			err := offload.Offload(model, &cfg, name)
			if err == nil {
				defer offload.Release(name, true)
			}
			if c.ok {
				if err != nil || merr != nil {
					t.Fatalf("Offload: %v, Measure: %v", err, merr)
				}
				return
			}
			want := c.name + "=" + fmt.Sprintf("%q", c.val)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Offload: %v, want an error naming %s", err, want)
			}
			if c.name == "FT_EMBED_HOST" && (merr == nil || !strings.Contains(merr.Error(), want)) {
				t.Errorf("Measure: %v, want an error naming %s", merr, want)
			}
		})
	}
}

// TestHostBlockReallocIdleTrace: FT_HOST_BLOCK_REALLOC set where it can do
// nothing (no host backend; block rates off) gets a trace line saying why.
func TestHostBlockReallocIdleTrace(t *testing.T) {
	for _, c := range []struct{ rates, why string }{{"", "there is no host backend"}, {"0", "host block rates are off (FT_HOST_BLOCK_RATES=0)"}} {
		t.Run("rates="+c.rates, func(t *testing.T) {
			t.Setenv("FT_HOST_BLOCK_REALLOC", "2")
			t.Setenv("FT_HOST_BLOCK_RATES", c.rates)
			model, _ := hostModel(t, tinyDir)
			cfg := offload.DefaultConfig(runtime.NewCPU(0))
			cfg.GPUBudget, cfg.TransferBlocks = offload.Budget{Bytes: 1 << 30}, 2
			var lines []string
			cfg.Trace = func(step string, _ time.Duration) {
				if strings.HasPrefix(step, "host block realloc") {
					lines = append(lines, step)
				}
			}
			name := uniqueName(t)
			if err := offload.Offload(model, &cfg, name); err != nil {
				t.Fatal(err)
			}
			defer offload.Release(name, true)
			want := "host block realloc: FT_HOST_BLOCK_REALLOC=2 does nothing: " + c.why
			if len(lines) != 1 || !strings.HasPrefix(lines[0], want) {
				t.Errorf("trace lines %q, want one starting %q", lines, want)
			}
		})
	}
}
