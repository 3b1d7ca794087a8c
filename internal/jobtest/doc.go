// Package jobtest holds what the tests of the runtime's packages share when they run whole
// jobs: compiling a model into a plan directory, a writer that fails part-way (a full disk),
// and every rank of a plan run as its own job joined over loopback TCP, as the processes of
// a multi-process run are (here goroutines of one process: the transport does not know the
// difference). The runtime's layers are tested through jobs — runtime/dist's transport and
// rendezvous, runtime/checkpoint's saves and resumes — so their tests import it.
package jobtest
