package all_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/internal/testmodel"
	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// TestStreamExp4: a model offloaded with StreamExp4 on a CPU "device"
// (the CPU backend unpacking on the copy stream) streams its layers packed
// — the plan times each streamed layer's copy by fewer bytes than the
// layer's, and its transfer blocks hold both forms — and gives the
// resident run's logits within 1e-5 and its greedy tokens: all layers
// streamed through one block, and with the host placement too (layer 1
// on the host, the others resident or streamed packed). For every dense
// family.
func TestStreamExp4(t *testing.T) {
	for _, fx := range batchFixtures {
		for _, host := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/host-%v", fx.family, host), func(t *testing.T) {
				prompt := []int32{3, 17, 42, 5, 9}
				const steps = 5
				hostDev, rb := cpu(t)
				resident := load(t, fx.dir, hostDev)
				want := testmodel.Run(t, resident, rb, prompt, steps)
				fp, err := offload.Measure(resident, nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				dev, cb := offloadDevice(t)
				defer dev.Close()
				cfg := offload.DefaultConfig(dev)
				if host { // layer 1 on the host
					cfg = hybridConfig(t, resident, dev, hostBackend(t), 1)
				}
				cfg.GPUBudget, cfg.TransferBlocks = fp.Min(1), 1 // the least budget: one block, with room for a packed copy (Min)
				cfg.StreamExp4, cfg.Unpacker = true, cb
				m := load(t, fx.dir, hostDev)
				mgr, release := offloadAs(t, m, &cfg, fmt.Sprintf("%s-exp4-%v", fx.family, host))
				defer release()
				sb := strictBackend{cb, dev}
				testmodel.Run(t, m, sb, prompt, steps) // discovery and profiling
				got := testmodel.Run(t, m, sb, prompt, steps)
				matchResident(t, got, want)
				for i := range want {
					if g, w := kernels.Argmax(got[i]), kernels.Argmax(want[i]); g != w {
						t.Fatalf("step %d: greedy token %d, want %d", i, g, w)
					}
				}
				plan, err := mgr.Plan()
				if err != nil {
					t.Fatal(err)
				}
				in, err := mgr.PlanInput()
				if err != nil {
					t.Fatal(err)
				}
				streamed := 0
				for u, pu := range in.Units {
					if plan.Resident[u] || plan.IsHost(u) {
						continue
					}
					streamed++
					if pu.CopyBytes <= 0 || pu.CopyBytes >= pu.Bytes || plan.SlotBytes < pu.Bytes+pu.CopyBytes {
						t.Errorf("streamed unit %s: %d bytes, copies of %d, blocks of %d: want a packed copy smaller than the unit and blocks holding both",
							pu.Name, pu.Bytes, pu.CopyBytes, plan.SlotBytes)
					}
				}
				if streamed == 0 || (host && len(mgr.HostUnits()) == 0) {
					t.Fatalf("plan: %d streamed, host units %v", streamed, unitNames(mgr.HostUnits()))
				}
			})
		}
	}
}

