// Package fault owns InputError, the one error type every layer of the runtime shares: a
// problem with what the runtime was given — a plan or program file, training data, a
// checkpoint, a process of a multi-process run started with other settings — as against a
// failure while running a plan that checked out (runtime.RunError). ppc exits 2 for the one
// and 1 for the other, and the executor does not wrap the one as the other, whichever layer
// found it (the loader, runtime/data, runtime/checkpoint, runtime/dist).
//
// It is the lowest runtime package beside runtime/device: it imports neither, and every other
// runtime package may import it (runtime/doc.go states the layering).
package fault
