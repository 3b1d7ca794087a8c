module ppc.dev/ppc

go 1.26

require (
	github.com/alecthomas/participle/v2 v2.1.4
	github.com/ebitengine/purego v0.11.3
	github.com/schollz/progressbar/v3 v3.19.1
	github.com/x448/float16 v0.8.4
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/mitchellh/colorstring v0.0.0-20190213212951-d06e56a500db // indirect
	github.com/rivo/uniseg v0.4.7 // indirect
	golang.org/x/sys v0.46.0 // indirect
	golang.org/x/term v0.44.0 // indirect
)
