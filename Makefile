# Tenantry's build. `make help` lists the targets.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO      ?= go
BIN     := $(abspath bin)
TOOLS   := hack/tools
TOOLS_DEPS := $(TOOLS)/go.mod $(TOOLS)/go.sum
# The release before the pinned one, whose control plane images the kit
# serves too: a provisioned control plane is moved from it to the pinned one.
PREVIOUS_TOOLS := hack/previous
PREVIOUS_DEPS  := $(PREVIOUS_TOOLS)/go.mod $(PREVIOUS_TOOLS)/go.sum
PREVIOUS_KUBE_VERSION := $(shell awk '$$1 == "require" && $$2 == "k8s.io/kubernetes" { print $$3 }' $(PREVIOUS_TOOLS)/go.mod)
PREVIOUS_BINS := $(addprefix $(BIN)/$(PREVIOUS_KUBE_VERSION)/,kube-apiserver kube-controller-manager)
# KWOK builds against another Kubernetes release: a module of its own.
KWOK_TOOLS := hack/kwok
KWOK_DEPS  := $(KWOK_TOOLS)/go.mod $(KWOK_TOOLS)/go.sum
# The upstream end-to-end suite, for make conformance: a module of its own.
CONFORMANCE_TOOLS := hack/conformance
CONFORMANCE_DEPS  := $(CONFORMANCE_TOOLS)/go.mod $(CONFORMANCE_TOOLS)/go.sum
KWOK_VERSION := $(shell awk '{ for (i = 1; i < NF; i++) if ($$i == "sigs.k8s.io/kwok") print $$(i+1) }' $(KWOK_TOOLS)/go.mod)
# Helm lints and renders the chart charts/tenantry: a module of its own.
HELM_TOOLS := hack/helm
HELM_DEPS  := $(HELM_TOOLS)/go.mod $(HELM_TOOLS)/go.sum
HELM_VERSION := $(shell awk '{ for (i = 1; i < NF; i++) if ($$i == "helm.sh/helm/v3") print $$(i+1) }' $(HELM_TOOLS)/go.mod)
# The Kubernetes release Helm assumes when it has no cluster (helm template,
# helm lint, .Capabilities.KubeVersion): the one its client-go serves, as
# Helm's own Makefile sets it (client-go v0.X.Y is Kubernetes 1.X).
HELM_KUBE_MINOR := $(word 2,$(subst ., ,$(shell awk '{ for (i = 1; i < NF; i++) if ($$i == "k8s.io/client-go") print $$(i+1) }' $(HELM_TOOLS)/go.mod)))
HELM_LDFLAGS := -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) \
                -X helm.sh/helm/v3/internal/version.gitTreeState=clean \
                -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 \
                -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$(HELM_KUBE_MINOR) \
                -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 \
                -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$(HELM_KUBE_MINOR)

# The Kubernetes release the test control planes run, as pinned in the tools module.
KUBE_VERSION := $(shell awk '$$1 == "k8s.io/kubernetes" { print $$2 }' $(TOOLS)/go.mod)
KUBE_MINOR   := $(word 2,$(subst ., ,$(KUBE_VERSION)))
KUBE_LDFLAGS := -X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) \
                -X k8s.io/component-base/version.gitMajor=1 \
                -X k8s.io/component-base/version.gitMinor=$(KUBE_MINOR) \
                -X k8s.io/component-base/version.gitTreeState=clean

# Tests and binaries find the control-plane binaries here; a value the
# caller already set wins.
KUBEBUILDER_ASSETS ?= $(BIN)
export KUBEBUILDER_ASSETS

