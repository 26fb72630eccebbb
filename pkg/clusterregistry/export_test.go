package clusterregistry

// NewNotifyingCache is newNotifyingCache, for the tests of its promises.
var NewNotifyingCache = newNotifyingCache
