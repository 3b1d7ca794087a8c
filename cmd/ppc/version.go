package main

import (
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"
)

// version is the release version; builds from a checkout add the VCS revision.
const version = "0.1.0-dev"

func init() {
	commands = append(commands, &command{
		name: "version", args: "",
		summary: "Print ppc's version, the VCS revision it was built from, and the Go version.",
		setup: func(fs *flag.FlagSet, e *env) func([]string) error {
			return func(args []string) error {
				if len(args) != 0 {
					return usagef("takes no arguments")
				}
				rev, dirty := "", ""
				if bi, ok := debug.ReadBuildInfo(); ok {
					for _, s := range bi.Settings {
						switch s.Key {
						case "vcs.revision":
							rev = s.Value
						case "vcs.modified":
							if s.Value == "true" {
								dirty = "+dirty"
							}
						}
					}
				}
				if len(rev) > 12 {
					rev = rev[:12]
				}
				if rev != "" {
					rev = " (" + rev + dirty + ")"
				}
				fmt.Fprintf(e.stdout, "ppc %s%s %s %s/%s\n", version, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
				return nil
			}
		},
	})
}
