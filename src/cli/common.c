/* What the kiln commands share: their usage texts, the options of the
 * model-running commands, and error lines. */
#include "cli/common.h"

#include "base/base.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The options run and chat share, for `kiln --help` and `kiln run --help`. */
static const char run_options[] =
    "sampling and runtime options (run, chat):\n"
    "  -f FILE         read the prompt from FILE instead of -p (- = stdin, byte for byte);\n"
    "                  with neither, a prompt piped in on stdin (less echo's newline)\n"
    "  -n N            tokens to generate (default -1: until the end of text or a full context)\n"
    "  -t N            threads (default: all CPUs; 1 to 4 x the CPUs)\n"
    "  -c N            context size (default: the model's, capped by memory)\n"
    "  -b N            batch size for prompt processing (default 512)\n"
    "  --temp T        temperature (default 0.8; 0 = greedy)\n"
    "  --top-k K       (default 40; 0 = off)\n"
    "  --top-p P       (default 0.95; 1 = off)\n"
    "  --min-p P       (default 0.05; 0 = off)\n"
    "  --repeat-penalty R, --repeat-last-n N, --presence-penalty P, --frequency-penalty F\n"
    "  -s, --seed S    sampling seed (default: drawn from the OS, printed with -v; -1 = random)\n"
    "  --stop TEXT     end the text before TEXT (repeatable, up to 8; default: a store pack's stop)\n"
    "  --ignore-eos    never end at the end-of-text token (generate -n tokens)\n"
    "  --json-schema S the output is JSON that follows the schema S (JSON text)\n"
    "  --mmproj FILE   the model's image projector (llama.cpp's mmproj GGUF; a pulled model's own\n"
    "                  is found beside it)\n"
    "  --image FILE    an image for the prompt (PNG, JPEG, WebP; repeatable): at each <__media__>\n"
    "                  in the prompt, else before it; special tokens in the prompt are parsed\n"
    "  -e, --escape    process \\n, \\r, \\t, \\', \\\", \\\\ in the prompt (--no-escape: as written, the default)\n"
    "  --cache-type T  KV cache type: f16 (default), f32 or q8_0 (about half of f16's memory);\n"
    "                  -ctk T / -ctv T as llama.cpp (kiln keeps K and V in one type)\n"
    "  --kv-f32        the same as --cache-type f32\n"
    "  --spec TYPE     speculative decoding: ngram (prompt lookup), draft (with --draft-model) or\n"
    "                  mtp (the model's own MTP blocks); the output stays what the model decides\n"
    "  --spec-n N      most tokens proposed per step (default 8, 1..16; fewer while few are accepted)\n"
    "  -md, --draft-model M   the draft model of --spec draft (the target's vocabulary)\n"
    "  --spec-fixed    always propose --spec-n tokens (no adaptive length)\n"
    "  --spec-ngram-min N, --spec-ngram-max N   n-gram lengths looked up (default 2 and 5)\n"
    "  --spec-p-min P  draft and mtp, greedy: stop proposing at a token below probability P\n"
    "  --device D      auto (default: the GPU when one is usable and takes the model, else the CPU),\n"
    "                  cpu or cuda (fails when the GPU cannot run the model); KILN_DEVICE sets the default\n"
    "  -ngl N          --gpu-layers: 0 = the CPU; N = the last N layers on the GPU, the rest on the CPU;\n"
    "                  auto = as many as free GPU memory holds; all or more than the model's = all\n"
    "  --no-repack     (any command) keep Q4_0/Q8_0/Q4_K/Q6_K weights in the file's layout\n"
    "                  instead of copying them to the 8-row interleaved one at load (KILN_REPACK=0)\n"
    "  -v              verbose log on stderr\n";

