/* The Whisper vocabulary: token layout, text lookup, languages and the
 * non-speech symbols suppressed while transcribing. */
#include "whisper/whisper.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Whisper's languages in token order (code, English name). */
static const char *const langs[WHISPER_MAX_LANGS][2] = {
    {"en", "english"},        {"zh", "chinese"},       {"de", "german"},    {"es", "spanish"},    {"ru", "russian"},
    {"ko", "korean"},         {"fr", "french"},        {"ja", "japanese"},  {"pt", "portuguese"}, {"tr", "turkish"},
    {"pl", "polish"},         {"ca", "catalan"},       {"nl", "dutch"},     {"ar", "arabic"},     {"sv", "swedish"},
    {"it", "italian"},        {"id", "indonesian"},    {"hi", "hindi"},     {"fi", "finnish"},    {"vi", "vietnamese"},
    {"he", "hebrew"},         {"uk", "ukrainian"},     {"el", "greek"},     {"ms", "malay"},      {"cs", "czech"},
    {"ro", "romanian"},       {"da", "danish"},        {"hu", "hungarian"}, {"ta", "tamil"},      {"no", "norwegian"},
    {"th", "thai"},           {"ur", "urdu"},          {"hr", "croatian"},  {"bg", "bulgarian"},  {"lt", "lithuanian"},
    {"la", "latin"},          {"mi", "maori"},         {"ml", "malayalam"}, {"cy", "welsh"},      {"sk", "slovak"},
    {"te", "telugu"},         {"fa", "persian"},       {"lv", "latvian"},   {"bn", "bengali"},    {"sr", "serbian"},
    {"az", "azerbaijani"},    {"sl", "slovenian"},     {"kn", "kannada"},   {"et", "estonian"},   {"mk", "macedonian"},
    {"br", "breton"},         {"eu", "basque"},        {"is", "icelandic"}, {"hy", "armenian"},   {"ne", "nepali"},
    {"mn", "mongolian"},      {"bs", "bosnian"},       {"kk", "kazakh"},    {"sq", "albanian"},   {"sw", "swahili"},
    {"gl", "galician"},       {"mr", "marathi"},       {"pa", "punjabi"},   {"si", "sinhala"},    {"km", "khmer"},
    {"sn", "shona"},          {"yo", "yoruba"},        {"so", "somali"},    {"af", "afrikaans"},  {"oc", "occitan"},
    {"ka", "georgian"},       {"be", "belarusian"},    {"tg", "tajik"},     {"sd", "sindhi"},     {"gu", "gujarati"},
    {"am", "amharic"},        {"yi", "yiddish"},       {"lo", "lao"},       {"uz", "uzbek"},      {"fo", "faroese"},
    {"ht", "haitian creole"}, {"ps", "pashto"},        {"tk", "turkmen"},   {"nn", "nynorsk"},    {"mt", "maltese"},
    {"sa", "sanskrit"},       {"lb", "luxembourgish"}, {"my", "myanmar"},   {"bo", "tibetan"},    {"tl", "tagalog"},
    {"mg", "malagasy"},       {"as", "assamese"},      {"tt", "tatar"},     {"haw", "hawaiian"},  {"ln", "lingala"},
    {"ha", "hausa"},          {"ba", "bashkir"},       {"jw", "javanese"},  {"su", "sundanese"},  {"yue", "cantonese"},
};

const char *whisper_lang_code(int i) { return i >= 0 && i < WHISPER_MAX_LANGS ? langs[i][0] : NULL; }
const char *whisper_lang_name(int i) { return i >= 0 && i < WHISPER_MAX_LANGS ? langs[i][1] : NULL; }

int whisper_lang_find(const char *s) {
    if (!s) return -1;
    for (int i = 0; i < WHISPER_MAX_LANGS; i++)
        if (!strcasecmp(s, langs[i][0]) || !strcasecmp(s, langs[i][1])) return i;
    return -1;
}

kiln_status whisper_vocab_init(whisper_vocab *v, int32_t n_vocab) {
    int32_t n_langs = n_vocab - v->n_text - 1509;
    if (n_langs < 1 || n_langs > WHISPER_MAX_LANGS) {
        return base_fail(
            KILN_ERR_FORMAT,
            "vocabulary of %d tokens with %d text tokens leaves %d language tokens (the layout needs 1 to %d)", n_vocab,
            v->n_text, n_langs, WHISPER_MAX_LANGS);
    }
    v->n_langs = n_langs;
    v->eot = v->n_text;
    v->sot = v->eot + 1;
    v->lang0 = v->sot + 1;
    v->translate = v->lang0 + n_langs;
    v->transcribe = v->translate + 1;
    v->solm = v->translate + 2;
    v->prev = v->translate + 3;
    v->nosp = v->translate + 4;
    v->notimestamps = v->translate + 5;
    v->ts_begin = v->translate + 6;
    /* the published English-only files keep 99 language tokens unused */
    v->multilingual = n_langs > 1 && n_vocab != 51864;
    v->text = calloc((size_t)v->n_text, sizeof *v->text);
    v->len = calloc((size_t)v->n_text, sizeof *v->len);
    v->space = -1;
    if (!v->text || !v->len) { return base_fail(KILN_ERR_NOMEM, "out of memory"); }
    return KILN_OK;
}

