package llama

import (
	"testing"
)

// BenchmarkDecodeTiny: one decode step of the tiny model at context 64 on
// the CPU; reports tokens/s.
func BenchmarkDecodeTiny(b *testing.B) {
	benchDecode(b, 64)
}

// BenchmarkPrefillTiny: a 64-token prefill of the tiny model; reports tokens/s.
func BenchmarkPrefillTiny(b *testing.B) {
	m, be := loadTinyB(b)
	ids := make([]int32, 64)
	for i := range ids {
		ids[i] = int32(i * 7 % m.Cfg.VocabSize)
	}
	cache, err := m.NewKVCache(be, len(ids))
	if err != nil {
		b.Fatal(err)
	}
	defer cache.Free()
	logits := make([]float32, m.Cfg.VocabSize)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cache.Reset()
		lt, err := m.Forward(be, cache, ids, false)
		if err != nil {
			b.Fatal(err)
		}
		if err := be.ReadF32(logits, lt); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(ids))/b.Elapsed().Seconds(), "tokens/s")
}

func benchDecode(b *testing.B, context int) {
	m, be := loadTinyB(b)
	cache, err := m.NewKVCache(be, context+b.N+1)
	if err != nil {
		b.Fatal(err)
	}
	defer cache.Free()
	prompt := make([]int32, context)
	for i := range prompt {
		prompt[i] = int32(i * 13 % m.Cfg.VocabSize)
	}
	if _, err := m.Forward(be, cache, prompt, false); err != nil {
		b.Fatal(err)
	}
	logits := make([]float32, m.Cfg.VocabSize)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		lt, err := m.Forward(be, cache, []int32{int32(i % m.Cfg.VocabSize)}, false)
		if err != nil {
			b.Fatal(err)
		}
		if err := be.ReadF32(logits, lt); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
}