void cli_usage_all(FILE *f) {
    fprintf(f,
            "kiln %s — local inference runtime\n"
            "\n"
            "usage: kiln COMMAND [options]     (kiln COMMAND --help: that command's usage)\n"
            "\n"
            "commands:\n"
            "  run       -m MODEL -p TEXT [-n N]   generate a continuation of TEXT (raw completion)\n"
            "  chat      -m MODEL [-p TEXT]        chat with the model's template (-p: answer once and exit)\n"
            "  show      MODEL                     metadata, tensors, size and parameters (.pt/.safetensors too)\n"
            "  tokenize  -m MODEL -p TEXT [--json] token ids and pieces\n"
            "  bench     -m MODEL [-p 512] [-n 128] [-s 1,8] prompt, generation and batched speed\n"
            "  quantize  IN.gguf OUT.gguf TYPE     convert weights (q8_0, q4_0, q4_k_m, ...)\n"
            "  serve     [-m MODEL ...] [--port 8080] OpenAI/Ollama-compatible HTTP server\n"
            "  ps        [--host H] [--json]       models a running kiln serve holds: size, context, until when\n"
            "  stop      NAME [--host H]           unload a model from a running kiln serve\n"
            "  embed     -m MODEL [--query|--document] [--dim N] [--truncate] TEXT...\n"
            "                                      normalized embeddings as JSON\n"
            "  rerank    -m MODEL --query Q [--top-n N] DOC...  documents scored for Q, best first\n"
            "  decide    -m PACK --state FILE --question JSON [--measure]  typed decisions of a pack\n"
            "  image     -m PACK -p TEXT [--steps N] [--cfg S] [--seed N] [-o out.png]   text to image (PNG)\n"
            "  transcribe -m MODEL AUDIO... [--language xx] [--translate] [-o txt|srt|vtt|json]\n"
            "                                      speech to text with a Whisper model\n"
            "\n"
            "model store (MODEL above may be a store name; --store DIR or KILN_STORE picks the store):\n"
            "  pull      URL|REF [--name N] [--sha256 HEX] [--header 'K: V'] [--token T] [--json]\n"
            "                                      download and install; REF is hf.co/ORG/REPO[:QUANT],\n"
            "                                      hf.co/ORG/REPO/FILE.gguf[@REV] or an Ollama name (qwen3:0.6b)\n"
            "  import    PATH [--name N] [--copy|--move|--link]                   add a local GGUF\n"
            "  ls        [--json]                  installed models\n"
            "  rm        NAME|ID                   remove a name (the pack goes with its last name);\n"
            "                                      an ID may be the prefix kiln ls prints\n"
            "  verify    NAME                      re-hash every file\n"
            "  gc        remove staging and quarantine older than a day, and packs without a name\n"
            "  cp        NAME NEW-NAME [--force]   add another name (--force: move one in use)\n"
            "\n"
            "\n"
            "machine:\n"
            "  backends  [--json]                  CPU paths and GPU runtimes this machine can run\n"
            "  engines   [--json]                  engine families, their built-in models and the store's,\n"
            "                                      each with its state (loads and downloads nothing)\n"
            "\n%s",
            KILN_VERSION, run_options);
}
/* Every command's synopsis (after "kiln "): `kiln CMD --help` prints it on
 * stdout, a usage error on stderr (cli_usage).  serve prints its own,
 * longer, list of options. */
