// tokcheck: encode text with the tokenizer blob, print the ids and decode them back
// (docs/tokenizer.md). Also the tool tests/llm/test_tokenizer.py drives on the host.
//
//   tokcheck BLOB [--chat] [--system S] [--file F | TEXT...]   ids, then the decoded text
//   tokcheck BLOB --bench N [--chat] [--file F | TEXT...]      time N encodes of the text
//   tokcheck BLOB --batch F    F has one hex-encoded text per line; per line prints
//                              "<id,id,...> <hex of the decoded ids>"
//   tokcheck BLOB --pieces F   per hex line: the byte lengths of its pre-tokenizer pieces
//
// --skip-special (before the mode) decodes without control tokens (TOK_SKIP_SPECIAL).
// TEXT words are joined by single spaces. Errors: "tokcheck: <why>" on fd 2, status 1.
#include "kernel/types.h"
#include "kernel/stat.h"
#include "kernel/fcntl.h"
#include "user/user.h"
#include "user/llm/tokenizer.h"

static struct tokenizer tok;
static uint64 load_us;            // time tok_load_file took (read, checksum, checks)
static int decode_flags;          // TOK_SKIP_SPECIAL with --skip-special

// ---------------------------------------------------------------- output buffer

static char obuf[4096];
static int olen;

// Write the buffered output to fd 1.
static void
flush(void)
{
  if(olen > 0)
    write(1, obuf, olen);
  olen = 0;
}

// Append s[0..n) to standard output (buffered).
static void
put(const char *s, int n)
{
  while(n > 0){
    if(olen == sizeof(obuf))
      flush();
    int k = n < (int)sizeof(obuf) - olen ? n : (int)sizeof(obuf) - olen;
    memcpy(obuf + olen, s, k);
    olen += k, s += k, n -= k;
  }
}

// Append the string s.
static void
put_str(const char *s)
{
  put(s, strlen(s));
}

// Append v in decimal.
static void
put_int(long v)
{
  char b[24];
  put(b, snprintf(b, sizeof(b), "%ld", v));
}

// Append s[0..n) as lower-case hex digits.
static void
put_hex(const uchar *s, int n)
{
  static const char digits[] = "0123456789abcdef";
  for(int i = 0; i < n; i++){
    char b[2] = { digits[s[i] >> 4], digits[s[i] & 15] };
    put(b, 2);
  }
}

// ---------------------------------------------------------------- helpers

// Print "tokcheck: <why><what>" on fd 2 and exit 1.
static void
die(const char *why, const char *what)
{
  flush();
  fprintf(2, "tokcheck: %s%s\n", why, what ? what : "");
  exit(1);
}

// malloc that dies when memory runs out.
static void *
xmalloc(uint n)
{
  void *p = malloc(n ? n : 1);
  if(p == 0)
    die("out of memory", 0);
  return p;
}

// The whole file at path, 0-terminated, its length in *len.
static char *
read_all(const char *path, int *len)
{
  struct stat st;
  int fd = open(path, O_RDONLY);
  if(fd < 0 || fstat(fd, &st) < 0 || st.type != T_FILE || st.size > 0x7FFFFFF0)
    die("cannot read ", path);
  char *buf = xmalloc((uint)st.size + 1);
  int n = 0, got;
  while(n < (int)st.size && (got = read(fd, buf + n, (int)st.size - n)) > 0)
    n += got;
  close(fd);
  buf[n] = 0;
  *len = n;
  return buf;
}

