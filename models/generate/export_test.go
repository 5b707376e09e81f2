package generate

// SetSoloChunk sets soloChunk for a test and returns what restores it.
func SetSoloChunk(n int) (restore func()) {
	old := soloChunk
	soloChunk = n
	return func() { soloChunk = old }
}
