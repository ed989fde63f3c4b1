// smolprobe's text in and text out: the tokenizer of the checkpoint, --prompt/--chat
// encoding, the text: and model lines (docs/smolprobe.md, docs/tokenizer.md).
#include "user/smolprobe/smolprobe.h"

// The model's tokenizer (docs/tokenizer.md), used in place from the checkpoint's blob;
// dies when the checkpoint has none (what is the flag that needs it).
void
load_tokenizer(const struct model *mo, struct tokenizer *tok, const char *what)
{
  if(mo->tok_blob == 0){
    fprintf(2, "[smolprobe] error: %s needs the model's tokenizer, and this checkpoint has "
            "none (import one with: nexos model import --gguf FILE)\n", what);
    exit(1);
  }
  const char *err = tok_load(tok, mo->tok_blob, mo->tok_size);
  if(err)
    llm_die("model: tokenizer: ", err);
}

// The weights line: how the weights came in (docs/smolprobe.md "The weights: mapped or
// read"): mapped, with the page-cache pages this process maps, or read into the heap.
void
print_weights(const struct model *mo)
{
  struct memstat ms;
  if(memstat(&ms) < 0)
    llm_die("memstat failed", "");
  printf("[smolprobe] weights source=%s file_pages=%lu\n", mo->mapped ? "mapped" : "read",
         mo->mapped ? ms.file_pages : 0);
}

// --tokenize: the model line, the prompt line and the tokenized line, from a mapping of
// the model file whose weights are never touched; exits. file_pages on the tokenized line
// is the page-cache pages this process maps (memstat): the header's and the tokenizer's
// on a lazy kernel, every page of the file on an eager one (mmap populates).
void
tokenize_main(struct options *o)
{
  static struct model mo;
  static struct tokenizer tok;
  struct memstat ms;

  map_model_tokenizer(o->model, &mo);
  print_model(&mo);
  load_tokenizer(&mo, &tok, "--tokenize");
  encode_prompt(&tok, o);
  if(memstat(&ms) < 0)
    llm_die("memstat failed", "");
  printf("[smolprobe] tokenized prompt_tokens=%d file_pages=%lu\n", o->n_prompt,
         ms.file_pages);
  exit(0);
}

// --prompt/--chat: the text (with --chat the ChatML prompt of one user message, with the
// template's default system turn) encoded into o->tokens; prints the prompt line.
void
encode_prompt(struct tokenizer *tok, struct options *o)
{
  const char *s = o->text, *flag = o->chat ? "--chat" : o->score ? "--perplexity" : "--prompt";
  char *chat = 0;
  int len = strlen(s);
  if(o->chat){
    len = tok_chat(tok, 0, o->text, 0, 0);
    if(len < 0)
      llm_die("--chat: the model's tokenizer has no chat template", "");
    chat = llm_malloc(len + 1UL, "the chat prompt");
    tok_chat(tok, 0, o->text, chat, len + 1);
    s = chat;
  }
  int n = tok_encode(tok, s, len, 0, 0);
  if(n < 0)
    llm_die("out of memory encoding the prompt", "");
  if(n == 0)
    llm_die(flag, ": the text is empty (it encodes to no tokens)");
  o->tokens = llm_malloc((uint64)n * sizeof(int), "prompt");
  tok_encode(tok, s, len, o->tokens, n);
  o->n_prompt = n;
  if(o->score && n < 2){
    fprintf(2, "[smolprobe] error: --perplexity: the text encodes to %d token; scoring needs "
            "at least 2\n", n);
    exit(1);
  }
  if(chat)
    free(chat);
  print_list("[smolprobe] prompt tokens=", o->tokens, 0, n);
}

// "[smolprobe] text: <the bytes of ids[0..n)>" on one line, control tokens left out;
// backslash, newline, carriage return and tab are written \\ \n \r \t, any other byte
// below 0x20 (and 0x7f) and the spaces that end the text \xHH, so that the text stays on
// its line whole (docs/smolprobe.md).
void
print_text(const struct tokenizer *tok, const int *ids, int n)
{
  static const char hex[] = "0123456789abcdef";
  int len = tok_decode(tok, ids, n, 0, 0, TOK_SKIP_SPECIAL);
  if(len < 0)
    llm_die("the generated text is too long to print", "");
  uchar *raw = llm_malloc(len + 1UL, "output buffer");
  tok_decode(tok, ids, n, (char *)raw, len + 1, TOK_SKIP_SPECIAL);
  char *out = llm_malloc(4UL * len + 32, "output buffer");
  int k = strlen("[smolprobe] text: "), end = len;
  memcpy(out, "[smolprobe] text: ", k);
  while(end > 0 && raw[end - 1] == ' ')
    end--;                                   // trailing spaces as \x20: the line keeps them
  for(int i = 0; i < len; i++){
    uchar c = raw[i];
    const char *esc = c == '\\' ? "\\\\" : c == '\n' ? "\\n" : c == '\r' ? "\\r" :
                      c == '\t' ? "\\t" : 0;
    if(esc){
      out[k++] = esc[0];
      out[k++] = esc[1];
    } else if(c < 0x20 || c == 0x7f || i >= end){
      out[k++] = '\\';
      out[k++] = 'x';
      out[k++] = hex[c >> 4];
      out[k++] = hex[c & 15];
    } else {
      out[k++] = c;
    }
  }
  out[k++] = '\n';
  write(1, out, k);
  free(out);
  free(raw);
}

// "[smolprobe] model weights=q8_0+q4_1 version=2 layers=30 dim=576 vocab=49152
// tokenizer=1": which model the image carries (the weight types in file order of first
// use, as `nexos model info` names them).
void
print_model(const struct model *mo)
{
  static const char *names[] = { "f32", "int8", "q8_0", "q4_1" };
  char w[32];
  int len = 0, seen = 0;
  for(int i = 0; i < mo->c.n_blocks; i++){
    int t = mo->types[i];
    if(seen & (1 << t))
      continue;
    seen |= 1 << t;
    len += snprintf(w + len, sizeof(w) - len, "%s%s", len ? "+" : "", names[t]);
  }
  printf("[smolprobe] model weights=%s version=%d layers=%d dim=%d vocab=%d tokenizer=%d\n",
         w, mo->c.version, mo->c.n_layers, mo->c.dim, mo->c.vocab_size, mo->tok_blob != 0);
}

