package runtime

// must returns v, panicking on err (a failed device read in a test).
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
