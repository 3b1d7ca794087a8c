module ppc.dev/ppc

go 1.26
