# Operator entry points; see README.md and ARCHITECTURE.md.

CARGO       ?= cargo
# The host's build (make host) and the features make test builds with.
TEST_FEATURES := --features esr/native-baseline
HOST_BUILD    := -p esr -p esr-bench -p esr-pg-cluster $(TEST_FEATURES)
WASM_TARGET := wasm32-wasip2
# Components are built with the `plugin` profile (small, optimized).
WASM_OUT    := target/$(WASM_TARGET)/plugin
# The read components need no WASI: built for this target, then made
# components by esr-componentize, they import only the esr:plugin world,
# which makes every request's instance cheaper (docs/performance.md).
READ_TARGET := wasm32-unknown-unknown
READ_OUT    := target/$(READ_TARGET)/plugin
COMPONENTIZE := target/debug/esr-componentize
PLUGINS_DIR ?= target/plugins
TEST_PLUGINS_DIR ?= target/test-plugins
# One crate per group in plugins/<group>, package esr-plugin-<group>.
PLUGINS      := endpoints remediation-targets scopes vulnerability-findings agent
# Scanner report importers: plugins/import-<format>, package
# esr-plugin-import-<format>, installed as import-<format>.wasm.
IMPORTERS    := trivy grype cyclonedx sarif osv wazuh snyk nessus nexpose openvas qualys
# Alternative and deliberately broken components the tests load.
TEST_PLUGINS := endpoints-redacted endpoints-wit-0-3-1 findings-wit-0-3-2 endless-loop memory-hog panics prober remnant sleeper log-flood
ESR         := target/debug/esr
# Real scanner reports the report tests import, read where they are (never
# copied into the project); a missing folder fails those tests.
ESR_SCANNER_REPORTS_DIR ?= $(abspath ../shared/scanner-reports)
# The Python tools the OpenAPI tests run (validator, schemathesis, client generator).
VENV        := target/venv
PYTHON_REQUIREMENTS := host/tests/python/requirements.txt
# The OpenAPI linters the tests run (Redocly CLI, Spectral with the OWASP
# ruleset), pinned in host/tests/lint/package-lock.json, in target/npm.
NPM_DIR     := target/npm
LINT_PACKAGES := host/tests/lint/package.json host/tests/lint/package-lock.json

.PHONY: run run-postgres test plugins test-plugins componentizer host toolchain wasm-target lint one-build cargo-deny fmt bench wrk postgresql plugin-new venv openapi npm-tools nodejs nginx chromium

run: host plugins
	$(ESR) serve --demo --plugins-dir $(PLUGINS_DIR)

# The same on a local PostgreSQL primary and streaming replica, created under
# ./data-postgres/ on first run and kept; Ctrl-C stops the server and both.
run-postgres: host plugins postgresql
	target/debug/esr-local-postgres data-postgres -- \
		$(ESR) serve --demo --plugins-dir $(PLUGINS_DIR) --data-dir data-postgres/host

# `cargo test` builds the binary the end-to-end tests run, with the
# features `make host` builds it with (`make one-build` checks), and
# `make host` first builds the tools' binaries, which `cargo test` builds
# only as test harnesses: either command reuses what the other built.
# Every test binary runs, whichever fails (`--no-fail-fast`).
# The native baseline is built in, so its test runs too; serving still
# defaults to the components.
test: host plugins test-plugins venv npm-tools postgresql nginx chromium
	ESR_PLUGINS_DIR=$(abspath $(PLUGINS_DIR)) ESR_TEST_PLUGINS_DIR=$(abspath $(TEST_PLUGINS_DIR)) \
		ESR_PYTHON_VENV=$(abspath $(VENV)) ESR_NPM_DIR=$(abspath $(NPM_DIR)) ESR_SCANNER_REPORTS_DIR=$(ESR_SCANNER_REPORTS_DIR) \
		$(CARGO) test --workspace $(TEST_FEATURES) --no-fail-fast

venv: $(VENV)/.installed

