// The flattened device tree that QEMU hands every hart in a1 at reset: read once, by
// hart 0 before kinit() can reuse its memory, for the one fact the kernel needs from it,
// the number of harts the machine has (the cpu@N nodes under /cpus).
//
// The blob (devicetree.org's "Flattened Devicetree" format) is big-endian: a header,
// then a structure block of 4-byte-aligned tokens. A node is BEGIN_NODE, its
// NUL-terminated name padded to 4 bytes, its properties (PROP, length, name offset, value
// padded to 4), its children, then END_NODE. The blob is not trusted: every read is
// checked against its stated size, and anything malformed means "no answer" (0).
#include "kernel/types.h"
#include "kernel/param.h"
#include "kernel/memlayout.h"
#include "kernel/riscv.h"
#include "kernel/defs.h"

#define FDT_MAGIC      0xd00dfeed
#define FDT_BEGIN_NODE 1
#define FDT_END_NODE   2
#define FDT_PROP       3
#define FDT_NOP        4
#define FDT_END        9
#define FDT_MAX_SIZE   (1024 * 1024)   // QEMU's are a few KiB; larger is taken as garbage

// Set by start() from a1 on hart 0; 0 if the firmware passed none.
uint64 boot_fdt;

// A bounded cursor over the structure block.
struct fdt_cursor {
  const uchar *p;    // the structure block
  uint32 size;       // its length in bytes
  uint32 off;        // next unread byte, always 4-aligned
};

static uint32
be32(const uchar *p)
{
  return ((uint32)p[0] << 24) | ((uint32)p[1] << 16) | ((uint32)p[2] << 8) | p[3];
}

// Contract: the next token, or -1 past the end of the block.
static int
next_token(struct fdt_cursor *c, uint32 *token)
{
  if(c->off + 4 > c->size)
    return -1;
  *token = be32(c->p + c->off);
  c->off += 4;
  return 0;
}

// Contract: skip n bytes rounded up to 4; -1 if that leaves the block.
static int
skip(struct fdt_cursor *c, uint32 n)
{
  uint32 padded = (n + 3) & ~3U;
  if(n > c->size || padded > c->size - c->off)
    return -1;
  c->off += padded;
  return 0;
}

// Contract: after BEGIN_NODE, consume the node's name; *name points at it. -1 if the name
// has no NUL inside the block.
static int
node_name(struct fdt_cursor *c, const char **name)
{
  uint32 n = 0;
  while(c->off + n < c->size && c->p[c->off + n] != 0)
    n++;
  if(c->off + n >= c->size)
    return -1;
  *name = (const char *)c->p + c->off;
  return skip(c, n + 1);
}

// Contract: the number of cpu@ nodes that are children of /cpus in the blob at h, of which
// at most room bytes may be read; 0 if it is not a well-formed blob.
int
fdt_cpus(const uchar *h, uint64 room)
{
  if(room < 40 || be32(h) != FDT_MAGIC)
    return 0;
  uint32 total = be32(h + 4), off_struct = be32(h + 8), size_struct = be32(h + 36);
  if(total > FDT_MAX_SIZE || total > room || off_struct > total ||
     size_struct > total - off_struct || (off_struct & 3) != 0)
    return 0;

  struct fdt_cursor c = { h + off_struct, size_struct, 0 };
  int depth = 0, in_cpus = 0, cpus = 0;
  uint32 token, len;
  const char *name;
  while(next_token(&c, &token) == 0){
    switch(token){
    case FDT_BEGIN_NODE:
      if(node_name(&c, &name) < 0)
        return 0;
      depth++;
      if(depth == 2)                    // a child of the root
        in_cpus = strncmp(name, "cpus", 5) == 0;
      else if(depth == 3 && in_cpus && strncmp(name, "cpu@", 4) == 0)
        cpus++;
      break;
    case FDT_END_NODE:
      if(--depth < 0)
        return 0;
      if(depth < 2)
        in_cpus = 0;
      break;
    case FDT_PROP:
      if(next_token(&c, &len) < 0 || skip(&c, 4) < 0 || skip(&c, len) < 0)
        return 0;
      break;
    case FDT_NOP:
      break;
    case FDT_END:
      return depth == 0 ? cpus : 0;
    default:
      return 0;
    }
  }
  return 0;   // ran off the block without FDT_END
}

// Contract: fdt_cpus() of the blob at physical address boot_fdt, 0 if that address is not
// in RAM. Called by hart 0 with paging off, before kinit() may overwrite the blob.
int
fdt_cpu_count(void)
{
  if(boot_fdt < KERNBASE || boot_fdt >= PHYSTOP || (boot_fdt & 7) != 0)
    return 0;
  return fdt_cpus((const uchar *)boot_fdt, PHYSTOP - boot_fdt);
}
