package main

import (
	"os"
	"os/signal"
	"syscall"
	"unsafe"
)

// takeTerminal makes this process the foreground process group of its
// controlling terminal when it runs in the foreground group of another
// process, as under make run: Ctrl-C then interrupts only this process,
// which prints its summary and exits 0, instead of also interrupting make,
// which would end with "*** [Makefile:NN: run] Interrupt" and status 130.
// It returns the function that gives the terminal back to the previous
// foreground group (call it before exiting). Without a terminal, or when
// this process already leads its group (run from a shell), it does nothing.
func takeTerminal() (restore func()) {
	noop := func() {}
	tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
	if err != nil {
		return noop
	}
	fd := tty.Fd()
	fg, err := tcgetpgrp(fd)
	pid := syscall.Getpid()
	if err != nil || fg != syscall.Getpgrp() || fg == pid {
		tty.Close()
		return noop
	}
	// A background group that sets the foreground group gets SIGTTOU.
	signal.Ignore(syscall.SIGTTOU)
	if err := syscall.Setpgid(0, 0); err != nil {
		tty.Close()
		return noop
	}
	if err := tcsetpgrp(fd, pid); err != nil {
		syscall.Setpgid(0, fg)
		tty.Close()
		return noop
	}
	return func() {
		tcsetpgrp(fd, fg)
		tty.Close()
	}
}

func tcgetpgrp(fd uintptr) (int, error) {
	var pgrp int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCGPGRP, uintptr(unsafe.Pointer(&pgrp))); e != 0 {
		return 0, e
	}
	return int(pgrp), nil
}

func tcsetpgrp(fd uintptr, pgrp int) error {
	p := int32(pgrp)
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCSPGRP, uintptr(unsafe.Pointer(&p))); e != 0 {
		return e
	}
	return nil
}
