//go:build !unix

package checkpoint

import (
	"errors"
	"io/fs"
	"os"
)

// Without flock, the lock is the lock file's existence (created exclusively), which a
// killed process leaves behind.
const staleHint = " (if no such process runs, it was killed: delete the lock file)"

func acquire(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return nil, errLocked
	}
	return f, err
}

func release(f *os.File, path string) error {
	f.Close()
	return os.Remove(path)
}

// syncDir does nothing: directories cannot be synced here, and the rename is recorded by
// the file system's journal.
func syncDir(string) error { return nil }
