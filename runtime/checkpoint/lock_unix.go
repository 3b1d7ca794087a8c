//go:build unix

package checkpoint

import (
	"errors"
	"os"
	"syscall"
)

// flock locks are released by the kernel when their process dies, so a killed run never
// leaves a directory locked; the lock file is only a record of the holder.
const staleHint = ""

func acquire(path string) (*os.File, error) {
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, err
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, errLocked
			}
			return nil, &os.PathError{Op: "lock", Path: path, Err: err}
		}
		// The previous holder removes the file before it unlocks: if that happened between
		// our open and our lock, we hold a removed file that no one else will see. Start over
		// on the file that is there now.
		held, err1 := f.Stat()
		now, err2 := os.Stat(path)
		if err1 == nil && err2 == nil && os.SameFile(held, now) {
			return f, nil
		}
		f.Close()
	}
}

func release(f *os.File, path string) error {
	// Remove before unlocking, so a process that opened the file meanwhile sees (in acquire)
	// that it was removed.
	err := os.Remove(path)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
