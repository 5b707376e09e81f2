package kernels

import (
	"fmt"
	"math"
)

// RopeScaling is a checkpoint's rope_scaling: Type "default" (or "") for
// plain RoPE; "linear" (positions divided by Factor); "dynamic" (NTK-aware,
// which transformers applies only beyond the original context, so inside
// it, the only context the decoder runs, the default frequencies);
// "llama3" (Llama 3.1's frequency-dependent scaling); "yarn" (YaRN's ramp
// between interpolated and extrapolated frequencies, BetaFast/BetaSlow over
// OriginalMaxPositions); "longrope" (per-frequency ShortFactor divisors).
type RopeScaling struct {
	Type                          string
	Factor                        float64
	LowFreqFactor, HighFreqFactor float64
	OriginalMaxPositions          int
	BetaFast, BetaSlow            float64   // yarn; 0 = the defaults 32 and 1
	NoTruncate                    bool      // yarn: "truncate": false keeps the correction range fractional
	ShortFactor                   []float64 // longrope: d/2 divisors of the frequencies
}

// RopeInvFreq returns the d/2 rotation frequencies inv_freq[i] = θ^(-2i/d)
// for head dimension d (even), computed in float64 and rounded to float32.
// With s.Type "llama3" each frequency is rescaled by the rule of transformers'
// _compute_llama3_parameters: with wavelen = 2π/inv_freq, o = orig max
// positions, keep it where wavelen < o/high, divide it by factor where
// wavelen > o/low, and in between blend (1−σ)·inv_freq/factor + σ·inv_freq
// with σ = (o/wavelen − low)/(high − low).
func RopeInvFreq(headDim int, theta float64, s RopeScaling) ([]float32, error) {
	if headDim <= 0 || headDim%2 != 0 {
		return nil, fmt.Errorf("kernels.RopeInvFreq: head dimension %d, want a positive even number", headDim)
	}
	if !(theta > 0) || math.IsInf(theta, 0) {
		return nil, fmt.Errorf("kernels.RopeInvFreq: theta %v, want a positive finite number", theta)
	}
	inv := make([]float64, headDim/2)
	for i := range inv {
		inv[i] = math.Pow(theta, -float64(2*i)/float64(headDim))
	}
	switch s.Type {
	case "", "default":
	case "llama3":
		f, lo, hi, o := s.Factor, s.LowFreqFactor, s.HighFreqFactor, float64(s.OriginalMaxPositions)
		if !(f > 0) || !(lo > 0) || !(hi > lo) || !(o > 0) {
			return nil, fmt.Errorf("kernels.RopeInvFreq: llama3 scaling needs factor > 0, 0 < low_freq_factor < high_freq_factor and original_max_position_embeddings > 0; got factor %v, low %v, high %v, original %d",
				f, lo, hi, s.OriginalMaxPositions)
		}
		lowWavelen, highWavelen := o/lo, o/hi
		for i, v := range inv {
			wavelen := 2 * math.Pi / v
			switch {
			case wavelen < highWavelen: // high frequency: unchanged
			case wavelen > lowWavelen: // low frequency: slowed by factor
				inv[i] = v / f
			default:
				smooth := (o/wavelen - lo) / (hi - lo)
				inv[i] = (1-smooth)*v/f + smooth*v
			}
		}
	case "linear":
		if !(s.Factor > 0) || math.IsInf(s.Factor, 0) {
			return nil, fmt.Errorf("kernels.RopeInvFreq: linear scaling needs a positive factor, got %v", s.Factor)
		}
		for i := range inv {
			inv[i] /= s.Factor
		}
	case "dynamic":
		if !(s.Factor > 0) || math.IsInf(s.Factor, 0) {
			return nil, fmt.Errorf("kernels.RopeInvFreq: dynamic scaling needs a positive factor, got %v", s.Factor)
		}
	case "yarn":
		if err := yarnInvFreq(inv, headDim, theta, s); err != nil {
			return nil, err
		}
	case "longrope":
		if len(s.ShortFactor) != len(inv) {
			return nil, fmt.Errorf("kernels.RopeInvFreq: longrope needs %d short factors (head dim %d / 2), got %d", len(inv), headDim, len(s.ShortFactor))
		}
		for i, f := range s.ShortFactor {
			if !(f > 0) || math.IsInf(f, 0) {
				return nil, fmt.Errorf("kernels.RopeInvFreq: longrope short factor %d is %v, want a positive number", i, f)
			}
			inv[i] /= f
		}
	default:
		return nil, fmt.Errorf("kernels.RopeInvFreq: rope scaling type %q not supported (want default, linear, dynamic, yarn, llama3 or longrope)", s.Type)
	}
	out := make([]float32, len(inv))
	for i, v := range inv {
		out[i] = float32(v)
	}
	return out, nil
}

