# user.mk: what user/ builds, by role (docs/userland.md, "Building"). Included by the
# Makefile and by tests/host/Makefile, so every list exists once; paths are from the top
# of the tree.
#
#   user/            the xv6 user library and the classic programs, one file each
#   user/tests/      test programs, one file each, with their library testlib.c
#   user/llm/        the model library (no programs)
#   user/smolprobe/  one program of all its files; user/smolserve/ another

# Libraries.
ULIB_SRCS := user/ulib.c user/memfree.c user/printf.c user/umalloc.c user/umath.c
ULIB_ASM := user/usys.S
TESTLIB_SRCS := user/tests/testlib.c
LLM_SRCS := user/llm/llm.c user/llm/tokenizer.c user/llm/unicode_classes.c user/llm/kv.c user/llm/harts.c
LLM_HDRS := user/llm/llm.h user/llm/tokenizer.h user/llm/kv.h user/llm/harts.h

# Programs: user/NAME.c, user/tests/NAME.c (linked with testlib), user/NAME/*.c.
CLASSIC_PROGS := init sh cat echo grep kill ln ls mkdir rm wc cksum
TEST_PROGS := usertests lazytests cowtests mmaptests stress fptest freecheck forkbench readbench writebench \
	mkbig mapwrite tokcheck pagein swaptest hartstest fuzz
FOLDER_PROGS := smolprobe smolserve

# The programs the model library is linked into.
LLM_PROGS := tokcheck smolprobe smolserve hartstest
