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
# `make cuda` builds the same into build-cuda/ with ZT_CUDA defined, the CUDA
# backend (src/kernels/cuda/*.cu: nvcc, cuBLASLt) linked in instead of
# src/kernels/backend_cuda_none.c, warnings as errors on both compilers, and the
# kernel checks build-cuda/tests/gpu/kernels_check (run on a machine with a GPU).
# The plain `make` needs no CUDA at all.

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
else ifeq ($(CUDA),1)
BUILD   := build-cuda
OPT     := -O3 -g -march=native -Werror
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
# librsvg and cairo rasterise the plot's SVG for `ztrain plot --output FILE.png` (src/report/plot.c).
# Optional: where pkg-config does not find both (the GPU machine's image), or with NO_PNG=1,
# plot.c is built without them and refuses .png, naming what is missing; SVG still works.
ifneq ($(NO_PNG),1)
ifeq ($(shell pkg-config --exists librsvg-2.0 cairo 2>/dev/null && echo yes),yes)
RSVG_CFLAGS := -DZT_HAVE_PNG $(shell pkg-config --cflags librsvg-2.0 cairo)
LDLIBS  += $(shell pkg-config --libs librsvg-2.0 cairo)
endif
endif
# Apache Arrow's C++ libraries (libarrow and libparquet with their headers, from the pyarrow
# wheel that scripts/setup.sh installs into ARROW_VENV) read Parquet and datasets' Arrow files
# as data (src/io/table.c through src/io/arrow_shim.cc, the one C++ file; docs/text.md).
# Optional: where they are not found, or with NO_ARROW=1, the shim is left out and table.c
# refuses such data, naming the file and what is missing.
ARROW_VENV ?= /usr/local/lib/ztrain/arrow-venv
ifneq ($(NO_ARROW),1)
ARROW_DIR  := $(firstword $(wildcard $(ARROW_VENV)/lib/python3*/site-packages/pyarrow))
ARROW_LIBS := $(firstword $(wildcard $(ARROW_DIR)/libarrow.so.[0-9]*)) \
              $(firstword $(wildcard $(ARROW_DIR)/libparquet.so.[0-9]*))
ifeq ($(words $(ARROW_LIBS))$(if $(wildcard $(ARROW_DIR)/include/parquet/arrow/reader.h),y),2y)
HAVE_ARROW := 1
LDLIBS  += -Wl,-rpath,$(ARROW_DIR) $(ARROW_LIBS) -lstdc++
endif
endif
# the C++ compiler of the C compiler's family (clang's sanitizer runtimes with clang's)
ifneq ($(findstring clang,$(CC)),)
CXX     := clang++
endif
CXXFLAGS += -std=c++20 -D_GNU_SOURCE -Wall -Wextra $(OPT) -MMD -MP -isystem $(ARROW_DIR)/include
LDFLAGS += -fopenmp $(filter -fsanitize=%,$(OPT))
# clang, linking through its C driver, leaves out the C++ half of its sanitizer runtimes
# (UBSan's vptr check, which the C++ shim is compiled with) unless asked
ifeq ($(HAVE_ARROW)$(findstring clang,$(CC)),1clang)
ifneq ($(filter -fsanitize=%,$(OPT)),)
LDFLAGS += -fsanitize-link-c++-runtime
endif
endif

LIB_SRC  := $(shell find src -name '*.c' ! -path 'src/cli/*' | sort)
ifeq ($(CUDA),1)
# the CUDA toolkit: CUDA_HOME for nvcc and the headers, CUDA_LIBDIR for cuBLASLt, the
# CUDA runtime and NCCL (a machine whose libraries live elsewhere, such as inside a
# Python environment, points CUDA_LIBDIR there, or passes -I and -L directories in
# CPPFLAGS and LDFLAGS, which come first)
CUDA_HOME   ?= /usr/local/cuda
CUDA_LIBDIR ?= $(CUDA_HOME)/lib64
NVCC        ?= $(CUDA_HOME)/bin/nvcc
# Ampere (sm_80), Hopper (sm_90) and Hopper's arch-specific features (sm_90a), plus
# compute_90 PTX that the driver compiles for newer parts
CUDA_GENCODE ?= -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90 \
                -gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_90,code=compute_90
