package host

import "github.com/flextensor-go/flextensor/kernels"

// decodeState is one DecodeLayer call's five phases and everything they
// need, kept by the Backend from call to call so that a decode step
// allocates nothing on the Go heap once warm (a host stretch of 19 layers
// runs ~19 of them a token; garbage there drives GC cycles whose workers
// and stop-the-world pauses stall the pool's spinning workers). The phase
// functions are method values bound once, when the state is made.
type decodeState struct {
	b                                               *Backend
	a                                               kernels.DecodeLayer
	x, h, q, k, v, att, gate, kc, vc                []float32
	postN                                           kernels.Mat
	H, KV, d                                        int
	clk                                             stageClock
	normErr                                         error
	qkvSegs                                         [3]segment
	oSegs, downSegs                                 [1]segment
	qkv, o, down                                    multiJob
	gu                                              gateUpJob
	attn                                            attnJob
	phases                                          [5]Phase
	afterQKV, afterAttn, afterO, afterGU, afterDown func()
}

// takeDecodeState returns the backend's idle state, or a new one when
// another goroutine holds it (two models decoding on one host backend).
func (b *Backend) takeDecodeState() *decodeState {
	if s := b.dstate.Swap(nil); s != nil {
		return s
	}
	s := &decodeState{b: b}
	s.afterQKV, s.afterAttn, s.afterO, s.afterGU, s.afterDown = s.doneQKV, s.doneAttn, s.doneO, s.doneGU, s.doneDown
	return s
}

// putDecodeState keeps s for the next call, dropping its references to the
// call's memory.
func (b *Backend) putDecodeState(s *decodeState) {
	s.a = kernels.DecodeLayer{}
	s.x, s.h, s.q, s.k, s.v, s.att, s.gate, s.kc, s.vc = nil, nil, nil, nil, nil, nil, nil, nil, nil
	s.postN = kernels.Mat{}
	s.qkvSegs, s.oSegs, s.downSegs = [3]segment{}, [1]segment{}, [1]segment{}
	s.qkv, s.o, s.down = clearMulti(s.qkv), clearMulti(s.o), clearMulti(s.down)
	s.gu.out, s.gu.x, s.gu.g, s.gu.u = nil, nil, weight{}, weight{}
	s.attn.out, s.attn.q, s.attn.kCache, s.attn.vCache = nil, nil, nil, nil
	s.phases = [5]Phase{}
	s.clk, s.normErr = stageClock{}, nil
	b.dstate.Store(s)
}

func clearMulti(j multiJob) multiJob {
	j.x, j.segs = nil, nil
	return j
}

func (s *decodeState) doneQKV() {
	s.clk.mark(kernels.StageQKV)
	s.b.ropeKV(&s.a, s.q, s.k, s.v, s.kc, s.vc, s.H, s.KV, s.d)
	s.clk.mark(kernels.StageRoPEKV)
}

func (s *decodeState) doneAttn() { s.clk.mark(kernels.StageAttention) }

func (s *decodeState) doneO() {
	s.clk.mark(kernels.StageO)
	s.normErr = kernels.RMSNorm(s.h, s.x, 1, s.postN, s.a.PostEps)
	s.clk.mark(kernels.StagePostNorm)
}

func (s *decodeState) doneGU() { s.clk.mark(kernels.StageGateUp) }

func (s *decodeState) doneDown() { s.clk.mark(kernels.StageDown) }

// decodePhased is DecodeLayer as one pool job of five phases (the
// default): q/k/v (then RoPE and the cache append by the worker that
// finished it), attention, o adding into the residual (then the
// post-attention norm), gate·up·SiLU, down adding into the residual. The
// workers are handed the layer once and cross each phase boundary by a
// spin barrier.
func (b *Backend) decodePhased(a kernels.DecodeLayer, x, h, q, k, v, att, gate, kc, vc []float32, inN, postN, wq, wk, wv, wo, wg, wu, wd kernels.Mat, H, KV, d int) error {
	e := b.e
	D := len(x)
	s := b.takeDecodeState()
	defer b.putDecodeState(s)
	s.clk = newStageClock(a.Stages)
	if err := kernels.RMSNorm(h, x, 1, inN, a.InEps); err != nil {
		return err
	}
	s.clk.mark(kernels.StageNorm)
	row := KV * d
	if err := checkAttention(att, q, kc[:(a.Pos+1)*row], vc[:(a.Pos+1)*row], 1, a.Pos, H, KV, d, a.Window); err != nil {
		return err
	}
	s.a = a
	s.x, s.h, s.q, s.k, s.v, s.att, s.gate, s.kc, s.vc = x, h, q, k, v, att, gate, kc, vc
	s.postN, s.H, s.KV, s.d = postN, H, KV, d
	s.qkvSegs = [3]segment{{w: fromMat(wq), out: q, ldo: wq.Rows}, {w: fromMat(wk), out: k, ldo: wk.Rows}, {w: fromMat(wv), out: v, ldo: wv.Rows}}
	s.oSegs = [1]segment{{w: fromMat(wo), out: x, ldo: D, acc: true}}
	s.downSegs = [1]segment{{w: fromMat(wd), out: x, ldo: D, acc: true}}
	ph := &s.phases
	ph[0] = e.multiPhaseIn(&s.qkv, h, 1, s.qkvSegs[:])
	ph[0].After = s.afterQKV
	ph[1] = e.attnPhaseIn(&s.attn, att, q, kc[:(a.Pos+1)*row], vc[:(a.Pos+1)*row], 1, a.Pos, H, KV, d, a.Window)
	ph[1].After = s.afterAttn
	ph[2] = e.multiPhaseIn(&s.o, att, 1, s.oSegs[:])
	ph[2].After = s.afterO
	ph[3] = e.gateUpPhaseIn(&s.gu, gate, h, 1, wg, wu)
	ph[3].After = s.afterGU
	ph[4] = e.multiPhaseIn(&s.down, gate, 1, s.downSegs[:])
	ph[4].After = s.afterDown
	e.pool.RunPhases(ph[:])
	s.clk.step()
	return s.normErr
}
