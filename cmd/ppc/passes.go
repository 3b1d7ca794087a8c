package main

import (
	"flag"
	"fmt"
	"strings"

	"ppc.dev/ppc/passes"
)

func init() {
	commands = append(commands, &command{
		name: "passes", args: "",
		summary: "List every pass, in pipeline order, with its documentation and options.",
		setup: func(fs *flag.FlagSet, e *env) func([]string) error {
			return func(args []string) error {
				if len(args) != 0 {
					return usagef("takes no arguments")
				}
				for _, p := range passes.All() {
					fmt.Fprintf(e.stdout, "%s\n%s", p.Name, wrap(p.Doc, "    ", 88))
					for _, o := range p.Options {
						fmt.Fprintf(e.stdout, "    option %s (default %q): %s\n", o.Name, o.Default, o.Doc)
					}
					fmt.Fprintln(e.stdout)
				}
				return nil
			}
		},
	})
}

// wrap fills text into lines of at most width columns, each starting with indent.
func wrap(text, indent string, width int) string {
	var b strings.Builder
	line := indent
	for _, w := range strings.Fields(text) {
		if len(line)+1+len(w) > width && line != indent {
			b.WriteString(line + "\n")
			line = indent
		}
		if line != indent {
			line += " "
		}
		line += w
	}
	if line != indent {
		b.WriteString(line + "\n")
	}
	return b.String()
}
