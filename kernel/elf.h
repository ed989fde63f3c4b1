// ELF executable format (the subset exec() reads).
#define ELF_MAGIC 0x464C457FU  // "\x7FELF" read as a little-endian uint

// File header, at offset 0.
struct elfhdr {
  uint magic;      // ELF_MAGIC
  uchar elf[12];
  ushort type;
  ushort machine;
  uint version;
  uint64 entry;    // first instruction's virtual address
  uint64 phoff;    // file offset of the program header table
  uint64 shoff;
  uint flags;
  ushort ehsize;
  ushort phentsize;
  ushort phnum;    // number of program headers
  ushort shentsize;
  ushort shnum;
  ushort shstrndx;
};

// Program (segment) header.
struct proghdr {
  uint32 type;     // ELF_PROG_LOAD for a segment to load
  uint32 flags;    // ELF_PROG_FLAG_*
  uint64 off;      // file offset of the segment's bytes
  uint64 vaddr;    // where it goes in user memory
  uint64 paddr;
  uint64 filesz;   // bytes present in the file
  uint64 memsz;    // bytes in memory (the rest is zero)
  uint64 align;
};

#define ELF_PROG_LOAD       1
#define ELF_PROG_FLAG_EXEC  1
#define ELF_PROG_FLAG_WRITE 2
#define ELF_PROG_FLAG_READ  4
