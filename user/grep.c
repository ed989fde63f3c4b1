// grep PATTERN [FILE...]: print the lines that match PATTERN, a small regular expression:
//   c  a literal character       .  any character        \c  c itself (for . * + ? ^ $ \)
//   x* x+ x?  repetition of the preceding atom (greedy)
//   ^  at the start: anchor to the line's start;  $ at the end: anchor to its end.
// Exit status 0 when some line matched, 1 when none did, 2 on an error.
#include "kernel/types.h"
#include "kernel/fcntl.h"
#include "user/user.h"

#define BUFSZ 8192
static char buf[BUFSZ + 1];

// Length in pattern bytes of the atom at re (2 for an escape, else 1).
static int
atomlen(const char *re)
{
  return (re[0] == '\\' && re[1] != 0) ? 2 : 1;
}

// Does the atom at re accept the character c (c != 0)?
static int
atomok(const char *re, char c)
{
  if(re[0] == '\\' && re[1] != 0)
    return re[1] == c;
  return re[0] == '.' || re[0] == c;
}

// Does re match a prefix of s? Backtracks only at repetition operators, so the recursion
// depth is at most the number of operators in re.
static int
matchhere(const char *re, const char *s)
{
  int alen, n, lo, hi;

  for(;;){
    if(re[0] == 0)
      return 1;
    if(re[0] == '$' && re[1] == 0)
      return *s == 0;
    alen = atomlen(re);
    if(re[alen] == '*' || re[alen] == '+' || re[alen] == '?'){
      lo = (re[alen] == '+');
      hi = (re[alen] == '?') ? 1 : -1;
      for(n = 0; s[n] && (hi < 0 || n < hi) && atomok(re, s[n]); n++)
        ;
      for(; n >= lo; n--){
        if(matchhere(re + alen + 1, s + n))
          return 1;
      }
      return 0;
    }
    if(*s == 0 || !atomok(re, *s))
      return 0;
    re += alen;
    s++;
  }
}

// Does re match anywhere in the line s?
static int
match(const char *re, const char *s)
{
  if(re[0] == '^')
    return matchhere(re + 1, s);
  for(;;){
    if(matchhere(re, s))
      return 1;
    if(*s++ == 0)
      return 0;
  }
}

// Print the matching lines of fd. A line longer than the buffer is matched in pieces.
// Returns 1 if any line matched, 0 if none, -1 on a read error.
static int
grep(const char *re, int fd)
{
  int n, have = 0, found = 0;
  char *p, *q;

  while((n = read(fd, buf + have, BUFSZ - have)) > 0){
    have += n;
    buf[have] = 0;
    p = buf;
    while((q = strchr(p, '\n')) != 0){
      *q = 0;
      if(match(re, p)){
        *q = '\n';
        write(1, p, q + 1 - p);
        found = 1;
      }
      p = q + 1;
    }
    have -= p - buf;
    if(have == BUFSZ){             // no newline in a full buffer: treat it as one line
      if(match(re, buf)){
        write(1, buf, have);
        write(1, "\n", 1);
        found = 1;
      }
      have = 0;
    } else if(have > 0) {
      memmove(buf, p, have);
    }
  }
  if(have > 0){                    // last line without a newline
    buf[have] = 0;
    if(match(re, buf)){
      printf("%s\n", buf);
      found = 1;
    }
  }
  return n < 0 ? -1 : found;
}

int
main(int argc, char *argv[])
{
  int i, fd, r, found = 0, err = 0;

  if(argc < 2){
    fprintf(2, "usage: grep PATTERN [FILE...]\n");
    return 2;
  }
  if(argc == 2)
    return grep(argv[1], 0) > 0 ? 0 : 1;
  for(i = 2; i < argc; i++){
    if((fd = open(argv[i], O_RDONLY)) < 0){
      fprintf(2, "grep: cannot open %s\n", argv[i]);
      err = 1;
      continue;
    }
    r = grep(argv[1], fd);
    if(r < 0){
      fprintf(2, "grep: read error on %s\n", argv[i]);
      err = 1;
    } else if(r > 0){
      found = 1;
    }
    close(fd);
  }
  return err ? 2 : (found ? 0 : 1);
}
