/*
 * Structured output (src/sample/jschema.c): texts fed byte by byte to the
 * recognizer of a schema must be accepted to the end (and be complete) or
 * be refused at the byte where they leave what the schema allows; schemas
 * the recognizer cannot honour are refused with a message.
 */
#include "sample/jschema.h"
#include "testutil.h"

#include <string.h>

/* How many bytes of text the recognizer of s takes; *whole: whether they
 * make a complete value. */
static int feed(const ks_schema *s, const char *text, int *whole) {
    ks_sv v;
    ks_sv_init(&v, s);
    int n = (int)strlen(text), i = 0;
    for (; i < n; i++) {
        if (!ks_sv_accepts(&v, text + i, 1)) break; /* the copy refuses as the real one would */
        CHECK(ks_sv_byte(&v, (unsigned char)text[i]));
    }
    *whole = i == n && ks_sv_complete(&v);
    return i;
}

/* text is accepted whole (stop < 0) or refused at byte stop. */
static void expect(const ks_schema *s, const char *text, int stop, const char *what) {
    int whole;
    const int got = feed(s, text, &whole);
    if (stop < 0) CHECKF(got == (int)strlen(text) && whole, "%s: '%s' stopped at byte %d (whole %d)", what, text, got, whole);
    else CHECKF(got == stop, "%s: '%s' stopped at byte %d, not %d", what, text, got, stop);
}

/* text is accepted to its end but is not yet a whole value */
static void partial(const ks_schema *s, const char *text, const char *what) {
    int whole;
    const int got = feed(s, text, &whole);
    CHECKF(got == (int)strlen(text) && !whole, "%s: '%s' stopped at %d, whole %d", what, text, got, whole);
}

static ks_schema *compile(const char *src) {
    json_error_t je;
    json_t *j = json_loads(src, 0, &je);
    CHECKF(j != NULL, "schema does not parse: %s", src);
    char err[256];
    ks_schema *s = ks_schema_compile(j, err, sizeof err);
    CHECKF(s != NULL, "schema refused (%s): %s", err, src);
    json_decref(j); /* the compiled schema keeps no pointer into it */
    return s;
}

static void refused(const char *src, const char *msg) {
    json_t *j = json_loads(src, JSON_DECODE_ANY, NULL);
    CHECKF(j != NULL, "schema does not parse: %s", src);
    char err[256] = "";
    ks_schema *s = ks_schema_compile(j, err, sizeof err);
    CHECKF(!s && strstr(err, msg), "schema %s: want an error with '%s', got '%s'", src, msg, s ? "(compiled)" : err);
    ks_schema_free(s);
    json_decref(j);
}

