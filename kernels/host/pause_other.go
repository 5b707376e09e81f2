//go:build !amd64

package host

// spinPause is a spin-wait hint; elsewhere it does nothing.
func spinPause() {}
