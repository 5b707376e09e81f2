package decoder

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"unsafe"

	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/runtime"
)

// LoadCheckpoint opens the safetensors weights of the checkpoint in dir and
// binds m's parameters to them on dev (BindCheckpoint). On the CPU the
// weights stay in the mmapped files (zero copy); elsewhere they are
// uploaded. Close the model, then the checkpoint, when done; after an error
// nothing stays open or allocated.
func (m *Model) LoadCheckpoint(dir string, dev runtime.Device) (*loader.Checkpoint, error) {
	ck, err := loader.OpenCheckpoint(dir)
	if err != nil {
		return nil, err
	}
	if err := m.BindCheckpoint(ck, dev); err != nil {
		m.Close()
		ck.Close()
		return nil, err
	}
	return ck, nil
}

// SupportedWeightDType reports whether the kernels take weights of dtype d.
func SupportedWeightDType(d runtime.DType) bool {
	return d == runtime.BF16 || d == runtime.F16 || d == runtime.F32
}

// BindCheckpoint binds every parameter to the checkpoint tensor of the same
// name on dev, checking shapes and dtypes. Errors name the tensor and the
// checkpoint directory; nothing stays allocated after an error.
func (m *Model) BindCheckpoint(ck *loader.Checkpoint, dev runtime.Device) error {
	if err := m.checkUnused(ck); err != nil {
		m.Close()
		return err
	}
	shapes := m.ParamShapes()
	var up *uploader
	defer func() {
		if up != nil {
			up.close()
		}
	}()
	for _, p := range nn.Parameters(m) {
		name := p.Name()
		info, err := ck.Info(name)
		if err != nil {
			m.Close()
			return err
		}
		if want := shapes[name]; !runtime.Shape(info.Shape).Equal(want) {
			m.Close()
			return fmt.Errorf("checkpoint %s: tensor %s has shape %v, the config (%s) implies %v",
				ck.Dir(), name, runtime.Shape(info.Shape), m.Cfg.Summary(), want)
		}
		if !SupportedWeightDType(info.DType) {
			m.Close()
			return fmt.Errorf("checkpoint %s: tensor %s has dtype %v; the kernels take BF16, F16 or F32 weights",
				ck.Dir(), name, info.DType)
		}
		data, err := ck.Bytes(name)
		if err != nil {
			m.Close()
			return err
		}
		var buf *runtime.DeviceBuffer
		switch d := dev.(type) {
		case *runtime.CPUDevice:
			if uintptr(unsafe.Pointer(unsafe.SliceData(data)))%uintptr(info.DType.Size()) == 0 {
				buf, err = d.Wrap(data, name)
			} else { // misaligned in the file: copy so typed views stay aligned
				buf, err = d.Alloc(int64(len(data)), name)
				if err == nil {
					copy(buf.Bytes(), data)
				}
			}
		case *runtime.MetaDevice:
			buf, err = d.Alloc(int64(len(data)), name)
		default:
			if up == nil {
				up = &uploader{dev: dev}
			}
			buf, err = up.upload(data, name)
		}
		if err != nil {
			m.Close()
			return fmt.Errorf("loading %s onto %s: %w", name, dev.Name(), err)
		}
		m.owned = append(m.owned, buf)
		t, err := runtime.TensorOn(buf, 0, info.DType, runtime.Shape(info.Shape))
		if err != nil {
			m.Close()
			return err
		}
		if err := p.Bind(t); err != nil {
			m.Close()
			return err
		}
	}
	if up != nil {
		return up.close()
	}
	return nil
}

// UnusedTensors lists the checkpoint tensors no parameter of m binds
// (sorted), leaving out those transformers also ignores: rotary_emb.inv_freq
// buffers of older checkpoints, and the LM head of a model whose config ties
// it to the embeddings.
func (m *Model) UnusedTensors(ck *loader.Checkpoint) []string {
	used := map[string]bool{}
	for _, p := range nn.Parameters(m) {
		used[p.Name()] = true
	}
	var out []string
	for _, n := range ck.Names() {
		switch {
		case used[n], strings.HasSuffix(n, ".rotary_emb.inv_freq"):
		case m.Cfg.TieWordEmbeddings && n == m.Names.Head+".weight":
		default:
			out = append(out, n)
		}
	}
	return out
}

// checkUnused refuses a checkpoint with tensors the config does not use
// (more layers than num_hidden_layers, a bias the config does not have):
// running it anyway would silently compute something else.
func (m *Model) checkUnused(ck *loader.Checkpoint) error {
	unused := m.UnusedTensors(ck)
	if len(unused) == 0 {
		return nil
	}
	list := unused
	if len(list) > 8 {
		list = append(slices.Clone(list[:8]), fmt.Sprintf("... (%d more)", len(unused)-8))
	}
	return fmt.Errorf("checkpoint %s: %d tensors are not used by its config (%d layers, %s): %s; config.json and the weights disagree",
		ck.Dir(), len(unused), m.Cfg.NumHiddenLayers, m.Cfg.Summary(), strings.Join(list, ", "))
}

// Close frees the weights the model loaded and its workspace. A closed model
// must not run.
func (m *Model) Close() {
	for _, b := range m.owned {
		b.Free()
	}
	m.owned = nil
	if m.ws != nil {
		m.ws.free()
		m.ws = nil
	}
}

// MissingTensors lists the parameters the checkpoint lacks (sorted).
func (m *Model) MissingTensors(ck *loader.Checkpoint) []string {
	have := map[string]bool{}
	for _, n := range ck.Names() {
		have[n] = true
	}
	var out []string
	for _, p := range nn.Parameters(m) {
		if !have[p.Name()] {
			out = append(out, p.Name())
		}
	}
	sort.Strings(out)
	return out
}

// uploader copies host bytes to device memory through one reusable staging
// host buffer on the device's compute stream.
type uploader struct {
	dev   runtime.Device
	stage *runtime.HostBuffer
}

const stageBytes = 64 << 20

func (u *uploader) upload(data []byte, label string) (*runtime.DeviceBuffer, error) {
	buf, err := u.dev.Alloc(int64(len(data)), label)
	if err != nil {
		return nil, err
	}
	if u.stage == nil {
		if u.stage, err = u.dev.AllocHost(stageBytes, "weight upload staging"); err != nil {
			buf.Free()
			return nil, err
		}
	}
	s := u.dev.Compute()
	for off := 0; off < len(data); off += stageBytes {
		n := min(stageBytes, len(data)-off)
		if err := s.Synchronize(); err != nil { // the stage is free again
			buf.Free()
			return nil, err
		}
		copy(u.stage.Bytes(), data[off:off+n])
		if err := s.CopyH2D(buf, int64(off), u.stage, 0, int64(n)); err != nil {
			buf.Free()
			return nil, err
		}
	}
	return buf, nil
}

func (u *uploader) close() error {
	if u.stage == nil {
		return nil
	}
	err := u.dev.Compute().Synchronize()
	u.stage.Free()
	u.stage = nil
	return errors.Join(err)
}
