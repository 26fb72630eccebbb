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
// with the control plane's service-account key (pki.NewSigningKey), for
// the API server, in its time. So only a holder of one of the tenant's own tokens wakes it;
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
		Subject   string          `json:"sub"`
		Issuer    string          `json:"iss"`
		Audience  json.RawMessage `json:"aud"`
		Expiry    *int64          `json:"exp"`
		NotBefore *int64          `json:"nbf"`
	}
	if err := decodeSegment(parts[1], &claims); err != nil {
		return "", fmt.Errorf("its claims: %w", err)
	}
	if err := forTheAPIServer(claims.Issuer, claims.Audience); err != nil {
		return "", err
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

// legacyIssuer issues the tokens of service-account Secrets.
const legacyIssuer = "kubernetes/serviceaccount"

// forTheAPIServer says whether a token of issuer for audience is one the
// tenant's API server takes: a Secret's token, or one issued by it
// (https://kubernetes.default.svc.<domain>, its --service-account-issuer)
// for itself (its API audience, the issuer), not for another service a
// Pod hands it to.
func forTheAPIServer(issuer string, audience json.RawMessage) error {
	if issuer == legacyIssuer {
		return nil
	}
	if !strings.HasPrefix(issuer, "https://kubernetes.default.svc") {
		return fmt.Errorf("issued by %q, not by the tenant's API server", issuer)
	}
	var audiences []string
	if err := json.Unmarshal(audience, &audiences); err != nil {
		var one string
		if json.Unmarshal(audience, &one) != nil {
			return errors.New("no audience")
		}
		audiences = []string{one}
	}
	for _, a := range audiences {
		if a == issuer {
			return nil
		}
	}
	return fmt.Errorf("for %q, not for the tenant's API server", audiences)
}
