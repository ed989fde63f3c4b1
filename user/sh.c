// sh: the NexOS shell.
//
//   line     := list
//   list     := pipeline { (';' | '&') [pipeline] }
//   pipeline := command { '|' command }
//   command  := '(' list ')' { redir }  |  word { word | redir }
//   redir    := '<' word  |  '>' word  |  '>>' word
//
// Words may be quoted with '...' or "..." (no escapes inside). `cd DIR` is built in. A
// command name without '/' that is not found in the current directory is looked up in /.
// The prompt "$ " is printed only when standard input is the console.
//
// The line is parsed into a tree of nodes from a fixed pool (no malloc, and little stack:
// a user stack is one page). Each command runs in a forked child; the shell waits for it
// unless the command ends with '&'.
#include "kernel/types.h"
#include "kernel/stat.h"
#include "kernel/fcntl.h"
#include "kernel/param.h"
#include "user/user.h"

#define LINEMAX  2048           // longest input line
#define NNODE    64             // nodes per line
#define MAXARGS  (MAXARG - 1)   // words per command (exec's limit, minus the final 0)
#define MAXDEPTH 8              // nesting of parentheses

// ---------------------------------------------------------------- the command tree

enum { EXEC = 1, SUBSHELL, PIPE, LIST };

struct node {
  int type;
  // EXEC: argv[0..argc-1], argv[argc] == 0.  SUBSHELL: body is the list inside ( ).
  char *argv[MAXARGS + 1];
  int argc;
  struct node *body;
  // EXEC and SUBSHELL: redirections (0 = none); append: '>>' rather than '>'.
  char *in, *out;
  int append;
  // PIPE: left | right.  LIST: left, then right (right may be 0); back: left ends in '&'.
  struct node *left, *right;
  int back;
};

static char line[LINEMAX];
static char words[LINEMAX * 2];   // unquoted copies of the words (each one terminated)
static struct node pool[NNODE];

// Parser state for the current line.
static struct {
  char *p;           // next unread character of line
  char *w;           // next free byte of words
  int nnode;         // nodes used
  const char *err;   // first syntax error, or 0
} ps;

// A fresh zeroed node of the given type, or 0 (and an error) when the pool is used up.
static struct node*
newnode(int type)
{
  struct node *n;

  if(ps.nnode >= NNODE){
    if(!ps.err)
      ps.err = "command too complex";
    return 0;
  }
  n = &pool[ps.nnode++];
  memset(n, 0, sizeof(*n));
  n->type = type;
  return n;
}

// ---------------------------------------------------------------- tokens

#define SYMBOLS "<>|;&()"

enum { T_END = 0, T_WORD, T_IN, T_OUT, T_APPEND, T_PIPE, T_SEMI, T_AMP, T_LP, T_RP };

static int
isblank_(char c)
{
  return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v';
}

// Type of the next token, without consuming it.
static int
peek(void)
{
  char c;

  while(isblank_(*ps.p))
    ps.p++;
  c = *ps.p;
  switch(c){
  case 0:   return T_END;
  case '<': return T_IN;
  case '>': return ps.p[1] == '>' ? T_APPEND : T_OUT;
  case '|': return T_PIPE;
  case ';': return T_SEMI;
  case '&': return T_AMP;
  case '(': return T_LP;
  case ')': return T_RP;
  default:  return T_WORD;
  }
}

// Consume the next (non-word) token.
static void
skip(void)
{
  int t = peek();

  if(t == T_APPEND)
    ps.p += 2;
  else if(t != T_END)
    ps.p++;
}

// Consume the next word and return a terminated copy with quotes removed, or 0 (with an
// error) when the next token is not a word or a quote is not closed.
static char*
word(void)
{
  char *start, q;

  if(peek() != T_WORD){
    if(!ps.err)
      ps.err = "missing word";
    return 0;
  }
  start = ps.w;
  while(*ps.p && !isblank_(*ps.p) && !strchr(SYMBOLS, *ps.p)){
    if(*ps.p == '\'' || *ps.p == '"'){
      q = *ps.p++;
      while(*ps.p && *ps.p != q)
        *ps.w++ = *ps.p++;
      if(*ps.p != q){
        if(!ps.err)
          ps.err = "unterminated quote";
        return 0;
      }
      ps.p++;
    } else {
      *ps.w++ = *ps.p++;
    }
  }
  *ps.w++ = 0;
  return start;
}