# The controller-manager's image (make image), built without Docker by the
# tools module hack/image: its name, the platform, and its OCI labels.
IMAGE_TOOLS := hack/image
IMAGE_DEPS  := $(IMAGE_TOOLS)/go.mod $(IMAGE_TOOLS)/go.sum $(IMAGE_TOOLS)/main.go
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION    ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
IMG         ?= tenantry/manager:$(VERSION)
IMAGE_ARCH  ?= $(shell $(GO) env GOARCH)
# Every time stamp in the image: the commit's, so that a rebuild of the same
# commit gives the same digest.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
# The repository has no LICENSE file yet: NOASSERTION (SPDX's "not stated")
# until it has one.
IMAGE_LICENSES ?= NOASSERTION
IMAGE_LABELS = \
  --label org.opencontainers.image.source=https://github.com/tenantry/tenantry \
  --label org.opencontainers.image.version='$(VERSION)' \
  --label org.opencontainers.image.revision='$(REVISION)' \
  --label org.opencontainers.image.title=tenantry-manager \
  --label org.opencontainers.image.description='The Tenantry controller-manager: Kubernetes multi-tenancy with virtual clusters' \
  --label org.opencontainers.image.licenses='$(IMAGE_LICENSES)'

# What a real kit node runs (pkg/testing's Options.HostKubelets), built by
# `make node`: the kubelet and kube-proxy of the pinned release (hack/tools),
# containerd and the CNI plugins (hack/node), runc with seccomp (hack/runc),
# kube-router's NetworkPolicy firewall (hack/kuberouter), the host's
# cluster DNS (CoreDNS with the plugins it needs, hack/coredns), and the
# images its Pods run, served by bin/kitregistry. What it needs of this
# machine (root, cgroups, Debian packages) is hack/prereqs.sh's to check,
# and to install where it runs as root.
NODE_TOOLS := hack/node
NODE_DEPS  := $(NODE_TOOLS)/go.mod $(NODE_TOOLS)/go.sum
RUNC_TOOLS := hack/runc
RUNC_DEPS  := $(RUNC_TOOLS)/go.mod $(RUNC_TOOLS)/go.sum
RUNC_VERSION := $(shell awk '$$1 == "github.com/opencontainers/runc" { print $$2 }' $(RUNC_TOOLS)/go.mod)
CONTAINERD_VERSION := $(shell awk '$$1 == "github.com/containerd/containerd/v2" { print $$2 }' $(NODE_TOOLS)/go.mod)
CNI_PLUGINS := bridge host-local loopback portmap
KUBEROUTER_TOOLS := hack/kuberouter
KUBEROUTER_DEPS  := $(KUBEROUTER_TOOLS)/go.mod $(KUBEROUTER_TOOLS)/go.sum
COREDNS_TOOLS := hack/coredns
COREDNS_DEPS  := $(COREDNS_TOOLS)/go.mod $(COREDNS_TOOLS)/go.sum $(COREDNS_TOOLS)/main.go
COREDNS_VERSION := $(shell awk '$$1 == "require" && $$2 == "github.com/coredns/coredns" { print $$3 }' $(COREDNS_TOOLS)/go.mod)
NODE_BINS := $(addprefix $(BIN)/,kubelet kube-proxy containerd containerd-shim-runc-v2 ctr runc kitregistry kube-router) \
             $(addprefix $(BIN)/cni/,$(CNI_PLUGINS)) $(BIN)/kit-images/index.json
# The busybox of the kit's images: 1.37.0, upstream's source and applets,
# static with musl, as upstream's image (hack/busybox/build.sh). Its sh is
# every busybox image's /bin/sh, and agnhost's, as upstream's (Alpine's).
BUSYBOX ?= $(BIN)/busybox
# This machine's programs that the e2e suite runs in the agnhost image, as
# its upstream image (Alpine's bind-tools, curl, netcat-openbsd, iproute2,
# bash, socat) has them: curl, dig, nslookup, nc, socat, getent, bash, ip
# and ss, each with its shared libraries.
AGNHOST_TOOLS ?= /usr/bin/curl /usr/bin/dig /usr/bin/nslookup /usr/bin/nc=/bin/nc.openbsd /usr/bin/socat /usr/bin/getent \
                 /bin/bash /sbin/ip=/usr/bin/ip /usr/sbin/ss=/usr/bin/ss

