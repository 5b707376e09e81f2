package offload

import (
	"fmt"

	"github.com/flextensor-go/flextensor/runtime"
)

// Block is a manual trap: a named region of a forward pass that is not a
// module of its own. Its compute time is measured like a unit's and reported
// in the timing table; the weights it reads stay where their modules put
// them (non-unit parameters are resident).
type Block struct {
	m    *Manager
	name string
}

// OffloadBlock returns a manual trap named blockName on the named manager.
// It is an error before Offload.
func OffloadBlock(blockName, name string) (*Block, error) {
	m := GetOffloadManager(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.e == nil {
		return nil, fmt.Errorf("offload manager %q: OffloadBlock(%q) before Offload: %w", m.name, blockName, ErrNotOffloaded)
	}
	if blockName == "" {
		return nil, fmt.Errorf("offload manager %q: OffloadBlock needs a name", m.name)
	}
	return &Block{m: m, name: blockName}, nil
}

// Name is the block's trap name.
func (b *Block) Name() string { return b.name }

// Run runs fn as the block. It must be called inside a forward pass of the
// offloaded model (the pass holds the manager).
func (b *Block) Run(fn func() error) error {
	e := b.m.e
	if e == nil {
		return fmt.Errorf("offload block %q: manager %q holds no model: %w", b.name, b.m.name, ErrNotOffloaded)
	}
	if !e.inForward {
		return fmt.Errorf("offload block %q: Run outside a forward pass of the offloaded model", b.name)
	}
	c := e.dev.Compute()
	start, err := c.Record()
	if err != nil {
		return err
	}
	ferr := fn()
	end, err := c.Record()
	if err != nil {
		return err
	}
	if e.phase == PhaseInference && e.cfg.OffloadTiming != TimingOff {
		e.timing.blocks = append(e.timing.blocks, blockRun{name: b.name, start: start, end: end})
	}
	return ferr
}

// blockRun is one Run of a block in the pass being measured.
type blockRun struct {
	name       string
	start, end runtime.Event
}
