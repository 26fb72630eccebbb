package clusterregistry

// NewNotifyingCache is newNotifyingCache, for the tests of its promises.
var NewNotifyingCache = newNotifyingCache

// SharedMapping is the mapping of the built-in groups that m, a cluster
// manager's REST mapper, shares with the other clusters of its version,
// or nil if it shares none.
func SharedMapping(m any) any {
	if l, ok := m.(*layeredMapper); ok {
		return l.builtin
	}
	return nil
}

// NewDirectInformer is newDirectInformer, for the tests of its promises.
var NewDirectInformer = newDirectInformer
