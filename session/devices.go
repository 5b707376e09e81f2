package session

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/flextensor-go/flextensor/models"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// ParseDevices reads a device list: one name (ParseDevice), a
// comma-separated list of them ("cuda:0,cuda:1", "cpu:0,cpu:1"), or
// "cuda:all" (every GPU present; an error when none is). A list of several
// runs one model cut over them (tensor parallelism); it may not mix CPU and
// GPU devices nor name a device twice. Errors wrap ErrUnknownDevice or
// ErrBadOptions.
func ParseDevices(list string) ([]string, error) {
	if list == "cuda:all" {
		n, err := cuda.DeviceCount()
		if err != nil {
			return nil, fmt.Errorf("device cuda:all: %w", err)
		}
		if n == 0 {
			return nil, fmt.Errorf("device cuda:all: no CUDA device is present: %w", ErrBadOptions)
		}
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("cuda:%d", i)
		}
		return out, nil
	}
	names := strings.Split(list, ",")
	if len(names) == 1 {
		if _, _, err := ParseDevice(list); err != nil {
			return nil, err
		}
		return names, nil
	}
	type key struct {
		cuda  bool
		index int
	}
	seen := map[key]string{}
	var kinds [2]int
	for i, raw := range names {
		name := strings.TrimSpace(raw)
		isCUDA, index, err := ParseDevice(name)
		if err != nil {
			return nil, fmt.Errorf("device list %q, item %d: %w", list, i, err)
		}
		if name == "cpu" {
			return nil, fmt.Errorf("device list %q: name the CPU devices of a list cpu:0, cpu:1, ...: %w", list, ErrBadOptions)
		}
		k := key{isCUDA, index}
		if prev, ok := seen[k]; ok {
			if prev != name {
				name = fmt.Sprintf("%s (as %s and %s)", name, prev, name)
			}
			return nil, fmt.Errorf("device list %q names %s twice: %w", list, name, ErrBadOptions)
		}
		seen[k] = name
		if isCUDA {
			kinds[1]++
		} else {
			kinds[0]++
		}
		names[i] = name
	}
	if kinds[0] > 0 && kinds[1] > 0 {
		return nil, fmt.Errorf("device list %q mixes CPU and GPU devices; a sharded model runs on devices of one kind: %w", list, ErrBadOptions)
	}
	return names, nil
}

// openSharded is Open over several devices: the model cut over them
// (models.LoadSharded), each shard on its device, offloaded onto it under
// the budget (per device) when one is given, or left in host memory with
// HostOnly (the caller offloads each of Model.Shards() onto Devices[i]);
// the collectives through NCCL on GPUs and an in-process group on CPU
// devices.
func (s *Session) openSharded(dir string, names []string, opts Options, budget offload.Budget, streamDType runtime.DType, trace func(string, time.Duration), stopped func() error) error {
	switch {
	case opts.ProfileDir != "":
		return fmt.Errorf("a saved profile holds one device's plan; it does not apply to %d devices: %w", len(names), ErrBadOptions)
	case opts.UnitGraphs:
		return fmt.Errorf("unit graphs are not implemented for a model sharded over %d devices: %w", len(names), ErrBadOptions)
	}
	t0 := time.Now()
	for _, name := range names {
		dev, b, err := OpenDevice(name, opts.DeviceMemory)
		if err != nil {
			return err
		}
		s.Devices = append(s.Devices, dev)
		s.Backends = append(s.Backends, b)
		if err := checkFractionBudget(budget, dev); err != nil {
			return err
		}
	}
	s.Device, s.Backend = s.Devices[0], s.Backends[0]
	trace("open devices "+strings.Join(names, ","), time.Since(t0))
	if err := stopped(); err != nil {
		return err
	}
	comms, err := Communicators(s.Devices)
	if err != nil {
		return err
	}
	bindOn := s.Devices
	offloaded := opts.GPUBudget != ""
	if offloaded || opts.HostOnly { // the shards' weights in host memory
		s.host = runtime.NewCPU(0)
		bindOn = make([]runtime.Device, len(names))
		for i := range bindOn {
			bindOn[i] = s.host
		}
	}
	t0 = time.Now()
	if s.Model, s.Checkpoint, err = models.LoadSharded(dir, bindOn, s.Backends, comms); err != nil {
		for _, c := range comms {
			c.Close()
		}
		return err
	}
	trace("load shards", time.Since(t0))
	if !offloaded {
		return stopped()
	}
	if err := stopped(); err != nil {
		return err
	}
	base := opts.Manager
	if base == "" {
		base = fmt.Sprintf("session-%d", managerSeq.Add(1))
	}
	for i, shard := range s.Model.Shards() {
		cfg := offload.DefaultConfig(s.Devices[i])
		cfg.Progress = opts.Progress
		cfg.Trace = opts.Trace
		if opts.OffloadTiming {
			cfg.OffloadTiming = offload.TimingEager
		}
		b, blocks := budget, opts.TransferBlocks
		if b.Bytes == 0 && b.Fraction == 0 { // "0": stream everything
			fp, err := offload.Measure(shard, cfg.Include, cfg.Exclude)
			if err != nil {
				return err
			}
			if blocks == 0 {
				blocks = 2
			}
			b = fp.Min(blocks)
		}
		cfg.GPUBudget, cfg.TransferBlocks, cfg.StreamDType = b, blocks, streamDType
		if err := StreamExp4Config(&cfg, opts.StreamExp4, s.Backends[i]); err != nil {
			return err
		}
		name := fmt.Sprintf("%s-rank%d", base, i)
		if err := offload.Offload(shard, &cfg, name); err != nil {
			return fmt.Errorf("%s: %w", s.Devices[i].Name(), err)
		}
		s.Managers = append(s.Managers, name)
		if i == 0 {
			s.Manager = name
		}
	}
	return stopped()
}

// Communicators makes one communicator per device, rank i on devs[i]: an
// in-process group for CPU devices, NCCL for GPUs (cuda.NewNCCLGroup).
func Communicators(devs []runtime.Device) ([]runtime.Communicator, error) {
	if len(devs) == 0 {
		return nil, errors.New("session: no devices to connect")
	}
	if devs[0].Kind() == runtime.KindCUDA {
		return cuda.NewNCCLGroup(devs)
	}
	for _, d := range devs {
		if d.Kind() != runtime.KindCPU {
			return nil, fmt.Errorf("session: %s is not a CPU device; a group is all CPU or all GPU devices: %w", d.Name(), ErrBadOptions)
		}
	}
	g, err := runtime.NewCPUGroup(len(devs))
	if err != nil {
		return nil, err
	}
	return g.Members(), nil
}
