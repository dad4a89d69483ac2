//go:build !unix

package main

import "time"

// processCPU is not measured on this platform; the cpu/op column stays empty.
func processCPU() time.Duration { return 0 }
