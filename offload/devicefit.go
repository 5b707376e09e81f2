package offload

import (
	"fmt"

	"github.com/flextensor-go/flextensor/runtime"
)

// cardMemory is a device that reports the free memory of its card as the
// driver sees it (a GPU: cuda.Device.FreeMemory). The cpu device does not:
// its room is known only from a memory limit.
type cardMemory interface {
	FreeMemory() (free, total int64, err error)
}

// deviceRoom is the device memory the engine's checks compare a budget and
// the least plan with.
type deviceRoom struct {
	free  int64 // bytes the engine may hold: what others hold is taken off, the engine's own bytes count as free
	total int64 // the memory limit, or the card's size
	// card: free is the card's free memory as the driver reports it (a GPU
	// without a memory limit), not the limit less the pool's bytes in use.
	card bool
}

// deviceRoom is the room the engine has on its device when the engine
// itself holds ours bytes of it (its non-unit weights, its staging block;
// ownDeviceBytes): on a device with a memory limit, the limit less the
// bytes others hold in the device's pool; on a device without one that
// reports its card's free memory (a GPU), that free memory plus ours (the
// driver counts ours as taken). known is false when the device has neither
// (the cpu device without a limit): nothing can be checked.
func (e *engine) deviceRoom(ours int64) (room deviceRoom, known bool, err error) {
	if mem := e.dev.Memory(); mem.Limit > 0 {
		return deviceRoom{free: mem.Limit - (mem.InUse - ours), total: mem.Limit}, true, nil
	}
	c, ok := e.dev.(cardMemory)
	if !ok {
		return deviceRoom{}, false, nil
	}
	free, total, err := c.FreeMemory()
	if err != nil {
		return deviceRoom{}, false, fmt.Errorf("reading the free memory of %s: %w", e.dev.Name(), err)
	}
	return deviceRoom{free: free + ours, total: total, card: true}, true, nil
}

// ownDeviceBytes is the device memory the engine holds before its plan:
// the non-unit weights it uploaded and its staging block while it has one.
func (e *engine) ownDeviceBytes() int64 {
	n := e.fixedBytes
	if e.staging != nil {
		n += e.staging.Size()
	}
	return n
}

// modelDeviceBytes is the most device memory any plan of the engine uses:
// the non-unit weights plus every unit resident.
func (e *engine) modelDeviceBytes() int64 {
	n := e.fixedBytes
	for _, u := range e.units {
		n += u.bytes
	}
	return n
}

// budgetOverFree is the error of a byte budget (described by budgetText)
// the device has no room for, or nil. With a memory limit the budget itself
// must fit: the limit is the device's size as the caller set it. On a
// card without a limit the budget is a cap (its default is the whole card):
// what must fit is the most the plan can use of it, the budget or the
// whole model resident, whichever is less, so a budget above the model's
// size starts wherever the model fits.
func (e *engine) budgetOverFree(budget int64, budgetText string, room deviceRoom) error {
	use := budget
	if room.card {
		if m := e.modelDeviceBytes(); m < use {
			use = m
			budgetText += fmt.Sprintf(", of which the plan can use at most %s (the whole model on the device)", runtime.FormatBytes(m))
		}
	}
	if use <= room.free {
		return nil
	}
	return fmt.Errorf("budget %s exceeds the free memory of %s (%s)", budgetText, e.dev.Name(), room.describe())
}

// describe says how much of the device is free, for errors.
func (r deviceRoom) describe() string {
	if r.card {
		return fmt.Sprintf("%s free of the card's %s, counting the offload engine's own bytes as free; the rest held by other allocations (a KV cache, activations) and other processes",
			runtime.FormatBytes(r.free), runtime.FormatBytes(r.total))
	}
	return fmt.Sprintf("%s free of %s, the rest held by activations and other allocations", runtime.FormatBytes(r.free), runtime.FormatBytes(r.total))
}

// checkDeviceFit is the pre-flight check of the budget and the transfer
// blocks against the device's room (deviceRoom: its free memory with ours,
// the engine's own device bytes, counted as free): an explicit byte budget
// must fit in it (budgetOverFree: on a GPU without a memory limit only the
// part of the budget the model can use), and the least any plan needs (the
// non-unit weights plus min(transfer blocks, units) slots of at least the
// smallest unit, or every unit resident, which is no less) must fit in
// both it and the budget. A device whose room is unknown (the cpu device
// without a memory limit) is not checked.
func (e *engine) checkDeviceFit(ours int64) error {
	if len(e.units) == 0 {
		return nil
	}
	room, known, err := e.deviceRoom(ours)
	if err != nil || !known {
		return err
	}
	budget, err := e.budgetBytes()
	if err != nil {
		return err
	}
	minUnit := e.units[0].bytes
	for _, u := range e.units {
		minUnit = min(minUnit, u.bytes)
	}
	slots := min(max(e.cfg.TransferBlocks, 1), len(e.units))
	need := e.fixedBytes + int64(slots)*minUnit
	what := fmt.Sprintf("%s of non-unit weights plus %d transfer block(s) of at least %s (the smallest unit) = %s",
		runtime.FormatBytes(e.fixedBytes), slots, runtime.FormatBytes(minUnit), runtime.FormatBytes(need))
	budgetText := runtime.FormatBytes(budget)
	if e.cfg.GPUBudget.Min {
		budgetText += fmt.Sprintf(" (the model's minimum with %d transfer block(s))", e.cfg.TransferBlocks)
	}
	if e.cfg.GPUBudget.Bytes > 0 {
		if err := e.budgetOverFree(budget, budgetText, room); err != nil {
			return err
		}
	}
	switch {
	case budget > 0 && !e.cfg.GPUBudget.Min && need > budget:
		return fmt.Errorf("%w: budget %s is below the least any plan needs: %s", ErrBudget, runtime.FormatBytes(budget), what)
	case need > room.free:
		return fmt.Errorf("the least any plan needs, %s, exceeds the free memory of %s (%s)", what, e.dev.Name(), room.describe())
	}
	return nil
}
