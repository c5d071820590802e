/* The tool-call round trip as agent frameworks replay it, through the
 * server's message normalization and the real Qwen3, Llama 3.2 and Mistral
 * v3 templates (tests/data/templates): an assistant turn with "content":
 * null (what OpenAI returns) or no content at all, its tool_calls with the
 * arguments as JSON text or as an object, then the tool's result.  Each
 * renders, and the prompt carries the call and the result. */
#include "chat/template.h"
#include "server/prompt.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The checks below read a failure's message from a buffer: these take the
 * last error into it. */
static chat_tmpl *compile_e(const char *src, size_t len, char *err, size_t errlen) {
    chat_tmpl *t;
    if (chat_compile(src, len, &t)) snprintf(err, errlen, "%s", kiln_last_error());
    return t;
}
static char *render_e(const chat_tmpl *t, const json_t *vars, char *err, size_t errlen) {
    char *out;
    if (chat_render(t, vars, &out)) snprintf(err, errlen, "%s", kiln_last_error());
    return out;
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

/* content: "null" (OpenAI's), "absent" or "\"\""; args: a JSON text or an object */
static json_t *conversation(const char *content, int args_as_text) {
    char buf[1024];
    const char *args = args_as_text ? "\"{\\\"city\\\": \\\"Paris\\\"}\"" : "{\"city\": \"Paris\"}";
    char asst_content[32] = "";
    if (strcmp(content, "absent")) snprintf(asst_content, sizeof asst_content, "\"content\": %s, ", content);
    snprintf(buf, sizeof buf,
             "[{\"role\": \"user\", \"content\": \"What is the weather in Paris?\"},"
             " {\"role\": \"assistant\", %s\"tool_calls\": [{\"id\": \"call00001\", \"type\": \"function\","
             "   \"function\": {\"name\": \"get_weather\", \"arguments\": %s}}]},"
             " {\"role\": \"tool\", \"tool_call_id\": \"call00001\", \"name\": \"get_weather\","
             "  \"content\": \"{\\\"temperature\\\": 21}\"}]",
             asst_content, args);
    json_error_t e;
    json_t *m = json_loads(buf, 0, &e);
    if (!m) fprintf(stderr, "test conversation: %s\n", e.text);
    return m;
}

static const char k_tools[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather of a city\","
    " \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}},"
    " \"required\": [\"city\"]}}}]";

/* What the first Qwen3 release's template does with every assistant turn
 * (the tests/data copy is a later revision that guards with "is string"):
 * a membership test and a method call on the content.  With null content
 * that was "argument of type 'NoneType' is not iterable"; without content,
 * "'dict object' has no attribute 'content'". */
static const char k_strict[] =
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' %}"
    "{%- set content = message.content %}"
    "{%- if '</think>' in message.content %}{%- set content = content.split('</think>')[-1] %}{%- endif %}"
    "{{- '<|im_start|>assistant\n' + content.lstrip('\n') }}"
    "{%- for tc in message.tool_calls %}"
    "{{- '<tool_call>' + tc.function.name + ' ' + (tc.function.arguments | tojson) + '</tool_call>' }}"
    "{%- endfor %}"
    "{%- else %}{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}{%- endif %}"
    "{%- endfor %}";

int main(void) {
    const char *templates[] = {"data/templates/qwen3.jinja", "data/templates/llama3.2.jinja",
                               "data/templates/mistral-v3.jinja", "strict"};
    const char *contents[] = {"null", "absent", "\"\""};
    json_t *tools = json_loads(k_tools, 0, NULL);
    CHECK(tools);
    for (size_t t = 0; t < sizeof templates / sizeof templates[0]; t++) {
        char *src = strcmp(templates[t], "strict") ? slurp(templates[t]) : strdup(k_strict);
        CHECKF(src, "%s readable", templates[t]);
        if (!src) continue;
        char err[512] = "";
        chat_tmpl *tmpl = compile_e(src, strlen(src), err, sizeof err);
        CHECKF(tmpl, "%s compiles: %s", templates[t], err);
        for (size_t c = 0; tmpl && c < sizeof contents / sizeof contents[0]; c++) {
            for (int as_text = 0; as_text < 2; as_text++) {
                json_t *msgs = conversation(contents[c], as_text);
                CHECK(msgs);
                json_t *vars = json_object();
                json_object_set_new(vars, "messages", server_chat_normalize(msgs));
                json_object_set(vars, "tools", tools);
                json_object_set_new(vars, "add_generation_prompt", json_true());
                json_object_set_new(vars, "bos_token", json_string("<s>"));
                json_object_set_new(vars, "eos_token", json_string("</s>"));
                err[0] = 0;
                char *out = render_e(tmpl, vars, err, sizeof err);
                CHECKF(out, "%s, content %s, arguments as %s: %s", templates[t], contents[c],
                       as_text ? "text" : "object", err);
                if (out) {
                    CHECKF(strstr(out, "get_weather") && strstr(out, "Paris"), "%s: the call is in the prompt",
                           templates[t]);
                    CHECKF(strstr(out, "temperature") && strstr(out, "21"), "%s: the result is in the prompt",
                           templates[t]);
                    CHECKF(!strstr(out, "None") && !strstr(out, "null"), "%s: no null rendered:\n%s", templates[t],
                           out);
                }
                free(out);
                json_decref(vars);
                json_decref(msgs);
            }
        }
        chat_free(tmpl);
        free(src);
    }
    /* the caller's messages stay as they were */
    json_t *msgs = conversation("null", 1);
    json_t *norm = server_chat_normalize(msgs);
    json_t *asst = json_array_get(msgs, 1);
    CHECK(json_is_null(json_object_get(asst, "content")));
    CHECK(json_is_string(json_object_get(
        json_object_get(json_array_get(json_object_get(asst, "tool_calls"), 0), "function"), "arguments")));
    CHECK(json_is_string(json_object_get(json_array_get(norm, 1), "content")));
    json_decref(norm);
    json_decref(msgs);
    /* an earlier turn's reasoning reaches templates as thinking too */
    msgs =
        json_loads("[{\"role\": \"assistant\", \"content\": \"b\", \"reasoning_content\": \"a\"},"
                   "{\"role\": \"assistant\", \"content\": \"d\", \"reasoning_content\": \"c\", \"thinking\": \"e\"}]",
                   0, NULL);
    norm = server_chat_normalize(msgs);
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(norm, 0), "thinking")), "a"));
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(norm, 1), "thinking")), "e"));
    json_decref(norm);
    json_decref(msgs);
    json_decref(tools);
    return t_done();
}
