package providers

import (
	"io/fs"
	"runtime/debug"
	"slices"
	"testing"

	"github.com/go-logr/logr"
)

// A container's memory limit is read from cgroup v2's file, else v1's; a
// limit the cgroup does not hold ("max", v1's near-largest number) is none.
func TestContainerMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  int64
		ok    bool
	}{
		{"v2", map[string]string{"v2": "536870912\n"}, 512 << 20, true},
		{"v2 unlimited", map[string]string{"v2": "max\n"}, 0, false},
		{"v1", map[string]string{"v1": "1073741824\n"}, 1 << 30, true},
		{"v1 unlimited", map[string]string{"v1": "9223372036854771712\n"}, 0, false},
		{"none", map[string]string{}, 0, false},
		{"garbage", map[string]string{"v2": "lots"}, 0, false},
	} {
		read := func(name string) ([]byte, error) {
			if v, ok := tc.files[name]; ok {
				return []byte(v), nil
			}
			return nil, fs.ErrNotExist
		}
		got, ok := memoryLimitFrom(read, []string{"v2", "v1"})
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: %d, %v; want %d, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
	files := memoryLimitFiles("4:memory:/kubepods/pod1/c1\n1:cpu,cpuacct:/kubepods\n0::/\n")
	if want := []string{"/sys/fs/cgroup/memory/kubepods/pod1/c1/memory.limit_in_bytes", "/sys/fs/cgroup/memory.max",
		"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory.max"}; !slices.Equal(files, want) {
		t.Errorf("the files of a v1 container's cgroup: %q, want %q", files, want)
	}
	if got := DefaultCacheBudget(1 << 30); got != 256<<20 {
		t.Errorf("the default budget of a 1 GiB container: %d, want 256 MiB", got)
	}
}

// The manager's GOGC is 50, unless the environment sets one.
func TestSetGCPercent(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100)) // as it was, after
	t.Setenv("GOGC", "")
	SetGCPercent(logr.Discard())
	if got := debug.SetGCPercent(100); got != 50 {
		t.Errorf("GOGC = %d, want 50", got)
	}
	t.Setenv("GOGC", "200")
	SetGCPercent(logr.Discard())
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("with GOGC=200 in the environment, GOGC = %d, want it left alone (100 here)", got)
	}
}
