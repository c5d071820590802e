/* kiln transcribe and kiln show on a Whisper file, run as a user would
 * (KILN_BIN, set by ctest): every output format, the progress line on
 * audio longer than a window, option checks before any work, and one-line
 * errors for bad input. */
#include "testutil.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MODEL "data/whisper/tiny-en-f16.bin"
#define CLIP "data/whisper/clip5s.wav"

static const char *bin;
static char g_dir[] = "/tmp/kiln-stt-cli-XXXXXX"; /* this run's own scratch directory */

static int run(const char *args, char **out, char **err) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' %s", bin, args);
    return t_run_capture(cmd, g_dir, out, err);
}

static int one_line(const char *s) {
    const char *nl = s ? strchr(s, '\n') : NULL;
    return s && *s && nl && nl[1] == 0;
}

int main(void) {
    bin = getenv("KILN_BIN");
    if (!bin) {
        fprintf(stderr, "KILN_BIN is not set\n");
        return 1;
    }
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    char *o, *e;
    const char *q = "--beam-size 1 --no-fallback -t 2";
    char args[1024];
    /* srt: numbered cues with comma milliseconds; progress on stderr */
    snprintf(args, sizeof args, "transcribe -m %s %s -o srt %s", MODEL, CLIP, q);
    CHECK(run(args, &o, &e) == 0);
    CHECK(o && !strncmp(o, "1\n00:00:0", 9) && strstr(o, " --> 00:00:0") && strstr(o, ","));
    CHECK(e && strstr(e, "transcribing clip5s.wav:") && strstr(e, "100 %"));
    free(o), free(e);
    /* vtt */
    snprintf(args, sizeof args, "transcribe -m %s %s -o vtt -q %s", MODEL, CLIP, q);
    CHECK(run(args, &o, &e) == 0);
    CHECK(o && !strncmp(o, "WEBVTT\n\n00:00:0", 15) && strstr(o, "."));
    CHECK(e && e[0] == 0);
    free(o), free(e);
    /* verbose_json: segments within the clip, language, duration */
    snprintf(args, sizeof args, "transcribe -m %s %s -o verbose_json -q %s", MODEL, CLIP, q);
    CHECK(run(args, &o, &e) == 0);
    json_error_t je;
    json_t *j = o ? json_loads(o, 0, &je) : NULL;
    CHECK(j && json_is_array(json_object_get(j, "segments")));
    CHECK(j && !strcmp(json_string_value(json_object_get(j, "language")), "english"));
    CHECK(j && json_real_value(json_object_get(j, "duration")) == 5.0);
    size_t n = j ? json_array_size(json_object_get(j, "segments")) : 0;
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_array_get(json_object_get(j, "segments"), i);
        double a = json_real_value(json_object_get(s, "start")), b = json_real_value(json_object_get(s, "end"));
        CHECK(a >= 0 && b >= a && b <= 5.0);
    }
    json_decref(j);
    free(o), free(e);
    /* json and txt agree on the text */
    snprintf(args, sizeof args, "transcribe -m %s %s -o json -q %s", MODEL, CLIP, q);
    CHECK(run(args, &o, &e) == 0);
    j = o ? json_loads(o, 0, &je) : NULL;
    CHECK(j && json_is_string(json_object_get(j, "text")));
    char *txt_o, *txt_e;
    snprintf(args, sizeof args, "transcribe -m %s %s -q %s", MODEL, CLIP, q);
    CHECK(run(args, &txt_o, &txt_e) == 0);
    if (j && txt_o) {
        const char *jt = json_string_value(json_object_get(j, "text"));
        while (*jt == ' ') jt++;
        CHECK(!strncmp(txt_o, jt, strlen(txt_o) - 1));
    }
    json_decref(j);
    free(o), free(e), free(txt_o), free(txt_e);
    /* --output-dir writes NAME.FORMAT */
    char dir[128], file[256];
    snprintf(dir, sizeof dir, "/tmp/kiln-stt-cli-%d", (int)getpid());
    snprintf(args, sizeof args, "mkdir -p %s", dir);
    CHECK(system(args) == 0);
    snprintf(args, sizeof args, "transcribe -m %s %s -o srt -q --output-dir %s %s", MODEL, CLIP, dir, q);
    CHECK(run(args, &o, &e) == 0 && o && o[0] == 0);
    snprintf(file, sizeof file, "%s/clip5s.srt", dir);
    char *w = t_read_file(file, NULL);
    CHECK(w && !strncmp(w, "1\n", 2));
    free(w), free(o), free(e);
    /* a folder given with its trailing slash: the path said has one slash */
    snprintf(args, sizeof args, "transcribe -m %s %s -o srt --output-dir %s/ %s", MODEL, CLIP, dir, q);
    CHECK(run(args, &o, &e) == 0 && e && strstr(e, "wrote ") && strstr(e, file) && !strstr(e, "//"));
    free(o), free(e);
    unlink(file);
    rmdir(dir);
    /* options refused before any work, errors on one line */
    snprintf(args, sizeof args, "transcribe -m %s %s --language fr", MODEL, CLIP);
    CHECK(run(args, &o, &e) == 1 && one_line(e) && strstr(e, "English-only") && o && !o[0]);
    free(o), free(e);
    snprintf(args, sizeof args, "transcribe -m %s %s --translate", MODEL, CLIP);
    CHECK(run(args, &o, &e) == 1 && one_line(e) && strstr(e, "translate"));
    free(o), free(e);
    snprintf(args, sizeof args, "transcribe -m %s %s -o docx", MODEL, CLIP);
    CHECK(run(args, &o, &e) == 2 && e && strstr(e, "-o takes"));
    free(o), free(e);
    snprintf(args, sizeof args, "transcribe -m %s data/whisper/tiny-en-f16.json", MODEL);
    CHECK(run(args, &o, &e) == 1 && one_line(e) && strstr(e, "not an audio file"));
    free(o), free(e);
    snprintf(args, sizeof args, "transcribe -m data/whisper/clip16k.wav %s", CLIP);
    CHECK(run(args, &o, &e) == 1 && one_line(e) && strstr(e, "magic"));
    free(o), free(e);
    CHECK(run("transcribe --help", &o, &e) == 0 && o && strstr(o, "--translate"));
    free(o), free(e);
    /* kiln show on a whisper file */
    snprintf(args, sizeof args, "show %s", MODEL);
    CHECK(run(args, &o, &e) == 0 && o && strstr(o, "English-only") && strstr(o, "n_mels         128") &&
          strstr(o, "runnable:  yes"));
    free(o), free(e);
    char path[64];
    snprintf(path, sizeof path, "%s/out.txt", g_dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/err.txt", g_dir);
    unlink(path);
    rmdir(g_dir);
    return t_done();
}
