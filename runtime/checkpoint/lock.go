package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// LockFile is the file in a checkpoint directory that records who holds the directory.
const LockFile = ".ppc-lock"

// errLocked is what acquire returns when another process holds the lock.
var errLocked = errors.New("locked")

// DirLock is an exclusive claim on a checkpoint directory: `ppc run --save DIR` takes it
// before training and releases it after the save, so two runs never save into one
// directory (the later save would silently replace the other run's checkpoint).
type DirLock struct {
	dir  string
	file *os.File
}

// LockDir creates dir if needed and takes its lock without waiting. When another process
// holds it the error names the directory and the holder's process id.
func LockDir(dir string) (*DirLock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, LockFile)
	f, err := acquire(path)
	if errors.Is(err, errLocked) {
		holder := "another process"
		if b, rerr := os.ReadFile(path); rerr == nil {
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil {
				holder = "process " + strconv.Itoa(pid)
			}
		}
		return nil, fmt.Errorf("%s is in use: %s (another ppc run?) holds its lock %s; wait for it to finish or save elsewhere%s",
			dir, holder, LockFile, staleHint)
	}
	if err != nil {
		return nil, err
	}
	if err := f.Truncate(0); err == nil {
		fmt.Fprintf(f, "%d\n", os.Getpid())
	}
	// Holding the lock, any temporary checkpoint file here was left by a save whose
	// process was killed: it is garbage.
	if ents, err := os.ReadDir(dir); err == nil {
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "."+SingleFile+tempSuffix) || strings.HasPrefix(e.Name(), "."+IndexFile+tempSuffix) {
				os.Remove(filepath.Join(dir, e.Name()))
			}
		}
	}
	return &DirLock{dir: dir, file: f}, nil
}

// Unlock releases the lock and removes the lock file. It may be called more than once.
func (l *DirLock) Unlock() error {
	if l == nil || l.file == nil {
		return nil
	}
	err := release(l.file, filepath.Join(l.dir, LockFile))
	l.file = nil
	return err
}