static const struct cli_synopsis {
    const char *name;
    const char *text;
} synopses[] = {
    {"run", "run -m MODEL (-p TEXT | -f FILE) [options]   continues the text as it is (a raw completion)"},
    {"chat", "chat -m MODEL [--system TEXT] [-p TEXT | -f FILE] [options]\n"
             "  a conversation with the model's chat template; with -p (or -f) one message is answered and chat "
             "exits\n"
             "  --hidethinking   the model's reasoning (<think>) is not shown (on a terminal it is dimmed)\n"
             "  --think, --nothink   ask the template to let the model reason, or not (default: the template's)"},
    {"show", "show MODEL | FILE.pt | FILE.safetensors [--no-tensors]\n"
             "show URL|REF --remote [--token TOKEN] [--json]   the GGUF header only, read by Range requests"},
    {"tokenize", "tokenize -m MODEL -p TEXT [--json] [--ids] [--no-bos] [--parse-special]"},
    {"bench", "bench -m MODEL [-p 512[,..]] [-n 128[,..]] [-pg P,N]... [-d 0[,..]] [-s 1[,4,8..]] [-t N] [-r 5] "
              "[-o md|json] [--cache-type f16|f32|q8_0] [--roofline]\n"
              "           [--device auto|cpu|cuda] [-ngl N]\n"
              "           [--spec ngram|draft|mtp [--spec-n N] [-md DRAFT] [--spec-fixed] [-f PROMPT_FILE]]\n"
              "--spec adds, per tg test, greedy generation after the prompt (-f's text, else random tokens) plain and\n"
              "speculating, alternated rep by rep, with the acceptance rate and the ratio of the two"},
    {"quantize",
     "quantize IN.gguf|NAME OUT.gguf TYPE [-t N] [--allow-requantize]\n"
     "types: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k q4_k_s q4_k_m q5_k_s q5_k_m q3_k_s q3_k_m "
     "q3_k_l iq4_nl iq4_xs iq3_s\n"
     "       tq1_0 tq2_0 mxfp4_moe\n"
     "(iq1_s iq1_m iq2_xxs iq2_xs iq2_s iq2_m iq3_xxs iq3_xs need an importance matrix, which kiln cannot read yet)\n"
     "a model already quantized is quantized again only with --allow-requantize (it loses more precision)"},
    {"serve", "serve [-m MODEL|NAME ...] [options]   (kiln serve --help lists them)"},
    {"embed", "embed -m MODEL [--query|--document [--title T]] [--dim N] [--truncate] [-t N] TEXT..."},
    {"image",
     "image (-m PACK|NAME | --dit FILE.pt --t5 FILE.safetensors --tokenizer spiece.model --vae FILE.safetensors\n"
     "                         [--tokenizer-sha256 HEX])\n"
     "           -p PROMPT [--steps N] [--cfg S] [--seed N] [-o out.png|-] [-t N] [--no-verify]\n"
     "a 256x256 PNG; PACK is a directory with pack.json (every file's length and SHA-256 checked, or only the\n"
     "lengths with --no-verify), NAME one imported into the store (kiln import PACK); the four files alone take\n"
     "Flan-T5's spiece.model (791656 bytes, its SHA-256 pinned) unless --tokenizer-sha256 pins another;\n"
     "defaults: the pack's steps and cfg, seed 42, output.png"},
    {"rerank", "rerank -m MODEL --query Q [--top-n N] [--documents] [--no-truncate] [-t N] (DOC... | -f FILE)"},
    {"decide",
     "decide -m PACK (--state FILE | --state-text TEXT) --question JSON [--question JSON ...] [--measure] [-t N]"},
    {"pull",
     "pull URL|REF [--name NAME] [--sha256 HEX] [--header 'K: V'] [--token TOKEN] [--json]\n"
     "REF: hf.co/ORG/REPO[:QUANT]  hf.co/ORG/REPO/FILE.gguf|FILE.bin[@REVISION]  [HOST/][NAMESPACE/]MODEL[:TAG]\n"
     "environment: HF_ENDPOINT (the hub), HF_TOKEN (its token), KILN_REGISTRY (the default registry URL)\n"
     "kiln pull BUILTIN [--url MIRROR]: a built-in name (whisper:base.en ...), from Hugging Face's "
     "ggerganov/whisper.cpp,\nor from MIRROR: the file's URL or a folder URL ending in /"},
    {"transcribe", "transcribe -m MODEL AUDIO... [options]\n"
                   "  AUDIO: WAV, FLAC, Ogg/Vorbis, MP3 ... (any rate from 8 to 192 kHz, 1 to 8 channels)\n"
                   "  -l, --language XX    spoken language (code or name; default: detected, English on .en models)\n"
                   "  --translate          English text from any language (multilingual models)\n"
                   "  --beam-size N        beams at temperature 0 (default 5; 1 = greedy)\n"
                   "  --best-of N          samples per fallback temperature (default 5)\n"
                   "  --temperature T      first temperature (default 0); --temperature-inc D (default 0.2)\n"
                   "  --no-fallback        no retries at higher temperatures\n"
                   "  --prompt TEXT        initial prompt (spelling, names, style)\n"
                   "  --no-timestamps      one segment per window, no timestamp tokens\n"
                   "  --no-context         windows do not see the previous window's text\n"
                   "  --keep-symbols       do not suppress non-speech symbols\n"
                   "  -o FORMAT            txt (default), srt, vtt, json or verbose_json\n"
                   "  --output-dir DIR     write DIR/NAME.FORMAT per audio file instead of stdout\n"
                   "  -t N                 threads (default: all CPUs); -q: no progress line; -v: timings"},
    {"import",
     "import PATH [--name NAME] [--copy|--move|--link]\n"
     "PATH: a GGUF or whisper.cpp file, or an image pack (a directory with pack.json: all its files, each checked\n"
     "against the SHA-256 pack.json records)"},
    {"ls", "ls [--json]"},
    {"rm", "rm NAME|ID|ID-PREFIX ... [--force]   an id whose pack carries several names removes them all only with "
           "--force"},
    {"verify", "verify NAME|ID"},
    {"gc", "gc"},
    {"cp", "cp SOURCE NEW-NAME [--force]"},
    {"backends", "backends [--json]"},
    {"engines", "engines [--json]   every engine family, its built-in models and the store's models it\n"
                "serves: installed, not downloaded, files missing (FILE), damaged or not supported (WHY)"},
    {"ps", "ps [--host HOST[:PORT]|URL] [--api-key KEY] [--json]\n"
           "the models a running kiln serve holds ($KILN_HOST, default 127.0.0.1:8080; $KILN_API_KEY)"},
    {"stop", "stop NAME [--host HOST[:PORT]|URL] [--api-key KEY]   unload NAME from a running kiln serve"},
};