CONTROLLER_GEN := $(BIN)/controller-gen
# What `make envtest` builds: the test control planes' programs, and the
# kubectl that tests drive them with.
ENVTEST_BINS := $(addprefix $(BIN)/,kube-apiserver etcd kube-controller-manager kube-scheduler kwok kubectl)

##@ Development

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN { FS = ":.*##"; printf "Usage: make <target>\n" } \
	  /^[a-zA-Z_-]+:.*##/ { printf "  %-12s %s\n", $$1, $$2 } \
	  /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)

# Every target that runs real nodes checks this machine first
# (hack/prereqs.sh: seconds; as root with apt it installs what is
# missing), then runs the rest with NODES=node where real nodes can run
# here and NODES= where they cannot, the script having said why in one
# line: no build step is the first to find a missing prerequisite.
PREREQS := hack/prereqs.sh
define with_prereqs
rc=0; $(PREREQS) || rc=$$?; \
case $$rc in 0) nodes=node ;; 2) nodes= ;; *) exit $$rc ;; esac; \
$(if $(2),if [ -z "$$nodes" ] && [ "$${CI:-}" = true ]; then echo "make $(2): CI=true runs every real-node test; this machine cannot run real nodes (above)"; exit 1; fi;) \
$(MAKE) --no-print-directory $(1) NODES=$$nodes
endef

# hack/image's test builds the manager statically first: minutes when cold.
# hack/monitoring's reads config/monitoring and the docs its runbook URLs
# name, outside its module, which the test cache does not watch: -count=1.
.PHONY: test
test: ## Check this machine (hack/prereqs.sh), gofmt and go vet, then every test with the race detector against real API servers and real nodes (skipped, saying why, where real nodes cannot run; CI=true fails instead), then make image's test and config/monitoring's checks.
	@$(call with_prereqs,test-all,test)

.PHONY: test-all
test-all: envtest $(NODES) helm fmt-check vet
	$(GO) test -race -timeout 30m ./...
	cd $(IMAGE_TOOLS) && $(GO) vet ./... && $(GO) test -timeout 20m ./...
	cd $(NODE_TOOLS) && $(GO) vet ./cmd/... && $(GO) test -race ./cmd/...
	cd hack/monitoring && $(GO) vet ./... && $(GO) test -count=1 ./...
	@[ -n "$(NODES)" ] || echo "make test: the real-node tests were skipped: this machine cannot run real nodes (hack/prereqs.sh --check says why)"

.PHONY: prereqs
prereqs: ## Check what this machine needs (Go, a C compiler; for real nodes root, cgroups, Debian packages), installing what is missing where run as root with apt.
	@$(PREREQS)

.PHONY: vet
vet: ## go vet the module.
	$(GO) vet ./...

