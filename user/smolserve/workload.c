// smolserve's workload: the seed32 example, generated requests, or a workload file read
// and checked line by line (docs/smolserve.md, "Workloads").
#include "user/smolserve/smolserve.h"

// Copy a request id (1..ID_LEN-1 characters of [A-Za-z0-9_-]); 0 if it is not one.
static int
set_id(char *dst, const char *s, int n)
{
  if(n < 1 || n >= ID_LEN)
    return 0;
  for(int i = 0; i < n; i++){
    char c = s[i];
    if(!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '_' || c == '-'))
      return 0;
    dst[i] = c;
  }
  dst[n] = 0;
  return 1;
}

// The seed exercise's two requests (docs/smolserve.md, "Workloads"): A reserves 2048
// slots, has a prompt of 7 tokens and generates 3; B reserves 512, has 3 and generates 2.
int
seed32_workload(struct request *rq)
{
  static const int lens[2][3] = { { 2048, 7, 3 }, { 512, 3, 2 } };
  for(int i = 0; i < 2; i++){
    set_id(rq[i].id, i ? "B" : "A", 1);
    rq[i].max_len = lens[i][0];
    rq[i].n_prompt = lens[i][1];
    rq[i].gen = lens[i][2];
    for(int t = 0; t < rq[i].n_prompt; t++)
      rq[i].prompt[t] = t + 1;
  }
  return 2;
}

// xorshift64*: the generated workload's coin (state never 0).
static uint64
rnd(uint64 *st)
{
  *st ^= *st >> 12;
  *st ^= *st << 25;
  *st ^= *st >> 27;
  return *st * 2685821657736338717UL;
}

// n requests R0..R<n-1> of max_len slots: prompts of 1..4 ids in [1, 1000]; 7 in 8
// generate a short answer (1..max(1, long_len/4) tokens), 1 in 8 a long one (up to
// long_len), always within max_len. With prefix_len > 0 every prompt begins with the same
// prefix_len ids in [1, 1000], drawn from a second coin so that the rest is drawn as
// without one. docs/smolserve.md gives the distribution.
int
generate_workload(struct request *rq, int n, int max_len, int long_len, int prefix_len,
                  uint64 seed)
{
  uint64 st = seed * 0x9E3779B97F4A7C15UL + 1, pst = st ^ 0x5DEECE66DUL;
  int short_len = long_len / 4 > 1 ? long_len / 4 : 1, shared[MAX_PROMPT];
  for(int t = 0; t < prefix_len; t++)
    shared[t] = 1 + rnd(&pst) % 1000;
  for(int i = 0; i < n; i++){
    struct request *r = &rq[i];
    char id[ID_LEN];
    int len = snprintf(id, ID_LEN, "R%d", i);
    set_id(r->id, id, len);
    r->max_len = max_len;
    int own = 1 + rnd(&st) % 4;
    if(prefix_len + own >= max_len)
      own = max_len - 1 - prefix_len;
    memmove(r->prompt, shared, prefix_len * sizeof(int));
    r->n_prefix = prefix_len;
    r->n_prompt = prefix_len + (own > 0 ? own : 0);
    for(int t = 0; t < own; t++)
      r->prompt[prefix_len + t] = 1 + rnd(&st) % 1000;
    if(rnd(&st) % 8 == 0 && long_len > short_len)
      r->gen = short_len + 1 + rnd(&st) % (long_len - short_len);
    else
      r->gen = 1 + rnd(&st) % short_len;
    if(r->gen > max_len - r->n_prompt)
      r->gen = max_len - r->n_prompt;
  }
  return n;
}

// Die with "[smolserve] error: <file>:<line>: <why>".
static void
bad_line(const char *file, int line, const char *why)
{
  fprintf(2, "[smolserve] error: %s:%d: %s\n", file, line, why);
  exit(1);
}

// A decimal number at *p (advanced past it) in [0, hi], or -1.
long
read_number(const char **p, long hi)
{
  long v = 0;
  int digits = 0;
  for(; **p >= '0' && **p <= '9'; (*p)++, digits++)
    if((v = v * 10 + (**p - '0')) > hi)
      return -1;
  return digits ? v : -1;
}

// The next field of line [*p, end) (spaces and tabs between fields): sets *f and *n.
static int
field(const char **p, const char *end, const char **f, int *n)
{
  while(*p < end && (**p == ' ' || **p == '\t'))
    (*p)++;
  *f = *p;
  while(*p < end && **p != ' ' && **p != '\t')
    (*p)++;
  *n = *p - *f;
  return *n > 0;
}

// The token ids of a prompt field "a,b,c" or "a,b:c,d" (the ids before ':' a prefix that
// other requests may share) into r; 0 unless 1..MAX_PROMPT ids, at least one after ':'.
static int
parse_ids(const char *f, int n, struct request *r)
{
  const char *q = f;
  r->n_prompt = r->n_prefix = 0;
  while(q < f + n){
    long t = read_number(&q, 1000000000L);
    if(t < 0 || r->n_prompt == MAX_PROMPT)
      return 0;
    r->prompt[r->n_prompt++] = t;
    if(q < f + n && *q == ':' && r->n_prefix == 0)
      r->n_prefix = r->n_prompt;
    else if(q < f + n && *q != ',')
      return 0;
    if(q < f + n && ++q == f + n)
      return 0;                                 // a trailing ',' or ':'
  }
  return r->n_prompt > r->n_prefix;
}

