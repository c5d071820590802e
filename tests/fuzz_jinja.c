/* libFuzzer target: arbitrary bytes as a Jinja chat template, compiled and,
 * when it compiles, rendered with a conversation that has a system prompt,
 * tool calls, a tool result and tools, under small budgets (so that each
 * input ends quickly; a budget error is a clean end).  Built only with
 * -DKILN_FUZZ=ON (clang); scripts/test.sh seeds it with the conformance
 * templates and the hostile ones. */
#include "chat/template.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char k_vars[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
    " {\"role\": \"user\", \"content\": \"Weather in Paris? \\u00e9\\n<think>\"},"
    " {\"role\": \"assistant\", \"content\": \"\", \"reasoning_content\": \"look it up\", \"tool_calls\": [{\"id\": "
    "\"c1\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
    "\"days\": [1, 2.5, null, true]}}}]},"
    " {\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"{\\\"t\\\": 21}\"},"
    " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"and tomorrow?\"}]}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather\","
    " \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": "
    "[\"city\"]}}}],"
    " \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"enable_thinking\": false,"
    " \"kct_now\": 1721995200, \"n\": -9223372036854775808}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static json_t *vars;
    if (!vars) vars = json_loads(k_vars, 0, NULL);
    chat_tmpl *t;
    if (chat_compile((const char *)data, size, &t)) return 0;
    chat_opts o = {.max_steps = 200000, .max_output = 256 << 10, .max_memory = 16 << 20};
    char *out;
    if (chat_render_opts(t, vars, &o, &out) == KILN_OK) free(out);
    chat_free(t);
    return 0;
}
