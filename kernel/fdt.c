// The flattened device tree that QEMU hands every hart in a1 at reset: read by hart 0
// before kinit() can reuse its memory, for the two facts the kernel needs from it: the
// number of harts (the cpu@N nodes under /cpus) and where RAM is (the reg of /memory@...).
//
// The blob (devicetree.org's "Flattened Devicetree" format) is big-endian: a header,
// then a structure block of 4-byte-aligned tokens, then a strings block holding the
// property names. A node is BEGIN_NODE, its NUL-terminated name padded to 4 bytes, its
// properties (PROP, value length, name's offset in the strings block, value padded to
// 4), its children, then END_NODE. The blob is not trusted: every read is checked
// against its stated size, and anything malformed means "no answer".
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

// What one walk of a blob learns.
struct fdt_facts {
  int cpus;          // cpu@ children of /cpus
  uint32 acells;     // the root's #address-cells: cells in a reg address (2 if unsaid)
  uint32 scells;     // the root's #size-cells: cells in a reg size (2 if unsaid)
  int mem;           // 0: no memory node's reg seen yet; 1: read into the two below;
                     // -1: the first one seen could not be read (no answer then)
  uint64 membase;    // the first (address, size) pair of the first memory node's reg
  uint64 memsize;
};

// Contract: the number held in n big-endian 4-byte cells at p (n is 1 or 2).
static uint64
cells(const uchar *p, uint32 n)
{
  uint64 v = 0;
  for(uint32 i = 0; i < n; i++)
    v = (v << 32) | be32(p + 4*i);
  return v;
}

// Contract: 1 if the root's child called name is a memory node ("memory", "memory@...").
static int
ismemory(const char *name)
{
  return strncmp(name, "memory", 7) == 0 || strncmp(name, "memory@", 7) == 0;
}

// Contract: read the first (address, size) pair of a memory node's reg value v (len
// bytes, all inside the blob) into f: 1, or -1 if the root's cell counts are not 1 or 2
// (more does not fit in 64 bits), the value is too short, or the range is empty or wraps.
static int
memreg(struct fdt_facts *f, const uchar *v, uint32 len)
{
  if(f->acells < 1 || f->acells > 2 || f->scells < 1 || f->scells > 2 ||
     len < 4 * (f->acells + f->scells))
    return -1;
  f->membase = cells(v, f->acells);
  f->memsize = cells(v + 4*f->acells, f->scells);
  if(f->memsize == 0 || f->membase + f->memsize < f->membase)
    return -1;
  return 1;
}

// Contract: note in f what the property called name, of a node at depth (1: the root)
// under the root's child top (0 at depth 1), with value v of len bytes (inside the blob),
// tells: the root's cell counts, or a memory node's reg.
//
// The cell counts are the root's own (QEMU's virt says 2 and 2); a reg is read with
// them. Properties precede a node's children, so they are known by the time the memory
// node comes. A root without them gets 2 and 2, what every RISC-V QEMU machine has,
// rather than the specification's default 2 and 1.
static void
note(struct fdt_facts *f, int depth, const char *top, const char *name,
     const uchar *v, uint32 len)
{
  if(depth == 1 && strncmp(name, "#address-cells", 15) == 0)
    f->acells = len == 4 ? be32(v) : 0;
  else if(depth == 1 && strncmp(name, "#size-cells", 12) == 0)
    f->scells = len == 4 ? be32(v) : 0;
  else if(depth == 2 && f->mem == 0 && ismemory(top) && strncmp(name, "reg", 4) == 0)
    f->mem = memreg(f, v, len);
}

// Contract: the property name at byte off of the strings block (str, n bytes), or 0 if
// it does not end inside the block.
static const char *
propname(const uchar *str, uint32 n, uint32 off)
{
  for(uint32 i = off; i < n; i++)
    if(str[i] == 0)
      return (const char *)str + off;
  return 0;
}

