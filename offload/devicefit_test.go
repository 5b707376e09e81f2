package offload

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/runtime"
)

// fakeCard is a device without a memory limit that reports its card's free
// memory, as a GPU does (cuda.Device.FreeMemory, TotalMemory); the memory
// itself is a cpu device's.
type fakeCard struct {
	runtime.Device
	free, total int64 // what the "driver" reports
	err         error
}

func (f *fakeCard) Name() string { return "fake-gpu" }

func (f *fakeCard) FreeMemory() (free, total int64, err error) { return f.free, f.total, f.err }

func (f *fakeCard) TotalMemory() int64 { return f.total }

const mib = 1 << 20

// fitEngine is an engine with just what the device-fit check reads:
// fixed MiB of non-unit weights and units of the given MiB.
func fitEngine(dev runtime.Device, budget string, blocks int, fixed int64, units ...int64) (*engine, error) {
	var b Budget
	if budget != "" {
		var err error
		if b, err = ParseBudget(budget); err != nil {
			return nil, err
		}
	}
	e := &engine{dev: dev, fixedBytes: fixed * mib, cfg: Config{GPUBudget: b, TransferBlocks: blocks}, phase: PhaseDiscovery}
	for i, n := range units {
		e.units = append(e.units, &unit{idx: i, name: fmt.Sprint("layer", i), bytes: n * mib})
	}
	return e, nil
}

