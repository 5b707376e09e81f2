package offload

import (
	"fmt"
	"slices"
)

// Forwards that cannot compute host units. A host unit runs only where the
// model's layer loop asks where each unit runs (nn.Tree.RunsOn) and hands
// the hidden state to the host backend: decoder.Model's forwards do, its
// ForwardBatch not with BatchHostFree set, and a root without
// PlacementAsker is taken to ask. A pass that does not ask, under a plan
// with host units, would reach a unit it cannot compute, so the engine
// puts a host-free plan in force before the pass starts.
//
// Host-free plans have token buckets of their own (tokens.go), keyed apart
// from the three-way ones: a batch of one is host-free, a decode step of
// one is not. The first pass of a host-free bucket cannot wait to be
// measured, so it runs a provisional plan made from the plan in force's
// input with the host taken out; the bucket's next passes are measured and
// the measured plan replaces it. Single-sequence passes switch back to
// their three-way bucket as any bucket switch does (tokenSwitchPasses in a
// row). Units Config.HostUnits forces onto the host cannot leave it: a
// pass that cannot compute them is an error naming the unit.

// PlacementAsker is an optional interface of a model's root module: whether
// the forward being entered asks nn.Tree.RunsOn before each unit, and so
// can compute units on the host (decoder.Model: true unless a ForwardBatch
// with BatchHostFree). A root without it is taken to ask.
type PlacementAsker interface {
	PassAsksPlacement() bool
}

// hostFreePass reports whether the pass being entered must run with no
// unit on the host: the engine has a host backend and the root does not
// ask where units run.
func (e *engine) hostFreePass() bool {
	if e.cfg.HostBackend == nil {
		return false
	}
	pa, ok := e.model.(PlacementAsker)
	return ok && !pa.PassAsksPlacement()
}

// hostFreeInput is in with every unit off the host (no host time, none
// forced) at tokens per forward: the two-way planner's input.
func hostFreeInput(in PlanInput, tokens int) PlanInput {
	in.Units = slices.Clone(in.Units)
	for i := range in.Units {
		in.Units[i].HostSecPerToken, in.Units[i].ForceHost = 0, false
	}
	in.Tokens, in.HopSec = tokens, 0
	return in
}

// leaveHost puts a plan with no host unit in force before a pass that
// cannot compute host units (hostFreePass) while the plan in force has
// some: the host-free bucket's plan for the pass's tokens, made
// provisionally when the bucket has none. With plans not keyed by tokens
// (a plan adopted from a profile, or replans refused) the host-free plan
// stays in force for good.
func (e *engine) leaveHost() error {
	forced, err := e.forcedHostUnits()
	if err != nil {
		return err
	}
	for _, u := range e.units {
		if forced[u] {
			return fmt.Errorf("offload: unit %s is placed on the host by Config.HostUnits, and this forward cannot compute host units (it does not ask where units run: a decoder.Model's ForwardBatch with BatchHostFree or FT_BATCH_HOST=off); offload without HostUnits, or let it ask", u.name)
		}
	}
	t := &e.tok
	n := max(t.passT, 1)
	keyed := t.cur != 0 && t.passT > 0 && !e.noReplan
	var bk *tokenBucket
	if keyed {
		key := t.bucketFor(n, true)
		bk = t.byT[key]
		if bk == nil {
			bk = &tokenBucket{ref: n, key: key, free: true}
			t.byT[key] = bk
		}
		if bk.plan != nil {
			return e.switchTokens(bk, "")
		}
	}
	in := hostFreeInput(e.planIn, n)
	plan, err := MakePlan(in)
	if err != nil {
		return fmt.Errorf("offload: a plan with no host unit for a forward that cannot compute host units: %w", err)
	}
	if bk != nil {
		bk.plan, bk.in, bk.provisional = &plan, in, true
		return e.switchTokens(bk, "provisional until its passes are measured")
	}
	if err := e.replace(plan); err != nil {
		return e.fail(fmt.Errorf("putting a plan with no host unit in force: %w", err))
	}
	e.planIn = in
	e.tracePlan("with no host unit for good (a forward that cannot compute host units; plans not keyed by tokens)", e.plan, 0)
	return nil
}
