# sandbox-remediator. `make help` lists the targets.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

NODES ?= 3
export PATH := $(CURDIR)/node_modules/.bin:$(PATH)

##@ Everyday

.PHONY: help
help: ## Show the targets
	@awk 'BEGIN {FS = ":.*##"} /^##@/ {printf "\n%s\n", substr($$0, 5)} /^[a-zA-Z_-]+:.*##/ {printf "  %-22s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund
	@touch $@

.PHONY: deps
deps: node_modules/.installed ## Install npm dependencies (npm ci) when package-lock.json changed

.PHONY: build
build: deps ## Compile TypeScript to dist/
	tsc -p tsconfig.build.json

# The release's image, as config/ and the chart name it (make version moves it).
IMAGE ?= $(shell node_modules/.bin/tsx hack/release/version.ts --image)
IMAGE_ARCHIVE ?= .image/sandbox-remediator.oci.tar

.PHONY: image
image: deps ## Build the container image (IMAGE: the one config/ and the chart name) with docker, podman or buildah (CONTAINER_ENGINE picks one); with none running, from Debian's archive with no daemon (root; hack/image/build.sh) into IMAGE_ARCHIVE, an OCI archive
	@engine="$${CONTAINER_ENGINE:-}"; \
	for candidate in docker podman buildah; do \
	  [[ -z "$$engine" ]] && command -v "$$candidate" >/dev/null && "$$candidate" info >/dev/null 2>&1 && engine="$$candidate"; \
	done; \
	if [[ -z "$$engine" ]]; then \
	  echo "make image: no container engine is running here (tried docker, podman and buildah; a CLI without a daemon does not count): building $(IMAGE) from Debian's archive into $(IMAGE_ARCHIVE)"; \
	  hack/image/build.sh $(IMAGE) $(IMAGE_ARCHIVE); \
	elif [[ "$$engine" == buildah ]]; then \
	  echo "buildah bud -t $(IMAGE) ."; buildah bud -t $(IMAGE) .; \
	else \
	  echo "$$engine build -t $(IMAGE) ."; "$$engine" build -t $(IMAGE) .; \
	fi

.PHONY: fmt
fmt: deps ## Format every file with prettier
	prettier --write --log-level warn .

.PHONY: lint
lint: deps ## Run eslint (typescript-eslint, type-aware)
	eslint .

.PHONY: typecheck
typecheck: deps ## Type-check sources, tests and scripts
	tsc -p tsconfig.json --noEmit

.PHONY: manifests
manifests: deps ## Generate crds/ from the zod schemas in src/api, schemas/diagnosis.schema.json from src/diagnose, and charts/sandbox-remediator from config/
	tsx hack/generate-crds.ts
	tsx hack/generate-schemas.ts
	tsx hack/generate-chart.ts

.PHONY: verify
verify: deps ## Check formatting, lint, types (src, test, bench, hack), that crds/ and schemas/ match src/ and the Helm chart config/, that the docs' figures match bench/results, src/'s size budget (files 400 lines, functions 100) and that its imports make no circle, that every file carries the one release version, and the release workflow (actionlint, built into ~/.cache); run before every commit; make test runs it first
	prettier --check --log-level warn .
	eslint .
	tsc -p tsconfig.json --noEmit
	tsx hack/generate-crds.ts --check
	tsx hack/generate-schemas.ts --check
	tsx hack/generate-chart.ts --check
	tsx hack/figures.ts --check
	tsx hack/check-shape.ts
	tsx hack/check-imports.ts
	tsx hack/release/version.ts >/dev/null
	hack/release/lint-workflows.sh

.PHONY: figures
figures: deps ## Rewrite the figures the docs quote (README.md, bench/README.md, docs/) from bench/results/*.json
	tsx hack/figures.ts

.PHONY: diagram
diagram: ## Render docs/architecture.dot into docs/architecture.svg (installs Debian's graphviz when dot is missing)
	@command -v dot >/dev/null || { sudo=""; [ "$$(id -u)" = 0 ] || sudo=sudo; $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends graphviz; }
	dot -Tsvg docs/architecture.dot -o docs/architecture.svg

.PHONY: demo
demo: deps tools ## The whole story in about 3 minutes: a local cluster with 6 kwok nodes, real disk load (stress-ng), the incident, detection, IO evidence, cordon, evictions, a paused rollout, recovery and undo, then a timeline; the cluster stays up
	hack/demo.sh

.PHONY: demo-limit-io
demo-limit-io: deps tools ## make demo with the other remedy: the noisy neighbour limited in place (limitIo, the agent writing its real blkio.throttle/io.max file), not moved, and its limit lifted once its load ends (about 6 minutes)
	hack/demo.sh --limit-io

