// ls [PATH...]: list a directory's entries (or describe a file), one per line:
// "<name> <type> <inode> <size>", type 1 = directory, 2 = file, 3 = device.
#include "kernel/types.h"
#include "kernel/stat.h"
#include "kernel/fs.h"
#include "kernel/fcntl.h"
#include "kernel/param.h"
#include "user/user.h"

static char path[MAXPATH + DIRSIZ + 2];

// Print one line for an entry called name with metadata st.
static void
show(const char *name, struct stat *st)
{
  printf("%-14s %d %d %lu\n", name, st->type, st->ino, st->size);
}

// List the directory open as fd, whose path is dir. Returns 0, or -1 after an error.
static int
listdir(int fd, const char *dir)
{
  struct dirent de;
  struct stat st;
  char name[DIRSIZ + 1];
  uint len = strlen(dir);
  int status = 0;

  if(len + 1 + DIRSIZ + 1 > sizeof(path)){
    fprintf(2, "ls: path too long: %s\n", dir);
    return -1;
  }
  strcpy(path, dir);
  if(len > 0 && path[len - 1] != '/')
    path[len++] = '/';
  while(read(fd, &de, sizeof(de)) == sizeof(de)){
    if(de.inum == 0)
      continue;                    // a free slot
    memmove(name, de.name, DIRSIZ);
    name[DIRSIZ] = 0;              // a name of exactly DIRSIZ bytes has no terminator
    strcpy(path + len, name);
    if(stat(path, &st) < 0){
      fprintf(2, "ls: cannot stat %s\n", path);
      status = -1;
      continue;
    }
    show(name, &st);
  }
  return status;
}

// List one path. Returns 0, or -1 after printing an error.
static int
ls(const char *p)
{
  struct stat st;
  int fd, r = 0;

  if((fd = open(p, O_RDONLY)) < 0){
    fprintf(2, "ls: cannot open %s\n", p);
    return -1;
  }
  if(fstat(fd, &st) < 0){
    fprintf(2, "ls: cannot stat %s\n", p);
    close(fd);
    return -1;
  }
  if(st.type == T_DIR)
    r = listdir(fd, p);
  else
    show(p, &st);
  close(fd);
  return r;
}

int
main(int argc, char *argv[])
{
  int i, status = 0;

  if(argc < 2)
    return ls(".") < 0;
  for(i = 1; i < argc; i++){
    if(ls(argv[i]) < 0)
      status = 1;
  }
  return status;
}
