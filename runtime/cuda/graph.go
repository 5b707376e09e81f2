//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"sync"
)

// Graph is work captured from a stream (cuStreamBeginCapture …
// cuStreamEndCapture) and instantiated: Launch replays all of it as one
// launch, with the kernels' arguments as they were captured.
type Graph struct {
	dev   *Device
	g     cGraph
	x     cGraphExec
	nodes int
	once  sync.Once
}

// Capture records the work fn enqueues on s into a Graph instead of running
// it. The capture is relaxed: the capturing thread may still make other CUDA
// calls (allocations, synchronous copies), which run at once and are not
// recorded. fn must enqueue work only on s (or on streams it joins to s
// through events).
func (s *Stream) Capture(fn func() error) (*Graph, error) {
	if err := cCaptureBegin(s.dev.ctx, s.s); err != nil {
		return nil, s.op("begin capture", err)
	}
	ferr := fn()
	g, err := cCaptureEnd(s.dev.ctx, s.s)
	if ferr != nil || err != nil {
		if g != nil {
			cGraphDestroy(s.dev.ctx, nil, g)
		}
		return nil, errors.Join(ferr, s.op("end capture", err))
	}
	x, err := cGraphInstantiate(s.dev.ctx, g)
	if err != nil {
		cGraphDestroy(s.dev.ctx, nil, g)
		return nil, s.op("instantiate graph", err)
	}
	return &Graph{dev: s.dev, g: g, x: x, nodes: cGraphNodes(g)}, nil
}

// Nodes is the number of operations in the graph.
func (g *Graph) Nodes() int { return g.nodes }

// Launch enqueues one replay of the graph on s.
func (g *Graph) Launch(s *Stream) error {
	if g.x == nil {
		return fmt.Errorf("%s: launch of a destroyed graph", g.dev.Name())
	}
	return s.op("graph launch", cGraphLaunch(g.dev.ctx, g.x, s.s))
}

// Destroy frees the graph; replays already enqueued still run.
func (g *Graph) Destroy() error {
	var err error
	g.once.Do(func() {
		err = cGraphDestroy(g.dev.ctx, g.x, g.g)
		g.x, g.g = nil, nil
	})
	return err
}
