package offload_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/models/llama"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// profiled offloads the tiny model with a budget that streams half of it,
// drives it into INFERENCE, saves the profile and returns its directory and
// the logits of the run.
func profiled(t *testing.T, dir string, prompt []int32) (string, [][]float32) {
	t.Helper()
	f := newFixture(t, dir, 0)
	name := uniqueName(t)
	cfg := offload.DefaultConfig(f.dev)
	cfg.GPUBudget = offload.Budget{Bytes: 1200 << 10}
	cfg.TransferBlocks = 2
	if err := offload.Offload(f.model, &cfg, name); err != nil {
		t.Fatal(err)
	}
	out := run(t, f.model, f.backend, prompt, 5)
	pdir := filepath.Join(t.TempDir(), "profile")
	if err := offload.SaveProfile(pdir, name); err != nil {
		t.Fatal(err)
	}
	if err := offload.Release(name, true); err != nil {
		t.Fatal(err)
	}
	return pdir, out
}

// TestProfileRestart: a restart from the saved profile goes straight to
// INFERENCE with the same plan and computes bit-identical outputs, both when
// the model was loaded into host memory and when built on the meta device
// and filled from the checkpoint, which reads every byte once.
func TestProfileRestart(t *testing.T) {
	prompt := []int32{21, 22, 23, 24}
	pdir, want := profiled(t, tinyDir, prompt)
	st, err := offload.ReadProfile(pdir)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("from host weights", func(t *testing.T) {
		f := newFixture(t, tinyDir, 0)
		name := uniqueName(t)
		cfg := offload.DefaultConfig(f.dev)
		if err := offload.OffloadFromProfile(f.model, pdir, &cfg, name); err != nil {
			t.Fatal(err)
		}
		defer offload.Release(name, true)
		mgr := offload.GetOffloadManager(name)
		if p := mgr.Phase(); p != offload.PhaseInference {
			t.Fatalf("phase after OffloadFromProfile: %v", p)
		}
		plan, _ := mgr.Plan()
		if !slices.Equal(plan.Resident, st.Plan.Resident) || plan.Slots != st.Plan.Slots {
			t.Fatalf("plan %v/%d, profile %v/%d", plan.Resident, plan.Slots, st.Plan.Resident, st.Plan.Slots)
		}
		got := run(t, f.model, f.backend, prompt, 5)
		for i := range want {
			if !slices.Equal(got[i], want[i]) {
				t.Fatalf("pass %d differs from the profiled run", i)
			}
		}
	})

	t.Run("from the checkpoint", func(t *testing.T) {
		dev := runtime.NewCPU(0)
		name := uniqueName(t)
		cfg := offload.DefaultConfig(dev)
		m, ck, err := llama.LoadFromProfile(tinyDir, st, cfg, name, true)
		if err != nil {
			t.Fatal(err)
		}
		if ck.BytesRead() != ck.TotalBytes() {
			t.Errorf("read %d bytes of a %d-byte checkpoint; want each byte once", ck.BytesRead(), ck.TotalBytes())
		}
		var streamed int64
		for i, u := range st.Units {
			if !st.Plan.Resident[i] {
				streamed += u.Bytes
			}
		}
		// The profile's plan streams units, so the embedding table stays in
		// mapped host memory too (embedhost.go).
		usage, err := offload.GetGPUMemoryUsage(name)
		if err != nil {
			t.Fatal(err)
		}
		if offload.EmbedHostOn() && usage.HostMappedBytes == 0 {
			t.Error("the embedding table of a streaming plan is not in mapped host memory")
		}
		if h := dev.HostMemory().InUse; h != streamed+usage.HostMappedBytes {
			t.Errorf("host (pinned) bytes %d, want the streamed units' %d + the mapped table's %d", h, streamed, usage.HostMappedBytes)
		}
		b, _ := kernels.NewCPUBackend(dev)
		got := run(t, m, strictBackend{b, dev}, prompt, 5)
		for i := range want {
			if !slices.Equal(got[i], want[i]) {
				t.Fatalf("pass %d differs from the profiled run", i)
			}
		}
		if err := offload.Release(name, false); err != nil {
			t.Fatal(err)
		}
		m.Close()
		ck.Close()
		if err := dev.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

func writeProfile(t *testing.T, pdir string, edit func(map[string]any)) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(pdir, offload.ProfileFileName))
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	edit(v)
	out := t.TempDir()
	data, _ = json.Marshal(v)
	if err := os.WriteFile(filepath.Join(out, offload.ProfileFileName), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestProfileBadInput(t *testing.T) {
	pdir, _ := profiled(t, tinyDir, []int32{1, 2})
	tryOffload := func(t *testing.T, dir string, limit int64) error {
		f := newFixture(t, tinyDir, limit)
		name := uniqueName(t)
		cfg := offload.DefaultConfig(f.dev)
		err := offload.OffloadFromProfile(f.model, dir, &cfg, name)
		if err == nil {
			offload.Release(name, true)
			return nil
		}
		if m := f.dev.Memory(); m.InUse != 0 {
			t.Errorf("failed OffloadFromProfile left %d device bytes", m.InUse)
		}
		if h := f.dev.HostMemory(); h.InUse != 0 {
			t.Errorf("failed OffloadFromProfile left %d pinned bytes", h.InUse)
		}
		// The model is as before: it still runs on its own weights.
		hb, _ := kernels.NewCPUBackend(f.host)
		run(t, f.model, hb, []int32{1}, 0)
		return err
	}

	t.Run("another model", func(t *testing.T) {
		deep := deepDir(t)
		other, _ := profiled(t, deep, []int32{1, 2})
		err := tryOffload(t, other, 0)
		if !errors.Is(err, offload.ErrProfileMismatch) || !strings.Contains(err.Error(), "model.embed_tokens.weight") {
			t.Fatalf("error = %v; want a mismatch naming model.embed_tokens.weight", err)
		}
	})
	t.Run("tensor shape", func(t *testing.T) {
		dir := writeProfile(t, pdir, func(v map[string]any) {
			ts := v["tensors"].([]any)
			for _, x := range ts {
				m := x.(map[string]any)
				if m["name"] == "model.layers.2.mlp.down_proj.weight" {
					m["shape"] = []int{128, 353}
				}
			}
		})
		err := tryOffload(t, dir, 0)
		if !errors.Is(err, offload.ErrProfileMismatch) || !strings.Contains(err.Error(), "model.layers.2.mlp.down_proj.weight has shape [128 352]") {
			t.Fatalf("error = %v", err)
		}
	})
	t.Run("schema version", func(t *testing.T) {
		dir := writeProfile(t, pdir, func(v map[string]any) { v["schema_version"] = 99 })
		err := tryOffload(t, dir, 0)
		if !errors.Is(err, offload.ErrProfileSchema) || !strings.Contains(err.Error(), "version 99") {
			t.Fatalf("error = %v", err)
		}
	})
	t.Run("corrupt", func(t *testing.T) {
		dir := t.TempDir()
		data, _ := os.ReadFile(filepath.Join(pdir, offload.ProfileFileName))
		os.WriteFile(filepath.Join(dir, offload.ProfileFileName), data[:len(data)/2], 0o644)
		err := tryOffload(t, dir, 0)
		if err == nil || !strings.Contains(err.Error(), "corrupt") || !strings.Contains(err.Error(), dir) {
			t.Fatalf("error = %v", err)
		}
	})
	t.Run("budget over free memory", func(t *testing.T) {
		// The plan's peak: 2 slots of 370 KiB and 128 KiB of head and norm
		// (its embedding table stays in mapped host memory).
		err := tryOffload(t, pdir, 800<<10)
		if err == nil || !strings.Contains(err.Error(), "is free") || !strings.Contains(err.Error(), "new profile") {
			t.Fatalf("error = %v", err)
		}
	})
	t.Run("strict missing tensors", func(t *testing.T) {
		st, err := offload.ReadProfile(pdir)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		ck, _ := loader.OpenCheckpoint(tinyDir)
		var keep []loader.NamedTensor
		for _, n := range ck.Names() {
			if n == "model.layers.1.mlp.up_proj.weight" || n == "model.norm.weight" {
				continue
			}
			info, _ := ck.Info(n)
			b, _ := ck.Bytes(n)
			keep = append(keep, loader.NamedTensor{Name: n, DType: info.DType, Shape: info.Shape, Data: slices.Clone(b)})
		}
		ck.Close()
		cfgData, _ := os.ReadFile(filepath.Join(tinyDir, "config.json"))
		os.WriteFile(filepath.Join(dir, "config.json"), cfgData, 0o644)
		if err := loader.WriteFile(filepath.Join(dir, "model.safetensors"), keep, nil); err != nil {
			t.Fatal(err)
		}
		dev := runtime.NewCPU(0)
		_, _, err = llama.LoadFromProfile(dir, st, offload.DefaultConfig(dev), uniqueName(t), true)
		if err == nil || !strings.Contains(err.Error(), "model.layers.1.mlp.up_proj.weight") || !strings.Contains(err.Error(), "model.norm.weight") {
			t.Fatalf("error = %v; want both missing tensors listed", err)
		}
		if err := dev.Close(); err != nil {
			t.Error(err)
		}
	})
	t.Run("unwritable directory", func(t *testing.T) {
		f := newFixture(t, tinyDir, 0)
		name := uniqueName(t)
		cfg := offload.DefaultConfig(f.dev)
		if err := offload.OffloadFromProfile(f.model, pdir, &cfg, name); err != nil {
			t.Fatal(err)
		}
		defer offload.Release(name, true)
		file := filepath.Join(t.TempDir(), "a-file")
		os.WriteFile(file, nil, 0o644)
		err := offload.SaveProfile(filepath.Join(file, "profile"), name)
		if err == nil || !strings.Contains(err.Error(), "a-file") {
			t.Fatalf("SaveProfile under a file = %v", err)
		}
	})
	t.Run("read-only mode", func(t *testing.T) {
		f := newFixture(t, tinyDir, 0)
		name := uniqueName(t)
		cfg := offload.DefaultConfig(f.dev)
		cfg.ProfileReadOnly = true
		if err := offload.OffloadFromProfile(f.model, pdir, &cfg, name); err != nil {
			t.Fatal(err)
		}
		defer offload.Release(name, true)
		if err := offload.SaveProfile(t.TempDir(), name); !errors.Is(err, offload.ErrReadOnly) {
			t.Fatalf("SaveProfile in read-only mode = %v", err)
		}
	})
}

// TestMissingTensorsError: the strict error for a checkpoint lacking many
// tensors of a profile counts them and names only the first five, then
// how many more; a few are all named; each wraps ErrProfileMismatch.
func TestMissingTensorsError(t *testing.T) {
	if err := offload.MissingTensorsError("checkpoint x", nil); err != nil {
		t.Errorf("nothing missing: %v, want nil", err)
	}
	var many []string
	for i := range 76 {
		many = append(many, fmt.Sprintf("model.layers.%02d.w", i))
	}
	err := offload.MissingTensorsError("checkpoint x", many)
	msg := fmt.Sprint(err)
	if !errors.Is(err, offload.ErrProfileMismatch) || !strings.Contains(msg, "checkpoint x lacks 76 tensors") ||
		!strings.Contains(msg, "model.layers.00.w, model.layers.01.w, model.layers.02.w, model.layers.03.w, model.layers.04.w … and 71 more") ||
		strings.Contains(msg, "model.layers.05.w") {
		t.Errorf("76 missing: %v; want ErrProfileMismatch counting 76, naming the first 5 and 71 more", err)
	}
	err = offload.MissingTensorsError("checkpoint x", many[:5])
	if msg := fmt.Sprint(err); !errors.Is(err, offload.ErrProfileMismatch) || !strings.HasSuffix(msg, "model.layers.03.w, model.layers.04.w") || strings.Contains(msg, "more") {
		t.Errorf("5 missing: %v; want all 5 named and no more", err)
	}
}