static const struct cli_synopsis *find_synopsis(const char *name) {
    for (size_t i = 0; i < sizeof synopses / sizeof synopses[0]; i++)
        if (!strcmp(name, synopses[i].name)) return &synopses[i];
    return NULL;
}

void cli_usage(const char *name, FILE *f) {
    const struct cli_synopsis *c = find_synopsis(name);
    if (!c) return;
    fprintf(f, "usage: kiln %s\n", c->text);
    if (!strcmp(name, "run") || !strcmp(name, "chat")) fprintf(f, "\n%s", run_options);
}

int cli_is_help(const char *a) { return !strcmp(a, "-h") || !strcmp(a, "--help"); }

int cli_help(const char *cmd, const char *arg) {
    if (!cli_is_help(arg)) return 0;
    cli_usage(cmd, stdout);
    return 1;
}

/* The text of -f FILE; the commands keep pointers to it until they return. */
static char *g_prompt_file;

static void free_prompt_file(void) { free(g_prompt_file); }

/* Reads all of f as the prompt of o (what = its name for errors). */
static int set_prompt(cli_opts *o, FILE *f, const char *what) {
    size_t cap = 4096, len = 0, k;
    char *buf = malloc(cap);
    while (buf && (k = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += k;
        if (len + 1 == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    if (!buf) {
        fprintf(stderr, "kiln: out of memory reading %s\n", what);
        return -1;
    }
    if (ferror(f)) {
        fprintf(stderr, "kiln: cannot read %s\n", what);
        free(buf);
        return -1;
    }
    buf[len] = 0;
    static int registered;
    if (!registered++) atexit(free_prompt_file);
    free(g_prompt_file); /* a second -f replaces the first */
    g_prompt_file = buf;
    o->prompt = buf;
    return 0;
}

/* The trailing newline that echo and a here-string add is not part of a
 * piped prompt; -f FILE (and -f -) keeps every byte, so a rendered chat
 * prompt can end with one. */
int cli_prompt_from_stdin(cli_opts *o) {
    if (o->prompt) return 0;
    if (isatty(STDIN_FILENO) || set_prompt(o, stdin, "standard input")) return -1;
    size_t n = strlen(g_prompt_file);
    if (n && g_prompt_file[n - 1] == '\n') g_prompt_file[--n] = 0;
    if (n && g_prompt_file[n - 1] == '\r') g_prompt_file[--n] = 0;
    if (!n) o->prompt = NULL; /* nothing piped in */
    return o->prompt ? 0 : -1;
}

void cli_opts_init(cli_opts *o) {
    memset(o, 0, sizeof *o);
    o->n_predict = -1;
    o->n_batch = 512;
    o->sp = kiln_sampler_default_params();
    o->spec = kiln_spec_default_params();
    /* 32 bits, so the printed seed replays through --seed */
    o->sp.seed = (uint32_t)base_random_u64();
}

/* -e: \n \r \t \' \" \\ as llama.cpp's --escape reads them (and \xHH);
 * any other backslash stays as written. */
static char *unescape(const char *s) {
    size_t n = strlen(s);
    char *out = malloc(n + 1), *w = out;
    if (!out) return NULL;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\' || i + 1 == n) {
            *w++ = s[i];
            continue;
        }
        const char c = s[++i];
        if (c == 'n')
            *w++ = '\n';
        else if (c == 'r')
            *w++ = '\r';
        else if (c == 't')
            *w++ = '\t';
        else if (c == '\'' || c == '"' || c == '\\')
            *w++ = c;
        else if (c == 'x' && i + 2 < n + 1 && isxdigit((unsigned char)s[i + 1]) && isxdigit((unsigned char)s[i + 2])) {
            char hex[3] = {s[i + 1], s[i + 2], 0};
            *w++ = (char)strtol(hex, NULL, 16);
            i += 2;
        } else {
            *w++ = '\\';
            *w++ = c;
        }
    }
    *w = 0;
    return out;
}

static char *g_escaped;
static void free_escaped(void) { free(g_escaped); }

int cli_opts_finish(cli_opts *o, const char *cmd) {
    if (o->escape && o->prompt) {
        free(g_escaped);
        if (!(g_escaped = unescape(o->prompt))) {
            fprintf(stderr, "kiln %s: out of memory\n", cmd);
            return -1;
        }
        static int registered;
        if (!registered++) atexit(free_escaped);
        o->prompt = g_escaped;
    }
    if (o->verbose) fprintf(stderr, "kiln %s: seed %llu\n", cmd, (unsigned long long)o->sp.seed);
    return 0;
}

/* indexed by KILN_KV_* */
static const char *const kv_names[] = {"f16", "f32", "q8_0"};
_Static_assert(sizeof kv_names / sizeof kv_names[0] == KILN_KV_Q8_0 + 1, "a name per KV cache type");

int cli_kv_type(const char *s) {
    for (int t = 0; t < (int)(sizeof kv_names / sizeof kv_names[0]); t++)
        if (!strcmp(s, kv_names[t])) return t;
    return -1;
}

const char *cli_kv_name(int type) { return kv_names[type]; }

/* A numeric flag's value within [lo, hi]; anything else is a usage error
 * that names the flag and the range, never another meaning. */
static int want_ll(int argc, char **argv, int *i, long long lo, long long hi, long long *out) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "kiln: %s needs a value\n", argv[*i]);
        return -1;
    }
    char *end;
    errno = 0;
    long long v = strtoll(argv[*i + 1], &end, 10);
    if (*end || end == argv[*i + 1] || errno) {
        fprintf(stderr, "kiln: %s: '%s' is not a whole number\n", argv[*i], argv[*i + 1]);
        return -1;
    }
    if (v < lo || v > hi) {
        fprintf(stderr, "kiln: %s: %lld is out of range (%lld to %lld)\n", argv[*i], v, lo, hi);
        return -1;
    }
    *out = v;
    (*i)++;
    return 1;
}

