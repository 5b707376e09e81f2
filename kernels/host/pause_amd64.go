//go:build amd64

package host

// spinPause executes a few PAUSE instructions: a spin-wait hint that frees
// the core's pipeline (and its hyperthread sibling) while a pool goroutine
// polls for work.
//
//go:noescape
func spinPause()