int main(void) {
    /* any JSON value (the JSON mode) */
    ks_schema *any = ks_schema_compile(NULL, NULL, 0);
    CHECK(any != NULL);
    expect(any, "{\"a\": [1, -2.5e+3, \"x\\n\\u00e9\", true, null, {}], \"b\": {\"c\": false}}", -1, "any");
    expect(any, " [ ] ", -1, "any, a space around");
    expect(any, "12", -1, "a top-level number is whole at the end");
    partial(any, "-", "a lone minus");
    partial(any, "{\"a\":1", "an open object");
    expect(any, "{\"a\" 1}", 5, "no colon");
    expect(any, "[1,]", 3, "a trailing comma");
    expect(any, "01", 1, "a leading zero");
    expect(any, "tru ", 3, "a cut literal");
    expect(any, "\"a\\x\"", 3, "a bad escape");
    expect(any, "\"\\ n\"", 2, "a space is no escape");
    expect(any, "{\"k\\u00 1\": 1}", 7, "nor a hex digit");
    expect(any, "\"a b\\t\"", -1, "spaces in a string");
    expect(any, "{}}", 2, "after the value only whitespace");
    /* whitespace between tokens: none, a space, or a line break and up to
     * 20 spaces or tabs */
    expect(any, "[\n                    1]", -1, "a line break and 20 spaces");
    expect(any, "[\n                     1]", 22, "not 21");
    expect(any, "{\n  \"a\":\n\t1\n}", -1, "indented lines");
    expect(any, "[1,\n\n2]", 4, "not two line breaks");
    expect(any, "[1,  2]", 4, "not two spaces");
    expect(any, "[1, \n2]", 4, "not a space before the line break");
    ks_schema_free(any);

    /* an object: properties in order, required ones present */
    ks_schema *person = compile(
        "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\"}, \"age\": {\"type\": \"integer\"},"
        " \"tags\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}, \"maxItems\": 2}},"
        " \"required\": [\"name\", \"age\"]}");
    expect(person, "{\"name\": \"Bo\", \"age\": 7}", -1, "required properties");
    expect(person, "{ \"name\":\"Bo\",\"age\":-7,\"tags\":[\"a\",\"b\"] }", -1, "with the optional one");
    expect(person, "{\"age\": 7", 2, "a required property skipped");
    expect(person, "{\"name\": \"Bo\"}", 13, "a required property missing");
    expect(person, "{\"name\": \"Bo\", \"age\": 7.5}", 23, "a fraction in an integer");
    expect(person, "{\"name\": \"Bo\", \"age\": 7, \"tags\": [\"a\", \"b\", \"c\"]}", 42, "more items than maxItems");
    expect(person, "{\"nam\": 1}", 5, "a key that is not a property");
    expect(person, "{\"name\": 5}", 9, "a number for a string");
    expect(person, "[]", 0, "an array for an object");
    partial(person, "{\"name\": \"Bo\", \"age\": 7", "no closing brace yet");
    ks_schema_free(person);

    /* optional properties may be skipped, but order holds */
    ks_schema *opt = compile("{\"properties\": {\"a\": {\"type\": \"boolean\"}, \"b\": {\"type\": \"null\"}, "
                             "\"c\": {\"type\": \"number\"}}, \"required\": [\"c\"]}");
    expect(opt, "{\"c\": 1}", -1, "optional ones left out");
    expect(opt, "{\"b\": null, \"c\": 0.5}", -1, "one optional one");
    expect(opt, "{\"c\": 1, \"a\": true}", 7, "out of order: nothing may follow the last one");
    expect(opt, "{\"a\": true, \"a\": true}", 13, "a key twice");
    ks_schema_free(opt);

    /* enum and const: the compact JSON texts */
    ks_schema *en = compile("{\"enum\": [\"red\", \"green\", 3, 31, null, [1, 2]]}");
    expect(en, "\"green\"", -1, "a string enum value");
    expect(en, "3", -1, "a number that is a prefix of another");
    expect(en, "31", -1, "the longer one");
    expect(en, "null", -1, "null");
    expect(en, "[1,2]", -1, "an array value, compact");
    expect(en, "\"blue\"", 1, "a string not in the enum");
    expect(en, "4", 0, "a number not in the enum");
    expect(en, "[1, 2]", 3, "spaces the compact text does not have");
    partial(en, "\"gre", "an enum string cut short");
    ks_schema_free(en);
    ks_schema *cst = compile("{\"type\": \"object\", \"properties\": {\"kind\": {\"const\": \"point\"}}, "
                             "\"required\": [\"kind\"]}");
    expect(cst, "{\"kind\": \"point\"}", -1, "const");
    expect(cst, "{\"kind\": \"line\"}", 10, "not the const");
    ks_schema_free(cst);

    /* unions told apart by their first byte */
    ks_schema *u = compile("{\"anyOf\": [{\"type\": \"string\"}, {\"type\": \"integer\"}, "
                           "{\"type\": \"array\", \"items\": {\"type\": \"boolean\"}, \"minItems\": 1}]}");
    expect(u, "\"x\"", -1, "anyOf: the string");
    expect(u, "-5", -1, "anyOf: the integer");
    expect(u, "[true, false]", -1, "anyOf: the array");
    expect(u, "[]", 1, "anyOf: minItems");
    expect(u, "true", 0, "anyOf: none of them");
    ks_schema_free(u);
    ks_schema *nul = compile("{\"type\": [\"string\", \"null\"]}");
    expect(nul, "null", -1, "a type list");
    expect(nul, "\"s\"", -1, "a type list");
    expect(nul, "1", 0, "a type list");
    ks_schema_free(nul);
    ks_schema *nest = compile("{\"anyOf\": [{\"type\": [\"string\", \"null\"]}, {\"type\": \"integer\"}]}");
    expect(nest, "null", -1, "a union inside a union");
    expect(nest, "7", -1, "a union inside a union");
    expect(nest, "true", 0, "a union inside a union");
    ks_schema_free(nest);
    ks_schema *list = compile("{\"$defs\": {\"n\": {\"type\": \"object\", \"properties\": {\"next\": {\"anyOf\": "
                              "[{\"$ref\": \"#/$defs/n\"}, {\"type\": \"null\"}]}}, \"required\": [\"next\"]}}, "
                              "\"$ref\": \"#/$defs/n\"}");
    expect(list, "{\"next\": {\"next\": null}}", -1, "a $ref back through anyOf");
    expect(list, "{\"next\": 1}", 9, "a $ref back through anyOf");
    ks_schema_free(list);

    /* string lengths in characters: a UTF-8 character or an escape is one */
    ks_schema *len = compile("{\"type\": \"string\", \"minLength\": 2, \"maxLength\": 3}");
    expect(len, "\"ab\"", -1, "2 characters");
    expect(len, "\"a\"", 2, "under minLength");
    expect(len, "\"abcd\"", 4, "over maxLength");
    expect(len, "\"\xc3\xa9\\u00e9x\"", -1, "a 2-byte character, an escape and a letter: 3");
    expect(len, "\"\\n\\t\\\\\\\"\"", 7, "4 escapes: the fourth is over");
    ks_schema_free(len);

    /* $ref into $defs, recursive; additionalProperties as a schema */
    ks_schema *tree = compile(
        "{\"$defs\": {\"node\": {\"type\": \"object\", \"properties\": {\"v\": {\"type\": \"integer\"}, "
        "\"kids\": {\"type\": \"array\", \"items\": {\"$ref\": \"#/$defs/node\"}}}, \"required\": [\"v\"]}}, "
        "\"$ref\": \"#/$defs/node\"}");
    expect(tree, "{\"v\": 1, \"kids\": [{\"v\": 2}, {\"v\": 3, \"kids\": []}]}", -1, "a recursive $ref");
    expect(tree, "{\"v\": 1, \"kids\": [{\"kids\": []}]}", 20, "a required property deep down");
    ks_schema_free(tree);
    ks_schema *map = compile("{\"type\": \"object\", \"additionalProperties\": {\"type\": \"number\"}}");
    expect(map, "{\"x\": 1, \"y z\": 2e5}", -1, "any keys, number values");
    expect(map, "{\"x\": \"s\"}", 6, "a string for a number value");
    ks_schema_free(map);

    /* what the recognizer cannot honour is refused, never loosened */
    refused("{\"anyOf\": [{\"type\": \"object\"}, {\"type\": \"object\", \"properties\": {\"a\": {}}}]}", "begin alike");
    refused("{\"type\": [\"number\", \"integer\"]}", "begin alike");
    refused("{\"type\": \"array\", \"items\": [{\"type\": \"string\"}]}", "tuple");
    refused("{\"type\": \"strin\"}", "unknown type 'strin'");
    refused("{\"properties\": {\"a\": {}}, \"required\": [\"b\"]}", "'b' is not among the properties");
    refused("{\"$ref\": \"#/$defs/none\"}", "does not point into this schema");
    refused("{\"allOf\": [{}, {}]}", "exactly one");
    refused("{\"enum\": []}", "allows nothing");
    refused("false", "allows nothing");
    return t_done();
}
