package offload

import (
	"fmt"
	"strings"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/runtime"
)

// Stream dtype FP8 (Config.StreamDType = runtime.F8E4M3): when the engine
// takes a model, the Linear weights inside its units (BF16, F16 or F32, in
// host memory) are quantized to E4M3 per output channel — scale = max|row|
// / 448, an F32 [out, 1] "weight_scale" parameter added beside each weight
// (nn.Linear.SetFP8) — so the units are packed, streamed and multiplied as
// FP8 (kernels.FP8MatMuler): half the bytes per streamed forward, lossy.
// Every unit is converted, the resident ones too (units are packed before
// the plan decides which stream); the parameters outside units (embeddings,
// final norm, LM head) and Linears already FP8 stay as they are. The
// quantized copies live in host memory of the weights' device beside the
// originals until Release, which switches the Linears back to their
// original weights and frees the copies (so does a failed Offload). A
// profile saved meanwhile records the FP8 tensors; adopting it needs the
// same StreamDType. LoadModelFromProfile (weights read from a source) does
// not support it.

// quantized is one Linear the engine switched to FP8 and what to undo.
type quantized struct {
	l     *nn.Linear
	plain *runtime.Tensor // the original weight
	q, s  *runtime.DeviceBuffer
}

// streamDTypeOK reports whether StreamDType is one the engine implements.
func streamDTypeOK(d runtime.DType) bool { return d == runtime.Invalid || d == runtime.F8E4M3 }

// quantizeUnits converts the Linears under mods as Config.StreamDType says
// (nothing when it is unset). On error the Linears converted so far are
// switched back.
func (e *engine) quantizeUnits(mods []nn.Module) (err error) {
	if e.cfg.StreamDType == runtime.Invalid {
		return nil
	}
	if e.cfg.StreamDType != runtime.F8E4M3 {
		return fmt.Errorf("stream dtype %v is not supported (only F8_E4M3)", e.cfg.StreamDType)
	}
	if e.src != nil {
		return fmt.Errorf("stream dtype %v needs the weights in host memory: loading from a weight source (LoadModelFromProfile) does not support it", e.cfg.StreamDType)
	}
	defer func() {
		if err != nil {
			e.unquantize()
		}
	}()
	for _, mod := range mods {
		for _, sub := range nn.Modules(mod) {
			l, ok := sub.(*nn.Linear)
			if !ok || l.Scale != nil || l.Weight.Owner() != nn.Module(l) {
				continue // not a Linear, FP8 already, or a tied weight
			}
			w := l.Weight.Peek()
			if w == nil {
				return fmt.Errorf("parameter %s has no tensor bound; load the weights before Offload", l.Weight.Name())
			}
			if d := w.DType(); d != runtime.BF16 && d != runtime.F16 && d != runtime.F32 {
				continue
			}
			if err := e.quantizeLinear(l, w); err != nil {
				return fmt.Errorf("stream dtype %v: %s: %w", e.cfg.StreamDType, l.Weight.Name(), err)
			}
		}
	}
	return nil
}

// quantizeLinear quantizes l's plain weight w into new buffers on w's
// (host) device and switches l to them.
func (e *engine) quantizeLinear(l *nn.Linear, w *runtime.Tensor) error {
	if _, ok := w.Device().(runtime.HostMemoryDevice); !ok || (w.Bytes() == nil && w.NumElements() > 0) {
		return fmt.Errorf("the weight is on %s, not in host memory; build the model on a cpu device", w.Device().Name())
	}
	wm, err := kernels.AsMat(w)
	if err != nil {
		return err
	}
	if wm.Rows != l.Out || wm.Cols != l.In {
		return fmt.Errorf("weight %v, the Linear is [%d %d]", w.Shape(), l.Out, l.In)
	}
	qb, err := w.Device().Alloc(max(int64(l.Out)*int64(l.In), 1), "fp8 stream "+l.Weight.Name())
	if err != nil {
		return err
	}
	sb, err := w.Device().Alloc(max(int64(l.Out)*4, 1), "fp8 stream scales "+l.Weight.Name())
	if err != nil {
		qb.Free()
		return err
	}
	free := func() { qb.Free(); sb.Free() }
	q, err := runtime.TensorOn(qb, 0, runtime.F8E4M3, runtime.Shape{l.Out, l.In})
	if err != nil {
		free()
		return err
	}
	s, err := runtime.TensorOn(sb, 0, runtime.F32, runtime.Shape{l.Out, 1})
	if err != nil {
		free()
		return err
	}
	if err := kernels.QuantizeMatFP8(q.Bytes(), s.F32(), wm); err != nil {
		free()
		return err
	}
	if err := l.SetFP8(q, s, kernels.FP8Layout{}, "weight_scale"); err != nil {
		free()
		return err
	}
	e.quant = append(e.quant, quantized{l: l, plain: w, q: qb, s: sb})
	return nil
}

// unquantize switches every converted Linear back to its original weight
// and frees the quantized copies. Calling it again does nothing.
func (e *engine) unquantize() error {
	var first error
	for i := len(e.quant) - 1; i >= 0; i-- {
		q := e.quant[i]
		if err := q.l.UnsetFP8(q.plain); err != nil && first == nil {
			first = err
		}
		q.q.Free()
		q.s.Free()
	}
	e.quant = nil
	return first
}

// ParseStreamDType reads a stream dtype as the CLI spells it: "" or "auto"
// (the weights as loaded: runtime.Invalid) or "fp8" (runtime.F8E4M3, also
// spelled "f8_e4m3").
func ParseStreamDType(s string) (runtime.DType, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "auto":
		return runtime.Invalid, nil
	case "fp8", "f8_e4m3":
		return runtime.F8E4M3, nil
	}
	return runtime.Invalid, fmt.Errorf("stream dtype %q: want auto or fp8", s)
}