.PHONY: fmt-check
fmt-check: ## Fail if any Go file is not gofmt-formatted.
	@files=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './bin/*')); \
	if [ -n "$$files" ]; then echo "not gofmt-formatted:"; echo "$$files"; exit 1; fi

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Regenerate deepcopy code, CRDs and RBAC (and the chart's copies) from kubebuilder markers.
	$(CONTROLLER_GEN) object paths=./pkg/apis/...
	$(CONTROLLER_GEN) crd paths=./pkg/apis/... output:crd:artifacts:config=config/crd/bases
	cp config/crd/bases/*.yaml charts/tenantry/crds/
	$(CONTROLLER_GEN) rbac:roleName=tenantry-manager paths=./controllers/... paths=./providers/... output:rbac:artifacts:config=config/rbac
	sed -n '/^rules:/,$$p' config/rbac/role.yaml | tail -n +2 > charts/tenantry/files/manager-rules.yaml
	$(CONTROLLER_GEN) object crd paths=./examples/... output:crd:artifacts:config=examples/config/crd

.PHONY: bench
bench: build envtest ## Benchmarks (spawn, memory, Pods, sync through bin/manager, 1,000 VirtualClusters): bench/results/.
	$(BIN)/tenantry-dev bench --out bench/results

.PHONY: conformance
conformance: node-prereqs build envtest node $(BIN)/e2e.test $(BIN)/ginkgo ## The upstream conformance suite against a tenant and, as the control, its host (hours): tiers 1 and 2 on simulated nodes; CONFORMANCE_ARGS='--tiers 3' every spec on real nodes. conformance-results/.
	$(BIN)/tenantry-dev conformance --e2e $(BIN)/e2e.test --ginkgo $(BIN)/ginkgo --out conformance-results $(CONFORMANCE_ARGS)

.PHONY: conformance-netpol
conformance-netpol: node-prereqs build envtest node $(BIN)/e2e.test $(BIN)/ginkgo ## The upstream suite's NetworkPolicy specs (sig-network's Netpol and older NetworkPolicy ones, not conformance specs) against a tenant and its host, on real nodes enforced by kube-router (hours). conformance-results/netpol/.
	$(BIN)/tenantry-dev conformance --e2e $(BIN)/e2e.test --ginkgo $(BIN)/ginkgo --tiers netpol --out conformance-results/netpol $(CONFORMANCE_ARGS)

.PHONY: fuzz
fuzz: ## Fuzz the host namespace translation for a minute (FUZZTIME=1m).
	$(GO) test ./pkg/syncer/ -run '^$$' -fuzz FuzzHostNamespace -fuzztime $(or $(FUZZTIME),1m)

.PHONY: build
build: ## Build the binaries into bin/: manager, tenantry (the operator's CLI) and tenantry-dev (the development tools).
	$(GO) build -o $(BIN)/ ./cmd/...

.PHONY: dev
dev: ## A local host, two tenants and the controller-manager, until Ctrl-C (tenantry dev): real nodes where this machine can run them (hack/prereqs.sh), else simulated ones.
	@$(call with_prereqs,dev-run)

.PHONY: dev-run
dev-run: build envtest $(NODES)
	$(BIN)/tenantry dev $(if $(NODES),,--simulated-nodes)

.PHONY: demo
demo: ## The end-to-end demo: sync a sample workload through two tenants, then exit: on real nodes where this machine can run them (hack/prereqs.sh), else on simulated ones.
	@$(call with_prereqs,demo-run)

.PHONY: demo-run
demo-run: build envtest $(NODES)
	$(BIN)/tenantry-dev demo $(if $(NODES),,--simulated-nodes)

.PHONY: image
image: $(BIN)/image-builder ## The manager's OCI image, no Docker: bin/image/ (OCI layout), bin/manager-image.tar (docker load), named IMG.
	CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_ARCH) $(GO) build -trimpath -ldflags '-s -w' -o $(BIN)/image-build/manager ./cmd/manager
	$(BIN)/image-builder --binary $(BIN)/image-build/manager --arch $(IMAGE_ARCH) --name '$(IMG)' \
	  --created $(SOURCE_DATE_EPOCH) $(IMAGE_LABELS) --layout $(BIN)/image --tarball $(BIN)/manager-image.tar

##@ Tools

.PHONY: envtest
envtest: $(ENVTEST_BINS) ## Build kube-apiserver, etcd, kube-controller-manager, kube-scheduler, kwok and kubectl from source into bin/ (once).

$(BIN)/kube-apiserver $(BIN)/kube-controller-manager $(BIN)/kube-scheduler $(BIN)/kubectl: $(BIN)/%: $(TOOLS_DEPS)
	cd $(TOOLS) && $(GO) build -ldflags '$(KUBE_LDFLAGS)' -o $@ k8s.io/kubernetes/cmd/$*

.PHONY: node
node: node-prereqs $(NODE_BINS) ## Build what a real kit node runs (kubelet, kube-proxy, containerd, runc, CNI plugins, kube-router's firewall) and its images into bin/ (once).

# hack/prereqs.sh, before anything of a node is built.
.PHONY: node-prereqs
node-prereqs:
	@$(PREREQS)

$(BIN)/kubelet $(BIN)/kube-proxy: $(BIN)/%: $(TOOLS_DEPS)
	cd $(TOOLS) && CGO_ENABLED=0 $(GO) build -ldflags '$(KUBE_LDFLAGS)' -o $@ k8s.io/kubernetes/cmd/$*

$(BIN)/agnhost: $(TOOLS_DEPS)
	cd $(TOOLS) && CGO_ENABLED=0 $(GO) build -ldflags '$(KUBE_LDFLAGS)' -o $@ k8s.io/kubernetes/test/images/agnhost

$(BIN)/containerd $(BIN)/containerd-shim-runc-v2 $(BIN)/ctr: $(BIN)/%: $(NODE_DEPS)
	cd $(NODE_TOOLS) && CGO_ENABLED=0 $(GO) build -tags no_btrfs \
	  -ldflags '-X github.com/containerd/containerd/v2/version.Version=$(CONTAINERD_VERSION)' \
	  -o $@ github.com/containerd/containerd/v2/cmd/$*

$(BIN)/runc: $(RUNC_DEPS)
	cd $(RUNC_TOOLS) && CGO_ENABLED=1 $(GO) build -tags 'seccomp urfave_cli_no_docs' \
	  -ldflags '-X main.version=$(patsubst v%,%,$(RUNC_VERSION))' -o $@ github.com/opencontainers/runc

$(addprefix $(BIN)/cni/,$(CNI_PLUGINS)): $(NODE_DEPS)
	cd $(NODE_TOOLS) && CGO_ENABLED=0 $(GO) build -o $@ \
	  github.com/containernetworking/plugins/plugins/$(if $(filter host-local,$(@F)),ipam,$(if $(filter portmap,$(@F)),meta,main))/$(@F)

# kube-router v2.1.0, the one version served, has reported security flaws;
# the kit runs only its firewall, on test nodes that nothing outside this
# machine reaches.
$(BIN)/kube-router: $(KUBEROUTER_DEPS)
	cd $(KUBEROUTER_TOOLS) && CGO_ENABLED=0 $(GO) build -o $@ github.com/cloudnativelabs/kube-router/v2/cmd/kube-router

# The e2e images' programs: the sample API server and nonewprivs of the
# pinned release, and nginx of this machine's Debian release, fetched as a
# package and unpacked, not installed (no service of it starts here).
$(BIN)/sample-apiserver: $(TOOLS_DEPS)
	cd $(TOOLS) && CGO_ENABLED=0 $(GO) build -ldflags '-s -w $(KUBE_LDFLAGS)' -o $@ k8s.io/sample-apiserver

$(BIN)/nonewprivs: $(TOOLS_DEPS)
	cd $(TOOLS) && CGO_ENABLED=0 $(GO) build -o $@ k8s.io/kubernetes/test/images/nonewprivs

$(BIN)/nginx:
	rm -rf $(BIN)/nginx.d && mkdir -p $(BIN)/nginx.d
	cd $(BIN)/nginx.d && { apt-get download nginx 2>/dev/null || { apt-get update -qq && apt-get download nginx; }; }
	dpkg-deb -x $(BIN)/nginx.d/nginx_*.deb $(BIN)/nginx.d/root
	cp $(BIN)/nginx.d/root/usr/sbin/nginx $@
	rm -rf $(BIN)/nginx.d

$(BIN)/coredns: $(COREDNS_DEPS)
	cd $(COREDNS_TOOLS) && CGO_ENABLED=0 $(GO) build -ldflags '-s -w -X github.com/coredns/coredns/coremain.GitCommit=$(COREDNS_VERSION)' -o $@ .

$(BIN)/kitregistry: $(NODE_DEPS) $(wildcard $(NODE_TOOLS)/cmd/kitregistry/*.go)
	cd $(NODE_TOOLS) && $(GO) build -o $@ ./cmd/kitregistry

$(BIN)/busybox: hack/busybox/build.sh
	hack/busybox/build.sh $@

# The sandbox image's program, from the pinned release's sources.
$(BIN)/pause: $(TOOLS_DEPS)
	src=$$(cd $(TOOLS) && $(GO) list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c; \
	gcc -Os -Wall -Werror -static -DVERSION=v3.10.2 -o $@ "$$src"

# The previous release's control plane programs, static as upstream's.
$(PREVIOUS_BINS): $(BIN)/$(PREVIOUS_KUBE_VERSION)/%: $(PREVIOUS_DEPS)
	cd $(PREVIOUS_TOOLS) && CGO_ENABLED=0 $(GO) build \
	  -ldflags '-X k8s.io/component-base/version.gitVersion=$(PREVIOUS_KUBE_VERSION) -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(word 2,$(subst ., ,$(PREVIOUS_KUBE_VERSION))) -X k8s.io/component-base/version.gitTreeState=clean' \
	  -o $@ k8s.io/kubernetes/cmd/$*

$(BIN)/kit-images/index.json: $(BIN)/kitregistry $(BIN)/pause $(BUSYBOX) $(BIN)/agnhost $(BIN)/coredns $(BIN)/etcd $(BIN)/sample-apiserver $(BIN)/nonewprivs $(BIN)/nginx $(BIN)/kube-apiserver $(BIN)/kube-controller-manager $(PREVIOUS_BINS)
	$(BIN)/kitregistry build --out $(BIN)/kit-images --pause $(BIN)/pause --busybox $(BUSYBOX) --agnhost $(BIN)/agnhost \
	  --coredns $(BIN)/coredns --coredns-version $(COREDNS_VERSION) \
	  --etcd $(BIN)/etcd --sample-apiserver $(BIN)/sample-apiserver --nonewprivs $(BIN)/nonewprivs --nginx $(BIN)/nginx \
	  --kube-apiserver $(BIN)/kube-apiserver --kube-controller-manager $(BIN)/kube-controller-manager --kube-version $(KUBE_VERSION) \
	  --control-plane-release $(PREVIOUS_KUBE_VERSION)=$(BIN)/$(PREVIOUS_KUBE_VERSION)/kube-apiserver,$(BIN)/$(PREVIOUS_KUBE_VERSION)/kube-controller-manager \
	  --e2e-images $$(cd $(TOOLS) && $(GO) list -m -f '{{.Dir}}' k8s.io/kubernetes)/test/images \
	  $(addprefix --tool ,$(AGNHOST_TOOLS))

$(BIN)/kwok: $(KWOK_DEPS)
	cd $(KWOK_TOOLS) && $(GO) build -ldflags '-X sigs.k8s.io/kwok/pkg/consts.Version=$(KWOK_VERSION)' -o $@ sigs.k8s.io/kwok/cmd/kwok

.PHONY: helm
helm: $(BIN)/helm ## Build helm from source into bin/ (once): the chart test (charts/) lints, renders and applies charts/tenantry with it.

$(BIN)/helm: $(HELM_DEPS)
	cd $(HELM_TOOLS) && $(GO) build -ldflags '$(HELM_LDFLAGS)' -o $@ helm.sh/helm/v3/cmd/helm

$(BIN)/e2e.test: $(CONFORMANCE_DEPS)
	cd $(CONFORMANCE_TOOLS) && $(GO) test -c -ldflags '$(KUBE_LDFLAGS)' -o $@ k8s.io/kubernetes/test/e2e

$(BIN)/ginkgo: $(CONFORMANCE_DEPS)
	cd $(CONFORMANCE_TOOLS) && $(GO) build -o $@ github.com/onsi/ginkgo/v2/ginkgo

$(BIN)/etcd: $(TOOLS_DEPS) $(TOOLS)/cmd/etcd/main.go
	cd $(TOOLS) && $(GO) build -o $@ ./cmd/etcd

$(BIN)/image-builder: $(IMAGE_DEPS)
	cd $(IMAGE_TOOLS) && $(GO) build -o $@ .

$(CONTROLLER_GEN): $(TOOLS_DEPS)
	cd $(TOOLS) && $(GO) build -o $@ sigs.k8s.io/controller-tools/cmd/controller-gen

.PHONY: clean
clean: ## Remove bin/.
	rm -rf $(BIN)
