package offload

import (
	"fmt"

	"github.com/flextensor-go/flextensor/kernels/exp4"
)

// Packed streaming (Config.StreamExp4). A streamed unit's host block is
// exp4-packed once, into a pinned block of its own, the first time a plan
// streams it; each copy then moves the packed bytes (0.75 of BF16 weights')
// into the end of the unit's transfer block and Config.Unpacker unpacks
// them into its start on the copy stream, so the unit's ready event (what
// the compute stream waits for) comes after the unpacking. The packing is
// lossless: the unit computes with exactly its weights.
//
// The planner times a packed copy by its packed bytes and sizes each
// transfer block for both forms (PlanUnit.CopyBytes). The packed size is
// measured from the host block when there is one (a pass over it, once a
// unit); for a unit without one (resident since a profile was adopted) it
// is estimated with one escape a chunk. A plan adopted from a profile
// (State.StreamCodec "exp4", which loads only with StreamExp4) starts from
// the profile's packed sizes (UnitState.CopyBytes) and transfer blocks;
// each block is measured again when it is first packed. A unit whose packed form is not
// smaller than its bytes, or would not fit its transfer block beside them,
// travels as it is. Data-dependent units (pool.go) always travel as they
// are. Host units compute from their plain host block; the packed copy
// stays for a later plan that streams them again and is freed with the
// host block.

// copyBytes is what the planner times a copy of u by (PlanUnit.CopyBytes):
// its packed size, or 0 when u travels as it is.
func (e *engine) copyBytes(u *unit) int64 {
	if !e.cfg.StreamExp4 || u.announced || u.bytes < 2 || u.bytes%2 != 0 {
		return 0
	}
	if u.packBytes == 0 {
		if u.host == nil {
			words := u.bytes / 2
			return packedOrPlain(exp4.SizeFor(words, words/exp4.Chunk+1), u.bytes)
		}
		sz, err := exp4.Measure(u.host.Bytes()[:u.bytes])
		if err != nil {
			return 0
		}
		u.packBytes, u.packSizing = sz.Size, &sz // packFor packs with it
	}
	return packedOrPlain(u.packBytes, u.bytes)
}

// packedOrPlain is packed when it is smaller than plain, else 0 (plain).
func packedOrPlain(packed, plain int64) int64 {
	if packed < plain {
		return packed
	}
	return 0
}

// packFor gives the ring unit ru of streamed unit u its packed block, made
// now if u has none, when u travels packed: StreamExp4, a size worth it
// (copyBytes) that fits the transfer block of slotBytes beside u's bytes.
func (e *engine) packFor(u *unit, slotBytes int64, ru *ringUnit) error {
	n := e.copyBytes(u)
	if n == 0 || u.bytes+n > slotBytes {
		return nil
	}
	if u.packed == nil {
		h, err := e.st.hostBlock(n, "offload unit "+u.name+" packed")
		if err != nil {
			return fmt.Errorf("packing unit %s: %w", u.name, err)
		}
		src := u.host.Bytes()[:u.bytes]
		if u.packSizing != nil {
			_, err = exp4.PackSized(h.Bytes(), src, *u.packSizing)
		} else {
			_, err = exp4.Pack(h.Bytes(), src)
		}
		u.packSizing = nil
		if err != nil {
			h.Free()
			return fmt.Errorf("packing unit %s: %w", u.name, err)
		}
		l, err := exp4.ReadLayout(h.Bytes())
		if err != nil {
			h.Free()
			return fmt.Errorf("packing unit %s: %w", u.name, err)
		}
		u.packed, u.packLayout = h, l
	}
	ru.packed, ru.layout = u.packed, u.packLayout
	return nil
}

// dropPacked frees u's packed block (with its host block).
func (u *unit) dropPacked() {
	if u.packed != nil {
		u.packed.Free()
	}
	u.packed, u.packLayout, u.packBytes, u.packSizing = nil, exp4.Layout{}, 0, nil
}

// packedSlotsBytes is what packed copies add to the least budget
// (Budget.Min, computed from the units' plain bytes): room in each of
// TransferBlocks blocks (2 when unset) for the largest packed copy.
func (e *engine) packedSlotsBytes() int64 {
	if !e.cfg.StreamExp4 {
		return 0
	}
	var most int64
	for _, u := range e.units {
		most = max(most, e.copyBytes(u))
	}
	slots := e.cfg.TransferBlocks
	if slots == 0 {
		slots = 2
	}
	return int64(slots) * most
}
