# idemproxy build. `make` builds ./idemproxy; `make SANITIZE=1` builds
# ./idemproxy-asan with AddressSanitizer and UndefinedBehaviorSanitizer.

CC      ?= cc
WARN    := -Wall -Wextra -Wformat=2 -Wshadow -Wmissing-prototypes \
           -Wstrict-prototypes -Wno-unused-parameter
CFLAGS  ?= -O2 -g
CFLAGS  += -std=gnu11 $(WARN) -I. -D_GNU_SOURCE -I$(shell pg_config --includedir 2>/dev/null || echo /usr/include/postgresql)
LDLIBS  := -levent -levent_pthreads -levent_openssl -lnghttp2 -lpq -lssl -lcrypto -lyajl -lpthread

ifeq ($(CI),true)
CFLAGS  += -Werror
endif

ifeq ($(SANITIZE),1)
BUILD   := build/asan
BIN     := idemproxy-asan
# IDEMPROXY_CHECKS: a broken invariant (a state move the request state
# machine does not allow) aborts instead of being logged.
CFLAGS  += -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined \
           -DIDEMPROXY_CHECKS
LDFLAGS += -fsanitize=address,undefined
else
BUILD   := build/release
BIN     := idemproxy
endif

VERSION := $(shell cat VERSION 2>/dev/null || echo 0.1.0)
CFLAGS  += -DIDEMPROXY_VERSION='"$(VERSION)"'

