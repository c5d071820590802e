/* libFuzzer target: arbitrary bytes as a Go text/template (Ollama's chat
 * templates), compiled from exactly those bytes (no terminator after them)
 * and, when it compiles, rendered as Ollama renders a chat (messages, tools,
 * think) and once over a plain object, under small budgets (so that each
 * input ends quickly).  Built only with -DKILN_FUZZ=ON (clang);
 * scripts/test.sh seeds it with the real templates and the hostile ones. */
#include "chat/gotmpl.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char k_messages[] =
    "[{\"role\": \"system\", \"content\": \"Be brief.\"},"
    " {\"role\": \"user\", \"content\": \"Weather in Paris? <&>\"},"
    " {\"role\": \"assistant\", \"content\": \"\", \"thinking\": \"look it up\", \"tool_calls\": [{\"function\": "
    "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": [1, 2.5, null, true]}}}]},"
    " {\"role\": \"tool\", \"name\": \"get_weather\", \"content\": \"21\"},"
    " {\"role\": \"user\", \"content\": \"and tomorrow?\"}]";
static const char k_tools[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather\","
    " \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}}}]";
static const char k_data[] = "{\"A\": [1, 2, 3], \"B\": {\"x\": \"y\"}, \"N\": -9223372036854775808, \"F\": 1e300, "
                             "\"S\": \"str\", \"T\": true, \"Z\": null}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static json_t *messages, *tools, *plain;
    if (!messages) {
        messages = json_loads(k_messages, 0, NULL);
        tools = json_loads(k_tools, 0, NULL);
        plain = json_loads(k_data, 0, NULL);
    }
    /* a copy of exactly size bytes, so reading past the end is caught */
    char *src = malloc(size ? size : 1);
    if (!src) return 0;
    if (size) memcpy(src, data, size);
    kgt *t;
    kiln_status st = chat_gotmpl_compile(src, size, &t);
    free(src);
    if (st) return 0;
    chat_opts o = {.max_steps = 200000, .max_output = 256 << 10, .max_memory = 16 << 20};
    char *out;
    if (chat_gotmpl_render_chat_opts(t, messages, tools, (int)(size % 3) - 1, &o, &out) == KILN_OK) free(out);
    if (chat_gotmpl_render_opts(t, plain, &o, &out) == KILN_OK) free(out);
    chat_gotmpl_free(t);
    return 0;
}
