// Byte-level BPE tokenizer (docs/tokenizer.md): blob loader, pre-tokenizer, BPE merges by
// rank, decode and the ChatML prompt. Read top to bottom: blob checks, Unicode classes,
// the pre-tokenizer, BPE, encode, decode, chat.
#include "kernel/types.h"
#include "kernel/stat.h"
#include "kernel/fcntl.h"
#include "user/user.h"
#include "user/llm/tokenizer.h"

#define MAGIC "NEXOSTOK"
#define VERSION 1
#define HEADER_WORDS 24           // uint32 words after the 8-byte magic
#define HEADER_BYTES (8 + 4 * HEADER_WORDS)
#define NONE_ID 0xFFFFFFFFu
#define PRETOK_SMOLLM 1
#define N_CHAT 7
#define ATTR_SPECIAL 1
#define BAD_CP 0xFFFFFFFFu        // what utf8_decode returns for an invalid byte
#define READ_CHUNK (1 << 20)

// Header word indices (the word at byte 8 + 4*i; docs/tokenizer.md).
enum { H_VERSION, H_HEADER_SIZE, H_TOTAL_SIZE, H_CHECKSUM, H_N_VOCAB, H_N_MERGES,
       H_HASH_CAP, H_N_SPECIAL, H_BOS, H_EOS, H_IM_START, H_IM_END, H_PRETOK, H_N_CHAT,
       H_OFF_INDEX, H_OFF_BYTES, H_LEN_BYTES, H_OFF_ATTR, H_OFF_BYTE_IDS, H_OFF_MERGES,
       H_OFF_HASH, H_OFF_SPECIAL, H_OFF_STRINGS, H_LEN_STRINGS };

struct tok_sym { int id, prev, next; };   // a symbol of the piece being merged
struct tok_cand { uint rank; int pos; };  // a candidate merge of sym[pos] and its next

// ============================================================================ blob checks

// The 32-bit hash of a merge pair (the same function as pair_hash() in tokenizer.py).
static uint
pair_hash(uint left, uint right)
{
  uint h = (left * 0x9E3779B1u + right) * 0x85EBCA77u;
  return h ^ (h >> 15);
}

// FNV-1a over the n 32-bit words at w.
static uint
fnv1a_words(const uint *w, uint n)
{
  uint h = 0x811C9DC5u;
  for(uint i = 0; i < n; i++)
    h = (h ^ w[i]) * 0x01000193u;
  return h;
}

// Whether [off, off + count*elem) is a 4-aligned range inside a blob of size bytes that
// starts after the header.
static int
in_blob(uint off, uint64 count, uint elem, uint size)
{
  uint64 end = (uint64)off + count * elem;
  return off % 4 == 0 && off >= HEADER_BYTES && count <= 0xFFFFFFFFu && end <= size;
}

// Whether id is a token of t or NONE_ID.
static int
id_or_none(const struct tokenizer *t, uint id)
{
  return id == NONE_ID || id < (uint)t->n_vocab;
}

