//go:build race

package leangrpc_test

const raceOn = true