// A chat-style prompt field: "message" (spaces and tabs allowed; no '"' and no control
// character inside), whose prompt is made at load with the model's chat template;
// sets *s past it. 0 if it is not one, -1 if it is empty or too long, -2 for a control
// character (the harness types a message into the guest's console, which would act on it).
static int
parse_chat(const char **s, const char *end, struct request *r)
{
  while(*s < end && (**s == ' ' || **s == '\t'))
    (*s)++;
  if(*s == end || **s != '"')
    return 0;
  const char *f = ++*s;
  while(*s < end && **s != '"'){
    unsigned char c = *(*s)++;
    if((c < ' ' && c != '\t') || c == 0x7f)
      return -2;
  }
  int n = *s - f;
  if(*s == end || n == 0 || n >= MAX_CHAT)
    return -1;
  (*s)++;
  memmove(r->chat, f, n);
  r->chat[n] = 0;
  r->n_prompt = r->n_prefix = 0;
  return 1;
}

// Parse one line "id max_len prompt end" (prompt: comma-separated ids, a ':' after a
// shared prefix, or a "chat message"; end: gen=N or eos).
static void
parse_line(const char *file, int ln, const char *s, const char *end, struct request *r)
{
  const char *f, *q;
  int n, chat;
  char num[16];
  if(!field(&s, end, &f, &n) || !set_id(r->id, f, n))
    bad_line(file, ln, "the id must be 1-15 characters of A-Z a-z 0-9 _ -");
  if(!field(&s, end, &f, &n) || n >= (int)sizeof(num))
    bad_line(file, ln, "expected: id max_len prompt gen=N|eos");
  memcpy(num, f, n);
  num[n] = 0;
  q = num;
  if((r->max_len = read_number(&q, LLM_MAX_DIM)) < 1 || *q)
    bad_line(file, ln, "max_len must be a number >= 1");
  if((chat = parse_chat(&s, end, r)) == -2)
    bad_line(file, ln, "a chat message is text: no control characters");
  if(chat < 0)
    bad_line(file, ln, "a chat message is 1-255 characters between two '\"'");
  if(!chat && !field(&s, end, &f, &n))
    bad_line(file, ln, "expected: id max_len prompt gen=N|eos");
  if(!chat && !parse_ids(f, n, r))
    bad_line(file, ln, "the prompt must be 1-128 comma-separated token ids, a ':' after a "
             "shared prefix");
  if(!field(&s, end, &f, &n))
    bad_line(file, ln, "expected: id max_len prompt gen=N|eos");
  if(n == 3 && memcmp(f, "eos", 3) == 0)
    r->gen = -1;
  else if(n > 4 && n < 14 && memcmp(f, "gen=", 4) == 0){
    memcpy(num, f + 4, n - 4);
    num[n - 4] = 0;
    q = num;
    if((r->gen = read_number(&q, LLM_MAX_DIM)) < 0 || *q)
      bad_line(file, ln, "gen=N needs a number N >= 0");
  } else
    bad_line(file, ln, "the end must be gen=N or eos");
  if(field(&s, end, &f, &n))
    bad_line(file, ln, "extra text after the end field");
}

// Read the workload file at path into rq; returns the number of requests. Lines end
// with '\n' (a '\r' before it is allowed); a NUL byte makes the file not text.
int
load_workload(const char *path, struct request *rq)
{
  int fd = open(path, O_RDONLY), n = 0, len = 0, k, ln = 0;
  if(fd < 0){
    fprintf(2, "[smolserve] error: --workload %s: no such built-in workload or file "
            "(built-in: seed32)\n", path);
    exit(1);
  }
  char *buf = llm_malloc(MAX_FILE + 1, "the workload file");
  while(len < MAX_FILE && (k = read(fd, buf + len, MAX_FILE - len)) > 0)
    len += k;
  close(fd);
  if(len == MAX_FILE)
    llm_die(path, ": 64 KiB or longer; a workload file is shorter");
  for(const char *s = buf, *end; s < buf + len; s = end + 1){
    for(end = s; end < buf + len && *end != '\n'; end++)
      if(*end == 0)
        bad_line(path, ln + 1, "not text (a NUL byte)");
    ln++;
    const char *f, *stop = end > s && end[-1] == '\r' ? end - 1 : end;
    int fl;
    const char *p = s;
    if(!field(&p, stop, &f, &fl) || *f == '#')
      continue;
    if(n == MAX_REQ)
      bad_line(path, ln, "more than 64 requests");
    parse_line(path, ln, s, stop, &rq[n]);
    for(int i = 0; i < n; i++)
      if(strcmp(rq[i].id, rq[n].id) == 0)
        bad_line(path, ln, "two requests with the same id");
    n++;
  }
  free(buf);
  if(n == 0)
    llm_die(path, ": no requests (a workload file has a request a line: "
            "id max_len prompt gen=N|eos)");
  return n;
}

// Print request r as one line of a workload file, its fields one space apart: what
// --check-workload prints, and what the harness types into the guest (docs/smolserve.md).
void
print_request(const struct request *r)
{
  printf("%s %d ", r->id, r->max_len);
  if(r->chat[0])
    printf("\"%s\"", r->chat);
  for(int t = 0; !r->chat[0] && t < r->n_prompt; t++)
    printf("%s%d", t == 0 ? "" : t == r->n_prefix ? ":" : ",", r->prompt[t]);
  if(r->gen < 0)
    printf(" eos\n");
  else
    printf(" gen=%d\n", r->gen);
}