// Check the header words h of a blob of size bytes and set t's counts and section
// pointers; 0 or what is wrong.
static const char *
load_header(struct tokenizer *t, const uint *h, uint size)
{
  if(h[H_VERSION] != VERSION)
    return "tokenizer: unsupported blob version (want 1)";
  if(h[H_HEADER_SIZE] != HEADER_BYTES || h[H_TOTAL_SIZE] != size)
    return "tokenizer: blob size differs from its header (truncated or extended?)";
  if(h[H_PRETOK] != PRETOK_SMOLLM)
    return "tokenizer: unknown pre-tokenizer";
  uint nv = h[H_N_VOCAB], nm = h[H_N_MERGES], cap = h[H_HASH_CAP], ns = h[H_N_SPECIAL];
  uint nc = h[H_N_CHAT];
  if(nv == 0 || nv > 0x7FFFFFFFu || nm > 0x7FFFFFFFu || ns > nv)
    return "tokenizer: bad vocabulary or merge count";
  if(cap == 0 || (cap & (cap - 1)) != 0 || cap <= nm)
    return "tokenizer: hash size is not a power of two above the merge count";
  if(nc != 0 && nc != N_CHAT)
    return "tokenizer: bad chat string count";
  if(!in_blob(h[H_OFF_INDEX], (uint64)nv + 1, 4, size)
     || !in_blob(h[H_OFF_BYTES], h[H_LEN_BYTES], 1, size)
     || !in_blob(h[H_OFF_ATTR], nv, 1, size)
     || !in_blob(h[H_OFF_BYTE_IDS], 256, 4, size)
     || !in_blob(h[H_OFF_MERGES], (uint64)nm * 3, 4, size)
     || !in_blob(h[H_OFF_HASH], cap, 4, size)
     || !in_blob(h[H_OFF_SPECIAL], (uint64)ns * 3 + (uint64)nc * 2, 4, size)
     || !in_blob(h[H_OFF_STRINGS], h[H_LEN_STRINGS], 1, size))
    return "tokenizer: a section lies outside the blob";
  const uchar *b = t->blob;
  t->n_vocab = nv, t->n_merges = nm, t->n_special = ns, t->n_chat = nc;
  t->hash_mask = cap - 1;
  t->index = (const uint *)(b + h[H_OFF_INDEX]);
  t->bytes = b + h[H_OFF_BYTES];
  t->attr = b + h[H_OFF_ATTR];
  t->byte_ids = (const uint *)(b + h[H_OFF_BYTE_IDS]);
  t->merges = (const uint *)(b + h[H_OFF_MERGES]);
  t->hash = (const uint *)(b + h[H_OFF_HASH]);
  t->special = (const uint *)(b + h[H_OFF_SPECIAL]);
  t->chat = t->special + 3 * ns;
  t->strings = b + h[H_OFF_STRINGS];
  if(!id_or_none(t, h[H_BOS]) || !id_or_none(t, h[H_EOS]) || !id_or_none(t, h[H_IM_START])
     || !id_or_none(t, h[H_IM_END]))
    return "tokenizer: a marker token id is outside the vocabulary";
  t->bos = (int)h[H_BOS], t->eos = (int)h[H_EOS];
  t->im_start = (int)h[H_IM_START], t->im_end = (int)h[H_IM_END];
  return 0;
}

// Check every token offset, byte id, merge, hash slot and string of t (its header already
// checked) against the blob; 0 or what is wrong. Builds t->first.
static const char *
load_tables(struct tokenizer *t, uint len_bytes, uint len_strings)
{
  if(t->index[0] != 0 || t->index[t->n_vocab] > len_bytes)
    return "tokenizer: token offsets outside the token bytes";
  for(int i = 0; i < t->n_vocab; i++)
    if(t->index[i] > t->index[i + 1])
      return "tokenizer: token offsets out of order";
  for(int i = 0; i < 256; i++)
    if(!id_or_none(t, t->byte_ids[i]))
      return "tokenizer: a byte token id is outside the vocabulary";
  for(int i = 0; i < 3 * t->n_merges; i++)
    if(t->merges[i] >= (uint)t->n_vocab)
      return "tokenizer: a merge names a token outside the vocabulary";
  for(uint i = 0; i <= t->hash_mask; i++)
    if(t->hash[i] > (uint)t->n_merges)
      return "tokenizer: a hash slot names a merge that does not exist";
  memset(t->first, 0, sizeof(t->first));
  for(int i = 0; i < t->n_special; i++){
    const uint *s = t->special + 3 * i;
    if(s[0] >= (uint)t->n_vocab || s[2] == 0 || s[1] > len_strings || s[2] > len_strings - s[1])
      return "tokenizer: a bad added token";
    uchar c = t->strings[s[1]];
    t->first[c >> 3] |= 1 << (c & 7);
  }
  for(int i = 0; i < t->n_chat; i++){
    const uint *s = t->chat + 2 * i;
    if(s[0] > len_strings || s[1] > len_strings - s[0])
      return "tokenizer: a chat string lies outside the strings";
  }
  return 0;
}

