package runtime

import "io"

// SetWrapSaveFile installs a wrapper around the file a save writes (to inject failures) and
// returns the function that removes it.
func SetWrapSaveFile(f func(io.Writer) io.Writer) (restore func()) {
	old := wrapSaveFile
	wrapSaveFile = f
	return func() { wrapSaveFile = old }
}