// TestStreamExp4Config: StreamExp4 without an Unpacker, or with an FP8
// stream dtype, is an Offload error naming the setting.
func TestStreamExp4Config(t *testing.T) {
	hostDev, _ := cpu(t)
	dev, cb := offloadDevice(t)
	defer dev.Close()
	for _, c := range []struct {
		name string
		set  func(*offload.Config)
		want string
	}{
		{"no unpacker", func(c *offload.Config) { c.StreamExp4 = true }, "needs an Unpacker"},
		{"fp8", func(c *offload.Config) { c.StreamExp4, c.Unpacker, c.StreamDType = true, cb, runtime.F8E4M3 }, "not with stream dtype"},
	} {
		m := load(t, batchFixtures[0].dir, hostDev)
		cfg := offload.DefaultConfig(dev)
		c.set(&cfg)
		err := offload.Offload(m, &cfg, "exp4-config-"+c.name)
		if err == nil {
			offload.Release("exp4-config-"+c.name, true)
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
}

// TestStreamExp4Profile: a plan made with StreamExp4 saves (SaveProfile)
// and loads back with StreamExp4 (models.LoadFromProfile): the same
// resident and streamed units, transfer blocks holding both forms, the
// streamed layers sent packed again, and the resident run's logits within
// 1e-5. Loading it without StreamExp4, or a profile made without it with
// StreamExp4, fails naming the codec of each; a profile whose saved packed
// size is wrong fails validation.
func TestStreamExp4Profile(t *testing.T) {
	fx := batchFixtures[0]
	prompt := []int32{3, 17, 42, 5, 9}
	const steps = 4
	hostDev, resident, want := residentRun(t, fx.dir, prompt, steps)
	fp, err := offload.Measure(resident, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	dev, cb := offloadDevice(t)
	defer dev.Close()
	save := func(exp4 bool) *offload.State {
		cfg := offload.DefaultConfig(dev)
		cfg.GPUBudget, cfg.TransferBlocks = fp.Min(1), 1
		cfg.StreamExp4, cfg.Unpacker = exp4, cb
		name := fmt.Sprintf("exp4-profile-save-%v", exp4)
		m := load(t, fx.dir, hostDev)
		_, release := offloadAs(t, m, &cfg, name)
		defer release()
		testmodel.Run(t, m, cb, prompt, steps) // discovery, profiling, INFERENCE
		dir := t.TempDir()
		if err := offload.SaveProfile(dir, name); err != nil {
			t.Fatal(err)
		}
		st, err := offload.ReadProfile(dir)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	packed, plain := save(true), save(false)
	if packed.StreamCodec != "exp4" || plain.StreamCodec != "" {
		t.Fatalf("saved codecs %q and %q, want \"exp4\" and \"\"", packed.StreamCodec, plain.StreamCodec)
	}
	loadCfg := func(exp4 bool) offload.Config {
		cfg := offload.DefaultConfig(dev)
		cfg.StreamExp4, cfg.Unpacker = exp4, cb
		return cfg
	}
	for _, c := range []struct {
		name string
		st   *offload.State
		exp4 bool
		want string
	}{
		{"packed profile, plain load", packed, false, "stream codec exp4"},
		{"plain profile, packed load", plain, true, "stream codec none"},
	} {
		if _, _, err := models.LoadFromProfile(fx.dir, c.st, loadCfg(c.exp4), "exp4-profile-"+c.name, true); err == nil ||
			!strings.Contains(err.Error(), c.want) || !errors.Is(err, offload.ErrProfileMismatch) {
			t.Errorf("%s: %v, want a profile mismatch naming %q", c.name, err, c.want)
		}
	}
	// The streamed unit that sizes the transfer blocks, its packed copy a
	// byte larger.
	bad := *packed
	bad.Units = slices.Clone(packed.Units)
	big := -1
	for i, u := range bad.Units {
		if !bad.Plan.Resident[i] && (big < 0 || u.Bytes+u.CopyBytes > bad.Units[big].Bytes+bad.Units[big].CopyBytes) {
			big = i
		}
	}
	if big < 0 || bad.Units[big].CopyBytes == 0 {
		t.Fatalf("saved profile: no streamed unit with a packed copy (%+v)", bad.Plan)
	}
	bad.Units[big].CopyBytes++
	m := load(t, fx.dir, hostDev)
	if err := bad.Validate(m); err == nil || !strings.Contains(err.Error(), "transfer blocks") {
		t.Errorf("a wrong packed size: %v, want the transfer blocks' mismatch", err)
	}

	pm, pck, err := models.LoadFromProfile(fx.dir, packed, loadCfg(true), "exp4-profile-loaded", true)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := offload.Release("exp4-profile-loaded", true); err != nil {
			t.Error(err)
		}
		pm.Close()
		pck.Close()
	}()
	mgr := offload.GetOffloadManager("exp4-profile-loaded")
	plan, err := mgr.Plan()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(plan.Resident, packed.Plan.Resident) || plan.SlotBytes != packed.Plan.SlotBytes {
		t.Fatalf("loaded plan: resident %v, blocks of %d; saved %v, %d", plan.Resident, plan.SlotBytes, packed.Plan.Resident, packed.Plan.SlotBytes)
	}
	matchResident(t, testmodel.Run(t, pm, strictBackend{cb, dev}, prompt, steps), want)
	if last := mgr.LastPass(); last.Packed == 0 || last.Packed != last.Streamed {
		t.Fatalf("after loading the profile: %v; want every streamed unit packed", last)
	}
}