# --fmad=false: no contraction of a*b + c into an fma, as the C kernels (ISO C) do not
# contract; the CUDA code asks for fma where the CPU code does (src/kernels/cuda/common.cuh)
NVCCFLAGS ?= -std=c++20 -O3 -g -lineinfo --fmad=false -Werror all-warnings $(CUDA_GENCODE) \
             -Xcompiler -Wall,-Wextra,-Werror,-fno-math-errno
# The fast kernels (src/kernels/cuda/fast_*.cu, fast.h) are held to the exact ones within
# bf16 error, not to the CPU's bits, so nvcc may contract a*b + c into fma there.
FAST_NVCCFLAGS := $(filter-out --fmad=false,$(NVCCFLAGS)) --fmad=true
CPPFLAGS += -DZT_CUDA -I$(CUDA_HOME)/include
LIB_SRC  := $(filter-out src/kernels/backend_cuda_none.c,$(LIB_SRC))
CU_SRC   := $(shell find src -name '*.cu' | sort)
LDLIBS   += -L$(CUDA_LIBDIR) -Wl,-rpath,$(CUDA_LIBDIR) -lcublasLt -lcudart -lnccl -lstdc++
endif
ifeq ($(CUDA),1)
# cuDNN's fused attention for fast mode (docs/gpu.md, "Attention through cuDNN"): the shim
# src/kernels/cuda/cudnn_attention.cc over the cudnn-frontend headers (scripts/setup.sh puts
# them in CUDNN_FE_INCLUDE), built where they, cuDNN's headers (CUDNN_INCLUDE) and its
# library (CUDNN_LIBDIR) are all found; NO_CUDNN=1 leaves it out.  Without it ztrain runs
# its own attention kernels and its plan line says "built without cuDNN".  libcudnn is
# opened at run time (found through an rpath to CUDNN_LIBDIR, or LD_LIBRARY_PATH), never
# linked, so the binary also runs where it is absent.
CUDNN_FE_INCLUDE ?= /usr/local/lib/ztrain/cudnn-frontend/include
CUDNN_INCLUDE    ?= $(CUDA_HOME)/include
CUDNN_LIBDIR     ?= $(CUDA_LIBDIR)
ifneq ($(NO_CUDNN),1)
ifneq ($(wildcard $(CUDNN_FE_INCLUDE)/cudnn_frontend.h),)
ifneq ($(and $(wildcard $(CUDNN_INCLUDE)/cudnn.h),$(wildcard $(CUDNN_LIBDIR)/libcudnn.so.9*)),)
HAVE_CUDNN := 1
endif
endif
endif
endif
CLI_SRC  := $(sort $(wildcard src/cli/*.c))
TEST_SRC := $(sort $(wildcard tests/test_*.c))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o) $(CU_SRC:%.cu=$(BUILD)/obj/%.o)
ifeq ($(HAVE_ARROW),1)
LIB_OBJ  += $(BUILD)/obj/src/io/arrow_shim.o
endif
ifeq ($(HAVE_CUDNN),1)
LIB_OBJ  += $(BUILD)/obj/src/kernels/cuda/cudnn_attention.o
LDLIBS   += -Wl,-rpath,$(CUDNN_LIBDIR) -ldl
endif
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
FUZZ_SRC := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_REPLAY := $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/tests/test_%)
FUZZ_BIN := $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/%)

.PHONY: all test test-san test-ubsan fuzz fuzz-bins check-layers clean cuda cuda-bins
.SECONDARY:
all: $(BUILD)/ztrain $(TEST_BIN) $(FUZZ_REPLAY)

$(BUILD)/obj/%.o: %.c Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/src/report/plot.o: CPPFLAGS += $(RSVG_CFLAGS)

$(BUILD)/obj/%.o: %.cc Makefile
	@mkdir -p $(dir $@)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) -c $< -o $@

$(BUILD)/obj/src/io/table.o: CPPFLAGS += $(if $(HAVE_ARROW),-DZT_HAVE_ARROW)
$(BUILD)/obj/src/kernels/cuda/fast_cudnn.o: CPPFLAGS += $(if $(HAVE_CUDNN),-DZT_HAVE_CUDNN)
$(BUILD)/obj/src/kernels/cuda/cudnn_attention.o: CXXFLAGS += -isystem $(CUDNN_FE_INCLUDE) -isystem $(CUDNN_INCLUDE) \
                                                         -isystem $(CUDA_HOME)/include

# The non-native bf16 kernel is AVX2/FMA code in every x86-64 build, the sanitizer
# builds (no -march=native) included, so each build runs and tests the same path;
# it is called only when the CPU has AVX2 and FMA (zt_gemm_bf16_available).
# Likewise the AMX tile products (amx.c) are built into every x86-64 build and run
# only when the CPU and oneDNN's ISA have AMX-BF16 (zt_amx_usable).
ifeq ($(shell uname -m),x86_64)
$(BUILD)/obj/src/kernels/gemm_bf16.o: CFLAGS += -mavx2 -mfma
$(BUILD)/obj/src/kernels/amx.o: CFLAGS += -mamx-tile -mamx-bf16
# The attention and SwiGLU kernels vectorise across lanes only (one query, or one
# element, per lane; no sum runs across lanes), so on AVX-512 builds they use 512-bit
# vectors, which GCC's tuning otherwise leaves at 256: each lane computes the same
# values either way, so the results are bit-identical, and the softmax exponentials and
# SiLU run twice as wide (docs/performance.md).  The one sum along a vector they need
# is zt_dot_rows in reductions.c, built at the default width.  Builds without AVX-512
# ignore the flag.
$(BUILD)/obj/src/kernels/attention.o $(BUILD)/obj/src/kernels/attention16.o \
$(BUILD)/obj/src/kernels/swiglu.o: CFLAGS += -mprefer-vector-width=512
WIDTH_256 := -mprefer-vector-width=256
endif

# tests/test_vector_width.c holds those three files to the same bits at both widths:
# they are built once more at 256 bits, every entry point renamed to w256_*.
WIDTH_OBJ := $(addprefix $(BUILD)/obj/tests/width/,attention.o attention16.o swiglu.o)
WIDTH_RENAME := $(foreach f,attention_forward attention_forward_copy16 attention_backward \
                  attention16_supported attention16_pack_bytes attention16_forward \
                  attention16_backward swiglu_forward swiglu_backward attention_forward_pos \
                  attention_backward_pos attention16_forward_pos attention16_backward_pos,-Dzt_$(f)=w256_$(f))
$(BUILD)/obj/tests/width/%.o: src/kernels/%.c Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(WIDTH_256) $(WIDTH_RENAME) -c $< -o $@

$(BUILD)/tests/test_vector_width: $(BUILD)/obj/tests/test_vector_width.o $(WIDTH_OBJ) $(BUILD)/libztrain.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

$(BUILD)/obj/%.o: %.cu Makefile
	@mkdir -p $(dir $@)
	$(NVCC) $(filter -D% -I%,$(CPPFLAGS)) $(NVCCFLAGS) -MMD -MP -MF $(@:.o=.d) -c $< -o $@

$(BUILD)/obj/src/kernels/cuda/fast_%.o: src/kernels/cuda/fast_%.cu Makefile
	@mkdir -p $(dir $@)
	$(NVCC) $(filter -D% -I%,$(CPPFLAGS)) $(FAST_NVCCFLAGS) -MMD -MP -MF $(@:.o=.d) -c $< -o $@

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

# the CUDA build (see the top); cuda-bins is what it builds
cuda:
	$(MAKE) CUDA=1 cuda-bins

# (tests/gpu/kernels_check.c links like a test program, by the rule above)
cuda-bins: all $(BUILD)/tests/gpu/kernels_check

test-san:
	$(MAKE) SANITIZE=1 test

# the layer map of docs/architecture.md against every #include in src/ and every
# call between the objects of $(BUILD) (make CUDA=1 check-layers: with the .cu
# files'), then the exported functions nothing calls
check-layers: $(LIB_OBJ) $(CLI_OBJ)
	scripts/check_layers.sh --objects $(BUILD)
	scripts/find_uncalled.sh $(BUILD)

test-ubsan:
	$(MAKE) SANITIZE=ubsan test

fuzz:
	$(MAKE) SANITIZE=fuzz CC=clang fuzz-bins

fuzz-bins: $(FUZZ_BIN)

clean:
	rm -rf build build-san build-ubsan build-fuzz build-cuda

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