// ---------------------------------------------------------------- parser

static struct node *parselist(int depth);

// Parse redirections following a command into n; stops at the first other token.
static void
parseredirs(struct node *n)
{
  int t;

  for(;;){
    t = peek();
    if(t != T_IN && t != T_OUT && t != T_APPEND)
      return;
    skip();
    if(t == T_IN){
      n->in = word();
    } else {
      n->out = word();
      n->append = (t == T_APPEND);
    }
    if(ps.err)
      return;
  }
}

// command := '(' list ')' redirs | words and redirs.
static struct node*
parsecommand(int depth)
{
  struct node *n;
  int t;

  if(peek() == T_LP){
    if(depth >= MAXDEPTH){
      ps.err = "parentheses nested too deeply";
      return 0;
    }
    skip();
    if((n = newnode(SUBSHELL)) == 0)
      return 0;
    n->body = parselist(depth + 1);
    if(ps.err)
      return 0;
    if(peek() != T_RP){
      ps.err = "missing )";
      return 0;
    }
    skip();
    parseredirs(n);
    return n;
  }
  if((n = newnode(EXEC)) == 0)
    return 0;
  for(;;){
    parseredirs(n);
    if(ps.err)
      return 0;
    t = peek();
    if(t != T_WORD)
      break;
    if(n->argc >= MAXARGS){
      ps.err = "too many arguments";
      return 0;
    }
    n->argv[n->argc++] = word();
    if(ps.err)
      return 0;
  }
  if(n->argc == 0 && n->in == 0 && n->out == 0){
    ps.err = "missing command";
    return 0;
  }
  return n;
}

// pipeline := command { '|' command }, built right-leaning: a | (b | c).
static struct node*
parsepipeline(int depth)
{
  struct node *first, *n, *last = 0, *cmd;

  first = parsecommand(depth);
  if(ps.err)
    return 0;
  while(peek() == T_PIPE){
    skip();
    cmd = parsecommand(depth);
    if(ps.err)
      return 0;
    if((n = newnode(PIPE)) == 0)
      return 0;
    if(last == 0){
      n->left = first;
      first = n;
    } else {
      n->left = last->right;
      last->right = n;
    }
    n->right = cmd;
    last = n;
  }
  return first;
}

// list := pipeline { (';' | '&') [pipeline] }, as a chain of LIST nodes.
static struct node*
parselist(int depth)
{
  struct node *head = 0, *tail = 0, *n;
  int t;

  for(;;){
    t = peek();
    if(t == T_END || t == T_RP)
      break;
    if((n = newnode(LIST)) == 0)
      return 0;
    n->left = parsepipeline(depth);
    if(ps.err)
      return 0;
    t = peek();
    if(t == T_SEMI || t == T_AMP){
      n->back = (t == T_AMP);
      skip();
    } else if(t != T_END && t != T_RP){
      ps.err = "syntax error";
      return 0;
    }
    if(tail)
      tail->right = n;
    else
      head = n;
    tail = n;
  }
  return head;
}

// Parse the whole line; 0 for an empty line or an error (reported on fd 2).
static struct node*
parseline(void)
{
  struct node *n;

  ps.p = line;
  ps.w = words;
  ps.nnode = 0;
  ps.err = 0;
  n = parselist(0);
  if(!ps.err && peek() != T_END)
    ps.err = "unexpected )";
  if(ps.err){
    fprintf(2, "sh: %s\n", ps.err);
    return 0;
  }
  return n;
}

// ---------------------------------------------------------------- running

static void runlist(struct node *n, int top);
static void runcmd(struct node *n) __attribute__((noreturn));

// Apply n's redirections to fds 0 and 1; on failure print why and exit the child.
static void
redirect(struct node *n)
{
  int fd;
  char c;

  if(n->in){
    close(0);
    if(open(n->in, O_RDONLY) != 0){
      fprintf(2, "sh: cannot open %s\n", n->in);
      exit(1);
    }
  }
  if(n->out){
    close(1);
    fd = open(n->out, n->append ? (O_RDWR | O_CREATE) : (O_WRONLY | O_CREATE | O_TRUNC));
    if(fd != 1){
      fprintf(2, "sh: cannot create %s\n", n->out);
      exit(1);
    }
    if(n->append){
      while(read(1, &c, 1) == 1)   // no lseek: read to the end, then writes append
        ;
    }
  }
}