// The value of hex digit c, or -1.
static int
hexval(int c)
{
  if(c >= '0' && c <= '9')
    return c - '0';
  if(c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if(c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

// Decode the hex digits s[0..n) into out (room for n/2 bytes); the byte count.
static int
unhex(const char *s, int n, uchar *out)
{
  if(n % 2)
    die("odd number of hex digits in a line", 0);
  for(int i = 0; i < n; i += 2){
    int hi = hexval((uchar)s[i]), lo = hexval((uchar)s[i + 1]);
    if(hi < 0 || lo < 0)
      die("not a hex digit in a line", 0);
    out[i / 2] = (uchar)(hi * 16 + lo);
  }
  return n / 2;
}

// Encode text[0..n) into a fresh array (a text never needs more ids than bytes); the count.
static int *
encode(const char *text, int n, int *count)
{
  int *ids = xmalloc((n + 1) * sizeof(int));
  *count = tok_encode(&tok, text, n, ids, n + 1);
  if(*count < 0 || *count > n + 1)
    die("encode failed (out of memory)", 0);
  return ids;
}

// Append ids[0..n) separated by commas.
static void
put_ids(const int *ids, int n)
{
  for(int i = 0; i < n; i++){
    if(i)
      put(",", 1);
    put_int(ids[i]);
  }
}

// ---------------------------------------------------------------- modes

// For each hex line of file: "<ids> <hex of decoded>" (pieces == 0) or the piece lengths.
static void
batch(const char *path, int pieces)
{
  int len, n;
  char *data = read_all(path, &len);
  uchar *text = xmalloc(len / 2 + 1);
  char *dec = xmalloc(len / 2 + 1);
  for(char *line = data; line < data + len; ){
    char *end = strchr(line, '\n');
    if(end == 0)
      end = data + len;
    n = unhex(line, end - line, text);
    if(pieces){
      int id, mlen = 0, stop = -1;        // the next added token: text[stop..stop+mlen)
      for(int at = 0; at < n; ){
        if(stop < at)
          stop = at + tok_find_added(&tok, (char *)text + at, n - at, &id, &mlen);
        int k = stop == at ? mlen : tok_split((char *)text + at, stop - at);
        if(at)
          put(",", 1);
        put_int(k);
        at += k;
      }
    } else {
      int count, *ids = encode((char *)text, n, &count);
      int dn = tok_decode(&tok, ids, count, dec, len / 2 + 1, decode_flags);
      put_ids(ids, count);
      put(" ", 1);
      put_hex((uchar *)dec, dn < len / 2 + 1 ? dn : len / 2);
      free(ids);
    }
    put("\n", 1);
    line = end + 1;
  }
  flush();
}

// Print the ids of text and the text they decode to.
static void
show(const char *text, int n)
{
  int count;
  uint64 t0 = clock_us();
  int *ids = encode(text, n, &count);
  uint64 t1 = clock_us();
  int dn = tok_decode(&tok, ids, count, 0, 0, decode_flags);
  char *dec = xmalloc(dn + 1);
  tok_decode(&tok, ids, count, dec, dn + 1, decode_flags);
  put_str("tokcheck tokens=");
  put_int(count);
  put_str(" bytes=");
  put_int(n);
  put_str(" load_us=");
  put_int((long)load_us);
  put_str(" encode_us=");
  put_int((long)(t1 - t0));
  put_str(dn == n && memcmp(dec, text, n) == 0 ? " roundtrip=ok\n" : " roundtrip=DIFFERS\n");
  put_str("tokcheck ids=");
  put_ids(ids, count);
  put_str("\ntokcheck text=");
  put(dec, dn);
  put("\n", 1);
  flush();
}

// Encode text reps times; print the mean time per encode.
static void
bench(const char *text, int n, int reps)
{
  int count;
  int *ids = encode(text, n, &count);       // warm the scratch once
  uint64 t0 = clock_us();
  for(int i = 0; i < reps; i++)
    tok_encode(&tok, text, n, ids, n + 1);
  uint64 us = clock_us() - t0;
  printf("tokcheck bench bytes=%d tokens=%d reps=%d us_per_encode=%lu ns_per_byte=%lu\n",
         n, count, reps, us / reps, n ? us * 1000 / reps / n : 0);
}

// ---------------------------------------------------------------- main

// Print the usage and exit 1.
static void
usage(void)
{
  fprintf(2, "usage: tokcheck BLOB [--skip-special] [--chat] [--system S] [--bench N]\n"
             "                     [--file F | TEXT...]\n"
             "       tokcheck BLOB [--skip-special] --batch F | --pieces F\n");
  exit(1);
}

// TEXT words argv[i..argc) joined by single spaces.
static char *
join(int argc, char **argv, int i, int *len)
{
  int n = 0;
  for(int k = i; k < argc; k++)
    n += strlen(argv[k]) + 1;
  char *s = xmalloc(n + 1);
  *len = 0;
  for(int k = i; k < argc; k++){
    if(k > i)
      s[(*len)++] = ' ';
    memcpy(s + *len, argv[k], strlen(argv[k]));
    *len += strlen(argv[k]);
  }
  s[*len] = 0;
  return s;
}

int
main(int argc, char *argv[])
{
  const char *file = 0, *system = 0, *batchf = 0, *piecesf = 0;
  int chat = 0, reps = 0, i, len;
  if(argc < 2 || argv[1][0] == '-')
    usage();
  uint64 t0 = clock_us();
  const char *err = tok_load_file(&tok, argv[1]);
  load_us = clock_us() - t0;
  if(err)
    die(err, 0);
  for(i = 2; i < argc && argv[i][0] == '-' && argv[i][1] == '-'; i++){
    const char *a = argv[i];
    if(strcmp(a, "--chat") == 0)
      chat = 1;
    else if(strcmp(a, "--skip-special") == 0)
      decode_flags = TOK_SKIP_SPECIAL;
    else if(i + 1 >= argc)
      usage();
    else if(strcmp(a, "--system") == 0)
      system = argv[++i];
    else if(strcmp(a, "--file") == 0)
      file = argv[++i];
    else if(strcmp(a, "--batch") == 0)
      batchf = argv[++i];
    else if(strcmp(a, "--pieces") == 0)
      piecesf = argv[++i];
    else if(strcmp(a, "--bench") == 0 && (reps = atoi(argv[++i])) > 0)
      ;
    else
      usage();
  }
  if(batchf || piecesf){
    batch(batchf ? batchf : piecesf, piecesf != 0);
    exit(0);
  }
  char *text = file ? read_all(file, &len) : join(argc, argv, i, &len);
  if(chat){
    int n = tok_chat(&tok, system, text, 0, 0);
    if(n < 0)
      die("the blob has no chat strings", 0);
    char *p = xmalloc(n + 1);
    tok_chat(&tok, system, text, p, n + 1);
    text = p, len = n;
  }
  if(reps)
    bench(text, len, reps);
  else
    show(text, len);
  exit(0);
}