// Check blob and point t into it (tokenizer.h); 0 or a message.
const char *
tok_load(struct tokenizer *t, const void *blob, uint size)
{
  const uchar *b = blob;
  memset(t, 0, sizeof(*t));
  if(b == 0 || ((uint64)b & 3) != 0)
    return "tokenizer: blob is not 4-byte aligned";
  if(size < HEADER_BYTES || memcmp(b, MAGIC, 8) != 0)
    return "tokenizer: not a NexOS tokenizer blob (bad magic)";
  if(size % 4 != 0)
    return "tokenizer: blob size is not a multiple of 4";
  const uint *h = (const uint *)(b + 8);
  t->blob = b, t->size = size;
  const char *err = load_header(t, h, size);
  if(err == 0 && fnv1a_words((const uint *)(b + HEADER_BYTES), (size - HEADER_BYTES) / 4)
     != h[H_CHECKSUM])
    err = "tokenizer: blob checksum mismatch (corrupt file)";
  if(err == 0)
    err = load_tables(t, h[H_LEN_BYTES], h[H_LEN_STRINGS]);
  if(err)
    memset(t, 0, sizeof(*t));
  return err;
}

// Read the file at path into a buffer t owns, then tok_load(); 0 or a message.
const char *
tok_load_file(struct tokenizer *t, const char *path)
{
  struct stat st;
  memset(t, 0, sizeof(*t));
  int fd = open(path, O_RDONLY);
  if(fd < 0)
    return "tokenizer: cannot open the blob file";
  if(fstat(fd, &st) < 0 || st.type != T_FILE || st.size > 0x7FFFFFFFu){
    close(fd);
    return "tokenizer: blob is not a regular file below 2 GiB";
  }
  uint size = (uint)st.size;
  uchar *buf = malloc(size ? size : 1);
  if(buf == 0){
    close(fd);
    return "tokenizer: out of memory for the blob";
  }
  uint off = 0;
  while(off < size){
    int n = size - off < READ_CHUNK ? (int)(size - off) : READ_CHUNK;
    int got = read(fd, buf + off, n);
    if(got <= 0)
      break;
    off += got;
  }
  close(fd);
  const char *err = off == size ? tok_load(t, buf, size) : "tokenizer: blob read failed";
  if(err)
    free(buf);
  else
    t->owned = buf;
  return err;
}

// Free t's scratch and owned blob; t is zeroed.
void
tok_free(struct tokenizer *t)
{
  free(t->sym);
  free(t->heap);
  free(t->owned);
  memset(t, 0, sizeof(*t));
}

// ============================================================================ Unicode

// The class of code point cp: ASCII by table, the rest by binary search of the ranges.
int
uni_class(uint cp)
{
  if(cp < 128)
    return uni_ascii[cp];
  int lo = 0, hi = uni_nranges - 1;
  while(lo <= hi){                       // the last range whose start is <= cp
    int mid = (lo + hi) / 2;
    if((uni_ranges[mid][0] & 0x1FFFFF) <= cp)
      lo = mid + 1;
    else
      hi = mid - 1;
  }
  if(hi < 0 || cp > uni_ranges[hi][1])
    return UNI_OTHER;
  return uni_ranges[hi][0] >> 24;
}

// Decode the UTF-8 character at s[0] (n > 0 bytes available) into *cp; its length. An
// invalid or truncated sequence (overlong, surrogate, above U+10FFFF) decodes as one byte
// with *cp = BAD_CP.
static int
utf8_decode(const uchar *s, int n, uint *cp)
{
  uint c = s[0];
  int len = c < 0x80 ? 1 : c < 0xC2 ? 0 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF5 ? 4 : 0;
  if(len == 1){
    *cp = c;
    return 1;
  }
  *cp = BAD_CP;
  if(len == 0 || len > n)
    return 1;
  uint v = c & (0x7F >> len);
  for(int i = 1; i < len; i++){
    if((s[i] & 0xC0) != 0x80)
      return 1;
    v = (v << 6) | (s[i] & 0x3F);
  }
  if((len == 3 && (v < 0x800 || (v >= 0xD800 && v <= 0xDFFF)))
     || (len == 4 && (v < 0x10000 || v > 0x10FFFF)))
    return 1;
  *cp = v;
  return len;
}

// The class of the character at s[0] (n > 0) and its byte length in *len.
static int
class_at(const uchar *s, int n, int *len)
{
  uint cp;
  *len = utf8_decode(s, n, &cp);
  return cp == BAD_CP ? UNI_OTHER : uni_class(cp);
}

// ============================================================================ pre-tokenizer

// Bytes of the run of characters of class cls at the start of s[0..n).
static int
span(const uchar *s, int n, int cls)
{
  int i = 0, len;
  while(i < n && class_at(s + i, n - i, &len) == cls)
    i += len;
  return i;
}

