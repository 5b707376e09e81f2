package decoder

// SetGenerateEnded makes f see the length of each Generate's KV cache just
// before it is freed (nil: none), for tests in package decoder_test.
func SetGenerateEnded(f func(cacheLen int)) {
	if f == nil {
		generateEnded.Store(nil)
		return
	}
	generateEnded.Store(&f)
}
