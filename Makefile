# The two commands a fresh machine needs (see README):
#   make demo   bootstrap a node against a local control plane and show the result
#   make test   everything CI runs
# Both put the pinned Node (package.json "kubeboot.node") first on PATH, so
# npm, tsc, tap and the agent all run on it; the machine's own Node only
# fetches it once.
SHELL := /bin/bash
NODE_BIN := $(shell bash scripts/node.sh)
export PATH := $(NODE_BIN):$(PATH)

.PHONY: all deps system-deps controlplane test test-unit demo package image bench clean
all: test

system-deps:
	bash scripts/system-deps.sh

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

deps: node_modules/.installed

controlplane:
	bash test/controlplane/build.sh --node

test: system-deps deps
	npm test

# test-unit: the bundle, then every suite but e2e, packaging and systemd:
# test/unit, test/harness and test/chaos, which starts a real control plane.
# No tsc and no biome (npm test's pretest runs those).
test-unit: deps
	npm run test:unit

demo: system-deps deps
	npm run demo

package: system-deps deps
	npm run package

image: system-deps deps
	npm run image

bench: deps controlplane
	npm run bench

clean:
	rm -rf dist .tap
