# ztrain — build with `make`, test with `make test`.
#
# Every .c under src/ except src/cli/ goes into build/libztrain.a; src/cli/*.c
# link into build/ztrain; each tests/test_*.c becomes build/tests/test_* .
# SANITIZE=1 builds everything with AddressSanitizer + UndefinedBehaviorSanitizer
# into build-san/ instead; SANITIZE=ubsan (make test-ubsan CC=clang) with clang's
# UBSan including float-cast-overflow into build-ubsan/.  Each harness
# tests/fuzz/fuzz_NAME.c becomes build/tests/test_fuzz_NAME, which replays its
# committed seed corpus, and, with `make fuzz` (clang, libFuzzer + ASan + UBSan),
# build-fuzz/fuzz_NAME (tests/fuzz/run.sh runs them).

CC      ?= gcc
ifeq ($(SANITIZE),1)
BUILD   := build-san
OPT     := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
else ifeq ($(SANITIZE),ubsan)
BUILD   := build-ubsan
OPT     := -O1 -g -fno-omit-frame-pointer -fsanitize=undefined,float-cast-overflow -fno-sanitize-recover=all \
           -Wno-pass-failed
else ifeq ($(SANITIZE),fuzz)
BUILD   := build-fuzz
OPT     := -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined,float-cast-overflow \
           -fno-sanitize-recover=all -Wno-pass-failed
else
BUILD   := build
OPT     := -O3 -g -march=native
endif
# -fno-math-errno: sqrtf and friends need not set errno, so they vectorise to
# vsqrtps (AdamW ran 5x slower with a scalar errno check per element); results are
# unchanged, unlike -ffast-math, which ztrain never uses (torch-exact arithmetic).
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra $(OPT) -fno-math-errno -fopenmp -MMD -MP
MPI_CFLAGS := $(shell mpicc --showme:compile 2>/dev/null)
MPI_LIBS   := $(shell mpicc --showme:link 2>/dev/null)
CPPFLAGS += $(MPI_CFLAGS)
LDLIBS  += -ldnnl -lyaml -lcjson -lxxhash $(MPI_LIBS) -lm
# librsvg and cairo rasterise the plot's SVG for `ztrain plot --output FILE.png` (src/report/plot.c)
RSVG_CFLAGS := $(shell pkg-config --cflags librsvg-2.0 cairo 2>/dev/null)
LDLIBS  += $(shell pkg-config --libs librsvg-2.0 cairo 2>/dev/null)
LDFLAGS += -fopenmp $(filter -fsanitize=%,$(OPT))

LIB_SRC  := $(shell find src -name '*.c' ! -path 'src/cli/*' | sort)
CLI_SRC  := $(sort $(wildcard src/cli/*.c))
TEST_SRC := $(sort $(wildcard tests/test_*.c))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
FUZZ_SRC := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_REPLAY := $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/tests/test_%)
FUZZ_BIN := $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/%)

.PHONY: all test test-san test-ubsan fuzz fuzz-bins check-layers clean
.SECONDARY:
all: $(BUILD)/ztrain $(TEST_BIN) $(FUZZ_REPLAY)

$(BUILD)/obj/%.o: %.c Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/src/report/plot.o: CPPFLAGS += $(RSVG_CFLAGS)

$(BUILD)/libztrain.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/ztrain: $(CLI_OBJ) $(BUILD)/libztrain.a
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(BUILD)/libztrain.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

# a harness with replay.c as its main: runs the seed corpus (tests/fuzz/fuzz.h)
$(BUILD)/tests/test_fuzz_%: $(BUILD)/obj/tests/fuzz/fuzz_%.o $(BUILD)/obj/tests/fuzz/common.o \
                            $(BUILD)/obj/tests/fuzz/replay.o $(BUILD)/libztrain.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

# a harness with libFuzzer's main (SANITIZE=fuzz, clang)
$(BUILD)/fuzz_%: $(BUILD)/obj/tests/fuzz/fuzz_%.o $(BUILD)/obj/tests/fuzz/common.o $(BUILD)/libztrain.a
	$(CC) $(LDFLAGS) -fsanitize=fuzzer $^ $(LDLIBS) -o $@

test: all
	tests/run $(BUILD)

test-san:
	$(MAKE) SANITIZE=1 test

# every #include in src/ against the layer map of docs/architecture.md
check-layers:
	scripts/check_layers.sh

test-ubsan:
	$(MAKE) SANITIZE=ubsan test

fuzz:
	$(MAKE) SANITIZE=fuzz CC=clang fuzz-bins

fuzz-bins: $(FUZZ_BIN)

clean:
	rm -rf build build-san build-ubsan build-fuzz

# libFuzzer harnesses (clang): `make fuzz` builds build-fuzz/fuzz_checkpoint, the
# checkpoint readers (trainer_state.json, zero/index.json, manifest.json) under
# ASan + UBSan with float-cast-overflow; run it with
#   build-fuzz/fuzz_checkpoint -max_total_time=60 tests/fuzz/corpus/checkpoint
FUZZ_CC    ?= clang
FUZZ_FLAGS := -std=c11 -D_GNU_SOURCE -g -O1 -fno-sanitize-recover=all \
              -fsanitize=fuzzer,address,undefined,float-cast-overflow
FUZZ_CHECKPOINT_SRC := tests/fuzz/fuzz_checkpoint.c src/train/ckpt_state.c src/train/manifest.c \
    src/core/json.c src/core/fs.c src/core/dtype.c src/core/mem.c src/core/status.c src/core/input.c \
    src/core/text.c src/model/layout.c src/engine/optim.c
.PHONY: fuzz
fuzz: build-fuzz/fuzz_checkpoint
build-fuzz/fuzz_checkpoint: $(FUZZ_CHECKPOINT_SRC) Makefile
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) $(FUZZ_CHECKPOINT_SRC) -lcjson -lxxhash -lm -o $@

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
