package virtualcluster

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
)

// Telling a tenant from the host fails closed: only a tenant that answers
// with another kube-system (or none) is not the host; one that throttles,
// fails or does not answer gets no app.
func TestReachesHostFailsClosed(t *testing.T) {
	r := &Reconciler{hostUID: "host-uid"}
	for _, tc := range []struct {
		name        string
		status      int
		uid         string
		host        bool
		err         bool
		unreachable bool
	}{
		{name: "another cluster", status: http.StatusOK, uid: "tenant-uid"},
		{name: "the host itself", status: http.StatusOK, uid: "host-uid", host: true},
		{name: "no kube-system", status: http.StatusNotFound},
		{name: "throttled", status: http.StatusTooManyRequests, err: true},
		{name: "failing", status: http.StatusInternalServerError, err: true},
		{name: "refusing", status: http.StatusForbidden, err: true},
		{name: "not answering", status: 0, err: true, unreachable: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				if tc.status != http.StatusOK {
					w.WriteHeader(tc.status)
					_ = json.NewEncoder(w).Encode(metav1.Status{Status: metav1.StatusFailure, Code: int32(tc.status),
						Reason: metav1.StatusReason(http.StatusText(tc.status))})
					return
				}
				_ = json.NewEncoder(w).Encode(corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
					ObjectMeta: metav1.ObjectMeta{Name: "kube-system", UID: types.UID(tc.uid)}})
			}))
			url := srv.URL
			if tc.status == 0 {
				srv.Close() // nothing listens there now
			} else {
				defer srv.Close()
			}
			host, err := r.reachesHost(context.Background(), &rest.Config{Host: url})
			if host != tc.host || (err != nil) != tc.err || errors.Is(err, clusterregistry.ErrUnreachable) != tc.unreachable {
				t.Errorf("reachesHost = %v, %v; want host %v, error %v (unreachable %v)", host, err, tc.host, tc.err, tc.unreachable)
			}
		})
	}
}
