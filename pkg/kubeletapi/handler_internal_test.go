package kubeletapi

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// A kubelet API request's path and query become the host Pod
// subresource's: the container moves to the query, and exec's and
// attach's streams take the Pod API's names.
func TestKubeletPathToHostQuery(t *testing.T) {
	for _, tc := range []struct {
		path, query string
		want        string // subresource?query, or the error's start
	}{
		{"/containerLogs/ns/web/app", "follow=true&tailLines=10&timestamps=true&limitBytes=5&sinceSeconds=3&previous=true&stream=Stdout",
			"log?container=app&follow=true&limitBytes=5&previous=true&sinceSeconds=3&stream=Stdout&tailLines=10&timestamps=true"},
		{"/containerLogs/ns/web/app", "insecureSkipTLSVerifyBackend=true", "log?container=app"},
		{"/exec/ns/web/app", "command=sh&command=-c&command=echo+hi&input=1&output=1&error=1&tty=1",
			"exec?command=sh&command=-c&command=echo+hi&container=app&stderr=true&stdin=true&stdout=true&tty=true"},
		{"/exec/ns/web/uid-1/app", "command=ls&output=1", "exec?command=ls&container=app&stdout=true"},
		{"/exec/ns/web/app", "output=1", "error: exec without a command"},
		{"/attach/ns/web/app", "output=true&command=ignored", "attach?container=app&stdout=true"},
		{"/portForward/ns/web", "port=8080&port=9090", "portforward?ports=8080&ports=9090"},
		{"/portForward/ns/web/uid-1", "", "portforward?"},
		{"/exec/ns/web", "command=ls", "error: path /exec/ns/web: want /exec/<namespace>/<pod>/<container>"},
		{"/containerLogs/ns//app", "", "error: path /containerLogs/ns//app has an empty segment"},
		{"/pods", "", "error: /pods is not served"},
		{"/run/ns/web/app", "cmd=ls", "error: /run/ns/web/app is not served"},
	} {
		got := func() string {
			target, err := parsePath(tc.path)
			if err != nil {
				return "error: " + err.Error()
			}
			q, _ := url.ParseQuery(tc.query)
			out, err := hostQuery(target, q)
			if err != nil {
				return "error: " + err.Error()
			}
			return target.subresource + "?" + out.Encode()
		}()
		if !strings.HasPrefix(got, tc.want) || (!strings.HasPrefix(tc.want, "error") && got != tc.want) {
			t.Errorf("%s?%s: %q, want %q", tc.path, tc.query, got, tc.want)
		}
	}
}

// A tenant's request reaches the host without any header that could speak
// for someone.
func TestStripIdentity(t *testing.T) {
	h := http.Header{}
	for _, k := range []string{"Authorization", "Impersonate-User", "Impersonate-Group", "Impersonate-Extra-Scopes",
		"Impersonate-Uid", "X-Remote-User", "X-Remote-Group", "X-Remote-Extra-Foo", "Cookie", "Proxy-Authorization",
		"Upgrade", "Connection", "X-Stream-Protocol-Version"} {
		h.Set(k, "x")
	}
	stripIdentity(h)
	var left []string
	for k := range h {
		left = append(left, k)
	}
	slices.Sort(left)
	if want := []string{"Connection", "Upgrade", "X-Stream-Protocol-Version"}; !slices.Equal(left, want) {
		t.Fatalf("headers left %v, want %v", left, want)
	}
}
