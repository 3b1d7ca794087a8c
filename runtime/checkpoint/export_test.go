package checkpoint

import "io"

// SetWrapSaveFile installs a wrapper around the file a save writes (to inject failures) and
// returns the function that removes it.
func SetWrapSaveFile(f func(io.Writer) io.Writer) (restore func()) {
	return SetWrapSaveFileAt(func(_ string, w io.Writer) io.Writer { return f(w) })
}

// SetWrapSaveFileAt is SetWrapSaveFile with the path of the file (the real one, not the
// temporary file written first), to fail one rank's file or the index alone.
func SetWrapSaveFileAt(f func(path string, w io.Writer) io.Writer) (restore func()) {
	old := wrapSaveFile
	wrapSaveFile = f
	return func() { wrapSaveFile = old }
}
