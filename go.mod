module ppc.dev/ppc

go 1.26

require (
	github.com/alecthomas/participle/v2 v2.1.4
	github.com/sbinet/npyio v0.6.0
	github.com/x448/float16 v0.8.4
	google.golang.org/protobuf v1.36.12
)

require gonum.org/v1/gonum v0.9.3 // indirect