static int want_int(int argc, char **argv, int *i, int lo, int hi, int *out) {
    long long v;
    int r = want_ll(argc, argv, i, lo, hi, &v);
    if (r == 1) *out = (int)v;
    return r;
}

static int want_float(int argc, char **argv, int *i, double lo, double hi, float *out) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "kiln: %s needs a value\n", argv[*i]);
        return -1;
    }
    char *end;
    double v = strtod(argv[*i + 1], &end);
    if (*end || end == argv[*i + 1] || v != v) {
        fprintf(stderr, "kiln: %s: '%s' is not a number\n", argv[*i], argv[*i + 1]);
        return -1;
    }
    if (v < lo || v > hi) {
        fprintf(stderr, "kiln: %s: %g is out of range (%g to %g)\n", argv[*i], v, lo, hi);
        return -1;
    }
    *out = (float)v;
    (*i)++;
    return 1;
}

int cli_parse_spec(kiln_spec_params *sp, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    if (!strcmp(a, "--spec")) {
        if (*i + 1 >= argc) {
            fprintf(stderr, "kiln: %s needs a value\n", a);
            return -1;
        }
        const int t = kiln_spec_type_from_str(argv[*i + 1]);
        if (t < 0) {
            fprintf(stderr, "kiln: %s: '%s' is not ngram, draft, mtp or none\n", a, argv[*i + 1]);
            return -1;
        }
        sp->type = (kiln_spec_type)t;
        (*i)++;
        return 1;
    }
    if (!strcmp(a, "-md") || !strcmp(a, "--draft-model")) {
        if (*i + 1 >= argc) {
            fprintf(stderr, "kiln: %s needs a value\n", a);
            return -1;
        }
        const char *path;
        if (cli_model_path(argv[++*i], 0, &path)) return -1;
        sp->draft_model = path;
        if (sp->type == KILN_SPEC_NONE) sp->type = KILN_SPEC_DRAFT; /* as llama.cpp's -md */
        return 1;
    }
    int r = 0;
    if (!strcmp(a, "--spec-n") || !strcmp(a, "--draft-max"))
        r = want_int(argc, argv, i, 1, 16, &sp->n_max);
    else if (!strcmp(a, "--spec-ngram-min"))
        r = want_int(argc, argv, i, 1, 16, &sp->ngram_min);
    else if (!strcmp(a, "--spec-ngram-max"))
        r = want_int(argc, argv, i, 1, 16, &sp->ngram_max);
    else if (!strcmp(a, "--spec-p-min"))
        r = want_float(argc, argv, i, 0, 1, &sp->p_min);
    else if (!strcmp(a, "--spec-fixed")) {
        sp->fixed = 1;
        return 1;
    } else
        return 0;
    if (r == 1 && (sp->n_max < 1 || sp->n_max > 16 || sp->ngram_min < 1 || sp->ngram_min > 16 || sp->ngram_max < 1 ||
                   sp->ngram_max > 16 || sp->p_min < 0 || sp->p_min > 1)) {
        fprintf(stderr, "kiln: %s: '%s' is out of range (--spec-n 1..16, n-gram lengths 1..16, --spec-p-min 0..1)\n", a,
                argv[*i]);
        return -1;
    }
    return r;
}