$(VENV)/.installed: $(PYTHON_REQUIREMENTS)
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r $(PYTHON_REQUIREMENTS)
	@touch $@

npm-tools: $(NPM_DIR)/.installed

# Exactly the locked versions; no install scripts (none of the linters needs one).
$(NPM_DIR)/.installed: $(LINT_PACKAGES) | nodejs
	@mkdir -p $(NPM_DIR)
	cp $(LINT_PACKAGES) $(NPM_DIR)/
	cd $(NPM_DIR) && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	@touch $@

# Node.js and npm from Debian's packages when missing (as root), else a
# message saying what to install.
nodejs:
	@command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then apt-get install -y -q nodejs npm; \
		else echo "make test needs Node.js (18.17 or later) and npm: sudo apt-get install nodejs npm" >&2; exit 1; fi; }

# nginx from Debian's packages when missing (as root), else a message saying
# what to install: the deployment test runs deploy/nginx-esr.conf in front of
# a server. Debian puts it in /usr/sbin, outside a user's PATH.
nginx:
	@command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			apt-get install -y -q nginx || { apt-get update -q && apt-get install -y -q nginx; }; \
		else echo "make test needs nginx (1.22 or later): sudo apt-get install nginx" >&2; exit 1; fi; }

# Chromium from Debian's packages when missing (as root), else a message
# saying what to install: the reference page test renders /docs in it,
# headless.
chromium:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			apt-get install -y -q chromium || { apt-get update -q && apt-get install -y -q chromium; }; \
		else echo "make test needs Chromium (headless, for /docs): sudo apt-get install chromium" >&2; exit 1; fi; }

# Rewrites docs/openapi.json from the components (a test fails when it drifts).
openapi: host plugins
	@mkdir -p docs
	$(ESR) plugins openapi --plugins-dir $(PLUGINS_DIR) > docs/openapi.json

# With the native baseline built in (`esr serve --native-handlers`, for
# measurements); serving defaults to the components.
host: toolchain
	$(CARGO) build $(HOST_BUILD)

# rust-toolchain.toml pins the toolchain. rustup installs it when missing;
# on a machine without network whose stable toolchain is that very version,
# that toolchain serves under the pinned name. Without rustup, the rustc on
# PATH is used as it is.
RUST_TOOLCHAIN := $(shell sed -n 's/^channel = "\(.*\)"$$/\1/p' rust-toolchain.toml)
toolchain:
	@command -v rustup >/dev/null 2>&1 || exit 0; \
	RUSTUP_AUTO_INSTALL=0 rustup run $(RUST_TOOLCHAIN) rustc --version >/dev/null 2>&1 && exit 0; \
	if rustup run stable rustc --version 2>/dev/null | grep -q '^rustc $(RUST_TOOLCHAIN) '; then \
		host=$$(rustup run stable rustc -vV | sed -n 's/^host: //p'); \
		ln -s "$$(rustup run stable rustc --print sysroot)" "$${RUSTUP_HOME:-$$HOME/.rustup}/toolchains/$(RUST_TOOLCHAIN)-$$host"; \
		echo "the pinned toolchain $(RUST_TOOLCHAIN) is this machine's stable one"; \
	else rustup toolchain install $(RUST_TOOLCHAIN) --profile minimal --component rustfmt,clippy --target $(WASM_TARGET) --target $(READ_TARGET); fi

# rustup adds the components' targets when missing; a toolchain without
# rustup must already have them.
wasm-target: toolchain
	@for target in $(WASM_TARGET) $(READ_TARGET); do \
		if command -v rustup >/dev/null 2>&1; then \
			rustup target list --installed | grep -qx "$$target" || rustup target add "$$target" || exit 1; \
		elif ! rustc --print target-list | grep -qx "$$target"; then \
			echo "the $$target target is missing and rustup is not installed" >&2; exit 1; \
		fi; \
	done