// TestCheckDeviceFitCard: on a device without a memory limit that reports
// its card's free memory (a GPU), the pre-flight check compares with that
// free memory plus the engine's own bytes: a byte budget is a cap, so one
// above the model's size passes wherever the model fits and fails only
// when the model (or the budget, when smaller) does not, naming the budget,
// what the plan can use and the free memory; the least plan is checked
// too; a driver error is reported; a cpu device without a limit is not
// checked.
func TestCheckDeviceFitCard(t *testing.T) {
	cpu := runtime.NewCPU(0)
	defer cpu.Close()
	// The model: 1 MiB of non-unit weights (the engine's own), 4 units of
	// 2 MiB: at most 9 MiB on the device.
	for _, c := range []struct {
		name   string
		budget string
		blocks int
		free   int64 // MiB the driver reports free (the engine's own 1 MiB not in it)
		want   []string
	}{
		{"a budget above the model and above the free memory", "100MiB", 1, 20, nil},
		{"a budget that fits only with the engine's own bytes", "5MiB", 1, 4, nil},
		{"the default budget (the card)", "", 1, 20, nil},
		{"a budget over the free memory", "5MiB", 1, 3,
			[]string{"budget 5.00 MiB exceeds the free memory of fake-gpu", "4.00 MiB free of the card's 80.00 MiB"}},
		{"a budget above the model that does not fit", "100MiB", 1, 5,
			[]string{"budget 100.00 MiB, of which the plan can use at most 9.00 MiB", "6.00 MiB free of the card's 80.00 MiB"}},
		{"the least plan over the free memory", "", 3, 3,
			[]string{"the least any plan needs, 7.00 MiB", "3 transfer blocks of 2.00 MiB", "1.00 MiB of non-unit weights", "4.00 MiB free of the card's"}},
		// With 4 blocks the least is the whole model (1 + 4 × 2 MiB), no more.
		{"the whole model as the least plan", "", 4, 7,
			[]string{"the least any plan needs, 9.00 MiB: the whole model resident", "8.00 MiB free of the card's"}},
		{"the least plan fits", "", 3, 6, nil},
	} {
		dev := &fakeCard{Device: cpu, free: c.free * mib, total: 80 * mib}
		e, err := fitEngine(dev, c.budget, c.blocks, 1, 2, 2, 2, 2)
		if err != nil {
			t.Fatal(err)
		}
		wantOverFree(t, c.name, e.checkDeviceFit(e.ownDeviceBytes()), c.want)
	}
	boom := errors.New("driver says no")
	e, err := fitEngine(&fakeCard{Device: cpu, err: boom, total: 80 * mib}, "5MiB", 1, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.checkDeviceFit(e.ownDeviceBytes()); !errors.Is(err, boom) || !strings.Contains(err.Error(), "free memory of fake-gpu") {
		t.Errorf("a failing FreeMemory: %v; want its error, naming the device", err)
	}
	e, err = fitEngine(cpu, "100GiB", 100, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.checkDeviceFit(e.ownDeviceBytes()); err != nil {
		t.Errorf("a cpu device without a limit: %v; want no check of the room", err)
	}
}

// TestCheckDeviceFitFraction: on a card without a memory limit a
// fractional budget is checked against the free memory as a byte budget
// is: what of it the plan can use, min(fraction × card, the model), must
// fit, else an error wrapping runtime.ErrOutOfMemory naming the fraction,
// its bytes and the free memory; the default budget (none given) keeps
// passing wherever the least plan fits; and on a device with a memory
// limit a fraction over the free memory still passes (the plan cuts it to
// the free memory).
func TestCheckDeviceFitFraction(t *testing.T) {
	cpu := runtime.NewCPU(0)
	defer cpu.Close()
	// 1 MiB of non-unit weights (the engine's own) and 4 units of 2 MiB:
	// at most 9 MiB on the device; the least plan (one block) 3 MiB. The
	// card is 80 MiB.
	for _, c := range []struct {
		name   string
		budget string
		free   int64 // MiB the driver reports free (the engine's own 1 MiB not in it)
		want   []string
	}{
		{"a fraction above the model, the model fits", "0.5", 20, nil},
		{"a fraction above the model, the model fits with the engine's own bytes", "0.5", 8, nil},
		{"a fraction under the free memory", "0.05", 5, nil},
		{"a fraction above the model, the model does not fit", "0.5", 5,
			[]string{"budget 40.00 MiB (0.5 of the device's 80.00 MiB), of which the plan can use at most 9.00 MiB", "exceeds the free memory of fake-gpu", "6.00 MiB free of the card's 80.00 MiB"}},
		{"a fraction under the model over the free memory", "0.05", 2,
			[]string{"budget 4.00 MiB (0.05 of the device's 80.00 MiB) exceeds the free memory of fake-gpu", "3.00 MiB free of the card's 80.00 MiB"}},
		// The default budget is the whole card: not checked against the
		// free memory (unchanged), only the least plan is.
		{"the default budget, the model over the free memory", "", 5, nil},
	} {
		dev := &fakeCard{Device: cpu, free: c.free * mib, total: 80 * mib}
		e, err := fitEngine(dev, c.budget, 1, 1, 2, 2, 2, 2)
		if err != nil {
			t.Fatal(err)
		}
		wantOverFree(t, c.name, e.checkDeviceFit(e.ownDeviceBytes()), c.want)
	}
	// A device with a limit: 64 MiB, 60 MiB held by another allocation,
	// 5 MiB free counting the engine's 1 MiB: a fraction of 0.5 (32 MiB)
	// passes, as before (the plan cuts it to the free memory).
	limited := runtime.NewCPU(64 * mib)
	defer limited.Close()
	other, err := limited.Alloc(60*mib, "a KV cache")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Free()
	e, err := fitEngine(limited, "0.5", 1, 1, 2, 2, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.checkDeviceFit(e.ownDeviceBytes()); err != nil {
		t.Errorf("a fraction over the free memory of a device with a limit: %v; want it to pass (cut to the free memory)", err)
	}
}

// TestCheckDeviceFitBudgetFloor: the budget is checked against the
// planner's own floor (leastBudget) whether or not the device's room is
// known: one transfer block of the largest unit (not the smallest), the
// requested blocks, and a budget above the model's size passes (a cap).
func TestCheckDeviceFitBudgetFloor(t *testing.T) {
	cpu := runtime.NewCPU(0)
	defer cpu.Close()
	limited := runtime.NewCPU(64 * mib)
	defer limited.Close()
	// 1 MiB of non-unit weights, units of 1, 3 and 2 MiB: the least plan
	// with one block is 1 + 3 = 4 MiB, with two blocks 1 + 2 × 3 = 7 MiB
	// (or 1 + 3 resident + 2 × 2 = 8), the whole model 7 MiB.
	for _, dev := range []runtime.Device{cpu, limited, &fakeCard{Device: cpu, free: 60 * mib, total: 80 * mib}} {
		for _, c := range []struct {
			budget string
			blocks int
			want   string // "" passes
		}{
			{"4MiB", 1, ""},
			{"4194303", 1, "budget 4.00 MiB is below the least any plan needs, 4.00 MiB (4194303 < 4194304 bytes): one transfer block of 3.00 MiB (sized to the unit \"layer1\") + 1.00 MiB of non-unit weights"},
			{"3MiB", 1, "least any plan needs, 4.00 MiB"},
			{"6MiB", 2, "least any plan needs, 7.00 MiB (6291456 < 7340032 bytes): the whole model resident"},
			{"7MiB", 2, ""},
			{"50MiB", 2, ""},
		} {
			e, err := fitEngine(dev, c.budget, c.blocks, 1, 1, 3, 2)
			if err != nil {
				t.Fatal(err)
			}
			err = e.checkDeviceFit(e.ownDeviceBytes())
			if c.want == "" {
				if err != nil {
					t.Errorf("%s: budget %s, %d blocks: %v; want it to pass", dev.Name(), c.budget, c.blocks, err)
				}
				continue
			}
			if !errors.Is(err, ErrBudget) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: budget %s, %d blocks: %v; want ErrBudget saying %q", dev.Name(), c.budget, c.blocks, err, c.want)
			}
		}
	}
}

// TestCheckDeviceFitOwnBytes: Offload's check and Manager.CheckDeviceFit
// count the engine's own device bytes (its non-unit weights and, while it
// has one, its staging block) as free, through one definition, on a device
// with a limit as on a card.
func TestCheckDeviceFitOwnBytes(t *testing.T) {
	limited := runtime.NewCPU(16 * mib)
	defer limited.Close()
	plain := runtime.NewCPU(0)
	defer plain.Close()
	card := &fakeCard{Device: plain, free: 6 * mib, total: 80 * mib}
	for _, c := range []struct {
		name string
		dev  runtime.Device
		take func() (free func(), err error) // another allocation of 1 MiB
	}{
		// 16 MiB limit: 3 MiB of the engine's, 7 MiB of another's: 9 MiB
		// free to the engine.
		{"limit", limited, func() (func(), error) {
			b, err := limited.Alloc(1*mib, "another allocation")
			if err != nil {
				return nil, err
			}
			return b.Free, nil
		}},
		// The card reports 6 MiB free, the engine holds 3 of its own.
		{"card", card, func() (func(), error) {
			card.free -= 1 * mib
			return func() { card.free += 1 * mib }, nil
		}},
	} {
		e, err := fitEngine(c.dev, "9MiB", 1, 0, 2, 2, 2, 2, 2)
		if err != nil {
			t.Fatal(err)
		}
		fixed, err := c.dev.Alloc(1*mib, "non-unit weights")
		if err != nil {
			t.Fatal(err)
		}
		e.fixedBytes = fixed.Size()
		if e.staging, err = c.dev.Alloc(2*mib, "offload staging block"); err != nil {
			t.Fatal(err)
		}
		other, err := c.dev.Alloc(7*mib, "a KV cache")
		if err != nil {
			t.Fatal(err)
		}
		m := &Manager{name: "fit-" + c.name}
		m.setEngine(e)
		if got := e.ownDeviceBytes(); got != 3*mib {
			t.Errorf("%s: own device bytes %d; want the weights and the staging block, %d", c.name, got, 3*mib)
		}
		if err := m.CheckDeviceFit(); err != nil {
			t.Errorf("%s: Manager.CheckDeviceFit with a 9 MiB budget and 9 MiB free counting the engine's own: %v", c.name, err)
		}
		// Without the staging block counted only 7 MiB are free.
		err = e.checkDeviceFit(e.fixedBytes)
		if err == nil || !strings.Contains(err.Error(), "budget 9.00 MiB exceeds the free memory of "+c.dev.Name()) ||
			!strings.Contains(err.Error(), "7.00 MiB free of") {
			t.Errorf("%s: the check without the staging block: %v; want the 9 MiB budget over 7 MiB free", c.name, err)
		}
		release, err := c.take()
		if err != nil {
			t.Fatal(err)
		}
		err = m.CheckDeviceFit()
		if err == nil || !strings.Contains(err.Error(), "offload manager \"fit-"+c.name+"\": budget 9.00 MiB exceeds") ||
			!strings.Contains(err.Error(), "8.00 MiB free of") {
			t.Errorf("%s: Manager.CheckDeviceFit after another 1 MiB was taken: %v; want the manager's error naming 8 MiB free", c.name, err)
		}
		release()
		e.staging.Free()
		fixed.Free()
		other.Free()
	}
}

// wantOverFree checks a pre-flight result: nil when want is nil, else an
// error wrapping runtime.ErrOutOfMemory (not ErrBudget) that says every
// string of want.
func wantOverFree(t *testing.T, name string, err error, want []string) {
	t.Helper()
	switch {
	case want == nil:
		if err != nil {
			t.Errorf("%s: %v; want it to pass", name, err)
		}
		return
	case err == nil:
		t.Errorf("%s: passed; want an error", name)
		return
	}
	if !errors.Is(err, runtime.ErrOutOfMemory) || errors.Is(err, ErrBudget) {
		t.Errorf("%s: %v; want it to wrap runtime.ErrOutOfMemory (and not ErrBudget)", name, err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: %v; want it to say %q", name, err, w)
		}
	}
}