/* -ctk, -ctv and --cache-type name the one KV cache type kiln keeps. */
static int want_kv(cli_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    if (*i + 1 >= argc) {
        fprintf(stderr, "kiln: %s needs a value\n", a);
        return -1;
    }
    const int t = cli_kv_type(argv[*i + 1]);
    if (t < 0) {
        fprintf(stderr, "kiln: %s: '%s' is not f16, f32 or q8_0\n", a, argv[*i + 1]);
        return -1;
    }
    if (o->kv_flag && o->kv_flag != t + 1) {
        fprintf(stderr, "kiln: %s %s: kiln keeps K and V in one type, and %s was already given\n", a, argv[*i + 1],
                cli_kv_name(o->kv_flag - 1));
        return -1;
    }
    o->kv_flag = t + 1;
    o->kv_type = t;
    (*i)++;
    return 1;
}

int cli_parse_device(int argc, char **argv, int *i, int *device, int *gpu_layers) {
    const char *a = argv[*i];
    const int dev = !strcmp(a, "--device") || !strcmp(a, "-dev");
    const int ngl = !strcmp(a, "-ngl") || !strcmp(a, "--gpu-layers") || !strcmp(a, "--n-gpu-layers");
    if (!dev && !ngl) return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "kiln: %s needs a value\n", a);
        return -1;
    }
    const char *v = argv[++*i];
    if (dev) {
        if (!strcmp(v, "auto"))
            *device = KILN_ENGINE_BACKEND_AUTO;
        else if (!strcmp(v, "cpu") || !strcmp(v, "none"))
            *device = KILN_ENGINE_BACKEND_CPU;
        else if (!strcmp(v, "cuda") || !strcmp(v, "cuda:0") || !strcmp(v, "CUDA0") || !strcmp(v, "gpu"))
            *device = KILN_ENGINE_BACKEND_CUDA;
        else {
            fprintf(stderr, "kiln: %s: '%s' is not auto, cpu or cuda (kiln uses one GPU: cuda:0)\n", a, v);
            return -1;
        }
        return 1;
    }
    if (!strcmp(v, "all") || !strcmp(v, "-1")) {
        *gpu_layers = 0;
        return 1;
    }
    if (!strcmp(v, "auto")) { /* as many layers as the GPU's free memory holds */
        *gpu_layers = KILN_GPU_LAYERS_AUTO;
        return 1;
    }
    char *end;
    long n = strtol(v, &end, 10);
    if (end == v || *end || n < 0 || n > INT_MAX) {
        fprintf(stderr, "kiln: %s: '%s' is not a layer count (N, all or auto)\n", a, v);
        return -1;
    }
    if (n == 0)
        *device = KILN_ENGINE_BACKEND_CPU; /* no layer on the GPU: the CPU backend */
    else
        *gpu_layers = (int)n;
    return 1;
}