plugins: wasm-target componentizer
	$(CARGO) build --profile plugin --target $(READ_TARGET) $(addprefix -p esr-plugin-,$(PLUGINS))
	$(CARGO) build --profile plugin --target $(WASM_TARGET) $(addprefix -p esr-plugin-import-,$(IMPORTERS))
	@mkdir -p $(PLUGINS_DIR)
	@for p in $(PLUGINS); do \
		$(COMPONENTIZE) $(READ_OUT)/esr_plugin_$$(echo $$p | tr - _).wasm $(PLUGINS_DIR)/$$p.wasm || exit 1; done
	@for p in $(IMPORTERS); do cp $(WASM_OUT)/esr_plugin_import_$$(echo $$p | tr - _).wasm $(PLUGINS_DIR)/import-$$p.wasm; done
	@echo "components in $(PLUGINS_DIR): $(PLUGINS) $(addprefix import-,$(IMPORTERS))"

componentizer: toolchain
	$(CARGO) build -p esr-componentize

test-plugins: wasm-target componentizer
	$(CARGO) build --profile plugin --target $(WASM_TARGET) $(addprefix -p esr-test-plugin-,$(TEST_PLUGINS))
	@mkdir -p $(TEST_PLUGINS_DIR)
	@for p in $(TEST_PLUGINS); do cp $(WASM_OUT)/esr_test_plugin_$$(echo $$p | tr - _).wasm $(TEST_PLUGINS_DIR)/$$p.wasm; done
# The prober again, declaring every collection and the organization.
	$(CARGO) build --profile plugin --target $(WASM_TARGET) -p esr-test-plugin-prober --features all-reads
	@cp $(WASM_OUT)/esr_test_plugin_prober.wasm $(TEST_PLUGINS_DIR)/prober-all-reads.wasm
# The panicking component again, built as the read components are (no WASI).
	$(CARGO) build --profile plugin --target $(READ_TARGET) -p esr-test-plugin-panics
	$(COMPONENTIZE) $(READ_OUT)/esr_test_plugin_panics.wasm $(TEST_PLUGINS_DIR)/panics-without-wasi.wasm

# Latencies on 10,000 endpoints / 1,000,000 findings (generated once into
# target/bench/), throughput under wrk with the components and with the
# native baseline, and import throughput; then the same on sled and on
# PostgreSQL side by side (a durable cluster kept in target/bench/postgres);
# then two hosts against one on that cluster, and a host reading a streaming
# replica against one reading the primary (a smaller cluster and its replica,
# kept in target/bench/postgres-replicated*); the report is printed and
# written to target/bench/report.txt. wrk and PostgreSQL come from Debian's
# packages.
bench: host plugins wrk postgresql
	target/debug/esr-bench --plugins-dir $(PLUGINS_DIR) --out target/bench --scanner-reports-dir $(ESR_SCANNER_REPORTS_DIR)

wrk:
	@command -v wrk >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then apt-get install -y -q wrk; \
		else echo "make bench needs wrk: sudo apt-get install wrk" >&2; exit 1; fi; }

# The tests start throwaway PostgreSQL clusters from Debian's `postgresql`
# package (its server binaries under /usr/lib/postgresql/<version>/bin).
postgresql:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || [ -x "$$ESR_POSTGRES_BIN/initdb" ] || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			apt-get install -y -q postgresql || { apt-get update -q && apt-get install -y -q postgresql; }; \
		else echo "the tests need PostgreSQL's server: sudo apt-get install postgresql (or set ESR_POSTGRES_BIN to a directory holding initdb)" >&2; exit 1; fi; }

lint: wasm-target cargo-deny one-build
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets --features esr/native-baseline -- -D warnings
	$(CARGO) check -p esr
	$(CARGO) clippy --profile plugin --target $(READ_TARGET) $(addprefix -p esr-plugin-,$(PLUGINS)) -- -D warnings
	$(CARGO) clippy --profile plugin --target $(WASM_TARGET) $(addprefix -p esr-plugin-,$(PLUGINS)) \
		$(addprefix -p esr-plugin-import-,$(IMPORTERS)) -- -D warnings
	$(CARGO) deny check licenses bans sources