LIB_SRC  := $(filter-out proxy/main.c,$(wildcard proxy/*.c)) $(wildcard conf/*.c) $(wildcard http/*.c)
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o) $(BUILD)/gen/migrations.o $(BUILD)/gen/ui_files.o
# The operator page (GET /ui), compiled in: every file of ui/.
UI_FILES := $(sort $(wildcard ui/*))
MAIN_OBJ := $(BUILD)/proxy/main.o
UNIT_SRC := $(wildcard tests/unit/test_*.c)
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
DEPS     := $(LIB_OBJ:.o=.d) $(MAIN_OBJ:.o=.d)

FUZZ_SECONDS ?= 20
FUZZ_CFLAGS  := -std=gnu11 -O1 -g -I. -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined \
                -I$(shell pg_config --includedir 2>/dev/null || echo /usr/include/postgresql) \
                -DIDEMPROXY_VERSION='"$(VERSION)"'
FUZZERS      := build/fuzz/fuzz_http build/fuzz/fuzz_fingerprint build/fuzz/fuzz_conf \
                build/fuzz/fuzz_path build/fuzz/fuzz_idemkey build/fuzz/fuzz_records \
                build/fuzz/fuzz_jwt build/fuzz/fuzz_seal build/fuzz/fuzz_keysource \
                build/fuzz/fuzz_store_dns build/fuzz/fuzz_procstat build/fuzz/fuzz_ui \
                build/fuzz/fuzz_log build/fuzz/fuzz_trace build/fuzz/fuzz_h2up \
                build/fuzz/fuzz_h2 build/fuzz/fuzz_grpc build/fuzz/fuzz_graphql \
                build/fuzz/fuzz_jsonrpc

# Each fuzz target's sources (one list: what it is built from and what
# rebuilds it; the headers they include come from clang's -MMD) and libraries.
CONF_SRC          := conf/conf.c conf/args.c conf/directives.c conf/route.c conf/dump.c http/header.c http/path.c http/grpc.c
FUZZ_SRC_fuzz_http := tests/fuzz/fuzz_http.c proxy/http.c http/header.c http/path.c \
                      proxy/upgrade.c proxy/base64.c proxy/digest.c
FUZZ_LIB_fuzz_http := -levent -lcrypto
FUZZ_SRC_fuzz_fingerprint := tests/fuzz/fuzz_fingerprint.c proxy/fingerprint.c proxy/digest.c \
                             http/jsonrpc.c http/path.c
FUZZ_LIB_fuzz_fingerprint := -lyajl -lcrypto
FUZZ_SRC_fuzz_conf := tests/fuzz/fuzz_conf.c proxy/lookup.c $(CONF_SRC)
FUZZ_LIB_fuzz_conf := -lpq
FUZZ_SRC_fuzz_path := tests/fuzz/fuzz_path.c http/path.c
FUZZ_SRC_fuzz_keysource := tests/fuzz/fuzz_keysource.c proxy/keysource.c proxy/idemkey.c \
                           proxy/http.c http/header.c http/path.c
FUZZ_LIB_fuzz_keysource := -levent -lyajl
FUZZ_SRC_fuzz_idemkey := tests/fuzz/fuzz_idemkey.c proxy/idemkey.c
FUZZ_SRC_fuzz_records := tests/fuzz/fuzz_records.c proxy/records.c proxy/json.c proxy/base64.c \
                         proxy/utf8.c proxy/scope.c proxy/digest.c proxy/record.c proxy/seal.c \
                         proxy/http.c $(CONF_SRC)
FUZZ_LIB_fuzz_records := -levent -lyajl -lpq -lcrypto
FUZZ_SRC_fuzz_jwt := tests/fuzz/fuzz_jwt.c proxy/jwt.c proxy/jwks.c proxy/json.c proxy/base64.c \
                     proxy/digest.c
FUZZ_LIB_fuzz_jwt := -lyajl -lcrypto
FUZZ_SRC_fuzz_seal := tests/fuzz/fuzz_seal.c proxy/seal.c proxy/base64.c proxy/record.c \
                      proxy/http.c http/header.c http/path.c
FUZZ_LIB_fuzz_seal := -levent -lcrypto
FUZZ_SRC_fuzz_store_dns := tests/fuzz/fuzz_store_dns.c proxy/store_dns.c proxy/log.c proxy/digest.c \
                           proxy/utf8.c
FUZZ_LIB_fuzz_store_dns := -levent -lpq -lcrypto -lyajl
FUZZ_SRC_fuzz_procstat := tests/fuzz/fuzz_procstat.c proxy/procstat.c proxy/stats.c proxy/outcome.c
FUZZ_LIB_fuzz_procstat := -levent
FUZZ_SRC_fuzz_ui := tests/fuzz/fuzz_ui.c proxy/ui.c build/fuzz/gen/ui_files.c
FUZZ_SRC_fuzz_log := tests/fuzz/fuzz_log.c proxy/log.c proxy/digest.c proxy/utf8.c
FUZZ_LIB_fuzz_log := -lyajl -lcrypto
FUZZ_SRC_fuzz_trace := tests/fuzz/fuzz_trace.c proxy/trace.c
FUZZ_LIB_fuzz_trace := -lcrypto
FUZZ_SRC_fuzz_h2up := tests/fuzz/fuzz_h2up.c proxy/h2up.c proxy/http.c http/header.c http/path.c \
                      proxy/evalloc.c proxy/log.c proxy/digest.c proxy/utf8.c
FUZZ_LIB_fuzz_h2up := -levent -lnghttp2 -lyajl -lcrypto
FUZZ_SRC_fuzz_h2 := tests/fuzz/fuzz_h2.c proxy/h2.c proxy/http.c http/header.c http/path.c \
                    proxy/upgrade.c proxy/base64.c proxy/digest.c proxy/log.c proxy/utf8.c
FUZZ_LIB_fuzz_h2 := -levent -lnghttp2 -lcrypto -lyajl
FUZZ_SRC_fuzz_grpc := tests/fuzz/fuzz_grpc.c http/grpc.c
FUZZ_SRC_fuzz_graphql := tests/fuzz/fuzz_graphql.c http/graphql.c http/path.c
FUZZ_SRC_fuzz_jsonrpc := tests/fuzz/fuzz_jsonrpc.c http/jsonrpc.c http/path.c

.PHONY: all deps run test unit integration sanitize clean format bench check-conf-doc check-modules check-docs lint fuzz chaos ha citus image image-test

all: $(BIN)

$(BIN): $(MAIN_OBJ) $(LIB_OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/gen/migrations.c: scripts/embed-sql.sh $(sort $(wildcard sql/*.sql))
	@mkdir -p $(dir $@)
	sh scripts/embed-sql.sh $(sort $(wildcard sql/*.sql)) > $@.tmp && mv $@.tmp $@

$(BUILD)/gen/migrations.o: $(BUILD)/gen/migrations.c proxy/migrations.h
	$(CC) $(CFLAGS) -c -o $@ $<

# Every variant's (release, asan, fuzz) from the same files.
build/%/gen/ui_files.c: scripts/embed-ui.sh $(UI_FILES)
	@mkdir -p $(dir $@)
	sh scripts/embed-ui.sh $(UI_FILES) > $@.tmp && mv $@.tmp $@

$(BUILD)/gen/ui_files.o: $(BUILD)/gen/ui_files.c proxy/ui.h
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/tests/%: tests/unit/%.c tests/unit/unit.h $(LIB_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LIB_OBJ) $(LDLIBS)

unit: $(UNIT_BIN)
	@sh tests/unit/run.sh $(UNIT_BIN)

deps:
	@sh scripts/deps.sh test fuzz

run:
	@sh scripts/deps.sh run
	@$(MAKE) --no-print-directory all
	@sh scripts/run.sh

test:
	@sh scripts/deps.sh test
	@sh tests/run.sh

bench:
	@sh scripts/deps.sh bench
	@$(MAKE) --no-print-directory all build/release/tests/test_fingerprint
	@sh scripts/bench.sh

# The bounded chaos test: CHAOS_SECONDS of faults, then the checker.
CHAOS_SECONDS ?= 240
chaos:
	@sh scripts/deps.sh test
	@$(MAKE) --no-print-directory all
	@/usr/bin/python3 -m tests.chaos.chaos --seconds $(CHAOS_SECONDS)

# The high-availability stage: two PostgreSQL nodes under Patroni (etcd,
# synchronous_mode) behind a multi-host conninfo; the leader's node is
# killed and rejoins, then a switchover, under keyed traffic, then the
# chaos checker and a replay of every completed key. HA_SECONDS is the
# run's target wall time (set-up included; hard stop 150 s later).
HA_SECONDS ?= 60
ha:
	@sh scripts/deps.sh ha
	@$(MAKE) --no-print-directory all
	@/usr/bin/python3 -m tests.ha.ha --seconds $(HA_SECONDS)

# idemproxy on Citus: Citus built from the source tree CITUS_SRC (e.g. a
# checkout of v13.2.2) and installed into PostgreSQL 15, a coordinator and
# two workers on loopback, the records distributed by idem_key, the store
# integration tests against the coordinator, a chaos run that kills and
# restarts a worker and restarts the coordinator, then the benchmark against
# one plain PostgreSQL (tests/citus/run.sh, tests/citus/bench.sh).
citus:
	@if [ -z "$(CITUS_SRC)" ]; then \
		echo "make citus: set CITUS_SRC to a Citus source tree (e.g. CITUS_SRC=~/citus, v13.2.2)" >&2; \
		exit 2; fi
	@sh scripts/deps.sh test citus bench
	@$(MAKE) --no-print-directory all
	@bash tests/citus/run.sh "$(CITUS_SRC)"

# The OCI image: build/image/idemproxy-$(VERSION).oci.tar, loaded into
# podman as localhost/idemproxy:$(VERSION) when podman is installed
# (scripts/image.sh). `make image-test` runs its idemproxy against
# PostgreSQL and the test upstream (tests/image).
image: all
	@sh scripts/deps.sh image
	@bash scripts/image.sh

image-test: image
	@sh scripts/deps.sh image test
	@/usr/bin/python3 -m pytest -p no:cacheprovider -q tests/image

check-conf-doc: $(BIN)
	@sh scripts/check-conf-doc.sh

# The Markdown documents: links to files and headings that exist, no second
# table of directives.
check-docs:
	@sh scripts/check-docs.sh

# The module graph: no include circle, no function defined in two files.
check-modules:
	@sh scripts/check-modules.sh -q

lint: check-modules check-conf-doc check-docs

# `make install [PREFIX=/usr/local] [DESTDIR=]`: the binary, the man pages,
# the example configuration, the systemd unit (its @SBINDIR@ and
# @SYSCONFDIR@ filled in, so it names what was installed) and the licence.
# The configuration lives under /etc whatever PREFIX is, as the unit and
# docs/operations.md expect (SYSCONFDIR= moves it). No idemproxy.conf is installed,
# so an existing one is never overwritten. `make uninstall` with the same
# variables removes those files, then idemproxy's own directories when empty.
PREFIX         ?= /usr/local
SBINDIR        ?= $(PREFIX)/sbin
MANDIR         ?= $(PREFIX)/share/man
DOCDIR         ?= $(PREFIX)/share/doc/idemproxy
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system
SYSCONFDIR     ?= /etc
INSTALL        ?= install

.PHONY: install uninstall

install: all
	$(INSTALL) -D -m 0755 $(BIN) "$(DESTDIR)$(SBINDIR)/idemproxy"
	$(INSTALL) -D -m 0644 docs/man/idemproxy.8 "$(DESTDIR)$(MANDIR)/man8/idemproxy.8"
	$(INSTALL) -D -m 0644 docs/man/idemproxy.conf.5 "$(DESTDIR)$(MANDIR)/man5/idemproxy.conf.5"
	$(INSTALL) -D -m 0644 idemproxy.conf.example \
		"$(DESTDIR)$(SYSCONFDIR)/idemproxy/idemproxy.conf.example"
	@mkdir -p build
	sed -e 's|@SBINDIR@|$(SBINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' \
		deploy/systemd/idemproxy.service > build/idemproxy.service
	$(INSTALL) -D -m 0644 build/idemproxy.service "$(DESTDIR)$(SYSTEMDUNITDIR)/idemproxy.service"
	$(INSTALL) -D -m 0644 LICENSE "$(DESTDIR)$(DOCDIR)/LICENSE"

uninstall:
	rm -f "$(DESTDIR)$(SBINDIR)/idemproxy" \
		"$(DESTDIR)$(MANDIR)/man8/idemproxy.8" \
		"$(DESTDIR)$(MANDIR)/man5/idemproxy.conf.5" \
		"$(DESTDIR)$(SYSCONFDIR)/idemproxy/idemproxy.conf.example" \
		"$(DESTDIR)$(SYSTEMDUNITDIR)/idemproxy.service" \
		"$(DESTDIR)$(DOCDIR)/LICENSE"
	rmdir "$(DESTDIR)$(SYSCONFDIR)/idemproxy" "$(DESTDIR)$(DOCDIR)" 2>/dev/null || true

# Each parser's fuzzer, FUZZ_SECONDS each (libFuzzer from clang), from its
# seeds in tests/fuzz/corpus/NAME (when there are any) and what earlier runs
# found in build/fuzz/corpus/NAME.
fuzz:
	@sh scripts/deps.sh fuzz
	@$(MAKE) --no-print-directory $(FUZZERS)
	@for f in $(FUZZERS); do \
		n=$${f##*/}; mkdir -p build/fuzz/corpus/$$n; \
		seeds=; [ -d tests/fuzz/corpus/$$n ] && seeds=tests/fuzz/corpus/$$n; \
		$$f -max_total_time=$(FUZZ_SECONDS) -print_final_stats=0 build/fuzz/corpus/$$n $$seeds \
			2>build/fuzz/$$n.log || { tail -n 40 build/fuzz/$$n.log; exit 1; }; \
		echo "$${f##*/}: $$(grep -o 'Done [0-9]* runs' build/fuzz/$${f##*/}.log | tail -n 1), no crash"; \
	done

.SECONDEXPANSION:
$(FUZZERS): build/fuzz/%: $$(FUZZ_SRC_%)
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) -MMD -MP -MF $@.d -o $@ $(FUZZ_SRC_$*) $(FUZZ_LIB_$*)

-include $(FUZZERS:=.d)

format:
	clang-format -i proxy/*.c proxy/*.h conf/*.c conf/*.h http/*.c http/*.h tests/unit/*.c tests/unit/*.h

clean:
	rm -rf build idemproxy idemproxy-asan

-include $(DEPS)