const char *cli_device_name(int b) {
    return b == KILN_ENGINE_BACKEND_CPU ? "cpu" : b == KILN_ENGINE_BACKEND_CUDA ? "cuda" : "auto";
}

int cli_parse_common(cli_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    const int sr = cli_parse_spec(&o->spec, argc, argv, i);
    if (sr) return sr;
    const int dr = cli_parse_device(argc, argv, i, &o->device, &o->gpu_layers);
    if (dr) return dr;
    if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
        if (*i + 1 >= argc) {
            fprintf(stderr, "kiln: %s needs a value\n", a);
            return -1;
        }
        o->model = argv[++*i];
        return 1;
    }
    if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
        if (*i + 1 >= argc) {
            fprintf(stderr, "kiln: %s needs a value\n", a);
            return -1;
        }
        o->prompt = argv[++*i];
        return 1;
    }
    if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
        if (*i + 1 >= argc) {
            fprintf(stderr, "kiln: %s needs a value\n", a);
            return -1;
        }
        const char *path = argv[++*i];
        const int std_in = !strcmp(path, "-");
        FILE *f = std_in ? stdin : fopen(path, "rb");
        if (!f) {
            fprintf(stderr, "kiln: %s: cannot open %s\n", a, path);
            return -1;
        }
        const int rc = set_prompt(o, f, std_in ? "standard input" : path);
        if (!std_in) fclose(f);
        return rc ? -1 : 1;
    }
    const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    const int max_threads = (int)(ncpu > 0 ? ncpu * 4 : 1024);
    if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) return want_int(argc, argv, i, -1, INT_MAX, &o->n_predict);
    if (!strcmp(a, "-t") || !strcmp(a, "--threads")) return want_int(argc, argv, i, 1, max_threads, &o->n_threads);
    if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) return want_int(argc, argv, i, 0, INT_MAX, &o->n_ctx);
    if (!strcmp(a, "-b") || !strcmp(a, "--batch-size")) return want_int(argc, argv, i, 1, INT_MAX, &o->n_batch);
    if (!strcmp(a, "--temp")) return want_float(argc, argv, i, 0, 100, &o->sp.temperature);
    if (!strcmp(a, "--top-k")) return want_int(argc, argv, i, 0, INT_MAX, &o->sp.top_k);
    if (!strcmp(a, "--top-p")) return want_float(argc, argv, i, 0, 1, &o->sp.top_p);
    if (!strcmp(a, "--min-p")) return want_float(argc, argv, i, 0, 1, &o->sp.min_p);
    if (!strcmp(a, "--repeat-penalty")) return want_float(argc, argv, i, 0, 10, &o->sp.repeat_penalty);
    if (!strcmp(a, "--repeat-last-n")) return want_int(argc, argv, i, -1, INT_MAX, &o->sp.repeat_last_n);
    if (!strcmp(a, "--presence-penalty")) return want_float(argc, argv, i, -2, 2, &o->sp.presence_penalty);
    if (!strcmp(a, "--frequency-penalty")) return want_float(argc, argv, i, -2, 2, &o->sp.frequency_penalty);
    if (!strcmp(a, "--seed") || !strcmp(a, "-s")) {
        long long v;
        int r = want_ll(argc, argv, i, -1, UINT32_MAX, &v);
        if (r == 1 && v >= 0) o->sp.seed = (uint64_t)v; /* -1 keeps the drawn one */
        return r;
    }
    if (!strcmp(a, "--stop")) {
        if (*i + 1 >= argc || !argv[*i + 1][0]) {
            fprintf(stderr, "kiln: --stop needs a non-empty text\n");
            return -1;
        }
        if (o->n_stop == 8 || strlen(argv[*i + 1]) >= sizeof o->stop[0]) {
            fprintf(stderr, "kiln: --stop: at most 8 stop strings of up to %zu bytes\n", sizeof o->stop[0] - 1);
            return -1;
        }
        snprintf(o->stop[o->n_stop++], sizeof o->stop[0], "%s", argv[++*i]);
        return 1;
    }
    if (!strcmp(a, "--ignore-eos")) {
        o->ignore_eos = 1;
        return 1;
    }
    if (!strcmp(a, "-e") || !strcmp(a, "--escape")) {
        o->escape = 1;
        return 1;
    }
    if (!strcmp(a, "--no-escape")) {
        o->escape = 0;
        return 1;
    }
    if (!strcmp(a, "--mmproj") || !strcmp(a, "--image")) {
        if (*i + 1 >= argc) {
            fprintf(stderr, "kiln: %s needs a file\n", a);
            return -1;
        }
        if (a[2] == 'm') {
            o->mmproj = argv[++*i];
            return 1;
        }
        if (o->n_image == CLI_MAX_IMAGES) {
            fprintf(stderr, "kiln: at most %d --image files\n", CLI_MAX_IMAGES);
            return -1;
        }
        o->image[o->n_image++] = argv[++*i];
        return 1;
    }
    if (!strcmp(a, "--json-schema")) {
        if (*i + 1 >= argc) {
            fprintf(stderr, "kiln: %s needs a value\n", a);
            return -1;
        }
        o->json_schema = argv[++*i];
        return 1;
    }
    if (!strcmp(a, "--kv-f32")) {
        o->kv_type = KILN_KV_F32;
        return 1;
    }
    if (!strcmp(a, "--cache-type") || !strcmp(a, "-ctk") || !strcmp(a, "--cache-type-k") || !strcmp(a, "-ctv") ||
        !strcmp(a, "--cache-type-v"))
        return want_kv(o, argc, argv, i);
    if (!strcmp(a, "--json")) {
        o->json = 1;
        return 1;
    }
    if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
        o->verbose = 1;
        return 1;
    }
    return 0;
}