// Contract: walk the blob at h, of which at most room bytes may be read, and fill *f.
// 0 if it is well formed (a sound header, every token and name inside its block, FDT_END
// at depth 0), else -1 and *f means nothing.
static int
scan(const uchar *h, uint64 room, struct fdt_facts *f)
{
  if(room < 40 || be32(h) != FDT_MAGIC)
    return -1;
  uint32 total = be32(h + 4), off_struct = be32(h + 8), off_str = be32(h + 12);
  uint32 size_str = be32(h + 32), size_struct = be32(h + 36);
  if(total > FDT_MAX_SIZE || total > room || off_struct > total ||
     size_struct > total - off_struct || (off_struct & 3) != 0 ||
     off_str > total || size_str > total - off_str)
    return -1;

  struct fdt_cursor c = { h + off_struct, size_struct, 0 };
  const uchar *str = h + off_str;
  int depth = 0;
  const char *top = 0;      // the name of the root's child we are in, at depth >= 2
  uint32 token, len, nameoff;
  const char *name;
  const uchar *value;
  *f = (struct fdt_facts){ .acells = 2, .scells = 2 };
  while(next_token(&c, &token) == 0){
    switch(token){
    case FDT_BEGIN_NODE:
      if(node_name(&c, &name) < 0)
        return -1;
      depth++;
      if(depth == 2)
        top = name;
      else if(depth == 3 && strncmp(top, "cpus", 5) == 0 && strncmp(name, "cpu@", 4) == 0)
        f->cpus++;
      break;
    case FDT_END_NODE:
      if(--depth < 0)
        return -1;
      if(depth < 2)
        top = 0;
      break;
    case FDT_PROP:
      if(next_token(&c, &len) < 0 || next_token(&c, &nameoff) < 0)
        return -1;
      value = c.p + c.off;
      if(skip(&c, len) < 0 || (name = propname(str, size_str, nameoff)) == 0)
        return -1;
      note(f, depth, top, name, value, len);
      break;
    case FDT_NOP:
      break;
    case FDT_END:
      return depth == 0 ? 0 : -1;
    default:
      return -1;
    }
  }
  return -1;   // ran off the block without FDT_END
}

// Contract: the number of cpu@ nodes that are children of /cpus in the blob at h, of which
// at most room bytes may be read; 0 if it is not a well-formed blob.
int
fdt_cpus(const uchar *h, uint64 room)
{
  struct fdt_facts f;

  return scan(h, room, &f) == 0 ? f.cpus : 0;
}

// Contract: the first (address, size) pair of the reg of the first memory node (a child
// of the root) that has one, in the blob at h, of which at most room bytes may be read,
// into *base and *size: 0, or -1 if the blob is not well formed, has no such node, or
// that reg cannot be read (see memreg). A machine with several RAM ranges gets its first
// only (QEMU's virt has one).
int
fdt_memory(const uchar *h, uint64 room, uint64 *base, uint64 *size)
{
  struct fdt_facts f;

  if(scan(h, room, &f) < 0 || f.mem != 1)
    return -1;
  *base = f.membase;
  *size = f.memsize;
  return 0;
}

// Contract: how many bytes from boot_fdt may be read: up to the end of the largest RAM
// the kernel supports, 0 if boot_fdt is not in it. RAM's true end is what the tree is
// asked for, so it cannot bound the reads: they stop at the blob's stated size (at most
// FDT_MAX_SIZE), which QEMU places whole inside RAM, near its top.
static uint64
bootroom(void)
{
  if(boot_fdt < KERNBASE || boot_fdt >= MAXPHYSTOP || (boot_fdt & 7) != 0)
    return 0;
  return MAXPHYSTOP - boot_fdt;
}

// Contract: fdt_cpus() of the blob at physical address boot_fdt, 0 if that address is not
// in RAM. Called by hart 0 with paging off, before kinit() may overwrite the blob.
int
fdt_cpu_count(void)
{
  return fdt_cpus((const uchar *)boot_fdt, bootroom());
}

// Contract: fdt_memory() of the blob at physical address boot_fdt: RAM's start and size,
// 0, or -1 if there is no usable tree. Hart 0, paging off, before kinit().
int
fdt_ram(uint64 *base, uint64 *size)
{
  return fdt_memory((const uchar *)boot_fdt, bootroom(), base, size);
}
