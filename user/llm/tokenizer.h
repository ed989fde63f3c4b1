// Byte-level BPE tokenizer: text in and text out for the guest (docs/tokenizer.md).
//
// The tokenizer lives in a blob written by harness/nexos/model/tokenizer.py from a GGUF:
// token bytes, merges with an open-addressing hash over (left id, right id), the added
// tokens (<|im_start|> ...) and the ChatML strings. tok_load() checks the blob and points
// into it; nothing is copied or parsed. tok_encode() gives exactly the ids of Hugging Face's
// `tokenizers` with SmolLM2's pre-tokenizer (Digits(individual_digits) then the GPT-2
// ByteLevel regex); tok_decode() gives the bytes back.
//
// Include after "kernel/types.h" and "user/user.h". No function here can crash on any
// input: every index into the blob is checked at load, every output is bounded by its cap.

#define TOK_NONE (-1)           // an absent token id (im_start/im_end of a blob without chat)
#define TOK_SKIP_SPECIAL 1      // tok_decode flag: leave out control tokens (<|im_end|> ...)

struct tok_sym;                 // encode scratch (tokenizer.c)
struct tok_cand;

struct tokenizer {
  const uchar *blob;            // the blob (4-byte aligned; not owned unless owned != 0)
  uint size;
  int n_vocab, n_merges, n_special, n_chat;
  uint hash_mask;               // hash slots - 1 (a power of two minus one)
  int bos, eos, im_start, im_end;
  const uint *index;            // n_vocab+1 offsets: token i is bytes[index[i]..index[i+1])
  const uchar *bytes;
  const uchar *attr;            // per token: 1 control (special), 2 added (matched in text)
  const uint *byte_ids;         // 256: the token of each single byte, or 0xFFFFFFFF
  const uint *merges;           // per rank: left id, right id, merged id
  const uint *hash;             // slots: 0 empty, else rank + 1
  const uint *special;          // per added token: id, offset and length in strings
  const uint *chat;             // per ChatML string: offset and length in strings
  const uchar *strings;
  uchar first[32];              // bitmap of the bytes that start an added token
  struct tok_sym *sym;          // encode scratch, grown on demand
  int sym_cap;
  struct tok_cand *heap;
  int heap_cap;
  uchar *owned;                 // the buffer tok_load_file allocated, else 0
};

// ChatML strings (tok_chat_string): a conversation is, per message,
// TOK_CHAT_TURN_START role TOK_CHAT_ROLE_END content TOK_CHAT_TURN_END.
#define TOK_CHAT_TURN_START 0   // "<|im_start|>"
#define TOK_CHAT_ROLE_END 1     // "\n"
#define TOK_CHAT_TURN_END 2     // "<|im_end|>\n"
#define TOK_CHAT_DEFAULT_SYSTEM 3
#define TOK_CHAT_SYSTEM 4       // role names: "system", "user", "assistant"
#define TOK_CHAT_USER 5
#define TOK_CHAT_ASSISTANT 6

// Check the blob (magic, version, size, checksum, every offset and id) and set t up to
// use it in place; the blob must stay alive and 4-byte aligned. 0 on success, else a
// message saying what is wrong (t is then unusable).
const char *tok_load(struct tokenizer *t, const void *blob, uint size);

// tok_load() of a whole file read into a malloc'd buffer that t owns; 0 or a message.
const char *tok_load_file(struct tokenizer *t, const char *path);

// Free what t allocated (scratch and an owned blob).
void tok_free(struct tokenizer *t);

// Encode text[0..len) (any bytes; invalid UTF-8 bytes count as punctuation) into ids:
// added tokens found whole in the text become their ids, the rest is pre-tokenized and
// merged by rank. Writes at most cap ids and returns how many the text needs (like
// snprintf: the result is complete only if <= cap; ids may be 0 when cap is 0);
// -1 if len < 0 or scratch memory runs out. Never more ids than bytes.
int tok_encode(struct tokenizer *t, const char *text, int len, int *ids, int cap);

// The bytes of ids[0..n) concatenated into out (at most cap-1 bytes and a terminating 0
// when cap > 0); returns the length of the whole result, or -1 if it exceeds 2^31-1.
// Ids outside the vocabulary are left out, and so are control tokens with TOK_SKIP_SPECIAL.
int tok_decode(const struct tokenizer *t, const int *ids, int n, char *out, int cap, int flags);

// The bytes of token id (not terminated) and their number in *len; 0 if id is invalid.
const char *tok_token(const struct tokenizer *t, int id, int *len);

// ChatML string k (TOK_CHAT_*) and its length in *len; 0 if the blob has no chat strings.
const char *tok_chat_string(const struct tokenizer *t, int k, int *len);

// Render the ChatML prompt of one user message with the generation prompt, as the chat
// template does: the system turn (system, or the template's default system message when
// system is 0), the user turn, then "<|im_start|>assistant\n". Writes like snprintf (at
// most cap-1 bytes and a 0) and returns the whole length; -1 without chat strings.
int tok_chat(const struct tokenizer *t, const char *system, const char *user, char *out, int cap);

// Where the leftmost added token of s[0..len) starts (the longest one starting there):
// its offset, with its id and byte length in *id and *mlen; len if there is none.
int tok_find_added(const struct tokenizer *t, const char *s, int len, int *id, int *mlen);

// The pre-tokenizer: the byte length of the first piece of s[0..len) (a text without
// added tokens); 0 when len <= 0. Pieces are what BPE merges within.
int tok_split(const char *s, int len);

// ---------------------------------------------------------------- unicode_classes.c
// Character classes of the pre-tokenizer, generated by scripts/gen_unicode.py.
#define UNI_OTHER 0
#define UNI_LETTER 1            // \p{L}
#define UNI_NUMBER 2            // \p{N}
#define UNI_SPACE 3             // \s (White_Space)
#define UNI_RANGE(lo, hi, cls) { (lo) | ((uint)(cls) << 24), (hi) }
extern const char uni_version[];      // the Unicode version of the tables
extern const uchar uni_ascii[128];
extern const uint uni_ranges[][2];
extern const int uni_nranges;

// The class of code point cp (UNI_OTHER for anything unlisted or out of range).
int uni_class(uint cp);