static uint32_t hash_bytes(const uint8_t *s, size_t n) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 16777619u;
    return h;
}

int32_t whisper_token_find(const whisper_vocab *v, const char *s, size_t n) {
    if (!v->hash || n == 0 || n > (size_t)v->max_len) return -1;
    for (uint32_t i = hash_bytes((const uint8_t *)s, n) & v->hash_mask;; i = (i + 1) & v->hash_mask) {
        int32_t id = v->hash[i];
        if (id < 0) return -1;
        if ((size_t)v->len[id] == n && !memcmp(v->text[id], s, n)) return id;
    }
}

int whisper_tokenize(const whisper_vocab *v, const char *text, size_t len, int32_t *out, int cap) {
    int n = 0;
    size_t i = 0;
    while (i < len) {
        size_t k = len - i < (size_t)v->max_len ? len - i : (size_t)v->max_len;
        int32_t id = -1;
        for (; k > 0; k--)
            if ((id = whisper_token_find(v, text + i, k)) >= 0) break;
        if (id < 0) return -1;
        if (n < cap) out[n] = id;
        n++;
        i += k;
    }
    return n;
}

/* Symbols that are not speech (Whisper suppresses them unless asked not
 * to): each that is one token alone or after a space, and the first token
 * of the musical signs. */
static const char *const non_speech[] = {
    "\"",
    "#",
    "(",
    ")",
    "*",
    "+",
    "/",
    ":",
    ";",
    "<",
    "=",
    ">",
    "@",
    "[",
    "\\",
    "]",
    "^",
    "_",
    "`",
    "{",
    "|",
    "}",
    "~",
    "\xe3\x80\x8c",
    "\xe3\x80\x8d",
    "\xe3\x80\x8e",
    "\xe3\x80\x8f",
    "<<",
    ">>",
    "<<<",
    ">>>",
    "--",
    "---",
    "-(",
    "-[",
    "('",
    "(\"",
    "((",
    "))",
    "(((",
    ")))",
    "[[",
    "]]",
    "{{",
    "}}",
    "\xe2\x99\xaa\xe2\x99\xaa",
    "\xe2\x99\xaa\xe2\x99\xaa\xe2\x99\xaa",
};
static const char *const musical[] = {"\xe2\x99\xa9", "\xe2\x99\xaa", "\xe2\x99\xab", "\xe2\x99\xac",
                                      "\xe2\x99\xad", "\xe2\x99\xae", "\xe2\x99\xaf"};

static void add_unique(whisper_vocab *v, int32_t id) {
    for (int i = 0; i < v->n_non_speech; i++)
        if (v->non_speech[i] == id) return;
    v->non_speech[v->n_non_speech++] = id;
}

static void add_symbol(whisper_vocab *v, const char *sym, int first_only) {
    char buf[32];
    int32_t ids[16];
    for (int sp = 0; sp < 2; sp++) {
        int n = snprintf(buf, sizeof buf, "%s%s", sp ? " " : "", sym);
        int k = whisper_tokenize(v, buf, (size_t)n, ids, 16);
        if (k == 1 || (k > 1 && first_only)) add_unique(v, ids[0]);
    }
}

int whisper_vocab_index(whisper_vocab *v) {
    uint32_t size = 16;
    while (size < (uint32_t)v->n_text * 2u) size <<= 1;
    v->hash = malloc(size * sizeof *v->hash);
    v->non_speech = malloc(128 * sizeof *v->non_speech);
    if (!v->hash || !v->non_speech) return -1;
    v->hash_mask = size - 1;
    memset(v->hash, 0xff, size * sizeof *v->hash);
    for (int32_t id = 0; id < v->n_text; id++) {
        if (v->len[id] == 0) continue;
        /* the first of duplicate spellings wins, as a map keeps it */
        if (whisper_token_find(v, (const char *)v->text[id], (size_t)v->len[id]) >= 0) continue;
        uint32_t i = hash_bytes(v->text[id], (size_t)v->len[id]) & v->hash_mask;
        while (v->hash[i] >= 0) i = (i + 1) & v->hash_mask;
        v->hash[i] = id;
    }
    v->space = whisper_token_find(v, " ", 1);
    v->n_non_speech = 0;
    /* hyphens and apostrophes only where they would begin a word */
    int32_t ids[4];
    if (whisper_tokenize(v, " -", 2, ids, 4) >= 1) add_unique(v, ids[0]);
    if (whisper_tokenize(v, " '", 2, ids, 4) >= 1) add_unique(v, ids[0]);
    for (size_t i = 0; i < sizeof non_speech / sizeof *non_speech; i++) add_symbol(v, non_speech[i], 0);
    for (size_t i = 0; i < sizeof musical / sizeof *musical; i++) add_symbol(v, musical[i], 1);
    return 0;
}

void whisper_vocab_free(whisper_vocab *v) {
    free(v->text);
    free(v->len);
    free(v->hash);
    free(v->non_speech);
    memset(v, 0, sizeof *v);
}