int cli_fail(const char *what) {
    const char *e = kiln_last_error();
    if (what && *e)
        fprintf(stderr, "kiln: %s: %s\n", what, e);
    else if (*e)
        fprintf(stderr, "kiln: %s\n", e);
    else
        fprintf(stderr, "kiln: %s failed\n", what ? what : "operation");
    return 1;
}

/* ---- store names wherever a model is taken ---- */

static kiln_store_lease *g_leases[8];
static int g_n_leases;

static void release_leases(void) {
    for (int i = 0; i < g_n_leases; i++) kiln_store_release(g_leases[i]);
    g_n_leases = 0;
}

int cli_model_path(const char *arg, int print_manifest, const char **path_out) {
    struct stat st;
    *path_out = arg;
    if (stat(arg, &st) == 0 && !S_ISDIR(st.st_mode)) return 0;
    if (g_n_leases == (int)(sizeof g_leases / sizeof g_leases[0])) {
        fprintf(stderr, "kiln: too many store models in one command\n");
        return 1;
    }
    kiln_store *s;
    if (kiln_store_open(NULL, &s) != KILN_OK) return cli_fail(arg);
    kiln_store_lease *l = NULL;
    kiln_status rs = kiln_store_resolve(s, arg, &l);
    if (rs == KILN_ERR_NOT_FOUND || rs == KILN_ERR_INVALID_ARG) {
        fprintf(stderr, "kiln: %s: no such file, and not a model in the store (%s)\n", arg, kiln_last_error());
        kiln_store_close(s);
        return 1;
    }
    if (rs != KILN_OK) {
        kiln_store_close(s);
        return cli_fail(arg);
    }
    if (print_manifest) {
        char *info = NULL;
        if (kiln_store_info(s, arg, &info) == KILN_OK) printf("store:     %s\n%s\n\n", kiln_store_root(s), info);
        kiln_store_free_string(info);
    }
    kiln_store_close(s);
    /* the lease lives until the process ends, so the pack can't be removed
     * while its weights are mapped */
    if (!g_n_leases) atexit(release_leases);
    g_leases[g_n_leases++] = l;
    *path_out = kiln_store_lease_path(l);
    return 0;
}
