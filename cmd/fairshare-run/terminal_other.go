//go:build !linux

package main

// takeTerminal does nothing outside Linux: there make run's Ctrl-C also
// reaches make (see terminal_linux.go).
func takeTerminal() (restore func()) { return func() {} }
