package snapshot

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
)

// dockerConfig is a Docker config's credentials, as a Secret of type
// kubernetes.io/dockerconfigjson holds them.
type dockerConfig struct {
	Auths map[string]authn.AuthConfig `json:"auths"`
}

// dockerConfigKeychain gives each registry its entry of a Docker config.
type dockerConfigKeychain map[string]authn.AuthConfig

// DockerConfigKeychain is a Keychain of the credentials in data, the
// .dockerconfigjson of a Secret of type kubernetes.io/dockerconfigjson,
// by registry host (an entry may be written as a URL). A registry without
// an entry is reached anonymously.
func DockerConfigKeychain(data []byte) (authn.Keychain, error) {
	var config dockerConfig
	if err := json.Unmarshal(data, &config); err != nil {
		return nil, fmt.Errorf("not a Docker config (.dockerconfigjson): %w", err)
	}
	keychain := dockerConfigKeychain{}
	for host, auth := range config.Auths {
		host = strings.TrimPrefix(strings.TrimPrefix(host, "https://"), "http://")
		host, _, _ = strings.Cut(host, "/")
		keychain[host] = auth
	}
	return keychain, nil
}

func (k dockerConfigKeychain) Resolve(r authn.Resource) (authn.Authenticator, error) {
	if auth, ok := k[r.RegistryStr()]; ok {
		return authn.FromConfig(auth), nil
	}
	return authn.Anonymous, nil
}