// exec argv, looking in / too when the name has no '/'. Returns only on failure.
static void
execute(char **argv)
{
  static char path[MAXPATH];

  exec(argv[0], argv);
  if(strchr(argv[0], '/') == 0 && strlen(argv[0]) + 2 <= sizeof(path)){
    path[0] = '/';
    strcpy(path + 1, argv[0]);
    exec(path, argv);
  }
}

// Run n in this (child) process; never returns.
static void
runcmd(struct node *n)
{
  int p[2], left, right, w, st, status = 0;

  switch(n->type){
  case EXEC:
    redirect(n);
    if(n->argc == 0)
      exit(0);
    execute(n->argv);
    fprintf(2, "exec %s failed\n", n->argv[0]);
    exit(1);
  case SUBSHELL:
    redirect(n);
    runlist(n->body, 0);
    exit(0);
  case PIPE:
    if(pipe(p) < 0){
      fprintf(2, "sh: pipe failed\n");
      exit(1);
    }
    if((left = fork()) == 0){
      close(1);
      dup(p[1]);
      close(p[0]);
      close(p[1]);
      runcmd(n->left);
    }
    if((right = fork()) == 0){
      close(0);
      dup(p[0]);
      close(p[0]);
      close(p[1]);
      runcmd(n->right);
    }
    close(p[0]);
    close(p[1]);
    if(left < 0 || right < 0)
      fprintf(2, "sh: fork failed\n");
    // The pipeline's status is that of its last command.
    for(w = (left > 0) + (right > 0); w > 0; w--){
      if(wait(&st) == right)
        status = st;
    }
    exit(status);
  }
  exit(1);
}

// Wait until child pid exits, reaping any other (background) child on the way.
static void
waitfor(int pid)
{
  int w;

  while((w = wait(0)) >= 0 && w != pid)
    ;
}

// Is n a plain `cd` command (which must run in the shell itself)?
static int
iscd(struct node *n)
{
  return n->type == EXEC && n->argc > 0 && strcmp(n->argv[0], "cd") == 0;
}

// Run each pipeline of the list n in turn. top: n is the line itself (the shell process),
// so a `cd` there changes the shell's own directory.
static void
runlist(struct node *n, int top)
{
  int pid;

  for(; n; n = n->right){
    if(top && iscd(n->left) && !n->back){
      if(n->left->argc > 2)
        fprintf(2, "cd: too many arguments\n");
      else if(chdir(n->left->argc == 2 ? n->left->argv[1] : "/") < 0)
        fprintf(2, "cd: cannot cd to %s\n", n->left->argc == 2 ? n->left->argv[1] : "/");
      continue;
    }
    pid = fork();
    if(pid < 0){
      fprintf(2, "sh: fork failed\n");
      return;
    }
    if(pid == 0)
      runcmd(n->left);
    if(n->back)
      printf("[%d]\n", pid);
    else
      waitfor(pid);
  }
}

// ---------------------------------------------------------------- input

// Read one line into line[]. Returns 1 for a line, 0 at end of input. A line longer than
// LINEMAX-1 is discarded whole (with a message) and replaced by an empty one.
static int
getline(void)
{
  int n = 0, toolong = 0, got;
  char c;

  for(;;){
    got = read(0, &c, 1);
    if(got != 1){
      if(n == 0 && !toolong)
        return 0;
      break;
    }
    if(c == '\n' || c == '\r')
      break;
    if(n < LINEMAX - 1)
      line[n++] = c;
    else
      toolong = 1;
  }
  line[n] = 0;
  if(toolong){
    fprintf(2, "sh: line too long (more than %d characters)\n", LINEMAX - 1);
    line[0] = 0;
  }
  return 1;
}

// Is standard input a terminal (the console device) rather than a file or a pipe?
static int
interactive(void)
{
  struct stat st;

  return fstat(0, &st) == 0 && st.type == T_DEVICE;
}

int
main(void)
{
  struct node *n;
  int fd, prompt;

  // Make sure fds 0, 1 and 2 are open (on the console).
  while((fd = open("/console", O_RDWR)) >= 0){
    if(fd >= 3){
      close(fd);
      break;
    }
  }
  prompt = interactive();           // `sh < script` runs silently
  for(;;){
    if(prompt)
      fprintf(2, "$ ");
    if(!getline())
      break;
    n = parseline();
    if(n)
      runlist(n, 1);
  }
  exit(0);
}
