// Command coredns is CoreDNS with the plugins a cluster's DNS needs and no
// others: the test kit's real nodes serve their cluster DNS with it, as a
// kubeadm cluster does with the full CoreDNS of the same version. Linking
// only these plugins keeps the build small and free of the cloud
// providers' SDKs.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() { coremain.Run() }