PLUGIN_DIR ?= $(HOME)/.local/bin

.PHONY: plugin
plugin: build ## Install the kubectl plugin (kubectl sandbox diagnose [NODE]) as PLUGIN_DIR/kubectl-sandbox (~/.local/bin), running this checkout's dist/
	@mkdir -p "$(PLUGIN_DIR)"
	@sed 's|@REPO@|$(CURDIR)|g' hack/kubectl-sandbox.sh > "$(PLUGIN_DIR)/kubectl-sandbox.tmp"
	@chmod 0755 "$(PLUGIN_DIR)/kubectl-sandbox.tmp"
	@mv "$(PLUGIN_DIR)/kubectl-sandbox.tmp" "$(PLUGIN_DIR)/kubectl-sandbox"
	@echo "Installed $(PLUGIN_DIR)/kubectl-sandbox (runs node $(CURDIR)/dist/src/main.js)"
	@case ":$$PATH:" in \
	  *":$(PLUGIN_DIR):"*) echo "$(PLUGIN_DIR) is on PATH: try kubectl sandbox diagnose" ;; \
	  *) echo "$(PLUGIN_DIR) is NOT on PATH, so kubectl will not find it: export PATH=\"$(PLUGIN_DIR):\$$PATH\"" ;; \
	esac

##@ Tests

.PHONY: test-unit
test-unit: deps ## Unit tests with coverage (no cluster, no network); src/api and src/detection need 90% of lines
	c8 mocha --config .mocharc.unit.json --forbid-only
	c8 check-coverage --lines 90 --include 'src/api/**' --include 'src/detection/**'

.PHONY: tools
tools: ## Install machine tools (apt packages) and build the control plane, helm and node-healthcheck-operator into ~/.cache (cached by version)
	hack/install-tools.sh

.PHONY: test-integration
test-integration: deps tools ## Integration tests: SHARDS (2) runs at once, each against a local cluster of its own (.cluster/ reused if running, else started and stopped)
	hack/test-integration.sh

.PHONY: test
test: ## Everything CI runs: make verify, then the unit and then the integration tests
	@$(MAKE) --no-print-directory verify
	@$(MAKE) --no-print-directory test-unit
	@$(MAKE) --no-print-directory test-integration

