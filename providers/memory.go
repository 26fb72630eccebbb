package providers

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
)

// ContainerMemoryLimit is the memory limit of the container (the cgroup)
// the process runs in, read from its cgroup: cgroup v2's memory.max, or
// v1's memory.limit_in_bytes, of the process's own cgroup (as
// /proc/self/cgroup names it, below the hierarchy's root, which is the
// container's own under a cgroup namespace); false where it has none, or
// none can be read.
func ContainerMemoryLimit() (int64, bool) {
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0, false
	}
	return memoryLimitFrom(os.ReadFile, memoryLimitFiles(string(self)))
}

// memoryLimitFiles are the files that may hold the memory limit of the
// cgroup that self (/proc/self/cgroup) names: its own, then the root's.
func memoryLimitFiles(self string) []string {
	var v1, v2 []string
	for _, line := range strings.Split(self, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			v2 = append(v2, path.Join("/sys/fs/cgroup", parts[2], "memory.max"))
		case slices.Contains(strings.Split(parts[1], ","), "memory"):
			v1 = append(v1, path.Join("/sys/fs/cgroup/memory", parts[2], "memory.limit_in_bytes"))
		}
	}
	// v1's first: on a hybrid machine, v2's hierarchy holds no memory
	// controller.
	return slices.Concat(v1, v2, []string{"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory.max"})
}

// unlimitedMemory: cgroup v1 writes a limit it does not hold as a number
// near the largest int64.
const unlimitedMemory = 1 << 60

func memoryLimitFrom(read func(string) ([]byte, error), files []string) (int64, bool) {
	for _, f := range files {
		data, err := read(f)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, false
		}
		v := strings.TrimSpace(string(data))
		n, err := strconv.ParseInt(v, 10, 64)
		if v == "max" || err != nil || n <= 0 || n >= unlimitedMemory {
			return 0, false
		}
		return n, true
	}
	return 0, false
}

// The shares of a container's memory limit that the manager takes by
// default: its Go heap's soft limit (GOMEMLIMIT), and the cache budget of
// every tenant together (CacheBudget), whose objects take about two to
// three times their encoded bytes in the heap.
const (
	memoryLimitShare = 0.9
	cacheBudgetShare = 0.25
)

// DefaultCacheBudget is the cache budget of every tenant together taken
// from a container memory limit of limit bytes.
func DefaultCacheBudget(limit int64) int64 { return int64(float64(limit) * cacheBudgetShare) }

// SetMemoryLimit gives the Go runtime a soft memory limit of 90% of the
// container's, unless GOMEMLIMIT sets one or the container has none: the
// garbage collector then works harder as the heap nears the container's
// limit, rather than the kernel ending the process. It logs what it set.
func SetMemoryLimit(log logr.Logger) {
	if os.Getenv("GOMEMLIMIT") != "" {
		log.Info("the Go heap's soft limit is GOMEMLIMIT's", "GOMEMLIMIT", os.Getenv("GOMEMLIMIT"))
		return
	}
	limit, ok := ContainerMemoryLimit()
	if !ok {
		return
	}
	soft := int64(float64(limit) * memoryLimitShare)
	debug.SetMemoryLimit(soft)
	log.Info("the Go heap's soft limit set from the container's memory limit", "containerLimit", limit, "softLimit", soft)
}

// gcPercent is the manager's default GOGC (the Go default is 100).
const gcPercent = 50

// SetGCPercent sets the garbage collector's target (GOGC) to 50, unless
// GOGC sets one, and logs it. Nearly all of the manager's heap is its
// tenants' caches and apps, which live as long as the tenants do, and its
// garbage comes in bursts (a tenant's first lists); the Go default lets
// the heap grow to twice what lives before a collection, and what a burst
// leaves spread over the heap's pages stays resident. Half of that cut
// the manager's resident memory at 1,000 idle tenants by an eighth (the
// bench's scale step, 1,603 to 1,405 MiB, both runs with the same
// GODEBUG) for no measurable CPU at rest, where there is little garbage
// to collect (see docs/design/cache-limits.md).
func SetGCPercent(log logr.Logger) {
	if v := os.Getenv("GOGC"); v != "" {
		log.Info("the garbage collector's target is GOGC's", "GOGC", v)
		return
	}
	debug.SetGCPercent(gcPercent)
}
