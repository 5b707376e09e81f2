package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/models"
	"github.com/flextensor-go/flextensor/models/llama"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
	ftsession "github.com/flextensor-go/flextensor/session"
)

// benchDevice is one device's plan in a bench row of a sharded model.
type benchDevice struct {
	Device        string  `json:"device"`
	ResidentUnits int     `json:"resident_units"`
	StreamedUnits int     `json:"streamed_units"`
	Slots         int     `json:"transfer_blocks"`
	StreamedBytes int64   `json:"streamed_bytes"`
	H2DGBps       float64 `json:"h2d_gbps"`
	FloorMs       float64 `json:"floor_ms"`
	TransferMs    float64 `json:"transfer_floor_ms"`
	PredictedMs   float64 `json:"predicted_ms"`
}

// benchTargets are what bench offloads: each shard of a sharded session
// with its device, or the one model on its device.
func benchTargets(s *session) ([]*llama.Model, []runtime.Device) {
	if shards := s.Model.Shards(); len(shards) > 0 {
		return shards, s.Devices
	}
	return []*llama.Model{s.Model}, []runtime.Device{s.Device}
}

// sessDevices names the session's devices ("cuda:0,cuda:1").
func sessDevices(s *session) string {
	if len(s.Devices) == 0 {
		return s.Device.Name()
	}
	names := make([]string, len(s.Devices))
	for i, d := range s.Devices {
		names[i] = d.Name()
	}
	return strings.Join(names, ",")
}

// loadResident loads the session's checkpoint again, whole on its device,
// or cut over its devices (with communicators of its own) when sharded.
func loadResident(s *session) (*llama.Model, *loader.Checkpoint, error) {
	if len(s.Devices) <= 1 {
		return ftsession.Load(s.Dir, s.Device)
	}
	comms, err := ftsession.Communicators(s.Devices)
	if err != nil {
		return nil, nil, err
	}
	m, ck, err := models.LoadSharded(s.Dir, s.Devices, s.Backends, comms)
	if err != nil {
		for _, c := range comms {
			c.Close()
		}
		return nil, nil, err
	}
	return m, ck, nil
}

// releaseAll releases the offload managers names, keeping the models.
func releaseAll(names []string) error {
	var errs []error
	for _, n := range names {
		errs = append(errs, offload.Release(n, true))
	}
	return errors.Join(errs...)
}

// fillPlanRows fills row from the plans of managers names, one per device
// (fillPlanRow for one; sums and the slowest device's times for several,
// with each device's plan in row.Devices).
func fillPlanRows(row *benchRow, names []string, devs []runtime.Device) error {
	if len(names) == 1 {
		return fillPlanRow(row, names[0], devs[0])
	}
	sum := *row
	for i, name := range names {
		one := *row
		if err := fillPlanRow(&one, name, devs[i]); err != nil {
			return err
		}
		sum.BudgetBytes = one.BudgetBytes // per device
		sum.Slots = one.Slots
		sum.ResidentUnits += one.ResidentUnits
		sum.StreamedUnits += one.StreamedUnits
		sum.StreamedBytes += one.StreamedBytes
		sum.DeviceBytes += one.DeviceBytes
		sum.PinnedBytes += one.PinnedBytes
		sum.TransferMs = max(sum.TransferMs, one.TransferMs)
		sum.FloorMs = max(sum.FloorMs, one.FloorMs)
		sum.PredictedMs = max(sum.PredictedMs, one.PredictedMs)
		if sum.H2DGBps == 0 || one.H2DGBps < sum.H2DGBps {
			sum.H2DGBps = one.H2DGBps // the slowest link
		}
		sum.Devices = append(sum.Devices, benchDevice{Device: devs[i].Name(), ResidentUnits: one.ResidentUnits,
			StreamedUnits: one.StreamedUnits, Slots: one.Slots, StreamedBytes: one.StreamedBytes, H2DGBps: one.H2DGBps,
			FloorMs: one.FloorMs, TransferMs: one.TransferMs, PredictedMs: one.PredictedMs})
	}
	*row = sum
	return nil
}

// printPerDevice writes a sharded row's devices under it, and the
// aggregate host-to-device rate the measured time implies.
func printPerDevice(w io.Writer, row benchRow) {
	for _, d := range row.Devices {
		fmt.Fprintf(w, "  %-8s %5d %5d %5d %9.2f %8.1f %10.2f %10.2f   (transfer floor %.2f ms = streamed bytes / this link's H2D)\n",
			d.Device, d.ResidentUnits, d.StreamedUnits, d.Slots, float64(d.StreamedBytes)/1e9, d.H2DGBps, d.FloorMs, d.PredictedMs, d.TransferMs)
	}
	if len(row.Devices) > 0 && row.AggregateGBps > 0 {
		fmt.Fprintf(w, "  aggregate: %.2f GB streamed per forward over %d links in %.2f ms = %.1f GB/s\n",
			float64(row.StreamedBytes)/1e9, len(row.Devices), row.MeasuredMs, row.AggregateGBps)
	}
}