.PHONY: test-argo
test-argo: deps tools ## Not in CI: Argo Rollouts' own controller, built from the Go module proxy into ~/.cache (about 15 minutes cold on 2 cores, hence not in make test), rolls out a Rollout that the operator pauses by spec.paused and releases after the recovery
	hack/cluster/build.sh argo-rollouts
	mocha --import=tsx --forbid-only --require test/integration/hooks.ts --timeout 120000 test/argo/*.test.ts

SOAK_MINUTES ?= 60

.PHONY: soak
soak: deps tools build ## Not in CI: SOAK_MINUTES (60) of incidents on random nodes while the operator restarts at random (kill -9 or SIGTERM), with ten-minute flapping IO first; ends with nothing cordoned, paused or gated, and flat heap and RSS for the last operator after its warm-up
	FLAP_SECONDS=600 mocha --import=tsx --forbid-only --require test/integration/hooks.ts --timeout 0 --grep 'flap' test/integration/io-faults.test.ts
	SOAK_MINUTES=$(SOAK_MINUTES) mocha --import=tsx --forbid-only --require test/integration/hooks.ts --timeout 0 test/soak/soak.test.ts

VERSION ?=

.PHONY: version
version: deps ## Move the release to VERSION (make version VERSION=x.y.z): package.json and its lock, --version, config/'s image and the chart
	@[ -n "$(VERSION)" ] || { echo "make version VERSION=x.y.z (now: $$(tsx hack/release/version.ts))"; exit 2; }
	tsx hack/release/version.ts $(VERSION)

##@ Benchmarks

.PHONY: bench
bench: deps tools ## Detection latency, cache memory (vs client-node's informer), agent overhead (vs node_exporter), the agent's IO attribution cost (with vs --no-attribution at 100 and 1,000 pods, vs node_exporter; one read of 5,000), the agent keeping IO limits on 20 of 100 pods (vs none, needs the local cluster), the sampler's thread reads (vs before), reconcile cost of one change (vs a full pass), API writes per node per minute (vs b9da2a8, needs the local cluster), the cost of one API request on kept-alive connections (vs client-node's connection per request) and TLS handshakes at rest; results in bench/results/, then the docs' figures rewritten from them
	tsx bench/detection-latency.ts --pods 50
	tsx bench/cache-memory.ts --pods 5000
	tsx bench/agent-overhead.ts --seconds 60
	tsx bench/agent-attribution.ts --seconds 60
	tsx bench/agent-io-limits.ts --seconds 60
	tsx bench/sampler-threads.ts --rounds 300
	tsx bench/reconcile-cost.ts --nodes 1000 --rounds 50
	tsx bench/api-writes.ts --before b9da2a8
	tsx bench/keep-alive.ts
	tsx hack/figures.ts

SIZES ?= 100,300,1000
# The last commit before issue 29's work (pipelined passes, kept-alive connections, the shared eviction budget).
BEFORE ?= 995f66a

.PHONY: bench-scale
bench-scale: deps tools build ## The operator of BEFORE (995f66a) and of this checkout, one after the other on the same cluster, at SIZES (100,300,1000) kwok nodes x 30 pods and in a storm: sync, memory, idle CPU, LISTs, detection, cordon, eviction, writes, the apiserver's own patch time, with ratios side by side; memory against Node's defaults; a CPU profile of an incident (about 30 min on 2 cores, 27 min on 2026-12-04; not in make bench); then the docs' figures rewritten from bench/results/scale.json; on a cluster started afresh for it and stopped after (its thousand kwok nodes would be left NotReady)
	hack/cluster/down.sh
	hack/cluster/up.sh
	tsx bench/scale.ts --sizes $(SIZES) --before $(BEFORE) --results scale.json
	prettier --write --log-level warn bench/results/scale.json
	hack/cluster/down.sh
	tsx hack/figures.ts

.PHONY: bench-scale-5000
bench-scale-5000: deps tools build ## Not in make bench: 1,000 then 5,000 kwok nodes x 30 pods (150,000, Kubernetes' documented limit) on a cluster started afresh for it (kwok's node leases 120 s and the node monitor's grace 10 min: one kwok renews every lease), this checkout only, the same figures, how they grow from 1,000 to 5,000, and a storm of 5,000 held pods, into bench/results/scale-5000.json (two to three hours on 2 cores); the cluster is stopped after
	hack/cluster/down.sh
	KWOK_NODE_LEASE_SECONDS=120 NODE_MONITOR_GRACE_PERIOD=600s hack/cluster/up.sh
	tsx bench/scale.ts --sizes 1000,5000 --storm-pods-per-node 1 --results scale-5000.json
	prettier --write --log-level warn bench/results/scale-5000.json
	hack/cluster/down.sh
	tsx hack/figures.ts

.PHONY: bench-vs-descheduler
bench-vs-descheduler: deps tools build ## The same incident (an IO-saturated node, a CNI failure on another) under the descheduler's PodLifeTime, then under the operator: time to evict, replacements back on the node, CNI pods evicted, peak RSS, API writes; builds the descheduler into ~/.cache when missing; results in bench/results/vs-descheduler.json, then the docs' figures rewritten from it
	hack/cluster/build.sh descheduler
	tsx bench/vs-descheduler.ts
	prettier --write --log-level warn bench/results/vs-descheduler.json
	tsx hack/figures.ts

##@ Local cluster

.PHONY: cluster-up
cluster-up: deps tools ## Start etcd, kube-apiserver, controller-manager, scheduler and kwok with NODES (3) nodes
	NODES=$(NODES) hack/cluster/up.sh

.PHONY: cluster-down
cluster-down: ## Stop exactly what cluster-up started and remove .cluster/
	hack/cluster/down.sh

.PHONY: lab
lab: deps tools ## One real node and a control plane of its own in a network namespace of its own (kubelet, containerd, runc, a CNI bridge under .lab/; root, cgroup v1); ends with a pod Running on it; talk to it with hack/lab/exec.sh kubectl ...
	hack/lab/up.sh

.PHONY: lab-install
lab-install: lab ## The chart on the lab's real node: the image built here (make image, no engine needed) loaded into its containerd, helm install, the operator and the agent as Pods on the real kubelet
	hack/lab/install.sh

.PHONY: lab-uninstall
lab-uninstall: ## The README's uninstall in the lab: the operator scaled to 0, cleanup while the agent runs, helm uninstall, the CRDs
	hack/lab/install.sh uninstall

.PHONY: lab-down
lab-down: ## Stop the real node and its control plane, and remove .lab/, its mounts, loop device and network namespace
	hack/lab/down.sh

.PHONY: test-lab
test-lab: lab ## Not in make test (root, cgroup v1, a loop device, and kubelet's build): the chart's Pods on the real node (installed, the stall remediated in-cluster, uninstalled), then the operator against the real node's genuine failures, in the stall, io, culprit (a real pod's writes, named and moved; then limited in place, limitIo) and delay modes
	hack/image/build.sh $(IMAGE) $(IMAGE_ARCHIVE)
	hack/lab/exec.sh mocha --import=tsx --forbid-only --require test/integration/hooks.ts --timeout 600000 test/lab/in-cluster.test.ts test/lab/lab.test.ts
