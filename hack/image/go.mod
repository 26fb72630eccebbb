// Module image builds the controller-manager's OCI image (make image)
// with go-containerregistry, without a Docker engine or a registry. It is a
// module of its own so that go-containerregistry never reaches the main
// go.mod.
module github.com/tenantry/tenantry/hack/image

go 1.26.0

require github.com/google/go-containerregistry v0.22.1

require (
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/klauspost/compress v1.19.2 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	golang.org/x/sync v0.22.0 // indirect
)