// Length of the contraction ('s 't 're 've 'm 'll 'd, case-sensitive) at s[0] == '\'', or 0.
static int
contraction(const uchar *s, int n)
{
  if(n >= 2 && (s[1] == 's' || s[1] == 't' || s[1] == 'm' || s[1] == 'd'))
    return 2;
  if(n >= 3 && ((s[1] == 'r' && s[2] == 'e') || (s[1] == 'v' && s[2] == 'e')
                || (s[1] == 'l' && s[2] == 'l')))
    return 3;
  return 0;
}

// A whitespace run at s[0]: all of it if it ends the piece (the end of s, or a number,
// which Digits always cuts off), else all but its last character (that one goes with
// what follows, the regex's \s+(?!\S)) unless it is a single character (\s+).
static int
space_piece(const uchar *s, int n)
{
  int w = 0, last = 0, len;
  while(w < n && class_at(s + w, n - w, &len) == UNI_SPACE){
    last = len;
    w += len;
  }
  if(w == n || class_at(s + w, n - w, &len) == UNI_NUMBER)
    return w;
  return w > last ? w - last : w;
}

// The SmolLM2 pre-tokenizer (docs/tokenizer.md): each number character alone (Digits with
// individual_digits), then at each position the first of the GPT-2 alternatives that
// matches: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+.
int
tok_split(const char *text, int n)
{
  const uchar *s = (const uchar *)text;
  int l0, l1;
  if(n <= 0)
    return 0;
  int c0 = class_at(s, n, &l0);
  if(c0 == UNI_NUMBER)
    return l0;
  if(s[0] == '\'' && contraction(s, n))
    return contraction(s, n);
  if(s[0] == ' ' && n > 1){
    int c1 = class_at(s + 1, n - 1, &l1);
    if(c1 == UNI_LETTER || c1 == UNI_OTHER)
      return 1 + span(s + 1, n - 1, c1);
  }
  if(c0 != UNI_SPACE)
    return span(s, n, c0);
  return space_piece(s, n);
}

// ============================================================================ BPE

// The rank of the merge (left, right), or -1 if there is none.
static int
merge_rank(const struct tokenizer *t, uint left, uint right)
{
  uint slot = pair_hash(left, right) & t->hash_mask;
  for(uint probe = 0; probe <= t->hash_mask; probe++){
    uint v = t->hash[slot];
    if(v == 0)
      return -1;
    const uint *m = t->merges + 3 * (v - 1);
    if(m[0] == left && m[1] == right)
      return (int)(v - 1);
    slot = (slot + 1) & t->hash_mask;
  }
  return -1;
}