# `make run` and `make test` share one build: the features cargo resolves
# for the host's packages alone (make host) must be those it resolves for
# the whole workspace with its tests (make test). A feature that only a
# test, a component or a tool turns on makes each command rebuild what the
# other built; the lines printed are the packages resolved differently.
one-build: toolchain
	@mkdir -p target
	@$(CARGO) tree $(HOST_BUILD) -e normal,build -f '{p} [{f}]' --prefix none \
		| sed 's/ (\*)$$//' | sort -u > target/one-build-host.txt
	@$(CARGO) tree --workspace $(TEST_FEATURES) -f '{p} [{f}]' --prefix none \
		| sed 's/ (\*)$$//' | sort -u > target/one-build-test.txt
	@awk -F' \\[' 'NR == FNR { host[$$1] = host[$$1] "|" $$0 "|"; next } \
		($$1 in host) && !index(host[$$1], "|" $$0 "|") { print "  " $$0; differs = 1 } END { exit differs }' \
		target/one-build-host.txt target/one-build-test.txt || { \
		echo "make test resolves these packages' features differently from make host (see the Makefile's one-build)" >&2; exit 1; }

# cargo-deny, pinned, from crates.io when missing (it checks licences,
# duplicate versions and sources offline; deny.toml says what is allowed).
CARGO_DENY_VERSION := 0.20.2
cargo-deny: toolchain
	@$(CARGO) deny --version 2>/dev/null | grep -qx 'cargo-deny $(CARGO_DENY_VERSION)' || \
		$(CARGO) install --locked cargo-deny@$(CARGO_DENY_VERSION)

fmt: toolchain
	$(CARGO) fmt --all

# A new component crate in plugins/$(NAME) serving $(GROUP) (or, with
# KIND=importer, a report importer of the format $(NAME) in
# plugins/import-$(NAME)), built, unit-tested and checked by the host at once.
GROUP ?= endpoints
KIND ?= resource
plugin-new: wasm-target host
	@test -n "$(NAME)" || { echo "usage: make plugin-new NAME=my-plugin [GROUP=endpoints] [KIND=resource|importer]" >&2; exit 1; }
	@echo "$(NAME)" | grep -Eq '^[a-z][a-z0-9-]*$$' || { echo "NAME must be lowercase letters, digits and dashes" >&2; exit 1; }
	@case "$(KIND)" in resource|importer) ;; *) echo "KIND must be resource or importer" >&2; exit 1;; esac
	@case " endpoints remediation-targets scopes vulnerability-findings " in *" $(GROUP) "*) ;; \
		*) echo "GROUP must be one of endpoints, remediation-targets, scopes, vulnerability-findings" >&2; exit 1;; esac
	@crate=$$(if [ "$(KIND)" = importer ]; then echo import-$(NAME); else echo $(NAME); fi); \
	template=$$(if [ "$(KIND)" = importer ]; then echo templates/importer; else echo templates/plugin; fi); \
	test ! -e plugins/$$crate || { echo "plugins/$$crate already exists" >&2; exit 1; }; \
	mkdir -p plugins/$$crate/src; \
	for f in Cargo.toml src/lib.rs; do \
		sed -e 's/{{NAME}}/$(NAME)/g' -e 's/{{GROUP}}/$(GROUP)/g' -e 's#{{SDK_PATH}}#../sdk#' $$template/$$f > plugins/$$crate/$$f; done; \
	printf '\n[lints]\nworkspace = true\n' >> plugins/$$crate/Cargo.toml; \
	$(CARGO) test -p esr-plugin-$$crate && \
	$(CARGO) build --profile plugin --target $(WASM_TARGET) -p esr-plugin-$$crate && \
	$(ESR) plugins check $(WASM_OUT)/esr_plugin_$$(echo $$crate | tr - _).wasm && \
	echo "next: edit plugins/$$crate/src/lib.rs; to serve it, see PLUGINS.md"
