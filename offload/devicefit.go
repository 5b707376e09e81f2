package offload

import (
	"fmt"

	"github.com/flextensor-go/flextensor/nn"
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

// budgetOverFree is the error of a budget (described by budgetText)
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
	return fmt.Errorf("budget %s exceeds the free memory of %s (%s): %w", budgetText, e.dev.Name(), room.describe(), runtime.ErrOutOfMemory)
}

// budgetText describes the resolved budget (bytes) as the user gave it,
// for errors: the bytes, and the fraction they are of the device or that
// they are the model's minimum.
func (e *engine) budgetText(budget int64) string {
	b := e.cfg.GPUBudget
	switch {
	case b.Bytes > 0 && b.Min:
		return fmt.Sprintf("%s (the model's minimum with %d transfer block(s))", runtime.FormatBytes(budget), e.cfg.TransferBlocks)
	case b.Bytes == 0 && b.Fraction > 0:
		return fmt.Sprintf("%s (%.3g of the device's %s)", runtime.FormatBytes(budget), b.Fraction, runtime.FormatBytes(DeviceCapacity(e.dev)))
	}
	return runtime.FormatBytes(budget)
}

// givenBudgetOverFree is budgetOverFree for the budget the user gave,
// resolved to budget bytes, where it is checked against the room: a byte
// budget on any device whose room is known, and a fraction on a card
// without a memory limit (min(fraction × card, the model) must fit the
// free memory: the plan does not cut it, see startInference). A fraction
// on a device with a limit is not checked: the plan cuts it to the free
// memory. The default budget (none given: the device's capacity) is not
// checked either: on a card it is the whole card, and the plan keeps
// min(card, model) resident without cutting it to the free memory (as
// before this check existed), so a model larger than the card's free
// memory but not than the card can fail when the plan's memory is
// allocated; only the least plan is checked against the free memory.
func (e *engine) givenBudgetOverFree(budget int64, room deviceRoom) error {
	b := e.cfg.GPUBudget
	if b.Bytes > 0 || (b.Fraction > 0 && room.card) {
		return e.budgetOverFree(budget, e.budgetText(budget), room)
	}
	return nil
}

// describe says how much of the device is free, for errors.
func (r deviceRoom) describe() string {
	if r.card {
		return fmt.Sprintf("%s free of the card's %s, counting the offload engine's own bytes as free; the rest held by other allocations (a KV cache, activations) and other processes",
			runtime.FormatBytes(r.free), runtime.FormatBytes(r.total))
	}
	return fmt.Sprintf("%s free of %s, the rest held by activations and other allocations", runtime.FormatBytes(r.free), runtime.FormatBytes(r.total))
}

// leastPlan is the least budget the plan after profiling can be made
// under (leastBudget, the planner's own floor), for the engine's units as
// it will plan them: their bytes, the units forced onto the host
// (Config.HostUnits with a host backend) and the units that will be
// announced (experts: units under a module that is an nn.ChildAnnouncer;
// the rest are only known once a forward announced them). Every unit under
// such a module counts, not only the children it names to nn.Announce:
// after profiling markAnnounced marks them all the same way (a router, or
// an expert's Linears made units by a custom Include, are data-dependent
// there too), so this floor is the one the plan then uses
// (TestPreflightFloorCustomUnits). Forced host
// units the plan after profiling would refuse are an error here: one that
// cannot be computed on the host (hostInputs), or any beside announced
// units (makePoolPlan).
func (e *engine) leastPlan() (planFloor, error) {
	forced, err := e.forcedHostUnits()
	if err != nil {
		return planFloor{}, err
	}
	var announcers []nn.Module
	if e.model != nil {
		announcers = childAnnouncers(e.model)
	}
	in := PlanInput{FixedBytes: e.fixedBytes, Slots: e.cfg.TransferBlocks}
	for _, u := range e.units {
		pu := PlanUnit{Name: u.name, Bytes: u.bytes, Announced: u.announced || underAnnouncer(u.mod, announcers), ForceHost: forced[u]}
		if pu.ForceHost && (pu.Announced || len(u.shared) > 0) {
			return planFloor{}, hostUnitErr(u.name) // as hostInputs says after profiling
		}
		in.Units = append(in.Units, pu)
	}
	// The plan after profiling refuses forced host units beside announced
	// ones (makePoolPlan): say so now, with its words.
	if err := poolForceHostErr(&in); err != nil {
		return planFloor{}, err
	}
	return leastBudget(in), nil
}

// childAnnouncers is the modules of model that say they announce their
// children (nn.ChildAnnouncer).
func childAnnouncers(model nn.Module) []nn.Module {
	var as []nn.Module
	for _, m := range nn.Modules(model) {
		if a, ok := m.(nn.ChildAnnouncer); ok && a.AnnouncesChildren() {
			as = append(as, m)
		}
	}
	return as
}

// underAnnouncer reports whether unit module mod is below one of
// announcers (the engine counts it announced: leastPlan).
func underAnnouncer(mod nn.Module, announcers []nn.Module) bool {
	for _, a := range announcers {
		if mod != a && under(mod, a) {
			return true
		}
	}
	return false
}

// checkDeviceFit is the pre-flight check of the budget and the transfer
// blocks. Whatever the device, a budget (a byte count, or a fraction or
// "min" resolved against the device) must hold the least plan the planner
// can make (leastPlan: its own floor), else an error wrapping ErrBudget;
// a budget above the model's size is a cap and passes. Against the
// device's room (deviceRoom: its free memory with ours, the engine's own
// device bytes, counted as free), where it is known, an explicit byte
// budget must fit (budgetOverFree: on a GPU without a memory limit only
// the part of the budget the model can use) and so must the least plan;
// those errors wrap runtime.ErrOutOfMemory. A fractional budget on a GPU
// without a limit is checked the same way (givenBudgetOverFree); the
// default budget (none given) is not, only the least plan is. The cpu
// device without a memory limit has no known room: only the budget is
// checked there.
func (e *engine) checkDeviceFit(ours int64) error {
	if len(e.units) == 0 {
		return nil
	}
	budget, err := e.budgetBytes()
	if err != nil {
		return err
	}
	least, err := e.leastPlan()
	if err != nil {
		return err
	}
	parts := least.describe(runtime.FormatBytes)
	what := fmt.Sprintf("%s: %s", runtime.FormatBytes(least.bytes), parts)
	budgetText := e.budgetText(budget)
	if budget > 0 && least.bytes > budget {
		return fmt.Errorf("%w: budget %s is below the least any plan needs, %s (%d < %d bytes): %s",
			ErrBudget, budgetText, runtime.FormatBytes(least.bytes), budget, least.bytes, parts)
	}
	room, known, err := e.deviceRoom(ours)
	if err != nil || !known {
		return err
	}
	if err := e.givenBudgetOverFree(budget, room); err != nil {
		return err
	}
	if least.bytes > room.free {
		return fmt.Errorf("the least any plan needs, %s, exceeds the free memory of %s (%s): %w", what, e.dev.Name(), room.describe(), runtime.ErrOutOfMemory)
	}
	return nil
}
