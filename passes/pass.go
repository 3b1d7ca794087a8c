package passes

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"ppc.dev/ppc/ir"
)

// Pass is one IR transformation, in the style of golang.org/x/tools/go/analysis.Analyzer:
// a name, a doc string and a Run function. Passes are values in one ordered table (table.go),
// never registered from init.
type Pass struct {
	Name string
	Doc  string
	// Options the pass accepts in a pipeline string (`name{key=value}`), with defaults.
	Options []Option
	// Run transforms the module in place. It returns an error for input it cannot handle
	// (with the position in the user's file where there is one); the manager adds the pass
	// name (ppc exits 2). A bug in the pass shows as a panic or as IR that fails the
	// verifier; for those the manager writes a reproducer.
	Run func(m *ir.Module, opts Options) error
}

// Option declares one pass option.
type Option struct {
	Name, Default, Doc string
}

// Options are the option values a pass runs with (defaults filled in).
type Options map[string]string

// Int returns an integer option.
func (o Options) Int(name string) (int, error) {
	var v int
	if _, err := fmt.Sscan(o[name], &v); err != nil {
		return 0, fmt.Errorf("option %s=%q is not an integer", name, o[name])
	}
	return v, nil
}

var passNameRE = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)

var byName map[string]*Pass

func init() {
	if err := validateTable(table); err != nil {
		panic(err)
	}
	byName = make(map[string]*Pass, len(table))
	for _, p := range table {
		byName[p.Name] = p
	}
}

// validateTable checks the pass table once at start-up: unique well-formed names, a doc and a
// Run for every pass, well-formed options.
func validateTable(t []*Pass) error {
	seen := map[string]bool{}
	for _, p := range t {
		switch {
		case !passNameRE.MatchString(p.Name):
			return fmt.Errorf("passes: bad pass name %q", p.Name)
		case seen[p.Name]:
			return fmt.Errorf("passes: pass %s listed twice", p.Name)
		case p.Doc == "" || p.Run == nil:
			return fmt.Errorf("passes: pass %s needs a Doc and a Run", p.Name)
		}
		seen[p.Name] = true
		opts := map[string]bool{}
		for _, o := range p.Options {
			if !passNameRE.MatchString(strings.ReplaceAll(o.Name, "_", "-")) || opts[o.Name] || o.Doc == "" {
				return fmt.Errorf("passes: pass %s has a bad option %q", p.Name, o.Name)
			}
			opts[o.Name] = true
		}
	}
	return nil
}

// All returns the passes in table order.
func All() []*Pass { return table }

// Lookup returns the named pass or nil.
func Lookup(name string) *Pass { return byName[name] }

// Step is one pass of a pipeline with its options.
type Step struct {
	Pass    *Pass
	Options Options
}

// String prints the step as it would be written in a pipeline.
func (s Step) String() string {
	if len(s.Options) == 0 {
		return s.Pass.Name
	}
	var kv []string
	for _, o := range s.Pass.Options {
		if v := s.Options[o.Name]; v != o.Default {
			if strings.ContainsAny(v, ",{}") {
				v = `"` + v + `"`
			}
			kv = append(kv, o.Name+"="+v)
		}
	}
	if len(kv) == 0 {
		return s.Pass.Name
	}
	return s.Pass.Name + "{" + strings.Join(kv, ",") + "}"
}

// Pipeline is a parsed pipeline string.
type Pipeline []Step

func (p Pipeline) String() string {
	s := make([]string, len(p))
	for i, st := range p {
		s[i] = st.String()
	}
	return strings.Join(s, ",")
}

// ParsePipeline reads `canonicalize,cse,dce` or `name{key=value,key=value},other`.
func ParsePipeline(s string) (Pipeline, error) {
	var out Pipeline
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	for len(s) > 0 {
		end := strings.IndexAny(s, ",{")
		if end < 0 {
			end = len(s)
		}
		name := strings.TrimSpace(s[:end])
		if name == "" {
			// ",," or a leading ',' or '{': there is no name to suggest a spelling for.
			return nil, fmt.Errorf("empty pass name in the pipeline (passes are separated by single commas)")
		}
		p := byName[name]
		if p == nil {
			return nil, fmt.Errorf("unknown pass %q%s; run `ppc passes` for the list", name, suggestPass(name))
		}
		opts := Options{}
		for _, o := range p.Options {
			opts[o.Name] = o.Default
		}
		s = s[end:]
		if strings.HasPrefix(s, "{") {
			close := optionsEnd(s)
			if close < 0 {
				return nil, fmt.Errorf("pass %s: unterminated '{' in options", name)
			}
			given := map[string]bool{}
			for _, kv := range splitOptions(s[1:close]) {
				k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
				if !ok {
					return nil, fmt.Errorf("pass %s: option %q is not key=value", name, kv)
				}
				k = strings.TrimSpace(k)
				if _, known := opts[k]; !known {
					return nil, fmt.Errorf("pass %s has no option %q%s", name, k, optionList(p))
				}
				// The last value would win without a word: adamw{lr=1e-3,lr=3e-4}.
				if given[k] {
					return nil, fmt.Errorf("pass %s: option %s given twice", name, k)
				}
				given[k] = true
				v = strings.TrimSpace(v)
				if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
					v = v[1 : len(v)-1]
				}
				opts[k] = v
			}
			s = s[close+1:]
		}
		out = append(out, Step{p, opts})
		s = strings.TrimSpace(s)
		if strings.HasPrefix(s, ",") {
			s = strings.TrimSpace(s[1:])
			if s == "" {
				return nil, fmt.Errorf("pipeline ends with ','")
			}
		} else if s != "" {
			return nil, fmt.Errorf("expected ',' between passes, found %q", s)
		}
	}
	return out, nil
}

// optionsEnd finds the '}' closing an option list, skipping quoted values.
func optionsEnd(s string) int {
	quoted := false
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '"':
			quoted = !quoted
		case '}':
			if !quoted {
				return i
			}
		}
	}
	return -1
}

// splitOptions splits key=value pairs at commas outside quotes (a layout string is written
// layout="E,t*4|t*4,L").
func splitOptions(s string) []string {
	var out []string
	quoted, start := false, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '"':
			quoted = !quoted
		case ',':
			if !quoted {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

func optionList(p *Pass) string {
	if len(p.Options) == 0 {
		return " (it takes none)"
	}
	names := make([]string, len(p.Options))
	for i, o := range p.Options {
		names[i] = o.Name
	}
	sort.Strings(names)
	return " (options: " + strings.Join(names, ", ") + ")"
}

func suggestPass(name string) string {
	for _, p := range table {
		if strings.Contains(p.Name, name) || strings.Contains(name, p.Name) {
			return fmt.Sprintf(" (did you mean %s?)", p.Name)
		}
	}
	return ""
}
