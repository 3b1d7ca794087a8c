package fault

import "fmt"

// InputError marks a problem with the files given to the runtime (exit status 2).
type InputError struct{ Err error }

func (e *InputError) Error() string { return e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

// Inputf is an *InputError with a formatted message.
func Inputf(format string, args ...any) error {
	return &InputError{fmt.Errorf(format, args...)}
}
