package snapshot_test

import (
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"

	"github.com/tenantry/tenantry/pkg/snapshot"
)

// A Docker config's credentials go to their registry, by host, written as
// a host or a URL; other registries are reached anonymously.
func TestDockerConfigKeychain(t *testing.T) {
	keychain, err := snapshot.DockerConfigKeychain([]byte(`{"auths":{
		"registry.example:5000":{"auth":"dXNlcjpzZWNyZXQ="},
		"https://other.example/v1/":{"username":"bot","password":"pw"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]authn.AuthConfig{
		"registry.example:5000": {Username: "user", Password: "secret"},
		"other.example":         {Username: "bot", Password: "pw"},
		"elsewhere.example":     {},
	} {
		repo, err := name.NewRepository(host + "/snapshots")
		if err != nil {
			t.Fatal(err)
		}
		auth, err := keychain.Resolve(repo)
		if err != nil {
			t.Fatal(err)
		}
		got, err := auth.Authorization()
		if err != nil {
			t.Fatal(err)
		}
		if got.Username != want.Username || got.Password != want.Password {
			t.Errorf("%s: credentials %q/%q, want %q/%q", host, got.Username, got.Password, want.Username, want.Password)
		}
	}
	if _, err := snapshot.DockerConfigKeychain([]byte("not json")); err == nil {
		t.Error("a Secret that is not a Docker config: no error")
	}
}
