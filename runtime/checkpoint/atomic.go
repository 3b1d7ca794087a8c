package checkpoint

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// tempSuffix marks the temporary file a save writes before renaming it over the real one.
const tempSuffix = ".tmp-"

// wrapSaveFile, when set (by tests), wraps the file a save writes to path, to inject a
// failure (a full disk, an interruption) part-way through.
var wrapSaveFile func(path string, w io.Writer) io.Writer

// WriteFileAtomic replaces path with what write produces, or leaves it as it was (checkpoint
// files, and a multi-process run's merged trace): the data goes to a temporary file in the
// same directory (so the rename cannot cross file systems), which is synced, renamed over
// path and made durable by syncing the directory. On any error the temporary file is
// removed, so a full disk or a failed write never truncates the previous file nor leaves a
// partial one behind.
func WriteFileAtomic(path string, write func(io.Writer) error) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+tempSuffix+"*")
	if err != nil {
		return saveError(path, err)
	}
	tmp := f.Name()
	err = func() error {
		var w io.Writer = f
		if wrapSaveFile != nil {
			w = wrapSaveFile(path, w)
		}
		bw := bufio.NewWriterSize(w, 1<<20)
		if err := write(bw); err != nil {
			return err
		}
		if err := bw.Flush(); err != nil {
			return err
		}
		// CreateTemp makes the file private (0600); a checkpoint is an ordinary file.
		if err := f.Chmod(0o644); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
		return f.Close()
	}()
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		f.Close() // a second Close only reports that the file is closed
		os.Remove(tmp)
		return saveError(path, err)
	}
	if err := syncDir(dir); err != nil {
		return saveError(path, err)
	}
	return nil
}

// saveError says what a failed save did to the file (nothing), naming the cause without
// the temporary file's name.
func saveError(path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		err = le.Err
	}
	if _, serr := os.Stat(path); serr == nil {
		return fmt.Errorf("writing %s: %w (the previous %s is unchanged)", path, err, filepath.Base(path))
	}
	return fmt.Errorf("writing %s: %w (nothing was written)", path, err)
}