// yarnInvFreq applies YaRN as transformers' _compute_yarn_parameters does:
// with the correction range [lo, hi] of dimensions whose wavelengths make
// BetaFast and BetaSlow rotations over the original context, dimension i
// keeps its frequency below lo, is divided by Factor above hi, and blends
// linearly in between.
func yarnInvFreq(inv []float64, headDim int, theta float64, s RopeScaling) error {
	f, o := s.Factor, float64(s.OriginalMaxPositions)
	if !(f > 0) || math.IsInf(f, 0) || !(o > 0) {
		return fmt.Errorf("kernels.RopeInvFreq: yarn scaling needs factor > 0 and original_max_position_embeddings > 0; got factor %v, original %d", f, s.OriginalMaxPositions)
	}
	fast, slow := s.BetaFast, s.BetaSlow
	if fast == 0 {
		fast = 32
	}
	if slow == 0 {
		slow = 1
	}
	dim := float64(headDim)
	corr := func(rot float64) float64 { return dim * math.Log(o/(rot*2*math.Pi)) / (2 * math.Log(theta)) }
	lo, hi := corr(fast), corr(slow)
	if !s.NoTruncate {
		lo, hi = math.Floor(lo), math.Ceil(hi)
	}
	lo, hi = max(lo, 0), min(hi, dim-1)
	if lo == hi {
		hi += 0.001
	}
	for i, v := range inv {
		ramp := min(max((float64(i)-lo)/(hi-lo), 0), 1)
		extrapolate := 1 - ramp
		inv[i] = v/f*(1-extrapolate) + v*extrapolate
	}
	return nil
}

// maxStackHalf is the largest d/2 whose cos/sin tables live on the stack.
const maxStackHalf = 256

// ApplyRoPE rotates x [nTok, nHeads, d] in place, token t at position
// pos = pos0+t, pairing element i with i+d/2 (HF rotate_half): for i < d/2,
// with θ = float32(pos)·invFreq[i] (a float32 product, as transformers
// computes it) and a = x[i], b = x[i+d/2],
// x[i] = a·cos θ − b·sin θ and x[i+d/2] = b·cos θ + a·sin θ.
func ApplyRoPE(x []float32, nTok, nHeads, headDim, pos0 int, invFreq []float32) error {
	if nTok < 0 || nHeads < 0 || headDim <= 0 || headDim%2 != 0 || pos0 < 0 {
		return fmt.Errorf("kernels.ApplyRoPE: nTok %d, nHeads %d, headDim %d, pos0 %d: want non-negative counts and a positive even head dimension",
			nTok, nHeads, headDim, pos0)
	}
	if len(invFreq) != headDim/2 {
		return fmt.Errorf("kernels.ApplyRoPE: invFreq has %d values, want headDim/2 = %d", len(invFreq), headDim/2)
	}
	if len(x) != nTok*nHeads*headDim {
		return fmt.Errorf("kernels.ApplyRoPE: x has %d values, want nTok*nHeads*headDim = %d*%d*%d = %d",
			len(x), nTok, nHeads, headDim, nTok*nHeads*headDim)
	}
	// A token's cos/sin cost as much as rotating ~10 heads, so a token is
	// the unit of work.
	grain := max(1, convGrain/(nHeads*headDim+8*headDim))
	if !splits(nTok, grain) {
		ropeTokens(x, nHeads, headDim, pos0, invFreq, 0, nTok)
		return nil
	}
	parallelFor(nTok, grain, func(_, lo, hi int) { ropeTokens(x, nHeads, headDim, pos0, invFreq, lo, hi) })
	return nil
}

func ropeTokens(x []float32, nHeads, headDim, pos0 int, invFreq []float32, t0, t1 int) {
	half := headDim / 2
	var stack [2 * maxStackHalf]float32
	var cs []float32
	if half <= maxStackHalf {
		cs = stack[:2*half]
	} else {
		cs = make([]float32, 2*half)
	}
	cosT, sinT := cs[:half], cs[half:]
	for t := t0; t < t1; t++ {
		pos := float32(pos0 + t)
		for i, f := range invFreq {
			th := float64(pos * f)
			cosT[i] = float32(math.Cos(th))
			sinT[i] = float32(math.Sin(th))
		}
		row := x[t*nHeads*headDim : (t+1)*nHeads*headDim]
		for h := range nHeads {
			lo := row[h*headDim : h*headDim+half]
			hi := row[h*headDim+half : (h+1)*headDim]
			hi = hi[:len(lo)]
			for i := range lo {
				a, b := lo[i], hi[i]
				c, s := cosT[i], sinT[i]
				lo[i] = a*c - b*s
				hi[i] = b*c + a*s
			}
		}
	}
}