// Whether candidate a goes before candidate b: lower rank, then further left.
static int
cand_less(struct tok_cand a, struct tok_cand b)
{
  return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

// Push c onto the binary min-heap h of *n entries (the caller sized it).
static void
heap_push(struct tok_cand *h, int *n, struct tok_cand c)
{
  int i = (*n)++;
  while(i > 0 && cand_less(c, h[(i - 1) / 2])){
    h[i] = h[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  h[i] = c;
}

// Pop the least entry of the heap h of *n > 0 entries.
static struct tok_cand
heap_pop(struct tok_cand *h, int *n)
{
  struct tok_cand top = h[0], last = h[--(*n)];
  int i = 0;
  for(;;){
    int k = 2 * i + 1;
    if(k >= *n)
      break;
    if(k + 1 < *n && cand_less(h[k + 1], h[k]))
      k++;
    if(!cand_less(h[k], last))
      break;
    h[i] = h[k];
    i = k;
  }
  h[i] = last;
  return top;
}

// Push the merge of sym[pos] with its right neighbour, if the pair has one.
static void
push_pair(struct tokenizer *t, int pos, int *nheap)
{
  int next = t->sym[pos].next;
  if(next < 0)
    return;
  int r = merge_rank(t, t->sym[pos].id, t->sym[next].id);
  if(r >= 0)
    heap_push(t->heap, nheap, (struct tok_cand){ (uint)r, pos });
}

// Make the scratch hold a piece of n bytes; 0 on success, -1 out of memory.
static int
reserve(struct tokenizer *t, int n)
{
  if(n > t->sym_cap){
    int cap = n < 64 ? 64 : n;
    if(cap > 0x7FFFFFFF / (3 * (int)sizeof(struct tok_cand)))
      return -1;                         // the byte counts below must fit malloc's uint
    struct tok_sym *s = malloc(cap * sizeof(*s));
    struct tok_cand *h = malloc(3 * cap * sizeof(*h));
    if(s == 0 || h == 0){
      free(s);
      free(h);
      return -1;
    }
    free(t->sym);
    free(t->heap);
    t->sym = s, t->heap = h;
    t->sym_cap = cap, t->heap_cap = 3 * cap;
  }
  return 0;
}

// Where encode's ids go: at most cap of them into ids, n counts them all.
struct tok_out { int *ids; int cap; int n; };

// Count one id, storing it if there is room.
static void
emit(struct tok_out *o, int id)
{
  if(o->n < o->cap)
    o->ids[o->n] = id;
  o->n++;
}

// BPE of one piece s[0..n): its bytes as single-byte tokens (bytes without one are left
// out, as Hugging Face does without an unknown token), then, until no pair has a merge,
// the merge of lowest rank (the leftmost of equals) is applied. A heap of candidate
// merges, checked when popped, keeps this O(n log n). 0, or -1 out of memory.
static int
bpe(struct tokenizer *t, const uchar *s, int n, struct tok_out *o)
{
  if(n == 1){
    if(t->byte_ids[s[0]] != NONE_ID)
      emit(o, t->byte_ids[s[0]]);
    return 0;
  }
  if(reserve(t, n) < 0)
    return -1;
  struct tok_sym *sym = t->sym;
  int m = 0, nheap = 0;
  for(int i = 0; i < n; i++){
    if(t->byte_ids[s[i]] == NONE_ID)
      continue;
    sym[m] = (struct tok_sym){ (int)t->byte_ids[s[i]], m - 1, m + 1 };
    m++;
  }
  if(m == 0)
    return 0;
  sym[m - 1].next = -1;
  for(int i = 0; i + 1 < m; i++)
    push_pair(t, i, &nheap);
  while(nheap > 0){
    struct tok_cand c = heap_pop(t->heap, &nheap);
    int a = c.pos, b = sym[a].next;
    const uint *mg = t->merges + 3 * c.rank;
    if(sym[a].id < 0 || b < 0 || (uint)sym[a].id != mg[0] || (uint)sym[b].id != mg[1])
      continue;                          // stale: a neighbour has merged since the push
    sym[a].id = (int)mg[2];
    sym[a].next = sym[b].next;
    if(sym[b].next >= 0)
      sym[sym[b].next].prev = a;
    sym[b].id = -1;
    if(sym[a].prev >= 0)
      push_pair(t, sym[a].prev, &nheap);
    push_pair(t, a, &nheap);
  }
  for(int i = 0; i >= 0; i = sym[i].next)
    emit(o, sym[i].id);
  return 0;
}

// ============================================================================ encode

// The offset of the leftmost added token in text[0..len) (longest at that offset), its
// id and length in *id and *mlen; len if none. Only bytes in t->first are tried.
int
tok_find_added(const struct tokenizer *t, const char *text, int len, int *id, int *mlen)
{
  const uchar *s = (const uchar *)text;
  for(int at = 0; at < len; at++){
    if(!(t->first[s[at] >> 3] & (1 << (s[at] & 7))))
      continue;
    int best = -1, best_len = 0;
    for(int i = 0; i < t->n_special; i++){
      const uint *sp = t->special + 3 * i;
      if((int)sp[2] > best_len && sp[2] <= (uint)(len - at)
         && memcmp(s + at, t->strings + sp[1], sp[2]) == 0)
        best = (int)sp[0], best_len = (int)sp[2];
    }
    if(best >= 0){
      *id = best, *mlen = best_len;
      return at;
    }
  }
  return len;
}

// Encode s[0..n), a text without added tokens: piece by piece. 0, or -1 out of memory.
static int
encode_plain(struct tokenizer *t, const uchar *s, int n, struct tok_out *o)
{
  while(n > 0){
    int k = tok_split((const char *)s, n);
    if(bpe(t, s, k, o) < 0)
      return -1;
    s += k, n -= k;
  }
  return 0;
}

// Added tokens, then pieces, then BPE (tokenizer.h); the id count, or -1.
int
tok_encode(struct tokenizer *t, const char *text, int len, int *ids, int cap)
{
  struct tok_out o = { ids, cap < 0 ? 0 : cap, 0 };
  if(len < 0 || t->byte_ids == 0)          // a bad length, or t not loaded
    return -1;
  while(len > 0){
    int id = 0, mlen = 0;
    int at = tok_find_added(t, text, len, &id, &mlen);
    if(encode_plain(t, (const uchar *)text, at, &o) < 0)
      return -1;
    if(at == len)
      break;
    emit(&o, id);
    text += at + mlen, len -= at + mlen;
  }
  return o.n;
}

// ============================================================================ decode

// The bytes of token id and their length; 0 (and *len 0) for an invalid id.
const char *
tok_token(const struct tokenizer *t, int id, int *len)
{
  if(id < 0 || id >= t->n_vocab){
    *len = 0;
    return 0;
  }
  *len = (int)(t->index[id + 1] - t->index[id]);
  return (const char *)t->bytes + t->index[id];
}

// Append s[0..n) to out (capacity cap, *used bytes written so far, room for a final 0)
// and count it in *total; -1 if the total would pass 2^31-1.
static int
append(char *out, int cap, int *total, const char *s, int n)
{
  if(n > 0x7FFFFFFF - *total)
    return -1;
  int room = cap - 1 - *total;
  if(room > 0)
    memcpy(out + *total, s, n < room ? n : room);
  *total += n;
  return 0;
}

// Terminate out (capacity cap) after the first total bytes, or where the room ends.
static void
terminate(char *out, int cap, int total)
{
  if(cap > 0)
    out[total < cap - 1 ? total : cap - 1] = 0;
}

// Concatenate the tokens' bytes into out, snprintf-like (tokenizer.h).
int
tok_decode(const struct tokenizer *t, const int *ids, int n, char *out, int cap, int flags)
{
  int total = 0, len;
  for(int i = 0; i < n; i++){
    const char *s = tok_token(t, ids[i], &len);
    if(s == 0 || ((flags & TOK_SKIP_SPECIAL) && (t->attr[ids[i]] & ATTR_SPECIAL)))
      continue;
    if(append(out, cap, &total, s, len) < 0)
      return -1;
  }
  terminate(out, cap, total);
  return total;
}

// ============================================================================ chat

// ChatML string k and its length; 0 (and *len 0) if absent.
const char *
tok_chat_string(const struct tokenizer *t, int k, int *len)
{
  if(k < 0 || k >= t->n_chat){
    *len = 0;
    return 0;
  }
  *len = (int)t->chat[2 * k + 1];
  return (const char *)t->strings + t->chat[2 * k];
}

// Append one ChatML turn (role string k, then content) to out; -1 on overflow of int.
static int
append_turn(const struct tokenizer *t, char *out, int cap, int *total, int k,
            const char *content, int clen)
{
  int len;
  const int parts[] = { TOK_CHAT_TURN_START, k, TOK_CHAT_ROLE_END };
  for(int i = 0; i < 3; i++){
    const char *s = tok_chat_string(t, parts[i], &len);
    if(append(out, cap, total, s, len) < 0)
      return -1;
  }
  if(content == 0)
    return 0;                            // the generation prompt: no content, no turn end
  const char *end = tok_chat_string(t, TOK_CHAT_TURN_END, &len);
  if(append(out, cap, total, content, clen) < 0 || append(out, cap, total, end, len) < 0)
    return -1;
  return 0;
}

// The ChatML prompt of one user message, snprintf-like (tokenizer.h); -1 without chat.
int
tok_chat(const struct tokenizer *t, const char *system, const char *user, char *out, int cap)
{
  int total = 0, slen;
  if(t->n_chat != N_CHAT || user == 0)
    return -1;
  if(system)
    slen = (int)strlen(system);
  else
    system = tok_chat_string(t, TOK_CHAT_DEFAULT_SYSTEM, &slen);
  if(append_turn(t, out, cap, &total, TOK_CHAT_SYSTEM, system, slen) < 0
     || append_turn(t, out, cap, &total, TOK_CHAT_USER, user, (int)strlen(user)) < 0
     || append_turn(t, out, cap, &total, TOK_CHAT_ASSISTANT, 0, 0) < 0)
    return -1;
  terminate(out, cap, total);
  return total;
}
