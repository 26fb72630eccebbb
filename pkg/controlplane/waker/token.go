package waker

import (
	"crypto/ecdsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"
)

// serviceAccountToken checks token as the API server of a sleeping
// control plane would, as far as it can without it: a JWT signed ES256
// with the control plane's service-account key (pki.NewSigningKey), in
// its time. So only a holder of one of the tenant's own tokens wakes it;
// whether its service account still exists, the API server says once it
// runs. It returns the token's subject.
func serviceAccountToken(token string, key *ecdsa.PublicKey, now time.Time) (string, error) {
	if key == nil {
		return "", errors.New("no service-account key")
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return "", errors.New("not a JWT")
	}
	var header struct {
		Alg string `json:"alg"`
	}
	if err := decodeSegment(parts[0], &header); err != nil {
		return "", fmt.Errorf("its header: %w", err)
	}
	if header.Alg != "ES256" {
		return "", fmt.Errorf("signed %q, not ES256", header.Alg)
	}
	signature, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || len(signature) != 64 {
		return "", errors.New("not an ES256 signature")
	}
	digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	r, s := new(big.Int).SetBytes(signature[:32]), new(big.Int).SetBytes(signature[32:])
	if !ecdsa.Verify(key, digest[:], r, s) {
		return "", errors.New("not signed by the tenant's service-account key")
	}
	var claims struct {
		Subject   string `json:"sub"`
		Expiry    *int64 `json:"exp"`
		NotBefore *int64 `json:"nbf"`
	}
	if err := decodeSegment(parts[1], &claims); err != nil {
		return "", fmt.Errorf("its claims: %w", err)
	}
	// A minute's leeway, as the API server gives.
	const leeway = time.Minute
	if claims.Expiry != nil && now.After(time.Unix(*claims.Expiry, 0).Add(leeway)) {
		return "", errors.New("expired")
	}
	if claims.NotBefore != nil && now.Add(leeway).Before(time.Unix(*claims.NotBefore, 0)) {
		return "", errors.New("not valid yet")
	}
	return claims.Subject, nil
}

func decodeSegment(segment string, into any) error {
	data, err := base64.RawURLEncoding.DecodeString(segment)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, into)
}
